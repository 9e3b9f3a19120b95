// nn/sequential.cpp — Sequential's forward: each child in order. A BatchNorm1d / BatchNorm2d
// directly followed by a ReLU runs as one fused node (BatchNormBase::forward_relu: the same
// values, one pass fewer each way); the modules and their names stay as they are.
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
      y = static_cast<BatchNormBase*>(ms[i])->forward_relu(y);
      ++i;
    } else {
      y = ms[i]->forward(y);
    }
  }
  return y;
}

}  // namespace minidl::nn
