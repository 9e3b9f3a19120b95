// examples/bench.cpp — training-step throughput of a reference model or a zoo model
// (docs/benchmarks.md): warm-up steps, then timed SGD-momentum training steps (forward,
// cross-entropy, backward, optimizer step) on fixed random input of the model's shape
// (Fashion-MNIST-shaped for mlp, cnn and vit; the zoo's shapes in examples/zoo/zoo.h, where
// tinygpt's samples are token sequences: its images_per_s counts sequences); prints one JSON line.
//
//   bench --model mlp|cnn|vit|resnet20|mobilenet|unet|mixer|tinygpt --batch-size B --threads T
//         [--steps S] [--warmup W] [--nproc N] [--backend auto|shm|gloo|hierarchical] [--profile] [--trace FILE]
//         [--precision fp32|bf16]
//
// --precision bf16 runs forward under autocast(BFloat16) (autograd/autocast.h: the matrix
// products take bfloat16 operands, float32 accumulation, float32 master weights), as
// `train --precision bf16`; the step is otherwise the same. fp16 needs a GradScaler: use train.
//
// --nproc N splits the global batch B over N DDP processes (T threads each) that all-reduce
// through --backend (auto: shared memory, as on any one host; gloo: TCP); images_per_s counts
// the global batch. --profile adds a table of time per op kind, forward and backward
// separately, averaged over the timed steps (autograd/profiler.h), after the JSON line.
// --trace FILE writes a Chrome trace of the timed steps (autograd/trace.h; open it in
// https://ui.perfetto.dev or draw it with tools/draw_trace.py): every rank's op spans, bucket
// all-reduces, DDP waits and optimizer steps, one process per rank in one file (dist/trace_file.h).
// It holds every timed step: keep --steps small (2 or 3) for a readable picture.
//
// FLOPs are counted once per model by hand (model_macs below; the zoo's from its table):
// multiply-adds of every convolution, linear layer and attention matmul in the forward pass, 2 FLOPs each; a training
// step counts 3x the forward (forward, input gradient, weight gradient), the usual convention.
// Element-wise ops, norms, softmax and the optimizer are not counted. peak_rss_mb is the
// process's peak resident memory (ru_maxrss; summed over processes with --nproc); step_mem_mb is
// that peak minus the resident memory just before the first step (what training adds on top of
// the model, its optimizer state and the input batch); step_alloc_mb is the same for the bytes
// CPU tensors hold (the caching allocator's peak, tensor/cpu_allocator.h, as PyTorch's
// torch.cuda.max_memory_allocated; summed over processes), without what the allocator keeps
// cached beside them; page_faults_per_step counts minor page faults during the timed steps (fresh
// memory being mapped).
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "minidl/autograd/autocast.h"
#include "minidl/autograd/profiler.h"
#include "minidl/autograd/trace.h"
#include "minidl/dist/ddp.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/spawn.h"
#include "minidl/dist/trace_file.h"
#include "minidl/kernels/cpu/parallel.h"
#include "minidl/nn/models.h"
#include "minidl/optim/sgd.h"
#include "minidl/tensor/cpu_allocator.h"
#include "minidl/tensor/tensor_all.h"
#include "zoo/zoo.h"

using namespace minidl;
using Clock = std::chrono::steady_clock;

namespace {

struct Args {
  std::string model = "cnn";
  int64_t batch = 128;
  int threads = 1, steps = 20, warmup = 3, nproc = 1;
  std::string backend = "auto";
  bool profile = false;
  std::string trace;  // --trace FILE; empty: no trace
  bool bf16 = false;  // --precision bf16
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::cerr << "bench: " << msg
            << "\nusage: bench --model mlp|cnn|vit|resnet20|mobilenet|unet|mixer|tinygpt --batch-size B --threads T "
               "[--steps S] [--warmup W] [--nproc N] [--backend auto|shm|gloo|hierarchical] [--profile] [--trace FILE] "
               "[--precision fp32|bf16]\n";
  std::exit(2);
}

int64_t parse_int(const std::string& flag, const char* value, int64_t min) {
  if (!value) usage_error(flag + " needs a value");
  char* end = nullptr;
  const long long v = std::strtoll(value, &end, 10);
  if (*value == '\0' || *end != '\0' || v < min)
    usage_error(flag + " must be an integer >= " + std::to_string(min) + ", got '" + value + "'");
  return v;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (f == "--model") {
      if (!v) usage_error("--model needs a value");
      a.model = v;
      if (a.model != "mlp" && a.model != "cnn" && a.model != "vit" && !zoo::find(a.model))
        usage_error("--model '" + a.model + "' is not one of mlp, cnn, vit, " + zoo::names());
      ++i;
    } else if (f == "--batch-size") {
      a.batch = parse_int(f, v, 1);
      ++i;
    } else if (f == "--threads") {
      a.threads = static_cast<int>(parse_int(f, v, 1));
      ++i;
    } else if (f == "--steps") {
      a.steps = static_cast<int>(parse_int(f, v, 1));
      ++i;
    } else if (f == "--warmup") {
      a.warmup = static_cast<int>(parse_int(f, v, 0));
      ++i;
    } else if (f == "--nproc") {
      a.nproc = static_cast<int>(parse_int(f, v, 1));
      ++i;
    } else if (f == "--backend") {
      if (!v) usage_error("--backend needs a value");
      a.backend = v;
      if (a.backend != "auto" && a.backend != "shm" && a.backend != "gloo" && a.backend != "hierarchical")
        usage_error("--backend '" + a.backend + "' is not one of auto, shm, gloo, hierarchical");
      ++i;
    } else if (f == "--profile") {
      a.profile = true;
    } else if (f == "--precision") {
      if (!v) usage_error("--precision needs a value");
      if (std::string(v) != "fp32" && std::string(v) != "bf16")
        usage_error(std::string("--precision '") + v +
                    "' is not one of fp32, bf16 (fp16 needs a GradScaler: use train)");
      a.bf16 = std::string(v) == "bf16";
      ++i;
    } else if (f == "--trace") {
      if (!v || *v == '\0') usage_error("--trace needs a file name");
      a.trace = v;
      ++i;
    } else {
      usage_error("unknown flag '" + f + "'");
    }
  }
  if (a.batch % a.nproc != 0)
    usage_error("--batch-size " + std::to_string(a.batch) + " does not split evenly over " + std::to_string(a.nproc) +
                " processes");
  return a;
}

// Forward multiply-adds per image (see the file comment).
double model_macs(const std::string& model) {
  if (const zoo::ZooModel* z = zoo::find(model)) return z->macs;
  if (model == "mlp") return 784.0 * 256 + 256.0 * 128 + 128.0 * 10;
  if (model == "cnn")
    return 32.0 * 28 * 28 * (1 * 9)  // conv1 1->32, 3x3, 28x28
           + 64.0 * 14 * 14 * (32 * 9)  // conv2 32->64, 3x3, 14x14
           + 3136.0 * 128 + 128.0 * 10;  // fc1, fc2
  // vit: patch embedding 4x4/4 -> 49 tokens of 64; 6 blocks over T = 50 tokens, E = 64, 4 heads
  // of 16, MLP 64-128-64; head on the class token.
  const double T = 50, E = 64, F = 128;
  const double block = T * E * 3 * E  // qkv projection
                       + 2 * T * T * E  // q k^T and attn v, all heads together
                       + T * E * E  // output projection
                       + 2 * T * E * F;  // MLP
  return 49.0 * 64 * 16 + 6 * block + 64.0 * 10;
}

long rss_kb_now() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}
long peak_rss_kb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}
long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

struct Result {
  double seconds = 0;  // timed steps
  long rss_before_kb = 0, peak_kb = 0;
  double alloc_before = 0, alloc_peak = 0;  // bytes CPU tensors hold: before the first step, peak
  long faults = 0;  // minor page faults during the timed steps
  std::string profile;  // one "name fwd_ms bwd_ms fwd_calls bwd_calls" line per op kind
};

std::string format_profile(int steps, double step_s) {
  std::ostringstream os;
  char line[160];
  double total_f = 0, total_b = 0;
  std::snprintf(line, sizeof line, "%-22s %10s %10s %7s %7s\n", "op (ms per step)", "forward", "backward", "calls/f",
                "calls/b");
  os << line;
  for (const auto& r : autograd::profiler::records()) {
    total_f += r.forward_s;
    total_b += r.backward_s;
    std::snprintf(line, sizeof line, "%-22s %10.3f %10.3f %7.1f %7.1f\n", r.name.c_str(), 1e3 * r.forward_s / steps,
                  1e3 * r.backward_s / steps, double(r.forward_calls) / steps, double(r.backward_calls) / steps);
    os << line;
  }
  const double other = step_s / steps - (total_f + total_b) / steps;
  std::snprintf(line, sizeof line, "%-22s %10.3f %10.3f   (forward, backward)\n", "sum", 1e3 * total_f / steps,
                1e3 * total_b / steps);
  os << line;
  std::snprintf(line, sizeof line, "%-22s %10.3f   (engine, frees, module code outside ops)\n", "other", 1e3 * other);
  os << line;
  std::snprintf(line, sizeof line, "%-22s %10.3f\n", "step", 1e3 * step_s / steps);
  os << line;
  return os.str();
}

// Trains a.warmup + a.steps steps on `local` images per step (DDP when world > 1).
Result run(const Args& a, int64_t local, bool use_ddp) {
  manual_seed(0);
  const zoo::ZooModel* z = zoo::find(a.model);  // nullptr: a reference model
  std::unique_ptr<nn::Module> model = z ? z->make() : nn::make_model(a.model);
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (use_ddp) ddp = std::make_unique<dist::DistributedDataParallel>(*model);
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9, .weight_decay = 5e-4});
  const uint64_t stream = use_ddp ? dist::rank() : 0;
  const zoo::Batch batch =
      z ? z->random_batch(local, RandomKey{1, stream})
        : zoo::Batch{rand({local, 1, 28, 28}, RandomKey{1, stream}), randint(0, 10, {local}, RandomKey{2, stream})};
  const Tensor &x = batch.x, &y = batch.y;
  Result r;
  r.rss_before_kb = rss_kb_now();
  r.alloc_before = static_cast<double>(cpu_allocator_stats().allocated);
  cpu_reset_peak_memory_stats();
  Clock::time_point t0;
  for (int s = -a.warmup; s < a.steps; ++s) {
    if (s == 0) {
      if (a.profile) autograd::profiler::enable(true);
      if (!a.trace.empty()) autograd::trace::enable(true);
      t0 = Clock::now();
      r.faults = minor_faults();
    }
    const autograd::trace::Span step("step", autograd::trace::kStep);
    {
      const autograd::profiler::Scope scope("zero_grad", autograd::trace::kOptimizer);
      opt.zero_grad();
    }
    Variable loss;
    {
      const autocast low_precision(DType::BFloat16, a.bf16);  // --precision bf16: forward under autocast
      Variable out = use_ddp ? ddp->forward(Variable(x)) : model->forward(Variable(x));
      loss = z ? zoo::loss(out, y) : cross_entropy(out, y);
    }
    loss.backward();  // with DDP: the buckets' all-reduces overlap it, and it ends waiting for them
    if (use_ddp) ddp->finish();  // (a no-op: backward finished already; ddp->step would time it)
    const autograd::profiler::Scope scope("optimizer step", autograd::trace::kOptimizer);
    opt.step();
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!a.trace.empty()) dist::write_trace(a.trace);  // every rank's events into one file on rank 0
  r.faults = minor_faults() - r.faults;
  if (a.profile) {
    r.profile = format_profile(a.steps, r.seconds);
    autograd::profiler::enable(false);
  }
  r.peak_kb = peak_rss_kb();
  r.alloc_peak = static_cast<double>(cpu_allocator_stats().peak_allocated);
  return r;
}

std::string to_message(const Result& r) {
  std::ostringstream os;
  os.precision(17);
  os << r.seconds << ' ' << r.rss_before_kb << ' ' << r.peak_kb << ' ' << r.alloc_before << ' ' << r.alloc_peak << ' '
     << r.faults << '\n'
     << r.profile;
  return os.str();
}
Result from_message(const std::string& s) {
  std::istringstream is(s);
  Result r;
  is >> r.seconds >> r.rss_before_kb >> r.peak_kb >> r.alloc_before >> r.alloc_peak >> r.faults;
  is.get();
  std::getline(is, r.profile, '\0');
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  std::vector<Result> results;
  try {
    if (a.nproc == 1) {
      kernels::cpu::set_num_threads(a.threads);
      results.push_back(run(a, a.batch, false));
    } else {
      const auto out = dist::spawn_with_results(a.nproc,
                                                [&](int) {
                                                  dist::init({.backend = a.backend});
                                                  const std::string s = to_message(run(a, a.batch / a.nproc, true));
                                                  dist::shutdown();
                                                  return s;
                                                },
                                                {.omp_threads = a.threads});
      for (const auto& s : out) results.push_back(from_message(s));
    }
  } catch (const std::exception& e) {
    std::cerr << "bench: " << e.what() << "\n";
    return 1;
  }
  double seconds = 0;  // the slowest rank sets the pace
  long peak = 0, before = 0, faults = 0;
  double alloc = 0;  // bytes
  for (const auto& r : results) {
    faults += r.faults;
    alloc += r.alloc_peak - r.alloc_before;
    seconds = std::max(seconds, r.seconds);
    peak += r.peak_kb;
    before += r.rss_before_kb;
  }
  const double ips = static_cast<double>(a.batch) * a.steps / seconds;
  const double gflops = 3.0 * 2.0 * model_macs(a.model) * ips / 1e9;
  std::printf(
      "{\"model\": \"%s\", \"batch\": %lld, \"threads\": %d, \"processes\": %d, \"steps\": %d, "
      "\"step_ms\": %.3f, \"images_per_s\": %.1f, \"gflops_per_s\": %.2f, \"peak_rss_mb\": %.1f, "
      "\"step_mem_mb\": %.1f, \"step_alloc_mb\": %.1f, \"page_faults_per_step\": %.1f, \"precision\": \"%s\"}\n",
      a.model.c_str(), static_cast<long long>(a.batch), a.threads, a.nproc, a.steps, 1e3 * seconds / a.steps, ips,
      gflops, peak / 1024.0, (peak - before) / 1024.0, alloc / (1024.0 * 1024.0), static_cast<double>(faults) / a.steps,
      a.bf16 ? "bf16" : "fp32");
  if (a.profile) std::printf("profile of rank 0, %d steps:\n%s", a.steps, results[0].profile.c_str());
  return 0;
}
