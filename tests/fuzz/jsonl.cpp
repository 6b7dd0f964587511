// libFuzzer target: JSONL training data. The text field of `foundry prepare` (dotted paths) and
// the fine-tuning formats of `foundry finetune` ({"text"}, {"prompt", "completion"},
// {"messages"} through a chat template, {"input_ids", "labels"}), tokenized with a small
// byte-fallback SentencePiece vocabulary built here.
//   scripts/fuzz.sh jsonl
#include <memory>

#include "foundry/core/error.h"
#include "foundry/data/dataset.h"
#include "foundry/text/tokenizer.h"
#include "foundry/train/finetune.h"
#include "fuzz_common.h"

namespace {
const foundry::train::SftFormat& format() {
  static const foundry::train::SftFormat f = [] {
    foundry::text::Tokenizer::SentencePieceVocab v;
    for (const char* special : {"<unk>", "<s>", "</s>"}) v.pieces.push_back(special);
    v.types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
      char piece[8];
      std::snprintf(piece, sizeof piece, "<0x%02X>", b);
      v.pieces.push_back(piece);
      v.types.push_back(6);
    }
    for (const char* p : {"\xE2\x96\x81", "\xE2\x96\x81" "the", "e", "t", "a", "\xE2\x96\x81" "a"}) {
      v.pieces.push_back(p);
      v.types.push_back(1);
    }
    v.scores.assign(v.pieces.size(), 0.0f);
    foundry::train::SftFormat f;
    f.tokenizer = std::make_shared<foundry::text::Tokenizer>(foundry::text::Tokenizer::from_sentencepiece_vocab(v));
    f.chat_template =
        "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}";
    f.bos_token = "<s>";
    f.eos_token = "</s>";
    f.eos_id = 2;
    f.seq_len = 64;
    f.vocab_size = int64_t(v.pieces.size());
    return f;
  }();
  return f;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write("data.jsonl", fuzz::text(data, size));
  for (const char* field : {"text", "meta.text"}) {
    try {
      foundry::data::for_each_jsonl(path, field, [](const std::string&) {});
    } catch (const foundry::Error&) {
    }
  }
  try {
    foundry::train::load_sft_jsonl(path, format());
  } catch (const foundry::Error&) {
  }
  return 0;
}
