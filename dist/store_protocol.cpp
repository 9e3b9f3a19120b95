// dist/store_protocol.cpp — encoding and framing of TCPStore messages. See store_protocol.h.
#include "minidl/dist/store_protocol.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace minidl::dist::protocol {

Writer& Writer::u8(uint8_t v) {
  body_.push_back(static_cast<char>(v));
  return *this;
}

Writer& Writer::u32(uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) body_.push_back(static_cast<char>((v >> shift) & 0xff));
  return *this;
}

Writer& Writer::i64(int64_t v) {
  auto u = static_cast<uint64_t>(v);
  for (int shift = 56; shift >= 0; shift -= 8) body_.push_back(static_cast<char>((u >> shift) & 0xff));
  return *this;
}

Writer& Writer::str(const std::string& s) {
  u32(static_cast<uint32_t>(s.size()));
  body_ += s;
  return *this;
}

const char* Reader::take(size_t n) {
  if (body_.size() - pos_ < n) {
    throw ProtocolError("truncated message (" + std::to_string(body_.size()) + " bytes)");
  }
  const char* p = body_.data() + pos_;
  pos_ += n;
  return p;
}

uint8_t Reader::u8() { return static_cast<uint8_t>(*take(1)); }

uint32_t Reader::u32() {
  const char* p = take(4);
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

int64_t Reader::i64() {
  const char* p = take(8);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return static_cast<int64_t>(v);
}

std::string Reader::str() {
  uint32_t n = u32();
  const char* p = take(n);
  return std::string(p, n);
}

void Reader::expect_end() const {
  if (pos_ != body_.size()) {
    throw ProtocolError(std::to_string(body_.size() - pos_) + " unexpected bytes at the end of a message");
  }
}

Request parse_request(const std::string& body) {
  Reader in(body);
  Request r;
  r.command = static_cast<Command>(in.u8());
  switch (r.command) {
    case kHello:
    case kDelete:
      r.key = in.str();
      break;
    case kSet:
      r.key = in.str();
      r.value = in.str();
      break;
    case kGet:
    case kAdd:
      r.key = in.str();
      r.number = in.i64();
      break;
    case kWait:
    case kCheck: {
      const uint32_t n = in.u32();
      // each key takes at least its 4-byte length: a count the body cannot hold is refused
      if (n > body.size() / 4) throw ProtocolError("key count " + std::to_string(n) + " exceeds the message size");
      for (uint32_t i = 0; i < n; ++i) r.keys.push_back(in.str());
      if (r.command == kWait) r.number = in.i64();
      break;
    }
    case kNumKeys:
      break;
    default:
      throw ProtocolError("unknown command " + std::to_string(static_cast<int>(r.command)));
  }
  in.expect_end();
  return r;
}

void send_frame(int fd, const std::string& body) {
  if (body.size() > kMaxMessageBytes) {
    throw std::runtime_error("TCPStore: message of " + std::to_string(body.size()) + " bytes exceeds the limit of " +
                             std::to_string(kMaxMessageBytes) +
                             " bytes (the store is for rendezvous data: "
                             "addresses, ids, counters)");
  }
  Writer header;
  header.u32(static_cast<uint32_t>(body.size()));
  // One send for small messages keeps them in one TCP segment.
  if (body.size() < 4096) {
    std::string frame = header.body() + body;
    send_all(fd, frame.data(), frame.size());
  } else {
    send_all(fd, header.body().data(), 4);
    send_all(fd, body.data(), body.size());
  }
}

bool recv_frame(int fd, std::string& body, Clock::time_point deadline, uint32_t max_bytes) {
  char header[4];
  if (!recv_all(fd, header, sizeof(header), deadline)) return false;
  std::string header_str(header, 4);
  uint32_t size = Reader(header_str).u32();
  if (size > max_bytes) {
    throw ProtocolError("message of " + std::to_string(size) + " bytes exceeds the limit of " +
                        std::to_string(max_bytes) + " bytes");
  }
  // Grow in chunks as the bytes arrive: a peer announcing a large frame and sending nothing
  // costs no memory.
  constexpr size_t kChunk = 64 << 10;
  body.clear();
  while (body.size() < size) {
    const size_t old = body.size();
    const size_t n = std::min<size_t>(kChunk, size - old);
    body.resize(old + n);
    if (!recv_all(fd, body.data() + old, n, deadline)) {
      throw std::runtime_error("connection closed in the middle of a message");
    }
  }
  return true;
}

FrameAssembler::State FrameAssembler::read_available(int fd) {
  while (true) {
    const bool in_header = header_.size() < 4;
    const size_t want = in_header ? 4 - header_.size() : size_ - body_.size();
    if (!in_header && want == 0) return State::kComplete;
    char buf[512];
    const ssize_t n = ::recv(fd, buf, std::min(want, sizeof(buf)), 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return State::kPartial;
      throw std::runtime_error(std::string("receive failed: ") + std::strerror(errno));
    }
    if (n == 0) {
      if (header_.empty()) return State::kClosed;
      throw std::runtime_error("connection closed in the middle of a message");
    }
    if (!in_header) {
      body_.append(buf, static_cast<size_t>(n));
      continue;
    }
    header_.append(buf, static_cast<size_t>(n));
    if (header_.size() < 4) continue;
    size_ = Reader(header_).u32();
    if (size_ > max_bytes_) {
      throw ProtocolError("message of " + std::to_string(size_) + " bytes exceeds the limit of " +
                          std::to_string(max_bytes_) + " bytes");
    }
  }
}

}  // namespace minidl::dist::protocol
