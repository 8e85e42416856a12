// A dynamic vocabulary's key map: arbitrary int64 keys -> rows 0..capacity-1 of one shard (CPU).
//
// Open addressing with linear probing over a power-of-two slot array at most half full, deletion by
// backward shift (no tombstones, so probes stay short however many keys were evicted). Rows are handed
// out in order of first sight; each row remembers its key and the tick of the batch that last used it.
// When the shard is full, an insert either fails whole (nothing inserted: the caller names the table,
// the shard and the capacity) or evicts the least recently used rows that the batch itself does not
// use, chosen at batch granularity by one nth_element over the ticks (O(capacity) per evicting batch,
// as HugeCTR's and TorchRec's managed-collision evictions also work per batch). Not thread-safe: the
// table's lock serialises callers.

#include "graphtrain/api.h"
#include "graphtrain/optim_math.h"

#include <algorithm>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

namespace {

struct KeyMap {
  int64_t capacity = 0;
  uint64_t mask = 0;
  std::vector<int64_t> slot_key;
  std::vector<int64_t> slot_row;  // -1: empty
  std::vector<int64_t> row_key;   // rows [0, used) hold a key
  std::vector<uint64_t> row_tick;
  int64_t used = 0;

  explicit KeyMap(int64_t cap) : capacity(cap) {
    uint64_t slots = 16;
    while (slots < static_cast<uint64_t>(cap) * 2) slots <<= 1;
    mask = slots - 1;
    slot_key.assign(slots, 0);
    slot_row.assign(slots, -1);
    row_key.assign(cap, 0);
    row_tick.assign(cap, 0);
  }

  uint64_t home(int64_t key) const { return graphtrain::mix64(static_cast<uint64_t>(key)) & mask; }

  // The slot holding `key`, or the empty slot where it would go.
  uint64_t probe(int64_t key) const {
    uint64_t s = home(key);
    while (slot_row[s] >= 0 && slot_key[s] != key) s = (s + 1) & mask;
    return s;
  }

  int64_t find(int64_t key) const { return slot_row[probe(key)]; }

  void put(int64_t key, int64_t row) {
    uint64_t s = probe(key);
    slot_key[s] = key;
    slot_row[s] = row;
    row_key[row] = key;
  }

  // Backward-shift deletion: later entries of the run move up so no probe meets a hole too early.
  void erase(int64_t key) {
    uint64_t s = probe(key);
    if (slot_row[s] < 0) return;
    uint64_t hole = s;
    uint64_t j = s;
    for (;;) {
      j = (j + 1) & mask;
      if (slot_row[j] < 0) break;
      uint64_t h = home(slot_key[j]);
      // move j into the hole unless its home lies cyclically in (hole, j]
      bool stays = (hole <= j) ? (hole < h && h <= j) : (hole < h || h <= j);
      if (!stays) {
        slot_key[hole] = slot_key[j];
        slot_row[hole] = slot_row[j];
        hole = j;
      }
    }
    slot_row[hole] = -1;
  }
};

}  // namespace

GT_API void* gt_keymap_new(int64_t capacity) {
  if (capacity < 1) return nullptr;
  try {
    return new KeyMap(capacity);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

GT_API void gt_keymap_free(void* map) { delete static_cast<KeyMap*>(map); }

GT_API int64_t gt_keymap_size(const void* map) { return static_cast<const KeyMap*>(map)->used; }

// rows[i] = the row of keys[i], or -1 when the map does not hold it (nothing is inserted or touched).
GT_API void gt_keymap_find(const void* map, int64_t n, const int64_t* keys, int64_t* rows) {
  const KeyMap& m = *static_cast<const KeyMap*>(map);
  for (int64_t i = 0; i < n; ++i) rows[i] = m.find(keys[i]);
}

// The keys of rows [0, size): what a checkpoint stores beside the rows.
GT_API void gt_keymap_keys(const void* map, int64_t* keys) {
  const KeyMap& m = *static_cast<const KeyMap*>(map);
  std::copy(m.row_key.begin(), m.row_key.begin() + m.used, keys);
}

// rows[i] = the row of keys[i], inserting the keys not yet held (first sight order) and marking every
// row used with `tick`. Returns the number of rows evicted to make room (their old keys in ev_keys and
// rows in ev_rows, room for n each: the caller resets those rows to the new keys' initial values), or
// -1: the map is full and evict is 0, -2: the batch alone holds more distinct keys than the capacity.
// On -1 and -2 nothing changed.
GT_API int64_t gt_keymap_insert(void* map, int64_t n, const int64_t* keys, int64_t* rows, uint64_t tick,
                                int32_t evict, int64_t* ev_keys, int64_t* ev_rows) {
  KeyMap& m = *static_cast<KeyMap*>(map);
  std::vector<int64_t> fresh;  // distinct keys not held, in first-sight order
  for (int64_t i = 0; i < n; ++i) {
    rows[i] = m.find(keys[i]);
    if (rows[i] < 0) fresh.push_back(keys[i]);
  }
  if (!fresh.empty()) {
    std::vector<int64_t> sorted(fresh);
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    std::vector<int64_t> seen;
    seen.reserve(sorted.size());
    std::vector<char> taken(sorted.size(), 0);
    for (int64_t k : fresh) {  // keep first-sight order, drop repeats
      size_t at = std::lower_bound(sorted.begin(), sorted.end(), k) - sorted.begin();
      if (!taken[at]) {
        taken[at] = 1;
        seen.push_back(k);
      }
    }
    fresh.swap(seen);
  }
  const int64_t need = static_cast<int64_t>(fresh.size());
  const int64_t room = m.capacity - m.used;
  int64_t evicted = 0;
  if (need > room) {
    if (!evict) return -1;
    // rows this batch uses are not candidates; the others by last use, oldest first
    std::vector<char> in_batch(m.used, 0);
    for (int64_t i = 0; i < n; ++i)
      if (rows[i] >= 0) in_batch[rows[i]] = 1;
    std::vector<std::pair<uint64_t, int64_t>> cand;
    cand.reserve(m.used);
    for (int64_t r = 0; r < m.used; ++r)
      if (!in_batch[r]) cand.emplace_back(m.row_tick[r], r);
    const int64_t want = need - room;
    if (static_cast<int64_t>(cand.size()) < want) return -2;
    std::nth_element(cand.begin(), cand.begin() + (want - 1), cand.end());
    std::sort(cand.begin(), cand.begin() + want);
    for (int64_t e = 0; e < want; ++e) {
      const int64_t r = cand[e].second;
      ev_keys[e] = m.row_key[r];
      ev_rows[e] = r;
      m.erase(m.row_key[r]);
    }
    evicted = want;
  }
  int64_t reuse = 0;
  for (int64_t k : fresh) {
    const int64_t row = (m.used < m.capacity) ? m.used++ : ev_rows[reuse++];
    m.put(k, row);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (rows[i] < 0) rows[i] = m.find(keys[i]);
    m.row_tick[rows[i]] = tick;
  }
  return evicted;
}

// The uniforms a dynamic vocabulary's new rows start from (runtime/kvstore/inits.py: init_keyed): for
// key i and column j, mix64((key * cols + j) * golden + base) >> 40, times 2^-24, in [0, 1). The same
// bits as inits.py's numpy reference (wrapping uint64 arithmetic; the conversion to double is exact), so
// a key gets the same row from either, whichever shard or rank inserts it.
GT_API void gt_keyed_unit(int64_t n, const int64_t* keys, int64_t cols, uint64_t base, double* out) {
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
  const uint64_t c = static_cast<uint64_t>(cols);
#pragma omp parallel for schedule(static) if (n * cols > (1 << 16))
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t first = static_cast<uint64_t>(keys[i]) * c;
    double* row = out + i * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const uint64_t bits = graphtrain::mix64((first + static_cast<uint64_t>(j)) * kGolden + base);
      row[j] = static_cast<double>(bits >> 40) * 0x1p-24;
    }
  }
}
