// A bound on how deeply JSON from outside the program may nest. nlohmann::json parses any depth,
// but copying or dumping a value recurses once per level (a 200 KB body of 100 000 nested arrays
// overflows an 8 MB stack), as do the readers that walk a schema, a tokenizer's pipeline or a
// template's context: every JSON text that comes from a file, a request or a peer is checked here
// before it is parsed, so a deep document is an error naming it, never a crash.
#pragma once

#include <string>
#include <string_view>

#include "foundry/core/error.h"

namespace foundry::io {

/// Levels of arrays and objects a JSON document from outside may nest: serde_json's recursion
/// limit, about where HF's readers of the same files stop (the tokenizers npm binding loads a
/// tokenizer.json 126 levels deep and refuses one 128 deep, "recursion limit exceeded"). Real
/// tokenizer files, model configs, API requests and structured-output schemas stay far below it.
constexpr int kMaxJsonDepth = 128;

/// The deepest nesting of arrays and objects in `text` (brackets inside strings do not count;
/// malformed text is measured as far as it goes, for the parser to refuse it). Inline: the
/// tokenizers (src/text, a library of their own) use it too.
inline int json_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

/// Throws ValueError "{what}: JSON nested N levels deep; at most kMaxJsonDepth are accepted" when
/// text nests deeper than `max_depth`.
inline void check_json_depth(std::string_view text, const std::string& what, int max_depth = kMaxJsonDepth) {
  const int depth = json_depth(text);
  if (depth > max_depth)
    raise<ValueError>("{}: JSON nested {} levels deep; at most {} are accepted", what, depth, max_depth);
}

}  // namespace foundry::io
