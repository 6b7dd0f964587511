"""T5 v1.0 (ReLU, tied head scaled by d_model^-0.5) and v1.1 (gated GELU, untied head, a deeper
decoder) through `foundry forward` (decoder_input_ids, --output logits | encoder_last_hidden_state),
`foundry generate` (the prompt is the encoder input; decoding starts from decoder_start_token_id
with the cross-attention keys and values computed once; greedy and beam search) and the Python
module (transformers' loss with labels, one AdamW step), against the PyTorch transcription of
transformers v4.40's modeling_t5 in seq2seq_ref.py, on plain and padded batches."""
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import seq2seq_ref as sr
import test_pretrained as tp

pytestmark = tp.pytestmark

CASES = {"t5_v1_0": sr.T5_V10, "t5_v1_1": sr.T5_V11}


def make(tmp_path, name):
    cfg = CASES[name]
    g = torch.Generator().manual_seed(sum(map(ord, name)))
    w = sr.t5_weights(cfg, g)
    folder = str(tmp_path / name)
    tp.write_folder(folder, cfg, w)
    return cfg, w, folder, g


def greedy_reference(cfg, w, prompt, steps, eos=None):
    enc = sr.encode(cfg, w, torch.tensor([prompt]))
    seq = [cfg["decoder_start_token_id"]]
    for _ in range(steps):
        nxt = int(sr.decode(cfg, w, torch.tensor([seq]), enc)[0, -1].argmax())
        seq.append(nxt)
        if nxt == eos:
            break
    return seq[1:]


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_and_generation_match_transformers(tmp_path, name):
    cfg, w, folder, g = make(tmp_path, name)
    V = cfg["vocab_size"]
    ids = torch.randint(2, V, (2, 9), generator=g)
    mask = torch.ones(2, 9, dtype=torch.long)
    ids[1, 6:], mask[1, 6:] = 0, 0  # right padding, as T5's tokenizer pads
    dec = torch.randint(2, V, (2, 5), generator=g)
    dec[:, 0] = cfg["decoder_start_token_id"]
    with torch.no_grad():
        logits, enc = sr.t5_forward(cfg, w, ids, mask, dec)
    inputs = tmp_path / "in.json"
    inputs.write_text(json.dumps({"input_ids": ids.tolist(), "attention_mask": mask.tolist(),
                                  "decoder_input_ids": dec.tolist()}))
    out = str(tmp_path / "out.npy")
    tp.run("forward", "--model", folder, "--inputs", str(inputs), "--out", out)
    got = np.load(out)
    assert got.shape == (2, 5, V)
    assert np.abs(got - logits.numpy()).max() <= 1e-4
    tp.run("forward", "--model", folder, "--inputs", str(inputs), "--out", out, "--output", "encoder_last_hidden_state")
    keep = mask.bool().numpy()
    assert np.abs(np.load(out)[keep] - enc.numpy()[keep]).max() <= 1e-4
    # Without decoder inputs the message says what is missing.
    inputs.write_text(json.dumps({"input_ids": ids.tolist()}))
    p = tp.run("forward", "--model", folder, "--inputs", str(inputs), "--out", out, check=False)
    assert p.returncode == 1 and "decoder_input_ids" in p.stderr

    prompt = ids[0].tolist()
    with torch.no_grad():
        want = greedy_reference(cfg, w, prompt, 12)
    p = tp.run("generate", "--model", folder, "--input-ids", ",".join(map(str, prompt)), "--max-new-tokens", "12",
               "--temperature", "0", "--ignore-eos", "--print-ids")
    assert json.loads(p.stdout.strip().splitlines()[-1]) == want
    # EOS (id 1) ends generation as configured.
    with torch.no_grad():
        want_eos = greedy_reference(cfg, w, prompt, 12, eos=want[3])
    cfg_eos = dict(cfg, eos_token_id=want[3])
    tp.write_folder(folder, cfg_eos, w)
    p = tp.run("generate", "--model", folder, "--input-ids", ",".join(map(str, prompt)), "--max-new-tokens", "12",
               "--temperature", "0", "--print-ids")
    assert json.loads(p.stdout.strip().splitlines()[-1]) == want_eos

    # Beam search over the decoder, the encoder output shared by the beams.
    with torch.no_grad():
        enc0 = sr.encode(cfg, w, torch.tensor([prompt]))
        beams, _ = tp.reference_beam_search(
            cfg, w, lambda c, ww, t, m: sr.decode(c, ww, t, enc0.expand(t.shape[0], -1, -1)),
            [cfg["decoder_start_token_id"]], 3, 6, eos=[], num_return=2)
    tp.write_folder(folder, cfg, w)
    p = tp.run("generate", "--model", folder, "--input-ids", ",".join(map(str, prompt)), "--max-new-tokens", "6",
               "--num-beams", "3", "--num-return-sequences", "2", "--ignore-eos", "--print-ids")
    assert json.loads(p.stdout.strip().splitlines()[-1]) == beams


@pytest.mark.parametrize("name", sorted(CASES))
def test_loss_and_one_adamw_step_match_torch(tmp_path, name):
    import test_train_models as tm
    foundry = pytest.importorskip("foundry")
    cfg, w, folder, g = make(tmp_path, name)
    V = cfg["vocab_size"]
    ids = torch.randint(2, V, (2, 8), generator=g)
    mask = torch.ones(2, 8, dtype=torch.long)
    ids[1, 5:], mask[1, 5:] = 0, 0
    labels = torch.randint(2, V, (2, 6), generator=g)
    labels[1, 4:] = -100
    dec = torch.cat([torch.zeros(2, 1, dtype=torch.long), labels[:, :-1]], 1).masked_fill(
        torch.cat([torch.zeros(2, 1, dtype=torch.bool), labels[:, :-1] == -100], 1), 0)  # shift_right
    leaves = {k: v.clone().requires_grad_() for k, v in w.items()}
    logits, _ = sr.t5_forward(cfg, leaves, ids, mask, dec)
    loss = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100)
    loss.backward()
    want = {k: v.grad.numpy() for k, v in leaves.items()}

    model = foundry.models.from_pretrained(folder)
    assert type(model).__name__ == "Seq2SeqModel"
    # Decoder inputs shifted from the labels inside the model.
    out = tm.assert_module_step_matches(
        model, lambda m: m(tm.ft(ids), attention_mask=tm.ft(mask), labels=tm.ft(labels)), w, loss.item(), want)
    assert np.abs(out.logits.detach().numpy() - logits.detach().numpy()).max() <= 1e-4
