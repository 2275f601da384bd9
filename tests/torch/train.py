"""train.py — real PyTorch training on CPU over the NCCL API, launched by torchrun.

    torchrun --nproc_per_node=4 tests/torch/train.py --out run.json [options]

The job the tests and the demo run (one program for both): DDP (or FSDP2 with
--fsdp) over the ncclpg backend (env/ncclshim/ncclpg.py: a CPU test substrate
whose collectives are NCCL calls), so a preloaded libncclshim.so sees what it
sees under ProcessGroupNCCL. Each optimizer step runs --micro backward passes
("naive" accumulation: every pass all-reduces, unless the shim skips it),
or with --accum nosync the first micro-1 passes under model.no_sync(), or
with --accum learning the reference for the shim's NCCLSHIM_ACCUM_STEPS=K
(a DDP comm hook: every pass of the first --learn passes and every bucket
below --min-bytes all-reduced each pass, the other buckets only on the last
pass of every K, answered locally otherwise — no_sync() but for those).
Inputs are drawn from a generator seeded by (seed, rank, micro-step), so runs
differ only in how gradients travel. Several --case runs go one after the
other, or with --interleave one backward pass of each in turn, so that every
communicator starts with the job (the shim treats a communicator whose first
bucket arrives mid-training as of unknown phase and syncs it).

Writes --out (rank 0): per optimizer step the loss (rank 0's, mean over its
micro-steps), wall time, time inside NCCL calls, bytes the NCCL all-reduces
moved (count x element size as the host NCCL counts them: compressed calls
count their wire type, skipped calls nothing); the SHA-256 of the final
parameters and whether every rank holds the same bits (compared through the
store, no collective). --save writes the parameters (torch.save).
Under "ranks", per rank and step, what the step was built to have, for the
diagnosis runs (tests/torch/diag.py): step_s, comm_s, input_s (waiting for
the next batch: with --input-sleep a DataLoader, --loader-workers workers,
whose dataset sleeps that long per batch), slow_s (extra busy computing of
--slow-rank, --slow-s per pass), link_s (the emulated link's minimum time
for the step's all-reduces, from HOSTNCCL_LINK_GBPS and the wire bytes) and
cpu_s (this process's CPU time) and runq_s (the training thread's time runnable
but waiting for a CPU: on a loaded machine compute takes cpu_s + runq_s),
comm_cpu_s (its CPU time inside NCCL calls).

Must not: issue any collective that depends on data or timing (the metric
all-reduce of --metric-every happens on fixed steps), or read the shim's state.
"""
import argparse
import contextlib
import ctypes
import hashlib
import json
import os
import shlex
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "env"))
from ncclshim import ncclpg  # noqa: E402  (before torch: binds libnccl.so.2 to the host NCCL)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--save")
p.add_argument("--model", choices=["mlp", "transformer"], default="mlp")
p.add_argument("--width", type=int, default=128)
p.add_argument("--layers", type=int, default=3)
p.add_argument("--vocab", type=int, default=512)
p.add_argument("--seq", type=int, default=32)
p.add_argument("--batch", type=int, default=8)
p.add_argument("--steps", type=int, default=4)
p.add_argument("--micro", type=int, default=1, help="backward passes per optimizer step")
p.add_argument("--short-every", type=int, default=0, help="every N-th optimizer step has --short passes instead")
p.add_argument("--short", type=int, default=1)
p.add_argument("--nudge", type=int, default=-1,
               help="after this optimizer step rank 1 adds 1e-3 to a parameter (a planted divergence)")
p.add_argument("--accum", choices=["naive", "nosync", "learning"], default="naive")
p.add_argument("--learn", type=int, default=4, help="--accum learning: passes synced while the shim learns")
p.add_argument("--min-bytes", type=int, default=65536, help="--accum learning: NCCLSHIM_MIN_BYTES")
p.add_argument("--opt", choices=["sgd", "adam"], default="sgd")
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--momentum", type=float, default=0.9, help="SGD's momentum")
p.add_argument("--bucket-mb", type=float, default=25)
p.add_argument("--find-unused", action="store_true")
p.add_argument("--bucket-view", action="store_true")
p.add_argument("--static-graph", action="store_true")
p.add_argument("--fsdp", action="store_true")
p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
               help="bf16: DDP on the model cast to bf16 (its buckets are bf16), or FSDP2 with "
                    "MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16): 16-bit all-reduces and "
                    "reduce-scatters (issue 47)")
p.add_argument("--metric-every", type=int, default=0, help="all-reduce a validation metric every N steps")
p.add_argument("--seed", type=int, default=1234)
# Bottlenecks built in, for the diagnosis runs (tests/torch/diag.py):
p.add_argument("--input-sleep", type=float, default=0.0,
               help="batches come from a torch DataLoader whose dataset sleeps this long (s) per batch")
p.add_argument("--loader-workers", type=int, default=-1,
               help="that DataLoader's num_workers (default 0 with --input-sleep; -1 without: no DataLoader)")
p.add_argument("--slow-rank", type=int, default=-1, help="this rank computes --slow-s longer per backward pass")
p.add_argument("--slow-s", type=float, default=0.0, help="seconds of extra busy computing on --slow-rank")
p.add_argument("--slow-alternate", action="store_true",
               help="the slow rank takes turns: rank (step %% world size) computes --slow-s longer (imbalance)")
p.add_argument("--batchnorm", action="store_true",
               help="a BatchNorm1d after the first layer: DDP broadcasts its buffers at every forward")
p.add_argument("--cpu-hogs", type=int, default=0,
               help="pin this rank to one CPU and run this many spinning processes there for the run "
                    "(augmentation workers competing with the training thread: CPU starvation)")
p.add_argument("--case", action="append", default=[],
               help='"NAME [OPTIONS]": one training run with these options on top of the others, '
                    "on a communicator of its own (repeatable; default: one run named 'run')")
p.add_argument("--interleave", action="store_true",
               help="run the cases' backward passes in turn instead of one case after the other "
                    "(their times then include the others')")
top = p.parse_args()
base = []
it = iter(sys.argv[1:])
for arg in it:  # the command line without its --case entries
    if arg == "--case":
        next(it)
    elif not arg.startswith("--case="):
        base.append(arg)

torch.set_num_threads(int(os.environ.get("TRAIN_THREADS", "1")))
dist.init_process_group("ncclpg")
rank, W = dist.get_rank(), dist.get_world_size()


class Block(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, max(1, d // 64), batch_first=True)
        self.ff = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.ff(self.ln2(x))


class LM(torch.nn.Module):
    """A small causal transformer language model."""

    def __init__(self, vocab, d, layers, seq):
        super().__init__()
        self.emb, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Parameter(torch.zeros(seq, d))
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(layers))
        self.head = torch.nn.Sequential(torch.nn.LayerNorm(d), torch.nn.Linear(d, vocab))
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1), persistent=False)

    def forward(self, x):
        h = self.emb(x) + self.pos
        for b in self.blocks:
            h = b(h, self.mask)
        return self.head(h)


class MLP(torch.nn.Module):
    """Layers of different sizes (buckets above and below MIN_BYTES) and, for
    find_unused_parameters, a head that no pass uses."""

    def __init__(self, d, layers, unused, bn=False):
        super().__init__()
        dims = [32] + [d * (1 + i % 2) for i in range(layers)]
        mods = [m for i in range(layers) for m in (torch.nn.Linear(dims[i], dims[i + 1]), torch.nn.Tanh())]
        if bn:  # running statistics: buffers DDP broadcasts from rank 0 at the start of every forward
            mods.insert(1, torch.nn.BatchNorm1d(dims[1]))
        self.body = torch.nn.Sequential(*mods)
        self.out = torch.nn.Linear(dims[-1], 10)
        self.unused = torch.nn.Linear(4, 4) if unused else None

    def forward(self, x):
        return self.out(self.body(x))


_G = ctypes.CDLL(None)
_counters = getattr(_G, "hostnccl_get_type_counters", None)


class _ShimStats(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("calls", "passthrough", "compressed", "skipped", "fused",
                                               "real_calls", "logical_bytes", "wire_bytes", "overflow",
                                               "underflow")] + [("wire", ctypes.c_char * 8), ("enabled", ctypes.c_int),
                                                                ("twophase", ctypes.c_uint64)]


_shim_stats = getattr(_G, "ncclshim_get_stats", None)


def shim_compressed():
    """Calls the preloaded shim compressed so far (None without it)."""
    if _shim_stats:
        st = _ShimStats()
        if _shim_stats(ctypes.byref(st)) == 0 and st.enabled:
            return st.compressed
    return None


def wire_bytes():
    """Bytes the collectives reduced in their element type so far: with the shim,
    its own count (wire type for compressed calls, two-phase sends included,
    0 for skipped ones, the caller's type for the rest); without it, the
    all-reduces that reached the host NCCL, all types."""
    if _shim_stats:
        st = _ShimStats()
        if _shim_stats(ctypes.byref(st)) == 0 and st.enabled:
            return st.wire_bytes
    return host_counts()[1]


def host_counts():
    """(all-reduce calls, their bytes) the host NCCL accepted in this process so far, all types."""
    tot = [0, 0]
    for t in range(12):
        calls, byts = ctypes.c_uint64(), ctypes.c_uint64()
        if _counters and _counters(t, ctypes.byref(calls), ctypes.byref(byts)) == 0:
            tot[0] += calls.value
            tot[1] += byts.value
    return tot


def batch(a, step, k):
    g = torch.Generator().manual_seed(a.seed * 1000003 + rank * 7919 + step * 101 + k)
    if a.model == "transformer":
        x = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g)
        x[:, 1::2] = (x[:, 0:-1:2] * 3 + 1) % a.vocab  # learnable: odd tokens follow even ones
        return x[:, :-1], x[:, 1:]
    x = torch.randn(a.batch, 32, generator=g)
    return x, (x[:, :10].sum(1) * 3).long().clamp(-4, 5) + 4


class SleepyBatches(torch.utils.data.Dataset):
    """The batches of batch(), each after --input-sleep seconds of sleep: a
    data pipeline of known cost (in the loader's workers with --loader-workers)."""

    def __init__(self, a):
        self.a = a

    def __len__(self):
        return self.a.steps * self.a.micro

    def __getitem__(self, i):
        time.sleep(self.a.input_sleep)
        return batch(self.a, *divmod(i, self.a.micro))


def batches(a):
    """(step, k) -> batch: from batch() directly, or through the DataLoader."""
    workers = a.loader_workers if a.loader_workers >= 0 else (0 if a.input_sleep > 0 else -1)
    if workers < 0:
        for step in range(a.steps):
            for k in range(a.micro):
                yield batch(a, step, k)
        return
    extra = {"prefetch_factor": 2} if workers else {}
    yield from torch.utils.data.DataLoader(SleepyBatches(a), batch_size=None, shuffle=False, num_workers=workers,
                                           **extra)


def busy(seconds):
    """Compute (spin on the CPU) for this many seconds of wall time."""
    end = time.perf_counter() + seconds
    x = 1.0
    while time.perf_counter() < end:
        for _ in range(200):
            x = x * 1.0000001 + 1e-9
    return x


def link_seconds(nbytes, ncalls):
    """What the host NCCL's emulated link (HOSTNCCL_LINK_GBPS, _LATENCY_US)
    makes ring all-reduces of nbytes in all (ncalls calls) take at least on W
    ranks: 2(W-1) steps of latency + bytes/W/rate each. 0 on an unlimited link."""
    gbps = float(os.environ.get("HOSTNCCL_LINK_GBPS") or 0)
    lat = float(os.environ.get("HOSTNCCL_LINK_LATENCY_US") or 0) * 1e-6
    if W < 2:
        return 0.0
    return 2 * (W - 1) * (ncalls * lat + (nbytes / W * 8 / (gbps * 1e9) if gbps > 0 else 0.0))


def runq_seconds():
    """Time the calling thread (the training loop's, which issues every NCCL
    call: the host NCCL runs them on it) spent runnable but waiting for a CPU
    (/proc/thread-self/schedstat, second field; 0 where it cannot be read).
    The shim reads the same file on the thread that issues the collective;
    summing every thread of the process counted PyTorch's and the host NCCL's
    other threads too (0.765 against the shim's 0.587 was seen)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) * 1e-9
    except (OSError, IndexError, ValueError):
        return 0.0


def loss_of(out, y):
    return torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def build(a, pg):
    net = (LM(a.vocab, a.width, a.layers, a.seq) if a.model == "transformer"
           else MLP(a.width, a.layers, a.find_unused, a.batchnorm))
    if a.fsdp:
        from torch.distributed.device_mesh import DeviceMesh
        from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
        mesh = DeviceMesh.from_group(pg, "cpu")
        mp = ({"mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)}
              if a.dtype == "bf16" else {})
        for m in (net.blocks if a.model == "transformer" else net.body):
            fully_shard(m, mesh=mesh, **mp)
        return net, fully_shard(net, mesh=mesh, **mp)
    if a.dtype == "bf16":
        net = net.to(torch.bfloat16)
    return net, DDP(net, bucket_cap_mb=a.bucket_mb, find_unused_parameters=a.find_unused,
                    gradient_as_bucket_view=a.bucket_view, static_graph=a.static_graph, process_group=pg)


def add_learning_hook(a, model, passes):
    def learning_hook(state, bucket):
        """The shim's accumulation as a comm hook (see the header). Without a
        hook DDP divides by W before the all-reduce; a hook divides itself."""
        buf = bucket.buffer()
        p_ = passes[0]
        sync = (p_ < a.learn or (p_ + 1) % a.micro == 0 or buf.dtype != torch.float32
                or buf.numel() * buf.element_size() < a.min_bytes)
        if not sync:  # what the skipped all-reduce returns: W * (x / W) == x for W = 2, 4
            fut = torch.futures.Future()
            fut.set_result(buf)
            return fut
        buf.div_(W)
        return dist.all_reduce(buf, group=state, async_op=True).get_future().then(lambda f: f.value()[0])
    model.register_comm_hook(model.process_group, learning_hook)


@contextlib.contextmanager
def cpu_hogs(n):
    """n processes spinning on the one CPU this rank is pinned to, for the
    block (the rank's previous CPU set comes back afterwards)."""
    if n <= 0:
        yield
        return
    import subprocess
    before = os.sched_getaffinity(0)
    cpus = sorted(before)
    os.sched_setaffinity(0, {cpus[rank % len(cpus)]})  # inherited by the hogs
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for h in hogs:
            h.kill()
        for h in hogs:
            h.wait()
        os.sched_setaffinity(0, before)


def train(a, name):
    """One run on a communicator of its own, as a generator that yields after
    every backward pass; returns rank 0's record (or None)."""
    with cpu_hogs(a.cpu_hogs):
        return (yield from train_body(a, name))


def train_body(a, name):
    pg = dist.new_group()
    torch.manual_seed(a.seed)
    net, model = build(a, pg)
    passes = [0]  # backward passes so far (the hook's clock)
    if a.accum == "learning":
        add_learning_hook(a, model, passes)
    opt = (torch.optim.Adam(model.parameters(), lr=a.lr * 0.02) if a.opt == "adam"
           else torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum))
    rec = {"loss": [], "step_s": [], "comm_s": [], "wire_bytes": [],
           "nparams": sum(q.numel() for q in net.parameters()), "world": W}
    # What each rank's steps were built to have (all ranks, gathered through the store):
    # time waiting for the next batch, extra computing (--slow-rank), the emulated link's
    # time for the step's all-reduces, CPU time of this process.
    mine = {"step_s": [], "comm_s": [], "input_s": [], "slow_s": [], "link_s": [], "cpu_s": [], "runq_s": [], "comm_cpu_s": [],
            "start_s": []}  # start_s: time.perf_counter() at the step's start (CLOCK_MONOTONIC: one clock for the host's ranks)
    data = batches(a)
    comp0 = shim_compressed()
    for step in range(a.steps):
        t0, c0, b0 = time.perf_counter(), ncclpg.comm_seconds(), wire_bytes()
        mine["start_s"].append(t0)
        k0, n0, p0, q0 = ncclpg.comm_cpu_seconds(), host_counts()[0], time.process_time(), runq_seconds()
        tin = tslow = 0.0
        tot = 0.0
        micro = a.short if a.short_every and (step + 1) % a.short_every == 0 else a.micro
        for k in range(micro):
            ti = time.perf_counter()
            x, y = next(data)
            if a.dtype == "bf16" and not a.fsdp and x.is_floating_point():
                x = x.to(torch.bfloat16)
            tin += time.perf_counter() - ti
            slow = step % W if a.slow_alternate else a.slow_rank
            if rank == slow and a.slow_s > 0:
                ti = time.perf_counter()
                busy(a.slow_s)
                tslow += time.perf_counter() - ti
            ctx = model.no_sync() if a.accum == "nosync" and k < micro - 1 else contextlib.nullcontext()
            with ctx:
                loss = loss_of(model(x), y)
                (loss / micro).backward()
            passes[0] += 1
            tot += loss.item()
            yield
        opt.step()
        opt.zero_grad()
        if step == a.nudge and rank == 1:
            with torch.no_grad():
                next(net.parameters()).view(-1)[0] += 1e-3
        if a.metric_every and (step + 1) % a.metric_every == 0:  # a foreign fp32 all-reduce
            with torch.no_grad():
                x, y = batch(a, 10**6 + step, 0)
                m = torch.tensor([loss_of(model(x), y).item(), 1.0])
            dist.all_reduce(m, group=pg)
            rec.setdefault("metric", []).append(m[0].item() / m[1].item())
        rec["step_s"].append(time.perf_counter() - t0)
        rec["comm_s"].append(ncclpg.comm_seconds() - c0)
        rec["wire_bytes"].append(wire_bytes() - b0)
        rec["loss"].append(tot / micro)
        for key, v in (("step_s", rec["step_s"][-1]), ("comm_s", rec["comm_s"][-1]), ("input_s", tin),
                       ("slow_s", tslow), ("link_s", link_seconds(rec["wire_bytes"][-1], host_counts()[0] - n0)),
                       ("cpu_s", time.process_time() - p0), ("runq_s", runq_seconds() - q0),
                       ("comm_cpu_s", ncclpg.comm_cpu_seconds() - k0)):
            mine[key].append(v)
    with torch.no_grad():
        flat = torch.cat([(q.full_tensor() if hasattr(q, "full_tensor") else q.detach()).reshape(-1)
                          for q in net.parameters()])
    digest = hashlib.sha256(flat.float().numpy().tobytes()).hexdigest()
    store = dist.distributed_c10d._get_default_store()
    store.set(f"train_digest_{name}_{rank}", digest)
    store.set(f"train_steps_{name}_{rank}", json.dumps(mine))
    if a.save:
        torch.save(flat, f"{a.save}.{name}.pt") if rank == 0 else None
    if rank != 0:
        return None
    rec["digest"] = digest
    rec["compressed"] = None if comp0 is None else shim_compressed() - comp0
    hooked = sys.modules.get("ncclshim.steps")  # the package's step hook, when it was installed
    rec["replica_check"] = list(hooked.report()) if hooked else None
    rec["replicas_equal"] = all(store.get(f"train_digest_{name}_{r}").decode() == digest for r in range(W))
    rec["ranks"] = [json.loads(store.get(f"train_steps_{name}_{r}")) for r in range(W)]
    return rec


def finish(gen):
    """Run gen to its end; its record."""
    try:
        while True:
            next(gen)
    except StopIteration as done:
        return done.value


records, gens = {}, {}
for spec in top.case or ["run"]:
    name, *opts = shlex.split(spec)
    gens[name] = train(p.parse_args(base + opts), name)
    if not top.interleave:
        records[name] = finish(gens.pop(name))
# --interleave: one backward pass of each case in turn (the same order on
# every rank), so that every case's communicator starts at the job's first pass.
while gens:
    for name in list(gens):
        try:
            next(gens[name])
        except StopIteration as done:
            records[name] = done.value
            del gens[name]
if rank == 0:
    with open(top.out, "w") as f:
        json.dump(records, f)
dist.barrier()
dist.destroy_process_group()
