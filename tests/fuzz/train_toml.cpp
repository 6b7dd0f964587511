// libFuzzer target: the TOML run configuration of `foundry train` ([data], [model], [train],
// [eval], [sample]): parsed, range-checked, and written back as the run's JSON config.
//   scripts/fuzz.sh train_toml
#include "foundry/core/error.h"
#include "foundry/train/trainer.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write("run.toml", fuzz::text(data, size));
  try {
    foundry::train::TrainConfig c = foundry::train::load_train_config(path);
    foundry::train::check_train_config(c, path);
    (void)foundry::train::train_config_json(c);
  } catch (const foundry::Error&) {
  }
  return 0;
}
