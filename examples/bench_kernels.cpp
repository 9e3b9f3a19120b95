// examples/bench_kernels.cpp — the fast CPU kernels that bench_gemm, bench_attention and
// bench_core do not time, each against its plain *_reference on a shape a model runs: layer norm
// (the reference ViT's rows), group norm + ReLU (the zoo's U-Net, first level), the 2x2 stride-2
// transposed convolution (the U-Net's up-sampling), float32 -> bfloat16 conversion and rounding
// (kernels/cpu/half_span.h), and a linear layer's dW and db from one GEMM (gemm_row_sums, float32
// and, where the CPU runs it, bfloat16). Prints each pair's median time and the speed-up.
// The two alternate on the same operands; each figure is the median over the repetitions; with
// one thread the clock is the thread's CPU time, with more, wall time.
//   ./build/examples/bench_kernels [threads = 1] [repetitions = 11]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "minidl/kernels/cpu/conv_transpose2d.h"
#include "minidl/kernels/cpu/gemm.h"
#include "minidl/kernels/cpu/gemm_bf16.h"
#include "minidl/kernels/cpu/group_norm.h"
#include "minidl/kernels/cpu/half_span.h"
#include "minidl/kernels/cpu/layer_norm.h"
#include "minidl/kernels/cpu/parallel.h"
#include "kernel_timing.h"

namespace {

namespace k = minidl::kernels::cpu;
using minidl::examples::median;
using minidl::examples::now_s;

std::vector<float> values(size_t n, uint32_t seed) {  // in [-1, 1), a fixed pattern per seed
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7919 + seed * 104729) % 2000) * 1e-3f - 1.0f;
  return v;
}

// Times fast() and reference() in turn, `inner` calls per sample, and prints one row.
void compare(const std::string& kernel, const std::string& shape, int reps, const std::function<void()>& fast,
             const std::function<void()>& reference) {
  auto sample = [](const std::function<void()>& fn, int inner) {
    const double t0 = now_s();
    for (int i = 0; i < inner; ++i) fn();
    return (now_s() - t0) / inner;
  };
  // a few ms per sample: as many calls as the reference's first call says fit
  const double first = std::max(sample(reference, 1), sample(fast, 1));
  const int inner = std::clamp(static_cast<int>(5e-3 / std::max(first, 1e-7)), 1, 1000);
  std::vector<double> f, r;
  for (int i = 0; i < reps; ++i) {
    f.push_back(sample(fast, inner));
    r.push_back(sample(reference, inner));
  }
  std::printf("%-34s %-30s %10.1f %10.1f %7.2fx\n", kernel.c_str(), shape.c_str(), median(f) * 1e6, median(r) * 1e6,
              median(r) / median(f));
}

void layer_norm(int reps) {
  const int64_t rows = 128 * 50, M = 64;  // the ViT: batch 128, 50 tokens of 64
  const std::vector<float> x = values(rows * M, 1), dy = values(rows * M, 2), w = values(M, 3), b = values(M, 4);
  std::vector<float> y(x.size()), mean(rows), invstd(rows), dx(x.size()), part(k::layer_norm_chunks(rows) * 2 * M);
  std::vector<double> dw(M), db(M);
  const std::string shape = "rows 6400, 64 values";
  compare(
      "layer_norm_forward", shape, reps,
      [&] { k::layer_norm_forward(x.data(), rows, M, w.data(), b.data(), 1e-5, y.data(), mean.data(), invstd.data()); },
      [&] {
        k::layer_norm_forward_reference(x.data(), rows, M, w.data(), b.data(), 1e-5, y.data(), mean.data(),
                                        invstd.data());
      });
  compare(
      "layer_norm_backward", shape, reps,
      [&] {
        k::layer_norm_backward(dy.data(), x.data(), rows, M, mean.data(), invstd.data(), w.data(), dx.data(),
                               part.data(), dw.data(), db.data());
      },
      [&] {
        k::layer_norm_backward_reference(dy.data(), x.data(), rows, M, mean.data(), invstd.data(), w.data(), dx.data(),
                                         dw.data(), db.data());
      });
}

void group_norm(int reps) {
  const int64_t N = 128, C = 16, S = 28 * 28, G = 4;  // the U-Net's first level, GroupNorm(4, 16) + ReLU
  const std::vector<float> x = values(N * C * S, 5), dy = values(N * C * S, 6), w = values(C, 7), b = values(C, 8);
  std::vector<float> y(x.size()), mean(N * G), rstd(N * G), dx(x.size());
  std::vector<double> part(N * C * 2), dw(C), db(C);
  const std::string shape = "(128, 16, 28, 28), 4 groups";
  compare(
      "group_norm_forward (+ ReLU)", shape, reps,
      [&] {
        k::group_norm_forward(x.data(), N, C, S, G, w.data(), b.data(), 1e-5, y.data(), mean.data(), rstd.data(), true);
      },
      [&] {
        k::group_norm_forward_reference(x.data(), N, C, S, G, w.data(), b.data(), 1e-5, y.data(), mean.data(),
                                        rstd.data(), true);
      });
  compare(
      "group_norm_backward (+ ReLU)", shape, reps,
      [&] {
        k::group_norm_backward(dy.data(), x.data(), N, C, S, G, mean.data(), rstd.data(), w.data(), dx.data(),
                               part.data(), dw.data(), db.data(), b.data(), true);
      },
      [&] {
        k::group_norm_backward_reference(dy.data(), x.data(), N, C, S, G, mean.data(), rstd.data(), w.data(), dx.data(),
                                         dw.data(), db.data(), b.data(), true);
      });
}

void conv_transpose(int reps) {
  // the U-Net's up-sampling x (128, 64, 7, 7) -> y (128, 32, 14, 14), 2x2 stride 2, as the
  // convolution y -> x (kernels/cpu/conv_transpose2d.h)
  const int64_t N = 128, C_in = 64, H_in = 7, C_out = 32;
  const k::Conv2dShape s{N, C_out, 2 * H_in, 2 * H_in, C_in, 2, 2, 1, 2, 2, 0, 0, 1, 1, H_in, H_in};
  const std::vector<float> x = values(N * C_in * H_in * H_in, 9), w = values(C_in * C_out * 4, 10),
                           b = values(C_out, 11), dy = values(N * C_out * 4 * H_in * H_in, 12);
  std::vector<float> y(dy.size()), dx(x.size()), dw(w.size()), db(C_out);
  const std::string shape = "(128, 64, 7, 7) -> 32, 2x2 s2";
  compare(
      "conv_transpose2d_forward", shape, reps,
      [&] { k::conv_transpose2d_forward(x.data(), w.data(), b.data(), s, y.data()); },
      [&] { k::conv_transpose2d_forward_reference(x.data(), w.data(), b.data(), s, y.data()); });
  const int64_t dy_image = C_out * 4 * H_in * H_in;
  compare(
      "conv_transpose2d_backward", shape, reps,
      [&] {
        k::conv_transpose2d_backward(x.data(), w.data(), dy.data(), dy_image, s, dx.data(), dw.data(), db.data());
      },
      [&] {
        k::conv_transpose2d_backward_reference(x.data(), w.data(), dy.data(), s, dx.data(), dw.data(), db.data());
      });
}

void half_spans(int reps) {
  const int64_t n = int64_t(1) << 20;  // 4 MB of float32
  const std::vector<float> x = values(n, 13);
  std::vector<uint16_t> h(n);
  std::vector<float> r(n);
  const std::string shape = "2^20 values";
  compare(
      "float_to_bf16_span", shape, reps, [&] { k::float_to_bf16_span(x.data(), h.data(), n); },
      [&] { k::float_to_bf16_span_reference(x.data(), h.data(), n); });
  compare(
      "round_to_bf16_span", shape, reps, [&] { k::round_to_bf16_span(x.data(), r.data(), n); },
      [&] { k::round_to_bf16_span_reference(x.data(), r.data(), n); });
}

void row_sums(int reps) {
  // the ViT's fc1 weight and bias gradients: dW (128, 64) = dy^T x and db = dy's column sums,
  // dy (6400, 128) and x (6400, 64)
  const int64_t rows = 6400, out = 128, in = 64;
  const std::vector<float> dy = values(rows * out, 14), x = values(rows * in, 15);
  std::vector<float> dw(out * in), db(out);
  const std::string shape = "dy (6400, 128), x (6400, 64)";
  compare(
      "gemm_row_sums", shape, reps,
      [&] { k::gemm_row_sums(out, in, rows, dy.data(), out, true, x.data(), in, false, dw.data(), in, db.data()); },
      [&] {
        k::gemm_row_sums_reference(out, in, rows, dy.data(), out, true, x.data(), in, false, dw.data(), in, db.data());
      });
  if (!k::gemm_bf16_supported()) {
    std::printf("%-34s %-30s not run: this CPU has neither AVX512_BF16 nor AMX\n", "gemm_bf16_row_sums", shape.c_str());
    return;
  }
  std::vector<uint16_t> dy16(dy.size()), x16(x.size());
  k::float_to_bf16_span(dy.data(), dy16.data(), static_cast<int64_t>(dy.size()));
  k::float_to_bf16_span(x.data(), x16.data(), static_cast<int64_t>(x.size()));
  compare(
      "gemm_bf16_row_sums", shape, reps,
      [&] {
        k::gemm_bf16_row_sums(out, in, rows, dy16.data(), out, true, x16.data(), in, false, dw.data(), in, db.data());
      },
      [&] {
        k::gemm_bf16_row_sums_reference(out, in, rows, dy16.data(), out, true, x16.data(), in, false, dw.data(), in,
                                        db.data());
      });
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 11;
  if (argc > 3 || threads < 1 || reps < 1) {
    std::fprintf(stderr, "usage: bench_kernels [threads >= 1] [repetitions >= 1]\n");
    return 2;
  }
  k::set_num_threads(threads);
  minidl::examples::g_thread_cpu_clock = threads == 1;
  std::printf("threads %d, repetitions %d, %s; times in microseconds per call, medians\n", threads, reps,
              minidl::examples::g_thread_cpu_clock ? "thread CPU time" : "wall time");
  std::printf("%-34s %-30s %10s %10s %8s\n", "kernel", "shape", "fast", "reference", "speed-up");
  layer_norm(reps);
  group_norm(reps);
  conv_transpose(reps);
  half_spans(reps);
  row_sums(reps);
  return 0;
}
