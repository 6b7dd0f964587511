#!/usr/bin/python3
"""bench/infer_vs_torch: GPT-2 124M and a Llama-style ~110M model (dim 768, 12 layers, 12 heads,
SwiGLU 2048, vocab 32000), and the recurrent models in the shapes of RWKV-4 169M and Mamba 130M, with random weights, written once as HF folders under /tmp, run by
Foundry (`bench_infer`, memory-mapped safetensors) and by an eager PyTorch 1.13 implementation with
the same threads (1 and 2): weight load time, prefill of 128 tokens, greedy decode of 128 tokens
after a 32-token prompt, peak RSS. Each run is its own process; each row is the median of
BENCH_REPEATS (default 3) runs of each side, alternating. The "q8_0" rows run Foundry's
products on q8_0 weights (decode: q8_0 x q8_0 kernels; prefill: float GEMM on the dequantized
weights) against PyTorch float32; bench/quant_decode compares every format. RWKV and Mamba run against
the transcriptions of transformers' slow (CPU) paths the parity tests use (torch_recurrent.py);
BERT-base (12 x 768, vocab 30522) encodes 8 sequences of 128 tokens per forward (torch_encoder.py).
Usage: /usr/bin/python3 bench/infer_vs_torch/run.py [build/bin/bench_infer]
"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "tools"))
__import__("program").start(__doc__, __name__)
import json
import os
import struct
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
binary = sys.argv[1] if len(sys.argv) > 1 and __name__ == "__main__" else \
    os.path.join(HERE, "..", "..", "build", "bin", "bench_infer")

GPT2 = dict(architectures=["GPT2LMHeadModel"], model_type="gpt2", vocab_size=50257, n_embd=768, n_layer=12, n_head=12,
            n_positions=1024, layer_norm_epsilon=1e-5, activation_function="gelu_new", eos_token_id=50256)
LLAMA = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=32000, hidden_size=768,
             intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=12,
             max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=10000.0, hidden_act="silu",
             tie_word_embeddings=False, eos_token_id=2)
RWKV = dict(architectures=["RwkvForCausalLM"], model_type="rwkv", vocab_size=50277, hidden_size=768,
            num_hidden_layers=12, attention_hidden_size=768, intermediate_size=3072, layer_norm_epsilon=1e-5,
            rescale_every=0, context_length=1024, tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
MAMBA = dict(architectures=["MambaForCausalLM"], model_type="mamba", vocab_size=50280, hidden_size=768, state_size=16,
             num_hidden_layers=24, layer_norm_epsilon=1e-5, expand=2, conv_kernel=4, use_bias=False, use_conv_bias=True,
             hidden_act="silu", time_step_rank="auto", residual_in_fp32=True, tie_word_embeddings=True,
             bos_token_id=0, eos_token_id=0, pad_token_id=0)
BERT = dict(architectures=["BertModel"], model_type="bert", vocab_size=30522, hidden_size=768, num_hidden_layers=12,
            num_attention_heads=12, intermediate_size=3072, hidden_act="gelu", max_position_embeddings=512,
            type_vocab_size=2, layer_norm_eps=1e-12, pad_token_id=0)


def shapes(cfg):
    t = cfg["model_type"]
    if t == "rwkv":
        C, V, I = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
        s = {"rwkv.embeddings.weight": (V, C), "rwkv.ln_out.weight": (C,), "rwkv.ln_out.bias": (C,), "head.weight": (V, C)}
        for i in range(cfg["num_hidden_layers"]):
            p = f"rwkv.blocks.{i}."
            for n in ["ln1", "ln2"] + (["pre_ln"] if i == 0 else []):
                s[p + n + ".weight"], s[p + n + ".bias"] = (C,), (C,)
            for n in ("time_decay", "time_first"):
                s[p + "attention." + n] = (C,)
            for n in ("key", "value", "receptance"):
                s[p + f"attention.time_mix_{n}"] = (1, 1, C)
                s[p + f"attention.{n}.weight"] = (C, C)
            s[p + "attention.output.weight"] = (C, C)
            s[p + "feed_forward.time_mix_key"] = s[p + "feed_forward.time_mix_receptance"] = (1, 1, C)
            s[p + "feed_forward.key.weight"], s[p + "feed_forward.value.weight"] = (I, C), (C, I)
            s[p + "feed_forward.receptance.weight"] = (C, C)
        return s
    if t == "mamba":
        C, V, N = cfg["hidden_size"], cfg["vocab_size"], cfg["state_size"]
        I, R, K = cfg["expand"] * C, -(-C // 16), cfg["conv_kernel"]
        s = {"backbone.embeddings.weight": (V, C), "backbone.norm_f.weight": (C,)}
        for i in range(cfg["num_hidden_layers"]):
            p = f"backbone.layers.{i}."
            s[p + "norm.weight"], s[p + "mixer.D"] = (C,), (I,)
            s[p + "mixer.A_log"], s[p + "mixer.conv1d.weight"], s[p + "mixer.conv1d.bias"] = (I, N), (I, 1, K), (I,)
            s[p + "mixer.in_proj.weight"], s[p + "mixer.x_proj.weight"] = (2 * I, C), (R + 2 * N, I)
            s[p + "mixer.dt_proj.weight"], s[p + "mixer.dt_proj.bias"] = (I, R), (I,)
            s[p + "mixer.out_proj.weight"] = (C, I)
        return s
    if t == "bert":
        C, V, I = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
        e = "bert.embeddings."
        s = {e + "word_embeddings.weight": (V, C), e + "position_embeddings.weight": (cfg["max_position_embeddings"], C),
             e + "token_type_embeddings.weight": (cfg["type_vocab_size"], C), e + "LayerNorm.weight": (C,),
             e + "LayerNorm.bias": (C,), "bert.pooler.dense.weight": (C, C), "bert.pooler.dense.bias": (C,)}
        for i in range(cfg["num_hidden_layers"]):
            p = f"bert.encoder.layer.{i}."
            for n, (o, k) in {"attention.self.query": (C, C), "attention.self.key": (C, C), "attention.self.value": (C, C),
                              "attention.output.dense": (C, C), "intermediate.dense": (I, C),
                              "output.dense": (C, I)}.items():
                s[p + n + ".weight"], s[p + n + ".bias"] = (o, k), (o,)
            for n in ("attention.output.LayerNorm", "output.LayerNorm"):
                s[p + n + ".weight"], s[p + n + ".bias"] = (C,), (C,)
        return s
    if cfg["model_type"] == "gpt2":
        C, V = cfg["n_embd"], cfg["vocab_size"]
        s = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (cfg["n_positions"], C),
             "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
        for i in range(cfg["n_layer"]):
            p = f"transformer.h.{i}."
            for n in ("ln_1", "ln_2"):
                s[p + n + ".weight"], s[p + n + ".bias"] = (C,), (C,)
            for n, (a, b) in {"attn.c_attn": (C, 3 * C), "attn.c_proj": (C, C), "mlp.c_fc": (C, 4 * C),
                              "mlp.c_proj": (4 * C, C)}.items():
                s[p + n + ".weight"], s[p + n + ".bias"] = (a, b), (b,)
        return s
    C, V, F = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    s = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,)}
    if not cfg.get("tie_word_embeddings", True):  # a tied model has no lm_head.weight of its own
        s["lm_head.weight"] = (V, C)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        s[p + "input_layernorm.weight"] = s[p + "post_attention_layernorm.weight"] = (C,)
        kv = C // cfg["num_attention_heads"] * cfg.get("num_key_value_heads", cfg["num_attention_heads"])
        for n in "qkvo":
            s[p + f"self_attn.{n}_proj.weight"] = (kv if n in "kv" else C, C)
        s[p + "mlp.gate_proj.weight"] = s[p + "mlp.up_proj.weight"] = (F, C)
        s[p + "mlp.down_proj.weight"] = (C, F)
    return s


def stored_names(path):
    with open(os.path.join(path, "model.safetensors"), "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return sorted(k for k in json.loads(f.read(n)) if k != "__metadata__")


def write_folder(path, cfg):
    """Random weights for cfg (reused when the folder already holds exactly them)."""
    if os.path.exists(os.path.join(path, "config.json")) and json.load(open(os.path.join(path, "config.json"))) == cfg \
            and stored_names(path) == sorted(shapes(cfg)):
        return
    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(0)
    items = sorted(shapes(cfg).items())
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in items:
        n = int(np.prod(shape)) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for name, shape in items:
            norm = (len(shape) == 1 and "bias" not in name and "time_" not in name) or name.endswith("mixer.D")
            a = (1 + 0.02 * rng.standard_normal(shape) if norm else 0.02 * rng.standard_normal(shape)).astype("<f4")
            f.write(a.tobytes())
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)


# Each row is the median of this many runs of each side, the two sides alternating: the machines
# these run on are shared, and one run of a memory-bound decode moves by +-20% with the neighbours'
# load (which a same-moment alternation meets on both sides alike).
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))



def write_16bit_copy(src, dst, dtype):
    """The folder with its weights rounded to bfloat16 or float16 (stored as BF16 / F16), for the
    `--dtype native` rows (bench/quant_decode, bench/decode_profile)."""
    if os.path.exists(os.path.join(dst, "config.json")):
        return
    os.makedirs(dst, exist_ok=True)
    with open(os.path.join(src, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        out_header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
        for name in sorted(k for k in header if k != "__metadata__"):
            info = header[name]
            f.seek(base + info["data_offsets"][0])
            a = np.frombuffer(f.read(info["data_offsets"][1] - info["data_offsets"][0]), "<f4")
            if dtype == "bfloat16":
                u = a.view(np.uint32).astype(np.uint64)
                b = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2").tobytes()
            else:
                b = a.astype("<f2").tobytes()
            out_header[name] = {"dtype": "BF16" if dtype == "bfloat16" else "F16", "shape": info["shape"],
                                "data_offsets": [offset, offset + len(b)]}
            blobs.append(b)
            offset += len(b)
    hb = json.dumps(out_header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(os.path.join(dst, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for b in blobs:
            f.write(b)
    cfg = json.load(open(os.path.join(src, "config.json")))
    json.dump(dict(cfg, torch_dtype=dtype), open(os.path.join(dst, "config.json"), "w"))

def run(cmd, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def median_runs(cmds, threads):
    """Runs each command REPEATS times, alternating; returns per command the median of every figure."""
    results = [[] for _ in cmds]
    for _ in range(REPEATS):
        for i, cmd in enumerate(cmds):
            results[i].append(run(cmd, threads))
    return [{key: float(np.median([r[key] for r in rs])) for key in rs[0]} for rs in results]


def main():
    rows = []
    for name, cfg in (("GPT-2 124M", GPT2), ("Llama-110M", LLAMA)):
        folder = f"/tmp/foundry_bench_{cfg['model_type']}"
        write_folder(folder, cfg)
        for threads in (1, 2):
            t, f, q = median_runs([["/usr/bin/python3", os.path.join(HERE, "torch_infer.py"), folder, str(threads)],
                                   [binary, "--model", folder, "--threads", str(threads)],
                                   [binary, "--model", folder, "--threads", str(threads), "--quantize", "q8_0"]],
                                  threads)
            rows.append((name, threads, f, t))
            rows.append((name + ", Foundry q8_0", threads, q, t))

    for name, cfg in (("RWKV-4 169M shape", RWKV), ("Mamba 130M shape", MAMBA)):
        folder = f"/tmp/foundry_bench_{cfg['model_type']}"
        write_folder(folder, cfg)
        for threads in (1, 2):
            t, f = median_runs([["/usr/bin/python3", os.path.join(HERE, "torch_recurrent.py"), folder, str(threads)],
                                [binary, "--model", folder, "--threads", str(threads)]], threads)
            rows.append((name, threads, f, t))
    encoder_rows = []
    folder = "/tmp/foundry_bench_bert"
    write_folder(folder, BERT)
    for threads in (1, 2):
        t, f = median_runs([["/usr/bin/python3", os.path.join(HERE, "torch_encoder.py"), folder, str(threads), "8", "128"],
                            [binary, "--model", folder, "--threads", str(threads), "--batch", "8", "--seq", "128"]],
                           threads)
        encoder_rows.append((threads, f, t))

    print("| model | threads | prefill tok/s (Foundry / PyTorch) | decode tok/s (Foundry / PyTorch) | peak RSS MB "
          "(Foundry / PyTorch) | load s (Foundry / PyTorch) |")
    print("|---|---|---|---|---|---|")
    for name, threads, f, t in rows:
        print("| %s | %d | %.0f / %.0f = %.2fx | %.1f / %.1f = %.2fx | %.0f / %.0f = %.2fx | %.3f / %.3f |" % (
            name, threads, f["prefill_tps"], t["prefill_tps"], f["prefill_tps"] / t["prefill_tps"], f["decode_tps"],
            t["decode_tps"], f["decode_tps"] / t["decode_tps"], f["peak_rss_mb"], t["peak_rss_mb"],
            f["peak_rss_mb"] / t["peak_rss_mb"], f["load_s"], t["load_s"]))
    print()
    print("| encoder | threads | sequences/s, 8 x 128 tokens (Foundry / PyTorch) | peak RSS MB (Foundry / PyTorch) |")
    print("|---|---|---|---|")
    for threads, f, t in encoder_rows:
        print("| BERT-base shape | %d | %.2f / %.2f = %.2fx | %.0f / %.0f |" % (
            threads, f["seq_per_s"], t["seq_per_s"], f["seq_per_s"] / t["seq_per_s"], f["peak_rss_mb"], t["peak_rss_mb"]))


if __name__ == "__main__":
    main()
    sys.path.insert(0, os.path.join(HERE, ".."))
    import torch_blas
    print()
    print(torch_blas.describe())
