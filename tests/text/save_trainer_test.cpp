// save() round trips and the BPE trainer. These tests write tokenizer.json files plus the
// encodings Foundry gives with them into <ref>/saved/; verify_saved.js (CTest
// text_hf_loads_saved) then checks that HF tokenizers loads every file and encodes the same.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "foundry/core/error.h"
#include "foundry/text/tokenizer.h"
#include "foundry/text/trainer.h"
#include "test_util.h"

using foundry::text::Encoding;
using foundry::text::Tokenizer;
using json = nlohmann::json;

namespace {

std::vector<std::string> input_texts() {
  std::vector<std::string> v;
  std::ifstream f(ref_dir() + "/inputs.jsonl");
  std::string line;
  while (std::getline(f, line)) {
    json j = json::parse(line);
    v.push_back(j.contains("raw_b64") ? b64decode(j["raw_b64"].get<std::string>()) : j["text"].get<std::string>());
  }
  return v;
}

json encoding_json(const Encoding& e) {
  std::vector<std::vector<size_t>> off;
  for (auto& o : e.offsets) off.push_back({o.first, o.second});
  return json{{"ids", e.ids}, {"tokens", e.tokens}, {"offsets", off}};
}

// Writes the saved file and Foundry's encodings of all inputs with the reloaded file.
void write_saved(const std::string& name, const Tokenizer& original, bool add_special, bool same_as_original) {
  std::string dir = ref_dir() + "/saved";
  std::filesystem::create_directories(dir);
  std::string path = dir + "/" + name + ".tokenizer.json";
  original.save(path);
  Tokenizer reloaded = Tokenizer::from_file(path);
  auto texts = input_texts();
  ASSERT_FALSE(texts.empty()) << "run the text_reference test first";
  std::ofstream out(dir + "/" + name + ".expected.jsonl");
  size_t same = 0;
  // Batches of 256 like verify_saved.js (batch padding depends on the batch).
  for (size_t b = 0; b < texts.size(); b += 256) {
    std::vector<std::string> batch(texts.begin() + b, texts.begin() + std::min(texts.size(), b + 256));
    auto encs = reloaded.encode_batch(batch, add_special);
    auto orig = same_as_original ? original.encode_batch(batch, add_special) : std::vector<Encoding>{};
    for (size_t k = 0; k < encs.size(); ++k) {
      const Encoding& r = encs[k];
      if (same_as_original) same += orig[k].ids == r.ids;
      json j = encoding_json(r);
      j["decode"] = reloaded.decode(r.ids, false);
      out << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    }
  }
  if (same_as_original) {
    EXPECT_EQ(same, texts.size()) << name << ": reloaded save differs from the original";
  }
  std::ofstream(dir + "/" + name + ".meta.json") << json{{"add_special", add_special}}.dump();
}

json manifest() {
  std::ifstream f(ref_dir() + "/manifest.json");
  return f ? json::parse(f) : json::array();
}

}  // namespace

TEST(Save, RoundTripEveryReferenceTokenizer) {
  SKIP_WITHOUT_SHARED_DATA();
  json m = manifest();
  ASSERT_FALSE(m.empty()) << "run the text_reference test first";
  for (auto& e : m) {
    std::string kind = e.value("kind", "json");
    std::string name = e["name"];
    if (e["pairs"].get<bool>()) continue;
    if (name == "llama3-nospecial") continue;
    Tokenizer t = [&] {
      std::string path = e["path"];
      if (kind == "gpt2") return Tokenizer::from_gpt2_files(path, path.substr(0, path.rfind('/') + 1) + "vocab.bpe");
      if (kind == "tiktoken") {
        std::string enc = e["encoding"];
        auto te = enc == "r50k_base"    ? foundry::text::TiktokenEncoding::R50kBase
                  : enc == "p50k_base"  ? foundry::text::TiktokenEncoding::P50kBase
                  : enc == "o200k_base" ? foundry::text::TiktokenEncoding::O200kBase
                                        : foundry::text::TiktokenEncoding::Cl100kBase;
        return Tokenizer::from_tiktoken(path, te);
      }
      return Tokenizer::from_file(path);
    }();
    // SentencePiece semantics (special pieces never matched in text, unk rendering) have no
    // exact tokenizer.json form; their saves are HF-converter style and compared with HF only.
    bool same = kind != "spm";
    SCOPED_TRACE(name);
    write_saved(name, t, e["add_special"].get<bool>() || kind == "tiktoken", same);
  }
}

TEST(Trainer, ByteLevelBpeOnTinyShakespeare) {
  SKIP_WITHOUT_SHARED_DATA();
  foundry::text::BpeTrainerOptions opt;
  opt.vocab_size = 2000;
  opt.min_frequency = 2;
  opt.special_tokens = {"<|endoftext|>", "<pad>"};
  Tokenizer t = foundry::text::train_bpe({data_dir() + "/corpora/tinyshakespeare.txt"}, opt);
  EXPECT_EQ(t.vocab_size(), 2000u);
  EXPECT_EQ(t.token_to_id("<|endoftext|>"), 0u);
  EXPECT_EQ(t.token_to_id("<pad>"), 1u);
  // Every byte is in the alphabet, so any text round-trips.
  for (std::string s : {"First Citizen: Before we proceed any further", "h\xC3\xA9llo \xF0\x9F\x98\x80 \x01", ""}) {
    auto e = t.encode(s);
    EXPECT_EQ(t.decode(e.ids, false), s);
  }
  // Frequent words become single tokens.
  EXPECT_EQ(t.encode(" the").ids.size(), 1u);
  write_saved("trained-bytelevel", t, true, true);
}

TEST(Trainer, WordLevelStyleBpeWithSuffix) {
  SKIP_WITHOUT_SHARED_DATA();
  foundry::text::BpeTrainerOptions opt;
  opt.vocab_size = 600;
  opt.byte_level = false;
  opt.end_of_word_suffix = "</w>";
  opt.special_tokens = {"[UNK]"};
  std::vector<std::string> texts = {"low lower lowest", "newer newest wider", "low low low new new"};
  Tokenizer t = foundry::text::train_bpe_from_texts(texts, opt);
  auto e = t.encode("lowest newer");
  EXPECT_FALSE(e.ids.empty());
  EXPECT_EQ(e.tokens.back().substr(e.tokens.back().size() - 4), "</w>");
  write_saved("trained-suffix", t, true, true);
}

TEST(Trainer, PrefixBpeOnWikitext) {
  SKIP_WITHOUT_SHARED_DATA();
  foundry::text::BpeTrainerOptions opt;
  opt.vocab_size = 3000;
  opt.byte_level = false;
  opt.continuing_subword_prefix = "##";
  opt.limit_alphabet = 200;
  opt.special_tokens = {"[UNK]"};
  Tokenizer t = foundry::text::train_bpe({data_dir() + "/corpora/wikitext2.valid.txt"}, opt);
  auto e = t.encode("unbelievable results", false);
  ASSERT_GE(e.tokens.size(), 2u);
  EXPECT_EQ(e.tokens[1].rfind("##", 0) == 0 || e.tokens.size() == 2, true);
  write_saved("trained-prefix", t, true, true);
}

TEST(Trainer, RejectsBadOptions) {
  foundry::text::BpeTrainerOptions opt;
  opt.vocab_size = 0;
  EXPECT_THROW(foundry::text::train_bpe_from_texts({"a"}, opt), foundry::ValueError);
  opt.vocab_size = 10;
  EXPECT_THROW(foundry::text::train_bpe({"/nonexistent/file.txt"}, opt), foundry::IOError);
}
