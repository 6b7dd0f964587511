#include "text/base64.h"

#include <cstdint>

#include "foundry/core/error.h"

namespace foundry::text {

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// The 6-bit value of a character, -1 for anything outside the alphabet(s).
int value_of(char c, bool url_safe) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || (url_safe && c == '-')) return 62;
  if (c == '/' || (url_safe && c == '_')) return 63;
  return -1;
}
}  // namespace

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8 | uint8_t(in[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < in.size()) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16 | (i + 1 < in.size() ? uint32_t(uint8_t(in[i + 1])) << 8 : 0);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(std::string_view in, bool strict) {
  if (strict && in.size() % 4 != 0) raise<ValueError>("base64: length {} is not a multiple of 4", in.size());
  std::string out;
  out.reserve(in.size() / 4 * 3);
  uint32_t buf = 0;
  int bits = 0;
  size_t pad = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '=') {
      // Padding closes the text: at most two, and (strict) only in the last group.
      if (strict && (++pad > 2 || i + 4 < in.size() || i % 4 < 2)) raise<ValueError>("base64: misplaced '=' at offset {}", i);
      continue;
    }
    if (!strict && (c == '\n' || c == '\r')) continue;
    const int v = value_of(c, !strict);
    if (v < 0 || pad) raise<ValueError>("base64: invalid character at offset {}", i);
    buf = (buf << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += char((buf >> bits) & 0xFF);
    }
  }
  return out;
}

}  // namespace foundry::text
