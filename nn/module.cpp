// nn/module.cpp — Module registration, traversal, train/eval, state_dict, the printed tree and the
// forward pre-hooks.
#include "minidl/nn/module.h"

#include <algorithm>
#include <ostream>
#include <set>
#include <sstream>
#include <stdexcept>

#include <cxxabi.h>

#include <cstdlib>
#include <typeinfo>

#include "minidl/kernels/cuda_api.h"

namespace minidl::nn {

std::string Module::type_name() const {
  // the demangled dynamic type, e.g. "(anonymous namespace)::Net" or "app::Net<float>"; keep the
  // last name outside template arguments: "Net", "Net<float>"
  int status = 0;
  char* raw = abi::__cxa_demangle(typeid(*this).name(), nullptr, nullptr, &status);
  std::string full = status == 0 && raw ? raw : typeid(*this).name();
  std::free(raw);
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i + 1 < full.size(); ++i) {
    if (full[i] == '<' || full[i] == '(') ++depth;
    if (full[i] == '>' || full[i] == ')') --depth;
    if (depth == 0 && full[i] == ':' && full[i + 1] == ':') start = i + 2;
  }
  return full.substr(start);
}

Variable Module::forward(const Variable&) { throw std::logic_error(type_name() + " has no single-input forward(x)"); }

struct RemovableHandle::Hooks {
  uint64_t next_id = 1;
  std::vector<std::pair<uint64_t, Module::ForwardPreHook>> list;  // in registration order
};

RemovableHandle& RemovableHandle::operator=(RemovableHandle&& o) noexcept {
  if (this != &o) {
    remove();
    hooks_ = std::move(o.hooks_);
    id_ = o.id_;
    o.hooks_.reset();
  }
  return *this;
}

void RemovableHandle::remove() {
  if (const std::shared_ptr<Hooks> hooks = hooks_.lock())
    std::erase_if(hooks->list, [this](const auto& h) { return h.first == id_; });
  hooks_.reset();
}

RemovableHandle Module::register_forward_pre_hook(ForwardPreHook hook) {
  if (!hook) throw std::invalid_argument(type_name() + ".register_forward_pre_hook: an empty hook");
  if (!pre_hooks_) pre_hooks_ = std::make_shared<RemovableHandle::Hooks>();
  const uint64_t id = pre_hooks_->next_id++;
  pre_hooks_->list.emplace_back(id, std::move(hook));
  return RemovableHandle(pre_hooks_, id);
}

bool Module::has_forward_pre_hooks() const { return pre_hooks_ && !pre_hooks_->list.empty(); }

void Module::run_forward_pre_hooks(const Variable& input) {
  if (!has_forward_pre_hooks()) return;
  // a copy: what a hook registers or removes takes effect from the next call on
  const std::vector<std::pair<uint64_t, ForwardPreHook>> hooks = pre_hooks_->list;
  for (const auto& [id, hook] : hooks) hook(*this, input);
}

void Module::check_new_name(const std::string& name, const char* what) const {
  if (name.empty() || name.find('.') != std::string::npos)
    throw std::invalid_argument(std::string(what) + " name '" + name + "' must be non-empty and contain no '.'");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e.first == name; });
  };
  if (taken(params_) || taken(buffers_) || taken(children_))
    throw std::invalid_argument(type_name() + ": '" + name + "' is already registered");
}

Variable& Module::register_parameter(const std::string& name, Variable& param) {
  check_new_name(name, "parameter");
  if (param.defined() && !param.is_leaf())
    throw std::invalid_argument(type_name() + ": parameter '" + name + "' must be a leaf Variable");
  params_.emplace_back(name, &param);
  return param;
}

Tensor& Module::register_buffer(const std::string& name, Tensor& buffer) {
  check_new_name(name, "buffer");
  buffers_.emplace_back(name, &buffer);
  return buffer;
}

void Module::add_child(const std::string& name, Module* child) {
  check_new_name(name, "module");
  children_.emplace_back(name, child);
}

Module& Module::register_owned_module(const std::string& name, std::unique_ptr<Module> child) {
  Module& ref = *child;
  add_child(name, child.get());
  owned_.push_back(std::move(child));
  return ref;
}

bool Module::owns_child(const std::string& name) const {
  for (const auto& [n, m] : children_)
    if (n == name) return std::any_of(owned_.begin(), owned_.end(), [m = m](const auto& o) { return o.get() == m; });
  return false;
}

void Module::replace_module(const std::string& name, std::unique_ptr<Module> replacement) {
  for (auto& [n, m] : children_) {
    if (n != name) continue;
    auto it = std::find_if(owned_.begin(), owned_.end(), [m = m](const auto& o) { return o.get() == m; });
    if (it == owned_.end())
      throw std::logic_error(type_name() + ": child '" + name + "' is a member, not an owned child, and cannot be " +
                             "replaced; hold it in a container such as nn::Sequential");
    m = replacement.get();
    *it = std::move(replacement);
    child_replaced(name);
    return;
  }
  throw std::invalid_argument(type_name() + ": no child named '" + name + "'");
}

std::vector<std::pair<std::string, Variable>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Variable>> out;
  for (const auto& [n, p] : params_)
    if (p->defined()) out.emplace_back(n, *p);
  if (recurse)
    for (const auto& [cn, c] : children_)
      for (auto& [n, p] : c->named_parameters(true)) out.emplace_back(cn + "." + n, p);
  return out;
}

std::vector<Variable> Module::parameters(bool recurse) const {
  std::vector<Variable> out;
  for (auto& [n, p] : named_parameters(recurse)) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (const auto& [n, b] : buffers_)
    if (b->defined()) out.emplace_back(n, b);
  if (recurse)
    for (const auto& [cn, c] : children_)
      for (auto& [n, b] : c->named_buffers(true)) out.emplace_back(cn + "." + n, b);
  return out;
}

std::vector<Module*> Module::children() const {
  std::vector<Module*> out;
  for (const auto& [n, c] : children_) out.push_back(c);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, Module*>> out{{prefix, this}};
  for (const auto& [cn, c] : children_)
    for (auto& e : c->named_modules(prefix.empty() ? cn : prefix + "." + cn)) out.push_back(e);
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& [name, p] : named_parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::zero_grad(bool set_to_none) {
  for (auto& [n, p] : named_parameters()) p.zero_grad(set_to_none);
}

void Module::to(Device device) {
  if (device.is_cuda()) {
    const std::string op = type_name() + ".to(" + device.str() + ")";
    kernels::cuda::require_device(device.index, op.c_str());
  }
  NoGradGuard no_grad;
  for (auto& [n, p] : named_parameters()) {
    p.set_data(p.data().to(device));
    if (p.grad().defined()) p.set_grad(p.grad().to(device));
  }
  for (auto& [n, b] : named_buffers()) *b = b->to(device);
}

Device Module::device() const {
  const auto params = named_parameters();
  if (!params.empty()) return params.front().second.device();
  const auto buffers = named_buffers();
  if (!buffers.empty()) return buffers.front().second->device();
  return Device::cpu();
}

TensorMap Module::state_dict() const {
  TensorMap out;
  for (const auto& [n, p] : named_parameters()) out[n] = p.data();
  for (const auto& [n, b] : named_buffers()) out[n] = *b;
  return out;
}

Module::LoadResult Module::load_state_dict(const TensorMap& state, bool strict) {
  LoadResult r;
  std::set<std::string> used;
  auto load_one = [&](const std::string& name, Tensor& dst) {
    auto it = state.find(name);
    if (it == state.end()) {
      r.missing_keys.push_back(name);
      return;
    }
    used.insert(name);
    const Tensor& src = it->second;
    if (src.shape() != dst.shape())
      throw std::invalid_argument("load_state_dict: size mismatch for " + name + ": copying a param with shape " +
                                  shape_str(src.shape()) + ", the shape in the current model is " +
                                  shape_str(dst.shape()));
    if (is_floating(src.dtype()) != is_floating(dst.dtype()))
      throw std::invalid_argument("load_state_dict: dtype mismatch for " + name + ": " + dtype_name(src.dtype()) +
                                  " into " + dtype_name(dst.dtype()));
    dst.copy_(src);
  };
  NoGradGuard no_grad;
  for (auto& [n, p] : named_parameters()) load_one(n, p.data());
  for (auto& [n, b] : named_buffers()) load_one(n, *b);
  for (const auto& [k, v] : state)
    if (!used.count(k)) r.unexpected_keys.push_back(k);
  if (strict && (!r.missing_keys.empty() || !r.unexpected_keys.empty())) {
    std::ostringstream os;
    os << "Error(s) in loading state_dict for " << type_name() << ":";
    auto list = [&](const char* what, const std::vector<std::string>& keys) {
      if (keys.empty()) return;
      // A forged file can hold any number of keys: name the first few, count the rest.
      constexpr size_t kShown = 10;
      os << " " << what << " key(s) in state_dict:";
      for (size_t i = 0; i < std::min(keys.size(), kShown); ++i) os << (i ? ", " : " ") << '"' << keys[i] << '"';
      if (keys.size() > kShown) os << " and " << keys.size() - kShown << " more (" << keys.size() << " in all)";
      os << ".";
    };
    list("Missing", r.missing_keys);
    list("Unexpected", r.unexpected_keys);
    throw std::invalid_argument(os.str());
  }
  return r;
}

std::string Module::repr(int indent) const {
  std::ostringstream os;
  os << type_name() << "(";
  if (children_.empty()) {
    os << extra_repr() << ")";
    return os.str();
  }
  const std::string pad(indent + 2, ' ');
  const std::string extra = extra_repr();
  if (!extra.empty()) os << "\n" << pad << extra;
  for (const auto& [n, c] : children_) os << "\n" << pad << "(" << n << "): " << c->repr(indent + 2);
  os << "\n" << std::string(indent, ' ') << ")";
  return os.str();
}

std::string Module::to_string() const {
  const std::string digits = std::to_string(num_parameters());
  std::string out = repr(0) + "\nTotal parameters: ";
  for (size_t i = 0; i < digits.size(); ++i) {  // 421834 -> 421,834
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.to_string(); }

}  // namespace minidl::nn
