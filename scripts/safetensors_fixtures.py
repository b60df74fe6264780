#!/usr/bin/env python3
"""Safetensors files written and read by Python's `safetensors` package, for
the interoperability tests of src/safetensors_io.rs (tests/safetensors_interop.rs).

  safetensors_fixtures.py write DIR   writes DIR/numpy_written.safetensors
                                      (float32) and DIR/numpy_f16.safetensors
  safetensors_fixtures.py read FILE   prints one line per tensor:
                                      name<TAB>shape,comma,separated<TAB>hex of
                                      the little-endian float32 bytes

Needs `pip install safetensors numpy`. The committed files in tests/data/
were made with `write tests/data` (safetensors 0.8.0, numpy 2.4).
"""
import sys

import numpy as np
from safetensors.numpy import load_file, save_file


def write(folder):
    tensors = {
        "wte": (np.arange(12, dtype=np.float32).reshape(3, 4) * 0.25 - 1.0),
        "h.0.ln_1.bias": np.array([-0.0, 1e-40, 3.4e38, 1.5], dtype=np.float32),
        "scalar": np.array(2.5, dtype=np.float32),
    }
    save_file(tensors, f"{folder}/numpy_written.safetensors", metadata={"format": "np"})
    save_file({"half": np.ones((2, 2), dtype=np.float16)}, f"{folder}/numpy_f16.safetensors")


def read(path):
    for name, arr in sorted(load_file(path).items()):
        shape = ",".join(str(d) for d in arr.shape)
        print(f"{name}\t{shape}\t{arr.astype('<f4').tobytes().hex()}")


if __name__ == "__main__":
    {"write": write, "read": read}[sys.argv[1]](sys.argv[2])
