"""Character classes as HF tokenizers has them, over every assigned plane: BertNormalizer's control
characters (kept: unassigned code points and the noncharacters U+FDD0..U+FDEF, U+xFFFE/U+xFFFF),
accent stripping's nonspacing marks and BertPreTokenizer's punctuation follow the Unicode 8.0
tables of HF's unicode_categories crate, not today's Unicode. Each code point c is encoded inside
"a<c>b" by Foundry and by the npm binding of HF tokenizers 0.23.2 (installed into build/npm-ref by
the text tests) and the tokens must be equal.
"""
import json
import os
import shutil
import subprocess

import pytest

import foundry

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NPM = os.path.join(ROOT, "build", "npm-ref")
BERT_VOCAB = os.path.join(ROOT, "..", "shared", "data", "tokenizers", "bert-base-cased", "vocab.txt")
# Planes with assigned characters (0-3, 14) and samples of the private-use planes' edges.
RANGES = [(0, 0x32400), (0xE0000, 0xE0200), (0xF0000, 0xF0100), (0xFFF00, 0x100100), (0x10FF00, 0x110000)]

NODE = """
const [npm, file, ranges] = process.argv.slice(2);
const { Tokenizer } = require(npm + '/node_modules/tokenizers');
const tok = Tokenizer.fromFile(file);
(async () => {
  const out = [];
  for (const [lo, hi] of JSON.parse(ranges)) {
    let batch = [];
    for (let cp = lo; cp < hi; cp++) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      batch.push('a' + String.fromCodePoint(cp) + 'b');
      if (batch.length === 8192 || cp === hi - 1) {
        for (const e of await tok.encodeBatch(batch)) out.push(e.getTokens());
        batch = [];
      }
    }
  }
  process.stdout.write(JSON.stringify(out));
})();
"""


def tokenizer_json(path, strip_accents):
    vocab = {}
    with open(BERT_VOCAB, encoding="utf-8") as f:
        for i, line in enumerate(f):
            vocab[line.rstrip("\n")] = i
    tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
          "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                         "strip_accents": strip_accents, "lowercase": False},
          "pre_tokenizer": {"type": "BertPreTokenizer"}, "post_processor": None, "decoder": None,
          "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                    "max_input_chars_per_word": 100, "vocab": vocab}}
    path.write_text(json.dumps(tj))
    return str(path)


@pytest.mark.parametrize("strip_accents", [None, True])
def test_bert_character_classes_match_hf_on_every_code_point(tmp_path, strip_accents):
    if not shutil.which("node") or not os.path.exists(os.path.join(NPM, "node_modules", "tokenizers")):
        pytest.skip("the npm tokenizers reference is installed by the text tests (ctest -L text) into build/npm-ref")
    if not os.path.exists(BERT_VOCAB):
        pytest.skip("../shared/data (bert-base-cased vocab.txt) is not beside this clone")
    path = tokenizer_json(tmp_path / "tokenizer.json", strip_accents)
    (tmp_path / "sweep.js").write_text(NODE)
    hf = json.loads(subprocess.run(["node", str(tmp_path / "sweep.js"), NPM, path, json.dumps(RANGES)],
                                   capture_output=True, text=True, check=True).stdout)
    cps = [c for lo, hi in RANGES for c in range(lo, hi) if not 0xD800 <= c <= 0xDFFF]
    assert len(hf) == len(cps)
    tok = foundry.Tokenizer.from_file(path)
    ours = []
    texts = ["a" + chr(c) + "b" for c in cps]
    for i in range(0, len(texts), 16384):
        ours += [e.tokens for e in tok.encode_batch(texts[i:i + 16384])]
    wrong = [(hex(c), h, o) for c, h, o in zip(cps, hf, ours) if h != o]
    assert not wrong, "%d code points differ from HF, e.g. %s" % (len(wrong), wrong[:10])
    # The cases the issue names: noncharacters are kept (here: an unknown word), not removed.
    for c in (0xFDD0, 0xFDEF, 0xFFFE, 0xFFFF, 0x10FFFE, 0x10FFFF):
        assert tok.encode("a" + chr(c) + "b").tokens == ["[UNK]"]
