// Scalar semantics of the binary functions (PyTorch 1.13's, incl. integer division rules and
// NaN propagation) and the tensor-level driver; float32/float64 runs that are contiguous or
// broadcast a single value go to the SIMD kernels.
#include "kernels/cpu/binary.h"

#include <hwy/cache_control.h>

#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/unary.h"

namespace foundry::kernels {

const char* binary_op_name(BinaryOp op) {
  static const char* names[] = {"add", "sub", "mul", "div", "div_trunc", "floor_divide", "remainder", "fmod",
                                "pow", "atan2", "hypot", "maximum", "minimum", "fmax", "fmin", "copysign",
                                "xlogy", "logaddexp", "eq", "ne", "lt", "le", "gt", "ge", "logical_and",
                                "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor",
                                "bitwise_left_shift", "bitwise_right_shift", "gelu_backward", "gelu_backward"};
  static_assert(sizeof(names) / sizeof(names[0]) == size_t(BinaryOp::Count));
  return names[size_t(op)];
}

bool binary_op_is_predicate(BinaryOp op) { return op >= BinaryOp::Eq && op <= BinaryOp::LogicalXor; }

namespace {

[[noreturn]] void zero_division() { raise<Error>("ZeroDivisionError: integer division by zero"); }

template <typename T>
T int_pow(T base, T exp) {
  if constexpr (std::is_signed_v<T>) {
    if (exp < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exp & 1) ? -1 : 1;
      return 0;
    }
  }
  // Wrapping products in an unsigned type at least as wide as int (narrower ones promote to int).
  using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
  U result = 1, b = U(base);
  auto e = std::make_unsigned_t<T>(exp);
  while (e) {
    if (e & 1) result = U(result * b);
    b = U(b * b);
    e >>= 1;
  }
  return T(result);
}

// Computes op on values of type C (the compute type: T, or float for half types).
template <typename C>
C arith(BinaryOp op, C a, C b, C alpha) {
  if constexpr (std::is_same_v<C, bool>) {
    switch (op) {
      case BinaryOp::Add: return a || (alpha && b);
      case BinaryOp::Mul: return a && b;
      case BinaryOp::Maximum: case BinaryOp::Fmax: return a || b;
      case BinaryOp::Minimum: case BinaryOp::Fmin: return a && b;
      case BinaryOp::BitwiseAnd: return a && b;
      case BinaryOp::BitwiseOr: return a || b;
      case BinaryOp::BitwiseXor: return a != b;
      default: raise<TypeError>("{}: not implemented for 'bool'", binary_op_name(op));
    }
  } else if constexpr (std::is_integral_v<C>) {
    // Wrapping arithmetic (PyTorch's) in an unsigned type at least as wide as int: narrower ones
    // would promote to signed int, where 65535 * 65535 overflows.
    using U = std::conditional_t<(sizeof(C) < sizeof(unsigned)), unsigned, std::make_unsigned_t<C>>;
    switch (op) {
      case BinaryOp::Add: return C(U(a) + U(alpha) * U(b));
      case BinaryOp::Sub: return C(U(a) - U(alpha) * U(b));
      case BinaryOp::Mul: return C(U(a) * U(b));
      case BinaryOp::DivTrunc:
        if (b == 0) zero_division();
        if constexpr (std::is_signed_v<C>) if (b == -1) return C(U(0) - U(a));
        return C(a / b);
      case BinaryOp::DivFloor: {
        if (b == 0) zero_division();
        if constexpr (std::is_signed_v<C>) {
          if (b == -1) return C(U(0) - U(a));
          C q = C(a / b);
          if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
          return q;
        } else {
          return C(a / b);
        }
      }
      case BinaryOp::Remainder: {
        if (b == 0) zero_division();
        if constexpr (std::is_signed_v<C>) {
          if (b == -1) return 0;
          C r = C(a % b);
          if (r != 0 && ((r < 0) != (b < 0))) r = C(r + b);
          return r;
        } else {
          return C(a % b);
        }
      }
      case BinaryOp::Fmod:
        if (b == 0) zero_division();
        if constexpr (std::is_signed_v<C>) if (b == -1) return 0;
        return C(a % b);
      case BinaryOp::Pow: return int_pow(a, b);
      case BinaryOp::Maximum: case BinaryOp::Fmax: return std::max(a, b);
      case BinaryOp::Minimum: case BinaryOp::Fmin: return std::min(a, b);
      case BinaryOp::BitwiseAnd: return C(a & b);
      case BinaryOp::BitwiseOr: return C(a | b);
      case BinaryOp::BitwiseXor: return C(a ^ b);
      case BinaryOp::Shl: {
        constexpr int bits = int(sizeof(C) * 8);
        if (b < 0 || int64_t(b) >= bits) return 0;
        return C(U(a) << U(b));
      }
      case BinaryOp::Shr: {
        constexpr int bits = int(sizeof(C) * 8);
        if (b < 0 || int64_t(b) >= bits) {
          if constexpr (std::is_signed_v<C>) return a < 0 ? C(-1) : C(0);
          return 0;
        }
        return C(a >> b);
      }
      default: raise<TypeError>("{}: not implemented for integer dtypes", binary_op_name(op));
    }
  } else {
    switch (op) {
      case BinaryOp::Add: return a + alpha * b;
      case BinaryOp::Sub: return a - alpha * b;
      case BinaryOp::Mul: return a * b;
      case BinaryOp::Div: return a / b;
      case BinaryOp::DivTrunc: return std::trunc(a / b);
      case BinaryOp::DivFloor: {
        if (b == 0) return a / b;
        C mod = std::fmod(a, b);
        C div = (a - mod) / b;
        if (mod != 0 && ((b < 0) != (mod < 0))) div -= C(1);
        if (div != 0) {
          C fl = std::floor(div);
          if (div - fl > C(0.5)) fl += C(1);
          return fl;
        }
        return std::copysign(C(0), a / b);
      }
      case BinaryOp::Remainder: {
        C mod = std::fmod(a, b);
        if (mod != 0 && ((b < 0) != (mod < 0))) mod += b;
        return mod;
      }
      case BinaryOp::Fmod: return std::fmod(a, b);
      case BinaryOp::Pow: return std::pow(a, b);
      case BinaryOp::Atan2: return std::atan2(a, b);
      case BinaryOp::Hypot: return std::hypot(a, b);
      case BinaryOp::Maximum:
        if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
        return std::max(a, b);
      case BinaryOp::Minimum:
        if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
        return std::min(a, b);
      case BinaryOp::Fmax: return std::fmax(a, b);
      case BinaryOp::Fmin: return std::fmin(a, b);
      case BinaryOp::Copysign: return std::copysign(a, b);
      case BinaryOp::Xlogy:
        if (std::isnan(b)) return b;
        if (a == 0) return 0;
        return a * std::log(b);
      case BinaryOp::Logaddexp: {
        if (std::isinf(a) && a == b) return a;
        C m = std::max(a, b);
        return m + std::log1p(std::exp(-std::fabs(a - b)));
      }
      case BinaryOp::GeluBackward: {
        // b is x: d/dx [x Φ(x)] = Φ(x) + x φ(x)
        const C cdf = C(0.5) * (C(1) + std::erf(b * C(M_SQRT1_2)));
        const C pdf = std::exp(C(-0.5) * b * b) * C(M_2_SQRTPI * M_SQRT1_2 * 0.5);
        return a * (cdf + b * pdf);
      }
      case BinaryOp::GeluTanhBackward: {
        const C k_beta = C(M_SQRT2 * M_2_SQRTPI * 0.5), k_kappa = C(0.044715);
        C x_sq = b * b, x_cube = x_sq * b;
        C inner = k_beta * (b + k_kappa * x_cube);
        C tanh_inner = std::tanh(inner);
        C left = C(0.5) * b, right = C(1) + tanh_inner;
        C left_derivative = C(0.5) * right;
        C right_derivative = left * (C(1) - tanh_inner * tanh_inner) * k_beta * (C(1) + C(3) * k_kappa * x_sq);
        return a * (left_derivative + right_derivative);
      }
      default: raise<TypeError>("{}: not implemented for floating dtypes", binary_op_name(op));
    }
  }
}

template <typename C>
bool predicate(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
    case BinaryOp::LogicalAnd: return bool(a) && bool(b);
    case BinaryOp::LogicalOr: return bool(a) || bool(b);
    case BinaryOp::LogicalXor: return bool(a) != bool(b);
    default: return false;
  }
}

template <typename T>
void run_generic(BinaryOp op, char** data, const int64_t* s, int64_t n, opmath_t<T> alpha) {
  using C = opmath_t<T>;
  if (binary_op_is_predicate(op)) {
    for (int64_t i = 0; i < n; ++i) {
      C a = C(*reinterpret_cast<const T*>(data[1] + i * s[1]));
      C b = C(*reinterpret_cast<const T*>(data[2] + i * s[2]));
      *reinterpret_cast<bool*>(data[0] + i * s[0]) = predicate<C>(op, a, b);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    C a = C(*reinterpret_cast<const T*>(data[1] + i * s[1]));
    C b = C(*reinterpret_cast<const T*>(data[2] + i * s[2]));
    *reinterpret_cast<T*>(data[0] + i * s[0]) = T(arith<C>(op, a, b, alpha));
  }
}

template <typename T>
bool try_simd(BinaryOp op, char** data, const int64_t* s, int64_t n, T alpha, bool stream) {
  constexpr int64_t w = sizeof(T);
  if (s[0] != w) return false;
  bool a_ok = s[1] == w || s[1] == 0, b_ok = s[2] == w || s[2] == 0;
  if (!a_ok || !b_ok) return false;
  auto* a = reinterpret_cast<const T*>(data[1]);
  auto* b = reinterpret_cast<const T*>(data[2]);
  auto* o = reinterpret_cast<T*>(data[0]);
  if constexpr (std::is_same_v<T, float>)
    return binary_simd_f32(op, a, b, o, n, s[1] == 0, s[2] == 0, alpha, stream);
  else
    return binary_simd_f64(op, a, b, o, n, s[1] == 0, s[2] == 0, alpha, stream);
}

// Two dimensions left after coalescing, each inner run contiguous or one value (a row or column
// broadcast over a matrix, a bias added to every row): threads take blocks of whole rows and each
// block is one call of the SIMD kernel, not one per row (each paid a dispatch, the op's switch and
// the loop's setup). False where it does not apply, before any work.
template <typename T>
bool simd_rows(BinaryOp op, const StridedLoop& loop, T alpha, bool stream) {
  constexpr int64_t w = sizeof(T);
  if (loop.sizes.size() != 2 || loop.inner_stride(0) != w) return false;
  const int64_t sa = loop.inner_stride(1), sb = loop.inner_stride(2);
  if ((sa != w && sa != 0) || (sb != w && sb != 0)) return false;
  for (int k = 0; k < 3; ++k)
    if (loop.strides[size_t(k)][0] % w != 0) return false;
  auto simd = [&](const T* a, const T* b, T* o, int64_t n, BinaryRows rows) {
    if constexpr (std::is_same_v<T, float>) return binary_simd_f32(op, a, b, o, n, sa == 0, sb == 0, alpha, stream, rows);
    else return binary_simd_f64(op, a, b, o, n, sa == 0, sb == 0, alpha, stream, rows);
  };
  if (!simd(nullptr, nullptr, nullptr, 0, BinaryRows{0})) return false;  // no SIMD form for op
  const int64_t rows = loop.sizes[0], n = loop.sizes[1];
  const BinaryRows step{1, loop.strides[1][0] / w, loop.strides[2][0] / w, loop.strides[0][0] / w};
  parallel_for(0, rows, std::max<int64_t>(1, kGrainSize / 2 / std::max<int64_t>(n, 1)), [&](int64_t r0, int64_t r1) {
    simd(reinterpret_cast<const T*>(loop.data[1]) + r0 * step.a, reinterpret_cast<const T*>(loop.data[2]) + r0 * step.b,
         reinterpret_cast<T*>(loop.data[0]) + r0 * step.out, n, BinaryRows{r1 - r0, step.a, step.b, step.out});
    if (stream) hwy::FlushStream();
  });
  return true;
}

}  // namespace

void binary_kernel(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out, const Scalar& alpha) {
  FOUNDRY_CHECK(a.dtype() == b.dtype(), "{}: operand dtypes differ ({} vs {})", binary_op_name(op),
                dtype_name(a.dtype()), dtype_name(b.dtype()));
  StridedLoop loop({&out, &a, &b});
  visit_numeric(a.dtype(), binary_op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = opmath_t<T>;
    const C alpha_c = alpha.to<C>();
    const bool pred = binary_op_is_predicate(op);
    // Outputs beyond the caches get non-temporal stores even when written in short runs (a row
    // broadcast's). Beyond the caches: more than 8 MiB per thread. Below that the output stays
    // in cache for whatever reads it next, and streaming it cost more than it saved: a 16 MB
    // broadcast add [2048, 2048] + [2048], regular / streaming stores, 2 threads 0.185 / 0.25-0.31
    // ms, 1 thread 0.57-0.62 / 0.42-0.45 ms (Zen 5 VM). Single runs of 2 MiB or more stream
    // regardless (binary_simd.cpp).
    const bool stream = out.nbytes() > (int64_t(8) << 20) * get_num_threads() && out.is_contiguous();
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      if (!pred && simd_rows<T>(op, loop, alpha_c, stream)) return;
    }
    for_each_run(loop, kGrainSize / 2, [&](char** data, const int64_t* s, int64_t n) {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        if (!pred && try_simd<T>(op, data, s, n, alpha_c, stream)) return;
      }
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        if (!pred && s[0] == 2 && (s[1] == 2 || s[1] == 0) && (s[2] == 2 || s[2] == 0)) {
          // Through float buffers so the SIMD arithmetic and conversions apply.
          float fa[kChunk], fb[kChunk], fo[kChunk];
          for (int64_t i = 0; i < n; i += kChunk) {
            int64_t m = std::min(kChunk, n - i);
            auto load = [&](const char* p, int64_t st, float* dst) {
              if (st == 0) {
                float v = float(*reinterpret_cast<const T*>(p));
                for (int64_t k = 0; k < m; ++k) dst[k] = v;
              } else if constexpr (std::is_same_v<T, Half>) {
                convert_f16_to_f32(reinterpret_cast<const uint16_t*>(p) + i, dst, m);
              } else {
                convert_bf16_to_f32(reinterpret_cast<const uint16_t*>(p) + i, dst, m);
              }
            };
            load(data[1], s[1], fa);
            load(data[2], s[2], fb);
            if (!binary_simd_f32(op, fa, fb, fo, m, false, false, alpha_c))
              for (int64_t k = 0; k < m; ++k) fo[k] = arith<float>(op, fa[k], fb[k], alpha_c);
            if constexpr (std::is_same_v<T, Half>)
              convert_f32_to_f16(fo, reinterpret_cast<uint16_t*>(data[0]) + i, m);
            else
              convert_f32_to_bf16(fo, reinterpret_cast<uint16_t*>(data[0]) + i, m);
          }
          return;
        }
      }
      run_generic<T>(op, data, s, n, alpha_c);
    }, [&] {
      if (stream) hwy::FlushStream();
    });
  });
}

}  // namespace foundry::kernels
