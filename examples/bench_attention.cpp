// examples/bench_attention.cpp — the packed self-attention kernels (kernels/cpu/attention_forward.cpp,
// attention_backward.cpp) against their reference (gemm() on each head's strided views + the
// softmax rows, attention.h) on the reference ViT's attention (batch 128, 50 tokens, 4 heads of 16), two other head shapes
// and the zoo's TinyGPT's causal attention (64 tokens, 4 heads of 16; the reference masks, the
// fast kernel skips the masked half), forward and backward, in GFLOP/s: forward S = q k^T and
// P v, 4 * L^2 * D per head; backward dP, dq, dk, dv, 8 * L^2 * D per head (the softmax and its
// backward not counted; causal heads counted as full ones, so the ratio is the time ratio).
// The two alternate on the same operands and each figure is the median over the repetitions;
// with one thread the clock is the thread's CPU time, with more, wall time.
//   ./build/examples/bench_attention [threads = 1] [repetitions = 21]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "minidl/kernels/cpu/attention.h"
#include "minidl/kernels/cpu/parallel.h"
#include "kernel_timing.h"

namespace {

using minidl::examples::median;
using minidl::examples::now_s;

struct Shape {
  const char* what;
  int64_t B, L, H, D;
  bool causal = false;
};

}  // namespace

int main(int argc, char** argv) {
  namespace k = minidl::kernels::cpu;
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 21;
  if (threads < 1 || reps < 1) {
    std::fprintf(stderr, "usage: bench_attention [threads >= 1] [repetitions >= 1]\n");
    return 2;
  }
  k::set_num_threads(threads);
  minidl::examples::g_thread_cpu_clock = threads == 1;
  std::printf("threads %d, repetitions %d, %s\n", threads, reps,
              minidl::examples::g_thread_cpu_clock ? "thread CPU time" : "wall time");
  const Shape shapes[] = {
      {"vit (B 128, L 50, H 4, D 16)", 128, 50, 4, 16},
      {"L 197, H 3, D 64", 8, 197, 3, 64},
      {"L 64, H 8, D 8", 32, 64, 8, 8},
      {"gpt causal (B 128, L 64, H 4)", 128, 64, 4, 16, true},
  };
  std::printf("%-30s %-9s %12s %12s %7s\n", "shape", "pass", "fast GF/s", "ref GF/s", "ratio");
  for (const Shape& s : shapes) {
    const int64_t E = s.H * s.D;
    std::vector<float> qkv(static_cast<size_t>(s.B * s.L * 3 * E)), dctx(static_cast<size_t>(s.B * s.L * E));
    for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = static_cast<float>((i * 7919) % 1000) * 2e-3f - 1.0f;
    for (size_t i = 0; i < dctx.size(); ++i) dctx[i] = static_cast<float>((i * 104729) % 1000) * 1e-3f - 0.5f;
    std::vector<float> P(static_cast<size_t>(s.B * s.H * s.L * s.L)), work(P.size()), ctx(dctx.size()),
        dqkv(qkv.size());
    const float scale = 0.25f;
    const double head_flops = static_cast<double>(s.B * s.H) * static_cast<double>(s.L * s.L * s.D);
    for (bool backward : {false, true}) {
      const double flops = (backward ? 8.0 : 4.0) * head_flops;
      const int inner = std::max(1, static_cast<int>(2e8 / flops));  // a few ms per timed sample
      auto time_one = [&](bool fast) {
        const double t0 = now_s();
        for (int i = 0; i < inner; ++i) {
          if (!backward && fast)
            k::packed_attention_forward(qkv.data(), s.B, s.L, s.H, s.D, scale, P.data(), ctx.data(), s.causal);
          if (!backward && !fast)
            k::packed_attention_forward_reference(qkv.data(), s.B, s.L, s.H, s.D, scale, P.data(), ctx.data(),
                                                  s.causal);
          if (backward && fast)
            k::packed_attention_backward(qkv.data(), P.data(), dctx.data(), s.B, s.L, s.H, s.D, scale, dqkv.data(),
                                         s.causal);
          if (backward && !fast)
            k::packed_attention_backward_reference(qkv.data(), P.data(), dctx.data(), s.B, s.L, s.H, s.D, scale,
                                                   work.data(), dqkv.data());
        }
        return flops * inner / (now_s() - t0) / 1e9;
      };
      time_one(true);
      time_one(false);  // warm-up: scratch, caches
      std::vector<double> fast, ref;
      for (int r = 0; r < reps; ++r) {
        fast.push_back(time_one(true));
        ref.push_back(time_one(false));
      }
      std::printf("%-30s %-9s %12.1f %12.1f %6.2fx\n", s.what, backward ? "backward" : "forward", median(fast),
                  median(ref), median(fast) / median(ref));
    }
  }
  return 0;
}
