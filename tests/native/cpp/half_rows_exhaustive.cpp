// Every value the CPU core's fast half-row loops take (optim_math.h: half_row_round, fp16_row_to_float)
// against the element functions the CUDA core calls: every float32 in float16's normal range (both
// signs), every float32 that is not a NaN for bfloat16, every normal float16 widened. Rows of 128
// consecutive values, so each goes down the fast path; the random bits are round_bits(key, j) for a key
// that changes with the row, so every element sees a different draw. Then rows with one value off the
// fast path, which must go the element functions' way whole. Prints "<type> <differences> <of>"
// per check and exits 1 if any value differs. On a CPU with AVX-512 and F16C the same walks run through
// the update loop's intrinsics loops too (cuda/src/half_rows_avx512.h), as "avx512-..." checks.
#include "graphtrain/optim_math.h"
#include "half_rows_avx512.h"

#include <cstdio>
#include <initializer_list>

using namespace graphtrain;

namespace {

constexpr int64_t kDim = 128;

// The loops under test: the portable ones of optim_math.h or half_rows_avx512.h's.
template <bool AVX512>
void round_row(uint16_t* w, const float* x, int64_t dim, uint32_t key, int32_t dtype) {
  if constexpr (AVX512) {
    if (dtype == kTableBFloat16)
      avx512::bf16_row_round(w, x, dim, key);
    else
      avx512::fp16_row_round(w, x, dim, key);
  } else {
    half_row_round(w, x, dim, key, dtype);
  }
}

template <bool AVX512>
void widen_row(float* x, const uint16_t* w, int64_t dim) {
  if constexpr (AVX512)
    avx512::fp16_row_to_float(x, w, dim);
  else
    fp16_row_to_float(x, w, dim);
}

template <bool AVX512>
uint64_t float16_rounding(uint64_t& checked) {
  uint64_t bad = 0, n = 0;
#pragma omp parallel for reduction(+ : bad, n) schedule(static)
  for (uint32_t base = 0x38800000u; base < 0x47800000u; base += kDim) {
    for (uint32_t sign = 0; sign < 2; ++sign) {
      float x[kDim];
      uint16_t w[kDim];
      for (int64_t j = 0; j < kDim; ++j) x[j] = bits_to_float((base + static_cast<uint32_t>(j)) | (sign << 31));
      const uint32_t key = round_key(sign, base);
      round_row<AVX512>(w, x, kDim, key, kTableFloat16);
      for (int64_t j = 0; j < kDim; ++j) bad += w[j] != fp16_round(x[j], round_bits(key, j));
      n += kDim;
    }
  }
  checked = n;
  return bad;
}

template <bool AVX512>
uint64_t bfloat16_rounding(uint64_t& checked) {
  uint64_t bad = 0, n = 0;
#pragma omp parallel for reduction(+ : bad, n) schedule(static)
  for (uint64_t base = 0; base < (1ull << 32); base += kDim) {
    float x[kDim];
    uint16_t w[kDim];
    int64_t m = 0;
    for (int64_t j = 0; j < kDim; ++j) {
      const uint32_t u = static_cast<uint32_t>(base + j);
      if ((u & 0x7fffffffu) <= 0x7f800000u) x[m++] = bits_to_float(u);  // NaNs take the element path
    }
    const uint32_t key = round_key(7, static_cast<int64_t>(base));
    round_row<AVX512>(w, x, m, key, kTableBFloat16);
    for (int64_t j = 0; j < m; ++j) bad += w[j] != bf16_round(x[j], round_bits(key, j));
    n += m;
  }
  checked = n;
  return bad;
}

template <bool AVX512>
uint64_t float16_widening(uint64_t& checked) {
  uint64_t bad = 0, n = 0;
  for (uint32_t sign = 0; sign < 2; ++sign)
    for (uint32_t base = 0x0400u; base < 0x7c00u; base += 64) {
      uint16_t h[64];
      float x[64];
      for (int j = 0; j < 64; ++j) h[j] = static_cast<uint16_t>((base + j) | (sign << 15));
      widen_row<AVX512>(x, h, 64);
      for (int j = 0; j < 64; ++j) bad += float_to_bits(x[j]) != float_to_bits(fp16_to_float(h[j]));
      n += 64;
    }
  checked = n;
  return bad;
}

// Rows of in-range values with one value off the fast path (zero, float16 subnormals and what rounds
// to them, 65,536 and past, infinities, NaNs of every kind) at a lane start, a lane end, the last
// element or a tail past the last 16: the whole row must take the element functions' bits (a widened
// NaN need only stay a NaN: vcvtph2ps quiets a signalling one, and the write-back makes one NaN of any).
template <bool AVX512>
uint64_t special_rows(uint64_t& checked) {
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x33800000u, 0x35000001u, 0x387fffffu, 0x30000000u,
                               0x47800000u, 0x47ffffffu, 0x7f7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u,
                               0x7fbfffffu, 0x7fc00000u, 0x7fffffffu, 0xffc00000u};
  const uint16_t half_specials[] = {0x0000u, 0x8000u, 0x0001u, 0x03ffu, 0x8200u, 0x7c00u,
                                    0xfc00u, 0x7c01u, 0x7dffu, 0x7e00u, 0x7fffu, 0xfe00u};
  const int64_t at[] = {0, 15, 16, 63, 127, 128};
  uint64_t bad = 0, n = 0;
  for (int32_t dtype : {kTableFloat16, kTableBFloat16})
    for (uint32_t sp : specials)
      for (int64_t pos : at) {
        const int64_t dim = pos < 128 ? 128 : 129;
        float x[129];
        uint16_t w[129];
        for (int64_t j = 0; j < dim; ++j) x[j] = bits_to_float(0x3f000000u + static_cast<uint32_t>(j) * 0x1234u);
        x[pos] = bits_to_float(sp);
        const uint32_t key = round_key(sp, pos);
        round_row<AVX512>(w, x, dim, key, dtype);
        for (int64_t j = 0; j < dim; ++j)
          bad += w[j] != (dtype == kTableBFloat16 ? bf16_round(x[j], round_bits(key, j))
                                                  : fp16_round(x[j], round_bits(key, j)));
        n += dim;
      }
  for (uint16_t sp : half_specials)
    for (int64_t pos : at) {
      const int64_t dim = pos < 128 ? 128 : 129;
      uint16_t h[129];
      float x[129];
      for (int64_t j = 0; j < dim; ++j) h[j] = static_cast<uint16_t>(0x3c00u + j);
      h[pos] = sp;
      widen_row<AVX512>(x, h, dim);
      for (int64_t j = 0; j < dim; ++j) {
        const float want = fp16_to_float(h[j]);
        bad += want != want ? x[j] == x[j] : float_to_bits(x[j]) != float_to_bits(want);
      }
      n += dim;
    }
  checked = n;
  return bad;
}

template <bool AVX512>
uint64_t walk(const char* prefix) {
  uint64_t n = 0, total_bad = 0, bad = 0;
  bad = float16_rounding<AVX512>(n);
  std::printf("%sfloat16-round %llu %llu\n", prefix, static_cast<unsigned long long>(bad),
              static_cast<unsigned long long>(n));
  total_bad += bad;
  bad = bfloat16_rounding<AVX512>(n);
  std::printf("%sbfloat16-round %llu %llu\n", prefix, static_cast<unsigned long long>(bad),
              static_cast<unsigned long long>(n));
  total_bad += bad;
  bad = float16_widening<AVX512>(n);
  std::printf("%sfloat16-widen %llu %llu\n", prefix, static_cast<unsigned long long>(bad),
              static_cast<unsigned long long>(n));
  total_bad += bad;
  bad = special_rows<AVX512>(n);
  std::printf("%sspecial-rows %llu %llu\n", prefix, static_cast<unsigned long long>(bad),
              static_cast<unsigned long long>(n));
  total_bad += bad;
  return total_bad;
}

}  // namespace

int main() {
  uint64_t bad = walk<false>("");
  if (avx512::supported()) bad += walk<true>("avx512-");
  return bad == 0 ? 0 : 1;
}
