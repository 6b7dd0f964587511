// Tensor-level driver for the unary functions: layouts via the shared loop skeleton, half types
// through float buffers.
#include "kernels/cpu/unary.h"

#include "foundry/autograd/grad_mode.h"

#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/loops.h"

namespace foundry::kernels {

namespace {

template <typename T>
void load_run(const char* p, int64_t stride, float* dst, int64_t n) {
  if constexpr (std::is_same_v<T, Half>) {
    if (stride == 2) return convert_f16_to_f32(reinterpret_cast<const uint16_t*>(p), dst, n);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    if (stride == 2) return convert_bf16_to_f32(reinterpret_cast<const uint16_t*>(p), dst, n);
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = float(*reinterpret_cast<const T*>(p + i * stride));
}

template <typename T>
void store_run(const float* src, char* p, int64_t stride, int64_t n) {
  if constexpr (std::is_same_v<T, Half>) {
    if (stride == 2) return convert_f32_to_f16(src, reinterpret_cast<uint16_t*>(p), n);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    if (stride == 2) return convert_f32_to_bf16(src, reinterpret_cast<uint16_t*>(p), n);
  }
  for (int64_t i = 0; i < n; ++i) *reinterpret_cast<T*>(p + i * stride) = T(src[i]);
}

void simd(UnaryOp op, const float* in, float* out, int64_t n, const UnaryParams& p) { unary_f32(op, in, out, n, p); }
void simd(UnaryOp op, const double* in, double* out, int64_t n, const UnaryParams& p) { unary_f64(op, in, out, n, p); }

}  // namespace

void unary_kernel(UnaryOp op, const Tensor& in, Tensor& out, const UnaryParams& p) {
  StridedLoop loop({&out, &in});
  visit_floating(in.dtype(), unary_op_name(op), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_run(loop, 8192, [&](char** data, const int64_t* s, int64_t n) {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        if (s[0] == sizeof(T) && s[1] == sizeof(T)) {
          simd(op, reinterpret_cast<const T*>(data[1]), reinterpret_cast<T*>(data[0]), n, p);
          return;
        }
        T buf[kChunk];
        for (int64_t i = 0; i < n; i += kChunk) {
          int64_t m = std::min(kChunk, n - i);
          for (int64_t k = 0; k < m; ++k) buf[k] = *reinterpret_cast<const T*>(data[1] + (i + k) * s[1]);
          simd(op, buf, buf, m, p);
          for (int64_t k = 0; k < m; ++k) *reinterpret_cast<T*>(data[0] + (i + k) * s[0]) = buf[k];
        }
      } else {
        float buf[kChunk];
        for (int64_t i = 0; i < n; i += kChunk) {
          int64_t m = std::min(kChunk, n - i);
          load_run<T>(data[1] + i * s[1], s[1], buf, m);
          simd(op, buf, buf, m, p);
          store_run<T>(buf, data[0] + i * s[0], s[0], m);
        }
      }
    });
  });
}

void HalfConvert::round(float* x, int64_t n) const {
  uint16_t narrowed[kChunk];
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t m = std::min(kChunk, n - i);
    narrow(x + i, narrowed, m);
    widen(narrowed, x + i, m);
  }
}

const HalfConvert* half_convert(DType t) {
  static const HalfConvert f16{convert_f16_to_f32, convert_f32_to_f16}, bf16{convert_bf16_to_f32, convert_f32_to_bf16};
  return t == DType::Float16 ? &f16 : t == DType::BFloat16 ? &bf16 : nullptr;
}

Tensor cast_rows(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  const bool widen = dtype == DType::Float32;
  const HalfConvert* hc = half_convert(widen ? x.dtype() : dtype);
  if (!hc || (!widen && x.dtype() != DType::Float32) || !x.is_contiguous() || x.numel() > kGrainSize ||
      (x.requires_grad() && autograd::is_grad_enabled()))
    return x.to(dtype);
  Tensor y = empty(x.sizes(), dtype);
  if (widen) hc->widen(static_cast<const uint16_t*>(x.data_ptr()), y.data<float>(), x.numel());
  else hc->narrow(x.data<float>(), static_cast<uint16_t*>(y.data_ptr()), x.numel());
  return y;
}

}  // namespace foundry::kernels
