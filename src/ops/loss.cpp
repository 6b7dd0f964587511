// Losses and distances, as composites of registry ops (so every gradient, including second
// order, comes from the ops they are made of). Formulas follow PyTorch 1.13's ATen code.
#include <cmath>

#include "ops/common.h"

namespace foundry {

using ops::Args;
using ops::OpDef;
using ops::Sample;
using ops::Value;

namespace {

Tensor W(double v) { return wrap_scalar(v); }

Tensor reduce(const Tensor& loss, const std::string& reduction, const char* op) {
  if (reduction == "none") return loss;
  if (reduction == "sum") return sum(loss);
  if (reduction == "mean") return mean(loss);
  raise<ValueError>("{}: {} is not a valid value for reduction (use 'none', 'mean' or 'sum')", op, reduction);
}

void check_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  FOUNDRY_CHECK_AS(ValueError, Shape(a.sizes()) == Shape(b.sizes()),
                   "{}: target size {} must be the same as input size {}", op, shape_str(b.sizes()), shape_str(a.sizes()));
}

// nll_loss over class dim 1 (input [N, C, ...] or [C]).
Tensor nll(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index,
           const std::string& reduction) {
  FOUNDRY_CHECK_AS(ValueError, input.dim() >= 1, "nll_loss: input must have at least 1 dim");
  FOUNDRY_CHECK_AS(TypeError, target.dtype() == DType::Int64 || target.dtype() == DType::Int32 || target.dtype() == DType::UInt8,
                   "nll_loss: expected target of an integer dtype (class indices), got {}", dtype_name(target.dtype()));
  Tensor x = input.dim() == 1 ? input.unsqueeze(0) : input;
  Tensor t = (input.dim() == 1 ? target.reshape({1}) : target).to(DType::Int64);
  int64_t C = x.size(1);
  Shape expected(x.sizes());
  expected.erase(1);
  FOUNDRY_CHECK_AS(ValueError, Shape(t.sizes()) == expected,
                   "nll_loss: expected target of shape {} for input of shape {}, got {}", shape_str(expected),
                   shape_str(input.sizes()), shape_str(target.sizes()));
  if (weight.defined())
    FOUNDRY_CHECK_AS(ValueError, weight.dim() == 1 && weight.size(0) == C,
                     "nll_loss: weight tensor should be defined either for all {} classes or no classes but got weight "
                     "tensor of shape {}",
                     C, shape_str(weight.sizes()));
  Tensor valid = t != Scalar(ignore_index);
  Tensor safe = where(valid, t, zeros({}, DType::Int64));
  if (t.numel() > 0) {
    int64_t lo = amin(where(valid, t, zeros({}, DType::Int64))).item<int64_t>();
    int64_t hi = amax(safe).item<int64_t>();
    FOUNDRY_CHECK_AS(IndexError, lo >= 0 && hi < C, "nll_loss: target {} is out of bounds for {} classes",
                     lo < 0 ? lo : hi, C);
  }
  Tensor picked = gather(x, 1, safe.unsqueeze(1)).squeeze(1);
  Tensor w = valid.to(x.dtype());
  if (weight.defined()) w = w * index_select(weight.to(x.dtype()), 0, safe.reshape({-1})).reshape(safe.sizes());
  Tensor loss = neg(picked) * w;
  if (input.dim() == 1) loss = loss.reshape({});
  if (reduction == "mean") return sum(loss) / sum(w);
  return reduce(loss, reduction, "nll_loss");
}

std::vector<Sample> regression_samples(DType dt, Generator& g) {
  std::vector<Sample> s;
  for (const char* red : {"mean", "sum", "none"})
    s.push_back({{ops::sample_uniform({3, 4}, dt, g), ops::sample_uniform({3, 4}, dt, g), red}});
  return s;
}

}  // namespace

Tensor cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                     const std::string& reduction, double label_smoothing) {
  return ops::call1(FOUNDRY_OP("cross_entropy"), {input, target, weight, ignore_index, reduction, label_smoothing});
}
Tensor nll_loss(const Tensor& input, const Tensor& target, const Tensor& weight, int64_t ignore_index,
                const std::string& reduction) {
  return ops::call1(FOUNDRY_OP("nll_loss"), {input, target, weight, ignore_index, reduction});
}
Tensor mse_loss(const Tensor& a, const Tensor& b, const std::string& r) { return ops::call1(FOUNDRY_OP("mse_loss"), {a, b, r}); }
Tensor l1_loss(const Tensor& a, const Tensor& b, const std::string& r) { return ops::call1(FOUNDRY_OP("l1_loss"), {a, b, r}); }
Tensor smooth_l1_loss(const Tensor& a, const Tensor& b, const std::string& r, double beta) {
  return ops::call1(FOUNDRY_OP("smooth_l1_loss"), {a, b, r, beta});
}
Tensor huber_loss(const Tensor& a, const Tensor& b, const std::string& r, double delta) {
  return ops::call1(FOUNDRY_OP("huber_loss"), {a, b, r, delta});
}
Tensor binary_cross_entropy(const Tensor& a, const Tensor& b, const Tensor& w, const std::string& r) {
  return ops::call1(FOUNDRY_OP("binary_cross_entropy"), {a, b, w.defined() ? Value(w) : Value(), r});
}
Tensor binary_cross_entropy_with_logits(const Tensor& a, const Tensor& b, const Tensor& w, const std::string& r,
                                        const Tensor& pos_weight) {
  return ops::call1(FOUNDRY_OP("binary_cross_entropy_with_logits"),
                    {a, b, w.defined() ? Value(w) : Value(), r, pos_weight.defined() ? Value(pos_weight) : Value()});
}
Tensor kl_div(const Tensor& a, const Tensor& b, const std::string& r, bool log_target) {
  return ops::call1(FOUNDRY_OP("kl_div"), {a, b, r, log_target});
}
Tensor cosine_similarity(const Tensor& a, const Tensor& b, int64_t dim, double eps) {
  return ops::call1(FOUNDRY_OP("cosine_similarity"), {a, b, dim, eps});
}
Tensor pairwise_distance(const Tensor& a, const Tensor& b, double p, double eps, bool keepdim) {
  return ops::call1(FOUNDRY_OP("pairwise_distance"), {a, b, p, eps, keepdim});
}

namespace ops {

void register_loss_ops(Registry& r) {
  auto composite = [](OpDef d) {
    d.family = "loss";
    d.kind = OpDef::Kind::Composite;
    d.dtypes = kFloatTypes;
    return d;
  };

  r.add(composite(
      {.schema_text = "cross_entropy(Tensor input, Tensor target, Tensor? weight=None, int ignore_index=-100, str reduction='mean', float label_smoothing=0.0) -> Tensor",
       .doc = "log_softmax over dim 1 + nll_loss; target: class indices or class probabilities; label smoothing as PyTorch.",
       .forward =
           [](const Args& a) {
             const Tensor& input = a.tensor(0);
             const Tensor& target = a.tensor(1);
             const Tensor& weight = a[2].is_none() ? Tensor() : a.tensor(2);
             int64_t ignore = a[3].to_int();
             std::string red = a[4].str();
             double eps = a[5].to_double();
             FOUNDRY_CHECK_AS(ValueError, eps >= 0 && eps <= 1, "cross_entropy: label_smoothing must be between 0.0 and 1.0. Got: {}", eps);
             int64_t class_dim = input.dim() == 1 ? 0 : 1;
             Tensor logp = log_softmax(input, class_dim);
             int64_t C = input.size(class_dim);
             if (is_floating(target.dtype())) {
               // Class probabilities.
               check_same_shape(input, target, "cross_entropy");
               Tensor t = eps > 0 ? target * W(1 - eps) + W(eps / double(C)) : target;
               Tensor prod = logp * t;
               if (weight.defined()) {
                 Shape ws(size_t(input.dim()), 1);
                 ws[size_t(class_dim)] = C;
                 prod = prod * weight.reshape(ws);
               }
               Tensor loss = neg(sum(prod, {class_dim}));
               if (red == "mean") {
                 int64_t n = input.dim() == 1 ? 1 : input.numel() / C;
                 return std::vector<Tensor>{sum(loss) / W(double(n))};
               }
               return std::vector<Tensor>{reduce(loss, red, "cross_entropy")};
             }
             Tensor nl = nll(logp, target, weight, ignore, red);
             if (eps == 0) return std::vector<Tensor>{nl};
             Tensor ignore_mask = target == Scalar(ignore);
             Tensor smooth;
             if (weight.defined()) {
               Shape ws(size_t(input.dim()), 1);
               ws[size_t(class_dim)] = C;
               smooth = neg(sum(logp * weight.reshape(ws), {class_dim}));
             } else {
               smooth = neg(sum(logp, {class_dim}));
             }
             smooth = where(ignore_mask, W(0.0), smooth);
             Tensor ret;
             if (red == "mean") {
               if (weight.defined()) {
                 Tensor tw = index_select(weight, 0, where(ignore_mask, zeros({}, DType::Int64), target.to(DType::Int64)).reshape({-1}));
                 tw = tw * logical_not(ignore_mask).reshape({-1}).to(tw.dtype());
                 ret = sum(smooth) / sum(tw);
               } else {
                 ret = sum(smooth) / sum(logical_not(ignore_mask).to(smooth.dtype()));
               }
             } else {
               ret = reduce(smooth, red, "cross_entropy");
             }
             return std::vector<Tensor>{nl * W(1 - eps) + ret * W(eps / double(C))};
           },
       .samples = [](DType dt, Generator& g) {
         Tensor x = sample_uniform({4, 5}, dt, g, -3, 3);
         Tensor t = sample_index({4}, 5, g);
         Tensor t_ign = tensor<int64_t>({1, -100, 4, 0}, {4});
         Tensor w = sample_uniform({5}, dt, g, 0.5, 2.0);
         Tensor probs = softmax(sample_uniform({4, 5}, dt, g), 1);
         Tensor x3 = sample_uniform({2, 5, 3}, dt, g, -3, 3);
         return std::vector<Sample>{
             {{x, t, Value(), int64_t(-100), "mean", 0.0}},
             {{x, t_ign, w, int64_t(-100), "mean", 0.0}, "weights + ignore"},
             {{x, t, Value(), int64_t(-100), "sum", 0.1}, "label smoothing"},
             {{x, t_ign, w, int64_t(-100), "mean", 0.2}, "smoothing + weights + ignore"},
             {{x, t, Value(), int64_t(-100), "none", 0.0}},
             {{x, probs, Value(), int64_t(-100), "mean", 0.0}, "probabilities"},
             {{x, probs, w, int64_t(-100), "mean", 0.1}, "probabilities + weights + smoothing"},
             {{x3, sample_index({2, 3}, 5, g), Value(), int64_t(-100), "mean", 0.0}, "spatial"},
             {{sample_uniform({5}, dt, g), scalar_tensor(int64_t(2)), Value(), int64_t(-100), "mean", 0.0}, "unbatched"},
         };
       },
       .ref = "torch.nn.functional.cross_entropy"}));

  r.add(composite(
      {.schema_text = "nll_loss(Tensor input, Tensor target, Tensor? weight=None, int ignore_index=-100, str reduction='mean') -> Tensor",
       .doc = "Negative log-likelihood of log-probabilities input[n, target[n]] (weighted mean over non-ignored).",
       .forward =
           [](const Args& a) {
             return std::vector<Tensor>{nll(a.tensor(0), a.tensor(1), a[2].is_none() ? Tensor() : a.tensor(2),
                                            a[3].to_int(), a[4].str())};
           },
       .samples = [](DType dt, Generator& g) {
         Tensor x = sample_uniform({4, 5}, dt, g, -3, 0);
         return std::vector<Sample>{{{x, sample_index({4}, 5, g), Value(), int64_t(-100), "mean"}},
                                    {{x, tensor<int64_t>({1, 3, -1, 0}, {4}), sample_uniform({5}, dt, g, 0.5, 2), int64_t(-1), "mean"}},
                                    {{x, sample_index({4}, 5, g), Value(), int64_t(-100), "none"}},
                                    {{x, sample_index({4}, 5, g), Value(), int64_t(-100), "sum"}}};
       },
       .ref = "torch.nn.functional.nll_loss"}));

  r.add(composite({.schema_text = "mse_loss(Tensor input, Tensor target, str reduction='mean') -> Tensor",
                   .doc = "(input - target)^2",
                   .forward =
                       [](const Args& a) {
                         Tensor d = a.tensor(0) - a.tensor(1);
                         return std::vector<Tensor>{reduce(d * d, a[2].str(), "mse_loss")};
                       },
                   .samples = regression_samples,
                   .ref = "torch.nn.functional.mse_loss"}));
  r.add(composite({.schema_text = "l1_loss(Tensor input, Tensor target, str reduction='mean') -> Tensor",
                   .doc = "|input - target|",
                   .forward =
                       [](const Args& a) {
                         return std::vector<Tensor>{reduce(abs(a.tensor(0) - a.tensor(1)), a[2].str(), "l1_loss")};
                       },
                   .samples = regression_samples,
                   .ref = "torch.nn.functional.l1_loss"}));
  r.add(composite({.schema_text = "smooth_l1_loss(Tensor input, Tensor target, str reduction='mean', float beta=1.0) -> Tensor",
                   .doc = "0.5 d^2 / beta if |d| < beta else |d| - 0.5 beta",
                   .forward =
                       [](const Args& a) {
                         double beta = a[3].to_double();
                         FOUNDRY_CHECK_AS(ValueError, beta >= 0, "smooth_l1_loss does not support negative values for beta");
                         Tensor d = abs(a.tensor(0) - a.tensor(1));
                         Tensor l = beta == 0 ? d : where(d < Scalar(beta), d * d * W(0.5 / beta), d - W(0.5 * beta));
                         return std::vector<Tensor>{reduce(l, a[2].str(), "smooth_l1_loss")};
                       },
                   .samples = [](DType dt, Generator& g) {
                     auto s = regression_samples(dt, g);
                     for (auto& x : s) x.args.push_back(0.5);
                     return s;
                   },
                   .ref = "torch.nn.functional.smooth_l1_loss"}));
  r.add(composite({.schema_text = "huber_loss(Tensor input, Tensor target, str reduction='mean', float delta=1.0) -> Tensor",
                   .doc = "0.5 d^2 if |d| < delta else delta (|d| - 0.5 delta)",
                   .forward =
                       [](const Args& a) {
                         double delta = a[3].to_double();
                         FOUNDRY_CHECK_AS(ValueError, delta > 0, "huber_loss does not support non-positive values for delta");
                         Tensor d = abs(a.tensor(0) - a.tensor(1));
                         Tensor l = where(d < Scalar(delta), d * d * W(0.5), (d - W(0.5 * delta)) * W(delta));
                         return std::vector<Tensor>{reduce(l, a[2].str(), "huber_loss")};
                       },
                   .samples = [](DType dt, Generator& g) {
                     auto s = regression_samples(dt, g);
                     for (auto& x : s) x.args.push_back(0.7);
                     return s;
                   },
                   .ref = "torch.nn.functional.huber_loss"}));
  r.add(composite(
      {.schema_text = "binary_cross_entropy(Tensor input, Tensor target, Tensor? weight=None, str reduction='mean') -> Tensor",
       .doc = "-(t log p + (1 - t) log(1 - p)), logs clamped at -100 as PyTorch",
       .forward =
           [](const Args& a) {
             const Tensor& p = a.tensor(0);
             const Tensor& t = a.tensor(1);
             check_same_shape(p, t, "binary_cross_entropy");
             {
               autograd::NoGradGuard ng;
               if (p.numel())
                 FOUNDRY_CHECK_AS(ValueError, amin(p.detach()).item<double>() >= 0 && amax(p.detach()).item<double>() <= 1,
                                  "binary_cross_entropy: all elements of input should be between 0 and 1");
             }
             Tensor lp = clamp(log(p), Scalar(-100.0)), l1p = clamp(log(W(1.0) - p), Scalar(-100.0));
             Tensor l = neg(t * lp + (W(1.0) - t) * l1p);
             if (!a[2].is_none()) l = l * a.tensor(2);
             return std::vector<Tensor>{reduce(l, a[3].str(), "binary_cross_entropy")};
           },
       .samples = [](DType dt, Generator& g) {
         Tensor p = sample_uniform({3, 4}, dt, g, 0.05, 0.95), t = sample_uniform({3, 4}, dt, g, 0, 1);
         return std::vector<Sample>{{{p, t, Value(), "mean"}}, {{p, t, sample_uniform({4}, dt, g, 0.5, 2), "sum"}},
                                    {{p, t, Value(), "none"}}};
       },
       .ref = "torch.nn.functional.binary_cross_entropy"}));
  r.add(composite(
      {.schema_text = "binary_cross_entropy_with_logits(Tensor input, Tensor target, Tensor? weight=None, str reduction='mean', Tensor? pos_weight=None) -> Tensor",
       .doc = "sigmoid + binary cross-entropy, computed stably; pos_weight scales positive targets",
       .forward =
           [](const Args& a) {
             const Tensor& x = a.tensor(0);
             const Tensor& t = a.tensor(1);
             check_same_shape(x, t, "binary_cross_entropy_with_logits");
             // (1 - t) x + (1 + (pw - 1) t) * (log(1 + exp(-|x|)) + max(-x, 0))
             Tensor soft = log1p(exp(neg(abs(x)))) + clamp(neg(x), Scalar(0.0));
             Tensor l;
             if (!a[4].is_none()) {
               Tensor lw = W(1.0) + (a.tensor(4) - W(1.0)) * t;
               l = (W(1.0) - t) * x + lw * soft;
             } else {
               l = (W(1.0) - t) * x + soft;
             }
             if (!a[2].is_none()) l = l * a.tensor(2);
             return std::vector<Tensor>{reduce(l, a[3].str(), "binary_cross_entropy_with_logits")};
           },
       .samples = [](DType dt, Generator& g) {
         Tensor x = sample_uniform({3, 4}, dt, g, -4, 4), t = sample_uniform({3, 4}, dt, g, 0, 1);
         return std::vector<Sample>{{{x, t, Value(), "mean", Value()}},
                                    {{x, t, sample_uniform({4}, dt, g, 0.5, 2), "sum", sample_uniform({4}, dt, g, 0.5, 3)}},
                                    {{x, t, Value(), "none", sample_uniform({4}, dt, g, 0.5, 3)}}};
       },
       .ref = "torch.nn.functional.binary_cross_entropy_with_logits"}));
  r.add(composite(
      {.schema_text = "kl_div(Tensor input, Tensor target, str reduction='mean', bool log_target=False) -> Tensor",
       .doc = "target * (log target - input) (input holds log-probabilities); 'mean' averages over all elements",
       .forward =
           [](const Args& a) {
             const Tensor& x = a.tensor(0);
             const Tensor& t = a.tensor(1);
             Tensor l = a[3].to_bool() ? exp(t) * (t - x) : xlogy(t, t) - t * x;
             std::string red = a[2].str();
             if (red == "batchmean") return std::vector<Tensor>{sum(l) / W(double(x.dim() ? x.size(0) : 1))};
             return std::vector<Tensor>{reduce(l, red, "kl_div")};
           },
       .samples = [](DType dt, Generator& g) {
         Tensor x = log_softmax(sample_uniform({3, 4}, dt, g), 1), t = softmax(sample_uniform({3, 4}, dt, g), 1);
         return std::vector<Sample>{{{x, t, "mean", false}}, {{x, t, "sum", false}}, {{x, log(t), "none", true}},
                                    {{x, t, "batchmean", false}}};
       },
       .ref = "torch.nn.functional.kl_div"}));
  r.add(composite(
      {.schema_text = "cosine_similarity(Tensor x1, Tensor x2, int dim=1, float eps=1e-08) -> Tensor",
       .doc = "sum((x1 / max(|x1|, eps)) * (x2 / max(|x2|, eps))) along dim (PyTorch 1.13's normalise-first form)",
       .forward =
           [](const Args& a) {
             Shape s = broadcast_shapes(a.tensor(0).sizes(), a.tensor(1).sizes(), "cosine_similarity");
             Tensor x1 = a.tensor(0).expand(s), x2 = a.tensor(1).expand(s);
             int64_t dim = a[2].to_int();
             double eps = a[3].to_double();
             // The clamp changes the value only: its gradient is the unclamped norm's (as PyTorch's
             // in-place clamp under no_grad).
             auto clamped = [eps, dim](const Tensor& x) {
               Tensor n = norm(x, 2.0, {dim}, true);
               return n + (clamp(n.detach(), Scalar(eps)) - n.detach());
             };
             return std::vector<Tensor>{sum((x1 / clamped(x1)) * (x2 / clamped(x2)), {dim})};
           },
       .samples = [](DType dt, Generator& g) {
         return std::vector<Sample>{{{sample_uniform({3, 4}, dt, g), sample_uniform({3, 4}, dt, g), int64_t(1), 1e-8}},
                                    {{sample_uniform({3, 4}, dt, g), sample_uniform({4}, dt, g), int64_t(-1), 1e-8}, "broadcast"},
                                    {{sample_uniform({2, 3, 4}, dt, g), sample_uniform({2, 3, 4}, dt, g), int64_t(0), 1e-6}}};
       },
       .ref = "torch.nn.functional.cosine_similarity"}));
  r.add(composite(
      {.schema_text = "pairwise_distance(Tensor x1, Tensor x2, float p=2.0, float eps=1e-06, bool keepdim=False) -> Tensor",
       .doc = "p-norm of (x1 - x2 + eps) over the last dim",
       .forward =
           [](const Args& a) {
             Tensor d = a.tensor(0) - a.tensor(1) + W(a[3].to_double());
             int64_t last = d.dim() == 0 ? 0 : -1;
             return std::vector<Tensor>{norm(d, a[2].to_double(), {last}, a[4].to_bool())};
           },
       .samples = [](DType dt, Generator& g) {
         return std::vector<Sample>{{{sample_uniform({3, 4}, dt, g), sample_uniform({3, 4}, dt, g), 2.0, 1e-6, false}},
                                    {{sample_uniform({3, 4}, dt, g), sample_uniform({4}, dt, g), 1.0, 1e-6, true}},
                                    {{sample_uniform({3, 4}, dt, g), sample_uniform({3, 4}, dt, g), 3.0, 1e-6, false}}};
       },
       .ref = "torch.nn.functional.pairwise_distance"}));
}

}  // namespace ops
}  // namespace foundry
