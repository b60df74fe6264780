#!/usr/bin/env bash
# Chains in parallel against one after another (`make bench`): build/nuts
# on shipped posteriors, 4 chains x (1,000 warm-up + 1,000 draws), the
# parallel run (the chains on the library's threads, as many at once as
# it has) and --sequential alternated, the median of N runs of each. The
# two give the same draws bit for bit, so the ratio is one of times: the
# sampling seconds build/nuts prints. Prints one line per posterior:
#   nuts_chains POSTERIOR cpus C parallel X s sequential Y s speedup R
#
# Usage: scripts/bench_chains.sh [--quick] [--nuts PATH] [--posteriors A,B]
#          [--runs N]
#   --quick       eight schools alone, one run of each
#   --posteriors  file names under tests/data/posteriordb without .data
#                 (default: garch11, eight schools, hier_lkj, wells)
#   --runs N      runs of each form (default 3)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
nuts=$root/build/nuts
posteriors=garch-garch11,eight_schools-eight_schools_noncentered,synthetic-hier_lkj,wells-logistic
runs=3
die() {
    echo "bench chains: $*" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case $1 in
    --quick) posteriors=eight_schools-eight_schools_noncentered; runs=1 ;;
    --nuts) nuts=${2:?}; shift ;;
    --posteriors) posteriors=${2:?}; shift ;;
    --runs) runs=${2:?}; shift ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (--help)" ;;
    esac
    shift
done
[ -x "$nuts" ] || die "no $nuts (make build/nuts, or --nuts PATH)"
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
# seconds DATA [ARGS]: the sampling time of one run
seconds() {
    local data=$1
    shift
    "$nuts" "$data" --chains 4 --warmup 1000 --draws 1000 --quiet "$@" |
        sed -n 's/.*NUTS, .*, seed [0-9]*, \([0-9.]*\) s,.*/\1/p' | head -1
}
IFS=, read -r -a list <<< "$posteriors"
for name in "${list[@]}"; do
    data=$root/tests/data/posteriordb/$name.data
    [ -f "$data" ] || die "no $data"
    par=() seq=()
    for _ in $(seq "$runs"); do
        par+=("$(seconds "$data")")
        seq+=("$(seconds "$data" --sequential)")
    done
    p=$(printf '%s\n' "${par[@]}" | median)
    s=$(printf '%s\n' "${seq[@]}" | median)
    [ -n "$p" ] && [ -n "$s" ] || die "$name: no sampling time in build/nuts's output"
    awk -v n="$name" -v c="$(nproc)" -v p="$p" -v s="$s" \
        'BEGIN {printf "nuts_chains %s cpus %s parallel %s s sequential %s s speedup %.2f\n", n, c, p, s, s / p}'
done
