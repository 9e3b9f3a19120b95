// nn/sequential.cpp — Sequential's forward: each child in order (called as child(x), so its forward
// pre-hooks run), except the runs that nn::fuse_for_training marked, each of which is one call.
#include "minidl/nn/sequential.h"

#include <algorithm>
#include <stdexcept>

namespace minidl::nn {

Variable Sequential::forward(const Variable& x) {
  Variable y = x;
  const std::vector<Module*> ms = children();
  auto run = fused_.begin();
  for (size_t i = 0; i < ms.size();) {
    if (run != fused_.end() && run->first == i) {
      const FusedRun& r = *run++;
      // One call for the whole run, given the run's input: its first child's hooks run before it.
      // A later child's hooks would need that child's own input, which the fused call never
      // makes: with any, the run's children run one by one instead (the same values, nn/fuse.h).
      const auto first = ms.begin() + static_cast<std::ptrdiff_t>(i);
      if (std::none_of(first + 1, first + static_cast<std::ptrdiff_t>(r.length),
                       [](const Module* m) { return m->has_forward_pre_hooks(); })) {
        ms[i]->run_forward_pre_hooks(y);
        y = r.forward(y);
        i += r.length;
        continue;
      }
    }
    y = (*ms[i])(y);
    ++i;
  }
  return y;
}

void Sequential::add_fused_run(FusedRun run) {
  if (run.length == 0 || run.first + run.length > size() || !run.forward)
    throw std::invalid_argument("Sequential::add_fused_run: children [" + std::to_string(run.first) + ", " +
                                std::to_string(run.first + run.length) + ") with a forward, of " +
                                std::to_string(size()) + " children");
  for (const FusedRun& r : fused_)
    if (run.first < r.first + r.length && r.first < run.first + run.length)
      throw std::invalid_argument("Sequential::add_fused_run: " + run.name + " at child " + std::to_string(run.first) +
                                  " overlaps " + r.name + " at child " + std::to_string(r.first));
  fused_.push_back(std::move(run));
  std::sort(fused_.begin(), fused_.end(), [](const FusedRun& a, const FusedRun& b) { return a.first < b.first; });
}

void Sequential::child_replaced(const std::string& name) {
  const size_t i = std::stoul(name);
  std::erase_if(fused_, [i](const FusedRun& r) { return i >= r.first && i < r.first + r.length; });
}

}  // namespace minidl::nn
