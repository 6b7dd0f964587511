// OPTForCausalLM (HF v4.40): learned positions offset by 2 (padding positions read row 1), biased
// attention and ReLU MLP, pre-LayerNorm (do_layer_norm_before) or post-LayerNorm blocks, optional
// project_in/out when word_embed_proj_dim differs from hidden_size, dropout after the embeddings
// and each residual branch, LayerDrop in training (layerdrop), LM head tied to the embedding.
#include "foundry/ops/ops.h"
#include "models/hf/blocks.h"

namespace foundry::models::hf {

namespace {

struct OPTOptions {
  bool pre_norm = true, final_norm = true;
  int64_t proj_dim = 0;
  std::string act;
  double dropout = 0, attention_dropout = 0;
  double layerdrop = 0;  ///< in training, each layer is skipped with this probability
};

class OPTAttention : public nn::Module {
 public:
  OPTAttention(const WeightSource& ws, const ModelConfig& c, double dropout) : H_(c.num_heads), dropout_(dropout) {
    const int64_t C = c.hidden_size;
    q_proj = add_block<Linear>(*this, ws, "q_proj", C, C, true);
    k_proj = add_block<Linear>(*this, ws, "k_proj", C, C, true);
    v_proj = add_block<Linear>(*this, ws, "v_proj", C, C, true);
    out_proj = add_block<Linear>(*this, ws, "out_proj", C, C, true);
  }
  std::string type_name() const override { return "OPTAttention"; }
  Tensor forward(const Tensor& x, const LayerContext& ctx, int64_t layer) {
    std::vector<Tensor> qkv = Linear::forward_each(x, {q_proj.get(), k_proj.get(), v_proj.get()});
    Tensor q = split_heads(qkv[0], H_), k = split_heads(qkv[1], H_), v = split_heads(qkv[2], H_);
    return out_proj->forward(attend_layer(ctx, layer, q, k, v, is_training() ? dropout_ : 0.0));
  }
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, out_proj;

 private:
  int64_t H_;
  double dropout_;
};

// Pre-norm (h += attn(ln h); h += fc2(act(fc1(ln h)))) or post-norm (the norms after each sum).
class OPTLayer : public nn::Module {
 public:
  OPTLayer(const WeightSource& ws, const ModelConfig& c, const OPTOptions& o) : act_(o.act), o_(o) {
    const int64_t C = c.hidden_size, F = c.intermediate_size;
    self_attn = add_block<OPTAttention>(*this, ws, "self_attn", c, o.attention_dropout);
    self_attn_layer_norm = add_block<Norm>(*this, ws, "self_attn_layer_norm", C, Norm::Kind::LayerNorm, c.norm_eps);
    fc1 = add_block<Linear>(*this, ws, "fc1", C, F, true);
    fc2 = add_block<Linear>(*this, ws, "fc2", F, C, true);
    final_layer_norm = add_block<Norm>(*this, ws, "final_layer_norm", C, Norm::Kind::LayerNorm, c.norm_eps);
  }
  std::string type_name() const override { return "OPTDecoderLayer"; }
  Tensor forward(const Tensor& x, const LayerContext& ctx, int64_t layer) {
    Tensor h = x;
    Tensor a = o_.pre_norm ? self_attn_layer_norm->forward(h) : h;
    h = h + maybe_dropout(*this, self_attn->forward(a, ctx, layer), o_.dropout);
    if (!o_.pre_norm) h = self_attn_layer_norm->forward(h);
    a = o_.pre_norm ? final_layer_norm->forward(h) : h;
    h = h + maybe_dropout(*this, fc2->forward(activation(act_, fc1->forward(a))), o_.dropout);
    return o_.pre_norm ? h : final_layer_norm->forward(h);
  }
  std::shared_ptr<OPTAttention> self_attn;
  std::shared_ptr<Norm> self_attn_layer_norm, final_layer_norm;
  std::shared_ptr<Linear> fc1, fc2;

 private:
  std::string act_;
  OPTOptions o_;
};

class OPT : public CausalLM {
 public:
  OPT(const ModelConfig& c, const WeightSource& ws, const OPTOptions& o) : CausalLM(c, ws.products()), o_(o) {
    const int64_t C = c.hidden_size;
    const WeightSource dws = ws.pp("model").pp("decoder");
    auto model = register_module("model", std::make_shared<Scope>("OPTModel"));
    decoder = model->register_module("decoder", std::make_shared<Scope>("OPTDecoder"));
    embed_tokens = add_block<Embedding>(*decoder, dws, "embed_tokens", c.vocab_size, o.proj_dim, config_pad_token(c));
    embed_positions = add_block<Embedding>(*decoder, dws, "embed_positions", c.max_positions + 2, C);
    if (o.final_norm)
      final_layer_norm = add_block<Norm>(*decoder, dws, "final_layer_norm", C, Norm::Kind::LayerNorm, c.norm_eps);
    if (o.proj_dim != C) {
      project_out = add_block<Linear>(*decoder, dws, "project_out", C, o.proj_dim, false);
      project_in = add_block<Linear>(*decoder, dws, "project_in", o.proj_dim, C, false);
    }
    auto list = decoder->register_module("layers", std::make_shared<Scope>("ModuleList"));
    for (int64_t i = 0; i < c.num_layers; ++i)
      layers.push_back(add_block<OPTLayer>(*list, dws.pp("layers"), std::to_string(i), c, o));
    lm_head = register_module("lm_head", std::make_shared<Linear>(ws.pp("lm_head"), embed_tokens->weight));
    dtype_ = embed_tokens->weight.dtype();
  }

  Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) override {
    const ModelConfig& c = config_;
    const LayerContext ctx = layer_context(c, input_ids, attention_mask, cache, dtype_);
    // OPTLearnedPositionalEmbedding: cumsum(mask) * mask - 1, plus the offset of 2.
    Tensor m = ctx.mask.to(DType::Int64);
    Tensor positions = (cumsum(m, 1) * m + ones({}, DType::Int64)).narrow(1, ctx.past, ctx.T);
    const int64_t last = amax(positions).item<int64_t>();
    if (last >= c.max_positions + 2)
      raise<ValueError>("{}: position {} is past max_position_embeddings ({})", c.architecture, last - 2,
                        c.max_positions);
    Tensor h = embed_tokens->forward(input_ids);
    if (project_in) h = project_in->forward(h);
    h = maybe_dropout(*this, h + embed_positions->forward(positions), o_.dropout);
    h = run_layers(*this, is_training() && o_.layerdrop > 0 ? layers_kept() : layers, ctx, h, last_positions);
    if (final_layer_norm) h = final_layer_norm->forward(h);
    if (project_out) h = project_out->forward(h);
    return head(*lm_head, h);
  }

  std::shared_ptr<Scope> decoder;
  std::shared_ptr<Embedding> embed_tokens, embed_positions;
  std::shared_ptr<Linear> project_in, project_out, lm_head;
  std::vector<std::shared_ptr<OPTLayer>> layers;
  std::shared_ptr<Norm> final_layer_norm;

 private:
  // OPTDecoder's LayerDrop: one uniform draw per layer (Foundry's generator, as dropout's masks);
  // the layer is skipped when the draw is below layerdrop. Training has no cache, so the layers'
  // indices (which address the cache) may shift.
  std::vector<std::shared_ptr<OPTLayer>> layers_kept() const {
    std::vector<std::shared_ptr<OPTLayer>> kept;
    for (const auto& layer : layers)
      if (rand({}).item<float>() >= o_.layerdrop) kept.push_back(layer);
    return kept;
  }

  OPTOptions o_;
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
  auto build = [](const ModelConfig& c, const WeightSource& ws) -> std::unique_ptr<CausalLM> {
    json j = json::parse(c.json);
    OPTOptions o;
    o.pre_norm = get_bool(j, "do_layer_norm_before", true);
    o.final_norm = o.pre_norm && !get_bool(j, "_remove_final_layer_norm", false);
    o.proj_dim = get_int(j, "word_embed_proj_dim", c.hidden_size);
    o.act = get_string(j, "activation_function", "relu");
    o.dropout = get_double(j, "dropout", 0.1);
    o.attention_dropout = get_double(j, "attention_dropout", 0.0);
    o.layerdrop = get_double(j, "layerdrop", 0.0);
    return std::make_unique<OPT>(c, ws, o);
  };
  return {{"OPTForCausalLM"}, "opt", parse, build};
}

}  // namespace foundry::models::hf
