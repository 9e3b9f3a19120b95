// tensor/random.h — random tensors from the counter-based Philox generator.
// A RandomKey (seed, stream) names a whole random tensor; element i is philox(seed, stream, i).
// The default generator hands out keys (manual_seed's seed, stream 0, 1, 2, ...) in call order,
// so a program's random numbers depend only on its seed and the order of its calls.
#pragma once
#include <cstdint>

#include "minidl/tensor/tensor.h"

namespace minidl {

struct RandomKey {
  uint64_t seed = 0;
  uint64_t stream = 0;
};

void manual_seed(uint64_t seed);  // resets the default generator: seed, next stream 0
uint64_t initial_seed();
RandomKey next_random_key();  // takes the next stream of the default generator

// The default generator's whole state, as torch.get_rng_state / set_rng_state: a uint8 tensor
// of 16 bytes (seed, then the next stream, each a little-endian u64), so it goes into a
// safetensors file like any tensor. After set_rng_state(s) the draws are those that followed
// get_rng_state() == s. Anything but 16 uint8 values is a std::invalid_argument naming it.
Tensor get_rng_state();
void set_rng_state(const Tensor& state);

Tensor rand(const Shape& shape, DType dtype = DType::Float32);  // U[0, 1)
Tensor rand(const Shape& shape, RandomKey key, DType dtype = DType::Float32);
Tensor randn(const Shape& shape, DType dtype = DType::Float32);  // N(0, 1)
Tensor randn(const Shape& shape, RandomKey key, DType dtype = DType::Float32);
Tensor randint(int64_t low, int64_t high, const Shape& shape);  // int64 in [low, high)
Tensor randint(int64_t low, int64_t high, const Shape& shape, RandomKey key);
// A random permutation of 0..n-1 (int64), Fisher–Yates driven by Philox words.
Tensor randperm(int64_t n, RandomKey key);

// In-place fills used by nn::init: uniform in [a, b), normal(mean, std).
Tensor& uniform_(Tensor& t, double a, double b);
Tensor& normal_(Tensor& t, double mean, double std);

}  // namespace minidl
