#!/usr/bin/env bash
# The cnn example's short checks (`make test-cnn`, part of `make test`):
#  1. one epoch on the first 6,400 training images (50 steps), scored on the
#     first 2,000 test images, must clear an accuracy floor: a fresh run
#     reaches 75.85% (the same bits at any thread count), so the floor
#     leaves room for numerical changes in the library but not for a broken
#     model, data path or optimizer;
#  2. --resume: 20 steps (2 epochs of 10) straight, and the same stopped
#     mid-epoch at step 5, resumed to step 15 (across the epoch boundary),
#     then resumed to the end, must leave checkpoint files with the same bytes
#     (weights, optimizer moments and the run state in the user bytes),
#     without and with batch norm (whose running statistics it holds too);
#  3. a truncated images file, a label out of range and a labels file in the
#     images' place are refused with exit 2 and a message saying which, as are bad flags.
# With --long (`make cnn-long`), instead: 20 epochs of the default network
# on the first 6,400 training images each (1,000 steps), each scored on the
# first 1,000 test images, must keep memory flat: the anonymous resident
# memory (heap, arena, stacks; not library code paging in) after epoch 20
# at most 1024 KiB above its value after epoch 1, and the arena high-water
# mark unchanged; the figures are printed.
# Usage: scripts/test_cnn.sh BUILD/cnn DATA_DIR [--long]
set -euo pipefail
CNN=${1:-build/cnn}
DATA=${2:-/usr/share/datasets/fashion-mnist}
FLOOR=0.70
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ "${3:-}" = --long ]; then
    epochs=20
    echo "== cnn-long: $epochs epochs of 6,400 images, memory after each"
    t0=$(date +%s)
    "$CNN" --data "$DATA" --out "$tmp/long" --epochs "$epochs" --subset 6400 \
        --test-subset 1000 --log-every 1000 >"$tmp/long.log"
    grep -E '^(epoch|memory)' "$tmp/long.log"
    mem() { sed -n "s/^memory epoch=$1 .*$2=\([0-9]*\).*/\1/p" "$tmp/long.log"; }
    warm=$(mem 1 anon_kb) end=$(mem "$epochs" anon_kb)
    hw1=$(mem 1 arena_high_water_bytes) hw=$(mem "$epochs" arena_high_water_bytes)
    rss1=$(mem 1 rss_kb) rss=$(mem "$epochs" rss_kb)
    if [ -z "$warm" ] || [ -z "$end" ] || [ -z "$hw1" ] || [ -z "$hw" ]; then
        echo "FAIL cnn-long: no memory line for epoch 1 or $epochs" >&2
        exit 1
    fi
    growth=$((end - warm))
    echo "cnn-long: anon_kb epoch 1 $warm, epoch $epochs $end (growth $growth KiB, max 1024);" \
        "rss_kb $rss1 -> $rss; arena high-water $hw1 -> $hw bytes; wall $(($(date +%s) - t0)) s"
    if [ "$growth" -gt 1024 ] || [ "$hw1" != "$hw" ]; then
        echo "FAIL cnn-long: memory is not flat over $epochs epochs" >&2
        exit 1
    fi
    echo "PASS cnn-long"
    exit 0
fi

echo "== test-cnn: 1 epoch on 6,400 images, accuracy floor $FLOOR"
"$CNN" --data "$DATA" --out "$tmp/short" --epochs 1 --subset 6400 --test-subset 2000 \
    --min-accuracy "$FLOOR" --log-every 25 | grep -E '^(epoch|test accuracy)'

# resume_check NAME [FLAGS...]: the split run's checkpoint equals the
# straight run's, byte for byte.
resume_check() {
    local name=$1
    shift
    local common=(--data "$DATA" --epochs 2 --subset 1280 --test-subset 200 --warmup 3
        --log-every 100 "$@")
    local d="$tmp/$name"
    mkdir -p "$d"
    "$CNN" "${common[@]}" --out "$d/straight" >"$d/straight.log"
    "$CNN" "${common[@]}" --out "$d/split" --stop-after 5 >"$d/split1.log"
    "$CNN" "${common[@]}" --out "$d/split" --resume --stop-after 15 >"$d/split2.log"
    "$CNN" "${common[@]}" --out "$d/split" --resume >"$d/split3.log"
    grep -q 'resumed from .* at step 5 ' "$d/split2.log"
    grep -q 'resumed from .* at step 15 ' "$d/split3.log"
    if ! cmp "$d/straight/checkpoint.bin" "$d/split/checkpoint.bin"; then
        echo "test-cnn ($name): the resumed run's checkpoint differs from the uninterrupted one" >&2
        exit 1
    fi
    local want got
    want=$(grep '^test accuracy' "$d/straight.log")
    got=$(grep '^test accuracy' "$d/split3.log")
    if [ "$want" != "$got" ]; then
        echo "test-cnn ($name): accuracy '$got' after resuming, '$want' straight" >&2
        exit 1
    fi
    echo "resume ($name): 5 + 10 + 5 steps = 20 straight, same checkpoint bytes ($want)"
}

echo "== test-cnn: --resume gives the bytes of an uninterrupted run"
resume_check plain
# Batch norm's running statistics travel in the checkpoint too.
resume_check batch-norm --batch-norm

echo "== test-cnn: a truncated data file is refused"
mkdir -p "$tmp/bad"
for f in train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
    ln -s "$DATA/$f" "$tmp/bad/$f"
done
# zlib reads plain files too: the first 100,000 bytes, uncompressed.
# (gzip stops on the closed pipe: its status is not the test's.)
{ gzip -dc "$DATA/train-images-idx3-ubyte.gz" || true; } | head -c 100000 \
    >"$tmp/bad/train-images-idx3-ubyte.gz"
set +e
"$CNN" --data "$tmp/bad" --out "$tmp/badrun" >/dev/null 2>"$tmp/bad.err"
rc=$?
set -e
if [ "$rc" != 2 ] || ! grep -q truncated "$tmp/bad.err"; then
    echo "test-cnn: a truncated images file gave exit $rc: $(cat "$tmp/bad.err")" >&2
    exit 1
fi
echo "refused: $(cat "$tmp/bad.err")"
# Label 10 at item 3 (plain IDX: zlib reads it as it is).
ln -sf "$DATA/train-images-idx3-ubyte.gz" "$tmp/bad/train-images-idx3-ubyte.gz"
rm "$tmp/bad/train-labels-idx1-ubyte.gz"
gzip -dc "$DATA/train-labels-idx1-ubyte.gz" >"$tmp/labels"
{ head -c 11 "$tmp/labels"; printf '\012'; tail -c +13 "$tmp/labels"; } \
    >"$tmp/bad/train-labels-idx1-ubyte.gz"
set +e
"$CNN" --data "$tmp/bad" --out "$tmp/badrun" >/dev/null 2>"$tmp/bad.err"
rc=$?
set -e
if [ "$rc" != 2 ] || ! grep -q 'label 10 of item 3 is out of range' "$tmp/bad.err"; then
    echo "test-cnn: a label of 10 gave exit $rc: $(cat "$tmp/bad.err")" >&2
    exit 1
fi
echo "refused: $(cat "$tmp/bad.err")"
ln -sf "$DATA/train-labels-idx1-ubyte.gz" "$tmp/bad/train-labels-idx1-ubyte.gz"
ln -sf "$DATA/train-labels-idx1-ubyte.gz" "$tmp/bad/train-images-idx3-ubyte.gz"
set +e
"$CNN" --data "$tmp/bad" --out "$tmp/badrun" >/dev/null 2>"$tmp/bad.err"
rc=$?
set -e
if [ "$rc" != 2 ] || ! grep -q 'magic number 2049, expected 2051' "$tmp/bad.err"; then
    echo "test-cnn: a labels file given as images gave exit $rc: $(cat "$tmp/bad.err")" >&2
    exit 1
fi
echo "refused: $(cat "$tmp/bad.err")"
for bad in "--bogus" "--epochs 0" "--optimizer adam"; do
    set +e
    # shellcheck disable=SC2086
    "$CNN" --data "$DATA" --out "$tmp/badrun" $bad >/dev/null 2>"$tmp/bad.err"
    rc=$?
    set -e
    if [ "$rc" != 2 ] || ! grep -q -- "${bad%% *}" "$tmp/bad.err"; then
        echo "test-cnn: '$bad' gave exit $rc: $(cat "$tmp/bad.err")" >&2
        exit 1
    fi
done
echo "bad flags refused with exit 2"
echo "test-cnn: passed"
