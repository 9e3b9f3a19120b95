// nn/linear.cpp — Linear layer (see linear.h).
#include "minidl/nn/linear.h"

#include <cmath>

#include "minidl/nn/init.h"

namespace minidl::nn {

Linear::Linear(const LinearOptions& o) : options(o) {
  if (o.in <= 0 || o.out <= 0)
    throw std::invalid_argument("Linear: in and out must be positive, got in=" + std::to_string(o.in) +
                                ", out=" + std::to_string(o.out));
  weight = Variable(empty({o.out, o.in}), true);
  register_parameter("weight", weight);
  if (o.bias) {
    bias = Variable(empty({o.out}), true);
    register_parameter("bias", bias);
  }
  reset_parameters();
}

void Linear::reset_parameters() {
  init::kaiming_uniform_(weight.data(), std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(options.in));
    init::uniform_(bias.data(), -bound, bound);
  }
}

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(options.in) + ", out_features=" + std::to_string(options.out) +
         ", bias=" + (options.bias ? "True" : "False");
}

Variable Linear::forward(const Variable& x) { return linear(x, weight, bias); }

}  // namespace minidl::nn
