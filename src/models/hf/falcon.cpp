// FalconForCausalLM (HF v4.40), all three layouts: new_decoder_architecture (grouped kv heads,
// ln_attn + ln_mlp, parallel), multi_query (one kv head, parallel_attn) and classic (per-head
// qkv). Rotary embeddings, or ALiBi (which Falcon scales by 1/sqrt(D) with the scores); optional
// biases; GELU MLP; LM head tied to the embedding.
#include <cmath>

#include "foundry/autograd/grad_mode.h"
#include "foundry/ops/ops.h"
#include "models/hf/common.h"

namespace foundry::models::hf {

namespace {

struct FalconOptions {
  bool new_arch = false, multi_query = true, parallel = true, bias = false, alibi = false;
};

struct FalconLayer {
  Tensor ln_attn_w, ln_attn_b, ln_mlp_w, ln_mlp_b, qkv_w, qkv_b, dense_w, dense_b, up_w, up_b, down_w, down_b;
};

class Falcon : public CausalLM {
 public:
  Falcon(const ModelConfig& c, const WeightFn& w, FalconOptions o) : o_(o) {
    config_ = c;
    const int64_t C = c.hidden_size, H = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim;
    auto take = [&](const std::string& name, const Shape& shape) {
      return weights_["transformer." + name] = w("transformer." + name, shape);
    };
    auto take_if = [&](bool want, const std::string& name, const Shape& shape) { return want ? take(name, shape) : Tensor(); };
    embed_ = take("word_embeddings.weight", {c.vocab_size, C});
    const int64_t qkv_rows = (H + 2 * Hkv) * D;
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string p = "h." + std::to_string(i) + ".";
      FalconLayer L;
      if (o.new_arch) {
        L.ln_attn_w = take(p + "ln_attn.weight", {C});
        L.ln_attn_b = take(p + "ln_attn.bias", {C});
        L.ln_mlp_w = take(p + "ln_mlp.weight", {C});
        L.ln_mlp_b = take(p + "ln_mlp.bias", {C});
      } else {
        L.ln_attn_w = take(p + "input_layernorm.weight", {C});
        L.ln_attn_b = take(p + "input_layernorm.bias", {C});
        if (!o.parallel) {
          L.ln_mlp_w = take(p + "post_attention_layernorm.weight", {C});
          L.ln_mlp_b = take(p + "post_attention_layernorm.bias", {C});
        }
      }
      L.qkv_w = take(p + "self_attention.query_key_value.weight", {qkv_rows, C});
      L.qkv_b = take_if(o.bias, p + "self_attention.query_key_value.bias", {qkv_rows});
      L.dense_w = take(p + "self_attention.dense.weight", {C, H * D});
      L.dense_b = take_if(o.bias, p + "self_attention.dense.bias", {C});
      L.up_w = take(p + "mlp.dense_h_to_4h.weight", {c.intermediate_size, C});
      L.up_b = take_if(o.bias, p + "mlp.dense_h_to_4h.bias", {c.intermediate_size});
      L.down_w = take(p + "mlp.dense_4h_to_h.weight", {C, c.intermediate_size});
      L.down_b = take_if(o.bias, p + "mlp.dense_4h_to_h.bias", {C});
      layers_.push_back(std::move(L));
    }
    lnf_w_ = take("ln_f.weight", {C});
    lnf_b_ = take("ln_f.bias", {C});
    dtype_ = embed_.dtype();
  }

  Tensor ln(const Tensor& x, const Tensor& w, const Tensor& b) const {
    return layer_norm(x, {config_.hidden_size}, w, b, config_.norm_eps);
  }

  // HF's _split_heads for the three layouts -> q [B, H, T, D], k and v [B, Hkv, T, D].
  std::tuple<Tensor, Tensor, Tensor> split_qkv(const Tensor& qkv, int64_t B, int64_t T) const {
    const int64_t H = config_.num_heads, Hkv = config_.num_kv_heads, D = config_.head_dim;
    if (o_.new_arch) {
      const int64_t g = H / Hkv;
      Tensor x = qkv.reshape({B, T, Hkv, g + 2, D});
      Tensor q = x.narrow(3, 0, g).reshape({B, T, H, D}).transpose(1, 2);
      return {q, x.select(3, g).transpose(1, 2), x.select(3, g + 1).transpose(1, 2)};
    }
    if (!o_.multi_query) {
      Tensor x = qkv.reshape({B, T, H, 3 * D}).transpose(1, 2);
      return {x.narrow(3, 0, D), x.narrow(3, D, D), x.narrow(3, 2 * D, D)};
    }
    Tensor x = qkv.reshape({B, T, H + 2, D});
    return {x.narrow(2, 0, H).transpose(1, 2), x.narrow(2, H, 1).transpose(1, 2), x.narrow(2, H + 1, 1).transpose(1, 2)};
  }

  Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) override {
    autograd::NoGradGuard no_grad;
    const ModelConfig& c = config_;
    const auto [B, T, past, mask] = begin_forward(c, input_ids, attention_mask, cache);
    Tensor bias = attention_bias(mask, T, 0, dtype_);
    Tensor cos_t, sin_t;
    if (o_.alibi) bias = bias + alibi_bias(mask, c.num_heads, 1.0 / std::sqrt(double(c.head_dim)), dtype_);
    else std::tie(cos_t, sin_t) = rope_tables(c, positions_from_mask(mask, T), c.head_dim, dtype_);
    Tensor h = embedding(input_ids, embed_);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const FalconLayer& L = layers_[i];
      Tensor x = ln(h, L.ln_attn_w, L.ln_attn_b);
      auto [q, k, v] = split_qkv(proj(x, L.qkv_w, L.qkv_b), B, T);
      if (!o_.alibi) {
        q = apply_rope(q, cos_t, sin_t);
        k = apply_rope(k, cos_t, sin_t);
      }
      if (cache) std::tie(k, v) = cache->append(int64_t(i), k, v);
      Tensor attn = proj(attend(q, k, v, bias), L.dense_w, L.dense_b);
      Tensor m = o_.new_arch ? ln(h, L.ln_mlp_w, L.ln_mlp_b) : x;
      if (!o_.new_arch && !o_.parallel) {
        h = h + attn;
        m = ln(h, L.ln_mlp_w, L.ln_mlp_b);
        h = h + proj(gelu(proj(m, L.up_w, L.up_b)), L.down_w, L.down_b);
      } else {
        h = h + attn + proj(gelu(proj(m, L.up_w, L.up_b)), L.down_w, L.down_b);
      }
    }
    h = end_layers(h, cache, T, last_positions);
    return float_logits(proj(ln(h, lnf_w_, lnf_b_), embed_));
  }

 private:
  FalconOptions o_;
  Tensor embed_, lnf_w_, lnf_b_;
  std::vector<FalconLayer> layers_;
};

FalconOptions falcon_options(const json& j) {
  FalconOptions o;
  o.new_arch = get_bool(j, "new_decoder_architecture", false);
  o.multi_query = get_bool(j, "multi_query", true);
  o.parallel = get_bool(j, "parallel_attn", true);
  o.bias = get_bool(j, "bias", false);
  o.alibi = get_bool(j, "alibi", false);
  return o;
}

}  // namespace

Architecture falcon_architecture() {
  auto parse = [](const json& j, ModelConfig& c) {
    parse_sizes(j, c, "hidden_size", "num_hidden_layers", "num_attention_heads");
    const FalconOptions o = falcon_options(j);
    c.num_kv_heads = o.new_arch ? get_int(j, "num_kv_heads", c.num_heads) : (o.multi_query ? 1 : c.num_heads);
    c.intermediate_size = get_int(j, "ffn_hidden_size", 4 * c.hidden_size);
    c.max_positions = get_int(j, "max_position_embeddings", 2048);
    c.norm_eps = get_double(j, "layer_norm_epsilon", 1e-5);
    c.rope_theta = get_double(j, "rope_theta", 10000.0);
    c.tie_word_embeddings = true;
    if (get_string(j, "activation", "gelu") != "gelu") unsupported(c, "activation '" + get_string(j, "activation", "") + "'");
    if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) unsupported(c, "rope_scaling");
  };
  auto build = [](const ModelConfig& c, const WeightFn& w, const HasWeightFn&) -> std::unique_ptr<CausalLM> {
    return std::make_unique<Falcon>(c, w, falcon_options(json::parse(c.json)));
  };
  return {{"FalconForCausalLM"}, parse, build};
}

}  // namespace foundry::models::hf
