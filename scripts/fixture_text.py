#!/usr/bin/env python3
"""Text forms of the binary test fixtures, and the binaries rebuilt from them
(Python standard library only: make test runs it).

The repository holds no binary fixture: a test that needs one rebuilds it
from its text form in a temporary folder. Every value is kept as its bit
pattern in lowercase hex, so a rebuilt file is the original, byte for byte,
and no value goes through decimal.

Safetensors text (NAME.safetensors.txt rebuilds NAME.safetensors):

    safetensors-text 1
    metadata {"format":"pt"}            the header's __metadata__ as compact
                                        JSON, or "metadata none"
    tensor NAME DTYPE [D0,D1,...]       one per tensor, in the file's order
    3f800000 bf800000 ...               then its values: each element's
                                        little-endian bits as one hex word
                                        (F32 8 digits, F64 16, F16 and BF16
                                        4, ...), 32 bytes' worth a line

The rebuilt file is what safetensors writers make: the header as compact
JSON (__metadata__ first, then the tensors in order with contiguous
data_offsets) padded with spaces to a multiple of 8 bytes, then the data.
`st-to-text` refuses a file that this would not rebuild exactly.

Byte text (NAME.hex rebuilds NAME): the bytes as 2-digit lowercase hex words,
32 a line.

    fixture_text.py st-to-text FILE.safetensors OUT.txt
    fixture_text.py text-to-st IN.txt OUT.safetensors
    fixture_text.py bytes-to-hex FILE OUT.hex
    fixture_text.py hex-to-bytes IN.hex OUT
    fixture_text.py folder SRC DST    copies SRC's files into DST (made if
                                      absent), rebuilding each
                                      NAME.safetensors.txt as NAME.safetensors
                                      and each NAME.hex as NAME
    fixture_text.py textify DIR       the reverse, in place, for the
                                      generators: each NAME.safetensors and
                                      NAME.dat of DIR becomes its text form
                                      (checked to rebuild it) and is removed
"""

import json
import os
import shutil
import struct
import sys

MAGIC = "safetensors-text 1"
LINE_BYTES = 32
DTYPE_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1,
}
WORD_FORMAT = {1: "B", 2: "H", 4: "I", 8: "Q"}


class FixtureError(Exception):
    pass


def header_bytes(metadata, tensors):
    """The padded safetensors header for [(name, dtype, shape, nbytes)]."""
    header = {} if metadata is None else {"__metadata__": metadata}
    at = 0
    for name, dtype, shape, nbytes in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + nbytes]}
        at += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    return text + b" " * (-len(text) % 8)


def words_of(data, size):
    return struct.unpack(f"<{len(data) // size}{WORD_FORMAT[size]}", data)


def hex_lines(data, size):
    """data's elements (size bytes each) as hex words, LINE_BYTES a line."""
    per_line = LINE_BYTES // size
    words = [format(w, f"0{2 * size}x") for w in words_of(data, size)]
    return [" ".join(words[i : i + per_line]) for i in range(0, len(words), per_line)]


def st_to_text(src, dst):
    raw = open(src, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    metadata = header.pop("__metadata__", None)
    data = raw[8 + n :]
    lines = [MAGIC, "metadata " + ("none" if metadata is None else json.dumps(metadata, separators=(",", ":")))]
    tensors = []
    for name, info in header.items():
        dtype, shape, (lo, hi) = info["dtype"], info["shape"], info["data_offsets"]
        if " " in name or dtype not in DTYPE_BYTES:
            raise FixtureError(f"{src}: tensor {name!r} ({dtype}) has no text form")
        lines.append(f"tensor {name} {dtype} [{','.join(str(d) for d in shape)}]")
        lines += hex_lines(data[lo:hi], DTYPE_BYTES[dtype])
        tensors.append((name, dtype, shape, hi - lo))
    text = "\n".join(lines) + "\n"
    if text_to_st_bytes(text, src) != raw:
        raise FixtureError(f"{src}: its text form would not rebuild it byte for byte")
    with open(dst, "w") as f:
        f.write(text)


def text_to_st_bytes(text, where):
    """The safetensors bytes of a text form; where names it in errors."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()

    def fail(i, why):
        raise FixtureError(f"{where}:{i + 1}: {why}")

    if not lines or lines[0] != MAGIC:
        fail(0, f"not a safetensors text (first line is not {MAGIC!r})")
    if len(lines) < 2 or not lines[1].startswith("metadata "):
        fail(1, "expected 'metadata JSON' or 'metadata none'")
    meta_text = lines[1][len("metadata ") :]
    try:
        metadata = None if meta_text == "none" else json.loads(meta_text)
    except ValueError as e:
        fail(1, f"metadata is not JSON: {e}")
    tensors, blobs = [], []
    i = 2
    while i < len(lines):
        parts = lines[i].split(" ")
        if len(parts) != 4 or parts[0] != "tensor" or parts[2] not in DTYPE_BYTES:
            fail(i, "expected 'tensor NAME DTYPE [D0,...]'")
        name, dtype, dims = parts[1], parts[2], parts[3]
        if not (dims.startswith("[") and dims.endswith("]")):
            fail(i, f"shape {dims!r} is not [D0,D1,...]")
        try:
            shape = [int(d) for d in dims[1:-1].split(",")] if dims != "[]" else []
        except ValueError:
            fail(i, f"shape {dims!r} is not [D0,D1,...]")
        size = DTYPE_BYTES[dtype]
        count = 1
        for d in shape:
            count *= d
        words = []
        i += 1
        while len(words) < count:
            if i >= len(lines):
                fail(i, f"tensor {name}: {count} values expected, the file ends after {len(words)}")
            for w in lines[i].split(" "):
                if len(w) != 2 * size or w.strip("0123456789abcdef"):
                    fail(i, f"tensor {name}: {w!r} is not {2 * size} lowercase hex digits")
                words.append(int(w, 16))
            i += 1
        if len(words) != count:
            fail(i - 1, f"tensor {name}: {len(words)} values, its shape has {count}")
        blobs.append(struct.pack(f"<{count}{WORD_FORMAT[size]}", *words))
        tensors.append((name, dtype, shape, count * size))
    head = header_bytes(metadata, tensors)
    return struct.pack("<Q", len(head)) + head + b"".join(blobs)


def text_to_st(src, dst):
    data = text_to_st_bytes(open(src).read(), src)
    with open(dst, "wb") as f:
        f.write(data)


def bytes_to_hex(src, dst):
    with open(dst, "w") as f:
        f.write("".join(line + "\n" for line in hex_lines(open(src, "rb").read(), 1)))


def hex_to_bytes(src, dst):
    out = bytearray()
    for i, line in enumerate(open(src).read().splitlines()):
        for w in line.split(" "):
            if len(w) != 2 or w.strip("0123456789abcdef"):
                raise FixtureError(f"{src}:{i + 1}: {w!r} is not a byte as 2 lowercase hex digits")
            out.append(int(w, 16))
    with open(dst, "wb") as f:
        f.write(out)


def folder(src, dst):
    os.makedirs(dst, exist_ok=True)
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if name.endswith(".safetensors.txt"):
            text_to_st(path, os.path.join(dst, name[: -len(".txt")]))
        elif name.endswith(".hex"):
            hex_to_bytes(path, os.path.join(dst, name[: -len(".hex")]))
        elif os.path.isfile(path):
            shutil.copyfile(path, os.path.join(dst, name))


def textify(folder_path):
    for name in sorted(os.listdir(folder_path)):
        path = os.path.join(folder_path, name)
        if name.endswith(".safetensors"):
            st_to_text(path, path + ".txt")
        elif name.endswith(".dat"):
            bytes_to_hex(path, path + ".hex")
            hex_to_bytes(path + ".hex", path + ".check")
            same = open(path, "rb").read() == open(path + ".check", "rb").read()
            os.remove(path + ".check")
            if not same:
                raise FixtureError(f"{path}: its hex form would not rebuild it")
        else:
            continue
        os.remove(path)


COMMANDS = {
    "st-to-text": st_to_text,
    "text-to-st": text_to_st,
    "bytes-to-hex": bytes_to_hex,
    "hex-to-bytes": hex_to_bytes,
    "folder": folder,
    "textify": textify,
}

if __name__ == "__main__":
    command = COMMANDS.get(sys.argv[1] if len(sys.argv) > 1 else "")
    if command is None or len(sys.argv) != 2 + command.__code__.co_argcount:
        sys.exit(__doc__)
    try:
        command(*sys.argv[2:])
    except (FixtureError, OSError) as e:
        sys.exit(f"fixture_text: {e}")
