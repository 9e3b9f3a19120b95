// dist/process_group_gloo.cpp — ProcessGroupGloo: Gloo rendezvous through our TCPStore, one
// communication thread running the collectives in FIFO order, Gloo errors turned into messages
// naming the collective, and the MINIDL_DIST_DEBUG fingerprint check. See process_group_gloo.h.
#include "minidl/dist/process_group_gloo.h"

#include <stdexcept>
#include <string>

#ifdef MINIDL_WITH_GLOO
#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include "minidl/autograd/trace.h"
#include "minidl/dist/cpu_collective_checks.h"
#include "minidl/dist/communication_thread.h"
#include "minidl/tensor/creation.h"
#endif

namespace minidl::dist {

#ifdef MINIDL_WITH_GLOO

namespace {

// ---- gloo::rendezvous::Store over our TCPStore (keys under a per-group prefix) ----
class StoreAdapter : public gloo::rendezvous::Store {
 public:
  StoreAdapter(TCPStore& store, std::string prefix, std::chrono::milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string value = store_.get(prefix_ + key);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const auto& k : keys) prefixed.push_back(prefix_ + k);
    store_.wait(prefixed, timeout);
  }

 private:
  TCPStore& store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

// The local address this machine uses to reach host:port (a UDP "connect" sends nothing; it
// only asks the kernel for the route). 127.0.0.1 when host is local.
std::string local_address_towards(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port == 0 ? 1 : port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (rc == EAI_SYSTEM && is_out_of_descriptors(errno))
    throw OutOfDescriptors("cannot resolve the store host '" + host + "': " + out_of_descriptors_message(errno));
  if (rc != 0 || found == nullptr)
    throw std::runtime_error("ProcessGroupGloo: cannot resolve the store host '" + host + "'");
  std::string result;
  for (addrinfo* a = found; a != nullptr && result.empty(); a = a->ai_next) {
    int fd = ::socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0 && is_out_of_descriptors(errno)) {
      const int err = errno;
      ::freeaddrinfo(found);
      throw OutOfDescriptors("cannot find the local address that routes to '" + host +
                             "': " + out_of_descriptors_message(err));
    }
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* src = local.ss_family == AF_INET6
                            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr)
                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr);
      if (::inet_ntop(local.ss_family, src, text, sizeof(text)) != nullptr) result = text;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (result.empty()) throw std::runtime_error("ProcessGroupGloo: no local interface routes to '" + host + "'");
  return result;
}

// Calls f(T{}) with the element type of a tensor that a collective only moves (broadcast,
// all_gather): the 16-bit floats as their bit patterns (tensor/dtype.h), the rest as dispatch.
template <class F> void dispatch_moved(DType t, const char* op, F&& f) {
  if (t == DType::BFloat16) return f(bfloat16{});
  if (t == DType::Float16) return f(float16{});
  dispatch(t, op, f);
}

// Element-wise reductions Gloo calls on pairs of buffers: c = op(a, b), n elements.
template <class T> gloo::AllreduceOptions::Func reduce_function(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM:
    case ReduceOp::AVG:  // sum now, divide by the world size afterwards
      return [](void* c, const void* a, const void* b, size_t n) {
        T* out = static_cast<T*>(c);
        const T* x = static_cast<const T*>(a);
        const T* y = static_cast<const T*>(b);
        for (size_t i = 0; i < n; ++i) out[i] = static_cast<T>(x[i] + y[i]);
      };
    case ReduceOp::MAX:
      return [](void* c, const void* a, const void* b, size_t n) {
        T* out = static_cast<T*>(c);
        const T* x = static_cast<const T*>(a);
        const T* y = static_cast<const T*>(b);
        for (size_t i = 0; i < n; ++i) out[i] = x[i] < y[i] ? y[i] : x[i];
      };
    case ReduceOp::MIN:
      return [](void* c, const void* a, const void* b, size_t n) {
        T* out = static_cast<T*>(c);
        const T* x = static_cast<const T*>(a);
        const T* y = static_cast<const T*>(b);
        for (size_t i = 0; i < n; ++i) out[i] = y[i] < x[i] ? y[i] : x[i];
      };
  }
  throw std::logic_error("reduce_function: unknown op");
}

const CpuCollectiveChecks kChecks("ProcessGroupGloo", "Gloo");

std::atomic<int64_t> groups_created{0};  // names each group's keys; same order on every rank

}  // namespace

struct ProcessGroupGloo::Impl {
  int rank = 0;
  int size = 1;
  ProcessGroupOptions options;
  std::string group_key;  // "minidl/gloo/<name or number>/": this group's keys in the store
  bool debug = false;
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::unique_ptr<TCPStore> debug_store;  // debug mode: the group's own store connection

  std::mutex issue_mutex;  // one issuer at a time: sequence order == queue order
  int64_t seq = 0;  // collectives issued so far

  std::unique_ptr<CommunicationThread> thread;  // made last, gone first: its tasks use the context

  std::string describe_failure(const std::string& what, const std::exception& e) const {
    if (dynamic_cast<const gloo::IoException*>(&e) != nullptr) return gloo_message(what, e.what());
    return what + " failed: " + e.what();
  }

  std::string gloo_message(const std::string& what, const std::string& gloo_what) const {
    std::string lower = gloo_what;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower.find("timed out") != std::string::npos)
      return what + " timed out after " + std::to_string(options.timeout.count()) + " ms: a rank did not arrive (" +
             gloo_what + ")";
    return what + " failed: a connection to another rank broke; did a rank exit or crash? (" + gloo_what + ")";
  }

  // Debug mode: publish this rank's fingerprint for collective #n, read every rank's, compare.
  void check_fingerprint(int64_t n, const CollectiveDesc& desc) {
    const std::string prefix = group_key + "debug/";
    auto key = [&](int64_t s, int r) { return prefix + std::to_string(s) + "/" + std::to_string(r); };
    const std::string fingerprint = desc.fingerprint(n);  // dist/process_group.h
    debug_store->set(key(n, rank), fingerprint);
    // Every rank has finished comparing #n-2 once all have published #n-1: drop our old key.
    if (n > 2) debug_store->delete_key(key(n - 2, rank));
    std::vector<std::string> values(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) {
      if (r == rank) {
        values[static_cast<size_t>(r)] = fingerprint;
        continue;
      }
      try {
        values[static_cast<size_t>(r)] = debug_store->get(key(n, r));
      } catch (const std::exception& e) {
        throw std::runtime_error("MINIDL_DIST_DEBUG: collective #" + std::to_string(n) + " (" + desc.human() +
                                 "): rank " + std::to_string(r) + " did not arrive within " +
                                 std::to_string(options.timeout.count()) + " ms (" + e.what() + ")");
      }
    }
    const std::string mismatch = fingerprint_mismatch(n, values);
    if (!mismatch.empty()) throw std::runtime_error(mismatch);
  }

  // Numbers the collective, runs the debug check, queues body; returns its Work.
  std::shared_ptr<Work> issue(const CollectiveDesc& desc, std::function<void(uint32_t tag)> body) {
    std::lock_guard<std::mutex> issue_lock(issue_mutex);
    if (thread->broken())
      throw std::runtime_error(desc.op + ": the process group is broken by an earlier failure: " +
                               thread->broken_reason());
    const int64_t n = ++seq;
    std::string what = desc.op + " #" + std::to_string(n);
    if (!desc.sig().empty()) what += " (" + desc.sig() + ")";
    if (debug) {
      try {
        check_fingerprint(n, desc);
      } catch (const std::exception& e) {
        thread->mark_broken(e.what());
        throw;
      }
    }
    // Tags: 4 per collective (all_gather makes two Gloo calls); the same on every rank.
    const auto tag = static_cast<uint32_t>(n * 4);
    auto trace = autograd::trace::Collective::launch(what);
    return thread->enqueue(what, [body = std::move(body), tag] { body(tag); }, std::move(trace));
  }

  // ---- the Gloo calls (communication thread) ----
  // In place on a contiguous buffer.
  void run_all_reduce(const Tensor& buf, ReduceOp op, uint32_t tag) {
    if (buf.numel() == 0) return;
    dispatch(buf.dtype(), "all_reduce", [&](auto zero) {
      using T = decltype(zero);
      T* data = buf.data<T>();
      const auto n = static_cast<size_t>(buf.numel());
      gloo::AllreduceOptions opts(context);
      opts.setOutput<T>(data, n);
      opts.setReduceFunction(reduce_function<T>(op));
      opts.setTag(tag);
      opts.setTimeout(options.timeout);
      gloo::allreduce(opts);
      if (op == ReduceOp::AVG)
        for (size_t i = 0; i < n; ++i) data[i] = static_cast<T>(data[i] / static_cast<T>(size));
    });
  }

  void run_broadcast(const Tensor& buf, int root, uint32_t tag) {
    if (buf.numel() == 0) return;
    dispatch_moved(buf.dtype(), "broadcast", [&](auto zero) {
      using T = decltype(zero);
      gloo::BroadcastOptions opts(context);
      opts.setOutput<T>(buf.data<T>(), static_cast<size_t>(buf.numel()));
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(options.timeout);
      gloo::broadcast(opts);
    });
  }

  // Gathers counts[r] elements from every rank into out (contiguous, sum(counts) elements).
  void run_allgatherv(const Tensor& in, const Tensor& out, const std::vector<size_t>& counts, uint32_t tag) {
    dispatch_moved(in.dtype(), "all_gather", [&](auto zero) {
      using T = decltype(zero);
      gloo::AllgathervOptions opts(context);
      opts.setInput<T>(in.data<T>(), static_cast<size_t>(in.numel()));
      opts.setOutput<T>(out.data<T>(), counts);
      opts.setTag(tag);
      opts.setTimeout(options.timeout);
      gloo::allgatherv(opts);
    });
  }

  void run_all_gather(const Tensor& in, std::vector<Tensor>& out, uint32_t tag) {
    // 1. Every rank's (rows, elements per row, dtype): int64[3] each.
    const bool scalar = in.dim() == 0;
    const int64_t rows = scalar ? 1 : in.size(0);
    const int64_t row_numel =
        rows == 0 ? shape_numel(Shape(in.shape().begin() + 1, in.shape().end())) : in.numel() / rows;
    Tensor header = from_vector<int64_t>({rows, row_numel, static_cast<int64_t>(in.dtype())}, {3});
    Tensor headers = empty({size, 3}, DType::Int64);
    run_allgatherv(header, headers, std::vector<size_t>(static_cast<size_t>(size), 3), tag);
    const int64_t* h = headers.data<int64_t>();
    std::vector<size_t> counts(static_cast<size_t>(size));
    int64_t total_rows = 0;
    for (int r = 0; r < size; ++r) {
      const int64_t* hr = h + 3 * r;
      if (hr[1] != row_numel || hr[2] != static_cast<int64_t>(in.dtype()))
        throw std::runtime_error("ranks disagree: rank " + std::to_string(rank) + " has " + dtype_name(in.dtype()) +
                                 " rows of " + std::to_string(row_numel) + " elements, rank " + std::to_string(r) +
                                 " has " + dtype_name(static_cast<DType>(hr[2])) + " rows of " + std::to_string(hr[1]) +
                                 " elements");
      counts[static_cast<size_t>(r)] = static_cast<size_t>(hr[0] * row_numel);
      total_rows += hr[0];
    }
    // 2. The data, concatenated along dim 0 in rank order: (total_rows, ...).
    Shape all_shape = scalar ? Shape{total_rows} : in.shape();
    if (!scalar) all_shape[0] = total_rows;
    Tensor all = empty(all_shape, in.dtype());
    if (all.numel() > 0) run_allgatherv(in, all, counts, tag + 1);
    out.assign(static_cast<size_t>(size), Tensor());
    int64_t offset = 0;
    for (int r = 0; r < size; ++r) {
      const int64_t n = h[3 * r];
      out[static_cast<size_t>(r)] = scalar ? all.select(0, offset) : all.narrow(0, offset, n);
      offset += n;
    }
  }

  void run_barrier(uint32_t tag) {
    gloo::BarrierOptions opts(context);
    opts.setTag(tag);
    opts.setTimeout(options.timeout);
    gloo::barrier(opts);
  }
};

ProcessGroupGloo::ProcessGroupGloo(TCPStore& store, int rank, int size, ProcessGroupOptions options)
    : ProcessGroup(rank, size), options_(options), impl_(std::make_unique<Impl>()) {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("ProcessGroupGloo: rank " + std::to_string(rank) + " of world size " +
                                std::to_string(size) + " is out of range");
  if (options.timeout.count() <= 0) throw std::invalid_argument("ProcessGroupGloo: timeout must be positive");
  Impl& im = *impl_;
  im.rank = rank;
  im.size = size;
  im.options = options;
  im.group_key = "minidl/gloo/" + (options.group_name.empty() ? std::to_string(groups_created++) : options.group_name) + "/";
  im.debug = debug_mode(options);

  try {
    gloo::transport::tcp::attr attr;
    const char* iface = std::getenv("GLOO_SOCKET_IFNAME");
    if (iface != nullptr && *iface != '\0')
      attr.iface = iface;
    else
      attr.hostname = local_address_towards(store.host(), store.port());
    auto device = gloo::transport::tcp::CreateDevice(attr);
    im.context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    im.context->setTimeout(options.timeout);
    StoreAdapter adapter(store, im.group_key, options.timeout);
    im.context->connectFullMesh(adapter, device);
  } catch (const std::exception& e) {
    const std::string who = "ProcessGroupGloo: rank " + std::to_string(rank) + " of " + std::to_string(size);
    // Out of descriptors it fails at once, whatever the timeout: say that, not "within N ms".
    // Gloo's own socket errors carry strerror's text.
    if (dynamic_cast<const OutOfDescriptors*>(&e) != nullptr)
      throw OutOfDescriptors(who + " could not connect to the other ranks: " + e.what());
    const std::string what = e.what();
    for (int err : {ENFILE, EMFILE}) {
      if (what.find(std::strerror(err)) != std::string::npos)
        throw OutOfDescriptors(who + " could not connect to the other ranks: " + what + ": " +
                               out_of_descriptors_message(err));
    }
    throw std::runtime_error(who + " could not connect to the other ranks within " +
                             std::to_string(options.timeout.count()) + " ms: " + what);
  }
  if (im.debug)
    im.debug_store = std::make_unique<TCPStore>(
        store.host(), TCPStoreOptions{.port = store.port(), .is_server = false, .timeout = options.timeout});
  im.thread = std::make_unique<CommunicationThread>(
      [&im](const std::string& what, const std::exception& e) { return im.describe_failure(what, e); });
}

ProcessGroupGloo::~ProcessGroupGloo() { impl_->thread.reset(); }  // runs what is queued, then joins

int64_t ProcessGroupGloo::sequence_number() const {
  std::lock_guard<std::mutex> lock(impl_->issue_mutex);
  return impl_->seq;
}

bool ProcessGroupGloo::is_broken() const { return impl_->thread->broken(); }

std::shared_ptr<Work> ProcessGroupGloo::all_reduce_async(Tensor& t, ReduceOp op) {
  const CollectiveDesc desc = kChecks.all_reduce(t, op);
  Tensor target = t;
  return impl_->issue(desc, [this, target, op](uint32_t tag) mutable {
    Tensor buf = reduction_buffer(target);  // 16-bit floats: summed in float32
    impl_->run_all_reduce(buf, op, tag);
    if (!buf.is_same(target)) target.copy_(buf);  // (rounded once)
  });
}

std::shared_ptr<Work> ProcessGroupGloo::broadcast_async(Tensor& t, int root) {
  const CollectiveDesc desc = kChecks.broadcast(t, root, size_);
  Tensor target = t;
  return impl_->issue(desc, [this, target, root](uint32_t tag) mutable {
    Tensor buf = target.is_contiguous() ? target : target.contiguous();
    impl_->run_broadcast(buf, root, tag);
    if (!buf.is_same(target)) target.copy_(buf);
  });
}

std::shared_ptr<Work> ProcessGroupGloo::all_gather_async(const Tensor& t, std::vector<Tensor>& out) {
  const CollectiveDesc desc = kChecks.all_gather(t);
  Tensor input = t;
  std::vector<Tensor>* result = &out;
  return impl_->issue(desc,
                      [this, input, result](uint32_t tag) { impl_->run_all_gather(input.contiguous(), *result, tag); });
}

std::shared_ptr<Work> ProcessGroupGloo::reduce_scatter_async(const Tensor& input, Tensor& out, ReduceOp op) {
  const CollectiveDesc desc = kChecks.reduce_scatter(input, out, op, size_);
  Tensor in = input, target = out;
  return impl_->issue(desc, [this, in, target, op](uint32_t tag) mutable {
    // all_reduce a copy of the whole input, keep this rank's slab.
    Tensor reduced = reduction_buffer(in);
    if (reduced.is_same(in)) reduced = in.clone();
    impl_->run_all_reduce(reduced, op, tag);
    const int64_t n = target.dim() == 0 ? 0 : target.size(0);
    target.copy_(reduced.narrow(0, rank_ * n, n));
  });
}

std::shared_ptr<Work> ProcessGroupGloo::barrier_async() {
  return impl_->issue(CollectiveDesc{"barrier", "", "[]", ""}, [this](uint32_t tag) { impl_->run_barrier(tag); });
}

#else  // no Gloo in this build

struct ProcessGroupGloo::Impl {};

ProcessGroupGloo::ProcessGroupGloo(TCPStore&, int rank, int size, ProcessGroupOptions options)
    : ProcessGroup(rank, size), options_(options) {
  throw std::runtime_error("ProcessGroupGloo: this build has no Gloo (install libgloo-dev and reconfigure)");
}
ProcessGroupGloo::~ProcessGroupGloo() = default;
int64_t ProcessGroupGloo::sequence_number() const { return 0; }
bool ProcessGroupGloo::is_broken() const { return true; }
std::shared_ptr<Work> ProcessGroupGloo::all_reduce_async(Tensor&, ReduceOp) { throw std::logic_error("no Gloo"); }
std::shared_ptr<Work> ProcessGroupGloo::broadcast_async(Tensor&, int) { throw std::logic_error("no Gloo"); }
std::shared_ptr<Work> ProcessGroupGloo::all_gather_async(const Tensor&, std::vector<Tensor>&) {
  throw std::logic_error("no Gloo");
}
std::shared_ptr<Work> ProcessGroupGloo::reduce_scatter_async(const Tensor&, Tensor&, ReduceOp) {
  throw std::logic_error("no Gloo");
}
std::shared_ptr<Work> ProcessGroupGloo::barrier_async() { throw std::logic_error("no Gloo"); }

#endif

}  // namespace minidl::dist
