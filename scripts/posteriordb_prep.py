#!/usr/bin/env python3
"""Writes the data and reference summaries of the NUTS checks (run once).

Reads the posteriordb repository (a git directory, default the mirror under
/work/.mirror; any clone works with --repo) and writes, for each posterior:

  tests/data/posteriordb/<posterior>.data  the model kind, priors, quantity
                                           names and the data rows (text)
  tests/data/posteriordb/<posterior>.ref   quantity,mean,sd,mcse_mean from
                                           posteriordb's 10,000 reference draws

and the synthetic-* models posteriordb lacks, whose .ref is their exact
posterior (by quadrature, or the LKJ prior's known marginals).

mcse_mean is sd / sqrt(ESS) with ESS from split chains, Geyer's initial
monotone sequence (Vehtari et al. 2021), as posteriordb's summaries. The big
draw files are read from git and never written. Standard library only.
"""
import argparse, io, itertools, json, math, os, random, struct, subprocess, zipfile

OUT = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "posteriordb")


def git_json_zip(repo, path):
    blob = subprocess.run(["git", "-C", repo, "show", "HEAD:" + path], check=True, capture_output=True).stdout
    z = zipfile.ZipFile(io.BytesIO(blob))
    return json.loads(z.read(z.namelist()[0]))


def autocov(x):
    n = len(x)
    m = sum(x) / n
    d = [v - m for v in x]
    return lambda t: sum(d[i] * d[i + t] for i in range(n - t)) / n


def ess(chains):
    """ESS of a list of equally long chains (already split)."""
    m, n = len(chains), len(chains[0])
    acovs = [autocov(c) for c in chains]
    means = [sum(c) / n for c in chains]
    a0 = [a(0) for a in acovs]
    mean_var = sum(v * n / (n - 1) for v in a0) / m
    gm = sum(means) / m
    var_plus = mean_var * (n - 1) / n + (sum((u - gm) ** 2 for u in means) / (m - 1) if m > 1 else 0)
    rho = lambda t: 1 - (mean_var - sum(a(t) for a in acovs) / m) / var_plus
    r = [1.0, rho(1)]
    t = 0
    even, odd = r[0], r[1]
    while t < n - 5 and even + odd > 0:
        t += 2
        even, odd = rho(t), rho(t + 1)
        if even + odd >= 0:
            r += [even, odd]
    max_t = len(r) - 2
    for t in range(2, max_t + 1, 2):  # initial monotone sequence
        if r[t] + r[t + 1] > r[t - 2] + r[t - 1]:
            r[t] = r[t + 1] = (r[t - 2] + r[t - 1]) / 2
    tau = -1 + 2 * sum(r[: max_t + 2])
    tau = max(tau, 1 / math.log10(m * n))
    return m * n / tau


def summaries(draws, names):
    rows = []
    for q in names:
        chains = [c[q] for c in draws]
        half = len(chains[0]) // 2
        split = [c[:half] for c in chains] + [c[half : 2 * half] for c in chains]
        allv = [v for c in chains for v in c]
        mean = sum(allv) / len(allv)
        sd = math.sqrt(sum((v - mean) ** 2 for v in allv) / (len(allv) - 1))
        rows.append((q, mean, sd, sd / math.sqrt(ess(split))))
    return rows


def write_rows(name, kind, header, names, rows, cols=None):
    """the .data file; cols where there are no rows"""
    with open(os.path.join(OUT, name + ".data"), "w") as f:
        f.write(f"model {kind}\n")
        for k, v in header.items():
            f.write(f"{k} {v}\n")
        f.write("names " + " ".join(names) + "\n")
        f.write(f"rows {len(rows)} {len(rows[0]) if rows else cols}\n")
        for r in rows:
            f.write(" ".join(repr(float(v)) for v in r) + "\n")


def write(name, kind, header, names, rows, repo, ref=True):
    write_rows(name, kind, header, names, rows)
    if ref:
        draws = git_json_zip(repo, f"posterior_database/reference_posteriors/draws/draws/{name}.json.zip")
        with open(os.path.join(OUT, name + ".ref"), "w") as f:
            f.write("quantity,mean,sd,mcse_mean\n")
            for q, mean, sd, mcse in summaries(draws, names):
                f.write(f"{q},{mean!r},{sd!r},{mcse!r}\n")
    print("wrote", name)


def f32(v):
    """v rounded to float32, as build/nuts reads the data"""
    return struct.unpack("f", struct.pack("f", v))[0]


def narrowed_grid(log_post, lo, hi, points):
    """The midpoint grid with `points` per axis over the box lo..hi, the box
    narrowed (twice) to where log_post is within 40 of its peak, and the
    weights exp(log_post - peak) at the grid's points."""
    dims = len(lo)
    for _ in range(2):
        step = [(hi[k] - lo[k]) / points for k in range(dims)]
        axes = [[lo[k] + (i + 0.5) * step[k] for i in range(points)] for k in range(dims)]
        grid = list(itertools.product(*axes))
        lps = [log_post(*g) for g in grid]
        top = max(lps)
        keep = [g for g, l in zip(grid, lps) if l > top - 40]
        lo = [min(g[k] for g in keep) - step[k] for k in range(dims)]
        hi = [max(g[k] for g in keep) + step[k] for k in range(dims)]
    return grid, [math.exp(l - top) for l in lps]


def grid_summary(log_post, lo, hi, transforms, names, points):
    """quantity,mean,sd,0 of a posterior of 2 or 3 parameters by
    quadrature: log_post on the unconstrained space over narrowed_grid's
    box, a midpoint rule with `points` per axis; transforms map a point to
    each reported quantity. mcse 0: exact to the grid's error (far below a
    sampler's)."""
    grid, w = narrowed_grid(log_post, lo, hi, points)
    total = sum(w)
    rows = []
    for name, t in zip(names, transforms):
        vals = [t(*g) for g in grid]
        mean = sum(wi * x for wi, x in zip(w, vals)) / total
        sd = math.sqrt(sum(wi * (x - mean) ** 2 for wi, x in zip(w, vals)) / total)
        rows.append((name, mean, sd, 0.0))
    return rows


def write_ref(name, rows):
    with open(os.path.join(OUT, name + ".ref"), "w") as f:
        f.write("quantity,mean,sd,mcse_mean\n")
        for q, mean, sd, mcse in rows:
            f.write(f"{q},{mean!r},{sd!r},{mcse!r}\n")
    print("wrote", name)


def log_sigmoid(u):
    return -math.log1p(math.exp(-u)) if u > 0 else u - math.log1p(math.exp(u))


def write_beta_iid():
    """150 draws of beta(2, 5) (a fixed seed); a, b ~ half-normal(0, 10);
    the exact posterior by quadrature, as write_gamma_iid."""
    rng = random.Random(20260104)
    y = [f32(rng.betavariate(2, 5)) for _ in range(150)]
    n, s1, s2 = len(y), sum(math.log(v) for v in y), sum(math.log1p(-v) for v in y)

    def log_post(u, v):  # u = log a, v = log b, Jacobian u + v
        a, b = math.exp(u), math.exp(v)
        lbeta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
        return (a - 1) * s1 + (b - 1) * s2 - n * lbeta - (a * a + b * b) / 200 + u + v

    name = "synthetic-beta_iid"
    write_rows(name, "beta_iid", {}, ["a", "b"], [(v,) for v in y])
    write_ref(name, grid_summary(log_post, (-3, -3), (4, 4), [lambda u, v: math.exp(u), lambda u, v: math.exp(v)],
                                 ["a", "b"], 400))


def write_mvn_lkj():
    """Two checks of the LKJ model's Cholesky factor, neither in posteriordb.
    The prior alone, K = 3, eta = 2, tau ~ half-normal(0, 1): each
    correlation is 2 Beta(b, b) - 1 with b = eta - 1 + K / 2 (mean 0, sd
    1 / sqrt(2 b + 1)), each tau half-normal (mean sqrt(2 / pi), sd
    sqrt(1 - 2 / pi)). And K = 2 with 100 seeded draws of a correlated
    normal (tau (1, 2), correlation 0.6), eta = 2, tau ~ half-normal(0, 5):
    the exact posterior by quadrature over (log tau1, log tau2, u)."""
    names = ["tau[1]", "tau[2]", "tau[3]", "Omega.2.1", "Omega.3.1", "Omega.3.2"]
    write_rows("synthetic-lkj_prior", "mvn_lkj", {"lkj_eta": 2, "sigma_prior": "normal 1"}, names, [], cols=3)
    b = 2 - 1 + 3 / 2
    tau = (math.sqrt(2 / math.pi), math.sqrt(1 - 2 / math.pi))
    write_ref("synthetic-lkj_prior", [(n, *tau, 0.0) for n in names[:3]] +
              [(n, 0.0, 1 / math.sqrt(2 * b + 1), 0.0) for n in names[3:]])

    rng = random.Random(20260102)
    rho, t1, t2 = 0.6, 1.0, 2.0
    y = []
    for _ in range(100):
        e1, e2 = rng.gauss(0, 1), rng.gauss(0, 1)
        y.append((f32(t1 * e1), f32(t2 * (rho * e1 + math.sqrt(1 - rho * rho) * e2))))
    n = len(y)
    s11, s12, s22 = (sum(a * a for a, _ in y), sum(a * c for a, c in y), sum(c * c for _, c in y))
    eta, scale = 2.0, 5.0

    def log_post(a1, a2, u):  # tau = e^a, correlation z = 2 sigmoid(u) - 1
        x1, x2 = math.exp(a1), math.exp(a2)
        z = 2 / (1 + math.exp(-u)) - 1
        one_m = 1 - z * z
        if one_m <= 0:
            return -math.inf
        quad = (s11 / (x1 * x1) - 2 * z * s12 / (x1 * x2) + s22 / (x2 * x2)) / one_m
        log_det = 2 * a1 + 2 * a2 + math.log(one_m)
        return (-0.5 * quad - 0.5 * n * log_det + (eta - 1) * math.log(one_m) - (x1 * x1 + x2 * x2) / (2 * scale**2)
                + a1 + a2 + log_sigmoid(u) + log_sigmoid(-u))

    name = "synthetic-mvn_lkj"
    names = ["tau[1]", "tau[2]", "Omega.2.1"]
    write_rows(name, "mvn_lkj", {"lkj_eta": 2, "sigma_prior": "normal 5"}, names, y)
    write_ref(name, grid_summary(log_post, (-3, -3, -6), (3, 3, 6),
                                 [lambda a1, a2, u: math.exp(a1), lambda a1, a2, u: math.exp(a2),
                                  lambda a1, a2, u: 2 / (1 + math.exp(-u)) - 1], names, 64))


def write_gamma_iid():
    """200 draws of gamma(shape 2.5, rate 1.5) (a fixed seed); alpha, beta
    ~ half-normal(0, 10). Not in posteriordb: the reference is the exact
    posterior by quadrature."""
    rng = random.Random(20260101)
    y = [f32(rng.gammavariate(2.5, 1 / 1.5)) for _ in range(200)]
    n, s1, s2 = len(y), sum(math.log(v) for v in y), sum(y)

    def log_post(u, v):  # u = log alpha, v = log beta, Jacobian u + v
        a, b = math.exp(u), math.exp(v)
        return n * a * v - n * math.lgamma(a) + (a - 1) * s1 - b * s2 - (a * a + b * b) / 200 + u + v

    name = "synthetic-gamma_iid"
    write_rows(name, "gamma_iid", {}, ["alpha", "beta"], [(v,) for v in y])
    write_ref(name, grid_summary(log_post, (-3, -3), (4, 4), [lambda u, v: math.exp(u), lambda u, v: math.exp(v)],
                                 ["alpha", "beta"], 400))


def write_hier_lkj():
    """A hierarchical model with a covariance: G = 12 groups' 2-vectors
    theta_g ~ multi_normal(0, diag(tau) Omega diag(tau)), observed as y_g ~
    normal(theta_g, s_g I) (seeded: tau (1, 0.5), correlation -0.5, s_g in
    0.2..0.6); Omega's Cholesky factor ~ LKJ(2), tau ~ half-normal(0, 2).
    Integrating theta out, y_g ~ multi_normal(0, Sigma + s_g^2 I): the
    exact posterior of (tau, Omega) by quadrature on its 3 coordinates, and
    theta's posterior means and sds from its normal conditional given them,
    E[theta_g] = Sigma V_g^-1 y_g, Cov = Sigma - Sigma V_g^-1 Sigma with V_g =
    Sigma + s_g^2 I, averaged over that grid."""
    rng = random.Random(20260103)
    rho, t1, t2, G = -0.5, 1.0, 0.5, 12
    rows = []
    for _ in range(G):
        e1, e2 = rng.gauss(0, 1), rng.gauss(0, 1)
        th = (t1 * e1, t2 * (rho * e1 + math.sqrt(1 - rho * rho) * e2))
        s = 0.2 + 0.4 * rng.random()
        rows.append((f32(th[0] + s * rng.gauss(0, 1)), f32(th[1] + s * rng.gauss(0, 1)), f32(s)))
    eta, scale = 2.0, 2.0

    def sigma(a1, a2, u):
        x1, x2, z = math.exp(a1), math.exp(a2), 2 / (1 + math.exp(-u)) - 1
        return x1 * x1, z * x1 * x2, x2 * x2, z

    def log_post(a1, a2, u):
        s11, s12, s22, z = sigma(a1, a2, u)
        lp = 0.0
        for y1, y2, s in rows:
            v11, v22 = s11 + s * s, s22 + s * s
            det = v11 * v22 - s12 * s12
            lp -= 0.5 * (math.log(det) + (v22 * y1 * y1 - 2 * s12 * y1 * y2 + v11 * y2 * y2) / det)
        x1, x2 = math.exp(a1), math.exp(a2)
        return (lp + (eta - 1) * math.log(1 - z * z) - (x1 * x1 + x2 * x2) / (2 * scale**2) + a1 + a2
                + log_sigmoid(u) + log_sigmoid(-u))

    def theta_moments(a1, a2, u):
        """each theta_g's conditional means and second moments, flattened"""
        s11, s12, s22, _ = sigma(a1, a2, u)
        out = []
        for y1, y2, s in rows:
            v11, v22 = s11 + s * s, s22 + s * s
            det = v11 * v22 - s12 * s12
            w1, w2 = (v22 * y1 - s12 * y2) / det, (v11 * y2 - s12 * y1) / det  # V^-1 y
            m1, m2 = s11 * w1 + s12 * w2, s12 * w1 + s22 * w2
            # Sigma V^-1 Sigma's diagonal
            c11 = (s11 * (v22 * s11 - s12 * s12) + s12 * (v11 * s12 - s12 * s11)) / det
            c22 = (s12 * (v22 * s12 - s12 * s22) + s22 * (v11 * s22 - s12 * s12)) / det
            out += [(m1, m1 * m1 + s11 - c11), (m2, m2 * m2 + s22 - c22)]
        return out

    name = "synthetic-hier_lkj"
    names = ["tau[1]", "tau[2]", "Omega.2.1"] + [f"theta.{g}.{k}" for g in range(1, G + 1) for k in (1, 2)]
    write_rows(name, "hier_lkj", {"lkj_eta": 2, "sigma_prior": "normal 2"}, names, rows)
    grid, w = narrowed_grid(log_post, [-8, -8, -8], [3, 3, 8], 64)
    total = sum(w)
    hyper = [lambda a1, a2, u: math.exp(a1), lambda a1, a2, u: math.exp(a2),
             lambda a1, a2, u: 2 / (1 + math.exp(-u)) - 1]
    first = [0.0] * (3 + 2 * G)
    second = [0.0] * (3 + 2 * G)
    for wi, g in zip(w, grid):
        for k, t in enumerate(hyper):
            v = t(*g)
            first[k] += wi * v
            second[k] += wi * v * v
        for k, (m1, m2) in enumerate(theta_moments(*g)):
            first[3 + k] += wi * m1
            second[3 + k] += wi * m2
    ref = []
    for k, n in enumerate(names):
        mean = first[k] / total
        ref.append((n, mean, math.sqrt(second[k] / total - mean * mean), 0.0))
    write_ref(name, ref)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", default="/work/.mirror/stan-dev+posteriordb/repo")
    repo = ap.parse_args().repo
    data = lambda n: git_json_zip(repo, f"posterior_database/data/data/{n}.json.zip")
    os.makedirs(OUT, exist_ok=True)

    d = data("eight_schools")
    write("eight_schools-eight_schools_noncentered", "eight_schools", {},
          [f"theta[{j+1}]" for j in range(d["J"])] + ["mu", "tau"],
          list(zip(d["y"], d["sigma"])), repo)

    # Gaussian linear regressions: rows are y then the design matrix.
    d = data("kidiq")
    write("kidiq-kidscore_momiq", "linreg", {"beta_prior_sd": 0, "sigma_prior": "cauchy 2.5"},
          ["beta[1]", "beta[2]", "sigma"],
          [(y, 1, iq) for y, iq in zip(d["kid_score"], d["mom_iq"])], repo)
    write("kidiq-kidscore_momhsiq", "linreg", {"beta_prior_sd": 0, "sigma_prior": "cauchy 2.5"},
          ["beta[1]", "beta[2]", "beta[3]", "sigma"],
          [(y, 1, hs, iq) for y, hs, iq in zip(d["kid_score"], d["mom_hs"], d["mom_iq"])], repo)
    d = data("mesquite")
    L = math.log
    write("mesquite-logmesquite", "linreg", {"beta_prior_sd": 0, "sigma_prior": "flat 0"},
          [f"beta[{k}]" for k in range(1, 8)] + ["sigma"],
          [(L(w), 1, L(a), L(b), L(c), L(t), L(de), g) for w, a, b, c, t, de, g in
           zip(d["weight"], d["diam1"], d["diam2"], d["canopy_height"], d["total_height"], d["density"],
               d["group"])], repo)
    d = data("sblrc")
    write("sblrc-blr", "linreg", {"beta_prior_sd": 10, "sigma_prior": "normal 10"},
          [f"beta[{k+1}]" for k in range(d["D"])] + ["sigma"],
          [(y, *x) for y, x in zip(d["y"], d["X"])], repo)
    d = data("arK")
    K, y = d["K"], d["y"]
    write("arK-arK", "linreg", {"beta_prior_sd": 10, "sigma_prior": "cauchy 2.5"},
          ["alpha"] + [f"beta[{k}]" for k in range(1, K + 1)] + ["sigma"],
          [(y[t], 1, *[y[t - k] for k in range(1, K + 1)]) for t in range(K, d["T"])], repo)

    # More of the ARM book's regressions: flat priors on beta, sigma flat or
    # half-Cauchy(0, 2.5) as in each model's Stan code.
    d = data("kidiq")
    write("kidiq-kidscore_momhs", "linreg", {"beta_prior_sd": 0, "sigma_prior": "cauchy 2.5"},
          ["beta[1]", "beta[2]", "sigma"],
          [(y, 1, hs) for y, hs in zip(d["kid_score"], d["mom_hs"])], repo)
    write("kidiq-kidscore_interaction", "linreg", {"beta_prior_sd": 0, "sigma_prior": "cauchy 2.5"},
          [f"beta[{k}]" for k in range(1, 5)] + ["sigma"],
          [(y, 1, hs, iq, hs * iq) for y, hs, iq in zip(d["kid_score"], d["mom_hs"], d["mom_iq"])], repo)
    d = data("kidiq_with_mom_work")
    write("kidiq_with_mom_work-kidscore_mom_work", "linreg", {"beta_prior_sd": 0, "sigma_prior": "flat 0"},
          [f"beta[{k}]" for k in range(1, 5)] + ["sigma"],
          [(y, 1, w == 2, w == 3, w == 4) for y, w in zip(d["kid_score"], d["mom_work"])], repo)
    d = data("mesquite")
    write("mesquite-mesquite", "linreg", {"beta_prior_sd": 0, "sigma_prior": "flat 0"},
          [f"beta[{k}]" for k in range(1, 8)] + ["sigma"],
          [(w, 1, a, b, c, t, de, g) for w, a, b, c, t, de, g in
           zip(d["weight"], d["diam1"], d["diam2"], d["canopy_height"], d["total_height"], d["density"],
               d["group"])], repo)
    write("mesquite-logmesquite_logva", "linreg", {"beta_prior_sd": 0, "sigma_prior": "flat 0"},
          [f"beta[{k}]" for k in range(1, 5)] + ["sigma"],
          [(L(w), 1, L(a * b * c), L(a * b), g) for w, a, b, c, g in
           zip(d["weight"], d["diam1"], d["diam2"], d["canopy_height"], d["group"])], repo)
    d = data("earnings")
    write("earnings-logearn_height", "linreg", {"beta_prior_sd": 0, "sigma_prior": "flat 0"},
          ["beta[1]", "beta[2]", "sigma"],
          [(L(e), 1, h) for e, h in zip(d["earn"], d["height"])], repo)
    d = data("nes2000")
    write("nes2000-nes", "linreg", {"beta_prior_sd": 0, "sigma_prior": "flat 0"},
          [f"beta[{k}]" for k in range(1, 10)] + ["sigma"],
          [(p, 1, ideo, race, a == 2, a == 3, a == 4, ed, g, inc) for p, ideo, race, a, ed, g, inc in
           zip(d["partyid7"], d["real_ideo"], d["race_adj"], d["age_discrete"], d["educ1"], d["gender"],
               d["income"])], repo)

    # Time series whose recursions are linear: one triangular solve each.
    d = data("arma")
    write("arma-arma11", "arma11", {}, ["mu", "phi", "theta", "sigma"], [(y,) for y in d["y"]], repo)
    d = data("garch")
    write("garch-garch11", "garch11", {"sigma1": d["sigma1"]}, ["mu", "alpha0", "alpha1", "beta1"],
          [(y,) for y in d["y"]], repo)

    # Two-component normal mixture, ordered means (needs logsumexp).
    d = data("low_dim_gauss_mix")
    write("low_dim_gauss_mix-low_dim_gauss_mix", "mixture2", {},
          ["mu[1]", "mu[2]", "sigma[1]", "sigma[2]", "theta"], [(y,) for y in d["y"]], repo)

    # Logistic regression on the arsenic wells survey (no reference draws):
    # switched ~ bernoulli_logit(b1 + b2 dist / 100 + b3 arsenic), b ~ normal(0, 10).
    d = data("wells_data")
    write("wells-logistic", "logistic", {"beta_prior_sd": 10},
          ["beta[1]", "beta[2]", "beta[3]"],
          [(s, 1, di / 100, a) for s, di, a in zip(d["switched"], d["dist"], d["arsenic"])], repo, ref=False)

    # Gamma and beta likelihoods (ag_lgamma, ag_lbeta), checked against
    # their exact posteriors.
    write_gamma_iid()
    write_beta_iid()
    # The LKJ prior on a correlation's Cholesky factor (ag_solve_lower).
    write_mvn_lkj()
    write_hier_lkj()


if __name__ == "__main__":
    main()
