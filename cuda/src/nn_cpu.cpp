// Fused ReLU + dropout of a trainer's hidden activations (CPU).
//
// torch runs ReLU, a random draw, a comparison, a bool -> float conversion and two multiplies as
// separate passes over the activations, and as many again backward (~3.5 ms of a 16 ms GraphSAGE
// step on WordNet, 2 cores). Here forward is one pass that writes the output and a byte mask, and
// backward one pass that multiplies by it.
//
// The random bits come from a counter-based hash of (seed, element index), so the mask does not depend
// on the thread count or the schedule; the caller draws the seed from torch's generator, so runs are
// reproducible under torch.manual_seed. An element is kept when its 32-bit draw is >= drop_below
// (drop probability drop_below / 2^32).

#include "graphtrain/api.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

// Chris Wellons' lowbias32: a 32-bit integer hash with good avalanche; vectorises with 32-bit multiplies.
inline uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// A dropout's backward for one element: grad * scale where kept, else 0 (mask 0 or 1).
inline float masked(float grad, uint8_t mask, float scale) { return grad * (static_cast<float>(mask) * scale); }

constexpr int64_t kChunk = 1024;  // divides 2^32: a chunk's indices share their high 32 bits

// One chunk's dropout: out[j] = in[j] * scale where element j is kept (and, with kPositiveOnly, in[j] > 0:
// ReLU's zeros), else +0.0; mask[j] = 1 where out[j] came from in[j]. Branch-free and vectorised (a kept
// element is a coin flip: branches would mispredict half the time). `in` may be `out`.
// With kBias, add[j] is added to in[j] first (a layer's bias, one row's columns).
template <bool kPositiveOnly, bool kBias = false>
inline void dropout_chunk(const float* in, float* out, uint8_t* mask, int32_t len, uint32_t base, uint32_t salt,
                          uint32_t drop_below, float scale, const float* add = nullptr) {
  for (int32_t j = 0; j < len; ++j) {
    const uint32_t r = hash32(hash32(base + static_cast<uint32_t>(j)) ^ salt);
    const float v = (kBias ? in[j] + add[j] : in[j]) * scale;
    uint32_t keep = static_cast<uint32_t>(r >= drop_below);
    if (kPositiveOnly) keep &= static_cast<uint32_t>(v > 0.0f);
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    bits &= 0u - keep;  // all ones or zero: the scaled value or +0.0
    std::memcpy(out + j, &bits, sizeof bits);
    mask[j] = static_cast<uint8_t>(keep);
  }
}

// exp(x) - 1 and exp(x) for x <= 0 in float, branch-free so that a loop over them vectorises (std::expm1
// is a scalar libm call: ~12 ns an element, 11 ms of a WordNet GAT batch's 1M hidden activations).
// x = n ln2 + r with |r| <= ln2 / 2, q = expm1(r) by its Taylor series to r^8 (truncation < 2e-8
// relative); then expm1(x) = 2^n q + (2^n - 1), exact for n = 0 so small |x| keep expm1's relative
// accuracy, and exp(x) = 2^n (1 + q), relative accuracy for large |x| (ELU's derivative there).
// Below -87 exp(x) underflows in float anyway; x is clamped there so 2^n stays a normal number. A NaN
// gives NaN (q is NaN whatever the integer conversion made of n).
struct ExpParts {
  float s;  // 2^n
  float q;  // expm1(r)
};
inline ExpParts exp_parts(float x) {
  x = x < -87.0f ? -87.0f : x;  // NaN stays NaN; not std::max: a reference to x keeps the loop scalar
  constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
  const float n = (x * kLog2e + kRound) - kRound;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 40320.0f;
  p = p * r + 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  return {__builtin_bit_cast(float, bits), r + r * r * p};  // (memcpy into a local keeps the loop scalar)
}
inline float expm1_nonpositive(float x) {
  const ExpParts e = exp_parts(x);
  return e.s * e.q + (e.s - 1.0f);
}
inline float exp_nonpositive(float x) {
  const ExpParts e = exp_parts(x);
  return e.s + e.s * e.q;
}

}  // namespace

// out[i] = x[i] * scale if x[i] > 0 and element i is kept, else 0; mask[i] = 1 where out[i] came from x.
// drop_below = 0 is ReLU alone (every element kept).
GT_API GT_CLONES void gt_relu_dropout(
    int64_t n, const float* x, float* out, uint8_t* mask, uint32_t drop_below, float scale, uint64_t seed,
    int32_t threads) {
  const uint32_t lo = static_cast<uint32_t>(seed), hi = static_cast<uint32_t>(seed >> 32);
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t c = 0; c < n; c += kChunk) {
    const int32_t len = static_cast<int32_t>(std::min(kChunk, n - c));
    const uint32_t base = static_cast<uint32_t>(c) + lo, salt = hi + static_cast<uint32_t>(c >> 32);
    const float* xc = x + c;
    float* oc = out + c;
    uint8_t* mc = mask + c;
    dropout_chunk<true>(xc, oc, mc, len, base, salt, drop_below, scale);
  }
}

// gt_relu_dropout of x + bias over a rows x cols row-major x, bias a row of cols: the mask is the one
// gt_relu_dropout draws for x + bias and the same seed (the draw follows the flat index). A layer's bias
// added here rather than by its GEMM saves that GEMM's pass writing the broadcast bias (0.33 ms of a
// WordNet GraphSAGE step, 3,745 x 256). `out` may be `x`.
GT_API GT_CLONES void gt_bias_relu_dropout(
    int64_t rows, int64_t cols, const float* x, const float* bias, float* out, uint8_t* mask, uint32_t drop_below,
    float scale, uint64_t seed, int32_t threads) {
  const uint32_t lo = static_cast<uint32_t>(seed), hi = static_cast<uint32_t>(seed >> 32);
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols;) {  // pieces that keep the index's high 32 bits (one, but near 2^32)
      const int64_t i = r * cols + c;
      const int64_t len = std::min(cols - c, ((i >> 32) + 1) * (int64_t{1} << 32) - i);
      const uint32_t base = static_cast<uint32_t>(i) + lo, salt = hi + static_cast<uint32_t>(i >> 32);
      dropout_chunk<true, true>(x + i, out + i, mask + i, static_cast<int32_t>(len), base, salt, drop_below,
                                scale, bias + c);
      c += len;
    }
  }
}

// The backward of gt_bias_relu_dropout: out = grad * scale where mask, else 0 (`out` may be `grad`), and
// bias_grad[c] = the sum of out's column c. Each thread sums its own rows in double, then the threads'
// sums are added in thread order: the same bits for the same thread count. One pass where torch's
// GEMM backward sums the bias gradient in a second over the layer's widest gradient.
GT_API GT_CLONES void gt_mask_scale_bias_grad(int64_t rows, int64_t cols, const float* grad, const uint8_t* mask,
                                              float scale, float* out, float* bias_grad, int32_t threads) {
  const int32_t team = std::max(1, threads);
  // Each thread's sums on cache lines of its own: packed in one vector, two threads' sums shared a line
  // at the seam, which the two cores passed back and forth once a row (3,745 x 256 on two threads: 0.36
  // ms, no faster than one; 0.22 ms apart; 0.19 ms with four rows a pass below).
  constexpr int64_t kLine = 64 / sizeof(double);
  // whole lines and one more: the adjacent-line prefetcher pairs lines, so 128 bytes is what two cores share
  const int64_t stride = (cols + kLine - 1) / kLine * kLine + kLine;
  std::vector<double> sums(static_cast<size_t>(team * stride + kLine), 0.0);
  const uintptr_t at = reinterpret_cast<uintptr_t>(sums.data());
  double* first = sums.data() + ((64 - at % 64) % 64) / sizeof(double);  // line-aligned
#pragma omp parallel num_threads(team)
  {
    const int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
    double* sum = first + t * stride;
    const int64_t end = rows * (t + 1) / n;
    int64_t r = rows * t / n;
    for (; r + 4 <= end; r += 4) {  // four rows a pass over the sums: a quarter of their loads and stores
      const float* g = grad + r * cols;
      const uint8_t* m = mask + r * cols;
      float* o = out + r * cols;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        const float v0 = masked(g[c], m[c], scale), v1 = masked(g[cols + c], m[cols + c], scale);
        const float v2 = masked(g[2 * cols + c], m[2 * cols + c], scale);
        const float v3 = masked(g[3 * cols + c], m[3 * cols + c], scale);
        o[c] = v0;
        o[cols + c] = v1;
        o[2 * cols + c] = v2;
        o[3 * cols + c] = v3;
        sum[c] += (static_cast<double>(v0) + static_cast<double>(v1)) +
                  (static_cast<double>(v2) + static_cast<double>(v3));
      }
    }
    for (; r < end; ++r) {
      const float* g = grad + r * cols;
      const uint8_t* m = mask + r * cols;
      float* o = out + r * cols;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        o[c] = masked(g[c], m[c], scale);
        sum[c] += static_cast<double>(o[c]);
      }
    }
  }
  for (int64_t c = 0; c < cols; ++c) {
    double total = 0.0;
    for (int32_t t = 0; t < team; ++t) total += first[t * stride + c];
    bias_grad[c] = static_cast<float>(total);
  }
}

// out[i] = grad[i] * scale where mask[i], else 0 (the backward of gt_relu_dropout).
GT_API GT_CLONES void gt_mask_scale(int64_t n, const float* grad, const uint8_t* mask, float scale, float* out,
                          int32_t threads) {
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = masked(grad[i], mask[i], scale);
}

// out[i] = elu(x[i]) * scale if element i is kept, else 0; mask[i] = 1 where kept (GAT's activation and
// dropout between layers, one pass; torch's bernoulli alone took ~30 ms a WordNet batch). The draw is
// gt_relu_dropout's: the same mask for the same seed.
GT_API GT_CLONES void gt_elu_dropout(
    int64_t n, const float* x, float* out, uint8_t* mask, uint32_t drop_below, float scale, uint64_t seed,
    int32_t threads) {
  const uint32_t lo = static_cast<uint32_t>(seed), hi = static_cast<uint32_t>(seed >> 32);
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t c = 0; c < n; c += kChunk) {
    const int32_t len = static_cast<int32_t>(std::min(kChunk, n - c));
    const uint32_t base = static_cast<uint32_t>(c) + lo, salt = hi + static_cast<uint32_t>(c >> 32);
    const float* xc = x + c;
    float* oc = out + c;
    uint8_t* mc = mask + c;
    // Two vectorised passes over the chunk (in L1): the ELU, then gt_relu_dropout's draw and mask (in
    // one loop GCC 12 leaves the mix of the two scalar).
    for (int32_t j = 0; j < len; ++j) {
      const float v = xc[j];
      oc[j] = v > 0.0f ? v : expm1_nonpositive(v > 0.0f ? 0.0f : v);
    }
    dropout_chunk<false>(oc, oc, mc, len, base, salt, drop_below, scale);
  }
}

// The backward of gt_elu_dropout: out[i] = grad[i] * scale * elu'(x[i]) where kept, else 0.
GT_API GT_CLONES void gt_elu_dropout_grad(int64_t n, const float* grad, const float* x, const uint8_t* mask,
                                          float scale, float* out, int32_t threads) {
#pragma omp parallel for simd num_threads(std::max(1, threads)) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float d = v > 0.0f ? 1.0f : exp_nonpositive(v > 0.0f ? 0.0f : v);
    out[i] = grad[i] * (scale * static_cast<float>(mask[i])) * d;
  }
}
