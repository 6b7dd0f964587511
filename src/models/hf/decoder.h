// The Llama-shaped decoder that Llama, Mistral, Qwen2, Gemma, Mixtral and Qwen2-MoE share: RMSNorm
// pre-norm blocks, rotary attention with grouped-query heads, and a gated MLP or a routed mixture
// of gated experts. Each architecture file fills a DecoderSpec from its config and HF names.
#pragma once

#include <memory>
#include <string>
#include <vector>

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
};

class WeightSource;

std::unique_ptr<CausalLM> build_decoder(const ModelConfig& c, const DecoderSpec& spec, const WeightSource& ws);

/// The config fields every Llama-shaped model shares (sizes, rope, norms, head tying); with
/// `silu`, also checks that hidden_act is "silu" (all but Gemma).
void parse_decoder_common(const json& j, ModelConfig& c, bool silu = true);

}  // namespace foundry::models::hf
