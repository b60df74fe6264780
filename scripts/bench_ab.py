#!/usr/bin/env python3
"""Two builds of the bench example, A/B, in alternated runs.

Each round runs the old build's step, then the new one's (the order flips
every round, so a drift in the machine's speed falls on both), for each
preset, through the bench child (`bench --child PRESET STEPS --step-only`).
It prints per preset the median ms per step of each build, the ratio of the
medians and the median of the per-round ratios (new / old):

    python3 scripts/bench_ab.py OLD_BENCH NEW_BENCH [--rounds 5]
        [--presets small:30,medium:10] [--threads N]

`--threads N` sets AG_NUM_THREADS for both (unset: each build's default).
Build the old binary from a worktree of the old commit with
`cargo build --release --features trace --example bench`. Nothing is
asserted: the figures are printed.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys


def step_ms(bench, preset, steps, threads):
    env = dict(os.environ)
    if threads is None:
        env.pop("AG_NUM_THREADS", None)
    else:
        env["AG_NUM_THREADS"] = str(threads)
    out = subprocess.run(
        [bench, "--child", preset, str(steps), "--step-only"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout
    m = re.search(r"step_ms \(median of \d+\) ([0-9.]+)", out)
    if not m:
        sys.exit(f"bench_ab: no step_ms in the output of {bench}:\n{out}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--presets", default="small:30,medium:10")
    ap.add_argument("--threads", type=int)
    a = ap.parse_args()
    presets = [(p.split(":")[0], int(p.split(":")[1])) for p in a.presets.split(",")]
    for preset, steps in presets:
        old, new = [], []
        for r in range(a.rounds):
            pair = [("old", a.old), ("new", a.new)]
            if r % 2:
                pair.reverse()
            got = {k: step_ms(b, preset, steps, a.threads) for k, b in pair}
            old.append(got["old"])
            new.append(got["new"])
        ratios = [n / o for n, o in zip(new, old)]
        mo, mn = statistics.median(old), statistics.median(new)
        print(
            f"ab: preset={preset} rounds={a.rounds} threads={a.threads or 'default'} "
            f"old_ms={mo:.2f} new_ms={mn:.2f} new_over_old={mn / mo:.3f} "
            f"pair_ratio_median={statistics.median(ratios):.3f} "
            f"old={','.join(f'{x:.1f}' for x in old)} new={','.join(f'{x:.1f}' for x in new)}",
            flush=True,
        )


if __name__ == "__main__":
    main()
