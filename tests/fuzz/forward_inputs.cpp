// libFuzzer target: the --inputs JSON of `foundry forward` (token ids and masks of a batch).
//   scripts/fuzz.sh forward_inputs
#include "foundry/core/error.h"
#include "foundry/models/forward_inputs.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    foundry::models::ForwardInputs in =
        foundry::models::parse_forward_inputs(std::string(fuzz::text(data, size)), "inputs.json");
    // A parsed batch is rectangular and its masks match input_ids.
    if (in.input_ids.dim() != 2) __builtin_trap();
    for (const foundry::Tensor* t : {&in.attention_mask, &in.token_type_ids})
      if (t->defined() && t->sizes() != in.input_ids.sizes()) __builtin_trap();
  } catch (const foundry::Error&) {
  }
  return 0;
}
