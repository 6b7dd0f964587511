"""foundry.eval's metrics against the libraries people use: sacrebleu (BLEU, chrF, the 13a
tokenizer) and rouge-score + nltk's Porter stemmer through numbers those libraries computed
(data/metric_references.json; its "source" names the code), scikit-learn and SciPy run here, the
SQuAD v1.1 script transcribed, and lm-evaluation-harness's aggregations and bootstrap
(lm_eval_ref)."""
import collections
import json
import math
import os
import random
import re
import string

import numpy as np
import pytest

import foundry
import lm_eval_ref as ref

E = foundry.eval
REFS = json.load(open(os.path.join(os.path.dirname(__file__), "data", "metric_references.json")))


@pytest.mark.parametrize("case", REFS["bleu"], ids=[c["name"] for c in REFS["bleu"]])
def test_bleu_equals_sacrebleu(case):
    got = E.corpus_bleu(case["hyps"], case["refs"])
    assert got["score"] == pytest.approx(case["score"], rel=1e-9, abs=1e-9)
    assert got["counts"] == case["counts"] and got["totals"] == case["totals"]
    assert got["sys_len"] == case["sys_len"] and got["ref_len"] == case["ref_len"]
    assert got["bp"] == pytest.approx(case["bp"], rel=1e-12)
    assert got["precisions"] == pytest.approx(case["precisions"], rel=1e-12)
    assert E.bleu(case["hyps"], case["refs"]) == got["score"]


@pytest.mark.parametrize("case", REFS["tokenizer_13a"], ids=range(len(REFS["tokenizer_13a"])))
def test_13a_tokenizer_equals_sacrebleu(case):
    assert E.tokenize_13a(case["input"]) == case["output"]
    assert E.tokenize_13a(case["input"].rstrip()) == case["bleu_preprocessed"]


@pytest.mark.parametrize("case", REFS["chrf"], ids=[c["name"] for c in REFS["chrf"]])
def test_chrf_equals_sacrebleu(case):
    assert E.chrf(case["hyps"], case["refs"]) == pytest.approx(case["score"], rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("stem", [False, True])
def test_rouge_equals_rouge_score(stem):
    key = "stem" if stem else "nostem"
    pairs = REFS["rouge"]["pairs"]
    for p in pairs:
        got = E.rouge_scores(p["hyp"], p["ref"], use_stemmer=stem)
        for k in REFS["rouge"]["keys"]:
            want = p[key][k]
            assert got[k] == pytest.approx((want["precision"], want["recall"], want["fmeasure"]), rel=1e-12, abs=1e-12), \
                (p["name"], k)
        tokens = p["tokens_" + key]
        assert foundry._C._eval.rouge_tokenize(p["hyp"], stem) == tokens["hyp"]
        assert foundry._C._eval.rouge_tokenize(p["ref"], stem) == tokens["ref"]
    means = E.rouge([p["hyp"] for p in pairs], [p["ref"] for p in pairs], use_stemmer=stem)
    assert means == pytest.approx(REFS["rouge"]["mean_fmeasure"][key], rel=1e-12)


def test_porter_stemmer_equals_nltk():
    words = REFS["porter"]["words"]
    wrong = [(w["word"], E.porter_stem(w["word"]), w["stem"]) for w in words if E.porter_stem(w["word"]) != w["stem"]]
    assert not wrong and len(words) > 300


def test_porter_stemmer_equals_nltk_live():
    nltk_porter = pytest.importorskip("nltk.stem.porter")
    stemmer = nltk_porter.PorterStemmer()
    words = sorted({w.lower() for w in re.findall(r"[A-Za-z]+", open(__file__).read() + string.ascii_lowercase)})
    words += ["generously", "relational", "conditional", "rational", "valenci", "hesitanci", "digitizer",
              "conformabli", "radicalli", "differentli", "vileli", "analogousli", "vietnamization", "predication",
              "operator", "feudalism", "decisiveness", "hopefulness", "callousness", "formaliti", "sensitiviti",
              "sensibiliti", "triplicate", "formative", "formalize", "electriciti", "electrical", "hopeful",
              "goodness", "revival", "allowance", "inference", "airliner", "gyroscopic", "adjustable", "defensible",
              "irritant", "replacement", "adjustment", "dependent", "adoption", "homologou", "communism",
              "activate", "angulariti", "homologous", "effective", "bowdlerize", "probate", "rate", "cease",
              "controll", "roll", "fulli", "logi", "dying", "lying", "tying", "sky", "skies", "news", "innings"]
    wrong = [(w, E.porter_stem(w), stemmer.stem(w)) for w in words if E.porter_stem(w) != stemmer.stem(w)]
    assert not wrong


# ---- SQuAD v1.1 (the official evaluate-v1.1.py, transcribed) ----

def squad_normalize(s):
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def squad_f1_ref(pred, gold):
    p, g = squad_normalize(pred).split(), squad_normalize(gold).split()
    common = collections.Counter(p) & collections.Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return 2 * precision * recall / (precision + recall)


@pytest.mark.parametrize("pred,golds", [
    ("The Eiffel Tower", ["Eiffel Tower", "the tower"]), ("in 1889.", ["1889", "In the year 1889"]),
    ("Paris, France", ["paris"]), ("", ["something"]), ("an apple a day", ["A day, an apple!"]),
    ("Denver Broncos", ["Denver Broncos", "Carolina Panthers"]), ("über café", ["Über Café"]),
])
def test_squad_equals_the_official_script(pred, golds):
    assert E.squad_em(pred, golds) == max(float(squad_normalize(pred) == squad_normalize(g)) for g in golds)
    assert E.squad_f1(pred, golds) == pytest.approx(max(squad_f1_ref(pred, g) for g in golds), rel=1e-12)


# ---- scikit-learn and SciPy ----

def test_classification_metrics_equal_scikit_learn():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    for n_classes in (2, 3, 5):
        for _ in range(20):
            t = rng.integers(0, n_classes, 40).tolist()
            p = rng.integers(0, n_classes, 40).tolist()
            assert E.accuracy(t, p) == pytest.approx(metrics.accuracy_score(t, p), rel=1e-12)
            assert E.matthews_corrcoef(t, p) == pytest.approx(metrics.matthews_corrcoef(t, p), rel=1e-9, abs=1e-12)
            for avg in ("macro", "micro") + (("binary",) if n_classes == 2 else ()):
                want = metrics.f1_score(t, p, average=avg, zero_division=0)
                assert E.f1_score(t, p, average=avg) == pytest.approx(want, rel=1e-12), avg
    # degenerate inputs: one class, no positive predictions
    assert E.matthews_corrcoef([1, 1, 1], [1, 1, 1]) == metrics.matthews_corrcoef([1, 1, 1], [1, 1, 1])
    assert E.f1_score([0, 0, 1], [0, 0, 0]) == metrics.f1_score([0, 0, 1], [0, 0, 0], zero_division=0)
    assert E.f1_score(["a", "b", "a"], ["a", "a", "a"], average="macro") == pytest.approx(
        metrics.f1_score(["a", "b", "a"], ["a", "a", "a"], average="macro", zero_division=0))
    with pytest.raises(ValueError, match="binary"):
        E.f1_score([0, 1, 2], [0, 1, 2])


def test_correlations_equal_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    for _ in range(20):
        x = rng.normal(size=30)
        y = x * rng.normal() + rng.normal(size=30)
        y_ties = np.round(y)  # ties: average ranks
        assert E.pearsonr(x, y) == pytest.approx(stats.pearsonr(x, y)[0], rel=1e-9)
        assert E.spearmanr(x, y_ties) == pytest.approx(stats.spearmanr(x, y_ties)[0], rel=1e-9)
    assert math.isnan(E.pearsonr([1, 1, 1], [1, 2, 3]))


# ---- lm-evaluation-harness aggregations ----

def test_perplexities_and_stderr_equal_the_harness():
    lls = [-3.2, -1.5, -7.25, -0.5, -2.0]
    assert E.perplexity(lls) == pytest.approx(ref.AGGREGATIONS["perplexity"](lls), rel=1e-12)
    items = [(-10.0, 4), (-3.5, 2), (-20.25, 9)]
    assert E.word_perplexity(items) == pytest.approx(ref.AGGREGATIONS["weighted_perplexity"](items), rel=1e-12)
    assert E.byte_perplexity(items) == E.word_perplexity(items) == E.token_perplexity(items)
    assert E.bits_per_byte(items) == pytest.approx(ref.AGGREGATIONS["bits_per_byte"](items), rel=1e-12)
    xs = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
    assert E.mean_stderr(xs) == pytest.approx(ref.sample_stddev(xs) / math.sqrt(len(xs)), rel=1e-12)
    # The bootstrap draws what lm-eval draws (random.Random(i).choices), so the stderr is equal.
    assert E.bootstrap_stderr("perplexity", lls, 3000) == pytest.approx(
        ref.bootstrap_stderr(ref.AGGREGATIONS["perplexity"], lls, 3000), rel=1e-12)
    pairs = [(1, 1), (0, 1), (1, 0), (0, 0), (1, 1), (0, 0), (1, 1)]
    assert E.bootstrap_stderr("matthews_corrcoef", pairs, 1000) == pytest.approx(
        ref.bootstrap_stderr(ref.AGGREGATIONS["matthews_corrcoef"], pairs, 1000), rel=1e-9)
    median = lambda v: sorted(v)[len(v) // 2]
    assert E.bootstrap_stderr(median, lls, 2000) == pytest.approx(ref.bootstrap_stderr(median, lls, 2000), rel=1e-12)


@pytest.mark.parametrize("n,k", [(5, 3), (21, 21), (30, 4), (100, 6), (1000, 50), (3, 0)])
def test_python_random_sample_is_cpythons(n, k):
    for seed in (0, 1, 1234, 2**40 + 7):
        want = random.Random(seed).sample(range(n), k)
        assert foundry._C._eval.PyRandom(seed).sample(n, k) == want
    r, mine = random.Random(99), foundry._C._eval.PyRandom(99)
    assert [mine.random() for _ in range(5)] == [r.random() for _ in range(5)]


def test_bad_metric_inputs_fail_clearly():
    with pytest.raises(ValueError, match="reference"):
        E.bleu(["a", "b"], [["a"]])
    with pytest.raises(ValueError, match="items"):
        E.accuracy([1, 0], [1])
