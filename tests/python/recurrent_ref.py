"""PyTorch 1.13 transcriptions of transformers v4.40.2's recurrent and state-space language models
(modeling_rwkv.py, modeling_mamba.py, modeling_jamba.py; slow paths, as on CPU), as functions of a
config dict and a weight dict with the checkpoint's names. transformers itself is not installable
here. Each forward takes an optional `state` dict that it continues from and updates (HF's cache),
so the token-by-token path can be checked against the whole-sequence one."""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from torch_ref import rwkv_linear_attention_cpu  # noqa: E402  (the registry op's reference too)

RWKV = dict(architectures=["RwkvForCausalLM"], model_type="rwkv", vocab_size=83, hidden_size=32,
            num_hidden_layers=3, attention_hidden_size=32, intermediate_size=64, layer_norm_epsilon=1e-5,
            rescale_every=2, context_length=64, bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)
MAMBA = dict(architectures=["MambaForCausalLM"], model_type="mamba", vocab_size=79, hidden_size=32, state_size=16,
             num_hidden_layers=2, layer_norm_epsilon=1e-5, expand=2, conv_kernel=4, use_bias=False,
             use_conv_bias=True, hidden_act="silu", time_step_rank="auto", residual_in_fp32=True,
             tie_word_embeddings=True, bos_token_id=0, eos_token_id=0, pad_token_id=0)
JAMBA = dict(architectures=["JambaForCausalLM"], model_type="jamba", vocab_size=89, hidden_size=32,
             intermediate_size=48, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
             hidden_act="silu", rms_norm_eps=1e-6, num_experts_per_tok=2, num_experts=4, expert_layer_period=2,
             expert_layer_offset=1, attn_layer_period=2, attn_layer_offset=1, mamba_d_state=8, mamba_d_conv=4,
             mamba_expand=2, mamba_dt_rank="auto", mamba_conv_bias=True, mamba_proj_bias=False,
             tie_word_embeddings=False, max_position_embeddings=64, sliding_window=None, bos_token_id=1,
             eos_token_id=2, pad_token_id=0, output_router_logits=False)


def layer_norm(w, name, x, eps):
    return F.layer_norm(x, (x.shape[-1],), w[name + ".weight"], w[name + ".bias"], eps)


def rms_norm(w, name, x, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w[name + ".weight"] * (x * torch.rsqrt(var + eps))


# ---- RWKV ------------------------------------------------------------------------------------------

def rwkv_shift(hidden, state, key):
    """RwkvSelfAttention/RwkvFeedForward's token shift (ZeroPad2d((0, 0, 1, -1)), first row from the state)."""
    if hidden.size(1) == 1 and state is not None and key in state:
        shifted = state[key]
    else:
        shifted = F.pad(hidden, (0, 0, 1, -1))
        if state is not None and key in state:
            shifted = shifted.clone()
            shifted[:, 0] = state[key]
    if state is not None:
        state[key] = hidden[:, -1]
    return shifted


def rwkv_forward(cfg, w, ids, mask=None, state=None, training=False, last_only=False):
    """RwkvForCausalLM (the attention mask is unused, as in transformers). Eval mode rescales the
    weights of attention.output / feed_forward.value by 2^(block // rescale_every) and halves the
    hidden states every rescale_every blocks. `last_only`: the last position's logits only (generation)."""
    eps, every = cfg["layer_norm_epsilon"], cfg.get("rescale_every", 6)
    rescaled = not training and every > 0
    h = w["rwkv.embeddings.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"rwkv.blocks.{i}."
        div = 2 ** (i // every) if rescaled else 1
        if i == 0:
            h = layer_norm(w, p + "pre_ln", h, eps)
        x = layer_norm(w, p + "ln1", h, eps)
        a = p + "attention."
        shifted = rwkv_shift(x, state, (i, "att"))
        key = x * w[a + "time_mix_key"] + shifted * (1 - w[a + "time_mix_key"])
        value = x * w[a + "time_mix_value"] + shifted * (1 - w[a + "time_mix_value"])
        receptance = x * w[a + "time_mix_receptance"] + shifted * (1 - w[a + "time_mix_receptance"])
        key, value = key @ w[a + "key.weight"].T, value @ w[a + "value.weight"].T
        receptance = torch.sigmoid(receptance @ w[a + "receptance.weight"].T)
        layer_state = state.get((i, "wkv")) if state is not None else None
        rwkv, layer_state = rwkv_linear_attention_cpu(w[a + "time_decay"], w[a + "time_first"], key, value, layer_state)
        if state is not None:
            state[(i, "wkv")] = layer_state
        h = h + (receptance * rwkv) @ (w[a + "output.weight"] / div if div > 1 else w[a + "output.weight"]).T
        x = layer_norm(w, p + "ln2", h, eps)
        f = p + "feed_forward."
        shifted = rwkv_shift(x, state, (i, "ffn"))
        key = x * w[f + "time_mix_key"] + shifted * (1 - w[f + "time_mix_key"])
        receptance = x * w[f + "time_mix_receptance"] + shifted * (1 - w[f + "time_mix_receptance"])
        key = torch.square(torch.relu(key @ w[f + "key.weight"].T))
        value = key @ (w[f + "value.weight"] / div if div > 1 else w[f + "value.weight"]).T
        h = h + torch.sigmoid(receptance @ w[f + "receptance.weight"].T) * value
        if rescaled and (i + 1) % every == 0:
            h = h / 2
    h = layer_norm(w, "rwkv.ln_out", h[:, -1:] if last_only else h, eps)
    return h @ (w["head.weight"] if "head.weight" in w else w["rwkv.embeddings.weight"]).T


def rwkv_weights(cfg, g):
    r = lambda *s: torch.randn(*s, generator=g) * 0.3
    C, A, I, V = cfg["hidden_size"], cfg["attention_hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    w = {"rwkv.embeddings.weight": r(V, C), "rwkv.ln_out.weight": 1 + r(C), "rwkv.ln_out.bias": r(C)}
    if not cfg.get("tie_word_embeddings", False):
        w["head.weight"] = r(V, C)
    for i in range(cfg["num_hidden_layers"]):
        p = f"rwkv.blocks.{i}."
        names = ["ln1", "ln2"] + (["pre_ln"] if i == 0 else [])
        for n in names:
            w[p + n + ".weight"], w[p + n + ".bias"] = 1 + r(C), r(C)
        a = p + "attention."
        w[a + "time_decay"] = torch.rand(A, generator=g) * 4 - 3
        w[a + "time_first"] = r(A) * 2
        for n in ("key", "value", "receptance"):
            w[a + f"time_mix_{n}"] = torch.rand(1, 1, C, generator=g)
            w[a + f"{n}.weight"] = r(A, C)
        w[a + "output.weight"] = r(C, A)
        f = p + "feed_forward."
        w[f + "time_mix_key"], w[f + "time_mix_receptance"] = torch.rand(1, 1, C, generator=g), torch.rand(1, 1, C, generator=g)
        w[f + "key.weight"], w[f + "receptance.weight"], w[f + "value.weight"] = r(I, C), r(C, C), r(C, I)
    return w


# ---- Mamba -----------------------------------------------------------------------------------------

def mamba_sizes(cfg, jamba=False):
    C = cfg["hidden_size"]
    if jamba:
        I, N, K, rank = cfg["mamba_expand"] * C, cfg["mamba_d_state"], cfg["mamba_d_conv"], cfg["mamba_dt_rank"]
    else:
        I, N, K, rank = cfg["expand"] * C, cfg["state_size"], cfg["conv_kernel"], cfg["time_step_rank"]
    return I, N, K, math.ceil(C / 16) if rank == "auto" else rank


def mamba_mixer(cfg, w, p, x, state, layer, jamba=False):
    """MambaMixer.slow_forward / JambaMambaMixer.slow_forward. `state` holds (conv, ssm) per layer."""
    I, N, K, R = mamba_sizes(cfg, jamba)
    bias = cfg["mamba_proj_bias"] if jamba else cfg["use_bias"]
    B, L, _ = x.shape
    projected = x @ w[p + "in_proj.weight"].T
    if bias:
        projected = projected + w[p + "in_proj.bias"]
    hidden_states, gate = projected.transpose(1, 2).chunk(2, dim=1)
    conv_w, conv_b = w[p + "conv1d.weight"], w.get(p + "conv1d.bias")
    if state is not None and (layer, "conv") in state and L == 1:
        conv_state = torch.roll(state[(layer, "conv")], shifts=-1, dims=-1)
        conv_state[:, :, -1] = hidden_states[:, :, 0]
        state[(layer, "conv")] = conv_state
        hidden_states = torch.sum(conv_state * conv_w[:, 0, :], dim=-1)
        if conv_b is not None:
            hidden_states = hidden_states + conv_b
        hidden_states = F.silu(hidden_states).unsqueeze(-1)
    else:
        if state is not None:
            state[(layer, "conv")] = F.pad(hidden_states, (K - hidden_states.shape[-1], 0))
        hidden_states = F.silu(F.conv1d(hidden_states, conv_w, conv_b, padding=K - 1, groups=I)[..., :L])
    ssm_state = state.get((layer, "ssm")) if state is not None else None
    if ssm_state is None:
        ssm_state = torch.zeros(B, I, N)
    ssm_parameters = hidden_states.transpose(1, 2) @ w[p + "x_proj.weight"].T
    time_step, Bm, Cm = torch.split(ssm_parameters, [R, N, N], dim=-1)
    if jamba:
        eps = cfg["rms_norm_eps"]
        time_step = rms_norm(w, p + "dt_layernorm", time_step, eps)
        Bm, Cm = rms_norm(w, p + "b_layernorm", Bm, eps), rms_norm(w, p + "c_layernorm", Cm, eps)
    discrete_time_step = time_step @ w[p + "dt_proj.weight"].T + w[p + "dt_proj.bias"]
    discrete_time_step = F.softplus(discrete_time_step).transpose(1, 2)
    A = -torch.exp(w[p + "A_log"].float())
    discrete_A = torch.exp(A[None, :, None, :] * discrete_time_step[:, :, :, None])
    discrete_B = discrete_time_step[:, :, :, None] * Bm[:, None, :, :].float()
    deltaB_u = discrete_B * hidden_states[:, :, :, None].float()
    scan_outputs = []
    for i in range(L):
        ssm_state = discrete_A[:, :, i, :] * ssm_state + deltaB_u[:, :, i, :]
        scan_outputs.append(torch.matmul(ssm_state, Cm[:, i, :].unsqueeze(-1))[:, :, 0])
    scan_output = torch.stack(scan_outputs, dim=-1)
    scan_output = scan_output + (hidden_states * w[p + "D"][None, :, None])
    scan_output = scan_output * F.silu(gate)
    if state is not None:
        state[(layer, "ssm")] = ssm_state
    out = scan_output.transpose(1, 2) @ w[p + "out_proj.weight"].T
    if bias:
        out = out + w[p + "out_proj.bias"]
    return out


def mamba_forward(cfg, w, ids, mask=None, state=None, last_only=False):
    """MambaForCausalLM (the attention mask is unused, as in transformers v4.40)."""
    eps = cfg["layer_norm_epsilon"]
    h = w["backbone.embeddings.weight"][ids]
    for i in range(cfg["num_hidden_layers"]):
        p = f"backbone.layers.{i}."
        h = h + mamba_mixer(cfg, w, p + "mixer.", rms_norm(w, p + "norm", h, eps), state, i)
    h = rms_norm(w, "backbone.norm_f", h[:, -1:] if last_only else h, eps)
    head = w["lm_head.weight"] if "lm_head.weight" in w else w["backbone.embeddings.weight"]
    return h @ head.T


def mixer_weights(w, p, cfg, g, jamba=False):
    r = lambda *s: torch.randn(*s, generator=g) * 0.3
    C = cfg["hidden_size"]
    I, N, K, R = mamba_sizes(cfg, jamba)
    w[p + "A_log"] = torch.log(torch.arange(1, N + 1, dtype=torch.float32)).expand(I, N).contiguous() + r(I, N) * 0.3
    w[p + "D"] = 1 + r(I)
    w[p + "conv1d.weight"], w[p + "conv1d.bias"] = r(I, 1, K), r(I)
    w[p + "in_proj.weight"], w[p + "x_proj.weight"] = r(2 * I, C), r(R + 2 * N, I)
    w[p + "dt_proj.weight"], w[p + "dt_proj.bias"] = r(I, R), r(I) - 2
    w[p + "out_proj.weight"] = r(C, I)
    if jamba:
        for n, d in (("dt_layernorm", R), ("b_layernorm", N), ("c_layernorm", N)):
            w[p + n + ".weight"] = 1 + r(d)


def mamba_weights(cfg, g):
    r = lambda *s: torch.randn(*s, generator=g) * 0.3
    C, V = cfg["hidden_size"], cfg["vocab_size"]
    w = {"backbone.embeddings.weight": r(V, C), "backbone.norm_f.weight": 1 + r(C)}
    if not cfg.get("tie_word_embeddings", True):
        w["lm_head.weight"] = r(V, C)
    for i in range(cfg["num_hidden_layers"]):
        p = f"backbone.layers.{i}."
        w[p + "norm.weight"] = 1 + r(C)
        mixer_weights(w, p + "mixer.", cfg, g)
    return w


# ---- Jamba -----------------------------------------------------------------------------------------

def jamba_attention(cfg, w, p, x, mask, state, layer):
    """JambaAttention (eager): grouped-query heads, no positional encoding, causal + padding mask."""
    B, T, C = x.shape
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = C // H
    q = (x @ w[p + "q_proj.weight"].T).view(B, T, H, D).transpose(1, 2)
    k = (x @ w[p + "k_proj.weight"].T).view(B, T, Hkv, D).transpose(1, 2)
    v = (x @ w[p + "v_proj.weight"].T).view(B, T, Hkv, D).transpose(1, 2)
    if state is not None:
        if (layer, "k") in state:
            k = torch.cat([state[(layer, "k")], k], 2)
            v = torch.cat([state[(layer, "v")], v], 2)
        state[(layer, "k")], state[(layer, "v")] = k, v
    S = k.shape[2]
    k, v = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)
    scores = q @ k.transpose(2, 3) / math.sqrt(D)
    i = torch.arange(S - T, S)[:, None]
    j = torch.arange(S)[None, :]
    allowed = (j <= i)[None] & mask.bool()[:, None, :]
    scores = scores + torch.where(allowed, 0.0, torch.finfo(torch.float32).min)[:, None]
    attn = torch.softmax(scores, -1) @ v
    return attn.transpose(1, 2).reshape(B, T, C) @ w[p + "o_proj.weight"].T


def gated_mlp(w, p, x):
    return (F.silu(x @ w[p + "gate_proj.weight"].T) * (x @ w[p + "up_proj.weight"].T)) @ w[p + "down_proj.weight"].T


def jamba_moe(cfg, w, p, x):
    """JambaSparseMoeBlock: softmax over the router's logits in float32, top-k, no renormalisation."""
    B, T, C = x.shape
    flat = x.reshape(-1, C)
    probs = F.softmax(flat @ w[p + "router.weight"].T, dim=1, dtype=torch.float)
    weights, chosen = torch.topk(probs, cfg["num_experts_per_tok"], dim=-1)
    out = torch.zeros_like(flat)
    for e in range(cfg["num_experts"]):
        rows, slot = torch.nonzero(chosen == e, as_tuple=True)
        if rows.numel():
            out = out.index_add(0, rows, gated_mlp(w, p + f"experts.{e}.", flat[rows]) * weights[rows, slot, None])
    return out.reshape(B, T, C)


def jamba_layer_kinds(cfg, i):
    attention = i % cfg["attn_layer_period"] == cfg["attn_layer_offset"]
    sparse = cfg["num_experts"] > 1 and i % cfg["expert_layer_period"] == cfg["expert_layer_offset"]
    return attention, sparse


def jamba_forward(cfg, w, ids, mask=None, state=None):
    """JambaForCausalLM; `mask` covers the cached positions too (as HF's generate passes it)."""
    eps = cfg["rms_norm_eps"]
    if mask is None:
        past = state[next(k for k in state if k[1] == "k")].shape[2] if state and any(k[1] == "k" for k in state) else 0
        mask = torch.ones(ids.shape[0], past + ids.shape[1], dtype=torch.long)
    # nn.Embedding(vocab, hidden, padding_idx): the pad row gets no gradient.
    h = F.embedding(ids, w["model.embed_tokens.weight"], padding_idx=cfg.get("pad_token_id"))
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        attention, sparse = jamba_layer_kinds(cfg, i)
        x = rms_norm(w, p + "input_layernorm", h, eps)
        if attention:
            h = h + jamba_attention(cfg, w, p + "self_attn.", x, mask, state, i)
        else:
            h = h + mamba_mixer(cfg, w, p + "mamba.", x, state, i, jamba=True)
        x = rms_norm(w, p + "pre_ff_layernorm", h, eps)
        h = h + (jamba_moe(cfg, w, p + "feed_forward.", x) if sparse else gated_mlp(w, p + "feed_forward.", x))
    h = rms_norm(w, "model.final_layernorm", h, eps)
    return h @ (w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"]).T


def jamba_weights(cfg, g):
    r = lambda *s: torch.randn(*s, generator=g) * 0.3
    C, V, I = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"]
    Hkv_dim = cfg["num_key_value_heads"] * (C // cfg["num_attention_heads"])
    w = {"model.embed_tokens.weight": r(V, C), "model.final_layernorm.weight": 1 + r(C)}
    if not cfg.get("tie_word_embeddings", False):
        w["lm_head.weight"] = r(V, C)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        attention, sparse = jamba_layer_kinds(cfg, i)
        w[p + "input_layernorm.weight"], w[p + "pre_ff_layernorm.weight"] = 1 + r(C), 1 + r(C)
        if attention:
            a = p + "self_attn."
            w[a + "q_proj.weight"], w[a + "o_proj.weight"] = r(C, C), r(C, C)
            w[a + "k_proj.weight"], w[a + "v_proj.weight"] = r(Hkv_dim, C), r(Hkv_dim, C)
        else:
            mixer_weights(w, p + "mamba.", cfg, g, jamba=True)
        f = p + "feed_forward."
        experts = [f + f"experts.{e}." for e in range(cfg["num_experts"])] if sparse else [f]
        if sparse:
            w[f + "router.weight"] = r(cfg["num_experts"], C)
        for e in experts:
            w[e + "gate_proj.weight"], w[e + "up_proj.weight"], w[e + "down_proj.weight"] = r(I, C), r(I, C), r(C, I)
    return w
