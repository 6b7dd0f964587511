#!/usr/bin/python3
"""bench/under_load: Foundry, PyTorch 1.13 and llama.cpp while another program keeps a core busy.

Users run other programs beside ours. With BUSY CPU-bound processes running (default 1: a Python
`while True: pass`), each workload runs three ways, one process each: quiet with the default
threads (every core), loaded with 1 thread, loaded with the default threads. The last must be no
slower than the second: a thread pool whose threads wait for one another collapses when one of
them loses its core. Each loaded figure is the median of BENCH_REPEATS runs (default 3), the two
thread counts alternating; the quiet one is a single run.
  main job  `foundry train` on examples/shakespeare_char.toml for STEPS steps (default 300; the
            periodic evaluation and the closing sample are turned off, the run starts fresh) against
            the same model, data and optimiser in eager PyTorch (torch_main_job.py): seconds.
  prefill   128 tokens, and
  decode    128 tokens after a 32-token prompt, on the Llama-110M shape (random float32 weights;
            bench/infer_vs_torch's folder), by `bench_infer`, by PyTorch (infer_vs_torch/torch_infer.py)
            and by llama.cpp (`llama-bench -p 128 -n 128` on the same weights as an f32 GGUF written by
            `foundry convert`; left out without ../shared/tools/llama.cpp): tokens/s.
Usage: /usr/bin/python3 bench/under_load/run.py [BIN_DIR (default build/bin)] [--busy N] [--steps N]
       (BENCH_REPEATS=N in the environment: loaded runs per figure)
"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "tools"))
__import__("program").start(__doc__, __name__)
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "infer_vs_torch"))
import run as infer  # noqa: E402  (folder writer, model shapes, the JSON-line runner)
import importlib.util  # noqa: E402

_spec = importlib.util.spec_from_file_location("quant_decode_run", os.path.join(HERE, "..", "quant_decode", "run.py"))
quant = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(quant)  # llama.cpp build, llama-bench runner, tokenizer for the GGUF

PYTHON = "/usr/bin/python3"
# Loaded figures: the median of this many runs, 1 thread and the default threads alternating.
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))


class Load:
    """BUSY CPU-bound processes for the duration of a `with` block."""

    def __init__(self, busy):
        self.busy, self.procs = busy, []

    def __enter__(self):
        self.procs = [subprocess.Popen([PYTHON, "-c", "while True: pass"]) for _ in range(self.busy)]
        time.sleep(0.5)
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def main_job_config(tmp):
    """examples/shakespeare_char.toml without the periodic evaluation and the closing sample."""
    text = open(os.path.join(ROOT, "examples", "shakespeare_char.toml")).read()
    text = re.sub(r"(?m)^every = \d+", "every = 0", text)
    text = re.sub(r"(?m)^tokens = \d+", "tokens = 0", text)
    path = os.path.join(tmp, "main_job.toml")
    open(path, "w").write(text)
    return path


def foundry_main_job(bin_dir, config, tmp, steps, threads):
    start = time.perf_counter()
    subprocess.run([os.path.join(bin_dir, "foundry"), "train", "--config", config, "--max-steps", str(steps),
                    "--out-dir", os.path.join(tmp, "run"), "--fresh", "--no-track", "--threads", str(threads)],
                   cwd=ROOT, check=True, capture_output=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    return time.perf_counter() - start


def torch_main_job(steps, threads):
    return infer.run([PYTHON, os.path.join(HERE, "torch_main_job.py"), str(threads), str(steps)], threads)["seconds"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir", nargs="?", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--busy", type=int, default=1)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    cores = os.cpu_count()
    bench_infer = os.path.join(args.bin_dir, "bench_infer")
    for program in (bench_infer, os.path.join(args.bin_dir, "foundry")):
        if not os.access(program, os.X_OK):
            raise FileNotFoundError(f"{program} is not there (build first: ninja -C build bench_infer foundry_cli)")
    folder = "/tmp/foundry_bench_llama_tied"
    infer.write_folder(folder, quant.LLAMA_TIED)
    llama_dir = quant.llama_cpp_dir()
    gguf = None
    if llama_dir and quant.add_llama_tokenizer(folder):
        gguf = folder + "-f32.gguf"
        if not os.path.exists(gguf):
            subprocess.run([os.path.join(args.bin_dir, "foundry"), "convert", "--model", folder, "--to", gguf,
                            "--type", "f32"], check=True, capture_output=True)
    print(f"CPU: {quant.cpu_name()}, {cores} cores; load: {args.busy} busy process(es); llama.cpp: "
          f"{llama_dir or 'not available (no ../shared/tools/llama.cpp, or its build failed: above): its rows are left out'}\n")

    tmp = tempfile.mkdtemp(prefix="foundry_under_load_")
    config = main_job_config(tmp)
    # Each workload: name, unit, higher_is_better, {implementation: measure(threads) -> figure}.
    infer_cache = {}

    def foundry_infer(key, threads, loaded):
        k = ("foundry", threads, loaded)
        if k not in infer_cache:
            infer_cache[k] = infer.run([bench_infer, "--model", folder, "--threads", str(threads)], threads)
        return infer_cache[k][key]

    def torch_infer(key, threads, loaded):
        k = ("torch", threads, loaded)
        if k not in infer_cache:
            infer_cache[k] = infer.run([PYTHON, os.path.join(HERE, "..", "infer_vs_torch", "torch_infer.py"), folder,
                                        str(threads)], threads)
        return infer_cache[k][key]

    def llama_infer(index, threads, loaded):
        k = ("llama", threads, loaded)
        if k not in infer_cache:
            infer_cache[k] = quant.llama_bench(llama_dir, gguf, threads)
        return infer_cache[k][index]

    workloads = [
        ("main job, %d steps" % args.steps, "s", False, {
            "Foundry": lambda t, l: foundry_main_job(args.bin_dir, config, tmp, args.steps, t),
            "PyTorch": lambda t, l: torch_main_job(args.steps, t)}),
        ("prefill 128 (Llama-110M f32)", "tok/s", True, {
            "Foundry": lambda t, l: foundry_infer("prefill_tps", t, l),
            "PyTorch": lambda t, l: torch_infer("prefill_tps", t, l),
            **({"llama.cpp": lambda t, l: llama_infer(0, t, l)} if gguf else {})}),
        ("decode 128 (Llama-110M f32)", "tok/s", True, {
            "Foundry": lambda t, l: foundry_infer("decode_tps", t, l),
            "PyTorch": lambda t, l: torch_infer("decode_tps", t, l),
            **({"llama.cpp": lambda t, l: llama_infer(1, t, l)} if gguf else {})}),
    ]
    results = {}
    for name, _, _, impls in workloads:
        for impl, measure in impls.items():
            results[(name, impl, "quiet")] = measure(cores, False)
    with Load(args.busy):
        for name, _, _, impls in workloads:
            for impl, measure in impls.items():
                ones, defaults = [], []
                for r in range(REPEATS):  # alternating, so a change in the host's state hits both
                    ones.append(measure(1, ("loaded", r)))
                    defaults.append(measure(cores, ("loaded", r)))
                results[(name, impl, "loaded 1")] = statistics.median(ones)
                results[(name, impl, "loaded default")] = statistics.median(defaults)

    print(f"| workload | program | quiet, {cores} threads | loaded, 1 thread | loaded, {cores} threads | "
          f"loaded {cores} threads vs loaded 1 thread (goal >= 1.00x) |")
    print("|---|---|---|---|---|---|")
    for name, unit, higher, impls in workloads:
        for impl in impls:
            q, one, dflt = (results[(name, impl, k)] for k in ("quiet", "loaded 1", "loaded default"))
            ratio = dflt / one if higher else one / dflt
            print(f"| {name} | {impl} | {figure(q, unit)} | {figure(one, unit)} | {figure(dflt, unit)} | {ratio:.2f}x |",
                  flush=True)


def figure(value, unit):
    return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"


if __name__ == "__main__":
    main()
