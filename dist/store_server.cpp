// dist/store_server.cpp — TCPStore's server: accept loop, one thread per connection, and the
// request handlers. See store_server.h and the wire format in store_protocol.h.
#include "minidl/dist/store_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace minidl::dist {

using namespace protocol;

namespace {

// Longest wait a client may ask for (a day): keeps deadline arithmetic far from overflow.
constexpr int64_t kMaxWaitMs = 24LL * 3600 * 1000;
// How long a new connection may take to present its token.
constexpr auto kHelloTimeout = std::chrono::seconds(30);

void log_error(const std::string& message) {
  std::string line = "[minidl TCPStore] " + message + "\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());  // one write: lines do not interleave
}

std::chrono::milliseconds clamp_timeout(int64_t ms) {
  return std::chrono::milliseconds(std::clamp<int64_t>(ms, 0, kMaxWaitMs));
}

std::string ok() { return Writer().u8(kOk).body(); }
// Compares in a time that does not depend on where the strings differ (the token is a secret).
bool same_token(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string shutting_down() { return Writer().u8(kError).str("the store's server is shutting down").body(); }

}  // namespace

TCPStoreServer::TCPStoreServer(const std::string& host, uint16_t port, bool bind_all, std::string token)
    : token_(std::move(token)) {
  listener_ = listen_tcp(host, port, bind_all);
  port_ = local_port(listener_.fd());
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("TCPStore: pipe: ") + std::strerror(errno));
  wake_read_ = Socket(fds[0]);
  wake_write_ = Socket(fds[1]);
  accept_thread_ = std::thread([this] { accept_loop(); });
}

TCPStoreServer::~TCPStoreServer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  char byte = 1;
  (void)!::write(wake_write_.fd(), &byte, 1);
  accept_thread_.join();
  // Unblock every connection thread that sits in recv() (SHUT_RD: it reads an end of stream),
  // then join them all. The write side stays open, so a thread that has already applied a
  // request still delivers its reply: a client whose set() made rank 0 decide to exit gets its
  // answer before rank 0's process ends. Waiters in get()/wait() get a "shutting down" error.
  std::lock_guard<std::mutex> lock(connections_mutex_);
  for (auto& conn : connections_) ::shutdown(conn->socket.fd(), SHUT_RD);
  for (auto& conn : connections_) conn->thread.join();
  connections_.clear();
}

void TCPStoreServer::accept_loop() {
  while (true) {
    pollfd fds[2] = {{listener_.fd(), POLLIN, 0}, {wake_read_.fd(), POLLIN, 0}};
    int rc = ::poll(fds, 2, -1);
    if (rc < 0) {
      if (errno == EINTR) continue;
      log_error(std::string("poll failed, no longer accepting connections: ") + std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;  // shutting down
    if ((fds[0].revents & POLLIN) == 0) continue;
    int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN) {
        log_error(std::string("accept failed: ") + std::strerror(errno));
      }
      continue;
    }
    reap_finished_connections();
    auto conn = std::make_unique<Connection>();
    conn->socket = Socket(fd);
    Connection* raw = conn.get();
    std::lock_guard<std::mutex> lock(connections_mutex_);
    connections_.push_back(std::move(conn));
    raw->thread = std::thread([this, raw] { serve(raw); });
  }
}

void TCPStoreServer::reap_finished_connections() {
  std::lock_guard<std::mutex> lock(connections_mutex_);
  for (auto it = connections_.begin(); it != connections_.end();) {
    if ((*it)->done) {
      (*it)->thread.join();
      it = connections_.erase(it);  // closes the socket
    } else {
      ++it;
    }
  }
}

bool TCPStoreServer::authenticate(int fd, const std::string& peer) {
  std::string hello;
  if (!recv_frame(fd, hello, Clock::now() + kHelloTimeout, kMaxHelloBytes)) return false;
  const Request r = parse_request(hello);
  if (r.command != kHello) throw ProtocolError("the first message is not a hello with the store token");
  if (!token_.empty() && !same_token(r.key, token_)) {
    log_error("dropping connection from " + peer + ": wrong store token (MINIDL_STORE_TOKEN)");
    send_frame(
        fd, Writer().u8(kError).str("wrong store token: the client's MINIDL_STORE_TOKEN is not the server's").body());
    return false;
  }
  send_frame(fd, ok());
  return true;
}

void TCPStoreServer::serve(Connection* conn) {
  int fd = conn->socket.fd();
  std::string peer = peer_name(fd);
  std::string request;
  try {
    if (authenticate(fd, peer)) {
      while (recv_frame(fd, request, Clock::time_point::max())) {
        send_frame(fd, handle(parse_request(request)));
      }
    }
  } catch (const ProtocolError& e) {
    log_error("closing connection from " + peer + ": " + e.what());
  } catch (const std::exception& e) {
    log_error("connection from " + peer + " failed: " + e.what());
  }
  ::shutdown(fd, SHUT_RDWR);  // the socket itself is closed when the thread is reaped
  conn->done = true;
}

bool TCPStoreServer::wait_for_keys(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys,
                                   std::chrono::milliseconds timeout) {
  auto all_present = [&] {
    for (const auto& k : keys) {
      if (data_.count(k) == 0) return false;
    }
    return true;
  };
  changed_.wait_until(lock, Clock::now() + timeout, [&] { return stopping_ || all_present(); });
  return all_present();
}

std::string TCPStoreServer::handle(const Request& r) {
  std::unique_lock<std::mutex> lock(mutex_);
  switch (r.command) {
    case kSet:
      data_[r.key] = r.value;
      changed_.notify_all();
      return ok();
    case kGet:
      if (!wait_for_keys(lock, {r.key}, clamp_timeout(r.number)))
        return stopping_ ? shutting_down() : Writer().u8(kTimeout).body();
      return Writer().u8(kOk).str(data_[r.key]).body();
    case kAdd: {
      int64_t value = 0;
      auto it = data_.find(r.key);
      if (it != data_.end()) {
        try {
          size_t used = 0;
          value = std::stoll(it->second, &used);
          if (used != it->second.size()) throw std::invalid_argument("trailing characters");
        } catch (const std::exception&) {
          return Writer().u8(kError).str("value of key '" + r.key + "' is not an integer").body();
        }
      }
      value += r.number;
      data_[r.key] = std::to_string(value);
      changed_.notify_all();
      return Writer().u8(kOk).i64(value).body();
    }
    case kCheck: {
      bool present = true;
      for (const auto& k : r.keys) present = present && data_.count(k) > 0;
      return Writer().u8(kOk).u8(present ? 1 : 0).body();
    }
    case kWait:
      if (!wait_for_keys(lock, r.keys, clamp_timeout(r.number)))
        return stopping_ ? shutting_down() : Writer().u8(kTimeout).body();
      return ok();
    case kDelete: {
      bool existed = data_.erase(r.key) > 0;
      changed_.notify_all();
      return Writer().u8(kOk).u8(existed ? 1 : 0).body();
    }
    case kNumKeys:
      return Writer().u8(kOk).i64(static_cast<int64_t>(data_.size())).body();
    case kHello:
      break;
  }
  throw ProtocolError("unexpected command " + std::to_string(static_cast<int>(r.command)));
}

}  // namespace minidl::dist
