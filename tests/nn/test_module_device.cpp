// tests/nn/test_module_device.cpp — Module::to and Module::device on any machine: moving to the
// CPU is a no-op that keeps every tensor, and moving to CUDA where no GPU can be used fails with
// a message naming the module and the reason, leaving the module on the CPU. (The move to a real
// GPU is tested by tests/kernels/test_cuda_layers.cpp, which skips without one.)
#include "minidl/kernels/cuda_api.h"
#include "minidl/nn/nn_all.h"
#include "tests/common/testing.h"

using namespace minidl;

TEST(ModuleDevice, ToCpuKeepsEveryParameterBufferAndGradient) {
  manual_seed(3);
  std::unique_ptr<nn::Module> cnn = nn::make_model("cnn");
  cross_entropy((*cnn)(Variable(randn({2, 1, 28, 28}))), from_vector<int64_t>({1, 2})).backward();
  std::vector<Tensor> before_params, before_grads, before_buffers;
  for (auto& [n, p] : cnn->named_parameters()) {
    before_params.push_back(p.data());
    before_grads.push_back(p.grad());
  }
  for (auto& [n, b] : cnn->named_buffers()) before_buffers.push_back(*b);

  cnn->to(Device::cpu());

  const auto params = cnn->named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(params[i].second.data().is_same(before_params[i])) << params[i].first;
    EXPECT_TRUE(params[i].second.grad().is_same(before_grads[i])) << params[i].first;
  }
  const auto buffers = cnn->named_buffers();
  for (size_t i = 0; i < buffers.size(); ++i)
    EXPECT_TRUE(buffers[i].second->is_same(before_buffers[i])) << buffers[i].first;
  EXPECT_EQ(cnn->device(), Device::cpu());
}

TEST(ModuleDevice, DeviceOfAModuleWithoutTensorsIsTheCpu) {
  nn::ReLU relu;
  EXPECT_EQ(relu.device(), Device::cpu());
  relu.to(Device::cpu());
}

TEST(ModuleDevice, ToCudaWithoutAGpuSaysWhyAndLeavesTheModuleOnTheCpu) {
  if (kernels::cuda::device_count() > 0) GTEST_SKIP() << "a CUDA device is present: the move would succeed";
  nn::Linear fc{{.in = 3, .out = 2}};
  const Tensor weight = fc.weight.data();
  try {
    fc.to(Device::cuda(0));
    FAIL() << "Linear.to(cuda:0) did not throw";
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("Linear.to(cuda:0)"), std::string::npos) << msg;
    const bool says_why =
        msg.find("built without CUDA") != std::string::npos || msg.find("no CUDA device present") != std::string::npos;
    EXPECT_TRUE(says_why) << msg;
  }
  EXPECT_TRUE(fc.weight.data().is_same(weight));
  EXPECT_EQ(fc.device(), Device::cpu());
}
