// JSONL instruction data -> token ids and labels (see finetune.h for the formats).
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "foundry/core/error.h"
#include "foundry/models/chat_template.h"
#include "foundry/models/pretrained.h"
#include "foundry/models/tokenizer_files.h"
#include "foundry/text/tokenizer.h"
#include "foundry/train/finetune.h"
#include "foundry/io/json_depth.h"

namespace foundry::train {

using json = nlohmann::json;

namespace {

constexpr int64_t kIgnore = -100;

std::vector<int64_t> encode(const SftFormat& f, const std::string& text, bool special) {
  std::vector<int64_t> out;
  for (uint32_t id : f.tokenizer->encode_ids(text, special)) out.push_back(int64_t(id));
  return out;
}

void append(SftExample& e, const std::vector<int64_t>& ids, bool learn) {
  e.input_ids.insert(e.input_ids.end(), ids.begin(), ids.end());
  for (int64_t id : ids) e.labels.push_back(learn ? id : kIgnore);
}

std::string string_field(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j[key].is_string()) raise<ValueError>("{}: '{}' must be a string", where, key);
  return j[key].get<std::string>();
}

// The conversation as alternating segments: what the template renders before each assistant turn
// (with the generation prompt) is not learned, the assistant turn itself is.
SftExample from_messages(const SftFormat& f, const models::ChatTemplate& tmpl, const json& messages,
                         const std::string& where) {
  if (!messages.is_array() || messages.empty()) raise<ValueError>("{}: 'messages' must be a non-empty list", where);
  for (const json& m : messages)
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      raise<ValueError>("{}: every message needs string 'role' and 'content'", where);
  auto render = [&](size_t n, bool generation_prompt) {
    json part(messages.begin(), messages.begin() + std::ptrdiff_t(n));
    return tmpl.apply(part.dump(), generation_prompt, f.bos_token, f.eos_token);
  };
  const std::string full = render(messages.size(), false);
  SftExample e;
  size_t done = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i]["role"] != "assistant") continue;
    const std::string before = render(i, true), through = render(i + 1, false);
    if (through.compare(0, before.size(), before) != 0 || full.compare(0, through.size(), through) != 0 ||
        before.size() < done)
      raise<ValueError>("{}: the chat template does not render this conversation's prefixes as prefixes of it, so "
                        "its assistant turns can't be found",
                        where);
    append(e, encode(f, before.substr(done), false), false);
    append(e, encode(f, through.substr(before.size()), false), true);
    done = through.size();
  }
  append(e, encode(f, full.substr(done), false), false);
  return e;
}

}  // namespace

SftFormat sft_format_for(const std::string& model_dir, const models::ModelConfig& config, int64_t seq_len) {
  SftFormat f;
  f.tokenizer = models::folder_tokenizer(model_dir);
  const models::TokenizerSettings settings = models::folder_tokenizer_settings(model_dir);
  f.chat_template = settings.chat_template.value_or("");
  f.bos_token = settings.bos_token;
  f.eos_token = settings.eos_token;
  if (!config.eos_token_ids.empty()) f.eos_id = config.eos_token_ids.front();
  else if (f.tokenizer && !settings.eos_token.empty())
    if (auto id = f.tokenizer->token_to_id(settings.eos_token)) f.eos_id = int64_t(*id);
  f.seq_len = seq_len;
  f.vocab_size = config.vocab_size;
  return f;
}

std::vector<SftExample> load_sft_jsonl(const std::string& path, const SftFormat& f) {
  std::ifstream in(path);
  if (!in) raise<IOError>("{}: can't open the data file", path);
  std::unique_ptr<models::ChatTemplate> tmpl;
  if (!f.chat_template.empty()) tmpl = std::make_unique<models::ChatTemplate>(f.chat_template);
  std::vector<SftExample> out;
  std::string line;
  int64_t number = 0, skipped = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number);
    io::check_json_depth(line, where);
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) raise<ValueError>("{}: not a JSON object", where);
    SftExample e;
    if (j.contains("input_ids")) {
      try {
        e.input_ids = j["input_ids"].get<std::vector<int64_t>>();
        e.labels = j.contains("labels") ? j["labels"].get<std::vector<int64_t>>() : e.input_ids;
      } catch (const json::exception&) {
        raise<ValueError>("{}: 'input_ids' and 'labels' must be lists of integers", where);
      }
      if (e.labels.size() != e.input_ids.size())
        raise<ValueError>("{}: 'labels' has {} entries, 'input_ids' {}", where, e.labels.size(), e.input_ids.size());
    } else {
      if (!f.tokenizer) raise<ValueError>("{}: text needs the model's tokenizer, and its folder has none", where);
      if (j.contains("messages")) {
        if (!tmpl)
          raise<ValueError>("{}: {{\"messages\"}} needs a chat template (tokenizer_config.json's chat_template)", where);
        e = from_messages(f, *tmpl, j["messages"], where);
      } else if (j.contains("prompt") && j.contains("completion")) {
        append(e, encode(f, string_field(j, "prompt", where), true), false);
        append(e, encode(f, string_field(j, "completion", where), false), true);
        if (f.eos_id >= 0) append(e, {f.eos_id}, true);
      } else if (j.contains("text")) {
        append(e, encode(f, string_field(j, "text", where), true), true);
        if (f.eos_id >= 0) append(e, {f.eos_id}, true);
      } else {
        raise<ValueError>("{}: unknown format; a line holds \"text\", \"prompt\" + \"completion\", \"messages\" or "
                          "\"input_ids\"",
                          where);
      }
    }
    for (int64_t id : e.input_ids)
      if (id < 0 || (f.vocab_size > 0 && id >= f.vocab_size))
        raise<ValueError>("{}: token id {} is outside the model's vocabulary ({})", where, id, f.vocab_size);
    for (int64_t id : e.labels)
      if (id != kIgnore && (id < 0 || (f.vocab_size > 0 && id >= f.vocab_size)))
        raise<ValueError>("{}: label {} is outside the model's vocabulary ({})", where, id, f.vocab_size);
    if (int64_t(e.input_ids.size()) > f.seq_len) {
      e.input_ids.resize(size_t(f.seq_len));
      e.labels.resize(size_t(f.seq_len));
    }
    // The loss reads labels[1:] (HF's shift): an example whose learned tokens were all cut off
    // teaches nothing.
    bool learns = false;
    for (size_t t = 1; t < e.labels.size(); ++t) learns |= e.labels[t] != kIgnore;
    if (!learns) {
      ++skipped;
      continue;
    }
    out.push_back(std::move(e));
  }
  if (skipped)
    std::fprintf(stderr, "finetune: %s: %lld examples skipped (no trained token within --seq-len %lld)\n", path.c_str(),
                 static_cast<long long>(skipped), static_cast<long long>(f.seq_len));
  if (out.empty()) raise<ValueError>("{}: no training examples", path);
  return out;
}

}  // namespace foundry::train
