// autograd/variable.h — Variable (a Tensor that records how it was made), the graph, backward().
//
// A Variable is a shared handle: data (Tensor), requires_grad, grad (Tensor), and — when it is
// the result of a differentiable op — a grad_fn Node: the op's inputs and a closure computing
// the inputs' gradients from the output's gradient. Leaves (no grad_fn) accumulate .grad.
//   Variable x(randn({3}), /*requires_grad=*/true);
//   Variable y = sum(mul(x, x));   // y.grad_fn(): "SumBackward" -> "MulBackward" -> x
//   y.backward();                  // x.grad() == 2 * x
// backward() runs each node (and each leaf's post-accumulate hook, which DDP uses to start
// all-reduces) as soon as all gradient contributions to it have arrived. Without retain_graph the graph's closures (and the tensors
// they saved) are freed; a second backward through them is an error. The graph holds no
// intermediate results of its own: only the tensors each backward saved (VariableImpl::edge).
// A leaf's first gradient becomes its .grad without a copy when nothing else holds that buffer,
// or when it was written into the leaf's gradient destination (set_grad_destination).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "minidl/tensor/tensor.h"

namespace minidl {

class Variable;
// Gradients of each input given the output's gradient; an undefined Tensor means "no gradient".
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_output)>;
// Receives the leaf's accumulated .grad (DDP captures which parameter it belongs to).
using GradHook = std::function<void(Tensor& grad)>;

struct Node {
  std::string name;  // "MulBackward"
  // Edges to the op's inputs: a leaf as itself; a non-leaf as its edge handle (the same grad_fn,
  // no data, see VariableImpl::edge); an input that does not require grad as an undefined Variable.
  std::vector<Variable> inputs;
  Shape shape;  // the output's shape: what the gradient arriving here must have
  BackwardFn backward;
  bool released = false;  // set after a backward without retain_graph
  uint64_t sequence_nr = 0;  // creation order; later nodes run first among ready ones
};

struct VariableImpl {
  Tensor data;
  Tensor grad;
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;
  std::vector<std::pair<uint64_t, GradHook>> post_accumulate_grad_hooks;  // (handle, hook)
  Tensor grad_destination;  // a leaf's: Variable::set_grad_destination
  uint64_t destination_pass = 0;  // the backward pass that last handed grad_destination out
  // A non-leaf's stand-in in the graph: consumers' nodes hold this handle (requires_grad and
  // grad_fn only) rather than the Variable, so an intermediate result is freed as soon as no
  // user handle and no saved tensor holds it — the graph itself keeps no activations alive.
  std::shared_ptr<VariableImpl> edge;
};

class Variable {
 public:
  Variable() = default;
  explicit Variable(Tensor data, bool requires_grad = false);

  bool defined() const { return impl_ != nullptr; }
  const Tensor& data() const { return impl_->data; }
  Tensor& data() { return impl_->data; }
  // Replaces the values (optimizers, load_state_dict, Module::to); shape and dtype must match,
  // the device may change (Module::to moves parameters this way, keeping the Variable).
  void set_data(const Tensor& t);

  const Tensor& grad() const { return impl_->grad; }
  Tensor& grad() { return impl_->grad; }
  void set_grad(Tensor g) { impl_->grad = std::move(g); }
  void zero_grad(bool set_to_none = true);

  bool requires_grad() const { return impl_ && impl_->requires_grad; }
  Variable& requires_grad_(bool r = true);
  bool is_leaf() const { return !impl_->grad_fn; }
  const std::shared_ptr<Node>& grad_fn() const { return impl_->grad_fn; }

  // Backpropagates from this Variable. Non-scalars need an explicit gradient of their shape.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  // A new Variable sharing the data, cut from the graph.
  Variable detach() const { return Variable(impl_->data, false); }

  // Called after this leaf's gradient for the current backward has been accumulated into .grad.
  // Returns a handle for remove_post_accumulate_grad_hook.
  uint64_t register_post_accumulate_grad_hook(GradHook hook) const;
  void remove_post_accumulate_grad_hook(uint64_t handle) const;

  // Memory this leaf's gradient may be written into when a backward pass reaches the leaf with
  // .grad undefined (after zero_grad(), which sets it to none): an op that makes the gradient
  // with a matrix product (linear's weight) writes it there, and it becomes .grad with no copy.
  // DDP points each parameter at its slot in a gradient bucket, which is then reduced with no
  // copy in. Its old contents are overwritten. The data's shape, dtype and device, contiguous;
  // an undefined Tensor removes it. A second contribution in the same pass is added as usual.
  void set_grad_destination(Tensor destination) const;
  const Tensor& grad_destination() const { return impl_->grad_destination; }

  // Tensor-like accessors
  const Shape& shape() const { return impl_->data.shape(); }
  int64_t dim() const { return impl_->data.dim(); }
  int64_t size(int64_t d) const { return impl_->data.size(d); }
  int64_t numel() const { return impl_->data.numel(); }
  DType dtype() const { return impl_->data.dtype(); }
  Device device() const { return impl_->data.device(); }
  double item() const { return impl_->data.item(); }

  VariableImpl* impl() const { return impl_.get(); }
  bool is_same(const Variable& o) const { return impl_ == o.impl_; }

  // Used by ops: a result Variable whose grad_fn is `backward` over `inputs` — only when grad
  // mode is on and some input requires grad; otherwise a plain Variable without history.
  static Variable make_result(Tensor data, std::vector<Variable> inputs, BackwardFn backward, const char* name);

 private:
  std::shared_ptr<VariableImpl> impl_;
};

// ---- grad mode ----
bool is_grad_enabled();
void set_grad_enabled(bool enabled);
// RAII: no graph is recorded in its scope (evaluation, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Inside a backward function: the destination (Variable::set_grad_destination) to write the
// whole of leaf v's gradient into, handed out once per backward pass and only while v.grad() is
// undefined; otherwise an undefined Tensor, and the gradient is returned in a new one.
Tensor claim_grad_destination(const Variable& v);

// Backpropagates from several roots at once (grads[i] for roots[i]).
void backward(const std::vector<Variable>& roots, const std::vector<Tensor>& grads, bool retain_graph = false);

}  // namespace minidl
