// nn/fuse.cpp — fuse_for_training: find BatchNorm + ReLU (+ MaxPool2d) and GroupNorm + ReLU runs
// in every Sequential.
#include "minidl/nn/fuse.h"

#include <typeinfo>

#include "minidl/nn/batchnorm.h"
#include "minidl/nn/layers.h"
#include "minidl/nn/sequential.h"

namespace minidl::nn {

namespace {

// Exact types: a subclass may override forward.
bool is_plain_batchnorm(const Module& m) {
  return typeid(m) == typeid(BatchNorm1d) || typeid(m) == typeid(BatchNorm2d);
}

int fuse_sequential(Sequential& seq) {
  int fused = 0;
  for (size_t i = 0; i + 1 < seq.size(); ++i) {
    if (typeid(seq[i]) == typeid(GroupNorm) && typeid(seq[i + 1]) == typeid(ReLU)) {
      auto* gn = static_cast<GroupNorm*>(&seq[i]);
      seq.add_fused_run({.first = i, .length = 2, .name = "GroupNorm+ReLU", .forward = [gn](const Variable& x) {
                           return gn->forward_relu(x);
                         }});
      ++i;
      ++fused;
      continue;
    }
    if (!is_plain_batchnorm(seq[i]) || typeid(seq[i + 1]) != typeid(ReLU)) continue;
    auto* bn = static_cast<BatchNormBase*>(&seq[i]);
    if (i + 2 < seq.size() && typeid(seq[i + 2]) == typeid(MaxPool2d)) {
      const Pool2dParams pool = static_cast<MaxPool2d&>(seq[i + 2]).params;
      seq.add_fused_run({.first = i,
                         .length = 3,
                         .name = bn->type_name() + "+ReLU+MaxPool2d",
                         .forward = [bn, pool](const Variable& x) { return bn->forward_relu_max_pool2d(x, pool); }});
      i += 2;
    } else {
      seq.add_fused_run(
          {.first = i, .length = 2, .name = bn->type_name() + "+ReLU", .forward = [bn](const Variable& x) {
             return bn->forward_relu(x);
           }});
      ++i;
    }
    ++fused;
  }
  return fused;
}

}  // namespace

int fuse_for_training(Module& model) {
  int fused = 0;
  for (auto& [path, m] : model.named_modules())
    if (auto* seq = dynamic_cast<Sequential*>(m); seq && seq->fused_runs().empty()) fused += fuse_sequential(*seq);
  return fused;
}

}  // namespace minidl::nn
