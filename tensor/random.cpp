// tensor/random.cpp — the default generator and the random tensor constructors.
#include "minidl/tensor/random.h"

#include <atomic>
#include <stdexcept>
#include <string>

#include "minidl/kernels/cpu/parallel.h"
#include "minidl/kernels/philox.h"

namespace minidl {

namespace {
struct DefaultGenerator {
  std::atomic<uint64_t> seed{0};
  std::atomic<uint64_t> stream{0};
};
DefaultGenerator& default_generator() {
  static DefaultGenerator g;
  return g;
}

template <class F> Tensor fill_random(const Shape& shape, DType dtype, const char* op, F&& element) {
  if (!is_floating(dtype))
    throw std::invalid_argument(std::string(op) + ": dtype must be a floating dtype, got " + dtype_name(dtype));
  if (is_half(dtype)) return fill_random(shape, DType::Float32, op, element).to(dtype);  // drawn in float32, rounded
  Tensor out(shape, dtype);
  dispatch_floating(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    T* p = out.data<T>();
    kernels::cpu::parallel_for(out.numel(), 4096, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = element(T{}, static_cast<uint64_t>(i));
    });
  });
  return out;
}
}  // namespace

void manual_seed(uint64_t seed) {
  default_generator().seed = seed;
  default_generator().stream = 0;
}
uint64_t initial_seed() { return default_generator().seed; }
RandomKey next_random_key() { return {default_generator().seed.load(), default_generator().stream.fetch_add(1)}; }

Tensor get_rng_state() {
  Tensor state({16}, DType::UInt8);
  uint8_t* p = state.data<uint8_t>();
  const uint64_t words[2] = {default_generator().seed.load(), default_generator().stream.load()};
  for (int w = 0; w < 2; ++w)
    for (int b = 0; b < 8; ++b) p[8 * w + b] = static_cast<uint8_t>(words[w] >> (8 * b));
  return state;
}

void set_rng_state(const Tensor& state) {
  if (!state.defined() || state.dtype() != DType::UInt8 || state.numel() != 16)
    throw std::invalid_argument("set_rng_state: expected the 16 uint8 values of get_rng_state(), got " +
                                (state.defined() ? state.desc() : std::string("an undefined tensor")));
  const Tensor c = state.cpu().contiguous();
  const uint8_t* p = c.data<uint8_t>();
  uint64_t words[2] = {0, 0};
  for (int w = 0; w < 2; ++w)
    for (int b = 7; b >= 0; --b) words[w] = (words[w] << 8) | p[8 * w + b];
  default_generator().seed = words[0];
  default_generator().stream = words[1];
}

Tensor rand(const Shape& shape, DType dtype) { return rand(shape, next_random_key(), dtype); }
Tensor rand(const Shape& shape, RandomKey k, DType dtype) {
  return fill_random(shape, dtype, "rand", [&](auto tag, uint64_t i) {
    using T = decltype(tag);
    return kernels::philox_uniform<T>(k.seed, k.stream, i);
  });
}

Tensor randn(const Shape& shape, DType dtype) { return randn(shape, next_random_key(), dtype); }
Tensor randn(const Shape& shape, RandomKey k, DType dtype) {
  return fill_random(shape, dtype, "randn", [&](auto tag, uint64_t i) {
    using T = decltype(tag);
    return kernels::philox_normal<T>(k.seed, k.stream, i);
  });
}

Tensor randint(int64_t low, int64_t high, const Shape& shape) { return randint(low, high, shape, next_random_key()); }
Tensor randint(int64_t low, int64_t high, const Shape& shape, RandomKey k) {
  if (high <= low)
    throw std::invalid_argument("randint: expected low < high, got low=" + std::to_string(low) +
                                ", high=" + std::to_string(high));
  Tensor out(shape, DType::Int64);
  int64_t* p = out.data<int64_t>();
  const uint64_t range = static_cast<uint64_t>(high - low);
  for (int64_t i = 0; i < out.numel(); ++i) {
    const auto r = kernels::philox_at(k.seed, k.stream, static_cast<uint64_t>(i));
    const uint64_t w = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
    p[i] = low + static_cast<int64_t>(w % range);
  }
  return out;
}

Tensor randperm(int64_t n, RandomKey k) {
  if (n < 0) throw std::invalid_argument("randperm: n must be >= 0, got " + std::to_string(n));
  Tensor out({n}, DType::Int64);
  int64_t* p = out.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    const auto r = kernels::philox_at(k.seed, k.stream, static_cast<uint64_t>(i));
    const uint64_t w = (static_cast<uint64_t>(r.v[0]) << 32) | r.v[1];
    std::swap(p[i], p[static_cast<int64_t>(w % static_cast<uint64_t>(i + 1))]);
  }
  return out;
}

Tensor& uniform_(Tensor& t, double a, double b) {
  Tensor u = rand(t.shape(), t.dtype());
  dispatch_floating(t.dtype(), "uniform_", [&](auto tag) {
    using T = decltype(tag);
    T* p = u.data<T>();
    for (int64_t i = 0; i < u.numel(); ++i) p[i] = static_cast<T>(a + (b - a) * p[i]);
  });
  t.copy_(u);
  return t;
}

Tensor& normal_(Tensor& t, double mean, double std) {
  Tensor z = randn(t.shape(), t.dtype());
  dispatch_floating(t.dtype(), "normal_", [&](auto tag) {
    using T = decltype(tag);
    T* p = z.data<T>();
    for (int64_t i = 0; i < z.numel(); ++i) p[i] = static_cast<T>(mean + std * p[i]);
  });
  t.copy_(z);
  return t;
}

}  // namespace minidl
