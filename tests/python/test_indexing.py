"""NumPy indexing semantics (read and write) for a generated set of index expressions."""
import itertools

import numpy as np
import pytest

import foundry

SHAPE = (4, 5, 6)
BASE = np.arange(np.prod(SHAPE), dtype=np.float64).reshape(SHAPE)
RNG = np.random.default_rng(7)

ATOMS = [
    0, -1, 2, slice(None), slice(1, 4), slice(None, None, -1), slice(4, 0, -2), slice(-3, None), slice(None, None, 2),
    None, Ellipsis, np.array([0, 2, 1]), np.array([[1, 0], [3, 2]]), np.array([-1, 0]),
]


def expressions():
    out = []
    for n in (1, 2, 3):
        for combo in itertools.product(range(len(ATOMS)), repeat=n):
            idx = tuple(ATOMS[i] for i in combo)
            out.append(idx)
    # boolean masks and mixed cases
    out += [(BASE[..., 0] > 30,), (slice(None), np.array([True, False, True, True, False])),
            (np.array([True, False, True, False]), slice(None), 3), (True,), (False, 1), (1, None, [0, 2], slice(1, 3)),
            (np.array([0, 1]), slice(None), np.array([2, 3])), (Ellipsis, np.array([5, 0])), ([0, 1], [1, 2], [2, 3])]
    return out


def valid(idx):
    try:
        BASE[idx]
        return True
    except (IndexError, TypeError, ValueError):
        return False


EXPRS = [e for e in expressions() if valid(e)]
SAMPLE = [EXPRS[i] for i in sorted(RNG.choice(len(EXPRS), size=min(400, len(EXPRS)), replace=False))]


def to_foundry_index(idx):
    return tuple(foundry.tensor(i) if isinstance(i, (np.ndarray, list)) else i for i in idx)


@pytest.mark.parametrize("idx", SAMPLE, ids=[repr(e)[:60] for e in SAMPLE])
def test_read_matches_numpy(idx):
    t = foundry.from_numpy(BASE.copy())
    got = t[to_foundry_index(idx)].numpy()
    want = BASE[idx]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("idx", SAMPLE[::3], ids=[repr(e)[:60] for e in SAMPLE[::3]])
def test_write_matches_numpy(idx):
    a = BASE.copy()
    target_shape = a[idx].shape
    values = RNG.standard_normal(target_shape)
    a[idx] = values
    t = foundry.tensor(BASE.copy(), dtype=foundry.float64)
    t[to_foundry_index(idx)] = foundry.tensor(values, dtype=foundry.float64)
    np.testing.assert_array_equal(t.numpy(), a)


def test_write_scalar_and_broadcast():
    a = BASE.copy()
    t = foundry.tensor(BASE.copy(), dtype=foundry.float64)
    a[1:3, ::-2] = -1.0
    t[1:3, ::-2] = -1.0
    a[..., [0, 4]] = np.arange(2)
    t[..., foundry.tensor([0, 4])] = foundry.tensor(np.arange(2.0))
    np.testing.assert_array_equal(t.numpy(), a)


def test_errors():
    t = foundry.zeros(3, 4)
    with pytest.raises(IndexError):
        t[5]
    with pytest.raises(IndexError):
        t[0, 0, 0]
    with pytest.raises(IndexError):
        t[foundry.tensor([0, 7])]
