// SIMD float32 forwards of the recurrences (see recurrent.h), lanes across channels: RWKV's WKV
// over C, the selective scan over D with the state held as [N][lanes] (no horizontal sums). Tails
// narrower than a vector run the scalar kernel's arithmetic.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/recurrent_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "foundry/core/parallel.h"
#include "kernels/cpu/recurrent.h"

HWY_BEFORE_NAMESPACE();
namespace foundry::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// exp, with arguments below -87 (results under FLT_MIN, where the forward only ever multiplies
// zeros or adds nothing visible) clamped into the range the vector exp covers.
template <class D, class V>
HWY_INLINE V ExpClamped(D d, V x) {
  return hn::Exp(d, hn::Max(x, hn::Set(d, -87.0f)));
}

void RwkvWkvF32(const float* w, const float* u, const float* k, const float* v, float* y, float* state, int64_t B,
                int64_t T, int64_t C) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const int64_t vec_end = C / N * N;
  parallel_for(0, B * (vec_end / N), std::max<int64_t>(1, 256 / std::max<int64_t>(1, T)), [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t b = j / (vec_end / N), c = (j % (vec_end / N)) * N;
      float* sn = state + (3 * b) * C + c;
      float* sd = state + (3 * b + 1) * C + c;
      float* sm = state + (3 * b + 2) * C + c;
      auto num = hn::LoadU(d, sn), den = hn::LoadU(d, sd), mx = hn::LoadU(d, sm);
      const auto vw = hn::LoadU(d, w + c), vu = hn::LoadU(d, u + c);
      for (int64_t t = 0; t < T; ++t) {
        const int64_t i = (b * T + t) * C + c;
        const auto kt = hn::LoadU(d, k + i), vt = hn::LoadU(d, v + i);
        const auto ku = hn::Add(kt, vu);
        const auto mo = hn::Max(mx, ku);
        auto e1 = ExpClamped(d, hn::Sub(mx, mo)), e2 = ExpClamped(d, hn::Sub(ku, mo));
        hn::StoreU(hn::Div(hn::MulAdd(e1, num, hn::Mul(e2, vt)), hn::MulAdd(e1, den, e2)), d, y + i);
        const auto mw = hn::Add(mx, vw);
        const auto ms = hn::Max(mw, kt);
        e1 = ExpClamped(d, hn::Sub(mw, ms));
        e2 = ExpClamped(d, hn::Sub(kt, ms));
        num = hn::MulAdd(e1, num, hn::Mul(e2, vt));
        den = hn::MulAdd(e1, den, e2);
        mx = ms;
      }
      hn::StoreU(num, d, sn);
      hn::StoreU(den, d, sd);
      hn::StoreU(mx, d, sm);
    }
  });
  if (vec_end < C) {  // the last channels, by the scalar kernel (its state rows are per channel)
    const int64_t rest = C - vec_end;
    std::vector<float> st(size_t(3 * B * rest)), yy(size_t(B * T * rest)), kk(yy.size()), vv(yy.size());
    for (int64_t s = 0; s < 3 * B; ++s)
      for (int64_t c = 0; c < rest; ++c) st[size_t(s * rest + c)] = state[s * C + vec_end + c];
    for (int64_t r = 0; r < B * T; ++r)
      for (int64_t c = 0; c < rest; ++c) kk[size_t(r * rest + c)] = k[r * C + vec_end + c], vv[size_t(r * rest + c)] = v[r * C + vec_end + c];
    rwkv_wkv_forward<float>(w + vec_end, u + vec_end, kk.data(), vv.data(), yy.data(), st.data(), B, T, rest);
    for (int64_t s = 0; s < 3 * B; ++s)
      for (int64_t c = 0; c < rest; ++c) state[s * C + vec_end + c] = st[size_t(s * rest + c)];
    for (int64_t r = 0; r < B * T; ++r)
      for (int64_t c = 0; c < rest; ++c) y[r * C + vec_end + c] = yy[size_t(r * rest + c)];
  }
}

// Decoding (a step or a few): lanes across the state index instead, each channel's state row and A
// row read in place (the [B, D, N] state layout), so nothing is transposed per call.
void SelectiveScanStepsF32(const float* x, const float* delta, const float* A, const float* Bm, const float* Cm,
                           const float* Dv, float* y, float* state, int64_t B, int64_t L, int64_t D, int64_t N) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = int64_t(hn::Lanes(d)), Nv = N / lanes * lanes;
  parallel_for(0, B * D, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, L * N)), [&](int64_t j0, int64_t j1) {
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t b = j / D, ch = j % D;
      float* st = state + j * N;
      const float* a = A + ch * N;
      for (int64_t t = 0; t < L; ++t) {
        const int64_t i = (b * L + t) * D + ch;
        const float dt = delta[i], xt = x[i];
        const float* bt = Bm + (b * L + t) * N;
        const float* ct = Cm + (b * L + t) * N;
        const auto vdt = hn::Set(d, dt), vdtx = hn::Set(d, dt * xt);
        auto acc = hn::Zero(d);
        int64_t n = 0;
        for (; n < Nv; n += lanes) {
          const auto dA = ExpClamped(d, hn::Mul(hn::LoadU(d, a + n), vdt));
          const auto h = hn::MulAdd(dA, hn::LoadU(d, st + n), hn::Mul(vdtx, hn::LoadU(d, bt + n)));
          hn::StoreU(h, d, st + n);
          acc = hn::MulAdd(h, hn::LoadU(d, ct + n), acc);
        }
        float sum = hn::GetLane(hn::SumOfLanes(d, acc));
        for (; n < N; ++n) {
          st[n] = std::exp(a[n] * dt) * st[n] + dt * bt[n] * xt;
          sum += st[n] * ct[n];
        }
        y[i] = sum + Dv[ch] * xt;
      }
    }
  });
}

void SelectiveScanF32(const float* x, const float* delta, const float* A, const float* Bm, const float* Cm,
                      const float* Dv, float* y, float* state, int64_t B, int64_t L, int64_t D, int64_t N) {
  const hn::ScalableTag<float> d;
  if (L <= 4 && N >= int64_t(hn::Lanes(d))) return SelectiveScanStepsF32(x, delta, A, Bm, Cm, Dv, y, state, B, L, D, N);
  const int64_t lanes = int64_t(hn::Lanes(d));
  const int64_t blocks = D / lanes;
  // A transposed to [N, D]: one vector load per state index.
  std::vector<float> At(size_t(N * D));
  for (int64_t i = 0; i < D; ++i)
    for (int64_t n = 0; n < N; ++n) At[size_t(n * D + i)] = A[i * N + n];
  parallel_for(0, B * blocks, std::max<int64_t>(1, 64 / std::max<int64_t>(1, L)), [&](int64_t j0, int64_t j1) {
    std::vector<float> h(size_t(N * lanes));
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t b = j / blocks, c = (j % blocks) * lanes;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t l = 0; l < lanes; ++l) h[size_t(n * lanes + l)] = state[(b * D + c + l) * N + n];
      const auto dv = hn::LoadU(d, Dv + c);
      for (int64_t t = 0; t < L; ++t) {
        const int64_t i = (b * L + t) * D + c;
        const auto dt = hn::LoadU(d, delta + i), xt = hn::LoadU(d, x + i);
        const auto dtx = hn::Mul(dt, xt);
        const float* bt = Bm + (b * L + t) * N;
        const float* ct = Cm + (b * L + t) * N;
        auto acc = hn::Mul(dv, xt);
        for (int64_t n = 0; n < N; ++n) {
          const auto dA = ExpClamped(d, hn::Mul(hn::LoadU(d, At.data() + n * D + c), dt));
          auto hn_ = hn::MulAdd(dA, hn::LoadU(d, h.data() + n * lanes), hn::Mul(dtx, hn::Set(d, bt[n])));
          hn::StoreU(hn_, d, h.data() + n * lanes);
          acc = hn::MulAdd(hn_, hn::Set(d, ct[n]), acc);
        }
        hn::StoreU(acc, d, y + i);
      }
      for (int64_t n = 0; n < N; ++n)
        for (int64_t l = 0; l < lanes; ++l) state[(b * D + c + l) * N + n] = h[size_t(n * lanes + l)];
    }
  });
  const int64_t done = blocks * lanes;
  if (done < D) {  // the last channels, scalar
    for (int64_t b = 0; b < B; ++b)
      for (int64_t ch = done; ch < D; ++ch) {
        float* st = state + (b * D + ch) * N;
        for (int64_t t = 0; t < L; ++t) {
          const int64_t i = (b * L + t) * D + ch;
          const float dt = delta[i], xt = x[i];
          float acc = 0;
          for (int64_t n = 0; n < N; ++n) {
            st[n] = std::exp(A[ch * N + n] * dt) * st[n] + dt * Bm[(b * L + t) * N + n] * xt;
            acc += st[n] * Cm[(b * L + t) * N + n];
          }
          y[i] = acc + Dv[ch] * xt;
        }
      }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace foundry::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace foundry::kernels {
HWY_EXPORT(RwkvWkvF32);
HWY_EXPORT(SelectiveScanF32);

void rwkv_wkv_forward_f32(const float* w, const float* u, const float* k, const float* v, float* y, float* state,
                          int64_t B, int64_t T, int64_t C) {
  HWY_DYNAMIC_DISPATCH(RwkvWkvF32)(w, u, k, v, y, state, B, T, C);
}
void selective_scan_forward_f32(const float* x, const float* delta, const float* A, const float* Bm, const float* Cm,
                                const float* Dv, float* y, float* state, int64_t B, int64_t L, int64_t D, int64_t N) {
  HWY_DYNAMIC_DISPATCH(SelectiveScanF32)(x, delta, A, Bm, Cm, Dv, y, state, B, L, D, N);
}
}  // namespace foundry::kernels
#endif
