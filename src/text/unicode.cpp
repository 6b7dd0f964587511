// Unicode helpers (see unicode.h). Character data comes from utf8proc; the normalization
// alignment logic follows the unicode-normalization-alignments crate used by HF tokenizers.
#include "text/unicode.h"

#include <utf8proc.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace foundry::text::uni {

std::u32string to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) out.push_back(decode(s, i));
  return out;
}

std::string from_u32(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

size_t char_count(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

namespace {

// Length of the well-formed UTF-8 sequence at s[i], or 0 with `bad` = length of the maximal
// subpart to replace by one U+FFFD.
size_t check_seq(std::string_view s, size_t i, size_t& bad) {
  auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  size_t n = s.size();
  auto at = [&](size_t k) -> int { return i + k < n ? static_cast<unsigned char>(s[i + k]) : -1; };
  int need;
  int lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    bad = 1;
    return 0;
  }
  for (int k = 1; k <= need; ++k) {
    int b = at(k);
    int l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      bad = k;
      return 0;
    }
  }
  return need + 1;
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    // Fast skip over ASCII, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    size_t bad = 0;
    size_t len = check_seq(s, i, bad);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    size_t bad = 0;
    size_t len = check_seq(s, i, bad);
    if (len) {
      out.append(s.data() + i, len);
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      i += bad;
    }
  }
  return out;
}

bool is_whitespace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 9 && c <= 13);
  switch (c) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

static inline utf8proc_category_t cat(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

bool is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  auto k = cat(c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool is_alphabetic(char32_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
  auto k = cat(c);
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || k == UTF8PROC_CATEGORY_NL;
}

#include "text/unicode8_assigned.inc"

// The general category HF tokenizers' unicode_categories crate gives: Unicode 8.0's. A character
// assigned later is unassigned (Cn) to it, and a few changed category since 8.0 -- those that
// matter to punctuation, control and nonspacing-mark tests are listed with their 8.0 category.
// Checked over every code point against HF's BertNormalizer + BertPreTokenizer, with and without
// strip_accents (tests/python/test_tokenizer_unicode.py).
static utf8proc_category_t hf_cat(char32_t c) {
  if (c < 0x80) return cat(c);  // ASCII: the same in every version, no table search on the hot path
  const uint32_t* end = kAssignedInUnicode8 + sizeof(kAssignedInUnicode8) / sizeof(kAssignedInUnicode8[0]);
  bool assigned = (std::upper_bound(kAssignedInUnicode8, end, uint32_t(c)) - kAssignedInUnicode8) % 2 == 1;
  if (!assigned) return UTF8PROC_CATEGORY_CN;
  switch (c) {
    case 0x166D: return UTF8PROC_CATEGORY_PO;   // CANADIAN SYLLABICS CHI SIGN: So since Unicode 12
    case 0x111C9: return UTF8PROC_CATEGORY_PO;  // SHARADA SANDHI MARK: Mn since Unicode 11
    case 0x1734: return UTF8PROC_CATEGORY_MN;   // HANUNOO SIGN PAMUDPOD: Mc since Unicode 14
    case 0x1885:
    case 0x1886: return UTF8PROC_CATEGORY_LO;   // MONGOLIAN LETTER ALI GALI BALUDA / THREE BALUDA: Mn since 9.0
    case 0xA9BD: return UTF8PROC_CATEGORY_MC;   // JAVANESE CONSONANT SIGN KERET: Mn since Unicode 12
    default: return cat(c);
  }
}

bool is_punctuation(char32_t c) {
  auto k = hf_cat(c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

bool is_other(char32_t c) {
  // Not Cn: HF's BertNormalizer keeps unassigned code points and the noncharacters (U+FDD0..U+FDEF,
  // U+xFFFE/U+xFFFF) -- measured over every code point with the npm binding.
  auto k = hf_cat(c);
  return k >= UTF8PROC_CATEGORY_CC && k <= UTF8PROC_CATEGORY_CO;
}

bool is_mark_nonspacing(char32_t c) { return hf_cat(c) == UTF8PROC_CATEGORY_MN; }

bool is_mark(char32_t c) {
  auto k = cat(c);
  return k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME;
}

bool is_word_char(char32_t c) {
  if (c == 0x200C || c == 0x200D) return true;  // Join_Control
  if (c < 0x80) return (c >= '0' && c <= '9') || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') || c == '_';
  auto k = cat(c);
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
         (k >= UTF8PROC_CATEGORY_MN && k <= UTF8PROC_CATEGORY_ME) || k == UTF8PROC_CATEGORY_ND ||
         k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_PC;
}

bool is_lowercase_letter_only(char32_t c) { return cat(c) == UTF8PROC_CATEGORY_LL; }

int combining_class(char32_t c) {
  if (c < 0x300) return 0;
  return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
}

void to_lowercase(char32_t c, std::u32string& out) {
  if (c < 0x80) {
    out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  if (c == 0x130) {  // LATIN CAPITAL LETTER I WITH DOT ABOVE -> i + COMBINING DOT ABOVE
    out.push_back('i');
    out.push_back(0x307);
    return;
  }
  out.push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
}

void to_uppercase(char32_t c, std::u32string& out) {
  if (c < 0x80) {
    out.push_back(c >= 'a' && c <= 'z' ? c - 32 : c);
    return;
  }
  if (c == 0xDF) {  // ß -> SS
    out.push_back('S');
    out.push_back('S');
    return;
  }
  out.push_back(static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))));
}

namespace {

// Canonical composition of a pair, or 0.
char32_t compose_pair(char32_t a, char32_t b) {
  // Hangul LV / LVT.
  const char32_t SBase = 0xAC00, LBase = 0x1100, VBase = 0x1161, TBase = 0x11A7;
  const int LCount = 19, VCount = 21, TCount = 28, NCount = VCount * TCount, SCount = LCount * NCount;
  if (a >= LBase && a < LBase + LCount && b >= VBase && b < VBase + VCount)
    return SBase + ((a - LBase) * VCount + (b - VBase)) * TCount;
  if (a >= SBase && a < SBase + SCount && ((a - SBase) % TCount) == 0 && b > TBase &&
      b < TBase + TCount)
    return a + (b - TBase);
  utf8proc_int32_t buf[2] = {static_cast<utf8proc_int32_t>(a), static_cast<utf8proc_int32_t>(b)};
  utf8proc_ssize_t n = utf8proc_normalize_utf32(buf, 2, static_cast<utf8proc_option_t>(UTF8PROC_COMPOSE));
  if (n == 1) return static_cast<char32_t>(buf[0]);
  return 0;
}

void decompose_char(char32_t c, bool compat, std::vector<CharChange>& out) {
  utf8proc_int32_t buf[32];
  int boundclass = 0;
  auto opts = static_cast<utf8proc_option_t>(UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0));
  utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buf, 32, opts, &boundclass);
  if (n <= 0 || n > 32) {
    out.push_back({c, 0});
    return;
  }
  for (utf8proc_ssize_t k = 0; k < n; ++k) out.push_back({static_cast<char32_t>(buf[k]), k == 0 ? 0 : 1});
}

}  // namespace

bool normalize(std::string_view s, NormForm form, std::vector<CharChange>& out) {
  out.clear();
  bool ascii = true;
  for (unsigned char c : s) {
    if (c >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return false;
  bool compat = form == NormForm::NFKC || form == NormForm::NFKD;
  bool compose = form == NormForm::NFC || form == NormForm::NFKC;
  std::vector<CharChange> dec;
  dec.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) decompose_char(decode(s, i), compat, dec);
  // Canonical ordering: stable sort each run of non-starters by combining class.
  for (size_t a = 0; a < dec.size();) {
    if (combining_class(dec[a].first) == 0) {
      ++a;
      continue;
    }
    size_t b = a;
    while (b < dec.size() && combining_class(dec[b].first) != 0) ++b;
    if (b - a > 1)
      std::stable_sort(dec.begin() + a, dec.begin() + b, [](const CharChange& x, const CharChange& y) {
        return combining_class(x.first) < combining_class(y.first);
      });
    a = b;
  }
  if (!compose) {
    out = std::move(dec);
  } else {
    // Canonical composition (same state machine as unicode-normalization's Recompositions).
    out.reserve(dec.size());
    long starter = -1;  // index in out of the current composee
    int last_ccc = -1;  // -1: nothing after the starter yet
    for (const auto& cc : dec) {
      int ccc = combining_class(cc.first);
      if (starter < 0) {
        if (ccc == 0) starter = static_cast<long>(out.size());
        out.push_back(cc);
        last_ccc = -1;
        continue;
      }
      bool blocked = last_ccc != -1 && last_ccc >= ccc;
      if (!blocked) {
        char32_t p = compose_pair(out[starter].first, cc.first);
        if (p) {
          out[starter].first = p;
          out[starter].second += cc.second - 1;
          continue;
        }
      }
      if (ccc == 0) {
        starter = static_cast<long>(out.size());
        last_ccc = -1;
      } else {
        last_ccc = ccc;
      }
      out.push_back(cc);
    }
  }
  // Detect the identity transformation.
  size_t j = 0;
  bool same = true;
  for (const auto& cc : out) {
    if (cc.second != 0 || j >= s.size()) {
      same = false;
      break;
    }
    if (decode(s, j) != cc.first) {
      same = false;
      break;
    }
  }
  if (same && j == s.size()) {
    out.clear();
    return false;
  }
  return true;
}

std::vector<size_t> grapheme_starts(std::string_view s) {
  std::vector<size_t> starts;
  utf8proc_int32_t state = 0;
  char32_t prev = 0;
  size_t i = 0;
  bool first = true;
  while (i < s.size()) {
    size_t at = i;
    char32_t c = decode(s, i);
    if (first || utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(prev),
                                                  static_cast<utf8proc_int32_t>(c), &state))
      starts.push_back(at);
    first = false;
    prev = c;
  }
  return starts;
}

namespace {
// Script names PCRE2 10.42 knows; index + 2 is the script id (0 = Common, 1 = Inherited).
const char* const kScripts[] = {
    "Latin", "Greek", "Cyrillic", "Armenian", "Hebrew", "Arabic", "Syriac", "Thaana", "Devanagari",
    "Bengali", "Gurmukhi", "Gujarati", "Oriya", "Tamil", "Telugu", "Kannada", "Malayalam",
    "Sinhala", "Thai", "Lao", "Tibetan", "Myanmar", "Georgian", "Hangul", "Ethiopic", "Cherokee",
    "Canadian_Aboriginal", "Ogham", "Runic", "Khmer", "Mongolian", "Hiragana", "Katakana",
    "Bopomofo", "Han", "Yi", "Old_Italic", "Gothic", "Deseret", "Tagalog", "Hanunoo", "Buhid",
    "Tagbanwa", "Limbu", "Tai_Le", "Linear_B", "Ugaritic", "Shavian", "Osmanya", "Cypriot",
    "Braille", "Buginese", "Coptic", "New_Tai_Lue", "Glagolitic", "Tifinagh", "Syloti_Nagri",
    "Old_Persian", "Kharoshthi", "Balinese", "Cuneiform", "Phoenician", "Phags_Pa", "Nko",
    "Sundanese", "Lepcha", "Ol_Chiki", "Vai", "Saurashtra", "Kayah_Li", "Rejang", "Lycian",
    "Carian", "Lydian", "Cham", "Tai_Tham", "Tai_Viet", "Avestan", "Egyptian_Hieroglyphs",
    "Samaritan", "Lisu", "Bamum", "Javanese", "Meetei_Mayek", "Imperial_Aramaic", "Old_South_Arabian",
    "Inscriptional_Parthian", "Inscriptional_Pahlavi", "Old_Turkic", "Kaithi", "Batak", "Brahmi",
    "Mandaic", "Chakma", "Meroitic_Cursive", "Meroitic_Hieroglyphs", "Miao", "Sharada",
    "Sora_Sompeng", "Takri"};
constexpr int kNumScripts = sizeof(kScripts) / sizeof(kScripts[0]);

struct ScriptTable {
  std::vector<pcre2_code*> codes;
  pcre2_code* inherited = nullptr;
  std::mutex mu;
  std::unordered_map<char32_t, int> cache;
  ~ScriptTable() {
    for (auto* c : codes) pcre2_code_free(c);
    pcre2_code_free(inherited);
  }
  ScriptTable() {
    int err;
    PCRE2_SIZE off;
    for (int k = 0; k < kNumScripts; ++k) {
      std::string pat = std::string("^\\p{sc:") + kScripts[k] + "}$";  // Script, not Script_Extensions
      codes.push_back(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.c_str()), pat.size(),
                                    PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr));
    }
    const char* inh = "^\\p{sc:Inherited}$";
    inherited = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(inh), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  }
};
}  // namespace

int script_of(char32_t c) {
  static ScriptTable table;
  {
    std::lock_guard<std::mutex> lock(table.mu);
    auto it = table.cache.find(c);
    if (it != table.cache.end()) return it->second;
  }
  std::string s = to_utf8(c);
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  int result = 0;
  auto matches = [&](pcre2_code* code) {
    return code && pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0, 0, md, nullptr) >= 0;
  };
  if (matches(table.inherited)) {
    result = 1;
  } else {
    for (int k = 0; k < kNumScripts; ++k) {
      if (matches(table.codes[k])) {
        result = k + 2;
        break;
      }
    }
  }
  pcre2_match_data_free(md);
  std::lock_guard<std::mutex> lock(table.mu);
  table.cache[c] = result;
  return result;
}

}  // namespace foundry::text::uni
