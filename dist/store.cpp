// dist/store.cpp — TCPStore's client side (and starting the server on the hosting rank).
// See store.h; the wire format is in store_protocol.h.
#include "minidl/dist/store.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "minidl/dist/store_protocol.h"

namespace minidl::dist {

using namespace protocol;

namespace {

// How long a client waits for a reply beyond the server-side timeout of a blocking request,
// before it decides the server is gone.
constexpr auto kReplyGrace = std::chrono::seconds(10);
constexpr auto kHelloRetryMax = std::chrono::milliseconds(500);  // the longest pause between hellos

// 'a', 'b', 'c' — the first 10 keys, then how many more.
std::string quoted_keys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 10;
  std::string out;
  for (size_t i = 0; i < std::min(keys.size(), kShown); ++i) out += (i ? ", '" : "'") + keys[i] + "'";
  if (keys.size() > kShown) out += " and " + std::to_string(keys.size() - kShown) + " more";
  return out;
}

void log_line(const std::string& message) {
  std::string line = "[minidl TCPStore] " + message + "\n";
  (void)!::write(STDERR_FILENO, line.data(), line.size());  // one write: lines do not interleave
}

}  // namespace

std::string store_token_from_env() {
  const char* t = std::getenv("MINIDL_STORE_TOKEN");
  return t != nullptr ? t : "";
}

std::string generate_store_token() {
  unsigned char bytes[16];
  std::ifstream random("/dev/urandom", std::ios::binary);
  if (!random.read(reinterpret_cast<char*>(bytes), sizeof(bytes)))
    throw std::runtime_error("generate_store_token: cannot read /dev/urandom");
  static const char* hex = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) {
    token.push_back(hex[b >> 4]);
    token.push_back(hex[b & 15]);
  }
  return token;
}

TCPStore::TCPStore(std::string host, TCPStoreOptions options)
    : host_(std::move(host)),
      port_(options.port),
      timeout_(options.timeout),
      progress_interval_(options.progress_interval) {
  const std::string token = options.token ? *options.token : store_token_from_env();
  if (options.is_server) {
    try {
      server_ = std::make_unique<TCPStoreServer>(host_, port_, options.bind_all_interfaces, token);
    } catch (const OutOfDescriptors& e) {
      throw OutOfDescriptors(std::string("TCPStore: ") + e.what());
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("TCPStore: ") + e.what());
    }
    port_ = server_->port();
  } else if (port_ == 0) {
    throw std::runtime_error("TCPStore: a client needs the server's port (options.port is 0)");
  }
  // Connect and say hello; again on a fresh connection, while the timeout lasts, when the server
  // closes this one unanswered: a server short of descriptors, or crowded by connections that
  // never say hello, closes the oldest one still waiting for its hello to make room, and that
  // may be ours. An answer (the token refused) is final.
  const auto deadline = Clock::now() + timeout_;
  for (auto backoff = std::chrono::milliseconds(10);; backoff = std::min(2 * backoff, kHelloRetryMax)) {
    try {
      socket_ = connect_tcp(host_, port_, deadline);
    } catch (const OutOfDescriptors& e) {
      throw OutOfDescriptors(std::string("TCPStore: ") + e.what());  // at once: no waiting helps
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("TCPStore: ") + e.what() + " (gave up after " + format_seconds(timeout_) +
                               ")");
    }
    try {
      uint8_t status = 0;
      request(Writer().u8(kHello).str(token).body(), std::chrono::milliseconds(0),
              "TCPStore: the store at " + host_ + ":" + std::to_string(port_) + " refused this client", &status);
      return;
    } catch (const std::runtime_error&) {
      if (socket_.valid() || Clock::now() + backoff >= deadline) throw;  // answered, or out of time
    }
    std::this_thread::sleep_for(backoff);
  }
}

TCPStore::~TCPStore() {
  socket_.close();  // before the server (if ours) stops, so it sees a clean end of stream
  server_.reset();
}

std::string TCPStore::request(const std::string& body, std::chrono::milliseconds wait, const std::string& what,
                              uint8_t* status) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!socket_.valid()) {
    throw std::runtime_error(what + ": not connected to " + host_ + ":" + std::to_string(port_) +
                             " (an earlier request failed)");
  }
  std::string reply;
  try {
    send_frame(socket_.fd(), body);
    if (!recv_frame(socket_.fd(), reply, Clock::now() + wait + kReplyGrace)) {
      throw std::runtime_error("the server closed the connection");
    }
  } catch (const std::exception& e) {
    socket_.close();
    throw std::runtime_error(what + ": store at " + host_ + ":" + std::to_string(port_) + ": " + e.what());
  }
  Reader in(reply);
  *status = in.u8();
  if (*status == kError) throw std::runtime_error(what + ": " + in.str());  // the connection stays usable
  return reply.substr(1);
}

void TCPStore::set(const std::string& key, const std::string& value) {
  uint8_t status = 0;
  request(Writer().u8(kSet).str(key).str(value).body(), std::chrono::milliseconds(0),
          "TCPStore::set: key '" + key + "'", &status);
}

std::string TCPStore::blocking_request(uint8_t command, const std::vector<std::string>& keys,
                                       std::chrono::milliseconds timeout, const std::string& what, uint8_t* status) {
  using std::chrono::milliseconds;
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  milliseconds left = timeout;
  while (true) {
    const milliseconds slice =
        progress_interval_.count() > 0 ? std::max(milliseconds(0), std::min(left, progress_interval_)) : left;
    Writer body;
    body.u8(command);
    if (command == kGet) {
      body.str(keys.at(0));
    } else {
      body.u32(static_cast<uint32_t>(keys.size()));
      for (const auto& k : keys) body.str(k);
    }
    body.i64(slice.count());
    std::string payload = request(body.body(), slice, what, status);
    left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (*status != kTimeout || left.count() <= 0) return payload;
    log_line(what + ": still waiting after " +
             format_seconds(std::chrono::duration_cast<milliseconds>(Clock::now() - start)) + " (gives up after " +
             format_seconds(timeout) + ")");
  }
}

std::string TCPStore::get(const std::string& key) {
  uint8_t status = 0;
  std::string what = "TCPStore::get: key '" + key + "'";
  std::string payload = blocking_request(kGet, {key}, timeout_, what, &status);
  if (status == kTimeout) throw std::runtime_error(what + " not set within " + format_seconds(timeout_));
  return Reader(payload).str();
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  uint8_t status = 0;
  std::string what = "TCPStore::add: key '" + key + "'";
  std::string payload =
      request(Writer().u8(kAdd).str(key).i64(delta).body(), std::chrono::milliseconds(0), what, &status);
  return Reader(payload).i64();
}

void TCPStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void TCPStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  uint8_t status = 0;
  std::string what = "TCPStore::wait: keys " + quoted_keys(keys);
  blocking_request(kWait, keys, timeout, what, &status);
  if (status == kTimeout) throw std::runtime_error(what + " not all set within " + format_seconds(timeout));
}

bool TCPStore::try_wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  uint8_t status = 0;
  blocking_request(kWait, keys, timeout, "TCPStore::try_wait: keys " + quoted_keys(keys), &status);
  return status != kTimeout;
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  Writer body;
  body.u8(kCheck).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) body.str(k);
  uint8_t status = 0;
  std::string payload = request(body.body(), std::chrono::milliseconds(0), "TCPStore::check", &status);
  return Reader(payload).u8() != 0;
}

bool TCPStore::delete_key(const std::string& key) {
  uint8_t status = 0;
  std::string payload = request(Writer().u8(kDelete).str(key).body(), std::chrono::milliseconds(0),
                                "TCPStore::delete_key: key '" + key + "'", &status);
  return Reader(payload).u8() != 0;
}

int64_t TCPStore::num_keys() {
  uint8_t status = 0;
  std::string payload =
      request(Writer().u8(kNumKeys).body(), std::chrono::milliseconds(0), "TCPStore::num_keys", &status);
  return Reader(payload).i64();
}

}  // namespace minidl::dist
