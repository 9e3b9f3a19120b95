// autograd/variable.cpp — Variable, grad mode, and the backward engine (dependency-counted).
#include "minidl/autograd/variable.h"

#include <atomic>
#include <queue>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "minidl/autograd/profiler.h"
#include "minidl/autograd/trace.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"

namespace minidl {

namespace {
thread_local bool grad_enabled = true;
thread_local uint64_t current_pass = 0;  // the backward() running on this thread (0: none)
std::atomic<uint64_t> next_pass{1};
}  // namespace

bool is_grad_enabled() { return grad_enabled; }
void set_grad_enabled(bool enabled) { grad_enabled = enabled; }

Variable::Variable(Tensor data, bool requires_grad) : impl_(std::make_shared<VariableImpl>()) {
  impl_->data = std::move(data);
  if (requires_grad && !impl_->data.is_floating_point())
    throw std::invalid_argument("Variable: only floating tensors can require gradients, got " + impl_->data.desc());
  impl_->requires_grad = requires_grad;
}

void Variable::set_data(const Tensor& t) {
  if (t.shape() != impl_->data.shape() || t.dtype() != impl_->data.dtype())
    throw std::invalid_argument("Variable::set_data: expected " + impl_->data.desc() + ", got " + t.desc());
  impl_->data = t;
}

void Variable::zero_grad(bool set_to_none) {
  if (set_to_none || !impl_->grad.defined()) {
    impl_->grad = Tensor();
  } else {
    impl_->grad.zero_();
  }
}

Variable& Variable::requires_grad_(bool r) {
  if (!is_leaf()) throw std::logic_error("requires_grad_: only leaf Variables can change requires_grad");
  if (r && !impl_->data.is_floating_point())
    throw std::invalid_argument("requires_grad_: only floating tensors can require gradients, got " +
                                impl_->data.desc());
  impl_->requires_grad = r;
  return *this;
}

uint64_t Variable::register_post_accumulate_grad_hook(GradHook hook) const {
  if (!is_leaf()) throw std::logic_error("register_post_accumulate_grad_hook: only leaf Variables have one");
  static std::atomic<uint64_t> next_handle{1};
  const uint64_t handle = next_handle.fetch_add(1);
  impl_->post_accumulate_grad_hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void Variable::remove_post_accumulate_grad_hook(uint64_t handle) const {
  auto& hooks = impl_->post_accumulate_grad_hooks;
  std::erase_if(hooks, [handle](const auto& h) { return h.first == handle; });
}

void Variable::set_grad_destination(Tensor destination) const {
  if (!is_leaf()) throw std::logic_error("set_grad_destination: only leaf Variables have one");
  if (destination.defined() &&
      (destination.shape() != impl_->data.shape() || destination.dtype() != impl_->data.dtype() ||
       destination.device() != impl_->data.device() || !destination.is_contiguous()))
    throw std::invalid_argument("set_grad_destination: got " + destination.desc() + ", expected a contiguous " +
                                impl_->data.desc());
  impl_->grad_destination = std::move(destination);
  impl_->destination_pass = 0;
}

Tensor claim_grad_destination(const Variable& v) {
  VariableImpl* impl = v.impl();
  if (!impl || impl->grad_fn || !impl->grad_destination.defined() || impl->grad.defined() || current_pass == 0 ||
      impl->destination_pass == current_pass)
    return Tensor();
  if (impl->grad_destination.device() != impl->data.device()) return Tensor();  // moved since (Module::to)
  impl->destination_pass = current_pass;
  return impl->grad_destination;
}

Variable Variable::make_result(Tensor data, std::vector<Variable> inputs, BackwardFn backward, const char* name) {
  if (autograd::profiler::active()) autograd::profiler::record_forward(name);
  bool needs = false;
  if (grad_enabled)
    for (const auto& in : inputs) needs = needs || in.requires_grad();
  Variable out(std::move(data), false);
  if (!needs) return out;
  out.impl_->requires_grad = true;
  auto node = std::make_shared<Node>();
  static std::atomic<uint64_t> next_sequence_nr{0};
  node->sequence_nr = next_sequence_nr.fetch_add(1);
  node->name = name;
  for (auto& in : inputs) {
    if (!in.requires_grad()) {
      in = Variable();
    } else if (in.impl_->grad_fn) {
      if (!in.impl_->edge) {
        auto e = std::make_shared<VariableImpl>();
        e->requires_grad = true;
        e->grad_fn = in.impl_->grad_fn;
        in.impl_->edge = std::move(e);
      }
      Variable edge;
      edge.impl_ = in.impl_->edge;
      in = std::move(edge);
    }
  }
  node->inputs = std::move(inputs);
  node->shape = out.shape();
  node->backward = std::move(backward);
  out.impl_->grad_fn = std::move(node);
  return out;
}

void Variable::backward(const Tensor& grad, bool retain_graph) const {
  minidl::backward({*this}, {grad}, retain_graph);
}

// ---------------------------------------------------------------- the engine

namespace {
using autograd::trace::now_ns;

// True when nothing but `g` holds its buffer and the buffer is exactly g's elements in order:
// such a gradient can be kept (as .grad, or added into in place) instead of copied.
bool owns_buffer(const Tensor& g) {
  return g.storage().use_count() == 1 && g.offset() == 0 && g.is_contiguous() &&
         g.storage()->nbytes() == static_cast<size_t>(g.numel()) * element_size(g.dtype());
}

// The key a Variable has in the engine's maps: its edge handle when consumers hold one.
VariableImpl* graph_key(VariableImpl* v) { return v->edge ? v->edge.get() : v; }

void accumulate(std::unordered_map<VariableImpl*, Tensor>& grads, VariableImpl* v, Tensor g) {
  auto it = grads.find(v);
  if (it == grads.end()) {
    grads.emplace(v, std::move(g));
  } else {
    const int64_t t0 = now_ns();
    if (owns_buffer(it->second)) {
      add_(it->second, g);
    } else {
      it->second = add(it->second, g);
    }
    if (autograd::profiler::active()) autograd::profiler::record_backward("AccumulateGrad", t0);
  }
}

// Number of gradient contributions each Variable will receive: one per edge from a consumer
// inside the graph below the roots (iterative traversal, so deep graphs do not overflow).
std::unordered_map<VariableImpl*, int> count_dependencies(const std::vector<Variable>& roots) {
  std::unordered_map<VariableImpl*, int> deps;
  std::unordered_set<VariableImpl*> seen;
  std::vector<VariableImpl*> stack;
  for (const auto& r : roots)
    if (seen.insert(graph_key(r.impl())).second) stack.push_back(graph_key(r.impl()));
  while (!stack.empty()) {
    VariableImpl* v = stack.back();
    stack.pop_back();
    if (!v->grad_fn) continue;
    for (const auto& in : v->grad_fn->inputs) {
      VariableImpl* i = in.impl();
      if (!i || !i->requires_grad) continue;
      ++deps[i];
      if (seen.insert(i).second) stack.push_back(i);
    }
  }
  return deps;
}

void accumulate_into_leaf(VariableImpl* v, Tensor g) {
  if (!v->grad.defined()) {
    // a copy when g may alias another tensor (not when it is the leaf's destination)
    v->grad = owns_buffer(g) || g.is_same(v->grad_destination) ? std::move(g) : g.clone();
  } else {
    add_(v->grad, g);
  }
  for (auto& [handle, hook] : v->post_accumulate_grad_hooks) hook(v->grad);
}

// accumulate_into_leaf, its time recorded as "AccumulateGrad" when profiling or tracing
// (autograd/profiler.h).
void finish_leaf(VariableImpl* v, Tensor g) {
  const int64_t t0 = now_ns();
  accumulate_into_leaf(v, std::move(g));
  if (autograd::profiler::active()) autograd::profiler::record_backward("AccumulateGrad", t0);
}
}  // namespace

void backward(const std::vector<Variable>& roots, const std::vector<Tensor>& grads_in, bool retain_graph) {
  if (roots.size() != grads_in.size()) throw std::invalid_argument("backward: need one gradient per root");
  // this pass's number, for claim_grad_destination (restored after a backward run inside one)
  struct Pass {
    uint64_t outer = current_pass;
    Pass() { current_pass = next_pass.fetch_add(1); }
    ~Pass() { current_pass = outer; }
  } pass;
  std::unordered_map<VariableImpl*, Tensor> grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Variable& r = roots[i];
    if (!r.requires_grad())
      throw std::logic_error("backward: element " + std::to_string(i) +
                             " of the roots does not require grad and does not have a grad_fn");
    Tensor g = grads_in[i];
    if (!g.defined()) {
      if (r.numel() != 1)
        throw std::logic_error("backward: grad can be implicitly created only for scalar outputs, got " +
                               r.data().desc() + "; pass a gradient of that shape");
      g = ones(r.shape(), r.dtype(), r.device());
    } else if (g.shape() != r.shape()) {
      throw std::invalid_argument("backward: gradient " + g.desc() + " does not match the root " + r.data().desc());
    }
    accumulate(grads, graph_key(r.impl()), std::move(g));
  }

  // Kahn's algorithm: a Variable is ready when all its contributions have arrived. Among ready
  // nodes the most recently created runs first (as PyTorch), and a ready leaf is finished at
  // once, so the hooks of the layers nearest the loss fire first (DDP starts those buckets early).
  std::unordered_map<VariableImpl*, int> deps = count_dependencies(roots);
  auto later_first = [](VariableImpl* a, VariableImpl* b) { return a->grad_fn->sequence_nr < b->grad_fn->sequence_nr; };
  std::priority_queue<VariableImpl*, std::vector<VariableImpl*>, decltype(later_first)> ready(later_first);
  std::unordered_set<VariableImpl*> queued;
  for (const auto& r : roots) {
    VariableImpl* key = graph_key(r.impl());
    if (deps[key] != 0 || !queued.insert(key).second) continue;
    if (r.is_leaf()) {
      auto it = grads.find(key);
      Tensor g = std::move(it->second);
      grads.erase(it);
      finish_leaf(key, std::move(g));
    } else {
      ready.push(key);
    }
  }
  while (!ready.empty()) {
    VariableImpl* v = ready.top();
    ready.pop();
    Node& node = *v->grad_fn;
    // A node no gradient reached still releases its inputs' dependency counts.
    std::vector<Tensor> in_grads(node.inputs.size());
    auto git = grads.find(v);
    if (git != grads.end()) {
      Tensor g = std::move(git->second);
      grads.erase(git);
      if (node.released)
        throw std::logic_error("backward: trying to backward through the graph a second time (through " + node.name +
                               "): its saved tensors were freed; pass retain_graph=true to the first backward");
      const int64_t t0 = now_ns();
      in_grads = node.backward(g);
      if (autograd::profiler::active()) autograd::profiler::record_backward(node.name, t0);
      if (in_grads.size() != node.inputs.size())
        throw std::logic_error(node.name + ": backward returned " + std::to_string(in_grads.size()) +
                               " gradients for " + std::to_string(node.inputs.size()) + " inputs");
    }
    for (size_t i = 0; i < in_grads.size(); ++i) {
      VariableImpl* in = node.inputs[i].impl();
      if (!in || !in->requires_grad) continue;
      if (in_grads[i].defined()) {
        const Shape& expected = in->grad_fn ? in->grad_fn->shape : in->data.shape();
        if (in_grads[i].shape() != expected)
          throw std::logic_error(node.name + ": gradient for input " + std::to_string(i) + " is " + in_grads[i].desc() +
                                 ", expected shape " + shape_str(expected));
        accumulate(grads, in, std::move(in_grads[i]));
      }
      if (--deps[in] > 0) continue;
      if (in->grad_fn) {
        ready.push(in);
      } else if (auto it = grads.find(in); it != grads.end()) {
        Tensor g = std::move(it->second);
        grads.erase(it);
        finish_leaf(in, std::move(g));
      }
    }
    if (!retain_graph) {
      node.released = true;
      node.backward = nullptr;  // frees the saved tensors
    }
  }
}

}  // namespace minidl
