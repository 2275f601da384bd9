"""ncclshim.emulate — one torchrun worker of `ncclshim-run --emulate`: the
user's script, unmodified, on CPU over the host NCCL.

    python -m ncclshim.emulate SCRIPT.py [ARGS...]     (torchrun runs this per rank)

Before torch is imported, ncclshim.ncclpg loads the host NCCL (HOSTNCCL_LIB,
set by ncclshim-run) with RTLD_GLOBAL, so libtorch_cuda.so's libnccl.so.2
binds to it, and registers the CPU process group "ncclpg", whose collectives
are the NCCL calls ProcessGroupNCCL makes, resolved through the global scope
where the preloaded shim interposes them. init_process_group is then told to
take "ncclpg" wherever the script asks for "nccl" (or for no backend), and the
script runs as __main__ with its own arguments.

What this changes, and nothing else: the "nccl" process group is served by a
CPU process group over the host NCCL, so the script must keep its tensors on
the CPU; timings are this machine's CPU timings, never GPU numbers.

Must not: touch the script's arguments or its tensors.
"""
import os
import runpy
import sys

# The host NCCL the package carries, unless the launcher named one.
os.environ.setdefault("HOSTNCCL_LIB", os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "hostnccl",
                                                   "libnccl.so.2"))
from . import ncclpg  # noqa: E402,F401  (first: binds libnccl.so.2 to the host NCCL, registers "ncclpg")

import torch.distributed as dist  # noqa: E402
import torch.distributed.distributed_c10d as c10d  # noqa: E402

_init = c10d.init_process_group


def _backend(backend):
    """The backend to use for what the script asked: "nccl" in any spelling
    ("nccl", "cuda:nccl", "cpu:gloo,cuda:nccl") or none at all means ncclpg."""
    if backend is None:
        return "ncclpg"
    b = str(backend).lower()
    return "ncclpg" if "nccl" in b.replace("ncclpg", "") else backend


def init_process_group(backend=None, *args, **kwargs):
    return _init(_backend(backend), *args, **kwargs)


init_process_group.__doc__ = _init.__doc__
dist.init_process_group = init_process_group
c10d.init_process_group = init_process_group


def main():
    if len(sys.argv) < 2:
        print("usage: python -m ncclshim.emulate SCRIPT.py [ARGS...]", file=sys.stderr)
        sys.exit(2)
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
