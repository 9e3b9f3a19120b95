// data/dataset.cpp — TensorDataset and Subset: index checks and views, no copies.
#include "minidl/data/dataset.h"

#include <stdexcept>
#include <string>

namespace minidl::data {

void check_index(int64_t i, int64_t size, const char* who) {
  if (i < 0 || i >= size)
    throw std::out_of_range(std::string(who) + ": index " + std::to_string(i) + " out of range for a dataset of " +
                            std::to_string(size) + " examples");
}

TensorDataset::TensorDataset(Tensor inputs, Tensor targets) : inputs_(std::move(inputs)), targets_(std::move(targets)) {
  if (!inputs_.defined() || !targets_.defined())
    throw std::invalid_argument("TensorDataset: inputs and targets must be defined tensors");
  if (inputs_.dim() < 1 || targets_.dim() < 1)
    throw std::invalid_argument("TensorDataset: inputs and targets need a leading example dimension, got inputs " +
                                inputs_.desc() + " and targets " + targets_.desc());
  if (inputs_.size(0) != targets_.size(0))
    throw std::invalid_argument("TensorDataset: inputs " + inputs_.desc() + " and targets " + targets_.desc() +
                                " have different numbers of examples (" + std::to_string(inputs_.size(0)) + " vs " +
                                std::to_string(targets_.size(0)) + ")");
}

Example TensorDataset::get(int64_t i) const {
  check_index(i, size(), "TensorDataset::get");
  return {inputs_.select(0, i), targets_.select(0, i)};
}

Subset::Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  if (!dataset_) throw std::invalid_argument("Subset: dataset is null");
  const int64_t n = dataset_->size();
  for (size_t k = 0; k < indices_.size(); ++k)
    if (indices_[k] < 0 || indices_[k] >= n)
      throw std::out_of_range("Subset: indices[" + std::to_string(k) + "] = " + std::to_string(indices_[k]) +
                              " out of range for a dataset of " + std::to_string(n) + " examples");
}

Example Subset::get(int64_t i) const {
  check_index(i, size(), "Subset::get");
  return dataset_->get(indices_[static_cast<size_t>(i)]);
}

}  // namespace minidl::data
