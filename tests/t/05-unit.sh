# Unit tests of the shim's pure parts (cmocka, TAP output) and a short
# libFuzzer run of the configuration parser under ASan/UBSan.
. "$(dirname "$0")/../lib.sh"
for t in test_config test_core test_algo test_plan test_host_stream test_topo test_staging test_fabric; do
  if [ -x "$TBIN/$t" ]; then CMOCKA_MESSAGE_OUTPUT=TAP "$TBIN/$t" | grep -E '^(ok|not ok) ' | sed "s/^\(ok\|not ok\) [0-9]* - /\1 - $t: /"
    [ "${PIPESTATUS[0]}" -eq 0 ] || not_ok "$t exited non-zero"
  else not_ok "$t was not built"; fi
done
if command -v clang >/dev/null && make -s -C "$ROOT" B="$B" "$B/tests/fuzz_config" >"$TMPD/fuzz-build.log" 2>&1; then
  mkdir -p "$TMPD/corpus"
  check "config parser fuzzed for ${FUZZ_SECONDS:-15} s under ASan+UBSan without a crash" \
    "$TBIN/fuzz_config" -max_total_time="${FUZZ_SECONDS:-15}" "$TMPD/corpus"
else
  not_ok "fuzz_config could not be built (clang with libFuzzer): $(tail -n 3 "$TMPD/fuzz-build.log" 2>/dev/null)"
fi
if [ -x "$BIN/ncclshim-envdoc" ]; then
  "$BIN/ncclshim-envdoc" >"$TMPD/env-table.md"
  check "docs/environment.md's table matches shim/config/config.def (make env-doc)" \
    python3 "$ROOT/tests/splice.py" "$ROOT/docs/environment.md" env-table "$TMPD/env-table.md" --check
  "$BIN/ncclshim-envdoc" --formats >"$TMPD/formats-table.md"
  check "docs/collectives.md's table of wire formats matches compress/formats.h (make env-doc)" \
    python3 "$ROOT/tests/splice.py" "$ROOT/docs/collectives.md" formats-table "$TMPD/formats-table.md" --check
  "$BIN/ncclshim-envdoc" --formats-py >"$TMPD/formats.py"
  check "env/ncclshim/formats.py (the tuner's formats) matches compress/formats.h (make env-doc)" \
    cmp "$TMPD/formats.py" "$ROOT/env/ncclshim/formats.py"
  check "NCCLSHIM_COMPRESS's choices are off and the formats' rows, in order" \
    grep -q "| off/$("$BIN/ncclshim-envdoc" --names | tr ' ' '/') |" "$TMPD/env-table.md"
else not_ok "ncclshim-envdoc was not built"; fi
