// CPU build of the sparse-optimizer core (C++17 + OpenMP), from the same math as the CUDA build.
//
// Fused step (gt_sparse_step), three phases, no locks and no atomics:
//  1. each thread deduplicates its own contiguous block of the batch in a private open-addressing hash
//     table, chaining each id's occurrences in batch order;
//  2. (barrier) each thread looks its ids up in the other threads' tables (read-only): an id held by
//     one block belongs to its thread, one held by several to a holder picked by the id's hash, which
//     sums every occurrence across blocks in batch order;
//  3. the owner applies the optimizer to its rows, reading its block's gradients in order and
//     prefetching table rows and state a few rows ahead.
// One writer per row, and every row's duplicates are summed in batch order whatever the thread count,
// so results are identical for 1, 2 or 64 threads. Contiguous blocks (rather than hash-owned ids)
// let each thread read its gradient rows as one stream: on 2 cores the step is memory-parallelism
// bound, and a thread reading every other row wastes the hardware prefetcher on rows it skips.
// Workspaces persist between calls, so a steady training loop allocates nothing.
//
// Every id is checked against [0, num_rows) before any row is touched; a bad id returns -1 and its
// position. The caller (runtime/native/optim.py) checks dtypes, shapes and hyper-parameters.

// No multiply-add contraction in this file: GCC fused `G += g * g` in some instances of the update loop
// and not in others (a float32 table's, a bfloat16 table's; the AVX-512 clone has FMA, the AVX2 and
// baseline ones none), so the same step gave different bits by table type and by CPU. Separate
// roundings everywhere make them one; no step measured slower (in cache: Adagrad 1.74 -> 1.61 ms,
// Adam 2.57 -> 2.54 ms per 20,000 rows of 128).
#pragma GCC optimize("fp-contract=off")

#include "graphtrain/abi.h"
#include "graphtrain/api.h"
#include "graphtrain/optim_math.h"
#include "chunked_sum.h"
#include "half_rows_avx512.h"
#include "half_update_avx512.h"

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

using graphtrain::AdamCoef;
using graphtrain::OptimParams;

namespace {

// Rows prefetched ahead in the update loop, by row width (floats; 0 = known at run time only).
// Measured on 100,000-row steps, 2 threads: 128 floats, 12 -> 28-40 rows ahead took row-wise Adagrad
// 8.7 -> 7.4 ms; at 32 floats 12 beat 20 and 40 (the state line, not the row, dominates there).
// Only table rows and state are prefetched: a block reads its gradient rows in batch order, which the
// hardware streamer follows; prefetching them too (non-temporal or into L1) slowed every optimizer,
// SGD 10.8 -> 8.9 ms and element-wise Adagrad 16.3 -> 12.8 ms once removed.
constexpr int prefetch_rows(int dim) { return dim >= 128 ? 32 : 12; }
// Rows prefetched ahead by gather (a copy: no arithmetic to hide latency behind).
constexpr int kGatherAhead = 8;
// Ids looked ahead when deduplicating: their hash buckets are fetched while earlier ids are inserted.
constexpr int kPrefetchIds = 32;
constexpr int64_t kEmpty = -1;

struct Entry {
  int64_t key;   // row id, or kEmpty
  int64_t slot;  // index into the compact arrays
};

// One thread's view of its block of the batch.
struct Block {
  int64_t lo = 0, hi = 0;      // batch positions [lo, hi)
  int64_t mask = 0;            // hash table size - 1
  std::vector<Entry> table;    // open-addressing hash table, key and slot side by side
  std::vector<int64_t> uid;    // compact: row id of each unique in the block
  std::vector<int64_t> first;  // compact: first position
  std::vector<int64_t> last;   // compact: last position (to append to the chain)
  std::vector<int64_t> count;  // compact: occurrences in the block
  std::vector<int64_t> next;   // per position in the block: next occurrence of the same id, or -1
  // A one-hash bit filter of the block's ids (~20 bits per id, L2-sized): other threads ask "is id in
  // this block?" mostly about ids that are not (uniform ids rarely repeat), and the filter answers
  // that without a cache miss in the 2 MB hash table (the ownership phase went from 1.0 to ~0.3 ms).
  std::vector<uint64_t> bits;
  uint64_t bit_mask = 0;

  bool maybe_has(uint64_t h) const {
    const uint64_t b = (h >> 20) & bit_mask;
    return (bits[b >> 6] >> (b & 63)) & 1u;
  }

  int64_t find(int64_t id, uint64_t h) const {
    if (!maybe_has(h)) return -1;
    int64_t b = static_cast<int64_t>(h & static_cast<uint64_t>(mask));
    while (table[b].key != kEmpty) {
      if (table[b].key == id) return table[b].slot;
      b = (b + 1) & mask;
    }
    return -1;
  }
};

// Scratch of one call, shared by its OpenMP team (blocks are read by the other threads after phase 1).
// thread_local to the *calling* thread: ctypes releases the GIL, so two Python threads may step two
// tables at once, each with its own team and its own scratch.
struct StepScratch {
  std::vector<Block> blocks;
  std::vector<uint64_t> hashes;
};

StepScratch& step_scratch() {
  static thread_local StepScratch s;
  return s;
}

// Per-thread scratch that no other thread reads.
struct Workspace {
  std::vector<Entry> table;         // gt_dedup's hash table
  std::vector<int64_t> rows;        // rows this thread updates
  std::vector<const float*> grad;   // their gradient rows (a batch row, or an accumulation row)
  std::vector<float> acc;           // reduced rows of ids seen more than once
  std::vector<int64_t> acc_of;      // index into acc per entry of rows, or -1
  std::vector<float> part;          // ChunkedSum's scratch row
};

Workspace& workspace() {
  static thread_local Workspace ws;
  return ws;
}

std::vector<int64_t>& ws_total() {
  static thread_local std::vector<int64_t> t;
  return t;
}

int64_t pow2_at_least(int64_t x) {
  int64_t p = 16;
  while (p < x) p <<= 1;
  return p;
}

inline int owner_of(int64_t id, int threads) {
  return static_cast<int>((graphtrain::mix64(static_cast<uint64_t>(id)) >> 33) % static_cast<uint64_t>(threads));
}

// First position whose id is outside [0, num_rows), or -1.
int64_t first_bad(int64_t n, const int64_t* ids, int64_t num_rows, int threads) {
  int64_t bad = n;
#pragma omp parallel for num_threads(threads) reduction(min : bad) schedule(static)
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= num_rows) bad = std::min(bad, i);
  return bad == n ? -1 : bad;
}

__attribute__((always_inline)) inline void prefetch_row(const float* row, int64_t dim) {
  for (int64_t j = 0; j < dim; j += 16) __builtin_prefetch(row + j, 1, 1);
}

// Phase 1: deduplicate block [lo, hi) of the batch, chaining each id's occurrences in batch order.
void dedup_block(Block& bk, int64_t lo, int64_t hi, const int64_t* ids, const uint64_t* h) {
  bk.lo = lo;
  bk.hi = hi;
  const int64_t n = hi - lo;
  const int64_t cap = pow2_at_least(2 * n + 1);
  bk.mask = cap - 1;
  if (static_cast<int64_t>(bk.table.size()) < cap) bk.table.resize(cap);
  std::fill(bk.table.begin(), bk.table.begin() + cap, Entry{kEmpty, 0});
  bk.uid.clear();
  bk.first.clear();
  bk.last.clear();
  bk.count.clear();
  bk.next.assign(n, -1);
  const int64_t nbits = pow2_at_least(std::max<int64_t>(64, 16 * n));
  bk.bit_mask = static_cast<uint64_t>(nbits - 1);
  bk.bits.assign(nbits / 64, 0);
  for (int64_t i = lo; i < hi; ++i) {
    if (i + kPrefetchIds < hi)
      __builtin_prefetch(&bk.table[h[i + kPrefetchIds] & static_cast<uint64_t>(bk.mask)], 1, 3);
    const int64_t id = ids[i];
    const uint64_t fb = (h[i] >> 20) & bk.bit_mask;
    bk.bits[fb >> 6] |= uint64_t{1} << (fb & 63);
    int64_t b = static_cast<int64_t>(h[i] & static_cast<uint64_t>(bk.mask));
    while (bk.table[b].key != kEmpty && bk.table[b].key != id) b = (b + 1) & bk.mask;
    if (bk.table[b].key == kEmpty) {
      bk.table[b] = Entry{id, static_cast<int64_t>(bk.uid.size())};
      bk.uid.push_back(id);
      bk.first.push_back(i);
      bk.last.push_back(i);
      bk.count.push_back(1);
      continue;
    }
    const int64_t sl = bk.table[b].slot;
    bk.next[bk.last[sl] - lo] = i;
    bk.last[sl] = i;
    ++bk.count[sl];
  }
}

// The gradient rows of a batch: one contiguous n x dim array, or (a push that reached a shard server in
// several frames) one pointer per row, so the frames are used where they lie instead of being copied
// into one array first.
struct GradRows {
  const float* base;         // contiguous rows, or null
  const float* const* rows;  // one pointer per row, or null
  int64_t dim;
  const float* operator[](int64_t i) const { return rows ? rows[i] : base + i * dim; }
};

// Add every occurrence of a block's unique `sl` to the sum, in order. The occurrences of a hot id are
// scattered over the batch, so each one's row is a cache miss: the next occurrence's row is fetched
// while the current one is added.
__attribute__((always_inline)) inline void sum_block(const Block& bk, int64_t sl, const GradRows& grads,
                                                     ChunkedSum& sum) {
  for (int64_t i = bk.first[sl]; i >= 0;) {
    const int64_t nx = bk.next[i - bk.lo];
    if (nx >= 0)
      for (int64_t j = 0; j < sum.dim; j += 16) __builtin_prefetch(grads[nx] + j, 0, 3);
    sum.add(grads[i]);
    i = nx;
  }
}

// Phase 2: the rows thread `tid` owns and their reduced gradients (pointing into the batch when an id
// occurs once). Returns the number of rows. Cloned like apply_rows, for the reduction's row adds.
GT_CLONES
int64_t own_rows(Workspace& ws, const std::vector<Block>& blocks, int tid, const uint64_t* h, const GradRows& grads,
                 int64_t dim, bool mean) {
  const Block& mine = blocks[tid];
  const int nt = static_cast<int>(blocks.size());
  const int64_t m = static_cast<int64_t>(mine.uid.size());
  ws.rows.clear();
  ws.grad.clear();
  ws.acc_of.clear();
  int64_t acc_rows = 0;
  // First pass: decide ownership and how many accumulation rows are needed. An id held by one block is
  // its thread's; an id held by several (Zipf's hot ids are in every block) goes to one holder picked by
  // hash, so the reduction work of hot ids spreads over the threads instead of landing on thread 0.
  std::vector<int64_t>& total = ws_total();
  total.assign(m, 0);
  for (int64_t sl = 0; sl < m; ++sl) {
    const int64_t id = mine.uid[sl];
    const uint64_t hv = h[mine.first[sl]];
    int holders = 0, my_rank = 0;
    int64_t count = 0;
    for (int u = 0; u < nt; ++u) {
      const int64_t other = u == tid ? sl : blocks[u].find(id, hv);
      if (other < 0) continue;
      if (u == tid) my_rank = holders;
      ++holders;
      count += blocks[u].count[other];
    }
    if (holders > 1 && static_cast<int>((hv >> 40) % static_cast<uint64_t>(holders)) != my_rank) continue;
    total[sl] = count;
    ws.rows.push_back(id);
    ws.acc_of.push_back(count > 1 ? acc_rows++ : -1);
  }
  if (static_cast<int64_t>(ws.acc.size()) < acc_rows * dim) ws.acc.resize(acc_rows * dim);
  // Second pass: reduce repeated ids in batch order.
  int64_t k = 0;
  for (int64_t sl = 0; sl < m; ++sl) {
    if (total[sl] == 0) continue;
    const int64_t a = ws.acc_of[k++];
    if (a < 0) {
      ws.grad.push_back(grads[mine.first[sl]]);
      continue;
    }
    float* dst = ws.acc.data() + a * dim;
    if (total[sl] > graphtrain::kSumChunk && static_cast<int64_t>(ws.part.size()) < dim) ws.part.resize(dim);
    ChunkedSum sum{dst, ws.part.data(), dim};
    const int64_t id = mine.uid[sl];
    const uint64_t hv = h[mine.first[sl]];
    for (int u = 0; u < nt; ++u) {  // every block in batch order: the sum is the single-thread sum
      const int64_t other = u == tid ? sl : blocks[u].find(id, hv);
      if (other >= 0) sum_block(blocks[u], other, grads, sum);
    }
    sum.finish();
    if (mean) {
      const float c = static_cast<float>(total[sl]);
      for (int64_t j = 0; j < dim; ++j) dst[j] /= c;  // divide, as the reference does, not * (1/c)
    }
    ws.grad.push_back(dst);
  }
  return static_cast<int64_t>(ws.rows.size());
}

#include "update_rows.h"  // the update loop: per row width and table type, cloned per target

}  // namespace

GT_DEFINE_ABI_EXPORTS()

GT_API int gt_max_threads() { return omp_get_max_threads(); }


namespace {
// float bits read as integers without breaking strict aliasing.
typedef uint32_t __attribute__((may_alias)) float_bits;

// First position in [a, b) of a value whose exponent bits are all set (NaN, +-Inf), or -1. An integer
// test, so it vectorises and no floating-point flag can fold it away; blocks are first OR-ed, and only
// a block that holds one is searched.
GT_CLONES
int64_t first_nonfinite_range(const float_bits* u, int64_t a, int64_t b) {
  constexpr uint32_t kExp = 0x7f800000u;
  constexpr int64_t kBlock = 2048;
  for (int64_t lo = a; lo < b; lo += kBlock) {
    const int64_t hi = std::min(b, lo + kBlock);
    uint32_t any = 0;
    for (int64_t i = lo; i < hi; ++i) any |= static_cast<uint32_t>((u[i] & kExp) == kExp);
    if (any)
      for (int64_t i = lo; i < hi; ++i)
        if ((u[i] & kExp) == kExp) return i;
  }
  return -1;
}
}  // namespace

// Position of the first NaN or infinity in x[0..n), or -1: the shard servers refuse such gradients and
// values before any row is touched. One thread: it streams at ~28 GB/s (51 MB in 1.6-1.9 ms here), and
// two ran slower whenever the other core was busy.
GT_API int64_t gt_first_nonfinite(const float* x, int64_t n) {
  return first_nonfinite_range(reinterpret_cast<const float_bits*>(x), 0, n);
}

namespace {
// The first batch row holding a NaN or an infinity; failing that, the first row of `id` (whose finite
// gradients summed to an infinity). Called once a step was refused, so it may take its time.
int64_t first_bad_row(int64_t n, const int64_t* ids, const GradRows& grads, int64_t dim, int64_t id) {
  for (int64_t i = 0; i < n; ++i)
    if (first_nonfinite_range(reinterpret_cast<const float_bits*>(grads[i]), 0, dim) >= 0) return i;
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] == id) return i;
  return -1;
}

// refuse_nonfinite: each thread scans the reduced gradients of the rows it owns (the batch's own rows for
// ids that occur once) before any thread updates one, and a single non-finite value refuses the whole step:
// -2 with *bad_pos = first_bad_row, or -4 where only a sum of finite rows overflowed (*bad_pos: the first
// row of the smallest such id, whatever the team's size). One pass fewer than a scan of the batch
// beforehand: the rows are then read again from the cache by the update.
int64_t sparse_step(int32_t kind, int64_t n, const int64_t* ids, const GradRows& grads, int64_t dim, int64_t num_rows,
                    int32_t mean, void* table, int32_t table_dtype, uint64_t round_seed, float* state0, float* state1,
                    int64_t* row_steps, int64_t global_step, OptimParams params, int32_t threads, int64_t* bad_pos,
                    bool refuse_nonfinite = false) {
  threads = std::max(1, threads);
  const int64_t bad = first_bad(n, ids, num_rows, threads);
  if (bad >= 0) {
    *bad_pos = bad;
    return -1;
  }
  StepScratch& sc = step_scratch();
  if (static_cast<int64_t>(sc.hashes.size()) < n) sc.hashes.resize(n);
  if (static_cast<int>(sc.blocks.size()) < threads) sc.blocks.resize(threads);
  uint64_t* h = sc.hashes.data();
  int64_t total = 0;
  int64_t flagged = -1;  // a row whose reduced gradient is not finite (refuse_nonfinite)
#pragma omp parallel num_threads(threads) reduction(+ : total)
  {
    const int tid = omp_get_thread_num();
    const int nt = omp_get_num_threads();
#pragma omp single
    sc.blocks.resize(nt);
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i) h[i] = graphtrain::mix64(static_cast<uint64_t>(ids[i]));
    dedup_block(sc.blocks[tid], n * tid / nt, n * (tid + 1) / nt, ids, h);
#pragma omp barrier
    Workspace& ws = workspace();
    const int64_t local = own_rows(ws, sc.blocks, tid, h, grads, dim, mean != 0);
    if (refuse_nonfinite) {  // uniform over the team: every thread reaches the barrier
      int64_t least = -1;    // this thread's smallest flagged row: the team's verdict names the smallest,
      for (int64_t r = 0; r < local; ++r)  // whatever the team's size (a message the same from run to run)
        if ((least < 0 || ws.rows[r] < least) &&
            first_nonfinite_range(reinterpret_cast<const float_bits*>(ws.grad[r]), 0, dim) >= 0)
          least = ws.rows[r];
      if (least >= 0) {
#pragma omp critical(gt_sparse_step_flagged)
        if (flagged < 0 || least < flagged) flagged = least;
      }
#pragma omp barrier
    }
    int64_t refused;
#pragma omp atomic read
    refused = flagged;
    if (refused < 0) {
      apply_rows(kind, local, ws.rows.data(), ws.grad.data(), dim, table, table_dtype, round_seed, state0, state1,
                 row_steps, global_step, params);
      total += local;
    }
  }
  if (flagged >= 0) {
    *bad_pos = first_bad_row(n, ids, grads, dim, flagged);
    const bool summed = *bad_pos >= 0 &&
                        first_nonfinite_range(reinterpret_cast<const float_bits*>(grads[*bad_pos]), 0, dim) < 0;
    return summed ? -4 : -2;
  }
  return total;
}
}  // namespace

// Deduplicate `ids`, reduce `grads` (n x dim) per unique id, apply optimizer `kind` to those rows.
// State: adagrad state0 = G (rows x dim); rowwise_adagrad state0 = G (rows); adam state0 = m, state1 = v
// (rows x dim) and row_steps (rows, int64) for per-row step counts, or row_steps = null and global_step
// (already incremented by the caller) for one count per table.
// table_dtype (TableDtype): float32 rows, or float16 / bfloat16 rows written back with stochastic
// rounding keyed by round_seed (the caller's, new each step) and each row's id.
// Returns the number of unique rows updated, or -1 with *bad_pos = position of an id out of range.
// refuse_nonfinite: refuse the step, nothing touched, where a reduced gradient holds a NaN or an infinity
// (-2, or -4 for finite rows summed to one; *bad_pos: first_bad_row).
GT_API int64_t gt_sparse_step(int32_t kind, int64_t n, const int64_t* ids, const float* grads, int64_t dim,
                              int64_t num_rows, int32_t mean, void* table, int32_t table_dtype, uint64_t round_seed,
                              float* state0, float* state1, int64_t* row_steps, int64_t global_step,
                              OptimParams params, int32_t threads, int32_t refuse_nonfinite, int64_t* bad_pos) {
  return sparse_step(kind, n, ids, GradRows{grads, nullptr, dim}, dim, num_rows, mean, table, table_dtype, round_seed,
                     state0, state1, row_steps, global_step, params, threads, bad_pos, refuse_nonfinite != 0);
}

// gt_sparse_step with the gradients in `npieces` row blocks (block k: counts[k] rows of dim floats at
// blocks[k], the blocks' rows in batch order): a shard server applies a push that arrived in several
// frames as one step, reading each frame where it lies. refuse_nonfinite: as gt_sparse_step's (-2 with
// *bad_pos = the first row holding a NaN or an infinity, -4 where finite rows of one id sum to infinity,
// nothing touched). Returns as gt_sparse_step otherwise.
GT_API int64_t gt_sparse_step_pieces(int32_t kind, int64_t n, const int64_t* ids, int64_t npieces,
                                     const float* const* blocks, const int64_t* counts, int64_t dim, int64_t num_rows,
                                     int32_t mean, void* table, int32_t table_dtype, uint64_t round_seed,
                                     float* state0, float* state1, int64_t* row_steps, int64_t global_step,
                                     OptimParams params, int32_t threads, int32_t refuse_nonfinite,
                                     int64_t* bad_pos) {
  static thread_local std::vector<const float*> rows;
  rows.clear();
  for (int64_t k = 0; k < npieces; ++k)
    for (int64_t r = 0; r < counts[k]; ++r) rows.push_back(blocks[k] + r * dim);
  if (static_cast<int64_t>(rows.size()) != n) {
    *bad_pos = -1;
    return -3;  // the caller checks the counts; a mismatch never reaches the update
  }
  // refuse_nonfinite: scanned inside the step, row by row just before the update reads them (a NaN or an
  // infinity in any row makes its id's sum one: the same refusals, -2 or -4, as a scan beforehand), not in
  // a pass of its own over every gradient first (5 % of a WordNet shard server's CPU, 2026-12-06)
  return sparse_step(kind, n, ids, GradRows{nullptr, rows.data(), dim}, dim, num_rows, mean, table, table_dtype,
                     round_seed, state0, state1, row_steps, global_step, params, threads, bad_pos,
                     refuse_nonfinite != 0);
}

// Deduplicate `ids` in first-occurrence order and reduce `grads` per unique id (sum, or mean).
// out_ids (n) and out_grads (n x dim) receive the first `return value` unique ids and reduced rows.
// Returns the unique count, or -1 with *bad_pos = position of an id out of range; num_rows < 0: the ids
// are a dynamic vocabulary's keys, any int64 (only equality counts here).
// share_distinct: when every id is distinct, out_grads is left unwritten (the caller uses grads as they
// are: a 51 MB copy saved for a batch of 100,000 distinct rows of 128).
GT_API int64_t gt_dedup(int64_t n, const int64_t* ids, const float* grads, int64_t dim, int64_t num_rows, int32_t mean,
                        int64_t* out_ids, float* out_grads, int64_t* inverse, int32_t threads, int32_t share_distinct,
                        int64_t* bad_pos) {
  threads = std::max(1, threads);
  const int64_t bad = num_rows < 0 ? -1 : first_bad(n, ids, num_rows, threads);
  if (bad >= 0) {
    *bad_pos = bad;
    return -1;
  }
  // Sequential first-occurrence numbering: a deterministic order the caller can rely on.
  Workspace& ws = workspace();
  const int64_t cap = pow2_at_least(2 * n + 1), mask = cap - 1;
  if (static_cast<int64_t>(ws.table.size()) < cap) ws.table.resize(cap);
  std::fill(ws.table.begin(), ws.table.begin() + cap, Entry{kEmpty, 0});
  int64_t u = 0;
  // Hashes of the next kPrefetchIds ids, each computed once: its bucket is fetched when it enters the
  // ring, kPrefetchIds inserts before it is used (the table, 2-4n entries of 16 bytes, is not in cache).
  static_assert((kPrefetchIds & (kPrefetchIds - 1)) == 0, "ring size must be a power of two");
  uint64_t ring[kPrefetchIds];
  for (int64_t i = 0; i < std::min<int64_t>(n, kPrefetchIds); ++i)
    ring[i] = graphtrain::mix64(static_cast<uint64_t>(ids[i]));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t hv = ring[i & (kPrefetchIds - 1)];
    if (i + kPrefetchIds < n) {
      const uint64_t ahead = graphtrain::mix64(static_cast<uint64_t>(ids[i + kPrefetchIds]));
      ring[i & (kPrefetchIds - 1)] = ahead;
      __builtin_prefetch(&ws.table[ahead & static_cast<uint64_t>(mask)], 1, 3);
    }
    const int64_t id = ids[i];
    int64_t b = static_cast<int64_t>(hv & static_cast<uint64_t>(mask));
    while (ws.table[b].key != kEmpty && ws.table[b].key != id) b = (b + 1) & mask;
    if (ws.table[b].key == kEmpty) {
      ws.table[b] = Entry{id, u};
      out_ids[u++] = id;
    }
    inverse[i] = ws.table[b].slot;
  }
  const int64_t unique = u;
  if (share_distinct && unique == n) return unique;
  // Parallel reduction: thread t owns unique slots [t*unique/T, (t+1)*unique/T), scanning in batch order.
#pragma omp parallel num_threads(threads)
  {
    const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t lo = unique * tid / nt, hi = unique * (tid + 1) / nt;
    // occurrences so far per owned slot, and (ids seen more than kSumChunk times) a scratch row each
    std::vector<int64_t> counts(hi - lo, 0), part_of(hi - lo, -1);
    std::vector<float> parts;
    int64_t nparts = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t s = inverse[i];
      if (s < lo || s >= hi) continue;
      int64_t& k = counts[s - lo];
      if (k == graphtrain::kSumChunk && part_of[s - lo] < 0) {
        part_of[s - lo] = nparts++;
        parts.resize(nparts * dim);
      }
      ChunkedSum sum{out_grads + s * dim, k >= graphtrain::kSumChunk ? parts.data() + part_of[s - lo] * dim : nullptr,
                     dim, k};
      sum.add(grads + i * dim);
      k = sum.k;
    }
    for (int64_t s = lo; s < hi; ++s)
      if (counts[s - lo] > graphtrain::kSumChunk)
        ChunkedSum{out_grads + s * dim, parts.data() + part_of[s - lo] * dim, dim, counts[s - lo]}.finish();
    if (mean)
      for (int64_t s = lo; s < hi; ++s)
        if (counts[s - lo] > 1) {
          const float c = static_cast<float>(counts[s - lo]);
          for (int64_t j = 0; j < dim; ++j) out_grads[s * dim + j] /= c;
        }
  }
  return unique;
}

// out[dest[i]] = table[ids[i]] for i < n (dest null: out[i]). A pull whose ids span several shards
// lands each shard's rows at their places in the caller's output in one pass, without a staging copy.
// Returns 0, or -1 with *bad_pos (dest is the caller's own, checked by the caller against out's rows).
GT_API int gt_gather(int64_t n, const int64_t* ids, const float* table, int64_t dim, int64_t num_rows, float* out,
                     const int64_t* dest, int32_t threads, int64_t* bad_pos) {
  threads = std::max(1, threads);
  const int64_t bad = first_bad(n, ids, num_rows, threads);
  if (bad >= 0) {
    *bad_pos = bad;
    return -1;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    if (i + kGatherAhead < n) __builtin_prefetch(table + ids[i + kGatherAhead] * dim, 0, 1);
    std::memcpy(out + (dest ? dest[i] : i) * dim, table + ids[i] * dim, sizeof(float) * dim);
  }
  return 0;
}

// table[ids[i]] = values[i]; with duplicate ids the last one in batch order wins, as a sequential loop.
// Returns 0, or -1 with *bad_pos.
GT_API int gt_scatter(int64_t n, const int64_t* ids, const float* values, float* table, int64_t dim,
                      int64_t num_rows, int32_t threads, int64_t* bad_pos) {
  threads = std::max(1, threads);
  const int64_t bad = first_bad(n, ids, num_rows, threads);
  if (bad >= 0) {
    *bad_pos = bad;
    return -1;
  }
#pragma omp parallel num_threads(threads)
  {
    const int tid = omp_get_thread_num(), nt = omp_get_num_threads();
    for (int64_t i = 0; i < n; ++i)
      if (owner_of(ids[i], nt) == tid) std::memcpy(table + ids[i] * dim, values + i * dim, sizeof(float) * dim);
  }
  return 0;
}

// Ask the kernel to back [ptr, ptr+bytes) with transparent huge pages (2 MB), which cuts TLB misses of
// random row access on multi-GB tables. Returns madvise's result (0 on success), 1 if the range is too small.
GT_API int gt_advise_hugepages(void* ptr, int64_t bytes) {
  const uintptr_t huge = 2u << 20;
  const uintptr_t start = (reinterpret_cast<uintptr_t>(ptr) + huge - 1) & ~(huge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(ptr) + static_cast<uintptr_t>(bytes)) & ~(huge - 1);
  if (end <= start) return 1;
#ifdef MADV_HUGEPAGE
  return madvise(reinterpret_cast<void*>(start), end - start, MADV_HUGEPAGE);
#else
  return 1;
#endif
}
