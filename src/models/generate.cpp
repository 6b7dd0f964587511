#include "foundry/models/generate.h"
#include "foundry/models/seq2seq.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/error.h"
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
    if (cum > 1.0 - top_p) break;
    l[order[r]] = kNegInf;
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

// HF's TypicalLogitsWarper: keep the tokens whose surprisal is closest to the entropy until
// their probability mass reaches typical_p.
void typical_filter(std::vector<float>& l, double mass) {
  if (mass >= 1.0) return;
  std::vector<double> p = softmax_of(l);
  double ent = 0;
  for (double v : p)
    if (v > 0) ent -= v * std::log(v);
  std::vector<double> shifted(l.size());
  for (size_t i = 0; i < l.size(); ++i)
    shifted[i] = p[i] > 0 ? std::abs(-std::log(p[i]) - ent) : std::numeric_limits<double>::infinity();
  std::vector<size_t> order(l.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return shifted[a] < shifted[b]; });
  size_t last = 0;
  double cum = 0;
  while (last < order.size()) {
    cum += p[order[last]];
    if (cum >= mass) break;
    ++last;
  }
  last = std::min(last, order.size() - 1);
  const double cut = shifted[order[last]];
  for (size_t r = 1; r < order.size(); ++r)
    if (shifted[order[r]] > cut) l[order[r]] = kNegInf;
}

std::vector<float> log_softmax_row(const float* x, int64_t n) {
  const float m = *std::max_element(x, x + n);
  double z = 0;
  for (int64_t i = 0; i < n; ++i) z += std::exp(double(x[i]) - double(m));
  const float lse = float(double(m) + std::log(z));
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = x[i] - lse;
  return out;
}

struct Batch {
  int64_t rows = 0, width = 0;
  std::vector<int64_t> ids, mask;
  /// The attention mask, or none when no row is padded: a mask of ones means no mask (as in HF),
  /// and without one a decode step neither grows nor compares it.
  Tensor mask_tensor() const {
    if (std::all_of(mask.begin(), mask.end(), [](int64_t m) { return m == 1; })) return Tensor();
    return tensor<int64_t>(mask, {rows, width});
  }
};

// Left-pads `prompts` (each repeated `copies` times) so every row's last token shares a column.
Batch left_pad(const std::vector<std::vector<int64_t>>& prompts, int64_t copies, int64_t pad, int64_t vocab) {
  Batch b;
  for (const auto& p : prompts) {
    FOUNDRY_CHECK_AS(ValueError, !p.empty(), "generate: every prompt needs at least one token");
    for (int64_t t : p)
      if (t < 0 || t >= vocab) raise<ValueError>("generate: token id {} is outside the vocabulary (size {})", t, vocab);
    b.width = std::max<int64_t>(b.width, int64_t(p.size()));
  }
  b.rows = int64_t(prompts.size()) * copies;
  b.ids.assign(size_t(b.rows * b.width), pad);
  b.mask.assign(size_t(b.rows * b.width), 0);
  for (int64_t r = 0; r < b.rows; ++r) {
    const auto& p = prompts[size_t(r / copies)];
    const size_t off = size_t(r * b.width + b.width - int64_t(p.size()));
    for (size_t i = 0; i < p.size(); ++i) {
      b.ids[off + i] = p[i];
      b.mask[off + i] = 1;
    }
  }
  return b;
}

struct Hypothesis {
  double score;
  std::vector<int64_t> tokens;  // generated tokens
  bool ended_by_eos;
};

// HF's BeamHypotheses: the num_beams best finished sequences of one prompt.
struct Hypotheses {
  int64_t num_beams;
  double length_penalty;
  int early_stopping;
  int64_t max_new_tokens;
  std::vector<Hypothesis> beams;
  double worst = 1e9;

  void add(std::vector<int64_t> tokens, double sum_logprobs, int64_t generated_len, bool eos) {
    const double score = sum_logprobs / std::pow(double(generated_len), length_penalty);
    if (int64_t(beams.size()) < num_beams || score > worst) {
      beams.push_back({score, std::move(tokens), eos});
      if (int64_t(beams.size()) > num_beams) {
        std::vector<std::pair<double, size_t>> sorted;
        for (size_t i = 0; i < beams.size(); ++i) sorted.push_back({beams[i].score, i});
        std::sort(sorted.begin(), sorted.end());
        beams.erase(beams.begin() + std::ptrdiff_t(sorted[0].second));
        worst = sorted[1].first;
      } else {
        worst = std::min(score, worst);
      }
    }
  }

  bool is_done(double best_sum_logprobs, int64_t generated_len) const {
    if (int64_t(beams.size()) < num_beams) return false;
    if (early_stopping == 1) return true;
    const int64_t len = early_stopping == 2 && length_penalty > 0 ? max_new_tokens : generated_len;
    return worst >= best_sum_logprobs / std::pow(double(len), length_penalty);
  }
};

GenerationResult beam_search(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                             const GenerationConfig& cfg, const std::vector<int64_t>& eos, int64_t pad) {
  const ModelConfig& mc = model.config();
  const int64_t B = int64_t(prompts.size()), nb = cfg.num_beams, V = mc.vocab_size;
  FOUNDRY_CHECK_AS(ValueError, !cfg.do_sample, "generate: beam sampling (num_beams > 1 with do_sample) is not supported");
  FOUNDRY_CHECK_AS(ValueError, cfg.num_return_sequences >= 1 && cfg.num_return_sequences <= nb,
                   "generate: num_return_sequences ({}) must be in 1..num_beams ({})", cfg.num_return_sequences, nb);
  FOUNDRY_CHECK_AS(ValueError, cfg.max_new_tokens >= 1, "generate: beam search needs max_new_tokens >= 1");
  Batch batch = left_pad(prompts, nb, pad, V);
  const int64_t R = batch.rows;
  GenerationResult res;
  KVCache cache = model.make_cache(R, batch.width + cfg.max_new_tokens);
  Tensor mask = batch.mask_tensor();
  auto t0 = std::chrono::steady_clock::now();
  Tensor logits = model.forward(tensor<int64_t>(batch.ids, {R, batch.width}), mask, &cache, 1);
  res.prefill_seconds = seconds_since(t0);
  res.prefill_tokens = R * batch.width;
  t0 = std::chrono::steady_clock::now();

  std::vector<std::vector<int64_t>> context(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) context[size_t(r)] = prompts[size_t(r / nb)];
  std::vector<float> beam_scores(size_t(R), 0.f);
  for (int64_t r = 0; r < R; ++r)
    if (r % nb) beam_scores[size_t(r)] = -1e9f;
  std::vector<Hypotheses> hyps(size_t(B), Hypotheses{nb, cfg.length_penalty, cfg.early_stopping, cfg.max_new_tokens, {}});
  std::vector<bool> done(size_t(B), false);
  const std::unordered_set<int64_t> eos_set(eos.begin(), eos.end());
  const int64_t keep = std::max<int64_t>(2, 1 + int64_t(eos.size())) * nb;
  int64_t generated = 0;
  while (true) {
    Tensor last = logits.select(1, logits.size(1) - 1).contiguous();
    const float* lp = last.data<float>();
    std::vector<int64_t> next_tokens(size_t(R), pad), next_rows(size_t(R), 0);
    std::vector<float> next_scores(size_t(R), 0.f);
    for (int64_t b = 0; b < B; ++b) {
      if (done[size_t(b)]) {
        for (int64_t j = 0; j < nb; ++j) next_rows[size_t(b * nb + j)] = b * nb;
        continue;
      }
      // Candidates over all beams of this prompt: (score, flat index beam * V + token).
      std::vector<std::pair<float, int64_t>> cand;
      cand.reserve(size_t(nb * V));
      for (int64_t j = 0; j < nb; ++j) {
        const int64_t r = b * nb + j;
        std::vector<float> s = log_softmax_row(lp + r * V, V);
        const size_t prompt_len = prompts[size_t(b)].size();
        process_scores(s, context[size_t(r)], prompt_len, cfg);
        for (int64_t t = 0; t < V; ++t) cand.push_back({s[size_t(t)] + beam_scores[size_t(r)], j * V + t});
      }
      const int64_t k = std::min<int64_t>(keep, int64_t(cand.size()));
      std::partial_sort(cand.begin(), cand.begin() + k, cand.end(), [](const auto& x, const auto& y) {
        return x.first > y.first || (x.first == y.first && x.second < y.second);
      });
      int64_t filled = 0;
      for (int64_t rank = 0; rank < k && filled < nb; ++rank) {
        const auto [score, flat] = cand[size_t(rank)];
        const int64_t row = b * nb + flat / V, tok = flat % V;
        if (!cfg.ignore_eos && eos_set.count(tok)) {
          if (rank >= nb) continue;
          std::vector<int64_t> gen(context[size_t(row)].begin() + std::ptrdiff_t(prompts[size_t(b)].size()),
                                   context[size_t(row)].end());
          hyps[size_t(b)].add(std::move(gen), score, generated + 1, true);
        } else {
          next_tokens[size_t(b * nb + filled)] = tok;
          next_scores[size_t(b * nb + filled)] = score;
          next_rows[size_t(b * nb + filled)] = row;
          ++filled;
        }
      }
      done[size_t(b)] = hyps[size_t(b)].is_done(cand[0].first, generated + 1);
    }
    std::vector<std::vector<int64_t>> new_context(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      new_context[size_t(r)] = context[size_t(next_rows[size_t(r)])];
      new_context[size_t(r)].push_back(next_tokens[size_t(r)]);
    }
    context = std::move(new_context);
    beam_scores = next_scores;
    cache.reorder(next_rows);
    ++generated;
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; }) || generated >= cfg.max_new_tokens) break;
    if (mask.defined()) mask = cat({mask, ones({R, 1}, DType::Int64)}, 1);
    logits = model.forward(tensor<int64_t>(next_tokens, {R, 1}), mask, &cache, 1);
    res.decode_steps++;
  }
  for (int64_t b = 0; b < B; ++b) {
    if (done[size_t(b)]) continue;
    for (int64_t j = 0; j < nb; ++j) {
      const int64_t r = b * nb + j;
      std::vector<int64_t> gen(context[size_t(r)].begin() + std::ptrdiff_t(prompts[size_t(b)].size()),
                               context[size_t(r)].end());
      hyps[size_t(b)].add(std::move(gen), beam_scores[size_t(r)], generated, false);
    }
  }
  for (int64_t b = 0; b < B; ++b) {
    std::vector<Hypothesis> sorted = hyps[size_t(b)].beams;
    std::stable_sort(sorted.begin(), sorted.end(), [](const Hypothesis& x, const Hypothesis& y) { return x.score > y.score; });
    for (int64_t i = 0; i < cfg.num_return_sequences && i < int64_t(sorted.size()); ++i) {
      std::vector<int64_t> t = sorted[size_t(i)].tokens;
      if (sorted[size_t(i)].ended_by_eos) t.push_back(eos[0]);
      res.tokens.push_back(std::move(t));
      res.scores.push_back(sorted[size_t(i)].score);
    }
  }
  res.decode_seconds = seconds_since(t0);
  return res;
}

std::vector<int64_t> resolve_eos(const CausalLM& model, const GenerationConfig& cfg) {
  return cfg.eos_token_ids.empty() ? model.config().eos_token_ids : cfg.eos_token_ids;
}

int64_t resolve_pad(const CausalLM& model, const GenerationConfig& cfg, const std::vector<int64_t>& eos) {
  return cfg.pad_token_id.value_or(model.config().pad_token_id.value_or(eos.empty() ? 0 : eos[0]));
}

}  // namespace

void process_scores(std::vector<float>& s, const std::vector<int64_t>& context, size_t prompt_len,
                    const GenerationConfig& cfg) {
  const int64_t V = int64_t(s.size());
  if (cfg.repetition_penalty != 1.0) {
    std::unordered_set<int64_t> seen(context.begin(), context.end());
    for (int64_t t : seen) {
      if (t < 0 || t >= V) continue;
      float& v = s[size_t(t)];
      v = v < 0 ? float(v * cfg.repetition_penalty) : float(v / cfg.repetition_penalty);
    }
  }
  const int64_t n = cfg.no_repeat_ngram_size;
  if (n > 0 && int64_t(context.size()) + 1 >= n) {
    // Ban every token that would complete an n-gram already present.
    const size_t pre = size_t(n - 1);
    for (size_t i = 0; i + size_t(n) <= context.size(); ++i)
      if (std::equal(context.begin() + std::ptrdiff_t(i), context.begin() + std::ptrdiff_t(i + pre),
                     context.end() - std::ptrdiff_t(pre))) {
        const int64_t t = context[i + pre];
        if (t >= 0 && t < V) s[size_t(t)] = kNegInf;
      }
  }
  if (cfg.presence_penalty != 0 || cfg.frequency_penalty != 0) {
    std::unordered_map<int64_t, int64_t> counts;
    for (size_t i = prompt_len; i < context.size(); ++i) counts[context[i]]++;
    for (const auto& [t, c] : counts)
      if (t >= 0 && t < V) s[size_t(t)] -= float(cfg.presence_penalty + cfg.frequency_penalty * double(c));
  }
}

namespace {

// std::max_element's answer: the first index of the largest score (a leading NaN wins, later NaNs
// never do). The branchy scan over a 32k vocabulary was ~1% of a decode step; this takes the
// maximum four lanes at a time (maxps(x, m) is x > m ? x : m, so NaNs are passed over), then finds
// its first position.
int64_t first_max_index(const float* s, int64_t n) {
  if (n <= 0 || std::isnan(s[0])) return 0;
  float m = s[0];
  int64_t i = 0;
#if defined(__SSE2__)
  __m128 m0 = _mm_set1_ps(m), m1 = m0, m2 = m0, m3 = m0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm_max_ps(_mm_loadu_ps(s + i), m0);
    m1 = _mm_max_ps(_mm_loadu_ps(s + i + 4), m1);
    m2 = _mm_max_ps(_mm_loadu_ps(s + i + 8), m2);
    m3 = _mm_max_ps(_mm_loadu_ps(s + i + 12), m3);
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, _mm_max_ps(_mm_max_ps(m0, m1), _mm_max_ps(m2, m3)));
  for (float v : lanes) m = v > m ? v : m;
#endif
  for (; i < n; ++i) m = s[i] > m ? s[i] : m;
  int64_t k = 0;
#if defined(__SSE2__)
  const __m128 target = _mm_set1_ps(m);
  for (; k + 4 <= n; k += 4)
    if (const int hit = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(s + k), target))) return k + __builtin_ctz(unsigned(hit));
#endif
  for (; k < n; ++k)
    if (s[k] == m) return k;
  return 0;
}

// Greedy decoding with no score processing: the token is the argmax of the model's row as it is.
bool plain_greedy(const GenerationConfig& cfg) {
  return !(cfg.do_sample && cfg.temperature > 0) && cfg.repetition_penalty == 1.0 && cfg.no_repeat_ngram_size <= 0 &&
         cfg.presence_penalty == 0 && cfg.frequency_penalty == 0;
}

}  // namespace

int64_t choose_token(std::vector<float> l, const GenerationConfig& cfg, Generator* gen) {
  const bool sample = cfg.do_sample && cfg.temperature > 0;
  if (!sample) return first_max_index(l.data(), int64_t(l.size()));
  if (cfg.temperature != 1.0)
    for (float& v : l) v = float(v / cfg.temperature);
  top_k_filter(l, cfg.top_k);
  top_p_filter(l, cfg.top_p);
  min_p_filter(l, cfg.min_p);
  typical_filter(l, cfg.typical_p);
  std::vector<double> p = softmax_of(l);
  const double u = rand({}, DType::Float64, gen).item<double>();
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

namespace {

// Greedy / sampled decoding of all rows; with `reuse` (one prompt) the cached prefix is skipped.
GenerationResult sample_rows(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                             const GenerationConfig& cfg, PromptCache* reuse) {
  const ModelConfig& mc = model.config();
  FOUNDRY_CHECK_AS(ValueError, cfg.num_return_sequences == 1, "generate: num_return_sequences > 1 needs beam search");
  const std::vector<int64_t> eos = resolve_eos(model, cfg);
  const int64_t pad = resolve_pad(model, cfg, eos);
  const int64_t B = int64_t(prompts.size());
  Batch batch = left_pad(prompts, 1, pad, mc.vocab_size);
  const int64_t need = batch.width + std::max<int64_t>(cfg.max_new_tokens, 1);
  KVCache local;
  KVCache* cache = &local;
  int64_t cached = 0;
  if (reuse) {
    const std::vector<int64_t>& p = prompts[0];
    // At least the last prompt token runs, to give the next token's logits.
    while (cached < int64_t(reuse->tokens.size()) && cached + 1 < int64_t(p.size()) &&
           reuse->tokens[size_t(cached)] == p[size_t(cached)])
      ++cached;
    if (reuse->cache.batch() != 1) {
      reuse->cache = model.make_cache(1, need);
      cached = 0;
    }
    // Doubling amortises growth; a recurrent cache's capacity is already unbounded (INT64_MAX).
    const int64_t capacity = reuse->cache.capacity();
    reuse->cache.reserve(std::max<int64_t>(need, capacity > INT64_MAX / 2 ? capacity : 2 * capacity));
    // A recurrent state continues only from exactly what it has seen; an encoder-decoder model's
    // prompt is its encoder input, encoded anew.
    if ((model.recurrent() && cached < reuse->cache.length()) || dynamic_cast<Seq2SeqLM*>(&model)) cached = 0;
    reuse->cache.truncate(std::min(cached, reuse->cache.length()));
    cached = reuse->cache.length();
    reuse->tokens.assign(p.begin(), p.begin() + cached);
    cache = &reuse->cache;
  } else {
    local = model.make_cache(B, need);
  }
  std::vector<std::vector<int64_t>> context(prompts.begin(), prompts.end());
  Generator gen(cfg.seed);
  GenerationResult res;
  res.tokens.resize(size_t(B));
  Tensor mask;
  Tensor input;
  if (reuse) {
    std::vector<int64_t> rest(prompts[0].begin() + cached, prompts[0].end());
    input = tensor<int64_t>(rest, {1, int64_t(rest.size())});
    reuse->tokens.insert(reuse->tokens.end(), rest.begin(), rest.end());
  } else {
    mask = batch.mask_tensor();
    input = tensor<int64_t>(batch.ids, {B, batch.width});
  }
  auto t0 = std::chrono::steady_clock::now();
  Tensor logits = model.forward(input, mask, cache, 1);
  res.prefill_seconds = seconds_since(t0);
  res.prefill_tokens = input.numel();
  std::vector<bool> done(size_t(B), false);
  t0 = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < cfg.max_new_tokens; ++step) {
    Tensor last = logits.select(1, logits.size(1) - 1).contiguous();  // [B, V]
    const float* lp = last.data<float>();
    std::vector<int64_t> next(size_t(B), pad);
    for (int64_t b = 0; b < B; ++b) {
      if (done[size_t(b)]) continue;
      int64_t tok;
      if (plain_greedy(cfg)) {
        tok = first_max_index(lp + b * mc.vocab_size, mc.vocab_size);
      } else {
        std::vector<float> row(lp + b * mc.vocab_size, lp + (b + 1) * mc.vocab_size);
        process_scores(row, context[size_t(b)], prompts[size_t(b)].size(), cfg);
        tok = choose_token(std::move(row), cfg, &gen);
      }
      next[size_t(b)] = tok;
      context[size_t(b)].push_back(tok);
      res.tokens[size_t(b)].push_back(tok);
      if (cfg.on_token) cfg.on_token(b, tok);
      if (!cfg.ignore_eos && std::find(eos.begin(), eos.end(), tok) != eos.end()) done[size_t(b)] = true;
      if (cfg.should_stop && cfg.should_stop(b, res.tokens[size_t(b)])) done[size_t(b)] = true;
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; }) || step + 1 == cfg.max_new_tokens) break;
    // As HF: finished rows keep going with padding tokens, and the mask grows by ones for all rows.
    if (mask.defined()) mask = cat({mask, ones({B, 1}, DType::Int64)}, 1);
    logits = model.forward(tensor<int64_t>(next, {B, 1}), mask, cache, 1);
    if (reuse) reuse->tokens.push_back(next[0]);
    res.decode_steps++;
  }
  res.decode_seconds = seconds_since(t0);
  return res;
}

// The settings HF's logits processors refuse (temperature must be > 0 there; 0 is greedy here),
// and NaN anywhere: a sampler given them returned tokens from meaningless scores.
void check_settings(const GenerationConfig& cfg) {
  const auto in = [](double v, double lo, double hi) { return v >= lo && v <= hi; };  // false for NaN
  // Bounds far past any context, so that the prompt plus them stays a count of positions (a
  // sum that wrapped around sized the KV cache from a negative or tiny number).
  constexpr int64_t kMaxNewTokens = int64_t(1) << 31, kMaxBeams = 1 << 16;
  FOUNDRY_CHECK_AS(ValueError, cfg.max_new_tokens >= 0 && cfg.max_new_tokens <= kMaxNewTokens,
                   "generate: max_new_tokens must be in 0..{}, got {}", kMaxNewTokens, cfg.max_new_tokens);
  FOUNDRY_CHECK_AS(ValueError, cfg.num_beams >= 1 && cfg.num_beams <= kMaxBeams,
                   "generate: num_beams must be in 1..{}, got {}", kMaxBeams, cfg.num_beams);
  FOUNDRY_CHECK_AS(ValueError, in(cfg.temperature, 0, HUGE_VAL) && std::isfinite(cfg.temperature),
                   "generate: temperature must be 0 (greedy) or more and finite, got {}", cfg.temperature);
  FOUNDRY_CHECK_AS(ValueError, cfg.top_k >= 0, "generate: top_k must be 0 (off) or more, got {}", cfg.top_k);
  FOUNDRY_CHECK_AS(ValueError, in(cfg.top_p, 0, 1), "generate: top_p must be in [0, 1], got {}", cfg.top_p);
  FOUNDRY_CHECK_AS(ValueError, in(cfg.min_p, 0, 1), "generate: min_p must be in [0, 1], got {}", cfg.min_p);
  FOUNDRY_CHECK_AS(ValueError, cfg.typical_p > 0 && cfg.typical_p <= 1,
                   "generate: typical_p must be in (0, 1], got {}", cfg.typical_p);
  FOUNDRY_CHECK_AS(ValueError, cfg.repetition_penalty > 0 && std::isfinite(cfg.repetition_penalty),
                   "generate: repetition_penalty must be a positive number, got {}", cfg.repetition_penalty);
  FOUNDRY_CHECK_AS(ValueError, std::isfinite(cfg.presence_penalty) && std::isfinite(cfg.frequency_penalty),
                   "generate: presence_penalty and frequency_penalty must be finite");
  FOUNDRY_CHECK_AS(ValueError, cfg.no_repeat_ngram_size >= 0,
                   "generate: no_repeat_ngram_size must be 0 (off) or more, got {}", cfg.no_repeat_ngram_size);
  FOUNDRY_CHECK_AS(ValueError, std::isfinite(cfg.length_penalty), "generate: length_penalty must be finite");
}

}  // namespace

GenerationResult generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                          const GenerationConfig& cfg) {
  autograd::NoGradGuard no_grad;
  FOUNDRY_CHECK_AS(ValueError, !prompts.empty(), "generate: no prompts");
  check_settings(cfg);
  if (cfg.num_beams > 1) {
    const std::vector<int64_t> eos = resolve_eos(model, cfg);
    FOUNDRY_CHECK_AS(ValueError, !eos.empty() || cfg.ignore_eos, "generate: beam search needs an EOS id");
    return beam_search(model, prompts, cfg, eos, resolve_pad(model, cfg, eos));
  }
  return sample_rows(model, prompts, cfg, nullptr);
}

GenerationResult generate(CausalLM& model, const std::vector<int64_t>& prompt, const GenerationConfig& cfg,
                          PromptCache& reuse) {
  autograd::NoGradGuard no_grad;
  FOUNDRY_CHECK_AS(ValueError, cfg.num_beams == 1, "generate: a PromptCache is for greedy or sampled decoding");
  check_settings(cfg);
  return sample_rows(model, {prompt}, cfg, &reuse);
}

GenerationResult generate_speculative(CausalLM& model, CausalLM& draft, const std::vector<int64_t>& prompt,
                                      const GenerationConfig& cfg, int64_t lookahead) {
  autograd::NoGradGuard no_grad;
  check_settings(cfg);
  const ModelConfig& mc = model.config();
  FOUNDRY_CHECK_AS(ValueError, draft.config().vocab_size == mc.vocab_size,
                   "speculative decoding: the draft model's vocabulary ({}) differs from the model's ({})",
                   draft.config().vocab_size, mc.vocab_size);
  FOUNDRY_CHECK_AS(ValueError, !cfg.do_sample && cfg.num_beams == 1,
                   "speculative decoding is implemented for greedy decoding only");
  FOUNDRY_CHECK_AS(ValueError, !model.recurrent() && !draft.recurrent(),
                   "speculative decoding rewinds the cache after rejected drafts, which a recurrent model's state ({}) "
                   "can't do", model.recurrent() ? mc.architecture : draft.config().architecture);
  FOUNDRY_CHECK_AS(ValueError, lookahead >= 1, "speculative decoding: lookahead must be >= 1");
  const std::vector<int64_t> eos = resolve_eos(model, cfg);
  (void)left_pad({prompt}, 1, 0, mc.vocab_size);  // validates the prompt
  GenerationResult res;
  res.tokens.resize(1);
  std::vector<int64_t> context = prompt, out;
  const int64_t cap = int64_t(prompt.size()) + cfg.max_new_tokens + lookahead + 2;
  KVCache mcache = model.make_cache(1, cap), dcache = draft.make_cache(1, cap);
  auto greedy = [&](const Tensor& logits, int64_t pos) {
    std::vector<float> row(logits.data<float>() + pos * mc.vocab_size, logits.data<float>() + (pos + 1) * mc.vocab_size);
    process_scores(row, context, prompt.size(), cfg);
    return choose_token(std::move(row), cfg, nullptr);
  };
  auto t0 = std::chrono::steady_clock::now();
  Tensor ml = model.forward(tensor<int64_t>(prompt, {1, int64_t(prompt.size())}), {}, &mcache, 1).contiguous();
  res.prefill_seconds = seconds_since(t0);
  res.prefill_tokens = int64_t(prompt.size());
  t0 = std::chrono::steady_clock::now();
  int64_t last = greedy(ml, 0);
  // Tokens the draft cache hasn't seen yet (the whole prompt at first).
  std::vector<int64_t> draft_pending(prompt.begin(), prompt.end());
  bool finished = false;
  auto emit = [&](int64_t tok) {
    out.push_back(tok);
    context.push_back(tok);
    if (cfg.on_token) cfg.on_token(0, tok);
    if ((!cfg.ignore_eos && std::find(eos.begin(), eos.end(), tok) != eos.end()) ||
        int64_t(out.size()) >= cfg.max_new_tokens || (cfg.should_stop && cfg.should_stop(0, out)))
      finished = true;
  };
  if (cfg.max_new_tokens > 0) emit(last);
  while (!finished) {
    // Draft proposes up to `lookahead` tokens after `last`.
    const int64_t k = std::min<int64_t>(lookahead, cfg.max_new_tokens - int64_t(out.size()));
    draft_pending.push_back(last);
    std::vector<int64_t> proposal;
    std::vector<int64_t> saved_context = context;
    for (int64_t i = 0; i < k; ++i) {
      Tensor dl = draft.forward(tensor<int64_t>(draft_pending, {1, int64_t(draft_pending.size())}), {}, &dcache, 1).contiguous();
      std::vector<float> row(dl.data<float>(), dl.data<float>() + mc.vocab_size);
      process_scores(row, context, prompt.size(), cfg);
      const int64_t d = choose_token(std::move(row), cfg, nullptr);
      proposal.push_back(d);
      context.push_back(d);
      draft_pending = {d};
    }
    context = saved_context;
    // The model scores last + proposal in one pass.
    std::vector<int64_t> chunk = {last};
    chunk.insert(chunk.end(), proposal.begin(), proposal.end());
    const int64_t before = mcache.length();
    ml = model.forward(tensor<int64_t>(chunk, {1, int64_t(chunk.size())}), {}, &mcache).contiguous();
    res.decode_steps++;
    res.draft_proposed += k;
    int64_t accepted = 0;
    for (int64_t i = 0; i < k && !finished; ++i) {
      const int64_t want = greedy(ml, i);
      if (want != proposal[size_t(i)]) break;
      ++accepted;
      emit(want);
    }
    res.draft_accepted += accepted;
    if (finished) break;
    last = greedy(ml, accepted);  // the model's own next token after the agreed prefix
    // Keep in the model cache only last + the accepted tokens; the draft cache holds last +
    // proposal[0..k-2]: trim it to last + accepted, or queue proposal[k-1] if all were accepted.
    mcache.truncate(before + 1 + accepted);
    if (accepted < k) {
      dcache.truncate(dcache.length() - (k - 1 - accepted));
      draft_pending.clear();
    } else {
      draft_pending = {proposal.back()};
    }
    emit(last);
  }
  res.tokens[0] = out;
  res.decode_seconds = seconds_since(t0);
  return res;
}

}  // namespace foundry::models
