#!/usr/bin/python3
"""tests/nn/make_api_golden.py — PyTorch golden values for the functional API beyond the reference
models: activations, losses with their options, attention with masks, padding and pooling modes.

Run with Debian's python3-torch:  /usr/bin/python3 tests/nn/make_api_golden.py
Writes tests/nn/api_golden.safetensors. Functional case NAME (same layout as
tests/golden/make_golden.py): NAME/in0, NAME/in1, ... (inputs; integer and boolean ones are
targets / masks), NAME/out, NAME/dy and NAME/grad<i> = d sum(out * dy) / d in<i> for the inputs
that take a gradient. Module case NAME: NAME/state/<key> (the module's state_dict), NAME/in<i>,
NAME/out<j> for each output, NAME/dy<j>, NAME/grad<i>, NAME/pgrad/<param>.
tests/nn/test_api_golden.cpp replays every case through minidl.
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden"))
import safetensors_writer  # noqa: E402

torch.manual_seed(0)
T = {}
r = torch.randn


def case(name, fn, inputs, grad_inputs=None):
    """fn(*inputs) -> one tensor; gradients of sum(out * dy) for floating inputs in grad_inputs (all by default)."""
    ins = [x.clone().requires_grad_(x.is_floating_point() and (grad_inputs is None or i in grad_inputs))
           for i, x in enumerate(inputs)]
    out = fn(*ins)
    dy = torch.randn_like(out)
    (out * dy).sum().backward()
    for i, x in enumerate(inputs):
        T[f"{name}/in{i}"] = x.to(torch.uint8) if x.dtype == torch.bool else x
        if ins[i].grad is not None:
            T[f"{name}/grad{i}"] = ins[i].grad
    T[f"{name}/out"], T[f"{name}/dy"] = out.detach(), dy


# ---- activations (inputs spread over the kinks and thresholds) ----
case("silu", F.silu, [r(4, 5) * 3])
case("leaky_relu", lambda x: F.leaky_relu(x, 0.2), [r(4, 5)])
case("elu", lambda x: F.elu(x, alpha=0.7), [r(4, 5) * 2])
case("softplus", lambda x: F.softplus(x, beta=2.0, threshold=5.0), [r(4, 5) * 4])
case("softplus_default", F.softplus, [r(4, 5) * 12])
case("hardswish", F.hardswish, [r(4, 5) * 4])
case("gelu_tanh_module", nn.GELU(approximate="tanh"), [r(3, 4) * 2])

# ---- class-index losses: weights, ignore_index, reductions, (N, C, d) inputs ----
logits, target = r(6, 4), torch.tensor([0, 3, 1, -100, 2, 3])
w = torch.rand(4) + 0.5
case("ce_weight_ignore_mean", lambda x, t, w: F.cross_entropy(x, t, weight=w), [logits, target, w], {0})
case("ce_weight_ignore_sum", lambda x, t, w: F.cross_entropy(x, t, weight=w, reduction="sum"), [logits, target, w], {0})
case("ce_ignore_none", lambda x, t: F.cross_entropy(x, t, reduction="none"), [logits, target])
case("ce_ignore2_mean", lambda x, t: F.cross_entropy(x, t, ignore_index=2), [logits, torch.tensor([0, 2, 1, 3, 2, 2])])
case("ce_smooth_weight_ignore", lambda x, t, w: F.cross_entropy(x, t, weight=w, label_smoothing=0.2),
     [logits, target, w], {0})
case("ce_smooth_none", lambda x, t: F.cross_entropy(x, t, reduction="none", label_smoothing=0.1), [logits, target])
case("ce_3d_mean", F.cross_entropy, [r(2, 4, 3), torch.tensor([[0, 1, 3], [2, -100, 1]])])
case("ce_3d_none", lambda x, t: F.cross_entropy(x, t, reduction="none"), [r(2, 4, 3), torch.tensor([[0, 1, 3], [2, 2, 1]])])
lp = F.log_softmax(r(5, 3), 1)
nt = torch.tensor([2, 0, -100, 1, 2])
case("nll_weight_mean", lambda x, t, w: F.nll_loss(x, t, weight=w), [lp, nt, torch.rand(3) + 0.5], {0})
case("nll_sum", lambda x, t: F.nll_loss(x, t, reduction="sum"), [lp, nt])
case("nll_none", lambda x, t: F.nll_loss(x, t, reduction="none"), [lp, nt])

# ---- element-wise losses ----
x, y = r(3, 4) * 3, torch.rand(3, 4)
case("bce_logits_mean", F.binary_cross_entropy_with_logits, [x, y])
case("bce_logits_weight_pos_sum",
     lambda x, y, w, pw: F.binary_cross_entropy_with_logits(x, y, weight=w, pos_weight=pw, reduction="sum"),
     [x, y, torch.rand(1, 4), torch.rand(4) * 3], {0, 1})
case("bce_logits_large_none", lambda x, y: F.binary_cross_entropy_with_logits(x, y, reduction="none"),
     [torch.tensor([[-120.0, -30.0, 0.0, 30.0, 120.0]]), torch.tensor([[0.0, 1.0, 0.5, 0.0, 1.0]])])
case("mse_sum", lambda a, b: F.mse_loss(a, b, reduction="sum"), [r(3, 4), r(3, 4)])
case("mse_none", lambda a, b: F.mse_loss(a, b, reduction="none"), [r(3, 4), r(3, 4)])
case("l1_mean", F.l1_loss, [r(3, 4), r(3, 4)])
case("smooth_l1_beta05_sum", lambda a, b: F.smooth_l1_loss(a, b, reduction="sum", beta=0.5), [r(3, 4), r(3, 4)])
case("smooth_l1_none", lambda a, b: F.smooth_l1_loss(a, b, reduction="none"), [r(3, 4) * 2, r(3, 4)])

# ---- scaled dot-product attention: torch 1.13 has no F.scaled_dot_product_attention, so the
# reference is the formula PyTorch documents for it: softmax(q k^T * scale + mask) v ----
def sdpa_ref(q, k, v, mask=None, causal=False, scale=None):
    L, S = q.shape[-2], k.shape[-2]
    s = q @ k.transpose(-2, -1) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if causal:
        s = s.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask
    return torch.softmax(s, -1) @ v


q, k, v = r(2, 3, 4, 8), r(2, 3, 5, 8), r(2, 3, 5, 6)
allowed = torch.rand(4, 5) > 0.4
allowed[:, 0] = True  # every query keeps a key
case("sdpa_plain", sdpa_ref, [q, k, v])
case("sdpa_causal", lambda q, k, v: sdpa_ref(q, k, v, causal=True), [q, k, v])
case("sdpa_bool_mask_scale", lambda q, k, v, m: sdpa_ref(q, k, v, mask=m, scale=0.3), [q, k, v, allowed])
case("sdpa_float_mask", lambda q, k, v, m: sdpa_ref(q, k, v, mask=m), [q, k, v, r(3, 4, 5)], {0, 1, 2})


def module_case(name, module, inputs, fn, grad_inputs):
    """fn(module, *inputs) -> tuple of outputs; records state, inputs, outputs, dy per output, gradients."""
    for key, val in module.state_dict().items():
        T[f"{name}/state/{key}"] = val.clone()
    ins = [x.clone().requires_grad_(i in grad_inputs) for i, x in enumerate(inputs)]
    outs = fn(module, *ins)
    total = 0
    for j, o in enumerate(outs):
        dy = torch.randn_like(o)
        total = total + (o * dy).sum()
        T[f"{name}/out{j}"], T[f"{name}/dy{j}"] = o.detach(), dy
    total.backward()
    for i, x in enumerate(inputs):
        T[f"{name}/in{i}"] = x.to(torch.uint8) if x.dtype == torch.bool else x
        if ins[i].grad is not None:
            T[f"{name}/grad{i}"] = ins[i].grad
    for key, p in module.named_parameters():
        T[f"{name}/pgrad/{key}"] = p.grad


# cross-attention, key-padding mask, boolean attn_mask (True = may not attend), averaged weights
kpm = torch.zeros(2, 6, dtype=torch.bool)
kpm[1, 4:] = True
band = torch.ones(4, 6, dtype=torch.bool).triu(3)
module_case("mha_cross_masks", nn.MultiheadAttention(16, 4, batch_first=True),
            [r(2, 4, 16), r(2, 6, 16), r(2, 6, 16), kpm, band],
            lambda m, q, k, v, kpm, am: m(q, k, v, key_padding_mask=kpm, attn_mask=am), {0, 1, 2})
# self-attention, sequence-first, float per-head attn_mask, per-head weights
x_sf = r(5, 2, 16)
module_case("mha_seq_first_float_mask", nn.MultiheadAttention(16, 4, batch_first=False),
            [x_sf, r(8, 5, 5)],
            lambda m, x, am: m(x, x, x, attn_mask=am, average_attn_weights=False), {0})
# causal self-attention without weights (minidl's is_causal flag against PyTorch's explicit mask)
module_case("mha_causal", nn.MultiheadAttention(16, 2, batch_first=True), [r(2, 5, 16)],
            lambda m, x: m(x, x, x, attn_mask=torch.ones(5, 5, dtype=torch.bool).triu(1), need_weights=False)[:1], {0})

# ---- pooling ceil_mode, F.pad modes, Conv2d padding "same" / "valid" and padding_mode ----
case("max_pool_ceil", lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True), [r(2, 3, 7, 6)])
case("max_pool_ceil_pad", lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), [r(2, 2, 8, 8)])
case("avg_pool_ceil", lambda x: F.avg_pool2d(x, 3, 2, ceil_mode=True), [r(2, 3, 7, 6)])
case("avg_pool_ceil_pad_exclude", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
     [r(2, 2, 8, 8)])
case("pad_constant", lambda x: F.pad(x, (1, 2, 0, 3), value=0.5), [r(2, 3, 4, 5)])
case("pad_reflect", lambda x: F.pad(x, (2, 1, 3, 1), mode="reflect"), [r(2, 3, 4, 5)])
case("pad_replicate", lambda x: F.pad(x, (1, 3, 2, 0), mode="replicate"), [r(2, 3, 4, 5)])
case("pad_circular", lambda x: F.pad(x, (2, 2, 1, 3), mode="circular"), [r(2, 3, 4, 5)])
for name, conv in [("conv_same_even_kernel", nn.Conv2d(2, 3, 4, padding="same")),
                   ("conv_same_dilated", nn.Conv2d(2, 3, 3, padding="same", dilation=2)),
                   ("conv_valid", nn.Conv2d(2, 3, 3, padding="valid")),
                   ("conv_reflect", nn.Conv2d(2, 3, 3, padding=1, padding_mode="reflect")),
                   ("conv_same_reflect_even", nn.Conv2d(2, 3, (4, 2), padding="same", padding_mode="reflect")),
                   ("conv_replicate_stride2", nn.Conv2d(2, 3, 3, stride=2, padding=1, padding_mode="replicate")),
                   ("conv_circular", nn.Conv2d(2, 3, 3, padding=2, padding_mode="circular", bias=False))]:
    module_case(name, conv, [r(2, 2, 7, 6)], lambda m, x: (m(x),), {0})

safetensors_writer.write(os.path.join(os.path.dirname(os.path.abspath(__file__)), "api_golden.safetensors"), T,
                         {"generator": f"make_api_golden.py, torch {torch.__version__}"})
