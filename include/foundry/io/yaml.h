// YAML documents (lm-evaluation-harness task files) read into JSON with PyYAML's scalar rules, so
// a task file means what it means to the harness.
#pragma once

#include <string>

namespace foundry::io {

/// The first document of `text` as JSON text (mapping key order kept). Plain scalars resolve as
/// PyYAML's YAML 1.1 resolver does (null/~, true/false/yes/no/on/off, ints, floats, .inf, .nan);
/// quoted scalars are strings. A tag such as !function is refused naming its key path; `what`
/// names the file in errors.
std::string yaml_to_json(const std::string& text, const std::string& what);

}  // namespace foundry::io
