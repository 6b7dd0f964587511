// Constrained decoding's JSON matcher: documents of the schema are accepted, others are cut at the
// first character that cannot continue one, and a random walk over allowed characters never dead-ends.
#include <gtest/gtest.h>

#include <random>

#include "foundry/core/error.h"
#include "foundry/io/json_depth.h"
#include "foundry/serve/json_schema.h"

using foundry::serve::JsonMatcher;

namespace {
const char* kSchema = R"({"type": "object",
  "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}, "ok": {"type": "boolean"},
                 "score": {"type": "number"},
                 "tags": {"type": "array", "items": {"enum": ["red", "green", 3]}, "maxItems": 3},
                 "pet": {"type": ["object", "null"], "properties": {"kind": {"const": "cat"}}, "required": ["kind"]}},
  "required": ["name", "age", "ok", "tags", "pet"]})";

bool whole(const std::string& schema, const std::string& doc) {
  JsonMatcher m(schema);
  return m.feed(doc) && m.complete();
}
}  // namespace

TEST(JsonSchema, AcceptsDocumentsOfTheSchema) {
  EXPECT_TRUE(whole(kSchema, R"({"name": "Ann", "age": 31, "ok": true, "tags": ["red", 3], "pet": null})"));
  EXPECT_TRUE(whole(kSchema, R"({"pet":{"kind":"cat"},"tags":[],"ok":false,"age":-7,"name":"","score":1.5e3})"));
  EXPECT_TRUE(whole(R"({"type": "object"})", R"({"a": [1, {"b": null}], "c": "x\"y\u00e9"})"));
  EXPECT_TRUE(whole("{}", "12.5"));
  EXPECT_TRUE(whole(R"({"enum": [1, 12]})", "12"));
}

TEST(JsonSchema, RejectsAtTheFirstImpossibleCharacter) {
  JsonMatcher m(kSchema);
  EXPECT_TRUE(m.feed(R"({"name": "Ann", "a)"));  // "age" may still come
  EXPECT_FALSE(m.accepts("x"));                  // no property begins "ax"
  EXPECT_FALSE(whole(kSchema, R"({"name": "Annabelle9", "age": 1, "ok": true, "tags": [], "pet": null})"));  // maxLength
  EXPECT_FALSE(whole(kSchema, R"({"name": "A", "age": 1.5, "ok": true, "tags": [], "pet": null})"));        // integer
  EXPECT_FALSE(whole(kSchema, R"({"name": "A", "age": 1, "ok": true, "tags": ["blue"], "pet": null})"));     // enum
  EXPECT_FALSE(whole(kSchema, R"({"name": "A", "age": 1, "ok": true, "tags": [], "pet": null, "age": 2})"));  // twice
  EXPECT_FALSE(whole(kSchema, R"({"name": "A", "age": 1, "ok": true, "tags": []})"));                           // required
  EXPECT_FALSE(whole(kSchema, R"({"name": "A", "age": 1, "ok": true, "tags": ["red","red","red","red"], "pet": null})"));
  JsonMatcher ws(R"({"type": "object"})");
  EXPECT_FALSE(ws.feed("    {"));  // whitespace is bounded
  EXPECT_THROW(JsonMatcher(R"({"anyOf": []})"), foundry::ValueError);
  EXPECT_THROW(JsonMatcher(R"({"type": "float"})"), foundry::ValueError);
}

TEST(JsonSchema, ARandomWalkOverAllowedCharactersAlwaysFinishes) {
  std::mt19937 rng(5);
  std::string alphabet;
  for (int c = 32; c < 127; ++c) alphabet += char(c);
  alphabet += '\n';
  for (int walk = 0; walk < 300; ++walk) {
    JsonMatcher m(kSchema);
    std::string doc;
    for (int steps = 0; !m.complete(); ++steps) {
      ASSERT_LT(steps, 2000) << doc;
      std::string allowed;
      for (char c : alphabet)
        if (m.accepts(std::string(1, c))) allowed += c;
      ASSERT_FALSE(allowed.empty()) << "dead end after: [" << doc << "] " << doc.size() << " walk " << walk;
      // Prefer closing characters now and then so that walks end.
      char c = allowed[rng() % allowed.size()];
      for (char pref : std::string("\"]},"))
        if (allowed.find(pref) != std::string::npos && rng() % 3 == 0) c = pref;
      ASSERT_TRUE(m.feed(std::string(1, c)));
      doc += c;
    }
  }
}

// JSON from outside is measured before it is parsed (foundry/io/json_depth.h): brackets inside
// strings, escaped quotes included, do not count.
TEST(JsonDepth, CountsArraysAndObjectsNotStrings) {
  using foundry::io::json_depth;
  EXPECT_EQ(json_depth("12"), 0);
  EXPECT_EQ(json_depth(R"({"a": [1, {"b": []}]})"), 4);
  EXPECT_EQ(json_depth(R"(["[[[", "\"[[", "\\", {"k": "]]]"}])"), 2);
  EXPECT_EQ(json_depth("[[[["), 4);  // malformed: measured as far as it goes
  EXPECT_EQ(json_depth("]]]"), 0);
  const std::string deep = std::string(129, '[') + std::string(129, ']');
  EXPECT_NO_THROW(foundry::io::check_json_depth(deep.substr(1, 256), "x"));
  try {
    foundry::io::check_json_depth(deep, "request");
    FAIL() << "129 levels accepted";
  } catch (const foundry::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("request: JSON nested 129 levels deep; at most 128"), std::string::npos)
        << e.what();
  }
}

// A schema's nesting is bounded before parse_schema (which recurses once per level) reads it: 100 000
// levels overflowed the stack; a bad field is a ValueError, not the JSON library's type error.
TEST(JsonSchema, DeepOrMalformedSchemasAreValueErrors) {
  std::string deep;
  for (int i = 0; i < 100000; ++i) deep += R"({"items": )";
  deep += "{}" + std::string(100000, '}');
  EXPECT_THROW(JsonMatcher{deep}, foundry::ValueError);
  EXPECT_THROW(JsonMatcher(R"({"type": "object", "properties": {"a": {}}, "required": [1]})"), foundry::ValueError);
  std::string ok;
  for (int i = 0; i < 60; ++i) ok += R"({"items": )";
  ok += "{}" + std::string(60, '}');
  EXPECT_TRUE(whole(ok, std::string(60, '[') + std::string(60, ']')));
}
