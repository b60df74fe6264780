#!/usr/bin/env bash
# Installs the system packages arenagrad needs, when missing: OpenBLAS
# headers and library, valgrind, pip, pkg-config and cmake (the consumer
# test builds against an installed copy with both), and Open MPI (compiler
# wrapper and runtime, for multi-process training). Uses apt-get when run as
# root on Debian/Ubuntu; otherwise prints the command to run.
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
[ ${#missing[@]} -eq 0 ] && exit 0
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
