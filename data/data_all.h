// data/data_all.h — the umbrella header of the data layer.
#pragma once
#include "minidl/data/cifar10.h"
#include "minidl/data/dataloader.h"
#include "minidl/data/dataset.h"
#include "minidl/data/mnist.h"
#include "minidl/data/sampler.h"
#include "minidl/data/transforms.h"
