// The shard server's fast lane, shared by its two halves: fastlane.cpp (connections, the event loop,
// the C ABI; its header comment is the design and the wire) and fastlane_requests.cpp (the answers to
// pulls, pushes and samples). Internal to the CPU core: nothing here is exported.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "table_lock.h"

namespace graphtrain::lane {


constexpr uint32_t kHelloMagic = 0x4c465447;  // "GTFL"
constexpr uint32_t kRequestMagic = 0x51525447;  // "GTRQ"
constexpr uint32_t kReplyMagic = 0x50525447;  // "GTRP"
constexpr uint16_t kVersion = 3;  // 2: op 4 (batch); 3: op 5 (a push from shared memory)
constexpr uint16_t kOpPull = 1, kOpSample = 2, kOpPush = 3, kOpBatch = 4, kOpPushShared = 5;
constexpr uint64_t kMaxBatch = 8;      // requests in one batch
constexpr int64_t kBatchFactor = 2;    // a batch's body <= this x max_reply (its replies' payloads <= max_reply)
constexpr int64_t kNoStep = INT64_MIN;
constexpr int64_t kMaxStep = int64_t{1} << 62;  // a push's largest step, as over ZMQ
constexpr size_t kSampleArgs = 16;  // fan-out, seed
constexpr size_t kRowType = 32;     // element type code, dims, dims[3]
constexpr size_t kHello = 8, kRequest = 32, kReply = 24, kMaxToken = 256, kMaxName = 128;
constexpr size_t kMaxSegments = 16;  // push buffers a lane keeps mapped (unlinked ones are unmapped)
constexpr int kPerWake = 16;  // requests one connection may have answered before the others' turn
constexpr size_t kSlice = 64 << 10;  // reply bytes one connection may send before the others' turn
enum Status : uint32_t { kOk = 0, kError = 1, kNotHere = 2, kBusy = 3 };
// the counters gt_fast_stats reports, in this order (runtime/kvstore/serving/fastlane.py names them)
enum Stat {
  kPullsOk, kPullsError, kNotServed, kRows, kBytesOut, kMalformed, kRefused, kHandshakeTimeouts,
  kStalled, kFull, kOpen, kLoops, kAccepted, kBusyNs, kLastLoopMs, kSamplesOk, kPushesOk, kRowsPushed,
  kPushesBusy, kBatches, kStats
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

struct Segment {  // a client's push buffer, mapped read-only by the lane's thread
  std::string name;
  const char* base = nullptr;
  size_t size = 0;
  uint64_t dev = 0, ino = 0;  // which file: a name unlinked and created again is another segment
  int fd = -1;                // kept open: its link count says when the client unlinked it
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
  uint16_t version = 0;     // the hello's
  size_t out_limit = 0;     // the bytes the current request's replies may take in `out` (batch: all of them)
  int turns = 0;            // extra turns of the requests just answered: a push from shared memory's work
  uint64_t shared_left = 0;  // the gradient bytes the current request or batch may still step from shared memory
};

inline int64_t now_ms() {
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
  std::vector<float> widened;  // a half table's pushed gradients in float32 (the lane's thread only)
  std::string push_prefix;  // the names of this job's push buffers start with it (guarded by mu; "": none)
  std::vector<Segment> segments;  // mapped push buffers, least recently used first (the lane's thread only)
  std::thread thread;

  void count(Stat s, uint64_t n = 1) { stats[s].fetch_add(n, std::memory_order_relaxed); }

  void watch(Conn& c, bool writing);
  void close_conn(int fd);
  // Room for a newcomer when a quarter of the slots wait for a token: the one waiting longest goes (a
  // client sends its token at once; a peer without it holds a slot until the next newcomer comes).
  void evict_oldest_unauthenticated();
  void accept_all(int64_t now);
  // Send what the kernel takes; false: the connection is broken.
  bool flush(Conn& c, int64_t now);
  // Append a reply of `len` payload bytes (copied from `msg` when given) to c.out; returns the payload's
  // offset in c.out.
  size_t reply(Conn& c, uint64_t rid, Status status, const char* msg, size_t len);
  // Drop what c.out holds past `at` (a reply begun) and append a refusal, counted as `stat` (kStats: as
  // its status says).
  void refuse(Conn& c, size_t at, uint64_t rid, Status status, const std::string& msg, Stat stat = kStats);
  // A batch's request whose reply would not fit the batch's room: "busy" (over ZMQ this time).
  void overflow(Conn& c, size_t at, uint64_t rid) {
    refuse(c, at, rid, kBusy, "the batch's replies are larger than the fast lane's", kNotServed);
  }
  // Whether `payload` more bytes of a reply fit the current request's room in c.out.
  bool fits(const Conn& c, size_t payload) const { return c.out.size() + kReply + payload <= c.out_limit; }
  // The bytes of the request whose header is at `h` (header included), or 0: a malformed header.
  // `batched`: inside a batch (no batch in a batch).
  size_t request_bytes(const char* h, bool batched) const;
  // A request answered: its counters (`rows`: kStats for none), the reply's bytes and the time since start.
  void answered(const Conn& c, size_t at, Stat ok, Stat rows, uint64_t n,
                std::chrono::steady_clock::time_point start);
  // An id outside [lo, hi): its refusal, or an empty string.
  static std::string outside(const int64_t* ids, uint64_t n, const std::string& name, int64_t lo, int64_t hi);
  // One complete pull at `h`: its reply is appended to c.out.
  void pull(Conn& c, const char* h);
  // The gradients a push from shared memory may step: what one connection's turn (kPerWake pulls) may cost.
  int64_t max_shared() const { return kPerWake * max_reply; }
  // `bytes` of gradients at `offset` of push buffer `name` (this job's, mapped on first use, its file checked
  // at every use), or null: not one of this job's push buffers, gone, or too small.
  const float* segment(const std::string& name, uint64_t offset, uint64_t bytes);
  // One complete push at `h` (op 3, or op 5: its gradients in a push buffer): the step under the table's
  // lock, its unique rows appended to c.out.
  void push(Conn& c, char* h);
  // One complete sample request at `h`: the counts, then the sources, appended to c.out.
  void sample(Conn& c, const char* h);
  // One complete request at `h` of ops 1-3 or 5, answered.
  void answer(Conn& c, char* h);
  // One complete batch in c.in: each request answered in order, the replies in one; false: malformed.
  bool batch(Conn& c);
  // A stage's bytes are complete: move on (a header's body is read after it, into the same buffer; a
  // whole hello or request starts the next one at 0); false closes the connection.
  bool advance(Conn& c, int64_t now);
  // Read and answer what the peer sent; false closes the connection.
  bool readable(Conn& c, int64_t now);
  void sweep(int64_t now);
  void loop();
  ~Server();
};

}  // namespace graphtrain::lane
