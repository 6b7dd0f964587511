// Automatic mixed precision (torch.autocast for the CPU): inside an AutocastGuard, matrix
// products and convolutions run in bfloat16 (their float32 inputs are cast, as recorded `to` ops,
// so gradients flow back to float32 master weights), and numerically sensitive ops (softmax,
// norms, losses, exp/log, reductions that accumulate) run in float32. Other ops follow their
// inputs' promotion. Thread-local, like grad mode.
#pragma once

#include "foundry/core/dtype.h"

namespace foundry::autocast {

bool is_enabled();
DType lower_dtype();

class AutocastGuard {
 public:
  explicit AutocastGuard(bool enabled = true, DType dtype = DType::BFloat16);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
};

}  // namespace foundry::autocast
