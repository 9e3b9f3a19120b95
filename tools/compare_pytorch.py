#!/usr/bin/python3
"""tools/compare_pytorch.py — minidl's `bench` against the same training step in PyTorch.

  /usr/bin/python3 tools/compare_pytorch.py [--bench build/examples/bench] [--models mlp cnn vit]
                                            [--reps 3] [--batch-size 128] [--baseline OTHER_BENCH]
                                            [--torch-python /tmp/torch-peer/python] [--eager-only]
                                            [--precision fp32 [bf16]]
  /usr/bin/python3 tools/compare_pytorch.py --describe [--models ...] [--torch-python ...]

--models takes the three reference models and the zoo's (examples/zoo/zoo.h: resnet20, mobilenet,
unet, mixer, tinygpt), each with its PyTorch twin below (same layers, parameter names and count;
tests/zoo checks minidl's side against the numbers --describe prints: parameters, parameter
tensors, state_dict entries, first and last parameter names, forward multiply-adds per sample
counted by torch.utils.flop_counter).

For each repetition, model and thread count (1 and 2) it runs minidl's `bench` and then this
script's PyTorch peer (`--peer`, in a fresh process), alternating, so slow phases of a loaded
machine hit both sides alike; `--baseline` adds a third program (an older `bench` binary) to the
rotation. Each figure is the median over the repetitions. The table gives
  2 threads: minidl with 2 threads / PyTorch's best of 1 and 2 threads (images/s)
  1 thread:  minidl with 1 thread  / PyTorch with 1 thread
and both sides' peak resident memory (ru_maxrss of the process) and step memory (that peak minus
the resident memory just before the first step). For tinygpt an "image" is one sequence of 64
tokens.

The peer runs under --torch-python (default: this interpreter, e.g. Debian's python3-torch) and,
by default, takes the best of two fresh processes: eager PyTorch and the same step with the model
under torch.compile (mode "default"; the warm-up steps compile it, so compile time is excluded);
--eager-only keeps the eager process only. The table's PyTorch figures are that best, and its
memory columns come from the process that was best. Each peer process runs with OpenBLAS at its
best: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed from its environment (some machines set
them for older OpenBLAS builds); for 1 thread it also gets OMP_NUM_THREADS=1 and OPENBLAS_NUM_THREADS=1, because
torch.set_num_threads does not bind OpenBLAS's own threads. The step matches `bench`: the same
model, SGD lr 0.05 momentum 0.9 weight decay 5e-4, cross-entropy, fixed random input, the same
warm-up and timed step counts, and the same FLOP count (see examples/bench.cpp).

--precision bf16 runs both sides in mixed precision: `bench --precision bf16`, and the peer's
forward and loss under torch.autocast("cpu", dtype=torch.bfloat16) (its master weights stay
float32, as minidl's). Given both (--precision fp32 bf16), each repetition runs every precision in
turn and the script prints a table per precision and each side's bf16 / fp32 ratio.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

STEPS = {"mlp": 200, "cnn": 30, "vit": 20,  # timed steps per run: about 1-4 s each on 2 cores
         "resnet20": 5, "mobilenet": 8, "unet": 8, "mixer": 10, "tinygpt": 10}
WARMUP = 3
# The zoo: one sample's shape ((C, H, W) images, or (T,) token ids in [0, vocab)) and forward
# multiply-adds per sample, as examples/zoo/zoo.cpp has them (--describe recounts them).
ZOO_INPUT = {"resnet20": (3, 32, 32), "mobilenet": (3, 32, 32), "unet": (1, 28, 28), "mixer": (1, 28, 28),
             "tinygpt": (64,)}
ZOO_VOCAB = {"tinygpt": 96}
ZOO_MACS = {"resnet20": 40_813_184, "mobilenet": 18_662_400, "unet": 18_979_232, "mixer": 16_157_952,
            "tinygpt": 7_733_248}
MODELS = ["mlp", "cnn", "vit"] + list(ZOO_INPUT)


def model_macs(name):
    """Forward multiply-adds per image, as examples/bench.cpp counts them."""
    if name in ZOO_MACS:
        return ZOO_MACS[name]
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

    if name in ZOO_INPUT:
        return zoo_model(name)
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


def zoo_model(name):
    """The PyTorch twin of a zoo model (examples/zoo/NAME.h: the design and its sources): the same
    layers in the same order under the same parameter names, PyTorch's default initialisation."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def conv_bn(cin, cout, k, stride=1, groups=1):
        return [nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, groups=groups, bias=False),
                nn.BatchNorm2d(cout)]

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1, self.bn1 = conv_bn(cin, cout, 3, stride)
            self.conv2, self.bn2 = conv_bn(cout, cout, 3)
            self.shortcut = nn.Sequential(*conv_bn(cin, cout, 1, stride)) if stride != 1 or cin != cout \
                else nn.Sequential()

        def forward(self, x):
            y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
            return F.relu(y + self.shortcut(x))

    class ResNet20(nn.Module):  # He et al. 2016, CIFAR ResNet-20 with projection shortcuts (option B)
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(*conv_bn(3, 16, 3), nn.ReLU())
            blocks, cin = [], 16
            for cout, stride in ((16, 1), (32, 2), (64, 2)):
                for i in range(3):
                    blocks.append(BasicBlock(cin, cout, stride if i == 0 else 1))
                    cin = cout
            self.blocks = nn.Sequential(*blocks)
            self.fc = nn.Linear(64, 10)

        def forward(self, x):
            return self.fc(F.adaptive_avg_pool2d(self.blocks(self.stem(x)), 1).flatten(1))

    class MobileNet(nn.Module):  # Howard et al. 2017, the first six depthwise-separable blocks, ReLU
        def __init__(self):
            super().__init__()
            layers, cin = conv_bn(3, 32, 3) + [nn.ReLU()], 32
            for cout, stride in ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)):
                layers += conv_bn(cin, cin, 3, stride, groups=cin) + [nn.ReLU()]
                layers += conv_bn(cin, cout, 1) + [nn.ReLU()]
                cin = cout
            self.features = nn.Sequential(*layers)
            self.fc = nn.Linear(512, 10)

        def forward(self, x):
            return self.fc(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))

    def double_conv(cin, cout):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.GroupNorm(4, cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.GroupNorm(4, cout), nn.ReLU())

    class UNet(nn.Module):  # Ronneberger et al. 2015, 2 levels, GroupNorm, a classification head
        def __init__(self):
            super().__init__()
            self.down1, self.down2, self.bottom = double_conv(1, 16), double_conv(16, 32), double_conv(32, 64)
            self.up2, self.dec2 = nn.ConvTranspose2d(64, 32, 2, stride=2), double_conv(64, 32)
            self.up1, self.dec1 = nn.ConvTranspose2d(32, 16, 2, stride=2), double_conv(32, 16)
            self.fc = nn.Linear(16, 10)

        def forward(self, x):
            s1 = self.down1(x)
            s2 = self.down2(F.max_pool2d(s1, 2))
            b = self.bottom(F.max_pool2d(s2, 2))
            y = self.dec2(torch.cat([self.up2(b), s2], 1))
            y = self.dec1(torch.cat([self.up1(y), s1], 1))
            return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))

    class MixerBlock(nn.Module):
        def __init__(self, tokens, dim, token_hidden, channel_hidden):
            super().__init__()
            self.norm1 = nn.LayerNorm(dim)
            self.token_mlp = nn.Sequential(nn.Linear(tokens, token_hidden), nn.GELU(), nn.Linear(token_hidden, tokens))
            self.norm2 = nn.LayerNorm(dim)
            self.channel_mlp = nn.Sequential(nn.Linear(dim, channel_hidden), nn.GELU(),
                                             nn.Linear(channel_hidden, dim))

        def forward(self, x):
            x = x + self.token_mlp(self.norm1(x).transpose(1, 2)).transpose(1, 2)
            return x + self.channel_mlp(self.norm2(x))

    class Mixer(nn.Module):  # Tolstikhin et al. 2021, 4x4 patches, width 128, 4 blocks
        def __init__(self):
            super().__init__()
            self.stem = nn.Conv2d(1, 128, 4, stride=4)
            self.blocks = nn.Sequential(*[MixerBlock(49, 128, 64, 256) for _ in range(4)])
            self.norm = nn.LayerNorm(128)
            self.head = nn.Linear(128, 10)

        def forward(self, x):
            t = self.stem(x).flatten(2).transpose(1, 2)
            return self.head(self.norm(self.blocks(t)).mean(1))

    class TinyGPT(nn.Module):  # GPT-2 as nanoGPT builds it, small, head tied to the embedding
        def __init__(self, vocab=96, block=64, dim=64, heads=4, layers=2):
            super().__init__()
            self.tok = nn.Embedding(vocab, dim)
            self.pos = nn.Parameter(torch.randn(block, dim) * 0.02)
            self.blocks = nn.ModuleList([nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0,
                                                                    activation="gelu", batch_first=True,
                                                                    norm_first=True) for _ in range(layers)])
            self.ln_f = nn.LayerNorm(dim)

        def forward(self, idx):
            T = idx.shape[1]
            x = self.tok(idx) + self.pos[:T]
            mask = nn.Transformer.generate_square_subsequent_mask(T)
            for b in self.blocks:
                x = b(x, src_mask=mask, is_causal=True)
            return F.linear(self.ln_f(x), self.tok.weight)  # the head is the token embedding (tied)

    return {"resnet20": ResNet20, "mobilenet": MobileNet, "unet": UNet, "mixer": Mixer, "tinygpt": TinyGPT}[name]()


def random_batch(name, batch):
    """Fixed random input and targets of the model's shape: images and classes, or a window of
    T + 1 random tokens split into the input (its first T) and the next-token targets."""
    import torch

    if name in ZOO_VOCAB:
        tokens = torch.randint(0, ZOO_VOCAB[name], (batch, ZOO_INPUT[name][0] + 1))
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    return torch.rand(batch, *ZOO_INPUT.get(name, (1, 28, 28))), torch.randint(0, 10, (batch,))


def peer(model_name, batch, threads, steps, compiled, precision):
    """The PyTorch training step (the model under torch.compile when `compiled`, the forward and
    loss under bfloat16 autocast for precision "bf16"); prints one JSON line like bench."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = make_model(model_name)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    x, y = random_batch(model_name, batch)
    forward = torch.compile(model) if compiled else model
    before = rss_kb_now()
    for s in range(-WARMUP, steps):  # the warm-up steps compile the forward and backward graphs
        if s == 0:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            out = forward(x)
            loss = F.cross_entropy(out.flatten(0, -2), y.flatten())  # (N, 10) or (N T, vocab)
        loss.backward()
        opt.step()
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ips = batch * steps / seconds
    print(json.dumps({"model": model_name, "mode": "compiled" if compiled else "eager", "batch": batch,
                      "threads": threads, "processes": 1, "steps": steps,
                      "step_ms": 1e3 * seconds / steps, "images_per_s": ips,
                      "gflops_per_s": 6.0 * model_macs(model_name) * ips / 1e9,
                      "peak_rss_mb": peak / 1024, "step_mem_mb": (peak - before) / 1024, "precision": precision}))


def describe(models):
    """Each model's twin as tests/zoo checks it, one JSON line per model."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    for name in models:
        torch.manual_seed(0)
        model = make_model(name)
        x, _ = random_batch(name, 2)
        counter = FlopCounterMode(display=False)
        with counter:
            out = model(x)
        names = [n for n, _ in model.named_parameters()]
        print(json.dumps({"model": name, "parameters": sum(p.numel() for p in model.parameters()),
                          "parameter_tensors": len(names), "state_dict_entries": len(model.state_dict()),
                          "first": names[0], "last": names[-1], "output_for_2": list(out.shape),
                          "forward_macs_per_sample": counter.get_total_flops() // 2 // 2}))


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
    ap.add_argument("--models", nargs="+", default=["mlp", "cnn", "vit"], choices=MODELS)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--steps", type=int, help="timed steps per run (default: per model)")
    ap.add_argument("--json", help="also write every run's JSON here")
    ap.add_argument("--torch-python", default=sys.executable,
                    help="the PyTorch peer's interpreter (e.g. /tmp/torch-peer/python; default: this one)")
    ap.add_argument("--eager-only", action="store_true", help="the peer without its torch.compile process")
    ap.add_argument("--precision", nargs="+", default=["fp32"], choices=["fp32", "bf16"],
                    help="fp32, bf16 (autocast on both sides), or both in turn")
    ap.add_argument("--describe", action="store_true", help="print each model's PyTorch twin (parameter count, ...)")
    ap.add_argument("--compiled", action="store_true", help=argparse.SUPPRESS)  # internal: the peer's mode
    ap.add_argument("--peer", metavar="MODEL", help=argparse.SUPPRESS)  # internal: run the PyTorch side
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.reps < 1:
        ap.error("--reps must be >= 1")
    if args.peer:
        peer(args.peer, args.batch_size, args.threads, args.steps or STEPS[args.peer], args.compiled, args.precision[0])
        return
    if args.describe:
        sys.exit(subprocess.run([args.torch_python, os.path.abspath(__file__), "--describe-here", *args.models],
                                env=peer_env(2)).returncode)
    for exe in [args.bench] + ([args.baseline] if args.baseline else []):
        if not os.access(exe, os.X_OK):
            sys.exit(f"compare_pytorch: {exe} is not an executable (build it: cmake --build build --target bench)")

    sides = ["minidl", "pytorch"] + (["baseline"] if args.baseline else [])
    runs = {}  # (side, model, threads, precision) -> [json]
    for rep in range(args.reps):
        for m in args.models:
            steps = args.steps or STEPS[m]
            for t in (1, 2):
                for precision in args.precision:
                    common = ["--batch-size", str(args.batch_size), "--threads", str(t), "--steps", str(steps),
                              "--precision", precision]
                    # the order rotates rep by rep, so no side always runs right after the same other one
                    for side in sides[rep % len(sides):] + sides[:rep % len(sides)]:
                        if side == "pytorch":  # the best of eager and compiled, each in a fresh process
                            cmd = [args.torch_python, os.path.abspath(__file__), "--peer", m] + common
                            tries = [run_json(cmd + extra, peer_env(t))
                                     for extra in ([[]] if args.eager_only else [[], ["--compiled"]])]
                            r = max(tries, key=lambda j: j["images_per_s"])
                            r["other_modes"] = {j["mode"]: j["images_per_s"] for j in tries}
                        else:
                            exe = args.bench if side == "minidl" else args.baseline
                            r = run_json([exe, "--model", m, "--warmup", str(WARMUP)] + common)
                        runs.setdefault((side, m, t, precision), []).append(r)
                        best = f" ({r['mode']}: {r['other_modes']})" if side == "pytorch" else ""
                        print(f"rep {rep + 1}/{args.reps} {m} {t} thread(s) {precision} {side:8s}: "
                              f"{r['images_per_s']:10.1f} img/s{best}", file=sys.stderr, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"side": k[0], **r} for k, rs in runs.items() for r in rs], f, indent=1)

    def med(side, m, t, precision, key="images_per_s"):
        return statistics.median(r[key] for r in runs[(side, m, t, precision)])

    for precision in args.precision:
        print(f"\nbatch {args.batch_size}, {precision}, median of {args.reps} alternating runs, images/s "
              "(ratio = minidl / PyTorch)")
        hdr = ("| model | minidl 2T | PyTorch 1T | PyTorch 2T | ratio 2T vs best | minidl 1T | ratio 1T vs 1T "
               "| GFLOP/s minidl 2T | peak RSS MB minidl / PyTorch (2T) | step mem MB minidl / PyTorch (2T) |")
        if not args.eager_only:
            hdr += " PyTorch's best 1T / 2T |"
        if args.baseline:
            hdr += " baseline 2T | baseline 1T | minidl/baseline 2T | 1T | step mem MB baseline (2T) |"
        print(hdr)
        print("|" + "---|" * (hdr.count("|") - 1))
        for m in args.models:
            md2, md1 = med("minidl", m, 2, precision), med("minidl", m, 1, precision)
            pt1, pt2 = med("pytorch", m, 1, precision), med("pytorch", m, 2, precision)
            row = (f"| {m} | {md2:.0f} | {pt1:.0f} | {pt2:.0f} | **{md2 / max(pt1, pt2):.2f}x** | {md1:.0f} | "
                   f"**{md1 / pt1:.2f}x** | {med('minidl', m, 2, precision, 'gflops_per_s'):.1f} | "
                   f"{med('minidl', m, 2, precision, 'peak_rss_mb'):.0f} / "
                   f"{med('pytorch', m, 2, precision, 'peak_rss_mb'):.0f} | "
                   f"{med('minidl', m, 2, precision, 'step_mem_mb'):.0f} / "
                   f"{med('pytorch', m, 2, precision, 'step_mem_mb'):.0f} |")
            if not args.eager_only:
                modes = [" + ".join(sorted({r["mode"] for r in runs[("pytorch", m, t, precision)]})) for t in (1, 2)]
                row += f" {modes[0]} / {modes[1]} |"
            if args.baseline:
                b2, b1 = med("baseline", m, 2, precision), med("baseline", m, 1, precision)
                row += (f" {b2:.0f} | {b1:.0f} | {md2 / b2:.2f}x | {md1 / b1:.2f}x | "
                        f"{med('baseline', m, 2, precision, 'step_mem_mb'):.0f} |")
            print(row)
    if len(args.precision) == 2:
        print("\nbf16 / fp32 images/s, each side against itself (PyTorch: its best of eager and compiled)")
        print("| model | minidl 1T | PyTorch 1T | minidl 2T | PyTorch 2T |")
        print("|---|---|---|---|---|")
        for m in args.models:
            cells = [med(side, m, t, "bf16") / med(side, m, t, "fp32") for t in (1, 2) for side in ("minidl", "pytorch")]
            print(f"| {m} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--describe-here"]:  # internal: --describe under --torch-python
        describe(sys.argv[2:])
    else:
        main()
