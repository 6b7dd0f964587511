// GPT2LMHeadModel (HF v4.40 semantics): learned positions, LayerNorm pre-norm blocks, fused qkv
// Conv1D projections (weights [in, out]), GELU-tanh MLP, dropout after the embeddings, on the
// attention weights and on each residual branch (embd_pdrop, attn_pdrop, resid_pdrop), LM head tied
// to the token embedding.
#include <cmath>

#include "foundry/ops/ops.h"
#include "models/hf/blocks.h"

namespace foundry::models::hf {

namespace {

struct GPT2Options {
  std::string activation;
  double embd_pdrop, attn_pdrop, resid_pdrop;
};

class GPT2Attention : public nn::Module {
 public:
  GPT2Attention(const WeightSource& ws, const ModelConfig& c, const GPT2Options& o)
      : C_(c.hidden_size), H_(c.num_heads), o_(o) {
    c_attn = add_block<Linear>(*this, ws, "c_attn", C_, 3 * C_, true, true);
    c_proj = add_block<Linear>(*this, ws, "c_proj", C_, C_, true, true,
                               Init::normal(0.02 / std::sqrt(2.0 * double(c.num_layers))));
  }
  std::string type_name() const override { return "GPT2Attention"; }
  Tensor forward(const Tensor& x, const LayerContext& ctx, int64_t layer) {
    Tensor qkv = c_attn->forward(x);
    Tensor q = split_heads(qkv.narrow(2, 0, C_), H_);
    Tensor k = split_heads(qkv.narrow(2, C_, C_), H_);
    Tensor v = split_heads(qkv.narrow(2, 2 * C_, C_), H_);
    Tensor a = attend_layer(ctx, layer, q, k, v, is_training() ? o_.attn_pdrop : 0.0);
    return maybe_dropout(*this, c_proj->forward(a), o_.resid_pdrop);
  }
  std::shared_ptr<Linear> c_attn, c_proj;

 private:
  int64_t C_, H_;
  GPT2Options o_;
};

class GPT2Block : public nn::Module {
 public:
  GPT2Block(const WeightSource& ws, const ModelConfig& c, const GPT2Options& o) {
    const int64_t C = c.hidden_size;
    ln_1 = add_block<Norm>(*this, ws, "ln_1", C, Norm::Kind::LayerNorm, c.norm_eps);
    attn = add_block<GPT2Attention>(*this, ws, "attn", c, o);
    ln_2 = add_block<Norm>(*this, ws, "ln_2", C, Norm::Kind::LayerNorm, c.norm_eps);
    mlp = add_block<MLP>(*this, ws, "mlp", C, c.intermediate_size, o.activation, "c_fc", "c_proj", true, true,
                         o.resid_pdrop, Init::normal(0.02 / std::sqrt(2.0 * double(c.num_layers))));
  }
  std::string type_name() const override { return "GPT2Block"; }
  Tensor forward(const Tensor& x, const LayerContext& ctx, int64_t layer) {
    Tensor h = x + attn->forward(ln_1->forward(x), ctx, layer);
    Tensor delta = mlp->forward(ln_2->forward(h));
    return records(h, delta) ? h + delta : residual_add_(h, delta);
  }
  std::shared_ptr<Norm> ln_1, ln_2;
  std::shared_ptr<GPT2Attention> attn;
  std::shared_ptr<MLP> mlp;
};

class GPT2 : public CausalLM {
 public:
  GPT2(const ModelConfig& c, const WeightSource& ws, const GPT2Options& o) : CausalLM(c, ws.products()), o_(o) {
    const WeightSource tws = ws.pp("transformer");
    transformer = register_module("transformer", std::make_shared<Scope>("GPT2Model"));
    wte = add_block<Embedding>(*transformer, tws, "wte", c.vocab_size, c.hidden_size);
    wpe = add_block<Embedding>(*transformer, tws, "wpe", c.max_positions, c.hidden_size);
    auto list = transformer->register_module("h", std::make_shared<Scope>("ModuleList"));
    for (int64_t i = 0; i < c.num_layers; ++i)
      blocks.push_back(add_block<GPT2Block>(*list, tws.pp("h"), std::to_string(i), c, o));
    ln_f = add_block<Norm>(*transformer, tws, "ln_f", c.hidden_size, Norm::Kind::LayerNorm, c.norm_eps);
    if (c.tie_word_embeddings || !ws.has("lm_head.weight"))
      lm_head = register_module("lm_head", std::make_shared<Linear>(ws.pp("lm_head"), wte->weight));
    else
      lm_head = add_block<Linear>(*this, ws, "lm_head", c.hidden_size, c.vocab_size, false);
    dtype_ = wte->weight.dtype();
  }

  Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) override {
    const ModelConfig& c = config_;
    const LayerContext ctx = layer_context(c, input_ids, attention_mask, cache, dtype_);
    const int64_t last = amax(ctx.positions).item<int64_t>();
    if (last >= c.max_positions)
      raise<ValueError>("{}: position {} is past n_positions ({})", c.architecture, last, c.max_positions);
    Tensor h = maybe_dropout(*this, wte->forward(input_ids) + wpe->forward(ctx.positions), o_.embd_pdrop);
    h = run_layers(*this, blocks, ctx, h, last_positions);
    return head(*lm_head, ln_f->forward(h));
  }

  std::shared_ptr<Scope> transformer;
  std::shared_ptr<Embedding> wte, wpe;
  std::vector<std::shared_ptr<GPT2Block>> blocks;
  std::shared_ptr<Norm> ln_f;
  std::shared_ptr<Linear> lm_head;

 private:
  GPT2Options o_;
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
  return {{"GPT2LMHeadModel"}, "gpt2", parse_gpt2,
          [](const ModelConfig& c, const WeightSource& ws) -> std::unique_ptr<CausalLM> {
            json j = json::parse(c.json);
            GPT2Options o{get_string(j, "activation_function", "gelu_new"), get_double(j, "embd_pdrop", 0.1),
                          get_double(j, "attn_pdrop", 0.1), get_double(j, "resid_pdrop", 0.1)};
            return std::make_unique<GPT2>(c, ws, o);
          }};
}

}  // namespace foundry::models::hf
