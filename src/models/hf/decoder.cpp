#include "models/hf/decoder.h"

#include <cmath>

#include "foundry/ops/ops.h"
#include "models/hf/blocks.h"

namespace foundry::models::hf {

namespace {

// Pre-norm block: h += attn(norm(h)); h += mlp(norm(h)), the MLP dense, routed (MoE) or both.
class DecoderLayer : public nn::Module {
 public:
  DecoderLayer(const WeightSource& ws, const ModelConfig& c, const DecoderSpec& s, bool sparse, Norm::Kind norm,
               double attn_dropout) {
    self_attn = add_block<DecoderAttention>(*this, ws, "self_attn", c, s, attn_dropout);
    const std::string act = s.mlp_act == "gelu_tanh" ? "gelu_pytorch_tanh" : s.mlp_act;
    if (!sparse) {
      mlp = add_block<GatedMLP>(*this, ws, "mlp", c.hidden_size, c.intermediate_size, act, s.mlp_bias);
    } else {
      SparseMoE::Options o{.experts = s.num_experts,
                           .top_k = s.experts_per_token,
                           .intermediate = s.expert_intermediate,
                           .shared_intermediate = s.shared_expert_intermediate,
                           .normalize = s.norm_topk_prob,
                           .names = {},
                           .act = act};
      if (s.moe == DecoderSpec::Moe::Mixtral) o.names = {"w1", "w3", "w2"};
      moe = add_block<SparseMoE>(*this, ws, s.moe == DecoderSpec::Moe::Mixtral ? "block_sparse_moe" : "mlp",
                                 c.hidden_size, o);
    }
    input_layernorm = add_block<Norm>(*this, ws, "input_layernorm", c.hidden_size, norm, c.norm_eps);
    post_attention_layernorm = add_block<Norm>(*this, ws, "post_attention_layernorm", c.hidden_size, norm, c.norm_eps);
  }
  std::string type_name() const override { return "DecoderLayer"; }
  Tensor forward(Tensor h, const LayerContext& ctx, int64_t layer) {
    Tensor x = input_layernorm->forward(h);
    x = post_attention_layernorm->add_and_norm(h, self_attn->forward(x, ctx, layer));  // h += attention
    Tensor delta = moe ? moe->forward(x) : mlp->forward(x);
    return records(h, delta) ? h + delta : residual_add_(h, delta);
  }
  std::shared_ptr<DecoderAttention> self_attn;
  std::shared_ptr<GatedMLP> mlp;
  std::shared_ptr<SparseMoE> moe;
  std::shared_ptr<Norm> input_layernorm, post_attention_layernorm;
};

class Decoder : public CausalLM {
 public:
  Decoder(const ModelConfig& c, const DecoderSpec& s, const WeightSource& ws) : CausalLM(c, ws.products()), spec_(s) {
    const json j = json::parse(c.json);
    const double attn_dropout = get_double(j, "attention_dropout", 0.0);
    const Norm::Kind norm = s.norm_plus_one ? Norm::Kind::GemmaRMSNorm : Norm::Kind::RMSNorm;
    const WeightSource mws = ws.pp("model");
    model = register_module("model", std::make_shared<Scope>("Model"));
    embed_tokens = add_block<Embedding>(*model, mws, "embed_tokens", c.vocab_size, c.hidden_size, config_pad_token(c));
    auto list = model->register_module("layers", std::make_shared<Scope>("ModuleList"));
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const bool sparse = s.moe != DecoderSpec::Moe::None && s.sparse_layers[size_t(i)];
      layers.push_back(add_block<DecoderLayer>(*list, mws.pp("layers"), std::to_string(i), c, s, sparse, norm,
                                               attn_dropout));
    }
    norm_ = add_block<Norm>(*model, mws, "norm", c.hidden_size, norm, c.norm_eps);
    // Tied checkpoints usually omit lm_head.weight; when present it is used as written.
    if (!c.tie_word_embeddings || ws.has("lm_head.weight"))
      lm_head = add_block<Linear>(*this, ws, "lm_head", c.hidden_size, c.vocab_size, false);
    else
      lm_head = register_module("lm_head", std::make_shared<Linear>(ws.pp("lm_head"), embed_tokens->weight));
    dtype_ = embed_tokens->weight.dtype();
  }

  Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) override {
    const ModelConfig& c = config_;
    if (is_training() && !spec_.unsupported_in_training.empty())
      raise<NotImplementedError>("{}: config.json sets {}, which only training uses and Foundry does not implement; "
                                 "set it to its default to train (inference is unaffected)",
                                 c.architecture, spec_.unsupported_in_training);
    const LayerContext ctx = layer_context(c, input_ids, attention_mask, cache, dtype_,
                                           {.rotary_dims = c.head_dim, .window = c.sliding_window});
    Tensor h = embed_tokens->forward(input_ids);
    // HF rounds the normaliser to the compute dtype first.
    if (spec_.scale_embeddings) h = h * full({}, std::sqrt(double(c.hidden_size)), h.dtype());
    h = run_layers(*this, layers, ctx, h, last_positions);
    return head(*lm_head, norm_->forward(h));
  }

  std::shared_ptr<Scope> model;
  std::shared_ptr<Embedding> embed_tokens;
  std::vector<std::shared_ptr<DecoderLayer>> layers;
  std::shared_ptr<Norm> norm_;
  std::shared_ptr<Linear> lm_head;

 private:
  DecoderSpec spec_;
};

}  // namespace

std::unique_ptr<CausalLM> build_decoder(const ModelConfig& c, const DecoderSpec& spec, const WeightSource& ws) {
  return std::make_unique<Decoder>(c, spec, ws);
}

void parse_decoder_common(const json& j, ModelConfig& c, bool silu) {
  parse_sizes(j, c, "hidden_size", "num_hidden_layers", "num_attention_heads");
  c.num_kv_heads = get_int(j, "num_key_value_heads", c.num_heads);
  c.head_dim = get_int(j, "head_dim", c.head_dim);
  c.intermediate_size = get_int(j, "intermediate_size");
  c.max_positions = get_int(j, "max_position_embeddings", 2048);
  c.norm_eps = get_double(j, "rms_norm_eps", 1e-6);
  c.rope_theta = get_double(j, "rope_theta", 10000.0);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", false);
  parse_rope_scaling(j, c, true);
  const std::string act = get_string(j, "hidden_act", "silu");
  if (silu && act != "silu") unsupported(c, "hidden_act '" + act + "'");
}

}  // namespace foundry::models::hf
