// The tokenizer pipeline object behind foundry::text::Tokenizer.
#pragma once

#include "text/added_vocabulary.h"
#include "text/components.h"

namespace foundry::text {

class TokenizerImpl {
 public:
  NormalizerPtr normalizer;
  PreTokenizerPtr pre_tokenizer;
  ModelPtr model;
  PostProcessorPtr post_processor;
  DecoderPtr decoder;
  AddedVocabulary added;
  std::optional<TruncationParams> truncation;
  std::optional<PaddingParams> padding;
  /// Set by prepare() when the pipeline is "no normalizer, regex split + byte-level map, BPE":
  /// encode then tokenizes raw byte ranges directly (same output, no per-piece strings).
  std::shared_ptr<const Regex> fast_regex;
  /// tiktoken files: the same tokenizer with special-token text encoded as ordinary text, used
  /// when add_special_tokens is false (tiktoken's encode_ordinary; with true, its
  /// allowed_special="all").
  std::shared_ptr<const TokenizerImpl> ordinary;

  /// The pipeline to encode with: `ordinary` (when set) without special tokens, else this one.
  const TokenizerImpl& for_special(bool add_special) const { return !add_special && ordinary ? *ordinary : *this; }

  void prepare();
  Encoding encode_single_fast(const std::string& text, uint32_t type_id) const;
  /// ids of one sequence through the fast path (no post-processing); false if not applicable.
  bool encode_ids_fast(std::string_view text, std::vector<uint32_t>& out) const;

  /// Encodes one sequence into a raw encoding (before post-processing).
  Encoding encode_single(const std::string& text, uint32_t type_id) const;
  Encoding post_process(Encoding a, std::optional<Encoding> b, bool add_special) const;
  Encoding encode(std::string_view a, std::optional<std::string_view> b, bool add_special) const;
  std::string decode(const std::vector<uint32_t>& ids, bool skip_special) const;
  json to_json() const;
};

std::shared_ptr<TokenizerImpl> tokenizer_from_json(const json& j);
void pad_encodings(std::vector<Encoding>& encs, const PaddingParams& p);

}  // namespace foundry::text
