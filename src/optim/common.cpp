#include "optim/common.h"

#include <map>

#include "foundry/autograd/grad_mode.h"
#include "foundry/ops/ops.h"

namespace foundry::optim::detail {

std::vector<Tensor> flat_zeros_like(const std::vector<Tensor>& like, double fill) {
  std::vector<Tensor> out(like.size());
  std::map<DType, std::vector<size_t>> by_dtype;
  for (size_t i = 0; i < like.size(); ++i) by_dtype[like[i].dtype()].push_back(i);
  autograd::NoGradGuard no_grad;
  for (const auto& [dtype, idx] : by_dtype) {
    std::vector<int64_t> offsets;
    int64_t total = 0;
    for (size_t i : idx) {
      offsets.push_back(total);
      total += (like[i].numel() + kAlignElements - 1) / kAlignElements * kAlignElements;
    }
    Tensor buffer = empty({total}, dtype);
    buffer.fill_(fill);
    for (size_t k = 0; k < idx.size(); ++k) {
      const Tensor& p = like[idx[k]];
      const Shape strides = is_rows_of_transpose(p) ? Shape(p.strides()) : contiguous_strides(p.sizes());
      out[idx[k]] = make_tensor(buffer.storage(), p.sizes(), strides, offsets[k], dtype);
    }
  }
  return out;
}

Tensor laid_out_like(const Tensor& t, const Tensor& p) {
  if (in_memory_order_of(t, p)) return t;
  autograd::NoGradGuard no_grad;
  return is_rows_of_transpose(p) ? t.t().contiguous().t() : t.contiguous();
}

float* state_ptr(Tensor& t, const Tensor& p) {
  if (t.dtype() != DType::Float32 || !in_memory_order_of(t, p)) {
    autograd::NoGradGuard no_grad;
    t = laid_out_like(t.to(DType::Float32), p);
  }
  return t.data<float>();
}

}  // namespace foundry::optim::detail
