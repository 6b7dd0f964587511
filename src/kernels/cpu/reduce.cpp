#include "kernels/cpu/reduce.h"

#include <algorithm>

#include "foundry/ops/ops.h"

namespace foundry::kernels {

Rows to_rows(const Tensor& x, const std::vector<int64_t>& dims) {
  Rows r;
  const int64_t nd = x.dim();
  std::vector<bool> reduced(size_t(nd), false);
  for (int64_t d : dims) reduced[size_t(d)] = true;
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < nd; ++d) {
    if (!reduced[size_t(d)]) {
      perm.push_back(d);
      r.M *= x.size(d);
      r.keep_shape.push_back(x.size(d));
      r.reduced_shape.push_back(x.size(d));
    } else {
      r.keep_shape.push_back(1);
    }
  }
  for (int64_t d : dims) {
    perm.push_back(d);
    r.K *= x.size(d);
  }
  Tensor p = x;
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity &= perm[i] == int64_t(i);
  if (!identity) p = x.permute(perm);
  r.data = p.contiguous();
  return r;
}

}  // namespace foundry::kernels
