// Thin products of GAT-style attention scores (CPU): out = [x1, x2] @ w_t^T, where w_t has a few rows
// (2 x heads: each source scored for both sides of its edges) and x1, x2 are the sources' inputs whose
// columns follow each other (a layer's frozen data, then its learnable embedding). MKL's GEMM is blocked
// for wide outputs: with 8 output columns it ran at 16 GB/s where one pass over the inputs takes 45,
// and its w gradient (x^T @ g) at 2.5 GB/s.
//
// All float32, rows contiguous. The forward and x's gradient are per row. w's gradient adds each fixed
// chunk of kRows rows into a partial of its own, and the partials in chunk order: the sum is the same
// whatever the thread count (no atomics, no thread-dependent order), as in gnn_cpu.cpp.

#include "graphtrain/api.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

// The helpers are inlined into each clone of the entry points, so they are built for its instruction set
// (called, they would be the baseline x86-64 build).
#define GT_INLINE inline __attribute__((always_inline))
// Built for x86-64-v3 (AVX2 with FMA) and v4 (AVX-512) as well as the baseline: the sums are written with
// std::fma, one instruction there (GT_CLONES' "avx2" has no FMA, and ISO C++ contracts no a * b + c).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__CUDACC__)
#define GT_FMA_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define GT_FMA_CLONES
#endif

namespace {
constexpr int64_t kRows = 256;  // rows of one partial of w's gradient
constexpr int64_t kBlock = 4;   // rows scored together: each weight loaded once for four rows

// out[r * k + j] += <x[r, :], w[j * ldw + :]> for rows r0..r0+n (n <= kBlock) and every j. Four rows by two
// weights at a time: eight independent sums, enough to hide an FMA's latency, each weight and row loaded
// once for four (respectively two) of them.
GT_INLINE void score_rows(const float* x, int64_t n, int32_t cols, const float* w, int64_t ldw, int32_t k,
                          float* out) {
  int32_t j = 0;
  if (n == kBlock) {
    const float *x0 = x, *x1 = x + cols, *x2 = x + 2 * cols, *x3 = x + 3 * cols;
    for (; j + 2 <= k; j += 2) {
      const float *wa = w + j * ldw, *wb = wa + ldw;
      float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f, b0 = 0.0f, b1 = 0.0f, b2 = 0.0f, b3 = 0.0f;
#pragma omp simd reduction(+ : a0, a1, a2, a3, b0, b1, b2, b3)
      for (int32_t c = 0; c < cols; ++c) {
        a0 = std::fma(x0[c], wa[c], a0);
        a1 = std::fma(x1[c], wa[c], a1);
        a2 = std::fma(x2[c], wa[c], a2);
        a3 = std::fma(x3[c], wa[c], a3);
        b0 = std::fma(x0[c], wb[c], b0);
        b1 = std::fma(x1[c], wb[c], b1);
        b2 = std::fma(x2[c], wb[c], b2);
        b3 = std::fma(x3[c], wb[c], b3);
      }
      out[j] += a0;
      out[k + j] += a1;
      out[2 * k + j] += a2;
      out[3 * k + j] += a3;
      out[j + 1] += b0;
      out[k + j + 1] += b1;
      out[2 * k + j + 1] += b2;
      out[3 * k + j + 1] += b3;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int32_t jj = j; jj < k; ++jj) {
      const float* xi = x + i * cols;
      const float* wj = w + jj * ldw;
      float s = 0.0f;
#pragma omp simd reduction(+ : s)
      for (int32_t c = 0; c < cols; ++c) s = std::fma(xi[c], wj[c], s);
      out[i * k + jj] += s;
    }
  }
}

// The common case, k = 8 (four heads, both sides): a row's eight scores are one AVX2 vector. For eight rows
// at a time, each column's eight weights (wt: w transposed, cols x 8) are loaded once and each input
// element broadcast: eight independent sums and no horizontal adds (the general path above reduces each
// dot product across a vector, which cost it a third of its time).
constexpr int32_t kWide = 8;
GT_INLINE void score_rows8(const float* x, int32_t cols, const float* wt, float* out) {
  float acc[kWide][kWide] = {};
  for (int32_t c = 0; c < cols; ++c) {
    const float* wc = wt + static_cast<int64_t>(c) * kWide;
    for (int32_t i = 0; i < kWide; ++i) {
      const float xi = x[static_cast<int64_t>(i) * cols + c];
#pragma omp simd
      for (int32_t j = 0; j < kWide; ++j) acc[i][j] = std::fma(xi, wc[j], acc[i][j]);
    }
  }
  for (int32_t i = 0; i < kWide; ++i)
    for (int32_t j = 0; j < kWide; ++j) out[i * kWide + j] += acc[i][j];
}

// acc[j, :] += sum over rows r of g[r, j] * x[r, :], for the n rows of one chunk (w's gradient).
GT_INLINE void outer_rows(const float* x, const float* g, int64_t n, int32_t cols, int32_t k, float* acc,
                       int64_t ldacc) {
  int64_t r = 0;
  for (; r + kBlock <= n; r += kBlock) {
    const float *x0 = x + r * cols, *x1 = x0 + cols, *x2 = x1 + cols, *x3 = x2 + cols;
    const float* gr = g + r * k;
    for (int32_t j = 0; j < k; ++j) {
      const float g0 = gr[j], g1 = gr[k + j], g2 = gr[2 * k + j], g3 = gr[3 * k + j];
      float* a = acc + j * ldacc;
#pragma omp simd
      for (int32_t c = 0; c < cols; ++c) a[c] = std::fma(g3, x3[c], std::fma(g2, x2[c], std::fma(g1, x1[c], std::fma(g0, x0[c], a[c]))));
    }
  }
  for (; r < n; ++r) {
    const float* xr = x + r * cols;
    for (int32_t j = 0; j < k; ++j) {
      const float gj = g[r * k + j];
      float* a = acc + j * ldacc;
#pragma omp simd
      for (int32_t c = 0; c < cols; ++c) a[c] = std::fma(gj, xr[c], a[c]);
    }
  }
}

// gx[r, :] = sum over j of g[r, j] * w[j, :] (x's gradient, one row).
GT_INLINE void input_grad_row(const float* g, const float* w, int64_t ldw, int32_t cols, int32_t k, float* gx) {
  const float g0 = g[0];
#pragma omp simd
  for (int32_t c = 0; c < cols; ++c) gx[c] = g0 * w[c];
  for (int32_t j = 1; j < k; ++j) {
    const float gj = g[j];
    const float* wj = w + j * ldw;
#pragma omp simd
    for (int32_t c = 0; c < cols; ++c) gx[c] = std::fma(gj, wj[c], gx[c]);
  }
}
}  // namespace

// out (rows x k) = x1 @ w_t[:, :c1]^T + x2 @ w_t[:, c1:]^T, w_t (k x (c1 + c2)); x2 may be null (c2 = 0).
GT_API GT_FMA_CLONES void gt_thin_product(int64_t rows, const float* x1, int32_t c1, const float* x2, int32_t c2,
                                      const float* w_t, int32_t k, float* out, int32_t threads) {
  const int64_t ldw = static_cast<int64_t>(c1) + c2;
  if (k == kWide) {
    std::vector<float> wt(static_cast<size_t>(ldw * kWide));
    for (int64_t c = 0; c < ldw; ++c)
      for (int32_t j = 0; j < kWide; ++j) wt[c * kWide + j] = w_t[j * ldw + c];
    const int64_t full = rows / kWide;
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
    for (int64_t b = 0; b < full; ++b) {
      const int64_t r = b * kWide;
      float* o = out + r * k;
      std::fill(o, o + kWide * k, 0.0f);
      score_rows8(x1 + r * c1, c1, wt.data(), o);
      if (x2 != nullptr && c2 > 0) score_rows8(x2 + r * c2, c2, wt.data() + c1 * kWide, o);
    }
    for (int64_t r = full * kWide; r < rows; r += kBlock) {  // the last few rows
      const int64_t n = std::min(kBlock, rows - r);
      float* o = out + r * k;
      std::fill(o, o + n * k, 0.0f);
      score_rows(x1 + r * c1, n, c1, w_t, ldw, k, o);
      if (x2 != nullptr && c2 > 0) score_rows(x2 + r * c2, n, c2, w_t + c1, ldw, k, o);
    }
    return;
  }
  const int64_t blocks = (rows + kBlock - 1) / kBlock;
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t r = b * kBlock, n = std::min(kBlock, rows - r);
    float* o = out + r * k;
    std::fill(o, o + n * k, 0.0f);
    score_rows(x1 + r * c1, n, c1, w_t, ldw, k, o);
    if (x2 != nullptr && c2 > 0) score_rows(x2 + r * c2, n, c2, w_t + c1, ldw, k, o);
  }
}

// The gradients of gt_thin_product given g (rows x k): gx1 = g @ w_t[:, :c1] and gx2 = g @ w_t[:, c1:]
// (each skipped when null), and gw (k x (c1 + c2)) = g^T @ [x1, x2] (skipped when null).
GT_API GT_FMA_CLONES void gt_thin_product_grad(int64_t rows, const float* x1, int32_t c1, const float* x2, int32_t c2,
                                           const float* w_t, int32_t k, const float* g, float* gx1, float* gx2,
                                           float* gw, int32_t threads) {
  const int64_t ldw = static_cast<int64_t>(c1) + c2;
  const int32_t nt = std::max(1, threads);
  if (gx1 != nullptr || gx2 != nullptr) {
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      if (gx1 != nullptr) input_grad_row(g + r * k, w_t, ldw, c1, k, gx1 + r * c1);
      if (gx2 != nullptr) input_grad_row(g + r * k, w_t + c1, ldw, c2, k, gx2 + r * c2);
    }
  }
  if (gw == nullptr) return;
  const int64_t chunks = (rows + kRows - 1) / kRows;
  const int64_t size = k * ldw;
  std::fill(gw, gw + size, 0.0f);
  if (chunks == 0) return;
  std::vector<float> partial(static_cast<size_t>(chunks * size), 0.0f);
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t r = ch * kRows, n = std::min(kRows, rows - r);
    float* acc = partial.data() + ch * size;
    outer_rows(x1 + r * c1, g + r * k, n, c1, k, acc, ldw);
    if (x2 != nullptr && c2 > 0) outer_rows(x2 + r * c2, g + r * k, n, c2, k, acc + c1, ldw);
  }
  // the partials in chunk order, each column range summed by one thread
#pragma omp parallel for num_threads(nt) schedule(static)
  for (int64_t i = 0; i < size; ++i) {
    float s = 0.0f;
    for (int64_t ch = 0; ch < chunks; ++ch) s += partial[ch * size + i];
    gw[i] = s;
  }
}
