// fuzz/fuzz_safetensors.cpp — libFuzzer target: arbitrary bytes as a safetensors buffer
// (deserialize) and as a file (load, which reads the header first and then only the tensors).
// Both must throw std::runtime_error or return tensors that serialize back to the same bytes
// (a valid file has one encoding up to header whitespace, so the round trip is checked on the
// tensors and metadata instead).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "minidl/tensor/serialize.h"

namespace {

void check_same(const minidl::SafetensorsFile& a, const minidl::SafetensorsFile& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) std::abort();
  for (const auto& [name, t] : a.tensors) {
    const auto it = b.tensors.find(name);
    if (it == b.tensors.end() || it->second.shape() != t.shape() || it->second.dtype() != t.dtype()) std::abort();
    const size_t bytes = static_cast<size_t>(t.numel()) * minidl::element_size(t.dtype());
    if (bytes > 0 && std::memcmp(t.raw_data(), it->second.raw_data(), bytes) != 0) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  minidl::SafetensorsFile from_buffer;
  bool parsed = false;
  try {
    from_buffer = minidl::deserialize(bytes, "fuzz");
    parsed = true;
  } catch (const std::runtime_error&) {}
  if (parsed)
    check_same(from_buffer, minidl::deserialize(minidl::serialize(from_buffer.tensors, from_buffer.metadata)));

  const std::string path = "/tmp/minidl_fuzz_st_" + std::to_string(::getpid());
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  try {
    minidl::SafetensorsFile from_file = minidl::load(path);
    if (!parsed) std::abort();  // the file and buffer readers must agree
    check_same(from_buffer, from_file);
  } catch (const std::runtime_error&) {
    if (parsed) std::abort();
  }
  std::remove(path.c_str());
  return 0;
}
