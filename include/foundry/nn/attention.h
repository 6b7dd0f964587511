// MultiheadAttention and the Transformer encoder/decoder layers (PyTorch 1.13 semantics, parameter
// names and initialisation).
//
// Masks follow nn.MultiheadAttention: in a bool attn_mask or key_padding_mask, True marks a
// position that may NOT be attended (the opposite of scaled_dot_product_attention's bool masks);
// float masks are added to the scores.
#pragma once

#include <functional>
#include <optional>
#include <tuple>

#include "foundry/nn/linear.h"
#include "foundry/nn/norm.h"

namespace foundry::nn {

/// MultiheadAttention's out_proj (PyTorch's class name for it, kept for the printout).
class NonDynamicallyQuantizableLinear : public Linear {
 public:
  using Linear::Linear;
  std::string type_name() const override { return "NonDynamicallyQuantizableLinear"; }
};

struct MultiheadAttentionOptions {
  double dropout = 0.0;  ///< on the attention weights, in training mode
  bool bias = true;
  bool add_bias_kv = false;
  bool add_zero_attn = false;
  std::optional<int64_t> kdim;  ///< key features (default embed_dim)
  std::optional<int64_t> vdim;
  bool batch_first = false;
};

/// Parameters (PyTorch's names and order): in_proj_weight [3E, E] (or q/k/v_proj_weight when
/// kdim/vdim differ from E) ~ xavier_uniform_, in_proj_bias [3E] = 0, bias_k/bias_v [1, 1, E] ~
/// xavier_normal_, out_proj (Linear, bias = 0).
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {});
  std::string type_name() const override { return "MultiheadAttention"; }
  /// Returns (attn_output, attn_weights). Inputs [L, N, E] ([N, L, E] with batch_first) or
  /// unbatched [L, E]. key_padding_mask [N, S]; attn_mask [L, S] or [N * num_heads, L, S].
  /// attn_weights (only with need_weights, else undefined) is [N, L, S] averaged over heads,
  /// or [N, num_heads, L, S].
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const Tensor& key_padding_mask = {}, bool need_weights = true,
                                     const Tensor& attn_mask = {}, bool average_attn_weights = true);
  void reset_parameters();

  const int64_t embed_dim, num_heads, head_dim, kdim, vdim;
  const MultiheadAttentionOptions options;
  Tensor& in_proj_weight;  ///< undefined when kdim/vdim differ from embed_dim
  Tensor& q_proj_weight;   ///< defined only when kdim/vdim differ
  Tensor& k_proj_weight;
  Tensor& v_proj_weight;
  Tensor& in_proj_bias;
  Tensor& bias_k;
  Tensor& bias_v;
  std::shared_ptr<NonDynamicallyQuantizableLinear> out_proj;
};

struct TransformerLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  /// "relu" or "gelu" (a function is used instead when activation_fn is set).
  std::string activation = "relu";
  std::function<Tensor(const Tensor&)> activation_fn;
  double layer_norm_eps = 1e-5;
  bool batch_first = false;
  bool norm_first = false;
};

/// Self-attention then a feed-forward block, each with a residual and LayerNorm (post-norm, or
/// pre-norm with norm_first).
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions options = {});
  std::string type_name() const override { return "TransformerEncoderLayer"; }
  Tensor forward(const Tensor& src) override { return forward(src, Tensor(), Tensor()); }
  Tensor forward(const Tensor& src, const Tensor& src_mask, const Tensor& src_key_padding_mask);

  const TransformerLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1;
  std::shared_ptr<Dropout> dropout;
  std::shared_ptr<Linear> linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Dropout> dropout1, dropout2;

 private:
  Tensor sa_block(const Tensor& x, const Tensor& mask, const Tensor& kpm);
  Tensor ff_block(const Tensor& x);
  std::function<Tensor(const Tensor&)> act_;
};

/// Self-attention, cross-attention over `memory`, then a feed-forward block.
class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(int64_t d_model, int64_t nhead, TransformerLayerOptions options = {});
  std::string type_name() const override { return "TransformerDecoderLayer"; }
  Tensor forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask = {}, const Tensor& memory_mask = {},
                 const Tensor& tgt_key_padding_mask = {}, const Tensor& memory_key_padding_mask = {});
  Tensor operator()(const Tensor& tgt, const Tensor& memory) { return forward(tgt, memory); }

  const TransformerLayerOptions options;
  std::shared_ptr<MultiheadAttention> self_attn, multihead_attn;
  std::shared_ptr<Linear> linear1;
  std::shared_ptr<Dropout> dropout;
  std::shared_ptr<Linear> linear2;
  std::shared_ptr<LayerNorm> norm1, norm2, norm3;
  std::shared_ptr<Dropout> dropout1, dropout2, dropout3;

 private:
  Tensor sa_block(const Tensor& x, const Tensor& mask, const Tensor& kpm);
  Tensor mha_block(const Tensor& x, const Tensor& mem, const Tensor& mask, const Tensor& kpm);
  Tensor ff_block(const Tensor& x);
  std::function<Tensor(const Tensor&)> act_;
};

/// A float mask [sz, sz] with -inf above the diagonal (Transformer.generate_square_subsequent_mask).
Tensor generate_square_subsequent_mask(int64_t sz, DType dtype = DType::Float32);

}  // namespace foundry::nn
