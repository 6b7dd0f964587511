"""RWKV, Mamba and Jamba (transformers v4.40) through `foundry forward` / `foundry generate` and the
Python module API, against the PyTorch transcriptions in recurrent_ref.py: logits within 1e-4 on
plain and padded batches (transformers' RWKV and Mamba ignore the attention mask: the padded row is
computed over its pad tokens, as there), greedy tokens decoded through Foundry's recurrent cache
(one O(1) step per token) equal to the reference recomputing the whole sequence, the reference's
own cached path equal to its whole-sequence path, and one AdamW training step equal to torch's."""
import json

import numpy as np
import pytest
import torch

import recurrent_ref as rr
import test_pretrained as tp

pytestmark = tp.pytestmark

CASES = {
    "rwkv": (rr.RWKV, rr.rwkv_weights, rr.rwkv_forward),
    "rwkv_no_rescale_tied": (dict(rr.RWKV, rescale_every=0, tie_word_embeddings=True, attention_hidden_size=24,
                                  num_hidden_layers=2), rr.rwkv_weights, rr.rwkv_forward),
    "mamba": (rr.MAMBA, rr.mamba_weights, rr.mamba_forward),
    "mamba_untied_bias": (dict(rr.MAMBA, tie_word_embeddings=False, use_bias=True, time_step_rank=3, state_size=4,
                               conv_kernel=3), rr.mamba_weights, rr.mamba_forward),
    "jamba": (rr.JAMBA, rr.jamba_weights, rr.jamba_forward),
    "jamba_tied_mqa": (dict(rr.JAMBA, num_key_value_heads=1, tie_word_embeddings=True, attn_layer_offset=0,
                            expert_layer_offset=0, num_experts_per_tok=1, mamba_dt_rank=3), rr.jamba_weights,
                       rr.jamba_forward),
}


def make(tmp_path, name):
    cfg, make_weights, forward = CASES[name]
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    w = make_weights(cfg, g)
    w_ref = w
    if name == "mamba_untied_bias":
        for i in range(cfg["num_hidden_layers"]):
            p = f"backbone.layers.{i}.mixer."
            w[p + "in_proj.bias"] = torch.randn(w[p + "in_proj.weight"].shape[0], generator=g) * 0.1
            w[p + "out_proj.bias"] = torch.randn(cfg["hidden_size"], generator=g) * 0.1
    folder = str(tmp_path / name)
    tp.write_folder(folder, cfg, w)
    return cfg, w, w_ref, forward, folder, g


@pytest.mark.parametrize("name", sorted(CASES))
def test_logits_and_greedy_match_reference(tmp_path, name):
    cfg, w, w_ref, forward, folder, g = make(tmp_path, name)
    V = cfg["vocab_size"]
    ids = torch.randint(3, V - 1, (2, 11), generator=g)
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, :3] = 0
    ids[1, :3] = 0
    with torch.no_grad():
        ref = forward(cfg, w_ref, ids, mask)
    inputs = tmp_path / "inputs.json"
    out = str(tmp_path / "logits.npy")
    inputs.write_text(json.dumps({"input_ids": ids.tolist(), "attention_mask": mask.tolist()}))
    tp.run("forward", "--model", folder, "--inputs", str(inputs), "--out", out)
    got = np.load(out)
    assert got.shape == (2, 11, V) and got.dtype == np.float32
    err = np.abs(got - ref.numpy()).max()
    assert err <= 1e-4, f"{name}: max abs logits difference {err}"
    inputs.write_text(json.dumps({"input_ids": ids[:1].tolist()}))
    tp.run("forward", "--model", folder, "--inputs", str(inputs), "--out", out)
    assert np.abs(np.load(out)[0] - ref.numpy()[0]).max() <= 1e-4

    # The reference's cached path (prompt, then one token at a time) equals its whole-sequence path.
    prompt = ids[0, :5].tolist()
    with torch.no_grad():
        state = {}
        step = forward(cfg, w_ref, torch.tensor([prompt]), None, state)
        for t in ids[0, 5:].tolist():
            step = torch.cat([step, forward(cfg, w_ref, torch.tensor([[t]]), None, state)], 1)
    assert (step[0] - ref[0]).abs().max() <= 1e-4

    # Greedy: Foundry steps its recurrent state; the reference recomputes the whole sequence.
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(16):
            seq.append(int(forward(cfg, w_ref, torch.tensor([seq]))[0, -1].argmax()))
    p = tp.run("generate", "--model", folder, "--input-ids", ",".join(map(str, prompt)), "--max-new-tokens", "16",
               "--temperature", "0", "--ignore-eos", "--print-ids")
    assert json.loads(p.stdout.strip().splitlines()[-1]) == seq[len(prompt):]
    # Beam search reorders the state with its beams.
    want, _ = tp.reference_beam_search(cfg, w_ref, lambda c, ww, t, m: forward(c, ww, t), prompt, 3, 6, eos=[],
                                       num_return=2)
    p = tp.run("generate", "--model", folder, "--input-ids", ",".join(map(str, prompt)), "--max-new-tokens", "6",
               "--num-beams", "3", "--num-return-sequences", "2", "--ignore-eos", "--print-ids")
    assert json.loads(p.stdout.strip().splitlines()[-1]) == want


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_adamw_step_matches_torch(tmp_path, name):
    import test_train_models as tm
    cfg, w, w_ref, forward, folder, g = make(tmp_path, name)
    train_forward = (lambda c, ww, i, m: rr.rwkv_forward(c, ww, i, m, training=True)) if "rwkv" in name else forward
    ids, mask, labels = tm.make_batch(cfg, g)
    tm.assert_step_matches(cfg, w, train_forward, folder, ids, mask, labels)
