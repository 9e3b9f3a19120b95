// autograd/variable.cpp — Variable, grad mode, and the backward engine (reverse topological order).
#include "autograd/variable.h"

#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "tensor/creation.h"
#include "tensor/ops.h"

namespace minidl {

namespace {
thread_local bool grad_enabled = true;
}

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
    throw std::invalid_argument("requires_grad_: only floating tensors can require gradients, got " + impl_->data.desc());
  impl_->requires_grad = r;
  return *this;
}

void Variable::register_post_accumulate_grad_hook(GradHook hook) const {
  if (!is_leaf()) throw std::logic_error("register_post_accumulate_grad_hook: only leaf Variables have one");
  impl_->post_accumulate_grad_hooks.push_back(std::move(hook));
}

Variable Variable::make_result(Tensor data, std::vector<Variable> inputs, BackwardFn backward, const char* name) {
  bool needs = false;
  if (grad_enabled)
    for (const auto& in : inputs) needs = needs || in.requires_grad();
  Variable out(std::move(data), false);
  if (!needs) return out;
  out.impl_->requires_grad = true;
  auto node = std::make_shared<Node>();
  node->name = name;
  node->inputs = std::move(inputs);
  node->backward = std::move(backward);
  out.impl_->grad_fn = std::move(node);
  return out;
}

void Variable::backward(const Tensor& grad, bool retain_graph) const {
  minidl::backward({*this}, {grad}, retain_graph);
}

// ---------------------------------------------------------------- the engine

namespace {
void accumulate(std::unordered_map<VariableImpl*, Tensor>& grads, VariableImpl* v, const Tensor& g) {
  auto it = grads.find(v);
  if (it == grads.end()) {
    grads.emplace(v, g);
  } else {
    it->second = add(it->second, g);
  }
}

// Post-order DFS over the graph below the roots (iterative, so deep graphs do not overflow).
std::vector<VariableImpl*> topological_order(const std::vector<Variable>& roots) {
  std::vector<VariableImpl*> order;
  std::unordered_set<VariableImpl*> visited;
  struct Frame {
    VariableImpl* v;
    size_t next_input;
  };
  std::vector<Frame> stack;
  for (const auto& r : roots) {
    if (visited.count(r.impl())) continue;
    visited.insert(r.impl());
    stack.push_back({r.impl(), 0});
    while (!stack.empty()) {
      Frame& f = stack.back();
      const auto& node = f.v->grad_fn;
      if (node && f.next_input < node->inputs.size()) {
        VariableImpl* in = node->inputs[f.next_input++].impl();
        if (in && in->requires_grad && !visited.count(in)) {
          visited.insert(in);
          stack.push_back({in, 0});
        }
      } else {
        order.push_back(f.v);
        stack.pop_back();
      }
    }
  }
  return order;
}
}  // namespace

void backward(const std::vector<Variable>& roots, const std::vector<Tensor>& grads_in, bool retain_graph) {
  if (roots.size() != grads_in.size()) throw std::invalid_argument("backward: need one gradient per root");
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
    accumulate(grads, r.impl(), g);
  }

  const std::vector<VariableImpl*> order = topological_order(roots);
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    VariableImpl* v = *it;
    auto git = grads.find(v);
    if (git == grads.end()) continue;  // nothing flowed here (e.g. an unused branch)
    Tensor g = std::move(git->second);
    grads.erase(git);
    if (!v->grad_fn) {  // leaf: accumulate into .grad, then the hooks
      if (!v->grad.defined()) {
        v->grad = g.is_contiguous() ? g.clone() : g.contiguous();
      } else {
        add_(v->grad, g);
      }
      for (auto& hook : v->post_accumulate_grad_hooks) hook(v->grad);
      continue;
    }
    Node& node = *v->grad_fn;
    if (node.released)
      throw std::logic_error("backward: trying to backward through the graph a second time (through " + node.name +
                             "): its saved tensors were freed; pass retain_graph=true to the first backward");
    std::vector<Tensor> in_grads = node.backward(g);
    if (in_grads.size() != node.inputs.size())
      throw std::logic_error(node.name + ": backward returned " + std::to_string(in_grads.size()) + " gradients for " +
                             std::to_string(node.inputs.size()) + " inputs");
    for (size_t i = 0; i < in_grads.size(); ++i) {
      const Variable& in = node.inputs[i];
      if (!in.requires_grad() || !in_grads[i].defined()) continue;
      if (in_grads[i].shape() != in.shape())
        throw std::logic_error(node.name + ": gradient for input " + std::to_string(i) + " is " + in_grads[i].desc() +
                               ", expected shape " + shape_str(in.shape()));
      accumulate(grads, in.impl(), in_grads[i]);
    }
    if (!retain_graph) {
      node.released = true;
      node.backward = nullptr;  // frees the saved tensors
    }
  }
}

}  // namespace minidl
