#!/usr/bin/python3
"""tests/optim/make_grad_scaler_golden.py — the expected sequence of tests/optim/test_grad_scaler.cpp
(GradScaler.MatchesPyTorchOnAPlantedOverflow), computed by torch.amp.GradScaler on the CPU.

Run with any PyTorch 2.x:  python3 tests/optim/make_grad_scaler_golden.py
It prints the C++ constants that the test pastes. The model: one float32 parameter w = [0.5, -0.25],
loss = sum(w * x_k), SGD(lr=0.1, momentum=0.9), GradScaler(init_scale=2**16, growth_interval=3).
x_k = [1 + 0.5 k, -2]; at step 2 x = [1e35, 1]: the loss is finite but the scaled loss and its
gradient overflow float32 (1e35 * 2**16 > 3.4e38); at step 6 x = [nan, 1].
The same run with init_scale=1e4, growth_factor=1.1, backoff_factor=0.3 gives scales that float32
rounds (PyTorch keeps the scale in a float32 tensor).
"""
import torch

STEPS = 10


def inputs(k):
    if k == 2:
        return torch.tensor([1e35, 1.0])
    if k == 6:
        return torch.tensor([float("nan"), 1.0])
    return torch.tensor([1.0 + 0.5 * k, -2.0])




def run(**options):
    w = torch.nn.Parameter(torch.tensor([0.5, -0.25]))
    opt = torch.optim.SGD([w], lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", growth_interval=3, **options)
    scales, stepped, params = [], [], []
    for k in range(STEPS):
        opt.zero_grad()
        loss = (w * inputs(k)).sum()
        scaler.scale(loss).backward()
        before = w.detach().clone()
        scaler.step(opt)
        stepped.append(not torch.equal(before, w.detach()))
        scaler.update()
        scales.append(scaler.get_scale())
        params.append(w.detach().tolist())
    return scaler, scales, stepped, params


scaler, scales, stepped, params = run(init_scale=2.0**16)

print("// torch " + torch.__version__)
print("const std::vector<double> kScaleAfterUpdate = {" + ", ".join(repr(s) for s in scales) + "};")
print("const std::vector<bool> kStepped = {" + ", ".join("true" if s else "false" for s in stepped) + "};")
print("const std::vector<std::vector<float>> kParams = {")
for p in params:
    print("    {" + ", ".join(f"{v!r}f" for v in p) + "},")
print("};")
print("// state_dict after the last update:", scaler.state_dict())
_, odd_scales, _, _ = run(init_scale=1e4, growth_factor=1.1, backoff_factor=0.3)
print("const std::vector<double> kOddScaleAfterUpdate = {" + ", ".join(repr(s) for s in odd_scales) + "};")
