"""foundry.optim from Python against torch.optim (PyTorch 1.13): optimizers over the model's own
tensors, torch-style param groups, learning-rate schedulers and clip_grad_norm_."""
import numpy as np
import pytest
import torch

foundry = pytest.importorskip("foundry")
if not hasattr(foundry, "optim"):
    pytest.skip("foundry is not built", allow_module_level=True)

START = np.array([[0.5, -1.5, 2.0], [1.0, 0.25, -0.75]], dtype=np.float32)
TARGET = np.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]], dtype=np.float32)


def run_foundry(make, steps=4):
    p = foundry.tensor(START.tolist(), requires_grad=True)
    opt = make([p])
    for _ in range(steps):
        loss = ((p - foundry.tensor(TARGET.tolist())) ** 2).sum()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return p.detach().numpy()


def run_torch(make, steps=4):
    p = torch.tensor(START, requires_grad=True)
    opt = make([p])
    for _ in range(steps):
        loss = ((p - torch.tensor(TARGET)) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return p.detach().numpy()


@pytest.mark.parametrize("name,kwargs", [
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("Adam", dict(lr=0.05, betas=(0.8, 0.9), weight_decay=0.1)),
    ("AdamW", dict(lr=0.05, weight_decay=0.1, amsgrad=True)),
    ("RMSprop", dict(lr=0.01, momentum=0.5, centered=True)),
    ("Adagrad", dict(lr=0.1, lr_decay=0.01)),
])
def test_optimizers_match_torch(name, kwargs):
    got = run_foundry(lambda ps: getattr(foundry.optim, name)(ps, **kwargs))
    want = run_torch(lambda ps: getattr(torch.optim, name)(ps, **kwargs))
    assert np.abs(got - want).max() < 1e-6


@pytest.mark.parametrize("name,kwargs", [
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    ("AdamW", dict(lr=0.05, weight_decay=0.1, amsgrad=True)),
    ("RMSprop", dict(lr=0.01, momentum=0.5, centered=True)),
    ("Adagrad", dict(lr=0.1)),
    ("Lion", dict(lr=0.01, weight_decay=0.1)),
])
def test_optimizers_step_a_matrix_stored_as_rows_of_its_transpose(name, kwargs):
    """A leaf [5, 7] with strides (1, 5), as a loaded Conv1D weight is kept: its gradient (one part
    arriving contiguous, one in the leaf's order through x @ p.t()) and the optimizer's states are
    walked in the leaf's memory order; several steps against torch's on a contiguous tensor catch
    a state paired with the wrong elements."""
    g = np.random.default_rng(3)
    start = g.standard_normal((5, 7)).astype(np.float32)
    target = g.standard_normal((5, 7)).astype(np.float32)
    x = g.standard_normal((3, 7)).astype(np.float32)

    def loss_of(lib, p):
        t = lambda a: (foundry.tensor(a.tolist()) if lib is foundry else torch.tensor(a))
        return ((p - t(target)) ** 2).sum() + ((t(x) @ p.t()) ** 2).sum() * 0.1

    p = foundry.tensor(start.T.tolist()).t().detach().requires_grad_(True)
    assert (p.stride(0), p.stride(1)) == (1, 5)
    q = torch.tensor(start, requires_grad=True)
    if name == "Lion":
        mine = foundry.optim.Lion([p], **kwargs)
        theirs = None
    else:
        mine, theirs = getattr(foundry.optim, name)([p], **kwargs), getattr(torch.optim, name)([q], **kwargs)
    for _ in range(4):
        mine.zero_grad()
        loss_of(foundry, p).backward()
        mine.step()
        if theirs:
            theirs.zero_grad()
            loss_of(torch, q).backward()
            theirs.step()
    assert (p.stride(0), p.stride(1)) == (1, 5)
    if theirs:
        assert np.abs(p.detach().numpy() - q.detach().numpy()).max() < 1e-5
    else:  # Lion against the same optimizer on a contiguous copy of the start
        c = foundry.tensor(start.tolist(), requires_grad=True)
        other = foundry.optim.Lion([c], **kwargs)
        for _ in range(4):
            other.zero_grad()
            loss_of(foundry, c).backward()
            other.step()
        assert np.abs(p.detach().numpy() - c.detach().numpy()).max() < 1e-6


def test_lion_follows_its_reference_update():
    lr, b1, b2, wd = 0.01, 0.9, 0.99, 0.1
    p, m = START.astype(np.float64).copy(), np.zeros_like(START, dtype=np.float64)
    for _ in range(4):
        g = 2 * (p - TARGET)
        p *= 1 - lr * wd
        p -= lr * np.sign(b1 * m + (1 - b1) * g)
        m = b2 * m + (1 - b2) * g
    got = run_foundry(lambda ps: foundry.optim.Lion(ps, lr=lr, betas=(b1, b2), weight_decay=wd))
    assert np.abs(got - p).max() < 1e-6


def test_param_groups_take_their_own_options():
    a = foundry.tensor([1.0, 2.0], requires_grad=True)
    b = foundry.tensor([3.0], requires_grad=True)
    opt = foundry.optim.SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
    (a.sum() + b.sum()).backward()
    opt.step()
    assert np.allclose(a.detach().numpy(), [0.9, 1.9]) and np.allclose(b.detach().numpy(), [2.5])
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]


@pytest.mark.parametrize("name,args", [
    ("StepLR", dict(step_size=2, gamma=0.5)),
    ("MultiStepLR", dict(milestones=[1, 3], gamma=0.1)),
    ("ExponentialLR", dict(gamma=0.9)),
    ("CosineAnnealingLR", dict(T_max=5, eta_min=0.01)),
    ("LinearLR", dict(start_factor=0.25, total_iters=3)),
])
def test_schedulers_match_torch(name, args):
    fp = foundry.tensor([1.0], requires_grad=True)
    fo = foundry.optim.SGD([fp], lr=0.1)
    fs = getattr(foundry.optim.lr_scheduler, name)(fo, **args)
    tp = torch.tensor([1.0], requires_grad=True)
    to = torch.optim.SGD([tp], lr=0.1)
    ts = getattr(torch.optim.lr_scheduler, name)(to, **args)
    for _ in range(6):
        assert abs(fs.get_last_lr()[0] - ts.get_last_lr()[0]) < 1e-12
        fo.step()
        to.step()
        fs.step()
        ts.step()


def test_lambda_lr_and_clip_grad_norm():
    fp = foundry.tensor([1.0], requires_grad=True)
    fo = foundry.optim.AdamW([fp], lr=0.2)
    s = foundry.optim.lr_scheduler.LambdaLR(fo, lambda e: 1.0 / (e + 1))
    for e in range(3):
        assert abs(s.get_last_lr()[0] - 0.2 / (e + 1)) < 1e-12
        s.step()
    p = foundry.tensor([3.0, 4.0], requires_grad=True)
    (p * p).sum().backward()  # grad = (6, 8), norm 10
    norm = foundry.optim.clip_grad_norm_([p], max_norm=1.0)
    assert abs(norm - 10.0) < 1e-6
    assert np.allclose(p.grad.numpy(), np.array([6.0, 8.0]) / (10.0 + 1e-6), atol=1e-6)
