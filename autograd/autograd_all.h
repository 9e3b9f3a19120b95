// autograd/autograd_all.h — the umbrella header of the autograd layer.
#pragma once
#include "minidl/autograd/autocast.h"
#include "minidl/autograd/function.h"
#include "minidl/autograd/gradcheck.h"
#include "minidl/autograd/ops.h"
#include "minidl/autograd/profiler.h"
#include "minidl/autograd/variable.h"
