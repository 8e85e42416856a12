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

// fp16_round on 16 elements, every case: the element function's selects, lane by lane (u: the
// float32 bits, r: the random bits). Taken for a row with a value outside the fast case below: a zero
// or a float16 subnormal (0.05 % of the elements of an N(0, 0.1) row, in 6 % of its rows of 128),
// past 65,504, an infinity or a NaN. It had been the element functions, one by one: a row with one
// such value cost as much as ~60 in-range ones.
GT_AVX512 inline __m256i fp16_round16(__m512i u, __m512i r) {
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  const __m512i c13 = _mm512_set1_epi32(13);
  // drop = e >= -14 ? 13 : (e >= -24 ? -1 - e : 23), e = (a >> 23) - 127: on the biased exponent b,
  // -1 - e = 126 - b
  const __m512i b = _mm512_srli_epi32(a, 23);
  __m512i drop = _mm512_set1_epi32(23);
  drop = _mm512_mask_sub_epi32(drop, _mm512_cmpge_epu32_mask(a, _mm512_set1_epi32(0x33800000)),
                               _mm512_set1_epi32(126), b);
  drop = _mm512_mask_mov_epi32(drop, _mm512_cmpge_epu32_mask(a, _mm512_set1_epi32(0x38800000)), c13);
  const __m512i mask = _mm512_sub_epi32(_mm512_sllv_epi32(_mm512_set1_epi32(1), drop), _mm512_set1_epi32(1));
  const __m512i up = _mm512_srlv_epi32(r, _mm512_sub_epi32(_mm512_set1_epi32(32), drop));
  __m512i mag = _mm512_andnot_si512(mask, _mm512_add_epi32(a, up));
  // below 2^-24: 2^-24 when a * 2^24 > (r >> 8) * 2^-24, else 0
  const __m512 scaled = _mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(16777216.0f));
  const __m512 draw =
      _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(r, 8)), _mm512_set1_ps(5.9604644775390625e-8f));
  const __mmask16 tiny_up = _mm512_cmp_ps_mask(scaled, draw, _CMP_GT_OQ);
  const __mmask16 tiny = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(0x33800000));
  mag = _mm512_mask_mov_epi32(mag, tiny, _mm512_maskz_mov_epi32(tiny_up, _mm512_set1_epi32(0x33800000)));
  mag = _mm512_mask_mov_epi32(mag, _mm512_cmpge_epu32_mask(a, _mm512_set1_epi32(0x47800000)), a);
  // fp16_exact of mag (its sign apart)
  const __m512i small = _mm512_min_epu32(mag, _mm512_set1_epi32(0x38800000));
  const __m512i sub = _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_castsi512_ps(small), _mm512_set1_ps(16777216.0f)));
  const __m512i normal = _mm512_and_si512(
      _mm512_or_si512(_mm512_slli_epi32(_mm512_sub_epi32(_mm512_srli_epi32(mag, 23), _mm512_set1_epi32(112)), 10),
                      _mm512_and_si512(_mm512_srli_epi32(mag, 13), _mm512_set1_epi32(0x3ff))),
      _mm512_set1_epi32(0xffff));
  __m512i h = _mm512_mask_mov_epi32(normal, _mm512_cmplt_epu32_mask(mag, _mm512_set1_epi32(0x38800000)), sub);
  h = _mm512_mask_mov_epi32(h, _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x477fe000)), _mm512_set1_epi32(0x7bff));
  h = _mm512_mask_mov_epi32(h, _mm512_cmpeq_epu32_mask(mag, _mm512_set1_epi32(0x7f800000)), _mm512_set1_epi32(0x7c00));
  h = _mm512_mask_mov_epi32(h, _mm512_cmpgt_epu32_mask(mag, _mm512_set1_epi32(0x7f800000)), _mm512_set1_epi32(0x7e00));
  h = _mm512_or_si512(h, _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000)));
  return _mm512_cvtepi32_epi16(h);
}

// fp16_round's normal case, |x| in [2^-14, 65504], on 16 elements from their float32 bits u: the random
// bits added below float16's last place and cut off leave a float that float16 holds exactly (past
// 65504 a carry could reach 65536, which fp16_exact saturates), so the conversion's own rounding never
// acts. fp16_outside notes the lanes outside that case; a row with any is written again by fp16_round16
// whole. A branch
// per row and not per 16 elements: with one per vector, Adagrad's float16 step took 12.4-14 ms per
// 100,000 rows of 128 against 8.0-8.8 ms without it (0.8 % of an N(0, 0.1) row's vectors are outside).
GT_AVX512 inline __m256i fp16_round16_fast(__m512i u, __m512i bits) {
  const __m512i t = _mm512_and_si512(_mm512_add_epi32(u, _mm512_srli_epi32(bits, 19)), _mm512_set1_epi32(~0x1fff));
  return _mm512_cvtps_ph(_mm512_castsi512_ps(t), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
GT_AVX512 inline __mmask16 fp16_outside(__m512i u) {
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
  return _mm512_cmpgt_epu32_mask(_mm512_sub_epi32(a, _mm512_set1_epi32(0x38800000)),
                                 _mm512_set1_epi32(0x477fe000 - 0x38800000));
}

// The whole vectors of a row written again from its float32 `x` by fp16_round16.
GT_AVX512 inline void fp16_row_round_exact(uint16_t* w, const float* x, int64_t whole, uint32_t key) {
  const __m512i step = round_bits_step();
  __m512i bits = first_round_bits(key);
  for (int64_t j = 0; j < whole; j += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + j), fp16_round16(_mm512_loadu_si512(x + j), bits));
    bits = _mm512_add_epi32(bits, step);
  }
}

GT_AVX512 inline void fp16_row_round(uint16_t* w, const float* x, int64_t dim, uint32_t key) {
  const __m512i step = round_bits_step();
  __m512i bits = first_round_bits(key);
  __mmask16 outside = 0;
  const int64_t whole = dim & ~int64_t{15};  // a bound GCC folds where dim is a constant
  for (int64_t j = 0; j < whole; j += 16) {
    const __m512i u = _mm512_loadu_si512(x + j);
    outside |= fp16_outside(u);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + j), fp16_round16_fast(u, bits));
    bits = _mm512_add_epi32(bits, step);
  }
  if (outside) fp16_row_round_exact(w, x, whole, key);
  for (int64_t j = whole; j < dim; ++j) w[j] = graphtrain::fp16_round(x[j], graphtrain::round_bits(key, j));
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
