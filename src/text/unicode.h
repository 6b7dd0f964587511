// Unicode helpers for the tokenizers: UTF-8 decoding, character properties with the meaning Rust's
// `char` methods give them (HF tokenizers is written in Rust, so "whitespace", "lowercase", etc.
// must agree with Rust's definitions), Unicode normalization that reports how each output
// character relates to the input (the `(char, change)` stream HF's NormalizedString consumes),
// and grapheme clusters. Backed by utf8proc.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace foundry::text::uni {

/// Byte length of the UTF-8 sequence that starts with `lead` (1 for invalid lead bytes).
inline int utf8_len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

/// Decodes the code point at s[i] (s must be valid UTF-8) and advances i.
inline char32_t decode(std::string_view s, size_t& i) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    i += 1;
    return c;
  }
  int n = utf8_len(c);
  char32_t cp = c & (0xFF >> (n + 1));
  for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

/// Appends the UTF-8 encoding of `cp`.
inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

inline int cp_len(char32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

inline std::string to_utf8(char32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

/// Decodes a whole valid UTF-8 string.
std::u32string to_u32(std::string_view s);
std::string from_u32(std::u32string_view s);

/// Number of code points in valid UTF-8.
size_t char_count(std::string_view s);

/// True when `s` is well-formed UTF-8.
bool is_valid_utf8(std::string_view s);

/// Replaces ill-formed sequences by U+FFFD using the WHATWG/Unicode "maximal subpart" rule,
/// which is what Node's Buffer#toString and JavaScript's TextDecoder do.
std::string sanitize_utf8(std::string_view s);

// Character properties, with Rust's meaning.
bool is_whitespace(char32_t c);        ///< Rust char::is_whitespace (White_Space property)
bool is_numeric(char32_t c);           ///< Rust char::is_numeric (Nd, Nl, No)
bool is_alphabetic(char32_t c);        ///< approximates Rust char::is_alphabetic (L, Nl)
// The next three follow HF tokenizers' tables (Unicode 8.0, see unicode.cpp), not utf8proc's.
bool is_punctuation(char32_t c);       ///< P* categories (BertPreTokenizer, Punctuation)
bool is_other(char32_t c);             ///< Cc, Cf, Cs, Co (BertNormalizer's control characters)
bool is_mark_nonspacing(char32_t c);   ///< Mn (BertNormalizer's strip_accents)
bool is_mark(char32_t c);              ///< Mn, Mc, Me (StripAccents: is_combining_mark)
bool is_word_char(char32_t c);         ///< regex \w (Unicode): L, M, Nd, Nl, Pc
bool is_lowercase_letter_only(char32_t c);
int combining_class(char32_t c);

/// Rust char::to_lowercase (full mapping: U+0130 becomes two code points).
void to_lowercase(char32_t c, std::u32string& out);
/// Rust char::to_uppercase (simple mapping plus the common one-to-many cases).
void to_uppercase(char32_t c, std::u32string& out);

/// One output character of a transformation and its `change` (HF semantics): 0 = replaces one
/// input char, 1 = inserted, -N = replaces one input char and removes the N following ones.
using CharChange = std::pair<char32_t, int>;

enum class NormForm { NFC, NFD, NFKC, NFKD };
/// Normalizes `s` and reports the per-character changes (as the unicode-normalization-alignments
/// crate does). Returns false (and leaves `out` empty) when `s` is unchanged by the form.
bool normalize(std::string_view s, NormForm form, std::vector<CharChange>& out);

/// Splits valid UTF-8 into extended grapheme clusters; returns the byte offsets of the starts.
std::vector<size_t> grapheme_starts(std::string_view s);

/// Unicode script of a code point, as a small integer (0 = Common/Any, 1 = Inherited, >= 2
/// others). Used by the UnicodeScripts pre-tokenizer.
int script_of(char32_t c);

}  // namespace foundry::text::uni
