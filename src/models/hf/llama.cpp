// LlamaForCausalLM (HF v4.40 semantics): RMSNorm pre-norm blocks, rotary embeddings (with linear,
// dynamic-NTK or llama3 scaling), grouped-query attention, SwiGLU MLP, optional q/k/v/o and MLP
// biases, tied or separate LM head.
#include "foundry/autograd/grad_mode.h"
#include "foundry/ops/ops.h"
#include "models/hf/common.h"

namespace foundry::models::hf {

namespace {

struct LlamaLayer {
  Tensor input_norm, post_norm;
  Tensor wq, wk, wv, wo, bq, bk, bv, bo;
  Tensor w_gate, w_up, w_down, b_gate, b_up, b_down;
};

class Llama : public CausalLM {
 public:
  Llama(const ModelConfig& c, const WeightFn& w, const HasWeightFn& has) {
    config_ = c;
    const int64_t C = c.hidden_size, H = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim, F = c.intermediate_size;
    auto take = [&](const std::string& name, const Shape& shape) { return weights_[name] = w(name, shape); };
    embed_ = take("model.embed_tokens.weight", {c.vocab_size, C});
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      LlamaLayer L;
      L.input_norm = take(p + "input_layernorm.weight", {C});
      L.post_norm = take(p + "post_attention_layernorm.weight", {C});
      L.wq = take(p + "self_attn.q_proj.weight", {H * D, C});
      L.wk = take(p + "self_attn.k_proj.weight", {Hkv * D, C});
      L.wv = take(p + "self_attn.v_proj.weight", {Hkv * D, C});
      L.wo = take(p + "self_attn.o_proj.weight", {C, H * D});
      if (c.attention_bias) {
        L.bq = take(p + "self_attn.q_proj.bias", {H * D});
        L.bk = take(p + "self_attn.k_proj.bias", {Hkv * D});
        L.bv = take(p + "self_attn.v_proj.bias", {Hkv * D});
        L.bo = take(p + "self_attn.o_proj.bias", {C});
      }
      L.w_gate = take(p + "mlp.gate_proj.weight", {F, C});
      L.w_up = take(p + "mlp.up_proj.weight", {F, C});
      L.w_down = take(p + "mlp.down_proj.weight", {C, F});
      if (c.mlp_bias) {
        L.b_gate = take(p + "mlp.gate_proj.bias", {F});
        L.b_up = take(p + "mlp.up_proj.bias", {F});
        L.b_down = take(p + "mlp.down_proj.bias", {C});
      }
      layers_.push_back(std::move(L));
    }
    norm_ = take("model.norm.weight", {C});
    // Tied checkpoints usually omit lm_head.weight; when present it is used as written.
    head_ = (!c.tie_word_embeddings || has("lm_head.weight")) ? take("lm_head.weight", {c.vocab_size, C}) : embed_;
    dtype_ = embed_.dtype();
  }

  Tensor forward(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache) override {
    autograd::NoGradGuard no_grad;
    const ModelConfig& c = config_;
    FOUNDRY_CHECK_AS(ValueError, input_ids.dim() == 2, "{}: input_ids must be [batch, tokens], got {}",
                     c.architecture, shape_str(input_ids.sizes()));
    const int64_t B = input_ids.size(0), T = input_ids.size(1), past = cache ? cache->length() : 0;
    Tensor mask = full_mask(attention_mask, B, past + T);
    Tensor positions = positions_from_mask(mask, T);
    auto [cos_t, sin_t] = rope_tables(c, positions, c.head_dim, dtype_);
    Tensor bias = attention_bias(mask, T, c.sliding_window, dtype_);
    Tensor h = embedding(input_ids, embed_);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const LlamaLayer& L = layers_[i];
      Tensor x = rms_norm(h, {c.hidden_size}, L.input_norm, c.norm_eps);
      Tensor q = apply_rope(split_heads(linear(x, L.wq, L.bq), c.num_heads), cos_t, sin_t);
      Tensor k = apply_rope(split_heads(linear(x, L.wk, L.bk), c.num_kv_heads), cos_t, sin_t);
      Tensor v = split_heads(linear(x, L.wv, L.bv), c.num_kv_heads);
      if (cache) std::tie(k, v) = cache->append(int64_t(i), k, v);
      h = h + linear(attend(q, k, v, bias), L.wo, L.bo);
      x = rms_norm(h, {c.hidden_size}, L.post_norm, c.norm_eps);
      h = h + linear(silu(linear(x, L.w_gate, L.b_gate)) * linear(x, L.w_up, L.b_up), L.w_down, L.b_down);
    }
    if (cache) cache->advance(T);
    h = rms_norm(h, {c.hidden_size}, norm_, c.norm_eps);
    Tensor logits = linear(h, head_);
    return logits.dtype() == DType::Float32 ? logits : logits.to(DType::Float32);
  }

 private:
  Tensor embed_, norm_, head_;
  std::vector<LlamaLayer> layers_;
};

void parse_llama(const json& j, ModelConfig& c) {
  c.vocab_size = get_int(j, "vocab_size");
  c.hidden_size = get_int(j, "hidden_size");
  c.intermediate_size = get_int(j, "intermediate_size");
  c.num_layers = get_int(j, "num_hidden_layers");
  c.num_heads = get_int(j, "num_attention_heads");
  c.num_kv_heads = get_int(j, "num_key_value_heads", c.num_heads);
  FOUNDRY_CHECK_AS(ValueError, c.num_heads > 0 && c.hidden_size % c.num_heads == 0,
                   "config.json: hidden_size ({}) must be divisible by num_attention_heads ({})", c.hidden_size,
                   c.num_heads);
  c.head_dim = get_int(j, "head_dim", c.hidden_size / c.num_heads);
  c.max_positions = get_int(j, "max_position_embeddings", 2048);
  c.norm_eps = get_double(j, "rms_norm_eps", 1e-6);
  c.rope_theta = get_double(j, "rope_theta", 10000.0);
  c.attention_bias = get_bool(j, "attention_bias", false);
  c.mlp_bias = get_bool(j, "mlp_bias", false);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", false);
  const std::string act = get_string(j, "hidden_act", "silu");
  if (act != "silu") unsupported(c, "hidden_act '" + act + "'");
  auto rs = j.find("rope_scaling");
  if (rs != j.end() && !rs->is_null()) {
    if (!rs->is_object()) raise<ValueError>("config.json: rope_scaling must be an object, got {}", rs->dump());
    c.rope_type = get_string(*rs, "rope_type", get_string(*rs, "type", ""));
    if (c.rope_type == "default") c.rope_type.clear();
    if (!c.rope_type.empty() && c.rope_type != "linear" && c.rope_type != "dynamic" && c.rope_type != "llama3")
      unsupported(c, "rope_scaling type '" + c.rope_type + "'");
    if (!c.rope_type.empty()) c.rope_factor = get_double(*rs, "factor");
    if (c.rope_type == "llama3") {
      c.rope_low_freq_factor = get_double(*rs, "low_freq_factor");
      c.rope_high_freq_factor = get_double(*rs, "high_freq_factor");
      c.rope_original_max_positions = get_int(*rs, "original_max_position_embeddings");
    }
  }
}

}  // namespace

Architecture llama_architecture() {
  return {{"LlamaForCausalLM"}, parse_llama,
          [](const ModelConfig& c, const WeightFn& w, const HasWeightFn& has) -> std::unique_ptr<CausalLM> {
            return std::make_unique<Llama>(c, w, has);
          }};
}

}  // namespace foundry::models::hf
