"""PyTorch 1.13 side of bench/ops_vs_torch (same cases, same timing method, JSON lines)."""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "tools"))
__import__("program").start(__doc__, __name__)
import json
import sys
import time

import torch
import torch.nn.functional as F

threads = int(sys.argv[1])
torch.set_num_threads(threads)
torch.manual_seed(0)


def median_ms(fn, min_total_ms=300):
    fn()
    times, total = [], 0.0
    while (total < min_total_ms and len(times) < 200) or len(times) < 5:
        t0 = time.perf_counter()
        fn()
        ms = (time.perf_counter() - t0) * 1000
        times.append(ms)
        total += ms
    times.sort()
    return times[len(times) // 2]


def report(name, ms, nbytes, flops):
    print(json.dumps({"case": name, "ms": ms, "bytes": nbytes, "flops": flops}), flush=True)


def sdpa_math(q, k, v, causal):
    # torch 1.13 has no fused SDPA: the reference is the math formula.
    s = q @ k.transpose(-2, -1) / (q.shape[-1] ** 0.5)
    if causal:
        L = q.shape[-2]
        s = s.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


with torch.no_grad():
    N = 1 << 22
    a, b = torch.randn(N), torch.randn(N)
    m, row = torch.randn(2048, 2048), torch.randn(2048)
    dst = torch.empty(N)
    report("copy_bandwidth", median_ms(lambda: dst.copy_(a)), 2.0 * N * 4, 0)
    report("add", median_ms(lambda: torch.add(a, b)), 3.0 * N * 4, N)
    report("add_broadcast", median_ms(lambda: torch.add(m, row)), 2.0 * m.numel() * 4, m.numel())
    report("mul", median_ms(lambda: torch.mul(a, b)), 3.0 * N * 4, N)
    report("mul_broadcast", median_ms(lambda: torch.mul(m, row)), 2.0 * m.numel() * 4, m.numel())
    report("exp", median_ms(lambda: torch.exp(a)), 2.0 * N * 4, N)
    report("gelu", median_ms(lambda: F.gelu(a)), 2.0 * N * 4, N)
    report("gelu_tanh", median_ms(lambda: F.gelu(a, approximate="tanh")), 2.0 * N * 4, N)
    s = torch.randn(4096, 1024)
    report("sum_last_dim", median_ms(lambda: s.sum(-1)), s.numel() * 4.0, s.numel())
    big = torch.randn(1 << 24)
    report("sum_all", median_ms(lambda: big.sum()), big.numel() * 4.0, big.numel())
    report("softmax", median_ms(lambda: torch.softmax(s, -1)), 2.0 * s.numel() * 4, 0)
    ln, w, bias = torch.randn(8192, 768), torch.randn(768), torch.randn(768)
    report("layer_norm", median_ms(lambda: F.layer_norm(ln, (768,), w, bias)), 2.0 * ln.numel() * 4, 0)
    for name, M, K, Nn in [("matmul_512", 512, 512, 512), ("matmul_1024", 1024, 1024, 1024),
                           ("matmul_2048", 2048, 2048, 2048), ("matmul_64x768x2304", 64, 768, 2304),
                           ("matmul_512x768x3072", 512, 768, 3072), ("matmul_1x768x768", 1, 768, 768)]:
        x, y = torch.randn(M, K), torch.randn(K, Nn)
        report(name, median_ms(lambda: x @ y), 4.0 * (M * K + K * Nn + M * Nn), 2.0 * M * K * Nn)
    x, k = torch.randn(8, 64, 56, 56), torch.randn(64, 64, 3, 3)
    report("conv2d_3x3", median_ms(lambda: F.conv2d(x, k, padding=1)), 0, 2.0 * 8 * 64 * 56 * 56 * 64 * 9)
    q, kk, v = torch.randn(1, 12, 512, 64), torch.randn(1, 12, 512, 64), torch.randn(1, 12, 512, 64)
    report("sdpa_causal", median_ms(lambda: sdpa_math(q, kk, v, True)), 0, 2.0 * 2 * 12 * 512 * 512 * 64 / 2)

x = torch.randn(256, 784)
w1 = (torch.randn(1024, 784) * 0.03).requires_grad_()
b1 = torch.zeros(1024, requires_grad=True)
w2 = (torch.randn(10, 1024) * 0.03).requires_grad_()
b2 = torch.zeros(10, requires_grad=True)
target = torch.randint(0, 10, (256,))


def mlp():
    loss = F.cross_entropy(F.linear(F.relu(F.linear(x, w1, b1)), w2, b2), target)
    loss.backward()


report("mlp_backward", median_ms(mlp), 0, 3 * 2.0 * 256 * (784 * 1024 + 1024 * 10))
