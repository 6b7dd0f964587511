"""FOUNDRY_MAX_ISA caps the instruction set the kernels use (to run as an AVX2-only or SSE4 CPU would):
foundry.cpu_capability() names the capped target, and quantized models give the same logits under
every cap (the AVX-512 VNNI, AVX2 and Highway kernels sum the same integer products), on the
prefill's GEMM and on decode's matrix-vector path; a bfloat16 model's too."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import foundry
from test_safetensors import write_st

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYDIR = os.environ.get("FOUNDRY_PYTHON_DIR", os.path.join(ROOT, "build", "python"))

# hidden 256: a multiple of q4_K's 256-value super-blocks. Vocabulary 123: the output matrix's last 3
# rows lie past its groups of 8 rows (in the row layout, as GPT-2's 50257th).
LLAMA = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=123, hidden_size=256,
             intermediate_size=512, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0, hidden_act="silu",
             tie_word_embeddings=False, eos_token_id=2, bos_token_id=1)

SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import foundry
out = {"capability": foundry.cpu_capability()}
ids = foundry.tensor([[5, 17, 3, 99, 42, 8, 1, 77, 23, 64, 11, 30]])
for fmt in ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_K", "q5_K", "q6_K", "nf4"):
    m = foundry.models.from_pretrained(sys.argv[2], quantize=fmt, quantized_prefill="integer")
    out[fmt] = {"prefill": m(ids).detach().numpy().tolist(), "decode": m(ids[:, :1]).detach().numpy().tolist()}
m = foundry.models.from_pretrained(sys.argv[2], dtype=foundry.bfloat16)
out["bf16 model"] = {"prefill": m(ids).float().detach().numpy().tolist()}
print(json.dumps(out))
"""


def shapes(c):
    C, I, V, H, Hkv = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_attention_heads"], \
        c["num_key_value_heads"]
    D = C // H
    s = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,), "lm_head.weight": (V, C)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        s.update({p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
                  p + "self_attn.q_proj.weight": (H * D, C), p + "self_attn.k_proj.weight": (Hkv * D, C),
                  p + "self_attn.v_proj.weight": (Hkv * D, C), p + "self_attn.o_proj.weight": (C, H * D),
                  p + "mlp.gate_proj.weight": (I, C), p + "mlp.up_proj.weight": (I, C),
                  p + "mlp.down_proj.weight": (C, I)})
    return s


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = tmp_path_factory.mktemp("isa_llama")
    rng = np.random.default_rng(3)
    st = {}
    for name, shape in sorted(shapes(LLAMA).items()):
        a = 1 + 0.1 * rng.standard_normal(shape) if len(shape) == 1 else 0.05 * rng.standard_normal(shape)
        st[name] = ("F32", list(shape), a.astype("<f4").tobytes())
    with open(path / "config.json", "w") as f:
        json.dump(LLAMA, f)
    with open(path / "model.safetensors", "wb") as f:
        f.write(write_st(st, {"format": "pt"}))
    return str(path)


def run_capped(cap, folder):
    env = dict(os.environ)
    env.pop("FOUNDRY_MAX_ISA", None)
    if cap:
        env["FOUNDRY_MAX_ISA"] = cap
    p = subprocess.run([sys.executable, "-c", SCRIPT, PYDIR, folder], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_capability_names_the_capped_target(folder):
    native = foundry.cpu_capability()
    assert native and native == native.strip()
    if "AVX2" not in native and "AVX3" not in native:
        pytest.skip(f"not an x86 CPU with AVX2 ({native})")
    assert run_capped("avx2", folder)["capability"] == "AVX2"
    assert run_capped("sse4", folder)["capability"] == "SSE4"


def test_quantized_logits_agree_under_every_cap(folder):
    if "AVX" not in foundry.cpu_capability():
        pytest.skip("not an x86 CPU with AVX2")
    runs = {cap: run_capped(cap, folder) for cap in ("", "avx2", "sse4")}
    for fmt in ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_K", "q5_K", "q6_K", "nf4"):
        # Prefill's 12 rows: the panel GEMMs natively and under the AVX2 cap, decode's Highway
        # kernel a row at a time under SSE4. nf4 has no integer GEMM: its prefill is bf16 where
        # the CPU has bf16 dot products, float32 under the caps.
        for path in ("prefill", "decode") if fmt != "nf4" else ("decode",):
            want = np.array(runs[""][fmt][path])
            scale = np.abs(want).max()
            for cap in ("avx2", "sse4"):
                got = np.array(runs[cap][fmt][path])
                assert got.shape == want.shape
                # The same integer block products, summed in another float order per kernel (nf4's
                # x86 kernels take the codebook as int16, the others as float32; a matrix in groups
                # of 8 rows sums a block in one int32 where the row kernels keep four lanes; SSE4
                # has no FMA). The next product quantizes its activation to q8_0 / q8_K, so a sum
                # that lands on the other side of a rounding step moves a level at one position, and
                # attention carries it to the positions after it: allowed from one position on
                # (q5_1's groups under the AVX2 cap: 1.3e-3 of the scale at position 5; q5_K under
                # SSE4: 1.6e-2 at positions 9-11, every earlier position within 5e-7).
                err = np.abs(got - want).reshape(-1, got.shape[-1]).max(axis=1)
                off = np.nonzero(err > 1e-4 * scale)[0]
                if path == "decode" or len(off) == 0:
                    assert len(off) == 0, (fmt, path, cap, err, scale)
                else:
                    assert list(off) == list(range(off[0], len(err))), (fmt, path, cap, err, scale)
                    assert err.max() <= 2e-2 * scale, (fmt, path, cap, err.max(), scale)


def test_bfloat16_model_agrees_under_every_cap(folder):
    """A bfloat16 model's GEMMs: oneDNN's bf16 kernels natively (AVX512-BF16 here), float32 copies
    of the operands in their own layouts where the CPU has no bf16 (the caps); the same bf16 inputs,
    another accumulation order, each op rounded to bf16 (~0.4% a step)."""
    if "AVX" not in foundry.cpu_capability():
        pytest.skip("not an x86 CPU with AVX2")
    runs = {cap: run_capped(cap, folder) for cap in ("", "avx2", "sse4")}
    want = np.array(runs[""]["bf16 model"]["prefill"])
    scale = np.abs(want).max()
    for cap in ("avx2", "sse4"):
        got = np.array(runs[cap]["bf16 model"]["prefill"])
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 3e-2 * scale, (cap, np.abs(got - want).max(), scale)
        assert np.corrcoef(got.ravel(), want.ravel())[0, 1] > 0.999


def test_unknown_value_is_reported_and_ignored(folder):
    env = dict(os.environ, FOUNDRY_MAX_ISA="avx9")
    p = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {PYDIR!r}); import foundry; "
                        "print(foundry.cpu_capability())"], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "FOUNDRY_MAX_ISA=avx9 is not one of native, avx512, avx2, sse4; ignored" in p.stderr
    assert p.stdout.strip() == foundry.cpu_capability()


def test_amx_tiles_that_fault_leave_the_vnni_kernels(folder):
    """On a CPU with AMX-INT8 the prefill's integer GEMM runs on tiles after a first product gave
    the VNNI kernel's bits. FOUNDRY_FORCE_AMX_CHECK=1 runs that check whatever CPUID says: on a CPU
    without tiles its first tile instruction faults, and the process goes on with the VNNI kernels
    (the same logits), saying so once. Where the CPU has tiles the check passes and the logits are
    the VNNI kernel's bits either way."""
    native = foundry.cpu_capability()
    if "VNNI" not in native:
        pytest.skip(f"no AVX-512 VNNI ({native})")
    env = dict(os.environ, FOUNDRY_FORCE_AMX_CHECK="1")
    env.pop("FOUNDRY_MAX_ISA", None)
    p = subprocess.run([sys.executable, "-c", SCRIPT, PYDIR, folder], capture_output=True, text=True, env=env,
                       timeout=300)
    assert p.returncode == 0, p.stderr
    forced = json.loads(p.stdout.strip().splitlines()[-1])
    plain = run_capped("", folder)
    if "AMX-INT8" in native:
        assert "AMX-INT8" in forced["capability"] and "faulted" not in p.stderr
    else:
        assert forced["capability"] == native
        assert p.stderr.count("the AMX-INT8 kernels' first product faulted or differed from the VNNI kernels'; "
                              "using VNNI") == 1, p.stderr
    for fmt in ("q4_0", "q4_1", "q8_0", "q4_K"):
        assert forced[fmt]["prefill"] == plain[fmt]["prefill"], fmt
