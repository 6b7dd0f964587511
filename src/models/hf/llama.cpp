// LlamaForCausalLM (HF v4.40): the shared decoder with SiLU-gated MLPs, optional q/k/v/o and MLP
// biases (`attention_bias`, `mlp_bias`), rope scaling linear / dynamic / llama3, tied or separate head.
#include "models/hf/blocks.h"
#include "models/hf/decoder.h"

namespace foundry::models::hf {

Architecture llama_architecture() {
  auto parse = [](const json& j, ModelConfig& c) {
    parse_decoder_common(j, c);
    c.attention_bias = get_bool(j, "attention_bias", false);
    c.mlp_bias = get_bool(j, "mlp_bias", false);
  };
  auto build = [](const ModelConfig& c, const WeightSource& ws) {
    DecoderSpec s;
    s.q_bias = s.k_bias = s.v_bias = s.o_bias = c.attention_bias;
    s.mlp_bias = c.mlp_bias;
    return build_decoder(c, s, ws);
  };
  return {{"LlamaForCausalLM"}, "llama", parse, build};
}

}  // namespace foundry::models::hf
