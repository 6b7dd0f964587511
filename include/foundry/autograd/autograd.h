// Backward passes and gradient checking.
#pragma once

#include <functional>
#include <vector>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/tensor.h"

namespace foundry::autograd {

/// Accumulates d(sum of outputs * grad_outputs)/d(leaf) into every leaf's `.grad`.
/// Undefined grad_outputs are allowed only for one-element outputs (they mean 1).
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false, bool create_graph = false);

/// Returns d(outputs)/d(inputs) without touching `.grad` (torch.autograd.grad). With
/// create_graph the results are themselves differentiable (higher-order gradients).
/// An input the outputs do not depend on gives an error unless allow_unused, then undefined.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {},
                         std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                         bool allow_unused = false);

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  bool raise_on_failure = true;
};

/// Compares analytical gradients of `fn` with central finite differences in float64
/// (torch.autograd.gradcheck). Inputs must be float64; those with requires_grad are checked.
/// Returns true when they agree; otherwise throws (or returns false) with the worst element.
bool gradcheck(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
               const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

/// Second-order check (torch.autograd.gradgradcheck): gradcheck of the map
/// (inputs, grad_outputs) -> grad(fn(inputs), inputs, grad_outputs, create_graph=true).
bool gradgradcheck(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                   const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace foundry::autograd
