"""bf16 checkpoints packed without loss for inference (LoadOptions::pack_bf16; quant::WeightLayout::PackedBF16,
src/quant/bf16_packed.h): a folder or GGUF file computed in bf16 reads its matrices packed in ~12.4 bits a
weight, computes the numbers the unpacked model computes, and is frozen
as a quantized model does. `foundry generate --dtype native` loads this way."""
import json
import os

import numpy as np
import pytest
import torch

import foundry
import test_pretrained as tp

# k a multiple of 64 everywhere (the packing's block), a tied 4096-row embedding: the largest matrix.
CFG = dict(tp.LLAMA, vocab_size=4096, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
           num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)


def bf16_folder(path, seed=3):
    w = tp.llama_weights(CFG, torch.Generator().manual_seed(seed))
    w = {k: v.to(torch.bfloat16) for k, v in w.items() if k != "lm_head.weight"}
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(CFG, f)
    st = {k: ("BF16", list(v.shape), v.contiguous().view(torch.int16).numpy().tobytes()) for k, v in w.items()}
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(tp.write_st(st, {"format": "pt"}))
    return w


def logits(model, ids):
    with foundry.no_grad():
        return model(foundry.tensor(ids)).float().numpy()


def test_packed_bf16_folder_computes_the_unpacked_numbers(tmp_path):
    """(The packed copies' size: tests/unit/models_test.cpp, WeightProductsPackBF16MatricesWithoutLoss.)"""
    folder = str(tmp_path / "bf16")
    w = bf16_folder(folder)
    dense = foundry.models.from_pretrained(folder, dtype="bfloat16")
    packed = foundry.models.from_pretrained(folder, dtype="bfloat16", pack_bf16=True)
    assert (dense.weight_quantization, packed.weight_quantization) == ("", "bf16")
    # The parameters themselves are untouched: the file's values (their pages read again once packed).
    params = dict(packed.named_parameters())
    for name, v in w.items():
        assert np.array_equal(params[name].detach().float().numpy(), v.float().numpy()), name
    # Decode (up to 16 rows a product, one at a time) sums as the plain rows do; prefill (more rows:
    # the bf16 GEMM over the unpacked matrix) within bf16 rounding of the plain rows' GEMM.
    prompt = [[3, 17, 99, 1000, 4000, 12, 64, 5, 6, 7, 8, 9, 10, 11, 13, 14, 15, 16, 18, 19, 20, 21, 22, 23]]
    # (Where the CPU has no AVX-512 the copies keep the plain rows: the same kernel, the same sums.)
    assert np.array_equal(logits(dense, [[17]]), logits(packed, [[17]]))
    full_dense, full_packed = logits(dense, prompt), logits(packed, prompt)
    assert np.abs(full_dense - full_packed).max() <= 2e-2 * np.abs(full_dense).max()
    assert packed.generate(prompt[0], max_new_tokens=12, ignore_eos=True) == \
        dense.generate(prompt[0], max_new_tokens=12, ignore_eos=True)
    # Frozen, as a quantized model is; its state_dict is the checkpoint's.
    assert not any(p.requires_grad for _, p in packed.named_parameters())
    sd = packed.state_dict()
    assert np.array_equal(sd["model.embed_tokens.weight"].float().numpy(), w["model.embed_tokens.weight"].float().numpy())


def test_packing_applies_to_bf16_computation_only(tmp_path):
    """float32 computation of a bf16 checkpoint is untouched by pack_bf16 (it converts the weights), and so
    is a float32 checkpoint computed in bf16 (no bf16 matrices to read)."""
    folder = str(tmp_path / "bf16")
    bf16_folder(folder)
    a = foundry.models.from_pretrained(folder)
    b = foundry.models.from_pretrained(folder, pack_bf16=True)
    assert b.weight_quantization == ""
    f32 = str(tmp_path / "f32")
    tp.write_folder(f32, CFG, {k: v.float() for k, v in tp.llama_weights(CFG, torch.Generator().manual_seed(3)).items()
                               if k != "lm_head.weight"})
    assert foundry.models.from_pretrained(f32, dtype="bfloat16", pack_bf16=True).weight_quantization == ""
    assert np.array_equal(logits(a, [[5, 6, 7]]), logits(b, [[5, 6, 7]]))
    assert any(p.requires_grad for _, p in b.named_parameters()) == any(p.requires_grad for _, p in a.named_parameters())


def test_gguf_bf16_file_packed_matches_the_folder(tmp_path):
    if not os.path.exists(tp.FOUNDRY):
        pytest.skip("foundry CLI not built at " + tp.FOUNDRY)
    folder = str(tmp_path / "bf16")
    w = bf16_folder(folder)
    gguf = str(tmp_path / "m.gguf")
    tp.run("convert", "--model", folder, "--to", gguf, "--type", "bf16")
    from_folder = foundry.models.from_pretrained(folder, dtype="bfloat16", pack_bf16=True)
    from_file = foundry.models.from_pretrained(gguf, dtype="bfloat16", pack_bf16=True)
    with foundry.no_grad():  # both compute in bf16
        assert str(from_file(foundry.tensor([[5]])).dtype) == str(from_folder(foundry.tensor([[5]])).dtype)
    # The same bytes packed the same way (Q and K rows permuted back as llama.cpp stores them).
    assert np.array_equal(logits(from_file, [[17]]), logits(from_folder, [[17]]))
    assert from_file.generate([3, 17, 99], max_new_tokens=10, ignore_eos=True) == \
        from_folder.generate([3, 17, 99], max_new_tokens=10, ignore_eos=True)
    # The adopted matrices' state_dict unpacks to the file's bf16 values exactly.
    sd = from_file.state_dict()
    for name in ("model.layers.1.mlp.down_proj.weight", "model.embed_tokens.weight"):
        assert np.array_equal(sd[name].float().numpy(), w[name].float().numpy()), name


def test_generate_dtype_native_packs_and_gives_the_same_tokens(tmp_path, monkeypatch):
    """The CLI's inference commands pack a bf16 checkpoint run in bf16; FOUNDRY_ROW_LAYOUT=1 keeps the plain
    rows (the comparison): the same greedy tokens."""
    if not os.path.exists(tp.FOUNDRY):
        pytest.skip("foundry CLI not built at " + tp.FOUNDRY)
    folder = str(tmp_path / "bf16")
    bf16_folder(folder)
    args = ("generate", "--model", folder, "--dtype", "native", "--input-ids", "3,17,99,1000", "--max-new-tokens", "12",
            "--ignore-eos", "--print-ids")
    packed = tp.run(*args).stdout.strip().splitlines()[-1]
    monkeypatch.setenv("FOUNDRY_ROW_LAYOUT", "1")
    rows = tp.run(*args).stdout.strip().splitlines()[-1]
    assert packed == rows and len(json.loads(packed)) == 12


def test_a_quantized_folder_is_never_packed(tmp_path):
    """A `foundry quantize` folder (bf16 norms and embeddings beside int8 / nf4 rows) computed in bf16 with
    pack_bf16 keeps its dequantized matrices: they are not a bf16 checkpoint's values."""
    if not os.path.exists(tp.FOUNDRY):
        pytest.skip("foundry CLI not built at " + tp.FOUNDRY)
    folder = str(tmp_path / "bf16")
    bf16_folder(folder)
    out = str(tmp_path / "q")
    tp.run("quantize", "--model", folder, "--out", out, "--type", "int8")
    plain = foundry.models.from_pretrained(out, dtype="bfloat16")
    asked = foundry.models.from_pretrained(out, dtype="bfloat16", pack_bf16=True)
    assert asked.weight_quantization == ""
    assert np.array_equal(logits(plain, [[5, 6, 7]]), logits(asked, [[5, 6, 7]]))
