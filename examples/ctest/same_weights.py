#!/usr/bin/python3
"""examples/ctest/same_weights.py — are two training checkpoints bit-identical?

    same_weights.py A.safetensors B.safetensors [--ignore-config-key KEY]...

Reads both safetensors files with nothing but the standard library (8-byte header length, JSON
header, raw bytes), compares every model.*, optimizer.* and scheduler.* tensor byte for byte and the
metadata that describes the training state (epoch, config, val_* results). Prints the first
differences and exits 1 if there are any, 0 otherwise. --ignore-config-key KEY leaves the recipe's
line `KEY: ...` out of the comparison (runs that differ only in, say, SAVE_FREQ_STEPS).
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


def without_keys(config, keys):
    return "\n".join(l for l in (config or "").splitlines() if l.strip().split(":")[0] not in keys)


def main():
    args = sys.argv[1:]
    ignored = [args[i + 1] for i, x in enumerate(args) if x == "--ignore-config-key"]
    a, b = [x for i, x in enumerate(args) if x != "--ignore-config-key" and (i == 0 or args[i - 1] != "--ignore-config-key")]
    (ta, ma), (tb, mb) = read(a), read(b)
    if ignored:
        ma["config"], mb["config"] = without_keys(ma.get("config"), ignored), without_keys(mb.get("config"), ignored)
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
