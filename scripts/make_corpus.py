#!/usr/bin/env python3
"""Writes a small deterministic English-like corpus for tests.

Usage: python3 scripts/make_corpus.py PATH [BYTES]

Used when ../shared/data is absent (make build/corpus_small.txt). The text is
play-like: a speaker's name on its own line, then one to three sentences built
from a fixed word list. A 64-bit LCG drives every choice, so the output is the
same byte for byte on every machine and Python version (about 200 KB, pure
ASCII, 40-odd distinct bytes).
"""
import os
import sys

SPEAKERS = ["KING", "QUEEN", "DUKE", "LADY", "FOOL", "GHOST", "HERALD", "NURSE"]
NOUNS = ["king", "queen", "night", "day", "heart", "sword", "crown", "love",
         "friend", "house", "world", "time", "blood", "hand", "eye", "word",
         "father", "son", "lord", "ghost", "storm", "sea", "fire", "grave"]
VERBS = ["loves", "fears", "keeps", "takes", "speaks", "sees", "holds",
         "seeks", "finds", "leaves", "calls", "knows", "hears", "gives"]
ADJS = ["good", "noble", "dark", "sweet", "old", "young", "fair", "proud",
        "false", "true", "gentle", "cold", "bright", "poor"]
ADVS = ["now", "then", "still", "soon", "here", "there", "yet", "again"]
ENDS = [".", ".", ".", "!", "?", ";"]


class Lcg:
    """Knuth's MMIX LCG; the top bits are used."""

    def __init__(self, seed):
        self.state = seed & 0xFFFFFFFFFFFFFFFF

    def below(self, n):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        return (self.state >> 33) % n

    def pick(self, items):
        return items[self.below(len(items))]


def sentence(rng):
    words = ["the", rng.pick(ADJS), rng.pick(NOUNS), rng.pick(VERBS), "the", rng.pick(NOUNS)]
    if rng.below(2):
        words += ["of", "the", rng.pick(ADJS), rng.pick(NOUNS)]
    if rng.below(3) == 0:
        words.append(rng.pick(ADVS))
    if rng.below(4) == 0:
        words[-1] += ","
        words += ["and", "the", rng.pick(NOUNS), rng.pick(VERBS), "me"]
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.pick(ENDS)


def corpus(size):
    rng = Lcg(20240611)
    out = []
    total = 0
    while total < size:
        block = rng.pick(SPEAKERS) + ":\n" + " ".join(
            sentence(rng) for _ in range(1 + rng.below(3))) + "\n\n"
        out.append(block)
        total += len(block)
    return "".join(out)[:size]


def main():
    if len(sys.argv) not in (2, 3):
        sys.stderr.write("usage: make_corpus.py PATH [BYTES]\n")
        return 2
    path = sys.argv[1]
    size = int(sys.argv[2]) if len(sys.argv) == 3 else 200_000
    text = corpus(size).encode("ascii")
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(text)
    os.replace(tmp, path)
    print(f"corpus: {path} ({len(text)} bytes, {len(set(text))} distinct bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
