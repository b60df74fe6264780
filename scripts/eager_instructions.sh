#!/usr/bin/env bash
# make bench-instructions: instructions per op of the eager path, counted by
# callgrind over steady-state gradients of bench_eager's two models. The
# counts are the same on a quiet host and a loaded one, so a change to the
# per-op path can be judged before and after without alternated timing
# runs; the time per op follows them on one CPU (a fifth fewer
# instructions measured close to a fifth less time). Printed, never
# asserted.
# Usage: scripts/eager_instructions.sh [LIB]   (default target/release/libarenagrad.a)
set -euo pipefail
cd "$(dirname "$0")/.."
lib=${1:-target/release/libarenagrad.a}
dir=target/eager-instructions
mkdir -p "$dir"
# bench_models.h's timing helpers go unused here.
${CC:-gcc} -std=c11 -O2 -Wall -Wextra -Wpedantic -Werror -Wno-unused-function -Iinclude -Ic_examples \
  scripts/eager_instructions.c "$lib" -lopenblas -lm -lpthread -ldl -o "$dir/eager_instructions"
for model in scalar_chain:20 eight_schools:1000; do
  name=${model%%:*} n=${model##*:}
  out=$(AG_GEMM=openblas OPENBLAS_NUM_THREADS=1 valgrind --tool=callgrind --instr-atstart=no \
    --callgrind-out-file="$dir/$name.callgrind" "$dir/eager_instructions" "$name" "$n" 2>&1)
  refs=$(sed -n 's/.*I *refs: *//p' <<<"$out" | tr -d ,)
  ops=$(sed -n 's/^ops=\([0-9]*\).*/\1/p' <<<"$out")
  awk -v m="$name" -v r="$refs" -v o="$ops" -v n="$n" 'BEGIN {
    printf "eager instructions model=%s ops=%d per_op=%.0f per_gradient=%.0f\n", m, o, r / (o * n), r / n }'
done
echo "per function: callgrind_annotate $dir/<model>.callgrind"
