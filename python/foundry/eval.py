"""Evaluation metrics equal to the libraries people use (docs/evaluation.md):

- ``bleu`` / ``corpus_bleu`` = sacrebleu's corpus_bleu (13a tokenizer, exp smoothing), ``chrf`` =
  sacrebleu's corpus_chrf; ``refs[i]`` is the list of references of ``hyps[i]``.
- ``rouge`` = the mean F-measure of rouge-score's RougeScorer (rouge1, rouge2, rougeL, rougeLsum).
- ``squad_em`` / ``squad_f1`` = the SQuAD v1.1 script (max over the gold answers).
- ``accuracy``, ``f1_score``, ``matthews_corrcoef`` = scikit-learn; ``pearsonr`` / ``spearmanr`` =
  SciPy's statistic.
- ``perplexity``, ``word_perplexity``, ``byte_perplexity``, ``bits_per_byte`` and
  ``bootstrap_stderr`` / ``mean_stderr`` as lm-evaluation-harness aggregates them.
"""
import math as _math

from ._C import _eval as _E

__all__ = ["bleu", "corpus_bleu", "chrf", "rouge", "squad_em", "squad_f1", "accuracy", "f1_score",
           "matthews_corrcoef", "pearsonr", "spearmanr", "perplexity", "word_perplexity", "byte_perplexity",
           "weighted_perplexity", "token_perplexity", "bits_per_byte", "mean", "mean_stderr", "bootstrap_stderr", "tokenize_13a",
           "porter_stem", "roc_auc", "welch_t_test"]


def _refs(hyps, refs):
    hyps = list(hyps)
    refs = [[r] if isinstance(r, str) else list(r) for r in refs]
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} reference lists")
    return hyps, refs


def corpus_bleu(hyps, refs):
    """sacrebleu.corpus_bleu's numbers as a dict: score, counts, totals, precisions, bp, sys_len, ref_len."""
    return _E.corpus_bleu(*_refs(hyps, refs))


def bleu(hyps, refs):
    """sacrebleu.corpus_bleu(hyps, refs).score (0-100); refs[i] lists the references of hyps[i]."""
    return corpus_bleu(hyps, refs)["score"]


def chrf(hyps, refs):
    """sacrebleu.corpus_chrf(hyps, refs).score (0-100)."""
    return _E.chrf(*_refs(hyps, refs))


def tokenize_13a(line):
    return _E.tokenize_13a(line)


def porter_stem(word):
    """nltk's PorterStemmer().stem(word) (NLTK_EXTENSIONS mode) of a lowercase word."""
    return _E.porter_stem(word)


_ROUGE_KEYS = ("rouge1", "rouge2", "rougeL", "rougeLsum")


def rouge_scores(prediction, target, use_stemmer=False):
    """RougeScorer(...).score(target, prediction): {key: (precision, recall, fmeasure)}."""
    return _E.rouge_pair(prediction, target, use_stemmer)


def rouge(hyps, refs, use_stemmer=False):
    """{"rouge1", "rouge2", "rougeL", "rougeLsum"}: the mean F-measure over the pairs. A list of
    references scores as rouge-score's score_multi (the best F-measure per key)."""
    hyps, refs = list(hyps), list(refs)
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not hyps:
        raise ValueError("rouge: no pairs")
    total = dict.fromkeys(_ROUGE_KEYS, 0.0)
    for h, r in zip(hyps, refs):
        targets = [r] if isinstance(r, str) else list(r)
        scores = [_E.rouge_pair(h, t, use_stemmer) for t in targets]
        for k in _ROUGE_KEYS:
            total[k] += max(s[k][2] for s in scores)
    return {k: v / len(hyps) for k, v in total.items()}


def _golds(golds):
    return [golds] if isinstance(golds, str) else list(golds)


def squad_em(pred, golds):
    return _E.squad_em(pred, _golds(golds))


def squad_f1(pred, golds):
    return _E.squad_f1(pred, _golds(golds))


def _labels(y_true, y_pred):
    y_true, y_pred = list(y_true), list(y_pred)
    if all(isinstance(v, (int, bool)) or hasattr(v, "__index__") for v in y_true + y_pred):
        return [int(v) for v in y_true], [int(v) for v in y_pred], True
    index = {v: i for i, v in enumerate(sorted(set(y_true) | set(y_pred), key=repr))}
    return [index[v] for v in y_true], [index[v] for v in y_pred], False


def accuracy(y_true, y_pred):
    """sklearn.metrics.accuracy_score."""
    return _E.accuracy(*_labels(y_true, y_pred)[:2])


def f1_score(y_true, y_pred, average="binary"):
    """sklearn.metrics.f1_score (pos_label 1 for "binary"; zero_division 0)."""
    t, p, numeric = _labels(y_true, y_pred)
    if average == "binary" and not numeric:
        raise ValueError('f1_score: average="binary" needs integer labels with 1 as the positive label')
    return _E.f1_score(t, p, average)


def matthews_corrcoef(y_true, y_pred):
    """sklearn.metrics.matthews_corrcoef."""
    return _E.matthews_corrcoef(*_labels(y_true, y_pred)[:2])


def pearsonr(x, y):
    """scipy.stats.pearsonr(x, y).statistic."""
    return _E.pearsonr([float(v) for v in x], [float(v) for v in y])


def spearmanr(x, y):
    """scipy.stats.spearmanr(x, y).statistic (ties take their average rank)."""
    return _E.spearmanr([float(v) for v in x], [float(v) for v in y])


def mean(xs):
    xs = [float(x) for x in xs]
    if not xs:
        raise ValueError("mean of no items")
    return sum(xs) / len(xs)


def perplexity(loglikelihoods):
    """lm-eval's perplexity aggregation: exp(-mean(log-likelihoods))."""
    return _E.perplexity([float(v) for v in loglikelihoods])


def _pairs(items):
    return [(float(a), float(b)) for a, b in items]


def weighted_perplexity(items):
    """exp(-sum(ll) / sum(n)) over (loglikelihood, count) items."""
    return _E.weighted_perplexity(_pairs(items))


def token_perplexity(items):
    """exp(-sum(ll) / sum(tokens)) over (loglikelihood, tokens) items."""
    return weighted_perplexity(items)


def word_perplexity(items):
    """lm-eval's word_perplexity over (loglikelihood, words) items."""
    return weighted_perplexity(items)


def byte_perplexity(items):
    """lm-eval's byte_perplexity over (loglikelihood, bytes) items."""
    return weighted_perplexity(items)


def bits_per_byte(items):
    """lm-eval's bits_per_byte over (loglikelihood, bytes) items: -sum(ll) / sum(bytes) / ln 2."""
    return _E.bits_per_byte(_pairs(items))


def mean_stderr(xs):
    """The stderr lm-eval gives a mean: the sample standard deviation over sqrt(n)."""
    return _E.mean_stderr([float(x) for x in xs])


_NAMED = {"mean": mean, "perplexity": perplexity, "f1": lambda items: f1_score(*zip(*items)) if items else 0.0,
          "matthews_corrcoef": lambda items: matthews_corrcoef(*zip(*items)), "median": lambda xs: xs[len(xs) // 2],
          "bleu": lambda items: bleu([h for _, h in items], [r for r, _ in items]),
          "chrf": lambda items: chrf([h for _, h in items], [r for r, _ in items])}


def bootstrap_stderr(f, xs, iters=100000):
    """lm-eval's bootstrap_stderr(f, xs, iters): chunks of min(1000, iters) resamples drawn with
    random.Random(i).choices, the sample standard deviation of f over them; the same numbers as
    the harness. `f` is a callable on a list of items or an aggregation name ("perplexity", "f1",
    "matthews_corrcoef", "median", "mean", "bleu", "chrf"; bleu/chrf items are (refs, hyp))."""
    fn = _NAMED[f] if isinstance(f, str) else f
    xs = list(xs)
    if len(xs) < 2:
        return _math.nan
    return _E.bootstrap_stderr(len(xs), int(iters), lambda idx: float(fn([xs[i] for i in idx])))


def roc_auc(members, non_members):
    """Area under the ROC curve of members' scores against non-members' (sklearn's roc_auc_score
    with labels 1 / 0; ties count one half)."""
    return _E.roc_auc([float(v) for v in members], [float(v) for v in non_members])


def welch_t_test(suspect, unseen):
    """Welch's t-test that the suspect set's mean is greater: (t, df, p_value), as
    scipy.stats.ttest_ind(suspect, unseen, equal_var=False, alternative="greater")."""
    return _E.welch_t_test([float(v) for v in suspect], [float(v) for v in unseen])
