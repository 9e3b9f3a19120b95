// dist/zero_redundancy_optimizer.cpp — ZeroRedundancyOptimizer: the greedy partition of the
// parameters, the sharded step with one broadcast per owner, and the consolidated state_dict.
#include "minidl/dist/zero_redundancy_optimizer.h"

#include <algorithm>
#include <stdexcept>
#include <unordered_set>

#include "minidl/dist/data_parallel.h"
#include "minidl/dist/distributed.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/serialize.h"

namespace minidl::dist {

namespace {

std::vector<optim::ParamGroupSpec> as_specs(const std::vector<optim::ParamGroup>& groups) {
  std::vector<optim::ParamGroupSpec> specs;
  for (const optim::ParamGroup& g : groups) specs.push_back({.params = g.params, .lr = g.lr, .weight_decay = g.weight_decay});
  return specs;
}

// "param group 0, parameter 3 (float32[4, 4])": no device, which differs from rank to rank on GPUs
std::string param_desc(size_t g, size_t j, const Variable& p) {
  return "param group " + std::to_string(g) + ", parameter " + std::to_string(j) + " (" +
         dtype_name(p.data().dtype()) + shape_str(p.data().shape()) + ")";
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
  check_same_parameters_on_every_rank();
  if (options_.module) check_parameters_in_module(*options_.module);
  partition();
  if (!local_params_.empty()) local_ = make_checked(make_optimizer_, group_specs(group().rank()));
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

void ZeroRedundancyOptimizer::partition() {
  const int world = group().size(), rank = group().rank();
  std::vector<int64_t> share(static_cast<size_t>(world), 0);  // elements so far, per rank
  int64_t first = 0;  // global index of the group's first parameter
  for (const optim::ParamGroup& g : groups_) {
    std::vector<int64_t> order(g.params.size());
    for (size_t j = 0; j < order.size(); ++j) order[j] = static_cast<int64_t>(j);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return g.params[a].data().numel() > g.params[b].data().numel(); });
    owner_.resize(owner_.size() + g.params.size());
    for (int64_t j : order) {
      const int r = static_cast<int>(std::min_element(share.begin(), share.end()) - share.begin());
      share[static_cast<size_t>(r)] += g.params[j].data().numel();
      owner_[static_cast<size_t>(first + j)] = r;
    }
    first += static_cast<int64_t>(g.params.size());
  }
  for (size_t i = 0; i < owner_.size(); ++i)
    if (owner_[i] == rank) local_params_.push_back(static_cast<int64_t>(i));
}

std::vector<optim::ParamGroupSpec> ZeroRedundancyOptimizer::group_specs(std::optional<int> rank) const {
  std::vector<optim::ParamGroupSpec> specs = as_specs(groups_);
  if (!rank) return specs;
  size_t i = 0;
  for (optim::ParamGroupSpec& s : specs) {
    std::vector<Variable> mine;
    for (Variable& p : s.params)
      if (owner_[i++] == *rank) mine.push_back(std::move(p));
    s.params = std::move(mine);
  }
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

void ZeroRedundancyOptimizer::step() {
  consolidated_.reset();
  if (local_) {
    copy_group_options_to(*local_);
    local_->step();
  }
  std::vector<std::vector<Tensor>> owned(static_cast<size_t>(group().size()));
  size_t i = 0;
  for (const optim::ParamGroup& g : groups_)
    for (const Variable& p : g.params) owned[static_cast<size_t>(owner_[i++])].push_back(p.data());
  for (size_t r = 0; r < owned.size(); ++r)
    if (!owned[r].empty()) broadcast_coalesced(group(), owned[r], static_cast<int>(r));
}

void ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  const int world = group().size();
  if (to < 0 || to >= world)
    throw std::invalid_argument(name_ + ".consolidate_state_dict: rank " + std::to_string(to) +
                                " out of range for " + std::to_string(world) + " ranks");
  // this rank's state under the global indices, on the host
  TensorMap shard;
  for (size_t j = 0; j < local_params_.size(); ++j)
    for (const auto& [name, t] : local_->state(static_cast<int64_t>(j)))
      shard["state." + std::to_string(local_params_[j]) + "." + name] = t.cpu();
  const std::vector<std::string> all = group().all_gather_object(serialize(shard));
  consolidated_.reset();
  if (group().rank() != to) return;
  TensorMap full;
  for (const std::string& bytes : all) full.merge(deserialize(bytes, "rank's optimizer shard").tensors);
  consolidated_ = std::move(full);
}

TensorMap ZeroRedundancyOptimizer::state_dict() const {
  if (!consolidated_)
    throw std::logic_error(name_ + ".state_dict: no consolidated state on rank " + std::to_string(group().rank()) +
                           ": call consolidate_state_dict(to) on every rank after the last step, then state_dict() "
                           "on rank `to`");
  TensorMap out = *consolidated_;
  for (auto& [key, t] : Optimizer::state_dict()) out[key] = t;  // the group options as they are now
  return out;
}

void ZeroRedundancyOptimizer::load_state_dict(const TensorMap& dict) {
  // Checked in full on every rank, so that every rank accepts or refuses it alike.
  std::unique_ptr<optim::Optimizer> all = make_checked(make_optimizer_, group_specs(std::nullopt));
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
    for (size_t j = 0; j < local_params_.size(); ++j)
      for (const auto& [name, t] : all->state(local_params_[j])) shard["state." + std::to_string(j) + "." + name] = t;
    local_->load_state_dict(shard);
  }
  consolidated_.reset();
}

}  // namespace minidl::dist
