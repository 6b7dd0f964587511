// Unit tests of the tokenizer API and of bad input: malformed files must raise a clear
// foundry error, never crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "foundry/core/error.h"
#include "foundry/text/tokenizer.h"
#include "test_util.h"

using foundry::text::Encoding;
using foundry::text::Tokenizer;
using json = nlohmann::json;

namespace {

std::string tok_path(const std::string& rel) { return data_dir() + "/tokenizers/" + rel; }

// A tiny BPE tokenizer.json written inline.
json tiny_bpe() {
  return json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 7, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": false, "special": true}],
    "normalizer": null,
    "pre_tokenizer": {"type": "Whitespace"},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [7], "tokens": ["<s>"]}}},
    "decoder": null,
    "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": false,
              "vocab": {"<unk>": 0, "a": 1, "b": 2, "c": 3, "ab": 4, "abc": 5, "bc": 6, "<s>": 7},
              "merges": ["a b", ["ab", "c"], "b c"]}
  })");
}

void expect_value_error(const json& j, const std::string& fragment) {
  try {
    Tokenizer::from_json(j.dump());
    ADD_FAILURE() << "no error for " << fragment;
  } catch (const foundry::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(TokenizerApi, TinyBpePipeline) {
  Tokenizer t = Tokenizer::from_json(tiny_bpe().dump());
  Encoding e = t.encode("abc ab xyz");
  EXPECT_EQ(e.ids, (std::vector<uint32_t>{7, 5, 4, 0}));
  EXPECT_EQ(e.tokens, (std::vector<std::string>{"<s>", "abc", "ab", "<unk>"}));
  EXPECT_EQ(e.offsets[3], (foundry::text::Span{7, 10}));  // fused unknowns
  EXPECT_EQ(e.special_tokens_mask, (std::vector<uint32_t>{1, 0, 0, 0}));
  EXPECT_EQ(e.word_ids, (std::vector<int32_t>{-1, 0, 1, 2}));
  EXPECT_EQ(t.token_to_id("abc"), 5u);
  EXPECT_EQ(t.id_to_token(4), "ab");
  EXPECT_FALSE(t.token_to_id("zzz").has_value());
  EXPECT_EQ(t.vocab_size(), 8u);
  EXPECT_EQ(t.decode({5, 4}, false), "abc ab");
  EXPECT_EQ(t.decode({7, 5}, true), "abc");
  Encoding p = t.encode_pair("ab", "c");
  EXPECT_EQ(p.ids, (std::vector<uint32_t>{4, 3}));
  EXPECT_EQ(p.type_ids, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(p.sequence_ids, (std::vector<int32_t>{0, 1}));
}

TEST(TokenizerApi, ByteOffsetsAndInvalidUtf8) {
  SKIP_WITHOUT_SHARED_DATA();
  Tokenizer t = Tokenizer::from_file(tok_path("llama3/tokenizer.json"));
  std::string text = "h\xC3\xA9llo \xF0\x9F\x98\x80 w\xFForld";
  Encoding e = t.encode(text, false);
  std::string clean = "h\xC3\xA9llo \xF0\x9F\x98\x80 w\xEF\xBF\xBDorld";
  ASSERT_EQ(e.byte_offsets.size(), e.ids.size());
  std::string joined;
  for (auto& [a, b] : e.byte_offsets) {
    ASSERT_LE(b, clean.size());
    if (a >= joined.size()) joined += clean.substr(a, b - a);
  }
  EXPECT_EQ(joined, clean);
  EXPECT_EQ(t.decode(e.ids, false), clean);
  // Char offsets count code points.
  EXPECT_EQ(e.offsets.back().second, 14u);
}

TEST(TokenizerApi, BatchMatchesSequentialOnAllThreads) {
  SKIP_WITHOUT_SHARED_DATA();
  Tokenizer t = Tokenizer::from_file(tok_path("phi-2/tokenizer.json"));
  std::vector<std::string> texts;
  std::ifstream f(data_dir() + "/corpora/tinyshakespeare.txt");
  std::string line;
  while (texts.size() < 500 && std::getline(f, line)) texts.push_back(line);
  auto batch = t.encode_batch(texts, true, 4);
  ASSERT_EQ(batch.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i].ids, t.encode(texts[i]).ids);
  std::vector<std::vector<uint32_t>> ids;
  for (auto& e : batch) ids.push_back(e.ids);
  auto decoded = t.decode_batch(ids, false, 3);
  for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(decoded[i], texts[i]);
}

TEST(TokenizerApi, TruncationAndPaddingFromApi) {
  SKIP_WITHOUT_SHARED_DATA();
  Tokenizer t = Tokenizer::from_file(tok_path("llama3/tokenizer.json"));
  foundry::text::TruncationParams tp;
  tp.max_length = 5;
  tp.stride = 1;
  t.set_truncation(tp);
  foundry::text::PaddingParams pp;
  pp.fixed_length = 8;
  pp.pad_id = 128004;
  pp.pad_token = "<|finetune_right_pad_id|>";
  pp.direction = foundry::text::Direction::Left;
  t.set_padding(pp);
  Encoding e = t.encode("one two three four five six seven", false);
  EXPECT_EQ(e.ids.size(), 8u);
  EXPECT_EQ(e.ids[0], 128004u);
  EXPECT_EQ(e.attention_mask, (std::vector<uint32_t>{0, 0, 0, 1, 1, 1, 1, 1}));
  // Like HF tokenizers 0.23, a single sequence is cut at max_length while it is tokenized, so
  // nothing overflows; pairs do overflow (see the bert-pairs-trunc parity test).
  EXPECT_TRUE(e.overflowing.empty());
  // A copy is independent.
  Tokenizer copy = t;
  copy.set_truncation(std::nullopt);
  copy.set_padding(std::nullopt);
  EXPECT_EQ(copy.encode("one two three four five six seven", false).ids.size(), 7u);
  EXPECT_EQ(t.encode("one two three four five six seven", false).ids.size(), 8u);
}

TEST(TokenizerApi, AddedTokensAndSpecialTokenModes) {
  SKIP_WITHOUT_SHARED_DATA();
  Tokenizer t = Tokenizer::from_file(tok_path("gpt2/encoder.json"));
  EXPECT_EQ(t.encode("a<|endoftext|>b").ids, (std::vector<uint32_t>{64, 50256, 65}));
  t.set_encode_special_tokens(true);
  EXPECT_GT(t.encode("a<|endoftext|>b").ids.size(), 3u);
  t.set_encode_special_tokens(false);
  EXPECT_EQ(t.add_tokens({foundry::text::AddedToken::make("<tool>", false)}), 1u);
  EXPECT_EQ(t.add_special_tokens({"<|im_end|>"}), 1u);
  EXPECT_EQ(t.token_to_id("<tool>"), 50257u);
  EXPECT_EQ(t.token_to_id("<|im_end|>"), 50258u);
  Encoding e = t.encode("x<tool>y<|im_end|>");
  EXPECT_EQ(e.ids, (std::vector<uint32_t>{87, 50257, 88, 50258}));
  EXPECT_EQ(t.decode(e.ids, true), "x<tool>y");
  EXPECT_EQ(t.vocab_size(), 50259u);
}

TEST(TokenizerApi, DropoutOneMeansNoMerges) {
  json j = tiny_bpe();
  j["model"]["dropout"] = 1.0;
  Tokenizer t = Tokenizer::from_json(j.dump());
  EXPECT_EQ(t.encode("abc", false).ids, (std::vector<uint32_t>{1, 2, 3}));
  j["model"]["dropout"] = 0.0;
  EXPECT_EQ(Tokenizer::from_json(j.dump()).encode("abc", false).ids, (std::vector<uint32_t>{5}));
}

TEST(TokenizerApi, EmptyInput) {
  Tokenizer t = Tokenizer::from_json(tiny_bpe().dump());
  EXPECT_EQ(t.encode("").ids, (std::vector<uint32_t>{7}));
  EXPECT_TRUE(t.encode("", false).empty());
  EXPECT_EQ(t.decode({}, false), "");
}

TEST(BadInput, MalformedTokenizerJson) {
  EXPECT_THROW(Tokenizer::from_json("{not json"), foundry::ValueError);
  EXPECT_THROW(Tokenizer::from_json("[1, 2]"), foundry::ValueError);
  EXPECT_THROW(Tokenizer::from_json("{}"), foundry::ValueError);
  json j = tiny_bpe();
  j["normalizer"] = json{{"type", "Frobnicate"}};
  expect_value_error(j, "unknown normalizer type 'Frobnicate'");
  j = tiny_bpe();
  j["pre_tokenizer"] = json{{"type", "Nope"}};
  expect_value_error(j, "unknown pre_tokenizer type 'Nope'");
  j = tiny_bpe();
  j["decoder"] = json{{"type", "Nope"}};
  expect_value_error(j, "unknown decoder type 'Nope'");
  j = tiny_bpe();
  j["post_processor"] = json{{"type", "Nope"}};
  expect_value_error(j, "unknown post_processor type 'Nope'");
  j = tiny_bpe();
  j["model"]["type"] = "Nope";
  expect_value_error(j, "unknown model type 'Nope'");
  j = tiny_bpe();
  j["model"].erase("vocab");
  expect_value_error(j, "missing the field 'vocab'");
  j = tiny_bpe();
  j["model"]["merges"] = json::array({"a b", "abc"});
  expect_value_error(j, "BPE merge 2");
  j = tiny_bpe();
  j["model"]["merges"] = json::array({"a z"});
  expect_value_error(j, "not in the vocabulary");
  j = tiny_bpe();
  j["model"]["vocab"]["a"] = "one";
  expect_value_error(j, "must be an integer");
  j = tiny_bpe();
  j["model"]["vocab"]["huge"] = 4000000000u;
  expect_value_error(j, "ids");
  j = tiny_bpe();
  j["version"] = "2.0";
  expect_value_error(j, "unsupported version");
  j = tiny_bpe();
  j["pre_tokenizer"] = json{{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_value_error(j, "invalid regex");
  j = tiny_bpe();
  j["post_processor"]["single"] = json::array({json{{"SpecialToken", {{"id", "[X]"}, {"type_id", 0}}}}});
  expect_value_error(j, "[X]");
  j = tiny_bpe();
  j["normalizer"] = json{{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};
  expect_value_error(j, "precompiled_charsmap");
}

TEST(BadInput, UnknownIdsInDecode) {
  Tokenizer t = Tokenizer::from_json(tiny_bpe().dump());
  EXPECT_THROW(t.decode({1, 99}), foundry::IndexError);
  EXPECT_THROW(t.decode_batch({{1}, {4000000000u}}), foundry::IndexError);
}

TEST(BadInput, MissingUnkToken) {
  json j = tiny_bpe();
  j["model"]["unk_token"] = "[NOPE]";
  Tokenizer t = Tokenizer::from_json(j.dump());
  EXPECT_THROW(t.encode("xyz"), foundry::ValueError);
}

TEST(BadInput, TruncatedSentencePieceModels) {
  SKIP_WITHOUT_SHARED_DATA();
  std::ifstream f(tok_path("sentencepiece/spm_test_model.model"), std::ios::binary);
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_GT(data.size(), 1000u);
  size_t errors = 0;
  for (size_t cut : {0, 1, 2, 5, 17, 100, 1000, 5000, 20000, static_cast<int>(data.size()) - 1}) {
    if (cut >= data.size()) continue;
    try {
      Tokenizer t = Tokenizer::from_sentencepiece_bytes(std::string_view(data).substr(0, cut));
      t.encode("hello world");  // a cut at a field boundary may still parse
    } catch (const foundry::Error&) {
      ++errors;
    }
  }
  EXPECT_GT(errors, 5u);
  EXPECT_THROW(Tokenizer::from_sentencepiece_bytes("\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF\xFF"), foundry::ValueError);
  EXPECT_THROW(Tokenizer::from_sentencepiece("/nonexistent.model"), foundry::IOError);
}

TEST(BadInput, BadTiktokenAndGpt2Files) {
  std::filesystem::create_directories(ref_dir());  // absent where text_reference was skipped
  std::string p = ref_dir() + "/bad.tiktoken";
  std::ofstream(p) << "IQ== 0\nnot-a-valid-line\n";
  EXPECT_THROW(Tokenizer::from_tiktoken(p, foundry::text::TiktokenEncoding::Cl100kBase), foundry::ValueError);
  std::ofstream(p) << "IQ== x1\n";
  EXPECT_THROW(Tokenizer::from_tiktoken(p, foundry::text::TiktokenEncoding::Cl100kBase), foundry::ValueError);
  EXPECT_THROW(Tokenizer::from_file("/nonexistent/tokenizer.json"), foundry::IOError);
  std::string enc = ref_dir() + "/bad-encoder.json", bpe = ref_dir() + "/bad-vocab.bpe";
  std::ofstream(enc) << R"({"a": 0, "b": 1, "ab": 2})";
  std::ofstream(bpe) << "#version: 0.2\na b\nthis line is bad\n";
  EXPECT_THROW(Tokenizer::from_gpt2_files(enc, bpe), foundry::ValueError);
}
