// Attention aggregation of GAT-style layers (CPU): the sums over a block's edges that torch would run as
// a sparse product per head (forward) and as gathers of (edges x heads x width) rows (backward).
//
// A block lists its edges grouped by destination: row v of the CSR (crow, col) holds v's in-edges, col
// their sources. alpha is (edges x heads); z is (sources x z_heads x width) with z_heads = heads (each
// head its own rows) or 1 (one row every head weighs: a layer that aggregates its input before its
// per-head transform); out and the gradient of out are (destinations x heads x width), or with
// head_major (heads x destinations x width), the layout a per-head batched GEMM reads without a copy;
// the gradient of z has z's layout. All float32, contiguous. A second input z2 (sources x z_heads x width2)
// may share the output: its columns follow z's in each row (GAT's frozen data and learnable embedding
// summed into one (heads, destinations, both) tensor, so one batched GEMM per head transforms both).
// Every loop runs over rows (destinations, or sources for the transpose), so each thread writes only
// its own rows: no atomics, and the sums come out the same whatever the thread count (each row adds
// its edges in their order).

#include "graphtrain/api.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace {
// Where head h of row v of a (rows x heads x width) tensor, or with head_major (heads x rows x width),
// starts (rows ld floats apart).
inline int64_t at(int64_t v, int32_t h, int64_t rows, int32_t heads, int64_t ld, int32_t head_major) {
  return head_major ? (static_cast<int64_t>(h) * rows + v) * ld : (v * heads + h) * ld;
}

inline void axpy(float* out, float w, const float* x, int32_t n) {
  for (int32_t f = 0; f < n; ++f) out[f] += w * x[f];
}

inline float dot(const float* a, const float* b, int32_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)  // a float sum vectorises only when its order may change
  for (int32_t f = 0; f < n; ++f) s += a[f] * b[f];
  return s;
}
}  // namespace

// out[v, h, :] = sum over v's edges e of alpha[e, h] * [z, z2][col[e], h or 0, :]: a row of out is z's
// width columns, then z2's width2 (z2 may be null with width2 = 0). Both parts in one pass over the edges,
// each output row written whole (two passes over a strided half of the row each cost more than they save).
GT_API GT_CLONES void gt_attention_sum(int64_t num_dst, const int64_t* crow, const int64_t* col, const float* alpha,
                                       const float* z, const float* z2, float* out, int32_t heads, int32_t z_heads,
                                       int32_t width, int32_t width2, int32_t head_major, int32_t threads) {
  const int64_t zw = static_cast<int64_t>(z_heads) * width, zw2 = static_cast<int64_t>(z_heads) * width2;
  const int64_t zstep = z_heads == 1 ? 0 : width, zstep2 = z_heads == 1 ? 0 : width2;
  const int64_t ld = static_cast<int64_t>(width) + width2;
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(dynamic, 64)
  for (int64_t v = 0; v < num_dst; ++v) {
    for (int32_t h = 0; h < heads; ++h) {
      float* oh = out + at(v, h, num_dst, heads, ld, head_major);
      std::fill(oh, oh + ld, 0.0f);
    }
    for (int64_t e = crow[v]; e < crow[v + 1]; ++e) {
      const float* a = alpha + e * heads;
      for (int32_t h = 0; h < heads; ++h) {
        float* oh = out + at(v, h, num_dst, heads, ld, head_major);
        axpy(oh, a[h], z + col[e] * zw + h * zstep, width);
        if (width2 > 0) axpy(oh + width, a[h], z2 + col[e] * zw2 + h * zstep2, width2);
      }
    }
  }
}

// The transpose: grad_z[u, h or 0, :] = sum over u's out-edges (row u of (crow_t, dst_t), edge ids
// edge_t) of alpha[e, h] * grad[dst, h, :] (with z_heads = 1, summed over the heads too). grad's rows lie
// ld floats apart: z's gradient may be a part of the columns of an output shared with other inputs.
GT_API GT_CLONES void gt_attention_sum_t(int64_t num_src, int64_t num_dst, const int64_t* crow_t,
                                         const int64_t* dst_t, const int64_t* edge_t, const float* alpha,
                                         const float* grad, float* grad_z, int32_t heads, int32_t z_heads,
                                         int32_t width, int64_t ld, int32_t head_major, int32_t threads) {
  const int64_t zw = static_cast<int64_t>(z_heads) * width;
  const int64_t zstep = z_heads == 1 ? 0 : width;
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(dynamic, 64)
  for (int64_t u = 0; u < num_src; ++u) {
    float* o = grad_z + u * zw;
    std::fill(o, o + zw, 0.0f);
    for (int64_t k = crow_t[u]; k < crow_t[u + 1]; ++k) {
      const float* a = alpha + edge_t[k] * heads;
      for (int32_t h = 0; h < heads; ++h) {
        axpy(o + h * zstep, a[h], grad + at(dst_t[k], h, num_dst, heads, ld, head_major), width);
      }
    }
  }
}

// grad_alpha[e, h] = <grad[v, h, :], [z, z2][col[e], h or 0, :]> for each edge e of each row v (grad's rows
// width + width2 wide, as gt_attention_sum writes them).
GT_API GT_CLONES void gt_attention_dot(int64_t num_dst, const int64_t* crow, const int64_t* col, const float* grad,
                                       const float* z, const float* z2, float* grad_alpha, int32_t heads,
                                       int32_t z_heads, int32_t width, int32_t width2, int32_t head_major,
                                       int32_t threads) {
  const int64_t zw = static_cast<int64_t>(z_heads) * width, zw2 = static_cast<int64_t>(z_heads) * width2;
  const int64_t zstep = z_heads == 1 ? 0 : width, zstep2 = z_heads == 1 ? 0 : width2;
  const int64_t ld = static_cast<int64_t>(width) + width2;
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(dynamic, 64)
  for (int64_t v = 0; v < num_dst; ++v) {
    for (int64_t e = crow[v]; e < crow[v + 1]; ++e) {
      for (int32_t h = 0; h < heads; ++h) {
        const float* gh = grad + at(v, h, num_dst, heads, ld, head_major);
        float s = dot(gh, z + col[e] * zw + h * zstep, width);
        if (width2 > 0) s += dot(gh + width, z2 + col[e] * zw2 + h * zstep2, width2);
        grad_alpha[e * heads + h] = s;
      }
    }
  }
}

// alpha[e, h] = softmax of e over row v's edges, per head: exp(e - max) / sum (DGL's edge_softmax over
// each destination's in-edges), where torch took ten passes of scatters and gathers over the edges.
// An empty row has no edges to write; a row's sum adds its edges in their order (any thread count).
GT_API GT_CLONES void gt_edge_softmax(int64_t num_dst, const int64_t* crow, const float* e, float* alpha,
                                      int32_t heads, int32_t threads) {
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(dynamic, 64)
  for (int64_t v = 0; v < num_dst; ++v) {
    for (int32_t h = 0; h < heads; ++h) {
      float top = -std::numeric_limits<float>::infinity();
      for (int64_t k = crow[v]; k < crow[v + 1]; ++k) top = std::max(top, e[k * heads + h]);
      float total = 0.0f;
      for (int64_t k = crow[v]; k < crow[v + 1]; ++k) {
        const float x = std::exp(e[k * heads + h] - top);
        alpha[k * heads + h] = x;
        total += x;
      }
      const float inv = 1.0f / total;
      for (int64_t k = crow[v]; k < crow[v + 1]; ++k) alpha[k * heads + h] *= inv;
    }
  }
}

// Its backward: grad_e[e, h] = alpha[e, h] * (grad[e, h] - sum over the row of alpha * grad).
GT_API GT_CLONES void gt_edge_softmax_grad(int64_t num_dst, const int64_t* crow, const float* alpha,
                                           const float* grad, float* grad_e, int32_t heads, int32_t threads) {
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(dynamic, 64)
  for (int64_t v = 0; v < num_dst; ++v) {
    for (int32_t h = 0; h < heads; ++h) {
      float dot = 0.0f;
      for (int64_t k = crow[v]; k < crow[v + 1]; ++k) dot += alpha[k * heads + h] * grad[k * heads + h];
      for (int64_t k = crow[v]; k < crow[v + 1]; ++k)
        grad_e[k * heads + h] = alpha[k * heads + h] * (grad[k * heads + h] - dot);
    }
  }
}
