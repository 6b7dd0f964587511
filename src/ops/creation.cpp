// Creation ops: constants, ranges, identity, triangles.
#include <cmath>

#include "kernels/cpu/dtype_dispatch.h"
#include "ops/common.h"

namespace foundry {

using ops::BackwardContext;
using ops::OpDef;
using ops::Sample;

namespace {

DType opt_dtype(const ops::Value& v, DType fallback) { return v.is_none() ? fallback : v.dtype(); }

Tensor filled(IntList size, const Scalar& value, DType dt) {
  Tensor out = empty(size, dt);
  if (out.numel() == 0) return out;
  kernels::visit_all(dt, "full", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v;
    if constexpr (std::is_same_v<T, bool>) v = value.to_bool();
    else if constexpr (std::is_integral_v<T>) v = T(value.is_float() ? int64_t(value.to_double()) : value.to_int());
    else if constexpr (std::is_same_v<T, double>) v = value.to_double();
    else v = T(float(value.to_double()));
    T* p = static_cast<T*>(out.data_ptr());
    int64_t n = out.numel();
    parallel_for(0, n, kGrainSize, [&](int64_t b, int64_t e) { std::fill(p + b, p + e, v); });
  });
  return out;
}

// Writes f(i) (a double) converted to dt for i in [0, n).
template <typename F>
Tensor from_index(int64_t n, DType dt, F f) {
  Tensor out = empty({n}, dt);
  kernels::visit_numeric(dt, "arange", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* p = static_cast<T*>(out.data_ptr());
    for (int64_t i = 0; i < n; ++i) {
      double v = f(i);
      if constexpr (std::is_same_v<T, bool>) p[i] = v != 0;
      else if constexpr (std::is_integral_v<T>) p[i] = T(int64_t(v));
      else if constexpr (std::is_same_v<T, double>) p[i] = v;
      else p[i] = T(float(v));
    }
  });
  return out;
}

}  // namespace

Tensor zeros(IntList size, TensorOptions o) {
  Tensor t = ops::call1(FOUNDRY_OP("zeros"), {size, o.dtype});
  if (o.requires_grad) t.requires_grad_();
  return t;
}
Tensor ones(IntList size, TensorOptions o) {
  Tensor t = ops::call1(FOUNDRY_OP("ones"), {size, o.dtype});
  if (o.requires_grad) t.requires_grad_();
  return t;
}
Tensor full(IntList size, const Scalar& v, TensorOptions o) {
  Tensor t = ops::call1(FOUNDRY_OP("full"), {size, v, o.dtype});
  if (o.requires_grad) t.requires_grad_();
  return t;
}
Tensor zeros_like(const Tensor& x, OptDType dt) { return ops::call1(FOUNDRY_OP("zeros_like"), {x, dt}); }
Tensor ones_like(const Tensor& x, OptDType dt) { return ops::call1(FOUNDRY_OP("ones_like"), {x, dt}); }
Tensor full_like(const Tensor& x, const Scalar& v, OptDType dt) {
  return ops::call1(FOUNDRY_OP("full_like"), {x, v, dt});
}
Tensor empty_like(const Tensor& x, OptDType dt) { return ops::call1(FOUNDRY_OP("empty_like"), {x, dt}); }
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, OptDType dt) {
  return ops::call1(FOUNDRY_OP("arange"), {start, end, step, dt});
}
Tensor arange(const Scalar& end, OptDType dt) { return arange(0, end, 1, dt); }
Tensor linspace(const Scalar& start, const Scalar& end, int64_t steps, OptDType dt) {
  return ops::call1(FOUNDRY_OP("linspace"), {start, end, steps, dt});
}
Tensor eye(int64_t n, OptInt m, OptDType dt) { return ops::call1(FOUNDRY_OP("eye"), {n, m, dt}); }
Tensor scalar_tensor(const Scalar& v, OptDType dt) { return filled({}, v, dt.value_or(v.dtype())); }
Tensor tril(const Tensor& x, int64_t d) { return ops::call1(FOUNDRY_OP("tril"), {x, d}); }
Tensor triu(const Tensor& x, int64_t d) { return ops::call1(FOUNDRY_OP("triu"), {x, d}); }

Tensor wrap_scalar(const Scalar& s) {
  // Python floats are kept in double precision (as PyTorch's wrapped numbers); promotion still
  // treats them as the default float dtype.
  Tensor t = filled({}, s, s.is_float() ? DType::Float64 : s.dtype());
  t.impl()->wrapped_number = true;
  return t;
}

template <typename T>
Tensor tensor(const std::vector<T>& values, IntList shape) {
  FOUNDRY_CHECK_AS(ValueError, int64_t(values.size()) == numel_of(shape), "tensor: {} values for shape {}",
                   values.size(), shape_str(shape));
  Tensor out = empty(shape, dtype_of<T>);
  std::copy(values.begin(), values.end(), static_cast<T*>(out.data_ptr()));
  return out;
}
template Tensor tensor<float>(const std::vector<float>&, IntList);
template Tensor tensor<double>(const std::vector<double>&, IntList);
template Tensor tensor<int64_t>(const std::vector<int64_t>&, IntList);
template Tensor tensor<int32_t>(const std::vector<int32_t>&, IntList);
template Tensor tensor<uint8_t>(const std::vector<uint8_t>&, IntList);
template Tensor tensor<int8_t>(const std::vector<int8_t>&, IntList);
template Tensor tensor<int16_t>(const std::vector<int16_t>&, IntList);
template Tensor tensor<Half>(const std::vector<Half>&, IntList);
template Tensor tensor<BFloat16>(const std::vector<BFloat16>&, IntList);


namespace ops {

void register_creation_ops(Registry& r) {
  auto size_samples = [](DType dt, Generator&) {
    return std::vector<Sample>{{{std::vector<int64_t>{2, 3}, dt}}, {{std::vector<int64_t>{}, dt}, "0-d"},
                               {{std::vector<int64_t>{0, 4}, dt}, "empty"}};
  };
  r.add({.schema_text = "zeros(int[] size, *, ScalarType? dtype=None) -> Tensor",
         .family = "creation",
         .doc = "A tensor of zeros (default float dtype unless given).",
         .differentiable = false,
         .forward = [](const Args& a) {
           return std::vector<Tensor>{filled(a[0].int_list(), 0, opt_dtype(a[1], default_float_dtype()))};
         },
         .dtypes = kAllTypes,
         .samples = size_samples});
  r.add({.schema_text = "ones(int[] size, *, ScalarType? dtype=None) -> Tensor",
         .family = "creation",
         .doc = "A tensor of ones.",
         .differentiable = false,
         .forward = [](const Args& a) {
           return std::vector<Tensor>{filled(a[0].int_list(), 1, opt_dtype(a[1], default_float_dtype()))};
         },
         .dtypes = kAllTypes,
         .samples = size_samples});
  r.add({.schema_text = "full(int[] size, Scalar fill_value, *, ScalarType? dtype=None) -> Tensor",
         .family = "creation",
         .doc = "A tensor filled with one value; dtype defaults to the value's (bool, int64 or float).",
         .differentiable = false,
         .forward =
             [](const Args& a) {
               Scalar v = a[1].scalar();
               return std::vector<Tensor>{filled(a[0].int_list(), v, opt_dtype(a[2], v.dtype()))};
             },
         .dtypes = kNumericTypes,
         .samples = [](DType dt, Generator&) {
           return std::vector<Sample>{{{std::vector<int64_t>{2, 3}, Scalar(3), dt}},
                                      {{std::vector<int64_t>{4}, Scalar(-1.5), Value()}, "dtype from value"},
                                      {{std::vector<int64_t>{2}, Scalar(7), Value()}, "int value"}};
         }});
  r.add({.schema_text = "empty(int[] size, *, ScalarType? dtype=None) -> Tensor",
         .family = "creation",
         .doc = "An uninitialised tensor (values unspecified; only shape and dtype are compared in tests).",
         .differentiable = false,
         .forward = [](const Args& a) {
           return std::vector<Tensor>{empty(a[0].int_list(), opt_dtype(a[1], default_float_dtype()))};
         },
         .dtypes = kAllTypes,
         .samples = size_samples,
         .random = true});
  r.add({.schema_text = "empty_like(Tensor input, *, ScalarType? dtype=None) -> Tensor",
         .family = "creation",
         .doc = "An uninitialised tensor with the input's shape (and dtype unless given).",
         .differentiable = false,
         .forward = [](const Args& a) {
           const Tensor& x = a.tensor(0);
           return std::vector<Tensor>{empty(x.sizes(), opt_dtype(a[1], x.dtype()))};
         },
         .dtypes = kAllTypes,
         .samples = [](DType dt, Generator& g) {
           return std::vector<Sample>{{{sample_uniform({2, 3}, dt, g), Value()}}, {{sample_uniform({4}, dt, g), DType::Int32}}};
         },
         .random = true});
  auto like_samples = [](DType dt, Generator& g) {
    return std::vector<Sample>{{{sample_uniform({2, 3}, dt, g), Value()}}, {{sample_uniform({4}, dt, g), DType::Int32}}};
  };
  r.add({.schema_text = "zeros_like(Tensor input, *, ScalarType? dtype=None) -> Tensor",
         .family = "creation",
         .doc = "Zeros with the input's shape (and dtype unless given).",
         .differentiable = false,
         .forward = [](const Args& a) {
           const Tensor& x = a.tensor(0);
           return std::vector<Tensor>{filled(x.sizes(), 0, opt_dtype(a[1], x.dtype()))};
         },
         .dtypes = kAllTypes,
         .samples = like_samples});
  r.add({.schema_text = "ones_like(Tensor input, *, ScalarType? dtype=None) -> Tensor",
         .family = "creation",
         .doc = "Ones with the input's shape.",
         .differentiable = false,
         .forward = [](const Args& a) {
           const Tensor& x = a.tensor(0);
           return std::vector<Tensor>{filled(x.sizes(), 1, opt_dtype(a[1], x.dtype()))};
         },
         .dtypes = kAllTypes,
         .samples = like_samples});
  r.add({.schema_text = "full_like(Tensor input, Scalar fill_value, *, ScalarType? dtype=None) -> Tensor",
         .family = "creation",
         .doc = "A value with the input's shape.",
         .differentiable = false,
         .forward = [](const Args& a) {
           const Tensor& x = a.tensor(0);
           return std::vector<Tensor>{filled(x.sizes(), a[1].scalar(), opt_dtype(a[2], x.dtype()))};
         },
         .dtypes = kNumericTypes,
         .samples = [](DType dt, Generator& g) {
           return std::vector<Sample>{{{sample_uniform({2, 3}, dt, g), Scalar(2), Value()}}};
         }});
  r.add({.schema_text = "arange(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None) -> Tensor",
         .family = "creation",
         .doc = "start, start + step, ... up to end (exclusive); int64 for integer arguments, else the default float.",
         .differentiable = false,
         .forward =
             [](const Args& a) {
               Scalar s = a[0].scalar(), e = a[1].scalar(), st = a[2].scalar();
               bool any_float = s.is_float() || e.is_float() || st.is_float();
               DType dt = opt_dtype(a[3], any_float ? default_float_dtype() : DType::Int64);
               double start = s.to_double(), end = e.to_double(), step = st.to_double();
               FOUNDRY_CHECK_AS(ValueError, step != 0, "arange: step must be nonzero");
               FOUNDRY_CHECK_AS(ValueError, std::isfinite(start) && std::isfinite(end),
                                "arange: unsupported range: {} -> {}", start, end);
               FOUNDRY_CHECK_AS(ValueError, (step > 0 && end >= start) || (step < 0 && end <= start),
                                "arange: upper bound and larger bound inconsistent with step sign");
               int64_t n = int64_t(std::ceil((end - start) / step));
               if (!any_float && !is_floating(dt)) {
                 int64_t si = s.to_int(), ei = e.to_int(), sti = st.to_int();
                 n = sti > 0 ? (ei - si + sti - 1) / sti : (si - ei + (-sti) - 1) / (-sti);
                 return std::vector<Tensor>{from_index(std::max<int64_t>(n, 0), dt, [&](int64_t i) { return double(si + i * sti); })};
               }
               return std::vector<Tensor>{from_index(std::max<int64_t>(n, 0), dt, [&](int64_t i) { return start + double(i) * step; })};
             },
         .dtypes = kIntAndFloat,
         .samples = [](DType dt, Generator&) {
           return std::vector<Sample>{{{Scalar(0), Scalar(5), Scalar(1), dt}},
                                      {{Scalar(1), Scalar(10), Scalar(3), Value()}, "int"},
                                      {{Scalar(-1.0), Scalar(1.0), Scalar(0.25), Value()}, "float"},
                                      {{Scalar(5), Scalar(-3), Scalar(-2), Value()}, "negative step"}};
         }});
  r.add({.schema_text = "linspace(Scalar start, Scalar end, int steps, *, ScalarType? dtype=None) -> Tensor",
         .family = "creation",
         .doc = "steps values evenly spaced from start to end inclusive.",
         .differentiable = false,
         .forward =
             [](const Args& a) {
               double s = a[0].scalar().to_double(), e = a[1].scalar().to_double();
               int64_t n = a[2].to_int();
               FOUNDRY_CHECK_AS(ValueError, n >= 0, "linspace: number of steps must be non-negative");
               DType dt = opt_dtype(a[3], default_float_dtype());
               double step = n > 1 ? (e - s) / double(n - 1) : 0;
               int64_t half = n / 2;
               // Symmetric evaluation (as PyTorch) so both ends are exact.
               return std::vector<Tensor>{from_index(n, dt, [&](int64_t i) {
                 return i < half ? s + step * double(i) : e - step * double(n - 1 - i);
               })};
             },
         .dtypes = kIntAndFloat,
         .samples = [](DType dt, Generator&) {
           return std::vector<Sample>{{{Scalar(-1.0), Scalar(2.0), int64_t(7), dt}},
                                      {{Scalar(0), Scalar(10), int64_t(5), Value()}},
                                      {{Scalar(3.0), Scalar(3.0), int64_t(1), Value()}}};
         }});
  r.add({.schema_text = "eye(int n, int? m=None, *, ScalarType? dtype=None) -> Tensor",
         .family = "creation",
         .doc = "Identity matrix n x m.",
         .differentiable = false,
         .forward =
             [](const Args& a) {
               int64_t n = a[0].to_int(), m = a[1].is_none() ? n : a[1].to_int();
               FOUNDRY_CHECK_AS(ValueError, n >= 0 && m >= 0, "eye: n and m must be non-negative");
               Tensor out = filled({n, m}, 0, opt_dtype(a[2], default_float_dtype()));
               Tensor ones_diag = filled({std::min(n, m)}, 1, out.dtype());
               if (out.numel()) {
                 Tensor d = diagonal(out, 0, 0, 1);
                 copy_into(d, ones_diag);
               }
               return std::vector<Tensor>{out};
             },
         .dtypes = kNumericTypes,
         .samples = [](DType dt, Generator&) {
           return std::vector<Sample>{{{int64_t(3), Value(), dt}}, {{int64_t(2), int64_t(4), dt}}};
         },
         .ref = "lambda n, m=None, dtype=None: torch.eye(n, m if m is not None else n, dtype=dtype)"});
  auto tri = [](bool lower) {
    return [lower](const Args& a) {
      const Tensor& x = a.tensor(0);
      FOUNDRY_CHECK_AS(ValueError, x.dim() >= 2, "{}: input tensor must have at least 2 dimensions",
                       lower ? "tril" : "triu");
      int64_t k = a[1].to_int();
      Tensor rows = arange(x.size(-2)).unsqueeze(1), cols = arange(x.size(-1)).unsqueeze(0);
      Tensor keep = lower ? (cols - rows <= wrap_scalar(k)) : (cols - rows >= wrap_scalar(k));
      return std::vector<Tensor>{where(keep, x, zeros({}, x.dtype()))};
    };
  };
  auto tri_samples = [](DType dt, Generator& g) {
    Tensor x = sample_uniform({3, 4}, dt, g), y = sample_uniform({2, 3, 3}, dt, g);
    return std::vector<Sample>{{{x, 0}}, {{x, 1}}, {{x, -1}}, {{y, 0}}};
  };
  r.add({.schema_text = "tril(Tensor input, int diagonal=0) -> Tensor",
         .family = "creation",
         .doc = "Zeros the elements above the k-th diagonal of the last two dims.",
         .kind = OpDef::Kind::Composite,
         .forward = tri(true),
         .dtypes = kNumericTypes,
         .samples = tri_samples});
  r.add({.schema_text = "triu(Tensor input, int diagonal=0) -> Tensor",
         .family = "creation",
         .doc = "Zeros the elements below the k-th diagonal of the last two dims.",
         .kind = OpDef::Kind::Composite,
         .forward = tri(false),
         .dtypes = kNumericTypes,
         .samples = tri_samples});
}

}  // namespace ops
}  // namespace foundry
