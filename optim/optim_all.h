// optim/optim_all.h — the optim/ folder in one include: optimizers (SGD, Adam, AdamW), their
// state_dict, LR schedulers and gradient clipping.
#pragma once
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "optim/sgd.h"
