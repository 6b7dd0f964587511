// Reductions over any set of dims. Kernels see [M, K] rows (reduced dims moved innermost);
// full reductions of large tensors split K across threads. Gradients are written in ops.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/unary.h"
#include "ops/common.h"

namespace foundry {

using kernels::Rows;
using ops::Args;
using ops::BackwardContext;
using ops::OpDef;
using ops::Sample;
using ops::Value;

namespace ops {

std::vector<int64_t> reduction_dims(const OptDims& dim, int64_t ndim, const char* op) {
  std::vector<int64_t> dims;
  if (!dim.has_value() || dim.dims->empty()) {
    for (int64_t d = 0; d < ndim; ++d) dims.push_back(d);
    return dims;
  }
  for (int64_t d : *dim.dims) dims.push_back(wrap_dim(d, ndim, op));
  std::sort(dims.begin(), dims.end());
  if (std::adjacent_find(dims.begin(), dims.end()) != dims.end())
    raise<ValueError>("{}: dim {} appears multiple times in the list of dims", op, *std::adjacent_find(dims.begin(), dims.end()));
  if (ndim == 0) dims.clear();
  return dims;
}

std::vector<int64_t> reduction_dims(const Value& dim, int64_t ndim, const char* op) {
  if (dim.is_none()) return reduction_dims(OptDims(), ndim, op);
  return reduction_dims(OptDims(dim.int_list()), ndim, op);
}

}  // namespace ops

namespace {

Tensor W(double v) { return wrap_scalar(v); }

// Reinserts the reduced dims of a gradient (when keepdim was false) and broadcasts it back.
Tensor expand_reduced(const Tensor& g, IntList input_sizes, const std::vector<int64_t>& dims, bool keepdim) {
  Tensor r = g;
  if (!keepdim)
    for (int64_t d : dims) r = r.unsqueeze(d);
  return r.expand(input_sizes);
}

std::vector<int64_t> dims_of(BackwardContext& c, const char* name = "dim") {
  return ops::reduction_dims(c.arg(name), int64_t(c.input_sizes("input").size()), "backward");
}

Tensor finish(const Tensor& out_keep, const Rows& r, bool keepdim) {
  return keepdim ? out_keep : out_keep.view(r.reduced_shape);
}

// Runs fn(m, row pointer) for every row, rows split across threads.
template <typename T, typename F>
void each_row(const Rows& r, F fn) {
  const T* base = static_cast<const T*>(r.data.data_ptr());
  int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(r.K, 1));
  parallel_for(0, r.M, grain, [&](int64_t b, int64_t e) {
    for (int64_t m = b; m < e; ++m) fn(m, base + m * r.K);
  });
}

// Sum of K values of a row, accumulated in the opmath type.
template <typename T>
double row_sum(const T* p, int64_t K) {
  if constexpr (std::is_same_v<T, float>) return kernels::sum_f32(p, K);
  else if constexpr (std::is_same_v<T, double>) return kernels::sum_f64(p, K);
  else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    float buf[kernels::kChunk];
    float s = 0;
    for (int64_t i = 0; i < K; i += kernels::kChunk) {
      int64_t n = std::min(kernels::kChunk, K - i);
      if constexpr (std::is_same_v<T, Half>) kernels::convert_f16_to_f32(reinterpret_cast<const uint16_t*>(p + i), buf, n);
      else kernels::convert_bf16_to_f32(reinterpret_cast<const uint16_t*>(p + i), buf, n);
      s += kernels::sum_f32(buf, n);
    }
    return s;
  } else {
    int64_t s = 0;
    for (int64_t i = 0; i < K; ++i) s += int64_t(p[i]);
    return double(s);
  }
}

// sum over rows into `out` (dtype T or int64 for integers), parallel across K when M is small.
Tensor sum_impl(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  // Column path: reducing the leading dims of a contiguous float tensor (bias gradients).
  if (x.dtype() == DType::Float32 && x.is_contiguous() && !dims.empty() && dims.back() == int64_t(dims.size()) - 1 &&
      int64_t(dims.size()) < x.dim()) {
    int64_t K = 1, M = 1;
    Shape keep(x.sizes()), red;
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (d < int64_t(dims.size())) {
        K *= x.size(d);
        keep[size_t(d)] = 1;
      } else {
        M *= x.size(d);
        red.push_back(x.size(d));
      }
    }
    Tensor out = zeros(keep, DType::Float32);
    float* o = out.data<float>();
    const float* p = x.data<float>();
    parallel_for(0, M, 1024, [&](int64_t b, int64_t e) {
      for (int64_t k = 0; k < K; ++k) kernels::add_into_f32(o + b, p + k * M + b, e - b);
    });
    return keepdim ? out : out.view(red);
  }
  Rows r = kernels::to_rows(x, dims);
  DType out_dt = x.dtype();
  Tensor out = empty(r.keep_shape, out_dt);
  kernels::visit_numeric(x.dtype(), "sum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out.data_ptr());
    if (r.M == 1 && r.K > 2 * kGrainSize && !in_parallel_region()) {
      // One long row: partial sums per thread chunk, combined in order (deterministic for a
      // given thread count).
      int nt = get_num_threads();
      std::vector<double> part(size_t(nt), 0.0);
      const T* p = static_cast<const T*>(r.data.data_ptr());
      int64_t chunk = (r.K + nt - 1) / nt;
      parallel_for(0, nt, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          int64_t lo = t * chunk, hi = std::min(r.K, lo + chunk);
          if (lo < hi) part[size_t(t)] = row_sum(p + lo, hi - lo);
        }
      });
      double s = 0;
      for (double v : part) s += v;
      if constexpr (std::is_integral_v<T>) {
        int64_t si = 0;
        for (int64_t i = 0; i < r.K; ++i) si += int64_t(p[i]);
        o[0] = T(si);
      } else {
        o[0] = T(s);
      }
      return;
    }
    if constexpr (std::is_same_v<T, float>) {
      const float* base = static_cast<const float*>(r.data.data_ptr());
      const int64_t K = r.K;
      parallel_for(0, r.M, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(K, 1)),
                   [&](int64_t b, int64_t e) { kernels::sum_rows_f32(base + b * K, e - b, K, o + b); });
      return;
    }
    each_row<T>(r, [&](int64_t m, const T* row) {
      if constexpr (std::is_integral_v<T>) {
        int64_t s = 0;
        for (int64_t i = 0; i < r.K; ++i) s += int64_t(row[i]);
        o[m] = T(s);
      } else {
        o[m] = T(row_sum(row, r.K));
      }
    });
  });
  return finish(out, r, keepdim);
}

// Reduces each row to one value with fn(row, K) -> double, output dtype out_dt.
template <typename F>
Tensor reduce_rows(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, DType out_dt, const char* op, F fn) {
  Rows r = kernels::to_rows(x, dims);
  Tensor out = empty(r.keep_shape, out_dt);
  kernels::visit_numeric(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::visit_numeric(out_dt, op, [&](auto otag) {
      using O = typename decltype(otag)::type;
      O* o = static_cast<O*>(out.data_ptr());
      each_row<T>(r, [&](int64_t m, const T* row) {
        auto v = fn(row, r.K);
        if constexpr (std::is_same_v<O, bool>) o[m] = v != 0;
        else o[m] = O(v);
      });
    });
  });
  return finish(out, r, keepdim);
}

template <typename T>
double to_d(T v) {
  if constexpr (std::is_same_v<T, double>) return v;
  else return double(float(v));
}

// Extreme value and its first index along the reduced row (NaN wins, first NaN's index).
template <bool kMax, typename T>
std::pair<double, int64_t> arg_extreme(const T* row, int64_t K) {
  double best = to_d(row[0]);
  int64_t idx = 0;
  if (std::isnan(best)) return {best, 0};
  for (int64_t i = 1; i < K; ++i) {
    double v = to_d(row[i]);
    if (std::isnan(v)) return {v, i};
    if (kMax ? v > best : v < best) {
      best = v;
      idx = i;
    }
  }
  return {best, idx};
}

template <bool kMax>
std::vector<Tensor> minmax_dim(const Tensor& x, int64_t dim, bool keepdim, const char* op) {
  FOUNDRY_CHECK_AS(IndexError, x.numel() > 0 || x.dim() == 0,
                   "{}(): expected reduction dim {} to have non-zero size", op, dim);
  std::vector<int64_t> dims = {wrap_dim(dim, x.dim(), op)};
  if (x.dim() == 0) dims.clear();
  Rows r = kernels::to_rows(x, dims);
  FOUNDRY_CHECK_AS(IndexError, r.K > 0, "{}(): expected reduction dim to have non-zero size", op);
  Tensor values = empty(r.keep_shape, x.dtype()), indices = empty(r.keep_shape, DType::Int64);
  int64_t* ip = indices.data<int64_t>();
  kernels::visit_numeric(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* vp = static_cast<T*>(values.data_ptr());
    each_row<T>(r, [&](int64_t m, const T* row) {
      auto [v, i] = arg_extreme<kMax>(row, r.K);
      vp[m] = row[i];
      ip[m] = i;
    });
  });
  return {finish(values, r, keepdim), finish(indices, r, keepdim)};
}

Tensor amax_impl(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, bool is_max) {
  FOUNDRY_CHECK_AS(IndexError, x.numel() > 0, "{}(): expected a non-empty tensor (the reduction has no identity)",
                   is_max ? "amax" : "amin");
  Rows r = kernels::to_rows(x, dims);
  Tensor out = empty(r.keep_shape, x.dtype());
  kernels::visit_numeric(x.dtype(), is_max ? "amax" : "amin", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* o = static_cast<T*>(out.data_ptr());
    each_row<T>(r, [&](int64_t m, const T* row) {
      if constexpr (std::is_same_v<T, float>) {
        o[m] = is_max ? kernels::max_f32(row, r.K) : kernels::min_f32(row, r.K);
      } else {
        auto [v, i] = is_max ? arg_extreme<true>(row, r.K) : arg_extreme<false>(row, r.K);
        o[m] = row[i];
      }
    });
  });
  return finish(out, r, keepdim);
}

// Values equal to the extreme share its gradient evenly (PyTorch's amax/amin rule).
Tensor extreme_grad(BackwardContext& c, const std::vector<int64_t>& dims, bool keepdim) {
  Shape in = c.input_sizes("input");
  Tensor y = expand_reduced(c.output(0), in, dims, keepdim);
  Tensor mask = (c.input("input") == y).to(c.grad().dtype());
  Tensor count = sum(mask, dims, true);
  return expand_reduced(c.grad(), in, dims, keepdim) * mask / count;
}

std::vector<Sample> reduce_samples(DType dt, Generator& g, bool with_dims, double lo = -2, double hi = 2) {
  Tensor x = ops::sample_uniform({3, 4, 5}, dt, g, lo, hi);
  std::vector<Sample> s;
  if (with_dims) {
    s.push_back({{x, std::vector<int64_t>{1}, false}});
    s.push_back({{x, std::vector<int64_t>{0, 2}, true}});
    s.push_back({{x, std::vector<int64_t>{-1}, false}});
    s.push_back({{x, Value(), false}, "all dims"});
    s.push_back({{ops::sample_uniform({}, dt, g, lo, hi), Value(), false}, "0-d"});
    s.push_back({{ops::sample_uniform({2, 0, 3}, dt, g, lo, hi), std::vector<int64_t>{1}, false}, "empty"});
  }
  return s;
}

}  // namespace

Tensor sum(const Tensor& x, OptDims dim, bool keepdim, OptDType dtype) {
  return ops::call1(FOUNDRY_OP("sum"), {x, Value(dim.dims), keepdim, dtype});
}
Tensor mean(const Tensor& x, OptDims dim, bool keepdim, OptDType dtype) {
  return ops::call1(FOUNDRY_OP("mean"), {x, Value(dim.dims), keepdim, dtype});
}
Tensor prod(const Tensor& x, OptInt dim, bool keepdim, OptDType dtype) {
  return ops::call1(FOUNDRY_OP("prod"), {x, dim, keepdim, dtype});
}
Tensor amax(const Tensor& x, IntList dim, bool keepdim) { return ops::call1(FOUNDRY_OP("amax"), {x, dim, keepdim}); }
Tensor amin(const Tensor& x, IntList dim, bool keepdim) { return ops::call1(FOUNDRY_OP("amin"), {x, dim, keepdim}); }
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  auto r = ops::call(FOUNDRY_OP("max"), {x, dim, keepdim});
  return {r[0], r[1]};
}
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  auto r = ops::call(FOUNDRY_OP("min"), {x, dim, keepdim});
  return {r[0], r[1]};
}
Tensor argmax(const Tensor& x, OptInt dim, bool keepdim) { return ops::call1(FOUNDRY_OP("argmax"), {x, dim, keepdim}); }
Tensor argmin(const Tensor& x, OptInt dim, bool keepdim) { return ops::call1(FOUNDRY_OP("argmin"), {x, dim, keepdim}); }
Tensor var(const Tensor& x, OptDims dim, int64_t correction, bool keepdim) {
  return ops::call1(FOUNDRY_OP("var"), {x, Value(dim.dims), correction, keepdim});
}
Tensor std(const Tensor& x, OptDims dim, int64_t correction, bool keepdim) {
  return ops::call1(FOUNDRY_OP("std"), {x, Value(dim.dims), correction, keepdim});
}
std::tuple<Tensor, Tensor> var_mean(const Tensor& x, OptDims dim, int64_t correction, bool keepdim) {
  auto r = ops::call(FOUNDRY_OP("var_mean"), {x, Value(dim.dims), correction, keepdim});
  return {r[0], r[1]};
}
std::tuple<Tensor, Tensor> std_mean(const Tensor& x, OptDims dim, int64_t correction, bool keepdim) {
  auto r = ops::call(FOUNDRY_OP("std_mean"), {x, Value(dim.dims), correction, keepdim});
  return {r[0], r[1]};
}
Tensor logsumexp(const Tensor& x, IntList dim, bool keepdim) {
  return ops::call1(FOUNDRY_OP("logsumexp"), {x, dim, keepdim});
}
Tensor norm(const Tensor& x, double p, OptDims dim, bool keepdim) {
  return ops::call1(FOUNDRY_OP("norm"), {x, p, Value(dim.dims), keepdim});
}
Tensor cumsum(const Tensor& x, int64_t dim, OptDType dtype) { return ops::call1(FOUNDRY_OP("cumsum"), {x, dim, dtype}); }
Tensor cumprod(const Tensor& x, int64_t dim, OptDType dtype) {
  return ops::call1(FOUNDRY_OP("cumprod"), {x, dim, dtype});
}
std::tuple<Tensor, Tensor> cummax(const Tensor& x, int64_t dim) {
  auto r = ops::call(FOUNDRY_OP("cummax"), {x, dim});
  return {r[0], r[1]};
}
std::tuple<Tensor, Tensor> cummin(const Tensor& x, int64_t dim) {
  auto r = ops::call(FOUNDRY_OP("cummin"), {x, dim});
  return {r[0], r[1]};
}
Tensor all(const Tensor& x, OptInt dim, bool keepdim) { return ops::call1(FOUNDRY_OP("all"), {x, dim, keepdim}); }
Tensor any(const Tensor& x, OptInt dim, bool keepdim) { return ops::call1(FOUNDRY_OP("any"), {x, dim, keepdim}); }
Tensor count_nonzero(const Tensor& x, OptDims dim) { return ops::call1(FOUNDRY_OP("count_nonzero"), {x, Value(dim.dims)}); }
std::tuple<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim) {
  auto r = ops::call(FOUNDRY_OP("median"), {x, dim, keepdim});
  return {r[0], r[1]};
}
std::tuple<Tensor, Tensor> mode(const Tensor& x, int64_t dim, bool keepdim) {
  auto r = ops::call(FOUNDRY_OP("mode"), {x, dim, keepdim});
  return {r[0], r[1]};
}

namespace ops {

void register_reduce_ops(Registry& r) {
  auto sum_like_prepare = [](bool is_mean) {
    return [is_mean](Args& a) {
      Tensor& x = a[0].tensor();
      if (!a[3].is_none()) x = x.to(a[3].dtype());
      else if (!is_floating(x.dtype())) {
        if (is_mean)
          raise<TypeError>("mean(): could not infer output dtype. Input dtype must be either a floating point or "
                           "complex dtype. Got: {}",
                           dtype_name(x.dtype()));
        x = x.to(DType::Int64);
      }
    };
  };
  r.add({.schema_text = "sum(Tensor input, int[]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
         .family = "reduction",
         .doc = "Sum over dims (all when None); integers accumulate in int64.",
         .prepare = sum_like_prepare(false),
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               return std::vector<Tensor>{sum_impl(x, reduction_dims(a[1], x.dim(), "sum"), a[2].to_bool())};
             },
         .backward =
             [](BackwardContext& c) {
               return std::vector<Tensor>{
                   expand_reduced(c.grad(), c.input_sizes("input"), dims_of(c), c.bool_arg("keepdim"))};
             },
         .dtypes = kNumericTypes,
         .samples = [](DType dt, Generator& g) {
           auto s = reduce_samples(dt, g, true);
           for (auto& smp : s) smp.args.push_back(Value());
           return s;
         }});

  r.add({.schema_text = "mean(Tensor input, int[]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
         .family = "reduction",
         .doc = "Mean over dims; floating inputs only (or give dtype).",
         .prepare = sum_like_prepare(true),
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               auto dims = reduction_dims(a[1], x.dim(), "mean");
               int64_t k = 1;
               for (int64_t d : dims) k *= x.size(d);
               Tensor s = sum_impl(x, dims, a[2].to_bool());
               Tensor out = ops::empty_as(s, s.dtype());
               kernels::UnaryParams p;
               // out = s / k (k = 0 gives NaN, as PyTorch)
               autograd::NoGradGuard ng;
               return std::vector<Tensor>{s / W(double(k))};
             },
         .backward =
             [](BackwardContext& c) {
               auto dims = dims_of(c);
               Shape in = c.input_sizes("input");
               int64_t k = 1;
               for (int64_t d : dims) k *= in[size_t(d)];
               return std::vector<Tensor>{expand_reduced(c.grad(), in, dims, c.bool_arg("keepdim")) / W(double(k))};
             },
         .dtypes = kFloatTypes,
         .samples = [](DType dt, Generator& g) {
           auto s = reduce_samples(dt, g, true);
           for (auto& smp : s) smp.args.push_back(Value());
           return s;
         }});

  r.add({.schema_text = "prod(Tensor input, int? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor",
         .family = "reduction",
         .doc = "Product over one dim (or all); integers accumulate in int64.",
         .saves = {"input"},
         .prepare = sum_like_prepare(false),
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               auto dims = reduction_dims(a[1], x.dim(), "prod");
               return std::vector<Tensor>{reduce_rows(x, dims, a[2].to_bool(), x.dtype(), "prod", [](auto* row, int64_t K) {
                 using T = std::remove_cv_t<std::remove_pointer_t<decltype(row)>>;
                 if constexpr (std::is_integral_v<T>) {
                   uint64_t p = 1;
                   for (int64_t i = 0; i < K; ++i) p *= uint64_t(int64_t(row[i]));
                   return double(int64_t(p));
                 } else {
                   double p = 1;
                   for (int64_t i = 0; i < K; ++i) p *= to_d(row[i]);
                   return p;
                 }
               })};
             },
         .backward =
             [](BackwardContext& c) {
               // Product of all other elements, from exclusive prefix and suffix products: exact
               // with zeros and differentiable again.
               Tensor x = c.input("input");
               bool keepdim = c.bool_arg("keepdim");
               Tensor g = c.grad();
               int64_t dim;
               if (c.arg("dim").is_none()) {
                 x = x.reshape({-1});
                 dim = 0;
                 g = g.reshape({1});
                 keepdim = true;
               } else {
                 dim = wrap_dim(c.int_arg("dim"), x.dim());
               }
               if (x.dim() == 0) return std::vector<Tensor>{g.reshape({})};
               int64_t n = x.size(dim);
               if (n == 0) return std::vector<Tensor>{zeros(c.input_sizes("input"), g.dtype())};
               Shape one_shape(x.sizes());
               one_shape[size_t(dim)] = 1;
               Tensor ones_t = ones(one_shape, x.dtype());
               Tensor left = cat({ones_t, cumprod(narrow(x, dim, 0, n - 1), dim)}, dim);
               Tensor right = flip(cat({ones_t, cumprod(flip(narrow(x, dim, 1, n - 1), {dim}), dim)}, dim), {dim});
               Tensor gk = keepdim ? g : g.unsqueeze(dim);
               return std::vector<Tensor>{(gk * left * right).reshape(c.input_sizes("input"))};
             },
         .dtypes = kNumericTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = sample_uniform({3, 4}, dt, g, 0.5, 1.5);
               Tensor z = x.clone();
               return std::vector<Sample>{{{x, int64_t(1), false, Value()}},
                                          {{x, int64_t(0), true, Value()}},
                                          {{x, Value(), false, Value()}, "all"},
                                          {{sample_uniform({}, dt, g, 0.5, 1.5), Value(), false, Value()}, "0-d"}};
             }});

  auto extreme = [&r](bool is_max) {
    r.add({.schema_text = is_max ? "amax(Tensor input, int[] dim=[], bool keepdim=False) -> Tensor"
                                 : "amin(Tensor input, int[] dim=[], bool keepdim=False) -> Tensor",
           .family = "reduction",
           .doc = is_max ? "Maximum over dims (all when []); NaN propagates; ties share the gradient"
                         : "Minimum over dims (all when []); NaN propagates; ties share the gradient",
           .saves = {"input"},
           .saves_outputs = {0},
           .forward =
               [is_max](const Args& a) {
                 const Tensor& x = a.tensor(0);
                 return std::vector<Tensor>{
                     amax_impl(x, reduction_dims(a[1], x.dim(), is_max ? "amax" : "amin"), a[2].to_bool(), is_max)};
               },
           .backward =
               [](BackwardContext& c) { return std::vector<Tensor>{extreme_grad(c, dims_of(c), c.bool_arg("keepdim"))}; },
           .dtypes = kNumericTypes,
           .samples = [](DType dt, Generator& g) {
             Tensor x = sample_uniform({3, 4, 5}, dt, g);
             return std::vector<Sample>{{{x, std::vector<int64_t>{1}, false}},
                                        {{x, std::vector<int64_t>{0, 2}, true}},
                                        {{x, std::vector<int64_t>{}, false}, "all"},
                                        {{sample_uniform({}, dt, g), std::vector<int64_t>{}, false}, "0-d"}};
           }});
  };
  extreme(true);
  extreme(false);

  auto minmax = [&r](bool is_max) {
    r.add({.schema_text = is_max ? "max(Tensor input, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"
                                 : "min(Tensor input, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
           .family = "reduction",
           .doc = is_max ? "Maximum along a dim and its first index" : "Minimum along a dim and its first index",
           .saves_outputs = {1},
           .forward =
               [is_max](const Args& a) {
                 return is_max ? minmax_dim<true>(a.tensor(0), a[1].to_int(), a[2].to_bool(), "max")
                               : minmax_dim<false>(a.tensor(0), a[1].to_int(), a[2].to_bool(), "min");
               },
           .backward =
               [](BackwardContext& c) {
                 Shape in = c.input_sizes("input");
                 if (in.empty()) return std::vector<Tensor>{c.grad()};
                 int64_t dim = wrap_dim(c.int_arg("dim"), int64_t(in.size()));
                 bool keepdim = c.bool_arg("keepdim");
                 Tensor idx = keepdim ? c.output(1) : c.output(1).unsqueeze(dim);
                 Tensor g = keepdim ? c.grad() : c.grad().unsqueeze(dim);
                 return std::vector<Tensor>{scatter(zeros(in, g.dtype()), dim, idx, g)};
               },
           .dtypes = kNumericTypes,
           .samples = [](DType dt, Generator& g) {
             Tensor x = sample_uniform({3, 4, 5}, dt, g, -100, 100);
             return std::vector<Sample>{{{x, int64_t(1), false}}, {{x, int64_t(-1), true}},
                                        {{sample_uniform({}, dt, g), int64_t(0), false}, "0-d"}};
           }});
  };
  minmax(true);
  minmax(false);

  auto argext = [&r](bool is_max) {
    r.add({.schema_text = is_max ? "argmax(Tensor input, int? dim=None, bool keepdim=False) -> Tensor"
                                 : "argmin(Tensor input, int? dim=None, bool keepdim=False) -> Tensor",
           .family = "reduction",
           .doc = is_max ? "Index of the first maximum (over the flattened input when dim is None)"
                         : "Index of the first minimum (over the flattened input when dim is None)",
           .differentiable = false,
           .forward =
               [is_max](const Args& a) {
                 Tensor x = a.tensor(0);
                 bool keepdim = a[2].to_bool();
                 if (a[1].is_none()) {
                   Tensor flat = x.reshape({-1});
                   auto res = is_max ? minmax_dim<true>(flat, 0, false, "argmax") : minmax_dim<false>(flat, 0, false, "argmin");
                   Tensor idx = res[1];
                   if (keepdim) idx = idx.reshape(Shape(size_t(x.dim()), 1));
                   return std::vector<Tensor>{idx};
                 }
                 auto res = is_max ? minmax_dim<true>(x, a[1].to_int(), keepdim, "argmax")
                                   : minmax_dim<false>(x, a[1].to_int(), keepdim, "argmin");
                 return std::vector<Tensor>{res[1]};
               },
           .dtypes = kNumericTypes,
           .samples = [](DType dt, Generator& g) {
             Tensor x = sample_uniform({3, 4, 5}, dt, g, -100, 100);
             return std::vector<Sample>{{{x, int64_t(1), false}}, {{x, Value(), false}}, {{x, int64_t(2), true}}};
           }});
  };
  argext(true);
  argext(false);

  auto var_forward = [](const Tensor& x, const std::vector<int64_t>& dims, int64_t correction, bool keepdim,
                        bool take_sqrt) {
    return reduce_rows(x, dims, keepdim, x.dtype(), "var", [correction, take_sqrt](auto* row, int64_t K) {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(row)>>;
      double mean_v = 0, ss = 0;
      if constexpr (std::is_same_v<T, float>) {
        float m = K ? kernels::sum_f32(row, K) / float(K) : 0.f;
        mean_v = m;
        ss = kernels::sum_sq_dev_f32(row, K, m);
      } else if constexpr (std::is_same_v<T, double>) {
        mean_v = K ? kernels::sum_f64(row, K) / double(K) : 0.0;
        ss = kernels::sum_sq_dev_f64(row, K, mean_v);
      } else {
        for (int64_t i = 0; i < K; ++i) mean_v += to_d(row[i]);
        mean_v /= double(std::max<int64_t>(K, 1));
        for (int64_t i = 0; i < K; ++i) ss += (to_d(row[i]) - mean_v) * (to_d(row[i]) - mean_v);
      }
      double denom = double(K - correction);
      double v = denom <= 0 ? (ss == 0 && denom == 0 ? std::numeric_limits<double>::quiet_NaN()
                                                      : std::numeric_limits<double>::infinity())
                            : ss / denom;
      if (K == 0 || denom <= 0) v = std::numeric_limits<double>::quiet_NaN();
      return take_sqrt ? std::sqrt(v) : v;
    });
  };
  auto var_prepare = [](Args& a) {
    FOUNDRY_CHECK_AS(TypeError, is_floating(a.tensor(0).dtype()),
                     "std and var only support floating point inputs, got {}", dtype_name(a.tensor(0).dtype()));
  };
  auto var_grad = [](BackwardContext& c, const Tensor& g_var) {
    const Tensor& x = c.input("input");
    auto dims = dims_of(c);
    bool keepdim = c.bool_arg("keepdim");
    int64_t n = 1;
    for (int64_t d : dims) n *= x.size(d);
    Tensor m = mean(x, dims, true);
    return expand_reduced(g_var, x.sizes(), dims, keepdim) * (x - m) * W(2.0 / double(n - c.int_arg("correction")));
  };
  auto var_samples = [](DType dt, Generator& g) {
    Tensor x = sample_uniform({3, 4, 5}, dt, g);
    return std::vector<Sample>{{{x, std::vector<int64_t>{1}, int64_t(1), false}},
                               {{x, std::vector<int64_t>{0, 2}, int64_t(0), true}},
                               {{x, Value(), int64_t(1), false}, "all"},
                               {{x, std::vector<int64_t>{-1}, int64_t(2), false}}};
  };
  r.add({.schema_text = "var(Tensor input, int[]? dim=None, *, int correction=1, bool keepdim=False) -> Tensor",
         .family = "reduction",
         .doc = "Variance with Bessel-style correction (sum of squares / (N - correction)).",
         .saves = {"input"},
         .prepare = var_prepare,
         .forward =
             [var_forward](const Args& a) {
               const Tensor& x = a.tensor(0);
               return std::vector<Tensor>{
                   var_forward(x, reduction_dims(a[1], x.dim(), "var"), a[2].to_int(), a[3].to_bool(), false)};
             },
         .backward = [var_grad](BackwardContext& c) { return std::vector<Tensor>{var_grad(c, c.grad())}; },
         .dtypes = kFloatTypes,
         .samples = var_samples});
  r.add({.schema_text = "std(Tensor input, int[]? dim=None, *, int correction=1, bool keepdim=False) -> Tensor",
         .family = "reduction",
         .doc = "Standard deviation: sqrt(var).",
         .saves = {"input"},
         .saves_outputs = {0},
         .prepare = var_prepare,
         .forward =
             [var_forward](const Args& a) {
               const Tensor& x = a.tensor(0);
               return std::vector<Tensor>{
                   var_forward(x, reduction_dims(a[1], x.dim(), "std"), a[2].to_int(), a[3].to_bool(), true)};
             },
         .backward =
             [var_grad](BackwardContext& c) {
               return std::vector<Tensor>{var_grad(c, c.grad() / (W(2.0) * c.output(0)))};
             },
         .dtypes = kFloatTypes,
         .samples = var_samples});
  r.add({.schema_text =
             "var_mean(Tensor input, int[]? dim=None, *, int correction=1, bool keepdim=False) -> (Tensor, Tensor)",
         .family = "reduction",
         .doc = "(var, mean) in one call.",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               OptDims d = a[1].is_none() ? OptDims() : OptDims(a[1].int_list());
               return std::vector<Tensor>{var(a.tensor(0), d, a[2].to_int(), a[3].to_bool()),
                                          mean(a.tensor(0), d, a[3].to_bool())};
             },
         .dtypes = kFloatTypes,
         .samples = var_samples});
  r.add({.schema_text =
             "std_mean(Tensor input, int[]? dim=None, *, int correction=1, bool keepdim=False) -> (Tensor, Tensor)",
         .family = "reduction",
         .doc = "(std, mean) in one call.",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               OptDims d = a[1].is_none() ? OptDims() : OptDims(a[1].int_list());
               return std::vector<Tensor>{foundry::std(a.tensor(0), d, a[2].to_int(), a[3].to_bool()),
                                          mean(a.tensor(0), d, a[3].to_bool())};
             },
         .dtypes = kFloatTypes,
         .samples = var_samples});

  r.add({.schema_text = "logsumexp(Tensor input, int[] dim, bool keepdim=False) -> Tensor",
         .family = "reduction",
         .doc = "log(sum(exp(x))) computed stably (shifted by the detached max).",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               Tensor x = a.tensor(0);
               if (!is_floating(x.dtype())) x = x.to(default_float_dtype());
               auto dims = reduction_dims(a[1], x.dim(), "logsumexp");
               bool keepdim = a[2].to_bool();
               if (x.numel() == 0) return std::vector<Tensor>{log(sum(exp(x), dims, keepdim))};
               Tensor m = amax(x.detach(), dims, true);
               m = where(isinf(m), zeros({}, x.dtype()), m);
               Tensor out = log(sum(exp(x - m), dims, true)) + m;
               if (!keepdim) out = out.view(kernels::to_rows(x.detach(), dims).reduced_shape);
               return std::vector<Tensor>{out};
             },
         .dtypes = kIntAndFloat,
         .samples = [](DType dt, Generator& g) {
           Tensor x = sample_uniform({3, 4, 5}, dt, g, -5, 5);
           return std::vector<Sample>{{{x, std::vector<int64_t>{1}, false}},
                                      {{x, std::vector<int64_t>{0, 2}, true}},
                                      {{x, std::vector<int64_t>{-1}, false}}};
         }});

  r.add({.schema_text = "norm(Tensor input, float p=2, int[]? dim=None, bool keepdim=False) -> Tensor",
         .family = "reduction",
         .doc = "Vector p-norm over dims (p = 2 over all dims is the Frobenius norm); inf and -inf allowed.",
         .saves = {"input"},
         .saves_outputs = {0},
         .prepare = [](Args& a) {
           FOUNDRY_CHECK_AS(TypeError, is_floating(a.tensor(0).dtype()), "norm: expected a floating input, got {}",
                            dtype_name(a.tensor(0).dtype()));
         },
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               double p = a[1].to_double();
               auto dims = reduction_dims(a[2], x.dim(), "norm");
               return std::vector<Tensor>{reduce_rows(x, dims, a[3].to_bool(), x.dtype(), "norm", [p](auto* row, int64_t K) {
                 double acc = 0;
                 if (std::isinf(p)) {
                   acc = p > 0 ? 0 : std::numeric_limits<double>::infinity();
                   for (int64_t i = 0; i < K; ++i) {
                     double v = std::fabs(to_d(row[i]));
                     if (std::isnan(v)) return v;
                     acc = p > 0 ? std::max(acc, v) : std::min(acc, v);
                   }
                   return acc;
                 }
                 if (p == 0) {
                   for (int64_t i = 0; i < K; ++i) acc += to_d(row[i]) != 0;
                   return acc;
                 }
                 if (p == 1) {
                   for (int64_t i = 0; i < K; ++i) acc += std::fabs(to_d(row[i]));
                   return acc;
                 }
                 if (p == 2) {
                   for (int64_t i = 0; i < K; ++i) acc += to_d(row[i]) * to_d(row[i]);
                   return std::sqrt(acc);
                 }
                 for (int64_t i = 0; i < K; ++i) acc += std::pow(std::fabs(to_d(row[i])), p);
                 return std::pow(acc, 1.0 / p);
               })};
             },
         .backward =
             [](BackwardContext& c) {
               const Tensor& x = c.input("input");
               double p = c.double_arg("p");
               auto dims = dims_of(c);
               bool keepdim = c.bool_arg("keepdim");
               Tensor n = expand_reduced(c.output(0), x.sizes(), dims, keepdim);
               Tensor g = expand_reduced(c.grad(), x.sizes(), dims, keepdim);
               Tensor zero = zeros({}, x.dtype());
               if (p == 0) return std::vector<Tensor>{zeros_like(x)};
               if (p == 1) return std::vector<Tensor>{g * sign(x)};
               if (std::isinf(p)) {
                 Tensor mask = (abs(x) == n).to(x.dtype());
                 Tensor count = sum(mask, dims, true);
                 return std::vector<Tensor>{g * sign(x) * mask / count};
               }
               if (p == 2) return std::vector<Tensor>{where(n == Scalar(0), zero, g * x / n)};
               Tensor ax = abs(x);
               return std::vector<Tensor>{
                   where(n == Scalar(0), zero, g * x * pow(ax, p - 2) / pow(n, p - 1))};
             },
         .dtypes = kFloatTypes,
         .samples = [](DType dt, Generator& g) {
           Tensor x = sample_away_from_zero({3, 4}, dt, g);
           double inf = std::numeric_limits<double>::infinity();
           return std::vector<Sample>{{{x, 2.0, Value(), false}}, {{x, 1.0, std::vector<int64_t>{1}, false}},
                                      {{x, inf, std::vector<int64_t>{0}, true}}, {{x, 3.0, std::vector<int64_t>{1}, false}},
                                      {{x, -inf, std::vector<int64_t>{1}, false}}, {{x, 2.0, std::vector<int64_t>{0, 1}, false}}};
         }});
}

}  // namespace ops
}  // namespace foundry
