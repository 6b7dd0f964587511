// NormalizedString: a piece of the input text together with its normalized form and, for every
// byte of the normalized form, the byte range of the original text it comes from. This mirrors
// HF tokenizers' NormalizedString exactly (same alignment rules), because token offsets must be
// byte-identical to HF's. Also: the Pattern type used to split and replace, and a PCRE2 regex
// wrapper that behaves like the Oniguruma patterns HF uses.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/unicode.h"

namespace foundry::text {

using Offsets = std::pair<size_t, size_t>;

/// A compiled regular expression (PCRE2 with UTF, UCP and JIT). The pattern is written in the
/// Oniguruma dialect HF uses; \s, \S, \w and \W are rewritten so they mean what they mean there.
class Regex {
 public:
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  /// Finds the first match at or after `start`. Returns false when there is none.
  bool search(std::string_view s, size_t start, size_t& mstart, size_t& mend) const;
  /// All non-overlapping matches, with the empty-match rules of Rust's onig/regex iterators.
  void find_all(std::string_view s, std::vector<Offsets>& out) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code*
  bool jit_ = false;
};

/// Rewrites an Oniguruma pattern into PCRE2 syntax with the same meaning.
std::string translate_pattern(const std::string& pattern);

/// One entry of a Pattern search: a range of the input and whether it is a match.
struct Match {
  size_t start, end;
  bool is_match;
};

/// What to split on / replace: a literal string, a regex, a single char or a char predicate.
struct Pattern {
  enum class Kind { String, Regex, Char, Predicate } kind = Kind::String;
  std::string str;
  std::shared_ptr<const Regex> regex;
  char32_t ch = 0;
  bool (*pred)(char32_t) = nullptr;
  bool invert = false;

  static Pattern literal(std::string s) {
    Pattern p;
    p.kind = Kind::String;
    p.str = std::move(s);
    return p;
  }
  static Pattern re(std::shared_ptr<const Regex> r) {
    Pattern p;
    p.kind = Kind::Regex;
    p.regex = std::move(r);
    return p;
  }
  static Pattern character(char32_t c) {
    Pattern p;
    p.kind = Kind::Char;
    p.ch = c;
    return p;
  }
  static Pattern predicate(bool (*f)(char32_t)) {
    Pattern p;
    p.kind = Kind::Predicate;
    p.pred = f;
    return p;
  }
  /// Matches covering all of `s` in order (HF Pattern::find_matches).
  void find_matches(std::string_view s, std::vector<Match>& out) const;
};

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

class NormalizedString {
 public:
  NormalizedString() = default;
  explicit NormalizedString(std::string s);

  const std::string& get() const { return normalized_; }
  size_t len() const { return normalized_.size(); }
  bool empty() const { return normalized_.empty(); }
  size_t len_original() const { return original_len_; }
  size_t original_shift() const { return shift_; }
  Offsets offsets_original() const { return {shift_, shift_ + original_len_}; }

  /// Alignment (original byte range, relative to this piece) of normalized byte i.
  std::pair<uint32_t, uint32_t> alignment(size_t i) const;
  /// HF convert_offsets(Range::Normalized): original range (relative) of a normalized range.
  std::optional<Offsets> normalized_to_original(size_t start, size_t end) const;
  /// HF convert_offsets(Range::Original): normalized range of an original range.
  std::optional<Offsets> original_to_normalized(size_t start, size_t end) const;

  /// Sub-piece for a normalized byte range (nullopt when not on char boundaries).
  std::optional<NormalizedString> slice(size_t start, size_t end) const;

  /// HF transform_range over a normalized byte range.
  void transform_range(size_t start, size_t end, const std::vector<uni::CharChange>& dest,
                       size_t initial_offset);
  /// HF transform over the whole string (Range::Original(..)).
  void transform(const std::vector<uni::CharChange>& dest, size_t initial_offset);

  void filter(const std::function<bool(char32_t)>& keep);
  void map(const std::function<char32_t(char32_t)>& f);
  void lowercase();
  void uppercase();
  void prepend(std::string_view s);
  void append(std::string_view s);
  void replace(const Pattern& pattern, std::string_view content);
  void lrstrip(bool left, bool right);
  void normalize_unicode(uni::NormForm form);
  void clear();
  /// Replaces every byte b by the UTF-8 string table[b]; the new bytes keep the alignment of
  /// the char they come from. Same result as HF's ByteLevel transform, without building the
  /// (char, change) list.
  void map_bytes(const std::string* table);
  /// Replaces the normalized text wholesale; `align` gives, per new byte, the range of the
  /// current normalized text it comes from (composed here with the existing alignments).
  void set_normalized(std::string text, const std::vector<std::pair<uint32_t, uint32_t>>& align);

  /// Splits by a pattern with a delimiter behavior (HF NormalizedString::split).
  std::vector<NormalizedString> split(const Pattern& pattern, SplitBehavior behavior) const;

 private:
  void materialize();

  std::string normalized_;
  // One (start, end) per normalized byte, relative to this piece's original text. Empty while
  // the piece is untouched (identity_): then the alignment of a byte is its char's range.
  std::vector<std::pair<uint32_t, uint32_t>> align_;
  bool identity_ = true;
  size_t original_len_ = 0;
  size_t shift_ = 0;
};

}  // namespace foundry::text
