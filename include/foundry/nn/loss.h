// Loss modules over the loss ops (reduction "none", "mean" or "sum"). Class weights and
// pos_weight are buffers named "weight" / "pos_weight", as in PyTorch.
#pragma once

#include "foundry/nn/module.h"

namespace foundry::nn {

/// Base of the losses: forward(input, target).
class Loss : public Module {
 public:
  virtual Tensor forward(const Tensor& input, const Tensor& target) = 0;
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  const std::string reduction;

 protected:
  explicit Loss(std::string reduction);
};

struct CrossEntropyLossOptions {
  Tensor weight;  ///< per-class weights [C] or undefined
  int64_t ignore_index = -100;
  std::string reduction = "mean";
  double label_smoothing = 0.0;
};

/// log_softmax + nll over class indices, or against class probabilities.
class CrossEntropyLoss : public Loss {
 public:
  explicit CrossEntropyLoss(CrossEntropyLossOptions options = {});
  std::string type_name() const override { return "CrossEntropyLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
  const int64_t ignore_index;
  const double label_smoothing;
  Tensor& weight;
};

struct NLLLossOptions {
  Tensor weight;
  int64_t ignore_index = -100;
  std::string reduction = "mean";
};

class NLLLoss : public Loss {
 public:
  explicit NLLLoss(NLLLossOptions options = {});
  std::string type_name() const override { return "NLLLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
  const int64_t ignore_index;
  Tensor& weight;
};

class MSELoss : public Loss {
 public:
  explicit MSELoss(std::string reduction = "mean") : Loss(std::move(reduction)) {}
  std::string type_name() const override { return "MSELoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
};

class L1Loss : public Loss {
 public:
  explicit L1Loss(std::string reduction = "mean") : Loss(std::move(reduction)) {}
  std::string type_name() const override { return "L1Loss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
};

class SmoothL1Loss : public Loss {
 public:
  explicit SmoothL1Loss(std::string reduction = "mean", double beta = 1.0) : Loss(std::move(reduction)), beta(beta) {}
  std::string type_name() const override { return "SmoothL1Loss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
  const double beta;
};

class HuberLoss : public Loss {
 public:
  explicit HuberLoss(std::string reduction = "mean", double delta = 1.0) : Loss(std::move(reduction)), delta(delta) {}
  std::string type_name() const override { return "HuberLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
  const double delta;
};

/// Binary cross-entropy over probabilities.
class BCELoss : public Loss {
 public:
  explicit BCELoss(Tensor weight = {}, std::string reduction = "mean");
  std::string type_name() const override { return "BCELoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
  Tensor& weight;
};

/// Binary cross-entropy over logits (numerically stable); pos_weight weighs the positive term.
class BCEWithLogitsLoss : public Loss {
 public:
  explicit BCEWithLogitsLoss(Tensor weight = {}, std::string reduction = "mean", Tensor pos_weight = {});
  std::string type_name() const override { return "BCEWithLogitsLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
  Tensor& weight;
  Tensor& pos_weight;
};

/// KL(target || input) with input as log-probabilities; reduction may also be "batchmean"
/// (the sum divided by the batch size, the mathematically correct KL).
class KLDivLoss : public Loss {
 public:
  explicit KLDivLoss(std::string reduction = "mean", bool log_target = false);
  std::string type_name() const override { return "KLDivLoss"; }
  Tensor forward(const Tensor& input, const Tensor& target) override;
  const bool log_target;
};

}  // namespace foundry::nn
