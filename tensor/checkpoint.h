// tensor/checkpoint.h — one call to checkpoint a training run, and one to resume it: the model,
// the optimizer, the LR scheduler and optionally the GradScaler, the sampler's position and the
// default generator's state, in one safetensors file under PyTorch's names:
//   model.<name>       nn::Module's state_dict (parameters and buffers)
//   optimizer.<key>    optim::Optimizer's state_dict (momentum buffers, moments, steps, lrs)
//   scheduler.<key>    optim::LRScheduler's state_dict
//   scaler.<key>       optim::GradScaler's state_dict
//   sampler.<key>      data::RandomSampler's state_dict (epoch, start index)
//   rng_state          get_rng_state() (tensor/random.h)
// and in the metadata, besides the caller's own keys: checkpoint_parts (the parts saved, e.g.
// "model,optimizer,scheduler", so a part whose state is empty is still known to be there) and
// tensor_crc32 (CRC-32 of the data section: every tensor's bytes in name order, as 8 hex digits,
// Python's zlib.crc32 of the bytes after the header).
//
//   save_checkpoint("ck.safetensors", {.model = model, .optimizer = opt, .scheduler = sched,
//                                      .sampler = sampler, .rng_state = true}, {{"epoch", "3"}});
//   Metadata meta = load_checkpoint("ck.safetensors", {.model = model, .optimizer = opt, ...});
//
// Any object with `TensorMap state_dict() const` and `load_state_dict(const TensorMap&)` can be a
// part (a Stateful, as in torch.distributed.checkpoint): this header needs no layer above tensor/.
// The file is written atomically (tensor/serialize.h: temporary file, fsync, rename): a crash
// mid-save leaves the previous file intact. Loading reads and checks the whole file, and that
// every part asked for is in it, before it changes any object: a file that is not a checkpoint,
// is truncated, or whose bytes do not match its tensor_crc32 is a std::runtime_error naming it;
// so is a part asked for but not in the file, or one whose state_dict does not fit its object (a
// missing key, a shape): the message names the file, the part and (the object's own) the key.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <type_traits>

#include "minidl/tensor/serialize.h"

namespace minidl {

// A reference to an object's state_dict() / load_state_dict(); empty (false) by default. Made
// from a const object it can only save.
class Stateful {
 public:
  Stateful() = default;
  template <class T>
  requires(!std::is_same_v<std::remove_cv_t<T>, Stateful>)
      Stateful(T& object)  // NOLINT: implicit, so that {.model = model} reads naturally
      : save_([&object] { return object.state_dict(); }) {
    if constexpr (!std::is_const_v<T>) load_ = [&object](const TensorMap& state) { object.load_state_dict(state); };
  }
  explicit operator bool() const { return static_cast<bool>(save_); }
  TensorMap state_dict() const { return save_(); }
  bool can_load() const { return static_cast<bool>(load_); }
  void load_state_dict(const TensorMap& state) const { load_(state); }

 private:
  std::function<TensorMap()> save_;
  std::function<void(const TensorMap&)> load_;
};

struct TrainingState {
  // the parts left empty are not saved / not loaded ({} initializers: designated lists may skip any)
  Stateful model = {}, optimizer = {}, scheduler = {};
  Stateful scaler = {}, sampler = {};
  bool rng_state = false;  // the default generator's state
};

// The metadata keys "checkpoint_parts" and "tensor_crc32" are the checkpoint's own: passing
// them, or giving no part at all, is a std::invalid_argument.
void save_checkpoint(const std::string& path, const TrainingState& state, const Metadata& metadata = {});
// Restores every non-empty part of `state` (and the generator when rng_state) from the file, the
// model first; returns the file's metadata.
Metadata load_checkpoint(const std::string& path, const TrainingState& state);

// A checkpoint read and verified but not applied: each part's state_dict by name ("model", ...),
// the generator state (undefined when not saved), the metadata.
struct CheckpointFile {
  std::map<std::string, TensorMap> parts;
  Tensor rng_state;
  Metadata metadata;
};
CheckpointFile read_checkpoint(const std::string& path);

}  // namespace minidl
