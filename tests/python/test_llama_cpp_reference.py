"""llama.cpp itself as the reference for GGUF files (the build of ../shared/tools/llama.cpp, skipped
where it is absent). The quantizers' other tests compare with transcriptions of ggml's reference
code; these run the real tools:

- `llama-quantize --pure` of a float32 GGUF that `foundry convert` wrote gives, tensor for tensor,
  the bytes `foundry convert --type T` writes from the model folder, for every type both have.
- Foundry's logits on a file from `llama-quantize` (its default mixtures too, such as Q4_K_M with
  q6_K tensors among the q4_K ones) against `llama-perplexity`'s on the same tokens: the
  log-probabilities it saves with --kl-divergence-base (16-bit, those more than 16 below the top
  clipped). Foundry computes as llama.cpp's matrix path does (activations quantized to the weights'
  dot format, integer sums: quantized_prefill="integer"; a float32 KV cache, llama.cpp without flash
  attention), and the mean KL divergence between the two must be smaller than between llama.cpp's
  own two attention paths (flash attention on and off) on the same file. The random model (weights
  of std 0.2) is chaotic: a float32 difference in the last bit upstream moves an activation's q8
  level now and then, so two correct programs differ where the weights are quantized (llama.cpp
  against itself: mean KL 3e-3 for Q8_0, 7e-3 for Q4_K_M; Foundry against llama.cpp 1.9e-4 and
  3.4e-4, measured 2026-12-07) and agree to ~1e-6 where they are float32.
- `foundry tokenize --tokenizer file.gguf` against `llama-tokenize` on the same file: Llama 2's
  SentencePiece model, GPT-2's BPE, Llama 3's and Phi-2's tokenizer.json as `foundry convert`
  stores them, read from llama.cpp's keys alone and from the stored tokenizer.json, with and
  without BOS; and llama.cpp's "qwen2" split and add_bos_token switch on Llama 3's vocabulary.
"""
import glob
import json
import os
import re
import struct
import subprocess

import numpy as np
import pytest

import foundry
from shared_data import SHARED_DATA, needs_shared

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYDIR = os.environ.get("FOUNDRY_PYTHON_DIR", os.path.join(ROOT, "build", "python"))
FOUNDRY = os.path.join(os.path.dirname(os.path.abspath(PYDIR)), "bin", "foundry")
CORPUS = os.path.join(ROOT, "examples", "data", "tinyshakespeare.txt")


def llama_cpp_bin():
    """The folder of llama.cpp's tools: LLAMA_CPP_BIN, else where ../shared/tools/llama.cpp/build.sh
    caches its build (never built here: that takes ~15 minutes)."""
    if os.environ.get("LLAMA_CPP_BIN"):
        return os.environ["LLAMA_CPP_BIN"]
    archives = glob.glob(os.path.join(ROOT, "..", "shared", "tools", "llama.cpp", "llama.cpp-*.tar.xz"))
    if not archives:
        return None
    rev = os.path.basename(archives[0])[len("llama.cpp-"):-len(".tar.xz")]
    return os.path.join(os.path.expanduser("~"), ".cache", "llama.cpp-" + rev, "bin")


LLAMA = llama_cpp_bin()
pytestmark = [
    pytest.mark.skipif(not os.path.exists(FOUNDRY), reason="foundry CLI not built at " + FOUNDRY),
    pytest.mark.skipif(not (LLAMA and os.path.exists(os.path.join(LLAMA, "llama-quantize"))),
                       reason="llama.cpp is not built (bash ../shared/tools/llama.cpp/build.sh, ~15 min; "
                              "LLAMA_CPP_BIN names another build)"),
]


def run(*args):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} failed:\n{(p.stdout + p.stderr)[-3000:]}")
    return p


def write_llama(folder, seed, tokenizer=None, **overrides):
    """A random Llama folder (test_pretrained's case) of whole K-quant super-blocks: hidden 256,
    intermediate 512."""
    import torch
    import test_pretrained as tp
    cfg, make_weights, _ = tp.CASES["llama"]
    cfg = dict(cfg, hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
               max_position_embeddings=256, tie_word_embeddings=False, **overrides)
    tp.write_folder(str(folder), cfg, make_weights(cfg, torch.Generator().manual_seed(seed)))
    if tokenizer:
        os.symlink(tokenizer, os.path.join(folder, "tokenizer.model"))
    return str(folder)


def tensor_bytes(path):
    """{name: (type name, the tensor's bytes)} of a GGUF file, read through Foundry's parser."""
    info = foundry.gguf.read(path)
    with open(path, "rb") as f:
        data = f.read()
    return {t["name"]: (t["type_name"], data[info["data_offset"] + t["offset"]:][:t["nbytes"]])
            for t in info["tensors"]}


@pytest.fixture(scope="module")
def float_model(tmp_path_factory):
    """A folder without a tokenizer (llama-quantize needs none) and its float32 GGUF."""
    tmp = tmp_path_factory.mktemp("llama_quantize")
    folder = write_llama(tmp / "hf", 11, vocab_size=1024)
    f32 = str(tmp / "f32.gguf")
    run(FOUNDRY, "convert", "--model", folder, "--to", f32, "--type", "f32")
    return tmp, folder, f32


@pytest.mark.parametrize("typ", ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"])
def test_llama_quantize_writes_the_bytes_foundry_writes(float_model, typ):
    tmp, folder, f32 = float_model
    theirs, ours = str(tmp / f"llama-{typ}.gguf"), str(tmp / f"foundry-{typ}.gguf")
    run(os.path.join(LLAMA, "llama-quantize"), "--pure", f32, theirs, typ)
    run(FOUNDRY, "convert", "--model", folder, "--to", ours, "--type", typ.lower())
    a, b = tensor_bytes(theirs), tensor_bytes(ours)
    assert sorted(a) == sorted(b)
    assert len(a) == 21  # 2 layers x 9, the embedding, the final norm, the output
    for name in sorted(a):
        assert a[name][0] == b[name][0], f"{name}: llama.cpp wrote {a[name][0]}, Foundry {b[name][0]}"
        if a[name][1] != b[name][1]:
            x, y = np.frombuffer(a[name][1], np.uint8), np.frombuffer(b[name][1], np.uint8)
            where = np.flatnonzero(x != y) if x.size == y.size else []
            pytest.fail(f"{name} ({a[name][0]}): {len(where)} of {x.size} bytes differ from llama-quantize's "
                        f"(first at {where[0] if len(where) else '-'})")


def saved_log_probs(path):
    """llama-perplexity's --kl-divergence-base file: "_logits_", n_ctx, n_vocab, n_chunk (int32),
    the chunks' tokens, then for each chunk the positions it scores (n_ctx/2 .. n_ctx-2), a row each
    of 2*ceil(n_vocab/2)+4 uint16: float scale, float min_log_prob, then every token's log-prob as
    round((logit - min_logit) / scale), 0 for those at or under min_logit (max_logit - 16)."""
    with open(path, "rb") as f:
        raw = f.read()
    assert raw[:8] == b"_logits_", path
    n_ctx, n_vocab, n_chunk = struct.unpack_from("<iii", raw, 8)
    off = 20
    tokens = np.frombuffer(raw, np.int32, n_chunk * n_ctx, off).reshape(n_chunk, n_ctx)
    off += tokens.nbytes
    nv, scored = 2 * ((n_vocab + 1) // 2) + 4, n_ctx - 1 - n_ctx // 2
    rows = np.frombuffer(raw, np.uint16, n_chunk * scored * nv, off).reshape(n_chunk, scored, nv)
    assert off + rows.nbytes == len(raw), "trailing bytes: the format changed"
    head = np.frombuffer(rows[..., :4].tobytes(), np.float32).reshape(n_chunk, scored, 2)
    levels = rows[..., 4:4 + n_vocab].astype(np.float64)
    log_probs = head[..., 1:2].astype(np.float64) + head[..., 0:1].astype(np.float64) * levels
    return tokens, log_probs, levels > 0


def kl_to(base_log_probs, log_probs):
    """Mean over positions of KL(base || other), as llama-perplexity --kl-divergence sums it: over
    the tokens whose base log-prob is above -16."""
    counted = base_log_probs > -16
    return float(np.mean(np.sum(np.where(counted, np.exp(base_log_probs) * (base_log_probs - log_probs), 0.0), -1)))


@needs_shared("tokenizers", "sentencepiece", "llama2.tokenizer.model")
@pytest.mark.parametrize("typ,rope", [("F32", None), ("F32", "llama3"), ("Q8_0", None), ("Q4_0", None),
                                      ("Q4_K_M", None), ("Q6_K", None)])
def test_foundry_computes_llama_perplexitys_log_probs(tmp_path, typ, rope):
    """rope "llama3": Llama 3's RoPE scaling (cuts at wavelengths 64 and 16 of head_dim 64's 32
    frequencies), which the file carries as llama.cpp's rope_freqs.weight."""
    if not os.path.exists(os.path.join(LLAMA, "llama-perplexity")):
        pytest.skip("llama-perplexity is not in " + LLAMA)
    tokenizer = os.path.join(SHARED_DATA, "tokenizers", "sentencepiece", "llama2.tokenizer.model")
    scaling = {} if rope is None else {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                        "high_freq_factor": 4.0,
                                                        "original_max_position_embeddings": 64}}
    folder = write_llama(tmp_path / "hf", 7, tokenizer, vocab_size=32000, bos_token_id=1, eos_token_id=2, **scaling)
    f32 = str(tmp_path / "f32.gguf")
    run(FOUNDRY, "convert", "--model", folder, "--to", f32, "--type", "f32")
    if rope:
        assert "rope_freqs.weight" in {t["name"] for t in foundry.gguf.read(f32)["tensors"]}
    model = f32
    if typ != "F32":
        model = str(tmp_path / f"{typ}.gguf")
        run(os.path.join(LLAMA, "llama-quantize"), f32, model, typ)  # llama.cpp's mixture for the type
    text = str(tmp_path / "text.txt")
    with open(CORPUS, encoding="utf-8") as f:
        open(text, "w", encoding="utf-8").write(f.read()[:6000])
    perplexity = [os.path.join(LLAMA, "llama-perplexity"), "-m", model, "-c", "128", "--chunks", "3", "-t", "2",
                  "-ctk", "f32", "-ctv", "f32"]
    base = str(tmp_path / "base.kld")
    run(*perplexity, "-fa", "off", "-f", text, "--kl-divergence-base", base)
    tokens, theirs, kept = saved_log_probs(base)
    assert tokens.shape == (3, 128) and theirs.shape[-1] == 32000
    # llama.cpp against itself: the same file and tokens through its flash-attention path.
    other = run(*perplexity, "-fa", "on", "--kl-divergence-base", base, "--kl-divergence").stdout
    own_kl = float(re.search(r"Mean\s+KLD:\s+(-?[\d.]+)", other).group(1))

    m = foundry.models.from_pretrained(model, quantized_prefill="integer")
    first = 128 // 2
    ours = []
    for chunk in tokens:
        ids = chunk.astype(np.int64)
        ids[0] = 1  # llama-perplexity starts every chunk with BOS
        logits = m(foundry.tensor(ids[None, :])).numpy()[0].astype(np.float64)
        shifted = logits - logits.max(-1, keepdims=True)
        ours.append((shifted - np.log(np.exp(shifted).sum(-1, keepdims=True)))[first:127])
    ours = np.stack(ours)
    kl = kl_to(theirs, ours)
    same_top = float(np.mean(np.argmax(ours, -1) == np.argmax(theirs, -1)))
    worst = float(np.max(np.abs(np.where(kept, ours - theirs, 0.0))))
    label = typ + (" rope " + rope if rope else "")
    print(f"{label}: mean KL(llama.cpp || Foundry) {kl:.3g}, llama.cpp's flash attention against its own "
          f"{own_kl:.3g}; same top token {same_top:.3f}; largest log-prob difference {worst:.3g}")
    assert kl < max(own_kl, 1e-5), f"{typ}: KL {kl:.3g} to llama.cpp, more than llama.cpp's own {own_kl:.3g}"
    if typ == "F32":  # no quantized activations: the same numbers to float32's rounding
        assert worst < 5e-3 and same_top == 1.0
    else:
        assert same_top >= 0.95


# ---- tokenizers: `foundry tokenize --tokenizer file.gguf` against `llama-tokenize` --------------

TOKENIZERS = os.path.join(SHARED_DATA, "tokenizers")
TOKENIZER_FOLDERS = {  # name: (files linked into the folder, vocabulary, BOS, EOS)
    "llama2": ([("sentencepiece/llama2.tokenizer.model", "tokenizer.model")], 32000, 1, 2),
    "gpt2": ([("gpt2/encoder.json", "vocab.json"), ("gpt2/vocab.bpe", "merges.txt")], 50257, 50256, 50256),
    "llama3": ([("llama3/tokenizer.json", "tokenizer.json")], 128256, 128000, 128001),
    # GPT-2's split with 38 added tokens of runs of spaces (CodeGen's), matched before the split.
    "phi2": ([("phi-2/tokenizer.json", "tokenizer.json")], 50295, 50256, 50256),
}


def tokenizer_text(tmp):
    """Tiny Shakespeare's opening, then accents, an emoji, CJK, tabs, runs of spaces and newlines,
    numbers of several lengths, contractions in both cases, a CRLF and indented code."""
    with open(CORPUS, encoding="utf-8") as f:
        text = f.read()[:3000]
    text += ("\nÜnïcödé 😀 你好 and\ttabs,  two  spaces\n\n\nnumbers 12345 3.14159 1,000,000; I'LL we've DON'T "
             "it's\r\n  trailing   \ndef f(x):\n        return  x   +    1\n")
    path = os.path.join(tmp, "text.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(tmp, "text.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps(text) + "\n")
    return path


def llama_tokenize(gguf, text, bos):
    out = run(os.path.join(LLAMA, "llama-tokenize"), "-m", gguf, "-f", text, "--ids", "--log-disable", "--no-escape",
              *([] if bos else ["--no-bos"])).stdout
    return json.loads(out.strip().splitlines()[-1])


def foundry_tokenize(gguf, text, special):
    out = run(FOUNDRY, "tokenize", "--tokenizer", gguf, "--input", text[:-len(".txt")] + ".jsonl",
              *(["--add-special-tokens"] if special else [])).stdout
    return json.loads(out.strip().splitlines()[-1])["ids"]


def without_keys(gguf, out, drop=(), changes=None):
    """A copy of gguf without the metadata keys `drop` and with `changes` (key: value of the same
    type) applied: llama.cpp's keys alone, as its own converter writes them."""
    info = foundry.gguf.read(gguf)
    keep = [(k, info["types"][k], (changes or {}).get(k, v)) for k, v in info["metadata"].items() if k not in drop]
    keep += [(k, "string" if isinstance(v, str) else "bool", v) for k, v in (changes or {}).items()
             if k not in info["metadata"]]
    tensors = [(t["name"], t["shape"], 0, foundry.gguf.tensor(gguf, t["name"]).numpy().tobytes())
               for t in info["tensors"]]
    foundry.gguf.write(out, keep, tensors)
    return out


def tokenizer_gguf(tmp, name):
    import torch
    import test_pretrained as tp
    files, vocab, bos, eos = TOKENIZER_FOLDERS[name]
    cfg, make_weights, _ = tp.CASES["llama"]
    cfg = dict(cfg, hidden_size=32, intermediate_size=32, num_attention_heads=2, num_key_value_heads=2,
               num_hidden_layers=1, vocab_size=vocab, bos_token_id=bos, eos_token_id=eos)
    folder = os.path.join(tmp, name)
    tp.write_folder(folder, cfg, make_weights(cfg, torch.Generator().manual_seed(1)))
    for src, dst in files:
        os.symlink(os.path.join(TOKENIZERS, src), os.path.join(folder, dst))
    gguf = os.path.join(tmp, name + ".gguf")
    run(FOUNDRY, "convert", "--model", folder, "--to", gguf, "--type", "f32")
    return gguf


@needs_shared("tokenizers", "phi-2", "tokenizer.json")
@needs_shared("tokenizers", "llama3", "tokenizer.json")
@pytest.mark.parametrize("name,pre", [("llama2", None), ("gpt2", "gpt-2"), ("llama3", "llama-bpe"), ("phi2", "gpt-2")])
def test_foundry_tokenizes_gguf_files_as_llama_tokenize(tmp_path, name, pre):
    """`foundry convert` writes llama.cpp's tokenizer keys (for byte-level BPE: tokenizer.ggml.pre
    naming the split, add_bos_token), and Foundry reading those keys alone (without the stored
    tokenizer.json, as in llama.cpp's own files) encodes as llama-tokenize does, BOS included."""
    if not os.path.exists(os.path.join(LLAMA, "llama-tokenize")):
        pytest.skip("llama-tokenize is not in " + LLAMA)
    text = tokenizer_text(str(tmp_path))
    gguf = tokenizer_gguf(str(tmp_path), name)
    md = foundry.gguf.read(gguf)["metadata"]
    assert md.get("tokenizer.ggml.pre") == pre
    keys_only = without_keys(gguf, str(tmp_path / "keys.gguf"), drop=("tokenizer.huggingface.json",))
    for bos in (False, True):
        want = llama_tokenize(gguf, text, bos)
        assert len(want) > 700
        for path in (gguf, keys_only):
            assert foundry_tokenize(path, text, bos) == want, (path, bos)


@needs_shared("tokenizers", "llama3", "tokenizer.json")
def test_gguf_pre_tokenizer_and_bos_switch_as_llama_cpp_reads_them(tmp_path):
    """Llama 3's vocabulary under llama.cpp's "qwen2" split (single digits, whole pre-tokens merged),
    and with tokenizer.ggml.add_bos_token on: Foundry's tokenizer from the keys encodes as
    llama-tokenize does."""
    if not os.path.exists(os.path.join(LLAMA, "llama-tokenize")):
        pytest.skip("llama-tokenize is not in " + LLAMA)
    text = tokenizer_text(str(tmp_path))
    gguf = tokenizer_gguf(str(tmp_path), "llama3")
    drop = ("tokenizer.huggingface.json",)
    qwen2 = without_keys(gguf, str(tmp_path / "qwen2.gguf"), drop, {"tokenizer.ggml.pre": "qwen2"})
    want = llama_tokenize(qwen2, text, False)
    assert want != llama_tokenize(gguf, text, False)  # the digits split differently
    assert foundry_tokenize(qwen2, text, False) == want
    with_bos = without_keys(gguf, str(tmp_path / "bos.gguf"), drop, {"tokenizer.ggml.add_bos_token": True})
    want = llama_tokenize(with_bos, text, True)
    assert want[0] == 128000 and foundry_tokenize(with_bos, text, True) == want
