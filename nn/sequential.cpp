// nn/sequential.cpp — Sequential's forward: each child in order. A BatchNorm1d / BatchNorm2d
// directly followed by a ReLU runs as one fused node (BatchNormBase::forward_relu: the same
// values, one pass fewer each way), and followed by a ReLU and a MaxPool2d as one node too
// (BatchNormBase::forward_relu_max_pool2d: a 2x2 pool in training never writes the normalised
// values at full resolution); the modules and their names stay as they are.
#include "minidl/nn/sequential.h"

#include <typeinfo>

#include "minidl/nn/batchnorm.h"
#include "minidl/nn/layers.h"

namespace minidl::nn {

Variable Sequential::forward(const Variable& x) {
  Variable y = x;
  const std::vector<Module*> ms = children();
  for (size_t i = 0; i < ms.size(); ++i) {
    // exact types: a subclass may override forward
    const auto& t = typeid(*ms[i]);
    const bool plain_bn = t == typeid(BatchNorm1d) || t == typeid(BatchNorm2d);
    if (plain_bn && i + 1 < ms.size() && typeid(*ms[i + 1]) == typeid(ReLU)) {
      auto* bn = static_cast<BatchNormBase*>(ms[i]);
      if (i + 2 < ms.size() && typeid(*ms[i + 2]) == typeid(MaxPool2d)) {
        y = bn->forward_relu_max_pool2d(y, static_cast<MaxPool2d*>(ms[i + 2])->params);
        i += 2;
      } else {
        y = bn->forward_relu(y);
        ++i;
      }
    } else {
      y = ms[i]->forward(y);
    }
  }
  return y;
}

}  // namespace minidl::nn
