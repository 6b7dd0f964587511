// Qwen2MoeForCausalLM (HF v4.40): Qwen2's attention; layer i is a mixture of experts when it is not
// in `mlp_only_layers` and (i + 1) % decoder_sparse_step == 0, else a dense MLP. The MoE adds a
// shared expert scaled by sigmoid(shared_expert_gate(x)); top-k weights renormalised only when
// `norm_topk_prob`.
#include <algorithm>

#include "models/hf/blocks.h"
#include "models/hf/decoder.h"

namespace foundry::models::hf {

Architecture qwen2_moe_architecture() {
  auto parse = [](const json& j, ModelConfig& c) {
    parse_decoder_common(j, c);
    if (get_bool(j, "use_sliding_window", false)) unsupported(c, "use_sliding_window = true");
    refuse_router_aux_loss(j, c);
  };
  auto build = [](const ModelConfig& c, const WeightSource& ws) {
    json j = json::parse(c.json);
    DecoderSpec s;
    s.q_bias = s.k_bias = s.v_bias = true;
    s.moe = DecoderSpec::Moe::Qwen2;
    s.num_experts = get_int(j, "num_experts");
    s.experts_per_token = get_int(j, "num_experts_per_tok");
    FOUNDRY_CHECK_AS(ValueError, s.experts_per_token > 0 && s.experts_per_token <= s.num_experts,
                     "config.json: num_experts_per_tok ({}) must be in 1..num_experts ({})", s.experts_per_token,
                     s.num_experts);
    s.norm_topk_prob = get_bool(j, "norm_topk_prob", false);
    s.expert_intermediate = get_int(j, "moe_intermediate_size");
    s.shared_expert_intermediate = get_int(j, "shared_expert_intermediate_size", 0);
    const int64_t step = get_int(j, "decoder_sparse_step", 1);
    FOUNDRY_CHECK_AS(ValueError, step > 0, "config.json: decoder_sparse_step must be positive, got {}", step);
    std::vector<int64_t> dense_only;
    if (auto it = j.find("mlp_only_layers"); it != j.end() && it->is_array()) dense_only = it->get<std::vector<int64_t>>();
    for (int64_t i = 0; i < c.num_layers; ++i)
      s.sparse_layers.push_back(std::find(dense_only.begin(), dense_only.end(), i) == dense_only.end() &&
                                (i + 1) % step == 0);
    return build_decoder(c, s, ws);
  };
  return {{"Qwen2MoeForCausalLM"}, "qwen2_moe", parse, build};
}

}  // namespace foundry::models::hf
