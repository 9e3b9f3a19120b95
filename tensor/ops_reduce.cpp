// tensor/ops_reduce.cpp — reductions: sum, mean, var (two-pass), max/argmax with indices, and
// top-k indices, on the CPU or on CUDA (kernels/cuda/reduce.cu). Deterministic: every result is
// bit-identical whatever the thread count (fixed chunks, partials combined in order; see
// kernels/cpu/reduce.h; the CUDA kernels use a fixed-shape reduction tree).
//
// Layout: the reduced dims are brought last (permute + contiguous, or no copy when they already
// are) so the data is a row-major (outer, len) matrix reduced along its rows. When a contiguous
// tensor is reduced over its leading dims (e.g. dim 0 of an (N, C) gradient), it is instead read
// in place as (len, outer) and reduced along its columns (on the CPU; the CUDA kernels take rows).
// bfloat16 / float16 inputs are reduced in float32 and the results rounded back.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>

#include "minidl/kernels/cpu/reduce.h"
#include "minidl/tensor/ops.h"
#include "minidl/tensor/cuda_dispatch.h"
#include "minidl/tensor/ops_util.h"

namespace minidl {

namespace cpu = kernels::cpu;
namespace kc = kernels::cuda;
using detail::check_defined;

namespace {

struct ReducePlan {
  bool columns = false;  // true: data is (len, outer) reduced along columns; false: (outer, len) rows
  Tensor data;  // contiguous
  int64_t outer = 1;  // number of results
  int64_t len = 1;  // elements reduced into each result
  Shape out_shape;  // result shape, keepdim applied
};

ReducePlan plan_reduce(const Tensor& x, const Shape& dims_in, bool keepdim, const char* op, bool allow_columns) {
  const int64_t nd = x.dim();
  const Shape dims = detail::normalize_dims(dims_in, nd, op);
  std::vector<bool> reduced(nd, false);
  for (int64_t d : dims) reduced[d] = true;
  ReducePlan p;
  Shape kept, perm;
  for (int64_t d = 0; d < nd; ++d) {
    if (reduced[d]) {
      p.len *= x.size(d);
      if (keepdim) p.out_shape.push_back(1);
    } else {
      p.outer *= x.size(d);
      p.out_shape.push_back(x.size(d));
      kept.push_back(d);
    }
  }
  const int64_t k = static_cast<int64_t>(dims.size());
  const bool trailing = k == 0 || dims.front() == nd - k;  // dims sorted and unique
  const bool leading = k > 0 && dims.back() == k - 1;
  if (x.is_contiguous() && trailing) {
    p.data = x;
  } else if (x.is_contiguous() && leading && allow_columns) {
    p.columns = true;
    p.data = x;
  } else {
    perm = kept;
    perm.insert(perm.end(), dims.begin(), dims.end());
    p.data = x.permute(perm).contiguous();
  }
  return p;
}

// Accumulator type: double for floating dtypes, int64 for integers.
template <class T> using AccOf = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

// out[i] = (sum of the reduced elements) / divisor, accumulated in AccOf<T>.
Tensor sum_impl(const Tensor& x, const Shape& dims, bool keepdim, const char* op, bool mean) {
  const bool cuda = cuda_dispatch::on_cuda({&x}, op);
  check_defined(x, op);
  if (mean && !x.is_floating_point())
    throw std::invalid_argument(std::string(op) + ": expected a floating dtype (float32 or float64), got " +
                                dtype_name(x.dtype()));
  if (is_half(x.dtype())) return sum_impl(x.to(DType::Float32), dims, keepdim, op, mean).to(x.dtype());
  ReducePlan p = plan_reduce(x, dims, keepdim, op, /*allow_columns=*/!cuda);
  Tensor out(p.out_shape, x.dtype(), x.device());
  if (p.outer == 0) return out;
  if (p.len == 0) return out.fill_(mean ? NAN : 0.0);
  if (cuda) {
    cuda_dispatch::use_device(x);
    kc::sum_rows(cuda_dispatch::elem(x.dtype()), p.data.raw_data(), out.raw_data(), p.outer, p.len,
                 mean ? double(p.len) : 1.0);
    return out;
  }
  dispatch(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using A = AccOf<T>;
    const T* src = p.data.data<T>();
    T* o = out.data<T>();
    const A div = mean ? A(p.len) : A(1);
    auto to_acc = [](T v) { return A(v); };
    if (p.columns) {
      std::vector<A> acc(p.outer);
      cpu::column_sums<A>(src, p.len, p.outer, p.outer, acc.data(), [](T v, int64_t) { return A(v); });
      for (int64_t c = 0; c < p.outer; ++c) o[c] = static_cast<T>(acc[c] / div);
    } else {
      const int64_t len = p.len;
      cpu::reduce_rows<A>(
          p.outer, len,
          [&](int64_t r, int64_t b, int64_t e) { return cpu::lane_sum<A>(src + r * len + b, e - b, to_acc); },
          [](A a, A b) { return a + b; }, [&](int64_t r, A a) { o[r] = static_cast<T>(a / div); });
    }
  });
  return out;
}

// values and first indices of the maximum over `dims` (already validated by the caller)
MaxResult max_impl(const Tensor& x, const Shape& dims, bool keepdim, const char* op) {
  const bool cuda = cuda_dispatch::on_cuda({&x}, op);
  check_defined(x, op);
  if (is_half(x.dtype())) {
    MaxResult r = max_impl(x.to(DType::Float32), dims, keepdim, op);
    return {r.values.to(x.dtype()), r.indices};  // exact: the maximum is one of the elements
  }
  ReducePlan p = plan_reduce(x, dims, keepdim, op, /*allow_columns=*/false);
  if (p.len == 0 && p.outer > 0)
    throw std::invalid_argument(std::string(op) + ": cannot take the maximum over an empty dim of " + x.desc());
  MaxResult res{Tensor(p.out_shape, x.dtype(), x.device()), Tensor(p.out_shape, DType::Int64, x.device())};
  if (p.outer == 0) return res;
  if (cuda) {
    cuda_dispatch::use_device(x);
    kc::max_rows(cuda_dispatch::elem(x.dtype()), p.data.raw_data(), res.values.raw_data(), res.indices.data<int64_t>(),
                 p.outer, p.len);
    return res;
  }
  dispatch(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using Acc = std::pair<T, int64_t>;
    const T* src = p.data.data<T>();
    T* vo = res.values.data<T>();
    int64_t* io = res.indices.data<int64_t>();
    const int64_t len = p.len;
    // "b beats a": strictly greater, or the first NaN (NaN propagates, as in torch.max)
    auto beats = [](T b, T a) { return b > a || (b != b && a == a); };
    cpu::reduce_rows<Acc>(
        p.outer, len,
        [&](int64_t r, int64_t b, int64_t e) {
          // pass 1 (vectorisable): the max value and whether there is a NaN; pass 2: its first index
          const T* row = src + r * len;
          T m = row[b];
          bool nan = false;
          for (int64_t i = b; i < e; ++i) {
            const T v = row[i];
            m = v > m ? v : m;
            nan |= v != v;
          }
          int64_t i = b;
          if (nan) {
            while (row[i] == row[i]) ++i;
          } else {
            while (row[i] != m) ++i;
          }
          return Acc{row[i], i};
        },
        [&](const Acc& a, const Acc& b) { return beats(b.first, a.first) ? b : a; },
        [&](int64_t r, const Acc& a) {
          vo[r] = a.first;
          io[r] = a.second;
        });
  });
  return res;
}

}  // namespace

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) { return sum_impl(x, dims, keepdim, "sum", false); }
Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) { return sum_impl(x, dims, keepdim, "mean", true); }

Tensor var(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  const bool cuda = cuda_dispatch::on_cuda({&x}, "var");
  check_defined(x, "var");
  if (is_half(x.dtype())) return var(x.to(DType::Float32), dims, correction, keepdim).to(x.dtype());
  ReducePlan p = plan_reduce(x, dims, keepdim, "var", /*allow_columns=*/!cuda);
  Tensor out(p.out_shape, x.dtype(), x.device());
  dispatch_floating(x.dtype(), "var", [&](auto tag) {
    using T = decltype(tag);
    if (p.outer == 0) return;
    if (p.len == 0) {
      out.fill_(NAN);
      return;
    }
    if (cuda) {
      cuda_dispatch::use_device(x);
      kc::var_rows(cuda_dispatch::elem(x.dtype()), p.data.raw_data(), out.raw_data(), p.outer, p.len, correction);
      return;
    }
    const T* src = p.data.data<T>();
    T* o = out.data<T>();
    const int64_t len = p.len;
    const double denom = static_cast<double>(len - correction);
    std::vector<double> m(p.outer), ss(p.outer);
    // pass 1: means; pass 2: sum of squared deviations from them
    if (p.columns) {
      cpu::column_sums<double>(src, len, p.outer, p.outer, m.data(), [](T v, int64_t) { return double(v); });
      for (double& v : m) v /= double(len);
      cpu::column_sums<double>(src, len, p.outer, p.outer, ss.data(), [&](T v, int64_t c) {
        const double d = double(v) - m[c];
        return d * d;
      });
    } else {
      auto plus = [](double a, double b) { return a + b; };
      cpu::reduce_rows<double>(
          p.outer, len,
          [&](int64_t r, int64_t b, int64_t e) {
            return cpu::lane_sum<double>(src + r * len + b, e - b, [](T v) { return double(v); });
          },
          plus, [&](int64_t r, double a) { m[r] = a / double(len); });
      cpu::reduce_rows<double>(
          p.outer, len,
          [&](int64_t r, int64_t b, int64_t e) {
            const double mr = m[r];
            return cpu::lane_sum<double>(src + r * len + b, e - b, [mr](T v) {
              const double d = double(v) - mr;
              return d * d;
            });
          },
          plus, [&](int64_t r, double a) { ss[r] = a; });
    }
    for (int64_t i = 0; i < p.outer; ++i) o[i] = static_cast<T>(ss[i] / denom);
  });
  return out;
}

MaxResult max(const Tensor& x, int64_t dim, bool keepdim) {
  dim = wrap_dim(dim, x.dim(), "max");
  return max_impl(x, {dim}, keepdim, "max");
}

Tensor max(const Tensor& x) {
  check_defined(x, "max");
  if (x.numel() == 0) throw std::invalid_argument("max: cannot take the maximum of an empty tensor " + x.desc());
  return max_impl(x, {}, false, "max").values;
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  dim = wrap_dim(dim, x.dim(), "argmax");
  return max_impl(x, {dim}, keepdim, "argmax").indices;
}

Tensor topk_indices(const Tensor& x, int64_t k) {
  // CUDA: a host fallback (used for top-5 accuracy only), one copy each way
  if (cuda_dispatch::on_cuda({&x}, "topk_indices")) return topk_indices(x.cpu(), k).to(x.device());
  check_defined(x, "topk_indices");
  if (x.dim() != 2) throw std::invalid_argument("topk_indices: expected a 2-d tensor, got " + x.desc());
  const int64_t rows = x.size(0), cols = x.size(1);
  if (k < 0 || k > cols)
    throw std::invalid_argument("topk_indices: k = " + std::to_string(k) + " out of range for " + x.desc());
  Tensor out({rows, k}, DType::Int64);  // (rows, k), largest first, ties by lower index
  const Tensor xc = x.contiguous();
  dispatch(x.dtype(), "topk_indices", [&](auto tag) {
    using T = decltype(tag);
    const T* src = xc.data<T>();
    int64_t* o = out.data<int64_t>();
    cpu::parallel_for(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
      std::vector<int64_t> idx(cols);
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = src + r * cols;
        std::iota(idx.begin(), idx.end(), int64_t(0));
        std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                          [row](int64_t a, int64_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
        std::copy(idx.begin(), idx.begin() + k, o + r * k);
      }
    });
  });
  return out;
}

}  // namespace minidl
