#!/usr/bin/env bash
# 30-allreduce_perf.sh — bench/allreduce_perf against the host NCCL: every
# datatype and op on 1-4 ranks with zero #wrong, nccl-tests' exact layout,
# -m aggregation, -J JSON, random inputs, and runs that must fail (a
# deliberately corrupted result, bad flags).
#
# Cases are one `ap` run plus checks on its output; to add shim cases, run
# `ap NAME mpirun_shim NP ARGS...` and use the same checks (with the 4 extra
# columns: ap_rows NAME ROWS 17).
# Must not: assert timings.
source "$(dirname "$0")/../lib.sh"

AP="$BIN/allreduce_perf"
HOSTNCCL_DIR=${AP_HOSTNCCL_DIR:-$HOSTNCCL_DIR} # a stand-in libnccl.so.2, for debugging this script
export ALLREDUCE_PERF_MEM=host                 # the host NCCL reduces host memory, GPU or not
export TEST_TIMEOUT=${TEST_TIMEOUT:-120}

# The column headers, byte for byte nccl-tests' all_reduce_perf.
HDR_NAMES='#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong'
HDR_UNITS='#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       '
ROW_LEN=116 # characters in a row of the standard columns

# ap NAME WRAPPER NP ARGS...: run allreduce_perf; stdout in $TMPD/NAME.out,
# stderr in NAME.err, exit status in NAME.rc.
ap() {
  local name=$1 wrap=$2 np=$3; shift 3
  "$wrap" "$np" "$AP" "$@" >"$TMPD/$name.out" 2>"$TMPD/$name.err"
  echo $? >"$TMPD/$name.rc"
}
out() { echo "$TMPD/$1.out"; }
rc() { cat "$TMPD/$1.rc"; }
show() { { sed 's/^/#   /' "$TMPD/$1.out" | tail -n 12; sed 's/^/#   err: /' "$TMPD/$1.err" | tail -n 8; } }
result() { if [ "$2" = 0 ]; then ok "$1"; else not_ok "$1"; show "$3"; fi; }

# ap_clean NAME: exit 0 and the footer says no wrong values.
ap_clean() {
  [ "$(rc "$1")" = 0 ] && grep -Fxq '# Out of bounds values : 0 OK' "$(out "$1")"
  result "$1: exit 0, footer 0 OK" $? "$1"
}

# ap_rows NAME ROWS NCOLS: exactly ROWS data rows, each with NCOLS fields, the
# standard part ROW_LEN wide, root -1, both #wrong 0, and size = count * wordsize.
ap_rows() {
  awk -v rows="$2" -v ncols="$3" -v len="$ROW_LEN" '
    BEGIN { split("int8 1 uint8 1 int32 4 uint32 4 int64 8 uint64 8 half 2 float 4 double 8 bfloat16 2", a, " ")
            for (i = 1; i < 20; i += 2) ws[a[i]] = a[i + 1] }
    /^#/ || NF == 0 { next }
    { n++
      if (NF != ncols) { print "# row " n ": " NF " fields"; bad = 1 }
      if (split(substr($0, 1, len), std, " ") != 13 || (ncols == 13 && length($0) != len)) { print "# row " n ": width " length($0); bad = 1 }
      if ($5 != -1 || $9 != "0" || $13 != "0") { print "# row " n ": root/#wrong: " $0; bad = 1 }
      if ($1 != $2 * ws[$3]) { print "# row " n ": size != count * wordsize: " $0; bad = 1 } }
    END { if (n != rows) { print "# " n " rows, expected " rows; bad = 1 } exit bad }' "$(out "$1")" >"$TMPD/rows.log"
  local st=$?
  result "$1: $2 rows of $3 columns, #wrong 0" $st "$1"
  [ $st = 0 ] || sed 's/^/#   /' "$TMPD/rows.log" | head -n 5
}

if [ ! -x "$AP" ] || [ ! -e "$HOSTNCCL_DIR/libnccl.so.2" ]; then
  not_ok "allreduce_perf and the host NCCL are built ($AP, $HOSTNCCL_DIR/libnccl.so.2)"
  exit 0
fi

# Host-side logic: codec, exactness in any order and through fp16/bf16, bounds, parser.
CMOCKA_MESSAGE_OUTPUT=TAP "$TBIN/perf_selftest" 2>&1 || not_ok "perf_selftest exited $?"

# Every datatype and op. Sizes 8 32 128 512 2048: 5 rows per (type, op).
ap all2 mpirun_host 2 -b 8 -e 2K -f 4 -n 2 -w 1 -d all -o all
ap_clean all2
ap_rows all2 250 13
grep -Fxq "$HDR_NAMES" "$(out all2)" && grep -Fxq "$HDR_UNITS" "$(out all2)"
result "column headers are nccl-tests' byte for byte" $? all2
grep -Eq '^# nThread 1 nGpus 1 minBytes 8 maxBytes 2048 step: 4\(factor\) warmup iters: 1 iters: 2 agg iters: 1 validation: 1 graph: 0$' "$(out all2)" &&
  [ "$(grep -c '^#  Rank  [01] Group  0 Pid ' "$(out all2)")" = 2 ] &&
  grep -Eq '^# Avg bus bandwidth    : [0-9.e+-]+ $' "$(out all2)" && grep -Fxq '# ncclshim: not loaded' "$(out all2)"
result "all2: header, device lines and footer in nccl-tests' format" $? all2

ap all4 mpirun_host 4 -b 4 -e 256 -f 8 -n 1 -w 1 -d all -o all
ap_clean all4
ap_rows all4 150 13

# 3 ranks: float avg is checked against its bound (1/3 is rounded).
ap avg3 mpirun_host 3 -b 64 -e 4K -f 64 -n 1 -w 0 -d all -o avg
ap_clean avg3
ap_rows avg3 20 13

ap one1 mpirun_host 1 -b 8 -e 64 -f 8 -n 1 -w 0 -d all -o all
ap_clean one1
ap_rows one1 100 13

# -m 4: timed in groups of 4; checked as a group of 4 disjoint slices.
ap agg mpirun_host 2 -b 16 -e 4K -f 16 -n 2 -w 1 -m 4 -d all -o sum
ap_clean agg
ap_rows agg 30 13
grep -q '^# nThread .* agg iters: 4 ' "$(out agg)"
result "agg: header says agg iters: 4" $? agg

# Linear steps, blocking mode, each -a, check off.
ap steps mpirun_host 2 -b 1000 -e 4000 -i 1000 -n 2 -w 1 -z 1 -a 3 -d int32
ap_clean steps
ap_rows steps 4 13
grep -q '^# Blocking Enabled' "$(out steps)" && awk '!/^#/ && NF { s = s $1 " " } END { exit s != "1000 2000 3000 4000 " }' "$(out steps)"
result "steps: -i 1000 gives 1000..4000, blocking announced" $? steps
for a in 0 2; do
  ap "avg$a" mpirun_host 2 -b 64 -e 64 -n 2 -w 0 -a "$a"
  ap_rows "avg$a" 1 13
done
ap nocheck mpirun_host 2 -b 64 -e 64 -n 2 -w 0 -c 0
[ "$(rc nocheck)" = 0 ] && awk '!/^#/ && NF { exit !($9 == "N/A" && $13 == "N/A") }' "$(out nocheck)"
result "-c 0: #wrong is N/A" $? nocheck

# -J: valid JSON, one result per row, the same #wrong.
ap json mpirun_host 2 -b 8 -e 512 -f 4 -n 1 -w 0 -d all -o all -J "$TMPD/r.json"
ap_clean json
python3 - "$TMPD/r.json" 200 >"$TMPD/json.log" 2>&1 <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
rows = d["results"]
assert len(rows) == int(sys.argv[2]), len(rows)
assert d["out_of_bounds"] == {"count": 0, "okay": True}, d["out_of_bounds"]
assert d["config"]["nranks"] == 2 and d["shim"] is None and len(d["devices"]) == 2
for r in rows:
    assert r["root"] == -1 and r["size"] >= 0 and r["count"] >= 0, r
    for h in ("out_of_place", "in_place"):
        assert r[h]["nwrong"] == 0 and r[h]["wire"] == "-" and r[h]["time"] > 0, r
assert isinstance(d["average_bus_bandwidth"]["bandwidth"], float)
EOF
result "json: parses, 200 results, all nwrong 0" $? json
[ -s "$TMPD/json.log" ] && sed 's/^/#   /' "$TMPD/json.log" | tail -n 5

# -R 1: random floating-point inputs within their bound; the extra columns appear.
ap random mpirun_host 3 -b 1K -e 16K -f 16 -n 1 -w 0 -d all -o all -R 1
ap_clean random
ap_rows random 100 17
awk '!/^#/ && NF && ($15 != 0 || $17 != 0) && ($3 == "int8" || $3 == "uint8" || $4 == "max" || $4 == "min") { exit 1 }' "$(out random)"
result "random: relerr exactly 0 for integers, min and max" $? random

# The checker fails: rank 0 flips one element of each result before checking.
ALLREDUCE_PERF_CORRUPT=1 ap corrupt mpirun_host 2 -b 1K -e 4K -f 4 -n 1 -w 0 -d float
[ "$(rc corrupt)" != 0 ] && grep -Fxq '# Out of bounds values : 4 FAILED' "$(out corrupt)" &&
  awk '!/^#/ && NF { n++; if ($9 != "1" || $13 != "1") exit 1 } END { exit n != 2 }' "$(out corrupt)"
result "corrupt: exit non-zero, #wrong exactly 1 per result, footer 4 FAILED" $? corrupt
ALLREDUCE_PERF_CORRUPT=1 ap corruptR mpirun_host 3 -b 256 -e 256 -n 1 -w 0 -d all -o sum -R 1
[ "$(rc corruptR)" != 0 ] && grep -Fxq '# Out of bounds values : 20 FAILED' "$(out corruptR)"
result "corrupt with -R 1: every one of the 20 results fails" $? corruptR

# Flags: graphs unavailable on host buffers; bad values stop every rank.
ap graph mpirun_host 2 -b 64 -e 64 -n 1 -w 0 -G 3
ap_clean graph
grep -Fxq '# CUDA graphs unavailable (host buffers): -G 3 ignored' "$(out graph)"
result "graph: -G on host buffers says so" $? graph
ap help mpirun_host 1 -h
[ "$(rc help)" = 0 ] && grep -q '^USAGE: allreduce_perf' "$(out help)"
result "-h prints usage, exit 0" $? help
for bad in "-t 2" "-d fp8" "-o mulsum" "-b 1X" "-a 7"; do
  # shellcheck disable=SC2086
  ap badflag mpirun_host 2 $bad
  [ "$(rc badflag)" != 0 ] && grep -q '^allreduce_perf: ' "$TMPD/badflag.err" && ! grep -q '^ ' "$(out badflag)"
  result "bad flag '$bad': refused, no rows" $? badflag
done
# A size beyond size_t used to wrap ("maxbytes (0)"); one whose buffers cannot
# fit in memory used to get the ranks OOM-killed. 256G: refused on any machine
# (4 buffers of it per rank), and harmless if the check ever regressed (the
# allocation itself fails instead of the OOM killer stepping in).
ap huge mpirun_host 2 -b 8 -e 99999999999999999999
[ "$(rc huge)" = 2 ] && grep -q "^allreduce_perf: size for -e too large: '99999999999999999999'" "$TMPD/huge.err" && ! grep -q '^ ' "$(out huge)"
result "-e 99999999999999999999: refused as too large, exit 2, no rows" $? huge
ap nomem mpirun_host 2 -b 256G -e 256G
[ "$(rc nomem)" = 2 ] && [ "$(grep -c 'GiB available; use a smaller -e' "$TMPD/nomem.err")" = 1 ] && ! grep -q '^ ' "$(out nomem)"
result "-b 256G -e 256G: refused on every rank before allocating (one message from rank 0, exit 2, no rows)" $? nomem
ALLREDUCE_PERF_MEM=gpu ap badenv mpirun_host 2 -b 64 -e 64
[ "$(rc badenv)" != 0 ] && grep -q 'ALLREDUCE_PERF_MEM=gpu' "$TMPD/badenv.err"
result "ALLREDUCE_PERF_MEM=gpu refused with its name" $? badenv
# The shim's cast counters of the checked launches apart from all launches:
# the timed in-place launches re-reduce their own results, whose sums grow
# until fp16 overflows (issue 24: thousands "overflowed" next to #wrong 0).
NCCLSHIM_LOG=off NCCLSHIM_BANNER=0 ap counters mpirun_shim 4 -b 256K -e 256K -n 20 -w 2
line=$(grep '^#   in the checked launches' "$(out counters)")
[ "$(rc counters)" = 0 ] && [[ "$line" =~ checked\ launches.*overflow\ 0\ \ underflow\ 0\;\ in\ all\ launches:\ overflow\ [1-9] ]]
result "with the shim: overflow 0 in the checked launches (inputs as generated), the timed in-place re-reductions counted apart" $? counters
