#!/usr/bin/env bash
# End-to-end checks of the C examples (run by `make test` once build/ holds
# them). One line per check, then "N passed, N failed"; non-zero exit on any
# failure. About half a minute to two minutes depending on machine load, most of it two valgrind
# runs, which start first, side by side in the background, and overlap the
# other checks (one after the other they would take ~4-5 minutes).
#
#   call-graph  no call cycle among the files of any c_examples program
#               (scripts/c_call_graph.py), which fails on a planted one
#   common      build/check_common: numbered checkpoints (keep the last K,
#               find the latest), run folders, atomic files, the schedule
#   mlp         build/mlp runs and exits 0 (skipped if not built yet)
#   guide       build/guide (the README's example): trains, evaluates, reloads (exit 0)
#   sampling    build/sampling: NUTS on a model of its own, 4 chains in parallel,
#               against its exact (conjugate) posterior: "sampling ok", exit 0
#   mlp-io      build/mlp_io: named parameters, MSE training, listing, safetensors
#               export and a bit-exact reload into a fresh context (exit 0)
#   converge    train_full tiny, 300 steps: loss < 0.75 ln V, summary well formed
#   capture     the replayed step (default) == --no-capture: the same per-step
#               losses and gradient norms, bit for bit, plain, with --accum 2
#               and with --recompute all
#   no-alloc    malloc calls (LD_PRELOAD counter) do not grow with steps, evals, samples
#   cli-*       bad arguments and data: exit 2, a message naming the flag, no training
#   resume      100 steps + --resume to 200 == 200 in one go: same per-step
#               losses, same final checkpoint bytes, same val_loss and sample
#   roundtrip   load + save without training reproduces the checkpoint bytes
#   corrupt-*   truncated / bit-flipped / mismatched checkpoints: exit 3,
#               a message, the file left byte-identical
#   arena-limit small with --arena-limit-mb 1: exit 4 before step 1, message
#               naming the cap and the smallest cap that works, an existing
#               --save file untouched
#   arena-recompute  small under --arena-limit-mb 40 (below the no-recompute
#               need, above the all-recompute need) trains with the same
#               losses as without a cap; --recompute none under it exits 4
#   resume-at-iters  a resume already at --iters reports the checkpoint's loss
#   schedule-*  log.csv's lr column against the cosine/linear/constant formulas
#   accum       batch 16 == 4 x --accum 4: per-step losses within 1e-4
#   resume-options  cosine + warm-up + accum + top-k + --out: 70 + resume to
#               120 == 120: losses, ckpt.bin, best.bin, log.csv, sample.txt
#   run-folder  the files of --out, loss.svg parses with two curves and labels
#   signal-*    SIGINT / SIGTERM: exit 130 / 143, checkpoint at that step,
#               summary last, resumable; a second signal exits at once
#   diverge     --lr 10: exit 5, a message, the last good checkpoint kept
#   sample-only the after-training sample from the checkpoint, nothing written
#   export      --export -> --sample-only --init-from: the same sample; a file
#               with GPT2LMHeadModel's names and shapes, the vocabulary in its
#               metadata, config.json beside it; another preset refuses it (exit 3)
#   weight-decay  one step with --weight-decay 0.5 vs 0: exactly the 2-D
#               parameters (wte, wpe, linear weights) differ
#   utf8        samples of a multi-byte corpus never end inside a character
#   valgrind    memcheck, tiny: 250 steps with --out, and --resume 250 -> 500
set -u
cd "$(dirname "$0")/.."

TRAIN=build/train_full
SUPP=tests/valgrind.supp
VALGRIND=(valgrind --quiet --leak-check=full --error-exitcode=1
          --errors-for-leak-kinds=definite,indirect,possible --suppressions="$SUPP")
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
# Main shell only: bash runs an inherited EXIT trap in a subshell killed at fork.
trap 'if [ "$BASHPID" = "$$" ]; then cleanup; fi' EXIT

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
    vg_run vg_save --iters 250 --out "$work/vg_out" --lr-schedule cosine --warmup 20 --top-k 5 &
    vg_pids+=($!)
    vg_run vg_resume --iters 500 --resume "$work/vg_resume.ck" --save "$work/vg_resume.ck" &
    vg_pids+=($!)
fi

# --- call graph ------------------------------------------------------------
# No file of a program calls a function of a file that calls back into it
# (two files or more): a second trainer reuses common/ and lower files only.
# The checker must also fail on a planted cycle, so that it can fail at all.
mkdir -p "$work/cycle/prog"
printf 'int b(void);\nint a(void) { return b(); }\n' >"$work/cycle/prog/a.c"
printf 'int a(void);\nint b(void) { return 0; }\nint c(void) { return a(); }\n' \
    >"$work/cycle/prog/b.c"
python3 scripts/c_call_graph.py --quiet --root "$work/cycle" >"$work/cycle.out" 2>&1
rc_planted=$?
if ! python3 scripts/c_call_graph.py --quiet >"$work/graph.out" 2>&1; then
    bad "call-graph" "a call cycle among the files of a program in c_examples"
    show "$work/graph.out" 20
elif [ "$rc_planted" -ne 1 ] || ! grep -q 'prog/a.c -> prog/b.c -> prog/a.c' "$work/cycle.out"; then
    bad "call-graph" "the checker missed a planted two-file cycle (exit $rc_planted)"
    show "$work/cycle.out"
else
    ok "call-graph ($(tail -n 1 "$work/graph.out" | sed 's/^c_call_graph: //'))"
fi

# --- common/ helpers ---------------------------------------------------------
if [ ! -x build/check_common ]; then
    bad "common" "build/check_common is missing (run make examples)"
elif build/check_common >"$work/common.out" 2>&1; then
    ok "common ($(tail -n 1 "$work/common.out" | sed 's/^check_common: //'))"
else
    bad "common" "build/check_common failed"
    show "$work/common.out" 20
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

# --- mlp-io ----------------------------------------------------------------
if [ ! -x build/mlp_io ]; then
    bad "mlp-io" "build/mlp_io is missing (run make examples)"
elif ! TMPDIR=$work build/mlp_io >"$work/mlp_io.out" 2>&1; then
    bad "mlp-io" "build/mlp_io exited non-zero"
    show "$work/mlp_io.out" 10
elif ! grep -q '^4 parameters:' "$work/mlp_io.out" ||
     ! grep -q '^  fc1.weight *\[2, 32\]' "$work/mlp_io.out" ||
     ! grep -q 'reloaded bit-exactly' "$work/mlp_io.out"; then
    bad "mlp-io" "the listing or the reload line is missing"
    show "$work/mlp_io.out" 10
elif ls "$work"/mlp_io.*.safetensors >/dev/null 2>&1; then
    bad "mlp-io" "the exported file was left behind"
else
    ok "mlp-io"
fi

# --- guide (the README's example) -------------------------------------------
if [ ! -x build/guide ]; then
    bad "guide" "build/guide is missing (run make examples)"
elif ! (bin=$PWD/build/guide; cd "$work" && "$bin") >"$work/guide.out" 2>&1; then
    bad "guide" "build/guide exited non-zero"
    show "$work/guide.out" 10
elif [ -e "$work/guide.safetensors" ]; then
    bad "guide" "the saved file was left behind"
else
    ok "guide"
fi

# --- sampling (a user's own model through the sampler API) ------------------
if [ ! -x build/sampling ]; then
    bad "sampling" "build/sampling is missing (run make examples)"
elif ! build/sampling >"$work/sampling.out" 2>&1 || [ "$(tail -n 1 "$work/sampling.out")" != "sampling ok" ]; then
    bad "sampling" "build/sampling did not match its exact posterior"
    show "$work/sampling.out" 12
else
    ok "sampling"
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

# --- capture: replaying the captured micro-batch == building it every step --
capture_ok=1
for opts in "" "--accum 2" "--recompute all"; do
    # shellcheck disable=SC2086
    tiny --iters 40 --eval-every 20 --log-every 1 --sample-chars 0 $opts --out "$work/cap-r" \
        >"$work/cap-r.out" 2>&1 &&
        # shellcheck disable=SC2086
        tiny --iters 40 --eval-every 20 --log-every 1 --sample-chars 0 $opts --out "$work/cap-e" \
            --no-capture >"$work/cap-e.out" 2>&1 || { capture_ok=0; bad "capture" "train_full failed ($opts)"; break; }
    if ! cmp -s <(cut -d, -f1-5 "$work/cap-r/log.csv") <(cut -d, -f1-5 "$work/cap-e/log.csv"); then
        capture_ok=0
        bad "capture" "replayed and eager losses differ ($opts)"
        break
    fi
    rm -rf "$work/cap-r" "$work/cap-e"
done
[ "$capture_ok" = 1 ] && ok "capture (40 steps, replay == --no-capture: plain, --accum 2, --recompute all)"

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
# Both runs sample past the context length (tiny: 32), so they make the
# same products: Intel MKL (where it runs the products) grows its packing
# buffers the first time a larger product appears, once per process, which
# is warm-up, not growth.
if gcc -O2 -shared -fPIC "$work/count.c" -o "$work/count.so" 2>"$work/count.err"; then
    a100=$(LD_PRELOAD=$work/count.so tiny --iters 100 --eval-every 50 --sample-chars 100 \
        2>&1 >/dev/null | sed -n 's/^allocations=//p')
    a600=$(LD_PRELOAD=$work/count.so tiny --iters 600 --eval-every 50 --sample-chars 500 \
        2>&1 >/dev/null | sed -n 's/^allocations=//p')
    if [ -n "$a100" ] && [ "$a100" = "$a600" ]; then
        ok "no-alloc (malloc-family calls: $a100 for 100 steps/2 evals/100 chars and for 600/12/500)"
    else
        bad "no-alloc" "allocation count grows with steps: 100 steps -> '$a100', 600 steps -> '$a600'"
    fi
    # With checkpoints, a run folder and every option: the count may grow
    # only by the library's own allocations per checkpoint written (measured
    # with --save alone), never per step, log row, plot redraw or character.
    count() { # out-file args...
        local o=$1
        shift
        LD_PRELOAD=$work/count.so tiny "$@" 2>&1 >"$o" | sed -n 's/^allocations=//p'
    }
    saves() { grep -c '^checkpoint step=' "$1"; }
    c100=$(count "$work/na_s1.out" --iters 100 --eval-every 50 --sample-chars 10 --save "$work/na.ck")
    c600=$(count "$work/na_s2.out" --iters 600 --eval-every 50 --sample-chars 10 --save "$work/na.ck")
    every=(--eval-every 50 --log-every 1 --lr-schedule cosine --warmup 10 --accum 2 --top-k 5)
    rm -rf "$work/na1" "$work/na2"
    b100=$(count "$work/na1.out" --iters 100 "${every[@]}" --sample-chars 100 --out "$work/na1")
    b600=$(count "$work/na2.out" --iters 600 "${every[@]}" --sample-chars 500 --out "$work/na2")
    per=$(((c600 - c100) / ($(saves "$work/na_s2.out") - $(saves "$work/na_s1.out"))))
    extra=$((b600 - b100))
    want=$((per * ($(saves "$work/na2.out") - $(saves "$work/na1.out"))))
    if [ -n "$b100" ] && [ -n "$b600" ] && [ "$extra" -eq "$want" ]; then
        ok "no-alloc with --out, accum, schedule, top-k (600 vs 100 steps: +$extra calls = $per per checkpoint written by the library)"
    else
        bad "no-alloc --out" "100 -> '$b100', 600 -> '$b600' calls: +$extra, but checkpoints account for $want"
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
elif ! grep -q -- '--arena-limit-mb 1 is too small' "$work/oom.err" ||
    ! grep -q 'smallest cap that works is --arena-limit-mb [0-9]' "$work/oom.err"; then
    bad "arena-limit" "message does not name the cap and the smallest one that works: $(cat "$work/oom.err")"
elif grep -q '^step \|^summary ' "$work/oom.out"; then
    bad "arena-limit" "it went past the first step"
elif ! cmp -s "$work/keep.ck" "$work/full.ck"; then
    bad "arena-limit" "the existing --save file changed"
else
    ok "arena-limit: $(head -n 1 "$work/oom.err" | cut -c1-160)"
fi

# --- arena cap with recomputation: trains, same losses as without a cap -----
recompute_run() {
    OPENBLAS_NUM_THREADS=1 "$TRAIN" --preset small --data "$DATA" --iters 4 --log-every 1 \
        --eval-every 4 --eval-iters 2 --sample-chars 0 "$@"
}
recompute_run >"$work/rc_free.out" 2>&1
recompute_run --arena-limit-mb 40 >"$work/rc_cap.out" 2>&1
rc_cap=$?
recompute_run --arena-limit-mb 40 --recompute none >"$work/rc_none.out" 2>"$work/rc_none.err"
rc_none=$?
hw=$(grep -o 'arena_high_water_bytes=[0-9]*' "$work/rc_cap.out" | cut -d= -f2)
if [ "$rc_cap" -ne 0 ]; then
    bad "arena-recompute" "--arena-limit-mb 40: exit $rc_cap, want 0"
    show "$work/rc_cap.out"
elif [ "$(losses "$work/rc_cap.out")" != "$(losses "$work/rc_free.out")" ] ||
    [ "$(summary_field "$work/rc_cap.out" val_loss)" != "$(summary_field "$work/rc_free.out" val_loss)" ]; then
    bad "arena-recompute" "losses under the cap differ from those without one"
elif [ -z "$hw" ] || [ "$hw" -gt $((40 << 20)) ]; then
    bad "arena-recompute" "arena high-water '$hw' above the cap"
elif [ "$rc_none" -ne 4 ] || ! grep -q 'smallest cap that works' "$work/rc_none.err"; then
    bad "arena-recompute" "--recompute none under the cap: exit $rc_none, want 4 naming the smallest cap"
    show "$work/rc_none.err"
else
    ok "arena-recompute: cap 40 MiB trains (arena high-water $hw bytes, same losses); $(cut -c1-120 "$work/rc_none.err")"
fi

# --- resume already at --iters: the checkpoint's figures, not NaN ----------
if [ "$(summary_field "$work/rt.out" loss)" = "$(summary_field "$work/full.out" loss)" ] &&
    [ "$(summary_field "$work/rt.out" ms_per_step)" != nan ]; then
    ok "resume-at-iters (summary loss $(summary_field "$work/rt.out" loss) restored, no NaN)"
else
    bad "resume-at-iters" "summary: $(grep '^summary ' "$work/rt.out")"
fi

# --- learning-rate schedules: log.csv's lr column against the formulas ------
# 110 steps, warm-up 10, lr 1e-3 -> min 1e-4: step 5 = 5e-4, step 10 = 1e-3,
# step 35 (a quarter of the decay) = 8.682e-4 (cosine) or 7.75e-4 (linear),
# step 110 = 1e-4.
for sched in cosine:8.68198e-4 linear:7.75e-4 constant:1e-3; do
    name=${sched%%:*} want35=${sched#*:}
    rm -rf "$work/sched"
    tiny --iters 110 --log-every 1 --eval-every 1000 --sample-chars 0 --lr 1e-3 --min-lr 1e-4 \
        --warmup 10 --lr-schedule "$name" --out "$work/sched" >"$work/sched.out" 2>&1
    rc=$?
    want110=$([ "$name" = constant ] && echo 1e-3 || echo 1e-4)
    if [ "$rc" -ne 0 ]; then
        bad "schedule $name" "exit $rc"
        show "$work/sched.out"
    elif awk -F, -v w35="$want35" -v w110="$want110" '
        function near(a, b) { return (a - b) ^ 2 <= (1e-5 * b) ^ 2 }
        NR > 1 { lr[$1] = $2 }
        END { exit !(near(lr[5], 5e-4) && near(lr[10], 1e-3) && near(lr[35], w35) &&
                     near(lr[110], w110)) }' "$work/sched/log.csv"; then
        ok "schedule $name (warm-up 5e-4 at step 5, $want35 at step 35, $want110 at the end)"
    else
        bad "schedule $name" "lr column: $(awk -F, '$1 == 5 || $1 == 10 || $1 == 35 || $1 == 110 { printf "%s=%s ", $1, $2 }' "$work/sched/log.csv")"
    fi
done

# --- gradient accumulation: accum x B == one batch of accum x B --------------
# Per-step losses within float rounding (1e-4), the same validation batches.
tiny --iters 40 --log-every 1 --batch 16 --sample-chars 0 >"$work/acc1.out" 2>&1
rc1=$?
tiny --iters 40 --log-every 1 --batch 4 --accum 4 --sample-chars 0 >"$work/acc4.out" 2>&1
rc4=$?
if [ "$rc1" -ne 0 ] || [ "$rc4" -ne 0 ]; then
    bad "accum" "exit statuses $rc1 / $rc4"
    show "$work/acc4.out"
else
    d=$(paste <(losses "$work/acc1.out") <(losses "$work/acc4.out") | awk '
        $1 != $3 { print "step mismatch"; exit } 
        { d = $2 - $4; d = d < 0 ? -d : d; if (d > m) m = d; n++ }
        END { if (n != 40) print "only " n " steps"; else printf "%.2g\n", m }')
    v1=$(summary_field "$work/acc1.out" val_loss)
    v4=$(summary_field "$work/acc4.out" val_loss)
    if ! [[ "$d" =~ ^[0-9.e-]+$ ]] || ! awk -v d="$d" 'BEGIN { exit !(d <= 1e-4) }'; then
        bad "accum" "batch 16 vs 4 x accum 4: per-step loss difference $d"
    elif ! awk -v a="$v1" -v b="$v4" 'BEGIN { d = a - b; exit !(d * d <= 1e-8) }'; then
        bad "accum" "val_loss $v1 vs $v4"
    else
        ok "accum (batch 16 vs 4 x accum 4, 40 steps: largest loss difference $d, val_loss $v1 / $v4)"
    fi
fi

# --- resume bit-exact with every option --------------------------------------
# cosine + warm-up + accumulation + top-k + run folder: 120 in one go vs 70,
# then --resume DIR/ckpt.bin (which brings the folder along) to 120. Both
# decay over 120 steps (--decay-steps), and step 70 is an evaluation step of
# both runs, so their log.csv rows are the same too.
opts=(--log-every 1 --eval-every 35 --lr 2e-3 --lr-schedule cosine --warmup 30 --min-lr 2e-4
      --decay-steps 120
      --accum 2 --batch 4 --top-k 10 --temperature 0.8)
rm -rf "$work/ofull" "$work/osplit"
tiny --iters 120 "${opts[@]}" --out "$work/ofull" >"$work/ofull.out" 2>&1
rc_full=$?
tiny --iters 70 "${opts[@]}" --out "$work/osplit" >"$work/osplit1.out" 2>&1
rc_half=$?
tiny --iters 120 "${opts[@]}" --resume "$work/osplit/ckpt.bin" >"$work/osplit2.out" 2>&1
rc_res=$?
# log.csv without the timing columns (ms/step, tok/s).
csv_det() { cut -d, -f1-5,8 "$1"; }
if [ "$rc_full" -ne 0 ] || [ "$rc_half" -ne 0 ] || [ "$rc_res" -ne 0 ]; then
    bad "resume-options" "exit statuses $rc_full / $rc_half / $rc_res"
    show "$work/osplit2.out"
elif ! grep -q "checkpoints: $work/osplit/ckpt.bin" "$work/osplit2.out"; then
    bad "resume-options" "the resumed run does not say it writes to $work/osplit/ckpt.bin"
elif ! diff -q <(losses "$work/ofull.out") <(losses "$work/osplit1.out" "$work/osplit2.out") >/dev/null; then
    bad "resume-options" "per-step losses differ"
elif ! cmp -s "$work/ofull/ckpt.bin" "$work/osplit/ckpt.bin"; then
    bad "resume-options" "losses agree but the final checkpoints differ"
elif ! cmp -s "$work/ofull/best.bin" "$work/osplit/best.bin"; then
    bad "resume-options" "best.bin differs"
elif ! diff -q <(csv_det "$work/osplit/log.csv") <(csv_det "$work/ofull/log.csv") >/dev/null; then
    bad "resume-options" "log.csv differs: $(diff <(csv_det "$work/osplit/log.csv") <(csv_det "$work/ofull/log.csv") | head -n 4 | tr '\n' ' ')"
elif ! cmp -s "$work/ofull/sample.txt" "$work/osplit/sample.txt"; then
    bad "resume-options" "sample.txt differs"
else
    ok "resume-options (cosine, warm-up, accum, top-k: 70 + resume 50 == 120: losses, ckpt.bin, best.bin, log.csv, sample identical)"
fi

# --- run folder: files, plot, and writability before the first step ----------
f=$work/ofull
if [ -s "$f/ckpt.bin" ] && [ -s "$f/best.bin" ] && [ -s "$f/sample.txt" ] &&
    [ "$(head -n 1 "$f/log.csv")" = "step,lr,train_loss,val_loss,grad_norm,ms_per_step,tok_per_s,arena_high_water_bytes" ] &&
    python3 - "$f/loss.svg" <<'EOF'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
ns = "{http://www.w3.org/2000/svg}"
texts = [t.text or "" for t in root.iter(ns + "text")]
lines = root.findall(f".//{ns}polyline")
assert root.tag == ns + "svg", root.tag
assert "step" in texts and any(t.startswith("loss") for t in texts), texts
assert len(lines) == 2 and all(len(l.get("points").split()) >= 3 for l in lines)
EOF
then
    ok "run-folder (ckpt.bin, best.bin, log.csv header, sample.txt; loss.svg parses, 2 curves, labelled axes)"
else
    bad "run-folder" "missing or malformed files in $f: $(ls "$f" | tr '\n' ' ')"
fi
: >"$work/plainfile"
cli "out under a file" "$work/plainfile" --data "$DATA" --out "$work/plainfile/run"
cli "save to unwritable" "/proc" --data "$DATA" --save /proc/x.ckpt
cli "sample-only without resume" "--resume" --data "$DATA" --sample-only
cli "min-lr above lr" "--min-lr" --data "$DATA" --lr 1e-3 --min-lr 1e-2
cli "unknown schedule" "cosin" --data "$DATA" --lr-schedule cosin

# --- signals: finish the step, save, summary, exit 130 / 143, resumable ------
# wait_for FILE PATTERN: up to 60 s for PATTERN to appear in FILE.
wait_for() {
    local i
    for ((i = 0; i < 600; i++)); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}
# wait_exit PID: its exit status; a watchdog kills it (SIGKILL: 137) if it
# still runs after 60 s, so a signal that is ignored fails the test, not hangs it.
wait_exit() {
    local watchdog rc
    (sleep 60 && kill -KILL "$1" 2>/dev/null) &
    watchdog=$!
    wait "$1"
    rc=$?
    pkill -P "$watchdog" 2>/dev/null
    kill "$watchdog" 2>/dev/null
    wait "$watchdog" 2>/dev/null
    return "$rc"
}
for sig in INT TERM; do
    want=$([ $sig = INT ] && echo 130 || echo 143)
    # The last round's sig.out holds the pattern wait_for looks for: without
    # removing it, the signal could reach the child before it ran train_full.
    rm -rf "$work/sig" "$work/sig.out" "$work/sig.err" "$work/sig2.out"
    # Started directly (not through a shell function) so that $! is train_full.
    OPENBLAS_NUM_THREADS=1 "$TRAIN" --preset tiny --data "$DATA" --iters 1000000 --eval-every 100 \
        --out "$work/sig" >"$work/sig.out" 2>"$work/sig.err" &
    pid=$!
    wait_for "$work/sig.out" '^eval step 100 ' # past the first checkpoint
    kill -"$sig" "$pid"
    wait_exit "$pid"
    rc=$?
    at=$(summary_field "$work/sig.out" iters)
    tiny --iters $((at + 5)) --resume "$work/sig/ckpt.bin" >"$work/sig2.out" 2>&1
    rc2=$?
    if [ "$rc" -ne "$want" ]; then
        bad "signal $sig" "exit $rc, want $want"
        show "$work/sig.err"
    elif [ "$(summary_field "$work/sig.out" status)" != interrupted ] ||
        [ "$(tail -n 1 "$work/sig.out" | cut -d' ' -f1)" != summary ]; then
        bad "signal $sig" "no summary line with status=interrupted at the end"
        show "$work/sig.out"
    elif ! grep -q "^checkpoint step=$at saved $work/sig/ckpt.bin" "$work/sig.out"; then
        bad "signal $sig" "no checkpoint at the interrupted step $at"
    elif [ "$rc2" -ne 0 ] || ! grep -q "^resume: $work/sig/ckpt.bin at step $at " "$work/sig2.out" ||
        [ "$(summary_field "$work/sig2.out" iters)" != $((at + 5)) ]; then
        bad "signal $sig" "resuming the checkpoint: exit $rc2"
        show "$work/sig2.out"
    else
        ok "signal $sig (exit $rc at step $at, checkpoint and summary written, resumed to $((at + 5)))"
    fi
done
# A second signal exits at once: SIGTERM then SIGINT during a small-preset
# step gives 130 (the immediate exit), not 143 (the orderly one), and no summary.
rm -f "$work/sig3.out" "$work/sig3.err"
OPENBLAS_NUM_THREADS=1 "$TRAIN" --preset small --data "$DATA" --iters 1000000 \
    >"$work/sig3.out" 2>"$work/sig3.err" &
pid=$!
wait_for "$work/sig3.out" '^step 1/'
kill -TERM "$pid"
sleep 0.05
kill -INT "$pid"
wait_exit "$pid"
rc=$?
if [ "$rc" -eq 130 ] && ! grep -q '^summary ' "$work/sig3.out" && grep -q 'second signal' "$work/sig3.err"; then
    ok "signal twice (exit 130 at once, no summary)"
else
    bad "signal twice" "exit $rc (want 130 and no summary)"
    show "$work/sig3.err"
fi

# --- divergence: distinct exit code, message, last good checkpoint kept ------
# From a good checkpoint at step 100, --lr 10 breaks the model in one update:
# the evaluation after it fails the guard, so ckpt.bin stays the step-100 one.
rm -rf "$work/div"
tiny --iters 100 --eval-every 50 --sample-chars 0 --out "$work/div" >"$work/div.out" 2>&1
cp "$work/div/ckpt.bin" "$work/div_before.ck" 2>/dev/null
tiny --iters 300 --lr 10 --eval-every 1 --resume "$work/div/ckpt.bin" >"$work/div2.out" 2>"$work/div2.err"
rc=$?
# And from a fresh start: the training loss of step 2 trips it.
tiny --iters 300 --lr 10 >"$work/div3.out" 2>"$work/div3.err"
rc3=$?
if [ "$rc" -ne 5 ] || [ "$rc3" -ne 5 ]; then
    bad "diverge" "--lr 10: exit $rc and $rc3, want 5"
    show "$work/div2.err"
elif ! grep -q 'diverged' "$work/div2.err" || ! grep -q 'diverged' "$work/div3.err" ||
    [ "$(summary_field "$work/div2.out" status)" != diverged ]; then
    bad "diverge" "no message or summary status"
elif ! cmp -s "$work/div/ckpt.bin" "$work/div_before.ck"; then
    bad "diverge" "the checkpoint was overwritten by the diverged run"
else
    ok "diverge (--lr 10: exit 5, '$(grep -m 1 diverged "$work/div3.err" | cut -c1-80)...', checkpoint kept)"
fi

# --- sampling from a checkpoint ----------------------------------------------
# --sample-only reproduces the end-of-training sample, writes only stdout,
# and top-k 1 is greedy (the same text for any seed).
cp "$work/full.ck" "$work/so_before.ck"
tiny --sample-only --resume "$work/full.ck" >"$work/so.out" 2>"$work/so.err"
rc=$?
tiny --sample-only --resume "$work/full.ck" --top-k 1 --seed 1 --sample-chars 80 >"$work/so1.out" 2>/dev/null
tiny --sample-only --resume "$work/full.ck" --top-k 1 --seed 2 --sample-chars 80 >"$work/so2.out" 2>/dev/null
tiny --sample-only --resume "$work/full.ck" --seed 2 --sample-chars 80 >"$work/so3.out" 2>/dev/null
tiny --sample-only --resume "$work/full.ck" --seed 3 --sample-chars 80 >"$work/so4.out" 2>/dev/null
if [ "$rc" -ne 0 ]; then
    bad "sample-only" "exit $rc"
    show "$work/so.err"
elif [ "$(cat "$work/so.out")" != "$(sample_text "$work/full.out")" ]; then
    bad "sample-only" "the sample differs from the one printed after training"
elif ! cmp -s "$work/full.ck" "$work/so_before.ck" || grep -q '^step ' "$work/so.err"; then
    bad "sample-only" "it trained or changed the checkpoint"
elif ! cmp -s "$work/so1.out" "$work/so2.out" || cmp -s "$work/so3.out" "$work/so4.out"; then
    bad "sample-only" "top-k 1 depends on the seed, or --seed does nothing"
else
    ok "sample-only (same text as after training, checkpoint untouched, top-k 1 greedy)"
fi

# --- safetensors export and --init-from ---------------------------------------
# The parameters exported after training, loaded by --init-from, give the
# sample printed after training; the file holds the names and shapes of
# transformers' GPT2LMHeadModel, the vocabulary in its metadata, and
# config.json beside it (make test-interop loads the folder in transformers).
# st_tensors FILE: "name shape" lines (the format: u64 header length, JSON).
st_tensors() {
    python3 - "$1" <<'EOF'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
for k, v in sorted(json.loads(b[8:8 + n]).items()):
    if k != "__metadata__":
        print(k, "x".join(str(d) for d in v["shape"]))
EOF
}
# st_config FILE DIR: the metadata's format, vocabulary length, header
# length mod 8, and config.json's fields.
st_config() {
    python3 - "$1" "$2" <<'EOF'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
meta = json.loads(b[8:8 + n])["__metadata__"]
c = json.load(open(sys.argv[2] + "/config.json"))
print(meta["format"], len(bytes.fromhex(meta["vocab_hex"])), n % 8,
      *(c[k] for k in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head",
                       "activation_function", "layer_norm_epsilon", "tie_word_embeddings")))
EOF
}
tiny --iters 40 --eval-every 40 --sample-chars 120 --export "$work/ex.safetensors" >"$work/ex.out" 2>&1
rc=$?
tiny --sample-only --init-from "$work/ex.safetensors" --sample-chars 120 >"$work/ex_so.out" 2>"$work/ex_so.err"
rc2=$?
tiny --preset small --sample-only --init-from "$work/ex.safetensors" >/dev/null 2>"$work/ex_bad.err"
rc3=$?
V=$(grep -o 'V=[0-9]*' "$work/ex.out" | head -1 | cut -d= -f2)
want="transformer.h.0.attn.c_attn.bias 96
transformer.h.0.attn.c_attn.weight 32x96
transformer.h.0.attn.c_proj.bias 32
transformer.h.0.attn.c_proj.weight 32x32
transformer.h.0.ln_1.bias 32
transformer.h.0.ln_1.weight 32
transformer.h.0.ln_2.bias 32
transformer.h.0.ln_2.weight 32
transformer.h.0.mlp.c_fc.bias 128
transformer.h.0.mlp.c_fc.weight 32x128
transformer.h.0.mlp.c_proj.bias 32
transformer.h.0.mlp.c_proj.weight 128x32
transformer.ln_f.bias 32
transformer.ln_f.weight 32
transformer.wpe.weight 32x32
transformer.wte.weight ${V}x32"
if [ "$rc" -ne 0 ] || [ "$rc2" -ne 0 ]; then
    bad "export" "exit $rc (train --export) / $rc2 (--sample-only --init-from)"
    show "$work/ex.out"
    show "$work/ex_so.err"
elif [ "$(cat "$work/ex_so.out")" != "$(sample_text "$work/ex.out")" ]; then
    bad "export" "the --init-from sample differs from the one printed after training"
elif [ "$(st_tensors "$work/ex.safetensors")" != "$want" ]; then
    bad "export" "names or shapes differ from GPT-2's"
    st_tensors "$work/ex.safetensors" | sed 's/^/    | /'
elif [ "$(st_config "$work/ex.safetensors" "$work" 2>&1)" != "pt $V 0 $V 32 32 1 2 gelu_new 1e-05 True" ]; then
    bad "export" "metadata or config.json wrong: $(st_config "$work/ex.safetensors" "$work" 2>&1 | tail -1)"
elif [ "$rc3" -ne 3 ] || ! grep -q 'init-from.*does not match' "$work/ex_bad.err"; then
    bad "export" "another preset's --init-from: exit $rc3, expected 3 and a message"
    show "$work/ex_bad.err"
else
    ok "export (--init-from samples the same text; GPT-2 names, vocabulary, config.json; another preset refused)"
fi

# --- weight decay: matrices only ------------------------------------------------
# After one step from the same start, --weight-decay changes exactly the 2-D
# parameters: the gradients of the first step do not depend on the decay.
tiny --iters 1 --sample-chars 0 --export "$work/wd0.safetensors" >"$work/wd0.out" 2>&1
tiny --iters 1 --sample-chars 0 --weight-decay 0.5 --export "$work/wd1.safetensors" >"$work/wd1.out" 2>&1
changed=$(python3 - "$work/wd0.safetensors" "$work/wd1.safetensors" <<'EOF'
import json, struct, sys
def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: (v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}
a, b = read(sys.argv[1]), read(sys.argv[2])
for k in sorted(a):
    print(k, len(a[k][0]), "changed" if a[k][1] != b[k][1] else "same")
EOF
)
if ! grep -q 'wd 0.5 on matrices' "$work/wd1.out"; then
    bad "weight-decay" "the run does not report the decay"
    show "$work/wd1.out"
elif [ -z "$changed" ] || echo "$changed" | grep -q -e ' 2 same' -e ' 1 changed'; then
    bad "weight-decay" "not exactly the 2-D parameters changed"
    echo "$changed" | sed 's/^/    | /'
else
    ok "weight-decay (one step: $(echo "$changed" | grep -c ' 2 changed') matrices changed, $(echo "$changed" | grep -c ' 1 same') vectors identical)"
fi

# --- UTF-8: a sample never ends inside a multi-byte character ----------------
# A corpus of mostly 2-, 3- and 4-byte characters, a barely trained model and
# a high temperature: byte-level samples of many lengths and seeds must decode
# as strict UTF-8 (a cut character fails) to the prompt plus n characters.
python3 - "$work/utf8.txt" <<'EOF'
import sys
line = "Ça fait déjà l'été. 夏の夜の夢、冬物語。Ωμέγα αβγ — 🎭 ñ ü\n"
open(sys.argv[1], "w", encoding="utf-8").write(line * 400)
EOF
OPENBLAS_NUM_THREADS=1 "$TRAIN" --preset tiny --data "$work/utf8.txt" --iters 20 --sample-chars 0 \
    --save "$work/utf8.ck" >/dev/null 2>&1
utf8_bad=""
for n in 1 2 3 5 8 13 21 34 55 89; do
    for seed in 1 2 3; do
        OPENBLAS_NUM_THREADS=1 "$TRAIN" --preset tiny --data "$work/utf8.txt" --sample-only \
            --resume "$work/utf8.ck" --sample-chars $n --seed $seed --temperature 2 \
            --prompt "é" >"$work/u.out" 2>/dev/null || utf8_bad="$utf8_bad exit($n,$seed)"
        python3 - "$work/u.out" $n <<'EOF' || utf8_bad="$utf8_bad $n/$seed"
import sys
data = open(sys.argv[1], "rb").read()[:-1]  # the final newline
text = data.decode("utf-8")                 # strict: fails on a cut character
sys.exit(0 if len(text) == 1 + int(sys.argv[2]) else 1)  # prompt + n characters
EOF
    done
done
if [ -z "$utf8_bad" ]; then
    ok "utf8 (30 samples of 1..89 characters at temperature 2: valid UTF-8, exactly n characters)"
else
    bad "utf8" "samples ending mid-character (chars/seed):$utf8_bad"
fi

# --- valgrind results --------------------------------------------------------
if [ "${#vg_pids[@]}" -eq 0 ]; then
    bad "valgrind" "valgrind is not installed"
else
    wait "${vg_pids[@]}"
    vg_pids=()
    for name in vg_save vg_resume; do
        what=$([ $name = vg_save ] && echo "250 steps, --out, cosine" || echo "--resume 250 -> 500, --save")
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
