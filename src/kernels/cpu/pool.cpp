// Pooling and resampling kernels (see pool.h). Each runs over planes in parallel; the compute type
// is float for float16/bfloat16/float32 and double for float64, as PyTorch's accscalar_t.
#include "kernels/cpu/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"

namespace foundry::kernels {

namespace {

DType compute_dtype(DType t) { return t == DType::Float64 ? DType::Float64 : DType::Float32; }

Shape with_hw(IntList sizes, int64_t h, int64_t w) {
  Shape s(sizes);
  s[s.size() - 2] = h;
  s[s.size() - 1] = w;
  return s;
}

// Runs fn(plane) over all planes of an [..., H, W] tensor, several planes per task when small.
template <typename F>
void each_plane(int64_t planes, int64_t work_per_plane, F fn) {
  parallel_for(0, planes, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(work_per_plane, 1)),
               [&](int64_t b, int64_t e) {
                 for (int64_t p = b; p < e; ++p) fn(p);
               });
}

int64_t planes_of(IntList sizes) {
  int64_t p = 1;
  for (size_t i = 0; i + 2 < sizes.size(); ++i) p *= sizes[i];
  return p;
}

// Calls body.template operator()<T>() with T = float or double for compute dtype ct.
template <typename F>
void dispatch(DType ct, F&& body) {
  if (ct == DType::Float64) body(double{});
  else body(float{});
}

// PyTorch's compute_scales_value: 1 / scale when a positive scale factor is given, else in / out.
template <typename T>
T scales_value(std::optional<double> scale, int64_t in, int64_t out) {
  return (scale.has_value() && *scale > 0.) ? static_cast<T>(1.0 / *scale) : (static_cast<T>(in) / T(out));
}

int64_t nearest_idx(int64_t out_index, int64_t in, int64_t out, std::optional<double> scale) {
  if (out == in) return out_index;
  if (out == 2 * in) return out_index >> 1;
  const float s = scales_value<float>(scale, in, out);
  return std::min(static_cast<int64_t>(std::floor(float(out_index) * s)), in - 1);
}

// area_pixel_compute_scale / area_pixel_compute_source_index of PyTorch (linear, not cubic).
template <typename T>
T linear_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (align_corners) return out > 1 ? static_cast<T>(in - 1) / T(out - 1) : T(0);
  return scales_value<T>(scale, in, out);
}
template <typename T>
T linear_source(T scale, int64_t dst, bool align_corners) {
  if (align_corners) return scale * T(dst);
  // (dst + 0.5) is a double in PyTorch's expression; the result is rounded to T.
  const T src = static_cast<T>(double(scale) * (double(dst) + 0.5) - 0.5);
  return src < T(0) ? T(0) : src;
}

// Index pairs and weights of one output coordinate.
template <typename T>
struct LinearTap {
  int64_t i0, i1;
  T l0, l1;
};
template <typename T>
LinearTap<T> linear_tap(T scale, int64_t dst, int64_t in, bool align_corners) {
  const T real = linear_source<T>(scale, dst, align_corners);
  LinearTap<T> t;
  t.i0 = std::min(static_cast<int64_t>(real), in - 1);
  t.i1 = t.i0 + (t.i0 < in - 1 ? 1 : 0);
  t.l1 = std::min(std::max(real - T(t.i0), T(0)), T(1));
  t.l0 = T(1) - t.l1;
  return t;
}

}  // namespace

int64_t pool_out_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
  const int64_t num = in + 2 * pad - dilation * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  // div_rtn: rounds toward negative infinity.
  int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

std::vector<Tensor> max_pool2d_forward(const Tensor& x_in, const Pool2d& p, int64_t OH, int64_t OW) {
  const DType dt = x_in.dtype(), ct = compute_dtype(dt);
  Tensor x = x_in.to(ct).contiguous();
  const int64_t H = x.size(-2), W = x.size(-1), P = planes_of(x.sizes());
  Tensor out = empty(with_hw(x.sizes(), OH, OW), ct), idx = empty(with_hw(x.sizes(), OH, OW), DType::Int64);
  dispatch(ct, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* op = out.data<T>();
    int64_t* ip = idx.data<int64_t>();
    each_plane(P, OH * OW * p.kh * p.kw, [&](int64_t pl) {
      const T* in = xp + pl * H * W;
      for (int64_t oh = 0; oh < OH; ++oh) {
        int64_t ih0 = oh * p.sh - p.ph;
        const int64_t ih1 = std::min(ih0 + (p.kh - 1) * p.dh + 1, H);
        while (ih0 < 0) ih0 += p.dh;
        for (int64_t ow = 0; ow < OW; ++ow) {
          int64_t iw0 = ow * p.sw - p.pw;
          const int64_t iw1 = std::min(iw0 + (p.kw - 1) * p.dw + 1, W);
          while (iw0 < 0) iw0 += p.dw;
          int64_t best_i = ih0 * W + iw0;
          T best = -std::numeric_limits<T>::infinity();
          for (int64_t ih = ih0; ih < ih1; ih += p.dh)
            for (int64_t iw = iw0; iw < iw1; iw += p.dw) {
              const T v = in[ih * W + iw];
              if (v > best || std::isnan(v)) {
                best = v;
                best_i = ih * W + iw;
              }
            }
          op[(pl * OH + oh) * OW + ow] = best;
          ip[(pl * OH + oh) * OW + ow] = best_i;
        }
      }
    });
  });
  return {ct == dt ? out : out.to(dt), idx};
}

Tensor max_pool2d_backward(const Tensor& grad_in, const Tensor& indices, IntList input_sizes) {
  const DType dt = grad_in.dtype(), ct = compute_dtype(dt);
  Tensor g = grad_in.to(ct).contiguous(), idx = indices.contiguous();
  const int64_t H = input_sizes[input_sizes.size() - 2], W = input_sizes[input_sizes.size() - 1];
  const int64_t OH = g.size(-2), OW = g.size(-1), P = planes_of(input_sizes);
  Tensor gi = zeros(input_sizes, ct);
  dispatch(ct, [&](auto tag) {
    using T = decltype(tag);
    const T* gp = g.data<T>();
    const int64_t* ip = idx.data<int64_t>();
    T* out = gi.data<T>();
    each_plane(P, OH * OW, [&](int64_t pl) {
      for (int64_t k = 0; k < OH * OW; ++k) {
        const int64_t i = ip[pl * OH * OW + k];
        if (i < 0 || i >= H * W)
          raise<IndexError>("max_pool2d_with_indices_backward: index {} is out of range for a {}x{} input plane", i, H, W);
        out[pl * H * W + i] += gp[pl * OH * OW + k];
      }
    });
  });
  return ct == dt ? gi : gi.to(dt);
}

namespace {

// Visits the clipped window of output (oh, ow) of avg_pool2d: fn(ih0, ih1, iw0, iw1, divisor);
// returns false (output 0) when the window lies entirely in the padding.
template <typename F>
bool avg_window(const Pool2d& p, int64_t H, int64_t W, int64_t oh, int64_t ow, bool count_include_pad,
                std::optional<int64_t> divisor, F fn) {
  int64_t ih0 = oh * p.sh - p.ph, iw0 = ow * p.sw - p.pw;
  int64_t ih1 = std::min(ih0 + p.kh, H + p.ph), iw1 = std::min(iw0 + p.kw, W + p.pw);
  const int64_t pool_size = (ih1 - ih0) * (iw1 - iw0);
  ih0 = std::max<int64_t>(ih0, 0), iw0 = std::max<int64_t>(iw0, 0);
  ih1 = std::min(ih1, H), iw1 = std::min(iw1, W);
  if (ih0 >= ih1 || iw0 >= iw1) return false;
  const int64_t div = divisor ? *divisor : (count_include_pad ? pool_size : (ih1 - ih0) * (iw1 - iw0));
  fn(ih0, ih1, iw0, iw1, div);
  return true;
}

}  // namespace

Tensor avg_pool2d_forward(const Tensor& x_in, const Pool2d& p, int64_t OH, int64_t OW, bool count_include_pad,
                          std::optional<int64_t> divisor) {
  const DType dt = x_in.dtype(), ct = compute_dtype(dt);
  Tensor x = x_in.to(ct).contiguous();
  const int64_t H = x.size(-2), W = x.size(-1), P = planes_of(x.sizes());
  Tensor out = empty(with_hw(x.sizes(), OH, OW), ct);
  dispatch(ct, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* op = out.data<T>();
    each_plane(P, OH * OW * p.kh * p.kw, [&](int64_t pl) {
      const T* in = xp + pl * H * W;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          T& o = op[(pl * OH + oh) * OW + ow];
          o = T(0);
          avg_window(p, H, W, oh, ow, count_include_pad, divisor,
                     [&](int64_t ih0, int64_t ih1, int64_t iw0, int64_t iw1, int64_t div) {
                       T s = 0;
                       for (int64_t ih = ih0; ih < ih1; ++ih)
                         for (int64_t iw = iw0; iw < iw1; ++iw) s += in[ih * W + iw];
                       o = s / T(div);
                     });
        }
    });
  });
  return ct == dt ? out : out.to(dt);
}

Tensor avg_pool2d_backward(const Tensor& grad_in, IntList input_sizes, const Pool2d& p, bool count_include_pad,
                           std::optional<int64_t> divisor) {
  const DType dt = grad_in.dtype(), ct = compute_dtype(dt);
  Tensor g = grad_in.to(ct).contiguous();
  const int64_t H = input_sizes[input_sizes.size() - 2], W = input_sizes[input_sizes.size() - 1];
  const int64_t OH = g.size(-2), OW = g.size(-1), P = planes_of(input_sizes);
  Tensor gi = zeros(input_sizes, ct);
  dispatch(ct, [&](auto tag) {
    using T = decltype(tag);
    const T* gp = g.data<T>();
    T* out = gi.data<T>();
    each_plane(P, OH * OW * p.kh * p.kw, [&](int64_t pl) {
      T* o = out + pl * H * W;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          const T gv = gp[(pl * OH + oh) * OW + ow];
          avg_window(p, H, W, oh, ow, count_include_pad, divisor,
                     [&](int64_t ih0, int64_t ih1, int64_t iw0, int64_t iw1, int64_t div) {
                       const T d = gv / T(div);
                       for (int64_t ih = ih0; ih < ih1; ++ih)
                         for (int64_t iw = iw0; iw < iw1; ++iw) o[ih * W + iw] += d;
                     });
        }
    });
  });
  return ct == dt ? gi : gi.to(dt);
}

namespace {
// PyTorch's adaptive pooling window [start, end) of output a (of b) over c inputs.
int64_t start_index(int64_t a, int64_t b, int64_t c) { return (a / b) * c + ((a % b) * c) / b; }
int64_t end_index(int64_t a, int64_t b, int64_t c) { return 1 + ((a + 1) * c - 1) / b; }
}  // namespace

Tensor adaptive_avg_pool2d_forward(const Tensor& x_in, int64_t OH, int64_t OW) {
  const DType dt = x_in.dtype(), ct = compute_dtype(dt);
  Tensor x = x_in.to(ct).contiguous();
  const int64_t H = x.size(-2), W = x.size(-1), P = planes_of(x.sizes());
  Tensor out = empty(with_hw(x.sizes(), OH, OW), ct);
  dispatch(ct, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* op = out.data<T>();
    each_plane(P, H * W + OH * OW, [&](int64_t pl) {
      const T* in = xp + pl * H * W;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t ih0 = start_index(oh, OH, H), ih1 = end_index(oh, OH, H);
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t iw0 = start_index(ow, OW, W), iw1 = end_index(ow, OW, W);
          T s = 0;
          for (int64_t ih = ih0; ih < ih1; ++ih)
            for (int64_t iw = iw0; iw < iw1; ++iw) s += in[ih * W + iw];
          op[(pl * OH + oh) * OW + ow] = s / T(ih1 - ih0) / T(iw1 - iw0);
        }
      }
    });
  });
  return ct == dt ? out : out.to(dt);
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_in, IntList input_sizes) {
  const DType dt = grad_in.dtype(), ct = compute_dtype(dt);
  Tensor g = grad_in.to(ct).contiguous();
  const int64_t H = input_sizes[input_sizes.size() - 2], W = input_sizes[input_sizes.size() - 1];
  const int64_t OH = g.size(-2), OW = g.size(-1), P = planes_of(input_sizes);
  Tensor gi = zeros(input_sizes, ct);
  dispatch(ct, [&](auto tag) {
    using T = decltype(tag);
    const T* gp = g.data<T>();
    T* out = gi.data<T>();
    each_plane(P, H * W + OH * OW, [&](int64_t pl) {
      T* o = out + pl * H * W;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const int64_t ih0 = start_index(oh, OH, H), ih1 = end_index(oh, OH, H);
        for (int64_t ow = 0; ow < OW; ++ow) {
          const int64_t iw0 = start_index(ow, OW, W), iw1 = end_index(ow, OW, W);
          const T d = gp[(pl * OH + oh) * OW + ow] / T(ih1 - ih0) / T(iw1 - iw0);
          for (int64_t ih = ih0; ih < ih1; ++ih)
            for (int64_t iw = iw0; iw < iw1; ++iw) o[ih * W + iw] += d;
        }
      }
    });
  });
  return ct == dt ? gi : gi.to(dt);
}

Tensor upsample_nearest2d_forward(const Tensor& x_in, int64_t OH, int64_t OW, std::optional<double> sh,
                                  std::optional<double> sw) {
  const DType dt = x_in.dtype(), ct = compute_dtype(dt);
  Tensor x = x_in.to(ct).contiguous();
  const int64_t H = x.size(-2), W = x.size(-1), P = planes_of(x.sizes());
  Tensor out = empty(with_hw(x.sizes(), OH, OW), ct);
  std::vector<int64_t> hi(static_cast<size_t>(OH)), wi(static_cast<size_t>(OW));
  for (int64_t o = 0; o < OH; ++o) hi[size_t(o)] = nearest_idx(o, H, OH, sh);
  for (int64_t o = 0; o < OW; ++o) wi[size_t(o)] = nearest_idx(o, W, OW, sw);
  dispatch(ct, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* op = out.data<T>();
    each_plane(P, OH * OW, [&](int64_t pl) {
      const T* in = xp + pl * H * W;
      T* o = op + pl * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) o[oh * OW + ow] = in[hi[size_t(oh)] * W + wi[size_t(ow)]];
    });
  });
  return ct == dt ? out : out.to(dt);
}

Tensor upsample_nearest2d_backward(const Tensor& grad_in, IntList input_sizes, std::optional<double> sh,
                                   std::optional<double> sw) {
  const DType dt = grad_in.dtype(), ct = compute_dtype(dt);
  Tensor g = grad_in.to(ct).contiguous();
  const int64_t H = input_sizes[input_sizes.size() - 2], W = input_sizes[input_sizes.size() - 1];
  const int64_t OH = g.size(-2), OW = g.size(-1), P = planes_of(input_sizes);
  Tensor gi = zeros(input_sizes, ct);
  std::vector<int64_t> hi(static_cast<size_t>(OH)), wi(static_cast<size_t>(OW));
  for (int64_t o = 0; o < OH; ++o) hi[size_t(o)] = nearest_idx(o, H, OH, sh);
  for (int64_t o = 0; o < OW; ++o) wi[size_t(o)] = nearest_idx(o, W, OW, sw);
  dispatch(ct, [&](auto tag) {
    using T = decltype(tag);
    const T* gp = g.data<T>();
    T* out = gi.data<T>();
    each_plane(P, OH * OW, [&](int64_t pl) {
      T* o = out + pl * H * W;
      const T* gr = gp + pl * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) o[hi[size_t(oh)] * W + wi[size_t(ow)]] += gr[oh * OW + ow];
    });
  });
  return ct == dt ? gi : gi.to(dt);
}

Tensor upsample_bilinear2d_forward(const Tensor& x_in, int64_t OH, int64_t OW, bool align_corners,
                                   std::optional<double> sh, std::optional<double> sw) {
  const DType dt = x_in.dtype(), ct = compute_dtype(dt);
  Tensor x = x_in.to(ct).contiguous();
  const int64_t H = x.size(-2), W = x.size(-1), P = planes_of(x.sizes());
  Tensor out = empty(with_hw(x.sizes(), OH, OW), ct);
  dispatch(ct, [&](auto tag) {
    using T = decltype(tag);
    const T hs = linear_scale<T>(H, OH, align_corners, sh), ws = linear_scale<T>(W, OW, align_corners, sw);
    std::vector<LinearTap<T>> ht, wt;
    for (int64_t o = 0; o < OH; ++o) ht.push_back(linear_tap<T>(hs, o, H, align_corners));
    for (int64_t o = 0; o < OW; ++o) wt.push_back(linear_tap<T>(ws, o, W, align_corners));
    const T* xp = x.data<T>();
    T* op = out.data<T>();
    each_plane(P, OH * OW * 4, [&](int64_t pl) {
      const T* in = xp + pl * H * W;
      T* o = op + pl * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const LinearTap<T>& h = ht[size_t(oh)];
        const T* r0 = in + h.i0 * W;
        const T* r1 = in + h.i1 * W;
        for (int64_t ow = 0; ow < OW; ++ow) {
          const LinearTap<T>& w = wt[size_t(ow)];
          // PyTorch's evaluation order: rows first (width taps), then the height taps.
          const T t0 = r0[w.i0] * w.l0 + r0[w.i1] * w.l1;
          const T t1 = r1[w.i0] * w.l0 + r1[w.i1] * w.l1;
          o[oh * OW + ow] = t0 * h.l0 + t1 * h.l1;
        }
      }
    });
  });
  return ct == dt ? out : out.to(dt);
}

Tensor upsample_bilinear2d_backward(const Tensor& grad_in, IntList input_sizes, bool align_corners,
                                    std::optional<double> sh, std::optional<double> sw) {
  const DType dt = grad_in.dtype(), ct = compute_dtype(dt);
  Tensor g = grad_in.to(ct).contiguous();
  const int64_t H = input_sizes[input_sizes.size() - 2], W = input_sizes[input_sizes.size() - 1];
  const int64_t OH = g.size(-2), OW = g.size(-1), P = planes_of(input_sizes);
  Tensor gi = zeros(input_sizes, ct);
  dispatch(ct, [&](auto tag) {
    using T = decltype(tag);
    const T hs = linear_scale<T>(H, OH, align_corners, sh), ws = linear_scale<T>(W, OW, align_corners, sw);
    std::vector<LinearTap<T>> ht, wt;
    for (int64_t o = 0; o < OH; ++o) ht.push_back(linear_tap<T>(hs, o, H, align_corners));
    for (int64_t o = 0; o < OW; ++o) wt.push_back(linear_tap<T>(ws, o, W, align_corners));
    const T* gp = g.data<T>();
    T* out = gi.data<T>();
    each_plane(P, OH * OW * 4, [&](int64_t pl) {
      T* o = out + pl * H * W;
      const T* gr = gp + pl * OH * OW;
      for (int64_t oh = 0; oh < OH; ++oh) {
        const LinearTap<T>& h = ht[size_t(oh)];
        for (int64_t ow = 0; ow < OW; ++ow) {
          const LinearTap<T>& w = wt[size_t(ow)];
          const T v = gr[oh * OW + ow];
          o[h.i0 * W + w.i0] += h.l0 * w.l0 * v;
          o[h.i0 * W + w.i1] += h.l0 * w.l1 * v;
          o[h.i1 * W + w.i0] += h.l1 * w.l0 * v;
          o[h.i1 * W + w.i1] += h.l1 * w.l1 * v;
        }
      }
    });
  });
  return ct == dt ? gi : gi.to(dt);
}

}  // namespace foundry::kernels
