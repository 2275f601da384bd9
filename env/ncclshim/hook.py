"""ncclshim.hook — the package's one hook inside a job's Python processes.

    PYTHONPATH=$(python -m ncclshim --hook-path) LD_PRELOAD=$(python -m ncclshim --lib) torchrun ... train.py

ncclshim-run puts the hook's directory (ncclshim/site, whose sitecustomize.py
calls install()) on PYTHONPATH for every command it starts, so each Python
process of the job runs install() before the script. The shim library itself
stays inert until its first intercepted NCCL call, so it cannot speak at the
exit of a process that never made one; this module does, on the Python side:

- it records the backend of every process group the process creates (a thin
  wrapper around torch's one constructor of groups,
  distributed_c10d._new_process_group_helper, put in place when torch.distributed
  is imported) and, under `ncclshim-run --emulate` only, lets
  ncclshim.emulate choose the backend that serves it (redirect());
- at exit, where the shim saw no NCCL all-reduce or reduce-scatter
  (ncclshim.stats()["calls"] == 0), rank 0 prints one line saying so and
  naming the backend the job used instead ("saw no NCCL all-reduce: the job
  used gloo?"); a process whose groups ran without the shim preloaded says
  that, on its own rank; a rank of a job of several (WORLD_SIZE above 1)
  that imported torch but made no process group at all says that.

It also installs ncclshim.steps (the optimizer step hooks: accumulation
that knows the step, the catch-up, the replica check), when
torch.optim.optimizer, torch.nn.parallel.distributed and
deepspeed.runtime.engine are imported.

Quiet where the shim did see calls, with NCCLSHIM_DISABLE set, in processes
that are no rank (torchrun's agent, tools) or are started by one (DataLoader
and compile workers: their parent has RANK), and after an uncaught
exception (its traceback says more). It is the package's one in-worker hook:
what else must run inside the job's processes without a change to the script
(an optimizer-step hook, say) belongs here, installed by install().

Must not: import torch (every Python process of the job runs install(),
tools and the launcher's agent included), change what a group does unless
ncclshim.emulate asked (redirect), or print anything but that one line.
"""
import atexit
import importlib.abc
import os
import sys

from . import stats

_C10D = "torch.distributed.distributed_c10d"
_groups = []        # (backend asked for, backend that served it) per process group created here
_redirect = [None]  # ncclshim.emulate's choice of backend, or None: groups keep theirs
_own = [False]      # a group of the hook's own is being made: never redirected
_installed = [False]


def _watchers():
    """Module name -> what to do right after it is imported."""
    from . import steps
    return {_C10D: _watch, "torch.optim.optimizer": steps.watch_optim,
            "torch.nn.parallel.distributed": steps.watch_ddp, "deepspeed.runtime.engine": steps.watch_deepspeed}


def install():
    """Record this process's process groups, watch its optimizer steps and
    speak at its exit (idempotent)."""
    if _installed[0]:
        return
    _installed[0] = True
    atexit.register(_at_exit)
    watchers = _watchers()
    for name, fn in watchers.items():
        if name in sys.modules:
            fn(sys.modules[name])
    sys.meta_path.insert(0, _AfterImport({k: v for k, v in watchers.items() if k not in sys.modules}))


def own_group(make):
    """make() a process group of the hook's own (the replica check's gloo
    group): its backend is never redirected."""
    _own[0] = True
    try:
        return make()
    finally:
        _own[0] = False


def redirect(choose):
    """Serve each new process group by choose(backend asked for) instead
    (ncclshim.emulate only: every CPU group over the NCCL API). torch must be
    imported already; a torch whose group constructor cannot be wrapped is
    an error, never a silent run on the groups' own backends."""
    install()
    c10d = sys.modules.get(_C10D)
    if c10d is None or not getattr(c10d._new_process_group_helper, "_ncclshim_watched", False):
        raise RuntimeError("ncclshim: cannot serve this torch's process groups over NCCL (no "
                           "torch.distributed.distributed_c10d._new_process_group_helper(backend=...) to wrap)")
    _redirect[0] = choose


def groups():
    """[(backend asked for, backend that served it)] of the groups created so far."""
    return list(_groups)


def _watch(c10d):
    """Wrap torch's constructor of process groups (every init_process_group and
    new_group goes through it) once."""
    helper = getattr(c10d, "_new_process_group_helper", None)
    if helper is None or getattr(helper, "_ncclshim_watched", False):
        return
    import inspect
    sig = inspect.signature(helper)
    if "backend" not in sig.parameters:
        return  # another torch: nothing recorded (and redirect() refuses)

    def _new_process_group_helper(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        asked = bound.arguments.get("backend")
        served = _redirect[0](asked) if _redirect[0] and not _own[0] else asked
        bound.arguments["backend"] = served
        pg = helper(*bound.args, **bound.kwargs)
        _groups.append((str(asked), str(served)))
        return pg

    _new_process_group_helper._ncclshim_watched = True
    _new_process_group_helper.__wrapped__ = helper
    c10d._new_process_group_helper = _new_process_group_helper


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when one of the watched modules is being
    imported, lets the other finders find it and wraps its loader so that its
    watcher runs right after the module has executed."""

    def __init__(self, watchers):
        self._watchers = watchers

    def find_spec(self, name, path, target=None):
        if name not in self._watchers:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _WatchLoader(spec.loader, self._watchers[name])
                return spec
        return None


class _WatchLoader(importlib.abc.Loader):
    def __init__(self, loader, after):
        self._loader = loader
        self._after = after

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._after(module)


def _flag(name):
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _rank():
    for v in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"):
        if os.environ.get(v, "").isdigit():
            return int(os.environ[v])
    return 0


def _child_of_a_rank():
    """A process started by a rank (a spawned DataLoader or compile worker)
    inherits RANK; the rank's own parent (torchrun's agent, mpirun) has none."""
    mp = sys.modules.get("multiprocessing")
    if mp is not None and mp.parent_process() is not None:
        return True
    try:
        with open(f"/proc/{os.getppid()}/environ", "rb") as f:
            return any(kv.startswith(b"RANK=") for kv in f.read().split(b"\0"))
    except OSError:
        return False


def _nccl(backend):
    return "nccl" in backend.lower()


def message():
    """The exit line this process would print now, or None."""
    if hasattr(sys, "last_value") or _flag("NCCLSHIM_DISABLE"):
        return None
    world = os.environ.get("WORLD_SIZE", "")
    alone = not _groups and world.isdigit() and int(world) > 1 and _C10D in sys.modules
    if not _groups and not alone:
        return None
    if _child_of_a_rank():
        return None
    try:
        seen = stats()["calls"]
    except RuntimeError:
        if not _groups:
            return None
        return (f"ncclshim: rank {_rank()} ran its process groups without the shim: libncclshim is not preloaded "
                f"into this process (LD_PRELOAD={os.environ.get('LD_PRELOAD', '')!r}); every rank must preload it "
                "the same way (docs/troubleshooting.md)")
    if seen or _rank() != 0:
        return None
    if alone:
        return (f"ncclshim: saw no NCCL all-reduce: the job used no process group? (WORLD_SIZE={world}, but this "
                "rank never created one: each rank trained alone; docs/troubleshooting.md)")
    asked = sorted({a for a, _ in _groups})
    served = sorted({s for _, s in _groups})
    used = ", ".join(served)
    if not any(_nccl(s) for s in served):
        return (f"ncclshim: saw no NCCL all-reduce: the job used {used}? (the shim sees NCCL's C API only; ask "
                "for the \"nccl\" backend on GPUs, or run on CPU under ncclshim-run --emulate, which serves gloo "
                "over NCCL; docs/troubleshooting.md)")
    how = "" if asked == served else f" (asked for {', '.join(asked)})"
    return (f"ncclshim: saw no NCCL all-reduce: the job used {used}{how}? Its groups made no all-reduce or "
            "reduce-scatter through the shim: only other collectives, or an NCCL linked statically "
            "(python -m ncclshim --check); docs/troubleshooting.md")


def _at_exit():
    line = message()
    if line:
        sys.stdout.flush()
        print(line, file=sys.stderr, flush=True)
