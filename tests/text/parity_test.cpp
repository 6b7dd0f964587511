// Parity with the reference implementations: every input line must give the same ids, tokens,
// offsets, word ids, masks, overflowing parts and decoded text as HF tokenizers (Node binding),
// tiktoken (npm) or SentencePiece (python3-sentencepiece). The expected files are written by
// reference.js and spm_reference.py (CTest fixture text_reference).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "foundry/text/tokenizer.h"
#include "test_util.h"

using foundry::text::Encoding;
using foundry::text::Tokenizer;
using json = nlohmann::json;

namespace {

struct Input {
  std::string text;
};

const std::vector<Input>& inputs() {
  static std::vector<Input> in = [] {
    std::vector<Input> v;
    std::ifstream f(ref_dir() + "/inputs.jsonl");
    std::string line;
    while (std::getline(f, line)) {
      json j = json::parse(line);
      Input x;
      if (j.contains("raw_b64"))
        x.text = b64decode(j["raw_b64"].get<std::string>());
      else
        x.text = j["text"].get<std::string>();
      v.push_back(std::move(x));
    }
    return v;
  }();
  return in;
}

json manifest_entry(const std::string& name) {
  std::ifstream f(ref_dir() + "/manifest.json");
  if (!f) return nullptr;
  json m = json::parse(f);
  for (auto& e : m)
    if (e["name"] == name) return e;
  return nullptr;
}

Tokenizer load(const json& e) {
  std::string kind = e.value("kind", "json");
  std::string path = e["path"];
  if (kind == "gpt2") {
    std::string dir = path.substr(0, path.rfind('/') + 1);
    return Tokenizer::from_gpt2_files(path, dir + "vocab.bpe");
  }
  if (kind == "tiktoken") {
    std::string enc = e["encoding"];
    auto te = enc == "r50k_base"     ? foundry::text::TiktokenEncoding::R50kBase
              : enc == "p50k_base"   ? foundry::text::TiktokenEncoding::P50kBase
              : enc == "o200k_base"  ? foundry::text::TiktokenEncoding::O200kBase
                                     : foundry::text::TiktokenEncoding::Cl100kBase;
    Tokenizer t = Tokenizer::from_tiktoken(path, te);
    if (!e["add_special"].get<bool>()) t.set_encode_special_tokens(true);
    return t;
  }
  if (kind == "spm") return Tokenizer::from_sentencepiece(path);
  return Tokenizer::from_file(path);
}

template <typename T>
std::string show(const T& v) {
  return json(v).dump(-1, ' ', false, json::error_handler_t::replace);
}

void run_parity(const std::string& name) {
  json e = manifest_entry(name);
  ASSERT_FALSE(e.is_null()) << "no reference for " << name << " in " << ref_dir()
                            << "/manifest.json: run the text_reference test (ctest -L text) first";
  Tokenizer tok = load(e);
  bool add_special = e["add_special"];
  bool pairs = e["pairs"];
  bool offsets = e["compare_offsets"];
  std::ifstream f(e["expected"].get<std::string>());
  const auto& in = inputs();
  size_t identical = 0, total = 0, shown = 0;
  std::string line;
  // Encode in batches of 256 like the reference (batch padding depends on the batch).
  std::vector<Encoding> encs;
  for (size_t b = 0; b < in.size(); b += 256) {
    size_t e_ = std::min(in.size(), b + 256);
    std::vector<Encoding> part;
    if (pairs) {
      std::vector<std::pair<std::string, std::string>> batch;
      for (size_t i = b; i < e_; ++i) batch.emplace_back(in[i].text, in[(i + 1) % in.size()].text);
      part = tok.encode_batch_pairs(batch, add_special);
    } else {
      std::vector<std::string> batch;
      for (size_t i = b; i < e_; ++i) batch.push_back(in[i].text);
      part = tok.encode_batch(batch, add_special);
    }
    for (auto& x : part) encs.push_back(std::move(x));
  }
  for (size_t i = 0; i < in.size() && std::getline(f, line); ++i) {
    json x = json::parse(line);
    ++total;
    const Encoding& enc = encs[i];
    std::vector<std::string> diffs;
    if (x["ids"].get<std::vector<uint32_t>>() != enc.ids) diffs.push_back("ids " + show(enc.ids) + " vs " + x["ids"].dump());
    if (x["tokens"].get<std::vector<std::string>>() != enc.tokens)
      diffs.push_back("tokens " + show(enc.tokens) + " vs " + show(x["tokens"]));
    if (offsets) {
      std::vector<std::vector<size_t>> off;
      for (auto& o : enc.offsets) off.push_back({o.first, o.second});
      if (x["offsets"].get<std::vector<std::vector<size_t>>>() != off)
        diffs.push_back("offsets " + show(off) + " vs " + x["offsets"].dump());
      if (x["word_ids"].get<std::vector<int32_t>>() != enc.word_ids)
        diffs.push_back("word_ids " + show(enc.word_ids) + " vs " + x["word_ids"].dump());
      if (x["type_ids"].get<std::vector<uint32_t>>() != enc.type_ids)
        diffs.push_back("type_ids " + show(enc.type_ids) + " vs " + x["type_ids"].dump());
      if (x["special_tokens_mask"].get<std::vector<uint32_t>>() != enc.special_tokens_mask)
        diffs.push_back("special_tokens_mask " + show(enc.special_tokens_mask) + " vs " + x["special_tokens_mask"].dump());
      if (x["attention_mask"].get<std::vector<uint32_t>>() != enc.attention_mask)
        diffs.push_back("attention_mask differs");
      std::vector<std::vector<uint32_t>> ov;
      for (auto& o : enc.overflowing) ov.push_back(o.ids);
      if (x["overflowing"].get<std::vector<std::vector<uint32_t>>>() != ov)
        diffs.push_back("overflowing " + show(ov) + " vs " + x["overflowing"].dump());
    }
    // (With batch padding a lone encode differs from the batch; skip those.)
    if (!pairs && !tok.padding() && tok.encode_ids(in[i].text, add_special) != enc.ids)
      diffs.push_back("encode_ids differs from encode");
    if (x.contains("decode")) {
      std::string d = tok.decode(enc.ids, false);
      if (d != x["decode"].get<std::string>()) diffs.push_back("decode " + show(d) + " vs " + x["decode"].dump());
    }
    if (x.contains("decode_skip")) {
      std::string d = tok.decode(enc.ids, true);
      if (d != x["decode_skip"].get<std::string>())
        diffs.push_back("decode(skip) " + show(d) + " vs " + x["decode_skip"].dump());
    }
    if (diffs.empty()) {
      ++identical;
    } else if (shown++ < 4) {
      std::string msg = name + " line " + std::to_string(i) + " input " + show(in[i].text).substr(0, 200) + "\n";
      for (auto& d : diffs) msg += "   " + d.substr(0, 700) + "\n";
      ADD_FAILURE() << msg;
    }
  }
  std::cout << "PARITY " << name << ": " << identical << "/" << total << " lines identical\n";
  std::ofstream(ref_dir() + "/parity-" + name + ".txt") << identical << "/" << total << "\n";
  EXPECT_GT(total, 0u);
  EXPECT_EQ(identical, total);
}

}  // namespace

#define PARITY(test_name, tok_name) \
  TEST(Parity, test_name) {                \
    SKIP_WITHOUT_SHARED_DATA();             \
    run_parity(tok_name);                   \
  }

PARITY(Llama3, "llama3")
PARITY(Llama3NoSpecial, "llama3-nospecial")
PARITY(Phi2, "phi-2")
PARITY(Phi3, "phi-3")
PARITY(Gpt2Files, "gpt2-files")
PARITY(BertUncased, "bert-uncased")
PARITY(BertCased, "bert-cased")
PARITY(BertPairsTruncation, "bert-pairs-trunc")
PARITY(BertLeftTruncation, "bert-left-trunc")
PARITY(WordPieceNfkcDigits, "wp-nfkc-digits")
PARITY(WordPieceNfdLowerPunct, "wp-nfd-lower-punct")
PARITY(WordPieceNfcSplit, "wp-nfc-split")
PARITY(WordPieceNfkdInvert, "wp-nfkd-invert")
PARITY(RobertaStyle, "roberta-style")
PARITY(RobertaPairs, "roberta-pairs")
PARITY(T5Unigram, "t5-unigram")
PARITY(UnigramByteFallback, "unigram-bytefallback")
PARITY(WordLevel, "wordlevel")
PARITY(TiktokenR50k, "tiktoken-r50k")
PARITY(TiktokenP50kSpecial, "tiktoken-p50k-special")
PARITY(TiktokenCl100k, "tiktoken-cl100k")
PARITY(TiktokenCl100kSpecial, "tiktoken-cl100k-special")
PARITY(TiktokenO200k, "tiktoken-o200k")
PARITY(SpmLlama2, "spm-llama2")
PARITY(SpmTestModel, "spm-spm_test_model")
