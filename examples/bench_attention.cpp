// examples/bench_attention.cpp — the packed self-attention kernels (kernels/cpu/attention_forward.cpp,
// attention_backward.cpp) against their reference (gemm() on each head's strided views + the
// softmax rows, attention.h) on the reference ViT's attention (batch 128, 50 tokens, 4 heads of 16), two other head shapes
// and the zoo's TinyGPT's causal attention (64 tokens, 4 heads of 16; the reference masks, the
// fast kernel skips the masked half), forward and backward, in GFLOP/s: forward S = q k^T and
// P v, 4 * L^2 * D per head; backward dP, dq, dk, dv, 8 * L^2 * D per head (the softmax and its
// backward not counted; causal heads counted as full ones, so the ratio is the time ratio).
// The same for the bfloat16-product kernels (attention_bf16.cpp, where the CPU has AVX512_BF16)
// against their reference (gemm_bf16_reference per head, a plain loop), and the bfloat16 kernel's
// speed over the float32 one's (the time ratio). The kernels alternate on the same operands and
// each figure is the median over the repetitions; with one thread the clock is the thread's CPU
// time, with more, wall time.
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

// the bfloat16 references as the kernels' signature (they return nothing)
bool bf16_forward_reference(const float* qkv, int64_t B, int64_t L, int64_t H, int64_t D, float scale, float* P,
                            float* ctx, bool causal) {
  minidl::kernels::cpu::packed_attention_forward_bf16_reference(qkv, B, L, H, D, scale, P, ctx, causal);
  return true;
}
bool bf16_backward_reference(const float* qkv, const float* P, const float* dctx, int64_t B, int64_t L, int64_t H,
                             int64_t D, float scale, float* dqkv, bool causal) {
  minidl::kernels::cpu::packed_attention_backward_bf16_reference(qkv, P, dctx, B, L, H, D, scale, dqkv, causal);
  return true;
}

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
  const bool bf16_here = k::packed_attention_bf16_supported();
  if (!bf16_here) std::printf("no AVX512_BF16 here (or capped): the bfloat16 kernels are not timed\n");
  std::printf("%-30s %-9s %12s %12s %7s", "shape", "pass", "fast GF/s", "ref GF/s", "ratio");
  if (bf16_here) std::printf(" %12s %12s %7s %10s", "bf16 GF/s", "bf16 ref", "ratio", "bf16/fast");
  std::printf("\n");
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
      // one call of 0: the float32 kernel, 1: its reference, 2: the bfloat16 kernel, 3: its reference
      auto call = [&](int which) {
        if (which == 0 && !backward)
          k::packed_attention_forward(qkv.data(), s.B, s.L, s.H, s.D, scale, P.data(), ctx.data(), s.causal);
        if (which == 0 && backward)
          k::packed_attention_backward(qkv.data(), P.data(), dctx.data(), s.B, s.L, s.H, s.D, scale, dqkv.data(),
                                       s.causal);
        if (which == 1 && !backward)
          k::packed_attention_forward_reference(qkv.data(), s.B, s.L, s.H, s.D, scale, P.data(), ctx.data(), s.causal);
        if (which == 1 && backward)
          k::packed_attention_backward_reference(qkv.data(), P.data(), dctx.data(), s.B, s.L, s.H, s.D, scale,
                                                 work.data(), dqkv.data());
        if (which >= 2 && !backward)
          (which == 2 ? k::packed_attention_forward_bf16 : bf16_forward_reference)(
              qkv.data(), s.B, s.L, s.H, s.D, scale, P.data(), ctx.data(), s.causal);
        if (which >= 2 && backward)
          (which == 2 ? k::packed_attention_backward_bf16 : bf16_backward_reference)(
              qkv.data(), P.data(), dctx.data(), s.B, s.L, s.H, s.D, scale, dqkv.data(), s.causal);
      };
      // GFLOP/s of `inner` calls (the bfloat16 plain loop: one) after one untimed call, so that
      // every sample starts from the caches its own kernel leaves, not the previous kernel's
      auto time_one = [&](int which) {
        const int n = which == 3 ? 1 : inner;
        if (which != 3) call(which);
        const double t0 = now_s();
        for (int i = 0; i < n; ++i) call(which);
        return flops * n / (now_s() - t0) / 1e9;
      };
      const int kinds = bf16_here ? 4 : 2;
      std::vector<double> gf[4];
      for (int which = 0; which < kinds; ++which) time_one(which);  // warm-up: scratch, caches
      for (int r = 0; r < reps; ++r)
        for (int which = 0; which < kinds; ++which) gf[which].push_back(time_one(which));
      const double f = median(gf[0]), rf = median(gf[1]);
      std::printf("%-30s %-9s %12.1f %12.1f %6.2fx", s.what, backward ? "backward" : "forward", f, rf, f / rf);
      if (bf16_here) {
        const double b = median(gf[2]), rb = median(gf[3]);
        std::printf(" %12.1f %12.1f %6.2fx %9.2fx", b, rb, b / rb, b / f);
      }
      std::printf("\n");
    }
  }
  return 0;
}
