#!/usr/bin/python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/seeds/TARGET/) from real files: small model
folders, GGUF conversions and a training checkpoint made by the foundry CLI, arrays written by NumPy,
SentencePiece models trained by Google's sentencepiece, and slices of the tokenizer files in
../shared/data. Seeds stay small (a few KB) so libFuzzer mutates them quickly. Run once when a
format changes (needs a release build in build/ and Debian's python3-torch):
    /usr/bin/python3 tests/fuzz/make_seeds.py
"""
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "build", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import test_pretrained as tp  # noqa: E402  (tiny HF configs and weights, the safetensors writer)

SEEDS = os.path.join(ROOT, "tests", "fuzz", "seeds")
SHARED = os.path.join(ROOT, "..", "shared", "data", "tokenizers")
SEP = b"\n--foundry-fuzz-part--\n"  # tests/fuzz/fuzz_common.h kPartSeparator


def put(target, name, data):
    os.makedirs(os.path.join(SEEDS, target), exist_ok=True)
    with open(os.path.join(SEEDS, target, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def read(path):
    with open(path, "rb") as f:
        return f.read()


def model_folders(tmp):
    import torch
    small = {"llama": dict(tp.LLAMA, vocab_size=40, hidden_size=16, intermediate_size=24, num_hidden_layers=1,
                           num_attention_heads=2, num_key_value_heads=1),
             "gpt2": dict(tp.GPT2, vocab_size=40, n_embd=16, n_layer=1, n_head=2)}
    for name, cfg in small.items():
        _, make_weights, _ = tp.CASES[name]
        folder = os.path.join(tmp, name)
        tp.write_folder(folder, cfg, make_weights(cfg, torch.Generator().manual_seed(1)))
        put("safetensors", f"{name}.safetensors", read(os.path.join(folder, "model.safetensors")))
        put("hf_config", f"{name}.json", read(os.path.join(folder, "config.json")) + SEP +
            json.dumps({"eos_token_id": [2, 3], "pad_token_id": 0}).encode())
    for arch, cfg in [("bert", dict(architectures=["BertForMaskedLM"], model_type="bert", vocab_size=30,
                                    hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                    intermediate_size=24, max_position_embeddings=32, type_vocab_size=2)),
                      ("t5", dict(architectures=["T5ForConditionalGeneration"], model_type="t5", vocab_size=32,
                                  d_model=16, d_kv=8, d_ff=24, num_layers=1, num_heads=2,
                                  feed_forward_proj="gated-gelu")),
                      ("mamba", dict(architectures=["MambaForCausalLM"], model_type="mamba", vocab_size=32,
                                     hidden_size=16, state_size=4, num_hidden_layers=1)),
                      ("rwkv", dict(architectures=["RwkvForCausalLM"], model_type="rwkv", vocab_size=32,
                                    hidden_size=16, num_hidden_layers=1, attention_hidden_size=16))]:
        put("hf_config", f"{arch}.json", json.dumps(cfg))
    # GGUF: the llama folder converted, with a SentencePiece vocabulary beside it (llama.cpp's layout).
    folder = os.path.join(tmp, "llama")
    shutil.copy(os.path.join(SEEDS, "sentencepiece", "bpe.model"), os.path.join(folder, "tokenizer.model"))
    for typ in ("f32", "q8_0"):
        out = os.path.join(tmp, f"llama-{typ}.gguf")
        tp.run("convert", "--model", folder, "--to", out, "--type", typ)
        put("gguf", f"llama-{typ}.gguf", read(out))
    # safetensors: the sharded index too
    put("safetensors", "index.json", json.dumps({"metadata": {"total_size": 64},
                                                  "weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                                                                 "b.weight": "model-00002-of-00002.safetensors"}}))


def checkpoint(tmp):
    text = os.path.join(tmp, "corpus.txt")
    with open(text, "w") as f:
        f.write("To be, or not to be, that is the question.\n" * 40)
    cfg = os.path.join(tmp, "run.toml")
    out = os.path.join(tmp, "run")
    with open(cfg, "w") as f:
        f.write(f'''[data]\npath = "{text}"\ntokenizer = "char"\n[model]\nblock_size = 8\nn_layer = 1\nn_head = 2\n'''
                f'''n_embd = 8\n[train]\nbatch_size = 2\nmax_steps = 2\nout_dir = "{out}"\n'''
                f'''[eval]\nevery = 2\nbatches = 1\ncheckpoint_every = 2\n[sample]\ntokens = 0\n''')
    subprocess.run([tp.FOUNDRY, "train", "--config", cfg], check=True, capture_output=True)
    step = sorted(d for d in os.listdir(os.path.join(out, "checkpoints")) if d.startswith("step-"))[-1]
    ck = os.path.join(out, "checkpoints", step)
    put("checkpoint", "train.bin", read(os.path.join(ck, "checkpoint.json")) + SEP +
        read(os.path.join(ck, "model.safetensors")))
    for name in sorted(os.listdir(os.path.join(ROOT, "examples"))) + ["finetune/base.toml"]:
        if name.endswith(".toml"):
            put("train_toml", os.path.basename(name), read(os.path.join(ROOT, "examples", name)))


def arrays():
    for name, a in {"f32": np.arange(6, dtype="<f4").reshape(2, 3), "i64": np.arange(4, dtype="<i8"),
                    "f16_fortran": np.asfortranarray(np.ones((2, 2), dtype="<f2")), "bool": np.array([True, False]),
                    "scalar": np.array(3.5), "u8_3d": np.zeros((1, 2, 2), dtype=np.uint8)}.items():
        b = io.BytesIO()
        np.save(b, a)
        put("npy", f"{name}.npy", b.getvalue())
    b = io.BytesIO()
    np.savez(b, x=np.arange(3, dtype="<f4"), y=np.eye(2, dtype="<f8"))
    put("npy", "pair.npz", b.getvalue())
    b = io.BytesIO()
    np.savez_compressed(b, x=np.arange(8, dtype="<i4"))
    put("npy", "compressed.npz", b.getvalue())


def tokenizers(tmp):
    import sentencepiece as spm
    corpus = os.path.join(tmp, "spm.txt")
    with open(corpus, "w") as f:
        f.write("\n".join(["Hello world, the quick brown fox.", "h\u00e9llo caf\u00e9 na\u00efve", "numbers 123 456"] * 30))
    for kind in ("bpe", "unigram"):
        spm.SentencePieceTrainer.train(input=corpus, model_prefix=os.path.join(tmp, kind), vocab_size=320 if kind == "bpe" else 36,
                                       model_type=kind, byte_fallback=(kind == "bpe"), minloglevel=2,
                                       normalization_rule_name="identity")
        put("sentencepiece", f"{kind}.model", read(os.path.join(tmp, kind + ".model")))
    if not os.path.isdir(SHARED):
        sys.exit(f"{SHARED} is absent: the tokenizer seeds are slices of its files")
    for enc in ("r50k_base", "p50k_base"):  # the first byte picks the encoding (tests/fuzz/tiktoken.cpp)
        lines = read(os.path.join(SHARED, "tiktoken", enc + ".tiktoken")).splitlines(keepends=True)
        put("tiktoken", enc, bytes([0 if enc == "r50k_base" else 1]) + b"".join(lines[:300]))
    enc = json.loads(read(os.path.join(SHARED, "gpt2", "encoder.json")))
    merges = read(os.path.join(SHARED, "gpt2", "vocab.bpe")).decode().splitlines()
    keep = dict(list(enc.items())[:400])
    kept_merges = [m for m in merges[1:2000] if all(p in keep for p in m.split(" ")) and m.replace(" ", "") in keep]
    put("gpt2_bpe", "gpt2", json.dumps(keep).encode() + SEP + ("\n".join([merges[0]] + kept_merges) + "\n").encode())
    for name in ("llama3", "phi-3"):
        tok = json.loads(read(os.path.join(SHARED, name, "tokenizer.json")))
        model = tok["model"]
        vocab = dict(sorted(model["vocab"].items(), key=lambda kv: kv[1])[:300])
        model["vocab"] = vocab
        merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
        model["merges"] = [m for m in merges if all(p in vocab for p in m.split(" ")) and m.replace(" ", "") in vocab]
        tok["added_tokens"] = [t for t in tok.get("added_tokens", []) if t["id"] < 300 or t["special"]][:8]
        put("tokenizer_json", f"{name}.json", json.dumps(tok))
        put("tokenizer_encode", f"{name}.txt", "Hello, world! h\u00e9llo <|endoftext|> 12345\n")


def text_data():
    put("jsonl", "formats.jsonl", "\n".join(json.dumps(r) for r in [
        {"text": "the cat", "meta": {"text": "nested"}},
        {"prompt": "Say a:", "completion": " a"},
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "the a"}]},
        {"input_ids": [1, 5, 9, 2], "labels": [-100, 5, 9, 2]}]) + "\n")
    for name in ("instructions.jsonl", "eval.jsonl"):
        lines = read(os.path.join(ROOT, "examples", "finetune", name)).splitlines(keepends=True)
        put("jsonl", name, b"".join(lines[:5]))
    for name, obj in {"decoder": {"input_ids": [[5, 9, 20], [1, 2, 3]], "attention_mask": [[1, 1, 1], [0, 1, 1]]},
                      "encoder": {"input_ids": [[2, 7]], "attention_mask": [[1, 1]], "token_type_ids": [[0, 1]]},
                      "seq2seq": {"input_ids": [[4, 5, 6]], "decoder_input_ids": [[0, 4]]}}.items():
        put("forward_inputs", name + ".json", json.dumps(obj))


def chat_templates():
    """Templates (tokenizer_config.json's chat_template) with a conversation: the shared folders' own, and
    small ones using loops, namespaces, filters, slices, tests and tojson."""
    conversation = json.dumps([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                               {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "2+2?"}])
    for name in ("llama3", "phi-3"):
        path = os.path.join(SHARED, name, "tokenizer_config.json")
        if os.path.exists(path):
            put("chat_template", name, json.load(open(path))["chat_template"].encode() + SEP + conversation.encode())
    small = {
        "chatml": "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
                  "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
        "features": "{% set ns = namespace(n=0, sys='') %}{% for m in messages if m.role != 'system' %}"
                    "{% set ns.n = ns.n + 1 %}{{ loop.index }}:{{ m.content|trim|upper }}{% if not loop.last %}, "
                    "{% endif %}{% else %}none{% endfor %}|{{ messages[1:3]|map(attribute='role')|join('/') }}|"
                    "{{ (messages|last).content|replace('2', 'two') }}|{{ ns.n is even }}|{{ range(3)|list|tojson }}|"
                    "{{ messages[0]|tojson(indent=2) }}|{{ 'x' ~ 3 * 2 // 4 % 3 ** 2 }}|"
                    "{{ {'a': [1, 2.5, none, true]}.a|length if messages else 0 }}",
    }
    for name, template in small.items():
        put("chat_template", name, template.encode() + SEP + conversation.encode())


def json_schemas():
    """response_format schemas with a document of each: test_serve.py's person schema and two plain ones."""
    from test_serve import SCHEMA as person  # noqa: E402  (tests/python is on the path, as test_pretrained)
    docs = {"person": (person, '{"name": "Ann", "age": 31, "ok": true, "tags": ["red", 3], "pet": {"kind": "cat"}}'),
            "object": ({"type": "object"}, '{"a": [1, {"b": null}], "c": "x\\"y\\u00e9", "d": -1.5e3}'),
            "list": ({"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}, '["a", "b"]')}
    for name, (schema, doc) in docs.items():
        put("json_schema", name, json.dumps(schema).encode() + SEP + doc.encode())


def main():
    shutil.rmtree(SEEDS, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        arrays()
        text_data()
        chat_templates()
        json_schemas()
        tokenizers(tmp)
        model_folders(tmp)
        checkpoint(tmp)
    for target in sorted(os.listdir(SEEDS)):
        files = os.listdir(os.path.join(SEEDS, target))
        size = sum(os.path.getsize(os.path.join(SEEDS, target, f)) for f in files)
        print(f"{target:18s} {len(files):3d} seeds {size:8d} bytes")


if __name__ == "__main__":
    main()
