// Basic layers: Linear, Bilinear, Identity, Flatten, Unflatten, Embedding, Dropout (PyTorch 1.13
// semantics and default initialisation).
#pragma once

#include <optional>

#include "foundry/nn/module.h"

namespace foundry::nn {

/// y = x W^T + b. weight [out_features, in_features] ~ kaiming_uniform_(a = sqrt(5)), i.e.
/// U(-1/sqrt(in), 1/sqrt(in)); bias ~ U(-1/sqrt(in), 1/sqrt(in)).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  void reset_parameters();

  const int64_t in_features, out_features;
  Tensor& weight;
  Tensor& bias;  ///< undefined when bias = false
};

/// y = x1^T A x2 + b. weight [out, in1, in2] and bias [out] ~ U(-1/sqrt(in1), 1/sqrt(in1)).
class Bilinear : public Module {
 public:
  Bilinear(int64_t in1_features, int64_t in2_features, int64_t out_features, bool bias = true);
  std::string type_name() const override { return "Bilinear"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x1, const Tensor& x2);
  Tensor operator()(const Tensor& x1, const Tensor& x2) { return forward(x1, x2); }
  void reset_parameters();

  const int64_t in1_features, in2_features, out_features;
  Tensor& weight;
  Tensor& bias;
};

/// Returns its input.
class Identity : public Module {
 public:
  Identity() = default;
  std::string type_name() const override { return "Identity"; }
  Tensor forward(const Tensor& x) override { return x; }
};

/// Flattens dims start_dim..end_dim.
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}
  std::string type_name() const override { return "Flatten"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  const int64_t start_dim, end_dim;
};

/// Splits dim into the given sizes.
class Unflatten : public Module {
 public:
  Unflatten(int64_t dim, std::vector<int64_t> unflattened_size) : dim(dim), unflattened_size(std::move(unflattened_size)) {}
  std::string type_name() const override { return "Unflatten"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  const int64_t dim;
  const std::vector<int64_t> unflattened_size;
};

struct EmbeddingOptions {
  /// Row that gets no gradient and is initialised to zeros; negative counts from the end.
  std::optional<int64_t> padding_idx;
  /// Rows looked up with a larger norm are renormalised to max_norm in place (under no_grad).
  std::optional<double> max_norm;
  double norm_type = 2.0;
  bool scale_grad_by_freq = false;
  bool sparse = false;  ///< sparse gradients are not supported (throws if true)
};

/// A lookup table. weight [num_embeddings, embedding_dim] ~ N(0, 1), the padding_idx row zero.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, EmbeddingOptions options = {});
  /// A table holding `embeddings` (copied); freeze = true turns off its gradient.
  static std::shared_ptr<Embedding> from_pretrained(const Tensor& embeddings, bool freeze = true,
                                                    EmbeddingOptions options = {});
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& indices) override;
  void reset_parameters();

  const int64_t num_embeddings, embedding_dim;
  const EmbeddingOptions options;  ///< padding_idx normalised to [0, num_embeddings)
  Tensor& weight;
};

/// Zeroes elements with probability p in training mode and scales the rest by 1/(1-p).
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, bool inplace = false);
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  const double p;
  const bool inplace;  ///< accepted for the printout; the result is always a new tensor
};

}  // namespace foundry::nn
