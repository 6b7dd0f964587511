"""PyTorch 1.13 side of bench/infer_vs_torch for RWKV and Mamba: the HF folder run by the
transcriptions of transformers v4.40's slow (CPU) paths that the parity tests use
(tests/python/recurrent_ref.py: rwkv_linear_attention_cpu's loop, MambaMixer.slow_forward), under
torch.no_grad, the LM head on the last position only (as bench_infer): prefill of `prefill` tokens without a state, then a `prompt`-token prompt and greedy
decoding that carries the state, one token per step. Prints one JSON line as torch_infer.py.
Usage: torch_recurrent.py DIR THREADS [prefill prompt decode]"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "tools"))
__import__("program").start(__doc__, __name__)
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "python"))
import recurrent_ref  # noqa: E402
from torch_infer import load_safetensors  # noqa: E402


def main():
    folder, threads = sys.argv[1], int(sys.argv[2])
    prefill, prompt, decode = (int(x) for x in (sys.argv[3:6] if len(sys.argv) > 5 else (128, 32, 128)))
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    cfg = json.load(open(folder + "/config.json"))
    w = load_safetensors(folder + "/model.safetensors")
    load_s = time.perf_counter() - t0
    forward = {"rwkv": recurrent_ref.rwkv_forward, "mamba": recurrent_ref.mamba_forward}[cfg["model_type"]]
    ids = torch.randint(0, cfg["vocab_size"], (1, prefill), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        times = []
        for rep in range(4):  # one untimed warm-up, then the median of 3
            t = time.perf_counter()
            forward(cfg, w, ids, last_only=True)[0, -1]
            if rep:
                times.append(time.perf_counter() - t)
        prefill_tps = prefill / sorted(times)[1]
        state = {}
        nxt = forward(cfg, w, ids[:, :prompt], None, state, last_only=True)[0, -1].argmax().view(1, 1)
        t = time.perf_counter()
        for _ in range(decode - 1):
            nxt = forward(cfg, w, nxt, None, state, last_only=True)[0, -1].argmax().view(1, 1)
        decode_tps = (decode - 1) / (time.perf_counter() - t)
    rss = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM")) / 1024
    print(json.dumps({"load_s": round(load_s, 4), "prefill_tps": round(prefill_tps, 1),
                      "decode_tps": round(decode_tps, 2), "peak_rss_mb": round(rss, 1)}))


if __name__ == "__main__":
    main()
