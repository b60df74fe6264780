#!/usr/bin/env bash
# Fuzzes the C boundary with cargo-fuzz (libFuzzer, nightly toolchain).
#
#   scripts/fuzz.sh [SECONDS]      run each target for SECONDS (default 60),
#                                  one after the other, then minimise its
#                                  corpus into fuzz/corpus/<target>/
#   scripts/fuzz.sh replay         run every committed corpus file once
#                                  (train_full_args included; the other three
#                                  are also replayed by `cargo test`)
#   FUZZ_TARGETS="ffi_ops" scripts/fuzz.sh 300    only some targets
#
# Prints, per target: CPU-seconds fuzzed, executions, corpus size and the
# crashes found. A crash (panic, PANIC status, sanitizer report, leak,
# timeout > FUZZ_TIMEOUT s, OOM) is saved in fuzz/artifacts/<target>/ and
# copied into the corpus as regress-<name> so `cargo test` replays it from
# then on (SQLite's rule: every finding becomes a regression test). The
# script exits 1 if any target crashed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

MODE=${1:-60}
TARGETS=${FUZZ_TARGETS:-"ffi_ops checkpoint_load safetensors_load train_full_args"}
TIMEOUT=${FUZZ_TIMEOUT:-1}
export OPENBLAS_NUM_THREADS=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_odr_violation=0:detect_leaks=1}

# --- tools -----------------------------------------------------------------
if ! rustup toolchain list | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi

TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
BIN_DIR=$ROOT/fuzz/target/$TRIPLE/release
WORK=$ROOT/fuzz/target/corpus-work

extra_args() {
  case $1 in
    train_full_args)
      # The C code is instrumented by gcc (see fuzz/build.rs); the
      # dictionary holds the option names.
      echo "-dict=$ROOT/fuzz/train_full_args.dict -max_len=512" ;;
    checkpoint_load|safetensors_load) echo "-max_len=2048" ;;
    *) echo "-max_len=2048" ;;
  esac
}

build() {
  (cd fuzz && cargo +nightly fuzz build -O "$1") >&2
}

if [ "$MODE" = replay ]; then
  for t in $TARGETS; do
    build "$t"
    n=$(find "fuzz/corpus/$t" -type f | wc -l)
    "$BIN_DIR/$t" -runs=0 -timeout="$TIMEOUT" "fuzz/corpus/$t" 2>"$WORK.$t.log" || {
      tail -40 "$WORK.$t.log"; echo "replay $t: FAILED"; exit 1; }
    echo "replay $t: $n inputs ok"
  done
  exit 0
fi

SECONDS_PER_TARGET=$MODE
declare -A CPU EXECS CRASHES CORPUS
failed=0
for t in $TARGETS; do
  build "$t"
  mkdir -p "$WORK/$t" "fuzz/artifacts/$t" "fuzz/corpus/$t"
  rm -rf "${WORK:?}/$t"/*
  cp fuzz/corpus/"$t"/* "$WORK/$t/" 2>/dev/null || true
  find "fuzz/artifacts/$t" -type f | sort >"$WORK/$t.artifacts.before"
  log=$WORK/$t.log
  : >"$log"
  cpu=0
  execs=0
  left=$SECONDS_PER_TARGET
  runs=0
  # libFuzzer stops at the first crash: restart until the time is used up.
  while [ "$left" -gt 0 ] && [ "$runs" -lt 20 ]; do
    runs=$((runs + 1))
    start=$(date +%s)
    set +e
    # bash's `time` keyword: user and system CPU seconds of the fuzzer.
    TIMEFORMAT='%U %S'
    # shellcheck disable=SC2046
    { time "$BIN_DIR/$t" -max_total_time="$left" -timeout="$TIMEOUT" -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$t/" $(extra_args "$t") \
      "$WORK/$t" >>"$log" 2>&1; } 2>"$WORK/$t.time"
    rc=$?
    set -e
    read -r u s <"$WORK/$t.time" || true
    cpu=$(awk -v a="$cpu" -v u="${u:-0}" -v s="${s:-0}" 'BEGIN { printf "%.1f", a + u + s }')
    e=$(grep -a 'stat::number_of_executed_units' "$log" | tail -1 | awk '{print $2}')
    execs=$((execs + ${e:-0}))
    left=$((left - ($(date +%s) - start)))
    [ "$rc" -eq 0 ] && break
    echo "fuzz $t: crash (exit $rc), see $log" >&2
    grep -a -m5 -E 'panicked|ERROR:|SUMMARY' "$log" >&2 || true
  done
  find "fuzz/artifacts/$t" -type f | sort >"$WORK/$t.artifacts.after"
  new=$(comm -13 "$WORK/$t.artifacts.before" "$WORK/$t.artifacts.after")
  crashes=0
  # Every finding joins the corpus as a regression input.
  for f in $new; do
    crashes=$((crashes + 1))
    cp "$f" "fuzz/corpus/$t/regress-$(basename "$f")"
    echo "fuzz $t: finding $f -> fuzz/corpus/$t/regress-$(basename "$f")" >&2
  done
  # Minimise: keep the seeds and regression inputs, replace the rest by the
  # minimal set covering what the grown corpus covers.
  (cd fuzz && cargo +nightly fuzz cmin -O "$t" "$WORK/$t" -- $(extra_args "$t") -timeout=10 -use_counters=0 -set_cover_merge=1) \
    >"$WORK/$t.cmin.log" 2>&1 || { tail -20 "$WORK/$t.cmin.log"; echo "cmin $t failed"; exit 1; }
  find "fuzz/corpus/$t" -type f ! -name 'seed*' ! -name 'regress-*' -delete
  for f in "$WORK/$t"/*; do
    b=$(basename "$f")
    [ -e "fuzz/corpus/$t/$b" ] || cp "$f" "fuzz/corpus/$t/$b"
  done
  CPU[$t]=$cpu
  EXECS[$t]=$execs
  CRASHES[$t]=$crashes
  CORPUS[$t]="$(find "fuzz/corpus/$t" -type f | wc -l) files, $(du -sk "fuzz/corpus/$t" | cut -f1) KiB"
  [ "$crashes" -eq 0 ] || failed=1
done

echo
echo "fuzz summary (${SECONDS_PER_TARGET}s wall per target, OPENBLAS_NUM_THREADS=1):"
for t in $TARGETS; do
  printf '  %-16s %8s CPU-s  %10s execs  %2s crashes  corpus %s\n' \
    "$t" "${CPU[$t]}" "${EXECS[$t]}" "${CRASHES[$t]}" "${CORPUS[$t]}"
done
exit $failed
