// Constrained decoding for response_format json_object / json_schema: a JSON document read one
// character at a time against a schema (the subset structured-output schemas use), answering
// whether text can still continue a valid document and whether the document is complete.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace foundry::serve {

class JsonMatcher {
 public:
  /// `schema_json`: a JSON Schema object ("{}" or {"type": "object"} for json_object). Supported:
  /// type (one or a list), properties, required, additionalProperties (false unless given when
  /// properties are), items, minItems, maxItems, enum, const, minLength, maxLength, and the
  /// annotations title, description, default, examples, $schema, strict. Anything else
  /// (anyOf, $ref, pattern, ...) is a ValueError naming it.
  explicit JsonMatcher(const std::string& schema_json);
  JsonMatcher(const JsonMatcher&);
  JsonMatcher& operator=(const JsonMatcher&);
  ~JsonMatcher();

  /// Reads `text`; false (and the matcher unusable) when it cannot continue a valid document.
  bool feed(std::string_view text);
  /// Whether `text` could be read next (the matcher is unchanged).
  bool accepts(std::string_view text) const;
  /// A whole document has been read (only whitespace may follow).
  bool complete() const;

  struct Schema;
  struct Frame;

 private:
  std::shared_ptr<const Schema> root_;
  std::vector<Frame> stack_;
  bool done_ = false;
  int trailing_ws_ = 0;
  bool step(char c);
};

}  // namespace foundry::serve
