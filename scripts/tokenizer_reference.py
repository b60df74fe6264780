#!/usr/bin/env python3
"""Writes the tokenizer's reference fixtures from Hugging Face `tokenizers`.

The reference is a `tokenizers` BPE model built from the same two files the
library loads (data/gpt2/encoder.json and vocab.bpe, from
scripts/get_gpt2_vocab.sh) with the ByteLevel pre-tokenizer
(add_prefix_space=False) and no special tokens: what the library's encode
gives without `allow_special`. tests/tokenizer.rs compares against the
files written here without needing Python:

  tests/data/tokenizer/stress.txt        a UTF-8 stress text generated here
                                         (fixed seed)
  tests/data/tokenizer/stress.ids.txt    its reference ids, in decimal, 16 a
                                         line (each below 2^16)
  tests/data/tokenizer/reference.json    id counts and the FNV-1a (64-bit) of
                                         the ids as little-endian u32, for
                                         stress.txt and for
                                         ../shared/data/shakespeare_tiny.txt

    python3 scripts/tokenizer_reference.py [--vocab DIR] [--shakespeare FILE]
"""

import argparse
import hashlib
import json
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(ROOT, "tests", "data", "tokenizer")
DEFAULT_VOCAB = os.path.join(ROOT, "data", "gpt2")
DEFAULT_SHAKESPEARE = os.path.join(ROOT, "..", "shared", "data", "shakespeare_tiny.txt")


def reference_tokenizer(vocab_dir):
    from tokenizers import Tokenizer, models, pre_tokenizers

    bpe = models.BPE.from_file(
        os.path.join(vocab_dir, "encoder.json"), os.path.join(vocab_dir, "vocab.bpe")
    )
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    return tok


def stress_text():
    """Text that stresses the pre-tokenizer's classes and the merges."""
    rng = random.Random(20261126)
    parts = []
    # Emoji: ZWJ sequences, skin tones, flags, keycaps, variation selectors.
    parts += [
        "family \U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 ok",
        "\U0001F44B\U0001F3FD\U0001F44B\U0001F3FF wave",
        "\U0001F1EF\U0001F1F5\U0001F1FA\U0001F1F8 flags",
        "1\uFE0F\u20E3 #\uFE0F\u20E3 keycaps \u2764\uFE0F \u2764",
        "\U0001F3F3\uFE0F\u200D\U0001F308 \U0001F9D1\U0001F3FB\u200D\U0001F4BB",
    ]
    # Combining marks, precomposed and decomposed.
    parts += [
        "e\u0301le\u0300ve caf\u00e9 cafe\u0301 n\u0303 a\u0308\u0304",
        "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319a\u0321\u0358lgo\u0335",
        "\u1100\u1161\u11a8 \uac01 hangul jamo",
    ]
    # CJK, kana, full-width forms, ideographic space.
    parts += [
        "\u4eca\u65e5\u306f\u3001\u4e16\u754c\uff01\u3053\u3093\u306b\u3061\u306f",
        "\u4e2d\u6587\u5b57\u7b26\u3000\u5168\u89d2\uff21\uff22\uff23\uff11\uff12",
        "\U00020000\U0002A6DF\U00030000 extension B-G",
    ]
    # Arabic and Hebrew with bidi controls and marks.
    parts += [
        "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u0661\u0662\u0663",
        "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd \u05b0\u05b4",
        "\u202Eright-to-left override\u202C \u2066isolate\u2069 \u200Fmark\u200E",
        "\u0627\u064e\u0644\u0652\u0639\u064e\u0631\u064e\u0628\u0650\u064a\u064e\u0651\u0629",
    ]
    # Zero-width and other format characters, odd spaces.
    parts += [
        "zero\u200Bwidth\u200Cnon\u200Djoiner\u2060word\uFEFFjoiner",
        "nbsp\u00a0thin\u2009hair\u200Aem\u2003line\u2028para\u2029end",
        "soft\u00adhyphen \u180Emongolian \u3000\u3000ideographic",
        "\u0085next line\u000bvtab\u000cformfeed",
    ]
    # Digits of many scripts.
    parts += [
        "0123456789 \u0660\u0661\u0662 \u06f4\u06f5 \u0966\u0967\u0968 \u09e6\u09e7 "
        "\u0e50\u0e51 \u1040\u1041 \uff10\uff11 \U0001D7CE\U0001D7CF \u2460\u2461 "
        "\u00bd\u00bc \u2155 \u216b \u3007 12,345.678 1e-9",
    ]
    # Contractions in odd places.
    parts += [
        "don't I'M we'LL they'Re it's 's 't ''' 'll've're'd x'sy 'S",
        "rock'n'roll '90s ma'am o'clock can't've \u2019s \u2018t",
        " 's\t'll\n've  're",
    ]
    # Tabs, newlines, CRLF runs, mixed whitespace runs.
    parts += [
        "tab\tsep\t\tdouble\t \t mixed",
        "crlf\r\nline\r\n\r\n\r\nruns\r\r\n\n\n\n end",
        " \n \n\t\n  \n   x",
        "trailing   \n",
    ]
    # Random words from a mix of the above alphabets.
    alphabet = (
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:!?'\"-\t\n"
        "\u00e9\u00fc\u00df\u4e2d\u6587\u0645\u0631\u05e9\u0301\u200d\U0001F600\u0661\u3000"
    )
    for _ in range(300):
        parts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))))
    # A 10,000-space run and a 5,000-letter word.
    parts.append("before" + " " * 10000 + "after")
    parts.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(5000)))
    parts.append(" " * 10000)
    return "\n".join(parts) + "\n"


def ids_digest(ids):
    """FNV-1a (64-bit) of the ids as little-endian u32, as hex."""
    h = 0xCBF29CE484222325
    for b in b"".join(struct.pack("<I", i) for i in ids):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", default=DEFAULT_VOCAB, help="folder with encoder.json and vocab.bpe")
    ap.add_argument("--shakespeare", default=DEFAULT_SHAKESPEARE)
    args = ap.parse_args()
    import tokenizers

    tok = reference_tokenizer(args.vocab)
    os.makedirs(OUT, exist_ok=True)
    text = stress_text()
    with open(os.path.join(OUT, "stress.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(text)
    ids = tok.encode(text).ids
    assert max(ids) < 1 << 16
    with open(os.path.join(OUT, "stress.ids.txt"), "w") as f:
        f.write("".join(" ".join(str(i) for i in ids[k : k + 16]) + "\n" for k in range(0, len(ids), 16)))
    reference = {
        "tokenizers": tokenizers.__version__,
        "stress": {"bytes": len(text.encode("utf-8")), "ids": len(ids), "fnv1a64": ids_digest(ids)},
    }
    with open(args.shakespeare, "rb") as f:
        data = f.read()
    sids = tok.encode(data.decode("utf-8")).ids
    reference["shakespeare_tiny"] = {
        "bytes": len(data),
        "file_sha256": hashlib.sha256(data).hexdigest(),
        "ids": len(sids),
        "fnv1a64": ids_digest(sids),
    }
    with open(os.path.join(OUT, "reference.json"), "w") as f:
        json.dump(reference, f, indent=2)
        f.write("\n")
    print(f"stress.txt: {len(ids)} ids; shakespeare_tiny.txt: {len(sids)} ids")


if __name__ == "__main__":
    main()
