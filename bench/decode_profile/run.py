#!/usr/bin/python3
"""bench/decode_profile: where a decode step's time goes, per thread (issue 13, A.2: the per-token
work outside the weight products).

Runs `bench_infer` on the Llama-110M shape of bench/quant_decode (random weights, tied output;
written to /tmp if absent) under `perf record` (Debian's linux-perf), decoding DECODE tokens after
a 32-token prompt, at 1 and 2 threads, recording the decode loop alone (bench_infer opens and
closes perf's window through its control pipes: --control fd:CTL,ACK). Each
thread's samples are classed by symbol: the weight products (matrix-vector kernels and the
activation quantization), attention over the KV cache (its 16-bit narrowing included), the small
compute kernels (norms, rotary, SwiGLU, adds, argmax, and a 16-bit model's widening of its rows and
norm weights), the pool (a thread waiting for a job or for the other thread's chunks), and
overhead: everything else (allocation, op dispatch, tensor bookkeeping). Samples of load-time work
(page faults, weight quantization) are left out should any fall inside the window. The caller's
row is the step's critical path; the worker's idle share is time the caller spent on serial work. "overhead
us/token" puts the overhead share in time (share x the step of the run without perf): ~80-140 us
a token on Llama-110M, and ~80 on a 6 MB q4_0 model of the same 12 layers and ops, so it is mostly
the ops' own cost (the rest their records evicted by the weight stream), and a faster step shows a
larger share of it.

Usage: /usr/bin/python3 bench/decode_profile/run.py [build/bin/bench_infer] [--format q4_0|f32|...]
       [--decode N] [--threads 1,2] [--repeats N]
--repeats (default 3) profiles each thread count N times and closes with the median of the caller's
overhead share and time: on this shared host one run's share moved between 4.5% and 7.8% with the
same build (2026-12-07, q4_K, 2 threads, six runs), so a single run does not settle a 5% line.
--format "f16 native" / "bf16 native" profiles an f16 / bf16 checkpoint of the same weights
computed in its own dtype (`--dtype native`, the folder bench/quant_decode writes beside it).
PERF_HZ (default 2000) sets perf's sampling rate: a fast decode gives few samples at 2000 (a 1000-
token run at ~550 tokens/s: ~3500 a thread, so a 5% share is +-0.4 points); 20000 perturbs the
step (the pool's share grew from ~7% to ~14% of the caller's samples).
"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "tools"))
__import__("program").start(__doc__, __name__)
import argparse
import collections
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "infer_vs_torch"))
import run as infer  # noqa: E402  (its folder writer and model shapes)

# First match wins; the order matters (a quantizer at load is "load", one in a product "products").
CLASSES = [
    ("load", r"quantize_q4_0\b|quantize_q8_0\b|quantize_q4_K\b|quantize_row_q4_K|clear_page|fault|folio|"
             r"unmap_page_range|Dequantize|exact_quantizer|QuantizeRowQ8_0Rounding<false>|filemap|copy_page|zap_|"
             r"memcg|lru_|rmqueue|__alloc_pages|release_pages|free_pcppages|page_|_raw_spin|mmap|do_syscall|"
             r"pvm_|kmem_|memset|_dl_relocate|native_set_pmd|__madvise"),
    ("products", r"dot_rows|vnni_rows|q4_0_rows|q8_0_rows|avx2_rows|GemvF16Rows|dot4_bf16|dot_bf16_row|GemvRowsF32|gemv|Gemv|::prepare|QuantizeRow|"
                 r"quantize_row|DotQ|Dot4|dot4|q4_K_rows|dot_q4_K|Q4K|q8_K|Q8K|gemm|run_rows|"
                 r"SumRowsInOrder|foundry::quant::"),  # the last: every x86 byte kernel (nibble_rows, ...)
    ("attention", r"Tile<|top12|DecodeAttention|decode_attention|streaming_attention|append_and_attend|store_rows|"
                  r"ConvertF32ToF16|ConvertF32ToBF16|__expf|Half::from_float"),
    ("small kernels", r"RmsNorm|rms_norm|residual_add|UnaryImpl|rope_rows|RopeRows|silu_mul|SiluMul|binary_kernel|BinaryImpl|Run<hwy|"
                      r"choose_token|first_max_index|argmax|embedding|Embedding|index_select|Softmax|RowSum|AddRms|Rope|"
                      r"ConvertF16ToF32|ConvertBF16ToF32"),
    ("pool", r"Pool::|parallel_for|sched_yield|futex|WaitFor|pthread_mutex|lll_mutex"),
]
SHOWN = ["products", "attention", "small kernels", "pool", "overhead"]


# A chunk's body runs inside a thunk named after the callable: parallel_for's RangeFn (or a
# std::function) wrapping a lambda of the function that started the job; classed by that function.
THUNK = re.compile(r"^(foundry::RangeFn::RangeFn<|std::_Function_handler<void \(long, long\), )")


def classify(sym):
    sym = THUNK.sub("", sym)
    for name, rx in CLASSES:
        if re.search(rx, sym):
            return name
    return "overhead"


def profile(binary, folder, fmt, threads, decode, data):
    args = [binary, "--threads", str(threads), "--kv-cache", "f16", "--prefill", "8", "--prompt", "32",
            "--decode", str(decode)]
    if fmt.endswith(" native"):
        args += ["--model", f"{folder}_{fmt.split()[0]}", "--dtype", "native"]
    else:
        args += ["--model", folder] + (["--quantize", fmt] if fmt != "f32" else [])
    # A run without perf gives the step's time; under perf, bench_infer opens the recording at the
    # first new token and closes it after the last (perf's control pipes), so load, prefill and
    # the prompt's pass stay out whatever their length.
    first = infer.run(args, threads)
    ctl_r, ctl_w = os.pipe()
    ack_r, ack_w = os.pipe()
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), FOUNDRY_PERF_CTL_FD=str(ctl_w), FOUNDRY_PERF_ACK_FD=str(ack_r))
    try:
        subprocess.run(["perf", "record", "-q", "-F", os.environ.get("PERF_HZ", "2000"), "-D", "-1",
                        "--control", f"fd:{ctl_r},{ack_w}", "-o", data, "--", *args], check=True,
                       capture_output=True, env=env, pass_fds=(ctl_r, ctl_w, ack_r, ack_w))
    finally:
        for fd in (ctl_r, ctl_w, ack_r, ack_w):
            os.close(fd)
    report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "pid,sym", "--stdio", "-F",
                             "sample,pid,sym"], check=True, capture_output=True, text=True).stdout
    per = collections.defaultdict(collections.Counter)
    overhead = collections.defaultdict(collections.Counter)
    for line in report.splitlines():
        m = re.match(r"\s*(\d+)\s+(\d+):\S+\s+\[[.k]\]\s+(.*)", line)
        if not m:
            continue
        n, tid, sym = int(m.group(1)), m.group(2), m.group(3)
        c = classify(sym)
        per[tid][c] += n
        if c == "overhead":
            overhead[tid][sym[:60]] += n
    return first["decode_tps"], per, overhead


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary", nargs="?", default=os.path.join(HERE, "..", "..", "build", "bin", "bench_infer"))
    ap.add_argument("--format", default="q4_0")
    ap.add_argument("--decode", type=int, default=1000)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    if a.repeats < 1:
        sys.exit("decode_profile: error: --repeats must be at least 1")
    if not os.path.exists(a.binary):
        sys.exit(f"decode_profile: error: no bench_infer at {a.binary} (build it: ninja -C build bench_infer)")
    if not shutil.which("perf"):
        sys.exit("decode_profile: error: perf is not installed (Debian: apt-get install linux-perf)")
    folder = "/tmp/foundry_bench_llama_tied"
    infer.write_folder(folder, dict(infer.LLAMA, tie_word_embeddings=True))
    if a.format.endswith(" native"):
        dtype = a.format.split()[0]
        infer.write_16bit_copy(folder, f"{folder}_{dtype}", {"f16": "float16", "bf16": "bfloat16"}[dtype])
    print(f"Llama-110M (tied), {a.format}, decode {a.decode} tokens after a 32-token prompt, f16 KV cache\n")
    print("| threads | thread | samples | " + " | ".join(SHOWN) + " | overhead us/token | top overhead symbols |")
    print("|---|---|---|" + "---|" * len(SHOWN) + "---|---|")
    medians = []
    with tempfile.TemporaryDirectory() as tmp:
        for threads in (int(t) for t in a.threads.split(",")):
            caller = []  # (overhead share, us a token) of each run's caller
            for _ in range(a.repeats):
                tps, per, overhead = profile(a.binary, folder, a.format, threads, a.decode, os.path.join(tmp, "perf.data"))
                busy = sorted(per, key=lambda t: -sum(per[t].values()))[:threads]
                for rank, tid in enumerate(sorted(busy, key=int)):  # the caller starts first: lowest tid
                    step = sum(v for k, v in per[tid].items() if k != "load")
                    shares = " | ".join(f"{100.0 * per[tid][c] / step:.1f}%" for c in SHOWN)
                    top = "; ".join(f"{s} {n}" for s, n in overhead[tid].most_common(4))
                    role = "caller" if rank == 0 else f"worker {rank}"
                    # The share in time: the same per-token work is a larger share of a faster step.
                    us = 1e6 / tps * per[tid]["overhead"] / step
                    if rank == 0:
                        caller.append((100.0 * per[tid]["overhead"] / step, us))
                    print(f"| {threads} ({tps:.0f} tok/s) | {role} | {step} | {shares} | {us:.0f} | {top} |", flush=True)
            medians.append((threads, caller))
    print()
    for threads, caller in medians:
        shares = sorted(c[0] for c in caller)
        print(f"{threads} thread{'s' if threads > 1 else ''}: the caller's overhead, median of {len(caller)} runs: "
              f"{statistics.median(shares):.1f}% of the step ({shares[0]:.1f}-{shares[-1]:.1f}%), "
              f"{statistics.median(c[1] for c in caller):.0f} us a token")


if __name__ == "__main__":
    main()
