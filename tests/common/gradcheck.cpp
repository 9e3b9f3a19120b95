// tests/common/gradcheck.cpp — autograd::gradcheck reported through gtest (see gradcheck.h).
#include "tests/common/gradcheck.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace minidl::testing {

bool gradcheck(const VarFn& f, const std::vector<Tensor>& inputs, const std::string& what,
               const autograd::GradcheckOptions& opt) {
  try {
    autograd::GradcheckOptions raising = opt;
    raising.raise_exception = true;
    return autograd::gradcheck(f, inputs, raising);
  } catch (const std::runtime_error& e) {
    ADD_FAILURE() << what << ": " << e.what();
    return false;
  }
}

}  // namespace minidl::testing
