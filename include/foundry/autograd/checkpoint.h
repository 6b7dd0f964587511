// Activation checkpointing: run a function without keeping its intermediate activations and
// recompute them in backward (torch.utils.checkpoint with preserve_rng_state=True).
#pragma once

#include <functional>
#include <vector>

#include "foundry/core/tensor.h"

namespace foundry::autograd {

/// Calls fn(inputs) without recording its graph; in backward, calls it again with recording on
/// (restoring the default generator's state first, so dropout draws the same masks) and
/// backpropagates through the recomputation. Gradients reach the inputs and every parameter fn
/// uses. The outputs are differentiable with respect to the inputs that require grad.
std::vector<Tensor> checkpoint(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                               const std::vector<Tensor>& inputs);

}  // namespace foundry::autograd
