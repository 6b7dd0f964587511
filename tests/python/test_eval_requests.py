"""`foundry eval --requests` against a transcription of lm-evaluation-harness v0.4's HFLM request
semantics (lm_eval_ref.Harness) running on the PyTorch reference forward of the same Llama weights
(test_pretrained.py)."""
import json
import subprocess

import pytest
import torch

import lm_eval_ref as ref
import test_pretrained as tp

pytestmark = tp.pytestmark

CFG = dict(tp.LLAMA, vocab_size=98, max_position_embeddings=48)
CHARS = [chr(c) for c in range(32, 127)]


def write_model(tmp_path):
    folder = tmp_path / "model"
    return folder, ref.write_char_model(folder, CFG, CHARS, 11)


MAX_LEN = CFG["max_position_embeddings"]
PREFIX = CFG["bos_token_id"]


def run_eval(folder, requests, tmp_path, check=True):
    req = tmp_path / "req.jsonl"
    req.write_text("".join(json.dumps(r) + "\n" for r in requests))
    out = tmp_path / "res.jsonl"
    p = subprocess.run([tp.FOUNDRY, "eval", "--model", str(folder), "--requests", str(req), "--out", str(out)],
                       capture_output=True, text=True)
    if check:
        assert p.returncode == 0, p.stderr
        return [json.loads(line) for line in out.read_text().splitlines()], p.stderr
    return p


def test_loglikelihood_rolling_and_generation_match_the_harness(tmp_path):
    folder, h = write_model(tmp_path)
    g = torch.Generator().manual_seed(5)
    ids = lambda n: [int(x) for x in torch.randint(3, 98, (n,), generator=g)]
    ctx = ids(20)
    choices = [ids(3), ids(5), ids(1), ids(4)]
    requests = [{"request_type": "loglikelihood", "context_ids": ctx, "continuation_ids": c} for c in choices]
    long_ctx, long_cont = ids(70), ids(6)  # longer than the window: left-truncated
    requests.append({"request_type": "loglikelihood", "context_ids": long_ctx, "continuation_ids": long_cont})
    requests.append({"request_type": "loglikelihood", "context_ids": [], "continuation_ids": ids(7)})
    texts = [ids(150), ids(48), ids(49), ids(5), ids(1)]
    requests += [{"request_type": "loglikelihood_rolling", "ids": t} for t in texts]
    requests.append({"request_type": "loglikelihood", "context": "Question: is it? Answer: ", "continuation": "yes"})
    requests.append({"request_type": "loglikelihood", "context": "", "continuation": "Hello"})
    requests.append({"request_type": "loglikelihood_rolling", "text": "All the world's a stage, and all the men"})
    requests.append({"request_type": "generate_until", "context": "Q: 1+1=", "until": ["\n", "z"], "max_gen_toks": 12})
    requests.append({"request_type": "generate_until", "context": "abc", "until": [], "max_gen_toks": 9})
    got, stderr = run_eval(folder, requests, tmp_path)
    assert len(got) == len(requests)

    want = [h.loglikelihood(ctx, c) for c in choices]
    want.append(h.loglikelihood(long_ctx, long_cont))
    want.append(h.loglikelihood([], requests[5]["continuation_ids"]))
    for (ll, greedy), r in zip(want, got[:6]):
        assert r["loglikelihood"] == pytest.approx(ll, abs=2e-4) and r["is_greedy"] == greedy
    for t, r in zip(texts, got[6:11]):
        assert r["n_tokens"] == len(t) and r["loglikelihood"] == pytest.approx(h.rolling(t), abs=5e-4)
    ll, greedy = h.loglikelihood(*h.encode_pair("Question: is it? Answer: ", "yes"))
    assert got[11]["loglikelihood"] == pytest.approx(ll, abs=2e-4) and got[11]["is_greedy"] == greedy
    ll, _ = h.loglikelihood([], h.encode("Hello"))
    assert got[12]["loglikelihood"] == pytest.approx(ll, abs=2e-4)
    text = "All the world's a stage, and all the men"
    assert got[13] == {"loglikelihood": pytest.approx(h.rolling(h.encode(text)), abs=5e-4), "n_tokens": len(text)}
    assert got[14]["text"] == h.generate_until("Q: 1+1=", ["\n", "z"], 12)
    assert got[15]["text"] == h.generate_until("abc", [], 9)
    # The four choices shared one forward of their context (20 tokens minus the last, 3 times saved).
    assert "shared contexts saved 57 tokens" in stderr
    # The other 4 loglikelihood requests ran as one left-padded batch, and the 10 windows of the six
    # rolling texts as two batches of at most 8: 5 + 1 + 2 forwards in all.
    assert "with 8 forwards" in stderr, stderr


def test_rolling_windows_at_the_window_edges(tmp_path):
    """Texts one token short of, at, and past one and two windows: Foundry's totals equal the
    harness's windows (which score every token exactly once)."""
    folder, h = write_model(tmp_path)
    lengths = (1, 2, 47, 48, 49, 95, 96, 97)
    texts = [[3 + (7 * i) % 95 for i in range(n)] for n in lengths]
    for tokens in texts:
        windows = [ref.make_disjoint_window(p) for p in ref.get_rolling_token_windows(tokens, PREFIX, MAX_LEN, 1)]
        assert sum(len(b) for _, b in windows) == len(tokens)
    got, _ = run_eval(folder, [{"request_type": "loglikelihood_rolling", "ids": t} for t in texts], tmp_path)
    for t, r in zip(texts, got):
        assert r["n_tokens"] == len(t) and r["loglikelihood"] == pytest.approx(h.rolling(t), abs=5e-4)


@pytest.mark.parametrize("line,message", [
    ('{"request_type": "loglikelihood", "context_ids": [1]}', "give both"),
    ('{"request_type": "guess"}', "request_type must be"),
    ('{"request_type": "loglikelihood", "context_ids": [1], "continuation_ids": [1000]}', "outside the vocabulary"),
    ('{"request_type": "loglikelihood", "context_ids": ["a"], "continuation_ids": [3]}', "non-integer"),
    ('{"request_type": "generate_until", "context": "a", "max_gen_toks": 0}', "max_gen_toks"),
    ('[1, 2]', "not a JSON object"),
])
def test_bad_requests_fail_clearly(tmp_path, line, message):
    folder, _ = write_model(tmp_path)
    req = tmp_path / "bad.jsonl"
    req.write_text(line + "\n")
    p = subprocess.run([tp.FOUNDRY, "eval", "--model", str(folder), "--requests", str(req), "--out",
                        str(tmp_path / "o.jsonl")], capture_output=True, text=True)
    assert p.returncode == 1 and message in p.stderr, p.stderr
    assert not (tmp_path / "o.jsonl").exists()
