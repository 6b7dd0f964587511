"""What every Python program under bench/ and tools/ does before anything else:
`program.start(__doc__, __name__)` answers -h / --help with the script's docstring (before the
heavy imports) and turns an uncaught exception into a one-line "<script>: error: ..." and exit
status 1 instead of a traceback (FOUNDRY_TRACEBACK=1 keeps the traceback). Imported as a module
(one bench reusing another's helpers) it does nothing."""
import os
import sys


def start(doc, name):
    if name != "__main__":
        return
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(doc.strip())
        sys.exit(0)
    if not os.environ.get("FOUNDRY_TRACEBACK"):
        sys.excepthook = lambda kind, err, tb: sys.exit("%s: error: %s: %s" % (sys.argv[0], kind.__name__, err))


def peak_rss_mb():
    """This process's peak resident size in MB: /proc/self/status's VmHWM, not ru_maxrss, which Linux
    starts at the parent's resident size when a child execs (a bench script holding 700 MB made every
    child report at least that)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024
