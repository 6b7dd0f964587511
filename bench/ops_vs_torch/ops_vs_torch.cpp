// Foundry side of bench/ops_vs_torch: times each case with a fixed thread count and prints one
// JSON object per line ({"case", "ms", "bytes", "flops"}). bench/ops_vs_torch/run.py runs this
// next to PyTorch 1.13 and prints the comparison table.
#include "../bench_main.h"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "foundry/autograd/autograd.h"
#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"

using namespace foundry;

namespace {

double median_ms(const std::function<void()>& fn, double min_total_ms = 300) {
  fn();  // warm-up (primitive caches, page faults)
  std::vector<double> times;
  double total = 0;
  while ((total < min_total_ms && times.size() < 200) || times.size() < 5) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    times.push_back(ms);
    total += ms;
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void report(const char* name, double ms, double bytes, double flops) {
  std::printf("{\"case\": \"%s\", \"ms\": %.6f, \"bytes\": %.0f, \"flops\": %.0f}\n", name, ms, bytes, flops);
  std::fflush(stdout);
}

}  // namespace

static int run(int argc, char** argv) {
  int threads = 1;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads") threads = int(bench::integer_option(argc, argv, i, 1));
    else if (a == "--only") only = bench::option_value(argc, argv, i);
    else bench::unknown_option(a);
  }
  set_num_threads(threads);
  manual_seed(0);
  autograd::NoGradGuard no_grad;
  bool matched = false;
  auto want = [&](const char* name) { return only.empty() || (only == name && (matched = true)); };

  const int64_t N = 1 << 22;  // 4M floats = 16 MB per tensor
  Tensor a = randn({N}), b = randn({N});
  Tensor m = randn({2048, 2048}), row = randn({2048});
  if (want("copy_bandwidth")) {
    Tensor dst = empty({N});
    report("copy_bandwidth", median_ms([&] { copy_into(dst, a); }), 2.0 * N * 4, 0);
  }
  if (want("add")) report("add", median_ms([&] { add(a, b); }), 3.0 * N * 4, N);
  if (want("add_broadcast")) report("add_broadcast", median_ms([&] { add(m, row); }), 2.0 * m.numel() * 4, m.numel());
  if (want("mul")) report("mul", median_ms([&] { mul(a, b); }), 3.0 * N * 4, N);
  if (want("mul_broadcast")) report("mul_broadcast", median_ms([&] { mul(m, row); }), 2.0 * m.numel() * 4, m.numel());
  if (want("exp")) report("exp", median_ms([&] { foundry::exp(a); }), 2.0 * N * 4, N);
  if (want("gelu")) report("gelu", median_ms([&] { gelu(a); }), 2.0 * N * 4, N);
  if (want("gelu_tanh")) report("gelu_tanh", median_ms([&] { gelu(a, "tanh"); }), 2.0 * N * 4, N);
  Tensor s = randn({4096, 1024});
  if (want("sum_last_dim")) report("sum_last_dim", median_ms([&] { sum(s, {-1}); }), double(s.numel()) * 4, s.numel());
  Tensor big = randn({1 << 24});
  if (want("sum_all")) report("sum_all", median_ms([&] { sum(big); }), double(big.numel()) * 4, big.numel());
  if (want("softmax")) report("softmax", median_ms([&] { softmax(s, -1); }), 2.0 * s.numel() * 4, 0);
  Tensor ln = randn({8192, 768}), w = randn({768}), bias = randn({768});
  if (want("layer_norm"))
    report("layer_norm", median_ms([&] { layer_norm(ln, {768}, w, bias); }), 2.0 * ln.numel() * 4, 0);
  struct Mm {
    const char* name;
    int64_t m, k, n;
  };
  for (Mm c : {Mm{"matmul_512", 512, 512, 512}, Mm{"matmul_1024", 1024, 1024, 1024}, Mm{"matmul_2048", 2048, 2048, 2048},
               Mm{"matmul_64x768x2304", 64, 768, 2304}, Mm{"matmul_512x768x3072", 512, 768, 3072},
               Mm{"matmul_1x768x768", 1, 768, 768}}) {
    if (!want(c.name)) continue;
    Tensor x = randn({c.m, c.k}), y = randn({c.k, c.n});
    report(c.name, median_ms([&] { matmul(x, y); }), 4.0 * double(c.m * c.k + c.k * c.n + c.m * c.n),
           2.0 * double(c.m * c.k * c.n));
  }
  if (want("conv2d_3x3")) {
    Tensor x = randn({8, 64, 56, 56}), k = randn({64, 64, 3, 3});
    double flops = 2.0 * 8 * 64 * 56 * 56 * 64 * 9;
    report("conv2d_3x3", median_ms([&] { conv2d(x, k, Tensor(), {1, 1}, {1, 1}); }), 0, flops);
  }
  if (want("sdpa_causal")) {
    Tensor q = randn({1, 12, 512, 64}), kk = randn({1, 12, 512, 64}), v = randn({1, 12, 512, 64});
    double flops = 2.0 * 2 * 12 * 512 * 512 * 64 / 2;
    report("sdpa_causal", median_ms([&] { scaled_dot_product_attention(q, kk, v, Tensor(), 0.0, true); }), 0, flops);
  }
  if (want("mlp_backward")) {
    autograd::EnableGradGuard eg;
    Tensor x = randn({256, 784}), w1 = (randn({1024, 784}) * Scalar(0.03)).requires_grad_(),
           b1 = zeros({1024}).requires_grad_(), w2 = (randn({10, 1024}) * Scalar(0.03)).requires_grad_(),
           b2 = zeros({10}).requires_grad_();
    Tensor target = randint(0, 10, {256});
    double flops = 3 * 2.0 * 256 * (784 * 1024 + 1024 * 10);
    report("mlp_backward", median_ms([&] {
             Tensor loss = cross_entropy(linear(relu(linear(x, w1, b1)), w2, b2), target);
             loss.backward();
           }),
           0, flops);
  }
  bench::check_only_matched(only, matched);
  return 0;
}

int main(int argc, char** argv) {
  return foundry::bench::guarded_main(argc, argv, 
      "usage: bench_ops_vs_torch [--threads N] [--only CASE]\n"
      "Times each op case; prints one JSON line per case (ms, bytes, flops).\n", [&] { return run(argc, argv); });
}
