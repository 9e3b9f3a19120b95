// dist/store_protocol.h — the TCPStore wire format, shared by client (store.cpp) and server
// (store_server.cpp).
//
// Every message is a frame: a 4-byte big-endian length N (at most kMaxMessageBytes), then N
// bytes of body. A request body is a command byte and its arguments; a reply body is a status
// byte and its payload. Strings are a 4-byte length then the bytes; integers are 8 bytes,
// big-endian, two's complement.
//
//   request                                   reply (status kOk unless noted)
//   kSet    key value                         -
//   kGet    key timeout_ms                    value          | kTimeout
//   kAdd    key delta                         new value      | kError message (not an integer)
//   kWait   n key_1..key_n timeout_ms         -              | kTimeout
//   kCheck  n key_1..key_n                    u8 all present
//   kDelete key                               u8 existed
//   kNumKeys                                  i64 count
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "dist/socket.h"

namespace minidl::dist::protocol {

inline constexpr uint32_t kMaxMessageBytes = 64u << 20;  // 64 MiB

enum Command : uint8_t { kSet = 1, kGet, kAdd, kWait, kCheck, kDelete, kNumKeys };
enum Status : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

// A message that does not follow the format (too long, truncated, unknown command).
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Builds a message body.
class Writer {
 public:
  Writer& u8(uint8_t v);
  Writer& u32(uint32_t v);
  Writer& i64(int64_t v);
  Writer& str(const std::string& s);
  const std::string& body() const { return body_; }

 private:
  std::string body_;
};

// Reads a message body front to back; throws ProtocolError when it runs short.
class Reader {
 public:
  explicit Reader(const std::string& body) : body_(body) {}
  uint8_t u8();
  uint32_t u32();
  int64_t i64();
  std::string str();
  // Throws ProtocolError if bytes are left over.
  void expect_end() const;

 private:
  const char* take(size_t n);
  const std::string& body_;
  size_t pos_ = 0;
};

// Sends one frame. Throws std::runtime_error on a socket error.
void send_frame(int fd, const std::string& body);
// Receives one frame into body. Returns false on a clean end of stream before the frame;
// throws ProtocolError if the announced length exceeds kMaxMessageBytes, std::runtime_error on
// a timeout or a socket error.
bool recv_frame(int fd, std::string& body, Clock::time_point deadline);

}  // namespace minidl::dist::protocol
