#!/usr/bin/python3
"""bench/serve_load: `foundry serve` under 1, 4 and 16 concurrent greedy streaming clients on the
Llama-110M-shape model (random weights, the bench/infer_vs_torch folder; the Llama-2 tokenizer from
../shared when present, else a byte-level one), 2 threads. Prints aggregate generated tokens/s, mean
time to first token, the 16-client / 1-client throughput ratio (goal >= 4x), the server's peak RSS,
and `foundry generate`'s decode tokens/s on the same prompt beside the single client's (goal: within
10%).
Usage: /usr/bin/python3 bench/serve_load/run.py [MAX_TOKENS] [THREADS] [build/bin/foundry]
"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "tools"))
__import__("program").start(__doc__, __name__)
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "infer_vs_torch"))
import run as infer_bench  # noqa: E402  (writes the model folder)

max_tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 128
threads = int(sys.argv[2]) if len(sys.argv) > 2 else 2
foundry = sys.argv[3] if len(sys.argv) > 3 else os.path.join(HERE, "..", "..", "build", "bin", "foundry")
PROMPT_TOKENS = 64


def add_tokenizer(folder):
    spm = os.path.join(HERE, "..", "..", "..", "shared", "data", "tokenizers", "sentencepiece", "llama2.tokenizer.model")
    if os.path.exists(spm):
        if not os.path.exists(os.path.join(folder, "tokenizer.model")):
            import shutil
            shutil.copy(spm, os.path.join(folder, "tokenizer.model"))
        return "Llama-2 SentencePiece"
    if not os.path.exists(os.path.join(folder, "tokenizer.json")):
        vocab = {f"<0x{b:02X}>": b + 3 for b in range(256)}
        vocab.update({"<unk>": 0, "<s>": 1, "</s>": 2})
        tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
               "pre_tokenizer": None, "post_processor": None, "decoder": {"type": "ByteFallback"},
               "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": True, "vocab": vocab,
                         "merges": []}}
        json.dump(tok, open(os.path.join(folder, "tokenizer.json"), "w"))
    return "byte-level"


def stream(url, prompt):
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first, tokens = None, 0
    with urllib.request.urlopen(req, timeout=3600) as r:
        for line in r:
            line = line.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            elif first is None:
                first = time.perf_counter() - t0
    return first, tokens, time.perf_counter() - t0


def main():
    folder = "/tmp/foundry_bench_llama"
    infer_bench.write_folder(folder, infer_bench.LLAMA)
    tokenizer = add_tokenizer(folder)
    V = infer_bench.LLAMA["vocab_size"]
    prompts = [[1] + [(i * 7919 + j * 104729) % (V - 3) + 3 for j in range(PROMPT_TOKENS - 1)] for i in range(16)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    server = subprocess.Popen([foundry, "serve", "--model", folder, "--port", "0", "--parallel", "16", "--threads",
                               str(threads), "--ctx-size", "512"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
    line = server.stdout.readline()
    if not line.startswith("listening on"):
        sys.exit("foundry serve failed: " + server.stderr.read())
    url = line.split()[-1]
    try:
        stream(url, prompts[0][:8])  # warm-up: quantization-free, but first-touch of the weights
        rows = []
        for clients in (1, 4, 16):
            t0 = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(clients) as ex:
                results = list(ex.map(lambda p: stream(url, p), prompts[:clients]))
            wall = time.perf_counter() - t0
            tokens = sum(r[1] for r in results)
            ttft = sum(r[0] for r in results) / clients
            rows.append((clients, tokens, wall, tokens / wall, ttft))
        status = open(f"/proc/{server.pid}/status").read()
        rss = int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024
    finally:
        server.terminate()
        server.wait(30)
    g = subprocess.run([foundry, "generate", "--model", folder, "--input-ids", ",".join(map(str, prompts[0])),
                        "--max-new-tokens", str(max_tokens), "--temperature", "0"], capture_output=True, text=True, env=env)
    m = re.search(r"decode: \d+ steps in [0-9.]+ s \(([0-9.]+) tokens/s\)", g.stderr + g.stdout)
    gen_tps = float(m.group(1)) if m else float("nan")
    print(f"Llama-110M shape, {PROMPT_TOKENS}-token prompts, {max_tokens} greedy tokens each, {threads} threads, "
          f"{tokenizer} tokenizer")
    print("| clients | tokens | seconds | aggregate tokens/s | mean time to first token (s) |")
    print("|---|---|---|---|---|")
    for c, n, w, tps, ttft in rows:
        print(f"| {c} | {n} | {w:.2f} | {tps:.1f} | {ttft:.3f} |")
    print(f"\n16 clients / 1 client: {rows[2][3] / rows[0][3]:.2f}x throughput (goal >= 4x)")
    one_client_decode = rows[0][1] / (rows[0][2] - rows[0][4])
    print(f"single client decode {one_client_decode:.1f} tokens/s vs foundry generate {gen_tps:.1f} tokens/s: "
          f"{one_client_decode / gen_tps:.2f}x (goal within 10%)")
    print(f"server peak RSS {rss:.0f} MiB")


if __name__ == "__main__":
    main()
