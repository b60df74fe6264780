#!/usr/bin/env python3
"""Writes the float64 reference values of the two-argument special functions
(lbeta, log_diff_exp, gamma_p, gamma_q), of the three-argument beta_inc, and
their partial derivatives on a fixed grid, computed
with mpmath at 120 digits and rounded once to float64, to
tests/data/special/<name>.csv.

Every argument is a float32 (printed as the float64 of the same value), so
the kernels are tested on exactly these inputs. Each line is
`a,b,value,d/da,d/db` (`inf`, `-inf` or `nan` where a number is not finite),
beta_inc's `a,b,x,value,d/da,d/db,d/dx`. The grid is fixed (a seeded
generator), so rerunning the script rewrites identical files.

Usage: python3 scripts/special_reference.py [name ...]   (needs mpmath; the
names, e.g. beta_inc, limit it to those files)
"""

import os
import random
import struct
import sys

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


def gamma_pq_all(a, x):
    """(P, dP/da, dP/dx) and (Q, dQ/da, dQ/dx). The tail on x's side of a
    (P for x < a: the smaller one, away from the median) is computed and
    differentiated in a directly, the other is 1 minus it: mpmath's
    series for the far tail does not converge for large a."""
    a, x = mp.mpf(a), mp.mpf(x)
    if x == 0:
        dx = mp.inf if a < 1 else (1 if a == 1 else 0)
        return (0, 0, dx), (1, 0, -dx)
    if x < a:
        p = mp.gammainc(a, 0, x, regularized=True)
        q = 1 - p
        dp_da = mp.diff(lambda s: mp.gammainc(s, 0, x, regularized=True), a)
    else:
        q = mp.gammainc(a, x, mp.inf, regularized=True)
        p = 1 - q
        dp_da = -mp.diff(lambda s: mp.gammainc(s, x, mp.inf, regularized=True), a)
    dx = mp.exp((a - 1) * mp.log(x) - x - mp.loggamma(a))
    return (p, dp_da, dx), (q, -dp_da, -dx)


def gamma_pq_grid(rng):
    # Tails (x << a, x >> a), a near 0, a up to 1e6, x = 0, around x = a
    # (the median) and both sides of the switches at x = a + 1, a = 1,
    # x = 2 and a = 10.
    avals = [1e-30, 1e-10, 1e-5, 1e-3, 0.1, 0.5, 0.9, 0.999, 1.0, 1.001, 1.5, 2.0, 3.0, 5.0,
             9.5, 10.0, 10.5, 20.0, 50.0, 100.0, 300.0, 1e3, 1e4, 1e5, 1e6]
    xvals = [0.0, 1e-30, 1e-10, 1e-5, 1e-3, 0.1, 0.5, 0.9, 1.0, 1.5, 1.999, 2.0, 2.001, 3.0,
             5.0, 10.0, 20.0, 50.0, 100.0, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8]
    pts = [(f32(a), f32(x)) for a in avals for x in xvals]
    for a in avals:
        for r in (0.5, 0.9, 0.99, 0.999, 1.0, 1.001, 1.01, 1.1, 1.5, 2.0):
            pts.append((f32(a), f32(a * r)))
        for d in (-1.0, -0.5, 0.999, 1.0, 1.001, 3.0):
            if a + d >= 0:
                pts.append((f32(a), f32(a + d)))
        # Around the median, within a few standard deviations sqrt(a).
        for z in (-5.0, -2.0, -1.0, -0.3, 0.3, 1.0, 2.0, 5.0):
            x = a + z * mp.sqrt(a)
            if x > 0:
                pts.append((f32(a), f32(x)))
    # Random: a log-uniform over [1e-6, 1e6], x = a times a log-uniform
    # factor in [1e-3, 1e3].
    for _ in range(1500):
        a = 10 ** rng.uniform(-6, 6)
        x = a * 10 ** rng.uniform(-3, 3)
        pts.append((f32(a), f32(x)))
    return pts


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


def write_gamma_pq(pts):
    os.makedirs(OUT, exist_ok=True)
    files = [open(os.path.join(OUT, name + ".csv"), "w") for name in ("gamma_p", "gamma_q")]
    for name, out in zip(("gamma_p", "gamma_q"), files):
        out.write("# a,x,%s(a, x),d/da,d/dx: mpmath at %d digits, rounded to float64 "
                  "(scripts/special_reference.py)\n" % (name, mp.dps))
    kept, skipped = 0, []
    for a, x in pts:
        try:
            both = gamma_pq_all(a, x)
        except (mpmath.libmp.NoConvergence, ValueError):
            # mpmath gives up on some far tails of large a.
            skipped.append((a, x))
            continue
        kept += 1
        for out, vals in zip(files, both):
            out.write("%r,%r,%s\n" % (a, x, ",".join(fmt(mp.mpf(v)) for v in vals)))
    for out in files:
        print(out.name, kept, "points")
        out.close()
    if skipped:
        print(len(skipped), "points left out (mpmath did not converge), a from",
              min(a for a, _ in skipped), "x / a from", min(x / a for a, x in skipped))
        out.close()


def beta_lower_tail(a, b, x):
    """I_x(a, b) for x on the lower side of the mean a / (a + b). Up to x =
    0.9 as x^a (1 - x)^b / (a B(a, b)) 2F1(a + b, 1; a + 1; x), a series of
    positive terms (no cancellation for large b, unlike the textbook
    2F1(a, 1 - b; a + 1; x)) whose terms fall at least as fast as 0.9^n.
    Above, where that series would need up to a million terms: below
    (a + 1) / (a + b + 2) the continued fraction of I_x(a, b), summed
    backwards from a depth doubled until two results agree; past that
    point (then x is within 1 / (a + b) of the mean, and I is not small)
    1 minus the other tail, 30 digits beyond the working precision."""
    if x > 0.9 and x * (a + b + 2) >= a + 1:
        with mp.workdps(mp.dps + 30):
            v = 1 - beta_lower_tail(b, a, 1 - x)
        return +v
    ln_pre = (a * mp.log(x) + b * mp.log1p(-x)
              - (mp.loggamma(a) + mp.loggamma(b) - mp.loggamma(a + b)))
    if x <= 0.9:
        t, s, n = mp.mpf(1), mp.mpf(1), 0
        while t > s * mp.eps:
            t *= (a + b + n) * x / (a + 1 + n)
            s += t
            n += 1
        return mp.exp(ln_pre) / a * s
    depth, prev = 64, None
    while True:
        f = beta_cf(a, b, x, depth)
        if prev is not None and abs(f - prev) <= abs(f) * mp.eps:
            return mp.exp(ln_pre) / a * f
        if depth > 10**6:
            raise mpmath.libmp.NoConvergence("beta continued fraction")
        prev, depth = f, 2 * depth


def beta_cf(a, b, x, depth):
    """1 / (1 + d1 / (1 + d2 / (1 + ...))) cut at d_depth, d_{2m} = m (b -
    m) x / ((a + 2m - 1)(a + 2m)), d_{2m+1} = -(a + m)(a + b + m) x / ((a +
    2m)(a + 2m + 1))."""
    v = mp.mpf(1)
    for k in range(depth, 0, -1):
        m = k // 2
        if k % 2 == 0:
            d = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        else:
            d = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        v = 1 + d / v
    return 1 / v


def beta_inc_all(a, b, x):
    """(I, dI/da, dI/db, dI/dx) for I = I_x(a, b), the regularised
    incomplete beta function. The tail on x's side of the mean a / (a + b)
    (the smaller one) is computed and differentiated directly, the other
    is 1 minus it, so a tiny tail keeps its digits."""
    a, b, x = mp.mpf(a), mp.mpf(b), mp.mpf(x)
    if x == 0 or x == 1:
        i = 0 if x == 0 else 1
        # The density's limit at the end: x^(a - 1) near 0, (1 - x)^(b - 1) near 1.
        e = a if x == 0 else b
        dx = mp.inf if e < 1 else (1 / mp.beta(a, b) if e == 1 else 0)
        return i, 0, 0, dx
    if x * (a + b) <= a:
        def tail(s, t):
            return beta_lower_tail(s, t, x)
        sign, i0 = 1, 0
    else:
        def tail(s, t):
            return beta_lower_tail(t, s, 1 - x)
        sign, i0 = -1, 1
    f = tail(a, b)
    da = mp.diff(lambda s: tail(s, b), a)
    db = mp.diff(lambda t: tail(a, t), b)
    ln_dx = ((a - 1) * mp.log(x) + (b - 1) * mp.log1p(-x)
             - (mp.loggamma(a) + mp.loggamma(b) - mp.loggamma(a + b)))
    return i0 + sign * f, sign * da, sign * db, mp.exp(ln_dx)


def beta_inc_grid(rng):
    # a and b from 1e-3 to 1e5 (both sides of 1, a ~ b, a >> b, a << b);
    # x at and near 0 and 1, across (0, 1), at the mean a / (a + b) and a
    # few standard deviations either side of it (the tails' relative
    # accuracy, the switch between the two sides).
    vals = [1e-3, 0.05, 0.5, 1.0, 1.5, 3.0, 10.0, 40.0, 300.0, 5e3, 1e5]
    xs = [0.0, 1e-30, 1e-8, 1e-3, 0.05, 0.3, 0.5, 0.7, 0.95, 0.999, 1 - 1e-6, 1.0]
    pts = []
    for a in vals:
        for b in vals:
            for x in xs:
                pts.append((f32(a), f32(b), f32(x)))
            m = a / (a + b)
            sd = mp.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))
            for z in (-6.0, -2.0, -0.5, 0.0, 0.5, 2.0, 6.0):
                x = m + z * sd
                if 0 < x < 1:
                    pts.append((f32(a), f32(b), f32(x)))
    # Random: a and b log-uniform over [1e-3, 1e5], x uniform in (0, 1) or
    # within a log-uniform distance of 0 or 1.
    for _ in range(600):
        a = 10 ** rng.uniform(-3, 5)
        b = 10 ** rng.uniform(-3, 5)
        u = rng.random()
        d = 10 ** rng.uniform(-7, 0)
        x = rng.random() if u < 0.4 else (d if u < 0.7 else 1 - d)
        pts.append((f32(a), f32(b), f32(x)))
    return sorted(set(p for p in pts if 0 <= p[2] <= 1))


def write_beta_inc(pts, suffix=""):
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "beta_inc.csv" + suffix)
    with open(path + ".part", "w") as out:
        out.write("# a,b,x,beta_inc(a, b, x),d/da,d/db,d/dx: mpmath at %d digits, rounded "
                  "to float64 (scripts/special_reference.py)\n" % mp.dps)
        kept, skipped = 0, []
        for a, b, x in pts:
            try:
                vals = beta_inc_all(a, b, x)
            except (mpmath.libmp.NoConvergence, ValueError):
                # The fraction not settled within a million steps.
                skipped.append((a, b, x))
                continue
            kept += 1
            out.write("%r,%r,%r,%s\n" % (a, b, x, ",".join(fmt(mp.mpf(v)) for v in vals)))
    os.replace(path + ".part", path)
    print(path, kept, "points")
    for p in skipped:
        print("left out (mpmath did not converge):", p)


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
    args = sys.argv[1:]
    # --part K/N: every Nth point of beta_inc's grid from the Kth, to
    # <name>.csv.K (for running in parallel; merge the sorted lines).
    part = None
    if len(args) >= 2 and args[0] == "--part":
        part = tuple(int(v) for v in args[1].split("/"))
        args = args[2:]
    only = set(args)
    rng = random.Random(20261126)
    if not only or "lbeta" in only or "log_diff_exp" in only or "gamma_p" in only:
        write("lbeta", lbeta_all, lbeta_grid(rng))
        write("log_diff_exp", log_diff_exp_all, log_diff_exp_grid(rng))
        write_gamma_pq(gamma_pq_grid(rng))
    if not only or "beta_inc" in only:
        pts = beta_inc_grid(random.Random(20261127))
        if part:
            pts = pts[part[0]::part[1]]
        write_beta_inc(pts, ".%d" % part[0] if part else "")


if __name__ == "__main__":
    main()
