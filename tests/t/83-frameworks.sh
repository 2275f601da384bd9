#!/usr/bin/env bash
# 83-frameworks.sh — what a newcomer's framework script meets under the
# launcher (issue 42), on CPU over the host NCCL:
#   - ncclshim-run --emulate at 3 ranks: every collective frameworks use on
#     the CPU (all-reduce in 3 dtypes and non-contiguous, reduce, broadcast,
#     all-gather, reduce-scatter, gather, scatter, all-to-all with equal and
#     uneven splits, the object collectives, barrier, send/recv) with exact
#     results, through groups asked for as "gloo" (the default group), as
#     "cpu:gloo,cuda:nccl", with no backend, and on 2 of the 3 ranks: each
#     served by ncclpg (tests/torch/collectives.py);
#   - an unmodified accelerate script (Accelerator(), prepare, backward;
#     tests/frameworks/accelerate_train.py) started as
#     `ncclshim-run --emulate -- accelerate launch --num_processes 2 ...`
#     (the launch translated): the summary shows compressed calls, both
#     replicas end with the same parameters, no "saw no NCCL all-reduce";
#   - the exit line of the in-worker hook (ncclshim.hook) where nothing
#     reached the shim: a gloo job without --emulate ("the job used gloo?"),
#     ranks that never made a process group ("no process group?"), and ranks
#     whose preload was lost (each rank says so);
#   - --emulate --nodes 2: two emulated nodes of one rank each, found by host
#     name (the summary says "2 nodes x 1 rank").
# The Trainer, Lightning and DeepSpeed runs are `make test-frameworks`
# (tests/frameworks/run.sh), which installs those frameworks.
# About 45 s on 2 cores (torch's start-up is most of it).
# Must not: compare timings, or install anything.
source "$(dirname "$0")/../lib.sh"
if [ ! -x "$TORCH_VENV/bin/python" ]; then
  not_ok "no torch in $TORCH_VENV (make deps installs it)"; exit 0
fi
RUN="$ROOT/env/ncclshim-run"
export PATH="$TORCH_VENV/bin:$PATH" OMP_NUM_THREADS=1
T=${TEST_TIMEOUT:-180}

# ---- every collective, exact, through every kind of CPU group --------------------
mkdir -p "$TMPD/colls"
(cd "$TMPD" && NCCLSHIM_LOG=off NCCLSHIM_BANNER=0 timeout "$T" "$RUN" --emulate --nproc 3 -- \
  "$ROOT/tests/torch/collectives.py" "$TMPD/colls") >"$TMPD/colls.log" 2>&1
rc=$?
cat "$TMPD"/colls/rank.* >"$TMPD/colls.out" 2>/dev/null
n_ok=$(grep -c '^ok - ' "$TMPD/colls.out"); n_bad=$(grep -c '^not ok - ' "$TMPD/colls.out")
# 27 checks a rank: the root (rank 2) skips send/recv and the 2 of the group
# it is not in, ranks 0 and 1 the 3 that only the root checks.
if [ $rc -eq 0 ] && [ "$n_bad" -eq 0 ] && [ "$n_ok" -eq 72 ]; then
  ok "--emulate, 3 ranks: every collective exact ($n_ok checks over the ranks)"
else
  not_ok "--emulate collectives: exit $rc, $n_ok ok, $n_bad not ok (want 72 ok)"
  grep -hE '^not ok|Error|error' "$TMPD/colls.out" "$TMPD/colls.log" | head -n 12 | sed 's/^/#   /'
fi
check "... every group (default gloo, new_group gloo, cpu:gloo,cuda:nccl, none) served by ncclpg on every rank" \
  test "$(grep -c '^backends default=ncclpg gloo=ncclpg map=ncclpg none=ncclpg$' "$TMPD/colls.out")" -eq 3

# ---- an unmodified accelerate script, started the accelerate way ----------------
(cd "$TMPD" && timeout "$T" "$RUN" --emulate -- accelerate launch --num_processes 2 --cpu \
  "$ROOT/tests/frameworks/accelerate_train.py" --steps 4) >"$TMPD/acc.log" 2>&1
check "ncclshim-run --emulate -- accelerate launch --num_processes 2 accelerate_train.py: exit 0" test $? -eq 0
check "... it trained 4 steps" test "$(grep -c '^step [0-9] loss' "$TMPD/acc.log")" -eq 4
compressed=$(awk '/ncclshim summary: communicator 0 /{s=1} s && $2 == "compressed" {print $3; exit}' "$TMPD/acc.log")
check "... the summary shows compressed calls (${compressed:-none})" test "${compressed:-0}" -gt 0
# (a rank's line may share a line with another rank's output: matched anywhere)
sums=$(grep -o 'rank [01] params [0-9a-f]\{64\}' "$TMPD/acc.log" | sort -u | awk '{print $4}' | sort | uniq -c)
check "... both replicas end bit-identical ($(echo $sums))" test "$(echo "$sums" | awk '$1 == 2' | wc -l)" -eq 1
check "... and nothing says the shim saw no all-reduce" bash -c "! grep -q 'saw no NCCL all-reduce' '$TMPD/acc.log'"

# ---- nothing reached the shim: one line says so ------------------------------------
cat >"$TMPD/gloo.py" <<'EOF'
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1000)
dist.all_reduce(t)
assert t[0].item() == dist.get_world_size()
dist.destroy_process_group()
EOF
(cd "$TMPD" && timeout "$T" "$RUN" -- torchrun --standalone --nproc_per_node 2 "$TMPD/gloo.py") >"$TMPD/gloo.log" 2>&1
check "a gloo job (no --emulate): exit 0" test $? -eq 0
check "... rank 0 alone says 'saw no NCCL all-reduce: the job used gloo?' at exit" \
  test "$(grep -c '^ncclshim: saw no NCCL all-reduce: the job used gloo? ' "$TMPD/gloo.log")" -eq 1
printf 'import torch\nprint("trained alone")\n' >"$TMPD/alone.py"
(cd "$TMPD" && timeout "$T" "$RUN" -- torchrun --standalone --nproc_per_node 2 "$TMPD/alone.py") >"$TMPD/alone.log" 2>&1
check_grep "ranks that never made a process group: 'the job used no process group?' (WORLD_SIZE=2)" \
  '^ncclshim: saw no NCCL all-reduce: the job used no process group\? \(WORLD_SIZE=2' "$TMPD/alone.log"
(cd "$TMPD" && timeout "$T" "$RUN" -- env -u LD_PRELOAD torchrun --standalone --nproc_per_node 2 "$TMPD/gloo.py") \
  >"$TMPD/nopre.log" 2>&1
# (counted with -o: two ranks writing one pipe can join their lines)
check "ranks whose LD_PRELOAD was lost: each says it ran its groups without the shim" \
  test "$(grep -oE 'ncclshim: rank [01] ran its process groups without the shim' "$TMPD/nopre.log" | sort -u | wc -l)" -eq 2

# ---- --emulate --nodes: emulated nodes found by host name -------------------------------
cat >"$TMPD/nodes.py" <<'EOF'
import socket, torch, torch.distributed as dist
dist.init_process_group("nccl")
t = torch.full((100000,), float(dist.get_rank() + 1))
dist.all_reduce(t)
print(f"rank {dist.get_rank()} host {socket.gethostname()} sum {t[0].item():g}", flush=True)
EOF
(cd "$TMPD" && timeout "$T" "$RUN" --emulate --nproc 1 --nodes 2 --link-gbps 10 -- "$TMPD/nodes.py") >"$TMPD/nodes.log" 2>&1
check "--emulate --nproc 1 --nodes 2: exit 0" test $? -eq 0
check "... rank 0 on emunode0, rank 1 on emunode1, both with the sum" \
  test "$(grep -oE 'rank 0 host emunode0 sum 3|rank 1 host emunode1 sum 3' "$TMPD/nodes.log" | sort -u | wc -l)" -eq 2
check_grep "... the shim sees 2 nodes" '# nodes: 2 nodes x 1 rank' "$TMPD/nodes.log"
