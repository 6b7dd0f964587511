// GPT2LMHeadModel (HF v4.40 semantics): learned positions, LayerNorm pre-norm blocks, fused qkv
// Conv1D projections (weights [in, out]), GELU-tanh MLP, LM head tied to the token embedding.
#include "foundry/autograd/grad_mode.h"
#include "foundry/ops/ops.h"
#include "models/hf/common.h"

namespace foundry::models::hf {

namespace {

struct GPT2Layer {
  Tensor ln1_w, ln1_b, ln2_w, ln2_b;
  Tensor attn_w, attn_b, proj_w, proj_b;
  Tensor fc_w, fc_b, mlp_proj_w, mlp_proj_b;
};

class GPT2 : public CausalLM {
 public:
  GPT2(const ModelConfig& c, const WeightFn& w, const HasWeightFn& has, std::string activation)
      : activation_(std::move(activation)) {
    config_ = c;
    const int64_t C = c.hidden_size, F = c.intermediate_size;
    // HF's own gpt2 checkpoints store the trunk without the "transformer." prefix.
    const std::string root = has("transformer.wte.weight") ? "transformer." : "";
    auto take = [&](const std::string& name, const Shape& shape) { return weights_[root + name] = w(root + name, shape); };
    wte_ = take("wte.weight", {c.vocab_size, C});
    wpe_ = take("wpe.weight", {c.max_positions, C});
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string p = "h." + std::to_string(i) + ".";
      GPT2Layer L;
      L.ln1_w = take(p + "ln_1.weight", {C});
      L.ln1_b = take(p + "ln_1.bias", {C});
      L.attn_w = take(p + "attn.c_attn.weight", {C, 3 * C});
      L.attn_b = take(p + "attn.c_attn.bias", {3 * C});
      L.proj_w = take(p + "attn.c_proj.weight", {C, C});
      L.proj_b = take(p + "attn.c_proj.bias", {C});
      L.ln2_w = take(p + "ln_2.weight", {C});
      L.ln2_b = take(p + "ln_2.bias", {C});
      L.fc_w = take(p + "mlp.c_fc.weight", {C, F});
      L.fc_b = take(p + "mlp.c_fc.bias", {F});
      L.mlp_proj_w = take(p + "mlp.c_proj.weight", {F, C});
      L.mlp_proj_b = take(p + "mlp.c_proj.bias", {C});
      layers_.push_back(std::move(L));
    }
    lnf_w_ = take("ln_f.weight", {C});
    lnf_b_ = take("ln_f.bias", {C});
    head_ = c.tie_word_embeddings || !has("lm_head.weight") ? wte_ : (weights_["lm_head.weight"] = w("lm_head.weight", {c.vocab_size, C}));
    dtype_ = wte_.dtype();
  }

  Tensor act(const Tensor& x) const { return activation(activation_, x); }

  Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) override {
    autograd::NoGradGuard no_grad;
    const ModelConfig& c = config_;
    const auto [B, T, past, mask] = begin_forward(c, input_ids, attention_mask, cache);
    const int64_t C = c.hidden_size, H = c.num_heads;
    Tensor positions = positions_from_mask(mask, T);
    if (amax(positions).item<int64_t>() >= c.max_positions)
      raise<ValueError>("{}: position {} is past n_positions ({})", c.architecture, amax(positions).item<int64_t>(),
                        c.max_positions);
    Tensor bias = attention_bias(mask, T, 0, dtype_);
    Tensor h = embedding(input_ids, wte_) + embedding(positions, wpe_);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const GPT2Layer& L = layers_[i];
      Tensor x = layer_norm(h, {C}, L.ln1_w, L.ln1_b, c.norm_eps);
      Tensor qkv = proj_t(x, L.attn_w, L.attn_b);
      Tensor q = split_heads(qkv.narrow(2, 0, C), H);
      Tensor k = split_heads(qkv.narrow(2, C, C), H);
      Tensor v = split_heads(qkv.narrow(2, 2 * C, C), H);
      if (cache) std::tie(k, v) = cache->append(int64_t(i), k, v);
      h = h + proj_t(attend(q, k, v, bias), L.proj_w, L.proj_b);
      x = layer_norm(h, {C}, L.ln2_w, L.ln2_b, c.norm_eps);
      h = h + proj_t(act(proj_t(x, L.fc_w, L.fc_b)), L.mlp_proj_w, L.mlp_proj_b);
    }
    h = end_layers(h, cache, T, last_positions);
    h = layer_norm(h, {C}, lnf_w_, lnf_b_, c.norm_eps);
    return float_logits(proj(h, head_));
  }

 private:
  std::string activation_;
  Tensor wte_, wpe_, lnf_w_, lnf_b_, head_;
  std::vector<GPT2Layer> layers_;
};

void parse_gpt2(const json& j, ModelConfig& c) {
  parse_sizes(j, c, "n_embd", "n_layer", "n_head");
  c.intermediate_size = get_int(j, "n_inner", 4 * c.hidden_size);
  c.max_positions = get_int(j, "n_positions");
  c.norm_eps = get_double(j, "layer_norm_epsilon", 1e-5);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", true);
  if (!get_bool(j, "scale_attn_weights", true)) unsupported(c, "scale_attn_weights = false");
  if (get_bool(j, "scale_attn_by_inverse_layer_idx", false)) unsupported(c, "scale_attn_by_inverse_layer_idx");
  if (get_bool(j, "add_cross_attention", false)) unsupported(c, "add_cross_attention");
  const std::string act = get_string(j, "activation_function", "gelu_new");
  if (!known_activation(act)) unsupported(c, "activation_function '" + act + "'");
}

}  // namespace

Architecture gpt2_architecture() {
  return {{"GPT2LMHeadModel"}, parse_gpt2,
          [](const ModelConfig& c, const WeightFn& w, const HasWeightFn& has) -> std::unique_ptr<CausalLM> {
            json j = json::parse(c.json);
            return std::make_unique<GPT2>(c, w, has, get_string(j, "activation_function", "gelu_new"));
          }};
}

}  // namespace foundry::models::hf
