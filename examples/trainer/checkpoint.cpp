// examples/trainer/checkpoint.cpp — saving and loading training checkpoints (see checkpoint.h).
#include "examples/trainer/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include <zlib.h>

namespace trainer {
namespace {

constexpr const char* kFormat = "minidl-train-checkpoint-v1";
constexpr const char* kChecksumKey = "tensor_crc32";

// CRC-32 (zlib's, the same as Python's zlib.crc32) of every tensor's bytes in name order, as 8
// lowercase hex digits: the whole data section of a file that minidl::save wrote (it writes the
// tensors in name order, without gaps). The tensors must be contiguous CPU tensors.
std::string tensor_bytes_crc32(const minidl::TensorMap& tensors) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (const auto& [name, t] : tensors) {
    const auto* p = static_cast<const Bytef*>(t.raw_data());
    for (size_t left = static_cast<size_t>(t.numel()) * minidl::element_size(t.dtype()); left > 0;) {
      const uInt n = static_cast<uInt>(std::min<size_t>(left, size_t{1} << 30));
      crc = crc32(crc, p, n);
      p += n;
      left -= n;
    }
  }
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc));
  return hex;
}

void add_prefixed(minidl::TensorMap& out, const std::string& prefix, const minidl::TensorMap& in) {
  for (const auto& [key, tensor] : in) out[prefix + key] = tensor;
}

// A count stored in the metadata ("epoch"): digits only, no sign, no junk.
int64_t parse_count(const std::string& path, const std::string& key, const std::string& text) {
  int64_t v = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < 0)
    throw std::runtime_error(path + ": the checkpoint's metadata '" + key + "' must be an integer >= 0, got '" +
                             text.substr(0, 64) + "'");
  return v;
}

template <class T> int64_t count_non_finite(const minidl::Tensor& t) {
  const T* p = t.data<T>();
  int64_t bad = 0;
  for (int64_t i = 0, n = t.numel(); i < n; ++i) bad += std::isfinite(p[i]) ? 0 : 1;
  return bad;
}

}  // namespace

std::string first_non_finite(const minidl::TensorMap& tensors) {
  for (const auto& [name, tensor] : tensors) {
    if (tensor.dtype() != minidl::DType::Float32 && tensor.dtype() != minidl::DType::Float64) continue;
    const minidl::Tensor c = tensor.cpu().contiguous();
    const int64_t bad = c.dtype() == minidl::DType::Float32 ? count_non_finite<float>(c) : count_non_finite<double>(c);
    if (bad > 0)
      return name + " (" + std::to_string(bad) + " of " + std::to_string(c.numel()) + " values are not finite)";
  }
  return "";
}

void save_checkpoint(const std::string& path, const minidl::nn::Module& model,
                     const minidl::optim::Optimizer& optimizer, const minidl::optim::GradScaler& scaler,
                     const minidl::optim::LRScheduler& scheduler, const minidl::Metadata& metadata) {
  minidl::TensorMap tensors;
  add_prefixed(tensors, "model.", model.state_dict());
  add_prefixed(tensors, "optim.", optimizer.state_dict());
  add_prefixed(tensors, "scaler.", scaler.state_dict());  // empty unless enabled (fp16)
  add_prefixed(tensors, "sched.", scheduler.state_dict());
  for (auto& [name, t] : tensors) t = t.cpu().contiguous();  // the bytes the file will hold (no-op on the CPU)
  minidl::Metadata meta = metadata;
  meta["format"] = kFormat;
  meta[kChecksumKey] = tensor_bytes_crc32(tensors);
  minidl::save(tensors, path, meta);  // atomic: a crash leaves the previous file intact
}

Checkpoint load_checkpoint(const std::string& path) {
  minidl::SafetensorsFile file = minidl::load(path);
  Checkpoint ck;
  ck.metadata = file.metadata;
  if (ck.metadata["format"] != kFormat || !ck.metadata.count("epoch") || !ck.metadata.count("config"))
    throw std::runtime_error(path + " is not a checkpoint written by `train` (metadata format '" +
                             ck.metadata["format"] + "', expected '" + kFormat + "')");
  // Checkpoints of older versions carry no checksum: they load unchecked.
  if (const auto recorded = ck.metadata.find(kChecksumKey); recorded != ck.metadata.end()) {
    const std::string actual = tensor_bytes_crc32(file.tensors);
    if (actual != recorded->second)
      throw std::runtime_error(path + " is corrupt: its tensor bytes have CRC-32 " + actual + ", but its metadata '" +
                               kChecksumKey + "' records " + recorded->second.substr(0, 16) +
                               " (the file was changed after it was saved); refusing to load it");
  }
  for (auto& [key, tensor] : file.tensors) {
    const auto dot = key.find('.');
    if (dot == std::string::npos) throw std::runtime_error(path + ": unexpected tensor '" + key + "'");
    const std::string prefix = key.substr(0, dot), rest = key.substr(dot + 1);
    if (prefix == "model")
      ck.model[rest] = tensor;
    else if (prefix == "optim")
      ck.optim[rest] = tensor;
    else if (prefix == "scaler")
      ck.scaler[rest] = tensor;
    else if (prefix == "sched")
      ck.sched[rest] = tensor;
    else
      throw std::runtime_error(path + ": unexpected tensor '" + key +
                               "' (expected model.*, optim.*, scaler.*, sched.*)");
  }
  ck.epoch = parse_count(path, "epoch", ck.metadata["epoch"]);
  ck.step = ck.metadata.count("step") ? parse_count(path, "step", ck.metadata["step"]) : 0;
  return ck;
}

std::string read_checkpoint_config(const std::string& path) { return load_checkpoint(path).metadata.at("config"); }

CheckpointPosition read_checkpoint_position(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char size_bytes[8] = {};
  if (!in || !in.read(reinterpret_cast<char*>(size_bytes), 8))
    throw std::runtime_error(path + ": cannot read the safetensors header length");
  uint64_t size = 0;
  for (int i = 7; i >= 0; --i) size = (size << 8) | size_bytes[i];  // little-endian
  constexpr uint64_t kMaxHeader = 100ull << 20;  // the format's own limit
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path, ec);
  if (ec || size == 0 || size > kMaxHeader || size > file_size - 8)
    throw std::runtime_error(path + ": a safetensors header of " + std::to_string(size) + " bytes in a file of " +
                             std::to_string(ec ? 0 : file_size) + " (not a complete checkpoint)");
  std::string header(size, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(size)))
    throw std::runtime_error(path + ": the file ends inside its " + std::to_string(size) + "-byte header");
  const nlohmann::json json = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  const auto text = [&](const char* key) -> std::string {
    if (!json.is_object() || !json.contains("__metadata__") || !json["__metadata__"].is_object()) return "";
    const auto& meta = json["__metadata__"];
    return meta.contains(key) && meta[key].is_string() ? meta[key].get<std::string>() : "";
  };
  if (text("format") != kFormat)
    throw std::runtime_error(path + " is not a checkpoint written by `train` (metadata format '" + text("format") +
                             "', expected '" + kFormat + "')");
  const std::string step = text("step");
  return {.epoch = parse_count(path, "epoch", text("epoch")),
          .step = step.empty() ? 0 : parse_count(path, "step", step)};
}

}  // namespace trainer
