// dist/grad_scaler_sync.cpp — sync_grad_scaler: the found_inf reducer as a MAX all-reduce.
#include "minidl/dist/grad_scaler_sync.h"

#include "minidl/dist/distributed.h"
#include "minidl/tensor/creation.h"

namespace minidl::dist {

void sync_grad_scaler(optim::GradScaler& scaler, ProcessGroup* group) {
  scaler.set_found_inf_reducer([group](bool found_inf) {
    ProcessGroup& g = group ? *group : default_group();
    Tensor flag = full({1}, found_inf ? 1.0 : 0.0, DType::Float32);
    g.all_reduce(flag, ReduceOp::MAX);
    return flag.item() != 0.0;
  });
}

}  // namespace minidl::dist
