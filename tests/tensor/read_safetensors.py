#!/usr/bin/python3
"""tests/tensor/read_safetensors.py — an independent safetensors reader (standard library + numpy).

Usage: read_safetensors.py FILE — prints "name dtype shape sum" per tensor and the metadata, so
test_serialize.cpp can check that files written by minidl parse outside minidl.
"""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "U8": np.uint8}

with open(sys.argv[1], "rb") as f:
    raw = f.read()
(n,) = struct.unpack("<Q", raw[:8])
header = json.loads(raw[8:8 + n])
data = raw[8 + n:]
meta = header.pop("__metadata__", {})
for name in sorted(header):
    e = header[name]
    b, end = e["data_offsets"]
    arr = np.frombuffer(data[b:end], dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
    print(f"{name} {arr.dtype} {tuple(arr.shape)} {float(arr.astype(np.float64).sum()):.4f}")
print("metadata", meta)
