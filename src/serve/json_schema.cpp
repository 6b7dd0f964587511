#include "foundry/serve/json_schema.h"

#include <algorithm>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "foundry/core/error.h"
#include "foundry/io/json_depth.h"

namespace foundry::serve {

using json = nlohmann::json;

namespace {
enum Type : unsigned { kObject = 1, kArray = 2, kString = 4, kNumber = 8, kInteger = 16, kBoolean = 32, kNull = 64, kAny = 127 };
constexpr int kMaxWhitespace = 2;   // consecutive whitespace between tokens (a model can't pad forever)
constexpr size_t kMaxNumber = 24;   // characters of one number
}  // namespace

struct JsonMatcher::Schema {
  unsigned types = kAny;
  std::map<std::string, std::shared_ptr<Schema>> properties;
  std::set<std::string> required;
  std::shared_ptr<Schema> additional;  // schema of other keys; null: none allowed
  std::shared_ptr<Schema> items;
  int64_t min_items = 0, max_items = -1, min_length = 0, max_length = -1;
  std::vector<std::string> choices;  // enum / const as compact JSON texts
};

namespace {

using Schema = JsonMatcher::Schema;

std::shared_ptr<Schema> any_schema() {
  static const std::shared_ptr<Schema> s = [] {
    auto a = std::make_shared<Schema>();
    a->items = a;       // any value holds any values (a deliberate cycle in a static)
    a->additional = a;
    return a;
  }();
  return s;
}

std::shared_ptr<Schema> parse_schema(const json& j, const std::string& where) {
  if (j.is_boolean() && j.get<bool>()) return any_schema();
  if (!j.is_object()) raise<ValueError>("json_schema: {} must be a schema object", where);
  auto s = std::make_shared<Schema>();
  static const std::set<std::string> annotations = {"title", "description", "default", "examples", "$schema", "strict",
                                                    "$id", "$comment", "format"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = *it;
    if (annotations.count(k)) continue;
    if (k == "type") {
      s->types = 0;
      for (const json& t : v.is_array() ? v : json::array({v})) {
        static const std::map<std::string, unsigned> names = {{"object", kObject}, {"array", kArray}, {"string", kString},
                                                              {"number", kNumber | kInteger}, {"integer", kInteger},
                                                              {"boolean", kBoolean}, {"null", kNull}};
        auto f = t.is_string() ? names.find(t.get<std::string>()) : names.end();
        if (f == names.end()) raise<ValueError>("json_schema: {}.type '{}' is not a JSON type", where, t.dump());
        s->types |= f->second;
      }
    } else if (k == "properties") {
      if (!v.is_object()) raise<ValueError>("json_schema: {}.properties must be an object", where);
      for (auto p = v.begin(); p != v.end(); ++p) s->properties[p.key()] = parse_schema(*p, where + ".properties." + p.key());
    } else if (k == "required") {
      if (!v.is_array()) raise<ValueError>("json_schema: {}.required must be a list", where);
      for (const json& r : v) {
        if (!r.is_string()) raise<ValueError>("json_schema: {}.required must list property names", where);
        s->required.insert(r.get<std::string>());
      }
    } else if (k == "additionalProperties") {
      if (!v.is_boolean() || v.get<bool>()) s->additional = v.is_boolean() ? any_schema() : parse_schema(v, where + ".additionalProperties");
    } else if (k == "items") {
      s->items = parse_schema(v, where + ".items");
    } else if (k == "minItems" || k == "maxItems" || k == "minLength" || k == "maxLength") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0) raise<ValueError>("json_schema: {}.{} must be a count", where, k);
      (k == "minItems" ? s->min_items : k == "maxItems" ? s->max_items : k == "minLength" ? s->min_length : s->max_length) =
          v.get<int64_t>();
    } else if (k == "enum" || k == "const") {
      for (const json& c : k == "enum" ? v : json::array({v})) s->choices.push_back(c.dump());
      if (s->choices.empty()) raise<ValueError>("json_schema: {}.enum is empty", where);
    } else {
      raise<ValueError>("json_schema: '{}' (at {}) is not supported by Foundry's constrained decoding", k, where);
    }
  }
  if (!j.contains("additionalProperties") && s->properties.empty()) s->additional = any_schema();
  if (!s->properties.empty() && !j.contains("type")) s->types = kObject;
  for (const std::string& r : s->required)
    if (!s->properties.count(r) && !s->additional)
      raise<ValueError>("json_schema: {} requires '{}', which its properties lack", where, r);
  if (!s->items) s->items = any_schema();
  // Bounds no value meets: refused here, as the request's error, not found token by token later.
  if (s->max_length >= 0 && s->min_length > s->max_length)
    raise<ValueError>("json_schema: {} has minLength {} above maxLength {}", where, s->min_length, s->max_length);
  if (s->max_items >= 0 && s->min_items > s->max_items)
    raise<ValueError>("json_schema: {} has minItems {} above maxItems {}", where, s->min_items, s->max_items);
  return s;
}

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

// Whether `s` can begin a JSON number (complete = it is one).
bool number_prefix(const std::string& s, bool integer, bool* complete) {
  size_t i = 0;
  *complete = false;
  if (i < s.size() && s[i] == '-') ++i;
  if (i == s.size()) return true;
  if (s[i] == '0') ++i;
  else if (s[i] >= '1' && s[i] <= '9') while (i < s.size() && std::isdigit((unsigned char)s[i])) ++i;
  else return false;
  if (i == s.size()) return *complete = true, true;
  if (s[i] == '.') {
    if (integer) return false;
    ++i;
    size_t d = i;
    while (i < s.size() && std::isdigit((unsigned char)s[i])) ++i;
    if (i == s.size()) return *complete = i > d, true;
    if (i == d) return false;
  }
  if (s[i] == 'e' || s[i] == 'E') {
    if (integer) return false;
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t d = i;
    while (i < s.size() && std::isdigit((unsigned char)s[i])) ++i;
    if (i == s.size()) return *complete = i > d, true;
  }
  return false;
}

}  // namespace

struct JsonMatcher::Frame {
  enum Kind { Value, Object, Array, String, Number, Literal, Choice } kind = Value;
  enum State { KeyOrEnd, Key, Colon, CommaOrEnd, ValueOrEnd, Item } state = KeyOrEnd;
  const Schema* schema = nullptr;
  std::string buf;                     // string / key so far, number / literal / choice text
  bool key = false, escape = false;
  int hex = 0, ws = 0;
  int64_t count = 0;                   // array items, string length (code points)
  std::set<std::string> seen;          // object keys
  const Schema* value_schema = nullptr;
};

JsonMatcher::JsonMatcher(const std::string& schema_json) {
  io::check_json_depth(schema_json, "json_schema: the schema");  // parse_schema recurses once per level
  const json j = json::parse(schema_json, nullptr, false);
  if (j.is_discarded()) raise<ValueError>("json_schema: the schema is not valid JSON");
  root_ = parse_schema(j, "schema");
  Frame f;
  f.schema = root_.get();
  stack_.push_back(f);
}

JsonMatcher::JsonMatcher(const JsonMatcher&) = default;
JsonMatcher& JsonMatcher::operator=(const JsonMatcher&) = default;
JsonMatcher::~JsonMatcher() = default;

bool JsonMatcher::feed(std::string_view text) {
  for (char c : text)
    if (!step(c)) return false;
  return true;
}

bool JsonMatcher::accepts(std::string_view text) const {
  JsonMatcher copy(*this);
  return copy.feed(text);
}

bool JsonMatcher::complete() const {
  if (done_) return true;
  if (stack_.size() != 1) return false;
  const Frame& f = stack_.back();
  bool whole = false;
  if (f.kind == Frame::Number) number_prefix(f.buf, !(f.schema->types & kNumber), &whole);
  if (f.kind == Frame::Choice) whole = std::count(f.schema->choices.begin(), f.schema->choices.end(), f.buf) > 0;
  return whole;
}

bool JsonMatcher::step(char c) {
  if (done_) return is_ws(c) && ++trailing_ws_ <= kMaxWhitespace;
  Frame& f = stack_.back();
  const Schema& s = *f.schema;
  // A finished value: pop it and tell the parent; true if the document ended.
  auto value_done = [&] {
    stack_.pop_back();
    if (stack_.empty()) return done_ = true;
    Frame& p = stack_.back();
    if (p.kind == Frame::Array) p.state = Frame::CommaOrEnd;
    return false;
  };
  auto whitespace = [&](Frame& fr) { return is_ws(c) && ++fr.ws <= kMaxWhitespace; };
  switch (f.kind) {
    case Frame::Value: {
      if (is_ws(c)) return whitespace(f);
      f.ws = 0;
      if (!s.choices.empty()) {
        f.kind = Frame::Choice;
        return step(c);
      }
      if (c == '{' && (s.types & kObject)) return f.kind = Frame::Object, f.state = Frame::KeyOrEnd, true;
      if (c == '[' && (s.types & kArray)) return f.kind = Frame::Array, f.state = Frame::ValueOrEnd, true;
      if (c == '"' && (s.types & kString)) return f.kind = Frame::String, true;
      if ((c == '-' || std::isdigit((unsigned char)c)) && (s.types & (kNumber | kInteger))) {
        f.kind = Frame::Number;
        return step(c);
      }
      if ((c == 't' || c == 'f') && (s.types & kBoolean)) return f.kind = Frame::Literal, f.buf = c == 't' ? "rue" : "alse", true;
      if (c == 'n' && (s.types & kNull)) return f.kind = Frame::Literal, f.buf = "ull", true;
      return false;
    }
    case Frame::Literal:
      if (f.buf.empty() || f.buf[0] != c) return false;
      f.buf.erase(0, 1);
      if (f.buf.empty()) value_done();
      return true;
    case Frame::Choice: {
      // The value's text must be one of the enum's; a string, object or array choice ends itself,
      // a number or literal ends at the next character that cannot extend a choice.
      const std::string next = f.buf + c;
      const bool extends = std::any_of(s.choices.begin(), s.choices.end(),
                                       [&](const std::string& ch) { return ch.compare(0, next.size(), next) == 0; });
      if (extends) {
        f.buf = next;
        const char last = next.back();
        if (std::count(s.choices.begin(), s.choices.end(), next) && (last == '"' || last == '}' || last == ']')) value_done();
        return true;
      }
      if (!std::count(s.choices.begin(), s.choices.end(), f.buf)) return false;
      if (value_done()) return is_ws(c) && ++trailing_ws_ <= kMaxWhitespace;
      return step(c);
    }
    case Frame::Number: {
      bool whole = false;
      const bool integer = !(s.types & kNumber);
      if (f.buf.size() < kMaxNumber && number_prefix(f.buf + c, integer, &whole)) return f.buf += c, true;
      number_prefix(f.buf, integer, &whole);
      if (!whole) return false;
      if (value_done()) return is_ws(c) && ++trailing_ws_ <= kMaxWhitespace;
      return step(c);
    }
    case Frame::String: {
      if (f.hex > 0) {
        if (!std::isxdigit((unsigned char)c)) return false;
        if (--f.hex == 0) ++f.count;
        f.buf += c;
        return true;
      }
      if (f.escape) {
        f.escape = false;
        if (c == 'u') return f.key ? false : (f.hex = 4, f.buf += "\\u", true);
        static const std::string simple = "\"\\/bfnrt";
        if (simple.find(c) == std::string::npos) return false;
        f.buf += '\\', f.buf += c;
        ++f.count;
      } else if (c == '\\') {
        // A key that must be one of the properties is written plainly (an escape could only dead-end).
        if (f.key && !stack_[stack_.size() - 2].schema->additional) return false;
        f.escape = true;
        if (s.max_length >= 0 && f.count + 1 > s.max_length) return false;
        return true;
      } else if (c == '"') {
        if (f.key) {
          Frame& obj = stack_[stack_.size() - 2];
          const Schema& os = *obj.schema;
          if (obj.seen.count(f.buf)) return false;
          auto p = os.properties.find(f.buf);
          if (p == os.properties.end() && !os.additional) return false;
          obj.value_schema = p != os.properties.end() ? p->second.get() : os.additional.get();
          obj.seen.insert(f.buf);
          obj.state = Frame::Colon;
          stack_.pop_back();
          return true;
        }
        if (f.count < s.min_length) return false;
        value_done();
        return true;
      } else if (static_cast<unsigned char>(c) < 0x20) {
        return false;
      } else {
        f.buf += c;
        if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++f.count;
      }
      if (f.key) {  // the key so far must begin an allowed, unseen property
        const Frame& obj = stack_[stack_.size() - 2];
        if (!obj.schema->additional) {
          bool ok = false;
          for (const auto& [name, sub] : obj.schema->properties)
            ok = ok || (!obj.seen.count(name) && name.compare(0, f.buf.size(), f.buf) == 0);
          if (!ok) return false;
        }
      } else if (s.max_length >= 0 && f.count > s.max_length) {
        return false;
      }
      return true;
    }
    case Frame::Object: {
      if (is_ws(c)) return whitespace(f);
      f.ws = 0;
      auto can_end = [&] {
        return std::all_of(s.required.begin(), s.required.end(), [&](const std::string& r) { return f.seen.count(r) > 0; });
      };
      auto more_keys = [&] {
        if (s.additional) return true;
        for (const auto& [name, sub] : s.properties)
          if (!f.seen.count(name)) return true;
        return false;
      };
      if ((f.state == Frame::KeyOrEnd || f.state == Frame::CommaOrEnd) && c == '}') return can_end() ? (value_done(), true) : false;
      if ((f.state == Frame::KeyOrEnd || f.state == Frame::Key) && c == '"') {
        if (!more_keys()) return false;
        Frame k;
        k.kind = Frame::String;
        k.key = true;
        k.schema = any_schema().get();
        stack_.push_back(k);
        return true;
      }
      if (f.state == Frame::Colon && c == ':') {
        f.state = Frame::CommaOrEnd;
        Frame v;
        v.schema = f.value_schema;
        stack_.push_back(v);
        return true;
      }
      if (f.state == Frame::CommaOrEnd && c == ',') return more_keys() ? (f.state = Frame::Key, true) : false;
      return false;
    }
    case Frame::Array: {
      if (is_ws(c)) return whitespace(f);
      f.ws = 0;
      if ((f.state == Frame::ValueOrEnd || f.state == Frame::CommaOrEnd) && c == ']')
        return f.count >= s.min_items ? (value_done(), true) : false;
      if (f.state == Frame::CommaOrEnd && c == ',')
        return s.max_items < 0 || f.count < s.max_items ? (f.state = Frame::Item, true) : false;
      if (f.state == Frame::ValueOrEnd || f.state == Frame::Item) {
        if (s.max_items >= 0 && f.count >= s.max_items) return false;
        ++f.count;
        f.state = Frame::CommaOrEnd;
        Frame v;
        v.schema = s.items.get();
        stack_.push_back(v);
        return step(c);
      }
      return false;
    }
  }
  return false;
}

}  // namespace foundry::serve
