#!/usr/bin/env bash
# Installs the system packages arenagrad needs, when missing: OpenBLAS
# headers and library, valgrind, pip. Uses apt-get when run as root on
# Debian/Ubuntu; otherwise prints the command to run.
set -euo pipefail
missing=()
[ -e /usr/include/x86_64-linux-gnu/cblas.h ] || [ -e /usr/include/cblas.h ] || \
  dpkg -s libopenblas-dev >/dev/null 2>&1 || missing+=(libopenblas-dev)
command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "deps: missing ${missing[*]}; run: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
