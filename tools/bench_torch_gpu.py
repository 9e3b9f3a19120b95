#!/usr/bin/env python3
"""tools/bench_torch_gpu.py — PyTorch's training images/s on a GPU, the peer of `gpu_bench models`.

  /opt/torch/.venv/bin/python3 tools/bench_torch_gpu.py [--batch 512] [--steps 20] [--models mlp cnn vit]
                                                        [--precision fp32 bf16]

The same step as tools/gpu_bench.cpp's `models` mode: each reference model (tools/compare_pytorch.py's
make_model, the same layers as minidl's), SGD lr 0.01 momentum 0.9, cross-entropy, a fixed random
(batch, 1, 28, 28) input on cuda:0, 3 warm-up steps, then the timed steps between two
synchronisations. FP32 with TF32 off, as minidl's default; bf16: the forward and the loss under
torch.autocast("cuda", torch.bfloat16), as `gpu_bench models --precision bf16`. Prints one JSON line:
  {"mode": "torch_models", "torch": VERSION, "device": NAME, "batch": B,
   "results": [{"model", "precision", "images_per_s", "step_ms"}]}
Exit 1 when PyTorch or a CUDA device is missing (saying which), 2 on bad arguments.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--models", nargs="+", default=["mlp", "cnn", "vit"], choices=["mlp", "cnn", "vit"])
    ap.add_argument("--precision", nargs="+", default=["fp32"], choices=["fp32", "bf16"])
    args = ap.parse_args()
    if args.batch < 1 or args.steps < 1:
        ap.error("--batch and --steps must be positive")
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        sys.exit(f"bench_torch_gpu: PyTorch is not importable with {sys.executable}: {e}")
    if not torch.cuda.is_available():
        sys.exit(f"bench_torch_gpu: torch {torch.__version__} sees no CUDA device")
    from compare_pytorch import make_model

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda:0")
    results = []
    for name, precision in [(m, p) for p in args.precision for m in args.models]:
        low = precision == "bf16"
        torch.manual_seed(0)
        model = make_model(name).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(args.batch, 1, 28, 28, device=dev)
        y = torch.randint(0, 10, (args.batch,), device=dev)

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=low):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()

        for _ in range(3):
            step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        results.append({"model": name, "precision": precision, "images_per_s": round(args.batch * args.steps / seconds, 1),
                        "step_ms": round(1e3 * seconds / args.steps, 3)})
    print(json.dumps({"mode": "torch_models", "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
                      "batch": args.batch, "results": results}))


if __name__ == "__main__":
    main()
