// Fused optimizer updates (Adam/AdamW, SGD, Lion) and gradient-norm reductions with Highway,
// dispatched at run time. One pass per range: load grad, param and state, update, store. The
// scalar twins live in optim_ref.cpp; both follow the operation order documented in
// foundry/optim/kernels.h, with an explicit MulAdd exactly where PyTorch's kernels fuse (add_ with
// alpha, addcmul_) and separate multiplies and adds everywhere else. GCC would contract a*b+c on
// its own in C++ (only its C front end defaults to -ffp-contract=off in ISO mode), so this file
// turns contraction off; Highway's per-target pragmas push and pop on top of it.
#pragma GCC optimize("fp-contract=off")
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/optim_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstring>
#include <limits>

#include "foundry/optim/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace foundry::optim::kernels {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;
constexpr int64_t kMaxLanes = 64;

// torch.maximum: NaN in either operand gives NaN.
HWY_INLINE V MaxNaN(D d, V a, V b) {
  const auto nan = hn::Or(hn::IsNaN(a), hn::IsNaN(b));
  return hn::IfThenElse(nan, hn::Add(a, b), hn::Max(a, b));
}

// Runs `body(offset, pointers...)` over full vectors, then once over a zero-padded copy of the
// tail so the last elements go through the same vector code. `arrays` are the buffers the body
// reads or writes (all of length n); written ones are copied back.
template <size_t K, class Body>
HWY_INLINE void ForEachVector(int64_t n, float* const (&arrays)[K], const bool (&written)[K], Body body) {
  const D d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    float* ptrs[K];
    for (size_t k = 0; k < K; ++k) ptrs[k] = arrays[k] ? arrays[k] + i : nullptr;
    body(ptrs);
  }
  if (i == n) return;
  const int64_t rest = n - i;
  alignas(64) float buf[K][kMaxLanes];
  float* ptrs[K];
  for (size_t k = 0; k < K; ++k) {
    std::memset(buf[k], 0, sizeof(buf[k]));
    if (arrays[k]) {
      std::memcpy(buf[k], arrays[k] + i, size_t(rest) * sizeof(float));
      ptrs[k] = buf[k];
    } else {
      ptrs[k] = nullptr;
    }
  }
  body(ptrs);
  for (size_t k = 0; k < K; ++k)
    if (arrays[k] && written[k]) std::memcpy(arrays[k] + i, buf[k], size_t(rest) * sizeof(float));
}

void AdamF32(const AdamStep& s, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
             float* max_exp_avg_sq, int64_t n) {
  static_assert(HWY_LANES(float) <= kMaxLanes, "tail buffer too small");
  const D d;
  const V beta1 = hn::Set(d, s.beta1), omb1 = hn::Set(d, s.one_minus_beta1);
  const V beta2 = hn::Set(d, s.beta2), omb2 = hn::Set(d, s.one_minus_beta2);
  const V wd = hn::Set(d, s.weight_decay), decay = hn::Set(d, s.decay);
  const V bc2 = hn::Set(d, s.bias_correction2_sqrt), neg_step = hn::Set(d, s.neg_step_size);
  const V eps = hn::Set(d, s.eps);
  const bool use_wd = s.weight_decay != 0.0f, use_decay = s.decay != 1.0f;
  float* const arrays[5] = {param, const_cast<float*>(grad), exp_avg, exp_avg_sq,
                            s.amsgrad ? max_exp_avg_sq : nullptr};
  const bool written[5] = {true, false, true, true, true};
  ForEachVector(n, arrays, written, [&](float* const* ptr) {
    V p = hn::LoadU(d, ptr[0]);
    V g = hn::LoadU(d, ptr[1]);
    if (s.maximize) g = hn::Neg(g);
    if (use_decay) p = hn::Mul(p, decay);
    if (use_wd) g = hn::MulAdd(p, wd, g);                                  // grad.add(param, alpha=wd)
    V m = hn::MulAdd(g, omb1, hn::Mul(hn::LoadU(d, ptr[2]), beta1));       // mul_(b1).add_(g, alpha=1-b1)
    V v = hn::MulAdd(hn::Mul(omb2, g), g, hn::Mul(hn::LoadU(d, ptr[3]), beta2));  // mul_(b2).addcmul_(g, g)
    hn::StoreU(m, d, ptr[2]);
    hn::StoreU(v, d, ptr[3]);
    if (s.amsgrad) {
      v = MaxNaN(d, hn::LoadU(d, ptr[4]), v);
      hn::StoreU(v, d, ptr[4]);
    }
    const V denom = hn::Add(hn::Div(hn::Sqrt(v), bc2), eps);
    p = hn::Add(p, hn::Div(hn::Mul(neg_step, m), denom));  // addcdiv_: self + (value * t1) / t2
    hn::StoreU(p, d, ptr[0]);
  });
}

void SgdF32(const SGDStep& s, float* param, const float* grad, float* momentum_buffer, int64_t n) {
  const D d;
  const V wd = hn::Set(d, s.weight_decay), mom = hn::Set(d, s.momentum);
  const V omd = hn::Set(d, s.one_minus_dampening), neg_lr = hn::Set(d, s.neg_lr);
  const bool use_wd = s.weight_decay != 0.0f, use_mom = s.momentum != 0.0f;
  float* const arrays[3] = {param, const_cast<float*>(grad), use_mom ? momentum_buffer : nullptr};
  const bool written[3] = {true, false, true};
  ForEachVector(n, arrays, written, [&](float* const* ptr) {
    V p = hn::LoadU(d, ptr[0]);
    V g = hn::LoadU(d, ptr[1]);
    if (s.maximize) g = hn::Neg(g);
    if (use_wd) g = hn::MulAdd(p, wd, g);
    if (use_mom) {
      V buf = s.first ? g : hn::MulAdd(g, omd, hn::Mul(hn::LoadU(d, ptr[2]), mom));
      hn::StoreU(buf, d, ptr[2]);
      g = s.nesterov ? hn::MulAdd(buf, mom, g) : buf;
    }
    p = hn::MulAdd(g, neg_lr, p);
    hn::StoreU(p, d, ptr[0]);
  });
}

void LionF32(const LionStep& s, float* param, const float* grad, float* exp_avg, int64_t n) {
  const D d;
  const V beta1 = hn::Set(d, s.beta1), omb1 = hn::Set(d, s.one_minus_beta1);
  const V beta2 = hn::Set(d, s.beta2), omb2 = hn::Set(d, s.one_minus_beta2);
  const V decay = hn::Set(d, s.decay), neg_lr = hn::Set(d, s.neg_lr);
  const V zero = hn::Zero(d), one = hn::Set(d, 1.0f);
  const bool use_decay = s.decay != 1.0f;
  float* const arrays[3] = {param, const_cast<float*>(grad), exp_avg};
  const bool written[3] = {true, false, true};
  ForEachVector(n, arrays, written, [&](float* const* ptr) {
    V p = hn::LoadU(d, ptr[0]);
    const V g = hn::LoadU(d, ptr[1]);
    const V m = hn::LoadU(d, ptr[2]);
    if (use_decay) p = hn::Mul(p, decay);
    const V u = hn::Add(hn::Mul(m, beta1), hn::Mul(g, omb1));
    // torch.sign: -1, 0 or 1, and NaN for NaN.
    V sign = hn::IfThenElse(hn::Gt(u, zero), one, hn::IfThenElse(hn::Lt(u, zero), hn::Neg(one), zero));
    sign = hn::IfThenElse(hn::IsNaN(u), u, sign);
    p = hn::MulAdd(sign, neg_lr, p);  // exact product: the same with or without fusion
    hn::StoreU(p, d, ptr[0]);
    hn::StoreU(hn::MulAdd(g, omb2, hn::Mul(m, beta2)), d, ptr[2]);
  });
}

void AdagradF32(const AdagradStep& s, float* param, const float* grad, float* sum, int64_t n) {
  const D d;
  const V wd = hn::Set(d, s.weight_decay), neg_clr = hn::Set(d, s.neg_clr), eps = hn::Set(d, s.eps);
  const bool use_wd = s.weight_decay != 0.0f;
  float* const arrays[3] = {param, const_cast<float*>(grad), sum};
  const bool written[3] = {true, false, true};
  ForEachVector(n, arrays, written, [&](float* const* ptr) {
    V p = hn::LoadU(d, ptr[0]);
    V g = hn::LoadU(d, ptr[1]);
    if (s.maximize) g = hn::Neg(g);
    if (use_wd) g = hn::MulAdd(p, wd, g);
    const V acc = hn::MulAdd(g, g, hn::LoadU(d, ptr[2]));  // addcmul_(g, g, value=1)
    hn::StoreU(acc, d, ptr[2]);
    const V std = hn::Add(hn::Sqrt(acc), eps);
    hn::StoreU(hn::Add(p, hn::Div(hn::Mul(neg_clr, g), std)), d, ptr[0]);
  });
}

void RmspropF32(const RMSpropStep& s, float* param, const float* grad, float* square_avg, float* grad_avg,
                float* momentum_buffer, int64_t n) {
  const D d;
  const V alpha = hn::Set(d, s.alpha), oma = hn::Set(d, s.one_minus_alpha), wd = hn::Set(d, s.weight_decay);
  const V eps = hn::Set(d, s.eps), mom = hn::Set(d, s.momentum), neg_lr = hn::Set(d, s.neg_lr);
  const bool use_wd = s.weight_decay != 0.0f, use_mom = s.momentum > 0.0f;
  float* const arrays[5] = {param, const_cast<float*>(grad), square_avg, s.centered ? grad_avg : nullptr,
                            use_mom ? momentum_buffer : nullptr};
  const bool written[5] = {true, false, true, true, true};
  ForEachVector(n, arrays, written, [&](float* const* ptr) {
    V p = hn::LoadU(d, ptr[0]);
    V g = hn::LoadU(d, ptr[1]);
    if (s.maximize) g = hn::Neg(g);
    if (use_wd) g = hn::MulAdd(p, wd, g);
    const V sq = hn::MulAdd(hn::Mul(oma, g), g, hn::Mul(hn::LoadU(d, ptr[2]), alpha));
    hn::StoreU(sq, d, ptr[2]);
    V avg;
    if (s.centered) {
      const V ga = hn::MulAdd(g, oma, hn::Mul(hn::LoadU(d, ptr[3]), alpha));
      hn::StoreU(ga, d, ptr[3]);
      avg = hn::Sqrt(hn::MulAdd(hn::Neg(ga), ga, sq));  // addcmul(ga, ga, value=-1).sqrt_()
    } else {
      avg = hn::Sqrt(sq);
    }
    avg = hn::Add(avg, eps);
    if (use_mom) {
      const V buf = hn::Add(hn::Mul(hn::LoadU(d, ptr[4]), mom), hn::Div(g, avg));  // mul_(m).addcdiv_(g, avg)
      hn::StoreU(buf, d, ptr[4]);
      p = hn::MulAdd(buf, neg_lr, p);
    } else {
      p = hn::Add(p, hn::Div(hn::Mul(neg_lr, g), avg));
    }
    hn::StoreU(p, d, ptr[0]);
  });
}

// Whether MulAdd is one fused operation on this target (the twins assume it is).
bool NativeFma() { return HWY_NATIVE_FMA != 0; }

// Sum over n elements of f(x) in 16 interleaved float lanes (element i in lane i % 16) flushed to
// a double every 1024 elements in lane order: the same bits for every vector width.
template <class F>
HWY_INLINE double LaneSum(const float* x, int64_t n, F f) {
  const D d;
  const int64_t N = int64_t(hn::Lanes(d));
  const int64_t K = 16 / N;  // vectors per 16-element row
  constexpr int64_t kBlock = 1024;
  double total = 0;
  alignas(64) float lanes[16];
  alignas(64) float row[16];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = n - b < kBlock ? n - b : kBlock;
    V acc[16];
    for (int64_t k = 0; k < K; ++k) acc[k] = hn::Zero(d);
    int64_t i = 0;
    for (; i + 16 <= len; i += 16)
      for (int64_t k = 0; k < K; ++k) acc[k] = hn::Add(acc[k], f(hn::LoadU(d, x + b + i + k * N)));
    if (i < len) {
      std::memset(row, 0, sizeof(row));
      std::memcpy(row, x + b + i, size_t(len - i) * sizeof(float));
      for (int64_t k = 0; k < K; ++k) acc[k] = hn::Add(acc[k], f(hn::Load(d, row + k * N)));
    }
    for (int64_t k = 0; k < K; ++k) hn::Store(acc[k], d, lanes + k * N);
    for (int j = 0; j < 16; ++j) total += double(lanes[j]);
  }
  return total;
}

double SumSquaresF32(const float* x, int64_t n) {
  static_assert(HWY_LANES(float) <= 16 && 16 % HWY_LANES(float) == 0, "a 16-lane row must split into vectors");
  return LaneSum(x, n, [](V v) { return hn::Mul(v, v); });
}

double SumAbsF32(const float* x, int64_t n) {
  return LaneSum(x, n, [](V v) { return hn::Abs(v); });
}

float MaxAbsF32(const float* x, int64_t n) {
  const D d;
  const int64_t N = int64_t(hn::Lanes(d));
  V best = hn::Zero(d);
  auto nan = hn::Lt(best, best);  // all false
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const V v = hn::LoadU(d, x + i);
    nan = hn::Or(nan, hn::IsNaN(v));
    best = hn::Max(best, hn::Abs(v));
  }
  float result = hn::GetLane(hn::MaxOfLanes(d, best));
  bool any_nan = !hn::AllFalse(d, nan);
  for (; i < n; ++i) {
    const float a = x[i] < 0 ? -x[i] : x[i];
    if (a != a) any_nan = true;
    else if (a > result) result = a;
  }
  return any_nan ? std::numeric_limits<float>::quiet_NaN() : result;
}

void ScaleF32(float* x, float c, int64_t n) {
  const D d;
  const V vc = hn::Set(d, c);
  float* const arrays[1] = {x};
  const bool written[1] = {true};
  ForEachVector(n, arrays, written, [&](float* const* ptr) { hn::StoreU(hn::Mul(hn::LoadU(d, ptr[0]), vc), d, ptr[0]); });
}

}  // namespace HWY_NAMESPACE
}  // namespace foundry::optim::kernels
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace foundry::optim::kernels {
HWY_EXPORT(AdamF32);
HWY_EXPORT(SgdF32);
HWY_EXPORT(LionF32);
HWY_EXPORT(SumSquaresF32);
HWY_EXPORT(SumAbsF32);
HWY_EXPORT(MaxAbsF32);
HWY_EXPORT(ScaleF32);
HWY_EXPORT(NativeFma);
HWY_EXPORT(AdagradF32);
HWY_EXPORT(RmspropF32);

void adam_f32(const AdamStep& s, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
              float* max_exp_avg_sq, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(AdamF32)(s, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n);
}
void sgd_f32(const SGDStep& s, float* param, const float* grad, float* momentum_buffer, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(SgdF32)(s, param, grad, momentum_buffer, n);
}
void lion_f32(const LionStep& s, float* param, const float* grad, float* exp_avg, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(LionF32)(s, param, grad, exp_avg, n);
}

double sum_squares_f32(const float* x, int64_t n) { return n > 0 ? HWY_DYNAMIC_DISPATCH(SumSquaresF32)(x, n) : 0.0; }
double sum_abs_f32(const float* x, int64_t n) { return n > 0 ? HWY_DYNAMIC_DISPATCH(SumAbsF32)(x, n) : 0.0; }
float max_abs_f32(const float* x, int64_t n) { return n > 0 ? HWY_DYNAMIC_DISPATCH(MaxAbsF32)(x, n) : 0.0f; }
void scale_f32(float* x, float c, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(ScaleF32)(x, c, n);
}

void adagrad_f32(const AdagradStep& s, float* param, const float* grad, float* sum, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(AdagradF32)(s, param, grad, sum, n);
}
void rmsprop_f32(const RMSpropStep& s, float* param, const float* grad, float* square_avg, float* grad_avg,
                 float* momentum_buffer, int64_t n) {
  if (n > 0) HWY_DYNAMIC_DISPATCH(RmspropF32)(s, param, grad, square_avg, grad_avg, momentum_buffer, n);
}

bool simd_native_fma() { return HWY_DYNAMIC_DISPATCH(NativeFma)(); }


}  // namespace foundry::optim::kernels
#endif
