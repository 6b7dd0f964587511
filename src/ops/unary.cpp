// Unary elementwise ops. Each row of the table below is one registry entry: its schema, the kernel
// function, the sampling domain, and the gradient written in Foundry ops.
#include <cmath>
#include <limits>
#include <set>

#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/binary.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/special_math.h"
#include "kernels/cpu/unary.h"
#include "ops/common.h"

namespace foundry {

using kernels::UnaryOp;
using kernels::UnaryParams;
using ops::Args;
using ops::BackwardContext;
using ops::OpDef;
using ops::Sample;
using ops::Schema;
using ops::Value;

namespace {

enum class Domain { Any, Positive, Unit, GtOne, NonZero, Wide };

struct UnarySpec {
  std::string schema;
  UnaryOp op;
  std::string doc;
  Domain domain = Domain::Any;
  /// Integer inputs keep their dtype (neg, abs, ...); otherwise they become the default float.
  bool int_ok = false;
  std::vector<std::string> saves = {};
  std::vector<int> saves_outputs = {};
  std::function<Tensor(BackwardContext&)> grad = nullptr;  // null: not differentiable
  std::function<UnaryParams(const Args&)> params = nullptr;
  std::function<std::vector<Sample>(DType, Generator&)> extra_samples = nullptr;
  std::string ref = "";
};

// Integer kernels for the ops that keep integer dtypes.
void unary_int(UnaryOp op, const Tensor& in, Tensor& out, const UnaryParams& p) {
  kernels::StridedLoop loop({&out, &in});
  kernels::visit_integral(in.dtype(), kernels::unary_op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::for_each_run(loop, kGrainSize, [&](char** data, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) {
        T x = *reinterpret_cast<const T*>(data[1] + i * s[1]);
        T r = x;
        if constexpr (std::is_same_v<T, bool>) {
          if (op == UnaryOp::Neg) raise<TypeError>("negation, the `-` operator, on a bool tensor is not supported");
          if (op == UnaryOp::Relu || op == UnaryOp::Square || op == UnaryOp::Relu6 || op == UnaryOp::Hardtanh)
            raise<TypeError>("{}: not implemented for 'bool'", kernels::unary_op_name(op));
        } else {
          // Wrapping, in an unsigned type at least as wide as int (see kernels/cpu/binary.cpp).
          using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
          switch (op) {
            case UnaryOp::Neg: r = T(U(0) - U(x)); break;
            case UnaryOp::Abs:
              if constexpr (std::is_signed_v<T>) r = x < 0 ? T(U(0) - U(x)) : x;
              break;
            case UnaryOp::Sign: r = T((T(0) < x) - (x < T(0))); break;
            case UnaryOp::Square: r = T(U(x) * U(x)); break;
            case UnaryOp::Relu: r = x < 0 ? T(0) : x; break;
            case UnaryOp::Relu6: r = std::min<T>(std::max<T>(x, T(0)), T(6)); break;
            case UnaryOp::Hardtanh:
            case UnaryOp::Clamp:
              // Bounds are cast to the tensor's dtype first (PyTorch converts the scalars).
              if (!std::isnan(p.a)) r = std::max<T>(r, T(int64_t(p.a)));
              if (!std::isnan(p.b)) r = std::min<T>(r, T(int64_t(p.b)));
              break;
            case UnaryOp::NanToNum: break;
            default: break;  // floor/ceil/round/trunc: identity on integers
          }
        }
        *reinterpret_cast<T*>(data[0] + i * s[0]) = r;
      }
    });
  });
}

Tensor sample_in(Domain d, IntList shape, DType dt, Generator& g) {
  switch (d) {
    case Domain::Positive: return ops::sample_uniform(shape, dt, g, 0.2, 3.0);
    case Domain::Unit: return ops::sample_uniform(shape, dt, g, -0.9, 0.9);
    case Domain::GtOne: return ops::sample_uniform(shape, dt, g, 1.2, 4.0);
    case Domain::NonZero: return ops::sample_away_from_zero(shape, dt, g, 0.3, 2.0);
    case Domain::Wide: return ops::sample_uniform(shape, dt, g, -6.0, 6.0);
    case Domain::Any: break;
  }
  return ops::sample_uniform(shape, dt, g, -3.0, 3.0);
}

Tensor zero_like_grad(BackwardContext& c) { return zeros_like(c.grad()); }

Tensor W(double v) { return wrap_scalar(v); }

void register_unary(ops::Registry& r, const UnarySpec& spec) {
  OpDef def;
  def.schema_text = spec.schema;
  def.family = "unary";
  def.doc = spec.doc;
  def.differentiable = bool(spec.grad);
  def.saves = spec.saves;
  def.saves_outputs = spec.saves_outputs;
  const bool int_ok = spec.int_ok;
  const std::string name = Schema::parse(spec.schema).name;
  def.prepare = [int_ok, name](Args& a) {
    Tensor& x = a[0].tensor();
    if (!int_ok && !is_floating(x.dtype())) x = x.to(default_float_dtype());
    if (name == "square" && x.dtype() == DType::Bool) x = x.to(DType::Int64);  // pow(bool, 2) is int64
    if (name == "clamp") {
      // result_type(input, min, max): bounds are wrapped numbers.
      ResultTypeState st;
      st.add_tensor(x.dtype(), x.dim(), false);
      for (size_t i : {size_t(1), size_t(2)})
        if (!a[i].is_none()) st.add_tensor(a[i].scalar().dtype(), 0, true);
      DType dt = st.result();
      if (dt != x.dtype()) x = x.to(dt);
    }
  };
  auto params = spec.params;
  const UnaryOp op = spec.op;
  def.forward = [op, params](const Args& a) {
    const Tensor& x = a.tensor(0);
    UnaryParams p = params ? params(a) : UnaryParams{};
    Tensor out = ops::empty_as(x, x.dtype());
    UnaryOp effective = op;
    if (op == UnaryOp::Gelu && a[1].str() == "tanh") effective = UnaryOp::GeluTanh;
    if (is_floating(x.dtype())) kernels::unary_kernel(effective, x, out, p);
    else unary_int(effective, x, out, p);
    return std::vector<Tensor>{out};
  };
  if (spec.grad) {
    auto g = spec.grad;
    def.backward = [g](BackwardContext& c) { return std::vector<Tensor>{g(c)}; };
  }
  def.dtypes = int_ok ? ops::kNumericTypes : ops::kIntAndFloat;
  // PyTorch rejects bool for these (negation, relu and clamping bool make no sense).
  static const std::set<std::string> no_bool = {"neg", "relu", "relu6", "hardtanh"};
  if (no_bool.count(name)) std::erase(def.dtypes, DType::Bool);
  const Domain dom = spec.domain;
  auto extra = spec.extra_samples;
  const bool has_params = bool(params);
  def.samples = [dom, extra, has_params](DType dt, Generator& g) {
    std::vector<Sample> out;
    if (!has_params) {
      for (const Shape& s : ops::standard_shapes()) out.push_back({{sample_in(dom, s, dt, g)}});
    }
    if (extra) {
      auto more = extra(dt, g);
      out.insert(out.end(), more.begin(), more.end());
    }
    return out;
  };
  def.ref = spec.ref;
  r.add(std::move(def));
}

UnaryParams elu_params(double alpha, double scale, double input_scale) { return {alpha, scale, input_scale}; }

}  // namespace

#define FOUNDRY_UNARY_FN(name) \
  Tensor name(const Tensor& x) { return ops::call1(FOUNDRY_OP(#name), {x}); }
FOUNDRY_UNARY_FN(neg)
FOUNDRY_UNARY_FN(abs)
FOUNDRY_UNARY_FN(sign)
FOUNDRY_UNARY_FN(exp)
FOUNDRY_UNARY_FN(exp2)
FOUNDRY_UNARY_FN(expm1)
FOUNDRY_UNARY_FN(log)
FOUNDRY_UNARY_FN(log2)
FOUNDRY_UNARY_FN(log10)
FOUNDRY_UNARY_FN(log1p)
FOUNDRY_UNARY_FN(sqrt)
FOUNDRY_UNARY_FN(rsqrt)
FOUNDRY_UNARY_FN(square)
FOUNDRY_UNARY_FN(reciprocal)
FOUNDRY_UNARY_FN(sin)
FOUNDRY_UNARY_FN(cos)
FOUNDRY_UNARY_FN(tan)
FOUNDRY_UNARY_FN(asin)
FOUNDRY_UNARY_FN(acos)
FOUNDRY_UNARY_FN(atan)
FOUNDRY_UNARY_FN(sinh)
FOUNDRY_UNARY_FN(cosh)
FOUNDRY_UNARY_FN(tanh)
FOUNDRY_UNARY_FN(asinh)
FOUNDRY_UNARY_FN(acosh)
FOUNDRY_UNARY_FN(atanh)
FOUNDRY_UNARY_FN(sigmoid)
FOUNDRY_UNARY_FN(logsigmoid)
FOUNDRY_UNARY_FN(relu)
FOUNDRY_UNARY_FN(relu6)
FOUNDRY_UNARY_FN(selu)
FOUNDRY_UNARY_FN(silu)
FOUNDRY_UNARY_FN(mish)
FOUNDRY_UNARY_FN(softsign)
FOUNDRY_UNARY_FN(hardsigmoid)
FOUNDRY_UNARY_FN(hardswish)
FOUNDRY_UNARY_FN(erf)
FOUNDRY_UNARY_FN(erfc)
FOUNDRY_UNARY_FN(erfinv)
FOUNDRY_UNARY_FN(lgamma)
FOUNDRY_UNARY_FN(digamma)
FOUNDRY_UNARY_FN(floor)
FOUNDRY_UNARY_FN(ceil)
FOUNDRY_UNARY_FN(trunc)
FOUNDRY_UNARY_FN(frac)
FOUNDRY_UNARY_FN(isnan)
FOUNDRY_UNARY_FN(isinf)
FOUNDRY_UNARY_FN(isfinite)
FOUNDRY_UNARY_FN(logical_not)
FOUNDRY_UNARY_FN(bitwise_not)
#undef FOUNDRY_UNARY_FN

Tensor leaky_relu(const Tensor& x, double s) { return ops::call1(FOUNDRY_OP("leaky_relu"), {x, s}); }
Tensor elu(const Tensor& x, double alpha) { return ops::call1(FOUNDRY_OP("elu"), {x, alpha}); }
Tensor celu(const Tensor& x, double alpha) { return ops::call1(FOUNDRY_OP("celu"), {x, alpha}); }
Tensor gelu(const Tensor& x, const std::string& approximate) {
  return ops::call1(FOUNDRY_OP("gelu"), {x, approximate});
}
Tensor gelu_backward(const Tensor& g, const Tensor& x, const std::string& approximate) {
  return ops::call1(FOUNDRY_OP("gelu_backward"), {g, x, approximate});
}
Tensor softplus(const Tensor& x, double beta, double threshold) {
  return ops::call1(FOUNDRY_OP("softplus"), {x, beta, threshold});
}
Tensor hardtanh(const Tensor& x, double lo, double hi) { return ops::call1(FOUNDRY_OP("hardtanh"), {x, lo, hi}); }
Tensor round(const Tensor& x, int64_t decimals) { return ops::call1(FOUNDRY_OP("round"), {x, decimals}); }
Tensor clamp(const Tensor& x, OptScalar min, OptScalar max) { return ops::call1(FOUNDRY_OP("clamp"), {x, min, max}); }
Tensor nan_to_num(const Tensor& x, double nan, std::optional<double> posinf, std::optional<double> neginf) {
  return ops::call1(FOUNDRY_OP("nan_to_num"), {x, nan, posinf, neginf});
}
Tensor polygamma(int64_t n, const Tensor& x) { return ops::call1(FOUNDRY_OP("polygamma"), {n, x}); }

namespace ops {

void register_unary_ops(Registry& r) {
  const std::vector<std::string> X = {"input"};
  auto g = [](BackwardContext& c) { return c.grad(); };
  auto x = [](BackwardContext& c) { return c.input("input"); };
  auto y = [](BackwardContext& c) { return c.output(0); };
  (void)g;
  std::vector<UnarySpec> specs = {
      {"neg(Tensor input) -> Tensor", UnaryOp::Neg, "-x", Domain::Any, true, {}, {},
       [](BackwardContext& c) { return neg(c.grad()); }},
      {"abs(Tensor input) -> Tensor", UnaryOp::Abs, "|x|", Domain::NonZero, true, X, {},
       [x](BackwardContext& c) { return c.grad() * sign(x(c)); }},
      {"sign(Tensor input) -> Tensor", UnaryOp::Sign, "-1, 0 or 1 (0 for NaN)", Domain::NonZero, true, {}, {},
       zero_like_grad},
      {"exp(Tensor input) -> Tensor", UnaryOp::Exp, "e^x", Domain::Any, false, {}, {0},
       [y](BackwardContext& c) { return c.grad() * y(c); }},
      {"exp2(Tensor input) -> Tensor", UnaryOp::Exp2, "2^x", Domain::Any, false, {}, {0},
       [y](BackwardContext& c) { return c.grad() * y(c) * W(M_LN2); }},
      {"expm1(Tensor input) -> Tensor", UnaryOp::Expm1, "e^x - 1, accurate near 0", Domain::Any, false, {}, {0},
       [y](BackwardContext& c) { return c.grad() * (y(c) + W(1.0)); }},
      {"log(Tensor input) -> Tensor", UnaryOp::Log, "natural logarithm", Domain::Positive, false, X, {},
       [x](BackwardContext& c) { return c.grad() / x(c); }},
      {"log2(Tensor input) -> Tensor", UnaryOp::Log2, "base-2 logarithm", Domain::Positive, false, X, {},
       [x](BackwardContext& c) { return c.grad() / (x(c) * W(M_LN2)); }},
      {"log10(Tensor input) -> Tensor", UnaryOp::Log10, "base-10 logarithm", Domain::Positive, false, X, {},
       [x](BackwardContext& c) { return c.grad() / (x(c) * W(M_LN10)); }},
      {"log1p(Tensor input) -> Tensor", UnaryOp::Log1p, "log(1 + x), accurate near 0", Domain::Positive, false, X, {},
       [x](BackwardContext& c) { return c.grad() / (x(c) + W(1.0)); }},
      {"sqrt(Tensor input) -> Tensor", UnaryOp::Sqrt, "square root", Domain::Positive, false, {}, {0},
       [y](BackwardContext& c) { return c.grad() / (W(2.0) * y(c)); }},
      {"rsqrt(Tensor input) -> Tensor", UnaryOp::Rsqrt, "1 / sqrt(x)", Domain::Positive, false, {}, {0},
       [y](BackwardContext& c) { return c.grad() * pow(y(c), 3) * W(-0.5); }},
      {"square(Tensor input) -> Tensor", UnaryOp::Square, "x * x", Domain::Any, true, X, {},
       [x](BackwardContext& c) { return c.grad() * x(c) * W(2.0); }},
      {"reciprocal(Tensor input) -> Tensor", UnaryOp::Reciprocal, "1 / x", Domain::NonZero, false, {}, {0},
       [y](BackwardContext& c) { return neg(c.grad()) * y(c) * y(c); }},
      {"sin(Tensor input) -> Tensor", UnaryOp::Sin, "sine", Domain::Any, false, X, {},
       [x](BackwardContext& c) { return c.grad() * cos(x(c)); }},
      {"cos(Tensor input) -> Tensor", UnaryOp::Cos, "cosine", Domain::Any, false, X, {},
       [x](BackwardContext& c) { return neg(c.grad()) * sin(x(c)); }},
      {"tan(Tensor input) -> Tensor", UnaryOp::Tan, "tangent", Domain::Unit, false, {}, {0},
       [y](BackwardContext& c) { return c.grad() * (y(c) * y(c) + W(1.0)); }},
      {"asin(Tensor input) -> Tensor", UnaryOp::Asin, "arc sine", Domain::Unit, false, X, {},
       [x](BackwardContext& c) { return c.grad() * rsqrt(W(1.0) - x(c) * x(c)); }},
      {"acos(Tensor input) -> Tensor", UnaryOp::Acos, "arc cosine", Domain::Unit, false, X, {},
       [x](BackwardContext& c) { return neg(c.grad()) * rsqrt(W(1.0) - x(c) * x(c)); }},
      {"atan(Tensor input) -> Tensor", UnaryOp::Atan, "arc tangent", Domain::Any, false, X, {},
       [x](BackwardContext& c) { return c.grad() / (x(c) * x(c) + W(1.0)); }},
      {"sinh(Tensor input) -> Tensor", UnaryOp::Sinh, "hyperbolic sine", Domain::Any, false, X, {},
       [x](BackwardContext& c) { return c.grad() * cosh(x(c)); }},
      {"cosh(Tensor input) -> Tensor", UnaryOp::Cosh, "hyperbolic cosine", Domain::Any, false, X, {},
       [x](BackwardContext& c) { return c.grad() * sinh(x(c)); }},
      {"tanh(Tensor input) -> Tensor", UnaryOp::Tanh, "hyperbolic tangent", Domain::Any, false, {}, {0},
       [y](BackwardContext& c) { return c.grad() * (W(1.0) - y(c) * y(c)); }},
      {"asinh(Tensor input) -> Tensor", UnaryOp::Asinh, "inverse hyperbolic sine", Domain::Any, false, X, {},
       [x](BackwardContext& c) { return c.grad() * rsqrt(x(c) * x(c) + W(1.0)); }},
      {"acosh(Tensor input) -> Tensor", UnaryOp::Acosh, "inverse hyperbolic cosine", Domain::GtOne, false, X, {},
       [x](BackwardContext& c) { return c.grad() * rsqrt(x(c) * x(c) - W(1.0)); }},
      {"atanh(Tensor input) -> Tensor", UnaryOp::Atanh, "inverse hyperbolic tangent", Domain::Unit, false, X, {},
       [x](BackwardContext& c) { return c.grad() / (W(1.0) - x(c) * x(c)); }},
      {"sigmoid(Tensor input) -> Tensor", UnaryOp::Sigmoid, "1 / (1 + e^-x)", Domain::Wide, false, {}, {0},
       [y](BackwardContext& c) { return c.grad() * y(c) * (W(1.0) - y(c)); }},
      {"logsigmoid(Tensor input) -> Tensor", UnaryOp::LogSigmoid, "log(sigmoid(x)), stable", Domain::Wide, false, X,
       {}, [x](BackwardContext& c) { return c.grad() * sigmoid(neg(x(c))); }, nullptr, nullptr,
       "torch.nn.functional.logsigmoid"},
      {"relu(Tensor input) -> Tensor", UnaryOp::Relu, "max(x, 0)", Domain::NonZero, true, {}, {0},
       [y](BackwardContext& c) { return where(y(c) > Scalar(0), c.grad(), W(0.0)); }},
      {"relu6(Tensor input) -> Tensor", UnaryOp::Relu6, "min(max(x, 0), 6)", Domain::Wide, true, X, {},
       [x](BackwardContext& c) {
         return where(logical_and(x(c) > Scalar(0), x(c) < Scalar(6)), c.grad(), W(0.0));
       }, nullptr, nullptr, "torch.nn.functional.relu6"},
      {"leaky_relu(Tensor input, float negative_slope=0.01) -> Tensor", UnaryOp::LeakyRelu,
       "x if x > 0 else negative_slope * x", Domain::NonZero, false, X, {},
       [x](BackwardContext& c) {
         return where(x(c) > Scalar(0), c.grad(), c.grad() * W(c.double_arg("negative_slope")));
       },
       [](const Args& a) { return UnaryParams{a[1].to_double()}; },
       [](DType dt, Generator& gen) {
         Tensor t = sample_in(Domain::NonZero, {3, 4}, dt, gen);
         return std::vector<Sample>{{{t, 0.01}}, {{t, 0.2}}, {{sample_in(Domain::NonZero, {}, dt, gen), 0.1}}};
       },
       "torch.nn.functional.leaky_relu"},
      {"elu(Tensor input, float alpha=1.0) -> Tensor", UnaryOp::Elu, "x if x > 0 else alpha * (e^x - 1)",
       Domain::NonZero, false, X, {},
       [x](BackwardContext& c) {
         double alpha = c.double_arg("alpha");
         return where(x(c) > Scalar(0), c.grad(), c.grad() * exp(x(c)) * W(alpha));
       },
       [](const Args& a) { return elu_params(a[1].to_double(), 1.0, 1.0); },
       [](DType dt, Generator& gen) {
         Tensor t = sample_in(Domain::NonZero, {3, 4}, dt, gen);
         return std::vector<Sample>{{{t, 1.0}}, {{t, 0.5}}};
       },
       "torch.nn.functional.elu"},
      {"selu(Tensor input) -> Tensor", UnaryOp::Elu, "scale * elu(x, alpha) with the self-normalising constants",
       Domain::NonZero, false, X, {},
       [x](BackwardContext& c) {
         const double alpha = 1.6732632423543772848170429916717, scale = 1.0507009873554804934193349852946;
         return where(x(c) > Scalar(0), c.grad() * W(scale), c.grad() * exp(x(c)) * W(alpha * scale));
       },
       [](const Args&) { return elu_params(1.6732632423543772848170429916717, 1.0507009873554804934193349852946, 1.0); },
       [](DType dt, Generator& gen) { return std::vector<Sample>{{{sample_in(Domain::NonZero, {3, 4}, dt, gen)}}}; },
       "torch.nn.functional.selu"},
      {"celu(Tensor input, float alpha=1.0) -> Tensor", UnaryOp::Elu, "max(0, x) + min(0, alpha * (e^(x/alpha) - 1))",
       Domain::NonZero, false, X, {},
       [x](BackwardContext& c) {
         double alpha = c.double_arg("alpha");
         return where(x(c) > Scalar(0), c.grad(), c.grad() * exp(x(c) / W(alpha)));
       },
       [](const Args& a) { return elu_params(a[1].to_double(), 1.0, 1.0 / a[1].to_double()); },
       [](DType dt, Generator& gen) {
         Tensor t = sample_in(Domain::NonZero, {3, 4}, dt, gen);
         return std::vector<Sample>{{{t, 1.0}}, {{t, 2.0}}};
       },
       "torch.nn.functional.celu"},
      {"gelu(Tensor input, *, str approximate='none') -> Tensor", UnaryOp::Gelu,
       "x * Phi(x); approximate='tanh' uses the tanh form", Domain::Any, false, X, {},
       [x](BackwardContext& c) { return gelu_backward(c.grad(), x(c), c.arg("approximate").str()); },
       [](const Args& a) {
         const std::string& mode = a[1].str();
         FOUNDRY_CHECK_AS(ValueError, mode == "none" || mode == "tanh",
                          "gelu: approximate must be 'none' or 'tanh', got '{}'", mode);
         return UnaryParams{};
       },
       [](DType dt, Generator& gen) {
         Tensor t = sample_in(Domain::Any, {3, 4}, dt, gen);
         return std::vector<Sample>{{{t, "none"}}, {{t, "tanh"}}, {{sample_in(Domain::Any, {}, dt, gen), "none"}},
                                    {{sample_in(Domain::Any, {2, 0}, dt, gen), "tanh"}}};
       },
       "torch.nn.functional.gelu"},
      {"silu(Tensor input) -> Tensor", UnaryOp::Silu, "x * sigmoid(x)", Domain::Wide, false, X, {},
       [x](BackwardContext& c) {
         Tensor s = sigmoid(x(c));
         return c.grad() * s * (W(1.0) + x(c) * (W(1.0) - s));
       }, nullptr, nullptr, "torch.nn.functional.silu"},
      {"mish(Tensor input) -> Tensor", UnaryOp::Mish, "x * tanh(softplus(x))", Domain::Any, false, X, {},
       [x](BackwardContext& c) {
         Tensor t = tanh(softplus(x(c)));
         return c.grad() * (t + x(c) * sigmoid(x(c)) * (W(1.0) - t * t));
       }, nullptr, nullptr, "torch.nn.functional.mish"},
      {"softplus(Tensor input, float beta=1.0, float threshold=20.0) -> Tensor", UnaryOp::Softplus,
       "log(1 + e^(beta x)) / beta; linear above threshold", Domain::Wide, false, X, {},
       [x](BackwardContext& c) {
         double beta = c.double_arg("beta"), th = c.double_arg("threshold");
         Tensor bx = x(c) * W(beta);
         return where(bx > Scalar(th), c.grad(), c.grad() * sigmoid(bx));
       },
       [](const Args& a) { return UnaryParams{a[1].to_double(), a[2].to_double()}; },
       [](DType dt, Generator& gen) {
         Tensor t = sample_in(Domain::Wide, {3, 4}, dt, gen);
         return std::vector<Sample>{{{t, 1.0, 20.0}}, {{t, 2.0, 5.0}}};
       },
       "torch.nn.functional.softplus"},
      {"softsign(Tensor input) -> Tensor", UnaryOp::Softsign, "x / (1 + |x|)", Domain::NonZero, false, X, {},
       [x](BackwardContext& c) {
         Tensor d = abs(x(c)) + W(1.0);
         return c.grad() / (d * d);
       }, nullptr, nullptr, "torch.nn.functional.softsign"},
      {"hardtanh(Tensor input, float min_val=-1.0, float max_val=1.0) -> Tensor", UnaryOp::Hardtanh,
       "clamp(x, min_val, max_val)", Domain::Any, true, X, {},
       [x](BackwardContext& c) {
         Tensor keep = logical_and(x(c) > Scalar(c.double_arg("min_val")), x(c) < Scalar(c.double_arg("max_val")));
         return where(keep, c.grad(), W(0.0));
       },
       [](const Args& a) { return UnaryParams{a[1].to_double(), a[2].to_double()}; },
       [](DType dt, Generator& gen) {
         Tensor t = sample_in(Domain::Any, {3, 4}, dt, gen);
         return std::vector<Sample>{{{t, -1.0, 1.0}}, {{t, -0.5, 2.0}}};
       },
       "torch.nn.functional.hardtanh"},
      {"hardsigmoid(Tensor input) -> Tensor", UnaryOp::Hardsigmoid, "relu6(x + 3) / 6", Domain::Wide, false, X, {},
       [x](BackwardContext& c) {
         return where(logical_and(x(c) > Scalar(-3), x(c) < Scalar(3)), c.grad() / W(6.0), W(0.0));
       }, nullptr, nullptr, "torch.nn.functional.hardsigmoid"},
      {"hardswish(Tensor input) -> Tensor", UnaryOp::Hardswish, "x * relu6(x + 3) / 6", Domain::Wide, false, X, {},
       [x](BackwardContext& c) {
         Tensor mid = c.grad() * (x(c) / W(3.0) + W(0.5));
         return where(x(c) < Scalar(-3), W(0.0), where(x(c) <= Scalar(3), mid, c.grad()));
       }, nullptr, nullptr, "torch.nn.functional.hardswish"},
      {"erf(Tensor input) -> Tensor", UnaryOp::Erf, "error function", Domain::Any, false, X, {},
       [x](BackwardContext& c) { return c.grad() * exp(neg(x(c) * x(c))) * W(M_2_SQRTPI); }},
      {"erfc(Tensor input) -> Tensor", UnaryOp::Erfc, "1 - erf(x)", Domain::Any, false, X, {},
       [x](BackwardContext& c) { return c.grad() * exp(neg(x(c) * x(c))) * W(-M_2_SQRTPI); }},
      {"erfinv(Tensor input) -> Tensor", UnaryOp::Erfinv, "inverse error function", Domain::Unit, false, {}, {0},
       [y](BackwardContext& c) { return c.grad() * exp(y(c) * y(c)) * W(0.5 * std::sqrt(M_PI)); }},
      {"lgamma(Tensor input) -> Tensor", UnaryOp::Lgamma, "log |Gamma(x)|", Domain::Positive, false, X, {},
       [x](BackwardContext& c) { return c.grad() * digamma(x(c)); }},
      {"digamma(Tensor input) -> Tensor", UnaryOp::Digamma, "d/dx log Gamma(x)", Domain::Positive, false, X, {},
       [x](BackwardContext& c) { return c.grad() * polygamma(1, x(c)); }},
      {"floor(Tensor input) -> Tensor", UnaryOp::Floor, "round down", Domain::Wide, true, {}, {}, zero_like_grad},
      {"ceil(Tensor input) -> Tensor", UnaryOp::Ceil, "round up", Domain::Wide, true, {}, {}, zero_like_grad},
      {"round(Tensor input, *, int decimals=0) -> Tensor", UnaryOp::Round,
       "round half to even (to `decimals` places)", Domain::Wide, true, {}, {}, zero_like_grad,
       [](const Args& a) { return UnaryParams{double(a[1].to_int())}; },
       [](DType dt, Generator& gen) {
         Tensor t = sample_in(Domain::Wide, {3, 4}, dt, gen);
         std::vector<Sample> s = {{{t, int64_t(0)}}, {{sample_in(Domain::Wide, {}, dt, gen), int64_t(0)}}};
         if (is_floating(dt)) {
           s.push_back({{t, int64_t(2)}});
           s.push_back({{t * W(100.0), int64_t(-1)}});
         }
         return s;
       }},
      {"trunc(Tensor input) -> Tensor", UnaryOp::Trunc, "round toward zero", Domain::Wide, true, {}, {},
       zero_like_grad},
      {"frac(Tensor input) -> Tensor", UnaryOp::Frac, "x - trunc(x)", Domain::Wide, false, {}, {},
       [](BackwardContext& c) { return c.grad(); }},
      {"clamp(Tensor input, Scalar? min=None, Scalar? max=None) -> Tensor", UnaryOp::Clamp,
       "min(max(x, min), max); NaN stays NaN", Domain::Any, true, X, {},
       [x](BackwardContext& c) {
         Tensor keep = ones_like(x(c), DType::Bool);
         if (!c.arg("min").is_none()) keep = logical_and(keep, x(c) >= wrap_scalar(c.arg("min").scalar()));
         if (!c.arg("max").is_none()) keep = logical_and(keep, x(c) <= wrap_scalar(c.arg("max").scalar()));
         return where(keep, c.grad(), W(0.0));
       },
       [](const Args& a) {
         FOUNDRY_CHECK_AS(ValueError, !(a[1].is_none() && a[2].is_none()),
                          "clamp: at least one of 'min' or 'max' must not be None");
         double nan = std::numeric_limits<double>::quiet_NaN();
         return UnaryParams{a[1].is_none() ? nan : a[1].scalar().to_double(),
                            a[2].is_none() ? nan : a[2].scalar().to_double()};
       },
       [](DType dt, Generator& gen) {
         Tensor t = sample_in(Domain::Any, {3, 4}, dt, gen);
         return std::vector<Sample>{{{t, Scalar(-1), Scalar(1)}}, {{t, Scalar(0), Value()}},
                                    {{t, Value(), Scalar(2)}}, {{sample_in(Domain::Any, {}, dt, gen), Scalar(-1), Scalar(1)}}};
       }},
      {"nan_to_num(Tensor input, float? nan=0.0, float? posinf=None, float? neginf=None) -> Tensor",
       UnaryOp::NanToNum, "replaces NaN, +inf and -inf by finite values (default: 0 and the dtype's extremes)",
       Domain::Any, true, X, {},
       [x](BackwardContext& c) { return where(isfinite(x(c)), c.grad(), W(0.0)); },
       [](const Args& a) {
         DType dt = a.tensor(0).dtype();
         double big = dt == DType::Float16 ? 65504.0
                      : dt == DType::BFloat16 ? 3.3895313892515355e38
                      : dt == DType::Float32 ? double(std::numeric_limits<float>::max())
                                             : std::numeric_limits<double>::max();
         return UnaryParams{a[1].is_none() ? 0.0 : a[1].to_double(), a[2].is_none() ? big : a[2].to_double(),
                            a[3].is_none() ? -big : a[3].to_double()};
       },
       [](DType dt, Generator& gen) {
         Tensor t = sample_in(Domain::Any, {3, 4}, dt, gen);
         if (is_floating(dt)) {
           double inf = std::numeric_limits<double>::infinity();
           Tensor special = tensor<double>({std::nan(""), inf, -inf, 1.5}, {4}).to(dt);
           return std::vector<Sample>{{{t, 0.0, Value(), Value()}},
                                      {{special, 0.0, Value(), Value()}, "specials", false},
                                      {{special, 1.0, 100.0, -100.0}, "specials", false}};
         }
         return std::vector<Sample>{{{t, 0.0, Value(), Value()}}};
       }},
  };
  for (const UnarySpec& s : specs) register_unary(r, s);

  r.add({.schema_text = "polygamma(int n, Tensor input) -> Tensor",
         .family = "unary",
         .doc = "n-th derivative of digamma: (-1)^(n+1) n! zeta(n+1, x)",
         .saves = {"input"},
         .prepare =
             [](Args& a) {
               Tensor& t = a[1].tensor();
               if (!is_floating(t.dtype())) t = t.to(default_float_dtype());
             },
         .forward =
             [](const Args& a) {
               int64_t n = a[0].to_int();
               FOUNDRY_CHECK_AS(ValueError, n >= 0, "polygamma(n, x) does not support negative n ({})", n);
               const Tensor& xt = a.tensor(1);
               Tensor out = ops::empty_as(xt, xt.dtype());
               kernels::StridedLoop loop({&out, &xt});
               kernels::visit_floating(xt.dtype(), "polygamma", [&](auto tag) {
                 using T = typename decltype(tag)::type;
                 kernels::for_each_run(loop, 4096, [&](char** data, const int64_t* s, int64_t m) {
                   for (int64_t i = 0; i < m; ++i) {
                     double v = double(*reinterpret_cast<const T*>(data[1] + i * s[1]));
                     *reinterpret_cast<T*>(data[0] + i * s[0]) = T(kernels::calc_polygamma(n, v));
                   }
                 });
               });
               return std::vector<Tensor>{out};
             },
         .backward =
             [](BackwardContext& c) {
               return std::vector<Tensor>{c.grad() * polygamma(c.int_arg("n") + 1, c.input("input"))};
             },
         .dtypes = kIntAndFloat,
         .samples =
             [](DType dt, Generator& gen) {
               Tensor t = sample_uniform({3, 4}, dt, gen, 0.5, 3.0);
               return std::vector<Sample>{{{int64_t(0), t}}, {{int64_t(1), t}}, {{int64_t(2), t}}, {{int64_t(3), t}}};
             }});

  // gelu's gradient is an op of its own (PyTorch's gelu_backward), with its own gradient so that
  // second derivatives work.
  r.add({.schema_text = "gelu_backward(Tensor grad_output, Tensor input, *, str approximate='none') -> Tensor",
         .family = "unary",
         .doc = "grad_output * gelu'(input)",
         .saves = {"grad_output", "input"},
         .forward =
             [](const Args& a) {
               const Tensor& g = a.tensor(0);
               const Tensor& x = a.tensor(1);
               FOUNDRY_CHECK(g.dtype() == x.dtype() && Shape(g.sizes()) == Shape(x.sizes()),
                             "gelu_backward: grad_output and input must match in shape and dtype");
               Tensor out = ops::empty_as(x, x.dtype());
               auto op = a[2].str() == "tanh" ? kernels::BinaryOp::GeluTanhBackward : kernels::BinaryOp::GeluBackward;
               kernels::binary_kernel(op, g, x, out);
               return std::vector<Tensor>{out};
             },
         .backward =
             [](BackwardContext& c) {
               const Tensor& gout = c.input("grad_output");
               const Tensor& xx = c.input("input");
               const Tensor& gg = c.grad();
               Tensor d_grad = gelu_backward(gg, xx, c.arg("approximate").str());
               Tensor second;
               if (c.arg("approximate").str() == "tanh") {
                 // d/dx of gelu_tanh'(x), from the closed form.
                 const double kb = M_SQRT2 * M_2_SQRTPI * 0.5, kk = 0.044715;
                 Tensor inner = (xx + pow(xx, 3) * W(kk)) * W(kb);
                 Tensor th = tanh(inner);
                 Tensor sech2 = W(1.0) - th * th;
                 Tensor dinner = (W(1.0) + xx * xx * W(3 * kk)) * W(kb);
                 Tensor ddinner = xx * W(6 * kk * kb);
                 Tensor d2 = sech2 * dinner + W(0.5) * xx * (W(-2.0) * th * sech2 * dinner * dinner + sech2 * ddinner);
                 second = gg * gout * d2;
               } else {
                 // d/dx [Phi(x) + x phi(x)] = phi(x) (2 - x^2)
                 Tensor pdf = exp(xx * xx * W(-0.5)) * W(M_2_SQRTPI * M_SQRT1_2 * 0.5);
                 second = gg * gout * pdf * (W(2.0) - xx * xx);
               }
               return std::vector<Tensor>{c.needs_grad("grad_output") ? d_grad : Tensor(), second};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& gen) {
               Tensor gr = sample_uniform({3, 4}, dt, gen), xx = sample_uniform({3, 4}, dt, gen, -3, 3);
               return std::vector<Sample>{{{gr, xx, "none"}}, {{gr, xx, "tanh"}}};
             },
         .ref = "torch.ops.aten.gelu_backward"});

  auto predicate = [&r](const char* schema, UnaryOp /*unused*/, const char* doc, auto fn) {
    r.add({.schema_text = schema,
           .family = "unary",
           .doc = doc,
           .differentiable = false,
           .forward =
               [fn](const Args& a) {
                 const Tensor& x = a.tensor(0);
                 Tensor out = ops::empty_as(x, DType::Bool);
                 kernels::StridedLoop loop({&out, &x});
                 kernels::visit_numeric(x.dtype(), "predicate", [&](auto tag) {
                   using T = typename decltype(tag)::type;
                   kernels::for_each_run(loop, kGrainSize, [&](char** data, const int64_t* s, int64_t n) {
                     for (int64_t i = 0; i < n; ++i)
                       *reinterpret_cast<bool*>(data[0] + i * s[0]) =
                           fn(*reinterpret_cast<const T*>(data[1] + i * s[1]));
                   });
                 });
                 return std::vector<Tensor>{out};
               },
           .dtypes = kNumericTypes,
           .samples = [](DType dt, Generator& gen) {
             std::vector<Sample> out = {{{sample_uniform({3, 4}, dt, gen)}}};
             if (is_floating(dt)) {
               double inf = std::numeric_limits<double>::infinity();
               out.push_back({{tensor<double>({std::nan(""), inf, -inf, 0.0, -2.5}, {5}).to(dt)}, "specials"});
             }
             return out;
           }});
  };
  predicate("isnan(Tensor input) -> Tensor", UnaryOp::Abs, "x != x", [](auto v) {
    if constexpr (std::is_integral_v<decltype(v)>) return false;
    else return std::isnan(float(v));
  });
  predicate("isinf(Tensor input) -> Tensor", UnaryOp::Abs, "|x| == inf", [](auto v) {
    if constexpr (std::is_integral_v<decltype(v)>) return false;
    else return std::isinf(float(v));
  });
  predicate("isfinite(Tensor input) -> Tensor", UnaryOp::Abs, "not NaN and not infinite", [](auto v) {
    if constexpr (std::is_integral_v<decltype(v)>) return true;
    else return std::isfinite(float(v));
  });
  predicate("logical_not(Tensor input) -> Tensor", UnaryOp::Abs, "x == 0", [](auto v) {
    if constexpr (std::is_same_v<decltype(v), double>) return v == 0;
    else if constexpr (std::is_integral_v<decltype(v)>) return v == 0;
    else return float(v) == 0.0f;
  });

  r.add({.schema_text = "bitwise_not(Tensor input) -> Tensor",
         .family = "unary",
         .doc = "~x for integers, not x for bool",
         .differentiable = false,
         .forward =
             [](const Args& a) {
               const Tensor& x = a.tensor(0);
               Tensor out = ops::empty_as(x, x.dtype());
               kernels::StridedLoop loop({&out, &x});
               kernels::visit_integral(x.dtype(), "bitwise_not", [&](auto tag) {
                 using T = typename decltype(tag)::type;
                 kernels::for_each_run(loop, kGrainSize, [&](char** data, const int64_t* s, int64_t n) {
                   for (int64_t i = 0; i < n; ++i) {
                     T v = *reinterpret_cast<const T*>(data[1] + i * s[1]);
                     if constexpr (std::is_same_v<T, bool>) *reinterpret_cast<T*>(data[0] + i * s[0]) = !v;
                     else *reinterpret_cast<T*>(data[0] + i * s[0]) = T(~v);
                   }
                 });
               });
               return std::vector<Tensor>{out};
             },
         .dtypes = {DType::Bool, DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64},
         .samples = [](DType dt, Generator& gen) {
           return std::vector<Sample>{{{sample_uniform({3, 4}, dt, gen, -50, 50)}}};
         }});
}

}  // namespace ops
}  // namespace foundry
