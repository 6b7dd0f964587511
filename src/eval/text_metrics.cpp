// Generation metrics with the numbers of the libraries people report them with: sacrebleu 2.x
// (corpus BLEU with the 13a tokenizer, corpus chrF), rouge-score (ROUGE-1/2/L/Lsum) and the
// SQuAD v1.1 evaluation script (exact match, F1).
//
// Those libraries are Python and work on code points, so whatever depends on "a character"
// (str.split()'s whitespace, str.lower(), chrF's character n-grams) decodes UTF-8 here, with
// python_str.h's transcription of Python's str methods.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <utf8proc.h>

#include "eval/python_str.h"
#include "foundry/core/error.h"
#include "foundry/eval/metrics.h"

namespace foundry::eval {

namespace {

// ---- n-gram multisets -----------------------------------------------------------------------

/// A multiset of n-grams, each a view into text the caller keeps alive and unchanged. Open
/// addressing with linear probing; clear() keeps the table, so one counter serves a whole corpus
/// without allocating per segment.
class NgramCounter {
 public:
  /// The count of `key`, inserted at 0 if absent. Valid until the next insertion.
  int64_t& operator[](std::string_view key) {
    if ((used_.size() + 1) * 2 > slots_.size()) grow();
    size_t h = std::hash<std::string_view>{}(key);
    size_t i = probe(key, h);
    if (!slots_[i].used) {
      slots_[i] = {key, h, 0, true};
      used_.push_back(static_cast<uint32_t>(i));
    }
    return slots_[i].count;
  }
  int64_t count(std::string_view key) const {
    if (slots_.empty()) return 0;
    const Slot& s = slots_[probe(key, std::hash<std::string_view>{}(key))];
    return s.used ? s.count : 0;
  }
  void clear() {
    for (uint32_t i : used_) slots_[i].used = false;
    used_.clear();
  }
  bool empty() const { return used_.empty(); }
  size_t size() const { return used_.size(); }
  template <typename F>
  void for_each(F&& f) const {
    for (uint32_t i : used_) f(slots_[i].key, slots_[i].count);
  }

 private:
  struct Slot {
    std::string_view key;
    size_t hash = 0;
    int64_t count = 0;
    bool used = false;
  };
  /// The slot holding `key`, or the empty slot where it would go.
  size_t probe(std::string_view key, size_t h) const {
    size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (!s.used || (s.hash == h && s.key == key)) return i;
    }
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(std::max<size_t>(64, old.size() * 2), Slot{});
    std::vector<uint32_t> old_used;
    old_used.swap(used_);
    for (uint32_t i : old_used) {
      size_t j = probe(old[i].key, old[i].hash);
      slots_[j] = old[i];
      used_.push_back(static_cast<uint32_t>(j));
    }
  }
  std::vector<Slot> slots_;
  std::vector<uint32_t> used_;
};

/// sum over the common n-grams of min(count in a, count in b); walks the smaller side.
int64_t clipped_overlap(const NgramCounter& a, const NgramCounter& b) {
  const NgramCounter& small = a.size() <= b.size() ? a : b;
  const NgramCounter& large = a.size() <= b.size() ? b : a;
  int64_t overlap = 0;
  small.for_each([&](std::string_view key, int64_t n) { overlap += std::min(n, large.count(key)); });
  return overlap;
}

/// `refs_noun` names what `n_refs` counts ("reference lists", "references").
void check_corpus(size_t n_hyps, size_t n_refs, const char* what, const char* refs_noun) {
  if (n_hyps != n_refs) raise<ValueError>("{}: {} hypotheses but {} {}", what, n_hyps, n_refs, refs_noun);
  if (n_hyps == 0) raise<ValueError>("{}: no hypotheses", what);
}

// ---- sacrebleu's 13a tokenizer --------------------------------------------------------------
//
// The four regular expressions of mteval-v13a are written out by hand with the semantics of
// Python's re.sub: matches are found left to right, do not overlap, and the scan resumes after
// the end of a match, so a character consumed as the context of one match cannot serve as the
// context of the next. The classes are ASCII, so scanning bytes finds the same matches as
// scanning code points: a multi-byte character is never '.', ',', '-' or a digit, and its bytes
// stay together in the output.

/// [\{-\~\[-\` -\&\(-\+\:-\@\/]: ASCII symbols except ' - . , which get rules of their own.
bool is_13a_symbol(char c) {
  return (c >= '{' && c <= '~') || (c >= '[' && c <= '`') || (c >= ' ' && c <= '&') ||
         (c >= '(' && c <= '+') || (c >= ':' && c <= '@') || c == '/';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_period_or_comma(char c) { return c == '.' || c == ','; }

/// re.sub(r"(X)(Y)", before + r"\1" + middle + r"\2" + after, s) for one-character classes X, Y.
template <typename First, typename Second>
std::string sub_pairs(std::string_view s, First first, Second second, std::string_view before,
                      std::string_view middle, std::string_view after) {
  std::string out;
  out.reserve(s.size() + s.size() / 2);
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && first(s[i]) && second(s[i + 1])) {
      out.append(before);
      out.push_back(s[i]);
      out.append(middle);
      out.push_back(s[i + 1]);
      out.append(after);
      i += 2;
    } else {
      out.push_back(s[i++]);
    }
  }
  return out;
}

std::string tokenize_13a_impl(std::string_view input) {
  std::string line = py::replace(input, "<skipped>", "");
  line = py::replace(line, "-\n", "");  // words hyphenated across a line break are joined
  line = py::replace(line, "\n", " ");
  if (line.find('&') != std::string::npos) {
    line = py::replace(line, "&quot;", "\"");
    line = py::replace(line, "&amp;", "&");
    line = py::replace(line, "&lt;", "<");
    line = py::replace(line, "&gt;", ">");
  }

  // " " + line + " ", then every symbol gets spaces around it.
  std::string padded;
  padded.reserve(line.size() * 2 + 2);
  padded.push_back(' ');
  for (char c : line) {
    if (is_13a_symbol(c)) {
      padded.push_back(' ');
      padded.push_back(c);
      padded.push_back(' ');
    } else {
      padded.push_back(c);
    }
  }
  padded.push_back(' ');

  auto not_digit = [](char c) { return !is_digit(c); };
  // Period and comma are split off unless preceded by a digit ...
  std::string s = sub_pairs(padded, not_digit, is_period_or_comma, "", " ", " ");
  // ... and unless followed by one ("3,000.50" stays, "it." becomes "it .").
  s = sub_pairs(s, is_period_or_comma, not_digit, " ", " ", "");
  // A dash after a digit is split off ("1999-2000" -> "1999 - 2000", "a-1" stays).
  s = sub_pairs(s, is_digit, [](char c) { return c == '-'; }, "", " ", " ");
  return py::join_split(s);
}

// ---- BLEU -----------------------------------------------------------------------------------

constexpr int kBleuOrder = 4;

/// Start and end byte offsets of the tokens of a 13a-tokenized line (single spaces between).
/// The n-gram of tokens i..i+n-1 is then the substring from start[i] to end[i+n-1]: since tokens
/// have no spaces, equal substrings are equal token tuples.
struct TokenSpans {
  std::vector<size_t> start, end;
  void assign(std::string_view line) {
    start.clear();
    end.clear();
    size_t pos = 0;
    while (pos < line.size()) {
      size_t stop = line.find(' ', pos);
      if (stop == std::string_view::npos) stop = line.size();
      start.push_back(pos);
      end.push_back(stop);
      pos = stop + 1;
    }
  }
  size_t size() const { return start.size(); }
  std::string_view ngram(std::string_view line, size_t i, int n) const {
    return line.substr(start[i], end[i + n - 1] - start[i]);
  }
};

/// Counts the n-grams of every order 1..4 into `out` (views into `line`).
void count_word_ngrams(std::string_view line, const TokenSpans& spans, NgramCounter& out) {
  for (int n = 1; n <= kBleuOrder; ++n) {
    for (size_t i = 0; i + n <= spans.size(); ++i) ++out[spans.ngram(line, i, n)];
  }
}

/// The reference length BLEU's brevity penalty uses: the closest to the hypothesis length, the
/// shorter one on a tie, in reference order.
int64_t closest_ref_len(int64_t hyp_len, const std::vector<int64_t>& ref_lens) {
  int64_t best_diff = -1, best_len = -1;
  for (int64_t len : ref_lens) {
    int64_t diff = std::abs(hyp_len - len);
    if (best_diff == -1 || diff < best_diff) {
      best_diff = diff;
      best_len = len;
    } else if (diff == best_diff && len < best_len) {
      best_len = len;
    }
  }
  return best_len;
}

/// sacrebleu's compute_bleu with exp smoothing and no effective order.
BleuScore bleu_from_stats(BleuScore s) {
  if (s.sys_len < s.ref_len) {
    s.bp = s.sys_len > 0 ? std::exp(1.0 - double(s.ref_len) / double(s.sys_len)) : 0.0;
  } else {
    s.bp = 1.0;
  }
  s.precisions.assign(kBleuOrder, 0.0);
  if (std::all_of(s.counts.begin(), s.counts.end(), [](int64_t c) { return c == 0; })) {
    s.score = 0.0;
    return s;
  }
  double smooth = 1.0;
  for (int n = 0; n < kBleuOrder; ++n) {
    if (s.totals[n] == 0) break;  // no hypothesis is that long: this and later orders stay 0
    if (s.counts[n] == 0) {
      smooth *= 2;  // 'exp': each order without matches gets half the previous pseudo-count
      s.precisions[n] = 100.0 / (smooth * double(s.totals[n]));
    } else {
      s.precisions[n] = 100.0 * double(s.counts[n]) / double(s.totals[n]);
    }
  }
  // sacrebleu's my_log floors log(0) at -9999999999, so a zero precision gives a zero score.
  double log_sum = 0;
  for (double p : s.precisions) log_sum += p == 0.0 ? -9999999999.0 : std::log(p);
  s.score = s.bp * std::exp(log_sum / kBleuOrder);
  return s;
}

// ---- chrF -----------------------------------------------------------------------------------

constexpr int kChrOrder = 6;
constexpr double kChrBeta = 2;

/// The character n-gram multisets (orders 1..6) of one segment with its whitespace removed.
/// Views point into `text`, so an instance must not be copied or moved once built.
struct CharNgrams {
  std::string text;
  std::array<NgramCounter, kChrOrder> grams;
  std::array<int64_t, kChrOrder> totals{};

  void build(std::string_view s) {
    // "".join(s.split()), remembering where each character starts.
    text.clear();
    starts_.clear();
    for (size_t i = 0; i < s.size();) {
      size_t at = i;
      if (py::is_space(py::next_char(s, i))) continue;
      starts_.push_back(text.size());
      text.append(s.substr(at, i - at));
    }
    starts_.push_back(text.size());
    size_t n_chars = starts_.size() - 1;
    for (int n = 1; n <= kChrOrder; ++n) {
      NgramCounter& g = grams[n - 1];
      g.clear();
      totals[n - 1] = n_chars >= size_t(n) ? int64_t(n_chars - n + 1) : 0;
      for (size_t i = 0; i + n <= n_chars; ++i) {
        ++g[std::string_view(text).substr(starts_[i], starts_[i + n] - starts_[i])];
      }
    }
  }

 private:
  std::vector<size_t> starts_;  // byte offset of each character in `text`, and the end
};

/// [hyp, ref, match] per order, as sacrebleu's _get_match_statistics.
using ChrStats = std::array<int64_t, 3 * kChrOrder>;

ChrStats chr_stats(const CharNgrams& hyp, const CharNgrams& ref) {
  ChrStats st{};
  for (int n = 0; n < kChrOrder; ++n) {
    // sacrebleu counts the hypothesis n-grams only when the reference has n-grams of that order.
    st[3 * n] = ref.grams[n].empty() ? 0 : hyp.totals[n];
    st[3 * n + 1] = ref.totals[n];
    st[3 * n + 2] = clipped_overlap(hyp.grams[n], ref.grams[n]);
  }
  return st;
}

/// sacrebleu's _compute_f_score without eps smoothing: precision and recall averaged over the
/// orders that have n-grams on both sides ("effective order"), then F-beta.
double chr_f_score(const ChrStats& st) {
  double avg_prec = 0, avg_rec = 0;
  int effective_order = 0;
  for (int n = 0; n < kChrOrder; ++n) {
    int64_t n_hyp = st[3 * n], n_ref = st[3 * n + 1], n_match = st[3 * n + 2];
    if (n_hyp > 0 && n_ref > 0) {
      avg_prec += double(n_match) / double(n_hyp);
      avg_rec += double(n_match) / double(n_ref);
      ++effective_order;
    }
  }
  if (effective_order == 0) return 0.0;
  avg_prec /= effective_order;
  avg_rec /= effective_order;
  if (avg_prec + avg_rec == 0.0) return 0.0;
  double factor = kChrBeta * kChrBeta;
  double score = (1 + factor) * avg_prec * avg_rec;
  score /= factor * avg_prec + avg_rec;
  return 100 * score;
}

// ---- ROUGE ----------------------------------------------------------------------------------

const char* const kRougeKeys[] = {"rouge1", "rouge2", "rougeL", "rougeLsum"};
using RougeScores = std::array<RougeScore, 4>;  // in kRougeKeys order

RougeScore make_rouge_score(double precision, double recall) {
  double f = precision + recall > 0 ? 2 * precision * recall / (precision + recall) : 0.0;
  return {precision, recall, f};
}

/// rouge-score's tokenizer into `out`: str.lower(), then every run of characters outside [a-z0-9]
/// separates. Only ASCII letters and digits survive, so of str.lower() only the mappings that
/// produce them matter: A-Z, KELVIN SIGN -> k, and U+0130 -> "i" + U+0307 (which separates).
void rouge_tokenize_into(std::string_view text, bool use_stemmer, std::vector<std::string>& out) {
  std::string token;
  auto flush = [&] {
    if (token.empty()) return;
    // rouge-score stems only tokens longer than 3 characters.
    if (use_stemmer && token.size() > 3) token = porter_stem(token);
    bool valid = !token.empty() && std::all_of(token.begin(), token.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    });
    if (valid) out.push_back(token);
    token.clear();
  };
  for (size_t i = 0; i < text.size();) {
    char32_t c = py::next_char(text, i);
    if (c >= 'A' && c <= 'Z') {
      c += 'a' - 'A';
    } else if (c >= 0x80 && c != 0x130 && !py::is_escaped_byte(c)) {
      c = static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
    }
    if (c == 0x130) {
      token.push_back('i');
      flush();  // the U+0307 of its lowercase ends the token
    } else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
      token.push_back(static_cast<char>(c));
    } else {
      flush();
    }
  }
  flush();
}

/// Token ids of one text, split into its non-empty lines for rougeLsum.
struct RougeText {
  std::vector<std::vector<int32_t>> lines;
  std::vector<int32_t> all;  // the tokens of the whole text, for rouge1/2/L
};

class RougeInterner {
 public:
  /// Splits on "\n" only (a "\r" stays and the tokenizer drops it); empty lines are dropped but a
  /// line of spaces is kept, with no tokens. Tokenizing line by line gives the same tokens as the
  /// whole text, since "\n" separates tokens anyway.
  RougeText tokenize(std::string_view text, bool use_stemmer) {
    RougeText out;
    size_t pos = 0;
    while (pos <= text.size()) {
      size_t stop = text.find('\n', pos);
      if (stop == std::string_view::npos) stop = text.size();
      if (stop > pos) {
        words_.clear();
        rouge_tokenize_into(text.substr(pos, stop - pos), use_stemmer, words_);
        std::vector<int32_t>& line = out.lines.emplace_back();
        for (const std::string& w : words_) line.push_back(id(w));
        out.all.insert(out.all.end(), line.begin(), line.end());
      }
      pos = stop + 1;
    }
    return out;
  }
  size_t vocab_size() const { return ids_.size(); }

 private:
  int32_t id(const std::string& w) {
    return ids_.try_emplace(w, static_cast<int32_t>(ids_.size())).first->second;
  }
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::string> words_;
};

/// Clipped n-gram overlap (n is 1 or 2), as rouge-score's _score_ngrams.
RougeScore rouge_n(const std::vector<int32_t>& target, const std::vector<int32_t>& pred, size_t n) {
  auto grams = [n](const std::vector<int32_t>& t) {
    std::vector<uint64_t> g;
    for (size_t i = 0; i + n <= t.size(); ++i) {
      uint64_t key = uint32_t(t[i]);
      if (n == 2) key = (key << 32) | uint32_t(t[i + 1]);
      g.push_back(key);
    }
    std::sort(g.begin(), g.end());
    return g;
  };
  std::vector<uint64_t> gt = grams(target), gp = grams(pred);
  // The multiset intersection of two sorted lists has sum(min(count_t, count_p)) elements.
  int64_t overlap = 0;
  for (size_t i = 0, j = 0; i < gt.size() && j < gp.size();) {
    if (gt[i] < gp[j]) {
      ++i;
    } else if (gp[j] < gt[i]) {
      ++j;
    } else {
      ++overlap, ++i, ++j;
    }
  }
  return make_rouge_score(double(overlap) / double(std::max<size_t>(gp.size(), 1)),
                          double(overlap) / double(std::max<size_t>(gt.size(), 1)));
}

/// Row-major (|a|+1) x (|b|+1) LCS table of rouge-score's _lcs_table.
void lcs_table(const std::vector<int32_t>& a, const std::vector<int32_t>& b, std::vector<int32_t>& t) {
  size_t cols = b.size() + 1;
  t.assign((a.size() + 1) * cols, 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      t[i * cols + j] = a[i - 1] == b[j - 1] ? t[(i - 1) * cols + j - 1] + 1
                                             : std::max(t[(i - 1) * cols + j], t[i * cols + j - 1]);
    }
  }
}

RougeScore rouge_l(const std::vector<int32_t>& target, const std::vector<int32_t>& pred,
                   std::vector<int32_t>& table) {
  if (target.empty() || pred.empty()) return {};
  lcs_table(target, pred, table);
  double lcs = table.back();
  return make_rouge_score(lcs / double(pred.size()), lcs / double(target.size()));
}

/// Marks the positions in `ref` of the one LCS with `can` that rouge-score's _backtrack_norec
/// reads out (which one matters, since rougeLsum takes the union over candidate sentences).
void mark_lcs(const std::vector<int32_t>& ref, const std::vector<int32_t>& can, std::vector<int32_t>& table,
              std::vector<char>& in_union) {
  lcs_table(ref, can, table);
  size_t cols = can.size() + 1;
  size_t i = ref.size(), j = can.size();
  while (i > 0 && j > 0) {
    if (ref[i - 1] == can[j - 1]) {
      in_union[i - 1] = 1;
      --i, --j;
    } else if (table[i * cols + j - 1] > table[(i - 1) * cols + j]) {
      --j;
    } else {
      --i;  // on a tie rouge-score moves up in the reference
    }
  }
}

/// Summary-level LCS (rouge-score's _summary_level_lcs): for each reference line, the union of
/// its LCS with every candidate line, each token counted at most as often as both texts have it.
RougeScore rouge_lsum(const RougeText& target, const RougeText& pred, size_t vocab,
                      std::vector<int32_t>& table) {
  size_t m = target.all.size(), n = pred.all.size();
  if (m == 0 || n == 0) return {};
  std::vector<int64_t> left_r(vocab, 0), left_c(vocab, 0);
  for (int32_t t : target.all) ++left_r[t];
  for (int32_t t : pred.all) ++left_c[t];
  int64_t hits = 0;
  std::vector<char> in_union;
  for (const std::vector<int32_t>& r : target.lines) {
    in_union.assign(r.size(), 0);
    for (const std::vector<int32_t>& c : pred.lines) mark_lcs(r, c, table, in_union);
    for (size_t i = 0; i < r.size(); ++i) {
      int32_t t = r[i];
      if (in_union[i] && left_c[t] > 0 && left_r[t] > 0) {
        ++hits;
        --left_c[t];
        --left_r[t];
      }
    }
  }
  return make_rouge_score(double(hits) / double(n), double(hits) / double(m));
}

RougeScores rouge_scores(std::string_view prediction, std::string_view target, bool use_stemmer) {
  RougeInterner interner;
  RougeText t = interner.tokenize(target, use_stemmer);
  RougeText p = interner.tokenize(prediction, use_stemmer);
  std::vector<int32_t> table;
  return {rouge_n(t.all, p.all, 1), rouge_n(t.all, p.all, 2), rouge_l(t.all, p.all, table),
          rouge_lsum(t, p, interner.vocab_size(), table)};
}

// ---- SQuAD ----------------------------------------------------------------------------------

/// Python's \w for str patterns (str.isalnum() or '_'): letters and numbers of any script.
bool is_py_word_char(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  switch (py::category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

/// re.sub(r"\b(a|an|the)\b", " ", s): a match must start and end at word boundaries, and a, n,
/// t, h, e are word characters, so it replaces exactly the maximal runs of word characters that
/// are "a", "an" or "the".
std::string remove_articles(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t run_start = i;
    size_t j = i;
    while (j < s.size()) {
      size_t next = j;
      if (!is_py_word_char(py::next_char(s, next))) break;
      j = next;
    }
    if (j > run_start) {
      std::string_view run = s.substr(run_start, j - run_start);
      if (run == "a" || run == "an" || run == "the") {
        out.push_back(' ');
      } else {
        out.append(run);
      }
      i = j;
    } else {
      py::next_char(s, i);
      out.append(s.substr(run_start, i - run_start));
    }
  }
  return out;
}

/// Whitespace tokens of a normalized answer (normalization leaves single spaces between them).
std::vector<std::string_view> split_spaces(std::string_view s) {
  std::vector<std::string_view> out;
  py::for_each_split(s, [&](std::string_view w) { out.push_back(w); });
  return out;
}

double squad_f1_one(const std::string& prediction, const std::string& gold) {
  std::string np = squad_normalize(prediction), ng = squad_normalize(gold);
  std::vector<std::string_view> tp = split_spaces(np), tg = split_spaces(ng);
  std::sort(tp.begin(), tp.end());
  std::sort(tg.begin(), tg.end());
  // Counter(pred) & Counter(gold): the size of the multiset intersection.
  int64_t same = 0;
  for (size_t i = 0, j = 0; i < tp.size() && j < tg.size();) {
    if (tp[i] < tg[j]) {
      ++i;
    } else if (tg[j] < tp[i]) {
      ++j;
    } else {
      ++same, ++i, ++j;
    }
  }
  if (same == 0) return 0.0;
  double precision = 1.0 * double(same) / double(tp.size());
  double recall = 1.0 * double(same) / double(tg.size());
  return 2 * precision * recall / (precision + recall);
}

void check_golds(const std::vector<std::string>& golds, const char* what) {
  // The SQuAD script takes max() over the golds, which fails on none.
  if (golds.empty()) raise<ValueError>("{}: no gold answers", what);
}

}  // namespace

// ---- public API -----------------------------------------------------------------------------

std::string tokenize_13a(const std::string& line) { return tokenize_13a_impl(line); }

BleuScore bleu(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs) {
  check_corpus(hyps.size(), refs.size(), "bleu", "reference lists");
  BleuScore total;
  total.counts.assign(kBleuOrder, 0);
  total.totals.assign(kBleuOrder, 0);

  NgramCounter hyp_grams, ref_grams, ref_max;
  TokenSpans spans;
  std::vector<std::string> ref_lines;
  std::vector<int64_t> ref_lens;
  for (size_t seg = 0; seg < hyps.size(); ++seg) {
    // Every reference and hypothesis is tokenized as sacrebleu does: tok13a(s.rstrip()).
    ref_lines.clear();
    for (const std::string& r : refs[seg]) {
      if (!r.empty()) ref_lines.push_back(tokenize_13a_impl(py::rstrip(r)));  // "" is "no reference"
    }
    if (ref_lines.empty()) raise<ValueError>("bleu: segment {} has no non-empty reference", seg);

    // Clipping counts: the largest count of each n-gram in any one reference.
    ref_max.clear();
    ref_lens.clear();
    for (const std::string& line : ref_lines) {
      spans.assign(line);
      ref_lens.push_back(int64_t(spans.size()));
      ref_grams.clear();
      count_word_ngrams(line, spans, ref_grams);
      ref_grams.for_each([&](std::string_view g, int64_t n) {
        int64_t& best = ref_max[g];
        best = std::max(best, n);
      });
    }

    std::string hyp = tokenize_13a_impl(py::rstrip(hyps[seg]));
    spans.assign(hyp);
    int64_t hyp_len = int64_t(spans.size());
    total.sys_len += hyp_len;
    total.ref_len += closest_ref_len(hyp_len, ref_lens);
    hyp_grams.clear();
    count_word_ngrams(hyp, spans, hyp_grams);
    hyp_grams.for_each([&](std::string_view g, int64_t n) {
      // The order of an n-gram is its number of tokens: one more than its spaces.
      auto order = std::count(g.begin(), g.end(), ' ');
      total.totals[order] += n;
      total.counts[order] += std::min(n, ref_max.count(g));
    });
  }
  return bleu_from_stats(std::move(total));
}

double chrf(const std::vector<std::string>& hyps, const std::vector<std::vector<std::string>>& refs) {
  check_corpus(hyps.size(), refs.size(), "chrf", "reference lists");
  ChrStats corpus{};
  CharNgrams hyp;
  std::vector<CharNgrams> ref_grams;  // grown, never shrunk: each entry is rebuilt in place
  for (size_t seg = 0; seg < hyps.size(); ++seg) {
    size_t n_refs = 0;
    for (const std::string& r : refs[seg]) n_refs += !r.empty();
    if (n_refs == 0) raise<ValueError>("chrf: segment {} has no non-empty reference", seg);
    if (ref_grams.size() < n_refs) ref_grams = std::vector<CharNgrams>(n_refs);

    hyp.build(hyps[seg]);
    // With several references, the statistics of the one with the best F (the first on a tie).
    ChrStats best{};
    double best_f = -1.0;
    size_t k = 0;
    for (const std::string& r : refs[seg]) {
      if (r.empty()) continue;
      CharNgrams& ref = ref_grams[k++];
      ref.build(r);
      ChrStats st = chr_stats(hyp, ref);
      double f = chr_f_score(st);
      if (f > best_f) {
        best_f = f;
        best = st;
      }
    }
    for (size_t i = 0; i < corpus.size(); ++i) corpus[i] += best[i];
  }
  return chr_f_score(corpus);
}

std::vector<std::string> rouge_tokenize(const std::string& text, bool use_stemmer) {
  std::vector<std::string> out;
  rouge_tokenize_into(text, use_stemmer, out);
  return out;
}

std::map<std::string, RougeScore> rouge_pair(const std::string& prediction, const std::string& target,
                                             bool use_stemmer) {
  RougeScores s = rouge_scores(prediction, target, use_stemmer);
  std::map<std::string, RougeScore> out;
  for (size_t k = 0; k < s.size(); ++k) out[kRougeKeys[k]] = s[k];
  return out;
}

std::map<std::string, double> rouge(const std::vector<std::string>& hyps, const std::vector<std::string>& refs,
                                    bool use_stemmer) {
  check_corpus(hyps.size(), refs.size(), "rouge", "references");
  std::array<double, 4> sums{};
  for (size_t i = 0; i < hyps.size(); ++i) {
    RougeScores s = rouge_scores(hyps[i], refs[i], use_stemmer);
    for (size_t k = 0; k < s.size(); ++k) sums[k] += s[k].fmeasure;
  }
  std::map<std::string, double> out;
  for (size_t k = 0; k < sums.size(); ++k) out[kRougeKeys[k]] = sums[k] / double(hyps.size());
  return out;
}

std::string squad_normalize(const std::string& answer) {
  // lower -> remove punctuation -> remove articles -> collapse whitespace, in the script's order.
  std::string lowered = py::lower(answer);
  std::string no_punct;
  no_punct.reserve(lowered.size());
  for (char c : lowered) {
    if (!py::is_punctuation(c)) no_punct.push_back(c);  // ASCII only, so bytes are safe here
  }
  return py::join_split(remove_articles(no_punct));
}

double squad_em(const std::string& prediction, const std::vector<std::string>& golds) {
  check_golds(golds, "squad_em");
  std::string p = squad_normalize(prediction);
  for (const std::string& g : golds) {
    if (squad_normalize(g) == p) return 1.0;
  }
  return 0.0;
}

double squad_f1(const std::string& prediction, const std::vector<std::string>& golds) {
  check_golds(golds, "squad_f1");
  double best = 0.0;
  for (const std::string& g : golds) best = std::max(best, squad_f1_one(prediction, g));
  return best;
}

}  // namespace foundry::eval
