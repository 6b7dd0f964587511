"""`foundry quantize`: the folder's linear weights in bitsandbytes' serialized layouts (nf4, int8)
or Foundry's int4 groups. The stored codes are checked against bnb_ref.py (the transcription of
bitsandbytes), the safetensors header is read with plain json/struct (not Foundry's reader), and
the loaded model must equal the dense model run on the reference-dequantized weights."""
import json
import os
import shutil
import struct

import numpy as np
import pytest

import bnb_ref
import foundry

torch = pytest.importorskip("torch")
import test_pretrained as tp  # noqa: E402
import test_weight_only as two  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists(tp.FOUNDRY), reason="foundry CLI not built")

UP = "model.layers.1.mlp.up_proj.weight"


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        return h, 8 + n


def raw(path, name):
    h, base = header(path)
    info = h[name]
    with open(path, "rb") as f:
        f.seek(base + info["data_offsets"][0])
        data = f.read(info["data_offsets"][1] - info["data_offsets"][0])
    dt = {"U8": np.uint8, "I8": np.int8, "F32": np.float32, "F16": np.float16}[info["dtype"]]
    return np.frombuffer(data, dt).reshape(info["shape"])


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    cfg, make_weights, _ = tp.CASES["llama"]
    cfg = dict(cfg, hidden_size=256, intermediate_size=512, tie_word_embeddings=False)
    w = make_weights(cfg, torch.Generator().manual_seed(23))
    folder = str(tmp_path_factory.mktemp("q") / "hf")
    tp.write_folder(folder, cfg, w)
    with open(os.path.join(folder, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": 2}, f)
    return folder, cfg, w


def reference_dense(kind, w):
    """The weights as the reference dequantizes them (linear weights only)."""
    out = {}
    for k, v in w.items():
        x = v.numpy()
        if v.dim() != 2 or "embed" in k or "lm_head" in k:
            out[k] = v
            continue
        if kind == "nf4":
            x = bnb_ref.dequantize_nf4(bnb_ref.quantize_nf4(x, True, method="cuda"))
        elif kind == "int8":
            x = bnb_ref.dequantize_int8_rows(*bnb_ref.quantize_int8_rows(x))
        else:
            x = two.int4_reference(x, 64, False)[1]
        out[k] = torch.from_numpy(np.ascontiguousarray(x, np.float32))
    return out


@pytest.mark.parametrize("kind, args", [("nf4", []), ("int8", []), ("int4", ["--group-size", "64", "--asymmetric"])])
def test_quantized_folder_layout_and_logits(tmp_path, model_folder, kind, args):
    folder, cfg, w = model_folder
    out = str(tmp_path / kind)
    p = tp.run("quantize", "--model", folder, "--out", out, "--type", kind, *args)
    assert "quantized 14 weights" in p.stdout  # 7 projections x 2 layers; embeddings and the head stay
    st = os.path.join(out, "model.safetensors")
    h, _ = header(st)
    conf = json.load(open(os.path.join(out, "config.json")))["quantization_config"]
    assert os.path.exists(os.path.join(out, "generation_config.json"))
    assert h["model.embed_tokens.weight"]["dtype"] == "F32" and h["lm_head.weight"]["dtype"] == "F32"
    up = w[UP].numpy()
    if kind == "nf4":
        assert conf["quant_method"] == "bitsandbytes" and conf["load_in_4bit"] and conf["bnb_4bit_quant_type"] == "nf4"
        ref = bnb_ref.quantize_nf4(up, True, method="cuda")
        assert h[UP]["dtype"] == "U8" and h[UP]["shape"] == [up.size // 2, 1]
        assert np.array_equal(raw(st, UP).reshape(-1), ref["packed"])
        assert np.array_equal(raw(st, UP + ".absmax"), ref["absmax_q"])
        assert np.array_equal(raw(st, UP + ".nested_absmax"), ref["nested_absmax"])
        assert np.array_equal(raw(st, UP + ".nested_quant_map"), bnb_ref.DYNAMIC_MAP_SIGNED)
        assert np.array_equal(raw(st, UP + ".quant_map"), bnb_ref.NF4_CODE)
        state = json.loads(raw(st, UP + ".quant_state.bitsandbytes__nf4").tobytes())
        assert state == {"quant_type": "nf4", "blocksize": 64, "dtype": "float32", "shape": list(up.shape),
                         "nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": pytest.approx(float(ref["offset"]))}
        assert np.float32(state["nested_offset"]) == ref["offset"]
    elif kind == "int8":
        assert conf["quant_method"] == "bitsandbytes" and conf["load_in_8bit"]
        cb, scb = bnb_ref.quantize_int8_rows(up)
        assert h[UP]["dtype"] == "I8" and np.array_equal(raw(st, UP), cb)
        assert np.array_equal(raw(st, UP.replace("weight", "SCB")), scb)
        assert h[UP.replace("weight", "weight_format")]["shape"] == []
    else:
        assert conf == {"quant_method": "foundry", "bits": 4, "group_size": 64, "symmetric": False}
        u, _, s = two.int4_reference(up, 64, False)
        packed = raw(st, UP + ".qweight").reshape(-1)
        assert np.array_equal(packed & 0x0F, u[0::2]) and np.array_equal(packed >> 4, u[1::2])
        assert np.array_equal(raw(st, UP + ".scales").reshape(-1), s)
    # Loading: the same logits as the dense model on the reference-dequantized weights (40 tokens:
    # the prefill path, a float GEMM on the dequantized weights for the NF4 rows kept in memory).
    tp.write_folder(str(tmp_path / "ref"), cfg, reference_dense(kind, w))
    ids = foundry.tensor(torch.randint(3, cfg["vocab_size"], (1, 40), generator=torch.Generator().manual_seed(1)).tolist())
    with foundry.no_grad():  # both through the inference path (the NF4 model's weights are frozen)
        got = foundry.models.from_pretrained(out, quantized_prefill="float32")(ids).numpy()
        want = foundry.models.from_pretrained(str(tmp_path / "ref"))(ids).numpy()
    assert np.array_equal(got, want), np.abs(got - want).max()
    # Its state_dict holds the weights it computes with: the reference-dequantized ones.
    ref = reference_dense(kind, w)
    sd = foundry.models.from_pretrained(out).state_dict()
    assert np.array_equal(sd[UP].numpy(), ref[UP].numpy())
    g = tp.run("generate", "--model", out, "--input-ids", "5,17,33", "--max-new-tokens", "5", "--temperature", "0",
               "--ignore-eos", "--print-ids")
    assert len(json.loads(g.stdout.strip().splitlines()[-1])) == 5


def test_quantize_errors(tmp_path, model_folder):
    folder, _, _ = model_folder
    bad = tp.run("quantize", "--model", folder, "--out", folder, "--type", "nf4", check=False)
    assert bad.returncode != 0 and "must differ" in bad.stderr
    # Rows narrower than the group: nothing can be quantized, and nothing is written.
    cfg, make_weights, _ = tp.CASES["llama"]
    cfg = dict(cfg, hidden_size=32, intermediate_size=96, num_attention_heads=2, num_key_value_heads=2)
    small = str(tmp_path / "small")
    tp.write_folder(small, cfg, make_weights(cfg, torch.Generator().manual_seed(3)))
    narrow = tp.run("quantize", "--model", small, "--out", str(tmp_path / "n"), "--type", "int4", "--group-size", "128",
                    check=False)
    assert narrow.returncode == 1 and "every row length must be a multiple of --group-size 128" in narrow.stderr
    assert not os.path.exists(tmp_path / "n")
    out = str(tmp_path / "q")
    tp.run("quantize", "--model", folder, "--out", out, "--type", "nf4", "--no-double-quant")
    again = tp.run("quantize", "--model", out, "--out", str(tmp_path / "qq"), "--type", "int8", check=False)
    assert again.returncode != 0 and "already quantized" in again.stderr
    conf = json.load(open(os.path.join(out, "config.json")))
    conf["quantization_config"]["quant_method"] = "gptq"
    broken = str(tmp_path / "gptq")
    shutil.copytree(out, broken)
    json.dump(conf, open(os.path.join(broken, "config.json"), "w"))
    with pytest.raises(Exception, match="quantization method 'gptq' is not supported"):
        foundry.models.from_pretrained(broken)


def test_damaged_quantized_folders_give_clear_errors(tmp_path, model_folder):
    """A quantized folder with a missing or mis-sized quantization tensor is refused by name."""
    folder, _, _ = model_folder
    out = str(tmp_path / "nf4")
    tp.run("quantize", "--model", folder, "--out", out, "--type", "nf4")
    st = os.path.join(out, "model.safetensors")
    tensors = {}
    h, base = header(st)
    with open(st, "rb") as f:
        for name, info in h.items():
            if name == "__metadata__":
                continue
            f.seek(base + info["data_offsets"][0])
            tensors[name] = (info, f.read(info["data_offsets"][1] - info["data_offsets"][0]))

    def write(path, items):
        os.makedirs(path, exist_ok=True)
        shutil.copy(os.path.join(out, "config.json"), path)
        hdr, blobs, off = {}, [], 0
        for name, (info, data) in sorted(items.items()):
            hdr[name] = {"dtype": info["dtype"], "shape": info["shape"], "data_offsets": [off, off + len(data)]}
            blobs.append(data)
            off += len(data)
        hb = json.dumps(hdr).encode()
        hb += b" " * ((8 - len(hb) % 8) % 8)
        with open(os.path.join(path, "model.safetensors"), "wb") as f:
            f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))
        return path

    missing = dict(tensors)
    del missing[UP + ".nested_absmax"]
    with pytest.raises(Exception, match="nested_absmax"):
        foundry.models.from_pretrained(write(str(tmp_path / "missing"), missing))
    short = dict(tensors)
    info, data = short[UP + ".absmax"]
    short[UP + ".absmax"] = (dict(info, shape=[len(data) - 1]), data[:-1])
    with pytest.raises(Exception, match="block maxima|nested maxima"):
        foundry.models.from_pretrained(write(str(tmp_path / "short"), short))
    bad_state = dict(tensors)
    info, _ = bad_state[UP + ".quant_state.bitsandbytes__nf4"]
    junk = b'{"quant_type": "fp4"}'
    bad_state[UP + ".quant_state.bitsandbytes__nf4"] = (dict(info, shape=[len(junk)]), junk)
    with pytest.raises(Exception, match="not an nf4 quant state"):
        foundry.models.from_pretrained(write(str(tmp_path / "state"), bad_state))
