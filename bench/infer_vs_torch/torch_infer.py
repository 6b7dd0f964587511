"""PyTorch 1.13 side of bench/infer_vs_torch: the same HF folder run by an eager implementation of
GPT-2 / Llama (HF v4.40 semantics) under torch.no_grad with a concatenating KV cache, as HF's
DynamicCache. Prints one JSON line: load time, prefill and decode tokens/s, peak RSS.
Usage: torch_infer.py DIR THREADS [prefill prompt decode]"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "tools"))
program = __import__("program")
program.start(__doc__, __name__)
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F


def load_safetensors(path):
    """One read of the file into writable memory; tensors are views of it (no second copy)."""
    data = bytearray(os.path.getsize(path))
    with open(path, "rb") as f:
        f.readinto(data)
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(bytes(data[8:8 + n]))
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        s, e = info["data_offsets"]
        assert info["dtype"] == "F32"
        out[name] = torch.from_numpy(np.frombuffer(data, dtype="<f4", count=(e - s) // 4, offset=8 + n + s)
                                     ).view(*info["shape"])
    return out


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


class Model:
    def __init__(self, cfg, w):
        self.cfg, self.w = cfg, w
        self.gpt2 = cfg["architectures"][0] == "GPT2LMHeadModel"
        if not self.gpt2:
            C, H = cfg["hidden_size"], cfg["num_attention_heads"]
            D = C // H
            self.inv_freq = 1.0 / (cfg.get("rope_theta", 10000.0) ** (torch.arange(0, D, 2).float() / D))

    def forward(self, ids, cache, last_only=True):
        """ids [1, T]; cache: list of (k, v) per layer (extended). Returns logits of the last position
        (every position with last_only=False)."""
        cfg, w = self.cfg, self.w
        T = ids.shape[1]
        past = cache[0][0].shape[2] if cache else 0
        pos = torch.arange(past, past + T)
        causal = torch.full((T, past + T), float("-inf")).triu(past + 1)
        if self.gpt2:
            C, H = cfg["n_embd"], cfg["n_head"]
            L = cfg["n_layer"]
            h = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][pos]
        else:
            C, H = cfg["hidden_size"], cfg["num_attention_heads"]
            L = cfg["num_hidden_layers"]
            h = w["model.embed_tokens.weight"][ids]
            freqs = pos.float()[:, None] * self.inv_freq
            emb = torch.cat((freqs, freqs), -1)
            cos, sin = emb.cos(), emb.sin()
        D = C // H
        new_cache = []
        for i in range(L):
            if self.gpt2:
                p = f"transformer.h.{i}."
                x = F.layer_norm(h, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"])
                q, k, v = (x @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]).split(C, 2)
            else:
                p = f"model.layers.{i}."
                x = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + cfg["rms_norm_eps"]) * w[p + "input_layernorm.weight"]
                q, k, v = [F.linear(x, w[p + f"self_attn.{n}_proj.weight"]) for n in "qkv"]
            q, k, v = [t.view(1, T, H, D).transpose(1, 2) for t in (q, k, v)]
            if not self.gpt2:
                q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            if cache:
                k, v = torch.cat((cache[i][0], k), 2), torch.cat((cache[i][1], v), 2)
            new_cache.append((k, v))
            a = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(D) + causal, -1) @ v
            a = a.transpose(1, 2).reshape(1, T, C)
            if self.gpt2:
                h = h + a @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
                x = F.layer_norm(h, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"])
                m = F.gelu(x @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"], approximate="tanh")
                h = h + m @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
            else:
                h = h + F.linear(a, w[p + "self_attn.o_proj.weight"])
                x = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + cfg["rms_norm_eps"]) * w[
                    p + "post_attention_layernorm.weight"]
                g = F.silu(F.linear(x, w[p + "mlp.gate_proj.weight"])) * F.linear(x, w[p + "mlp.up_proj.weight"])
                h = h + F.linear(g, w[p + "mlp.down_proj.weight"])
        cache[:] = new_cache
        if last_only:
            h = h[:, -1:]
        if self.gpt2:
            h = F.layer_norm(h, (C,), w["transformer.ln_f.weight"], w["transformer.ln_f.bias"])
            return h @ w["transformer.wte.weight"].t()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + cfg["rms_norm_eps"]) * w["model.norm.weight"]
        return F.linear(h, w.get("lm_head.weight", w["model.embed_tokens.weight"]))


def main():
    folder, threads = sys.argv[1], int(sys.argv[2])
    prefill, prompt, decode = (int(x) for x in (sys.argv[3:6] if len(sys.argv) > 5 else (128, 32, 128)))
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    cfg = json.load(open(folder + "/config.json"))
    model = Model(cfg, load_safetensors(folder + "/model.safetensors"))
    load_s = time.perf_counter() - t0
    V = cfg["vocab_size"]
    ids = torch.randint(0, V, (1, prefill), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        times = []
        for rep in range(6):  # one untimed warm-up, then the median of 5 (as bench_infer)
            t = time.perf_counter()
            model.forward(ids, [])
            if rep:
                times.append(time.perf_counter() - t)
        prefill_tps = prefill / sorted(times)[2]
        cache = []
        nxt = model.forward(ids[:, :prompt], cache)[0, -1].argmax().view(1, 1)
        t = time.perf_counter()
        for _ in range(decode - 1):
            nxt = model.forward(nxt, cache)[0, -1].argmax().view(1, 1)
        decode_tps = (decode - 1) / (time.perf_counter() - t)
    rss = program.peak_rss_mb()
    print(json.dumps({"load_s": round(load_s, 4), "prefill_tps": round(prefill_tps, 1),
                      "decode_tps": round(decode_tps, 2), "peak_rss_mb": round(rss, 1)}))


if __name__ == "__main__":
    main()
