// Scaled dot-product attention. The primitive _scaled_dot_product_attention_flash runs the tiled
// memory-efficient kernel (kernels/cpu/attention.h) and returns (output, logsumexp). Its gradient:
// without grad mode (an ordinary backward) the fused flash backward op; with grad mode on
// (create_graph) or when a float mask needs a gradient, the formula in ops - recompute
// P = softmax(q k^T * scale + mask), dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dP P)),
// dQ = dS K scale, dK = dS^T Q scale - so gradients of any order work. A gradient of the logsumexp
// output adds P * dlse to dS. scaled_dot_product_attention is the composite users call: dropout_p > 0 takes
// the math formula (softmax, dropout, matmuls) instead of the flash kernel.
//
// torch 1.13 has no scaled_dot_product_attention: the references are Python lambdas with the
// math formula of PyTorch 2.x (boolean masks keep True; is_causal keeps keys j <= i, top-left).
#include <cmath>
#include <limits>

#include "kernels/cpu/attention.h"
#include "ops/nn_common.h"

namespace foundry {

using ops::Args;
using ops::BackwardContext;
using ops::Sample;
using ops::Value;
using ops::nn::S;
using ops::nn::U;

namespace {

// The math formula in Python (q, k, v, m, c, scale in scope): the scaled, masked scores.
const char* kPyScores =
    "(q @ k.transpose(-2, -1) * (scale if scale is not None else 1 / q.size(-1) ** 0.5) + (0 if m is None else "
    "(torch.zeros(m.shape, dtype=q.dtype).masked_fill(~m, float('-inf')) if m.dtype == torch.bool else m)) + "
    "(torch.zeros(q.size(-2), k.size(-2), dtype=q.dtype).masked_fill(~torch.ones(q.size(-2), k.size(-2), "
    "dtype=torch.bool).tril(), float('-inf')) if c else 0))";

double resolve_scale(const Value& scale, int64_t E) {
  return scale.is_none() ? 1.0 / std::sqrt(double(E)) : scale.to_double();
}

Shape batch_of(const Tensor& t) {
  Shape b;
  for (int64_t d = 0; d + 2 < t.dim(); ++d) b.push_back(t.size(d));
  return b;
}

void check_qkv(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal) {
  ops::nn::check_floating(q, op, "query");
  FOUNDRY_CHECK_AS(ValueError, q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2,
                   "{}: query, key and value must have at least 2 dims [..., L, E], got {}, {}, {}", op,
                   shape_str(q.sizes()), shape_str(k.sizes()), shape_str(v.sizes()));
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype())
    raise<TypeError>("{}: expected query, key and value to have the same dtype, got {}, {} and {}", op,
                     dtype_name(q.dtype()), dtype_name(k.dtype()), dtype_name(v.dtype()));
  FOUNDRY_CHECK_AS(ValueError, k.size(-1) == q.size(-1),
                   "{}: query {} and key {} must have the same embedding size (last dim)", op, shape_str(q.sizes()),
                   shape_str(k.sizes()));
  FOUNDRY_CHECK_AS(ValueError, v.size(-2) == k.size(-2),
                   "{}: key {} and value {} must have the same sequence length (dim -2)", op, shape_str(k.sizes()),
                   shape_str(v.sizes()));
  if (mask.defined()) {
    FOUNDRY_CHECK_AS(TypeError, mask.dtype() == DType::Bool || is_floating(mask.dtype()),
                     "{}: attn_mask must be bool or floating, got {}", op, dtype_name(mask.dtype()));
    FOUNDRY_CHECK_AS(ValueError, !causal,
                     "{}: explicit attn_mask should not be set when is_causal=True", op);
    Shape full = broadcast_shapes(batch_of(q), batch_of(k), op);
    full.push_back(q.size(-2));
    full.push_back(k.size(-2));
    bool ok = mask.dim() <= int64_t(full.size());
    for (int64_t d = 1; ok && d <= mask.dim(); ++d) {
      int64_t ms = mask.size(-d), fs = full[full.size() - size_t(d)];
      ok = ms == fs || ms == 1;
    }
    if (!ok)
      raise<ValueError>("{}: attn_mask of shape {} cannot be broadcast to the attention shape {}", op,
                        shape_str(mask.sizes()), shape_str(full));
  }
}

Tensor opt_tensor(const Value& v) { return v.is_none() ? Tensor() : v.tensor(); }

// softmax(q k^T scale + mask) in ops (differentiable), for the dropout path and higher-order
// gradients.
Tensor attention_probs(const Tensor& q, const Tensor& k, const Tensor& mask, bool causal, double scale) {
  Tensor s = matmul(q, k.transpose(-2, -1)) * S(scale, q.dtype());
  if (mask.defined()) {
    if (mask.dtype() == DType::Bool) s = where(mask, s, S(-std::numeric_limits<double>::infinity(), q.dtype()));
    else s = s + mask.to(q.dtype());
  }
  if (causal) {
    Tensor keep = tril(ones({q.size(-2), k.size(-2)}, DType::Bool));
    s = where(keep, s, S(-std::numeric_limits<double>::infinity(), q.dtype()));
  }
  return softmax(s, -1);
}

std::vector<Sample> sdpa_samples(DType dt, Generator& g, bool composite) {
  std::vector<Sample> s;
  auto add = [&](Shape q, Shape k, Shape v, Value mask, bool causal, Value scale, const char* note) {
    // Samples spanning several 64 x 64 tiles are too large for finite differences; the unit tests
    // check their gradients against the reference loops instead.
    const bool small = numel_of(q) + numel_of(k) + numel_of(v) < 400;
    if (composite) s.push_back({{U(q, dt, g), U(k, dt, g), U(v, dt, g), mask, 0.0, causal, scale}, note, small});
    else s.push_back({{U(q, dt, g), U(k, dt, g), U(v, dt, g), mask, causal, scale}, note, small});
  };
  add({2, 3, 4}, {2, 5, 4}, {2, 5, 3}, Value(), false, Value(), "3-d");
  add({1, 2, 5, 4}, {1, 2, 5, 4}, {1, 2, 5, 6}, Value(), true, Value(), "4-d causal");
  add({2, 4, 3}, {2, 6, 3}, {2, 6, 2}, Value(), true, Value(), "causal, L < S");
  add({2, 3, 4}, {2, 5, 4}, {2, 5, 3}, Value(), false, 0.3, "scale");
  Tensor bm = tensor<int64_t>({1, 1, 0, 1, 0, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1}, {3, 5}).to(DType::Bool);
  add({2, 3, 4}, {2, 5, 4}, {2, 5, 3}, bm, false, Value(), "bool mask");
  add({2, 3, 4}, {2, 5, 4}, {2, 5, 3}, U({2, 3, 5}, dt, g), false, Value(), "float mask");
  add({2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 5, 3}, U({2, 1, 1, 5}, dt, g), false, Value(), "broadcast float mask");
  add({2, 3, 4}, {1, 5, 4}, {1, 5, 3}, Value(), false, Value(), "broadcast batch");
  add({1, 70, 8}, {1, 70, 8}, {1, 70, 5}, Value(), true, Value(), "multiple tiles, causal");
  add({1, 67, 5}, {1, 130, 5}, {1, 130, 7}, U({67, 130}, dt, g), false, Value(), "multiple tiles, mask");
  add({3, 4}, {6, 4}, {6, 2}, Value(), false, Value(), "2-d");
  return s;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask,
                                    double dropout_p, bool is_causal, std::optional<double> scale) {
  return ops::call1(FOUNDRY_OP("scaled_dot_product_attention"),
                    {q, k, v, attn_mask.defined() ? Value(attn_mask) : Value(), dropout_p, is_causal, Value(scale)});
}

namespace ops {

void register_nn_attention_ops(Registry& r) {
  r.add({.schema_text = "_scaled_dot_product_attention_flash(Tensor query, Tensor key, Tensor value, "
                        "Tensor? attn_mask, bool is_causal, float? scale) -> (Tensor, Tensor)",
         .family = "nn",
         .doc = "tiled memory-efficient attention returning (output, logsumexp of the scaled masked scores)",
         .saves = {"query", "key", "value", "attn_mask"},
         .saves_outputs = {0, 1},
         .prepare =
             [](Args& a) {
               // Broadcast the batch dims of query, key and value (recorded: gradients sum back).
               Tensor& q = a[0].tensor();
               Tensor& k = a[1].tensor();
               Tensor& v = a[2].tensor();
               if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2) return;  // the forward reports it
               Shape b = broadcast_shapes(broadcast_shapes(batch_of(q), batch_of(k), "scaled_dot_product_attention"),
                                          batch_of(v), "scaled_dot_product_attention");
               auto fit = [&](Tensor& t) {
                 Shape full = b;
                 full.push_back(t.size(-2));
                 full.push_back(t.size(-1));
                 if (!(Shape(t.sizes()) == full)) t = t.expand(full);
               };
               fit(q), fit(k), fit(v);
             },
         .forward =
             [](const Args& a) {
               const Tensor& q = a.tensor(0);
               const Tensor& k = a.tensor(1);
               const Tensor& v = a.tensor(2);
               Tensor mask = opt_tensor(a[3]);
               check_qkv("scaled_dot_product_attention", q, k, v, mask, a[4].to_bool());
               return kernels::attention_forward(q, k, v, mask, a[4].to_bool(), resolve_scale(a[5], q.size(-1)));
             },
         .backward =
             [](BackwardContext& c) {
               const Tensor& q = c.input("query");
               const Tensor& k = c.input("key");
               const Tensor& v = c.input("value");
               Tensor mask = c.arg("attn_mask").is_none() ? Tensor() : c.input("attn_mask");
               const bool causal = c.bool_arg("is_causal");
               const double scale = resolve_scale(c.arg("scale"), q.size(-1));
               const Tensor& g = c.grad(0);
               // The gradient of logsumexp (zeros unless that output was used).
               Tensor glse = ops::nn::any_nonzero(c.grad(1)) ? c.grad(1) : Tensor();
               const bool mask_grad = mask.defined() && is_floating(mask.dtype()) && c.needs_grad("attn_mask");
               if (!autograd::is_grad_enabled() && !mask_grad) {
                 std::vector<Tensor> r = ops::call(FOUNDRY_OP("_scaled_dot_product_attention_flash_backward"),
                                                   {g, q, k, v, c.output(0), c.output(1), c.arg("attn_mask"),
                                                    causal, c.arg("scale"), glse.defined() ? Value(glse) : Value()});
                 return std::vector<Tensor>{r[0], r[1], r[2], Tensor()};
               }
               // The formula in ops (recomputing the probabilities), differentiable again.
               Tensor P = attention_probs(q, k, mask, causal, scale);
               Tensor dS = ops::call1(FOUNDRY_OP("_softmax_backward_data"),
                                      {matmul(g, v.transpose(-2, -1)), P, int64_t(-1), P.dtype()});
               if (glse.defined()) dS = dS + P * glse.to(P.dtype()).unsqueeze(-1);
               std::vector<Tensor> out(4);
               if (c.needs_grad("query")) out[0] = matmul(dS, k) * S(scale, q.dtype());
               if (c.needs_grad("key")) out[1] = matmul(dS.transpose(-2, -1), q) * S(scale, q.dtype());
               if (c.needs_grad("value")) out[2] = matmul(P.transpose(-2, -1), g);
               if (mask_grad) out[3] = sum_to(dS, c.input_sizes("attn_mask"));
               return out;
             },
         .dtypes = kFloatTypes,
         .samples = [](DType dt, Generator& g) { return sdpa_samples(dt, g, false); },
         // logsumexp is float32 for 16-bit inputs (as PyTorch 2.x's fused kernels): the reference computes it
         // from the inputs converted to float.
         .ref = std::string("lambda q, k, v, m, c, scale: (lambda S, f: (torch.softmax(S(q, k, m), -1) @ v, "
                            "torch.logsumexp(S(f(q), f(k), m if m is None or m.dtype == torch.bool else f(m)), "
                            "-1).detach()))(lambda q, k, m: ") +
                kPyScores + ", lambda t: t.double() if t.dtype == torch.float64 else t.float())"});

  r.add({.schema_text = "_scaled_dot_product_attention_flash_backward(Tensor grad_out, Tensor query, Tensor key, "
                        "Tensor value, Tensor out, Tensor logsumexp, Tensor? attn_mask, bool is_causal, float? scale, "
                        "Tensor? grad_logsumexp=None) -> (Tensor, Tensor, Tensor)",
         .family = "nn",
         .doc = "fused attention gradient (dq, dk, dv) from the saved output and logsumexp, tile by tile; used by "
                "backward passes that do not build a graph",
         .differentiable = false,
         .forward =
             [](const Args& a) {
               const Tensor& g = a.tensor(0);
               const Tensor& q = a.tensor(1);
               const Tensor& k = a.tensor(2);
               const Tensor& v = a.tensor(3);
               Tensor mask = opt_tensor(a[6]);
               const bool causal = a[7].to_bool();
               check_qkv("_scaled_dot_product_attention_flash_backward", q, k, v, mask, causal);
               FOUNDRY_CHECK_AS(ValueError,
                                Shape(batch_of(q)) == Shape(batch_of(k)) && Shape(batch_of(q)) == Shape(batch_of(v)),
                                "_scaled_dot_product_attention_flash_backward: query {}, key {} and value {} must have "
                                "the same batch dims",
                                shape_str(q.sizes()), shape_str(k.sizes()), shape_str(v.sizes()));
               Shape os = batch_of(q);
               os.push_back(q.size(-2));
               Shape ls = os;
               os.push_back(v.size(-1));
               FOUNDRY_CHECK_AS(ValueError,
                                Shape(g.sizes()) == os && Shape(a.tensor(4).sizes()) == os &&
                                    Shape(a.tensor(5).sizes()) == ls,
                                "_scaled_dot_product_attention_flash_backward: grad_out {} and out {} must be {}, "
                                "logsumexp {} must be {}",
                                shape_str(g.sizes()), shape_str(a.tensor(4).sizes()), shape_str(os),
                                shape_str(a.tensor(5).sizes()), shape_str(ls));
               Tensor glse = opt_tensor(a[9]);
               FOUNDRY_CHECK_AS(ValueError, !glse.defined() || Shape(glse.sizes()) == ls,
                                "_scaled_dot_product_attention_flash_backward: grad_logsumexp {} must be {}",
                                glse.defined() ? shape_str(glse.sizes()) : "", shape_str(ls));
               return kernels::attention_backward(g, q, k, v, a.tensor(4), a.tensor(5), glse, mask, causal,
                                                  resolve_scale(a[8], q.size(-1)));
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               std::vector<Sample> s;
               for (const Sample& f : sdpa_samples(DType::Float64, g, false)) {
                 const Tensor& q = f.args[0].tensor();
                 const Tensor& k = f.args[1].tensor();
                 if (!(Shape(batch_of(q)) == Shape(batch_of(k)))) continue;
                 std::vector<Tensor> o = ops::call(FOUNDRY_OP("_scaled_dot_product_attention_flash"), f.args);
                 auto cast = [&](const Value& v) {
                   return v.is_tensor() && is_floating(v.tensor().dtype()) ? Value(v.tensor().to(dt)) : v;
                 };
                 const DType lt = dt == DType::Float64 ? dt : DType::Float32;
                 s.push_back({{U(o[0].sizes(), dt, g), cast(f.args[0]), cast(f.args[1]), cast(f.args[2]),
                               o[0].to(dt), o[1].to(lt), cast(f.args[3]), f.args[4], f.args[5],
                               s.size() % 2 ? Value(U(o[1].sizes(), lt, g)) : Value()},
                              f.note});
               }
               return s;
             },
         .ref = std::string("lambda go, q, k, v, o, lse, m, c, scale, glse=None: (lambda q, k, v: (lambda s: "
                            "torch.autograd.grad([torch.softmax(s, -1) @ v] + ([] if glse is None else "
                            "[torch.logsumexp(s, -1)]), (q, k, v), [go] + ([] if glse is None else [glse.to(q.dtype)])))(") +
                kPyScores + "))(q.detach().requires_grad_(), k.detach().requires_grad_(), v.detach().requires_grad_())"});

  r.add({.schema_text = "scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, "
                        "float dropout_p=0.0, bool is_causal=False, *, float? scale=None) -> Tensor",
         .family = "nn",
         .doc = "softmax(q k^T * scale + mask) v over [..., L, E] x [..., S, E] x [..., S, Ev] (memory-efficient "
                "tiled kernel; causal keeps keys j <= i; bool masks keep True)",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const Tensor& q = a.tensor(0);
               const Tensor& k = a.tensor(1);
               const Tensor& v = a.tensor(2);
               Tensor mask = opt_tensor(a[3]);
               const double p = a[4].to_double();
               const bool causal = a[5].to_bool();
               FOUNDRY_CHECK_AS(ValueError, p >= 0.0 && p <= 1.0,
                                "scaled_dot_product_attention: dropout_p must be in [0, 1], got {}", p);
               check_qkv("scaled_dot_product_attention", q, k, v, mask, causal);
               if (p > 0.0) {
                 Tensor P = attention_probs(q, k, mask, causal, resolve_scale(a[6], q.size(-1)));
                 return std::vector<Tensor>{matmul(dropout(P, p, true), v)};
               }
               return std::vector<Tensor>{
                   ops::nn::nth(ops::call(FOUNDRY_OP("_scaled_dot_product_attention_flash"),
                                          {q, k, v, a[3], causal, a[6]}),
                                0)};
             },
         .dtypes = kFloatTypes,
         .samples = [](DType dt, Generator& g) { return sdpa_samples(dt, g, true); },
         .ref = std::string("lambda q, k, v, m=None, p=0.0, c=False, scale=None: torch.softmax(") + kPyScores +
                ", -1) @ v",
         .notes = "torch 1.13 has no scaled_dot_product_attention: the reference is PyTorch 2.x's math formula; "
                  "dropout_p > 0 uses that formula with dropout on the probabilities"});
}

}  // namespace ops
}  // namespace foundry
