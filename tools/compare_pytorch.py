#!/usr/bin/python3
"""tools/compare_pytorch.py — minidl's `bench` against the same training step in PyTorch.

  /usr/bin/python3 tools/compare_pytorch.py [--bench build/examples/bench] [--models mlp cnn vit]
                                            [--reps 3] [--batch-size 128] [--baseline OTHER_BENCH]

For each repetition, model and thread count (1 and 2) it runs minidl's `bench` and then this
script's PyTorch peer (`--peer`, in a fresh process), alternating, so slow phases of a loaded
machine hit both sides alike; `--baseline` adds a third program (an older `bench` binary) to the
rotation. Each figure is the median over the repetitions. The table gives
  2 threads: minidl with 2 threads / PyTorch's best of 1 and 2 threads (images/s)
  1 thread:  minidl with 1 thread  / PyTorch with 1 thread
and both sides' peak resident memory (ru_maxrss of the process) and step memory (that peak minus
the resident memory just before the first step).

The peer is Debian's python3-torch with OpenBLAS at its best: OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE are removed from its environment (some machines set them for older OpenBLAS
builds); for 1 thread it also gets OMP_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1, because
torch.set_num_threads does not bind OpenBLAS's own threads. The step matches `bench`: the same
model, SGD lr 0.05 momentum 0.9 weight decay 5e-4, cross-entropy, fixed random input, the same
warm-up and timed step counts, and the same FLOP count (see examples/bench.cpp).
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

STEPS = {"mlp": 200, "cnn": 30, "vit": 20}  # timed steps per run: about 1-4 s each on 2 cores
WARMUP = 3


def model_macs(name):
    """Forward multiply-adds per image, as examples/bench.cpp counts them."""
    if name == "mlp":
        return 784 * 256 + 256 * 128 + 128 * 10
    if name == "cnn":
        return 32 * 28 * 28 * 9 + 64 * 14 * 14 * 32 * 9 + 3136 * 128 + 128 * 10
    T, E, F = 50, 64, 128
    block = T * E * 3 * E + 2 * T * T * E + T * E * E + 2 * T * E * F
    return 49 * 64 * 16 + 6 * block + 64 * 10


def rss_kb_now():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGESIZE") // 1024


def make_model(name):
    import torch
    import torch.nn as nn

    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.patch_embed = nn.Conv2d(1, 64, 4, stride=4)
            self.cls_token = nn.Parameter(torch.zeros(1, 1, 64))
            self.pos_embed = nn.Parameter(torch.randn(1, 50, 64) * 0.02)
            self.blocks = nn.Sequential(*[nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, activation="gelu",
                                                                     batch_first=True, norm_first=True)
                                          for _ in range(6)])
            self.norm = nn.LayerNorm(64)
            self.head = nn.Linear(64, 10)

        def forward(self, x):
            t = self.patch_embed(x).flatten(2).transpose(1, 2)
            t = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), t], dim=1) + self.pos_embed
            return self.head(self.norm(self.blocks(t))[:, 0])

    return ViT()


def peer(model_name, batch, threads, steps):
    """The PyTorch training step; prints one JSON line like bench."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = make_model(model_name)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    x = torch.rand(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))
    before = rss_kb_now()
    for s in range(-WARMUP, steps):
        if s == 0:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ips = batch * steps / seconds
    print(json.dumps({"model": model_name, "batch": batch, "threads": threads, "processes": 1, "steps": steps,
                      "step_ms": 1e3 * seconds / steps, "images_per_s": ips,
                      "gflops_per_s": 6.0 * model_macs(model_name) * ips / 1e9,
                      "peak_rss_mb": peak / 1024, "step_mem_mb": (peak - before) / 1024}))


def run_json(cmd, env=None):
    """The first JSON line a command prints; a failure ends the calling script, naming it."""
    me = os.path.basename(sys.argv[0]).removesuffix(".py")
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    except OSError as e:
        sys.exit(f"{me}: cannot run {cmd[0]}: {e.strerror} (build it first, or give its path)")
    if p.returncode != 0:
        sys.exit(f"{me}: {' '.join(cmd)} failed (exit {p.returncode}):\n{p.stderr}")
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    sys.exit(f"{me}: no JSON line from {' '.join(cmd)}:\n{p.stdout}{p.stderr}")


def peer_env(threads):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    if threads == 1:
        env["OMP_NUM_THREADS"] = "1"
        env["OPENBLAS_NUM_THREADS"] = "1"
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default="build/examples/bench", help="minidl's bench executable")
    ap.add_argument("--baseline", help="another bench executable (an older build) to alternate with")
    ap.add_argument("--models", nargs="+", default=["mlp", "cnn", "vit"], choices=["mlp", "cnn", "vit"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--steps", type=int, help="timed steps per run (default: per model)")
    ap.add_argument("--json", help="also write every run's JSON here")
    ap.add_argument("--peer", metavar="MODEL", help=argparse.SUPPRESS)  # internal: run the PyTorch side
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    if args.peer:
        peer(args.peer, args.batch_size, args.threads, args.steps or STEPS[args.peer])
        return
    for exe in [args.bench] + ([args.baseline] if args.baseline else []):
        if not os.access(exe, os.X_OK):
            sys.exit(f"compare_pytorch: {exe} is not an executable (build it: cmake --build build --target bench)")

    sides = ["minidl", "pytorch"] + (["baseline"] if args.baseline else [])
    runs = {}  # (side, model, threads) -> [json]
    for rep in range(args.reps):
        for m in args.models:
            steps = args.steps or STEPS[m]
            for t in (1, 2):
                common = ["--batch-size", str(args.batch_size), "--threads", str(t), "--steps", str(steps)]
                for side in sides:
                    if side == "pytorch":
                        cmd = [sys.executable, os.path.abspath(__file__), "--peer", m] + common
                        r = run_json(cmd, peer_env(t))
                    else:
                        exe = args.bench if side == "minidl" else args.baseline
                        r = run_json([exe, "--model", m, "--warmup", str(WARMUP)] + common)
                    runs.setdefault((side, m, t), []).append(r)
                    print(f"rep {rep + 1}/{args.reps} {m} {t} thread(s) {side:8s}: {r['images_per_s']:10.1f} img/s",
                          file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"side": k[0], **r} for k, rs in runs.items() for r in rs], f, indent=1)

    def med(side, m, t, key="images_per_s"):
        return statistics.median(r[key] for r in runs[(side, m, t)])

    print(f"\nbatch {args.batch_size}, median of {args.reps} alternating runs, images/s "
          "(ratio = minidl / PyTorch)")
    hdr = ("| model | minidl 2T | PyTorch 1T | PyTorch 2T | ratio 2T vs best | minidl 1T | ratio 1T vs 1T "
           "| GFLOP/s minidl 2T | peak RSS MB minidl / PyTorch (2T) | step mem MB minidl / PyTorch (2T) |")
    if args.baseline:
        hdr += " baseline 2T | baseline 1T | minidl/baseline 2T | 1T |"
    print(hdr)
    print("|" + "---|" * (hdr.count("|") - 1))
    for m in args.models:
        md2, md1 = med("minidl", m, 2), med("minidl", m, 1)
        pt1, pt2 = med("pytorch", m, 1), med("pytorch", m, 2)
        row = (f"| {m} | {md2:.0f} | {pt1:.0f} | {pt2:.0f} | **{md2 / max(pt1, pt2):.2f}x** | {md1:.0f} | "
               f"**{md1 / pt1:.2f}x** | {med('minidl', m, 2, 'gflops_per_s'):.1f} | "
               f"{med('minidl', m, 2, 'peak_rss_mb'):.0f} / {med('pytorch', m, 2, 'peak_rss_mb'):.0f} | "
               f"{med('minidl', m, 2, 'step_mem_mb'):.0f} / {med('pytorch', m, 2, 'step_mem_mb'):.0f} |")
        if args.baseline:
            b2, b1 = med("baseline", m, 2), med("baseline", m, 1)
            row += f" {b2:.0f} | {b1:.0f} | {md2 / b2:.2f}x | {md1 / b1:.2f}x |"
        print(row)


if __name__ == "__main__":
    main()
