"""The tokenizer bindings (parity with HF is tested in tests/text; this checks the Python API)."""
import os

import foundry
from shared_data import SHARED_DATA, needs_shared

DATA = os.path.join(SHARED_DATA, "tokenizers")


@needs_shared("tokenizers", "phi-2", "tokenizer.json")
def test_encode_decode_roundtrip():
    tok = foundry.Tokenizer.from_file(os.path.join(DATA, "phi-2", "tokenizer.json"))
    enc = tok.encode("Hello world, héllo!")
    assert enc.ids and len(enc.ids) == len(enc.tokens) == len(enc.offsets)
    assert tok.decode(enc.ids) == "Hello world, héllo!"
    assert tok.token_to_id(enc.tokens[0]) == enc.ids[0]
    batch = tok.encode_batch(["a b", "c"])
    assert [len(e) for e in batch] == [len(tok.encode("a b")), len(tok.encode("c"))]


@needs_shared("tokenizers", "gpt2", "encoder.json")
def test_gpt2_files_match_known_ids():
    tok = foundry.Tokenizer.from_file(os.path.join(DATA, "gpt2", "encoder.json"))
    assert tok.encode("Hello world").ids == [15496, 995]


def test_bad_file_raises():
    import pytest
    with pytest.raises(Exception):
        foundry.Tokenizer.from_str("{not json")
