// Shared helpers for writing registry entries (internal to src/ops).
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"
#include "foundry/ops/registry.h"

namespace foundry::ops {

/// The OpDef named `name`, looked up once per call site.
#define FOUNDRY_OP(name)                                                        \
  ([]() -> const ::foundry::ops::OpDef& {                                      \
    static const ::foundry::ops::OpDef& def = ::foundry::ops::find_op(name);   \
    return def;                                                                \
  }())

inline const std::vector<DType> kFloatTypes = {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};
inline const std::vector<DType> kIntTypes = {DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64};
inline const std::vector<DType> kNumericTypes = {DType::Bool,    DType::UInt8,    DType::Int8,    DType::Int16,
                                                 DType::Int32,   DType::Int64,    DType::Float16, DType::BFloat16,
                                                 DType::Float32, DType::Float64};
inline const std::vector<DType> kAllTypes = {DType::Bool,    DType::UInt8,    DType::Int8,       DType::Int16,
                                             DType::Int32,   DType::Int64,    DType::Float16,    DType::BFloat16,
                                             DType::Float32, DType::Float64,  DType::Float8E4M3, DType::Float8E5M2,
                                             DType::UInt16,  DType::UInt32,   DType::UInt64};
inline const std::vector<DType> kIntAndFloat = {DType::Int32, DType::Int64, DType::Float16, DType::BFloat16,
                                                DType::Float32, DType::Float64};

/// A new contiguous tensor with x's shape.
inline Tensor empty_as(const Tensor& x, DType dtype) { return empty(x.sizes(), dtype); }

/// Sums `grad` down to `shape` (undoing broadcasting).
Tensor sum_to(const Tensor& grad, IntList shape);

/// Reduction dims normalised: None or [] means all dims; negative dims wrapped; sorted unique.
std::vector<int64_t> reduction_dims(const OptDims& dim, int64_t ndim, const char* op);
std::vector<int64_t> reduction_dims(const Value& dim, int64_t ndim, const char* op);

// ---- sample generation -------------------------------------------------------------------
/// Uniform values in [lo, hi] (integers for integral dtypes, 0/1 for bool).
Tensor sample_uniform(IntList shape, DType dtype, Generator& gen, double lo = -2.0, double hi = 2.0);
/// Uniform magnitudes in [lo, hi] with random signs (keeps values away from zero).
Tensor sample_away_from_zero(IntList shape, DType dtype, Generator& gen, double lo = 0.3, double hi = 2.0);
/// Integer indices in [0, high).
Tensor sample_index(IntList shape, int64_t high, Generator& gen);
/// The standard shapes unary-style samples use: 0-d, vector, matrix, empty, 3-d.
std::vector<Shape> standard_shapes();

}  // namespace foundry::ops
