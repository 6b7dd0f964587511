// Normalisation layers: LayerNorm, RMSNorm, GroupNorm, BatchNorm1d/2d (PyTorch semantics; RMSNorm
// follows torch 2.4's nn.RMSNorm, which 1.13 does not have).
#pragma once

#include <optional>
#include <vector>

#include "foundry/nn/module.h"

namespace foundry::nn {

/// Normalises over the last dims (normalized_shape). weight = 1, bias = 0.
class LayerNorm : public Module {
 public:
  LayerNorm(std::vector<int64_t> normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);
  LayerNorm(int64_t normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true)
      : LayerNorm(std::vector<int64_t>{normalized_shape}, eps, elementwise_affine, bias) {}
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  void reset_parameters();

  const std::vector<int64_t> normalized_shape;
  const double eps;
  const bool elementwise_affine;
  Tensor& weight;
  Tensor& bias;
};

/// x / sqrt(mean(x^2) + eps) * weight over the last dims; eps = nullopt uses the dtype's epsilon.
class RMSNorm : public Module {
 public:
  RMSNorm(std::vector<int64_t> normalized_shape, std::optional<double> eps = std::nullopt,
          bool elementwise_affine = true);
  RMSNorm(int64_t normalized_shape, std::optional<double> eps = std::nullopt, bool elementwise_affine = true)
      : RMSNorm(std::vector<int64_t>{normalized_shape}, eps, elementwise_affine) {}
  std::string type_name() const override { return "RMSNorm"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  void reset_parameters();

  const std::vector<int64_t> normalized_shape;
  const std::optional<double> eps;
  const bool elementwise_affine;
  Tensor& weight;
};

/// Normalises groups of channels of [N, C, *] inputs. weight = 1, bias = 0.
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  std::string type_name() const override { return "GroupNorm"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  void reset_parameters();

  const int64_t num_groups, num_channels;
  const double eps;
  const bool affine;
  Tensor& weight;
  Tensor& bias;
};

struct BatchNormOptions {
  double eps = 1e-5;
  /// nullopt: cumulative moving average (factor 1 / num_batches_tracked).
  std::optional<double> momentum = 0.1;
  bool affine = true;
  bool track_running_stats = true;
};

/// PyTorch's _BatchNorm: batch statistics in training (updating running_mean/running_var with
/// momentum and counting num_batches_tracked), running statistics in eval mode.
class BatchNormBase : public Module {
 public:
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  void reset_running_stats();
  void reset_parameters();

  const int64_t num_features;
  const BatchNormOptions options;
  Tensor& weight;
  Tensor& bias;
  Tensor& running_mean;         ///< float, [num_features]; undefined without track_running_stats
  Tensor& running_var;          ///< float, [num_features]
  Tensor& num_batches_tracked;  ///< int64 scalar

 protected:
  BatchNormBase(int64_t num_features, BatchNormOptions options);
  virtual void check_input_dim(const Tensor& x) const = 0;
};

/// Over [N, C] or [N, C, L] inputs.
class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(int64_t num_features, BatchNormOptions options = {}) : BatchNormBase(num_features, options) {}
  std::string type_name() const override { return "BatchNorm1d"; }

 protected:
  void check_input_dim(const Tensor& x) const override;
};

/// Over [N, C, H, W] inputs.
class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(int64_t num_features, BatchNormOptions options = {}) : BatchNormBase(num_features, options) {}
  std::string type_name() const override { return "BatchNorm2d"; }

 protected:
  void check_input_dim(const Tensor& x) const override;
};

}  // namespace foundry::nn
