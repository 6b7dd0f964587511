// foundry tokenize: encode or decode text with any supported tokenizer file.
#include <iostream>
#include <sstream>

#include "commands.h"
#include "foundry/text/tokenizer.h"

namespace foundry::cli {

void add_tokenize_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("tokenize", "Encode text (or decode ids) with a tokenizer file");
  auto path = std::make_shared<std::string>();
  auto text = std::make_shared<std::string>();
  auto ids = std::make_shared<std::vector<uint32_t>>();
  auto tokens = std::make_shared<bool>(false);
  auto no_special = std::make_shared<bool>(false);
  cmd->add_option("--tokenizer", *path, "tokenizer.json, .model, encoder.json or .tiktoken")->required();
  cmd->add_option("--text", *text, "text to encode (default: stdin)");
  cmd->add_option("--decode", *ids, "ids to decode instead");
  cmd->add_flag("--tokens", *tokens, "print tokens next to ids");
  cmd->add_flag("--no-special", *no_special, "do not add special tokens");
  cmd->callback([=] {
    text::Tokenizer tok = text::Tokenizer::from_file(*path);
    if (!ids->empty()) {
      std::cout << tok.decode(*ids) << "\n";
      return;
    }
    std::string input = *text;
    if (input.empty()) {
      std::stringstream ss;
      ss << std::cin.rdbuf();
      input = ss.str();
    }
    text::Encoding e = tok.encode(input, !*no_special);
    for (size_t i = 0; i < e.ids.size(); ++i) {
      std::cout << e.ids[i];
      if (*tokens) std::cout << "\t" << e.tokens[i];
      std::cout << (*tokens ? "\n" : (i + 1 < e.ids.size() ? " " : "\n"));
    }
  });
}

}  // namespace foundry::cli
