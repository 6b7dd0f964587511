#include "models/hf/mamba_mixer.h"

#include <cmath>

#include "foundry/core/error.h"
#include "foundry/nn/init.h"
#include "foundry/ops/ops.h"

namespace foundry::models::hf {

CausalConv1d::CausalConv1d(const WeightSource& ws, int64_t channels, int64_t kernel, bool with_bias)
    : weight(register_parameter("weight", ws.get("weight", {channels, 1, kernel}, Init::fan_in_uniform(kernel)))),
      bias(register_parameter("bias", with_bias ? ws.get("bias", {channels}, Init::fan_in_uniform(kernel)) : Tensor())),
      channels_(channels),
      kernel_(kernel) {}

std::string CausalConv1d::extra_repr() const {
  return fmt::format("{}, {}, kernel_size=({},), stride=(1,), padding=({},), groups={}{}", channels_, channels_, kernel_,
                     kernel_ - 1, channels_, bias.defined() ? "" : ", bias=False");
}

Tensor CausalConv1d::forward(const Tensor& x, Tensor* window) {
  const int64_t B = x.size(0), L = x.size(1), K = kernel_;
  Tensor prev = window && window->defined() ? *window : zeros({B, K - 1, channels_}, x.dtype());
  Tensor xp = cat({prev, x}, 1);                      // [B, K - 1 + L, channels]
  Tensor w = weight.reshape({channels_, K}).t();      // [K, channels]
  Tensor y = xp.narrow(1, 0, L) * w.select(0, 0);
  for (int64_t k = 1; k < K; ++k) y = y + xp.narrow(1, k, L) * w.select(0, k);
  if (bias.defined()) y = y + bias;
  if (window) *window = xp.narrow(1, L, K - 1).contiguous();
  return y;
}

namespace {

// dt_proj's bias: softplus^-1 of time steps drawn log-uniformly in [dt_min, dt_max] (transformers).
Init dt_bias_init(const MambaOptions& o) {
  return Init::custom([o](Tensor& t) {
    nn::init::uniform_(t, 0.0, 1.0);
    Tensor dt = exp(t * full({}, std::log(o.dt_max) - std::log(o.dt_min)) + full({}, std::log(o.dt_min)));
    dt = clamp(dt, o.dt_floor, std::nullopt);
    t.copy_(dt + log(neg(expm1(neg(dt)))));
  });
}

}  // namespace

MambaMixer::MambaMixer(const WeightSource& ws, int64_t hidden, const MambaOptions& o)
    : A_log(register_parameter("A_log", ws.get("A_log", {o.inner, o.state}, Init::custom([o](Tensor& t) {
                                                 t.copy_(log(arange(1, o.state + 1, 1, DType::Float32)).expand({o.inner, o.state}));
                                               })))),
      D(register_parameter("D", ws.get("D", {o.inner}, Init::ones()))),
      o_(o) {
  in_proj = add_block<Linear>(*this, ws, "in_proj", hidden, 2 * o.inner, o.proj_bias, false, Init::fan_in_uniform(hidden));
  conv1d = add_block<CausalConv1d>(*this, ws, "conv1d", o.inner, o.conv_kernel, o.conv_bias);
  x_proj = add_block<Linear>(*this, ws, "x_proj", o.inner, o.dt_rank + 2 * o.state, false, false, Init::fan_in_uniform(o.inner));
  const double dt_std = std::pow(double(o.dt_rank), -0.5) * o.dt_scale;
  dt_proj = register_module("dt_proj", std::make_shared<Linear>(
                                           ws.pp("dt_proj"), o.dt_rank, o.inner, true, false,
                                           Init::custom([dt_std, random = o.dt_init_random](Tensor& t) {
                                             if (random) nn::init::uniform_(t, -dt_std, dt_std);
                                             else t.fill_(dt_std);
                                           })));
  if (!ws.has("dt_proj.bias")) {  // a fresh model (a checkpoint without it fails above)
    Tensor b = empty({o.inner}, DType::Float32);
    dt_bias_init(o).fill(b);
    dt_proj->bias.copy_(b);
  }
  out_proj = add_block<Linear>(*this, ws, "out_proj", o.inner, hidden, o.proj_bias, false, Init::fan_in_uniform(o.inner));
  if (o.inner_norm_eps > 0) {
    dt_layernorm = add_block<Norm>(*this, ws, "dt_layernorm", o.dt_rank, Norm::Kind::RMSNorm, o.inner_norm_eps);
    b_layernorm = add_block<Norm>(*this, ws, "b_layernorm", o.state, Norm::Kind::RMSNorm, o.inner_norm_eps);
    c_layernorm = add_block<Norm>(*this, ws, "c_layernorm", o.state, Norm::Kind::RMSNorm, o.inner_norm_eps);
  }
}

Tensor MambaMixer::forward(const Tensor& x, KVCache* cache, int64_t layer) {
  const bool recording = records(x, A_log, in_proj->weight);
  FOUNDRY_CHECK_AS(ValueError, !(recording && cache),
                   "{}: a forward that records gradients can't continue from a generation cache", type_name());
  const int64_t I = o_.inner, N = o_.state, R = o_.dt_rank;
  Tensor proj = in_proj->forward(x);  // [B, L, 2I]: the scan input, then the gate
  Tensor hs = activation(o_.act, conv1d->forward(proj.narrow(2, 0, I), cache ? &cache->state(layer, 0) : nullptr));
  Tensor ssm = x_proj->forward(hs);
  Tensor ts = ssm.narrow(2, 0, R), Bm = ssm.narrow(2, R, N), Cm = ssm.narrow(2, R + N, N);
  if (dt_layernorm) {
    ts = dt_layernorm->forward(ts);
    Bm = b_layernorm->forward(Bm);
    Cm = c_layernorm->forward(Cm);
  }
  Tensor dt = softplus(dt_proj->forward(ts));
  // -exp(A_log), kept between decoding steps while A_log is unchanged (its storage's version).
  Tensor A;
  if (recording) {
    A = neg(exp(A_log.to(DType::Float32)));
  } else {
    if (!A_cache_.defined() || A_cache_version_ != A_log.version() || A_cache_source_ != A_log.data_ptr()) {
      A_cache_ = neg(exp(A_log.to(DType::Float32))).contiguous();
      A_cache_version_ = A_log.version();
      A_cache_source_ = A_log.data_ptr();
    }
    A = A_cache_;
  }
  Tensor y = cache ? selective_scan_with_state(hs, dt, A, Bm, Cm, D, cache->state(layer, 1))
                   : selective_scan(hs, dt, A, Bm, Cm, D);
  return out_proj->forward(y * activation(o_.act, proj.narrow(2, I, I)));
}

MambaOptions parse_mamba_options(const json& j, const ModelConfig& c, const std::string& prefix) {
  MambaOptions o;
  const bool jamba = !prefix.empty();
  o.state = get_int(j, jamba ? "mamba_d_state" : "state_size", 16);
  o.conv_kernel = get_int(j, jamba ? "mamba_d_conv" : "conv_kernel", 4);
  const int64_t expand = get_int(j, jamba ? "mamba_expand" : "expand", 2);
  o.inner = jamba ? expand * c.hidden_size : get_int(j, "intermediate_size", expand * c.hidden_size);
  const std::string rank_key = jamba ? "mamba_dt_rank" : "time_step_rank";
  if (!j.contains(rank_key) || j[rank_key] == "auto") o.dt_rank = (c.hidden_size + 15) / 16;
  else o.dt_rank = get_int(j, rank_key);
  o.proj_bias = get_bool(j, jamba ? "mamba_proj_bias" : "use_bias", false);
  o.conv_bias = get_bool(j, jamba ? "mamba_conv_bias" : "use_conv_bias", true);
  o.act = get_string(j, "hidden_act", "silu");
  if (!known_activation(o.act)) unsupported(c, "hidden_act '" + o.act + "'");
  FOUNDRY_CHECK_AS(ValueError, o.state > 0 && o.conv_kernel > 0 && o.inner > 0 && o.dt_rank > 0,
                   "config.json: the Mamba sizes must be positive (state {}, conv kernel {}, inner {}, dt rank {})",
                   o.state, o.conv_kernel, o.inner, o.dt_rank);
  o.dt_min = get_double(j, "time_step_min", 0.001);
  o.dt_max = get_double(j, "time_step_max", 0.1);
  o.dt_floor = get_double(j, "time_step_floor", 1e-4);
  o.dt_scale = get_double(j, "time_step_scale", 1.0);
  o.dt_init_random = get_string(j, "time_step_init_scheme", "random") != "constant";
  return o;
}

}  // namespace foundry::models::hf
