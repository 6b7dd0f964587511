// Perplexity of a causal LM over a token stream, as llama.cpp's `perplexity` and HF's sliding
// evaluation compute it: the stream is cut into windows of `context` tokens; within a window every
// token after the first is scored from the ones before it; ppl = exp(mean negative log-likelihood).
#pragma once

#include <cstdint>
#include <vector>

#include "foundry/models/pretrained.h"

namespace foundry::models {

struct PerplexityResult {
  double perplexity = 0, mean_nll = 0;
  int64_t tokens_scored = 0, windows = 0;
  double seconds = 0;
  /// Per scored token, the model's top-1 prediction (for agreement rates between two models).
  std::vector<int64_t> argmax;
};

/// ids: the tokenized text; context >= 2 (and at most the model's positions); max_tokens > 0 cuts
/// the stream to its first max_tokens tokens. ValueError for streams shorter than a window.
PerplexityResult perplexity(CausalLM& model, const std::vector<int64_t>& ids, int64_t context, int64_t max_tokens = 0);

}  // namespace foundry::models
