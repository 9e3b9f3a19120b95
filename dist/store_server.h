// dist/store_server.h — the server half of TCPStore: a key-value map served over TCP, hosted
// by rank 0. One thread accepts connections; each connection gets a thread that reads a request,
// answers it and waits for the next, so a client blocked in get()/wait() holds only its own
// thread. A malformed or oversized message closes that one connection (logged on stderr); the
// server keeps serving everyone else. With a token, a connection whose first message (kHello,
// see store_protocol.h) carries another token is answered with an error and dropped, and so is
// one that sends no hello within 30 s. You normally create it through TCPStore(is_server = true).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
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

 private:
  struct Connection {
    Socket socket;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  void accept_loop();
  void serve(Connection* conn);
  // Reads and checks the hello; false when the connection is to be dropped.
  bool authenticate(int fd, const std::string& peer);
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

  std::mutex mutex_;  // guards data_ and stopping_
  std::condition_variable changed_;  // notified on every change of data_ and on stop
  std::map<std::string, std::string> data_;
  bool stopping_ = false;

  std::mutex connections_mutex_;  // guards connections_
  std::list<std::unique_ptr<Connection>> connections_;
};

}  // namespace minidl::dist
