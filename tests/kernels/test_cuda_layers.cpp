// tests/kernels/test_cuda_layers.cpp — every nn layer and the three reference models on the GPU
// against the CPU, at the level a user sees them: two identical modules (same seed), one moved
// with Module::to(cuda:0), forward and backward on the same inputs with the same upstream
// gradient; then outputs, input gradients, parameter gradients and buffers are compared with
// per-layer tolerances (dropout draws the same mask on both: same seed, same Philox stream).
// Ends with one SGD and one AdamW step of a model on each device.
// Skipped, saying why, without a device (tools/gpu_check.sh runs them: filter CudaLayers*).
#include <functional>
#include <memory>

#include "minidl/autograd/autocast.h"
#include "minidl/nn/nn_all.h"
#include "minidl/optim/optim_all.h"
#include "minidl/tensor/tensor_all.h"
#include "tests/kernels/cuda_testing.h"

using namespace minidl;
using minidl::testing::expect_cuda_matches_cpu;
using minidl::testing::on_gpu;

namespace {

constexpr uint64_t kInitSeed = 1234;  // both copies are built from this seed
constexpr uint64_t kForwardSeed = 4321;  // and run forward from this one (dropout masks)

struct Tol {
  double rtol = 1e-5, atol = 1e-5;  // outputs
  double grad_rtol = 1e-4, grad_atol = 1e-4;  // input and parameter gradients, buffers
};

using MakeModule = std::function<std::unique_ptr<nn::Module>()>;
using Forward = std::function<Variable(nn::Module&, const Variable&)>;

Variable plain_forward(nn::Module& m, const Variable& x) { return m.forward(x); }

Tensor rnd(const Shape& s, uint64_t stream) { return randn(s, RandomKey{77, stream}); }

// The parity check described at the top of the file; `x` is a CPU tensor (floating inputs get
// gradients, integer ones — Embedding's indices — do not).
void check_module_parity(const std::string& what, const MakeModule& make, const Tensor& x, bool training, Tol tol,
                         const Forward& forward = plain_forward) {
  manual_seed(kInitSeed);
  std::unique_ptr<nn::Module> cpu = make();
  manual_seed(kInitSeed);
  std::unique_ptr<nn::Module> gpu = make();
  gpu->to(Device::cuda(0));
  ASSERT_TRUE(gpu->parameters().empty() || gpu->device().is_cuda()) << what << ": to(cuda) left the module on the CPU";
  cpu->train(training);
  gpu->train(training);

  const bool needs_grad = x.is_floating_point();
  Variable xc(x.clone(), needs_grad), xg(on_gpu(x), needs_grad);
  manual_seed(kForwardSeed);
  Variable yc = forward(*cpu, xc);
  manual_seed(kForwardSeed);
  Variable yg = forward(*gpu, xg);
  expect_cuda_matches_cpu(yg.data(), yc.data(), tol.rtol, tol.atol, what + ": output");

  if (yc.requires_grad()) {
    const Tensor dy = rnd(yc.shape(), 1);
    yc.backward(dy);
    yg.backward(on_gpu(dy));
    if (needs_grad)
      expect_cuda_matches_cpu(xg.grad(), xc.grad(), tol.grad_rtol, tol.grad_atol, what + ": input gradient");
    const auto pc = cpu->named_parameters(), pg = gpu->named_parameters();
    ASSERT_EQ(pc.size(), pg.size()) << what;
    for (size_t i = 0; i < pc.size(); ++i) {
      ASSERT_EQ(pc[i].first, pg[i].first) << what;
      expect_cuda_matches_cpu(pg[i].second.grad(), pc[i].second.grad(), tol.grad_rtol, tol.grad_atol,
                              what + ": gradient of " + pc[i].first);
    }
  }
  const auto bc = cpu->named_buffers(), bg = gpu->named_buffers();
  ASSERT_EQ(bc.size(), bg.size()) << what;
  for (size_t i = 0; i < bc.size(); ++i)
    expect_cuda_matches_cpu(*bg[i].second, *bc[i].second, tol.grad_rtol, tol.grad_atol,
                            what + ": buffer " + bc[i].first);
}

template <class M, class O> MakeModule maker(O options) {
  return [options] { return std::make_unique<M>(options); };
}
template <class M> MakeModule maker() {
  return [] { return std::make_unique<M>(); };
}

}  // namespace

TEST(CudaLayers, LinearMatchesCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  check_module_parity("Linear", maker<nn::Linear>(nn::LinearOptions{.in = 33, .out = 17}), rnd({8, 33}, 2), true, {});
  check_module_parity("Linear (3-d input, no bias)",
                      maker<nn::Linear>(nn::LinearOptions{.in = 16, .out = 24, .bias = false}), rnd({2, 5, 16}, 3),
                      true, {});
}

// A linear weight's gradient destination on the device (DDP's bucket slot on a GPU) takes dW as
// on the CPU; one left on the CPU when the weight moved to the GPU is not used, and dW is new.
TEST(CudaLayers, LinearWritesItsWeightGradientIntoADestinationOnItsDevice) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor x = rnd({8, 33}, 4), w0 = rnd({17, 33}, 5);
  Variable cpu_w(w0.clone(), true);
  sum(linear(Variable(x), cpu_w, Variable())).backward();
  Variable w(on_gpu(w0), true);
  const Tensor dest = on_gpu(zeros({17, 33}));
  w.set_grad_destination(dest);
  sum(linear(Variable(on_gpu(x)), w, Variable())).backward();
  EXPECT_TRUE(w.grad().is_same(dest));
  expect_cuda_matches_cpu(w.grad(), cpu_w.grad(), 1e-5, 1e-5, "dW in the destination");
  Variable moved(w0.clone(), true);
  moved.set_grad_destination(zeros({17, 33}));
  moved.set_data(on_gpu(w0));  // as Module::to moves a parameter
  sum(linear(Variable(on_gpu(x)), moved, Variable())).backward();
  EXPECT_FALSE(moved.grad().is_same(moved.grad_destination()));
  expect_cuda_matches_cpu(moved.grad(), cpu_w.grad(), 1e-5, 1e-5, "dW of a moved weight");
}

// Under autocast(BFloat16) Linear multiplies bfloat16 operands into float32 on both devices
// (cuBLAS's bfloat16 GEMM, the CPU's gemm_bf16); under autocast(Float16) CUDA multiplies float16
// operands (cuBLAS's float16 GEMM) and the CPU the same rounded operands widened to float32. The
// same rounded values, sums in another order; backward rounds dy to the low dtype on both. A 3-d
// input takes matmul's folded path.
TEST(CudaLayers, LinearUnderHalfAutocastMatchesCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  for (const DType half : {DType::BFloat16, DType::Float16}) {
    const std::string name = dtype_name(half);
    const Forward under_autocast = [half](nn::Module& m, const Variable& x) {
      autocast guard(half);
      return m.forward(x);
    };
    check_module_parity("Linear (" + name + " autocast)", maker<nn::Linear>(nn::LinearOptions{.in = 64, .out = 24}),
                        rnd({16, 64}, 30), true, {.rtol = 1e-4, .atol = 1e-4, .grad_rtol = 1e-2, .grad_atol = 1e-2},
                        under_autocast);
    check_module_parity("Linear (" + name + " autocast, 3-d input)",
                        maker<nn::Linear>(nn::LinearOptions{.in = 40, .out = 8}), rnd({2, 5, 40}, 31), true,
                        {.rtol = 1e-4, .atol = 1e-4, .grad_rtol = 1e-2, .grad_atol = 1e-2}, under_autocast);
  }
}

TEST(CudaLayers, Conv2dMatchesCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tol conv{.rtol = 1e-4, .atol = 1e-4, .grad_rtol = 1e-4, .grad_atol = 1e-3};  // cuDNN FP32 sums in another order
  check_module_parity("Conv2d", maker<nn::Conv2d>(nn::Conv2dOptions{.in = 3, .out = 8, .kernel = 3, .padding = 1}),
                      rnd({4, 3, 12, 12}, 4), true, conv);
  check_module_parity("Conv2d (stride 2)",
                      maker<nn::Conv2d>(nn::Conv2dOptions{.in = 4, .out = 6, .kernel = 3, .stride = 2, .padding = 1}),
                      rnd({2, 4, 11, 9}, 5), true, conv);
}

TEST(CudaLayers, BatchNormTrainAndEvalMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tol bn{.rtol = 1e-5, .atol = 1e-5, .grad_rtol = 1e-4, .grad_atol = 1e-4};
  for (const bool training : {true, false}) {
    const std::string mode = training ? " (train)" : " (eval)";
    check_module_parity("BatchNorm1d" + mode, maker<nn::BatchNorm1d>(nn::BatchNormOptions{.num_features = 12}),
                        rnd({16, 12}, 6), training, bn);
    check_module_parity("BatchNorm1d (N, C, L)" + mode, maker<nn::BatchNorm1d>(nn::BatchNormOptions{.num_features = 5}),
                        rnd({4, 5, 7}, 7), training, bn);
    check_module_parity("BatchNorm2d" + mode, maker<nn::BatchNorm2d>(nn::BatchNormOptions{.num_features = 6}),
                        rnd({4, 6, 9, 9}, 8), training, bn);
  }
  // the cumulative moving average (momentum None) counts batches on the device
  check_module_parity("BatchNorm2d (momentum None)",
                      maker<nn::BatchNorm2d>(nn::BatchNormOptions{.num_features = 3, .momentum = std::nullopt}),
                      rnd({2, 3, 5, 5}, 9), true, bn);
}

TEST(CudaLayers, LayerNormMatchesCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  check_module_parity("LayerNorm", maker<nn::LayerNorm>(nn::LayerNormOptions{.normalized_shape = {32}}),
                      rnd({3, 7, 32}, 10), true, {.grad_rtol = 1e-4, .grad_atol = 1e-4});
  check_module_parity("LayerNorm (2 dims)", maker<nn::LayerNorm>(nn::LayerNormOptions{.normalized_shape = {4, 6}}),
                      rnd({5, 4, 6}, 11), true, {.grad_rtol = 1e-4, .grad_atol = 1e-4});
}

TEST(CudaLayers, DropoutDrawsTheSameMaskAsCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  // the same mask: outputs and gradients agree exactly where the mask is 0 and to rounding elsewhere
  check_module_parity("Dropout (train)", maker<nn::Dropout>(nn::DropoutOptions{.p = 0.3}), rnd({64, 129}, 12), true,
                      {.rtol = 1e-6, .atol = 0, .grad_rtol = 1e-6, .grad_atol = 0});
  check_module_parity("Dropout (eval)", maker<nn::Dropout>(nn::DropoutOptions{.p = 0.3}), rnd({8, 9}, 13), false,
                      {.rtol = 0, .atol = 0, .grad_rtol = 0, .grad_atol = 0});
}

TEST(CudaLayers, ActivationsMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor x = rnd({6, 50}, 14);
  check_module_parity("ReLU", maker<nn::ReLU>(), x, true, {.rtol = 0, .atol = 0, .grad_rtol = 0, .grad_atol = 0});
  check_module_parity("GELU", maker<nn::GELU>(nn::GELUOptions{}), x, true,
                      {.rtol = 1e-6, .atol = 1e-6, .grad_rtol = 1e-5, .grad_atol = 1e-6});
  check_module_parity("GELU (tanh)", maker<nn::GELU>(nn::GELUOptions{.tanh_approximation = true}), x, true,
                      {.rtol = 1e-6, .atol = 1e-6, .grad_rtol = 1e-5, .grad_atol = 1e-6});
  check_module_parity("Tanh", maker<nn::Tanh>(), x, true,
                      {.rtol = 1e-6, .atol = 1e-6, .grad_rtol = 1e-5, .grad_atol = 1e-6});
}

TEST(CudaLayers, PoolingAndFlattenMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor x = rnd({2, 3, 12, 10}, 15);
  const Tol exact{.rtol = 0, .atol = 0, .grad_rtol = 0, .grad_atol = 0};
  check_module_parity("MaxPool2d", maker<nn::MaxPool2d>(nn::Pool2dOptions{.kernel = 2}), x, true, exact);
  check_module_parity("MaxPool2d (3, stride 2, pad 1)",
                      maker<nn::MaxPool2d>(nn::Pool2dOptions{.kernel = 3, .stride = 2, .padding = 1}), x, true, exact);
  check_module_parity("AvgPool2d", maker<nn::AvgPool2d>(nn::Pool2dOptions{.kernel = 2}), x, true,
                      {.rtol = 1e-6, .atol = 1e-6, .grad_rtol = 1e-6, .grad_atol = 1e-6});
  check_module_parity("AdaptiveAvgPool2d",
                      maker<nn::AdaptiveAvgPool2d>(nn::AdaptiveAvgPool2dOptions{.out_h = 3, .out_w = 4}), x, true,
                      {.rtol = 1e-6, .atol = 1e-6, .grad_rtol = 1e-6, .grad_atol = 1e-6});
  check_module_parity("Flatten", maker<nn::Flatten>(nn::FlattenOptions{}), x, true, exact);
}

TEST(CudaLayers, EmbeddingMatchesCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor indices = from_vector<int64_t>({3, 0, 7, 3, 9, 1, 3, 2}, {2, 4});  // repeats accumulate in the gradient
  check_module_parity(
      "Embedding", maker<nn::Embedding>(nn::EmbeddingOptions{.num_embeddings = 10, .embedding_dim = 6}), indices, true,
      {.rtol = 0, .atol = 0, .grad_rtol = 1e-6, .grad_atol = 1e-6},
      [](nn::Module& m, const Variable& x) { return static_cast<nn::Embedding&>(m).forward(x.data()); });
}

TEST(CudaLayers, MultiheadAttentionMatchesCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tol attn{.rtol = 1e-4, .atol = 1e-5, .grad_rtol = 1e-4, .grad_atol = 1e-4};
  check_module_parity("MultiheadAttention",
                      maker<nn::MultiheadAttention>(nn::MultiheadAttentionOptions{.embed_dim = 32, .num_heads = 4}),
                      rnd({3, 10, 32}, 16), true, attn);
  check_module_parity(
      "MultiheadAttention (attention dropout)",
      maker<nn::MultiheadAttention>(nn::MultiheadAttentionOptions{.embed_dim = 16, .num_heads = 2, .dropout = 0.2}),
      rnd({2, 6, 16}, 17), true, attn);
}

TEST(CudaLayers, TransformerEncoderLayerMatchesCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tol block{.rtol = 1e-4, .atol = 1e-4, .grad_rtol = 1e-3, .grad_atol = 1e-4};
  for (const bool training : {true, false})
    check_module_parity(std::string("TransformerEncoderLayer") + (training ? " (train, dropout)" : " (eval)"),
                        maker<nn::TransformerEncoderLayer>(nn::TransformerEncoderLayerOptions{
                            .d_model = 32, .nhead = 4, .dim_feedforward = 64, .dropout = 0.1}),
                        rnd({2, 9, 32}, 18), training, block);
}

TEST(CudaLayers, ReferenceModelsMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor images = rnd({16, 1, 28, 28}, 19);  // (B, 1, 28, 28), as Fashion-MNIST batches
  const Tol model{.rtol = 1e-3, .atol = 1e-4, .grad_rtol = 2e-3, .grad_atol = 2e-4};
  for (const char* name : {"mlp", "cnn", "vit"})
    for (const bool training : {true, false})
      check_module_parity(
          std::string(name) + (training ? " (train)" : " (eval)"), [name] { return nn::make_model(name); }, images,
          training, model);
}

// Why the AdamW comparison below treats some parameters apart (runs everywhere, on the CPU): the
// CNN's conv biases sit in front of BatchNorm, whose mean subtraction cancels them, so their
// gradient is zero up to rounding while every other parameter's is not.
TEST(CudaLayersPremise, CnnConvBiasesBeforeBatchNormHaveAZeroGradient) {
  manual_seed(kInitSeed);
  auto cnn = nn::make_model("cnn");
  const Tensor images = rnd({8, 1, 28, 28}, 20);
  cross_entropy((*cnn)(Variable(images)), from_vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7})).backward();
  int zero = 0;
  for (const auto& [name, p] : cnn->named_parameters()) {
    const double g = max(abs(p.grad())).item();
    const bool conv_bias = name.ends_with(".bias") && p.data().dim() == 1 &&
                           (name.starts_with("features.0.") || name.starts_with("features.4."));
    if (g < 1e-6) {
      ++zero;
      EXPECT_TRUE(conv_bias) << name << " has a zero gradient but is not a conv bias in front of BatchNorm";
    } else {
      EXPECT_FALSE(conv_bias) << name << ": expected a zero gradient, got max |g| = " << g;
    }
  }
  EXPECT_EQ(zero, 2) << "two conv layers feed a BatchNorm";
}

// Two optimizer steps of the MLP and the CNN on each device from identical gradients: the CPU's,
// copied onto the GPU model's parameters. (Each device's own gradients match only to rounding,
// which ReferenceModelsMatchCpu checks; AdamW turns a gradient that is rounding noise — a conv bias
// in front of BatchNorm, a weight whose gradient is near zero — into a step of +-lr whose sign the
// noise picks, so steps from each device's own gradients cannot match.)
TEST(CudaLayers, SgdAndAdamWStepsOfAModelMatchCpu) {
  MINIDL_SKIP_WITHOUT_GPU();
  const Tensor images = rnd({8, 1, 28, 28}, 20);
  const Tensor labels = from_vector<int64_t>({0, 1, 2, 3, 4, 5, 6, 7});
  for (const char* name : {"mlp", "cnn"})
    for (const bool adamw : {false, true}) {
      const std::string what = std::string(name) + (adamw ? " AdamW" : " SGD");
      manual_seed(kInitSeed);
      auto cpu = nn::make_model(name);
      manual_seed(kInitSeed);
      auto gpu = nn::make_model(name);
      gpu->to(Device::cuda(0));
      auto make_opt = [adamw](nn::Module& m) -> std::unique_ptr<optim::Optimizer> {
        if (adamw)
          return std::make_unique<optim::AdamW>(m.parameters(), optim::AdamWOptions{.lr = 1e-3, .weight_decay = 0.05});
        return std::make_unique<optim::SGD>(m.parameters(),
                                            optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-4});
      };
      auto opt_c = make_opt(*cpu), opt_g = make_opt(*gpu);
      const auto pc = cpu->named_parameters(), pg = gpu->named_parameters();
      ASSERT_EQ(pc.size(), pg.size());
      for (int step = 0; step < 2; ++step) {  // the second step uses the momentum / moments of the first
        for (auto* opt : {opt_c.get(), opt_g.get()}) opt->zero_grad();
        cross_entropy((*cpu)(Variable(images)), labels).backward();
        for (size_t i = 0; i < pc.size(); ++i) {
          Variable p = pg[i].second;
          p.set_grad(on_gpu(pc[i].second.grad()));
        }
        opt_c->step();
        opt_g->step();
      }
      for (size_t i = 0; i < pc.size(); ++i)
        expect_cuda_matches_cpu(pg[i].second.data(), pc[i].second.data(), 1e-5, 1e-7, what + ": " + pc[i].first);
      const TensorMap sc = opt_c->state_dict(), sg = opt_g->state_dict();
      for (const auto& [key, t] : sc)
        if (key.starts_with("state.") && t.dim() > 0)
          minidl::testing::expect_close(sg.at(key).cpu(), t, 1e-5, 1e-9, what + ": optimizer " + key);
    }
}
