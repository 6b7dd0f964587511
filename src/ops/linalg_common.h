// Helpers shared by the linear-algebra op files (internal to src/ops).
#pragma once

#include "foundry/core/tensor.h"

namespace foundry::ops {

class Registry;

/// A matrix viewed as a batch of one ([1, rows, cols]); 3-d tensors are returned as they are.
Tensor as_3d(const Tensor& t);
/// A contiguous tensor's elements viewed as [b, m, n] (an alias without autograd; works for 0-d).
Tensor alias_3d(const Tensor& t, int64_t b, int64_t m, int64_t n);
/// The last two dims swapped (a recorded view).
Tensor mT(const Tensor& t);
/// Both operands of a product share a dtype that GEMM supports; throws TypeError naming `op`.
void check_matmul_dtype(const char* op, const Tensor& a, const Tensor& b);

void register_linalg_gemm_ops(Registry& r);
void register_linalg_lapack_ops(Registry& r);

}  // namespace foundry::ops
