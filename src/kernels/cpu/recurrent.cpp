// Scalar kernels of the recurrences (see recurrent.h): the float64 forward, every backward, and the
// reference the SIMD forward is tested against. Parallel over channels, which are independent.
#include "kernels/cpu/recurrent.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "foundry/core/parallel.h"

namespace foundry::kernels {

namespace {
constexpr double kFreshMax = -1e38;  // the max exponent of an empty WKV state (transformers' value)
}

template <typename S>
void rwkv_wkv_forward(const S* w, const S* u, const S* k, const S* v, S* y, S* state, int64_t B, int64_t T, int64_t C) {
  parallel_for(0, C, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, B * T)), [&](int64_t c0, int64_t c1) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = c0; c < c1; ++c) {
        S num = state[(3 * b) * C + c], den = state[(3 * b + 1) * C + c], mx = state[(3 * b + 2) * C + c];
        for (int64_t t = 0; t < T; ++t) {
          const int64_t i = (b * T + t) * C + c;
          const S kt = k[i], vt = v[i];
          S mo = std::max(mx, kt + u[c]);
          S e1 = std::exp(mx - mo), e2 = std::exp(kt + u[c] - mo);
          y[i] = (e1 * num + e2 * vt) / (e1 * den + e2);
          S ms = std::max(mx + w[c], kt);
          e1 = std::exp(mx + w[c] - ms);
          e2 = std::exp(kt - ms);
          num = e1 * num + e2 * vt;
          den = e1 * den + e2;
          mx = ms;
        }
        state[(3 * b) * C + c] = num;
        state[(3 * b + 1) * C + c] = den;
        state[(3 * b + 2) * C + c] = mx;
      }
  });
}

// Reverse pass: ga, gb (the gradients reaching the numerator and denominator states) are kept as
// alpha * exp(q) with a running exponent q, because the states themselves carry factors exp(k)
// that overflow; every exponent taken below is <= 0 by construction of the forward's maxima.
template <typename S>
void rwkv_wkv_backward(const S* w, const S* u, const S* k, const S* v, const S* gy, S* gw, S* gu, S* gk, S* gv,
                       int64_t B, int64_t T, int64_t C) {
  parallel_for(0, C, 1, [&](int64_t c0, int64_t c1) {
    std::vector<S> m(static_cast<size_t>(T)), an(static_cast<size_t>(T)), bn(static_cast<size_t>(T)), p(static_cast<size_t>(T)), den(static_cast<size_t>(T)), yv(static_cast<size_t>(T)), e2v(static_cast<size_t>(T));
    for (int64_t c = c0; c < c1; ++c) {
      S sw = 0, su = 0;
      for (int64_t b = 0; b < B; ++b) {
        S num = 0, dn = 0, mx = S(kFreshMax);
        for (int64_t t = 0; t < T; ++t) {
          const int64_t i = (b * T + t) * C + c;
          m[t] = mx, an[t] = num, bn[t] = dn;
          const S kt = k[i], vt = v[i];
          const S mo = std::max(mx, kt + u[c]);
          const S e1 = std::exp(mx - mo), e2 = std::exp(kt + u[c] - mo);
          p[t] = mo, den[t] = e1 * dn + e2, e2v[t] = e2;
          yv[t] = (e1 * num + e2 * vt) / den[t];
          const S ms = std::max(mx + w[c], kt);
          const S f1 = std::exp(mx + w[c] - ms), f2 = std::exp(kt - ms);
          num = f1 * num + f2 * vt;
          dn = f1 * dn + f2;
          mx = ms;
        }
        S alpha_a = 0, alpha_b = 0, q = S(kFreshMax);
        for (int64_t t = T - 1; t >= 0; --t) {
          const int64_t i = (b * T + t) * C + c;
          const S kt = k[i], vt = v[i], g = gy[i];
          S gkt = 0, gvt = 0;
          if (alpha_a != 0 || alpha_b != 0) {  // through the states after step t
            const S ea = std::exp(q + kt);
            gkt += ea * (alpha_a * vt + alpha_b);
            gvt += ea * alpha_a;
            sw += std::exp(w[c] + q + m[t]) * (alpha_a * an[t] + alpha_b * bn[t]);
          }
          const S direct = g * e2v[t] / den[t];
          gkt += direct * (vt - yv[t]);
          gvt += direct;
          su += direct * (vt - yv[t]);
          gk[i] = gkt;
          gv[i] = gvt;
          const S qn = std::max(-p[t], w[c] + q);
          const S fresh = std::exp(-p[t] - qn) / den[t], carry = std::exp(w[c] + q - qn);
          alpha_a = g * fresh + alpha_a * carry;
          alpha_b = -g * yv[t] * fresh + alpha_b * carry;
          q = qn;
        }
      }
      gw[c] = sw;
      gu[c] = su;
    }
  });
}

template <typename S>
void selective_scan_forward(const S* x, const S* delta, const S* A, const S* Bm, const S* Cm, const S* Dv, S* y,
                            S* state, int64_t B, int64_t L, int64_t D, int64_t N) {
  parallel_for(0, D, std::max<int64_t>(1, 2048 / std::max<int64_t>(1, B * L * N)), [&](int64_t d0, int64_t d1) {
    std::vector<S> h(static_cast<size_t>(N));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t d = d0; d < d1; ++d) {
        S* st = state + (b * D + d) * N;
        std::copy(st, st + N, h.begin());
        for (int64_t t = 0; t < L; ++t) {
          const int64_t i = (b * L + t) * D + d;
          const S dt = delta[i], xt = x[i];
          const S* bt = Bm + (b * L + t) * N;
          const S* ct = Cm + (b * L + t) * N;
          S acc = 0;
          for (int64_t n = 0; n < N; ++n) {
            h[n] = std::exp(A[d * N + n] * dt) * h[n] + dt * bt[n] * xt;
            acc += h[n] * ct[n];
          }
          y[i] = acc + Dv[d] * xt;
        }
        std::copy(h.begin(), h.end(), st);
      }
  });
}

template <typename S>
void selective_scan_backward(const S* x, const S* delta, const S* A, const S* Bm, const S* Cm, const S* Dv,
                             const S* gy, S* gx, S* gdelta, S* gA, S* gB, S* gC, S* gD, int64_t B, int64_t L, int64_t D,
                             int64_t N) {
  // Channels in chunks; each chunk sums its part of gB, gC (shared by all channels) privately.
  const int64_t chunks = std::min<int64_t>(D, 16), per = (D + chunks - 1) / chunks;
  std::vector<S> partB(size_t(chunks * B * L * N), S(0)), partC(size_t(chunks * B * L * N), S(0));
  parallel_for(0, chunks, 1, [&](int64_t k0, int64_t k1) {
    std::vector<S> h(size_t((L + 1) * N)), dA(size_t(L * N)), carry(static_cast<size_t>(N)), gh(static_cast<size_t>(N));
    for (int64_t ch = k0; ch < k1; ++ch) {
      S* pb = partB.data() + ch * B * L * N;
      S* pc = partC.data() + ch * B * L * N;
      for (int64_t d = ch * per; d < std::min(D, (ch + 1) * per); ++d) {
        S* ga = gA + d * N;
        std::fill(ga, ga + N, S(0));
        S gd = 0;
        for (int64_t b = 0; b < B; ++b) {
          std::fill(h.begin(), h.begin() + N, S(0));  // h[0] is the state before step 0
          for (int64_t t = 0; t < L; ++t) {
            const int64_t i = (b * L + t) * D + d;
            const S* bt = Bm + (b * L + t) * N;
            for (int64_t n = 0; n < N; ++n) {
              dA[t * N + n] = std::exp(A[d * N + n] * delta[i]);
              h[(t + 1) * N + n] = dA[t * N + n] * h[t * N + n] + delta[i] * bt[n] * x[i];
            }
          }
          std::fill(carry.begin(), carry.end(), S(0));
          for (int64_t t = L - 1; t >= 0; --t) {
            const int64_t i = (b * L + t) * D + d;
            const int64_t r = (b * L + t) * N;
            const S g = gy[i], dt = delta[i], xt = x[i];
            S sx = 0, sd = 0;
            for (int64_t n = 0; n < N; ++n) {
              gh[n] = g * Cm[r + n] + carry[n];
              pc[r + n] += g * h[(t + 1) * N + n];
              sx += gh[n] * dt * Bm[r + n];
              const S hp = h[t * N + n];
              sd += gh[n] * (A[d * N + n] * dA[t * N + n] * hp + Bm[r + n] * xt);
              ga[n] += gh[n] * dt * dA[t * N + n] * hp;
              pb[r + n] += gh[n] * dt * xt;
              carry[n] = dA[t * N + n] * gh[n];
            }
            gd += g * xt;
            gx[i] = g * Dv[d] + sx;
            gdelta[i] = sd;
          }
        }
        gD[d] = gd;
      }
    }
  });
  const int64_t M = B * L * N;
  for (int64_t j = 0; j < M; ++j) {
    S sb = 0, sc = 0;
    for (int64_t ch = 0; ch < chunks; ++ch) sb += partB[size_t(ch * M + j)], sc += partC[size_t(ch * M + j)];
    gB[j] = sb;
    gC[j] = sc;
  }
}

#define FOUNDRY_RECURRENT_INSTANTIATE(S)                                                                           \
  template void rwkv_wkv_forward<S>(const S*, const S*, const S*, const S*, S*, S*, int64_t, int64_t, int64_t);    \
  template void rwkv_wkv_backward<S>(const S*, const S*, const S*, const S*, const S*, S*, S*, S*, S*, int64_t,   \
                                     int64_t, int64_t);                                                            \
  template void selective_scan_forward<S>(const S*, const S*, const S*, const S*, const S*, const S*, S*, S*,     \
                                          int64_t, int64_t, int64_t, int64_t);                                     \
  template void selective_scan_backward<S>(const S*, const S*, const S*, const S*, const S*, const S*, const S*,  \
                                           S*, S*, S*, S*, S*, S*, int64_t, int64_t, int64_t, int64_t);
FOUNDRY_RECURRENT_INSTANTIATE(float)
FOUNDRY_RECURRENT_INSTANTIATE(double)
#undef FOUNDRY_RECURRENT_INSTANTIATE

}  // namespace foundry::kernels
