// FalconForCausalLM (HF v4.40), all three layouts: new_decoder_architecture (grouped kv heads,
// ln_attn + ln_mlp, parallel), multi_query (one kv head, parallel_attn) and classic (per-head
// qkv). Rotary embeddings, or ALiBi (which Falcon scales by 1/sqrt(D) with the scores); optional
// biases; GELU MLP; LM head tied to the embedding.
#include <cmath>

#include "foundry/ops/ops.h"
#include "models/hf/blocks.h"

namespace foundry::models::hf {

namespace {

struct FalconOptions {
  bool new_arch = false, multi_query = true, parallel = true, bias = false, alibi = false;
  double hidden_dropout = 0, attention_dropout = 0;
};

class FalconAttention : public nn::Module {
 public:
  FalconAttention(const WeightSource& ws, const ModelConfig& c, const FalconOptions& o)
      : H_(c.num_heads), Hkv_(c.num_kv_heads), D_(c.head_dim), o_(o) {
    query_key_value = add_block<Linear>(*this, ws, "query_key_value", c.hidden_size, (H_ + 2 * Hkv_) * D_, o.bias);
    dense = add_block<Linear>(*this, ws, "dense", H_ * D_, c.hidden_size, o.bias);
  }
  std::string type_name() const override { return "FalconAttention"; }

  // HF's _split_heads for the three layouts -> q [B, H, T, D], k and v [B, Hkv, T, D].
  std::tuple<Tensor, Tensor, Tensor> split_qkv(const Tensor& qkv, int64_t B, int64_t T) const {
    if (o_.new_arch) {
      const int64_t g = H_ / Hkv_;
      Tensor x = qkv.reshape({B, T, Hkv_, g + 2, D_});
      Tensor q = x.narrow(3, 0, g).reshape({B, T, H_, D_}).transpose(1, 2);
      return {q, x.select(3, g).transpose(1, 2), x.select(3, g + 1).transpose(1, 2)};
    }
    if (!o_.multi_query) {
      Tensor x = qkv.reshape({B, T, H_, 3 * D_}).transpose(1, 2);
      return {x.narrow(3, 0, D_), x.narrow(3, D_, D_), x.narrow(3, 2 * D_, D_)};
    }
    Tensor x = qkv.reshape({B, T, H_ + 2, D_});
    return {x.narrow(2, 0, H_).transpose(1, 2), x.narrow(2, H_, 1).transpose(1, 2),
            x.narrow(2, H_ + 1, 1).transpose(1, 2)};
  }

  Tensor forward(const Tensor& x, const LayerContext& ctx, int64_t layer) {
    auto [q, k, v] = split_qkv(query_key_value->forward(x), x.size(0), x.size(1));
    if (!o_.alibi) {
      q = apply_rope(q, ctx.cos, ctx.sin);
      k = apply_rope(k, ctx.cos, ctx.sin);
    }
    return dense->forward(attend_layer(ctx, layer, q, k, v, is_training() ? o_.attention_dropout : 0.0));
  }
  std::shared_ptr<Linear> query_key_value, dense;

 private:
  int64_t H_, Hkv_, D_;
  FalconOptions o_;
};

// new_decoder_architecture: h + attn(ln_attn h) + mlp(ln_mlp h); parallel_attn: one norm feeding
// both; else sequential with post_attention_layernorm.
class FalconLayer : public nn::Module {
 public:
  FalconLayer(const WeightSource& ws, const ModelConfig& c, const FalconOptions& o) : o_(o) {
    const int64_t C = c.hidden_size;
    self_attention = add_block<FalconAttention>(*this, ws, "self_attention", c, o);
    mlp = add_block<MLP>(*this, ws, "mlp", C, c.intermediate_size, "gelu", "dense_h_to_4h", "dense_4h_to_h", o.bias);
    auto norm = [&](const char* name) { return add_block<Norm>(*this, ws, name, C, Norm::Kind::LayerNorm, c.norm_eps); };
    if (o.new_arch) {
      ln_attn = norm("ln_attn");
      ln_mlp = norm("ln_mlp");
    } else {
      ln_attn = norm("input_layernorm");
      if (!o.parallel) ln_mlp = norm("post_attention_layernorm");
    }
  }
  std::string type_name() const override { return "FalconDecoderLayer"; }
  Tensor forward(const Tensor& h, const LayerContext& ctx, int64_t layer) {
    Tensor x = ln_attn->forward(h);
    Tensor attn = self_attention->forward(x, ctx, layer);
    if (!o_.new_arch && !o_.parallel) {
      Tensor a = h + maybe_dropout(*this, attn, o_.hidden_dropout);
      return a + maybe_dropout(*this, mlp->forward(ln_mlp->forward(a)), o_.hidden_dropout);
    }
    Tensor m = o_.new_arch ? ln_mlp->forward(h) : x;
    return h + maybe_dropout(*this, attn + mlp->forward(m), o_.hidden_dropout);
  }
  std::shared_ptr<FalconAttention> self_attention;
  std::shared_ptr<MLP> mlp;
  std::shared_ptr<Norm> ln_attn, ln_mlp;

 private:
  FalconOptions o_;
};

class Falcon : public CausalLM {
 public:
  Falcon(const ModelConfig& c, const WeightSource& ws, const FalconOptions& o) : CausalLM(c, ws.products()), o_(o) {
    const WeightSource tws = ws.pp("transformer");
    transformer = register_module("transformer", std::make_shared<Scope>("FalconModel"));
    word_embeddings = add_block<Embedding>(*transformer, tws, "word_embeddings", c.vocab_size, c.hidden_size);
    auto list = transformer->register_module("h", std::make_shared<Scope>("ModuleList"));
    for (int64_t i = 0; i < c.num_layers; ++i)
      layers.push_back(add_block<FalconLayer>(*list, tws.pp("h"), std::to_string(i), c, o));
    ln_f = add_block<Norm>(*transformer, tws, "ln_f", c.hidden_size, Norm::Kind::LayerNorm, c.norm_eps);
    lm_head = register_module("lm_head", std::make_shared<Linear>(ws.pp("lm_head"), word_embeddings->weight));
    dtype_ = word_embeddings->weight.dtype();
  }

  Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) override {
    const ModelConfig& c = config_;
    // ALiBi: Falcon scales the bias by 1/sqrt(D) together with the scores.
    AttentionPositions p;
    if (o_.alibi) p.alibi_scale = 1.0 / std::sqrt(double(c.head_dim));
    else p.rotary_dims = c.head_dim;
    const LayerContext ctx = layer_context(c, input_ids, attention_mask, cache, dtype_, p);
    Tensor h = word_embeddings->forward(input_ids);
    h = run_layers(*this, layers, ctx, h, last_positions);
    return head(*lm_head, ln_f->forward(h));
  }

  std::shared_ptr<Scope> transformer;
  std::shared_ptr<Embedding> word_embeddings;
  std::vector<std::shared_ptr<FalconLayer>> layers;
  std::shared_ptr<Norm> ln_f;
  std::shared_ptr<Linear> lm_head;

 private:
  FalconOptions o_;
};

FalconOptions falcon_options(const json& j) {
  FalconOptions o;
  o.new_arch = get_bool(j, "new_decoder_architecture", false);
  o.multi_query = get_bool(j, "multi_query", true);
  o.parallel = get_bool(j, "parallel_attn", true);
  o.bias = get_bool(j, "bias", false);
  o.alibi = get_bool(j, "alibi", false);
  o.hidden_dropout = get_double(j, "hidden_dropout", 0.0);
  o.attention_dropout = get_double(j, "attention_dropout", 0.0);
  return o;
}

}  // namespace

Architecture falcon_architecture() {
  auto parse = [](const json& j, ModelConfig& c) {
    parse_sizes(j, c, "hidden_size", "num_hidden_layers", "num_attention_heads");
    const FalconOptions o = falcon_options(j);
    c.num_kv_heads = o.new_arch ? get_int(j, "num_kv_heads", c.num_heads) : (o.multi_query ? 1 : c.num_heads);
    c.intermediate_size = get_int(j, "ffn_hidden_size", 4 * c.hidden_size);
    c.max_positions = get_int(j, "max_position_embeddings", 2048);
    c.norm_eps = get_double(j, "layer_norm_epsilon", 1e-5);
    c.rope_theta = get_double(j, "rope_theta", 10000.0);
    c.tie_word_embeddings = true;
    if (get_string(j, "activation", "gelu") != "gelu") unsupported(c, "activation '" + get_string(j, "activation", "") + "'");
    if (!get_bool(j, "alibi", false)) parse_rope_scaling(j, c, false);  // linear | dynamic; ALiBi has no rotary
  };
  auto build = [](const ModelConfig& c, const WeightSource& ws) -> std::unique_ptr<CausalLM> {
    return std::make_unique<Falcon>(c, ws, falcon_options(json::parse(c.json)));
  };
  return {{"FalconForCausalLM"}, "falcon", parse, build};
}

}  // namespace foundry::models::hf
