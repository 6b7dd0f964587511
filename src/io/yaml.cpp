#include "foundry/io/yaml.h"

#include <yaml.h>

#include <cmath>
#include <limits>
#include <regex>

#include <nlohmann/json.hpp>

#include "foundry/core/error.h"
#include "foundry/io/json_depth.h"

namespace foundry::io {

namespace {

using json = nlohmann::ordered_json;

class EventReader {
 public:
  EventReader(const std::string& text, const std::string& what) : what_(what) {
    yaml_parser_initialize(&parser_);
    yaml_parser_set_input_string(&parser_, reinterpret_cast<const unsigned char*>(text.data()), text.size());
  }
  ~EventReader() {
    if (has_event_) yaml_event_delete(&event_);
    yaml_parser_delete(&parser_);
  }

  const yaml_event_t& next() {
    if (has_event_) yaml_event_delete(&event_);
    has_event_ = false;
    if (!yaml_parser_parse(&parser_, &event_))
      raise<ValueError>("{}: YAML error at line {} column {}: {}", what_, parser_.problem_mark.line + 1,
                        parser_.problem_mark.column + 1, parser_.problem ? parser_.problem : "malformed");
    has_event_ = true;
    return event_;
  }

  // `depth`: the sequences and mappings around this value (each one a level of this recursion).
  json value(const std::string& path, int depth = 0) {
    const yaml_event_t& e = event_;
    const size_t line = e.start_mark.line + 1;
    if (depth > kMaxJsonDepth && (e.type == YAML_SEQUENCE_START_EVENT || e.type == YAML_MAPPING_START_EVENT))
      raise<ValueError>("{}: line {}: sequences and mappings nest deeper than {} levels", what_, line, kMaxJsonDepth);
    switch (e.type) {
      case YAML_ALIAS_EVENT:
        raise<ValueError>("{}: line {}: YAML aliases (*{}) are not supported (at '{}')", what_, line,
                          reinterpret_cast<const char*>(e.data.alias.anchor), path);
      case YAML_SCALAR_EVENT: {
        check_tag(e.data.scalar.tag, path, line);
        std::string s(reinterpret_cast<const char*>(e.data.scalar.value), e.data.scalar.length);
        return e.data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? resolve_plain(s) : json(s);
      }
      case YAML_SEQUENCE_START_EVENT: {
        check_tag(e.data.sequence_start.tag, path, line);
        json out = json::array();
        for (;;) {
          if (next().type == YAML_SEQUENCE_END_EVENT) return out;
          out.push_back(value(path + "[" + std::to_string(out.size()) + "]", depth + 1));
        }
      }
      case YAML_MAPPING_START_EVENT: {
        check_tag(e.data.mapping_start.tag, path, line);
        json out = json::object();
        for (;;) {
          if (next().type == YAML_MAPPING_END_EVENT) return out;
          if (event_.type != YAML_SCALAR_EVENT)
            raise<ValueError>("{}: line {}: only scalar mapping keys are supported (at '{}')", what_,
                              event_.start_mark.line + 1, path);
          const std::string key(reinterpret_cast<const char*>(event_.data.scalar.value), event_.data.scalar.length);
          const std::string sub = path.empty() ? key : path + "." + key;
          next();
          out[key] = value(sub, depth + 1);
        }
      }
      default:
        raise<ValueError>("{}: line {}: unexpected YAML event", what_, line);
    }
  }

 private:
  void check_tag(const yaml_char_t* tag, const std::string& path, size_t line) const {
    if (!tag) return;
    const std::string t(reinterpret_cast<const char*>(tag));
    if (t.rfind("tag:yaml.org,2002:", 0) == 0) return;  // explicit standard tags (!!str, ...)
    raise<ValueError>("{}: line {}: '{}' uses the YAML tag {}, which Foundry cannot run (Python code); "
                      "write it as a field name or a Jinja template",
                      what_, line, path.empty() ? "(document)" : path, t);
  }

  // PyYAML's implicit resolvers for plain scalars (YAML 1.1).
  static json resolve_plain(const std::string& s) {
    static const std::regex null_re("~|null|Null|NULL|");
    static const std::regex bool_true("yes|Yes|YES|true|True|TRUE|on|On|ON");
    static const std::regex bool_false("no|No|NO|false|False|FALSE|off|Off|OFF");
    static const std::regex int_re("[-+]?(0|[1-9][0-9_]*)");
    static const std::regex hex_re("[-+]?0x[0-9a-fA-F_]+");
    static const std::regex float_re(
        "[-+]?([0-9][0-9_]*)?\\.[0-9_]*([eE][-+][0-9]+)?|[-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|NAN)");
    if (std::regex_match(s, null_re)) return nullptr;
    if (std::regex_match(s, bool_true)) return true;
    if (std::regex_match(s, bool_false)) return false;
    std::string digits;
    for (char c : s)
      if (c != '_') digits += c;
    try {
      if (std::regex_match(s, int_re)) return std::stoll(digits);
      if (std::regex_match(s, hex_re)) {
        const bool neg = digits[0] == '-';
        const size_t x = digits.find('x');
        const long long v = std::stoll(digits.substr(x + 1), nullptr, 16);
        return neg ? -v : v;
      }
    } catch (const std::out_of_range&) {
      return s;  // wider than int64: keep the text rather than a wrong number
    }
    if (std::regex_match(s, float_re) && s != "." && s != "+." && s != "-.") {
      if (s.find("nan") != std::string::npos || s.find("NaN") != std::string::npos || s.find("NAN") != std::string::npos)
        return std::numeric_limits<double>::quiet_NaN();
      if (s.find_first_of("iI") != std::string::npos)
        return s[0] == '-' ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
      return std::stod(digits);
    }
    return s;
  }

  yaml_parser_t parser_;
  yaml_event_t event_{};
  bool has_event_ = false;
  std::string what_;
};

}  // namespace

std::string yaml_to_json(const std::string& text, const std::string& what) {
  EventReader r(text, what);
  if (r.next().type != YAML_STREAM_START_EVENT) raise<ValueError>("{}: not a YAML stream", what);
  const yaml_event_t& e = r.next();
  if (e.type == YAML_STREAM_END_EVENT) return "null";
  if (e.type != YAML_DOCUMENT_START_EVENT) raise<ValueError>("{}: not a YAML document", what);
  r.next();
  return r.value("").dump();
}

}  // namespace foundry::io
