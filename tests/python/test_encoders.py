"""BERT and RoBERTa (transformers v4.40) through `foundry forward`, against a PyTorch 1.13
transcription of modeling_bert.py / modeling_roberta.py: BertModel (last_hidden_state, pooler),
BertForMaskedLM (tied decoder + bias), BertForSequenceClassification, BertForTokenClassification,
RobertaModel and RobertaForMaskedLM (position ids from padding_idx), on plain and padded batches
with token types; logits within 1e-4."""
import json
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import test_pretrained as tp

pytestmark = tp.pytestmark

from encoder_ref import BERT, reference, weights  # noqa: E402


CASES = ["BertModel", "BertForMaskedLM", "BertForSequenceClassification", "BertForTokenClassification",
         "RobertaModel", "RobertaForMaskedLM", "RobertaForSequenceClassification", "RobertaForTokenClassification"]


@pytest.mark.parametrize("arch", CASES)
def test_encoder_outputs_equal_transformers(tmp_path, arch):
    cfg = dict(BERT, architectures=[arch], model_type="roberta" if arch.startswith("Roberta") else "bert")
    if arch.startswith("Roberta"):
        cfg["pad_token_id"] = 1
    if "Classification" in arch:
        cfg["num_labels"] = 3
    w = weights(cfg, arch, torch.Generator().manual_seed(len(arch)))
    folder = tmp_path / "m"
    tp.write_folder(str(folder), cfg, w)
    pad = cfg["pad_token_id"]
    ids = torch.tensor([[2, 17, 5, 33, 8, 9, 3], [2, 41, 12, 3, pad, pad, pad]])
    mask = torch.tensor([[1] * 7, [1, 1, 1, 1, 0, 0, 0]])
    types = torch.tensor([[0, 0, 0, 1, 1, 1, 1], [0, 0, 1, 1, 0, 0, 0]])
    inputs = tmp_path / "in.json"
    inputs.write_text(json.dumps({"input_ids": ids.tolist(), "attention_mask": mask.tolist(), "token_type_ids": types.tolist()}))
    want = reference(cfg, w, arch, ids, mask, types)
    for what in ("last_hidden_state", "pooler_output", "logits"):
        out = tmp_path / f"{what}.npy"
        p = subprocess.run([tp.FOUNDRY, "forward", "--model", str(folder), "--inputs", str(inputs), "--out", str(out),
                            "--output", what], capture_output=True, text=True)
        if what not in want:
            assert p.returncode == 1 and f"has no {what}" in p.stderr, p.stderr
            continue
        assert p.returncode == 0, p.stderr
        got = np.load(out)
        assert got.shape == tuple(want[what].shape)
        np.testing.assert_allclose(got, want[what].numpy(), atol=1e-4, rtol=1e-4)
    # The default output: the head's logits, or the last hidden state of a base model.
    out = tmp_path / "default.npy"
    subprocess.run([tp.FOUNDRY, "forward", "--model", str(folder), "--inputs", str(inputs), "--out", str(out)], check=True)
    np.testing.assert_allclose(np.load(out), want["logits" if "logits" in want else "last_hidden_state"].numpy(), atol=1e-4)


def test_bad_encoder_inputs_fail_clearly(tmp_path):
    cfg = dict(BERT, architectures=["BertModel"], model_type="bert")
    tp.write_folder(str(tmp_path / "m"), cfg, weights(cfg, "BertModel", torch.Generator().manual_seed(1)))
    for body, message in ((({"input_ids": [[1, 2]], "token_type_ids": [[0, 5]]}), "token_type_ids must be in"),
                          (({"input_ids": [[1, 99]]}), "input ids must be in"),
                          (({"input_ids": [[1, 2]], "token_type_ids": [[0]]}), "token_type_ids rows must match")):
        (tmp_path / "in.json").write_text(json.dumps(body))
        p = subprocess.run([tp.FOUNDRY, "forward", "--model", str(tmp_path / "m"), "--inputs", str(tmp_path / "in.json"),
                            "--out", str(tmp_path / "o.npy")], capture_output=True, text=True)
        assert p.returncode == 1 and message in p.stderr, p.stderr
    cfg2 = dict(cfg, position_embedding_type="relative_key")
    tp.write_folder(str(tmp_path / "rel"), cfg2, weights(cfg, "BertModel", torch.Generator().manual_seed(1)))
    (tmp_path / "in.json").write_text(json.dumps({"input_ids": [[1, 2]]}))
    p = subprocess.run([tp.FOUNDRY, "forward", "--model", str(tmp_path / "rel"), "--inputs", str(tmp_path / "in.json"),
                        "--out", str(tmp_path / "o.npy")], capture_output=True, text=True)
    assert p.returncode == 1 and "relative_key" in p.stderr, p.stderr


def wordpiece_tokenizer(folder, words):
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, **{w: i + 4 for i, w in enumerate(words)}}
    tok = {"version": "1.0", "truncation": None, "padding": None,
           "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": True} for t, i in list(vocab.items())[:4]],
           "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                          "strip_accents": None, "lowercase": True},
           "pre_tokenizer": {"type": "BertPreTokenizer"},
           "post_processor": {"type": "TemplateProcessing",
                              "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                                         {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                              "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                              "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [2], "tokens": ["[CLS]"]},
                                                 "[SEP]": {"id": "[SEP]", "ids": [3], "tokens": ["[SEP]"]}}},
           "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
           "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                     "max_input_chars_per_word": 100, "vocab": vocab}}
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    return vocab


def test_foundry_embed_pools_the_last_hidden_state(tmp_path):
    cfg = dict(BERT, architectures=["BertModel"], model_type="bert")
    w = weights(cfg, "BertModel", torch.Generator().manual_seed(9))
    folder = tmp_path / "m"
    tp.write_folder(str(folder), cfg, w)
    vocab = wordpiece_tokenizer(folder, ["the", "cat", "sat", "on", "mat", "a", "dog", "ran"])
    texts = ["The cat sat on the mat", "A dog ran"]
    for pooling in ("mean", "cls"):
        p = subprocess.run([tp.FOUNDRY, "embed", "--model", str(folder), "--pooling", pooling] +
                           sum((["--text", t] for t in texts), []), capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        got = json.loads(p.stdout)
        for text, vec in zip(texts, got):
            ids = torch.tensor([[2] + [vocab[x] for x in text.lower().split()] + [3]])
            h = reference(cfg, w, "BertModel", ids, torch.ones_like(ids), torch.zeros_like(ids))["last_hidden_state"][0]
            want = h.mean(0) if pooling == "mean" else h[0]
            np.testing.assert_allclose(vec, want.numpy(), atol=1e-4)
    p = subprocess.run([tp.FOUNDRY, "embed", "--model", str(folder), "--text", "the cat", "--normalize"],
                       capture_output=True, text=True)
    assert abs(np.linalg.norm(json.loads(p.stdout)[0]) - 1) < 1e-5


@pytest.mark.parametrize("arch", ["BertForMaskedLM", "RobertaForMaskedLM"])
def test_masked_lm_adamw_step_matches_torch(tmp_path, arch):
    """model(input_ids, attention_mask, labels=...) in train mode: transformers' masked-LM loss,
    gradients (the tied decoder and the embedding's padding row included) and one AdamW step."""
    import test_train_models as tm
    foundry = pytest.importorskip("foundry")
    cfg = dict(BERT, architectures=[arch], model_type="roberta" if arch.startswith("Roberta") else "bert",
               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    if arch.startswith("Roberta"):
        cfg["pad_token_id"] = 1
    g = torch.Generator().manual_seed(7)
    w = weights(cfg, arch, g)
    folder = str(tmp_path / "m")
    tp.write_folder(folder, cfg, w)
    pad = cfg["pad_token_id"]
    ids = torch.randint(3, cfg["vocab_size"], (2, 9), generator=g)
    mask = torch.ones(2, 9, dtype=torch.long)
    ids[1, 6:], mask[1, 6:] = pad, 0
    labels = torch.full((2, 9), -100)
    labels[0, [1, 4, 7]] = torch.tensor([11, 12, 13])
    labels[1, [0, 3]] = torch.tensor([21, 22])
    types = torch.zeros(2, 9, dtype=torch.long)

    leaves = {k: v.clone().requires_grad_() for k, v in w.items()}
    logits = reference(cfg, leaves, arch, ids, mask, types)["logits"]
    loss = F.cross_entropy(logits.reshape(-1, cfg["vocab_size"]), labels.reshape(-1), ignore_index=-100)
    loss.backward()
    want = {k: v.grad.numpy() for k, v in leaves.items()}

    model = foundry.models.from_pretrained(folder)
    assert type(model).__name__ == "EncoderModel" and model.training is False
    tm.assert_module_step_matches(model, lambda m: m(tm.ft(ids), attention_mask=tm.ft(mask), labels=tm.ft(labels)), w,
                                  loss.item(), want)
