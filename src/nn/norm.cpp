// Normalisation layers (torch/nn/modules/normalization.py and batchnorm.py, 1.13).
#include "foundry/nn/norm.h"

#include "foundry/autograd/grad_mode.h"
#include "foundry/nn/init.h"
#include "foundry/ops/ops.h"

namespace foundry::nn {

// ---- LayerNorm ---------------------------------------------------------------------------------

LayerNorm::LayerNorm(std::vector<int64_t> shape, double eps, bool affine, bool has_bias)
    : normalized_shape(std::move(shape)),
      eps(eps),
      elementwise_affine(affine),
      weight(register_parameter("weight", affine ? foundry::empty(normalized_shape) : Tensor())),
      bias(register_parameter("bias", affine && has_bias ? foundry::empty(normalized_shape) : Tensor())) {
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

std::string LayerNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}", py_tuple(normalized_shape), py_float(eps),
                     py_bool(elementwise_affine));
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, normalized_shape, weight, bias, eps); }

// ---- RMSNorm -----------------------------------------------------------------------------------

RMSNorm::RMSNorm(std::vector<int64_t> shape, std::optional<double> eps, bool affine)
    : normalized_shape(std::move(shape)),
      eps(eps),
      elementwise_affine(affine),
      weight(register_parameter("weight", affine ? foundry::empty(normalized_shape) : Tensor())) {
  reset_parameters();
}

void RMSNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
}

std::string RMSNorm::extra_repr() const {
  return fmt::format("{}, eps={}, elementwise_affine={}", py_tuple(normalized_shape),
                     eps ? py_float(*eps) : std::string("None"), py_bool(elementwise_affine));
}

Tensor RMSNorm::forward(const Tensor& x) { return rms_norm(x, normalized_shape, weight, eps); }

// ---- GroupNorm ---------------------------------------------------------------------------------

GroupNorm::GroupNorm(int64_t groups, int64_t channels, double eps, bool affine)
    : num_groups(groups),
      num_channels(channels),
      eps(eps),
      affine(affine),
      weight(register_parameter("weight", affine ? empty({channels}) : Tensor())),
      bias(register_parameter("bias", affine ? empty({channels}) : Tensor())) {
  FOUNDRY_CHECK_AS(ValueError, groups > 0 && channels % groups == 0, "GroupNorm: num_channels must be divisible by num_groups");
  reset_parameters();
}

void GroupNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

std::string GroupNorm::extra_repr() const {
  return fmt::format("{}, {}, eps={}, affine={}", num_groups, num_channels, py_float(eps), py_bool(affine));
}

Tensor GroupNorm::forward(const Tensor& x) { return group_norm(x, num_groups, weight, bias, eps); }

// ---- BatchNorm ---------------------------------------------------------------------------------

BatchNormBase::BatchNormBase(int64_t n, BatchNormOptions o)
    : num_features(n),
      options(o),
      weight(register_parameter("weight", o.affine ? empty({n}) : Tensor())),
      bias(register_parameter("bias", o.affine ? empty({n}) : Tensor())),
      running_mean(register_buffer("running_mean", o.track_running_stats ? zeros({n}) : Tensor())),
      running_var(register_buffer("running_var", o.track_running_stats ? ones({n}) : Tensor())),
      num_batches_tracked(register_buffer("num_batches_tracked",
                                          o.track_running_stats ? zeros({}, DType::Int64) : Tensor())) {
  reset_parameters();
}

void BatchNormBase::reset_running_stats() {
  if (!options.track_running_stats) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  init::zeros_(num_batches_tracked);
}

void BatchNormBase::reset_parameters() {
  reset_running_stats();
  if (options.affine) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

std::string BatchNormBase::extra_repr() const {
  return fmt::format("{}, eps={}, momentum={}, affine={}, track_running_stats={}", num_features, py_float(options.eps),
                     options.momentum ? py_float(*options.momentum) : std::string("None"), py_bool(options.affine),
                     py_bool(options.track_running_stats));
}

Tensor BatchNormBase::forward(const Tensor& x) {
  check_input_dim(x);
  double factor = options.momentum.value_or(0.0);
  if (training_ && options.track_running_stats && num_batches_tracked.defined()) {
    autograd::NoGradGuard no_grad;
    const int64_t n = num_batches_tracked.item<int64_t>() + 1;
    num_batches_tracked.fill_(n);
    if (!options.momentum) factor = 1.0 / double(n);
  }
  const bool bn_training = training_ || (!running_mean.defined() && !running_var.defined());
  const bool use_running = !training_ || options.track_running_stats;
  return batch_norm(x, use_running ? running_mean : Tensor(), use_running ? running_var : Tensor(), weight, bias,
                    bn_training, factor, options.eps);
}

void BatchNorm1d::check_input_dim(const Tensor& x) const {
  if (x.dim() != 2 && x.dim() != 3) raise<ValueError>("expected 2D or 3D input (got {}D input)", x.dim());
}

void BatchNorm2d::check_input_dim(const Tensor& x) const {
  if (x.dim() != 4) raise<ValueError>("expected 4D input (got {}D input)", x.dim());
}

}  // namespace foundry::nn
