// tests/common/gradcheck.h — the tests' form of autograd::gradcheck (autograd/gradcheck.h): a
// failure becomes a gtest failure labelled `what`, and the tolerances are tighter than PyTorch's
// defaults (atol 1e-7, rtol 1e-5): minidl's own ops are held to them.
#pragma once
#include <string>
#include <vector>

#include "minidl/autograd/autograd_all.h"
#include "minidl/autograd/gradcheck.h"

namespace minidl::testing {

using VarFn = autograd::GradcheckFn;

inline autograd::GradcheckOptions strict_gradcheck() { return {.eps = 1e-6, .atol = 1e-7, .rtol = 1e-5}; }

// Returns true when every analytic gradient matches; a mismatch is reported with ADD_FAILURE.
bool gradcheck(const VarFn& f, const std::vector<Tensor>& inputs, const std::string& what,
               const autograd::GradcheckOptions& opt = strict_gradcheck());

}  // namespace minidl::testing
