// Qwen2ForCausalLM (HF v4.40): Llama's decoder with biases on the q, k and v projections (not o).
#include "models/hf/blocks.h"
#include "models/hf/decoder.h"

namespace foundry::models::hf {

Architecture qwen2_architecture() {
  auto parse = [](const json& j, ModelConfig& c) {
    parse_decoder_common(j, c);
    if (get_bool(j, "use_sliding_window", false)) unsupported(c, "use_sliding_window = true");
  };
  auto build = [](const ModelConfig& c, const WeightSource& ws) {
    DecoderSpec s;
    s.q_bias = s.k_bias = s.v_bias = true;
    return build_decoder(c, s, ws);
  };
  return {{"Qwen2ForCausalLM"}, "qwen2", parse, build};
}

}  // namespace foundry::models::hf
