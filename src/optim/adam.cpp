// Adam and AdamW: torch.optim 1.13's _single_tensor_adam/_single_tensor_adamw. The reference path
// is that code written with Foundry ops; the fused path computes the same per-tensor scalars and
// runs kernels::adam_f32 over all float32 parameters in one parallel loop.
#include <cmath>

#include "foundry/autograd/grad_mode.h"
#include "foundry/ops/ops.h"
#include "foundry/optim/kernels.h"
#include "foundry/optim/optimizer.h"
#include "optim/common.h"

namespace foundry::optim {

namespace {

std::map<std::string, double> adam_defaults(double lr, std::pair<double, double> betas, double eps, double wd,
                                            bool amsgrad, bool maximize, const char* name) {
  if (!(lr >= 0)) raise<ValueError>("{}: invalid learning rate: {}", name, lr);
  if (!(eps >= 0)) raise<ValueError>("{}: invalid epsilon value: {}", name, eps);
  if (!(betas.first >= 0 && betas.first < 1)) raise<ValueError>("{}: invalid beta parameter at index 0: {}", name, betas.first);
  if (!(betas.second >= 0 && betas.second < 1))
    raise<ValueError>("{}: invalid beta parameter at index 1: {}", name, betas.second);
  if (!(wd >= 0)) raise<ValueError>("{}: invalid weight_decay value: {}", name, wd);
  return {{"lr", lr},           {"beta1", betas.first}, {"beta2", betas.second},       {"eps", eps},
          {"weight_decay", wd}, {"amsgrad", amsgrad},   {"maximize", double(maximize)}};
}

AdamOptions to_adam(const AdamWOptions& o) {
  return {o.lr, o.betas, o.eps, o.weight_decay, o.amsgrad, o.maximize, o.fused};
}

std::vector<ParamGroup> one_group(std::vector<Tensor> params) { return {ParamGroup{std::move(params), {}}}; }

struct AdamSegment {
  kernels::AdamStep step;
  float *param, *exp_avg, *exp_avg_sq, *max_exp_avg_sq;
  const float* grad;
  int64_t n;
};

}  // namespace

Adam::Adam(std::string name, std::vector<ParamGroup> groups, const AdamOptions& o, bool decoupled)
    : Optimizer(std::move(name), std::move(groups),
                adam_defaults(o.lr, o.betas, o.eps, o.weight_decay, o.amsgrad, o.maximize,
                              decoupled ? "AdamW" : "Adam")),
      decoupled_(decoupled) {
  fused_ = o.fused;
}

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : Adam("Adam", one_group(std::move(params)), options, false) {}
Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options) : Adam("Adam", std::move(groups), options, false) {}
AdamW::AdamW(std::vector<Tensor> params, AdamWOptions options)
    : Adam("AdamW", one_group(std::move(params)), to_adam(options), true) {}
AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions options)
    : Adam("AdamW", std::move(groups), to_adam(options), true) {}

void Adam::step() {
  autograd::NoGradGuard no_grad;
  std::vector<AdamSegment> segments;
  std::vector<Tensor> keep_alive, updated;
  for (auto& group : groups_) {
    const double lr = group.options.at("lr"), beta1 = group.options.at("beta1"), beta2 = group.options.at("beta2");
    const double eps = group.options.at("eps"), wd = group.options.at("weight_decay");
    const bool amsgrad = group.options.at("amsgrad") != 0, maximize = group.options.at("maximize") != 0;
    std::vector<Tensor> with_grad;
    for (const Tensor& p : group.params)
      if (p.grad().defined()) with_grad.push_back(p);
    std::vector<std::string> names = {"exp_avg", "exp_avg_sq"};
    if (amsgrad) names.push_back("max_exp_avg_sq");
    init_state(with_grad, names, /*with_step=*/true);

    for (Tensor p : with_grad) {
      ParamState& st = state_for(p);
      if (amsgrad && !st.tensors.count("max_exp_avg_sq"))  // amsgrad switched on after a load
        st.tensors["max_exp_avg_sq"] = zeros_like(p);
      const double step = st.scalars["step"] += 1;
      const double bias_correction1 = 1 - std::pow(beta1, step);
      const double bias_correction2 = 1 - std::pow(beta2, step);
      const double step_size = lr / bias_correction1;
      const double bias_correction2_sqrt = std::sqrt(bias_correction2);
      Tensor grad = p.grad();
      Tensor& exp_avg = st.tensors.at("exp_avg");
      Tensor& exp_avg_sq = st.tensors.at("exp_avg_sq");

      if (fused_ && detail::fusable(p, grad)) {
        grad = detail::laid_out_like(grad, p);
        keep_alive.push_back(grad);
        kernels::AdamStep s;
        s.beta1 = float(beta1);
        s.one_minus_beta1 = float(1 - beta1);
        s.beta2 = float(beta2);
        s.one_minus_beta2 = float(1 - beta2);
        s.weight_decay = decoupled_ ? 0.0f : float(wd);
        s.decay = decoupled_ ? float(1 - lr * wd) : 1.0f;
        s.bias_correction2_sqrt = float(bias_correction2_sqrt);
        s.neg_step_size = float(-step_size);
        s.eps = float(eps);
        s.maximize = maximize;
        s.amsgrad = amsgrad;
        float* vmax = amsgrad ? detail::state_ptr(st.tensors.at("max_exp_avg_sq"), p) : nullptr;
        segments.push_back({s, p.data<float>(), detail::state_ptr(exp_avg, p), detail::state_ptr(exp_avg_sq, p), vmax,
                            grad.data<float>(), p.numel()});
        updated.push_back(p);
        continue;
      }

      // Reference path: torch's _single_tensor_adam(w), op for op.
      if (maximize) grad = neg(grad);
      if (decoupled_) {
        p.mul_(1 - lr * wd);
      } else if (wd != 0) {
        grad = add(grad, p, wd);
      }
      exp_avg.mul_(beta1).add_(grad, 1 - beta1);
      exp_avg_sq.mul_(beta2);
      exp_avg_sq.copy_(addcmul(exp_avg_sq, grad, grad, 1 - beta2));
      Tensor denom;
      if (amsgrad) {
        Tensor& vmax = st.tensors.at("max_exp_avg_sq");
        vmax.copy_(maximum(vmax, exp_avg_sq));
        denom = sqrt(vmax) / bias_correction2_sqrt + eps;
      } else {
        denom = sqrt(exp_avg_sq) / bias_correction2_sqrt + eps;
      }
      p.copy_(p + exp_avg * (-step_size) / denom);  // addcdiv_: self + (value * t1) / t2
    }
  }
  detail::run_segments(segments, [](const AdamSegment& s, int64_t off, int64_t len) {
    kernels::adam_f32(s.step, s.param + off, s.grad + off, s.exp_avg + off, s.exp_avg_sq + off,
                      s.max_exp_avg_sq ? s.max_exp_avg_sq + off : nullptr, len);
  });
  detail::bump_versions(updated);
}

}  // namespace foundry::optim
