// dist/socket.cpp — TCP helpers: listen, connect with retries, send/receive whole buffers with a
// deadline. See socket.h.
#include "minidl/dist/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>

namespace minidl::dist {

namespace {

std::string errno_str(int err) { return std::strerror(err); }

// getaddrinfo for host:port as a TCP endpoint; passive (host may be null) for bind.
std::unique_ptr<addrinfo, void (*)(addrinfo*)> resolve(const std::string& host, uint16_t port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* result = nullptr;
  std::string port_str = std::to_string(port);
  int rc = getaddrinfo(passive && host.empty() ? nullptr : host.c_str(), port_str.c_str(), &hints, &result);
  if (rc == EAI_SYSTEM && is_out_of_descriptors(errno)) {
    throw OutOfDescriptors("cannot resolve address '" + host + "': " + out_of_descriptors_message(errno));
  }
  if (rc != 0) {
    throw std::runtime_error("cannot resolve address '" + host + "': " + gai_strerror(rc));
  }
  return {result, freeaddrinfo};
}

// Milliseconds left until deadline for poll(): -1 for "no deadline", at least 0.
int poll_timeout_ms(Clock::time_point deadline) {
  if (deadline == Clock::time_point::max()) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left + 1, 0, 1 << 30));
}

// One non-blocking connect attempt that waits at most until deadline. Returns fd or -1 (errno set).
int try_connect(const addrinfo* ai, Clock::time_point deadline) {
  int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) return -1;
  int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    rc = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (rc == 0) {
      ::close(fd);
      errno = ETIMEDOUT;
      return -1;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    rc = err == 0 ? 0 : -1;
    if (err != 0) errno = err;
  }
  if (rc != 0) {
    int saved = errno;
    ::close(fd);
    errno = saved;
    return -1;
  }
  fcntl(fd, F_SETFL, flags);  // back to blocking; reads and writes use poll for deadlines
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// A listening socket on the first of `addrs` that binds (SO_REUSEADDR set); an invalid Socket when
// none does, the errno of the last failure in last_err (it stops at the first EMFILE or ENFILE).
Socket listen_first(const addrinfo* addrs, int backlog, int& last_err) {
  for (const addrinfo* ai = addrs; ai != nullptr; ai = ai->ai_next) {
    Socket s(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!s.valid()) {
      last_err = errno;
      if (is_out_of_descriptors(last_err)) break;
      continue;
    }
    int one = 1;
    setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(s.fd(), ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(s.fd(), backlog) == 0) return s;
    last_err = errno;
  }
  return Socket();
}

// The kernel's ephemeral port range, [first, last], from /proc/sys/net/ipv4/ip_local_port_range
// (IPv6 uses it too); Linux's default 32768-60999 when it cannot be read.
std::pair<int, int> ephemeral_port_range() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int first = 0, last = 0;
  if (in >> first >> last && 1 <= first && first <= last && last <= 65535) return {first, last};
  return {32768, 60999};
}

// The ports find_free_port picks from, [lo, hi] (lo > hi: none): below the ephemeral range, from
// 10000 (or 1000 ports below it, or 1024, when it starts lower) to its first port - 1, away from
// the well-known and the common services' ports; above it when nothing is below.
std::pair<int, int> ports_outside_the_ephemeral_range() {
  const auto [first, last] = ephemeral_port_range();
  const int lo = std::max(1024, std::min(10000, first - 1000));
  if (lo <= first - 1) return {lo, first - 1};
  return {last + 1, 65535};
}

void set_port(addrinfo* ai, uint16_t port) {
  if (ai->ai_family == AF_INET) reinterpret_cast<sockaddr_in*>(ai->ai_addr)->sin_port = htons(port);
  if (ai->ai_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(ai->ai_addr)->sin6_port = htons(port);
}

// A seed that differs between calls and between processes forked from one parent (a generator
// kept across calls would make two forked children pick the same ports).
uint64_t fresh_seed() {
  uint64_t seed = 0;
  if (::getrandom(&seed, sizeof(seed), GRND_NONBLOCK) == static_cast<ssize_t>(sizeof(seed))) return seed;
  return (static_cast<uint64_t>(::getpid()) << 32) ^
         static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

}  // namespace

bool is_out_of_descriptors(int err) { return err == EMFILE || err == ENFILE; }

std::string out_of_descriptors_message(int err) {
  if (err == ENFILE) {
    return "the system is out of file descriptors (" + errno_str(err) +
           "; its limit is in /proc/sys/fs/file-max: close other programs' files or raise it)";
  }
  rlimit limit{};
  std::string what = "its limit";
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    what += " is " + std::to_string(limit.rlim_cur) + " open files";
  return "this process is out of file descriptors (" + errno_str(err) + "; " + what + ": raise it with `ulimit -n`)";
}

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.release();
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Socket listen_tcp(const std::string& host, uint16_t port, bool bind_all, int backlog) {
  auto addrs = resolve(bind_all ? std::string() : host, port, /*passive=*/true);
  int last_err = 0;
  Socket s = listen_first(addrs.get(), backlog, last_err);
  if (s.valid()) return s;
  const std::string where = "cannot listen on " + (bind_all ? std::string("*") : host) + ":" + std::to_string(port);
  if (is_out_of_descriptors(last_err)) throw OutOfDescriptors(where + ": " + out_of_descriptors_message(last_err));
  throw std::runtime_error(where + ": " + errno_str(last_err));
}

uint16_t local_port(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw std::runtime_error("getsockname: " + errno_str(errno));
  }
  if (addr.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
  return ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
}

std::string peer_name(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char host[NI_MAXHOST], serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return std::string(host) + ":" + serv;
}

Socket connect_tcp(const std::string& host, uint16_t port, Clock::time_point deadline) {
  auto addrs = resolve(host, port, /*passive=*/false);
  auto backoff = std::chrono::milliseconds(10);
  int last_err = 0;
  while (true) {
    for (addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) {
      int fd = try_connect(ai, deadline);
      if (fd >= 0) return Socket(fd);
      last_err = errno;
      if (is_out_of_descriptors(last_err)) {
        throw OutOfDescriptors("cannot connect to " + host + ":" + std::to_string(port) + ": " +
                               out_of_descriptors_message(last_err));
      }
    }
    // The server may not be up yet: retry until the deadline, backing off up to 250 ms.
    auto now = Clock::now();
    if (now >= deadline) break;
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(250));
  }
  throw std::runtime_error("cannot connect to " + host + ":" + std::to_string(port) + ": " + errno_str(last_err));
}

void send_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("send to " + peer_name(fd) + " failed: " + errno_str(errno));
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

bool recv_all(int fd, void* data, size_t size, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < size) {
    pollfd pfd{fd, POLLIN, 0};
    int rc = ::poll(&pfd, 1, poll_timeout_ms(deadline));
    if (rc < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("poll: " + errno_str(errno));
    }
    if (rc == 0) throw std::runtime_error("receive from " + peer_name(fd) + " timed out");
    ssize_t n = ::recv(fd, p + got, size - got, 0);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw std::runtime_error("receive from " + peer_name(fd) + " failed: " + errno_str(errno));
    }
    if (n == 0) {
      if (got == 0) return false;
      throw std::runtime_error("connection to " + peer_name(fd) + " closed in the middle of a message");
    }
    got += static_cast<size_t>(n);
  }
  return true;
}

// Not bind(port 0): the kernel hands out port 0's ports from the ephemeral range, which is also
// where the source port of every outgoing connection on the host comes from (Gloo opens many).
// Between this function's close and the caller's bind, such a connection can be given the very
// port, and the caller's bind fails with "Address already in use". A port outside that range is
// never given to an outgoing connection, so only a process that binds it on purpose can take it.
uint16_t find_free_port(const std::string& host) {
  constexpr int kAttempts = 64;
  const auto [lo, hi] = ports_outside_the_ephemeral_range();
  if (lo <= hi) {
    auto addrs = resolve(host, 0, /*passive=*/true);
    std::mt19937_64 gen(fresh_seed());
    std::uniform_int_distribution<int> pick(lo, hi);
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
      const auto port = static_cast<uint16_t>(pick(gen));
      for (addrinfo* ai = addrs.get(); ai != nullptr; ai = ai->ai_next) set_port(ai, port);
      int err = 0;
      if (Socket s = listen_first(addrs.get(), 1, err); s.valid()) return port;
      if (is_out_of_descriptors(err))
        throw OutOfDescriptors("cannot listen on " + host + ":" + std::to_string(port) + ": " +
                               out_of_descriptors_message(err));
      // in use (or refused for another reason): another port
    }
  }
  // none outside the range bound (or there is none): any free port, as the kernel picks it
  Socket s = listen_tcp(host, 0, /*bind_all=*/false, 1);
  return local_port(s.fd());
}

std::string format_seconds(std::chrono::milliseconds ms) {
  std::ostringstream out;
  if (ms.count() % 1000 == 0) {
    out << ms.count() / 1000 << " s";
  } else {
    out << static_cast<double>(ms.count()) / 1000.0 << " s";
  }
  return out.str();
}

}  // namespace minidl::dist
