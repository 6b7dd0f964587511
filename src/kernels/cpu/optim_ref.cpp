// Scalar reference twins of the fused optimizer kernels in optim_simd.cpp: the same operations in
// the same order, one element at a time, with std::fma where the SIMD code has MulAdd.
// tests/unit/optim_kernels_test.cpp checks that every Highway target with native FMA gives
// bit-identical results (and the others agree to rounding).
#pragma GCC optimize("fp-contract=off")  // FMA only where written (see optim_simd.cpp)

#include <cmath>

#include "foundry/optim/kernels.h"

namespace foundry::optim::kernels {
namespace {
// torch.maximum (NaN-propagating).
float max_nan(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return a + b;
  return a < b ? b : a;
}
}  // namespace

void adam_f32_ref(const AdamStep& s, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                  float* max_exp_avg_sq, int64_t n) {
  const bool use_wd = s.weight_decay != 0.0f, use_decay = s.decay != 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    float p = param[i];
    float g = s.maximize ? -grad[i] : grad[i];
    if (use_decay) p = p * s.decay;
    if (use_wd) g = std::fma(p, s.weight_decay, g);
    const float m = std::fma(g, s.one_minus_beta1, exp_avg[i] * s.beta1);
    float v = std::fma(s.one_minus_beta2 * g, g, exp_avg_sq[i] * s.beta2);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    if (s.amsgrad) {
      v = max_nan(max_exp_avg_sq[i], v);
      max_exp_avg_sq[i] = v;
    }
    const float denom = std::sqrt(v) / s.bias_correction2_sqrt + s.eps;
    param[i] = p + (s.neg_step_size * m) / denom;
  }
}

void sgd_f32_ref(const SGDStep& s, float* param, const float* grad, float* momentum_buffer, int64_t n) {
  const bool use_wd = s.weight_decay != 0.0f, use_mom = s.momentum != 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    float p = param[i];
    float g = s.maximize ? -grad[i] : grad[i];
    if (use_wd) g = std::fma(p, s.weight_decay, g);
    if (use_mom) {
      const float buf = s.first ? g : std::fma(g, s.one_minus_dampening, momentum_buffer[i] * s.momentum);
      momentum_buffer[i] = buf;
      g = s.nesterov ? std::fma(buf, s.momentum, g) : buf;
    }
    param[i] = std::fma(g, s.neg_lr, p);
  }
}

void lion_f32_ref(const LionStep& s, float* param, const float* grad, float* exp_avg, int64_t n) {
  const bool use_decay = s.decay != 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    float p = param[i];
    const float g = grad[i], m = exp_avg[i];
    if (use_decay) p = p * s.decay;
    const float u = m * s.beta1 + g * s.one_minus_beta1;
    const float sign = std::isnan(u) ? u : (u > 0.0f ? 1.0f : (u < 0.0f ? -1.0f : 0.0f));
    param[i] = std::fma(sign, s.neg_lr, p);
    exp_avg[i] = std::fma(g, s.one_minus_beta2, m * s.beta2);
  }
}

void adagrad_f32_ref(const AdagradStep& s, float* param, const float* grad, float* sum, int64_t n) {
  const bool use_wd = s.weight_decay != 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float p = param[i];
    float g = s.maximize ? -grad[i] : grad[i];
    if (use_wd) g = std::fma(p, s.weight_decay, g);
    const float acc = std::fma(g, g, sum[i]);
    sum[i] = acc;
    param[i] = p + (s.neg_clr * g) / (std::sqrt(acc) + s.eps);
  }
}

void rmsprop_f32_ref(const RMSpropStep& s, float* param, const float* grad, float* square_avg, float* grad_avg,
                     float* momentum_buffer, int64_t n) {
  const bool use_wd = s.weight_decay != 0.0f, use_mom = s.momentum > 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    float p = param[i];
    float g = s.maximize ? -grad[i] : grad[i];
    if (use_wd) g = std::fma(p, s.weight_decay, g);
    const float sq = std::fma(s.one_minus_alpha * g, g, square_avg[i] * s.alpha);
    square_avg[i] = sq;
    float avg;
    if (s.centered) {
      const float ga = std::fma(g, s.one_minus_alpha, grad_avg[i] * s.alpha);
      grad_avg[i] = ga;
      avg = std::sqrt(std::fma(-ga, ga, sq));
    } else {
      avg = std::sqrt(sq);
    }
    avg = avg + s.eps;
    if (use_mom) {
      const float buf = momentum_buffer[i] * s.momentum + g / avg;
      momentum_buffer[i] = buf;
      p = std::fma(buf, s.neg_lr, p);
    } else {
      p = p + (s.neg_lr * g) / avg;
    }
    param[i] = p;
  }
}

namespace {
template <class F>
double lane_sum(const float* x, int64_t n, F f) {
  double total = 0;
  for (int64_t b = 0; b < n; b += 1024) {
    float acc[16] = {};
    for (int64_t i = b; i < n && i < b + 1024; ++i) acc[(i - b) % 16] = acc[(i - b) % 16] + f(x[i]);
    for (float a : acc) total += double(a);
  }
  return total;
}
}  // namespace

double sum_squares_f32_ref(const float* x, int64_t n) { return lane_sum(x, n, [](float v) { return v * v; }); }
double sum_abs_f32_ref(const float* x, int64_t n) { return lane_sum(x, n, [](float v) { return std::fabs(v); }); }

float max_abs_f32_ref(const float* x, int64_t n) {
  float best = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (std::isnan(a)) return a;
    if (a > best) best = a;
  }
  return best;
}

void scale_f32_ref(float* x, float c, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * c;
}

}  // namespace foundry::optim::kernels
