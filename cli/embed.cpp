// foundry embed: sentence embeddings of an encoder model (BERT, RoBERTa) as JSON — the mean of the
// last hidden states over each text's tokens (sentence-transformers' mean pooling) or the first
// token's ([CLS]).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "foundry/core/error.h"
#include "foundry/models/encoder.h"
#include "foundry/models/tokenizer_files.h"
#include "foundry/ops/ops.h"
#include "foundry/text/tokenizer.h"

namespace foundry::cli {

void add_embed_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("embed", "Sentence embeddings of an encoder model (JSON: one vector per --text)");
  struct Options {
    std::string model, pooling = "mean";
    std::vector<std::string> texts;
    bool normalize = false;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--model", o->model, "encoder model folder (BERT, RoBERTa) with a tokenizer")->required();
  cmd->add_option("--text", o->texts, "a text to embed (repeat for several)")->required();
  cmd->add_option("--pooling", o->pooling, "mean (over the tokens, default) or cls (the first token)")
      ->check(CLI::IsMember({"mean", "cls"}));
  cmd->add_flag("--normalize", o->normalize, "scale each embedding to unit length");
  add_threads_option(cmd);
  cmd->callback([o] {
    if (!models::is_encoder_folder(o->model))
      raise<ValueError>("embed: '{}' is not an encoder model folder (BERT / RoBERTa config.json)", o->model);
    auto tok = models::folder_tokenizer(o->model);
    if (!tok) raise<ValueError>("embed: '{}' has no tokenizer", o->model);
    auto model = models::load_encoder(o->model);
    nlohmann::json out = nlohmann::json::array();
    for (const std::string& text : o->texts) {
      std::vector<int64_t> ids;
      for (uint32_t id : tok->encode_ids(text, true)) ids.push_back(int64_t(id));
      if (ids.empty()) raise<ValueError>("embed: '{}' encodes to no tokens", text);
      const int64_t T = int64_t(ids.size());
      Tensor h = model->encode(tensor<int64_t>(ids, {1, T})).last_hidden_state.select(0, 0);  // [T, hidden]
      Tensor v = o->pooling == "cls" ? h.select(0, 0) : mean(h, {0});
      if (o->normalize) v = v / sqrt(sum(v * v));
      out.push_back(v.contiguous().to_vector<float>());
    }
    std::printf("%s\n", out.dump().c_str());
  });
}

}  // namespace foundry::cli
