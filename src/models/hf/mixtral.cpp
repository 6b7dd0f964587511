// MixtralForCausalLM (HF v4.40): Mistral's attention with a sparse mixture of SiLU-gated experts in
// every layer: softmax router in float32, top `num_experts_per_tok` experts renormalised to sum 1.
#include "models/hf/blocks.h"
#include "models/hf/decoder.h"

namespace foundry::models::hf {

Architecture mixtral_architecture() {
  auto parse = [](const json& j, ModelConfig& c) {
    parse_decoder_common(j, c);
    c.sliding_window = get_int(j, "sliding_window", 0);
    refuse_router_aux_loss(j, c);
  };
  auto build = [](const ModelConfig& c, const WeightSource& ws) {
    json j = json::parse(c.json);
    DecoderSpec s;
    s.moe = DecoderSpec::Moe::Mixtral;
    s.num_experts = get_int(j, "num_local_experts");
    s.experts_per_token = get_int(j, "num_experts_per_tok");
    FOUNDRY_CHECK_AS(ValueError, s.experts_per_token > 0 && s.experts_per_token <= s.num_experts,
                     "config.json: num_experts_per_tok ({}) must be in 1..num_local_experts ({})",
                     s.experts_per_token, s.num_experts);
    s.expert_intermediate = c.intermediate_size;
    s.sparse_layers.assign(size_t(c.num_layers), true);
    if (get_double(j, "router_jitter_noise", 0.0) != 0.0)
      s.unsupported_in_training = "router_jitter_noise (multiplicative noise on the router's input)";
    return build_decoder(c, s, ws);
  };
  return {{"MixtralForCausalLM"}, "mixtral", parse, build};
}

}  // namespace foundry::models::hf
