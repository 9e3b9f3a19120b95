// autograd/autograd_all.h — the umbrella header of the autograd layer.
#pragma once
#include "autograd/function.h"
#include "autograd/ops.h"
#include "autograd/variable.h"
