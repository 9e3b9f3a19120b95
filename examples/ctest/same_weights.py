#!/usr/bin/python3
"""examples/ctest/same_weights.py — are two training checkpoints bit-identical?

    same_weights.py A.safetensors B.safetensors

Reads both safetensors files with nothing but the standard library (8-byte header length, JSON
header, raw bytes), compares every model.*, optim.* and sched.* tensor byte for byte and the
metadata that describes the training state (epoch, config, val_* results). Prints the first
differences and exits 1 if there are any, 0 otherwise.
"""
import json
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        blob = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {k: (v["dtype"], v["shape"], blob[v["data_offsets"][0]:v["data_offsets"][1]]) for k, v in header.items()}
    return tensors, meta


def main():
    a, b = sys.argv[1], sys.argv[2]
    (ta, ma), (tb, mb) = read(a), read(b)
    problems = []
    for key in sorted(set(ta) | set(tb)):
        if key not in ta or key not in tb:
            problems.append(f"{key}: only in {a if key in ta else b}")
        elif ta[key] != tb[key]:
            problems.append(f"{key}: {ta[key][0]}{ta[key][1]} differs")
    for key in ("epoch", "config", "val_acc1", "val_correct1", "val_count", "val_loss"):
        if ma.get(key) != mb.get(key):
            problems.append(f"metadata {key}: {ma.get(key)!r} vs {mb.get(key)!r}")
    if problems:
        print(f"{a} and {b} differ:\n  " + "\n  ".join(problems[:20]))
        return 1
    print(f"identical: {len(ta)} tensors ({sum(k.startswith('model.') for k in ta)} model tensors) and the training metadata")
    return 0


if __name__ == "__main__":
    sys.exit(main())
