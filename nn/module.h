// nn/module.h — Module: the base of every layer and model.
//
// A Module owns named parameters (Variables that require grad), named buffers (Tensors that are
// state but not learned, like BatchNorm's running statistics) and named child modules. Children
// are ordinary members registered by name, so modules are neither copyable nor movable:
//
//   struct Net : nn::Module {
//     nn::Linear fc1{{.in = 784, .out = 256}};
//     nn::Linear fc2{{.in = 256, .out = 10}};
//     Net() { register_module("fc1", fc1); register_module("fc2", fc2); }
//     Variable forward(const Variable& x) override { return fc2(relu(fc1(x))); }
//   };
// (type_name() is "Net" by default; override it to print another name.)
//
// Forward pre-hooks (PyTorch's register_forward_pre_hook): calling a module as module(x) runs its
// hooks, then forward(x); calling forward(x) itself runs none, so a forward calls its children as
// fc1(x), not fc1.forward(x). Sequential does, its fused runs included (nn/sequential.h).
//
// Names are dotted as in PyTorch ("features.0.weight"), so state_dict() keys line up with a
// PyTorch model of the same structure.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "minidl/autograd/autograd_all.h"
#include "minidl/tensor/serialize.h"
#include "minidl/tensor/tensor_all.h"

namespace minidl::nn {

// What register_forward_pre_hook returns (PyTorch's torch.utils.hooks.RemovableHandle): remove(),
// or the destructor, unregisters the hook; both are no-ops once the hook or its module is gone.
// Movable, not copyable; an empty handle (default-constructed, moved from) holds nothing.
class RemovableHandle {
 public:
  struct Hooks;  // a module's list of hooks, shared with its handles
  RemovableHandle() = default;
  RemovableHandle(std::weak_ptr<Hooks> hooks, uint64_t id) : hooks_(std::move(hooks)), id_(id) {}
  ~RemovableHandle() { remove(); }
  RemovableHandle(RemovableHandle&& o) noexcept : hooks_(std::move(o.hooks_)), id_(o.id_) { o.hooks_.reset(); }
  RemovableHandle& operator=(RemovableHandle&& o) noexcept;
  RemovableHandle(const RemovableHandle&) = delete;
  RemovableHandle& operator=(const RemovableHandle&) = delete;
  void remove();

 private:
  std::weak_ptr<Hooks> hooks_;
  uint64_t id_ = 0;
};

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) = delete;
  Module& operator=(Module&&) = delete;

  // The single-input forward most layers have; modules without one throw.
  virtual Variable forward(const Variable& x);
  // Runs the forward pre-hooks, then forward(x).
  Variable operator()(const Variable& x) {
    if (pre_hooks_) run_forward_pre_hooks(x);
    return forward(x);
  }

  // ---- forward pre-hooks ----
  // hook(module, input) runs before forward each time the module is called as module(x), hooks in
  // the order they were registered. It observes (a wait, a check, a count); PyTorch's may also
  // return a replacement input, this one cannot. Keep the handle: dropping it removes the hook.
  using ForwardPreHook = std::function<void(Module& module, const Variable& input)>;
  [[nodiscard]] RemovableHandle register_forward_pre_hook(ForwardPreHook hook);
  bool has_forward_pre_hooks() const;
  // What operator() runs before forward: for a caller that runs this module's computation another
  // way (Sequential's fused runs; a forward with several inputs, given the first).
  void run_forward_pre_hooks(const Variable& input);

  // "Linear"; used by the printed tree and in messages. The default is the C++ class name
  // without namespaces ("Net" for struct Net), so a user module needs no override.
  virtual std::string type_name() const;
  // The text inside the parentheses of this module's line: "in_features=784, out_features=256, bias=True".
  virtual std::string extra_repr() const { return ""; }
  // True when this module's forward itself runs collectives (SyncBatchNorm, or a BatchNorm member
  // converted by dist::convert_sync_batchnorm): DDP's join() cannot shadow such a model.
  virtual bool communicates_in_forward() const { return false; }

  // ---- traversal (registration order; own entries first, then children's, depth first) ----
  std::vector<std::pair<std::string, Variable>> named_parameters(bool recurse = true) const;
  std::vector<Variable> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor*>> named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Module*>> named_children() const { return children_; }
  std::vector<Module*> children() const;
  // Every module below (and including) this one, with its dotted name ("" for this one).
  std::vector<std::pair<std::string, Module*>> named_modules(const std::string& prefix = "");
  int64_t num_parameters() const;

  // ---- mode ----
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  void zero_grad(bool set_to_none = true);

  // ---- device ----
  // Moves every parameter (its data and any gradient, keeping the same Variable, so optimizers
  // and DDP built on it see the move) and every buffer to `device`, recursively; a no-op for
  // tensors already there. Throws, naming this module and the reason, when the device cannot be
  // used ("built without CUDA", "no CUDA device present"). Move the model before the optimizer
  // has state (its first step) and before wrapping it in DistributedDataParallel.
  void to(Device device);
  // The device of the first parameter (else the first buffer); the CPU for a module without tensors.
  Device device() const;

  // ---- state ----
  // Parameters' and buffers' current tensors by dotted name (shared, not copied).
  TensorMap state_dict() const;
  struct LoadResult {
    std::vector<std::string> missing_keys;
    std::vector<std::string> unexpected_keys;
  };
  // Copies values in place. strict: any missing or unexpected key is an error naming them all;
  // a shape or dtype mismatch is always an error naming the key.
  LoadResult load_state_dict(const TensorMap& state, bool strict = true);

  // A printable tree like PyTorch's repr, ending with the parameter count.
  std::string to_string() const;

  // Replaces a child that this module owns (a container's child, e.g. Sequential's), used by
  // convert_sync_batchnorm. Member children cannot be replaced: that is an error naming them.
  bool owns_child(const std::string& name) const;
  void replace_module(const std::string& name, std::unique_ptr<Module> replacement);

 protected:
  Variable& register_parameter(const std::string& name, Variable& param);
  Tensor& register_buffer(const std::string& name, Tensor& buffer);
  template <class M> M& register_module(const std::string& name, M& child) {
    add_child(name, &child);
    return child;
  }
  // For containers (Sequential) that own their children.
  Module& register_owned_module(const std::string& name, std::unique_ptr<Module> child);
  // Called by replace_module after child `name` was replaced (Sequential drops a fused run there).
  virtual void child_replaced(const std::string& name) { (void)name; }

  bool training_ = true;

 private:
  void add_child(const std::string& name, Module* child);
  void check_new_name(const std::string& name, const char* what) const;
  std::string repr(int indent) const;

  std::vector<std::pair<std::string, Variable*>> params_;
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::vector<std::pair<std::string, Module*>> children_;
  std::vector<std::unique_ptr<Module>> owned_;
  std::shared_ptr<RemovableHandle::Hooks> pre_hooks_;  // made by the first register_forward_pre_hook
};

std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace minidl::nn
