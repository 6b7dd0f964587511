// bench_infer --products FORMAT: how fast decode's matrix-vector kernels stream one token's weights,
// beside a plain sum over as many bytes, in one process. The weights are Llama-110M's matrices
// (12 layers of q/k/v, o, gate/up and down, and the 32000-row output matrix), each in its own
// allocation on huge pages, run as decode runs them (quant::gemv_many, one job per layer's matrices
// that share an activation); a round is one token's products, then a plain sum over the same bytes
// (64-bit words, in 64 KB chunks through the same thread pool), alternating; the figures are
// medians. On a shared host a whole-model decode moves by up to 2x from one process to the next
// (q4_0 at 1 thread: 180-360 tokens/s), and so does this bench's absolute figure (the memory a process is given streams at different speeds);
// the ratio to the plain sum over the same memory, and A/B runs within one process, are what make a
// kernel change of a few percent measurable. Where quant::preferred_layout keeps a format's matrices
// in another layout than their rows (q4_0 in groups of 8 rows), the products run in it, and a copy in
// the row layout runs too, alternating in the same rounds ("rows_layout_gb_s"). Packed bf16 reads
// fewer bytes than its rows hold: every figure is the rows' bytes over the time (what a plain bf16
// stream would have to read to keep up).
#include "products.h"

#include <sys/mman.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "foundry/core/error.h"
#include "foundry/core/parallel.h"
#include "quant/bf16_packed.h"
#include "quant/q8_kernels.h"

namespace foundry::bench {
namespace {

constexpr int64_t kHidden = 768, kIntermediate = 2048, kLayers = 12, kVocab = 32000;

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

// rows x k weights of format t: a few quantized random rows repeated (the kernels' speed does not
// depend on the values), in 2 MiB-aligned memory advised into huge pages as the models' are.
struct Matrix {
  std::unique_ptr<uint8_t, FreeDeleter> bytes;
  int64_t rows = 0, k = 0;
};

// `bytes` in 2 MiB-aligned memory advised into huge pages.
std::unique_ptr<uint8_t, FreeDeleter> huge_page_bytes(size_t bytes) {
  constexpr size_t kHuge = size_t(2) << 20;
  const size_t size = (bytes + kHuge - 1) / kHuge * kHuge;
  std::unique_ptr<uint8_t, FreeDeleter> p(static_cast<uint8_t*>(std::aligned_alloc(kHuge, size)));
  if (!p) raise<Error>("out of memory: {} MB of weights", size >> 20);
  madvise(p.get(), size, MADV_HUGEPAGE);
  return p;
}

Matrix make_matrix(const quant::BlockFormatTraits& t, int64_t rows, int64_t k, std::mt19937& rng) {
  constexpr int64_t kDistinctRows = 64;
  const int64_t row_bytes = quant::quantized_bytes(t, 1, k);
  std::vector<float> x(static_cast<size_t>(k));
  std::normal_distribution<float> normal(0.f, 0.02f);
  std::vector<uint8_t> distinct(static_cast<size_t>(kDistinctRows * row_bytes));
  for (int64_t r = 0; r < kDistinctRows; ++r) {
    for (float& v : x) v = normal(rng);
    t.quantize(x.data(), distinct.data() + r * row_bytes, k);
  }
  Matrix m{huge_page_bytes(size_t(rows * row_bytes)), rows, k};
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(m.bytes.get() + r * row_bytes, distinct.data() + (r % kDistinctRows) * row_bytes, size_t(row_bytes));
  return m;
}

// The same bytes in memory of their own, placed as make_matrix places them.
Matrix copy_of(const quant::BlockFormatTraits& t, const Matrix& m) {
  const size_t bytes = size_t(quant::quantized_bytes(t, m.rows, m.k));
  Matrix copy{huge_page_bytes(bytes), m.rows, m.k};
  std::memcpy(copy.bytes.get(), m.bytes.get(), bytes);
  return copy;
}

// A bf16 matrix packed (quant::WeightLayout::PackedBF16), placed alike.
Matrix packed_copy(const Matrix& m) {
  const auto* w = reinterpret_cast<const uint16_t*>(m.bytes.get());
  const quant::PackedBF16Plan plan = quant::plan_packed_bf16(w, m.rows, m.k);
  Matrix packed{huge_page_bytes(size_t(plan.bytes())), m.rows, m.k};
  quant::pack_bf16(w, plan, packed.bytes.get(), plan.bytes());
  return packed;
}

// Words [b, e) summed: 256 bits a load, four accumulators (AVX2 where the CPU has it: the plain
// read should be as fast as this core reads).
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2"))) uint64_t sum_words_avx2(const uint64_t* w, int64_t b, int64_t e) {
  __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
  int64_t i = b;
  for (; i + 16 <= e; i += 16)
    for (int j = 0; j < 4; ++j)
      acc[j] = _mm256_add_epi64(acc[j], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i + 4 * j)));
  alignas(32) uint64_t lanes[4];
  const __m256i total = _mm256_add_epi64(_mm256_add_epi64(acc[0], acc[1]), _mm256_add_epi64(acc[2], acc[3]));
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), total);
  uint64_t s = lanes[0] + lanes[1] + lanes[2] + lanes[3];
  for (; i < e; ++i) s += w[i];
  return s;
}
#endif

uint64_t sum_words(const uint64_t* w, int64_t b, int64_t e) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return sum_words_avx2(w, b, e);
#endif
  uint64_t s = 0;
  for (int64_t i = b; i < e; ++i) s += w[i];
  return s;
}

// The plain read: every byte of the matrices summed as 64-bit words, a chunk's sum into `partial`
// (sized for the largest matrix by the caller, so the timed loop allocates nothing).
constexpr int64_t kChunkWords = 8192;
uint64_t plain_sum(const std::vector<std::vector<Matrix>>& jobs, const quant::BlockFormatTraits& t,
                   std::vector<uint64_t>& partial) {
  uint64_t total = 0;
  for (const auto& job : jobs)
    for (const Matrix& m : job) {
      const auto* words = reinterpret_cast<const uint64_t*>(m.bytes.get());
      const int64_t n = quant::quantized_bytes(t, m.rows, m.k) / 8, chunks = (n + kChunkWords - 1) / kChunkWords;
      parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c)
          partial[size_t(c)] = sum_words(words, c * kChunkWords, std::min(n, (c + 1) * kChunkWords));
      });
      for (int64_t c = 0; c < chunks; ++c) total += partial[size_t(c)];
    }
  return total;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int products_bench(const std::string& format, int rounds) {
  const quant::BlockFormatTraits& t = quant::traits(format);
  const quant::BlockFormatTraits& act = quant::traits(t.dot_format);
  std::mt19937 rng(0);
  // One job per group of matrices that share an activation row, in a layer's order.
  std::vector<std::vector<Matrix>> jobs;
  for (int64_t l = 0; l < kLayers; ++l) {
    std::vector<Matrix> qkv, o, gate_up, down;
    for (int i = 0; i < 3; ++i) qkv.push_back(make_matrix(t, kHidden, kHidden, rng));
    o.push_back(make_matrix(t, kHidden, kHidden, rng));
    for (int i = 0; i < 2; ++i) gate_up.push_back(make_matrix(t, kIntermediate, kHidden, rng));
    down.push_back(make_matrix(t, kHidden, kIntermediate, rng));
    jobs.push_back(std::move(qkv));
    jobs.push_back(std::move(o));
    jobs.push_back(std::move(gate_up));
    jobs.push_back(std::move(down));
  }
  jobs.emplace_back();
  jobs.back().push_back(make_matrix(t, kVocab, kHidden, rng));
  int64_t weight_bytes = 0, largest = 0;
  for (const auto& job : jobs)
    for (const Matrix& m : job) {
      weight_bytes += quant::quantized_bytes(t, m.rows, m.k);
      largest = std::max(largest, quant::quantized_bytes(t, m.rows, m.k));
    }
  std::vector<uint64_t> partial(static_cast<size_t>((largest / 8 + kChunkWords - 1) / kChunkWords));
  // Every matrix has a multiple of 8 rows: one layout for all.
  const quant::WeightLayout layout = quant::preferred_layout(t, kHidden, kHidden);
  std::vector<std::vector<Matrix>> row_jobs;  // the row layout's copy, where the layout differs
  if (layout != quant::WeightLayout::Rows) {
    for (auto& job : jobs) {
      row_jobs.emplace_back();
      for (Matrix& m : job) {
        row_jobs.back().push_back(copy_of(t, m));
        if (layout == quant::WeightLayout::PackedBF16) m = packed_copy(m);
        else quant::to_layout(t, layout, m.bytes.get(), m.rows, m.k);
      }
    }
  }
  // One activation row per width, quantized to the format's dot format.
  std::vector<uint8_t> x_hidden(size_t(quant::quantized_bytes(act, 1, kHidden)));
  std::vector<uint8_t> x_inter(size_t(quant::quantized_bytes(act, 1, kIntermediate)));
  for (auto [out, k] : {std::pair{&x_hidden, kHidden}, std::pair{&x_inter, kIntermediate}}) {
    std::vector<float> x(static_cast<size_t>(k));
    std::normal_distribution<float> normal(0.f, 1.f);
    for (float& v : x) v = normal(rng);
    act.quantize(x.data(), out->data(), k);
  }
  // Each job's targets, each matrix its own outputs.
  std::vector<float> y(static_cast<size_t>(kVocab));
  const auto targets_of = [&](const std::vector<std::vector<Matrix>>& of) {
    std::vector<std::vector<quant::GemvTarget>> targets(of.size());
    for (size_t j = 0; j < of.size(); ++j) {
      int64_t at = 0;
      for (const Matrix& m : of[j]) {
        targets[j].push_back({m.bytes.get(), m.rows, y.data() + at});
        at += m.rows;
      }
    }
    return targets;
  };
  const auto targets = targets_of(jobs), row_targets = targets_of(row_jobs);
  // One token's products over `of` in `in`, in seconds.
  const auto token = [&](const std::vector<std::vector<quant::GemvTarget>>& of, quant::WeightLayout in) {
    const auto start = std::chrono::steady_clock::now();
    for (size_t j = 0; j < jobs.size(); ++j) {
      const int64_t k = jobs[j].front().k;
      quant::gemv_many(t, k, k == kHidden ? x_hidden.data() : x_inter.data(), of[j], in);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  uint64_t checksum = 0;
  using clock = std::chrono::steady_clock;
  std::vector<double> products_gb_s, read_gb_s, row_layout_gb_s;
  for (int round = 0; round < rounds + 1; ++round) {
    const double products_s = token(targets, layout);
    const double rows_s = row_jobs.empty() ? 0. : token(row_targets, quant::WeightLayout::Rows);
    const auto start = clock::now();
    checksum += plain_sum(row_jobs.empty() ? jobs : row_jobs, t, partial);  // the bytes in rows
    const double sum_s = std::chrono::duration<double>(clock::now() - start).count();
    if (round == 0) continue;  // the first round faults the pages in
    products_gb_s.push_back(double(weight_bytes) / products_s / 1e9);
    read_gb_s.push_back(double(weight_bytes) / sum_s / 1e9);
    if (!row_jobs.empty()) row_layout_gb_s.push_back(double(weight_bytes) / rows_s / 1e9);
  }
  const double products = median(products_gb_s), read = median(read_gb_s);
  if (checksum == 42) std::printf("%g\n", double(y[0]));  // keeps the sums and products alive
  std::printf("{\"format\": \"%s\", \"weight_mb\": %.1f, \"products_gb_s\": %.2f, \"read_gb_s\": %.2f, "
              "\"of_read\": %.3f",
              t.name, double(weight_bytes) / (1 << 20), products, read, products / read);
  if (!row_layout_gb_s.empty()) std::printf(", \"rows_layout_gb_s\": %.2f", median(row_layout_gb_s));
  std::printf("}\n");
  return 0;
}

}  // namespace foundry::bench
