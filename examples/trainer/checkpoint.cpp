// examples/trainer/checkpoint.cpp — saving and loading training checkpoints (see checkpoint.h):
// the file, its checksum and its integrity checks are the library's (tensor/checkpoint.h); this
// adds the trainer's metadata and its checks.
#include "examples/trainer/checkpoint.h"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "minidl/tensor/checkpoint.h"

namespace trainer {
namespace {

constexpr const char* kFormat = "minidl-train-checkpoint-v2";

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

void require_finite(const minidl::TensorMap& model, const std::string& what, const std::string& refusal) {
  if (const std::string bad = first_non_finite(model); !bad.empty())
    throw std::runtime_error(what + " holds non-finite values (model." + bad + ")" +
                             (refusal.empty() ? "" : ": " + refusal));
}

void save_checkpoint(const std::string& path, const minidl::nn::Module& model,
                     const minidl::optim::Optimizer& optimizer, const minidl::optim::GradScaler& scaler,
                     const minidl::optim::LRScheduler& scheduler, const minidl::Metadata& metadata) {
  // [tutorial:save_checkpoint]
  minidl::Metadata meta = metadata;  // epoch, step, config, seed, ...
  meta["format"] = kFormat;
  minidl::save_checkpoint(path, {.model = model, .optimizer = optimizer, .scheduler = scheduler, .scaler = scaler},
                          meta);
  // [/tutorial:save_checkpoint]
}

Checkpoint load_checkpoint(const std::string& path) {
  minidl::CheckpointFile file = minidl::read_checkpoint(path);  // verified: complete, tensor_crc32 matches
  Checkpoint ck;
  ck.metadata = std::move(file.metadata);
  if (ck.metadata["format"] != kFormat || !ck.metadata.count("epoch") || !ck.metadata.count("config") ||
      !file.parts.count("model") || !file.parts.count("optimizer") || !file.parts.count("scheduler"))
    throw std::runtime_error(path + " is not a checkpoint written by `train` (metadata format '" +
                             ck.metadata["format"] + "', expected '" + kFormat + "')");
  ck.model = std::move(file.parts["model"]);
  ck.optim = std::move(file.parts["optimizer"]);
  ck.sched = std::move(file.parts["scheduler"]);
  ck.scaler = std::move(file.parts["scaler"]);  // empty unless the run was fp16
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
