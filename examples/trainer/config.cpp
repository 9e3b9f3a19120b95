// examples/trainer/config.cpp — reading and writing TrainConfig as YAML (see config.h).
// One table maps each dotted YAML key to its field; reading, unknown-key checks and writing all
// walk that table, so a new recipe option is one line here and one field in config.h.
#include "examples/trainer/config.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <variant>
#include <vector>

namespace trainer {
namespace {

using Betas = std::pair<double*, double*>;
struct Field {
  std::string key;  // "TRAIN.OPTIMIZER.NAME"
  std::variant<std::string*, bool*, int*, int64_t*, uint64_t*, double*, Betas> target;
};

std::vector<Field> fields(TrainConfig& c) {
  return {
      {"MODEL.NAME", &c.model},
      {"MODEL.SYNC_BN", &c.sync_bn},
      {"DATA.DATA_PATH", &c.data_dir},
      {"DATA.BATCH_SIZE", &c.global_batch_size},
      {"DATA.NUM_WORKERS", &c.num_workers},
      {"DATA.TRAIN_SUBSET", &c.train_subset},
      {"DATA.VAL_SUBSET", &c.val_subset},
      {"TRAIN.EPOCHS", &c.epochs},
      {"TRAIN.BASE_LR", &c.base_lr},
      {"TRAIN.WEIGHT_DECAY", &c.weight_decay},
      {"TRAIN.WARMUP_EPOCHS", &c.warmup_epochs},
      {"TRAIN.WARMUP_START_FACTOR", &c.warmup_start_factor},
      {"TRAIN.LR_SCHEDULER.NAME", &c.lr_scheduler},
      {"TRAIN.OPTIMIZER.NAME", &c.optimizer},
      {"TRAIN.OPTIMIZER.MOMENTUM", &c.momentum},
      {"TRAIN.OPTIMIZER.BETAS", Betas{&c.beta1, &c.beta2}},
      {"TRAIN.OPTIMIZER.EPS", &c.eps},
      {"TRAIN.DETERMINISTIC", &c.deterministic},
      {"TRAIN.MICRO_BATCH", &c.micro_batch},
      {"TRAIN.PRECISION", &c.precision},
      {"SEED", &c.seed},
      {"SAVE_FREQ", &c.save_every},
      {"SAVE_FREQ_STEPS", &c.save_every_steps},
      {"SAVE_FREQ_MINUTES", &c.save_every_minutes},
  };
}

std::vector<std::string> split_key(const std::string& key) {
  std::vector<std::string> parts;
  std::stringstream ss(key);
  for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
  return parts;
}

// Dotted paths of every leaf (scalar or list) of a YAML mapping.
void collect_leaves(const YAML::Node& node, const std::string& prefix, std::vector<std::string>& out) {
  for (const auto& kv : node) {
    const std::string key = prefix.empty() ? kv.first.as<std::string>() : prefix + "." + kv.first.as<std::string>();
    if (kv.second.IsMap())
      collect_leaves(kv.second, key, out);
    else
      out.push_back(key);
  }
}

// The node at parts[i..] below `node` (undefined when absent). Recursion rather than a loop:
// assigning one YAML::Node to another would rebind it inside the tree.
YAML::Node lookup(const YAML::Node& node, const std::vector<std::string>& parts, size_t i) {
  if (i == parts.size()) return node;
  if (!node.IsMap()) return YAML::Node();  // null: "not set"
  return lookup(node[parts[i]], parts, i + 1);
}

template <class T>
T read_scalar(const YAML::Node& node, const std::string& key, const std::string& what, const char* type) {
  try {
    if (!node.IsScalar()) throw YAML::BadConversion(node.Mark());
    return node.as<T>();
  } catch (const YAML::Exception&) {
    throw ConfigError(what + ": " + key + " must be " + type + ", got '" + YAML::Dump(node) + "'");
  }
}

std::string number_text(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back exactly
  std::string s(buf, end);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}

std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

}  // namespace

TrainConfig parse_config(const std::string& yaml_text, const std::string& what) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(what + ": not valid YAML: " + e.what());
  }
  TrainConfig config;
  if (root.IsNull()) return config;
  if (!root.IsMap()) throw ConfigError(what + ": expected a mapping of sections (MODEL, DATA, TRAIN, ...)");

  std::vector<Field> table = fields(config);
  std::set<std::string> known;
  for (const Field& f : table) known.insert(f.key);
  std::vector<std::string> leaves;
  collect_leaves(root, "", leaves);
  for (const std::string& leaf : leaves) {
    if (known.count(leaf)) continue;
    std::string list;
    for (const Field& f : table) list += (list.empty() ? "" : ", ") + f.key;
    throw ConfigError(what + ": unknown key " + leaf + " (known keys: " + list + ")");
  }

  for (Field& f : table) {
    const YAML::Node node = lookup(root, split_key(f.key), 0);
    if (!node.IsDefined() || node.IsNull()) continue;
    std::visit(
        [&](auto target) {
          using P = decltype(target);
          if constexpr (std::is_same_v<P, Betas>) {
            if (!node.IsSequence() || node.size() != 2)
              throw ConfigError(what + ": " + f.key + " must be a list of two numbers, got '" + YAML::Dump(node) + "'");
            *target.first = read_scalar<double>(node[0], f.key, what, "a list of two numbers");
            *target.second = read_scalar<double>(node[1], f.key, what, "a list of two numbers");
          } else {
            using T = std::remove_pointer_t<P>;
            if constexpr (std::is_same_v<T, std::string>)
              *target = read_scalar<T>(node, f.key, what, "a string");
            else if constexpr (std::is_same_v<T, bool>)
              *target = read_scalar<T>(node, f.key, what, "true or false");
            else if constexpr (std::is_same_v<T, double>)
              *target = read_scalar<T>(node, f.key, what, "a number");
            else
              *target = read_scalar<T>(node, f.key, what, "an integer");
          }
        },
        f.target);
  }
  return config;
}

TrainConfig load_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError("cannot open config file " + path);
  std::stringstream text;
  text << in.rdbuf();
  TrainConfig config = parse_config(text.str(), path);
  validate(config);
  return config;
}

std::string to_yaml(const TrainConfig& config) {
  TrainConfig copy = config;
  std::string out;
  std::vector<std::string> open;  // the sections of the previous key
  for (const Field& f : fields(copy)) {
    std::vector<std::string> parts = split_key(f.key);
    const std::vector<std::string> sections(parts.begin(), parts.end() - 1);
    size_t common = 0;
    while (common < sections.size() && common < open.size() && sections[common] == open[common]) ++common;
    for (size_t d = common; d < sections.size(); ++d) out += std::string(2 * d, ' ') + sections[d] + ":\n";
    open = sections;
    out += std::string(2 * sections.size(), ' ') + parts.back() + ": ";
    std::visit(
        [&](auto target) {
          using P = decltype(target);
          if constexpr (std::is_same_v<P, Betas>) {
            out += '[';  // appended piece by piece: g++ 12 warns falsely (-Wrestrict) on a + chain here
            out += number_text(*target.first);
            out += ", ";
            out += number_text(*target.second);
            out += ']';
          } else {
            using T = std::remove_pointer_t<P>;
            if constexpr (std::is_same_v<T, std::string>)
              out += quoted(*target);
            else if constexpr (std::is_same_v<T, bool>)
              out += *target ? "true" : "false";
            else if constexpr (std::is_same_v<T, double>)
              out += number_text(*target);
            else
              out += std::to_string(*target);
          }
        },
        f.target);
    out += "\n";
  }
  return out;
}

void validate(const TrainConfig& c) {
  auto require = [](bool ok, const std::string& message) {
    if (!ok) throw ConfigError(message);
  };
  require(c.model == "mlp" || c.model == "cnn" || c.model == "vit",
          "MODEL.NAME must be mlp, cnn or vit, got '" + c.model + "'");
  require(c.global_batch_size > 0, "DATA.BATCH_SIZE must be positive");
  require(c.num_workers >= 0, "DATA.NUM_WORKERS must be >= 0");
  require(c.train_subset >= 0 && c.val_subset >= 0, "DATA.TRAIN_SUBSET and DATA.VAL_SUBSET must be >= 0 (0 = all)");
  require(c.epochs > 0, "TRAIN.EPOCHS must be positive");
  require(c.base_lr > 0, "TRAIN.BASE_LR must be positive");
  require(c.weight_decay >= 0, "TRAIN.WEIGHT_DECAY must be >= 0");
  require(c.warmup_epochs >= 0 && c.warmup_epochs <= c.epochs, "TRAIN.WARMUP_EPOCHS must be in [0, TRAIN.EPOCHS]");
  require(c.warmup_start_factor > 0 && c.warmup_start_factor <= 1, "TRAIN.WARMUP_START_FACTOR must be in (0, 1]");
  require(c.lr_scheduler == "cosine" || c.lr_scheduler == "constant",
          "TRAIN.LR_SCHEDULER.NAME must be cosine or constant, got '" + c.lr_scheduler + "'");
  require(c.optimizer == "sgd" || c.optimizer == "adam" || c.optimizer == "adamw",
          "TRAIN.OPTIMIZER.NAME must be sgd, adam or adamw, got '" + c.optimizer + "'");
  require(c.momentum >= 0 && c.momentum < 1, "TRAIN.OPTIMIZER.MOMENTUM must be in [0, 1)");
  require(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1, "TRAIN.OPTIMIZER.BETAS must be in [0, 1)");
  require(c.eps > 0, "TRAIN.OPTIMIZER.EPS must be positive");
  require(c.micro_batch > 0, "TRAIN.MICRO_BATCH must be positive");
  require(c.precision == "fp32" || c.precision == "bf16" || c.precision == "fp16",
          "TRAIN.PRECISION must be fp32, bf16 or fp16, got '" + c.precision + "'");
  require(c.save_every > 0, "SAVE_FREQ must be positive");
  require(c.save_every_steps >= 0, "SAVE_FREQ_STEPS must be >= 0 (0 = no mid-epoch checkpoints)");
  require(c.save_every_minutes >= 0 && std::isfinite(c.save_every_minutes),
          "SAVE_FREQ_MINUTES must be a number >= 0 (0 = no time-based checkpoints)");
}

}  // namespace trainer
