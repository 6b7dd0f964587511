// GemmaForCausalLM (HF v4.40): Llama's decoder with embeddings scaled by sqrt(hidden_size), RMSNorm
// weights applied as (1 + w), a GELU-tanh gated MLP (`hidden_activation`), explicit head_dim, and
// the LM head tied to the embedding.
#include "models/hf/blocks.h"
#include "models/hf/decoder.h"

namespace foundry::models::hf {

Architecture gemma_architecture() {
  auto parse = [](const json& j, ModelConfig& c) {
    parse_decoder_common(j, c, /*silu=*/false);
    c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", true);
    const std::string act = get_string(j, "hidden_activation", "gelu_pytorch_tanh");
    if (act != "gelu_pytorch_tanh" && act != "gelu_new") unsupported(c, "hidden_activation '" + act + "'");
    if (get_bool(j, "attention_bias", false)) unsupported(c, "attention_bias = true");
  };
  auto build = [](const ModelConfig& c, const WeightSource& ws) {
    DecoderSpec s;
    s.norm_plus_one = true;
    s.scale_embeddings = true;
    s.mlp_act = "gelu_tanh";
    return build_decoder(c, s, ws);
  };
  return {{"GemmaForCausalLM"}, "gemma", parse, build};
}

}  // namespace foundry::models::hf
