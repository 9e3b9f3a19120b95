"""tests/golden/safetensors_writer.py — writes torch tensors as one safetensors file, standard
library only (the golden-value scripts share it; minidl's tests read the result with minidl::load).
"""
import json
import os
import struct

import torch

DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64", torch.uint8: "U8"}


def write(path, tensors, metadata):
    """tensors: name -> torch.Tensor (sorted by name in the file); metadata: name -> str."""
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for key in sorted(tensors):
        t = tensors[key].detach().contiguous()
        raw = t.numpy().tobytes()
        header[key] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)  # the data section starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
    print(f"wrote {len(tensors)} tensors, {os.path.getsize(path)} bytes to {path}")
