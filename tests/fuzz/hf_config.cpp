// libFuzzer target: a Hugging Face model folder's config.json and generation_config.json (two
// parts of one input), read and normalised for every architecture Foundry knows.
//   scripts/fuzz.sh hf_config
#include <filesystem>

#include "foundry/core/error.h"
#include "foundry/models/encoder.h"
#include "foundry/models/pretrained.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto files = fuzz::parts(fuzz::text(data, size), 2);
  const std::filesystem::path dir = fuzz::scratch() / "model";
  std::filesystem::create_directories(dir);
  fuzz::write("model/config.json", files[0]);
  std::filesystem::remove(dir / "generation_config.json");
  if (!files[1].empty()) fuzz::write("model/generation_config.json", files[1]);
  try {
    foundry::models::read_config(dir.string());
  } catch (const foundry::Error&) {
  }
  try {
    (void)foundry::models::is_encoder_folder(dir.string());
  } catch (const foundry::Error&) {
  }
  return 0;
}
