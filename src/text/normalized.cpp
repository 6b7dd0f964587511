// NormalizedString, Pattern and Regex (see normalized.h). The algorithms follow HF tokenizers'
// tokenizer/normalizer.rs and tokenizer/pattern.rs line by line where offsets are concerned.
#include "text/normalized.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "foundry/core/error.h"

namespace foundry::text {

// ---------------------------------------------------------------------------------------------
// Regex

namespace {

// Unicode White_Space, the meaning of \s in Oniguruma (and Rust's char::is_whitespace).
const char* const kSpaceItems =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}"
    "\\x{202F}\\x{205F}\\x{3000}";
// Oniguruma's \w in UTF-8 mode: letters, marks, decimal numbers, connector punctuation.
const char* const kWordItems = "\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}\\x{200C}\\x{200D}";

struct MatchState {
  pcre2_match_data* md = nullptr;
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* ctx = nullptr;
  MatchState() {
    md = pcre2_match_data_create(1, nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
    ctx = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(ctx, nullptr, stack);
  }
  ~MatchState() {
    pcre2_match_data_free(md);
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
  }
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

}  // namespace

std::string translate_pattern(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 32);
  int class_depth = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[i + 1];
      if (n == 's' || n == 'w') {
        const char* items = n == 's' ? kSpaceItems : kWordItems;
        if (class_depth > 0) {
          out += items;
        } else {
          out += '[';
          out += items;
          out += ']';
        }
        ++i;
        continue;
      }
      if ((n == 'S' || n == 'W') && class_depth == 0) {
        out += "[^";
        out += n == 'S' ? kSpaceItems : kWordItems;
        out += ']';
        ++i;
        continue;
      }
      out += c;
      out += n;
      ++i;
      continue;
    }
    if (c == '[') {
      if (class_depth > 0 && i + 1 < p.size() && p[i + 1] == ':') {
        // POSIX class like [:alpha:] inside a bracket: copy through to the closing ":]".
        size_t close = p.find(":]", i + 2);
        if (close != std::string::npos) {
          out.append(p, i, close + 2 - i);
          i = close + 1;
          continue;
        }
      }
      ++class_depth;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') {
        out += '^';
        ++i;
      }
      if (i + 1 < p.size() && p[i + 1] == ']') {
        out += "\\]";
        ++i;
      }
      continue;
    }
    if (c == ']' && class_depth > 0) {
      --class_depth;
      out += c;
      continue;
    }
    out += c;
  }
  return out;
}

Regex::Regex(const std::string& pattern) : pattern_(pattern) {
  std::string translated = translate_pattern(pattern);
  int err = 0;
  PCRE2_SIZE off = 0;
  auto* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                             PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof(buf));
    raise<ValueError>("tokenizer: invalid regex '{}' at offset {}: {}", pattern, off,
                      reinterpret_cast<const char*>(buf));
  }
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool Regex::search(std::string_view s, size_t start, size_t& mstart, size_t& mend) const {
  auto& st = match_state();
  auto* code = static_cast<pcre2_code*>(code_);
  auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  int rc;
  if (jit_) {
    rc = pcre2_jit_match(code, subject, s.size(), start, 0, st.md, st.ctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
      rc = pcre2_match(code, subject, s.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, st.md, nullptr);
  } else {
    rc = pcre2_match(code, subject, s.size(), start, PCRE2_NO_UTF_CHECK, st.md, nullptr);
  }
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0 && rc != 0) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(rc, buf, sizeof(buf));
    raise<Error>("tokenizer: regex match failed: {}", reinterpret_cast<const char*>(buf));
  }
  PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.md);
  mstart = ov[0];
  mend = ov[1];
  return true;
}

void Regex::find_all(std::string_view s, std::vector<Offsets>& out) const {
  size_t pos = 0;
  std::optional<size_t> last_end;
  while (pos <= s.size()) {
    size_t ms, me;
    if (!search(s, pos, ms, me)) break;
    if (ms == me) {
      // Empty match: skip one right after the previous match, then step one char forward.
      if (!(last_end && *last_end == me)) out.emplace_back(ms, me);
      if (me >= s.size()) break;
      pos = me + uni::utf8_len(static_cast<unsigned char>(s[me]));
      last_end = me;
      continue;
    }
    out.emplace_back(ms, me);
    pos = me;
    last_end = me;
  }
}

// ---------------------------------------------------------------------------------------------
// Pattern

void Pattern::find_matches(std::string_view s, std::vector<Match>& out) const {
  out.clear();
  if (s.empty()) {
    out.push_back({0, 0, invert});
    return;
  }
  if (kind == Kind::String || kind == Kind::Regex) {
    if (kind == Kind::String && str.empty()) {
      out.push_back({0, s.size(), invert});
      return;
    }
    std::vector<Offsets> ms;
    if (kind == Kind::Regex) {
      regex->find_all(s, ms);
    } else {
      size_t pos = 0;
      while (true) {
        size_t f = s.find(str, pos);
        if (f == std::string_view::npos) break;
        ms.emplace_back(f, f + str.size());
        pos = f + str.size();
      }
    }
    size_t prev = 0;
    for (auto [a, b] : ms) {
      if (prev != a) out.push_back({prev, a, invert});
      out.push_back({a, b, !invert});
      prev = b;
    }
    if (prev != s.size()) out.push_back({prev, s.size(), invert});
    return;
  }
  size_t last_offset = 0, last_seen = 0;
  size_t i = 0;
  while (i < s.size()) {
    size_t b = i;
    char32_t c = uni::decode(s, i);
    last_seen = i;
    bool hit = kind == Kind::Char ? c == ch : pred(c);
    if (hit) {
      if (last_offset < b) out.push_back({last_offset, b, invert});
      out.push_back({b, i, !invert});
      last_offset = i;
    }
  }
  if (last_seen > last_offset) out.push_back({last_offset, last_seen, invert});
}

// ---------------------------------------------------------------------------------------------
// NormalizedString

NormalizedString::NormalizedString(std::string s)
    : normalized_(std::move(s)), identity_(true), original_len_(normalized_.size()), shift_(0) {}

static inline bool is_boundary(const std::string& s, size_t i) {
  return i == s.size() || (i < s.size() && (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80);
}

std::pair<uint32_t, uint32_t> NormalizedString::alignment(size_t i) const {
  if (!identity_) return align_[i];
  size_t a = i;
  while (a > 0 && (static_cast<unsigned char>(normalized_[a]) & 0xC0) == 0x80) --a;
  size_t b = a + uni::utf8_len(static_cast<unsigned char>(normalized_[a]));
  return {static_cast<uint32_t>(a), static_cast<uint32_t>(std::min(b, normalized_.size()))};
}

void NormalizedString::materialize() {
  if (!identity_) return;
  align_.resize(normalized_.size());
  size_t i = 0;
  while (i < normalized_.size()) {
    size_t n = uni::utf8_len(static_cast<unsigned char>(normalized_[i]));
    size_t e = std::min(i + n, normalized_.size());
    for (size_t k = i; k < e; ++k) align_[k] = {static_cast<uint32_t>(i), static_cast<uint32_t>(e)};
    i = e;
  }
  identity_ = false;
}

std::optional<Offsets> NormalizedString::normalized_to_original(size_t start, size_t end) const {
  if (start == end) return Offsets{start, end};
  if (start > end || end > normalized_.size()) return std::nullopt;
  return Offsets{alignment(start).first, alignment(end - 1).second};
}

std::optional<Offsets> NormalizedString::original_to_normalized(size_t start, size_t end) const {
  if (start == end) return Offsets{start, end};
  if (start > end) return std::nullopt;
  if (identity_ && end <= normalized_.size() && is_boundary(normalized_, start) &&
      is_boundary(normalized_, end))
    return Offsets{start, end};
  std::optional<size_t> s, e;
  for (size_t i = 0; i < normalized_.size(); ++i) {
    auto al = alignment(i);
    if (!(end >= al.second)) break;
    if (!s && start <= al.first && al.first != al.second) s = i;
    e = i + 1;
  }
  if (s && e) return Offsets{*s, *e};
  if (e) return Offsets{*e, *e};
  if (s) return Offsets{*s, *s};
  return std::nullopt;
}

std::optional<NormalizedString> NormalizedString::slice(size_t start, size_t end) const {
  if (start > normalized_.size() || end > normalized_.size()) return std::nullopt;
  if (!is_boundary(normalized_, start) || !is_boundary(normalized_, end)) return std::nullopt;
  auto orig = normalized_to_original(start, end);
  if (!orig) return std::nullopt;
  NormalizedString out;
  out.normalized_ = normalized_.substr(start, end - start);
  size_t n_shift = orig->first;
  out.shift_ = shift_ + orig->first;
  out.original_len_ = orig->second >= orig->first ? orig->second - orig->first : 0;
  if (identity_) {
    out.identity_ = true;
  } else {
    out.identity_ = false;
    out.align_.resize(end - start);
    for (size_t k = start; k < end; ++k)
      out.align_[k - start] = {static_cast<uint32_t>(align_[k].first - n_shift),
                               static_cast<uint32_t>(align_[k].second - n_shift)};
  }
  return out;
}

void NormalizedString::transform_range(size_t start, size_t end, const std::vector<uni::CharChange>& dest,
                                       size_t initial_offset) {
  materialize();
  size_t rp = start;  // read position in the replaced range
  for (size_t k = 0; k < initial_offset && rp < end; ++k)
    rp += uni::utf8_len(static_cast<unsigned char>(normalized_[rp]));
  size_t offset = rp;
  std::string out;
  out.reserve(dest.size() + 4);
  std::vector<std::pair<uint32_t, uint32_t>> al;
  al.reserve(dest.size() + 4);
  for (const auto& [c, change] : dest) {
    size_t idx = offset;
    std::pair<uint32_t, uint32_t> a;
    if (change > 0) {
      a = idx < 1 ? std::pair<uint32_t, uint32_t>{0, 0} : align_[std::min(idx - 1, align_.size() - 1)];
    } else {
      a = idx < align_.size() ? align_[idx] : (align_.empty() ? std::pair<uint32_t, uint32_t>{0, 0} : align_.back());
    }
    if (change <= 0 && rp < end) {
      size_t sz = uni::utf8_len(static_cast<unsigned char>(normalized_[rp]));
      rp += sz;
      offset += sz;
    }
    if (change < 0) {
      for (int k = 0; k < -change && rp < end; ++k) {
        size_t sz = uni::utf8_len(static_cast<unsigned char>(normalized_[rp]));
        rp += sz;
        offset += sz;
      }
    }
    size_t before = out.size();
    uni::append_utf8(out, c);
    for (size_t k = before; k < out.size(); ++k) al.push_back(a);
  }
  normalized_.replace(start, end - start, out);
  align_.erase(align_.begin() + start, align_.begin() + end);
  align_.insert(align_.begin() + start, al.begin(), al.end());
}

void NormalizedString::transform(const std::vector<uni::CharChange>& dest, size_t initial_offset) {
  auto r = original_to_normalized(0, original_len_);
  if (!r) return;
  transform_range(r->first, r->second, dest, initial_offset);
}

void NormalizedString::filter(const std::function<bool(char32_t)>& keep) {
  std::vector<uni::CharChange> rev;
  rev.reserve(normalized_.size());
  std::u32string chars = uni::to_u32(normalized_);
  int removed = 0;
  bool any_removed = false;
  for (size_t k = chars.size(); k-- > 0;) {
    char32_t c = chars[k];
    if (keep(c)) {
      rev.push_back({c, removed > 0 ? -removed : 0});
      removed = 0;
    } else {
      ++removed;
      any_removed = true;
    }
  }
  if (!any_removed) return;
  std::reverse(rev.begin(), rev.end());
  transform(rev, static_cast<size_t>(removed));
}

void NormalizedString::map(const std::function<char32_t(char32_t)>& f) {
  std::vector<uni::CharChange> tr;
  tr.reserve(normalized_.size());
  bool changed = false;
  size_t i = 0;
  while (i < normalized_.size()) {
    char32_t c = uni::decode(normalized_, i);
    char32_t m = f(c);
    changed |= m != c;
    tr.push_back({m, 0});
  }
  if (changed) transform(tr, 0);
}

namespace {
// Each char replaced by the chars `convert` gives it (a case mapping may give several).
void map_each_char(NormalizedString& s, void (*convert)(char32_t, std::u32string&)) {
  const std::string& text = s.get();
  std::vector<uni::CharChange> tr;
  tr.reserve(text.size());
  bool changed = false;
  std::u32string buf;
  size_t i = 0;
  while (i < text.size()) {
    char32_t c = uni::decode(text, i);
    buf.clear();
    convert(c, buf);
    if (buf.size() != 1 || buf[0] != c) changed = true;
    for (size_t k = 0; k < buf.size(); ++k) tr.push_back({buf[k], k > 0 ? 1 : 0});
  }
  if (changed) s.transform(tr, 0);
}
}  // namespace

void NormalizedString::lowercase() { map_each_char(*this, uni::to_lowercase); }

void NormalizedString::uppercase() { map_each_char(*this, uni::to_uppercase); }

void NormalizedString::prepend(std::string_view s) {
  if (normalized_.empty()) return;
  size_t i = 0;
  char32_t next = uni::decode(normalized_, i);
  std::vector<uni::CharChange> tr;
  size_t k = 0, idx = 0;
  while (k < s.size()) tr.push_back({uni::decode(s, k), idx++ == 0 ? 0 : 1});
  tr.push_back({next, 1});
  transform_range(0, i, tr, 0);
}

void NormalizedString::append(std::string_view s) {
  if (normalized_.empty()) return;
  size_t b = normalized_.size() - 1;
  while (b > 0 && (static_cast<unsigned char>(normalized_[b]) & 0xC0) == 0x80) --b;
  size_t i = b;
  char32_t prev = uni::decode(normalized_, i);
  std::vector<uni::CharChange> tr{{prev, 0}};
  size_t k = 0;
  while (k < s.size()) tr.push_back({uni::decode(s, k), 1});
  transform_range(b, normalized_.size(), tr, 0);
}

void NormalizedString::replace(const Pattern& pattern, std::string_view content) {
  std::vector<Match> ms;
  pattern.find_matches(normalized_, ms);
  bool any = false;
  for (const auto& m : ms) any |= m.is_match;
  if (!any) return;
  // One pass with the result of HF's successive transform_range calls: each match is replaced
  // by `content`, every new char inserted (+1) with the alignment of the last byte of the match.
  materialize();
  std::string out;
  std::vector<std::pair<uint32_t, uint32_t>> al;
  out.reserve(normalized_.size() + 16);
  al.reserve(normalized_.size() + 16);
  for (const auto& m : ms) {
    if (!m.is_match) {
      out.append(normalized_, m.start, m.end - m.start);
      al.insert(al.end(), align_.begin() + m.start, align_.begin() + m.end);
      continue;
    }
    std::pair<uint32_t, uint32_t> a = m.end >= 1 ? align_[m.end - 1] : std::pair<uint32_t, uint32_t>{0, 0};
    out.append(content);
    al.insert(al.end(), content.size(), a);
  }
  normalized_ = std::move(out);
  align_ = std::move(al);
}

void NormalizedString::lrstrip(bool left, bool right) {
  std::u32string chars = uni::to_u32(normalized_);
  size_t n = chars.size();
  size_t leading = 0, trailing = 0;
  if (left)
    while (leading < n && uni::is_whitespace(chars[leading])) ++leading;
  if (right)
    while (trailing < n && uni::is_whitespace(chars[n - 1 - trailing])) ++trailing;
  if (leading == 0 && trailing == 0) return;
  std::vector<uni::CharChange> tr;
  for (size_t i = 0; i < n; ++i) {
    if (i < leading || i + trailing >= n) continue;
    if (i + trailing + 1 == n)
      tr.push_back({chars[i], -static_cast<int>(trailing)});
    else
      tr.push_back({chars[i], 0});
  }
  transform(tr, leading);
}

void NormalizedString::normalize_unicode(uni::NormForm form) {
  std::vector<uni::CharChange> tr;
  if (uni::normalize(normalized_, form, tr)) transform(tr, 0);
}

void NormalizedString::map_bytes(const std::string* table) {
  std::string out;
  out.reserve(normalized_.size() * 2);
  std::vector<std::pair<uint32_t, uint32_t>> al;
  al.reserve(normalized_.size() * 2);
  size_t i = 0;
  while (i < normalized_.size()) {
    size_t n = std::min<size_t>(uni::utf8_len(static_cast<unsigned char>(normalized_[i])), normalized_.size() - i);
    auto a = alignment(i);
    for (size_t k = 0; k < n; ++k) {
      const std::string& rep = table[static_cast<unsigned char>(normalized_[i + k])];
      out += rep;
      al.insert(al.end(), rep.size(), a);
    }
    i += n;
  }
  normalized_ = std::move(out);
  align_ = std::move(al);
  identity_ = false;
}

void NormalizedString::clear() {
  size_t n = uni::char_count(normalized_);
  transform({}, n);
}

void NormalizedString::set_normalized(std::string text, const std::vector<std::pair<uint32_t, uint32_t>>& align) {
  std::vector<std::pair<uint32_t, uint32_t>> composed(align.size());
  for (size_t k = 0; k < align.size(); ++k) {
    auto [a, b] = align[k];
    if (a == b) {
      composed[k] = a < normalized_.size() ? std::pair<uint32_t, uint32_t>{alignment(a).first, alignment(a).first}
                                           : std::pair<uint32_t, uint32_t>{static_cast<uint32_t>(original_len_),
                                                                           static_cast<uint32_t>(original_len_)};
    } else {
      composed[k] = {alignment(a).first, alignment(b - 1).second};
    }
  }
  normalized_ = std::move(text);
  align_ = std::move(composed);
  identity_ = false;
}

std::vector<NormalizedString> NormalizedString::split(const Pattern& pattern, SplitBehavior behavior) const {
  std::vector<Match> matches;
  pattern.find_matches(normalized_, matches);
  struct S {
    size_t a, b;
    bool remove;
  };
  std::vector<S> splits;
  splits.reserve(matches.size());
  switch (behavior) {
    case SplitBehavior::Isolated:
      for (auto& m : matches) splits.push_back({m.start, m.end, false});
      break;
    case SplitBehavior::Removed:
      for (auto& m : matches) splits.push_back({m.start, m.end, m.is_match});
      break;
    case SplitBehavior::Contiguous: {
      bool prev = false;
      for (auto& m : matches) {
        if (m.is_match == prev && !splits.empty())
          splits.back().b = m.end;
        else
          splits.push_back({m.start, m.end, false});
        prev = m.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithPrevious: {
      bool prev = false;
      for (auto& m : matches) {
        if (m.is_match && !prev && !splits.empty())
          splits.back().b = m.end;
        else
          splits.push_back({m.start, m.end, false});
        prev = m.is_match;
      }
      break;
    }
    case SplitBehavior::MergedWithNext: {
      bool prev = false;
      for (size_t k = matches.size(); k-- > 0;) {
        auto& m = matches[k];
        if (m.is_match && !prev && !splits.empty())
          splits.back().a = m.start;
        else
          splits.push_back({m.start, m.end, false});
        prev = m.is_match;
      }
      std::reverse(splits.begin(), splits.end());
      break;
    }
  }
  std::vector<NormalizedString> out;
  out.reserve(splits.size());
  for (auto& s : splits) {
    if (s.remove) continue;
    auto piece = slice(s.a, s.b);
    FOUNDRY_CHECK(piece.has_value(), "tokenizer: NormalizedString bad split at [{}, {})", s.a, s.b);
    out.push_back(std::move(*piece));
  }
  return out;
}

}  // namespace foundry::text
