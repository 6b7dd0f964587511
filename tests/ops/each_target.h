// The fixture for tests that run a kernel on every Highway target compiled in and supported by the
// machine: each test instance pins dispatch to one target (named after it), then restores it.
#pragma once

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <string>

namespace foundry_test {

class PerTarget : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { hwy::SetSupportedTargetsForTest(GetParam()); }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

inline std::string target_name(const ::testing::TestParamInfo<int64_t>& info) { return hwy::TargetName(info.param); }

}  // namespace foundry_test
