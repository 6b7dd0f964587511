// The one thread pool (src/core/parallel.cpp). Every kernel, and every GEMM (one single-threaded
// oneDNN primitive per chunk), runs through parallel_for; OpenMP is left to the few oneDNN
// primitives that thread themselves (convolutions) and OpenBLAS, which never run inside a chunk.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>

namespace foundry {

/// What parallel_for runs: a reference to a callable taking a range [begin, end), valid while the
/// call runs (parallel_for returns only when every chunk is done). Nothing is copied or allocated:
/// a std::function of a lambda capturing more than two references allocated on every call, and a
/// decode step makes dozens of calls a layer.
class RangeFn {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, RangeFn>>>
  RangeFn(F&& f)  // NOLINT(google-explicit-constructor): lambdas convert as they did to std::function
      : callable_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* c, int64_t b, int64_t e) { (*static_cast<std::remove_reference_t<F>*>(c))(b, e); }) {}
  void operator()(int64_t begin, int64_t end) const { call_(callable_, begin, end); }

 private:
  void* callable_;
  void (*call_)(void*, int64_t, int64_t);
};

/// Threads used by kernels, BLAS and oneDNN (default: OMP_NUM_THREADS or the core count).
int get_num_threads();
void set_num_threads(int n);
/// Whether jobs run on the calling thread alone while other programs' runnable threads leave this
/// process fewer than 2 of the machine's cores (looked at every 20 ms in /proc/loadavg; on by
/// default, FOUNDRY_POOL_ADAPT=0 in the environment turns it off): beside a busy process on 2
/// cores, one thread with a core to itself outruns two that share the rest. The job's chunks stay
/// the ones the threads would run, so results are the same bits either way.
void set_pool_adapts_to_load(bool on);
/// Threads the jobs run on now: 1 inside a parallel region or while the pool runs them on the
/// caller alone (set_pool_adapts_to_load), else get_num_threads().
int threads_in_use();
/// True inside a parallel region (nested regions run serially).
bool in_parallel_region();

/// Calls fn(begin, end) on disjoint chunks covering [begin, end), a few per thread. A range of
/// at most `grain` stays on the calling thread, and no chunk is shorter than half the grain.
/// Exceptions thrown by fn are rethrown here.
void parallel_for(int64_t begin, int64_t end, int64_t grain, RangeFn fn);
/// The same with up to `chunks_per_thread` chunks per thread (the default is 4). Finer chunks let
/// the threads finish closer together where a chunk costs nothing to start: the float32
/// matrix-vector products of decoding, whose last chunk otherwise leaves one thread waiting.
void parallel_for(int64_t begin, int64_t end, int64_t grain, int chunks_per_thread, RangeFn fn);

/// Elements of work below which an elementwise kernel stays on one thread.
inline constexpr int64_t kGrainSize = 32768;

/// Bytes a decode-time job (a matrix-vector product's weights, attention's cached rows) reads below
/// which it stays on the calling thread: a job costs ~1.6 us at 2 threads however small, more than
/// a second thread saves on a few 64 KB chunks, the more so when they sit in the caches (docs/
/// decisions.md, "One thread pool": a 12-layer Llama of hidden size 256 decoded 1.32x faster).
inline constexpr int64_t kMinParallelBytes = int64_t(256) << 10;

}  // namespace foundry
