// Every value the CPU core's fast half-row loops take (optim_math.h: half_row_round, fp16_row_to_float)
// against the element functions the CUDA core calls: every float32 in float16's normal range (both
// signs), every float32 that is not a NaN for bfloat16, every normal float16 widened. Rows of 128
// consecutive values, so each goes down the fast path; the random bits are round_bits(key, j) for a key
// that changes with the row, so every element sees a different draw. Then rows with one value off the
// fast path, which must go the element functions' way whole. Prints "<type> <differences> <of>"
// per check and exits 1 if any value differs. On a CPU with AVX-512 and F16C the same walks run through
// the update loop's intrinsics loops too (cuda/src/half_rows_avx512.h), as "avx512-..." checks.
// As in optim_cpu.cpp: no multiply-add contraction, so the one-pass update and the three passes are
// compared as the core builds them.
#pragma GCC optimize("fp-contract=off")

#include "graphtrain/optim_math.h"
#include "half_rows_avx512.h"
#include "half_update_avx512.h"

#include <cstdio>
#include <initializer_list>
#include <random>

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
// to them, past 65,504 (saturated), infinities, NaNs of every kind) at a lane start, a lane end, the last
// element or a tail past the last 16: the whole row must take the element functions' bits (a widened
// NaN need only stay a NaN: vcvtph2ps quiets a signalling one, and the write-back makes one NaN of any).
template <bool AVX512>
uint64_t special_rows(uint64_t& checked) {
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x33800000u, 0x35000001u, 0x387fffffu, 0x30000000u,
                               0x47800000u, 0x47ffffffu, 0x7f7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u,
                               0x7fbfffffu, 0x7fc00000u, 0x7fffffffu, 0xffc00000u, 0x477fe001u, 0xc77fffffu};
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

// Every float32, NaNs and all, through the AVX-512 rounding (its fast vectors and fp16_round16 for the
// rest) against fp16_round. Rows of 128 consecutive bit patterns: each vector is of one kind or two.
uint64_t float16_rounding_all(uint64_t& checked) {
  uint64_t bad = 0, n = 0;
#pragma omp parallel for reduction(+ : bad, n) schedule(static)
  for (uint64_t base = 0; base < (1ull << 32); base += kDim) {
    float x[kDim];
    uint16_t w[kDim];
    for (int64_t j = 0; j < kDim; ++j) x[j] = bits_to_float(static_cast<uint32_t>(base + j));
    const uint32_t key = round_key(11, static_cast<int64_t>(base));
    avx512::fp16_row_round(w, x, kDim, key);
    for (int64_t j = 0; j < kDim; ++j) bad += w[j] != fp16_round(x[j], round_bits(key, j));
    n += kDim;
  }
  checked = n;
  return bad;
}

// The one-pass float16 update (half_update_avx512.h) against the three passes it replaces (widen, the
// row function of optim_math.h, round; the element functions for the widening and rounding), bit for
// bit in the row and the state: SGD, Adagrad and row-wise Adagrad, with and without decay where it
// takes them, rows of 16 to 256 (the width fixed at compile time and not), random rows with zeros,
// float16 subnormals, values near 65,504, infinities and NaNs mixed in.
// The row function under test, in a function of its target (always_inline into this one only).
template <int DIM>
GT_AVX512 __attribute__((noinline)) void fused_row(int32_t kind, uint16_t* w, const float* g, int64_t dim,
                                                   float* state0, int64_t r, const OptimParams p, uint32_t key) {
  float x[256];
  avx512::fp16_update_row<DIM>(kind, w, x, g, dim, state0, r, p, key);
}

// The three passes, built for the baseline target: without contraction every operation rounds alone
// on any CPU, so the AVX-512 path must give these bits.
__attribute__((noinline)) void three_passes(int32_t kind, uint16_t* want, float* x, const uint16_t* w,
                                                      const float* g, int64_t dim, float* state, const OptimParams p,
                                                      uint32_t key) {
  for (int64_t j = 0; j < dim; ++j) x[j] = fp16_to_float(w[j]);
  if (kind == kSGD) sgd_row(x, x, kTableFloat32, g, dim, p);
  if (kind == kAdagrad) adagrad_row(x, x, kTableFloat32, state, g, dim, p);
  if (kind == kRowwiseAdagrad) rowwise_adagrad_row(x, x, kTableFloat32, state, g, dim, p);
  for (int64_t j = 0; j < dim; ++j) want[j] = fp16_round(x[j], round_bits(key, j));
}

template <int DIM>
uint64_t fused_rows(int64_t dim, std::mt19937& rng, uint64_t& n) {
  const uint16_t specials[] = {0x0000u, 0x8000u, 0x0001u, 0x83ffu, 0x7bffu, 0xfbffu, 0x7c00u, 0xfc00u, 0x7e00u};
  std::normal_distribution<float> normal(0.0f, 0.1f), grad(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 40);
  uint64_t bad = 0;
  for (int32_t kind : {kSGD, kAdagrad, kRowwiseAdagrad})
    for (float wd : {0.0f, 0.01f})
      for (int rep = 0; rep < 200; ++rep) {
        OptimParams p{};
        p.lr = rep % 2 ? 0.01f : 3.0f;  // a large step carries some rows past 65,504
        p.eps = 1e-10f;
        p.weight_decay = wd;
        if (!avx512::fp16_fused_fits(kind, dim, p)) continue;
        uint16_t w[256], want[256];
        float g[256], x[256], G[257], G_want[257];
        for (int64_t j = 0; j < dim; ++j) {
          const int k = pick(rng);  // every third row without a special value: the fast path whole
          w[j] = k < 9 && rep % 3 ? specials[k] : fp16_round(normal(rng), static_cast<uint32_t>(rng()));
          g[j] = grad(rng);
          G[j] = G_want[j] = std::abs(grad(rng));
        }
        const uint32_t key = static_cast<uint32_t>(rng());
        three_passes(kind, want, x, w, g, dim, kind == kRowwiseAdagrad ? G_want + 1 : G_want, p, key);
        // state0 + r * dim for Adagrad and state0 + r for the row-wise: row 0 and row 1 of the state
        fused_row<DIM>(kind, w, g, dim, G, kind == kRowwiseAdagrad ? 1 : 0, p, key);
        for (int64_t j = 0; j < dim; ++j) bad += w[j] != want[j];
        const int64_t states = kind == kAdagrad ? dim : (kind == kRowwiseAdagrad ? 1 : 0);
        const int64_t at = kind == kRowwiseAdagrad ? 1 : 0;
        for (int64_t j = at; j < at + states; ++j) bad += float_to_bits(G[j]) != float_to_bits(G_want[j]);
        n += dim + states;
      }
  return bad;
}

uint64_t fused_update(uint64_t& checked) {
  std::mt19937 rng(47);
  uint64_t bad = 0, n = 0;
  bad += fused_rows<16>(16, rng, n) + fused_rows<128>(128, rng, n) + fused_rows<256>(256, rng, n);
  for (int64_t dim : {16, 48, 128, 208}) bad += fused_rows<0>(dim, rng, n);
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
  if constexpr (AVX512) {
    bad = float16_rounding_all(n);
    std::printf("%sfloat16-round-all %llu %llu\n", prefix, static_cast<unsigned long long>(bad),
                static_cast<unsigned long long>(n));
    total_bad += bad;
    bad = fused_update(n);
    std::printf("%sfused-update %llu %llu\n", prefix, static_cast<unsigned long long>(bad),
                static_cast<unsigned long long>(n));
    total_bad += bad;
  }
  return total_bad;
}

}  // namespace

int main() {
  uint64_t bad = walk<false>("");
  if (avx512::supported()) bad += walk<true>("avx512-");
  return bad == 0 ? 0 : 1;
}
