"""Experiment tracking (docs/tracking.md): foundry.track's wandb-named API into the SQLite store; a
SIGKILLed run keeps what it logged a flush interval before and shows as crashed; concurrent
writers lose nothing; TensorBoard event files parsed with TensorBoard's own .proto definitions and
CRC-checked (tests/track/tb_reader.py); exports (JSON Lines, CSV, TensorBoard, MLflow's file store);
`foundry runs`; `foundry train` recording its run; corrupt databases refused and left untouched.
The dashboard, its API and sync are in test_dashboard.py.
"""
import csv
import io
import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import foundry

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "track"))
import tb_reader  # noqa: E402

PYDIR = os.environ.get("FOUNDRY_PYTHON_DIR", os.path.join(ROOT, "build", "python"))
FOUNDRY = os.path.join(os.path.dirname(os.path.abspath(PYDIR)), "bin", "foundry")
needs_cli = pytest.mark.skipif(not os.path.exists(FOUNDRY), reason="foundry CLI not built at " + FOUNDRY)


def cli(*args, check=True):
    p = subprocess.run([FOUNDRY, *map(str, args)], capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError("foundry %s failed (%d):\n%s\n%s" % (" ".join(map(str, args)), p.returncode, p.stdout, p.stderr))
    return p


def child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = PYDIR + os.pathsep + env.get("PYTHONPATH", "")
    return env


def make_run(tmp_path, name="r1", **kw):
    run = foundry.track.init(project="p", name=name, config={"lr": 3e-4, "model": {"n_layer": 2}}, tags=["x"],
                             dir=tmp_path / "runs", system_interval=0, **kw)
    for i in range(20):
        run.log({"loss": 3.0 - 0.1 * i, "lr": 3e-4}, step=i)
    return run


def test_api_round_trip_with_wandb_names(tmp_path):
    run = make_run(tmp_path)
    run.log({"bad": float("nan"), "up": float("inf"), "down": -math.inf}, step=20)
    weights = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    run.log_histogram("fc.weight", foundry.from_numpy(weights), step=10)
    run.log_histogram("np.values", weights * 2, step=10, bins=16)
    run.log_text("sample", "ROMEO: wherefore", step=10)
    run.log_image("gray", np.linspace(0, 1, 64).reshape(8, 8), step=10)
    run.log_image("rgb", np.zeros((4, 5, 3), np.uint8), step=11)
    run.summary["best_val"] = 1.62
    run.summary.update(note="ok")
    art = tmp_path / "model.bin"
    art.write_bytes(b"weights" * 1000)
    sha = run.log_artifact(art, type="model")
    import hashlib
    assert sha == hashlib.sha256(art.read_bytes()).hexdigest()
    run.finish()

    api = foundry.track.Api(tmp_path / "runs")
    [r] = api.runs()
    assert r["id"] == run.id and r["name"] == "r1" and r["project"] == "p" and r["status"] == "finished"
    assert r["exit_code"] == 0 and r["tags"] == ["x"]
    assert r["config"] == {"lr": 3e-4, "model": {"n_layer": 2}}
    assert r["summary"] == {"best_val": 1.62, "note": "ok"}
    loss = api.scalars(run.id, "loss")
    assert [s for s, _, _ in loss] == list(range(20))
    assert [v for _, _, v in loss] == pytest.approx([3.0 - 0.1 * i for i in range(20)])
    assert math.isnan(api.scalars(run.id, "bad")[0][2])
    assert api.scalars(run.id, "up")[0][2] == math.inf and api.scalars(run.id, "down")[0][2] == -math.inf
    [h] = api.histograms(run.id, "fc.weight")
    assert h["num"] == 1000 and sum(h["bucket_counts"]) == 1000 and len(h["bucket_limits"]) == 64
    assert h["min"] == pytest.approx(weights.min()) and h["max"] == pytest.approx(weights.max())
    assert h["sum"] == pytest.approx(float(weights.astype(np.float64).sum()), rel=1e-6)
    assert h["sum_squares"] == pytest.approx(float((weights.astype(np.float64) ** 2).sum()), rel=1e-6)
    counts, _ = np.histogram(weights * 2, bins=16, range=(weights.min() * 2, weights.max() * 2))
    [h2] = api.histograms(run.id, "np.values")
    assert np.abs(np.array(h2["bucket_counts"]) - counts).sum() <= 2  # bin edges: only boundary values may move
    assert api.texts(run.id, "sample") == [(10, pytest.approx(time.time(), abs=60), "ROMEO: wherefore")]
    detail = api.run(run.id)
    assert detail["image_keys"] == ["gray", "rgb"]
    assert detail["artifacts"][0]["sha256"] == sha and detail["artifacts"][0]["type"] == "model"
    blob = tmp_path / "runs" / "artifacts" / "sha256" / sha[:2] / sha
    assert blob.read_bytes() == art.read_bytes()


def test_artifacts_are_deduplicated_and_gc_removes_orphans(tmp_path):
    run = make_run(tmp_path)
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    a.write_bytes(b"same bytes")
    b.write_bytes(b"same bytes")
    assert run.log_artifact(a) == run.log_artifact(b, name="copy")
    run.finish()
    store = tmp_path / "runs" / "artifacts" / "sha256"
    assert sum(len(files) for _, _, files in os.walk(store)) == 1
    orphan = store / "ff" / ("f" * 64)
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(b"nobody refers to me")
    if os.path.exists(FOUNDRY):
        out = cli("runs", "--dir", tmp_path / "runs", "gc").stdout
        assert "removed 1" in out
        assert not orphan.exists() and sum(len(f) for _, _, f in os.walk(store)) == 1


def test_resume_continues_the_run_and_steps(tmp_path):
    run = make_run(tmp_path)
    run_id = run.id
    run.finish()
    again = foundry.track.init(dir=tmp_path / "runs", resume=run_id, system_interval=0)
    assert again.id == run_id and again.name == "r1"
    again.log({"loss": 0.5})  # no step: continues after the last logged one
    again.finish(3)
    api = foundry.track.Api(tmp_path / "runs")
    assert api.scalars(run_id, "loss")[-1][0] == 20
    r = api.runs()[0]
    assert r["status"] == "failed" and r["exit_code"] == 3
    with pytest.raises(ValueError, match="unknown run ID 'nope'"):
        foundry.track.init(dir=tmp_path / "runs", resume="nope")


def test_context_manager_records_failure_and_bad_values_are_refused(tmp_path):
    with pytest.raises(KeyError):
        with foundry.track.init(dir=tmp_path / "runs", name="dies", system_interval=0) as run:
            run.log({"loss": 1.0})
            raise KeyError("boom")
    assert foundry.track.Api(tmp_path / "runs").runs()[0]["status"] == "failed"
    run = foundry.track.init(dir=tmp_path / "runs", system_interval=0)
    with pytest.raises(TypeError, match="'loss' must be a number"):
        run.log({"loss": "high"})
    with pytest.raises(ValueError, match="not a PNG"):
        run.log_image("x", b"GIF89a....")
    with pytest.raises(ValueError, match="shape"):
        run.log_image("x", np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match="config must be a JSON object"):
        foundry._C._track.init("p", "", "[1, 2]", [], str(tmp_path / "runs"), "", "", 1.0, 0.0, False)
    run.finish()
    with pytest.raises(ValueError, match="finished"):
        run.log({"loss": 1.0})


def test_logging_is_buffered_and_system_metrics_are_sampled(tmp_path):
    run = foundry.track.init(dir=tmp_path / "runs", system_interval=0.2, flush_interval=5.0)
    t0 = time.perf_counter()
    for i in range(2000):
        run.log({"loss": 1.0}, step=i)
    per_call = (time.perf_counter() - t0) / 2000
    # Nothing committed yet: the writer flushes every 5 s (the calls only queued).
    assert len(foundry.track.Api(tmp_path / "runs").scalars(run.id, "loss")) == 0
    run.add_tokens(1000)
    time.sleep(0.5)
    run.flush()
    assert len(foundry.track.Api(tmp_path / "runs").scalars(run.id, "loss")) == 2000
    keys = foundry.track.Api(tmp_path / "runs").run(run.id)["scalar_keys"]
    assert {"system/cpu_percent", "system/rss_mb", "system/tokens_per_sec"} <= set(keys)
    rss = foundry.track.Api(tmp_path / "runs").scalars(run.id, "system/rss_mb")
    assert all(10 < v < 1e6 for _, _, v in rss)
    run.finish()
    print("python log() call: %.1f us" % (per_call * 1e6))


CHILD = textwrap.dedent("""
    import sys, time, foundry
    run = foundry.track.init(project="crash", name="victim", dir=sys.argv[1], system_interval=0)
    print(run.id, flush=True)
    i = 0
    while True:
        run.log({"x": float(i)}, step=i)
        print(i, time.time(), flush=True)
        i += 1
        time.sleep(0.01)
""")


def test_sigkill_keeps_points_older_than_one_flush_interval_and_shows_crashed(tmp_path):
    d = tmp_path / "runs"
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(d)], stdout=subprocess.PIPE, text=True, env=child_env())
    run_id = p.stdout.readline().strip()
    logged = []
    deadline = time.time() + 60
    while time.time() < deadline:
        i, t = p.stdout.readline().split()
        logged.append((int(i), float(t)))
        if float(t) - logged[0][1] > 3.0:
            break
    kill_time = time.time()
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    flush_interval = 1.0
    api = foundry.track.Api(d)
    stored = {s for s, _, _ in api.scalars(run_id, "x")}
    must_have = [i for i, t in logged if t < kill_time - flush_interval - 0.25]
    assert len(must_have) > 100
    missing = [i for i in must_have if i not in stored]
    assert not missing, "lost %d points logged more than a flush interval before the kill" % len(missing)
    r = api.runs()[0]
    assert r["id"] == run_id and r["status"] == "crashed"


WRITER = textwrap.dedent("""
    import sys, foundry
    run = foundry.track.init(project="many", name="w" + sys.argv[2], dir=sys.argv[1], system_interval=0,
                             flush_interval=0.05)
    for i in range(400):
        run.log({"x": float(i), "y": -float(i)}, step=i)
        if i % 50 == 0:
            run.log_text("t", "text %d" % i, step=i)
    run.finish()
""")


def test_concurrent_writers_lose_nothing(tmp_path):
    d = tmp_path / "runs"
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(d), str(k)], env=child_env()) for k in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    api = foundry.track.Api(d)
    runs = api.runs()
    assert sorted(r["name"] for r in runs) == ["w0", "w1", "w2", "w3"]
    for r in runs:
        assert r["status"] == "finished"
        assert [s for s, _, _ in api.scalars(r["id"], "x")] == list(range(400))
        assert len(api.scalars(r["id"], "y")) == 400 and len(api.texts(r["id"], "t")) == 8


def test_tensorboard_event_files_parse_with_tensorboards_protos(tmp_path):
    run = make_run(tmp_path, name="tb run")
    run.log({"nan": float("nan")}, step=21)
    run.log_histogram("w", np.arange(100, dtype=np.float32), step=5, bins=10)
    run.log_text("sample", "hello\nworld", step=5)
    run.log_image("img", np.full((3, 4, 3), 200, np.uint8), step=6)
    run.finish()
    files = list((tmp_path / "runs" / "tb" / "tb run").glob("events.out.tfevents.*"))
    assert len(files) == 1
    recs = tb_reader.read_event_file(str(files[0]))  # checks every length and data CRC
    assert tb_reader.compat_problems(recs) == []
    assert recs[0]["kind"] == "file_version"
    loss = [(r["step"], r["value"]) for r in recs if r["kind"] == "scalar" and r["tag"] == "loss"]
    assert [s for s, _ in loss] == list(range(20))
    assert [v for _, v in loss] == pytest.approx([3.0 - 0.1 * i for i in range(20)], rel=1e-6)
    assert any(r["kind"] == "scalar" and r["tag"] == "nan" and math.isnan(r["value"]) for r in recs)
    [h] = [r for r in recs if r["kind"] == "histogram"]
    assert h["tag"] == "w" and h["step"] == 5 and h["num"] == 100 and sum(h["bucket"]) == 100
    assert h["min"] == 0 and h["max"] == 99 and h["bucket_limit"][-1] == 99
    [t] = [r for r in recs if r["kind"] == "text"]
    assert t["text"] == "hello\nworld" and t["plugin_name"] == "text"
    [im] = [r for r in recs if r["kind"] == "image"]
    assert (im["height"], im["width"], im["image_format"]) == (3, 4, "png")
    hp = [r for r in recs if r["kind"] == "hparams"]
    assert hp[0]["data"] == "session_start_info" and hp[0]["hparams"] == {"lr": 3e-4, "model.n_layer": 2.0}
    assert hp[-1]["data"] == "session_end_info" and hp[-1]["status"] == "STATUS_SUCCESS"
    # A flipped byte is caught by the CRCs.
    data = bytearray(files[0].read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad = tmp_path / "events.out.tfevents.bad"
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="CRC"):
        tb_reader.read_event_file(str(bad))


def test_corrupt_or_foreign_database_is_refused_and_left_untouched(tmp_path):
    d = tmp_path / "runs"
    d.mkdir()
    garbage = b"this is not an SQLite database at all" * 100
    (d / "foundry.db").write_bytes(garbage)
    with pytest.raises(OSError, match="corrupt or not an SQLite file"):
        foundry.track.init(dir=d)
    assert (d / "foundry.db").read_bytes() == garbage
    other = tmp_path / "other"
    other.mkdir()
    con = sqlite3.connect(other / "foundry.db")
    con.execute("CREATE TABLE customers(id INTEGER)")
    con.commit()
    con.close()
    before = (other / "foundry.db").read_bytes()
    with pytest.raises(OSError, match="not a Foundry tracking database"):
        foundry.track.init(dir=other)
    assert (other / "foundry.db").read_bytes() == before
    if os.path.exists(FOUNDRY):
        p = cli("runs", "--dir", d, "list", check=False)
        assert p.returncode == 1 and "corrupt" in p.stderr and "Traceback" not in p.stderr


def test_empty_database_beside_artifacts_is_refused(tmp_path):
    # SQLite takes a 0-byte file for a new database; `runs gc` then deleted every stored artifact.
    run = make_run(tmp_path)
    art = tmp_path / "ckpt.bin"
    art.write_bytes(b"123")
    run.log_artifact(art, type="model")
    run.finish()
    d = tmp_path / "runs"
    stored = sorted(p for p in (d / "artifacts").rglob("*") if p.is_file())
    assert stored
    (d / "foundry.db").write_bytes(b"")
    for f in d.glob("foundry.db-*"):
        f.unlink()
    with pytest.raises(OSError, match="is empty .0 bytes. beside stored artifacts"):
        foundry.track.init(dir=d)
    if os.path.exists(FOUNDRY):
        for args in (["gc"], ["list"]):
            p = cli("runs", "--dir", d, *args, check=False)
            assert p.returncode == 1 and "0 bytes" in p.stderr, p.stderr
    assert sorted(p for p in (d / "artifacts").rglob("*") if p.is_file()) == stored
    assert (d / "foundry.db").stat().st_size == 0


def test_hand_edited_rows_are_named_not_the_json_library(tmp_path):
    # A summary that is not an object, and a histogram row cut short, ended `runs list` / export in
    # nlohmann's own exceptions (invalid_iterator.207, parse_error.101).
    run = make_run(tmp_path)
    run.log_histogram("h", np.arange(10.0), step=3)
    run.finish()
    d = tmp_path / "runs"
    con = sqlite3.connect(d / "foundry.db")
    con.execute("UPDATE runs SET summary = '[1, 2]'")
    con.execute("UPDATE histograms SET bucket_limits = '[1,2'")
    con.commit()
    con.close()
    if not os.path.exists(FOUNDRY):
        pytest.skip("foundry CLI not built")
    p = cli("runs", "--dir", d, "list", check=False)
    assert p.returncode == 0 and run.id in p.stdout, p.stderr
    p = cli("runs", "--dir", d, "export", run.id, "--format", "tensorboard", "--out", tmp_path / "tb", check=False)
    assert p.returncode == 1 and "json.exception" not in p.stderr, p.stderr
    assert f"run {run.id} histogram 'h' step 3: bucket_limits is not an array of numbers" in p.stderr


def test_exports_jsonl_csv_tensorboard_mlflow(tmp_path):
    run = make_run(tmp_path)
    run.log({"nan": float("nan")}, step=20)
    run.log({"system/cpu_percent": 50.0}, step=20)
    run.log_text("sample", "hi", step=3)
    art = tmp_path / "ckpt.bin"
    art.write_bytes(b"123")
    run.log_artifact(art, type="model")
    run.finish()
    api = foundry.track.Api(tmp_path / "runs")

    lines = [json.loads(x) for x in api.export(run.id, "jsonl").splitlines()]
    assert lines[0]["kind"] == "run" and lines[0]["config"]["lr"] == 3e-4
    scal = [x for x in lines if x["kind"] == "scalar" and x["key"] == "loss"]
    assert [x["step"] for x in scal] == list(range(20))
    assert [x["value"] for x in lines if x["kind"] == "scalar" and x["key"] == "nan"] == ["NaN"]
    assert [x["text"] for x in lines if x["kind"] == "text"] == ["hi"]

    rows = list(csv.DictReader(io.StringIO(api.export(run.id, "csv"))))
    loss = [r for r in rows if r["key"] == "loss"]
    assert [int(r["step"]) for r in loss] == list(range(20))
    assert float(loss[3]["value"]) == pytest.approx(2.7)
    assert [r["value"] for r in rows if r["key"] == "nan"] == ["nan"]

    ev = api.export(run.id, "tensorboard", tmp_path / "tb")
    assert os.path.dirname(ev) == str(tmp_path / "tb" / ("r1-" + run.id))
    recs = tb_reader.read_event_file(ev)
    assert len([r for r in recs if r["kind"] == "scalar" and r["tag"] == "loss"]) == 20

    run_dir = api.export(run.id, "mlflow", tmp_path / "ml")
    exp_dir = os.path.dirname(run_dir)
    meta = dict(line.split(": ", 1) for line in open(os.path.join(run_dir, "meta.yaml")).read().splitlines())
    assert meta["run_id"] == run.id and meta["run_uuid"] == run.id and meta["status"] == "3"
    assert meta["experiment_id"] == "'%s'" % os.path.basename(exp_dir)
    exp_meta = dict(line.split(": ", 1) for line in open(os.path.join(exp_dir, "meta.yaml")).read().splitlines())
    assert exp_meta["name"] == "'p'" and exp_meta["lifecycle_stage"] == "active"
    metric = [line.split() for line in open(os.path.join(run_dir, "metrics", "loss")).read().splitlines()]
    assert [int(s) for _, _, s in metric] == list(range(20))
    assert float(metric[1][1]) == pytest.approx(2.9) and int(metric[0][0]) > 1.7e12  # milliseconds
    assert open(os.path.join(run_dir, "metrics", "system", "cpu_percent")).read().split()[1] == "50"
    assert open(os.path.join(run_dir, "metrics", "nan")).read().split()[1] == "nan"
    assert open(os.path.join(run_dir, "params", "lr")).read() == "0.0003"
    assert open(os.path.join(run_dir, "params", "model.n_layer")).read() == "2"
    assert open(os.path.join(run_dir, "tags", "mlflow.runName")).read() == "r1"
    assert open(os.path.join(run_dir, "artifacts", "ckpt.bin"), "rb").read() == b"123"


@needs_cli
def test_runs_cli_list_show_compare_export_and_errors(tmp_path):
    a = make_run(tmp_path, name="alpha")
    a.summary["best_val"] = 1.5
    a.finish()
    b = foundry.track.init(project="p", name="beta", config={"lr": 1e-3, "model": {"n_layer": 2}},
                           dir=tmp_path / "runs", system_interval=0)
    b.log({"loss": 9.0}, step=0)
    b.finish(2)
    d = tmp_path / "runs"
    out = cli("runs", "--dir", d, "list").stdout
    assert "alpha" in out and "beta" in out and "finished" in out and "failed" in out
    assert "best_val=1.5" in out
    assert cli("runs", "--dir", d, "list", "--status", "failed").stdout.count("\n") == 2
    assert cli("runs", "list", "--dir", d).stdout == out  # --dir before or after the subcommand
    listed = json.loads(cli("runs", "--dir", d, "list", "--json").stdout)
    assert {r["name"] for r in listed} == {"alpha", "beta"}
    show = cli("runs", "--dir", d, "show", a.id[:5]).stdout
    assert "lr = 0.0003" in show and "loss" in show and "best_val = 1.5" in show
    assert json.loads(cli("runs", "--dir", d, "show", "alpha", "--json").stdout)["id"] == a.id
    cmp = cli("runs", "--dir", d, "compare", "alpha", "beta").stdout
    lr_line = [line for line in cmp.splitlines() if " lr " in line][0]
    assert lr_line.startswith("*") and "0.0003" in lr_line and "0.001" in lr_line
    assert [line for line in cmp.splitlines() if "model.n_layer" in line][0].startswith(" ")
    assert "1.1" in cmp and "9" in cmp  # last losses
    out_csv = tmp_path / "a.csv"
    cli("runs", "--dir", d, "export", "alpha", "--format", "csv", "--out", out_csv)
    assert len(out_csv.read_text().splitlines()) == 41
    p = cli("runs", "--dir", d, "show", "zzz", check=False)
    assert p.returncode == 1 and "unknown run ID 'zzz'" in p.stderr
    p = cli("runs", "--dir", tmp_path / "nowhere", "list", check=False)
    assert p.returncode == 1 and "no tracking database" in p.stderr
    p = cli("runs", "--dir", d, "export", "alpha", "--format", "xml", check=False)
    assert p.returncode != 0 and "xml" in p.stderr


@needs_cli
def test_foundry_train_records_its_run(tmp_path):
    import test_train_cli as ttc
    cfg = ttc.write_run(tmp_path, 'architecture = "gpt2"\nn_embd = 32\nn_layer = 1\nn_head = 2\nblock_size = 32',
                        steps=12)
    text = open(cfg).read().replace("checkpoint_every = 0", "checkpoint_every = 6").replace("every = 1000", "every = 6")
    open(cfg, "w").write(text)
    d = tmp_path / "tracked"
    out = cli("train", "--config", cfg, "--track-dir", d, "--export", tmp_path / "hf").stdout
    assert "tracking: run" in out
    api = foundry.track.Api(d)
    [r] = api.runs()
    assert r["status"] == "finished" and r["project"] == "run" and r["name"] == "run"
    assert r["config"]["train"]["max_steps"] == 12 and r["config"]["model"]["n_embd"] == 32
    keys = set(api.run(r["id"])["scalar_keys"])
    assert {"loss", "lr", "grad_norm", "tokens_per_sec", "val_loss", "val_perplexity"} <= keys
    assert [s for s, _, _ in api.scalars(r["id"], "loss")] == list(range(1, 13))
    assert [s for s, _, _ in api.scalars(r["id"], "val_loss")] == [6, 12, 12]
    assert r["summary"]["steps"] == 12 and "final_val_loss" in r["summary"] and "best_val_loss" in r["summary"]
    arts = api.run(r["id"])["artifacts"]
    assert {a["type"] for a in arts} == {"checkpoint", "model"}
    assert api.texts(r["id"], "sample")
    # --no-track records nothing.
    d2 = tmp_path / "untracked"
    cli("train", "--config", cfg, "--track-dir", d2, "--no-track", "--fresh", "--out-dir", tmp_path / "run2")
    assert not d2.exists()


OPENER = textwrap.dedent("""
    import sys, foundry
    run = foundry.track.init(project="race", name="o" + sys.argv[2], dir=sys.argv[1], system_interval=0)
    run.log({"x": 1.0}, step=0)
    run.finish()
""")


def test_processes_creating_one_store_at_once_all_open_it(tmp_path):
    """Eight processes opening a tracking directory that does not exist yet, at the same moment:
    the first switches the new database to WAL, which SQLite refuses the others with "database is
    locked" without waiting on the busy timeout; every one must still open it (1-2% of such
    processes failed before the set-up retried)."""
    for rnd in range(6):
        d = tmp_path / ("runs%d" % rnd)
        procs = [subprocess.Popen([sys.executable, "-c", OPENER, str(d), str(k)], env=child_env(),
                                  stderr=subprocess.PIPE, text=True) for k in range(8)]
        results = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
        assert all(code == 0 for code, _ in results), [err for code, err in results if code]
        assert len(foundry.track.Api(d).runs()) == 8
