#!/usr/bin/env bash
# make soak [SOAK_ARGS=--short]: long runs of train_full that must keep memory
# flat. Fails unless, for each run,
#   anon_end_kb - anon_warm_kb <= 1024      (anonymous resident memory after
#                                           step 10 vs at the end: the heap,
#                                           arena and stacks; RSS is printed
#                                           too, but it also counts library
#                                           code paged in as it first runs,
#                                           2.5 MB of MKL's kernels here)
#   arena high-water at step 10 == arena_high_water_bytes in the summary
# Runs: GPT-2 tiny 10,000 steps and small 2,000, and a Llama (--arch llama:
# RMSNorm, RoPE, SwiGLU, grouped-query attention with 1 key/value head for
# tiny's 2) at tiny's shape 10,000 steps (--short: 1,000, 200 and 1,000).
# Measured on a 2-core EPYC with OPENBLAS_NUM_THREADS=1: ~10 s, ~3 min and
# ~12 s (--short: the Llama run adds 1.3 s to ~33 s, measured while other
# builds shared the cores).
set -u
cd "$(dirname "$0")/.."

tiny_iters=10000
small_iters=2000
case "${1:-}" in
"") ;;
--short)
    tiny_iters=1000
    small_iters=200
    ;;
*)
    echo "usage: scripts/soak.sh [--short]" >&2
    exit 2
    ;;
esac
TRAIN=build/train_full
[ -x "$TRAIN" ] || { echo "soak: $TRAIN is missing (run make examples)" >&2; exit 1; }
if [ -f ../shared/data/shakespeare_tiny.txt ]; then
    DATA=../shared/data/shakespeare_tiny.txt
else
    make --no-print-directory build/corpus_small.txt >/dev/null || exit 1
    DATA=build/corpus_small.txt
fi
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
work=$(mktemp -d "${TMPDIR:-/tmp}/soak.XXXXXX")
# Main shell only: bash runs an inherited EXIT trap in a subshell killed at fork.
trap 'if [ "$BASHPID" = "$$" ]; then rm -rf "$work"; fi' EXIT
echo "soak: data $DATA, OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS"

failed=0
soak() { # label iters flags...
    local preset=$1 iters=$2 log=$work/$1.out
    shift 2
    local t0 t1
    t0=$(date +%s.%N)
    "$TRAIN" "$@" --iters "$iters" --data "$DATA" \
        --log-every $((iters / 10)) >"$log" 2>"$work/$preset.err"
    local rc=$?
    t1=$(date +%s.%N)
    local wall
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    grep -E '^(step|eval)' "$log" | sed "s/^/  [$preset] /"
    if [ "$rc" -ne 0 ]; then
        echo "FAIL soak $preset $iters: exit $rc after ${wall}s: $(tail -n 3 "$work/$preset.err")"
        failed=1
        return
    fi
    local summary hw10 warm end hw ms
    summary=$(grep '^summary ' "$log")
    field() { echo "$summary" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
    hw10=$(sed -n 's/^memory step=10 .*arena_high_water_bytes=\([0-9]*\).*/\1/p' "$log")
    warm=$(field anon_warm_kb)
    end=$(field anon_end_kb)
    local rss_warm rss_end
    rss_warm=$(field rss_warm_kb)
    rss_end=$(field rss_end_kb)
    hw=$(field arena_high_water_bytes)
    ms=$(field ms_per_step)
    local growth=$((end - warm))
    local verdict=PASS why=""
    if [ -z "$hw10" ] || [ -z "$warm" ] || [ -z "$end" ] || [ -z "$hw" ]; then
        verdict=FAIL why=" (missing figures in the output)"
    elif [ "$growth" -gt 1024 ]; then
        verdict=FAIL why=" (anonymous memory grew by more than 1024 KiB)"
    elif [ "$hw10" != "$hw" ]; then
        verdict=FAIL why=" (arena high-water moved after step 10)"
    fi
    echo "$verdict soak $preset $iters steps: anon_warm_kb=$warm anon_end_kb=$end growth=${growth} KiB" \
        "(max 1024), rss_warm_kb=$rss_warm rss_end_kb=$rss_end," \
        "arena_high_water step10=$hw10 end=$hw, ms_per_step=$ms, wall ${wall}s$why"
    [ "$verdict" = PASS ] || failed=1
}
soak tiny "$tiny_iters" --preset tiny
soak small "$small_iters" --preset small
soak llama-tiny "$tiny_iters" --preset tiny --arch llama --kv-heads 1
if [ "$failed" -eq 0 ]; then echo "soak: all passed"; else echo "soak: FAILED"; fi
exit "$failed"
