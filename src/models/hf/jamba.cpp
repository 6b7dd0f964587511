// JambaForCausalLM (HF v4.40): RMSNorm pre-norm blocks whose mixer is attention (every
// attn_layer_period-th layer from attn_layer_offset; grouped-query heads, no positional encoding,
// causal + padding mask) or a Mamba mixer with RMSNorms on its time step, B and C (the others);
// the feed-forward is a routed mixture of gated experts (softmax top-k, not renormalised) every
// expert_layer_period-th layer from expert_layer_offset, a gated MLP elsewhere. The Mamba layers
// ignore the attention mask, as in transformers. The cache holds keys and values of the attention
// layers and the state of the Mamba layers.
#include "foundry/ops/ops.h"
#include "models/hf/decoder.h"
#include "models/hf/mamba_mixer.h"

namespace foundry::models::hf {

namespace {

struct JambaOptions {
  std::vector<bool> attention, sparse;   // per layer
  std::vector<int64_t> attention_index;  // per layer: its row in the KV cache (attention layers)
  int64_t experts = 0, top_k = 0;
  double attention_dropout = 0;
  MambaOptions mamba;
};

class JambaLayer : public nn::Module {
 public:
  JambaLayer(const WeightSource& ws, const ModelConfig& c, const JambaOptions& o, int64_t layer)
      : layer_(layer), attention_(o.attention[size_t(layer)]), kv_row_(o.attention_index[size_t(layer)]) {
    input_layernorm = add_block<Norm>(*this, ws, "input_layernorm", c.hidden_size, Norm::Kind::RMSNorm, c.norm_eps);
    if (attention_) self_attn = add_block<DecoderAttention>(*this, ws, "self_attn", c, DecoderSpec{}, o.attention_dropout);
    else mamba = add_block<MambaMixer>(*this, ws, "mamba", c.hidden_size, o.mamba);
    pre_ff_layernorm = add_block<Norm>(*this, ws, "pre_ff_layernorm", c.hidden_size, Norm::Kind::RMSNorm, c.norm_eps);
    if (o.sparse[size_t(layer)]) {
      SparseMoE::Options mo{.experts = o.experts, .top_k = o.top_k, .intermediate = c.intermediate_size,
                            .normalize = false, .names = {}, .act = o.mamba.act, .router = "router"};
      moe = add_block<SparseMoE>(*this, ws, "feed_forward", c.hidden_size, mo);
    } else {
      mlp = add_block<GatedMLP>(*this, ws, "feed_forward", c.hidden_size, c.intermediate_size, o.mamba.act);
    }
  }
  std::string type_name() const override { return attention_ ? "JambaAttentionDecoderLayer" : "JambaMambaDecoderLayer"; }
  Tensor forward(const Tensor& h, const LayerContext& ctx) {
    Tensor x = input_layernorm->forward(h);
    Tensor mixed = attention_ ? self_attn->forward(x, ctx, kv_row_) : mamba->forward(x, ctx.cache, layer_);
    Tensor r = h + mixed;
    Tensor f = pre_ff_layernorm->forward(r);
    return r + (moe ? moe->forward(f) : mlp->forward(f));
  }
  std::shared_ptr<Norm> input_layernorm, pre_ff_layernorm;
  std::shared_ptr<DecoderAttention> self_attn;
  std::shared_ptr<MambaMixer> mamba;
  std::shared_ptr<SparseMoE> moe;
  std::shared_ptr<GatedMLP> mlp;

 private:
  int64_t layer_;
  bool attention_;
  int64_t kv_row_;
};

class Jamba : public CausalLM {
 public:
  Jamba(const ModelConfig& c, const WeightSource& ws, const JambaOptions& o) : CausalLM(c, ws.products()), o_(o) {
    const WeightSource mws = ws.pp("model");
    model = register_module("model", std::make_shared<Scope>("JambaModel"));
    embed_tokens = add_block<Embedding>(*model, mws, "embed_tokens", c.vocab_size, c.hidden_size, config_pad_token(c));
    auto list = model->register_module("layers", std::make_shared<Scope>("ModuleList"));
    for (int64_t i = 0; i < c.num_layers; ++i)
      layers.push_back(add_block<JambaLayer>(*list, mws.pp("layers"), std::to_string(i), c, o, i));
    final_layernorm = add_block<Norm>(*model, mws, "final_layernorm", c.hidden_size, Norm::Kind::RMSNorm, c.norm_eps);
    lm_head = c.tie_word_embeddings
                  ? register_module("lm_head", std::make_shared<Linear>(ws.pp("lm_head"), embed_tokens->weight))
                  : add_block<Linear>(*this, ws, "lm_head", c.hidden_size, c.vocab_size, false);
    dtype_ = embed_tokens->weight.dtype();
  }
  bool recurrent() const override { return true; }
  KVCache make_cache(int64_t batch, int64_t capacity) const override {
    int64_t attention_layers = 0;
    for (bool a : o_.attention) attention_layers += a;
    if (attention_layers == 0) return KVCache::recurrent(batch);
    return KVCache(attention_layers, batch, config_.num_kv_heads, capacity, config_.head_dim, dtype_, kv_cache_format());
  }

  Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) override {
    const LayerContext ctx = layer_context(config_, input_ids, attention_mask, cache, dtype_);
    Tensor h = embed_tokens->forward(input_ids);
    for (auto& layer : layers) {
      std::shared_ptr<JambaLayer> l = layer;
      h = checkpointed(*this, [l, ctx](const Tensor& x) { return l->forward(x, ctx); }, h);
    }
    h = end_layers(h, cache, ctx.T, last_positions);
    return head(*lm_head, final_layernorm->forward(h));
  }

  std::shared_ptr<Scope> model;
  std::shared_ptr<Embedding> embed_tokens;
  std::vector<std::shared_ptr<JambaLayer>> layers;
  std::shared_ptr<Norm> final_layernorm;
  std::shared_ptr<Linear> lm_head;

 private:
  JambaOptions o_;
};

}  // namespace

Architecture jamba_architecture() {
  auto parse = [](const json& j, ModelConfig& c) {
    parse_sizes(j, c, "hidden_size", "num_hidden_layers", "num_attention_heads");
    c.num_kv_heads = get_int(j, "num_key_value_heads", c.num_heads);
    FOUNDRY_CHECK_AS(ValueError, c.num_kv_heads > 0 && c.num_heads % c.num_kv_heads == 0,
                     "config.json: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", c.num_heads,
                     c.num_kv_heads);
    c.intermediate_size = get_int(j, "intermediate_size");
    c.max_positions = get_int(j, "max_position_embeddings", 262144);
    c.norm_eps = get_double(j, "rms_norm_eps", 1e-6);
    c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", false);
    refuse_router_aux_loss(j, c);
    const std::string act = get_string(j, "hidden_act", "silu");
    if (!known_activation(act)) unsupported(c, "hidden_act '" + act + "'");
    parse_mamba_options(j, c, "mamba_");
  };
  auto build = [](const ModelConfig& c, const WeightSource& ws) -> std::unique_ptr<CausalLM> {
    json j = json::parse(c.json);
    JambaOptions o;
    const int64_t attn_period = get_int(j, "attn_layer_period", 8), attn_offset = get_int(j, "attn_layer_offset", 4);
    const int64_t exp_period = get_int(j, "expert_layer_period", 2), exp_offset = get_int(j, "expert_layer_offset", 1);
    FOUNDRY_CHECK_AS(ValueError, attn_period > 0 && exp_period > 0,
                     "config.json: attn_layer_period and expert_layer_period must be positive");
    o.experts = get_int(j, "num_experts", 16);
    o.top_k = get_int(j, "num_experts_per_tok", 2);
    o.attention_dropout = get_double(j, "attention_dropout", 0.0);
    o.mamba = parse_mamba_options(j, c, "mamba_");
    o.mamba.inner_norm_eps = c.norm_eps;
    int64_t rows = 0;
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const bool attn = i % attn_period == attn_offset;
      o.attention.push_back(attn);
      o.attention_index.push_back(attn ? rows++ : -1);
      o.sparse.push_back(o.experts > 1 && i % exp_period == exp_offset);
    }
    return std::make_unique<Jamba>(c, ws, o);
  };
  return {{"JambaForCausalLM"}, "jamba", parse, build};
}

}  // namespace foundry::models::hf
