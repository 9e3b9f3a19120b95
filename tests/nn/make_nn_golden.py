#!/usr/bin/python3
"""tests/nn/make_nn_golden.py — golden values for minidl's nn layers and reference models.

Run with Debian's python3-torch:  /usr/bin/python3 tests/nn/make_nn_golden.py
For every case NAME it builds the PyTorch module, runs a forward and backward on a fixed input
and records in tests/nn/nn_golden.safetensors:
  NAME/state/<key>   the module's state_dict before the step (minidl loads it by the same names)
  NAME/x, NAME/out, NAME/dy, NAME/dx   input, output, upstream gradient, input gradient
  NAME/grad/<param>  parameter gradients
  NAME/after/<buf>   buffers after the forward (BatchNorm running statistics)
Parameter names line up with minidl's modules, which proves state_dict compatibility too.
"""
import json
import os
import sys
import struct

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


def case(name, module, x, train=True):
    module.train(train)
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
        if p.numel() <= 20000:  # keeps the fixture small; the big layers are covered by dx
            T[f"{name}/grad/{k}"] = p.grad
    for k, b in module.named_buffers():
        T[f"{name}/after/{k}"] = b.clone()


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
case("mlp", MLP(), torch.rand(4, 1, 28, 28))
case("cnn", CNN(), torch.rand(4, 1, 28, 28))
case("vit", ViT(), torch.rand(2, 1, 28, 28))
emb = nn.Embedding(10, 4)
idx = torch.tensor([[1, 2, 1], [9, 0, 3]])
for k, v in emb.state_dict().items():
    T[f"embedding/state/{k}"] = v.clone()
out = emb(idx)
T["embedding/x"], T["embedding/out"] = idx, out.detach()

safetensors_writer.write(os.path.join(os.path.dirname(os.path.abspath(__file__)), "nn_golden.safetensors"), T,
                         {"generator": f"make_nn_golden.py, torch {torch.__version__}"})
