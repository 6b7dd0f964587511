// Random ops. Element i of a draw uses Philox counter (first + i), so values depend only on the
// seed and the position, not on the number of threads.
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

thread_local Generator* t_generator = nullptr;

// Routes a C++ call's explicit generator to the registry forward.
struct GeneratorScope {
  Generator* prev;
  explicit GeneratorScope(Generator* g) : prev(t_generator) { t_generator = g; }
  ~GeneratorScope() { t_generator = prev; }
};

Generator& active() { return t_generator ? *t_generator : default_generator(); }

// Fills out[i] = f(philox block for element i) in parallel.
template <typename T, typename F>
void fill_random(Tensor& out, F f) {
  Generator& g = active();
  int64_t n = out.numel();
  uint64_t first = g.reserve(uint64_t(n));
  uint64_t seed = g.seed();
  T* p = static_cast<T*>(out.data_ptr());
  parallel_for(0, n, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = f(philox4x32(first + uint64_t(i), 0, seed));
  });
}

double normal_from(const std::array<uint32_t, 4>& r) {
  double u1 = (double(r[0]) + 1.0) / 4294967296.0;  // (0, 1]
  double u2 = uniform_double(r[1], r[2]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// Normal samples two at a time: pair p uses counter first + p and Box-Muller's two outputs, in
// float math for float32 (the costly part of initialising large models).
template <typename T>
void fill_normal(Tensor& out, double mean, double std) {
  Generator& g = active();
  int64_t n = out.numel();
  int64_t pairs = (n + 1) / 2;
  uint64_t first = g.reserve(uint64_t(pairs));
  uint64_t seed = g.seed();
  T* p = static_cast<T*>(out.data_ptr());
  using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
  parallel_for(0, pairs, 2048, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      auto r = philox4x32(first + uint64_t(i), 0, seed);
      C u1, u2;
      if constexpr (std::is_same_v<C, double>) {
        u1 = (double(r[0]) + 1.0) / 4294967296.0;
        u2 = uniform_double(r[1], r[2]);
      } else {
        u1 = (float(r[0] >> 8) + 1.0f) * (1.0f / 16777216.0f);
        u2 = uniform_float(r[1]);
      }
      C radius = std::sqrt(C(-2) * std::log(u1)), theta = C(2 * M_PI) * u2;
      p[2 * i] = T(C(mean) + C(std) * radius * std::cos(theta));
      if (2 * i + 1 < n) p[2 * i + 1] = T(C(mean) + C(std) * radius * std::sin(theta));
    }
  });
}

Tensor draw(IntList size, DType dt, int kind, double a, double b) {
  Tensor out = empty(size, dt);
  if (kind == 1 && (dt == DType::Float32 || dt == DType::Float64)) {
    if (dt == DType::Float32) fill_normal<float>(out, a, b);
    else fill_normal<double>(out, a, b);
    return out;
  }
  kernels::visit_numeric(dt, "random", [&](auto tag) {
    using T = typename decltype(tag)::type;
    fill_random<T>(out, [&](const std::array<uint32_t, 4>& r) -> T {
      double v;
      if (kind == 0) v = a + (b - a) * uniform_double(r[0], r[1]);  // uniform [a, b)
      else if (kind == 1) v = a + b * normal_from(r);                // normal(a, b)
      else {                                                         // integers in [a, b)
        uint64_t range = uint64_t(int64_t(b) - int64_t(a));
        uint64_t bits = (uint64_t(r[0]) << 32) | r[1];
        return T(int64_t(a) + int64_t(bits % range));
      }
      if constexpr (std::is_same_v<T, bool>) return v != 0;
      else if constexpr (std::is_integral_v<T>) return T(int64_t(v));
      else if constexpr (std::is_same_v<T, double>) return v;
      else {
        // Keep uniform draws inside [a, b) after rounding to a narrow float.
        T t = T(float(v));
        if (kind == 0 && double(float(t)) >= b) t = T(float(a));
        return t;
      }
    });
  });
  return out;
}

DType float_dtype(const Value& v) {
  DType d = v.is_none() ? default_float_dtype() : v.dtype();
  FOUNDRY_CHECK_AS(TypeError, is_floating(d) && !is_float8(d), "random: expected a floating dtype, got {}", dtype_name(d));
  return d;
}

std::vector<Sample> size_samples(DType dt, Generator&) {
  return {{{std::vector<int64_t>{64, 64}, dt}}, {{std::vector<int64_t>{}, dt}, "0-d"}};
}

}  // namespace

Tensor rand(IntList size, TensorOptions o, Generator* gen) {
  GeneratorScope s(gen);
  Tensor t = ops::call1(FOUNDRY_OP("rand"), {size, o.dtype});
  if (o.requires_grad) t.requires_grad_();
  return t;
}
Tensor randn(IntList size, TensorOptions o, Generator* gen) {
  GeneratorScope s(gen);
  Tensor t = ops::call1(FOUNDRY_OP("randn"), {size, o.dtype});
  if (o.requires_grad) t.requires_grad_();
  return t;
}
Tensor randint(int64_t low, int64_t high, IntList size, TensorOptions o, Generator* gen) {
  GeneratorScope s(gen);
  return ops::call1(FOUNDRY_OP("randint"), {low, high, size, o.dtype});
}
Tensor rand_like(const Tensor& x, OptDType dt) { return ops::call1(FOUNDRY_OP("rand_like"), {x, dt}); }
Tensor randn_like(const Tensor& x, OptDType dt) { return ops::call1(FOUNDRY_OP("randn_like"), {x, dt}); }
Tensor normal(double mean, double std, IntList size, TensorOptions o, Generator* gen) {
  GeneratorScope s(gen);
  return ops::call1(FOUNDRY_OP("normal"), {mean, std, size, o.dtype});
}
Tensor uniform(double low, double high, IntList size, TensorOptions o, Generator* gen) {
  GeneratorScope s(gen);
  return ops::call1(FOUNDRY_OP("uniform"), {low, high, size, o.dtype});
}
Tensor bernoulli(const Tensor& x, std::optional<double> p, Generator* gen) {
  GeneratorScope s(gen);
  return ops::call1(FOUNDRY_OP("bernoulli"), {x, p});
}
Tensor multinomial(const Tensor& x, int64_t n, bool replacement, Generator* gen) {
  GeneratorScope s(gen);
  return ops::call1(FOUNDRY_OP("multinomial"), {x, n, replacement});
}
Tensor randperm(int64_t n, TensorOptions o, Generator* gen) {
  GeneratorScope s(gen);
  return ops::call1(FOUNDRY_OP("randperm"), {n, o.dtype});
}

namespace ops {

void register_random_ops(Registry& r) {
  auto nondiff = [](OpDef d) {
    d.family = "random";
    d.differentiable = false;
    d.random = true;
    return d;
  };
  r.add(nondiff({.schema_text = "rand(int[] size, *, ScalarType? dtype=None) -> Tensor",
                 .doc = "Uniform [0, 1) samples.",
                 .forward = [](const Args& a) { return std::vector<Tensor>{draw(a[0].int_list(), float_dtype(a[1]), 0, 0, 1)}; },
                 .dtypes = kFloatTypes,
                 .samples = size_samples}));
  r.add(nondiff({.schema_text = "randn(int[] size, *, ScalarType? dtype=None) -> Tensor",
                 .doc = "Standard normal samples (Box-Muller).",
                 .forward = [](const Args& a) { return std::vector<Tensor>{draw(a[0].int_list(), float_dtype(a[1]), 1, 0, 1)}; },
                 .dtypes = kFloatTypes,
                 .samples = size_samples}));
  r.add(nondiff({.schema_text = "randint(int low, int high, int[] size, *, ScalarType? dtype=None) -> Tensor",
                 .doc = "Uniform integers in [low, high).",
                 .forward =
                     [](const Args& a) {
                       int64_t lo = a[0].to_int(), hi = a[1].to_int();
                       FOUNDRY_CHECK_AS(ValueError, hi > lo, "randint: expected low < high, but got low={} and high={}", lo, hi);
                       DType dt = a[3].is_none() ? DType::Int64 : a[3].dtype();
                       return std::vector<Tensor>{draw(a[2].int_list(), dt, 2, double(lo), double(hi))};
                     },
                 .dtypes = kIntAndFloat,
                 .samples = [](DType dt, Generator&) {
                   return std::vector<Sample>{{{int64_t(-3), int64_t(7), std::vector<int64_t>{64, 64}, dt}}};
                 }}));
  r.add(nondiff({.schema_text = "rand_like(Tensor input, *, ScalarType? dtype=None) -> Tensor",
                 .doc = "rand with input's shape (and dtype unless given).",
                 .forward =
                     [](const Args& a) {
                       const Tensor& x = a.tensor(0);
                       return std::vector<Tensor>{draw(x.sizes(), a[1].is_none() ? x.dtype() : a[1].dtype(), 0, 0, 1)};
                     },
                 .dtypes = kFloatTypes,
                 .samples = [](DType dt, Generator& g) { return std::vector<Sample>{{{sample_uniform({64, 64}, dt, g), Value()}}}; }}));
  r.add(nondiff({.schema_text = "randn_like(Tensor input, *, ScalarType? dtype=None) -> Tensor",
                 .doc = "randn with input's shape (and dtype unless given).",
                 .forward =
                     [](const Args& a) {
                       const Tensor& x = a.tensor(0);
                       return std::vector<Tensor>{draw(x.sizes(), a[1].is_none() ? x.dtype() : a[1].dtype(), 1, 0, 1)};
                     },
                 .dtypes = kFloatTypes,
                 .samples = [](DType dt, Generator& g) { return std::vector<Sample>{{{sample_uniform({64, 64}, dt, g), Value()}}}; }}));
  r.add(nondiff({.schema_text = "normal(float mean, float std, int[] size, *, ScalarType? dtype=None) -> Tensor",
                 .doc = "Normal samples with the given mean and standard deviation.",
                 .forward =
                     [](const Args& a) {
                       double sd = a[1].to_double();
                       FOUNDRY_CHECK_AS(ValueError, sd >= 0, "normal expects std >= 0.0, but found std {}", sd);
                       return std::vector<Tensor>{draw(a[2].int_list(), float_dtype(a[3]), 1, a[0].to_double(), sd)};
                     },
                 .dtypes = kFloatTypes,
                 .samples = [](DType dt, Generator&) {
                   return std::vector<Sample>{{{1.5, 0.5, std::vector<int64_t>{64, 64}, dt}}};
                 }}));
  r.add(nondiff({.schema_text = "uniform(float low, float high, int[] size, *, ScalarType? dtype=None) -> Tensor",
                 .doc = "Uniform samples in [low, high) (Tensor.uniform_ as a function).",
                 .forward =
                     [](const Args& a) {
                       double lo = a[0].to_double(), hi = a[1].to_double();
                       FOUNDRY_CHECK_AS(ValueError, lo <= hi, "uniform_ expects to return a [from, to) range, but found from={} > to={}", lo, hi);
                       return std::vector<Tensor>{draw(a[2].int_list(), float_dtype(a[3]), 0, lo, hi)};
                     },
                 .dtypes = kFloatTypes,
                 .samples = [](DType dt, Generator&) {
                   return std::vector<Sample>{{{-2.0, 3.0, std::vector<int64_t>{64, 64}, dt}}};
                 },
                 .ref = "lambda low, high, size, dtype=None: torch.empty(size, dtype=dtype).uniform_(low, high)"}));
  r.add(nondiff({.schema_text = "bernoulli(Tensor input, float? p=None) -> Tensor",
                 .doc = "1 with probability input (or p), else 0; same dtype as input.",
                 .forward =
                     [](const Args& a) {
                       const Tensor& x = a.tensor(0);
                       Tensor probs = (a[1].is_none() ? x : full_like(x, a[1].to_double())).to(DType::Float64).contiguous();
                       const double* pp = probs.data<double>();
                       for (int64_t i = 0; i < probs.numel(); ++i)
                         FOUNDRY_CHECK_AS(ValueError, pp[i] >= 0 && pp[i] <= 1, "bernoulli: probabilities must be in [0, 1], got {}", pp[i]);
                       Tensor u = draw(x.sizes(), DType::Float64, 0, 0, 1);
                       return std::vector<Tensor>{(u < probs).to(x.dtype())};
                     },
                 .dtypes = kFloatTypes,
                 .samples = [](DType dt, Generator& g) {
                   return std::vector<Sample>{{{full({64, 64}, 0.3, dt), Value()}}, {{sample_uniform({64, 64}, dt, g), 0.7}}};
                 }}));
  r.add(nondiff({.schema_text = "multinomial(Tensor input, int num_samples, bool replacement=False) -> Tensor",
                 .doc = "Category indices drawn from each row's (unnormalised) weights.",
                 .forward =
                     [](const Args& a) {
                       const Tensor& x = a.tensor(0);
                       FOUNDRY_CHECK_AS(ValueError, x.dim() == 1 || x.dim() == 2, "multinomial: prob_dist must be 1 or 2 dim");
                       int64_t ns = a[1].to_int();
                       bool repl = a[2].to_bool();
                       Tensor w = x.dim() == 1 ? x.unsqueeze(0) : x;
                       w = w.to(DType::Float64).contiguous();
                       int64_t rows = w.size(0), n = w.size(1);
                       FOUNDRY_CHECK_AS(ValueError, ns > 0, "multinomial: cannot sample n_sample <= 0 samples");
                       FOUNDRY_CHECK_AS(ValueError, repl || ns <= n,
                                        "multinomial: cannot sample n_sample > prob_dist.size(-1) samples without replacement");
                       const double* wp = w.data<double>();
                       Tensor out = empty({rows, ns}, DType::Int64);
                       int64_t* op = out.data<int64_t>();
                       Generator& g = active();
                       for (int64_t row = 0; row < rows; ++row) {
                         const double* rw = wp + row * n;
                         double total = 0;
                         int64_t positive = 0;
                         for (int64_t i = 0; i < n; ++i) {
                           FOUNDRY_CHECK_AS(ValueError, rw[i] >= 0 && std::isfinite(rw[i]),
                                            "multinomial: probability tensor contains either inf, nan or element < 0");
                           total += rw[i];
                           positive += rw[i] > 0;
                         }
                         FOUNDRY_CHECK_AS(ValueError, total > 0, "multinomial: invalid multinomial distribution (sum of probabilities <= 0)");
                         FOUNDRY_CHECK_AS(ValueError, repl || ns <= positive,
                                          "multinomial: invalid multinomial distribution (with replacement=False, not enough non-negative category to sample)");
                         uint64_t base = g.reserve(uint64_t(ns));
                         if (repl) {
                           for (int64_t s = 0; s < ns; ++s) {
                             auto rnd = philox4x32(base + uint64_t(s), 0, g.seed());
                             double u = uniform_double(rnd[0], rnd[1]) * total, acc = 0;
                             int64_t pick = n - 1;
                             for (int64_t i = 0; i < n; ++i) {
                               acc += rw[i];
                               if (u < acc && rw[i] > 0) {
                                 pick = i;
                                 break;
                               }
                             }
                             op[row * ns + s] = pick;
                           }
                         } else {
                           std::vector<double> left(rw, rw + n);
                           double rem = total;
                           for (int64_t s = 0; s < ns; ++s) {
                             auto rnd = philox4x32(base + uint64_t(s), 0, g.seed());
                             double u = uniform_double(rnd[0], rnd[1]) * rem, acc = 0;
                             int64_t pick = -1;
                             for (int64_t i = 0; i < n; ++i) {
                               if (left[size_t(i)] <= 0) continue;
                               acc += left[size_t(i)];
                               pick = i;
                               if (u < acc) break;
                             }
                             op[row * ns + s] = pick;
                             rem -= left[size_t(pick)];
                             left[size_t(pick)] = 0;
                           }
                         }
                       }
                       return std::vector<Tensor>{x.dim() == 1 ? out.view({ns}) : out};
                     },
                 .dtypes = kFloatTypes,
                 .samples = [](DType dt, Generator&) {
                   Tensor w = tensor<double>({0.1, 0.2, 0.3, 0.4}, {4}).to(dt);
                   return std::vector<Sample>{{{w, int64_t(4000), true}}, {{w.unsqueeze(0).expand({3, 4}).contiguous(), int64_t(4), false}}};
                 }}));
  r.add(nondiff({.schema_text = "randperm(int n, *, ScalarType? dtype=None) -> Tensor",
                 .doc = "A random permutation of 0..n-1 (Fisher-Yates).",
                 .forward =
                     [](const Args& a) {
                       int64_t n = a[0].to_int();
                       FOUNDRY_CHECK_AS(ValueError, n >= 0, "randperm: n must be non-negative, got {}", n);
                       Generator& g = active();
                       std::vector<int64_t> perm(static_cast<size_t>(n));
                       std::iota(perm.begin(), perm.end(), 0);
                       uint64_t base = g.reserve(uint64_t(std::max<int64_t>(n, 1)));
                       for (int64_t i = n - 1; i > 0; --i) {
                         auto rnd = philox4x32(base + uint64_t(i), 0, g.seed());
                         uint64_t bits = (uint64_t(rnd[0]) << 32) | rnd[1];
                         int64_t j = int64_t(bits % uint64_t(i + 1));
                         std::swap(perm[size_t(i)], perm[size_t(j)]);
                       }
                       DType dt = a[1].is_none() ? DType::Int64 : a[1].dtype();
                       return std::vector<Tensor>{tensor<int64_t>(perm, {n}).to(dt)};
                     },
                 .dtypes = {DType::Int64, DType::Int32},
                 .samples = [](DType dt, Generator&) { return std::vector<Sample>{{{int64_t(100), dt}}}; }}));
}

}  // namespace ops
}  // namespace foundry
