// libFuzzer target: SentencePiece .model files (a protobuf ModelProto). Whatever loads must encode
// and decode text.
//   scripts/fuzz.sh sentencepiece
#include "foundry/core/error.h"
#include "foundry/text/tokenizer.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto tok = foundry::text::Tokenizer::from_sentencepiece_bytes(fuzz::text(data, size));
    auto enc = tok.encode("Hello, world! 123 <s> h\xC3\xA9llo \xF0\x9F\x98\x80");
    tok.decode(enc.ids, false);
  } catch (const foundry::Error&) {
  }
  return 0;
}
