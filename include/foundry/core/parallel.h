// The one thread pool: OpenMP, shared with OpenBLAS (OpenMP build) and oneDNN (OpenMP runtime),
// so two runtimes never spin against each other on the same cores.
#pragma once

#include <cstdint>
#include <functional>

namespace foundry {

/// Threads used by kernels, BLAS and oneDNN (default: OMP_NUM_THREADS or the core count).
int get_num_threads();
void set_num_threads(int n);
/// True inside a parallel region (nested regions run serially).
bool in_parallel_region();

/// Calls fn(begin, end) on disjoint chunks covering [begin, end). Chunks are at least `grain`
/// long, so small ranges stay on one thread. Exceptions thrown by fn are rethrown here.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

/// Elements of work below which an elementwise kernel stays on one thread.
inline constexpr int64_t kGrainSize = 32768;

}  // namespace foundry
