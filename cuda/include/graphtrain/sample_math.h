// The draw of neighbour sampling, shared by the CPU sampler (cuda/src/sampling.cpp) and the CUDA one
// (cuda/src/sampling_cuda.cu): up to `fanout` distinct in-neighbours of a node, as positions in its edge
// list. Each node draws from its own stream, seeded by (request seed, node id), so its sample depends on
// neither how seeds were batched or split across shards nor which device drew it: a GPU trainer's
// blocks are the host sampler's, edge for edge.
#pragma once

#include <cstdint>

#include "graphtrain/optim_math.h"  // GT_HD, mix64

namespace graphtrain {

// The state of node `node`'s stream for request seed `seed`.
GT_HD uint64_t draw_stream(uint64_t seed, int64_t node) {
  return mix64(seed ^ mix64(static_cast<uint64_t>(node)));
}

GT_HD uint64_t draw_next(uint64_t& state) {
  state += 0x9e3779b97f4a7c15ULL;
  return mix64(state);
}

// Uniform in [0, n) (Lemire's multiply-shift; the bias for n << 2^64 is negligible).
GT_HD int64_t draw_below(uint64_t& state, int64_t n) {
  const uint64_t r = draw_next(state);
#if defined(__CUDA_ARCH__)
  return static_cast<int64_t>(__umul64hi(r, static_cast<uint64_t>(n)));
#else
  return static_cast<int64_t>((static_cast<__uint128_t>(r) * static_cast<uint64_t>(n)) >> 64);
#endif
}

// `c` distinct positions of [0, deg) into picked[0, c), ascending (the edge list's order: deterministic,
// cache-friendly): Floyd's algorithm, k draws for k picks (for j in [deg - c, deg): t = draw in [0, j];
// take t unless taken, else j), then an insertion sort. Both are quadratic in c, the fan-out.
GT_HD void draw_positions(uint64_t seed, int64_t node, int64_t deg, int64_t c, int64_t* picked) {
  uint64_t state = draw_stream(seed, node);
  int64_t m = 0;
  for (int64_t j = deg - c; j < deg; ++j) {
    const int64_t t = draw_below(state, j + 1);
    bool taken = false;
    for (int64_t q = 0; q < m && !taken; ++q) taken = picked[q] == t;
    picked[m++] = taken ? j : t;
  }
  for (int64_t a = 1; a < c; ++a) {
    const int64_t v = picked[a];
    int64_t b = a - 1;
    while (b >= 0 && picked[b] > v) {
      picked[b + 1] = picked[b];
      --b;
    }
    picked[b + 1] = v;
  }
}

// The stream seed of edge type `etype`'s draws when each edge type has a fan-out of its own: a node's
// sample of one relation does not depend on its other relations' fan-outs.
GT_HD uint64_t type_seed(uint64_t seed, int64_t etype) {
  return mix64(seed ^ (0xd1b54a32d192ed03ULL * static_cast<uint64_t>(etype + 1)));
}

}  // namespace graphtrain
