// examples/bench_core.cpp — Google Benchmark figures for the core: GEMM GFLOP/s (256..2048),
// conv2d forward/backward of the reference CNN's layers, element-wise bandwidth (GB/s), the
// transposing copy against strided_copy_reference (GB/s), and the
// cost of one tiny op with and without autograd (µs/op). tools/bench_torch.py measures the same
// things with PyTorch on the same machine; docs/benchmarks.md records both.
//   ./build/examples/bench_core --benchmark_min_time=0.5
//   OMP_NUM_THREADS=1 ./build/examples/bench_core    # one thread (minidl's default count: tensor/threads.h)
#include <benchmark/benchmark.h>

#include "minidl/autograd/autograd_all.h"
#include "minidl/kernels/cpu/copy.h"
#include "minidl/tensor/tensor_all.h"

using namespace minidl;

namespace {

// C (n, n) = A (n, n) B (n, n), float32: 2 n^3 flops
void BM_Gemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = randn({n, n}, RandomKey{1, 0}), b = randn({n, n}, RandomKey{1, 1});
  for (auto _ : state) benchmark::DoNotOptimize(mm(a, b));
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Gemm)->Arg(256)->Arg(512)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

// The reference CNN's two convolutions at batch 128: (128,1,28,28)->32 and (128,32,14,14)->64, 3x3 pad 1.
void conv_case(benchmark::State& state, bool backward) {
  const int64_t cin = state.range(0), cout = state.range(1), hw = state.range(2), n = 128;
  Tensor x = randn({n, cin, hw, hw}, RandomKey{2, 0}), w = randn({cout, cin, 3, 3}, RandomKey{2, 1});
  Tensor b = zeros({cout});
  Conv2dParams p{.pad_h = 1, .pad_w = 1};
  Tensor y = conv2d_forward(x, w, b, p);
  Tensor dy = ones_like(y);
  for (auto _ : state) {
    if (backward) {
      benchmark::DoNotOptimize(conv2d_backward(x, w, dy, true, p));
    } else {
      benchmark::DoNotOptimize(conv2d_forward(x, w, b, p));
    }
  }
  const double flops = 2.0 * n * cout * hw * hw * cin * 9 * (backward ? 2 : 1);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
void BM_Conv2dForward(benchmark::State& s) { conv_case(s, false); }
void BM_Conv2dBackward(benchmark::State& s) { conv_case(s, true); }
BENCHMARK(BM_Conv2dForward)->Args({1, 32, 28})->Args({32, 64, 14})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Conv2dBackward)->Args({1, 32, 28})->Args({32, 64, 14})->Unit(benchmark::kMillisecond)->UseRealTime();

// y = a + b over n float32: reads 2n, writes n elements
void BM_AddBandwidth(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = randn({n}, RandomKey{3, 0}), b = randn({n}, RandomKey{3, 1});
  for (auto _ : state) benchmark::DoNotOptimize(add(a, b));
  state.counters["GB/s"] =
      benchmark::Counter(12.0 * n * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AddBandwidth)->Arg(1 << 20)->Arg(1 << 24)->UseRealTime();

// x.transpose(1, 2).contiguous() for x (128, 49, 128) (an MLP-Mixer's token mixing): strided_copy's
// 16 x 16 tiles (arg 1) against strided_copy_reference's element loop (arg 0); reads and writes n
void BM_TransposedCopy(benchmark::State& state) {
  const std::vector<int64_t> shape{128, 128, 49}, src_strides{6272, 1, 128}, dst_strides{6272, 49, 1};
  Tensor x = randn({128, 49, 128}, RandomKey{4, 0}), y = empty({128, 128, 49});
  for (auto _ : state) {
    if (state.range(0)) {
      kernels::cpu::strided_copy(x.data<float>(), src_strides, y.data<float>(), dst_strides, shape);
    } else {
      kernels::cpu::strided_copy_reference(x.data<float>(), src_strides, y.data<float>(), dst_strides, shape);
    }
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] =
      benchmark::Counter(8.0 * x.numel() * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_TransposedCopy)->Arg(0)->Arg(1)->UseRealTime();

// One tiny op (add of two 1-element tensors): the per-op overhead of dispatch and allocation.
void BM_TinyOpTensor(benchmark::State& state) {
  Tensor a = ones({1}), b = ones({1});
  for (auto _ : state) benchmark::DoNotOptimize(add(a, b));
}
BENCHMARK(BM_TinyOpTensor);

// The same with autograd recording a graph node (inputs require grad).
void BM_TinyOpAutograd(benchmark::State& state) {
  Variable a(ones({1}), true), b(ones({1}), true);
  for (auto _ : state) benchmark::DoNotOptimize(add(a, b));
}
BENCHMARK(BM_TinyOpAutograd);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("minidl threads", std::to_string(get_num_threads()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
