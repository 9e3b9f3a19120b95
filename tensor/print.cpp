// tensor/print.cpp — PyTorch-like printing: nested brackets, aligned columns, dtype suffix.
// tensor([[ 1.0000, -2.5000],
//         [ 3.0000,  4.0000]], dtype=float32)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "minidl/tensor/tensor.h"

namespace minidl {

namespace {
std::string format_value(double v, bool floating) {
  char buf[64];
  if (!floating) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  } else if (std::isnan(v) || std::isinf(v)) {
    std::snprintf(buf, sizeof buf, "%s", std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"));
  } else if (v != 0 && (std::fabs(v) >= 1e5 || std::fabs(v) < 1e-4)) {
    std::snprintf(buf, sizeof buf, "%.4e", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.4f", v);
  }
  return buf;
}
}  // namespace

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  const std::vector<double> v = to_vector<double>();
  const bool fl = is_floating_point();
  std::vector<std::string> cells(v.size());
  size_t width = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    cells[i] = format_value(v[i], fl);
    width = std::max(width, cells[i].size());
  }
  std::ostringstream os;
  os << "tensor(";
  const int64_t nd = dim();
  if (nd == 0) {
    os << cells[0];
  } else if (numel_ == 0) {
    os << "[], size=" << shape_str(shape_);
  } else {
    const std::string indent(7, ' ');
    for (size_t i = 0; i < cells.size(); ++i) {
      // open brackets for every dim whose index just became 0
      int64_t opens = 0, rem = static_cast<int64_t>(i);
      for (int64_t d = nd - 1; d >= 0; --d) {
        if (rem % shape_[d] != 0) break;
        ++opens;
        rem /= shape_[d];
      }
      if (i > 0)
        os << (opens > 0 ? std::string(",") + std::string(opens, '\n') + indent + std::string(nd - opens, ' ') : ", ");
      os << std::string(opens, '[');
      os << std::string(width - cells[i].size(), ' ') << cells[i];
      int64_t closes = 0;
      rem = static_cast<int64_t>(i) + 1;
      for (int64_t d = nd - 1; d >= 0; --d) {
        if (rem % shape_[d] != 0) break;
        ++closes;
        rem /= shape_[d];
      }
      os << std::string(closes, ']');
    }
  }
  if (dtype_ != DType::Float32 && dtype_ != DType::Int64) os << ", dtype=" << dtype_name(dtype_);
  if (!device().is_cpu()) os << ", device='" << device().str() << "'";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

}  // namespace minidl
