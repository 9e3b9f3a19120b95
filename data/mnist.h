// data/mnist.h — MNIST and Fashion-MNIST from their idx files (plain or .gz):
//   train-images-idx3-ubyte  magic 0x00000803, N, rows, cols (big-endian uint32), then N*rows*cols pixels
//   train-labels-idx1-ubyte  magic 0x00000801, N, then N label bytes
// (t10k-* for the test split). The raw uint8 data stays in memory; get(i) converts one image:
// input float32 (1, 28, 28) = (pixel / 255 - mean) / std, target int64 scalar.
// A missing, truncated, corrupt or wrong-magic file throws std::runtime_error naming the file.
#pragma once
#include <cstdint>
#include <string>

#include "minidl/data/dataset.h"

namespace minidl::data {

// Where Debian's dataset-fashion-mnist package puts the four .gz files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Reads an idx3 image file: uint8 (N, rows, cols).
Tensor read_idx_images(const std::string& path);
// Reads an idx1 label file: uint8 (N).
Tensor read_idx_labels(const std::string& path);

struct MnistOptions {
  // Normalisation after scaling to [0, 1]. Fashion-MNIST's train-set statistics by default;
  // MNIST's are 0.1307 / 0.3081; mean 0, std 1 leaves pixels in [0, 1].
  double mean = 0.2860;
  double std = 0.3530;
};

class MnistDataset : public Dataset {
 public:
  // Loads {train,t10k}-images-idx3-ubyte[.gz] and {train,t10k}-labels-idx1-ubyte[.gz] from dir.
  MnistDataset(const std::string& dir = kFashionMnistDir, bool train = true, MnistOptions options = {});

  int64_t size() const override { return labels_.size(0); }
  Example get(int64_t i) const override;  // input float32 (1, rows, cols), target int64 ()

  const Tensor& images() const { return images_; }  // uint8 (N, rows, cols)
  const Tensor& labels() const { return labels_; }  // uint8 (N)

 private:
  Tensor images_;  // uint8 (N, rows, cols)
  Tensor labels_;  // uint8 (N)
  MnistOptions options_;
};

}  // namespace minidl::data
