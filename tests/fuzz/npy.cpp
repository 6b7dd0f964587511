// libFuzzer target: NumPy .npy arrays (parsed from memory) and .npz archives (zip of .npy files,
// read through libzip from a file).
//   scripts/fuzz.sh npy
#include "foundry/core/error.h"
#include "foundry/io/npy.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(fuzz::text(data, size));
  try {
    foundry::Tensor t = foundry::io::parse_npy(bytes, "fuzz.npy");
    // What parsed must survive a round trip through the writer.
    foundry::Tensor again = foundry::io::parse_npy(foundry::io::encode_npy(t), "again.npy");
    if (again.sizes() != t.sizes() || again.dtype() != t.dtype()) __builtin_trap();
  } catch (const foundry::Error&) {
  }
  try {
    foundry::io::load_npz(fuzz::write("arrays.npz", bytes));
  } catch (const foundry::Error&) {
  }
  return 0;
}
