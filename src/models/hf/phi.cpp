// PhiForCausalLM (HF v4.40): one LayerNorm per block feeding attention and MLP in parallel
// (h + attn(ln x) + mlp(ln x)), rotary embeddings on the first partial_rotary_factor of each head,
// biased projections, a final LayerNorm and an LM head with bias.
#include "foundry/ops/ops.h"
#include "models/hf/blocks.h"

namespace foundry::models::hf {

namespace {

struct PhiOptions {
  int64_t rot_dim = 0;
  std::string act;
  double attention_dropout = 0, resid_pdrop = 0, embd_pdrop = 0;
};

class PhiAttention : public nn::Module {
 public:
  PhiAttention(const WeightSource& ws, const ModelConfig& c, const PhiOptions& o)
      : H_(c.num_heads), Hkv_(c.num_kv_heads), o_(o) {
    const int64_t C = c.hidden_size, D = c.head_dim;
    q_proj = add_block<Linear>(*this, ws, "q_proj", C, H_ * D, true);
    k_proj = add_block<Linear>(*this, ws, "k_proj", C, Hkv_ * D, true);
    v_proj = add_block<Linear>(*this, ws, "v_proj", C, Hkv_ * D, true);
    dense = add_block<Linear>(*this, ws, "dense", H_ * D, C, true);
  }
  std::string type_name() const override { return "PhiAttention"; }
  Tensor forward(const Tensor& x, const LayerContext& ctx, int64_t layer) {
    std::vector<Tensor> qkv = Linear::forward_each(x, {q_proj.get(), k_proj.get(), v_proj.get()});
    Tensor q = rope_heads(qkv[0], H_, ctx);
    Tensor k = rope_heads(qkv[1], Hkv_, ctx);
    Tensor v = split_heads(qkv[2], Hkv_);
    return dense->forward(attend_layer(ctx, layer, q, k, v, is_training() ? o_.attention_dropout : 0.0));
  }
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, dense;

 private:
  int64_t H_, Hkv_;
  PhiOptions o_;
};

// One LayerNorm feeding attention and MLP in parallel: h + attn(ln h) + mlp(ln h).
class PhiLayer : public nn::Module {
 public:
  PhiLayer(const WeightSource& ws, const ModelConfig& c, const PhiOptions& o) : o_(o) {
    self_attn = add_block<PhiAttention>(*this, ws, "self_attn", c, o);
    mlp = add_block<MLP>(*this, ws, "mlp", c.hidden_size, c.intermediate_size, o.act, "fc1", "fc2");
    input_layernorm = add_block<Norm>(*this, ws, "input_layernorm", c.hidden_size, Norm::Kind::LayerNorm, c.norm_eps);
  }
  std::string type_name() const override { return "PhiDecoderLayer"; }
  Tensor forward(const Tensor& h, const LayerContext& ctx, int64_t layer) {
    Tensor x = input_layernorm->forward(h);
    return h + maybe_dropout(*this, self_attn->forward(x, ctx, layer), o_.resid_pdrop) +
           maybe_dropout(*this, mlp->forward(x), o_.resid_pdrop);
  }
  std::shared_ptr<PhiAttention> self_attn;
  std::shared_ptr<MLP> mlp;
  std::shared_ptr<Norm> input_layernorm;

 private:
  PhiOptions o_;
};

class Phi : public CausalLM {
 public:
  Phi(const ModelConfig& c, const WeightSource& ws, const PhiOptions& o) : CausalLM(c, ws.products()), o_(o) {
    const WeightSource mws = ws.pp("model");
    model = register_module("model", std::make_shared<Scope>("PhiModel"));
    embed_tokens = add_block<Embedding>(*model, mws, "embed_tokens", c.vocab_size, c.hidden_size);
    auto list = model->register_module("layers", std::make_shared<Scope>("ModuleList"));
    for (int64_t i = 0; i < c.num_layers; ++i)
      layers.push_back(add_block<PhiLayer>(*list, mws.pp("layers"), std::to_string(i), c, o));
    final_layernorm = add_block<Norm>(*model, mws, "final_layernorm", c.hidden_size, Norm::Kind::LayerNorm, c.norm_eps);
    lm_head = add_block<Linear>(*this, ws, "lm_head", c.hidden_size, c.vocab_size, true);
    dtype_ = embed_tokens->weight.dtype();
  }

  Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) override {
    const ModelConfig& c = config_;
    const LayerContext ctx = layer_context(c, input_ids, attention_mask, cache, dtype_, {.rotary_dims = o_.rot_dim});
    Tensor h = maybe_dropout(*this, embed_tokens->forward(input_ids), o_.embd_pdrop);
    h = run_layers(*this, layers, ctx, h, last_positions);
    return head(*lm_head, final_layernorm->forward(h));
  }

  std::shared_ptr<Scope> model;
  std::shared_ptr<Embedding> embed_tokens;
  std::vector<std::shared_ptr<PhiLayer>> layers;
  std::shared_ptr<Norm> final_layernorm;
  std::shared_ptr<Linear> lm_head;

 private:
  PhiOptions o_;
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
  auto build = [](const ModelConfig& c, const WeightSource& ws) -> std::unique_ptr<CausalLM> {
    json j = json::parse(c.json);
    PhiOptions o;
    o.rot_dim = int64_t(double(c.head_dim) * get_double(j, "partial_rotary_factor", 0.5));
    FOUNDRY_CHECK_AS(ValueError, o.rot_dim > 0 && o.rot_dim % 2 == 0,
                     "config.json: partial_rotary_factor gives {} rotary dims; need an even number > 0", o.rot_dim);
    o.act = get_string(j, "hidden_act", "gelu_new");
    o.attention_dropout = get_double(j, "attention_dropout", 0.0);
    o.resid_pdrop = get_double(j, "resid_pdrop", 0.0);
    o.embd_pdrop = get_double(j, "embd_pdrop", 0.0);
    return std::make_unique<Phi>(c, ws, o);
  };
  return {{"PhiForCausalLM"}, "phi", parse, build};
}

}  // namespace foundry::models::hf
