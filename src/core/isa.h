// FOUNDRY_MAX_ISA: the newest x86 instruction set the kernels may use, whatever the CPU has.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace foundry {

enum class MaxIsa {
  Native,  ///< everything the CPU has (unset, "native" or "avx512")
  AVX2,    ///< "avx2": no AVX-512 (Highway's AVX3 targets, the VNNI kernels, oneDNN's AVX-512 kernels)
  SSE4,    ///< "sse4": no AVX either (also the AVX2 integer kernels)
};

/// FOUNDRY_MAX_ISA, read once. The library applies it when it loads (Highway's dispatch, oneDNN's
/// ISA limit) and the hand-written kernels' CPU checks consult it: one machine then runs as an
/// AVX2-only CPU would (bench/quant_decode's AVX2 pass beside a llama.cpp built for AVX2 only). An
/// unknown value is reported on stderr and ignored. OpenBLAS reads OPENBLAS_CORETYPE (e.g.
/// Haswell) itself.
MaxIsa max_isa();

/// Highway's targets this process may use (FOUNDRY_MAX_ISA applied), its dispatch pinned to them
/// again. Call this, not hwy::SupportedTargets() alone: Highway 1.0.3's SupportedTargets() points
/// the dispatch at every target the CPU has and only then masks what it returns, so a capped
/// process would go on dispatching to AVX-512 (tests that listed the targets at start-up ran
/// their "AVX2-only" passes at AVX-512 that way).
int64_t supported_simd_targets();
/// Highway's targets compiled in and runnable here (FOUNDRY_MAX_ISA applied), for tests that run a
/// kernel on each; the dispatch pinned again after the listing.
std::vector<int64_t> compiled_simd_targets();
/// Restricts Highway's dispatch to `target` (a test's pass on one target; 0: back to every target
/// this process may use).
void restrict_simd_target(int64_t target);
/// Highway's name of a target ("AVX2", "AVX3_ZEN4", ...), for the tests' names.
std::string simd_target_name(int64_t target);

}  // namespace foundry
