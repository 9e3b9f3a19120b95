// dist/store_protocol.h — the TCPStore wire format, shared by client (store.cpp) and server
// (store_server.cpp).
//
// Every message is a frame: a 4-byte big-endian length N (at most kMaxMessageBytes), then N
// bytes of body. A request body is a command byte and its arguments; a reply body is a status
// byte and its payload. Strings are a 4-byte length then the bytes; integers are 8 bytes,
// big-endian, two's complement.
//
//   request                                   reply (status kOk unless noted)
//   kHello  token                             -              | kError message (wrong token)
//   kSet    key value                         -
//   kGet    key timeout_ms                    value          | kTimeout
//   kAdd    key delta                         new value      | kError message (not an integer)
//   kWait   n key_1..key_n timeout_ms         -              | kTimeout
//   kCheck  n key_1..key_n                    u8 all present
//   kDelete key                               u8 existed
//   kNumKeys                                  i64 count
//
// The first frame of every connection is a kHello (at most kMaxHelloBytes) carrying the client's
// store token; a server with a token drops a client whose token differs, after one kError reply.
// The receiver grows a frame's buffer as its bytes arrive, so an announced length costs nothing
// until the bytes are really sent.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "minidl/dist/socket.h"

namespace minidl::dist::protocol {

// The store holds rendezvous data: addresses (Gloo's are ~150 bytes per peer, so 4 MiB is a world
// of ~25,000 ranks), ids and small counters. Larger frames are refused.
inline constexpr uint32_t kMaxMessageBytes = 4u << 20;  // 4 MiB
inline constexpr uint32_t kMaxHelloBytes = 4096;  // before the token is checked

enum Command : uint8_t { kSet = 1, kGet, kAdd, kWait, kCheck, kDelete, kNumKeys, kHello };
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

// A decoded request body (see the table above): which fields a command uses is in the table.
struct Request {
  Command command = kNumKeys;
  std::string key;  // kSet kGet kAdd kDelete; the token for kHello
  std::string value;  // kSet
  std::vector<std::string> keys;  // kWait kCheck
  int64_t number = 0;  // timeout_ms (kGet kWait), delta (kAdd)
};
// Decodes a request body; throws ProtocolError on an unknown command, a truncated body or
// leftover bytes.
Request parse_request(const std::string& body);

// Sends one frame. Throws std::runtime_error on a socket error or a body over kMaxMessageBytes.
void send_frame(int fd, const std::string& body);
// Receives one frame into body, growing it as bytes arrive. Returns false on a clean end of
// stream before the frame; throws ProtocolError if the announced length exceeds max_bytes,
// std::runtime_error on a timeout or a socket error.
bool recv_frame(int fd, std::string& body, Clock::time_point deadline, uint32_t max_bytes = kMaxMessageBytes);

// Receives one frame from a non-blocking socket as its bytes trickle in, without ever waiting:
// the store's server reads every new connection's hello this way on its one accept thread.
class FrameAssembler {
 public:
  enum class State { kPartial, kComplete, kClosed };
  explicit FrameAssembler(uint32_t max_bytes) : max_bytes_(max_bytes) {}
  // Reads what the socket holds now. kComplete: the whole frame is in body(); kPartial: more is
  // to come; kClosed: a clean end of stream before the frame's first byte. Throws ProtocolError
  // if the announced length exceeds max_bytes, std::runtime_error on an end of stream in the
  // middle of the frame or a socket error.
  State read_available(int fd);
  const std::string& body() const { return body_; }

 private:
  uint32_t max_bytes_;
  std::string header_;  // the 4 length bytes, as they arrive
  std::string body_;
  uint32_t size_ = 0;  // the announced length, once header_ is complete
};

}  // namespace minidl::dist::protocol
