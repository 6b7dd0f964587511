// Activation modules (torch/nn/modules/activation.py, 1.13).
#include "foundry/nn/activation.h"

#include <algorithm>
#include <cctype>

#include "foundry/nn/linear.h"
#include "foundry/ops/ops.h"

namespace foundry::nn {

namespace {
// Softplus prints its arguments as the ints PyTorch's defaults are ("beta=1, threshold=20").
std::string py_number(double v) {
  if (v == double(int64_t(v))) return std::to_string(int64_t(v));
  return py_float(v);
}
std::string with_inplace(std::string s, bool inplace) { return inplace ? s + ", inplace=True" : s; }
int64_t legacy_softmax_dim(int64_t ndim) { return (ndim == 0 || ndim == 1 || ndim == 3) ? 0 : 1; }
}  // namespace

Tensor Tanh::forward(const Tensor& x) { return tanh(x); }
Tensor Sigmoid::forward(const Tensor& x) { return sigmoid(x); }
Tensor Softsign::forward(const Tensor& x) { return softsign(x); }
Tensor Mish::forward(const Tensor& x) { return mish(x); }
Tensor LogSigmoid::forward(const Tensor& x) { return logsigmoid(x); }
Tensor ReLU::forward(const Tensor& x) { return relu(x); }
Tensor ReLU6::forward(const Tensor& x) { return relu6(x); }
Tensor SiLU::forward(const Tensor& x) { return silu(x); }
Tensor SELU::forward(const Tensor& x) { return selu(x); }
Tensor Hardsigmoid::forward(const Tensor& x) { return hardsigmoid(x); }
Tensor Hardswish::forward(const Tensor& x) { return hardswish(x); }

GELU::GELU(std::string approximate) : approximate(std::move(approximate)) {
  FOUNDRY_CHECK_AS(ValueError, this->approximate == "none" || this->approximate == "tanh",
                   "GELU: approximate must be 'none' or 'tanh', got '{}'", this->approximate);
}
Tensor GELU::forward(const Tensor& x) { return gelu(x, approximate); }

std::string LeakyReLU::extra_repr() const { return with_inplace("negative_slope=" + py_float(negative_slope), inplace); }
Tensor LeakyReLU::forward(const Tensor& x) { return leaky_relu(x, negative_slope); }

std::string ELU::extra_repr() const { return with_inplace("alpha=" + py_float(alpha), inplace); }
Tensor ELU::forward(const Tensor& x) { return elu(x, alpha); }

std::string CELU::extra_repr() const { return with_inplace("alpha=" + py_float(alpha), inplace); }
Tensor CELU::forward(const Tensor& x) { return celu(x, alpha); }

std::string Softplus::extra_repr() const {
  return "beta=" + py_number(beta) + ", threshold=" + py_number(threshold);
}
Tensor Softplus::forward(const Tensor& x) { return softplus(x, beta, threshold); }

Hardtanh::Hardtanh(double min_val, double max_val, bool inplace) : min_val(min_val), max_val(max_val), inplace(inplace) {
  FOUNDRY_CHECK_AS(ValueError, max_val > min_val, "Hardtanh: max_val ({}) must be greater than min_val ({})", max_val,
                   min_val);
}
std::string Hardtanh::extra_repr() const {
  return with_inplace("min_val=" + py_float(min_val) + ", max_val=" + py_float(max_val), inplace);
}
Tensor Hardtanh::forward(const Tensor& x) { return hardtanh(x, min_val, max_val); }

std::string Softmax::extra_repr() const { return "dim=" + (dim ? std::to_string(*dim) : std::string("None")); }
Tensor Softmax::forward(const Tensor& x) { return softmax(x, dim.value_or(legacy_softmax_dim(x.dim()))); }

std::string LogSoftmax::extra_repr() const { return "dim=" + (dim ? std::to_string(*dim) : std::string("None")); }
Tensor LogSoftmax::forward(const Tensor& x) { return log_softmax(x, dim.value_or(legacy_softmax_dim(x.dim()))); }

std::shared_ptr<Module> make_activation(const std::string& name) {
  std::string n = name;
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (n == "relu") return std::make_shared<ReLU>();
  if (n == "relu6") return std::make_shared<ReLU6>();
  if (n == "gelu") return std::make_shared<GELU>();
  if (n == "gelu_tanh" || n == "gelu_new" || n == "gelu_pytorch_tanh") return std::make_shared<GELU>("tanh");
  if (n == "silu" || n == "swish") return std::make_shared<SiLU>();
  if (n == "tanh") return std::make_shared<Tanh>();
  if (n == "sigmoid") return std::make_shared<Sigmoid>();
  if (n == "leakyrelu" || n == "leaky_relu") return std::make_shared<LeakyReLU>();
  if (n == "elu") return std::make_shared<ELU>();
  if (n == "selu") return std::make_shared<SELU>();
  if (n == "celu") return std::make_shared<CELU>();
  if (n == "softplus") return std::make_shared<Softplus>();
  if (n == "softsign") return std::make_shared<Softsign>();
  if (n == "hardtanh") return std::make_shared<Hardtanh>();
  if (n == "hardsigmoid") return std::make_shared<Hardsigmoid>();
  if (n == "hardswish") return std::make_shared<Hardswish>();
  if (n == "mish") return std::make_shared<Mish>();
  if (n == "logsigmoid") return std::make_shared<LogSigmoid>();
  if (n == "identity" || n == "linear") return std::make_shared<Identity>();
  raise<ValueError>("unknown activation '{}'", name);
}

}  // namespace foundry::nn
