#include "foundry/eval/requests.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/error.h"
#include "foundry/models/generate.h"
#include "foundry/models/pretrained.h"
#include "foundry/ops/ops.h"
#include "foundry/text/tokenizer.h"

namespace foundry::eval {

namespace {

constexpr int64_t kDefaultMaxLength = 2048;  // the harness's _DEFAULT_MAX_LENGTH

// One request as scored: inp = prefix + tail, where tail is the last len(continuation) positions.
struct Scored {
  Ids prefix, tail, continuation;
  size_t index = 0;
};

}  // namespace

RequestEngine::RequestEngine(models::CausalLM& model, const text::Tokenizer* tokenizer, int64_t max_length)
    : model_(model), tokenizer_(tokenizer) {
  FOUNDRY_CHECK_AS(ValueError, max_length >= 0, "eval: max_length must be 0 (the model's positions) or more, got {}",
                   max_length);
  const models::ModelConfig& c = model.config();
  max_length_ = max_length > 0 ? max_length : c.max_positions > 0 ? c.max_positions : kDefaultMaxLength;
  if (!c.eos_token_ids.empty()) eot_token_ = c.eos_token_ids.front();
  if (c.bos_token_id) prefix_token_ = *c.bos_token_id;
  else if (eot_token_ >= 0) prefix_token_ = eot_token_;
  else raise<ValueError>("eval: the model's config has neither bos_token_id nor eos_token_id (the prefix token)");
}

void RequestEngine::set_batch_size(int64_t batch_size) {
  if (batch_size < 1) raise<ValueError>("eval: batch size must be positive, got {}", batch_size);
  batch_size_ = batch_size;
}

const text::Tokenizer& RequestEngine::tokenizer() const {
  if (!tokenizer_) raise<ValueError>("eval: string requests and generation need the model's tokenizer");
  return *tokenizer_;
}

Ids RequestEngine::encode(const std::string& text) const {
  std::vector<uint32_t> ids = tokenizer().encode_ids(text, /*add_special_tokens=*/false);
  return Ids(ids.begin(), ids.end());
}

LoglikelihoodRequest RequestEngine::encode_pair(const std::string& context, const std::string& continuation) const {
  if (context.empty()) return {{}, encode(continuation)};
  size_t keep = context.find_last_not_of(" \t\n\r\f\v");
  keep = keep == std::string::npos ? 0 : keep + 1;
  std::string ctx = context.substr(0, keep), cont = context.substr(keep) + continuation;
  Ids whole = encode(ctx + cont), ctx_ids = encode(ctx);
  Ids cont_ids(whole.begin() + std::min(whole.size(), ctx_ids.size()), whole.end());
  return {ctx_ids, cont_ids};
}

std::vector<LoglikelihoodResult> RequestEngine::loglikelihood(const std::vector<LoglikelihoodRequest>& requests) {
  const int64_t vocab = model_.config().vocab_size;
  std::vector<LoglikelihoodResult> out(requests.size());
  // Scores rows of log-probabilities [n, vocab] against a continuation (float32 sum, as the harness).
  score_continuations(requests, [&](size_t i, const float* lp, const int64_t* greedy) {
    const Ids& continuation = requests[i].continuation;
    float sum = 0;
    bool all_greedy = true;
    for (size_t t = 0; t < continuation.size(); ++t) {
      sum += lp[int64_t(t) * vocab + continuation[t]];
      all_greedy = all_greedy && greedy[t] == continuation[t];
    }
    out[i] = {double(sum), all_greedy};
  });
  return out;
}

void RequestEngine::score_continuations(const std::vector<LoglikelihoodRequest>& requests,
                                        const std::function<void(size_t, const float*, const int64_t*)>& visit) {
  autograd::NoGradGuard no_grad;
  const int64_t vocab = model_.config().vocab_size;
  // Requests grouped by the prefix they score, longest first (the harness sorts by length too).
  std::map<Ids, std::vector<Scored>> groups;
  for (size_t i = 0; i < requests.size(); ++i) {
    const LoglikelihoodRequest& r = requests[i];
    if (r.continuation.empty()) {
      visit(i, nullptr, nullptr);
      continue;
    }
    if (int64_t(r.continuation.size()) > max_length_)
      raise<ValueError>("eval: request {}: a continuation of {} tokens is longer than the model's {} positions", i,
                        r.continuation.size(), max_length_);
    for (int64_t id : r.context)
      if (id < 0 || id >= vocab) raise<ValueError>("eval: request {}: context id {} is outside the vocabulary", i, id);
    for (int64_t id : r.continuation)
      if (id < 0 || id >= vocab)
        raise<ValueError>("eval: request {}: continuation id {} is outside the vocabulary", i, id);
    Ids full = r.context.empty() ? Ids{prefix_token_} : r.context;
    full.insert(full.end(), r.continuation.begin(), r.continuation.end());
    if (int64_t(full.size()) > max_length_ + 1) full.erase(full.begin(), full.end() - (max_length_ + 1));
    full.pop_back();  // inp = full[:-1]
    const size_t contlen = r.continuation.size();
    Scored s;
    s.prefix.assign(full.begin(), full.end() - contlen);
    s.tail.assign(full.end() - contlen, full.end());
    s.continuation = r.continuation;
    s.index = i;
    groups[s.prefix].push_back(std::move(s));
  }
  std::vector<const Scored*> singles;
  for (auto& [prefix, members] : groups) {
    // Nothing to share (or a recurrent model, whose state can't be rewound to the shared prefix).
    if (members.size() == 1 || prefix.empty() || model_.recurrent()) {
      for (auto& s : members) singles.push_back(&s);
      continue;
    }
    // Choices of one item: the shared prefix once through the KV cache, then each continuation.
    size_t longest = 0;
    for (auto& s : members) longest = std::max(longest, s.tail.size());
    models::KVCache cache = model_.make_cache(1, int64_t(prefix.size() + longest) + 1);
    if (!prefix.empty()) {
      model_.forward(tensor<int64_t>(prefix, {1, int64_t(prefix.size())}), Tensor(), &cache, 1);
      ++forwards_;
      saved_tokens_ += int64_t(prefix.size()) * int64_t(members.size() - 1);
    }
    for (const Scored& s : members) {
      cache.truncate(int64_t(prefix.size()));
      const int64_t n = int64_t(s.tail.size());
      Tensor logits = model_.forward(tensor<int64_t>(s.tail, {1, n}), Tensor(), &cache, 0);
      ++forwards_;
      Tensor logp = log_softmax(logits.to(DType::Float32).reshape({n, vocab}), -1).contiguous();
      Tensor greedy = argmax(logp, -1).contiguous();
      visit(s.index, logp.data<float>(), greedy.data<int64_t>());
    }
  }
  // The other requests in batches of similar length, left-padded so that every row's continuation
  // ends at the last position: only the last max(len(continuation)) positions reach the LM head.
  std::stable_sort(singles.begin(), singles.end(), [](const Scored* a, const Scored* b) {
    return a->prefix.size() + a->tail.size() > b->prefix.size() + b->tail.size();
  });
  for (size_t b0 = 0; b0 < singles.size(); b0 += size_t(batch_size_)) {
    const size_t b1 = std::min(singles.size(), b0 + size_t(batch_size_));
    const int64_t rows = int64_t(b1 - b0);
    int64_t width = 0, last = 0;
    for (size_t i = b0; i < b1; ++i) {
      width = std::max(width, int64_t(singles[i]->prefix.size() + singles[i]->tail.size()));
      last = std::max(last, int64_t(singles[i]->tail.size()));
    }
    std::vector<int64_t> ids(size_t(rows * width), prefix_token_), mask(size_t(rows * width), 0);
    for (int64_t r = 0; r < rows; ++r) {
      const Scored& s = *singles[b0 + size_t(r)];
      const int64_t len = int64_t(s.prefix.size() + s.tail.size()), pad = width - len;
      for (int64_t t = 0; t < len; ++t) {
        ids[size_t(r * width + pad + t)] = t < int64_t(s.prefix.size()) ? s.prefix[size_t(t)] : s.tail[size_t(t) - s.prefix.size()];
        mask[size_t(r * width + pad + t)] = 1;
      }
    }
    bool padded = std::any_of(mask.begin(), mask.end(), [](int64_t m) { return m == 0; });
    Tensor logits = model_.forward(tensor<int64_t>(ids, {rows, width}),
                                   padded ? tensor<int64_t>(mask, {rows, width}) : Tensor(), nullptr, last);
    ++forwards_;
    Tensor logp = log_softmax(logits.to(DType::Float32).reshape({rows, last, vocab}), -1).contiguous();
    Tensor greedy = argmax(logp, -1).contiguous();
    for (int64_t r = 0; r < rows; ++r) {
      const Scored& s = *singles[b0 + size_t(r)];
      const int64_t skip = last - int64_t(s.tail.size());  // the row's continuation is its last positions
      visit(s.index, logp.data<float>() + (r * last + skip) * vocab, greedy.data<int64_t>() + r * last + skip);
    }
  }
}

std::vector<std::pair<Ids, Ids>> rolling_windows(const Ids& tokens, int64_t prefix_token, int64_t max_length) {
  std::vector<std::pair<Ids, Ids>> out;
  if (tokens.empty()) return out;
  const int64_t n = int64_t(tokens.size()), context_len = 1, pred_len = max_length - context_len + 1;
  // get_rolling_token_windows: the first window predicts every token it holds.
  const int64_t first = std::min(max_length, n);
  Ids ctx{prefix_token};
  ctx.insert(ctx.end(), tokens.begin(), tokens.begin() + (first - 1));
  out.emplace_back(ctx, Ids(tokens.begin(), tokens.begin() + first));
  int64_t predicted = first;
  while (predicted < n) {
    const int64_t window_pred = std::min(n - predicted, pred_len), end = predicted + window_pred;
    const int64_t lo = std::max<int64_t>(0, end - max_length - 1);
    out.emplace_back(Ids(tokens.begin() + lo, tokens.begin() + (end - 1)),
                     Ids(tokens.begin() + (end - window_pred), tokens.begin() + end));
    predicted += window_pred;
  }
  // make_disjoint_window: the context stops where the continuation starts.
  for (auto& [a, b] : out) a.resize(a.size() - (b.size() - 1));
  return out;
}

std::vector<RollingResult> RequestEngine::loglikelihood_rolling(const std::vector<Ids>& texts) {
  // Every window of every text in one call, so windows of different texts share batches.
  std::vector<LoglikelihoodRequest> windows;
  std::vector<size_t> owner;
  for (size_t i = 0; i < texts.size(); ++i)
    for (auto& [a, b] : rolling_windows(texts[i], prefix_token_, max_length_)) windows.push_back({a, b}), owner.push_back(i);
  std::vector<RollingResult> out(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) out[i].n_tokens = int64_t(texts[i].size());
  const auto res = loglikelihood(windows);
  for (size_t w = 0; w < res.size(); ++w) out[owner[w]].loglikelihood += res[w].loglikelihood;
  return out;
}

std::vector<TokenScores> RequestEngine::token_scores(const std::vector<Ids>& texts) {
  const int64_t vocab = model_.config().vocab_size;
  std::vector<LoglikelihoodRequest> windows;
  std::vector<std::pair<size_t, size_t>> owner;  // (text, offset of the window's first token)
  std::vector<TokenScores> out(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    size_t offset = 0;
    for (auto& [a, b] : rolling_windows(texts[i], prefix_token_, max_length_)) {
      owner.emplace_back(i, offset);
      offset += b.size();
      windows.push_back({a, b});
    }
    out[i].logprob.resize(texts[i].size());
    out[i].mean.resize(texts[i].size());
    out[i].stddev.resize(texts[i].size());
  }
  score_continuations(windows, [&](size_t w, const float* lp, const int64_t*) {
    auto& [text, offset] = owner[w];
    const Ids& cont = windows[w].continuation;
    TokenScores& ts = out[text];
    for (size_t t = 0; t < cont.size(); ++t) {
      const float* row = lp + int64_t(t) * vocab;
      // The mean and spread of log p under the model's own distribution (Min-K%++'s mu and sigma).
      double mu = 0, second = 0;
      for (int64_t v = 0; v < vocab; ++v) {
        const double p = std::exp(double(row[v]));
        mu += p * row[v];
        second += p * double(row[v]) * row[v];
      }
      ts.logprob[offset + t] = row[cont[t]];
      ts.mean[offset + t] = float(mu);
      ts.stddev[offset + t] = float(std::sqrt(std::max(0.0, second - mu * mu)));
    }
  });
  return out;
}

std::vector<std::string> RequestEngine::generate_until(const std::vector<GenerateRequest>& requests) {
  if (requests.empty()) return {};
  const text::Tokenizer& tok = tokenizer();
  std::string eot_text;
  if (eot_token_ >= 0) eot_text = tok.decode({uint32_t(eot_token_)}, /*skip_special_tokens=*/false);
  std::vector<std::string> out;
  for (const GenerateRequest& r : requests) {
    if (r.max_gen_toks < 1) raise<ValueError>("eval: generate_until: max_gen_toks must be positive");
    std::vector<std::string> until = r.until;
    if (!eot_text.empty()) until.push_back(eot_text);
    Ids ctx = encode(r.context);
    const int64_t keep = std::max<int64_t>(1, max_length_ - r.max_gen_toks);  // left truncation, as the harness
    if (int64_t(ctx.size()) > keep) ctx.erase(ctx.begin(), ctx.end() - keep);
    if (ctx.empty()) ctx = {prefix_token_};
    models::GenerationConfig g;
    g.max_new_tokens = r.max_gen_toks;
    if (eot_token_ >= 0) g.eos_token_ids = {eot_token_};
    g.should_stop = [&](int64_t, const std::vector<int64_t>& generated) {
      std::string text = tok.decode(std::vector<uint32_t>(generated.begin(), generated.end()));
      for (const std::string& u : until)
        if (!u.empty() && text.find(u) != std::string::npos) return true;
      return false;
    };
    models::GenerationResult res = models::generate(model_, {ctx}, g);
    const Ids& gen = res.tokens.front();
    std::string text = tok.decode(std::vector<uint32_t>(gen.begin(), gen.end()));
    for (const std::string& u : until)
      if (!u.empty()) text = text.substr(0, text.find(u));  // lm-eval: s = s.split(term)[0]
    out.push_back(std::move(text));
  }
  return out;
}

}  // namespace foundry::eval
