// BloomForCausalLM (HF v4.40): ALiBi instead of positions, a LayerNorm right after the embedding,
// a fused per-head qkv projection ([H, 3, D] rows), GELU-tanh MLP, optional residuals taken after
// the LayerNorm (apply_residual_connection_post_layernorm), LM head tied to the embedding.
#include <cmath>

#include "foundry/ops/ops.h"
#include "models/hf/blocks.h"

namespace foundry::models::hf {

namespace {

struct BloomOptions {
  bool residual_after_norm = false;
  double hidden_dropout = 0, attention_dropout = 0;
};

class BloomAttention : public nn::Module {
 public:
  BloomAttention(const WeightSource& ws, const ModelConfig& c, double dropout)
      : H_(c.num_heads), D_(c.head_dim), dropout_(dropout) {
    query_key_value = add_block<Linear>(*this, ws, "query_key_value", c.hidden_size, 3 * c.hidden_size, true);
    dense = add_block<Linear>(*this, ws, "dense", c.hidden_size, c.hidden_size, true);
  }
  std::string type_name() const override { return "BloomAttention"; }
  Tensor forward(const Tensor& x, const LayerContext& ctx, int64_t layer) {
    const int64_t B = x.size(0), T = x.size(1);
    Tensor qkv = query_key_value->forward(x).reshape({B, T, H_, 3 * D_}).transpose(1, 2);
    Tensor q = qkv.narrow(3, 0, D_), k = qkv.narrow(3, D_, D_), v = qkv.narrow(3, 2 * D_, D_);
    return dense->forward(attend_layer(ctx, layer, q, k, v, is_training() ? dropout_ : 0.0));
  }
  std::shared_ptr<Linear> query_key_value, dense;

 private:
  int64_t H_, D_;
  double dropout_;
};

class BloomBlock : public nn::Module {
 public:
  BloomBlock(const WeightSource& ws, const ModelConfig& c, const BloomOptions& o) : o_(o) {
    const int64_t C = c.hidden_size;
    input_layernorm = add_block<Norm>(*this, ws, "input_layernorm", C, Norm::Kind::LayerNorm, c.norm_eps);
    self_attention = add_block<BloomAttention>(*this, ws, "self_attention", c, o.attention_dropout);
    post_attention_layernorm = add_block<Norm>(*this, ws, "post_attention_layernorm", C, Norm::Kind::LayerNorm, c.norm_eps);
    mlp = add_block<MLP>(*this, ws, "mlp", C, 4 * C, "gelu_pytorch_tanh", "dense_h_to_4h", "dense_4h_to_h");
  }
  std::string type_name() const override { return "BloomBlock"; }
  Tensor forward(const Tensor& h, const LayerContext& ctx, int64_t layer) {
    Tensor x = input_layernorm->forward(h);
    Tensor a = (o_.residual_after_norm ? x : h) + maybe_dropout(*this, self_attention->forward(x, ctx, layer), o_.hidden_dropout);
    x = post_attention_layernorm->forward(a);
    return (o_.residual_after_norm ? x : a) + maybe_dropout(*this, mlp->forward(x), o_.hidden_dropout);
  }
  std::shared_ptr<Norm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<BloomAttention> self_attention;
  std::shared_ptr<MLP> mlp;

 private:
  BloomOptions o_;
};

class Bloom : public CausalLM {
 public:
  Bloom(const ModelConfig& c, const WeightSource& ws, const BloomOptions& o) : CausalLM(c, ws.products()) {
    const int64_t C = c.hidden_size;
    const WeightSource tws = ws.pp("transformer");
    transformer = register_module("transformer", std::make_shared<Scope>("BloomModel"));
    word_embeddings = add_block<Embedding>(*transformer, tws, "word_embeddings", c.vocab_size, C);
    word_embeddings_layernorm =
        add_block<Norm>(*transformer, tws, "word_embeddings_layernorm", C, Norm::Kind::LayerNorm, c.norm_eps);
    auto list = transformer->register_module("h", std::make_shared<Scope>("ModuleList"));
    for (int64_t i = 0; i < c.num_layers; ++i)
      blocks.push_back(add_block<BloomBlock>(*list, tws.pp("h"), std::to_string(i), c, o));
    ln_f = add_block<Norm>(*transformer, tws, "ln_f", C, Norm::Kind::LayerNorm, c.norm_eps);
    lm_head = register_module("lm_head", std::make_shared<Linear>(ws.pp("lm_head"), word_embeddings->weight));
    dtype_ = word_embeddings->weight.dtype();
  }

  Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) override {
    const ModelConfig& c = config_;
    const LayerContext ctx = layer_context(c, input_ids, attention_mask, cache, dtype_, {.alibi_scale = 1.0});
    Tensor h = word_embeddings_layernorm->forward(word_embeddings->forward(input_ids));
    h = run_layers(*this, blocks, ctx, h, last_positions);
    return head(*lm_head, ln_f->forward(h));
  }

  std::shared_ptr<Scope> transformer;
  std::shared_ptr<Embedding> word_embeddings;
  std::shared_ptr<Norm> word_embeddings_layernorm, ln_f;
  std::vector<std::shared_ptr<BloomBlock>> blocks;
  std::shared_ptr<Linear> lm_head;
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
  auto build = [](const ModelConfig& c, const WeightSource& ws) -> std::unique_ptr<CausalLM> {
    json j = json::parse(c.json);
    BloomOptions o;
    o.residual_after_norm = get_bool(j, "apply_residual_connection_post_layernorm", false);
    o.hidden_dropout = get_double(j, "hidden_dropout", 0.0);
    o.attention_dropout = get_double(j, "attention_dropout", 0.0);
    return std::make_unique<Bloom>(c, ws, o);
  };
  return {{"BloomForCausalLM"}, "bloom", parse, build};
}

}  // namespace foundry::models::hf
