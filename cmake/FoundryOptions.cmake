option(FOUNDRY_BUILD_TESTS "Build the test suite" ON)
option(FOUNDRY_BUILD_PYTHON "Build the pybind11 module" ON)
option(FOUNDRY_BUILD_BENCH "Build the benchmarks" ON)
option(FOUNDRY_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)

find_program(CCACHE_PROGRAM ccache)
if(CCACHE_PROGRAM)
  set(CMAKE_C_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
endif()

# The library targets the portable x86-64 baseline; SIMD comes from Highway's run-time dispatch.
# Never -march=native: the binary must run on machines without AVX-512.
add_library(foundry_warnings INTERFACE)
target_compile_options(foundry_warnings INTERFACE -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)

if(FOUNDRY_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
