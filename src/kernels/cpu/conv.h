// Convolution kernels (1-d and 2-d, grouped, strided, dilated, transposed). float32 runs on oneDNN
// 2.6 primitives (forward, backward-data, backward-weights; cached per shape, blocked layouts
// chosen by oneDNN with reorders from/to NCHW); float16/bfloat16 run through float32; float64 runs
// the direct reference loops below, which are also the scalar twins the tests check oneDNN against.
//
// Every call is expressed as a "normal" convolution src [N, C, H, W] * weight [OC, C/g, KH, KW] ->
// dst [N, OC, OH, OW]; a transposed convolution is the backward-data pass of the normal
// convolution that maps its output back to its input.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "foundry/core/tensor.h"

namespace foundry::kernels {

/// Geometry of a normal 2-d convolution (torch conventions: dilation >= 1, symmetric padding on
/// the left/top; the right/bottom padding is implied by OH/OW and may be smaller, even negative).
struct ConvGeometry {
  int64_t N = 1, C = 1, H = 1, W = 1;  // src
  int64_t OC = 1, KH = 1, KW = 1;      // weight [OC, C / groups, KH, KW]
  int64_t OH = 1, OW = 1;              // dst
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int64_t groups = 1;
};

/// dst = conv(src, wei) + bias (bias may be null).
void conv_forward_f32(const float* src, const float* wei, const float* bias, float* dst, const ConvGeometry& g);
/// diff_src = the adjoint of conv applied to diff_dst (the input gradient / a transposed conv).
void conv_backward_data_f32(const float* diff_dst, const float* wei, float* diff_src, const ConvGeometry& g);
/// diff_wei = d<diff_dst, conv(src, w)>/dw.
void conv_backward_weights_f32(const float* src, const float* diff_dst, float* diff_wei, const ConvGeometry& g);

/// The direct reference loops (accumulating in double), for any of float and double.
template <typename T>
void conv_forward_ref(const T* src, const T* wei, const T* bias, T* dst, const ConvGeometry& g);
template <typename T>
void conv_backward_data_ref(const T* diff_dst, const T* wei, T* diff_src, const ConvGeometry& g);
template <typename T>
void conv_backward_weights_ref(const T* src, const T* diff_dst, T* diff_wei, const ConvGeometry& g);

/// Arguments of torch.convolution (per spatial dim, 1 or 2 dims).
struct ConvArgs {
  std::vector<int64_t> stride, padding, dilation, output_padding;
  int64_t groups = 1;
  bool transposed = false;
};

/// torch.convolution on [N, C, L] or [N, C, H, W] inputs (checked by the caller); any floating
/// dtype. `bias` may be undefined.
Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvArgs& a);
/// The weight gradient of torch.convolution given the output gradient and the input.
Tensor conv_backward_weight(const Tensor& grad_out, const Tensor& x, IntList weight_size, const ConvArgs& a);
/// Output spatial size of torch.convolution for one dim.
int64_t conv_out_size(int64_t in, int64_t k, const ConvArgs& a, size_t dim);

/// Set to force the reference loops for float32 too (tests compare the two paths).
void set_conv_use_reference(bool on);
/// Whether a float32 forward convolution may run Winograd F(4x4, 3x3) where it is faster (3x3,
/// stride 1, many output tiles, AVX-512 CPUs; conv_dnnl.cpp): on unless FOUNDRY_CONV_WINOGRAD=0.
void set_conv_winograd(bool on);
/// oneDNN's name for the kernel a float32 forward convolution of geometry g runs (e.g.
/// "jit_wino_4x3:avx512_core", "jit:avx2").
std::string conv_forward_implementation(const ConvGeometry& g, bool bias);

}  // namespace foundry::kernels
