// Text generation with a KV cache: greedy or sampled decoding of several prompts at once (left
// padded), with HF's logits processors in HF's order.
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
  /// 0 or do_sample = false: greedy (argmax, first index on ties, as torch.argmax).
  bool do_sample = false;
  double temperature = 1.0;
  int64_t top_k = 0;           ///< 0: off
  double top_p = 1.0;          ///< 1: off
  double min_p = 0.0;          ///< 0: off
  double repetition_penalty = 1.0;  ///< HF's: divide positive / multiply negative logits of seen tokens
  /// Stop a row at any of these (empty: the model's eos ids); ignore_eos keeps generating.
  std::vector<int64_t> eos_token_ids;
  bool ignore_eos = false;
  std::optional<int64_t> pad_token_id;  ///< for left padding (default: the model's, else eos, else 0)
  uint64_t seed = 0;
  /// Called for each new token of each row (row, token) as it is chosen.
  std::function<void(int64_t, int64_t)> on_token;
};

struct GenerationResult {
  std::vector<std::vector<int64_t>> tokens;  ///< new tokens per prompt (up to and incl. EOS)
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t prefill_tokens = 0, decode_steps = 0;
};

/// Generates continuations of `prompts` (token ids; at least one token each).
GenerationResult generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                          const GenerationConfig& config = {});

/// Picks the next token from one row of logits (the processors above, then argmax or a draw).
int64_t select_token(std::vector<float> logits, const std::vector<int64_t>& context, const GenerationConfig& config,
                     Generator* gen);

}  // namespace foundry::models
