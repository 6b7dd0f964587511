// FlatParameters: moves a set of parameters into one contiguous buffer (llm.c's
// malloc_and_point_parameters) while keeping each parameter's identity: the TensorImpl that the
// module and the user hold is re-pointed at its slice of the buffer, so nothing needs to be
// re-registered. Optionally the gradients get one flat buffer too (each parameter's grad is a
// view into it; use zero_grad(set_to_none=false) so backward accumulates into it in place).
//
// What it is for: one contiguous range to hand to an all-reduce bucket or a checkpoint writer, and
// a single-range optimizer update. The fused optimizers do not need it (they walk the parameters
// tensor by tensor inside one parallel loop; see docs/decisions.md for the measurement).
//
// Caveats: every parameter then shares one storage and so one version counter (an in-place write
// to one parameter invalidates graphs that saved another); views taken of a parameter before
// flattening keep pointing at the old memory. Flatten right after building the model.
#pragma once

#include <cstdint>
#include <vector>

#include "foundry/core/tensor.h"

namespace foundry::optim {

class FlatParameters {
 public:
  /// Copies every parameter (same dtype, contiguous) into one buffer and re-points it there.
  /// Each parameter starts at a multiple of `align_elements` (cache-line alignment by default).
  /// With flat_grads, also allocates a zeroed gradient buffer and sets each parameter's grad to
  /// its slice (existing gradients are copied in).
  explicit FlatParameters(std::vector<Tensor> params, bool flat_grads = false, int64_t align_elements = 16);

  /// The whole parameter buffer (1-D, including alignment padding, which stays zero).
  const Tensor& buffer() const { return buffer_; }
  /// The gradient buffer (undefined without flat_grads).
  const Tensor& grad_buffer() const { return grad_buffer_; }
  const std::vector<Tensor>& params() const { return params_; }
  /// Element offset of parameter i in the buffers.
  int64_t offset(size_t i) const { return offsets_.at(i); }
  /// Re-attaches the gradient views after something dropped them (zero_grad(set_to_none=true)).
  void attach_grads() const;

 private:
  std::vector<Tensor> params_;
  std::vector<int64_t> offsets_;
  Tensor buffer_, grad_buffer_;
};

}  // namespace foundry::optim
