"""PyTorch 1.13 side of bench/finetune_vs_torch: an eager Llama (HF v4.40 semantics: RMSNorm,
rotary, causal softmax attention, SwiGLU) over the HF folder's weights, frozen (requires_grad=False),
with PEFT's LoRA on the target projections (y = x W^T + scaling * B(A(x)), A kaiming-uniform, B
zeros, nn.Linear modules) and torch.optim.AdamW on the adapter. Prints one JSON line like
bench_finetune. Usage: torch_lora.py DIR THREADS TARGETS PRECISION [batch seq r steps warmup]"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "tools"))
program = __import__("program")
program.start(__doc__, __name__)
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "infer_vs_torch"))
from torch_infer import load_safetensors, rotate_half  # noqa: E402


class LoraLinear(nn.Module):
    def __init__(self, weight, r, alpha):
        super().__init__()
        self.weight = weight  # frozen base tensor
        self.lora_A = nn.Linear(weight.shape[1], r, bias=False)
        self.lora_B = nn.Linear(r, weight.shape[0], bias=False)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        self.scaling = alpha / r

    def forward(self, x):
        return F.linear(x, self.weight) + self.lora_B(self.lora_A(x)) * self.scaling


class Frozen(nn.Module):
    def __init__(self, weight):
        super().__init__()
        self.weight = weight

    def forward(self, x):
        return F.linear(x, self.weight)


class Llama(nn.Module):
    def __init__(self, cfg, w, targets, r):
        super().__init__()
        self.cfg, self.w = cfg, w
        for t in w.values():
            t.requires_grad_(False)
        names = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        wanted = names if targets == "all-linear" else targets.split(",")
        self.proj = nn.ModuleDict()
        for i in range(cfg["num_hidden_layers"]):
            for n in names:
                prefix = "self_attn" if n in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
                weight = w[f"model.layers.{i}.{prefix}.{n}.weight"]
                self.proj[f"{i}_{n}"] = LoraLinear(weight, r, 2 * r) if n in wanted else Frozen(weight)
        C, H = cfg["hidden_size"], cfg["num_attention_heads"]
        D = C // H
        self.inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, D, 2).float() / D))

    def forward(self, ids):
        cfg, w = self.cfg, self.w
        B, T = ids.shape
        C, H = cfg["hidden_size"], cfg["num_attention_heads"]
        D = C // H
        eps = cfg["rms_norm_eps"]
        freqs = torch.arange(T).float()[:, None] * self.inv_freq
        emb = torch.cat((freqs, freqs), -1)
        cos, sin = emb.cos(), emb.sin()
        mask = torch.full((T, T), float("-inf")).triu(1)
        h = w["model.embed_tokens.weight"][ids]

        def rms(x, weight):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

        for i in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{i}."
            x = rms(h, w[p + "input_layernorm.weight"])
            q, k, v = [self.proj[f"{i}_{n}"](x).view(B, T, H, D).transpose(1, 2) for n in ("q_proj", "k_proj", "v_proj")]
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            att = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(D) + mask, -1, dtype=torch.float32).to(q.dtype)
            o = (att @ v).transpose(1, 2).reshape(B, T, C)
            h = h + self.proj[f"{i}_o_proj"](o)
            x = rms(h, w[p + "post_attention_layernorm.weight"])
            h = h + self.proj[f"{i}_down_proj"](F.silu(self.proj[f"{i}_gate_proj"](x)) * self.proj[f"{i}_up_proj"](x))
        h = rms(h, w["model.norm.weight"])
        return F.linear(h, w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"])


def main():
    folder, threads, targets, precision = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    batch, seq, r, steps, warmup = (int(a) for a in (sys.argv[5:10] if len(sys.argv) > 9 else (4, 128, 8, 6, 2)))
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = json.load(open(os.path.join(folder, "config.json")))
    model = Llama(cfg, load_safetensors(os.path.join(folder, "model.safetensors")), targets, r)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0)
    ids = torch.randint(0, cfg["vocab_size"], (batch, seq))
    times = []
    for s in range(warmup + steps):
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bfloat16"):
            logits = model(ids)
        V = logits.shape[-1]
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, V).float(), ids[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        if s >= warmup:
            times.append((time.perf_counter() - t0) * 1000)
    ms = sorted(times)[len(times) // 2]
    rss = program.peak_rss_mb()
    print(json.dumps({"ms": ms, "tokens_per_s": batch * seq / (ms / 1000), "peak_rss_mb": rss, "loss": loss.item(),
                      "trainable": len(params)}))


if __name__ == "__main__":
    main()
