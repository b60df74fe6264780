#!/usr/bin/env bash
# make bench-gemm: the system OpenBLAS (with the kernel family arenagrad
# would pick, unless OPENBLAS_CORETYPE is set) against PyPI's
# scipy-openblas32 (a current OpenBLAS with prefixed symbols) on the
# products of one small and one medium training step, one BLAS thread per
# call as arenagrad runs them, then two. Printed, never asserted. The wheel
# goes to target/gemm-candidates (pip download, a few tens of MB).
# Usage: scripts/gemm_candidates.sh [REPS]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-9}
dir=target/gemm-candidates
mkdir -p "$dir"
lib=$(find "$dir" -name 'libscipy_openblas*.so' 2>/dev/null | head -1)
if [ -z "$lib" ]; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$dir" scipy-openblas32
  python3 -m zipfile -e "$(ls "$dir"/scipy_openblas32-*.whl | head -1)" "$dir/wheel"
  lib=$(find "$dir" -name 'libscipy_openblas*.so' | head -1)
fi
${CC:-gcc} -std=c11 -O2 -Wall -Wextra -Wpedantic -Werror scripts/gemm_candidates.c -ldl \
  -o "$dir/gemm_candidates"
# The system OpenBLAS gets OPENBLAS_CORETYPE if set, else the family
# arenagrad's own choice would switch it to; scipy-openblas32 picks its own.
core=${OPENBLAS_CORETYPE:-}
if [ -z "$core" ]; then
  if grep -q -w avx512f /proc/cpuinfo; then core=SkylakeX
  elif grep -q AuthenticAMD /proc/cpuinfo; then core=Zen
  else core=Haswell; fi
fi
for threads in 1 2; do
  GEMM_A_CORETYPE=$core "$dir/gemm_candidates" "$threads" "$reps" \
    libopenblas.so.0 "" "$lib" scipy_
done
