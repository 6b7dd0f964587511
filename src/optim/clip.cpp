// clip_grad_norm_ and clip_grad_value_ (torch.nn.utils 1.13). Float32 gradients go through the
// SIMD reductions of kernels.h in fixed chunks, each chunk's partial kept in its own slot and
// summed in order afterwards, so the norm does not depend on the thread count. Other dtypes use
// Foundry ops.
#include <cmath>
#include <limits>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"
#include "foundry/optim/kernels.h"
#include "foundry/optim/optimizer.h"
#include "optim/common.h"

namespace foundry::optim {

namespace {

constexpr int64_t kChunk = int64_t(1) << 16;  // elements per partial (a multiple of 1024)

struct Chunk {
  float* data;
  int64_t n;
};

// p-norm^p (or the max for inf) of every float32 gradient, chunk by chunk.
double fused_partial(const std::vector<Chunk>& chunks, double p) {
  std::vector<double> partial(chunks.size(), 0.0);
  parallel_for(0, int64_t(chunks.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      const Chunk& ch = chunks[size_t(c)];
      if (std::isinf(p)) {
        partial[size_t(c)] = kernels::max_abs_f32(ch.data, ch.n);
      } else if (p == 2) {
        partial[size_t(c)] = kernels::sum_squares_f32(ch.data, ch.n);
      } else if (p == 1) {
        partial[size_t(c)] = kernels::sum_abs_f32(ch.data, ch.n);
      } else {
        double acc = 0;
        for (int64_t i = 0; i < ch.n; ++i) acc += std::pow(std::fabs(double(ch.data[i])), p);
        partial[size_t(c)] = acc;
      }
    }
  });
  double acc = 0;
  for (double v : partial) {
    if (std::isinf(p)) acc = std::isnan(v) || std::isnan(acc) ? std::numeric_limits<double>::quiet_NaN() : std::max(acc, v);
    else acc += v;
  }
  return acc;
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  autograd::NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    // The chunks below read a dense gradient in memory order (a norm and a scale care for no other).
    if (g.dtype() == DType::Float32 && !detail::dense_layout(g)) {  // make it contiguous in place
      g = g.contiguous();
      p.set_grad(g);
    }
    grads.push_back(g);
  }
  if (grads.empty()) return 0.0;
  const bool inf_norm = std::isinf(norm_type) && norm_type > 0;
  const double p = inf_norm ? std::numeric_limits<double>::infinity() : norm_type;
  if (!(p > 0)) raise<ValueError>("clip_grad_norm_: norm_type must be positive, got {}", norm_type);

  std::vector<Chunk> chunks;
  double other = 0.0;  // contribution of the non-float32 gradients
  for (const Tensor& g : grads) {
    if (g.dtype() == DType::Float32) {
      float* data = g.data<float>();
      for (int64_t off = 0; off < g.numel(); off += kChunk)
        chunks.push_back({data + off, std::min(kChunk, g.numel() - off)});
    } else {
      const double n = norm(g.to(DType::Float64), p).item<double>();
      if (inf_norm) other = std::isnan(n) || std::isnan(other) ? n + other : std::max(other, n);
      else other += std::pow(n, p);
    }
  }
  double acc = fused_partial(chunks, p);
  double total;
  if (inf_norm) {
    total = std::isnan(acc) || std::isnan(other) ? std::numeric_limits<double>::quiet_NaN() : std::max(acc, other);
  } else {
    acc += other;
    total = p == 2 ? std::sqrt(acc) : p == 1 ? acc : std::pow(acc, 1.0 / p);
  }
  if (error_if_nonfinite && !std::isfinite(total))
    raise<Error>(
        "The total norm of order {} for gradients from `parameters` is non-finite, so it cannot be clipped. To "
        "disable this error and scale the gradients by the non-finite norm anyway, set `error_if_nonfinite=False`",
        norm_type);
  // torch: clip_coef = max_norm / (total_norm + 1e-6) on a float32 tensor (reciprocal times the
  // number), clamped to at most 1, then g.mul_(clip_coef_clamped) -- even when it is 1.
  const float denom = float(total) + 1e-6f;
  float coef = (1.0f / denom) * float(max_norm);
  if (coef > 1.0f) coef = 1.0f;
  if (coef == 1.0f) return total;  // multiplying by 1 changes nothing
  std::vector<Chunk> scale;
  for (const Tensor& g : grads) {
    if (g.dtype() == DType::Float32) {
      float* data = g.data<float>();
      for (int64_t off = 0; off < g.numel(); off += kChunk) scale.push_back({data + off, std::min(kChunk, g.numel() - off)});
    } else {
      Tensor gg = g;
      gg.mul_(double(coef));
    }
    g.storage()->bump_version();
  }
  parallel_for(0, int64_t(scale.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) kernels::scale_f32(scale[size_t(c)].data, coef, scale[size_t(c)].n);
  });
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  autograd::NoGradGuard no_grad;
  for (const Tensor& p : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    g.copy_(clamp(g, -clip_value, clip_value));
  }
}

}  // namespace foundry::optim
