// The serving engine against generate(): concurrent greedy requests give exactly the tokens each
// gives alone, through continuous batching, chunked prefill and the prefix cache; cancellation, the
// bounded queue and bad prompts; no KV block is leaked.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "foundry/models/generate.h"
#include "foundry/models/pretrained.h"
#include "foundry/serve/engine.h"
#include "tiny_models.h"

using namespace foundry;

namespace {

std::shared_ptr<models::CausalLM> model() {
  static std::shared_ptr<models::CausalLM> m = models::load_pretrained(foundry::testing::llama_folder("serve", 64, 4, 96, 0.3, 11, R"(, "eos_token_id": 60)"));
  return m;
}

struct Result {
  std::vector<int64_t> tokens;
  std::string reason;
  int64_t cached = -1;
  bool done = false;
};

struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Result> results;
  explicit Collector(size_t n) : results(n) {}
  serve::Request request(size_t i, std::vector<int64_t> prompt, int64_t max_new) {
    serve::Request r;
    r.prompt = std::move(prompt);
    r.sampling.max_new_tokens = max_new;
    r.on_token = [this, i](const serve::TokenEvent& e) {
      std::lock_guard<std::mutex> lock(mu);
      results[i].tokens.push_back(e.token);
      return true;
    };
    r.on_finish = [this, i](const std::string& why, int64_t, int64_t cached) {
      std::lock_guard<std::mutex> lock(mu);
      results[i].reason = why;
      results[i].cached = cached;
      results[i].done = true;
      cv.notify_all();
    };
    return r;
  }
  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] {
      return std::all_of(results.begin(), results.end(), [](const Result& r) { return r.done; });
    }));
  }
};

std::vector<int64_t> alone(const std::vector<int64_t>& prompt, int64_t max_new) {
  models::GenerationConfig g;
  g.max_new_tokens = max_new;
  return models::generate(*model(), std::vector<std::vector<int64_t>>{prompt}, g).tokens.front();
}

}  // namespace

TEST(ServeEngine, ConcurrentGreedyRequestsEqualEachRunAlone) {
  serve::EngineOptions o;
  o.parallel = 4;
  o.block_size = 4;
  o.prefill_chunk = 5;  // prompts of up to 23 tokens run in several chunks between decode steps
  serve::Engine engine(*model(), o);
  const std::vector<int64_t> system = {7, 8, 9, 10, 11, 12, 13, 14, 15};  // a shared "system prompt"
  std::vector<std::vector<int64_t>> prompts;
  for (int i = 0; i < 10; ++i) {
    std::vector<int64_t> p = system;
    for (int j = 0; j <= i + (i % 3) * 4; ++j) p.push_back((i * 7 + j * 3) % 59 + 1);
    prompts.push_back(p);
  }
  Collector c(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) ASSERT_GE(engine.submit(c.request(i, prompts[i], 6 + int64_t(i % 4) * 3)), 0);
  c.wait();
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int64_t> want = alone(prompts[i], 6 + int64_t(i % 4) * 3);
    EXPECT_EQ(c.results[i].tokens, want) << "request " << i;
    EXPECT_EQ(c.results[i].reason, want.back() == 60 ? "stop" : "length") << i;
  }
  // The system prompt's two full blocks were computed once and shared by the later requests.
  const serve::EngineStats st = engine.stats();
  EXPECT_GT(st.cached_prompt_tokens, 0);
  // Continuous batching: far fewer decode forwards than generated tokens.
  int64_t generated = 0;
  for (const Result& r : c.results) generated += int64_t(r.tokens.size());
  EXPECT_EQ(st.generated_tokens, generated);
  EXPECT_LT(st.decode_steps * 2, generated) << st.decode_steps << " steps for " << generated << " tokens";
  int64_t shared = 0;
  for (const Result& r : c.results) shared += r.cached > 0;
  EXPECT_GE(shared, 5);
  // Only the prefix cache holds blocks once every request is done.
  EXPECT_EQ(st.active, 0);
  EXPECT_EQ(st.kv_blocks_used, st.kv_blocks_cached);
}

// A client told that its request ended reads stats() without it: the end is told after the
// step's snapshot (read in the callback itself, as a server's handler may).
TEST(ServeEngine, StatsNoLongerCountARequestWhenItsEndIsTold) {
  serve::Engine engine(*model(), serve::EngineOptions{});
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  serve::EngineStats seen;
  serve::Request r;
  r.prompt = {7, 8, 9, 10};
  r.sampling.max_new_tokens = 3;
  r.on_finish = [&](const std::string&, int64_t, int64_t) {
    serve::EngineStats st = engine.stats();
    std::lock_guard<std::mutex> lock(mu);
    seen = st;
    done = true;
    cv.notify_all();
  };
  ASSERT_GE(engine.submit(std::move(r)), 0);
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return done; }));
  EXPECT_EQ(seen.active, 0);
  EXPECT_EQ(seen.generated_tokens, 3);
  EXPECT_EQ(seen.kv_blocks_used, seen.kv_blocks_cached);
}

TEST(ServeEngine, CancellationQueueLimitAndBadPrompts) {
  serve::EngineOptions o;
  o.parallel = 1;
  o.max_queue = 2;
  serve::Engine engine(*model(), o);
  Collector c(4);
  // A long request occupies the only slot (held at its first token); two wait; the fourth is refused.
  std::mutex latch_mu;
  std::condition_variable latch_cv;
  bool started = false, released = false;
  serve::Request first = c.request(0, {1, 2, 3}, 100);
  first.sampling.ignore_eos = true;
  auto inner = first.on_token;
  first.on_token = [&, inner](const serve::TokenEvent& e) {
    std::unique_lock<std::mutex> lock(latch_mu);
    started = true;
    latch_cv.notify_all();
    latch_cv.wait(lock, [&] { return released; });
    return inner(e);
  };
  const int64_t id0 = engine.submit(std::move(first));
  {
    std::unique_lock<std::mutex> lock(latch_mu);
    latch_cv.wait(lock, [&] { return started; });
  }
  const int64_t id1 = engine.submit(c.request(1, {4, 5}, 3));
  const int64_t id2 = engine.submit(c.request(2, {6, 7}, 3));
  EXPECT_GE(id1, 0);
  EXPECT_GE(id2, 0);
  EXPECT_EQ(engine.submit(c.request(3, {8}, 3)), -1);
  c.results[3].done = true;
  engine.cancel(id0);
  engine.cancel(id2);
  {
    std::lock_guard<std::mutex> lock(latch_mu);
    released = true;
  }
  latch_cv.notify_all();
  c.wait();
  EXPECT_EQ(c.results[0].reason, "cancelled");
  EXPECT_LT(int64_t(c.results[0].tokens.size()), 100);
  EXPECT_EQ(c.results[2].reason, "cancelled");
  EXPECT_EQ(c.results[1].tokens, alone({4, 5}, 3));
  EXPECT_EQ(engine.stats().requests_rejected, 1);
  // A client that goes away (on_token returns false) ends its request.
  Collector d(1);
  serve::Request gone = d.request(0, {9, 9, 9}, 50);
  gone.on_token = [](const serve::TokenEvent&) { return false; };
  engine.submit(std::move(gone));
  d.wait();
  EXPECT_EQ(d.results[0].reason, "cancelled");
  EXPECT_EQ(engine.stats().kv_blocks_used, engine.stats().kv_blocks_cached);
  // Bad prompts are refused before they reach the scheduler.
  EXPECT_THROW(engine.submit(c.request(0, {}, 3)), ValueError);
  EXPECT_THROW(engine.submit(c.request(0, {1, 61}, 3)), ValueError);
  EXPECT_THROW(engine.submit(c.request(0, std::vector<int64_t>(128, 1), 3)), ValueError);
}

TEST(ServeEngine, SampledRequestsFollowTheirSeeds) {
  serve::EngineOptions o;
  o.parallel = 3;
  serve::Engine engine(*model(), o);
  Collector c(3);
  for (size_t i = 0; i < 3; ++i) {
    serve::Request r = c.request(i, {5, 6, 7, 8}, 8);
    r.sampling.do_sample = true;
    r.sampling.temperature = 0.9;
    r.sampling.top_k = 20;
    r.sampling.seed = i == 2 ? 99 : 42;  // 0 and 1 share a seed
    r.sampling.ignore_eos = true;
    engine.submit(std::move(r));
  }
  c.wait();
  models::GenerationConfig g;
  g.max_new_tokens = 8;
  g.do_sample = true;
  g.temperature = 0.9;
  g.top_k = 20;
  g.seed = 42;
  g.ignore_eos = true;
  EXPECT_EQ(c.results[0].tokens, models::generate(*model(), std::vector<std::vector<int64_t>>{{5, 6, 7, 8}}, g).tokens.front());
  EXPECT_EQ(c.results[0].tokens, c.results[1].tokens);
}
