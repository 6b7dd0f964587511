// Pooling and resampling kernels over [planes, H, W] (planes = N * C), one plane per task. Index
// and coordinate formulas are PyTorch 1.13's CPU kernels (MaxPoolKernel.cpp, AvgPoolKernel.cpp,
// AdaptiveAveragePooling.cpp, UpSample.h / UpSampleKernel.cpp), so window placement, divisors,
// NaN handling and source indices match exactly. float16/bfloat16 are computed in float.
#pragma once

#include <cstdint>
#include <optional>

#include "foundry/core/tensor.h"

namespace foundry::kernels {

struct Pool2d {
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  bool ceil_mode = false;
};

/// PyTorch's pooling_output_shape (with the ceil-mode rule that the last window must start inside
/// the input or the left padding).
int64_t pool_out_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode);

/// x: [..., H, W] contiguous-able; returns {values, int64 indices into H * W}.
std::vector<Tensor> max_pool2d_forward(const Tensor& x, const Pool2d& p, int64_t OH, int64_t OW);
/// Scatters grad (the shape of the pooled output) to the argmax positions of an input of `input_sizes`.
Tensor max_pool2d_backward(const Tensor& grad, const Tensor& indices, IntList input_sizes);

Tensor avg_pool2d_forward(const Tensor& x, const Pool2d& p, int64_t OH, int64_t OW, bool count_include_pad,
                          std::optional<int64_t> divisor);
Tensor avg_pool2d_backward(const Tensor& grad, IntList input_sizes, const Pool2d& p, bool count_include_pad,
                           std::optional<int64_t> divisor);

Tensor adaptive_avg_pool2d_forward(const Tensor& x, int64_t OH, int64_t OW);
Tensor adaptive_avg_pool2d_backward(const Tensor& grad, IntList input_sizes);

/// Nearest: src = min(floor(dst * scale), in - 1) with scale = 1 / scale_factor (given) or in / out.
Tensor upsample_nearest2d_forward(const Tensor& x, int64_t OH, int64_t OW, std::optional<double> sh,
                                  std::optional<double> sw);
Tensor upsample_nearest2d_backward(const Tensor& grad, IntList input_sizes, std::optional<double> sh,
                                   std::optional<double> sw);
/// Bilinear with align_corners (src = dst * (in - 1) / (out - 1)) or without
/// (src = max((dst + 0.5) * scale - 0.5, 0)).
Tensor upsample_bilinear2d_forward(const Tensor& x, int64_t OH, int64_t OW, bool align_corners,
                                   std::optional<double> sh, std::optional<double> sw);
Tensor upsample_bilinear2d_backward(const Tensor& grad, IntList input_sizes, bool align_corners,
                                    std::optional<double> sh, std::optional<double> sw);

}  // namespace foundry::kernels
