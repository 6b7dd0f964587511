// The blocks Mamba and Jamba share: the causal depthwise convolution (nn.Conv1d with groups =
// channels, padding = kernel - 1, cut to the input length) and the selective-state-space mixer
// (transformers v4.40 MambaMixer / JambaMambaMixer slow_forward). With a cache the convolution
// window (slot 0) and the SSM state (slot 1) of the layer carry over, so a generated token costs
// O(1) in the sequence length; the prompt runs through one scan kernel.
#pragma once

#include <memory>
#include <string>

#include "models/hf/blocks.h"

namespace foundry::models::hf {

class CausalConv1d : public nn::Module {
 public:
  CausalConv1d(const WeightSource& ws, int64_t channels, int64_t kernel, bool bias);
  std::string type_name() const override { return "Conv1d"; }
  std::string extra_repr() const override;
  /// x [B, L, channels] -> [B, L, channels]. `window` (may be null): the last kernel - 1 inputs
  /// before x ([B, kernel - 1, channels]; undefined: zeros), replaced by the last ones after x.
  Tensor forward(const Tensor& x, Tensor* window);
  Tensor& weight;
  Tensor& bias;

 private:
  int64_t channels_, kernel_;
};

struct MambaOptions {
  int64_t inner = 0, state = 16, conv_kernel = 4, dt_rank = 0;
  bool proj_bias = false, conv_bias = true;
  std::string act = "silu";
  /// Jamba: RMSNorms over the time step, B and C after x_proj (eps).
  double inner_norm_eps = 0;
  // Initialisation of a fresh mixer (transformers' _init_weights).
  double dt_min = 0.001, dt_max = 0.1, dt_floor = 1e-4, dt_scale = 1.0;
  bool dt_init_random = true;
};

class MambaMixer : public nn::Module {
 public:
  MambaMixer(const WeightSource& ws, int64_t hidden, const MambaOptions& o);
  std::string type_name() const override { return o_.inner_norm_eps > 0 ? "JambaMambaMixer" : "MambaMixer"; }
  /// x [B, L, hidden]; with a cache, continues from (and updates) layer `layer`'s state.
  Tensor forward(const Tensor& x, KVCache* cache, int64_t layer);
  std::shared_ptr<Linear> in_proj, x_proj, dt_proj, out_proj;
  std::shared_ptr<CausalConv1d> conv1d;
  std::shared_ptr<Norm> dt_layernorm, b_layernorm, c_layernorm;
  Tensor& A_log;
  Tensor& D;

 private:
  MambaOptions o_;
  Tensor A_cache_;
  uint32_t A_cache_version_ = 0;
  const void* A_cache_source_ = nullptr;
};

/// Reads the mixer's config keys under Mamba's names (prefix "") or Jamba's ("mamba_").
MambaOptions parse_mamba_options(const json& j, const ModelConfig& c, const std::string& prefix);

}  // namespace foundry::models::hf
