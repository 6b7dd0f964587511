"""Foundry's BPE trainer against Hugging Face's (tokenizers 0.23.2, the npm binding the tokenizer
parity tests install into build/npm-ref): trained on the same corpus with the binding's default
BpeTrainer (vocab_size 30000, min_frequency 0), the vocabulary and the merges are equal for plain
BPE over the Whitespace pre-tokenizer; for byte-level BPE the merges are equal and the vocabularies
differ only by the byte characters Foundry adds to the alphabet up front (HF's Python users pass
initial_alphabet=ByteLevel.alphabet() for that; the binding cannot)."""
import json
import os
import shutil
import subprocess

import pytest

foundry = pytest.importorskip("foundry")
if not hasattr(foundry, "train_bpe"):
    pytest.skip("foundry is not built", allow_module_level=True)

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
NPM = os.path.join(ROOT, "build", "npm-ref")
SCRIPT = """
const [npm, file, mode, out] = process.argv.slice(2);
const t = require(npm + '/node_modules/tokenizers');
const tok = new t.Tokenizer(t.BPE.empty());
tok.setPreTokenizer(mode === 'byte' ? t.byteLevelPreTokenizer(false) : t.whitespacePreTokenizer());
tok.train([file]);
tok.save(out, false);
"""


def merges(model):
    return [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]


@pytest.mark.parametrize("mode", ["plain", "byte"])
def test_trainer_matches_hugging_face(tmp_path, mode):
    if not shutil.which("node") or not os.path.exists(os.path.join(NPM, "node_modules", "tokenizers")):
        pytest.skip("the npm tokenizers reference is installed by the text tests (ctest -L text) into build/npm-ref")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(open(os.path.join(ROOT, "examples", "data", "tinyshakespeare.txt")).read()[:40000])
    (tmp_path / "train.js").write_text(SCRIPT)
    subprocess.run(["node", str(tmp_path / "train.js"), os.path.abspath(NPM), str(corpus), mode,
                    str(tmp_path / "hf.json")], check=True)
    hf = json.load(open(tmp_path / "hf.json"))["model"]
    ours = json.loads(foundry.train_bpe([str(corpus)], vocab_size=30000, byte_level=mode == "byte").to_str())["model"]
    assert len(merges(hf)) > 3000
    assert merges(ours) == merges(hf)
    if mode == "plain":
        assert ours["vocab"] == hf["vocab"]
    else:
        extra = set(ours["vocab"]) - set(hf["vocab"])
        assert set(hf["vocab"]) <= set(ours["vocab"])
        assert extra and all(len(tok) == 1 for tok in extra)  # unseen byte characters only
        assert len(set(ours["vocab"]) - extra) == len(hf["vocab"])
