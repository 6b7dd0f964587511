// Internal helpers of the optimizers: flat state buffers and the fused multi-tensor loop.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "foundry/core/layout.h"
#include "foundry/core/parallel.h"
#include "foundry/core/tensor.h"

namespace foundry::optim::detail {

/// Elements per cache line of floats: state slices start at multiples of this.
inline constexpr int64_t kAlignElements = 16;

/// Whether p's elements fill its memory in one of the two orders the fused kernels walk as a flat
/// array: contiguous, or is_rows_of_transpose. The gradient and the states then take p's order.
inline bool dense_layout(const Tensor& p) { return p.is_contiguous() || is_rows_of_transpose(p); }

/// t (shaped like p) in p's memory order: t itself when it has it, else a copy.
Tensor laid_out_like(const Tensor& t, const Tensor& p);

/// One allocation per dtype holding a buffer shaped like each of `like` (each slice 64-byte
/// aligned, in its tensor's memory order where dense_layout, else contiguous), filled with `fill`;
/// returns the slices in order.
std::vector<Tensor> flat_zeros_like(const std::vector<Tensor>& like, double fill);

/// True when `p` (and its gradient) can take the float32 fused kernels.
inline bool fusable(const Tensor& p, const Tensor& grad) {
  return p.dtype() == DType::Float32 && dense_layout(p) && grad.dtype() == DType::Float32 &&
         !p.storage()->read_only();
}

/// Pointer to the float32 data of p's state tensor t, made float32 and laid out like p in place
/// first if a load (or an earlier layout of p) left it otherwise.
float* state_ptr(Tensor& t, const Tensor& p);

/// Walks the concatenated index space of `segs` (each with a member `n`) in one parallel_for:
/// every thread gets an equal share and calls fn(seg, offset, length) for the pieces of the
/// segments in it. Elementwise kernels give the same result for any split.
template <class Seg, class Fn>
void run_segments(const std::vector<Seg>& segs, Fn fn) {
  std::vector<int64_t> start(segs.size() + 1, 0);
  for (size_t k = 0; k < segs.size(); ++k) start[k + 1] = start[k] + segs[k].n;
  const int64_t total = start.back();
  if (total == 0) return;
  parallel_for(0, total, kGrainSize, [&](int64_t b, int64_t e) {
    size_t k = size_t(std::upper_bound(start.begin(), start.end(), b) - start.begin()) - 1;
    while (b < e) {
      const int64_t end = std::min(e, start[k + 1]);
      if (end > b) fn(segs[k], b - start[k], end - b);
      b = std::max(b, end);
      ++k;
    }
  });
}

/// Bumps the version counter of every tensor (the fused kernels write through raw pointers).
inline void bump_versions(const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts) t.storage()->bump_version();
}

}  // namespace foundry::optim::detail
