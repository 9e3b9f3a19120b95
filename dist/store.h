// dist/store.h — TCPStore: the key-value store every rank uses to find the others (rendezvous),
// as torch.distributed.TCPStore. Rank 0 hosts the server (is_server = true); every rank,
// rank 0 included, is a client that connects to MASTER_ADDR:MASTER_PORT, retrying until the
// timeout while the server is not up yet.
//
//   TCPStore store("127.0.0.1", {.port = 29500, .is_server = rank == 0});
//   store.set("addr/" + std::to_string(rank), my_address);
//   std::string peer = store.get("addr/0");   // blocks until rank 0 has set it
//   if (store.add("arrived", 1) == world) ...  // atomic counter
//
// Values are byte strings. Every blocking call ends with std::runtime_error naming the key and
// the timeout ("TCPStore::get: key 'x' not set within 30 s") rather than hanging, and says on
// stderr every progress_interval what it still waits for.
//
// Authentication: the server serves only clients that present its token, a shared secret
// (options.token, else $MINIDL_STORE_TOKEN; minidl-run and dist::spawn generate one for their
// workers). A client with another token is refused ("wrong store token") and dropped; the
// server goes on serving the others. Without a token on the server, any client is served, as
// torch.distributed.TCPStore does.
//
// One TCPStore object holds one connection; calls on it are serialised by a mutex, so a thread
// blocked in get() delays other threads using the same object (give each thread its own
// TCPStore if that matters). Do not use a TCPStore across fork(): the child must create its own.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "minidl/dist/socket.h"
#include "minidl/dist/store_server.h"

namespace minidl::dist {

struct TCPStoreOptions {
  uint16_t port = 0;  // server: 0 picks a free port (read it back with port()); client: required
  bool is_server = false;  // host the server in this process (rank 0)
  std::chrono::milliseconds timeout = std::chrono::seconds(300);  // connect, get and wait
  bool bind_all_interfaces = false;  // server: listen on every interface instead of host only
  std::optional<std::string> token = std::nullopt;  // shared secret; nullopt: $MINIDL_STORE_TOKEN (none if unset)
  std::chrono::milliseconds progress_interval = std::chrono::seconds(30);  // get/wait report on stderr (0: never)
};

// $MINIDL_STORE_TOKEN, or "" when it is unset.
std::string store_token_from_env();
// A fresh random token (32 hex digits from /dev/urandom) for a launcher to hand its workers.
std::string generate_store_token();

class TCPStore {
 public:
  // host: the server's address (MASTER_ADDR). Throws std::runtime_error if the server cannot
  // listen, or the client is not admitted within options.timeout: a connection the server closes
  // before answering its hello (one evicted to make room) is made again until then.
  TCPStore(std::string host, TCPStoreOptions options);
  ~TCPStore();
  TCPStore(const TCPStore&) = delete;
  TCPStore& operator=(const TCPStore&) = delete;

  void set(const std::string& key, const std::string& value);
  // The value of key; waits until some client sets it, at most timeout().
  std::string get(const std::string& key);
  // Adds delta to the integer stored at key (missing: 0) and returns the new value, atomically.
  int64_t add(const std::string& key, int64_t delta);
  // Waits until every key exists (at most timeout, default timeout()).
  void wait(const std::vector<std::string>& keys);
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Like wait, but returns false instead of throwing when the timeout passes.
  bool try_wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Whether every key exists now (no waiting).
  bool check(const std::vector<std::string>& keys);
  // Removes key; returns whether it existed.
  bool delete_key(const std::string& key);
  int64_t num_keys();

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }

 private:
  // Sends a request, returns the reply body after its status byte. A transport failure closes
  // the connection (the stream is out of step) and throws naming `what`.
  std::string request(const std::string& body, std::chrono::milliseconds wait, const std::string& what,
                      uint8_t* status);
  // kGet / kWait until the deadline, in slices of progress_interval_ with a line on stderr after
  // each; returns the last reply's payload, *status kTimeout if the deadline passed.
  std::string blocking_request(uint8_t command, const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                               const std::string& what, uint8_t* status);

  std::string host_;
  uint16_t port_;
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds progress_interval_;
  std::unique_ptr<TCPStoreServer> server_;  // only on the hosting rank
  std::mutex mutex_;  // one request at a time on socket_
  Socket socket_;
};

}  // namespace minidl::dist
