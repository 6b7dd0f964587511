// Binary elementwise ops. `prepare` does PyTorch type promotion and broadcasting as recorded ops
// of their own (to, expand), so each kernel sees one dtype and one shape, and each gradient
// below is written for same-shape operands: the sum back to a broadcast input's shape happens
// once, in expand's gradient.
#include <cmath>

#include "kernels/cpu/binary.h"
#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/loops.h"
#include "ops/common.h"

namespace foundry {

using kernels::BinaryOp;
using ops::Args;
using ops::BackwardContext;
using ops::OpDef;
using ops::Sample;
using ops::Value;

namespace {

Tensor W(double v) { return wrap_scalar(v); }

enum class Promote { Same, ToFloat, IntOnly };

// Casts and broadcasts the tensor arguments at `idx` to a common dtype and shape.
void promote_and_broadcast(Args& a, std::initializer_list<size_t> idx, Promote mode, const char* op) {
  std::vector<Tensor*> ts;
  for (size_t i : idx) ts.push_back(&a[i].tensor());
  ResultTypeState st;
  for (Tensor* t : ts) st.add_tensor(t->dtype(), t->dim(), t->impl()->wrapped_number);
  DType dt = st.result();
  if (mode == Promote::ToFloat && !is_floating(dt)) dt = default_float_dtype();
  if (mode == Promote::IntOnly && is_floating(dt))
    raise<TypeError>("{}: not implemented for '{}' (integer and bool dtypes only)", op, dtype_name(dt));
  Shape shape;
  for (Tensor* t : ts) shape = broadcast_shapes(shape, t->sizes(), op);
  for (Tensor* t : ts) {
    if (t->dtype() != dt) *t = t->to(dt);
    if (!(Shape(t->sizes()) == shape)) *t = t->expand(shape);
  }
}

struct BinarySpec {
  std::string schema;
  BinaryOp op;
  std::string doc;
  Promote promote = Promote::Same;
  std::vector<std::string> saves = {};
  std::vector<int> saves_outputs = {};
  // Gradients of (input, other); null: not differentiable.
  std::function<std::vector<Tensor>(BackwardContext&)> grad = nullptr;
  std::vector<DType> dtypes = {};
  enum class Values { Any, NonZeroOther, Positive, Shifts, Small } values = Values::Any;
  std::string ref = "";
};

const std::vector<DType> kNoBool = {DType::UInt8,   DType::Int8,     DType::Int16,   DType::Int32,  DType::Int64,
                                    DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};

std::vector<Sample> binary_samples(DType dt, Generator& g, BinarySpec::Values v) {
  auto lhs = [&](IntList s) {
    if (v == BinarySpec::Values::Positive) return ops::sample_uniform(s, dt, g, 0.5, 2.5);
    if (v == BinarySpec::Values::Shifts) return ops::sample_uniform(s, dt, g, -60, 60);
    return ops::sample_uniform(s, dt, g, -3, 3);
  };
  auto rhs = [&](IntList s) {
    if (v == BinarySpec::Values::NonZeroOther) return ops::sample_away_from_zero(s, dt, g, 0.5, 3.0);
    if (v == BinarySpec::Values::Positive) return ops::sample_uniform(s, dt, g, 0.5, 2.5);
    if (v == BinarySpec::Values::Shifts) return ops::sample_uniform(s, dt, g, 0, is_integral(dt) ? 6 : 3);
    if (v == BinarySpec::Values::Small) return ops::sample_uniform(s, dt, g, -2, 2);
    return ops::sample_uniform(s, dt, g, -3, 3);
  };
  std::vector<Sample> out = {
      {{lhs({3, 4}), rhs({3, 4})}},
      {{lhs({3, 1}), rhs({1, 4})}, "broadcast"},
      {{lhs({2, 3, 4}), rhs({4})}, "broadcast rank"},
      {{lhs({}), rhs({})}, "0-d"},
      {{lhs({0, 3}), rhs({3})}, "empty"},
  };
  if (dt != DType::Bool && v != BinarySpec::Values::Shifts) {
    Tensor s = rhs({});
    Scalar sv = s.item();
    out.push_back({{lhs({3, 4}), wrap_scalar(sv)}, "python scalar"});
  }
  return out;
}

void binary_forward(BinaryOp op, const Args& a, Tensor& out) {
  const Tensor& x = a.tensor(0);
  const Tensor& y = a.tensor(1);
  Scalar alpha = 1;
  if (a.size() > 2 && (op == BinaryOp::Add || op == BinaryOp::Sub)) {
    alpha = a[2].scalar();
    if (!is_floating(x.dtype()) && alpha.is_float())
      raise<TypeError>("{}: for integral input tensors, argument alpha must not be a floating point number",
                       kernels::binary_op_name(op));
    if (x.dtype() == DType::Bool && op == BinaryOp::Sub)
      raise<TypeError>("subtraction, the `-` operator, with two bool tensors is not supported; use "
                       "logical_xor() instead");
  }
  kernels::binary_kernel(op, x, y, out, alpha);
}

void register_binary(ops::Registry& r, const BinarySpec& spec) {
  OpDef def;
  def.schema_text = spec.schema;
  def.family = "binary";
  def.doc = spec.doc;
  def.differentiable = bool(spec.grad);
  def.saves = spec.saves;
  def.saves_outputs = spec.saves_outputs;
  const Promote promote = spec.promote;
  const BinaryOp op = spec.op;
  def.prepare = [promote, op](Args& a) { promote_and_broadcast(a, {0, 1}, promote, kernels::binary_op_name(op)); };
  def.forward = [op](const Args& a) {
    const Tensor& x = a.tensor(0);
    Tensor out = ops::empty_as(x, kernels::binary_op_is_predicate(op) ? DType::Bool : x.dtype());
    binary_forward(op, a, out);
    return std::vector<Tensor>{out};
  };
  // In place (x.add_(y)): after promotion and broadcasting x must still be `out` itself, and y
  // must not share out's memory unless it is the very same elements.
  def.forward_into = [op](const Args& a, Tensor& out) {
    const Tensor& x = a.tensor(0);
    const Tensor& y = a.tensor(1);
    if (kernels::binary_op_is_predicate(op) || x.impl() != out.impl() || !out.is_contiguous()) return false;
    if (y.storage() == out.storage() &&
        !(y.storage_offset() == out.storage_offset() && Shape(y.strides()) == Shape(out.strides())))
      return false;
    binary_forward(op, a, out);
    return true;
  };
  if (spec.grad) def.backward = spec.grad;
  def.dtypes = spec.dtypes.empty() ? ops::kNumericTypes : spec.dtypes;
  auto values = spec.values;
  def.samples = [values](DType dt, Generator& g) { return binary_samples(dt, g, values); };
  def.ref = spec.ref;
  r.add(std::move(def));
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) { return ops::call1(FOUNDRY_OP("add"), {a, b, alpha}); }
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) { return ops::call1(FOUNDRY_OP("sub"), {a, b, alpha}); }
Tensor div(const Tensor& a, const Tensor& b, const std::optional<std::string>& mode) {
  return ops::call1(FOUNDRY_OP("div"), {a, b, mode});
}
#define FOUNDRY_BINARY_FN(name) \
  Tensor name(const Tensor& a, const Tensor& b) { return ops::call1(FOUNDRY_OP(#name), {a, b}); }
FOUNDRY_BINARY_FN(mul)
FOUNDRY_BINARY_FN(floor_divide)
FOUNDRY_BINARY_FN(remainder)
FOUNDRY_BINARY_FN(fmod)
FOUNDRY_BINARY_FN(pow)
FOUNDRY_BINARY_FN(atan2)
FOUNDRY_BINARY_FN(hypot)
FOUNDRY_BINARY_FN(maximum)
FOUNDRY_BINARY_FN(minimum)
FOUNDRY_BINARY_FN(fmax)
FOUNDRY_BINARY_FN(fmin)
FOUNDRY_BINARY_FN(copysign)
FOUNDRY_BINARY_FN(xlogy)
FOUNDRY_BINARY_FN(logaddexp)
FOUNDRY_BINARY_FN(eq)
FOUNDRY_BINARY_FN(ne)
FOUNDRY_BINARY_FN(lt)
FOUNDRY_BINARY_FN(le)
FOUNDRY_BINARY_FN(gt)
FOUNDRY_BINARY_FN(ge)
FOUNDRY_BINARY_FN(logical_and)
FOUNDRY_BINARY_FN(logical_or)
FOUNDRY_BINARY_FN(logical_xor)
FOUNDRY_BINARY_FN(bitwise_and)
FOUNDRY_BINARY_FN(bitwise_or)
FOUNDRY_BINARY_FN(bitwise_xor)
FOUNDRY_BINARY_FN(bitwise_left_shift)
FOUNDRY_BINARY_FN(bitwise_right_shift)
#undef FOUNDRY_BINARY_FN
Tensor pow(const Tensor& a, const Scalar& e) { return pow(a, wrap_scalar(e)); }
Tensor where(const Tensor& c, const Tensor& a, const Tensor& b) { return ops::call1(FOUNDRY_OP("where"), {c, a, b}); }
Tensor lerp(const Tensor& s, const Tensor& e, const Tensor& w) { return ops::call1(FOUNDRY_OP("lerp"), {s, e, w}); }
Tensor addcmul(const Tensor& i, const Tensor& t1, const Tensor& t2, const Scalar& v) {
  return ops::call1(FOUNDRY_OP("addcmul"), {i, t1, t2, v});
}
Tensor addcdiv(const Tensor& i, const Tensor& t1, const Tensor& t2, const Scalar& v) {
  return ops::call1(FOUNDRY_OP("addcdiv"), {i, t1, t2, v});
}
Tensor isclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  return ops::call1(FOUNDRY_OP("isclose"), {a, b, rtol, atol, equal_nan});
}
bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  return all(isclose(a, b, rtol, atol, equal_nan)).item<bool>();
}
bool equal(const Tensor& a, const Tensor& b) {
  if (!(Shape(a.sizes()) == Shape(b.sizes()))) return false;
  return all(eq(a, b)).item<bool>();
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, wrap_scalar(b)); }
Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, wrap_scalar(b)); }
Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, wrap_scalar(b)); }
Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, wrap_scalar(b)); }
Tensor operator+(const Scalar& a, const Tensor& b) { return add(wrap_scalar(a), b); }
Tensor operator-(const Scalar& a, const Tensor& b) { return sub(wrap_scalar(a), b); }
Tensor operator*(const Scalar& a, const Tensor& b) { return mul(wrap_scalar(a), b); }
Tensor operator/(const Scalar& a, const Tensor& b) { return div(wrap_scalar(a), b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator<(const Tensor& a, const Scalar& b) { return lt(a, wrap_scalar(b)); }
Tensor operator<=(const Tensor& a, const Scalar& b) { return le(a, wrap_scalar(b)); }
Tensor operator>(const Tensor& a, const Scalar& b) { return gt(a, wrap_scalar(b)); }
Tensor operator>=(const Tensor& a, const Scalar& b) { return ge(a, wrap_scalar(b)); }
Tensor operator==(const Tensor& a, const Scalar& b) { return eq(a, wrap_scalar(b)); }
Tensor operator!=(const Tensor& a, const Scalar& b) { return ne(a, wrap_scalar(b)); }

namespace ops {

void register_binary_ops(Registry& r) {
  using V = BinarySpec::Values;
  const std::vector<std::string> AB = {"input", "other"};
  auto a = [](BackwardContext& c) { return c.input("input"); };
  auto b = [](BackwardContext& c) { return c.input("other"); };
  auto both = [](BackwardContext& c, Tensor ga, Tensor gb) {
    return std::vector<Tensor>{c.needs_grad("input") ? ga : Tensor(), c.needs_grad("other") ? gb : Tensor()};
  };
  std::vector<BinarySpec> specs = {
      {"add(Tensor input, Tensor other, *, Scalar alpha=1) -> Tensor", BinaryOp::Add, "input + alpha * other",
       Promote::Same, {}, {},
       [both](BackwardContext& c) {
         Scalar alpha = c.arg("alpha").scalar();
         return both(c, c.grad(), alpha.to_double() == 1.0 ? c.grad() : c.grad() * alpha);
       }},
      {"sub(Tensor input, Tensor other, *, Scalar alpha=1) -> Tensor", BinaryOp::Sub, "input - alpha * other",
       Promote::Same, {}, {},
       [both](BackwardContext& c) {
         Scalar alpha = c.arg("alpha").scalar();
         return both(c, c.grad(), c.grad() * W(-alpha.to_double()));
       }, kNoBool},
      {"mul(Tensor input, Tensor other) -> Tensor", BinaryOp::Mul, "input * other", Promote::Same, AB, {},
       [both, a, b](BackwardContext& c) {
         return both(c, c.needs_grad("input") ? c.grad() * b(c) : Tensor(),
                     c.needs_grad("other") ? c.grad() * a(c) : Tensor());
       }},
      {"floor_divide(Tensor input, Tensor other) -> Tensor", BinaryOp::DivFloor,
       "floor(input / other); integer division by zero raises", Promote::Same, {}, {}, nullptr, kNoBool, V::NonZeroOther},
      {"remainder(Tensor input, Tensor other) -> Tensor", BinaryOp::Remainder,
       "Python's modulus: the result has the sign of other", Promote::Same, AB, {},
       [both, a, b](BackwardContext& c) {
         return both(c, c.grad(), c.needs_grad("other") ? neg(c.grad()) * floor_divide(a(c), b(c)) : Tensor());
       },
       kNoBool, V::NonZeroOther},
      {"fmod(Tensor input, Tensor other) -> Tensor", BinaryOp::Fmod, "C's fmod: the result has the sign of input",
       Promote::Same, AB, {},
       [both, a, b](BackwardContext& c) {
         return both(c, c.grad(), c.needs_grad("other") ? neg(c.grad()) * trunc(a(c) / b(c)) : Tensor());
       },
       kNoBool, V::NonZeroOther},
      {"pow(Tensor input, Tensor exponent) -> Tensor", BinaryOp::Pow, "input ** exponent", Promote::Same,
       {"input", "exponent"}, {0},
       [](BackwardContext& c) {
         const Tensor& x = c.input("input");
         const Tensor& e = c.input("exponent");
         Tensor gx, ge;
         if (c.needs_grad("input"))
           gx = where(e == Scalar(0), W(0.0), c.grad() * e * pow(x, e - Scalar(1)));
         if (c.needs_grad("exponent")) {
           Tensor mask = logical_and(x == Scalar(0), e >= Scalar(0));
           ge = c.grad() * where(mask, W(0.0), c.output(0) * log(x));
         }
         return std::vector<Tensor>{gx, ge};
       },
       kNoBool, V::Positive},
      {"atan2(Tensor input, Tensor other) -> Tensor", BinaryOp::Atan2, "angle of (other, input)", Promote::ToFloat,
       AB, {},
       [both, a, b](BackwardContext& c) {
         Tensor rec = c.grad() / (a(c) * a(c) + b(c) * b(c));
         return both(c, rec * b(c), neg(rec) * a(c));
       },
       kIntAndFloat, V::NonZeroOther},
      {"hypot(Tensor input, Tensor other) -> Tensor", BinaryOp::Hypot, "sqrt(input^2 + other^2)", Promote::Same, AB,
       {0},
       [both, a, b](BackwardContext& c) {
         Tensor q = c.grad() / c.output(0);
         return both(c, q * a(c), q * b(c));
       },
       kFloatTypes, V::NonZeroOther},
      {"maximum(Tensor input, Tensor other) -> Tensor", BinaryOp::Maximum, "elementwise max; NaN propagates",
       Promote::Same, AB, {},
       [both, a, b](BackwardContext& c) {
         Tensor half = c.grad() / W(2.0);
         Tensor ga = where(a(c) == b(c), half, where(a(c) < b(c), W(0.0), c.grad()));
         Tensor gb = where(a(c) == b(c), half, where(b(c) < a(c), W(0.0), c.grad()));
         return both(c, ga, gb);
       }},
      {"minimum(Tensor input, Tensor other) -> Tensor", BinaryOp::Minimum, "elementwise min; NaN propagates",
       Promote::Same, AB, {},
       [both, a, b](BackwardContext& c) {
         Tensor half = c.grad() / W(2.0);
         Tensor ga = where(a(c) == b(c), half, where(a(c) > b(c), W(0.0), c.grad()));
         Tensor gb = where(a(c) == b(c), half, where(b(c) > a(c), W(0.0), c.grad()));
         return both(c, ga, gb);
       }},
      {"fmax(Tensor input, Tensor other) -> Tensor", BinaryOp::Fmax, "elementwise max ignoring NaN", Promote::Same,
       AB, {},
       [both, a, b](BackwardContext& c) {
         Tensor take_a = logical_or(a(c) >= b(c), isnan(b(c)));
         return both(c, where(take_a, c.grad(), W(0.0)), where(take_a, W(0.0), c.grad()));
       }},
      {"fmin(Tensor input, Tensor other) -> Tensor", BinaryOp::Fmin, "elementwise min ignoring NaN", Promote::Same,
       AB, {},
       [both, a, b](BackwardContext& c) {
         Tensor take_a = logical_or(a(c) <= b(c), isnan(b(c)));
         return both(c, where(take_a, c.grad(), W(0.0)), where(take_a, W(0.0), c.grad()));
       }},
      {"copysign(Tensor input, Tensor other) -> Tensor", BinaryOp::Copysign, "|input| with the sign of other",
       Promote::ToFloat, {"input"}, {0},
       [both, a](BackwardContext& c) {
         Tensor ga = where(a(c) == Scalar(0), W(0.0), c.grad() * c.output(0) / a(c));
         return both(c, ga, c.needs_grad("other") ? zeros_like(c.grad()) : Tensor());
       },
       kIntAndFloat, V::NonZeroOther},
      {"xlogy(Tensor input, Tensor other) -> Tensor", BinaryOp::Xlogy, "input * log(other), 0 where input == 0",
       Promote::ToFloat, AB, {},
       [both, a, b](BackwardContext& c) {
         Tensor ga = c.needs_grad("input") ? c.grad() * xlogy((a(c) != Scalar(0)).to(a(c).dtype()), b(c)) : Tensor();
         return both(c, ga, c.grad() * a(c) / b(c));
       },
       kIntAndFloat, V::Positive},
      {"logaddexp(Tensor input, Tensor other) -> Tensor", BinaryOp::Logaddexp, "log(e^input + e^other), stable",
       Promote::Same, AB, {},
       [both, a, b](BackwardContext& c) {
         return both(c, c.grad() / (exp(b(c) - a(c)) + W(1.0)), c.grad() / (exp(a(c) - b(c)) + W(1.0)));
       },
       kFloatTypes},
      {"eq(Tensor input, Tensor other) -> Tensor", BinaryOp::Eq, "input == other", Promote::Same, {}, {}, nullptr, {},
       V::Small},
      {"ne(Tensor input, Tensor other) -> Tensor", BinaryOp::Ne, "input != other", Promote::Same, {}, {}, nullptr, {},
       V::Small},
      {"lt(Tensor input, Tensor other) -> Tensor", BinaryOp::Lt, "input < other", Promote::Same, {}, {}, nullptr, {},
       V::Small},
      {"le(Tensor input, Tensor other) -> Tensor", BinaryOp::Le, "input <= other", Promote::Same, {}, {}, nullptr, {},
       V::Small},
      {"gt(Tensor input, Tensor other) -> Tensor", BinaryOp::Gt, "input > other", Promote::Same, {}, {}, nullptr, {},
       V::Small},
      {"ge(Tensor input, Tensor other) -> Tensor", BinaryOp::Ge, "input >= other", Promote::Same, {}, {}, nullptr, {},
       V::Small},
      {"logical_and(Tensor input, Tensor other) -> Tensor", BinaryOp::LogicalAnd, "both nonzero", Promote::Same, {},
       {}, nullptr, {}, V::Small},
      {"logical_or(Tensor input, Tensor other) -> Tensor", BinaryOp::LogicalOr, "either nonzero", Promote::Same, {},
       {}, nullptr, {}, V::Small},
      {"logical_xor(Tensor input, Tensor other) -> Tensor", BinaryOp::LogicalXor, "exactly one nonzero",
       Promote::Same, {}, {}, nullptr, {}, V::Small},
      {"bitwise_and(Tensor input, Tensor other) -> Tensor", BinaryOp::BitwiseAnd, "input & other", Promote::IntOnly,
       {}, {}, nullptr, {DType::Bool, DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64}},
      {"bitwise_or(Tensor input, Tensor other) -> Tensor", BinaryOp::BitwiseOr, "input | other", Promote::IntOnly,
       {}, {}, nullptr, {DType::Bool, DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64}},
      {"bitwise_xor(Tensor input, Tensor other) -> Tensor", BinaryOp::BitwiseXor, "input ^ other", Promote::IntOnly,
       {}, {}, nullptr, {DType::Bool, DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64}},
      {"bitwise_left_shift(Tensor input, Tensor other) -> Tensor", BinaryOp::Shl,
       "input << other (0 when the shift is negative or >= the bit width)", Promote::IntOnly, {}, {}, nullptr,
       {DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64}, V::Shifts},
      {"bitwise_right_shift(Tensor input, Tensor other) -> Tensor", BinaryOp::Shr,
       "arithmetic input >> other (sign fill for large shifts)", Promote::IntOnly, {}, {}, nullptr,
       {DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64}, V::Shifts},
  };
  for (const BinarySpec& s : specs) register_binary(r, s);

  r.add({.schema_text = "div(Tensor input, Tensor other, *, str? rounding_mode=None) -> Tensor",
         .family = "binary",
         .doc = "True division (integers become floats); rounding_mode 'trunc' or 'floor' keeps integers.",
         .saves = {"input", "other"},
         .prepare =
             [](Args& args) {
               bool mode = !args[2].is_none();
               promote_and_broadcast(args, {0, 1}, mode ? Promote::Same : Promote::ToFloat, "div");
             },
         .forward =
             [](const Args& args) {
               const Tensor& x = args.tensor(0);
               BinaryOp op = BinaryOp::Div;
               if (!args[2].is_none()) {
                 const std::string& m = args[2].str();
                 if (m == "trunc") op = BinaryOp::DivTrunc;
                 else if (m == "floor") op = BinaryOp::DivFloor;
                 else raise<ValueError>("div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{}'", m);
               }
               Tensor out = ops::empty_as(x, x.dtype());
               kernels::binary_kernel(op, x, args.tensor(1), out);
               return std::vector<Tensor>{out};
             },
         .backward =
             [both](BackwardContext& c) {
               if (!c.arg("rounding_mode").is_none())
                 return both(c, zeros_like(c.grad()), zeros_like(c.grad()));
               const Tensor& x = c.input("input");
               const Tensor& y = c.input("other");
               return both(c, c.needs_grad("input") ? c.grad() / y : Tensor(),
                           c.needs_grad("other") ? neg(c.grad()) * x / (y * y) : Tensor());
             },
         .dtypes = kNoBool,
         .samples =
             [](DType dt, Generator& g) {
               auto s = binary_samples(dt, g, BinarySpec::Values::NonZeroOther);
               std::vector<Sample> out;
               for (auto& smp : s) {
                 if (dt == DType::Bool) continue;
                 Sample a = smp, b = smp, c = smp;
                 a.args.push_back(Value());
                 b.args.push_back("trunc");
                 c.args.push_back("floor");
                 out.push_back(a);
                 out.push_back(b);
                 out.push_back(c);
               }
               return out;
             }});

  r.add({.schema_text = "where(Tensor condition, Tensor input, Tensor other) -> Tensor",
         .family = "binary",
         .doc = "input where condition else other (all three broadcast).",
         .saves = {"condition"},
         .prepare =
             [](Args& args) {
               Tensor& cond = args[0].tensor();
               FOUNDRY_CHECK_AS(TypeError, cond.dtype() == DType::Bool || cond.dtype() == DType::UInt8,
                                "where expected condition to be a boolean tensor, but got a tensor with dtype {}",
                                dtype_name(cond.dtype()));
               promote_and_broadcast(args, {1, 2}, Promote::Same, "where");
               Shape shape = broadcast_shapes(cond.sizes(), args.tensor(1).sizes(), "where");
               if (!(Shape(cond.sizes()) == shape)) cond = cond.expand(shape);
               for (size_t i : {size_t(1), size_t(2)})
                 if (!(Shape(args.tensor(i).sizes()) == shape)) args[i].tensor() = args.tensor(i).expand(shape);
             },
         .forward =
             [](const Args& args) {
               const Tensor& cond = args.tensor(0);
               const Tensor& x = args.tensor(1);
               const Tensor& y = args.tensor(2);
               Tensor out = ops::empty_as(x, x.dtype());
               kernels::StridedLoop loop({&out, &cond, &x, &y});
               kernels::visit_all(x.dtype(), "where", [&](auto tag) {
                 using T = typename decltype(tag)::type;
                 kernels::for_each_run(loop, kGrainSize, [&](char** d, const int64_t* s, int64_t n) {
                   for (int64_t i = 0; i < n; ++i) {
                     bool c = *reinterpret_cast<const uint8_t*>(d[1] + i * s[1]) != 0;
                     *reinterpret_cast<T*>(d[0] + i * s[0]) =
                         *reinterpret_cast<const T*>(d[c ? 2 : 3] + i * s[c ? 2 : 3]);
                   }
                 });
               });
               return std::vector<Tensor>{out};
             },
         .backward =
             [](BackwardContext& c) {
               const Tensor& cond = c.input("condition");
               return std::vector<Tensor>{Tensor(), c.needs_grad("input") ? where(cond, c.grad(), W(0.0)) : Tensor(),
                                          c.needs_grad("other") ? where(cond, W(0.0), c.grad()) : Tensor()};
             },
         .dtypes = kAllTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{
                   {{sample_uniform({3, 4}, DType::Bool, g), sample_uniform({3, 4}, dt, g), sample_uniform({3, 4}, dt, g)}},
                   {{sample_uniform({3, 1}, DType::Bool, g), sample_uniform({1, 4}, dt, g), sample_uniform({}, dt, g)},
                    "broadcast"},
               };
             }});

  r.add({.schema_text = "lerp(Tensor input, Tensor end, Tensor weight) -> Tensor",
         .family = "binary",
         .doc = "input + weight * (end - input)",
         .saves = {"input", "end", "weight"},
         .prepare =
             [](Args& args) {
               promote_and_broadcast(args, {0, 1, 2}, Promote::Same, "lerp");
               FOUNDRY_CHECK_AS(TypeError, is_floating(args.tensor(0).dtype()), "lerp: expected floating inputs, got {}",
                                dtype_name(args.tensor(0).dtype()));
             },
         .forward =
             [](const Args& args) {
               autograd::NoGradGuard ng;
               const Tensor& s = args.tensor(0);
               return std::vector<Tensor>{s + args.tensor(2) * (args.tensor(1) - s)};
             },
         .backward =
             [](BackwardContext& c) {
               const Tensor& w = c.input("weight");
               return std::vector<Tensor>{c.needs_grad("input") ? c.grad() * (W(1.0) - w) : Tensor(),
                                          c.needs_grad("end") ? c.grad() * w : Tensor(),
                                          c.needs_grad("weight") ? c.grad() * (c.input("end") - c.input("input")) : Tensor()};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{
                   {{sample_uniform({3, 4}, dt, g), sample_uniform({3, 4}, dt, g), sample_uniform({3, 4}, dt, g, 0, 1)}},
                   {{sample_uniform({3, 4}, dt, g), sample_uniform({4}, dt, g), wrap_scalar(0.3)}, "scalar weight"}};
             }});

  r.add({.schema_text = "addcmul(Tensor input, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor",
         .family = "binary",
         .doc = "input + value * tensor1 * tensor2",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& args) {
               return std::vector<Tensor>{args.tensor(0) + args.tensor(1) * args.tensor(2) * args[3].scalar()};
             },
         .dtypes = kNumericTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{
                   {{sample_uniform({3, 4}, dt, g), sample_uniform({3, 4}, dt, g), sample_uniform({3, 4}, dt, g), Scalar(1)}},
                   {{sample_uniform({3, 4}, dt, g), sample_uniform({4}, dt, g), sample_uniform({3, 1}, dt, g), Scalar(2)}}};
             }});

  r.add({.schema_text = "addcdiv(Tensor input, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor",
         .family = "binary",
         .doc = "input + value * tensor1 / tensor2",
         .kind = OpDef::Kind::Composite,
         .forward =
             [](const Args& args) {
               FOUNDRY_CHECK_AS(TypeError, is_floating(args.tensor(1).dtype()) || is_floating(args.tensor(2).dtype()),
                                "addcdiv: integer division with addcdiv is not supported; use floating tensors");
               return std::vector<Tensor>{args.tensor(0) + args.tensor(1) / args.tensor(2) * args[3].scalar()};
             },
         .dtypes = kFloatTypes,
         .samples =
             [](DType dt, Generator& g) {
               return std::vector<Sample>{{{sample_uniform({3, 4}, dt, g), sample_uniform({3, 4}, dt, g),
                                            sample_away_from_zero({3, 4}, dt, g), Scalar(0.5)}}};
             }});

  r.add({.schema_text = "isclose(Tensor input, Tensor other, float rtol=1e-05, float atol=1e-08, bool equal_nan=False) -> Tensor",
         .family = "binary",
         .doc = "|input - other| <= atol + rtol * |other| (NumPy semantics, no integer overflow)",
         .differentiable = false,
         .prepare =
             [](Args& args) {
               FOUNDRY_CHECK_AS(TypeError, args.tensor(0).dtype() == args.tensor(1).dtype(),
                                "isclose: {} did not match {}", dtype_name(args.tensor(0).dtype()),
                                dtype_name(args.tensor(1).dtype()));
               promote_and_broadcast(args, {0, 1}, Promote::Same, "isclose");
             },
         .forward =
             [](const Args& args) {
               const Tensor& x = args.tensor(0);
               const Tensor& y = args.tensor(1);
               double rtol = args[2].to_double(), atol = args[3].to_double();
               bool equal_nan = args[4].to_bool();
               FOUNDRY_CHECK_AS(ValueError, rtol >= 0 && atol >= 0, "isclose: rtol and atol must be non-negative");
               Tensor out = ops::empty_as(x, DType::Bool);
               kernels::StridedLoop loop({&out, &x, &y});
               kernels::visit_numeric(x.dtype(), "isclose", [&](auto tag) {
                 using T = typename decltype(tag)::type;
                 kernels::for_each_run(loop, kGrainSize, [&](char** d, const int64_t* s, int64_t n) {
                   for (int64_t i = 0; i < n; ++i) {
                     T va = *reinterpret_cast<const T*>(d[1] + i * s[1]);
                     T vb = *reinterpret_cast<const T*>(d[2] + i * s[2]);
                     bool r;
                     if constexpr (std::is_integral_v<T>) {
                       // max - min computed in unsigned arithmetic: exact, no overflow.
                       using U = std::make_unsigned_t<std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>>;
                       U diff = va >= vb ? U(U(va) - U(vb)) : U(U(vb) - U(va));
                       double bound = atol + rtol * std::fabs(double(vb));
                       r = va == vb || double(diff) <= bound;
                     } else {
                       double fa = double(va), fb = double(vb);
                       if (std::isnan(fa) || std::isnan(fb)) r = equal_nan && std::isnan(fa) && std::isnan(fb);
                       else if (fa == fb) r = true;
                       else if (std::isinf(fa) || std::isinf(fb)) r = false;
                       else r = std::fabs(fa - fb) <= atol + rtol * std::fabs(fb);
                     }
                     *reinterpret_cast<bool*>(d[0] + i * s[0]) = r;
                   }
                 });
               });
               return std::vector<Tensor>{out};
             },
         .dtypes = kNumericTypes,
         .samples =
             [](DType dt, Generator& g) {
               Tensor x = sample_uniform({3, 4}, dt, g);
               Tensor y = is_floating(dt) ? x + sample_uniform({3, 4}, dt, g, -1e-3, 1e-3) : x;
               return std::vector<Sample>{{{x, y, 1e-5, 1e-8, false}}, {{x, y, 1e-2, 1e-3, false}},
                                          {{x, sample_uniform({4}, dt, g), 0.1, 0.5, true}}};
             }});
}

}  // namespace ops
}  // namespace foundry
