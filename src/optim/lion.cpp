// Lion: the reference implementation of Chen et al. 2023 (google/automl lion/lion_pytorch.py),
// with the fused float32 path through kernels::lion_f32.
#include "foundry/autograd/grad_mode.h"
#include "foundry/ops/ops.h"
#include "foundry/optim/kernels.h"
#include "foundry/optim/optimizer.h"
#include "optim/common.h"

namespace foundry::optim {

namespace {

std::map<std::string, double> lion_defaults(const LionOptions& o) {
  if (!(o.lr >= 0)) raise<ValueError>("Lion: invalid learning rate: {}", o.lr);
  if (!(o.betas.first >= 0 && o.betas.first < 1))
    raise<ValueError>("Lion: invalid beta parameter at index 0: {}", o.betas.first);
  if (!(o.betas.second >= 0 && o.betas.second < 1))
    raise<ValueError>("Lion: invalid beta parameter at index 1: {}", o.betas.second);
  return {{"lr", o.lr}, {"beta1", o.betas.first}, {"beta2", o.betas.second}, {"weight_decay", o.weight_decay}};
}

struct LionSegment {
  kernels::LionStep step;
  float* param;
  const float* grad;
  float* exp_avg;
  int64_t n;
};

}  // namespace

Lion::Lion(std::vector<Tensor> params, LionOptions options)
    : Lion(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

Lion::Lion(std::vector<ParamGroup> groups, LionOptions options)
    : Optimizer("Lion", std::move(groups), lion_defaults(options)) {
  fused_ = options.fused;
}

void Lion::step() {
  autograd::NoGradGuard no_grad;
  std::vector<LionSegment> segments;
  std::vector<Tensor> keep_alive, updated;
  for (auto& group : groups_) {
    const double lr = group.options.at("lr"), wd = group.options.at("weight_decay");
    const double beta1 = group.options.at("beta1"), beta2 = group.options.at("beta2");
    std::vector<Tensor> with_grad;
    for (const Tensor& p : group.params)
      if (p.grad().defined()) with_grad.push_back(p);
    init_state(with_grad, {"exp_avg"}, /*with_step=*/false);
    for (Tensor p : with_grad) {
      Tensor grad = p.grad();
      Tensor& exp_avg = state_for(p).tensors.at("exp_avg");
      if (fused_ && detail::fusable(p, grad)) {
        grad = detail::laid_out_like(grad, p);
        keep_alive.push_back(grad);
        kernels::LionStep s;
        s.beta1 = float(beta1);
        s.one_minus_beta1 = float(1 - beta1);
        s.beta2 = float(beta2);
        s.one_minus_beta2 = float(1 - beta2);
        s.decay = float(1 - lr * wd);
        s.neg_lr = float(-lr);
        segments.push_back({s, p.data<float>(), grad.data<float>(), detail::state_ptr(exp_avg, p), p.numel()});
        updated.push_back(p);
        continue;
      }
      // Reference path: lion_pytorch.py's step, op for op.
      p.mul_(1 - lr * wd);
      Tensor update = exp_avg * beta1 + grad * (1 - beta1);
      p.add_(sign(update), -lr);
      exp_avg.mul_(beta2).add_(grad, 1 - beta2);
    }
  }
  detail::run_segments(segments, [](const LionSegment& s, int64_t off, int64_t len) {
    kernels::lion_f32(s.step, s.param + off, s.grad + off, s.exp_avg + off, len);
  });
  detail::bump_versions(updated);
}

}  // namespace foundry::optim
