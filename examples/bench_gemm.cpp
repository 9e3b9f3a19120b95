// examples/bench_gemm.cpp — GFLOP/s of the packed AVX-512 float GEMM against Eigen's path (both in
// kernels/cpu/gemm.h) on the shapes the reference CNN and ViT run, and this core's FMA peak (a
// tight loop of independent AVX-512 FMAs), so each figure can be read as a fraction of peak; then
// the reference CNN's two convolutions (batch 128, 1 -> 32 channels on 28x28 and 32 -> 64 on 14x14,
// 3x3, padding 1) forward and backward as run (Winograd and direct, kernels/cpu/conv2d.h) against
// im2col + GEMM, in direct-convolution GFLOP/s (2 * N * O * C * 9 * H * W per pass; a backward
// pass with dx and dw counts twice that).
// The two kernels and the FMA loop alternate on the same operands; each figure is the median over
// the repetitions, so load changes on a shared machine hit all three alike. With one thread the
// clock is the thread's CPU time (time spent descheduled by other processes does not count);
// with more, wall time.
// Then gemm() against gemm_reference, the plain triple loop, at 128^3. The conv mode times only
// the convolutions, also the small MobileNet's depthwise and 1x1 ones and ResNet-20's stride-2 ones.
// The bf16 mode times instead the bfloat16 GEMM (kernels/cpu/gemm_bf16.h, bf16 operands, float32
// C; the kernel gemm_bf16 chose, named) against the float32 gemm() on the same values at 1024^3,
// where it chose AMX against the AVX512_BF16 kernel too, and against its plain reference loop at
// 128^3.
//   ./build/examples/bench_gemm [bf16 | conv] [threads = 1] [repetitions = 31]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "minidl/kernels/cpu/conv2d.h"
#include "minidl/kernels/cpu/conv2d_bf16.h"
#include "minidl/kernels/cpu/gemm.h"
#include "minidl/kernels/cpu/gemm_bf16.h"
#include "minidl/kernels/cpu/half.h"
#include "minidl/kernels/cpu/parallel.h"
#include "kernel_timing.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace {

using minidl::examples::median;
using minidl::examples::now_s;

#if defined(__x86_64__) && defined(__GNUC__)
// 16 independent chains of AVX-512 FMAs (16 floats each): 2 * 16 * 16 flops per iteration.
__attribute__((target("avx512f,fma"), noinline)) float fma_loop(int64_t iters) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(1.0f + 1e-3f * static_cast<float>(i));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it)
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  float out[16], sum = 0.0f;
  for (int i = 0; i < 16; ++i) {
    _mm512_storeu_ps(out, acc[i]);
    for (float v : out) sum += v;
  }
  return sum;
}

// One sample of the single-core FP32 peak in GFLOP/s (~5 ms), or 0 without AVX-512F.
double fma_peak() {
  if (!__builtin_cpu_supports("avx512f")) return 0.0;
  const int64_t iters = 500'000;
  static volatile float sink = 0;
  const double t0 = now_s();
  sink = sink + fma_loop(iters);
  return 2.0 * 16 * 16 * static_cast<double>(iters) / (now_s() - t0) / 1e9;
}
#else
double fma_peak() { return 0.0; }
#endif

struct Shape {
  const char* what;
  int64_t M, N, K;
  bool ta, tb;
};

// What gemm_bf16 is timed against: the float32 gemm() on the same values rounded to bf16, the
// AVX512_BF16 kernel, or gemm_bf16_reference.
enum class Bf16Peer { Float32, Avx512Bf16, Reference };

// GFLOP/s of gemm_bf16 against a peer on (n, n) row-major matrices, alternating the two; medians
// over the repetitions. Returns false when the CPU has no bf16 kernel.
bool bench_bf16_square(int64_t n, Bf16Peer peer, int reps) {
  namespace k = minidl::kernels::cpu;
  const size_t size = static_cast<size_t>(n * n);
  std::vector<float> A(size), B(size), C(size);
  std::vector<uint16_t> A16(size), B16(size);
  for (size_t i = 0; i < size; ++i) {
    A16[i] = k::float_to_bf16(static_cast<float>((i * 7919) % 1000) * 1e-3f - 0.5f);
    B16[i] = k::float_to_bf16(static_cast<float>((i * 104729) % 1000) * 1e-3f - 0.5f);
    A[i] = k::bf16_to_float(A16[i]);
    B[i] = k::bf16_to_float(B16[i]);
  }
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  // ~5-10 ms per timed sample of the slower kernel (the reference runs a few GFLOP/s)
  const int inner = std::max(1, static_cast<int>((peer == Bf16Peer::Reference ? 2e7 : 5e8) / flops));
  bool ok = true;
  auto time_one = [&](bool bf16) {
    const double t0 = now_s();
    for (int i = 0; i < inner; ++i) {
      if (bf16)
        ok = k::gemm_bf16(n, n, n, A16.data(), n, false, B16.data(), n, false, C.data(), n);
      else if (peer == Bf16Peer::Reference)
        k::gemm_bf16_reference(n, n, n, A16.data(), n, false, B16.data(), n, false, C.data(), n);
      else if (peer == Bf16Peer::Avx512Bf16)
        k::gemm_bf16_avx512(n, n, n, A16.data(), n, false, B16.data(), n, false, C.data(), n);
      else
        k::gemm(n, n, n, A.data(), n, false, B.data(), n, false, C.data(), n);
    }
    return flops * inner / (now_s() - t0) / 1e9;
  };
  time_one(true);
  if (!ok) return false;
  time_one(false);  // warm-up: buffers, caches
  std::vector<double> fast, other;
  for (int r = 0; r < reps; ++r) {
    fast.push_back(time_one(true));
    other.push_back(time_one(false));
  }
  const double f = median(fast), o = median(other);
  const char* peer_name = peer == Bf16Peer::Reference    ? "(gemm_bf16_reference)"
                          : peer == Bf16Peer::Avx512Bf16 ? "(gemm_bf16_avx512)"
                                                         : "(float32 gemm)";
  std::printf("%5lld^3 %14.1f %14.1f %-24s %6.2fx\n", static_cast<long long>(n), f, o, peer_name, f / o);
  return true;
}

// GFLOP/s of gemm() (the packed kernel at this size) against gemm_reference, the plain triple
// loop, on (n, n) row-major matrices, alternating the two; medians over the repetitions.
void bench_reference_square(int64_t n, int reps) {
  namespace k = minidl::kernels::cpu;
  const size_t size = static_cast<size_t>(n * n);
  std::vector<float> A(size), B(size), C(size);
  for (size_t i = 0; i < size; ++i) {
    A[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f - 0.5f;
    B[i] = static_cast<float>((i * 104729) % 1000) * 1e-3f - 0.5f;
  }
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  auto time_one = [&](bool fast, int inner) {
    const double t0 = now_s();
    for (int i = 0; i < inner; ++i) {
      if (fast)
        k::gemm(n, n, n, A.data(), n, false, B.data(), n, false, C.data(), n);
      else
        k::gemm_reference(n, n, n, A.data(), n, false, B.data(), n, false, C.data(), n);
    }
    return flops * inner / (now_s() - t0) / 1e9;
  };
  const int inner_fast = std::max(1, static_cast<int>(5e8 / flops)),
            inner_ref = std::max(1, static_cast<int>(2e7 / flops));
  time_one(true, inner_fast);
  time_one(false, inner_ref);  // warm-up: buffers, caches
  std::vector<double> fast, ref;
  for (int r = 0; r < reps; ++r) {
    fast.push_back(time_one(true, inner_fast));
    ref.push_back(time_one(false, inner_ref));
  }
  std::printf("\n%-26s %12s %12s %7s\n%-26s %12.1f %12.1f %6.2fx\n", "square, against the loop", "gemm GF/s",
              "ref GF/s", "ratio", ("square " + std::to_string(n) + " (gemm_reference)").c_str(), median(fast),
              median(ref), median(fast) / median(ref));
}

void bench_bf16_convs(int reps);

int bench_bf16(int threads, int reps) {
  namespace k = minidl::kernels::cpu;
  std::printf("bf16 GEMM (%s kernel), threads %d, repetitions %d, %s\n%7s %14s %14s %-24s %7s\n",
              k::gemm_bf16_amx_supported() ? "AMX" : "AVX512_BF16", threads, reps,
              minidl::examples::g_thread_cpu_clock ? "thread CPU time" : "wall time", "size", "gemm_bf16 GF/s",
              "other GF/s", "other", "ratio");
  if (!bench_bf16_square(1024, Bf16Peer::Float32, reps)) {
    std::printf("neither AMX nor AVX512_BF16 here (the CPU, or MINIDL_CPU_CAPABILITY): gemm_bf16 returns false\n");
    return 0;
  }
  if (k::gemm_bf16_amx_supported()) bench_bf16_square(1024, Bf16Peer::Avx512Bf16, reps);
  bench_bf16_square(128, Bf16Peer::Reference, std::max(3, reps / 3));
  if (minidl::kernels::cpu::gemm_bf16_amx_supported()) bench_bf16_convs(reps);
  return 0;
}

// Convolutions as run (kernels/cpu/conv2d.h's dispatch) against im2col + GEMM, batch 128, as in a
// training step: the reference CNN's two (conv1's input needs no gradient), then the small
// MobileNet's depthwise and pointwise ones and ResNet-20's stride-2 ones (examples/zoo/).
void bench_convs(int reps) {
  struct ConvCase {
    const char* what;
    minidl::kernels::cpu::Conv2dShape shape;
    bool backward, dx;
  };
  using Shape2d = minidl::kernels::cpu::Conv2dShape;
  // (N, C, H, W, O, kH, kW, groups, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, H_out, W_out)
  const Shape2d conv1{128, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 28, 28},
      conv2{128, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 14, 14},
      dw32{128, 32, 32, 32, 32, 3, 3, 32, 1, 1, 1, 1, 1, 1, 32, 32},
      dw64s2{128, 64, 32, 32, 64, 3, 3, 64, 2, 2, 1, 1, 1, 1, 16, 16},
      dw256{128, 256, 8, 8, 256, 3, 3, 256, 1, 1, 1, 1, 1, 1, 8, 8},
      pw32{128, 32, 32, 32, 64, 1, 1, 1, 1, 1, 0, 0, 1, 1, 32, 32},
      pw128{128, 128, 16, 16, 128, 1, 1, 1, 1, 1, 0, 0, 1, 1, 16, 16},
      s2{128, 16, 32, 32, 32, 3, 3, 1, 2, 2, 1, 1, 1, 1, 16, 16},
      s2b{128, 32, 16, 16, 64, 3, 3, 1, 2, 2, 1, 1, 1, 1, 8, 8},
      short2{128, 16, 32, 32, 32, 1, 1, 1, 2, 2, 0, 0, 1, 1, 16, 16};
  const ConvCase convs[] = {
      {"cnn conv2 forward (with bias)", conv2, false, false},  {"cnn conv2 backward (dx, dw, db)", conv2, true, true},
      {"cnn conv2 backward (dw, db)", conv2, true, false},     {"cnn conv1 forward (with bias)", conv1, false, false},
      {"cnn conv1 backward (dw, db)", conv1, true, false},     {"dw 32ch 32x32 forward", dw32, false, false},
      {"dw 32ch 32x32 backward (dx, dw)", dw32, true, true},   {"dw 64ch 32x32 stride 2 forward", dw64s2, false, false},
      {"dw 64ch 32x32 stride 2 backward", dw64s2, true, true}, {"dw 256ch 8x8 forward", dw256, false, false},
      {"dw 256ch 8x8 backward (dx, dw)", dw256, true, true},   {"1x1 32->64 32x32 forward", pw32, false, false},
      {"1x1 32->64 32x32 backward", pw32, true, true},         {"1x1 128->128 16x16 forward", pw128, false, false},
      {"1x1 128->128 16x16 backward", pw128, true, true},      {"3x3 16->32 stride 2 forward", s2, false, false},
      {"3x3 16->32 stride 2 backward", s2, true, true},        {"3x3 32->64 stride 2 forward", s2b, false, false},
      {"3x3 32->64 stride 2 backward", s2b, true, true},       {"1x1 16->32 stride 2 forward", short2, false, false},
      {"1x1 16->32 stride 2 backward", short2, true, true}};
  std::printf("\n%-40s %14s %14s %7s\n", "convolution (batch 128)", "as run GF/s", "im2col GF/s", "ratio");
  for (const ConvCase& c : convs) {
    const auto& cs = c.shape;
    const int64_t K = cs.C / cs.groups * cs.kH * cs.kW;  // multiply-adds per output
    std::vector<float> x(static_cast<size_t>(cs.N * cs.C * cs.H * cs.W)), w(static_cast<size_t>(cs.O * K)),
        bias(static_cast<size_t>(cs.O)), y(static_cast<size_t>(cs.N * cs.O * cs.H_out * cs.W_out)), dx(x.size()),
        dw(w.size()), db(bias.size());
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f - 0.5f;
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 104729) % 1000) * 1e-3f - 0.5f;
    const std::vector<float> dy(y.size(), 0.01f);
    const double pass_flops = 2.0 * static_cast<double>(cs.N * cs.O * K * cs.H_out * cs.W_out);
    const double flops = pass_flops * (c.backward ? (c.dx ? 2 : 1) : 1);
    auto time_one = [&](bool fast) {
      const double t0 = now_s();
      namespace k = minidl::kernels::cpu;
      float* dx_or_null = c.dx ? dx.data() : nullptr;
      if (!c.backward && fast) k::conv2d_forward(x.data(), w.data(), bias.data(), cs, y.data());
      if (!c.backward && !fast) k::conv2d_forward_reference(x.data(), w.data(), bias.data(), cs, y.data());
      if (c.backward && fast) k::conv2d_backward(x.data(), w.data(), dy.data(), cs, dx_or_null, dw.data(), db.data());
      if (c.backward && !fast)
        k::conv2d_backward_reference(x.data(), w.data(), dy.data(), cs, dx_or_null, dw.data(), db.data());
      return flops / (now_s() - t0) / 1e9;
    };
    time_one(true);
    time_one(false);
    std::vector<double> fast, ref;
    for (int r = 0; r < std::max(3, reps / 3); ++r) {
      fast.push_back(time_one(true));
      ref.push_back(time_one(false));
    }
    std::printf("%-40s %14.1f %14.1f %6.2fx\n", c.what, median(fast), median(ref), median(fast) / median(ref));
  }
}

// Convolutions under autocast(BFloat16) where conv2d_bf16_pays (kernels/cpu/conv2d_bf16.h: the
// implicit GEMM on AMX tiles for stride 1, else im2col + the bf16 GEMM) against the float32
// kernels as run on the same values, batch 128: the reference CNN's two, ResNet-20's 3x3, stride-2
// and 1x1 ones and the ViT's patch embedding, in direct-convolution GFLOP/s.
void bench_bf16_convs(int reps) {
  namespace k = minidl::kernels::cpu;
  using Shape2d = k::Conv2dShape;
  struct ConvCase {
    const char* what;
    Shape2d shape;
    bool backward, dx;
  };
  const Shape2d conv1{128, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 28, 28},
      conv2{128, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 14, 14},
      s2b{128, 32, 16, 16, 64, 3, 3, 1, 2, 2, 1, 1, 1, 1, 8, 8},
      r64{128, 64, 8, 8, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1, 8, 8}, pw{128, 32, 16, 16, 64, 1, 1, 1, 2, 2, 0, 0, 1, 1, 8, 8},
      pw128{128, 128, 16, 16, 128, 1, 1, 1, 1, 1, 0, 0, 1, 1, 16, 16},
      patch{128, 1, 28, 28, 64, 4, 4, 1, 4, 4, 0, 0, 1, 1, 7, 7};
  const ConvCase convs[] = {{"cnn conv2 forward (with bias)", conv2, false, false},
                            {"cnn conv2 backward (dx, dw, db)", conv2, true, true},
                            {"cnn conv1 forward (with bias)", conv1, false, false},
                            {"cnn conv1 backward (dw, db)", conv1, true, false},
                            {"3x3 32->64 stride 2 forward", s2b, false, false},
                            {"3x3 32->64 stride 2 backward", s2b, true, true},
                            {"3x3 64->64 8x8 forward", r64, false, false},
                            {"3x3 64->64 8x8 backward", r64, true, true},
                            {"1x1 32->64 stride 2 forward", pw, false, false},
                            {"1x1 32->64 stride 2 backward", pw, true, true},
                            {"1x1 128->128 16x16 forward", pw128, false, false},
                            {"1x1 128->128 16x16 backward", pw128, true, true},
                            {"vit patch 4x4 stride 4 forward", patch, false, false},
                            {"vit patch 4x4 stride 4 backward (dw)", patch, true, false}};
  std::printf("\n%-40s %14s %14s %7s\n", "convolution (batch 128)", "bf16 GF/s", "float32 GF/s", "ratio");
  for (const ConvCase& c : convs) {
    const auto& cs = c.shape;
    if (!k::conv2d_bf16_pays(cs)) {  // autocast widens these for the float32 kernels
      std::printf("%-40s %14s\n", c.what, "float32 here (conv2d_bf16_pays: false)");
      continue;
    }
    const int64_t K = cs.C * cs.kH * cs.kW;
    const size_t xn = static_cast<size_t>(cs.N * cs.C * cs.H * cs.W), wn = static_cast<size_t>(cs.O * K),
                 yn = static_cast<size_t>(cs.N * cs.O * cs.H_out * cs.W_out);
    std::vector<float> x(xn), w(wn), bias(static_cast<size_t>(cs.O)), y(yn), dx(xn), dw(wn), db(bias.size());
    std::vector<uint16_t> x16(xn), w16(wn), dy16(yn, k::float_to_bf16(0.01f));
    for (size_t i = 0; i < xn; ++i) x16[i] = k::float_to_bf16(static_cast<float>((i * 7919) % 1000) * 1e-3f - 0.5f);
    for (size_t i = 0; i < wn; ++i) w16[i] = k::float_to_bf16(static_cast<float>((i * 104729) % 1000) * 1e-3f - 0.5f);
    for (size_t i = 0; i < xn; ++i) x[i] = k::bf16_to_float(x16[i]);
    for (size_t i = 0; i < wn; ++i) w[i] = k::bf16_to_float(w16[i]);
    const std::vector<float> dy(yn, k::bf16_to_float(dy16[0]));
    const double flops =
        2.0 * static_cast<double>(cs.N * cs.O * K * cs.H_out * cs.W_out) * (c.backward ? (c.dx ? 2 : 1) : 1);
    auto time_one = [&](bool low) {
      const double t0 = now_s();
      float* dx_or_null = c.dx ? dx.data() : nullptr;
      if (!c.backward && low) k::conv2d_bf16_forward(x16.data(), w16.data(), bias.data(), cs, y.data());
      if (!c.backward && !low) k::conv2d_forward(x.data(), w.data(), bias.data(), cs, y.data());
      if (c.backward && low) {
        k::conv2d_bf16_backward(x16.data(), w16.data(), dy16.data(), cs, dx_or_null, dw.data());
        k::conv2d_bias_grad(dy.data(), cs, db.data());
      }
      if (c.backward && !low) k::conv2d_backward(x.data(), w.data(), dy.data(), cs, dx_or_null, dw.data(), db.data());
      return flops / (now_s() - t0) / 1e9;
    };
    time_one(true);
    time_one(false);
    std::vector<double> low, wide;
    for (int r = 0; r < std::max(3, reps / 3); ++r) {
      low.push_back(time_one(true));
      wide.push_back(time_one(false));
    }
    std::printf("%-40s %14.1f %14.1f %6.2fx\n", c.what, median(low), median(wide), median(low) / median(wide));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool bf16 = argc > 1 && std::strcmp(argv[1], "bf16") == 0;
  const bool conv = argc > 1 && std::strcmp(argv[1], "conv") == 0;
  if (bf16 || conv) --argc, ++argv;
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 31;
  if (threads < 1 || reps < 1) {
    std::fprintf(stderr, "usage: bench_gemm [bf16 | conv] [threads >= 1] [repetitions >= 1]\n");
    return 2;
  }
  minidl::kernels::cpu::set_num_threads(threads);
  minidl::examples::g_thread_cpu_clock = threads == 1;
  if (bf16) return bench_bf16(threads, reps);
  if (conv) {
    std::printf("threads %d, repetitions %d, %s\n", threads, std::max(3, reps / 3),
                minidl::examples::g_thread_cpu_clock ? "thread CPU time" : "wall time");
    bench_convs(reps);
    return 0;
  }
  std::vector<double> peaks;
  for (int r = 0; r < 15; ++r) peaks.push_back(fma_peak());
  const double peak = median(peaks);
  std::printf("threads %d, repetitions %d, %s; one core's FMA peak (AVX-512 FP32 loop): %.1f GFLOP/s\n", threads, reps,
              minidl::examples::g_thread_cpu_clock ? "thread CPU time" : "wall time", peak);
  if (peak == 0.0) {
    std::printf("no AVX-512F on this CPU: gemm_avx512 is not used, nothing to compare\n");
    return 0;
  }
  const Shape shapes[] = {
      {"conv2 fwd   y = w col", 64, 196, 288, false, false},  {"conv2 dW   dw = dy col^T", 64, 288, 196, false, true},
      {"conv2 dX  dcol = w^T dy", 288, 196, 64, true, false}, {"vit qkv     y = x W^T", 6400, 192, 64, false, true},
      {"vit proj    y = x W^T", 6400, 64, 64, false, true},   {"vit fc1     y = x W^T", 6400, 128, 64, false, true},
      {"vit fc2     y = x W^T", 6400, 64, 128, false, true},  {"vit qkv dX dx = dy W", 6400, 64, 192, false, false},
      {"vit fc1 dX dx = dy W", 6400, 64, 128, false, false},  {"vit fc2 dX dx = dy W", 6400, 128, 64, false, false},
      {"vit qkv dW dW = dy^T x", 192, 64, 6400, true, false}, {"vit fc1 dW dW = dy^T x", 128, 64, 6400, true, false},
      {"vit fc2 dW dW = dy^T x", 64, 128, 6400, true, false}, {"square 512", 512, 512, 512, false, false},
  };
  std::printf("%-26s %5s %5s %5s %2s %2s %12s %12s %7s %8s\n", "shape", "M", "N", "K", "tA", "tB", "avx512 GF/s",
              "Eigen GF/s", "ratio", "% peak");
  for (const Shape& s : shapes) {
    const size_t a_size = static_cast<size_t>(s.M * s.K), b_size = static_cast<size_t>(s.K * s.N);
    std::vector<float> A(a_size), B(b_size), C(static_cast<size_t>(s.M * s.N));
    for (size_t i = 0; i < a_size; ++i) A[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f - 0.5f;
    for (size_t i = 0; i < b_size; ++i) B[i] = static_cast<float>((i * 104729) % 1000) * 1e-3f - 0.5f;
    const int64_t lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    const double flops = 2.0 * static_cast<double>(s.M) * static_cast<double>(s.N) * static_cast<double>(s.K);
    const int inner = std::max(1, static_cast<int>(5e8 / flops));  // ~5-10 ms per timed sample
    auto time_one = [&](bool packed) {
      const double t0 = now_s();
      for (int i = 0; i < inner; ++i) {
        if (packed)
          minidl::kernels::cpu::gemm_avx512(s.M, s.N, s.K, A.data(), lda, s.ta, B.data(), ldb, s.tb, C.data(), s.N,
                                            1.0f, 0.0f);
        else
          minidl::kernels::cpu::gemm_eigen(s.M, s.N, s.K, A.data(), lda, s.ta, B.data(), ldb, s.tb, C.data(), s.N, 1.0f,
                                           0.0f);
      }
      return flops * inner / (now_s() - t0) / 1e9;
    };
    time_one(true);
    time_one(false);  // warm-up: buffers, caches
    std::vector<double> packed, eigen, of_peak;
    for (int r = 0; r < reps; ++r) {
      packed.push_back(time_one(true));
      eigen.push_back(time_one(false));
      of_peak.push_back(packed.back() / (fma_peak() * threads));
    }
    const double p = median(packed), e = median(eigen);
    std::printf("%-26s %5lld %5lld %5lld %2d %2d %12.1f %12.1f %6.2fx %7.0f%%\n", s.what, static_cast<long long>(s.M),
                static_cast<long long>(s.N), static_cast<long long>(s.K), s.ta, s.tb, p, e, p / e,
                100.0 * median(of_peak));
  }
  bench_reference_square(128, std::max(3, reps / 3));

  bench_convs(reps);
  return 0;
}
