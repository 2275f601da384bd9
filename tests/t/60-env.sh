# env/: the presets parse, set only NCCL_*/NCCLSHIM_* variables the shim
# knows and never override the user; ncclshim-run composes LD_PRELOAD, gives
# user values precedence, prints the settings, keeps arguments intact and
# forwards variables through mpirun; ncclshim-tune --quick on the host NCCL
# writes an env file the shim accepts and never exceeds its error bound.
. "$(dirname "$0")/../lib.sh"
ENV="$ROOT/env"
RUN="$ENV/ncclshim-run"
TUNE="$ENV/ncclshim-tune"
export LD_LIBRARY_PATH="$HOSTNCCL_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
unset LD_PRELOAD
# Start from no shim or NCCL settings of the caller's.
for v in $(compgen -e | grep -E '^NCCL(SHIM)?_'); do unset "$v"; done

# Every NCCLSHIM_* name the shim knows, from its one table.
sed -n 's/^NSC_CFG(\([a-z0-9_]*\),.*/\1/p' "$ROOT/shim/config/config.def" | tr '[:lower:]' '[:upper:]' | sed 's/^/NCCLSHIM_/' | sort >"$TMPD/known"
check "shim/config/config.def lists NCCLSHIM_COMPRESS (name list is not empty)" grep -qx NCCLSHIM_COMPRESS "$TMPD/known"

# ---- presets ------------------------------------------------------------------

# Names a preset adds when sourced into an empty environment (any variable,
# exported or not); "$1.bad" gets the ones outside NCCL_*/NCCLSHIM_*.
preset_names() {
  env -i PATH="$PATH" bash --norc --noprofile -c '
    before=$(compgen -v); . "$1" >/dev/null
    comm -13 <(printf "%s\n" $before | sort) <(compgen -v | sort)' _ "$1" | grep -vx -e _ -e before -e PIPESTATUS
}
presets=("$ENV"/*.env)
check "five presets exist (nvlink infiniband roce ethernet-25g ethernet-1g)" \
  test -f "$ENV/nvlink.env" -a -f "$ENV/infiniband.env" -a -f "$ENV/roce.env" -a -f "$ENV/ethernet-25g.env" -a -f "$ENV/ethernet-1g.env"
for p in "${presets[@]}"; do
  n=$(basename "$p" .env)
  check "preset $n parses (bash -n, sh -n)" bash -c 'bash -n "$1" && sh -n "$1"' _ "$p"
  preset_names "$p" >"$TMPD/$n.names"
  grep -vE '^NCCL(SHIM)?_[A-Z0-9_]+$' "$TMPD/$n.names" >"$TMPD/$n.bad"
  check "preset $n sets only NCCL_*/NCCLSHIM_* variables" test ! -s "$TMPD/$n.bad"
  check_grep "preset $n sets NCCLSHIM_COMPRESS" '^NCCLSHIM_COMPRESS$' "$TMPD/$n.names"
  check "preset $n does not set NCCLSHIM_ACCUM_STEPS" bash -c '! grep -qx NCCLSHIM_ACCUM_STEPS "$1"' _ "$TMPD/$n.names"
  # Every name mentioned, commented-out lines included, must be one the shim knows.
  grep -oE 'NCCLSHIM_[A-Z0-9_]+' "$p" | sort -u | comm -23 - "$TMPD/known" >"$TMPD/$n.unknown"
  check "preset $n names only NCCLSHIM_ variables from shim/config/config.def" test ! -s "$TMPD/$n.unknown"
  # Every variable it sets exported, and every one of them left alone when set.
  check "preset $n exports what it sets and keeps every user-set value" env -i PATH="$PATH" bash --norc -c '
    names=$(cat "$2")
    for v in $names; do export "$v=user-$v"; done
    . "$1" >/dev/null
    for v in $names; do [ "${!v}" = "user-$v" ] || { echo "$v overridden: ${!v}"; exit 1; }; done
    unset $names; . "$1" >/dev/null
    for v in $names; do env | grep -q "^$v=" || { echo "$v not exported"; exit 1; }; done' _ "$p" "$TMPD/$n.names"
  # The values parse too: the shim runs with them (exit 0, nothing rejected).
  if [ -x "$BIN/allreduce_perf" ] && [ -f "$SHIM" ]; then
    "$RUN" --preset "$n" -- timeout 60 mpirun -np 2 "$BIN/allreduce_perf" -b 256K -e 256K -n 2 -w 1 -R 1 >"$TMPD/$n.run" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && ! grep -qiE 'invalid|unknown variable' "$TMPD/$n.run"; then ok "preset $n: allreduce_perf under the shim accepts its values"
    else not_ok "preset $n: allreduce_perf under the shim exit $rc"; tail -n 8 "$TMPD/$n.run" | sed 's/^/#   /'; fi
  else not_ok "preset $n: allreduce_perf or the shim was not built"; fi
done

# ---- ncclshim-run ---------------------------------------------------------------

echo 'int ncclshim_test_dummy;' | gcc -shared -fPIC -x c - -o "$TMPD/libdummy1.so" &&
  cp "$TMPD/libdummy1.so" "$TMPD/libdummy2.so" && ln -sf "$SHIM" "$TMPD/shimlink.so"
shim_abs=$(readlink -f "$SHIM")

out=$(LD_PRELOAD="$TMPD/libdummy1.so $TMPD/shimlink.so:$TMPD/libdummy2.so" "$RUN" -- printenv LD_PRELOAD 2>"$TMPD/ld.err")
want="$shim_abs:$TMPD/libdummy1.so:$TMPD/libdummy2.so"
if [ "$out" = "$want" ]; then ok "LD_PRELOAD: shim first, existing entries kept in order, the shim's second path dropped"
else not_ok "LD_PRELOAD is '$out', want '$want'"; sed 's/^/#   /' "$TMPD/ld.err"; fi
out=$(LD_PRELOAD="$shim_abs" "$RUN" -- printenv LD_PRELOAD)
if [ "$out" = "$shim_abs" ]; then ok "LD_PRELOAD that holds only the shim stays one entry"; else not_ok "LD_PRELOAD is '$out'"; fi

out=$(NCCLSHIM_COMPRESS=bf16 NCCL_IB_DISABLE=1 "$RUN" --preset infiniband -- \
  bash -c 'echo "$NCCLSHIM_COMPRESS $NCCL_IB_DISABLE $NCCLSHIM_MIN_BYTES"')
if [ "$out" = "bf16 1 1M" ]; then ok "user-set NCCLSHIM_COMPRESS and NCCL_IB_DISABLE win over the preset, the rest comes from it"
else not_ok "preset precedence: got '$out', want 'bf16 1 1M'"; fi
# A preset written as plain assignments: the user still wins; only NCCL names pass.
printf 'NCCLSHIM_COMPRESS=fp16\nNCCLSHIM_FUSE_BYTES=1M\nNCCL_SOCKET_NTHREADS=3\nNOT_OURS=1\n' >"$TMPD/plain.env"
out=$(NCCLSHIM_COMPRESS=off "$RUN" --preset "$TMPD/plain.env" -- \
  bash -c 'echo "$NCCLSHIM_COMPRESS $NCCLSHIM_FUSE_BYTES $NCCL_SOCKET_NTHREADS ${NOT_OURS-unset}"')
if [ "$out" = "off 1M 3 unset" ]; then ok "preset given as a path with plain assignments: user wins, non-NCCL names dropped"
else not_ok "plain preset: got '$out', want 'off 1M 3 unset'"; fi

NCCL_DEBUG=WARN NCCLSHIM_MIN_BYTES=2M "$RUN" --preset roce --print >"$TMPD/print.out" 2>"$TMPD/print.err"
check "--print without a command exits 0" test $? -eq 0
check_grep "--print lists the preset's NCCLSHIM_COMPRESS" '^export NCCLSHIM_COMPRESS=fp16 +# preset roce$' "$TMPD/print.out"
check_grep "--print lists the user's NCCLSHIM_MIN_BYTES" '^export NCCLSHIM_MIN_BYTES=2M +# environment$' "$TMPD/print.out"
check_grep "--print lists the user's NCCL_DEBUG" '^export NCCL_DEBUG=WARN +# environment$' "$TMPD/print.out"
check_grep "--print lists the preset's NCCL_IB_ROCE_VERSION_NUM" '^export NCCL_IB_ROCE_VERSION_NUM=2 ' "$TMPD/print.out"
check_grep "--print lists LD_PRELOAD with the shim" "^export LD_PRELOAD=$shim_abs " "$TMPD/print.out"
check "--print output is sourceable and sets what it lists" env -i bash -c \
  '. "$1" && [ "$NCCLSHIM_MIN_BYTES" = 2M ] && [ "$NCCLSHIM_COMPRESS" = fp16 ]' _ "$TMPD/print.out"

out=$("$RUN" -- python3 -c 'import sys,json; print(json.dumps(sys.argv[1:]))' "a b" "c'd" "" '$HOME' '*' 'x"y')
want='["a b", "c'"'"'d", "", "$HOME", "*", "x\"y"]'
if [ "$out" = "$want" ]; then ok "arguments with spaces, quotes, \$ and * arrive intact"; else not_ok "argv: got $out, want $want"; fi

mkdir -p "$TMPD/bin"
printf '#!/bin/sh\nprintf "%%s\\n" "$0" "$@" >"%s/argv"\nprintf "%%s" "$NCCLSHIM_COMPRESS" >"%s/env"\n' "$TMPD" "$TMPD" >"$TMPD/bin/mpirun"
cp "$TMPD/bin/mpirun" "$TMPD/bin/torchrun"
chmod +x "$TMPD/bin/mpirun" "$TMPD/bin/torchrun"
# Expected: -x for each NCCL_*/NCCLSHIM_* that --print lists, then LD_PRELOAD
# and PYTHONPATH (the hook), right after the launcher word and after each ':'
# of an MPMD command (-x is per app context); then the command as given.
PATH="$TMPD/bin:$PATH" NCCL_DEBUG=WARN "$RUN" --preset ethernet-1g --print >"$TMPD/mpi.print"
{ sed -n 's/^export \(NCCL[A-Z0-9_]*\)=.*/\1/p' "$TMPD/mpi.print" | while read -r v; do printf -- '-x\n%s\n' "$v"; done
  printf -- '-x\nLD_PRELOAD\n-x\nPYTHONPATH\n'; } >"$TMPD/fwd.want"
{ echo "$TMPD/bin/mpirun"; cat "$TMPD/fwd.want"; printf -- '-np\n2\nprog\nx y\n'; } >"$TMPD/argv.want"
PATH="$TMPD/bin:$PATH" NCCL_DEBUG=WARN "$RUN" --preset ethernet-1g -- mpirun -np 2 prog "x y"
check "mpirun: -x NAME for every NCCL_*/NCCLSHIM_*, LD_PRELOAD and PYTHONPATH, inserted after the mpirun word" \
  diff "$TMPD/argv.want" "$TMPD/argv"
{ echo "$TMPD/bin/mpirun"; cat "$TMPD/fwd.want"; printf -- '-np\n1\nprog\n:\n'; cat "$TMPD/fwd.want"; printf -- '-np\n1\nprog\n'; } >"$TMPD/argv.want"
PATH="$TMPD/bin:$PATH" NCCL_DEBUG=WARN "$RUN" --preset ethernet-1g -- mpirun -np 1 prog : -np 1 prog
check "mpirun MPMD: the same -x list again after the ':' (every app context gets the preload)" \
  diff "$TMPD/argv.want" "$TMPD/argv"
check_grep "mpirun: the user's NCCL_DEBUG is forwarded too" '^NCCL_DEBUG$' "$TMPD/argv"
check "mpirun: the preset's values are in the launcher's environment" test "$(cat "$TMPD/env")" = fp16
PATH="$TMPD/bin:$PATH" "$RUN" -- torchrun --nproc-per-node 2 train.py "a b"
printf '%s\n' "$TMPD/bin/torchrun" --nproc-per-node 2 train.py "a b" >"$TMPD/argv.want"
check "torchrun: command passed unchanged (environment inherited)" diff "$TMPD/argv.want" "$TMPD/argv"

"$RUN" --no-such-option -- true >"$TMPD/usage.out" 2>&1; rc=$?
if [ $rc -eq 2 ] && grep -q '^usage:' "$TMPD/usage.out"; then ok "unknown option: usage message, exit 2"; else not_ok "unknown option: exit $rc"; fi
"$RUN" >/dev/null 2>&1; rc=$?
check "no command and no --print: exit 2" test $rc -eq 2
check_fails "a missing --lib is an error" "$RUN" --lib "$TMPD/nope.so" -- true
check_fails "an unknown preset is an error" "$RUN" --preset no-such-fabric -- true
# ld.so splits LD_PRELOAD on blanks and ':': such a library path would load
# nothing and the command would run without the shim, exit 0.
for d in "with space" "with:colon"; do
  mkdir -p "$TMPD/$d" && cp "$SHIM" "$TMPD/$d/"
  "$RUN" --lib "$TMPD/$d/libncclshim.so" -- printenv LD_PRELOAD >"$TMPD/libsp.out" 2>"$TMPD/libsp.err"; rc=$?
  if [ $rc -ne 0 ] && [ ! -s "$TMPD/libsp.out" ] && grep -q "cannot hold" "$TMPD/libsp.err"; then
    ok "--lib '.../$d/libncclshim.so': refused with a message (LD_PRELOAD cannot hold it), command not run"
  else not_ok "--lib with '$d': exit $rc, ran: $(cat "$TMPD/libsp.out") $(cat "$TMPD/libsp.err")"; fi
done

# ---- settings checked before the start (issue 42) ---------------------------
# ncclshim-envcheck is the shim's parser: every problem is named before
# anything starts, --print included; the command never runs.
refused() { # description, expected ERE on stderr, VAR=value..., -- launcher args...
  local desc=$1 pat=$2 kv=(); shift 2
  while [ "$1" != -- ]; do kv+=("$1"); shift; done; shift
  rm -f "$TMPD/ran"
  env "${kv[@]}" "$RUN" "$@" >"$TMPD/refused.out" 2>"$TMPD/refused.err"; local rc=$?
  if [ $rc -ne 0 ] && [ ! -e "$TMPD/ran" ] && grep -Eq -- "$pat" "$TMPD/refused.err"; then ok "$desc"
  else not_ok "$desc (exit $rc, ran: $([ -e "$TMPD/ran" ] && echo yes || echo no))"; sed 's/^/#   /' "$TMPD/refused.err" | tail -n 6; fi
}
MARK=(touch "$TMPD/ran")
refused "a bad value is refused before the start, with what is allowed and the nearest choices" \
  "NCCLSHIM_COMPRESS='int5' is invalid: expected one of off\|fp16.*\(did you mean int8 or int4\?\)" NCCLSHIM_COMPRESS=int5 -- -- "${MARK[@]}"
refused "an unknown NCCLSHIM_ name is refused" "unknown variable NCCLSHIM_FOO" NCCLSHIM_FOO=1 -- -- "${MARK[@]}"
for kv in NCCL_SHIM_COMPRESS=int8 ncclshim_compress=int8 NCCLSHIM_COMPRES=int8 NCCLSHM_COMPRESS=int8; do
  refused "${kv%%=*}: refused, 'did you mean NCCLSHIM_COMPRESS?'" "${kv%%=*}: did you mean NCCLSHIM_COMPRESS\?" "$kv" -- -- "${MARK[@]}"
done
refused "every problem at once (3), then one line saying nothing was started" \
  "nothing was started" NCCLSHIM_COMPRESS=int5 NCCLSHIM_FOO=1 ncclshim_log=calls -- -- "${MARK[@]}"
check "... each of the 3 problems on a line of its own" test "$(grep -c '^ncclshim: ' "$TMPD/refused.err")" -eq 3
refused "--print with a bad value: refused (exit 1), the problem named" "NCCLSHIM_COMPRESS='int5' is invalid" \
  NCCLSHIM_COMPRESS=int5 -- --print
check_grep "... after the listing of the settings as they would be" '^export NCCLSHIM_COMPRESS=int5 ' "$TMPD/refused.out"
refused "--emulate checks before it starts anything" "NCCLSHIM_COMPRESS='int5'" NCCLSHIM_COMPRESS=int5 -- --emulate --nproc 2 \
  --python "$TORCH_VENV/bin/python" -- \
  "$TMPD/never.py"
# The hint the messages give works as written: NCCLSHIM_DUMP_CONFIG=1 lists every setting and the problem.
refused "the messages' hint, NCCLSHIM_DUMP_CONFIG=1, lists every setting while a bad name is set" \
  '^NCCLSHIM_COMPRESS +INVALID: ' NCCLSHIM_COMPRESS=int5 NCCLSHIM_FOO=1 NCCLSHIM_DUMP_CONFIG=1 -- -- "${MARK[@]}"
check "... all $(wc -l <"$TMPD/known") of them" test "$(grep -cE '^NCCLSHIM_[A-Z0-9_]+ +(=|INVALID)' "$TMPD/refused.err")" -eq "$(wc -l <"$TMPD/known")"
check_grep "... and the unknown name" '^unknown variable NCCLSHIM_FOO' "$TMPD/refused.err"
check "NCCL's own variables (NCCL_SHM_DISABLE, NCCL_DEBUG) pass the check" \
  env NCCL_SHM_DISABLE=1 NCCL_DEBUG=WARN NCCL_P2P_DISABLE=1 "$RUN" -- true
# The shim itself says the same at its first collective (no launcher), and its hint works there too.
if [ -x "$BIN/allreduce_perf" ]; then
  with NCCL_SHIM_COMPRESS=int8 NCCLSHIM_DUMP_CONFIG=1 mpirun_shim 2 "$BIN/allreduce_perf" -b 256K -e 256K -n 1 -w 0 >"$TMPD/shimbad.out" 2>&1
  check_grep "the shim refuses a misspelt name at its first collective, with 'did you mean'" \
    'misspelt variable NCCL_SHIM_COMPRESS: did you mean NCCLSHIM_COMPRESS\?' "$TMPD/shimbad.out"
  check_grep "... and NCCLSHIM_DUMP_CONFIG=1 prints every setting there too" '^ncclshim config: NCCLSHIM_MIN_BYTES +=' "$TMPD/shimbad.out"
else not_ok "allreduce_perf was not built"; fi

# ---- every rank the same way: what the launcher can see -------------------------
refused "mpirun MPMD with NCCLSHIM_COMPRESS given to one app context only: refused, naming both values" \
  "NCCLSHIM_COMPRESS would be 'bf16' in app context 1 and 'fp16' in app context 2" NCCLSHIM_COMPRESS=fp16 -- \
  -- mpirun -np 1 -x NCCLSHIM_COMPRESS=bf16 "${MARK[@]}" : -np 1 "${MARK[@]}"
refused "mpirun -x NCCLSHIM_DISABLE=1 on one app context: refused" "NCCLSHIM_DISABLE would be '1' in app context 1" -- \
  -- mpirun -np 1 -x NCCLSHIM_DISABLE=1 "${MARK[@]}" : -np 1 "${MARK[@]}"
refused "mpirun -x LD_PRELOAD=other.so: refused (those ranks would lose the shim)" "another preload than the shim's" -- \
  -- mpirun -np 2 -x LD_PRELOAD="$TMPD/libdummy1.so" "${MARK[@]}"
refused "mpirun -x NCCLSHIM_COMPRESS=bf17: the value is checked too" "NCCLSHIM_COMPRESS='bf17' is invalid" -- \
  -- mpirun -np 2 -x NCCLSHIM_COMPRESS=bf17 "${MARK[@]}"
printf '#!/bin/sh\ntouch "%s/ran"\n' "$TMPD" >"$TMPD/bin/srun"; chmod +x "$TMPD/bin/srun"
refused "srun -n 2 --export=NONE: refused (the ranks would not get LD_PRELOAD)" "srun --export=NONE .*does not pass LD_PRELOAD" \
  PATH="$TMPD/bin:$PATH" -- -- srun -n 2 --export=NONE prog
refused "SLURM_EXPORT_ENV=NONE: the same" "srun --export=NONE .*does not pass LD_PRELOAD" \
  PATH="$TMPD/bin:$PATH" SLURM_EXPORT_ENV=NONE -- -- srun prog
PATH="$TMPD/bin:$PATH" "$RUN" -- srun --export=ALL,FOO=1 prog >/dev/null 2>&1
check "srun --export=ALL,...: started" test -e "$TMPD/ran"
PATH="$TMPD/bin:$PATH" "$RUN" -- torchrun --nnodes 2 --nproc-per-node 2 train.py >/dev/null 2>"$TMPD/nnodes.err"
check_grep "torchrun --nnodes 2: a reminder that every node's launch needs the same settings" \
  'torchrun --nnodes 2: this starts one node; start every node' "$TMPD/nnodes.err"

# The hook: first on PYTHONPATH (unless --no-hook), other entries kept.
out=$(PYTHONPATH=/a:/b "$RUN" -- printenv PYTHONPATH)
check "PYTHONPATH: the package's hook (ncclshim/site) first, the user's entries kept" \
  test "$out" = "$ENV/ncclshim/site:/a:/b"
out=$(PYTHONPATH=/a "$RUN" --no-hook -- printenv PYTHONPATH)
check "--no-hook: PYTHONPATH untouched" test "$out" = /a

# ncclshim-tune: a count option of 0 is refused, never replaced by the default.
for o in "--reps 0" "--iters 0"; do
  timeout 60 "$TUNE" --quick $o -o "$TMPD/zero.env" >"$TMPD/zero.out" 2>&1; rc=$?
  if [ $rc -eq 2 ] && grep -q -- "${o% *}" "$TMPD/zero.out" && [ ! -e "$TMPD/zero.env" ]; then
    ok "ncclshim-tune --quick $o: refused (exit 2, names the option, no run, no file)"
  else not_ok "ncclshim-tune --quick $o: exit $rc: $(tail -n 2 "$TMPD/zero.out")"; fi
done

for o in "--algo bogus" "--compress fp16" "--compress off,int3"; do
  check_fails "ncclshim-tune $o: refused" "$TUNE" --quick $o -o "$TMPD/bad.env"
done
check "... and writes no file" test ! -e "$TMPD/bad.env"

# ---- ncclshim-tune ------------------------------------------------------------------

timeout 120 "$TUNE" --quick -o "$TMPD/tuned.env" >"$TMPD/tune.out" 2>&1
rc=$?
check "ncclshim-tune --quick on the host NCCL exits 0" test $rc -eq 0
sed -n '/^phase /,/^wrote /p' "$TMPD/tune.out" | sed 's/^/#   /'   # the table, for the log
check_grep "tuned file's table has the uncompressed baseline" '^# compress +compress=off ' "$TMPD/tuned.env"
check_grep "tuned file's table has fp16" '^# compress +compress=fp16 ' "$TMPD/tuned.env"
check_grep "tuned file's table has bf16" '^# compress +compress=bf16 ' "$TMPD/tuned.env"
for al in auto ring twophase; do
  check_grep "tuned file's table has fp16 with NCCLSHIM_ALGO=$al" "^# compress +compress=fp16 algo=$al min_bytes=0 " "$TMPD/tuned.env"
done
for k in int8 fp8; do  # always two-phase: measured once, their wire column checked (else FAILED)
  check_grep "tuned file's table has $k, measured (not failed)" "^# compress +compress=$k algo=auto min_bytes=0 .*[0-9]e-[0-9]+  (ok|chosen|over the bound)" "$TMPD/tuned.env"
done
check "tuned file's table has no failed row" test "$(grep -c 'FAILED' "$TMPD/tuned.env")" -eq 0
for v in NCCLSHIM_COMPRESS NCCLSHIM_ALGO NCCLSHIM_MIN_BYTES NCCLSHIM_FUSE_BYTES NCCLSHIM_CHUNK_BYTES NCCLSHIM_LAUNCH_BYTES; do
  check_grep "tuned file sets $v (user value wins)" "^: \"\\\$\\{$v:=[^}]+\\}\"; export $v\$" "$TMPD/tuned.env"
done
check_grep "tuned file: the measurements, not the launch rule, decide (NCCLSHIM_LAUNCH_BYTES=0)" \
  '^: "\$\{NCCLSHIM_LAUNCH_BYTES:=0\}"' "$TMPD/tuned.env"
check "tuned file assigns nothing else (never NCCLSHIM_ACCUM_STEPS)" \
  test "$(grep -vc '^#' "$TMPD/tuned.env")" -eq 6
preset_names "$TMPD/tuned.env" | comm -23 - "$TMPD/known" >"$TMPD/tuned.unknown"
check "tuned file sets only names from shim/config/config.def" test ! -s "$TMPD/tuned.unknown"
( . "$TMPD/tuned.env"; mpirun_shim 2 "$BIN/allreduce_perf" -b 64K -e 1M -f 4 -n 2 -w 1 -R 1 ) >"$TMPD/tuned.run" 2>&1
rc=$?
if [ $rc -eq 0 ] && ! grep -qiE 'invalid|unknown variable' "$TMPD/tuned.run"; then ok "the shim accepts the tuned file: allreduce_perf exit 0, nothing invalid"
else not_ok "allreduce_perf with the tuned file: exit $rc"; tail -n 8 "$TMPD/tuned.run" | sed 's/^/#   /'; fi

# From a log (shim's NCCLSHIM_LOG=calls records, plus lines to be ignored),
# with a bound no compressed result can meet: the file must say off.
cat >"$TMPD/calls.jsonl" <<'EOF'
{"kind":"call","rank":0,"op":"sum","dtype":"float","count":32768,"logical_bytes":131072,"action":"compressed","members":1}
{"kind":"call","rank":0,"op":"sum","dtype":"float","count":32768,"logical_bytes":131072,"action":"compressed","members":1}
{"kind":"call","rank":0,"op":"sum","dtype":"float","count":131072,"logical_bytes":524288,"action":"fused","members":4}
{"kind":"call","rank":0,"op":"sum","dtype":"int32","count":10,"logical_bytes":40,"action":"passthrough","members":1}
{"kind":"call","rank":0,"op":"max","dtype":"float","count":10,"logical_bytes":40,"action":"passthrough","members":1}
{"kind":"call","rank":0,"op":"sum","dtype":"float","count":262144,"logical_bytes":1048576,"action":"skipped","members":1}
{"kind":"call","rank":0,"op":"sum","dtype":"float","count":262144,"logical_bytes":1048576,"action":"compressed","members":1}
{"kind":"summary","rank":0,"records":7}
{not json
EOF
timeout 120 "$TUNE" --quick --from-log "$TMPD/calls.jsonl" --max-rel-error 1e-6 -o "$TMPD/strict.env" >"$TMPD/strict.out" 2>&1
rc=$?
check "ncclshim-tune --from-log exits 0" test $rc -eq 0
check_grep "log histogram: 7 fp32 sum/avg calls used (6 of 128K counting 4 fused members, 1 of 1M)" \
  '^# Workload: 8 JSON records in .*: 7 fp32 sum/avg calls that communicated used$' "$TMPD/strict.env"
check_grep "log histogram: weights 128K x6, 1M x1" '^#   calls per size: 128K x6, 1M x1$' "$TMPD/strict.env"
check_grep "a bound no compressed result meets (1e-6) yields compression off" \
  '^: "\$\{NCCLSHIM_COMPRESS:=off\}"' "$TMPD/strict.env"
check_grep "rows beyond the bound are marked so" 'compress=fp16 .*over the bound' "$TMPD/strict.env"
# A job's tiny calls (a loss scalar, a 2-element metric) are too small for two
# phases: forwarded (int8, fp8) or by the ring (fp16, bf16) as documented,
# never "FAILED: the shim did not compress as asked" (issue 24).
printf '%s\n' '{"kind":"call","rank":0,"op":"sum","dtype":"float","count":1,"logical_bytes":4,"action":"passthrough","members":1}' \
  '{"kind":"call","rank":0,"op":"sum","dtype":"float","count":2,"logical_bytes":8,"action":"passthrough","members":1}' \
  '{"kind":"call","rank":0,"op":"sum","dtype":"float","count":32768,"logical_bytes":131072,"action":"compressed","members":1}' \
  >"$TMPD/tiny.jsonl"
timeout 180 "$TUNE" --quick --from-log "$TMPD/tiny.jsonl" -o "$TMPD/tiny.env" >"$TMPD/tiny.out" 2>&1
rc=$?
check "ncclshim-tune --from-log with 4- and 8-byte calls: exit 0, no FAILED row (the 8-bit formats measured)" \
  test $rc -eq 0 -a "$(grep -c 'FAILED' "$TMPD/tiny.env")" -eq 0 -a "$(grep -cE '^# compress +compress=(int8|fp8) ' "$TMPD/tiny.env")" -eq 2
printf '{"kind":"summary"}\nplain text\n' >"$TMPD/empty.jsonl"
check_fails "a log without usable records is an error" "$TUNE" --quick --from-log "$TMPD/empty.jsonl" -o "$TMPD/x.env"
check "... and writes no file" test ! -e "$TMPD/x.env"

# The search itself on a deterministic model of a machine (no runs, no
# timing): off costs 50 + s/100 us, fp16 200 + s/200 (it loses below ~30 KB),
# bf16 the same times a factor, with an error given per case; grouped calls
# and chunk sizes have fixed times. Checks thresholds, the bound, ties and
# the fusion/chunk choices exactly.
cat >"$TMPD/model.py" <<'EOF2'
import sys, types
from importlib.machinery import SourceFileLoader
t = SourceFileLoader("tune", sys.argv[1]).load_module()
K, M = 1024, 1 << 20
bf16_factor, bf16_err, tp_factor = float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])

def model(st, s, agg):
    c = st["NCCLSHIM_COMPRESS"]
    if agg > 1:  # grouped calls: only the fusion size matters
        return {0: 100.0, 64 * M: 60.0, M: 50.0, 256 * M: 60.0}[st["NCCLSHIM_FUSE_BYTES"]], 9e-4, c
    if "NCCLSHIM_CHUNK_BYTES" in st:
        return {0: 30000.0, "auto": 31000.0, 16 * M: 29000.0}[st["NCCLSHIM_CHUNK_BYTES"]], 9e-4, c
    if c == "off":
        return 50 + s / 100, 6e-8, "-"
    if c == "int8":  # twice as fast as fp16, beyond the bound
        return 100 + s / 400, 6e-2, "int8-2p"
    f, e = (1.0, 9e-4) if c == "fp16" else (bf16_factor, bf16_err)
    if st["NCCLSHIM_ALGO"] == "twophase":
        return tp_factor * f * (200 + s / 200), e / 2, c + "-2p"
    return f * (200 + s / 200), e, c

class FakeBench:
    def measure(self, st, points, agg=1):
        return {p: model(st, p[1], agg)[:2] + (0, model(st, p[1], agg)[2]) for p in points}, None
    def context(self): return []
    def kept_settings(self): return []

a = types.SimpleNamespace(max_rel_error=float(sys.argv[6]), margin=0.03, reps=2, quick=False, compress=["off", "fp16", "bf16", "int8"],
                          algo=["auto", "ring", "twophase"],
                          group=8, output=sys.argv[2], launcher="model", bench="allreduce_perf", iters=5)
sizes = [("float", s) for s in (16 * K, 64 * K, 256 * K, M, 4 * M, 16 * M, 64 * M)]
w = {s: 1 for s in sizes}
chosen, table, pick, off, notes, bound = t.tune(a, FakeBench(), sizes, w, {("float", 16 * K): 1, ("float", 64 * K): 1})
t.write_env(a.output, t.report(a, FakeBench(), chosen, table, sizes, w, ["model"], pick, off, notes, bound), chosen)
print(t.describe(chosen))
EOF2
model_case() { # desc bf16_factor bf16_err expected [twophase_factor [bound]]
  local out
  out=$(PYTHONDONTWRITEBYTECODE=1 python3 "$TMPD/model.py" "$TUNE" "$TMPD/model.env" "$2" "$3" "${5:-1.0}" "${6:-1e-2}" 2>"$TMPD/model.err")
  if [ "$out" = "$4" ]; then ok "model: $1 -> $4"; else not_ok "model: $1: got '$out', want '$4'"; sed 's/^/#   /' "$TMPD/model.err" | tail -n 5; fi
}
model_case "bf16 beyond the bound; fp16 wins from 64K; fusion 1M and chunk 16M beat the defaults" 1.0 2e-2 \
  "compress=fp16 algo=auto min_bytes=64K fuse_bytes=1M chunk_bytes=16M launch_bytes=0"
check_grep "model: the bf16 row is marked beyond the bound" '^# compress +compress=bf16 algo=auto min_bytes=0 .* over the bound$' "$TMPD/model.env"
model_case "bf16 within the bound but only 2% faster: a tie, fp16 kept" 0.98 7e-3 \
  "compress=fp16 algo=auto min_bytes=64K fuse_bytes=1M chunk_bytes=16M launch_bytes=0"
model_case "bf16 within the bound and 20% faster: bf16, from 64K" 0.8 7e-3 \
  "compress=bf16 algo=auto min_bytes=64K fuse_bytes=1M chunk_bytes=16M launch_bytes=0"
# NCCLSHIM_ALGO with the formats: fp16/bf16 once per algorithm, int8 once
# (always two-phase; the model's int8 is twice as fast as fp16, error 6e-2).
model_case "two-phase 20% faster than the ring: fp16 two-phase (listed before bf16's)" 1.0 2e-2 \
  "compress=fp16 algo=twophase min_bytes=64K fuse_bytes=1M chunk_bytes=16M launch_bytes=0" 0.8
check "model: 8 rows in the compress phase (off, fp16 x3, bf16 x3, int8 once)" \
  test "$(grep -c '^# compress ' "$TMPD/model.env")" -eq 8
check_grep "model: the int8 row is marked beyond the bound" '^# compress +compress=int8 algo=auto min_bytes=0 .* over the bound$' "$TMPD/model.env"
model_case "two-phase 2% faster: a tie, ALGO=auto kept" 1.0 2e-2 \
  "compress=fp16 algo=auto min_bytes=64K fuse_bytes=1M chunk_bytes=16M launch_bytes=0" 0.98
model_case "a bound of 0.1: int8 (twice as fast) from the smallest size" 1.0 2e-2 \
  "compress=int8 algo=auto min_bytes=16K fuse_bytes=1M chunk_bytes=16M launch_bytes=0" 1.0 0.1

# ---- ncclshim-tune on 16-bit inputs ---------------------------------------------

# The search on a model of a job with bf16 calls (no runs): off costs
# 50 + s/100 us (bf16 and fp32 alike), the input's own wire (fp16/bf16 with
# ALGO=twophase) OWN times that, int8 half of it plus 20 (error 6e-2); fp32
# as above (fp16 200 + s/200, two-phase TP times that). A 16-bit point that
# off's run stands for (fp16/bf16 with auto or ring) must never be run.
cat >"$TMPD/model16.py" <<'EOF2'
import sys, types
from importlib.machinery import SourceFileLoader
t = SourceFileLoader("tune", sys.argv[1]).load_module()
K, M = 1024, 1 << 20
job, own, own_err, off16_err, tp, bound = sys.argv[3], *map(float, sys.argv[4:9])

def model(st, p):
    (d, s), c, al = p, st["NCCLSHIM_COMPRESS"], st["NCCLSHIM_ALGO"]
    off = 50 + s / 100
    if d != "float":
        if c == "off":
            return off, off16_err, "-"
        if c == "int8":
            return off / 2 + 20, 6e-2, "int8-2p"
        assert al == "twophase", "ran %s at %s: off's run stands for it" % (t.describe(st), t.label(p))
        return own * off, own_err, c + "-2p"
    if c == "off":
        return off, 6e-8, "-"
    if c == "int8":
        return 100 + s / 400, 6e-2, "int8-2p"
    f = (1.0 if c == "fp16" else 1.02) * (tp if al == "twophase" else 1.0)
    return f * (200 + s / 200), 9e-4, c + ("-2p" if al == "twophase" else "")

class FakeBench:
    def measure(self, st, points, agg=1):
        return {p: model(st, p)[:2] + (0, model(st, p)[2]) for p in points}, None
    def context(self): return []
    def kept_settings(self): return []

a = types.SimpleNamespace(max_rel_error=bound, margin=0.03, reps=2, quick=False, compress=["off", "fp16", "bf16", "int8"],
                          algo=["auto", "ring", "twophase"], group=8, output=sys.argv[2], launcher="model",
                          bench="allreduce_perf", iters=5)
pts = [("bfloat16", s) for s in (64 * K, M, 16 * M)]
if job == "mixed":
    pts = [("float", s) for s in (64 * K, M, 16 * M)] + pts[1:]
w = {p: 1 for p in pts}
chosen, table, pick, off, notes, bnd = t.tune(a, FakeBench(), pts, w, {})
t.write_env(a.output, t.report(a, FakeBench(), chosen, table, pts, w, ["model"], pick, off, notes, bnd), chosen)
print(t.describe(chosen))
EOF2
model16_case() { # desc job own own_err off16_err tp bound expected
  local out
  out=$(PYTHONDONTWRITEBYTECODE=1 python3 "$TMPD/model16.py" "$TUNE" "$TMPD/model16.env" "$2" "$3" "$4" "$5" "$6" "$7" 2>"$TMPD/model16.err")
  if [ "$out" = "$8" ]; then ok "model16: $1 -> $8"; else not_ok "model16: $1: got '$out', want '$8'"; sed 's/^/#   /' "$TMPD/model16.err" | tail -n 5; fi
}
model16_case "bf16 job, own wire 5% slower, int8 beyond 1e-2: off" bf16 1.05 3.9e-3 3.9e-3 1.0 1e-2 \
  "compress=off algo=auto min_bytes=64K fuse_bytes=64M chunk_bytes=auto launch_bytes=0"
check "model16: a bf16 job is offered off, bf16 with ALGO=twophase and int8 only (fp16 = bf16 there, auto/ring = off)" \
  test "$(grep -c '^# compress ' "$TMPD/model16.env")" -eq 3 -a "$(grep -cE '^# compress +compress=(off algo=auto|bf16 algo=twophase|int8 algo=auto) ' "$TMPD/model16.env")" -eq 3
check_grep "model16: the table's columns are the bf16 sizes" '^# phase .* 64K:bf16 +1M:bf16 +16M:bf16 ' "$TMPD/model16.env"
model16_case "bf16 job, bound 0.1: int8 from the smallest size" bf16 1.05 3.9e-3 3.9e-3 1.0 0.1 \
  "compress=int8 algo=auto min_bytes=64K fuse_bytes=64M chunk_bytes=auto launch_bytes=0"
model16_case "plain's own error 2e-2 beyond 1e-2: the own wire (1.2e-2, 20% faster) is not rejected" bf16 0.8 1.2e-2 2e-2 1.0 1e-2 \
  "compress=bf16 algo=twophase min_bytes=64K fuse_bytes=64M chunk_bytes=auto launch_bytes=0"
check_grep "model16: ... its row within the bound" '^# compress +compress=bf16 algo=twophase min_bytes=0 .*  ok$' "$TMPD/model16.env"
model16_case "fp32 + bf16 job: fp16 wins on the fp32 calls, the bf16 calls left to NCCL" mixed 1.05 3.9e-3 3.9e-3 1.0 1e-2 \
  "compress=fp16 algo=auto min_bytes=64K fuse_bytes=64M chunk_bytes=auto launch_bytes=0"
check_grep "model16: ... the bf16 points of fp16/auto are off's run ('=')" '^# compress +compress=fp16 algo=auto min_bytes=0 +[0-9.]+ +[0-9.]+ +[0-9.]+ +=[0-9.]+ +=[0-9.]+ ' "$TMPD/model16.env"
check_grep "model16: ... the header says the fp32 calls decided it" '^#   Decided by the fp32 calls' "$TMPD/model16.env"
model16_case "fp32 + bf16: two-phase 30% faster on fp32 outweighs the own wire's 5% on bf16" mixed 1.05 3.9e-3 3.9e-3 0.7 1e-2 \
  "compress=fp16 algo=twophase min_bytes=64K fuse_bytes=64M chunk_bytes=auto launch_bytes=0"
check_grep "model16: ... the header says so (fp32 decided, the bf16 calls lose)" \
  '^#   Decided by the fp32 calls \([0-9]+ us saved\); the bf16 calls lose [0-9]+ us under it\.$' "$TMPD/model16.env"
check_grep "model16: ... bf16 with ALGO=twophase takes the fp16 row's bf16 runs (measured once)" \
  '^# compress +compress=bf16 algo=twophase min_bytes=0 +[0-9.]+ +[0-9.]+ +[0-9.]+ +=[0-9.]+ +=[0-9.]+ ' "$TMPD/model16.env"
model16_case "fp32 + bf16: ... but not when the own wire doubles the bf16 time" mixed 2.0 3.9e-3 3.9e-3 0.7 1e-2 \
  "compress=fp16 algo=auto min_bytes=64K fuse_bytes=64M chunk_bytes=auto launch_bytes=0"

# The histogram per datatype: the log's names (float, bfloat16, half, and
# the aliases float32/bf16/float16) onto allreduce_perf's, sizes kept apart.
cat >"$TMPD/mixed16.jsonl" <<'EOF2'
{"kind":"call","rank":0,"op":"sum","dtype":"float","count":65536,"logical_bytes":262144,"action":"compressed","members":1}
{"kind":"call","rank":0,"op":"avg","dtype":"bfloat16","count":131072,"logical_bytes":262144,"action":"passthrough","members":1}
{"kind":"call","rank":0,"op":"sum","dtype":"half","count":524288,"logical_bytes":1048576,"action":"compressed","members":1}
{"kind":"call","rank":0,"op":"sum","dtype":"float16","count":524288,"logical_bytes":1048576,"action":"passthrough","members":1}
{"kind":"call","rank":0,"op":"sum","dtype":"bfloat16","count":524288,"logical_bytes":1048576,"action":"skipped","members":1}
{"kind":"call","rank":0,"op":"max","dtype":"bfloat16","count":8,"logical_bytes":16,"action":"passthrough","members":1}
EOF2
check "load_logs: fp32 256K x1, bf16 256K x1, fp16 1M x2 (skips and max left out), named so in the workload line" \
  env PYTHONDONTWRITEBYTECODE=1 python3 -c '
import sys
from importlib.machinery import SourceFileLoader
t = SourceFileLoader("tune", sys.argv[1]).load_module()
h, g, notes = t.load_logs([sys.argv[2]])
want = {("float", 262144): 1, ("bfloat16", 262144): 1, ("half", 1048576): 2}
sys.exit(not (dict(h) == want and not g and notes[0].endswith("4 sum/avg calls that communicated used (fp32 1, bf16 1, fp16 2)")))
' "$TUNE" "$TMPD/mixed16.jsonl"

# A real job's log of bf16 calls: measured as bf16 (allreduce_perf -d
# bfloat16) with the 16-bit settings, every wire column as documented (no
# FAILED row), and a file the shim takes.
mkdir -p "$TMPD/bf16log"
mpirun_shim 2 -x NCCLSHIM_LOG=calls -x NCCLSHIM_LOG_FILE="$TMPD/bf16log/" -x NCCLSHIM_BANNER=0 \
  "$BIN/allreduce_perf" -d bfloat16 -b 256K -e 1M -f 4 -n 2 -w 1 >"$TMPD/bf16log.out" 2>&1
check_grep "a bf16 job's NCCLSHIM_LOG=calls records carry dtype bfloat16" '"dtype":"bfloat16"' "$TMPD"/bf16log/*.jsonl
timeout 120 "$TUNE" --quick --from-log "$TMPD"/bf16log/*.jsonl -o "$TMPD/bf16.env" >"$TMPD/bf16.out" 2>&1
rc=$?
check "ncclshim-tune --quick --from-log on a bf16 job exits 0" test $rc -eq 0
sed -n '/^phase /,/^wrote /p' "$TMPD/bf16.out" | sed 's/^/#   /'
check_grep "bf16 job: measured with allreduce_perf -d bfloat16" '^# Measured: .*allreduce_perf -d bfloat16, sum' "$TMPD/bf16.env"
check_grep "bf16 job: the workload is its bf16 calls" '^# Workload: .* sum/avg calls that communicated used \(bf16 [0-9]+\)$' "$TMPD/bf16.env"
check_grep "bf16 job: the table's columns are bf16 sizes" '^# phase .* 256K:bf16 +1M:bf16 ' "$TMPD/bf16.env"
for s in "off algo=auto" "bf16 algo=twophase" "int8 algo=auto" "fp8 algo=auto" "fp16s algo=auto" "int4 algo=auto"; do
  check_grep "bf16 job: compress=$s measured" "^# compress +compress=$s min_bytes=0 " "$TMPD/bf16.env"
done
check "bf16 job: fp16 not tried (the same wire as bf16 on a bf16 input), no FAILED row" \
  test "$(grep -c '^# compress +compress=fp16 ' "$TMPD/bf16.env")" -eq 0 -a "$(grep -c 'FAILED' "$TMPD/bf16.env")" -eq 0
check "bf16 job: the file is sourceable, assigns 6 variables, NCCLSHIM_COMPRESS one of the allowed values" env -i PATH="$PATH" bash --norc -c '
  . "$1" && [ "$(grep -vc "^#" "$1")" -eq 6 ] && case $NCCLSHIM_COMPRESS in off|fp16|bf16|int8|fp8|fp16s|int4) exit 0;; esac; exit 1' _ "$TMPD/bf16.env"
( . "$TMPD/bf16.env"; mpirun_shim 2 "$BIN/allreduce_perf" -d bfloat16 -b 256K -e 1M -f 4 -n 2 -w 1 -R 1 ) >"$TMPD/bf16.run" 2>&1
rc=$?
if [ $rc -eq 0 ] && ! grep -qiE 'invalid|unknown variable' "$TMPD/bf16.run"; then ok "the shim accepts the bf16 job's tuned file: allreduce_perf -d bfloat16 exit 0"
else not_ok "allreduce_perf -d bfloat16 with the tuned file: exit $rc"; tail -n 8 "$TMPD/bf16.run" | sed 's/^/#   /'; fi
