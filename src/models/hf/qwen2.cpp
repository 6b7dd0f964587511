// Qwen2ForCausalLM (HF v4.40): Llama's decoder with biases on the q, k and v projections (not o).
#include "models/hf/decoder.h"

namespace foundry::models::hf {

Architecture qwen2_architecture() {
  auto parse = [](const json& j, ModelConfig& c) {
    parse_decoder_common(j, c);
    if (get_bool(j, "use_sliding_window", false)) unsupported(c, "use_sliding_window = true");
    const std::string act = get_string(j, "hidden_act", "silu");
    if (act != "silu") unsupported(c, "hidden_act '" + act + "'");
  };
  auto build = [](const ModelConfig& c, const WeightFn& w, const HasWeightFn& has) {
    DecoderSpec s;
    s.q_bias = s.k_bias = s.v_bias = true;
    return build_decoder(c, s, w, has);
  };
  return {{"Qwen2ForCausalLM"}, parse, build};
}

}  // namespace foundry::models::hf
