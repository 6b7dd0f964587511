// Tensor's method forms of common ops (same as the free functions).
#include "foundry/ops/ops.h"
#include "foundry/ops/registry.h"
#include "ops/common.h"

namespace foundry {

Tensor Tensor::view(IntList shape) const { return foundry::view(*this, shape); }
Tensor Tensor::reshape(IntList shape) const { return foundry::reshape(*this, shape); }
Tensor Tensor::permute(IntList dims) const { return foundry::permute(*this, dims); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return foundry::transpose(*this, d0, d1); }
Tensor Tensor::t() const { return foundry::t(*this); }
Tensor Tensor::expand(IntList shape) const { return foundry::expand(*this, shape); }
Tensor Tensor::squeeze(std::optional<int64_t> dim) const { return foundry::squeeze(*this, dim); }
Tensor Tensor::unsqueeze(int64_t dim) const { return foundry::unsqueeze(*this, dim); }
Tensor Tensor::flatten(int64_t s, int64_t e) const { return foundry::flatten(*this, s, e); }
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  return foundry::narrow(*this, dim, start, length);
}
Tensor Tensor::select(int64_t dim, int64_t index) const { return foundry::select(*this, dim, index); }
Tensor Tensor::slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) const {
  return foundry::slice(*this, dim, start, stop, step);
}
Tensor Tensor::contiguous() const { return foundry::contiguous(*this); }
Tensor Tensor::clone() const { return foundry::clone(*this); }
Tensor Tensor::to(DType dtype) const { return foundry::to(*this, dtype); }
Tensor& Tensor::copy_(const Tensor& src) { return foundry::copy_(*this, src); }
Tensor& Tensor::fill_(const Scalar& value) { return foundry::fill_(*this, value); }
Tensor& Tensor::zero_() { return foundry::zero_(*this); }
Tensor Tensor::sum() const { return foundry::sum(*this); }
Tensor Tensor::mean() const { return foundry::mean(*this); }
Tensor Tensor::matmul(const Tensor& other) const { return foundry::matmul(*this, other); }

Tensor& Tensor::add_(const Tensor& other, const Scalar& alpha) {
  return ops::call_inplace(FOUNDRY_OP("add"), *this, {*this, other, alpha});
}
Tensor& Tensor::mul_(const Tensor& other) { return ops::call_inplace(FOUNDRY_OP("mul"), *this, {*this, other}); }
Tensor& Tensor::mul_(const Scalar& other) {
  return ops::call_inplace(FOUNDRY_OP("mul"), *this, {*this, wrap_scalar(other)});
}

}  // namespace foundry
