// torch.nn.init (PyTorch 1.13) over Foundry's random ops.
#include "foundry/nn/init.h"

#include <cmath>

#include "foundry/autograd/grad_mode.h"
#include "foundry/ops/ops.h"

namespace foundry::nn::init {

namespace {

void check_defined(const Tensor& t, const char* fn) {
  FOUNDRY_CHECK_AS(ValueError, t.defined(), "nn.init.{}: the tensor is undefined (None)", fn);
}

// Writes `values` into t in place without recording autograd.
Tensor assign(Tensor t, const Tensor& values) {
  autograd::NoGradGuard no_grad;
  t.copy_(values);
  return t;
}

// Random draws are made in float64 for half-precision targets (PyTorch draws in the target dtype;
// the distribution is the same, the rounding happens on the copy).
DType draw_dtype(const Tensor& t) {
  return t.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
}

int64_t fan(const Tensor& t, const std::string& mode) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  if (mode == "fan_in") return fan_in;
  if (mode == "fan_out") return fan_out;
  raise<ValueError>("nn.init: mode {} not supported, please use one of fan_in, fan_out", mode);
}

}  // namespace

double calculate_gain(const std::string& nl, std::optional<double> param) {
  if (nl == "linear" || nl == "conv1d" || nl == "conv2d" || nl == "conv3d" || nl == "conv_transpose1d" ||
      nl == "conv_transpose2d" || nl == "conv_transpose3d" || nl == "sigmoid")
    return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") {
    double slope = param.value_or(0.01);
    return std::sqrt(2.0 / (1.0 + slope * slope));
  }
  if (nl == "selu") return 3.0 / 4.0;
  raise<ValueError>("nn.init.calculate_gain: unsupported nonlinearity {}", nl);
}

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  check_defined(t, "calculate_fan_in_and_fan_out");
  FOUNDRY_CHECK_AS(ValueError, t.dim() >= 2,
                   "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions (got {})", t.dim());
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

Tensor uniform_(Tensor t, double a, double b, Generator* gen) {
  check_defined(t, "uniform_");
  return assign(t, uniform(a, b, t.sizes(), draw_dtype(t), gen));
}

Tensor normal_(Tensor t, double mean, double std, Generator* gen) {
  check_defined(t, "normal_");
  return assign(t, normal(mean, std, t.sizes(), draw_dtype(t), gen));
}

Tensor trunc_normal_(Tensor t, double mean, double std, double a, double b, Generator* gen) {
  check_defined(t, "trunc_normal_");
  auto norm_cdf = [](double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; };
  const double l = norm_cdf((a - mean) / std), u = norm_cdf((b - mean) / std);
  autograd::NoGradGuard no_grad;
  Tensor v = uniform(2 * l - 1, 2 * u - 1, t.sizes(), DType::Float64, gen);
  v = erfinv(v) * (std * std::sqrt(2.0)) + mean;
  v = clamp(v, a, b);
  return assign(t, v);
}

Tensor constant_(Tensor t, double value) {
  check_defined(t, "constant_");
  autograd::NoGradGuard no_grad;
  t.fill_(value);
  return t;
}

Tensor ones_(Tensor t) { return constant_(std::move(t), 1.0); }
Tensor zeros_(Tensor t) { return constant_(std::move(t), 0.0); }

Tensor eye_(Tensor t) {
  check_defined(t, "eye_");
  FOUNDRY_CHECK_AS(ValueError, t.dim() == 2, "nn.init.eye_: only 2-D tensors are supported, got {} dims", t.dim());
  return assign(t, eye(t.size(0), t.size(1), DType::Float64));
}

Tensor xavier_uniform_(Tensor t, double gain, Generator* gen) {
  check_defined(t, "xavier_uniform_");
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  const double std = gain * std::sqrt(2.0 / double(fan_in + fan_out));
  const double a = std::sqrt(3.0) * std;
  return uniform_(t, -a, a, gen);
}

Tensor xavier_normal_(Tensor t, double gain, Generator* gen) {
  check_defined(t, "xavier_normal_");
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return normal_(t, 0.0, gain * std::sqrt(2.0 / double(fan_in + fan_out)), gen);
}

Tensor kaiming_uniform_(Tensor t, double a, const std::string& mode, const std::string& nonlinearity, Generator* gen) {
  check_defined(t, "kaiming_uniform_");
  if (t.numel() == 0) return t;  // PyTorch warns and leaves empty tensors alone
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(double(fan(t, mode)));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(t, -bound, bound, gen);
}

Tensor kaiming_normal_(Tensor t, double a, const std::string& mode, const std::string& nonlinearity, Generator* gen) {
  check_defined(t, "kaiming_normal_");
  if (t.numel() == 0) return t;
  const double std = calculate_gain(nonlinearity, a) / std::sqrt(double(fan(t, mode)));
  return normal_(t, 0.0, std, gen);
}

Tensor orthogonal_(Tensor t, double gain, Generator* gen) {
  check_defined(t, "orthogonal_");
  FOUNDRY_CHECK_AS(ValueError, t.dim() >= 2, "nn.init.orthogonal_: only tensors with 2 or more dimensions are supported");
  if (t.numel() == 0) return t;
  autograd::NoGradGuard no_grad;
  const int64_t rows = t.size(0), cols = t.numel() / rows;
  Tensor flat = normal(0.0, 1.0, {rows, cols}, DType::Float64, gen);
  if (rows < cols) flat = flat.t();
  auto [q, r] = linalg_qr(flat);
  Tensor d = diagonal(r, 0, -2, -1);
  q = q * sign(d);  // makes the decomposition unique (positive diagonal of r)
  if (rows < cols) q = q.t();
  return assign(t, (q * gain).reshape(t.sizes()));
}

}  // namespace foundry::nn::init
