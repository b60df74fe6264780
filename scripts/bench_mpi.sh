#!/usr/bin/env bash
# Data-parallel speed on this machine (printed, never asserted): the small
# preset as one process with the library's two threads (the caller and its
# worker) against two MPI ranks of one thread each (AG_NUM_THREADS=1), same
# global batch; also one process of one thread, for reference. Then what the
# gradient all-reduce would cost across machines, and (as root, with `ip
# netns`) what it costs between two hosts over TCP: one rank in each of two
# network namespaces joined by a veth pair (scripts/hosts_lib.sh), at the
# veth's full speed and shaped with tc tbf (BENCH_MPI_RATES, default
# "full 1gbit"): blocking against overlapped all-reduce (BENCH_MPI_REPS
# interleaved runs each, default 3; buckets of BENCH_MPI_BUCKET_KB, default
# 256) with the share of communication the overlap hid, and the AdamW state
# per rank with --zero 1. `make bench-mpi`; BENCH_MPI_ITERS (default 70)
# steps per run, the first 10 left out of the medians.
set -u
cd "$(dirname "$0")/.."
ITERS=${BENCH_MPI_ITERS:-70}
PRESET=${BENCH_MPI_PRESET:-small}
if ! command -v mpirun >/dev/null 2>&1 || [ ! -x build/train_full_mpi ]; then
    echo "bench-mpi: needs mpirun and build/train_full_mpi (make deps examples)"
    exit 1
fi
if [ -f data/shakespeare.txt ]; then DATA=data/shakespeare.txt; else DATA=../shared/data/shakespeare_tiny.txt; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d "${TMPDIR:-/tmp}/bench_mpi.XXXXXX")
. scripts/hosts_lib.sh
# Main shell only: bash runs an inherited EXIT trap in a subshell killed at fork.
trap 'if [ "$BASHPID" = "$$" ]; then hosts_down; rm -rf "$work"; fi' EXIT
ARGS=(--preset "$PRESET" --data "$DATA" --iters "$ITERS" --eval-every 1000000 --eval-iters 1
      --sample-chars 0 --log-every 1000000)
field() { grep '^summary ' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }
dfield() { grep '^dist ' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p"; }

build/train_full "${ARGS[@]}" >"$work/p2.out" 2>&1 || { tail "$work/p2.out"; exit 1; }
AG_NUM_THREADS=1 build/train_full "${ARGS[@]}" >"$work/p1.out" 2>&1 || { tail "$work/p1.out"; exit 1; }
mpirun --oversubscribe --bind-to none -x AG_NUM_THREADS=1 -np 2 build/train_full_mpi "${ARGS[@]}" \
    >"$work/r2.out" 2>&1 || { tail "$work/r2.out"; exit 1; }

echo "bench-mpi: preset $PRESET, $ITERS steps, median ms per step after 10 warm-up steps ($(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
printf '  %-34s %10s %10s\n' "" "ms/step" "tok/s"
printf '  %-34s %10s %10s\n' "1 process x 1 thread" "$(field "$work/p1.out" ms_per_step)" "$(field "$work/p1.out" tok_per_s)"
printf '  %-34s %10s %10s\n' "1 process x 2 threads" "$(field "$work/p2.out" ms_per_step)" "$(field "$work/p2.out" tok_per_s)"
printf '  %-34s %10s %10s\n' "2 MPI ranks x 1 thread" "$(field "$work/r2.out" ms_per_step)" "$(field "$work/r2.out" tok_per_s)"
ms=$(field "$work/r2.out" ms_per_step)
ar=$(dfield "$work/r2.out" allreduce_ms_per_step)
wait=$(dfield "$work/r2.out" wait_ms_per_step)
share=$(dfield "$work/r2.out" allreduce_share)
params=$(field "$work/r2.out" params)
echo "  2 ranks: all-reduce $ar ms per step (share of the step $share), waiting for the slower rank $wait ms"
python3 - "$params" "$ms" <<'PY'
import sys
params, ms = int(sys.argv[1]), float(sys.argv[2])
b = params * 4
print("  across machines: %d parameters = %.2f MB of gradients per step;" % (params, b / 1e6))
for n in (2, 4, 8):
    moved = 2 * (n - 1) / n * b
    gbit = moved * 8 / (0.1 * ms / 1000) / 1e9
    print("    %d ranks, ring all-reduce: %.2f MB sent per rank per step; costs 10%% of a %.1f ms step below %.2f Gbit/s" % (n, moved / 1e6, ms, gbit))
PY

# --- two hosts over TCP: blocking vs overlapped all-reduce, ZeRO-1 ----------
why=$(hosts_missing)
if [ -n "$why" ]; then
    echo "  two hosts over TCP: $why: skipped"
    exit 0
fi
hosts_up "$work" || { echo "  two hosts over TCP: $HOSTS_WHY"; exit 1; }
REPS=${BENCH_MPI_REPS:-3}
BUCKET=${BENCH_MPI_BUCKET_KB:-256}
echo "  two hosts (network namespaces, veth, --mca btl tcp,self), 2 ranks x 1 thread, $REPS runs"
echo "  per mode interleaved (compute, blocking, overlapped, ...), medians of the runs' medians"
echo "  [min..max]; overlapped buckets of $BUCKET KiB; all-reduce ms = the reduction after"
echo "  backward (blocking) or what is left of it after backward (overlapped); wait ms = waiting"
echo "  for the slower rank before the blocking all-reduce:"
printf '    %-7s %-10s %22s %16s %10s %13s\n' "link" "mode" "ms/step" "all-reduce ms" "wait ms" "veth MB/step"
DATA_ABS=$(realpath "$DATA")
HARGS=("${ARGS[@]}")
HARGS[3]=$DATA_ABS
# One run: MODE (compute: no gradient all-reduce, TRAIN_FULL_MPI_SKIP_REDUCE,
# the replicas drift; blocking; overlap; zero: overlapped with --zero 1).
hrun() { # RATE MODE REP
    local extra=() env=()
    case $2 in
    compute) env=(-x TRAIN_FULL_MPI_SKIP_REDUCE=1) ;;
    blocking) extra=(--allreduce blocking) ;;
    overlap) extra=(--allreduce overlap --bucket-kb "$BUCKET") ;;
    zero) extra=(--allreduce overlap --bucket-kb "$BUCKET" --zero 1) ;;
    esac
    local f=$work/h_$1_$2_$3.out
    read -r tx0 _ <<<"$(hosts_bytes)"
    HOSTS_TIMEOUT=900 hosts_mpirun -x AG_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 "${env[@]}" \
        "$(realpath build/train_full_mpi)" "${HARGS[@]}" "${extra[@]}" >"$f" 2>&1 ||
        { echo "    $1 $2: run failed"; tail -n 5 "$f"; return 1; }
    read -r tx1 _ <<<"$(hosts_bytes)"
    echo "$(field "$f" ms_per_step) $(dfield "$f" allreduce_ms_per_step) $(dfield "$f" wait_ms_per_step) $((tx1 - tx0))" >>"$work/h_$1_$2.txt"
}
for rate in ${BENCH_MPI_RATES:-full 1gbit}; do
    if [ "$rate" = full ]; then hosts_rate ""; else hosts_rate "$rate" || { echo "    $rate: tc tbf failed"; continue; }; fi
    for rep in $(seq "$REPS"); do
        for mode in compute blocking overlap; do hrun "$rate" "$mode" "$rep"; done
    done
    python3 - "$rate" "$ITERS" "$work" <<'PY'
import statistics, sys
rate, iters, work = sys.argv[1], int(sys.argv[2]), sys.argv[3]
med, ar = {}, {}
for mode in ("compute", "blocking", "overlap"):
    try:
        rows = [[float(x or 0) for x in l.split()] for l in open("%s/h_%s_%s.txt" % (work, rate, mode))]
    except OSError:
        continue
    cols = list(zip(*rows))
    m = [statistics.median(c) for c in cols]
    med[mode], ar[mode] = m[0], m[1] + m[2]
    a = "-" if mode == "compute" else "%.2f" % m[1]
    wt = "-" if mode != "blocking" else "%.2f" % m[2]
    print("    %-7s %-10s %8.2f [%5.2f..%5.2f] %16s %10s %13.2f" % (
        rate, mode, m[0], min(cols[0]), max(cols[0]), a, wt, m[3] / iters / 1e6))
if len(med) == 3 and med["blocking"] > med["compute"]:
    hidden = 1 - (med["overlap"] - med["compute"]) / (med["blocking"] - med["compute"])
    print("    %-7s hidden communication 1 - (overlapped - compute) / (blocking - compute) = %.0f%%" % (rate, 100 * hidden))
if "blocking" in ar and "overlap" in ar and ar["blocking"] > 0:
    # Less sensitive to the step time's noise on a shared machine: the
    # communication each path leaves after backward (waits included).
    print("    %-7s communication left after backward: %.2f ms overlapped vs %.2f ms blocking (%.0f%% hidden)" % (
        rate, ar["overlap"], ar["blocking"], 100 * (1 - ar["overlap"] / ar["blocking"])))
PY
done
# ZeRO-1: the AdamW state each rank keeps, and the step with the all-gather.
hosts_rate ""
hrun full zero 1 && {
    f=$work/h_full_zero_1.out
    echo "  --zero 1 (full link): $(grep '^zero ' "$f" | cut -d' ' -f2-), $(field "$f" ms_per_step) ms/step"
}
hosts_rate ""
