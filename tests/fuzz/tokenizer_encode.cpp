// libFuzzer target: encoding arbitrary bytes (invalid UTF-8 included) and decoding arbitrary
// ids with real tokenizers must never crash. Tokenizers come from ../shared/data (override the
// folder with FOUNDRY_TEXT_DATA_DIR).
//   scripts/fuzz.sh tokenizer_encode
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "foundry/core/error.h"
#include "foundry/text/tokenizer.h"

namespace {
std::vector<foundry::text::Tokenizer>& tokenizers() {
  static std::vector<foundry::text::Tokenizer> toks = [] {
    const char* env = std::getenv("FOUNDRY_TEXT_DATA_DIR");
    std::string dir = std::string(env ? env : "../shared/data") + "/tokenizers/";
    std::vector<foundry::text::Tokenizer> v;
    for (const char* f : {"llama3/tokenizer.json", "phi-3/tokenizer.json", "gpt2/encoder.json",
                          "sentencepiece/spm_test_model.model"})
      v.push_back(foundry::text::Tokenizer::from_file(dir + f));
    return v;
  }();
  return toks;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  for (auto& tok : tokenizers()) {
    auto enc = tok.encode(text);
    tok.encode_pair(text, text.substr(size / 2));
    try {
      tok.decode(enc.ids, false);
      std::vector<uint32_t> ids;
      for (size_t i = 0; i + 3 < size; i += 4) ids.push_back(static_cast<uint32_t>(data[i]) | (data[i + 1] << 8) | (data[i + 2] << 16));
      tok.decode(ids, false);
    } catch (const foundry::Error&) {
    }
  }
  return 0;
}
