option(FOUNDRY_BUILD_TESTS "Build the test suite" ON)
option(FOUNDRY_BUILD_PYTHON "Build the pybind11 module" ON)
option(FOUNDRY_BUILD_BENCH "Build the benchmarks" ON)
option(FOUNDRY_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
option(FOUNDRY_FUZZ "Instrument everything for libFuzzer and build the fuzz targets (clang only)" OFF)
# Highway targets compiled into every SIMD file. A sanitizer build may keep fewer (each target is a
# full copy of every kernel to compile); the release build keeps SSE4, AVX2, AVX-512 and the fallback.
set(FOUNDRY_HWY_DISABLED_TARGETS "HWY_SSSE3" CACHE STRING "Highway targets left out of the SIMD kernels, e.g. (HWY_SSSE3|HWY_SSE4)")

find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  set(CMAKE_C_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
endif()

# The library targets the portable x86-64 baseline; SIMD comes from Highway's run-time dispatch.
# Never -march=native: the binary must run on machines without AVX-512.
add_library(foundry_warnings INTERFACE)
target_compile_options(foundry_warnings INTERFACE -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)

# Code generation of the library's own objects (libfoundry and the tokenizers' object library).
# Its thread_locals (grad mode, the tensor object cache, the pool's region flag, the kernels'
# per-thread rows) are read many times a decoded token; in a shared library each read called
# __tls_get_addr. TLS descriptors (-mtls-dialect=gnu2) resolve to a load of the variable's offset
# when the library is loaded with the program, and stay correct under dlopen (Python):
# ~2-4% more tokens/s on a model whose step is all fixed cost (docs/benchmarks.md). GCC only
# (clang 14 has no such flag); a compiler without it keeps the default dialect.
add_library(foundry_codegen INTERFACE)
include(CheckCXXCompilerFlag)
check_cxx_compiler_flag(-mtls-dialect=gnu2 FOUNDRY_HAVE_TLS_DESCRIPTORS)
if(FOUNDRY_HAVE_TLS_DESCRIPTORS)
  target_compile_options(foundry_codegen INTERFACE -mtls-dialect=gnu2)
endif()

if(FOUNDRY_SANITIZE)
  # Every UB report stops the program, except float-to-int casts, which stay recoverable so that
  # tests/sanitize/ubsan.supp can silence the one in Highway's own EMU128 ConvertTo (NaN lanes in
  # its exp); halt_on_error=1 (scripts/sanitize.sh) still stops on any other.
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
                      -fsanitize-recover=float-cast-overflow)
  add_link_options(-fsanitize=address,undefined)
endif()

# libFuzzer wants every parser's code (and what it calls) to carry coverage counters; the fuzz
# targets themselves link libFuzzer's main with -fsanitize=fuzzer (tests/fuzz/CMakeLists.txt).
# The same tree runs the test suite under the sanitizers, so one extra build serves both.
if(FOUNDRY_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "FOUNDRY_FUZZ needs clang (CC=clang CXX=clang++): libFuzzer is part of clang")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
