// A model folder's tokenizer and the chat-template settings next to it (tokenizer_config.json).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace foundry::text {
class Tokenizer;
}

namespace foundry::models {

/// tokenizer.json, else SentencePiece's tokenizer.model, else GPT-2's vocab.json + merges.txt; for
/// a GGUF file, the tokenizer in its metadata. Null when the folder has none.
std::unique_ptr<text::Tokenizer> folder_tokenizer(const std::string& dir);

/// The tokenizer (and generation) files of a folder, as paths: what a model derived from it
/// (trained further, merged with an adapter) carries along.
std::vector<std::string> folder_tokenizer_file_paths(const std::string& dir);

/// What tokenizer_config.json says about chat formatting: the Jinja chat template (a string, or
/// the "default" entry of a list of named templates) and the bos / eos token texts.
struct TokenizerSettings {
  std::optional<std::string> chat_template;
  std::string bos_token, eos_token, pad_token;
};
/// Empty settings when the folder has no tokenizer_config.json; ValueError naming the file when
/// it is malformed.
TokenizerSettings folder_tokenizer_settings(const std::string& dir);

}  // namespace foundry::models
