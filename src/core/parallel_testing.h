// Test hooks of the thread pool (src/core/parallel.cpp); not part of the public API.
#pragma once

namespace foundry::testing {

/// Runs every job on the caller alone, as the pool does while other programs take the cores
/// (set_pool_adapts_to_load), whatever the machine's load: tests of what must not change with it.
void force_pool_alone(bool on);

}  // namespace foundry::testing
