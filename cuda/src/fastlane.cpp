// The shard server's fast lane: small pulls of host tables answered by one native thread, without the
// GIL, without ZMQ and without a hand-off between threads (issue 47, item 1).
//
// Why. Over ZMQ a 64-row pull cost the server ~0.6 ms of CPU (bench/RESULTS.md, "the request path"):
// the gather is ~15 us; the rest was Python around pyzmq (poll, recv, parse, validate, encode, send)
// and ZMQ's own I/O thread (~80 us alone). A trainer at 4 hosts sends ~19 such requests a step.
//
// What. One thread, one epoll set, non-blocking sockets. The wire (all little-endian, version 1):
//   hello    client -> server  "GTFL" u16 version, u16 token length (1..256), the token
//            server -> client  "GTFL" u32 status (0 accepted; anything else: refused, then closed)
//   request  "GTRQ" u16 op, u16 name length, u64 rid, u64 count (<= max_ids), u64 reserved (0; a push: its
//            gradients' bytes, <= max_reply_bytes), then
//            op 1, pull:   the table's name (1..128 bytes) padded with zeros to 8 bytes, the row type
//                          the caller reads (u32 element type code, u32 dims 0..3, u64 dims[3]: a
//                          table of another type answers "not served here"), `count` ids (int64,
//                          global rows)
//            op 2, sample: no name; i64 fan-out (>= 1: "all" is the ZMQ path's), u64 seed, `count`
//                          seeds (int64, global nodes)
//            op 3, push:   a gradient push (push_grad): the table's name padded as a pull's, the
//                          gradients' row type (the table's), i64 step (Adam's table-wide count; INT64_MIN:
//                          none), `count` ids (int64, global rows), then `count` gradient rows
//   reply    "GTRP" u32 status (0 ok, 1 error, 2 not served here, 3 busy: ask over ZMQ this time), u64 rid,
//            u64 payload bytes, then a UTF-8 message, or (ok) the rows of a pull, or a sample's counts
//            (int64, one per seed) and the sampled sources (int64), the draws of gt_sample_neighbors, as
//            the ZMQ path's, or a push's unique rows updated (int64)
// Guarantees, as the ZMQ path's: the token is checked (constant time) before anything else is read (at
// most a quarter of max_conns connections may be waiting to send it, the oldest making room for a
// newcomer: peers without the token cannot take every slot, nor keep a client out); a
// framing error closes the connection; an id outside the shard's rows is refused naming it; a table that
// is not registered (GPU, dynamic vocabulary, unknown) or a pull over max_reply_bytes answers "not served
// here" and the client asks over ZMQ. Memory is bounded per connection (one request and one reply: the
// connection is not read while its reply waits: a request of at most ~390 KiB, a push's, and a reply of
// max_reply_bytes) and in all (max_conns); a peer that takes nothing for
// stall_ms with a reply pending, or does not finish its hello in handshake_ms, is closed. Rows are read
// without the table's lock, as the ZMQ path's pulls read them (one writer per row, readers may see a row
// between two steps); the registry's mutex only keeps a table's memory alive while it is copied.
// A push is stepped on this thread under the table's own lock (table_lock.h), shared with the server's
// Python threads and only tried here: a table whose lock is held, or whose step description is not
// current (a checkpoint copying rows in the background, a new optimizer), answers "busy" and the client
// pushes over ZMQ, where a worker waits for the lock. The step is the Python path's: the same core
// function (gt_sparse_step_pieces, one thread), the same refusal of NaN or infinity before any row is
// touched, Adam's table-wide count set from the client's, the written rows marked for the next
// incremental checkpoint. Tables the lane does not step (half rows, a row norm, skipped non-finite
// gradients, a dynamic vocabulary, a GPU table) are not described to it and answer "not served here".

#include "graphtrain/api.h"
#include "table_lock.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

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

namespace {

constexpr uint32_t kHelloMagic = 0x4c465447;  // "GTFL"
constexpr uint32_t kRequestMagic = 0x51525447;  // "GTRQ"
constexpr uint32_t kReplyMagic = 0x50525447;  // "GTRP"
constexpr uint16_t kVersion = 1;
constexpr uint16_t kOpPull = 1, kOpSample = 2, kOpPush = 3;
constexpr int64_t kNoStep = INT64_MIN;
constexpr size_t kSampleArgs = 16;  // fan-out, seed
constexpr size_t kRowType = 32;     // element type code, dims, dims[3]
constexpr size_t kHello = 8, kRequest = 32, kReply = 24, kMaxToken = 256, kMaxName = 128;
constexpr int kPerWake = 16;  // requests one connection may have answered before the others' turn
enum Status : uint32_t { kOk = 0, kError = 1, kNotHere = 2, kBusy = 3 };
// the counters gt_fast_stats reports, in this order (runtime/kvstore/serving/fastlane.py names them)
enum Stat {
  kPullsOk, kPullsError, kNotServed, kRows, kBytesOut, kMalformed, kRefused, kHandshakeTimeouts,
  kStalled, kFull, kOpen, kLoops, kAccepted, kBusyNs, kLastLoopMs, kSamplesOk, kPushesOk, kRowsPushed,
  kPushesBusy, kStats
};
enum Stage { kHelloHead, kHelloToken, kHead, kBody };

struct RowType {
  uint32_t code, ndim;
  uint64_t dims[3];
  bool operator==(const RowType& o) const {
    return code == o.code && ndim == o.ndim && dims[0] == o.dims[0] && dims[1] == o.dims[1] &&
           dims[2] == o.dims[2];
  }
};

struct Table {
  const char* data;
  int64_t lo, hi, row_bytes;
  RowType type;
  graphtrain::TableLock* lock;  // the table's lock and step (table_lock.h), or null: pushes not served
};

struct Graph {  // the partition's in-edges (CSR over rows lo..lo+num_nodes), for sampling
  const int64_t* indptr = nullptr;
  const int64_t* indices = nullptr;
  int64_t lo = 0, num_nodes = 0;
};

struct Conn {
  int fd = -1;
  Stage stage = kHelloHead;
  bool authed = false;
  std::vector<char> in;  // the current hello or request; 8-byte aligned (operator new)
  size_t have = 0, need = kHello;
  std::vector<char> out;
  size_t sent = 0;
  int64_t deadline_ms = 0;  // the hello's
  int64_t progress_ms = 0;  // last byte of a pending reply taken
  bool writing = false;     // watched for EPOLLOUT, not EPOLLIN
};

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(steady_clock::now().time_since_epoch()).count();
}

template <typename T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <typename T>
void store(char* p, T v) {
  std::memcpy(p, &v, sizeof v);
}

struct Server {
  int listen_fd = -1, epfd = -1, wake_fd = -1;
  std::string token;
  int64_t max_conns, max_ids, max_reply, handshake_ms, stall_ms;
  std::mutex mu;  // guards tables
  std::unordered_map<std::string, Table> tables;
  Graph graph;  // guarded by mu too
  std::unordered_map<int, Conn> conns;
  int64_t unauthed = 0;  // connections that have not sent the token yet
  std::atomic<uint64_t> stats[kStats];
  std::atomic<bool> stopping{false};
  std::thread thread;

  void count(Stat s, uint64_t n = 1) { stats[s].fetch_add(n, std::memory_order_relaxed); }

  void watch(Conn& c, bool writing) {
    if (c.writing == writing) return;
    c.writing = writing;
    epoll_event ev{};
    ev.events = writing ? EPOLLOUT : EPOLLIN;
    ev.data.fd = c.fd;
    epoll_ctl(epfd, EPOLL_CTL_MOD, c.fd, &ev);
  }

  void close_conn(int fd) {
    epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr);
    ::close(fd);
    auto it = conns.find(fd);
    if (it != conns.end() && !it->second.authed) --unauthed;
    conns.erase(fd);
    stats[kOpen].store(conns.size(), std::memory_order_relaxed);
  }

  // Room for a newcomer when a quarter of the slots wait for a token: the one waiting longest goes (a
  // client sends its token at once; a peer without it holds a slot until the next newcomer comes).
  void evict_oldest_unauthenticated() {
    int oldest = -1;
    int64_t since = INT64_MAX;
    for (auto& [fd, c] : conns)
      if (!c.authed && c.deadline_ms < since) {
        since = c.deadline_ms;
        oldest = fd;
      }
    if (oldest >= 0) {
      count(kFull);
      close_conn(oldest);
    }
  }

  void accept_all(int64_t now) {
    for (int i = 0; i < 64; ++i) {
      int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN, or an aborted connection: nothing to do
      if (unauthed >= std::max<int64_t>(1, max_conns / 4)) evict_oldest_unauthenticated();
      if (static_cast<int64_t>(conns.size()) >= max_conns) {
        count(kFull);  // counted before the peer can see the close
        ::close(fd);
        continue;
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
      Conn& c = conns[fd];
      c.fd = fd;
      c.in.resize(kHello);
      c.deadline_ms = now + handshake_ms;
      ++unauthed;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = fd;
      if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        ::close(fd);
        conns.erase(fd);
        --unauthed;
      }
      stats[kOpen].store(conns.size(), std::memory_order_relaxed);
    }
  }

  // Send what the kernel takes; false: the connection is broken.
  bool flush(Conn& c, int64_t now) {
    if (c.sent == 0) c.progress_ms = now;  // a new reply: its stall clock starts now
    while (c.sent < c.out.size()) {
      ssize_t r = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
      if (r > 0) {
        c.sent += static_cast<size_t>(r);
        c.progress_ms = now;
        continue;
      }
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        watch(c, true);
        return true;
      }
      if (r < 0 && errno == EINTR) continue;
      return false;
    }
    c.out.clear();
    c.sent = 0;
    watch(c, false);
    return true;
  }

  void reply(Conn& c, uint64_t rid, Status status, const char* msg, size_t len) {
    c.out.resize(kReply + len);
    store<uint32_t>(c.out.data(), kReplyMagic);
    store<uint32_t>(c.out.data() + 4, status);
    store<uint64_t>(c.out.data() + 8, rid);
    store<uint64_t>(c.out.data() + 16, len);
    if (len) std::memcpy(c.out.data() + kReply, msg, len);
  }

  void refuse(Conn& c, uint64_t rid, Status status, const std::string& msg) {
    count(status == kNotHere ? kNotServed : status == kBusy ? kPushesBusy : kPullsError);
    reply(c, rid, status, msg.data(), msg.size());
  }

  // An id outside [lo, hi): its refusal, or an empty string.
  static std::string outside(const int64_t* ids, uint64_t n, const std::string& name, int64_t lo, int64_t hi) {
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

  // One complete pull in c.in: its reply goes to c.out.
  void pull(Conn& c) {
    const char* h = c.in.data();
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
        refuse(c, rid, kNotHere, "table '" + name.substr(0, 64) + "' is not served by the fast lane");
        return;
      }
      const Table& t = it->second;
      if (!(t.type == want)) {  // the ZMQ path converts or refuses as numpy does
        refuse(c, rid, kNotHere, "the caller's row type is not the table's");
        return;
      }
      if (static_cast<int64_t>(n) * t.row_bytes > max_reply) {
        refuse(c, rid, kNotHere, "the pull is larger than the fast lane's replies");
        return;
      }
      const int64_t* ids = reinterpret_cast<const int64_t*>(idp);
      std::string bad = outside(ids, n, name, t.lo, t.hi);
      if (!bad.empty()) {
        refuse(c, rid, kError, bad);
        return;
      }
      size_t bytes = n * static_cast<size_t>(t.row_bytes);
      reply(c, rid, kOk, nullptr, 0);
      c.out.resize(kReply + bytes);
      store<uint64_t>(c.out.data() + 16, bytes);
      char* dst = c.out.data() + kReply;
      for (uint64_t i = 0; i < n; ++i)
        std::memcpy(dst + i * t.row_bytes, t.data + (ids[i] - t.lo) * t.row_bytes, t.row_bytes);
    }
    count(kPullsOk);
    count(kRows, n);
    count(kBytesOut, c.out.size());
    count(kBusyNs, static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::steady_clock::now() - start).count()));
  }

  // One complete push in c.in: the step under the table's lock, its unique rows into c.out.
  void push(Conn& c) {
    char* h = c.in.data();
    uint16_t name_len = load<uint16_t>(h + 6);
    uint64_t rid = load<uint64_t>(h + 8), n = load<uint64_t>(h + 16), bytes = load<uint64_t>(h + 24);
    std::string name(h + kRequest, name_len);
    const char* typep = h + kRequest + ((name_len + 7) & ~size_t{7});
    RowType got{load<uint32_t>(typep), load<uint32_t>(typep + 4),
                {load<uint64_t>(typep + 8), load<uint64_t>(typep + 16), load<uint64_t>(typep + 24)}};
    int64_t step = load<int64_t>(typep + kRowType);
    int64_t* ids = reinterpret_cast<int64_t*>(h + (typep - h) + kRowType + 8);  // 8-byte aligned: see need
    const float* grads = reinterpret_cast<const float*>(ids + n);
    auto start = std::chrono::steady_clock::now();
    int64_t updated = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = tables.find(name);
      if (it == tables.end() || it->second.lock == nullptr || !(it->second.type == got)) {
        refuse(c, rid, kNotHere, "the fast lane does not step table '" + name.substr(0, 64) + "'");
        return;
      }
      const Table& t = it->second;
      if (bytes != n * static_cast<uint64_t>(t.row_bytes)) {
        refuse(c, rid, kError, "a push's gradient bytes are not its ids' rows");
        return;
      }
      std::string bad = outside(ids, n, name, t.lo, t.hi);
      if (!bad.empty()) {
        refuse(c, rid, kError, bad);
        return;
      }
      graphtrain::TableLock* l = t.lock;
      if (!l->try_acquire()) {  // a worker steps it, or a checkpoint reads it: that worker's wait, not ours
        refuse(c, rid, kBusy, "the table is locked");
        return;
      }
      const graphtrain::StepDesc d = l->desc;
      if (!l->steppable.load(std::memory_order_acquire) || d.table == nullptr ||
          d.dim * static_cast<int64_t>(sizeof(float)) != t.row_bytes || d.num_rows != t.hi - t.lo) {
        l->release();
        refuse(c, rid, kBusy, "the table's step is not described to the fast lane now");
        return;
      }
      for (uint64_t i = 0; i < n; ++i) ids[i] -= t.lo;
      const int64_t global = d.global_step == nullptr ? 0 : step != kNoStep ? step : *d.global_step + 1;
      const int64_t rows = static_cast<int64_t>(n);
      int64_t at = -1;
      updated = gt_sparse_step_pieces(d.kind, rows, ids, 1, &grads, &rows, d.dim, d.num_rows, d.mean, d.table, 0, 0,
                                      d.state0, d.state1, d.row_steps, global, d.params, 1, d.refuse_nonfinite, &at);
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
                                  static_cast<long long>(at >= 0 ? ids[at] + t.lo : -1));
          msg.assign(buf, static_cast<size_t>(len > 0 ? len : 0));
        }
        refuse(c, rid, kError, msg);
        return;
      }
    }
    reply(c, rid, kOk, nullptr, 0);
    c.out.resize(kReply + 8);
    store<uint64_t>(c.out.data() + 16, 8);
    store<int64_t>(c.out.data() + kReply, updated);
    count(kPushesOk);
    count(kRowsPushed, n);
    count(kBytesOut, c.out.size());
    count(kBusyNs, static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::steady_clock::now() - start).count()));
  }

  // One complete sample request in c.in: the counts, then the sources, into c.out.
  void sample(Conn& c) {
    const char* h = c.in.data();
    uint64_t rid = load<uint64_t>(h + 8), n = load<uint64_t>(h + 16);
    int64_t fanout = load<int64_t>(h + kRequest);
    uint64_t seed = load<uint64_t>(h + kRequest + 8);
    const int64_t* seeds = reinterpret_cast<const int64_t*>(h + kRequest + kSampleArgs);
    auto start = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(mu);
    if (graph.indptr == nullptr || fanout < 1 || static_cast<int64_t>(8 * n) > max_reply) {
      refuse(c, rid, kNotHere, "the fast lane samples no graph here, or not with this fan-out");
      return;
    }
    reply(c, rid, kOk, nullptr, 0);
    c.out.resize(kReply + 8 * n);
    int64_t* counts = reinterpret_cast<int64_t*>(c.out.data() + kReply);
    int64_t bad = -1;
    int64_t total = gt_sample_neighbors(graph.indptr, graph.indices, graph.lo, graph.num_nodes, seeds,
                                        static_cast<int64_t>(n), fanout, seed, counts, nullptr, &bad);
    if (total < 0) {
      char msg[160];
      int len = std::snprintf(msg, sizeof msg, "seed %lld is outside this partition's nodes [%lld, %lld)",
                              static_cast<long long>(seeds[bad]), static_cast<long long>(graph.lo),
                              static_cast<long long>(graph.lo + graph.num_nodes));
      refuse(c, rid, kError, std::string(msg, static_cast<size_t>(len > 0 ? len : 0)));
      return;
    }
    size_t bytes = 8 * (n + static_cast<size_t>(total));
    if (static_cast<int64_t>(bytes) > max_reply) {
      refuse(c, rid, kNotHere, "the sample is larger than the fast lane's replies");
      return;
    }
    c.out.resize(kReply + bytes);
    counts = reinterpret_cast<int64_t*>(c.out.data() + kReply);  // resize may have moved it
    gt_sample_neighbors(graph.indptr, graph.indices, graph.lo, graph.num_nodes, seeds, static_cast<int64_t>(n),
                        fanout, seed, counts, counts + n, &bad);
    store<uint64_t>(c.out.data() + 16, bytes);
    count(kSamplesOk);
    count(kBytesOut, c.out.size());
    count(kBusyNs, static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::steady_clock::now() - start).count()));
  }

  // A stage's bytes are complete: move on (a header's body is read after it, into the same buffer; a
// whole hello or request starts the next one at 0); false closes the connection.
  bool advance(Conn& c, int64_t now) {
    const char* h = c.in.data();
    switch (c.stage) {
      case kHelloHead: {
        uint16_t len = load<uint16_t>(h + 6);
        if (load<uint32_t>(h) != kHelloMagic || load<uint16_t>(h + 4) != kVersion || len == 0 ||
            len > kMaxToken) {
          count(kMalformed);
          return false;
        }
        c.stage = kHelloToken;
        c.need = kHello + len;
        c.in.resize(c.need);
        return true;
      }
      case kHelloToken: {
        size_t len = c.need - kHello;
        unsigned char diff = len == token.size() ? 0 : 1;  // constant time over the token's bytes
        for (size_t i = 0; i < len; ++i) diff |= static_cast<unsigned char>(h[kHello + i] ^ token[i % token.size()]);
        char ack[8];
        store<uint32_t>(ack, kHelloMagic);
        store<uint32_t>(ack + 4, diff ? 1u : 0u);
        if (diff) {
          count(kRefused);
          send(c.fd, ack, sizeof ack, MSG_NOSIGNAL | MSG_DONTWAIT);  // best effort: it is closed anyway
          return false;
        }
        count(kAccepted);
        c.authed = true;
        --unauthed;
        c.have = 0;
        c.deadline_ms = 0;
        c.out.assign(ack, ack + sizeof ack);
        c.stage = kHead;
        c.need = kRequest;
        c.in.resize(c.need);
        return flush(c, now);
      }
      case kHead: {
        uint16_t op = load<uint16_t>(h + 4), name_len = load<uint16_t>(h + 6);
        uint64_t n = load<uint64_t>(h + 16), extra = load<uint64_t>(h + 24);
        bool named = op == kOpPull || op == kOpPush ? name_len >= 1 && name_len <= kMaxName
                                                    : op == kOpSample && name_len == 0;
        bool sized = op == kOpPush ? extra <= static_cast<uint64_t>(max_reply) && extra % 8 == 0 : extra == 0;
        if (load<uint32_t>(h) != kRequestMagic || !named || !sized || n > static_cast<uint64_t>(max_ids)) {
          count(kMalformed);
          return false;
        }
        c.stage = kBody;
        size_t named_head = ((name_len + 7) & ~size_t{7}) + kRowType;
        c.need = kRequest + (op == kOpPull ? named_head : op == kOpPush ? named_head + 8 : kSampleArgs) + n * 8 +
                 (op == kOpPush ? extra : 0);
        c.in.resize(c.need);
        return true;
      }
      case kBody:
        if (load<uint16_t>(h + 4) == kOpPull)
          pull(c);
        else if (load<uint16_t>(h + 4) == kOpPush)
          push(c);
        else
          sample(c);
        c.have = 0;
        c.stage = kHead;
        c.need = kRequest;
        c.in.resize(c.need);
        return flush(c, now);
    }
    return false;
  }

  // Read and answer what the peer sent; false closes the connection.
  bool readable(Conn& c, int64_t now) {
    int answered = 0;
    while (!c.writing && answered < kPerWake) {
      ssize_t r = recv(c.fd, c.in.data() + c.have, c.need - c.have, 0);
      if (r == 0) return false;
      if (r < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
      c.have += static_cast<size_t>(r);
      if (c.have < c.need) continue;
      Stage was = c.stage;
      if (!advance(c, now)) return false;
      if (was == kBody) ++answered;
    }
    return true;
  }

  void sweep(int64_t now) {
    std::vector<int> gone;
    for (auto& [fd, c] : conns) {
      if (c.deadline_ms && now > c.deadline_ms) {
        count(kHandshakeTimeouts);
        gone.push_back(fd);
      } else if (c.writing && now - c.progress_ms > stall_ms) {
        count(kStalled);
        gone.push_back(fd);
      }
    }
    for (int fd : gone) close_conn(fd);
  }

  void loop() {
    epoll_event events[64];
    int64_t last_sweep = now_ms();
    while (!stopping.load(std::memory_order_relaxed)) {
      int n = epoll_wait(epfd, events, 64, 100);
      int64_t now = now_ms();
      stats[kLastLoopMs].store(static_cast<uint64_t>(now), std::memory_order_relaxed);
      count(kLoops);
      for (int i = 0; i < n; ++i) {
        int fd = events[i].data.fd;
        if (fd == wake_fd) {
          uint64_t v;
          (void)!read(wake_fd, &v, sizeof v);
          continue;
        }
        if (fd == listen_fd) {
          accept_all(now);
          continue;
        }
        auto it = conns.find(fd);
        if (it == conns.end()) continue;
        Conn& c = it->second;
        bool ok = true;
        if (events[i].events & EPOLLOUT) ok = flush(c, now);
        if (ok && (events[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && !c.writing) ok = readable(c, now);
        if (ok && (events[i].events & EPOLLERR)) ok = false;
        if (!ok) close_conn(fd);
      }
      if (now - last_sweep >= 100) {
        last_sweep = now;
        sweep(now);
      }
    }
  }

  ~Server() {
    for (auto& [fd, c] : conns) ::close(fd);
    if (listen_fd >= 0) ::close(listen_fd);
    if (wake_fd >= 0) ::close(wake_fd);
    if (epfd >= 0) ::close(epfd);
  }
};

}  // namespace

// Serve the fast lane on `listen_fd` (a bound, listening TCP socket, now owned by the server) with its
// own thread; NULL if it cannot (the fd is then closed). Stop it with gt_fast_stop.
GT_API void* gt_fast_start(int listen_fd, const char* token, int64_t token_len, int64_t max_conns,
                           int64_t max_ids, int64_t max_reply_bytes, int64_t handshake_ms, int64_t stall_ms) {
  if (token_len <= 0 || token_len > static_cast<int64_t>(kMaxToken)) {
    ::close(listen_fd);
    return nullptr;
  }
  auto* s = new (std::nothrow) Server();
  if (s == nullptr) {
    ::close(listen_fd);
    return nullptr;
  }
  for (auto& st : s->stats) st.store(0);
  s->listen_fd = listen_fd;
  s->token.assign(token, static_cast<size_t>(token_len));
  s->max_conns = max_conns;
  s->max_ids = max_ids;
  s->max_reply = max_reply_bytes;
  s->handshake_ms = handshake_ms;
  s->stall_ms = stall_ms;
  s->epfd = epoll_create1(EPOLL_CLOEXEC);
  s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  int flags = fcntl(listen_fd, F_GETFL, 0);
  epoll_event lev{}, wev{};
  lev.events = EPOLLIN;
  lev.data.fd = listen_fd;
  wev.events = EPOLLIN;
  wev.data.fd = s->wake_fd;
  if (s->epfd < 0 || s->wake_fd < 0 || flags < 0 || fcntl(listen_fd, F_SETFL, flags | O_NONBLOCK) != 0 ||
      epoll_ctl(s->epfd, EPOLL_CTL_ADD, listen_fd, &lev) != 0 ||
      epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->wake_fd, &wev) != 0) {
    delete s;
    return nullptr;
  }
  s->stats[kLastLoopMs].store(static_cast<uint64_t>(now_ms()));
  try {
    s->thread = std::thread([s] { s->loop(); });
  } catch (...) {
    delete s;
    return nullptr;
  }
  return s;
}

// Register (data != NULL) or withdraw table `name`: rows [lo, hi) of row_bytes each at `data`, their
// type (element type code, ndim, dims) what a pull must ask for; `lock` (table_lock.h, or NULL: no
// pushes here) the table's lock, which must outlive the registration. Returns once no request reads the
// table's previous memory any more, so the caller may then free it.
GT_API int gt_fast_set_table(void* server, const char* name, int64_t name_len, const void* data, int64_t lo,
                             int64_t hi, int64_t row_bytes, int32_t type_code, int32_t ndim, const int64_t* dims,
                             void* table_lock) {
  auto* s = static_cast<Server*>(server);
  if (name_len <= 0 || name_len > static_cast<int64_t>(kMaxName)) return 1;
  std::string key(name, static_cast<size_t>(name_len));
  std::lock_guard<std::mutex> lock(s->mu);
  if (data == nullptr) {
    s->tables.erase(key);
  } else {
    if (lo < 0 || hi < lo || row_bytes <= 0 || ndim < 0 || ndim > 3) return 1;
    RowType type{static_cast<uint32_t>(type_code), static_cast<uint32_t>(ndim), {0, 0, 0}};
    for (int32_t i = 0; i < ndim; ++i) type.dims[i] = static_cast<uint64_t>(dims[i]);
    s->tables[key] = Table{static_cast<const char*>(data), lo, hi, row_bytes, type,
                           static_cast<graphtrain::TableLock*>(table_lock)};
  }
  return 0;
}

// Serve sampling of this CSR (in-edges of rows lo..lo+num_nodes; NULL indptr: none). The arrays must
// outlive the server or the next call.
GT_API void gt_fast_set_graph(void* server, const int64_t* indptr, const int64_t* indices, int64_t lo,
                              int64_t num_nodes) {
  auto* s = static_cast<Server*>(server);
  std::lock_guard<std::mutex> lock(s->mu);
  s->graph = indptr == nullptr ? Graph{} : Graph{indptr, indices, lo, num_nodes};
}

// The counters (Stat's order) into out[0..n).
GT_API void gt_fast_stats(void* server, uint64_t* out, int64_t n) {
  auto* s = static_cast<Server*>(server);
  for (int64_t i = 0; i < n && i < kStats; ++i) out[i] = s->stats[i].load(std::memory_order_relaxed);
}

// Stop the thread, close every connection and the listening socket, free the server.
GT_API void gt_fast_stop(void* server) {
  auto* s = static_cast<Server*>(server);
  s->stopping.store(true);
  uint64_t one = 1;
  (void)!write(s->wake_fd, &one, sizeof one);
  if (s->thread.joinable()) s->thread.join();
  delete s;
}
