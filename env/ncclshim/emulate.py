"""ncclshim.emulate — one torchrun worker of `ncclshim-run --emulate`: the
user's script, unmodified, on CPU over the host NCCL.

    python -m ncclshim.emulate SCRIPT.py [ARGS...]     (torchrun runs this per rank)

Before torch is imported, ncclshim.ncclpg loads the host NCCL (HOSTNCCL_LIB,
set by ncclshim-run) with RTLD_GLOBAL, so libtorch_cuda.so's libnccl.so.2
binds to it, and registers the CPU process group "ncclpg", whose collectives
are the NCCL calls ProcessGroupNCCL makes, resolved through the global scope
where the preloaded shim interposes them. Every process group the script
creates on the CPU is then served by "ncclpg" (ncclshim.hook.redirect):
init_process_group and new_group, explicit or default, whatever backend they
ask for among "nccl", "gloo" and their device maps ("cpu:gloo,cuda:nccl");
other backends (mpi, ucc, fake, plugins) keep theirs. Frameworks that train on
the CPU only with a switch of their own get it: ACCELERATE_USE_CPU=1 unless set
(accelerate's Accelerator and the transformers Trainer then make a process
group; without it each rank trains alone). The script runs as __main__ with
its own arguments, and at exit rank 0 says so if the shim saw no NCCL
all-reduce (ncclshim.hook).

What this changes, and nothing else: the CPU process groups are served over
the host NCCL, so the script must keep its tensors on the CPU, and
ACCELERATE_USE_CPU defaults to 1; timings are this machine's CPU timings,
never GPU numbers.

Must not: touch the script's arguments or its tensors, or redirect anything
outside a worker of --emulate.
"""
import os
import runpy
import sys

# The host NCCL the package carries, unless the launcher named one.
os.environ.setdefault("HOSTNCCL_LIB", os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "hostnccl",
                                                   "libnccl.so.2"))
os.environ.setdefault("ACCELERATE_USE_CPU", "1")
from . import ncclpg  # noqa: E402,F401  (first: binds libnccl.so.2 to the host NCCL, registers "ncclpg")
from . import hook  # noqa: E402

# What a CPU process group may ask for, each served by ncclpg: a bare name,
# the default ("undefined": c10d's "cpu:gloo,cuda:nccl"), or a device map.
_SERVED = ("gloo", "nccl", "undefined", "ncclpg")


def served_by(backend):
    """The backend that serves a group asked for with backend: "ncclpg" for
    gloo, nccl, the default and device maps of them; any other kept."""
    if backend is None:
        return "ncclpg"
    parts = [p.rsplit(":", 1)[-1].strip() for p in str(backend).lower().split(",")]
    return "ncclpg" if all(p in _SERVED for p in parts) else backend


hook.redirect(served_by)


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
