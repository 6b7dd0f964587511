// Test hooks of the thread pool (src/core/parallel.cpp); not part of the public API.
#pragma once

#include <cstdint>

namespace foundry::testing {

/// Runs every job on the caller alone, as the pool does while other programs take the cores
/// (set_pool_adapts_to_load), whatever the machine's load: tests of what must not change with it.
void force_pool_alone(bool on);

/// The number of jobs the pool has handed its threads so far (it grows by one per job that ran on
/// more than the calling thread, and by one when the thread count changes).
uint64_t pool_jobs();

}  // namespace foundry::testing
