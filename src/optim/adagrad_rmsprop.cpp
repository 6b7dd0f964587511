// Adagrad and RMSprop: torch.optim 1.13's _single_tensor_adagrad/_single_tensor_rmsprop, fused
// (kernels::adagrad_f32/rmsprop_f32 in one parallel loop) or written with Foundry ops.
#include <cmath>

#include "foundry/autograd/grad_mode.h"
#include "foundry/ops/ops.h"
#include "foundry/optim/kernels.h"
#include "foundry/optim/optimizer.h"
#include "optim/common.h"

namespace foundry::optim {

namespace {

std::map<std::string, double> adagrad_defaults(const AdagradOptions& o) {
  if (!(o.lr >= 0)) raise<ValueError>("Adagrad: invalid learning rate: {}", o.lr);
  if (!(o.lr_decay >= 0)) raise<ValueError>("Adagrad: invalid lr_decay value: {}", o.lr_decay);
  if (!(o.weight_decay >= 0)) raise<ValueError>("Adagrad: invalid weight_decay value: {}", o.weight_decay);
  if (!(o.initial_accumulator_value >= 0))
    raise<ValueError>("Adagrad: invalid initial_accumulator_value value: {}", o.initial_accumulator_value);
  if (!(o.eps >= 0)) raise<ValueError>("Adagrad: invalid epsilon value: {}", o.eps);
  return {{"lr", o.lr},
          {"lr_decay", o.lr_decay},
          {"weight_decay", o.weight_decay},
          {"initial_accumulator_value", o.initial_accumulator_value},
          {"eps", o.eps},
          {"maximize", double(o.maximize)}};
}

std::map<std::string, double> rmsprop_defaults(const RMSpropOptions& o) {
  if (!(o.lr >= 0)) raise<ValueError>("RMSprop: invalid learning rate: {}", o.lr);
  if (!(o.eps >= 0)) raise<ValueError>("RMSprop: invalid epsilon value: {}", o.eps);
  if (!(o.momentum >= 0)) raise<ValueError>("RMSprop: invalid momentum value: {}", o.momentum);
  if (!(o.weight_decay >= 0)) raise<ValueError>("RMSprop: invalid weight_decay value: {}", o.weight_decay);
  if (!(o.alpha >= 0)) raise<ValueError>("RMSprop: invalid alpha value: {}", o.alpha);
  return {{"lr", o.lr},
          {"alpha", o.alpha},
          {"eps", o.eps},
          {"weight_decay", o.weight_decay},
          {"momentum", o.momentum},
          {"centered", double(o.centered)},
          {"maximize", double(o.maximize)}};
}

struct AdagradSegment {
  kernels::AdagradStep step;
  float* param;
  const float* grad;
  float* sum;
  int64_t n;
};

struct RmspropSegment {
  kernels::RMSpropStep step;
  float *param, *square_avg, *grad_avg, *momentum_buffer;
  const float* grad;
  int64_t n;
};

}  // namespace

Adagrad::Adagrad(std::vector<Tensor> params, AdagradOptions options)
    : Adagrad(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

Adagrad::Adagrad(std::vector<ParamGroup> groups, AdagradOptions options)
    : Optimizer("Adagrad", std::move(groups), adagrad_defaults(options)) {
  fused_ = options.fused;
  // torch creates Adagrad's state for every parameter up front.
  for (const auto& g : groups_) init_state(g.params, {"sum"}, true, g.options.at("initial_accumulator_value"));
}

void Adagrad::step() {
  autograd::NoGradGuard no_grad;
  std::vector<AdagradSegment> segments;
  std::vector<Tensor> keep_alive, updated;
  for (auto& group : groups_) {
    const double lr = group.options.at("lr"), lr_decay = group.options.at("lr_decay");
    const double wd = group.options.at("weight_decay"), eps = group.options.at("eps");
    const bool maximize = group.options.at("maximize") != 0;
    std::vector<Tensor> with_grad;
    for (const Tensor& p : group.params)
      if (p.grad().defined()) with_grad.push_back(p);
    init_state(with_grad, {"sum"}, true, group.options.at("initial_accumulator_value"));  // groups added later
    for (Tensor p : with_grad) {
      ParamState& st = state_for(p);
      const double step = st.scalars["step"] += 1;
      const double clr = lr / (1 + (step - 1) * lr_decay);
      Tensor grad = p.grad();
      Tensor& sum = st.tensors.at("sum");
      if (fused_ && detail::fusable(p, grad)) {
        grad = detail::laid_out_like(grad, p);
        keep_alive.push_back(grad);
        kernels::AdagradStep s;
        s.weight_decay = float(wd);
        s.neg_clr = float(-clr);
        s.eps = float(eps);
        s.maximize = maximize;
        segments.push_back({s, p.data<float>(), grad.data<float>(), detail::state_ptr(sum, p), p.numel()});
        updated.push_back(p);
        continue;
      }
      if (maximize) grad = neg(grad);
      if (wd != 0) grad = add(grad, p, wd);
      sum.copy_(addcmul(sum, grad, grad, 1));
      Tensor std = sqrt(sum) + eps;
      p.copy_(p + grad * (-clr) / std);  // addcdiv_: self + (value * t1) / t2
    }
  }
  detail::run_segments(segments, [](const AdagradSegment& s, int64_t off, int64_t len) {
    kernels::adagrad_f32(s.step, s.param + off, s.grad + off, s.sum + off, len);
  });
  detail::bump_versions(updated);
}

RMSprop::RMSprop(std::vector<Tensor> params, RMSpropOptions options)
    : RMSprop(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, RMSpropOptions options)
    : Optimizer("RMSprop", std::move(groups), rmsprop_defaults(options)) {
  fused_ = options.fused;
}

void RMSprop::step() {
  autograd::NoGradGuard no_grad;
  std::vector<RmspropSegment> segments;
  std::vector<Tensor> keep_alive, updated;
  for (auto& group : groups_) {
    const double lr = group.options.at("lr"), alpha = group.options.at("alpha"), eps = group.options.at("eps");
    const double wd = group.options.at("weight_decay"), momentum = group.options.at("momentum");
    const bool centered = group.options.at("centered") != 0, maximize = group.options.at("maximize") != 0;
    std::vector<Tensor> with_grad;
    for (const Tensor& p : group.params)
      if (p.grad().defined()) with_grad.push_back(p);
    std::vector<std::string> names = {"square_avg"};
    if (momentum > 0) names.push_back("momentum_buffer");
    if (centered) names.push_back("grad_avg");
    init_state(with_grad, names, true);
    for (Tensor p : with_grad) {
      ParamState& st = state_for(p);
      st.scalars["step"] += 1;
      for (const auto& name : names)  // options changed after the state was created
        if (!st.tensors.count(name)) st.tensors[name] = zeros_like(p);
      Tensor grad = p.grad();
      Tensor& square_avg = st.tensors.at("square_avg");
      if (fused_ && detail::fusable(p, grad)) {
        grad = detail::laid_out_like(grad, p);
        keep_alive.push_back(grad);
        kernels::RMSpropStep s;
        s.alpha = float(alpha);
        s.one_minus_alpha = float(1 - alpha);
        s.weight_decay = float(wd);
        s.eps = float(eps);
        s.momentum = float(momentum);
        s.neg_lr = float(-lr);
        s.centered = centered;
        s.maximize = maximize;
        float* ga = centered ? detail::state_ptr(st.tensors.at("grad_avg"), p) : nullptr;
        float* buf = momentum > 0 ? detail::state_ptr(st.tensors.at("momentum_buffer"), p) : nullptr;
        segments.push_back({s, p.data<float>(), detail::state_ptr(square_avg, p), ga, buf, grad.data<float>(), p.numel()});
        updated.push_back(p);
        continue;
      }
      if (maximize) grad = neg(grad);
      if (wd != 0) grad = add(grad, p, wd);
      square_avg.mul_(alpha);
      square_avg.copy_(addcmul(square_avg, grad, grad, 1 - alpha));
      Tensor avg;
      if (centered) {
        Tensor& grad_avg = st.tensors.at("grad_avg");
        grad_avg.mul_(alpha).add_(grad, 1 - alpha);
        avg = sqrt(addcmul(square_avg, grad_avg, grad_avg, -1));
      } else {
        avg = sqrt(square_avg);
      }
      avg = avg + eps;
      if (momentum > 0) {
        Tensor& buf = st.tensors.at("momentum_buffer");
        buf.mul_(momentum);
        buf.copy_(buf + grad / avg);
        p.add_(buf, -lr);
      } else {
        p.copy_(p + grad * (-lr) / avg);  // addcdiv_: self + (value * t1) / t2
      }
    }
  }
  detail::run_segments(segments, [](const RmspropSegment& s, int64_t off, int64_t len) {
    kernels::rmsprop_f32(s.step, s.param + off, s.grad + off, s.square_avg + off, s.grad_avg ? s.grad_avg + off : nullptr,
                         s.momentum_buffer ? s.momentum_buffer + off : nullptr, len);
  });
  detail::bump_versions(updated);
}

}  // namespace foundry::optim
