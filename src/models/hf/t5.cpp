// T5ForConditionalGeneration (HF v4.40): encoder and decoder stacks of RMS-normed pre-norm blocks
// (T5LayerNorm), attention without 1/sqrt(d) scaling and with a learned relative-position bias
// (log-spaced buckets; the first block's, shared by every block of its stack; bidirectional in the
// encoder, causal in the decoder), cross-attention over the encoder output, ReLU (v1.0) or gated
// GELU (v1.1, "gated-gelu") feed-forward; the head tied to the shared embedding and then fed
// d_model^-0.5 times the states (v1.0), or untied (v1.1). Generation: the first forward encodes the
// prompt, caches every decoder layer's cross-attention keys and values, and starts the decoder from
// decoder_start_token_id; later forwards run the decoder on the new tokens over its KV cache.
#include <cmath>
#include <limits>
#include <optional>

#include "foundry/autograd/grad_mode.h"
#include "foundry/models/seq2seq.h"
#include "foundry/ops/ops.h"
#include "models/hf/blocks.h"

namespace foundry::models {

Tensor Seq2SeqLM::shift_right(const Tensor& labels) const {
  FOUNDRY_CHECK_AS(ValueError, labels.dim() == 2, "{}: labels must be [batch, tokens], got {}", config_.architecture,
                   shape_str(labels.sizes()));
  Tensor l = labels.to(DType::Int64);
  Tensor start = full({l.size(0), 1}, double(decoder_start_), DType::Int64);
  Tensor shifted = cat({start, l.narrow(1, 0, l.size(1) - 1)}, 1);
  const double pad = double(config_.pad_token_id.value_or(0));
  return masked_fill(shifted, eq(shifted, full({}, -100.0, DType::Int64)), pad);
}

namespace hf {
namespace {

struct T5Options {
  int64_t d_model = 0, d_kv = 0, d_ff = 0, heads = 0, buckets = 32, max_distance = 128, enc_layers = 0, dec_layers = 0;
  bool gated = false;
  std::string act = "relu";
  double dropout = 0.1, factor = 1.0, eps = 1e-6;
};

// transformers' _relative_position_bucket for one relative position (key - query), in float32 as there.
int64_t relative_bucket(int64_t rel, bool bidirectional, int64_t num_buckets, int64_t max_distance) {
  int64_t bucket = 0;
  if (bidirectional) {
    num_buckets /= 2;
    if (rel > 0) bucket += num_buckets;
    rel = std::abs(rel);
  } else {
    rel = -std::min<int64_t>(rel, 0);
  }
  const int64_t max_exact = num_buckets / 2;
  if (rel < max_exact) return bucket + rel;
  const float scaled = std::log(float(rel) / float(max_exact)) /
                       float(std::log(double(max_distance) / double(max_exact))) * float(num_buckets - max_exact);
  return bucket + std::min<int64_t>(max_exact + int64_t(scaled), num_buckets - 1);
}

// The cache's "layer" holding the encoder mask's bias (the decoder layers' own slots hold their
// cross-attention keys and values).
constexpr int64_t kEncoderMask = -1;

// The lowest float: transformers' finite mask value.
constexpr double kMasked = std::numeric_limits<float>::lowest();

class T5Attention : public nn::Module {
 public:
  T5Attention(const WeightSource& ws, const T5Options& o, bool relative_bias) : o_(o) {
    const int64_t inner = o.heads * o.d_kv;
    const double f = o.factor;
    q = add_block<Linear>(*this, ws, "q", o.d_model, inner, false, false, Init::normal(f * std::pow(double(o.d_model * o.d_kv), -0.5)));
    k = add_block<Linear>(*this, ws, "k", o.d_model, inner, false, false, Init::normal(f * std::pow(double(o.d_model), -0.5)));
    v = add_block<Linear>(*this, ws, "v", o.d_model, inner, false, false, Init::normal(f * std::pow(double(o.d_model), -0.5)));
    this->o = add_block<Linear>(*this, ws, "o", inner, o.d_model, false, false, Init::normal(f * std::pow(double(inner), -0.5)));
    if (relative_bias) relative_attention_bias = add_block<Embedding>(*this, ws, "relative_attention_bias", o.buckets, o.heads);
  }
  std::string type_name() const override { return "T5Attention"; }
  /// The relative-position bias [1, H, T, S] of queries at offset..offset+T over keys 0..S.
  Tensor position_bias(int64_t T, int64_t S, int64_t offset, bool bidirectional) {
    std::vector<int64_t> idx(static_cast<size_t>(T * S));
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < S; ++j)
        idx[size_t(i * S + j)] = relative_bucket(j - (offset + i), bidirectional, o_.buckets, o_.max_distance);
    return relative_attention_bias->forward(tensor<int64_t>(idx, {T, S})).permute({2, 0, 1}).unsqueeze(0);
  }
  /// softmax(q k^T + bias) v over keys, values [B, H, S, D] (no 1/sqrt(D): T5's init absorbs it).
  Tensor attend_over(const Tensor& x, const Tensor& keys, const Tensor& values, const Tensor& bias) {
    Tensor qh = split_heads(q->forward(x), o_.heads) * full({}, std::sqrt(double(o_.d_kv)), x.dtype());
    return this->o->forward(attend(qh, keys, values, bias, is_training() ? o_.dropout : 0.0));
  }
  std::shared_ptr<Linear> q, k, v, o;
  std::shared_ptr<Embedding> relative_attention_bias;

 private:
  T5Options o_;
};

class T5FeedForward : public nn::Module {
 public:
  T5FeedForward(const WeightSource& ws, const T5Options& o) : o_(o) {
    const Init in = Init::normal(o.factor * std::pow(double(o.d_model), -0.5));
    if (o.gated) {
      wi_0 = add_block<Linear>(*this, ws, "wi_0", o.d_model, o.d_ff, false, false, in);
      wi_1 = add_block<Linear>(*this, ws, "wi_1", o.d_model, o.d_ff, false, false, in);
    } else {
      wi = add_block<Linear>(*this, ws, "wi", o.d_model, o.d_ff, false, false, in);
    }
    wo = add_block<Linear>(*this, ws, "wo", o.d_ff, o.d_model, false, false, Init::normal(o.factor * std::pow(double(o.d_ff), -0.5)));
  }
  std::string type_name() const override { return o_.gated ? "T5DenseGatedActDense" : "T5DenseActDense"; }
  Tensor forward(const Tensor& x) override {
    Tensor h = o_.gated ? activation(o_.act, wi_0->forward(x)) * wi_1->forward(x) : activation(o_.act, wi->forward(x));
    return wo->forward(maybe_dropout(*this, h, o_.dropout));
  }
  std::shared_ptr<Linear> wi, wi_0, wi_1, wo;

 private:
  T5Options o_;
};

// block.{i}.layer.{j}: a sublayer is layer_norm + its module, added to the residual after dropout.
class T5Block : public nn::Module {
 public:
  T5Block(const WeightSource& ws, const T5Options& o, bool decoder, bool relative_bias) : o_(o), decoder_(decoder) {
    auto list = register_module("layer", std::make_shared<Scope>("ModuleList"));
    const WeightSource lws = ws.pp("layer");
    auto sub = [&](int64_t j, const char* type) {
      return list->register_module(std::to_string(j), std::make_shared<Scope>(type));
    };
    auto norm = [&](nn::Module& m, int64_t j) {
      return add_block<Norm>(m, lws.pp(std::to_string(j)), "layer_norm", o.d_model, Norm::Kind::RMSNorm, o.eps, false);
    };
    auto s0 = sub(0, "T5LayerSelfAttention");
    self_attention = add_block<T5Attention>(*s0, lws.pp("0"), "SelfAttention", o, relative_bias);
    self_norm = norm(*s0, 0);
    int64_t j = 1;
    if (decoder) {
      auto s1 = sub(1, "T5LayerCrossAttention");
      cross_attention = add_block<T5Attention>(*s1, lws.pp("1"), "EncDecAttention", o, false);
      cross_norm = norm(*s1, 1);
      j = 2;
    }
    auto sf = sub(j, "T5LayerFF");
    ff = add_block<T5FeedForward>(*sf, lws.pp(std::to_string(j)), "DenseReluDense", o);
    ff_norm = norm(*sf, j);
  }
  std::string type_name() const override { return "T5Block"; }
  /// h [B, T, C]; self_kv: the self-attention's keys and values for this step (after the cache);
  /// cross: the encoder's keys and values for this layer; biases [B, H, T, S].
  Tensor forward(Tensor h, const std::function<std::pair<Tensor, Tensor>(const Tensor&)>& self_kv, const Tensor& self_bias,
                 const std::pair<Tensor, Tensor>& cross, const Tensor& cross_bias) {
    Tensor x = self_norm->forward(h);
    auto [k, v] = self_kv(x);
    h = h + maybe_dropout(*this, self_attention->attend_over(x, k, v, self_bias), o_.dropout);
    if (decoder_) {
      x = cross_norm->forward(h);
      h = h + maybe_dropout(*this, cross_attention->attend_over(x, cross.first, cross.second, cross_bias), o_.dropout);
    }
    return h + maybe_dropout(*this, ff->forward(ff_norm->forward(h)), o_.dropout);
  }
  std::shared_ptr<T5Attention> self_attention, cross_attention;
  std::shared_ptr<Norm> self_norm, cross_norm, ff_norm;
  std::shared_ptr<T5FeedForward> ff;

 private:
  T5Options o_;
  bool decoder_;
};

class T5 : public Seq2SeqLM {
 public:
  T5(const ModelConfig& c, const WeightSource& ws, const T5Options& o, int64_t decoder_start)
      : Seq2SeqLM(c, ws.products(), decoder_start), o_(o) {
    shared = add_block<Embedding>(*this, ws, "shared", c.vocab_size, o.d_model);
    for (bool dec : {false, true}) {
      const std::string name = dec ? "decoder" : "encoder";
      auto stack = register_module(name, std::make_shared<Scope>("T5Stack"));
      auto list = stack->register_module("block", std::make_shared<Scope>("ModuleList"));
      const WeightSource sws = ws.pp(name);
      const int64_t n = dec ? o.dec_layers : o.enc_layers;
      auto& blocks = dec ? decoder_blocks : encoder_blocks;
      for (int64_t i = 0; i < n; ++i)
        blocks.push_back(add_block<T5Block>(*list, sws.pp("block"), std::to_string(i), o, dec, i == 0));
      (dec ? decoder_norm : encoder_norm) =
          add_block<Norm>(*stack, sws, "final_layer_norm", o.d_model, Norm::Kind::RMSNorm, c.norm_eps, false);
    }
    lm_head = c.tie_word_embeddings
                  ? register_module("lm_head", std::make_shared<Linear>(ws.pp("lm_head"), shared->weight))
                  : add_block<Linear>(*this, ws, "lm_head", o.d_model, c.vocab_size, false, false, Init::normal(o.factor));
    dtype_ = shared->weight.dtype();
  }

  KVCache make_cache(int64_t batch, int64_t capacity) const override {
    return KVCache(o_.dec_layers, batch, o_.heads, capacity, o_.d_kv, dtype_, kv_cache_format());
  }

  Seq2SeqOutput seq2seq(const Tensor& input_ids, const Tensor& attention_mask, const Tensor& decoder_input_ids,
                        const Tensor& labels) override {
    FOUNDRY_CHECK_AS(ValueError, decoder_input_ids.defined() || labels.defined(),
                     "{}: give decoder_input_ids (or labels, which they are shifted from)", config_.architecture);
    std::optional<autograd::NoGradGuard> no_grad;
    if (!records_parameters(*this)) no_grad.emplace();
    Seq2SeqOutput out;
    Tensor dec = decoder_input_ids.defined() ? decoder_input_ids.to(DType::Int64) : shift_right(labels);
    Tensor enc_bias;
    out.encoder_last_hidden_state = encode(input_ids, attention_mask, enc_bias);
    std::vector<std::pair<Tensor, Tensor>> cross;
    for (auto& b : decoder_blocks) cross.push_back(cross_kv(*b, out.encoder_last_hidden_state));
    out.logits = float_logits(decode(dec, cross, enc_bias, nullptr, 0));
    if (labels.defined()) {
      FOUNDRY_CHECK_AS(ValueError, labels.dim() == 2 && labels.size(0) == dec.size(0) && labels.size(1) == dec.size(1),
                       "{}: labels {} must match the decoder inputs {}", config_.architecture, shape_str(labels.sizes()),
                       shape_str(dec.sizes()));
      const int64_t V = out.logits.size(-1);
      out.loss = cross_entropy(out.logits.reshape({-1, V}), labels.to(DType::Int64).reshape({-1}), Tensor(), -100);
    }
    if (out.encoder_last_hidden_state.dtype() != DType::Float32)
      out.encoder_last_hidden_state = out.encoder_last_hidden_state.to(DType::Float32);
    return out;
  }

  // Generation: the first forward over a cache encodes the prompt; later ones decode new tokens.
  Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) override {
    FOUNDRY_CHECK_AS(ValueError, cache != nullptr,
                     "{}: an encoder-decoder model runs through seq2seq(input_ids, attention_mask, decoder_input_ids) "
                     "or generate()", config_.architecture);
    FOUNDRY_CHECK_AS(ValueError, input_ids.dim() == 2, "{}: input_ids must be [batch, tokens], got {}",
                     config_.architecture, shape_str(input_ids.sizes()));
    const int64_t B = input_ids.size(0);
    std::vector<std::pair<Tensor, Tensor>> cross(decoder_blocks.size());
    Tensor ids = input_ids;
    if (!cache->state(kEncoderMask, 0).defined()) {
      Tensor mask = attention_mask.defined() ? attention_mask.narrow(1, 0, input_ids.size(1)) : Tensor();
      Tensor enc_bias;
      Tensor enc = encode(input_ids, mask, enc_bias);
      cache->state(kEncoderMask, 0) = enc_bias.defined() ? enc_bias : zeros({B, 1, 1, enc.size(1)}, dtype_);
      for (size_t l = 0; l < decoder_blocks.size(); ++l) {
        auto kv = cross_kv(*decoder_blocks[l], enc);
        cache->state(int64_t(l), 0) = kv.first;
        cache->state(int64_t(l), 1) = kv.second;
      }
      ids = full({B, 1}, double(decoder_start_), DType::Int64);
    }
    for (size_t l = 0; l < decoder_blocks.size(); ++l) cross[l] = {cache->state(int64_t(l), 0), cache->state(int64_t(l), 1)};
    return decode(ids, cross, cache->state(kEncoderMask, 0), cache, last_positions);
  }

  std::shared_ptr<Embedding> shared;
  std::vector<std::shared_ptr<T5Block>> encoder_blocks, decoder_blocks;
  std::shared_ptr<Norm> encoder_norm, decoder_norm;
  std::shared_ptr<Linear> lm_head;

 private:
  void check_ids(const Tensor& ids) const {
    FOUNDRY_CHECK_AS(ValueError, ids.dim() == 2 && ids.size(1) > 0, "{}: token ids must be [batch, tokens], got {}",
                     config_.architecture, shape_str(ids.sizes()));
    if (amax(ids).item<int64_t>() >= config_.vocab_size || amin(ids).item<int64_t>() < 0)
      raise<ValueError>("{}: token ids must be in [0, {})", config_.architecture, config_.vocab_size);
  }

  // The encoder's final states; `bias` becomes the padding mask's additive bias [B, 1, 1, S] (undefined: none).
  Tensor encode(const Tensor& input_ids, const Tensor& attention_mask, Tensor& bias) {
    Tensor ids = input_ids.to(DType::Int64);
    check_ids(ids);
    const int64_t B = ids.size(0), S = ids.size(1);
    if (attention_mask.defined()) {
      FOUNDRY_CHECK_AS(ValueError, Shape(attention_mask.sizes()) == Shape(ids.sizes()),
                       "{}: attention_mask {} must match input_ids {}", config_.architecture,
                       shape_str(attention_mask.sizes()), shape_str(ids.sizes()));
      bias = ((full({}, 1.0) - attention_mask.to(DType::Float32)) * full({}, kMasked)).reshape({B, 1, 1, S}).to(dtype_);
    }
    Tensor pb = encoder_blocks[0]->self_attention->position_bias(S, S, 0, true);
    Tensor self_bias = (bias.defined() ? pb + bias : pb).expand({B, o_.heads, S, S});
    Tensor h = maybe_dropout(*this, shared->forward(ids), o_.dropout);
    for (auto& b : encoder_blocks) {
      std::shared_ptr<T5Block> blk = b;
      auto self_kv = [blk, this](const Tensor& x) {
        return std::pair<Tensor, Tensor>{split_heads(blk->self_attention->k->forward(x), o_.heads),
                                         split_heads(blk->self_attention->v->forward(x), o_.heads)};
      };
      h = checkpointed(*this, [blk, self_kv, self_bias](const Tensor& x) { return blk->forward(x, self_kv, self_bias, {}, {}); }, h);
    }
    return maybe_dropout(*this, encoder_norm->forward(h), o_.dropout);
  }

  std::pair<Tensor, Tensor> cross_kv(T5Block& b, const Tensor& enc) const {
    return {split_heads(b.cross_attention->k->forward(enc), o_.heads), split_heads(b.cross_attention->v->forward(enc), o_.heads)};
  }

  Tensor decode(const Tensor& decoder_ids, const std::vector<std::pair<Tensor, Tensor>>& cross, const Tensor& enc_bias,
                KVCache* cache, int64_t last_positions) {
    Tensor ids = decoder_ids.to(DType::Int64);
    check_ids(ids);
    const int64_t B = ids.size(0), T = ids.size(1), past = cache ? cache->length() : 0, S = past + T;
    const int64_t Senc = cross.empty() ? 0 : cross[0].first.size(2);
    // Causal self-attention bias: relative positions (unidirectional) and keys after the query masked.
    Tensor pb = decoder_blocks[0]->self_attention->position_bias(T, S, past, false);
    std::vector<float> causal(static_cast<size_t>(T * S), 0.0f);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = past + i + 1; j < S; ++j) causal[size_t(i * S + j)] = float(kMasked);
    Tensor self_bias = (pb + tensor<float>(causal, {1, 1, T, S}).to(pb.dtype())).expand({B, o_.heads, T, S});
    Tensor cross_bias = (enc_bias.defined() ? enc_bias : zeros({B, 1, 1, Senc}, dtype_)).expand({B, o_.heads, T, Senc});
    Tensor h = maybe_dropout(*this, shared->forward(ids), o_.dropout);
    for (size_t l = 0; l < decoder_blocks.size(); ++l) {
      std::shared_ptr<T5Block> blk = decoder_blocks[l];
      const int64_t layer = int64_t(l);
      auto self_kv = [blk, cache, layer, this](const Tensor& x) {
        Tensor k = split_heads(blk->self_attention->k->forward(x), o_.heads);
        Tensor v = split_heads(blk->self_attention->v->forward(x), o_.heads);
        return cache ? cache->append(layer, k, v) : std::pair<Tensor, Tensor>{k, v};
      };
      const std::pair<Tensor, Tensor> kv = cross[l];
      h = checkpointed(*this, [blk, self_kv, self_bias, kv, cross_bias](const Tensor& x) {
            return blk->forward(x, self_kv, self_bias, kv, cross_bias);
          }, h);
    }
    h = end_layers(h, cache, T, last_positions);
    h = maybe_dropout(*this, decoder_norm->forward(h), o_.dropout);
    // A tied head reads the states scaled by d_model^-0.5 (transformers' T5 v1.0).
    if (config_.tie_word_embeddings) h = h * full({}, std::pow(double(o_.d_model), -0.5), h.dtype());
    return head(*lm_head, h);
  }

  T5Options o_;
};

}  // namespace

Architecture t5_architecture() {
  auto parse = [](const json& j, ModelConfig& c) {
    c.vocab_size = get_int(j, "vocab_size", 32128);
    c.hidden_size = get_int(j, "d_model", 512);
    c.num_layers = get_int(j, "num_layers", 6);
    c.num_heads = c.num_kv_heads = get_int(j, "num_heads", 8);
    c.head_dim = get_int(j, "d_kv", 64);
    c.intermediate_size = get_int(j, "d_ff", 2048);
    c.norm_eps = get_double(j, "layer_norm_epsilon", 1e-6);
    c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", true);
    c.max_positions = 0;  // relative positions: no limit
    FOUNDRY_CHECK_AS(ValueError, c.vocab_size > 0 && c.hidden_size > 0 && c.num_layers > 0 && c.num_heads > 0 && c.head_dim > 0,
                     "config.json: T5's sizes (vocab_size, d_model, num_layers, num_heads, d_kv) must be positive");
    const std::string ff = get_string(j, "feed_forward_proj", "relu");
    const bool gated = ff.rfind("gated-", 0) == 0;
    const std::string act = gated ? ff.substr(6) : ff;
    if (act.find('-') != std::string::npos || !known_activation(act == "gelu" && gated ? "gelu_new" : act))
      unsupported(c, "feed_forward_proj '" + ff + "'");
  };
  auto build = [](const ModelConfig& c, const WeightSource& ws) -> std::unique_ptr<CausalLM> {
    json j = json::parse(c.json);
    T5Options o;
    o.d_model = c.hidden_size;
    o.d_kv = c.head_dim;
    o.d_ff = c.intermediate_size;
    o.heads = c.num_heads;
    o.enc_layers = c.num_layers;
    o.dec_layers = get_int(j, "num_decoder_layers", c.num_layers);
    o.buckets = get_int(j, "relative_attention_num_buckets", 32);
    o.max_distance = get_int(j, "relative_attention_max_distance", 128);
    o.dropout = get_double(j, "dropout_rate", 0.1);
    o.factor = get_double(j, "initializer_factor", 1.0);
    o.eps = c.norm_eps;
    const std::string ff = get_string(j, "feed_forward_proj", "relu");
    o.gated = ff.rfind("gated-", 0) == 0;
    o.act = o.gated ? ff.substr(6) : ff;
    if (ff == "gated-gelu") o.act = "gelu_new";  // transformers' T5Config
    const int64_t start = get_int(j, "decoder_start_token_id", config_pad_token(c).value_or(0));
    return std::make_unique<T5>(c, ws, o, start);
  };
  return {{"T5ForConditionalGeneration"}, "t5", parse, build};
}

}  // namespace hf
}  // namespace foundry::models
