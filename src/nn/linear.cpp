// Linear, Bilinear, Flatten/Unflatten, Embedding and Dropout.
#include "foundry/nn/linear.h"

#include <algorithm>
#include <cmath>

#include "foundry/autograd/grad_mode.h"
#include "foundry/nn/init.h"
#include "foundry/ops/ops.h"
#include "foundry/ops/registry.h"

namespace foundry::nn {

// ---- Linear ------------------------------------------------------------------------------------

Linear::Linear(int64_t in, int64_t out, bool has_bias)
    : in_features(in),
      out_features(out),
      weight(register_parameter("weight", empty({out, in}))),
      bias(register_parameter("bias", has_bias ? empty({out}) : Tensor())) {
  FOUNDRY_CHECK_AS(ValueError, in >= 0 && out >= 0, "Linear: features must be non-negative, got in={} out={}", in, out);
  reset_parameters();
}

void Linear::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    const double bound = fan_in > 0 ? 1.0 / std::sqrt(double(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

std::string Linear::extra_repr() const {
  return fmt::format("in_features={}, out_features={}, bias={}", in_features, out_features, py_bool(bias.defined()));
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

// ---- Bilinear ----------------------------------------------------------------------------------

Bilinear::Bilinear(int64_t in1, int64_t in2, int64_t out, bool has_bias)
    : in1_features(in1),
      in2_features(in2),
      out_features(out),
      weight(register_parameter("weight", empty({out, in1, in2}))),
      bias(register_parameter("bias", has_bias ? empty({out}) : Tensor())) {
  reset_parameters();
}

void Bilinear::reset_parameters() {
  const double bound = 1.0 / std::sqrt(double(weight.size(1)));
  init::uniform_(weight, -bound, bound);
  if (bias.defined()) init::uniform_(bias, -bound, bound);
}

std::string Bilinear::extra_repr() const {
  return fmt::format("in1_features={}, in2_features={}, out_features={}, bias={}", in1_features, in2_features,
                     out_features, py_bool(bias.defined()));
}

Tensor Bilinear::forward(const Tensor& x1, const Tensor& x2) {
  FOUNDRY_CHECK_AS(ValueError, x1.dim() >= 1 && x1.size(-1) == in1_features,
                   "Bilinear: input1 of shape {} does not end in in1_features={}", shape_str(x1.sizes()), in1_features);
  FOUNDRY_CHECK_AS(ValueError, x2.dim() >= 1 && x2.size(-1) == in2_features,
                   "Bilinear: input2 of shape {} does not end in in2_features={}", shape_str(x2.sizes()), in2_features);
  FOUNDRY_CHECK_AS(ValueError,
                   x1.dim() == x2.dim() && std::equal(x1.sizes().begin(), x1.sizes().end() - 1, x2.sizes().begin()),
                   "Bilinear: input1 {} and input2 {} must have the same batch dims", shape_str(x1.sizes()),
                   shape_str(x2.sizes()));
  // y[b, o] = sum_ij x1[b, i] W[o, i, j] x2[b, j]: one GEMM x1 @ W(i, o*j), then a reduction over j.
  std::vector<int64_t> batch(x1.sizes().begin(), x1.sizes().end() - 1);
  Tensor a = x1.reshape({-1, in1_features});
  Tensor b = x2.reshape({-1, in2_features});
  Tensor w = weight.permute({1, 0, 2}).reshape({in1_features, out_features * in2_features});
  Tensor t = matmul(a, w).reshape({-1, out_features, in2_features});
  Tensor y = sum(t * b.unsqueeze(1), -1);
  if (bias.defined()) y = y + bias;
  batch.push_back(out_features);
  return y.reshape(batch);
}

// ---- Flatten / Unflatten -----------------------------------------------------------------------

std::string Flatten::extra_repr() const { return fmt::format("start_dim={}, end_dim={}", start_dim, end_dim); }

Tensor Flatten::forward(const Tensor& x) { return flatten(x, start_dim, end_dim); }

std::string Unflatten::extra_repr() const {
  return fmt::format("dim={}, unflattened_size={}", dim, py_tuple(unflattened_size));
}

Tensor Unflatten::forward(const Tensor& x) { return unflatten(x, dim, unflattened_size); }

// ---- Embedding ---------------------------------------------------------------------------------

namespace {
EmbeddingOptions normalise(EmbeddingOptions o, int64_t num_embeddings) {
  if (o.padding_idx) {
    int64_t p = *o.padding_idx;
    FOUNDRY_CHECK_AS(ValueError, p < num_embeddings && p >= -num_embeddings,
                     "Embedding: padding_idx {} must be within num_embeddings ({})", p, num_embeddings);
    if (p < 0) o.padding_idx = p + num_embeddings;
  }
  if (o.sparse) raise<NotImplementedError>("Embedding: sparse gradients are not supported");
  return o;
}
}  // namespace

Embedding::Embedding(int64_t n, int64_t dim, EmbeddingOptions o)
    : num_embeddings(n),
      embedding_dim(dim),
      options(normalise(o, n)),
      weight(register_parameter("weight", empty({n, dim}))) {
  reset_parameters();
}

void Embedding::reset_parameters() {
  init::normal_(weight);
  if (options.padding_idx) {
    autograd::NoGradGuard no_grad;
    Tensor row = weight.select(0, *options.padding_idx);
    row.fill_(0.0);
  }
}

std::shared_ptr<Embedding> Embedding::from_pretrained(const Tensor& embeddings, bool freeze, EmbeddingOptions o) {
  FOUNDRY_CHECK_AS(ValueError, embeddings.dim() == 2, "Embedding.from_pretrained: embeddings must be 2-D, got {}",
                   shape_str(embeddings.sizes()));
  auto m = std::make_shared<Embedding>(embeddings.size(0), embeddings.size(1), o);
  {
    autograd::NoGradGuard no_grad;
    Tensor w = embeddings.detach().to(embeddings.dtype()).clone();
    m->register_parameter("weight", w, !freeze);
  }
  return m;
}

std::string Embedding::extra_repr() const {
  std::string s = fmt::format("{}, {}", num_embeddings, embedding_dim);
  if (options.padding_idx) s += fmt::format(", padding_idx={}", *options.padding_idx);
  if (options.max_norm) s += ", max_norm=" + py_float(*options.max_norm);
  if (options.norm_type != 2.0) s += ", norm_type=" + py_float(options.norm_type);
  if (options.scale_grad_by_freq) s += ", scale_grad_by_freq=True";
  return s;
}

Tensor Embedding::forward(const Tensor& indices) {
  if (options.max_norm) {
    // F.embedding's embedding_renorm_: rows looked up whose norm exceeds max_norm are scaled
    // to max_norm / (norm + 1e-7), in place and outside autograd.
    autograd::NoGradGuard no_grad;
    Tensor idx = std::get<0>(unique(indices.reshape({-1}).to(DType::Int64)));
    Tensor rows = index_select(weight, 0, idx);
    Tensor norms = norm(rows, options.norm_type, 1, true);
    Tensor scale = where(norms > *options.max_norm, wrap_scalar(*options.max_norm) / (norms + 1e-7),
                         ones_like(norms));
    weight.index_put_({idx}, rows * scale);
  }
  return ops::call1(ops::find_op("embedding"), {indices, weight, ops::Value(options.padding_idx), ops::Value(), 2.0,
                                                options.scale_grad_by_freq, false});
}

// ---- Dropout -----------------------------------------------------------------------------------

Dropout::Dropout(double p, bool inplace) : p(p), inplace(inplace) {
  FOUNDRY_CHECK_AS(ValueError, p >= 0.0 && p <= 1.0, "dropout probability has to be between 0 and 1, but got {}", p);
}

std::string Dropout::extra_repr() const { return fmt::format("p={}, inplace={}", py_float(p), py_bool(inplace)); }

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, training_); }

}  // namespace foundry::nn
