// dist/metrics.cpp — reduce_dict (key check, then one float64 all_reduce) and MetricSums. See
// metrics.h.
#include "minidl/dist/metrics.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "minidl/tensor/creation.h"

namespace minidl::dist {

namespace {

// FNV-1a over the keys, each ended by '\0'.
int64_t keys_hash(const std::map<std::string, double>& values) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [key, value] : values) {
    for (char c : key) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
    h = (h ^ 0u) * 1099511628211ull;
  }
  int64_t out;
  std::memcpy(&out, &h, sizeof(out));
  return out;
}

std::string keys_list(const std::map<std::string, double>& values) {
  std::string s = "[";
  for (const auto& [key, value] : values) s += (s.size() > 1 ? ", " : "") + key;
  return s + "]";
}

}  // namespace

std::map<std::string, double> reduce_dict(const std::map<std::string, double>& values, bool average, ProcessGroup& pg) {
  // 1. Same keys everywhere? (number of keys, hash of keys): int64[2] per rank.
  Tensor mine = from_vector<int64_t>({static_cast<int64_t>(values.size()), keys_hash(values)}, {2});
  std::vector<Tensor> all = pg.all_gather(mine);
  for (int r = 0; r < pg.size(); ++r) {
    const int64_t* other = all[static_cast<size_t>(r)].data<int64_t>();
    if (other[0] != mine.data<int64_t>()[0] || other[1] != mine.data<int64_t>()[1]) {
      // Every rank sees the same difference, so every rank takes this path: name the keys.
      std::string theirs = pg.all_gather_object(keys_list(values))[static_cast<size_t>(r)];
      throw std::runtime_error("reduce_dict: ranks have different keys: rank " + std::to_string(pg.rank()) + " has " +
                               keys_list(values) + ", rank " + std::to_string(r) + " has " + theirs);
    }
  }
  // 2. Values stacked in key order: float64[n], one all_reduce.
  std::vector<double> stacked;
  for (const auto& [key, value] : values) stacked.push_back(value);
  Tensor t = from_vector<double>(stacked, {static_cast<int64_t>(stacked.size())});
  pg.all_reduce(t, ReduceOp::SUM);
  std::map<std::string, double> out;
  const double* p = t.data<double>();
  size_t i = 0;
  for (const auto& [key, value] : values) {
    out[key] = average ? p[i] / pg.size() : p[i];
    ++i;
  }
  return out;
}

void MetricSums::add(const std::string& name, double value, double n) {
  weighted_sum[name] += value * n;
  count[name] += n;
}

std::map<std::string, double> MetricSums::mean() const {
  std::map<std::string, double> out;
  for (const auto& [name, sum] : weighted_sum) {
    const double n = count.at(name);
    out[name] = n > 0 ? sum / n : std::numeric_limits<double>::quiet_NaN();
  }
  return out;
}

std::map<std::string, double> MetricSums::all_reduce_mean(ProcessGroup& pg) const {
  std::map<std::string, double> flat;
  for (const auto& [name, sum] : weighted_sum) {
    flat[name + " (weighted sum)"] = sum;
    flat[name + " (count)"] = count.at(name);
  }
  std::map<std::string, double> total = reduce_dict(flat, /*average=*/false, pg);
  std::map<std::string, double> out;
  for (const auto& [name, sum] : weighted_sum) {
    const double n = total.at(name + " (count)");
    out[name] = n > 0 ? total.at(name + " (weighted sum)") / n : std::numeric_limits<double>::quiet_NaN();
  }
  return out;
}

double weighted_mean(double value, double n, ProcessGroup& pg) {
  Tensor t = from_vector<double>({value * n, n}, {2});
  pg.all_reduce(t, ReduceOp::SUM);
  const double* p = t.data<double>();
  return p[1] > 0 ? p[0] / p[1] : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace minidl::dist
