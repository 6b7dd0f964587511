// BloomForCausalLM (HF v4.40): ALiBi instead of positions, a LayerNorm right after the embedding,
// a fused per-head qkv projection ([H, 3, D] rows), GELU-tanh MLP, optional residuals taken after
// the LayerNorm (apply_residual_connection_post_layernorm), LM head tied to the embedding.
#include <cmath>

#include "foundry/autograd/grad_mode.h"
#include "foundry/ops/ops.h"
#include "models/hf/common.h"

namespace foundry::models::hf {

namespace {

struct BloomLayer {
  Tensor ln1_w, ln1_b, qkv_w, qkv_b, dense_w, dense_b, ln2_w, ln2_b, up_w, up_b, down_w, down_b;
};

class Bloom : public CausalLM {
 public:
  Bloom(const ModelConfig& c, const WeightFn& w, bool residual_after_norm) : residual_after_norm_(residual_after_norm) {
    config_ = c;
    const int64_t C = c.hidden_size;
    auto take = [&](const std::string& name, const Shape& shape) {
      return weights_["transformer." + name] = w("transformer." + name, shape);
    };
    embed_ = take("word_embeddings.weight", {c.vocab_size, C});
    eln_w_ = take("word_embeddings_layernorm.weight", {C});
    eln_b_ = take("word_embeddings_layernorm.bias", {C});
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string p = "h." + std::to_string(i) + ".";
      BloomLayer L;
      L.ln1_w = take(p + "input_layernorm.weight", {C});
      L.ln1_b = take(p + "input_layernorm.bias", {C});
      L.qkv_w = take(p + "self_attention.query_key_value.weight", {3 * C, C});
      L.qkv_b = take(p + "self_attention.query_key_value.bias", {3 * C});
      L.dense_w = take(p + "self_attention.dense.weight", {C, C});
      L.dense_b = take(p + "self_attention.dense.bias", {C});
      L.ln2_w = take(p + "post_attention_layernorm.weight", {C});
      L.ln2_b = take(p + "post_attention_layernorm.bias", {C});
      L.up_w = take(p + "mlp.dense_h_to_4h.weight", {4 * C, C});
      L.up_b = take(p + "mlp.dense_h_to_4h.bias", {4 * C});
      L.down_w = take(p + "mlp.dense_4h_to_h.weight", {C, 4 * C});
      L.down_b = take(p + "mlp.dense_4h_to_h.bias", {C});
      layers_.push_back(std::move(L));
    }
    lnf_w_ = take("ln_f.weight", {C});
    lnf_b_ = take("ln_f.bias", {C});
    dtype_ = embed_.dtype();
  }

  Tensor ln(const Tensor& x, const Tensor& w, const Tensor& b) const {
    return layer_norm(x, {config_.hidden_size}, w, b, config_.norm_eps);
  }

  Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) override {
    autograd::NoGradGuard no_grad;
    const ModelConfig& c = config_;
    const auto [B, T, past, mask] = begin_forward(c, input_ids, attention_mask, cache);
    const int64_t H = c.num_heads, D = c.head_dim;
    Tensor bias = attention_bias(mask, T, 0, dtype_) + alibi_bias(mask, H, 1.0, dtype_);  // [B, H, T, S]
    Tensor h = ln(embedding(input_ids, embed_), eln_w_, eln_b_);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const BloomLayer& L = layers_[i];
      Tensor x = ln(h, L.ln1_w, L.ln1_b);
      Tensor residual = residual_after_norm_ ? x : h;
      Tensor qkv = proj(x, L.qkv_w, L.qkv_b).reshape({B, T, H, 3 * D}).transpose(1, 2);
      Tensor q = qkv.narrow(3, 0, D), k = qkv.narrow(3, D, D), v = qkv.narrow(3, 2 * D, D);
      if (cache) std::tie(k, v) = cache->append(int64_t(i), k, v);
      h = residual + proj(attend(q, k, v, bias), L.dense_w, L.dense_b);
      x = ln(h, L.ln2_w, L.ln2_b);
      residual = residual_after_norm_ ? x : h;
      h = residual + proj(gelu(proj(x, L.up_w, L.up_b), "tanh"), L.down_w, L.down_b);
    }
    h = end_layers(h, cache, T, last_positions);
    return float_logits(proj(ln(h, lnf_w_, lnf_b_), embed_));
  }

 private:
  bool residual_after_norm_;
  Tensor embed_, eln_w_, eln_b_, lnf_w_, lnf_b_;
  std::vector<BloomLayer> layers_;
};

}  // namespace

Architecture bloom_architecture() {
  auto parse = [](const json& j, ModelConfig& c) {
    // Older BLOOM configs name the width n_embed.
    parse_sizes(j, c, j.contains("hidden_size") ? "hidden_size" : "n_embed", "n_layer", "n_head");
    c.intermediate_size = 4 * c.hidden_size;
    c.norm_eps = get_double(j, "layer_norm_epsilon", 1e-5);
    c.tie_word_embeddings = true;
  };
  auto build = [](const ModelConfig& c, const WeightFn& w, const HasWeightFn&) -> std::unique_ptr<CausalLM> {
    json j = json::parse(c.json);
    return std::make_unique<Bloom>(c, w, get_bool(j, "apply_residual_connection_post_layernorm", false));
  };
  return {{"BloomForCausalLM"}, parse, build};
}

}  // namespace foundry::models::hf
