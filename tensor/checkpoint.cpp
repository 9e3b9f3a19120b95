// tensor/checkpoint.cpp — save_checkpoint / read_checkpoint / load_checkpoint (see checkpoint.h).
#include "minidl/tensor/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <utility>
#include <vector>

#include "minidl/tensor/crc32.h"
#include "minidl/tensor/random.h"

namespace minidl {

namespace {

constexpr const char* kPartsKey = "checkpoint_parts";
constexpr const char* kChecksumKey = "tensor_crc32";
constexpr const char* kRngKey = "rng_state";

// The parts in the order they are saved and restored (the model before its optimizer).
std::vector<std::pair<std::string, const Stateful*>> parts_of(const TrainingState& s) {
  std::vector<std::pair<std::string, const Stateful*>> parts;
  for (const auto& [name, part] : {std::pair<const char*, const Stateful*>{"model", &s.model},
                                   {"optimizer", &s.optimizer},
                                   {"scheduler", &s.scheduler},
                                   {"scaler", &s.scaler},
                                   {"sampler", &s.sampler}})
    if (*part) parts.emplace_back(name, part);
  return parts;
}

// CRC-32 of every tensor's bytes in name order: the data section of a file that save() wrote
// (it writes the tensors in name order, without gaps). The tensors must be contiguous CPU tensors.
std::string tensor_bytes_crc32(const TensorMap& tensors) {
  uint32_t crc = 0;
  for (const auto& [name, t] : tensors)
    crc = crc32(t.raw_data(), static_cast<size_t>(t.numel()) * element_size(t.dtype()), crc);
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(crc));
  return hex;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  for (size_t begin = 0; begin <= text.size();) {
    const size_t end = std::min(text.find(',', begin), text.size());
    if (end > begin) out.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

}  // namespace

void save_checkpoint(const std::string& path, const TrainingState& state, const Metadata& metadata) {
  for (const char* key : {kPartsKey, kChecksumKey})
    if (metadata.count(key))
      throw std::invalid_argument("save_checkpoint: the metadata key '" + std::string(key) +
                                  "' is the checkpoint's own; choose another name");
  TensorMap tensors;
  std::vector<std::string> names;
  for (const auto& [name, part] : parts_of(state)) {
    for (const auto& [key, tensor] : part->state_dict()) tensors[name + "." + key] = tensor;
    names.push_back(name);
  }
  if (state.rng_state) {
    tensors[kRngKey] = get_rng_state();
    names.push_back(kRngKey);
  }
  if (names.empty()) throw std::invalid_argument("save_checkpoint: " + path + ": no part to save (all are empty)");
  for (auto& [name, t] : tensors) t = t.cpu().contiguous();  // the bytes the file will hold
  Metadata meta = metadata;
  meta[kPartsKey] = join(names);
  meta[kChecksumKey] = tensor_bytes_crc32(tensors);
  save(tensors, path, meta);  // atomic: a crash leaves the previous file intact
}

CheckpointFile read_checkpoint(const std::string& path) {
  SafetensorsFile file = load(path);  // names the file and the fault of a truncated or malformed one
  const auto parts = file.metadata.find(kPartsKey);
  const auto recorded = file.metadata.find(kChecksumKey);
  if (parts == file.metadata.end() || recorded == file.metadata.end())
    throw std::runtime_error(path + " is not a checkpoint: its metadata lacks '" +
                             (parts == file.metadata.end() ? kPartsKey : kChecksumKey) + "'");
  if (const std::string actual = tensor_bytes_crc32(file.tensors); actual != recorded->second)
    throw std::runtime_error(path + " is corrupt: its tensor bytes have CRC-32 " + actual + ", but its metadata '" +
                             kChecksumKey + "' records " + recorded->second.substr(0, 16) +
                             " (the file was changed after it was saved); refusing to load it");
  CheckpointFile ck;
  bool has_rng = false;
  for (const std::string& name : split_list(parts->second)) {
    if (name == kRngKey)
      has_rng = true;
    else
      ck.parts[name];  // a part may hold no tensors (a disabled GradScaler)
  }
  for (auto& [key, tensor] : file.tensors) {
    if (key == kRngKey && has_rng) {
      ck.rng_state = std::move(tensor);
      continue;
    }
    const auto dot = key.find('.');
    const auto part = dot == std::string::npos ? ck.parts.end() : ck.parts.find(key.substr(0, dot));
    if (part == ck.parts.end())
      throw std::runtime_error(path + ": unexpected tensor '" + key + "' (its parts are " + parts->second + ")");
    part->second[key.substr(dot + 1)] = std::move(tensor);
  }
  if (has_rng && !ck.rng_state.defined())
    throw std::runtime_error(path + ": its parts list '" + std::string(kRngKey) + "' but it holds no such tensor");
  ck.metadata = std::move(file.metadata);
  return ck;
}

Metadata load_checkpoint(const std::string& path, const TrainingState& state) {
  const CheckpointFile ck = read_checkpoint(path);
  const auto missing = [&](const std::string& name) {
    return std::runtime_error(path + ": the checkpoint holds no '" + name + "' (its parts are " +
                              ck.metadata.at(kPartsKey) + ")");
  };
  // every part there and loadable before any is changed
  const auto parts = parts_of(state);
  for (const auto& [name, part] : parts) {
    if (!ck.parts.count(name)) throw missing(name);
    if (!part->can_load())
      throw std::invalid_argument("load_checkpoint: " + path + ": '" + name + "' was given as a const object");
  }
  if (state.rng_state && !ck.rng_state.defined()) throw missing(kRngKey);
  for (const auto& [name, part] : parts) {
    try {
      part->load_state_dict(ck.parts.at(name));
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ": cannot load '" + name + "': " + e.what());
    }
  }
  if (state.rng_state) {
    try {
      set_rng_state(ck.rng_state);
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ": cannot load '" + std::string(kRngKey) + "': " + e.what());
    }
  }
  return ck.metadata;
}

}  // namespace minidl
