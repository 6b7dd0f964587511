// foundry serve: an OpenAI-compatible server (docs/serving.md).
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "foundry/core/error.h"
#include "foundry/models/chat_template.h"
#include "foundry/models/gguf.h"
#include "foundry/models/tokenizer_files.h"
#include "foundry/serve/server.h"
#include "foundry/text/tokenizer.h"

namespace foundry::cli {

namespace {
serve::Server* g_server = nullptr;
void on_signal(int) {
  if (g_server) g_server->stop();
}
}  // namespace

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "Serve a model over HTTP with OpenAI's API (completions, chat, streaming)");
  struct Options {
    std::string model, adapter, host = "127.0.0.1", api_key, quantize, kv_cache, name;
    int port = 8080;
    int64_t parallel = 4, ctx_size = 0, max_queue = 64, block_size = 16, prefill_chunk = 128;
    double timeout = 600;
    size_t max_body = 8 << 20;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--model", o->model, "Hugging Face model folder or GGUF file")->required();
  cmd->add_option("--adapter", o->adapter, "a LoRA adapter folder (PEFT)");
  cmd->add_option("--host", o->host, "address to listen on (default 127.0.0.1: this machine only)");
  cmd->add_option("--port", o->port, "port (default 8080; 0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' on every request")
      ->check(non_empty("--api-key", "no key"));  // an unset shell variable left the server open
  cmd->add_option("--parallel", o->parallel, "sequences decoded together (default 4)");
  cmd->add_option("--ctx-size", o->ctx_size, "each sequence's context in tokens (default: the model's maximum positions)");
  cmd->add_option("--quantize", o->quantize, "weight format of the products (q8_0, q4_K, ...)");
  cmd->add_option("--kv-cache", o->kv_cache, "KV cache format (f16, bf16, q8_0, ...; default: the model's dtype)");
  cmd->add_option("--served-model-name", o->name, "the model id clients use (default: the folder's name)");
  cmd->add_option("--max-queue", o->max_queue, "waiting requests beyond which the server answers 429 (default 64)");
  cmd->add_option("--timeout", o->timeout, "seconds after which a request is cancelled (default 600)");
  cmd->add_option("--block-size", o->block_size, "positions per KV cache block (default 16)");
  cmd->add_option("--prefill-chunk", o->prefill_chunk, "prompt tokens per prefill forward (default 128)");
  cmd->add_option("--max-body", o->max_body, "largest request body in bytes (default 8 MiB; larger: 413)")
      ->check(CLI::Range(size_t(1), size_t(1) << 40));
  add_threads_option(cmd);
  cmd->callback([o] {
    ChatModel m = load_chat_model(o->model, o->quantize, o->adapter, "serve");
    serve::ServerOptions so;
    so.host = o->host;
    so.port = o->port;
    so.api_key = o->api_key;
    std::filesystem::path p(o->model);
    if (p.filename().empty()) p = p.parent_path();
    so.model_name = o->name.empty() ? p.filename().string() : o->name;
    so.request_timeout_s = o->timeout;
    so.max_body_bytes = o->max_body;
    so.chat_template = m.chat_template;
    so.bos_token = m.bos_token;
    so.eos_token = m.eos_token;
    if (so.chat_template.empty())
      std::fprintf(stderr, "foundry: warning: '%s' has no chat_template (tokenizer_config.json); chat uses ChatML\n",
                   o->model.c_str());
    serve::EngineOptions eo;
    eo.parallel = o->parallel;
    eo.ctx_size = o->ctx_size;
    eo.max_queue = o->max_queue;
    eo.block_size = o->block_size;
    eo.prefill_chunk = o->prefill_chunk;
    eo.kv_format = o->kv_cache;
    serve::Engine engine(*m.model, eo);
    serve::Server server(engine, *m.tokenizer, so);
    g_server = &server;
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    server.run([&](const std::string& host, int port) {
      std::printf("listening on http://%s:%d\n", host.c_str(), port);
      std::fflush(stdout);
    });
    g_server = nullptr;
  });
}

}  // namespace foundry::cli
