#!/usr/bin/env python3
"""Rank-normalised bulk ESS (Vehtari, Gelman, Simpson, Carpenter, Buerkner
2021), the one estimator scripts/bench_nuts.sh applies to both samplers'
draws, computed as the library's summary computes it (src/infer/diagnostics.rs):

  each chain is split in halves (the middle draw of an odd chain dropped);
  the pooled draws are replaced by the normal scores of their ranks,
  Phi^-1((r - 3/8) / (S + 1/4)) with average ranks for ties; the ESS of
  those scores uses the biased (/ n) autocovariances averaged over chains,
  Geyer's initial positive sequence made monotone, and tau at least
  1 / log10(S).

As a library: bulk_ess(x) with x an array [chains, draws]; read_draws(path)
reads a CSV with a header row and a `chain` column (columns are found by
name; extra columns are fine). As a program:

  ess.py DRAWS.csv [NAME ...]   prints `quantity ess_bulk` for the named
                                columns (default: every column that is not
                                a sampler column: chain, draw, *__)
"""
import csv
import statistics
import sys

import numpy as np

SAMPLER_COLUMNS = {"chain", "draw", "iteration"}


def _normal_scores(x):
    """Phi^-1 of the pooled average ranks of x (any shape), same shape."""
    flat = x.ravel()
    order = np.argsort(flat, kind="mergesort")
    sorted_vals = flat[order]
    S = flat.size
    ranks = np.empty(S)
    i = 0
    while i < S:  # average 1-based rank over each run of ties
        j = i
        while j + 1 < S and sorted_vals[j + 1] == sorted_vals[i]:
            j += 1
        ranks[order[i : j + 1]] = 0.5 * (i + j) + 1
        i = j + 1
    inv_cdf = statistics.NormalDist().inv_cdf
    p = (ranks - 0.375) / (S + 0.25)
    return np.array([inv_cdf(v) for v in p]).reshape(x.shape)


def _split(x):
    m, n = x.shape
    h = n // 2
    return np.concatenate([x[:, :h], x[:, n - h :]], axis=0)


def plain_ess(x):
    """ESS of x [chains, draws] (no splitting, no ranks)."""
    x = np.asarray(x, dtype=np.float64)
    m, n = x.shape
    means = x.mean(axis=1)
    d = x - means[:, None]
    # biased autocovariance of every lag, per chain, through a zero-padded FFT
    size = 1 << (2 * n - 1).bit_length()
    f = np.fft.rfft(d, size, axis=1)
    acov = np.fft.irfft(f * np.conj(f), size, axis=1)[:, :n] / n
    acov_mean = acov.mean(axis=0)
    mean_var = acov_mean[0] * n / (n - 1)
    between = means.var(ddof=1) if m > 1 else 0.0
    var_plus = mean_var * (n - 1) / n + between
    if not var_plus > 0:  # constant draws
        return float("nan")
    rho = 1 - (mean_var - acov_mean) / var_plus
    r = [1.0, rho[1]]
    t = 0
    even, odd = r[0], r[1]
    while t < n - 5 and even + odd > 0:
        t += 2
        even, odd = rho[t], rho[t + 1]
        if even + odd >= 0:
            r += [even, odd]
    max_t = len(r) - 2
    for k in range(2, max_t + 1, 2):  # initial monotone sequence
        if r[k] + r[k + 1] > r[k - 2] + r[k - 1]:
            r[k] = r[k + 1] = 0.5 * (r[k - 2] + r[k - 1])
    tau = -1 + 2 * sum(r)
    S = m * n
    tau = max(tau, 1 / np.log10(S))
    return S / tau


def bulk_ess(x):
    """Rank-normalised split bulk ESS of x [chains, draws]."""
    x = np.asarray(x, dtype=np.float64)
    if x.shape[1] < 4:
        return float("nan")
    s = _split(x)
    return plain_ess(_normal_scores(s))


def read_draws(path):
    """{column: array [chains, draws]} from a per-draw CSV with a chain column."""
    with open(path, newline="") as f:
        rows = csv.reader(f)
        header = next(rows)
        data = np.array([[float(v) for v in row] for row in rows if row])
    if "chain" not in header:
        raise ValueError(f"{path}: no chain column")
    chain = data[:, header.index("chain")]
    ids = sorted(set(chain.tolist()))
    counts = {c: int((chain == c).sum()) for c in ids}
    if len(set(counts.values())) != 1:
        raise ValueError(f"{path}: chains of different lengths {counts}")
    out = {}
    for k, name in enumerate(header):
        out[name] = np.stack([data[chain == c, k] for c in ids])
    return out


def quantity_columns(draws):
    return [k for k in draws if k not in SAMPLER_COLUMNS and not k.endswith("__")]


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    draws = read_draws(argv[0])
    names = argv[1:] or quantity_columns(draws)
    for name in names:
        print(f"{name} {bulk_ess(draws[name]):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
