#!/usr/bin/python3
"""bench/eval_vs_torch: a 4-choice multiple-choice task (random-token items: a 96-token context and
four 4-12-token choices) scored by `foundry eval --requests` and by a PyTorch 1.13 transcription of
lm-evaluation-harness's HFLM loop (_loglikelihood_tokens: requests sorted longest first, each
(context + choice)[-(L+1):][:-1] run whole, float32 log_softmax, the choice's positions summed;
batch size 1, the harness's default) on the same Llama-110M-shape model (random weights, the
bench/infer_vs_torch folder) with the same threads. Prints items/s of both, the ratio, and the
largest log-likelihood difference between the two (a correctness check).
Usage: /usr/bin/python3 bench/eval_vs_torch/run.py [ITEMS] [THREADS] [build/bin/foundry]
"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "tools"))
__import__("program").start(__doc__, __name__)
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "infer_vs_torch"))
import run as infer_bench  # noqa: E402  (writes the model folder)

items = int(sys.argv[1]) if len(sys.argv) > 1 else 25
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
foundry = sys.argv[3] if len(sys.argv) > 3 else os.path.join(HERE, "..", "..", "build", "bin", "foundry")

TORCH_SIDE = r'''
import json, sys, time, torch, torch.nn.functional as F
sys.path.insert(0, sys.argv[1])
from torch_infer import Model, load_safetensors
folder, req_path, threads = sys.argv[2], sys.argv[3], int(sys.argv[4])
torch.set_num_threads(threads)
cfg = json.load(open(folder + "/config.json"))
model = Model(cfg, load_safetensors(folder + "/model.safetensors"))
L = cfg["max_position_embeddings"]
reqs = [json.loads(line) for line in open(req_path)]
order = sorted(range(len(reqs)), key=lambda i: -len(reqs[i]["context_ids"] + reqs[i]["continuation_ids"]))
out = [None] * len(reqs)
t = time.perf_counter()
with torch.no_grad():
    for i in order:
        ctx, cont = reqs[i]["context_ids"], reqs[i]["continuation_ids"]
        inp = (ctx + cont)[-(L + 1):][:-1]
        logits = F.log_softmax(model.forward(torch.tensor([inp]), [], last_only=False)[0].float(), dim=-1)
        sel = logits[len(inp) - len(cont):len(inp)]
        c = torch.tensor(cont)
        out[i] = [float(torch.gather(sel, 1, c.unsqueeze(-1)).sum()), bool((sel.argmax(-1) == c).all())]
print(json.dumps({"seconds": time.perf_counter() - t, "results": out}))
'''


def main():
    import numpy as np
    folder = "/tmp/foundry_bench_llama"
    if not os.path.exists(os.path.join(folder, "model.safetensors")):
        infer_bench.write_folder(folder, infer_bench.LLAMA)
    rng = np.random.default_rng(0)
    V = infer_bench.LLAMA["vocab_size"]
    tmp = tempfile.mkdtemp(prefix="foundry_eval_bench_")
    req = os.path.join(tmp, "requests.jsonl")
    with open(req, "w") as f:
        for _ in range(items):
            ctx = rng.integers(3, V, 96).tolist()
            for _ in range(4):
                f.write(json.dumps({"request_type": "loglikelihood", "context_ids": ctx,
                                    "continuation_ids": rng.integers(3, V, int(rng.integers(4, 13))).tolist()}) + "\n")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    p = subprocess.run([foundry, "eval", "--model", folder, "--requests", req, "--out", os.path.join(tmp, "res.jsonl"),
                        "--threads", str(threads)], capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit("foundry eval failed: " + p.stderr)
    ours_s = float(re.search(r"answered in ([0-9.]+) s", p.stderr).group(1))
    ours = [json.loads(line) for line in open(os.path.join(tmp, "res.jsonl"))]
    t = subprocess.run(["/usr/bin/python3", "-c", TORCH_SIDE, os.path.join(HERE, "..", "infer_vs_torch"), folder, req,
                        str(threads)], capture_output=True, text=True, env=env)
    if t.returncode != 0:
        sys.exit("PyTorch side failed: " + t.stderr)
    theirs = json.loads(t.stdout)
    diff = max(abs(a["loglikelihood"] - b[0]) for a, b in zip(ours, theirs["results"]))
    greedy_same = all(a["is_greedy"] == b[1] for a, b in zip(ours, theirs["results"]))
    print("| side | threads | items | seconds | items/s |")
    print("|---|---|---|---|---|")
    print(f"| PyTorch 1.13 (HFLM loop, batch 1) | {threads} | {items} | {theirs['seconds']:.2f} | "
          f"{items / theirs['seconds']:.2f} |")
    print(f"| foundry eval --requests | {threads} | {items} | {ours_s:.2f} | {items / ours_s:.2f} |")
    print(f"\nFoundry / PyTorch: {theirs['seconds'] / ours_s:.2f}x items/s; largest log-likelihood difference "
          f"{diff:.2e}; is_greedy identical: {greedy_same}")
    print(p.stderr.strip().splitlines()[-1])
    sys.stdout.flush()
    os.system(f"/usr/bin/python3 {os.path.join(HERE, '..', 'torch_blas.py')} 2>/dev/null")


if __name__ == "__main__":
    main()
