// Base64 (RFC 4648), the one codec of the project: tokenizer files (precompiled charsmaps,
// tiktoken ranks) and the tracker's sync payloads use it.
#pragma once

#include <string>
#include <string_view>

namespace foundry::text {

std::string base64_encode(std::string_view bytes);
/// Lenient by default, as tokenizer files need: the URL-safe alphabet too, padding optional, line
/// breaks skipped. `strict`: the standard alphabet only, a length that is a multiple of 4, padding
/// only at the end. ValueError naming the offending offset otherwise.
std::string base64_decode(std::string_view text, bool strict = false);

}  // namespace foundry::text
