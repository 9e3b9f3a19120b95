// tensor/tensor_all.h — the umbrella header of the tensor layer.
#pragma once
#include "minidl/tensor/checkpoint.h"
#include "minidl/tensor/creation.h"
#include "minidl/tensor/ops.h"
#include "minidl/tensor/ops_nn.h"
#include "minidl/tensor/random.h"
#include "minidl/tensor/tensor.h"
#include "minidl/tensor/threads.h"
