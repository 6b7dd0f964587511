// OPTForCausalLM (HF v4.40): learned positions offset by 2 (padding positions read row 1), biased
// attention and ReLU MLP, pre-LayerNorm (do_layer_norm_before) or post-LayerNorm blocks, optional
// project_in/out when word_embed_proj_dim differs from hidden_size, LM head tied to the embedding.
#include "foundry/autograd/grad_mode.h"
#include "foundry/ops/ops.h"
#include "models/hf/common.h"

namespace foundry::models::hf {

namespace {

struct OPTLayer {
  Tensor attn_ln_w, attn_ln_b, wq, bq, wk, bk, wv, bv, wo, bo, mlp_ln_w, mlp_ln_b, fc1_w, fc1_b, fc2_w, fc2_b;
};

class OPT : public CausalLM {
 public:
  OPT(const ModelConfig& c, const WeightFn& w, bool pre_norm, bool final_norm, int64_t proj_dim, std::string act)
      : pre_norm_(pre_norm), act_(std::move(act)) {
    config_ = c;
    const int64_t C = c.hidden_size, F = c.intermediate_size;
    const std::string root = "model.decoder.";
    auto take = [&](const std::string& name, const Shape& shape) {
      return weights_[root + name] = w(root + name, shape);
    };
    embed_ = take("embed_tokens.weight", {c.vocab_size, proj_dim});
    positions_ = take("embed_positions.weight", {c.max_positions + 2, C});
    if (proj_dim != C) {
      project_in_ = take("project_in.weight", {C, proj_dim});
      project_out_ = take("project_out.weight", {proj_dim, C});
    }
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string p = "layers." + std::to_string(i) + ".";
      OPTLayer L;
      L.attn_ln_w = take(p + "self_attn_layer_norm.weight", {C});
      L.attn_ln_b = take(p + "self_attn_layer_norm.bias", {C});
      L.wq = take(p + "self_attn.q_proj.weight", {C, C});
      L.bq = take(p + "self_attn.q_proj.bias", {C});
      L.wk = take(p + "self_attn.k_proj.weight", {C, C});
      L.bk = take(p + "self_attn.k_proj.bias", {C});
      L.wv = take(p + "self_attn.v_proj.weight", {C, C});
      L.bv = take(p + "self_attn.v_proj.bias", {C});
      L.wo = take(p + "self_attn.out_proj.weight", {C, C});
      L.bo = take(p + "self_attn.out_proj.bias", {C});
      L.mlp_ln_w = take(p + "final_layer_norm.weight", {C});
      L.mlp_ln_b = take(p + "final_layer_norm.bias", {C});
      L.fc1_w = take(p + "fc1.weight", {F, C});
      L.fc1_b = take(p + "fc1.bias", {F});
      L.fc2_w = take(p + "fc2.weight", {C, F});
      L.fc2_b = take(p + "fc2.bias", {C});
      layers_.push_back(std::move(L));
    }
    if (final_norm) {
      lnf_w_ = take("final_layer_norm.weight", {C});
      lnf_b_ = take("final_layer_norm.bias", {C});
    }
    dtype_ = embed_.dtype();
  }

  Tensor ln(const Tensor& x, const Tensor& w, const Tensor& b) const {
    return layer_norm(x, {config_.hidden_size}, w, b, config_.norm_eps);
  }

  Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) override {
    autograd::NoGradGuard no_grad;
    const ModelConfig& c = config_;
    const auto [B, T, past, mask] = begin_forward(c, input_ids, attention_mask, cache);
    const int64_t H = c.num_heads;
    // OPTLearnedPositionalEmbedding: cumsum(mask) * mask - 1, plus the offset of 2.
    Tensor m = mask.to(DType::Int64);
    Tensor pos = (cumsum(m, 1) * m + ones({}, DType::Int64)).narrow(1, past, T);
    if (amax(pos).item<int64_t>() >= c.max_positions + 2)
      raise<ValueError>("{}: position {} is past max_position_embeddings ({})", c.architecture,
                        amax(pos).item<int64_t>() - 2, c.max_positions);
    Tensor bias = attention_bias(mask, T, 0, dtype_);
    Tensor h = embedding(input_ids, embed_);
    if (project_in_.defined()) h = proj(h, project_in_);
    h = h + embedding(pos, positions_);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const OPTLayer& L = layers_[i];
      Tensor x = pre_norm_ ? ln(h, L.attn_ln_w, L.attn_ln_b) : h;
      Tensor q = split_heads(proj(x, L.wq, L.bq), H);
      Tensor k = split_heads(proj(x, L.wk, L.bk), H);
      Tensor v = split_heads(proj(x, L.wv, L.bv), H);
      if (cache) std::tie(k, v) = cache->append(int64_t(i), k, v);
      h = h + proj(attend(q, k, v, bias), L.wo, L.bo);
      if (!pre_norm_) h = ln(h, L.attn_ln_w, L.attn_ln_b);
      x = pre_norm_ ? ln(h, L.mlp_ln_w, L.mlp_ln_b) : h;
      h = h + proj(activation(act_, proj(x, L.fc1_w, L.fc1_b)), L.fc2_w, L.fc2_b);
      if (!pre_norm_) h = ln(h, L.mlp_ln_w, L.mlp_ln_b);
    }
    h = end_layers(h, cache, T, last_positions);
    if (lnf_w_.defined()) h = ln(h, lnf_w_, lnf_b_);
    if (project_out_.defined()) h = proj(h, project_out_);
    return float_logits(proj(h, embed_));
  }

 private:
  bool pre_norm_;
  std::string act_;
  Tensor embed_, positions_, project_in_, project_out_, lnf_w_, lnf_b_;
  std::vector<OPTLayer> layers_;
};

}  // namespace

Architecture opt_architecture() {
  auto parse = [](const json& j, ModelConfig& c) {
    parse_sizes(j, c, "hidden_size", "num_hidden_layers", "num_attention_heads");
    c.intermediate_size = get_int(j, "ffn_dim");
    c.max_positions = get_int(j, "max_position_embeddings", 2048);
    c.norm_eps = 1e-5;  // nn.LayerNorm's default; OPT's config has no key for it
    c.tie_word_embeddings = true;
    if (!get_bool(j, "enable_bias", true)) unsupported(c, "enable_bias = false");
    if (!get_bool(j, "layer_norm_elementwise_affine", true)) unsupported(c, "layer_norm_elementwise_affine = false");
    const std::string act = get_string(j, "activation_function", "relu");
    if (!known_activation(act)) unsupported(c, "activation_function '" + act + "'");
  };
  auto build = [](const ModelConfig& c, const WeightFn& w, const HasWeightFn&) -> std::unique_ptr<CausalLM> {
    json j = json::parse(c.json);
    const bool pre_norm = get_bool(j, "do_layer_norm_before", true);
    return std::make_unique<OPT>(c, w, pre_norm, pre_norm && !get_bool(j, "_remove_final_layer_norm", false),
                                 get_int(j, "word_embed_proj_dim", c.hidden_size),
                                 get_string(j, "activation_function", "relu"));
  };
  return {{"OPTForCausalLM"}, parse, build};
}

}  // namespace foundry::models::hf
