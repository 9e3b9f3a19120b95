// nn/fuse.h — fuse_for_training: the explicit step that lets a model's BatchNorm + ReLU
// (+ max-pool) and GroupNorm + ReLU run as the fused CPU nodes, as PyTorch's
// torch.ao.quantization.fuse_modules is the explicit step for its fused modules.
//
//   nn::Sequential features;  // ... Conv2d, BatchNorm2d, ReLU, MaxPool2d, ...
//   int n = nn::fuse_for_training(model);  // once, after building the model
//
// In every Sequential of the model, a BatchNorm1d / BatchNorm2d directly followed by a ReLU runs
// as one node (BatchNormBase::forward_relu: the same values; one pass fewer forward, and the
// backward rebuilds the ReLU's mask from the input, so the node keeps no output), and
// followed by a ReLU and a MaxPool2d as one node too (BatchNormBase::forward_relu_max_pool2d: in
// training a 2x2 pool never writes the normalised values at full resolution; other pools run
// composed inside it). A GroupNorm directly followed by a ReLU runs as one node as well
// (GroupNorm::forward_relu, the same values, passes and memory saved). Exact types only: a subclass
// (SyncBatchNorm) may compute something else.
// The modules, their names and the state_dict do not change; only Sequential::forward calls the
// fused node in place of the run (Sequential::fused_runs() lists them). Replacing a fused child
// afterwards (convert_sync_batchnorm) unfuses its run. Returns the number of runs fused.
// Without it every child runs on its own: the same values (tests/autograd/test_fused_ops.cpp).
#pragma once
#include "minidl/nn/module.h"

namespace minidl::nn {

int fuse_for_training(Module& model);

}  // namespace minidl::nn
