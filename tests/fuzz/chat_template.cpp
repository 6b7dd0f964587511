// libFuzzer target: a chat template (tokenizer_config.json's chat_template: code that comes with a
// model folder) and a conversation (JSON), in two parts of one input, parsed and rendered as
// apply_chat_template renders it. A template's nesting and the work one render may do are bounded
// (src/text/jinja.cpp: kMaxNesting, kMaxWork), so every input ends in a string or an error.
//   scripts/fuzz.sh chat_template
#include "foundry/core/error.h"
#include "foundry/models/chat_template.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto files = fuzz::parts(fuzz::text(data, size), 2);
  try {
    const foundry::models::ChatTemplate t{std::string(files[0])};
    (void)t.apply(std::string(files[1]), /*add_generation_prompt=*/true, "<s>", "</s>");
  } catch (const foundry::Error&) {
  }
  return 0;
}
