// data/cifar10.cpp — the CIFAR-10 binary reader (whole records only) and Cifar10Dataset.
#include "minidl/data/cifar10.h"

#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "minidl/data/gz_reader.h"

namespace minidl::data {

CifarBatch read_cifar10_batch(const std::string& path) {
  GzReader in(path);
  const std::vector<uint8_t> bytes = in.read_all();
  const int64_t size = static_cast<int64_t>(bytes.size());
  if (size == 0)
    throw std::runtime_error(path + ": empty file, expected 3073-byte CIFAR-10 records" + in.early_end_note());
  if (size % kCifarRecordBytes != 0)
    throw std::runtime_error(path + ": truncated or not a CIFAR-10 binary batch: " + std::to_string(size) +
                             " bytes is not a whole number of 3073-byte records (1 label + 3072 pixels); " +
                             std::to_string(size / kCifarRecordBytes) + " whole records and " +
                             std::to_string(size % kCifarRecordBytes) + " bytes left over" + in.early_end_note());
  const int64_t n = size / kCifarRecordBytes;
  CifarBatch out{Tensor({n, 3, 32, 32}, DType::UInt8), Tensor({n}, DType::UInt8)};
  uint8_t* images = out.images.data<uint8_t>();
  uint8_t* labels = out.labels.data<uint8_t>();
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* record = bytes.data() + r * kCifarRecordBytes;
    if (record[0] > 9)
      throw std::runtime_error(path + ": record " + std::to_string(r) + " has label " + std::to_string(record[0]) +
                               ", expected 0..9; not a CIFAR-10 binary batch (CIFAR-100 has 2 label bytes)?");
    labels[r] = record[0];
    std::memcpy(images + r * (kCifarRecordBytes - 1), record + 1, kCifarRecordBytes - 1);
  }
  return out;
}

Cifar10Dataset::Cifar10Dataset(const std::string& dir, bool train, Cifar10Options options) : options_(options) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw std::runtime_error("Cifar10Dataset: directory " + dir + " does not exist");
  fs::path base = dir;
  if (!fs::exists(base / "test_batch.bin") && fs::is_directory(base / "cifar-10-batches-bin"))
    base /= "cifar-10-batches-bin";
  std::vector<std::string> files;
  if (train) {
    for (int b = 1; b <= 5; ++b) files.push_back((base / ("data_batch_" + std::to_string(b) + ".bin")).string());
  } else {
    files.push_back((base / "test_batch.bin").string());
  }
  for (const std::string& f : files)
    if (!fs::exists(f))
      throw std::runtime_error("Cifar10Dataset: " + f +
                               " does not exist (download the binary version, cifar-10-binary.tar.gz, and unpack it)");
  load(files);
}

Cifar10Dataset::Cifar10Dataset(const std::vector<std::string>& files, Cifar10Options options) : options_(options) {
  if (files.empty()) throw std::invalid_argument("Cifar10Dataset: no files given");
  load(files);
}

void Cifar10Dataset::load(const std::vector<std::string>& files) {
  for (int c = 0; c < 3; ++c)
    if (!(options_.std[c] > 0.0))
      throw std::invalid_argument("Cifar10Dataset: std[" + std::to_string(c) + "] must be > 0, got " +
                                  std::to_string(options_.std[c]));
  std::vector<CifarBatch> parts;
  int64_t n = 0;
  for (const std::string& f : files) {
    parts.push_back(read_cifar10_batch(f));
    n += parts.back().labels.size(0);
  }
  if (parts.size() == 1) {
    images_ = parts[0].images;
    labels_ = parts[0].labels;
    return;
  }
  images_ = Tensor({n, 3, 32, 32}, DType::UInt8);
  labels_ = Tensor({n}, DType::UInt8);
  int64_t at = 0;
  for (const CifarBatch& p : parts) {
    const int64_t m = p.labels.size(0);
    std::memcpy(images_.data<uint8_t>() + at * (kCifarRecordBytes - 1), p.images.data<uint8_t>(),
                static_cast<size_t>(m * (kCifarRecordBytes - 1)));
    std::memcpy(labels_.data<uint8_t>() + at, p.labels.data<uint8_t>(), static_cast<size_t>(m));
    at += m;
  }
}

Example Cifar10Dataset::get(int64_t i) const {
  check_index(i, size(), "Cifar10Dataset::get");
  constexpr int64_t kPlane = 32 * 32;
  Tensor input({3, 32, 32}, DType::Float32);  // (3, 32, 32)
  const uint8_t* src = images_.data<uint8_t>() + i * 3 * kPlane;
  float* dst = input.data<float>();
  for (int c = 0; c < 3; ++c) {
    const float scale = static_cast<float>(1.0 / (255.0 * options_.std[c]));
    const float shift = static_cast<float>(-options_.mean[c] / options_.std[c]);
    for (int64_t k = 0; k < kPlane; ++k) dst[c * kPlane + k] = static_cast<float>(src[c * kPlane + k]) * scale + shift;
  }
  Tensor target({}, DType::Int64);
  *target.data<int64_t>() = labels_.data<uint8_t>()[i];
  return {std::move(input), std::move(target)};
}

}  // namespace minidl::data
