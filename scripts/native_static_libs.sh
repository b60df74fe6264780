#!/usr/bin/env bash
# Prints the native libraries a program must link after libarenagrad.a,
# as rustc reports them (`--print native-static-libs`), e.g.
#   -lopenblas -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
# The list depends only on the dependency graph and the toolchain, not on
# arenagrad's own code, so it is cached in target/ under a key made of
# Cargo.lock, Cargo.toml and `rustc -vV`; it is recomputed when one of
# them changes.
#
# Why a separate target folder: `cargo rustc -- --print ...` changes the
# arguments of the arenagrad unit, so in target/release it would throw away
# the normal build's fingerprint (and the next `cargo build --release`
# would rebuild the crate again). The probe builds in the dev profile with
# no debug info, in target/native-libs-probe, once per key.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
CARGO=${CARGO:-cargo}
cache=target/native-static-libs.txt
key=$( { cat Cargo.lock Cargo.toml; rustc -vV; } | cksum | cut -d' ' -f1)
if [ -f "$cache" ] && [ "$(head -n 1 "$cache")" = "$key" ]; then
    sed -n 2p "$cache"
    exit 0
fi
mkdir -p target
# stdout is the answer; say on stderr why the first call takes a while.
echo "native_static_libs: asking rustc which system libraries a static link of" \
     "libarenagrad.a needs (a probe build in target/native-libs-probe, about" \
     "40 s once per toolchain; cached in $cache)" >&2
log=$(mktemp)
# Main shell only: bash runs an inherited EXIT trap in a subshell killed at fork.
trap 'if [ "$BASHPID" = "$$" ]; then rm -f "$log"; fi' EXIT
if ! CARGO_PROFILE_DEV_DEBUG=0 "$CARGO" rustc --quiet --lib --crate-type staticlib \
    --target-dir target/native-libs-probe -- --print native-static-libs >"$log" 2>&1; then
    cat "$log" >&2
    echo "native_static_libs: the probe build failed" >&2
    exit 1
fi
libs=$(sed -n 's/^note: native-static-libs: //p' "$log" | tail -n 1)
if [ -z "$libs" ]; then
    cat "$log" >&2
    echo "native_static_libs: rustc printed no native-static-libs line" >&2
    exit 1
fi
printf '%s\n%s\n' "$key" "$libs" >"$cache"
echo "$libs"
