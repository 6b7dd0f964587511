#include "foundry/models/tokenizer_files.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "foundry/core/error.h"
#include "foundry/io/atomic_file.h"
#include "foundry/models/gguf.h"
#include "foundry/text/tokenizer.h"
#include "foundry/io/json_depth.h"

namespace foundry::models {

namespace fs = std::filesystem;

std::unique_ptr<text::Tokenizer> folder_tokenizer(const std::string& dir) {
  if (is_gguf_file(dir)) return load_gguf_tokenizer(dir);
  const fs::path d(dir);
  for (const char* name : {"tokenizer.json", "tokenizer.model"})
    if (fs::exists(d / name)) return std::make_unique<text::Tokenizer>(text::Tokenizer::from_file((d / name).string()));
  if (fs::exists(d / "vocab.json") && fs::exists(d / "merges.txt"))
    return std::make_unique<text::Tokenizer>(
        text::Tokenizer::from_gpt2_files((d / "vocab.json").string(), (d / "merges.txt").string()));
  return nullptr;
}

std::vector<std::string> folder_tokenizer_file_paths(const std::string& dir) {
  std::vector<std::string> out;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
                        "vocab.json", "merges.txt", "generation_config.json"})
    if (fs::exists(fs::path(dir) / f)) out.push_back((fs::path(dir) / f).string());
  return out;
}

namespace {

// A special token entry: "text", or {"content": "text", ...} (AddedToken's serialisation).
std::string token_text(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  return "";
}

}  // namespace

TokenizerSettings folder_tokenizer_settings(const std::string& dir) {
  TokenizerSettings s;
  const fs::path path = fs::path(dir) / "tokenizer_config.json";
  if (!fs::exists(path)) return s;
  const std::string text = io::read_file(path.string());
  io::check_json_depth(text, path.string());
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) raise<ValueError>("{}: not a JSON object", path.string());
  if (auto it = j.find("chat_template"); it != j.end() && !it->is_null()) {
    if (it->is_string()) {
      s.chat_template = it->get<std::string>();
    } else if (it->is_array()) {  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
      for (const auto& t : *it)
        if (t.is_object() && t.value("name", std::string()) == "default" && t.contains("template"))
          s.chat_template = t["template"].get<std::string>();
    }
  }
  s.bos_token = token_text(j, "bos_token");
  s.eos_token = token_text(j, "eos_token");
  s.pad_token = token_text(j, "pad_token");
  return s;
}

}  // namespace foundry::models
