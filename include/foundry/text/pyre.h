// Regular expressions as Python's `re` module runs them (PCRE2 with Unicode classes): the patterns
// of lm-evaluation-harness task files (filters, regexes_to_ignore, Jinja's regex_replace) are
// written for Python, so matching, findall's group rules, sub's replacement syntax and the
// iteration over empty matches follow Python 3.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace foundry::text {

class PyRegex {
 public:
  /// Compiles; ValueError naming the pattern and the offset of a syntax error.
  explicit PyRegex(const std::string& pattern);
  ~PyRegex();
  PyRegex(const PyRegex&) = delete;
  PyRegex& operator=(const PyRegex&) = delete;

  struct Match {
    size_t start = 0, end = 0;
    std::vector<std::optional<std::pair<size_t, size_t>>> groups;  ///< groups 1..n, nullopt if unmatched
  };
  /// re.search from byte offset `start`.
  std::optional<Match> search(std::string_view s, size_t start = 0) const;
  /// re.finditer: non-overlapping matches; an empty match may follow a non-empty one at its end.
  std::vector<Match> finditer(std::string_view s) const;
  /// re.findall: per match the whole match (no groups), else its groups ("" when unmatched).
  std::vector<std::vector<std::string>> findall(std::string_view s) const;
  /// re.sub(pattern, repl, s, count): repl understands \1, \g<1>, \g<name>, \n, \t, \\.
  std::string sub(std::string_view s, const std::string& repl, int64_t count = 0) const;
  size_t group_count() const { return groups_; }
  const std::string& pattern() const { return pattern_; }

 private:
  std::optional<Match> match_at(std::string_view s, size_t start, bool not_empty_at_start) const;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code*
  size_t groups_ = 0;
};

}  // namespace foundry::text
