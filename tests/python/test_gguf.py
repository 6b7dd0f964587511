"""GGUF read/write. Files Foundry writes are parsed by Hugging Face's GGUF reader (@huggingface/gguf,
from npm, the parser the Hub uses) and must give the same metadata and tensor infos; Foundry reads
them back exactly; malformed files (every truncation, bad magic/version, absurd counts, unknown
types, misaligned or out-of-file offsets, overlaps, nested arrays) raise clear errors.
"""
import json
import os
import shutil
import re
import struct
import subprocess
import sys

import numpy as np
import pytest

import foundry
from shared_data import SHARED_DATA, needs_shared

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NPM_DIR = os.path.abspath(os.environ.get("FOUNDRY_NPM_DIR", os.path.join(ROOT, "build", "npm-gguf")))

METADATA = [
    ("general.architecture", "string", "llama"),
    ("general.name", "string", "tiny ünïcode"),
    ("llama.block_count", "uint32", 2),
    ("llama.context_length", "uint64", 2 ** 40 + 3),
    ("test.i8", "int8", -5), ("test.u8", "uint8", 250), ("test.i16", "int16", -30000),
    ("test.u16", "uint16", 65000), ("test.i32", "int32", -2 ** 31), ("test.i64", "int64", -2 ** 62),
    ("test.f32", "float32", 0.25), ("test.f64", "float64", 1e300), ("test.flag", "bool", True),
    ("tokenizer.ggml.tokens", "array:string", ["<s>", "a", "b c"]),
    ("tokenizer.ggml.scores", "array:float32", [0.0, -1.5, 2.25]),
    ("tokenizer.ggml.token_type", "array:int32", [3, 1, 1]),
    ("test.empty", "array:uint8", []),
]


def tensors(rng):
    w = rng.standard_normal((3, 64)).astype(np.float32)
    return [
        ("f32", [3, 64], 0, w.tobytes()),
        ("f16", [2, 5], 1, rng.standard_normal((2, 5)).astype(np.float16).tobytes()),
        ("q8", [3, 64], 8, foundry.quant.quantize(w, "q8_0")),
        ("q4", [3, 64], 2, foundry.quant.quantize(w, "q4_0")),
        ("vec", [7], 0, np.arange(7, dtype=np.float32).tobytes()),
    ], w


@pytest.mark.parametrize("alignment", [32, 64])
def test_round_trip(tmp_path, alignment):
    rng = np.random.default_rng(0)
    ts, w = tensors(rng)
    path = str(tmp_path / "t.gguf")
    foundry.gguf.write(path, METADATA, ts, alignment)
    info = foundry.gguf.read(path)
    assert info["version"] == 3 and info["alignment"] == alignment
    assert info["data_offset"] % alignment == 0
    for key, typ, value in METADATA:
        assert info["types"][key] == typ
        got = info["metadata"][key]
        assert got == (pytest.approx(value) if typ == "array:float32" else value), key
    assert [t["name"] for t in info["tensors"]] == [t[0] for t in ts]
    for t, (name, shape, typ, data) in zip(info["tensors"], ts):
        assert t["shape"] == shape and t["dims"] == shape[::-1] and t["type"] == typ and t["nbytes"] == len(data)
        assert t["offset"] % alignment == 0
    assert np.array_equal(foundry.gguf.tensor(path, "f32").numpy(), w)
    assert np.array_equal(foundry.gguf.tensor(path, "q8").numpy(), foundry.quant.dequantize(ts[2][3], "q8_0", 64))
    assert np.array_equal(foundry.gguf.tensor(path, "q4").numpy(), foundry.quant.dequantize(ts[3][3], "q4_0", 64))
    assert foundry.gguf.tensor(path, "f16").numpy().tobytes() == ts[1][3]


def npm_reader():
    if os.path.exists(os.path.join(NPM_DIR, "node_modules", "@huggingface", "gguf")):
        return NPM_DIR
    if not shutil.which("npm"):
        pytest.skip("npm not available")
    os.makedirs(NPM_DIR, exist_ok=True)
    p = subprocess.run(["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", NPM_DIR,
                        "@huggingface/gguf@0.4.6"], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        pytest.skip("could not install @huggingface/gguf: " + p.stderr[-300:])
    return NPM_DIR


def read_with_huggingface(path):
    d = npm_reader()
    script = os.path.join(d, "read_gguf.mjs")
    with open(script, "w") as f:
        f.write("""import { gguf } from "@huggingface/gguf";
const { metadata, tensorInfos } = await gguf(process.argv[2], { allowLocalFile: true });
const plain = (v) => typeof v === "bigint" ? v.toString() : v;
console.log(JSON.stringify({ metadata, tensorInfos }, (k, v) => plain(v)));
""")
    p = subprocess.run(["node", script, path], capture_output=True, text=True, cwd=d, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_huggingface_gguf_reader_agrees(tmp_path):
    ts, _ = tensors(np.random.default_rng(1))
    path = str(tmp_path / "t.gguf")
    foundry.gguf.write(path, METADATA, ts, 32)
    ref = read_with_huggingface(path)
    md = ref["metadata"]
    assert md["version"] == 3 and int(md["tensor_count"]) == len(ts) and int(md["kv_count"]) == len(METADATA)
    for key, typ, value in METADATA:
        got = md[key]
        if typ in ("uint64", "int64"):
            got = int(got)
        if typ == "array:float32":
            assert got == pytest.approx(value)
        else:
            assert got == value, key
    infos = ref["tensorInfos"]
    assert [t["name"] for t in infos] == [t[0] for t in ts]
    ours = foundry.gguf.read(path)["tensors"]
    for r, o in zip(infos, ours):
        assert [int(x) for x in r["shape"]] == o["dims"] and r["dtype"] == o["type"] and int(r["offset"]) == o["offset"]


def valid_file(tmp_path):
    ts, _ = tensors(np.random.default_rng(2))
    path = str(tmp_path / "v.gguf")
    foundry.gguf.write(path, METADATA[:4], ts[:2], 32)
    return path, open(path, "rb").read()


def test_every_truncation_is_an_error(tmp_path):
    path, data = valid_file(tmp_path)
    bad = str(tmp_path / "bad.gguf")
    for n in range(0, len(data) - 1, 3):
        open(bad, "wb").write(data[:n])
        with pytest.raises((ValueError, OSError)):
            foundry.gguf.read(bad)


def header(n_tensors, n_kv, version=3):
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def gstr(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


@pytest.mark.parametrize("data, message", [
    (b"GGML" + b"\0" * 40, "bad magic"),
    (header(0, 0, version=1), "version 1 is not supported"),
    (header(0, 0, version=4), "version 4"),
    (header(2 ** 60, 0), "absurd counts"),
    (header(0, 1) + gstr("k") + struct.pack("<I", 13), "unknown value type 13"),
    (header(0, 1) + gstr("k") + struct.pack("<IIQ", 9, 9, 1), "nested arrays"),
    (header(0, 1) + gstr("k") + struct.pack("<IIQ", 9, 13, 1), "unknown array element type 13"),
    (header(0, 1) + gstr("k") + struct.pack("<IIQ", 9, 4, 2 ** 50), "exceeds the file"),
    (header(0, 1) + gstr("k") + struct.pack("<IB", 7, 2), "neither 0 nor 1"),
    (header(0, 2) + gstr("k") + struct.pack("<II", 4, 1) + gstr("k") + struct.pack("<II", 4, 2), "duplicate metadata"),
    (header(0, 1) + gstr("general.alignment") + struct.pack("<II", 4, 24), "not a power of two"),
    (header(1, 0) + gstr("t") + struct.pack("<IQIQ", 1, 32, 99, 0), "unsupported ggml tensor type 99"),
    (header(1, 0) + gstr("t") + struct.pack("<IQIQ", 5, 1, 0, 0), "5 dimensions"),
    (header(1, 0) + gstr("t") + struct.pack("<IQIQ", 1, 33, 8, 0), "not whole Q8_0 blocks"),
    (header(1, 0) + gstr("t") + struct.pack("<IQIQ", 1, 8, 0, 4) + b"\0" * 64, "not a multiple of the alignment"),
    (header(1, 0) + gstr("t") + struct.pack("<IQIQ", 1, 1000, 0, 0) + b"\0" * 64, "outside the"),
    (header(2, 0) + gstr("a") + struct.pack("<IQIQ", 1, 8, 0, 0) + gstr("b") + struct.pack("<IQIQ", 1, 8, 0, 0)
     + b"\0" * 96, "overlap"),
    (header(2, 0) + gstr("a") + struct.pack("<IQIQ", 1, 8, 0, 0) + gstr("a") + struct.pack("<IQIQ", 1, 8, 0, 32)
     + b"\0" * 128, "duplicate tensor name"),
])
def test_malformed_files_give_clear_errors(tmp_path, data, message):
    path = str(tmp_path / "m.gguf")
    open(path, "wb").write(data)
    with pytest.raises(ValueError, match=message):
        foundry.gguf.read(path)


# ---- Llama GGUF: convert an HF folder, load it back --------------------------------------------

def llama_permute(w, n_head):
    """llama.cpp convert_hf_to_gguf.py's LlamaModel.permute (rotate-half rows -> interleaved)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_folder(tmp_path, seed, **overrides):
    """A random Llama folder written as Hugging Face does (test_pretrained's case): (config, weights,
    the reference forward, the folder); skips where the foundry CLI is not built."""
    import torch
    import test_pretrained as tp
    if not os.path.exists(tp.FOUNDRY):
        pytest.skip("foundry CLI not built at " + tp.FOUNDRY)
    cfg, make_weights, forward = tp.CASES["llama"]
    cfg = dict(cfg, **overrides)
    w = make_weights(cfg, torch.Generator().manual_seed(seed))
    folder = str(tmp_path / "hf")
    tp.write_folder(folder, cfg, w)
    return cfg, w, forward, folder


def test_convert_llama_folder_and_load_it(tmp_path):
    import torch
    import test_pretrained as tp
    cfg, w, forward, folder = llama_folder(tmp_path, 71, num_key_value_heads=2, hidden_size=64, tie_word_embeddings=False)
    ids = [[5, 17, 33, 8, 21, 2, 40]]
    with torch.no_grad():
        ref = forward(cfg, w, torch.tensor(ids), torch.ones(1, 7, dtype=torch.long)).numpy()
    results = {}
    # A GGUF over the folder's own weights destroyed the source.
    source = open(os.path.join(folder, "model.safetensors"), "rb").read()
    p = subprocess.run([tp.FOUNDRY, "convert", "--model", folder, "--to", os.path.join(folder, "model.safetensors")],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "the model folder's own model.safetensors" in p.stderr, p.stderr
    assert open(os.path.join(folder, "model.safetensors"), "rb").read() == source
    mib = {}
    for typ in ("f32", "f16", "q8_0", "q4_0"):
        out = str(tmp_path / f"m-{typ}.gguf")
        tp.run("convert", "--model", folder, "--to", out, "--type", typ)
        # info names the formats the weights are held in and their bytes (it said float32 for all).
        info_text = tp.run("info", "--model", out).stdout
        mib[typ] = float(info_text.split("weights ")[1].split(" MiB")[0])
        if typ in ("q8_0", "q4_0"):
            held = {line.split(":")[0].strip(): int(line.split(":")[1]) for line in info_text.splitlines()
                    if line.startswith("  ")}
            assert held.get(typ, 0) > 0 and held.get("float32", 0) < held[typ], info_text
            assert mib[typ] < mib["f32"] / 2, (mib, info_text)
        info = foundry.gguf.read(out)
        md = info["metadata"]
        assert md["general.architecture"] == "llama" and md["llama.block_count"] == 2
        assert md["llama.attention.head_count"] == 4 and md["llama.attention.head_count_kv"] == 2
        assert md["llama.embedding_length"] == 64 and md["llama.feed_forward_length"] == cfg["intermediate_size"]
        names = {t["name"]: t for t in info["tensors"]}
        assert {"token_embd.weight", "output_norm.weight", "output.weight", "blk.1.attn_q.weight",
                "blk.1.ffn_down.weight"} <= set(names)
        assert names["blk.0.attn_norm.weight"]["type"] == 0  # norms stay float32
        assert names["blk.0.attn_q.weight"]["type"] == {"f32": 0, "f16": 1, "q8_0": 8, "q4_0": 2}[typ]
        if typ == "f32":
            # Q and K rows in llama.cpp's layout: the converter's permute, byte for byte.
            for hf_name, gname, heads in (("model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight", 4),
                                          ("model.layers.1.self_attn.k_proj.weight", "blk.1.attn_k.weight", 2)):
                want = llama_permute(w[hf_name].numpy(), heads)
                assert np.array_equal(foundry.gguf.tensor(out, gname).numpy(), want)
        model = foundry.models.from_pretrained(out)
        got = model(foundry.tensor(ids)).numpy()
        results[typ] = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    assert results["f32"] < 1e-6 and results["f16"] < 3e-3
    # Random weights amplify rounding ~6x through these two layers: a few % for q8_0; q4_0's step is
    # 127/8 ~ 16x coarser (its error is then large on such a model, not on trained ones).
    assert results["q8_0"] < 0.06 and 5 < results["q4_0"] / results["q8_0"] < 40, results
    # The GGUF model generates like the folder (float32 file: identical greedy tokens).
    p1 = tp.run("generate", "--model", folder, "--input-ids", "5,17,33", "--max-new-tokens", "8", "--temperature", "0",
                "--ignore-eos", "--print-ids")
    p2 = tp.run("generate", "--model", str(tmp_path / "m-f32.gguf"), "--input-ids", "5,17,33", "--max-new-tokens", "8",
                "--temperature", "0", "--ignore-eos", "--print-ids")
    assert p1.stdout.strip().splitlines()[-1] == p2.stdout.strip().splitlines()[-1]
    # Hugging Face's reader sees llama.cpp's names, types and hyper-parameters in the converted file.
    ref = read_with_huggingface(str(tmp_path / "m-q8_0.gguf"))
    assert ref["metadata"]["general.architecture"] == "llama"
    assert ref["metadata"]["llama.attention.head_count_kv"] == 2
    hf_types = {t["name"]: t["dtype"] for t in ref["tensorInfos"]}
    assert hf_types["blk.0.ffn_up.weight"] == 8 and hf_types["output_norm.weight"] == 0
    # Unsupported architectures are refused by name.
    bad = str(tmp_path / "x.gguf")
    foundry.gguf.write(bad, [("general.architecture", "string", "mamba")], [])
    with pytest.raises(Exception, match="architecture 'mamba' is not supported"):
        foundry.models.from_pretrained(bad)


def test_random_corruptions_never_crash(tmp_path):
    """A deterministic mutation fuzzer: flipped bytes, overwritten counts/lengths, truncations.
    Every read either succeeds (and its tensors are then readable) or raises ValueError/OSError."""
    _, data = valid_file(tmp_path)
    rng = np.random.default_rng(5)
    path = str(tmp_path / "fuzz.gguf")
    outcomes = {"ok": 0, "error": 0}
    for i in range(1500):
        b = bytearray(data)
        for _ in range(int(rng.integers(1, 4))):
            at = int(rng.integers(0, len(b)))
            kind = rng.integers(0, 3)
            if kind == 0:
                b[at] = int(rng.integers(0, 256))
            elif kind == 1 and at + 8 <= len(b):
                b[at:at + 8] = struct.pack("<Q", [0, 1, 2 ** 31, 2 ** 63, 2 ** 64 - 1][int(rng.integers(0, 5))])
            else:
                del b[at:]
                break
        open(path, "wb").write(bytes(b))
        try:
            info = foundry.gguf.read(path)
            for t in info["tensors"]:
                try:
                    foundry.gguf.tensor(path, t["name"])
                except NotImplementedError:
                    pass
            outcomes["ok"] += 1
        except (ValueError, OSError):
            outcomes["error"] += 1
    assert outcomes["error"] > 100 and outcomes["ok"] > 10, outcomes


DATA = os.path.join(SHARED_DATA, "tokenizers")


@needs_shared("tokenizers", "gpt2", "encoder.json")
def test_converted_gguf_carries_the_tokenizer(tmp_path):
    import torch
    import test_pretrained as tp
    if not os.path.exists(tp.FOUNDRY):
        pytest.skip("foundry CLI not built at " + tp.FOUNDRY)
    cfg, make_weights, _ = tp.CASES["llama"]
    cfg = dict(cfg, vocab_size=50257, hidden_size=32, num_attention_heads=2, num_key_value_heads=2,
               intermediate_size=32, eos_token_id=50256)
    folder = tmp_path / "hf"
    tp.write_folder(str(folder), cfg, make_weights(cfg, torch.Generator().manual_seed(91)))
    os.symlink(os.path.join(DATA, "gpt2", "encoder.json"), folder / "vocab.json")
    os.symlink(os.path.join(DATA, "gpt2", "vocab.bpe"), folder / "merges.txt")
    out = str(tmp_path / "m.gguf")
    tp.run("convert", "--model", str(folder), "--to", out, "--type", "f32")
    md = foundry.gguf.read(out)["metadata"]
    assert md["tokenizer.ggml.model"] == "gpt2" and len(md["tokenizer.ggml.tokens"]) == 50257
    assert md["tokenizer.ggml.tokens"][15496] == "Hello" and md["tokenizer.ggml.merges"][0] == "Ġ t"
    assert len(md["tokenizer.ggml.merges"]) == 50000 and md["tokenizer.ggml.token_type"][0] == 1
    args = ["--prompt", "Hello, world! Tokenizers in GGUF.", "--max-new-tokens", "6", "--temperature", "0",
            "--ignore-eos", "--print-ids"]
    want = tp.run("generate", "--model", str(folder), *args).stdout.strip().splitlines()
    got = tp.run("generate", "--model", out, *args).stdout.strip().splitlines()
    assert got == want
    # Without tokenizer.huggingface.json, llama.cpp's gpt2 keys alone rebuild the same tokenizer.
    info = foundry.gguf.read(out)
    keep = [(k, info["types"][k], v) for k, v in info["metadata"].items() if k != "tokenizer.huggingface.json"]
    tensors = [(t["name"], t["shape"], 0, foundry.gguf.tensor(out, t["name"]).numpy().tobytes())
               for t in info["tensors"]]
    slim = str(tmp_path / "slim.gguf")
    foundry.gguf.write(slim, keep, tensors)
    assert "tokenizer.huggingface.json" not in foundry.gguf.read(slim)["metadata"]
    assert tp.run("generate", "--model", slim, *args).stdout.strip().splitlines() == want


def test_convert_k_quants_with_llama_cpp_fallbacks(tmp_path):
    import torch
    import test_pretrained as tp
    if not os.path.exists(tp.FOUNDRY):
        pytest.skip("foundry CLI not built at " + tp.FOUNDRY)
    cfg, make_weights, forward = tp.CASES["llama"]
    # hidden 256: whole q*_K super-blocks; intermediate 96: ffn_down rows are not (llama.cpp's fallback
    # types: q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0).
    cfg = dict(cfg, num_key_value_heads=2, hidden_size=256, intermediate_size=96, tie_word_embeddings=False)
    w = make_weights(cfg, torch.Generator().manual_seed(5))
    folder = str(tmp_path / "hf")
    tp.write_folder(folder, cfg, w)
    ids = [[5, 17, 33, 8, 21, 2, 40]]
    with torch.no_grad():
        ref = forward(cfg, w, torch.tensor(ids), torch.ones(1, 7, dtype=torch.long)).numpy()
    errors = {}
    for typ, ggml_type, fallback, file_type in (("q4_K", 12, 6, 14), ("q5_K", 13, 7, 16), ("q6_K", 14, 8, 18)):
        out = str(tmp_path / f"m-{typ}.gguf")
        tp.run("convert", "--model", folder, "--to", out, "--type", typ)
        info = foundry.gguf.read(out)
        assert info["metadata"]["general.file_type"] == file_type
        types = {t["name"]: t["type"] for t in info["tensors"]}
        assert types["blk.0.ffn_up.weight"] == ggml_type and types["blk.0.ffn_down.weight"] == fallback
        up = w["model.layers.1.mlp.up_proj.weight"].numpy()
        assert foundry.gguf.tensor(out, "blk.1.ffn_up.weight").numpy().tobytes() == \
            foundry.quant.dequantize(foundry.quant.quantize(up, typ), typ, up.shape[1]).tobytes()
        got = foundry.models.from_pretrained(out)(foundry.tensor(ids)).numpy()
        errors[typ] = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    # Random weights amplify rounding through the layers; the finer the format, the closer. Each
    # is bounded by its own step: the worst relative error of the formats the file holds (the
    # K-quant, and its fallback for ffn_down) on these weights, times a margin for what two random
    # layers at hidden 256 amplify (measured up to ~9.3x).
    fallback_name = {"q4_K": "q5_0", "q5_K": "q5_1", "q6_K": "q8_0"}
    for typ, err in errors.items():
        bound = max(tp.weight_quantization_error(w, typ, 256), tp.weight_quantization_error(w, fallback_name[typ]))
        assert err < 16 * bound, (typ, err, bound)
    assert errors["q6_K"] < errors["q5_K"] < errors["q4_K"], errors


@pytest.mark.parametrize("typ", ["q8_0", "q4_K", "f16", "bf16"])
def test_gguf_weights_stay_quantized_and_match_the_folder_quantized_in_memory(tmp_path, typ):
    """A quantized GGUF file computes with its own bytes; the folder quantized at load time holds
    the same rows (quantization is per row, the Q/K permutation moves whole rows), so the logits
    are identical, through the decode kernels (7 tokens) and the dequantize + GEMM path (40). The
    file's token embedding is quantized too (looked up dequantized), so the folder compared gets
    that dequantized table as its embedding. 16-bit files too: their matrices stay 16-bit (products
    read them in place, as --quantize f16 / bf16) and the embedding table is float32 like the rest
    of the computation."""
    import torch
    import test_pretrained as tp
    if not os.path.exists(tp.FOUNDRY):
        pytest.skip("foundry CLI not built at " + tp.FOUNDRY)
    cfg, make_weights, _ = tp.CASES["llama"]
    cfg = dict(cfg, num_key_value_heads=2, hidden_size=256, intermediate_size=512, tie_word_embeddings=False)
    w = make_weights(cfg, torch.Generator().manual_seed(9))
    folder = str(tmp_path / "hf")
    tp.write_folder(folder, cfg, w)
    out = str(tmp_path / "m.gguf")
    tp.run("convert", "--model", folder, "--to", out, "--type", typ)
    w["model.embed_tokens.weight"] = torch.from_numpy(foundry.gguf.tensor(out, "token_embd.weight").numpy().copy())
    folder = str(tmp_path / "hf-embd")
    tp.write_folder(folder, cfg, w)
    from_file = foundry.models.from_pretrained(out)  # matrices copied out of the mapping
    os.environ["FOUNDRY_MMAP_WEIGHTS"] = "1"
    try:
        over_mapping = foundry.models.from_pretrained(out)  # matrices read in place
    finally:
        del os.environ["FOUNDRY_MMAP_WEIGHTS"]
    in_memory = foundry.models.from_pretrained(folder, quantize=typ)
    dense = foundry.models.from_pretrained(folder)
    for n in (7, 40):
        ids = foundry.tensor([[int(v) for v in np.random.default_rng(n).integers(0, cfg["vocab_size"], n)]])
        a, b, d, mapped = (m(ids).numpy() for m in (from_file, in_memory, dense, over_mapping))
        assert np.array_equal(a, b), (n, np.abs(a - b).max())
        assert np.array_equal(a, mapped), (n, np.abs(a - mapped).max())
        # quantized, but the same model: within a margin of the format's own weight error (random
        # weights at hidden 256 amplify it ~9x through the layers)
        if "16" in typ:  # 16-bit products round the activations too (and prefill runs a bf16 GEMM)
            bound = 3e-3
        else:
            bound = tp.weight_quantization_error(w, typ, 256 if "K" in typ else 32)
        assert np.linalg.norm(a - d) / np.linalg.norm(d) < 16 * bound
        assert a.dtype == np.float32
    gen = [tp.run("generate", "--model", m, "--input-ids", "5,17,33", "--max-new-tokens", "6", "--temperature", "0",
                  "--ignore-eos", "--print-ids", *extra).stdout.strip().splitlines()[-1]
           for m, extra in ((out, ()), (folder, ("--quantize", typ)))]
    assert gen[0] == gen[1]


@needs_shared("tokenizers", "sentencepiece", "llama2.tokenizer.model")
def test_sentencepiece_tokenizer_goes_into_llama_keys(tmp_path):
    """A folder with a SentencePiece tokenizer.model (Llama 2's) converts to llama.cpp's "llama"
    tokenizer keys (pieces, scores, token types); the tokenizer rebuilt from those keys alone
    encodes prompts like the folder's (unicode through byte fallback, runs of spaces, tabs)."""
    import torch
    import test_pretrained as tp
    if not os.path.exists(tp.FOUNDRY):
        pytest.skip("foundry CLI not built at " + tp.FOUNDRY)
    cfg, make_weights, _ = tp.CASES["llama"]
    cfg = dict(cfg, vocab_size=32000, hidden_size=32, num_attention_heads=2, num_key_value_heads=2,
               intermediate_size=32, bos_token_id=1, eos_token_id=2)
    folder = tmp_path / "hf"
    tp.write_folder(str(folder), cfg, make_weights(cfg, torch.Generator().manual_seed(93)))
    os.symlink(os.path.join(DATA, "sentencepiece", "llama2.tokenizer.model"), folder / "tokenizer.model")
    out = str(tmp_path / "m.gguf")
    tp.run("convert", "--model", str(folder), "--to", out, "--type", "f32")
    md = foundry.gguf.read(out)["metadata"]
    assert md["tokenizer.ggml.model"] == "llama" and len(md["tokenizer.ggml.tokens"]) == 32000
    assert md["tokenizer.ggml.tokens"][1] == "<s>" and md["tokenizer.ggml.token_type"][1] == 3
    assert md["tokenizer.ggml.tokens"][259] == "▁▁" and md["tokenizer.ggml.token_type"][3] == 6  # <0x00>
    assert len(md["tokenizer.ggml.scores"]) == 32000 and md["tokenizer.ggml.add_space_prefix"] is True
    assert "tokenizer.huggingface.json" not in md
    for prompt in ("Hello, world! Tokenizers in GGUF.", "Ünïcödé 😀 and\ttabs,  two  spaces\nnew line"):
        args = ["--prompt", prompt, "--max-new-tokens", "4", "--temperature", "0", "--ignore-eos", "--print-ids"]
        runs = [tp.run("generate", "--model", m, *args) for m in (str(folder), out)]
        counts = [re.search(r"prefill: (\d+) tokens", r.stdout + r.stderr).group(1) for r in runs]
        assert counts[0] == counts[1] and runs[0].stdout == runs[1].stdout  # prompt length, then the ids


@pytest.mark.parametrize("tied", [False, True])
def test_gguf_token_embedding_stays_quantized(tmp_path, tied):
    """Loading copies a GGUF file's matrices into memory of Foundry's allocator; the token
    embedding stays in the file's format too, its rows dequantized as they are looked up (no
    dense float32 table, 32.8 MB here against its 8.7 MB of q8_0), whether or not the output head
    is tied to it. The rows looked up are the file's rows as its reader dequantizes them."""
    import torch
    import test_pretrained as tp
    if not os.path.exists(tp.FOUNDRY):
        pytest.skip("foundry CLI not built at " + tp.FOUNDRY)
    cfg, make_weights, _ = tp.CASES["llama"]
    cfg = dict(cfg, vocab_size=32000, hidden_size=256, intermediate_size=256, num_hidden_layers=1,
               num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=tied)
    w = make_weights(cfg, torch.Generator().manual_seed(11))
    if tied:
        w.pop("lm_head.weight", None)
    folder = str(tmp_path / "hf")
    tp.write_folder(folder, cfg, w)
    out = str(tmp_path / "m.gguf")
    tp.run("convert", "--model", folder, "--to", out, "--type", "q8_0")
    embedding_q8 = 32000 * 256 // 32 * 34
    dense_embedding = 32000 * 256 * 4
    before = foundry.memory_stats()["allocated_bytes.all.current"]
    model = foundry.models.from_pretrained(out)
    held = foundry.memory_stats()["allocated_bytes.all.current"] - before
    # the embedding's, the layer's and (untied) the head's q8_0 bytes, in chunks that grow to 32 MB
    # (21.0 MB tied, 31.5 untied): less than the dense table alone, which the model held before
    quantized = embedding_q8 + (4 * 256 * 256 + 3 * 256 * 256) // 32 * 34 + (0 if tied else embedding_q8)
    assert quantized <= held < dense_embedding, held
    # The looked-up rows are the file's: the folder given the reader's dequantized table computes
    # the same logits (the head quantized to the same q8_0 bytes at load).
    w["model.embed_tokens.weight"] = torch.from_numpy(foundry.gguf.tensor(out, "token_embd.weight").numpy().copy())
    if tied:
        w.pop("lm_head.weight", None)
    tp.write_folder(str(tmp_path / "hf-embd"), cfg, w)
    same = foundry.models.from_pretrained(str(tmp_path / "hf-embd"), quantize="q8_0")
    ids = foundry.tensor([[1, 2, 3, 31999, 0]])
    a, b = model(ids).numpy(), same(ids).numpy()
    assert a.shape == (1, 5, 32000) and np.array_equal(a, b), np.abs(a - b).max()
    with pytest.raises(IndexError, match="index 32000 is out of range"):
        model(foundry.tensor([[32000]]))


def test_gguf_model_state_dict_holds_the_values_it_computes_with(tmp_path):
    """A GGUF model's matrices are the file's quantized bytes: state_dict() gives them dequantized
    (the reader's values; Q and K rows back in Hugging Face's order), not the placeholders the
    parameters are, and load_state_dict refuses to write one (it would change nothing computed)."""
    import test_pretrained as tp
    cfg, w, _, folder = llama_folder(tmp_path, 5, num_key_value_heads=2, hidden_size=64, tie_word_embeddings=False)
    out = str(tmp_path / "m.gguf")
    tp.run("convert", "--model", folder, "--to", out, "--type", "q8_0")
    model = foundry.models.from_pretrained(out)
    sd = {k: v.numpy() for k, v in model.state_dict().items()}
    read = lambda name: foundry.gguf.tensor(out, name).numpy()  # noqa: E731
    assert np.array_equal(sd["model.embed_tokens.weight"], read("token_embd.weight"))
    assert np.array_equal(sd["model.layers.1.mlp.down_proj.weight"], read("blk.1.ffn_down.weight"))
    assert np.array_equal(sd["lm_head.weight"], read("output.weight"))
    assert np.array_equal(llama_permute(sd["model.layers.0.self_attn.q_proj.weight"], 4), read("blk.0.attn_q.weight"))
    assert np.array_equal(llama_permute(sd["model.layers.0.self_attn.k_proj.weight"], 2), read("blk.0.attn_k.weight"))
    assert np.array_equal(sd["model.norm.weight"], read("output_norm.weight"))
    # q8_0 of these weights: close to the folder's floats, not zeros
    q = w["model.layers.0.self_attn.q_proj.weight"].numpy()
    assert 0 < np.abs(sd["model.layers.0.self_attn.q_proj.weight"] - q).max() < 0.01 * np.abs(q).max()
    with pytest.raises(ValueError, match="'model.layers.0.self_attn.q_proj.weight' is held quantized"):
        model.load_state_dict({"model.layers.0.self_attn.q_proj.weight": foundry.tensor(q)}, strict=False)


def test_gguf_byte_level_tokenizer_by_pre_tokenizer_key(tmp_path):
    """A GGUF's "gpt2" tokenizer keys alone (as llama.cpp's converter writes them): the split follows
    tokenizer.ggml.pre (GPT-2's regex keeps " 123456" one pre-token, Llama 3's cuts digits in threes,
    Qwen 2's one by one), add_bos_token puts BOS in front, and a split Foundry does not know is
    refused by name rather than guessed. (llama.cpp's own reading: test_llama_cpp_reference.py.)"""
    import test_pretrained as tp
    if not os.path.exists(tp.FOUNDRY):
        pytest.skip("foundry CLI not built at " + tp.FOUNDRY)
    # Byte-level pieces: "Ġ" is the space; the merges build "Ġ1", "12", "123", "1234", ... from digits.
    digits = [str(d) for d in range(10)]
    pieces = ["<s>", "Ġ"] + digits + ["Ġ1", "12", "123", "Ġ12", "Ġ123", "45", "456", "1234", "12345", "Ġ1234", "Ġ12345",
                                      "123456", "Ġ123456"]
    merges = ["Ġ 1", "1 2", "12 3", "Ġ1 2", "Ġ12 3", "Ġ123 4", "Ġ1234 5", "Ġ12345 6", "4 5", "45 6", "123 4", "1234 5",
              "12345 6"]
    texts = str(tmp_path / "t.jsonl")
    with open(texts, "w") as f:
        f.write(json.dumps(" 123456") + "\n")

    def tokens(pre, add_bos=None):
        md = [("general.architecture", "string", "llama"), ("tokenizer.ggml.model", "string", "gpt2"),
              ("tokenizer.ggml.tokens", "array:string", pieces), ("tokenizer.ggml.merges", "array:string", merges),
              ("tokenizer.ggml.token_type", "array:int32", [3] + [1] * (len(pieces) - 1)),
              ("tokenizer.ggml.bos_token_id", "uint32", 0)]
        if pre is not None:
            md.append(("tokenizer.ggml.pre", "string", pre))
        if add_bos is not None:
            md.append(("tokenizer.ggml.add_bos_token", "bool", add_bos))
        path = str(tmp_path / "tok.gguf")
        foundry.gguf.write(path, md, [])
        p = subprocess.run([tp.FOUNDRY, "tokenize", "--tokenizer", path, "--input", texts, "--add-special-tokens"],
                           capture_output=True, text=True)
        return json.loads(p.stdout)["tokens"] if p.returncode == 0 else p

    assert tokens("gpt-2") == tokens(None) == ["Ġ123456"]
    assert tokens("llama-bpe") == ["<s>", "Ġ", "123", "456"]  # Llama 3's default: BOS in front
    assert tokens("llama-bpe", add_bos=False) == ["Ġ", "123", "456"]
    assert tokens("qwen2") == ["Ġ", "1", "2", "3", "4", "5", "6"]
    assert tokens("gpt-2", add_bos=True) == ["<s>", "Ġ123456"]
    refused = tokens("falcon")
    assert refused.returncode == 1 and "pre-tokenizer 'falcon' is not supported" in refused.stderr


def test_llama3_rope_scaling_travels_as_llama_cpp_frequency_factors(tmp_path):
    """A folder with Llama 3's rope_scaling converts to llama.cpp's rope_freqs.weight (one factor per
    rotary frequency, as its converter computes them), and a GGUF with that tensor computes the
    PyTorch reference's logits at positions where the scaled frequencies matter; a rope_freqs.weight
    of the wrong length or with a non-positive factor is refused."""
    import torch
    import test_pretrained as tp
    if not os.path.exists(tp.FOUNDRY):
        pytest.skip("foundry CLI not built at " + tp.FOUNDRY)
    cfg, make_weights, forward = tp.CASES["llama3_rope"]
    # original_max_position_embeddings 64: low / high cuts at wavelengths 64 and 16, so of head_dim
    # 16's 8 frequencies (wavelengths 6.3, 20, 63, 199, ...) one is kept, two smoothed, five scaled.
    cfg = dict(cfg, rope_scaling=dict(cfg["rope_scaling"], original_max_position_embeddings=64),
               rope_theta=10000.0, max_position_embeddings=64, tie_word_embeddings=False)
    w = make_weights(cfg, torch.Generator().manual_seed(3))
    folder = str(tmp_path / "hf")
    tp.write_folder(folder, cfg, w)
    out = str(tmp_path / "m.gguf")
    tp.run("convert", "--model", folder, "--to", out, "--type", "f32")
    factors = foundry.gguf.tensor(out, "rope_freqs.weight").numpy()
    head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    freqs = 1.0 / cfg["rope_theta"] ** (np.arange(0, head_dim, 2) / head_dim)
    wavelen = 2 * np.pi / freqs
    smooth = (64 / wavelen - 1.0) / (4.0 - 1.0)
    want = np.where(wavelen < 16, 1.0, np.where(wavelen > 64, 8.0, 1 / ((1 - smooth) / 8.0 + smooth)))
    assert factors.shape == (head_dim // 2,) and np.allclose(factors, want, rtol=1e-6)
    assert (factors == 1).any() and (factors == 8).any() and ((factors > 1) & (factors < 8)).any()
    ids = [[(7 * i + 3) % cfg["vocab_size"] for i in range(40)]]
    with torch.no_grad():
        ref = forward(cfg, w, torch.tensor(ids), torch.ones(1, 40, dtype=torch.long)).numpy()
    got = foundry.models.from_pretrained(out)(foundry.tensor(ids)).numpy()
    assert np.abs(got - ref).max() < 1e-4
    # Without the factors the model is another one: the test can tell.
    info = foundry.gguf.read(out)
    md = [(k, info["types"][k], v) for k, v in info["metadata"].items()]
    tensors = {t["name"]: (t["shape"], foundry.gguf.tensor(out, t["name"]).numpy()) for t in info["tensors"]}

    def variant(name, rope):
        items = [(n, s, 0, a.tobytes()) for n, (s, a) in tensors.items() if n != "rope_freqs.weight"]
        if rope is not None:
            items.append(("rope_freqs.weight", [len(rope)], 0, np.asarray(rope, np.float32).tobytes()))
        path = str(tmp_path / name)
        foundry.gguf.write(path, md, items)
        return path

    plain = foundry.models.from_pretrained(variant("plain.gguf", None))(foundry.tensor(ids)).numpy()
    assert np.abs(plain - ref).max() > 1e-2
    with pytest.raises(ValueError, match="rope_freqs.weight has shape"):
        foundry.models.from_pretrained(variant("short.gguf", factors[:-1]))
    with pytest.raises(ValueError, match="not a positive factor"):
        foundry.models.from_pretrained(variant("zero.gguf", np.where(np.arange(len(factors)) == 2, 0, factors)))


@pytest.mark.parametrize("key,value,message", [
    ("llama.rope.dimension_count", 8, "rotary embedding over 8 of each head's 16 dimensions"),
    ("llama.attention.key_length", 32, "heads of 32 dimensions"),
    ("llama.expert_count", 8, "a mixture of experts in a llama GGUF"),
])
def test_llama_gguf_features_foundry_does_not_compute_are_refused(tmp_path, key, value, message):
    """Keys of llama.cpp's llama files that would change the computation (partial rotary, head sizes
    apart from embedding_length / head_count, experts) stop the load with their name; the same
    file without them loads."""
    import test_pretrained as tp
    cfg, w, _, folder = llama_folder(tmp_path, 5, hidden_size=64, tie_word_embeddings=False)
    out = str(tmp_path / "m.gguf")
    tp.run("convert", "--model", folder, "--to", out, "--type", "f32")
    info = foundry.gguf.read(out)
    md = [(k, info["types"][k], v) for k, v in info["metadata"].items() if k != key] + [(key, "uint32", value)]
    tensors = [(t["name"], t["shape"], 0, foundry.gguf.tensor(out, t["name"]).numpy().tobytes()) for t in info["tensors"]]
    bad = str(tmp_path / "bad.gguf")
    foundry.gguf.write(bad, md, tensors)
    foundry.models.from_pretrained(out)
    with pytest.raises(NotImplementedError, match=message):
        foundry.models.from_pretrained(bad)


@pytest.mark.parametrize("key,kind,value,message", [
    ("llama.block_count", "uint32", 0, r"llama.block_count \(0\).* must be positive"),
    ("llama.context_length", "uint32", 0, r"llama.context_length \(0\) must be positive"),
    ("llama.attention.layer_norm_rms_epsilon", "float32", float("nan"), r"layer_norm_rms_epsilon \(nan\) must be >= 0"),
    ("llama.rope.freq_base", "float32", -1.0, r"freq_base \(-1\)"),
    ("llama.vocab_size", "uint32", 1000, "llama.vocab_size is 1000 but token_embd.weight has"),
])
def test_llama_gguf_values_no_model_can_mean_are_refused(tmp_path, key, kind, value, message):
    """A 0-layer model ran, and NaN or negative constants gave NaN logits, with exit status 0."""
    import test_pretrained as tp
    cfg, w, _, folder = llama_folder(tmp_path, 5, hidden_size=64, tie_word_embeddings=False)
    out = str(tmp_path / "m.gguf")
    tp.run("convert", "--model", folder, "--to", out, "--type", "f32")
    info = foundry.gguf.read(out)
    md = [(k, info["types"][k], v) for k, v in info["metadata"].items() if k != key] + [(key, kind, value)]
    tensors = [(t["name"], t["shape"], 0, foundry.gguf.tensor(out, t["name"]).numpy().tobytes()) for t in info["tensors"]]
    bad = str(tmp_path / "bad.gguf")
    foundry.gguf.write(bad, md, tensors)
    with pytest.raises(ValueError, match=message):
        foundry.models.from_pretrained(bad)


@pytest.mark.parametrize("change,message", [
    (dict(rms_norm_eps=-1.0), "norm epsilon .* must be finite and >= 0, got -1"),
    (dict(rope_theta=0.0), "rope_theta must be finite and > 0, got 0"),
    (dict(rope_scaling={"type": "linear", "factor": 0.0}), "rope_scaling's factor must be finite and > 0"),
    (dict(max_position_embeddings=-5), "max_position_embeddings must be >= 0, got -5"),
])
def test_config_values_no_model_can_mean_are_refused(tmp_path, change, message):
    import json as json_module
    cfg, w, _, folder = llama_folder(tmp_path, 5, hidden_size=64, tie_word_embeddings=False)
    path = os.path.join(folder, "config.json")
    data = json_module.load(open(path))
    data.update(change)
    json_module.dump(data, open(path, "w"))
    with pytest.raises(ValueError, match=message):
        foundry.models.from_pretrained(folder)


def test_a_file_that_is_not_gguf_is_named_as_such(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"GGUX" + b"\0" * 60)
    with pytest.raises(OSError, match="neither a GGUF model .* nor a model folder"):
        foundry.models.from_pretrained(str(bad))


@pytest.mark.parametrize("typ", ["f32", "f16"])
def test_loading_a_gguf_hands_the_files_pages_back(tmp_path, typ):
    # Q and K rows are permuted back into a copy; the file's pages read to make it went on counting
    # in the process's RSS (57 MB of Llama-110M's float32 file) while every other matrix's were
    # handed back. Measured after loading the folder first, so the library's code pages are in.
    import test_pretrained as tp
    cfg, _, _, folder = llama_folder(tmp_path, 72, hidden_size=1024, intermediate_size=256)
    out = str(tmp_path / f"m-{typ}.gguf")
    tp.run("convert", "--model", folder, "--to", out, "--type", typ)
    qk_bytes = cfg["num_hidden_layers"] * 2 * 1024 * 1024 * (4 if typ == "f32" else 2)
    script = (
        "import sys, foundry\n"
        "def rss_file():\n"
        "    return next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('RssFile:'))\n"
        "foundry.models.from_pretrained(sys.argv[1]); before = rss_file()\n"
        "m = foundry.models.from_pretrained(sys.argv[2]); print(rss_file() - before)\n")
    p = subprocess.run([sys.executable, "-c", script, folder, out], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    grew = int(p.stdout.split()[-1])
    assert grew < qk_bytes // 2, (grew, qk_bytes)  # 1.4 MB here, Q and K 8.4 / 16.8 MB
