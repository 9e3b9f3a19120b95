// tests/autograd/test_gradcheck_public.cpp — the installed autograd::gradcheck: it passes a
// correct backward with PyTorch's default tolerances and catches a wrong one, naming the element.
#include "minidl/autograd/autograd_all.h"
#include "tests/common/testing.h"

using namespace minidl;
using V = std::vector<Variable>;

namespace {
// y = x^3 with backward scale 3 (right) or another (wrong).
struct Cube : autograd::Function {
  explicit Cube(double scale) : scale(scale) {}
  double scale;
  Tensor x;
  std::string name() const override { return "CubeBackward"; }
  Tensor forward(const std::vector<Tensor>& in) override {
    x = in[0];
    return x * x * x;
  }
  std::vector<Tensor> backward(const Tensor& dy) override { return {dy * x * x * scale}; }
};
autograd::GradcheckFn cube(double scale) {
  return [scale](const V& in) { return autograd::Function::apply(std::make_shared<Cube>(scale), in); };
}
}  // namespace

TEST(GradcheckPublic, DefaultsArePyTorchs) {
  const autograd::GradcheckOptions o;
  EXPECT_EQ(o.eps, 1e-6);
  EXPECT_EQ(o.atol, 1e-5);
  EXPECT_EQ(o.rtol, 1e-3);
  EXPECT_TRUE(o.raise_exception);
}

TEST(GradcheckPublic, PassesACorrectBackward) {
  EXPECT_TRUE(autograd::gradcheck(cube(3.0), {from_vector<double>({0.5, -1.5, 2.0}, {3})}));
  // a built-in op with two inputs, from float32 inputs (checked in float64 copies)
  EXPECT_TRUE(autograd::gradcheck([](const V& in) { return matmul(in[0], in[1]); },
                                  {randn({2, 3}, RandomKey{3, 0}), randn({3, 4}, RandomKey{3, 1})}));
}

TEST(GradcheckPublic, AWrongBackwardThrowsNamingTheElement) {
  // x = [0, 2]: element 0 has gradient 0 either way; element 1's analytic is 2/3 of the numeric.
  const Tensor x = from_vector<double>({0.0, 2.0}, {2});
  EXPECT_THROW_MSG(autograd::gradcheck(cube(2.0), {x}), std::runtime_error, "gradcheck: d/d input 0 [1]: analytic ");
  try {
    autograd::gradcheck(cube(2.0), {x});
  } catch (const std::runtime_error& e) {
    // analytic 2 * 4 * w1 and numeric 3 * 4 * w1 for the fixed weight w1 of element 1
    const std::string m = e.what();
    const double analytic = std::stod(m.substr(m.find("analytic ") + 9));
    const double numeric = std::stod(m.substr(m.find("numeric ") + 8));
    EXPECT_NEAR(analytic / numeric, 2.0 / 3.0, 1e-6) << m;
  }
}

TEST(GradcheckPublic, AWrongBackwardReturnsFalseWithoutRaising) {
  autograd::GradcheckOptions o;
  o.raise_exception = false;
  EXPECT_FALSE(autograd::gradcheck(cube(2.0), {from_vector<double>({1.0, 2.0}, {2})}, o));
  EXPECT_TRUE(autograd::gradcheck(cube(3.0), {from_vector<double>({1.0, 2.0}, {2})}, o));
  // a 1% error in the backward is past rtol 1e-3
  EXPECT_FALSE(autograd::gradcheck(cube(3.0 * 1.01), {from_vector<double>({1.0, 2.0}, {2})}, o));
}

TEST(GradcheckPublic, AnInputWithoutGradientFails) {
  EXPECT_THROW_MSG(autograd::gradcheck([](const V& in) { return mul(in[0], in[1].detach()); },
                                       {from_vector<double>({1.0}, {1}), from_vector<double>({2.0}, {1})}),
                   std::runtime_error, "input 1 got no gradient");
}

TEST(GradcheckPublic, BadOptionsAreRefused) {
  autograd::GradcheckOptions o;
  o.needs_grad = {true};
  EXPECT_THROW_MSG(autograd::gradcheck(cube(3.0), {ones({2}), ones({2})}, o), std::invalid_argument,
                   "needs_grad has 1 entries for 2 inputs");
  EXPECT_THROW_MSG(autograd::gradcheck(cube(3.0), {from_vector<int64_t>({1}, {1})}), std::invalid_argument,
                   "input 0 must be a floating tensor");
}
