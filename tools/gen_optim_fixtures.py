#!/usr/bin/python3
"""Writes the optimizer / LR scheduler / gradient clipping parity fixtures (torch.optim 1.13).

Usage: /usr/bin/python3 tools/gen_optim_fixtures.py [out_dir]   (default tests/parity/optim)

Outputs (read by tests/unit/optim_test.cpp):
  common.npz   init: the initial parameters, concatenated (float32, shape [N])
               grads: the gradient of every parameter at every step (float32, [STEPS, N])
  traj.npz     one array per case: the parameters after every step ([STEPS, N])
  clip.npz     clip_grad_norm_/clip_grad_value_ inputs and outputs
  cases.json   parameter shapes; per case the optimizer, its options (Foundry's option names),
               the parameter groups, the scheduler, which gradients are missing, and the
               learning rate (and momentum/beta1) of every group at every step

Every case runs STEPS steps: set the gradients, optimizer.step(), scheduler.step(). The gradients
are fixed random tensors, the same for every case, so a case needs no model. torch 1.13 has no
Lion: `Lion` below is the reference algorithm of the Lion paper (google/automl,
lion/lion_pytorch.py), and WarmupCosine (Foundry's linear warmup + cosine schedule) is written
here in closed form.
"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.dirname(_os.path.abspath(__file__)))
__import__("program").start(__doc__, __name__)
import json
import math
import os
import sys

import numpy as np
import torch
from torch.optim import lr_scheduler as S

STEPS = 20
SHAPES = [[5, 7], [13], [2, 3, 11]]  # odd sizes: every SIMD width leaves a tail
SCALES = [1.0, 0.01, 3.0]  # gradient scale per parameter


class Lion(torch.optim.Optimizer):
    """google/automl lion/lion_pytorch.py (Chen et al. 2023, "Symbolic Discovery of Optimization
    Algorithms"), verbatim apart from the closure."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        defaults = dict(lr=lr, betas=betas, weight_decay=weight_decay)
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group['params']:
                if p.grad is None:
                    continue
                # Perform stepweight decay
                p.data.mul_(1 - group['lr'] * group['weight_decay'])
                grad = p.grad
                state = self.state[p]
                # State initialization
                if len(state) == 0:
                    # Exponential moving average of gradient values
                    state['exp_avg'] = torch.zeros_like(p)
                exp_avg = state['exp_avg']
                beta1, beta2 = group['betas']
                # Weight update
                update = exp_avg * beta1 + grad * (1 - beta1)
                p.add_(torch.sign(update), alpha=-group['lr'])
                # Decay the momentum running average coefficient
                exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2)


def warmup_cosine_lr(base_lr, t, warmup_steps, total_steps, min_lr):
    """Foundry's WarmupCosine at scheduler step t (the same formula as src/optim/schedulers.cpp)."""
    if t < warmup_steps:
        return base_lr * (t + 1) / warmup_steps
    if t >= total_steps:
        return min_lr
    ratio = (t - warmup_steps) / (total_steps - warmup_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (base_lr - min_lr)


OPTIMIZERS = {
    "SGD": torch.optim.SGD, "Adam": torch.optim.Adam, "AdamW": torch.optim.AdamW,
    "Adagrad": torch.optim.Adagrad, "RMSprop": torch.optim.RMSprop, "Lion": Lion,
}


DEFAULT_BETAS = {"Adam": (0.9, 0.999), "AdamW": (0.9, 0.999), "Lion": (0.9, 0.99)}


def torch_kwargs(opts, optimizer):
    """Foundry option names (beta1/beta2, 0/1 flags) -> torch keyword arguments."""
    kw = {}
    for k, v in opts.items():
        if k in ("beta1", "beta2"):
            continue
        if k in ("amsgrad", "nesterov", "maximize", "centered"):
            kw[k] = bool(v)
        else:
            kw[k] = v
    if "beta1" in opts or "beta2" in opts:
        b1, b2 = DEFAULT_BETAS[optimizer]
        kw["betas"] = (opts.get("beta1", b1), opts.get("beta2", b2))
    return kw


def case(name, opt, options, groups=None, sched=None, missing=None, metrics=None):
    return dict(name=name, optimizer=opt, options=options, groups=groups, scheduler=sched,
                missing=missing or [], metrics=metrics)


CASES = [
    case("sgd_plain", "SGD", {"lr": 0.1}),
    case("sgd_momentum", "SGD", {"lr": 0.1, "momentum": 0.9}),
    case("sgd_dampening", "SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.3}),
    case("sgd_nesterov", "SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": 1}),
    case("sgd_weight_decay", "SGD", {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01}),
    case("sgd_wd_no_momentum", "SGD", {"lr": 0.05, "weight_decay": 0.1}),
    case("sgd_maximize", "SGD", {"lr": 0.1, "momentum": 0.5, "weight_decay": 0.01, "nesterov": 1,
                                 "maximize": 1}),
    case("sgd_groups", "SGD", {"lr": 0.01},
         groups=[{"params": [0], "lr": 0.1, "momentum": 0.9}, {"params": [1, 2]}]),
    case("sgd_missing_grads", "SGD", {"lr": 0.1, "momentum": 0.9}, missing=[[1, 0], [1, 1], [1, 2], [2, 7]]),
    case("adam_default", "Adam", {}),
    case("adam_options", "Adam", {"lr": 0.01, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6}),
    case("adam_weight_decay", "Adam", {"lr": 0.01, "weight_decay": 0.1}),
    case("adam_amsgrad", "Adam", {"lr": 0.01, "amsgrad": 1}),
    case("adam_maximize", "Adam", {"lr": 0.01, "weight_decay": 0.05, "amsgrad": 1, "maximize": 1}),
    case("adam_missing_grads", "Adam", {"lr": 0.01}, missing=[[1, 0], [1, 1], [1, 2], [0, 5], [2, 11]]),
    case("adamw_default", "AdamW", {}),
    case("adamw_weight_decay", "AdamW", {"lr": 0.01, "weight_decay": 0.1, "beta1": 0.85}),
    case("adamw_amsgrad", "AdamW", {"lr": 0.01, "amsgrad": 1}),
    case("adamw_maximize", "AdamW", {"lr": 0.01, "weight_decay": 0.2, "maximize": 1}),
    case("adamw_groups", "AdamW", {"lr": 0.003, "weight_decay": 0.1},
         groups=[{"params": [0, 2]}, {"params": [1], "weight_decay": 0.0, "lr": 0.01}]),
    case("adagrad_default", "Adagrad", {}),
    case("adagrad_options", "Adagrad", {"lr": 0.1, "lr_decay": 0.01, "weight_decay": 0.01,
                                        "initial_accumulator_value": 0.1, "eps": 1e-8}),
    case("adagrad_maximize", "Adagrad", {"lr": 0.05, "maximize": 1}),
    case("rmsprop_default", "RMSprop", {}),
    case("rmsprop_momentum", "RMSprop", {"lr": 0.001, "momentum": 0.9}),
    case("rmsprop_centered", "RMSprop", {"lr": 0.001, "centered": 1, "momentum": 0.5, "weight_decay": 0.01}),
    case("rmsprop_maximize", "RMSprop", {"lr": 0.003, "alpha": 0.9, "eps": 1e-6, "maximize": 1}),
    case("lion_default", "Lion", {}),
    case("lion_weight_decay", "Lion", {"lr": 0.001, "beta1": 0.95, "beta2": 0.98, "weight_decay": 0.1}),
    # Schedulers (with the optimizer they usually drive).
    case("steplr", "SGD", {"lr": 0.1, "momentum": 0.9}, sched={"type": "StepLR", "step_size": 5, "gamma": 0.5}),
    case("multisteplr", "SGD", {"lr": 0.1},
         sched={"type": "MultiStepLR", "milestones": [3, 7, 7, 12], "gamma": 0.3}),
    case("exponentiallr", "Adam", {"lr": 0.01}, sched={"type": "ExponentialLR", "gamma": 0.9}),
    case("cosineannealinglr", "SGD", {"lr": 0.1, "momentum": 0.9},
         sched={"type": "CosineAnnealingLR", "T_max": 8, "eta_min": 0.001}),
    case("linearlr", "AdamW", {"lr": 0.01},
         sched={"type": "LinearLR", "start_factor": 0.25, "end_factor": 1.0, "total_iters": 6}),
    case("linearlr_decay", "SGD", {"lr": 0.1},
         sched={"type": "LinearLR", "start_factor": 1.0, "end_factor": 0.1, "total_iters": 15}),
    case("warmupcosine", "AdamW", {"lr": 0.01, "weight_decay": 0.1},
         groups=[{"params": [0, 2]}, {"params": [1], "weight_decay": 0.0}],
         sched={"type": "WarmupCosine", "warmup_steps": 4, "total_steps": 16, "min_lr": 0.001}),
    case("onecyclelr", "SGD", {"lr": 0.1, "momentum": 0.9},
         sched={"type": "OneCycleLR", "max_lr": 0.2, "total_steps": STEPS}),
    case("onecyclelr_adam_three_phase", "Adam", {"lr": 0.01},
         sched={"type": "OneCycleLR", "max_lr": 0.05, "total_steps": 25, "pct_start": 0.25,
                "anneal_strategy": "linear", "three_phase": 1, "div_factor": 10.0, "final_div_factor": 100.0}),
    case("reducelronplateau", "SGD", {"lr": 0.1, "momentum": 0.5},
         sched={"type": "ReduceLROnPlateau", "mode": "min", "factor": 0.5, "patience": 2, "threshold": 1e-4,
                "threshold_mode": "rel", "cooldown": 1, "min_lr": 0.01},
         metrics=[1.0, 0.9, 0.95, 0.95, 0.95, 0.96, 0.8, 0.8, 0.8, 0.8, 0.8, 0.7, 0.7, 0.71, 0.72, 0.73,
                  0.74, 0.75, 0.5, 0.5]),
    case("reducelronplateau_max_abs", "Adam", {"lr": 0.01},
         sched={"type": "ReduceLROnPlateau", "mode": "max", "factor": 0.3, "patience": 1, "threshold": 0.05,
                "threshold_mode": "abs", "cooldown": 0, "min_lr": 0.0},
         metrics=[0.1, 0.2, 0.22, 0.23, 0.3, 0.31, 0.32, 0.4, 0.4, 0.41, 0.5, 0.5, 0.5, 0.6, 0.6, 0.6,
                  0.6, 0.7, 0.7, 0.7]),
    case("lambdalr", "SGD", {"lr": 0.1, "momentum": 0.9}, sched={"type": "LambdaLR", "fn": "0.95**epoch"}),
]


def make_scheduler(opt, cfg):
    t = cfg["type"]
    if t == "StepLR":
        return S.StepLR(opt, cfg["step_size"], cfg["gamma"])
    if t == "MultiStepLR":
        return S.MultiStepLR(opt, cfg["milestones"], cfg["gamma"])
    if t == "ExponentialLR":
        return S.ExponentialLR(opt, cfg["gamma"])
    if t == "CosineAnnealingLR":
        return S.CosineAnnealingLR(opt, cfg["T_max"], cfg["eta_min"])
    if t == "LinearLR":
        return S.LinearLR(opt, cfg["start_factor"], cfg["end_factor"], cfg["total_iters"])
    if t == "OneCycleLR":
        return S.OneCycleLR(opt, cfg["max_lr"], total_steps=cfg["total_steps"],
                            pct_start=cfg.get("pct_start", 0.3), anneal_strategy=cfg.get("anneal_strategy", "cos"),
                            div_factor=cfg.get("div_factor", 25.0), final_div_factor=cfg.get("final_div_factor", 1e4),
                            three_phase=bool(cfg.get("three_phase", 0)))
    if t == "ReduceLROnPlateau":
        return S.ReduceLROnPlateau(opt, mode=cfg["mode"], factor=cfg["factor"], patience=cfg["patience"],
                                   threshold=cfg["threshold"], threshold_mode=cfg["threshold_mode"],
                                   cooldown=cfg["cooldown"], min_lr=cfg["min_lr"])
    if t == "LambdaLR":
        assert cfg["fn"] == "0.95**epoch"
        return S.LambdaLR(opt, lambda epoch: 0.95 ** epoch)
    if t == "WarmupCosine":
        return None  # closed form below
    raise ValueError(t)


def run_case(c, init, grads):
    params = [torch.tensor(x.copy()).requires_grad_(True) for x in init]
    kw = torch_kwargs(c["options"], c["optimizer"])
    if c["groups"]:
        groups = []
        for g in c["groups"]:
            d = {k: v for k, v in g.items() if k != "params"}
            groups.append(dict(params=[params[i] for i in g["params"]], **torch_kwargs(d, c["optimizer"])))
        opt = OPTIMIZERS[c["optimizer"]](groups, **kw)
    else:
        opt = OPTIMIZERS[c["optimizer"]](params, **kw)
    cfg = c["scheduler"]
    sched = make_scheduler(opt, cfg) if cfg else None
    base_lrs = [g["lr"] for g in opt.param_groups]
    missing = {tuple(m) for m in c["missing"]}
    traj, lrs, momenta = [], [], []
    for step in range(STEPS):
        if cfg and cfg["type"] == "WarmupCosine":
            for g, base in zip(opt.param_groups, base_lrs):
                g["lr"] = warmup_cosine_lr(base, step, cfg["warmup_steps"], cfg["total_steps"], cfg["min_lr"])
        lrs.append([g["lr"] for g in opt.param_groups])
        momenta.append([g["betas"][0] if "betas" in g else g.get("momentum", 0.0) for g in opt.param_groups])
        for i, p in enumerate(params):
            p.grad = None if (i, step) in missing else torch.tensor(grads[step][i].copy())
        opt.step()
        if sched is not None:
            if cfg["type"] == "ReduceLROnPlateau":
                sched.step(c["metrics"][step])
            else:
                sched.step()
        traj.append(np.concatenate([p.detach().numpy().ravel() for p in params]))
    out = dict(c)
    out["lrs"] = lrs
    out["momenta"] = momenta
    return out, np.stack(traj).astype(np.float32)


def clip_fixtures(rng):
    """clip_grad_norm_ for norm types 2, 1, inf (clipping and not) and clip_grad_value_."""
    arrays, cases = {}, []
    base = [rng.standard_normal(s).astype(np.float32) * sc for s, sc in zip(SHAPES, SCALES)]
    arrays["grads"] = np.concatenate([b.ravel() for b in base])
    for norm_type in (2.0, 1.0, math.inf, 3.0):
        for max_norm in (1.0, 1e4):
            ps = [torch.zeros(s, requires_grad=True) for s in SHAPES]
            for p, b in zip(ps, base):
                p.grad = torch.tensor(b.copy())
            total = torch.nn.utils.clip_grad_norm_(ps, max_norm, norm_type)
            key = "norm_%s_%g" % ("inf" if norm_type == math.inf else "%g" % norm_type, max_norm)
            arrays[key] = np.concatenate([p.grad.numpy().ravel() for p in ps])
            cases.append(dict(key=key, norm_type="inf" if norm_type == math.inf else norm_type,
                              max_norm=max_norm, total_norm=float(total)))
    ps = [torch.zeros(s, requires_grad=True) for s in SHAPES]
    for p, b in zip(ps, base):
        p.grad = torch.tensor(b.copy())
    torch.nn.utils.clip_grad_value_(ps, 0.5)
    arrays["value_0.5"] = np.concatenate([p.grad.numpy().ravel() for p in ps])
    # Non-finite gradients with error_if_nonfinite=False: the coefficient is 0 (inf) or NaN.
    for name, bad in (("inf", math.inf), ("nan", math.nan)):
        ps = [torch.zeros(s, requires_grad=True) for s in SHAPES]
        for p, b in zip(ps, base):
            p.grad = torch.tensor(b.copy())
        ps[1].grad[3] = bad
        total = torch.nn.utils.clip_grad_norm_(ps, 1.0, 2.0)
        key = "nonfinite_" + name
        arrays[key] = np.concatenate([p.grad.numpy().ravel() for p in ps])
        cases.append(dict(key=key, norm_type=2.0, max_norm=1.0, total_norm=str(float(total)), bad=name))
    return arrays, cases


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "parity", "optim")
    os.makedirs(out_dir, exist_ok=True)
    torch.set_num_threads(1)
    rng = np.random.default_rng(1234)
    init = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = [[(rng.standard_normal(s) * sc).astype(np.float32) for s, sc in zip(SHAPES, SCALES)]
             for _ in range(STEPS)]
    np.savez(os.path.join(out_dir, "common.npz"),
             init=np.concatenate([x.ravel() for x in init]),
             grads=np.stack([np.concatenate([g.ravel() for g in gs]) for gs in grads]))
    meta, trajs = [], {}
    for c in CASES:
        out, traj = run_case(c, init, grads)
        meta.append(out)
        trajs[c["name"]] = traj
    np.savez(os.path.join(out_dir, "traj.npz"), **trajs)
    clip_arrays, clip_cases = clip_fixtures(rng)
    np.savez(os.path.join(out_dir, "clip.npz"), **clip_arrays)
    with open(os.path.join(out_dir, "cases.json"), "w") as f:
        json.dump(dict(torch=torch.__version__, steps=STEPS, shapes=SHAPES, cases=meta, clip=clip_cases), f,
                  indent=1)
    print("wrote %d optimizer/scheduler cases and %d clip cases to %s" % (len(meta), len(clip_cases), out_dir))


if __name__ == "__main__":
    main()
