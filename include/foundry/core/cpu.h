// What the CPU kernels run with (as torch.backends.cpu.get_cpu_capability()).
#pragma once

#include <string>

namespace foundry {

/// The instruction set the SIMD kernels dispatch to on this CPU: Highway's name for its best
/// target ("AVX3_ZEN4", "AVX3_SPR", "AVX3", "AVX2", "SSE4", ...), with " VNNI" appended when
/// the AVX-512 VNNI integer kernels of quantized inference are in use. FOUNDRY_MAX_ISA=avx2 (or
/// sse4) in the environment caps it, to run as an older CPU would.
std::string cpu_capability();

}  // namespace foundry
