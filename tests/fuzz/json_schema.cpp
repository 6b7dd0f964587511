// libFuzzer target: a response_format JSON schema (from an HTTP request to foundry serve) and a
// document read against it one character at a time, as constrained decoding reads a model's
// output (two parts of one input).
//   scripts/fuzz.sh json_schema
#include "foundry/core/error.h"
#include "foundry/serve/json_schema.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto files = fuzz::parts(fuzz::text(data, size), 2);
  try {
    foundry::serve::JsonMatcher m{std::string(files[0])};
    for (char c : files[1]) {
      if (!m.accepts(std::string_view(&c, 1))) break;
      m.feed(std::string_view(&c, 1));
    }
    (void)m.complete();
  } catch (const foundry::Error&) {
  }
  return 0;
}
