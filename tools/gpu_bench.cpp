// tools/gpu_bench.cpp — the GPU benchmarks and the one-epoch GPU training run of tools/gpu_check.sh.
// Built only with CUDA. Each mode prints one JSON object on stdout (the script collects them):
//   gpu_bench gemm                       GEMM TFLOP/s: minidl's mm on CUDA tensors vs cuBLAS called
//                                        directly on the same shapes (FP32, TF32 off; then TF32 on;
//                                        then bfloat16 operands with a float32 product)
//   gpu_bench models [--batch 512] [--precision fp32|bf16]
//                                        training images/s of each reference model (mlp, cnn, vit)
//                                        on synthetic 28x28 inputs, and the share of each step the GPU
//                                        is busy (CUDA events around the step vs host wall time);
//                                        bf16: forward and loss under autocast(BFloat16)
//   gpu_bench epoch MODEL DATA_DIR       one epoch of Fashion-MNIST (idx files in DATA_DIR) on the GPU
//                                        with SGD(momentum 0.9), then test accuracy
//   gpu_bench --help                     the usage, exit 0, without touching CUDA
// Models move to the GPU with nn::Module::to.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "minidl/autograd/autograd_all.h"
#include "minidl/data/mnist.h"
#include "minidl/kernels/cuda_api.h"
#include "minidl/kernels/cuda_ops.h"
#include "minidl/nn/nn_all.h"
#include "minidl/optim/sgd.h"
#include "minidl/tensor/tensor_all.h"

using namespace minidl;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---- GEMM ----
double time_it(int iters, const std::function<void()>& f) {
  f();
  kernels::cuda::synchronize(0);
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) f();
  kernels::cuda::synchronize(0);
  return seconds_since(t0) / iters;
}

void bench_gemm() {
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate failed");
  cublasSetStream(h, static_cast<cudaStream_t>(kernels::cuda::compute_stream(0)));
  std::printf("{\"mode\": \"gemm\", \"results\": [");
  bool first = true;
  for (bool tf32 : {false, true}) {
    kernels::cuda::set_allow_tf32(tf32);
    cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH);
    for (const auto& [M, N, K] : std::vector<std::tuple<int, int, int>>{
             {4096, 4096, 4096}, {8192, 8192, 8192}, {512 * 50, 192, 64}, {512, 3072, 768}}) {
      const Tensor a = randn({M, K}, RandomKey{1, 1}).to(Device::cuda(0));
      const Tensor b = randn({K, N}, RandomKey{1, 2}).to(Device::cuda(0));
      Tensor c({M, N}, DType::Float32, Device::cuda(0));
      const int iters = 10;
      const double t_minidl = time_it(iters, [&] { c = mm(a, b); });
      const float one = 1.0f, zero = 0.0f;
      const double t_cublas = time_it(iters, [&] {
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, static_cast<const float*>(b.raw_data()), N,
                    static_cast<const float*>(a.raw_data()), K, &zero, static_cast<float*>(c.raw_data()), N);
      });
      const double flops = 2.0 * M * N * K;
      std::printf(
          "%s{\"M\": %d, \"N\": %d, \"K\": %d, \"tf32\": %s, \"dtype\": \"fp32\", \"minidl_tflops\": %.2f, "
          "\"cublas_tflops\": %.2f, "
          "\"ratio\": %.3f}",
          first ? "" : ", ", M, N, K, tf32 ? "true" : "false", flops / t_minidl / 1e12, flops / t_cublas / 1e12,
          t_cublas / t_minidl);
      first = false;
    }
  }
  kernels::cuda::set_allow_tf32(false);
  cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
  for (const auto& [M, N, K] : std::vector<std::tuple<int, int, int>>{{4096, 4096, 4096}, {8192, 8192, 8192}}) {
    // bfloat16 operands, float32 C and accumulation: autocast's product
    const Tensor a = randn({M, K}, RandomKey{1, 1}).to(DType::BFloat16).to(Device::cuda(0));
    const Tensor b = randn({K, N}, RandomKey{1, 2}).to(DType::BFloat16).to(Device::cuda(0));
    Tensor c({M, N}, DType::Float32, Device::cuda(0));
    const int iters = 10;
    const double t_minidl = time_it(iters, [&] { c = mm(a, b); });
    const float one = 1.0f, zero = 0.0f;
    const double t_cublas = time_it(iters, [&] {
      cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, b.raw_data(), CUDA_R_16BF, N, a.raw_data(), CUDA_R_16BF,
                   K, &zero, c.raw_data(), CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    });
    const double flops = 2.0 * M * N * K;
    std::printf(
        ", {\"M\": %d, \"N\": %d, \"K\": %d, \"tf32\": false, \"dtype\": \"bf16\", \"minidl_tflops\": %.2f, "
        "\"cublas_tflops\": %.2f, \"ratio\": %.3f}",
        M, N, K, flops / t_minidl / 1e12, flops / t_cublas / 1e12, t_cublas / t_minidl);
  }
  std::printf("]}\n");
  cublasDestroy(h);
}

// ---- training ----
// low: Float32 (plain), or BFloat16 / Float16 for the forward and loss under autocast
double train_step(nn::Module& model, optim::SGD& opt, const Tensor& x, const Tensor& y, DType low = DType::Float32) {
  opt.zero_grad();
  Variable loss;
  {
    autocast guard(low);
    loss = cross_entropy(model(Variable(x)), y);
  }
  loss.backward();
  opt.step();
  return loss.data().item();
}

std::vector<Variable> params_of(nn::Module& m) {
  std::vector<Variable> ps;
  for (auto& [n, p] : m.named_parameters()) ps.push_back(p);
  return ps;
}

void bench_models(int64_t batch, const std::string& precision) {
  const DType low = precision == "bf16" ? DType::BFloat16 : DType::Float32;
  std::printf("{\"mode\": \"models\", \"batch\": %lld, \"precision\": \"%s\", \"results\": [",
              static_cast<long long>(batch), precision.c_str());
  bool first = true;
  for (const std::string name : {"mlp", "cnn", "vit"}) {
    manual_seed(0);
    auto model = nn::make_model(name);
    model->to(Device::cuda(0));
    optim::SGD opt(params_of(*model), {.lr = 0.01, .momentum = 0.9});
    const Tensor x = randn({batch, 1, 28, 28}, RandomKey{5, 5}).to(Device::cuda(0));
    const Tensor y = randint(0, 10, {batch}, RandomKey{5, 6}).to(Device::cuda(0));
    for (int i = 0; i < 3; ++i) train_step(*model, opt, x, y, low);
    kernels::cuda::synchronize(0);
    cudaStream_t s = static_cast<cudaStream_t>(kernels::cuda::compute_stream(0));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const int steps = 20;
    const auto t0 = Clock::now();
    cudaEventRecord(e0, s);
    for (int i = 0; i < steps; ++i) train_step(*model, opt, x, y, low);
    cudaEventRecord(e1, s);
    kernels::cuda::synchronize(0);
    const double wall = seconds_since(t0);
    float gpu_ms = 0;
    cudaEventElapsedTime(&gpu_ms, e0, e1);
    std::printf(
        "%s{\"model\": \"%s\", \"precision\": \"%s\", \"images_per_s\": %.1f, \"step_ms\": %.3f, \"gpu_span_ms\": "
        "%.3f}",
        first ? "" : ", ", name.c_str(), precision.c_str(), steps * batch / wall, wall / steps * 1e3, gpu_ms / steps);
    first = false;
  }
  std::printf("]}\n");
}

void train_epoch(const std::string& name, const std::string& dir) {
  const Tensor train_x = data::read_idx_images(dir + "/train-images-idx3-ubyte.gz");
  const Tensor train_y = data::read_idx_labels(dir + "/train-labels-idx1-ubyte.gz");
  const Tensor test_x = data::read_idx_images(dir + "/t10k-images-idx3-ubyte.gz");
  const Tensor test_y = data::read_idx_labels(dir + "/t10k-labels-idx1-ubyte.gz");
  const Device dev = Device::cuda(0);
  // (N, 28, 28) uint8 -> (N, 1, 28, 28) float in [0, 1], normalised, on the GPU once
  auto prep = [&](const Tensor& imgs) {
    Tensor f = imgs.to(DType::Float32).to(dev);
    return ((f / 255.0) - 0.2860) / 0.3530;
  };
  const Tensor X = prep(train_x).reshape({-1, 1, 28, 28}), Y = train_y.to(DType::Int64).to(dev);
  const Tensor TX = prep(test_x).reshape({-1, 1, 28, 28}), TY = test_y.to(DType::Int64).to(dev);
  manual_seed(0);
  auto model = nn::make_model(name);
  model->to(dev);
  optim::SGD opt(params_of(*model), {.lr = 0.05, .momentum = 0.9});
  const int64_t batch = 256, n = X.size(0);
  const Tensor perm = randperm(n, RandomKey{9, 0}).to(dev);
  model->train();
  const auto t0 = Clock::now();
  double last_loss = 0;
  for (int64_t b = 0; b + batch <= n; b += batch) {
    const Tensor idx = perm.narrow(0, b, batch);
    last_loss = train_step(*model, opt, index_select(X, 0, idx), index_select(Y, 0, idx));
  }
  kernels::cuda::synchronize(0);
  const double train_s = seconds_since(t0);
  model->eval();
  int64_t correct = 0;
  {
    NoGradGuard ng;
    for (int64_t b = 0; b < TX.size(0); b += 1000) {
      const int64_t len = std::min<int64_t>(1000, TX.size(0) - b);
      Variable logits = (*model)(Variable(TX.narrow(0, b, len)));
      correct += static_cast<int64_t>(sum(eq(argmax(logits.data(), 1), TY.narrow(0, b, len))).item());
    }
  }
  std::printf(
      "{\"mode\": \"epoch\", \"model\": \"%s\", \"train_seconds\": %.2f, \"images_per_s\": %.1f, "
      "\"last_loss\": %.4f, \"test_accuracy\": %.4f}\n",
      name.c_str(), train_s, n / train_s, last_loss, double(correct) / double(TX.size(0)));
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage = "usage: gpu_bench gemm | models [--batch N] [--precision fp32|bf16] | epoch MODEL DATA_DIR\n";
  if (argc == 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
    std::cout << usage;  // before any CUDA call: tools/gpu_check.sh's start-up check of a prebuilt kit
    return 0;
  }
  try {
    if (kernels::cuda::device_count() == 0) {
      std::cerr << "gpu_bench: no CUDA device present\n";
      return 2;
    }
    kernels::cuda::set_device(0);
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode == "gemm")
      bench_gemm();
    else if (mode == "models") {
      int64_t batch = 512;
      std::string precision = "fp32";
      for (int i = 2; i < argc; i += 2) {
        const std::string flag = argv[i];
        if (i + 1 >= argc || (flag != "--batch" && flag != "--precision"))
          throw std::invalid_argument("models: unknown or incomplete option '" + flag + "'\n" + usage);
        if (flag == "--batch")
          batch = std::stoll(argv[i + 1]);
        else
          precision = argv[i + 1];
      }
      if (batch < 1) throw std::invalid_argument("models: --batch must be positive");
      if (precision != "fp32" && precision != "bf16")
        throw std::invalid_argument("models: --precision must be fp32 or bf16, not '" + precision + "'");
      bench_models(batch, precision);
    } else if (mode == "epoch" && argc == 4)
      train_epoch(argv[2], argv[3]);
    else {
      std::cerr << usage;
      return 2;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "gpu_bench: " << e.what() << "\n";
    return 1;
  }
}
