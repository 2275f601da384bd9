"""ncclpg.py — a torch.distributed backend for CPU tensors that drives the NCCL C API.

A TEST AND DEMO SUBSTRATE, like the host NCCL it runs on: ProcessGroupNCCL
needs CUDA tensors, so on a machine without a GPU this small Python process
group stands in for it. Its collectives are the NCCL calls ProcessGroupNCCL
makes (one ncclAllReduce per DDP bucket, in place; ncclReduceScatter and
ncclAllGather for FSDP2; ncclBcast for broadcast; ncclGroupStart/End around the
coalesced calls), resolved from the process's global symbol scope
(ctypes.CDLL(None)) so that a preloaded libncclshim.so interposes them exactly
as it interposes libtorch_cuda.so's calls. The stream argument is NULL: the
host NCCL runs every call on the calling thread, so a call returns complete.

Import this module BEFORE torch: it loads the host NCCL (HOSTNCCL_LIB, default
build/lib/hostnccl/libnccl.so.2) with RTLD_GLOBAL first, so the soname
libnccl.so.2 that libtorch_cuda.so needs binds to it and not to the wheel's
GPU NCCL. Then `dist.init_process_group("ncclpg")` (torchrun's environment);
rank 0 of each group makes the unique id and shares it through the group's
store, every rank calls ncclCommInitRank.

Must not: touch tensor data outside NCCL calls except to stage non-contiguous
tensors, answer any collective locally, or call NCCL through a library handle
(that would bypass LD_PRELOAD).
"""
import ctypes
import os
import time

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_LIB = os.environ.get("HOSTNCCL_LIB") or os.path.join(
    _ROOT, os.environ.get("B", "build"), "lib", "hostnccl", "libnccl.so.2")
if not os.path.exists(_LIB):
    raise ImportError(f"ncclpg: host NCCL not found at {_LIB} (run make, or set HOSTNCCL_LIB)")
ctypes.CDLL(_LIB, mode=ctypes.RTLD_GLOBAL)  # before torch: see the header

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.futures import Future  # noqa: E402
from torch._C._distributed_c10d import _create_work_from_future  # noqa: E402

_G = ctypes.CDLL(None)  # the global scope: LD_PRELOAD first, then the host NCCL


class _UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


_VP, _SZ, _I, _P = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p
_PROTOS = {
    "ncclGetUniqueId": [ctypes.POINTER(_UniqueId)],
    "ncclCommInitRank": [ctypes.POINTER(_P), _I, _UniqueId, _I],
    "ncclCommDestroy": [_P],
    "ncclAllReduce": [_VP, _VP, _SZ, _I, _I, _P, _P],
    "ncclReduceScatter": [_VP, _VP, _SZ, _I, _I, _P, _P],
    "ncclAllGather": [_VP, _VP, _SZ, _I, _P, _P],
    "ncclBcast": [_VP, _SZ, _I, _I, _P, _P],
    "ncclGroupStart": [],
    "ncclGroupEnd": [],
    "ncclGetErrorString": [_I],
    "ncclGetLastError": [_P],
}
_comm_s = [0.0, 0.0]  # seconds spent inside NCCL calls by this process (comm_seconds()), CPU time there


def _timed(f):
    def call(*args):
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return f(*args)
        finally:
            _comm_s[0] += time.perf_counter() - t0
            _comm_s[1] += time.process_time() - c0
    return call


def comm_seconds():
    """Wall time this process has spent inside NCCL calls (the host NCCL
    runs each call to completion on the calling thread)."""
    return _comm_s[0]


def comm_cpu_seconds():
    """CPU time of this process (all threads) while inside NCCL calls."""
    return _comm_s[1]


_F = {}
for _name, _args in _PROTOS.items():
    _f = getattr(_G, _name)
    _f.argtypes = _args
    _f.restype = ctypes.c_char_p if _name in ("ncclGetErrorString", "ncclGetLastError") else _I
    _F[_name] = _timed(_f) if _name.startswith(("ncclAll", "ncclReduce", "ncclBroad", "ncclBcast", "ncclGroupEnd")) else _f

_DTYPES = {torch.int8: 0, torch.uint8: 1, torch.bool: 1, torch.int32: 2, torch.int64: 4,
           torch.float16: 6, torch.float32: 7, torch.float64: 8, torch.bfloat16: 9}
_OPS = {dist.ReduceOp.SUM: 0, dist.ReduceOp.PRODUCT: 1, dist.ReduceOp.MAX: 2,
        dist.ReduceOp.MIN: 3, dist.ReduceOp.AVG: 4}


def _check(res, what, comm=None):
    if res != 0:
        msg = _F["ncclGetLastError"](comm).decode(errors="replace")
        raise RuntimeError(f"ncclpg: {what} failed: {_F['ncclGetErrorString'](res).decode()} ({msg})")


def _dtype(t):
    if t.dtype not in _DTYPES:
        raise TypeError(f"ncclpg: dtype {t.dtype} has no NCCL datatype")
    if t.device.type != "cpu":
        raise TypeError(f"ncclpg: tensors must be on the CPU (got {t.device})")
    return _DTYPES[t.dtype]


def _op(opts):
    op = opts.reduceOp
    op = getattr(op, "op", op)  # ReduceOp or its RedOpType
    for k, v in _OPS.items():
        if op == k:
            return v
    raise ValueError(f"ncclpg: reduce op {op} is not supported (PreMulSum is not)")


def _done(result=None):
    fut = Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


class _Staged:
    """A contiguous view of t for NCCL; copied back on exit when it was staged."""

    def __init__(self, t, write=True):
        self.t, self.write = t, write
        self.c = t if t.is_contiguous() else t.contiguous()

    def __enter__(self):
        return self.c

    def __exit__(self, *exc):
        if self.write and self.c is not self.t and exc[0] is None:
            self.t.copy_(self.c)


class NcclPG(dist.ProcessGroup):
    """CPU process group over ncclComm_t (see the module header)."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self._rank, self._size = rank, size
        uid = _UniqueId()
        if rank == 0:
            _check(_F["ncclGetUniqueId"](ctypes.byref(uid)), "ncclGetUniqueId")
            store.set("ncclpg_uid", ctypes.string_at(ctypes.byref(uid), ctypes.sizeof(uid)))
        raw = store.get("ncclpg_uid")
        ctypes.memmove(ctypes.byref(uid), raw, len(raw))
        self._comm = _P()
        _check(_F["ncclCommInitRank"](ctypes.byref(self._comm), size, uid, rank), "ncclCommInitRank")

    def getBackendName(self):
        return "ncclpg"

    @property
    def group_name(self):  # c10d keeps the names of Python process groups itself
        return dist.distributed_c10d._world.pg_names[self]

    def size(self):
        return self._size

    def rank(self):
        return self._rank

    # ---- the NCCL calls ----
    def _allreduce(self, t, op):
        with _Staged(t) as c:
            _check(_F["ncclAllReduce"](c.data_ptr(), c.data_ptr(), c.numel(), _dtype(c), op, self._comm, None),
                   "ncclAllReduce", self._comm)

    def _grouped(self, fn, items):
        if len(items) == 1:
            fn(*items[0])
            return
        _check(_F["ncclGroupStart"](), "ncclGroupStart")
        try:
            for it in items:
                fn(*it)
        finally:
            _check(_F["ncclGroupEnd"](), "ncclGroupEnd")

    def allreduce(self, tensors, opts=None):
        op = _op(opts)
        self._grouped(self._allreduce, [(t, op) for t in tensors])
        return _done(tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        op = _op(opts)
        _check(_F["ncclGroupStart"](), "ncclGroupStart")
        try:
            for t in tensors:
                self._allreduce(t, op)
        finally:
            _check(_F["ncclGroupEnd"](), "ncclGroupEnd")
        return _done(tensors)

    def barrier(self, opts=None):
        self._allreduce(torch.zeros(1), 0)
        return _done()

    def broadcast(self, tensors, opts=None):
        def one(t):
            with _Staged(t) as c:
                # In place, as ProcessGroupNCCL's broadcast: ncclBcast (its out-of-place
                # _broadcast_oop calls ncclBroadcast, which DDP does not use).
                _check(_F["ncclBcast"](c.data_ptr(), c.numel(), _dtype(c), opts.rootRank, self._comm, None),
                       "ncclBcast", self._comm)
        self._grouped(one, [(t,) for t in tensors])
        return _done(tensors)

    def _gather_into(self, out, inp):
        if out.numel() != inp.numel() * self._size or out.dtype != inp.dtype:
            raise ValueError("ncclpg: all-gather output must hold world_size inputs of the same dtype")
        with _Staged(out) as o, _Staged(inp, write=False) as i:
            _check(_F["ncclAllGather"](i.data_ptr(), o.data_ptr(), i.numel(), _dtype(i), self._comm, None),
                   "ncclAllGather", self._comm)

    def _scatter_from(self, out, inp, op):
        if inp.numel() != out.numel() * self._size or out.dtype != inp.dtype:
            raise ValueError("ncclpg: reduce-scatter input must hold world_size outputs of the same dtype")
        with _Staged(out) as o, _Staged(inp, write=False) as i:
            _check(_F["ncclReduceScatter"](i.data_ptr(), o.data_ptr(), o.numel(), _dtype(o), op, self._comm,
                                           None), "ncclReduceScatter", self._comm)

    def _allgather_base(self, out, inp, opts=None):
        self._gather_into(out, inp)
        return _done(out)

    all_gather_single = _allgather_base

    def allgather(self, outputs, inputs, opts=None):
        for outs, inp in zip(outputs, inputs, strict=True):
            flat = torch.empty(inp.numel() * self._size, dtype=inp.dtype)
            self._gather_into(flat, inp.reshape(-1))
            for r, o in enumerate(outs):
                o.copy_(flat[r * inp.numel():(r + 1) * inp.numel()].view_as(o))
        return _done(outputs)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        self._grouped(self._gather_into, list(zip(outputs, inputs, strict=True)))
        return _done(outputs)

    def _reduce_scatter_base(self, out, inp, opts=None):
        self._scatter_from(out, inp, _op(opts))
        return _done(out)

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter(self, outputs, inputs, opts=None):
        op = _op(opts)
        for out, ins in zip(outputs, inputs, strict=True):
            self._scatter_from(out, torch.cat([t.reshape(-1) for t in ins]), op)
        return _done(outputs)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        op = _op(opts)
        self._grouped(self._scatter_from, [(o, i, op) for o, i in zip(outputs, inputs, strict=True)])
        return _done(outputs)

    def shutdown(self):
        if self._comm:
            _F["ncclCommDestroy"](self._comm)
            self._comm = _P()


def _create(store, rank, size, timeout):
    return NcclPG(store, rank, size, timeout)


dist.Backend.register_backend("ncclpg", _create, devices=["cpu"])
