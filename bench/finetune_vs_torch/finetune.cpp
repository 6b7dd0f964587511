// Foundry side of bench/finetune_vs_torch: LoRA training steps on an HF folder (frozen base, float
// or quantized in memory), AdamW on the adapter only. Prints one JSON line: median ms/step over
// `steps` after `warmup` steps, tokens/s, peak RSS.
#include "../bench_main.h"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "foundry/core/parallel.h"
#include "foundry/models/pretrained.h"
#include "foundry/ops/autocast.h"
#include "foundry/ops/ops.h"
#include "foundry/optim/optimizer.h"
#include "foundry/peft/lora.h"

using namespace foundry;

static int run(int argc, char** argv) {
  std::string model_dir, targets = "q_proj,v_proj", precision = "float32", quantize;
  int threads = 2, warmup = 2, steps = 6;
  bool checkpointing = false;
  int64_t batch = 4, seq = 128, r = 8;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return bench::option_value(argc, argv, i); };
    auto number = [&](int64_t min) { return bench::integer_option(argc, argv, i, min); };
    if (a == "--model") model_dir = next();
    else if (a == "--targets") targets = next();
    else if (a == "--precision") precision = bench::choice_option(argc, argv, i, {"float32", "bfloat16"});
    else if (a == "--quantize") quantize = next();
    else if (a == "--threads") threads = int(number(1));
    else if (a == "--steps") steps = int(number(1));
    else if (a == "--warmup") warmup = int(number(0));
    else if (a == "--batch") batch = number(1);
    else if (a == "--seq") seq = number(1);
    else if (a == "--r") r = number(1);
    else if (a == "--checkpointing") checkpointing = true;
    else bench::unknown_option(a);
  }
  set_num_threads(threads);
  manual_seed(0);
  std::shared_ptr<models::CausalLM> model = models::load_pretrained(model_dir);
  if (!quantize.empty()) peft::quantize_base(*model, quantize);
  peft::LoraConfig c;
  c.r = r;
  c.lora_alpha = 2.0 * double(r);
  if (targets == "all-linear") c.all_linear = true;
  else {
    std::stringstream ss(targets);
    for (std::string t; std::getline(ss, t, ',');) c.target_modules.push_back(t);
  }
  peft::PeftModel lora(model, c);
  model->set_gradient_checkpointing(checkpointing);
  lora.train();
  std::vector<Tensor> params;
  for (const Tensor& p : lora.parameters())
    if (p.requires_grad()) params.push_back(p);
  optim::AdamW opt(params, {.lr = 1e-4, .weight_decay = 0.0});
  const int64_t vocab = model->config().vocab_size;
  Tensor x = randint(0, vocab, {batch, seq});
  std::vector<double> times;
  double loss = 0;
  for (int s = 0; s < warmup + steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    Tensor l;
    {
      autocast::AutocastGuard ac(precision == "bfloat16");
      l = lora(x, Tensor(), x).loss;
    }
    l.backward();
    opt.step();
    opt.zero_grad();
    loss = l.item<double>();
    if (s >= warmup)
      times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  const double ms = times[times.size() / 2];
  std::printf("{\"ms\": %.2f, \"tokens_per_s\": %.1f, \"peak_rss_mb\": %.1f, \"loss\": %.4f, \"trainable\": %zu}\n", ms,
              double(batch * seq) / (ms / 1000.0), bench::peak_rss_mb(), loss, params.size());
  return 0;
}

int main(int argc, char** argv) {
  return foundry::bench::guarded_main(argc, argv, 
      "usage: bench_finetune --model DIR [--targets q_proj,v_proj|all-linear] [--precision float32|bfloat16]\n"
      "                      [--quantize nf4|int8|FMT] [--checkpointing] [--threads N] [--steps N] [--warmup N]\n"
      "                      [--batch N] [--seq N] [--r N]\n"
      "LoRA training steps over an HF folder; prints one JSON line (ms, tokens_per_s, peak_rss_mb).\n", [&] { return run(argc, argv); });
}
