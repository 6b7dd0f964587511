"""`foundry tokenize` (docs/tokenizers.md, "Command line") against the references the text tests
write into build/text-ref: HF tokenizers 0.23.2 and tiktoken from npm, and Debian's
python3-sentencepiece, on the corpora of ../shared/data (3064 lines of Shakespeare, code, Unicode
edge cases). Every tokenizer kind goes through the CLI: tokenizer.json, GPT-2 encoder.json, .model,
.tiktoken with --tiktoken-encoding; pairs, offsets, special tokens on and off; --decode.
"""
import json
import os
import subprocess

import pytest

from test_track import FOUNDRY, needs_cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REF = os.path.join(ROOT, "build", "text-ref")
pytestmark = [needs_cli, pytest.mark.skipif(not os.path.exists(os.path.join(REF, "manifest.json")),
                                            reason="no references in build/text-ref: run the text tests (ctest -L text) "
                                                   "first; they need ../shared/data and npm")]


def manifest():
    if not os.path.exists(os.path.join(REF, "manifest.json")):
        return []
    return json.load(open(os.path.join(REF, "manifest.json")))


def inputs():
    return [json.loads(line)["text"] for line in open(os.path.join(REF, "inputs.jsonl"), encoding="utf-8")]


def tokenize(*args, stdin=None):
    p = subprocess.run([FOUNDRY, "tokenize", *map(str, args)], capture_output=True, text=True, input=stdin,
                       timeout=300)
    return p


def strip_padding(row):
    """Drops [PAD] tokens at either end (right or left padding)."""
    lo, hi = 0, len(row["tokens"])
    while hi > lo and row["tokens"][hi - 1] == "[PAD]":
        hi -= 1
    while lo < hi and row["tokens"][lo] == "[PAD]":
        lo += 1
    return {k: row[k][lo:hi] for k in ("ids", "tokens", "offsets") if k in row}


@pytest.mark.parametrize("entry", [pytest.param(e, id=e["name"]) for e in manifest()])
def test_cli_matches_the_reference_tokenizers(entry, tmp_path):
    texts = inputs()
    src = tmp_path / "in.jsonl"
    with open(src, "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            if entry["pairs"]:
                f.write(json.dumps({"text": t, "pair": texts[(i + 1) % len(texts)]}) + "\n")
            else:
                f.write(json.dumps(t) + "\n")
    args = ["--tokenizer", entry["path"], "--input", src, "--output", tmp_path / "out.jsonl"]
    if entry["kind"] == "tiktoken":
        args += ["--tiktoken-encoding", entry["encoding"]]
    if entry["add_special"]:
        args.append("--add-special-tokens")
    if entry["pairs"]:
        args.append("--pair")
    if entry["compare_offsets"]:
        args.append("--offsets")
    p = tokenize(*args)
    assert p.returncode == 0, p.stderr
    got = [json.loads(line) for line in open(tmp_path / "out.jsonl", encoding="utf-8")]
    want = [json.loads(line) for line in open(entry["expected"], encoding="utf-8")]
    assert len(got) == len(want) == len(texts)
    keys = ["ids"] + (["tokens"] if entry["kind"] not in ("tiktoken", "spm") else []) + \
        (["offsets"] if entry["compare_offsets"] else [])
    bad = []
    for i, (g, w) in enumerate(zip(got, want)):
        if "[PAD]" in w.get("tokens", []):  # the reference padded per batch of 256; compare what precedes
            g, w = strip_padding(g), strip_padding(w)
        if any(g[k] != w[k] for k in keys):
            bad.append("line %d: %r\n ours %s\n want %s" % (i, texts[i][:80], {k: g[k] for k in keys},
                                                            {k: w[k] for k in keys}))
    assert not bad, "%d of %d lines differ:\n%s" % (len(bad), len(texts), "\n".join(bad[:3]))
    # --decode reads the ids back (the decoded text the reference printed, where it has one).
    if entry["kind"] == "tiktoken" and not entry["pairs"]:
        ids_file = tmp_path / "ids.jsonl"
        ids_file.write_text("".join(json.dumps(g) + "\n" for g in got))  # {"ids": ...} objects are accepted
        p = tokenize("--tokenizer", entry["path"], "--tiktoken-encoding", entry["encoding"], "--decode",
                     "--keep-special-tokens", "--input", ids_file)
        assert p.returncode == 0, p.stderr
        decoded = [json.loads(line) for line in p.stdout.split("\n")[:-1]]  # not splitlines(): U+2028 is text
        assert decoded == [w.get("decode", t) for w, t in zip(want, texts)]


def test_tiktoken_special_tokens_only_with_the_flag(tmp_path):
    path = os.path.join(REF, "cl100k_base.tiktoken")
    line = json.dumps("hi <|endoftext|> there") + "\n"
    special = json.loads(tokenize("--tokenizer", path, "--add-special-tokens", "--input", "-", stdin=line).stdout)
    ordinary = json.loads(tokenize("--tokenizer", path, "--input", "-", stdin=line).stdout)
    assert 100257 in special["ids"] and 100257 not in ordinary["ids"]
    assert len(ordinary["ids"]) > len(special["ids"])
    import foundry
    tok = foundry.Tokenizer.from_file(path)
    assert tok.encode("hi <|endoftext|> there", add_special_tokens=True).ids == special["ids"]
    assert tok.encode("hi <|endoftext|> there", add_special_tokens=False).ids == ordinary["ids"]


def test_bad_input_lines_and_options_give_clear_errors(tmp_path):
    path = os.path.join(REF, "bert-cased.tokenizer.json")
    cases = [
        (["--input", "-"], "{not json\n", "line 1: not JSON"),
        (["--input", "-"], "\"ok\"\n42\n", "line 2: expected a JSON string"),
        (["--input", "-", "--pair"], "\"no pair\"\n", "--pair needs"),
        (["--input", "-", "--decode"], "[1, -2]\n", "non-negative"),
        (["--input", "-", "--decode"], "\"text\"\n", "array of ids"),
        (["--input", "-", "--tiktoken-encoding", "cl100k_base"], "\"x\"\n", "applies to .tiktoken"),
        (["--input", tmp_path / "missing.jsonl"], None, "cannot open"),
        (["--input", tmp_path], None, "is a directory, not a JSON Lines file"),
        ([], None, "--input"),
    ]
    for extra, stdin, words in cases:
        p = tokenize("--tokenizer", path, *extra, stdin=stdin)
        assert p.returncode == 1 and words in p.stderr and "terminate" not in p.stderr, (extra, p.stderr)
    p = tokenize("--tokenizer", os.path.join(REF, "cl100k_base.tiktoken"), "--tiktoken-encoding", "x50k",
                 "--text", "a")
    assert p.returncode == 1 and "unknown tiktoken encoding 'x50k'" in p.stderr


def test_pair_lines_without_the_flag_and_as_arrays():
    # A line that states a pair is encoded as that pair with or without --pair; [text, pair] arrays
    # are pairs too. The --pair runs are the ones checked against HF above.
    path = os.path.join(REF, "bert-cased.tokenizer.json")
    single, a, b = "Hello there", "A question?", "Its context."
    mixed = "".join(json.dumps(x) + "\n" for x in [single, {"text": a, "pair": b}, [a, b], {"text": single, "pair": None}])
    p = tokenize("--tokenizer", path, "--add-special-tokens", "--input", "-", stdin=mixed)
    assert p.returncode == 0, p.stderr
    got = [json.loads(line) for line in p.stdout.splitlines()]
    as_pair = tokenize("--tokenizer", path, "--add-special-tokens", "--pair", "--input", "-",
                       stdin=json.dumps({"text": a, "pair": b}) + "\n")
    alone = tokenize("--tokenizer", path, "--add-special-tokens", "--input", "-", stdin=json.dumps(single) + "\n")
    assert as_pair.returncode == 0 and alone.returncode == 0, (as_pair.stderr, alone.stderr)
    want_pair, want_single = json.loads(as_pair.stdout), json.loads(alone.stdout)
    assert want_pair["tokens"].count("[SEP]") == 2 and want_single["tokens"].count("[SEP]") == 1
    assert got == [want_single, want_pair, want_pair, want_single]
    p = tokenize("--tokenizer", path, "--input", "-", stdin=json.dumps(["only one"]) + "\n")
    assert p.returncode == 1 and "two strings" in p.stderr
