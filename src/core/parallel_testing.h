// Test hooks of the thread pool (src/core/parallel.cpp); not part of the public API.
#pragma once

#include <cstdint>

#include "foundry/core/parallel.h"

namespace foundry::testing {

/// Runs every job on the caller alone, as the pool does while other programs take the cores
/// (set_pool_adapts_to_load), whatever the machine's load: tests of what must not change with it.
void force_pool_alone(bool on);

/// The number of jobs the pool has handed its threads so far (it grows by one per job that ran on
/// more than the calling thread, and by one when the thread count changes).
uint64_t pool_jobs();

/// The pool's thread count for a scope (n, or as it is), restored on the way out, also when a
/// failed ASSERT returns early.
class ThreadCountScope {
 public:
  ThreadCountScope() = default;
  explicit ThreadCountScope(int n) { set_num_threads(n); }
  ~ThreadCountScope() { set_num_threads(saved_); }
  ThreadCountScope(const ThreadCountScope&) = delete;
  ThreadCountScope& operator=(const ThreadCountScope&) = delete;

 private:
  int saved_ = get_num_threads();
};

}  // namespace foundry::testing
