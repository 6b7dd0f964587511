// Activation modules: thin wrappers over the ops of the same name, printed as PyTorch prints them.
// `inplace` flags are accepted for the printout; results are always new tensors.
#pragma once

#include <optional>

#include "foundry/nn/module.h"

namespace foundry::nn {

// Activations without arguments.
#define FOUNDRY_NN_SIMPLE_ACTIVATION(Name)                          \
  class Name : public Module {                                      \
   public:                                                          \
    Name() = default;                                               \
    std::string type_name() const override { return #Name; }        \
    Tensor forward(const Tensor& x) override;                       \
  };
FOUNDRY_NN_SIMPLE_ACTIVATION(Tanh)
FOUNDRY_NN_SIMPLE_ACTIVATION(Sigmoid)
FOUNDRY_NN_SIMPLE_ACTIVATION(Softsign)
FOUNDRY_NN_SIMPLE_ACTIVATION(Mish)
FOUNDRY_NN_SIMPLE_ACTIVATION(LogSigmoid)
#undef FOUNDRY_NN_SIMPLE_ACTIVATION

// Activations whose only argument is `inplace` (printed as "inplace=True" when set).
#define FOUNDRY_NN_INPLACE_ACTIVATION(Name)                                           \
  class Name : public Module {                                                        \
   public:                                                                            \
    explicit Name(bool inplace = false) : inplace(inplace) {}                         \
    std::string type_name() const override { return #Name; }                          \
    std::string extra_repr() const override { return inplace ? "inplace=True" : ""; } \
    Tensor forward(const Tensor& x) override;                                         \
    const bool inplace;                                                               \
  };
FOUNDRY_NN_INPLACE_ACTIVATION(ReLU)
FOUNDRY_NN_INPLACE_ACTIVATION(ReLU6)
FOUNDRY_NN_INPLACE_ACTIVATION(SiLU)
FOUNDRY_NN_INPLACE_ACTIVATION(SELU)
FOUNDRY_NN_INPLACE_ACTIVATION(Hardsigmoid)
FOUNDRY_NN_INPLACE_ACTIVATION(Hardswish)
#undef FOUNDRY_NN_INPLACE_ACTIVATION

/// approximate: "none" (erf) or "tanh".
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  std::string type_name() const override { return "GELU"; }
  std::string extra_repr() const override { return "approximate='" + approximate + "'"; }
  Tensor forward(const Tensor& x) override;
  const std::string approximate;
};

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01, bool inplace = false) : negative_slope(negative_slope), inplace(inplace) {}
  std::string type_name() const override { return "LeakyReLU"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  const double negative_slope;
  const bool inplace;
};

class ELU : public Module {
 public:
  explicit ELU(double alpha = 1.0, bool inplace = false) : alpha(alpha), inplace(inplace) {}
  std::string type_name() const override { return "ELU"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  const double alpha;
  const bool inplace;
};

class CELU : public Module {
 public:
  explicit CELU(double alpha = 1.0, bool inplace = false) : alpha(alpha), inplace(inplace) {}
  std::string type_name() const override { return "CELU"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  const double alpha;
  const bool inplace;
};

class Softplus : public Module {
 public:
  explicit Softplus(double beta = 1.0, double threshold = 20.0) : beta(beta), threshold(threshold) {}
  std::string type_name() const override { return "Softplus"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  const double beta, threshold;
};

class Hardtanh : public Module {
 public:
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0, bool inplace = false);
  std::string type_name() const override { return "Hardtanh"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  const double min_val, max_val;
  const bool inplace;
};

/// dim = nullopt picks PyTorch's legacy dim (0 for 0-, 1- and 3-D inputs, else 1).
class Softmax : public Module {
 public:
  explicit Softmax(std::optional<int64_t> dim = std::nullopt) : dim(dim) {}
  std::string type_name() const override { return "Softmax"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  const std::optional<int64_t> dim;
};

class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(std::optional<int64_t> dim = std::nullopt) : dim(dim) {}
  std::string type_name() const override { return "LogSoftmax"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  const std::optional<int64_t> dim;
};

/// An activation by name ("relu", "gelu", "tanh", ... as nn.<Name> lower-cased, e.g. "leakyrelu");
/// throws ValueError for unknown names.
std::shared_ptr<Module> make_activation(const std::string& name);

}  // namespace foundry::nn
