// examples/zoo/zoo.cpp — the zoo's table (zoo.h): names, input shapes, costs and constructors.
#include "zoo.h"

#include "mixer.h"
#include "mobilenet.h"
#include "resnet20.h"
#include "tinygpt.h"
#include "unet.h"

using namespace minidl;

namespace zoo {

namespace {
template <class M> std::function<std::unique_ptr<nn::Module>()> maker() {
  return [] { return std::make_unique<M>(); };
}
}  // namespace

const std::vector<ZooModel>& models() {
  static const std::vector<ZooModel> zoo = {
      {"resnet20", {3, 32, 32}, 0, 40'813'184, maker<ResNet20>()},
      {"mobilenet", {3, 32, 32}, 0, 18'662'400, maker<MobileNet>()},
      {"unet", {1, 28, 28}, 0, 18'979'232, maker<UNet>()},
      {"mixer", {1, 28, 28}, 0, 16'157'952, maker<Mixer>()},
      {"tinygpt", {TinyGPTOptions{}.block}, TinyGPTOptions{}.vocab, 7'733'248, maker<TinyGPT>()},
  };
  return zoo;
}

const ZooModel* find(const std::string& name) {
  for (const ZooModel& m : models())
    if (m.name == name) return &m;
  return nullptr;
}

std::string names() {
  std::string s;
  for (const ZooModel& m : models()) s += (s.empty() ? "" : ", ") + m.name;
  return s;
}

Batch ZooModel::random_batch(int64_t n, RandomKey key) const {
  if (vocab > 0) {
    const int64_t T = sample[0];
    const Tensor tokens = randint(0, vocab, {n, T + 1}, key);  // (n, T + 1)
    return {tokens.slice(1, 0, T).contiguous(), tokens.slice(1, 1, T + 1).contiguous()};
  }
  Shape shape = {n};
  shape.insert(shape.end(), sample.begin(), sample.end());
  return {rand(shape, key), randint(0, 10, {n}, RandomKey{key.seed + 1, key.stream})};
}

Variable loss(const Variable& logits, const Tensor& target) {
  if (logits.dim() == 3) return cross_entropy(flatten(logits, 0, 1), target.reshape({-1}));  // (N T, V), (N T)
  return cross_entropy(logits, target);
}

}  // namespace zoo
