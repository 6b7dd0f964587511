"""PyTorch 1.13 transcription of transformers v4.40's BertModel / RobertaModel and their heads
(modeling_bert.py, modeling_roberta.py), as functions of a config dict and a weight dict with the
checkpoint's names: the reference of tests/python/test_encoders.py and bench/infer_vs_torch."""
import math

import torch
import torch.nn.functional as F

BERT = dict(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
            hidden_act="gelu", max_position_embeddings=40, type_vocab_size=2, layer_norm_eps=1e-12, pad_token_id=0)


def weights(cfg, arch, g):
    r = lambda *s: torch.randn(*s, generator=g) * 0.2
    C, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    roberta = arch.startswith("Roberta")
    t = "roberta." if roberta else "bert."
    w = {t + "embeddings.word_embeddings.weight": r(V, C), t + "embeddings.position_embeddings.weight": r(cfg["max_position_embeddings"], C),
         t + "embeddings.token_type_embeddings.weight": r(cfg["type_vocab_size"], C),
         t + "embeddings.LayerNorm.weight": 1 + r(C), t + "embeddings.LayerNorm.bias": r(C)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"{t}encoder.layer.{i}."
        for n in ("query", "key", "value"):
            w[p + f"attention.self.{n}.weight"], w[p + f"attention.self.{n}.bias"] = r(C, C), r(C)
        w[p + "attention.output.dense.weight"], w[p + "attention.output.dense.bias"] = r(C, C), r(C)
        w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"] = 1 + r(C), r(C)
        w[p + "intermediate.dense.weight"], w[p + "intermediate.dense.bias"] = r(I, C), r(I)
        w[p + "output.dense.weight"], w[p + "output.dense.bias"] = r(C, I), r(C)
        w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"] = 1 + r(C), r(C)
    if arch.endswith("Model") or arch == "BertForSequenceClassification":
        w[t + "pooler.dense.weight"], w[t + "pooler.dense.bias"] = r(C, C), r(C)
    if arch == "BertForMaskedLM":
        w["cls.predictions.transform.dense.weight"], w["cls.predictions.transform.dense.bias"] = r(C, C), r(C)
        w["cls.predictions.transform.LayerNorm.weight"], w["cls.predictions.transform.LayerNorm.bias"] = 1 + r(C), r(C)
        w["cls.predictions.bias"] = r(V)
    if arch == "RobertaForMaskedLM":
        w["lm_head.dense.weight"], w["lm_head.dense.bias"] = r(C, C), r(C)
        w["lm_head.layer_norm.weight"], w["lm_head.layer_norm.bias"] = 1 + r(C), r(C)
        w["lm_head.bias"] = r(V)
    if arch in ("BertForSequenceClassification", "BertForTokenClassification", "RobertaForTokenClassification"):
        w["classifier.weight"], w["classifier.bias"] = r(3, C), r(3)
    if arch == "RobertaForSequenceClassification":
        w["classifier.dense.weight"], w["classifier.dense.bias"] = r(C, C), r(C)
        w["classifier.out_proj.weight"], w["classifier.out_proj.bias"] = r(3, C), r(3)
    return w


def reference(cfg, w, arch, ids, mask, types):
    """transformers v4.40's BertModel / RobertaModel forward and heads, transcribed."""
    roberta = arch.startswith("Roberta")
    t = "roberta." if roberta else "bert."
    C, H, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]
    ln = lambda x, p: F.layer_norm(x, (C,), w[p + ".weight"], w[p + ".bias"], eps)
    lin = lambda x, p: x @ w[p + ".weight"].T + w[p + ".bias"]
    if roberta:
        keep = (ids != cfg["pad_token_id"]).long()
        pos = torch.cumsum(keep, 1) * keep + cfg["pad_token_id"]
    else:
        pos = torch.arange(ids.shape[1]).unsqueeze(0).expand_as(ids)
    # nn.Embedding(vocab, hidden, padding_idx=pad_token_id): the pad row gets no gradient.
    h = F.embedding(ids, w[t + "embeddings.word_embeddings.weight"], padding_idx=cfg["pad_token_id"]) + \
        w[t + "embeddings.token_type_embeddings.weight"][types] + \
        w[t + "embeddings.position_embeddings.weight"][pos]
    h = ln(h, t + "embeddings.LayerNorm")
    bias = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    B, T = ids.shape
    for i in range(cfg["num_hidden_layers"]):
        p = f"{t}encoder.layer.{i}."
        q, k, v = (lin(h, p + f"attention.self.{n}").view(B, T, H, C // H).transpose(1, 2) for n in ("query", "key", "value"))
        a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(C // H) + bias, -1) @ v
        a = a.transpose(1, 2).reshape(B, T, C)
        a = ln(lin(a, p + "attention.output.dense") + h, p + "attention.output.LayerNorm")
        f = F.gelu(lin(a, p + "intermediate.dense"))
        h = ln(lin(f, p + "output.dense") + a, p + "output.LayerNorm")
    out = {"last_hidden_state": h}
    if t + "pooler.dense.weight" in w:
        out["pooler_output"] = torch.tanh(lin(h[:, 0], t + "pooler.dense"))
    if arch == "BertForMaskedLM":
        x = ln(F.gelu(lin(h, "cls.predictions.transform.dense")), "cls.predictions.transform.LayerNorm")
        out["logits"] = x @ w[t + "embeddings.word_embeddings.weight"].T + w["cls.predictions.bias"]
    if arch == "RobertaForMaskedLM":
        x = F.layer_norm(F.gelu(lin(h, "lm_head.dense")), (C,), w["lm_head.layer_norm.weight"], w["lm_head.layer_norm.bias"], eps)
        out["logits"] = x @ w[t + "embeddings.word_embeddings.weight"].T + w["lm_head.bias"]
    if arch == "BertForSequenceClassification":
        out["logits"] = lin(out["pooler_output"], "classifier")
    if arch in ("BertForTokenClassification", "RobertaForTokenClassification"):
        out["logits"] = lin(h, "classifier")
    if arch == "RobertaForSequenceClassification":  # RobertaClassificationHead on <s>
        out["logits"] = lin(torch.tanh(lin(h[:, 0], "classifier.dense")), "classifier.out_proj")
    return out
