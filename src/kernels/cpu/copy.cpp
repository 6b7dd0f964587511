// copy_into: the one strided copy with dtype conversion (every pair of dtypes) and broadcasting.
#include <cmath>
#include <cstring>
#include <limits>

#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"
#include "kernels/cpu/dtype_dispatch.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/transpose.h"
#include "kernels/cpu/unary.h"

namespace foundry {

namespace kernels {

/// Converts one value between element types, without undefined behaviour: floats out of the
/// int64 range (and NaN) become INT64_MIN (what x86's cvttsd2si gives), then wrap to the width.
template <typename To, typename From>
inline To convert_value(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    if constexpr (std::is_integral_v<From>) return v != 0;
    else return float(v) != 0.0f || std::isnan(float(v));
  } else if constexpr (std::is_integral_v<To>) {
    if constexpr (std::is_integral_v<From>) {
      return To(v);
    } else {
      double d;
      if constexpr (std::is_same_v<From, double>) d = v;
      else d = double(float(v));
      if (!(d > -9.2233720368547758e18 && d < 9.2233720368547758e18)) return To(std::numeric_limits<int64_t>::min());
      return To(int64_t(d));
    }
  } else if constexpr (std::is_same_v<To, double>) {
    if constexpr (std::is_integral_v<From>) return double(v);
    else if constexpr (std::is_same_v<From, double>) return v;
    else return double(float(v));
  } else if constexpr (std::is_same_v<To, float>) {
    if constexpr (std::is_integral_v<From>) return float(v);
    else if constexpr (std::is_same_v<From, double>) return float(v);
    else return float(v);
  } else {
    // Half, BFloat16, float8: round once from the widest source value.
    if constexpr (std::is_same_v<From, double>) {
      // Double -> half types round twice through float in PyTorch too (c10 converts via float).
      return To(float(v));
    } else if constexpr (std::is_integral_v<From>) {
      return To(float(v));
    } else {
      return To(float(v));
    }
  }
}

// dst [R, C] contiguous from a source whose rows run down its memory (element (r, c) at
// s[r + c * sc]): the transpose of the [C, R] matrix s with row stride sc, in bands of dst's rows.
template <typename U>
void copy_transposed_tiles(U* d, const U* s, int64_t R, int64_t C, int64_t sc) {
  constexpr int64_t kBand = 16;  // transpose_tiles's tile: bands of whole tiles
  parallel_for(0, (R + kBand - 1) / kBand, std::max<int64_t>(1, (int64_t(1) << 16) / (kBand * std::max<int64_t>(C, 1))),
               [&](int64_t t0, int64_t t1) {
    const int64_t r0 = t0 * kBand, r1 = std::min(R, t1 * kBand);
    // 16-bit elements measured faster along dst, float32 along s (transpose.h); 8-bit ones (not
    // measured) take the 16-bit walk.
    if constexpr (sizeof(U) <= 2) transpose_tiles<TileWalk::AlongDestination>(s + r0, sc, d + r0 * C, C, C, r1 - r0);
    else transpose_tiles<TileWalk::AlongSource>(s + r0, sc, d + r0 * C, C, C, r1 - r0);
  });
}

bool copy_transposed(Tensor& dst, const Tensor& src) {
  const int64_t R = dst.size(0), C = dst.size(1), sc = src.stride(1);
  void* d = dst.data_ptr();
  const void* s = src.data_ptr();
  switch (dst.element_size()) {
    case 1: copy_transposed_tiles(static_cast<uint8_t*>(d), static_cast<const uint8_t*>(s), R, C, sc); return true;
    case 2: copy_transposed_tiles(static_cast<uint16_t*>(d), static_cast<const uint16_t*>(s), R, C, sc); return true;
    case 4: copy_transposed_tiles(static_cast<uint32_t*>(d), static_cast<const uint32_t*>(s), R, C, sc); return true;
    case 8: copy_transposed_tiles(static_cast<uint64_t*>(d), static_cast<const uint64_t*>(s), R, C, sc); return true;
    default: return false;
  }
}

}  // namespace kernels

void copy_into(Tensor& dst, const Tensor& src_in) {
  FOUNDRY_CHECK(dst.defined() && src_in.defined(), "copy: undefined tensor");
  if (dst.numel() == 0) return;
  if (dst.storage()->read_only())
    raise<Error>("copy_: the destination is backed by read-only memory (a memory-mapped file); clone() it first");
  Tensor src = src_in;
  if (!(Shape(src.sizes()) == Shape(dst.sizes()))) {
    Shape b = broadcast_shapes(src.sizes(), dst.sizes(), "copy_");
    FOUNDRY_CHECK(b == Shape(dst.sizes()), "copy_: source of shape {} cannot be broadcast to destination shape {}",
                  shape_str(src.sizes()), shape_str(dst.sizes()));
    src = src.expand(dst.sizes());
  }
  if (src.storage().get() == dst.storage().get() &&
      !(src.storage_offset() == dst.storage_offset() && Shape(src.strides()) == Shape(dst.strides()))) {
    src = src.clone();  // overlapping source and destination: read from a copy
  }
  dst.impl()->storage->bump_version();
  const DType dt = dst.dtype(), st = src.dtype();
  if (dt == st && dst.is_contiguous() && src.is_contiguous()) {
    char* d = static_cast<char*>(dst.data_ptr());
    const char* s = static_cast<const char*>(src.data_ptr());
    const int64_t bytes = dst.nbytes();
    if (d != s)
      parallel_for(0, bytes, int64_t(1) << 20, [&](int64_t b, int64_t e) { std::memmove(d + b, s + b, size_t(e - b)); });
    return;
  }
  // x.t().contiguous(), a Conv1D weight laid out as the rows of its transpose at load.
  if (dt == st && dst.dim() == 2 && dst.is_contiguous() && src.stride(0) == 1 && dst.size(0) > 1 &&
      dst.size(1) > 1 && src.stride(1) >= dst.size(0) && kernels::copy_transposed(dst, src))
    return;
  kernels::StridedLoop loop({&dst, &src});
  kernels::visit_all(dt, "copy", [&](auto dtag) {
    using D = typename decltype(dtag)::type;
    kernels::visit_all(st, "copy", [&](auto stag) {
      using S = typename decltype(stag)::type;
      kernels::for_each_run(loop, kGrainSize, [&](char** data, const int64_t* s, int64_t n) {
        if constexpr (std::is_same_v<D, S>) {
          if (s[0] == sizeof(D) && s[1] == sizeof(D)) {
            std::memmove(data[0], data[1], size_t(n) * sizeof(D));
            return;
          }
        }
        if constexpr (std::is_same_v<S, float> && std::is_same_v<D, BFloat16>) {
          if (s[0] == 2 && s[1] == 4)
            return kernels::convert_f32_to_bf16(reinterpret_cast<const float*>(data[1]),
                                                reinterpret_cast<uint16_t*>(data[0]), n);
        }
        if constexpr (std::is_same_v<S, BFloat16> && std::is_same_v<D, float>) {
          if (s[0] == 4 && s[1] == 2)
            return kernels::convert_bf16_to_f32(reinterpret_cast<const uint16_t*>(data[1]),
                                                reinterpret_cast<float*>(data[0]), n);
        }
        if constexpr (std::is_same_v<S, float> && std::is_same_v<D, Half>) {
          if (s[0] == 2 && s[1] == 4)
            return kernels::convert_f32_to_f16(reinterpret_cast<const float*>(data[1]),
                                               reinterpret_cast<uint16_t*>(data[0]), n);
        }
        if constexpr (std::is_same_v<S, Half> && std::is_same_v<D, float>) {
          if (s[0] == 4 && s[1] == 2)
            return kernels::convert_f16_to_f32(reinterpret_cast<const uint16_t*>(data[1]),
                                               reinterpret_cast<float*>(data[0]), n);
        }
        for (int64_t i = 0; i < n; ++i)
          *reinterpret_cast<D*>(data[0] + i * s[0]) =
              kernels::convert_value<D>(*reinterpret_cast<const S*>(data[1] + i * s[1]));
      });
    });
  });
}

}  // namespace foundry
