// Foundry side of bench/infer_vs_torch and bench/quant_decode: load an HF folder (or GGUF file),
// prefill `prefill` tokens, then decode `decode` tokens greedily after a `prompt`-token prompt.
// Prints one JSON line. `--stream-mb N` instead measures the read bandwidth of summing an N MB
// float32 array (STREAM-style; the best of 10 passes); `--products FORMAT` times decode's
// matrix-vector kernels alone over one token of Llama-110M's weights beside a plain sum
// (products.cpp).
#include "../bench_main.h"
#include "products.h"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <unistd.h>
#include <string>
#include <vector>

#include "foundry/core/allocator.h"
#include "foundry/core/cpu.h"
#include "foundry/core/parallel.h"
#include "foundry/autograd/grad_mode.h"
#include "foundry/models/encoder.h"
#include "foundry/models/generate.h"
#include "foundry/ops/ops.h"

using namespace foundry;

namespace {

// perf's control pipes, named by FOUNDRY_PERF_CTL_FD / FOUNDRY_PERF_ACK_FD when perf runs this
// program with --control fd:CTL,ACK: each command waits for perf's "ack", so the window's edges
// are where the program says. Without them, nothing happens.
class PerfWindow {
 public:
  PerfWindow() : ctl_(fd("FOUNDRY_PERF_CTL_FD")), ack_(fd("FOUNDRY_PERF_ACK_FD")) {}
  void enable() {
    if (!on_) on_ = command("enable\n");
  }
  void disable() {
    if (on_) on_ = !command("disable\n");
  }

 private:
  static int fd(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::atoi(v) : -1;
  }
  bool command(const char* text) const {
    if (ctl_ < 0 || ack_ < 0) return false;
    if (::write(ctl_, text, std::strlen(text)) < 0) throw std::runtime_error("perf control pipe: write failed");
    char reply[16] = {};
    if (::read(ack_, reply, sizeof reply - 1) <= 0) throw std::runtime_error("perf control pipe: no ack");
    return true;
  }
  int ctl_, ack_;
  bool on_ = false;
};

}  // namespace

static int run(int argc, char** argv) {
  std::string dir, quantize, dtype = "float32", quantized_prefill = "auto", kv_cache;
  int64_t stream_mb = 0;
  std::string products;
  int rounds = 30;
  int threads = 1;
  int64_t prefill = 128, prompt = 32, decode = 128, batch = 8, seq = 128;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return bench::option_value(argc, argv, i); };
    auto number = [&](int64_t min) { return bench::integer_option(argc, argv, i, min); };
    if (a == "--model") dir = next();
    else if (a == "--threads") threads = int(number(1));
    else if (a == "--prefill") prefill = number(1);
    else if (a == "--prompt") prompt = number(1);
    else if (a == "--decode") decode = number(1);
    else if (a == "--quantize") quantize = next();
    else if (a == "--dtype") dtype = bench::choice_option(argc, argv, i, {"float32", "native"});
    else if (a == "--quantized-prefill") quantized_prefill = next();
    else if (a == "--kv-cache") kv_cache = next();
    else if (a == "--stream-mb") stream_mb = number(1);
    else if (a == "--products") products = next();
    else if (a == "--capability") {
      std::printf("%s\n", cpu_capability().c_str());  // what the kernels dispatch to (FOUNDRY_MAX_ISA caps it)
      return 0;
    }
    else if (a == "--rounds") rounds = int(number(1));
    else if (a == "--batch") batch = number(1);
    else if (a == "--seq") seq = number(1);
    else bench::unknown_option(a);
  }
  set_num_threads(threads);
  using clock = std::chrono::steady_clock;
  if (!products.empty()) {
    if (rounds < 1) throw std::invalid_argument("--rounds must be at least 1");
    return bench::products_bench(products, rounds);
  }
  if (stream_mb > 0) {
    Tensor big = ones({stream_mb * 1024 * 1024 / 4});
    double best = 1e9;
    for (int rep = 0; rep < 10; ++rep) {
      auto t = clock::now();
      sum(big).item<float>();
      best = std::min(best, std::chrono::duration<double>(clock::now() - t).count());
    }
    std::printf("{\"read_gb_s\": %.2f}\n", double(big.nbytes()) / best / 1e9);
    return 0;
  }
  // Inference, as the PyTorch side's torch.no_grad(): a loaded float32 model's parameters require
  // grad (it can be fine-tuned), so without this every forward would keep its autograd graph.
  autograd::NoGradGuard no_grad;
  auto t0 = clock::now();
  if (models::is_encoder_folder(dir)) {  // BERT / RoBERTa: `batch` sequences of `seq` tokens per forward
    auto encoder = models::load_encoder(dir);
    const double load_s = std::chrono::duration<double>(clock::now() - t0).count();
    manual_seed(0);
    Tensor ids = randint(0, encoder->config().vocab_size, {batch, seq});
    std::vector<double> times;
    for (int rep = 0; rep < 6; ++rep) {
      auto t = clock::now();
      encoder->encode(ids);
      if (rep > 0) times.push_back(std::chrono::duration<double>(clock::now() - t).count());
    }
    std::sort(times.begin(), times.end());
    std::printf("{\"load_s\": %.4f, \"seq_per_s\": %.2f, \"peak_rss_mb\": %.1f}\n", load_s,
                double(batch) / times[times.size() / 2], bench::peak_rss_mb());
    return 0;
  }
  models::LoadOptions options;
  options.quantize = quantize;
  options.quantized_prefill = quantized_prefill;
  options.kv_cache = kv_cache;
  options.pack_bf16 = true;  // as `foundry generate` loads
  if (dtype == "native") options.dtype = std::nullopt;
  auto model = models::load_pretrained(dir, options);
  const double load_s = std::chrono::duration<double>(clock::now() - t0).count();
  const int64_t V = model->config().vocab_size;
  manual_seed(0);
  std::vector<int64_t> ids = randint(0, V, {std::max(prefill, prompt)}).to_vector<int64_t>();
  std::vector<double> times;
  // One untimed warm-up (it quantizes the weights on first use and fills the allocator's cache),
  // then the median of 5: the steady state, not the first forwards after load.
  for (int rep = 0; rep < 6; ++rep) {
    auto t = clock::now();
    model->forward(tensor<int64_t>(std::vector<int64_t>(ids.begin(), ids.begin() + prefill), {1, prefill}), {}, nullptr, 1);
    if (rep > 0) times.push_back(std::chrono::duration<double>(clock::now() - t).count());
  }
  std::sort(times.begin(), times.end());
  const double prefill_tps = double(prefill) / times[times.size() / 2];
  models::GenerationConfig g;
  g.max_new_tokens = decode;
  g.ignore_eos = true;
  std::vector<int64_t> p(ids.begin(), ids.begin() + prompt);
  // Under `perf record --control fd:CTL,ACK -D -1` (bench/decode_profile), perf samples the decode
  // loop alone: from the first new token (the prompt's pass done) to the last.
  PerfWindow window;
  int64_t allocs_at_first_token = -1;
  g.on_token = [&](int64_t, int64_t) {
    if (allocs_at_first_token < 0) allocs_at_first_token = allocator::stats().num_allocs;
    window.enable();
  };
  models::GenerationResult r = models::generate(*model, {p}, g);
  window.disable();
  // The allocator's blocks taken a decode step (tensors' storage; cache hits included): the
  // step's per-token bookkeeping, beside its time (bench/decode_profile).
  const double allocs_per_token = r.decode_steps > 0 && allocs_at_first_token >= 0
      ? double(allocator::stats().num_allocs - allocs_at_first_token) / double(r.decode_steps) : 0.0;
  // The first new token comes from the prompt's pass; the decode loop ran the other decode - 1.
  const double decode_tps = double(r.decode_steps) / r.decode_seconds;
  std::printf("{\"load_s\": %.4f, \"prefill_tps\": %.1f, \"decode_tps\": %.2f, \"allocs_per_token\": %.1f, \"peak_rss_mb\": %.1f}\n",
              load_s, prefill_tps, decode_tps, allocs_per_token, bench::peak_rss_mb());
  return 0;
}

int main(int argc, char** argv) {
  return foundry::bench::guarded_main(argc, argv, 
      "usage: bench_infer --model DIR [--threads N] [--prefill N] [--prompt N] [--decode N] [--quantize FMT]\n"
      "                   [--quantized-prefill auto|integer|float32|bfloat16] [--kv-cache f16|bf16|q8_0]\n"
      "                   [--dtype float32|native] [--batch N --seq N (encoder folders)]\n"
      "       bench_infer --stream-mb MB [--threads N]   (read bandwidth: sum of an MB-sized array)\n"
      "       bench_infer --capability   (the instruction set the kernels use: foundry::cpu_capability())\n"
      "       bench_infer --products FMT [--threads N] [--rounds N]   (decode's products over one token of\n"
      "                   Llama-110M's weights in FMT beside a plain sum of as many bytes, alternating; medians;\n"
      "                   where FMT's matrices are kept in groups of 8 rows, the row layout too: rows_layout_gb_s)\n"
      "Prints one JSON line: load_s, prefill_tps, decode_tps, allocs_per_token (the allocator's blocks a decode\n"
      "step), peak_rss_mb (an encoder folder: load_s, seq_per_s, peak_rss_mb).\n", [&] { return run(argc, argv); });
}
