// fuzz/fuzz_store_frame.cpp — libFuzzer target: arbitrary bytes as the stream a TCPStore server
// reads from one connection: frames (recv_frame, with the hello's smaller cap first, as the
// server does) decoded into requests (parse_request). Errors must be ProtocolError or
// std::runtime_error; a decoded request must encode back to the same body.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "minidl/dist/store_protocol.h"

using namespace minidl::dist::protocol;

namespace {

std::string encode(const Request& r) {
  Writer w;
  w.u8(r.command);
  switch (r.command) {
    case kHello:
    case kDelete:
      w.str(r.key);
      break;
    case kSet:
      w.str(r.key).str(r.value);
      break;
    case kGet:
    case kAdd:
      w.str(r.key).i64(r.number);
      break;
    case kWait:
    case kCheck:
      w.u32(static_cast<uint32_t>(r.keys.size()));
      for (const auto& k : r.keys) w.str(k);
      if (r.command == kWait) w.i64(r.number);
      break;
    case kNumKeys:
      break;
  }
  return w.body();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 100000) return 0;  // stays below the socket buffer: the write never blocks
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) std::abort();
  int sndbuf = 1 << 20;
  ::setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
  if (size > 0 && ::write(fds[1], data, size) != static_cast<ssize_t>(size)) std::abort();
  ::close(fds[1]);
  std::string body;
  bool first = true;
  try {
    while (recv_frame(fds[0], body, minidl::dist::Clock::now() + std::chrono::seconds(1),
                      first ? kMaxHelloBytes : kMaxMessageBytes)) {
      first = false;
      const Request r = parse_request(body);
      if (encode(r) != body) std::abort();
    }
  } catch (const ProtocolError&) {
  } catch (const std::runtime_error&) {}
  ::close(fds[0]);
  return 0;
}
