"""`foundry dashboard` and `foundry runs sync` (docs/tracking.md): the JSON API under /api/, bad
input answered with 4xx JSON errors while the server keeps running, tokens, loopback-only binding,
pushing runs to another dashboard (a re-sync sends only what is new), and the page itself rendered
by headless Chromium: a screenshot of a run's chart page must show the loss curve.
"""
import fcntl
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zlib

import numpy as np
import pytest

import foundry

from test_track import FOUNDRY, cli, needs_cli

pytestmark = needs_cli
TOKEN = "s3cret-token"


class Dashboard:
    def __init__(self, d, *extra):
        self.proc = subprocess.Popen([FOUNDRY, "dashboard", "--dir", str(d), "--port", "0", *map(str, extra)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:"), line + self.proc.stderr.read()
        self.url = line.split()[-1]

    def request(self, path, body=None, token=None, method=None, raw=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if token:
            req.add_header("Authorization", "Bearer " + token)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read(), r.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            return e.code, e.read(), e.headers.get("Content-Type", "")

    def json(self, path, **kw):
        status, body, _ = self.request(path, **kw)
        return status, json.loads(body)

    def close(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


@pytest.fixture
def tracked(tmp_path):
    d = tmp_path / "runs"
    run = foundry.track.init(project="demo", name="curve", config={"lr": 1e-3}, dir=d, system_interval=0)
    for i in range(100):
        run.log({"loss": 4.0 * math.exp(-i / 25.0) + 0.5, "acc": i / 100}, step=i)
    run.log({"loss": float("nan")}, step=100)
    run.log_histogram("w", np.random.default_rng(1).standard_normal(500), step=10)
    run.log_text("sample", "<b>not html</b>", step=10)
    run.log_image("img", np.zeros((4, 4, 3), np.uint8), step=10)
    run.finish()
    return d, run.id


def test_api_serves_runs_series_and_pages(tracked):
    d, run_id = tracked
    dash = Dashboard(d)
    try:
        status, body = dash.json("/api/runs")
        assert status == 200 and [r["id"] for r in body["runs"]] == [run_id]
        assert body["runs"][0]["scalar_keys"] == ["acc", "loss"] and body["runs"][0]["status"] == "finished"
        status, r = dash.json("/api/runs/" + run_id)
        assert r["histogram_keys"] == ["w"] and r["text_keys"] == ["sample"] and r["image_keys"] == ["img"]
        status, s = dash.json("/api/runs/%s/scalars?key=loss" % run_id)
        assert status == 200 and len(s["points"]) == 101 and s["points"][-1][2] == "NaN"
        assert s["points"][0][0] == 0 and s["points"][0][2] == pytest.approx(4.5)
        status, h = dash.json("/api/runs/%s/histograms?key=w" % run_id)
        assert sum(h["points"][0]["bucket_counts"]) == 500
        status, t = dash.json("/api/runs/%s/texts?key=sample" % run_id)
        assert t["points"][0]["text"] == "<b>not html</b>"
        status, im = dash.json("/api/runs/%s/images?key=img" % run_id)
        status, png, ctype = dash.request(im["points"][0]["url"])
        assert status == 200 and ctype == "image/png" and png[:8] == b"\x89PNG\r\n\x1a\n"
        status, page, ctype = dash.request("/")
        assert status == 200 and ctype.startswith("text/html") and b"chart.min.js" in page
        status, js, ctype = dash.request("/static/chart.min.js")
        assert status == 200 and b"Chart.js v3" in js[:200] and "javascript" in ctype
    finally:
        dash.close()


def test_bad_requests_get_json_errors_and_the_server_keeps_running(tracked):
    d, run_id = tracked
    dash = Dashboard(d, "--token", TOKEN, "--max-body-mb", "0.01")
    try:
        assert dash.json("/api/runs")[0] == 401  # token required on every request
        status, err = dash.json("/api/runs/nope", token=TOKEN)
        assert status == 404 and "unknown run ID 'nope'" in err["error"]
        status, err = dash.json("/api/runs/%s/scalars" % run_id, token=TOKEN)
        assert status == 400 and "key" in err["error"]
        status, err = dash.json("/api/nothing", token=TOKEN)
        assert status == 404 and "error" in err
        cases = [
            (b"{not json", 400, "malformed JSON"),
            (b"[1, 2]", 400, "JSON object"),
            (json.dumps({"origin": "x"}).encode(), 400, "'run'"),
            (json.dumps({"origin": "x", "run": {"id": "abc"}}).encode(), 400, "missing field"),
            (json.dumps({"origin": "x", "run": {"id": "a", "project": "p", "name": "n", "status": "weird",
                                                  "created_at": 1, "updated_at": 1, "config": {}, "tags": [],
                                                  "summary": {}}}).encode(), 400, "status"),
            (json.dumps({"origin": "x", "run": {"id": "a", "project": "p", "name": "n", "status": "running",
                                                  "created_at": 1, "updated_at": 1, "config": {}, "tags": [],
                                                  "summary": {}}, "scalars": [["x"]]}).encode(), 400, "scalars row"),
            (b"x" * 20000, 413, "too large"),
        ]
        # Run ids name folders in exports: one that climbs out of them is refused.
        for bad_id in ["../../../tmp/x", "..", ".hidden", "a/b", "a\\b", "x" * 65, ""]:
            run = {"id": bad_id, "project": "p", "name": "n", "status": "running", "created_at": 1,
                   "updated_at": 1, "config": {}, "tags": [], "summary": {}}
            cases.append((json.dumps({"origin": "x", "run": run}).encode(), 400, "bad id"))
        for raw, code, words in cases:
            status, body, ctype = dash.request("/api/ingest", raw=raw, token=TOKEN, method="POST")
            assert status == code, (raw[:80], status, body[:200])
            assert ctype.startswith("application/json") and words in json.loads(body)["error"], body
        status, body, _ = dash.request("/api/ingest", body={}, token="wrong", method="POST")
        assert status == 401
        assert dash.json("/api/runs", token=TOKEN)[0] == 200  # still serving
        # The malformed payloads left nothing behind.
        assert [r["id"] for r in dash.json("/api/runs", token=TOKEN)[1]["runs"]] == [run_id]
    finally:
        dash.close()


def test_binding_beyond_loopback_needs_allow_remote_and_token(tracked):
    d, _ = tracked
    p = subprocess.run([FOUNDRY, "dashboard", "--dir", d, "--host", "0.0.0.0", "--port", "0"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 1 and "--allow-remote" in p.stderr
    p = subprocess.run([FOUNDRY, "dashboard", "--dir", d, "--host", "0.0.0.0", "--allow-remote", "--port", "0"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1 and "--token" in p.stderr


def test_sync_pushes_runs_and_resync_sends_only_new_rows(tracked, tmp_path):
    src, run_id = tracked
    dst = tmp_path / "team"
    dash = Dashboard(dst, "--token", TOKEN)
    try:
        out = cli("runs", "--dir", src, "sync", "--to", dash.url, "--token", TOKEN).stdout
        assert "synced 1 run(s): 204 new row(s)" in out  # 201 scalars + 1 histogram + 1 text + 1 image
        status, s = dash.json("/api/runs/%s/scalars?key=loss" % run_id, token=TOKEN)
        assert len(s["points"]) == 101 and s["points"][-1][2] == "NaN"
        status, r = dash.json("/api/runs/" + run_id, token=TOKEN)
        assert r["config"] == {"lr": 1e-3} and r["status"] == "finished" and r["origin"]
        assert r["text_keys"] == ["sample"] and r["image_keys"] == ["img"]
        out = cli("runs", "--dir", src, "sync", "--to", dash.url, "--token", TOKEN).stdout
        assert "0 new row(s)" in out
        more = foundry.track.init(dir=src, resume=run_id, system_interval=0)
        more.log({"loss": 0.1}, step=200)
        more.finish()
        out = cli("runs", "--dir", src, "sync", "--to", dash.url, "--token", TOKEN).stdout
        assert "1 new row(s)" in out
        assert len(dash.json("/api/runs/%s/scalars?key=loss" % run_id, token=TOKEN)[1]["points"]) == 102
        p = cli("runs", "--dir", src, "sync", "--to", dash.url, "--token", "bad", check=False)
        assert p.returncode == 1 and "401" in p.stderr
    finally:
        dash.close()
    p = cli("runs", "--dir", src, "sync", "--to", dash.url, "--token", TOKEN, check=False)
    assert p.returncode == 1 and "cannot reach" in p.stderr


def read_png_rgb(path):
    """Decodes an 8-bit RGB/RGBA non-interlaced PNG (what Chromium writes) into an (H, W, 3) array."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    ch = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = w * ch
    out = np.zeros((h, stride), np.uint8)
    prev = np.zeros(stride, np.int32)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int32)
        cur = np.zeros(stride, np.int32)
        if f in (0, 2):
            cur = (line + (prev if f == 2 else 0)) & 255
        else:
            for x in range(stride):
                a = cur[x - ch] if x >= ch else 0
                b = prev[x]
                c = prev[x - ch] if x >= ch else 0
                if f == 1:
                    p = a
                elif f == 3:
                    p = (a + b) // 2
                else:
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    p = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                cur[x] = (line[x] + p) & 255
        out[y] = cur
        prev = cur
    return out.reshape(h, w, ch)[:, :, :3]


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium not installed (scripts/install-deps.sh)")
def test_chart_page_shows_the_loss_curve_in_headless_chromium(tracked, tmp_path):
    d, run_id = tracked
    dash = Dashboard(d)
    shot = tmp_path / "chart.png"
    try:
        url = "%s/?runs=%s&key=loss" % (dash.url, run_id)
        subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
                        "--user-data-dir=%s" % (tmp_path / "profile"), "--screenshot=%s" % shot,
                        "--window-size=1280,900", "--virtual-time-budget=8000", url],
                       capture_output=True, timeout=120)
    finally:
        dash.close()
    assert shot.exists(), "chromium wrote no screenshot"
    img = read_png_rgb(str(shot)).astype(np.int32)
    # The first run's line is #1f77b4; find its pixels.
    blue = (np.abs(img[:, :, 0] - 0x1f) < 30) & (np.abs(img[:, :, 1] - 0x77) < 30) & (np.abs(img[:, :, 2] - 0xb4) < 30)
    ys, xs = np.nonzero(blue)
    assert len(xs) > 300, "no loss curve drawn (%d blue pixels)" % len(xs)
    # A curve across the chart, falling from left to right (loss decays): per column, the line's
    # mean height; the left end is higher on screen (smaller y) than the right end.
    cols = {}
    for x, y in zip(xs, ys):
        cols.setdefault(x, []).append(y)
    columns = sorted(cols)
    assert columns[-1] - columns[0] > 300, "the blue pixels do not span a chart's width"
    span = columns[-1] - columns[0]
    left = [np.mean(cols[x]) for x in columns if x < columns[0] + span * 0.1]
    right = [np.mean(cols[x]) for x in columns if x > columns[-1] - span * 0.1]
    assert np.mean(left) < np.mean(right) - 50, "the curve does not fall from left to right"


class ChromiumPipe:
    """Chrome DevTools Protocol over --remote-debugging-pipe (fds 3 and 4, NUL-separated JSON): lets a
    test read the live page's state without a WebSocket library."""

    def __init__(self, tmp_path):
        to_chrome_r, self.to_chrome = os.pipe()
        self.from_chrome, from_chrome_w = os.pipe()
        # Chromium reads commands on fd 3 and writes replies on fd 4 (moved out of the way first, in
        # case the pipes themselves landed on 3 or 4).
        def setup():
            a = fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD, 10)
            b = fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)
        self.proc = subprocess.Popen(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                      "--user-data-dir=%s" % (tmp_path / "cdp-profile"), "--remote-debugging-pipe",
                                      "--window-size=1280,900", "about:blank"],
                                     preexec_fn=setup, pass_fds=(), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, close_fds=False)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self.buf = b""
        self.next_id = 0

    def call(self, method, session=None, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self.to_chrome, json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self.buf:
                chunk = os.read(self.from_chrome, 1 << 16)
                assert chunk, "chromium closed the pipe"
                self.buf += chunk
            raw, self.buf = self.buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self.next_id:
                assert "error" not in reply, reply
                return reply["result"]

    def close(self):
        self.proc.kill()
        self.proc.wait()
        os.close(self.to_chrome)
        os.close(self.from_chrome)


LIVE_CHILD = """
import sys, foundry
run = foundry.track.init(project="live", name="training", dir=sys.argv[1], system_interval=0, flush_interval=0.1)
for i in range(10):
    run.log({"loss": 5.0 - 0.1 * i}, step=i)
run.flush()
print(run.id, flush=True)
sys.stdin.readline()
for i in range(10, 40):
    run.log({"loss": 5.0 - 0.1 * i}, step=i)
run.flush()
print("more", flush=True)
sys.stdin.readline()
run.finish()
"""


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium not installed (scripts/install-deps.sh)")
def test_page_updates_live_while_a_run_trains(tmp_path):
    d = tmp_path / "runs"
    child = subprocess.Popen([sys.executable, "-c", LIVE_CHILD, str(d)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=dict(os.environ, PYTHONPATH=os.path.dirname(foundry.__path__[0])))
    run_id = child.stdout.readline().strip()
    dash = Dashboard(d)
    browser = ChromiumPipe(tmp_path)
    try:
        target = browser.call("Target.createTarget", url="%s/?runs=%s&key=loss" % (dash.url, run_id))["targetId"]
        session = browser.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        points = "Math.max(0, ...Object.values(Chart.instances).flatMap(c => c.data.datasets.map(s => s.data.length)))"

        def wait_for(n, seconds=30):
            deadline = time.time() + seconds
            seen = None
            while time.time() < deadline:
                r = browser.call("Runtime.evaluate", session=session, expression="typeof Chart === 'undefined' ? -1 : " + points)
                seen = r["result"].get("value")
                if seen == n:
                    return seen
                time.sleep(0.25)
            return seen

        assert wait_for(10) == 10, "the page never showed the first 10 points"
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "more"
        assert wait_for(40) == 40, "the chart did not update while the run was training"
    finally:
        browser.close()
        dash.close()
        child.stdin.write("done\n")
        child.stdin.flush()
        child.wait(timeout=30)
