// foundry chat: an interactive terminal chat with a model folder — the conversation rendered with
// its chat template, answers streamed as they are generated, the KV cache of the conversation so
// far reused between turns. /reset, /system TEXT, /exit; Ctrl-C stops the current answer.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "foundry/core/error.h"
#include "foundry/models/chat_template.h"
#include "foundry/models/generate.h"
#include "foundry/models/gguf.h"
#include "foundry/models/tokenizer_files.h"
#include "foundry/text/tokenizer.h"

namespace foundry::cli {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void on_sigint(int) { g_interrupted = 1; }

}  // namespace

void add_chat_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("chat", "Chat with a model in the terminal (/reset, /system TEXT, /exit; Ctrl-C stops an answer)");
  struct Options {
    std::string model, adapter, system, quantize;
    int64_t max_new_tokens = 512, top_k = 0;
    double temperature = 0.7, top_p = 1.0;
    uint64_t seed = 0;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--model", o->model, "Hugging Face model folder or GGUF file")->required();
  cmd->add_option("--adapter", o->adapter, "a LoRA adapter folder (PEFT)");
  cmd->add_option("--system", o->system, "a system message to start the conversation with");
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "tokens per answer at most (default 512)");
  cmd->add_option("--temperature", o->temperature, "sampling temperature (default 0.7; 0: greedy)")
      ->check(sampling_temperature());
  cmd->add_option("--top-p", o->top_p, "nucleus sampling (default 1: off)");
  cmd->add_option("--top-k", o->top_k, "top-k sampling (default 0: off)");
  cmd->add_option("--seed", o->seed, "sampling seed (default 0)")
      ->check(count_or_zero("seed", "seed 0"));
  cmd->add_option("--quantize", o->quantize, "weight format of the products (q8_0, q4_K, ...)");
  add_threads_option(cmd);
  cmd->callback([o] {
    ChatModel m = load_chat_model(o->model, o->quantize, o->adapter, "chat");
    std::shared_ptr<models::CausalLM> model = m.model;
    const text::Tokenizer* tok = m.tokenizer.get();
    std::string source = m.chat_template;
    if (source.empty()) {
      std::fprintf(stderr, "foundry: warning: '%s' has no chat_template (tokenizer_config.json); using ChatML\n", o->model.c_str());
      source = models::kChatMlTemplate;
    }
    const models::ChatTemplate chat(source);
    models::GenerationConfig g;
    g.max_new_tokens = o->max_new_tokens;
    g.do_sample = o->temperature > 0;
    g.temperature = o->temperature > 0 ? o->temperature : 1.0;
    g.top_p = o->top_p;
    g.top_k = o->top_k;
    g.seed = o->seed;
    g.eos_token_ids = model->config().eos_token_ids;
    for (const std::string& end : {m.eos_token, std::string("<|im_end|>"), std::string("<|eot_id|>"), std::string("<end_of_turn>")})
      if (auto id = end.empty() ? std::nullopt : tok->token_to_id(end)) g.eos_token_ids.push_back(int64_t(*id));
    nlohmann::json messages = nlohmann::json::array();
    if (!o->system.empty()) messages.push_back({{"role", "system"}, {"content", o->system}});
    models::PromptCache cache;
    struct sigaction sa {};
    sa.sa_handler = on_sigint;  // no SA_RESTART: Ctrl-C at the prompt interrupts the read
    sigaction(SIGINT, &sa, nullptr);
    const bool tty = isatty(fileno(stdin));
    std::fprintf(stderr, "chat with %s: /reset, /system TEXT, /exit (Ctrl-C stops an answer)\n", o->model.c_str());
    for (;;) {
      if (tty) std::fputs("> ", stdout), std::fflush(stdout);
      std::string line;
      g_interrupted = 0;
      if (!std::getline(std::cin, line)) {
        if (g_interrupted && !std::cin.eof()) {
          std::cin.clear();
          std::fputs("\n(Ctrl-D or /exit quits)\n", stderr);
          continue;
        }
        break;
      }
      if (line.empty()) continue;
      if (line == "/exit" || line == "/quit") break;
      if (line == "/reset") {
        messages = nlohmann::json::array();
        if (!o->system.empty()) messages.push_back({{"role", "system"}, {"content", o->system}});
        std::fputs("(conversation reset)\n", stdout);
        continue;
      }
      if (line.rfind("/system", 0) == 0) {
        o->system = line.size() > 8 ? line.substr(8) : "";
        messages = nlohmann::json::array();
        if (!o->system.empty()) messages.push_back({{"role", "system"}, {"content", o->system}});
        std::fputs("(new system message; conversation reset)\n", stdout);
        continue;
      }
      messages.push_back({{"role", "user"}, {"content", line}});
      // Ill-formed UTF-8 typed or piped in becomes U+FFFD, as the tokenizers read it.
      const std::string prompt = chat.apply(messages.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), true,
                                            m.bos_token, m.eos_token);
      std::vector<int64_t> ids;
      for (uint32_t id : tok->encode_ids(prompt, false)) ids.push_back(int64_t(id));
      const int64_t room = model->config().max_positions > 0 ? model->config().max_positions - int64_t(ids.size()) : g.max_new_tokens;
      if (room < 1) {
        std::fputs("(the conversation fills the model's context; /reset to start over)\n", stderr);
        messages.erase(messages.end() - 1);
        continue;
      }
      models::GenerationConfig turn = g;
      turn.max_new_tokens = std::min(g.max_new_tokens, room);
      std::vector<int64_t> generated;
      size_t printed = 0;
      g_interrupted = 0;
      turn.should_stop = [&](int64_t, const std::vector<int64_t>& gen) {
        generated = gen;
        std::string text = tok->decode(std::vector<uint32_t>(gen.begin(), gen.end()), true);
        const size_t safe = text::settled_text_length(text);
        if (safe > printed) {
          std::fwrite(text.data() + printed, 1, safe - printed, stdout);
          std::fflush(stdout);
          printed = safe;
        }
        return g_interrupted != 0;
      };
      models::GenerationResult r = models::generate(*model, ids, turn, cache);
      generated = r.tokens.front();
      std::string answer = tok->decode(std::vector<uint32_t>(generated.begin(), generated.end()), true);
      if (answer.size() > printed) std::fwrite(answer.data() + printed, 1, answer.size() - printed, stdout);
      std::fputs(g_interrupted ? " [stopped]\n" : "\n", stdout);
      std::fflush(stdout);
      messages.push_back({{"role", "assistant"}, {"content", answer}});
    }
  });
}

}  // namespace foundry::cli
