// data/mnist.cpp — the idx reader (header check, exact-size read, no partial data) and MnistDataset.
#include "minidl/data/mnist.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <new>
#include <vector>
#include <stdexcept>

#include "minidl/data/gz_reader.h"

namespace minidl::data {
namespace {

constexpr uint32_t kIdx1Magic = 0x00000801;  // unsigned byte, 1 dimension
constexpr uint32_t kIdx3Magic = 0x00000803;  // unsigned byte, 3 dimensions

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

uint32_t big_endian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Reads the header (magic + ndim sizes) and then exactly prod(sizes) bytes into a uint8 tensor.
// Any shortfall, trailing byte or wrong magic is an error naming the file.
Tensor read_idx(const std::string& path, uint32_t magic, int ndim, const char* kind) {
  GzReader in(path);
  uint8_t header[16];
  const int64_t header_bytes = 4 + 4 * ndim;
  const int64_t got_header = in.read(header, header_bytes);
  if (got_header < header_bytes)
    throw std::runtime_error(path + ": truncated: expected a " + std::to_string(header_bytes) + "-byte idx header (" +
                             kind + "), got " + std::to_string(got_header) + " bytes" + in.early_end_note());
  const uint32_t found = big_endian32(header);
  if (found != magic)
    throw std::runtime_error(path + ": bad magic " + hex32(found) + ", expected " + hex32(magic) + " (" + kind + ")");
  Shape shape;
  int64_t total = 1;
  int64_t bound = 1;  // the product with a 0 taken as 1: 0 images cannot hide 2^32 x 2^32 pixels
  for (int d = 0; d < ndim; ++d) {
    const int64_t n = big_endian32(header + 4 + 4 * d);
    if (d > 0 && n == 0)
      throw std::runtime_error(path + ": bad header: dimension " + std::to_string(d) + " is 0 (" + kind + ")");
    shape.push_back(n);
    // bound the product before forming it (three 32-bit sizes overflow int64): 2^40 bytes is
    // far more than any real data set
    if (n > 0 && bound > (int64_t{1} << 40) / n)
      throw std::runtime_error(path + ": bad header: sizes " + shape_str(shape) + " are implausibly large (" + kind +
                               ")");
    bound *= std::max<int64_t>(n, 1);
    total *= n;
  }
  const char* what = ndim == 3 ? "image data" : "label data";
  const std::string announced = " (the header announces " + shape_str(shape) + ")";
  auto truncated = [&](int64_t got) {
    return std::runtime_error(path + ": truncated: expected " + std::to_string(total) + " bytes of " + what + ", got " +
                              std::to_string(got) + announced + in.early_end_note());
  };
  // A plain file's size is known: check it before allocating anything.
  if (!in.compressed()) {
    std::error_code ec;
    const auto file_bytes = static_cast<int64_t>(std::filesystem::file_size(path, ec));
    if (!ec && file_bytes - header_bytes < total) throw truncated(file_bytes - header_bytes);
  }
  // Read in bounded chunks into memory that grows only as bytes arrive: a gzip file's
  // uncompressed size is unknown until it is inflated, so a forged header cannot make us
  // allocate more than the data that is really there (plus one chunk).
  constexpr int64_t kChunk = int64_t{16} << 20;
  std::vector<uint8_t> bytes;
  int64_t got = 0;
  try {
    while (got < total) {
      const int64_t want = std::min(kChunk, total - got);
      bytes.resize(static_cast<size_t>(got + want));
      const int64_t r = in.read(bytes.data() + got, want);
      got += r;
      if (r < want) break;
    }
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(path + ": out of memory after reading " + std::to_string(got) + " of the " +
                             std::to_string(total) + " bytes of " + what + announced);
  }
  if (got < total) throw truncated(got);
  Tensor out(shape, DType::UInt8);
  if (total > 0) std::memcpy(out.data<uint8_t>(), bytes.data(), static_cast<size_t>(total));
  uint8_t extra[64];
  const int64_t trailing = in.read(extra, sizeof extra);  // also makes zlib check the gzip CRC
  if (trailing > 0)
    throw std::runtime_error(path + ": unexpected data after the " + std::to_string(total) + " bytes of " + what +
                             " that the header " + shape_str(shape) + " announces; corrupt file?");
  return out;
}

// dir/name or dir/name.gz, whichever exists; else an error that says how to get the files.
std::string find_idx_file(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  const std::string hint = " (install Fashion-MNIST with `apt-get install dataset-fashion-mnist`, which puts it in " +
                           std::string(kFashionMnistDir) + ", or pass the directory that holds the idx files)";
  if (!fs::is_directory(dir)) throw std::runtime_error("MnistDataset: directory " + dir + " does not exist" + hint);
  for (const std::string& candidate : {name, name + ".gz"}) {
    const fs::path p = fs::path(dir) / candidate;
    if (fs::exists(p)) return p.string();
  }
  throw std::runtime_error("MnistDataset: neither " + (fs::path(dir) / name).string() + " nor " +
                           (fs::path(dir) / (name + ".gz")).string() + " exists" + hint);
}

}  // namespace

Tensor read_idx_images(const std::string& path) { return read_idx(path, kIdx3Magic, 3, "idx3 images"); }
Tensor read_idx_labels(const std::string& path) { return read_idx(path, kIdx1Magic, 1, "idx1 labels"); }

MnistDataset::MnistDataset(const std::string& dir, bool train, MnistOptions options) : options_(options) {
  if (!(options_.std > 0.0))
    throw std::invalid_argument("MnistDataset: std must be > 0, got " + std::to_string(options_.std));
  const std::string split = train ? "train" : "t10k";
  const std::string images_path = find_idx_file(dir, split + "-images-idx3-ubyte");
  const std::string labels_path = find_idx_file(dir, split + "-labels-idx1-ubyte");
  images_ = read_idx_images(images_path);
  labels_ = read_idx_labels(labels_path);
  if (images_.size(0) != labels_.size(0))
    throw std::runtime_error("MnistDataset: " + images_path + " holds " + std::to_string(images_.size(0)) +
                             " images but " + labels_path + " holds " + std::to_string(labels_.size(0)) + " labels");
  const uint8_t* labels = labels_.data<uint8_t>();
  for (int64_t k = 0; k < labels_.size(0); ++k)
    if (labels[k] > 9)
      throw std::runtime_error(labels_path + ": label " + std::to_string(labels[k]) + " at index " + std::to_string(k) +
                               " is out of range 0..9; corrupt file?");
}

Example MnistDataset::get(int64_t i) const {
  check_index(i, size(), "MnistDataset::get");
  const int64_t rows = images_.size(1), cols = images_.size(2);
  Tensor input({1, rows, cols}, DType::Float32);  // (1, rows, cols)
  const uint8_t* src = images_.data<uint8_t>() + i * rows * cols;
  float* dst = input.data<float>();
  // (p / 255 - mean) / std as one multiply-add per pixel.
  const float scale = static_cast<float>(1.0 / (255.0 * options_.std));
  const float shift = static_cast<float>(-options_.mean / options_.std);
  for (int64_t k = 0; k < rows * cols; ++k) dst[k] = static_cast<float>(src[k]) * scale + shift;
  Tensor target({}, DType::Int64);
  *target.data<int64_t>() = labels_.data<uint8_t>()[i];
  return {std::move(input), std::move(target)};
}

}  // namespace minidl::data
