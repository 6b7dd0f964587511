#!/usr/bin/python3
"""Mock of Foundry's experiment-tracking HTTP server, for developing/testing the dashboard front-end
without the C++ server.  Stdlib only.

    /usr/bin/python3 tests/track/mock_dashboard_server.py --port 8765
    chromium --headless --no-sandbox --disable-gpu --screenshot=/tmp/x.png --window-size=1280,900 \
        --virtual-time-budget=5000 'http://127.0.0.1:8765/?runs=e5f6a7b8&key=loss'

Serves src/track/dashboard/{index.html,app.js,style.css}, /static/chart.min.js (Debian libjs-chart.js)
and the JSON API described in the dashboard brief, with four fake runs:
  a1b2c3d4 baseline        finished  (histograms, texts, images, artifacts)
  e5f6a7b8 wide-lr3e-4     running   (points grow ~2/s; a "NaN" loss at step 40, "Infinity" grad_norm at step 100)
  deadbeef lr-sweep-1e-2   failed    (loss diverges to NaN/Infinity)
  c0ffee01 gpt-tiny        crashed   (different project, nested config)
"""
import argparse
import json
import math
import os
import random
import re
import struct
import sys
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

HERE = os.path.dirname(os.path.abspath(__file__))
DASHBOARD_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "src", "track", "dashboard"))
CHART_JS = "/usr/share/javascript/chart.js/chart.min.js"
T0 = time.time()
DBL_MAX = sys.float_info.max


def jnum(v):
    """JSON has no NaN/inf: the server sends them as strings."""
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, float) and math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


# ---------------------------------------------------------------------------------------------
# Fake runs
# ---------------------------------------------------------------------------------------------
def make_runs():
    base_cfg = {
        "model": {"arch": "mlp", "hidden": [512, 256], "dropout": 0.1, "act": "gelu"},
        "optim": {"name": "adamw", "lr": 1e-3, "betas": [0.9, 0.999], "weight_decay": 0.01,
                  "schedule": {"kind": "cosine", "warmup": 100}},
        "data": {"dataset": "mnist", "batch_size": 128, "augment": False},
        "seed": 0, "epochs": 10, "precision": "fp32",
    }
    wide = json.loads(json.dumps(base_cfg))
    wide["model"]["hidden"] = [2048, 1024]
    wide["optim"]["lr"] = 3e-4
    wide["seed"] = 1
    wide["notes"] = "<b>not bold</b> & <script>alert('xss')</script>"
    sweep = json.loads(json.dumps(base_cfg))
    sweep["optim"]["lr"] = 1e-2
    sweep["optim"]["schedule"] = {"kind": "constant"}
    gpt = {"model": {"arch": "gpt", "n_layer": 4, "n_head": 4, "d_model": 256, "vocab": 65},
           "optim": {"name": "adamw", "lr": 6e-4}, "data": {"dataset": "tinyshakespeare", "block": 128},
           "seed": 1337, "precision": "bf16"}
    mk = lambda **kw: dict({"host": "gpu-node-01", "pid": 4242, "finished_at": None, "exit_code": None,
                            "tags": [], "summary": {}}, **kw)
    return [
        mk(id="e5f6a7b8", project="mnist-mlp", name="wide-lr3e-4", status="running", created_at=T0 - 60,
           pid=5151, tags=["wide", "sweep"], config=wide, n0=40, rate=2.0, dt=0.5, lr0=3e-4, floor=0.05,
           nan_steps={40: "NaN"}, inf_steps={100: "Infinity"}),
        mk(id="a1b2c3d4", project="mnist-mlp", name="baseline", status="finished", created_at=T0 - 3 * 3600,
           finished_at=T0 - 3 * 3600 + 1500, exit_code=0, tags=["baseline"], config=base_cfg, n0=300, dt=5.0,
           lr0=1e-3, floor=0.08),
        mk(id="deadbeef", project="mnist-mlp", name="lr-sweep-1e-2", status="failed", created_at=T0 - 5 * 3600,
           finished_at=T0 - 5 * 3600 + 400, exit_code=1, tags=["sweep"], config=sweep, n0=80, dt=5.0,
           lr0=1e-2, floor=0.3, diverge=60),
        mk(id="c0ffee01", project="char-lm", name="gpt-tiny", status="crashed", created_at=T0 - 26 * 3600,
           host="gpu-node-07", pid=777, tags=["gpt", "bf16"], config=gpt, n0=150, dt=8.0, lr0=6e-4, floor=1.4,
           keys=["loss", "ppl", "lr", "train/tokens_per_s"]),
    ]


RUNS = make_runs()
RUN_BY_ID = {r["id"]: r for r in RUNS}
DEFAULT_KEYS = ["loss", "lr", "accuracy", "grad_norm", "val/loss", "val/accuracy"]
STEP = 10


def n_points(run):
    if run["status"] == "running":
        return min(2000, run["n0"] + int((time.time() - T0) * run["rate"]))
    return run["n0"]


def scalar_value(run, key, i):
    step = i * STEP
    rng = random.Random(zlib.crc32(f"{run['id']}/{key}/{i}".encode()))
    noise = rng.gauss(0, 1)
    progress = step / 1000.0
    loss = run["floor"] + 2.3 * math.exp(-progress * 2.5) + 0.06 * noise * math.exp(-progress)
    if key == "loss" and step in run.get("nan_steps", {}):
        return run["nan_steps"][step]
    if key == "grad_norm" and step in run.get("inf_steps", {}):
        return run["inf_steps"][step]
    if "diverge" in run and i >= run["diverge"]:
        if key in ("loss", "val/loss", "grad_norm"):
            return float("nan") if i % 7 else float("inf")
    if key == "loss":
        return loss
    if key == "val/loss":
        return loss * 1.08 + 0.02 * noise
    if key == "lr":
        warm = min(1.0, step / 100.0)
        return run["lr0"] * warm * 0.5 * (1 + math.cos(math.pi * min(1.0, step / 3000.0)))
    if key in ("accuracy", "val/accuracy"):
        return max(0.0, min(1.0, 1 - loss / 2.5 + 0.01 * noise - (0.01 if key.startswith("val") else 0)))
    if key == "grad_norm":
        return abs(1.5 * math.exp(-progress) + 0.3 * noise) + 0.05
    if key == "ppl":
        return math.exp(loss)
    if key == "train/tokens_per_s":
        return 52000 + 1500 * noise
    return noise


def scalar_keys(run):
    return run.get("keys", DEFAULT_KEYS)


def scalar_points(run, key):
    n = n_points(run)
    every = 5 if key.startswith("val/") else 1
    return [[i * STEP, run["created_at"] + i * STEP * run["dt"] / STEP, jnum(scalar_value(run, key, i))]
            for i in range(0, n, every)]


def summary(run):
    n = n_points(run)
    s = {"_step": (n - 1) * STEP, "_runtime": round((n - 1) * run["dt"], 1)}
    for k in scalar_keys(run):
        s[k] = jnum(scalar_value(run, k, n - 1))
    return s


def hist_points(run, key):
    """TensorBoard-like histograms: a Gaussian whose spread grows with training; outer limits +-DBL_MAX."""
    out = []
    n = n_points(run)
    for i in range(0, n, max(1, n // 25)):
        step = i * STEP
        mu = 0.02 * step / 1000 if key.endswith("bias") else 0.0
        sigma = 0.05 + 0.12 * (1 - math.exp(-step / 800.0))
        if key.endswith("bias"):
            sigma *= 0.5
        count = 4096 if key.endswith("weight") else 256
        lo, hi = mu - 3.5 * sigma, mu + 3.5 * sigma
        nb = 30
        edges = [lo + (hi - lo) * j / nb for j in range(nb + 1)]
        cdf = lambda x: 0.5 * (1 + math.erf((x - mu) / (sigma * math.sqrt(2))))
        counts = [0.0] + [count * (cdf(edges[j + 1]) - cdf(edges[j])) for j in range(nb)] + [0.0]
        limits = edges + [DBL_MAX]  # bucket 0 = (-inf, lo], last = (hi, DBL_MAX]
        total = sum(counts)
        out.append({"step": step, "wall_time": run["created_at"] + i * run["dt"], "min": lo, "max": hi,
                    "num": total, "sum": mu * total, "sum_squares": total * (sigma ** 2 + mu ** 2),
                    "bucket_limits": limits, "bucket_counts": counts})
    return out


def text_points(run, key):
    samples = ["The quick brown fox jumps over the lazy dog.",
               "<script>alert('xss')</script> should appear literally, not run.",
               "ROMEO:\n  But, soft! what light through yonder window breaks?\n  It is the east, and Juliet is the sun.",
               "loss looks <b>fine</b> & stable; tabs\tand   spaces kept."]
    n = n_points(run)
    return [{"step": i * STEP, "wall_time": run["created_at"] + i * run["dt"], "text": f"[{key} @ step {i * STEP}] " + samples[(i // 50) % len(samples)]}
            for i in range(0, n, 50)]


def image_points(run, key):
    n = n_points(run)
    return [{"step": i * STEP, "wall_time": run["created_at"] + i * run["dt"],
             "url": f"/api/runs/{run['id']}/image/{key}/{i * STEP}.png"} for i in range(0, n, 50)]


def png_bytes(step, size=32):
    """A small heatmap PNG (attention-like pattern sharpening with step)."""
    sharp = 1 + step / 400.0
    rows = []
    for y in range(size):
        row = bytearray([0])
        for x in range(size):
            v = math.exp(-sharp * abs(x - y) / 4.0)
            row += bytes([int(255 * v), int(90 + 120 * v), int(255 * (1 - v))])
        rows.append(bytes(row))
    raw = b"".join(rows)
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def media_keys(run):
    if run["id"] in ("a1b2c3d4", "e5f6a7b8"):
        return {"histogram_keys": ["fc1.weight", "fc1.bias", "fc2.weight"], "text_keys": ["sample"],
                "image_keys": ["attn"]}
    return {"histogram_keys": [], "text_keys": [], "image_keys": []}


def public_run(run):
    n = n_points(run)
    updated = run["created_at"] + (n - 1) * run["dt"]
    if run["status"] == "running":
        updated = time.time()
    keys = ("id", "project", "name", "status", "created_at", "finished_at", "exit_code", "host", "pid", "tags", "config")
    out = {k: run[k] for k in keys}
    out.update(updated_at=updated, summary=summary(run), scalar_keys=scalar_keys(run))
    return out


def run_detail(run):
    out = public_run(run)
    out.update(media_keys(run))
    out["artifacts"] = [] if run["status"] == "running" else [
        {"name": "model-final.safetensors", "type": "model", "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "size": 53_411_840},
        {"name": "config.json", "type": "config", "sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "size": 1_024},
    ]
    return out


# ---------------------------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------------------------
STATIC = {"/": ("index.html", "text/html; charset=utf-8"),
          "/index.html": ("index.html", "text/html; charset=utf-8"),
          "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
          "/static/style.css": ("style.css", "text/css; charset=utf-8")}


class Handler(BaseHTTPRequestHandler):
    server_version = "FoundryMock/0.1"

    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("%s\n" % (fmt % args))

    def send(self, code, body, ctype):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, obj, code=200):
        self.send(code, json.dumps(obj, allow_nan=False).encode(), "application/json")

    def error(self, code, msg):
        self.send_json({"error": msg}, code)

    def do_GET(self):
        url = urlparse(self.path)
        path, q = url.path, parse_qs(url.query)
        delay = self.server.delay
        if delay:
            time.sleep(delay)
        if path in STATIC:
            name, ctype = STATIC[path]
            with open(os.path.join(DASHBOARD_DIR, name), "rb") as f:
                return self.send(200, f.read(), ctype)
        if path == "/static/chart.min.js":
            with open(CHART_JS, "rb") as f:
                return self.send(200, f.read(), "text/javascript; charset=utf-8")
        if path == "/api/runs":
            if time.time() - T0 < self.server.fail_runs_for:
                return self.error(503, "database is locked (simulated)")
            return self.send_json({"runs": [public_run(r) for r in sorted(RUNS, key=lambda r: -r["created_at"])]})
        m = re.fullmatch(r"/api/runs/([^/]+)/image/([^/]+)/(\d+)\.png", path)
        if m:
            return self.send(200, png_bytes(int(m.group(3))), "image/png")
        m = re.fullmatch(r"/api/runs/([^/]+)(?:/(scalars|histograms|texts|images))?", path)
        if not m:
            return self.error(404, f"no such endpoint: {path}")
        run = RUN_BY_ID.get(m.group(1))
        if run is None:
            return self.error(404, f"unknown run id '{m.group(1)}'")
        kind = m.group(2)
        if kind is None:
            return self.send_json(run_detail(run))
        key = (q.get("key") or [None])[0]
        if not key:
            return self.error(400, "missing query parameter 'key'")
        if key in self.server.fail_keys:
            return self.error(500, f"simulated failure reading '{key}'")
        keys = scalar_keys(run) if kind == "scalars" else media_keys(run)[
            {"histograms": "histogram_keys", "texts": "text_keys", "images": "image_keys"}[kind]]
        if key not in keys:
            return self.error(404, f"run {run['id']} has no {kind[:-1]} '{key}'")
        fn = {"scalars": scalar_points, "histograms": hist_points, "texts": text_points, "images": image_points}[kind]
        return self.send_json({"run": run["id"], "key": key, "points": fn(run, key)})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds to sleep before every response")
    ap.add_argument("--fail-key", action="append", default=[], help="answer HTTP 500 for this key")
    ap.add_argument("--fail-runs-for", type=float, default=0.0, metavar="SECONDS",
                    help="answer /api/runs with HTTP 503 during the first SECONDS after start")
    ap.add_argument("--all-finished", action="store_true", help="mark the running run finished")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    if args.all_finished:
        for r in RUNS:
            if r["status"] == "running":
                r.update(status="finished", finished_at=time.time(), exit_code=0)
    srv = ThreadingHTTPServer((args.host, args.port), Handler)
    srv.delay, srv.fail_keys, srv.verbose = args.delay, set(args.fail_key), args.verbose
    srv.fail_runs_for = args.fail_runs_for
    print(f"mock dashboard server on http://{args.host}:{args.port}/ (serving {DASHBOARD_DIR})", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
