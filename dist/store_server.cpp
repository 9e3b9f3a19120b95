// dist/store_server.cpp — TCPStore's server: the accept loop (which also reads every new
// connection's hello, with a cap, a deadline and a descriptor reserve), one thread per admitted
// connection, and the request handlers. See store_server.h and the wire format in
// store_protocol.h.
#include "minidl/dist/store_server.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <system_error>
#include <vector>

namespace minidl::dist {

using namespace protocol;

namespace {

// Longest wait a client may ask for (a day): keeps deadline arithmetic far from overflow.
constexpr int64_t kMaxWaitMs = 24LL * 3600 * 1000;
// At most one line of each kind of connection trouble per interval (see ThrottledLog).
constexpr auto kLogInterval = std::chrono::seconds(5);
// After a failed accept() the loop waits, doubling from the first to the last of these.
constexpr auto kMinAcceptBackoff = std::chrono::milliseconds(10);
constexpr auto kMaxAcceptBackoff = std::chrono::milliseconds(1000);
// While descriptors are short and no waiting connection can be closed for room, look again this often.
constexpr auto kReserveRecheck = std::chrono::milliseconds(100);

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

// This process's RLIMIT_NOFILE (the soft limit, what open() and accept() obey); "unlimited" and
// an unreadable limit read as the largest int64_t.
int64_t descriptor_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY)
    return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(limit.rlim_cur);
}

// How many more descriptors this process may open: the limit less those open now (counted in
// /proc/self/fd). 0 when not even that directory can be opened for lack of a descriptor; the
// largest int64_t when it cannot be told (no /proc), and accept()'s own errors then speak.
int64_t free_descriptors() {
  const int64_t limit = descriptor_limit();
  if (limit == std::numeric_limits<int64_t>::max()) return limit;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return errno == EMFILE || errno == ENFILE ? 0 : std::numeric_limits<int64_t>::max();
  int64_t open = -3;  // ".", ".." and the directory's own descriptor
  while (::readdir(dir) != nullptr) ++open;
  ::closedir(dir);
  return limit - open;
}

// Milliseconds from now until `when` for poll(), rounded up: -1 for Clock::time_point::max().
int poll_timeout_ms(Clock::time_point when) {
  if (when == Clock::time_point::max()) return -1;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(when - Clock::now()).count() + 1;
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

}  // namespace

int TCPStoreServer::max_pending_connections() {
  return static_cast<int>(std::clamp<int64_t>(descriptor_limit() / 16, 4, 64));
}

int TCPStoreServer::reserved_descriptors() { return static_cast<int>(std::min<int64_t>(descriptor_limit() / 8, 64)); }

void TCPStoreServer::ThrottledLog::report(const std::string& message) {
  const auto now = Clock::now();
  if (printed_ && now - last_ < kLogInterval) {
    ++held_back_;
    return;
  }
  log_error(held_back_ == 0 ? message
                            : message + " (" + std::to_string(held_back_) +
                                  " more like it held back since the previous such line)");
  printed_ = true;
  last_ = now;
  held_back_ = 0;
}

TCPStoreServer::TCPStoreServer(const std::string& host, uint16_t port, bool bind_all, std::string token)
    : token_(std::move(token)) {
  listener_ = listen_tcp(host, port, bind_all);
  port_ = local_port(listener_.fd());
  // Non-blocking: a connection reset between poll() and accept() must not hang the loop.
  ::fcntl(listener_.fd(), F_SETFL, ::fcntl(listener_.fd(), F_GETFL) | O_NONBLOCK);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    if (is_out_of_descriptors(errno)) throw OutOfDescriptors("pipe: " + out_of_descriptors_message(errno));
    throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  }
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
  pending_.clear();
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
  std::vector<pollfd> fds;
  while (true) {
    drop_expired_pending();
    const bool accepting = Clock::now() >= accept_paused_until_;
    fds.clear();
    fds.push_back({wake_read_.fd(), POLLIN, 0});
    fds.push_back({accepting ? listener_.fd() : -1, POLLIN, 0});  // poll() skips a negative fd
    for (const auto& p : pending_) fds.push_back({p.socket.fd(), POLLIN, 0});
    // Wake for the oldest waiting connection's deadline (the earliest: deadlines are in arrival
    // order) and for the end of a pause in accepting.
    Clock::time_point wake = pending_.empty() ? Clock::time_point::max() : pending_.front().deadline;
    if (!accepting) wake = std::min(wake, accept_paused_until_);
    const int rc = ::poll(fds.data(), fds.size(), poll_timeout_ms(wake));
    if (rc < 0) {
      if (errno == EINTR) continue;
      log_error(std::string("poll failed, no longer accepting connections: ") + std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0) return;  // shutting down
    // Hellos first: a client whose hello is in is admitted before a newcomer can evict it.
    size_t i = 2;
    for (auto it = pending_.begin(); it != pending_.end(); ++i) {
      it = fds[i].revents != 0 && !read_hello(*it) ? pending_.erase(it) : it + 1;
    }
    if ((fds[1].revents & POLLIN) != 0) accept_one();
  }
}

void TCPStoreServer::accept_one() {
  const int max_pending = max_pending_connections();
  if (static_cast<int>(pending_.size()) >= max_pending) {
    drop_oldest_pending("the oldest of " + std::to_string(max_pending) +
                        " connections waiting for their hello (the most allowed), to make room for a new one");
  }
  const int64_t free = free_descriptors();
  const int reserve = reserved_descriptors();
  if (free <= reserve) {
    const std::string shortage = "only " + std::to_string(std::max<int64_t>(free, 0)) +
                                 " file descriptors are free below this process's limit of " +
                                 std::to_string(descriptor_limit()) + " and the store keeps " +
                                 std::to_string(reserve) + " of them for the training process";
    if (pending_.empty()) {
      reserve_log_.report("not accepting connections for now: " + shortage +
                          " (new connections wait in the backlog; raise the limit with `ulimit -n`)");
      accept_paused_until_ = Clock::now() + kReserveRecheck;
      return;
    }
    drop_oldest_pending("the oldest connection waiting for its hello, to make room for a new one: " + shortage);
  }
  const int fd = ::accept4(listener_.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
      accept_backoff_ = std::clamp(accept_backoff_ * 2, std::chrono::milliseconds(kMinAcceptBackoff),
                                   std::chrono::milliseconds(kMaxAcceptBackoff));
      accept_paused_until_ = Clock::now() + accept_backoff_;
      accept_log_.report(std::string("accept failed: ") + std::strerror(err) + " (the limit is " +
                         std::to_string(descriptor_limit()) + " open files); accepting again in " +
                         format_seconds(accept_backoff_) + ", backing off up to " + format_seconds(kMaxAcceptBackoff));
    } else if (err != EINTR && err != EAGAIN && err != EWOULDBLOCK && err != ECONNABORTED) {
      accept_log_.report(std::string("accept failed: ") + std::strerror(err));
    }
    return;
  }
  accept_backoff_ = std::chrono::milliseconds(0);
  reap_finished_connections();
  pending_.push_back(Pending{Socket(fd), Clock::now() + kHelloDeadline});
  // A real client's hello is usually in already: admit it before anything can evict it.
  if (!read_hello(pending_.back())) pending_.pop_back();
}

void TCPStoreServer::drop_oldest_pending(const std::string& why) {
  if (pending_.empty()) return;
  evicted_log_.report("closing connection from " + peer_name(pending_.front().socket.fd()) + ", " + why);
  pending_.pop_front();  // closes it
}

void TCPStoreServer::drop_expired_pending() {
  const auto now = Clock::now();
  while (!pending_.empty() && pending_.front().deadline <= now) {
    expired_log_.report("closing connection from " + peer_name(pending_.front().socket.fd()) +
                        ": no hello with the store token within " +
                        format_seconds(std::chrono::milliseconds(kHelloDeadline)));
    pending_.pop_front();
  }
}

bool TCPStoreServer::read_hello(Pending& pending) {
  const int fd = pending.socket.fd();
  try {
    switch (pending.hello.read_available(fd)) {
      case FrameAssembler::State::kPartial:
        return true;
      case FrameAssembler::State::kClosed:  // connected and left without a word (a port probe)
        return false;
      case FrameAssembler::State::kComplete:
        admit(pending);
        return false;
    }
  } catch (const ProtocolError& e) {
    refused_log_.report("closing connection from " + peer_name(fd) + ": " + e.what());
  } catch (const std::exception& e) {
    refused_log_.report("connection from " + peer_name(fd) + " failed: " + e.what());
  }
  return false;
}

void TCPStoreServer::admit(Pending& pending) {
  const int fd = pending.socket.fd();
  const Request r = parse_request(pending.hello.body());
  if (r.command != kHello) throw ProtocolError("the first message is not a hello with the store token");
  if (!token_.empty() && !same_token(r.key, token_)) {
    refused_log_.report("dropping connection from " + peer_name(fd) + ": wrong store token (MINIDL_STORE_TOKEN)");
    // One small frame into a fresh connection's empty send buffer: it does not block, and if
    // it cannot be sent the close that follows tells the client enough.
    const std::string body =
        Writer().u8(kError).str("wrong store token: the client's MINIDL_STORE_TOKEN is not the server's").body();
    const std::string frame = Writer().u32(static_cast<uint32_t>(body.size())).body() + body;
    (void)!::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    return;
  }
  // Blocking again: the connection's thread reads and writes with poll() deadlines.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  auto conn = std::make_unique<Connection>();
  conn->socket = std::move(pending.socket);
  Connection* raw = conn.get();
  std::lock_guard<std::mutex> lock(connections_mutex_);
  connections_.push_back(std::move(conn));
  try {
    raw->thread = std::thread([this, raw] { serve(raw); });
  } catch (const std::system_error& e) {
    thread_log_.report("closing connection from " + peer_name(fd) + ": cannot start a thread to serve it: " + e.what() +
                       " (see `ulimit -u` and free memory)");
    connections_.pop_back();  // closes it
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

void TCPStoreServer::serve(Connection* conn) {
  int fd = conn->socket.fd();
  std::string peer = peer_name(fd);
  std::string request;
  try {
    send_frame(fd, ok());  // the hello was good
    while (recv_frame(fd, request, Clock::time_point::max())) {
      send_frame(fd, handle(parse_request(request)));
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
