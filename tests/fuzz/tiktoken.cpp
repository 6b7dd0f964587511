// libFuzzer target: tiktoken rank files ("base64-token rank" lines). The first byte picks the
// encoding (its split pattern and special tokens); whatever loads must encode and decode text.
//   scripts/fuzz.sh tiktoken
#include "foundry/core/error.h"
#include "foundry/text/tokenizer.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using foundry::text::TiktokenEncoding;
  constexpr TiktokenEncoding kEncodings[] = {TiktokenEncoding::R50kBase, TiktokenEncoding::P50kBase,
                                             TiktokenEncoding::P50kEdit, TiktokenEncoding::Cl100kBase,
                                             TiktokenEncoding::O200kBase};
  const TiktokenEncoding encoding = kEncodings[data[0] % 5];
  const std::string path = fuzz::write("ranks.tiktoken", fuzz::text(data + 1, size - 1));
  try {
    auto tok = foundry::text::Tokenizer::from_tiktoken(path, encoding);
    auto enc = tok.encode("Hello, world! 123 <|endoftext|> h\xC3\xA9llo", true);
    tok.decode(enc.ids, false);
  } catch (const foundry::Error&) {
  }
  return 0;
}
