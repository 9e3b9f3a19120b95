// dist/store.cpp — TCPStore's client side (and starting the server on the hosting rank).
// See store.h; the wire format is in store_protocol.h.
#include "dist/store.h"

#include <stdexcept>

#include "dist/store_protocol.h"

namespace minidl::dist {

using namespace protocol;

namespace {

// How long a client waits for a reply beyond the server-side timeout of a blocking request,
// before it decides the server is gone.
constexpr auto kReplyGrace = std::chrono::seconds(10);

std::string quoted_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) out += (i ? ", '" : "'") + keys[i] + "'";
  return out;
}

}  // namespace

TCPStore::TCPStore(std::string host, TCPStoreOptions options)
    : host_(std::move(host)), port_(options.port), timeout_(options.timeout) {
  if (options.is_server) {
    try {
      server_ = std::make_unique<TCPStoreServer>(host_, port_, options.bind_all_interfaces);
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("TCPStore: ") + e.what());
    }
    port_ = server_->port();
  } else if (port_ == 0) {
    throw std::runtime_error("TCPStore: a client needs the server's port (options.port is 0)");
  }
  try {
    socket_ = connect_tcp(host_, port_, Clock::now() + timeout_);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("TCPStore: ") + e.what() + " (gave up after " + format_seconds(timeout_) + ")");
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

std::string TCPStore::get(const std::string& key) {
  uint8_t status = 0;
  std::string what = "TCPStore::get: key '" + key + "'";
  std::string payload = request(Writer().u8(kGet).str(key).i64(timeout_.count()).body(), timeout_, what, &status);
  if (status == kTimeout) throw std::runtime_error(what + " not set within " + format_seconds(timeout_));
  return Reader(payload).str();
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  uint8_t status = 0;
  std::string what = "TCPStore::add: key '" + key + "'";
  std::string payload = request(Writer().u8(kAdd).str(key).i64(delta).body(), std::chrono::milliseconds(0), what, &status);
  return Reader(payload).i64();
}

void TCPStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void TCPStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  Writer body;
  body.u8(kWait).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) body.str(k);
  body.i64(timeout.count());
  uint8_t status = 0;
  std::string what = "TCPStore::wait: keys " + quoted_keys(keys);
  request(body.body(), timeout, what, &status);
  if (status == kTimeout) throw std::runtime_error(what + " not all set within " + format_seconds(timeout));
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
  std::string payload = request(Writer().u8(kNumKeys).body(), std::chrono::milliseconds(0), "TCPStore::num_keys", &status);
  return Reader(payload).i64();
}

}  // namespace minidl::dist
