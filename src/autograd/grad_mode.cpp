#include "foundry/autograd/grad_mode.h"

namespace foundry::autograd {

namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_inference_mode = false;
}  // namespace

bool is_grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }
bool is_inference_mode() { return t_inference_mode; }

InferenceModeGuard::InferenceModeGuard() : prev_grad_(t_grad_enabled), prev_inference_(t_inference_mode) {
  t_grad_enabled = false;
  t_inference_mode = true;
}
InferenceModeGuard::~InferenceModeGuard() {
  t_grad_enabled = prev_grad_;
  t_inference_mode = prev_inference_;
}

}  // namespace foundry::autograd
