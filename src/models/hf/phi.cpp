// PhiForCausalLM (HF v4.40): one LayerNorm per block feeding attention and MLP in parallel
// (h + attn(ln x) + mlp(ln x)), rotary embeddings on the first partial_rotary_factor of each head,
// biased projections, a final LayerNorm and an LM head with bias.
#include "foundry/autograd/grad_mode.h"
#include "foundry/ops/ops.h"
#include "models/hf/common.h"

namespace foundry::models::hf {

namespace {

struct PhiLayer {
  Tensor ln_w, ln_b, wq, bq, wk, bk, wv, bv, wo, bo, fc1_w, fc1_b, fc2_w, fc2_b;
};

class Phi : public CausalLM {
 public:
  Phi(const ModelConfig& c, const WeightFn& w, int64_t rot_dim, std::string act) : rot_dim_(rot_dim), act_(std::move(act)) {
    config_ = c;
    const int64_t C = c.hidden_size, F = c.intermediate_size, H = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim;
    auto take = [&](const std::string& name, const Shape& shape) { return weights_[name] = w(name, shape); };
    embed_ = take("model.embed_tokens.weight", {c.vocab_size, C});
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      PhiLayer L;
      L.ln_w = take(p + "input_layernorm.weight", {C});
      L.ln_b = take(p + "input_layernorm.bias", {C});
      L.wq = take(p + "self_attn.q_proj.weight", {H * D, C});
      L.bq = take(p + "self_attn.q_proj.bias", {H * D});
      L.wk = take(p + "self_attn.k_proj.weight", {Hkv * D, C});
      L.bk = take(p + "self_attn.k_proj.bias", {Hkv * D});
      L.wv = take(p + "self_attn.v_proj.weight", {Hkv * D, C});
      L.bv = take(p + "self_attn.v_proj.bias", {Hkv * D});
      L.wo = take(p + "self_attn.dense.weight", {C, H * D});
      L.bo = take(p + "self_attn.dense.bias", {C});
      L.fc1_w = take(p + "mlp.fc1.weight", {F, C});
      L.fc1_b = take(p + "mlp.fc1.bias", {F});
      L.fc2_w = take(p + "mlp.fc2.weight", {C, F});
      L.fc2_b = take(p + "mlp.fc2.bias", {C});
      layers_.push_back(std::move(L));
    }
    lnf_w_ = take("model.final_layernorm.weight", {C});
    lnf_b_ = take("model.final_layernorm.bias", {C});
    head_w_ = take("lm_head.weight", {c.vocab_size, C});
    head_b_ = take("lm_head.bias", {c.vocab_size});
    dtype_ = embed_.dtype();
  }

  Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) override {
    autograd::NoGradGuard no_grad;
    const ModelConfig& c = config_;
    const auto [B, T, past, mask] = begin_forward(c, input_ids, attention_mask, cache);
    const int64_t C = c.hidden_size;
    auto [cos_t, sin_t] = rope_tables(c, positions_from_mask(mask, T), rot_dim_, dtype_);
    Tensor bias = attention_bias(mask, T, 0, dtype_);
    Tensor h = embedding(input_ids, embed_);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const PhiLayer& L = layers_[i];
      Tensor x = layer_norm(h, {C}, L.ln_w, L.ln_b, c.norm_eps);
      Tensor q = apply_rope(split_heads(proj(x, L.wq, L.bq), c.num_heads), cos_t, sin_t);
      Tensor k = apply_rope(split_heads(proj(x, L.wk, L.bk), c.num_kv_heads), cos_t, sin_t);
      Tensor v = split_heads(proj(x, L.wv, L.bv), c.num_kv_heads);
      if (cache) std::tie(k, v) = cache->append(int64_t(i), k, v);
      Tensor attn = proj(attend(q, k, v, bias), L.wo, L.bo);
      h = h + attn + proj(activation(act_, proj(x, L.fc1_w, L.fc1_b)), L.fc2_w, L.fc2_b);
    }
    h = end_layers(h, cache, T, last_positions);
    return float_logits(proj(layer_norm(h, {C}, lnf_w_, lnf_b_, c.norm_eps), head_w_, head_b_));
  }

 private:
  int64_t rot_dim_;
  std::string act_;
  Tensor embed_, lnf_w_, lnf_b_, head_w_, head_b_;
  std::vector<PhiLayer> layers_;
};

}  // namespace

Architecture phi_architecture() {
  auto parse = [](const json& j, ModelConfig& c) {
    parse_sizes(j, c, "hidden_size", "num_hidden_layers", "num_attention_heads");
    c.num_kv_heads = get_int(j, "num_key_value_heads", c.num_heads);
    c.intermediate_size = get_int(j, "intermediate_size");
    c.max_positions = get_int(j, "max_position_embeddings", 2048);
    c.norm_eps = get_double(j, "layer_norm_eps", 1e-5);
    c.rope_theta = get_double(j, "rope_theta", 10000.0);
    if (get_bool(j, "qk_layernorm", false)) unsupported(c, "qk_layernorm = true");
    if (get_bool(j, "tie_word_embeddings", false)) unsupported(c, "tie_word_embeddings = true");
    const std::string act = get_string(j, "hidden_act", "gelu_new");
    if (!known_activation(act)) unsupported(c, "hidden_act '" + act + "'");
    parse_rope_scaling(j, c, false);
  };
  auto build = [](const ModelConfig& c, const WeightFn& w, const HasWeightFn&) -> std::unique_ptr<CausalLM> {
    json j = json::parse(c.json);
    const int64_t rot = int64_t(double(c.head_dim) * get_double(j, "partial_rotary_factor", 0.5));
    FOUNDRY_CHECK_AS(ValueError, rot > 0 && rot % 2 == 0,
                     "config.json: partial_rotary_factor gives {} rotary dims; need an even number > 0", rot);
    return std::make_unique<Phi>(c, w, rot, get_string(j, "hidden_act", "gelu_new"));
  };
  return {{"PhiForCausalLM"}, parse, build};
}

}  // namespace foundry::models::hf
