// Internal interfaces of the tokenizer pipeline (HF tokenizers' architecture):
//   text -> added-token split -> Normalizer -> PreTokenizer -> Model -> PostProcessor -> Encoding
//   ids  -> tokens -> Decoder -> text
// Each component can be built from and written to its tokenizer.json object.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "foundry/core/error.h"
#include "foundry/text/tokenizer.h"
#include "text/normalized.h"

namespace foundry::text {

// std::map-backed: parsing large vocabularies stays O(n log n) (ordered_json is O(n^2) here).
using json = nlohmann::json;

/// A token produced by a model: offsets are bytes in the normalized piece it was given.
struct Token {
  uint32_t id;
  std::string value;
  Offsets offsets;
};

/// A piece of the input after splitting, possibly already tokenized (added tokens).
struct Split {
  NormalizedString normalized;
  std::optional<std::vector<Token>> tokens;
};

/// HF PreTokenizedString: the list of splits covering the input.
struct PreTokenizedString {
  std::vector<Split> splits;

  /// Replaces every untokenized split by the pieces `fn` returns; empty pieces are dropped.
  template <typename F>
  void split(F&& fn) {
    std::vector<Split> out;
    out.reserve(splits.size() * 2);
    std::vector<NormalizedString> pieces;
    for (size_t i = 0; i < splits.size(); ++i) {
      if (splits[i].tokens) {
        out.push_back(std::move(splits[i]));
        continue;
      }
      pieces.clear();
      fn(i, std::move(splits[i].normalized), pieces);
      for (auto& p : pieces)
        if (!p.empty()) out.push_back(Split{std::move(p), std::nullopt});
    }
    splits = std::move(out);
  }
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(NormalizedString& s) const = 0;
  virtual json to_json() const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(PreTokenizedString& s) const = 0;
  virtual json to_json() const = 0;
  /// When this pre-tokenizer is exactly "split by a regex (pieces and gaps kept) then map bytes
  /// to GPT-2's byte-level chars", the regex; the tokenizer then runs a faster equivalent path.
  virtual std::shared_ptr<const Regex> byte_level_split_regex() const { return nullptr; }
};

class Model {
 public:
  virtual ~Model() = default;
  /// Tokenizes one pre-token (UTF-8) and appends the tokens.
  virtual void tokenize(std::string_view s, std::vector<Token>& out) const = 0;
  virtual std::optional<uint32_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<std::string> id_to_token(uint32_t id) const = 0;
  virtual size_t vocab_size() const = 0;
  virtual std::unordered_map<std::string, uint32_t> get_vocab() const = 0;
  virtual json to_json() const = 0;
  /// Byte-level fast path: tokenizes raw bytes as if they had been mapped to byte-level chars;
  /// token offsets are raw byte offsets plus `base`. Only models that return true from
  /// supports_raw_bytes() implement it.
  virtual bool supports_raw_bytes() const { return false; }
  virtual void tokenize_raw_bytes(std::string_view raw, size_t base, std::vector<Token>& out) const {}
  /// Same, ids only.
  virtual void tokenize_raw_ids(std::string_view raw, std::vector<uint32_t>& out) const {}
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  /// Number of special tokens added to a single sequence or a pair.
  virtual size_t added_tokens(bool is_pair) const = 0;
  /// Transforms the (one or two) encodings; the caller merges what is returned.
  virtual void process_encodings(std::vector<Encoding>& encodings, bool add_special_tokens) const = 0;
  virtual json to_json() const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  virtual json to_json() const = 0;
};

using NormalizerPtr = std::shared_ptr<const Normalizer>;
using PreTokenizerPtr = std::shared_ptr<const PreTokenizer>;
using ModelPtr = std::shared_ptr<const Model>;
using PostProcessorPtr = std::shared_ptr<const PostProcessor>;
using DecoderPtr = std::shared_ptr<const Decoder>;

// Factories from tokenizer.json objects (throw ValueError on unknown types / bad fields).
NormalizerPtr normalizer_from_json(const json& j);
PreTokenizerPtr pre_tokenizer_from_json(const json& j);
ModelPtr model_from_json(const json& j);
PostProcessorPtr post_processor_from_json(const json& j);
DecoderPtr decoder_from_json(const json& j);

// Builders used by the native loaders and the trainer.
struct BpeConfig {
  std::vector<std::pair<std::string, uint32_t>> vocab;  // token, id
  std::vector<std::pair<std::string, std::string>> merges;
  std::optional<std::string> unk_token;
  std::optional<std::string> continuing_subword_prefix;
  std::optional<std::string> end_of_word_suffix;
  std::optional<double> dropout;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  /// Merge ranks given per merge (tiktoken: the rank of the merged token); empty = list order.
  std::vector<uint32_t> merge_ranks;
};
ModelPtr make_bpe(BpeConfig config);
ModelPtr make_unigram(std::vector<std::pair<std::string, double>> vocab, std::optional<size_t> unk_id,
                      bool byte_fallback);
NormalizerPtr make_precompiled(std::string charsmap);
/// SentencePiece's own normalizer (charsmap + dummy prefix + whitespace handling), exact.
NormalizerPtr make_spm_normalizer(std::string charsmap, bool add_dummy_prefix, bool remove_extra_whitespaces,
                                  bool escape_whitespaces);
NormalizerPtr make_sequence_normalizer(std::vector<NormalizerPtr> items);
NormalizerPtr make_prepend(std::string prepend);
NormalizerPtr make_replace(std::string pattern, bool is_regex, std::string content);
PreTokenizerPtr make_byte_level_pre(bool add_prefix_space, bool trim_offsets, bool use_regex);
PreTokenizerPtr make_split(std::string pattern, bool is_regex, SplitBehavior behavior, bool invert);
PreTokenizerPtr make_metaspace(char32_t replacement, std::string prepend_scheme, bool split);
PreTokenizerPtr make_sequence_pre(std::vector<PreTokenizerPtr> items);
DecoderPtr make_byte_level_decoder();
DecoderPtr make_decoder_sequence(std::vector<DecoderPtr> items);
DecoderPtr make_replace_decoder(std::string pattern, std::string content);
DecoderPtr make_byte_fallback_decoder();
DecoderPtr make_fuse_decoder();
DecoderPtr make_strip_decoder(char32_t content, size_t start, size_t stop);
DecoderPtr make_metaspace_decoder(char32_t replacement, std::string prepend_scheme, bool split);
PostProcessorPtr make_byte_level_processor(bool add_prefix_space, bool trim_offsets);
PostProcessorPtr make_template_processor(const std::string& single, const std::string& pair,
                                         const std::vector<std::pair<std::string, uint32_t>>& specials);

// Byte-level helpers (GPT-2's bytes_to_unicode).
const std::string& byte_to_unicode(uint8_t b);   // UTF-8 of the char standing for byte b
int unicode_to_byte(char32_t c);                 // -1 if c is not a byte-level char
std::string bytes_to_byte_level(std::string_view bytes);

// Encoding helpers (HF Encoding methods).
void encoding_merge_with(Encoding& self, Encoding pair, bool growing_offsets);
void encoding_truncate(Encoding& e, size_t max_len, size_t stride, Direction direction);
void encoding_pad(Encoding& e, size_t target, uint32_t pad_id, uint32_t pad_type_id, const std::string& pad_token,
                  Direction direction);
void encoding_set_sequence_id(Encoding& e, int32_t id);

// JSON helpers.
const json& json_field(const json& j, const char* key, const char* what);
std::string json_string(const json& j, const char* key, const char* what);
std::shared_ptr<const Regex> json_pattern(const json& j, bool& is_regex, std::string& text, const char* what);
json pattern_to_json(const std::string& text, bool is_regex);
SplitBehavior behavior_from_string(const std::string& s);
std::string behavior_to_string(SplitBehavior b);

}  // namespace foundry::text
