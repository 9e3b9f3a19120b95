// examples/03_custom_module.cpp — writing your own model: a Module whose layers are members
// registered by name, its printed tree, named parameters, and a state_dict saved to and loaded
// from a safetensors file (which PyTorch's safetensors reader also opens).
//   build/examples/03_custom_module [file = /tmp/tiny_net.safetensors]
#include <iostream>

#include "minidl/nn/nn_all.h"
#include "minidl/tensor/serialize.h"

using namespace minidl;

// A small convolutional classifier for (N, 1, 28, 28) images.
struct TinyNet : nn::Module {
  nn::Conv2d conv{{.in = 1, .out = 8, .kernel = 3, .padding = 1}};  // (N, 8, 28, 28)
  nn::MaxPool2d pool{{.kernel = 4}};  // (N, 8, 7, 7)
  nn::Linear fc{{.in = 8 * 7 * 7, .out = 10}};  // (N, 10)

  TinyNet() {
    // Registration gives each child its name: parameters become "conv.weight", "fc.bias", ...
    register_module("conv", conv);
    register_module("pool", pool);
    register_module("fc", fc);
  }
  std::string type_name() const override { return "TinyNet"; }
  Variable forward(const Variable& x) override {
    Variable h = pool(relu(conv(x)));
    return fc(flatten(h, 1));
  }
};

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "/tmp/tiny_net.safetensors";

  manual_seed(0);  // initial weights depend only on the seed
  TinyNet net;
  std::cout << net << "\n";  // the module tree and its parameter count
  for (const auto& [name, p] : net.named_parameters()) std::cout << "  " << name << " " << shape_str(p.shape()) << "\n";

  Variable x(randn({2, 1, 28, 28}));
  Tensor before = net(x).data();  // (2, 10)

  // state_dict: every parameter and buffer by dotted name; save writes it atomically.
  save(net.state_dict(), path);
  std::cout << "\nsaved " << net.state_dict().size() << " tensors to " << path << "\n";

  // A second model with other initial weights takes the saved ones.
  manual_seed(1);
  TinyNet copy;
  copy.load_state_dict(load(path).tensors);  // strict: every name must match
  Tensor after = copy(x).data();
  std::cout << "same outputs after loading? " << (max(abs(before - after)).item() == 0 ? "yes" : "no") << "\n";
  return 0;
}
