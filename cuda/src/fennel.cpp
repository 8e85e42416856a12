// One chunk of Fennel streaming partitioning (Tsourakakis et al., WSDM 2014).
//
// Why native: Fennel is sequential by nature (each vertex's choice changes the loads and neighbour
// counts the next vertex sees), so a per-vertex loop it is; in Python that loop costs ~10 us a vertex.
// The Python side (runtime/partition/fennel.py) streams the edge list in bounded chunks, builds the
// chunk's adjacency and calls this once per chunk; runtime/partition/fennel.py's `assign_chunk_reference`
// is the same algorithm in Python, the oracle of the tests.
//
// Each not-yet-assigned vertex v of the chunk (parts[v] == -1; -2 marks a vertex deferred to after the
// stream, e.g. a degree-1 leaf, which is neither placed nor counted as a neighbour), in stream order,
// goes to the part p maximising
//     |N(v) & P_p| - alpha * gamma * load_p^(gamma - 1)
// among the parts with load_p + w_v <= cap (the hard capacity; w_v: 1 by default, or the vertex plus the
// deferred leaves that will follow it). Ties: the lower load,
// then a seeded per-vertex rotation of the part order. If no part has room, the least loaded part.
// Plain C ABI; arrays are borrowed; called through ctypes, which releases the GIL.

#include "graphtrain/api.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace {

inline uint64_t mix(uint64_t x) {  // splitmix64 finaliser: a seeded rotation per vertex
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// One chunk, either pass. seen == nullptr: the first pass, placing each unplaced vertex (parts -1).
// seen != nullptr: a restreaming pass (ReFennel, Nishimura & Ugander, KDD 2013): each placed vertex not
// yet seen this pass is taken out of its part and placed again, every placed neighbour voting.
int fennel_chunk(int64_t nv, const int64_t* verts, const int64_t* xadj, const int64_t* adj, int32_t* parts,
                 const int64_t* weight, int32_t nparts, int64_t* load, int64_t cap, double alpha, double gamma,
                 uint64_t seed, int64_t* stats, uint8_t* seen) {
  if (nv < 0 || nparts < 1) return 1;
  std::vector<int64_t> count(nparts, 0);
  std::vector<int32_t> touched;
  touched.reserve(64);
  const double coef = alpha * gamma;
  for (int64_t i = 0; i < nv; ++i) {
    const int64_t v = verts[i];
    const int64_t w = weight ? weight[v] : 1;
    if (seen == nullptr) {
      if (parts[v] != -1) continue;
    } else {
      if (parts[v] < 0 || seen[v]) continue;
      seen[v] = 1;
      load[parts[v]] -= w;
      parts[v] = -1;
    }
    for (int64_t e = xadj[i]; e < xadj[i + 1]; ++e) {
      const int32_t q = parts[adj[e]];
      if (q < 0) continue;
      if (count[q]++ == 0) touched.push_back(q);
    }
    const uint64_t rot = mix(seed ^ static_cast<uint64_t>(v)) % static_cast<uint64_t>(nparts);
    int32_t best = -1;
    double best_s = 0.0;
    for (int32_t j = 0; j < nparts; ++j) {
      const int32_t p = static_cast<int32_t>((j + rot) % nparts);
      if (load[p] + w > cap) continue;
      const double s = static_cast<double>(count[p]) - coef * std::pow(static_cast<double>(load[p]), gamma - 1.0);
      if (best < 0 || s > best_s || (s == best_s && load[p] < load[best])) {
        best = p;
        best_s = s;
      }
    }
    if (best < 0) {  // every part full: the least loaded one
      best = 0;
      for (int32_t p = 1; p < nparts; ++p)
        if (load[p] < load[best]) best = p;
      ++stats[1];
    }
    parts[v] = best;
    load[best] += w;
    ++stats[0];
    for (int32_t q : touched) count[q] = 0;
    touched.clear();
  }
  return 0;
}

}  // namespace

// verts: global ids of the chunk's vertices in stream order (nv); xadj/adj: their chunk adjacency
// (local row i lists global neighbour ids); parts: global assignment, -1 = not yet, -2 = deferred (left
// alone); updated in place; weight: the capacity weight of every global vertex (nullptr: 1 each); load:
// per-part weight (updated); stats (int64[2]): vertices assigned, of them placed with no room anywhere.
GT_API int gt_fennel_assign(int64_t nv, const int64_t* verts, const int64_t* xadj, const int64_t* adj,
                            int32_t* parts, const int64_t* weight, int32_t nparts, int64_t* load, int64_t cap,
                            double alpha, double gamma, uint64_t seed, int64_t* stats) {
  return fennel_chunk(nv, verts, xadj, adj, parts, weight, nparts, load, cap, alpha, gamma, seed, stats, nullptr);
}

// The same arguments and a restreaming pass's seen flags (uint8 per global vertex, zeroed before the
// pass, set here): each placed vertex is placed again at its first appearance in the pass.
GT_API int gt_fennel_restream(int64_t nv, const int64_t* verts, const int64_t* xadj, const int64_t* adj,
                              int32_t* parts, const int64_t* weight, int32_t nparts, int64_t* load, int64_t cap,
                              double alpha, double gamma, uint64_t seed, int64_t* stats, uint8_t* seen) {
  if (seen == nullptr) return 1;
  return fennel_chunk(nv, verts, xadj, adj, parts, weight, nparts, load, cap, alpha, gamma, seed, stats, seen);
}

// A refinement round's neighbour counts (runtime/partition/refine.py): each non-loop edge src[i] -> dst[i]
// adds 1 to counts[src * nparts + parts[dst]] and to counts[dst * nparts + parts[src]] (counts: int32,
// nodes x nparts; every endpoint placed). Native because np.add.at costs ~0.1 us an edge.
GT_API int gt_fennel_count(int64_t m, const int64_t* src, const int64_t* dst, const int32_t* parts, int32_t nparts,
                           int32_t* counts) {
  if (m < 0 || nparts < 1) return 1;
  for (int64_t i = 0; i < m; ++i) {
    const int64_t s = src[i], d = dst[i];
    if (s == d) continue;
    ++counts[s * nparts + parts[d]];
    ++counts[d * nparts + parts[s]];
  }
  return 0;
}
