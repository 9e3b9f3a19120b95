// dist/socket.h — the few TCP helpers the store and the launcher need: listen on an address,
// connect with retries until a deadline, send/receive whole buffers with a deadline, and a
// Socket that closes its file descriptor. POSIX sockets only; errors are std::runtime_error
// naming the peer and the system error, and OutOfDescriptors when no descriptor can be had.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace minidl::dist {

using Clock = std::chrono::steady_clock;

// Thrown at once (no retry or deadline helps) when a descriptor cannot be had: this process is
// at its RLIMIT_NOFILE (EMFILE) or the system at its file table's size (ENFILE).
class OutOfDescriptors : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Whether err is EMFILE or ENFILE.
bool is_out_of_descriptors(int err);
// What to tell the user for such an err: "this process is out of file descriptors (Too many
// open files; its limit is 1024 open files: raise it with `ulimit -n`)", or the system's
// version for ENFILE.
std::string out_of_descriptors_message(int err);

// Owns one file descriptor (closed on destruction); movable, not copyable.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  ~Socket() { close(); }

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void close();

 private:
  int fd_ = -1;
};

// A listening TCP socket bound to host:port (port 0: the kernel picks one; see local_port).
// host "" or bind_all: every interface. SO_REUSEADDR is set so a restarted job can reuse a port.
// Throws OutOfDescriptors when no socket can be had, std::runtime_error on other failures.
Socket listen_tcp(const std::string& host, uint16_t port, bool bind_all, int backlog = 128);
// The port a bound socket listens on.
uint16_t local_port(int fd);
// "127.0.0.1:5555" for the peer of a connected socket ("?" if unknown).
std::string peer_name(int fd);

// Connects to host:port, retrying refused/unreachable attempts until `deadline`. Out of
// descriptors, throws OutOfDescriptors at once.
Socket connect_tcp(const std::string& host, uint16_t port, Clock::time_point deadline);

// Sends all bytes (MSG_NOSIGNAL: a closed peer is an error, not SIGPIPE). Throws on failure.
void send_all(int fd, const void* data, size_t size);
// Receives exactly `size` bytes before `deadline` (Clock::time_point::max(): no deadline).
// Returns false on a clean end of stream before the first byte; throws on timeout, on an end of
// stream in the middle, or on a socket error.
bool recv_all(int fd, void* data, size_t size, Clock::time_point deadline);

// A port that was free on host a moment ago (bound, then closed), outside the kernel's ephemeral
// port range (/proc/sys/net/ipv4/ip_local_port_range; 32768-60999 when unreadable): a random port
// below it (from 10000 up), tried until one binds. Port 0's port would come from that range, from
// which the kernel also takes the source port of every outgoing connection on the host (Gloo
// opens many), so one of them could take it before the caller binds it. Outside the range only a
// process that binds it on purpose can; good enough for tests and for picking MASTER_PORT. Falls
// back to port 0's port when none of 64 tries binds.
uint16_t find_free_port(const std::string& host = "127.0.0.1");

// "30 s", "0.25 s": a duration for error messages.
std::string format_seconds(std::chrono::milliseconds ms);

}  // namespace minidl::dist
