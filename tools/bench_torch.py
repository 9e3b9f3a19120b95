#!/usr/bin/python3
"""tools/bench_torch.py — the PyTorch peer of examples/bench_core.cpp, on the same machine.

Run with Debian's python3-torch and OpenBLAS at its best (the two variables below are set on
some machines for older OpenBLAS builds; unset them for this command only):
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 tools/bench_torch.py [--threads N]
Prints the same figures as bench_core: GEMM GFLOP/s, conv2d GFLOP/s, add GB/s, tiny-op µs.
"""
import argparse
import time

import torch
import torch.nn.functional as F


def timeit(fn, min_time=0.5):
    fn()
    n, start = 0, time.perf_counter()
    while True:
        fn()
        n += 1
        el = time.perf_counter() - start
        if el >= min_time:
            return el / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.mm(torch.ones(64, 64), torch.ones(64, 64))  # loads the BLAS library
    with open("/proc/self/maps") as maps:
        blas = sorted({line.split()[-1] for line in maps if "blas" in line.lower()})
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, BLAS: {', '.join(blas) or 'built in'}")
    for n in (256, 512, 1024, 2048):
        a, b = torch.randn(n, n), torch.randn(n, n)
        t = timeit(lambda: torch.mm(a, b))
        print(f"gemm {n:5d}: {2 * n ** 3 / t / 1e9:8.1f} GFLOP/s")
    for cin, cout, hw in ((1, 32, 28), (32, 64, 14)):
        x = torch.randn(128, cin, hw, hw, requires_grad=True)
        w = torch.randn(cout, cin, 3, 3, requires_grad=True)
        bias = torch.zeros(cout, requires_grad=True)
        flops = 2.0 * 128 * cout * hw * hw * cin * 9
        with torch.no_grad():
            t = timeit(lambda: F.conv2d(x, w, bias, padding=1))
        print(f"conv2d fwd {cin}->{cout} @{hw}: {flops / t / 1e9:8.1f} GFLOP/s ({t * 1e3:.2f} ms)")
        y = F.conv2d(x, w, bias, padding=1)
        dy = torch.ones_like(y)
        t = timeit(lambda: torch.autograd.grad(y, (x, w, bias), dy, retain_graph=True))
        print(f"conv2d bwd {cin}->{cout} @{hw}: {2 * flops / t / 1e9:8.1f} GFLOP/s ({t * 1e3:.2f} ms)")
    for n in (1 << 20, 1 << 24):
        a, b = torch.randn(n), torch.randn(n)
        t = timeit(lambda: torch.add(a, b))
        print(f"add {n:9d}: {12 * n / t / 1e9:8.1f} GB/s")
    a, b = torch.ones(1), torch.ones(1)
    t = timeit(lambda: torch.add(a, b))
    print(f"tiny op, no autograd: {t * 1e6:.3f} us")
    a, b = torch.ones(1, requires_grad=True), torch.ones(1, requires_grad=True)
    t = timeit(lambda: torch.add(a, b))
    print(f"tiny op, autograd:    {t * 1e6:.3f} us")


if __name__ == "__main__":
    main()
