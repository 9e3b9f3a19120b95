// examples/trainer/evaluate.cpp — evaluating a checkpoint (see evaluate.h).
#include "examples/trainer/evaluate.h"

#include <cstdio>
#include <memory>

#include "examples/trainer/checkpoint.h"
#include "minidl/dist/distributed.h"
#include "minidl/nn/models.h"

namespace trainer {

void evaluate_checkpoint(const std::string& path, const TrainConfig& config, minidl::Device device,
                         const ValSet& val_set, Log& log) {
  const Checkpoint ck = load_checkpoint(path);
  require_finite(ck.model, path, "refusing to evaluate it");
  std::unique_ptr<minidl::nn::Module> model = minidl::nn::make_model(config.model);
  model->load_state_dict(ck.model);
  model->to(device);
  const Totals val = make_mode(config, device, val_set)->validate(*model);
  log.line("evaluated " + path + " on " + std::to_string(static_cast<int64_t>(val.count)) + " test images with " +
           std::to_string(minidl::dist::world_size()) + " process(es)");
  log.line("test accuracy: top-1 " + format("%.2f", val.acc1()) + "%" + "  top-5 " + format("%.2f", val.acc5()) + "%" +
           "  loss " + format("%.4f", val.loss()));
  const auto recorded = [&](const char* key) {
    return ck.metadata.count(key) ? ck.metadata.at(key) : std::string("?");
  };
  const std::string now_hits =
      std::to_string(static_cast<int64_t>(val.correct1)) + "/" + std::to_string(static_cast<int64_t>(val.count));
  const std::string then_hits = recorded("val_correct1") + "/" + recorded("val_count");
  if (recorded("val_count") != std::to_string(static_cast<int64_t>(val.count)))
    log.line("(recorded at save time on a different number of test images: " + then_hits + ")");
  else if (now_hits == then_hits)
    log.line("matches the accuracy recorded at save time: top-1 " + recorded("val_acc1") + "% (" + then_hits + ")");
  else
    log.line("DIFFERS from the accuracy recorded at save time: " + then_hits + " correct then, " + now_hits + " now");
}

}  // namespace trainer
