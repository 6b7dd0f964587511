"""Experiment tracking with wandb's names (docs/tracking.md)::

    run = foundry.track.init(project="p", name="r1", config={"lr": 3e-4}, tags=["x"], dir="runs")
    run.log({"loss": 2.5, "lr": 3e-4}, step=10)
    run.log_histogram("fc.weight", tensor_or_ndarray, step=10)
    run.log_text("sample", "ROMEO: ...", step=10)
    run.log_image("attn", png_bytes_or_array, step=10)
    run.summary["best_val"] = 1.62
    run.log_artifact("ckpt/model.safetensors", type="model")
    run.finish()

Everything goes to ``<dir>/foundry.db`` (SQLite) through a background writer that commits once a
second, and to TensorBoard event files under ``<dir>/tb/<run name>/``. ``Api(dir)`` reads runs back.
"""
import atexit as _atexit
import json as _json
import math as _math
import sys as _sys
import weakref as _weakref

from . import _C

_track = _C._track
_live_runs = _weakref.WeakSet()


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)


def _dumps(value):
    # JSON has no NaN/inf: spell them as JavaScript does (the dashboard reads these strings).
    def fix(v):
        if isinstance(v, float) and not _math.isfinite(v):
            return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
        if isinstance(v, dict):
            return {str(k): fix(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [fix(x) for x in v]
        return v
    return _json.dumps(fix(value), default=_json_default, allow_nan=False)


def _number(key, v):
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    if hasattr(v, "item"):  # numpy scalars, 0-d arrays, one-element foundry tensors
        try:
            return float(v.item())
        except (TypeError, ValueError, RuntimeError):
            pass
    raise TypeError("log: value of %r must be a number, got %s (use log_text / log_histogram / log_image)"
                    % (key, type(v).__name__))


class Summary(dict):
    """A run's summary: a dict whose assignments are written to the run (with the next flush)."""

    def __init__(self, run, initial):
        super().__init__(initial)
        self._run = run

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self._run._c.set_summary(str(key), _dumps(value))

    def update(self, *args, **kwargs):
        for k, v in dict(*args, **kwargs).items():
            self[k] = v


class Run:
    """A tracked run; see the module docstring. Also a context manager: leaving the block with an
    exception finishes the run as failed (exit code 1)."""

    def __init__(self, c_run, config):
        self._c = c_run
        self.config = dict(config)
        self.summary = Summary(self, _json.loads(c_run.summary_json()))
        _live_runs.add(self)

    id = property(lambda self: self._c.id)
    name = property(lambda self: self._c.name)
    project = property(lambda self: self._c.project)
    dir = property(lambda self: self._c.dir)

    def __repr__(self):
        return "<foundry.track.Run %s %r in %r>" % (self.id, self.name, self.dir)

    def log(self, data, step=None, commit=None):  # commit: accepted for wandb compatibility
        if not isinstance(data, dict):
            raise TypeError("log: expected a dict of metric name -> number")
        self._c.log({str(k): _number(k, v) for k, v in data.items()}, step)

    def log_histogram(self, key, values, step=None, bins=64):
        if isinstance(values, _C.Tensor):
            self._c.log_histogram_tensor(key, values, step, bins)
            return
        import numpy as np
        arr = np.ascontiguousarray(np.asarray(values, dtype=np.float32).reshape(-1))
        self._c.log_histogram_values(key, arr, step, bins)

    def log_text(self, key, text, step=None):
        if not isinstance(text, str):
            raise TypeError("log_text: expected a str, got %s" % type(text).__name__)
        self._c.log_text(key, text, step)

    def log_image(self, key, image, step=None):
        """PNG bytes, or an array of shape (H, W), (H, W, 1|3|4): uint8, or floats in [0, 1]."""
        if isinstance(image, (bytes, bytearray)):
            self._c.log_image_png(key, bytes(image), step)
            return
        import numpy as np
        if isinstance(image, _C.Tensor):
            image = image.numpy()
        a = np.asarray(image)
        if a.ndim == 2:
            a = a[:, :, None]
        if a.ndim != 3 or a.shape[2] not in (1, 3, 4):
            raise ValueError("log_image: expected PNG bytes or an array (H, W) or (H, W, 1|3|4), got shape %s"
                             % (a.shape,))
        if a.dtype != np.uint8:
            if not np.issubdtype(a.dtype, np.floating):
                raise TypeError("log_image: pixel arrays must be uint8 or floating point in [0, 1], got %s" % a.dtype)
            a = (np.clip(np.nan_to_num(a), 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
        a = np.ascontiguousarray(a)
        self._c.log_image_pixels(key, a.tobytes(), a.shape[0], a.shape[1], a.shape[2], step)

    def log_artifact(self, path, type="file", name=None):  # noqa: A002 (wandb's name)
        return self._c.log_artifact(str(path), type, name or "")

    def add_tokens(self, n):
        self._c.add_tokens(int(n))

    def flush(self):
        self._c.flush()

    def finish(self, exit_code=0):
        self._c.finish(int(exit_code))

    @property
    def finished(self):
        return self._c.finished

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.finish(1 if exc_type is not None else 0)
        return False


def init(project="default", name=None, config=None, tags=None, dir="runs", resume=None, notes="",  # noqa: A002
         flush_interval=1.0, system_interval=10.0, tensorboard=True):
    """Starts a run (or resumes run ``resume``); returns a Run. Runs still open at interpreter exit
    are finished: exit code 1 if the program is dying of an uncaught exception, else 0."""
    config = dict(config or {})
    c = _track.init(project or "default", name or "", _dumps(config), [str(t) for t in (tags or [])], str(dir),
                    resume or "", notes or "", float(flush_interval), float(system_interval), bool(tensorboard))
    return Run(c, config)


_failed = {"exc": False}
_previous_hook = _sys.excepthook


def _excepthook(*args):
    _failed["exc"] = True
    _previous_hook(*args)


_sys.excepthook = _excepthook


@_atexit.register
def _finish_open_runs():
    for run in list(_live_runs):
        try:
            if not run.finished:
                run.finish(1 if _failed["exc"] else 0)
        except Exception as e:  # noqa: BLE001 - never hide the program's own exit
            print("foundry.track: could not finish run %s: %s" % (run.id, e), file=_sys.stderr)


class Api:
    """Reads a tracking directory: ``Api("runs").runs()`` (dicts as the dashboard's /api/runs),
    ``.run(id)`` (with keys and artifacts), ``.scalars(id, key)`` -> [(step, wall_time, value)],
    ``.texts``, ``.histograms``, ``.export(id, format, out)``."""

    def __init__(self, dir="runs"):  # noqa: A002
        self.dir = str(dir)

    def runs(self):
        return _json.loads(_track.runs_json(self.dir))

    def run(self, run_id):
        return _json.loads(_track.run_json(self.dir, run_id))

    def scalars(self, run_id, key):
        return _track.scalars(self.dir, run_id, key)

    def texts(self, run_id, key):
        return _track.texts(self.dir, run_id, key)

    def histograms(self, run_id, key):
        return _track.histograms(self.dir, run_id, key)

    def export(self, run_id, format, out=""):  # noqa: A002
        return _track.export(self.dir, run_id, format, str(out))
