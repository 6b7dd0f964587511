// Text generation with a KV cache (HF v4.40 semantics): greedy, sampled or beam-search decoding
// of several prompts at once (left padded), HF's logits processors in HF's order, and
// speculative decoding with a smaller draft model.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "foundry/core/rng.h"
#include "foundry/models/pretrained.h"

namespace foundry::models {

struct GenerationConfig {
  int64_t max_new_tokens = 32;
  /// false (or temperature 0): greedy, argmax with the first index on ties, as torch.argmax.
  bool do_sample = false;
  double temperature = 1.0;
  int64_t top_k = 0;           ///< 0: off
  double top_p = 1.0;          ///< 1: off
  double min_p = 0.0;          ///< 0: off
  double typical_p = 1.0;      ///< 1: off (HF's TypicalLogitsWarper)
  double repetition_penalty = 1.0;  ///< HF's: divide positive / multiply negative scores of seen tokens
  /// OpenAI-style, over the generated tokens only: score -= presence x [count > 0] + frequency x count.
  double presence_penalty = 0.0, frequency_penalty = 0.0;
  int64_t no_repeat_ngram_size = 0;  ///< HF's: no n-gram of this size occurs twice (prompt included)
  // Beam search (num_beams > 1; not with do_sample).
  int64_t num_beams = 1;
  double length_penalty = 1.0;       ///< score = sum log p / generated_length ** length_penalty
  /// HF's early_stopping: 0 False (stop when no beam can beat the finished ones, heuristically),
  /// 1 True (stop at num_beams finished hypotheses), 2 "never" (the canonical bound).
  int early_stopping = 0;
  int64_t num_return_sequences = 1;  ///< <= num_beams with beam search, else 1
  /// Stop a row at any of these (empty: the model's eos ids); ignore_eos keeps generating.
  std::vector<int64_t> eos_token_ids;
  bool ignore_eos = false;
  std::optional<int64_t> pad_token_id;  ///< for left padding (default: the model's, else eos, else 0)
  uint64_t seed = 0;
  /// Called for each new token of each row (row, token) as it is chosen (not with beam search,
  /// whose tokens are only final at the end).
  std::function<void(int64_t, int64_t)> on_token;
  /// Called after each new token with the row's generated tokens; returning true ends the row
  /// (stop strings are built on this).
  std::function<bool(int64_t, const std::vector<int64_t>&)> should_stop;
};

struct GenerationResult {
  /// New tokens per prompt (up to and including EOS); with beam search, num_return_sequences
  /// sequences per prompt, best first, and `scores` their length-penalised log-probabilities.
  std::vector<std::vector<int64_t>> tokens;
  std::vector<double> scores;
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t prefill_tokens = 0, decode_steps = 0;
  /// Speculative decoding: draft tokens proposed and accepted.
  int64_t draft_proposed = 0, draft_accepted = 0;
};

/// Generates continuations of `prompts` (token ids; at least one token each).
GenerationResult generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                          const GenerationConfig& config = {});

/// One sequence's KV cache kept between generate() calls: a prompt that starts with tokens already
/// cached (a chat's earlier turns, a shared system prompt) runs only the rest through the model.
struct PromptCache {
  KVCache cache;
  std::vector<int64_t> tokens;  ///< what `cache` holds, in order
};

/// generate() for one prompt (greedy or sampled), reusing and then extending `reuse`.
GenerationResult generate(CausalLM& model, const std::vector<int64_t>& prompt, const GenerationConfig& config,
                          PromptCache& reuse);

/// Greedy speculative decoding of one prompt: `draft` (same vocabulary) proposes `lookahead`
/// tokens, `model` checks them in one forward pass and keeps the agreeing prefix plus its own next
/// token, so the output equals plain greedy decoding with `model`.
GenerationResult generate_speculative(CausalLM& model, CausalLM& draft, const std::vector<int64_t>& prompt,
                                      const GenerationConfig& config = {}, int64_t lookahead = 4);

/// HF's logits processors for one row of scores: repetition penalty, n-gram blocking, then the
/// presence/frequency penalties. `context` is prompt + generated, `prompt_len` where generation began.
void process_scores(std::vector<float>& scores, const std::vector<int64_t>& context, size_t prompt_len,
                    const GenerationConfig& config);
/// Picks the next token from processed scores: argmax, or warpers (temperature, top-k, top-p,
/// min-p, typical-p) then a draw from `gen`.
int64_t choose_token(std::vector<float> scores, const GenerationConfig& config, Generator* gen);

}  // namespace foundry::models
