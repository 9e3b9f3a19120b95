// dist/ddp.cpp — DistributedDataParallel: parameter checks, coalesced broadcasts, buckets, hooks, join.
#include "minidl/dist/ddp.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <unordered_set>

#include "minidl/autograd/trace.h"
#include "minidl/dist/deterministic.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/sync_batchnorm.h"
#include "minidl/nn/batchnorm.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"

namespace minidl::dist {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A uint8 view of a contiguous tensor's bytes (the same storage).
Tensor bytes_of(const Tensor& t) {
  const int64_t size = static_cast<int64_t>(element_size(t.dtype()));
  return Tensor(t.storage(), {t.numel() * size}, {1}, t.offset() * size, DType::UInt8);
}

// Broadcasts `tensors` from root with one collective per device: their bytes packed into one
// flat uint8 tensor, sent, and copied back in place. A non-contiguous tensor goes on its own.
void broadcast_coalesced(ProcessGroup& group, const std::vector<Tensor>& tensors, int root) {
  std::vector<std::pair<Device, std::vector<Tensor>>> by_device;
  for (const Tensor& t : tensors) {
    if (!t.is_contiguous()) {
      Tensor copy = t;
      group.broadcast(copy, root);
      continue;
    }
    auto it = std::find_if(by_device.begin(), by_device.end(), [&](const auto& d) { return d.first == t.device(); });
    if (it == by_device.end()) it = by_device.insert(by_device.end(), {t.device(), {}});
    it->second.push_back(t);
  }
  for (auto& [device, list] : by_device) {
    int64_t total = 0;
    for (const Tensor& t : list) total += t.numel() * static_cast<int64_t>(element_size(t.dtype()));
    Tensor flat({total}, DType::UInt8, device);
    int64_t at = 0;
    for (const Tensor& t : list) {
      const Tensor b = bytes_of(t);
      flat.narrow(0, at, b.numel()).copy_(b);
      at += b.numel();
    }
    group.broadcast(flat, root);
    at = 0;
    for (const Tensor& t : list) {
      Tensor b = bytes_of(t);
      b.copy_(flat.narrow(0, at, b.numel()));
      at += b.numel();
    }
  }
}

std::vector<Tensor> buffers_of(const nn::Module& module) {
  std::vector<Tensor> out;
  for (auto& [name, b] : module.named_buffers()) out.push_back(*b);
  return out;
}
}  // namespace

DistributedDataParallel::DistributedDataParallel(nn::Module& module, const DDPOptions& options)
    : module_(module), options_(options), group_(options.group ? options.group : &default_group()) {
  std::unordered_set<VariableImpl*> seen;
  for (auto& [name, p] : module_.named_parameters()) {
    if (!p.requires_grad() || !seen.insert(p.impl()).second) continue;
    params_.push_back({name, p});
  }
  if (params_.empty())
    throw std::invalid_argument("DistributedDataParallel: the module has no parameter that requires grad");
  // Buffers of layers that communicate in forward (SyncBatchNorm) move identically on every rank;
  // the others (a plain BatchNorm's running statistics) are rank 0's at every training forward.
  std::unordered_set<const Storage*> synced_by_layer;
  for (auto& [name, m] : module_.named_modules()) {
    if (!m->communicates_in_forward()) continue;
    has_collective_modules_ = true;
    for (auto& [bname, b] : m->named_buffers()) synced_by_layer.insert(b->storage().get());
  }
  for (auto& [name, b] : module_.named_buffers())
    if (!synced_by_layer.count(b->storage().get())) synced_buffers_.push_back(*b);
  on_default_group_ = options.group == nullptr;
  check_parameters_match();
  // rank 0's parameters and buffers, once (a coalesced broadcast each)
  if (group_->size() > 1) {
    NoGradGuard no_grad;
    std::vector<Tensor> params;
    for (auto& p : params_) params.push_back(p.var.data());
    broadcast_coalesced(*group_, params, 0);
    broadcast_coalesced(*group_, buffers_of(module_), 0);
  }
  if (options_.deterministic) {
    setup_deterministic();  // no hooks: a shard is captured at the next forward or at finish()
    return;
  }
  build_buckets();
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].hook = params_[i].var.register_post_accumulate_grad_hook([this, i](Tensor&) { mark_ready(i); });
}

DistributedDataParallel::~DistributedDataParallel() {
  if (options_.deterministic) return;
  for (auto& p : params_) p.var.remove_post_accumulate_grad_hook(p.hook);
}

// Every rank must hold the same parameters (names, shapes, dtypes): compare with rank 0's list.
void DistributedDataParallel::check_parameters_match() {
  std::ostringstream os;
  for (const auto& p : params_)
    os << p.name << " " << shape_str(p.var.shape()) << " " << dtype_name(p.var.dtype()) << "\n";
  const std::vector<std::string> all = group_->all_gather_object(os.str());
  auto lines = [](const std::string& s) {
    std::vector<std::string> out;
    std::istringstream is(s);
    for (std::string l; std::getline(is, l);) out.push_back(l);
    return out;
  };
  const auto ref = lines(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    const auto mine = lines(all[r]);
    for (size_t i = 0; i < std::max(ref.size(), mine.size()); ++i) {
      const std::string a = i < ref.size() ? ref[i] : "(nothing)", b = i < mine.size() ? mine[i] : "(nothing)";
      if (a != b)
        throw std::invalid_argument("DistributedDataParallel: rank " + std::to_string(r) +
                                    "'s model differs from rank 0's at parameter #" + std::to_string(i) +
                                    ": rank 0 has '" + a + "', rank " + std::to_string(r) + " has '" + b + "'");
    }
  }
}

// The root's synced buffers to every rank, in place: one collective (per device).
void DistributedDataParallel::broadcast_buffers(int root) {
  if (group_->size() == 1 || synced_buffers_.empty()) return;
  NoGradGuard no_grad;
  broadcast_coalesced(*group_, synced_buffers_, root);
}

// Reverse registration order; a new bucket when the cap is reached or the dtype changes.
void DistributedDataParallel::build_buckets() {
  double cap = options_.first_bucket_cap_mb * 1024 * 1024;
  double bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    Param& p = params_[k];
    const double nbytes = static_cast<double>(p.var.numel() * static_cast<int64_t>(element_size(p.var.dtype())));
    const bool new_bucket = buckets_.empty() || (bytes > 0 && bytes + nbytes > cap) ||
                            buckets_.back().buffer.dtype() != p.var.dtype() ||
                            buckets_.back().buffer.device() != p.var.device();
    if (new_bucket) {
      if (!buckets_.empty()) cap = options_.bucket_cap_mb * 1024 * 1024;
      buckets_.push_back({});
      buckets_.back().buffer = Tensor({0}, p.var.dtype(), p.var.device());
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    p.bucket = buckets_.size() - 1;
    p.offset = b.buffer.numel();
    b.buffer = Tensor({p.offset + p.var.numel()}, p.var.dtype(), p.var.device());  // on the parameters' device
    b.params.push_back(k);
    bytes += nbytes;
  }
  ready_.assign(params_.size(), false);
}

// Deterministic mode: ghost batch norm for every SyncBatchNorm, the layout of a shard's values
// (gradients in parameter order, then each SyncBatchNorm's (mean, var)), identical buffers.
void DistributedDataParallel::setup_deterministic() {
  const Variable& first = params_.front().var;
  for (const Param& p : params_)
    if (p.var.dtype() != first.dtype() || p.var.device() != first.device())
      throw std::invalid_argument(
          "DistributedDataParallel (deterministic): every parameter must have one dtype and "
          "device; '" +
          p.name + "' is " + p.var.data().desc() + ", '" + params_.front().name + "' is " + first.data().desc());
  for (auto& [name, m] : module_.named_modules()) {
    if (auto* sbn = dynamic_cast<SyncBatchNorm*>(m)) {
      sbn->set_deterministic(true);
      ghost_bns_.push_back(sbn);
    } else if (m->communicates_in_forward()) {  // a converted BatchNorm member: not a SyncBatchNorm object
      throw std::invalid_argument("DistributedDataParallel (deterministic): '" + name + "' (" + m->type_name() +
                                  ") is a BatchNorm member of a user module converted by "
                                  "dist::convert_sync_batchnorm, which cannot run as ghost batch norm; hold it in an "
                                  "nn::Sequential / ModuleList (converted into a dist::SyncBatchNorm) or declare the "
                                  "member as dist::SyncBatchNorm");
    } else if (auto* bn = dynamic_cast<nn::BatchNormBase*>(m); bn && bn->running_mean.defined()) {
      throw std::invalid_argument("DistributedDataParallel (deterministic): '" + name + "' (" + m->type_name() +
                                  ") would move its running statistics once per micro-shard, in an order that depends "
                                  "on the number of processes; convert it with dist::convert_sync_batchnorm first "
                                  "(SyncBatchNorm is ghost batch norm in deterministic mode)");
    }
  }
  for (Param& p : params_) {
    p.shard_offset = shard_numel_;
    shard_numel_ += p.var.numel();
  }
  for (SyncBatchNorm* bn : ghost_bns_) {
    ghost_offsets_.push_back(shard_numel_);
    if (bn->running_mean.defined()) shard_numel_ += 2 * bn->options.num_features;
  }
  ready_.assign(params_.size(), false);  // (the buffers are rank 0's since the constructor and move identically)
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_parameter_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : buckets_) {
    out.emplace_back();
    for (size_t i : b.params) out.back().push_back(params_[i].name);
  }
  return out;
}

int DistributedDataParallel::join_handshake(int active) {
  Tensor flag = full({1}, active, DType::Int64);
  group_->all_reduce(flag, ReduceOp::SUM);
  return static_cast<int>(flag.item());
}

Variable DistributedDataParallel::forward(const Variable& x) {
  const auto t0 = Clock::now();
  if (options_.deterministic && module_.is_training() && is_grad_enabled()) {
    if (!require_sync_)
      throw std::logic_error(
          "DistributedDataParallel (deterministic): no_sync() does not apply; every training "
          "forward is one micro-shard, and step() combines them all");
    if (expect_backward_) {
      capture_shard();  // the previous shard's backward is done
    } else if (shard_values_.empty()) {
      for (Param& p : params_) p.var.set_grad(Tensor());  // a step starts from no gradient
    }
    Variable out = module_.forward(x);
    expect_backward_ = true;
    times_.forward = seconds_since(t0);
    forward_end_ = Clock::now();
    return out;
  }
  const bool sync = module_.is_training() && is_grad_enabled() && require_sync_;
  if (sync) {
    if (expect_backward_ && !finalized_) finish();  // names the parameters that got no gradient
    if (join_enabled_ && group_->size() > 1) join_handshake(1);  // only inside a dist::Join scope
    ++synced_steps_;
    const autograd::trace::Span span("DDP broadcast buffers", autograd::trace::kWait);  // tracing
    if (options_.broadcast_buffers) broadcast_buffers(0);
  }
  Variable out = module_.forward(x);
  if (sync) prepare_for_backward(out);
  times_.forward = seconds_since(t0);
  forward_end_ = Clock::now();
  return out;
}

void DistributedDataParallel::prepare_for_backward(const Variable& out) {
  std::fill(ready_.begin(), ready_.end(), false);
  for (auto& b : buckets_) {
    b.pending = static_cast<int>(b.params.size());
    b.work.reset();
  }
  next_bucket_ = 0;
  num_ready_ = 0;
  launched_early_ = 0;
  finalized_ = false;
  expect_backward_ = true;
  if (!options_.find_unused_parameters) return;
  // Parameters this forward did not reach will get no gradient: mark them ready now.
  std::unordered_set<VariableImpl*> reached;
  std::vector<VariableImpl*> stack{out.impl()};
  std::unordered_set<VariableImpl*> seen{out.impl()};
  while (!stack.empty()) {
    VariableImpl* v = stack.back();
    stack.pop_back();
    if (!v->grad_fn) {
      reached.insert(v);
      continue;
    }
    for (const auto& in : v->grad_fn->inputs)
      if (in.impl() && in.impl()->requires_grad && seen.insert(in.impl()).second) stack.push_back(in.impl());
  }
  for (size_t i = 0; i < params_.size(); ++i)
    if (!reached.count(params_[i].var.impl())) mark_ready(i);
}

void DistributedDataParallel::mark_ready(size_t i) {
  if (!expect_backward_ || finalized_ || ready_[i]) return;
  ready_[i] = true;
  ++num_ready_;
  if (--buckets_[params_[i].bucket].pending == 0) launch_ready_buckets();
  if (num_ready_ == params_.size()) finalize();
}

// Launches complete buckets strictly in bucket order: bucket k never starts before bucket k-1.
void DistributedDataParallel::launch_ready_buckets() {
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].pending == 0) {
    Bucket& b = buckets_[next_bucket_++];
    for (size_t i : b.params) {
      const Param& p = params_[i];
      Tensor slot = b.buffer.narrow(0, p.offset, p.var.numel());
      if (p.var.grad().defined()) {
        slot.copy_(p.var.grad().reshape({-1}));
      } else {
        slot.fill_(0.0);  // unused in this forward (find_unused_parameters)
      }
    }
    const autograd::trace::CollectiveLabel label("DDP bucket", static_cast<int64_t>(next_bucket_ - 1));  // tracing
    b.work = group_->all_reduce_async(b.buffer, ReduceOp::SUM);
    if (num_ready_ < params_.size()) ++launched_early_;
  }
}

// All buckets launched: wait, average, write back into .grad.
void DistributedDataParallel::finalize() {
  times_.backward = seconds_since(forward_end_);
  const auto t0 = Clock::now();
  const double inv_world = 1.0 / static_cast<double>(group_->size());
  for (auto& b : buckets_) {
    try {
      const autograd::trace::Span wait("DDP wait", autograd::trace::kWait);  // tracing
      b.work->wait();
    } catch (const std::exception& e) {
      throw_step_failure(e);
    }
    mul_(b.buffer, inv_world);
    for (size_t i : b.params) {
      Param& p = params_[i];
      Tensor avg = b.buffer.narrow(0, p.offset, p.var.numel()).view(p.var.shape());
      if (p.var.grad().defined()) {
        p.var.grad().copy_(avg);
      } else {
        p.var.set_grad(avg.clone());
      }
    }
  }
  times_.comm_wait = seconds_since(t0);
  finalized_ = true;
  expect_backward_ = false;
}

void DistributedDataParallel::throw_missing_gradients(const std::vector<size_t>& missing) {
  std::string names;
  for (size_t i : missing) names += (names.empty() ? "" : ", ") + params_[i].name;
  expect_backward_ = false;
  throw std::logic_error(
      "DistributedDataParallel: parameters that did not receive a gradient in this backward: " + names +
      ". If they are unused on purpose, construct DDP with find_unused_parameters = true; "
      "otherwise make sure backward() ran on the output of forward()");
}

void DistributedDataParallel::throw_step_failure(const std::exception& e) {
  for (auto& b : buckets_) b.work.reset();
  expect_backward_ = false;
  finalized_ = true;
  const std::string step = std::to_string(synced_steps_);
  std::string message =
      "DistributedDataParallel: the gradient all-reduce of training step " + step + " failed: " + e.what();
  // Which ranks are not in this step? Every rank whose step fails says so in the store; a rank
  // that is missing after a short wait stopped training earlier (or died).
  if (!join_enabled_ && on_default_group_) {
    try {
      TCPStore& store = default_store();
      const std::string prefix = "minidl/ddp/failed-step/" + step + "/";
      store.set(prefix + std::to_string(group_->rank()), "1");
      std::vector<int> absent;
      const auto deadline = Clock::now() + std::chrono::seconds(3);
      do {
        absent.clear();
        for (int r = 0; r < group_->size(); ++r)
          if (!store.check({prefix + std::to_string(r)})) absent.push_back(r);
        if (absent.empty()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      } while (Clock::now() < deadline);
      if (!absent.empty()) {
        std::string names;
        for (int r : absent) names += (names.empty() ? "" : ", ") + std::to_string(r);
        message += "; rank" + std::string(absent.size() > 1 ? "s " : " ") + names + " did not reach training step " +
                   step +
                   ": it stopped training earlier than this rank (fewer batches?) or died. Every rank must run the "
                   "same number of steps (DistributedSampler gives each the same number of batches); for uneven "
                   "inputs wrap the training loop in a dist::Join";
      }
    } catch (const std::exception&) {
      // the store is gone too (its host, rank 0, ended): the collective's own error stands
    }
  }
  throw std::runtime_error(message);
}

void DistributedDataParallel::finish() {
  if (options_.deterministic) return finish_deterministic();
  if (!expect_backward_ || finalized_) return;
  if (num_ready_ < params_.size()) {
    std::vector<size_t> missing;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) missing.push_back(i);
    throw_missing_gradients(missing);
  }
  finalize();
}

// The shard whose backward just ran: gradients and ghost statistics into one vector; .grad cleared.
void DistributedDataParallel::capture_shard() {
  expect_backward_ = false;
  std::vector<size_t> missing;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!params_[i].var.grad().defined() && !options_.find_unused_parameters) missing.push_back(i);
  if (!missing.empty()) {
    for (Param& p : params_) p.var.set_grad(Tensor());
    shard_values_.clear();
    throw_missing_gradients(missing);
  }
  const Variable& first = params_.front().var;
  Tensor values({shard_numel_}, first.dtype(), first.device());
  for (Param& p : params_) {
    Tensor slot = values.narrow(0, p.shard_offset, p.var.numel());
    if (p.var.grad().defined()) {
      slot.copy_(p.var.grad().reshape({-1}));
    } else {
      slot.fill_(0.0);  // unused in this shard (find_unused_parameters)
    }
    p.var.set_grad(Tensor());  // the next shard's backward starts from no gradient
  }
  for (size_t b = 0; b < ghost_bns_.size(); ++b) {
    if (!ghost_bns_[b]->running_mean.defined()) continue;
    const Tensor stats = ghost_bns_[b]->take_shard_statistics();
    if (!stats.defined())
      throw std::logic_error(
          "DistributedDataParallel (deterministic): a SyncBatchNorm did not run in this "
          "micro-shard's forward; every shard must use every batch-norm layer");
    values.narrow(0, ghost_offsets_[b], stats.numel()).copy_(stats.to(values.dtype()));
  }
  shard_values_.push_back(std::move(values));
}

// All shards of the step: the fixed tree over every rank's shards, divided by their number,
// into .grad; the ghost statistics' means into the running statistics.
void DistributedDataParallel::finish_deterministic() {
  if (expect_backward_) capture_shard();
  if (shard_values_.empty()) return;
  times_.backward = seconds_since(forward_end_);
  const auto t0 = Clock::now();
  const int64_t shards = static_cast<int64_t>(shard_values_.size()) * group_->size();
  Tensor mean = shard_tree_all_reduce(shard_values_, *group_);
  shard_values_.clear();
  mul_(mean, 1.0 / static_cast<double>(shards));
  for (Param& p : params_) p.var.set_grad(mean.narrow(0, p.shard_offset, p.var.numel()).view(p.var.shape()));
  NoGradGuard no_grad;
  for (size_t b = 0; b < ghost_bns_.size(); ++b) {
    SyncBatchNorm* bn = ghost_bns_[b];
    if (!bn->running_mean.defined()) continue;
    const int64_t C = bn->options.num_features;
    bn->update_running_stats(mean.narrow(0, ghost_offsets_[b], C).to(bn->running_mean.dtype()),
                             mean.narrow(0, ghost_offsets_[b] + C, C).to(bn->running_var.dtype()));
  }
  times_.comm_wait = seconds_since(t0);
}

void DistributedDataParallel::step(optim::Optimizer& optimizer) {
  finish();
  const autograd::trace::Span span("optimizer step", autograd::trace::kOptimizer);  // tracing
  const auto t0 = Clock::now();
  optimizer.step();
  times_.optimizer = seconds_since(t0);
}

void DistributedDataParallel::check_joinable() const {
  if (options_.deterministic)
    throw std::logic_error(
        "DistributedDataParallel::join: not in deterministic mode, where every rank runs its share "
        "of every global batch; give every rank the same number of batches");
  if (has_collective_modules_)
    throw std::logic_error(
        "DistributedDataParallel::join: the model communicates in forward (SyncBatchNorm), which a "
        "joined rank cannot shadow; give every rank the same number of batches instead");
}

void DistributedDataParallel::join() {
  check_joinable();
  if (!join_enabled_)
    throw std::logic_error(
        "DistributedDataParallel::join: the ranks still training answer the join handshake only inside "
        "a dist::Join scope; put one around the training loop (its end calls join())");
  if (group_->size() == 1) return;
  NoGradGuard no_grad;
  while (join_handshake(0) > 0) {
    // shadow one training step of the ranks still active: buffers, then every bucket in order
    if (options_.broadcast_buffers) broadcast_buffers(0);
    for (auto& b : buckets_) {
      b.buffer.fill_(0.0);
      group_->all_reduce(b.buffer, ReduceOp::SUM);
    }
  }
  // Joined ranks skipped the last optimizer steps: take the model of the rank that trained
  // longest (the highest rank among them), as PyTorch's Join does.
  const int64_t world = group_->size();
  Tensor who = full({1}, static_cast<double>(synced_steps_ * world + group_->rank()), DType::Int64);
  group_->all_reduce(who, ReduceOp::MAX);
  const int authoritative = static_cast<int>(static_cast<int64_t>(who.item()) % world);
  std::vector<Tensor> params;
  for (auto& p : params_) params.push_back(p.var.data());
  broadcast_coalesced(*group_, params, authoritative);
  broadcast_coalesced(*group_, buffers_of(module_), authoritative);
}

}  // namespace minidl::dist
