// Evaluation metrics, each equal to the library people use for it: sacrebleu (BLEU, chrF),
// rouge-score (ROUGE-1/2/L/Lsum with nltk's Porter stemmer), the SQuAD v1.1 script (EM, F1),
// scikit-learn (accuracy, F1, MCC), SciPy (Pearson, Spearman) and lm-evaluation-harness's
// aggregations (perplexities, bits per byte, stderr by its deterministic bootstrap).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace foundry::eval {

// ---- generation metrics (text_metrics.cpp) -------------------------------------------------------

struct BleuScore {
  double score = 0;                 ///< 0-100, sacrebleu's corpus_bleu(...).score
  std::vector<int64_t> counts, totals;  ///< matched / hypothesis n-grams, n = 1..4
  std::vector<double> precisions;   ///< percentages after exp smoothing
  double bp = 0;                    ///< brevity penalty
  int64_t sys_len = 0, ref_len = 0;
};
/// sacrebleu corpus_bleu with its defaults (13a tokenizer, exp smoothing, 4-grams, cased).
/// `refs[i]` holds the references of `hyps[i]`; empty references are dropped as sacrebleu drops them.
BleuScore bleu(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs);
/// sacrebleu's 13a tokenizer (the mteval-v13a rules), applied to one line.
std::string tokenize_13a(const std::string& line);
/// sacrebleu corpus_chrf with its defaults (character 6-grams, beta 2, whitespace removed); 0-100.
double chrf(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs);

struct RougeScore {
  double precision = 0, recall = 0, fmeasure = 0;
};
/// rouge-score's RougeScorer for one (prediction, target) pair: keys rouge1, rouge2, rougeL, rougeLsum.
std::map<std::string, RougeScore> rouge_pair(const std::string& prediction, const std::string& target,
                                             bool use_stemmer = false);
/// The mean F-measure of each key over the pairs (what foundry.eval.rouge returns).
std::map<std::string, double> rouge(const std::vector<std::string>& hyps, const std::vector<std::string>& refs,
                                    bool use_stemmer = false);
/// rouge-score's tokenizer: lowercase, every character outside [a-z0-9] separates, Porter-stem
/// tokens longer than 3 characters when asked.
std::vector<std::string> rouge_tokenize(const std::string& text, bool use_stemmer);
/// nltk's PorterStemmer (NLTK_EXTENSIONS mode, rouge-score's) of one lowercase word.
std::string porter_stem(const std::string& word);

/// SQuAD v1.1: answers normalized (lowercase, punctuation and articles removed, whitespace
/// collapsed); the maximum over the gold answers. Exact match is 0 or 1, F1 in [0, 1].
double squad_em(const std::string& prediction, const std::vector<std::string>& golds);
double squad_f1(const std::string& prediction, const std::vector<std::string>& golds);
std::string squad_normalize(const std::string& answer);

// ---- classification and correlation (metrics.cpp) ---------------------------------------------

double accuracy(const std::vector<int64_t>& y_true, const std::vector<int64_t>& y_pred);
/// scikit-learn f1_score: "binary" (pos_label 1), "macro" or "micro"; zero_division 0.
double f1_score(const std::vector<int64_t>& y_true, const std::vector<int64_t>& y_pred,
                const std::string& average = "binary");
double matthews_corrcoef(const std::vector<int64_t>& y_true, const std::vector<int64_t>& y_pred);
/// SciPy's pearsonr / spearmanr statistic (Spearman ranks ties by their average rank); NaN when
/// an input is constant, as SciPy.
double pearsonr(const std::vector<double>& x, const std::vector<double>& y);
/// Ranks from 1, ties sharing their average rank (SciPy's rankdata "average").
std::vector<double> average_ranks(const std::vector<double>& v);
double spearmanr(const std::vector<double>& x, const std::vector<double>& y);

// ---- lm-evaluation-harness aggregations -----------------------------------------------------------

/// exp(-mean(log-likelihoods)): the harness's "perplexity" aggregation of per-item log-likelihoods.
double perplexity(const std::vector<double>& loglikelihoods);
/// exp(-sum(ll) / sum(n)) over (loglikelihood, count) items: word_perplexity, byte_perplexity.
double weighted_perplexity(const std::vector<std::pair<double, double>>& items);
/// -sum(ll) / sum(bytes) / ln 2.
double bits_per_byte(const std::vector<std::pair<double, double>>& items);
double mean(const std::vector<double>& xs);
/// The sample standard deviation over sqrt(n): the stderr of a mean.
double mean_stderr(const std::vector<double>& xs);

/// CPython's random.Random (MT19937 seeded as Python seeds an int), so few-shot draws and
/// bootstrap resamples equal lm-evaluation-harness's.
class PyRandom {
 public:
  explicit PyRandom(uint64_t seed);
  uint32_t next_u32();
  double random();  ///< random.random()
  /// random.Random._randbelow(n): rejection sampling with n.bit_length() bits.
  uint64_t randbelow(uint64_t n);
  /// random.sample(range(n), k): indices, in Python's order.
  std::vector<size_t> sample(size_t n, size_t k);

 private:
  uint32_t mt_[624];
  int index_ = 624;
};

/// lm-eval's bootstrap_stderr: chunks of min(1000, iters) resamples, chunk i drawn with
/// random.Random(i).choices, the sample standard deviation of the statistic over all resamples.
/// `statistic` gets the resampled item indices.
double bootstrap_stderr(size_t n_items, int64_t iters, const std::function<double(const std::vector<size_t>&)>& statistic);

}  // namespace foundry::eval
