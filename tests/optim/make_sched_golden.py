#!/usr/bin/python3
"""tests/optim/make_sched_golden.py — PyTorch's learning-rate sequences for LinearLR, SequentialLR,
OneCycleLR (with and without cycle_momentum) and ReduceLROnPlateau.

Run with Debian's python3-torch:  /usr/bin/python3 tests/optim/make_sched_golden.py
Writes tests/optim/sched_golden.safetensors: for every case NAME, NAME/lr (float64, steps + 1):
the lr of the (single) param group after 0, 1, ..., steps scheduler steps (SGD, lr 0.1 unless
the scheduler sets its own), for OneCycleLR with cycle_momentum also NAME/momentum (SGD's
momentum or Adam's beta1), and for ReduceLROnPlateau NAME/metric, the metrics given to step().
tests/optim/test_lr_scheduler_api.cpp builds the same schedulers and compares.
"""
import os
import sys
import warnings

import torch
from torch.optim import lr_scheduler as S
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden"))
import safetensors_writer  # noqa: E402

# SequentialLR calls scheduler.step(0) at a milestone, which warns about the deprecated epoch argument
warnings.filterwarnings("ignore", category=UserWarning, module="torch.optim.lr_scheduler")
T = {}


def sgd():
    return torch.optim.SGD([torch.zeros(3, requires_grad=True)], lr=0.1, momentum=0.9)


def record(name, make, steps):
    opt = sgd()
    sched = make(opt)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(steps):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    T[f"{name}/lr"] = torch.tensor(lrs, dtype=torch.float64)


record("linear", lambda o: S.LinearLR(o, start_factor=0.25, end_factor=0.8, total_iters=6), 12)
record("linear_decay", lambda o: S.LinearLR(o, start_factor=1.0, end_factor=0.1, total_iters=4), 8)
record("sequential_linear_cosine",
       lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.1, total_iters=4), S.CosineAnnealingLR(o, T_max=10)],
                                milestones=[4]), 14)
record("sequential_three",
       lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.5, total_iters=3), S.StepLR(o, 3, gamma=0.5),
                                    S.MultiStepLR(o, [2, 4], gamma=0.3)], milestones=[3, 10]), 16)
record("onecycle_cos", lambda o: S.OneCycleLR(o, max_lr=0.5, total_steps=20, cycle_momentum=False), 20)


def onecycle_momentum(name, make_opt, steps, **kw):
    """OneCycleLR with cycle_momentum: NAME/lr and NAME/momentum (SGD's momentum or Adam's beta1)."""
    opt = make_opt()
    sched = S.OneCycleLR(opt, total_steps=steps, **kw)
    group = opt.param_groups[0]
    mom = (lambda: group["betas"][0]) if "betas" in group else (lambda: group["momentum"])
    lrs, moms = [group["lr"]], [mom()]
    for _ in range(steps):
        opt.step()
        sched.step()
        lrs.append(group["lr"])
        moms.append(mom())
    T[f"{name}/lr"] = torch.tensor(lrs, dtype=torch.float64)
    T[f"{name}/momentum"] = torch.tensor(moms, dtype=torch.float64)


onecycle_momentum("onecycle_momentum_sgd", sgd, 20, max_lr=0.5)
onecycle_momentum("onecycle_momentum_adam_three_phase",
                  lambda: torch.optim.Adam([torch.zeros(3, requires_grad=True)], lr=0.1, betas=(0.9, 0.99)), 25,
                  max_lr=1.0, pct_start=0.2, anneal_strategy="linear", three_phase=True, base_momentum=0.8,
                  max_momentum=0.9)
record("onecycle_linear_three_phase",
       lambda o: S.OneCycleLR(o, max_lr=1.0, total_steps=25, pct_start=0.2, anneal_strategy="linear", div_factor=10,
                              final_div_factor=100, three_phase=True, cycle_momentum=False), 25)


def plateau(name, metrics, **kw):
    opt = sgd()
    sched = S.ReduceLROnPlateau(opt, **kw)
    lrs = [opt.param_groups[0]["lr"]]
    for m in metrics:
        sched.step(m)
        lrs.append(opt.param_groups[0]["lr"])
    T[f"{name}/lr"] = torch.tensor(lrs, dtype=torch.float64)
    T[f"{name}/metric"] = torch.tensor(metrics, dtype=torch.float64)


falling_then_flat = [1.0, 0.9, 0.85, 0.86, 0.84, 0.849, 0.85, 0.9, 0.7, 0.71, 0.72, 0.73, 0.74, 0.75, 0.69, 0.7,
                     0.7, 0.7, 0.7, 0.7]
plateau("plateau_min_rel", falling_then_flat, factor=0.5, patience=2, threshold=0.05, cooldown=1, min_lr=0.02)
plateau("plateau_max_abs", [0.1, 0.2, 0.25, 0.24, 0.26, 0.3, 0.3, 0.29, 0.31, 0.3, 0.3, 0.3, 0.5, 0.5, 0.5, 0.5],
        mode="max", factor=0.3, patience=1, threshold=0.02, threshold_mode="abs")

safetensors_writer.write(os.path.join(os.path.dirname(os.path.abspath(__file__)), "sched_golden.safetensors"), T,
                         {"generator": f"make_sched_golden.py, torch {torch.__version__}"})
