// Added tokens (HF tokenizer/added_vocabulary.rs): tokens on top of the model vocabulary that
// are split out of the text before the pipeline runs, with single_word / lstrip / rstrip /
// normalized options, matched leftmost-longest like HF's Aho-Corasick automaton.
#pragma once

#include <unordered_map>
#include <unordered_set>

#include "text/byte_trie.h"
#include "text/components.h"
#include "text/model_cache.h"

namespace foundry::text {

/// Leftmost-longest multi-pattern matcher over bytes.
class TokenMatcher {
 public:
  void build(const std::vector<std::pair<std::string, uint32_t>>& patterns);
  bool empty() const { return patterns_ == 0; }
  /// Longest pattern starting at s[pos]; returns its length (0 = none) and id.
  size_t longest_at(std::string_view s, size_t pos, uint32_t& id) const;
  bool can_start(unsigned char c) const { return first_[c]; }

 private:
  ByteTrie trie_;  // pattern -> id
  bool first_[256] = {};
  size_t patterns_ = 0;
};

class AddedVocabulary {
 public:
  size_t add_tokens(const std::vector<AddedToken>& tokens, const Model& model, const Normalizer* normalizer);
  void refresh(const Model& model, const Normalizer* normalizer);

  std::optional<uint32_t> token_to_id(std::string_view t, const Model& model) const;
  std::optional<std::string> id_to_token(uint32_t id, const Model& model) const;
  bool is_special(std::string_view content) const { return special_set_.count(std::string(content)) > 0; }
  const std::unordered_map<uint32_t, AddedToken>& by_id() const { return map_r_; }
  const StringMap<uint32_t>& by_content() const { return map_; }
  size_t size() const { return map_.size(); }
  bool encode_special_tokens = false;

  /// Splits the text into added tokens and normalized pieces (HF extract_and_normalize).
  PreTokenizedString extract_and_normalize(const Normalizer* normalizer, std::string text) const;

 private:
  void split_with(PreTokenizedString& pts, const TokenMatcher& matcher, const Normalizer* normalizer,
                  bool normalize_first) const;

  StringMap<uint32_t> map_;
  std::unordered_map<uint32_t, AddedToken> map_r_;
  std::vector<AddedToken> added_;    // non-special, in insertion order
  std::vector<AddedToken> special_;  // special, in insertion order
  std::unordered_set<std::string> special_set_;
  TokenMatcher plain_, normalized_;
};

}  // namespace foundry::text
