// The Llama-shaped decoder that Llama, Mistral, Qwen2, Gemma, Mixtral and Qwen2-MoE share: RMSNorm
// pre-norm blocks, rotary attention with grouped-query heads, and a gated MLP or a routed mixture
// of gated experts. Each architecture file fills a DecoderSpec from its config and HF names.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/hf/blocks.h"
#include "models/hf/common.h"

namespace foundry::models::hf {

struct DecoderSpec {
  bool q_bias = false, k_bias = false, v_bias = false, o_bias = false, mlp_bias = false;
  bool norm_plus_one = false;      ///< Gemma's RMSNorm scales by (1 + weight)
  bool scale_embeddings = false;   ///< Gemma multiplies embeddings by sqrt(hidden_size)
  std::string mlp_act = "silu";    ///< "silu" or "gelu_tanh" (gate activation)
  // Mixture of experts (0 experts: dense MLP everywhere).
  enum class Moe { None, Mixtral, Qwen2 } moe = Moe::None;
  int64_t num_experts = 0, experts_per_token = 0;
  bool norm_topk_prob = true;      ///< renormalise the chosen experts' weights to sum to 1
  int64_t expert_intermediate = 0;
  int64_t shared_expert_intermediate = 0;  ///< Qwen2-MoE's always-on expert (0: none)
  std::vector<bool> sparse_layers;         ///< per layer: MoE (true) or dense MLP
  /// A config setting that changes only training's math and is not implemented (Mixtral's router
  /// jitter noise): named in the error a forward in train mode raises. Empty: none.
  std::string unsupported_in_training;
};

// LlamaAttention: q/k/v/o projections, rotary q and k (when the context has rotary tables), grouped-query
// heads. Jamba's attention is the same without positions.
class DecoderAttention : public nn::Module {
 public:
  DecoderAttention(const WeightSource& ws, const ModelConfig& c, const DecoderSpec& s, double dropout)
      : H_(c.num_heads), Hkv_(c.num_kv_heads), dropout_(dropout) {
    const int64_t C = c.hidden_size, D = c.head_dim;
    q_proj = add_block<Linear>(*this, ws, "q_proj", C, H_ * D, s.q_bias);
    k_proj = add_block<Linear>(*this, ws, "k_proj", C, Hkv_ * D, s.k_bias);
    v_proj = add_block<Linear>(*this, ws, "v_proj", C, Hkv_ * D, s.v_bias);
    o_proj = add_block<Linear>(*this, ws, "o_proj", H_ * D, C, s.o_bias);
  }
  std::string type_name() const override { return "Attention"; }
  Tensor forward(const Tensor& x, const LayerContext& ctx, int64_t layer) {
    std::vector<Tensor> qkv = Linear::forward_each(x, {q_proj.get(), k_proj.get(), v_proj.get()});
    Tensor q = rope_heads(qkv[0], H_, ctx);
    Tensor k = rope_heads(qkv[1], Hkv_, ctx);
    Tensor v = split_heads(qkv[2], Hkv_);
    return o_proj->forward(attend_layer(ctx, layer, q, k, v, is_training() ? dropout_ : 0.0));
  }
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, o_proj;

 private:
  int64_t H_, Hkv_;
  double dropout_;
};

std::unique_ptr<CausalLM> build_decoder(const ModelConfig& c, const DecoderSpec& spec, const WeightSource& ws);

/// The config fields every Llama-shaped model shares (sizes, rope, norms, head tying); with
/// `silu`, also checks that hidden_act is "silu" (all but Gemma).
void parse_decoder_common(const json& j, ModelConfig& c, bool silu = true);

}  // namespace foundry::models::hf
