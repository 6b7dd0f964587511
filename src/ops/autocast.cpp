#include "foundry/ops/autocast.h"

#include "foundry/core/error.h"

namespace foundry::autocast {

namespace {
thread_local bool t_enabled = false;
thread_local DType t_dtype = DType::BFloat16;
}  // namespace

bool is_enabled() { return t_enabled; }
DType lower_dtype() { return t_dtype; }

AutocastGuard::AutocastGuard(bool enabled, DType dtype) : prev_enabled_(t_enabled), prev_dtype_(t_dtype) {
  FOUNDRY_CHECK_AS(TypeError, dtype == DType::BFloat16 || dtype == DType::Float16,
                   "autocast: the low-precision dtype must be bfloat16 or float16, got {}", dtype_name(dtype));
  t_enabled = enabled;
  t_dtype = dtype;
}

AutocastGuard::~AutocastGuard() {
  t_enabled = prev_enabled_;
  t_dtype = prev_dtype_;
}

}  // namespace foundry::autocast
