"""Attention rows whose every key carries HF's finite mask value (torch.finfo.min: a padding query
in a left-padded batch) attend uniformly, and their gradient is that of the uniform softmax, as in
PyTorch. Found through Jamba, whose Mamba layers carry the padding positions' outputs into the real
tokens: the flash backward rebuilt P as exp(s - lse), and lse = m + log(l) rounds to m there."""
import numpy as np
import pytest
import torch

foundry = pytest.importorskip("foundry")
if not hasattr(foundry, "scaled_dot_product_attention"):
    pytest.skip("foundry is not built", allow_module_level=True)


@pytest.mark.parametrize("L", [4, 70])  # one tile of queries and keys; several
def test_fully_masked_rows_match_torch(L):
    g = torch.Generator().manual_seed(L)
    q, k, v, go = (torch.randn(2, 3, L, 8, generator=g) for _ in range(4))
    keep = torch.ones(L, L).tril().bool()[None, None].repeat(2, 1, 1, 1)
    keep[1, :, :3] = False  # batch row 1: queries 0..2 see no key
    bias = torch.where(keep, 0.0, torch.finfo(torch.float32).min)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = torch.softmax(leaves[0] @ leaves[1].transpose(-1, -2) / 8 ** 0.5 + bias, -1) @ leaves[2]
    out.backward(go)
    fl = [foundry.tensor(t.tolist()).requires_grad_() for t in (q, k, v)]
    fo = foundry.scaled_dot_product_attention(*fl, foundry.tensor(bias.tolist()))
    assert np.abs(fo.detach().numpy() - out.detach().numpy()).max() <= 1e-5
    fo.backward(foundry.tensor(go.tolist()))
    for f, t in zip(fl, leaves):
        assert np.abs(f.grad.numpy() - t.grad.numpy()).max() <= 1e-4
