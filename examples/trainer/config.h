// examples/trainer/config.h — the training recipe: what configs/<model>.yaml holds, how it is
// read (PaddleViT-style nested keys, e.g. TRAIN.BASE_LR) and written back as YAML text (stored in
// every checkpoint, so --resume and --eval start from exactly the recipe that was trained).
// Part of the `train` example (examples/train.cpp); not a library module.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

namespace trainer {

// A bad config file or value: the trainer reports it and exits with status 2.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct TrainConfig {
  // MODEL
  std::string model = "cnn";  // MODEL.NAME: mlp | cnn | vit
  bool sync_bn = false;  // MODEL.SYNC_BN
  // DATA
  std::string data_dir = "/usr/share/datasets/fashion-mnist";  // DATA.DATA_PATH
  int64_t global_batch_size = 128;  // DATA.BATCH_SIZE (over all processes)
  int num_workers = 2;  // DATA.NUM_WORKERS (loader threads per process)
  int64_t train_subset = 0;  // DATA.TRAIN_SUBSET: first N images; 0 = all
  int64_t val_subset = 0;  // DATA.VAL_SUBSET
  // TRAIN
  int64_t epochs = 8;  // TRAIN.EPOCHS
  double base_lr = 0.05;  // TRAIN.BASE_LR (for the global batch)
  double weight_decay = 0.0;  // TRAIN.WEIGHT_DECAY
  int64_t warmup_epochs = 0;  // TRAIN.WARMUP_EPOCHS
  double warmup_start_factor = 0.01;  // TRAIN.WARMUP_START_FACTOR
  std::string lr_scheduler = "cosine";  // TRAIN.LR_SCHEDULER.NAME: cosine | constant
  std::string optimizer = "sgd";  // TRAIN.OPTIMIZER.NAME: sgd | adam | adamw
  double momentum = 0.0;  // TRAIN.OPTIMIZER.MOMENTUM (sgd)
  double beta1 = 0.9, beta2 = 0.999;  // TRAIN.OPTIMIZER.BETAS (adam, adamw)
  double eps = 1e-8;  // TRAIN.OPTIMIZER.EPS (adam, adamw)
  bool deterministic = false;  // TRAIN.DETERMINISTIC: same bits on any process count
  int64_t micro_batch = 16;  // TRAIN.MICRO_BATCH: samples per micro-shard (deterministic)
  std::string precision = "fp32";  // TRAIN.PRECISION: fp32 | bf16 | fp16 (forward and loss under autocast)
  // run
  uint64_t seed = 0;  // SEED
  int64_t save_every = 1;  // SAVE_FREQ (epochs between checkpoints)
  int64_t save_every_steps = 0;  // SAVE_FREQ_STEPS (steps between mid-epoch checkpoints; 0: none)
  double save_every_minutes = 0;  // SAVE_FREQ_MINUTES (minutes between them; 0: none)
};

// Reads a YAML file; keys it does not set keep the defaults above. Unknown keys, values of the
// wrong type and out-of-range values are ConfigErrors naming the file and the key.
TrainConfig load_config(const std::string& path);
// The same, from YAML text (a checkpoint's "config" metadata); `what` names it in errors.
TrainConfig parse_config(const std::string& yaml_text, const std::string& what);
// Every field as YAML text, in the layout of configs/*.yaml.
std::string to_yaml(const TrainConfig& config);
// Throws ConfigError when a value is out of range (non-positive epochs, unknown optimizer, ...).
void validate(const TrainConfig& config);

}  // namespace trainer
