#!/usr/bin/python3
"""tests/optim/make_optim_golden.py — golden values for minidl's optimizers, LR schedulers and
gradient clipping, computed by PyTorch.

Run with Debian's python3-torch:  /usr/bin/python3 tests/optim/make_optim_golden.py
Writes tests/optim/optim_golden.safetensors (committed, so the tests need no torch):
  params/p0, params/p1              initial parameters, float32 (5, 4) and (7,)
  grads/<k>/p0, grads/<k>/p1        the gradient given at step k = 1..10 (the same for every optimizer)
  <case>/<k>/p0, <case>/<k>/p1      the parameters after step k, for every optimizer case below
  sched/<case>                      float64 (30,): the lr after 0, 1, ..., 29 scheduler steps (base lr 0.1)
  clip/grads/p0, clip/grads/p1      gradients before clipping
  clip/<case>/total_norm            float32 0-d: what clip_grad_norm_ returned
  clip/<case>/p0, clip/<case>/p1    gradients after clipping
The hyperparameters of each case are in the file's __metadata__ under the case name (JSON);
tests/optim/test_optim_golden.cpp repeats them and compares with minidl.
"""
import json
import math
import os
import sys
import struct
import warnings

import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden"))
import safetensors_writer  # noqa: E402

# SequentialLR calls scheduler.step(0) at a milestone, which warns about the deprecated epoch argument
warnings.filterwarnings("ignore", category=UserWarning, module="torch.optim.lr_scheduler")

torch.manual_seed(0)
torch.set_default_dtype(torch.float32)
tensors, meta = {}, {}
STEPS = 10

init = [torch.randn(5, 4), torch.randn(7)]
# gradients of varied scale, so eps and the bias corrections matter; p1's step-3 gradient is tiny
grads = []
for k in range(1, STEPS + 1):
    scale = 1.0 if k % 3 else 0.01
    grads.append([torch.randn(5, 4) * scale, torch.randn(7) * scale * 3.0])
for i, p in enumerate(init):
    tensors[f"params/p{i}"] = p
for k, gs in enumerate(grads, start=1):
    for i, g in enumerate(gs):
        tensors[f"grads/{k}/p{i}"] = g


def run_optimizer(name, make, params_meta):
    """Runs `make(params)` for STEPS steps on the shared gradients, recording the params after each."""
    params = [p.clone().requires_grad_(True) for p in init]
    opt = make(params)
    for k, gs in enumerate(grads, start=1):
        opt.zero_grad(set_to_none=True)
        for p, g in zip(params, gs):
            p.grad = g.clone()
        opt.step()
        for i, p in enumerate(params):
            tensors[f"{name}/{k}/p{i}"] = p.detach().clone()
    meta[name] = json.dumps(params_meta, sort_keys=True)


O = torch.optim
run_optimizer("sgd_plain", lambda ps: O.SGD(ps, lr=0.1, foreach=False), {"lr": 0.1})
run_optimizer("sgd_momentum", lambda ps: O.SGD(ps, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=5e-4,
                                               foreach=False),
              {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 5e-4})
run_optimizer("sgd_nesterov", lambda ps: O.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4,
                                               foreach=False),
              {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4})
run_optimizer("sgd_groups", lambda ps: O.SGD([{"params": [ps[0]], "weight_decay": 1e-2},
                                              {"params": [ps[1]], "lr": 0.01}],
                                             lr=0.1, momentum=0.9, weight_decay=0.0, foreach=False),
              {"lr": 0.1, "momentum": 0.9, "groups": [{"params": [0], "weight_decay": 1e-2},
                                                      {"params": [1], "lr": 0.01}]})
run_optimizer("adam", lambda ps: O.Adam(ps, lr=1e-2, foreach=False), {"lr": 1e-2})
run_optimizer("adam_wd", lambda ps: O.Adam(ps, lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=1e-2,
                                           foreach=False),
              {"lr": 1e-2, "betas": [0.8, 0.99], "eps": 1e-6, "weight_decay": 1e-2})
run_optimizer("adam_amsgrad", lambda ps: O.Adam(ps, lr=1e-2, amsgrad=True, foreach=False),
              {"lr": 1e-2, "amsgrad": True})
run_optimizer("adamw", lambda ps: O.AdamW(ps, lr=1e-2, foreach=False), {"lr": 1e-2, "weight_decay": 1e-2})
run_optimizer("adamw_amsgrad", lambda ps: O.AdamW(ps, lr=1e-2, weight_decay=0.1, amsgrad=True, foreach=False),
              {"lr": 1e-2, "weight_decay": 0.1, "amsgrad": True})


# ---- LR schedulers: the lr after 0..29 steps ----
def lr_curve(name, make, params_meta, n=30):
    opt = O.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    sched = make(opt)
    lrs = []
    for _ in range(n):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    tensors[f"sched/{name}"] = torch.tensor(lrs, dtype=torch.float64)
    meta[f"sched/{name}"] = json.dumps(params_meta, sort_keys=True)


S = O.lr_scheduler
lr_curve("step", lambda o: S.StepLR(o, step_size=5, gamma=0.3), {"step_size": 5, "gamma": 0.3})
lr_curve("multistep", lambda o: S.MultiStepLR(o, milestones=[8, 15, 25], gamma=0.1),
         {"milestones": [8, 15, 25], "gamma": 0.1})
lr_curve("cosine", lambda o: S.CosineAnnealingLR(o, T_max=20, eta_min=1e-3), {"T_max": 20, "eta_min": 1e-3})
lr_curve("warmup_cosine",
         lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=5),
                                      S.CosineAnnealingLR(o, T_max=25, eta_min=0.0)], milestones=[5]),
         {"warmup_steps": 5, "start_factor": 0.1, "T_max": 25, "eta_min": 0.0})
lr_curve("warmup_step",
         lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=3),
                                      S.StepLR(o, step_size=5, gamma=0.3)], milestones=[3]),
         {"warmup_steps": 3, "start_factor": 0.25, "step_size": 5, "gamma": 0.3})

# ---- clip_grad_norm_ ----
clip_grads = [torch.randn(5, 4), torch.randn(7) * 2.0]
for i, g in enumerate(clip_grads):
    tensors[f"clip/grads/p{i}"] = g
for name, max_norm, norm_type in [("l2", 1.0, 2.0), ("l2_noclip", 100.0, 2.0), ("l1", 3.0, 1.0),
                                  ("linf", 0.5, math.inf)]:
    ps = [torch.zeros_like(g, requires_grad=True) for g in clip_grads]
    for p, g in zip(ps, clip_grads):
        p.grad = g.clone()
    total = torch.nn.utils.clip_grad_norm_(ps, max_norm, norm_type)
    tensors[f"clip/{name}/total_norm"] = total.detach().clone()
    for i, p in enumerate(ps):
        tensors[f"clip/{name}/p{i}"] = p.grad.clone()
    meta[f"clip/{name}"] = json.dumps({"max_norm": max_norm, "norm_type": str(norm_type)})
meta["generator"] = f"make_optim_golden.py, torch {torch.__version__}"

# ---- write one safetensors file ----
safetensors_writer.write(os.path.join(os.path.dirname(os.path.abspath(__file__)), "optim_golden.safetensors"), tensors, meta)
