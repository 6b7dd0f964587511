// libFuzzer target: GPT-2's encoder.json and vocab.bpe, packed as two parts of one input.
// Whatever loads must encode and decode text.
//   scripts/fuzz.sh gpt2_bpe
#include "foundry/core/error.h"
#include "foundry/text/tokenizer.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto files = fuzz::parts(fuzz::text(data, size), 2);
  try {
    auto tok = foundry::text::Tokenizer::from_gpt2_files(fuzz::write("encoder.json", files[0]),
                                                         fuzz::write("vocab.bpe", files[1]));
    auto enc = tok.encode("Hello, world! 123 <|endoftext|> h\xC3\xA9llo");
    tok.decode(enc.ids, false);
  } catch (const foundry::Error&) {
  }
  return 0;
}
