// nn/sequential.h — Sequential: owns its children (named "0", "1", ...) and chains their forward.
//   nn::Sequential net;
//   net.push_back<nn::Linear>(nn::LinearOptions{.in = 784, .out = 10});
//   net.push_back<nn::ReLU>();
#pragma once
#include <memory>

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
};

}  // namespace minidl::nn
