"""ncclpg.py — a torch.distributed backend for CPU tensors that drives the NCCL C API.

A TEST AND EMULATION SUBSTRATE, like the host NCCL it runs on: ProcessGroupNCCL
needs CUDA tensors, so on a machine without a GPU this small Python process
group stands in for it (`ncclshim-run --emulate` serves every CPU process group
of a script with it: ncclshim.emulate). Its collectives are the NCCL calls
ProcessGroupNCCL makes, resolved from the process's global symbol scope
(ctypes.CDLL(None)) so that a preloaded libncclshim.so interposes them exactly
as it interposes libtorch_cuda.so's calls:

  all_reduce, barrier        ncclAllReduce in place (one per DDP bucket; a
                             barrier is a 1-element fp32 all-reduce)
  broadcast                  ncclBcast in place
  reduce                     ncclReduce in place
  all_gather(_into_tensor)   ncclAllGather
  reduce_scatter(_tensor)    ncclReduceScatter
  gather, scatter,           ncclSend/ncclRecv in one group (every rank's part,
  all_to_all(_single)        the caller's own included, crosses NCCL)
  send, recv                 ncclSend, ncclRecv
  *_coalesced, several       ncclGroupStart/End around the calls
  tensors in one call
  the object collectives     torch builds them on the above (CPU byte tensors)

The stream argument is NULL: the host NCCL runs every call (and every group at
its ncclGroupEnd) on the calling thread, so a call returns complete and its
Work is already done. Non-contiguous tensors are staged through contiguous
copies, written back after the call or group has ended.

Import this module BEFORE torch: it loads the host NCCL (HOSTNCCL_LIB, default
build/lib/hostnccl/libnccl.so.2) with RTLD_GLOBAL first, so the soname
libnccl.so.2 that libtorch_cuda.so needs binds to it and not to the wheel's
GPU NCCL. Then `dist.init_process_group("ncclpg")` (torchrun's environment);
rank 0 of each group makes the unique id and shares it through the group's
store, every rank calls ncclCommInitRank.

Must not: touch tensor data outside NCCL calls except to stage non-contiguous
tensors and to hand out what an NCCL call returned, answer any collective
locally, or call NCCL through a library handle (that would bypass LD_PRELOAD).
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
    "ncclReduce": [_VP, _VP, _SZ, _I, _I, _I, _P, _P],
    "ncclSend": [_VP, _SZ, _I, _I, _P, _P],
    "ncclRecv": [_VP, _SZ, _I, _I, _P, _P],
    "ncclGroupStart": [],
    "ncclGroupEnd": [],
    "ncclGetErrorString": [_I],
    "ncclGetLastError": [_P],
}
_MOVES_DATA = ("ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBcast", "ncclReduce", "ncclSend",
               "ncclRecv", "ncclGroupEnd")
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
    _F[_name] = _timed(_f) if _name in _MOVES_DATA else _f

# torch dtype -> ncclDataType_t (nccl.h's order)
_DTYPES = {torch.int8: 0, torch.uint8: 1, torch.bool: 1, torch.int32: 2, torch.uint32: 3, torch.int64: 4,
           torch.uint64: 5, torch.float16: 6, torch.float32: 7, torch.float64: 8, torch.bfloat16: 9,
           torch.float8_e4m3fn: 10, torch.float8_e5m2: 11}
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
        raise TypeError(f"ncclpg: tensors must be on the CPU (got {t.device}); under ncclshim-run --emulate the "
                        "script keeps its tensors on the CPU")
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


def _rows(t, splits, size):
    """t's flat contiguous buffer cut along dim 0 into size parts: equal parts
    when splits is empty, else splits[r] rows each (all_to_all_single's)."""
    flat = t.reshape(-1)
    if not splits:
        if t.numel() % size:
            raise ValueError(f"ncclpg: {t.numel()} elements do not split into {size} equal parts")
        n = t.numel() // size
        return [flat[r * n:(r + 1) * n] for r in range(size)]
    if len(splits) != size or sum(splits) != (t.shape[0] if t.dim() else 1):
        raise ValueError(f"ncclpg: split sizes {list(splits)} do not cut dim 0 ({tuple(t.shape)}) into {size} parts")
    row = t.numel() // max(t.shape[0], 1) if t.dim() else 1
    out, at = [], 0
    for k in splits:
        out.append(flat[at * row:(at + k) * row])
        at += k
    return out


class _Batch:
    """The NCCL calls of one torch collective: issued alone, or several in one
    ncclGroupStart/End. NCCL runs a group's operations at its end, so the
    batch holds every tensor a call names until then (a staged copy or a
    temporary would otherwise be freed under NCCL) and copies staged outputs
    back only after it."""

    def __init__(self, comm, size):
        self.comm, self.size, self.calls, self.back = comm, size, [], []

    def src(self, t):
        """t as NCCL reads it: t itself when contiguous, else a copy."""
        _dtype(t)
        return t if t.is_contiguous() else t.contiguous()

    def dst(self, t):
        """t as NCCL writes it: t itself when contiguous, else a copy written back after run()."""
        c = self.src(t)
        if c is not t:
            self.back.append((t, c))
        return c

    def _add(self, name, tensors, *args):
        self.calls.append((name, tensors, args))

    # one method per NCCL call, tensors already contiguous
    def allreduce(self, c, op):
        self._add("ncclAllReduce", (c,), c.data_ptr(), c.data_ptr(), c.numel(), _dtype(c), op, self.comm, None)

    def bcast(self, c, root):
        self._add("ncclBcast", (c,), c.data_ptr(), c.numel(), _dtype(c), root, self.comm, None)

    def reduce(self, c, op, root):
        self._add("ncclReduce", (c,), c.data_ptr(), c.data_ptr(), c.numel(), _dtype(c), op, root, self.comm, None)

    def allgather(self, out, inp):
        if out.numel() != inp.numel() * self.size or out.dtype != inp.dtype:
            raise ValueError("ncclpg: all-gather output must hold world_size inputs of the same dtype")
        self._add("ncclAllGather", (out, inp), inp.data_ptr(), out.data_ptr(), inp.numel(), _dtype(inp), self.comm,
                  None)

    def reduce_scatter(self, out, inp, op):
        if inp.numel() != out.numel() * self.size or out.dtype != inp.dtype:
            raise ValueError("ncclpg: reduce-scatter input must hold world_size outputs of the same dtype")
        self._add("ncclReduceScatter", (out, inp), inp.data_ptr(), out.data_ptr(), out.numel(), _dtype(out), op,
                  self.comm, None)

    def send(self, c, peer):
        self._add("ncclSend", (c,), c.data_ptr(), c.numel(), _dtype(c), peer, self.comm, None)

    def recv(self, c, peer):
        self._add("ncclRecv", (c,), c.data_ptr(), c.numel(), _dtype(c), peer, self.comm, None)

    def run(self, group=None):
        """Issue the calls (in one group when there are several, or when group
        is True), then write the staged outputs back."""
        grouped = len(self.calls) > 1 if group is None else group
        if grouped:
            _check(_F["ncclGroupStart"](), "ncclGroupStart")
        try:
            for name, _tensors, args in self.calls:
                _check(_F[name](*args), name, self.comm)
        finally:
            if grouped:
                _check(_F["ncclGroupEnd"](), "ncclGroupEnd", self.comm)
        for t, c in self.back:
            t.copy_(c)


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

    def _batch(self):
        return _Batch(self._comm, self._size)

    # ---- reductions ----
    def allreduce(self, tensors, opts=None):
        b, op = self._batch(), _op(opts)
        for t in tensors:
            b.allreduce(b.dst(t), op)
        b.run()
        return _done(tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        b, op = self._batch(), _op(opts)
        for t in tensors:
            b.allreduce(b.dst(t), op)
        b.run(group=True)
        return _done(tensors)

    def reduce(self, tensors, opts=None):
        b, op = self._batch(), _op(opts)
        for t in tensors:
            b.reduce(b.dst(t), op, opts.rootRank)
        b.run()
        return _done(tensors)

    def barrier(self, opts=None):
        b = self._batch()
        b.allreduce(torch.zeros(1), _OPS[dist.ReduceOp.SUM])
        b.run()
        return _done()

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        # Called on the group itself (Lightning's infinite barrier on a side
        # group asked for as gloo). NCCL has no monitored barrier (it cannot
        # name a rank that does not arrive): a plain barrier.
        return self.barrier()

    def broadcast(self, tensors, opts=None):
        # In place, as ProcessGroupNCCL's broadcast: ncclBcast (its out-of-place
        # _broadcast_oop calls ncclBroadcast, which DDP does not use).
        b = self._batch()
        for t in tensors:
            b.bcast(b.dst(t), opts.rootRank)
        b.run()
        return _done(tensors)

    # ---- gathers and scatters over the collectives ----
    def _allgather_base(self, out, inp, opts=None):
        b = self._batch()
        b.allgather(b.dst(out), b.src(inp))
        b.run()
        return _done(out)

    all_gather_single = _allgather_base

    def allgather(self, outputs, inputs, opts=None):
        return self.allgather_coalesced(outputs, inputs, opts)

    def allgather_coalesced(self, outputs, inputs, opts=None):
        # One all-gather per input into a flat buffer, handed out per rank.
        b, flats = self._batch(), []
        for inp in inputs:
            flat = torch.empty(inp.numel() * self._size, dtype=inp.dtype)
            b.allgather(flat, b.src(inp))
            flats.append(flat)
        b.run()
        for outs, inp, flat in zip(outputs, inputs, flats, strict=True):
            for r, o in enumerate(outs):
                o.copy_(flat[r * inp.numel():(r + 1) * inp.numel()].view_as(o))
        return _done(outputs)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        b = self._batch()
        for o, i in zip(outputs, inputs, strict=True):
            b.allgather(b.dst(o), b.src(i))
        b.run()
        return _done(outputs)

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    def _reduce_scatter_base(self, out, inp, opts=None):
        b = self._batch()
        b.reduce_scatter(b.dst(out), b.src(inp), _op(opts))
        b.run()
        return _done(out)

    reduce_scatter_single = _reduce_scatter_base

    def reduce_scatter(self, outputs, inputs, opts=None):
        b, op = self._batch(), _op(opts)
        for out, ins in zip(outputs, inputs, strict=True):
            b.reduce_scatter(b.dst(out), torch.cat([t.reshape(-1) for t in ins]), op)
        b.run()
        return _done(outputs)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        b, op = self._batch(), _op(opts)
        for o, i in zip(outputs, inputs, strict=True):
            b.reduce_scatter(b.dst(o), b.src(i), op)
        b.run()
        return _done(outputs)

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    # ---- point to point: one group of sends and receives per collective ----
    def _gather(self, dests, inp, root, result):
        """One group: the root receives every rank's inp, its own included,
        into dests(batch) (one tensor per rank); the others send theirs."""
        b = self._batch()
        if self._rank == root:
            for r, o in enumerate(dests(b)):
                b.recv(o, r)
        b.send(b.src(inp), root)
        b.run()
        return _done(result)

    def gather(self, outputs, inputs, opts=None):
        (inp,) = inputs
        return self._gather(lambda b: [b.dst(o) for o in outputs[0]], inp, opts.rootRank, outputs)

    def gather_single(self, output, inp, opts=None):
        return self._gather(lambda b: _rows(b.dst(output), (), self._size), inp, opts.rootRank, output)

    gather_into_tensor = gather_single

    def scatter(self, outputs, inputs, opts=None):
        (out,) = outputs
        b, root = self._batch(), opts.rootRank
        if self._rank == root:
            (ins,) = inputs
            for r, t in enumerate(ins):
                b.send(b.src(t), r)
        b.recv(b.dst(out), root)
        b.run()
        return _done(outputs)

    def alltoall(self, outputs, inputs, opts=None):
        b = self._batch()
        for r, (o, i) in enumerate(zip(outputs, inputs, strict=True)):
            b.send(b.src(i), r)
            b.recv(b.dst(o), r)
        b.run()
        return _done(outputs)

    def alltoall_base(self, output, inp, output_split_sizes, input_split_sizes, opts=None):
        b = self._batch()
        outs = _rows(b.dst(output), output_split_sizes, self._size)
        ins = _rows(b.src(inp), input_split_sizes, self._size)
        for r in range(self._size):
            b.send(ins[r], r)
            b.recv(outs[r], r)
        b.run()
        return _done(output)

    all_to_all_single = alltoall_base

    def send(self, tensors, dst, tag=0):
        b = self._batch()
        for t in tensors:
            b.send(b.src(t), dst)
        b.run()
        return _done(tensors)

    def recv(self, tensors, src, tag=0):
        b = self._batch()
        for t in tensors:
            b.recv(b.dst(t), src)
        b.run()
        return _done(tensors)

    def recv_anysource(self, tensors, tag=0):
        raise RuntimeError("ncclpg: a receive from any source has no NCCL call (ProcessGroupNCCL lacks it too): "
                           "name the source rank")

    def shutdown(self):
        if self._comm:
            _F["ncclCommDestroy"](self._comm)
            self._comm = _P()


def _create(store, rank, size, timeout):
    return NcclPG(store, rank, size, timeout)


dist.Backend.register_backend("ncclpg", _create, devices=["cpu"])
