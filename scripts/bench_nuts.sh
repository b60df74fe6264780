#!/usr/bin/env bash
# Effective samples per second of build/nuts against NumPyro's NUTS on the
# shipped posteriors (tests/data/posteriordb/*.data), side by side (`make
# bench`). Per posterior and seed: 4 chains x (1,000 warm-up + 1,000 draws)
# on each side, the smallest rank-normalised bulk ESS over the posterior's
# quantities (scripts/ess.py on both sets of draws, the same names) over
# the sampling wall time; the median of 3 seeds. Our time is the "..., N s,"
# sampling time build/nuts prints (warm-up and draws, to the millisecond, as
# NumPyro's is mcmc.run's), or the wall time of the whole process (loading
# included) where that line is missing or too coarse (an older build's 0.1 s
# under 2.5 s). NumPyro's chains run in parallel, its compilation excluded
# (scripts/bench_nuts_numpyro.py). Prints a table, then one line
# per posterior:
#   nuts_ess_per_s POSTERIOR ours X numpyro Y ratio R
# (R = ours / NumPyro's; "numpyro none" where a model kind has no NumPyro
# twin). Works from prebuilt binaries without network or toolchain. Says
# so where scripts/ess.py's smallest ESS of our draws is not the one in
# build/nuts's own summary (the library's estimator, per reported
# quantity).
#
# Usage: scripts/bench_nuts.sh [--quick] [--nuts PATH] [--python PY]
#          [--taskset CPUS] [--posteriors A,B] [--seeds 1,2,3]
#          [--warmup N] [--draws N] [--out DIR] [--check]
#   --quick      one posterior (eight schools), one seed, 200 + 200;
#                skips (exit 0, one line) without a Python with NumPyro
#   --python PY  a Python with numpyro and jax (default: BENCH_PYTHON,
#                target/numpyro-venv/bin/python, python3)
#   --taskset C  pin both samplers to the CPU list C (taskset -c C)
#   --posteriors names (file names without .data) to run, comma-separated
#   --out DIR    keep the draws, logs and NumPyro's output there
#   --check      also compare each NumPyro twin's first-seed means and sds
#                with the posterior's .ref (bench_nuts_numpyro.py --check);
#                exit status 1 if a twin samples another posterior
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
nuts=$root/build/nuts
py=
cpus=
posteriors=
seeds=1,2,3
warmup=1000
draws=1000
chains=4
out=
quick=0
check=0
check_failed=0
data_dir=$root/tests/data/posteriordb
die() {
    echo "bench nuts: $*" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case $1 in
    --quick) quick=1 ;;
    --nuts) nuts=${2:?}; shift ;;
    --python) py=${2:?}; shift ;;
    --taskset) cpus=${2:?}; shift ;;
    --posteriors) posteriors=${2:?}; shift ;;
    --seeds) seeds=${2:?}; shift ;;
    --warmup) warmup=${2:?}; shift ;;
    --draws) draws=${2:?}; shift ;;
    --out) out=${2:?}; shift ;;
    --check) check=1 ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (--help)" ;;
    esac
    shift
done
if [ "$quick" = 1 ]; then
    posteriors=${posteriors:-eight_schools-eight_schools_noncentered}
    seeds=${seeds%%,*}
    warmup=200
    draws=200
fi
has_numpyro() { "$1" -c 'import numpyro, jax, numpy' 2>/dev/null; }
if [ -n "$py" ]; then
    has_numpyro "$py" || die "$py cannot import numpyro, jax and numpy"
else
    for cand in "${BENCH_PYTHON:-}" "$root/target/numpyro-venv/bin/python" python3; do
        if [ -n "$cand" ] && has_numpyro "$cand"; then
            py=$cand
            break
        fi
    done
fi
if [ -z "$py" ]; then
    echo "bench nuts: NumPyro comparison skipped: no Python with numpyro and jax (make bench-deps, or --python PY)"
    exit 0
fi
[ -x "$nuts" ] || die "no $nuts (make build/nuts, or --nuts PATH)"
pin=()
if [ -n "$cpus" ]; then
    command -v taskset > /dev/null || die "--taskset needs taskset (util-linux)"
    pin=(taskset -c "$cpus")
fi
if [ -z "$posteriors" ]; then
    for f in "$data_dir"/*.data; do posteriors+=${posteriors:+,}$(basename "$f" .data); done
fi
if [ -z "$out" ]; then
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
fi
mkdir -p "$out"
now() { date +%s.%N; }
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

# min_ess CSV NAMES...: "ESS QUANTITY", the smallest bulk ESS of the names
min_ess() {
    "$py" - "$@" << 'EOF'
import sys
sys.path.insert(0, sys.argv[1])
from ess import bulk_ess, read_draws
draws = read_draws(sys.argv[2])
missing = [q for q in sys.argv[3:] if q not in draws]
if missing:
    sys.exit(f"{sys.argv[2]}: no column {missing[0]}")
ess, name = min((bulk_ess(draws[q]), q) for q in sys.argv[3:])
print(f"{ess:.1f} {name}")
EOF
}

echo "bench nuts: $chains chains x ($warmup warm-up + $draws draws), seeds $seeds, ${cpus:+CPUs $cpus, }$(nproc) CPUs online, NumPyro $("$py" -c 'import numpyro, jax; print(numpyro.__version__, "jax", jax.__version__)')"
lines=()
IFS=, read -r -a seed_list <<< "$seeds"
IFS=, read -r -a post_list <<< "$posteriors"
printf '%-42s %12s %14s %8s  %s\n' posterior "ours ESS/s" "NumPyro ESS/s" ratio "(min ESS ours / NumPyro, seconds ours / NumPyro, per seed)"
for name in "${post_list[@]}"; do
    data=$data_dir/$name.data
    [ -f "$data" ] || die "no $data"
    read -r -a names <<< "$(sed -n 's/^names //p' "$data")"
    kind=$(sed -n 's/^model //p' "$data")
    ours=() detail=()
    for seed in "${seed_list[@]}"; do
        base=$out/$name.ours.$seed
        t0=$(now)
        "${pin[@]}" "$nuts" "$data" --chains "$chains" --warmup "$warmup" --draws "$draws" --seed "$seed" \
            --quiet --csv "$base.csv" > "$base.txt" || die "$nuts failed on $name (seed $seed): see $base.txt"
        t1=$(now)
        # the sampling seconds build/nuts prints, where precise enough
        secs=$(sed -n 's/.*NUTS, .*, seed [0-9]*, \([0-9.]*\) s,.*/\1/p' "$base.txt" | head -1)
        if [ -z "$secs" ] || awk -v s="$secs" 'BEGIN {exit !(s < 2.5 && s !~ /\.[0-9][0-9][0-9]$/)}'; then
            secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
        fi
        read -r ess _ <<< "$(min_ess "$here" "$base.csv" "${names[@]}")"
        # the same figure from build/nuts's own summary (its ess_bulk column)
        printed=$(awk -v names=" ${names[*]} " '
            $1 == "quantity" { for (i = 1; i <= NF; i++) if ($i == "ess_bulk") col = i; next }
            col && index(names, " " $1 " ") { if (min == "" || $col + 0 < min) min = $col + 0 }
            END { print min }' "$base.txt")
        if [ -n "$printed" ] && awk -v a="$ess" -v b="$printed" 'BEGIN {exit !((a - b) ^ 2 > 1)}'; then
            echo "bench nuts: $name seed $seed: scripts/ess.py gives $ess, build/nuts's summary $printed"
        fi
        ours+=("$(awk -v e="$ess" -v s="$secs" 'BEGIN {printf "%.1f", e / s}')")
        detail+=("$ess/$secs")
    done
    o=$(printf '%s\n' "${ours[@]}" | median)
    base=$out/$name.numpyro
    ref=()
    [ "$check" = 1 ] && [ -f "$data_dir/$name.ref" ] && ref=(--check "$data_dir/$name.ref")
    set +e
    "${pin[@]}" "$py" "$here/bench_nuts_numpyro.py" "$data" --chains "$chains" --warmup "$warmup" --draws "$draws" \
        --seeds "$seeds" --out "$base" "${ref[@]}" > "$base.txt" 2> "$base.err"
    rc=$?
    set -e
    if [ "$rc" = 1 ] && [ ${#ref[@]} -gt 0 ] && grep -q '^numpyro_sampling_s' "$base.txt"; then
        echo "bench nuts: $name: the NumPyro twin's posterior does not match ${ref[1]}:"
        grep '^ ' "$base.txt"
        check_failed=1
        rc=0
    fi
    if [ "$rc" = 3 ]; then
        printf '%-42s %12s %14s %8s  %s\n' "$name" "$o" - - "no NumPyro twin for model kind $kind"
        lines+=("nuts_ess_per_s $name ours $o numpyro none (no NumPyro twin for model kind $kind)")
        continue
    fi
    [ "$rc" = 0 ] || die "NumPyro failed on $name: see $base.txt and $base.err"
    theirs=()
    k=0
    for seed in "${seed_list[@]}"; do
        secs=$(awk -v s="$seed" '$1 == "numpyro_sampling_s" && $2 == s {print $3}' "$base.txt")
        [ -n "$secs" ] || die "NumPyro printed no time for $name seed $seed: see $base.txt"
        read -r ess _ <<< "$(min_ess "$here" "$base.$seed.csv" "${names[@]}")"
        theirs+=("$(awk -v e="$ess" -v s="$secs" 'BEGIN {printf "%.1f", e / s}')")
        detail[k]="${detail[k]} vs $ess/$secs"
        k=$((k + 1))
    done
    t=$(printf '%s\n' "${theirs[@]}" | median)
    r=$(awk -v o="$o" -v t="$t" 'BEGIN {printf "%.2f", o / t}')
    printf '%-42s %12s %14s %8s  %s\n' "$name" "$o" "$t" "$r" "${detail[*]}"
    lines+=("nuts_ess_per_s $name ours $o numpyro $t ratio $r")
done
printf '%s\n' "${lines[@]}"
# the NumPyro set-up as its first run printed it (XLA flags included)
cat "$out"/*.numpyro.txt 2> /dev/null | grep -m1 '^numpyro_setup' || true
exit "$check_failed"
