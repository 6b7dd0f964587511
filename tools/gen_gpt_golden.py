#!/usr/bin/python3
"""The llm.c-style golden state for Foundry's GPT (tests/unit/gpt_golden_test.cpp).

A tiny GPT-2 written in PyTorch 1.13 with Hugging Face's parameter names and shapes (Conv1D
weights are [in, out]); saves its weights, a batch, the logits, the loss, every parameter
gradient, and the losses of 10 AdamW steps to tests/parity/gpt/golden.npz.
Run: /usr/bin/python3 tools/gen_gpt_golden.py
"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.dirname(_os.path.abspath(__file__)))
__import__("program").start(__doc__, __name__)
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

torch.manual_seed(42)
V, T, B, L, H, C = 37, 12, 3, 2, 4, 32


def p(*shape, std=0.02):
    return (torch.randn(*shape) * std).requires_grad_()


params = {"transformer.wte.weight": p(V, C), "transformer.wpe.weight": p(T, C)}
for i in range(L):
    pre = "transformer.h.%d." % i
    params[pre + "ln_1.weight"] = (1 + torch.randn(C) * 0.1).requires_grad_()
    params[pre + "ln_1.bias"] = p(C, std=0.1)
    params[pre + "attn.c_attn.weight"] = p(C, 3 * C)
    params[pre + "attn.c_attn.bias"] = p(3 * C)
    params[pre + "attn.c_proj.weight"] = p(C, C)
    params[pre + "attn.c_proj.bias"] = p(C)
    params[pre + "ln_2.weight"] = (1 + torch.randn(C) * 0.1).requires_grad_()
    params[pre + "ln_2.bias"] = p(C, std=0.1)
    params[pre + "mlp.c_fc.weight"] = p(C, 4 * C)
    params[pre + "mlp.c_fc.bias"] = p(4 * C)
    params[pre + "mlp.c_proj.weight"] = p(4 * C, C)
    params[pre + "mlp.c_proj.bias"] = p(C)
params["transformer.ln_f.weight"] = (1 + torch.randn(C) * 0.1).requires_grad_()
params["transformer.ln_f.bias"] = p(C, std=0.1)


def forward(idx):
    P = params
    x = P["transformer.wte.weight"][idx] + P["transformer.wpe.weight"][torch.arange(idx.shape[1])]
    for i in range(L):
        pre = "transformer.h.%d." % i
        a = F.layer_norm(x, (C,), P[pre + "ln_1.weight"], P[pre + "ln_1.bias"], 1e-5)
        qkv = a @ P[pre + "attn.c_attn.weight"] + P[pre + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=2)
        q, k, v = [t.view(B, -1, H, C // H).transpose(1, 2) for t in (q, k, v)]
        s = q @ k.transpose(-2, -1) / math.sqrt(C // H)
        s = s.masked_fill(torch.ones(idx.shape[1], idx.shape[1], dtype=torch.bool).triu(1), float("-inf"))
        y = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B, -1, C)
        x = x + y @ P[pre + "attn.c_proj.weight"] + P[pre + "attn.c_proj.bias"]
        m = F.layer_norm(x, (C,), P[pre + "ln_2.weight"], P[pre + "ln_2.bias"], 1e-5)
        h = F.gelu(m @ P[pre + "mlp.c_fc.weight"] + P[pre + "mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ P[pre + "mlp.c_proj.weight"] + P[pre + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], 1e-5)
    return x @ P["transformer.wte.weight"].t()  # tied lm_head


idx = torch.randint(0, V, (B, T))
targets = torch.randint(0, V, (B, T))
out = {"idx": idx.numpy(), "targets": targets.numpy()}
for k, v in params.items():
    out["param." + k] = v.detach().numpy().copy()
logits = forward(idx)
loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
loss.backward()
out["logits"] = logits.detach().numpy()
out["loss"] = np.array(loss.item())
for k, v in params.items():
    out["grad." + k] = v.grad.numpy().copy()

opt = torch.optim.AdamW(list(params.values()), lr=1e-2, betas=(0.9, 0.95), weight_decay=0.1, eps=1e-8)
losses = []
for step in range(10):
    opt.zero_grad()
    l = F.cross_entropy(forward(idx).reshape(-1, V), targets.reshape(-1))
    l.backward()
    opt.step()
    losses.append(l.item())
out["adamw_losses"] = np.array(losses)
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "parity", "gpt", "golden.npz")
np.savez(path, **out)
print("wrote", path, "loss", loss.item(), "losses", losses)
