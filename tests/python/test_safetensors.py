"""safetensors interop with NumPy and PyTorch 1.13, both directions, plus sharding, malformed files
and training checkpoints.

The `safetensors` package is not installed here (no PyPI), so this file carries a small reader and
writer of its own that follow the format as upstream (huggingface/safetensors, tensor.rs) writes it:
tensors sorted by dtype (upstream's enum order, descending) then name, compact JSON, padded with
spaces to a multiple of 8.
"""
import json
import os
import struct

import numpy as np
import pytest
import torch

import foundry

# Upstream's Dtype enum order (the writer sorts by it, descending).
RANK = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64"]
# dtype string -> NumPy dtype of the raw elements (bf16/fp8 as their bit patterns).
RAW = {"BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "I16": "<i2", "U16": "<u2", "I32": "<i4", "U32": "<u4",
       "I64": "<i8", "U64": "<u8", "F16": "<f2", "BF16": "<u2", "F32": "<f4", "F64": "<f8", "F8_E4M3": np.uint8,
       "F8_E5M2": np.uint8}
TORCH = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "I32": torch.int32,
         "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}
FOUNDRY = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16", "I32": "int32",
           "U32": "uint32", "I64": "int64", "U64": "uint64", "F16": "float16", "BF16": "bfloat16", "F32": "float32",
           "F64": "float64", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def read_st(data):
    """Minimal reader: {name: (dtype, shape, raw bytes)}, metadata."""
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        s, e = info["data_offsets"]
        out[name] = (info["dtype"], list(info["shape"]), data[8 + n + s:8 + n + e])
    return out, meta


def write_st(tensors, metadata=None):
    """Minimal writer in upstream's layout; tensors: {name: (dtype, shape, raw bytes)}."""
    items = sorted(tensors.items(), key=lambda kv: (-RANK.index(kv[1][0]), kv[0]))
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))
    for name, (dt, shape, raw) in items:
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    hb = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    hb += b" " * ((8 - len(hb) % 8) % 8)
    return struct.pack("<Q", len(hb)) + hb + b"".join(raw for _, (_, _, raw) in items)


def decode_e4m3fn(bits):
    bits = bits.astype(np.int32)
    sign = np.where(bits & 0x80, -1.0, 1.0)
    exp, man = (bits >> 3) & 0xF, bits & 0x7
    val = np.where(exp == 0, man / 8.0 * 2.0 ** -6, (1 + man / 8.0) * 2.0 ** (exp - 7.0))
    val = np.where((bits & 0x7F) == 0x7F, np.nan, val)
    return (sign * val).astype(np.float32)


def decode_e5m2(bits):
    return (bits.astype(np.uint16) << 8).view(np.float16).astype(np.float32)


def sample_values(dt, shape, seed):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if dt == "BOOL":
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    if dt[0] in "UI":
        info = np.iinfo(np.dtype(RAW[dt]))
        return rng.integers(info.min, info.max, n, endpoint=True, dtype=np.dtype(RAW[dt]).newbyteorder("=")).reshape(shape)
    return (rng.standard_normal(n) * 4).astype(np.float32).reshape(shape)


def foundry_tensor(dt, values):
    if dt in ("BF16", "F8_E4M3", "F8_E5M2", "F16", "F32", "F64"):
        return foundry.tensor(values.astype(np.float64), dtype=getattr(foundry, FOUNDRY[dt]))
    return foundry.from_numpy(np.ascontiguousarray(values))


# ---- Foundry writes, NumPy/PyTorch read -----------------------------------------------------------------------

def test_foundry_file_read_by_numpy_and_torch(tmp_path):
    path = str(tmp_path / "f.safetensors")
    expected = {}
    for i, dt in enumerate(RANK):
        vals = sample_values(dt, (3, 4), i)
        expected[dt] = foundry_tensor(dt, vals)
    expected["scalar"] = foundry.tensor(2.5)
    expected["empty"] = foundry.zeros(0, 3)
    foundry.save_file(expected, path, metadata={"format": "pt", "who": "foundry"})
    data = open(path, "rb").read()
    entries, meta = read_st(data)
    assert meta == {"format": "pt", "who": "foundry"}
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0 and data[8 + n - 1:8 + n] in (b"}", b" ")
    assert set(entries) == set(expected)
    for name, t in expected.items():
        dt, shape, raw = entries[name]
        assert shape == list(t.shape)
        assert dt == {"scalar": "F32", "empty": "F32"}.get(name, name)
        arr = np.frombuffer(raw, dtype=RAW[dt]).reshape(shape)
        if dt == "BF16":
            ref = torch.tensor(t.numpy()).to(torch.bfloat16)  # exact: the values are bf16 already
            assert torch.equal(torch.frombuffer(bytearray(raw), dtype=torch.bfloat16).reshape(shape), ref)
        elif dt == "F8_E4M3":
            np.testing.assert_array_equal(decode_e4m3fn(arr), t.numpy())
        elif dt == "F8_E5M2":
            np.testing.assert_array_equal(decode_e5m2(arr), t.numpy())
        else:
            np.testing.assert_array_equal(arr, t.numpy())
            if dt in TORCH and raw:
                tt = torch.frombuffer(bytearray(raw), dtype=TORCH[dt]).reshape(shape)
                assert torch.equal(tt, torch.from_numpy(t.numpy().copy()))


def test_foundry_layout_is_byte_identical_to_upstream_writer():
    tensors = {
        "lm_head.weight": ("F32", [2, 3], np.arange(6, dtype="<f4").tobytes()),
        "b": ("BF16", [2], np.array([0x3F80, 0x4000], dtype="<u2").tobytes()),
        "a": ("BF16", [1], np.array([0x3F80], dtype="<u2").tobytes()),
        "mask": ("BOOL", [3], b"\x01\x00\x01"),
        "step": ("I64", [], struct.pack("<q", 7)),
        "idx": ("U16", [2], struct.pack("<HH", 1, 65535)),
        "caf\u00e9 \"q\"\n": ("I8", [1], b"\xff"),
    }
    meta = {"format": "pt", "z": "\u20ac\t\x01"}
    foundry_tensors = {}
    for name, (dt, shape, raw) in tensors.items():
        arr = np.frombuffer(raw, dtype=RAW[dt]).reshape(shape)
        t = foundry.from_numpy(arr.copy())
        if dt == "BF16":
            t = foundry.tensor(torch.frombuffer(bytearray(raw), dtype=torch.bfloat16).float().numpy().reshape(shape),
                               dtype=foundry.bfloat16)
        foundry_tensors[name] = t
    assert foundry.save(foundry_tensors, metadata=meta) == write_st(tensors, meta)
    assert foundry.save(foundry_tensors) == write_st(tensors)


def test_hand_assembled_upstream_vector():
    # huggingface/safetensors tensor.rs test_serialization: the exact bytes.
    expected = bytes([64, 0, 0, 0, 0, 0, 0, 0]) + \
        b'{"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}}' + \
        np.arange(6, dtype="<f4").tobytes()
    t = foundry.arange(6, dtype=foundry.float32).reshape(1, 2, 3)
    assert foundry.save({"attn.0": t}) == expected
    back = foundry.load(expected)
    np.testing.assert_array_equal(back["attn.0"].numpy(), np.arange(6, dtype=np.float32).reshape(1, 2, 3))
    assert foundry.save({}) == bytes([8, 0, 0, 0, 0, 0, 0, 0]) + b"{}      "


# ---- Python writes, Foundry reads ------------------------------------------------------------------------------

def test_python_written_file_loads_in_foundry(tmp_path):
    path = str(tmp_path / "py.safetensors")
    tensors, ref = {}, {}
    for i, dt in enumerate(RANK):
        vals = sample_values(dt, (2, 5), 100 + i)
        if dt in ("F8_E4M3", "F8_E5M2"):
            raw = np.random.default_rng(i).integers(0, 256, 10, dtype=np.uint8)
            raw[raw & 0x7F == 0x7F] = 0  # keep clear of NaN encodings
            tensors[dt] = (dt, [2, 5], raw.tobytes())
            ref[dt] = (decode_e4m3fn if dt == "F8_E4M3" else decode_e5m2)(raw).reshape(2, 5)
        elif dt == "BF16":
            tt = torch.tensor(vals).to(torch.bfloat16)
            tensors[dt] = (dt, [2, 5], tt.view(torch.int16).numpy().tobytes())
            ref[dt] = tt.float().numpy()
        elif dt in TORCH:
            tt = torch.from_numpy(np.ascontiguousarray(vals)).to(TORCH[dt])
            tensors[dt] = (dt, [2, 5], tt.numpy().tobytes())  # PyTorch's own bytes
            ref[dt] = tt.numpy()
        else:
            arr = np.ascontiguousarray(vals.astype(RAW[dt]))
            tensors[dt] = (dt, [2, 5], arr.tobytes())
            ref[dt] = arr
    with open(path, "wb") as f:
        f.write(write_st(tensors, {"format": "pt"}))
    loaded = foundry.load_file(path)
    assert list(loaded) == sorted(tensors)
    for dt, r in ref.items():
        t = loaded[dt]
        assert t.dtype == getattr(foundry, FOUNDRY[dt]), dt
        assert tuple(t.shape) == (2, 5)
        out = t.numpy()
        if dt == "BF16":
            assert out.dtype == np.float32
        if dt == "F16":
            assert out.dtype == np.float16
        np.testing.assert_array_equal(out, r)
    with foundry.safe_open(path, framework="pt") as f:
        assert f.keys() == sorted(tensors)
        assert f.metadata() == {"format": "pt"}
        assert "F32" in f and len(f) == len(tensors)
        np.testing.assert_array_equal(f.get_tensor("I64").numpy(), ref["I64"])
        with pytest.raises(KeyError):
            f.get_tensor("missing")


def test_mapped_tensors_are_read_only_views(tmp_path):
    path = str(tmp_path / "m.safetensors")
    foundry.save_file({"w": np.arange(8, dtype=np.float32)}, path)
    w = foundry.load_file(path)["w"]
    a = w.numpy()
    assert not a.flags.writeable  # a write would hit a read-only mapping
    with pytest.raises(ValueError):
        a[0] = 1
    with pytest.raises(RuntimeError):
        w.fill_(0.0)
    c = foundry.load_file(path, copy=True)["w"]
    c.numpy()[0] = 5
    assert c[0].item() == 5


def test_save_accepts_numpy_and_torch_arrays(tmp_path):
    path = str(tmp_path / "n.safetensors")
    foundry.save_file({"np": np.eye(3), "torch": torch.arange(4, dtype=torch.int32)}, path)
    entries, meta = read_st(open(path, "rb").read())
    assert meta is None
    assert entries["np"][0] == "F64" and entries["torch"][0] == "I32"
    with pytest.raises(TypeError):
        foundry.save_file({"x": "not a tensor"}, path)
    with pytest.raises(TypeError):
        foundry.save_file({"x": np.eye(2)}, path, metadata={"k": 1})


# ---- malformed files -------------------------------------------------------------------------------------------

def _img(header_text, data=b""):
    hb = header_text.encode() if isinstance(header_text, str) else header_text
    return struct.pack("<Q", len(hb)) + hb + data


W = '"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}'
MALFORMED = [
    ("truncated length", b"\x08\x00\x00", "fewer than the 8-byte header length"),
    ("header too large", struct.pack("<Q", 100_000_001) + b"{}", "exceeds the limit"),
    ("header past EOF", struct.pack("<Q", 500) + b"{}", "runs past the end of the file"),
    ("non-UTF-8", _img(b'{"\xff":1}'), "not valid UTF-8"),
    ("bad JSON", _img("{\"w\":"), "not valid JSON"),
    ("unknown dtype", _img('{"w":{"dtype":"F4X","shape":[2],"data_offsets":[0,8]}}', bytes(8)), "unknown dtype"),
    ("overlap", _img('{' + W + ',"v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', bytes(12)), "overlap"),
    ("gap", _img('{' + W + ',"v":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}}', bytes(16)), "gap of 4 bytes"),
    ("size mismatch", _img('{"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}', bytes(8)), "needs 12 bytes"),
    ("duplicate", _img('{' + W + ',' + W + '}', bytes(8)), "twice"),
    ("trailing bytes", _img('{' + W + '}', bytes(9)), "1 trailing bytes"),
    ("truncated data", _img('{' + W + '}', bytes(5)), "truncated"),
    ("not an object", _img("[1, 2]"), "must be a JSON object"),
]


@pytest.mark.parametrize("name,data,message", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_files_raise_oserror(tmp_path, name, data, message):
    path = str(tmp_path / "bad.safetensors")
    with open(path, "wb") as f:
        f.write(data)
    with pytest.raises(OSError, match=message) as e:
        foundry.load_file(path)
    assert "bad.safetensors" in str(e.value)
    with pytest.raises(OSError, match=message):
        foundry.load(data)


def test_every_truncation_raises(tmp_path):
    data = foundry.save({"a": foundry.ones(3), "b": foundry.zeros(2, dtype=foundry.int64)})
    for n in range(len(data)):
        with pytest.raises(OSError):
            foundry.load(data[:n])
    with pytest.raises(OSError, match="cannot open"):
        foundry.load_file(str(tmp_path / "missing.safetensors"))


# ---- sharded ---------------------------------------------------------------------------------------------------

def test_sharded_round_trip_and_index(tmp_path):
    d = str(tmp_path / "sharded")
    tensors = {f"layers.{i}.weight": foundry.randn(16, 8) for i in range(5)}  # 512 bytes each
    files = foundry.save_sharded(tensors, d, max_shard_size="1KiB")
    assert files[-1] == "model.safetensors.index.json"
    assert files[0] == "model-00001-of-00003.safetensors"
    index = json.load(open(os.path.join(d, files[-1])))
    assert index["metadata"] == {"total_size": 5 * 512}
    assert sorted(index["weight_map"]) == sorted(tensors)
    for name, shard in index["weight_map"].items():
        entries, meta = read_st(open(os.path.join(d, shard), "rb").read())
        assert meta == {"format": "pt"} and name in entries
    loaded = foundry.load_sharded(d)
    for k, t in tensors.items():
        np.testing.assert_array_equal(loaded[k].numpy(), t.numpy())
    assert foundry.save_sharded({"x": foundry.ones(2)}, d) == ["model.safetensors"]
    assert sorted(os.listdir(d)) == ["model.safetensors"]
    with pytest.raises(ValueError):
        foundry.save_sharded(tensors, d, max_shard_size="lots")


# ---- checkpoints -----------------------------------------------------------------------------------------------

def test_checkpoints_round_trip_keep_last(tmp_path):
    root = str(tmp_path / "ckpt")
    assert foundry.latest_checkpoint(root) is None
    assert foundry.load_checkpoint(root) is None
    for step in (1, 2, 3):
        w = foundry.full([2, 2], float(step))
        foundry.save_checkpoint(root, step, {
            "model": {"tensors": {"w": w}},
            "optimizer": {"tensors": {"exp_avg": w * 2}, "json": {"lr": 0.1 * step}},
            "rng": {"json": json.dumps({"seed": 2**64 - 1, "offset": step})},
        }, keep_last=2)
    assert foundry.list_checkpoints(root) == [2, 3]
    step, state = foundry.load_checkpoint(root)
    assert step == 3
    np.testing.assert_array_equal(state["model"]["tensors"]["w"].numpy(), np.full((2, 2), 3.0, np.float32))
    assert json.loads(state["optimizer"]["json"]) == {"lr": 0.1 * 3}
    assert json.loads(state["rng"]["json"])["seed"] == 2**64 - 1
    assert state["model"]["json"] is None
    step2, state2 = foundry.load_checkpoint(root, 2)
    assert step2 == 2 and state2["model"]["tensors"]["w"][0, 0].item() == 2.0
    os.remove(os.path.join(root, "step-3", "optimizer.safetensors"))
    with pytest.raises(OSError, match="missing"):
        foundry.load_checkpoint(root, 3)
    with pytest.raises(OSError, match="available steps: 2, 3"):
        foundry.load_checkpoint(root, 7)
