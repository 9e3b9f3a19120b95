// tests/data/data_test_util.h — helpers for the data tests: a self-deleting temporary directory,
// writing plain and gzip files, and building idx / CIFAR-10 file contents byte by byte.
#pragma once
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/common/temp_dir.h"

namespace minidl::data::testing {

using Bytes = std::vector<uint8_t>;

using minidl::testing::TempDir;

inline void write_file(const std::string& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline void write_gz(const std::string& path, const Bytes& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot gzopen " + path);
  if (!bytes.empty() && gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) != static_cast<int>(bytes.size()))
    throw std::runtime_error("gzwrite failed on " + path);
  gzclose(f);
}

inline Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void put_be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

// idx3: magic 0x803, n, rows, cols, then pixel (k) = (7 * k + 3) % 256 for k = 0..n*rows*cols-1.
inline Bytes idx_images(uint32_t n, uint32_t rows, uint32_t cols, uint32_t magic = 0x00000803) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  for (uint64_t k = 0; k < uint64_t{n} * rows * cols; ++k) b.push_back(static_cast<uint8_t>((7 * k + 3) % 256));
  return b;
}

inline uint8_t idx_pixel(int64_t k) { return static_cast<uint8_t>((7 * k + 3) % 256); }

// idx1: magic 0x801, n, then the labels.
inline Bytes idx_labels(const std::vector<uint8_t>& labels, uint32_t magic = 0x00000801) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, static_cast<uint32_t>(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

// CIFAR-10 records: label, then 3072 pixels with pixel (r, k) = (r * 31 + k) % 256.
inline Bytes cifar_records(const std::vector<uint8_t>& labels, int first_record = 0) {
  Bytes b;
  for (size_t r = 0; r < labels.size(); ++r) {
    b.push_back(labels[r]);
    for (int k = 0; k < 3072; ++k) b.push_back(static_cast<uint8_t>(((first_record + r) * 31 + k) % 256));
  }
  return b;
}

}  // namespace minidl::data::testing
