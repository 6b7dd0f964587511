// Foundry tokenizers: Hugging Face tokenizer.json, SentencePiece .model, tiktoken rank files and
// GPT-2 encoder.json/vocab.bpe, all loaded natively and giving exactly the ids, tokens and
// offsets that HF `tokenizers` gives.
//
//   auto tok = foundry::text::Tokenizer::from_file("tokenizer.json");
//   foundry::text::Encoding enc = tok.encode("Hello world");
//   enc.ids;      // {9906, 1917}
//   tok.decode(enc.ids);  // "Hello world"
//
// Errors: malformed files throw foundry::IOError (unreadable) or foundry::ValueError (bad
// content); bad arguments (unknown ids in decode, impossible truncation) throw ValueError or
// IndexError. Nothing aborts.
//
// Thread safety: a Tokenizer may be used from many threads at once for encode/decode (each
// thread keeps its own cache of tokenized words). Configuration calls (set_truncation,
// add_tokens, ...) must not run concurrently with encoding. Copies are independent (the
// immutable vocabularies are shared).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace foundry::text {

/// [start, end) range.
using Span = std::pair<size_t, size_t>;

/// The result of encoding one input (or a pair), field for field like HF's `Encoding`.
struct Encoding {
  std::vector<uint32_t> ids;
  std::vector<uint32_t> type_ids;
  std::vector<std::string> tokens;
  /// Offsets in Unicode code points (chars) of the input string, as HF reports them (Python and
  /// Node bindings). Special tokens added by the post-processor have (0, 0).
  std::vector<Span> offsets;
  /// The same offsets in bytes of the UTF-8 input (after invalid sequences were replaced by
  /// U+FFFD, see Tokenizer::encode).
  std::vector<Span> byte_offsets;
  /// Index of the pre-tokenized word each token comes from; -1 for tokens added by the
  /// post-processor or padding (HF: None).
  std::vector<int32_t> word_ids;
  /// 0 for the first sequence, 1 for the pair; -1 for added special tokens and padding.
  std::vector<int32_t> sequence_ids;
  /// 1 for tokens added by the post-processor (and padding), else 0.
  std::vector<uint32_t> special_tokens_mask;
  /// 0 for padding, else 1.
  std::vector<uint32_t> attention_mask;
  /// What truncation cut off (with `stride` tokens of overlap), as further encodings.
  std::vector<Encoding> overflowing;

  size_t size() const { return ids.size(); }
  bool empty() const { return ids.empty(); }
};

/// A token added on top of the model's vocabulary (HF AddedToken).
struct AddedToken {
  std::string content;
  bool special = false;
  bool single_word = false;  ///< only match when not inside a word
  bool lstrip = false;       ///< swallow whitespace on the left
  bool rstrip = false;       ///< swallow whitespace on the right
  bool normalized = true;    ///< match against the normalized text (HF default: !special)

  static AddedToken make(std::string content, bool special) {
    AddedToken t;
    t.content = std::move(content);
    t.special = special;
    t.normalized = !special;
    return t;
  }
};

enum class TruncationStrategy { LongestFirst, OnlyFirst, OnlySecond };
enum class Direction { Left, Right };

struct TruncationParams {
  size_t max_length = 512;
  size_t stride = 0;
  TruncationStrategy strategy = TruncationStrategy::LongestFirst;
  Direction direction = Direction::Right;
};

struct PaddingParams {
  /// Pad to this length; unset = pad to the longest encoding of the batch (HF BatchLongest).
  std::optional<size_t> fixed_length;
  Direction direction = Direction::Right;
  std::optional<size_t> pad_to_multiple_of;
  uint32_t pad_id = 0;
  uint32_t pad_type_id = 0;
  std::string pad_token = "[PAD]";
};

/// tiktoken encodings (select the split pattern and the special tokens of a .tiktoken file).
enum class TiktokenEncoding { R50kBase, P50kBase, P50kEdit, Cl100kBase, O200kBase };
/// "r50k_base", "p50k_base", "p50k_edit", "cl100k_base" or "o200k_base"; ValueError naming them otherwise.
TiktokenEncoding tiktoken_encoding(std::string_view name);

class TokenizerImpl;

class Tokenizer {
 public:
  /// Loads any supported format, chosen by content and name: tokenizer.json, SentencePiece
  /// .model, GPT-2 encoder.json or vocab.json (vocab.bpe or merges.txt must sit beside it) or a
  /// .tiktoken rank file (the encoding is guessed from the file name, e.g.
  /// "cl100k_base.tiktoken"; else cl100k_base).
  static Tokenizer from_file(const std::string& path);
  /// Parses tokenizer.json text (version "1.0").
  static Tokenizer from_json(std::string_view json);
  /// Loads a SentencePiece ModelProto (.model); BPE and Unigram models with their normalizer.
  static Tokenizer from_sentencepiece(const std::string& path);
  static Tokenizer from_sentencepiece_bytes(std::string_view bytes);
  /// A SentencePiece model's vocabulary: pieces by id, scores, and piece types in SentencePiece's
  /// numbering (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte; GGUF's
  /// tokenizer.ggml.token_type uses the same), the model type (1 unigram, 2 BPE) and whether a
  /// space is prepended ("add_dummy_prefix").
  struct SentencePieceVocab {
    std::vector<std::string> pieces;
    std::vector<float> scores;
    std::vector<int> types;
    int model_type = 2;
    bool add_dummy_prefix = true;
  };
  static SentencePieceVocab read_sentencepiece_vocab(const std::string& path);
  /// A SentencePiece tokenizer from its vocabulary alone (identity normalization, spaces to U+2581,
  /// byte fallback when there are byte pieces), as llama.cpp rebuilds one from GGUF's "llama"
  /// tokenizer keys.
  static Tokenizer from_sentencepiece_vocab(const SentencePieceVocab& vocab);
  /// Loads a tiktoken rank file with the split pattern and special tokens of `encoding`.
  static Tokenizer from_tiktoken(const std::string& path, TiktokenEncoding encoding);
  /// Loads GPT-2's encoder.json + vocab.bpe (byte-level BPE, <|endoftext|> special).
  static Tokenizer from_gpt2_files(const std::string& encoder_json, const std::string& vocab_bpe);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&);
  Tokenizer& operator=(const Tokenizer&);
  ~Tokenizer();

  /// Encodes one text. `text` is UTF-8; ill-formed sequences are replaced by U+FFFD first (the
  /// way Node's and Python's UTF-8 decoders do) and all offsets refer to that cleaned text.
  Encoding encode(std::string_view text, bool add_special_tokens = true) const;
  /// Encodes a pair (e.g. question + context for BERT).
  Encoding encode_pair(std::string_view text, std::string_view pair, bool add_special_tokens = true) const;
  /// Only the ids (skips building tokens and offsets where possible; same ids as encode()).
  std::vector<uint32_t> encode_ids(std::string_view text, bool add_special_tokens = true) const;
  /// Encodes many texts on `num_threads` threads (0 = hardware concurrency), then applies batch
  /// padding if configured.
  std::vector<Encoding> encode_batch(const std::vector<std::string>& texts, bool add_special_tokens = true,
                                     size_t num_threads = 0) const;
  std::vector<Encoding> encode_batch_pairs(const std::vector<std::pair<std::string, std::string>>& pairs,
                                           bool add_special_tokens = true, size_t num_threads = 0) const;

  /// Decodes ids to text through the decoder. Throws IndexError for an id no vocabulary knows
  /// (HF silently drops such ids).
  std::string decode(const std::vector<uint32_t>& ids, bool skip_special_tokens = true) const;
  std::vector<std::string> decode_batch(const std::vector<std::vector<uint32_t>>& ids,
                                        bool skip_special_tokens = true, size_t num_threads = 0) const;

  std::optional<uint32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(uint32_t id) const;
  /// Vocabulary size, with or without the added tokens (HF get_vocab_size).
  size_t vocab_size(bool with_added_tokens = true) const;
  /// token -> id for the whole vocabulary.
  std::unordered_map<std::string, uint32_t> get_vocab(bool with_added_tokens = true) const;

  /// Adds tokens; returns how many were new. Special tokens are skipped by decode(skip=true).
  size_t add_tokens(const std::vector<AddedToken>& tokens);
  size_t add_special_tokens(const std::vector<std::string>& tokens);
  /// When true, special tokens in the text are encoded as ordinary text (HF
  /// encode_special_tokens; tiktoken's encode_ordinary).
  void set_encode_special_tokens(bool value);
  bool encode_special_tokens() const;

  void set_truncation(std::optional<TruncationParams> params);
  void set_padding(std::optional<PaddingParams> params);
  const std::optional<TruncationParams>& truncation() const;
  const std::optional<PaddingParams>& padding() const;

  /// Serializes to tokenizer.json (HF format, loadable by HF tokenizers).
  std::string to_json(bool pretty = false) const;
  void save(const std::string& path, bool pretty = true) const;

  /// Implementation access for tests and tools inside Foundry.
  const TokenizerImpl& impl() const { return *impl_; }
  static Tokenizer from_impl(std::shared_ptr<TokenizerImpl> impl) { return Tokenizer(std::move(impl)); }

 private:
  explicit Tokenizer(std::shared_ptr<TokenizerImpl> impl);
  std::shared_ptr<TokenizerImpl> impl_;
};

/// Of the text decoded from the tokens generated so far, the length that is final: a trailing
/// U+FFFD (a byte-level token in the middle of a character) may still change with the next token.
inline size_t settled_text_length(const std::string& decoded) {
  const size_t n = decoded.size();
  return n >= 3 && decoded.compare(n - 3, 3, "\xEF\xBF\xBD") == 0 ? n - 3 : n;
}

}  // namespace foundry::text
