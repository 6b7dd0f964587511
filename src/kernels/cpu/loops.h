// The one loop skeleton of every elementwise kernel (PyTorch's TensorIterator, MLX's
// binary_op_cpu): operands of one shape with arbitrary strides are reordered so the fastest-moving
// dimension is innermost, adjacent dimensions are merged where every operand allows it, and the
// kernel is called on 1-D runs `fn(data, strides, n)` (strides in bytes), split across threads.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <numeric>

#include "foundry/core/parallel.h"
#include "foundry/core/tensor.h"

namespace foundry::kernels {

inline constexpr int kMaxOperands = 6;

struct StridedLoop {
  int ntensors = 0;
  Shape sizes;  // after reordering/coalescing; innermost last
  std::array<Shape, kMaxOperands> strides;  // bytes
  std::array<char*, kMaxOperands> data{};
  int64_t numel = 1;

  /// Operand 0 is usually the output. All operands must already have the same shape.
  StridedLoop(std::initializer_list<const Tensor*> operands);

  /// Strides of the innermost dimension.
  int64_t inner_stride(int k) const { return sizes.empty() ? 0 : strides[size_t(k)].back(); }
};

struct NoChunkEnd {
  void operator()() const {}
};

/// Runs fn(char** data, const int64_t* inner_strides, int64_t n) over every run, splitting the
/// element range across threads when it exceeds `grain`; each thread calls chunk_end() after its
/// last run (to fence the non-temporal stores of many short runs once).
template <typename F, typename G = NoChunkEnd>
void for_each_run(const StridedLoop& loop, int64_t grain, F&& fn, G&& chunk_end = {}) {
  const int nt = loop.ntensors;
  const int ndim = int(loop.sizes.size());
  if (loop.numel == 0) return;
  if (ndim == 0) {
    char* ptrs[kMaxOperands];
    int64_t strides[kMaxOperands] = {};
    for (int k = 0; k < nt; ++k) ptrs[k] = loop.data[size_t(k)];
    fn(ptrs, strides, int64_t(1));
    chunk_end();
    return;
  }
  const int64_t inner = loop.sizes.back();
  parallel_for(0, loop.numel, grain, [&](int64_t begin, int64_t end) {
    // Multi-index of `begin`.
    int64_t idx[16];
    int64_t rem = begin;
    for (int d = ndim - 1; d >= 0; --d) {
      idx[d] = rem % loop.sizes[size_t(d)];
      rem /= loop.sizes[size_t(d)];
    }
    char* ptrs[kMaxOperands];
    int64_t inner_strides[kMaxOperands];
    for (int k = 0; k < nt; ++k) inner_strides[k] = loop.strides[size_t(k)].back();
    int64_t pos = begin;
    while (pos < end) {
      for (int k = 0; k < nt; ++k) {
        char* p = loop.data[size_t(k)];
        for (int d = 0; d < ndim; ++d) p += idx[d] * loop.strides[size_t(k)][size_t(d)];
        ptrs[k] = p;
      }
      int64_t n = std::min(inner - idx[ndim - 1], end - pos);
      fn(ptrs, inner_strides, n);
      pos += n;
      idx[ndim - 1] += n;
      for (int d = ndim - 1; d > 0 && idx[d] >= loop.sizes[size_t(d)]; --d) {
        idx[d] = 0;
        idx[d - 1]++;
      }
    }
    chunk_end();
  });
}

/// Elements per chunk when non-contiguous runs are packed into buffers for SIMD kernels.
inline constexpr int64_t kChunk = 256;

}  // namespace foundry::kernels
