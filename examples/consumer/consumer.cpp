// examples/consumer/consumer.cpp — a program outside the minidl tree: one include, one library.
// Fits y = 2x + 1 with an nn::Linear and SGD, then checks the fit and that the "gloo" (and, in
// CUDA builds, "nccl") process-group backends came along. Exit status 0 when all holds.
#include <minidl/minidl.h>

#include <cmath>
#include <iostream>

using namespace minidl;

int main() {
  manual_seed(0);
  Tensor x = from_vector<float>({-1.0f, -0.5f, 0.0f, 0.5f, 1.0f}, {5, 1});  // (5, 1)
  Tensor y = 2.0 * x + 1.0;  // (5, 1), exact line
  nn::Linear model({.in = 1, .out = 1});
  optim::SGD sgd(model.parameters(), {.lr = 0.2});
  for (int step = 0; step < 200; ++step) {
    sgd.zero_grad();
    Variable loss = mse_loss(model(Variable(x)), Variable(y));
    loss.backward();
    sgd.step();
  }
  const double w = model.weight.data().item(), b = model.bias.data().item();
  std::cout << "fit: y = " << w << " x + " << b << "\n";
  bool ok = std::abs(w - 2.0) < 1e-4 && std::abs(b - 1.0) < 1e-4;

#ifdef MINIDL_WITH_GLOO
  std::cout << "gloo backend: " << (dist::is_backend_available("gloo") ? "yes" : "MISSING") << "\n";
  ok = ok && dist::is_backend_available("gloo");
#endif
#ifdef MINIDL_WITH_CUDA
  std::cout << "nccl backend: " << (dist::is_backend_available("nccl") ? "yes" : "MISSING") << "\n";
  ok = ok && dist::is_backend_available("nccl");
#endif
  std::cout << (ok ? "consumer: ok" : "consumer: FAILED") << "\n";
  return ok ? 0 : 1;
}
