"""PyTorch 1.13 side of the BERT rows of bench/infer_vs_torch: BertModel (transformers v4.40
semantics, the transcription the parity tests use: tests/python/test_encoders.py) over a batch of
`batch` random sequences of `seq` tokens under torch.no_grad. Prints one JSON line: sequences/s
(median of 5 after a warm-up), peak RSS.
Usage: torch_encoder.py DIR THREADS [batch seq]"""
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
import encoder_ref  # noqa: E402
from torch_infer import load_safetensors  # noqa: E402


def main():
    folder, threads = sys.argv[1], int(sys.argv[2])
    batch, seq = (int(x) for x in (sys.argv[3:5] if len(sys.argv) > 4 else (8, 128)))
    torch.set_num_threads(threads)
    cfg = json.load(open(folder + "/config.json"))
    w = load_safetensors(folder + "/model.safetensors")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg["vocab_size"], (batch, seq), generator=g)
    mask, types = torch.ones(batch, seq, dtype=torch.long), torch.zeros(batch, seq, dtype=torch.long)
    with torch.no_grad():
        times = []
        for rep in range(6):
            t = time.perf_counter()
            encoder_ref.reference(cfg, w, "BertModel", ids, mask, types)
            if rep:
                times.append(time.perf_counter() - t)
    rss = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM")) / 1024
    print(json.dumps({"seq_per_s": round(batch / sorted(times)[2], 2), "peak_rss_mb": round(rss, 1)}))


if __name__ == "__main__":
    main()
