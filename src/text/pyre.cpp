#include "foundry/text/pyre.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>

#include "foundry/core/error.h"
#include "text/numbers.h"

namespace foundry::text {

namespace {

struct MatchData {
  pcre2_match_data* md;
  explicit MatchData(const pcre2_code* code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(md); }
};

}  // namespace

PyRegex::PyRegex(const std::string& pattern) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE off = 0;
  // Python 3 str patterns: \w, \d, \s and case folding are Unicode-aware.
  auto* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP, &err,
                             &off, nullptr);
  if (!code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    raise<ValueError>("invalid regular expression '{}' at offset {}: {}", pattern, off, reinterpret_cast<const char*>(buf));
  }
  uint32_t n = 0;
  pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &n);
  groups_ = n;
  code_ = code;
}

PyRegex::~PyRegex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::optional<PyRegex::Match> PyRegex::match_at(std::string_view s, size_t start, bool not_empty_at_start) const {
  auto* code = static_cast<pcre2_code*>(code_);
  MatchData data(code);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), start,
                             not_empty_at_start ? PCRE2_NOTEMPTY_ATSTART : 0, data.md, nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return std::nullopt;
  if (rc < 0) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(rc, buf, sizeof(buf));
    raise<ValueError>("regular expression '{}': {}", pattern_, reinterpret_cast<const char*>(buf));
  }
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
  Match m;
  m.start = ov[0];
  m.end = ov[1];
  for (size_t g = 1; g <= groups_; ++g) {
    if (int(g) < rc && ov[2 * g] != PCRE2_UNSET) m.groups.emplace_back(std::make_pair(size_t(ov[2 * g]), size_t(ov[2 * g + 1])));
    else m.groups.emplace_back(std::nullopt);
  }
  return m;
}

std::optional<PyRegex::Match> PyRegex::search(std::string_view s, size_t start) const { return match_at(s, start, false); }

std::vector<PyRegex::Match> PyRegex::finditer(std::string_view s) const {
  std::vector<Match> out;
  size_t pos = 0;
  bool after_empty = false;
  while (pos <= s.size()) {
    // After an empty match Python retries at the same place, but only a non-empty match may start there.
    auto m = match_at(s, pos, after_empty);
    if (!m) break;
    after_empty = m->start == m->end;
    pos = m->end;
    out.push_back(std::move(*m));
  }
  return out;
}

std::vector<std::vector<std::string>> PyRegex::findall(std::string_view s) const {
  std::vector<std::vector<std::string>> out;
  for (const Match& m : finditer(s)) {
    std::vector<std::string> row;
    if (groups_ == 0) row.emplace_back(s.substr(m.start, m.end - m.start));
    for (const auto& g : m.groups) row.emplace_back(g ? std::string(s.substr(g->first, g->second - g->first)) : "");
    out.push_back(std::move(row));
  }
  return out;
}

std::string PyRegex::sub(std::string_view s, const std::string& repl, int64_t count) const {
  auto expand = [&](const Match& m) {
    std::string out;
    auto group = [&](size_t g) {
      if (g == 0) return std::string(s.substr(m.start, m.end - m.start));
      if (g > groups_) raise<ValueError>("re.sub: invalid group reference {} in '{}'", g, repl);
      const auto& r = m.groups[g - 1];
      return r ? std::string(s.substr(r->first, r->second - r->first)) : std::string();
    };
    for (size_t k = 0; k < repl.size(); ++k) {
      if (repl[k] != '\\' || k + 1 == repl.size()) {
        out += repl[k];
        continue;
      }
      const char c = repl[++k];
      if (std::isdigit((unsigned char)c)) {
        size_t g = size_t(c - '0');
        if (k + 1 < repl.size() && std::isdigit((unsigned char)repl[k + 1])) g = g * 10 + size_t(repl[++k] - '0');
        out += group(g);
      } else if (c == 'g' && k + 1 < repl.size() && repl[k + 1] == '<') {
        const size_t close = repl.find('>', k);
        if (close == std::string::npos) raise<ValueError>("re.sub: missing '>' in '{}'", repl);
        const std::string name = repl.substr(k + 2, close - k - 2);
        if (!name.empty() && std::all_of(name.begin(), name.end(), [](char ch) { return std::isdigit((unsigned char)ch); })) {
          std::optional<uint32_t> g = parse_u32(name);
          if (!g) raise<ValueError>("re.sub: group number '{}' is out of range in '{}'", name, repl);
          out += group(*g);
        } else {
          const int n = pcre2_substring_number_from_name(static_cast<pcre2_code*>(code_),
                                                         reinterpret_cast<PCRE2_SPTR>(name.c_str()));
          if (n < 0) raise<ValueError>("re.sub: unknown group name '{}' in '{}'", name, repl);
          out += group(size_t(n));
        }
        k = close;
      } else if (c == 'n') out += '\n';
      else if (c == 't') out += '\t';
      else if (c == 'r') out += '\r';
      else if (c == '\\') out += '\\';
      else if (std::isalpha((unsigned char)c)) raise<ValueError>("re.sub: bad escape \\{} in '{}'", c, repl);
      else out += '\\', out += c;
    }
    return out;
  };
  std::string out;
  size_t pos = 0;
  int64_t done = 0;
  for (const Match& m : finditer(s)) {
    if (count > 0 && done == count) break;
    out.append(s.substr(pos, m.start - pos));
    out += expand(m);
    pos = m.end;
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

}  // namespace foundry::text
