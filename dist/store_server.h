// dist/store_server.h — the server half of TCPStore: a key-value map served over TCP, hosted
// by rank 0. You normally create it through TCPStore(is_server = true).
//
// One accept thread owns the listening socket and every connection that has not yet presented
// its hello (kHello with the store token, see store_protocol.h). It reads those hellos itself,
// non-blocking, from one poll() loop, so an idle client costs one descriptor and no thread:
//   - at most max_pending_connections() connections may wait for their hello; when one more
//     arrives, the OLDEST waiting one is closed (a real client sends its hello at once, so a
//     crowd of idle connections only ever evicts itself, never a rank that keeps up);
//   - a connection whose hello is not complete within kHelloDeadline (5 s) is closed;
//   - a connection whose hello carries another token (or that sends anything else first) is
//     answered with an error where possible and closed.
// Only a connection that presented a valid hello gets a thread; that thread reads a request,
// answers it and waits for the next, so a client blocked in get()/wait() holds only its own
// thread. A malformed or oversized message closes that one connection (logged on stderr); the
// server keeps serving everyone else.
//
// The server never starves the process that hosts it (rank 0's own Gloo connections, logs and
// metrics files): it accepts only while more than a reserve of descriptors below RLIMIT_NOFILE
// is free (an eighth of the limit, at most 64); short of that, it closes the oldest waiting
// connection to make room, or leaves new connections in the kernel's backlog until descriptors
// are freed. A failing accept() (EMFILE, ENFILE, ENOBUFS, ENOMEM) backs off from 10 ms doubling
// to 1 s, still watching for shutdown. Messages about refused, evicted or timed-out connections
// and failed accepts are rate-limited: at most one line of each kind per 5 s, with a count of
// those held back.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "minidl/dist/socket.h"
#include "minidl/dist/store_protocol.h"

namespace minidl::dist {

class TCPStoreServer {
 public:
  // Listens on host:port (port 0: a free port, see port()). bind_all: every interface instead of
  // host only. token: what clients must present (empty: any client is served). Throws
  // std::runtime_error if the address cannot be bound.
  TCPStoreServer(const std::string& host, uint16_t port, bool bind_all = false, std::string token = "");
  // Closes every connection (clients blocked on it get an error) and joins all threads.
  ~TCPStoreServer();
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  uint16_t port() const { return port_; }

  // How long a new connection may take to present its hello. A real client sends it in the same
  // breath as it connects (microseconds); 5 s leaves room for a machine so loaded that the client
  // is descheduled for seconds, and bounds how long an idle connection holds a slot.
  static constexpr std::chrono::seconds kHelloDeadline{5};
  // At most this many connections wait for their hello: 64, or one per 16 descriptors of
  // RLIMIT_NOFILE when that is smaller (at least 4).
  static int max_pending_connections();
  // The descriptors kept free for the hosting process: no connection is accepted while fewer
  // than this many are free below RLIMIT_NOFILE (an eighth of the limit, at most 64).
  static int reserved_descriptors();

 private:
  // Prints at most one line per interval; lines held back in between are counted, and the
  // count is added to the next line that is printed.
  class ThrottledLog {
   public:
    void report(const std::string& message);

   private:
    bool printed_ = false;
    Clock::time_point last_;
    int64_t held_back_ = 0;
  };
  struct Connection {
    Socket socket;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  // A connection that has not presented its hello yet (the accept thread's own).
  struct Pending {
    Socket socket;
    Clock::time_point deadline;
    protocol::FrameAssembler hello{protocol::kMaxHelloBytes};
  };

  void accept_loop();
  // Accepts one connection from the backlog, making room (or backing off) as described above.
  void accept_one();
  // Reads what a waiting connection sent; false when it leaves the waiting list (its hello was
  // complete and it was admitted, or it is to be closed).
  bool read_hello(Pending& pending);
  // Checks a complete hello; if it is good, starts the connection's thread (taking its socket).
  void admit(Pending& pending);
  void drop_oldest_pending(const std::string& why);
  void drop_expired_pending();
  void serve(Connection* conn);
  // Answers one request with a reply body; get and wait block here up to their timeout.
  std::string handle(const protocol::Request& request);
  // Waits (mutex_ held through lock) until every key exists, the deadline passes or the server stops.
  bool wait_for_keys(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                     std::chrono::milliseconds timeout);
  void reap_finished_connections();

  Socket listener_;
  Socket wake_read_, wake_write_;  // a pipe that wakes the accept loop on shutdown
  uint16_t port_ = 0;
  std::string token_;
  std::thread accept_thread_;

  // The accept thread's own state.
  std::deque<Pending> pending_;  // oldest first
  Clock::time_point accept_paused_until_;  // after a failed accept, or while descriptors are short
  std::chrono::milliseconds accept_backoff_{0};
  ThrottledLog refused_log_, evicted_log_, expired_log_, accept_log_, reserve_log_, thread_log_;

  std::mutex mutex_;  // guards data_ and stopping_
  std::condition_variable changed_;  // notified on every change of data_ and on stop
  std::map<std::string, std::string> data_;
  bool stopping_ = false;

  std::mutex connections_mutex_;  // guards connections_
  std::list<std::unique_ptr<Connection>> connections_;
};

}  // namespace minidl::dist
