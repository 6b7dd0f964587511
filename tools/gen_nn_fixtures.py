#!/usr/bin/python3
"""Writes the nn-layer parity fixtures (tests/parity/nn/*.npz) with PyTorch 1.13.

Usage:
    /usr/bin/python3 tools/gen_nn_fixtures.py [tests/parity/nn] [case ...]

Each case builds a layer in torch with a fixed seed (parameters are perturbed so that ones/zeros
defaults are not trivially matched), and saves with numpy.savez:
    state.NNN.<key>   the state_dict before the forward pass, NNN = position in torch's order
    in.<i>            inputs (floating inputs with a grad.in.<i> entry are differentiated)
    out.<j>           outputs
    gout.<j>          the grad_output used for output j (loss = sum_j sum(out_j * gout_j))
    grad.in.<i>       input gradients
    grad.param.<n>    parameter gradients, by named_parameters name
    after.<key>       the state_dict after the forward pass (running statistics)
tests/unit/nn_layers_parity_test.cpp builds the same layers in Foundry, load_state_dict's the
torch weights (the key names must match exactly) and compares everything. The activation and
loss fixtures (activations.npz, losses.npz) hold "<name>.out" / "<name>.grad" pairs instead.
"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.dirname(_os.path.abspath(__file__)))
__import__("program").start(__doc__, __name__)
import math
import os
import sys
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

OUT_DIR = "tests/parity/nn"


def np_of(t):
    return t.detach().cpu().clone().numpy()


def perturb(module, seed):
    g = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g, dtype=p.dtype))


def rnd(*shape, dtype=torch.float32, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


class RMSNormRef(nn.Module):
    """torch 2.4's nn.RMSNorm (1.13 has none): x * rsqrt(mean(x^2) + eps) * weight."""

    def __init__(self, shape, eps=None):
        super().__init__()
        self.shape = tuple(shape)
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(self.shape))

    def forward(self, x):
        dims = tuple(range(-len(self.shape), 0))
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        return x * torch.rsqrt(x.pow(2).mean(dims, keepdim=True) + eps) * self.weight


def save_case(out_dir, name, module, inputs, run, diff_inputs=None, seed=0, before=None, extras=None):
    """inputs: list of tensors; run(module, inputs) -> list of outputs (None allowed); extras:
    named constant tensors the run uses (masks), saved as extra.<name>."""
    arrays = {}
    for k, v in (extras or {}).items():
        arrays["extra." + k] = np_of(v)
    if before is not None:
        before(module)
    for i, (k, v) in enumerate(module.state_dict().items()):
        arrays["state.%03d.%s" % (i, k)] = np_of(v)
    ins = []
    for i, x in enumerate(inputs):
        x = x.clone()
        differentiable = x.is_floating_point() and (diff_inputs is None or i in diff_inputs)
        if differentiable:
            x.requires_grad_(True)
        arrays["in.%d" % i] = np_of(x)
        ins.append(x)
    outs = run(module, ins)
    terms = []
    for j, o in enumerate(outs):
        if o is None:
            continue
        arrays["out.%d" % j] = np_of(o)
        if o.is_floating_point() and o.requires_grad:
            go = rnd(*o.shape, dtype=o.dtype, seed=seed * 31 + j + 7)
            arrays["gout.%d" % j] = np_of(go)
            terms.append((o * go).sum())
    if terms:
        sum(terms).backward()
    for i, x in enumerate(ins):
        if x.requires_grad and x.grad is not None:
            arrays["grad.in.%d" % i] = np_of(x.grad)
    for n, p in module.named_parameters():
        if p.grad is not None:
            arrays["grad.param.%s" % n] = np_of(p.grad)
    for k, v in module.state_dict().items():
        arrays["after.%s" % k] = np_of(v)
    np.savez(os.path.join(out_dir, name + ".npz"), **arrays)


def one(m, ins):
    return [m(ins[0])]


def causal_bool(n):
    return torch.triu(torch.ones(n, n, dtype=torch.bool), 1)


def cases():
    f32, f64 = torch.float32, torch.float64
    C = {}

    def case(name, make, inputs, run=one, dtype=f32, seed=0, diff_inputs=None, before=None, train=True, extras=None):
        C[name] = (make, inputs, run, dtype, seed, diff_inputs, before, train, extras)

    # ---- linear / embedding ----
    case("linear", lambda: nn.Linear(4, 3), lambda: [rnd(2, 5, 4, seed=1)])
    case("linear_nobias_f64", lambda: nn.Linear(5, 2, bias=False), lambda: [rnd(3, 5, dtype=f64, seed=2)], dtype=f64)
    case("bilinear", lambda: nn.Bilinear(3, 4, 2), lambda: [rnd(5, 3, seed=3), rnd(5, 4, seed=4)],
         run=lambda m, x: [m(x[0], x[1])])
    case("embedding", lambda: nn.Embedding(10, 4, padding_idx=1),
         lambda: [torch.tensor([[1, 2, 3, 2, 9], [0, 1, 1, 5, 2]])])
    case("embedding_max_norm", lambda: nn.Embedding(10, 4, max_norm=1.5),
         lambda: [torch.tensor([[1, 2, 3, 2], [7, 1, 1, 5]])])
    case("embedding_scale_grad", lambda: nn.Embedding(6, 3, scale_grad_by_freq=True),
         lambda: [torch.tensor([0, 2, 2, 5, 2, 0])])
    # ---- normalisation ----
    case("layer_norm", lambda: nn.LayerNorm(6), lambda: [rnd(3, 4, 6, seed=5)])
    case("layer_norm_2d_f64", lambda: nn.LayerNorm([4, 6], eps=1e-3), lambda: [rnd(3, 4, 6, dtype=f64, seed=6)],
         dtype=f64)
    case("layer_norm_noaffine", lambda: nn.LayerNorm(5, elementwise_affine=False), lambda: [rnd(2, 5, seed=7)])
    case("rms_norm", lambda: RMSNormRef([6]), lambda: [rnd(3, 4, 6, seed=8)])
    case("rms_norm_eps_f64", lambda: RMSNormRef([4, 6], eps=1e-4), lambda: [rnd(2, 4, 6, dtype=f64, seed=9)],
         dtype=f64)
    case("group_norm", lambda: nn.GroupNorm(2, 6), lambda: [rnd(2, 6, 5, seed=10)])
    case("group_norm_4d_f64", lambda: nn.GroupNorm(3, 6, eps=1e-4), lambda: [rnd(2, 6, 3, 2, dtype=f64, seed=11)],
         dtype=f64)

    def two_steps(m, x):
        return [m(x[0]), m(x[1])]

    case("batch_norm1d_train", lambda: nn.BatchNorm1d(4), lambda: [rnd(8, 4, seed=12), rnd(8, 4, seed=13, scale=2)],
         run=two_steps)
    case("batch_norm1d_3d_cma", lambda: nn.BatchNorm1d(3, momentum=None),
         lambda: [rnd(4, 3, 5, seed=14), rnd(4, 3, 5, seed=15)], run=two_steps)

    def perturb_stats(m):
        with torch.no_grad():
            m.running_mean.copy_(rnd(*m.running_mean.shape, seed=16))
            m.running_var.copy_(rnd(*m.running_var.shape, seed=17).abs() + 0.5)
            m.num_batches_tracked.fill_(3)

    case("batch_norm2d_eval", lambda: nn.BatchNorm2d(3), lambda: [rnd(2, 3, 4, 5, seed=18)], before=perturb_stats,
         train=False)
    case("batch_norm2d_train_f64", lambda: nn.BatchNorm2d(3, momentum=0.3), lambda: [rnd(2, 3, 4, 5, dtype=f64, seed=19)],
         dtype=f64, before=perturb_stats)
    case("batch_norm2d_no_stats", lambda: nn.BatchNorm2d(3, track_running_stats=False, affine=False),
         lambda: [rnd(2, 3, 3, 3, seed=20)], train=False)
    # ---- convolution / pooling ----
    case("conv1d", lambda: nn.Conv1d(3, 4, 3, stride=2, padding=1), lambda: [rnd(2, 3, 9, seed=21)])
    case("conv1d_same_reflect", lambda: nn.Conv1d(2, 3, 4, padding="same", padding_mode="reflect", dilation=2),
         lambda: [rnd(2, 2, 11, seed=22)])
    case("conv1d_unbatched_f64", lambda: nn.Conv1d(2, 4, 3, groups=2, bias=False), lambda: [rnd(2, 7, dtype=f64, seed=23)],
         dtype=f64)
    case("conv2d", lambda: nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2),
         lambda: [rnd(2, 4, 7, 8, seed=24)])
    case("conv2d_same_even", lambda: nn.Conv2d(2, 3, 4, padding="same"), lambda: [rnd(1, 2, 6, 5, seed=25)])
    case("conv2d_circular", lambda: nn.Conv2d(2, 3, 3, padding=1, padding_mode="circular"),
         lambda: [rnd(2, 2, 5, 5, seed=26)])
    case("conv2d_replicate_f64", lambda: nn.Conv2d(2, 2, (2, 3), padding=(1, 2), padding_mode="replicate"),
         lambda: [rnd(1, 2, 4, 4, dtype=f64, seed=27)], dtype=f64)
    case("conv_transpose2d", lambda: nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1, groups=2),
         lambda: [rnd(2, 4, 4, 5, seed=28)])
    case("conv_transpose2d_output_size", lambda: nn.ConvTranspose2d(2, 3, (3, 2), stride=(2, 3), dilation=(1, 2)),
         lambda: [rnd(1, 2, 3, 4, seed=29)], run=lambda m, x: [m(x[0], output_size=[8, 14])])
    case("max_pool2d", lambda: nn.MaxPool2d(3, stride=2, padding=1), lambda: [rnd(2, 3, 7, 7, seed=30)])
    case("max_pool2d_ceil_dilation", lambda: nn.MaxPool2d((2, 3), stride=(2, 2), dilation=(1, 2), ceil_mode=True),
         lambda: [rnd(1, 2, 7, 9, seed=31)])
    case("avg_pool2d", lambda: nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False),
         lambda: [rnd(2, 3, 7, 6, seed=32)])
    case("avg_pool2d_ceil_divisor", lambda: nn.AvgPool2d(2, ceil_mode=True, divisor_override=3),
         lambda: [rnd(1, 2, 5, 5, seed=33)])
    case("adaptive_avg_pool2d", lambda: nn.AdaptiveAvgPool2d((3, None)), lambda: [rnd(2, 3, 7, 5, seed=34)])
    case("adaptive_avg_pool2d_sq", lambda: nn.AdaptiveAvgPool2d(4), lambda: [rnd(1, 2, 9, 7, seed=35)])
    # ---- attention ----
    # No query may see only padded keys (torch gives NaN rows there): key 0 is never padded.
    kpm = torch.tensor([[False, False, True, False, True], [False, False, False, False, False],
                        [False, True, False, False, False]])

    def mha(need_weights=True, average=True, masks=(None, None)):
        def run(m, x):
            q = x[0]
            k = x[1] if len(x) > 1 else q
            v = x[2] if len(x) > 2 else k
            o, w = m(q, k, v, key_padding_mask=masks[0], need_weights=need_weights, attn_mask=masks[1],
                     average_attn_weights=average)
            return [o, w]
        return run

    case("mha_self_masks", lambda: nn.MultiheadAttention(8, 2), lambda: [rnd(5, 3, 8, seed=36)],
         run=mha(masks=(kpm, causal_bool(5))), extras={"key_padding_mask": kpm, "attn_mask": causal_bool(5)})
    float_mask = rnd(4, 6, seed=37)
    case("mha_cross_batch_first_kdim", lambda: nn.MultiheadAttention(8, 4, batch_first=True, kdim=6, vdim=5,
                                                                     add_bias_kv=True, add_zero_attn=True),
         lambda: [rnd(2, 4, 8, seed=38), rnd(2, 6, 6, seed=39), rnd(2, 6, 5, seed=40)],
         run=mha(average=False, masks=(None, float_mask)), extras={"attn_mask": float_mask})
    mask3 = rnd(3 * 2, 5, 5, seed=41) * 0.5
    case("mha_no_weights_3d_mask", lambda: nn.MultiheadAttention(8, 2, bias=False), lambda: [rnd(5, 3, 8, seed=42)],
         run=mha(need_weights=False, masks=(kpm, mask3)), extras={"key_padding_mask": kpm, "attn_mask": mask3})
    case("mha_unbatched_f64", lambda: nn.MultiheadAttention(4, 2), lambda: [rnd(3, 4, dtype=f64, seed=43),
                                                                            rnd(5, 4, dtype=f64, seed=44)],
         run=mha(), dtype=f64)

    src_mask = torch.triu(torch.full((5, 5), float("-inf")), 1)

    def enc(m, x):
        return [m(x[0], src_mask=src_mask, src_key_padding_mask=kpm)]

    for nf in (False, True):
        case("transformer_encoder_norm_first_%d" % nf,
             lambda nf=nf: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, norm_first=nf),
             lambda: [rnd(5, 3, 8, seed=45)], run=enc, extras={"src_mask": src_mask, "key_padding_mask": kpm})
    case("transformer_encoder_gelu_batch_first",
         lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation="gelu", batch_first=True),
         lambda: [rnd(3, 5, 8, seed=46)], run=enc, extras={"src_mask": src_mask, "key_padding_mask": kpm})
    mem_kpm = torch.tensor([[False, False, False, True], [False, True, False, False], [False, False, False, False]])

    def dec(m, x):
        return [m(x[0], x[1], tgt_mask=src_mask, memory_key_padding_mask=mem_kpm)]

    for nf in (False, True):
        case("transformer_decoder_norm_first_%d" % nf,
             lambda nf=nf: nn.TransformerDecoderLayer(8, 2, 16, dropout=0.0, norm_first=nf),
             lambda: [rnd(5, 3, 8, seed=47), rnd(4, 3, 8, seed=48)], run=dec,
             extras={"tgt_mask": src_mask, "memory_key_padding_mask": mem_kpm})
    # ---- recurrent ----

    def lstm_run(m, x):
        if len(x) == 3:
            out, (h, c) = m(x[0], (x[1], x[2]))
        else:
            out, (h, c) = m(x[0])
        return [out, h, c]

    def gru_run(m, x):
        out, h = m(x[0], x[1]) if len(x) == 2 else m(x[0])
        return [out, h]

    case("lstm_2layer_bidir_batch_first", lambda: nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True),
         lambda: [rnd(2, 5, 3, seed=49), rnd(4, 2, 4, seed=50), rnd(4, 2, 4, seed=51)], run=lstm_run)
    case("lstm_proj_f64", lambda: nn.LSTM(3, 5, proj_size=2), lambda: [rnd(4, 2, 3, dtype=f64, seed=52)],
         run=lstm_run, dtype=f64)
    case("gru_2layer_bidir_batch_first", lambda: nn.GRU(3, 4, num_layers=2, bidirectional=True, batch_first=True),
         lambda: [rnd(2, 5, 3, seed=53), rnd(4, 2, 4, seed=54)], run=gru_run)
    case("gru_unbatched_nobias", lambda: nn.GRU(3, 4, bias=False), lambda: [rnd(6, 3, seed=55)], run=gru_run)
    # ---- containers ----
    case("sequential", lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.0), nn.Linear(8, 2), nn.Tanh()),
         lambda: [rnd(3, 4, seed=56)])
    return C


def activations():
    acts = {
        "relu": nn.ReLU(), "gelu": nn.GELU(), "gelu_tanh": nn.GELU(approximate="tanh"), "silu": nn.SiLU(),
        "tanh": nn.Tanh(), "sigmoid": nn.Sigmoid(), "leaky_relu": nn.LeakyReLU(0.2), "elu": nn.ELU(0.7),
        "selu": nn.SELU(), "celu": nn.CELU(1.3), "softplus": nn.Softplus(2.0, 3.0), "softsign": nn.Softsign(),
        "hardtanh": nn.Hardtanh(-0.5, 1.5), "relu6": nn.ReLU6(), "hardsigmoid": nn.Hardsigmoid(),
        "hardswish": nn.Hardswish(), "mish": nn.Mish(), "logsigmoid": nn.LogSigmoid(), "softmax": nn.Softmax(1),
        "log_softmax": nn.LogSoftmax(-1), "softmax_legacy": nn.Softmax(),
    }
    x = rnd(4, 7, seed=60, scale=3.0)
    go = rnd(4, 7, seed=61)
    arrays = {"x": np_of(x), "gout": np_of(go)}
    for name, m in acts.items():
        xi = x.clone().requires_grad_(True)
        y = m(xi)
        (y * go).sum().backward()
        arrays[name + ".out"] = np_of(y)
        arrays[name + ".grad"] = np_of(xi.grad)
    return arrays


def losses():
    arrays = {}

    def add(name, module, inp, target):
        inp = inp.clone().requires_grad_(True)
        y = module(inp, target)
        go = rnd(*y.shape, seed=70) if y.dim() > 0 else torch.tensor(1.0)
        (y * go).sum().backward()
        arrays[name + ".input"] = np_of(inp)
        arrays[name + ".target"] = np_of(target)
        arrays[name + ".gout"] = np_of(go)
        arrays[name + ".out"] = np_of(y)
        arrays[name + ".grad"] = np_of(inp.grad)

    logits = rnd(6, 5, seed=71)
    cls = torch.tensor([0, 4, 2, -100, 1, 2])
    w5 = rnd(5, seed=72).abs() + 0.5
    arrays["extra.w5"] = np_of(w5)
    add("cross_entropy", nn.CrossEntropyLoss(), logits, torch.tensor([0, 4, 2, 3, 1, 2]))
    add("cross_entropy_weight_ignore_smooth", nn.CrossEntropyLoss(weight=w5, ignore_index=-100, label_smoothing=0.1),
        logits, cls)
    add("cross_entropy_probs_sum", nn.CrossEntropyLoss(reduction="sum"), logits, F.softmax(rnd(6, 5, seed=73), 1))
    add("cross_entropy_4d_none", nn.CrossEntropyLoss(reduction="none"), rnd(2, 3, 2, 2, seed=74),
        torch.tensor([[[0, 2], [1, 1]], [[2, 0], [0, 1]]]))
    add("nll_loss_weight", nn.NLLLoss(weight=w5), F.log_softmax(logits, 1).detach(), torch.tensor([0, 4, 2, 3, 1, 2]))
    a, b = rnd(3, 4, seed=75), rnd(3, 4, seed=76)
    add("mse_loss", nn.MSELoss(), a, b)
    add("mse_loss_none", nn.MSELoss(reduction="none"), a, b)
    add("l1_loss_sum", nn.L1Loss(reduction="sum"), a, b)
    add("smooth_l1_loss", nn.SmoothL1Loss(beta=0.5), a, b)
    add("huber_loss", nn.HuberLoss(delta=0.7), a, b)
    p = torch.sigmoid(rnd(3, 4, seed=77))
    t = (rnd(3, 4, seed=78) > 0).double().float()
    bce_weight, pos_weight = rnd(4, seed=79).abs(), rnd(4, seed=80).abs() + 0.5
    arrays["extra.bce_weight"] = np_of(bce_weight)
    arrays["extra.pos_weight"] = np_of(pos_weight)
    add("bce_loss_weight", nn.BCELoss(weight=bce_weight), p, t)
    add("bce_with_logits_pos_weight", nn.BCEWithLogitsLoss(pos_weight=pos_weight), rnd(3, 4, seed=81), t)
    lp = F.log_softmax(rnd(3, 5, seed=82), 1).detach()
    q = F.softmax(rnd(3, 5, seed=83), 1)
    add("kl_div_batchmean", nn.KLDivLoss(reduction="batchmean"), lp, q)
    add("kl_div_log_target_sum", nn.KLDivLoss(reduction="sum", log_target=True), lp, q.log())
    return arrays


def main():
    args = sys.argv[1:]
    out_dir = OUT_DIR
    if args and os.path.isdir(args[0]) or (args and args[0].endswith("/")):
        out_dir = args.pop(0)
    os.makedirs(out_dir, exist_ok=True)
    only = set(args)
    torch.set_num_threads(1)
    for name, (make, inputs, run, dtype, seed, diff_inputs, before, train, extras) in cases().items():
        if only and name not in only:
            continue
        torch.manual_seed(seed)
        m = make().to(dtype)
        perturb(m, seed)
        m.train(train)
        save_case(out_dir, name, m, inputs(), run, diff_inputs, seed=zlib.crc32(name.encode()) % 1000, before=before,
                  extras=extras)
    if not only or "activations" in only:
        np.savez(os.path.join(out_dir, "activations.npz"), **activations())
    if not only or "losses" in only:
        np.savez(os.path.join(out_dir, "losses.npz"), **losses())
    print("wrote fixtures to", out_dir)


if __name__ == "__main__":
    main()
