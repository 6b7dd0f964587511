// libFuzzer target: the tokenizer.json loader must reject any input with a foundry error
// (never crash, hang or leak). Built only with clang (see tests/text/CMakeLists.txt).
//   ./build/bin/fuzz_text_json_loader -max_len=4096 corpus_dir/
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "foundry/core/error.h"
#include "foundry/text/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    auto tok = foundry::text::Tokenizer::from_json(text);
    auto enc = tok.encode("Hello, world! 123 <s> h\xC3\xA9llo");
    tok.decode(enc.ids, false);
  } catch (const foundry::Error&) {
  }
  try {
    foundry::text::Tokenizer::from_sentencepiece_bytes(text);
  } catch (const foundry::Error&) {
  }
  return 0;
}
