#!/usr/bin/env bash
# Data-parallel train_full over MPI against one process (run by `make test`
# when mpirun is installed; skipped with a note otherwise). One line per
# check, then "N passed, N failed"; non-zero exit on any failure. About
# 20-40 s, mostly mpirun's start-up.
#
#   equivalence  mpirun -np 2 build/train_full_mpi vs build/train_full, same
#                global batch (tiny, 20 steps): per-step losses within 1e-5
#                relative, parameters within 1e-4
#   replicas     the two ranks' parameters and AdamW moments are
#                bit-identical (each rank writes them with
#                TRAIN_FULL_RANK_EXPORT)
#   files        only rank 0 writes (its run folder; no file from rank 1)
#   overlap      the default all-reduce of 16 KiB buckets during backward
#                == --allreduce blocking, bit for bit (rank checkpoints)
#   zero         --zero 1: AdamW state per rank halved (printed), parameters
#                after 20 steps bit-identical to the unsharded run
#   resume       under MPI, 10 steps + --resume to 20 == 20 in one go: the
#                same log and a byte-identical checkpoint
#   zero ckpt    --zero 1 checkpoints gather to rank 0: at step 10 the
#                file is the unsharded 2-rank run's byte for byte; --resume
#                from it with --zero 1 on 2 ranks == the straight run (log,
#                step-20 checkpoint bytes); 1 process resumes from it, and
#                --zero 1 on 2 ranks resumes from a 1-process file, both
#                within the equivalence tolerances of the straight runs
#   bad batch    a batch that does not split over the ranks: exit 2, a clear
#                message, nothing trained
#   bad flags    --zero 2 and an unknown --allreduce mode: exit 2, a clear
#                message
#   rank error   a failure on rank 0 only (an unreadable --resume) ends every
#                rank with its exit status (3) instead of hanging
#   rank 0 reads rank 1 runs in a folder without the files: a relative
#                --data, --init-from and --resume exist for rank 0 only, and
#                the run equals the one where both ranks have them
set -u
cd "$(dirname "$0")/.."

ONE=build/train_full
MPI=build/train_full_mpi
NP=2
pass=0
fail=0
t_start=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/test_mpi.XXXXXX")
# Main shell only: bash runs an inherited EXIT trap in a subshell killed at fork.
trap 'if [ "$BASHPID" = "$$" ]; then rm -rf "$work"; fi' EXIT

ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() {
    echo "FAIL $1: $2"
    fail=$((fail + 1))
}
show() { tail -n "${2:-8}" "$1" | sed 's/^/    | /'; }

if ! command -v mpirun >/dev/null 2>&1; then
    echo "test_mpi: mpirun not found (make deps installs openmpi-bin): skipped"
    exit 0
fi
for b in "$ONE" "$MPI"; do
    if [ ! -x "$b" ]; then
        echo "FAIL build: $b is missing (run make examples with mpicc installed)"
        echo "0 passed, 1 failed"
        exit 1
    fi
done
if [ -f ../shared/data/shakespeare_tiny.txt ]; then
    DATA=../shared/data/shakespeare_tiny.txt
else
    make --no-print-directory build/corpus_small.txt >/dev/null || exit 1
    DATA=build/corpus_small.txt
fi

# Root may run mpirun only when asked to; ranks share the 2 cores without
# pinning; a hung job is stopped after 2 minutes.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
DATA=$(realpath "$DATA")
MPI=$(realpath "$MPI")
run_mpi() { timeout 120 mpirun --oversubscribe --bind-to none -np "$NP" "$MPI" "$@"; }
ARGS=(--preset tiny --data "$DATA" --log-every 1 --eval-every 10 --sample-chars 0)

# --- equivalence, replicas, files ------------------------------------------------
"$ONE" "${ARGS[@]}" --iters 20 --out "$work/one" --export "$work/one.safetensors" \
    >"$work/one.out" 2>&1
rc1=$?
# From an empty folder: a stray relative write by any rank would land there.
mkdir -p "$work/cwd"
(cd "$work/cwd" && TRAIN_FULL_RANK_EXPORT="$work/ranks" run_mpi "${ARGS[@]}" --iters 20 \
    --bucket-kb 16 --out "$work/two" --export "$work/two.safetensors") >"$work/two.out" 2>&1
rc2=$?
if [ $rc1 != 0 ] || [ $rc2 != 0 ]; then
    bad "equivalence" "exit statuses $rc1 (one process) / $rc2 (mpirun)"
    show "$work/one.out"
    show "$work/two.out"
else
    if python3 scripts/compare_runs.py "$work/one/log.csv" "$work/two/log.csv" \
        "$work/one.safetensors" "$work/two.safetensors" 20 1e-5 1e-4 mpirun \
        >"$work/cmp.out" 2>&1; then
        ok "equivalence: mpirun -np $NP vs one process, $(cat "$work/cmp.out")"
    else
        bad "equivalence" "$(tail -n 1 "$work/cmp.out")"
    fi
    # (--export's file is compared by value above: it has GPT-2's names.)
    if cmp -s "$work/ranks.rank0.safetensors" "$work/ranks.rank1.safetensors" &&
        cmp -s "$work/ranks.rank0.ckpt" "$work/ranks.rank1.ckpt"; then
        ok "replicas: rank 0 and rank 1 parameters and AdamW moments bit-identical after 20 steps"
    else
        bad "replicas" "the ranks' parameter files differ (or are missing)"
        ls -l "$work"/ranks.* 2>&1 | sed 's/^/    | /'
    fi
    # Rank 1 printed nothing (stdout silenced, no errors), rank 0 the usual.
    n_summary=$(grep -c '^summary ' "$work/two.out")
    listing=$(cd "$work/two" && ls | tr '\n' ' ')
    if [ "$n_summary" = 1 ] && grep -q '^dist ranks=2 ' "$work/two.out" &&
        [ -f "$work/two/ckpt.bin" ] && [ -z "$(ls -A "$work/cwd")" ]; then
        ok "files: one summary line, rank 0's run folder ($listing), no stray file"
    else
        bad "files" "$n_summary summary lines; folder: $listing"
        show "$work/two.out"
    fi
fi

# --- overlapped vs blocking all-reduce, ZeRO-1 ------------------------------------
# The run above all-reduced 16 KiB buckets during backward (the default
# mode); the blocking all-reduce and --zero 1 must give the same bits.
TRAIN_FULL_RANK_EXPORT="$work/blk" run_mpi "${ARGS[@]}" --iters 20 --allreduce blocking \
    >"$work/blk.out" 2>&1
rc=$?
# Every step's all-reduce ran during backward, replayed steps included.
if [ $rc = 0 ] && grep -q '^dist ranks=2 allreduce=overlap .* overlapped_steps=20$' "$work/two.out" &&
    grep -q '^dist ranks=2 allreduce=blocking ' "$work/blk.out" &&
    cmp -s "$work/blk.rank0.ckpt" "$work/ranks.rank0.ckpt" &&
    cmp -s "$work/blk.rank1.ckpt" "$work/ranks.rank1.ckpt"; then
    ok "overlap: all-reduce of 16 KiB buckets during backward == blocking all-reduce, bit for bit (parameters, AdamW moments)"
else
    bad "overlap" "exit $rc, the rank checkpoints differ, or not every step all-reduced during backward"
    show "$work/blk.out"
fi
TRAIN_FULL_RANK_EXPORT="$work/zero" run_mpi "${ARGS[@]}" --iters 20 --zero 1 --bucket-kb 16 \
    >"$work/zero.out" 2>&1
rc=$?
zline=$(grep '^zero stage=1 ' "$work/zero.out")
zrank=$(tr ' ' '\n' <<<"$zline" | sed -n 's/^adamw_state_bytes_per_rank=//p')
zfull=$(tr ' ' '\n' <<<"$zline" | sed -n 's/^unsharded_bytes=//p')
# Halved, up to each moment buffer's 64-byte padding (2 x 64 per parameter).
if [ $rc = 0 ] && [ -n "$zrank" ] && [ $((zrank * 2)) -le $((zfull + 4096)) ] &&
    cmp -s "$work/zero.rank0.safetensors" "$work/ranks.rank0.safetensors" &&
    cmp -s "$work/zero.rank1.safetensors" "$work/ranks.rank1.safetensors"; then
    ok "zero: --zero 1 AdamW state $zrank bytes per rank (unsharded $zfull), parameters after 20 steps bit-identical"
else
    bad "zero" "exit $rc; '$zline'; or the parameters differ"
    show "$work/zero.out"
fi

# --- resume under MPI ------------------------------------------------------------
run_mpi "${ARGS[@]}" --iters 10 --out "$work/split" >"$work/split1.out" 2>&1
rca=$?
cp "$work/split/ckpt.bin" "$work/step10.bin" 2>/dev/null # for "rank 0 reads" below
run_mpi "${ARGS[@]}" --iters 20 --resume "$work/split/ckpt.bin" >"$work/split2.out" 2>&1
rcb=$?
if [ $rca != 0 ] || [ $rcb != 0 ]; then
    bad "resume" "exit statuses $rca / $rcb"
    show "$work/split1.out"
    show "$work/split2.out"
elif ! cmp -s <(cut -d, -f1-5 "$work/two/log.csv") <(cut -d, -f1-5 "$work/split/log.csv"); then
    # Columns 1-5: step, lr, train loss, validation loss, gradient norm (the
    # rest are timings).
    bad "resume" "log.csv differs: $(diff <(cut -d, -f1-5 "$work/two/log.csv") \
        <(cut -d, -f1-5 "$work/split/log.csv") | head -n 3 | tr '\n' ' ')"
elif ! cmp -s "$work/two/ckpt.bin" "$work/split/ckpt.bin"; then
    bad "resume" "same log, but the step-20 checkpoints differ"
else
    ok "resume: under mpirun, 10 steps + --resume to 20 == 20 in one go (log, checkpoint bytes)"
fi

# --- ZeRO-1 checkpoints -----------------------------------------------------------
# Rank 0 gathers every rank's slice of the AdamW moments and writes the file
# the unsharded run writes; every rank loads it and keeps its slice.
run_mpi "${ARGS[@]}" --iters 10 --zero 1 --out "$work/zsplit" >"$work/zsplit1.out" 2>&1
rca=$?
cp "$work/zsplit/ckpt.bin" "$work/zstep10.bin" 2>/dev/null
cp -r "$work/zsplit" "$work/zone" 2>/dev/null # the step-10 run folder, for one process
run_mpi "${ARGS[@]}" --iters 20 --zero 1 --resume "$work/zsplit/ckpt.bin" >"$work/zsplit2.out" 2>&1
rcb=$?
"$ONE" "${ARGS[@]}" --iters 20 --resume "$work/zone/ckpt.bin" --export "$work/zone.safetensors" \
    >"$work/zone.out" 2>&1
rcc=$?
"$ONE" "${ARGS[@]}" --iters 10 --out "$work/zback" >"$work/zback1.out" 2>&1
rcd=$?
run_mpi "${ARGS[@]}" --iters 20 --zero 1 --resume "$work/zback/ckpt.bin" \
    --export "$work/zback.safetensors" >"$work/zback2.out" 2>&1
rce=$?
if [ "$rca$rcb$rcc$rcd$rce" != 00000 ]; then
    bad "zero ckpt" "exit statuses $rca $rcb $rcc $rcd $rce"
    for f in zsplit1 zsplit2 zone zback1 zback2; do show "$work/$f.out" 4; done
elif ! cmp -s "$work/zstep10.bin" "$work/step10.bin"; then
    bad "zero ckpt" "the --zero 1 step-10 checkpoint differs from the unsharded run's"
elif ! cmp -s <(cut -d, -f1-5 "$work/two/log.csv") <(cut -d, -f1-5 "$work/zsplit/log.csv") ||
    ! cmp -s "$work/two/ckpt.bin" "$work/zsplit/ckpt.bin"; then
    bad "zero ckpt" "--zero 1 --resume to 20 differs from the straight run (log or checkpoint)"
elif ! python3 scripts/compare_runs.py "$work/two/log.csv" "$work/zone/log.csv" \
    "$work/two.safetensors" "$work/zone.safetensors" 20 1e-5 1e-4 "one process" \
    >"$work/zcmp1.out" 2>&1; then
    bad "zero ckpt" "one process from the --zero 1 file: $(tail -n 1 "$work/zcmp1.out")"
elif ! python3 scripts/compare_runs.py "$work/one/log.csv" "$work/zback/log.csv" \
    "$work/one.safetensors" "$work/zback.safetensors" 20 1e-5 1e-4 "--zero 1" \
    >"$work/zcmp2.out" 2>&1; then
    bad "zero ckpt" "--zero 1 from a one-process file: $(tail -n 1 "$work/zcmp2.out")"
else
    ok "zero ckpt: --zero 1 step-10 file == unsharded 2-rank file (cmp); --zero 1 --resume to 20 == straight (log, checkpoint bytes); 1 process from it: $(cat "$work/zcmp1.out"); --zero 1 from a 1-process file: $(cat "$work/zcmp2.out")"
fi

# --- bad input, a failure on one rank -------------------------------------------
run_mpi "${ARGS[@]}" --iters 5 --batch 7 >"$work/odd.out" 2>&1
rc=$?
if [ $rc = 2 ] && grep -q 'multiple of the number of ranks (batch 7, 2 ranks)' "$work/odd.out" &&
    ! grep -q '^summary ' "$work/odd.out"; then
    ok "bad batch: --batch 7 over 2 ranks exits 2 with a clear message"
else
    bad "bad batch" "exit $rc"
    show "$work/odd.out"
fi
run_mpi "${ARGS[@]}" --iters 5 --zero 2 --out "$work/zout" >"$work/zout.out" 2>&1
rc=$?
"$MPI" --allreduce bogus >"$work/bogus.out" 2>&1
rcb=$?
if [ $rc = 2 ] && grep -q -- '--zero' "$work/zout.out" &&
    [ ! -e "$work/zout" ] && [ $rcb = 2 ] && grep -q "unknown mode 'bogus'" "$work/bogus.out"; then
    ok "bad flags: --zero 2, --allreduce bogus: exit 2 with a clear message"
else
    bad "bad flags" "exit $rc / $rcb"
    show "$work/zout.out"
    show "$work/bogus.out"
fi
t0=$(date +%s)
run_mpi "${ARGS[@]}" --iters 5 --resume "$work/missing.ckpt" >"$work/noresume.out" 2>&1
rc=$?
if [ $rc = 3 ] && grep -q 'missing.ckpt: checkpoint refused' "$work/noresume.out"; then
    ok "rank error: an unreadable --resume on rank 0 ends all ranks with exit 3 ($(($(date +%s) - t0))s)"
else
    bad "rank error" "exit $rc"
    show "$work/noresume.out"
fi

# --- files read on rank 0 only -------------------------------------------------
# Two folders: A holds the corpus, the safetensors and the checkpoint, B is
# empty; rank 0 runs in A, rank 1 in B, with the same relative paths.
mkdir -p "$work/hostA" "$work/hostB"
cp "$DATA" "$work/hostA/corpus.txt"
cp "$work/one.safetensors" "$work/hostA/init.safetensors"
cp "$work/step10.bin" "$work/hostA/start.bin"
R0=(--preset tiny --data corpus.txt --log-every 1 --eval-every 10 --sample-chars 0)
(cd "$work/hostA" && timeout 120 mpirun --oversubscribe --bind-to none \
    -np 1 -wdir "$work/hostA" "$MPI" "${R0[@]}" --iters 3 --init-from init.safetensors --out i \
    : -np 1 -wdir "$work/hostB" "$MPI" "${R0[@]}" --iters 3 --init-from init.safetensors --out i) \
    >"$work/wd1.out" 2>&1
rca=$?
(cd "$work/hostA" && timeout 120 mpirun --oversubscribe --bind-to none \
    -np 1 -wdir "$work/hostA" "$MPI" "${R0[@]}" --iters 20 --resume start.bin --save r.bin \
    : -np 1 -wdir "$work/hostB" "$MPI" "${R0[@]}" --iters 20 --resume start.bin --save r.bin) \
    >"$work/wd2.out" 2>&1
rcb=$?
(cd "$work/hostA" && timeout 120 mpirun --oversubscribe --bind-to none -np 2 "$MPI" "${R0[@]}" \
    --iters 3 --init-from init.safetensors --out both) >"$work/wd3.out" 2>&1
rcc=$?
if [ $rca = 0 ] && [ $rcb = 0 ] && [ $rcc = 0 ] && [ -z "$(ls -A "$work/hostB")" ] &&
    cmp -s <(cut -d, -f1-5 "$work/hostA/i/log.csv") <(cut -d, -f1-5 "$work/hostA/both/log.csv") &&
    cmp -s "$work/hostA/r.bin" "$work/two/ckpt.bin"; then
    ok "rank 0 reads: --data, --init-from, --resume absent for rank 1: same log, same step-20 checkpoint"
else
    bad "rank 0 reads" "exit $rca / $rcb / $rcc; rank 1's folder: $(ls -A "$work/hostB" | tr '\n' ' ')"
    show "$work/wd1.out"
    show "$work/wd2.out"
fi

echo "time: $(($(date +%s) - t_start))s"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
