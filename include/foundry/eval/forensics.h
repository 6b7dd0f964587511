// Model forensics from forward passes: membership-inference scores per document (loss, zlib ratio,
// Min-K% Prob, Min-K%++, the ratio to a reference model), dataset inference (Welch's t-test),
// ROC AUC, dataset fingerprints clustered by profile (z-scores, cosine distance, average linkage as
// SciPy's linkage), least squares for attributing capabilities to data, and a suffix array that
// finds generated text verbatim in a corpus. docs/forensics.md.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "foundry/eval/requests.h"

namespace foundry::eval {

/// Every score is oriented so that higher means "more likely a member of the training data".
struct MembershipScores {
  double loss = 0;              ///< mean negative log-likelihood per token (nats)
  double neg_loss = 0;          ///< -loss: the LOSS attack's score (Yeom et al.)
  double zlib = 0;              ///< mean log-likelihood / zlib-compressed bytes (Carlini et al. 2021)
  double min_k = 0;             ///< Min-K% Prob: mean of the k% lowest token log-probs (Shi et al. 2024)
  double min_k_plus_plus = 0;   ///< Min-K%++: mean of the k% lowest (log p - mu) / sigma (Zhang et al. 2024)
  double reference_ratio = 0;   ///< reference loss / loss (NaN without a reference model)
};

/// Scores of one document from its token scores (`reference`: the same text under a reference
/// model, possibly with another tokenizer; its mean loss is used). `k` is the fraction of tokens.
MembershipScores membership_scores(const TokenScores& target, const std::string& text, double k = 0.2,
                                   const TokenScores* reference = nullptr);

/// Bytes of zlib.compress(text) (level 6, as Python's default).
size_t zlib_size(const std::string& text);

/// Area under the ROC curve of members' against non-members' scores (ties count one half), as
/// scikit-learn's roc_auc_score.
double roc_auc(const std::vector<double>& members, const std::vector<double>& non_members);

struct WelchTest {
  double t = 0, df = 0;
  double p_value = 1;  ///< one-sided: the suspect set's mean is greater
};
/// Welch's unequal-variance t-test of `suspect` > `unseen` (SciPy's ttest_ind(equal_var=False,
/// alternative="greater")).
WelchTest welch_t_test(const std::vector<double>& suspect, const std::vector<double>& unseen);
/// P(T > t) for Student's t with `df` degrees of freedom.
double student_t_sf(double t, double df);

/// Each column standardized across the rows (population standard deviation; 0 where constant).
std::vector<std::vector<double>> zscore_columns(const std::vector<std::vector<double>>& m);
double cosine_distance(const std::vector<double>& a, const std::vector<double>& b);

/// Agglomerative clustering with average linkage on cosine distances between rows, in SciPy's
/// linkage format: each merge is {cluster a, cluster b, distance, size} (new clusters numbered from
/// n), and `order` is the dendrogram's leaf order.
struct Linkage {
  std::vector<std::array<double, 4>> merges;
  std::vector<size_t> order;
};
Linkage average_linkage(const std::vector<std::vector<double>>& rows);

/// The fingerprint picture as PNG bytes: the z-score heatmap (rows = models in dendrogram order,
/// blue below the other models' loss, red above, saturating at 2 standard deviations) with the
/// dendrogram beside it.
std::string fingerprint_png(const std::vector<std::vector<double>>& zscores, const Linkage& link);

/// Least squares with an intercept: y ~ b + X w, the minimum-norm w when X's columns are dependent
/// or outnumber the rows. Returns {b, w...}.
std::vector<double> least_squares(const std::vector<std::vector<double>>& x, const std::vector<double>& y);

/// A suffix array over a corpus, for verbatim-occurrence queries.
class SuffixArray {
 public:
  explicit SuffixArray(std::string text);
  /// The longest prefix of `query` that occurs in the corpus: (length, a corpus offset where it occurs).
  std::pair<size_t, size_t> longest_prefix_match(std::string_view query) const;
  /// How many times `query` occurs.
  size_t count(std::string_view query) const;
  const std::string& text() const { return text_; }

 private:
  std::pair<size_t, size_t> equal_range(std::string_view query) const;
  std::string text_;
  std::vector<uint32_t> sa_;
};

}  // namespace foundry::eval
