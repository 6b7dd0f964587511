// GPTNeoXForCausalLM (HF v4.40): LayerNorm blocks with a fused per-head qkv projection ([H, 3, D]
// rows), rotary embeddings on the first rotary_pct of each head, parallel (x + attn(ln1 x) +
// mlp(ln2 x)) or sequential residuals, untied `embed_out` head.
#include "foundry/autograd/grad_mode.h"
#include "foundry/ops/ops.h"
#include "models/hf/common.h"

namespace foundry::models::hf {

namespace {

struct NeoXLayer {
  Tensor ln1_w, ln1_b, ln2_w, ln2_b, qkv_w, qkv_b, dense_w, dense_b, up_w, up_b, down_w, down_b;
};

class GPTNeoX : public CausalLM {
 public:
  GPTNeoX(const ModelConfig& c, const WeightFn& w, bool parallel, int64_t rot_dim, std::string act)
      : parallel_(parallel), rot_dim_(rot_dim), act_(std::move(act)) {
    config_ = c;
    const int64_t C = c.hidden_size, F = c.intermediate_size;
    auto take = [&](const std::string& name, const Shape& shape) { return weights_[name] = w(name, shape); };
    embed_ = take("gpt_neox.embed_in.weight", {c.vocab_size, C});
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string p = "gpt_neox.layers." + std::to_string(i) + ".";
      NeoXLayer L;
      L.ln1_w = take(p + "input_layernorm.weight", {C});
      L.ln1_b = take(p + "input_layernorm.bias", {C});
      L.ln2_w = take(p + "post_attention_layernorm.weight", {C});
      L.ln2_b = take(p + "post_attention_layernorm.bias", {C});
      L.qkv_w = take(p + "attention.query_key_value.weight", {3 * C, C});
      L.dense_w = take(p + "attention.dense.weight", {C, C});
      if (c.attention_bias) {
        L.qkv_b = take(p + "attention.query_key_value.bias", {3 * C});
        L.dense_b = take(p + "attention.dense.bias", {C});
      }
      L.up_w = take(p + "mlp.dense_h_to_4h.weight", {F, C});
      L.up_b = take(p + "mlp.dense_h_to_4h.bias", {F});
      L.down_w = take(p + "mlp.dense_4h_to_h.weight", {C, F});
      L.down_b = take(p + "mlp.dense_4h_to_h.bias", {C});
      layers_.push_back(std::move(L));
    }
    lnf_w_ = take("gpt_neox.final_layer_norm.weight", {C});
    lnf_b_ = take("gpt_neox.final_layer_norm.bias", {C});
    head_ = c.tie_word_embeddings ? embed_ : take("embed_out.weight", {c.vocab_size, C});
    dtype_ = embed_.dtype();
  }

  Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) override {
    autograd::NoGradGuard no_grad;
    const ModelConfig& c = config_;
    const auto [B, T, past, mask] = begin_forward(c, input_ids, attention_mask, cache);
    const int64_t C = c.hidden_size, H = c.num_heads, D = c.head_dim;
    auto [cos_t, sin_t] = rope_tables(c, positions_from_mask(mask, T), rot_dim_, dtype_);
    Tensor bias = attention_bias(mask, T, 0, dtype_);
    Tensor h = embedding(input_ids, embed_);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const NeoXLayer& L = layers_[i];
      Tensor x = layer_norm(h, {C}, L.ln1_w, L.ln1_b, c.norm_eps);
      Tensor qkv = proj(x, L.qkv_w, L.qkv_b).reshape({B, T, H, 3 * D}).transpose(1, 2);  // [B, H, T, 3D]
      Tensor q = apply_rope(qkv.narrow(3, 0, D), cos_t, sin_t);
      Tensor k = apply_rope(qkv.narrow(3, D, D), cos_t, sin_t);
      Tensor v = qkv.narrow(3, 2 * D, D);
      if (cache) std::tie(k, v) = cache->append(int64_t(i), k, v);
      Tensor attn = proj(attend(q, k, v, bias), L.dense_w, L.dense_b);
      if (parallel_) {
        Tensor m = layer_norm(h, {C}, L.ln2_w, L.ln2_b, c.norm_eps);
        h = h + attn + proj(activation(act_, proj(m, L.up_w, L.up_b)), L.down_w, L.down_b);
      } else {
        h = h + attn;
        Tensor m = layer_norm(h, {C}, L.ln2_w, L.ln2_b, c.norm_eps);
        h = h + proj(activation(act_, proj(m, L.up_w, L.up_b)), L.down_w, L.down_b);
      }
    }
    h = end_layers(h, cache, T, last_positions);
    return float_logits(proj(layer_norm(h, {C}, lnf_w_, lnf_b_, c.norm_eps), head_));
  }

 private:
  bool parallel_;
  int64_t rot_dim_;
  std::string act_;
  Tensor embed_, lnf_w_, lnf_b_, head_;
  std::vector<NeoXLayer> layers_;
};

}  // namespace

Architecture gpt_neox_architecture() {
  auto parse = [](const json& j, ModelConfig& c) {
    parse_sizes(j, c, "hidden_size", "num_hidden_layers", "num_attention_heads");
    c.intermediate_size = get_int(j, "intermediate_size");
    c.max_positions = get_int(j, "max_position_embeddings", 2048);
    c.norm_eps = get_double(j, "layer_norm_eps", 1e-5);
    c.rope_theta = get_double(j, "rotary_emb_base", 10000.0);
    c.attention_bias = get_bool(j, "attention_bias", true);
    c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", false);
    const std::string act = get_string(j, "hidden_act", "gelu");
    if (!known_activation(act)) unsupported(c, "hidden_act '" + act + "'");
    parse_rope_scaling(j, c, false);
  };
  auto build = [](const ModelConfig& c, const WeightFn& w, const HasWeightFn&) -> std::unique_ptr<CausalLM> {
    json j = json::parse(c.json);
    const int64_t rot = int64_t(double(c.head_dim) * get_double(j, "rotary_pct", 0.25));
    FOUNDRY_CHECK_AS(ValueError, rot > 0 && rot % 2 == 0, "config.json: rotary_pct gives {} rotary dims; need an even number > 0", rot);
    return std::make_unique<GPTNeoX>(c, w, get_bool(j, "use_parallel_residual", true), rot,
                                     get_string(j, "hidden_act", "gelu"));
  };
  return {{"GPTNeoXForCausalLM"}, parse, build};
}

}  // namespace foundry::models::hf
