"""ncclshim.cli — the console scripts of the package: ncclshim-run,
ncclshim-report, ncclshim-tune, ncclshim-model.

Each runs the tool the checkout has (env/ncclshim-run, bench/ncclshim-report,
env/ncclshim-tune, bench/ncclshim-model, copied into the package's scripts/),
with the installed library, benchmark and model as defaults. ncclshim-run is the checkout's launcher
itself, every option included (--emulate too); this only names the installed
library and this Python (whose torch --emulate runs).

Must not: change the user's arguments, or set an NCCLSHIM_* variable (the
shim rejects names it does not know; presets come through the launcher).
"""
import os
import sys

from . import lib_path

_HERE = os.path.dirname(os.path.abspath(__file__))


def _script(name):
    return os.path.join(_HERE, "scripts", name)


def _exec(argv):
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(argv[0], argv)


def run(argv=None):
    """The launcher (env/ncclshim-run), with the installed library and this
    Python as defaults: options the user gives after them win."""
    args = sys.argv[1:] if argv is None else list(argv)
    _exec(["bash", _script("ncclshim-run"), "--lib", lib_path(), "--python", sys.executable] + args)


def report(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    _exec([sys.executable, _script("ncclshim-report")] + args)


def model(argv=None):
    """The cost model (bench/ncclshim-model): it finds the packaged model
    binary and rates beside itself; its Python is this one."""
    args = sys.argv[1:] if argv is None else list(argv)
    os.environ["PYTHON"] = sys.executable
    _exec(["bash", _script("ncclshim-model")] + args)


def _nccl_dir():
    """Where the packaged allreduce_perf finds a libnccl.so.2 (it has no path
    of its own to one): PyTorch's NCCL wheel on a machine with an NVIDIA
    device, else the packaged host NCCL (CPU), or None."""
    if os.path.exists("/dev/nvidiactl"):
        for base in sys.path:
            d = os.path.join(base, "nvidia", "nccl", "lib")
            if os.path.exists(os.path.join(d, "libnccl.so.2")):
                return d
    d = os.path.join(_HERE, "lib", "hostnccl")
    return d if os.path.exists(os.path.join(d, "libnccl.so.2")) else None


def tune(argv=None):
    """ncclshim-tune with the installed library and benchmark as defaults; the
    benchmark's libnccl.so.2 is put on LD_LIBRARY_PATH when none is there:
    PyTorch's NCCL wheel where /dev/nvidiactl exists, else the host NCCL."""
    args = sys.argv[1:] if argv is None else list(argv)
    defaults = ["--lib", lib_path()]
    bench = os.path.join(_HERE, "bin", "allreduce_perf")
    if os.path.exists(bench):
        defaults += ["--bench", bench]
        paths = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
        nccl = _nccl_dir()
        if nccl and not any(os.path.exists(os.path.join(p, "libnccl.so.2")) for p in paths):
            os.environ["LD_LIBRARY_PATH"] = ":".join([nccl] + paths)
    _exec([sys.executable, _script("ncclshim-tune")] + defaults + args)
