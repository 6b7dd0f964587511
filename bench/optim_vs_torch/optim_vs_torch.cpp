// Foundry side of bench/optim_vs_torch: one AdamW step (and clip_grad_norm_) over GPT-2 124M-sized
// parameters (148 tensors, 124.4M floats), with a fixed thread count. Prints one JSON object per
// line ({"case", "ms", "bytes"}); bench/optim_vs_torch/run.py runs this next to PyTorch 1.13 and
// prints the table. Cases:
//   adamw_fused        the default: one parallel loop over all tensors (per-tensor SIMD kernel)
//   adamw_fused_flat   the same after FlatParameters (parameters and gradients in one buffer)
//   adamw_fused_flat_params  FlatParameters for the parameters only (gradients stay separate)
//   adamw_reference    fused=false: torch's single-tensor algorithm written with Foundry ops
//   clip_grad_norm     clip_grad_norm_(params, 1e-3) (norm + scale)
// Each case reports the best and the median of `--reps` steps after one warm-up step.
#include "../bench_main.h"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "foundry/autograd/grad_mode.h"
#include "foundry/core/parallel.h"
#include "foundry/ops/ops.h"
#include "foundry/optim/optimizer.h"

using namespace foundry;

namespace {

// Best and median of `reps` timed calls after one warm-up (state allocation, page faults).
struct Timing {
  double best, median;
};
Timing time_ms(const std::function<void()>& fn, int reps) {
  fn();
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  return {times.front(), times[times.size() / 2]};
}

void report(const char* name, Timing t, double bytes) {
  std::printf("{\"case\": \"%s\", \"ms\": %.3f, \"median_ms\": %.3f, \"bytes\": %.0f}\n", name, t.best, t.median,
              bytes);
  std::fflush(stdout);
}

// The same list as shapes.py.
std::vector<std::vector<int64_t>> gpt2_124m_shapes() {
  const int64_t d = 768;
  std::vector<std::vector<int64_t>> s = {{50257, d}, {1024, d}};
  for (int i = 0; i < 12; ++i) {
    for (auto shape : std::vector<std::vector<int64_t>>{{d}, {d}, {d, 3 * d}, {3 * d}, {d, d}, {d}, {d}, {d}, {d, 4 * d},
                                                        {4 * d}, {4 * d, d}, {d}})
      s.push_back(shape);
  }
  s.push_back({d});
  s.push_back({d});
  return s;
}

std::vector<Tensor> make_params(uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> ps;
  for (const auto& shape : gpt2_124m_shapes()) {
    Tensor p = (randn(shape, {}, &gen) * 0.02).requires_grad_(true);
    p.set_grad(randn(shape, {}, &gen) * 0.01);
    ps.push_back(p);
  }
  return ps;
}

}  // namespace

static int run(int argc, char** argv) {
  int threads = 1, reps = 7;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--threads") threads = int(bench::integer_option(argc, argv, i, 1));
    else if (a == "--reps") reps = int(bench::integer_option(argc, argv, i, 1));
    else if (a == "--only") only = bench::option_value(argc, argv, i);
    else bench::unknown_option(a);
  }
  set_num_threads(threads);
  bool matched = false;
  auto want = [&](const char* name) { return only.empty() || (only == name && (matched = true)); };
  int64_t n = 0;
  for (const auto& s : gpt2_124m_shapes()) n += numel_of(s);
  const double adam_bytes = 28.0 * double(n);  // read p, g, m, v; write p, m, v

  if (want("adamw_fused")) {
    auto ps = make_params(1);
    optim::AdamW opt(ps, {.lr = 6e-4, .weight_decay = 0.1});
    report("adamw_fused", time_ms([&] { opt.step(); }, reps), adam_bytes);
  }
  if (want("adamw_fused_flat")) {
    auto ps = make_params(1);
    optim::FlatParameters flat(ps, /*flat_grads=*/true);
    optim::AdamW opt(ps, {.lr = 6e-4, .weight_decay = 0.1});
    report("adamw_fused_flat", time_ms([&] { opt.step(); }, reps), adam_bytes);
  }
  if (want("adamw_fused_flat_params")) {  // parameters flat, gradients where autograd put them
    auto ps = make_params(1);
    optim::FlatParameters flat(ps, /*flat_grads=*/false);
    optim::AdamW opt(ps, {.lr = 6e-4, .weight_decay = 0.1});
    report("adamw_fused_flat_params", time_ms([&] { opt.step(); }, reps), adam_bytes);
  }
  if (want("adamw_reference")) {
    auto ps = make_params(1);
    optim::AdamW opt(ps, {.lr = 6e-4, .weight_decay = 0.1, .fused = false});
    report("adamw_reference", time_ms([&] { opt.step(); }, std::max(3, reps / 2)), adam_bytes);
  }
  if (want("clip_grad_norm")) {
    auto ps = make_params(2);
    // max_norm small enough that every call scales (torch multiplies even by 1; Foundry skips that).
    report("clip_grad_norm", time_ms([&] { optim::clip_grad_norm_(ps, 1e-3); }, reps), 12.0 * double(n));
  }
  bench::check_only_matched(only, matched);
  return 0;
}

int main(int argc, char** argv) {
  return foundry::bench::guarded_main(argc, argv, 
      "usage: bench_optim_vs_torch [--threads N] [--reps N] [--only CASE]\n"
      "Times optimizer updates over GPT-2 124M's parameter shapes; one JSON line per case.\n", [&] { return run(argc, argv); });
}
