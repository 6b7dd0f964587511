#include "models/hf/decoder.h"

#include <cmath>

#include "foundry/autograd/grad_mode.h"
#include "foundry/ops/ops.h"

namespace foundry::models::hf {

namespace {

struct GatedMLP {
  Tensor w_gate, w_up, w_down, b_gate, b_up, b_down;
};

struct DecoderLayer {
  Tensor input_norm, post_norm;
  Tensor wq, wk, wv, wo, bq, bk, bv, bo;
  GatedMLP mlp;                   // dense layers
  Tensor router;                  // [experts, C]
  std::vector<GatedMLP> experts;
  GatedMLP shared;                // Qwen2-MoE
  Tensor shared_gate;             // [1, C]
};

class Decoder : public CausalLM {
 public:
  Decoder(const ModelConfig& c, const DecoderSpec& s, const WeightFn& w, const HasWeightFn& has) : spec_(s) {
    config_ = c;
    const int64_t C = c.hidden_size, H = c.num_heads, Hkv = c.num_kv_heads, D = c.head_dim;
    auto take = [&](const std::string& name, const Shape& shape) { return weights_[name] = w(name, shape); };
    auto take_if = [&](bool want, const std::string& name, const Shape& shape) { return want ? take(name, shape) : Tensor(); };
    auto gated = [&](const std::string& p, const char* gate, const char* up, const char* down, int64_t F) {
      GatedMLP m;
      m.w_gate = take(p + gate + ".weight", {F, C});
      m.w_up = take(p + up + ".weight", {F, C});
      m.w_down = take(p + down + ".weight", {C, F});
      m.b_gate = take_if(s.mlp_bias, p + gate + ".bias", {F});
      m.b_up = take_if(s.mlp_bias, p + up + ".bias", {F});
      m.b_down = take_if(s.mlp_bias, p + down + ".bias", {C});
      return m;
    };
    embed_ = take("model.embed_tokens.weight", {c.vocab_size, C});
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      DecoderLayer L;
      L.input_norm = take(p + "input_layernorm.weight", {C});
      L.post_norm = take(p + "post_attention_layernorm.weight", {C});
      L.wq = take(p + "self_attn.q_proj.weight", {H * D, C});
      L.wk = take(p + "self_attn.k_proj.weight", {Hkv * D, C});
      L.wv = take(p + "self_attn.v_proj.weight", {Hkv * D, C});
      L.wo = take(p + "self_attn.o_proj.weight", {C, H * D});
      L.bq = take_if(s.q_bias, p + "self_attn.q_proj.bias", {H * D});
      L.bk = take_if(s.k_bias, p + "self_attn.k_proj.bias", {Hkv * D});
      L.bv = take_if(s.v_bias, p + "self_attn.v_proj.bias", {Hkv * D});
      L.bo = take_if(s.o_bias, p + "self_attn.o_proj.bias", {C});
      const bool sparse = s.moe != DecoderSpec::Moe::None && s.sparse_layers[size_t(i)];
      if (!sparse) {
        L.mlp = gated(p + "mlp.", "gate_proj", "up_proj", "down_proj", c.intermediate_size);
      } else if (s.moe == DecoderSpec::Moe::Mixtral) {
        L.router = take(p + "block_sparse_moe.gate.weight", {s.num_experts, C});
        for (int64_t e = 0; e < s.num_experts; ++e)
          L.experts.push_back(
              gated(p + "block_sparse_moe.experts." + std::to_string(e) + ".", "w1", "w3", "w2", s.expert_intermediate));
      } else {
        L.router = take(p + "mlp.gate.weight", {s.num_experts, C});
        for (int64_t e = 0; e < s.num_experts; ++e)
          L.experts.push_back(gated(p + "mlp.experts." + std::to_string(e) + ".", "gate_proj", "up_proj", "down_proj",
                                    s.expert_intermediate));
        if (s.shared_expert_intermediate > 0) {
          L.shared = gated(p + "mlp.shared_expert.", "gate_proj", "up_proj", "down_proj", s.shared_expert_intermediate);
          L.shared_gate = take(p + "mlp.shared_expert_gate.weight", {1, C});
        }
      }
      layers_.push_back(std::move(L));
    }
    norm_ = take("model.norm.weight", {C});
    // Tied checkpoints usually omit lm_head.weight; when present it is used as written.
    head_ = (!c.tie_word_embeddings || has("lm_head.weight")) ? take("lm_head.weight", {c.vocab_size, C}) : embed_;
    dtype_ = embed_.dtype();
    if (s.norm_plus_one) {
      // Gemma's (1 + w), folded once into the weights (an owned copy; the mapping stays read-only).
      for (DecoderLayer& L : layers_) {
        L.input_norm = L.input_norm + ones({}, dtype_);
        L.post_norm = L.post_norm + ones({}, dtype_);
      }
      norm_ = norm_ + ones({}, dtype_);
    }
  }

  Tensor norm(const Tensor& x, const Tensor& w) const { return rms_norm(x, {config_.hidden_size}, w, config_.norm_eps); }

  Tensor mlp(const GatedMLP& m, const Tensor& x) const {
    Tensor g = proj(x, m.w_gate, m.b_gate);
    if (spec_.mlp_act == "silu") return proj(silu_mul_(g, proj(x, m.w_up, m.b_up)), m.w_down, m.b_down);
    return proj(gelu(g, "tanh") * proj(x, m.w_up, m.b_up), m.w_down, m.b_down);
  }

  // Routed experts (HF's Mixtral / Qwen2-MoE blocks): softmax over the router logits in float32,
  // top-k experts per token, optionally renormalised; each expert runs on its tokens only.
  Tensor moe(const DecoderLayer& L, const Tensor& x) const {
    const int64_t B = x.size(0), T = x.size(1), C = x.size(2), N = B * T;
    Tensor flat = x.reshape({N, C});
    Tensor probs = softmax(linear(flat, L.router).to(DType::Float32), 1);
    auto [w, idx] = topk(probs, spec_.experts_per_token, 1);
    if (spec_.norm_topk_prob) w = w / sum(w, {1}, true);
    w = w.to(x.dtype()).contiguous();
    std::vector<int64_t> chosen = idx.contiguous().to_vector<int64_t>();
    const int64_t K = spec_.experts_per_token;
    Tensor out = zeros({N, C}, x.dtype());
    for (int64_t e = 0; e < int64_t(L.experts.size()); ++e) {
      std::vector<int64_t> rows, slots;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k)
          if (chosen[size_t(n * K + k)] == e) {
            rows.push_back(n);
            slots.push_back(n * K + k);
          }
      if (rows.empty()) continue;
      Tensor r = tensor<int64_t>(rows, {int64_t(rows.size())});
      Tensor scale = index_select(w.reshape({N * K}), 0, tensor<int64_t>(slots, {int64_t(slots.size())})).unsqueeze(1);
      out = index_add(out, 0, r, mlp(L.experts[size_t(e)], index_select(flat, 0, r)) * scale);
    }
    if (L.shared_gate.defined()) out = out + sigmoid(proj(flat, L.shared_gate)) * mlp(L.shared, flat);
    return out.reshape({B, T, C});
  }

  Tensor run(const Tensor& input_ids, const Tensor& attention_mask, KVCache* cache, int64_t last_positions) override {
    autograd::NoGradGuard no_grad;
    const ModelConfig& c = config_;
    const auto [B, T, past, mask] = begin_forward(c, input_ids, attention_mask, cache);
    Tensor positions = positions_from_mask(mask, T);
    auto [cos_t, sin_t] = rope_tables(c, positions, c.head_dim, dtype_);
    Tensor bias = attention_bias(mask, T, c.sliding_window, dtype_);
    Tensor h = embedding(input_ids, embed_);
    // HF rounds the normaliser to the compute dtype first.
    if (spec_.scale_embeddings) h = h * full({}, std::sqrt(double(c.hidden_size)), dtype_);
    for (size_t i = 0; i < layers_.size(); ++i) {
      const DecoderLayer& L = layers_[i];
      Tensor x = norm(h, L.input_norm);
      Tensor q = split_heads(rope_rows_(proj(x, L.wq, L.bq), c.num_heads, cos_t, sin_t), c.num_heads);
      Tensor k = split_heads(rope_rows_(proj(x, L.wk, L.bk), c.num_kv_heads, cos_t, sin_t), c.num_kv_heads);
      Tensor v = split_heads(proj(x, L.wv, L.bv), c.num_kv_heads);
      Tensor attn;
      if (cache && T == 1 && cache->streams_attention() && q.dtype() == DType::Float32) {
        attn = cache->append_and_attend(int64_t(i), q, k, v, bias);  // decode: streaming over the cache
      } else {
        if (cache) std::tie(k, v) = cache->append(int64_t(i), k, v);
        attn = attend(q, k, v, bias);
      }
      x = add_rms_norm_(h, proj(attn, L.wo, L.bo), L.post_norm, config_.norm_eps);  // h += attention
      h = h + (L.router.defined() ? moe(L, x) : mlp(L.mlp, x));
    }
    h = end_layers(h, cache, T, last_positions);
    return float_logits(proj(norm(h, norm_), head_));
  }

 private:
  DecoderSpec spec_;
  Tensor embed_, norm_, head_;
  std::vector<DecoderLayer> layers_;
};

}  // namespace

std::unique_ptr<CausalLM> build_decoder(const ModelConfig& c, const DecoderSpec& spec, const WeightFn& weight,
                                        const HasWeightFn& has) {
  return std::make_unique<Decoder>(c, spec, weight, has);
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
