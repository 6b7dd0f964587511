// The parsed form of an lm-eval task file (private to src/eval): config keys with the harness's
// defaults, the documents of each split, and doc_to_text / doc_to_target / doc_to_choice resolved
// as lm-eval resolves them (field name, Jinja template, literal).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "foundry/eval/tasks.h"
#include "foundry/text/jinja.h"

namespace foundry::eval {

using ojson = nlohmann::ordered_json;

struct MetricSpec {
  std::string metric, aggregation;
  bool higher_is_better = true;
  ojson options = ojson::object();  ///< ignore_case, regexes_to_ignore, use_stemmer, ...
};

struct FilterStep {
  std::string function;  ///< regex, take_first, lowercase, uppercase, remove_whitespace
  std::string regex_pattern = "#### (\\-?[0-9\\.\\,]+)", fallback = "[invalid]";
  int64_t group_select = 0;
};
struct FilterEnsemble {
  std::string name;
  std::vector<FilterStep> steps;
};

/// doc_to_text / doc_to_target / doc_to_choice: a field name, a Jinja template, or a literal.
struct DocField {
  ojson spec;  ///< null when unset
  std::shared_ptr<const text::JinjaTemplate> tmpl;
  bool set() const { return !spec.is_null(); }
};

struct TaskConfig {
  std::string file, name, alias, output_type = "generate_until";
  ojson raw = ojson::object();  ///< the merged YAML, for results.json's "configs"
  DocField doc_to_text, doc_to_target, doc_to_choice;
  DocField fewshot_text, fewshot_target, fewshot_choice;  ///< fewshot_config overrides (else the above)
  std::shared_ptr<const text::JinjaTemplate> description;
  std::string target_delimiter = " ", fewshot_delimiter = "\n\n", sampler = "default";
  int64_t num_fewshot = 0;
  bool num_fewshot_set = false;
  std::optional<std::string> test_split, validation_split, training_split, fewshot_split;
  std::vector<std::string> until;
  int64_t max_gen_toks = 256;
  std::vector<MetricSpec> metrics;
  std::vector<FilterEnsemble> filters;
  ojson version;  ///< metadata.version, else "Yaml"

  std::vector<ojson> eval_docs, fewshot_docs;

  /// lm-eval's doc_to_text / doc_to_target / doc_to_choice for one document. `fewshot` uses the
  /// fewshot_config overrides. Text and target may be an int (an index into the choices).
  ojson text(const ojson& doc, bool fewshot = false) const;
  ojson target(const ojson& doc, bool fewshot = false) const;
  std::vector<std::string> choices(const ojson& doc, bool fewshot = false) const;
  std::string render_description(const ojson& doc) const;
};

/// Python's ast.literal_eval for the literals templates render (lists, tuples, dicts, strings,
/// numbers, True/False/None); nullopt when the text is not one.
std::optional<ojson> python_literal(const std::string& text);
/// str() of a value as Python prints it (strings bare, lists as repr).
std::string python_str(const ojson& v);

}  // namespace foundry::eval
