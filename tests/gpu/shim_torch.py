#!/usr/bin/env python3
"""tests/gpu/shim_torch.py — what one GPU can show about the shim, through pip
PyTorch's own NCCL (a torch.distributed world of one process), for `make
gpu-check` (tests/gpu/check.sh runs it twice: with the shim preloaded and
with NCCLSHIM_DISABLE=1, and judges the two JSON files).

    shim_torch.py OUT.json [--sizes 1M,4M,...] [--iters N] [--big N] [--small N] [--cpu]

Writes one JSON object:
  sizes:       per size, the median time of an in-place fp32 Sum all_reduce
               and of a copy of the same bytes (ms; CUDA events on a GPU, the
               wall clock with --cpu);
  exact_small_<b>: values k * 2^-4 (|k| <= 1024, exact in fp16) come back
               unchanged (1 rank: the sum is the input), b = big (--big
               elements, 64 Mi) or small (--small, 1 Mi);
  exact_rand_<b>: random normal values come back as fp32(fp16(x)), what fp16
               on the wire gives on one rank, bit for bit;
  unchanged_rand_<b>: they come back as x itself (what plain NCCL gives);
  did:         for each of those calls (and busy, graph) what the shim did
               with it: the change of its counters across the call
               (compressed, passthrough, real_calls: the real NCCL calls it
               made, one per chunk of a pipelined call), so the caller can
               tell a call that was compressed in 8 chunks from one that was
               forwarded; None without the shim;
  stats:       the shim's totals (ncclshim_get_stats; None without the shim);
  busy_host_ms, busy_gpu_ms (GPU only): the host time of an all_reduce
               (16 MiB) issued while the stream is busy with a ~200 ms sleep
               kernel, and the sleep's own length: a call that waits for the
               GPU anywhere (a hidden wait, issue 23) takes about that long;
  graph_exact (GPU only): an all_reduce captured into a CUDA graph and
               replayed twice gives the input (1 rank; a captured call is
               forwarded untouched).
--cpu: the stand-ins (check.sh on the driver double runs this under
ncclshim.emulate: CPU tensors, the host NCCL, the same shim settings and
verdicts); the busy and graph checks need a GPU and are left out.

Must not: judge anything itself (check.sh decides), or use more than one GPU.
"""
import argparse
import ctypes
import json
import os
import sys
import tempfile
import time


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


class Stats(ctypes.Structure):
    _fields_ = [(f, ctypes.c_uint64) for f in
                ("calls", "passthrough", "compressed", "skipped", "fused", "real_calls",
                 "logical_bytes", "wire_bytes", "overflow", "underflow")] + \
               [("wire", ctypes.c_char * 8), ("enabled", ctypes.c_int), ("twophase", ctypes.c_uint64)]


def shim_stats():
    try:
        fn = ctypes.CDLL(None).ncclshim_get_stats
    except AttributeError:
        return None
    s = Stats()
    if fn(ctypes.byref(s)) != 0:
        return None
    d = {f: getattr(s, f) for f, _ in Stats._fields_ if f not in ("wire",)}
    d["wire"] = s.wire.decode()
    return d


def median_ms(torch, gpu, fn, iters, warmup=5):
    """The median time of fn in ms over iters calls after warmup ones: CUDA
    events on the current stream on a GPU, the wall clock on the CPU."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if gpu:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def did(before, after):
    """What the shim did between two stats snapshots (None without the shim)."""
    if before is None or after is None:
        return None
    d = {k: after[k] - before[k] for k in ("calls", "compressed", "passthrough", "fused", "real_calls", "twophase")}
    d["wire"] = after["wire"]
    return d


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--sizes", default="1M,4M,16M,64M")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--big", default="64M", help="elements of the large exactness check")
    p.add_argument("--small", default="1M", help="elements of the small exactness check")
    p.add_argument("--cpu", action="store_true", help="the stand-ins: CPU tensors (under ncclshim.emulate)")
    a = p.parse_args()
    import torch
    import torch.distributed as dist
    gpu = not a.cpu
    dev = torch.device("cuda", 0) if gpu else torch.device("cpu")
    if gpu:
        torch.cuda.set_device(0)
    store = tempfile.mktemp(prefix="shim_torch_store_")
    dist.init_process_group("nccl", init_method="file://" + store, rank=0, world_size=1,
                            **({"device_id": dev} if gpu else {}))

    def sync():
        if gpu:
            torch.cuda.synchronize()

    def median_ms_(fn, iters):
        return median_ms(torch, gpu, fn, iters)

    def reduce_seen(x):
        """dist.all_reduce(x), and what the shim did with it."""
        before = shim_stats()
        dist.all_reduce(x)
        sync()
        return did(before, shim_stats())

    res = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if gpu else "cpu (stand-in)",
           "sizes": {}, "did": {}}
    try:
        res["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if gpu else "host NCCL"
    except Exception:  # noqa: BLE001
        res["nccl"] = "?"
    for n in [parse_size(s) for s in a.sizes.split(",")]:
        x = torch.ones(n, device=dev)
        y = torch.empty_like(x)
        t_ar = median_ms_(lambda: dist.all_reduce(x), a.iters)
        t_cp = median_ms_(lambda: y.copy_(x), a.iters)
        res["sizes"][str(n)] = {"allreduce_ms": t_ar, "copy_ms": t_cp}
        del x, y
    # Exactness, each call with what the shim did with it.
    g = torch.Generator(device=dev)
    g.manual_seed(1234)
    for name, n in (("big", parse_size(a.big)), ("small", parse_size(a.small))):
        k = torch.randint(-1024, 1025, (n,), device=dev, generator=g).float() * 0.0625
        x = k.clone()
        res["did"]["exact_small_" + name] = reduce_seen(x)
        res["exact_small_" + name] = bool(torch.equal(x.view(torch.int32), k.view(torch.int32)))
        r = torch.randn(n, device=dev, generator=g)
        want = r.half().float()
        x = r.clone()
        res["did"]["rand_" + name] = reduce_seen(x)
        res["exact_rand_" + name] = bool(torch.equal(x.view(torch.int32), want.view(torch.int32)))
        res["unchanged_rand_" + name] = bool(torch.equal(x.view(torch.int32), r.view(torch.int32)))
        res["elems_" + name] = n
        del k, x, r, want
    if gpu:
        # Host time of a call while the GPU is busy: nothing may wait for it.
        x = torch.randn(4 << 20, device=dev)
        dist.all_reduce(x)
        sync()
        cycles = 4 * 10**8  # about 200 ms at an H200's 1.98 GHz
        a0, b0 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        before = shim_stats()
        a0.record()
        torch.cuda._sleep(cycles)
        b0.record()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        res["busy_host_ms"] = (time.perf_counter() - t0) * 1e3
        sync()
        res["did"]["busy"] = did(before, shim_stats())
        res["busy_gpu_ms"] = a0.elapsed_time(b0)
        # Capture and replay.
        k = torch.randint(-1024, 1025, (1 << 20,), device=dev, generator=g).float() * 0.0625
        x = k.clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            dist.all_reduce(x)  # warm-up outside the capture
        torch.cuda.current_stream().wait_stream(s)
        sync()
        graph = torch.cuda.CUDAGraph()
        before = shim_stats()
        with torch.cuda.graph(graph):
            dist.all_reduce(x)
        res["did"]["graph"] = did(before, shim_stats())
        ok = True
        for _ in range(2):
            x.copy_(k)
            graph.replay()
            sync()
            ok = ok and bool(torch.equal(x.view(torch.int32), k.view(torch.int32)))
        res["graph_exact"] = ok
        del graph, x, k
    res["stats"] = shim_stats()
    dist.destroy_process_group()
    try:
        os.unlink(store)
    except OSError:
        pass
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
