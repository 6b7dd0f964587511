// foundry prepare: turn a text (or JSONL) corpus into token shards for training.
#include <cstdio>

#include "commands.h"
#include "foundry/data/dataset.h"
#include "foundry/io/npy.h"

namespace foundry::cli {

void add_prepare_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("prepare", "Tokenize a corpus into train.bin/val.bin token shards + meta.json");
  auto input = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto tokenizer = std::make_shared<std::string>("char");
  auto field = std::make_shared<std::string>();
  auto val = std::make_shared<double>(0.1);
  cmd->add_option("--input", *input, "text or JSONL file")->required();
  cmd->add_option("--out", *out, "output folder")->required();
  cmd->add_option("--tokenizer", *tokenizer, "char, byte, or a tokenizer file (tokenizer.json, .model, ...)");
  cmd->add_option("--field", *field, "JSONL field holding the text (dotted path)");
  cmd->add_option("--val-fraction", *val, "fraction of tokens kept for validation");
  cmd->callback([=] {
    data::TextEncoder enc;
    if (*tokenizer == "char") {
      std::string corpus;
      if (field->empty()) corpus = io::read_file(*input);
      else data::for_each_jsonl(*input, *field, [&](const std::string& t) { corpus += t; });
      enc = data::TextEncoder::chars_of(corpus + "\n");
    } else if (*tokenizer == "byte") {
      enc = data::TextEncoder::bytes();
    } else {
      enc = data::TextEncoder::from_tokenizer_file(*tokenizer);
    }
    data::PreparedDataset p = data::prepare_dataset(*input, *out, enc, *val, *field);
    std::printf("vocabulary %lld (%s); %lld train tokens -> %s; %lld validation tokens -> %s\n", (long long)p.vocab_size,
                enc.kind().c_str(), (long long)p.train_tokens, p.train_path.c_str(), (long long)p.val_tokens,
                p.val_path.c_str());
  });
}

}  // namespace foundry::cli
