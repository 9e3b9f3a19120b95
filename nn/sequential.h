// nn/sequential.h — Sequential: owns its children (named "0", "1", ...) and chains their forward.
//   nn::Sequential net;
//   net.push_back<nn::Linear>(nn::LinearOptions{.in = 784, .out = 10});
//   net.push_back<nn::ReLU>();
// forward calls each child in order, as child(x), so the children's forward pre-hooks run. The one
// exception is chosen explicitly: nn::fuse_for_training (nn/fuse.h) may mark runs of consecutive
// children (BatchNorm + ReLU [+ MaxPool2d]) to run as one fused call; the children, their names
// and the state_dict stay as they are. A fused run calls its first child's hooks before it; when a
// later child of the run has hooks, the run's children are called one by one instead.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "minidl/nn/module.h"

namespace minidl::nn {

class Sequential : public Module {
 public:
  std::string type_name() const override { return "Sequential"; }
  Variable forward(const Variable& x) override;

  template <class M, class... Args> M& push_back(Args&&... args) {
    auto m = std::make_unique<M>(std::forward<Args>(args)...);
    M& ref = *m;
    register_owned_module(std::to_string(size()), std::move(m));
    return ref;
  }
  size_t size() const { return named_children().size(); }
  Module& operator[](size_t i) const { return *named_children().at(i).second; }

  // Children [first, first + length) that forward runs as one call to `forward` (what
  // nn::fuse_for_training sets up; `name` says what was fused, e.g. "BatchNorm2d+ReLU"). Replacing
  // any child of a run (replace_module: convert_sync_batchnorm) removes the run.
  struct FusedRun {
    size_t first = 0, length = 0;
    std::string name;
    std::function<Variable(const Variable&)> forward;
  };
  void add_fused_run(FusedRun run);  // runs must not overlap
  const std::vector<FusedRun>& fused_runs() const { return fused_; }

 protected:
  void child_replaced(const std::string& name) override;

 private:
  std::vector<FusedRun> fused_;  // by first child
};

}  // namespace minidl::nn
