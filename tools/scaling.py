#!/usr/bin/python3
"""tools/scaling.py — does data parallelism pay on this machine? minidl's `bench` in the layouts
that compare, alternating, median of several runs; PyTorch's DDP beside it when a peer is given.

  /usr/bin/python3 tools/scaling.py [--bench build/examples/bench] [--models mlp cnn vit] [--reps 3]
                                    [--allreduce build/examples/bench_allreduce]
                                    [--torch-python /tmp/torch-peer/python]

Per model, each repetition runs (in this order, so a slow phase of the machine hits all alike):
  A  1 process x 2 threads, global batch 128        (one process using the whole machine)
  B  2 processes x 1 thread, global batch 128       (data parallel, the same work)
  C  1 process x 1 thread, batch 128                (one core)
  D  2 processes x 1 thread, global batch 256       (128 per process: twice C's work)
  E  2 independent 1-thread processes at once, batch 64 each   (B's work, no communication)
  F  2 independent 1-thread processes at once, batch 128 each  (D's work, no communication)
and, with --torch-python, PyTorch's DDP (Gloo) as 1 and 2 processes x 1 thread at global batch
128. Each figure is the median of its runs (images/s). The table gives
  strong  B / A      2 processes against one process with both cores (target: cnn, vit >= 0.95,
                     mlp >= 0.85)
  weak    D / (2 C)  efficiency of two processes each doing a one-core process's work (target:
                     cnn, vit >= 0.95, mlp >= 0.90)
  2p/1p   B / C      the 2-process speed-up over one single-threaded process, and PyTorch's
                     (its 2 / its 1 process); minidl's must be the higher.
  ceilings  E / A and F / (2 C): what strong and weak scaling would be if the all-reduce cost
                     nothing, the machine's own limit (two busy cores share caches, memory
                     bandwidth and, on a VM, the host); B / E and D / F: what DDP keeps of it.
With --allreduce it also prints bench_allreduce's table (4 KB latency, 64 MB bus bandwidth).
The peer runs with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE removed from its environment, like
tools/compare_pytorch.py's, and OMP_NUM_THREADS=1.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_pytorch import STEPS, WARMUP, make_model, peer_env, run_json  # noqa: E402

LAYOUTS = [  # name, processes, threads, global batch
    ("A", 1, 2, 128),
    ("B", 2, 1, 128),
    ("C", 1, 1, 128),
    ("D", 2, 1, 256),
]
INDEPENDENT = [  # name, batch of each of the two processes that run at once without talking
    ("E", 64),
    ("F", 128),
]


def ddp_rank(model_name, rank, world, port, global_batch, steps):
    """One rank of PyTorch's DDP step (Gloo, one thread); rank 0 prints images/s of the global batch."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = make_model(model_name)
    ddp = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    local = global_batch // world
    x = torch.rand(local, 1, 28, 28)
    y = torch.randint(0, 10, (local,))
    for s in range(-WARMUP, steps):
        if s == 0:
            dist.barrier()
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
    dist.barrier()
    seconds = time.perf_counter() - t0
    if rank == 0:
        print(json.dumps({"model": model_name, "processes": world, "images_per_s": global_batch * steps / seconds}))
    dist.destroy_process_group()


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_peer(python, model, world, global_batch, steps):
    port = free_port()
    procs = [subprocess.Popen([python, os.path.abspath(__file__), "--ddp-rank", str(r), "--world", str(world),
                               "--port", str(port), "--peer-model", model, "--batch", str(global_batch),
                               "--steps", str(steps)], env=peer_env(1), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(world)]
    outs = [p.communicate() for p in procs]
    for p, (out, err) in zip(procs, outs):
        if p.returncode != 0:
            sys.exit(f"scaling: the PyTorch DDP peer failed (exit {p.returncode}):\n{err}")
    for line in outs[0][0].splitlines():
        if line.startswith("{"):
            return json.loads(line)["images_per_s"]
    sys.exit("scaling: no JSON line from the PyTorch DDP peer")


def run_independent(bench, model, batch, steps):
    """Two 1-thread `bench` processes started together, no communication: their summed images/s."""
    cmd = [bench, "--model", model, "--batch-size", str(batch), "--threads", "1", "--steps", str(steps),
           "--warmup", str(WARMUP)]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    total = 0.0
    for p in procs:
        out, err = p.communicate()
        if p.returncode != 0:
            sys.exit(f"scaling: {' '.join(cmd)} failed (exit {p.returncode}):\n{err}")
        total += next(json.loads(line) for line in out.splitlines() if line.startswith("{"))["images_per_s"]
    return total


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default="build/examples/bench")
    ap.add_argument("--allreduce", help="bench_allreduce executable: also print its table")
    ap.add_argument("--models", nargs="+", default=["mlp", "cnn", "vit"], choices=["mlp", "cnn", "vit"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--torch-python", help="the PyTorch peer's interpreter (e.g. /tmp/torch-peer/python)")
    ap.add_argument("--ddp-rank", type=int, help=argparse.SUPPRESS)  # internal: one rank of the peer
    ap.add_argument("--world", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--peer-model", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--steps", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.ddp_rank is not None:
        ddp_rank(args.peer_model, args.ddp_rank, args.world, args.port, args.batch, args.steps)
        return
    if args.reps < 3:
        sys.exit("scaling: --reps must be at least 3 (each figure is a median)")

    rows = []
    for model in args.models:
        steps = STEPS[model]
        runs = {name: [] for name, *_ in LAYOUTS + INDEPENDENT}
        peer = {1: [], 2: []}
        for _ in range(args.reps):
            for name, nproc, threads, batch in LAYOUTS:
                j = run_json([args.bench, "--model", model, "--batch-size", str(batch), "--threads", str(threads),
                              "--nproc", str(nproc), "--steps", str(steps), "--warmup", str(WARMUP)])
                runs[name].append(j["images_per_s"])
            for name, batch in INDEPENDENT:
                runs[name].append(run_independent(args.bench, model, batch, steps))
            if args.torch_python:
                for world in (1, 2):
                    peer[world].append(run_peer(args.torch_python, model, world, 128, steps))
        med = {k: statistics.median(v) for k, v in runs.items()}
        row = {"model": model, **med, "strong": med["B"] / med["A"], "weak": med["D"] / (2 * med["C"]),
               "speedup": med["B"] / med["C"], "strong_ceiling": med["E"] / med["A"],
               "weak_ceiling": med["F"] / (2 * med["C"]), "strong_kept": med["B"] / med["E"],
               "weak_kept": med["D"] / med["F"]}
        if args.torch_python:
            row["torch_1p"] = statistics.median(peer[1])
            row["torch_2p"] = statistics.median(peer[2])
            row["torch_speedup"] = row["torch_2p"] / row["torch_1p"]
        rows.append(row)

    print(f"# {args.reps} repetitions, medians, images/s (A 1p x 2t @128, B 2p x 1t @128, C 1p x 1t @128, "
          f"D 2p x 1t @256, E 2 x 1p x 1t @64, F 2 x 1p x 1t @128)")
    head = (f"{'model':6} {'A':>9} {'B':>9} {'C':>9} {'D':>9} {'E':>9} {'F':>9}  {'strong B/A':>10} "
            f"{'weak D/2C':>9} {'2p/1p':>6}  {'ceil E/A':>8} {'F/2C':>5} {'kept B/E':>8} {'D/F':>5}")
    if args.torch_python:
        head += f"  {'torch 1p':>9} {'torch 2p':>9} {'torch 2p/1p':>11}"
    print(head)
    for r in rows:
        line = (f"{r['model']:6} {r['A']:9.0f} {r['B']:9.0f} {r['C']:9.0f} {r['D']:9.0f} {r['E']:9.0f} "
                f"{r['F']:9.0f}  {r['strong']:10.2f} {r['weak']:9.2f} {r['speedup']:6.2f}  "
                f"{r['strong_ceiling']:8.2f} {r['weak_ceiling']:5.2f} {r['strong_kept']:8.2f} {r['weak_kept']:5.2f}")
        if args.torch_python:
            line += f"  {r['torch_1p']:9.0f} {r['torch_2p']:9.0f} {r['torch_speedup']:11.2f}"
        print(line)
    if args.allreduce:
        p = subprocess.run([args.allreduce, "2"], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"scaling: {args.allreduce} failed:\n{p.stderr}")
        print(p.stdout, end="")


if __name__ == "__main__":
    main()
