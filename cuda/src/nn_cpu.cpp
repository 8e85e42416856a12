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

constexpr int64_t kChunk = 1024;  // divides 2^32: a chunk's indices share their high 32 bits

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
    // Branch-free and vectorised (a kept element is a coin flip: branches would mispredict half the time).
    for (int32_t j = 0; j < len; ++j) {
      const uint32_t r = hash32(hash32(base + static_cast<uint32_t>(j)) ^ salt);
      const float v = xc[j] * scale;
      const uint32_t keep = static_cast<uint32_t>(v > 0.0f) & static_cast<uint32_t>(r >= drop_below);
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      bits &= 0u - keep;  // all ones or zero: the scaled value or +0.0
      std::memcpy(oc + j, &bits, sizeof bits);
      mc[j] = static_cast<uint8_t>(keep);
    }
  }
}

// out[i] = grad[i] * scale where mask[i], else 0 (the backward of gt_relu_dropout).
GT_API GT_CLONES void gt_mask_scale(int64_t n, const float* grad, const uint8_t* mask, float scale, float* out,
                          int32_t threads) {
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = grad[i] * (static_cast<float>(mask[i]) * scale);
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
    for (int32_t j = 0; j < len; ++j) {
      const uint32_t r = hash32(hash32(base + static_cast<uint32_t>(j)) ^ salt);
      const float v = x[c + j];
      const float e = v > 0.0f ? v : std::expm1(v);
      const bool keep = r >= drop_below;
      out[c + j] = keep ? e * scale : 0.0f;
      mask[c + j] = static_cast<uint8_t>(keep);
    }
  }
}

// The backward of gt_elu_dropout: out[i] = grad[i] * scale * elu'(x[i]) where kept, else 0.
GT_API GT_CLONES void gt_elu_dropout_grad(int64_t n, const float* grad, const float* x, const uint8_t* mask,
                                          float scale, float* out, int32_t threads) {
#pragma omp parallel for num_threads(std::max(1, threads)) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float d = x[i] > 0.0f ? 1.0f : std::exp(x[i]);
    out[i] = mask[i] ? grad[i] * scale * d : 0.0f;
  }
}
