// foundry tokenize: encode JSON Lines of text (or pairs) into ids, tokens and offsets, or decode
// lines of ids, with any supported tokenizer file (docs/tokenizers.md, "Command line").
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "foundry/core/error.h"
#include "foundry/io/atomic_file.h"
#include "foundry/models/gguf.h"
#include "foundry/text/tokenizer.h"
#include "foundry/io/json_depth.h"

namespace foundry::cli {

namespace {

using nlohmann::json;

text::Tokenizer load(const std::string& path, const std::string& encoding) {
  bool is_tiktoken = path.size() >= 9 && path.compare(path.size() - 9, 9, ".tiktoken") == 0;
  if (!encoding.empty()) {
    if (!is_tiktoken) raise<ValueError>("--tiktoken-encoding applies to .tiktoken rank files, not '{}'", path);
    return text::Tokenizer::from_tiktoken(path, text::tiktoken_encoding(encoding));
  }
  if (models::is_gguf_file(path)) {  // the tokenizer a llama.cpp model file carries
    std::unique_ptr<text::Tokenizer> tok = models::load_gguf_tokenizer(path);
    if (!tok) raise<ValueError>("{}: the GGUF file has no tokenizer (no tokenizer.ggml.model)", path);
    return std::move(*tok);
  }
  return text::Tokenizer::from_file(path);
}

json encoding_json(const text::Encoding& e, bool offsets) {
  json out = {{"ids", e.ids}, {"tokens", e.tokens}};
  if (offsets) {
    json o = json::array();
    for (auto& [a, b] : e.offsets) o.push_back({a, b});
    out["offsets"] = o;
  }
  return out;
}

// One input line: a JSON string, an object {"text": ..., "pair": ...} (the pair optional), or a
// two-string array [text, pair] (what HF's encode_batch takes for a pair). With --pair every line
// must carry a pair; without it a line that carries one is still encoded as the pair it states.
std::pair<std::string, std::optional<std::string>> parse_text_line(const std::string& line, size_t lineno, bool pair) {
  io::check_json_depth(line, "input line " + std::to_string(lineno));
  json j = json::parse(line, nullptr, false);
  auto bad = [&](const std::string& why) -> std::pair<std::string, std::optional<std::string>> {
    raise<ValueError>("input line {}: {}", lineno, why);
  };
  if (j.is_discarded()) return bad("not JSON");
  if (j.is_string()) {
    if (pair) return bad("--pair needs an object {\"text\": ..., \"pair\": ...} or an array [text, pair]");
    return {j.get<std::string>(), std::nullopt};
  }
  if (j.is_array()) {
    if (j.size() != 2 || !j[0].is_string() || !j[1].is_string())
      return bad("an array line must be two strings [text, pair]");
    return {j[0].get<std::string>(), j[1].get<std::string>()};
  }
  if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
    return bad("expected a JSON string, an object with a string \"text\", or an array [text, pair]");
  std::optional<std::string> second;
  if (j.contains("pair") && !j["pair"].is_null()) {
    if (!j["pair"].is_string()) return bad("\"pair\" must be a string");
    second = j["pair"].get<std::string>();
  } else if (pair) {
    return bad("--pair needs a \"pair\" string on every line");
  }
  return {j["text"].get<std::string>(), second};
}

// One line of ids: a JSON array of integers, or an object with "ids" (what encoding writes).
std::vector<uint32_t> parse_ids_line(const std::string& line, size_t lineno) {
  io::check_json_depth(line, "input line " + std::to_string(lineno));
  json j = json::parse(line, nullptr, false);
  if (j.is_object() && j.contains("ids")) j = j["ids"];
  if (!j.is_array()) raise<ValueError>("input line {}: expected a JSON array of ids (or {{\"ids\": [...]}})", lineno);
  std::vector<uint32_t> ids;
  for (auto& v : j) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > int64_t(UINT32_MAX))
      raise<ValueError>("input line {}: ids must be non-negative integers, got {}", lineno, v.dump());
    ids.push_back(uint32_t(v.get<int64_t>()));
  }
  return ids;
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "Encode JSON Lines of text into ids/tokens/offsets, or decode lines of ids");
  struct Options {
    std::string tokenizer, input, output, text, encoding;
    bool add_special = false, pair = false, offsets = false, decode = false, keep_special = false;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "tokenizer.json, SentencePiece .model, GPT-2 encoder.json (vocab.bpe beside it), a .tiktoken file, or a "
                  "GGUF model file (its llama.cpp tokenizer)")
      ->required();
  cmd->add_option("--input", o->input,
                  "JSON Lines: a string, {\"text\", \"pair\"} or [text, pair] per line (with --decode: an array of ids or "
                  "{\"ids\": [...]}); '-' = stdin");
  cmd->add_option("--output", o->output, "where to write the JSON Lines (default: stdout)");
  cmd->add_option("--text", o->text, "encode this one text instead of --input");
  cmd->add_flag("--add-special-tokens", o->add_special,
                "add the tokenizer's special tokens (BOS, [CLS]/[SEP], ...); for .tiktoken files: encode "
                "special-token text as special tokens (allowed_special=\"all\"), else as ordinary text");
  cmd->add_flag("--pair", o->pair,
                "every line is a pair, {\"text\": A, \"pair\": B} or [A, B] (a line that carries a pair is encoded "
                "as one without this flag too; with it, a line without one is an error)");
  cmd->add_flag("--offsets", o->offsets, "also write each token's character offsets [start, end)");
  cmd->add_flag("--decode", o->decode, "decode lines of ids into JSON strings");
  cmd->add_flag("--keep-special-tokens", o->keep_special, "with --decode: keep special tokens in the text");
  cmd->add_option("--tiktoken-encoding", o->encoding,
                  "for .tiktoken files: r50k_base, p50k_base, cl100k_base or o200k_base (split pattern and "
                  "special tokens; default: from the file name, else cl100k_base)");
  add_threads_option(cmd);
  cmd->callback([o] {
    if (o->input.empty() && o->text.empty()) raise<ValueError>("tokenize: give --input FILE.jsonl (or --text)");
    if (!o->input.empty() && !o->text.empty()) raise<ValueError>("tokenize: give --input or --text, not both");
    if (o->decode && !o->text.empty()) raise<ValueError>("tokenize: --decode reads lines of ids from --input");
    text::Tokenizer tok = load(o->tokenizer, o->encoding);

    std::ofstream file;
    if (!o->output.empty()) {
      file.open(o->output, std::ios::binary);
      if (!file) raise<IOError>("tokenize: cannot write '{}'", o->output);
    }
    std::ostream& out = o->output.empty() ? std::cout : file;
    auto emit = [&](const json& j) { out << j.dump(-1, ' ', false, json::error_handler_t::replace) << "\n"; };

    if (!o->text.empty()) {
      emit(encoding_json(tok.encode(o->text, o->add_special), o->offsets));
      return;
    }
    std::ifstream in_file;
    if (o->input != "-") {
      io::refuse_directory(o->input, "a JSON Lines file");
      in_file.open(o->input, std::ios::binary);
      if (!in_file) raise<IOError>("tokenize: cannot open '{}'", o->input);
    }
    std::istream& in = o->input == "-" ? std::cin : in_file;
    // Lines are parsed in batches (decoding runs a batch on all threads); output keeps the input's order.
    constexpr size_t kBatch = 4096;
    std::vector<std::string> lines;
    size_t first_lineno = 1, lineno = 0;
    auto flush = [&] {
      if (lines.empty()) return;
      if (o->decode) {
        std::vector<std::vector<uint32_t>> ids;
        for (size_t i = 0; i < lines.size(); ++i) ids.push_back(parse_ids_line(lines[i], first_lineno + i));
        for (auto& t : tok.decode_batch(ids, !o->keep_special)) emit(json(t));
      } else {
        std::vector<std::pair<std::string, std::optional<std::string>>> texts;
        for (size_t i = 0; i < lines.size(); ++i) texts.push_back(parse_text_line(lines[i], first_lineno + i, o->pair));
        // One line in, one line out: each is encoded alone, so a "longest" padding setting never
        // depends on which lines share a batch.
        for (auto& [x, y] : texts)
          emit(encoding_json(y ? tok.encode_pair(x, *y, o->add_special) : tok.encode(x, o->add_special), o->offsets));
      }
      first_lineno += lines.size();
      lines.clear();
    };
    std::string line;
    while (std::getline(in, line)) {
      ++lineno;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) raise<ValueError>("input line {}: empty (every line is one JSON value)", lineno);
      lines.push_back(std::move(line));
      if (lines.size() == kBatch) flush();
    }
    flush();
    out.flush();
  });
}

}  // namespace foundry::cli
