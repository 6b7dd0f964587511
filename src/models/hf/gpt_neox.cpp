// GPTNeoXForCausalLM (HF v4.40): LayerNorm blocks with a fused per-head qkv projection ([H, 3, D]
// rows), rotary embeddings on the first rotary_pct of each head, parallel (x + attn(ln1 x) +
// mlp(ln2 x)) or sequential residuals, hidden_dropout after the embedding and each branch,
// attention_dropout on the attention weights, untied `embed_out` head.
#include "foundry/ops/ops.h"
#include "models/hf/blocks.h"

namespace foundry::models::hf {

namespace {

struct NeoXOptions {
  bool parallel = true;
  int64_t rot_dim = 0;
  std::string act;
  double attention_dropout = 0, hidden_dropout = 0;
};

class NeoXAttention : public nn::Module {
 public:
  NeoXAttention(const WeightSource& ws, const ModelConfig& c, const NeoXOptions& o) : H_(c.num_heads), D_(c.head_dim), o_(o) {
    query_key_value = add_block<Linear>(*this, ws, "query_key_value", c.hidden_size, 3 * c.hidden_size, c.attention_bias);
    dense = add_block<Linear>(*this, ws, "dense", c.hidden_size, c.hidden_size, c.attention_bias);
  }
  std::string type_name() const override { return "GPTNeoXAttention"; }
  Tensor forward(const Tensor& x, const LayerContext& ctx, int64_t layer) {
    const int64_t B = x.size(0), T = x.size(1);
    Tensor qkv = query_key_value->forward(x).reshape({B, T, H_, 3 * D_}).transpose(1, 2);  // [B, H, T, 3D]
    Tensor q = apply_rope(qkv.narrow(3, 0, D_), ctx.cos, ctx.sin);
    Tensor k = apply_rope(qkv.narrow(3, D_, D_), ctx.cos, ctx.sin);
    Tensor v = qkv.narrow(3, 2 * D_, D_);
    return dense->forward(attend_layer(ctx, layer, q, k, v, is_training() ? o_.attention_dropout : 0.0));
  }
  std::shared_ptr<Linear> query_key_value, dense;

 private:
  int64_t H_, D_;
  NeoXOptions o_;
};

// Parallel: h + attn(ln1 h) + mlp(ln2 h); sequential: h += attn(ln1 h); h += mlp(ln2 h).
class NeoXLayer : public nn::Module {
 public:
  NeoXLayer(const WeightSource& ws, const ModelConfig& c, const NeoXOptions& o) : o_(o) {
    input_layernorm = add_block<Norm>(*this, ws, "input_layernorm", c.hidden_size, Norm::Kind::LayerNorm, c.norm_eps);
    post_attention_layernorm =
        add_block<Norm>(*this, ws, "post_attention_layernorm", c.hidden_size, Norm::Kind::LayerNorm, c.norm_eps);
    attention = add_block<NeoXAttention>(*this, ws, "attention", c, o);
    mlp = add_block<MLP>(*this, ws, "mlp", c.hidden_size, c.intermediate_size, o.act, "dense_h_to_4h", "dense_4h_to_h");
  }
  std::string type_name() const override { return "GPTNeoXLayer"; }
  Tensor forward(const Tensor& h, const LayerContext& ctx, int64_t layer) {
    Tensor attn = maybe_dropout(*this, attention->forward(input_layernorm->forward(h), ctx, layer), o_.hidden_dropout);
    if (o_.parallel)
      return h + attn + maybe_dropout(*this, mlp->forward(post_attention_layernorm->forward(h)), o_.hidden_dropout);
    Tensor x = h + attn;
    return x + maybe_dropout(*this, mlp->forward(post_attention_layernorm->forward(x)), o_.hidden_dropout);
  }
  std::shared_ptr<Norm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<NeoXAttention> attention;
  std::shared_ptr<MLP> mlp;

 private:
  NeoXOptions o_;
};

class GPTNeoX : public CausalLM {
 public:
  GPTNeoX(const ModelConfig& c, const WeightSource& ws, const NeoXOptions& o) : CausalLM(c, ws.products()), o_(o) {
    const WeightSource tws = ws.pp("gpt_neox");
    gpt_neox = register_module("gpt_neox", std::make_shared<Scope>("GPTNeoXModel"));
    embed_in = add_block<Embedding>(*gpt_neox, tws, "embed_in", c.vocab_size, c.hidden_size);
    auto list = gpt_neox->register_module("layers", std::make_shared<Scope>("ModuleList"));
    for (int64_t i = 0; i < c.num_layers; ++i)
      layers.push_back(add_block<NeoXLayer>(*list, tws.pp("layers"), std::to_string(i), c, o));
    final_layer_norm = add_block<Norm>(*gpt_neox, tws, "final_layer_norm", c.hidden_size, Norm::Kind::LayerNorm, c.norm_eps);
    embed_out = c.tie_word_embeddings
                    ? register_module("embed_out", std::make_shared<Linear>(ws.pp("embed_out"), embed_in->weight))
                    : add_block<Linear>(*this, ws, "embed_out", c.hidden_size, c.vocab_size, false);
    dtype_ = embed_in->weight.dtype();
  }

  Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) override {
    const ModelConfig& c = config_;
    const LayerContext ctx = layer_context(c, input_ids, attention_mask, cache, dtype_, {.rotary_dims = o_.rot_dim});
    Tensor h = maybe_dropout(*this, embed_in->forward(input_ids), o_.hidden_dropout);
    h = run_layers(*this, layers, ctx, h, last_positions);
    return head(*embed_out, final_layer_norm->forward(h));
  }

  std::shared_ptr<Scope> gpt_neox;
  std::shared_ptr<Embedding> embed_in;
  std::vector<std::shared_ptr<NeoXLayer>> layers;
  std::shared_ptr<Norm> final_layer_norm;
  std::shared_ptr<Linear> embed_out;

 private:
  NeoXOptions o_;
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
  auto build = [](const ModelConfig& c, const WeightSource& ws) -> std::unique_ptr<CausalLM> {
    json j = json::parse(c.json);
    NeoXOptions o;
    o.rot_dim = int64_t(double(c.head_dim) * get_double(j, "rotary_pct", 0.25));
    FOUNDRY_CHECK_AS(ValueError, o.rot_dim > 0 && o.rot_dim % 2 == 0,
                     "config.json: rotary_pct gives {} rotary dims; need an even number > 0", o.rot_dim);
    o.parallel = get_bool(j, "use_parallel_residual", true);
    o.act = get_string(j, "hidden_act", "gelu");
    o.attention_dropout = get_double(j, "attention_dropout", 0.0);
    o.hidden_dropout = get_double(j, "hidden_dropout", 0.0);
    return std::make_unique<GPTNeoX>(c, ws, o);
  };
  return {{"GPTNeoXForCausalLM"}, "gpt_neox", parse, build};
}

}  // namespace foundry::models::hf
