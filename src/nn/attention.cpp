// MultiheadAttention (F.multi_head_attention_forward of torch 1.13) and the Transformer layers.
#include "foundry/nn/attention.h"

#include <cmath>
#include <limits>

#include "foundry/nn/init.h"
#include "foundry/ops/ops.h"

namespace foundry::nn {

namespace {
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// nn.MultiheadAttention's masks as additive float masks: a bool True (not allowed) becomes -inf.
Tensor additive_mask(const Tensor& m, DType dtype, const char* what) {
  if (!m.defined()) return m;
  if (m.dtype() == DType::Bool || m.dtype() == DType::UInt8)
    return masked_fill(zeros(m.sizes(), dtype), m.to(DType::Bool), kNegInf);
  FOUNDRY_CHECK_AS(TypeError, m.is_floating_point(), "MultiheadAttention: only bool and floating types of {} are supported, got {}",
                   what, dtype_name(m.dtype()));
  return m.to(dtype);
}

Tensor add_masks(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return a + b;
}
}  // namespace

// ---- MultiheadAttention ------------------------------------------------------------------------

MultiheadAttention::MultiheadAttention(int64_t E, int64_t H, MultiheadAttentionOptions o)
    : embed_dim(E),
      num_heads(H),
      head_dim(H > 0 ? E / H : 0),
      kdim(o.kdim.value_or(E)),
      vdim(o.vdim.value_or(E)),
      options(o),
      in_proj_weight(register_parameter("in_proj_weight", kdim == E && vdim == E ? empty({3 * E, E}) : Tensor())),
      q_proj_weight(register_parameter("q_proj_weight", kdim == E && vdim == E ? Tensor() : empty({E, E}))),
      k_proj_weight(register_parameter("k_proj_weight", kdim == E && vdim == E ? Tensor() : empty({E, kdim}))),
      v_proj_weight(register_parameter("v_proj_weight", kdim == E && vdim == E ? Tensor() : empty({E, vdim}))),
      in_proj_bias(register_parameter("in_proj_bias", o.bias ? empty({3 * E}) : Tensor())),
      bias_k(register_parameter("bias_k", o.add_bias_kv ? empty({1, 1, E}) : Tensor())),
      bias_v(register_parameter("bias_v", o.add_bias_kv ? empty({1, 1, E}) : Tensor())) {
  FOUNDRY_CHECK_AS(ValueError, H > 0 && E % H == 0, "MultiheadAttention: embed_dim ({}) must be divisible by num_heads ({})",
                   E, H);
  out_proj = register_module("out_proj", std::make_shared<NonDynamicallyQuantizableLinear>(E, E, o.bias));
  reset_parameters();
}

void MultiheadAttention::reset_parameters() {
  if (in_proj_weight.defined()) {
    init::xavier_uniform_(in_proj_weight);
  } else {
    init::xavier_uniform_(q_proj_weight);
    init::xavier_uniform_(k_proj_weight);
    init::xavier_uniform_(v_proj_weight);
  }
  if (in_proj_bias.defined()) {
    init::zeros_(in_proj_bias);
    init::zeros_(out_proj->bias);
  }
  if (bias_k.defined()) init::xavier_normal_(bias_k);
  if (bias_v.defined()) init::xavier_normal_(bias_v);
}

std::tuple<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                                       const Tensor& key_padding_mask, bool need_weights,
                                                       const Tensor& attn_mask, bool average_attn_weights) {
  const bool batched = query.dim() == 3;
  FOUNDRY_CHECK_AS(ValueError, query.dim() == 3 || query.dim() == 2,
                   "MultiheadAttention: query should be unbatched 2D or batched 3D, got {}", shape_str(query.sizes()));
  FOUNDRY_CHECK_AS(ValueError, key.dim() == query.dim() && value.dim() == query.dim(),
                   "MultiheadAttention: query {}, key {} and value {} must all be {}-D", shape_str(query.sizes()),
                   shape_str(key.sizes()), shape_str(value.sizes()), query.dim());
  if (key_padding_mask.defined())
    FOUNDRY_CHECK_AS(ValueError, key_padding_mask.dim() == (batched ? 2 : 1),
                     "MultiheadAttention: key_padding_mask should be {}-D for {} input, got {}", batched ? 2 : 1,
                     batched ? "batched" : "unbatched", shape_str(key_padding_mask.sizes()));
  const bool self_attention = query.is_same(key) && key.is_same(value);

  Tensor q_in = query, k_in = key, v_in = value, kpm = key_padding_mask;
  if (batched && options.batch_first) {
    q_in = q_in.transpose(0, 1);
    k_in = self_attention ? q_in : k_in.transpose(0, 1);
    v_in = self_attention ? q_in : v_in.transpose(0, 1);
  }
  if (!batched) {
    q_in = q_in.unsqueeze(1);
    k_in = k_in.unsqueeze(1);
    v_in = v_in.unsqueeze(1);
    if (kpm.defined()) kpm = kpm.unsqueeze(0);
  }
  const int64_t L = q_in.size(0), N = q_in.size(1), H = num_heads, hd = head_dim;
  FOUNDRY_CHECK_AS(ValueError, q_in.size(2) == embed_dim, "MultiheadAttention: was expecting embedding dimension of {}, but got {}",
                   embed_dim, q_in.size(2));
  FOUNDRY_CHECK_AS(ValueError, k_in.size(0) == v_in.size(0) && k_in.size(1) == N && v_in.size(1) == N,
                   "MultiheadAttention: key {} and value {} do not match query {} in sequence/batch dims",
                   shape_str(key.sizes()), shape_str(value.sizes()), shape_str(query.sizes()));

  // Input projections.
  Tensor q, k, v;
  if (in_proj_weight.defined()) {
    if (self_attention) {
      std::vector<Tensor> qkv = chunk(linear(q_in, in_proj_weight, in_proj_bias), 3, -1);
      q = qkv[0], k = qkv[1], v = qkv[2];
    } else {
      std::vector<Tensor> w = chunk(in_proj_weight, 3, 0);
      std::vector<Tensor> b = in_proj_bias.defined() ? chunk(in_proj_bias, 3, 0) : std::vector<Tensor>(3);
      q = linear(q_in, w[0], b[0]);
      k = linear(k_in, w[1], b[1]);
      v = linear(v_in, w[2], b[2]);
    }
  } else {
    std::vector<Tensor> b = in_proj_bias.defined() ? chunk(in_proj_bias, 3, 0) : std::vector<Tensor>(3);
    q = linear(q_in, q_proj_weight, b[0]);
    k = linear(k_in, k_proj_weight, b[1]);
    v = linear(v_in, v_proj_weight, b[2]);
  }
  const DType dt = q.dtype();

  // Masks, as additive float masks of [1 or N*H, L, S] and [N, S].
  Tensor am = additive_mask(attn_mask, dt, "attn_mask");
  if (am.defined()) {
    const int64_t S0 = k_in.size(0);
    if (am.dim() == 2) {
      FOUNDRY_CHECK_AS(ValueError, am.size(0) == L && am.size(1) == S0,
                       "MultiheadAttention: the shape of the 2D attn_mask is {}, but should be [{}, {}]",
                       shape_str(attn_mask.sizes()), L, S0);
      am = am.unsqueeze(0);
    } else {
      FOUNDRY_CHECK_AS(ValueError, am.dim() == 3 && am.size(0) == N * H && am.size(1) == L && am.size(2) == S0,
                       "MultiheadAttention: the shape of the 3D attn_mask is {}, but should be [{}, {}, {}]",
                       shape_str(attn_mask.sizes()), N * H, L, S0);
    }
  }
  Tensor km = additive_mask(kpm, dt, "key_padding_mask");
  if (bias_k.defined()) {
    k = cat({k, repeat(bias_k, {1, N, 1})});
    v = cat({v, repeat(bias_v, {1, N, 1})});
    if (am.defined()) am = pad(am, {0, 1});
    if (km.defined()) km = pad(km, {0, 1});
  }
  q = q.contiguous().view({L, N * H, hd}).transpose(0, 1);
  k = k.contiguous().view({k.size(0), N * H, hd}).transpose(0, 1);
  v = v.contiguous().view({v.size(0), N * H, hd}).transpose(0, 1);
  if (options.add_zero_attn) {
    k = cat({k, zeros({N * H, 1, hd}, dt)}, 1);
    v = cat({v, zeros({N * H, 1, hd}, dt)}, 1);
    if (am.defined()) am = pad(am, {0, 1});
    if (km.defined()) km = pad(km, {0, 1});
  }
  const int64_t S = k.size(1);
  if (km.defined()) {
    FOUNDRY_CHECK_AS(ValueError, km.size(0) == N && km.size(1) == S,
                     "MultiheadAttention: expecting key_padding_mask shape of [{}, {}], but got {}", N, S,
                     shape_str(key_padding_mask.sizes()));
    km = km.view({N, 1, 1, S}).expand({N, H, 1, S}).reshape({N * H, 1, S});
  }
  Tensor mask = add_masks(am, km);
  const double p = training_ ? options.dropout : 0.0;

  Tensor out, weights;
  if (need_weights) {
    Tensor scores = matmul(q * (1.0 / std::sqrt(double(hd))), k.transpose(-2, -1));
    if (mask.defined()) scores = scores + mask;
    weights = softmax(scores, -1);
    out = matmul(p > 0.0 ? dropout(weights, p, true) : weights, v);
  } else {
    out = scaled_dot_product_attention(q, k, v, mask, p);
  }
  out = out.transpose(0, 1).contiguous().view({L * N, embed_dim});
  out = linear(out, out_proj->weight, out_proj->bias).view({L, N, embed_dim});

  if (need_weights) {
    weights = weights.view({N, H, L, S});
    if (average_attn_weights) weights = sum(weights, 1) / double(H);
  }
  if (!batched) {
    out = out.squeeze(1);
    if (weights.defined()) weights = weights.squeeze(0);
  } else if (options.batch_first) {
    out = out.transpose(0, 1);
  }
  return {out, weights};
}

// ---- Transformer layers ------------------------------------------------------------------------

namespace {
std::function<Tensor(const Tensor&)> activation_of(const TransformerLayerOptions& o) {
  if (o.activation_fn) return o.activation_fn;
  if (o.activation == "relu") return [](const Tensor& x) { return relu(x); };
  if (o.activation == "gelu") return [](const Tensor& x) { return gelu(x); };
  raise<ValueError>("activation should be relu/gelu, not {}", o.activation);
}

void check_kpm(const Tensor& m) {
  if (m.defined())
    FOUNDRY_CHECK_AS(TypeError, m.dtype() == DType::Bool || m.is_floating_point(),
                     "only bool and floating types of key_padding_mask are supported, got {}", dtype_name(m.dtype()));
}
}  // namespace

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d, int64_t nhead, TransformerLayerOptions o)
    : options(std::move(o)), act_(activation_of(options)) {
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(
                                               d, nhead, MultiheadAttentionOptions{.dropout = options.dropout,
                                                                                   .batch_first = options.batch_first}));
  linear1 = register_module("linear1", std::make_shared<Linear>(d, options.dim_feedforward));
  dropout = register_module("dropout", std::make_shared<Dropout>(options.dropout));
  linear2 = register_module("linear2", std::make_shared<Linear>(options.dim_feedforward, d));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(d, options.layer_norm_eps));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(d, options.layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(options.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(options.dropout));
}

Tensor TransformerEncoderLayer::sa_block(const Tensor& x, const Tensor& mask, const Tensor& kpm) {
  return dropout1->forward(std::get<0>(self_attn->forward(x, x, x, kpm, false, mask)));
}

Tensor TransformerEncoderLayer::ff_block(const Tensor& x) {
  return dropout2->forward(linear2->forward(dropout->forward(act_(linear1->forward(x)))));
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const Tensor& src_mask, const Tensor& kpm) {
  check_kpm(kpm);
  Tensor x = src;
  if (options.norm_first) {
    x = x + sa_block(norm1->forward(x), src_mask, kpm);
    x = x + ff_block(norm2->forward(x));
  } else {
    x = norm1->forward(x + sa_block(x, src_mask, kpm));
    x = norm2->forward(x + ff_block(x));
  }
  return x;
}

TransformerDecoderLayer::TransformerDecoderLayer(int64_t d, int64_t nhead, TransformerLayerOptions o)
    : options(std::move(o)), act_(activation_of(options)) {
  const MultiheadAttentionOptions mo{.dropout = options.dropout, .batch_first = options.batch_first};
  self_attn = register_module("self_attn", std::make_shared<MultiheadAttention>(d, nhead, mo));
  multihead_attn = register_module("multihead_attn", std::make_shared<MultiheadAttention>(d, nhead, mo));
  linear1 = register_module("linear1", std::make_shared<Linear>(d, options.dim_feedforward));
  dropout = register_module("dropout", std::make_shared<Dropout>(options.dropout));
  linear2 = register_module("linear2", std::make_shared<Linear>(options.dim_feedforward, d));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(d, options.layer_norm_eps));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(d, options.layer_norm_eps));
  norm3 = register_module("norm3", std::make_shared<LayerNorm>(d, options.layer_norm_eps));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(options.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(options.dropout));
  dropout3 = register_module("dropout3", std::make_shared<Dropout>(options.dropout));
}

Tensor TransformerDecoderLayer::sa_block(const Tensor& x, const Tensor& mask, const Tensor& kpm) {
  return dropout1->forward(std::get<0>(self_attn->forward(x, x, x, kpm, false, mask)));
}

Tensor TransformerDecoderLayer::mha_block(const Tensor& x, const Tensor& mem, const Tensor& mask, const Tensor& kpm) {
  return dropout2->forward(std::get<0>(multihead_attn->forward(x, mem, mem, kpm, false, mask)));
}

Tensor TransformerDecoderLayer::ff_block(const Tensor& x) {
  return dropout3->forward(linear2->forward(dropout->forward(act_(linear1->forward(x)))));
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const Tensor& tgt_mask,
                                        const Tensor& memory_mask, const Tensor& tgt_kpm, const Tensor& memory_kpm) {
  check_kpm(tgt_kpm);
  check_kpm(memory_kpm);
  Tensor x = tgt;
  if (options.norm_first) {
    x = x + sa_block(norm1->forward(x), tgt_mask, tgt_kpm);
    x = x + mha_block(norm2->forward(x), memory, memory_mask, memory_kpm);
    x = x + ff_block(norm3->forward(x));
  } else {
    x = norm1->forward(x + sa_block(x, tgt_mask, tgt_kpm));
    x = norm2->forward(x + mha_block(x, memory, memory_mask, memory_kpm));
    x = norm3->forward(x + ff_block(x));
  }
  return x;
}

Tensor generate_square_subsequent_mask(int64_t sz, DType dtype) {
  return triu(full({sz, sz}, kNegInf, dtype), 1);
}

}  // namespace foundry::nn
