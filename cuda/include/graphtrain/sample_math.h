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

// The edges of a row [start, end) a draw keeps, and which: the whole row as one run (type_fanouts null:
// at most `fanout`, -1 all), or with a fan-out per edge type (type_fanouts[t], num_types of them: -1 all,
// 0 none; a type outside them: none) each relation's run of the row on its own. A typed partition lists
// a node's in-edges by type, one run per relation.
GT_HD int64_t take_of(int64_t len, int64_t fanout) {
  if (len <= 0) return 0;  // a damaged row pointer (decreasing) keeps nothing rather than a negative count
  return (fanout < 0 || len <= fanout) ? len : fanout;
}

GT_HD int64_t run_end(const int64_t* etype, int64_t a, int64_t end) {
  int64_t b = a + 1;
  while (b < end && etype[b] == etype[a]) ++b;
  return b;
}

GT_HD int64_t run_fanout(const int64_t* type_fanouts, int64_t num_types, int64_t t) {
  return (t >= 0 && t < num_types) ? type_fanouts[t] : 0;
}

// How many edges of the row the draw keeps.
GT_HD int64_t edges_count(const int64_t* etype, int64_t start, int64_t end, int64_t fanout,
                          const int64_t* type_fanouts, int64_t num_types) {
  if (type_fanouts == nullptr) return take_of(end - start, fanout);
  int64_t c = 0;
  for (int64_t a = start; a < end;) {
    const int64_t b = run_end(etype, a, end);
    c += take_of(b - a, run_fanout(type_fanouts, num_types, etype[a]));
    a = b;
  }
  return c;
}

// The positions the draw keeps into out[0, edges_count(...)), runs in row order, ascending within each:
// node `node`'s stream for request seed `seed` (a relation's: type_seed), Floyd's picks per run.
GT_HD void edges_draw(const int64_t* etype, int64_t start, int64_t end, int64_t node, int64_t fanout,
                      const int64_t* type_fanouts, int64_t num_types, uint64_t seed, int64_t* out) {
  int64_t pos = 0;
  for (int64_t a = start; a < end;) {
    const bool whole = type_fanouts == nullptr;
    const int64_t b = whole ? end : run_end(etype, a, end);
    const int64_t take = take_of(b - a, whole ? fanout : run_fanout(type_fanouts, num_types, etype[a]));
    if (take == b - a) {
      for (int64_t e = a; e < b; ++e) out[pos++] = e;
    } else if (take > 0) {
      draw_positions(whole ? seed : type_seed(seed, etype[a]), node, b - a, take, out + pos);
      for (int64_t k = 0; k < take; ++k) out[pos + k] += a;
      pos += take;
    }
    a = b;
  }
}

}  // namespace graphtrain
