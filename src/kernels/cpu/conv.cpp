// Tensor-level convolution drivers and the direct reference loops (float64 path and the scalar
// twins of the oneDNN kernels).
#include "kernels/cpu/conv.h"

#include <algorithm>
#include <atomic>

#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"

namespace foundry::kernels {

namespace {

std::atomic<bool> g_use_reference{false};

int64_t pad_of(const std::vector<int64_t>& v, size_t i) { return v.size() == 1 ? v[0] : v[i]; }

}  // namespace

void set_conv_use_reference(bool on) { g_use_reference = on; }

namespace {
// Items per thread chunk so that small convolutions stay on one thread.
int64_t grain(int64_t work_per_item) { return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(work_per_item, 1)); }
}  // namespace

// ---- reference loops ---------------------------------------------------------------------------

template <typename T>
void conv_forward_ref(const T* src, const T* wei, const T* bias, T* dst, const ConvGeometry& g) {
  const int64_t Cg = g.C / g.groups, OCg = g.OC / g.groups;
  parallel_for(0, g.N * g.OC, grain(g.OH * g.OW * Cg * g.KH * g.KW), [&](int64_t b, int64_t e) {
    for (int64_t idx = b; idx < e; ++idx) {
      const int64_t n = idx / g.OC, oc = idx % g.OC, grp = oc / OCg;
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          double acc = bias ? double(bias[oc]) : 0.0;
          for (int64_t ic = 0; ic < Cg; ++ic) {
            const T* s = src + ((n * g.C + grp * Cg + ic) * g.H) * g.W;
            const T* w = wei + ((oc * Cg + ic) * g.KH) * g.KW;
            for (int64_t kh = 0; kh < g.KH; ++kh) {
              const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
              if (ih < 0 || ih >= g.H) continue;
              for (int64_t kw = 0; kw < g.KW; ++kw) {
                const int64_t iw = ow * g.sw - g.pw + kw * g.dw;
                if (iw < 0 || iw >= g.W) continue;
                acc += double(s[ih * g.W + iw]) * double(w[kh * g.KW + kw]);
              }
            }
          }
          dst[((n * g.OC + oc) * g.OH + oh) * g.OW + ow] = T(acc);
        }
      }
    }
  });
}

template <typename T>
void conv_backward_data_ref(const T* diff_dst, const T* wei, T* diff_src, const ConvGeometry& g) {
  const int64_t Cg = g.C / g.groups, OCg = g.OC / g.groups;
  // Gather form: each input position sums over the output positions that read it.
  parallel_for(0, g.N * g.C, grain(g.H * g.W * OCg * g.KH * g.KW), [&](int64_t b, int64_t e) {
    for (int64_t idx = b; idx < e; ++idx) {
      const int64_t n = idx / g.C, c = idx % g.C, grp = c / Cg, ic = c % Cg;
      for (int64_t ih = 0; ih < g.H; ++ih) {
        for (int64_t iw = 0; iw < g.W; ++iw) {
          double acc = 0;
          for (int64_t kh = 0; kh < g.KH; ++kh) {
            const int64_t th = ih + g.ph - kh * g.dh;
            if (th < 0 || th % g.sh) continue;
            const int64_t oh = th / g.sh;
            if (oh >= g.OH) continue;
            for (int64_t kw = 0; kw < g.KW; ++kw) {
              const int64_t tw = iw + g.pw - kw * g.dw;
              if (tw < 0 || tw % g.sw) continue;
              const int64_t ow = tw / g.sw;
              if (ow >= g.OW) continue;
              for (int64_t o = 0; o < OCg; ++o) {
                const int64_t oc = grp * OCg + o;
                acc += double(diff_dst[((n * g.OC + oc) * g.OH + oh) * g.OW + ow]) *
                       double(wei[((oc * Cg + ic) * g.KH + kh) * g.KW + kw]);
              }
            }
          }
          diff_src[((n * g.C + c) * g.H + ih) * g.W + iw] = T(acc);
        }
      }
    }
  });
}

template <typename T>
void conv_backward_weights_ref(const T* src, const T* diff_dst, T* diff_wei, const ConvGeometry& g) {
  const int64_t Cg = g.C / g.groups, OCg = g.OC / g.groups;
  parallel_for(0, g.OC * Cg, grain(g.N * g.OH * g.OW * g.KH * g.KW), [&](int64_t b, int64_t e) {
    for (int64_t idx = b; idx < e; ++idx) {
      const int64_t oc = idx / Cg, ic = idx % Cg, grp = oc / OCg;
      for (int64_t kh = 0; kh < g.KH; ++kh) {
        for (int64_t kw = 0; kw < g.KW; ++kw) {
          double acc = 0;
          for (int64_t n = 0; n < g.N; ++n) {
            const T* s = src + ((n * g.C + grp * Cg + ic) * g.H) * g.W;
            const T* d = diff_dst + ((n * g.OC + oc) * g.OH) * g.OW;
            for (int64_t oh = 0; oh < g.OH; ++oh) {
              const int64_t ih = oh * g.sh - g.ph + kh * g.dh;
              if (ih < 0 || ih >= g.H) continue;
              for (int64_t ow = 0; ow < g.OW; ++ow) {
                const int64_t iw = ow * g.sw - g.pw + kw * g.dw;
                if (iw < 0 || iw >= g.W) continue;
                acc += double(s[ih * g.W + iw]) * double(d[oh * g.OW + ow]);
              }
            }
          }
          diff_wei[((oc * Cg + ic) * g.KH + kh) * g.KW + kw] = T(acc);
        }
      }
    }
  });
}

template void conv_forward_ref<float>(const float*, const float*, const float*, float*, const ConvGeometry&);
template void conv_forward_ref<double>(const double*, const double*, const double*, double*, const ConvGeometry&);
template void conv_backward_data_ref<float>(const float*, const float*, float*, const ConvGeometry&);
template void conv_backward_data_ref<double>(const double*, const double*, double*, const ConvGeometry&);
template void conv_backward_weights_ref<float>(const float*, const float*, float*, const ConvGeometry&);
template void conv_backward_weights_ref<double>(const double*, const double*, double*, const ConvGeometry&);

// ---- tensor level ------------------------------------------------------------------------------

int64_t conv_out_size(int64_t in, int64_t k, const ConvArgs& a, size_t dim) {
  const int64_t s = pad_of(a.stride, dim), p = pad_of(a.padding, dim), d = pad_of(a.dilation, dim);
  if (a.transposed) return (in - 1) * s - 2 * p + d * (k - 1) + pad_of(a.output_padding, dim) + 1;
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

namespace {

// 3-D tensors [N, C, L] become [N, C, 1, L].
Tensor as4d(const Tensor& t) { return t.dim() == 3 ? t.unsqueeze(2) : t; }

// 1-d arguments as 2-d ones over a unit height.
ConvArgs as2d(const ConvArgs& a, size_t nsp) {
  if (nsp == 2) return a;
  ConvArgs r = a;
  r.stride = {1, pad_of(a.stride, 0)};
  r.padding = {0, pad_of(a.padding, 0)};
  r.dilation = {1, pad_of(a.dilation, 0)};
  r.output_padding = {0, a.output_padding.empty() ? 0 : pad_of(a.output_padding, 0)};
  return r;
}

// Geometry of the normal convolution behind a call: `src` is the normal conv's input (x, or the
// output of a transposed conv), `dst` its output; `a` in 2-d form.
ConvGeometry geometry(IntList src, IntList wei, IntList dst, const ConvArgs& a) {
  ConvGeometry g;
  g.N = src[0], g.C = src[1], g.H = src[2], g.W = src[3];
  g.OC = wei[0], g.KH = wei[2], g.KW = wei[3];
  g.OH = dst[2], g.OW = dst[3];
  g.groups = a.groups;
  g.sh = pad_of(a.stride, 0), g.sw = pad_of(a.stride, 1);
  g.ph = pad_of(a.padding, 0), g.pw = pad_of(a.padding, 1);
  g.dh = pad_of(a.dilation, 0), g.dw = pad_of(a.dilation, 1);
  return g;
}

enum class Pass { Forward, BackwardData, BackwardWeights };

// Runs one pass in float32 (oneDNN) or float64 (reference) on contiguous tensors.
void run_pass(Pass p, const Tensor& in0, const Tensor& in1, const Tensor& bias, Tensor& out, const ConvGeometry& g) {
  if (out.numel() == 0) return;
  if (in0.numel() == 0 || in1.numel() == 0) {  // nothing to sum over
    out.zero_();
    if (bias.defined() && p == Pass::Forward) out.copy_(bias.view({1, g.OC, 1, 1}).expand(out.sizes()));
    return;
  }
  if (out.dtype() == DType::Float32 && !g_use_reference) {
    const float* b = bias.defined() ? bias.data<float>() : nullptr;
    switch (p) {
      case Pass::Forward: conv_forward_f32(in0.data<float>(), in1.data<float>(), b, out.data<float>(), g); break;
      case Pass::BackwardData: conv_backward_data_f32(in0.data<float>(), in1.data<float>(), out.data<float>(), g); break;
      case Pass::BackwardWeights:
        conv_backward_weights_f32(in0.data<float>(), in1.data<float>(), out.data<float>(), g);
        break;
    }
    return;
  }
  auto go = [&](auto tag) {
    using T = decltype(tag);
    const T* b = bias.defined() ? bias.data<T>() : nullptr;
    switch (p) {
      case Pass::Forward: conv_forward_ref<T>(in0.data<T>(), in1.data<T>(), b, out.data<T>(), g); break;
      case Pass::BackwardData: conv_backward_data_ref<T>(in0.data<T>(), in1.data<T>(), out.data<T>(), g); break;
      case Pass::BackwardWeights: conv_backward_weights_ref<T>(in0.data<T>(), in1.data<T>(), out.data<T>(), g); break;
    }
  };
  if (out.dtype() == DType::Float64) go(double{});
  else go(float{});
}

DType compute_dtype(DType t) { return t == DType::Float64 ? DType::Float64 : DType::Float32; }

}  // namespace

Tensor conv_forward(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const ConvArgs& args) {
  const DType dt = x_in.dtype(), ct = compute_dtype(dt);
  const size_t nsp = size_t(x_in.dim() - 2);
  const ConvArgs& a1 = args;
  Shape out_shape = {x_in.size(0), a1.transposed ? w_in.size(1) * a1.groups : w_in.size(0)};
  for (size_t i = 0; i < nsp; ++i)
    out_shape.push_back(conv_out_size(x_in.size(int64_t(i) + 2), w_in.size(int64_t(i) + 2), a1, i));
  const ConvArgs a = as2d(args, nsp);
  Tensor x = as4d(x_in.to(ct).contiguous()), w = as4d(w_in.to(ct).contiguous());
  Tensor b = b_in.defined() ? b_in.to(ct).contiguous() : Tensor();
  Tensor out = empty(out_shape, ct);
  Tensor out4 = as4d(out);
  if (!a.transposed) {
    run_pass(Pass::Forward, x, w, b, out4, geometry(x.sizes(), w.sizes(), out4.sizes(), a));
  } else {
    // Normal conv: src = out, weight [Cin, Cout / g, k], dst = x.
    run_pass(Pass::BackwardData, x, w, Tensor(), out4, geometry(out4.sizes(), w.sizes(), x.sizes(), a));
    if (b.defined() && out.numel() > 0) {
      Tensor bb = b.view([&] {
        Shape s(size_t(out.dim()), 1);
        s[1] = b.size(0);
        return s;
      }());
      out.add_(bb);
    }
  }
  return ct == dt ? out : out.to(dt);
}

Tensor conv_backward_weight(const Tensor& go_in, const Tensor& x_in, IntList weight_size, const ConvArgs& args) {
  const DType dt = x_in.dtype(), ct = compute_dtype(dt);
  const ConvArgs a = as2d(args, size_t(x_in.dim() - 2));
  Tensor go = as4d(go_in.to(ct).contiguous()), x = as4d(x_in.to(ct).contiguous());
  Tensor dw = empty(weight_size, ct);
  Tensor dw4 = as4d(dw);
  if (!a.transposed) run_pass(Pass::BackwardWeights, x, go, Tensor(), dw4, geometry(x.sizes(), dw4.sizes(), go.sizes(), a));
  else run_pass(Pass::BackwardWeights, go, x, Tensor(), dw4, geometry(go.sizes(), dw4.sizes(), x.sizes(), a));
  return ct == dt ? dw : dw.to(dt);
}

}  // namespace foundry::kernels
