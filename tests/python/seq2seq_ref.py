"""PyTorch 1.13 transcription of transformers v4.40.2's T5ForConditionalGeneration
(modeling_t5.py: T5LayerNorm, T5Attention with _relative_position_bucket and compute_bias, the
ReLU and gated-GELU feed-forwards, the tied head's d_model^-0.5 scaling), as functions of a config
dict and a weight dict with the checkpoint's names; no cache (every call recomputes)."""
import math

import torch
import torch.nn.functional as F

T5_V10 = dict(architectures=["T5ForConditionalGeneration"], model_type="t5", vocab_size=71, d_model=32, d_kv=8,
              d_ff=48, num_layers=2, num_heads=4, relative_attention_num_buckets=8,
              relative_attention_max_distance=20, dropout_rate=0.0, layer_norm_epsilon=1e-6,
              feed_forward_proj="relu", tie_word_embeddings=True, pad_token_id=0, eos_token_id=1,
              decoder_start_token_id=0, is_encoder_decoder=True)
T5_V11 = dict(T5_V10, feed_forward_proj="gated-gelu", tie_word_embeddings=False, num_decoder_layers=3, d_kv=12)


def t5_norm(w, name, x, eps):
    variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    return w[name + ".weight"] * (x * torch.rsqrt(variance + eps))


def relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance):
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(relative_position_if_large, torch.full_like(relative_position_if_large,
                                                                                       num_buckets - 1))
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


def compute_bias(cfg, table, query_length, key_length, bidirectional):
    context_position = torch.arange(query_length, dtype=torch.long)[:, None]
    memory_position = torch.arange(key_length, dtype=torch.long)[None, :]
    buckets = relative_position_bucket(memory_position - context_position, bidirectional,
                                       cfg["relative_attention_num_buckets"], cfg["relative_attention_max_distance"])
    return F.embedding(buckets, table).permute([2, 0, 1]).unsqueeze(0)  # [1, H, q, k]


def attention(cfg, w, p, x, kv, bias):
    B, T, _ = x.shape
    H, D = cfg["num_heads"], cfg["d_kv"]
    shape = lambda t: t.view(B, -1, H, D).transpose(1, 2)
    q, k, v = shape(x @ w[p + "q.weight"].T), shape(kv @ w[p + "k.weight"].T), shape(kv @ w[p + "v.weight"].T)
    scores = q @ k.transpose(3, 2) + bias  # no 1/sqrt(D) in T5
    a = F.softmax(scores.float(), dim=-1).type_as(scores) @ v
    return a.transpose(1, 2).reshape(B, T, H * D) @ w[p + "o.weight"].T


def feed_forward(cfg, w, p, x):
    ff = cfg["feed_forward_proj"]
    if ff.startswith("gated-"):
        act = {"gelu": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu, "relu": F.relu}[ff[6:]]
        h = act(x @ w[p + "wi_0.weight"].T) * (x @ w[p + "wi_1.weight"].T)
    else:
        h = F.relu(x @ w[p + "wi.weight"].T) if ff == "relu" else F.gelu(x @ w[p + "wi.weight"].T)
    return h @ w[p + "wo.weight"].T


def encode(cfg, w, ids, mask=None):
    eps, B, S = cfg["layer_norm_epsilon"], ids.shape[0], ids.shape[1]
    if mask is None:
        mask = torch.ones_like(ids)
    ext = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    h = w["shared.weight"][ids]
    bias = compute_bias(cfg, w["encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"], S, S, True) + ext
    for i in range(cfg["num_layers"]):
        p = f"encoder.block.{i}.layer."
        x = t5_norm(w, p + "0.layer_norm", h, eps)
        h = h + attention(cfg, w, p + "0.SelfAttention.", x, x, bias)
        h = h + feed_forward(cfg, w, p + "1.DenseReluDense.", t5_norm(w, p + "1.layer_norm", h, eps))
    return t5_norm(w, "encoder.final_layer_norm", h, eps)


def decode(cfg, w, dec_ids, enc, mask=None):
    eps, T = cfg["layer_norm_epsilon"], dec_ids.shape[1]
    if mask is None:
        mask = torch.ones(enc.shape[:2], dtype=torch.long)
    cross_bias = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    causal = torch.full((T, T), torch.finfo(torch.float32).min).triu(1)[None, None]
    bias = compute_bias(cfg, w["decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"], T, T,
                        False) + causal
    h = w["shared.weight"][dec_ids]
    for i in range(cfg.get("num_decoder_layers", cfg["num_layers"])):
        p = f"decoder.block.{i}.layer."
        x = t5_norm(w, p + "0.layer_norm", h, eps)
        h = h + attention(cfg, w, p + "0.SelfAttention.", x, x, bias)
        x = t5_norm(w, p + "1.layer_norm", h, eps)
        h = h + attention(cfg, w, p + "1.EncDecAttention.", x, enc, cross_bias)
        h = h + feed_forward(cfg, w, p + "2.DenseReluDense.", t5_norm(w, p + "2.layer_norm", h, eps))
    h = t5_norm(w, "decoder.final_layer_norm", h, eps)
    if cfg.get("tie_word_embeddings", True):
        return (h * cfg["d_model"] ** -0.5) @ w["shared.weight"].T
    return h @ w["lm_head.weight"].T


def t5_forward(cfg, w, ids, mask, dec_ids):
    enc = encode(cfg, w, ids, mask)
    return decode(cfg, w, dec_ids, enc, mask), enc


def t5_weights(cfg, g):
    r = lambda *s: torch.randn(*s, generator=g) * 0.3
    C, D, H, F_, V = cfg["d_model"], cfg["d_kv"], cfg["num_heads"], cfg["d_ff"], cfg["vocab_size"]
    w = {"shared.weight": r(V, C), "encoder.final_layer_norm.weight": 1 + r(C), "decoder.final_layer_norm.weight": 1 + r(C)}
    if not cfg.get("tie_word_embeddings", True):
        w["lm_head.weight"] = r(V, C)
    gated = cfg["feed_forward_proj"].startswith("gated-")

    def attn(p, bias):
        for n in "qkv":
            w[p + f"{n}.weight"] = r(H * D, C)
        w[p + "o.weight"] = r(C, H * D)
        if bias:
            w[p + "relative_attention_bias.weight"] = r(cfg["relative_attention_num_buckets"], H)

    def ff(p):
        if gated:
            w[p + "wi_0.weight"], w[p + "wi_1.weight"] = r(F_, C), r(F_, C)
        else:
            w[p + "wi.weight"] = r(F_, C)
        w[p + "wo.weight"] = r(C, F_)

    for i in range(cfg["num_layers"]):
        p = f"encoder.block.{i}.layer."
        attn(p + "0.SelfAttention.", i == 0)
        ff(p + "1.DenseReluDense.")
        w[p + "0.layer_norm.weight"], w[p + "1.layer_norm.weight"] = 1 + r(C), 1 + r(C)
    for i in range(cfg.get("num_decoder_layers", cfg["num_layers"])):
        p = f"decoder.block.{i}.layer."
        attn(p + "0.SelfAttention.", i == 0)
        attn(p + "1.EncDecAttention.", False)
        ff(p + "2.DenseReluDense.")
        for j in range(3):
            w[p + f"{j}.layer_norm.weight"] = 1 + r(C)
    return w
