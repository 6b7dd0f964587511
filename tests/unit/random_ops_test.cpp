// Random ops checked by their distribution, not their shape: randperm is a permutation, and
// multinomial's frequencies match its probabilities (chi-square at a fixed seed).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "foundry/core/rng.h"
#include "foundry/ops/ops.h"

using namespace foundry;

TEST(RandomOps, RandpermIsAPermutation) {
  Generator g(123);
  for (int64_t n : {1, 2, 7, 100, 1000}) {
    std::vector<int64_t> p = randperm(n, DType::Int64, &g).to_vector<int64_t>();
    ASSERT_EQ(int64_t(p.size()), n);
    std::vector<int64_t> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> want(static_cast<size_t>(n));
    std::iota(want.begin(), want.end(), 0);
    EXPECT_EQ(sorted, want) << "n = " << n;
    if (n >= 100) {
      EXPECT_NE(p, want) << "n = " << n << " came out sorted";
    }
  }
  // Each position is uniform over the values: value 0's position across many draws.
  std::vector<double> counts(10, 0.0);
  const int draws = 5000;
  for (int i = 0; i < draws; ++i) {
    std::vector<int64_t> p = randperm(10, DType::Int64, &g).to_vector<int64_t>();
    counts[size_t(std::find(p.begin(), p.end(), 0) - p.begin())] += 1;
  }
  double chi2 = 0;
  for (double c : counts) chi2 += (c - draws / 10.0) * (c - draws / 10.0) / (draws / 10.0);
  EXPECT_LT(chi2, 27.88);  // chi-square, 9 degrees of freedom, p = 0.001
}

TEST(RandomOps, MultinomialFrequenciesMatchProbabilities) {
  Generator g(7);
  const std::vector<float> weights = {0.1f, 0.2f, 0.3f, 0.4f, 0.0f, 1.0f};  // unnormalised, one zero
  const double total = 2.0;
  Tensor p = tensor<float>(weights, {6});
  const int64_t n = 20000;
  std::vector<int64_t> draws = multinomial(p, n, /*replacement=*/true, &g).to_vector<int64_t>();
  std::vector<double> counts(6, 0.0);
  for (int64_t d : draws) {
    ASSERT_GE(d, 0);
    ASSERT_LT(d, 6);
    counts[size_t(d)] += 1;
  }
  EXPECT_EQ(counts[4], 0.0) << "a zero-probability category was drawn";
  double chi2 = 0;
  for (size_t k = 0; k < 6; ++k) {
    if (weights[k] == 0) continue;
    const double expected = double(n) * weights[k] / total;
    chi2 += (counts[k] - expected) * (counts[k] - expected) / expected;
  }
  EXPECT_LT(chi2, 18.47);  // 4 degrees of freedom, p = 0.001

  // Without replacement: distinct categories, never a zero-probability one while others remain.
  for (int i = 0; i < 200; ++i) {
    std::vector<int64_t> s = multinomial(p, 5, false, &g).to_vector<int64_t>();
    std::sort(s.begin(), s.end());
    EXPECT_EQ(std::unique(s.begin(), s.end()), s.end());
    EXPECT_EQ(std::count(s.begin(), s.end(), 4), 0);
  }
  // Rows of a batch draw from their own distributions.
  Tensor two = tensor<float>({1, 0, 0, 0, 0, 1}, {2, 3});
  std::vector<int64_t> rows = multinomial(two, 50, true, &g).to_vector<int64_t>();
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(rows[size_t(i)], 0);
    EXPECT_EQ(rows[size_t(50 + i)], 2);
  }
}
