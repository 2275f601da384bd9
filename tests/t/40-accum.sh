#!/usr/bin/env bash
# tests/t/40-accum.sh — accumulation over K micro-steps (NCCLSHIM_ACCUM_STEPS):
# the state machine's unit test, then bench/ddp_step on W = 2, 3, 4 ranks over
# the host NCCL. A naive loop (every micro-step all-reduces its buckets) under
# the shim must end with exactly the parameters of the no_sync reference run
# without the shim: bit for bit for W = 2 and 4 (the gradients are k/64, so
# every sum and W*(x/W) is exact); for W = 3 within TOL3, because x*(1/3)*3 is
# not always x (observed max |diff| ~ 1e-8 on parameters of magnitude <= 2;
# TOL3 = 1e-6 leaves two orders of margin). Also: K = 1 is bit-identical to no
# shim, bucket-view and find_unused modes, a pass with fewer bytes (fallback
# to syncing every call), fp16 compression + K against a reference that
# quantizes the same way, the counters per optimizer step, and bad
# NCCLSHIM_ACCUM_STEPS values.
#
# The test model is small (48K floats, 4 buckets of 4480..17536 floats), so
# NCCLSHIM_MIN_BYTES=4096 keeps every bucket accumulable (the 4-byte metric
# all-reduce and the int32 used-map still are not).
source "$(dirname "$0")/../lib.sh"

DDP="$BIN/ddp_step"
P=49152
A=(--params 48K --first-cap 16K --cap 64K --warmup 2 --steps 2 --quiet)
TOL3=1e-6
export NCCLSHIM_MIN_BYTES=4096 NCCLSHIM_COMPRESS=off NCCLSHIM_LOG=off

# ---- the pure state machine and the policy (cmocka, TAP lines) ----
out=$(CMOCKA_MESSAGE_OUTPUT=TAP "$TBIN/test_accum" 2>&1); rc=$?
echo "$out" | sed -n 's/^\(not ok\|ok\) [0-9]* - /\1 - test_accum: /p'
[ $rc -eq 0 ] && ok "test_accum exits 0" || { not_ok "test_accum exits 0 (exit $rc)"; echo "$out" | sed 's/^/#   /' | tail -n 20; }

# ddp NAME host|shim W [VAR=value ...] -- ddp_step options
# Runs ddp_step; output kept in $TMPD/NAME.log, its tail printed on failure.
ddp() {
  local name=$1 how=$2 w=$3 vars=()
  shift 3
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  ( [ ${#vars[@]} -eq 0 ] || export "${vars[@]}"; "mpirun_$how" "$w" "$DDP" "${A[@]}" "$@" ) >"$TMPD/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || tail -n 20 "$TMPD/$name.log"
  return $rc
}
hash_of() { sed -n 's/^params_hash=\([0-9a-f]*\).*/\1/p' "$TMPD/$1.log"; }
field() { grep -h '^summary:' "$TMPD/$1.log" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
# against NAME: the comparison line of a run made with --against, as a comment.
note() { echo "# $1: $(grep -h '^against' "$TMPD/$1.log" | sed 's/^against [^:]*: //')"; }
tol_for() { [ "$1" -eq 3 ] && echo "$TOL3" || echo 0; }
exact_or_tol() { [ "$1" -eq 3 ] && echo "within $TOL3" || echo "bit-exact"; }

# refs W: the no-shim references for K = 1 (plain loop), 2 and 4 (no_sync).
refs() {
  ddp ref$1.1 host $1 -- --accum 1 --dump "$TMPD/ref$1.1.bin" &&
    ddp ref$1.2 host $1 -- --accum 2 --nosync --dump "$TMPD/ref$1.2.bin" &&
    ddp ref$1.4 host $1 -- --accum 4 --nosync --dump "$TMPD/ref$1.4.bin"
}

# ---- references (no shim) and the shim's naive runs, per W and K ----
for W in 2 3 4; do
  tol=$(tol_for $W)
  check "W=$W: references without the shim (K=1 plain; K=2, 4 no_sync)" refs $W
  check "W=$W K=1: shim (ACCUM_STEPS=1) bit-identical to no shim" \
    ddp shim$W.1 shim $W NCCLSHIM_ACCUM_STEPS=1 -- --accum 1 --against "$TMPD/ref$W.1.bin"
  for K in 2 4; do
    check "W=$W K=$K: shim naive loop equals no_sync reference ($(exact_or_tol $W))" \
      ddp shim$W.$K shim $W NCCLSHIM_ACCUM_STEPS=$K -- --accum $K --against "$TMPD/ref$W.$K.bin" --tol "$tol"
    [ $W -eq 3 ] && note shim$W.$K
  done
done

# ---- counters: only the buckets move them; K-1 of every K passes skipped ----
nb=$(sed -n 's/^# layout at micro-step [1-9][0-9]*: \([0-9]*\) bucket.*/\1/p' "$TMPD/shim4.4.log")
[ -n "$nb" ] || nb=0
check "W=4 K=4: 4 rebuilt buckets after the whole-model first pass" [ "$nb" -eq 4 ]
check_grep "W=4 K=4: the pass learned after the whole-model bucket and 3 passes of $nb rebuilt buckets" \
  "learned a backward pass of $nb bucket\\(s\\), $((P * 4)) bytes, .* after DDP's whole-model pass; .*pass 4 is next" "$TMPD/shim4.4.log"
ddp shim4sum shim 4 NCCLSHIM_ACCUM_STEPS=4 NCCLSHIM_LOG=summary -- --accum 4
check_grep "W=4 K=4: rank 0's summary confirms it: accumulation active, from which pass" \
  "# accumulation: learned a backward pass of $nb bucket\\(s\\).*pass 4 is next" "$TMPD/shim4sum.log"
# Reaching NCCL per step: one pass of buckets, 4 metrics, and the shim's own
# agreement after the synced pass (one tiny int64 all-reduce). No used-map:
# DDP all-reduces one only with find_unused_parameters=True.
check "W=4 K=4: per optimizer step $((4 * (nb + 1))) calls, $((3 * nb)) skipped, $((nb + 5)) reach NCCL" \
  [ "$(field shim4.4 calls)/$(field shim4.4 skipped)/$(field shim4.4 real_calls)" = "$((4 * (nb + 1)))/$((3 * nb))/$((nb + 5))" ]
check "W=4 K=4: wire bytes per step = one pass of fp32 buckets + 4 metrics" \
  [ "$(field shim4.4 wire_bytes)" = "$(( P * 4 + 4 * 4 ))" ]
check "W=2 K=1: nothing skipped" [ "$(field shim2.1 skipped)" = 0 ]

# ---- gradient_as_bucket_view and find_unused_parameters ----
for W in 2 3 4; do
  check "W=$W K=4 bucket view: shim equals no_sync reference ($(exact_or_tol $W))" \
    ddp view$W shim $W NCCLSHIM_ACCUM_STEPS=4 -- --accum 4 --view --against "$TMPD/ref$W.4.bin" --tol "$(tol_for $W)"
done
check "W=4 K=4 bucket view, no_sync reference without shim equals the copy-mode one (bit-exact)" \
  ddp refview4 host 4 -- --accum 4 --view --nosync --against "$TMPD/ref4.4.bin"
check "W=4 K=4 find_unused: shim equals no_sync reference (bit-exact)" \
  ddp fu4 shim 4 NCCLSHIM_ACCUM_STEPS=4 -- --accum 4 --find-unused --against "$TMPD/ref4.4.bin"
check_grep "W=4 K=4 find_unused: the pass learned after three passes of the same buckets and used-maps" \
  "learned a backward pass of 4 bucket\\(s\\), $((P * 4)) bytes, .*find_unused_parameters.*pass 3 is next" "$TMPD/fu4.log"
check "W=3 K=2 find_unused + bucket view: shim equals no_sync reference (within $TOL3)" \
  ddp fu3 shim 3 NCCLSHIM_ACCUM_STEPS=2 -- --accum 2 --find-unused --view --against "$TMPD/ref3.2.bin" --tol $TOL3

# ---- a pass with fewer bytes breaks the learned pattern: fallback, still exact ----
# The dropped micro-step is a non-final one inside the warm-up steps, so the
# measured steps come after the fallback.
for WKDS in 4:4:5:2 2:2:4:3; do
  IFS=: read -r W K D WU <<<"$WKDS"
  check "W=$W K=$K drop at micro-step $D: reference without shim" \
    ddp dropref$W host $W -- --accum $K --warmup $WU --nosync --drop-at $D --dump "$TMPD/dropref$W.bin"
  check "W=$W K=$K drop at micro-step $D: shim falls back and equals the reference (bit-exact)" \
    ddp drop$W shim $W NCCLSHIM_ACCUM_STEPS=$K -- --accum $K --warmup $WU --drop-at $D --against "$TMPD/dropref$W.bin"
  check_grep "W=$W K=$K drop: the shim says every call syncs from now on" "every call syncs from now on" "$TMPD/drop$W.log"
  check "W=$W K=$K drop: no call skipped after the fallback" [ "$(field drop$W skipped)" = 0 ]
done

# ---- fp16 compression + K against a reference that quantizes the same way ----
for W in 2 4; do
  check "W=$W K=4: quantizing fp16 reference (no shim) equals the exact one" \
    ddp qref$W host $W -- --accum 4 --nosync --quant fp16 --quant-min 4096 --dump "$TMPD/qref$W.bin" \
    --against "$TMPD/ref$W.4.bin"
  check "W=$W K=4: shim fp16 + K=4 equals the quantizing reference (bit-exact)" \
    ddp q$W shim $W NCCLSHIM_ACCUM_STEPS=4 NCCLSHIM_COMPRESS=fp16 -- --accum 4 --against "$TMPD/qref$W.bin"
  check "W=$W K=4 fp16: the synced pass's $nb buckets were compressed" [ "$(field q$W compressed)" = "$nb" ]
done

# ---- bad values: named in a message, ncclInvalidUsage, non-zero exit ----
for v in 0 -1 abc 99999999; do
  ddp bad$v shim 2 NCCLSHIM_ACCUM_STEPS=$v -- --accum 2 >/dev/null; rc=$?
  check "NCCLSHIM_ACCUM_STEPS=$v: ddp_step exits non-zero" [ $rc -ne 0 ]
  check_grep "NCCLSHIM_ACCUM_STEPS=$v: message names the variable" "NCCLSHIM_ACCUM_STEPS='?$v" "$TMPD/bad$v.log"
  check_grep "NCCLSHIM_ACCUM_STEPS=$v: the call fails with ncclInvalidUsage's string" \
    "ncclAllReduce failed: invalid usage" "$TMPD/bad$v.log"
done

# ---- rebuilt buckets that fall below MIN_BYTES (first pass bigger than later ones) ----
# At the default MIN_BYTES (64 KiB) the 4480-float bucket is not accumulable:
# later passes count fewer bytes than the whole-model first pass.
check "default MIN_BYTES, W=4 K=4: the small rebuilt bucket is excluded, P is learned, result bit-exact" \
  ddp small4 shim 4 NCCLSHIM_MIN_BYTES=65536 NCCLSHIM_ACCUM_STEPS=4 -- --accum 4 --against "$TMPD/ref4.4.bin"
check_grep "default MIN_BYTES: the pass is its accumulable part (the 2 buckets of >= 64 KiB)" \
  "learned a backward pass of 2 bucket\\(s\\), $(( (P - 4480 - 9728) * 4 )) bytes" "$TMPD/small4.log"
check "default MIN_BYTES: calls were skipped (the pattern was found)" [ "$(field small4 skipped)" -gt 0 ]
# Equal-sized accumulable buckets whose bytes line up with 1.5 passes: buffer
# identity tells the passes apart.
check "equal buckets (12K model, caps 4K/16K, MIN_BYTES=12288): reference" \
  ddp eqref host 4 -- --params 12K --first-cap 4K --cap 16K --accum 4 --nosync --dump "$TMPD/eqref.bin"
check "equal buckets: shim K=4 learns the true pass and equals the reference (bit-exact)" \
  ddp eq shim 4 NCCLSHIM_MIN_BYTES=12288 NCCLSHIM_ACCUM_STEPS=4 -- --params 12K --first-cap 4K --cap 16K --accum 4 \
  --against "$TMPD/eqref.bin"
check_grep "equal buckets: the pass = the two 4096-float buckets" "learned a backward pass of 2 bucket\\(s\\), 32768 bytes" "$TMPD/eq.log"
