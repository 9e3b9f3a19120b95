// tensor/tensor_all.h — the umbrella header of the tensor layer.
#pragma once
#include "tensor/creation.h"
#include "tensor/ops.h"
#include "tensor/ops_nn.h"
#include "tensor/random.h"
#include "tensor/tensor.h"
