// Tensor-level attention drivers (layouts, masks, dtypes) and the scalar reference twins.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"

namespace foundry::kernels {

namespace {

std::atomic<bool> g_use_reference{false};

DType compute_dtype(DType t) { return t == DType::Float64 ? DType::Float64 : DType::Float32; }

// Scores of row i of batch-head bh against all keys (masked: -inf), in double.
template <typename T>
void ref_scores(const T* q, const T* k, const AttnShape& s, int64_t bh, int64_t i, std::vector<double>& sc) {
  const T* qi = q + (bh * s.L + i) * s.E;
  const T* mask = static_cast<const T*>(s.mask);
  for (int64_t j = 0; j < s.S; ++j) {
    if (s.causal && j > i) {
      sc[size_t(j)] = -std::numeric_limits<double>::infinity();
      continue;
    }
    const T* kj = k + (bh * s.S + j) * s.E;
    double dot = 0;
    for (int64_t c = 0; c < s.E; ++c) dot += double(qi[c]) * double(kj[c]);
    double v = dot * s.scale;
    if (mask) v += double(mask[s.mask_off[bh] + i * s.ms_i + j * s.ms_j]);
    sc[size_t(j)] = v;
  }
}

}  // namespace

void set_attention_use_reference(bool on) { g_use_reference = on; }

template <typename T>
void attention_forward_ref(const T* q, const T* k, const T* v, T* out, T* lse, const AttnShape& s) {
  parallel_for(0, s.BH * s.L, std::max<int64_t>(1, 4096 / std::max<int64_t>(s.S * (s.E + s.Ev), 1)),
               [&](int64_t b, int64_t e) {
                 std::vector<double> sc(static_cast<size_t>(s.S)), acc(static_cast<size_t>(s.Ev));
                 for (int64_t r = b; r < e; ++r) {
                   const int64_t bh = r / s.L, i = r % s.L;
                   ref_scores(q, k, s, bh, i, sc);
                   double m = -std::numeric_limits<double>::infinity();
                   for (double x : sc) m = std::max(m, x);
                   std::fill(acc.begin(), acc.end(), 0.0);
                   double l = 0;
                   if (m != -std::numeric_limits<double>::infinity()) {
                     for (int64_t j = 0; j < s.S; ++j) {
                       const double p = std::exp(sc[size_t(j)] - m);
                       l += p;
                       const T* vj = v + (bh * s.S + j) * s.Ev;
                       for (int64_t c = 0; c < s.Ev; ++c) acc[size_t(c)] += p * double(vj[c]);
                     }
                   }
                   for (int64_t c = 0; c < s.Ev; ++c)
                     out[r * s.Ev + c] = l > 0 ? T(acc[size_t(c)] / l) : std::numeric_limits<T>::quiet_NaN();
                   lse[r] = T(l > 0 ? m + std::log(l) : -std::numeric_limits<double>::infinity());
                 }
               });
}

template <typename T>
void attention_backward_ref(const T* q, const T* k, const T* v, const T* out, const T* lse, const T* dout, T* dq,
                            T* dk, T* dv, const AttnShape& s) {
  // One batch-head per task: dk / dv sum over its queries.
  parallel_for(0, s.BH, 1, [&](int64_t b, int64_t e) {
    std::vector<double> sc(static_cast<size_t>(s.S));
    std::vector<double> dkb(static_cast<size_t>(s.S * s.E)), dvb(static_cast<size_t>(s.S * s.Ev));
    for (int64_t bh = b; bh < e; ++bh) {
      std::fill(dkb.begin(), dkb.end(), 0.0);
      std::fill(dvb.begin(), dvb.end(), 0.0);
      for (int64_t i = 0; i < s.L; ++i) {
        ref_scores(q, k, s, bh, i, sc);
        const T* qi = q + (bh * s.L + i) * s.E;
        const T* doi = dout + (bh * s.L + i) * s.Ev;
        const T* oi = out + (bh * s.L + i) * s.Ev;
        double D = 0;
        for (int64_t c = 0; c < s.Ev; ++c) D += double(doi[c]) * double(oi[c]);
        if (s.dlse) D -= double(static_cast<const T*>(s.dlse)[bh * s.L + i]);
        std::vector<double> dqi(static_cast<size_t>(s.E), 0.0);
        // The row's own log-sum-exp: lse rounded to T loses log(l) when the scores are near the lowest
        // float (a finite mask over every key).
        double m = -std::numeric_limits<double>::infinity(), l = 0;
        for (double x : sc) m = std::max(m, x);
        for (double x : sc) l += x == -std::numeric_limits<double>::infinity() ? 0.0 : std::exp(x - m);
        const bool exact = std::fabs(double(lse[bh * s.L + i])) < 1e7;
        for (int64_t j = 0; j < s.S; ++j) {
          if (sc[size_t(j)] == -std::numeric_limits<double>::infinity()) continue;
          const double p = exact ? std::exp(sc[size_t(j)] - double(lse[bh * s.L + i])) : std::exp(sc[size_t(j)] - m) / l;
          const T* vj = v + (bh * s.S + j) * s.Ev;
          const T* kj = k + (bh * s.S + j) * s.E;
          double dp = 0;
          for (int64_t c = 0; c < s.Ev; ++c) {
            dp += double(doi[c]) * double(vj[c]);
            dvb[size_t(j * s.Ev + c)] += p * double(doi[c]);
          }
          const double ds = p * (dp - D) * s.scale;
          for (int64_t c = 0; c < s.E; ++c) {
            dqi[size_t(c)] += ds * double(kj[c]);
            dkb[size_t(j * s.E + c)] += ds * double(qi[c]);
          }
        }
        for (int64_t c = 0; c < s.E; ++c) dq[(bh * s.L + i) * s.E + c] = T(dqi[size_t(c)]);
      }
      for (int64_t t = 0; t < s.S * s.E; ++t) dk[bh * s.S * s.E + t] = T(dkb[size_t(t)]);
      for (int64_t t = 0; t < s.S * s.Ev; ++t) dv[bh * s.S * s.Ev + t] = T(dvb[size_t(t)]);
    }
  });
}

template void attention_forward_ref<float>(const float*, const float*, const float*, float*, float*, const AttnShape&);
template void attention_forward_ref<double>(const double*, const double*, const double*, double*, double*,
                                            const AttnShape&);
template void attention_backward_ref<float>(const float*, const float*, const float*, const float*, const float*,
                                            const float*, float*, float*, float*, const AttnShape&);
template void attention_backward_ref<double>(const double*, const double*, const double*, const double*,
                                             const double*, const double*, double*, double*, double*,
                                             const AttnShape&);

namespace {

// Shapes, the additive mask in the compute dtype, and per-batch-head mask offsets.
struct Setup {
  AttnShape s;
  Shape batch;
  Tensor mask;  // additive, compute dtype, expanded to [batch..., L, S] (strides 0 where broadcast)
  std::vector<int64_t> offsets;
};

Setup setup(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask_in, bool causal, double scale,
            DType ct) {
  Setup st;
  for (int64_t d = 0; d + 2 < q.dim(); ++d) st.batch.push_back(q.size(d));
  st.s.BH = numel_of(st.batch);
  st.s.L = q.size(-2), st.s.E = q.size(-1), st.s.S = k.size(-2), st.s.Ev = v.size(-1);
  st.s.scale = scale;
  st.s.causal = causal;
  if (mask_in.defined()) {
    Tensor add = mask_in.dtype() == DType::Bool
                     ? where(mask_in, scalar_tensor(0.0, ct), scalar_tensor(-std::numeric_limits<double>::infinity(), ct))
                     : mask_in.to(ct);
    add = add.contiguous();
    Shape full = st.batch;
    full.push_back(st.s.L);
    full.push_back(st.s.S);
    Tensor ex = add.expand(full);
    st.mask = ex;
    st.s.ms_i = ex.stride(-2), st.s.ms_j = ex.stride(-1);
    st.offsets.resize(size_t(st.s.BH));
    for (int64_t bh = 0; bh < st.s.BH; ++bh) {
      int64_t rem = bh, off = 0;
      for (int64_t d = int64_t(st.batch.size()) - 1; d >= 0; --d) {
        off += (rem % st.batch[size_t(d)]) * ex.stride(d);
        rem /= st.batch[size_t(d)];
      }
      st.offsets[size_t(bh)] = off;
    }
    st.s.mask = ex.data_ptr();
    st.s.mask_off = st.offsets.data();
  }
  return st;
}

}  // namespace

std::vector<Tensor> attention_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const Tensor& mask,
                                      bool causal, double scale) {
  const DType dt = q_in.dtype(), ct = compute_dtype(dt);
  Tensor q = q_in.to(ct).contiguous(), k = k_in.to(ct).contiguous(), v = v_in.to(ct).contiguous();
  Setup st = setup(q, k, v, mask, causal, scale, ct);
  Shape os = st.batch, ls = st.batch;
  os.push_back(st.s.L);
  os.push_back(st.s.Ev);
  ls.push_back(st.s.L);
  Tensor out = empty(os, ct), lse = empty(ls, ct);
  if (out.numel() > 0 || lse.numel() > 0) {
    if (st.s.S == 0) {  // softmax over no keys, times no values: zeros (as the math formula)
      out.zero_();
      lse.fill_(-std::numeric_limits<double>::infinity());
    } else if (ct == DType::Float32 && !g_use_reference && st.s.E > 0 && st.s.Ev > 0) {
      attention_forward_f32(q.data<float>(), k.data<float>(), v.data<float>(), out.data<float>(), lse.data<float>(), st.s);
    } else if (ct == DType::Float32) {
      attention_forward_ref<float>(q.data<float>(), k.data<float>(), v.data<float>(), out.data<float>(),
                                   lse.data<float>(), st.s);
    } else {
      attention_forward_ref<double>(q.data<double>(), k.data<double>(), v.data<double>(), out.data<double>(),
                                    lse.data<double>(), st.s);
    }
  }
  return {ct == dt ? out : out.to(dt), lse};
}

std::vector<Tensor> attention_backward(const Tensor& dout_in, const Tensor& q_in, const Tensor& k_in,
                                       const Tensor& v_in, const Tensor& out_in, const Tensor& lse_in,
                                       const Tensor& dlse_in, const Tensor& mask, bool causal, double scale) {
  const DType dt = q_in.dtype(), ct = compute_dtype(dt);
  Tensor q = q_in.to(ct).contiguous(), k = k_in.to(ct).contiguous(), v = v_in.to(ct).contiguous();
  Tensor dout = dout_in.to(ct).contiguous(), out = out_in.to(ct).contiguous(), lse = lse_in.to(ct).contiguous();
  Setup st = setup(q, k, v, mask, causal, scale, ct);
  Tensor dlse = dlse_in.defined() ? dlse_in.to(ct).contiguous() : Tensor();
  if (dlse.defined()) st.s.dlse = dlse.data_ptr();
  Tensor dq = zeros(q.sizes(), ct), dk = zeros(k.sizes(), ct), dv = zeros(v.sizes(), ct);
  if (st.s.BH > 0 && st.s.L > 0 && st.s.S > 0) {
    if (ct == DType::Float32 && !g_use_reference && st.s.E > 0 && st.s.Ev > 0) {
      attention_backward_f32(q.data<float>(), k.data<float>(), v.data<float>(), out.data<float>(), lse.data<float>(),
                             dout.data<float>(), dq.data<float>(), dk.data<float>(), dv.data<float>(), st.s);
    } else if (ct == DType::Float32) {
      attention_backward_ref<float>(q.data<float>(), k.data<float>(), v.data<float>(), out.data<float>(),
                                    lse.data<float>(), dout.data<float>(), dq.data<float>(), dk.data<float>(),
                                    dv.data<float>(), st.s);
    } else {
      attention_backward_ref<double>(q.data<double>(), k.data<double>(), v.data<double>(), out.data<double>(),
                                     lse.data<double>(), dout.data<double>(), dq.data<double>(), dk.data<double>(),
                                     dv.data<double>(), st.s);
    }
  }
  if (ct == dt) return {dq, dk, dv};
  return {dq.to(dt), dk.to(dt), dv.to(dt)};
}

}  // namespace foundry::kernels
