// nn/nn_all.h — the umbrella header of the nn layer: Module, layers, init, reference models,
// AveragedModel.
#pragma once
#include "minidl/nn/activation.h"
#include "minidl/nn/attention.h"
#include "minidl/nn/averaged_model.h"
#include "minidl/nn/batchnorm.h"
#include "minidl/nn/containers.h"
#include "minidl/nn/conv.h"
#include "minidl/nn/init.h"
#include "minidl/nn/layers.h"
#include "minidl/nn/linear.h"
#include "minidl/nn/models.h"
#include "minidl/nn/module.h"
#include "minidl/nn/fuse.h"
#include "minidl/nn/sequential.h"
