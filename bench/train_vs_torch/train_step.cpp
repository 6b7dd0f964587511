// Foundry side of bench/train_vs_torch: GPT-2 124M shape (the gpt2 architecture of the model
// registry, HF names), AdamW, batch x seq tokens per step.
// Prints one JSON line: median ms/step over `steps` after `warmup` steps, tokens/s, peak RSS.
#include "../bench_main.h"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "foundry/core/allocator.h"
#include "foundry/core/parallel.h"
#include "foundry/models/pretrained.h"
#include "foundry/ops/autocast.h"
#include "foundry/ops/ops.h"
#include "foundry/optim/optimizer.h"

using namespace foundry;

static int run(int argc, char** argv) {
  int threads = 1, warmup = 2, steps = 10;
  int64_t batch = 4, seq = 64;
  std::string precision = "float32";
  bool ckpt = false;
  int64_t layers = 12;  // GPT-2 124M
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return bench::option_value(argc, argv, i); };
    auto number = [&](int64_t min) { return bench::integer_option(argc, argv, i, min); };
    if (a == "--threads") threads = int(number(1));
    else if (a == "--steps") steps = int(number(1));
    else if (a == "--warmup") warmup = int(number(0));
    else if (a == "--batch") batch = number(1);
    else if (a == "--seq") seq = number(1);
    else if (a == "--precision") precision = bench::choice_option(argc, argv, i, {"float32", "bfloat16"});
    else if (a == "--checkpointing") ckpt = true;
    else if (a == "--layers") layers = number(1);
    else bench::unknown_option(a);
  }
  set_num_threads(threads);
  manual_seed(0);
  const int64_t vocab = 50257;
  auto model = models::create_model(
      "{\"model_type\": \"gpt2\", \"vocab_size\": 50257, \"n_positions\": 1024, \"n_embd\": 768, \"n_layer\": " +
      std::to_string(layers) + ", \"n_head\": 12, \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, \"attn_pdrop\": 0.0}");
  model->set_gradient_checkpointing(ckpt);
  optim::AdamW opt(model->parameters(), {.lr = 3e-4, .weight_decay = 0.1});
  Tensor x = randint(0, vocab, {batch, seq}), y = randint(0, vocab, {batch, seq});
  std::vector<double> times;
  double loss = 0;
  for (int s = 0; s < warmup + steps; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    Tensor l;
    {
      autocast::AutocastGuard ac(precision == "bfloat16");
      l = cross_entropy(model->forward(x).reshape({-1, vocab}), y.reshape({-1}));
    }
    l.backward();
    opt.step();
    loss = l.item<double>();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (s >= warmup) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  double med = times[times.size() / 2];
  AllocatorStats mem = allocator::stats();
  std::printf(
      "{\"ms\": %.2f, \"tokens_per_s\": %.1f, \"peak_rss_mb\": %.1f, \"peak_tensor_mb\": %.1f, "
      "\"cached_mb\": %.1f, \"loss\": %.4f}\n",
      med, double(batch * seq) / (med / 1000), bench::peak_rss_mb(), double(mem.peak_bytes) / (1 << 20),
      double(mem.cached_bytes) / (1 << 20), loss);
  return 0;
}

int main(int argc, char** argv) {
  return foundry::bench::guarded_main(argc, argv, 
      "usage: bench_train_step [--threads N] [--steps N] [--warmup N] [--batch N] [--seq N]\n"
      "                        [--precision float32|bfloat16] [--checkpointing] [--layers N]\n"
      "One GPT-2 124M-shape AdamW training step; prints one JSON line (ms, tokens_per_s, peak_rss_mb).\n", [&] { return run(argc, argv); });
}
