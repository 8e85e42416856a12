// Half rows in and out on AVX-512 CPUs: the bits of optim_math.h's fast loops (fp16_row_to_float,
// half_row_round) in fewer operations, with F16C's conversions for float16 and the range noted in the
// writing loop. GCC 12 vectorises no _Float16 conversion, and its vectorised bfloat16 loops had taken
// 256-bit vectors for some optimizers; these are written with intrinsics, so they are 512-bit in every
// instance. The update loop takes them where the CPU has AVX-512 and F16C (update_rows.h: apply_rows),
// the portable loops elsewhere; so does the fast lane widening a half table's pushed gradients
// (fastlane_requests.cpp). tests/native/cpp/half_rows_exhaustive.cpp runs every value the fast paths
// take through both and the element functions.
#pragma once

#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__CUDACC__) && !defined(GT_NO_AVX512_ROWS)

// GCC 12 warns of the `undefined` vectors its own AVX-512 intrinsics pass as merge sources, where
// they are inlined (a false positive: every lane is written).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#define GT_AVX512 __attribute__((target("avx512f,f16c")))

namespace avx512 {

// round_bits(key, j) for the 16 elements from j = 0, and the step to the next 16.
GT_AVX512 inline __m512i first_round_bits(uint32_t key) {
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(key)),
                          _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(0x9e3779b9u))));
}
GT_AVX512 inline __m512i round_bits_step() { return _mm512_set1_epi32(static_cast<int>(0x9e3779b9u * 16u)); }

// vcvtph2ps is exact on every float16, subnormals included; a signalling NaN comes back quiet, which
// changes no stored bits (a NaN is written back as float16's one NaN, fp16_exact).
GT_AVX512 inline void fp16_row_to_float(float* x, const uint16_t* w, int64_t dim) {
  int64_t j = 0;
  for (; j + 16 <= dim; j += 16)
    _mm512_storeu_ps(x + j, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j))));
  for (; j < dim; ++j) x[j] = graphtrain::fp16_to_float(w[j]);
}

GT_AVX512 inline void bf16_row_to_float(float* x, const uint16_t* w, int64_t dim) {
  int64_t j = 0;
  for (; j + 16 <= dim; j += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j));
    _mm512_storeu_si512(x + j, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  for (; j < dim; ++j) x[j] = graphtrain::bf16_to_float(w[j]);
}

// fp16_round's normal case, |x| in [2^-14, 65536): the random bits added below float16's last place
// and cut off leave a float that float16 holds exactly (65536 becomes infinity, as fp16_exact makes
// it), so the conversion's own rounding never acts. A row with a value outside that range is written
// by the element functions, as half_row_round does; so are the elements past the last 16.
GT_AVX512 inline void fp16_row_round(uint16_t* w, const float* x, int64_t dim, uint32_t key) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), cut = _mm512_set1_epi32(~0x1fff);
  const __m512i step = round_bits_step();
  __m512i bits = first_round_bits(key), lo = _mm512_set1_epi32(-1), hi = _mm512_setzero_si512();
  int64_t j = 0;
  for (; j + 16 <= dim; j += 16) {
    const __m512i u = _mm512_loadu_si512(x + j);
    const __m512i a = _mm512_and_si512(u, abs_mask);
    lo = _mm512_min_epu32(lo, a);
    hi = _mm512_max_epu32(hi, a);
    const __m512i t = _mm512_and_si512(_mm512_add_epi32(u, _mm512_srli_epi32(bits, 19)), cut);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + j),
                        _mm512_cvtps_ph(_mm512_castsi512_ps(t), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    bits = _mm512_add_epi32(bits, step);
  }
  const bool in_range = _mm512_reduce_min_epu32(lo) >= 0x38800000u && _mm512_reduce_max_epu32(hi) < 0x47800000u;
  for (int64_t k = in_range ? j : 0; k < dim; ++k) w[k] = graphtrain::fp16_round(x[k], graphtrain::round_bits(key, k));
}

// bf16_round with no NaN: the random bits added below the cut and the upper half kept (infinity's low
// half is 0: no carry). A row with a NaN is written by the element function, which keeps it a NaN.
GT_AVX512 inline void bf16_row_round(uint16_t* w, const float* x, int64_t dim, uint32_t key) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i step = round_bits_step();
  __m512i bits = first_round_bits(key), hi = _mm512_setzero_si512();
  int64_t j = 0;
  for (; j + 16 <= dim; j += 16) {
    const __m512i u = _mm512_loadu_si512(x + j);
    hi = _mm512_max_epu32(hi, _mm512_and_si512(u, abs_mask));
    const __m512i t = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_srli_epi32(bits, 16)), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + j), _mm512_cvtepi32_epi16(t));
    bits = _mm512_add_epi32(bits, step);
  }
  const bool no_nan = _mm512_reduce_max_epu32(hi) <= 0x7f800000u;
  for (int64_t k = no_nan ? j : 0; k < dim; ++k) w[k] = graphtrain::bf16_round(x[k], graphtrain::round_bits(key, k));
}

// Whether this CPU runs the functions above.
inline bool supported() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c");
  return yes;
}

}  // namespace avx512

#else  // not x86-64 (or built with -DGT_NO_AVX512_ROWS): supported() is false, and these are the portable loops

#define GT_AVX512

namespace avx512 {

inline void fp16_row_to_float(float* x, const uint16_t* w, int64_t dim) { graphtrain::fp16_row_to_float(x, w, dim); }
inline void bf16_row_to_float(float* x, const uint16_t* w, int64_t dim) {
  for (int64_t j = 0; j < dim; ++j) x[j] = graphtrain::bf16_to_float(w[j]);
}
inline void fp16_row_round(uint16_t* w, const float* x, int64_t dim, uint32_t key) {
  graphtrain::half_row_round(w, x, dim, key, graphtrain::kTableFloat16);
}
inline void bf16_row_round(uint16_t* w, const float* x, int64_t dim, uint32_t key) {
  graphtrain::half_row_round(w, x, dim, key, graphtrain::kTableBFloat16);
}
inline bool supported() { return false; }

}  // namespace avx512

#endif
