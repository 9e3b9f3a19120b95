// fuzz/fuzz_idx_reader.cpp — libFuzzer target: arbitrary bytes as an idx3 image file, an idx1
// label file and a CIFAR-10 batch, each read plain and gzip-compressed. The readers must throw
// std::runtime_error or succeed; anything else (a crash, a sanitizer report, std::bad_alloc
// from a forged size) is a bug.
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "minidl/data/cifar10.h"
#include "minidl/data/mnist.h"

namespace {

std::string temp_file(const char* suffix) { return "/tmp/minidl_fuzz_idx_" + std::to_string(::getpid()) + suffix; }

void write_plain(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
}

void write_gzip(const std::string& path, const uint8_t* data, size_t size) {
  gzFile f = gzopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && gzwrite(f, data, static_cast<unsigned>(size)) != static_cast<int>(size)) std::abort();
  gzclose(f);
}

template <class F> void expect_clean(F&& read) {
  try {
    read();
  } catch (const std::runtime_error&) {}
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The first byte picks the container: even plain bytes (also raw gzip streams), odd gzipped.
  if (size == 0) return 0;
  const std::string path = temp_file(".bin");
  if (data[0] & 1) {
    write_gzip(path, data + 1, size - 1);
  } else {
    write_plain(path, data + 1, size - 1);
  }
  expect_clean([&] { minidl::data::read_idx_images(path); });
  expect_clean([&] { minidl::data::read_idx_labels(path); });
  expect_clean([&] { minidl::data::read_cifar10_batch(path); });
  std::remove(path.c_str());
  return 0;
}
