"""PyTorch 1.13 side of bench/under_load's main-job row: the README's main job in eager PyTorch
(examples/shakespeare_char.toml's model and optimiser: a character GPT, 4 layers x 4 heads x 128,
block 64, batch 16, AdamW with the same learning-rate schedule), trained for STEPS steps on the same
Tiny Shakespeare file. Prints one JSON line: seconds for the steps, final training loss.
Usage: torch_main_job.py THREADS STEPS [TEXT_FILE]"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "tools"))
__import__("program").start(__doc__, __name__)
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
threads, steps = int(sys.argv[1]), int(sys.argv[2])
text_file = sys.argv[3] if len(sys.argv) > 3 else os.path.join(HERE, "..", "..", "examples", "data", "tinyshakespeare.txt")
torch.set_num_threads(threads)
torch.manual_seed(1337)
L, H, C, T, B = 4, 4, 128, 64, 16
LR, MIN_LR, WARMUP, MAX_STEPS = 2e-3, 2e-4, 100, 3000

text = open(text_file, encoding="utf-8").read()
chars = sorted(set(text))
index = {c: i for i, c in enumerate(chars)}
data = torch.tensor([index[c] for c in text[: len(text) * 9 // 10]], dtype=torch.long)
V = len(chars)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.attn, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = self.attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (z.view(b, t, H, C // H).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // H)
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, V), targets.view(-1))


def lr_at(step):
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    ratio = (step - WARMUP) / max(1, MAX_STEPS - WARMUP)
    return MIN_LR + 0.5 * (LR - MIN_LR) * (1 + math.cos(math.pi * min(1.0, ratio)))


model = GPT()
for m in model.modules():  # GPT-2's initialisation, as Foundry's GPT
    if isinstance(m, (nn.Linear, nn.Embedding)):
        nn.init.normal_(m.weight, 0.0, 0.02)
    if isinstance(m, nn.Linear):
        nn.init.zeros_(m.bias)
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                        lr=LR, betas=(0.9, 0.99))
g = torch.Generator().manual_seed(1337)
start = time.perf_counter()
for step in range(steps):
    ix = torch.randint(len(data) - T - 1, (B,), generator=g)
    x = torch.stack([data[i:i + T] for i in ix])
    y = torch.stack([data[i + 1:i + T + 1] for i in ix])
    for group in opt.param_groups:
        group["lr"] = lr_at(step)
    loss = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
print(json.dumps({"seconds": time.perf_counter() - start, "loss": loss.item()}))
