// The fused optimizer update kernels (float32), for the optimizers' fused path, tests and
// benchmarks. Each kernel updates one contiguous range of a parameter and its state in a single
// pass (llm.c's gpt2_update): it reads the gradient once and writes the parameter and each state
// buffer once. `*_f32` dispatches at run time to the best Highway target (SSE4, AVX2, AVX-512 or
// the portable fallback); `*_f32_ref` is its scalar twin.
//
// The kernels perform exactly the float operations of torch.optim 1.13's single-tensor path, in
// the same order, fusing a multiply and an add (fma) exactly where PyTorch's CPU kernels do:
// add_(other, alpha) is fma(other, alpha, self) and addcmul_(t1, t2, value) is
// fma(value * t1, t2, self); everything else (addcdiv_, mul_, separate tensor ops) rounds each
// operation. On targets with native FMA (AVX2, AVX-512) the results are bit-identical to the
// scalar twin and, in our fixtures, to PyTorch's AVX2 kernels; on SSE4 and the portable fallback,
// which have no FMA, they differ by float rounding. Results never depend on how a range is split
// between threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace foundry::optim::kernels {

/// Per-tensor scalars of one Adam/AdamW step (computed in double, as torch does, then rounded).
struct AdamStep {
  float beta1 = 0.9f, one_minus_beta1 = 0.1f;  ///< exp_avg.mul_(beta1).add_(g, alpha=1-beta1)
  float beta2 = 0.999f, one_minus_beta2 = 0.001f;
  float weight_decay = 0;       ///< Adam's L2 term: g += weight_decay * p (0: none)
  float decay = 1;              ///< AdamW's decoupled decay: p *= 1 - lr * weight_decay (1: none)
  float bias_correction2_sqrt = 1;  ///< sqrt(1 - beta2^t)
  float neg_step_size = 0;          ///< -lr / (1 - beta1^t)
  float eps = 1e-8f;
  bool maximize = false;
  bool amsgrad = false;  ///< uses and updates `max_exp_avg_sq`
};

/// Adam/AdamW on n elements:
///   g = maximize ? -grad : grad;  p *= decay;  g = fma(p, weight_decay, g)
///   m = fma(g, 1 - beta1, m * beta1);  v = fma((1 - beta2) * g, g, v * beta2)
///   vmax = max(vmax, v) (amsgrad);  p += (neg_step_size * m) / (sqrt(v or vmax) / bc2_sqrt + eps)
void adam_f32(const AdamStep& s, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
              float* max_exp_avg_sq, int64_t n);
void adam_f32_ref(const AdamStep& s, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                  float* max_exp_avg_sq, int64_t n);

/// Per-tensor scalars of one SGD step.
struct SGDStep {
  float weight_decay = 0;  ///< d = g + weight_decay * p (0: none)
  float momentum = 0;      ///< 0: no momentum buffer
  float one_minus_dampening = 1;
  float neg_lr = 0;
  bool nesterov = false;
  bool maximize = false;
  bool first = false;  ///< the momentum buffer is initialised to d (torch's clone on the first step)
};

/// SGD on n elements (momentum_buffer is ignored when momentum == 0):
///   d = fma(p, weight_decay, maximize ? -g : g)
///   buf = first ? d : fma(d, 1 - dampening, buf * momentum);  d = nesterov ? fma(buf, momentum, d) : buf
///   p = fma(d, neg_lr, p)
void sgd_f32(const SGDStep& s, float* param, const float* grad, float* momentum_buffer, int64_t n);
void sgd_f32_ref(const SGDStep& s, float* param, const float* grad, float* momentum_buffer, int64_t n);

/// Per-tensor scalars of one Lion step.
struct LionStep {
  float beta1 = 0.9f, one_minus_beta1 = 0.1f;
  float beta2 = 0.99f, one_minus_beta2 = 0.01f;
  float decay = 1;  ///< 1 - lr * weight_decay
  float neg_lr = 0;
};

/// Lion (Chen et al. 2023, google/automl lion_pytorch.py) on n elements:
///   p *= decay;  p = fma(sign(m * beta1 + g * (1 - beta1)), neg_lr, p);  m = fma(g, 1 - beta2, m * beta2)
void lion_f32(const LionStep& s, float* param, const float* grad, float* exp_avg, int64_t n);
void lion_f32_ref(const LionStep& s, float* param, const float* grad, float* exp_avg, int64_t n);

/// Per-tensor scalars of one Adagrad step.
struct AdagradStep {
  float weight_decay = 0;
  float neg_clr = 0;  ///< -lr / (1 + (step - 1) * lr_decay)
  float eps = 1e-10f;
  bool maximize = false;
};

/// Adagrad on n elements:
///   g = fma(p, weight_decay, maximize ? -g : g);  sum = fma(g, g, sum)
///   p += (neg_clr * g) / (sqrt(sum) + eps)
void adagrad_f32(const AdagradStep& s, float* param, const float* grad, float* sum, int64_t n);
void adagrad_f32_ref(const AdagradStep& s, float* param, const float* grad, float* sum, int64_t n);

/// Per-tensor scalars of one RMSprop step.
struct RMSpropStep {
  float alpha = 0.99f, one_minus_alpha = 0.01f;
  float weight_decay = 0;
  float eps = 1e-8f;
  float momentum = 0;  ///< 0: no momentum buffer
  float neg_lr = 0;
  bool centered = false;
  bool maximize = false;
};

/// RMSprop on n elements (grad_avg used when centered, momentum_buffer when momentum > 0):
///   g = fma(p, weight_decay, maximize ? -g : g);  sq = fma((1 - alpha) * g, g, sq * alpha)
///   centered: ga = fma(g, 1 - alpha, ga * alpha);  avg = sqrt(fma(-ga, ga, sq)) + eps
///   else avg = sqrt(sq) + eps
///   momentum: buf = buf * momentum + g / avg;  p = fma(buf, neg_lr, p)
///   else p += (neg_lr * g) / avg
void rmsprop_f32(const RMSpropStep& s, float* param, const float* grad, float* square_avg, float* grad_avg,
                 float* momentum_buffer, int64_t n);
void rmsprop_f32_ref(const RMSpropStep& s, float* param, const float* grad, float* square_avg, float* grad_avg,
                     float* momentum_buffer, int64_t n);

/// Gradient-norm reductions (no FMA: identical on every target). Squares (or absolute values) are summed in float in 16 interleaved
/// lanes (element i goes to lane i % 16, whatever the vector width), each block of 1024 elements
/// is then added to a double in lane order, so every target gives the same bits as the twin.
double sum_squares_f32(const float* x, int64_t n);
double sum_squares_f32_ref(const float* x, int64_t n);
double sum_abs_f32(const float* x, int64_t n);
double sum_abs_f32_ref(const float* x, int64_t n);
/// max |x| (NaN when any element is NaN; 0 for n == 0).
float max_abs_f32(const float* x, int64_t n);
float max_abs_f32_ref(const float* x, int64_t n);
/// x *= c.
void scale_f32(float* x, float c, int64_t n);
void scale_f32_ref(float* x, float c, int64_t n);

/// Whether the target dispatch currently picks has a native FMA (the twins are then bit-exact).
bool simd_native_fma();

}  // namespace foundry::optim::kernels
