// Every value the CPU core's fast half-row loops take (optim_math.h: half_row_round, fp16_row_to_float)
// against the element functions the CUDA core calls: every float32 in float16's normal range (both
// signs), every float32 that is not a NaN for bfloat16, every normal float16 widened. Rows of 128
// consecutive values, so each goes down the fast path; the random bits are round_bits(key, j) for a key
// that changes with the row, so every element sees a different draw. Prints "<type> <differences> <of>"
// per check and exits 1 if any value differs.
#include "graphtrain/optim_math.h"

#include <cstdio>

using namespace graphtrain;

namespace {

constexpr int64_t kDim = 128;

uint64_t float16_rounding(uint64_t& checked) {
  uint64_t bad = 0, n = 0;
#pragma omp parallel for reduction(+ : bad, n) schedule(static)
  for (uint32_t base = 0x38800000u; base < 0x47800000u; base += kDim) {
    for (uint32_t sign = 0; sign < 2; ++sign) {
      float x[kDim];
      uint16_t w[kDim];
      for (int64_t j = 0; j < kDim; ++j) x[j] = bits_to_float((base + static_cast<uint32_t>(j)) | (sign << 31));
      const uint32_t key = round_key(sign, base);
      half_row_round(w, x, kDim, key, kTableFloat16);
      for (int64_t j = 0; j < kDim; ++j) bad += w[j] != fp16_round(x[j], round_bits(key, j));
      n += kDim;
    }
  }
  checked = n;
  return bad;
}

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
    half_row_round(w, x, m, key, kTableBFloat16);
    for (int64_t j = 0; j < m; ++j) bad += w[j] != bf16_round(x[j], round_bits(key, j));
    n += m;
  }
  checked = n;
  return bad;
}

uint64_t float16_widening(uint64_t& checked) {
  uint64_t bad = 0, n = 0;
  for (uint32_t sign = 0; sign < 2; ++sign)
    for (uint32_t base = 0x0400u; base < 0x7c00u; base += 64) {
      uint16_t h[64];
      float x[64];
      for (int j = 0; j < 64; ++j) h[j] = static_cast<uint16_t>((base + j) | (sign << 15));
      fp16_row_to_float(x, h, 64);
      for (int j = 0; j < 64; ++j) bad += float_to_bits(x[j]) != float_to_bits(fp16_to_float(h[j]));
      n += 64;
    }
  checked = n;
  return bad;
}

}  // namespace

int main() {
  uint64_t n = 0, total_bad = 0, bad = 0;
  bad = float16_rounding(n);
  std::printf("float16-round %llu %llu\n", static_cast<unsigned long long>(bad), static_cast<unsigned long long>(n));
  total_bad += bad;
  bad = bfloat16_rounding(n);
  std::printf("bfloat16-round %llu %llu\n", static_cast<unsigned long long>(bad), static_cast<unsigned long long>(n));
  total_bad += bad;
  bad = float16_widening(n);
  std::printf("float16-widen %llu %llu\n", static_cast<unsigned long long>(bad), static_cast<unsigned long long>(n));
  total_bad += bad;
  return total_bad == 0 ? 0 : 1;
}
