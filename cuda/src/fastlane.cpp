// The shard server's fast lane: small pulls of host tables answered by one native thread, without the
// GIL, without ZMQ and without a hand-off between threads (issue 47, item 1).
//
// Why. Over ZMQ a 64-row pull cost the server ~0.6 ms of CPU (bench/RESULTS.md, "the request path"):
// the gather is ~15 us; the rest was Python around pyzmq (poll, recv, parse, validate, encode, send)
// and ZMQ's own I/O thread (~80 us alone). A trainer at 4 hosts sends ~19 such requests a step.
//
// What. One thread, one epoll set, non-blocking sockets: TCP beside a tcp:// server, a Unix socket beside
// an ipc:// one. The wire (all little-endian, version 3; a version-1 peer is served ops 1-3, a version-2
// peer ops 1-4):
//   hello    client -> server  "GTFL" u16 version, u16 token length (1..256), the token
//            server -> client  "GTFL" u32 status (0 accepted; anything else: refused, then closed)
//   request  "GTRQ" u16 op, u16 name length, u64 rid, u64 count (<= max_ids), u64 reserved (0; a push: its
//            gradients' bytes, even, <= max_reply_bytes), then
//            op 1, pull:   the table's name (1..128 bytes) padded with zeros to 8 bytes, the row type
//                          the caller reads (u32 element type code, u32 dims 0..3, u64 dims[3]: a
//                          table of another type answers "not served here"), `count` ids (int64,
//                          global rows)
//            op 2, sample: no name; i64 fan-out (>= 1: "all" is the ZMQ path's), u64 seed, `count`
//                          seeds (int64, global nodes)
//            op 3, push:   a gradient push (push_grad): the table's name padded as a pull's, the
//                          gradients' row type (the table's: a half table's gradients are sent in its
//                          type, as over ZMQ), i64 step (Adam's table-wide count; INT64_MIN:
//                          none), `count` ids (int64, global rows), then `count` gradient rows
//            op 5, push from shared memory (version 3): a push whose gradients (float32, whatever the
//                          table's type, as over ZMQ) lie in the client's push buffer on this host (a
//                          shared-memory segment of this job: kvstore/tables/shm.py PushBuffer); `reserved`
//                          is the buffer's name length (1..128); the table's name padded, the gradients'
//                          row type, i64 step, u64 the rows' byte offset in the buffer, the buffer's name
//                          padded to 8 bytes, then `count` ids; one, or a batch's together, step at most
//                          kPerWake x max_reply_bytes of gradients (what a connection's turn of pulls may
//                          cost; a push takes a turn per max_reply_bytes begun), one past that answers
//                          "busy". The lane maps the buffer read-only (a regular file of this user, opened
//                          without waiting; at most kMaxSegments at a time, unlinked ones unmapped when
//                          another is mapped, the file's identity checked at every push); one
//                          it cannot read, or whose rows would end past its size, answers "busy" (the
//                          client pushes over ZMQ, which refuses it in its own words). Issue 47: the
//                          servers of one host took every gradient push over ZMQ, ~0.6 ms of Python each
//            op 4, batch:  no name; `count` (2..8) requests of ops 1-3 (or 5), each a whole request as above,
//                          padded with zeros to 8 bytes; `reserved`: their bytes (<= 2 x max_reply_bytes, a
//                          push's bound).
//                          One message for several operations on one shard (issue 47, item 2: a step's
//                          features and embedding rows, a layer's samples): one round trip, one wake
//   reply    "GTRP" u32 status (0 ok, 1 error, 2 not served here, 3 busy: ask over ZMQ this time), u64 rid,
//            u64 payload bytes, then a UTF-8 message, or (ok) the rows of a pull, or a sample's counts
//            (int64, one per seed) and the sampled sources (int64), the draws of gt_sample_neighbors, as
//            the ZMQ path's, or a push's unique rows updated (int64), or a batch's replies: one whole
//            reply per request, in order, each answered as if sent alone (a request whose reply would
//            take the batch's payloads past max_reply_bytes answers "busy": a batch costs
//            the server what one request may, and a peer behind it waits as long)
// Guarantees, as the ZMQ path's: the token is checked (constant time) before anything else is read (at
// most a quarter of max_conns connections may be waiting to send it, the oldest making room for a
// newcomer: peers without the token cannot take every slot, nor keep a client out); a
// framing error closes the connection; an id outside the shard's rows is refused naming it; a table that
// is not registered (GPU, dynamic vocabulary, unknown) or a pull over max_reply_bytes answers "not served
// here" and the client asks over ZMQ. Memory is bounded per connection (one request and one reply: the
// connection is not read while its reply waits: a request of at most ~390 KiB, a push's, or a batch's
// 2 x max_reply_bytes, and a reply of max_reply_bytes, plus a batch's headers)
// and in all (max_conns); a peer that takes nothing for
// stall_ms with a reply pending, or does not finish its hello in handshake_ms, is closed. Rows are read
// without the table's lock, as the ZMQ path's pulls read them (one writer per row, readers may see a row
// between two steps); the registry's mutex only keeps a table's memory alive while it is copied.
// A push is stepped on this thread under the table's own lock (table_lock.h), shared with the server's
// Python threads and only tried here: a table whose lock is held, or whose step description is not
// current (a checkpoint copying rows in the background, a new optimizer), answers "busy" and the client
// pushes over ZMQ, where a worker waits for the lock. The step is the Python path's: the same core
// function (gt_sparse_step_pieces, one thread), the same refusal of NaN or infinity before any row is
// touched, Adam's table-wide count set from the client's, the written rows marked for the next
// incremental checkpoint, and a half table's gradients (sent in its type, as over ZMQ, and widened exactly;
// from shared memory float32, as the ZMQ path reads them there),
// its rounding seed the table's next (TensorShard.round_seed, whose count the lane increments). Tables
// the lane does not step (a unit-circle projection, a half table's row norm, skipped non-finite
// gradients, a dynamic vocabulary, a GPU table) are not described to it and answer "not served here".

#include "fastlane.h"
#include "graphtrain/api.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
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

namespace graphtrain::lane {

void Server::watch(Conn& c, bool writing) {
  if (c.writing == writing) return;
  c.writing = writing;
  epoll_event ev{};
  ev.events = writing ? EPOLLOUT : EPOLLIN;
  ev.data.fd = c.fd;
  epoll_ctl(epfd, EPOLL_CTL_MOD, c.fd, &ev);
}

void Server::close_conn(int fd) {
  epoll_ctl(epfd, EPOLL_CTL_DEL, fd, nullptr);
  ::close(fd);
  auto it = conns.find(fd);
  if (it != conns.end() && !it->second.authed) --unauthed;
  conns.erase(fd);
  stats[kOpen].store(conns.size(), std::memory_order_relaxed);
}

// Room for a newcomer when a quarter of the slots wait for a token: the one waiting longest goes (a
// client sends its token at once; a peer without it holds a slot until the next newcomer comes).
void Server::evict_oldest_unauthenticated() {
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

void Server::accept_all(int64_t now) {
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

// Send what the kernel takes, at most kSlice bytes a turn (the rest when the loop comes round again: a
// small reply is not kept waiting behind several large ones); false: the connection is broken.
bool Server::flush(Conn& c, int64_t now) {
  if (c.sent == 0) c.progress_ms = now;  // a new reply: its stall clock starts now
  size_t budget = kSlice;
  while (c.sent < c.out.size()) {
    if (budget == 0) {  // the other connections' turn; EPOLLOUT brings this one back
      watch(c, true);
      return true;
    }
    size_t n = std::min(c.out.size() - c.sent, budget);
    ssize_t r = send(c.fd, c.out.data() + c.sent, n, MSG_NOSIGNAL);
    if (r > 0) {
      c.sent += static_cast<size_t>(r);
      budget -= static_cast<size_t>(r);
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

size_t Server::reply(Conn& c, uint64_t rid, Status status, const char* msg, size_t len) {
  size_t at = c.out.size();
  c.out.resize(at + kReply + len);
  char* r = c.out.data() + at;
  store<uint32_t>(r, kReplyMagic);
  store<uint32_t>(r + 4, status);
  store<uint64_t>(r + 8, rid);
  store<uint64_t>(r + 16, len);
  if (len && msg != nullptr) std::memcpy(r + kReply, msg, len);
  return at + kReply;
}

void Server::refuse(Conn& c, size_t at, uint64_t rid, Status status, const std::string& msg, Stat stat) {
  count(stat != kStats ? stat : status == kNotHere ? kNotServed : status == kBusy ? kPushesBusy : kPullsError);
  c.out.resize(at);
  reply(c, rid, status, msg.data(), msg.size());
}

// Whether the request at `h` is of an op the peer's wire version has (a batch: 2, a push from shared
// memory: 3).
static bool spoken(const Conn& c, const char* h) {
  uint16_t op = load<uint16_t>(h + 4);
  return c.version >= (op == kOpPushShared ? 3 : op == kOpBatch ? 2 : 1);
}

size_t Server::request_bytes(const char* h, bool batched) const {
  uint16_t op = load<uint16_t>(h + 4), name_len = load<uint16_t>(h + 6);
  uint64_t n = load<uint64_t>(h + 16), extra = load<uint64_t>(h + 24);
  if (load<uint32_t>(h) != kRequestMagic) return 0;
  if (op == kOpBatch) {
    if (batched || name_len != 0 || n < 2 || n > kMaxBatch || extra % 8 != 0 || extra < n * kRequest ||
        extra > static_cast<uint64_t>(kBatchFactor * max_reply))
      return 0;
    return kRequest + extra;
  }
  const bool pushed = op == kOpPush || op == kOpPushShared;
  bool named = op == kOpPull || pushed ? name_len >= 1 && name_len <= kMaxName : op == kOpSample && name_len == 0;
  // a push's gradients: float32 rows, or a half table's (2-byte elements: 3 of them are 6 bytes); a push
  // from shared memory: its buffer's name length
  bool sized = op == kOpPush         ? extra <= static_cast<uint64_t>(max_reply) && extra % 2 == 0
               : op == kOpPushShared ? extra >= 1 && extra <= kMaxName
                                     : extra == 0;
  if (!named || !sized || n > static_cast<uint64_t>(max_ids)) return 0;
  size_t named_head = ((name_len + 7) & ~size_t{7}) + kRowType;
  size_t head = op == kOpPull ? named_head
                : op == kOpPush ? named_head + 8
                : op == kOpPushShared ? named_head + 16 + ((extra + 7) & ~uint64_t{7})
                                      : kSampleArgs;
  return kRequest + head + n * 8 + (op == kOpPush ? extra : 0);
}

void Server::answer(Conn& c, char* h) {
  uint16_t op = load<uint16_t>(h + 4);
  if (op == kOpPull)
    pull(c, h);
  else if (op == kOpPush || op == kOpPushShared)
    push(c, h);
  else
    sample(c, h);
}

bool Server::batch(Conn& c) {
  char* h = c.in.data();
  uint64_t rid = load<uint64_t>(h + 8), k = load<uint64_t>(h + 16), body = load<uint64_t>(h + 24);
  // every request's framing first: a malformed one closes the connection before any is applied
  size_t at = kRequest, end = kRequest + body;
  for (uint64_t i = 0; i < k; ++i) {
    size_t bytes = end - at < kRequest ? 0 : request_bytes(h + at, true);
    if (bytes == 0 || bytes > end - at || !spoken(c, h + at)) return false;
    size_t padded = (bytes + 7) & ~size_t{7};
    if (padded > end - at) return false;
    for (size_t p = at + bytes; p < at + padded; ++p)
      if (h[p] != 0) return false;  // the padding is zeros, as the wire says
    at += padded;
  }
  if (at != end) return false;
  count(kBatches);
  c.out_limit = kReply + k * kReply + static_cast<size_t>(max_reply);
  c.shared_left = static_cast<uint64_t>(max_shared());  // the batch's pushes from shared memory together
  size_t payload = reply(c, rid, kOk, nullptr, 0);
  for (at = kRequest; at < end; at += (request_bytes(h + at, true) + 7) & ~size_t{7}) answer(c, h + at);
  store<uint64_t>(c.out.data() + 16, c.out.size() - payload);
  return true;
}

bool Server::advance(Conn& c, int64_t now) {
  const char* h = c.in.data();
  switch (c.stage) {
    case kHelloHead: {
      uint16_t len = load<uint16_t>(h + 6);
      uint16_t version = load<uint16_t>(h + 4);
      if (load<uint32_t>(h) != kHelloMagic || version < 1 || version > kVersion || len == 0 || len > kMaxToken) {
        count(kMalformed);
        return false;
      }
      c.version = version;
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
      size_t bytes = request_bytes(h, false);
      if (bytes == 0 || !spoken(c, h)) {
        count(kMalformed);
        return false;
      }
      c.stage = kBody;
      c.need = bytes;
      c.in.resize(c.need);
      return true;
    }
    case kBody:
      if (load<uint16_t>(h + 4) == kOpBatch) {
        if (!batch(c)) {
          count(kMalformed);
          return false;
        }
      } else {
        c.out_limit = kReply + static_cast<size_t>(max_reply);
        c.shared_left = static_cast<uint64_t>(max_shared());
        answer(c, c.in.data());
      }
      c.have = 0;
      c.stage = kHead;
      c.need = kRequest;
      c.in.resize(c.need);
      return flush(c, now);
  }
  return false;
}

// Read and answer what the peer sent; false closes the connection.
bool Server::readable(Conn& c, int64_t now) {
  int answered = 0;
  while (!c.writing && answered < kPerWake) {
    ssize_t r = recv(c.fd, c.in.data() + c.have, c.need - c.have, 0);
    if (r == 0) return false;
    if (r < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    c.have += static_cast<size_t>(r);
    if (c.have < c.need) continue;
    Stage was = c.stage;
    uint64_t ops = was == kBody && load<uint16_t>(c.in.data() + 4) == kOpBatch ? load<uint64_t>(c.in.data() + 16) : 1;
    if (!advance(c, now)) return false;
    if (was == kBody) answered += static_cast<int>(ops) + c.turns;  // a batch takes its requests' turns,
    c.turns = 0;                                                       // a big push its bytes' (per max_reply)
  }
  return true;
}

void Server::sweep(int64_t now) {
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

void Server::loop() {
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

Server::~Server() {
  for (auto& g : segments) {
    munmap(const_cast<char*>(g.base), g.size);
    ::close(g.fd);
  }
  for (auto& [fd, c] : conns) ::close(fd);
  if (listen_fd >= 0) ::close(listen_fd);
  if (wake_fd >= 0) ::close(wake_fd);
  if (epfd >= 0) ::close(epfd);
}

}  // namespace graphtrain::lane

using namespace graphtrain::lane;  // the C ABI below reads the lane's constants and types


// Serve the fast lane on `listen_fd` (a bound, listening TCP or Unix socket, now owned by the server) with its
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

// Step pushes whose gradients are in this job's push buffers (op 5): shared-memory segments whose names
// start with `prefix` (kvstore/tables/shm.py: the job's prefix and "-push-"; empty: none).
GT_API void gt_fast_set_segments(void* server, const char* prefix, int64_t len) {
  auto* s = static_cast<Server*>(server);
  std::lock_guard<std::mutex> lock(s->mu);
  s->push_prefix.assign(prefix, static_cast<size_t>(len > 0 && len <= 200 ? len : 0));
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
