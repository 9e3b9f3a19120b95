// data/cifar10.h — CIFAR-10 from its binary batches (cifar-10-binary.tar.gz, unpacked):
//   data_batch_1.bin .. data_batch_5.bin (train, 50000 images), test_batch.bin (test, 10000)
// Each file is a sequence of 3073-byte records: 1 label byte (0..9), then 3072 pixel bytes,
// 1024 red, 1024 green, 1024 blue, each 32x32 row-major — i.e. one (3, 32, 32) CHW image.
// The raw uint8 data stays in memory; get(i) gives input float32 (3, 32, 32) =
// (pixel / 255 - mean[c]) / std[c], target int64 scalar. A file whose size is not a whole
// number of records, or a label above 9, throws std::runtime_error naming the file.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "minidl/data/dataset.h"

namespace minidl::data {

inline constexpr int64_t kCifarRecordBytes = 1 + 3 * 32 * 32;  // 3073

struct CifarBatch {
  Tensor images;  // uint8 (N, 3, 32, 32)
  Tensor labels;  // uint8 (N)
};

// Reads one binary batch file (plain or .gz).
CifarBatch read_cifar10_batch(const std::string& path);

struct Cifar10Options {
  // Per-channel normalisation after scaling to [0, 1] (CIFAR-10 train-set statistics).
  std::array<double, 3> mean = {0.4914, 0.4822, 0.4465};
  std::array<double, 3> std = {0.2470, 0.2435, 0.2616};
};

class Cifar10Dataset : public Dataset {
 public:
  // dir holds the .bin files, directly or in a cifar-10-batches-bin/ subfolder.
  Cifar10Dataset(const std::string& dir, bool train = true, Cifar10Options options = {});
  // The concatenation of the given batch files, in order (for tests and custom splits).
  explicit Cifar10Dataset(const std::vector<std::string>& files, Cifar10Options options = {});

  int64_t size() const override { return labels_.size(0); }
  Example get(int64_t i) const override;  // input float32 (3, 32, 32), target int64 ()

  const Tensor& images() const { return images_; }  // uint8 (N, 3, 32, 32)
  const Tensor& labels() const { return labels_; }  // uint8 (N)

 private:
  void load(const std::vector<std::string>& files);
  Tensor images_;  // uint8 (N, 3, 32, 32)
  Tensor labels_;  // uint8 (N)
  Cifar10Options options_;
};

}  // namespace minidl::data
