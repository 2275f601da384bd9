"""ncclshim — the Python side of the shim: where the library is, and its counters.

    LD_PRELOAD=$(python -m ncclshim --lib) torchrun --nproc_per_node=8 train.py

    import ncclshim
    ncclshim.stats()   # the counters of the library preloaded into this process

The shim itself is a C library preloaded into the training processes; this
package only finds it (lib_path), reads its counters from the copy already
loaded (stats) and carries the tools (console scripts ncclshim-run,
ncclshim-report, ncclshim-tune; `python -m ncclshim --check`).

Must not: load the library into a process that did not preload it (stats
reads the global symbol scope only), or import torch.
"""
import ctypes
import os

__version__ = "0.1.0"
__all__ = ["lib_path", "stats", "__version__"]

_HERE = os.path.dirname(os.path.abspath(__file__))


def lib_path():
    """Absolute path of the installed libncclshim.so."""
    return os.path.join(_HERE, "lib", "libncclshim.so")


class _Stats(ctypes.Structure):
    # shim/ncclshim.h, ncclshim_stats_t (the field order and types are its ABI)
    _fields_ = [("calls", ctypes.c_uint64), ("passthrough", ctypes.c_uint64), ("compressed", ctypes.c_uint64),
                ("skipped", ctypes.c_uint64), ("fused", ctypes.c_uint64), ("real_calls", ctypes.c_uint64),
                ("logical_bytes", ctypes.c_uint64), ("wire_bytes", ctypes.c_uint64), ("overflow", ctypes.c_uint64),
                ("underflow", ctypes.c_uint64), ("wire", ctypes.c_char * 8), ("enabled", ctypes.c_int),
                ("twophase", ctypes.c_uint64)]


def stats():
    """The process-wide counters of the shim preloaded into this process, as a
    dict (calls, passthrough, compressed, skipped, fused, real_calls,
    logical_bytes, wire_bytes, overflow, underflow, twophase: counts since the
    shim became active; wire: the wire format; enabled: False until the first
    intercepted call, or with NCCLSHIM_DISABLE=1). RuntimeError when the
    library is not loaded."""
    try:
        get = ctypes.CDLL(None).ncclshim_get_stats
    except AttributeError:
        raise RuntimeError("libncclshim is not loaded in this process: start it with "
                           "LD_PRELOAD=$(python -m ncclshim --lib) (or through ncclshim-run)") from None
    get.argtypes = [ctypes.POINTER(_Stats)]
    get.restype = ctypes.c_int
    s = _Stats()
    if get(ctypes.byref(s)) != 0:
        raise RuntimeError("ncclshim_get_stats failed")
    out = {name: getattr(s, name) for name, _ in _Stats._fields_}
    out["wire"] = s.wire.decode(errors="replace")
    out["enabled"] = bool(s.enabled)
    return out
