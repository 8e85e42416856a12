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
#include <cstring>

// Always inlined on the CPU too: the update loop (optim_cpu.cpp) is cloned per target (AVX2, AVX-512)
// and instantiated per row width and table type, and where GCC stopped inlining into that large a
// function it called out-of-line row functions built for the baseline target (found when half tables
// tripled the loop's instances: every optimizer ran 1.5-3x slower).
#if defined(__CUDACC__)
#define GT_HD __host__ __device__ __forceinline__
#else
#define GT_HD inline __attribute__((always_inline))
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
  // > 0: the CPU core scales each updated row of a float32 table to this L2 norm in the update loop,
  // while the row is in cache (TransE's and DistMult's entities; runtime/optim/functional.project_rows is
  // the same after the step). The CUDA core takes its row norm as an argument of its own.
  float row_norm;
};

// The factor that puts a row whose squares sum to sum_sq at L2 norm `norm` (project_rows' clamp: a zero
// row stays zero).
GT_HD float norm_scale(float sum_sq, float norm) { return norm / fmaxf(sqrtf(sum_sq), 1e-12f); }

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

// Element j of a row in float32: a float32 row's own value, or a half row's widened (table type td,
// a constant where the loops are instantiated). The loops below read a row from `src` and write it to
// `w`: the same row for a float32 table; for a bfloat16 one, its halves widened as they are read, so
// a step makes one pass over the row and not two (bfloat16 Adagrad on a 5M x 128 table: 38.5 -> 25.3
// ms per 100,000 rows, one thread).
GT_HD float half_to_float(uint16_t h, int32_t dtype);
GT_HD float widen_at(const float* src, int64_t j, int32_t) { return src[j]; }
GT_HD float widen_at(const uint16_t* src, int64_t j, int32_t td) { return half_to_float(src[j], td); }

#define GT_FOR_DECAYED(DIM, SRC, TD, W, G, P, BODY)                                     \
  if ((P).weight_decay == 0.0f) {                                                      \
    for (int64_t j = 0; j < (DIM); ++j) {                                              \
      float wj = widen_at(SRC, j, TD);                                                 \
      const float gd = (G)[j];                                                         \
      BODY;                                                                            \
      (W)[j] = wj;                                                                     \
    }                                                                                  \
  } else {                                                                             \
    for (int64_t j = 0; j < (DIM); ++j) {                                              \
      float wj = widen_at(SRC, j, TD);                                                 \
      const float gd = decayed((G)[j], wj, (P).weight_decay);                          \
      BODY;                                                                            \
      (W)[j] = wj;                                                                     \
    }                                                                                  \
  }

template <typename S>
GT_HD void sgd_row(float* w, const S* src, int32_t td, const float* g, int64_t dim, const OptimParams p) {
  GT_FOR_DECAYED(dim, src, td, w, g, p, sgd_elem(wj, gd, p))
}

template <typename S>
GT_HD void adagrad_row(float* w, const S* src, int32_t td, float* G, const float* g, int64_t dim,
                       const OptimParams p) {
  GT_FOR_DECAYED(dim, src, td, w, g, p, adagrad_elem(wj, G[j], gd, p))
}

// Two passes over the row: the mean needs every element before any update. The sum of squares runs in
// kLanes independent partial sums (a fixed order, so results stay deterministic): one running sum is
// a serial chain of float adds, ~4 cycles per element, which made this the slowest loop of the step.
constexpr int kLanes = 16;

template <typename S>
GT_HD float sum_sq_decayed(const S* src, int32_t td, const float* g, int64_t dim, float wd) {
  float part[kLanes] = {};
  int64_t j = 0;
  if (wd == 0.0f) {
    for (; j + kLanes <= dim; j += kLanes)
      for (int l = 0; l < kLanes; ++l) part[l] += g[j + l] * g[j + l];
  } else {
    for (; j + kLanes <= dim; j += kLanes)
      for (int l = 0; l < kLanes; ++l) {
        const float gd = decayed(g[j + l], widen_at(src, j + l, td), wd);
        part[l] += gd * gd;
      }
  }
  for (int l = 0; j < dim; ++j, ++l) {
    const float gd = maybe_decayed(g[j], widen_at(src, j, td), wd);
    part[l] += gd * gd;
  }
  float sq = 0.0f;
  for (int l = 0; l < kLanes; ++l) sq += part[l];
  return sq;
}

template <typename S>
GT_HD void rowwise_adagrad_row(float* w, const S* src, int32_t td, float* G, const float* g, int64_t dim,
                               const OptimParams p) {
  const float sq = sum_sq_decayed(src, td, g, dim, p.weight_decay);
  *G = rowwise_accumulate(*G, sq, dim);
  const float scale = rowwise_scale(*G, p);
  GT_FOR_DECAYED(dim, src, td, w, g, p, rowwise_elem(wj, gd, scale))
}

template <typename S>
GT_HD void adam_row(float* w, const S* src, int32_t td, float* m, float* v, const float* g, int64_t dim,
                    const OptimParams p, const AdamCoef& c) {
  GT_FOR_DECAYED(dim, src, td, w, g, p, adam_elem(wj, m[j], v[j], gd, p, c))
}

// ---- half-precision tables: rows stored as float16 or bfloat16. A step reads a row into float32,
// runs the row functions above on it, and writes it back with stochastic rounding (as FBGEMM's half
// tables do): the stored value is one of the two representable neighbours of the float32 result,
// the upper one with probability equal to the result's distance from the lower over their gap, so
// the stored value's expectation is the float32 result and small updates are not lost to rounding
// (round-to-nearest drops any update below half a unit in the last place: bfloat16 keeps 8 bits).
// The random bits are a counter-based hash of (seed, row, element): the same on the CPU and the GPU,
// whatever the thread count. Optimizer state stays float32. ----

enum TableDtype : int32_t { kTableFloat32 = 0, kTableFloat16 = 1, kTableBFloat16 = 2 };

GT_HD uint32_t float_to_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

GT_HD float bits_to_float(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

GT_HD float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

// Selects only, no branches, so that the CPU loops over a row vectorise: shift the exponent and
// mantissa into place and rebias; infinities and NaNs get the rest of the exponent, subnormals are
// renormalised by a subtraction.
GT_HD float fp16_to_float(uint16_t h) {
  const uint32_t shifted_exp = 0x7c00u << 13;
  const uint32_t bits = (static_cast<uint32_t>(h) & 0x7fffu) << 13;
  const uint32_t exp = shifted_exp & bits;
  const uint32_t o = bits + ((127u - 15u) << 23);
  const float normal = bits_to_float(exp == shifted_exp ? o + ((128u - 16u) << 23) : o);
  const float sub = bits_to_float(o + (1u << 23)) - bits_to_float(113u << 23);
  const float mag = exp == 0 ? sub : normal;
  return bits_to_float(float_to_bits(mag) | ((static_cast<uint32_t>(h) & 0x8000u) << 16));
}

// The float16 of a float32 that float16 represents exactly (what fp16_round makes): NaN stays NaN and
// an infinity infinite, a finite value beyond the largest finite float16 (65504) saturates to it, as a
// half table's gradients do on the wire (dtypes.narrowed): an update past the range had written an
// infinity that float32 and bfloat16 rows hold finite, and the next pull made NaN gradients of it.
GT_HD uint16_t fp16_exact(float v) {
  const uint32_t u = float_to_bits(v);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  const uint32_t small = a < 0x38800000u ? a : 0x38800000u;  // clamped: a float beyond int32 is no int
  const uint32_t sub = static_cast<uint32_t>(static_cast<int32_t>(bits_to_float(small) * 16777216.0f));  // * 2^24
  const uint32_t normal = ((((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu)) & 0xffffu;
  uint32_t h = a < 0x38800000u ? sub : normal;
  h = a > 0x477fe000u ? 0x7bffu : h;
  h = a == 0x7f800000u ? 0x7c00u : h;
  h = a > 0x7f800000u ? 0x7e00u : h;
  return static_cast<uint16_t>(sign | h);
}

// Stochastic rounding to float16 with the random bits `r`. A float16's unit in the last place at |x|
// is 2^13 float32 units for a normal float16 and 2^(-1-e) of them for a subnormal one (|x| in
// [2^e, 2^(e+1)), e in [-24, -15]): adding that many random bits to |x|'s bits and clearing them
// rounds up with the probability of the cleared part (the bits grow with the magnitude, a carry into
// the exponent included). Below 2^-24 the neighbours are 0 and 2^-24. Selects only (vectorises).
GT_HD uint16_t fp16_round(float x, uint32_t r) {
  const uint32_t u = float_to_bits(x);
  const uint32_t a = u & 0x7fffffffu;
  const int32_t e = static_cast<int32_t>(a >> 23) - 127;
  const int32_t drop = e >= -14 ? 13 : (e >= -24 ? -1 - e : 23);
  const uint32_t mask = (1u << drop) - 1u;
  uint32_t mag = (a + (r >> (32 - drop))) & ~mask;
  const bool tiny_up = bits_to_float(a) * 16777216.0f > static_cast<float>(r >> 8) * 5.9604644775390625e-8f;
  mag = e < -24 ? (tiny_up ? 0x33800000u : 0u) : mag;  // 2^-24 or 0
  mag = a >= 0x47800000u ? a : mag;                      // >= 65536, infinite or NaN: fp16_exact's
  return fp16_exact(bits_to_float(mag | (u & 0x80000000u)));
}

// Stochastic rounding to bfloat16 with the random bits `r`: bfloat16 is float32's upper half, and
// float32 bits grow with the magnitude, so adding 16 random bits below the cut and truncating rounds
// up with probability (dropped bits) / 2^16. The carry of the largest finite value reaches infinity.
GT_HD uint16_t bf16_round(float x, uint32_t r) {
  const uint32_t u = float_to_bits(x);
  const uint32_t nan = (u >> 16) | 0x40u;  // NaN stays NaN
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : (u + (r >> 16)) >> 16);
}

// The random bits of element j of a row whose key is row_key (round_key: one per row and step): a
// Weyl sequence from the key. Each element's draw is uniform over steps (the key is a hash of the
// step's seed and the row); neighbouring elements' draws are correlated, which does not bias a
// rounding, and cost one add per element where a hash per element cost more than the update.
GT_HD uint32_t round_bits(uint32_t row_key, int64_t j) { return row_key + static_cast<uint32_t>(j) * 0x9e3779b9u; }

GT_HD float half_to_float(uint16_t h, int32_t dtype) {
  return dtype == kTableBFloat16 ? bf16_to_float(h) : fp16_to_float(h);
}

GT_HD uint16_t half_round(float x, uint32_t r, int32_t dtype) {
  return dtype == kTableBFloat16 ? bf16_round(x, r) : fp16_round(x, r);
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

// The rounding key of a row in one step (seed: the caller's, new each step).
GT_HD uint32_t round_key(uint64_t seed, int64_t row) {
  return static_cast<uint32_t>(mix64(seed ^ (static_cast<uint64_t>(row) * 0x9e3779b97f4a7c15ULL)) >> 32);
}

// ---- a half row in and out (CPU row loops): the element functions above, with a fast path for a row
// whose every value lies where their selects all go one way. The selects (NaN, subnormal, overflow)
// cost more than the rest of a row's update: with them in the loop, bfloat16 SGD on a 5M x 128 table
// ran at 0.55x float32's rows/s and float16 at 0.24x. The float16 loops write the fast path's result
// and note the row's range as they go (integer min/max: they vectorise), bfloat16's rounding notes it
// first; a row with a value outside that range is written by the element functions. Both give the same bits, so the CUDA core
// (which calls the element functions) and the CPU core agree. ----

// Float16 row `w` into float32 `x` (a bfloat16 row needs no pass of its own: widen_at reads it).
GT_HD void fp16_row_to_float(float* x, const uint16_t* w, int64_t dim) {
  uint32_t lo = 0xffffu, hi = 0;
  for (int64_t j = 0; j < dim; ++j) {  // a normal float16: shifted into place and rebiased
    const uint32_t h = w[j], mag = h & 0x7fffu;
    lo = mag < lo ? mag : lo;
    hi = mag > hi ? mag : hi;
    x[j] = bits_to_float(((mag << 13) + ((127u - 15u) << 23)) | ((h & 0x8000u) << 16));
  }
  if (lo < 0x0400u || hi >= 0x7c00u)  // a zero, a subnormal, an infinity or a NaN
    for (int64_t j = 0; j < dim; ++j) x[j] = fp16_to_float(w[j]);
}

// Float32 row `x` into `w`, stochastically rounded with the bits round_bits(key, j).
GT_HD void half_row_round(uint16_t* w, const float* x, int64_t dim, uint32_t key, int32_t dtype) {
  if (dtype == kTableBFloat16) {
    uint32_t hi = 0;
    // the range first here: noting it in the writing loop was slower on a table beyond the caches
    // (bfloat16 SGD 13.9 -> 19.1 ms per 100,000 rows of 128, one thread), though not in them
    for (int64_t j = 0; j < dim; ++j) {
      const uint32_t a = float_to_bits(x[j]) & 0x7fffffffu;
      hi = a > hi ? a : hi;
    }
    if (hi > 0x7f800000u) {  // a NaN
      for (int64_t j = 0; j < dim; ++j) w[j] = bf16_round(x[j], round_bits(key, j));
      return;
    }
    for (int64_t j = 0; j < dim; ++j)  // the random bits and the cut (infinity's low half is 0: no carry)
      w[j] = static_cast<uint16_t>((float_to_bits(x[j]) + (round_bits(key, j) >> 16)) >> 16);
    return;
  }
  // |x| in [2^-14, 65504], fp16_round's normal case: 13 random bits below float16's last place, which
  // the shift drops (a carry moves the exponent), then the exponent rebiased: the bits of fp16_round and
  // fp16_exact (past 65504 a carry could reach 65536, which fp16_exact saturates)
  uint32_t lo = 0xffffffffu, hi = 0;
  for (int64_t j = 0; j < dim; ++j) {
    const uint32_t u = float_to_bits(x[j]), a = u & 0x7fffffffu;
    lo = a < lo ? a : lo;
    hi = a > hi ? a : hi;
    const uint32_t mag = ((a + (round_bits(key, j) >> 19)) >> 13) - ((127u - 15u) << 10);
    w[j] = static_cast<uint16_t>(mag | ((u >> 16) & 0x8000u));
  }
  if (lo < 0x38800000u || hi > 0x477fe000u)  // a zero, a float16 subnormal, > 65504, inf or NaN
    for (int64_t j = 0; j < dim; ++j) w[j] = fp16_round(x[j], round_bits(key, j));
}

}  // namespace graphtrain
