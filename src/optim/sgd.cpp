// SGD: torch.optim 1.13's _single_tensor_sgd (momentum, dampening, nesterov, weight decay,
// maximize), with the fused float32 path through kernels::sgd_f32.
#include <cmath>

#include "foundry/autograd/grad_mode.h"
#include "foundry/ops/ops.h"
#include "foundry/optim/kernels.h"
#include "foundry/optim/optimizer.h"
#include "optim/common.h"

namespace foundry::optim {

namespace {

std::map<std::string, double> sgd_defaults(const SGDOptions& o) {
  // An unset lr, not a sentinel value: lr=-1 was reported as missing instead of invalid.
  if (!o.lr) raise<ValueError>("SGD: lr is required (torch.optim.SGD has no default)");
  const double lr = *o.lr;
  if (!(lr >= 0)) raise<ValueError>("SGD: invalid learning rate: {}", lr);
  if (!(o.momentum >= 0)) raise<ValueError>("SGD: invalid momentum value: {}", o.momentum);
  if (!(o.weight_decay >= 0)) raise<ValueError>("SGD: invalid weight_decay value: {}", o.weight_decay);
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0))
    raise<ValueError>("SGD: nesterov momentum requires a momentum and zero dampening");
  return {{"lr", lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", double(o.nesterov)},
          {"maximize", double(o.maximize)}};
}

struct SgdSegment {
  kernels::SGDStep step;
  float* param;
  const float* grad;
  float* buf;
  int64_t n;
};

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options) : Optimizer("SGD", std::move(groups), sgd_defaults(options)) {
  fused_ = options.fused;
}

void SGD::step() {
  autograd::NoGradGuard no_grad;
  std::vector<SgdSegment> segments;
  std::vector<Tensor> keep_alive, updated;
  for (auto& group : groups_) {
    const double lr = group.options.at("lr"), momentum = group.options.at("momentum");
    const double dampening = group.options.at("dampening"), wd = group.options.at("weight_decay");
    const bool nesterov = group.options.at("nesterov") != 0, maximize = group.options.at("maximize") != 0;
    std::vector<Tensor> with_grad, need_buffer;
    for (const Tensor& p : group.params) {
      if (!p.grad().defined()) continue;
      with_grad.push_back(p);
      const ParamState* st = state(p);
      if (momentum != 0 && (!st || !st->tensors.count("momentum_buffer"))) need_buffer.push_back(p);
    }
    // Buffers of parameters starting momentum together share one allocation; `first` marks them.
    std::vector<Tensor> fresh = detail::flat_zeros_like(need_buffer, 0.0);
    std::unordered_map<const TensorImpl*, bool> first;
    for (size_t i = 0; i < need_buffer.size(); ++i) {
      state_for(need_buffer[i]).tensors["momentum_buffer"] = fresh[i];
      first[need_buffer[i].impl()] = true;
    }

    for (Tensor p : with_grad) {
      Tensor grad = p.grad();
      const bool is_first = first.count(p.impl()) != 0;
      if (fused_ && detail::fusable(p, grad)) {
        grad = detail::laid_out_like(grad, p);
        keep_alive.push_back(grad);
        kernels::SGDStep s;
        s.weight_decay = float(wd);
        s.momentum = float(momentum);
        s.one_minus_dampening = float(1 - dampening);
        s.neg_lr = float(-lr);
        s.nesterov = nesterov;
        s.maximize = maximize;
        s.first = is_first;
        float* buf = momentum != 0 ? detail::state_ptr(state_for(p).tensors.at("momentum_buffer"), p) : nullptr;
        segments.push_back({s, p.data<float>(), grad.data<float>(), buf, p.numel()});
        updated.push_back(p);
        continue;
      }
      // Reference path: torch's _single_tensor_sgd.
      Tensor d_p = maximize ? neg(grad) : grad;
      if (wd != 0) d_p = add(d_p, p, wd);
      if (momentum != 0) {
        Tensor& buf = state_for(p).tensors.at("momentum_buffer");
        if (is_first) buf.copy_(d_p);
        else buf.mul_(momentum).add_(d_p, 1 - dampening);
        d_p = nesterov ? add(d_p, buf, momentum) : buf;
      }
      p.add_(d_p, -lr);
    }
  }
  detail::run_segments(segments, [](const SgdSegment& s, int64_t off, int64_t len) {
    kernels::sgd_f32(s.step, s.param + off, s.grad + off, s.buf ? s.buf + off : nullptr, len);
  });
  detail::bump_versions(updated);
}

}  // namespace foundry::optim
