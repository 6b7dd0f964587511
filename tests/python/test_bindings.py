"""The Python bindings: tensors, NumPy interop, autograd, grad modes and errors."""
import numpy as np
import pytest
import torch

import foundry


def test_numpy_roundtrip_is_zero_copy():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = foundry.from_numpy(a)
    a[0, 0] = 42
    assert t[0, 0].item() == 42
    v = t.numpy()
    v[1, 1] = -7
    assert a[1, 1] == -7
    neg = foundry.from_numpy(a[::-1, ::2])  # negative strides shared, not copied
    np.testing.assert_array_equal(neg.numpy(), a[::-1, ::2])


def test_tensor_constructor_dtypes_follow_torch():
    assert foundry.tensor([1.5, 2]).dtype == foundry.float32
    assert foundry.tensor([1, 2]).dtype == foundry.int64
    assert foundry.tensor([True]).dtype == foundry.bool
    assert foundry.tensor(3.0).shape == ()
    assert (foundry.tensor([1, 2], dtype=foundry.int32) + 5).dtype == foundry.int32
    assert (foundry.tensor([1, 2], dtype=foundry.int32) + 5.5).dtype == foundry.float32
    assert foundry.tensor([1.0], dtype=foundry.bfloat16).numpy().dtype == np.float32


def test_operators_and_methods():
    x = foundry.tensor([[1.0, -2.0], [3.0, 4.0]])
    y = torch.tensor([[1.0, -2.0], [3.0, 4.0]])
    for f in [lambda a: a + 1, lambda a: 2 - a, lambda a: a * a, lambda a: a / 3, lambda a: -a, lambda a: a ** 2,
              lambda a: a @ a, lambda a: a.sum(1), lambda a: a.mean(), lambda a: a.T, lambda a: a.exp().log(),
              lambda a: abs(a), lambda a: a.view(4), lambda a: a.reshape(1, 4), lambda a: a.permute(1, 0),
              lambda a: a.softmax(-1), lambda a: a.clamp(min=0)]:
        np.testing.assert_allclose(f(x).numpy(), f(y).numpy(), rtol=1e-6)
    vals, idx = foundry.max(x, 1)
    assert idx.tolist() == [0, 1]
    assert foundry.max(x).item() == 4.0


def test_autograd_and_grad_modes():
    x = foundry.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x).sum()
    y.backward()
    assert x.grad.tolist() == [2.0, 4.0, 6.0]
    with foundry.no_grad():
        z = x * 2
    assert not z.requires_grad
    g, = foundry.autograd.grad([(x ** 3).sum()], [x], create_graph=True)
    gg, = foundry.autograd.grad([g.sum()], [x])
    assert gg.tolist() == [6.0, 12.0, 18.0]
    assert foundry.autograd.gradcheck(lambda a: a.tanh(), [foundry.tensor([0.3, -0.2], dtype=foundry.float64,
                                                                         requires_grad=True)])


def test_hooks_from_python():
    x = foundry.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    x.register_hook(lambda g: seen.append(g.tolist()))
    (x * 3).sum().backward()
    assert seen == [[3.0, 3.0]]


def test_errors_become_python_exceptions():
    with pytest.raises(ValueError):
        foundry.ones(2, 3) + foundry.ones(4)
    with pytest.raises(TypeError):
        foundry.bitwise_and(foundry.ones(2), foundry.ones(2))
    with pytest.raises(IndexError):
        foundry.ones(2).sum(5)
    with pytest.raises(TypeError):
        foundry.add(foundry.ones(2), "x")
    with pytest.raises(RuntimeError):
        a = foundry.ones(2, requires_grad=True)
        a.add_(1)


def test_manual_seed_reproducible():
    foundry.manual_seed(1)
    a = foundry.randn(100)
    foundry.manual_seed(1)
    b = foundry.randn(100)
    assert foundry.equal(a, b)


def test_promotion_table_matches_torch():
    names = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
    for a in names:
        for b in names:
            want = torch.promote_types(getattr(torch, a), getattr(torch, b))
            got = foundry.promote_types(a, b)
            assert got.name == str(want).split(".")[1], (a, b)


def test_autograd_grad_takes_a_tensor_or_a_sequence():
    """torch.autograd.grad(outputs, inputs, grad_outputs): each a tensor or a sequence of tensors."""
    import torch
    x = foundry.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x).sum()
    (g,) = foundry.autograd.grad(y, x, retain_graph=True)
    assert np.allclose(g.numpy(), [2.0, 4.0, 6.0])
    (g2,) = foundry.autograd.grad([y], [x], retain_graph=True)
    assert np.allclose(g2.numpy(), g.numpy())
    z = x * 3
    (g3,) = foundry.autograd.grad(z, x, grad_outputs=foundry.tensor([1.0, 0.0, 2.0]))
    tx = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (want,) = torch.autograd.grad(tx * 3, tx, grad_outputs=torch.tensor([1.0, 0.0, 2.0]))
    assert np.allclose(g3.numpy(), want.numpy())
    w = foundry.tensor([1.0, -1.0], requires_grad=True)
    foundry.autograd.backward((w * w).sum())
    assert np.allclose(w.grad.numpy(), [2.0, -2.0])


def test_memory_stats_with_pytorch_names():
    foundry.empty_cache()
    foundry.reset_peak_memory_stats()
    s0 = foundry.memory_stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
                "reserved_bytes.all.peak", "allocation.all.allocated", "allocation.all.freed",
                "inactive_split.all.current"):
        assert key in s0, key
    x = foundry.zeros([1 << 20])  # 4 MiB
    s1 = foundry.memory_stats()
    assert s1["allocated_bytes.all.current"] - s0["allocated_bytes.all.current"] >= 4 << 20
    assert s1["allocation.all.allocated"] > s0["allocation.all.allocated"]
    assert foundry.max_memory_allocated() >= s1["allocated_bytes.all.current"]
    del x
    s2 = foundry.memory_stats()
    assert s2["allocated_bytes.all.current"] == s0["allocated_bytes.all.current"]
    assert s2["allocation.all.freed"] > s1["allocation.all.freed"]
    assert s2["allocated_bytes.all.peak"] >= s0["allocated_bytes.all.current"] + (4 << 20)
    assert s2["reserved_bytes.all.current"] >= s2["allocated_bytes.all.current"]
    foundry.reset_peak_memory_stats()
    assert foundry.memory_stats()["allocated_bytes.all.peak"] == s2["allocated_bytes.all.current"]


def test_einsum_takes_pytorchs_signature_and_a_list():
    import torch
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in [(2, 3), (3, 4), (4, 5)])
    want = torch.einsum("ij,jk,kl->il", torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(c)).numpy()
    fa, fb, fc = (foundry.tensor(x) for x in (a, b, c))
    np.testing.assert_allclose(foundry.einsum("ij,jk,kl->il", fa, fb, fc).numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(foundry.einsum("ij,jk,kl->il", [fa, fb, fc]).numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(foundry.einsum("ij,jk,kl->il", (fa, fb, fc)).numpy(), want, rtol=1e-5, atol=1e-5)
    assert foundry.einsum("ii", foundry.tensor(np.eye(3, dtype=np.float32))).item() == 3.0


def test_live_tensor_report_lists_shapes_and_creation_sites():
    foundry.set_tensor_tracking(True)
    try:
        before = foundry.live_tensor_count()
        x = foundry.zeros([6, 2], dtype=foundry.float64)
        assert foundry.live_tensor_count() == before + 1
        report = foundry.live_tensors_report()
        assert "float64 [6, 2] (96 bytes), created at:" in report and "foundry::empty" in report
        del x
        assert foundry.live_tensor_count() == before
    finally:
        foundry.set_tensor_tracking(False)


def test_seed_and_thread_arguments_as_torch_takes_them():
    """torch.manual_seed takes any integer in [-2^63, 2^64) (a negative one modulo 2^64) and
    torch.set_num_threads refuses 0 or less: the same here (set_num_threads(-4) ran on 1 thread)."""
    import torch
    for seed in (-1, -2**63, 2**64 - 1, 0, 12345):
        torch.manual_seed(seed)
        foundry.manual_seed(seed)
        a = foundry.rand(4).tolist()
        foundry.manual_seed(seed % 2**64)
        assert foundry.rand(4).tolist() == a
        assert torch.initial_seed() == seed % 2**64
    for bad in (2**64, -2**63 - 1):
        with pytest.raises(RuntimeError):
            torch.manual_seed(bad)
        with pytest.raises(RuntimeError, match="Overflow when unpacking long"):
            foundry.manual_seed(bad)
    before = foundry.get_num_threads()
    for bad in (0, -4):
        with pytest.raises(RuntimeError):
            torch.set_num_threads(bad)
        with pytest.raises(RuntimeError, match="set_num_threads expects a positive integer"):
            foundry.set_num_threads(bad)
    assert foundry.get_num_threads() == before
