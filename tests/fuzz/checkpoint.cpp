// libFuzzer target: a training checkpoint folder, its checkpoint.json manifest and a
// model.safetensors packed as two parts of one input.
//   scripts/fuzz.sh checkpoint
#include <filesystem>

#include "foundry/core/error.h"
#include "foundry/io/checkpoint.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto files = fuzz::parts(fuzz::text(data, size), 2);
  const std::filesystem::path dir = fuzz::scratch() / "step-7";
  std::filesystem::create_directories(dir);
  fuzz::write("step-7/checkpoint.json", files[0]);
  fuzz::write("step-7/model.safetensors", files[1]);
  try {
    int64_t step = 0;
    foundry::io::CheckpointState state = foundry::io::load_checkpoint_dir(dir.string(), &step);
    for (const auto& [name, component] : state)
      for (const auto& [key, t] : component.tensors) (void)t.nbytes();
  } catch (const foundry::Error&) {
  }
  return 0;
}
