// MistralForCausalLM (HF v4.40): Llama's decoder plus sliding-window attention; as HF's mask
// builder, position i sees keys i-W..i (W = `sliding_window`; null: full causal attention).
#include "models/hf/blocks.h"
#include "models/hf/decoder.h"

namespace foundry::models::hf {

Architecture mistral_architecture() {
  auto parse = [](const json& j, ModelConfig& c) {
    parse_decoder_common(j, c);
    c.sliding_window = get_int(j, "sliding_window", 0);
  };
  auto build = [](const ModelConfig& c, const WeightSource& ws) {
    return build_decoder(c, DecoderSpec{}, ws);
  };
  return {{"MistralForCausalLM"}, "mistral", parse, build};
}

}  // namespace foundry::models::hf
