// data/data_all.h — the umbrella header of the data layer.
#pragma once
#include "data/cifar10.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/mnist.h"
#include "data/sampler.h"
#include "data/transforms.h"
