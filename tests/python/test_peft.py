"""LoRA (foundry.peft) against PEFT's math, written here in PyTorch 1.13 and NumPy (PEFT itself
can't be installed here).

The base models and their references are test_pretrained.py's (HF v4.40 transcriptions). A LoRA
layer on projection W adds scaling * B A (A [r, in], B [out, r]; scaling = alpha / r, or alpha /
sqrt(r) with rsLoRA; GPT-2's Conv1D weights are [in, out], so the delta is transposed there:
PEFT's fan_in_fan_out). The references run the frozen base with W + scaling * B A, A and B being
torch leaves, which is PEFT's forward (x W^T + scaling * B(A(x))) up to float rounding.
"""
import json
import os

import numpy as np
import pytest
import torch

foundry = pytest.importorskip("foundry")
if not hasattr(foundry, "peft"):
    pytest.skip("foundry is not built", allow_module_level=True)
from foundry import peft  # noqa: E402

import bnb_ref  # noqa: E402
from test_pretrained import CASES, write_folder  # noqa: E402
from test_train_models import hf_loss, make_batch, train_config  # noqa: E402


def ft(t):
    return foundry.tensor(np.asarray(t).tolist())


def base_folder(tmp_path, name, **overrides):
    cfg, make_weights, forward = CASES[name]
    cfg = dict(train_config(cfg), **overrides)
    g = torch.Generator().manual_seed(sum(map(ord, name)) + 7)
    w = make_weights(cfg, g)
    folder = str(tmp_path / name)
    write_folder(folder, cfg, w)
    return cfg, w, forward, folder, make_batch(cfg, g)


def lora_tensors(model):
    """{module path in the base model: (A, B)} of the active adapter, as numpy."""
    out = {}
    for n, p in model.named_parameters():
        if ".lora_A.default." in n or ".lora_B.default." in n:
            path = n[len("base_model.model."):].split(".lora_")[0]
            a, b = out.get(path, (None, None))
            v = p.detach().numpy().copy()
            out[path] = (v, b) if ".lora_A." in n else (a, v)
    return out


def effective_weights(w, loras, scaling, conv1d, dtype=torch.float32, leaves=None):
    """Base weights with scaling * B A added where a LoRA sits (transposed for Conv1D)."""
    eff = dict(w)
    for path, (a, b) in loras.items():
        A, B = (leaves[path] if leaves else (torch.tensor(a, dtype=dtype), torch.tensor(b, dtype=dtype)))
        delta = scaling * (B @ A)
        eff[path + ".weight"] = w[path + ".weight"].to(dtype) + (delta.T if conv1d else delta)
    return eff


# ---- forward, merge, unmerge ---------------------------------------------------------------------

@pytest.mark.parametrize("name,targets,rslora", [
    ("llama_gqa_bias_tied", ["q_proj", "v_proj"], False),  # GQA: v_proj is [kv_heads * head_dim, hidden]
    ("gpt2", None, True),                                  # c_attn (Conv1D, fan_in_fan_out), rsLoRA
    ("falcon_multi_query", None, False),                   # query_key_value
    ("phi", "all-linear", False),
])
def test_forward_matches_formula_in_float64(tmp_path, name, targets, rslora):
    cfg, w, forward, folder, (ids, mask, labels) = base_folder(tmp_path, name)
    base = foundry.models.from_pretrained(folder)
    config = peft.LoraConfig(r=4, lora_alpha=6, target_modules=targets, use_rslora=rslora,
                             init_lora_weights=False)  # random B: a non-zero adapter
    model = peft.get_peft_model(base, config)
    loras = lora_tensors(model)
    assert loras, "no LoRA layer was made"
    if targets == "all-linear":
        assert not any(p.endswith(("lm_head", "embed_out")) for p in loras)
        assert len(loras) == cfg["num_hidden_layers"] * 6  # q_proj, k_proj, v_proj, dense, fc1, fc2
    scaling = 6 / (np.sqrt(4) if rslora else 4)
    conv1d = name == "gpt2"
    got = model(ft(ids), attention_mask=ft(mask)).logits.detach().numpy()
    # W + scaling * B A in float64 NumPy, then the reference model (float32) with those weights.
    eff64 = {}
    for path, (a, b) in loras.items():
        delta = scaling * (b.astype(np.float64) @ a.astype(np.float64))
        eff64[path] = w[path + ".weight"].double().numpy() + (delta.T if conv1d else delta)
    eff = dict(w, **{p + ".weight": torch.tensor(v, dtype=torch.float32) for p, v in eff64.items()})
    want = forward(cfg, eff, ids, mask).detach().numpy()
    keep = mask.bool().numpy()
    assert np.abs(got[keep] - want[keep]).max() < 1e-4
    # merged == unmerged, the merged weights are the formula's, and unmerge restores the base
    before = {n: p.detach().numpy().copy() for n, p in model.named_parameters() if ".base_layer." in n}
    model.merge_adapter()
    for path, v in eff64.items():
        merged_w = dict(model.named_parameters())[f"base_model.model.{path}.base_layer.weight"].detach().numpy()
        assert np.abs(merged_w - v).max() < 1e-6, path
    merged = model(ft(ids), attention_mask=ft(mask)).logits.detach().numpy()
    assert np.abs(merged[keep] - got[keep]).max() < 1e-5
    model.unmerge_adapter()
    for n, p in model.named_parameters():
        if n in before:
            assert np.abs(p.detach().numpy() - before[n]).max() < 1e-6, n
    with model.disable_adapter():
        plain = model(ft(ids), attention_mask=ft(mask)).logits.detach().numpy()
    ref = forward(cfg, w, ids, mask).detach().numpy()
    assert np.abs(plain[keep] - ref[keep]).max() < 1e-4
    out = model.merge_and_unload()
    assert np.abs(out(ft(ids), attention_mask=ft(mask)).logits.detach().numpy()[keep] - got[keep]).max() < 1e-5
    assert all(".lora_" not in n and ".base_layer" not in n for n, _ in out.named_parameters())


# ---- training: five AdamW steps against PyTorch ------------------------------------------------------

@pytest.mark.parametrize("name", ["llama_gqa_bias_tied", "gpt2", "mistral_window"])
def test_five_adamw_steps_match_torch(tmp_path, name):
    cfg, w, forward, folder, (ids, mask, labels) = base_folder(tmp_path, name)
    base = foundry.models.from_pretrained(folder)
    model = peft.get_peft_model(base, peft.LoraConfig(r=8, lora_alpha=16, init_lora_weights=False))
    model.train()
    loras = lora_tensors(model)
    conv1d = name == "gpt2"
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert len(trainable) == 2 * len(loras)
    opt = foundry.optim.AdamW(trainable, lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    losses = []
    for _ in range(5):
        out = model(ft(ids), attention_mask=ft(mask), labels=ft(labels))
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(out.loss.item())
    # The frozen base got no gradient and did not move.
    for n, p in model.named_parameters():
        if ".lora_" not in n:
            assert p.grad is None and not p.requires_grad, n

    leaves = {k: (torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)) for k, (a, b) in loras.items()}
    ref_opt = torch.optim.AdamW([t for ab in leaves.values() for t in ab], lr=1e-2, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=0.0)
    ref_losses = []
    for _ in range(5):
        eff = effective_weights(w, loras, 16 / 8, conv1d, leaves=leaves)
        loss = hf_loss(forward(cfg, eff, ids, mask), labels)
        ref_opt.zero_grad()
        loss.backward()
        ref_opt.step()
        ref_losses.append(loss.item())
    assert np.abs(np.array(losses) - np.array(ref_losses)).max() < 1e-5, (losses, ref_losses)
    after = lora_tensors(model)
    for k, (a, b) in leaves.items():
        assert np.abs(after[k][0] - a.detach().numpy()).max() < 1e-5, k
        assert np.abs(after[k][1] - b.detach().numpy()).max() < 1e-5, k


def test_issue_script_runs_as_written(tmp_path):
    """The PeftModel round trip of the issue: load an adapter, train it, save it, merge."""
    cfg, w, forward, folder, (ids, mask, labels) = base_folder(tmp_path, "llama")
    start = peft.get_peft_model(foundry.models.from_pretrained(folder), peft.LoraConfig(r=4, lora_alpha=8))
    start.save_pretrained(str(tmp_path / "adapter"))
    base = foundry.models.from_pretrained(folder)
    model = peft.PeftModel.from_pretrained(base, str(tmp_path / "adapter"), is_trainable=True)
    ids = ft(ids)
    opt = foundry.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, betas=(0.9, 0.999),
                              eps=1e-8, weight_decay=0.0)
    first = None
    for _ in range(5):
        out = model(ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad()
        first = first if first is not None else out.loss.item()
    assert out.loss.item() < first
    model.save_pretrained(str(tmp_path / "out"))
    merged = model.merge_and_unload()
    assert isinstance(merged, foundry.models.PretrainedModel)
    again = peft.PeftModel.from_pretrained(foundry.models.from_pretrained(folder), str(tmp_path / "out"))
    a = again(ids).logits.detach().numpy()
    b = merged(ids).logits.detach().numpy()
    assert np.abs(a - b).max() < 1e-5


# ---- files -----------------------------------------------------------------------------------------

def test_files_have_peft_layout_and_round_trip(tmp_path):
    cfg, w, forward, folder, (ids, mask, labels) = base_folder(tmp_path, "gpt2")
    model = peft.get_peft_model(foundry.models.from_pretrained(folder),
                                peft.LoraConfig(r=2, lora_alpha=4, lora_dropout=0.1, init_lora_weights=False))
    model.save_pretrained(str(tmp_path / "a"))
    conf = json.load(open(tmp_path / "a" / "adapter_config.json"))
    # Exactly PEFT 0.11's LoraConfig keys (it raises on others).
    assert sorted(conf) == sorted([
        "alpha_pattern", "auto_mapping", "base_model_name_or_path", "bias", "fan_in_fan_out", "inference_mode",
        "init_lora_weights", "layer_replication", "layers_pattern", "layers_to_transform", "loftq_config",
        "lora_alpha", "lora_dropout", "megatron_config", "megatron_core", "modules_to_save", "peft_type", "r",
        "rank_pattern", "revision", "target_modules", "task_type", "use_dora", "use_rslora"])
    assert conf["peft_type"] == "LORA" and conf["fan_in_fan_out"] is True and conf["target_modules"] == ["c_attn"]
    st = foundry.load_file(str(tmp_path / "a" / "adapter_model.safetensors"))
    assert sorted(st) == sorted(f"base_model.model.transformer.h.{i}.attn.c_attn.lora_{x}.weight"
                                for i in range(cfg["n_layer"]) for x in "AB")
    assert tuple(st["base_model.model.transformer.h.0.attn.c_attn.lora_A.weight"].shape) == (2, cfg["n_embd"])
    assert tuple(st["base_model.model.transformer.h.0.attn.c_attn.lora_B.weight"].shape) == (3 * cfg["n_embd"], 2)
    again = peft.PeftModel.from_pretrained(foundry.models.from_pretrained(folder), str(tmp_path / "a"))
    assert not again.training and not any(p.requires_grad for p in again.parameters())
    model.eval()
    x = ft(ids)
    assert np.abs(again(x).logits.detach().numpy() - model(x).logits.detach().numpy()).max() < 1e-6


def write_peft_adapter(path, cfg_overrides, tensors):
    """An adapter folder laid out as PEFT writes it (json.dumps(sort_keys=True), safetensors via torch)."""
    os.makedirs(path, exist_ok=True)
    conf = {"alpha_pattern": {}, "auto_mapping": None, "base_model_name_or_path": "x", "bias": "none",
            "fan_in_fan_out": False, "inference_mode": True, "init_lora_weights": True, "layer_replication": None,
            "layers_pattern": None, "layers_to_transform": None, "loftq_config": {}, "lora_alpha": 16,
            "lora_dropout": 0.05, "megatron_config": None, "megatron_core": "megatron.core", "modules_to_save": None,
            "peft_type": "LORA", "r": 4, "rank_pattern": {}, "revision": None, "target_modules": ["v_proj", "q_proj"],
            "task_type": "CAUSAL_LM", "use_dora": False, "use_rslora": False}
    conf.update(cfg_overrides)
    with open(os.path.join(path, "adapter_config.json"), "w") as f:
        json.dump(conf, f, indent=2, sort_keys=True)
    foundry.save_file({k: foundry.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for k, v in tensors.items()},
                      os.path.join(path, "adapter_model.safetensors"), metadata={"format": "pt"})


def test_loads_an_adapter_written_the_peft_way(tmp_path):
    cfg, w, forward, folder, (ids, mask, labels) = base_folder(tmp_path, "llama")
    rng = np.random.default_rng(0)
    H = cfg["hidden_size"]
    tensors, loras = {}, {}
    for i in range(cfg["num_hidden_layers"]):
        for proj in ("q_proj", "v_proj"):
            path = f"model.layers.{i}.self_attn.{proj}"
            a, b = rng.normal(0, 0.1, (4, H)), rng.normal(0, 0.1, (H, 4))
            tensors[f"base_model.model.{path}.lora_A.weight"] = a
            tensors[f"base_model.model.{path}.lora_B.weight"] = b
            loras[path] = (a.astype(np.float32), b.astype(np.float32))
    write_peft_adapter(str(tmp_path / "ad"), {}, tensors)
    model = peft.PeftModel.from_pretrained(foundry.models.from_pretrained(folder), str(tmp_path / "ad"))
    got = model(ft(ids), attention_mask=ft(mask)).logits.detach().numpy()
    want = forward(cfg, effective_weights(w, loras, 16 / 4, False), ids, mask).detach().numpy()
    keep = mask.bool().numpy()
    assert np.abs(got[keep] - want[keep]).max() < 1e-4


@pytest.mark.parametrize("breakage,message", [
    ("other_arch", "c_attn"),
    ("shape", "shape"),
    ("missing_tensor", "no tensor for"),
    ("no_weights", "adapter_model.safetensors"),
    ("ia3", "IA3"),
    ("bad_json", "adapter_config.json"),
    ("truncated", "adapter_model.safetensors"),
])
def test_bad_adapters_are_refused_clearly(tmp_path, breakage, message):
    cfg, w, forward, folder, _ = base_folder(tmp_path, "llama")
    H = cfg["hidden_size"]
    tensors = {}
    for i in range(cfg["num_hidden_layers"]):
        for proj in ("q_proj", "v_proj"):
            tensors[f"base_model.model.model.layers.{i}.self_attn.{proj}.lora_A.weight"] = np.zeros((4, H))
            tensors[f"base_model.model.model.layers.{i}.self_attn.{proj}.lora_B.weight"] = np.zeros((H, 4))
    overrides = {}
    d = str(tmp_path / "ad")
    if breakage == "other_arch":
        overrides = {"target_modules": ["c_attn"], "fan_in_fan_out": True}
    if breakage == "shape":
        tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"] = np.zeros((4, H + 1))
    if breakage == "missing_tensor":
        del tensors["base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight"]
    if breakage == "ia3":
        overrides = {"peft_type": "IA3"}
    write_peft_adapter(d, overrides, tensors)
    if breakage == "no_weights":
        os.remove(os.path.join(d, "adapter_model.safetensors"))
    if breakage == "bad_json":
        open(os.path.join(d, "adapter_config.json"), "w").write("{not json")
    if breakage == "truncated":
        p = os.path.join(d, "adapter_model.safetensors")
        data = open(p, "rb").read()
        open(p, "wb").write(data[: len(data) // 2])
    base = foundry.models.from_pretrained(folder)
    names = [n for n, _ in base.named_parameters()]
    with pytest.raises(Exception, match=message):
        peft.PeftModel.from_pretrained(base, d)
    # Nothing half-done: the base model is as it was.
    assert [n for n, _ in base.named_parameters()] == names


def test_several_adapters_bias_and_modules_to_save(tmp_path):
    cfg, w, forward, folder, (ids, mask, labels) = base_folder(tmp_path, "llama_gqa_bias_tied")
    base = foundry.models.from_pretrained(folder)
    model = peft.get_peft_model(base, peft.LoraConfig(r=2, lora_alpha=2, bias="lora_only", init_lora_weights=False))
    names = {n for n, p in model.named_parameters() if p.requires_grad}
    assert "base_model.model.model.layers.0.self_attn.q_proj.base_layer.bias" in names
    assert "base_model.model.model.layers.0.self_attn.k_proj.bias" not in names
    x = ft(ids)
    first = model(x).logits.detach().numpy()
    model.add_adapter("other", peft.LoraConfig(r=3, lora_alpha=3, target_modules=["o_proj"], init_lora_weights=False))
    assert model.active_adapter == "default"
    assert np.abs(model(x).logits.detach().numpy() - first).max() < 1e-6
    model.set_adapter("other")
    other = model(x).logits.detach().numpy()
    assert np.abs(other - first).max() > 1e-4
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".other." in n for n in trainable)
    model.save_pretrained(str(tmp_path / "multi"))
    assert os.path.exists(tmp_path / "multi" / "other" / "adapter_model.safetensors")

    saved = peft.get_peft_model(foundry.models.from_pretrained(folder),
                                peft.LoraConfig(r=2, target_modules=["q_proj"], modules_to_save=["lm_head"]))
    keys = [n for n, p in saved.named_parameters() if p.requires_grad]
    assert "base_model.model.lm_head.modules_to_save.default.weight" in keys
    saved.save_pretrained(str(tmp_path / "mts"))
    st = foundry.load_file(str(tmp_path / "mts" / "adapter_model.safetensors"))
    assert "base_model.model.lm_head.weight" in st


# ---- QLoRA -------------------------------------------------------------------------------------------

def test_qlora_gradients_equal_those_through_the_dequantized_base(tmp_path):
    cfg, w, forward, folder, (ids, mask, labels) = base_folder(tmp_path, "llama")
    # The reference base: every projection whose rows are whole 64-blocks through bitsandbytes'
    # NF4 with double quantization and back (what quantize_base keeps), the rest as it was.
    deq = dict(w)
    quantized = 0
    for k, v in w.items():
        if k.endswith("_proj.weight") and v.shape[1] % 64 == 0:
            d = bnb_ref.quantize_nf4(v.numpy().astype(np.float32), double_quant=True)
            deq[k] = torch.tensor(bnb_ref.dequantize_nf4(d))
            quantized += 1
    ref_folder = str(tmp_path / "dequantized")
    write_folder(ref_folder, cfg, deq)

    q_base = foundry.models.from_pretrained(folder)
    assert peft.quantize_base(q_base, "nf4") == quantized
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    q_model = peft.get_peft_model(q_base, config)
    f_model = peft.get_peft_model(foundry.models.from_pretrained(ref_folder), config)
    start = lora_tensors(q_model)
    for n, p in f_model.named_parameters():  # same adapter in both
        if ".lora_" in n:
            path = n[len("base_model.model."):].split(".lora_")[0]
            p.detach().numpy()[...] = start[path][0 if ".lora_A." in n else 1]
    grads = []
    for m in (q_model, f_model):
        m.train()
        out = m(ft(ids), attention_mask=ft(mask), labels=ft(labels))
        out.loss.backward()
        grads.append({n: p.grad.numpy().copy() for n, p in m.named_parameters() if p.requires_grad})
        grads[-1]["loss"] = np.array(out.loss.item())
    assert abs(grads[0]["loss"] - grads[1]["loss"]) < 1e-5
    for n, g in grads[1].items():
        err = np.abs(grads[0][n] - g).max() / max(np.abs(g).max(), 1e-12)
        assert err < 1e-5, f"{n}: relative gradient difference {err}"
