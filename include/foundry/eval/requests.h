// The request engine of model evaluation, with lm-evaluation-harness v0.4's semantics for causal
// models (lm_eval/models/huggingface.py, lm_eval/utils.py): loglikelihood of a continuation given a
// context, rolling loglikelihood of a whole text, and greedy generation until stop strings.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace foundry::models {
class CausalLM;
}
namespace foundry::text {
class Tokenizer;
}

namespace foundry::eval {

using Ids = std::vector<int64_t>;

struct LoglikelihoodRequest {
  Ids context, continuation;  ///< empty context: the prefix token stands for it
};
struct LoglikelihoodResult {
  double loglikelihood = 0;  ///< sum of the continuation tokens' log-probabilities (float32 log_softmax)
  bool is_greedy = false;    ///< every continuation token is the argmax at its position
};
struct RollingResult {
  double loglikelihood = 0;
  int64_t n_tokens = 0;
};
/// Per-token scores of a text (rolling windows, every token once): log p(token), and the mean and
/// standard deviation of log p under the model's distribution at that position (Min-K%++).
struct TokenScores {
  std::vector<float> logprob, mean, stddev;
};
struct GenerateRequest {
  std::string context;
  std::vector<std::string> until;  ///< the model's end-of-text string is always added
  int64_t max_gen_toks = 256;
};

class RequestEngine {
 public:
  /// `max_length` 0: the model's maximum positions (n_positions / max_position_embeddings), else
  /// 2048 as the harness. The tokenizer is needed for string requests and generation only.
  explicit RequestEngine(models::CausalLM& model, const text::Tokenizer* tokenizer = nullptr, int64_t max_length = 0);

  int64_t max_length() const { return max_length_; }
  /// Stands for an empty context and opens rolling windows: bos if the config has one, else eos.
  int64_t prefix_token() const { return prefix_token_; }

  /// Each request scores (context + continuation)[-(max_length + 1):][:-1]; the last
  /// len(continuation) positions score the continuation. Requests sharing the scored prefix (the
  /// choices of one multiple-choice item) run that prefix once through the KV cache; the others run
  /// in batches of similar length.
  std::vector<LoglikelihoodResult> loglikelihood(const std::vector<LoglikelihoodRequest>& requests);
  /// The harness's rolling windows (get_rolling_token_windows + make_disjoint_window, context_len
  /// 1, the prefix token first): every token scored exactly once.
  std::vector<RollingResult> loglikelihood_rolling(const std::vector<Ids>& texts);
  /// Per-token scores of each text through the harness's rolling windows (forensics).
  std::vector<TokenScores> token_scores(const std::vector<Ids>& texts);
  /// Greedy (argmax) continuation of each context, cut at the first stop string.
  std::vector<std::string> generate_until(const std::vector<GenerateRequest>& requests);

  /// The harness's _encode_pair: trailing spaces of the context move to the continuation; context
  /// and context + continuation are encoded whole (no special tokens) and the continuation's ids are
  /// the tail. An empty context gives an empty context (the prefix token stands for it).
  LoglikelihoodRequest encode_pair(const std::string& context, const std::string& continuation) const;
  Ids encode(const std::string& text) const;

  /// Requests that share no context with another run `batch_size` at a time in one left-padded
  /// forward (default 8).
  void set_batch_size(int64_t batch_size);
  int64_t batch_size() const { return batch_size_; }

  /// Forwards run so far, and prefix tokens whose computation the KV cache saved (for tests / stats).
  int64_t forwards() const { return forwards_; }
  int64_t shared_prefix_tokens_saved() const { return saved_tokens_; }

 private:
  // Runs the requests (shared prefixes through the KV cache, the rest batched) and hands each one's
  // rows of float32 log-probabilities [len(continuation), vocab] and argmaxes to `visit`
  // (nullptrs for an empty continuation).
  void score_continuations(const std::vector<LoglikelihoodRequest>& requests,
                           const std::function<void(size_t, const float*, const int64_t*)>& visit);
  const text::Tokenizer& tokenizer() const;
  models::CausalLM& model_;
  const text::Tokenizer* tokenizer_;
  int64_t max_length_ = 0, prefix_token_ = 0, eot_token_ = -1;
  int64_t forwards_ = 0, saved_tokens_ = 0, batch_size_ = 8;
};

/// The harness's windows for a rolling loglikelihood: (context, continuation) pairs, disjoint.
std::vector<std::pair<Ids, Ids>> rolling_windows(const Ids& tokens, int64_t prefix_token, int64_t max_length);

}  // namespace foundry::eval
