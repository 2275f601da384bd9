"""launcher_check.py — the host NCCL's emulated link and fault injection under torchrun.

    HOSTNCCL_LINK_GBPS=G HOSTNCCL_FAIL_CALL=2 torchrun --nproc_per_node=N launcher_check.py

(the socket transport: no mpirun). Call 1: a 1 MiB fp32 all-reduce of exact
values takes at least the ring's model time 2(N-1)(S/N)/rate; call 2 fails on
every rank with the injected ncclSystemError and its message; call 3 is exact
again. Prints one TAP line per check (rank 0) and exits 0; "not ok" lines fail.
Must not: assert any time other than the lower bound the emulation guarantees.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "env"))
from ncclshim import ncclpg  # noqa: E402,F401  (before torch)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

dist.init_process_group("ncclpg")
rank, n = dist.get_rank(), dist.get_world_size()
gbps = float(os.environ["HOSTNCCL_LINK_GBPS"])
lines = []
x = torch.full((1 << 18,), float(rank + 1))
t0 = time.perf_counter()
dist.all_reduce(x)
dt = time.perf_counter() - t0
bound = 2 * (n - 1) * (x.numel() * 4 / n) * 8 / (gbps * 1e9)
lines.append((dt >= bound, f"torchrun, sockets: 1 MiB all-reduce took {dt * 1e3:.1f} ms >= model {bound * 1e3:.1f} ms "
                           f"({gbps:g} Gb/s, {n} ranks)"))
lines.append((bool((x == n * (n + 1) / 2).all()), "torchrun, sockets: all-reduce exact"))
try:
    dist.all_reduce(x)
    lines.append((False, "torchrun: HOSTNCCL_FAIL_CALL=2 did not fail call 2"))
except RuntimeError as e:
    lines.append(("HOSTNCCL_FAIL_CALL=2" in str(e), f"torchrun: call 2 fails as injected ({str(e)[:90]})"))
y = torch.full((1000,), 0.25 * (rank + 1))
dist.all_reduce(y)
lines.append((bool((y == 0.25 * n * (n + 1) / 2).all()), "torchrun: the call after the injected failure is exact"))
if rank == 0:
    for good, what in lines:
        print(f"{'ok' if good else 'not ok'} - {what}")
dist.destroy_process_group()
