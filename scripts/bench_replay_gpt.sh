#!/usr/bin/env bash
# The tiny and small GPT steps of build/train_full replayed (the default)
# against the eager path (--no-capture): five interleaved pairs of runs per
# preset, the median ms_per_step of each (train_full's own per-step median),
# one machine-readable line per preset:
#   bench replay model=tiny eager_ms_per_step=... replay_ms_per_step=... ratio=...
# ratio = replay / eager (at most 1.02 is the target: the GPT's ops are large,
# so the per-op savings are small and replay must cost nothing). `--quick`:
# fewer steps and three pairs. Run by `make bench`.
set -euo pipefail
cd "$(dirname "$0")/.."
TRAIN=build/train_full
DATA=../shared/data/shakespeare_tiny.txt
if [ ! -f "$DATA" ]; then
    # Without the shared corpus beside the clone: the generated one, as
    # the other scripts do (data/shakespeare.txt exists only after make data).
    make --no-print-directory build/corpus_small.txt >/dev/null || exit 1
    DATA=build/corpus_small.txt
fi
pairs=5 tiny_iters=300 small_iters=40
if [ "${1:-}" = --quick ]; then pairs=3 tiny_iters=60 small_iters=10; fi
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ms() { "$TRAIN" --preset "$1" --iters "$2" --data "$DATA" --sample-chars 0 --eval-every 100000 "${@:3}" |
    grep '^summary ' | tr ' ' '\n' | sed -n 's/^ms_per_step=//p'; }
for preset in tiny small; do
    iters=$tiny_iters
    [ "$preset" = small ] && iters=$small_iters
    eager=() replay=()
    for _ in $(seq "$pairs"); do
        eager+=("$(ms "$preset" "$iters" --no-capture)")
        replay+=("$(ms "$preset" "$iters")")
    done
    e=$(printf '%s\n' "${eager[@]}" | median)
    r=$(printf '%s\n' "${replay[@]}" | median)
    echo "bench replay model=$preset eager_ms_per_step=$e replay_ms_per_step=$r" \
        "ratio=$(awk -v a="$r" -v b="$e" 'BEGIN { printf "%.3f", a / b }') pairs=$pairs iters=$iters" \
        "eager_all=$(IFS=,; echo "${eager[*]}") replay_all=$(IFS=,; echo "${replay[*]}")"
done
