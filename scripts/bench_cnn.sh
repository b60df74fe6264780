#!/usr/bin/env bash
# The cnn example's epoch time (`make bench`): one line
#   cnn_epoch_ms N
# the training steps of one whole epoch of 60,000 images (468 steps of 128),
# data loading and evaluation excluded. `--quick`: an epoch of the first
# 6,400 images (50 steps), printed as cnn_epoch_ms_6400.
# Usage: scripts/bench_cnn.sh BUILD/cnn DATA_DIR [--quick]
set -euo pipefail
CNN=${1:-build/cnn}
DATA=${2:-/usr/share/datasets/fashion-mnist}
if [ ! -f "$DATA/train-images-idx3-ubyte.gz" ]; then
    echo "bench cnn: no Fashion-MNIST in $DATA (make deps installs it): skipped"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(--data "$DATA" --out "$tmp" --epochs 1 --test-subset 500 --bench --log-every 1000)
if [ "${3:-}" = --quick ]; then
    "$CNN" "${args[@]}" --subset 6400 | sed -n 's/^cnn_epoch_ms /cnn_epoch_ms_6400 /p'
else
    "$CNN" "${args[@]}" | grep '^cnn_epoch_ms '
fi
