// A float16 row's whole update in one pass on AVX-512 CPUs: 16 elements at a time widened (vcvtph2ps),
// updated by the optimizer math of graphtrain/optim_math.h and rounded back (half_rows_avx512.h), in
// registers. The loop it replaces widened the row into a float32 buffer, ran the row function over the
// buffer and rounded it in a third pass: GCC 12 folds bfloat16's widening (a shift) into the update's
// loads but no float16 conversion, so float16 rows paid two passes more than bfloat16 ones (SGD,
// row-wise Adagrad and Adagrad at 0.80-0.90x of float32's speed per row, bench/half.py).
//
// Every operation is the row function's, in its order, each rounded alone (optim_cpu.cpp, which
// includes this, builds without multiply-add contraction), so the rows and states written are bit for
// bit those of the three passes: tests/native/cpp/half_rows_exhaustive.cpp compares them. Adam is not
// here: its row function on a widened row already runs at float32's speed.
#pragma once

#include "half_rows_avx512.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__CUDACC__) && !defined(GT_NO_AVX512_ROWS)

namespace avx512 {

// The pass: `body(j, w, gd)` returns elements j..j+15 of the row updated from their float32 values and
// decayed gradients. dim is a multiple of 16 (fp16_fused_fits).
template <bool DECAY, class Body>
GT_AVX512 __attribute__((always_inline)) inline void fp16_update_pass(uint16_t* w, float* x, const float* g,
                                                                      int64_t dim, float wd, uint32_t key,
                                                                      Body body) {
  const __m512i step = round_bits_step();
  const __m512 wdv = _mm512_set1_ps(wd);
  __m512i bits = first_round_bits(key);
  __mmask16 outside = 0;
  for (int64_t j = 0; j < dim; j += 16) {
    __m512 wj = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j)));
    __m512 gd = _mm512_loadu_ps(g + j);
    if constexpr (DECAY) gd = _mm512_add_ps(gd, _mm512_mul_ps(wdv, wj));  // decayed: g + wd * w
    const __m512i u = _mm512_castps_si512(body(j, wj, gd));
    _mm512_storeu_si512(x + j, u);
    outside |= fp16_outside(u);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + j), fp16_round16_fast(u, bits));
    bits = _mm512_add_epi32(bits, step);
  }
  if (outside) fp16_row_round_exact(w, x, dim, key);
}

template <class Body>
GT_AVX512 __attribute__((always_inline)) inline void fp16_update(uint16_t* w, float* x, const float* g, int64_t dim,
                                                                 float wd, uint32_t key, Body body) {
  if (wd == 0.0f)
    fp16_update_pass<false>(w, x, g, dim, wd, key, body);
  else
    fp16_update_pass<true>(w, x, g, dim, wd, key, body);
}

// sum_sq_decayed without decay for a width of whole vectors: its kLanes (16) partial sums, one vector,
// then added in lane order.
GT_AVX512 __attribute__((always_inline)) inline float sum_sq(const float* g, int64_t dim) {
  static_assert(graphtrain::kLanes == 16, "one vector of partial sums");
  __m512 part = _mm512_setzero_ps();
  for (int64_t j = 0; j < dim; j += 16) {
    const __m512 gj = _mm512_loadu_ps(g + j);
    part = _mm512_add_ps(part, _mm512_mul_ps(gj, gj));
  }
  alignas(64) float lane[16];
  _mm512_store_ps(lane, part);
  float sq = 0.0f;
  for (int l = 0; l < 16; ++l) sq += lane[l];
  return sq;
}

// Whether fp16_update_row updates a row of this optimizer, width and decay: not Adam (above), a width
// of whole vectors, and row-wise Adagrad only without decay (its mean of squares would need the row
// widened before the pass).
inline bool fp16_fused_fits(int32_t kind, int64_t dim, const graphtrain::OptimParams& p) {
  if (dim % 16 != 0) return false;
  if (kind == graphtrain::kSGD || kind == graphtrain::kAdagrad) return true;
  return kind == graphtrain::kRowwiseAdagrad && p.weight_decay == 0.0f;
}

// Float16 row `w` (row r of the table) updated by optimizer `kind` with the reduced gradient `g` and
// written back with the random bits of round_bits(key, j); `x` (dim floats) holds the float32 row for
// a row written again by fp16_round16. The optimizer's state as update_row takes it (state0: Adagrad's
// G, row-wise Adagrad's one per row). DIM > 0: the row's width, fixed at compile time as the update
// loop's (0: `dim_rt`).
template <int DIM>
GT_AVX512 __attribute__((always_inline)) inline void fp16_update_row(int32_t kind, uint16_t* w, float* x,
                                                                     const float* g, int64_t dim_rt, float* state0,
                                                                     int64_t r, const graphtrain::OptimParams p,
                                                                     uint32_t key) {
  const int64_t dim = DIM > 0 ? DIM : dim_rt;
  const __m512 lr = _mm512_set1_ps(p.lr);
  switch (kind) {
    case graphtrain::kSGD:  // sgd_elem: w -= lr * gd
      fp16_update(w, x, g, dim, p.weight_decay, key,
                  [&](int64_t, __m512 wj, __m512 gd) GT_AVX512 { return _mm512_sub_ps(wj, _mm512_mul_ps(lr, gd)); });
      break;
    case graphtrain::kAdagrad: {  // adagrad_elem: G += gd * gd; w -= lr * gd / (sqrt(G) + eps)
      float* G = state0 + r * dim;
      const __m512 eps = _mm512_set1_ps(p.eps);
      fp16_update(w, x, g, dim, p.weight_decay, key, [&](int64_t j, __m512 wj, __m512 gd) GT_AVX512 {
        const __m512 acc = _mm512_add_ps(_mm512_loadu_ps(G + j), _mm512_mul_ps(gd, gd));
        _mm512_storeu_ps(G + j, acc);
        return _mm512_sub_ps(wj, _mm512_div_ps(_mm512_mul_ps(lr, gd), _mm512_add_ps(_mm512_sqrt_ps(acc), eps)));
      });
      break;
    }
    case graphtrain::kRowwiseAdagrad: {  // no decay (fp16_fused_fits): the mean of squares is g's alone
      float* G = state0 + r;
      *G = graphtrain::rowwise_accumulate(*G, sum_sq(g, dim), dim);
      const __m512 scale = _mm512_set1_ps(graphtrain::rowwise_scale(*G, p));
      fp16_update(w, x, g, dim, 0.0f, key,  // rowwise_elem: w -= scale * gd
                  [&](int64_t, __m512 wj, __m512 gd) GT_AVX512 { return _mm512_sub_ps(wj, _mm512_mul_ps(scale, gd)); });
      break;
    }
    default:
      break;
  }
}

}  // namespace avx512

#else  // the portable build: never fits, so the three passes run

namespace avx512 {
inline bool fp16_fused_fits(int32_t, int64_t, const graphtrain::OptimParams&) { return false; }
template <int DIM>
inline void fp16_update_row(int32_t, uint16_t*, float*, const float*, int64_t, float*, int64_t,
                            const graphtrain::OptimParams, uint32_t) {}
}  // namespace avx512

#endif
