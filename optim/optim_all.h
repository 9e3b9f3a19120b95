// optim/optim_all.h — the optim/ folder in one include: optimizers (SGD, Adam, AdamW), their
// state_dict, LR schedulers, gradient clipping and GradScaler (loss scaling).
#pragma once
#include "minidl/optim/adam.h"
#include "minidl/optim/clip_grad.h"
#include "minidl/optim/grad_scaler.h"
#include "minidl/optim/lr_scheduler.h"
#include "minidl/optim/optimizer.h"
#include "minidl/optim/sgd.h"
