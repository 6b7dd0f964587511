#!/usr/bin/python3
"""bench/finetune_vs_torch: LoRA training steps on a Llama-110M-shape model with random weights
(dim 768, 12 layers, SwiGLU 2048, vocab 32000; the folder bench/infer_vs_torch writes), B=4 x T=128,
r=8 on q_proj,v_proj and on all-linear, 2 threads: ms/step and peak RSS of Foundry (float32,
bfloat16 autocast, QLoRA with an NF4 base, with and without gradient checkpointing) against PyTorch 1.13 eager LoRA in float32 (frozen base,
requires_grad=False; its bf16 autocast for reference). Each configuration runs in its own process.
Usage: /usr/bin/python3 bench/finetune_vs_torch/run.py [build/bin/bench_finetune] [threads]
"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "tools"))
__import__("program").start(__doc__, __name__)
import importlib.util
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("infer_bench", os.path.join(HERE, "..", "infer_vs_torch", "run.py"))
_infer = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_infer)
LLAMA, write_folder = _infer.LLAMA, _infer.write_folder

binary = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "build", "bin", "bench_finetune")
THREADS = int(sys.argv[2]) if len(sys.argv) > 2 else 2
FOLDER = "/tmp/foundry_bench_llama"


def run(cmd):
    env = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    write_folder(FOLDER, LLAMA)
    print("Llama-110M shape, B=4 x T=128, LoRA r=8 (alpha 16), AdamW on the adapter, %d threads" % THREADS)
    print()
    print("| targets | configuration | ms/step | tokens/s | peak RSS MB | speed vs PyTorch, same precision | "
          "speed vs PyTorch f32 | RSS vs PyTorch f32 |")
    print("|---|---|---|---|---|---|---|---|")
    for targets in ("q_proj,v_proj", "all-linear"):
        torch32 = run(["/usr/bin/python3", os.path.join(HERE, "torch_lora.py"), FOLDER, str(THREADS), targets, "float32"])
        torch16 = run(["/usr/bin/python3", os.path.join(HERE, "torch_lora.py"), FOLDER, str(THREADS), targets,
                       "bfloat16"])
        rows = [("PyTorch 1.13 float32", torch32), ("PyTorch 1.13 bf16 autocast", torch16)]
        base = [binary, "--model", FOLDER, "--threads", str(THREADS), "--targets", targets]
        rows.append(("Foundry float32", run(base)))
        rows.append(("Foundry bf16 autocast", run(base + ["--precision", "bfloat16"])))
        rows.append(("Foundry QLoRA nf4 base, float32", run(base + ["--quantize", "nf4"])))
        # QLoRA as it is run (peft's prepare_model_for_kbit_training turns checkpointing on).
        rows.append(("Foundry QLoRA nf4 base + gradient checkpointing",
                     run(base + ["--quantize", "nf4", "--checkpointing"])))
        for label, r in rows:
            same = torch16 if "bf16" in label else torch32
            print("| %s | %s | %.0f | %.0f | %.0f | %.2fx | %.2fx | %.2fx |" % (
                targets, label, r["ms"], r["tokens_per_s"], r["peak_rss_mb"], same["ms"] / r["ms"],
                torch32["ms"] / r["ms"], r["peak_rss_mb"] / torch32["peak_rss_mb"]))
        sys.stdout.flush()
    sys.path.insert(0, os.path.join(HERE, ".."))
    import torch_blas
    print()
    print(torch_blas.describe())


if __name__ == "__main__":
    main()
