// The fixture for tests that run a kernel on every Highway target compiled in and supported by the
// machine: each test instance pins dispatch to one target (named after it), then restores it; and
// the reproducible inputs those tests share.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/isa.h"

namespace foundry_test {

class PerTarget : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { foundry::restrict_simd_target(GetParam()); }
  void TearDown() override { foundry::restrict_simd_target(0); }  // back to what FOUNDRY_MAX_ISA allows
};

inline std::string target_name(const ::testing::TestParamInfo<int64_t>& info) { return foundry::simd_target_name(info.param); }

/// n values k / divisor for integers k in [-1000, 1000] from a linear congruential sequence
/// (the same on every machine, unlike <random>'s distributions).
inline std::vector<float> lcg_values(size_t n, uint32_t seed, float divisor) {
  std::vector<float> v(n);
  for (auto& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = float(int32_t(seed >> 8) % 2001 - 1000) / divisor;
  }
  return v;
}

}  // namespace foundry_test
