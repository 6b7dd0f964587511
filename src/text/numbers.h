// Decimal digits from tokenizer files as numbers, without std::stoul's exceptions (which name
// no file) or its silent narrowing to 32 bits.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace foundry::text {

/// The value of `s` if it is one or more decimal digits that fit in 32 bits.
inline std::optional<uint32_t> parse_u32(std::string_view s) {
  uint32_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace foundry::text
