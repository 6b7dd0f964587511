#include "foundry/models/perplexity.h"

#include <chrono>
#include <cmath>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/error.h"
#include "foundry/ops/ops.h"

namespace foundry::models {

PerplexityResult perplexity(CausalLM& model, const std::vector<int64_t>& all_ids, int64_t context, int64_t max_tokens) {
  autograd::NoGradGuard no_grad;
  const int64_t n = max_tokens > 0 ? std::min<int64_t>(max_tokens, int64_t(all_ids.size())) : int64_t(all_ids.size());
  const int64_t limit = model.config().max_positions;
  FOUNDRY_CHECK_AS(ValueError, context >= 2 && (limit <= 0 || context <= limit),
                   "perplexity: context {} must be in [2, {}] (the model's positions)", context, limit);
  FOUNDRY_CHECK_AS(ValueError, n >= context, "perplexity: {} tokens are fewer than one window of {}", n, context);
  const int64_t vocab = model.config().vocab_size;
  for (int64_t i = 0; i < n; ++i)
    FOUNDRY_CHECK_AS(ValueError, all_ids[size_t(i)] >= 0 && all_ids[size_t(i)] < vocab,
                     "perplexity: token {} at position {} is outside the vocabulary ({})", all_ids[size_t(i)], i, vocab);
  const auto t0 = std::chrono::steady_clock::now();
  PerplexityResult r;
  double nll = 0;
  for (int64_t start = 0; start + context <= n; start += context) {
    std::vector<int64_t> window(all_ids.begin() + start, all_ids.begin() + start + context);
    Tensor logits = model.forward(tensor<int64_t>(window, {1, context})).to(DType::Float32).contiguous();
    const float* l = logits.data<float>();
    const int64_t V = logits.size(-1);
    for (int64_t t = 0; t + 1 < context; ++t) {
      const float* row = l + t * V;
      int64_t best = 0;
      for (int64_t v = 1; v < V; ++v)
        if (row[v] > row[best]) best = v;
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(double(row[v]) - double(row[best]));
      nll += double(row[best]) + std::log(sum) - double(row[window[size_t(t + 1)]]);
      r.argmax.push_back(best);
      ++r.tokens_scored;
    }
    ++r.windows;
  }
  r.mean_nll = nll / double(r.tokens_scored);
  // Not a perplexity: the model's logits held NaN (NaN or infinite weights, a broken config).
  FOUNDRY_CHECK_AS(ValueError, !std::isnan(r.mean_nll),
                   "perplexity: the model's log-probabilities are NaN (its weights or config give non-finite logits)");
  r.perplexity = std::exp(r.mean_nll);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace foundry::models
