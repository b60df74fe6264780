#!/usr/bin/env bash
# End-to-end checks of the C examples (run by `make test` once build/ holds
# them). One line per check, then "N passed, N failed"; non-zero exit on any
# failure. About half a minute to two minutes depending on machine load, most of it two valgrind
# runs, which start first, side by side in the background, and overlap the
# other checks (one after the other they would take ~4-5 minutes).
#
#   mlp         build/mlp runs and exits 0 (skipped if not built yet)
#   converge    train_full tiny, 300 steps: loss < 0.75 ln V, summary well formed
#   no-alloc    malloc calls (LD_PRELOAD counter) do not grow with steps, evals, samples
#   cli-*       bad arguments and data: exit 2, a message naming the flag, no training
#   resume      100 steps + --resume to 200 == 200 in one go: same per-step
#               losses, same final checkpoint bytes, same val_loss and sample
#   roundtrip   load + save without training reproduces the checkpoint bytes
#   corrupt-*   truncated / bit-flipped / mismatched checkpoints: exit 3,
#               a message, the file left byte-identical
#   arena-limit small with --arena-limit-mb 1: exit 4 at step 1, message with
#               the bytes and the cap, an existing --save file untouched
#   valgrind    memcheck, tiny: 250 steps with --save, and --resume 250 -> 500
set -u
cd "$(dirname "$0")/.."

TRAIN=build/train_full
SUPP=tests/valgrind.supp
VALGRIND=(valgrind --quiet --leak-check=full --error-exitcode=1
          --errors-for-leak-kinds=definite,indirect --suppressions="$SUPP")
pass=0
fail=0
t_start=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/test_examples.XXXXXX")
vg_pids=()
cleanup() {
    local p
    for p in "${vg_pids[@]}"; do
        pkill -P "$p" 2>/dev/null
        kill "$p" 2>/dev/null
    done
    rm -rf "$work"
}
trap cleanup EXIT

ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() {
    echo "FAIL $1: $2"
    fail=$((fail + 1))
}
# Prints the last lines of a log under a failure, indented.
show() { tail -n "${2:-5}" "$1" | sed 's/^/    | /'; }

if [ ! -x "$TRAIN" ]; then
    echo "FAIL build: $TRAIN is missing (run make examples)"
    echo "0 passed, 1 failed"
    exit 1
fi
if [ -f ../shared/data/shakespeare_tiny.txt ]; then
    DATA=../shared/data/shakespeare_tiny.txt
else
    make --no-print-directory build/corpus_small.txt >/dev/null || exit 1
    DATA=build/corpus_small.txt
fi
echo "data: $DATA"
[ -f "$SUPP" ] || : >"$SUPP"

# Deterministic and valgrind runs use one BLAS thread.
tiny() { OPENBLAS_NUM_THREADS=1 "$TRAIN" --preset tiny --data "$DATA" "$@"; }
# "step N/M loss X ..." lines -> "N X".
losses() { grep -h '^step ' "$@" | awk '{ split($2, s, "/"); print s[1], $4 }'; }
summary_field() { grep '^summary ' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
sample_text() { awk '/^----$/ { n++; next } n == 1' "$1"; }

# --- valgrind, in the background (the longest check) -------------------------
# Two memcheck runs side by side (2 cores), 500 tiny steps in all: a fresh
# run of 250 steps with --save, and a --resume from a native 250-step
# checkpoint to step 500 with --save. OpenBLAS is told to use its
# SandyBridge (AVX, no FMA) kernels: valgrind emulates FMA instructions
# through slow helpers, so the default kernels run ~25x slower under it
# (0.7 s vs 0.03 s per tiny step); memcheck checks arenagrad and
# train_full, not which BLAS kernel runs.
vg_pids=()
if command -v valgrind >/dev/null; then
    tiny --iters 250 --save "$work/vg_resume.ck" >/dev/null 2>&1
    vg_run() { # name args...
        local name=$1
        shift
        local t0
        t0=$(date +%s)
        OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=SandyBridge "${VALGRIND[@]}" "$TRAIN" --preset tiny --data "$DATA" \
            --eval-iters 2 --sample-chars 50 "$@" >"$work/$name.out" 2>"$work/$name.err"
        echo "$? $(($(date +%s) - t0))" >"$work/$name.rc"
    }
    vg_run vg_save --iters 250 --save "$work/vg_save.ck" &
    vg_pids+=($!)
    vg_run vg_resume --iters 500 --resume "$work/vg_resume.ck" --save "$work/vg_resume.ck" &
    vg_pids+=($!)
fi

# --- mlp -------------------------------------------------------------------
if [ -x build/mlp ]; then
    if build/mlp >"$work/mlp.out" 2>&1; then ok "mlp"; else
        bad "mlp" "build/mlp exited $?"
        show "$work/mlp.out"
    fi
else
    echo "SKIP mlp: build/mlp does not exist yet"
fi

# --- convergence -------------------------------------------------------------
out=$work/converge.out
if tiny --iters 300 >"$out" 2>"$work/converge.err"; then
    V=$(sed -n 's/.* V=\([0-9]*\) distinct.*/\1/p' "$out")
    loss=$(summary_field "$out" loss)
    last=$(tail -n 1 "$out")
    keys="preset iters loss val_loss ms_per_step tok_per_s rss_warm_kb rss_end_kb arena_high_water_bytes params"
    missing=""
    for k in $keys; do
        re="(^| )$k=[^ ]+"
        [[ "$last" =~ $re ]] || missing="$missing $k"
    done
    if [ -z "$V" ] || [ -z "$loss" ]; then
        bad "converge" "no V or loss in the output"
        show "$out"
    elif [ "${last%% *}" != summary ] || [ -n "$missing" ]; then
        bad "converge" "last line is not a full summary (missing:$missing): $last"
    elif awk -v l="$loss" -v v="$V" 'BEGIN { exit !(l < 0.75 * log(v)) }'; then
        ok "converge (tiny 300 steps: loss $loss < 0.75 ln $V = $(awk -v v="$V" 'BEGIN { printf "%.3f", 0.75 * log(v) }'))"
    else
        bad "converge" "loss $loss is not below 0.75 ln $V"
    fi
else
    bad "converge" "train_full exited $?"
    show "$work/converge.err"
fi

# --- no allocation per step: malloc counts do not grow with the step count --
# An LD_PRELOAD counter over malloc/calloc/realloc/posix_memalign/
# aligned_alloc/memalign (the library's Rust allocator and the C code alike).
# 100 steps, 2 evaluations, 10 sampled characters vs 600 steps, 12
# evaluations, 500 characters: the totals must be equal, so neither a
# training step, an evaluation nor a sampled character allocates.
cat >"$work/count.c" <<'CEOF'
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
static unsigned long n;
void *malloc(size_t s) { n++; return __libc_malloc(s); }
void *calloc(size_t a, size_t b) { n++; return __libc_calloc(a, b); }
void *realloc(void *p, size_t s) { n++; return __libc_realloc(p, s); }
void *memalign(size_t a, size_t s) { n++; return __libc_memalign(a, s); }
void *aligned_alloc(size_t a, size_t s) { n++; return __libc_memalign(a, s); }
int posix_memalign(void **p, size_t a, size_t s)
{
    n++;
    void *r = __libc_memalign(a, s);
    if (r == NULL) return 12;
    *p = r;
    return 0;
}
__attribute__((destructor)) static void report(void)
{
    char b[64];
    int k = snprintf(b, sizeof b, "allocations=%lu\n", n);
    if (write(2, b, (size_t)k) < 0) _exit(1);
}
CEOF
if gcc -O2 -shared -fPIC "$work/count.c" -o "$work/count.so" 2>"$work/count.err"; then
    a100=$(LD_PRELOAD=$work/count.so tiny --iters 100 --eval-every 50 --sample-chars 10 \
        2>&1 >/dev/null | sed -n 's/^allocations=//p')
    a600=$(LD_PRELOAD=$work/count.so tiny --iters 600 --eval-every 50 --sample-chars 500 \
        2>&1 >/dev/null | sed -n 's/^allocations=//p')
    if [ -n "$a100" ] && [ "$a100" = "$a600" ]; then
        ok "no-alloc (malloc-family calls: $a100 for 100 steps/2 evals/10 chars and for 600/12/500)"
    else
        bad "no-alloc" "allocation count grows with steps: 100 steps -> '$a100', 600 steps -> '$a600'"
    fi
else
    echo "SKIP no-alloc: cannot build the LD_PRELOAD counter ($(head -n 1 "$work/count.err"))"
fi

# --- bad arguments: exit 2, a message naming the flag, no training -----------
head -c 100 "$DATA" >"$work/short.txt"    # shorter than T+1 after the split
head -c 300 "$DATA" >"$work/noval.txt"    # 270 train bytes, 30 val bytes < T+1
cli() { # name expected-substring args...
    local name=$1 want=$2
    shift 2
    OPENBLAS_NUM_THREADS=1 "$TRAIN" "$@" >"$work/cli.out" 2>"$work/cli.err"
    local rc=$?
    if [ "$rc" -ne 2 ]; then
        bad "cli $name" "exit $rc, want 2 ($*)"
    elif ! grep -qF -- "$want" "$work/cli.err"; then
        bad "cli $name" "stderr does not mention '$want': $(head -c 200 "$work/cli.err")"
    elif grep -q '^step \|^summary ' "$work/cli.out"; then
        bad "cli $name" "it trained anyway"
    else
        ok "cli $name: $(head -n 1 "$work/cli.err")"
    fi
}
cli "unknown flag" "--bogus" --data "$DATA" --bogus
cli "missing value" "--iters" --data "$DATA" --iters
cli "trailing garbage" "12x" --data "$DATA" --iters 12x
cli "not a number" "--lr" --data "$DATA" --lr abc
cli "zero count" "--iters" --data "$DATA" --iters 0
cli "negative count" "--batch" --data "$DATA" --batch -4
cli "zero eval-every" "--eval-every" --data "$DATA" --eval-every 0
cli "temperature 0" "--temperature" --data "$DATA" --temperature 0
cli "negative temperature" "--temperature" --data "$DATA" --temperature -0.5
cli "lr nan" "--lr" --data "$DATA" --lr nan
cli "unknown preset" "huge" --data "$DATA" --preset huge
cli "short form garbage" "--small" --data "$DATA" --small 5k
cli "stray argument" "stray" --data "$DATA" stray
cli "missing data" "$work/nope.txt" --data "$work/nope.txt"
cli "data is a folder" "$work" --data "$work"
cli "data < T+1" "too short" --data "$work/short.txt"
cli "no val split" "too short" --data "$work/noval.txt"
if OPENBLAS_NUM_THREADS=1 "$TRAIN" --help >"$work/help.out" 2>&1 && grep -q -- '--resume' "$work/help.out"; then
    ok "cli --help exits 0 with usage"
else
    bad "cli --help" "no usage or non-zero exit"
fi

# --- resume equivalence and round trip ---------------------------------------
# One go: 200 steps. Split: 100 steps, save, resume to 200.
tiny --iters 200 --log-every 1 --save "$work/full.ck" >"$work/full.out" 2>&1
rc_full=$?
tiny --iters 100 --log-every 1 --save "$work/half.ck" >"$work/half.out" 2>&1
rc_half=$?
cp "$work/half.ck" "$work/half_copy.ck" 2>/dev/null
tiny --iters 200 --log-every 1 --resume "$work/half.ck" --save "$work/resumed.ck" \
    >"$work/resumed.out" 2>&1
rc_res=$?
if [ "$rc_full" -ne 0 ] || [ "$rc_half" -ne 0 ] || [ "$rc_res" -ne 0 ]; then
    bad "resume" "exit statuses $rc_full / $rc_half / $rc_res"
    show "$work/resumed.out"
else
    losses "$work/full.out" >"$work/l_full.txt"
    losses "$work/half.out" "$work/resumed.out" >"$work/l_split.txt"
    n=$(wc -l <"$work/l_full.txt")
    if [ "$n" -ne 200 ]; then
        bad "resume" "expected 200 step lines, got $n"
    elif ! diff -q "$work/l_full.txt" "$work/l_split.txt" >/dev/null; then
        bad "resume" "per-step losses differ: $(diff "$work/l_full.txt" "$work/l_split.txt" | head -n 3 | tr '\n' ' ')"
    elif ! cmp -s "$work/full.ck" "$work/resumed.ck"; then
        bad "resume" "losses agree but the final checkpoints differ"
    elif [ "$(summary_field "$work/full.out" val_loss)" != "$(summary_field "$work/resumed.out" val_loss)" ] ||
        [ "$(sample_text "$work/full.out")" != "$(sample_text "$work/resumed.out")" ]; then
        bad "resume" "val_loss or sample differ"
    else
        ok "resume (100 + resume 100 == 200: 200 losses, checkpoint bytes, val_loss and sample identical)"
    fi
fi
# Round trip: load the 200-step checkpoint, train nothing, save: same bytes.
tiny --iters 200 --resume "$work/full.ck" --save "$work/roundtrip.ck" >"$work/rt.out" 2>&1
rc=$?
if [ "$rc" -ne 0 ]; then
    bad "roundtrip" "exit $rc"
    show "$work/rt.out"
elif ! cmp -s "$work/full.ck" "$work/roundtrip.ck"; then
    bad "roundtrip" "load + save changed the checkpoint"
elif [ "$(summary_field "$work/full.out" val_loss)" != "$(summary_field "$work/rt.out" val_loss)" ]; then
    bad "roundtrip" "val_loss after load differs"
else
    ok "roundtrip (load + save is byte-identical, val_loss $(summary_field "$work/rt.out" val_loss) reproduced)"
fi

# --- damaged and mismatched checkpoints: exit 3, file untouched --------------
size=$(wc -c <"$work/full.ck")
head -c $((size / 2)) "$work/full.ck" >"$work/trunc.ck"
head -c $((size - 1)) "$work/full.ck" >"$work/trunc1.ck"
python3 - "$work/full.ck" "$work/flip.ck" "$work/flip_user.ck" <<'EOF'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
mid = bytearray(data); mid[len(mid) // 2] ^= 0x04                 # a parameter byte
open(sys.argv[2], "wb").write(mid)
tail = bytearray(data); tail[len(tail) - 40] ^= 0x80              # inside the user blob
open(sys.argv[3], "wb").write(tail)
EOF
refused() { # name file [extra args]
    local name=$1 ck=$2
    shift 2
    cp "$ck" "$work/before.ck"
    tiny --iters 300 --resume "$ck" --save "$ck" "$@" >"$work/ref.out" 2>"$work/ref.err"
    local rc=$?
    if [ "$rc" -ne 3 ]; then
        bad "$name" "exit $rc, want 3"
        show "$work/ref.err"
    elif ! [ -s "$work/ref.err" ]; then
        bad "$name" "no message"
    elif ! cmp -s "$ck" "$work/before.ck"; then
        bad "$name" "the checkpoint file changed"
    elif grep -q '^step ' "$work/ref.out"; then
        bad "$name" "it trained anyway"
    else
        ok "$name: $(head -n 1 "$work/ref.err")"
    fi
}
refused "corrupt-truncated" "$work/trunc.ck"
refused "corrupt-truncated-1-byte" "$work/trunc1.ck"
refused "corrupt-bitflip" "$work/flip.ck"
refused "corrupt-bitflip-user" "$work/flip_user.ck"
# Same library format, other model: a tiny checkpoint resumed as small.
cp "$work/full.ck" "$work/mismatch.ck"
cp "$work/mismatch.ck" "$work/before.ck"
OPENBLAS_NUM_THREADS=1 "$TRAIN" --preset small --data "$DATA" --iters 10 \
    --resume "$work/mismatch.ck" --save "$work/mismatch.ck" >"$work/mm.out" 2>"$work/mm.err"
rc=$?
if [ "$rc" -eq 3 ] && [ -s "$work/mm.err" ] && cmp -s "$work/mismatch.ck" "$work/before.ck"; then
    ok "corrupt-mismatch: $(head -n 1 "$work/mm.err")"
else
    bad "corrupt-mismatch" "exit $rc (want 3), or the file changed"
    show "$work/mm.err"
fi

# --- arena limit: exit 4 at the first step, --save file untouched ------------
cp "$work/full.ck" "$work/keep.ck"
OPENBLAS_NUM_THREADS=1 "$TRAIN" --preset small --data "$DATA" --iters 50 --arena-limit-mb 1 \
    --save "$work/keep.ck" >"$work/oom.out" 2>"$work/oom.err"
rc=$?
if [ "$rc" -ne 4 ]; then
    bad "arena-limit" "exit $rc, want 4"
    show "$work/oom.err"
elif ! grep -q 'step 1:' "$work/oom.err" || ! grep -q '1048576' "$work/oom.err"; then
    bad "arena-limit" "message does not name step 1 and the cap: $(cat "$work/oom.err")"
elif grep -q '^step \|^summary ' "$work/oom.out"; then
    bad "arena-limit" "it went past the first step"
elif ! cmp -s "$work/keep.ck" "$work/full.ck"; then
    bad "arena-limit" "the existing --save file changed"
else
    ok "arena-limit: $(head -n 1 "$work/oom.err" | cut -c1-160)"
fi

# --- valgrind results --------------------------------------------------------
if [ "${#vg_pids[@]}" -eq 0 ]; then
    bad "valgrind" "valgrind is not installed"
else
    wait "${vg_pids[@]}"
    vg_pids=()
    for name in vg_save vg_resume; do
        what=$([ $name = vg_save ] && echo "250 steps, --save" || echo "--resume 250 -> 500, --save")
        read -r rc secs <"$work/$name.rc" 2>/dev/null || rc=missing
        if [ "$rc" = 0 ] && grep -q '^summary ' "$work/$name.out"; then
            ok "valgrind $what (memcheck: 0 errors, 0 definite/indirect leaks, ${secs}s)"
        else
            bad "valgrind $what" "exit $rc"
            show "$work/$name.err" 30
        fi
    done
fi

echo "time: $(($(date +%s) - t_start))s"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
