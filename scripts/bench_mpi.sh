#!/usr/bin/env bash
# Data-parallel speed on this machine (printed, never asserted): the small
# preset as one process with the library's two threads (the caller and its
# worker) against two MPI ranks of one thread each (AG_NUM_THREADS=1), same
# global batch; also one process of one thread, for reference. Then what the
# gradient all-reduce would cost across machines, and (as root, with `ip
# netns`) what it costs between two hosts over TCP: one rank in each of two
# network namespaces joined by a veth pair (scripts/hosts_lib.sh), at the
# veth's full speed and shaped with tc tbf (BENCH_MPI_RATES, default
# "full 1gbit"). `make bench-mpi`; BENCH_MPI_ITERS (default 60) steps per run.
set -u
cd "$(dirname "$0")/.."
ITERS=${BENCH_MPI_ITERS:-60}
PRESET=${BENCH_MPI_PRESET:-small}
if ! command -v mpirun >/dev/null 2>&1 || [ ! -x build/train_full_mpi ]; then
    echo "bench-mpi: needs mpirun and build/train_full_mpi (make deps examples)"
    exit 1
fi
if [ -f data/shakespeare.txt ]; then DATA=data/shakespeare.txt; else DATA=../shared/data/shakespeare_tiny.txt; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d "${TMPDIR:-/tmp}/bench_mpi.XXXXXX")
. scripts/hosts_lib.sh
trap 'hosts_down; rm -rf "$work"' EXIT
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

# --- two hosts over TCP (blocking all-reduce after backward) ------------------
why=$(hosts_missing)
if [ -n "$why" ]; then
    echo "  two hosts over TCP: $why: skipped"
    exit 0
fi
hosts_up "$work" || { echo "  two hosts over TCP: $HOSTS_WHY"; exit 1; }
echo "  two hosts (network namespaces, veth, --mca btl tcp,self), 2 ranks x 1 thread, blocking all-reduce:"
printf '    %-10s %10s %14s %10s %14s %12s\n' "link" "ms/step" "all-reduce ms" "wait ms" "veth MB/step" "Gbit/s (ar)"
DATA_ABS=$(realpath "$DATA")
HARGS=("${ARGS[@]}")
HARGS[3]=$DATA_ABS
# "compute": the same run without the gradient all-reduce (the step time
# the communication adds to; TRAIN_FULL_MPI_SKIP_REDUCE, replicas drift).
for rate in compute ${BENCH_MPI_RATES:-full 1gbit}; do
    skip=()
    if [ "$rate" = compute ]; then skip=(-x TRAIN_FULL_MPI_SKIP_REDUCE=1); hosts_rate ""
    elif [ "$rate" = full ]; then hosts_rate ""
    else hosts_rate "$rate" || { echo "    $rate: tc tbf failed"; continue; }; fi
    read -r tx0 _ <<<"$(hosts_bytes)"
    HOSTS_TIMEOUT=900 hosts_mpirun -x AG_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 "${skip[@]}" \
        "$(realpath build/train_full_mpi)" "${HARGS[@]}" >"$work/h_$rate.out" 2>&1 ||
        { echo "    $rate: run failed"; tail -n 5 "$work/h_$rate.out"; continue; }
    read -r tx1 _ <<<"$(hosts_bytes)"
    f=$work/h_$rate.out
    python3 - "$rate" "$(field "$f" ms_per_step)" "$(dfield "$f" allreduce_ms_per_step)" \
        "$(dfield "$f" wait_ms_per_step)" "$((tx1 - tx0))" "$ITERS" "$(field "$f" params)" <<'PY'
import sys
rate, ms, ar, wait, tx, iters, params = sys.argv[1:]
ms, ar, wait, tx, iters, params = float(ms), float(ar), float(wait), int(tx), int(iters), int(params)
gbit = "%.2f" % (params * 4 * 8 / (ar / 1000) / 1e9) if ar > 0 and rate != "compute" else "-"
print("    %-10s %10.2f %14.2f %10.2f %14.2f %12s" % (rate, ms, ar, wait, tx / iters / 1e6, gbit))
PY
done
hosts_rate ""
