// Tensor-level normalisation drivers (threads, half types through float) and scalar twins.
#include "kernels/cpu/norm.h"

#include <algorithm>
#include <cmath>

#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/unary.h"

namespace foundry::kernels {

namespace {

DType compute_dtype(DType t) { return t == DType::Float64 ? DType::Float64 : DType::Float32; }

Tensor prep(const Tensor& t, DType ct) { return t.defined() ? cast_rows(t, ct).contiguous() : Tensor(); }

template <typename T>
const T* ptr(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

// Splits [0, rows) into at most `get_num_threads()` chunks of at least `min_rows` rows; chunk k
// covers [k * rows / n, (k + 1) * rows / n). Deterministic for a given thread count.
int64_t num_chunks(int64_t rows, int64_t min_rows) {
  if (rows <= 0) return 0;
  return std::max<int64_t>(1, std::min<int64_t>(get_num_threads(), rows / std::max<int64_t>(min_rows, 1)));
}

}  // namespace

std::vector<Tensor> layer_norm_forward(const Tensor& x, int64_t n, const Tensor& w, const Tensor& b, double eps,
                                       IntList stat_shape) {
  const DType dt = x.dtype(), ct = compute_dtype(dt);
  Tensor xc = prep(x, ct), wc = prep(w, ct), bc = prep(b, ct);
  const int64_t M = numel_of(stat_shape);
  Tensor y = empty(x.sizes(), ct), mean = empty(stat_shape, ct), rstd = empty(stat_shape, ct);
  const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n, 1));
  if (ct == DType::Float32) {
    parallel_for(0, M, grain, [&](int64_t r0, int64_t r1) {
      layer_norm_rows_f32(xc.data<float>() + r0 * n, ptr<float>(wc), ptr<float>(bc), y.data<float>() + r0 * n,
                          mean.data<float>() + r0, rstd.data<float>() + r0, r1 - r0, n, float(eps));
    });
  } else {
    parallel_for(0, M, grain, [&](int64_t r0, int64_t r1) {
      layer_norm_rows_f64(xc.data<double>() + r0 * n, ptr<double>(wc), ptr<double>(bc), y.data<double>() + r0 * n,
                          mean.data<double>() + r0, rstd.data<double>() + r0, r1 - r0, n, eps);
    });
  }
  if (ct == dt) return {y, mean, rstd};
  return {cast_rows(y, dt), cast_rows(mean, dt), cast_rows(rstd, dt)};
}

std::vector<Tensor> layer_norm_backward(const Tensor& g, const Tensor& x, const Tensor& w, int64_t n, double eps) {
  const DType dt = x.dtype(), ct = compute_dtype(dt);
  Tensor gc = prep(g, ct), xc = prep(x, ct), wc = prep(w, ct);
  const int64_t M = n > 0 ? x.numel() / n : 0;
  Tensor gx = empty(x.sizes(), ct);
  const int64_t nch = num_chunks(M, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)));
  Tensor acc = zeros({std::max<int64_t>(nch, 1), 2, n}, ct);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    T* ap = acc.data<T>();
    parallel_for(0, nch, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        int64_t r0 = c * M / nch, r1 = (c + 1) * M / nch;
        T* gw = ap + c * 2 * n;
        if constexpr (std::is_same_v<T, float>)
          layer_norm_backward_rows_f32(gc.data<float>() + r0 * n, xc.data<float>() + r0 * n, ptr<float>(wc),
                                       gx.data<float>() + r0 * n, gw, gw + n, r1 - r0, n, float(eps));
        else
          layer_norm_backward_rows_f64(gc.data<double>() + r0 * n, xc.data<double>() + r0 * n, ptr<double>(wc),
                                       gx.data<double>() + r0 * n, gw, gw + n, r1 - r0, n, eps);
      }
    });
    // Sum the per-chunk partial sums in chunk order.
    for (int64_t c = 1; c < nch; ++c)
      for (int64_t i = 0; i < 2 * n; ++i) ap[i] += ap[c * 2 * n + i];
  };
  if (ct == DType::Float32) run(float{});
  else run(double{});
  Tensor gw = acc.select(0, 0).select(0, 0).contiguous(), gb = acc.select(0, 0).select(0, 1).contiguous();
  if (ct == dt) return {gx, gw, gb};
  return {gx.to(dt), gw.to(dt), gb.to(dt)};
}

std::vector<Tensor> rms_norm_forward(const Tensor& x, int64_t n, const Tensor& w, double eps, IntList stat_shape) {
  const DType dt = x.dtype(), ct = compute_dtype(dt);
  const bool half = ct != dt;
  Tensor xc = prep(x, ct), wc = half ? Tensor() : prep(w, ct);
  const int64_t M = numel_of(stat_shape);
  Tensor y = empty(x.sizes(), ct), rstd = empty(stat_shape, ct);
  const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(n, 1));
  if (ct == DType::Float32) {
    parallel_for(0, M, grain, [&](int64_t r0, int64_t r1) {
      rms_norm_rows_f32(xc.data<float>() + r0 * n, ptr<float>(wc), y.data<float>() + r0 * n, rstd.data<float>() + r0,
                        r1 - r0, n, float(eps));
    });
  } else {
    parallel_for(0, M, grain, [&](int64_t r0, int64_t r1) {
      rms_norm_rows_f64(xc.data<double>() + r0 * n, ptr<double>(wc), y.data<double>() + r0 * n,
                        rstd.data<double>() + r0, r1 - r0, n, eps);
    });
  }
  if (!half) return {y, rstd};
  // PyTorch 2.x: the normalised value is rounded to the input dtype before the weight multiplies.
  const HalfConvert* hc = half_convert(dt);
  if (!hc) {
    Tensor yh = y.to(dt);
    if (w.defined()) yh = (yh.to(DType::Float32) * w.to(DType::Float32).contiguous()).to(dt);
    return {yh, rstd.to(dt)};
  }
  // Float16 / BFloat16: both roundings in one pass over the rows (five tensor ops per call
  // before: a bf16 model's decode step runs this once or twice per layer).
  Tensor yh = empty(x.sizes(), dt), wf = w.defined() ? cast_rows(w, DType::Float32).contiguous() : Tensor();
  const float* yp = y.data<float>();
  const float* wp = ptr<float>(wf);
  auto* out = static_cast<uint16_t*>(yh.data_ptr());
  parallel_for(0, M, grain, [&](int64_t r0, int64_t r1) {
    float buf[kChunk];
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t i = 0; i < n; i += kChunk) {
        const int64_t m = std::min(kChunk, n - i);
        const float* yr = yp + r * n + i;
        if (!wp) {
          hc->narrow(yr, out + r * n + i, m);
          continue;
        }
        std::copy(yr, yr + m, buf);
        hc->round(buf, m);
        for (int64_t k = 0; k < m; ++k) buf[k] *= wp[i + k];
        hc->narrow(buf, out + r * n + i, m);
      }
  });
  return {yh, cast_rows(rstd, dt)};
}

std::vector<Tensor> rms_norm_backward(const Tensor& g, const Tensor& x, const Tensor& w, int64_t n, double eps) {
  const DType dt = x.dtype(), ct = compute_dtype(dt);
  Tensor gc = prep(g, ct), xc = prep(x, ct), wc = prep(w, ct);
  const int64_t M = n > 0 ? x.numel() / n : 0;
  Tensor gx = empty(x.sizes(), ct);
  const int64_t nch = num_chunks(M, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)));
  Tensor acc = zeros({std::max<int64_t>(nch, 1), n}, ct);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    T* ap = acc.data<T>();
    parallel_for(0, nch, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        int64_t r0 = c * M / nch, r1 = (c + 1) * M / nch;
        if constexpr (std::is_same_v<T, float>)
          rms_norm_backward_rows_f32(gc.data<float>() + r0 * n, xc.data<float>() + r0 * n, ptr<float>(wc),
                                     gx.data<float>() + r0 * n, ap + c * n, r1 - r0, n, float(eps));
        else
          rms_norm_backward_rows_f64(gc.data<double>() + r0 * n, xc.data<double>() + r0 * n, ptr<double>(wc),
                                     gx.data<double>() + r0 * n, ap + c * n, r1 - r0, n, eps);
      }
    });
    for (int64_t c = 1; c < nch; ++c)
      for (int64_t i = 0; i < n; ++i) ap[i] += ap[c * n + i];
  };
  if (ct == DType::Float32) run(float{});
  else run(double{});
  Tensor gw = acc.select(0, 0).contiguous();
  if (ct == dt) return {gx, gw};
  return {gx.to(dt), gw.to(dt)};
}

std::vector<Tensor> batch_norm_stats(const Tensor& x) {
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / std::max<int64_t>(N * C, 1);
  const DType ct = compute_dtype(x.dtype());
  Tensor xc = prep(x, ct);
  Tensor mean = zeros({C}, DType::Float64), var = zeros({C}, DType::Float64);
  double* mp = mean.data<double>();
  double* vp = var.data<double>();
  const double count = double(N * S);
  parallel_for(0, C, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(N * S, 1)), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      double s = 0;
      for (int64_t n = 0; n < N; ++n) {
        if (ct == DType::Float32) s += sum_f32(xc.data<float>() + (n * C + c) * S, S);
        else s += sum_f64(xc.data<double>() + (n * C + c) * S, S);
      }
      const double m = count > 0 ? s / count : 0.0;
      double q = 0;
      for (int64_t n = 0; n < N; ++n) {
        if (ct == DType::Float32) q += sum_sq_dev_f32(xc.data<float>() + (n * C + c) * S, S, float(m));
        else q += sum_sq_dev_f64(xc.data<double>() + (n * C + c) * S, S, m);
      }
      mp[c] = m;
      vp[c] = count > 0 ? q / count : 0.0;
    }
  });
  return {mean, var};
}

Tensor channel_affine(const Tensor& x, const std::vector<double>& scale, const std::vector<double>& shift) {
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / std::max<int64_t>(N * C, 1);
  const DType dt = x.dtype(), ct = compute_dtype(dt);
  Tensor xc = prep(x, ct);
  Tensor y = empty(x.sizes(), ct);
  parallel_for(0, N * C, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(S, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t c = r % C;
      if (ct == DType::Float32)
        affine_f32(xc.data<float>() + r * S, y.data<float>() + r * S, S, float(scale[size_t(c)]),
                   float(shift[size_t(c)]));
      else
        affine_f64(xc.data<double>() + r * S, y.data<double>() + r * S, S, scale[size_t(c)], shift[size_t(c)]);
    }
  });
  return ct == dt ? y : y.to(dt);
}

// ---- scalar twins ------------------------------------------------------------------------------

template <typename T>
void layer_norm_ref(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int64_t rows, int64_t n, T eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    double s = 0, q = 0;
    for (int64_t i = 0; i < n; ++i) s += double(xr[i]);
    double m = n ? s / double(n) : 0.0;
    for (int64_t i = 0; i < n; ++i) q += (double(xr[i]) - m) * (double(xr[i]) - m);
    double rs = 1.0 / std::sqrt((n ? q / double(n) : 0.0) + double(eps));
    mean[r] = T(m);
    rstd[r] = T(rs);
    for (int64_t i = 0; i < n; ++i)
      y[r * n + i] = T((double(xr[i]) - m) * rs * (w ? double(w[i]) : 1.0) + (b ? double(b[i]) : 0.0));
  }
}

template <typename T>
void layer_norm_backward_ref(const T* g, const T* x, const T* w, T* gx, T* gw, T* gb, int64_t rows, int64_t n, T eps) {
  std::vector<double> gwd(static_cast<size_t>(n), 0.0), gbd(static_cast<size_t>(n), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0, q = 0;
    for (int64_t i = 0; i < n; ++i) s += double(x[r * n + i]);
    const double m = n ? s / double(n) : 0.0;
    for (int64_t i = 0; i < n; ++i) q += (double(x[r * n + i]) - m) * (double(x[r * n + i]) - m);
    const double rs = 1.0 / std::sqrt((n ? q / double(n) : 0.0) + double(eps));
    double sa = 0, sax = 0;
    for (int64_t i = 0; i < n; ++i) {
      double xh = (double(x[r * n + i]) - m) * rs;
      double a = double(g[r * n + i]) * (w ? double(w[i]) : 1.0);
      sa += a;
      sax += a * xh;
      gwd[size_t(i)] += double(g[r * n + i]) * xh;
      gbd[size_t(i)] += double(g[r * n + i]);
    }
    for (int64_t i = 0; i < n; ++i) {
      double xh = (double(x[r * n + i]) - m) * rs;
      double a = double(g[r * n + i]) * (w ? double(w[i]) : 1.0);
      gx[r * n + i] = T(rs * (a - sa / double(n) - xh * sax / double(n)));
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    gw[i] = T(gwd[size_t(i)]);
    gb[i] = T(gbd[size_t(i)]);
  }
}

template <typename T>
void rms_norm_ref(const T* x, const T* w, T* y, T* rstd, int64_t rows, int64_t n, T eps) {
  for (int64_t r = 0; r < rows; ++r) {
    double q = 0;
    for (int64_t i = 0; i < n; ++i) q += double(x[r * n + i]) * double(x[r * n + i]);
    double rs = 1.0 / std::sqrt((n ? q / double(n) : 0.0) + double(eps));
    rstd[r] = T(rs);
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = T(double(x[r * n + i]) * rs * (w ? double(w[i]) : 1.0));
  }
}

template <typename T>
void rms_norm_backward_ref(const T* g, const T* x, const T* w, T* gx, T* gw, int64_t rows, int64_t n, T eps) {
  std::vector<double> gwd(static_cast<size_t>(n), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double q = 0;
    for (int64_t i = 0; i < n; ++i) q += double(x[r * n + i]) * double(x[r * n + i]);
    const double rs = 1.0 / std::sqrt((n ? q / double(n) : 0.0) + double(eps));
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(g[r * n + i]) * (w ? double(w[i]) : 1.0) * double(x[r * n + i]);
    for (int64_t i = 0; i < n; ++i) {
      double a = double(g[r * n + i]) * (w ? double(w[i]) : 1.0);
      gx[r * n + i] = T(rs * a - rs * rs * rs * double(x[r * n + i]) * s / double(n));
      gwd[size_t(i)] += double(g[r * n + i]) * double(x[r * n + i]) * rs;
    }
  }
  for (int64_t i = 0; i < n; ++i) gw[i] = T(gwd[size_t(i)]);
}

template void layer_norm_ref<float>(const float*, const float*, const float*, float*, float*, float*, int64_t, int64_t,
                                    float);
template void layer_norm_ref<double>(const double*, const double*, const double*, double*, double*, double*, int64_t,
                                     int64_t, double);
template void layer_norm_backward_ref<float>(const float*, const float*, const float*, float*, float*, float*, int64_t,
                                             int64_t, float);
template void layer_norm_backward_ref<double>(const double*, const double*, const double*, double*, double*, double*,
                                              int64_t, int64_t, double);
template void rms_norm_ref<float>(const float*, const float*, float*, float*, int64_t, int64_t, float);
template void rms_norm_ref<double>(const double*, const double*, double*, double*, int64_t, int64_t, double);
template void rms_norm_backward_ref<float>(const float*, const float*, const float*, float*, float*, int64_t, int64_t,
                                           float);
template void rms_norm_backward_ref<double>(const double*, const double*, const double*, double*, double*, int64_t,
                                            int64_t, double);

}  // namespace foundry::kernels
