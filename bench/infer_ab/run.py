"""bench/infer_ab: two builds of bench_infer (before / after a change) on the same machine,
interleaved: every case runs N times per side, alternating which side goes first; prints best-of-N
and median ratios (see README.md here).
Usage: /usr/bin/python3 bench/infer_ab/run.py BEFORE/bench_infer AFTER/bench_infer [N]
"""
import os as _os, sys as _sys  # noqa: E401,E402  (program.start: --help and one-line errors)
_sys.path.insert(0, _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "..", "..", "tools"))
__import__("program").start(__doc__, __name__)
import json, subprocess, os, statistics, sys
sides = {"base": sys.argv[1], "main": sys.argv[2]}
cases = []
for model in ["llama", "gpt2", "llama_tied"]:
    for threads in (1, 2):
        for q in ([None, "q8_0"] if model != "llama_tied" else ["q4_0", "nf4", "f16"]):
            cases.append((model, threads, q))
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
res = {}
for r in range(reps):
    for case in cases:
        for side in (("base", "main") if r % 2 == 0 else ("main", "base")):
            model, threads, q = case
            cmd = [sides[side], "--model", f"/tmp/foundry_bench_{model}", "--threads", str(threads)]
            if q: cmd += ["--quantize", q]
            env = dict(os.environ, OMP_NUM_THREADS=str(threads))
            out = subprocess.run(cmd, capture_output=True, text=True, env=env).stdout.strip().splitlines()[-1]
            d = json.loads(out)
            res.setdefault((case, side), []).append(d)
    print("rep", r, "done", flush=True)
print("| model | format | threads | prefill base / main (best of N) | ratio | decode base / main | ratio | median prefill ratio | median decode ratio |")
print("|---|---|---|---|---|---|---|---|---|")
for case in cases:
    b, m = res[(case, "base")], res[(case, "main")]
    bp, mp = max(x["prefill_tps"] for x in b), max(x["prefill_tps"] for x in m)
    bd, md = max(x["decode_tps"] for x in b), max(x["decode_tps"] for x in m)
    medp = statistics.median(x["prefill_tps"] for x in m) / statistics.median(x["prefill_tps"] for x in b)
    medd = statistics.median(x["decode_tps"] for x in m) / statistics.median(x["decode_tps"] for x in b)
    print(f"| {case[0]} | {case[2] or 'f32'} | {case[1]} | {bp:.0f} / {mp:.0f} | {mp/bp:.3f} | {bd:.1f} / {md:.1f} | {md/bd:.3f} | {medp:.3f} | {medd:.3f} |", flush=True)
