// Memory orders a tensor's elements can fill its storage in, beside contiguous.
#pragma once

#include "foundry/core/tensor.h"

namespace foundry {

/// A matrix stored as the rows of its transpose: [R, C] with strides (1, R), as x.t() of a
/// contiguous x is. Loaded GPT-2 Conv1D weights are kept so (decode reads them as rows), and
/// their gradients and optimizer states follow (PyTorch keeps a dense parameter's layout too).
inline bool is_rows_of_transpose(const Tensor& t) {
  return t.dim() == 2 && t.size(0) > 1 && t.size(1) > 1 && t.stride(0) == 1 && t.stride(1) == t.size(0);
}

/// Whether t (shaped like `like`) lies in memory in like's order: as the rows of its transpose
/// where like is so stored, else contiguous.
inline bool in_memory_order_of(const Tensor& t, const Tensor& like) {
  return is_rows_of_transpose(like) ? is_rows_of_transpose(t) : t.is_contiguous();
}

}  // namespace foundry
