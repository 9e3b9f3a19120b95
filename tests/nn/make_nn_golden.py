#!/usr/bin/python3
"""tests/nn/make_nn_golden.py — golden values for minidl's nn layers and reference models.

Run with Debian's python3-torch:  /usr/bin/python3 tests/nn/make_nn_golden.py
For every case NAME it builds the PyTorch module, runs a forward and backward on a fixed input
and records in tests/nn/nn_golden.safetensors (float32):
  NAME/state/<key>   the module's state_dict before the step (minidl loads it by the same names)
  NAME/x, NAME/out, NAME/dy, NAME/dx   input, output, upstream gradient, input gradient
  NAME/grad/<param>  the gradient of every parameter
  NAME/after/<buf>   buffers after the forward (BatchNorm running statistics)
Parameter names line up with minidl's modules, which proves state_dict compatibility too.

The reference models (mlp, cnn, cnn_eval, vit) hold 200k-420k parameters each: their state is not
stored but set by formula_state(), a hash of (case, key, index) that tests/nn/test_nn_golden.cpp
computes bit for bit (integer arithmetic, then exact float64 operations: scales are powers of
two). That keeps the fixture small while every gradient, the large ones included, is recorded.
cnn_eval is the CNN with BatchNorm in eval mode: there the conv biases in front of BatchNorm get a
real gradient (in training mode it is zero up to rounding, since BatchNorm subtracts the mean).
"""
import json
import os
import sys
import struct

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden"))
import safetensors_writer  # noqa: E402

torch.manual_seed(0)
T = {}


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                                 nn.Linear(128, 10))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


class ViT(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch_embed = nn.Conv2d(1, 64, 4, stride=4)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, 64))
        self.pos_embed = nn.Parameter(torch.randn(1, 50, 64) * 0.02)
        self.blocks = nn.Sequential(*[nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, activation="gelu",
                                                                 batch_first=True, norm_first=True) for _ in range(6)])
        self.norm = nn.LayerNorm(64)
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        t = self.patch_embed(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), t], dim=1) + self.pos_embed
        t = self.norm(self.blocks(t))
        return self.head(t[:, 0])


class SelfAttention(nn.Module):
    """nn.MultiheadAttention used as self-attention, returning only the output."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


def fnv1a64(text):
    h = 0xCBF29CE484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def hashed_uniform(key, n):
    """n values t in [-1, 1), multiples of 2^-23: splitmix64 of (fnv1a64(key) + index), top 24 bits."""
    with np.errstate(over="ignore"):
        x = np.arange(n, dtype=np.uint64) + np.uint64(fnv1a64(key))
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return (x >> np.uint64(40)).astype(np.float64) / 8388608.0 - 1.0


def formula_value(key, shape):
    """The value of state entry `key` (a power-of-two scale, so offset + scale * t is exact)."""
    n = int(np.prod(shape)) if len(shape) else 1
    t = hashed_uniform(key, n)
    fan = int(np.prod(shape[1:])) if len(shape) >= 2 else 1
    if key.endswith("running_var") or (len(shape) == 1 and key.endswith("weight")):
        v = 1.0 + 0.25 * t                    # positive variances, norm weights near 1
    elif len(shape) >= 2:
        e = 0
        while 4 ** e < fan:                   # scale 2^-e ~ 1/sqrt(fan_in), as PyTorch's init bound
            e += 1
        v = t / float(2 ** e)
    else:
        v = 0.25 * t                          # biases, running_mean
    return torch.from_numpy(v.astype(np.float32).reshape(shape))


def formula_state(name, module):
    with torch.no_grad():
        for k, v in module.state_dict().items():
            if v.is_floating_point():
                v.copy_(formula_value(f"{name}/{k}", list(v.shape)))


def case(name, module, x, train=True, store_state=True):
    module.train(train)
    if store_state:
        for k, v in module.state_dict().items():
            T[f"{name}/state/{k}"] = v.clone()
    x = x.clone().requires_grad_(x.is_floating_point())
    out = module(x)
    dy = torch.randn_like(out)
    (out * dy).sum().backward()
    T[f"{name}/x"], T[f"{name}/out"], T[f"{name}/dy"] = x.detach(), out.detach(), dy
    if x.grad is not None:
        T[f"{name}/dx"] = x.grad
    for k, p in module.named_parameters():
        T[f"{name}/grad/{k}"] = p.grad
    for k, b in module.named_buffers():
        T[f"{name}/after/{k}"] = b.clone()


def model_case(name, module, x, train=True, grads_of=None):
    """A reference model with formula_state(); grads_of: record only the gradients under these prefixes."""
    formula_state(name, module)
    case(name, module, x, train=train, store_state=False)
    if grads_of is not None:
        for k in [k for k in T if k.startswith(f"{name}/grad/")]:
            if not k[len(f"{name}/grad/"):].startswith(grads_of):
                del T[k]


case("linear", nn.Linear(5, 3), torch.randn(4, 5))
case("linear_3d", nn.Linear(5, 3), torch.randn(2, 4, 5))
case("conv2d", nn.Conv2d(3, 4, 3, stride=2, padding=1), torch.randn(2, 3, 7, 6))
case("batchnorm2d_train", nn.BatchNorm2d(3), torch.randn(4, 3, 5, 5) * 2 + 1)
bn = nn.BatchNorm2d(3)
bn.running_mean.copy_(torch.randn(3)); bn.running_var.copy_(torch.rand(3) + 0.5)
case("batchnorm2d_eval", bn, torch.randn(4, 3, 5, 5), train=False)
case("batchnorm1d_train", nn.BatchNorm1d(6), torch.randn(8, 6))
case("batchnorm1d_cumulative", nn.BatchNorm1d(6, momentum=None), torch.randn(8, 6))
case("layernorm", nn.LayerNorm(6), torch.randn(2, 3, 6))
case("self_attention", SelfAttention(), torch.randn(2, 5, 16))
case("encoder_layer", nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, activation="gelu", batch_first=True,
                                                 norm_first=True), torch.randn(2, 5, 16))
case("maxpool_avgpool", nn.Sequential(nn.MaxPool2d(2), nn.AvgPool2d(3, 1, 1)), torch.randn(2, 3, 8, 8))
model_case("mlp", MLP(), torch.rand(4, 1, 28, 28))
model_case("cnn", CNN(), torch.rand(4, 1, 28, 28))
# the classifier's gradients are already recorded by "cnn"; eval mode is about the conv layers
model_case("cnn_eval", CNN(), torch.rand(4, 1, 28, 28), train=False, grads_of="features.")
model_case("vit", ViT(), torch.rand(2, 1, 28, 28))
for key, shape in [("formula/conv.weight", [5, 3, 3, 3]), ("formula/bn.weight", [6]), ("formula/bn.running_var", [6]),
                   ("formula/fc.bias", [9])]:
    T[key] = formula_value(key, shape)  # the test checks its own formula_value against these
emb = nn.Embedding(10, 4)
idx = torch.tensor([[1, 2, 1], [9, 0, 3]])
for k, v in emb.state_dict().items():
    T[f"embedding/state/{k}"] = v.clone()
out = emb(idx)
T["embedding/x"], T["embedding/out"] = idx, out.detach()

safetensors_writer.write(os.path.join(os.path.dirname(os.path.abspath(__file__)), "nn_golden.safetensors"), T,
                         {"generator": f"make_nn_golden.py, torch {torch.__version__}"})
