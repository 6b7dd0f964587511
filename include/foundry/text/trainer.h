// BPE training (like HF tokenizers' BpeTrainer): learns merges from text and returns a
// Tokenizer that save() writes as a tokenizer.json HF tokenizers loads and encodes identically.
//
//   foundry::text::BpeTrainerOptions opt;
//   opt.vocab_size = 8000;
//   opt.special_tokens = {"<|endoftext|>"};
//   auto tok = foundry::text::train_bpe({"corpus.txt"}, opt);
//   tok.save("tokenizer.json");
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "foundry/text/tokenizer.h"

namespace foundry::text {

struct BpeTrainerOptions {
  /// Final vocabulary size (special tokens and alphabet included).
  size_t vocab_size = 30000;
  /// Pairs seen fewer times than this are never merged.
  uint64_t min_frequency = 0;
  /// Added first, with ids 0..n-1, as special tokens.
  std::vector<std::string> special_tokens;
  /// Keep at most this many initial characters (the most frequent); unset = all.
  std::optional<size_t> limit_alphabet;
  /// Characters always in the alphabet (each string contributes its first char).
  std::vector<std::string> initial_alphabet;
  /// Byte-level BPE (GPT-2 style): ByteLevel pre-tokenizer and decoder, and the 256 byte
  /// characters always in the alphabet. When false: Whitespace pre-tokenizer, plain BPE.
  bool byte_level = true;
  std::optional<std::string> continuing_subword_prefix;
  std::optional<std::string> end_of_word_suffix;
  /// Merged tokens longer than this (in chars) are not created; 0 = no limit.
  size_t max_token_length = 0;
};

/// Trains on the lines of UTF-8 text files.
Tokenizer train_bpe(const std::vector<std::string>& files, const BpeTrainerOptions& options);
/// Trains on in-memory texts.
Tokenizer train_bpe_from_texts(const std::vector<std::string>& texts, const BpeTrainerOptions& options);

}  // namespace foundry::text
