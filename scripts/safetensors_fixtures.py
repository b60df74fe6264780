#!/usr/bin/env python3
"""Safetensors files written and read by Python's `safetensors` package, for
the interoperability tests of src/safetensors_io.rs (tests/safetensors_interop.rs).

  safetensors_fixtures.py write DIR   writes DIR/numpy_written.safetensors
                                      (float32), DIR/numpy_f16.safetensors
                                      (float16, numpy's) and
                                      DIR/handmade_bf16.safetensors (bfloat16,
                                      which numpy lacks: bytes written here)
  safetensors_fixtures.py shard SRC OUT [F32|BF16]
                                      splits SRC/model.safetensors (float32;
                                      or its text form, model.safetensors.txt,
                                      see scripts/fixture_text.py)
                                      into two shards in OUT as transformers'
                                      save_pretrained does (OUT/model-0000k-
                                      of-00002.safetensors and OUT/model.
                                      safetensors.index.json; SRC/config.json
                                      copied), the second shard in the dtype
                                      given (BF16: rounded to nearest even,
                                      as torch does; default BF16). Needs no
                                      package: make test runs it.
  safetensors_fixtures.py read FILE   prints one line per tensor:
                                      name<TAB>shape,comma,separated<TAB>hex of
                                      the little-endian float32 bytes

write and read need `pip install safetensors numpy`. The committed files in
tests/data/ were made with `write tests/data` (safetensors 0.8.0, numpy 2.4)
and tests/data/gpt2_sharded/ with `shard tests/data/gpt2 tests/data/gpt2_sharded`
then `scripts/fixture_text.py textify tests/data/gpt2_sharded` (the shards
are committed as text).
"""
import json
import os
import shutil
import struct
import sys

import fixture_text


def write(folder):
    import numpy as np
    from safetensors.numpy import save_file

    tensors = {
        "wte": (np.arange(12, dtype=np.float32).reshape(3, 4) * 0.25 - 1.0),
        "h.0.ln_1.bias": np.array([-0.0, 1e-40, 3.4e38, 1.5], dtype=np.float32),
        "scalar": np.array(2.5, dtype=np.float32),
    }
    save_file(tensors, f"{folder}/numpy_written.safetensors", metadata={"format": "np"})
    # Normal, subnormal (2^-24, the smallest), -0, the largest, infinity.
    half = np.array([[1.0, -2.5], [2.0**-24, -0.0], [65504.0, np.inf]], dtype=np.float16)
    save_file({"half": half}, f"{folder}/numpy_f16.safetensors")
    write_bf16(f"{folder}/handmade_bf16.safetensors")


# bfloat16 bit patterns and their values: 1, -1.5, 2^-133 (the smallest
# subnormal), the largest finite, -infinity, -0.
BF16 = [0x3F80, 0xBFC0, 0x0001, 0x7F7F, 0xFF80, 0x8000]


def write_bf16(path):
    """A safetensors file by hand: u64 header length, JSON, the data."""
    data = struct.pack("<6H", *BF16)
    header = {"brain": {"dtype": "BF16", "shape": [3, 2], "data_offsets": [0, len(data)]}}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def read(path):
    import numpy as np
    from safetensors.numpy import load_file

    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    if any(v.get("dtype") == "BF16" for k, v in header.items() if k != "__metadata__"):
        read_bf16(header, raw[8 + n :])
        return
    for name, arr in sorted(load_file(path).items()):
        shape = ",".join(str(d) for d in arr.shape)
        print(f"{name}\t{shape}\t{arr.astype('<f4').tobytes().hex()}")



def read_bf16(header, data):
    """What read prints, for a file of bfloat16 tensors (which numpy's
    safetensors cannot load): each value's bits are float32's upper half."""
    import numpy as np

    for name, info in sorted(header.items()):
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        bits = np.frombuffer(data[begin:end], dtype="<u2").astype("<u4") << 16
        shape = ",".join(str(d) for d in info["shape"])
        print(f"{name}\t{shape}\t{bits.astype('<u4').tobytes().hex()}")


def tensors_of(path):
    """(header, data bytes) of a safetensors file, or of its text form."""
    if os.path.exists(path):
        with open(path, "rb") as f:
            raw = f.read()
    else:
        with open(path + ".txt") as f:
            raw = fixture_text.text_to_st_bytes(f.read(), path + ".txt")
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def to_bf16(data):
    """float32 bytes as bfloat16 bytes, rounded to nearest, ties to even."""
    words = struct.unpack(f"<{len(data) // 4}I", data)
    assert all((w & 0x7F800000) != 0x7F800000 for w in words), "inf or NaN"
    return struct.pack(f"<{len(words)}H", *(((w + 0x7FFF + ((w >> 16) & 1)) >> 16) for w in words))


def write_file(path, tensors):
    """tensors: [(name, dtype, shape, bytes)], written sorted by name."""
    header, at, blobs = {}, 0, []
    for name, dtype, shape, data in sorted(tensors):
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(data)]}
        at += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    return at


def shard(src, out, dtype="BF16"):
    header, data = tensors_of(f"{src}/model.safetensors")
    names = sorted(k for k in header if k != "__metadata__")
    assert all(header[k]["dtype"] == "F32" for k in names)
    half = sum(header[k]["data_offsets"][1] - header[k]["data_offsets"][0] for k in names) // 2
    parts, at = ([], []), 0
    for k in names:
        lo, hi = header[k]["data_offsets"]
        parts[at >= half].append((k, header[k]["shape"], data[lo:hi]))
        at += hi - lo
    files = [f"model-0000{i + 1}-of-00002.safetensors" for i in range(2)]
    total = write_file(f"{out}/{files[0]}", [(k, "F32", s, d) for k, s, d in parts[0]])
    second = [(k, dtype, s, to_bf16(d) if dtype == "BF16" else d) for k, s, d in parts[1]]
    total += write_file(f"{out}/{files[1]}", second)
    index = {
        "metadata": {"total_size": total},
        "weight_map": {k: files[i] for i in range(2) for k, _, _ in parts[i]},
    }
    with open(f"{out}/model.safetensors.index.json", "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
        f.write("\n")
    shutil.copy(f"{src}/config.json", f"{out}/config.json")


if __name__ == "__main__":
    {"write": write, "read": read, "shard": shard}[sys.argv[1]](*sys.argv[2:])
