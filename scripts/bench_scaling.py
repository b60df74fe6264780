#!/usr/bin/env python3
"""The thread-scaling table: ms per GPT step at 1, 2, 4, 8 and all cores.

For each workload (small, medium, medium at batch 64) and thread count N it
runs the bench example's child (`bench --child PRESET STEPS [--batch B]
--step-only`, with AG_NUM_THREADS=N) and, with a Python that has torch,
PyTorch's same step at N intra-op threads (`scripts/bench_torch.py`, sdpa
attention and fused AdamW). Runs are alternated (ours, then PyTorch's, at
each N in turn); at 1 thread, the default and all cores it takes --rounds
rounds (3 by default), elsewhere one. It prints, per workload and N, the
median ms per step, the speed-up over 1 thread, the efficiency (speed-up /
N) and the ratio to PyTorch at the same N; then the default thread count
against 1 with busy loops on half of the CPUs, k contexts on k host threads
at the default against 1 thread each, and the machine's topology.

It runs on prebuilt binaries, so a machine without a toolchain (or without
network) can take the figures:

    python3 scripts/bench_scaling.py --bench target/release/examples/bench \\
        [--python PY] [--threads 1,2,4,8,all] [--rounds 3] [--steps S] [--quick]

`--steps S` scales every workload's fixed step count; `--quick` runs a
short form (small only, threads 1 and 2, one round) for tests. Nothing is
asserted: the figures are printed.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# (label, preset, batch or None for the preset's own, steps)
WORKLOADS = [
    ("small", "small", None, 30),
    ("medium", "medium", None, 10),
    ("medium b64", "medium", 64, 4),
]
TORCH_CONFIG = "{n}-threads+sdpa+fused-adamw"


def machine_cores():
    """Physical cores this process may use: the affinity mask, without
    hyperthread siblings (the library's own default is reported by the
    bench's runtime line; this is only for the table's columns)."""
    cpus = os.sched_getaffinity(0)
    cores = set()
    for c in cpus:
        base = f"/sys/devices/system/cpu/cpu{c}/topology/"
        try:
            pkg = open(base + "physical_package_id").read().strip()
            core = open(base + "core_id").read().strip()
            cores.add((pkg, core))
        except OSError:
            return len(cpus)
    return len(cores) or len(cpus)


def ours(bench, preset, batch, steps, n):
    cmd = [bench, "--child", preset, str(steps), "--step-only"]
    if batch:
        cmd += ["--batch", str(batch)]
    env = dict(os.environ, AG_NUM_THREADS=str(n))
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"bench_scaling: {' '.join(cmd)} failed:\n{out.stderr}")
    m = re.search(r"step_ms \(median of \d+\) ([0-9.]+)", out.stdout)
    if not m:
        sys.exit(f"bench_scaling: no step_ms in:\n{out.stdout}")
    return float(m.group(1))


def torch(python, preset, batch, steps, n):
    cmd = [python, os.path.join(HERE, "bench_torch.py"), preset, str(steps), TORCH_CONFIG.format(n=n)]
    if batch:
        cmd += ["--batch", str(batch)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"^torch-best \S+ ([0-9.]+)", out.stdout, re.M)
    return float(m.group(1)) if out.returncode == 0 and m else None


def torch_python(given):
    """A Python that imports torch: --python, BENCH_PYTHON, the bench venv, python3."""
    for py in (given, os.environ.get("BENCH_PYTHON"), "target/bench-venv/bin/python", "python3"):
        try:
            if py and subprocess.run([py, "-c", "import torch"], capture_output=True).returncode == 0:
                return py
        except OSError:
            continue
    return None


def topology():
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return "lscpu: not found"
    keep = ("Model name", "CPU(s)", "Thread(s) per core", "Core(s) per socket", "Socket(s)",
            "NUMA node(s)", "L2 cache", "L3 cache", "Flags")
    lines = []
    for line in text.splitlines():
        key = line.split(":")[0].strip()
        if key in keep:
            if key == "Flags":  # only what the kernels choose between
                flags = [f for f in line.split()[1:] if f in ("avx2", "fma", "avx512f", "avx512bw")]
                line = "Flags (kernels): " + " ".join(flags)
            lines.append("  " + line.strip())
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="target/release/examples/bench")
    ap.add_argument("--python")
    ap.add_argument("--threads", default="1,2,4,8,all")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=float, default=1.0)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    cores = machine_cores()
    counts = []
    for t in a.threads.split(","):
        n = cores if t == "all" else int(t)
        if n not in counts:
            counts.append(n)
    workloads = WORKLOADS
    if a.quick:
        counts, workloads, a.rounds = [1, 2], WORKLOADS[:1], 1
    # The default N is the machine's cores: together with 1 and all cores
    # they take every round; the other counts take one.
    full = {1, cores}
    py = torch_python(a.python)
    print(f"scaling: {cores} physical cores usable; threads {counts}; "
          f"{a.rounds} rounds at {sorted(full & set(counts))}, 1 elsewhere; "
          f"PyTorch {'with ' + py if py else 'not found (make bench-deps, or --python)'}")
    for label, preset, batch, steps in workloads:
        steps = max(2, int(steps * a.steps))
        mine = {n: [] for n in counts}
        theirs = {n: [] for n in counts}
        for r in range(a.rounds):
            for n in counts:
                if r > 0 and n not in full:
                    continue
                mine[n].append(ours(a.bench, preset, batch, steps, n))
                if py:
                    t = torch(py, preset, batch, steps, n)
                    if t is not None:
                        theirs[n].append(t)
        print(f"\n{label} ({steps} steps per run), median ms per step")
        print(f"  {'N':>3}  {'arenagrad':>10}  {'speed-up':>8}  {'effic.':>6}  {'PyTorch':>9}  {'ratio':>6}  runs")
        base = statistics.median(mine[counts[0]]) if counts[0] == 1 else None
        for n in counts:
            ms = statistics.median(mine[n])
            up = f"{base / ms:8.2f}" if base else f"{'-':>8}"
            eff = f"{base / ms / n:6.2f}" if base else f"{'-':>6}"
            tm = statistics.median(theirs[n]) if theirs[n] else None
            tcol = f"{tm:9.2f}" if tm else f"{'-':>9}"
            ratio = f"{ms / tm:6.2f}" if tm else f"{'-':>6}"
            print(f"  {n:>3}  {ms:10.2f}  {up}  {eff}  {tcol}  {ratio}  {len(mine[n])}")
    if not a.quick:
        # Shared machines and several contexts: the default thread count
        # with busy loops on half of the CPUs, and k contexts on k host
        # threads, each against 1 thread (printed by the bench itself).
        print()
        for flag in ("--contention", "--contexts"):
            out = subprocess.run([a.bench, flag, "small", "20", str(max(a.rounds, 3))],
                                 capture_output=True, text=True)
            print(out.stdout.strip() or f"{flag}: failed\n{out.stderr.strip()}")
    print("\nmachine:")
    print(topology())


if __name__ == "__main__":
    main()
