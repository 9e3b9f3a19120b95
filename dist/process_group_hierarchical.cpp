// dist/process_group_hierarchical.cpp — shared memory inside each host, Gloo between the hosts'
// leaders (the header explains each collective).
#include "minidl/dist/process_group_hierarchical.h"

#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "minidl/dist/cpu_collective_checks.h"
#include "minidl/autograd/trace.h"
#include "minidl/dist/communication_thread.h"
#include "minidl/dist/process_group_gloo.h"
#include "minidl/dist/process_group_shm.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"

namespace minidl::dist {

namespace {

const CpuCollectiveChecks kChecks("ProcessGroupHierarchical", "the hierarchical group");

std::atomic<int64_t> groups_created{0};  // names each group's keys; same order on every rank

// t /= n element by element, as the flat groups' AVG does (a division, not a reciprocal's product).
void divide_by(Tensor& t, int n) {
  if (t.dtype() == DType::Float32) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] / static_cast<float>(n);
  } else if (t.dtype() == DType::Float64) {
    double* p = t.data<double>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] / static_cast<double>(n);
  } else {
    throw std::invalid_argument("ProcessGroupHierarchical::all_reduce: AVG of " + t.desc() + " is not supported");
  }
}

std::string join_ints(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ' ';
    s += std::to_string(v[i]);
  }
  return s;
}

std::vector<int64_t> split_ints(const std::string& s) {
  std::vector<int64_t> v;
  std::istringstream in(s);
  for (int64_t x; in >> x;) v.push_back(x);
  return v;
}

}  // namespace

struct ProcessGroupHierarchical::Impl {
  int rank = 0;
  int size = 1;
  ProcessGroupOptions options;
  std::vector<std::vector<int>> hosts;  // hosts[h]: its ranks, ascending; hosts[h][0] leads it
  std::vector<int> host_of;  // host_of[r]: rank r's host
  std::vector<int> local_rank_of;  // local_rank_of[r]: rank r's place in its host
  int host = 0;
  std::unique_ptr<ProcessGroupShm> local;  // this host's ranks
  std::unique_ptr<ProcessGroupGloo> leaders;  // the leaders (on leaders only, when hosts > 1)

  std::mutex issue_mutex;  // one issuer at a time: sequence order == queue order
  int64_t seq = 0;

  std::unique_ptr<CommunicationThread> thread;  // made last, gone first: its tasks use the groups

  bool is_leader() const { return local->rank() == 0; }
  bool several_hosts() const { return hosts.size() > 1; }

  // "inside this host, ranks 0, 1 are world ranks 2, 3": the inner groups' messages count ranks
  // inside the host.
  std::string host_ranks() const {
    const std::vector<int>& mine = hosts[static_cast<size_t>(host)];
    std::string local_ranks, world_ranks;
    for (size_t i = 0; i < mine.size(); ++i) {
      if (i > 0) local_ranks += ", ", world_ranks += ", ";
      local_ranks += std::to_string(i);
      world_ranks += std::to_string(mine[i]);
    }
    return "inside this host, ranks " + local_ranks + " are world ranks " + world_ranks;
  }

  std::shared_ptr<Work> issue(const CollectiveDesc& desc, std::function<void()> run) {
    std::lock_guard<std::mutex> issue_lock(issue_mutex);
    if (thread->broken())
      throw std::runtime_error("ProcessGroupHierarchical::" + desc.op +
                               ": the process group is broken by an earlier failure: " + thread->broken_reason());
    std::string what = desc.op + " #" + std::to_string(++seq);
    if (!desc.sig().empty()) what += " (" + desc.sig() + ")";
    auto trace = autograd::trace::Collective::launch(what);
    return thread->enqueue(what, std::move(run), std::move(trace));
  }

  // ---- the collectives (communication thread), on contiguous buffers ----
  void all_reduce(Tensor& buf, ReduceOp op) {
    const ReduceOp inner = op == ReduceOp::AVG ? ReduceOp::SUM : op;
    local->all_reduce(buf, inner);
    if (several_hosts()) {
      if (is_leader()) leaders->all_reduce(buf, inner);
      local->broadcast(buf, 0);
    }
    if (op == ReduceOp::AVG) divide_by(buf, size);
  }

  void broadcast(Tensor& buf, int root) {
    const int root_host = host_of[static_cast<size_t>(root)];
    if (host == root_host) local->broadcast(buf, local_rank_of[static_cast<size_t>(root)]);
    if (!several_hosts()) return;
    if (is_leader()) leaders->broadcast(buf, root_host);  // leaders' ranks are host numbers
    if (host != root_host) local->broadcast(buf, 0);
  }

  // rows[r] = rank r's tensor (first dims may differ); input has at least one dim.
  void all_gather(const Tensor& input, std::vector<Tensor>& rows) {
    const std::vector<Tensor> mine = local->all_gather(input);  // this host's ranks, in order
    rows.assign(static_cast<size_t>(size), Tensor());
    if (!several_hosts()) {
      for (size_t i = 0; i < mine.size(); ++i) rows[static_cast<size_t>(hosts[static_cast<size_t>(host)][i])] = mine[i];
      return;
    }
    // The leader gathers every host's block and every rank's first dim, in world rank order.
    std::string dims_text;
    Tensor world;  // (sum of first dims, ...): every rank's rows in rank order
    if (is_leader()) {
      std::vector<int64_t> my_dims;
      for (const Tensor& t : mine) my_dims.push_back(t.size(0));
      const std::vector<std::string> host_dims = leaders->all_gather_object(join_ints(my_dims));
      const std::vector<Tensor> blocks = leaders->all_gather(cat(mine, 0));  // blocks[h]: host h's ranks' rows
      std::vector<Tensor> by_rank(static_cast<size_t>(size));
      std::vector<int64_t> dims(static_cast<size_t>(size));
      for (size_t h = 0; h < hosts.size(); ++h) {
        const std::vector<int64_t> d = split_ints(host_dims[h]);
        int64_t offset = 0;
        for (size_t i = 0; i < hosts[h].size(); ++i) {
          const auto r = static_cast<size_t>(hosts[h][i]);
          by_rank[r] = blocks[h].narrow(0, offset, d[i]);
          dims[r] = d[i];
          offset += d[i];
        }
      }
      dims_text = join_ints(dims);
      world = cat(by_rank, 0);
    }
    // ... and hands them to its host: first dims, then the rows.
    local->broadcast_object(dims_text, 0);
    const std::vector<int64_t> dims = split_ints(dims_text);
    if (!is_leader()) {
      Shape shape = input.shape();
      shape[0] = 0;
      for (int64_t d : dims) shape[0] += d;
      world = Tensor(shape, input.dtype());
    }
    local->broadcast(world, 0);
    int64_t offset = 0;
    for (size_t r = 0; r < static_cast<size_t>(size); ++r) {
      rows[r] = world.narrow(0, offset, dims[r]);
      offset += dims[r];
    }
  }

  void barrier() {
    local->barrier();
    if (!several_hosts()) return;
    if (is_leader()) leaders->barrier();
    local->barrier();
  }
};

ProcessGroupHierarchical::ProcessGroupHierarchical(TCPStore& store, int rank, int size, ProcessGroupOptions options,
                                                   HierarchicalOptions hierarchical)
    : ProcessGroup(rank, size), impl_(std::make_unique<Impl>()) {
  if (size < 1 || rank < 0 || rank >= size)
    throw std::invalid_argument("ProcessGroupHierarchical: rank " + std::to_string(rank) + " of world size " +
                                std::to_string(size) + " is out of range");
  if (options.timeout.count() <= 0) throw std::invalid_argument("ProcessGroupHierarchical: timeout must be positive");
  Impl& im = *impl_;
  im.rank = rank;
  im.size = size;
  im.options = options;
  const std::string name =
      "hierarchical-" + (options.group_name.empty() ? std::to_string(groups_created++) : options.group_name);

  // 1. Hosts, numbered by their lowest rank.
  const std::vector<std::string> ids =
      rank_host_ids(store, rank, size, "minidl/" + name + "/", options.timeout, hierarchical.host_id);
  std::map<std::string, int> host_number;
  im.host_of.resize(static_cast<size_t>(size));
  im.local_rank_of.resize(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    auto [it, added] = host_number.emplace(ids[static_cast<size_t>(r)], static_cast<int>(im.hosts.size()));
    if (added) im.hosts.emplace_back();
    std::vector<int>& ranks = im.hosts[static_cast<size_t>(it->second)];
    im.host_of[static_cast<size_t>(r)] = it->second;
    im.local_rank_of[static_cast<size_t>(r)] = static_cast<int>(ranks.size());
    ranks.push_back(r);
  }
  im.host = im.host_of[static_cast<size_t>(rank)];

  // 2. This host's shared memory, then the leaders' Gloo group.
  ProcessGroupOptions inner = options;
  inner.group_name = name + "-host-" + std::to_string(im.host);
  im.local = std::make_unique<ProcessGroupShm>(
      store, im.local_rank_of[static_cast<size_t>(rank)], static_cast<int>(im.hosts[static_cast<size_t>(im.host)].size()),
      inner, ShmOptions{.slot_bytes = hierarchical.slot_bytes, .host_id = hierarchical.host_id});
  if (im.several_hosts() && im.is_leader()) {
    inner.group_name = name + "-leaders";
    im.leaders = std::make_unique<ProcessGroupGloo>(store, im.host, static_cast<int>(im.hosts.size()), inner);
  }
  // 3. Every rank is connected before any returns: a leader whose group is torn down at once
  // must not close a connection another leader is still completing.
  im.barrier();
  im.thread = std::make_unique<CommunicationThread>([&im](const std::string& what, const std::exception& e) {
    return "ProcessGroupHierarchical: " + what + " failed: " + e.what() + " (" + im.host_ranks() + ")";
  });
}

ProcessGroupHierarchical::~ProcessGroupHierarchical() { impl_->thread.reset(); }  // runs what is queued, then joins

int ProcessGroupHierarchical::num_hosts() const { return static_cast<int>(impl_->hosts.size()); }
int ProcessGroupHierarchical::host() const { return impl_->host; }
const std::vector<int>& ProcessGroupHierarchical::ranks_of_host(int host) const {
  if (host < 0 || host >= num_hosts())
    throw std::out_of_range("ProcessGroupHierarchical::ranks_of_host: no host " + std::to_string(host) + " of " +
                            std::to_string(num_hosts()));
  return impl_->hosts[static_cast<size_t>(host)];
}
bool ProcessGroupHierarchical::is_broken() const { return impl_->thread->broken(); }

std::shared_ptr<Work> ProcessGroupHierarchical::all_reduce_async(Tensor& t, ReduceOp op) {
  const CollectiveDesc desc = kChecks.all_reduce(t, op);
  Tensor target = t;
  return impl_->issue(desc, [this, target, op]() mutable {
    Tensor buf = reduction_buffer(target);  // 16-bit floats: float32 through both levels
    impl_->all_reduce(buf, op);
    if (!buf.is_same(target)) target.copy_(buf);  // (rounded once)
  });
}

std::shared_ptr<Work> ProcessGroupHierarchical::broadcast_async(Tensor& t, int root) {
  const CollectiveDesc desc = kChecks.broadcast(t, root, size_);
  Tensor target = t;
  return impl_->issue(desc, [this, target, root]() mutable {
    Tensor buf = target.is_contiguous() ? target : target.contiguous();
    impl_->broadcast(buf, root);
    if (!buf.is_same(target)) target.copy_(buf);
  });
}

std::shared_ptr<Work> ProcessGroupHierarchical::all_gather_async(const Tensor& t, std::vector<Tensor>& out) {
  const CollectiveDesc desc = kChecks.all_gather(t);
  Tensor input = t;
  std::vector<Tensor>* result = &out;
  return impl_->issue(desc, [this, input, result] {
    if (input.dim() > 0) return impl_->all_gather(input.contiguous(), *result);
    impl_->all_gather(input.reshape({1}), *result);  // a scalar travels as one row
    for (Tensor& row : *result) row = row.reshape({});
  });
}

std::shared_ptr<Work> ProcessGroupHierarchical::reduce_scatter_async(const Tensor& input, Tensor& out, ReduceOp op) {
  const CollectiveDesc desc = kChecks.reduce_scatter(input, out, op, size_);
  Tensor in = input, target = out;
  return impl_->issue(desc, [this, in, target, op]() mutable {
    Tensor reduced = reduction_buffer(in);  // all_reduce a copy of the whole input, keep this rank's slab
    if (reduced.is_same(in)) reduced = in.clone();
    impl_->all_reduce(reduced, op);
    const int64_t n = target.dim() == 0 ? 0 : target.size(0);
    target.copy_(reduced.narrow(0, rank_ * n, n));
  });
}

Tensor ProcessGroupHierarchical::empty_symmetric(const Shape& shape, DType dtype, Device device) {
  if (!device.is_cpu()) return ProcessGroup::empty_symmetric(shape, dtype, device);
  Tensor out;  // made on the communication thread, in order with the collectives queued before it
  impl_->issue(CollectiveDesc{"empty_symmetric", dtype_name(dtype), shape_str(shape), ""},
               [this, &out, shape, dtype] { out = impl_->local->empty_symmetric(shape, dtype); })
      ->wait();
  return out;
}

std::shared_ptr<Work> ProcessGroupHierarchical::barrier_async() {
  return impl_->issue(CollectiveDesc{"barrier", "", "[]", ""}, [this] { impl_->barrier(); });
}

}  // namespace minidl::dist
