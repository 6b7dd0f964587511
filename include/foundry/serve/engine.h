// The serving engine: continuous (iteration-level) batching over a paged KV cache. Every decode
// step is one batched forward over all active sequences; new requests join between steps; long
// prompts are prefilled in chunks between decode steps so they don't stall the others; full prompt
// blocks are kept in a prefix cache so a prompt prefix shared by many requests (a system prompt)
// is computed and stored once. Each request has its own sampling parameters and can be cancelled;
// the queue is bounded. docs/serving.md.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "foundry/models/generate.h"

namespace foundry::models {
class CausalLM;
}

namespace foundry::serve {

struct EngineOptions {
  int64_t parallel = 4;         ///< sequences decoded together
  int64_t ctx_size = 0;         ///< each sequence's context in tokens (0: the model's maximum positions)
  int64_t block_size = 16;      ///< positions per KV block
  int64_t num_blocks = 0;       ///< 0: room for `parallel` full contexts plus as much again for the prefix cache
  int64_t prefill_chunk = 128;  ///< prompt tokens per prefill forward
  int64_t max_queue = 64;       ///< waiting requests beyond this are refused (HTTP 429)
  std::string kv_format;        ///< KV block format ("": the model's dtype; "q8_0", "f16", ...)
};

struct TokenEvent {
  int64_t token = 0;
  float logprob = 0;  ///< log p of the token under the model, before sampling filters (with Request::logprobs)
  std::vector<std::pair<int64_t, float>> top;       ///< the top_logprobs most likely tokens
};

/// Restricts which token may come next (constrained decoding, e.g. JSON): asked about candidates
/// in order of preference, told the chosen one; complete() ends the request with "stop".
struct TokenConstraint {
  virtual ~TokenConstraint() = default;
  virtual bool allows(int64_t token) = 0;
  virtual void accept(int64_t token) = 0;
  virtual bool complete() const = 0;
};

struct Request {
  std::vector<int64_t> prompt;
  /// max_new_tokens, do_sample, temperature, top_k, top_p, min_p, penalties, seed, eos ids, ignore_eos.
  models::GenerationConfig sampling;
  bool logprobs = false;      ///< fill TokenEvent::logprob
  int64_t top_logprobs = 0;  ///< and this many of the most likely tokens
  std::shared_ptr<TokenConstraint> constraint;
  /// Each generated token as it is chosen; returning false cancels (the client went away).
  std::function<bool(const TokenEvent&)> on_token;
  /// Called after each token with the generated tokens; true ends the request with "stop" (stop strings).
  std::function<bool(const std::vector<int64_t>&)> should_stop;
  /// Exactly once: "stop", "length", "cancelled" or "error: ..." and the numbers of prompt tokens and
  /// prompt tokens served from the prefix cache; by then stats() no longer counts the request active.
  std::function<void(const std::string& finish_reason, int64_t prompt_tokens, int64_t cached_tokens)> on_finish;
};

struct EngineStats {
  int64_t requests_total = 0, requests_rejected = 0, active = 0, waiting = 0;
  int64_t prompt_tokens = 0, cached_prompt_tokens = 0, generated_tokens = 0, decode_steps = 0;
  int64_t kv_blocks_total = 0, kv_blocks_used = 0, kv_blocks_cached = 0;
  double tokens_per_second = 0;  ///< generated tokens per second over the last few seconds
};

class Engine {
 public:
  Engine(models::CausalLM& model, EngineOptions options);
  ~Engine();  ///< finishes every request as "cancelled" and stops the scheduler
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Queues a request and returns its id; -1 when the queue is full. ValueError for a prompt that
  /// is empty, holds ids outside the vocabulary, or leaves no room to generate within ctx_size.
  int64_t submit(Request request);
  /// Cancels a queued or running request (its on_finish says "cancelled").
  void cancel(int64_t id);
  EngineStats stats() const;
  /// Runs `fn` on the scheduler's thread between steps (a model runs one forward at a time) and
  /// waits for it; its exception, if any, is rethrown here.
  void run_exclusive(const std::function<void()>& fn);
  int64_t ctx_size() const;
  models::CausalLM& model();
  const EngineOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace foundry::serve
