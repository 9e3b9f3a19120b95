// dist/zero_redundancy_optimizer.cpp — ZeroRedundancyOptimizer: the flat order cut into equal
// slabs, the parameters bound to their buckets' buffers, the step over this rank's pieces with one
// all-gather per bucket, and the state_dict joined from every rank's pieces.
#include "minidl/dist/zero_redundancy_optimizer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/optim/clip_grad.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/serialize.h"

namespace minidl::dist {

namespace {

std::vector<optim::ParamGroupSpec> as_specs(const std::vector<optim::ParamGroup>& groups) {
  std::vector<optim::ParamGroupSpec> specs;
  for (const optim::ParamGroup& g : groups)
    specs.push_back({.params = g.params, .lr = g.lr, .weight_decay = g.weight_decay});
  return specs;
}

// "param group 0, parameter 3 (float32[4, 4])": no device, which differs from rank to rank on GPUs
std::string param_desc(size_t g, size_t j, const Variable& p) {
  return "param group " + std::to_string(g) + ", parameter " + std::to_string(j) + " (" + dtype_name(p.data().dtype()) +
         shape_str(p.data().shape()) + ")";
}

std::unique_ptr<optim::Optimizer> make_checked(const OptimizerFactory& make_optimizer,
                                               std::vector<optim::ParamGroupSpec> groups) {
  if (!make_optimizer) throw std::invalid_argument("ZeroRedundancyOptimizer: no optimizer factory");
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(std::move(groups));
  if (!opt) throw std::invalid_argument("ZeroRedundancyOptimizer: the optimizer factory returned nullptr");
  return opt;
}

}  // namespace

struct ZeroRedundancyOptimizer::Reference {
  std::string name;
  std::vector<optim::ParamGroupSpec> groups;
  bool has_momentum = false;
};

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Variable> params, OptimizerFactory make_optimizer,
                                                 ZeroRedundancyOptimizerOptions options)
    : ZeroRedundancyOptimizer(optim::single_group(std::move(params)), std::move(make_optimizer), options) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<optim::ParamGroupSpec> groups,
                                                 OptimizerFactory make_optimizer,
                                                 ZeroRedundancyOptimizerOptions options)
    : ZeroRedundancyOptimizer(
          [&] {
            // the wrapped optimizer over every parameter resolves the options and checks them
            std::unique_ptr<optim::Optimizer> ref = make_checked(make_optimizer, std::move(groups));
            return Reference{"ZeroRedundancyOptimizer(" + ref->name() + ")", as_specs(ref->param_groups()),
                             ref->has_momentum()};
          }(),
          make_optimizer, options) {}  // a copy: the order in which arguments are evaluated is unspecified

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(Reference reference, OptimizerFactory make_optimizer,
                                                 ZeroRedundancyOptimizerOptions options)
    : Optimizer(std::move(reference.name), std::move(reference.groups), 0.0, 0.0),
      make_optimizer_(std::move(make_optimizer)),
      options_(options),
      has_momentum_(reference.has_momentum) {
  for (size_t g = 0; g < groups_.size(); ++g)
    for (const Variable& p : groups_[g].params) {
      params_.push_back(p);
      group_of_.push_back(g);
    }
  check_same_parameters_on_every_rank();
  if (options_.module) check_parameters_in_module(*options_.module);
  cut(options_.ddp ? buckets_of_ddp(*options_.ddp) : buckets_in_order());
  std::vector<GatherBucket> gather_buckets;
  for (const Bucket& b : buckets_) {
    gather_buckets.push_back({.buffer = b.buffer, .params = {}});
    for (const auto& [i, offset] : b.params) gather_buckets.back().params.push_back(param(i));
  }
  nn::Module* model = options_.module ? options_.module : options_.ddp ? &options_.ddp->module() : nullptr;
  gather_ = make_parameter_gatherer(options_.gather, group(), std::move(gather_buckets), model, name_);
  if (options_.ddp) options_.ddp->shard_gradients();
  if (!local_pieces_.empty()) local_ = make_checked(make_optimizer_, group_specs(/*pieces=*/true));
}

ProcessGroup& ZeroRedundancyOptimizer::group() const { return options_.group ? *options_.group : default_group(); }

void ZeroRedundancyOptimizer::check_same_parameters_on_every_rank() const {
  // one line per parameter: "param group g, parameter j (float32[3, 4])"
  std::string mine;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t j = 0; j < groups_[g].params.size(); ++j) mine += param_desc(g, j, groups_[g].params[j]) + "\n";
  mine += std::to_string(groups_.size()) + " param groups\n";
  const std::vector<std::string> all = group().all_gather_object(mine);
  auto lines = [](const std::string& s) {
    std::vector<std::string> out;
    for (size_t b = 0, e; b < s.size(); b = e + 1) out.push_back(s.substr(b, (e = s.find('\n', b)) - b));
    return out;
  };
  const std::vector<std::string> first = lines(all[0]);
  for (size_t r = 1; r < all.size(); ++r) {
    const std::vector<std::string> other = lines(all[r]);
    for (size_t k = 0; k < std::max(first.size(), other.size()); ++k) {
      const std::string a = k < first.size() ? first[k] : "nothing", b = k < other.size() ? other[k] : "nothing";
      if (a != b)
        throw std::invalid_argument(name_ + ": the ranks pass different parameters: rank 0 has " + a + ", rank " +
                                    std::to_string(r) + " has " + b);
    }
  }
}

void ZeroRedundancyOptimizer::check_parameters_in_module(const nn::Module& module) const {
  std::unordered_set<const VariableImpl*> in_module;
  for (const Variable& p : module.parameters()) in_module.insert(p.impl());
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t j = 0; j < groups_[g].params.size(); ++j)
      if (!in_module.count(groups_[g].params[j].impl()))
        throw std::invalid_argument(name_ + ": " + param_desc(g, j, groups_[g].params[j]) +
                                    " is not a parameter of the module (its gradient would not be averaged)");
}

std::vector<ZeroRedundancyOptimizer::Bucket> ZeroRedundancyOptimizer::buckets_of_ddp(
    const DistributedDataParallel& ddp) const {
  std::unordered_map<const VariableImpl*, int64_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index.emplace(params_[i].impl(), static_cast<int64_t>(i));
  std::vector<Bucket> buckets;
  size_t reduced = 0;
  for (const DistributedDataParallel::BucketLayout& b : ddp.bucket_layout()) {
    buckets.push_back({.numel = b.numel, .params = {}, .buffer = Tensor()});
    for (const auto& [p, offset] : b.params) {
      const auto it = index.find(p.impl());
      if (it == index.end())
        throw std::invalid_argument(name_ + ": DDP reduces a parameter (" + dtype_name(p.dtype()) +
                                    shape_str(p.data().shape()) +
                                    ") that this optimizer does not hold; its sharded gradient would not be whole "
                                    "on any rank: give the optimizer every parameter of the DDP module");
      buckets.back().params.emplace_back(it->second, offset);
      ++reduced;
    }
  }
  if (reduced != params_.size()) {
    std::unordered_set<const VariableImpl*> in_ddp;
    for (const auto& b : buckets)
      for (const auto& [i, offset] : b.params) in_ddp.insert(param(i).impl());
    for (size_t g = 0, i = 0; g < groups_.size(); ++g)
      for (size_t j = 0; j < groups_[g].params.size(); ++j, ++i)
        if (!in_ddp.count(params_[i].impl()))
          throw std::invalid_argument(name_ + ": " + param_desc(g, j, params_[i]) +
                                      " is not a parameter that the DDP reduces");
  }
  return buckets;
}

std::vector<ZeroRedundancyOptimizer::Bucket> ZeroRedundancyOptimizer::buckets_in_order() const {
  std::vector<Bucket> buckets;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].data();
    if (buckets.empty() || p.dtype() != param(buckets.back().params.front().first).dtype() ||
        p.device() != param(buckets.back().params.front().first).device())
      buckets.push_back({});
    buckets.back().params.emplace_back(static_cast<int64_t>(i), buckets.back().numel);
    buckets.back().numel += p.numel();
  }
  const int64_t world = group().size();
  for (Bucket& b : buckets) b.numel = (b.numel + world - 1) / world * world;
  return buckets;
}

// Slab r of a bucket of size * n elements is [r * n, (r + 1) * n); a parameter without elements
// goes to rank 0, so that it is stepped (and has state) as in the unsharded optimizer.
void ZeroRedundancyOptimizer::cut(std::vector<Bucket> buckets) {
  const int world = group().size(), rank = group().rank();
  buckets_ = std::move(buckets);
  for (Bucket& b : buckets_) {
    const Tensor& first = param(b.params.front().first).data();
    b.buffer = group().empty_symmetric({b.numel}, first.dtype(), first.device());
  }
  bind_parameters();
  for (size_t g = 0; g < groups_.size(); ++g)
    for (const Bucket& b : buckets_) {
      const int64_t n = b.numel / world;
      for (const auto& [i, offset] : b.params) {
        if (group_of_[static_cast<size_t>(i)] != g) continue;
        const int64_t numel = param(i).data().numel();
        const int64_t lo = std::max(offset, rank * n), hi = std::min(offset + numel, (rank + 1) * n);
        if (lo < hi || (numel == 0 && rank == 0)) {
          local_pieces_.push_back({i, lo - offset, std::max<int64_t>(hi - lo, 0)});
          local_vars_.emplace_back(b.buffer.narrow(0, std::min(lo, b.numel), local_pieces_.back().numel),
                                   /*requires_grad=*/true);
        }
      }
    }
}

void ZeroRedundancyOptimizer::bind_parameters() {
  for (Bucket& b : buckets_)
    for (const auto& [i, offset] : b.params) {
      Variable& p = param(i);
      Tensor slot = b.buffer.narrow(0, offset, p.data().numel()).view(p.data().shape());
      if (p.data().is_same(slot)) continue;
      slot.copy_(p.data());
      p.set_data(slot);
    }
}

std::vector<optim::ParamGroupSpec> ZeroRedundancyOptimizer::group_specs(bool pieces) const {
  std::vector<optim::ParamGroupSpec> specs = as_specs(groups_);
  if (!pieces) return specs;
  for (optim::ParamGroupSpec& s : specs) s.params.clear();
  for (size_t j = 0; j < local_pieces_.size(); ++j)
    specs[group_of_[static_cast<size_t>(local_pieces_[j].param)]].params.push_back(local_vars_[j]);
  return specs;
}

void ZeroRedundancyOptimizer::copy_group_options_to(optim::Optimizer& to) const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    optim::ParamGroup& dst = to.param_groups()[g];
    dst.lr = groups_[g].lr;
    dst.weight_decay = groups_[g].weight_decay;
    dst.initial_lr = groups_[g].initial_lr;
    dst.momentum = groups_[g].momentum;
  }
}

void ZeroRedundancyOptimizer::wait_for_parameters() { gather_->wait(); }

void ZeroRedundancyOptimizer::step() {
  wait_for_parameters();
  consolidated_.reset();
  bind_parameters();
  if (local_) {
    // Each piece's gradient: a view of its parameter's (a frozen parameter, or one without a
    // gradient, is skipped as unsharded); its data is a view of the bucket's buffer already.
    for (size_t j = 0; j < local_pieces_.size(); ++j) {
      const Piece& s = local_pieces_[j];
      const Variable& p = param(s.param);
      const Tensor& g = p.grad();
      local_vars_[j].set_grad(
          p.requires_grad() && g.defined()
              ? (g.is_contiguous() ? g : g.contiguous()).view({g.numel()}).narrow(0, s.offset, s.numel)
              : Tensor());
    }
    copy_group_options_to(*local_);
    local_->step();
    local_->zero_grad();  // drops the views of the gradients
  }
  gather_->start();  // every rank's slab of every bucket, into every rank's buffer: the parameters are views of it
}

double ZeroRedundancyOptimizer::clip_grad_norm(double max_norm, double norm_type) {
  wait_for_parameters();
  if (!options_.ddp) return optim::clip_grad_norm(params_, max_norm, norm_type);
  if (options_.ddp->join_enabled())  // a joined rank would answer the norm's all-reduce with its step's collectives
    throw std::logic_error(name_ + ".clip_grad_norm inside a dist::Join scope: a joined rank cannot shadow the "
                                   "norm's all-reduce; clip outside Join, or give every rank the same number of batches");
  std::vector<Tensor> slabs;  // this rank's pieces of the averaged gradients, views
  for (const Piece& s : local_pieces_) {
    const Variable& p = param(s.param);
    const Tensor& g = p.grad();
    if (!p.requires_grad() || !g.defined()) continue;
    if (!g.is_contiguous())  // DDP's gradients are views of its buckets: contiguous
      throw std::logic_error(name_ + ".clip_grad_norm: the gradient of parameter " + std::to_string(s.param) +
                             " is not contiguous (not DDP's bucket view); it cannot be scaled in place");
    slabs.push_back(g.view({g.numel()}).narrow(0, s.offset, s.numel));
  }
  const ReduceOp op = std::isinf(norm_type) ? ReduceOp::MAX : ReduceOp::SUM;
  return optim::clip_grad_norm(std::move(slabs), max_norm, norm_type, [&](double local) {
    Tensor t = full({1}, local, DType::Float64);
    group().all_reduce(t, op);
    return t.item();
  });
}

void ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  wait_for_parameters();
  const int world = group().size();
  if (to < 0 || to >= world)
    throw std::invalid_argument(name_ + ".consolidate_state_dict: rank " + std::to_string(to) + " out of range for " +
                                std::to_string(world) + " ranks");
  // this rank's state as "<global index>.<offset>.<name>", on the host
  TensorMap shard;
  for (size_t j = 0; j < local_pieces_.size(); ++j)
    for (const auto& [name, t] : local_->state(static_cast<int64_t>(j)))
      shard[std::to_string(local_pieces_[j].param) + "." + std::to_string(local_pieces_[j].offset) + "." + name] =
          t.cpu();
  const std::vector<std::string> all = group().all_gather_object(serialize(shard));
  consolidated_.reset();
  if (group().rank() != to) return;
  // "step" (0-d) is the parameter's, equal in every piece; any other state has the piece's
  // elements of a tensor of the parameter's shape.
  TensorMap full;
  for (const std::string& bytes : all)
    for (const auto& [key, t] : deserialize(bytes, "rank's optimizer shard").tensors) {
      const size_t dot1 = key.find('.'), dot2 = key.find('.', dot1 + 1);
      const int64_t i = std::stoll(key.substr(0, dot1)), offset = std::stoll(key.substr(dot1 + 1, dot2 - dot1 - 1));
      const std::string name = "state." + std::to_string(i) + "." + key.substr(dot2 + 1);
      if (t.dim() == 0) {
        full.emplace(name, t);
        continue;
      }
      auto it = full.find(name);
      if (it == full.end()) it = full.emplace(name, zeros(param(i).data().shape(), t.dtype())).first;
      it->second.view({it->second.numel()}).narrow(0, offset, t.numel()).copy_(t);
    }
  consolidated_ = std::move(full);
}

TensorMap ZeroRedundancyOptimizer::state_dict() const {
  gather_->wait();
  if (!consolidated_)
    throw std::logic_error(name_ + ".state_dict: no consolidated state on rank " + std::to_string(group().rank()) +
                           ": call consolidate_state_dict(to) on every rank after the last step, then state_dict() "
                           "on rank `to`");
  TensorMap out = *consolidated_;
  for (auto& [key, t] : Optimizer::state_dict()) out[key] = t;  // the group options as they are now
  return out;
}

void ZeroRedundancyOptimizer::load_state_dict(const TensorMap& dict) {
  wait_for_parameters();
  // Checked in full on every rank, so that every rank accepts or refuses it alike.
  std::unique_ptr<optim::Optimizer> all = make_checked(make_optimizer_, group_specs(/*pieces=*/false));
  all->load_state_dict(dict);
  for (size_t g = 0; g < groups_.size(); ++g) {
    const optim::ParamGroup& src = all->param_groups()[g];
    groups_[g].lr = src.lr;
    groups_[g].weight_decay = src.weight_decay;
    groups_[g].initial_lr = src.initial_lr;
    groups_[g].momentum = src.momentum;
  }
  if (local_) {
    TensorMap shard = Optimizer::state_dict();  // the group options alone: this class keeps no state_
    for (size_t g = 0; g < groups_.size(); ++g)
      shard["param_groups." + std::to_string(g) + ".num_params"] =
          scalar_tensor(static_cast<double>(local_->param_groups()[g].params.size()), DType::Float64);
    for (size_t j = 0; j < local_pieces_.size(); ++j) {
      const Piece& s = local_pieces_[j];
      for (const auto& [name, t] : all->state(s.param))  // a copy of the piece: `all` goes away
        shard["state." + std::to_string(j) + "." + name] =
            t.dim() == 0 ? t : t.contiguous().view({t.numel()}).narrow(0, s.offset, s.numel).clone();
    }
    local_->load_state_dict(shard);
  }
  consolidated_.reset();
}

}  // namespace minidl::dist
