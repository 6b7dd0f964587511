// FOUNDRY_MAX_ISA: the newest x86 instruction set the kernels may use, whatever the CPU has.
#pragma once

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

}  // namespace foundry
