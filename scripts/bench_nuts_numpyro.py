#!/usr/bin/env python3
"""NumPyro's NUTS on the posteriors build/nuts samples, for scripts/bench_nuts.sh.

Reads a tests/data/posteriordb/NAME.data file (the format c_examples/nuts
reads) and samples THE SAME posterior as build/nuts: the same priors, the
same unconstrained parameterisation (log sigma, non-centred eight schools,
ordered mixture means), float32 as ours, NUTS with a diagonal metric,
target acceptance 0.8 and tree depth 10 (NumPyro's defaults, and ours).

  eight_schools  mu ~ normal(0, 5), tau ~ half-Cauchy(0, 5),
                 theta_trans ~ normal(0, 1), y ~ normal(mu + tau theta_trans, sigma_j)
  linreg         beta ~ normal(0, beta_prior_sd) (flat when 0), sigma ~
                 half-Cauchy / half-normal(0, scale) or flat on (0, inf),
                 y ~ normal(X beta, sigma)
  logistic       beta as linreg, y ~ bernoulli_logit(X beta)
  mixture2       mu ordered with normal(0, 2) each, sigma ~ half-normal(0, 2),
                 theta ~ beta(5, 5), y ~ theta normal(mu_1, sigma_1)
                 + (1 - theta) normal(mu_2, sigma_2)
  gamma_iid      alpha, beta ~ half-normal(0, 10), y ~ gamma(alpha, rate beta)
  beta_iid       a, b ~ half-normal(0, 10), y ~ beta(a, b)
  arma11         mu ~ normal(0, 10), phi, theta ~ normal(0, 2), sigma ~
                 half-Cauchy(0, 2.5), err_t = y_t - mu - phi y_{t-1} - theta
                 err_{t-1} (y_0 = mu, err_0 = 0) ~ normal(0, sigma)
  garch11        flat mu, alpha0 > 0, alpha1 in (0, 1), beta1 in (0, 1 - alpha1)
                 (as (1 - alpha1) w, w in (0, 1)), y_t ~ normal(mu, sigma_t),
                 sigma_t^2 = alpha0 + alpha1 (y_{t-1} - mu)^2 + beta1 sigma_{t-1}^2
  mvn_lkj        tau ~ half-normal(0, s), L ~ lkj_corr_cholesky(eta),
                 y_n ~ multi_normal(0, diag(tau) L L^T diag(tau))
  hier_lkj       tau and L as mvn_lkj, theta_g = diag(tau) L z_g, z_g ~
                 normal(0, I), y_g ~ normal(theta_g, s_g I)
                 (the partial correlations are tanh(u) here, tanh(u / 2) in
                 ours: a fixed scale per coordinate, which the adapted
                 diagonal metric absorbs)

The chains run in parallel: numpyro.set_host_device_count(CHAINS) before jax
is imported (its --xla_force_host_platform_device_count is the only XLA flag)
and jax.pmap over the chains, which is what chain_method="parallel" does, but
one pmap kept across the runs of one MCMC object: "parallel" wraps a fresh
function in pmap at every mcmc.run, so each run would trace and compile again
(about 13 s on eight schools, where sampling takes well under 1 s). A first
run of the same shapes compiles and is not timed. Each timed run is mcmc.run
plus get_samples, blocked until the samples are ready. Prints, per seed,

  numpyro_sampling_s SEED SECONDS

and writes OUT.SEED.csv (chain, draw, divergent__, then the .data file's
quantity names). Exit status 3 (and one line) for a model kind without a
NumPyro twin. --check REF compares the first seed's means and sds with a
posteriordb reference summary (loosely: mean within 4 sqrt(mcse^2 +
mcse_ref^2) + 0.1 sd_ref, sd within 15%) and exits 1 if any fails.
"""
import argparse
import os
import sys
import time

TWINS = ("eight_schools", "linreg", "logistic", "mixture2", "gamma_iid", "beta_iid", "arma11", "garch11", "mvn_lkj",
         "hier_lkj")


class PmapOnce:
    """chain_method for one MCMC object: pmap the per-chain function of the
    first run and reuse it. Every run of that object passes the same model
    arguments and fields; only the keys (mapped over) differ."""

    def __init__(self, pmap):
        self.pmap = pmap
        self.mapped = None

    def __call__(self, per_chain):
        if self.mapped is None:
            self.mapped = self.pmap(per_chain)
        return self.mapped


def read_data(path):
    """(kind, settings, names, rows, columns) of a .data file."""
    settings = {}
    with open(path) as f:
        tokens = f.read().split("\n")
    kind, names, rows, c, i = None, [], None, 0, 0
    while i < len(tokens):
        line = tokens[i].split()
        i += 1
        if not line:
            continue
        key = line[0]
        if key == "model":
            kind = line[1]
        elif key == "names":
            names = line[1:]
        elif key == "rows":
            n, c = int(line[1]), int(line[2])
            values = " ".join(tokens[i:]).split()
            if len(values) < n * c:
                raise ValueError(f"{path}: short data")
            rows = [[float(v) for v in values[r * c : (r + 1) * c]] for r in range(n)]
            break
        else:
            settings[key] = line[1:]
    if kind is None or rows is None:
        raise ValueError(f"{path}: no model or rows line")
    return kind, settings, names, rows, c


def build(kind, settings, names, rows, cols):
    """(model, model args, quantities(samples) -> array [chains, draws, K])."""
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.distributions import constraints

    data = jnp.asarray(rows, dtype=jnp.float32).reshape(len(rows), cols)
    y, x = data[:, 0], data[:, 1:]
    d = x.shape[1]
    beta_sd = float(settings.get("beta_prior_sd", ["0"])[0])
    sigma_kind, sigma_scale = (settings.get("sigma_prior", ["flat", "0"]) + ["0"])[:2]
    sigma_scale = float(sigma_scale)

    def beta_prior(size):
        if beta_sd > 0:
            return dist.Normal(0.0, beta_sd).expand([size]).to_event(1)
        return dist.ImproperUniform(constraints.real_vector, (), (size,))

    if kind == "eight_schools":
        J = y.shape[0]
        sigma_obs = x[:, 0]
        if len(names) != J + 2:
            raise ValueError("eight_schools: names must be theta[1..J], mu, tau")

        def model(y):
            mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
            tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
            theta_trans = numpyro.sample("theta_trans", dist.Normal(0.0, 1.0).expand([J]).to_event(1))
            theta = numpyro.deterministic("theta", mu + tau * theta_trans)
            numpyro.sample("y", dist.Normal(theta, sigma_obs).to_event(1), obs=y)

        def quantities(s):
            return jnp.concatenate([s["theta"], s["mu"][..., None], s["tau"][..., None]], axis=-1)

        return model, (y,), quantities

    if kind == "linreg":
        if len(names) != d + 1:
            raise ValueError("linreg: names must be the coefficients and sigma")
        if sigma_kind == "cauchy":
            sigma_prior = dist.HalfCauchy(sigma_scale)
        elif sigma_kind == "normal":
            sigma_prior = dist.HalfNormal(sigma_scale)
        elif sigma_kind == "flat":
            sigma_prior = dist.ImproperUniform(constraints.positive, (), ())
        else:
            raise ValueError(f"linreg: unknown sigma_prior {sigma_kind}")

        def model(y):
            beta = numpyro.sample("beta", beta_prior(d))
            sigma = numpyro.sample("sigma", sigma_prior)
            numpyro.sample("y", dist.Normal(x @ beta, sigma).to_event(1), obs=y)

        def quantities(s):
            return jnp.concatenate([s["beta"], s["sigma"][..., None]], axis=-1)

        return model, (y,), quantities

    if kind == "logistic":
        if len(names) != d:
            raise ValueError("logistic: names must be the coefficients")

        def model(y):
            beta = numpyro.sample("beta", beta_prior(d))
            numpyro.sample("y", dist.Bernoulli(logits=x @ beta).to_event(1), obs=y)

        def quantities(s):
            return s["beta"]

        return model, (y,), quantities

    if kind == "mixture2":
        if len(names) != 5:
            raise ValueError("mixture2: names must be mu[1..2], sigma[1..2], theta")

        def model(y):
            mu = numpyro.sample("mu", dist.ImproperUniform(constraints.ordered_vector, (), (2,)))
            numpyro.factor("mu_prior", dist.Normal(0.0, 2.0).log_prob(mu).sum())
            sigma = numpyro.sample("sigma", dist.HalfNormal(2.0).expand([2]).to_event(1))
            theta = numpyro.sample("theta", dist.Beta(5.0, 5.0))
            mix = dist.Categorical(probs=jnp.stack([theta, 1.0 - theta]))
            with numpyro.plate("n", y.shape[0]):
                numpyro.sample("y", dist.MixtureSameFamily(mix, dist.Normal(mu, sigma)), obs=y)

        def quantities(s):
            return jnp.concatenate([s["mu"], s["sigma"], s["theta"][..., None]], axis=-1)

        return model, (y,), quantities

    def positive_pair(first, second, family):
        """gamma_iid and beta_iid: first, second ~ half-normal(0, 10), y iid
        family(first, second)."""
        if len(names) != 2 or d != 0:
            raise ValueError(f"{kind}: names must be {first}, {second}; one column")

        def model(y):
            p = numpyro.sample(first, dist.HalfNormal(10.0))
            q = numpyro.sample(second, dist.HalfNormal(10.0))
            numpyro.sample("y", family(p, q).expand([y.shape[0]]).to_event(1), obs=y)

        def quantities(s):
            return jnp.stack([s[first], s[second]], axis=-1)

        return model, (y,), quantities

    if kind == "gamma_iid":
        return positive_pair("alpha", "beta", dist.Gamma)

    if kind == "beta_iid":
        return positive_pair("a", "b", dist.Beta)

    if kind == "arma11":
        if len(names) != 4 or d != 0:
            raise ValueError("arma11: names must be mu, phi, theta, sigma; one column")
        y_prev = jnp.concatenate([jnp.zeros(1, y.dtype), y[:-1]])

        def model(y):
            mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
            phi = numpyro.sample("phi", dist.Normal(0.0, 2.0))
            theta = numpyro.sample("theta", dist.Normal(0.0, 2.0))
            sigma = numpyro.sample("sigma", dist.HalfCauchy(2.5))
            # err_t = y_t - mu - phi y_{t-1} - theta err_{t-1}, y_0 = mu, err_0 = 0
            c = y - mu - phi * y_prev.at[0].set(mu)

            def step(err_prev, c_t):
                err = c_t - theta * err_prev
                return err, err

            _, err = jax.lax.scan(step, jnp.zeros((), y.dtype), c)
            numpyro.factor("err", dist.Normal(0.0, sigma).log_prob(err).sum())

        def quantities(s):
            return jnp.stack([s["mu"], s["phi"], s["theta"], s["sigma"]], axis=-1)

        return model, (y,), quantities

    if kind == "garch11":
        if len(names) != 4 or d != 0 or "sigma1" not in settings:
            raise ValueError("garch11: names must be mu, alpha0, alpha1, beta1; one column; a sigma1 line")
        sigma1 = float(settings["sigma1"][0])

        def model(y):
            mu = numpyro.sample("mu", dist.ImproperUniform(constraints.real, (), ()))
            alpha0 = numpyro.sample("alpha0", dist.ImproperUniform(constraints.positive, (), ()))
            alpha1 = numpyro.sample("alpha1", dist.ImproperUniform(constraints.unit_interval, (), ()))
            # beta1 flat on (0, 1 - alpha1) as beta1 = (1 - alpha1) w, w in (0, 1)
            w = numpyro.sample("w", dist.ImproperUniform(constraints.unit_interval, (), ()))
            beta1 = numpyro.deterministic("beta1", (1.0 - alpha1) * w)
            numpyro.factor("beta1_jacobian", jnp.log1p(-alpha1))

            def step(var_prev, y_prev):
                var = alpha0 + alpha1 * (y_prev - mu) ** 2 + beta1 * var_prev
                return var, var

            _, var = jax.lax.scan(step, jnp.asarray(sigma1 * sigma1, y.dtype), y[:-1])
            sigma = jnp.sqrt(jnp.concatenate([jnp.full(1, sigma1, y.dtype), var]))
            numpyro.sample("y", dist.Normal(mu, sigma).to_event(1), obs=y)

        def quantities(s):
            return jnp.stack([s["mu"], s["alpha0"], s["alpha1"], s["beta1"]], axis=-1)

        return model, (y,), quantities

    if kind in ("mvn_lkj", "hier_lkj"):
        # tau ~ half-normal(0, s), L ~ lkj_corr_cholesky(eta). NumPyro's
        # unconstrained partial correlations are tanh(u), ours tanh(u / 2):
        # a fixed scale per coordinate, which the adapted metric absorbs.
        eta = float(settings["lkj_eta"][0])
        tau_sd = float(settings["sigma_prior"][1])
        K = cols if kind == "mvn_lkj" else cols - 1
        G = data.shape[0]
        low = [(i, j) for i in range(1, K) for j in range(i)]
        n_out = K + len(low) + (G * K if kind == "hier_lkj" else 0)
        if len(names) != n_out:
            raise ValueError(f"{kind}: names must be tau[1..K], Omega.i.j for i > j" +
                             (", then theta.g.k group by group" if kind == "hier_lkj" else ""))
        rows_i = jnp.asarray([i for i, _ in low], dtype=jnp.int32)
        cols_j = jnp.asarray([j for _, j in low], dtype=jnp.int32)

        def omega_lower(L):
            omega = L @ jnp.swapaxes(L, -1, -2)
            return omega[..., rows_i, cols_j]

        if kind == "mvn_lkj":

            def model(y):
                tau = numpyro.sample("tau", dist.HalfNormal(tau_sd).expand([K]).to_event(1))
                L = numpyro.sample("L", dist.LKJCholesky(K, eta))
                if y.shape[0] > 0:
                    with numpyro.plate("n", y.shape[0]):
                        numpyro.sample("y", dist.MultivariateNormal(0.0, scale_tril=tau[:, None] * L), obs=y)

            def quantities(s):
                return jnp.concatenate([s["tau"], omega_lower(s["L"])], axis=-1)

            return model, (data,), quantities

        obs, se = data[:, :K], data[:, K]

        def model(obs):
            tau = numpyro.sample("tau", dist.HalfNormal(tau_sd).expand([K]).to_event(1))
            L = numpyro.sample("L", dist.LKJCholesky(K, eta))
            z = numpyro.sample("z", dist.Normal(0.0, 1.0).expand([G, K]).to_event(2))
            theta = numpyro.deterministic("theta", z @ (tau[:, None] * L).T)
            numpyro.sample("obs", dist.Normal(theta, se[:, None]).to_event(2), obs=obs)

        def quantities(s):
            theta = s["theta"].reshape(s["theta"].shape[:-2] + (G * K,))
            return jnp.concatenate([s["tau"], omega_lower(s["L"]), theta], axis=-1)

        return model, (obs,), quantities

    return None


def write_csv(path, names, values, divergent):
    chains, draws, _ = values.shape
    with open(path, "w") as f:
        f.write(",".join(["chain", "draw", "divergent__"] + names) + "\n")
        for c in range(chains):
            for i in range(draws):
                row = [str(c + 1), str(i + 1), str(int(divergent[c, i]))]
                row += [f"{v:.9g}" for v in values[c, i]]
                f.write(",".join(row) + "\n")


def check(ref_path, names, values):
    """True when every reference quantity's mean and sd agree loosely."""
    import numpy as np

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from ess import bulk_ess

    ok = True
    print(f"check against {ref_path}: |mean - ref| <= 4 sqrt(mcse^2 + mcse_ref^2) + 0.1 sd_ref, sd within 15%")
    with open(ref_path) as f:
        lines = f.read().split("\n")[1:]
    for line in lines:
        if not line.strip():
            continue
        name, rm, rs, rmc = line.split(",")
        rm, rs, rmc = float(rm), float(rs), float(rmc)
        if name not in names:
            print(f"  {name}: not in the model")
            ok = False
            continue
        v = values[:, :, names.index(name)].astype(np.float64)
        mean, sd = v.mean(), v.std(ddof=1)
        mcse = sd / np.sqrt(bulk_ess(v))
        tol = 4 * np.sqrt(mcse**2 + rmc**2) + 0.1 * rs
        good = abs(mean - rm) <= tol and abs(sd / rs - 1) <= 0.15
        ok = ok and good
        print(f"  {name:12s} ref {rm:11.4g} numpyro {mean:11.4g} tol {tol:9.3g} ref sd {rs:10.4g} sd {sd:10.4g} "
              f"{'yes' if good else 'NO'}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data")
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--seeds", default="1,2,3", help="comma-separated, one timed run each")
    ap.add_argument("--out", help="CSV prefix: OUT.SEED.csv per seed (default: no CSV)")
    ap.add_argument("--check", metavar="REF", help="posteriordb reference summary to compare the first seed with")
    a = ap.parse_args()

    kind, settings, names, rows, cols = read_data(a.data)
    if kind not in TWINS:
        print(f"no NumPyro twin for model kind {kind}")
        return 3

    import numpyro

    numpyro.set_host_device_count(a.chains)
    import jax

    import numpy as np
    from numpyro.infer import MCMC, NUTS

    model, args, quantities = build(kind, settings, names, rows, cols)
    mcmc = MCMC(NUTS(model), num_warmup=a.warmup, num_samples=a.draws, num_chains=a.chains,
                chain_method=PmapOnce(jax.pmap), progress_bar=False)

    def run(seed):
        t0 = time.perf_counter()
        mcmc.run(jax.random.PRNGKey(seed), *args)
        samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
        secs = time.perf_counter() - t0
        divergent = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["diverging"])
        return secs, np.asarray(quantities(samples)), divergent

    print(f"numpyro_setup numpyro {numpyro.__version__} jax {jax.__version__} {jax.local_device_count()} CPU devices, "
          f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}, float32, chains by pmap")
    seeds = [int(s) for s in a.seeds.split(",") if s]
    first, _, _ = run(seeds[0] + 1000003)  # compiles; not timed
    print(f"numpyro_first_run_s {first:.3f} (compilation included, not counted)")
    ok = True
    for k, seed in enumerate(seeds):
        secs, values, divergent = run(seed)
        print(f"numpyro_sampling_s {seed} {secs:.4f} divergences {int(divergent.sum())}", flush=True)
        if a.out:
            write_csv(f"{a.out}.{seed}.csv", names, values, divergent)
        if a.check and k == 0:
            ok = check(a.check, names, values)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
