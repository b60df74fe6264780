#!/usr/bin/env bash
# make valgrind [VALGRIND_ITERS=N]: train_full tiny for ITERS steps (default
# 10,000) under memcheck, in two runs that exercise checkpointing and the run
# folder (log.csv, loss.svg): the first half with --out, then --resume of its
# ckpt.bin (which continues in the same folder) to ITERS. Prints the wall time
# and valgrind's error and leak summaries; fails on any error or definite or
# indirect leak. Memcheck runs this program ~1000x slower than native (about
# 0.75 s per tiny step on a 2-core EPYC), so the default takes about 2 hours;
# About 30 ms per tiny step under memcheck (10,000 steps: about 6 minutes).
set -u
cd "$(dirname "$0")/.."

iters=${1:-10000}
if ! [[ "$iters" =~ ^[0-9]+$ ]] || [ "$iters" -lt 2 ]; then
    echo "usage: scripts/valgrind_train.sh [ITERS >= 2]" >&2
    exit 2
fi
TRAIN=build/train_full
SUPP=tests/valgrind.supp
[ -x "$TRAIN" ] || { echo "valgrind_train: $TRAIN is missing (run make examples)" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind_train: valgrind is not installed" >&2; exit 1; }
[ -f "$SUPP" ] || : >"$SUPP"
if [ -f ../shared/data/shakespeare_tiny.txt ]; then
    DATA=../shared/data/shakespeare_tiny.txt
else
    make --no-print-directory build/corpus_small.txt >/dev/null || exit 1
    DATA=build/corpus_small.txt
fi
export OPENBLAS_NUM_THREADS=1
# valgrind emulates FMA through slow helpers: OpenBLAS's default kernels
# run ~25x slower under it than its SandyBridge (AVX, no FMA) ones.
export OPENBLAS_CORETYPE=SandyBridge
work=$(mktemp -d "${TMPDIR:-/tmp}/valgrind_train.XXXXXX")
# Main shell only: bash runs an inherited EXIT trap in a subshell killed at fork.
trap 'if [ "$BASHPID" = "$$" ]; then rm -rf "$work"; fi' EXIT
half=$((iters / 2))
log_every=$(((iters + 19) / 20))
# The flags of `make test`'s valgrind runs, minus --quiet so that the
# summaries are written (to a log file of their own).
vg() { # name args...
    local name=$1
    shift
    valgrind --leak-check=full --error-exitcode=1 --errors-for-leak-kinds=definite,indirect,possible \
        --suppressions="$SUPP" --log-file="$work/$name.vg" \
        "$TRAIN" --preset tiny --data "$DATA" --log-every "$log_every" "$@"
}

failed=0
t0=$(date +%s)
run() { # name args...
    local name=$1
    shift
    local s=$(date +%s)
    echo "== valgrind $name: train_full --preset tiny $*"
    vg "$name" "$@" | grep -E '^(step|eval|checkpoint|resume|summary)'
    local rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc, $(($(date +%s) - s))s"
    grep -E 'ERROR SUMMARY|definitely lost|indirectly lost|possibly lost|still reachable|in use at exit|All heap blocks' \
        "$work/$name.vg" | sed 's/^==[0-9]*== */   /'
    if [ "$rc" -ne 0 ]; then
        failed=1
        grep -v '^==[0-9]*== *$' "$work/$name.vg" | head -n 60
    fi
}
run first --iters "$half" --out "$work/run" --lr-schedule cosine --warmup 100
[ "$failed" -eq 0 ] && run resumed --iters "$iters" --resume "$work/run/ckpt.bin" \
    --lr-schedule cosine --warmup 100
total=$(($(date +%s) - t0))
if [ "$failed" -eq 0 ]; then
    echo "valgrind: $iters steps clean (wall ${total}s)"
else
    echo "valgrind: FAILED (wall ${total}s)"
fi
exit "$failed"
