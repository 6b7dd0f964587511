// Normalisation ops: layer norm (fused forward native_layer_norm and fused backward
// _layer_norm_backward, whose own gradient is written in ops), RMS norm (_rms_norm and
// _rms_norm_backward, the same structure), group norm (a composite over the layer-norm kernel)
// and batch norm (native_batch_norm: fused statistics, running-stat updates in place, gradient
// in ops).
//
// The statistics outputs (mean, rstd, invstd) are differentiable like any output (PyTorch leaves
// them without gradients; as it never feeds them a gradient, results agree wherever PyTorch
// defines one). The fused backward ops are functions of (grad, input, weight) alone (their kernels
// recompute each row's statistics), so their own gradients, written in ops with mean and rstd
// recomputed as ops of the input, are exact to any order.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/cpu/norm.h"
#include "ops/nn_common.h"

namespace foundry {

using ops::Args;
using ops::BackwardContext;
using ops::Sample;
using ops::Value;
using ops::nn::U;
using ops::nn::S;
using ops::nn::W;

namespace {

// Trailing dims [axis, ndim) are normalised.
std::vector<int64_t> trailing_dims(int64_t ndim, int64_t k) {
  std::vector<int64_t> d;
  for (int64_t i = ndim - k; i < ndim; ++i) d.push_back(i);
  return d;
}
std::vector<int64_t> leading_dims(int64_t axis) {
  std::vector<int64_t> d(static_cast<size_t>(axis));
  std::iota(d.begin(), d.end(), 0);
  return d;
}

// Sum over the leading (row) dims down to the normalized shape.
Tensor sum_rows(const Tensor& t, int64_t axis) { return axis == 0 ? t : sum(t, leading_dims(axis)); }

// Checks normalized_shape against the input's trailing dims and weight/bias shapes; returns the
// axis where normalisation starts.
int64_t check_norm_shapes(const char* op, const Tensor& x, const std::vector<int64_t>& ns, const Tensor& w,
                          const Tensor& b) {
  const int64_t k = int64_t(ns.size());
  bool ok = x.dim() >= k;
  for (int64_t i = 0; ok && i < k; ++i) ok = x.size(x.dim() - k + i) == ns[size_t(i)];
  if (!ok)
    raise<ValueError>("{}: given normalized_shape={}, expected input with shape [*, {}], but got input of size {}", op,
                      shape_str(ns), shape_str(ns).substr(1, shape_str(ns).size() - 2), shape_str(x.sizes()));
  if (w.defined() && !(Shape(w.sizes()) == Shape(ns)))
    raise<ValueError>("{}: expected weight to be of same shape as normalized_shape, but got weight of shape {} and "
                      "normalized_shape = {}",
                      op, shape_str(w.sizes()), shape_str(ns));
  if (b.defined() && !(Shape(b.sizes()) == Shape(ns)))
    raise<ValueError>("{}: expected bias to be of same shape as normalized_shape, but got bias of shape {} and "
                      "normalized_shape = {}",
                      op, shape_str(b.sizes()), shape_str(ns));
  return x.dim() - k;
}

Shape stat_shape(const Tensor& x, int64_t axis) {
  Shape s;
  for (int64_t d = 0; d < x.dim(); ++d) s.push_back(d < axis ? x.size(d) : 1);
  return s;
}

int64_t prod(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t e : v) p *= e;
  return p;
}

// weight/bias follow the input's dtype (a recorded conversion, so their gradients come back in
// their own dtype).
void cast_params(Args& a, std::initializer_list<size_t> idx) {
  DType dt = a[0].tensor().dtype();
  for (size_t i : idx)
    if (a[i].is_tensor() && a[i].tensor().defined() && a[i].tensor().dtype() != dt) a[i] = a[i].tensor().to(dt);
}

// Input gradient contributed by gradients of the statistics outputs of a normalisation over `dims`
// (n elements each): dmean/dx = 1/n, drstd/dx = -rstd^3 (x - mean) / n (mean undefined: RMS norm,
// drstd/dx = -rstd^3 x / n). Undefined when both gradients are zero (the usual case).
Tensor stat_grads(const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& g_mean, const Tensor& g_rstd,
                  double n) {
  Tensor extra;
  if (g_mean.defined() && ops::nn::any_nonzero(g_mean)) extra = g_mean.expand(x.sizes()) / W(n);
  if (g_rstd.defined() && ops::nn::any_nonzero(g_rstd)) {
    Tensor centred = mean.defined() ? x - mean : x;
    Tensor t = neg(g_rstd * rstd * rstd * rstd * centred) / W(n);
    extra = extra.defined() ? extra + t : t;
  }
  return extra;
}

std::vector<Sample> layer_norm_samples(DType dt, Generator& g) {
  std::vector<Sample> s;
  Tensor x = U({3, 5}, dt, g);
  s.push_back({{x, std::vector<int64_t>{5}, U({5}, dt, g), U({5}, dt, g), 1e-5}});
  s.push_back({{x, std::vector<int64_t>{5}, Value(), Value(), 1e-5}, "no affine"});
  s.push_back({{x, std::vector<int64_t>{5}, U({5}, dt, g), Value(), 1e-3}, "weight only"});
  s.push_back({{U({2, 3, 4}, dt, g), std::vector<int64_t>{3, 4}, U({3, 4}, dt, g), U({3, 4}, dt, g), 1e-5}, "2-d shape"});
  s.push_back({{U({2, 3, 4}, dt, g), std::vector<int64_t>{2, 3, 4}, Value(), U({2, 3, 4}, dt, g), 1e-5}, "all dims"});
  s.push_back({{ops::nn::noncontig(U({4, 6}, dt, g)), std::vector<int64_t>{6}, U({6}, dt, g), U({6}, dt, g), 1e-5},
               "non-contiguous"});
  s.push_back({{U({0, 4}, dt, g), std::vector<int64_t>{4}, U({4}, dt, g), U({4}, dt, g), 1e-5}, "empty"});
  s.push_back({{U({2, 37}, dt, g), std::vector<int64_t>{37}, U({37}, dt, g), U({37}, dt, g), 1e-5}, "long rows"});
  return s;
}

std::vector<Sample> rms_norm_samples(DType dt, Generator& g, bool internal) {
  std::vector<Sample> s;
  auto eps = [&](double e) { return internal ? Value(e) : Value(); };
  s.push_back({{U({3, 5}, dt, g), std::vector<int64_t>{5}, U({5}, dt, g), eps(1e-6)}});
  s.push_back({{U({3, 5}, dt, g), std::vector<int64_t>{5}, Value(), eps(1e-5)}, "no weight"});
  s.push_back({{U({2, 3, 4}, dt, g), std::vector<int64_t>{3, 4}, U({3, 4}, dt, g), Value(1e-3)}, "2-d shape"});
  s.push_back({{ops::nn::noncontig(U({4, 19}, dt, g)), std::vector<int64_t>{19}, U({19}, dt, g), eps(1e-6)},
               "non-contiguous"});
  s.push_back({{U({0, 4}, dt, g), std::vector<int64_t>{4}, U({4}, dt, g), eps(1e-6)}, "empty"});
  return s;
}

double rms_eps(const Value& v, DType dt) {
  if (!v.is_none()) return v.to_double();
  // PyTorch 2.x: machine epsilon of the op-math type (float for the 16-bit types).
  return dt == DType::Float64 ? std::numeric_limits<double>::epsilon()
                              : double(std::numeric_limits<float>::epsilon());
}

// ---- batch norm ------------------------------------------------------------------------------

void check_bn(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& rm, const Tensor& rv, bool training) {
  FOUNDRY_CHECK_AS(ValueError, x.dim() >= 2, "batch_norm: expected an input of at least 2 dims [N, C, *], got {}",
                   shape_str(x.sizes()));
  const int64_t C = x.size(1);
  auto check = [&](const Tensor& t, const char* name) {
    if (t.defined() && !(t.dim() == 1 && t.size(0) == C))
      raise<ValueError>("batch_norm: {} should contain {} elements (one per channel of input {}), got {}", name, C,
                        shape_str(x.sizes()), shape_str(t.sizes()));
  };
  check(w, "weight");
  check(b, "bias");
  check(rm, "running_mean");
  check(rv, "running_var");
  if (!training)
    FOUNDRY_CHECK_AS(ValueError, rm.defined() && rv.defined(),
                     "batch_norm: running_mean and running_var must be defined in evaluation mode");
  if (training && x.numel() > 0 && x.numel() / C <= 1)
    raise<ValueError>("batch_norm: expected more than 1 value per channel when training, got input size {}",
                      shape_str(x.sizes()));
}

// [C] -> [1, C, 1, ...] to broadcast against the input.
Tensor per_channel(const Tensor& t, int64_t ndim) {
  Shape s(size_t(ndim), 1);
  s[1] = t.size(0);
  return t.reshape(s);
}

std::vector<int64_t> bn_dims(int64_t ndim) {
  std::vector<int64_t> d = {0};
  for (int64_t i = 2; i < ndim; ++i) d.push_back(i);
  return d;
}

std::vector<Tensor> native_batch_norm_forward(const Args& a) {
  const Tensor& x = a.tensor(0);
  const Tensor w = a[1].is_none() ? Tensor() : a.tensor(1);
  const Tensor b = a[2].is_none() ? Tensor() : a.tensor(2);
  Tensor rm = a[3].is_none() ? Tensor() : a.tensor(3);
  Tensor rv = a[4].is_none() ? Tensor() : a.tensor(4);
  const bool training = a[5].to_bool();
  const double momentum = a[6].to_double(), eps = a[7].to_double();
  ops::nn::check_floating(x, "batch_norm");
  check_bn(x, w, b, rm, rv, training);
  const int64_t C = x.size(1);
  Tensor x3 = x.contiguous();
  std::vector<double> mean(static_cast<size_t>(C)), invstd(static_cast<size_t>(C));
  Tensor save_mean, save_invstd;
  if (training) {
    std::vector<Tensor> st = kernels::batch_norm_stats(x3);
    const double* mp = st[0].data<double>();
    const double* vp = st[1].data<double>();
    const double count = double(x.numel() / std::max<int64_t>(C, 1));
    for (int64_t c = 0; c < C; ++c) {
      mean[size_t(c)] = mp[c];
      invstd[size_t(c)] = 1.0 / std::sqrt(vp[c] + eps);
    }
    save_mean = st[0].to(x.dtype());
    save_invstd = tensor<double>(invstd, {C}).to(x.dtype());
    // Running statistics: exponential average with the unbiased variance (PyTorch).
    if (rm.defined()) {
      Tensor upd = (rm.to(DType::Float64) * S(1.0 - momentum, DType::Float64) + st[0] * S(momentum, DType::Float64)).to(rm.dtype());
      copy_into(rm, upd);
    }
    if (rv.defined()) {
      double unbias = count > 1 ? count / (count - 1) : 1.0;
      Tensor upd = (rv.to(DType::Float64) * S(1.0 - momentum, DType::Float64) + st[1] * S(momentum * unbias, DType::Float64)).to(rv.dtype());
      copy_into(rv, upd);
    }
  } else {
    std::vector<double> m = rm.to_vector<double>(), v = rv.to_vector<double>();
    for (int64_t c = 0; c < C; ++c) {
      mean[size_t(c)] = m[size_t(c)];
      invstd[size_t(c)] = 1.0 / std::sqrt(v[size_t(c)] + eps);
    }
    save_mean = empty({0}, x.dtype());
    save_invstd = empty({0}, x.dtype());
  }
  std::vector<double> wv = w.defined() ? w.to_vector<double>() : std::vector<double>(size_t(C), 1.0);
  std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>(size_t(C), 0.0);
  std::vector<double> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  for (size_t c = 0; c < size_t(C); ++c) {
    scale[c] = invstd[c] * wv[c];
    shift[c] = bv[c] - mean[c] * scale[c];
  }
  Tensor y = x.numel() > 0 ? kernels::channel_affine(x3, scale, shift) : empty(x.sizes(), x.dtype());
  return {y, save_mean, save_invstd};
}

std::vector<Tensor> native_batch_norm_backward(BackwardContext& c) {
  const Tensor& x = c.input("input");
  const Tensor w = c.arg("weight").is_none() ? Tensor() : c.input("weight");
  const bool training = c.bool_arg("training");
  const int64_t nd = x.dim();
  std::vector<int64_t> dims = bn_dims(nd);
  const Tensor& g = c.grad(0);
  Tensor mean_b, invstd_b;
  if (training && autograd::is_grad_enabled()) {
    // Building a second derivative: the statistics as differentiable functions of the input.
    mean_b = mean(x, dims, true);
    invstd_b = rsqrt(mean((x - mean_b) * (x - mean_b), dims, true) + S(c.double_arg("eps"), x.dtype()));
  } else if (training) {
    mean_b = per_channel(c.output(1), nd);
    invstd_b = per_channel(c.output(2), nd);
  } else {
    mean_b = per_channel(c.input("running_mean"), nd).to(x.dtype());
    invstd_b = per_channel(rsqrt(c.input("running_var").to(x.dtype()) + S(c.double_arg("eps"), x.dtype())), nd);
  }
  Tensor xh = (x - mean_b) * invstd_b;
  std::vector<Tensor> out(5);
  Tensor a = w.defined() ? g * per_channel(w, nd) : g;
  if (c.needs_grad("input")) {
    if (training) {
      out[0] = invstd_b * (a - mean(a, dims, true) - xh * mean(a * xh, dims, true));
      const double count = double(x.numel() / std::max<int64_t>(x.size(1), 1));
      Tensor extra = stat_grads(x, mean_b, invstd_b, per_channel(c.grad(1), nd), per_channel(c.grad(2), nd), count);
      if (extra.defined()) out[0] = out[0] + extra;
    } else {
      out[0] = a * invstd_b;
    }
  }
  if (w.defined() && c.needs_grad("weight")) out[1] = sum(g * xh, dims);
  if (c.needs_grad("bias")) out[2] = sum(g, dims);
  return out;
}

std::vector<Sample> batch_norm_samples(DType dt, Generator& g, bool native) {
  // native: (input, weight, bias, running_mean, running_var, training, momentum, eps)
  // batch_norm: (input, running_mean, running_var, weight, bias, training, momentum, eps)
  std::vector<Sample> s;
  auto add = [&](Tensor x, bool affine, bool stats, bool training, const char* note) {
    int64_t C = x.size(1);
    Value w = affine ? Value(U({C}, dt, g)) : Value(), b = affine ? Value(U({C}, dt, g)) : Value();
    Value rm = stats ? Value(U({C}, dt, g, -0.5, 0.5)) : Value();
    Value rv = stats ? Value(U({C}, dt, g, 0.5, 1.5)) : Value();
    if (native) s.push_back({{x, w, b, rm, rv, training, 0.1, 1e-5}, note});
    else s.push_back({{x, rm, rv, w, b, training, 0.1, 1e-5}, note});
  };
  add(U({4, 3}, dt, g), true, true, true, "2-d training");
  add(U({2, 3, 5}, dt, g), true, true, true, "3-d training");
  add(U({2, 3, 2, 3}, dt, g), true, false, true, "4-d training, no running stats");
  add(U({2, 3, 2, 3}, dt, g), false, true, true, "training, no affine");
  add(U({2, 3, 5}, dt, g), true, true, false, "eval");
  add(U({2, 3, 2, 2}, dt, g), false, true, false, "eval, no affine");
  add(ops::nn::noncontig(U({3, 4, 5}, dt, g)), true, true, true, "non-contiguous");
  return s;
}

}  // namespace

// ---- C++ API -----------------------------------------------------------------------------------

Tensor layer_norm(const Tensor& x, IntList normalized_shape, const Tensor& weight, const Tensor& bias, double eps) {
  return ops::call1(FOUNDRY_OP("layer_norm"), {x, normalized_shape, weight, bias, eps});
}
Tensor rms_norm(const Tensor& x, IntList normalized_shape, const Tensor& weight, std::optional<double> eps) {
  return ops::call1(FOUNDRY_OP("rms_norm"), {x, normalized_shape, weight, eps});
}
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight, const Tensor& bias, double eps) {
  return ops::call1(FOUNDRY_OP("group_norm"), {x, num_groups, weight, bias, eps});
}
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps) {
  return ops::call1(FOUNDRY_OP("batch_norm"), {x, running_mean, running_var, weight, bias, training, momentum, eps});
}

namespace ops {

void register_nn_norm_ops(Registry& r) {
  r.add({.schema_text = "native_layer_norm(Tensor input, int[] normalized_shape, Tensor? weight, Tensor? bias, "
                        "float eps) -> (Tensor, Tensor, Tensor)",
         .family = "nn",
         .doc = "layer norm returning (output, mean, rstd); fused kernel reading each row once",
         .saves = {"input", "weight"},
         .saves_outputs = {1, 2},
         .prepare = [](Args& a) { cast_params(a, {2, 3}); },
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               ops::nn::check_floating(x, "layer_norm");
               std::vector<int64_t> ns = a[1].int_list();
               Tensor w = a[2].is_none() ? Tensor() : a.tensor(2), b = a[3].is_none() ? Tensor() : a.tensor(3);
               int64_t axis = check_norm_shapes("layer_norm", x, ns, w, b);
               return kernels::layer_norm_forward(x, prod(ns), w, b, a[4].to_double(), stat_shape(x, axis));
             },
         .backward =
             [](BackwardContext& c) {
               const Tensor& x = c.input("input");
               std::vector<int64_t> ns = c.arg("normalized_shape").int_list();
               const int64_t k = int64_t(ns.size()), axis = x.dim() - k;
               Tensor w = c.arg("weight").is_none() ? Tensor() : c.input("weight");
               std::vector<Tensor> gr = ops::call(FOUNDRY_OP("_layer_norm_backward"),
                                                  {c.grad(0), x, ns, w.defined() ? Value(w) : Value(), c.arg("eps")});
               std::vector<Tensor> out(3);
               if (c.needs_grad("input")) {
                 out[0] = gr[0];
                 Tensor extra = stat_grads(x, c.output(1), c.output(2), c.grad(1), c.grad(2), double(prod(ns)));
                 if (extra.defined()) out[0] = out[0] + extra;
               }
               if (w.defined() && c.needs_grad("weight")) out[1] = gr[1];
               if (c.needs_grad("bias")) out[2] = gr[2];
               (void)axis;
               return out;
             },
         .dtypes = kFloatTypes,
         .samples = layer_norm_samples,
         .ref = "torch.native_layer_norm"});

  r.add({.schema_text = "_layer_norm_backward(Tensor grad_out, Tensor input, int[] normalized_shape, Tensor? weight, "
                        "float eps) -> (Tensor, Tensor, Tensor)",
         .family = "nn",
         .doc = "fused layer-norm gradient: (grad_input, grad_weight, grad_bias), statistics recomputed per row; "
                "grad_weight/grad_bias are those of a unit weight and zero bias when weight is None",
         .saves = {"grad_out", "input", "weight"},
         .forward =
             [](const Args& a) {
               const Tensor& g = a.tensor(0);
               const Tensor& x = a.tensor(1);
               ops::nn::check_floating(x, "_layer_norm_backward");
               std::vector<int64_t> ns = a[2].int_list();
               Tensor w = a[3].is_none() ? Tensor() : a.tensor(3);
               check_norm_shapes("_layer_norm_backward", x, ns, w, Tensor());
               FOUNDRY_CHECK_AS(ValueError, Shape(g.sizes()) == Shape(x.sizes()),
                                "_layer_norm_backward: grad_out {} must have the input's shape {}",
                                shape_str(g.sizes()), shape_str(x.sizes()));
               std::vector<Tensor> r = kernels::layer_norm_backward(g, x, w, prod(ns), a[4].to_double());
               DType pdt = w.defined() ? w.dtype() : x.dtype();
               return std::vector<Tensor>{r[0], r[1].view(ns).to(pdt), r[2].view(ns).to(pdt)};
             },
         .backward =
             [](BackwardContext& c) {
               // 16-bit types: the formulas run in float (the slots convert the results back).
               const DType ct = c.input_dtype("input") == DType::Float64 ? DType::Float64 : DType::Float32;
               const Tensor g = c.input("grad_out").to(ct);
               const Tensor x = c.input("input").to(ct);
               Tensor w = c.arg("weight").is_none() ? Tensor() : c.input("weight").to(ct);
               std::vector<int64_t> ns = c.arg("normalized_shape").int_list();
               const int64_t k = int64_t(ns.size()), axis = x.dim() - k;
               const double n = double(prod(ns));
               std::vector<int64_t> rd = trailing_dims(x.dim(), k);
               auto rmean = [&](const Tensor& t) { return mean(t, rd, true); };
               auto rsum = [&](const Tensor& t) { return sum(t, rd, true); };
               Tensor mu = rmean(x);
               Tensor xc = x - mu;
               Tensor rs = rsqrt(rmean(xc * xc) + S(c.double_arg("eps"), x.dtype()));
               const Tensor ggx = c.grad(0).to(ct), ggw = c.grad(1).to(ct), ggb = c.grad(2).to(ct);
               // L = <ggx, gx> + <ggw, gw> + <ggb, gb> with gx = rs (a - mean(a) - xh mean(a xh)), a = g w,
               // xh = (x - mu) rs. Partial derivatives with mu and rs held fixed first (dA = dL/da,
               // G = dL/dxh), then the chain through mu = mean(x) (dmu/dx = 1/n) and
               // rs = (var(x) + eps)^-1/2 (drs/dx = -rs^3 (x - mu) / n).
               Tensor xh = xc * rs;
               Tensor a = w.defined() ? g * w : g;
               Tensor abar = rmean(a), m = rmean(a * xh), ggx_xh = rmean(ggx * xh);
               Tensor dA = rs * (ggx - rmean(ggx) - xh * ggx_xh);
               Tensor G = neg(rs * (ggx * m + a * ggx_xh)) + ggw * g;
               // One slot per tensor parameter: grad_out, input, weight.
               std::vector<Tensor> out(3);
               if (c.needs_grad("grad_out")) out[0] = (w.defined() ? dA * w : dA) + ggw * xh + ggb;
               if (c.needs_grad("input")) {
                 Tensor d_mu = neg(rs * rsum(G));
                 Tensor d_rs = rsum(ggx * (a - abar - xh * m)) + rsum(G * xc);
                 out[1] = rs * G + d_mu / W(n) - d_rs * rs * rs * rs * xc / W(n);
               }
               if (w.defined() && c.needs_grad("weight")) out[2] = sum_rows(dA * g, axis);
               return out;
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               std::vector<Sample> s;
               s.push_back({{U({3, 5}, dt, g), U({3, 5}, dt, g), std::vector<int64_t>{5}, U({5}, dt, g), 1e-5}});
               s.push_back({{U({3, 5}, dt, g), U({3, 5}, dt, g), std::vector<int64_t>{5}, Value(), 1e-5}, "no weight"});
               s.push_back({{U({2, 3, 4}, dt, g), U({2, 3, 4}, dt, g), std::vector<int64_t>{3, 4}, U({3, 4}, dt, g),
                             1e-3},
                            "2-d shape"});
               s.push_back({{U({2, 37}, dt, g), ops::nn::noncontig(U({2, 37}, dt, g)), std::vector<int64_t>{37},
                             U({37}, dt, g), 1e-5},
                            "long rows, non-contiguous"});
               return s;
             },
         .ref = "lambda g, x, ns, w, eps: (lambda st: torch.ops.aten.native_layer_norm_backward(g, x, ns, st[1], "
                "st[2], w if w is not None else torch.ones(ns, dtype=x.dtype), torch.zeros(ns, dtype=x.dtype), "
                "[True, True, True]))(torch.native_layer_norm(x.detach(), ns, None, None, eps))"});

  r.add({.schema_text = "layer_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, Tensor? bias=None, "
                        "float eps=1e-05) -> Tensor",
         .family = "nn",
         .doc = "(x - mean) / sqrt(var + eps) * weight + bias over the trailing normalized_shape dims",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               return std::vector<Tensor>{
                   ops::nn::nth(ops::call(FOUNDRY_OP("native_layer_norm"), {a[0], a[1], a[2], a[3], a[4]}), 0)};
             },
         .dtypes = kFloatTypes,
         .samples = layer_norm_samples,
         .ref = "torch.nn.functional.layer_norm"});

  r.add({.schema_text = "_rms_norm(Tensor input, int[] normalized_shape, Tensor? weight, float eps) -> (Tensor, Tensor)",
         .family = "nn",
         .doc = "RMS norm returning (output, rstd); rstd = 1 / sqrt(mean(x^2) + eps) per row",
         .saves = {"input", "weight"},
         .saves_outputs = {1},
         .prepare = [](Args& a) { cast_params(a, {2}); },
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               ops::nn::check_floating(x, "rms_norm");
               std::vector<int64_t> ns = a[1].int_list();
               Tensor w = a[2].is_none() ? Tensor() : a.tensor(2);
               int64_t axis = check_norm_shapes("rms_norm", x, ns, w, Tensor());
               return kernels::rms_norm_forward(x, prod(ns), w, a[3].to_double(), stat_shape(x, axis));
             },
         .backward =
             [](BackwardContext& c) {
               const Tensor& x = c.input("input");
               std::vector<int64_t> ns = c.arg("normalized_shape").int_list();
               Tensor w = c.arg("weight").is_none() ? Tensor() : c.input("weight");
               std::vector<Tensor> gr = ops::call(FOUNDRY_OP("_rms_norm_backward"),
                                                  {c.grad(0), x, ns, w.defined() ? Value(w) : Value(), c.arg("eps")});
               std::vector<Tensor> out(2);
               if (c.needs_grad("input")) {
                 out[0] = gr[0];
                 Tensor extra = stat_grads(x, Tensor(), c.output(1), Tensor(), c.grad(1), double(prod(ns)));
                 if (extra.defined()) out[0] = out[0] + extra;
               }
               if (w.defined() && c.needs_grad("weight")) out[1] = gr[1];
               return out;
             },
         .dtypes = kFloatTypes,
         .samples = [](DType dt, Generator& g) { return rms_norm_samples(dt, g, true); },
         .ref = "lambda x, ns, w, eps: (lambda u: (lambda r: ((u * r).to(x.dtype) * w if w is not None else "
                "(u * r).to(x.dtype), r.detach().to(x.dtype)))(torch.rsqrt(u.pow(2).mean(tuple(range(-len(ns), 0)), "
                "keepdim=True) + eps)))(x.double() if x.dtype == torch.float64 else x.float())"});

  r.add({.schema_text = "_rms_norm_backward(Tensor grad_out, Tensor input, int[] normalized_shape, Tensor? weight, "
                        "float eps) -> (Tensor, Tensor)",
         .family = "nn",
         .doc = "fused RMS-norm gradient: (grad_input, grad_weight), rstd recomputed per row",
         .saves = {"grad_out", "input", "weight"},
         .forward =
             [](const Args& a) {
               const Tensor& g = a.tensor(0);
               const Tensor& x = a.tensor(1);
               ops::nn::check_floating(x, "_rms_norm_backward");
               std::vector<int64_t> ns = a[2].int_list();
               Tensor w = a[3].is_none() ? Tensor() : a.tensor(3);
               check_norm_shapes("_rms_norm_backward", x, ns, w, Tensor());
               FOUNDRY_CHECK_AS(ValueError, Shape(g.sizes()) == Shape(x.sizes()),
                                "_rms_norm_backward: grad_out {} must have the input's shape {}", shape_str(g.sizes()),
                                shape_str(x.sizes()));
               std::vector<Tensor> r = kernels::rms_norm_backward(g, x, w, prod(ns), a[4].to_double());
               return std::vector<Tensor>{r[0], r[1].view(ns).to(w.defined() ? w.dtype() : x.dtype())};
             },
         .backward =
             [](BackwardContext& c) {
               // 16-bit types: the formulas run in float (the slots convert the results back).
               const DType ct = c.input_dtype("input") == DType::Float64 ? DType::Float64 : DType::Float32;
               const Tensor g = c.input("grad_out").to(ct);
               const Tensor x = c.input("input").to(ct);
               Tensor w = c.arg("weight").is_none() ? Tensor() : c.input("weight").to(ct);
               std::vector<int64_t> ns = c.arg("normalized_shape").int_list();
               const int64_t k = int64_t(ns.size()), axis = x.dim() - k;
               std::vector<int64_t> rd = trailing_dims(x.dim(), k);
               const double n = double(prod(ns));
               Tensor rs = rsqrt(mean(x * x, rd, true) + S(c.double_arg("eps"), x.dtype()));
               const Tensor ggx = c.grad(0).to(ct), ggw = c.grad(1).to(ct);
               // gx = rs a - rs^3 x mean(a x), a = g w; partials with rs fixed, then the chain through
               // rs = (mean(x^2) + eps)^-1/2 (drs/dx = -rs^3 x / n).
               Tensor a = w.defined() ? g * w : g;
               Tensor s_n = mean(a * x, rd, true);
               Tensor ggx_x = mean(ggx * x, rd, true);
               Tensor r3 = rs * rs * rs;
               Tensor dA = rs * ggx - r3 * x * ggx_x;
               // One slot per tensor parameter: grad_out, input, weight.
               std::vector<Tensor> out(3);
               if (c.needs_grad("grad_out")) out[0] = (w.defined() ? dA * w : dA) + ggw * x * rs;
               if (c.needs_grad("input")) {
                 Tensor d_rs = sum(ggx * (a - rs * rs * x * s_n * W(3.0)), rd, true) + sum(ggw * g * x, rd, true);
                 out[1] = neg(r3 * (ggx * s_n + a * ggx_x)) + rs * ggw * g - d_rs * r3 * x / W(n);
               }
               if (w.defined() && c.needs_grad("weight")) out[2] = sum_rows(dA * g, axis);
               return out;
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               std::vector<Sample> s;
               s.push_back({{U({3, 5}, dt, g), U({3, 5}, dt, g), std::vector<int64_t>{5}, U({5}, dt, g), 1e-6}});
               s.push_back({{U({3, 5}, dt, g), U({3, 5}, dt, g), std::vector<int64_t>{5}, Value(), 1e-6}, "no weight"});
               s.push_back({{U({2, 3, 4}, dt, g), U({2, 3, 4}, dt, g), std::vector<int64_t>{3, 4}, U({3, 4}, dt, g),
                             1e-3},
                            "2-d shape"});
               s.push_back({{U({2, 37}, dt, g), ops::nn::noncontig(U({2, 37}, dt, g)), std::vector<int64_t>{37},
                             U({37}, dt, g), 1e-6},
                            "long rows, non-contiguous"});
               return s;
             },
         .ref = "lambda g, x, ns, w, eps: (lambda d: (lambda r, a: (r * a - r ** 3 * x * (a * x).mean(d, "
                "keepdim=True), (g * x * r).reshape(-1, *ns).sum(0)))(torch.rsqrt((x * x).mean(d, keepdim=True) + eps), "
                "g * w if w is not None else g))(tuple(range(-len(ns), 0)))"});

  r.add({.schema_text = "rms_norm(Tensor input, int[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor",
         .family = "nn",
         .doc = "x / sqrt(mean(x^2) + eps) * weight over the trailing dims; eps defaults to the machine epsilon of "
                "the computation type (PyTorch 2.x)",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               double eps = rms_eps(a[3], x.dtype());
               return std::vector<Tensor>{ops::nn::nth(ops::call(FOUNDRY_OP("_rms_norm"), {x, a[1], a[2], eps}), 0)};
             },
         .dtypes = kFloatTypes,
         .samples = [](DType dt, Generator& g) { return rms_norm_samples(dt, g, false); },
         .ref = "lambda x, ns, w=None, eps=None: (lambda u: (lambda r: (u * r).to(x.dtype) * w if w is not None "
                "else (u * r).to(x.dtype))(torch.rsqrt(u.pow(2).mean(tuple(range(-len(ns), 0)), keepdim=True) + (eps "
                "if eps is not None else torch.finfo(u.dtype).eps))))(x.double() if x.dtype == torch.float64 else "
                "x.float())",
         .notes = "torch 1.13 has no rms_norm: the reference is PyTorch 2.x's formula"});

  r.add({.schema_text = "group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, "
                        "float eps=1e-05) -> Tensor",
         .family = "nn",
         .doc = "normalises [N, C, *] over groups of C / num_groups channels, then a per-channel affine map",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               const int64_t G = a[1].to_int();
               FOUNDRY_CHECK_AS(ValueError, x.dim() >= 2, "group_norm: expected an input of at least 2 dims [N, C, *], got {}",
                                shape_str(x.sizes()));
               const int64_t N = x.size(0), C = x.size(1);
               FOUNDRY_CHECK_AS(ValueError, G > 0 && C % G == 0,
                                "group_norm: expected number of channels in input ({}) to be divisible by num_groups "
                                "({})",
                                C, G);
               Tensor w = a[2].is_none() ? Tensor() : a.tensor(2), b = a[3].is_none() ? Tensor() : a.tensor(3);
               for (auto [t, name] : {std::pair{w, "weight"}, std::pair{b, "bias"}})
                 if (t.defined() && !(t.dim() == 1 && t.size(0) == C))
                   raise<ValueError>("group_norm: expected {} of shape [{}], got {}", name, C, shape_str(t.sizes()));
               int64_t per_group = N * G > 0 ? x.numel() / (N * G) : 0;
               if (x.numel() > 0 && (N * C / G) * (per_group / std::max<int64_t>(C / G, 1)) <= 1)
                 raise<ValueError>("group_norm: expected more than 1 value per channel when training, got input size {}",
                                   shape_str(x.sizes()));
               // 16-bit inputs are normalised and scaled in float, then rounded once (PyTorch's opmath).
               const DType ct = x.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
               Tensor xg = x.to(ct).reshape({N, G, per_group});
               Tensor y = ops::nn::nth(ops::call(FOUNDRY_OP("native_layer_norm"),
                                                 {xg, std::vector<int64_t>{per_group}, Value(), Value(), a[4]}),
                                       0)
                              .reshape(x.sizes());
               if (w.defined()) y = y * per_channel(w.to(ct), x.dim());
               if (b.defined()) y = y + per_channel(b.to(ct), x.dim());
               return std::vector<Tensor>{y.to(x.dtype())};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               std::vector<Sample> s;
               s.push_back({{U({2, 6, 5}, dt, g), int64_t(3), U({6}, dt, g), U({6}, dt, g), 1e-5}});
               s.push_back({{U({2, 4, 2, 3}, dt, g), int64_t(2), U({4}, dt, g), U({4}, dt, g), 1e-5}, "4-d"});
               s.push_back({{U({3, 6}, dt, g), int64_t(2), Value(), Value(), 1e-5}, "2-d"});
               s.push_back({{U({2, 4, 3}, dt, g), int64_t(1), U({4}, dt, g), Value(), 1e-3}, "one group"});
               s.push_back({{ops::nn::noncontig(U({2, 6, 4}, dt, g)), int64_t(2), U({6}, dt, g), U({6}, dt, g), 1e-5},
                            "non-contiguous"});
               return s;
             },
         .ref = "torch.nn.functional.group_norm"});

  r.add({.schema_text = "native_batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, "
                        "Tensor? running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)",
         .family = "nn",
         .doc = "batch norm over [N, C, *] returning (output, save_mean, save_invstd); in training mode updates the "
                "running statistics in place (unbiased variance), in eval mode normalises with them",
         .saves = {"input", "weight", "running_mean", "running_var"},
         .saves_outputs = {1, 2},
         .nondiff_params = {"running_mean", "running_var"},
         .prepare = [](Args& a) { cast_params(a, {1, 2}); },
         .forward = native_batch_norm_forward,
         .backward = native_batch_norm_backward,
         .dtypes = kFloatTypes,
         .samples = [](DType dt, Generator& g) { return batch_norm_samples(dt, g, true); },
         .ref = "torch.native_batch_norm"});

  r.add({.schema_text = "batch_norm(Tensor input, Tensor? running_mean, Tensor? running_var, Tensor? weight=None, "
                        "Tensor? bias=None, bool training=False, float momentum=0.1, float eps=1e-05) -> Tensor",
         .family = "nn",
         .doc = "batch norm (torch.nn.functional.batch_norm): training mode uses batch statistics and updates the "
                "running ones in place",
         .kind = OpDef::Kind::Composite,
         .nondiff_params = {"running_mean", "running_var"},
         .forward =
             [](const Args& a) {
               return std::vector<Tensor>{ops::nn::nth(
                   ops::call(FOUNDRY_OP("native_batch_norm"), {a[0], a[3], a[4], a[1], a[2], a[5], a[6], a[7]}), 0)};
             },
         .dtypes = kFloatTypes,
         .samples = [](DType dt, Generator& g) { return batch_norm_samples(dt, g, false); },
         .ref = "torch.nn.functional.batch_norm"});
}

}  // namespace ops
}  // namespace foundry
