// Finite-difference gradient checks (torch.autograd.gradcheck / gradgradcheck).
#include <cmath>

#include "foundry/autograd/autograd.h"
#include "foundry/ops/ops.h"

namespace foundry::autograd {

namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Differentiable outputs only (floating dtype).
std::vector<Tensor> float_outputs(const std::vector<Tensor>& outs) {
  std::vector<Tensor> r;
  for (const Tensor& o : outs)
    if (o.defined() && is_floating(o.dtype())) r.push_back(o);
  return r;
}

}  // namespace

bool gradcheck(const Fn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  std::vector<size_t> wrt;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    FOUNDRY_CHECK_AS(TypeError, inputs[i].dtype() == DType::Float64,
                     "gradcheck: input {} requires grad but is {} (use float64)", i, dtype_name(inputs[i].dtype()));
    wrt.push_back(i);
  }
  FOUNDRY_CHECK(!wrt.empty(), "gradcheck: no input requires grad");

  std::vector<Tensor> outs = float_outputs(fn(inputs));
  // Numerical Jacobian columns: d out / d x_j by central differences on detached copies.
  // Grad mode stays on: the checked function may itself differentiate (gradgradcheck).
  auto eval_detached = [&](const std::vector<Tensor>& xs) {
    std::vector<Tensor> r = float_outputs(fn(xs));
    for (Tensor& t : r) t = t.detach().to(DType::Float64).contiguous();
    return r;
  };
  for (size_t k = 0; k < outs.size(); ++k) {
    const Tensor& out = outs[k];
    int64_t n_out = out.numel();
    for (size_t wi : wrt) {
      const Tensor& x = inputs[wi];
      int64_t n_in = x.numel();
      // Analytical: one vector-Jacobian product per output element.
      std::vector<double> analytical(size_t(n_out * n_in), 0.0);
      if (out.requires_grad()) {
        for (int64_t j = 0; j < n_out; ++j) {
          Tensor go = zeros(out.sizes(), out.dtype());
          go.reshape({-1}).index_put_({j}, Scalar(1.0));
          auto g = grad({out}, {x}, {go}, /*retain_graph=*/true, /*create_graph=*/false, /*allow_unused=*/true);
          if (!g[0].defined()) continue;
          Tensor gc = g[0].to(DType::Float64).contiguous();
          const double* gp = gc.data<double>();
          for (int64_t i = 0; i < n_in; ++i) analytical[size_t(j * n_in + i)] = gp[i];
        }
      }
      // Numerical.
      std::vector<double> numerical(size_t(n_out * n_in), 0.0);
      for (int64_t i = 0; i < n_in; ++i) {
        std::vector<Tensor> plus = inputs, minus = inputs;
        Tensor xp = x.detach().clone(), xm = x.detach().clone();
        double v = xp.reshape({-1}).index({i}).item<double>();
        xp.reshape({-1}).index_put_({i}, Scalar(v + opt.eps));
        xm.reshape({-1}).index_put_({i}, Scalar(v - opt.eps));
        xp.requires_grad_(true);
        xm.requires_grad_(true);
        plus[wi] = xp;
        minus[wi] = xm;
        Tensor fp = eval_detached(plus)[k], fm = eval_detached(minus)[k];
        const double* pp = fp.data<double>();
        const double* pm = fm.data<double>();
        for (int64_t j = 0; j < n_out; ++j) numerical[size_t(j * n_in + i)] = (pp[j] - pm[j]) / (2 * opt.eps);
      }
      for (size_t e = 0; e < analytical.size(); ++e) {
        double a = analytical[e], nv = numerical[e];
        bool ok = std::fabs(a - nv) <= opt.atol + opt.rtol * std::fabs(nv) || (std::isnan(a) && std::isnan(nv));
        if (!ok) {
          if (!opt.raise_on_failure) return false;
          raise<Error>("gradcheck: Jacobian mismatch for output {} with respect to input {}, element (out {}, in {}): "
                       "numerical {} vs analytical {}",
                       k, wi, int64_t(e) / n_in, int64_t(e) % n_in, nv, a);
        }
      }
    }
  }
  return true;
}

bool gradgradcheck(const Fn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  std::vector<size_t> wrt;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) wrt.push_back(i);
  std::vector<Tensor> outs = float_outputs(fn(inputs));
  // Random grad_outputs (fixed seed) become extra inputs of the checked function.
  Generator gen(12345);
  std::vector<Tensor> grad_outs;
  for (const Tensor& o : outs) grad_outs.push_back(randn(o.sizes(), DType::Float64, &gen).requires_grad_());
  size_t n_in = inputs.size();
  Fn first_order = [&](const std::vector<Tensor>& all) {
    std::vector<Tensor> xs(all.begin(), all.begin() + long(n_in));
    std::vector<Tensor> gos(all.begin() + long(n_in), all.end());
    std::vector<Tensor> o = float_outputs(fn(xs));
    std::vector<Tensor> diff_outs, diff_gos;
    for (size_t k = 0; k < o.size(); ++k)
      if (o[k].requires_grad()) {
        diff_outs.push_back(o[k]);
        diff_gos.push_back(gos[k]);
      }
    std::vector<Tensor> targets;
    for (size_t i : wrt) targets.push_back(xs[i]);
    if (diff_outs.empty()) {
      std::vector<Tensor> z;
      for (const Tensor& t : targets) z.push_back(zeros_like(t));
      return z;
    }
    auto g = grad(diff_outs, targets, diff_gos, true, /*create_graph=*/true, /*allow_unused=*/true);
    for (size_t i = 0; i < g.size(); ++i)
      if (!g[i].defined()) g[i] = zeros_like(targets[i]);
    return g;
  };
  std::vector<Tensor> all = inputs;
  all.insert(all.end(), grad_outs.begin(), grad_outs.end());
  return gradcheck(first_order, all, opt);
}

}  // namespace foundry::autograd
