// dist/dist_all.h — the umbrella header of the dist layer: init / collectives, process groups
// (Gloo, and NCCL registered by CUDA builds), the TCP store, spawn, DistributedSampler,
// DistributedDataParallel, SyncBatchNorm, all-reduced metrics, the ranks' shared GradScaler
// decision (sync_grad_scaler) and ZeroRedundancyOptimizer (the optimizer state sharded over the
// ranks). All in namespace minidl::dist.
#pragma once
#include "minidl/dist/data_parallel.h"
#include "minidl/dist/ddp.h"
#include "minidl/dist/deterministic_ddp.h"
#include "minidl/dist/join.h"
#include "minidl/dist/distributed.h"
#include "minidl/dist/distributed_sampler.h"
#include "minidl/dist/env.h"
#include "minidl/dist/grad_scaler_sync.h"
#include "minidl/dist/host_staging.h"
#include "minidl/dist/metrics.h"
#include "minidl/dist/process_group.h"
#include "minidl/dist/process_group_gloo.h"
#include "minidl/dist/spawn.h"
#include "minidl/dist/step_record.h"
#include "minidl/dist/store.h"
#include "minidl/dist/sync_batchnorm.h"
#include "minidl/dist/zero_redundancy_optimizer.h"
