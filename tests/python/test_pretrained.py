"""Pretrained-model parity: small random models written by PyTorch 1.13 references that follow HF
transformers v4.40's modeling code (transformers itself is not installable here), saved as HF
folders, then run by `foundry forward` / `foundry generate`. Logits must match within 1e-4 (max
abs, float32) on a batch with left padding; greedy generation with Foundry's KV cache must equal
the reference's no-cache recomputation; bad folders must fail with a message naming the problem.
"""
import json
import math
import os
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from shared_data import needs_shared
from test_safetensors import write_st

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYDIR = os.environ.get("FOUNDRY_PYTHON_DIR", os.path.join(ROOT, "build", "python"))
FOUNDRY = os.path.join(os.path.dirname(os.path.abspath(PYDIR)), "bin", "foundry")

pytestmark = pytest.mark.skipif(not os.path.exists(FOUNDRY), reason="foundry CLI not built at " + FOUNDRY)


# ---- references (HF v4.40 semantics) ---------------------------------------------------------

def positions_from_mask(mask):
    pos = mask.long().cumsum(-1) - 1
    return pos.masked_fill(mask == 0, 1)


def additive_mask(mask, window=0):
    B, S = mask.shape
    i = torch.arange(S)[:, None]
    j = torch.arange(S)[None, :]
    allowed = j <= i
    if window:
        allowed = allowed & (i - j <= window)
    allowed = allowed[None] & mask.bool()[:, None, :]
    return torch.where(allowed, 0.0, torch.finfo(torch.float32).min)[:, None]


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), -1)


def llama_inv_freq(cfg, pos):
    dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    base = cfg.get("rope_theta", 10000.0)
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "dynamic":
        seq_len = int(pos.max()) + 1
        if seq_len > cfg["max_position_embeddings"]:
            f = rs["factor"]
            base = base * ((f * seq_len / cfg["max_position_embeddings"]) - (f - 1)) ** (dim / (dim - 2))
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if kind == "linear":
        inv = inv / rs["factor"]
    if kind == "llama3":
        old, lo, hi, f = (rs["original_max_position_embeddings"], rs["low_freq_factor"], rs["high_freq_factor"],
                          rs["factor"])
        new = []
        for fr in inv.tolist():
            wavelen = 2 * math.pi / fr
            if wavelen < old / hi:
                new.append(fr)
            elif wavelen > old / lo:
                new.append(fr / f)
            else:
                s = (old / wavelen - lo) / (hi - lo)
                new.append((1 - s) * fr / f + s * fr)
        inv = torch.tensor(new, dtype=torch.float32)
    return inv


def decoder_flags(cfg):
    arch = cfg["architectures"][0]
    qkv_bias = arch.startswith("Qwen2") or cfg.get("attention_bias", False)
    return dict(q=qkv_bias, o=cfg.get("attention_bias", False), mlp=cfg.get("mlp_bias", False),
                gemma=arch == "GemmaForCausalLM", moe={"MixtralForCausalLM": "mixtral",
                                                      "Qwen2MoeForCausalLM": "qwen2_moe"}.get(arch))


def sparse_layer(cfg, i):
    f = decoder_flags(cfg)
    if f["moe"] == "mixtral":
        return True
    if f["moe"] == "qwen2_moe":
        return i not in cfg.get("mlp_only_layers", []) and (i + 1) % cfg.get("decoder_sparse_step", 1) == 0
    return False


def llama_forward(cfg, w, ids, mask, cache=None):
    """Llama, Mistral, Qwen2, Gemma, Mixtral and Qwen2-MoE (HF v4.40). mask covers cached + new
    positions; cache: a list of per-layer (k, v), extended in place."""
    f = decoder_flags(cfg)
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    Hkv = cfg.get("num_key_value_heads", H)
    D, eps = cfg.get("head_dim", C // H), cfg["rms_norm_eps"]
    B, T = ids.shape
    pos = positions_from_mask(mask)[:, -T:]
    cfg_rope = dict(cfg, hidden_size=D * H)
    freqs = pos.float()[..., None] * llama_inv_freq(cfg_rope, pos)
    emb = torch.cat((freqs, freqs), -1)[:, None]
    cos, sin = emb.cos(), emb.sin()
    bias = additive_mask(mask, cfg.get("sliding_window") or 0)[:, :, -T:]

    def rms(x, g):
        n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return n * (1.0 + g) if f["gemma"] else g * n

    def lin(x, name, has_bias):
        return F.linear(x, w[name + ".weight"], w.get(name + ".bias") if has_bias else None)

    act = (lambda x: F.gelu(x, approximate="tanh")) if f["gemma"] else F.silu

    def mlp(x, p, gate="gate_proj", up="up_proj", down="down_proj"):
        return lin(act(lin(x, p + gate, f["mlp"])) * lin(x, p + up, f["mlp"]), p + down, f["mlp"])

    def moe(x, p):
        flat = x.reshape(-1, C)
        router = p + ("block_sparse_moe.gate" if f["moe"] == "mixtral" else "mlp.gate")
        probs = torch.softmax(F.linear(flat, w[router + ".weight"]), 1, dtype=torch.float)
        k = cfg["num_experts_per_tok"]
        wts, idx = torch.topk(probs, k, dim=-1)
        if f["moe"] == "mixtral" or cfg.get("norm_topk_prob", False):
            wts = wts / wts.sum(-1, keepdim=True)
        out = torch.zeros_like(flat)
        E = cfg.get("num_local_experts", cfg.get("num_experts"))
        for e in range(E):
            rows, slot = torch.where(idx == e)
            if rows.numel() == 0:
                continue
            if f["moe"] == "mixtral":
                y = mlp(flat[rows], p + f"block_sparse_moe.experts.{e}.", "w1", "w3", "w2")
            else:
                y = mlp(flat[rows], p + f"mlp.experts.{e}.")
            out.index_add_(0, rows, y * wts[rows, slot, None])
        if f["moe"] == "qwen2_moe" and cfg.get("shared_expert_intermediate_size"):
            out = out + torch.sigmoid(F.linear(flat, w[p + "mlp.shared_expert_gate.weight"])) * mlp(
                flat, p + "mlp.shared_expert.")
        return out.reshape(x.shape)

    h = w["model.embed_tokens.weight"][ids]
    if f["gemma"]:
        h = h * torch.tensor(C ** 0.5, dtype=h.dtype)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms(h, w[p + "input_layernorm.weight"])
        q = lin(x, p + "self_attn.q_proj", f["q"]).view(B, T, H, D).transpose(1, 2)
        k = lin(x, p + "self_attn.k_proj", f["q"]).view(B, T, Hkv, D).transpose(1, 2)
        v = lin(x, p + "self_attn.v_proj", f["q"]).view(B, T, Hkv, D).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        if cache is not None:
            if len(cache) <= i:
                cache.append((k[:, :, :0], v[:, :, :0]))
            k, v = torch.cat((cache[i][0], k), 2), torch.cat((cache[i][1], v), 2)
            cache[i] = (k, v)
        k, v = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
        a = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(D) + bias, -1) @ v
        h = h + lin(a.transpose(1, 2).reshape(B, T, H * D), p + "self_attn.o_proj", f["o"])
        x = rms(h, w[p + "post_attention_layernorm.weight"])
        h = h + (moe(x, p) if sparse_layer(cfg, i) else mlp(x, p + "mlp."))
    h = rms(h, w["model.norm.weight"])
    return h @ w.get("lm_head.weight", w["model.embed_tokens.weight"]).t()


def gpt2_forward(cfg, w, ids, mask):
    C, H = cfg["n_embd"], cfg["n_head"]
    D = C // H
    B, T = ids.shape
    pos = positions_from_mask(mask)
    bias = additive_mask(mask)
    h = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][pos]
    ln = lambda x, n: F.layer_norm(x, (C,), w[n + ".weight"], w[n + ".bias"], cfg["layer_norm_epsilon"])
    conv = lambda x, n: x @ w[n + ".weight"] + w[n + ".bias"]
    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}."
        q, k, v = conv(ln(h, p + "ln_1"), p + "attn.c_attn").split(C, 2)
        q, k, v = [t.view(B, T, H, D).transpose(1, 2) for t in (q, k, v)]
        a = torch.softmax(q @ k.transpose(2, 3) / math.sqrt(D) + bias, -1) @ v
        h = h + conv(a.transpose(1, 2).reshape(B, T, C), p + "attn.c_proj")
        m = F.gelu(conv(ln(h, p + "ln_2"), p + "mlp.c_fc"), approximate="tanh")
        h = h + conv(m, p + "mlp.c_proj")
    return ln(h, "transformer.ln_f") @ w["transformer.wte.weight"].t()


def rope_cos_sin(pos, rot, base, cfg=None):
    """cos / sin of rotary positions over the first `rot` dims; with cfg, its rope_scaling applies
    over those dims (GPT-NeoX's and Phi's scaled rotaries are Llama's over rotary_ndims)."""
    if cfg is not None and cfg.get("rope_scaling"):
        inv = llama_inv_freq(dict(cfg, hidden_size=rot * cfg["num_attention_heads"], rope_theta=base), pos)
    else:
        inv = 1.0 / (base ** (torch.arange(0, rot, 2, dtype=torch.int64).float() / rot))
    freqs = pos.float()[..., None] * inv
    emb = torch.cat((freqs, freqs), -1)[:, None]
    return emb.cos(), emb.sin()


def partial_rope(x, cos, sin):
    rot = cos.shape[-1]
    xr, xp = x[..., :rot], x[..., rot:]
    return torch.cat((xr * cos + rotate_half(xr) * sin, xp), -1)


def attention(q, k, v, bias):
    H, Hkv = q.shape[1], k.shape[1]
    k, v = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
    return torch.softmax(q @ k.transpose(2, 3) / math.sqrt(q.shape[-1]) + bias, -1) @ v


def merge(a):
    B, H, T, D = a.shape
    return a.transpose(1, 2).reshape(B, T, H * D)


def alibi(mask, H):
    p2 = 2 ** math.floor(math.log2(H))
    base = torch.tensor(2 ** (-(2 ** -(math.log2(p2) - 3))), dtype=torch.float32)
    slopes = torch.pow(base, torch.arange(1, 1 + p2, dtype=torch.int32))
    if p2 != H:
        extra = torch.tensor(2 ** (-(2 ** -(math.log2(2 * p2) - 3))), dtype=torch.float32)
        n = min(p2, H - p2)
        slopes = torch.cat([slopes, torch.pow(extra, torch.arange(1, 1 + 2 * n, 2, dtype=torch.int32))])
    rel = ((mask.cumsum(-1) - 1) * mask)[:, None, :]
    return (slopes[..., None] * rel)[:, :, None, :]  # [B, H, 1, S]


def lnorm(w, name, C, eps=1e-5):
    return lambda x: F.layer_norm(x, (C,), w[name + ".weight"], w[name + ".bias"], eps)


def neox_forward(cfg, w, ids, mask):
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    D, B, T = C // H, *ids.shape
    cos, sin = rope_cos_sin(positions_from_mask(mask), int(D * cfg["rotary_pct"]), cfg.get("rotary_emb_base", 10000),
                            cfg)
    bias = additive_mask(mask)
    L = lambda x, n: F.linear(x, w[n + ".weight"], w[n + ".bias"])
    h = w["gpt_neox.embed_in.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"gpt_neox.layers.{i}."
        x = lnorm(w, p + "input_layernorm", C, cfg["layer_norm_eps"])(h)
        qkv = L(x, p + "attention.query_key_value").view(B, T, H, 3 * D).permute(0, 2, 1, 3)
        q, k, v = qkv[..., :D], qkv[..., D:2 * D], qkv[..., 2 * D:]
        a = L(merge(attention(partial_rope(q, cos, sin), partial_rope(k, cos, sin), v, bias)), p + "attention.dense")
        mlp = lambda y: L(F.gelu(L(y, p + "mlp.dense_h_to_4h")), p + "mlp.dense_4h_to_h")
        ln2 = lnorm(w, p + "post_attention_layernorm", C, cfg["layer_norm_eps"])
        if cfg["use_parallel_residual"]:
            h = h + a + mlp(ln2(h))
        else:
            h = h + a
            h = h + mlp(ln2(h))
    return lnorm(w, "gpt_neox.final_layer_norm", C, cfg["layer_norm_eps"])(h) @ w["embed_out.weight"].t()


def phi_forward(cfg, w, ids, mask):
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    D, B, T = C // H, *ids.shape
    cos, sin = rope_cos_sin(positions_from_mask(mask), int(D * cfg["partial_rotary_factor"]), cfg["rope_theta"], cfg)
    bias = additive_mask(mask)
    L = lambda x, n: F.linear(x, w[n + ".weight"], w[n + ".bias"])
    h = w["model.embed_tokens.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = lnorm(w, p + "input_layernorm", C, cfg["layer_norm_eps"])(h)
        q, k, v = [L(x, p + f"self_attn.{n}_proj").view(B, T, H, D).transpose(1, 2) for n in "qkv"]
        a = L(merge(attention(partial_rope(q, cos, sin), partial_rope(k, cos, sin), v, bias)), p + "self_attn.dense")
        h = h + a + L(F.gelu(L(x, p + "mlp.fc1"), approximate="tanh"), p + "mlp.fc2")
    h = lnorm(w, "model.final_layernorm", C, cfg["layer_norm_eps"])(h)
    return L(h, "lm_head")


def opt_forward(cfg, w, ids, mask):
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    D, B, T = C // H, *ids.shape
    pos = (torch.cumsum(mask, 1) * mask).long() - 1 + 2
    bias = additive_mask(mask)
    L = lambda x, n: F.linear(x, w[n + ".weight"], w[n + ".bias"])
    r = "model.decoder."
    h = w[r + "embed_tokens.weight"][ids]
    if r + "project_in.weight" in w:
        h = h @ w[r + "project_in.weight"].t()
    h = h + w[r + "embed_positions.weight"][pos]
    pre = cfg["do_layer_norm_before"]
    for i in range(cfg["num_hidden_layers"]):
        p = r + f"layers.{i}."
        ln1, ln2 = lnorm(w, p + "self_attn_layer_norm", C), lnorm(w, p + "final_layer_norm", C)
        x = ln1(h) if pre else h
        q = L(x, p + "self_attn.q_proj") * D ** -0.5
        q, k, v = [t.view(B, T, H, D).transpose(1, 2) for t in (q, L(x, p + "self_attn.k_proj"), L(x, p + "self_attn.v_proj"))]
        a = torch.softmax(q @ k.transpose(2, 3) + bias, -1) @ v
        h = h + L(merge(a), p + "self_attn.out_proj")
        if not pre:
            h = ln1(h)
        x = ln2(h) if pre else h
        h = h + L(F.relu(L(x, p + "fc1")), p + "fc2")
        if not pre:
            h = ln2(h)
    if pre:
        h = lnorm(w, r + "final_layer_norm", C)(h)
    if r + "project_out.weight" in w:
        h = h @ w[r + "project_out.weight"].t()
    return h @ w[r + "embed_tokens.weight"].t()


def bloom_forward(cfg, w, ids, mask):
    C, H = cfg["hidden_size"], cfg["n_head"]
    D, B, T = C // H, *ids.shape
    eps = cfg["layer_norm_epsilon"]
    L = lambda x, n: F.linear(x, w[n + ".weight"], w[n + ".bias"])
    allowed = additive_mask(mask) == 0
    ab = alibi(mask, H)
    h = lnorm(w, "transformer.word_embeddings_layernorm", C, eps)(w["transformer.word_embeddings.weight"][ids])
    post = cfg.get("apply_residual_connection_post_layernorm", False)
    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}."
        x = lnorm(w, p + "input_layernorm", C, eps)(h)
        res = x if post else h
        qkv = L(x, p + "self_attention.query_key_value").view(B, T, H, 3, D)
        q, k, v = [qkv[..., j, :].transpose(1, 2) for j in range(3)]
        scores = ab + (q @ k.transpose(2, 3)) / math.sqrt(D)
        scores = scores.masked_fill(~allowed, torch.finfo(torch.float32).min)
        h = res + L(merge(torch.softmax(scores, -1) @ v), p + "self_attention.dense")
        x = lnorm(w, p + "post_attention_layernorm", C, eps)(h)
        res = x if post else h
        h = res + L(F.gelu(L(x, p + "mlp.dense_h_to_4h"), approximate="tanh"), p + "mlp.dense_4h_to_h")
    return lnorm(w, "transformer.ln_f", C, eps)(h) @ w["transformer.word_embeddings.weight"].t()


def falcon_forward(cfg, w, ids, mask):
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    D, B, T = C // H, *ids.shape
    new, mq, par, use_alibi = (cfg.get("new_decoder_architecture", False), cfg.get("multi_query", True),
                               cfg.get("parallel_attn", True), cfg.get("alibi", False))
    Hkv = cfg.get("num_kv_heads", H) if new else (1 if mq else H)
    eps = cfg["layer_norm_epsilon"]
    L = lambda x, n: F.linear(x, w[n + ".weight"], w.get(n + ".bias"))
    bias = additive_mask(mask)
    if use_alibi:
        bias = bias + alibi(mask, H) / math.sqrt(D)
    else:  # FalconRotaryEmbedding and its linear / dynamic NTK scaling: Llama's (HF v4.40 copies them)
        pos = positions_from_mask(mask)
        freqs = pos.float()[..., None] * llama_inv_freq(dict(cfg, hidden_size=D * H), pos)
        emb = torch.cat((freqs, freqs), -1)[:, None]
        cos, sin = emb.cos(), emb.sin()
    h = w["transformer.word_embeddings.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"transformer.h.{i}."
        x = lnorm(w, p + ("ln_attn" if new else "input_layernorm"), C, eps)(h)
        qkv = L(x, p + "self_attention.query_key_value")
        if new:
            t = qkv.view(B, T, Hkv, H // Hkv + 2, D)
            q = t[:, :, :, :-2].reshape(B, T, H, D)
            k, v = t[:, :, :, -2], t[:, :, :, -1]
        elif not mq:
            t = qkv.view(B, T, H, 3, D)
            q, k, v = t[..., 0, :], t[..., 1, :], t[..., 2, :]
        else:
            t = qkv.view(B, T, H + 2, D)
            q, k, v = t[:, :, :-2], t[:, :, [-2]], t[:, :, [-1]]
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if not use_alibi:
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        a = L(merge(attention(q, k, v, bias)), p + "self_attention.dense")
        mlp = lambda y: L(F.gelu(L(y, p + "mlp.dense_h_to_4h")), p + "mlp.dense_4h_to_h")
        if new:
            h = h + a + mlp(lnorm(w, p + "ln_mlp", C, eps)(h))
        elif par:
            h = h + a + mlp(x)
        else:
            h = h + a
            h = h + mlp(lnorm(w, p + "post_attention_layernorm", C, eps)(h))
    return lnorm(w, "transformer.ln_f", C, eps)(h) @ w["transformer.word_embeddings.weight"].t()


# ---- model folders ----------------------------------------------------------------------------

def llama_weights(cfg, g):
    f = decoder_flags(cfg)
    C, H, F_ = cfg["hidden_size"], cfg["num_attention_heads"], cfg["intermediate_size"]
    Hkv = cfg.get("num_key_value_heads", H)
    D = cfg.get("head_dim", C // H)
    r = lambda *s: torch.randn(*s, generator=g) * 0.2
    norm = lambda: (0 if f["gemma"] else 1) + torch.randn(C, generator=g) * 0.1
    w = {"model.embed_tokens.weight": r(cfg["vocab_size"], C), "model.norm.weight": norm()}

    def gated(p, names, inter):
        for n, (o, i_) in zip(names, [(inter, C), (inter, C), (C, inter)]):
            w[p + n + ".weight"] = r(o, i_)
            if f["mlp"]:
                w[p + n + ".bias"] = r(o)

    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"], w[p + "post_attention_layernorm.weight"] = norm(), norm()
        for n, (o, i_) in {"q_proj": (H * D, C), "k_proj": (Hkv * D, C), "v_proj": (Hkv * D, C),
                           "o_proj": (C, H * D)}.items():
            w[p + "self_attn." + n + ".weight"] = r(o, i_)
            if f["o"] or (f["q"] and n != "o_proj"):
                w[p + "self_attn." + n + ".bias"] = r(o)
        if not sparse_layer(cfg, i):
            gated(p + "mlp.", ["gate_proj", "up_proj", "down_proj"], F_)
        elif f["moe"] == "mixtral":
            w[p + "block_sparse_moe.gate.weight"] = r(cfg["num_local_experts"], C) * 5
            for e in range(cfg["num_local_experts"]):
                gated(p + f"block_sparse_moe.experts.{e}.", ["w1", "w3", "w2"], F_)
        else:
            w[p + "mlp.gate.weight"] = r(cfg["num_experts"], C) * 5
            for e in range(cfg["num_experts"]):
                gated(p + f"mlp.experts.{e}.", ["gate_proj", "up_proj", "down_proj"], cfg["moe_intermediate_size"])
            if cfg.get("shared_expert_intermediate_size"):
                gated(p + "mlp.shared_expert.", ["gate_proj", "up_proj", "down_proj"],
                      cfg["shared_expert_intermediate_size"])
                w[p + "mlp.shared_expert_gate.weight"] = r(1, C)
    if not cfg.get("tie_word_embeddings", f["gemma"]):
        w["lm_head.weight"] = r(cfg["vocab_size"], C)
    return w


def gpt2_weights(cfg, g):
    C, V = cfg["n_embd"], cfg["vocab_size"]
    r = lambda *s: torch.randn(*s, generator=g) * 0.2
    w = {"transformer.wte.weight": r(V, C), "transformer.wpe.weight": r(cfg["n_positions"], C),
         "transformer.ln_f.weight": 1 + r(C) / 2, "transformer.ln_f.bias": r(C)}
    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}."
        for n in ("ln_1", "ln_2"):
            w[p + n + ".weight"], w[p + n + ".bias"] = 1 + r(C) / 2, r(C)
        for n, (a, b) in {"attn.c_attn": (C, 3 * C), "attn.c_proj": (C, C), "mlp.c_fc": (C, 4 * C),
                          "mlp.c_proj": (4 * C, C)}.items():
            w[p + n + ".weight"], w[p + n + ".bias"] = r(a, b), r(b)
    return w


def dense_weights(shapes, g, norms=()):
    """Random weights by name: 1-D *norm* weights near 1, everything else N(0, 0.2)."""
    out = {}
    for name, shape in shapes.items():
        t = torch.randn(*shape, generator=g) * 0.2
        out[name] = 1 + t / 2 if any(name.startswith(n) or ("." + n) in name for n in norms) and name.endswith(
            "weight") else t
    return out


def ln_shapes(prefix, C):
    return {prefix + ".weight": (C,), prefix + ".bias": (C,)}


def lin_shapes(prefix, o, i, bias=True):
    return {prefix + ".weight": (o, i), **({prefix + ".bias": (o,)} if bias else {})}


LN_NAMES = ("input_layernorm", "post_attention_layernorm", "final_layer_norm", "final_layernorm",
            "self_attn_layer_norm", "word_embeddings_layernorm", "ln_f", "ln_attn", "ln_mlp")


def neox_weights(cfg, g):
    C, V, F4 = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    s = {"gpt_neox.embed_in.weight": (V, C), "embed_out.weight": (V, C), **ln_shapes("gpt_neox.final_layer_norm", C)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"gpt_neox.layers.{i}."
        s.update({**ln_shapes(p + "input_layernorm", C), **ln_shapes(p + "post_attention_layernorm", C),
                  **lin_shapes(p + "attention.query_key_value", 3 * C, C), **lin_shapes(p + "attention.dense", C, C),
                  **lin_shapes(p + "mlp.dense_h_to_4h", F4, C), **lin_shapes(p + "mlp.dense_4h_to_h", C, F4)})
    return dense_weights(s, g, LN_NAMES)


def phi_weights(cfg, g):
    C, V, F_ = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    s = {"model.embed_tokens.weight": (V, C), **lin_shapes("lm_head", V, C), **ln_shapes("model.final_layernorm", C)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        s.update({**ln_shapes(p + "input_layernorm", C), **lin_shapes(p + "self_attn.q_proj", C, C),
                  **lin_shapes(p + "self_attn.k_proj", C, C), **lin_shapes(p + "self_attn.v_proj", C, C),
                  **lin_shapes(p + "self_attn.dense", C, C), **lin_shapes(p + "mlp.fc1", F_, C),
                  **lin_shapes(p + "mlp.fc2", C, F_)})
    return dense_weights(s, g, LN_NAMES)


def opt_weights(cfg, g):
    C, V, F_, E = cfg["hidden_size"], cfg["vocab_size"], cfg["ffn_dim"], cfg.get("word_embed_proj_dim", cfg["hidden_size"])
    r = "model.decoder."
    s = {r + "embed_tokens.weight": (V, E), r + "embed_positions.weight": (cfg["max_position_embeddings"] + 2, C)}
    if cfg["do_layer_norm_before"]:
        s.update(ln_shapes(r + "final_layer_norm", C))
    if E != C:
        s.update({r + "project_in.weight": (C, E), r + "project_out.weight": (E, C)})
    for i in range(cfg["num_hidden_layers"]):
        p = r + f"layers.{i}."
        s.update({**ln_shapes(p + "self_attn_layer_norm", C), **ln_shapes(p + "final_layer_norm", C),
                  **{k: v for n in ("q_proj", "k_proj", "v_proj", "out_proj")
                     for k, v in lin_shapes(p + "self_attn." + n, C, C).items()},
                  **lin_shapes(p + "fc1", F_, C), **lin_shapes(p + "fc2", C, F_)})
    return dense_weights(s, g, LN_NAMES)


def bloom_weights(cfg, g):
    C, V = cfg["hidden_size"], cfg["vocab_size"]
    s = {"transformer.word_embeddings.weight": (V, C), **ln_shapes("transformer.word_embeddings_layernorm", C),
         **ln_shapes("transformer.ln_f", C)}
    for i in range(cfg["n_layer"]):
        p = f"transformer.h.{i}."
        s.update({**ln_shapes(p + "input_layernorm", C), **ln_shapes(p + "post_attention_layernorm", C),
                  **lin_shapes(p + "self_attention.query_key_value", 3 * C, C),
                  **lin_shapes(p + "self_attention.dense", C, C), **lin_shapes(p + "mlp.dense_h_to_4h", 4 * C, C),
                  **lin_shapes(p + "mlp.dense_4h_to_h", C, 4 * C)})
    return dense_weights(s, g, LN_NAMES)


def falcon_weights(cfg, g):
    C, V, H = cfg["hidden_size"], cfg["vocab_size"], cfg["num_attention_heads"]
    D = C // H
    new, mq, par, b = (cfg.get("new_decoder_architecture", False), cfg.get("multi_query", True),
                       cfg.get("parallel_attn", True), cfg.get("bias", False))
    Hkv = cfg.get("num_kv_heads", H) if new else (1 if mq else H)
    s = {"transformer.word_embeddings.weight": (V, C), **ln_shapes("transformer.ln_f", C)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"transformer.h.{i}."
        if new:
            s.update({**ln_shapes(p + "ln_attn", C), **ln_shapes(p + "ln_mlp", C)})
        else:
            s.update(ln_shapes(p + "input_layernorm", C))
            if not par:
                s.update(ln_shapes(p + "post_attention_layernorm", C))
        s.update({**lin_shapes(p + "self_attention.query_key_value", (H + 2 * Hkv) * D, C, b),
                  **lin_shapes(p + "self_attention.dense", C, C, b), **lin_shapes(p + "mlp.dense_h_to_4h", 4 * C, C, b),
                  **lin_shapes(p + "mlp.dense_4h_to_h", C, 4 * C, b)})
    return dense_weights(s, g, LN_NAMES)


def write_folder(path, cfg, w):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    st = {k: ("F32", list(v.shape), v.contiguous().numpy().astype("<f4").tobytes()) for k, v in w.items()}
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(write_st(st, {"format": "pt"}))


def run(*args, check=True):
    p = subprocess.run([FOUNDRY, *args], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise AssertionError(p.stderr)
    return p


LLAMA = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=97, hidden_size=64,
             intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
             max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0, hidden_act="silu",
             tie_word_embeddings=False, eos_token_id=2, bos_token_id=1)
GPT2 = dict(architectures=["GPT2LMHeadModel"], model_type="gpt2", vocab_size=101, n_embd=48, n_layer=2, n_head=4,
            n_positions=32, layer_norm_epsilon=1e-5, activation_function="gelu_new", eos_token_id=100)

NEOX = dict(architectures=["GPTNeoXForCausalLM"], model_type="gpt_neox", vocab_size=89, hidden_size=48,
            intermediate_size=80, num_hidden_layers=2, num_attention_heads=4, rotary_pct=0.5, rotary_emb_base=10000,
            max_position_embeddings=64, layer_norm_eps=1e-5, use_parallel_residual=True, hidden_act="gelu",
            eos_token_id=0)
PHI = dict(architectures=["PhiForCausalLM"], model_type="phi", vocab_size=91, hidden_size=48, intermediate_size=72,
           num_hidden_layers=2, num_attention_heads=4, partial_rotary_factor=0.5, rope_theta=10000.0,
           max_position_embeddings=64, layer_norm_eps=1e-5, hidden_act="gelu_new", eos_token_id=0)
OPT = dict(architectures=["OPTForCausalLM"], model_type="opt", vocab_size=93, hidden_size=48, ffn_dim=64,
           num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=40, do_layer_norm_before=True,
           activation_function="relu", word_embed_proj_dim=48, eos_token_id=2, pad_token_id=1)
BLOOM = dict(architectures=["BloomForCausalLM"], model_type="bloom", vocab_size=95, hidden_size=48, n_layer=2,
             n_head=4, layer_norm_epsilon=1e-5, eos_token_id=2)
FALCON = dict(architectures=["FalconForCausalLM"], model_type="falcon", vocab_size=99, hidden_size=48,
              num_hidden_layers=2, num_attention_heads=4, layer_norm_epsilon=1e-5, new_decoder_architecture=False,
              multi_query=True, parallel_attn=True, bias=False, alibi=False, eos_token_id=11)

CASES = {
    "llama": (LLAMA, llama_weights, llama_forward),
    "llama_gqa_bias_tied": (dict(LLAMA, num_key_value_heads=2, attention_bias=True, mlp_bias=True,
                                 tie_word_embeddings=True), llama_weights, llama_forward),
    "llama_mqa_rope_linear": (dict(LLAMA, num_key_value_heads=1, rope_scaling={"type": "linear", "factor": 2.0}),
                              llama_weights, llama_forward),
    "llama_rope_dynamic": (dict(LLAMA, max_position_embeddings=4, rope_scaling={"type": "dynamic", "factor": 2.0}),
                           llama_weights, llama_forward),
    "llama3_rope": (dict(LLAMA, hidden_size=128, num_attention_heads=8, num_key_value_heads=2, rope_theta=500000.0,
                         rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 1024}),
                    llama_weights, llama_forward),
    "mistral_window": (dict(LLAMA, architectures=["MistralForCausalLM"], model_type="mistral", num_key_value_heads=2,
                            sliding_window=3), llama_weights, llama_forward),
    "qwen2": (dict(LLAMA, architectures=["Qwen2ForCausalLM"], model_type="qwen2", num_key_value_heads=2,
                   rope_theta=1000000.0), llama_weights, llama_forward),
    "gemma": (dict(LLAMA, architectures=["GemmaForCausalLM"], model_type="gemma", head_dim=24, num_key_value_heads=1,
                   hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, rms_norm_eps=1e-6),
              llama_weights, llama_forward),
    "mixtral": (dict(LLAMA, architectures=["MixtralForCausalLM"], model_type="mixtral", num_key_value_heads=2,
                     num_local_experts=4, num_experts_per_tok=2, intermediate_size=32, sliding_window=None),
                llama_weights, llama_forward),
    "qwen2_moe": (dict(LLAMA, architectures=["Qwen2MoeForCausalLM"], model_type="qwen2_moe", num_hidden_layers=3,
                       num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24,
                       shared_expert_intermediate_size=40, decoder_sparse_step=1, mlp_only_layers=[1],
                       norm_topk_prob=False), llama_weights, llama_forward),
    "gpt2": (GPT2, gpt2_weights, gpt2_forward),
    "gpt_neox": (NEOX, neox_weights, neox_forward),
    "gpt_neox_sequential": (dict(NEOX, use_parallel_residual=False, rotary_pct=1.0), neox_weights, neox_forward),
    "gpt_neox_rope_linear": (dict(NEOX, rope_scaling={"type": "linear", "factor": 2.0}), neox_weights, neox_forward),
    "phi": (PHI, phi_weights, phi_forward),
    "phi_rope_linear": (dict(PHI, rope_scaling={"type": "linear", "factor": 3.0}), phi_weights, phi_forward),
    "opt": (OPT, opt_weights, opt_forward),
    "opt_post_norm_projected": (dict(OPT, do_layer_norm_before=False, word_embed_proj_dim=24), opt_weights,
                                opt_forward),
    "bloom": (BLOOM, bloom_weights, bloom_forward),
    "bloom_6_heads_post_ln_residual": (dict(BLOOM, n_head=6, apply_residual_connection_post_layernorm=True),
                                       bloom_weights, bloom_forward),
    "falcon_multi_query": (FALCON, falcon_weights, falcon_forward),
    "falcon_new_arch": (dict(FALCON, new_decoder_architecture=True, num_kv_heads=2), falcon_weights, falcon_forward),
    "falcon_rope_linear": (dict(FALCON, rope_scaling={"type": "linear", "factor": 2.0}), falcon_weights,
                           falcon_forward),
    "falcon_rw_alibi": (dict(FALCON, multi_query=False, parallel_attn=False, bias=True, alibi=True), falcon_weights,
                        falcon_forward),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_logits_and_greedy_match_reference(tmp_path, name):
    cfg, make_weights, forward = CASES[name]
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    w = make_weights(cfg, g)
    folder = str(tmp_path / name)
    write_folder(folder, cfg, w)
    V = cfg["vocab_size"]
    ids = torch.randint(3, V - 1, (2, 9), generator=g)
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, :3] = 0  # left padding
    ids[1, :3] = 0
    with torch.no_grad():
        ref = forward(cfg, w, ids, mask)
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps({"input_ids": ids.tolist(), "attention_mask": mask.tolist()}))
    out = str(tmp_path / "logits.npy")
    run("forward", "--model", folder, "--inputs", str(inputs), "--out", out)
    got = np.load(out)
    assert got.shape == (2, 9, V) and got.dtype == np.float32
    keep = mask.bool().numpy()
    err = np.abs(got[keep] - ref.numpy()[keep]).max()
    assert err <= 1e-4, f"{name}: max abs logits difference {err}"
    # A mask holds 0 and 1 only (2 and -1 were read as "attend").
    for bad in (2, -1):
        inputs.write_text(json.dumps({"input_ids": ids.tolist(), "attention_mask": [[1] * 8 + [bad]] * 2}))
        p = run("forward", "--model", folder, "--inputs", str(inputs), "--out", out, check=False)
        assert p.returncode == 1 and f"attention_mask holds {bad} at row 0, position 8" in p.stderr, p.stderr
    # Without a mask the unpadded row gives the same logits.
    inputs.write_text(json.dumps({"input_ids": ids[:1].tolist()}))
    run("forward", "--model", folder, "--inputs", str(inputs), "--out", out)
    assert np.abs(np.load(out)[0] - ref.numpy()[0]).max() <= 1e-4

    # Greedy: Foundry decodes with its KV cache; the reference recomputes everything each step.
    prompt = ids[0, :5].tolist()
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(16):
            t = torch.tensor([seq])
            seq.append(int(forward(cfg, w, t, torch.ones_like(t))[0, -1].argmax()))
    p = run("generate", "--model", folder, "--input-ids", ",".join(map(str, prompt)), "--max-new-tokens", "16",
            "--temperature", "0", "--ignore-eos", "--print-ids")
    got_ids = json.loads(p.stdout.strip().splitlines()[-1])
    if "dynamic" in name:
        # HF's cache keeps keys rotated with the base in force when they were computed, while the
        # base grows with the sequence: compare with the reference decoding through its cache.
        cache, seq = [], list(prompt)
        with torch.no_grad():
            t = torch.tensor([prompt])
            nxt = int(forward(cfg, w, t, torch.ones_like(t), cache)[0, -1].argmax())
            for _ in range(16):
                seq.append(nxt)
                m = torch.ones(1, len(seq), dtype=torch.long)
                nxt = int(forward(cfg, w, torch.tensor([[nxt]]), m, cache)[0, -1].argmax())
    assert got_ids == seq[len(prompt):]
    assert_phase_rates(p.stderr)


def assert_phase_rates(stderr):
    """Each phase's rate is its own count over its own time (not decode tokens over prefill + decode)."""
    import re
    m = re.search(r"prefill: (\d+) tokens in ([\d.]+) s \(([\d.]+) tokens/s\); decode: (\d+) steps in ([\d.]+) s "
                  r"\(([\d.]+) tokens/s\)", stderr)
    assert m, stderr
    n, sec, rate, steps, dsec, drate = (float(x) for x in m.groups())
    assert steps > 0
    for count, seconds, shown in ((n, sec, rate), (steps, dsec, drate)):
        if seconds >= 0.01:  # printed with 3 decimals
            assert abs(shown - count / seconds) <= 0.06 * shown + 0.1, (count, seconds, shown)


def test_sampling_is_reproducible_for_a_seed(tmp_path):
    cfg, make_weights, _ = CASES["llama"]
    folder = str(tmp_path / "m")
    write_folder(folder, cfg, make_weights(cfg, torch.Generator().manual_seed(5)))
    args = ["generate", "--model", folder, "--input-ids", "5,6,7", "--max-new-tokens", "12", "--ignore-eos",
            "--temperature", "1.5", "--top-k", "20", "--top-p", "0.9", "--print-ids"]
    a = json.loads(run(*args, "--seed", "7").stdout.strip().splitlines()[-1])
    b = json.loads(run(*args, "--seed", "7").stdout.strip().splitlines()[-1])
    c = json.loads(run(*args, "--seed", "8").stdout.strip().splitlines()[-1])
    assert a == b and len(a) == 12 and a != c
    # EOS ends generation unless --ignore-eos.
    eos_cfg = dict(cfg, eos_token_id=a[0])
    write_folder(folder, eos_cfg, make_weights(cfg, torch.Generator().manual_seed(5)))
    assert json.loads(run(*args, "--seed", "7").stdout.strip().splitlines()[-1]) == a
    stopped = [x for x in args if x != "--ignore-eos"]
    assert json.loads(run(*stopped, "--seed", "7").stdout.strip().splitlines()[-1]) == [a[0]]


DATA = os.path.join(ROOT, "..", "shared", "data", "tokenizers")


@needs_shared("tokenizers", "gpt2", "encoder.json")
def test_text_prompt_through_the_folder_tokenizer(tmp_path):
    # A GPT-2-vocabulary model with the real GPT-2 BPE files as vocab.json + merges.txt (HF's names).
    cfg = dict(GPT2, vocab_size=50257, eos_token_id=50256)
    w = gpt2_weights(cfg, torch.Generator().manual_seed(3))
    folder = tmp_path / "m"
    write_folder(str(folder), cfg, w)
    os.symlink(os.path.join(DATA, "gpt2", "encoder.json"), folder / "vocab.json")
    os.symlink(os.path.join(DATA, "gpt2", "vocab.bpe"), folder / "merges.txt")
    prompt = [15496, 11, 995]  # "Hello, world" in GPT-2's vocabulary
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(8):
            t = torch.tensor([seq])
            seq.append(int(gpt2_forward(cfg, w, t, torch.ones_like(t))[0, -1].argmax()))
    p = run("generate", "--model", str(folder), "--prompt", "Hello, world", "--max-new-tokens", "8",
            "--temperature", "0", "--ignore-eos", "--print-ids")
    lines = p.stdout.strip().splitlines()
    assert json.loads(lines[-1]) == seq[3:]
    assert len(lines) >= 2 and lines[0]  # the decoded continuation comes first


def test_info_reports_the_model(tmp_path):
    cfg, make_weights, _ = CASES["llama_gqa_bias_tied"]
    folder = str(tmp_path / "m")
    w = make_weights(cfg, torch.Generator().manual_seed(1))
    write_folder(folder, cfg, w)
    out = run("info", "--model", folder).stdout
    assert "LlamaForCausalLM" in out
    assert f"parameters: {sum(t.numel() for t in w.values())}" in out
    assert "F32" in out.upper() or "float32" in out


@pytest.mark.parametrize("breakage, message", [
    ("no_config", "config.json"),
    ("unknown_arch", "unknown architecture 'FooForCausalLM'"),
    ("bad_act", "hidden_act 'gelu'"),
    ("missing_weight", "model.norm.weight"),
    ("wrong_shape", "model.embed_tokens.weight' has shape"),
    ("truncated", "safetensors"),
    ("bad_json", "malformed JSON"),
])
def test_bad_folders_fail_clearly(tmp_path, breakage, message):
    cfg, make_weights, _ = CASES["llama"]
    cfg = dict(cfg)
    w = make_weights(cfg, torch.Generator().manual_seed(2))
    folder = str(tmp_path / "m")
    if breakage == "unknown_arch":
        cfg["architectures"] = ["FooForCausalLM"]
    if breakage == "bad_act":
        cfg["hidden_act"] = "gelu"
    if breakage == "missing_weight":
        del w["model.norm.weight"]
    if breakage == "wrong_shape":
        w["model.embed_tokens.weight"] = w["model.embed_tokens.weight"][:-1]
    write_folder(folder, cfg, w)
    if breakage == "no_config":
        os.remove(os.path.join(folder, "config.json"))
    if breakage == "truncated":
        path = os.path.join(folder, "model.safetensors")
        data = open(path, "rb").read()
        open(path, "wb").write(data[:len(data) // 2])
    if breakage == "bad_json":
        open(os.path.join(folder, "config.json"), "w").write("{\"architectures\": [")
    p = run("generate", "--model", folder, "--input-ids", "1,2", check=False)
    assert p.returncode != 0
    assert message in p.stderr, p.stderr


# ---- decoding strategies ----------------------------------------------------------------------

def reference_beam_search(cfg, w, forward, prompt, num_beams, max_new, eos, length_penalty=1.0, early_stopping=False,
                          num_return=1):
    """HF v4.40's _beam_search + BeamSearchScorer for one prompt, recomputing every step without a cache."""
    P = len(prompt)
    seqs = [list(prompt) for _ in range(num_beams)]
    beam_scores = torch.zeros(num_beams)
    beam_scores[1:] = -1e9
    hyps, worst = [], 1e9

    def add(tokens, sum_logprobs, gen_len, ended):
        nonlocal worst
        score = sum_logprobs / gen_len ** length_penalty
        if len(hyps) < num_beams or score > worst:
            hyps.append((score, tokens, ended))
            if len(hyps) > num_beams:
                order = sorted((s, i) for i, (s, _, _) in enumerate(hyps))
                del hyps[order[0][1]]
                worst = order[1][0]
            else:
                worst = min(score, worst)

    def is_done(best, gen_len):
        if len(hyps) < num_beams:
            return False
        if early_stopping is True:
            return True
        n = max_new if (early_stopping == "never" and length_penalty > 0) else gen_len
        return worst >= best / n ** length_penalty

    done, generated = False, 0
    while True:
        with torch.no_grad():
            t = torch.tensor(seqs)
            logits = forward(cfg, w, t, torch.ones_like(t))[:, -1]
        scores = torch.log_softmax(logits, -1) + beam_scores[:, None]
        V = scores.shape[-1]
        top, idx = torch.topk(scores.view(-1), max(2, 1 + len(eos)) * num_beams)
        nxt = []
        for rank, (s, i) in enumerate(zip(top.tolist(), idx.tolist())):
            beam, tok = i // V, i % V
            if tok in eos:
                if rank >= num_beams:
                    continue
                add(seqs[beam][P:], s, generated + 1, True)
            else:
                nxt.append((s, beam, tok))
            if len(nxt) == num_beams:
                break
        done = is_done(top[0].item(), generated + 1)
        seqs = [seqs[b] + [tok] for _, b, tok in nxt]
        beam_scores = torch.tensor([s for s, _, _ in nxt])
        generated += 1
        if done or generated >= max_new:
            break
    if not done:
        for b in range(num_beams):
            add(seqs[b][P:], beam_scores[b].item(), generated, False)
    best = sorted(hyps, key=lambda h: -h[0])[:num_return]
    return [h[1] + ([eos[0]] if h[2] else []) for h in best], [h[0] for h in best]


@pytest.mark.parametrize("early_stopping", ["false", "true", "never"])
def test_beam_search_matches_reference(tmp_path, early_stopping):
    cfg, make_weights, forward = CASES["llama_gqa_bias_tied"]
    w = make_weights(cfg, torch.Generator().manual_seed(11))
    prompt = [5, 17, 33, 8]
    # An EOS the beams meet: a token of the greedy continuation.
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(4):
            t = torch.tensor([seq])
            seq.append(int(forward(cfg, w, t, torch.ones_like(t))[0, -1].argmax()))
    eos = seq[len(prompt) + 2]
    cfg = dict(cfg, eos_token_id=eos)
    folder = str(tmp_path / "m")
    write_folder(folder, cfg, w)
    es = {"false": False, "true": True, "never": "never"}[early_stopping]
    for lp in (1.0, 0.5):
        want, _ = reference_beam_search(cfg, w, forward, prompt, 4, 10, [eos], lp, es, num_return=3)
        p = run("generate", "--model", folder, "--input-ids", ",".join(map(str, prompt)), "--max-new-tokens", "10",
                "--num-beams", "4", "--num-return-sequences", "3", "--length-penalty", str(lp), "--early-stopping",
                early_stopping, "--print-ids")
        assert json.loads(p.stdout.strip().splitlines()[-1]) == want


def test_speculative_decoding_equals_greedy(tmp_path):
    cfg, make_weights, forward = CASES["llama"]
    folder, draft = str(tmp_path / "m"), str(tmp_path / "d")
    write_folder(folder, cfg, make_weights(cfg, torch.Generator().manual_seed(21)))
    small = dict(cfg, num_hidden_layers=1)
    write_folder(draft, small, make_weights(small, torch.Generator().manual_seed(22)))
    args = ["generate", "--model", folder, "--input-ids", "4,9,16,25", "--max-new-tokens", "20", "--temperature", "0",
            "--ignore-eos", "--print-ids"]
    plain = json.loads(run(*args).stdout.strip().splitlines()[-1])
    for look in ("1", "3", "6"):
        p = run(*args, "--draft-model", draft, "--lookahead", look)
        assert json.loads(p.stdout.strip().splitlines()[-1]) == plain
        assert "draft tokens accepted" in p.stderr
    # The model as its own draft accepts everything.
    p = run(*args, "--draft-model", folder, "--lookahead", "4")
    assert json.loads(p.stdout.strip().splitlines()[-1]) == plain and "(100.0%)" in p.stderr


def reference_process(logits, context, prompt_len, rep=1.0, ngram=0, presence=0.0, frequency=0.0):
    s = logits.clone()
    if rep != 1.0:  # RepetitionPenaltyLogitsProcessor
        ids = torch.tensor(sorted(set(context)))
        sc = s[ids]
        s[ids] = torch.where(sc < 0, sc * rep, sc / rep)
    if ngram and len(context) + 1 >= ngram:  # NoRepeatNGramLogitsProcessor
        prev = tuple(context[len(context) - ngram + 1:])
        for i in range(len(context) - ngram + 1):
            if tuple(context[i:i + ngram - 1]) == prev:
                s[context[i + ngram - 1]] = -float("inf")
    gen = context[prompt_len:]
    for t in set(gen):
        s[t] -= presence + frequency * gen.count(t)
    return s


@pytest.mark.parametrize("opts", [dict(rep=1.3), dict(ngram=2), dict(presence=0.8, frequency=0.5),
                                  dict(rep=0.7, ngram=3, frequency=0.3)])
def test_greedy_with_logits_processors_matches_reference(tmp_path, opts):
    cfg, make_weights, forward = CASES["gpt2"]
    w = make_weights(cfg, torch.Generator().manual_seed(31))
    folder = str(tmp_path / "m")
    write_folder(folder, cfg, w)
    prompt = [7, 3, 7, 3, 9]
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(20):
            t = torch.tensor([seq])
            logits = forward(cfg, w, t, torch.ones_like(t))[0, -1]
            seq.append(int(reference_process(logits, seq, len(prompt), **opts).argmax()))
    flags = {"rep": "--repetition-penalty", "ngram": "--no-repeat-ngram-size", "presence": "--presence-penalty",
             "frequency": "--frequency-penalty"}
    args = [x for k, v in opts.items() for x in (flags[k], str(v))]
    p = run("generate", "--model", folder, "--input-ids", ",".join(map(str, prompt)), "--max-new-tokens", "20",
            "--temperature", "0", "--ignore-eos", "--print-ids", *args)
    assert json.loads(p.stdout.strip().splitlines()[-1]) == seq[len(prompt):]


@needs_shared("tokenizers", "gpt2", "encoder.json")
def test_stop_strings_end_generation(tmp_path):
    cfg = dict(GPT2, vocab_size=50257, eos_token_id=50256)
    folder = tmp_path / "m"
    write_folder(str(folder), cfg, gpt2_weights(cfg, torch.Generator().manual_seed(3)))
    os.symlink(os.path.join(DATA, "gpt2", "encoder.json"), folder / "vocab.json")
    os.symlink(os.path.join(DATA, "gpt2", "vocab.bpe"), folder / "merges.txt")
    base = ["generate", "--model", str(folder), "--prompt", "Hello, world", "--max-new-tokens", "12", "--temperature",
            "0", "--ignore-eos", "--print-ids"]
    full = run(*base).stdout.strip().splitlines()
    text, ids = full[0], json.loads(full[-1])
    stop = text[len(text) // 2:len(text) // 2 + 3]
    p = run(*base, "--stop", stop).stdout.strip().splitlines()
    got_ids = json.loads(p[-1])
    assert got_ids == ids[:len(got_ids)] and len(got_ids) < len(ids)
    assert p[0] == text[:text.find(stop)]


def test_python_from_pretrained(tmp_path):
    import foundry
    cfg, make_weights, forward = CASES["llama_gqa_bias_tied"]
    w = make_weights(cfg, torch.Generator().manual_seed(41))
    folder = str(tmp_path / "m")
    write_folder(folder, cfg, w)
    model = foundry.models.from_pretrained(folder)
    assert model.architecture == "LlamaForCausalLM" and model.vocab_size == cfg["vocab_size"]
    ids = torch.randint(3, cfg["vocab_size"], (2, 6), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, :2] = 0
    with foundry.no_grad():
        got = model(foundry.tensor(ids.tolist()), attention_mask=foundry.tensor(mask.tolist())).logits.numpy()
    with torch.no_grad():
        ref = forward(cfg, w, ids, mask).numpy()
    keep = mask.bool().numpy()
    assert np.abs(got[keep] - ref[keep]).max() <= 1e-4
    prompt = ids[0].tolist()
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(8):
            t = torch.tensor([seq])
            seq.append(int(forward(cfg, w, t, torch.ones_like(t))[0, -1].argmax()))
    assert model.generate(prompt, max_new_tokens=8, ignore_eos=True) == [seq[len(prompt):]]
    # Two prompts of different lengths, left padded together, give each prompt's own greedy output.
    both = model.generate([prompt, prompt[2:]], max_new_tokens=8, ignore_eos=True)
    assert both[0] == seq[len(prompt):]
    assert both[1] == model.generate(prompt[2:], max_new_tokens=8, ignore_eos=True)[0]
    beams = model.generate(prompt, max_new_tokens=6, num_beams=3, num_return_sequences=2, ignore_eos=True)
    assert len(beams) == 2 and all(len(b) == 6 for b in beams)
    assert model.generate(prompt, max_new_tokens=8, ignore_eos=True, draft_model=model) == [seq[len(prompt):]]
    with pytest.raises(Exception, match="config.json"):
        foundry.models.from_pretrained(str(tmp_path))
    # Settings HF's logits processors refuse (a temperature below 0 here: 0 is greedy) are errors
    # naming the setting, not samples from meaningless scores; the edges HF accepts still sample.
    for bad, name in [(dict(temperature=-1.0), "temperature"), (dict(temperature=float("nan")), "temperature"),
                      (dict(top_k=-2), "top_k"), (dict(top_p=7.0), "top_p"), (dict(top_p=-0.1), "top_p"),
                      (dict(min_p=1.5), "min_p"), (dict(typical_p=0.0), "typical_p"),
                      (dict(repetition_penalty=0.0), "repetition_penalty"),
                      (dict(no_repeat_ngram_size=-1), "no_repeat_ngram_size")]:
        with pytest.raises(ValueError, match=f"generate: {name} must be"):
            model.generate(prompt, max_new_tokens=2, do_sample=True, **bad)
        with pytest.raises(ValueError, match=f"generate: {name} must be"):
            model.generate(prompt, max_new_tokens=2, draft_model=model, **bad)
    # Counts whose sum with the prompt wrapped around once sized the KV cache from a tiny number
    # (heap corruption at 2**62 new tokens); beams by the hundred thousand ran out of memory unnamed.
    for bad, name in [(dict(max_new_tokens=2**62), "max_new_tokens"), (dict(max_new_tokens=2**63 - 2), "max_new_tokens"),
                      (dict(max_new_tokens=-1), "max_new_tokens"), (dict(num_beams=100000), "num_beams")]:
        with pytest.raises(ValueError, match=f"generate: {name} must be in"):
            model.generate(prompt, **{"max_new_tokens": 2, **bad})
    edges = model.generate(prompt, max_new_tokens=2, do_sample=True, top_p=1.0, min_p=0.0, typical_p=1.0, top_k=0,
                           temperature=0.0, ignore_eos=True)
    assert edges == [seq[len(prompt):len(prompt) + 2]]  # temperature 0: greedy


@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16"])
def test_gpt2_conv1d_weights_are_kept_as_rows_of_their_transpose(tmp_path, monkeypatch, dtype):
    """A loaded GPT-2's Conv1D weights keep HF's [in, out] shape and values but sit in memory as the
    rows of their transpose (strides (1, in), as llama.cpp's GGUF stores them), so decode streams them
    in the rows form; with FOUNDRY_MMAP_WEIGHTS (weights left in the file mapping) they stay [in, out]
    row-major. Both give the reference's logits, prefill and one-token (decode) products alike."""
    import foundry
    cfg = dict(GPT2, n_embd=128, n_positions=64)  # c_attn 128 x 384: past place_weight's 64 KB in every dtype
    w = gpt2_weights(cfg, torch.Generator().manual_seed(71))
    tdt = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[dtype]
    stored = {k: v.to(tdt) for k, v in w.items()}
    folder = tmp_path / "m"
    os.makedirs(folder)
    (folder / "config.json").write_text(json.dumps(cfg))
    raw = lambda v: v.numpy().astype("<f4").tobytes() if dtype == "F32" else v.view(torch.int16).numpy().tobytes()
    st = {k: (dtype, list(v.shape), raw(v)) for k, v in stored.items()}
    (folder / "model.safetensors").write_bytes(write_st(st, {"format": "pt"}))
    ref_w = {k: v.float() for k, v in stored.items()}
    ids = torch.randint(3, cfg["vocab_size"] - 1, (1, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ref = gpt2_forward(cfg, ref_w, ids, torch.ones_like(ids)).numpy()
    # float32 computes like the reference; 16-bit models round every activation to their dtype.
    tol = {"F32": 1e-4, "F16": 5e-3, "BF16": 4e-2}[dtype]

    def check(model, transposed):
        params = dict(model.named_parameters())
        for name in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            p = params[f"transformer.h.1.{name}.weight"]
            assert tuple(p.shape) == tuple(w[f"transformer.h.1.{name}.weight"].shape)
            big = p.numel() * p.element_size() >= 64 << 10
            want = (1, p.shape[0]) if transposed and big else (p.shape[1], 1)
            assert (p.stride(0), p.stride(1)) == want, name
            assert np.array_equal(p.detach().float().numpy(), ref_w[f"transformer.h.1.{name}.weight"].numpy()), name
        assert str(p.dtype).endswith(dtype.lower().replace("f", "float"))  # computed in the checkpoint's dtype
        with foundry.no_grad():
            got = model(foundry.tensor(ids.tolist())).float().numpy()
            one = model(foundry.tensor(ids[:, :1].tolist())).float().numpy()  # one row: decode's products
        scale = np.abs(ref).max()
        assert np.abs(got - ref).max() <= tol * scale, np.abs(got - ref).max() / scale
        assert np.abs(one[0, 0] - ref[0, 0]).max() <= tol * scale, np.abs(one[0, 0] - ref[0, 0]).max() / scale
        return model.generate(ids[0, :5].tolist(), max_new_tokens=8, ignore_eos=True)[0]

    load = lambda: foundry.models.from_pretrained(str(folder), dtype=dtype.lower().replace("f", "float"))
    resident = check(load(), transposed=True)
    monkeypatch.setenv("FOUNDRY_MMAP_WEIGHTS", "1")
    mapped = check(load(), transposed=False)
    if dtype == "F32":  # 16-bit decode rounds differently in the two layouts (the bias's add)
        assert resident == mapped


def test_bf16_and_sharded_checkpoints(tmp_path):
    cfg, make_weights, forward = CASES["qwen2"]
    w = make_weights(cfg, torch.Generator().manual_seed(51))
    w16 = {k: v.to(torch.bfloat16) for k, v in w.items()}
    # bf16 checkpoint: run in float32 (default) from the rounded weights.
    folder = tmp_path / "bf16"
    os.makedirs(folder)
    (folder / "config.json").write_text(json.dumps(cfg))
    st = {k: ("BF16", list(v.shape), v.view(torch.int16).numpy().tobytes()) for k, v in w16.items()}
    (folder / "model.safetensors").write_bytes(write_st(st, {"format": "pt"}))
    ids = torch.randint(3, cfg["vocab_size"], (1, 7), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref = forward(cfg, {k: v.float() for k, v in w16.items()}, ids, torch.ones_like(ids)).numpy()
    inputs = tmp_path / "in.json"
    inputs.write_text(json.dumps({"input_ids": ids.tolist()}))
    out = str(tmp_path / "out.npy")
    run("forward", "--model", str(folder), "--inputs", str(inputs), "--out", out)
    assert np.abs(np.load(out) - ref).max() <= 1e-4
    # ... or in bfloat16 itself: close to the float32 result (bf16 rounding of every activation), not equal.
    run("forward", "--model", str(folder), "--inputs", str(inputs), "--out", out, "--dtype", "native")
    err = np.abs(np.load(out) - ref).max()
    assert 1e-3 < err < 0.1 * np.abs(ref).max()
    p = run("generate", "--model", str(folder), "--input-ids", "5,6,7", "--max-new-tokens", "4", "--dtype", "native",
            "--ignore-eos", "--print-ids")
    assert len(json.loads(p.stdout.strip().splitlines()[-1])) == 4
    assert "bfloat16" in run("info", "--model", str(folder)).stdout
    # Sharded float32 checkpoint with an index, as transformers writes it.
    sharded = tmp_path / "sharded"
    os.makedirs(sharded)
    (sharded / "config.json").write_text(json.dumps(cfg))
    names = sorted(w)
    halves = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    for fname, part in halves.items():
        st = {k: ("F32", list(w[k].shape), w[k].numpy().astype("<f4").tobytes()) for k in part}
        (sharded / fname).write_bytes(write_st(st, {"format": "pt"}))
    index = {"metadata": {"total_size": sum(v.numel() * 4 for v in w.values())},
             "weight_map": {k: f for f, part in halves.items() for k in part}}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    run("forward", "--model", str(sharded), "--inputs", str(inputs), "--out", out)
    with torch.no_grad():
        ref32 = forward(cfg, w, ids, torch.ones_like(ids)).numpy()
    assert np.abs(np.load(out) - ref32).max() <= 1e-4


@pytest.mark.parametrize("name", ["llama_gqa_bias_tied", "gpt2", "mixtral"])
def test_q8_0_decoding_is_close_to_float32(tmp_path, name):
    import foundry
    cfg, make_weights, forward = CASES[name]
    cfg = dict(cfg, hidden_size=64) if "hidden_size" in cfg else dict(cfg, n_embd=64)
    w = make_weights(cfg, torch.Generator().manual_seed(61))
    folder = str(tmp_path / "m")
    write_folder(folder, cfg, w)
    dense = foundry.models.from_pretrained(folder)
    q8 = foundry.models.from_pretrained(folder, quantize="q8_0")
    ids = torch.randint(3, cfg["vocab_size"], (1, 1), generator=torch.Generator().manual_seed(2)).tolist()
    a, b = dense(foundry.tensor(ids)).detach().numpy(), q8(foundry.tensor(ids)).detach().numpy()
    rel = np.linalg.norm(a - b) / np.linalg.norm(a)
    assert 0 < rel <= 0.05, rel  # the q8_0 path ran; 8-bit weights and activations: a few % here
    # Prefill (many rows per product) computes with the dequantized q8_0 weights: close, not equal.
    many = torch.randint(3, cfg["vocab_size"], (1, 24), generator=torch.Generator().manual_seed(3)).tolist()
    a, b = dense(foundry.tensor(many)).detach().numpy(), q8(foundry.tensor(many)).detach().numpy()
    # (Mixtral's router can pick another expert for a token once its inputs move.)
    assert 0 < np.linalg.norm(a - b) / np.linalg.norm(a) <= (0.1 if name == "mixtral" else 0.05)
    prompt = many[0][:6]
    g_q8 = q8.generate(prompt, max_new_tokens=12, ignore_eos=True)[0]
    assert len(g_q8) == 12
    p = run("generate", "--model", folder, "--input-ids", ",".join(map(str, prompt)), "--max-new-tokens", "12",
            "--temperature", "0", "--ignore-eos", "--print-ids", "--quantize", "q8_0")
    assert json.loads(p.stdout.strip().splitlines()[-1]) == g_q8


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0", "q4_K"])
def test_quantized_prefill_is_float_math_on_the_dequantized_weights(tmp_path, fmt):
    """More than 16 rows: products are a GEMM with the dequantized weight; in float32 the quantized
    model's prefill equals the dense model run on a folder whose projection weights were replaced by
    dequantize(quantize(W)) (computed with foundry.quant, outside the model code)."""
    import foundry
    cfg, make_weights, _ = CASES["llama"]
    cfg = dict(cfg, hidden_size=256, intermediate_size=512, tie_word_embeddings=False)
    w = make_weights(cfg, torch.Generator().manual_seed(17))
    folder = str(tmp_path / "m")
    write_folder(folder, cfg, w)
    fake = {}
    for k, v in w.items():
        if v.dim() == 2 and "embed_tokens" not in k:
            x = v.numpy()
            v = torch.from_numpy(foundry.quant.dequantize(foundry.quant.quantize(x, fmt), fmt, x.shape[1]).copy())
        fake[k] = v
    write_folder(str(tmp_path / "fake"), cfg, fake)
    ids = foundry.tensor(torch.randint(3, cfg["vocab_size"], (1, 40), generator=torch.Generator().manual_seed(4)).tolist())
    got = foundry.models.from_pretrained(folder, quantize=fmt, quantized_prefill="float32")(ids).detach().numpy()
    with foundry.no_grad():  # the dense model's inference path (the quantized one has no trainable weights)
        want = foundry.models.from_pretrained(str(tmp_path / "fake"))(ids).detach().numpy()
    assert np.array_equal(got, want), np.abs(got - want).max()
    # The bf16 GEMM (the default where the CPU has native bf16) rounds activations and dequantized
    # weights to bf16: a small change next to what the quantization itself changes.
    bf16 = foundry.models.from_pretrained(folder, quantize=fmt, quantized_prefill="bfloat16")(ids).detach().numpy()
    dense = foundry.models.from_pretrained(folder)(ids).detach().numpy()
    # (Equal on CPUs where oneDNN has no bf16 kernel: the product falls back to float32.)
    assert np.linalg.norm(bf16 - want) < 0.5 * np.linalg.norm(want - dense)  # random weights amplify both


@pytest.mark.parametrize("fmt", ["q4_K", "q4_0", "q8_0"])
def test_integer_prefill_gives_decode_numbers(tmp_path, fmt):
    """Prefill with integer dot products (the x86 panel GEMMs): every row is quantized to the
    format's dot format (q8_K, q8_0) as decode's row is, so the logits sit as close to the
    dequantized-weight float32 prefill as decode's do (on CPUs without an integer kernel "integer"
    falls back as "auto" does); bad mode names are refused."""
    import foundry
    cfg, make_weights, _ = CASES["llama"]
    cfg = dict(cfg, hidden_size=256, intermediate_size=512, tie_word_embeddings=False)
    folder = str(tmp_path / "m")
    write_folder(folder, cfg, make_weights(cfg, torch.Generator().manual_seed(19)))
    ids = torch.randint(3, cfg["vocab_size"], (1, 40), generator=torch.Generator().manual_seed(5)).tolist()
    x = foundry.tensor(ids)
    logits = {mode: foundry.models.from_pretrained(folder, quantize=fmt, quantized_prefill=mode)(x).detach().numpy()
              for mode in ("integer", "float32")}
    dense = foundry.models.from_pretrained(folder)(x).detach().numpy()
    # Quantizing the activations to 8 bits moves the logits less than quantizing the weights does
    # (far less than 4-bit weights, about as much as 8-bit ones).
    moved = np.linalg.norm(logits["integer"] - logits["float32"]) / np.linalg.norm(logits["float32"] - dense)
    assert moved < (0.5 if fmt != "q8_0" else 1.5), moved
    # Decode's kernels (fewer than 8 rows per product: one row at a time) on the same rows: the
    # first 4 positions alone give the GEMM's numbers up to the float order of the block sums.
    short = foundry.models.from_pretrained(folder, quantize=fmt, quantized_prefill="integer")(
        foundry.tensor([ids[0][:4]])).detach().numpy()
    np.testing.assert_allclose(logits["integer"][0, :4], short[0], rtol=0, atol=1e-4 * np.abs(short).max())
    with pytest.raises(ValueError, match="integer"):
        foundry.models.from_pretrained(folder, quantize=fmt, quantized_prefill="int4")


def weight_quantization_error(w, fmt, block=32):
    """The largest relative error (Frobenius) `fmt` makes on the projection matrices of w."""
    import foundry
    errs = []
    for k, v in w.items():
        if v.dim() == 2 and "embed" not in k and v.shape[1] % block == 0:
            x = v.numpy()
            d = foundry.quant.dequantize(foundry.quant.quantize(x, fmt), fmt, x.shape[1])
            errs.append(np.linalg.norm(d - x) / np.linalg.norm(x))
    return max(errs)


def test_q4_0_decoding_runs_and_is_coarser_than_q8_0(tmp_path):
    import foundry
    cfg, make_weights, _ = CASES["llama"]
    cfg = dict(cfg, hidden_size=64)
    folder = str(tmp_path / "m")
    write_folder(folder, cfg, make_weights(cfg, torch.Generator().manual_seed(81)))
    dense = foundry.models.from_pretrained(folder)
    ids = foundry.tensor([[7]])
    a = dense(ids).detach().numpy()
    err = {q: np.linalg.norm(foundry.models.from_pretrained(folder, quantize=q)(ids).detach().numpy() - a) / np.linalg.norm(a)
           for q in ("q8_0", "q4_0")}
    # Bounded by each format's own step: the worst relative weight error it makes on these matrices,
    # times a margin for two layers and the q8_0 activations of decode (measured ~3-4x).
    w = make_weights(cfg, torch.Generator().manual_seed(81))
    for q in ("q8_0", "q4_0"):
        assert 0 < err[q] < 8 * weight_quantization_error(w, q), (q, err)
    assert err["q8_0"] < err["q4_0"], err
    q4 = foundry.models.from_pretrained(folder, quantize="q4_0")
    g = q4.generate([5, 6, 7], max_new_tokens=10, ignore_eos=True)[0]
    p = run("generate", "--model", folder, "--input-ids", "5,6,7", "--max-new-tokens", "10", "--temperature", "0",
            "--ignore-eos", "--print-ids", "--quantize", "q4_0")
    assert json.loads(p.stdout.strip().splitlines()[-1]) == g


def test_quantizing_at_load_never_holds_a_whole_float_matrix(tmp_path):
    """--quantize reads a memory-mapped float32 matrix a tile of rows at a time and drops each
    tile's pages once quantized: a tied 98 MB embedding (vocab 64000 x 384) adds its 14 MB of
    q4_0 to the load's peak memory, not the float table (Llama-110M's load peaked at 187 MB, 130
    right after it, before). Peak RSS of two child processes whose models differ only in the
    vocabulary."""
    sizes = {}
    for vocab in (64000, 512):
        cfg, make_weights, _ = CASES["llama"]
        cfg = dict(cfg, vocab_size=vocab, hidden_size=384, intermediate_size=64, num_hidden_layers=1,
                   tie_word_embeddings=True)
        w = make_weights(cfg, torch.Generator().manual_seed(3))
        w.pop("lm_head.weight", None)
        folder = str(tmp_path / f"v{vocab}")
        write_folder(folder, cfg, w)
        del w
        probe = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
                 "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
        out = subprocess.run(["/usr/bin/python3", "-c", probe, FOUNDRY, "generate", "--model", folder, "--quantize",
                              "q4_0", "--input-ids", "5,6", "--max-new-tokens", "2", "--ignore-eos"],
                             capture_output=True, text=True, check=True)
        sizes[vocab] = int(out.stdout.split()[-1]) * 1024
    table = 64000 * 384 * 4
    grown = sizes[64000] - sizes[512]
    assert grown < table / 2, (grown, sizes)
    assert grown > 64000 * 384 // 32 * 18 * 0.9, (grown, sizes)  # the q4_0 table itself is there


@pytest.mark.parametrize("name", ["falcon_new_arch", "gpt_neox", "phi"])
def test_dynamic_rope_scaling_beyond_the_trained_length(tmp_path, name):
    """Dynamic NTK scaling on the architectures besides Llama's family (which the CASES cover with
    greedy decoding too): a 9-token forward past max_position_embeddings = 4 grows the base."""
    cfg, make_weights, forward = CASES[name]
    cfg = dict(cfg, max_position_embeddings=4, rope_scaling={"type": "dynamic", "factor": 2.0})
    g = torch.Generator().manual_seed(5)
    w = make_weights(cfg, g)
    folder = str(tmp_path / name)
    write_folder(folder, cfg, w)
    ids = torch.randint(3, cfg["vocab_size"] - 1, (2, 9), generator=g)
    mask = torch.ones(2, 9, dtype=torch.long)
    with torch.no_grad():
        ref = forward(cfg, w, ids, mask)
        plain = forward(dict(cfg, rope_scaling=None), w, ids, mask)
    assert np.abs(ref.numpy() - plain.numpy()).max() > 1e-3  # the scaling changes the numbers
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps({"input_ids": ids.tolist(), "attention_mask": mask.tolist()}))
    out = str(tmp_path / "logits.npy")
    run("forward", "--model", folder, "--inputs", str(inputs), "--out", out)
    assert np.abs(np.load(out) - ref.numpy()).max() <= 1e-4


def test_perplexity_of_nan_logits_is_an_error(tmp_path):
    """A model whose weights give NaN logits printed "perplexity nan" with exit status 0."""
    cfg, make_weights, _ = CASES["llama"]
    w = make_weights(cfg, torch.Generator().manual_seed(5))
    w["model.norm.weight"] = torch.full_like(w["model.norm.weight"], float("nan"))
    folder = str(tmp_path / "nan")
    write_folder(folder, cfg, w)
    text = tmp_path / "t.txt"
    text.write_text("0123456789" * 10)  # bytes 48-57, inside the 97-word vocabulary
    p = run("perplexity", "--model", folder, "--data", str(text), "--tokenizer", "byte", "--context", "16", check=False)
    assert p.returncode == 1 and "log-probabilities are NaN" in p.stderr, p.stderr
