#!/usr/bin/python3
# fuzz/make_seeds.py — writes the small seed corpora in fuzz/corpus/<target>/ (committed; rerun
# only to change them). Standard library only.
import gzip
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# idx_reader: first byte even = plain, odd = gzip-compressed by the target itself.
images = struct.pack(">IIII", 0x803, 2, 3, 3) + bytes(range(18))
labels = struct.pack(">II", 0x801, 3) + bytes([1, 7, 9])
cifar = bytes([3]) + bytes(i % 256 for i in range(3072))
put("idx_reader", "images_plain", b"\x00" + images)
put("idx_reader", "images_gz", b"\x01" + images)
put("idx_reader", "labels_plain", b"\x00" + labels)
put("idx_reader", "images_pregz", b"\x00" + gzip.compress(images, mtime=0))
put("idx_reader", "cifar_one_record", b"\x00" + cifar)


# safetensors: a small valid file with every dtype and metadata, and an empty one.
def safetensors(tensors, metadata=None):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - (8 + len(h)) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


put("safetensors", "all_dtypes", safetensors({
    "a.weight": ("F32", [2, 2], struct.pack("<4f", 1, -2, 3.5, 0)),
    "b": ("F64", [1], struct.pack("<d", 0.25)),
    "steps": ("I64", [], struct.pack("<q", 7)),
    "img": ("U8", [3], bytes([0, 128, 255])),
    "empty": ("F32", [0, 4], b""),
}, {"format": "minidl", "epoch": "3"}))
put("safetensors", "empty", safetensors({}))

# recipe: the committed configs.
for name in ("mlp", "cnn", "vit"):
    with open(os.path.join(HERE, "..", "configs", name + ".yaml"), "rb") as f:
        put("recipe", name + ".yaml", f.read())


# store_frame: one connection's bytes — a hello, then requests.
def s(b):
    return struct.pack(">I", len(b)) + b


def frame(body):
    return struct.pack(">I", len(body)) + body


HELLO, SET, GET, ADD, WAIT, CHECK, DELETE, NUMKEYS = 8, 1, 2, 3, 4, 5, 6, 7
session = (frame(bytes([HELLO]) + s(b"token")) +
           frame(bytes([SET]) + s(b"key") + s(b"value")) +
           frame(bytes([GET]) + s(b"key") + struct.pack(">q", 1000)) +
           frame(bytes([ADD]) + s(b"n") + struct.pack(">q", -3)) +
           frame(bytes([WAIT]) + struct.pack(">I", 2) + s(b"a") + s(b"b") + struct.pack(">q", 5)) +
           frame(bytes([CHECK]) + struct.pack(">I", 1) + s(b"a")) +
           frame(bytes([DELETE]) + s(b"a")) +
           frame(bytes([NUMKEYS])))
put("store_frame", "session", session)
put("store_frame", "hello_only", frame(bytes([HELLO]) + s(b"")))
