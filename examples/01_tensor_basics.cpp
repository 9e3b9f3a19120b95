// examples/01_tensor_basics.cpp — the Tensor: shape, dtype, views that share memory, math with
// broadcasting, reductions, matmul, and random numbers that depend only on a seed.
//   build/examples/01_tensor_basics
// Read top to bottom; every step prints what it made.
#include <iostream>

#include "minidl/tensor/tensor_all.h"

using namespace minidl;

int main() {
  // A tensor is a shape, a dtype and a view (strides, offset) of shared storage.
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});  // (2, 3) float32
  std::cout << "a = " << a << "\nshape " << shape_str(a.shape()) << ", strides " << shape_str(a.strides()) << ", "
            << a.desc() << "\n\n";

  // Views never copy: the transpose shares a's storage, only the strides differ.
  Tensor at = a.t();  // (3, 2)
  std::cout << "a.t() = " << at << "\nstrides " << shape_str(at.strides()) << ", contiguous? "
            << (at.is_contiguous() ? "yes" : "no") << "\n";
  Tensor c = a.clone();  // a copy with its own storage
  Tensor row = c.select(0, 1);  // c[1], (3): a view
  row.fill_(0);  // writes through the view into c
  std::cout << "after c[1].fill_(0): c = " << c << "\n\n";

  // Element-wise ops broadcast like NumPy / PyTorch: (2, 3) + (3) -> (2, 3).
  Tensor b = arange(0.0, 3.0, 1.0, DType::Float32);  // [0, 1, 2]
  std::cout << "a + b = " << (a + b) << "\na * 2 = " << (a * 2.0) << "\n\n";

  // Reductions over chosen dims; results are deterministic whatever the thread count.
  std::cout << "sum(a) = " << sum(a) << "\nmean(a, dim 1) = " << mean(a, {1}) << "\nargmax(a, dim 1) = " << argmax(a, 1)
            << "\n\n";

  // Matrix product: (2, 3) @ (3, 2) -> (2, 2).
  std::cout << "a @ a.t() = " << matmul(a, at) << "\n\n";

  // Random numbers come from a counter-based generator: the same seed gives the same numbers,
  // on any machine, in any thread.
  manual_seed(42);
  Tensor r1 = randn({2, 2});
  manual_seed(42);
  Tensor r2 = randn({2, 2});
  std::cout << "randn after manual_seed(42), twice:\n" << r1 << "\n" << r2 << "\n";
  return 0;
}
