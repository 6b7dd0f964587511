// Python's str semantics over UTF-8, for metrics that must equal Python libraries: Python strings
// are sequences of code points, so "a character", str.split()'s whitespace and str.lower() are
// defined on code points here. A byte that is not valid UTF-8 becomes one character of its own,
// U+DC80..U+DCFF as Python's "surrogateescape" decodes it, and is written back unchanged.
// Internal to src/eval (text_metrics.cpp, porter.cpp).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <utf8proc.h>

namespace foundry::eval::py {

constexpr char32_t kEscapeBase = 0xDC00;

inline bool is_escaped_byte(char32_t c) { return c >= kEscapeBase + 0x80 && c <= kEscapeBase + 0xFF; }

/// Decodes the character at s[i] and advances i past it.
inline char32_t next_char(std::string_view s, size_t& i) {
  auto lead = static_cast<unsigned char>(s[i]);
  if (lead < 0x80) {
    ++i;
    return lead;
  }
  utf8proc_int32_t cp = 0;
  utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                        static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
  if (n <= 0) {
    ++i;
    return kEscapeBase + lead;
  }
  i += static_cast<size_t>(n);
  return static_cast<char32_t>(cp);
}

inline std::u32string decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(next_char(s, i));
  return out;
}

inline void append_char(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (is_escaped_byte(c)) {
    out.push_back(static_cast<char>(c - kEscapeBase));
  } else {
    utf8proc_uint8_t buf[4];
    utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
  }
}

inline std::string encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_char(out, c);
  return out;
}

/// str.isspace(), which str.split() and str.rstrip() use: \t..\r, the ASCII separators
/// \x1c..\x1f (whitespace to Python, not to most other languages) and the Unicode spaces.
/// A character of Python's string.punctuation (ASCII).
inline bool is_punctuation(char c) {
  return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~');
}

inline bool is_space(char32_t c) {
  if (c < 0x80) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/// The general category of a code point; escaped bytes are unassigned.
inline utf8proc_category_t category(char32_t c) {
  if (is_escaped_byte(c)) return UTF8PROC_CATEGORY_CN;
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

/// Unicode Case_Ignorable: Mn, Me, Cf, Lm, Sk and the Word_Break MidLetter, MidNumLet and
/// Single_Quote characters (apostrophes, periods, colons, middle dots).
inline bool is_case_ignorable(char32_t c) {
  switch (c) {
    case 0x27: case 0x2E: case 0x3A: case 0xB7: case 0x387: case 0x55F: case 0x5F4:
    case 0x2018: case 0x2019: case 0x2024: case 0x2027: case 0xFE13: case 0xFE52:
    case 0xFE55: case 0xFF07: case 0xFF0E: case 0xFF1A:
      return true;
    default:
      break;
  }
  switch (category(c)) {
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_SK:
      return true;
    default:
      return false;
  }
}

/// Unicode Cased: Lu, Ll, Lt and the Other_Lowercase/Other_Uppercase characters, which utf8proc
/// does not expose. Those of them that are Lm or Mn are case-ignorable, which wins in the one
/// place this is used, so only these remain: the ordinal indicators, Roman numerals, and circled,
/// squared and negative squared Latin letters.
inline bool is_cased(char32_t c) {
  switch (category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
      return true;
    default:
      return c == 0xAA || c == 0xBA || (c >= 0x2160 && c <= 0x217F) || (c >= 0x24B6 && c <= 0x24E9) ||
             (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189);
  }
}

/// str.lower(): the full lowercase mapping (U+0130 becomes "i" + U+0307; every other full
/// mapping equals the simple one) and Final_Sigma: a capital sigma becomes final sigma when a
/// cased letter precedes it and none follows, skipping case-ignorable characters on both sides.
inline std::string lower(std::string_view s) {
  std::u32string cps = decode(s);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < cps.size(); ++i) {
    char32_t c = cps[i];
    if (c < 0x80) {
      out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c));
    } else if (c == 0x130) {
      out.push_back('i');
      append_char(out, 0x307);
    } else if (c == 0x3A3) {
      size_t j = i;
      while (j > 0 && is_case_ignorable(cps[j - 1])) --j;
      bool final_sigma = j > 0 && is_cased(cps[j - 1]);
      size_t k = i + 1;
      while (k < cps.size() && is_case_ignorable(cps[k])) ++k;
      if (k < cps.size() && is_cased(cps[k])) final_sigma = false;
      append_char(out, final_sigma ? 0x3C2 : 0x3C3);
    } else if (is_escaped_byte(c)) {
      append_char(out, c);
    } else {
      append_char(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
  }
  return out;
}

/// str.rstrip() with no argument.
inline std::string_view rstrip(std::string_view s) {
  size_t end = 0;
  for (size_t i = 0; i < s.size();) {
    if (!is_space(next_char(s, i))) end = i;
  }
  return s.substr(0, end);
}

/// Calls f(piece) for each piece of str.split() with no argument: runs of whitespace separate and
/// there are no empty pieces.
template <typename F>
void for_each_split(std::string_view s, F&& f) {
  size_t start = std::string_view::npos;
  for (size_t i = 0; i < s.size();) {
    size_t at = i;
    bool space = is_space(next_char(s, i));
    if (space && start != std::string_view::npos) {
      f(s.substr(start, at - start));
      start = std::string_view::npos;
    } else if (!space && start == std::string_view::npos) {
      start = at;
    }
  }
  if (start != std::string_view::npos) f(s.substr(start));
}

/// " ".join(s.split())
inline std::string join_split(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for_each_split(s, [&](std::string_view piece) {
    if (!out.empty()) out.push_back(' ');
    out.append(piece);
  });
  return out;
}

/// str.replace(from, to): left to right, non-overlapping, one pass (the output is not rescanned).
inline std::string replace(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string_view::npos; pos = hit + from.size()) {
    out.append(s.substr(pos, hit - pos));
    out.append(to);
  }
  out.append(s.substr(pos));
  return out;
}

}  // namespace foundry::eval::py
