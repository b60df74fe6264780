#!/usr/bin/env bash
# The cnn example's epoch time (`make bench`), and PyTorch's on the same
# network when a Python with torch is at hand (BENCH_PYTHON, the bench
# venv, the interop venv or python3): the training steps of one whole
# epoch of 60,000 images (468 steps of 128), data loading and evaluation
# excluded, 2 threads each (CNN_THREADS), median of 3 runs alternated,
# ours first. Prints
#   cnn_epoch_ms N
#   torch_cnn_epoch_ms N
#   cnn_epoch_ratio R         (ours / PyTorch's; below 1 is faster)
# `--quick`: one run each of the first 50 steps, printed as
# cnn_epoch_ms_6400 and torch_cnn_steps_ms 50.
# Usage: scripts/bench_cnn.sh BUILD/cnn DATA_DIR [--quick]
set -euo pipefail
CNN=${1:-build/cnn}
DATA=${2:-/usr/share/datasets/fashion-mnist}
threads=${CNN_THREADS:-2}
here=$(dirname "$0")
if [ ! -f "$DATA/train-images-idx3-ubyte.gz" ]; then
    echo "bench cnn: no Fashion-MNIST in $DATA (make deps installs it): skipped"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--data "$DATA" --out "$tmp" --epochs 1 --test-subset 500 --bench --log-every 1000 --threads "$threads")
py=
for cand in "${BENCH_PYTHON:-}" target/bench-venv/bin/python target/interop/venv/bin/python python3; do
    if [ -n "$cand" ] && "$cand" -c 'import torch' 2>/dev/null; then
        py=$cand
        break
    fi
done
median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
if [ "${3:-}" = --quick ]; then
    "$CNN" "${args[@]}" --subset 6400 | sed -n 's/^cnn_epoch_ms /cnn_epoch_ms_6400 /p'
    [ -n "$py" ] && "$py" "$here/bench_cnn_torch.py" "$DATA" --threads "$threads" --steps 50
    exit 0
fi
ours=() theirs=()
for round in 1 2 3; do
    ours+=("$("$CNN" "${args[@]}" | sed -n 's/^cnn_epoch_ms //p')")
    if [ -n "$py" ]; then
        theirs+=("$("$py" "$here/bench_cnn_torch.py" "$DATA" --threads "$threads" | sed -n 's/^torch_cnn_epoch_ms //p')")
    fi
    [ "$round" = 1 ] && [ -z "$py" ] && break # without PyTorch one run is enough
done
o=$(printf '%s\n' "${ours[@]}" | median)
echo "cnn_epoch_ms $o"
if [ -z "$py" ]; then
    echo "bench cnn: PyTorch comparison skipped: no Python with torch (make bench-deps, or BENCH_PYTHON)"
    exit 0
fi
t=$(printf '%s\n' "${theirs[@]}" | median)
echo "torch_cnn_epoch_ms $t (runs: ours ${ours[*]}; PyTorch ${theirs[*]})"
awk -v o="$o" -v t="$t" -v n="$threads" 'BEGIN {printf "cnn_epoch_ratio %.3f (ours / PyTorch, %s threads each)\n", o / t, n}'
