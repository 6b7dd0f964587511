"""Model forensics (docs/forensics.md): the statistics against SciPy / scikit-learn / NumPy / zlib,
the membership scores against a PyTorch computation on the reference Llama, and a proof on known
truth: small GPTs trained here with `foundry train` on different corpora (and one overfit on a few
passages) are told apart by `foundry fingerprint`, the overfit model's training passages are found by
`foundry membership` (AUC > 0.9) and recovered verbatim by `foundry memorization`, and `foundry
attribute` credits the right corpus with each capability."""
import glob
import json
import os
import random
import subprocess
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import foundry
import lm_eval_ref as ref
import test_pretrained as tp

pytestmark = tp.pytestmark
E = foundry._C._eval
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_statistics_equal_scipy_sklearn_numpy():
    stats = pytest.importorskip("scipy.stats")
    hierarchy = pytest.importorskip("scipy.cluster.hierarchy")
    distance = pytest.importorskip("scipy.spatial.distance")
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    for _ in range(10):
        a, b = rng.normal(0.3, 1, 25), np.round(rng.normal(0, 2, 17), 1)
        auc = metrics.roc_auc_score([1] * len(a) + [0] * len(b), np.concatenate([a, b]))
        assert foundry.eval.roc_auc(a, b) == pytest.approx(auc, rel=1e-12)
        t, df, p = foundry.eval.welch_t_test(a, b)
        want = stats.ttest_ind(a, b, equal_var=False, alternative="greater")
        assert t == pytest.approx(want.statistic, rel=1e-10) and p == pytest.approx(want.pvalue, rel=1e-8, abs=1e-300)
    for t, df in ((0.5, 3.0), (-2.0, 7.5), (4.0, 1.0), (10.0, 30.0), (0.0, 2.0)):
        assert E.student_t_sf(t, df) == pytest.approx(stats.t.sf(t, df), rel=1e-9, abs=1e-15)
    # z-scored profiles clustered with average linkage on cosine distance, as SciPy does it.
    m = rng.normal(size=(7, 4))
    z = E.zscore_columns(m.tolist())
    assert np.allclose(z, stats.zscore(m, axis=0), atol=1e-12)
    merges, order = E.average_linkage(z)
    want = hierarchy.linkage(distance.pdist(np.array(z), "cosine"), "average")
    assert np.allclose(np.array(merges), want, atol=1e-9)
    assert order == hierarchy.leaves_list(want).tolist()
    # Least squares with an intercept: NumPy's lstsq (min-norm when underdetermined, on centered data).
    for n, k in ((12, 3), (4, 6)):
        x, y = rng.normal(size=(n, k)), rng.normal(size=n)
        coef = E.least_squares(x.tolist(), y.tolist())
        xc, yc = x - x.mean(0), y - y.mean()
        w = np.linalg.lstsq(xc, yc, rcond=None)[0]
        assert np.allclose(coef[1:], w, atol=1e-6) and coef[0] == pytest.approx(y.mean() - x.mean(0) @ w, abs=1e-6)
    text = "The quick brown fox. " * 30 + "üñíçødé"
    assert E.zlib_size(text) == len(zlib.compress(text.encode()))


def test_suffix_array_finds_what_str_find_finds():
    rng = random.Random(4)
    corpus = "".join(rng.choice("abc \n") for _ in range(3000))
    sa = E.SuffixArray(corpus)
    for _ in range(200):
        q = "".join(rng.choice("abc \n") for _ in range(rng.randint(1, 12)))
        assert sa.count(q) == sum(1 for i in range(len(corpus)) if corpus.startswith(q, i))
        n, at = sa.longest_prefix_match(q)
        best = max((k for k in range(len(q) + 1) if q[:k] in corpus), default=0)
        assert n == best and corpus[at:at + n] == q[:n]


CHARS = [chr(c) for c in range(32, 127)] + ["\n"]
CFG = dict(tp.LLAMA, vocab_size=3 + len(CHARS), max_position_embeddings=24)


def token_scores_ref(h, tokens):
    """log p, mean and standard deviation of log p per token, through the harness's windows."""
    lp_all, mu_all, sd_all = [], [], []
    for a, b in map(ref.make_disjoint_window, ref.get_rolling_token_windows(tokens, h.prefix, h.max_len, 1)):
        inp = (a + b)[-(h.max_len + 1):][:-1]
        logp = F.log_softmax(h.logits(inp).double(), -1)[len(inp) - len(b):]
        p = logp.exp()
        mu = (p * logp).sum(-1)
        sd = ((p * logp * logp).sum(-1) - mu * mu).clamp(min=0).sqrt()
        lp_all += logp[torch.arange(len(b)), torch.tensor(b)].tolist()
        mu_all += mu.tolist()
        sd_all += sd.tolist()
    return np.array(lp_all), np.array(mu_all), np.array(sd_all)


def test_membership_scores_equal_a_pytorch_computation(tmp_path):
    models = []
    for seed in (5, 6):
        folder = tmp_path / f"m{seed}"
        models.append((folder, ref.write_char_model(folder, CFG, CHARS, seed)))
    texts = ["To be, or not to be: that is the question.", "abc", "The rain in Spain\nstays mainly in the plain. " * 2]
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": t, "label": i % 2}) for i, t in enumerate(texts)).replace("}{", "}\n{") + "\n")
    unseen = tmp_path / "unseen.jsonl"
    unseen.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["Hello there, friend.", "zzz yyy xxx", "1 2 3 4 5 6"]))
    out = tmp_path / "mia"
    p = subprocess.run([tp.FOUNDRY, "membership", "--model", str(models[0][0]), "--reference", str(models[1][0]),
                        "--documents", str(docs), "--unseen", str(unseen), "--k", "0.3", "--out", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    got = [json.loads(line) for line in open(out / "scores.jsonl")]
    h, h_ref = models[0][1], models[1][1]
    for text, g in zip(texts, got):
        lp, mu, sd = token_scores_ref(h, h.encode(text))
        k = max(1, int(len(lp) * 0.3))
        loss = -lp.mean()
        assert g["loss"] == pytest.approx(loss, rel=1e-4)
        assert g["zlib"] == pytest.approx(-loss / len(zlib.compress(text.encode())), rel=1e-4)
        assert g["min_k"] == pytest.approx(np.sort(lp)[:k].mean(), rel=1e-4)
        assert g["min_k_plus_plus"] == pytest.approx(np.sort((lp - mu) / sd)[:k].mean(), rel=1e-3)
        ref_loss = -token_scores_ref(h_ref, h_ref.encode(text))[0].mean()
        assert g["reference_ratio"] == pytest.approx(ref_loss / loss, rel=1e-4)
    summary = json.load(open(out / "summary.json"))
    stats = pytest.importorskip("scipy.stats")
    unseen_loss = [-token_scores_ref(h, h.encode(t))[0].mean() for t in ["Hello there, friend.", "zzz yyy xxx", "1 2 3 4 5 6"]]
    want = stats.ttest_ind([-g["loss"] for g in got], [-x for x in unseen_loss], equal_var=False, alternative="greater")
    assert summary["dataset_inference"]["neg_loss"]["p_value"] == pytest.approx(want.pvalue, rel=1e-3)
    assert summary["auc"]["neg_loss"] == pytest.approx(
        foundry.eval.roc_auc([-got[1]["loss"]], [-got[0]["loss"], -got[2]["loss"]]))


@pytest.mark.parametrize("args,message", [
    (["fingerprint", "--models", "{m}", "--datasets", "{tmp}/none.txt", "--out", "{tmp}/o"], "cannot open"),
    (["fingerprint", "--models", "{m}", "--datasets", "{tmp}/bad.jsonl", "--out", "{tmp}/o"], "line 1: needs a JSON object"),
    (["membership", "--model", "{m}", "--documents", "{tmp}/labels.jsonl", "--out", "{tmp}/o"], "\"label\" must be 1"),
    (["attribute", "--presence", "{tmp}/bad.csv", "--scores", "{tmp}/bad.csv", "--out", "{tmp}/a.json"], "first column must be"),
    (["memorization", "--model", "{m}", "--corpus", "{tmp}/empty.txt", "--out", "{tmp}/r.json"], "is empty"),
])
def test_bad_forensics_input_fails_clearly(tmp_path, args, message):
    folder = tmp_path / "m"
    ref.write_char_model(folder, CFG, CHARS, 5)
    (tmp_path / "bad.jsonl").write_text('{"txt": "x"}\n')
    (tmp_path / "labels.jsonl").write_text('{"text": "x", "label": 2}\n')
    (tmp_path / "bad.csv").write_text("name,a\nx,1\n")
    (tmp_path / "empty.txt").write_text("")
    p = subprocess.run([tp.FOUNDRY] + [a.format(m=folder, tmp=tmp_path) for a in args], capture_output=True, text=True)
    assert p.returncode == 1 and message in p.stderr, p.stderr


# ---- the proof on known truth ----------------------------------------------------------------

def byte_tokenizer(path):
    """A byte-level BPE tokenizer.json without merges: one token per byte (GPT-2's byte alphabet)."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    vocab = {chr(c): b for b, c in zip(bs, cs)}
    vocab["<|endoftext|>"] = 256
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
    tok = {"version": "1.0", "truncation": None, "padding": None, "normalizer": None, "post_processor": None,
           "added_tokens": [{"id": 256, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True}],
           "pre_tokenizer": level, "decoder": level,
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []}}
    path.write_text(json.dumps(tok))


def train(tmp, name, corpus_text, steps, seed, tokenizer, val_fraction=0.05, n_embd=64, lr=3e-3):
    data = tmp / f"{name}.txt"
    data.write_text(corpus_text)
    cfg = tmp / f"{name}.toml"
    cfg.write_text(f"""
[data]
path = "{data}"
tokenizer = "{tokenizer}"
val_fraction = {val_fraction}
[model]
block_size = 64
n_layer = 2
n_head = 2
n_embd = {n_embd}
dropout = 0.0
bos_token_id = 256
eos_token_id = 256
[train]
batch_size = 16
max_steps = {steps}
lr = {lr}
min_lr = 3e-4
warmup_steps = 10
out_dir = "{tmp / ('run_' + name)}"
progress = false
log_every = 1000
seed = {seed}
[eval]
every = 100000
batches = 1
checkpoint_every = 0
[sample]
tokens = 0
[track]
dir = "{tmp / 'tracking'}"
""")
    out = tmp / name
    p = subprocess.run([tp.FOUNDRY, "train", "--config", str(cfg), "--export", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return out


def run(*args):
    p = subprocess.run([tp.FOUNDRY, *map(str, args)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_forensics_recovers_known_training_data(tmp_path):
    shakespeare = open(os.path.join(REPO, "examples", "data", "tinyshakespeare.txt")).read()
    # The second corpus: WikiText-2 from ../shared/data/corpora, or in a clone without it, this
    # repository's docs (so the proof runs anywhere).
    wiki = os.path.join(REPO, "..", "shared", "data", "corpora", "wikitext2.valid.txt")
    if os.path.exists(wiki):
        docs = open(wiki).read() + open(wiki.replace("valid", "test")).read()
    else:
        docs = "".join(open(f).read() for f in sorted(glob.glob(os.path.join(REPO, "docs", "*.md"))))
    assert len(docs) > 150_000
    tok = tmp_path / "tokenizer.json"
    byte_tokenizer(tok)
    s_train, s_held = shakespeare[:120_000], shakespeare[200_000:230_000]
    d_train, d_held = docs[:120_000], docs[-30_000:]
    models = [train(tmp_path, "shakes_a", s_train, 250, 1, tok), train(tmp_path, "other_a", d_train, 250, 1, tok),
              train(tmp_path, "shakes_b", s_train, 250, 2, tok), train(tmp_path, "other_b", d_train, 250, 2, tok)]
    (tmp_path / "shakespeare_held.txt").write_text(s_held)
    (tmp_path / "other_held.txt").write_text(d_held)
    fp = tmp_path / "fingerprint"
    run("fingerprint", "--models", ",".join(map(str, models)), "--datasets",
        f"{tmp_path / 'shakespeare_held.txt'},{tmp_path / 'other_held.txt'}", "--max-tokens", "6000", "--out", fp)
    m = json.load(open(fp / "matrix.json"))
    bpb = np.array(m["bits_per_byte"])
    assert bpb[0, 0] < bpb[1, 0] and bpb[1, 1] < bpb[0, 1]  # each model knows its own corpus best
    # The last merge joins the two Shakespeare models with each other and the two others with
    # each other: the clusters are the training corpora.
    merges = m["linkage"]
    first_two = sorted(tuple(sorted(map(int, mg[:2]))) for mg in merges[:2])
    assert first_two == [(0, 2), (1, 3)], merges
    assert merges[-1][2] > 10 * max(merges[0][2], merges[1][2])
    assert os.path.getsize(fp / "fingerprint.png") > 100 and open(fp / "matrix.csv").readline().startswith("model,")

    # One model overfit on 24 passages: membership inference tells them from 24 held-out passages.
    chunks = [shakespeare[300_000 + 200 * i: 300_000 + 200 * (i + 1)] for i in range(48)]
    members, held_out = chunks[:24], chunks[24:]
    # The corpus ends with 1,300 bytes of other text that are the validation split (its last 21.31 %).
    overfit = train(tmp_path, "overfit", "".join(members) + shakespeare[400_000:401_300], 900, 3, tok,
                    val_fraction=0.2131, n_embd=96, lr=5e-3)
    (tmp_path / "suspects.jsonl").write_text("".join(json.dumps({"text": t, "label": 1}) + "\n" for t in members) +
                                             "".join(json.dumps({"text": t, "label": 0}) + "\n" for t in held_out))
    (tmp_path / "members.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in members))
    (tmp_path / "unseen.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in held_out))
    run("membership", "--model", overfit, "--reference", models[0], "--documents", tmp_path / "suspects.jsonl",
        "--out", tmp_path / "mia")
    auc = json.load(open(tmp_path / "mia" / "summary.json"))["auc"]
    assert auc["neg_loss"] > 0.9 and auc["min_k"] > 0.9, auc
    run("membership", "--model", overfit, "--documents", tmp_path / "members.jsonl", "--unseen", tmp_path / "unseen.jsonl",
        "--out", tmp_path / "di")
    assert json.load(open(tmp_path / "di" / "summary.json"))["dataset_inference"]["neg_loss"]["p_value"] < 1e-6

    # The memorization sweep recovers the passages: greedy continuations of their first words are
    # found verbatim in the training text.
    # Prompts: the first 20 characters of a line of each passage (a line of 20 or more).
    prompts = [next(line[:20] for line in c.split("\n")[1:] + [c[:20]] if len(line) >= 20) for c in members[:12]]
    (tmp_path / "prompts.txt").write_text("".join(p + "\n" for p in prompts))
    run("memorization", "--model", overfit, "--corpus", tmp_path / "overfit.txt", "--prompts", tmp_path / "prompts.txt",
        "--samples", 12, "--max-new-tokens", 44, "--temperature", 0, "--out", tmp_path / "mem.json")
    report = json.load(open(tmp_path / "mem.json"))
    found = report["memorized"]
    train_text = "".join(members)
    assert len(found) >= 6, report
    assert all(f["text"] in train_text and f["length"] >= 32 for f in found)
    offsets = [f["corpus_offset"] for f in found]
    assert len(set(offsets)) == len(offsets)  # deduplicated

    # Attribution: capabilities measured with `foundry eval --tasks` (bits per byte on each held-out
    # set) regressed on the fingerprint's inferred presence credit each capability to its corpus.
    results = []
    for name, path in (("shakespeare", "shakespeare_held.txt"), ("other", "other_held.txt")):
        rows = [{"text": t} for t in open(tmp_path / path).read().split("\n\n")[:20] if t.strip()]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (tmp_path / f"{name}_task.yaml").write_text(
            f"task: {name}_bpb\ndataset_path: {name}.jsonl\noutput_type: loglikelihood_rolling\ndoc_to_text: ''\n"
            "doc_to_target: text\nmetric_list:\n  - metric: bits_per_byte\n")
    for model in models:
        out = tmp_path / f"res_{model.name}.json"
        run("eval", "--model", model, "--tasks", f"{tmp_path / 'shakespeare_task.yaml'},{tmp_path / 'other_task.yaml'}",
            "--output", out)
        results.append(f"{model.name}={out}")
    run("attribute", "--presence", fp / "matrix.json", "--results", ",".join(results), "--out", tmp_path / "attr.json")
    attr = json.load(open(tmp_path / "attr.json"))["capabilities"]
    # Lower bits per byte is better: presence of a corpus lowers its own capability's bits per byte.
    assert attr["shakespeare_bpb/bits_per_byte,none"]["weights"]["shakespeare_held.txt"] < 0
    assert attr["other_bpb/bits_per_byte,none"]["weights"]["other_held.txt"] < 0
    assert attr["other_bpb/bits_per_byte,none"]["ranking"][-1] == "other_held.txt"
