// tests/tensor/test_ops_optim.cpp — the fused optimizer updates as tensor ops (tensor/ops_optim.h):
// one SGD and one Adam step against the formulas worked by hand, and the checks' messages. The
// optimizers themselves are checked against PyTorch in tests/optim/.
#include <cmath>

#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops_optim.h"
#include "tests/common/testing.h"

using namespace minidl;

TEST(OpsOptim, SgdStepWithMomentumFollowsTorchOptimSgd) {
  Tensor p = from_vector<double>({1.0, 2.0}, {2}), g = from_vector<double>({0.5, -1.0}, {2});
  Tensor buf = empty_like(p);
  const SgdStepOptions o{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.0, .first_step = true};
  sgd_step_(p, g, buf, o);  // first step: buf = g, p -= lr * buf
  EXPECT_DOUBLE_EQ(buf.to_vector<double>()[0], 0.5);
  EXPECT_DOUBLE_EQ(p.to_vector<double>()[0], 0.95);
  EXPECT_DOUBLE_EQ(p.to_vector<double>()[1], 2.1);
  SgdStepOptions next = o;
  next.first_step = false;
  sgd_step_(p, g, buf, next);  // buf = 0.9 * 0.5 + 0.5 = 0.95; p = 0.95 - 0.095
  EXPECT_DOUBLE_EQ(buf.to_vector<double>()[0], 0.95);
  EXPECT_DOUBLE_EQ(p.to_vector<double>()[0], 0.855);
}

TEST(OpsOptim, AdamFirstStepMovesEachElementByLr) {
  // step 1: m = (1 - b1) g, v = (1 - b2) g^2, so m_hat / sqrt(v_hat) = sign(g) (eps aside)
  Tensor p = from_vector<double>({1.0, -1.0}, {2}), g = from_vector<double>({3.0, -0.25}, {2});
  Tensor m = zeros_like(p), v = zeros_like(p);
  AdamStepOptions o{.lr = 0.01, .eps = 0.0};
  o.set_step(1.0);
  adam_step_(p, g, m, v, Tensor(), o);
  EXPECT_NEAR(p.to_vector<double>()[0], 0.99, 1e-15);
  EXPECT_NEAR(p.to_vector<double>()[1], -0.99, 1e-15);
  EXPECT_NEAR(m.to_vector<double>()[0], 0.3, 1e-15);
  EXPECT_NEAR(v.to_vector<double>()[0], 0.001 * 9.0, 1e-15);
}

TEST(OpsOptim, BadStateIsAnErrorNamingIt) {
  Tensor p = zeros({4}), g = zeros({4});
  EXPECT_THROW_MSG(sgd_step_(p, g, Tensor(), {.lr = 0.1, .momentum = 0.9}), std::invalid_argument,
                   "SGD.step: a momentum buffer is needed exactly when momentum != 0");
  EXPECT_THROW_MSG(sgd_step_(p, zeros({3}), Tensor(), {.lr = 0.1}), std::invalid_argument,
                   "SGD.step: expected a gradient shaped and typed like the parameter float32[4]");
  Tensor every_other = zeros({4, 2}).select(1, 0);
  EXPECT_THROW_MSG(sgd_step_(p, g, every_other, {.lr = 0.1, .momentum = 0.9}), std::invalid_argument,
                   "SGD.step: expected momentum_buffer contiguous");
  EXPECT_THROW_MSG(adam_step_(p, g, zeros({4}), zeros({4}), Tensor(), {.amsgrad = true}, "AdamW"),
                   std::invalid_argument, "AdamW: expected exp_avg, exp_avg_sq and (exactly when amsgrad)");
  EXPECT_THROW_MSG(adam_step_(p, g, zeros({4}), zeros({4}), Tensor(), {.lr = 0.1}), std::invalid_argument,
                   "Adam: the options' set_step(t) was not called");
  EXPECT_THROW_MSG(sgd_step_(zeros({4}, DType::Int64), zeros({4}, DType::Int64), Tensor(), {.lr = 0.1}),
                   std::invalid_argument, "SGD.step: expected a floating dtype");
}
