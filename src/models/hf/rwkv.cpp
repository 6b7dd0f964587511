// RwkvForCausalLM (HF v4.40, RWKV-4): LayerNorm blocks of time mixing (token shift, receptance-
// gated WKV: the rwkv_wkv op, in the stable running-max form) and channel mixing (token shift,
// squared-ReLU key, receptance gate); pre_ln on the first block. In eval mode the outputs of the
// blocks' last projections are divided by 2^(layer // rescale_every) and the residual halved every
// rescale_every layers, as transformers does by rescaling the weights (a power of two: the same
// numbers). The attention mask is ignored, as in transformers. Generation carries per layer the
// two token-shift inputs and the WKV state.
#include <cmath>

#include "foundry/ops/ops.h"
#include "models/hf/blocks.h"

namespace foundry::models::hf {

namespace {

struct RwkvOptions {
  int64_t attention_hidden = 0, intermediate = 0, rescale_every = 6;
};

// State slots of a layer in the cache.
enum Slot { kFeedForwardShift = 0, kAttentionShift = 1, kWkv = 2 };

// Each position's previous input: the cached last input (or zeros) before the first.
Tensor time_shift(const Tensor& x, KVCache* cache, int64_t layer, Slot slot) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  Tensor prev = cache && cache->state(layer, slot).defined() ? cache->state(layer, slot).unsqueeze(1)
                                                              : zeros({B, 1, C}, x.dtype());
  if (cache) cache->state(layer, slot) = x.select(1, T - 1).contiguous();
  return T == 1 ? prev : cat({prev, x.narrow(1, 0, T - 1)}, 1);
}

Tensor mix(const Tensor& x, const Tensor& shifted, const Tensor& ratio) { return shifted + (x - shifted) * ratio; }

// transformers' RwkvPreTrainedModel._init_weights for the time-mixing ratios and decays.
struct RwkvInit {
  int64_t layer, layers, hidden, attention_hidden;
  double ratio_0_to_1() const { return layers > 1 ? double(layer) / double(layers - 1) : 0.0; }
  double ratio_1_to_almost0() const { return 1.0 - double(layer) / double(layers); }
  // time_weight^power (+ shift): time_weight = i / hidden over the hidden channels.
  Init ramp(double power, double shift = 0) const {
    const int64_t H = hidden;
    return Init::custom([H, power, shift](Tensor& t) {
      Tensor w = arange(0, H, 1, DType::Float64) / full({}, double(H), DType::Float64);
      t.copy_((pow(w, power) + full({}, shift, DType::Float64)).to(DType::Float32).reshape({1, 1, H}));
    });
  }
  Init decay() const {
    const int64_t A = attention_hidden;
    const double r = ratio_0_to_1();
    return Init::custom([A, r](Tensor& t) {
      std::vector<float> v(static_cast<size_t>(A));
      for (int64_t h = 0; h < A; ++h)
        v[size_t(h)] = float(-5 + 8 * std::pow(double(h) / double(std::max<int64_t>(1, A - 1)), 0.7 + 1.3 * r));
      t.copy_(tensor<float>(v, {A}));
    });
  }
};

class RwkvSelfAttention : public nn::Module {
 public:
  RwkvSelfAttention(const WeightSource& ws, const ModelConfig& c, const RwkvOptions& o, const RwkvInit& in)
      : time_decay(register_parameter("time_decay", ws.get("time_decay", {o.attention_hidden}, in.decay()))),
        // transformers' init: ones_like(time_first * log(0.3) + zigzag), i.e. ones.
        time_first(register_parameter("time_first", ws.get("time_first", {o.attention_hidden}, Init::ones()))),
        time_mix_key(register_parameter("time_mix_key", ws.get("time_mix_key", {1, 1, c.hidden_size}, in.ramp(in.ratio_1_to_almost0())))),
        time_mix_value(register_parameter(
            "time_mix_value", ws.get("time_mix_value", {1, 1, c.hidden_size}, in.ramp(in.ratio_1_to_almost0(), 0.3 * in.ratio_0_to_1())))),
        time_mix_receptance(register_parameter(
            "time_mix_receptance", ws.get("time_mix_receptance", {1, 1, c.hidden_size}, in.ramp(0.5 * in.ratio_1_to_almost0())))) {
    const int64_t H = c.hidden_size, A = o.attention_hidden;
    key = add_block<Linear>(*this, ws, "key", H, A, false, false, Init::fan_in_uniform(H));
    value = add_block<Linear>(*this, ws, "value", H, A, false, false, Init::fan_in_uniform(H));
    receptance = add_block<Linear>(*this, ws, "receptance", H, A, false, false, Init::fan_in_uniform(H));
    output = add_block<Linear>(*this, ws, "output", A, H, false, false, Init::fan_in_uniform(A));
  }
  std::string type_name() const override { return "RwkvSelfAttention"; }
  Tensor forward(const Tensor& x, KVCache* cache, int64_t layer) {
    Tensor shifted = time_shift(x, cache, layer, kAttentionShift);
    Tensor k = key->forward(mix(x, shifted, time_mix_key));
    Tensor v = value->forward(mix(x, shifted, time_mix_value));
    Tensor r = sigmoid(receptance->forward(mix(x, shifted, time_mix_receptance)));
    Tensor wkv = cache ? rwkv_wkv_with_state(time_decay, time_first, k, v, cache->state(layer, kWkv))
                       : rwkv_wkv(time_decay, time_first, k, v);
    return output->forward(r * wkv);
  }
  Tensor& time_decay;
  Tensor& time_first;
  Tensor& time_mix_key;
  Tensor& time_mix_value;
  Tensor& time_mix_receptance;
  std::shared_ptr<Linear> key, value, receptance, output;
};

class RwkvFeedForward : public nn::Module {
 public:
  RwkvFeedForward(const WeightSource& ws, const ModelConfig& c, const RwkvOptions& o, const RwkvInit& in)
      : time_mix_key(register_parameter("time_mix_key", ws.get("time_mix_key", {1, 1, c.hidden_size}, in.ramp(in.ratio_1_to_almost0())))),
        time_mix_receptance(register_parameter(
            "time_mix_receptance", ws.get("time_mix_receptance", {1, 1, c.hidden_size}, in.ramp(in.ratio_1_to_almost0())))) {
    const int64_t H = c.hidden_size, I = o.intermediate;
    key = add_block<Linear>(*this, ws, "key", H, I, false, false, Init::fan_in_uniform(H));
    receptance = add_block<Linear>(*this, ws, "receptance", H, H, false, false, Init::fan_in_uniform(H));
    value = add_block<Linear>(*this, ws, "value", I, H, false, false, Init::fan_in_uniform(I));
  }
  std::string type_name() const override { return "RwkvFeedForward"; }
  Tensor forward(const Tensor& x, KVCache* cache, int64_t layer) {
    Tensor shifted = time_shift(x, cache, layer, kFeedForwardShift);
    Tensor k = relu(key->forward(mix(x, shifted, time_mix_key)));
    Tensor r = sigmoid(receptance->forward(mix(x, shifted, time_mix_receptance)));
    return r * value->forward(k * k);
  }
  Tensor& time_mix_key;
  Tensor& time_mix_receptance;
  std::shared_ptr<Linear> key, receptance, value;
};

class RwkvBlock : public nn::Module {
 public:
  RwkvBlock(const WeightSource& ws, const ModelConfig& c, const RwkvOptions& o, int64_t layer) : layer_(layer), o_(o) {
    const RwkvInit in{layer, c.num_layers, c.hidden_size, o.attention_hidden};
    if (layer == 0) pre_ln = add_block<Norm>(*this, ws, "pre_ln", c.hidden_size, Norm::Kind::LayerNorm, c.norm_eps);
    ln1 = add_block<Norm>(*this, ws, "ln1", c.hidden_size, Norm::Kind::LayerNorm, c.norm_eps);
    ln2 = add_block<Norm>(*this, ws, "ln2", c.hidden_size, Norm::Kind::LayerNorm, c.norm_eps);
    attention = add_block<RwkvSelfAttention>(*this, ws, "attention", c, o, in);
    feed_forward = add_block<RwkvFeedForward>(*this, ws, "feed_forward", c, o, in);
  }
  std::string type_name() const override { return "RwkvBlock"; }
  Tensor forward(Tensor h, KVCache* cache) {
    if (pre_ln) h = pre_ln->forward(h);
    const bool rescale = !is_training() && o_.rescale_every > 0;
    // 2^-(layer // rescale_every): exact, as transformers' division of the weights.
    const double scale = rescale ? std::ldexp(1.0, -int(layer_ / o_.rescale_every)) : 1.0;
    Tensor a = attention->forward(ln1->forward(h), cache, layer_);
    h = h + (scale == 1.0 ? a : a * full({}, scale, a.dtype()));
    Tensor f = feed_forward->forward(ln2->forward(h), cache, layer_);
    h = h + (scale == 1.0 ? f : f * full({}, scale, f.dtype()));
    if (rescale && (layer_ + 1) % o_.rescale_every == 0) h = h * full({}, 0.5, h.dtype());
    return h;
  }
  std::shared_ptr<Norm> pre_ln, ln1, ln2;
  std::shared_ptr<RwkvSelfAttention> attention;
  std::shared_ptr<RwkvFeedForward> feed_forward;

 private:
  int64_t layer_;
  RwkvOptions o_;
};

class Rwkv : public CausalLM {
 public:
  Rwkv(const ModelConfig& c, const WeightSource& ws, const RwkvOptions& o) : CausalLM(c, ws.products()) {
    const WeightSource rws = ws.pp("rwkv");
    rwkv = register_module("rwkv", std::make_shared<Scope>("RwkvModel"));
    embeddings = add_block<Embedding>(*rwkv, rws, "embeddings", c.vocab_size, c.hidden_size);
    auto list = rwkv->register_module("blocks", std::make_shared<Scope>("ModuleList"));
    for (int64_t i = 0; i < c.num_layers; ++i)
      blocks.push_back(add_block<RwkvBlock>(*list, rws.pp("blocks"), std::to_string(i), c, o, i));
    ln_out = add_block<Norm>(*rwkv, rws, "ln_out", c.hidden_size, Norm::Kind::LayerNorm, c.norm_eps);
    head_ = c.tie_word_embeddings ? register_module("head", std::make_shared<Linear>(ws.pp("head"), embeddings->weight))
                                  : add_block<Linear>(*this, ws, "head", c.hidden_size, c.vocab_size, false, false,
                                                      Init::fan_in_uniform(c.hidden_size));
    dtype_ = embeddings->weight.dtype();
  }
  KVCache make_cache(int64_t batch, int64_t) const override { return KVCache::recurrent(batch); }
  bool recurrent() const override { return true; }

  Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) override {
    const ForwardInputs in = begin_forward(config_, input_ids, attention_mask, cache);
    FOUNDRY_CHECK_AS(ValueError, !(cache && records(embeddings->weight, blocks[0]->attention->time_decay)),
                     "{}: a forward that records gradients can't continue from a generation cache", config_.architecture);
    Tensor h = embeddings->forward(input_ids);
    for (auto& block : blocks) {
      std::shared_ptr<RwkvBlock> b = block;
      h = checkpointed(*this, [b, cache](const Tensor& x) { return b->forward(x, cache); }, h);
    }
    h = end_layers(h, cache, in.T, last_positions);
    return head(*head_, ln_out->forward(h));
  }

  std::shared_ptr<Scope> rwkv;
  std::shared_ptr<Embedding> embeddings;
  std::vector<std::shared_ptr<RwkvBlock>> blocks;
  std::shared_ptr<Norm> ln_out;
  std::shared_ptr<Linear> head_;
};

}  // namespace

Architecture rwkv_architecture() {
  auto parse = [](const json& j, ModelConfig& c) {
    parse_recurrent_sizes(j, c, /*tie_default=*/false);  // context_length only sized its training
  };
  auto build = [](const ModelConfig& c, const WeightSource& ws) -> std::unique_ptr<CausalLM> {
    json j = json::parse(c.json);
    RwkvOptions o;
    o.attention_hidden = get_int(j, "attention_hidden_size", c.hidden_size);
    o.intermediate = get_int(j, "intermediate_size", 4 * c.hidden_size);
    o.rescale_every = get_int(j, "rescale_every", 6);
    return std::make_unique<Rwkv>(c, ws, o);
  };
  return {{"RwkvForCausalLM"}, "rwkv", parse, build};
}

}  // namespace foundry::models::hf
