// Neighbour sampling and block relabelling for mini-batch GNN training (CPU).
//
// gt_sample_neighbors: up to `fanout` distinct in-neighbours of each seed from a partition's in-CSR
// (all of them when the degree is within the fan-out or fanout < 0). Each seed draws from its own
// stream, seeded by (request seed, node id): a node's sample does not depend on how seeds were
// batched or split across shards, nor on the device (sample_math.h, shared with sampling_cuda.cu).
// gt_sample_edges: the same draws as positions in the partition's edge arrays (a sampled edge's source,
// type and id follow from its position), and, given a fan-out per edge type, each relation of a node
// sampled on its own: a typed partition lists a node's in-edges by type, one run per relation.
// gt_relabel: first-occurrence numbering of frontier ++ sources with a hash map (the frontier's nodes
// keep their positions, so a block's destination nodes are its first source nodes).
// Both replace numpy code (lexsort per batch, np.unique) that cost ~6 ms per WordNet batch.

#include "graphtrain/api.h"
#include "graphtrain/optim_math.h"
#include "graphtrain/sample_math.h"

#include <algorithm>
#include <cstdint>
#include <vector>

// counts[i] = number of sources sampled for seeds[i]; returns the total, or -1 with *bad_pos when a seed
// is outside [lo, lo + num_local). Call once with out_src = null to size the output, then again to fill.
GT_API int64_t gt_sample_neighbors(const int64_t* indptr, const int64_t* indices, int64_t lo, int64_t num_local,
                                   const int64_t* seeds, int64_t n, int64_t fanout, uint64_t seed,
                                   int64_t* out_counts, int64_t* out_src, int64_t* bad_pos) {
  int64_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t local = seeds[i] - lo;
    if (local < 0 || local >= num_local) {
      *bad_pos = i;
      return -1;
    }
    const int64_t deg = indptr[local + 1] - indptr[local];
    const int64_t c = (fanout < 0 || deg <= fanout) ? deg : fanout;
    out_counts[i] = c;
    total += c;
  }
  if (out_src == nullptr) return total;
  std::vector<int64_t> picked;
  int64_t pos = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t local = seeds[i] - lo;
    const int64_t start = indptr[local];
    const int64_t deg = indptr[local + 1] - start;
    const int64_t c = out_counts[i];
    if (c == deg) {
      std::copy(indices + start, indices + start + deg, out_src + pos);
    } else {
      picked.resize(static_cast<size_t>(c));
      graphtrain::draw_positions(seed, seeds[i], deg, c, picked.data());  // sample_math.h: the GPU's too
      for (int64_t k = 0; k < c; ++k) out_src[pos + k] = indices[start + picked[k]];
    }
    pos += c;
  }
  return total;
}

// Up to a fan-out of in-edges per seed (per edge type with type_fanouts, num_types entries: -1 all,
// 0 none), as positions in the partition's edge arrays; returns the total, or -1 with *bad_pos as
// gt_sample_neighbors. Without type_fanouts the draws are gt_sample_neighbors' exactly. The runs and
// draws are sample_math.h's edges_count/edges_draw, which the CUDA core's gt_cuda_sample_edges_* run too.
GT_API int64_t gt_sample_edges(const int64_t* indptr, const int64_t* etype, int64_t lo, int64_t num_local,
                               const int64_t* seeds, int64_t n, int64_t fanout, const int64_t* type_fanouts,
                               int64_t num_types, uint64_t seed, int64_t* out_counts, int64_t* out_pos,
                               int64_t* bad_pos) {
  int64_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t local = seeds[i] - lo;
    if (local < 0 || local >= num_local) {
      *bad_pos = i;
      return -1;
    }
    out_counts[i] = graphtrain::edges_count(etype, indptr[local], indptr[local + 1], fanout, type_fanouts, num_types);
    total += out_counts[i];
  }
  if (out_pos == nullptr) return total;
  int64_t pos = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t local = seeds[i] - lo;
    graphtrain::edges_draw(etype, indptr[local], indptr[local + 1], seeds[i], fanout, type_fanouts, num_types, seed,
                           out_pos + pos);
    pos += out_counts[i];
  }
  return total;
}

// nodes = frontier followed by the distinct new ids of src in first-occurrence order; src_local[i] =
// index of src[i] in nodes. out_nodes needs room for nf + ns entries. Returns the node count.
GT_API int64_t gt_relabel(const int64_t* frontier, int64_t nf, const int64_t* src, int64_t ns, int64_t* out_nodes,
                          int64_t* src_local) {
  int64_t cap = 16;
  while (cap < 2 * (nf + ns) + 1) cap <<= 1;
  const uint64_t mask = static_cast<uint64_t>(cap - 1);
  std::vector<int64_t> keys(cap, -1), vals(cap);
  int64_t count = 0;
  auto insert = [&](int64_t id) -> int64_t {
    uint64_t b = graphtrain::mix64(static_cast<uint64_t>(id)) & mask;
    while (keys[b] != -1 && keys[b] != id) b = (b + 1) & mask;
    if (keys[b] == -1) {
      keys[b] = id;
      vals[b] = count;
      out_nodes[count++] = id;
    }
    return vals[b];
  };
  for (int64_t i = 0; i < nf; ++i) insert(frontier[i]);
  for (int64_t i = 0; i < ns; ++i) src_local[i] = insert(src[i]);
  return count;
}

// A block's two CSR means (mean_matrices in graph/loader.py, which numpy did in ~12 passes: 0.58 ms for a
// WordNet batch's two blocks): edge e runs from source src_local[e] to the destination whose run of
// `counts` holds it (edges are listed grouped by destination). Writes crow (num_dst + 1) and values (one
// per edge: 1 / its destination's count) of the (destinations x sources) mean A, and crow_t (num_src + 1),
// col_t, values_t and order of A^T: the edges grouped by source, stably (order[k] = the edge at k, so
// col_t[k] is its destination and values_t[k] its value). Returns 0, -1 with *bad_pos for a negative
// count or counts that do not add up to n_edges (*bad_pos = -1), -2 with *bad_pos for a source outside
// [0, num_src); nothing is meaningful in the outputs then.
GT_API int gt_block_means(int64_t num_dst, const int64_t* counts, int64_t num_src, int64_t n_edges,
                          const int64_t* src_local, int64_t* crow, float* values, int64_t* crow_t, int64_t* col_t,
                          float* values_t, int64_t* order, int64_t* bad_pos) {
  crow[0] = 0;
  for (int64_t d = 0; d < num_dst; ++d) {
    if (counts[d] < 0) {
      *bad_pos = d;
      return -1;
    }
    crow[d + 1] = crow[d] + counts[d];
  }
  if (crow[num_dst] != n_edges) {
    *bad_pos = -1;
    return -1;
  }
  std::fill(crow_t, crow_t + num_src + 1, 0);
  for (int64_t e = 0; e < n_edges; ++e) {
    const int64_t s = src_local[e];
    if (s < 0 || s >= num_src) {
      *bad_pos = e;
      return -2;
    }
    ++crow_t[s + 1];
  }
  for (int64_t s = 0; s < num_src; ++s) crow_t[s + 1] += crow_t[s];
  std::vector<int64_t> next(crow_t, crow_t + num_src);  // each source's next free slot of A^T
  for (int64_t d = 0; d < num_dst; ++d) {
    const float w = 1.0f / static_cast<float>(std::max<int64_t>(counts[d], 1));
    for (int64_t e = crow[d]; e < crow[d + 1]; ++e) {
      values[e] = w;
      const int64_t k = next[src_local[e]]++;
      order[k] = e;
      col_t[k] = d;
      values_t[k] = w;
    }
  }
  return 0;
}
