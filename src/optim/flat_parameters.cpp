// FlatParameters: re-points parameters (and optionally their gradients) into one buffer.
#include "foundry/optim/flat_parameters.h"

#include "foundry/autograd/grad_mode.h"
#include "foundry/ops/ops.h"

namespace foundry::optim {

FlatParameters::FlatParameters(std::vector<Tensor> params, bool flat_grads, int64_t align)
    : params_(std::move(params)) {
  FOUNDRY_CHECK_AS(ValueError, !params_.empty(), "FlatParameters: no parameters");
  FOUNDRY_CHECK_AS(ValueError, align >= 1, "FlatParameters: align_elements must be positive, got {}", align);
  const DType dtype = params_[0].dtype();
  int64_t total = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    FOUNDRY_CHECK_AS(ValueError, p.defined() && p.dtype() == dtype,
                     "FlatParameters: parameter {} is {}, the first one {} (one dtype per buffer)", i,
                     p.defined() ? dtype_name(p.dtype()) : "undefined", dtype_name(dtype));
    for (size_t j = 0; j < i; ++j)
      FOUNDRY_CHECK_AS(ValueError, !p.is_same(params_[j]), "FlatParameters: parameter {} is listed twice", i);
    offsets_.push_back(total);
    total += (p.numel() + align - 1) / align * align;
  }
  autograd::NoGradGuard no_grad;
  buffer_ = zeros({total}, dtype);
  if (flat_grads) grad_buffer_ = zeros({total}, dtype);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor slice = make_tensor(buffer_.storage(), p.sizes(), contiguous_strides(p.sizes()), offsets_[i], dtype);
    slice.copy_(p);
    // Re-point the parameter itself: every holder of this TensorImpl now sees the buffer.
    TensorImpl* impl = p.impl();
    impl->storage = buffer_.storage();
    impl->strides = Shape(contiguous_strides(p.sizes()));
    impl->offset = offsets_[i];
  }
  if (flat_grads) {
    for (size_t i = 0; i < params_.size(); ++i) {
      Tensor old = params_[i].grad();
      Tensor g = make_tensor(grad_buffer_.storage(), params_[i].sizes(), contiguous_strides(params_[i].sizes()),
                             offsets_[i], dtype);
      if (old.defined()) g.copy_(old);
      params_[i].set_grad(g);
    }
  }
}

void FlatParameters::attach_grads() const {
  FOUNDRY_CHECK(grad_buffer_.defined(), "FlatParameters: attach_grads() needs flat_grads=true");
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = params_[i].grad();
    if (g.defined() && g.storage().get() == grad_buffer_.storage().get()) continue;
    Tensor view = make_tensor(grad_buffer_.storage(), params_[i].sizes(), contiguous_strides(params_[i].sizes()),
                              offsets_[i], params_[i].dtype());
    if (g.defined()) {
      autograd::NoGradGuard no_grad;
      view.copy_(g);
    } else {
      autograd::NoGradGuard no_grad;
      view.zero_();
    }
    params_[i].set_grad(view);
  }
}

}  // namespace foundry::optim
