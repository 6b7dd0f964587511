#include "core/isa.h"
#include "foundry/core/cpu.h"

#include <oneapi/dnnl/dnnl.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "hwy/targets.h"
#include "quant/vnni_gemv.h"

namespace foundry {

MaxIsa max_isa() {
  static const MaxIsa cap = [] {
    const char* v = std::getenv("FOUNDRY_MAX_ISA");
    const std::string s = v ? v : "";
    if (s.empty() || s == "native" || s == "avx512") return MaxIsa::Native;
    if (s == "avx2") return MaxIsa::AVX2;
    if (s == "sse4") return MaxIsa::SSE4;
    std::fprintf(stderr, "foundry: FOUNDRY_MAX_ISA=%s is not one of native, avx512, avx2, sse4; ignored\n", v);
    return MaxIsa::Native;
  }();
  return cap;
}

int64_t supported_simd_targets() {
  const int64_t targets = hwy::SupportedTargets();
  hwy::GetChosenTarget().Update(targets);
  return targets;
}

std::vector<int64_t> compiled_simd_targets() {
  std::vector<int64_t> targets = hwy::SupportedAndGeneratedTargets();
  supported_simd_targets();
  return targets;
}

void restrict_simd_target(int64_t target) {
  hwy::SetSupportedTargetsForTest(target);
  supported_simd_targets();
}

std::string simd_target_name(int64_t target) { return hwy::TargetName(target); }

std::string cpu_capability() {
  const int64_t targets = supported_simd_targets();
  std::string name = hwy::TargetName(targets & -targets);  // the lowest bit: the best target
  if (quant::vnni_available()) name += " VNNI";
  if (quant::amx_int8_available()) name += " AMX-INT8";
  return name;
}

namespace {

// Applied as the library loads, before any kernel is dispatched or oneDNN primitive created.
// Highway's x86 targets are bits, the better the lower: everything below a target's bit is newer.
[[maybe_unused]] const bool applied = [] {
  const MaxIsa cap = max_isa();
#if HWY_ARCH_X86
  if (cap == MaxIsa::AVX2) hwy::DisableTargets(HWY_AVX2 - 1);
  if (cap == MaxIsa::SSE4) hwy::DisableTargets(HWY_SSE4 - 1);
#endif
  if (cap == MaxIsa::AVX2) dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2);
  if (cap == MaxIsa::SSE4) dnnl_set_max_cpu_isa(dnnl_cpu_isa_sse41);
  return true;
}();

}  // namespace

}  // namespace foundry
