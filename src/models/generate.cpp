#include "foundry/models/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_set>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/error.h"
#include "foundry/core/rng.h"
#include "foundry/ops/ops.h"

namespace foundry::models {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// HF's TopKLogitsWarper: keep the k largest (ties with the k-th kept too).
void top_k_filter(std::vector<float>& l, int64_t k) {
  if (k <= 0 || k >= int64_t(l.size())) return;
  std::vector<float> sorted = l;
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
  const float kth = sorted[size_t(k - 1)];
  for (float& v : l)
    if (v < kth) v = kNegInf;
}

std::vector<double> softmax_of(const std::vector<float>& l) {
  const float m = *std::max_element(l.begin(), l.end());
  std::vector<double> p(l.size());
  double z = 0;
  for (size_t i = 0; i < l.size(); ++i) z += p[i] = l[i] == kNegInf ? 0.0 : std::exp(double(l[i]) - double(m));
  for (double& v : p) v /= z;
  return p;
}

// HF's TopPLogitsWarper: drop the tokens whose cumulative probability, summed from the least
// likely up, stays <= 1 - top_p (the most likely token is always kept).
void top_p_filter(std::vector<float>& l, double top_p) {
  if (top_p >= 1.0) return;
  std::vector<double> p = softmax_of(l);
  std::vector<size_t> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return l[a] < l[b]; });  // ascending
  double cum = 0;
  for (size_t r = 0; r + 1 < order.size(); ++r) {
    cum += p[order[r]];
    if (cum <= 1.0 - top_p) l[order[r]] = kNegInf;
    else break;
  }
}

// HF's MinPLogitsWarper: drop tokens with probability below min_p x the top probability.
void min_p_filter(std::vector<float>& l, double min_p) {
  if (min_p <= 0) return;
  std::vector<double> p = softmax_of(l);
  const double top = *std::max_element(p.begin(), p.end());
  for (size_t i = 0; i < l.size(); ++i)
    if (p[i] < min_p * top) l[i] = kNegInf;
}

}  // namespace

int64_t select_token(std::vector<float> l, const std::vector<int64_t>& context, const GenerationConfig& cfg,
                     Generator* gen) {
  if (cfg.repetition_penalty != 1.0) {
    std::unordered_set<int64_t> seen(context.begin(), context.end());
    for (int64_t t : seen) {
      if (t < 0 || t >= int64_t(l.size())) continue;
      float& v = l[size_t(t)];
      v = v < 0 ? float(v * cfg.repetition_penalty) : float(v / cfg.repetition_penalty);
    }
  }
  const bool sample = cfg.do_sample && cfg.temperature > 0;
  if (!sample) return int64_t(std::max_element(l.begin(), l.end()) - l.begin());
  if (cfg.temperature != 1.0)
    for (float& v : l) v = float(v / cfg.temperature);
  top_k_filter(l, cfg.top_k);
  top_p_filter(l, cfg.top_p);
  min_p_filter(l, cfg.min_p);
  std::vector<double> p = softmax_of(l);
  double u = rand({}, DType::Float64, gen).item<double>();
  double cum = 0;
  int64_t last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    last = int64_t(i);
    cum += p[i];
    if (u < cum) return int64_t(i);
  }
  return last;  // rounding left u just above the total
}

GenerationResult generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                          const GenerationConfig& cfg) {
  autograd::NoGradGuard no_grad;
  const ModelConfig& mc = model.config();
  FOUNDRY_CHECK_AS(ValueError, !prompts.empty(), "generate: no prompts");
  FOUNDRY_CHECK_AS(ValueError, cfg.max_new_tokens >= 0, "generate: max_new_tokens must be >= 0");
  const int64_t B = int64_t(prompts.size());
  int64_t longest = 0;
  for (const auto& p : prompts) {
    FOUNDRY_CHECK_AS(ValueError, !p.empty(), "generate: every prompt needs at least one token");
    for (int64_t t : p)
      if (t < 0 || t >= mc.vocab_size)
        raise<ValueError>("generate: token id {} is outside the vocabulary (size {})", t, mc.vocab_size);
    longest = std::max<int64_t>(longest, int64_t(p.size()));
  }
  std::vector<int64_t> eos = cfg.eos_token_ids.empty() ? mc.eos_token_ids : cfg.eos_token_ids;
  int64_t pad = cfg.pad_token_id.value_or(mc.pad_token_id.value_or(eos.empty() ? 0 : eos[0]));
  // Left padding: every row's last prompt token sits in the same column.
  std::vector<int64_t> ids(size_t(B * longest), pad), mask(size_t(B * longest), 0);
  std::vector<std::vector<int64_t>> context(prompts.begin(), prompts.end());
  for (int64_t b = 0; b < B; ++b) {
    const auto& p = prompts[size_t(b)];
    const int64_t off = longest - int64_t(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      ids[size_t(b * longest + off) + i] = p[i];
      mask[size_t(b * longest + off) + i] = 1;
    }
  }
  Generator gen(cfg.seed);
  GenerationResult res;
  res.tokens.resize(size_t(B));
  KVCache cache = model.make_cache(B, longest + std::max<int64_t>(cfg.max_new_tokens, 1));
  Tensor full_mask = tensor<int64_t>(mask, {B, longest});
  auto t0 = std::chrono::steady_clock::now();
  Tensor logits = model.forward(tensor<int64_t>(ids, {B, longest}), full_mask, &cache);
  res.prefill_seconds = seconds_since(t0);
  res.prefill_tokens = B * longest;
  std::vector<bool> done(size_t(B), false);
  t0 = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < cfg.max_new_tokens; ++step) {
    Tensor last = logits.select(1, logits.size(1) - 1).contiguous();  // [B, V]
    const float* lp = last.data<float>();
    std::vector<int64_t> next(size_t(B), pad);
    for (int64_t b = 0; b < B; ++b) {
      if (done[size_t(b)]) continue;
      std::vector<float> row(lp + b * mc.vocab_size, lp + (b + 1) * mc.vocab_size);
      int64_t tok = select_token(std::move(row), context[size_t(b)], cfg, &gen);
      next[size_t(b)] = tok;
      context[size_t(b)].push_back(tok);
      res.tokens[size_t(b)].push_back(tok);
      if (cfg.on_token) cfg.on_token(b, tok);
      if (!cfg.ignore_eos && std::find(eos.begin(), eos.end(), tok) != eos.end()) done[size_t(b)] = true;
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; }) || step + 1 == cfg.max_new_tokens) break;
    // As HF: finished rows keep going with padding tokens, and the mask grows by ones for all rows.
    full_mask = cat({full_mask, ones({B, 1}, DType::Int64)}, 1);
    logits = model.forward(tensor<int64_t>(next, {B, 1}), full_mask, &cache);
    res.decode_steps++;
  }
  res.decode_seconds = seconds_since(t0);
  return res;
}

}  // namespace foundry::models
