// Sample-tensor helpers for the registry's sample generators.
#include <cmath>

#include "ops/common.h"

namespace foundry::ops {

Tensor sample_uniform(IntList shape, DType dtype, Generator& gen, double lo, double hi) {
  int64_t n = numel_of(shape);
  Tensor out = empty(shape, DType::Float64);
  double* p = out.data<double>();
  uint64_t base = gen.reserve(uint64_t(n));
  for (int64_t i = 0; i < n; ++i) {
    auto r = philox4x32(base + uint64_t(i), 0, gen.seed());
    double u = uniform_double(r[0], r[1]);
    if (dtype == DType::Bool) p[i] = u < 0.5 ? 0 : 1;
    else if (is_integral(dtype)) {
      double l = std::ceil(lo), h = std::floor(hi);
      if (dtype == DType::UInt8) l = std::max(l, 0.0);
      p[i] = std::floor(l + u * (h - l + 1));
      if (p[i] > h) p[i] = h;
    } else {
      p[i] = lo + u * (hi - lo);
    }
  }
  return out.to(dtype);
}

Tensor sample_away_from_zero(IntList shape, DType dtype, Generator& gen, double lo, double hi) {
  if (is_integral(dtype)) {
    // Integers in [max(1, lo), max(1, hi)] with random signs (positive only for uint8).
    lo = std::max(1.0, std::ceil(lo));
    hi = std::max(lo, std::floor(hi));
  }
  Tensor mag = sample_uniform(shape, is_integral(dtype) ? DType::Int64 : DType::Float64, gen, lo, hi).to(DType::Float64);
  if (dtype == DType::UInt8) return mag.to(dtype);
  Tensor sgn = sample_uniform(shape, DType::Bool, gen);
  Tensor signs = where(sgn, scalar_tensor(1.0), scalar_tensor(-1.0));
  return (mag * signs).to(dtype);
}

Tensor sample_index(IntList shape, int64_t high, Generator& gen) {
  return sample_uniform(shape, DType::Int64, gen, 0, double(high - 1));
}

std::vector<Shape> standard_shapes() { return {Shape{}, Shape{5}, Shape{3, 4}, Shape{2, 0, 3}, Shape{2, 3, 4}}; }

}  // namespace foundry::ops
