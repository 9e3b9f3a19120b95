// examples/trainer/checkpoint.cpp — saving and loading training checkpoints (see checkpoint.h).
#include "examples/trainer/checkpoint.h"

#include <stdexcept>

namespace trainer {
namespace {

constexpr const char* kFormat = "minidl-train-checkpoint-v1";

void add_prefixed(minidl::TensorMap& out, const std::string& prefix, const minidl::TensorMap& in) {
  for (const auto& [key, tensor] : in) out[prefix + key] = tensor;
}

}  // namespace

void save_checkpoint(const std::string& path, const minidl::nn::Module& model, const minidl::optim::Optimizer& optimizer,
                     const minidl::optim::LRScheduler& scheduler, const minidl::Metadata& metadata) {
  minidl::TensorMap tensors;
  add_prefixed(tensors, "model.", model.state_dict());
  add_prefixed(tensors, "optim.", optimizer.state_dict());
  add_prefixed(tensors, "sched.", scheduler.state_dict());
  minidl::Metadata meta = metadata;
  meta["format"] = kFormat;
  minidl::save(tensors, path, meta);  // atomic: a crash leaves the previous file intact
}

Checkpoint load_checkpoint(const std::string& path) {
  minidl::SafetensorsFile file = minidl::load(path);
  Checkpoint ck;
  ck.metadata = file.metadata;
  if (ck.metadata["format"] != kFormat || !ck.metadata.count("epoch") || !ck.metadata.count("config"))
    throw std::runtime_error(path + " is not a checkpoint written by `train` (metadata format '" +
                             ck.metadata["format"] + "', expected '" + kFormat + "')");
  for (auto& [key, tensor] : file.tensors) {
    const auto dot = key.find('.');
    if (dot == std::string::npos) throw std::runtime_error(path + ": unexpected tensor '" + key + "'");
    const std::string prefix = key.substr(0, dot), rest = key.substr(dot + 1);
    if (prefix == "model") ck.model[rest] = tensor;
    else if (prefix == "optim") ck.optim[rest] = tensor;
    else if (prefix == "sched") ck.sched[rest] = tensor;
    else throw std::runtime_error(path + ": unexpected tensor '" + key + "' (expected model.*, optim.*, sched.*)");
  }
  ck.epoch = std::stoll(ck.metadata["epoch"]);
  return ck;
}

std::string read_checkpoint_config(const std::string& path) { return load_checkpoint(path).metadata.at("config"); }

}  // namespace trainer
