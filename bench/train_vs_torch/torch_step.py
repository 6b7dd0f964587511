"""PyTorch 1.13 side of bench/train_vs_torch: the same GPT-2 124M (HF layout), eager, AdamW.
Usage: torch_step.py THREADS [float32|bfloat16]  (bfloat16: torch.cpu.amp autocast, float32 master weights)"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "tools"))
program = __import__("program")
program.start(__doc__, __name__)
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

threads, batch, seq, steps, warmup = int(sys.argv[1]), 4, 64, 10, 2
bf16 = len(sys.argv) > 2 and sys.argv[2] == "bfloat16"
torch.set_num_threads(threads)
torch.manual_seed(0)
V, T, L, H, C = 50257, 1024, 12, 12, 768


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, Tt, _ = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, 2)
        q, k, v = [t.view(B, Tt, H, C // H).transpose(1, 2) for t in (q, k, v)]
        s = q @ k.transpose(-2, -1) / math.sqrt(C // H)
        s = s.masked_fill(torch.ones(Tt, Tt, dtype=torch.bool).triu(1), float("-inf"))
        x = x + self.attn_proj((torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, Tt, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.h:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()


model = GPT()
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
x, y = torch.randint(0, V, (batch, seq)), torch.randint(0, V, (batch, seq))
times = []
for s in range(warmup + steps):
    t0 = time.perf_counter()
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(x)
    loss = F.cross_entropy(logits.float().view(-1, V), y.view(-1))
    loss.backward()
    opt.step()
    ms = (time.perf_counter() - t0) * 1000
    if s >= warmup:
        times.append(ms)
times.sort()
med = times[len(times) // 2]
print(json.dumps({"ms": med, "tokens_per_s": batch * seq / (med / 1000),
                  "peak_rss_mb": program.peak_rss_mb(), "loss": loss.item()}))
