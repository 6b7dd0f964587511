""".npy/.npz compatibility with NumPy in both directions: files numpy writes (C and Fortran order,
big-endian, 0-d, empty, bool, every integer width, format 2.0, savez/savez_compressed) load in
Foundry, and files Foundry writes load in numpy with the same dtype, shape and values."""
import os

import numpy as np
import pytest

import foundry

DTYPES = ["?", "u1", "i1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f2", "<f4", "<f8"]


def sample(dt, shape=(3, 4)):
    a = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) - 5
    if dt == "?":
        return (a.astype(np.int64) % 3) == 0
    if np.dtype(dt).kind == "u":
        a = np.abs(a)
    return a.astype(dt)


def check_same(t, a):
    got = t.numpy()
    assert got.dtype == a.dtype.newbyteorder("=")
    assert got.shape == a.shape
    np.testing.assert_array_equal(got, a)


@pytest.mark.parametrize("dt", DTYPES)
def test_numpy_writes_foundry_reads(tmp_path, dt):
    a = sample(dt)
    variants = {
        "c": a,
        "fortran": np.asfortranarray(a),
        "big_endian": a.astype(np.dtype(dt).newbyteorder(">")),
        "big_endian_fortran": np.asfortranarray(a.astype(np.dtype(dt).newbyteorder(">"))),
        "zero_d": np.array(a.reshape(-1)[1]),
        "empty": a[:0],
        "one_d": a.reshape(-1),
        "strided": a[::2, ::-1],  # numpy writes it C-contiguous
    }
    for name, arr in variants.items():
        p = str(tmp_path / f"{name}.npy")
        np.save(p, arr)
        t = foundry.load_npy(p)
        check_same(t, np.array(arr, order="C").astype(arr.dtype.newbyteorder("=")))


def test_numpy_format_2_and_npz(tmp_path):
    a = np.arange(10, dtype=np.float32).reshape(2, 5)
    p = str(tmp_path / "v2.npy")
    with open(p, "wb") as f:
        np.lib.format.write_array(f, a, version=(2, 0))
    check_same(foundry.load_npy(p), a)
    arrays = {"x": a, "mask": a > 3, "idx": np.arange(3, dtype=np.int64), "s": np.float64(2.5), "e": np.zeros((0, 2))}
    for saver in (np.savez, np.savez_compressed):
        z = str(tmp_path / f"{saver.__name__}.npz")
        saver(z, **arrays)
        out = foundry.load_npz(z)
        assert sorted(out) == sorted(arrays)
        for k, v in arrays.items():
            check_same(out[k], np.asarray(v))


@pytest.mark.parametrize("dt", DTYPES)
def test_foundry_writes_numpy_reads(tmp_path, dt):
    a = sample(dt)
    t = foundry.from_numpy(a).t()  # non-contiguous: written row-major
    p = str(tmp_path / "f.npy")
    foundry.save_npy(p, t)
    b = np.load(p, allow_pickle=False)
    assert b.dtype == a.dtype and b.shape == (4, 3)
    np.testing.assert_array_equal(b, a.T)
    assert os.path.getsize(p) % 64 == (b.nbytes % 64)  # header padded to 64 bytes as numpy does
    foundry.save_npy(p, foundry.from_numpy(np.array(a.reshape(-1)[2])))
    assert np.load(p).shape == ()
    foundry.save_npy(p, foundry.from_numpy(a[:0]))
    assert np.load(p).shape == (0, 4)


def test_foundry_npz_loads_in_numpy(tmp_path):
    arrays = {"w": foundry.randn(3, 4), "i": foundry.arange(5), "b": foundry.ones(2, dtype=foundry.bool),
              "h": foundry.ones(2, dtype=foundry.float16)}
    z = str(tmp_path / "f.npz")
    foundry.save_npz(z, arrays)
    with np.load(z, allow_pickle=False) as data:
        assert sorted(data.files) == sorted(arrays)
        for k, t in arrays.items():
            np.testing.assert_array_equal(data[k], t.numpy())
            assert data[k].dtype == t.numpy().dtype
    with pytest.raises(TypeError):
        foundry.save_npy(str(tmp_path / "bf.npy"), foundry.ones(2, dtype=foundry.bfloat16))


def test_bad_npy_raises_oserror(tmp_path):
    p = str(tmp_path / "bad.npy")
    np.save(p, np.arange(10))
    data = open(p, "rb").read()
    with open(p, "wb") as f:
        f.write(data[:-3])
    with pytest.raises(OSError, match="truncated"):
        foundry.load_npy(p)
    np.save(p, np.array(["a", "b"]))
    with pytest.raises(OSError, match="unsupported dtype"):
        foundry.load_npy(p)
    np.save(p, np.zeros(2, dtype=np.complex64))
    with pytest.raises(OSError, match="unsupported dtype"):
        foundry.load_npy(p)
