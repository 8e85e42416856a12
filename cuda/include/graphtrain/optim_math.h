// The sparse optimizers' math: one definition, compiled for the CPU (C++/OpenMP) and for CUDA.
//
// Every function updates ONE table row of `dim` floats from its already reduced gradient `g`
// (duplicates summed or averaged beforehand). The CPU build calls them from an OpenMP loop over unique
// rows, the CUDA build from kernels; the torch reference backend (runtime/optim/reference.py) states
// the same formulas with torch ops and is the oracle in tests.
//
// Weight decay is L2, folded into the gradient: g' = g + wd * w (decoupled decay is not offered).
//   sgd:             w -= lr * g'
//   adagrad:         G += g'^2 (per element);          w -= lr * g' / (sqrt(G) + eps)
//   rowwise_adagrad: G += mean(g'^2) (one per row);     w -= lr * g' / (sqrt(G) + eps)
//   adam (lazy):     m = b1 m + (1-b1) g';  v = b2 v + (1-b2) g'^2;  t = this row's (or the table's) step
//                    w -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps_t)
//                    eps_t = eps                    (DGL's SparseAdam: eps added to sqrt(v_hat))
//                    eps_t = eps / sqrt(1 - b2^t)   (torch.optim.SparseAdam: eps added to sqrt(v))
// Note on DGL 2.1's distributed SparseAdagrad on CPU: it stores sqrt(G)+eps instead of G from its
// second step (an in-place sqrt_ on a tensor that .to(cpu) returned unchanged). This is the formula,
// not that code.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define GT_HD __host__ __device__ __forceinline__
#else
#define GT_HD inline
#endif

namespace graphtrain {

enum OptimKind : int32_t { kSGD = 0, kAdagrad = 1, kRowwiseAdagrad = 2, kAdam = 3 };

// The canonical order in which both builds sum one id's duplicate gradient rows: its occurrences in
// batch order, in chunks of kSumChunk; each chunk summed in order from its first row (copied), then the
// chunk sums added in chunk order. For an id seen at most kSumChunk times that is plain batch order. The
// CUDA build reduces the chunks of a hot id (a Zipf batch's hottest id occurs ~10^5 times in 10^6) on
// many warps at once and stays bitwise equal to the CPU build and to itself from run to run; a single
// chain of dependent loads would make the hottest id's row the length of the whole step.
constexpr int64_t kSumChunk = 256;

struct OptimParams {
  float lr;
  float eps;
  float beta1;
  float beta2;
  // 1 - beta, computed by the host in double and rounded once (as torch does with its Python floats);
  // 1.0f - beta2 in float32 would be 0.99998713e-3 for beta2 = 0.999, a 1.3e-5 relative error in v.
  float one_minus_beta1;
  float one_minus_beta2;
  float weight_decay;
  int32_t eps_inside_sqrt;  // adam only: 0 = DGL convention, 1 = torch convention (see above)
  // The betas as the host's doubles, for the bias corrections 1 - beta^t: with beta2 = 0.999 rounded
  // to float32, 1 - beta2 cancels to a 1.3e-5 relative error and 1/sqrt(1 - beta2) to 6.4e-6.
  double beta1_exact;
  double beta2_exact;
};

// ---- element primitives on the decayed gradient gd = g + wd * w (see decayed): the CPU row loops
// below and the CUDA kernels are both built from these ----

GT_HD float decayed(float g, float w, float wd) { return g + wd * w; }
// decayed, except that no decay reads nothing of w: with wd = 0, 0 * inf would turn an infinite weight's
// gradient into NaN (the reference and torch.optim skip the term too).
GT_HD float maybe_decayed(float g, float w, float wd) { return wd == 0.0f ? g : decayed(g, w, wd); }

GT_HD void sgd_elem(float& w, float gd, const OptimParams& p) { w -= p.lr * gd; }

GT_HD void adagrad_elem(float& w, float& G, float gd, const OptimParams& p) {
  G += gd * gd;
  w -= p.lr * gd / (sqrtf(G) + p.eps);
}

// Row-wise Adagrad: the row's accumulator after adding mean(gd^2), then the shared step scale.
GT_HD float rowwise_accumulate(float G, float sum_sq, int64_t dim) { return G + sum_sq / static_cast<float>(dim); }
GT_HD float rowwise_scale(float G, const OptimParams& p) { return p.lr / (sqrtf(G) + p.eps); }
GT_HD void rowwise_elem(float& w, float gd, float scale) { w -= scale * gd; }

// Per-row coefficients of one Adam step at step count t (>= 1): w -= a * m / (sqrt(v) * b + e).
struct AdamCoef {
  float a, b, e;
};

// From the bias corrections bc1 = 1 - beta1^t and bc2 = 1 - beta2^t (the CUDA build computes the two
// powers on two lanes of a warp at once, then every lane calls this).
GT_HD double adam_bias_correction(double beta_exact, int64_t t) { return 1.0 - pow(beta_exact, static_cast<double>(t)); }

GT_HD AdamCoef adam_coef_from(double bc1, double bc2, const OptimParams& p) {
  const double inv_sqrt_bc2 = 1.0 / sqrt(bc2);
  AdamCoef c;
  c.a = static_cast<float>(p.lr / bc1);
  c.b = static_cast<float>(inv_sqrt_bc2);
  c.e = static_cast<float>(p.eps_inside_sqrt ? p.eps * inv_sqrt_bc2 : p.eps);
  return c;
}

GT_HD AdamCoef adam_coef(int64_t t, const OptimParams& p) {
  return adam_coef_from(adam_bias_correction(p.beta1_exact, t), adam_bias_correction(p.beta2_exact, t), p);
}

GT_HD void adam_elem(float& w, float& m, float& v, float gd, const OptimParams& p, const AdamCoef& c) {
  m = p.beta1 * m + p.one_minus_beta1 * gd;
  v = p.beta2 * v + p.one_minus_beta2 * gd * gd;
  w -= c.a * m / (sqrtf(v) * c.b + c.e);
}

// ---- row loops (CPU). Params come by value: through a reference, a store to w[j] (a float*) might
// change p.lr as far as the compiler knows, which keeps it from vectorising. The weight-decay test is
// hoisted out of the loop for the same reason (a compare and branch per element, 2 ns per float). ----

#define GT_FOR_DECAYED(DIM, W, G, P, BODY)                                              \
  if ((P).weight_decay == 0.0f) {                                                      \
    for (int64_t j = 0; j < (DIM); ++j) {                                              \
      const float gd = (G)[j];                                                         \
      BODY;                                                                            \
    }                                                                                  \
  } else {                                                                             \
    for (int64_t j = 0; j < (DIM); ++j) {                                              \
      const float gd = decayed((G)[j], (W)[j], (P).weight_decay);                      \
      BODY;                                                                            \
    }                                                                                  \
  }

GT_HD void sgd_row(float* w, const float* g, int64_t dim, const OptimParams p) {
  GT_FOR_DECAYED(dim, w, g, p, sgd_elem(w[j], gd, p))
}

GT_HD void adagrad_row(float* w, float* G, const float* g, int64_t dim, const OptimParams p) {
  GT_FOR_DECAYED(dim, w, g, p, adagrad_elem(w[j], G[j], gd, p))
}

// Two passes over the row: the mean needs every element before any update. The sum of squares runs in
// kLanes independent partial sums (a fixed order, so results stay deterministic): one running sum is
// a serial chain of float adds, ~4 cycles per element, which made this the slowest loop of the step.
constexpr int kLanes = 16;

GT_HD float sum_sq_decayed(const float* w, const float* g, int64_t dim, float wd) {
  float part[kLanes] = {};
  int64_t j = 0;
  if (wd == 0.0f) {
    for (; j + kLanes <= dim; j += kLanes)
      for (int l = 0; l < kLanes; ++l) part[l] += g[j + l] * g[j + l];
  } else {
    for (; j + kLanes <= dim; j += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const float gd = decayed(g[j + l], w[j + l], wd);
        part[l] += gd * gd;
      }
  }
  for (int l = 0; j < dim; ++j, ++l) {
    const float gd = maybe_decayed(g[j], w[j], wd);
    part[l] += gd * gd;
  }
  float sq = 0.0f;
  for (int l = 0; l < kLanes; ++l) sq += part[l];
  return sq;
}

GT_HD void rowwise_adagrad_row(float* w, float* G, const float* g, int64_t dim, const OptimParams p) {
  const float sq = sum_sq_decayed(w, g, dim, p.weight_decay);
  *G = rowwise_accumulate(*G, sq, dim);
  const float scale = rowwise_scale(*G, p);
  GT_FOR_DECAYED(dim, w, g, p, rowwise_elem(w[j], gd, scale))
}

GT_HD void adam_row(float* w, float* m, float* v, const float* g, int64_t dim, const OptimParams p,
                    const AdamCoef& c) {
  GT_FOR_DECAYED(dim, w, g, p, adam_elem(w[j], m[j], v[j], gd, p, c))
}

// 64-bit mixer (splitmix64's finaliser) for hashing row ids.
GT_HD uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace graphtrain
