"""What the PyTorch reference of a bench computes with: its BLAS library and the OpenBLAS kernel
("core") in use, which the environment can force (OPENBLAS_CORETYPE) to an older one than the CPU
supports, and PyTorch's own CPU capability. Every bench that runs PyTorch prints describe() under
its tables, so a reader knows what the reference was.
Usage: import sys; sys.path.insert(0, <bench dir>); import torch_blas; print(torch_blas.describe())
Run as a script it prints the same line."""
import ctypes
import os
import subprocess
import sys


def _loaded_blas():
    out = {}
    for line in open("/proc/self/maps"):
        path = line.split()[-1]
        if "openblas" in path and path.endswith(".so") or "libopenblas" in path:
            out[path] = None
    return sorted(out)


def _probe():
    """(library, core) of the BLAS PyTorch loaded in this process."""
    import torch  # noqa: F401  (loads its BLAS)
    for path in _loaded_blas():
        try:
            lib = ctypes.CDLL(path)
            fn = lib.openblas_get_corename
            fn.restype = ctypes.c_char_p
            return os.path.basename(path), fn().decode()
        except (OSError, AttributeError):
            continue
    return "not OpenBLAS", "-"


def describe():
    import torch
    lib, core = _probe()
    capability = "?"
    for line in torch.__config__.show().splitlines():
        if "CPU capability usage" in line:
            capability = line.split(":", 1)[1].strip()
    forced = os.environ.get("OPENBLAS_CORETYPE")
    text = "PyTorch %s reference: BLAS %s, OpenBLAS core %s" % (torch.__version__, lib, core)
    if forced:
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
        native = subprocess.run([sys.executable, __file__, "--core"], env=env, capture_output=True, text=True).stdout.strip()
        text += " (forced by OPENBLAS_CORETYPE=%s in the environment; this CPU's own: %s)" % (forced, native or "?")
    return text + "; PyTorch CPU capability %s." % capability


if __name__ == "__main__":
    if sys.argv[1:] == ["--core"]:
        print(_probe()[1])
    else:
        print(describe())
