#!/usr/bin/env bash
# tests/t/41-accum-safety.sh — accumulation (NCCLSHIM_ACCUM_STEPS=K) under
# adversarial call sequences (tests/shim/accumtest.c), on 2 and 3 ranks over
# the host NCCL: foreign fp32 Sum all-reduces of a bucket's exact size at every
# position of a pass and several times over a run, a metric-only communicator,
# a short and a long pass of equal-sized buckets, two equal models on one
# communicator, a model re-wrapped on a new communicator mid-training,
# static_graph's two whole-model passes, and a one-bucket model rebuilt at
# its whole-model bucket's address (with and without DDP's rebuild
# broadcasts: issue 24). Each run checks that foreign calls
# return true sums, that every pass followed by an optimizer step is fully
# synced, that all ranks see the same outcome of every call, and (plain,
# find_unused, static_graph, foreign, metric-only) that accumulation happens
# or goes on. Buckets are 8 KiB: NCCLSHIM_MIN_BYTES=4096 makes them accumulable.
source "$(dirname "$0")/../lib.sh"

P="$TBIN/accumtest"
export NCCLSHIM_MIN_BYTES=4096 NCCLSHIM_COMPRESS=off NCCLSHIM_LOG=off

# acc NP K CASE [ARG]: one run; its output kept in $TMPD (tail shown on failure).
acc() {
  local np=$1 k=$2
  shift 2
  NCCLSHIM_ACCUM_STEPS=$k mpirun_shim "$np" "$P" "$@"
}

for NPK in 2:4 3:2; do
  IFS=: read -r np k <<<"$NPK"
  check "plain DDP, $np ranks, K=$k: passes before a step synced, later passes accumulated" acc $np $k plain
  check "plain DDP on a nonblocking communicator, $np ranks, K=$k: the same, agreements polled to completion" \
    acc $np $k nonblocking
  check "find_unused, $np ranks, K=$k: accumulated after learning, used-map untouched" acc $np $k unused
  check "static_graph (two whole-model passes), $np ranks, K=$k: accumulates" acc $np $k static
  check "foreign calls of a bucket's size at every position, $np ranks, K=$k: true sums, accumulation goes on" \
    acc $np $k foreign
  for pos in 0 1 2; do
    check "equal buckets, a pass without bucket $pos and one with an extra, $np ranks, K=$k: every step synced" \
      acc $np $k short $pos
  done
  check "two equal models on one communicator, $np ranks, K=$k: every step synced" acc $np $k twomodels
  check "one large bucket and a small one, a pass without the large one, $np ranks, K=$k: every step synced" \
    acc $np $k lostpass
  check "find_unused with a foreign call of the pass's size before the first pass, $np ranks, K=$k: every step synced" \
    acc $np $k unusedforeign
  check "first rebuilt pass without its first bucket, then a call as large as the pass, $np ranks, K=$k: every step synced" \
    acc $np $k rotated
  check "communicator created at micro-step 5, $np ranks, K=$k: every step synced" acc $np $k midcomm
  check "metric-only communicator, $np ranks, K=$k: metrics are true sums" acc $np $k metriconly
  check "one bucket rebuilt at the whole-model bucket's address, DDP's rebuild broadcasts seen, $np ranks, K=$k: learned, accumulated, every step synced" \
    acc $np $k inplace ddp
  for v in none late; do
    check "one bucket on one buffer from the first call, rebuild broadcasts $v, $np ranks, K=$k: never answered locally" \
      acc $np $k inplace $v
  done
done

# An agreement that cannot get its buffer on one rank (NCCLSHIM_FAULT_OOB=N on
# rank 0 only: exchange 1 is the configuration check, later ones are
# accumulation agreements): that rank sends poison, every rank sees it and
# stops accumulating at the same call; no mismatch, every step synced.
X="-x LD_PRELOAD=$SHIM${SAN_PRELOAD:+:$SAN_PRELOAD} -x LD_LIBRARY_PATH=$HOSTNCCL_DIR -x NCCLSHIM_ACCUM_STEPS=4 -x ACCUMTEST_FAULTED=1"
for n in 3 9; do
  check "agreement $n without a buffer on rank 0 only, 2 ranks, K=4: all ranks stop accumulating alike, every step synced" \
    mpirun_checked -np 1 $X -x NCCLSHIM_FAULT_OOB=$n "$P" plain : -np 1 $X "$P" plain
done

