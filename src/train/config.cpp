// TOML run configurations for `foundry train` (toml++).
#include <cmath>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>
#include <stdexcept>

// toml++ 3.3 (Debian 12's) states its parser's invariants as assertions, which release builds turn
// into compiler assumptions (__builtin_assume, __builtin_unreachable): malformed input that breaks
// one is undefined behaviour there and an abort in debug builds (the fuzzer found several). Its
// own preprocessor header is read first so that, in every build, each such check throws instead;
// the parser already reports syntax errors by throwing from the same places, so the exception
// unwinds to load_train_config, which names the file. A check inside one of its noexcept helpers
// (path accessors, the UTF-8 decoder, stepping back in the reader) ends in std::terminate instead
// of undefined behaviour; check_toml_before_parsing refuses the input known to reach one.
// Everything else malformed that breaks an invariant (a table header such as "[$data]" or
// "[[[data]]]" breaks its key reader's) becomes an IOError naming the file.
#include <toml++/impl/preprocessor.h>
namespace foundry::train {
struct TomlParserInvariant : std::logic_error {
  using std::logic_error::logic_error;
};
}  // namespace foundry::train
#undef TOML_ASSERT
#undef TOML_ASSERT_ASSUME
#undef TOML_UNREACHABLE
#define TOML_ASSERT(expr) \
  ((expr) ? static_cast<void>(0) : throw ::foundry::train::TomlParserInvariant("toml++ invariant: " #expr))
#define TOML_ASSERT_ASSUME(expr) TOML_ASSERT(expr)
#define TOML_UNREACHABLE throw ::foundry::train::TomlParserInvariant("toml++ reached an unreachable branch")
#pragma GCC diagnostic push
#ifdef __clang__
#pragma GCC diagnostic ignored "-Wexceptions"
#else
#pragma GCC diagnostic ignored "-Wterminate"
#endif
#include <toml++/toml.h>
#pragma GCC diagnostic pop

#include "foundry/core/error.h"
#include "foundry/io/atomic_file.h"
#include "foundry/train/trainer.h"

namespace foundry::train {

namespace {

class Reader {
 public:
  Reader(const toml::table& root, std::string path) : root_(root), path_(std::move(path)) {}

  template <typename T>
  void get(const char* table, const char* key, T& out) {
    seen_.insert(std::string(table) + "." + key);
    const toml::node* tbl = root_.get(table);
    if (!tbl || !tbl->is_table()) return;
    const toml::node* n = tbl->as_table()->get(key);
    if (!n) return;
    if constexpr (std::is_same_v<T, std::string>) {
      if (!n->is_string()) bad(table, key, "a string");
      out = *n->value<std::string>();
    } else if constexpr (std::is_same_v<T, bool>) {
      if (!n->is_boolean()) bad(table, key, "true or false");
      out = *n->value<bool>();
    } else if constexpr (std::is_integral_v<T>) {
      if (!n->is_integer()) bad(table, key, "an integer");
      out = T(*n->value<int64_t>());
    } else {
      if (!n->is_number()) bad(table, key, "a number");
      out = *n->value<double>();
    }
  }

  // Every key of the file must be one the trainer knows ([model] keys not read by the trainer
  // are the architecture's config keys).
  void check_unknown() const {
    for (auto&& [tname, tnode] : root_) {
      if (!tnode.is_table()) raise<ValueError>("{}: top-level key '{}' must be a table", path_, tname.str());
      if (tname.str() == "model") continue;
      for (auto&& [k, v] : *tnode.as_table()) {
        std::string full = std::string(tname.str()) + "." + std::string(k.str());
        if (!seen_.count(full)) raise<ValueError>("{}: unknown setting '{}'", path_, full);
      }
    }
  }

  // The [model] keys the trainer does not read, as a JSON object (HF config keys).
  std::string model_keys_json() const {
    nlohmann::json out = nlohmann::json::object();
    const toml::node* tbl = root_.get("model");
    if (!tbl || !tbl->is_table()) return out.dump();
    for (auto&& [k, v] : *tbl->as_table()) {
      const std::string key(k.str());
      if (seen_.count("model." + key)) continue;
      out[key] = to_json(v, "model." + key);
    }
    return out.dump();
  }

 private:
  nlohmann::json to_json(const toml::node& n, const std::string& where) const {
    if (n.is_boolean()) return *n.value<bool>();
    if (n.is_integer()) return *n.value<int64_t>();
    if (n.is_floating_point()) return *n.value<double>();
    if (n.is_string()) return *n.value<std::string>();
    if (n.is_array()) {
      nlohmann::json a = nlohmann::json::array();
      for (auto&& e : *n.as_array()) a.push_back(to_json(e, where));
      return a;
    }
    if (n.is_table()) {
      nlohmann::json o = nlohmann::json::object();
      for (auto&& [k, v] : *n.as_table()) o[std::string(k.str())] = to_json(v, where + "." + std::string(k.str()));
      return o;
    }
    raise<ValueError>("{}: {} must be a number, string, boolean, array or table", path_, where);
  }
  [[noreturn]] void bad(const char* table, const char* key, const char* what) const {
    raise<ValueError>("{}: {}.{} must be {}", path_, table, key, what);
  }
  const toml::table& root_;
  std::string path_;
  std::set<std::string> seen_;
};

// toml++ 3.3 (Debian 12's) meets one malformed input inside a function that cannot throw, so the
// invariant check above would end the program there (found by tests/fuzz/train_toml.cpp): a
// non-ASCII character where it looks for whitespace (a line starting with "\u00e9") reaches an
// unreachable branch of its whitespace table. That is an error in TOML anyway (bare keys are
// ASCII), so it is refused first. The text is scanned as toml++ reads it (basic, literal and
// multi-line strings, comments): non-ASCII bytes are accepted only inside strings and comments.
// In a multi-line basic string toml++ 3.3 asks its whitespace table about the character after a
// backslash, about the characters after the spaces that follow one, and (a line-ending backslash
// skips spaces and line breaks) about the first character of the continued text; a non-ASCII
// character there can reach that table's unreachable branch inside a noexcept function (found by
// the fuzzer: a backslash, then U+FEC6). The first two are not TOML (an unknown escape; a
// line-ending backslash that is not last on its line); the third is, but toml++ cannot read it,
// so all three are refused by name. Returns the index of the last character examined.
size_t check_multiline_backslash(const std::string& text, size_t i, size_t& lineno, const std::string& path) {
  auto non_ascii = [&](size_t j) { return j < text.size() && static_cast<unsigned char>(text[j]) >= 0x80; };
  if (non_ascii(i + 1))
    raise<IOError>("{}: line {}: a backslash before a non-ASCII character in a string is not a TOML escape", path,
                   lineno);
  size_t j = i + 1;
  while (j < text.size() && (text[j] == ' ' || text[j] == '\t')) ++j;
  if (j < text.size() && text[j] != '\n' && text[j] != '\r') {
    if (non_ascii(j))
      raise<IOError>("{}: line {}: a line-ending backslash must be the last character on its line", path, lineno);
    return j == i + 1 ? i + 1 : j - 1;  // an escape (its letter is skipped), or spaces then text
  }
  size_t lines = 0;
  while (j < text.size() && (text[j] == ' ' || text[j] == '\t' || text[j] == '\n' || text[j] == '\r'))
    lines += text[j++] == '\n';
  if (non_ascii(j))
    raise<IOError>(
        "{}: line {}: toml++ 3.3 cannot read a non-ASCII character as the first one after a line-ending "
        "backslash; start the continued line with an ASCII character",
        path, lineno + lines);
  lineno += lines;
  return j - 1;
}

// Where a quote opens a string for toml++, and so where a non-ASCII character may stand: toml++
// 3.3's whitespace test reaches an unreachable branch on U+00A1-U+049A and U+FBC6-U+FEFE (its
// generated table leaves those ranges to a switch with no case for them), and it runs that test
// on every character outside strings and comments it scans, so each non-ASCII one there is refused
// first. In a key (before a line's first '=') a quote opens a string at the start of a line or after
// whitespace, '[', '{', ',' or '.'. In a value a bare token ("0.1%'x'V='y'", "1['z']") runs on to
// whitespace, ',', ']', '}' or '#' whatever it holds, quotes, brackets and '=' included, so a quote
// opens a string only where no token is under way; an array or inline table keeps the value going
// past line ends. The train_toml fuzzer found each hole in turn ("1\"x\"", "2\"\"2", "0.1%''V='").
// Valid TOML is read as toml++ reads it, but for a non-ASCII quoted key glued to an inline table's
// '=' ("{a='x'}" counts as a token): refused, as the trainer's ASCII keys would be anyway.
void check_toml_before_parsing(const std::string& text, const std::string& path) {
  enum class In { Code, Basic, Literal, MultiBasic, MultiLiteral, Comment } in = In::Code;
  size_t lineno = 1;
  bool in_value = false;  // after the line's '=' (or inside an array / inline table it opened)
  bool in_token = false;  // in a value, inside a bare token
  int depth = 0;          // open arrays and inline tables of the value
  auto at = [&](size_t i, std::string_view s) { return text.compare(i, s.size(), s) == 0; };
  auto key_quote_opens = [&](size_t i) {
    if (i == 0) return true;
    const char p = text[i - 1];
    return p == ' ' || p == '\t' || p == '\r' || p == '\n' || p == '[' || p == '{' || p == ',' || p == '.';
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++lineno;
      if (in == In::Comment || in == In::Basic || in == In::Literal) in = In::Code;  // (unterminated: toml++ says so)
      if (in == In::Code) {
        in_token = false;
        if (depth == 0) in_value = false;
      }
      continue;
    }
    switch (in) {
      case In::Comment:
        continue;
      case In::Basic:
      case In::MultiBasic:
        if (c == '\\' && in == In::MultiBasic) {
          i = check_multiline_backslash(text, i, lineno, path);
        } else if (c == '\\') {
          if (i + 1 < text.size() && text[i + 1] != '\n') ++i;
        } else if (in == In::MultiBasic ? at(i, "\"\"\"") : c == '"') {
          if (in == In::MultiBasic) i += 2;
          in = In::Code;
          in_token = in_value;  // whatever is glued to a closing quote is no new string
        }
        continue;
      case In::Literal:
      case In::MultiLiteral:
        if (in == In::MultiLiteral ? at(i, "'''") : c == '\'') {
          if (in == In::MultiLiteral) i += 2;
          in = In::Code;
          in_token = in_value;
        }
        continue;
      case In::Code:
        break;
    }
    if (static_cast<unsigned char>(c) >= 0x80)
      raise<IOError>("{}: line {}: a non-ASCII character outside a string or comment (keys are ASCII)", path,
                     lineno);
    const bool quote = c == '"' || c == '\'';
    if (c == '#') {
      in = In::Comment;
      in_token = false;
    } else if (!in_value) {
      if (c == '=') in_value = true;
      else if (quote && !key_quote_opens(i)) continue;
    } else if (c == ' ' || c == '\t' || c == '\r' || c == ',' || c == ']' || c == '}') {
      in_token = false;
      if ((c == ']' || c == '}') && depth > 0) --depth;
      continue;
    } else if (in_token) {
      continue;  // quotes, brackets and '=' inside a bare token are the token's
    } else if (c == '[' || c == '{') {
      ++depth;
      continue;
    } else if (!quote) {
      in_token = true;
      continue;
    }
    if (quote) {
      const bool multi = at(i, c == '"' ? "\"\"\"" : "'''");
      in = c == '"' ? (multi ? In::MultiBasic : In::Basic) : (multi ? In::MultiLiteral : In::Literal);
      if (multi) i += 2;
    }
  }
}

}  // namespace

TrainConfig load_train_config(const std::string& path) {
  toml::table root;
  try {
    const std::string text = io::read_file(path);
    check_toml_before_parsing(text, path);
    root = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    raise<IOError>("{}: {} (line {})", path, e.description(), e.source().begin.line);
  } catch (const TomlParserInvariant& e) {
    raise<IOError>("{}: not valid TOML (the parser stopped at a broken {})", path, e.what());
  }
  TrainConfig c;
  Reader r(root, path);
  r.get("data", "path", c.data_path);
  r.get("data", "prepared", c.prepared_dir);
  r.get("data", "field", c.data_field);
  r.get("data", "tokenizer", c.tokenizer);
  r.get("data", "val_fraction", c.val_fraction);
  r.get("model", "architecture", c.model.architecture);
  r.get("model", "init_from", c.model.init_from);
  r.get("model", "block_size", c.model.block_size);
  r.get("model", "gradient_checkpointing", c.model.gradient_checkpointing);
  bool legacy_checkpointing = false;
  r.get("model", "activation_checkpointing", legacy_checkpointing);  // the GPT trainer's name for it
  c.model.gradient_checkpointing = c.model.gradient_checkpointing || legacy_checkpointing;
  r.get("train", "batch_size", c.batch_size);
  r.get("train", "grad_accum_steps", c.grad_accum_steps);
  r.get("train", "max_steps", c.max_steps);
  r.get("train", "lr", c.lr);
  r.get("train", "min_lr", c.min_lr);
  r.get("train", "warmup_steps", c.warmup_steps);
  r.get("train", "weight_decay", c.weight_decay);
  r.get("train", "beta1", c.beta1);
  r.get("train", "beta2", c.beta2);
  r.get("train", "grad_clip", c.grad_clip);
  r.get("train", "precision", c.precision);
  r.get("train", "seed", c.seed);
  r.get("train", "threads", c.threads);
  r.get("train", "out_dir", c.out_dir);
  r.get("train", "export_dir", c.export_dir);
  r.get("train", "resume", c.resume);
  r.get("train", "log_every", c.log_every);
  r.get("train", "progress", c.progress);
  r.get("train", "mlm_probability", c.mlm_probability);
  r.get("train", "mask_token_id", c.mask_token_id);
  r.get("train", "noise_density", c.noise_density);
  r.get("train", "mean_noise_span_length", c.mean_noise_span_length);
  r.get("eval", "every", c.eval_every);
  r.get("eval", "batches", c.eval_batches);
  r.get("eval", "checkpoint_every", c.checkpoint_every);
  r.get("eval", "keep_checkpoints", c.keep_checkpoints);
  r.get("eval", "early_stopping_patience", c.early_stopping_patience);
  r.get("sample", "tokens", c.sample_tokens);
  r.get("sample", "temperature", c.temperature);
  r.get("sample", "top_k", c.top_k);
  r.get("sample", "prompt", c.prompt);
  r.get("track", "enabled", c.track);
  r.get("track", "dir", c.track_dir);
  r.get("track", "project", c.track_project);
  r.get("track", "name", c.track_name);
  r.check_unknown();
  c.model.hf_config = r.model_keys_json();
  check_train_config(c, path);
  return c;
}

std::string train_config_json(const TrainConfig& c) {
  using nlohmann::json;
  json model = json::parse(c.model.hf_config, nullptr, false);
  if (!model.is_object()) model = json::object();
  model["architecture"] = c.model.architecture;
  model["block_size"] = c.model.block_size;
  model["gradient_checkpointing"] = c.model.gradient_checkpointing;
  if (!c.model.init_from.empty()) model["init_from"] = c.model.init_from;
  if (c.model.vocab_size > 0) model["vocab_size"] = c.model.vocab_size;
  json data = {{"path", c.data_path}, {"tokenizer", c.tokenizer}, {"val_fraction", c.val_fraction}};
  if (!c.prepared_dir.empty()) data["prepared"] = c.prepared_dir;
  if (!c.data_field.empty()) data["field"] = c.data_field;
  json train = {{"batch_size", c.batch_size}, {"grad_accum_steps", c.grad_accum_steps}, {"max_steps", c.max_steps},
                {"lr", c.lr}, {"min_lr", c.min_lr}, {"warmup_steps", c.warmup_steps},
                {"weight_decay", c.weight_decay}, {"beta1", c.beta1}, {"beta2", c.beta2},
                {"grad_clip", c.grad_clip}, {"precision", c.precision}, {"seed", c.seed},
                {"out_dir", c.out_dir}, {"log_every", c.log_every}, {"mlm_probability", c.mlm_probability},
                {"mask_token_id", c.mask_token_id}, {"noise_density", c.noise_density},
                {"mean_noise_span_length", c.mean_noise_span_length}};
  json eval = {{"every", c.eval_every}, {"batches", c.eval_batches}, {"checkpoint_every", c.checkpoint_every},
               {"keep_checkpoints", c.keep_checkpoints}, {"early_stopping_patience", c.early_stopping_patience}};
  json sample = {{"tokens", c.sample_tokens}, {"temperature", c.temperature}, {"top_k", c.top_k}};
  return json{{"data", data}, {"model", model}, {"train", train}, {"eval", eval}, {"sample", sample}}.dump();
}

void check_train_config(const TrainConfig& c, const std::string& where) {
  FOUNDRY_CHECK_AS(ValueError, c.model.block_size > 0, "{}: model.block_size must be positive", where);
  FOUNDRY_CHECK_AS(ValueError, c.precision == "float32" || c.precision == "bfloat16",
                   "{}: precision must be \"float32\" or \"bfloat16\", got \"{}\"", where, c.precision);
  FOUNDRY_CHECK_AS(ValueError, c.max_steps > 0 && c.batch_size > 0 && c.grad_accum_steps > 0,
                   "{}: max_steps, batch_size and grad_accum_steps must be positive", where);
  FOUNDRY_CHECK_AS(ValueError, c.val_fraction > 0 && c.val_fraction < 1, "{}: val_fraction must be in (0, 1), got {}",
                   where, c.val_fraction);
  FOUNDRY_CHECK_AS(ValueError, c.lr >= 0 && c.min_lr >= 0 && std::isfinite(c.lr) && std::isfinite(c.min_lr),
                   "{}: lr and min_lr must be finite and not negative, got {} and {}", where, c.lr, c.min_lr);
  // A negative clip norm was taken as "off" without a word (torch's clip_grad_norm_ would scale
  // the gradients by a negative factor); 0 turns clipping off.
  FOUNDRY_CHECK_AS(ValueError, c.grad_clip >= 0, "{}: grad_clip must be 0 (off) or positive, got {}", where, c.grad_clip);
  FOUNDRY_CHECK_AS(ValueError, c.eval_every >= 0 && c.checkpoint_every >= 0 && c.log_every >= 0,
                   "{}: eval.every, eval.checkpoint_every and train.log_every must be 0 (off) or more", where);
  FOUNDRY_CHECK_AS(ValueError, c.eval_batches > 0, "{}: eval.batches must be positive, got {}", where, c.eval_batches);
  FOUNDRY_CHECK_AS(ValueError, c.temperature >= 0 && c.top_k >= 0 && c.sample_tokens >= 0,
                   "{}: sample temperature, top_k and tokens must not be negative", where);
}

}  // namespace foundry::train
