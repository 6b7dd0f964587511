// Live-tensor tracking for finding leaks: every TensorImpl is registered with the call stack that
// created it, and at exit the tensors still alive are reported on stderr, grouped by dtype, shape
// and creation site. On by default in debug builds (NDEBUG undefined); FOUNDRY_LEAK_REPORT=1 turns
// it on in any build, FOUNDRY_LEAK_REPORT=0 off. Costs a backtrace per tensor, so release builds
// leave it off.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace foundry {

class TensorImpl;

namespace debug {

namespace detail {
extern std::atomic<bool> tracking;  ///< read on every tensor construction: kept inline
}
inline bool tensor_tracking_enabled() { return detail::tracking.load(std::memory_order_relaxed); }
/// Starts or stops registering new tensors (tensors made while off are never reported).
void set_tensor_tracking(bool on);
/// Tensors registered and still alive.
int64_t live_tensor_count();
/// The report printed at exit: live tensors grouped by dtype, shape and creation stack (at most
/// `max_groups` groups, `max_frames` frames each); "" when none.
std::string live_tensors_report(size_t max_groups = 20, size_t max_frames = 8);

namespace detail {
void on_tensor_created(const TensorImpl* t);
void on_tensor_destroyed(const TensorImpl* t);
}  // namespace detail

}  // namespace debug
}  // namespace foundry
