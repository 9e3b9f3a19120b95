// minidl.h — installed as <minidl/minidl.h>: the whole public API in one include, every layer's
// umbrella header lowest first. Everything lives in namespace minidl (minidl::nn, minidl::optim,
// minidl::data, minidl::dist below it). One layer only: <minidl/nn/nn_all.h> and the like.
#pragma once
#include "minidl/tensor/tensor_all.h"
#include "minidl/autograd/autograd_all.h"
#include "minidl/nn/nn_all.h"
#include "minidl/optim/optim_all.h"
#include "minidl/data/data_all.h"
#include "minidl/dist/dist_all.h"
