#!/usr/bin/env python3
"""Writes the float64 reference values of the two-argument special functions
(lbeta, log_diff_exp) and their partial derivatives on a fixed grid, computed
with mpmath at 120 digits and rounded once to float64, to
tests/data/special/<name>.csv.

Every argument is a float32 (printed as the float64 of the same value), so
the kernels are tested on exactly these inputs. Each line is
`a,b,value,d/da,d/db` (`inf`, `-inf` or `nan` where a number is not finite). The grid is fixed
(a seeded generator), so rerunning the script rewrites identical files.

Usage: python3 scripts/special_reference.py   (needs mpmath)
"""

import os
import random
import struct

import mpmath
from mpmath import mp

mp.dps = 120

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "special")


def f32(x):
    """x rounded to the nearest float32, as a Python float."""
    return struct.unpack("<f", struct.pack("<f", float(x)))[0]


def next_down(x, k):
    """The float32 k steps below the positive float32 x (k < its bits)."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    return struct.unpack("<f", struct.pack("<I", bits - k if x > 0 else bits + k))[0]


def fmt(v):
    if mpmath.isnan(v):
        return "nan"
    if mpmath.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(float(v))


def lbeta(a, b):
    a, b = mp.mpf(a), mp.mpf(b)
    return mp.loggamma(a) + mp.loggamma(b) - mp.loggamma(a + b)


def lbeta_all(a, b):
    a, b = mp.mpf(a), mp.mpf(b)
    psi_s = mp.digamma(a + b)
    return lbeta(a, b), mp.digamma(a) - psi_s, mp.digamma(b) - psi_s


def log_diff_exp_all(a, b):
    a, b = mp.mpf(a), mp.mpf(b)
    return a + mp.log(-mp.expm1(b - a)), -1 / mp.expm1(b - a), -1 / mp.expm1(a - b)


def lbeta_grid(rng):
    # Tails (tiny and huge), around the zero curve through (1, 1) and (2, 1/2),
    # and both sides of the switch to the Stirling forms at 10.
    values = [1e-30, 1e-10, 1e-5, 1e-3, 0.1, 0.5, 0.9, 1.0, 1.1, 1.5, 2.0, 2.5, 3.0, 5.0,
              9.5, 9.999, 10.0, 10.5, 20.0, 50.0, 100.0, 1e3, 1e4, 1e5, 1e7, 1e10, 1e15,
              1e20, 1e30, 1e38]
    pts = [(f32(a), f32(b)) for a in values for b in values]
    # Random pairs, log-uniform over [1e-6, 1e9] each, and a near b.
    for _ in range(2000):
        a = 10 ** rng.uniform(-6, 9)
        b = 10 ** rng.uniform(-6, 9)
        pts.append((f32(a), f32(b)))
    for _ in range(500):
        a = 10 ** rng.uniform(-2, 8)
        pts.append((f32(a), f32(a * (1 + rng.uniform(-1e-3, 1e-3)))))
    # Near lbeta = 0: B(a, b) = 1 on a curve through (1, 1); walk b across it.
    for _ in range(500):
        a = rng.uniform(0.2, 1.0)
        # B(a, b) = 1 has a root b in (a, 1/a] region's neighbourhood: sample
        # b close to the root found by mpmath.
        root = mp.findroot(lambda t: lbeta(a, t), 1.0 / a if a < 0.9 else 1.0)
        b = float(root) * (1 + rng.uniform(-1e-4, 1e-4))
        pts.append((f32(a), f32(b)))
    return pts


def log_diff_exp_grid(rng):
    pts = []
    xs = [-1e30, -1e4, -100.0, -30.0, -1.0, -1e-5, 0.0, 1e-5, 0.5, 1.0, 30.0, 88.0, 100.0,
          1e4, 1e30]
    # a ~ b: b one to 64 float32 steps below a.
    for x in xs:
        if x == 0.0:
            continue
        for k in (1, 2, 3, 8, 64, 1000):
            pts.append((f32(x), next_down(f32(x), k)))
    # a >> b, and b far below a.
    for x in xs:
        for d in (1e-6, 1e-3, 0.1, 0.6931, 0.6932, 1.0, 10.0, 30.0, 100.0, 1e4, 1e30):
            pts.append((f32(x), f32(f32(x) - d)))
    # Near a zero result: e^a - e^b = 1, a = ln(1 + e^b).
    for _ in range(500):
        b = rng.uniform(-20.0, 5.0)
        a = f32(float(mp.log1p(mp.exp(f32(b)))))
        pts.append((a, f32(b)))
    # Random: a over [-100, 100], b below it by a log-uniform gap.
    for _ in range(2000):
        a = rng.uniform(-100.0, 100.0)
        b = a - 10 ** rng.uniform(-6, 3)
        pts.append((f32(a), f32(b)))
    return [(a, b) for a, b in pts if a > b]


def write(name, f, pts):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, name + ".csv")
    with open(path, "w") as out:
        out.write("# a,b,%s(a, b),d/da,d/db: mpmath at %d digits, rounded to float64 "
                  "(scripts/special_reference.py)\n" % (name, mp.dps))
        for a, b in pts:
            out.write("%r,%r,%s\n" % (a, b, ",".join(fmt(v) for v in f(a, b))))
    print(path, len(pts), "points")


def main():
    rng = random.Random(20261126)
    write("lbeta", lbeta_all, lbeta_grid(rng))
    write("log_diff_exp", log_diff_exp_all, log_diff_exp_grid(rng))


if __name__ == "__main__":
    main()
