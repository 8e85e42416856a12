// The fast lane's answers to pulls, pushes and samples (the design and the wire: fastlane.cpp).

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "fastlane.h"
#include "graphtrain/api.h"
#include "half_rows_avx512.h"

// the native sampler (sampling.cpp): the ZMQ path's draws, per (seed, node)
GT_API int64_t gt_sample_neighbors(const int64_t* indptr, const int64_t* indices, int64_t lo, int64_t num_local,
                                   const int64_t* seeds, int64_t n, int64_t fanout, uint64_t seed,
                                   int64_t* out_counts, int64_t* out_src, int64_t* bad_pos);
// the CPU core's sparse step (optim_cpu.cpp): what the Python path calls for a push
GT_API int64_t gt_sparse_step_pieces(int32_t kind, int64_t n, const int64_t* ids, int64_t npieces,
                                     const float* const* blocks, const int64_t* counts, int64_t dim, int64_t num_rows,
                                     int32_t mean, void* table, int32_t table_dtype, uint64_t round_seed,
                                     float* state0, float* state1, int64_t* row_steps, int64_t global_step,
                                     graphtrain::OptimParams params, int32_t threads, int32_t refuse_nonfinite,
                                     int64_t* bad_pos);

namespace graphtrain::lane {

void Server::answered(const Conn& c, size_t at, Stat ok, Stat rows, uint64_t n,
                      std::chrono::steady_clock::time_point start) {
  count(ok);
  if (rows != kStats) count(rows, n);
  count(kBytesOut, c.out.size() - at);
  count(kBusyNs, static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                           std::chrono::steady_clock::now() - start).count()));
}

// An id outside [lo, hi): its refusal, or an empty string.
std::string Server::outside(const int64_t* ids, uint64_t n, const std::string& name, int64_t lo, int64_t hi) {
  for (uint64_t i = 0; i < n; ++i) {
    if (ids[i] < lo || ids[i] >= hi) {
      char msg[256];
      int len = std::snprintf(msg, sizeof msg,
                              "id %lld (position %llu) of '%.64s' is outside this shard's rows [%lld, %lld)",
                              static_cast<long long>(ids[i]), static_cast<unsigned long long>(i), name.c_str(),
                              static_cast<long long>(lo), static_cast<long long>(hi));
      return std::string(msg, static_cast<size_t>(len > 0 ? len : 0));
    }
  }
  return {};
}

// One complete pull at `h`: its reply is appended to c.out.
void Server::pull(Conn& c, const char* h) {
  const size_t at = c.out.size();
  uint16_t name_len = load<uint16_t>(h + 6);
  uint64_t rid = load<uint64_t>(h + 8), n = load<uint64_t>(h + 16);
  std::string name(h + kRequest, name_len);
  const char* typep = h + kRequest + ((name_len + 7) & ~size_t{7});
  RowType want{load<uint32_t>(typep), load<uint32_t>(typep + 4),
               {load<uint64_t>(typep + 8), load<uint64_t>(typep + 16), load<uint64_t>(typep + 24)}};
  const char* idp = typep + kRowType;
  auto start = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = tables.find(name);
    if (it == tables.end()) {
      refuse(c, at, rid, kNotHere, "table '" + name.substr(0, 64) + "' is not served by the fast lane");
      return;
    }
    const Table& t = it->second;
    if (!(t.type == want)) {  // the ZMQ path converts or refuses as numpy does
      refuse(c, at, rid, kNotHere, "the caller's row type is not the table's");
      return;
    }
    if (static_cast<int64_t>(n) * t.row_bytes > max_reply) {
      refuse(c, at, rid, kNotHere, "the pull is larger than the fast lane's replies");
      return;
    }
    const int64_t* ids = reinterpret_cast<const int64_t*>(idp);
    std::string bad = outside(ids, n, name, t.lo, t.hi);
    if (!bad.empty()) {
      refuse(c, at, rid, kError, bad);
      return;
    }
    size_t bytes = n * static_cast<size_t>(t.row_bytes);
    if (!fits(c, bytes)) {  // a batch's replies past their room: this one over ZMQ
      overflow(c, at, rid);
      return;
    }
    const size_t payload = reply(c, rid, kOk, nullptr, bytes);  // before data(): reply() may move c.out
    char* dst = c.out.data() + payload;
    for (uint64_t i = 0; i < n; ++i)
      std::memcpy(dst + i * t.row_bytes, t.data + (ids[i] - t.lo) * t.row_bytes, t.row_bytes);
  }
  answered(c, at, kPullsOk, kRows, n, start);
}

const float* Server::segment(const std::string& name, uint64_t offset, uint64_t bytes) {
  const size_t n = push_prefix.size();
  if (n == 0 || name.size() <= n || name.compare(0, n, push_prefix) != 0) return nullptr;
  for (char ch : name)  // a name in /dev/shm, never a path
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.')) return nullptr;
  // without waiting (a FIFO named so would block a read-only open), and only this user's regular files
  int fd = shm_open(("/" + name).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0);
  if (fd < 0) return nullptr;
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() || st.st_size <= 0) {
    ::close(fd);
    return nullptr;
  }
  const auto size = static_cast<size_t>(st.st_size);
  auto same = [&](const Segment& g) {
    return g.name == name && g.dev == static_cast<uint64_t>(st.st_dev) &&
           g.ino == static_cast<uint64_t>(st.st_ino) && g.size == size;
  };
  auto it = std::find_if(segments.begin(), segments.end(), same);
  if (it != segments.end()) {
    std::rotate(it, it + 1, segments.end());  // most recently used last
    ::close(fd);
  } else {
    void* base = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
      ::close(fd);
      return nullptr;
    }
    // the name's older file, buffers unlinked since (a client's grown or closed one: their memory is
    // freed once unmapped), or the least used
    for (auto g = segments.begin(); g != segments.end();) {
      struct stat gs {};
      bool gone = g->name == name || fstat(g->fd, &gs) != 0 || gs.st_nlink == 0;
      if (gone || segments.size() >= kMaxSegments) {
        munmap(const_cast<char*>(g->base), g->size);
        ::close(g->fd);
        g = segments.erase(g);
      } else {
        ++g;
      }
    }
    segments.push_back(Segment{name, static_cast<const char*>(base), size, static_cast<uint64_t>(st.st_dev),
                               static_cast<uint64_t>(st.st_ino), fd});
  }
  const Segment& g = segments.back();
  if (offset % 4 != 0 || offset > g.size || bytes > g.size - offset) return nullptr;
  return reinterpret_cast<const float*>(g.base + offset);
}

// One complete push at `h`: the step under the table's lock, its unique rows appended to c.out.
void Server::push(Conn& c, char* h) {
  const size_t at = c.out.size();
  uint16_t name_len = load<uint16_t>(h + 6);
  uint64_t rid = load<uint64_t>(h + 8), n = load<uint64_t>(h + 16), bytes = load<uint64_t>(h + 24);
  std::string name(h + kRequest, name_len);
  const char* typep = h + kRequest + ((name_len + 7) & ~size_t{7});
  RowType got{load<uint32_t>(typep), load<uint32_t>(typep + 4),
              {load<uint64_t>(typep + 8), load<uint64_t>(typep + 16), load<uint64_t>(typep + 24)}};
  int64_t step = load<int64_t>(typep + kRowType);
  const bool shared = load<uint16_t>(h + 4) == kOpPushShared;  // its gradients in a push buffer, float32
  const char* after = typep + kRowType + (shared ? 16 : 8);
  std::string buffer = shared ? std::string(after, bytes) : std::string();
  if (shared) after += (bytes + 7) & ~uint64_t{7};
  int64_t* ids = reinterpret_cast<int64_t*>(h + (after - h));  // 8-byte aligned: see need
  const float* grads = reinterpret_cast<const float*>(ids + n);  // a half table's: its type's bits
  auto start = std::chrono::steady_clock::now();
  int64_t updated = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = tables.find(name);
    RowType want = it == tables.end() ? RowType{} : it->second.type;
    if (shared) want.code = 1;  // float32 ("<f4", wire/fastwire.py ELEMENT_TYPES)
    if (it == tables.end() || it->second.lock == nullptr || !(want == got)) {
      refuse(c, at, rid, kNotHere, "the fast lane does not step table '" + name.substr(0, 64) + "'");
      return;
    }
    const Table& t = it->second;
    if (shared) {
      uint64_t elements = 1;
      for (uint32_t k = 0; k < got.ndim; ++k) elements *= got.dims[k];
      bytes = n * elements * 4;
      if (bytes > c.shared_left) {  // the client sends bigger ones over ZMQ
        refuse(c, at, rid, kBusy, "the push is larger than the fast lane steps");
        return;
      }
      c.shared_left -= bytes;
      const auto unit = static_cast<uint64_t>(max_reply);
      c.turns += static_cast<int>((bytes + unit - 1) / unit);  // its work takes the turns of as many pulls
      grads = segment(buffer, load<uint64_t>(typep + kRowType + 8), bytes);
      if (grads == nullptr) {
        refuse(c, at, rid, kBusy, "the push's buffer cannot be read here");
        return;
      }
    }
    if (step != kNoStep && (step < 1 || step > kMaxStep)) {  // the ZMQ path's bounds (wire/opargs.py)
      char msg[128];
      int len = std::snprintf(msg, sizeof msg, "argument 'step' must be in [1, %lld], got %lld",
                              static_cast<long long>(kMaxStep), static_cast<long long>(step));
      refuse(c, at, rid, kError, std::string(msg, static_cast<size_t>(len > 0 ? len : 0)));
      return;
    }
    if (!shared && bytes != n * static_cast<uint64_t>(t.row_bytes)) {
      refuse(c, at, rid, kError, "a push's gradient bytes are not its ids' rows");
      return;
    }
    std::string bad = outside(ids, n, name, t.lo, t.hi);
    if (!bad.empty()) {
      refuse(c, at, rid, kError, bad);
      return;
    }
    if (!fits(c, 8)) {
      overflow(c, at, rid);
      return;
    }
    graphtrain::TableLock* l = t.lock;
    if (!l->try_acquire()) {  // a worker steps it, or a checkpoint reads it: that worker's wait, not ours
      refuse(c, at, rid, kBusy, "the table is locked");
      return;
    }
    const graphtrain::StepDesc d = l->desc;
    const bool half = d.table_dtype != graphtrain::kTableFloat32;
    const int64_t element = half ? 2 : 4;
    if (!l->steppable.load(std::memory_order_acquire) || d.table == nullptr || d.dim * element != t.row_bytes ||
        d.num_rows != t.hi - t.lo) {
      l->release();
      refuse(c, at, rid, kBusy, "the table's step is not described to the fast lane now");
      return;
    }
    for (uint64_t i = 0; i < n; ++i) ids[i] -= t.lo;
    const int64_t global = d.global_step == nullptr ? 0 : step != kNoStep ? step : *d.global_step + 1;
    const int64_t rows = static_cast<int64_t>(n);
    uint64_t seed = 0;
    if (half && !shared) {  // a half table's gradients crossed in its type (dtypes.narrowed): widened, exactly
      widened.resize(n * static_cast<size_t>(d.dim));
      const auto* bits = reinterpret_cast<const uint16_t*>(grads);
      const auto all = static_cast<int64_t>(widened.size());
      const bool bf16 = d.table_dtype == graphtrain::kTableBFloat16;
      if (avx512::supported() && bf16)  // the update loop's conversions (half_rows_avx512.h): the same bits
        avx512::bf16_row_to_float(widened.data(), bits, all);
      else if (avx512::supported())
        avx512::fp16_row_to_float(widened.data(), bits, all);
      else
        for (int64_t k = 0; k < all; ++k) widened[k] = graphtrain::half_to_float(bits[k], d.table_dtype);
      grads = widened.data();
    }
    if (half)  // TensorShard.round_seed's: counted before the step, a refused one included
      seed = d.seed_base | (static_cast<uint64_t>(++*d.steps) & 0xFFFFFFFFu);
    int64_t bad_at = -1;
    updated = gt_sparse_step_pieces(d.kind, rows, ids, 1, &grads, &rows, d.dim, d.num_rows, d.mean, d.table,
                                    d.table_dtype, seed, d.state0, d.state1, d.row_steps, global, d.params, 1,
                                    d.refuse_nonfinite, &bad_at);
    if (updated >= 0) {
      if (d.global_step != nullptr) *d.global_step = global;
      if (d.changed != nullptr)
        for (uint64_t i = 0; i < n; ++i) d.changed[ids[i]] = 1;
    }
    l->release();
    if (updated < 0) {
      std::string msg = "push_grad of '" + name.substr(0, 64) + "': the optimizer core refused it";
      if (updated == -2) {  // the Python path's words (storage/update.py: nonfinite_refusal)
        int64_t bad_rows = 0;
        for (uint64_t r = 0; r < n; ++r)
          for (int64_t k = 0; k < d.dim; ++k)
            if (!std::isfinite(grads[r * d.dim + k])) {
              ++bad_rows;
              break;
            }
        char buf[320];
        int len = std::snprintf(buf, sizeof buf,
                                "push_grad of '%.64s': %lld gradient row(s) hold NaN or infinity (first id "
                                "%lld); no row was updated",
                                name.c_str(), static_cast<long long>(bad_rows),
                                static_cast<long long>(bad_at >= 0 ? ids[bad_at] + t.lo : -1));
        msg.assign(buf, static_cast<size_t>(len > 0 ? len : 0));
      } else if (updated == -4) {  // finite rows of one id summed to infinity (nonfinite_refusal's words)
        char buf[256];
        int len = std::snprintf(buf, sizeof buf,
                                "push_grad of '%.64s': the gradients of id %lld sum to infinity; no row was "
                                "updated",
                                name.c_str(), static_cast<long long>(bad_at >= 0 ? ids[bad_at] + t.lo : -1));
        msg.assign(buf, static_cast<size_t>(len > 0 ? len : 0));
      }
      refuse(c, at, rid, kError, msg);
      return;
    }
  }
  const size_t payload = reply(c, rid, kOk, nullptr, 8);
  store<int64_t>(c.out.data() + payload, updated);
  answered(c, at, kPushesOk, kRowsPushed, n, start);
}

// One complete sample request at `h`: the counts, then the sources, appended to c.out.
void Server::sample(Conn& c, const char* h) {
  const size_t at = c.out.size();
  uint64_t rid = load<uint64_t>(h + 8), n = load<uint64_t>(h + 16);
  int64_t fanout = load<int64_t>(h + kRequest);
  uint64_t seed = load<uint64_t>(h + kRequest + 8);
  const int64_t* seeds = reinterpret_cast<const int64_t*>(h + kRequest + kSampleArgs);
  auto start = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mu);
  if (graph.indptr == nullptr || fanout < 1 || static_cast<int64_t>(8 * n) > max_reply) {
    refuse(c, at, rid, kNotHere, "the fast lane samples no graph here, or not with this fan-out");
    return;
  }
  if (!fits(c, 8 * n)) {
    overflow(c, at, rid);
    return;
  }
  size_t payload = reply(c, rid, kOk, nullptr, 8 * n);
  int64_t* counts = reinterpret_cast<int64_t*>(c.out.data() + payload);
  int64_t bad = -1;
  int64_t total = gt_sample_neighbors(graph.indptr, graph.indices, graph.lo, graph.num_nodes, seeds,
                                      static_cast<int64_t>(n), fanout, seed, counts, nullptr, &bad);
  if (total < 0) {
    char msg[160];
    int len = std::snprintf(msg, sizeof msg, "seed %lld is outside this partition's nodes [%lld, %lld)",
                            static_cast<long long>(seeds[bad]), static_cast<long long>(graph.lo),
                            static_cast<long long>(graph.lo + graph.num_nodes));
    refuse(c, at, rid, kError, std::string(msg, static_cast<size_t>(len > 0 ? len : 0)));
    return;
  }
  size_t bytes = 8 * (n + static_cast<size_t>(total));
  if (static_cast<int64_t>(bytes) > max_reply) {
    refuse(c, at, rid, kNotHere, "the sample is larger than the fast lane's replies");
    return;
  }
  c.out.resize(at);
  if (!fits(c, bytes)) {
    overflow(c, at, rid);
    return;
  }
  payload = reply(c, rid, kOk, nullptr, bytes);
  counts = reinterpret_cast<int64_t*>(c.out.data() + payload);
  gt_sample_neighbors(graph.indptr, graph.indices, graph.lo, graph.num_nodes, seeds, static_cast<int64_t>(n),
                      fanout, seed, counts, counts + n, &bad);
  answered(c, at, kSamplesOk, kStats, 0, start);
}

}  // namespace graphtrain::lane
