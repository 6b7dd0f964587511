// Classification and correlation metrics as scikit-learn / SciPy compute them, lm-evaluation-
// harness's aggregations, and CPython's random.Random for its few-shot draws and bootstrap.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "foundry/core/error.h"
#include "foundry/eval/metrics.h"

namespace foundry::eval {

namespace {

void check_pairs(size_t a, size_t b, const char* what) {
  if (a != b) raise<ValueError>("{}: y_true has {} items but y_pred has {}", what, a, b);
  if (a == 0) raise<ValueError>("{}: no items", what);
}

}  // namespace

double accuracy(const std::vector<int64_t>& y_true, const std::vector<int64_t>& y_pred) {
  check_pairs(y_true.size(), y_pred.size(), "accuracy");
  size_t hits = 0;
  for (size_t i = 0; i < y_true.size(); ++i) hits += y_true[i] == y_pred[i];
  return double(hits) / double(y_true.size());
}

double f1_score(const std::vector<int64_t>& y_true, const std::vector<int64_t>& y_pred, const std::string& average) {
  check_pairs(y_true.size(), y_pred.size(), "f1_score");
  std::set<int64_t> labels(y_true.begin(), y_true.end());
  labels.insert(y_pred.begin(), y_pred.end());
  auto counts = [&](int64_t label, double& tp, double& fp, double& fn) {
    tp = fp = fn = 0;
    for (size_t i = 0; i < y_true.size(); ++i) {
      const bool t = y_true[i] == label, p = y_pred[i] == label;
      tp += t && p, fp += !t && p, fn += t && !p;
    }
  };
  auto f1 = [](double tp, double fp, double fn) { return tp == 0 ? 0.0 : 2 * tp / (2 * tp + fp + fn); };  // zero_division=0
  double tp, fp, fn;
  if (average == "binary") {
    if (labels.size() > 2)
      raise<ValueError>("f1_score: average=\"binary\" needs two classes but the labels have {}; use \"macro\" or \"micro\"",
                        labels.size());
    if (labels.size() == 2 && !labels.count(1))
      raise<ValueError>("f1_score: average=\"binary\" scores the positive label 1, which the labels lack");
    counts(1, tp, fp, fn);
    return f1(tp, fp, fn);
  }
  if (average == "macro") {
    double sum = 0;
    for (int64_t l : labels) counts(l, tp, fp, fn), sum += f1(tp, fp, fn);
    return sum / double(labels.size());
  }
  if (average == "micro") {
    double stp = 0, sfp = 0, sfn = 0;
    for (int64_t l : labels) counts(l, tp, fp, fn), stp += tp, sfp += fp, sfn += fn;
    return f1(stp, sfp, sfn);
  }
  raise<ValueError>("f1_score: average must be \"binary\", \"macro\" or \"micro\", got \"{}\"", average);
}

double matthews_corrcoef(const std::vector<int64_t>& y_true, const std::vector<int64_t>& y_pred) {
  check_pairs(y_true.size(), y_pred.size(), "matthews_corrcoef");
  // scikit-learn's multiclass form over the confusion matrix.
  std::map<int64_t, double> t_sum, p_sum;
  double correct = 0;
  for (size_t i = 0; i < y_true.size(); ++i) t_sum[y_true[i]] += 1, p_sum[y_pred[i]] += 1, correct += y_true[i] == y_pred[i];
  const double n = double(y_true.size());
  double tp_dot = 0, pp = 0, tt = 0;
  for (auto& [l, t] : t_sum) {
    tt += t * t;
    if (auto it = p_sum.find(l); it != p_sum.end()) tp_dot += t * it->second;
  }
  for (auto& [l, p] : p_sum) pp += p * p;
  const double cov_ytyp = correct * n - tp_dot, cov_ypyp = n * n - pp, cov_ytyt = n * n - tt;
  if (cov_ypyp * cov_ytyt == 0) return 0.0;
  return cov_ytyp / std::sqrt(cov_ytyt * cov_ypyp);
}

double pearsonr(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size()) raise<ValueError>("pearsonr: x has {} items but y has {}", x.size(), y.size());
  if (x.size() < 2) raise<ValueError>("pearsonr: needs at least 2 items, got {}", x.size());
  const double n = double(x.size());
  const double mx = std::accumulate(x.begin(), x.end(), 0.0) / n, my = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double dx = x[i] - mx, dy = y[i] - my;
    sxy += dx * dy, sxx += dx * dx, syy += dy * dy;
  }
  if (sxx == 0 || syy == 0) return std::numeric_limits<double>::quiet_NaN();  // SciPy: constant input
  return std::clamp(sxy / std::sqrt(sxx * syy), -1.0, 1.0);
}

std::vector<double> average_ranks(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> rank(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    const double r = (double(i) + double(j)) / 2 + 1;
    for (size_t k = i; k <= j; ++k) rank[order[k]] = r;
    i = j + 1;
  }
  return rank;
}

double spearmanr(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size()) raise<ValueError>("spearmanr: x has {} items but y has {}", x.size(), y.size());
  return pearsonr(average_ranks(x), average_ranks(y));
}

double mean(const std::vector<double>& xs) {
  if (xs.empty()) raise<ValueError>("mean of no items");
  return std::accumulate(xs.begin(), xs.end(), 0.0) / double(xs.size());
}

double perplexity(const std::vector<double>& loglikelihoods) { return std::exp(-mean(loglikelihoods)); }

namespace {
std::pair<double, double> sums(const std::vector<std::pair<double, double>>& items, const char* what) {
  double ll = 0, n = 0;
  for (const auto& [a, b] : items) ll += a, n += b;
  if (n <= 0) raise<ValueError>("{}: the items count no words/bytes", what);
  return {ll, n};
}
}  // namespace

double weighted_perplexity(const std::vector<std::pair<double, double>>& items) {
  const auto [ll, n] = sums(items, "weighted_perplexity");
  return std::exp(-ll / n);
}

double bits_per_byte(const std::vector<std::pair<double, double>>& items) {
  const auto [ll, n] = sums(items, "bits_per_byte");
  return -ll / n / std::log(2.0);
}

namespace {
double sample_stddev(const std::vector<double>& xs) {
  const double mu = mean(xs);
  double ss = 0;
  for (double x : xs) ss += (x - mu) * (x - mu);
  return std::sqrt(ss / double(xs.size() - 1));
}
}  // namespace

double mean_stderr(const std::vector<double>& xs) {
  if (xs.size() < 2) return std::numeric_limits<double>::quiet_NaN();
  return sample_stddev(xs) / std::sqrt(double(xs.size()));
}

// ---- CPython's Mersenne Twister ---------------------------------------------------------------

PyRandom::PyRandom(uint64_t seed) {
  // random.seed(int): init_by_array over the 32-bit words of |seed| (key [0] for 0).
  std::vector<uint32_t> key;
  do {
    key.push_back(uint32_t(seed & 0xffffffffu));
    seed >>= 32;
  } while (seed);
  mt_[0] = 19650218u;
  for (int i = 1; i < 624; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + uint32_t(i);
  int i = 1;
  size_t j = 0;
  for (size_t k = std::max<size_t>(624, key.size()); k; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] + uint32_t(j);
    ++i, ++j;
    if (i >= 624) mt_[0] = mt_[623], i = 1;
    if (j >= key.size()) j = 0;
  }
  for (int k = 623; k; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - uint32_t(i);
    ++i;
    if (i >= 624) mt_[0] = mt_[623], i = 1;
  }
  mt_[0] = 0x80000000u;
  index_ = 624;
}

uint32_t PyRandom::next_u32() {
  if (index_ >= 624) {
    for (int k = 0; k < 624; ++k) {
      const uint32_t y = (mt_[k] & 0x80000000u) | (mt_[(k + 1) % 624] & 0x7fffffffu);
      mt_[k] = mt_[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    index_ = 0;
  }
  uint32_t y = mt_[index_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

double PyRandom::random() {
  const uint32_t a = next_u32() >> 5, b = next_u32() >> 6;
  return (double(a) * 67108864.0 + double(b)) * (1.0 / 9007199254740992.0);
}

uint64_t PyRandom::randbelow(uint64_t n) {
  if (n == 0) return 0;
  int bits = 0;
  while (bits < 64 && (n >> bits)) ++bits;
  if (bits > 32) raise<ValueError>("PyRandom::randbelow: {} needs more than 32 bits", n);
  for (;;) {
    const uint64_t r = next_u32() >> (32 - bits);
    if (r < n) return r;
  }
}

std::vector<size_t> PyRandom::sample(size_t n, size_t k) {
  if (k > n) raise<ValueError>("sample larger than population: {} of {}", k, n);
  std::vector<size_t> result(k);
  size_t setsize = 21;
  if (k > 5) setsize += size_t(std::pow(4.0, std::ceil(std::log(double(k * 3)) / std::log(4.0))));
  if (n <= setsize) {
    std::vector<size_t> pool(n);
    std::iota(pool.begin(), pool.end(), 0);
    for (size_t i = 0; i < k; ++i) {
      const size_t j = size_t(randbelow(n - i));
      result[i] = pool[j];
      pool[j] = pool[n - i - 1];
    }
  } else {
    std::set<size_t> selected;
    for (size_t i = 0; i < k; ++i) {
      size_t j = size_t(randbelow(n));
      while (selected.count(j)) j = size_t(randbelow(n));
      selected.insert(j);
      result[i] = j;
    }
  }
  return result;
}

double bootstrap_stderr(size_t n_items, int64_t iters,
                        const std::function<double(const std::vector<size_t>&)>& statistic) {
  if (n_items < 2 || iters <= 0) return std::numeric_limits<double>::quiet_NaN();
  const int64_t chunk = std::min<int64_t>(1000, iters);
  std::vector<double> stats;
  std::vector<size_t> draw(n_items);
  for (int64_t c = 0; c < iters / chunk; ++c) {
    PyRandom rnd{uint64_t(c)};
    for (int64_t r = 0; r < chunk; ++r) {
      for (size_t& d : draw) d = size_t(std::floor(rnd.random() * double(n_items)));  // random.choices
      stats.push_back(statistic(draw));
    }
  }
  return stats.size() < 2 ? std::numeric_limits<double>::quiet_NaN() : sample_stddev(stats);
}

}  // namespace foundry::eval
