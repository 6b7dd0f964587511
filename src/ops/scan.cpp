// Cumulative ops (cumsum, cumprod, cummax, cummin), logical reductions (all, any,
// count_nonzero) and order statistics along a dim (median, mode).
#include <algorithm>
#include <cmath>
#include <map>

#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/reduce.h"
#include "ops/common.h"

namespace foundry {

using kernels::Rows;
using ops::Args;
using ops::BackwardContext;
using ops::OpDef;
using ops::Sample;
using ops::Value;

namespace {

template <typename T>
double as_d(T v) {
  if constexpr (std::is_same_v<T, double>) return v;
  else return double(float(v));
}

// Moves `dim` last and makes rows contiguous; `restore` puts a same-shaped result back.
struct DimRows {
  Tensor data;  // [..., n] contiguous, dim moved last
  int64_t rows = 1, n = 1;
  int64_t dim = 0;
  Shape moved_shape;
  Tensor restore(const Tensor& t) const { return foundry::movedim(t.view(moved_shape), {-1}, {dim}).contiguous(); }
};

DimRows dim_rows(const Tensor& x, int64_t dim, const char* op) {
  DimRows r;
  r.dim = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op);
  Tensor y = x.dim() == 0 ? x.reshape({1}) : foundry::movedim(x, {r.dim}, {-1});
  r.moved_shape = Shape(y.sizes());
  r.data = y.contiguous();
  r.n = y.dim() ? y.size(-1) : 1;
  r.rows = r.n ? y.numel() / r.n : 0;
  if (x.dim() == 0) {
    r.moved_shape = Shape{};
    r.dim = 0;
  }
  return r;
}

Tensor restore_like(const DimRows& r, const Tensor& out, const Tensor& x) {
  if (x.dim() == 0) return out.view({});
  return r.restore(out);
}

// op: 0 sum, 1 prod.
Tensor cum_impl(const Tensor& x, int64_t dim, int op) {
  DimRows r = dim_rows(x, dim, op == 0 ? "cumsum" : "cumprod");
  Tensor out = empty(r.data.sizes(), x.dtype());
  kernels::visit_numeric(x.dtype(), op == 0 ? "cumsum" : "cumprod", [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = std::conditional_t<std::is_integral_v<T>, int64_t, kernels::opmath_t<T>>;
    const T* in = static_cast<const T*>(r.data.data_ptr());
    T* o = static_cast<T*>(out.data_ptr());
    parallel_for(0, r.rows, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(r.n, 1)), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        C acc = op == 0 ? C(0) : C(1);
        for (int64_t i = 0; i < r.n; ++i) {
          C v = C(in[row * r.n + i]);
          if constexpr (std::is_same_v<T, bool>) acc = op == 0 ? acc + v : acc * v;
          else acc = op == 0 ? C(acc + v) : C(acc * v);
          o[row * r.n + i] = T(acc);
        }
      }
    });
  });
  return restore_like(r, out, x);
}

std::vector<Tensor> cumext_impl(const Tensor& x, int64_t dim, bool is_max) {
  DimRows r = dim_rows(x, dim, is_max ? "cummax" : "cummin");
  Tensor vals = empty(r.data.sizes(), x.dtype()), idx = empty(r.data.sizes(), DType::Int64);
  kernels::visit_numeric(x.dtype(), is_max ? "cummax" : "cummin", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(r.data.data_ptr());
    T* vo = static_cast<T*>(vals.data_ptr());
    int64_t* io = idx.data<int64_t>();
    for (int64_t row = 0; row < r.rows; ++row) {
      double best = 0;
      int64_t bi = 0;
      for (int64_t i = 0; i < r.n; ++i) {
        double v = as_d(in[row * r.n + i]);
        // Ties move to the later index; NaN sticks once seen (PyTorch).
        if (i == 0 || std::isnan(v) || (!std::isnan(best) && (is_max ? v >= best : v <= best))) {
          best = v;
          bi = i;
        }
        vo[row * r.n + i] = in[row * r.n + bi];
        io[row * r.n + i] = bi;
      }
    }
  });
  return {restore_like(r, vals, x), restore_like(r, idx, x)};
}

// Scatters a gradient back to the positions named by a same-shaped index tensor along dim.
Tensor scatter_grad(BackwardContext& c, const Tensor& indices, int64_t dim, bool keepdim) {
  Shape in = c.input_sizes("input");
  if (in.empty()) return c.grad().reshape({});
  int64_t d = wrap_dim(dim, int64_t(in.size()));
  Tensor g = keepdim ? c.grad() : c.grad().unsqueeze(d);
  Tensor i = keepdim ? indices : indices.unsqueeze(d);
  return scatter_add(zeros(in, g.dtype()), d, i, g);
}

std::vector<Tensor> order_stat(const Tensor& x, int64_t dim, bool keepdim, bool is_median) {
  const char* op = is_median ? "median" : "mode";
  DimRows r = dim_rows(x, dim, op);
  FOUNDRY_CHECK_AS(IndexError, r.n > 0, "{}(): expected reduction dim {} to have non-zero size", op, dim);
  Tensor vals = empty({r.rows}, x.dtype()), idx = empty({r.rows}, DType::Int64);
  kernels::visit_numeric(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(r.data.data_ptr());
    T* vo = static_cast<T*>(vals.data_ptr());
    int64_t* io = idx.data<int64_t>();
    parallel_for(0, r.rows, 16, [&](int64_t b, int64_t e) {
      std::vector<std::pair<double, int64_t>> items(size_t(r.n));
      for (int64_t row = b; row < e; ++row) {
        const T* p = in + row * r.n;
        for (int64_t i = 0; i < r.n; ++i) items[size_t(i)] = {as_d(p[i]), i};
        if (is_median) {
          auto nan = std::find_if(items.begin(), items.end(), [](const auto& it) { return std::isnan(it.first); });
          int64_t pick;
          if (nan != items.end()) {
            pick = nan->second;  // NaN propagates (first NaN)
          } else {
            size_t k = size_t((r.n - 1) / 2);
            std::nth_element(items.begin(), items.begin() + long(k), items.end(),
                             [](const auto& a, const auto& b2) { return a.first < b2.first; });
            pick = items[k].second;
          }
          vo[row] = p[pick];
          io[row] = pick;
        } else {
          // Most frequent value; ties go to the smallest value; index of its last occurrence.
          std::sort(items.begin(), items.end());
          double best_v = items[0].first;
          int64_t best_count = 0, best_last = 0;
          for (size_t i = 0; i < items.size();) {
            size_t j = i;
            while (j < items.size() && (items[j].first == items[i].first)) ++j;
            int64_t count = int64_t(j - i);
            if (count > best_count) {
              best_count = count;
              best_v = items[i].first;
              best_last = items[j - 1].second;
            }
            i = j;
          }
          (void)best_v;
          vo[row] = p[best_last];
          io[row] = best_last;
        }
      }
    });
  });
  Shape out_shape(r.moved_shape);
  if (!out_shape.empty()) out_shape.pop_back();
  Tensor v = vals.view(out_shape), i = idx.view(out_shape);
  if (keepdim && x.dim() > 0) {
    v = v.unsqueeze(r.dim);
    i = i.unsqueeze(r.dim);
  }
  return {v, i};
}

Tensor logical_reduce(const Tensor& x, const Value& dim_v, bool keepdim, bool is_all) {
  std::vector<int64_t> dims = dim_v.is_none() ? ops::reduction_dims(OptDims(), x.dim(), "all")
                                              : ops::reduction_dims(OptDims(dim_v.to_int()), x.dim(), is_all ? "all" : "any");
  Rows r = kernels::to_rows(x, dims);
  DType out_dt = x.dtype() == DType::UInt8 ? DType::UInt8 : DType::Bool;
  Tensor out = empty(r.keep_shape, out_dt);
  kernels::visit_numeric(x.dtype(), is_all ? "all" : "any", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(r.data.data_ptr());
    for (int64_t m = 0; m < r.M; ++m) {
      bool acc = is_all;
      for (int64_t k = 0; k < r.K; ++k) {
        bool nz = as_d(in[m * r.K + k]) != 0;
        if constexpr (std::is_integral_v<T>) nz = in[m * r.K + k] != 0;
        if (is_all ? !nz : nz) {
          acc = !is_all;
          break;
        }
      }
      if (out_dt == DType::UInt8) out.data<uint8_t>()[m] = acc;
      else out.data<bool>()[m] = acc;
    }
  });
  return keepdim ? out : out.view(r.reduced_shape);
}

}  // namespace

namespace ops {

void register_scan_ops(Registry& r) {
  auto cum_prepare = [](Args& a) {
    Tensor& x = a[0].tensor();
    if (!a[2].is_none()) x = x.to(a[2].dtype());
    else if (!is_floating(x.dtype())) x = x.to(DType::Int64);
  };
  auto cum_samples = [](DType dt, Generator& g) {
    Tensor x = sample_uniform({3, 4}, dt, g, 0.5, 1.5);
    return std::vector<Sample>{{{x, int64_t(1), Value()}}, {{x, int64_t(0), Value()}},
                               {{sample_uniform({2, 3, 4}, dt, g, 0.5, 1.5), int64_t(-2), Value()}},
                               {{sample_uniform({}, dt, g, 0.5, 1.5), int64_t(0), Value()}, "0-d"}};
  };
  r.add({.schema_text = "cumsum(Tensor input, int dim, *, ScalarType? dtype=None) -> Tensor",
         .family = "reduction",
         .doc = "Running sum along dim (integers accumulate in int64).",
         .prepare = cum_prepare,
         .forward = [](const Args& a) { return std::vector<Tensor>{cum_impl(a.tensor(0), a[1].to_int(), 0)}; },
         .backward =
             [](BackwardContext& c) {
               if (c.input_sizes("input").empty()) return std::vector<Tensor>{c.grad()};
               int64_t d = c.int_arg("dim");
               return std::vector<Tensor>{flip(cumsum(flip(c.grad(), {d}), d), {d})};
             },
         .dtypes = kNumericTypes,
         .samples = cum_samples});
  r.add({.schema_text = "cumprod(Tensor input, int dim, *, ScalarType? dtype=None) -> Tensor",
         .family = "reduction",
         .doc = "Running product along dim (integers accumulate in int64). With zeros in the input the gradient "
                "is the exact quadratic form (products with each x_i left out), differentiable again.",
         .saves = {"input"},
         .saves_outputs = {0},
         .prepare = cum_prepare,
         .forward = [](const Args& a) { return std::vector<Tensor>{cum_impl(a.tensor(0), a[1].to_int(), 1)}; },
         .backward =
             [](BackwardContext& c) {
               const Tensor& x = c.input("input");
               if (x.dim() == 0) return std::vector<Tensor>{c.grad()};
               int64_t d = wrap_dim(c.int_arg("dim"), x.dim());
               Tensor y = c.output(0);
               if (!any(x == Scalar(0)).item<bool>()) {
                 // sum_{k >= i} g_k y_k / x_i: a reverse cumulative sum, differentiable again.
                 Tensor gy = c.grad() * y;
                 return std::vector<Tensor>{flip(cumsum(flip(gy, {d}), d), {d}) / x};
               }
               // With zeros: d y_k / d x_i = prod_{j <= k, j != i} x_j. For every i at once, the
               // running products of x with x_i replaced by 1 (an [n, n] matrix per row), masked to
               // k >= i and weighted by g: quadratic in the dim size, built from differentiable ops,
               // so it is differentiable again (its own backward meets the same case one order up).
               Tensor xm = movedim(x, {d}, {-1}), gm = movedim(c.grad(), {d}, {-1});
               const int64_t n = xm.size(-1);
               Tensor diagonal = eye(n, std::nullopt, DType::Bool);
               Shape square(xm.sizes());
               square.push_back(n);  // [..., i, k]
               Tensor replaced = where(diagonal, ones({}, x.dtype()), xm.unsqueeze(-2).expand(IntList(square)));
               Tensor upper = triu(ones({n, n}, x.dtype()));  // k >= i
               Tensor gx = sum(gm.unsqueeze(-2) * cumprod(replaced, -1) * upper, {-1});
               return std::vector<Tensor>{movedim(gx, {-1}, {d})};
             },
         .dtypes = kNumericTypes,
         .samples = [cum_samples](DType dt, Generator& g) {
           auto s = cum_samples(dt, g);
           if (is_floating(dt)) {
             Tensor z = tensor<double>({0.5, 0.0, 1.5, 2.0, 0.0, 1.2}, {2, 3}).to(dt);
             s.push_back({{z, int64_t(1), Value()}, "zeros"});
           }
           return s;
         }});
  auto cumext = [&r](bool is_max) {
    r.add({.schema_text = is_max ? "cummax(Tensor input, int dim) -> (Tensor values, Tensor indices)"
                                 : "cummin(Tensor input, int dim) -> (Tensor values, Tensor indices)",
           .family = "reduction",
           .doc = is_max ? "Running maximum and its index (ties: the later index)"
                         : "Running minimum and its index (ties: the later index)",
           .saves_outputs = {1},
           .forward = [is_max](const Args& a) { return cumext_impl(a.tensor(0), a[1].to_int(), is_max); },
           .backward =
               [](BackwardContext& c) {
                 return std::vector<Tensor>{scatter_grad(c, c.output(1), c.int_arg("dim"), true)};
               },
           .dtypes = kNumericTypes,
           .samples = [](DType dt, Generator& g) {
             Tensor x = sample_uniform({3, 5}, dt, g, -50, 50);
             return std::vector<Sample>{{{x, int64_t(1)}}, {{x, int64_t(0)}}};
           }});
  };
  cumext(true);
  cumext(false);

  auto logical = [&r](bool is_all) {
    r.add({.schema_text = is_all ? "all(Tensor input, int? dim=None, bool keepdim=False) -> Tensor"
                                 : "any(Tensor input, int? dim=None, bool keepdim=False) -> Tensor",
           .family = "reduction",
           .doc = is_all ? "True when every element is nonzero (uint8 in, uint8 out)"
                         : "True when some element is nonzero (uint8 in, uint8 out)",
           .differentiable = false,
           .forward = [is_all](const Args& a) {
             return std::vector<Tensor>{logical_reduce(a.tensor(0), a[1], a[2].to_bool(), is_all)};
           },
           .dtypes = kNumericTypes,
           .samples = [](DType dt, Generator& g) {
             Tensor x = sample_uniform({3, 4}, dt, g, -1, 1).to(DType::Int64).to(dt);
             return std::vector<Sample>{{{x, Value(), false}}, {{x, int64_t(1), false}}, {{x, int64_t(0), true}},
                                        {{zeros({0}, dt), Value(), false}, "empty"}};
           }});
  };
  logical(true);
  logical(false);

  r.add({.schema_text = "count_nonzero(Tensor input, int[]? dim=None) -> Tensor",
         .family = "reduction",
         .doc = "Number of nonzero elements over dims (int64).",
         .differentiable = false,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               return std::vector<Tensor>{sum(ne(x, zeros({}, x.dtype())), a[1].is_none() ? OptDims() : OptDims(a[1].int_list()))};
             },
         .dtypes = kNumericTypes,
         .samples = [](DType dt, Generator& g) {
           Tensor x = sample_uniform({3, 4}, dt, g, -1, 1).to(DType::Int64).to(dt);
           return std::vector<Sample>{{{x, Value()}}, {{x, std::vector<int64_t>{1}}}, {{x, std::vector<int64_t>{0, 1}}}};
         }});

  auto ostat = [&r](bool is_median) {
    r.add({.schema_text = is_median ? "median(Tensor input, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)"
                                    : "mode(Tensor input, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)",
           .family = "reduction",
           .doc = is_median ? "Lower median along dim and its index (NaN propagates)"
                            : "Most frequent value along dim (ties: the smallest) and the index of its last occurrence",
           .saves_outputs = {1},
           .forward = [is_median](const Args& a) {
             return order_stat(a.tensor(0), a[1].to_int(), a[2].to_bool(), is_median);
           },
           .backward =
               [](BackwardContext& c) {
                 return std::vector<Tensor>{scatter_grad(c, c.output(1), c.int_arg("dim"), c.bool_arg("keepdim"))};
               },
           .dtypes = kNumericTypes,
           .samples = [is_median](DType dt, Generator& g) {
             if (is_median) {
               // Distinct values so the chosen index is unambiguous.
               Tensor x = randperm(12, DType::Int64, &g).to(dt).reshape({3, 4});
               if (is_floating(dt)) x = x * Scalar(0.25) - Scalar(1.0);
               return std::vector<Sample>{{{x, int64_t(1), false}}, {{x, int64_t(0), true}}};
             }
             // Ties are the point of mode: finite differences break them, so only parity checks grads.
             Tensor x = tensor<int64_t>({1, 3, 3, 2, 2, 5, 1, 1, 5, 0, 4, 4, 4, 0, 0}, {3, 5}).to(dt);
             // Distinct values: the mode is the smallest value, which finite differences can check.
             Tensor d = randperm(12, DType::Int64, &g).to(dt).reshape({3, 4});
             return std::vector<Sample>{{{x, int64_t(1), false}, "ties", false}, {{x, int64_t(-1), true}, "ties", false},
                                        {{d, int64_t(1), false}, "distinct"}};
           }});
  };
  ostat(true);
  ostat(false);
}

}  // namespace ops



}  // namespace foundry
