// dist/data_parallel.cpp — what DistributedDataParallel and DeterministicDDP share: the parameter
// check across ranks, the coalesced broadcast of rank 0's state, the timed step.
#include "minidl/dist/data_parallel.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <unordered_set>

#include "minidl/autograd/trace.h"
#include "minidl/dist/distributed.h"

namespace minidl::dist {

namespace {

// A uint8 view of a contiguous tensor's bytes (the same storage).
Tensor bytes_of(const Tensor& t) {
  const int64_t size = static_cast<int64_t>(element_size(t.dtype()));
  return Tensor(t.storage(), {t.numel() * size}, {1}, t.offset() * size, DType::UInt8);
}

}  // namespace

void broadcast_coalesced(ProcessGroup& group, const std::vector<Tensor>& tensors, int root) {
  std::vector<std::pair<Device, std::vector<Tensor>>> by_device;
  for (const Tensor& t : tensors) {
    if (!t.is_contiguous()) {
      Tensor same = t;  // the same storage: broadcast() takes a non-const handle
      group.broadcast(same, root);
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

DataParallel::DataParallel(nn::Module& module, ProcessGroup* group, const std::string& who)
    : module_(module), group_(group ? group : &default_group()), who_(who) {
  std::unordered_set<VariableImpl*> seen;
  for (auto& [name, p] : module_.named_parameters()) {
    if (!p.requires_grad() || !seen.insert(p.impl()).second) continue;
    params_.push_back({name, p});
  }
  if (params_.empty()) throw std::invalid_argument(who_ + ": the module has no parameter that requires grad");
  check_parameters_match();
  broadcast_state(0);
}

void DataParallel::broadcast_state(int root) {
  if (group_->size() == 1) return;
  NoGradGuard no_grad;
  std::vector<Tensor> params, buffers;
  for (auto& p : params_) params.push_back(p.var.data());
  for (auto& [name, b] : module_.named_buffers()) buffers.push_back(*b);
  broadcast_coalesced(*group_, params, root);
  broadcast_coalesced(*group_, buffers, root);
}

// Every rank must hold the same parameters (names, shapes, dtypes): compare with rank 0's list.
void DataParallel::check_parameters_match() {
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
        throw std::invalid_argument(who_ + ": rank " + std::to_string(r) + "'s model differs from rank 0's at parameter #" +
                                    std::to_string(i) + ": rank 0 has '" + a + "', rank " + std::to_string(r) +
                                    " has '" + b + "'");
    }
  }
}

void DataParallel::throw_missing_gradients(const std::vector<size_t>& missing) const {
  std::string names;
  for (size_t i : missing) names += (names.empty() ? "" : ", ") + params_[i].name;
  throw std::logic_error(who_ + ": parameters that did not receive a gradient in this backward: " + names +
                         ". If they are unused on purpose, construct it with find_unused_parameters = true; "
                         "otherwise make sure backward() ran on the output of forward()");
}

void DataParallel::step(optim::Optimizer& optimizer) {
  finish();
  const autograd::trace::Span span("optimizer step", autograd::trace::kOptimizer);  // tracing
  const auto t0 = Clock::now();
  optimizer.step();
  times_.optimizer = seconds_since(t0);
}

}  // namespace minidl::dist
