// bench/infer_ab/prefill_loop.cpp: steady-state prefill of one build, for A/B comparisons of two
// builds' libfoundry (compile it against each tree; see README.md here; the tree's own build makes
// build/bin/bench_prefill_loop):
//   g++ -std=c++20 -O2 -ITREE/include prefill_loop.cpp -o pl -LTREE/build/lib -lfoundry -lfmt -fopenmp
//       -Wl,-rpath,TREE/build/lib
//   OMP_NUM_THREADS=2 ./pl MODEL_DIR QUANTIZE THREADS TOKENS REPS
// Prints the first four forwards (the first quantizes on first use) and the median / best of REPS more.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "../bench_main.h"
#include "foundry/core/parallel.h"
#include "foundry/models/pretrained.h"
#include "foundry/ops/ops.h"
#include "foundry/autograd/grad_mode.h"
using namespace foundry;
static int run(int argc, char** argv) {
  if (argc != 6) throw std::invalid_argument("expected MODEL_DIR QUANTIZE THREADS TOKENS REPS (see --help)");
  set_num_threads(int(bench::integer_value("THREADS", argv[3], 1)));
  const int64_t T = bench::integer_value("TOKENS", argv[4], 1), reps = bench::integer_value("REPS", argv[5], 1);
  models::LoadOptions o;
  o.quantize = argv[2];
  auto m = models::load_pretrained(argv[1], o);
  manual_seed(0);
  std::vector<int64_t> ids = randint(0, m->config().vocab_size, {T}).to_vector<int64_t>();
  autograd::NoGradGuard ng;
  Tensor x = tensor<int64_t>(ids, {1, T});
  std::vector<double> ms;
  std::string first;
  for (int r = 0; r < 4; ++r) {
    auto t = std::chrono::steady_clock::now();
    m->forward(x, {}, nullptr, 1);
    first += std::to_string(int(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count())) + " ";
  }
  std::printf("first forwards ms: %s| ", first.c_str());
  for (int r = 0; r < reps; ++r) {
    auto t = std::chrono::steady_clock::now();
    m->forward(x, {}, nullptr, 1);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count());
  }
  std::sort(ms.begin(), ms.end());
  std::printf("median %.2f ms best %.2f ms\n", ms[ms.size() / 2], ms[0]);
  return 0;
}

int main(int argc, char** argv) {
  return bench::guarded_main(argc, argv,
                             "usage: prefill_loop MODEL_DIR QUANTIZE THREADS TOKENS REPS  (QUANTIZE \"\": float32)\n"
                             "Times TOKENS-token prefills: the first four forwards, then the median and best of REPS.\n",
                             [&] { return run(argc, argv); });
}
