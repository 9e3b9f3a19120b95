// nn/nn.h — the umbrella header of the nn layer: Module, layers, init, reference models.
#pragma once
#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/batchnorm.h"
#include "nn/containers.h"
#include "nn/conv.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/linear.h"
#include "nn/models.h"
#include "nn/module.h"
#include "nn/sequential.h"
