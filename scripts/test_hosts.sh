#!/usr/bin/env bash
# train_full_mpi across two hosts over TCP (`make test-hosts`): two network
# namespaces on this machine joined by a veth pair, one rank on each, placed
# by mpirun through an rsh agent (scripts/hosts_lib.sh), with shared memory
# off (--mca pml ob1 --mca btl tcp,self on the veth only). Host B sees none
# of host A's files (an empty tmpfs over that folder), so every run also
# checks that --data, --resume and --init-from are read on rank 0 only.
# Needs root and `ip netns`: without them it says so and exits 0 (skipped).
# One line per check, then "N passed, N failed"; every run has a time limit;
# the namespaces are deleted on any exit. About 1-2 minutes.
#
#   hidden      host B cannot see host A's folder (the data is not there)
#   tiny        20 steps over the two hosts against 1 process: losses within
#               1e-6 relative, parameters and AdamW state of the two ranks
#               bit-identical (rank checkpoints equal)
#   bytes       the veth byte counters grew by at least the bytes reduced
#               (gradient floats x 4 x steps) in each direction
#   overlap     the tiny run all-reduces 16 KiB buckets during backward: its
#               rank checkpoints equal a --allreduce blocking run's, bit for bit
#   zero        --zero 1: AdamW state per rank halved, parameters after 20
#               steps bit-identical to the unsharded run, and its step-20
#               checkpoint (moments gathered to rank 0 over TCP) the
#               unsharded run's byte for byte
#   small       4 steps of the small preset against 1 process: within 1e-5
#   init-from   --init-from across the hosts == 1 process (first loss 1e-6)
#   resume      10 steps + --resume to 20 across the hosts == 20 in one go
#               (log columns and checkpoint bytes)
#   kill -9     rank 1 killed: mpirun exits non-zero with a message naming
#               it within 60 s, no rank left
#   stalled     rank 1 stopped (SIGSTOP): rank 0's watchdog
#               (TRAIN_FULL_MPI_TIMEOUT=5) exits 124, mpirun ends the job
#   link down   B's end of the veth set down: the same (OOB keepalive)
#   SIGINT      Ctrl-C to mpirun: non-zero exit, rank 0's checkpoint loads,
#               no rank alive 10 s later
set -u
cd "$(dirname "$0")/.."

ONE=$(realpath -m build/train_full)
MPI=$(realpath -m build/train_full_mpi)
pass=0
fail=0
t_start=$(date +%s)

. scripts/hosts_lib.sh

why=$(hosts_missing)
if [ -n "$why" ]; then
    echo "test_hosts: $why: skipped"
    exit 0
fi
for b in "$ONE" "$MPI"; do
    if [ ! -x "$b" ]; then
        echo "FAIL build: $b is missing (make examples, with mpicc installed)"
        echo "0 passed, 1 failed"
        exit 1
    fi
done
[ -f ../shared/data/shakespeare_tiny.txt ] || make --no-print-directory build/corpus_small.txt >/dev/null || exit 1

work=$(mktemp -d "${TMPDIR:-/tmp}/test_hosts.XXXXXX")
cleanup() {
    hosts_down
    [ -n "${KEEP_WORK:-}" ] || rm -rf "$work"
}
# Main shell only: bash runs an inherited EXIT trap in a subshell killed at fork.
trap 'if [ "$BASHPID" = "$$" ]; then cleanup; fi' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ok() { echo "PASS $1"; pass=$((pass + 1)); }
bad() {
    echo "FAIL $1: $2"
    fail=$((fail + 1))
}
show() { tail -n "${2:-8}" "$1" | sed 's/^/    | /'; }

if ! hosts_up "$work"; then
    echo "FAIL setup: $HOSTS_WHY"
    echo "0 passed, 1 failed"
    exit 1
fi
A=$HOSTS_A_ONLY    # host A's files: data, run folders, checkpoints
S=$work/shared     # rank exports, visible from both hosts
mkdir -p "$S"
if [ -f ../shared/data/shakespeare_tiny.txt ]; then
    cp ../shared/data/shakespeare_tiny.txt "$A/corpus.txt"
else
    cp build/corpus_small.txt "$A/corpus.txt"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
ARGS=(--preset tiny --data "$A/corpus.txt" --log-every 1 --eval-every 10 --sample-chars 0)
# A bounded run over the two hosts (120 s); rank 1's stdout is /dev/null.
run2() { hosts_mpirun "$@"; }

# --- hidden -------------------------------------------------------------------
if "$work/agent.sh" "$HOSTS_ADDR_B" test ! -e "$A/corpus.txt" &&
    "$work/agent.sh" "$HOSTS_ADDR_B" test -x "$MPI" &&
    "$work/agent.sh" "$HOSTS_ADDR_A" test -e "$A/corpus.txt"; then
    ok "hidden: host B sees the binary but not host A's folder $A"
else
    bad "hidden" "host B sees $A/corpus.txt (or not the binary)"
fi

# Per-step losses (log.csv) and parameters (safetensors) of two runs.
compare() { # LOG_A LOG_B ST_A ST_B STEPS TOL
    python3 scripts/compare_runs.py "$@" - "two hosts"
}

# --- tiny, bytes ---------------------------------------------------------------
timeout 120 "$ONE" "${ARGS[@]}" --iters 20 --out "$A/one" --export "$A/one.safetensors" >"$work/one.out" 2>&1
rc1=$?
read -r tx0 rx0 <<<"$(hosts_bytes)"
TRAIN_FULL_RANK_EXPORT="$S/tiny" run2 -x TRAIN_FULL_RANK_EXPORT "$MPI" "${ARGS[@]}" --iters 20 \
    --bucket-kb 16 --out "$A/two" >"$work/two.out" 2>&1
rc2=$?
read -r tx1 rx1 <<<"$(hosts_bytes)"
if [ $rc1 != 0 ] || [ $rc2 != 0 ]; then
    bad "tiny" "exit statuses $rc1 (one process) / $rc2 (two hosts)"
    show "$work/one.out"
    show "$work/two.out" 20
else
    if compare "$A/one/log.csv" "$A/two/log.csv" "$A/one.safetensors" "$S/tiny.rank0.safetensors" \
        20 1e-6 >"$work/cmp.out" 2>&1; then
        ok "tiny: 2 ranks on 2 hosts over TCP vs 1 process, $(cat "$work/cmp.out")"
    else
        bad "tiny" "$(tail -n 1 "$work/cmp.out")"
    fi
    if cmp -s "$S/tiny.rank0.ckpt" "$S/tiny.rank1.ckpt" &&
        cmp -s "$S/tiny.rank0.safetensors" "$S/tiny.rank1.safetensors"; then
        ok "replicas: the two hosts' checkpoints (parameters, AdamW moments) are bit-identical"
    else
        bad "replicas" "rank checkpoints differ or are missing"
        ls -l "$S" | sed 's/^/    | /'
    fi
    params=$(grep '^summary ' "$work/two.out" | tr ' ' '\n' | sed -n 's/^params=//p')
    need=$((params * 4 * 20))
    dtx=$((tx1 - tx0))
    drx=$((rx1 - rx0))
    if [ -n "$params" ] && [ "$dtx" -ge "$need" ] && [ "$drx" -ge "$need" ]; then
        ok "bytes: veth sent $dtx and received $drx bytes >= $need reduced ($params floats x 4 x 20 steps)"
    else
        bad "bytes" "veth tx $dtx rx $drx, reduced $need"
    fi
fi

# --- overlap, zero ----------------------------------------------------------------
# The tiny run all-reduced 16 KiB buckets during backward; the blocking
# all-reduce and --zero 1 across the hosts must give the same bits.
TRAIN_FULL_RANK_EXPORT="$S/blk" run2 -x TRAIN_FULL_RANK_EXPORT "$MPI" "${ARGS[@]}" --iters 20 \
    --allreduce blocking >"$work/blk.out" 2>&1
rc=$?
if [ $rc = 0 ] && grep -q '^dist ranks=2 allreduce=overlap ' "$work/two.out" &&
    cmp -s "$S/blk.rank0.ckpt" "$S/tiny.rank0.ckpt" && cmp -s "$S/blk.rank1.ckpt" "$S/tiny.rank1.ckpt"; then
    ok "overlap: buckets all-reduced during backward across the hosts == blocking, bit for bit"
else
    bad "overlap" "exit $rc, or the rank checkpoints differ"
    show "$work/blk.out"
fi
TRAIN_FULL_RANK_EXPORT="$S/zero" run2 -x TRAIN_FULL_RANK_EXPORT "$MPI" "${ARGS[@]}" --iters 20 \
    --zero 1 --bucket-kb 16 --out "$A/zero" >"$work/zero.out" 2>&1
rc=$?
zline=$(grep '^zero stage=1 ' "$work/zero.out")
zrank=$(tr ' ' '\n' <<<"$zline" | sed -n 's/^adamw_state_bytes_per_rank=//p')
zfull=$(tr ' ' '\n' <<<"$zline" | sed -n 's/^unsharded_bytes=//p')
if [ $rc = 0 ] && [ -n "$zrank" ] && [ $((zrank * 2)) -le $((zfull + 4096)) ] &&
    cmp -s "$S/zero.rank0.safetensors" "$S/tiny.rank0.safetensors" &&
    cmp -s "$S/zero.rank1.safetensors" "$S/tiny.rank0.safetensors" &&
    cmp -s "$A/zero/ckpt.bin" "$A/two/ckpt.bin"; then
    ok "zero: --zero 1 across the hosts, AdamW state $zrank bytes per rank (unsharded $zfull), parameters bit-identical after 20 steps, checkpoint == unsharded run's (cmp)"
else
    bad "zero" "exit $rc; '$zline'; or the parameters or checkpoints differ"
    show "$work/zero.out"
fi

# --- small ----------------------------------------------------------------------
SMALL=(--preset small --data "$A/corpus.txt" --log-every 1 --eval-every 1000 --eval-iters 1
       --sample-chars 0 --iters 4)
timeout 120 "$ONE" "${SMALL[@]}" --out "$A/s1" --export "$A/s1.safetensors" >"$work/s1.out" 2>&1
rc1=$?
run2 "$MPI" "${SMALL[@]}" --out "$A/s2" --export "$A/s2.safetensors" >"$work/s2.out" 2>&1
rc2=$?
if [ $rc1 != 0 ] || [ $rc2 != 0 ]; then
    bad "small" "exit statuses $rc1 / $rc2"
    show "$work/s2.out" 20
elif compare "$A/s1/log.csv" "$A/s2/log.csv" "$A/s1.safetensors" "$A/s2.safetensors" 4 1e-5 \
    >"$work/cmp.out" 2>&1; then
    ok "small: 2 hosts vs 1 process, $(cat "$work/cmp.out")"
else
    bad "small" "$(tail -n 1 "$work/cmp.out")"
fi

# --- init-from --------------------------------------------------------------------
timeout 120 "$ONE" "${ARGS[@]}" --iters 3 --init-from "$A/one.safetensors" --out "$A/i1" >"$work/i1.out" 2>&1
rc1=$?
run2 "$MPI" "${ARGS[@]}" --iters 3 --init-from "$A/one.safetensors" --out "$A/i2" >"$work/i2.out" 2>&1
rc2=$?
l1=$(sed -n 2p "$A/i1/log.csv" 2>/dev/null | cut -d, -f3)
l2=$(sed -n 2p "$A/i2/log.csv" 2>/dev/null | cut -d, -f3)
if [ $rc1 = 0 ] && [ $rc2 = 0 ] && grep -q "^init: parameters from $A/one.safetensors" "$work/i2.out" &&
    python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); sys.exit(abs(a-b)>1e-6*abs(a))" "$l1" "$l2"; then
    ok "init-from: read on host A only, first loss $l2 (1 process: $l1)"
else
    bad "init-from" "exit $rc1 / $rc2, first losses $l1 / $l2"
    show "$work/i2.out"
fi

# --- resume across the hosts ---------------------------------------------------------
run2 "$MPI" "${ARGS[@]}" --iters 10 --out "$A/split" >"$work/split1.out" 2>&1
rca=$?
run2 "$MPI" "${ARGS[@]}" --iters 20 --resume "$A/split/ckpt.bin" >"$work/split2.out" 2>&1
rcb=$?
if [ $rca != 0 ] || [ $rcb != 0 ]; then
    bad "resume" "exit statuses $rca / $rcb"
    show "$work/split2.out"
elif ! cmp -s <(cut -d, -f1-5 "$A/two/log.csv") <(cut -d, -f1-5 "$A/split/log.csv"); then
    bad "resume" "log.csv differs from the straight run"
elif ! cmp -s "$A/two/ckpt.bin" "$A/split/ckpt.bin"; then
    bad "resume" "same log, but the step-20 checkpoints differ"
else
    ok "resume: across the hosts, 10 steps + --resume to 20 == 20 in one go (log, checkpoint bytes)"
fi

# --- failures: a long run, then something breaks --------------------------------------
LONG=(--preset tiny --data "$A/corpus.txt" --iters 1000000 --log-every 1000 --eval-every 200
      --eval-iters 1 --sample-chars 0)
# Starts a long run in the background (mpirun's pid in $job), waits until
# rank 1 runs on host B and rank 0 has written a checkpoint (at most 30 s).
start_long() { # NAME [MPIRUN ARGS...]
    local name=$1
    shift
    # No `timeout` in between: the signal goes to mpirun itself (ip netns
    # exec execs it), and wait_job bounds the wait.
    hosts_mpirun_args
    "${HOSTS_MPIRUN[@]}" "$@" "$MPI" "${LONG[@]}" --out "$A/$name" >"$work/$name.out" 2>&1 &
    job=$!
    local i
    for i in $(seq 150); do
        rank1=$(for p in $(ip netns pids "$HOSTS_NS_B" 2>/dev/null); do
            [ "$(cat /proc/"$p"/comm 2>/dev/null)" = train_full_mpi ] && echo "$p"; done)
        [ -n "$rank1" ] && [ -f "$A/$name/ckpt.bin" ] && return 0
        sleep 0.2
    done
    return 1
}
# Waits for mpirun to end (at most $1 s); sets rc and secs (kills it past the limit).
wait_job() {
    local limit=$1 t0 i
    t0=$(date +%s.%N)
    rc=timeout
    for i in $(seq $((limit * 10))); do
        if ! kill -0 "$job" 2>/dev/null; then
            wait "$job"
            rc=$?
            break
        fi
        sleep 0.1
    done
    secs=$(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$(date +%s.%N)")
    if [ "$rc" = timeout ]; then
        kill -9 "$job" 2>/dev/null
        wait "$job" 2>/dev/null
    fi
}
left() { hosts_procs | grep -E 'train_full_mpi|orted|mpirun' | tr '\n' ' '; }

# kill -9 of rank 1
if start_long k9; then
    kill -9 "$rank1"
    wait_job 60
    sleep 1
    if [ "$rc" != timeout ] && [ "$rc" != 0 ] && grep -q 'rank 1 .*exited on signal 9' "$work/k9.out" &&
        [ -z "$(left)" ]; then
        ok "kill -9: rank 1 killed on host B: mpirun exit $rc after ${secs}s ('$(grep -o 'process rank 1 .*exited on signal 9' "$work/k9.out" | head -n 1)'), no rank left"
    else
        bad "kill -9" "exit $rc after ${secs}s; left: $(left)"
        show "$work/k9.out"
    fi
else
    bad "kill -9" "the run did not start (30 s)"
    show "$work/k9.out"
fi
hosts_down >/dev/null 2>&1 || true
HOSTS_UP=0
hosts_up "$work" || { bad "setup" "$HOSTS_WHY"; }

# rank 1 stops (SIGSTOP: alive, silent): rank 0's watchdog ends the job
if start_long stall -x TRAIN_FULL_MPI_TIMEOUT=5; then
    kill -STOP "$rank1"
    wait_job 60
    sleep 1
    if [ "$rc" != timeout ] && [ "$rc" != 0 ] &&
        grep -q 'rank 0: no collective call completed in 5 s' "$work/stall.out" && [ -z "$(left)" ]; then
        ok "stalled: rank 1 stopped (SIGSTOP): rank 0's watchdog (TRAIN_FULL_MPI_TIMEOUT=5) ended the job, mpirun exit $rc after ${secs}s, no rank left"
    else
        bad "stalled" "exit $rc after ${secs}s; left: $(left)"
        show "$work/stall.out"
    fi
else
    bad "stalled" "the run did not start (30 s)"
    show "$work/stall.out"
fi
hosts_down >/dev/null 2>&1 || true
HOSTS_UP=0
hosts_up "$work" || { bad "setup" "$HOSTS_WHY"; }

# host B stops answering: its end of the veth goes down
if start_long down; then
    ip -n "$HOSTS_NS_B" link set "$HOSTS_IF" down
    wait_job 60
    sleep 1
    if [ "$rc" != timeout ] && [ "$rc" != 0 ] && grep -q 'lost communication with a remote daemon' "$work/down.out" &&
        [ -z "$(left)" ]; then
        ok "link down: host B unreachable: mpirun exit $rc after ${secs}s ('ORTE has lost communication with a remote daemon'), no rank left"
    else
        bad "link down" "exit $rc after ${secs}s; left: $(left)"
        show "$work/down.out"
    fi
    ip -n "$HOSTS_NS_B" link set "$HOSTS_IF" up
else
    bad "link down" "the run did not start (30 s)"
    show "$work/down.out"
fi
hosts_down >/dev/null 2>&1 || true
HOSTS_UP=0
hosts_up "$work" || { bad "setup" "$HOSTS_WHY"; }

# Ctrl-C: SIGINT to mpirun
if start_long int; then
    kill -INT "$job"
    wait_job 30
    sleep 10
    still=$(left)
    # The step of the last checkpoint rank 0 reported; resume 2 steps past it.
    step=$(tr '\r' '\n' <"$work/int.out" | sed -n "s|^checkpoint step=\([0-9]*\) saved $A/int/ckpt.bin\$|\1|p" | tail -n 1)
    timeout 60 "$ONE" --preset tiny --data "$A/corpus.txt" --eval-iters 1 --sample-chars 0 \
        --resume "$A/int/ckpt.bin" --iters $((${step:-0} + 2)) --save "$work/after.bin" >"$work/int2.out" 2>&1
    rcr=$?
    if [ "$rc" != timeout ] && [ "$rc" != 0 ] && [ -z "$still" ] && [ $rcr = 0 ] &&
        grep -q "^resume: $A/int/ckpt.bin at step $step " "$work/int2.out" &&
        grep -q '^done: 2 steps' "$work/int2.out"; then
        ok "SIGINT: mpirun exit $rc after ${secs}s, no rank alive 10 s later, rank 0's last checkpoint (step $step) loads and resumes"
    else
        bad "SIGINT" "exit $rc after ${secs}s; left: $still; resume exit $rcr"
        show "$work/int.out"
        show "$work/int2.out"
    fi
else
    bad "SIGINT" "the run did not start (30 s)"
    show "$work/int.out"
fi

echo "time: $(($(date +%s) - t_start))s"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
