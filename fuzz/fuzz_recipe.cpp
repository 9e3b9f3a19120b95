// fuzz/fuzz_recipe.cpp — libFuzzer target: arbitrary bytes as a YAML training recipe
// (examples/trainer/config.cpp). parse_config must throw a ConfigError (std::runtime_error) or
// return a config; an accepted config written back with to_yaml must parse to the same YAML.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "examples/trainer/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  trainer::TrainConfig config;
  try {
    config = trainer::parse_config(text, "fuzz");
  } catch (const std::runtime_error&) {
    return 0;
  }
  const std::string yaml = trainer::to_yaml(config);
  if (trainer::to_yaml(trainer::parse_config(yaml, "round trip")) != yaml) std::abort();
  return 0;
}
