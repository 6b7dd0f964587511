#include "foundry/serve/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <future>
#include <limits>
#include <list>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/error.h"
#include "foundry/core/rng.h"
#include "foundry/models/pretrained.h"
#include "foundry/ops/ops.h"

namespace foundry::serve {

namespace {

using Clock = std::chrono::steady_clock;

struct Sequence {
  int64_t id = 0;
  Request req;
  std::vector<int64_t> context;  // prompt + generated
  size_t prompt_len = 0;
  int64_t processed = 0;         // prompt tokens in the cache
  int64_t cached = 0;            // of which served by the prefix cache
  std::vector<int64_t> generated;
  int64_t pending = -1;          // the last sampled token, fed at the next decode step
  std::unique_ptr<Generator> gen;
  uint64_t prefix_key = 0;       // chain hash of the full prompt blocks registered so far
  size_t registered_blocks = 0;
  bool decoding() const { return processed == int64_t(prompt_len); }
};

uint64_t chain_hash(uint64_t prev, const int64_t* tokens, int64_t n) {
  uint64_t h = prev ^ 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < n; ++i) {
    h ^= uint64_t(tokens[i]) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
  }
  return h;
}

}  // namespace

struct Engine::Impl {
  models::CausalLM& model;
  EngineOptions opt;
  models::KVCache cache;
  int64_t ctx = 0, vocab = 0;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<Sequence>> waiting;
  std::vector<std::unique_ptr<Sequence>> active;
  std::vector<int64_t> cancelled;
  std::deque<std::pair<std::function<void()>, std::promise<void>>> tasks;  // run_exclusive
  bool stopping = false;
  int64_t next_id = 1;
  EngineStats st;
  std::deque<std::pair<Clock::time_point, int64_t>> recent;  // (time, tokens) for tokens/s

  // The prefix cache: chain hash of a full prompt block -> the block; LRU order for eviction.
  std::unordered_map<uint64_t, std::pair<int32_t, std::list<uint64_t>::iterator>> prefix;
  std::list<uint64_t> lru;

  std::thread worker;

  Impl(models::CausalLM& m, EngineOptions o) : model(m), opt(std::move(o)) {
    const models::ModelConfig& c = model.config();
    vocab = c.vocab_size;
    FOUNDRY_CHECK_AS(ValueError, opt.ctx_size >= 0, "serve: --ctx-size must be 0 (the model's positions) or more, got {}",
                     opt.ctx_size);
    FOUNDRY_CHECK_AS(ValueError, !model.recurrent(),
                     "serve: {} keeps a recurrent state per sequence, which the paged KV engine doesn't hold yet; use "
                     "foundry generate", c.architecture);
    ctx = opt.ctx_size > 0 ? opt.ctx_size : (c.max_positions > 0 ? c.max_positions : 2048);
    if (c.max_positions > 0 && ctx > c.max_positions)
      raise<ValueError>("serve: --ctx-size {} is more than the model's {} positions", ctx, c.max_positions);
    FOUNDRY_CHECK_AS(ValueError, opt.parallel >= 1 && opt.block_size >= 1 && opt.prefill_chunk >= 1,
                     "serve: parallel, block size and prefill chunk must be positive");
    FOUNDRY_CHECK_AS(ValueError, opt.max_queue >= 0, "serve: --max-queue must be 0 or more, got {}", opt.max_queue);
    const int64_t per_seq = (ctx + opt.block_size - 1) / opt.block_size;
    const int64_t blocks = opt.num_blocks > 0 ? opt.num_blocks : 2 * opt.parallel * per_seq;
    FOUNDRY_CHECK_AS(ValueError, blocks >= per_seq, "serve: {} KV blocks can't hold one context of {} tokens", blocks, ctx);
    cache = models::KVCache::paged(c.num_layers, c.num_kv_heads, c.head_dim, model.dtype(), opt.kv_format, blocks,
                                   opt.block_size);
    st.kv_blocks_total = blocks;
    worker = std::thread([this] { run(); });
  }

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    cv.notify_all();
    worker.join();
  }

  // A request's end is told to its client after the step's stats snapshot (tell_finished), so a
  // client that saw its request end reads stats() without it (active, blocks in use).
  void finish(Sequence& s, const std::string& reason) {
    if (s.req.on_finish)
      finished.push_back([done = s.req.on_finish, reason, prompt = int64_t(s.prompt_len), cached = s.cached] {
        done(reason, prompt, cached);
      });
  }
  void tell_finished() {
    std::vector<std::function<void()>> now;
    now.swap(finished);
    for (auto& f : now) f();
  }
  std::vector<std::function<void()>> finished;

  // Frees blocks only the prefix cache holds, least recently used first, until `need` are free.
  bool make_room(int64_t need) {
    while (cache.free_blocks() < need && !lru.empty()) {
      bool evicted = false;
      for (auto it = lru.begin(); it != lru.end(); ++it) {
        auto p = prefix.find(*it);
        if (cache.block_refs(p->second.first) == 1) {
          cache.release_block(p->second.first);
          prefix.erase(p);
          lru.erase(it);
          evicted = true;
          break;
        }
      }
      if (!evicted) break;
    }
    return cache.free_blocks() >= need;
  }

  // Starts a waiting sequence: shares the cached blocks of its prompt's prefix, then reserves
  // blocks for the rest of the prompt and its first token. False when the pool is short.
  bool start(Sequence& s) {
    const int64_t bs = opt.block_size, P = int64_t(s.prompt_len);
    std::vector<int32_t> shared;
    uint64_t key = 0;
    // At least the last prompt token runs, for the next token's logits.
    for (int64_t b = 0; (b + 1) * bs <= P - 1; ++b) {
      const uint64_t k = chain_hash(key, s.context.data() + b * bs, bs);
      auto it = prefix.find(k);
      if (it == prefix.end()) break;
      shared.push_back(it->second.first);
      lru.splice(lru.end(), lru, it->second.second);
      key = k;
    }
    if (!make_room((P + 1 + bs - 1) / bs - int64_t(shared.size()))) return false;
    cache.add_sequence(s.id, shared);
    if (!cache.reserve_sequence(s.id, P - int64_t(shared.size()) * bs + 1)) {
      cache.remove_sequence(s.id);
      return false;
    }
    s.processed = s.cached = int64_t(shared.size()) * bs;
    s.prefix_key = key;
    s.registered_blocks = shared.size();
    st.cached_prompt_tokens += s.cached;
    st.prompt_tokens += P;
    return true;
  }

  // Registers the sequence's newly completed full prompt blocks in the prefix cache.
  void register_prefix(Sequence& s) {
    const int64_t bs = opt.block_size;
    const auto& table = cache.block_table(s.id);
    while (int64_t(s.registered_blocks + 1) * bs <= s.processed) {
      const size_t b = s.registered_blocks;
      s.prefix_key = chain_hash(s.prefix_key, s.context.data() + int64_t(b) * bs, bs);
      if (!prefix.count(s.prefix_key)) {
        cache.retain_block(table[b]);
        lru.push_back(s.prefix_key);
        prefix[s.prefix_key] = {table[b], std::prev(lru.end())};
      }
      ++s.registered_blocks;
    }
  }

  // Leaves only allowed tokens a finite score: the most likely candidates first (greedy needs just
  // the best allowed one); false when no token is allowed.
  static bool constrain(TokenConstraint& c, std::vector<float>& scores) {
    std::vector<int64_t> order(scores.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
    const size_t k = std::min<size_t>(order.size(), 512);
    std::partial_sort(order.begin(), order.begin() + std::ptrdiff_t(k), order.end(),
                      [&](int64_t a, int64_t b) { return scores[size_t(a)] > scores[size_t(b)]; });
    std::vector<bool> keep(scores.size(), false);
    size_t allowed = 0;
    for (size_t i = 0; i < order.size() && (i < k || allowed == 0); ++i)
      if (std::isfinite(scores[size_t(order[i])]) && c.allows(order[i])) keep[size_t(order[i])] = true, ++allowed;
    for (size_t i = 0; i < scores.size(); ++i)
      if (!keep[i]) scores[i] = -std::numeric_limits<float>::infinity();
    return allowed > 0;
  }

  // Samples from one row of logits; returns false when the sequence is done (finished already).
  bool emit(Sequence& s, const float* logits) {
    const float* row = logits;  // the model's scores; `scores` gets the sampling adjustments
    TokenEvent ev;
    {
      std::vector<float> scores(logits, logits + vocab);
      models::process_scores(scores, s.context, s.prompt_len, s.req.sampling);
      if (s.req.constraint && !constrain(*s.req.constraint, scores)) return finish(s, "error: no token satisfies the constraint"), false;
      ev.token = models::choose_token(std::move(scores), s.req.sampling, s.gen.get());
      if (s.req.constraint) s.req.constraint->accept(ev.token);
    }
    if (s.req.logprobs) {
      // log-probabilities of the model's distribution
      const float mx = *std::max_element(row, row + vocab);
      double sum = 0;
      for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(row[i] - mx));
      const float lse = float(mx + std::log(sum));
      ev.logprob = row[size_t(ev.token)] - lse;
      if (s.req.top_logprobs > 0) {
        std::vector<int64_t> idx(static_cast<size_t>(vocab));
        for (int64_t i = 0; i < vocab; ++i) idx[size_t(i)] = i;
        const int64_t k = std::min(s.req.top_logprobs, vocab);
        std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int64_t a, int64_t b) { return row[size_t(a)] > row[size_t(b)]; });
        for (int64_t i = 0; i < k; ++i) ev.top.emplace_back(idx[size_t(i)], row[size_t(idx[size_t(i)])] - lse);
      }
    }
    s.generated.push_back(ev.token);
    s.context.push_back(ev.token);
    s.pending = ev.token;
    {
      std::lock_guard<std::mutex> lock(mu);
      ++st.generated_tokens;
      recent.emplace_back(Clock::now(), 1);
    }
    if (s.req.on_token && !s.req.on_token(ev)) return finish(s, "cancelled"), false;
    const auto& eos = s.req.sampling.eos_token_ids.empty() ? model.config().eos_token_ids : s.req.sampling.eos_token_ids;
    if (!s.req.sampling.ignore_eos && std::find(eos.begin(), eos.end(), ev.token) != eos.end()) return finish(s, "stop"), false;
    if (s.req.should_stop && s.req.should_stop(s.generated)) return finish(s, "stop"), false;
    if (s.req.constraint && s.req.constraint->complete()) return finish(s, "stop"), false;
    if (int64_t(s.generated.size()) >= s.req.sampling.max_new_tokens) return finish(s, "length"), false;
    if (int64_t(s.context.size()) >= ctx) return finish(s, "length"), false;  // the next token would not fit
    if (!cache.reserve_sequence(s.id, 1) && !(make_room(1) && cache.reserve_sequence(s.id, 1)))
      return finish(s, "length"), false;  // the pool is exhausted (sized so this does not happen)
    return true;
  }

  void retire(size_t i) {
    cache.remove_sequence(active[i]->id);
    active.erase(active.begin() + std::ptrdiff_t(i));
  }

  // The worker owns `active`, the cache and the prefix map; the mutex guards the queue, the
  // cancellation list and the stats, and is never held while the model runs or a callback is called
  // (callbacks may submit, cancel or read stats).
  void run() {
    autograd::NoGradGuard no_grad;
    for (;;) {
      std::vector<int64_t> cancel_ids;
      std::vector<std::unique_ptr<Sequence>> dropped;  // cancelled while waiting
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stopping || !waiting.empty() || !active.empty() || !cancelled.empty() || !tasks.empty(); });
        if (stopping) break;
        while (!tasks.empty()) {
          auto task = std::move(tasks.front());
          tasks.pop_front();
          lock.unlock();
          try {
            task.first();
            task.second.set_value();
          } catch (...) {
            task.second.set_exception(std::current_exception());
          }
          lock.lock();
        }
        cancel_ids.swap(cancelled);
        for (int64_t id : cancel_ids)
          for (auto it = waiting.begin(); it != waiting.end(); ++it)
            if ((*it)->id == id) {
              dropped.push_back(std::move(*it));
              waiting.erase(it);
              break;
            }
        while (int64_t(active.size()) < opt.parallel && !waiting.empty() && start(*waiting.front())) {
          active.push_back(std::move(waiting.front()));
          waiting.pop_front();
        }
      }
      for (auto& s : dropped) finish(*s, "cancelled");
      for (int64_t id : cancel_ids)
        for (size_t i = 0; i < active.size(); ++i)
          if (active[i]->id == id) {
            finish(*active[i], "cancelled");
            retire(i);
            break;
          }
      step();
      {
        std::lock_guard<std::mutex> lock(mu);
        snapshot();
      }
      tell_finished();
    }
    std::vector<std::unique_ptr<Sequence>> left;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto& t : tasks) t.second.set_exception(std::make_exception_ptr(Error("serve: the engine stopped")));
      tasks.clear();
      for (auto& s : waiting) left.push_back(std::move(s));
      waiting.clear();
    }
    for (auto& s : active) finish(*s, "cancelled"), cache.remove_sequence(s->id);
    for (auto& s : left) finish(*s, "cancelled");
    active.clear();
    {
      std::lock_guard<std::mutex> lock(mu);
      snapshot();
    }
    tell_finished();
  }

  // The numbers stats() reports, copied under the mutex (the worker owns what they count).
  void snapshot() {
    st.active = int64_t(active.size());
    st.waiting = int64_t(waiting.size());
    st.kv_blocks_used = cache.num_blocks() - cache.free_blocks();
    st.kv_blocks_cached = int64_t(prefix.size());
  }

  // The attention mask of a forward over `ids` adding T positions each: rows with less cached
  // than the longest are left-padded. Undefined when no row needs padding.
  Tensor padding_mask(const std::vector<int64_t>& ids, int64_t T) const {
    const int64_t past = cache.length(), B = int64_t(ids.size());
    bool padded = false;
    for (int64_t id : ids) padded = padded || cache.sequence_length(id) != past;
    if (!padded) return Tensor();
    std::vector<int64_t> mask(size_t(B * (past + T)), 0);
    for (int64_t r = 0; r < B; ++r) {
      const int64_t len = cache.sequence_length(ids[size_t(r)]);
      for (int64_t t = past - len; t < past + T; ++t) mask[size_t(r * (past + T) + t)] = 1;
    }
    return tensor<int64_t>(mask, {B, past + T});
  }

  // One scheduler iteration: prefill chunks of the sequences still reading their prompts (those
  // whose next chunk has the same length run as one batch, up to a token budget), then one decode
  // step for every sequence that is generating.
  void step() {
    std::vector<size_t> pre;
    int64_t chunk = 0;
    for (size_t i = 0; i < active.size(); ++i) {
      const Sequence& s = *active[i];
      if (s.decoding()) continue;
      const int64_t T = std::min(opt.prefill_chunk, int64_t(s.prompt_len) - s.processed);
      if (pre.empty()) chunk = T;
      if (T != chunk || int64_t(pre.size() + 1) * T > 4 * opt.prefill_chunk) continue;
      pre.push_back(i);
    }
    if (!pre.empty()) {
      std::vector<int64_t> ids, input;
      for (size_t i : pre) {
        const Sequence& s = *active[i];
        ids.push_back(s.id);
        input.insert(input.end(), s.context.begin() + s.processed, s.context.begin() + s.processed + chunk);
      }
      cache.bind(ids);
      Tensor logits;
      try {
        logits = model.forward(tensor<int64_t>(input, {int64_t(pre.size()), chunk}), padding_mask(ids, chunk), &cache, 1)
                     .contiguous();
      } catch (const std::exception& e) {
        for (size_t k = pre.size(); k-- > 0;) finish(*active[pre[k]], std::string("error: ") + e.what()), retire(pre[k]);
        return;
      }
      for (size_t k = pre.size(); k-- > 0;) {
        Sequence& s = *active[pre[k]];
        s.processed += chunk;
        register_prefix(s);
        if (s.decoding() && !emit(s, logits.data<float>() + int64_t(k) * vocab)) retire(pre[k]);
      }
    }
    std::vector<size_t> rows;
    for (size_t i = 0; i < active.size(); ++i)
      if (active[i]->decoding() && active[i]->pending >= 0 && int64_t(active[i]->generated.size()) > 0) rows.push_back(i);
    if (rows.empty()) return;
    std::vector<int64_t> ids, input;
    for (size_t i : rows) ids.push_back(active[i]->id), input.push_back(active[i]->pending);
    cache.bind(ids);
    const int64_t B = int64_t(rows.size());
    Tensor logits;
    try {
      logits = model.forward(tensor<int64_t>(input, {B, 1}), padding_mask(ids, 1), &cache, 1).contiguous();
    } catch (const std::exception& e) {
      for (size_t k = rows.size(); k-- > 0;) finish(*active[rows[k]], std::string("error: ") + e.what()), retire(rows[k]);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      ++st.decode_steps;
    }
    for (size_t k = rows.size(); k-- > 0;) {
      Sequence& s = *active[rows[k]];
      s.pending = -1;
      if (!emit(s, logits.data<float>() + int64_t(k) * vocab)) retire(rows[k]);
    }
  }
};

Engine::Engine(models::CausalLM& model, EngineOptions options) : impl_(std::make_unique<Impl>(model, std::move(options))) {}
Engine::~Engine() = default;

int64_t Engine::submit(Request request) {
  Impl& m = *impl_;
  if (request.prompt.empty()) raise<ValueError>("the prompt is empty");
  for (int64_t id : request.prompt)
    if (id < 0 || id >= m.vocab) raise<ValueError>("prompt token id {} is outside the vocabulary ({})", id, m.vocab);
  if (int64_t(request.prompt.size()) >= m.ctx)
    raise<ValueError>("the prompt has {} tokens, more than the context of {} leaves room for", request.prompt.size(), m.ctx);
  if (request.sampling.max_new_tokens < 1) raise<ValueError>("max tokens must be at least 1");
  auto s = std::make_unique<Sequence>();
  s->context = request.prompt;
  s->prompt_len = request.prompt.size();
  s->gen = std::make_unique<Generator>(request.sampling.seed);
  s->req = std::move(request);
  std::lock_guard<std::mutex> lock(m.mu);
  if (int64_t(m.waiting.size()) >= m.opt.max_queue) {
    ++m.st.requests_rejected;
    return -1;
  }
  s->id = m.next_id++;
  const int64_t id = s->id;
  m.waiting.push_back(std::move(s));
  ++m.st.requests_total;
  m.cv.notify_all();
  return id;
}

void Engine::cancel(int64_t id) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->cancelled.push_back(id);
  impl_->cv.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  EngineStats s = impl_->st;
  s.waiting = int64_t(impl_->waiting.size());
  auto& recent = impl_->recent;
  const auto now = Clock::now();
  while (!recent.empty() && now - recent.front().first > std::chrono::seconds(5)) recent.pop_front();
  if (!recent.empty()) {
    const double span = std::max(0.5, std::chrono::duration<double>(now - recent.front().first).count());
    s.tokens_per_second = double(recent.size()) / span;
  }
  return s;
}

void Engine::run_exclusive(const std::function<void()>& fn) {
  std::future<void> done;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->tasks.emplace_back(fn, std::promise<void>());
    done = impl_->tasks.back().second.get_future();
  }
  impl_->cv.notify_all();
  done.get();
}

int64_t Engine::ctx_size() const { return impl_->ctx; }
models::CausalLM& Engine::model() { return impl_->model; }
const EngineOptions& Engine::options() const { return impl_->opt; }

}  // namespace foundry::serve
