"""ncclshim.steps — what the in-worker hook (ncclshim.hook) does around the
program's optimizer steps, with no change to the script. torch runs global
optimizer step hooks (torch.optim.optimizer.register_optimizer_step_pre_hook
and _post_hook) for every torch.optim.Optimizer, whichever framework wraps
it (accelerate, the Trainer, Lightning, DeepSpeed's client optimizers); the
hook installs them once torch.optim is imported.

Before every step:

- it tells the preloaded library that a step is about to run
  (ncclshim_optimizer_step, shim/ncclshim.h): accumulation then knows where
  the steps are (NCCLSHIM_ACCUM_STEPS=auto learns the passes per step; a K
  that disagrees with them stops skipping; docs/accumulation.md);
- where the library answers that the last backward pass was answered
  locally (the step came earlier than accumulation expected: a window cut
  short), it makes the gradients whole before the step runs: it averages
  the gradients of every DDP module of the process over the module's
  process group (the all-reduces DDP would have made), between
  ncclshim_catchup(1) and (0), so that the shim forwards them and never
  accumulates them. The answer is the same on every rank (accumulation's
  decisions are), so every rank does it at the same step. Without a DDP
  module to do it with, it stops the step on every rank with the same
  error: no optimizer step ever runs on gradients whose sync was skipped.

After every step, every NCCLSHIM_REPLICA_CHECK steps (default 1000; 0: off)
and at exit, the replica check: a checksum of the replicated parameters
(every DDP module's; a DeepSpeed engine's under ZeRO stages 0 to 2; never
FSDP's or ZeRO-3's shards) is compared across the ranks that hold replicas,
over a gloo process group of its own (never the job's communicators). A
difference is reported on every rank, with the step and the ranks whose
checksums differ, and NCCLSHIM_REPLICA_ACTION=abort raises on every rank.
The checksum is exact: the sum of each parameter's bits read as integers
(int32 for fp32, int16 for 16-bit types), and the same sum weighted by the
parameter's position, so that any changed bit, and two swapped parameters,
show.

Both need the shim preloaded (libncclshim's ncclshim_* functions in the
process's global scope); without it they do nothing.

Must not: import torch before the program does, issue anything on the
job's communicators but the catch-up, change a parameter, or run outside a
rank of a job (the hook installs it only there).
"""
import ctypes
import os
import sys
import time
import weakref

_ddp = []         # weakrefs to the DistributedDataParallel modules made in this process
_ds = []          # weakrefs to DeepSpeed engines
_state = {"steps": 0, "group": None, "said_catchup": False, "lib": None, "checked": 0, "check_s": 0.0}


def _lib():
    """The preloaded library's step API, or None (not preloaded)."""
    if _state["lib"] is None:
        try:
            g = ctypes.CDLL(None)
            lib = {"step": g.ncclshim_optimizer_step, "watch": g.ncclshim_watch_steps, "catchup": g.ncclshim_catchup,
                   "setting": g.ncclshim_setting}
            lib["step"].restype = ctypes.c_int
            lib["setting"].argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
            lib["setting"].restype = ctypes.c_int
            lib["catchup"].argtypes = [ctypes.c_int]
            _state["lib"] = lib
        except AttributeError:
            _state["lib"] = False
    return _state["lib"] or None


def setting(name, default):
    """A setting as the preloaded library parses it (one parser for all)."""
    lib = _lib()
    if not lib:
        return default
    buf = ctypes.create_string_buffer(64)
    if lib["setting"](name.encode(), buf, len(buf)) != 0:
        return default
    return buf.value.decode()


def watch_optim(module):
    """torch.optim.optimizer was imported: the global step hooks."""
    lib = _lib()
    if not lib or os.environ.get("NCCLSHIM_DISABLE", "").strip().lower() in ("1", "true", "yes", "on"):
        return
    lib["watch"]()
    module.register_optimizer_step_pre_hook(_pre_step)
    module.register_optimizer_step_post_hook(_post_step)
    import atexit
    atexit.register(_at_exit)


def watch_ddp(module):
    """torch.nn.parallel.distributed was imported: record each DDP module."""
    cls = getattr(module, "DistributedDataParallel", None)
    if cls is None or getattr(cls.__init__, "_ncclshim_watched", False):
        return
    init = cls.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _ddp.append(weakref.ref(self))

    __init__._ncclshim_watched = True
    __init__.__wrapped__ = init
    cls.__init__ = __init__


def watch_deepspeed(module):
    """deepspeed.runtime.engine was imported: record each engine."""
    cls = getattr(module, "DeepSpeedEngine", None)
    if cls is None or getattr(cls.__init__, "_ncclshim_watched", False):
        return
    init = cls.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        _ds.append(weakref.ref(self))

    __init__._ncclshim_watched = True
    __init__.__wrapped__ = init
    cls.__init__ = __init__


def _live(refs):
    return [m for m in (r() for r in refs) if m is not None]


def _rank():
    import torch.distributed as dist
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _say(text):
    print(f"ncclshim[rank {_rank()}]: {text}", file=sys.stderr, flush=True)


def _pre_step(optimizer, args, kwargs):
    lib = _lib()
    if lib and lib["step"]() == 1:
        _catch_up()


def _catch_up():
    """Average every DDP module's gradients over its group before the step."""
    import torch
    import torch.distributed as dist
    mods = _live(_ddp)
    if not mods:
        raise RuntimeError(
            "ncclshim: the optimizer steps right after a backward pass whose gradient sync accumulation answered "
            "locally, and no DDP module is known here to make the gradients whole: stopping before the step runs "
            "on unsynced gradients (set NCCLSHIM_ACCUM_STEPS to the passes per optimizer step, or auto; "
            "docs/accumulation.md)")
    lib = _lib()
    lib["catchup"](1)
    try:
        for m in mods:
            pg = getattr(m, "process_group", None)
            world = dist.get_world_size(pg)
            by_kind = {}
            for p in m.parameters():
                if p.grad is not None:
                    by_kind.setdefault((p.grad.dtype, p.grad.device), []).append(p.grad)
            for grads in by_kind.values():
                flat = torch._utils._flatten_dense_tensors(grads)
                dist.all_reduce(flat, group=pg)
                flat.div_(world)
                for g, f in zip(grads, torch._utils._unflatten_dense_tensors(flat, grads)):
                    g.copy_(f)
    finally:
        lib["catchup"](0)
    if not _state["said_catchup"] and _rank() == 0:
        _state["said_catchup"] = True
        _say("the optimizer stepped before accumulation's window ended (its last pass was answered locally): the "
             "DDP gradients were averaged over their groups before the step (said once; docs/accumulation.md)")


def _every():
    """NCCLSHIM_REPLICA_CHECK, read once."""
    if "every" not in _state:
        _state["every"] = int(setting("NCCLSHIM_REPLICA_CHECK", "1000") or 0)
    return _state["every"]


def _post_step(optimizer, args, kwargs):
    _state["steps"] += 1
    every = _every()
    if every > 0 and _state["steps"] % every == 0:
        check_replicas(_state["steps"])


def _replicated():
    """[(name, ranks holding replicas or None for every rank, parameters)]."""
    import torch.distributed as dist
    out = []
    for i, m in enumerate(_live(_ddp)):
        pg = getattr(m, "process_group", None)
        ranks = None
        try:
            ranks = dist.get_process_group_ranks(pg) if pg is not None else None
        except Exception:  # noqa: BLE001  (the default group: every rank)
            ranks = None
        out.append((f"DDP module {i}", ranks, [p for p in m.parameters()]))
    for i, e in enumerate(_live(_ds)):
        stage = getattr(e, "zero_optimization_stage", lambda: 0)()
        if stage >= 3:
            continue
        out.append((f"DeepSpeed engine {i} (ZeRO-{stage})", None, [p for p in e.module.parameters()]))
    return out


def checksum(params):
    """Two int64: the sum of every parameter's bits as integers, and that sum
    weighted by position (wrapping), computed where the parameters live; one
    copy to the host per device holding parameters (one synchronisation)."""
    import torch
    views = {4: torch.int32, 2: torch.int16, 8: torch.int64, 1: torch.int8}
    by_dev = {}  # device -> [(position, the parameter's sum as a 0-d tensor)]
    for k, p in enumerate(params):
        t = p.detach()
        iv = views.get(t.element_size())
        if iv is not None and t.numel():
            by_dev.setdefault(t.device, []).append((k, t.contiguous().view(iv).sum(dtype=torch.int64)))
    a = b = 0
    for sums in by_dev.values():
        for (k, _), s in zip(sums, torch.stack([v for _, v in sums]).tolist()):
            a = (a + s) & 0xFFFFFFFFFFFFFFFF
            b = (b + (k + 1) * s) & 0xFFFFFFFFFFFFFFFF
    return a - (1 << 64) if a >> 63 else a, b - (1 << 64) if b >> 63 else b


def _group():
    """The check's own gloo group (made at the first check, on every rank)."""
    import datetime
    import torch.distributed as dist
    from . import hook
    if _state["group"] is None:
        _state["group"] = hook.own_group(lambda: dist.new_group(backend="gloo",
                                                                timeout=datetime.timedelta(seconds=120)))
    return _state["group"]


def check_replicas(step, at_exit=False):
    """Compare the replicated parameters' checksums across the ranks; report
    (and with NCCLSHIM_REPLICA_ACTION=abort raise) on every rank where they
    differ. Returns the number of groups of replicas that differ."""
    import torch
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return 0
    t0 = time.perf_counter()
    mine = [(name, ranks, checksum(params)) for name, ranks, params in _replicated()]
    grp = _group()
    world = dist.get_world_size()
    local = torch.tensor([v for _, _, c in mine for v in c] or [0], dtype=torch.int64)
    gathered = [torch.zeros_like(local) for _ in range(world)]
    dist.all_gather(gathered, local, group=grp)
    bad = 0
    for j, (name, ranks, _) in enumerate(mine):
        members = ranks if ranks is not None else list(range(world))
        vals = {r: tuple(gathered[r][2 * j:2 * j + 2].tolist()) for r in members}
        kinds = {}
        for r, v in vals.items():
            kinds.setdefault(v, []).append(r)
        if len(kinds) > 1:
            bad += 1
            groups = "; ".join(f"ranks {','.join(map(str, rs))} agree" if len(rs) > 1 else f"rank {rs[0]} alone"
                               for rs in sorted(kinds.values(), key=len, reverse=True))
            _say(f"the replicas of {name} differ {'at exit' if at_exit else f'after optimizer step {step}'}: "
                 f"{groups} (NCCLSHIM_REPLICA_CHECK; docs/accumulation.md)")
    _state["checked"] += 1
    _state["check_s"] += time.perf_counter() - t0
    if bad and setting("NCCLSHIM_REPLICA_ACTION", "warn") == "abort":
        raise RuntimeError(f"ncclshim: the replicated parameters differ between ranks after optimizer step {step} "
                           "(NCCLSHIM_REPLICA_ACTION=abort)")
    return bad


def report():
    """(checks made, seconds they took) so far: a test states the cost."""
    return _state["checked"], _state["check_s"]


def _at_exit():
    if hasattr(sys, "last_value") or not _state["steps"] or _every() <= 0:
        return
    try:
        check_replicas(_state["steps"], at_exit=True)
    except Exception as e:  # noqa: BLE001  (a rank gone already, a group destroyed: say so, never fail the exit)
        _say(f"the replica check at exit did not run ({type(e).__name__}: {e})")
