// Tensor-level softmax drivers (threads, layouts, half types) and the scalar reference twins.
#include "kernels/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"

namespace foundry::kernels {

namespace {

constexpr int64_t kColBlock = 64;

struct Geometry {
  int64_t outer = 1, D = 1, inner = 1;
};

Geometry geometry(const Tensor& x, int64_t dim) {
  Geometry g;
  if (x.dim() == 0) return g;
  for (int64_t d = 0; d < dim; ++d) g.outer *= x.size(d);
  g.D = x.size(dim);
  for (int64_t d = dim + 1; d < x.dim(); ++d) g.inner *= x.size(d);
  return g;
}

template <typename T>
void forward_typed(const T* x, T* y, const Geometry& g, bool log) {
  if (g.inner == 1) {
    const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(g.D, 1));
    parallel_for(0, g.outer, grain, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float>) softmax_rows_f32(x + b * g.D, y + b * g.D, e - b, g.D, log);
      else softmax_rows_f64(x + b * g.D, y + b * g.D, e - b, g.D, log);
    });
    return;
  }
  const int64_t nblk = (g.inner + kColBlock - 1) / kColBlock;
  const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(g.D * kColBlock, 1));
  parallel_for(0, g.outer * nblk, grain, [&](int64_t b, int64_t e) {
    for (int64_t it = b; it < e; ++it) {
      int64_t o = it / nblk, blk = it % nblk;
      int64_t j0 = blk * kColBlock, j1 = std::min(g.inner, j0 + kColBlock);
      const T* xo = x + o * g.D * g.inner;
      T* yo = y + o * g.D * g.inner;
      if constexpr (std::is_same_v<T, float>) softmax_cols_f32(xo, yo, g.D, g.inner, j0, j1, log);
      else softmax_cols_f64(xo, yo, g.D, g.inner, j0, j1, log);
    }
  });
}

template <typename T>
void backward_typed(const T* gr, const T* y, T* gx, const Geometry& g, bool log) {
  if (g.inner == 1) {
    const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(g.D, 1));
    parallel_for(0, g.outer, grain, [&](int64_t b, int64_t e) {
      const int64_t off = b * g.D;
      if constexpr (std::is_same_v<T, float>) softmax_backward_rows_f32(gr + off, y + off, gx + off, e - b, g.D, log);
      else softmax_backward_rows_f64(gr + off, y + off, gx + off, e - b, g.D, log);
    });
    return;
  }
  const int64_t nblk = (g.inner + kColBlock - 1) / kColBlock;
  const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(g.D * kColBlock, 1));
  parallel_for(0, g.outer * nblk, grain, [&](int64_t b, int64_t e) {
    for (int64_t it = b; it < e; ++it) {
      int64_t o = it / nblk, blk = it % nblk;
      int64_t j0 = blk * kColBlock, j1 = std::min(g.inner, j0 + kColBlock);
      const int64_t off = o * g.D * g.inner;
      if constexpr (std::is_same_v<T, float>)
        softmax_backward_cols_f32(gr + off, y + off, gx + off, g.D, g.inner, j0, j1, log);
      else
        softmax_backward_cols_f64(gr + off, y + off, gx + off, g.D, g.inner, j0, j1, log);
    }
  });
}

// The compute dtype: float for the half types.
DType compute_dtype(DType t) { return t == DType::Float64 ? DType::Float64 : DType::Float32; }

}  // namespace

Tensor softmax_forward(const Tensor& x_in, int64_t dim, bool log) {
  const DType out_dt = x_in.dtype();
  Tensor x = x_in.to(compute_dtype(out_dt)).contiguous();
  Tensor y = empty(x.sizes(), x.dtype());
  Geometry g = geometry(x, dim);
  if (x.numel() > 0) {
    if (x.dtype() == DType::Float32) forward_typed(x.data<float>(), y.data<float>(), g, log);
    else forward_typed(x.data<double>(), y.data<double>(), g, log);
  }
  return y.dtype() == out_dt ? y : y.to(out_dt);
}

Tensor softmax_backward(const Tensor& grad_in, const Tensor& y_in, int64_t dim, bool log) {
  const DType out_dt = grad_in.dtype();
  const DType ct = compute_dtype(out_dt);
  Tensor gr = grad_in.to(ct).contiguous();
  Tensor y = y_in.to(ct).contiguous();
  Tensor gx = empty(gr.sizes(), ct);
  Geometry g = geometry(gr, dim);
  if (gr.numel() > 0) {
    if (ct == DType::Float32) backward_typed(gr.data<float>(), y.data<float>(), gx.data<float>(), g, log);
    else backward_typed(gr.data<double>(), y.data<double>(), gx.data<double>(), g, log);
  }
  return gx.dtype() == out_dt ? gx : gx.to(out_dt);
}

template <typename T>
void softmax_ref(const T* x, T* y, int64_t outer, int64_t D, int64_t inner, bool log) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      auto at = [&](int64_t k) { return o * D * inner + k * inner + j; };
      double m = -std::numeric_limits<double>::infinity();
      bool nan = false;
      for (int64_t k = 0; k < D; ++k) {
        double v = double(x[at(k)]);
        if (std::isnan(v)) nan = true;
        m = std::max(m, v);
      }
      if (nan || !std::isfinite(m)) {
        for (int64_t k = 0; k < D; ++k) y[at(k)] = std::numeric_limits<T>::quiet_NaN();
        continue;
      }
      double s = 0;
      for (int64_t k = 0; k < D; ++k) s += std::exp(double(x[at(k)]) - m);
      for (int64_t k = 0; k < D; ++k) {
        double v = double(x[at(k)]) - m;
        y[at(k)] = T(log ? v - std::log(s) : std::exp(v) / s);
      }
    }
  }
}

template <typename T>
void softmax_backward_ref(const T* g, const T* y, T* gx, int64_t outer, int64_t D, int64_t inner, bool log) {
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t j = 0; j < inner; ++j) {
      auto at = [&](int64_t k) { return o * D * inner + k * inner + j; };
      double s = 0;
      for (int64_t k = 0; k < D; ++k) s += log ? double(g[at(k)]) : double(g[at(k)]) * double(y[at(k)]);
      for (int64_t k = 0; k < D; ++k) {
        double gv = double(g[at(k)]), yv = double(y[at(k)]);
        gx[at(k)] = T(log ? gv - std::exp(yv) * s : yv * (gv - s));
      }
    }
  }
}

template void softmax_ref<float>(const float*, float*, int64_t, int64_t, int64_t, bool);
template void softmax_ref<double>(const double*, double*, int64_t, int64_t, int64_t, bool);
template void softmax_backward_ref<float>(const float*, const float*, float*, int64_t, int64_t, int64_t, bool);
template void softmax_backward_ref<double>(const double*, const double*, double*, int64_t, int64_t, int64_t, bool);

}  // namespace foundry::kernels
