// Sorting and searching: sort/argsort/topk (NaN sorts as the largest value, as PyTorch),
// unique, searchsorted/bucketize.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/dtype_dispatch.h"
#include "ops/common.h"

namespace foundry {

using ops::Args;
using ops::BackwardContext;
using ops::OpDef;
using ops::Sample;
using ops::Value;

namespace {

template <typename T>
double key_of(T v) {
  if constexpr (std::is_same_v<T, double>) return v;
  else return double(float(v));
}

// a before b in ascending order, NaN last.
inline bool less_nan_last(double a, double b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return a < b;
}

// Sorts (or partially sorts the first k of) each row along dim; returns values and indices.
std::vector<Tensor> sort_rows(const Tensor& x, int64_t dim, bool descending, int64_t k, bool sorted_out) {
  int64_t nd = std::max<int64_t>(x.dim(), 1);
  dim = wrap_dim(dim, nd, "sort");
  Tensor xm = x.dim() == 0 ? x.reshape({1}) : foundry::movedim(x, {dim}, {-1});
  Shape moved(xm.sizes());
  Tensor data = xm.contiguous();
  int64_t n = moved.back();
  int64_t rows = n ? data.numel() / n : 0;
  if (k < 0) k = n;
  Shape out_moved = moved;
  out_moved.back() = k;
  Tensor vals = empty(out_moved, x.dtype()), idx = empty(out_moved, DType::Int64);
  kernels::visit_numeric(x.dtype(), "sort", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* in = static_cast<const T*>(data.data_ptr());
    T* vo = static_cast<T*>(vals.data_ptr());
    int64_t* io = idx.data<int64_t>();
    parallel_for(0, rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
      std::vector<int64_t> order(static_cast<size_t>(n));
      for (int64_t row = b; row < e; ++row) {
        const T* p = in + row * n;
        std::iota(order.begin(), order.end(), 0);
        auto cmp = [&](int64_t i, int64_t j) {
          double a = key_of(p[i]), c = key_of(p[j]);
          return descending ? less_nan_last(c, a) : less_nan_last(a, c);
        };
        if (k == n || sorted_out) {
          if (k == n) std::stable_sort(order.begin(), order.end(), cmp);
          else std::partial_sort(order.begin(), order.begin() + long(k), order.end(), cmp);
        } else {
          std::nth_element(order.begin(), order.begin() + long(k), order.end(), cmp);
        }
        for (int64_t i = 0; i < k; ++i) {
          vo[row * k + i] = p[order[size_t(i)]];
          io[row * k + i] = order[size_t(i)];
        }
      }
    });
  });
  if (x.dim() == 0) return {vals.view({}), idx.view({})};
  return {foundry::movedim(vals, {-1}, {dim}).contiguous(), foundry::movedim(idx, {-1}, {dim}).contiguous()};
}

Tensor gather_grad(BackwardContext& c, const Tensor& indices) {
  Shape in = c.input_sizes("input");
  if (in.empty()) return c.grad();
  int64_t d = wrap_dim(c.int_arg("dim"), int64_t(in.size()));
  return scatter_add(zeros(in, c.grad().dtype()), d, indices, c.grad());
}

std::vector<Tensor> unique_impl(const Tensor& x, bool return_inverse, bool return_counts, const Value& dim_v) {
  if (dim_v.is_none()) {
    Tensor flat = x.reshape({-1}).contiguous();
    int64_t n = flat.numel();
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::vector<double> keys(static_cast<size_t>(n));
    kernels::visit_numeric(x.dtype(), "unique", [&](auto tag) {
      using T = typename decltype(tag)::type;
      const T* p = static_cast<const T*>(flat.data_ptr());
      for (int64_t i = 0; i < n; ++i) keys[size_t(i)] = key_of(p[i]);
    });
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return less_nan_last(keys[size_t(a)], keys[size_t(b)]); });
    std::vector<int64_t> firsts, counts;
    std::vector<int64_t> inverse(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      double k = keys[size_t(order[size_t(i)])];
      bool same = i > 0 && (k == keys[size_t(order[size_t(i - 1)])]);
      if (!same) {
        firsts.push_back(order[size_t(i)]);
        counts.push_back(0);
      }
      counts.back()++;
      inverse[size_t(order[size_t(i)])] = int64_t(firsts.size()) - 1;
    }
    Tensor vals = index_select(flat, 0, tensor<int64_t>(firsts.empty() ? std::vector<int64_t>{} : firsts, {int64_t(firsts.size())}));
    Tensor inv = return_inverse ? tensor<int64_t>(inverse, {n}).reshape(x.sizes()) : empty({0}, DType::Int64);
    Tensor cnt = return_counts ? tensor<int64_t>(counts, {int64_t(counts.size())}) : empty({0}, DType::Int64);
    return {vals, inv, cnt};
  }
  // Unique slices along dim, in lexicographic order.
  int64_t dim = wrap_dim(dim_v.to_int(), x.dim(), "unique");
  Tensor m = foundry::movedim(x, {dim}, {0}).contiguous();
  int64_t n = m.size(0);
  Tensor rows = m.reshape({n, -1}).to(DType::Float64).contiguous();
  int64_t w = rows.size(1);
  const double* p = rows.data<double>();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  auto row_less = [&](int64_t a, int64_t b) {
    return std::lexicographical_compare(p + a * w, p + a * w + w, p + b * w, p + b * w + w);
  };
  std::stable_sort(order.begin(), order.end(), row_less);
  std::vector<int64_t> firsts, counts;
  std::vector<int64_t> inverse(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    bool same = i > 0 && std::equal(p + order[size_t(i)] * w, p + order[size_t(i)] * w + w, p + order[size_t(i - 1)] * w);
    if (!same) {
      firsts.push_back(order[size_t(i)]);
      counts.push_back(0);
    }
    counts.back()++;
    inverse[size_t(order[size_t(i)])] = int64_t(firsts.size()) - 1;
  }
  Tensor vals = index_select(x, dim, tensor<int64_t>(firsts, {int64_t(firsts.size())}));
  Tensor inv = return_inverse ? tensor<int64_t>(inverse, {n}) : empty({0}, DType::Int64);
  Tensor cnt = return_counts ? tensor<int64_t>(counts, {int64_t(counts.size())}) : empty({0}, DType::Int64);
  return {vals, inv, cnt};
}

Tensor search_impl(const Tensor& seq, const Tensor& input, bool out_int32, bool right, const char* op) {
  FOUNDRY_CHECK_AS(ValueError, seq.dim() >= 1, "{}: boundaries tensor should be at least 1 dimension", op);
  bool one_d = seq.dim() == 1;
  if (!one_d) {
    FOUNDRY_CHECK_AS(ValueError, seq.dim() == input.dim(),
                     "{}: boundaries tensor should be 1 dimension or the first N-1 dimensions of boundaries tensor and "
                     "input value tensor must match, but we got boundaries tensor {} and input value tensor {}",
                     op, shape_str(seq.sizes()), shape_str(input.sizes()));
    for (int64_t d = 0; d + 1 < seq.dim(); ++d)
      FOUNDRY_CHECK_AS(ValueError, seq.size(d) == input.size(d), "{}: leading dims of boundaries {} and input {} must match",
                       op, shape_str(seq.sizes()), shape_str(input.sizes()));
  }
  DType common = promote_types(seq.dtype(), input.dtype());
  Tensor s = seq.to(common).to(DType::Float64).contiguous();
  Tensor in = input.to(common).to(DType::Float64).contiguous();
  int64_t n = s.size(-1);
  int64_t inner = input.dim() ? input.size(-1) : 1;
  Tensor out = empty(input.sizes(), DType::Int64);
  const double* sp = s.data<double>();
  const double* ip = in.data<double>();
  int64_t* op_ = out.data<int64_t>();
  for (int64_t i = 0; i < in.numel(); ++i) {
    const double* row = one_d ? sp : sp + (i / inner) * n;
    double v = ip[i];
    const double* pos = right ? std::upper_bound(row, row + n, v, less_nan_last)
                              : std::lower_bound(row, row + n, v, less_nan_last);
    op_[i] = pos - row;
  }
  return out_int32 ? out.to(DType::Int32) : out;
}

}  // namespace

std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  auto r = ops::call(FOUNDRY_OP("topk"), {x, k, dim, largest, sorted});
  return {r[0], r[1]};
}
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending, bool stable) {
  auto r = ops::call(FOUNDRY_OP("sort"), {x, dim, descending, stable});
  return {r[0], r[1]};
}
Tensor argsort(const Tensor& x, int64_t dim, bool descending) {
  return ops::call1(FOUNDRY_OP("argsort"), {x, dim, descending});
}
std::tuple<Tensor, Tensor, Tensor> unique(const Tensor& x, bool sorted, bool return_inverse, bool return_counts,
                                          OptInt dim) {
  auto r = ops::call(FOUNDRY_OP("unique"), {x, sorted, return_inverse, return_counts, dim});
  return {r[0], r[1], r[2]};
}
Tensor searchsorted(const Tensor& s, const Tensor& input, bool out_int32, bool right) {
  return ops::call1(FOUNDRY_OP("searchsorted"), {s, input, out_int32, right});
}
Tensor bucketize(const Tensor& input, const Tensor& b, bool out_int32, bool right) {
  return ops::call1(FOUNDRY_OP("bucketize"), {input, b, out_int32, right});
}

namespace ops {

void register_sort_ops(Registry& r) {
  auto distinct_values = [](IntList shape, DType dt, Generator& g) {
    Tensor x = randperm(numel_of(shape), DType::Int64, &g).reshape(shape);
    if (is_floating(dt)) x = x.to(DType::Float64) * Scalar(0.5) - Scalar(2.0);
    return x.to(dt);
  };
  r.add({.schema_text = "sort(Tensor input, int dim=-1, bool descending=False, *, bool stable=False) -> (Tensor values, Tensor indices)",
         .family = "sort",
         .doc = "Sorted values and their indices along dim (always stable; NaN sorts as the largest).",
         .saves_outputs = {1},
         .forward = [](const Args& a) { return sort_rows(a.tensor(0), a[1].to_int(), a[2].to_bool(), -1, true); },
         .backward = [](BackwardContext& c) { return std::vector<Tensor>{gather_grad(c, c.output(1))}; },
         .dtypes = kNumericTypes,
         .samples =
             [distinct_values](DType dt, Generator& g) {
               if (dt == DType::Bool) return std::vector<Sample>{};
               Tensor x = distinct_values({3, 5}, dt, g);
               return std::vector<Sample>{{{x, int64_t(-1), false, false}}, {{x, int64_t(0), true, false}},
                                          {{distinct_values({4}, dt, g), int64_t(0), false, true}}};
             }});
  r.add({.schema_text = "argsort(Tensor input, int dim=-1, bool descending=False) -> Tensor",
         .family = "sort",
         .doc = "Indices that sort input along dim (stable).",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& a) {
               return std::vector<Tensor>{std::get<1>(sort(a.tensor(0), a[1].to_int(), a[2].to_bool(), true))};
             },
         .dtypes = kNumericTypes,
         .samples = [distinct_values](DType dt, Generator& g) {
           if (dt == DType::Bool) return std::vector<Sample>{};
           Tensor x = distinct_values({3, 5}, dt, g);
           return std::vector<Sample>{{{x, int64_t(-1), false}}, {{x, int64_t(0), true}}};
         }});
  r.add({.schema_text = "topk(Tensor input, int k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)",
         .family = "sort",
         .doc = "The k largest (or smallest) values along dim and their indices.",
         .saves_outputs = {1},
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               int64_t k = a[1].to_int();
               int64_t n = x.dim() ? x.size(a[2].to_int()) : 1;
               FOUNDRY_CHECK_AS(IndexError, k >= 0 && k <= n, "topk: selected index k ({}) out of range (dim size {})", k, n);
               return sort_rows(x, a[2].to_int(), a[3].to_bool(), k, a[4].to_bool());
             },
         .backward = [](BackwardContext& c) { return std::vector<Tensor>{gather_grad(c, c.output(1))}; },
         .dtypes = kNumericTypes,
         .samples = [distinct_values](DType dt, Generator& g) {
           if (dt == DType::Bool) return std::vector<Sample>{};
           Tensor x = distinct_values({3, 6}, dt, g);
           return std::vector<Sample>{{{x, int64_t(2), int64_t(-1), true, true}}, {{x, int64_t(3), int64_t(1), false, true}},
                                      {{x, int64_t(2), int64_t(0), true, true}}};
         }});
  r.add({.schema_text = "unique(Tensor input, bool sorted=True, bool return_inverse=False, bool return_counts=False, int? dim=None) -> (Tensor, Tensor, Tensor)",
         .family = "sort",
         .doc = "Sorted unique values (or slices along dim), inverse indices and counts (empty when not requested).",
         .differentiable = false,
         .forward = [](const Args& a) { return unique_impl(a.tensor(0), a[2].to_bool(), a[3].to_bool(), a[4]); },
         .dtypes = kNumericTypes,
         .samples = [](DType dt, Generator& g) {
           Tensor x = sample_uniform({8}, dt, g, -2, 2).to(DType::Int64).to(dt);
           Tensor m = tensor<int64_t>({1, 2, 1, 2, 0, 5, 0, 5, 3, 3}, {5, 2}).to(dt);
           return std::vector<Sample>{{{x, true, true, true, Value()}}, {{x, true, false, false, Value()}},
                                      {{m, true, true, true, int64_t(0)}, "dim"}};
         },
         .ref = "unique"});
  r.add({.schema_text = "searchsorted(Tensor sorted_sequence, Tensor input, *, bool out_int32=False, bool right=False) -> Tensor",
         .family = "sort",
         .doc = "Insertion indices of input into the sorted innermost dim of sorted_sequence.",
         .differentiable = false,
         .forward = [](const Args& a) {
           return std::vector<Tensor>{search_impl(a.tensor(0), a.tensor(1), a[2].to_bool(), a[3].to_bool(), "searchsorted")};
         },
         .dtypes = kIntAndFloat,
         .samples = [](DType dt, Generator& g) {
           Tensor s = tensor<int64_t>({1, 3, 5, 7, 9}, {5}).to(dt);
           Tensor s2 = tensor<int64_t>({1, 3, 5, 2, 4, 6}, {2, 3}).to(dt);
           Tensor v = sample_uniform({2, 3}, dt, g, 0, 10);
           return std::vector<Sample>{{{s, v, false, false}}, {{s, v, false, true}}, {{s2, v, true, false}},
                                      {{s, tensor<int64_t>({3, 6, 9}, {3}).to(dt), false, true}, "exact hits"}};
         }});
  r.add({.schema_text = "bucketize(Tensor input, Tensor boundaries, *, bool out_int32=False, bool right=False) -> Tensor",
         .family = "sort",
         .doc = "Bucket index of each input value given sorted 1-D boundaries.",
         .differentiable = false,
         .forward = [](const Args& a) {
           FOUNDRY_CHECK_AS(ValueError, a.tensor(1).dim() == 1, "bucketize: boundaries tensor must be 1 dimension, but got dim({})",
                            a.tensor(1).dim());
           return std::vector<Tensor>{search_impl(a.tensor(1), a.tensor(0), a[2].to_bool(), a[3].to_bool(), "bucketize")};
         },
         .dtypes = kIntAndFloat,
         .samples = [](DType dt, Generator& g) {
           Tensor b = tensor<int64_t>({1, 3, 5, 7, 9}, {5}).to(dt);
           Tensor v = sample_uniform({2, 3}, dt, g, 0, 10);
           return std::vector<Sample>{{{v, b, false, false}}, {{v, b, true, true}},
                                      {{tensor<int64_t>({3, 6, 9}, {3}).to(dt), b, false, false}, "exact hits"}};
         }});
}

}  // namespace ops
}  // namespace foundry
