// Every nn layer: include this for the whole torch.nn-like module set.
#pragma once

#include "foundry/nn/activation.h"
#include "foundry/nn/attention.h"
#include "foundry/nn/containers.h"
#include "foundry/nn/conv.h"
#include "foundry/nn/init.h"
#include "foundry/nn/linear.h"
#include "foundry/nn/loss.h"
#include "foundry/nn/module.h"
#include "foundry/nn/norm.h"
#include "foundry/nn/recurrent.h"
