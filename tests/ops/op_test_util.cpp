#include "op_test_util.h"

#include <cmath>

#include "foundry/ops/ops.h"

namespace foundry::optest {

std::vector<std::string> all_op_names() {
  std::vector<std::string> names;
  for (const auto& op : ops::Registry::instance().all()) names.push_back(op->name());
  return names;
}

Tolerance tolerance_for(DType dt) {
  switch (dt) {
    case DType::Float64: return {1e-7, 1e-9};
    case DType::Float32: return {1e-5, 1e-5};
    case DType::BFloat16: return {2e-2, 2e-2};
    case DType::Float16: return {2e-3, 2e-3};
    default: return {0, 0};
  }
}

std::string compare(const Tensor& actual, const Tensor& expected, Tolerance tol) {
  if (!(Shape(actual.sizes()) == Shape(expected.sizes())))
    return fmt::format("shape {} vs expected {}", shape_str(actual.sizes()), shape_str(expected.sizes()));
  if (actual.numel() == 0) return "";
  Tensor a = actual.to(DType::Float64).contiguous(), e = expected.to(DType::Float64).contiguous();
  const double* ap = a.data<double>();
  const double* ep = e.data<double>();
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = ap[i], y = ep[i];
    if (std::isnan(x) && std::isnan(y)) continue;
    if (std::isinf(x) || std::isinf(y)) {
      if (x == y) continue;
    } else if (std::fabs(x - y) <= tol.atol + tol.rtol * std::fabs(y)) {
      continue;
    }
    return fmt::format("element {} (of {}): {} vs expected {} (rtol {}, atol {})", i, a.numel(), x, y, tol.rtol, tol.atol);
  }
  return "";
}

Tensor as_transposed_layout(const Tensor& t) {
  if (t.dim() < 2) return t;
  std::vector<int64_t> rev;
  for (int64_t d = t.dim() - 1; d >= 0; --d) rev.push_back(d);
  return t.permute(rev).contiguous().permute(rev);
}

Tensor as_negative_stride_layout(const Tensor& t) {
  if (t.dim() == 0 || t.numel() == 0) return t;
  std::vector<int64_t> all;
  for (int64_t d = 0; d < t.dim(); ++d) all.push_back(d);
  Tensor flipped = flip(t, all);  // contiguous storage holding reversed values
  Tensor v = flipped;
  for (int64_t d = 0; d < t.dim(); ++d) v = v.slice(d, None, None, -1);
  return v;
}

}  // namespace foundry::optest
