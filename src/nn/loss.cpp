// Loss modules (torch/nn/modules/loss.py, 1.13).
#include "foundry/nn/loss.h"

#include "foundry/ops/ops.h"

namespace foundry::nn {

Loss::Loss(std::string r) : reduction(std::move(r)) {
  FOUNDRY_CHECK_AS(ValueError, reduction == "none" || reduction == "mean" || reduction == "sum" || reduction == "batchmean",
                   "{} is not a valid value for reduction", reduction);
}

CrossEntropyLoss::CrossEntropyLoss(CrossEntropyLossOptions o)
    : Loss(o.reduction),
      ignore_index(o.ignore_index),
      label_smoothing(o.label_smoothing),
      weight(register_buffer("weight", o.weight)) {}

Tensor CrossEntropyLoss::forward(const Tensor& input, const Tensor& target) {
  return cross_entropy(input, target, weight, ignore_index, reduction, label_smoothing);
}

NLLLoss::NLLLoss(NLLLossOptions o)
    : Loss(o.reduction), ignore_index(o.ignore_index), weight(register_buffer("weight", o.weight)) {}

Tensor NLLLoss::forward(const Tensor& input, const Tensor& target) {
  return nll_loss(input, target, weight, ignore_index, reduction);
}

Tensor MSELoss::forward(const Tensor& input, const Tensor& target) { return mse_loss(input, target, reduction); }
Tensor L1Loss::forward(const Tensor& input, const Tensor& target) { return l1_loss(input, target, reduction); }
Tensor SmoothL1Loss::forward(const Tensor& input, const Tensor& target) {
  return smooth_l1_loss(input, target, reduction, beta);
}
Tensor HuberLoss::forward(const Tensor& input, const Tensor& target) {
  return huber_loss(input, target, reduction, delta);
}

BCELoss::BCELoss(Tensor w, std::string r) : Loss(std::move(r)), weight(register_buffer("weight", std::move(w))) {}

Tensor BCELoss::forward(const Tensor& input, const Tensor& target) {
  return binary_cross_entropy(input, target, weight, reduction);
}

BCEWithLogitsLoss::BCEWithLogitsLoss(Tensor w, std::string r, Tensor pw)
    : Loss(std::move(r)),
      weight(register_buffer("weight", std::move(w))),
      pos_weight(register_buffer("pos_weight", std::move(pw))) {}

Tensor BCEWithLogitsLoss::forward(const Tensor& input, const Tensor& target) {
  return binary_cross_entropy_with_logits(input, target, weight, reduction, pos_weight);
}

KLDivLoss::KLDivLoss(std::string r, bool log_target) : Loss(std::move(r)), log_target(log_target) {}

Tensor KLDivLoss::forward(const Tensor& input, const Tensor& target) {
  if (reduction == "batchmean") {
    Tensor s = kl_div(input, target, "sum", log_target);
    return input.dim() == 0 ? s : s / double(input.size(0));
  }
  return kl_div(input, target, reduction, log_target);
}

}  // namespace foundry::nn
