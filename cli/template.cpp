// foundry template: a conversation rendered with a model folder's chat template, as
// transformers' apply_chat_template(messages, tokenize=False) renders it (docs/models.md).
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "foundry/core/error.h"
#include "foundry/io/atomic_file.h"
#include "foundry/models/chat_template.h"
#include "foundry/models/tokenizer_files.h"
#include "foundry/io/json_depth.h"

namespace foundry::cli {

namespace {

nlohmann::ordered_json read_json_file(const std::string& path, const char* what) {
  const std::string text = io::read_file(path);
  io::check_json_depth(text, std::string("template: ") + what + " '" + path + "'");
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, false);
  if (j.is_discarded()) raise<ValueError>("template: {} '{}' is not valid JSON", what, path);
  return j;
}

}  // namespace

void add_template_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("template", "Render a conversation with a model folder's chat template");
  auto model = std::make_shared<std::string>(), messages = std::make_shared<std::string>();
  auto tools = std::make_shared<std::string>();
  auto no_prompt = std::make_shared<bool>(false);
  cmd->add_option("--model", *model, "model folder (tokenizer_config.json's chat_template, bos/eos tokens)")->required();
  cmd->add_option("--messages", *messages, "JSON file: a list of {\"role\", \"content\"} messages")->required();
  cmd->add_option("--tools", *tools, "JSON file: a list of tool definitions (the template's `tools`)");
  cmd->add_flag("--no-generation-prompt", *no_prompt, "do not open the assistant's turn at the end");
  cmd->callback([=] {
    nlohmann::ordered_json msgs = read_json_file(*messages, "messages file");
    if (!msgs.is_array()) raise<ValueError>("template: '{}' must hold a JSON list of messages", *messages);
    for (size_t i = 0; i < msgs.size(); ++i)
      if (!msgs[i].is_object() || !msgs[i].contains("role") || !msgs[i]["role"].is_string())
        raise<ValueError>("template: message {} in '{}' needs a string \"role\"", i, *messages);
    // A path that names nothing rendered ChatML behind a warning, as if it were a folder without a template.
    if (!std::filesystem::exists(*model)) raise<IOError>("template: '{}': no such model folder or file", *model);
    models::TokenizerSettings s = models::folder_tokenizer_settings(*model);
    std::string source = s.chat_template.value_or("");
    if (source.empty()) {
      std::fprintf(stderr, "foundry: warning: '%s' has no chat_template (tokenizer_config.json); using ChatML\n",
                   model->c_str());
      source = models::kChatMlTemplate;
    }
    nlohmann::ordered_json ctx = {{"messages", msgs},
                          {"add_generation_prompt", !*no_prompt},
                          {"bos_token", s.bos_token},
                          {"eos_token", s.eos_token}};
    if (!tools->empty()) ctx["tools"] = read_json_file(*tools, "tools file");
    std::string out = models::ChatTemplate(source).render(ctx.dump());
    std::fwrite(out.data(), 1, out.size(), stdout);
  });
}

}  // namespace foundry::cli
