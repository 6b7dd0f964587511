// `foundry serve`: an OpenAI-compatible HTTP server over serve::Engine (docs/serving.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "foundry/serve/engine.h"

namespace foundry::text {
class Tokenizer;
}

namespace foundry::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                 ///< 0: any free port
  std::string api_key;             ///< non-empty: every request needs "Authorization: Bearer KEY"
  std::string model_name;          ///< the model id clients name (--served-model-name)
  std::string chat_template;       ///< Jinja source ("" : ChatML, with a warning at start)
  std::string bos_token, eos_token;  ///< for the chat template
  size_t max_body_bytes = 8 << 20;   ///< larger bodies: 413
  double request_timeout_s = 600;    ///< a request still running after this is cancelled
};

/// Serves until `stop` is called (from any thread) or the process ends. `on_ready(host, port)` runs
/// once the socket listens.
class Server {
 public:
  Server(Engine& engine, const text::Tokenizer& tokenizer, ServerOptions options);
  ~Server();
  void run(const std::function<void(const std::string&, int)>& on_ready);
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace foundry::serve
