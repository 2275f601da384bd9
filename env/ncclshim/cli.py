"""ncclshim.cli — the console scripts of the package: ncclshim-run,
ncclshim-report, ncclshim-tune.

Each runs the tool the checkout has (env/ncclshim-run, bench/ncclshim-report,
env/ncclshim-tune, copied into the package's scripts/), with the installed
library and benchmark as defaults. ncclshim-run adds one mode of its own:

    ncclshim-run [--preset P] [--print] --emulate --nproc N [--link-gbps G] -- SCRIPT.py [ARGS...]

runs the user's unmodified DDP script on CPU: torchrun (standalone, this
Python's torch) starts N workers, each with the shim preloaded over the host
NCCL (the test substrate, built into the package where Open MPI's mpicc was)
and with `init_process_group("nccl")` served by the CPU process group
(ncclshim.emulate). --link-gbps G emulates a network link of G Gb/s per rank
(HOSTNCCL_LINK_GBPS). Every other option goes to the launcher as it is.

Must not: change the user's arguments, or set an NCCLSHIM_* variable (the
shim rejects names it does not know; presets come through the launcher).
"""
import importlib.util
import math
import os
import re
import sys

from . import lib_path

_HERE = os.path.dirname(os.path.abspath(__file__))


def _script(name):
    return os.path.join(_HERE, "scripts", name)


def _exec(argv):
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvp(argv[0], argv)


def _die(msg, code=2):
    print(f"ncclshim-run: {msg}", file=sys.stderr)
    sys.exit(code)


def _split_emulate(args):
    """(emulate, nproc, link_gbps, the launcher's options, the command)."""
    emulate, nproc, gbps, rest = False, None, None, []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return emulate, nproc, gbps, rest, args[i + 1:]
        if a == "--emulate":
            emulate = True
        elif a in ("--nproc", "--link-gbps") or a.startswith(("--nproc=", "--link-gbps=")):
            key, eq, val = a.partition("=")
            if not eq:
                if i + 1 >= len(args):
                    _die(f"{key} needs a value")
                i += 1
                val = args[i]
            if key == "--nproc":
                nproc = val
            else:
                gbps = val
        elif a in ("--preset", "--lib"):
            rest += args[i:i + 2]
            i += 1
        elif a.startswith("-"):
            rest.append(a)
        else:
            return emulate, nproc, gbps, rest, args[i:]
        i += 1
    return emulate, nproc, gbps, rest, []


def run(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    emulate, nproc, gbps, opts, cmd = _split_emulate(args)
    launcher = ["bash", _script("ncclshim-run"), "--lib", lib_path()]
    if not emulate:
        if nproc is not None or gbps is not None:
            _die("--nproc and --link-gbps go with --emulate")
        _exec(launcher + opts + (["--"] + cmd if cmd else []))
    if not nproc or not re.fullmatch(r"[0-9]+", nproc) or int(nproc) < 1:
        _die(f"--emulate needs --nproc N (a positive integer), got {nproc!r}")
    if not cmd or not cmd[0].endswith(".py"):
        _die("--emulate runs a Python script: ncclshim-run --emulate --nproc N -- train.py [args]")
    host = os.path.join(_HERE, "lib", "hostnccl", "libnccl.so.2")
    if not os.path.exists(host):
        _die("this installation has no host NCCL (it was built without Open MPI's mpicc), which --emulate runs on")
    if importlib.util.find_spec("torch") is None:
        _die(f"--emulate runs torchrun, but this Python ({sys.executable}) has no torch: install PyTorch into it")
    if gbps is not None:
        try:
            g = float(gbps)
            if not re.fullmatch(r"[0-9.eE+-]+", gbps) or not math.isfinite(g) or not 0 < g <= 1e9:
                raise ValueError
        except ValueError:
            _die(f"--link-gbps takes a number of Gb/s above 0 and at most 1e9, got {gbps!r}")
        os.environ["HOSTNCCL_LINK_GBPS"] = gbps
    os.environ["HOSTNCCL_LIB"] = host
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # N ranks share this machine's cores
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                "-m", "ncclshim.emulate"] + cmd
    _exec(launcher + opts + ["--"] + torchrun)


def report(argv=None):
    args = sys.argv[1:] if argv is None else list(argv)
    _exec([sys.executable, _script("ncclshim-report")] + args)


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
