#!/usr/bin/env bash
# Checkpoint torture; `make torture` runs it.
#
#   scripts/torture.sh [TRIALS] [FLIPS]     defaults: 200 kills, 10000 flips
#
# 1. every truncation offset and FLIPS random single-bit flips of a tiny-GPT
#    checkpoint are refused with CHECKPOINT_CORRUPT, parameters untouched;
#    other model shapes give CHECKPOINT_MISMATCH;
# 2. TRIALS times SIGKILL at a random moment of a save loop: the file always
#    loads and is one consistent save; at most one stray *.tmp.<pid> (removed);
# 3. disk full: a 64 KiB tmpfs (mount, as root) gives IO, leaves no temporary
#    file and the earlier checkpoint intact; then the same tmpfs remounted
#    read-only gives IO. Where mounting is refused, RLIMIT_FSIZE stands in for
#    the full disk and the read-only case is skipped (said so);
# 4. unwritable paths (under a regular file, missing folder, a folder): IO.
set -euo pipefail
cd "$(dirname "$0")/.."
TRIALS=${1:-200}
FLIPS=${2:-10000}
export OPENBLAS_NUM_THREADS=1

cargo build --release --example ckpt_torture
BIN=target/release/examples/ckpt_torture
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ag_torture.XXXXXX")
MNT=$WORK/tmpfs
mounted=0
cleanup() {
  if [ "$mounted" = 1 ]; then umount "$MNT" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
# Main shell only: bash runs an inherited EXIT trap in a subshell killed at fork.
trap 'if [ "$BASHPID" = "$$" ]; then cleanup; fi' EXIT

"$BIN" corrupt "$FLIPS"
"$BIN" kill "$WORK/kill" "$TRIALS"

mkdir -p "$MNT"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=64k tmpfs "$MNT" 2>/dev/null; then
  mounted=1
  "$BIN" diskfull "$MNT"
  mount -o remount,ro "$MNT"
  "$BIN" readonly "$MNT"
else
  echo "torture: mounting a 64 KiB tmpfs was refused here (needs root and CAP_SYS_ADMIN):"
  echo "torture: disk full simulated with RLIMIT_FSIZE; read-only mount case skipped"
  "$BIN" diskfull "$MNT" --rlimit
fi

"$BIN" unwritable "$WORK/unwritable"
echo "torture: all passed"
