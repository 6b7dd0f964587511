// Reading an lm-eval task file: YAML with `include`, the keys lm-eval's TaskConfig knows (others
// refused by name), local data files, and the resolution of doc_to_text / doc_to_target /
// doc_to_choice (a field name, a Jinja template rendered with the document, or a literal).
#include <algorithm>
#include <cstring>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "eval/task_config.h"
#include "foundry/core/error.h"
#include "foundry/io/atomic_file.h"
#include "foundry/io/yaml.h"
#include "foundry/text/pyre.h"
#include "foundry/io/json_depth.h"

namespace foundry::eval {

namespace fs = std::filesystem;

namespace {

// Keys of lm-eval's TaskConfig that Foundry runs, and those it accepts but that change nothing here.
const std::set<std::string> kKnownKeys = {
    "task", "task_alias", "tag", "group", "dataset_path", "dataset_name", "dataset_kwargs", "training_split",
    "validation_split", "test_split", "fewshot_split", "output_type", "doc_to_text", "doc_to_target", "doc_to_choice",
    "description", "target_delimiter", "fewshot_delimiter", "fewshot_config", "num_fewshot", "metric_list",
    "generation_kwargs", "filter_list", "repeats", "metadata", "should_decontaminate", "doc_to_decontamination_query",
    "unsafe_code", "include"};
// Keys whose Python code or multimodal inputs Foundry cannot run: refused with a reason.
const std::map<std::string, std::string> kRefusedKeys = {
    {"process_docs", "it runs Python code; preprocess the data file or use Jinja templates (regex_replace, ...)"},
    {"process_results", "it runs Python code; use metric_list and filter_list"},
    {"use_prompt", "promptsource prompts are not available; write doc_to_text / doc_to_target"},
    {"gen_prefix", "not supported"},
    {"doc_to_image", "multimodal tasks are not supported"},
    {"doc_to_audio", "multimodal tasks are not supported"},
    {"fewshot_as_multiturn", "chat-formatted few-shot contexts are not supported"}};

[[noreturn]] void bad(const std::string& file, const std::string& key, const std::string& what) {
  raise<ValueError>("task file {}: '{}': {}", file, key, what);
}


ojson read_yaml(const std::string& path, int depth) {
  if (depth > 8) raise<ValueError>("task file {}: 'include' nests deeper than 8 files (a cycle?)", path);
  ojson j = ojson::parse(io::yaml_to_json(io::read_file(path), "task file " + path));
  if (!j.is_object()) raise<ValueError>("task file {}: must be a YAML mapping of task keys", path);
  if (!j.contains("include")) return j;
  if (!j["include"].is_string()) bad(path, "include", "must be a file name");
  fs::path base = fs::path(j["include"].get<std::string>());
  if (base.is_relative()) base = fs::path(path).parent_path() / base;
  if (!fs::exists(base)) bad(path, "include", "no such file '" + base.string() + "'");
  ojson merged = read_yaml(base.string(), depth + 1);
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "include") merged[it.key()] = *it;
  return merged;
}

// ---- data files ---------------------------------------------------------------------------------

std::vector<std::string> csv_record(std::istream& in, char sep, bool& ok) {
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false, any = false;
  ok = false;
  for (int c; (c = in.get()) != EOF;) {
    any = true;
    if (quoted) {
      if (c == '"') {
        if (in.peek() == '"') field += char(in.get());
        else quoted = false;
      } else {
        field += char(c);
      }
    } else if (c == '"' && field.empty()) {
      quoted = true;
    } else if (c == sep) {
      fields.push_back(std::move(field));
      field.clear();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && in.peek() == '\n') in.get();
      fields.push_back(std::move(field));
      ok = true;
      return fields;
    } else {
      field += char(c);
    }
  }
  if (any) fields.push_back(std::move(field)), ok = true;
  return fields;
}

// pandas' type inference, as datasets' csv loader applies it: a column of integers is int64, of
// numbers float64, else strings.
void infer_column_types(std::vector<ojson>& rows, const std::vector<std::string>& header) {
  for (const std::string& col : header) {
    bool all_int = true, all_num = true;
    for (const ojson& r : rows) {
      const std::string& v = r[col].get_ref<const std::string&>();
      if (v.empty()) {
        all_int = all_num = false;
        break;
      }
      size_t used = 0;
      try {
        (void)std::stoll(v, &used);
        if (used != v.size()) all_int = false;
      } catch (...) {
        all_int = false;
      }
      try {
        (void)std::stod(v, &used);
        if (used != v.size()) all_num = false;
      } catch (...) {
        all_num = false;
      }
    }
    if (rows.empty() || !(all_int || all_num)) continue;
    for (ojson& r : rows) {
      const std::string v = r[col].get<std::string>();
      r[col] = all_int ? ojson(std::stoll(v)) : ojson(std::stod(v));
    }
  }
}

std::vector<ojson> load_rows(const std::string& path, const std::string& where) {
  if (!fs::is_regular_file(path)) raise<IOError>("{}: no such data file '{}'", where, path);
  const std::string ext = fs::path(path).extension().string();
  std::vector<ojson> rows;
  if (ext == ".csv" || ext == ".tsv") {
    std::ifstream in(path, std::ios::binary);
    bool ok;
    const char sep = ext == ".csv" ? ',' : '\t';
    std::vector<std::string> header = csv_record(in, sep, ok);
    if (!ok || header.empty()) raise<ValueError>("{}: '{}' has no header row", where, path);
    for (size_t line = 2;; ++line) {
      std::vector<std::string> rec = csv_record(in, sep, ok);
      if (!ok) break;
      if (rec.size() == 1 && rec[0].empty()) continue;
      if (rec.size() != header.size())
        raise<ValueError>("{}: '{}' record {} has {} fields but the header has {}", where, path, line, rec.size(),
                          header.size());
      ojson row = ojson::object();
      for (size_t i = 0; i < header.size(); ++i) row[header[i]] = rec[i];
      rows.push_back(std::move(row));
    }
    infer_column_types(rows, header);
    return rows;
  }
  const std::string text = io::read_file(path);
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (ext == ".json" && first != std::string::npos && text[first] == '[') {
    io::check_json_depth(text, where + ": '" + path + "'");
    ojson all = ojson::parse(text, nullptr, false);
    if (all.is_discarded() || !all.is_array()) raise<ValueError>("{}: '{}' is not valid JSON", where, path);
    for (ojson& r : all) {
      if (!r.is_object()) raise<ValueError>("{}: '{}' holds a non-object item", where, path);
      rows.push_back(std::move(r));
    }
    return rows;
  }
  if (ext != ".jsonl" && ext != ".json")
    raise<ValueError>("{}: '{}': data files are .jsonl, .json or .csv/.tsv", where, path);
  std::istringstream in(text);
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    io::check_json_depth(line, where + ": '" + path + "' line " + std::to_string(n));
    ojson r = ojson::parse(line, nullptr, false);
    if (r.is_discarded() || !r.is_object()) raise<ValueError>("{}: '{}' line {} is not a JSON object", where, path, n);
    rows.push_back(std::move(r));
  }
  return rows;
}

// ---- Python literals -----------------------------------------------------------------------------

class LiteralParser {
 public:
  explicit LiteralParser(const std::string& s) : s_(s) {}
  std::optional<ojson> parse() {
    try {
      ojson v = value();
      skip();
      if (i_ != s_.size()) return std::nullopt;
      return v;
    } catch (const std::invalid_argument&) {
      return std::nullopt;
    }
  }

 private:
  [[noreturn]] static void fail() { throw std::invalid_argument("not a literal"); }
  void skip() {
    while (i_ < s_.size() && std::isspace((unsigned char)s_[i_])) ++i_;
  }
  bool eat(char c) {
    skip();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  ojson value() {
    skip();
    if (i_ >= s_.size()) fail();
    const char c = s_[i_];
    if (c == '[' || c == '(') return sequence(c == '[' ? ']' : ')');
    if (c == '{') return mapping();
    if (c == '\'' || c == '"') return string();
    for (const auto& [word, v] : {std::pair<const char*, ojson>{"True", true}, {"False", false}, {"None", nullptr}})
      if (s_.compare(i_, std::strlen(word), word) == 0) return i_ += std::strlen(word), v;
    return number();
  }
  ojson sequence(char close) {
    ++i_;
    ojson out = ojson::array();
    while (!eat(close)) {
      out.push_back(value());
      if (!eat(',')) {
        if (!eat(close)) fail();
        break;
      }
    }
    return out;
  }
  ojson mapping() {
    ++i_;
    ojson out = ojson::object();
    while (!eat('}')) {
      ojson k = value();
      if (!eat(':')) fail();
      out[text::py_str(k)] = value();
      if (!eat(',')) {
        if (!eat('}')) fail();
        break;
      }
    }
    return out;
  }
  ojson string() {
    const char q = s_[i_++];
    std::string out;
    while (i_ < s_.size() && s_[i_] != q) {
      char c = s_[i_++];
      if (c == '\\' && i_ < s_.size()) {
        c = s_[i_++];
        switch (c) {
          case 'n': out += '\n'; break;
          case 't': out += '\t'; break;
          case 'r': out += '\r'; break;
          case 'x': {
            if (i_ + 2 > s_.size()) fail();
            const unsigned v = unsigned(std::stoul(s_.substr(i_, 2), nullptr, 16));
            i_ += 2;
            out += char(v);  // \xNN below 0x80 as Python's repr writes control characters
            break;
          }
          default: out += c;
        }
      } else {
        out += c;
      }
    }
    if (i_ >= s_.size()) fail();
    ++i_;
    return out;
  }
  ojson number() {
    const size_t start = i_;
    if (s_[i_] == '-' || s_[i_] == '+') ++i_;
    bool flt = false;
    while (i_ < s_.size() && (std::isdigit((unsigned char)s_[i_]) || s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E' ||
                              ((s_[i_] == '-' || s_[i_] == '+') && (s_[i_ - 1] == 'e' || s_[i_ - 1] == 'E')))) {
      flt |= !std::isdigit((unsigned char)s_[i_]);
      ++i_;
    }
    const std::string t = s_.substr(start, i_ - start);
    if (t.empty() || t == "-" || t == "+") fail();
    size_t used = 0;
    if (!flt) {
      const long long v = std::stoll(t, &used);
      if (used != t.size()) fail();
      return v;
    }
    const double d = std::stod(t, &used);
    if (used != t.size()) fail();
    return d;
  }
  const std::string& s_;
  size_t i_ = 0;
};

bool is_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit((unsigned char)c); });
}

}  // namespace

std::optional<ojson> python_literal(const std::string& text) { return LiteralParser(text).parse(); }
std::string python_str(const ojson& v) { return text::py_str(v); }

// ---- field resolution --------------------------------------------------------------------------

namespace {

enum class FieldKind { Text, Target, Choice };

ojson resolve(const DocField& f, const ojson& doc, FieldKind kind, bool has_choices, const std::string& file,
              const char* key) {
  const ojson& spec = f.spec;
  if (spec.is_number_integer() || spec.is_array()) return spec;
  if (spec.is_object()) {
    if (kind != FieldKind::Choice) bad(file, key, "a mapping is only meaningful for doc_to_choice");
    ojson values = ojson::array();
    for (const auto& v : spec) values.push_back(v);
    return values;
  }
  if (!spec.is_string()) bad(file, key, "must be a field name, a Jinja template, an integer or a list");
  const std::string& s = spec.get_ref<const std::string&>();
  if (doc.is_object() && doc.contains(s)) return doc[s];
  std::string rendered;
  try {
    rendered = f.tmpl->render(doc.dump(-1, ' ', false, ojson::error_handler_t::replace));
  } catch (const ValueError& e) {
    bad(file, key, e.what());
  }
  if (kind == FieldKind::Choice) {
    auto lit = python_literal(rendered);
    if (!lit || !(lit->is_array() || lit->is_object()))
      bad(file, key, "the template must render a Python list, got '" + rendered.substr(0, 200) + "'");
    if (lit->is_object()) {
      ojson values = ojson::array();
      for (const auto& v : *lit) values.push_back(v);
      return values;
    }
    return *lit;
  }
  if (has_choices && is_digits(rendered)) return std::stoll(rendered);
  if (kind == FieldKind::Target && rendered.size() >= 2 && rendered.front() == '[' && rendered.back() == ']')
    if (auto lit = python_literal(rendered); lit && lit->is_array()) return *lit;
  return rendered;
}

}  // namespace

ojson TaskConfig::text(const ojson& doc, bool fewshot) const {
  const DocField& f = fewshot && fewshot_text.set() ? fewshot_text : doc_to_text;
  if (!f.set()) bad(file, "doc_to_text", "is required");
  return resolve(f, doc, FieldKind::Text, doc_to_choice.set(), file, "doc_to_text");
}

ojson TaskConfig::target(const ojson& doc, bool fewshot) const {
  const DocField& f = fewshot && fewshot_target.set() ? fewshot_target : doc_to_target;
  if (!f.set()) bad(file, "doc_to_target", "is required");
  return resolve(f, doc, FieldKind::Target, doc_to_choice.set(), file, "doc_to_target");
}

std::vector<std::string> TaskConfig::choices(const ojson& doc, bool fewshot) const {
  const DocField& f = fewshot && fewshot_choice.set() ? fewshot_choice : doc_to_choice;
  if (!f.set()) bad(file, "doc_to_choice", "is required for this task");
  const ojson v = resolve(f, doc, FieldKind::Choice, true, file, "doc_to_choice");
  if (!v.is_array()) bad(file, "doc_to_choice", "must give a list of choices, got " + python_str(v));
  std::vector<std::string> out;
  for (const ojson& c : v) out.push_back(python_str(c));
  return out;
}

std::string TaskConfig::render_description(const ojson& doc) const {
  if (!description) return "";
  try {
    return description->render(doc.dump(-1, ' ', false, ojson::error_handler_t::replace));
  } catch (const ValueError& e) {
    bad(file, "description", e.what());
  }
}

// ---- loading -------------------------------------------------------------------------------------

namespace {

text::JinjaOptions lm_eval_environment(const std::string& file, const std::string& key) {
  text::JinjaOptions o;  // lm-eval's: StrictUndefined, keep_trailing_newline, no trim/lstrip
  o.keep_trailing_newline = true;
  o.strict_undefined = true;
  o.what = "template";
  (void)file, (void)key;
  return o;
}

DocField doc_field(const ojson& cfg, const std::string& key, const std::string& file) {
  DocField f;
  if (!cfg.contains(key) || cfg[key].is_null()) return f;
  f.spec = cfg[key];
  if (f.spec.is_string()) {
    try {
      f.tmpl = std::make_shared<text::JinjaTemplate>(f.spec.get<std::string>(), lm_eval_environment(file, key));
    } catch (const ValueError& e) {
      bad(file, key, e.what());
    }
  } else if (!f.spec.is_number_integer() && !f.spec.is_array() && !f.spec.is_object()) {
    bad(file, key, "must be a field name, a Jinja template, an integer or a list");
  }
  return f;
}

std::string string_key(const ojson& cfg, const std::string& key, const std::string& file, std::string dflt) {
  if (!cfg.contains(key) || cfg[key].is_null()) return dflt;
  if (!cfg[key].is_string()) bad(file, key, "must be a string");
  return cfg[key].get<std::string>();
}

std::optional<std::string> split_key(const ojson& cfg, const std::string& key, const std::string& file) {
  if (!cfg.contains(key) || cfg[key].is_null()) return std::nullopt;
  if (!cfg[key].is_string()) bad(file, key, "must be a split name or a file");
  return cfg[key].get<std::string>();
}

const std::set<std::string> kMetricOptions = {"ignore_case", "ignore_punctuation", "ignore_numbers", "regexes_to_ignore",
                                              "use_stemmer", "average"};

}  // namespace

Task::Task() : config_(std::make_unique<TaskConfig>()) {}
Task::~Task() = default;
const std::string& Task::name() const { return config_->name; }

// Documents of a split: the dataset_kwargs.data_files entry, a file of that name beside the task
// file, <dataset_path>/<split>.{jsonl,json,csv,tsv}, or the rows of dataset_path whose "split"
// field equals it (all rows when the data has no split field).
static std::vector<ojson> split_docs(const TaskConfig& c, const ojson& cfg, const std::string& split, const char* key) {
  const fs::path dir = fs::path(c.file).parent_path();
  auto local = [&](const std::string& p) {
    fs::path q(p);
    return (q.is_relative() ? dir / q : q).string();
  };
  if (cfg.contains("dataset_kwargs") && cfg["dataset_kwargs"].is_object() && cfg["dataset_kwargs"].contains("data_files")) {
    const ojson& df = cfg["dataset_kwargs"]["data_files"];
    if (df.is_object() && df.contains(split)) {
      if (!df[split].is_string()) bad(c.file, "dataset_kwargs.data_files." + split, "must be one file");
      return load_rows(local(df[split].get<std::string>()), "task file " + c.file + ": " + key);
    }
  }
  if (fs::is_regular_file(local(split))) return load_rows(local(split), "task file " + c.file + ": " + key);
  if (!cfg.contains("dataset_path") || !cfg["dataset_path"].is_string())
    bad(c.file, key, "'" + split + "' is not a file and the task has no dataset_path");
  const std::string path = local(cfg["dataset_path"].get<std::string>());
  if (fs::is_directory(path)) {
    for (const char* ext : {".jsonl", ".json", ".csv", ".tsv"})
      if (fs::is_regular_file(fs::path(path) / (split + ext)))
        return load_rows((fs::path(path) / (split + ext)).string(), "task file " + c.file + ": " + key);
    bad(c.file, key, "no file " + split + ".jsonl/.json/.csv/.tsv in dataset_path '" + path + "'");
  }
  std::vector<ojson> rows = load_rows(path, "task file " + c.file + ": dataset_path");
  const bool has_split_field = std::any_of(rows.begin(), rows.end(), [](const ojson& r) { return r.contains("split"); });
  if (!has_split_field) return rows;
  std::vector<ojson> out;
  for (ojson& r : rows)
    if (r.contains("split") && r["split"].is_string() && r["split"].get<std::string>() == split) out.push_back(std::move(r));
  if (out.empty()) bad(c.file, key, "no row of '" + path + "' has \"split\": \"" + split + "\"");
  return out;
}

std::unique_ptr<Task> Task::load(const std::string& yaml_path) {
  std::unique_ptr<Task> task(new Task());
  TaskConfig& c = *task->config_;
  c.file = yaml_path;
  const std::string& f = c.file;
  const ojson cfg = read_yaml(yaml_path, 0);
  for (auto it = cfg.begin(); it != cfg.end(); ++it) {
    if (auto r = kRefusedKeys.find(it.key()); r != kRefusedKeys.end()) bad(f, it.key(), r->second);
    if (!kKnownKeys.count(it.key())) bad(f, it.key(), "unknown key (not an lm-eval task config key Foundry supports)");
  }
  c.raw = cfg;
  c.raw.erase("include");
  c.name = string_key(cfg, "task", f, fs::path(f).stem().string());
  c.alias = string_key(cfg, "task_alias", f, c.name);
  c.output_type = string_key(cfg, "output_type", f, "generate_until");
  static const std::set<std::string> kTypes = {"multiple_choice", "loglikelihood", "loglikelihood_rolling", "generate_until"};
  if (!kTypes.count(c.output_type))
    bad(f, "output_type", "must be multiple_choice, loglikelihood, loglikelihood_rolling or generate_until, got '" +
                              c.output_type + "'");
  c.doc_to_text = doc_field(cfg, "doc_to_text", f);
  c.doc_to_target = doc_field(cfg, "doc_to_target", f);
  c.doc_to_choice = doc_field(cfg, "doc_to_choice", f);
  if (c.output_type == "multiple_choice" && !c.doc_to_choice.set()) bad(f, "doc_to_choice", "a multiple_choice task needs it");
  if (!c.doc_to_target.set()) bad(f, "doc_to_target", "is required");
  if (c.output_type != "loglikelihood_rolling" && !c.doc_to_text.set()) bad(f, "doc_to_text", "is required");
  c.target_delimiter = string_key(cfg, "target_delimiter", f, " ");
  c.fewshot_delimiter = string_key(cfg, "fewshot_delimiter", f, "\n\n");
  if (const std::string d = string_key(cfg, "description", f, ""); !d.empty()) {
    try {
      c.description = std::make_shared<text::JinjaTemplate>(d, lm_eval_environment(f, "description"));
    } catch (const ValueError& e) {
      bad(f, "description", e.what());
    }
  }
  if (cfg.contains("num_fewshot") && !cfg["num_fewshot"].is_null()) {
    if (!cfg["num_fewshot"].is_number_integer() || cfg["num_fewshot"].get<int64_t>() < 0)
      bad(f, "num_fewshot", "must be a non-negative integer");
    c.num_fewshot = cfg["num_fewshot"].get<int64_t>();
    c.num_fewshot_set = true;
  }
  if (cfg.contains("repeats") && !(cfg["repeats"].is_number_integer() && cfg["repeats"].get<int64_t>() == 1))
    bad(f, "repeats", "only 1 is supported (generation is greedy, so repeats would be identical)");
  c.test_split = split_key(cfg, "test_split", f);
  c.validation_split = split_key(cfg, "validation_split", f);
  c.training_split = split_key(cfg, "training_split", f);
  c.fewshot_split = split_key(cfg, "fewshot_split", f);
  if (cfg.contains("fewshot_config") && !cfg["fewshot_config"].is_null()) {
    const ojson& fc = cfg["fewshot_config"];
    if (!fc.is_object()) bad(f, "fewshot_config", "must be a mapping");
    for (auto it = fc.begin(); it != fc.end(); ++it) {
      static const std::set<std::string> kFewshotKeys = {"sampler", "samples", "doc_to_text", "doc_to_target",
                                                         "doc_to_choice", "target_delimiter", "fewshot_delimiter"};
      if (!kFewshotKeys.count(it.key())) bad(f, "fewshot_config." + it.key(), "unknown key");
    }
    c.sampler = string_key(fc, "sampler", f + " fewshot_config", "default");
    if (c.sampler != "default" && c.sampler != "first_n")
      bad(f, "fewshot_config.sampler", "must be default or first_n, got '" + c.sampler + "'");
    c.fewshot_text = doc_field(fc, "doc_to_text", f);
    c.fewshot_target = doc_field(fc, "doc_to_target", f);
    c.fewshot_choice = doc_field(fc, "doc_to_choice", f);
    if (fc.contains("samples")) {
      if (!fc["samples"].is_array()) bad(f, "fewshot_config.samples", "must be a list of documents");
      for (const ojson& d : fc["samples"]) c.fewshot_docs.push_back(d);
    }
  }
  // generation_kwargs: greedy decoding only.
  c.until = {c.fewshot_delimiter};
  if (cfg.contains("generation_kwargs") && !cfg["generation_kwargs"].is_null()) {
    const ojson& g = cfg["generation_kwargs"];
    if (!g.is_object()) bad(f, "generation_kwargs", "must be a mapping");
    for (auto it = g.begin(); it != g.end(); ++it) {
      const std::string& k = it.key();
      if (k == "until") {
        if (it->is_string()) c.until = {it->get<std::string>()};
        else if (it->is_array() && std::all_of(it->begin(), it->end(), [](const ojson& x) { return x.is_string(); }))
          c.until = it->get<std::vector<std::string>>();
        else bad(f, "generation_kwargs.until", "must be a string or a list of strings");
      } else if (k == "max_gen_toks") {
        if (!it->is_number_integer() || it->get<int64_t>() < 1) bad(f, "generation_kwargs.max_gen_toks", "must be a positive integer");
        c.max_gen_toks = it->get<int64_t>();
      } else if (k == "do_sample") {
        if (!it->is_boolean() || it->get<bool>()) bad(f, "generation_kwargs.do_sample", "only greedy decoding (false) is supported");
      } else if (k == "temperature" || k == "top_p" || k == "top_k") {
        // Greedy decoding ignores them, as transformers does with do_sample false.
      } else {
        bad(f, "generation_kwargs." + k, "unknown generation option");
      }
    }
  }
  // metric_list
  if (cfg.contains("metric_list") && !cfg["metric_list"].is_null()) {
    if (!cfg["metric_list"].is_array()) bad(f, "metric_list", "must be a list of {metric: ...} entries");
    for (size_t i = 0; i < cfg["metric_list"].size(); ++i) {
      const ojson& m = cfg["metric_list"][i];
      const std::string where = "metric_list[" + std::to_string(i) + "]";
      if (!m.is_object() || !m.contains("metric") || !m["metric"].is_string()) bad(f, where, "needs a metric name");
      MetricSpec spec;
      spec.metric = m["metric"].get<std::string>();
      spec.aggregation = string_key(m, "aggregation", f, "");
      spec.higher_is_better = !(spec.metric.find("perplexity") != std::string::npos || spec.metric == "bits_per_byte");
      if (m.contains("higher_is_better")) {
        if (!m["higher_is_better"].is_boolean()) bad(f, where + ".higher_is_better", "must be true or false");
        spec.higher_is_better = m["higher_is_better"].get<bool>();
      }
      for (auto it = m.begin(); it != m.end(); ++it) {
        if (it.key() == "metric" || it.key() == "aggregation" || it.key() == "higher_is_better") continue;
        if (!kMetricOptions.count(it.key())) bad(f, where + "." + it.key(), "unknown metric option");
        spec.options[it.key()] = *it;
      }
      c.metrics.push_back(std::move(spec));
    }
  }
  // filter_list
  if (cfg.contains("filter_list") && !cfg["filter_list"].is_null()) {
    if (c.output_type != "generate_until") bad(f, "filter_list", "filters apply to generate_until tasks");
    if (!cfg["filter_list"].is_array()) bad(f, "filter_list", "must be a list of {name, filter} entries");
    for (size_t i = 0; i < cfg["filter_list"].size(); ++i) {
      const ojson& e = cfg["filter_list"][i];
      const std::string where = "filter_list[" + std::to_string(i) + "]";
      if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || !e.contains("filter") || !e["filter"].is_array())
        bad(f, where, "needs a name and a filter list");
      FilterEnsemble ens;
      ens.name = e["name"].get<std::string>();
      for (size_t k = 0; k < e["filter"].size(); ++k) {
        const ojson& s = e["filter"][k];
        const std::string sw = where + ".filter[" + std::to_string(k) + "]";
        if (!s.is_object() || !s.contains("function") || !s["function"].is_string()) bad(f, sw, "needs a function");
        FilterStep step;
        step.function = s["function"].get<std::string>();
        static const std::set<std::string> kFunctions = {"regex", "take_first", "lowercase", "uppercase", "remove_whitespace"};
        if (!kFunctions.count(step.function))
          bad(f, sw + ".function", "'" + step.function + "' is not one of regex, take_first, lowercase, uppercase, remove_whitespace");
        for (auto it = s.begin(); it != s.end(); ++it) {
          if (it.key() == "function") continue;
          if (step.function != "regex") bad(f, sw + "." + it.key(), "unknown option of " + step.function);
          if (it.key() == "regex_pattern" && it->is_string()) step.regex_pattern = it->get<std::string>();
          else if (it.key() == "fallback" && it->is_string()) step.fallback = it->get<std::string>();
          else if (it.key() == "group_select" && it->is_number_integer()) step.group_select = it->get<int64_t>();
          else bad(f, sw + "." + it.key(), "unknown or mistyped regex option");
        }
        if (step.function == "regex") {
          try {
            text::PyRegex check(step.regex_pattern);
          } catch (const ValueError& err) {
            bad(f, sw + ".regex_pattern", err.what());
          }
        }
        ens.steps.push_back(std::move(step));
      }
      c.filters.push_back(std::move(ens));
    }
  }
  if (cfg.contains("metadata") && cfg["metadata"].is_object() && cfg["metadata"].contains("version"))
    c.version = cfg["metadata"]["version"];
  else c.version = "Yaml";

  // Documents: evaluation on the test split, else validation (lm-eval's eval_docs).
  const std::optional<std::string>& eval_split = c.test_split ? c.test_split : c.validation_split;
  if (!eval_split) {
    if (!cfg.contains("dataset_path")) bad(f, "test_split", "the task needs a test_split or validation_split (or a dataset_path)");
    c.eval_docs = split_docs(c, cfg, "test", "dataset_path");  // a lone data file is the test split
  } else {
    c.eval_docs = split_docs(c, cfg, *eval_split, c.test_split ? "test_split" : "validation_split");
  }
  if (c.eval_docs.empty()) bad(f, "dataset_path", "the evaluation split has no documents");
  if (c.fewshot_docs.empty()) {
    // lm-eval's fewshot_docs(): fewshot_split, else training, validation, test.
    for (const auto* s : {&c.fewshot_split, &c.training_split, &c.validation_split, &c.test_split})
      if (*s) {
        c.fewshot_docs = split_docs(c, cfg, **s, "fewshot_split");
        break;
      }
    if (c.fewshot_docs.empty() && !eval_split) c.fewshot_docs = c.eval_docs;
  }
  return task;
}

}  // namespace foundry::eval
