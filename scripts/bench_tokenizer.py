#!/usr/bin/env python3
"""GPT-2 encoding speed: arenagrad (examples/bench_tokenizer.rs) beside
Hugging Face `tokenizers` on one thread (RAYON_NUM_THREADS=1), both encoding
the whole file in one call, the vocabulary load excluded, median of --reps.

    python3 scripts/bench_tokenizer.py [--text FILE] [--reps 5] [--bench BINARY] [--quick]

Needs data/gpt2 (make tokenizer-data); without `tokenizers` installed, or
with --quick (one repetition, as `make bench BENCH_ARGS=--quick` runs it),
only arenagrad's figure is printed: `tokenizers` takes tens of seconds here.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    shared = os.path.join(ROOT, "..", "shared", "data", "shakespeare.txt")
    local = os.path.join(ROOT, "data", "shakespeare.txt")
    ap.add_argument("--text", default=shared if os.path.exists(shared) else local)
    ap.add_argument("--vocab", default=os.path.join(ROOT, "data", "gpt2"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="one repetition, no tokenizers")
    ap.add_argument("--bench", default=os.path.join(ROOT, "target", "release", "examples", "bench_tokenizer"))
    args = ap.parse_args()
    if args.quick:
        args.reps = 1
    if not os.path.exists(os.path.join(args.vocab, "encoder.json")):
        print(f"bench_tokenizer: {args.vocab} is absent (make tokenizer-data): skipped")
        return
    if not os.path.exists(args.text):
        print(f"bench_tokenizer: {args.text} is absent: skipped")
        return
    if not os.path.exists(args.bench):
        subprocess.run(["cargo", "build", "--release", "--example", "bench_tokenizer"], cwd=ROOT, check=True)
    ours = subprocess.run(
        [args.bench, "--vocab", args.vocab, "--text", args.text, "--reps", str(args.reps)],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    print(ours)
    if args.quick:
        return

    os.environ["RAYON_NUM_THREADS"] = "1"
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers
    except ImportError:
        print("tokenizers: not installed, no comparison")
        return
    bpe = models.BPE.from_file(os.path.join(args.vocab, "encoder.json"), os.path.join(args.vocab, "vocab.bpe"))
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    with open(args.text, "rb") as f:
        data = f.read()
    text = data.decode("utf-8")
    seconds = []
    for _ in range(max(1, args.reps)):
        start = time.perf_counter()
        ids = tok.encode(text).ids
        seconds.append(time.perf_counter() - start)
    median = statistics.median_low(seconds)
    print(
        f"tokenizers (RAYON_NUM_THREADS=1): {len(data)} bytes -> {len(ids)} ids, "
        f"median {median * 1e3:.1f} ms of {len(seconds)} ({len(data) / median / 1e6:.1f} MB/s)"
    )
    ours_ms = float(ours.split("median ")[1].split(" ms")[0])
    ours_ids = int(ours.split("-> ")[1].split(" ids")[0])
    if ours_ids != len(ids):
        sys.exit(f"id counts differ: arenagrad {ours_ids}, tokenizers {len(ids)}")
    print(f"arenagrad / tokenizers time: {ours_ms / (median * 1e3):.2f}")


if __name__ == "__main__":
    main()
