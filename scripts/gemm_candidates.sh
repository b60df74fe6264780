#!/usr/bin/env bash
# make bench-gemm: the system OpenBLAS (with the kernel family arenagrad
# would pick, unless OPENBLAS_CORETYPE is set) against each candidate on
# the products of one small and one medium training step, one BLAS thread
# per call as arenagrad runs them (then two, for scipy-openblas32):
# - PyPI's scipy-openblas32 (a current OpenBLAS with prefixed symbols);
# - Intel MKL (libmkl_rt, sequential), where the loader finds it (`make
#   deps` installs it on Intel CPUs);
# - Debian's BLIS 0.9 (libblis4-serial, unpacked, not installed).
# Printed, never asserted. Downloads go to target/gemm-candidates.
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
if ldconfig -p 2>/dev/null | grep -q 'libmkl_rt\.so\.3'; then
  MKL_THREADING_LAYER=SEQUENTIAL MKL_INTERFACE_LAYER=LP64 GEMM_A_CORETYPE=$core \
    "$dir/gemm_candidates" 1 "$reps" libopenblas.so.0 "" libmkl_rt.so.3 ""
else
  echo "bench-gemm: MKL not installed (make deps installs it on Intel CPUs): skipped"
fi
blis=$dir/blis/usr/lib/x86_64-linux-gnu/blis-serial/libblis.so.4
if [ ! -e "$blis" ] && command -v apt-get >/dev/null 2>&1; then
  (cd "$dir" && apt-get download libblis4-serial >/dev/null 2>&1 &&
    dpkg-deb -x libblis4-serial_*.deb blis) || true
fi
if [ -e "$blis" ]; then
  GEMM_A_CORETYPE=$core "$dir/gemm_candidates" 1 "$reps" libopenblas.so.0 "" "$(realpath "$blis")" ""
else
  echo "bench-gemm: BLIS could not be fetched (apt-get download libblis4-serial): skipped"
fi
