#!/usr/bin/python3
"""bench/quant_decode: quantized CPU inference, every weight format side by side, with llama.cpp
in the same run on the same machine.

The Llama-style ~110M shape (dim 768, 12 layers, 12 heads, SwiGLU 2048, vocab 32000, tied output:
the folder stores no lm_head.weight) and GPT-2 124M, random weights, run by `bench_infer` (one
process per row) with 1 and 2 threads: prefill of 128 tokens, greedy decode of 128 tokens after a
32-token prompt, peak RSS. "Weight GB/s" is decode tokens/s times the bytes of weight matrices one
token reads (every projection and the output matrix once, in the row's format; embedding rows and
norms are negligible) next to this machine's read bandwidth, measured in the same run
(`bench_infer --stream-mb`, summing a 1 GiB float array), as a fraction of it.

Rows: `f32` runs the float32 folder; `f16` / `bf16` / `q*` / `nf4` quantize its weights at load
(`--quantize`); `f16 native` / `bf16 native` run a float16 / bfloat16 checkpoint of the same
weights computed in its own dtype (`--dtype native`). Foundry's bf16 rows read their matrices
packed without loss (~12.4 bits a weight, the same values: docs/quantization.md), and their weight
GB/s counts the packed bytes.

Foundry keeps its KV cache in f16 here (`--kv-cache f16`), as llama-bench does by default. Every
figure is the median of BENCH_REPEATS (default 5) runs, Foundry's and llama.cpp's alternating
(on a shared host whose speed changes from process to process and minute to minute, 3 left single
rows 0.8x in one run and 1.2x in the next). The last column puts each side's fastest decode of
those runs side by side: on a host where each process lands in a fast or a slow memory state
(the same library's decode read 180-360 tokens/s between processes), a median ratio can pair one
side's fast runs with the other's slow ones, while other tenants only ever slow a run down, so the
best of N compares both sides at their unhindered speed (both statistics are printed). Beside it,
llama.cpp's own weight GB/s (its best decode times the same bytes a token) as a fraction of the
read bandwidth measured at the start: decode streams every weight once a token, so where
llama.cpp already reads near that bandwidth no program can be much faster than it (a fast
process reads somewhat above the figure taken at the start, hence "near").

llama.cpp: `../shared/tools/llama.cpp/build.sh` (a native build, cached) and `llama-bench -p 128
-n 128 -r 1` (once per repetition) on GGUF files written by `foundry convert` from the same folder
(f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_K, q5_K, q6_K: every type both run; the same
weights Foundry quantizes at load), Llama rows only
(convert writes Llama-family GGUFs), with llama-bench's own peak RSS. Foundry also runs each of
those GGUF files (the loader `foundry generate --model file.gguf` uses): its decode next to the
folder's `--quantize` figure.
Without ../shared the llama.cpp columns are left out.

`--isa avx2` runs the same comparison as an AVX2-only CPU would (the issue's goals hold "on every
CPU"): Foundry under FOUNDRY_MAX_ISA=avx2 (no AVX-512 kernels; OPENBLAS_CORETYPE=Haswell) beside a
llama.cpp built from the same source with GGML_NATIVE=OFF and AVX2 / FMA / F16C only (built once
next to the native build, then cached), Llama rows only.
`--formats LIST` (comma-separated, e.g. "bf16,bf16 native") runs those rows only.
Usage: /usr/bin/python3 bench/quant_decode/run.py [build/bin/bench_infer] [--isa native|avx2] [--formats LIST]
"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "tools"))
__import__("program").start(__doc__, __name__)
import json
import os
from statistics import median
import platform
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "infer_vs_torch"))
import run as infer  # noqa: E402  (its folder writer and model shapes; importing runs nothing heavy)

ARGS = sys.argv[1:]
ISA = "native"
if "--isa" in ARGS:
    i = ARGS.index("--isa")
    if i + 1 >= len(ARGS) or ARGS[i + 1] not in ("native", "avx2"):
        sys.exit("quant_decode: error: --isa takes native or avx2")
    ISA = ARGS[i + 1]
    del ARGS[i:i + 2]
FORMATS = ["f32", "f16", "f16 native", "bf16", "bf16 native", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_K", "q5_K",
           "q6_K", "nf4"]
ONLY = None  # --formats f16,bf16 native,...: those rows only
if "--formats" in ARGS:
    i = ARGS.index("--formats")
    if i + 1 >= len(ARGS):
        sys.exit("quant_decode: error: --formats takes a comma-separated list of the rows' formats")
    ONLY = [f.strip() for f in ARGS[i + 1].split(",") if f.strip()]
    unknown = [f for f in ONLY if f not in FORMATS]
    if unknown or not ONLY:
        sys.exit(f"quant_decode: error: --formats: unknown {', '.join(unknown) or 'empty list'} (rows: {', '.join(FORMATS)})")
    del ARGS[i:i + 2]
binary = ARGS[0] if ARGS else os.path.join(HERE, "..", "..", "build", "bin", "bench_infer")
# Each figure is the median of this many runs per side, the sides alternating (env BENCH_REPEATS).
REPEATS = int(os.environ.get("BENCH_REPEATS", "5"))
# Foundry keeps the KV cache in f16, as llama-bench does by default (-ctk f16 -ctv f16): both sides
# read the same bytes per cached position. (Foundry's own default is the model's float32.)
KV_CACHE = ["--kv-cache", "f16"]

LLAMA_TIED = dict(infer.LLAMA, tie_word_embeddings=True)
# Bytes per weight of each format (block bytes / block values).
BYTES_PER_WEIGHT = {"f32": 4.0, "f16": 2.0, "f16 native": 2.0, "bf16": 2.0, "bf16 native": 2.0, "q8_0": 34 / 32,
                    "q4_0": 18 / 32, "q4_1": 20 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32, "q4_K": 144 / 256,
                    "q5_K": 176 / 256, "q6_K": 210 / 256, "nf4": 36 / 64}
# The GGUF type llama.cpp runs for each row (its f16 / bf16 types compute with 16-bit weights; the
# "f16 native" / "bf16 native" rows compare with its F16 / BF16 files too).
LLAMA_CPP_TYPE = {"f32": "f32", "f16": "f16", "f16 native": "f16", "bf16": "bf16", "bf16 native": "bf16",
                  "q8_0": "q8_0", "q4_0": "q4_0", "q4_1": "q4_1", "q5_0": "q5_0", "q5_1": "q5_1", "q4_K": "q4_K",
                  "q5_K": "q5_K", "q6_K": "q6_K"}


def matrix_weights(cfg):
    """Weights of the matrices one decode token reads: every projection, and the output matrix once
    (a tied model's embedding is its LM head; an untied model's embedding is read a row at a time)."""
    total = 0
    tied = cfg.get("tie_word_embeddings", True)
    for name, shape in infer.shapes(cfg).items():
        if len(shape) != 2 or "wpe" in name:
            continue
        if ("embed_tokens" in name or "wte" in name) and not tied:
            continue
        total += shape[0] * shape[1]
    return total


def foundry_token_bytes(cfg, fmt):
    """Bytes of those matrices Foundry reads a token in `fmt`: a bf16 matrix is read packed without loss
    (quant::WeightLayout::PackedBF16, on every CPU with AVX2): a row of k values is round_up(k / 64, 32)
    bytes of block exponents and k * 1.5 of the rest (the few blocks kept whole, ~0.5% of them here, left
    out). Every other format reads BYTES_PER_WEIGHT, as llama.cpp does."""
    if not fmt.startswith("bf16"):
        return matrix_weights(cfg) * BYTES_PER_WEIGHT[fmt]
    total = 0
    tied = cfg.get("tie_word_embeddings", True)
    for name, shape in infer.shapes(cfg).items():
        if len(shape) != 2 or "wpe" in name or (("embed_tokens" in name or "wte" in name) and not tied):
            continue
        conv1d = any(p in name for p in ("c_attn", "c_proj", "c_fc"))  # GPT-2's [in, out] weights
        k = shape[0] if conv1d else shape[1]
        rows = shape[1] if conv1d else shape[0]
        total += rows * ((k // 64 + 31) // 32 * 32 + k * 3 // 2)
    return total


def llama_cpp_dir():
    script = os.path.join(HERE, "..", "..", "..", "shared", "tools", "llama.cpp", "build.sh")
    if not os.path.exists(script):
        return None
    out = subprocess.run(["bash", script], capture_output=True, text=True)
    if out.returncode != 0:
        print("llama.cpp build failed:", out.stderr[-2000:], file=sys.stderr)
        return None
    native = out.stdout.strip().splitlines()[-1]
    return native if ISA == "native" else llama_cpp_avx2_dir(os.path.dirname(native))


# The AVX2-only build: the native build's source tree (build.sh extracted it), configured as a
# distribution build for AVX2 CPUs.
AVX2_FLAGS = ["-DGGML_NATIVE=OFF", "-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON",
              "-DGGML_BMI2=ON", "-DGGML_AVX512=OFF", "-DGGML_AVX_VNNI=OFF"]


def llama_cpp_avx2_dir(prefix):
    build = os.path.join(prefix, "build-avx2")
    bench = os.path.join(build, "bin", "llama-bench")
    if not os.path.exists(bench):
        gen = ["-G", "Ninja"] if shutil.which("ninja") else []
        steps = [["cmake", "-S", os.path.join(prefix, "src", "llama.cpp"), "-B", build, *gen, "-DCMAKE_BUILD_TYPE=Release",
                  *AVX2_FLAGS, "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                  # build.sh's switches: the archive has no app/ or UI sources to configure
                  "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
                  "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_NUMBER=1"],
                 ["cmake", "--build", build, "-j", str(os.cpu_count() or 2), "--target", "llama-bench"]]
        for step in steps:
            out = subprocess.run(step, capture_output=True, text=True)
            if out.returncode != 0:
                print("llama.cpp AVX2 build failed:", out.stderr[-2000:], file=sys.stderr)
                return None
    return os.path.dirname(bench)


def add_llama_tokenizer(folder):
    """llama.cpp loads no GGUF without a tokenizer: the Llama-2 32k SentencePiece model (vocab 32000,
    the bench shape's) from ../shared goes into the folder, and `foundry convert` writes its keys."""
    src = os.path.join(HERE, "..", "..", "..", "shared", "data", "tokenizers", "sentencepiece", "llama2.tokenizer.model")
    dst = os.path.join(folder, "tokenizer.model")
    if os.path.exists(src) and not os.path.exists(dst):
        with open(src, "rb") as f, open(dst, "wb") as g:
            g.write(f.read())
    return os.path.exists(dst)


def llama_bench(llama_dir, gguf, threads):
    """(pp128 tokens/s, tg128 tokens/s, peak RSS MB) from llama-bench. The RSS is /usr/bin/time's
    (GNU time, Debian's `time`): Linux starts a child's ru_maxrss at its parent's resident size when it
    execs, so a child of this script, once the script had held the 16-bit copies' 700 MB, read 706
    MB for every llama-bench run after it; GNU time's own small process is the parent instead."""
    with tempfile.NamedTemporaryFile("r") as rss_file:
        p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file.name, os.path.join(llama_dir, "llama-bench"),
                            "-m", gguf, "-t", str(threads), "-p", "128", "-n", "128", "-r", "1", "-o", "json"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"llama-bench failed on {gguf} (status {p.returncode})")
        peak_kb = int(rss_file.read().split()[-1])
    rows = json.loads(p.stdout)
    pp = next(r["avg_ts"] for r in rows if r["n_prompt"] > 0 and r["n_gen"] == 0)
    tg = next(r["avg_ts"] for r in rows if r["n_gen"] > 0 and r["n_prompt"] == 0)
    return pp, tg, peak_kb / 1024


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    if ISA == "avx2":
        os.environ.update(FOUNDRY_MAX_ISA="avx2", OPENBLAS_CORETYPE="Haswell")
        print("ISA: AVX2 only. Foundry under FOUNDRY_MAX_ISA=avx2 (cpu_capability: "
              f"{subprocess.run([binary, '--capability'], capture_output=True, text=True).stdout.strip()}); llama.cpp "
              f"built with {' '.join(AVX2_FLAGS)}")
    stream = {t: infer.run([binary, "--stream-mb", "1024", "--threads", str(t)], t)["read_gb_s"] for t in (1, 2)}
    print(f"CPU: {cpu_name()}; read bandwidth (sum of a 1 GiB array): {stream[1]:.1f} GB/s (1 thread), "
          f"{stream[2]:.1f} GB/s (2 threads)")
    llama_dir = llama_cpp_dir()
    if llama_dir and not os.path.exists("/usr/bin/time"):
        sys.exit("quant_decode: error: /usr/bin/time (GNU time) measures llama-bench's peak RSS; install it: "
                 "apt-get install time (scripts/install-deps.sh does)")
    foundry_cli = os.path.join(os.path.dirname(os.path.abspath(binary)), "foundry")
    print(f"llama.cpp: {llama_dir or 'not available (no ../shared/tools/llama.cpp, or its build failed: above): columns left out'}\n")
    # "f16 native" / "bf16 native": an f16 / bf16 checkpoint computed in that dtype (--dtype native);
    # the others quantize the float32 folder's weights at load (--quantize; f16 / bf16 dots take f16 /
    # bf16 activations).
    formats = [f for f in FORMATS if not ONLY or f in ONLY]
    print("| model | format | threads | prefill tok/s | decode tok/s | weight GB/s (of read bandwidth) | peak RSS MB "
          "| llama.cpp pp / tg (same run) | llama.cpp peak RSS MB | prefill vs llama.cpp | decode vs llama.cpp "
          f"| Foundry on the .gguf: decode (vs --quantize) | decode best of {REPEATS}: Foundry / llama.cpp "
          "| llama.cpp's best: weight GB/s (of read bandwidth) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    models = (("Llama-110M (tied)", LLAMA_TIED), ("GPT-2 124M", infer.GPT2))
    for name, cfg in models if ISA == "native" else models[:1]:
        folder = f"/tmp/foundry_bench_{cfg['model_type']}_tied" if cfg is LLAMA_TIED else \
            f"/tmp/foundry_bench_{cfg['model_type']}"
        infer.write_folder(folder, cfg)
        weights = matrix_weights(cfg)
        with_llama = llama_dir and cfg is LLAMA_TIED and add_llama_tokenizer(folder)
        ggufs = {}
        for fmt in formats:
            gtype = LLAMA_CPP_TYPE.get(fmt) if with_llama else None
            if gtype and gtype not in ggufs:
                ggufs[gtype] = f"{folder}-{gtype}.gguf"
                subprocess.run([foundry_cli, "convert", "--model", folder, "--to", ggufs[gtype], "--type", gtype],
                               check=True, capture_output=True)
            for threads in (1, 2):
                if fmt == "f32":
                    args = ["--model", folder]
                elif fmt.endswith(" native"):
                    dtype = {"f16": "float16", "bf16": "bfloat16"}[fmt.split()[0]]
                    infer.write_16bit_copy(folder, f"{folder}_{fmt.split()[0]}", dtype)
                    args = ["--model", f"{folder}_{fmt.split()[0]}", "--dtype", "native"]
                else:
                    args = ["--model", folder, "--quantize", fmt]
                # The same GGUF file run by Foundry (`foundry generate --model file.gguf`'s loader):
                # its decode should match the folder quantized at load.
                gguf_run = bool(gtype) and not fmt.endswith(" native")
                runs, refs, on_gguf_runs = [], [], []
                for _ in range(REPEATS):  # alternating, so a change in the shared host's state hits every side
                    runs.append(infer.run([binary, *args, *KV_CACHE, "--threads", str(threads)], threads))
                    if gtype:
                        refs.append(llama_bench(llama_dir, ggufs[gtype], threads))
                    if gguf_run:
                        on_gguf_runs.append(infer.run([binary, "--model", ggufs[gtype], *KV_CACHE, "--threads",
                                                       str(threads)], threads))
                r = {key: median(x[key] for x in runs) for key in runs[0]}
                ref = tuple(median(x[i] for x in refs) for i in range(3)) if refs else None
                gbs = r["decode_tps"] * foundry_token_bytes(cfg, fmt) / 1e9
                ref_text = f"{ref[0]:.0f} / {ref[1]:.1f}" if ref else "-"
                ref_rss = f"{ref[2]:.0f}" if ref else "-"
                pp = f"{r['prefill_tps'] / ref[0]:.2f}x" if ref else "-"
                tg = f"{r['decode_tps'] / ref[1]:.2f}x" if ref else "-"
                on_gguf = "-"
                if gguf_run:
                    g = median(x["decode_tps"] for x in on_gguf_runs)
                    on_gguf = f"{g:.1f} ({g / r['decode_tps']:.2f}x)"
                best = max(x["decode_tps"] for x in runs)
                best_ref = max(x[1] for x in refs) if refs else None
                best_text = f"{best:.1f} / {best_ref:.1f} ({best / best_ref:.2f}x)" if refs else f"{best:.1f}"
                ref_gbs = best_ref * weights * BYTES_PER_WEIGHT[fmt] / 1e9 if refs else None
                ref_gbs_text = f"{ref_gbs:.1f} ({ref_gbs / stream[threads]:.0%})" if refs else "-"
                print(f"| {name} | {fmt} | {threads} | {r['prefill_tps']:.0f} | {r['decode_tps']:.1f} | "
                      f"{gbs:.1f} ({gbs / stream[threads]:.0%}) | {r['peak_rss_mb']:.0f} | {ref_text} | {ref_rss} | "
                      f"{pp} | {tg} | {on_gguf} | {best_text} | {ref_gbs_text} |", flush=True)


if __name__ == "__main__":
    main()
