#!/usr/bin/env python3
"""tests/gpu/shim_torch.py — what one GPU can show about the shim, through pip
PyTorch's own NCCL (a torch.distributed world of one process), for `make
gpu-check` (tests/gpu/check.sh runs it twice: with the shim preloaded and
with NCCLSHIM_DISABLE=1, and compares).

    shim_torch.py OUT.json [--sizes 1M,4M,...]

Writes one JSON object: the median GPU time (CUDA events) of an in-place fp32
Sum all_reduce per size, the time of a device-to-device copy of the same
bytes, and the bit-exactness of the results:
  exact_small: values k * 2^-4 (|k| <= 1024, exact in fp16) come back
               unchanged (1 rank: the sum is the input);
  exact_rand:  random normal values come back as fp32(fp16(x)), what fp16 on
               the wire gives on one rank, bit for bit (pipelined when the
               buffer is larger than NCCLSHIM_CHUNK_BYTES, 32 MiB by default);
  stats:       the shim's ncclshim_get_stats (None when it is not loaded), so
               the caller can tell "compressed" from "forwarded";
  busy_host_ms: the host time of a compressed all_reduce (16 MiB) issued
               while the stream is busy with a ~200 ms sleep kernel, and
               busy_gpu_ms the sleep's own length: a call that waits for the
               GPU anywhere (a hidden wait, issue 23) takes about that long;
  graph_exact: an all_reduce captured into a CUDA graph and replayed twice
               gives the input (1 rank; a captured call is forwarded untouched).
Without the shim (or with NCCLSHIM_DISABLE=1) the results must be the input,
bit for bit. Must not: assert anything itself (check.sh decides), or use more
than one GPU.
"""
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


def median_ms(torch, fn, iters=20, warmup=5):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    out = sys.argv[1]
    sizes = [parse_size(s) for s in (sys.argv[3] if len(sys.argv) > 3 and sys.argv[2] == "--sizes"
                                     else "1M,4M,16M,64M").split(",")]
    import torch
    import torch.distributed as dist
    torch.cuda.set_device(0)
    store = tempfile.mktemp(prefix="shim_torch_store_")
    dist.init_process_group("nccl", init_method="file://" + store, rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    res = {"torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
           "device": torch.cuda.get_device_name(0), "sizes": {}}
    for n in sizes:
        x = torch.ones(n, device="cuda")
        y = torch.empty_like(x)
        t_ar = median_ms(torch, lambda: dist.all_reduce(x))
        t_cp = median_ms(torch, lambda: y.copy_(x))
        res["sizes"][str(n)] = {"allreduce_ms": t_ar, "copy_ms": t_cp}
        del x, y
    # Exactness: 64 Mi elements (256 MiB, pipelined by default) and 1 Mi.
    g = torch.Generator(device="cuda")
    g.manual_seed(1234)
    for name, n in (("big", 64 << 20), ("small", 1 << 20)):
        k = torch.randint(-1024, 1025, (n,), device="cuda", generator=g).float() * 0.0625
        x = k.clone()
        dist.all_reduce(x)
        torch.cuda.synchronize()
        res["exact_small_" + name] = bool(torch.equal(x.view(torch.int32), k.view(torch.int32)))
        r = torch.randn(n, device="cuda", generator=g)
        want = r.half().float()
        x = r.clone()
        dist.all_reduce(x)
        torch.cuda.synchronize()
        res["exact_rand_" + name] = bool(torch.equal(x.view(torch.int32), want.view(torch.int32)))
        res["unchanged_rand_" + name] = bool(torch.equal(x.view(torch.int32), r.view(torch.int32)))
        del k, x, r, want
    # Host time of a call while the GPU is busy: nothing may wait for it.
    x = torch.randn(4 << 20, device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    cycles = 4 * 10**8  # about 200 ms at an H200's 1.98 GHz
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    torch.cuda._sleep(cycles)
    b.record()
    t0 = time.perf_counter()
    dist.all_reduce(x)
    res["busy_host_ms"] = (time.perf_counter() - t0) * 1e3
    torch.cuda.synchronize()
    res["busy_gpu_ms"] = a.elapsed_time(b)
    # Capture and replay.
    k = torch.randint(-1024, 1025, (1 << 20,), device="cuda", generator=g).float() * 0.0625
    x = k.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        dist.all_reduce(x)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dist.all_reduce(x)
    ok = True
    for _ in range(2):
        x.copy_(k)
        graph.replay()
        torch.cuda.synchronize()
        ok = ok and bool(torch.equal(x.view(torch.int32), k.view(torch.int32)))
    res["graph_exact"] = ok
    del graph, x, k
    res["stats"] = shim_stats()
    dist.destroy_process_group()
    try:
        os.unlink(store)
    except OSError:
        pass
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
