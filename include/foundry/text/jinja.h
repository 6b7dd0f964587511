// A Jinja interpreter for the subset that Hugging Face chat templates and lm-evaluation-harness task
// templates are written in. One implementation serves both (models::ChatTemplate configures it as
// transformers' environment, eval tasks as lm-eval's).
//
// Supported: {{ }}, {% if/elif/else %}, {% for x in ... [if ...] %} with loop.* and else, {% set %}
// (names and namespace attributes), {% generation %} (rendered through), comments, whitespace
// control (-, +), literals, lists, dicts, attribute / item / slice access, the operators of
// expressions (arithmetic, ~, comparisons, in, and/or/not, a if c else b), tests (defined, none,
// string, ...), the common filters (trim, length, tojson, join, default, upper, lower, items,
// regex_replace, ...) and string / dict methods (strip, split, startswith, items, get, ...), the
// globals raise_exception, namespace, range and strftime_now. Anything else is a ValueError naming
// it, never silently wrong text.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace foundry::text {

struct JinjaOptions {
  bool trim_blocks = false;            ///< drop the first newline after a block tag
  bool lstrip_blocks = false;          ///< strip spaces and tabs before a block tag at a line's start
  bool keep_trailing_newline = false;  ///< jinja2 drops one newline at the end of the source by default
  bool strict_undefined = false;       ///< StrictUndefined: using an undefined name is an error
  std::string what = "template";       ///< names the template in error messages
};

class JinjaTemplate {
 public:
  /// Parses the template; ValueError naming the problem on a syntax error.
  explicit JinjaTemplate(const std::string& source, JinjaOptions options = {});
  ~JinjaTemplate();
  JinjaTemplate(JinjaTemplate&&) noexcept;
  JinjaTemplate& operator=(JinjaTemplate&&) noexcept;

  /// Renders with the variables of `context_json` (a JSON object).
  std::string render(const std::string& context_json) const;

  struct Node;

 private:
  std::shared_ptr<const Node> root_;
  JinjaOptions options_;
};

/// Python's str() and repr() of a JSON value (strings bare / quoted as Python quotes them,
/// True/False/None, floats as Python prints them, lists and dicts as their repr).
std::string py_str(const nlohmann::ordered_json& v);
std::string py_repr(const nlohmann::ordered_json& v);

}  // namespace foundry::text
