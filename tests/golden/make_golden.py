#!/usr/bin/python3
"""tests/golden/make_golden.py — golden values for minidl's ops, computed by PyTorch.

Run with Debian's python3-torch:  /usr/bin/python3 tests/golden/make_golden.py
Writes tests/golden/ops.safetensors: for every case NAME, the tensors NAME/in0, NAME/in1, ...
(inputs), NAME/out (forward result), NAME/dy (upstream gradient) and NAME/grad0, ... (gradients
of sum(out * dy) with respect to each floating input). The case's parameters are stored in the
file's __metadata__ under NAME as JSON. tests/autograd/test_golden.cpp runs the same cases
through minidl and compares with per-op tolerances. The file is committed, so tests need no torch.
"""
import json
import os
import sys
import struct

import torch
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_writer  # noqa: E402

torch.manual_seed(0)
torch.set_default_dtype(torch.float32)
CASES = {}   # name -> (inputs, out, dy, grads, params)


def case(name, fn, inputs, params=None, grad_inputs=None):
    """Runs fn(*inputs) with autograd and records inputs, output and input gradients."""
    ins = [x.clone().requires_grad_(x.is_floating_point() and (grad_inputs is None or i in grad_inputs))
           for i, x in enumerate(inputs)]
    out = fn(*ins)
    dy = torch.randn_like(out)
    grads = []
    if any(x.requires_grad for x in ins):
        (out * dy).sum().backward()
        grads = [x.grad if x.requires_grad else None for x in ins]
    CASES[name] = (inputs, out.detach(), dy, grads, params or {})


r = torch.randn
pos = lambda *s: torch.rand(*s) + 0.5

case("add", torch.add, [r(2, 3), r(3)])
case("sub", torch.sub, [r(2, 1, 3), r(4, 1)])
case("mul", torch.mul, [r(2, 3), r(2, 1)])
case("div", torch.div, [r(3, 2), pos(2)])
case("neg", torch.neg, [r(5)])
case("exp", torch.exp, [r(2, 3)])
case("log", torch.log, [pos(2, 3)])
case("sqrt", torch.sqrt, [pos(2, 3)])
case("pow", lambda x: torch.pow(x, 3.0), [r(2, 3)], {"p": 3.0})
case("tanh", torch.tanh, [r(2, 3)])
case("sigmoid", torch.sigmoid, [r(2, 3) * 4])
case("relu", torch.relu, [r(3, 4)])
case("gelu_erf", F.gelu, [r(3, 4)])
case("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), [r(3, 4)])
case("sum_dims", lambda x: x.sum(dim=(0, 2), keepdim=True), [r(2, 3, 4)])
case("mean_dim", lambda x: x.mean(dim=1), [r(2, 3, 4)])
case("var_dim", lambda x: x.var(dim=1), [r(3, 5)])
case("max_dim", lambda x: x.max(dim=1).values, [r(3, 5)])
case("matmul_2d", torch.matmul, [r(3, 4), r(4, 5)])
case("matmul_batched_broadcast", torch.matmul, [r(2, 1, 3, 4), r(3, 4, 2)])
case("matmul_3d_2d", torch.matmul, [r(2, 3, 4), r(4, 5)])
case("transpose_mul", lambda a, b: a.t() * b, [r(3, 2), r(2, 3)])
case("slice", lambda x: x[:, 1:4:2], [r(2, 5)])
case("cat", lambda a, b: torch.cat([a, b], dim=1), [r(2, 3), r(2, 2)])
case("stack", lambda a, b: torch.stack([a, b], dim=1), [r(2, 3), r(2, 3)])
case("index_select", lambda x, i: x.index_select(0, i), [r(3, 2), torch.tensor([2, 0, 2, 1])])
case("softmax", lambda x: torch.softmax(x, -1), [r(3, 5) * 3])
case("log_softmax", lambda x: torch.log_softmax(x, 1), [r(2, 4, 3) * 3])
case("cross_entropy", F.cross_entropy, [r(4, 5), torch.tensor([1, 0, 4, 2])])
case("cross_entropy_ls", lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), [r(4, 5), torch.tensor([1, 0, 4, 2])],
     {"label_smoothing": 0.1})
case("mse_loss", F.mse_loss, [r(2, 3), r(2, 3)])
case("conv2d", lambda x, w, b: F.conv2d(x, w, b), [r(2, 2, 5, 5), r(3, 2, 3, 3), r(3)])
case("conv2d_s2p1", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), [r(1, 2, 6, 5), r(2, 2, 3, 3), r(2)],
     {"stride": 2, "padding": 1})
case("conv2d_d2g2", lambda x, w: F.conv2d(x, w, None, padding=2, dilation=2, groups=2), [r(1, 4, 5, 5), r(4, 2, 3, 3)],
     {"padding": 2, "dilation": 2, "groups": 2})
case("max_pool2d", lambda x: F.max_pool2d(x, 2), [r(2, 2, 4, 4)])
case("max_pool2d_k3s2p1", lambda x: F.max_pool2d(x, 3, 2, 1), [r(1, 2, 5, 5)])
case("avg_pool2d_k3s2p1", lambda x: F.avg_pool2d(x, 3, 2, 1), [r(1, 2, 5, 5)])
case("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (2, 3)), [r(1, 2, 5, 7)])
rm, rv = r(3), pos(3)
rm_t, rv_t = rm.clone(), rv.clone()   # updated in place by the training-mode call
case("batch_norm_train", lambda x, w, b: F.batch_norm(x, rm_t, rv_t, w, b, True, 0.1, 1e-5),
     [r(4, 3, 2, 2), r(3), r(3)], {"momentum": 0.1, "eps": 1e-5})
# running stats before (in0, in1) and after (out: running_mean then running_var) that call
CASES["batch_norm_running"] = ([rm, rv], torch.cat([rm_t, rv_t]), torch.zeros(6), [], {})
case("batch_norm_eval", lambda x, w, b, m, v: F.batch_norm(x, m, v, w, b, False, 0.1, 1e-5),
     [r(4, 3, 2, 2), r(3), r(3), r(3), pos(3)], {"eps": 1e-5}, grad_inputs={0, 1, 2})
case("layer_norm", lambda x, w, b: F.layer_norm(x, (4,), w, b, 1e-5), [r(2, 3, 4), r(4), r(4)])
case("embedding", lambda i, w: F.embedding(i, w), [torch.tensor([[1, 3, 1], [0, 2, 3]]), r(4, 2)])

# resampling, group norm, transposed convolution (after the others, so that their inputs keep their values)
up = lambda **kw: (lambda x: F.interpolate(x, **kw))
case("interpolate_nearest_size", up(size=(5, 7), mode="nearest"), [r(1, 2, 3, 4)])
case("interpolate_nearest_scale", up(scale_factor=(1.7, 0.75), mode="nearest"), [r(1, 2, 5, 5)])
case("interpolate_nearest_x2", up(scale_factor=2.0, mode="nearest"), [r(2, 1, 2, 3)])
case("interpolate_nearest_down", up(size=(2, 3), mode="nearest"), [r(1, 2, 5, 7)])
case("interpolate_bilinear_size", up(size=(5, 7), mode="bilinear", align_corners=False), [r(2, 2, 3, 4)])
case("interpolate_bilinear_ac", up(size=(5, 7), mode="bilinear", align_corners=True), [r(2, 2, 3, 4)])
case("interpolate_bilinear_scale", up(scale_factor=(1.7, 0.6), mode="bilinear"), [r(1, 2, 4, 6)])
case("interpolate_bilinear_recompute", up(scale_factor=(1.7, 0.6), mode="bilinear", recompute_scale_factor=True),
     [r(1, 2, 4, 6)])
case("interpolate_bilinear_ac_scale", up(scale_factor=2.0, mode="bilinear", align_corners=True), [r(1, 1, 3, 2)])
case("interpolate_bilinear_down", up(size=(2, 3), mode="bilinear"), [r(1, 2, 5, 7)])
case("group_norm", lambda x, w, b: F.group_norm(x, 2, w, b, 1e-5), [r(2, 6, 3, 3), r(6), r(6)])
case("group_norm_3d_eps", lambda x, w, b: F.group_norm(x, 4, w, b, 1e-3), [r(3, 4, 5), r(4), r(4)])
case("group_norm_no_affine", lambda x: F.group_norm(x, 3, None, None, 1e-5), [r(2, 6, 2, 3)])
case("conv_transpose2d", lambda x, w, b: F.conv_transpose2d(x, w, b), [r(2, 3, 4, 4), r(3, 2, 3, 3), r(2)])
case("conv_transpose2d_s2p1op1", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1),
     [r(1, 2, 3, 4), r(2, 3, 3, 3), r(3)])
case("conv_transpose2d_d2g2", lambda x, w: F.conv_transpose2d(x, w, None, stride=2, dilation=2, groups=2),
     [r(1, 4, 3, 3), r(4, 1, 3, 2)])

# ---- write one safetensors file (stdlib only) ----
tensors, meta = {}, {}
for name, (inputs, out, dy, grads, params) in CASES.items():
    for i, x in enumerate(inputs):
        tensors[f"{name}/in{i}"] = x
    tensors[f"{name}/out"] = out
    tensors[f"{name}/dy"] = dy
    for i, g in enumerate(grads):
        if g is not None:
            tensors[f"{name}/grad{i}"] = g
    meta[name] = json.dumps(params, sort_keys=True)
meta["generator"] = f"make_golden.py, torch {torch.__version__}"

safetensors_writer.write(os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops.safetensors"), tensors, meta)
print(f"{len(CASES)} cases")
