// nn/sequential.cpp — Sequential's forward: each child in order.
#include "minidl/nn/sequential.h"

namespace minidl::nn {

Variable Sequential::forward(const Variable& x) {
  Variable y = x;
  for (Module* m : children()) y = m->forward(y);
  return y;
}

}  // namespace minidl::nn
