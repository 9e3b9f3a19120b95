// data/dataset.h — what a data set is: a size and a random-access get(i) returning one Example
// (an input tensor and a target tensor). TensorDataset wraps in-memory tensors; Subset picks
// some indices of another dataset. get() is const and must be safe to call from several worker
// threads at once (the DataLoader does): datasets here are immutable after construction.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "minidl/tensor/tensor.h"

namespace minidl::data {

struct Example {
  Tensor input;  // e.g. float32 (1, 28, 28)
  Tensor target;  // e.g. int64 scalar (0-d)
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Example i, 0 <= i < size(). Thread-safe: called concurrently by the DataLoader's workers.
  virtual Example get(int64_t i) const = 0;
};

// Rows of two tensors: inputs (N, ...) and targets (N) or (N, ...). get(i) returns views
// inputs[i] and targets[i] (no copy).
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor inputs, Tensor targets);
  int64_t size() const override { return inputs_.size(0); }
  Example get(int64_t i) const override;

 private:
  Tensor inputs_;  // (N, ...)
  Tensor targets_;  // (N, ...)
};

// The examples of `dataset` at `indices`, in that order: Subset(ds, {4, 1}).get(0) == ds.get(4).
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices);
  int64_t size() const override { return static_cast<int64_t>(indices_.size()); }
  Example get(int64_t i) const override;
  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  std::vector<int64_t> indices_;
};

// Throws std::out_of_range naming `who` when i is not in [0, size).
void check_index(int64_t i, int64_t size, const char* who);

}  // namespace minidl::data
