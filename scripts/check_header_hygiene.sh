#!/usr/bin/env bash
# Compiles include/arenagrad.h on its own, as C99 and as C++17, with warnings
# as errors, through a stub that includes it twice (include guard) and uses a
# few of its names. Exits non-zero if either compiler complains.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
header="$root/include/arenagrad.h"
[ -f "$header" ] || { echo "header hygiene: $header not found" >&2; exit 1; }
CC=${CC:-gcc}
CXX=${CXX:-g++}
tmp=$(mktemp -d)
# Main shell only: bash runs an inherited EXIT trap in a subshell killed at fork.
trap 'if [ "$BASHPID" = "$$" ]; then rm -rf "$tmp"; fi' EXIT
cat > "$tmp/stub.c" <<'STUB'
#include "arenagrad.h"
#include "arenagrad.h"
int main(void) {
    ag_context *ctx = 0;
    ag_tensor t = {0, 0, 0};
    ag_memory_stats_t mf;
    (void)t;
    (void)mf;
    (void)ag_status_str(AG_STATUS_OK);
    return ag_context_free(&ctx) == AG_STATUS_OK && AG_MAX_DIMS == 6 ? 0 : 1;
}
STUB
cp "$tmp/stub.c" "$tmp/stub.cpp"
status=0
if "$CC" -std=c99 -Wall -Wextra -Werror -fsyntax-only -I"$root/include" "$tmp/stub.c"; then
  echo "header hygiene: C99 OK"
else
  echo "header hygiene: arenagrad.h fails as C99" >&2; status=1
fi
if "$CXX" -std=c++17 -Wall -Wextra -Werror -fsyntax-only -I"$root/include" "$tmp/stub.cpp"; then
  echo "header hygiene: C++17 OK"
else
  echo "header hygiene: arenagrad.h fails as C++17" >&2; status=1
fi
exit $status
