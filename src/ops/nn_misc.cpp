// Neural-network ops: softmax / log_softmax (fused kernels, backward ops of their own with
// second-order gradients), embedding (+ embedding_dense_backward) and dropout (Philox masks).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "foundry/autograd/grad_mode.h"
#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/softmax.h"
#include "ops/nn_common.h"

namespace foundry {

using ops::Args;
using ops::BackwardContext;
using ops::Sample;
using ops::Value;
using ops::nn::U;
using ops::nn::S;
using ops::nn::W;

namespace ops::nn {

std::vector<int64_t> expand_param(const std::vector<int64_t>& v, size_t n, const char* op, const char* name) {
  if (v.size() == n) return v;
  if (v.size() == 1) return std::vector<int64_t>(n, v[0]);
  raise<ValueError>("{}: {} must be a single int or a list of {} ints, got {} values", op, name, n, v.size());
}

void check_floating(const Tensor& x, const char* op, const char* what) {
  if (!is_floating(x.dtype()) || x.dtype() == DType::Float8E4M3 || x.dtype() == DType::Float8E5M2)
    raise<TypeError>("{}: expected a floating-point {} (float16, bfloat16, float32 or float64), got {}", op, what,
                     dtype_name(x.dtype()));
}

bool any_nonzero(const Tensor& t) {
  Tensor c = t.to(DType::Float64).contiguous();
  const double* p = c.data<double>();
  for (int64_t i = 0; i < c.numel(); ++i)
    if (p[i] != 0) return true;
  return false;
}

Tensor noncontig(const Tensor& t) {
  if (t.dim() == 0) return t;
  autograd::NoGradGuard ng;
  return t.unsqueeze(-1).expand([&] {
    Shape s(t.sizes());
    s.push_back(2);
    return s;
  }()).contiguous().select(-1, 0);
}

}  // namespace ops::nn

namespace {

// ---- softmax ---------------------------------------------------------------------------------

int64_t softmax_dim(const Tensor& x, int64_t dim, const char* op) {
  return wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op);
}

void softmax_prepare(Args& a, const char* op) {
  Tensor& x = a[0].tensor();
  if (!a[2].is_none()) {
    DType dt = a[2].dtype();
    if (!is_floating(dt)) raise<TypeError>("{}: dtype must be a floating-point type, got {}", op, dtype_name(dt));
    x = x.to(dt);
  }
  ops::nn::check_floating(x, op);
}

Tensor softmax_bwd_data(const Tensor& g, const Tensor& y, int64_t dim, DType dt, bool log) {
  return ops::call1(log ? FOUNDRY_OP("_log_softmax_backward_data") : FOUNDRY_OP("_softmax_backward_data"),
                    {g, y, dim, dt});
}

std::vector<Sample> softmax_samples(DType dt, Generator& g) {
  std::vector<Sample> s;
  Tensor x = U({3, 5}, dt, g, -4, 4);
  s.push_back({{x, int64_t(1), Value()}});
  s.push_back({{x, int64_t(0), Value()}, "dim 0"});
  s.push_back({{U({2, 3, 4}, dt, g, -4, 4), int64_t(1), Value()}, "middle dim"});
  s.push_back({{U({2, 3, 20}, dt, g, -4, 4), int64_t(-1), Value()}, "last dim"});
  s.push_back({{U({2, 17, 3}, dt, g, -4, 4), int64_t(2), Value()}});
  s.push_back({{ops::nn::noncontig(U({4, 6}, dt, g, -4, 4)), int64_t(1), Value()}, "non-contiguous"});
  s.push_back({{U({4, 6}, dt, g, -4, 4).transpose(0, 1), int64_t(1), Value()}, "transposed"});
  s.push_back({{U({}, dt, g), int64_t(0), Value()}, "0-d"});
  s.push_back({{U({7}, dt, g), int64_t(0), Value()}, "vector"});
  s.push_back({{U({2, 0, 3}, dt, g), int64_t(1), Value()}, "empty"});
  if (dt != DType::Float64) s.push_back({{U({3, 4}, dt, g), int64_t(1), DType::Float64}, "dtype"});
  return s;
}

std::vector<Sample> softmax_bwd_samples(DType dt, Generator& g, bool log) {
  std::vector<Sample> s;
  auto one = [&](IntList shape, int64_t dim, const char* note) {
    Tensor x = U(shape, DType::Float64, g, -3, 3);
    Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
    s.push_back({{U(shape, dt, g), y.to(dt), dim, dt}, note});
  };
  one({3, 5}, 1, "");
  one({2, 3, 4}, 1, "middle dim");
  one({4, 6}, 0, "dim 0");
  one({}, 0, "0-d");
  return s;
}

// ---- embedding -------------------------------------------------------------------------------

void check_indices(const Tensor& idx, const char* op) {
  if (idx.dtype() != DType::Int64 && idx.dtype() != DType::Int32)
    raise<TypeError>("{}: expected the indices to be int64 or int32, got {}", op, dtype_name(idx.dtype()));
}

std::vector<int64_t> read_indices(const Tensor& idx) { return idx.to_vector<int64_t>(); }

// padding_idx normalised to [0, num_weights) or -1 for none.
int64_t norm_padding_idx(const Value& v, int64_t num_weights) {
  if (v.is_none()) return -1;
  int64_t p = v.to_int();
  if (p >= 0) {
    FOUNDRY_CHECK_AS(ValueError, p < num_weights, "embedding: padding_idx {} must be within num_embeddings ({})", p,
                     num_weights);
    return p;
  }
  FOUNDRY_CHECK_AS(ValueError, p >= -num_weights, "embedding: padding_idx {} must be within num_embeddings ({})", p,
                   num_weights);
  return num_weights + p;
}

Tensor embedding_forward(const Tensor& idx_t, const Tensor& weight) {
  check_indices(idx_t, "embedding");
  FOUNDRY_CHECK_AS(ValueError, weight.dim() == 2, "embedding: weight must be 2-D [num_embeddings, embedding_dim], got {}",
                   shape_str(weight.sizes()));
  const int64_t V = weight.size(0), Dm = weight.size(1);
  std::vector<int64_t> idx = read_indices(idx_t);
  for (int64_t i : idx)
    if (i < 0 || i >= V)
      raise<IndexError>("embedding: index {} is out of range for a weight with {} rows", i, V);
  Shape out_shape(idx_t.sizes());
  out_shape.push_back(Dm);
  Tensor w = weight.contiguous();
  Tensor out = empty(out_shape, w.dtype());
  const int64_t row_bytes = Dm * w.element_size();
  const char* src = static_cast<const char*>(w.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  const int64_t n = int64_t(idx.size());
  parallel_for(0, n, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(Dm, 1)), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) std::memcpy(dst + i * row_bytes, src + idx[size_t(i)] * row_bytes, size_t(row_bytes));
  });
  return out;
}

// grad_weight[w] = sum over positions i with idx[i] == w (w != padding_idx) of grad[i] (divided by
// the count of w when scale_grad_by_freq). Positions are bucketed by row first, so each row is
// summed by one thread in index order (deterministic for any thread count). With `into` (a
// contiguous float32/float64 [V, Dm] tensor) the rows are added to it instead of to zeros.
Tensor embedding_backward_kernel(const Tensor& grad, const Tensor& idx_t, int64_t V, int64_t pad, bool scale,
                                 Tensor into = Tensor()) {
  check_indices(idx_t, "embedding_dense_backward");
  std::vector<int64_t> idx = read_indices(idx_t);
  const int64_t n = int64_t(idx.size());
  const int64_t Dm = grad.dim() == 0 ? 1 : grad.size(-1);
  FOUNDRY_CHECK_AS(ValueError, grad.numel() == n * Dm,
                   "embedding_dense_backward: grad_output {} does not match indices {} with embedding_dim {}",
                   shape_str(grad.sizes()), shape_str(idx_t.sizes()), Dm);
  std::vector<int64_t> start(size_t(V) + 1, 0);
  for (int64_t i : idx) {
    if (i < 0 || i >= V) raise<IndexError>("embedding_dense_backward: index {} is out of range for {} rows", i, V);
    start[size_t(i) + 1]++;
  }
  for (int64_t v = 0; v < V; ++v) start[size_t(v) + 1] += start[size_t(v)];
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < n; ++i) order[size_t(fill[size_t(idx[size_t(i)])]++)] = i;
  const DType dt = grad.dtype();
  const DType ct = dt == DType::Float64 ? DType::Float64 : DType::Float32;
  Tensor g = grad.to(ct).contiguous();
  const bool accumulate = into.defined();
  if (accumulate)
    FOUNDRY_CHECK(into.dtype() == ct && into.is_contiguous() && Shape(into.sizes()) == Shape({V, Dm}),
                  "embedding_dense_backward: can't accumulate into a {} {} tensor", dtype_name(into.dtype()),
                  shape_str(into.sizes()));
  Tensor out = accumulate ? into : zeros({V, Dm}, ct);
  kernels::visit_floating(ct, "embedding_dense_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      const T* gp = g.data<T>();
      T* op = out.data<T>();
      parallel_for(0, V, std::max<int64_t>(1, 4096 / std::max<int64_t>(Dm, 1)), [&](int64_t b, int64_t e) {
        // The row's own sum is formed apart when it is scaled and added to existing values.
        std::vector<T> scratch(accumulate && scale ? size_t(Dm) : 0);
        for (int64_t v = b; v < e; ++v) {
          if (v == pad) continue;
          int64_t lo = start[size_t(v)], hi = start[size_t(v) + 1];
          if (lo == hi) continue;
          T* dst = op + v * Dm;
          T* row = scratch.empty() ? dst : scratch.data();
          if (!scratch.empty()) std::fill(scratch.begin(), scratch.end(), T(0));
          for (int64_t k = lo; k < hi; ++k) {
            const T* src = gp + order[size_t(k)] * Dm;
            for (int64_t j = 0; j < Dm; ++j) row[j] += src[j];
          }
          if (scale) {
            T inv = T(1) / T(hi - lo);
            if (row == dst) {
              for (int64_t j = 0; j < Dm; ++j) row[j] *= inv;
            } else {
              for (int64_t j = 0; j < Dm; ++j) dst[j] += row[j] * inv;
            }
          }
        }
      });
    }
  });
  if (accumulate) return out;
  return out.dtype() == dt ? out : out.to(dt);
}

// ---- dropout ---------------------------------------------------------------------------------

thread_local Generator* t_dropout_generator = nullptr;

struct DropoutGeneratorScope {
  Generator* prev;
  explicit DropoutGeneratorScope(Generator* g) : prev(t_dropout_generator) { t_dropout_generator = g; }
  ~DropoutGeneratorScope() { t_dropout_generator = prev; }
};

void check_p(double p, const char* op) {
  if (!(p >= 0.0 && p <= 1.0))
    raise<ValueError>("{}: dropout probability has to be between 0 and 1, but got {}", op, p);
}

// Keeps element i when its uniform draw u_i (Philox counter offset + i/4, lane i%4) is < 1 - p,
// so the mask depends only on the seed and the position.
std::vector<Tensor> native_dropout_forward(const Tensor& x_in, double p) {
  Tensor x = x_in.contiguous();
  const int64_t n = x.numel();
  Tensor mask = empty(x.sizes(), DType::Bool);
  Tensor out = empty(x.sizes(), x.dtype());
  Generator& gen = t_dropout_generator ? *t_dropout_generator : default_generator();
  const uint64_t base = gen.reserve(uint64_t((n + 3) / 4));
  const uint64_t key = gen.seed();
  const float keep_p = float(1.0 - p);
  const double scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
  bool* mp = mask.data<bool>();
  kernels::visit_floating(x.dtype(), "native_dropout", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = kernels::opmath_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* op = static_cast<T*>(out.data_ptr());
    const int64_t nblocks = (n + 3) / 4;
    parallel_for(0, nblocks, kGrainSize / 4, [&](int64_t b, int64_t e) {
      for (int64_t blk = b; blk < e; ++blk) {
        auto r = philox4x32(base + uint64_t(blk), 0, key);
        for (int64_t l = 0; l < 4; ++l) {
          int64_t i = blk * 4 + l;
          if (i >= n) break;
          bool keep = uniform_float(r[size_t(l)]) < keep_p;
          mp[i] = keep;
          op[i] = keep ? T(Acc(xp[i]) * Acc(scale)) : T(0);
        }
      }
    });
  });
  return {out, mask};
}

}  // namespace

// ---- C++ API -----------------------------------------------------------------------------------

Tensor softmax(const Tensor& x, int64_t dim, OptDType dtype) { return ops::call1(FOUNDRY_OP("softmax"), {x, dim, dtype}); }
Tensor log_softmax(const Tensor& x, int64_t dim, OptDType dtype) {
  return ops::call1(FOUNDRY_OP("log_softmax"), {x, dim, dtype});
}
Tensor embedding(const Tensor& indices, const Tensor& weight, OptInt padding_idx) {
  return ops::call1(FOUNDRY_OP("embedding"), {indices, weight, padding_idx});
}
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  DropoutGeneratorScope scope(gen);
  return ops::call1(FOUNDRY_OP("dropout"), {x, p, training});
}

namespace ops {

void register_nn_misc_ops(Registry& r) {
  for (bool log : {false, true}) {
    const char* name = log ? "log_softmax" : "softmax";
    r.add({.schema_text = std::string(name) + "(Tensor input, int dim, ScalarType? dtype=None) -> Tensor",
           .family = "nn",
           .doc = log ? "log(softmax(x)) along dim, computed as x - max - log(sum(exp(x - max)))"
                      : "exp(x) / sum(exp(x)) along dim (fused, numerically stable)",
           .saves_outputs = {0},
           .prepare = [name](Args& a) { softmax_prepare(a, name); },
           .forward =
               [log, name](const Args& a) {
                 const Tensor& x = a.tensor(0);
                 int64_t dim = softmax_dim(x, a[1].to_int(), name);
                 return std::vector<Tensor>{kernels::softmax_forward(x, x.dim() == 0 ? 0 : dim, log)};
               },
           .backward =
               [log](BackwardContext& c) {
                 int64_t dim = softmax_dim(c.output(0), c.int_arg("dim"), "softmax backward");
                 return std::vector<Tensor>{softmax_bwd_data(c.grad(), c.output(0), dim, c.input_dtype("input"), log)};
               },
           .dtypes = kFloatTypes,
           .samples = softmax_samples,
           .ref = log ? "torch.log_softmax" : "torch.softmax"});

    // The gradient: its own op, with gradients with respect to both inputs (second order).
    r.add({.schema_text = std::string("_") + name +
                          "_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor",
           .family = "nn",
           .doc = log ? "gradient of log_softmax: grad - exp(output) * sum(grad, dim)"
                      : "gradient of softmax: output * (grad - sum(grad * output, dim))",
           .saves = {"grad_output", "output"},
           .forward =
               [log, name](const Args& a) {
                 const Tensor& g = a.tensor(0);
                 const Tensor& y = a.tensor(1);
                 FOUNDRY_CHECK_AS(ValueError, Shape(g.sizes()) == Shape(y.sizes()),
                                  "_{}_backward_data: grad_output {} and output {} must have the same shape", name,
                                  shape_str(g.sizes()), shape_str(y.sizes()));
                 ops::nn::check_floating(g, name, "grad_output");
                 int64_t dim = softmax_dim(g, a[2].to_int(), name);
                 Tensor gx = kernels::softmax_backward(g, y.to(g.dtype()), g.dim() == 0 ? 0 : dim, log);
                 DType in_dt = a[3].dtype();
                 return std::vector<Tensor>{gx.dtype() == in_dt ? gx : gx.to(in_dt)};
               },
           .backward =
               [log](BackwardContext& c) {
                 const Tensor& g = c.input("grad_output");
                 const Tensor& y = c.input("output");
                 const Tensor& gg = c.grad();
                 int64_t dim = softmax_dim(g, c.int_arg("dim"), "softmax double backward");
                 std::vector<Tensor> out(2);
                 if (g.dim() == 0) dim = 0;
                 if (log) {
                   // r = g - exp(y) * sum(g): dr/dg . gg = gg - sum(gg * exp(y)); dr/dy . gg = -gg exp(y) sum(g)
                   Tensor ey = exp(y);
                   if (c.needs_grad("grad_output")) out[0] = gg - sum(gg * ey, dim, true);
                   if (c.needs_grad("output")) out[1] = neg(gg * ey * sum(g, dim, true));
                 } else {
                   // r = y (g - s), s = sum(g y): dr/dg . gg = y (gg - sum(gg y));
                   // dr/dy . gg = gg (g - s) - g sum(gg y)
                   Tensor ggy = sum(gg * y, dim, true);
                   if (c.needs_grad("grad_output")) out[0] = y * (gg - ggy);
                   if (c.needs_grad("output")) out[1] = gg * (g - sum(g * y, dim, true)) - g * ggy;
                 }
                 return out;
               },
           .dtypes = kFloatTypes,
           .samples = [log](DType dt, Generator& g) { return softmax_bwd_samples(dt, g, log); },
           .ref = std::string("torch.ops.aten._") + name + "_backward_data"});
  }

  r.add({.schema_text = "embedding(Tensor input, Tensor weight, int? padding_idx=None, float? max_norm=None, "
                        "float norm_type=2.0, bool scale_grad_by_freq=False, bool sparse=False) -> Tensor",
         .family = "nn",
         .doc = "rows of weight picked by integer indices; the padding_idx row gets no gradient",
         .saves = {"input"},
         .forward =
             [](const Args& a) {
               if (!a[3].is_none())
                 raise<NotImplementedError>("embedding: max_norm (renormalising weight rows in place) is not supported");
               if (a[6].to_bool()) raise<NotImplementedError>("embedding: sparse gradients are not supported");
               const Tensor& w = a.tensor(1);
               if (w.dim() == 2) norm_padding_idx(a[2], w.size(0));
               return std::vector<Tensor>{embedding_forward(a.tensor(0), w)};
             },
         .backward =
             [](BackwardContext& c) {
               Shape ws = c.input_sizes("weight");
               int64_t pad = norm_padding_idx(c.arg("padding_idx"), ws[0]);
               bool scale = c.bool_arg("scale_grad_by_freq");
               // A tied weight (GPT-2's wte is also the LM head) already has a summed gradient
               // of its size: add the rows into it rather than into a second dense tensor.
               if (!autograd::is_grad_enabled()) {
                 Tensor acc = c.take_pending_grad("weight");
                 if (acc.defined() && (acc.dtype() == DType::Float32 || acc.dtype() == DType::Float64))
                   return std::vector<Tensor>{Tensor(),
                                              embedding_backward_kernel(c.grad(), c.input("input"), ws[0], pad, scale, acc)};
                 if (acc.defined()) {
                   Tensor gw = embedding_backward_kernel(c.grad(), c.input("input"), ws[0], pad, scale);
                   return std::vector<Tensor>{Tensor(), acc.add_(gw)};
                 }
               }
               Tensor gw = ops::call1(FOUNDRY_OP("embedding_dense_backward"), {c.grad(), c.input("input"), ws[0], pad, scale});
               return std::vector<Tensor>{Tensor(), gw};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor w = U({10, 3}, dt, g);
               Tensor idx = sample_index({2, 4}, 10, g);
               Tensor rep = tensor<int64_t>({1, 3, 1, 1, 7, 3}, {6});
               std::vector<Sample> s;
               s.push_back({{idx, w, Value(), Value(), 2.0, false, false}});
               // The padding row is read but gets no gradient: finite differences disagree by design.
               s.push_back({{rep, w, int64_t(3), Value(), 2.0, false, false}, "padding_idx", false});
               s.push_back({{rep, w, int64_t(-1), Value(), 2.0, false, false}, "negative padding_idx"});
               s.push_back({{rep, w, Value(), Value(), 2.0, true, false}, "scale_grad_by_freq", false});
               s.push_back({{rep.to(DType::Int32), w, int64_t(1), Value(), 2.0, true, false}, "int32 indices", false});
               s.push_back({{tensor<int64_t>({4}, {1}).view({}), w, Value(), Value(), 2.0, false, false}, "0-d index"});
               s.push_back({{sample_index({0, 2}, 10, g), w, Value(), Value(), 2.0, false, false}, "empty"});
               s.push_back({{idx, ops::nn::noncontig(w), Value(), Value(), 2.0, false, false}, "non-contiguous weight"});
               return s;
             },
         .ref = "torch.nn.functional.embedding"});

  r.add({.schema_text = "embedding_dense_backward(Tensor grad_output, Tensor indices, int num_weights, int padding_idx, "
                        "bool scale_grad_by_freq) -> Tensor",
         .family = "nn",
         .doc = "gradient of embedding: grad rows summed into their weight rows (padding_idx -1: none)",
         .saves = {"indices"},
         .forward =
             [](const Args& a) {
               ops::nn::check_floating(a.tensor(0), "embedding_dense_backward", "grad_output");
               int64_t V = a[2].to_int();
               FOUNDRY_CHECK_AS(ValueError, V >= 0, "embedding_dense_backward: num_weights must be >= 0, got {}", V);
               return std::vector<Tensor>{
                   embedding_backward_kernel(a.tensor(0), a.tensor(1), V, a[3].to_int(), a[4].to_bool())};
             },
         .backward =
             [](BackwardContext& c) {
               // Linear in grad_output: the adjoint gathers rows back (zero at padding_idx).
               const Tensor& idx = c.input("indices");
               Tensor gg = c.grad();
               int64_t V = c.int_arg("num_weights"), pad = c.int_arg("padding_idx");
               if (c.bool_arg("scale_grad_by_freq")) {
                 Tensor counts = ops::call1(FOUNDRY_OP("embedding_dense_backward"),
                                            {ones(idx.sizes(), gg.dtype()).unsqueeze(-1), idx, V, int64_t(-1), false});
                 gg = gg / clamp(counts, Scalar(1.0));  // unused rows: count 0, never gathered
               }
               Tensor r = ops::call1(FOUNDRY_OP("embedding"), {idx, gg, Value(), Value(), 2.0, false, false});
               if (pad >= 0) r = where((idx == scalar_tensor(pad, idx.dtype())).unsqueeze(-1), W(0.0), r);
               return std::vector<Tensor>{r.view(c.input_sizes("grad_output")), Tensor()};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor rep = tensor<int64_t>({1, 3, 1, 1, 7, 3}, {2, 3});
               // scale_grad_by_freq is checked in tests/unit/nn_ops_test.cpp (its gradient differs from
               // torch 1.13's, which omits the division by the counts; see notes).
               return std::vector<Sample>{{{U({2, 3, 4}, dt, g), rep, int64_t(8), int64_t(-1), false}},
                                          {{U({2, 3, 4}, dt, g), rep, int64_t(8), int64_t(3), false}, "padding_idx"}};
             },
         .ref = "torch.ops.aten.embedding_dense_backward",
         .notes = "with scale_grad_by_freq the gradient with respect to grad_output divides by the counts (the "
                  "adjoint of the forward); torch 1.13's double backward omits that division"});

  r.add({.schema_text = "native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)",
         .family = "nn",
         .doc = "dropout returning (output, keep mask); kept values are scaled by 1 / (1 - p)",
         .saves_outputs = {1},
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               ops::nn::check_floating(x, "native_dropout");
               double p = a[1].to_double();
               check_p(p, "native_dropout");
               bool train = a[2].is_none() ? true : a[2].to_bool();
               if (!train || p == 0.0) return std::vector<Tensor>{x.clone(), ones(x.sizes(), DType::Bool)};
               return native_dropout_forward(x, p);
             },
         .backward =
             [](BackwardContext& c) {
               double p = c.double_arg("p");
               bool train = c.arg("train").is_none() ? true : c.bool_arg("train");
               double scale = (!train || p == 0.0) ? 1.0 : (p < 1.0 ? 1.0 / (1.0 - p) : 0.0);
               return std::vector<Tensor>{
                   ops::call1(FOUNDRY_OP("native_dropout_backward"), {c.grad(0), c.output(1), scale})};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = U({40, 50}, dt, g, 0.5, 2.0);
               // (No empty sample: torch 1.13 returns a mask of the input's dtype for empty inputs.)
               return std::vector<Sample>{{{x, 0.5, true}, "", false}, {{x, 0.2, true}, "", false},
                                          {{x, 0.5, false}, "eval"}};
             },
         .ref = "torch.native_dropout",
         .random = true});

  r.add({.schema_text = "native_dropout_backward(Tensor grad_output, Tensor mask, float scale) -> Tensor",
         .family = "nn",
         .doc = "grad_output * mask * scale",
         .saves = {"mask"},
         .forward =
             [](const Args& a) {
               const Tensor& g = a.tensor(0);
               const Tensor& m = a.tensor(1);
               FOUNDRY_CHECK_AS(TypeError, m.dtype() == DType::Bool, "native_dropout_backward: mask must be bool, got {}",
                                dtype_name(m.dtype()));
               FOUNDRY_CHECK_AS(ValueError, Shape(g.sizes()) == Shape(m.sizes()),
                                "native_dropout_backward: grad_output {} and mask {} must have the same shape",
                                shape_str(g.sizes()), shape_str(m.sizes()));
               return std::vector<Tensor>{where(m, g * S(a[2].to_double(), g.dtype()), W(0.0))};
             },
         .backward =
             [](BackwardContext& c) {
               return std::vector<Tensor>{ops::call1(FOUNDRY_OP("native_dropout_backward"),
                                                     {c.grad(), c.input("mask"), c.double_arg("scale")}),
                                          Tensor()};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor m = U({3, 4}, DType::Bool, g);
               return std::vector<Sample>{{{U({3, 4}, dt, g), m, 2.0}}, {{U({3, 4}, dt, g), m, 1.25}}};
             },
         .ref = "torch.ops.aten.native_dropout_backward"});

  r.add({.schema_text = "dropout(Tensor input, float p=0.5, bool train=True) -> Tensor",
         .family = "nn",
         .doc = "zeroes elements with probability p (Philox, same mask for any thread count) and scales the rest "
                "by 1 / (1 - p); identity when not training",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               double p = a[1].to_double();
               check_p(p, "dropout");
               if (!a[2].to_bool() || p == 0.0) return std::vector<Tensor>{x};
               ops::nn::check_floating(x, "dropout");
               if (p == 1.0) return std::vector<Tensor>{x * W(0.0)};
               return std::vector<Tensor>{
                   ops::nn::nth(ops::call(FOUNDRY_OP("native_dropout"), {x, p, a[2].to_bool()}), 0)};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = U({40, 50}, dt, g, 0.5, 2.0);
               return std::vector<Sample>{{{x, 0.5, true}, "", false}, {{x, 0.1, true}, "", false},
                                          {{x, 0.5, false}, "eval"}, {{x, 1.0, true}, "p = 1"},
                                          {{x, 0.0, true}, "p = 0"}, {{U({0, 3}, dt, g), 0.5, true}, "empty"}};
             },
         .ref = "torch.dropout",
         .random = true});
}

}  // namespace ops
}  // namespace foundry

namespace foundry::ops {

void register_nn_misc_ops(Registry& r);
void register_nn_norm_ops(Registry& r);
void register_nn_conv_ops(Registry& r);
void register_nn_pool_ops(Registry& r);
void register_nn_attention_ops(Registry& r);

// The neural-network family: one register function per nn_*.cpp file.
void register_nn_recurrent_ops(Registry& r);

void register_nn_ops(Registry& r) {
  register_nn_misc_ops(r);
  register_nn_norm_ops(r);
  register_nn_conv_ops(r);
  register_nn_pool_ops(r);
  register_nn_attention_ops(r);
  register_nn_recurrent_ops(r);
}

}  // namespace foundry::ops
