/*
 * A model of one's own, sampled with NUTS in parallel chains through
 * <arenagrad.h> alone: the event rates of two machines, counted over
 * several days. Counts y ~ Poisson(rate), rate ~ Gamma(2, 1) per machine.
 *
 * The sampler works on unconstrained coordinates: x = ln(rate), through
 * ag_constrain_lower (rate = 0 + e^x), whose log-Jacobian is added to the
 * density. The rates themselves are reported quantities, summarised beside
 * the coordinates.
 *
 * The gamma prior is conjugate, so the exact posterior of each rate is
 * Gamma(2 + sum(y), 1 + days): the program checks the sampled means and
 * standard deviations against it (means within 4 Monte Carlo standard
 * errors plus 5% of the sd, sds within 10%) and prints "sampling ok".
 *
 *   cc sampling.c $(pkg-config --cflags --libs arenagrad) -o sampling
 *   ./sampling [SEED]
 */
#include <arenagrad.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { MACHINES = 2, DAYS = 6 };

/* What the density reads: constants only. Every chain calls the density
 * on its own thread with the same pointer, so it must not be written to
 * during a run (a density that needs scratch space allocates it from its
 * ag_context, per call). */
typedef struct {
    float shape_minus_1[MACHINES]; /* prior shape - 1 + sum of counts */
    float rate_param[MACHINES];    /* prior rate + days */
} counts_model;

/* log p(x) = sum_m (shape_m - 1) ln rate_m - rate_m * r_m + ln |J|, with
 * ln rate_m = x_m; built from the library's ops so that its gradient
 * comes from backward. */
static ag_status log_density(ag_context *ctx, ag_tensor x, void *user, ag_tensor *out)
{
    const counts_model *m = user;
    size_t shape[1] = {MACHINES};
    ag_tensor rate, log_jacobian, a, b, ln_rate, t1, t2, diff, total;
    ag_status st;
    if ((st = ag_constrain_lower(ctx, x, 0.0f, &rate, &log_jacobian)) != AG_STATUS_OK ||
        (st = ag_tensor_new(ctx, shape, 1, m->shape_minus_1, &a)) != AG_STATUS_OK ||
        (st = ag_tensor_new(ctx, shape, 1, m->rate_param, &b)) != AG_STATUS_OK ||
        (st = ag_log(ctx, rate, &ln_rate)) != AG_STATUS_OK ||
        (st = ag_mul(ctx, a, ln_rate, &t1)) != AG_STATUS_OK ||
        (st = ag_mul(ctx, b, rate, &t2)) != AG_STATUS_OK ||
        (st = ag_sub(ctx, t1, t2, &diff)) != AG_STATUS_OK ||
        (st = ag_sum(ctx, diff, &total)) != AG_STATUS_OK)
        return st;
    return ag_add(ctx, total, log_jacobian, out);
}

/* The reported quantities of a draw: the rates, from its coordinates. */
static ag_status report_rates(const double *position, void *user, double *reported)
{
    (void)user;
    for (int m = 0; m < MACHINES; m++)
        reported[m] = exp(position[m]);
    return AG_STATUS_OK;
}

static void print_rows(const ag_summary_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        printf("%-10s %9.4f %8.4f %8.4f %9.4f %9.4f %9.4f %8.0f %8.0f %6.3f\n", rows[i].name,
               rows[i].mean, rows[i].sd, rows[i].mcse_mean, rows[i].q5, rows[i].q50, rows[i].q95,
               rows[i].ess_bulk, rows[i].ess_tail, rows[i].rhat);
}

int main(int argc, char **argv)
{
    static const int counts[MACHINES][DAYS] = {{3, 5, 2, 4, 6, 3}, {11, 9, 14, 10, 12, 13}};
    const float prior_shape = 2.0f, prior_rate = 1.0f;
    counts_model model;
    double exact_mean[MACHINES], exact_sd[MACHINES];
    for (int m = 0; m < MACHINES; m++) {
        int sum = 0;
        for (int d = 0; d < DAYS; d++)
            sum += counts[m][d];
        model.shape_minus_1[m] = prior_shape - 1.0f + (float)sum;
        model.rate_param[m] = prior_rate + DAYS;
        exact_mean[m] = (prior_shape + sum) / (double)model.rate_param[m];
        exact_sd[m] = sqrt(prior_shape + sum) / model.rate_param[m];
    }

    static const char *const names[MACHINES] = {"ln_rate_a", "ln_rate_b"};
    static const char *const reported_names[MACHINES] = {"rate_a", "rate_b"};
    ag_model_spec spec = {
        .struct_size = sizeof spec,
        .dim = MACHINES,
        .log_density = log_density,
        .user = &model,
        .fixed_graph = true, /* the same ops at every position: capture and replay */
        .names = names,
        .n_reported = MACHINES,
        .report = report_rates,
        .reported_names = reported_names,
    };
    ag_nuts_config config;
    ag_sampler *sampler = NULL;
    ag_draws *draws = NULL;
    if (ag_nuts_config_default(&config) != AG_STATUS_OK ||
        ag_sampler_new(&spec, &sampler) != AG_STATUS_OK) {
        fprintf(stderr, "sampling: %s\n", ag_sampler_last_error());
        return 1;
    }
    if (argc > 1)
        config.seed = strtoull(argv[1], NULL, 10);
    /* config.parallel is true: the four chains run at once. */
    ag_status st = ag_nuts_run(sampler, &config, &draws);
    if (st != AG_STATUS_OK) {
        fprintf(stderr, "sampling: ag_nuts_run: %s: %s\n", ag_status_str(st), ag_sampler_last_error());
        ag_sampler_free(sampler);
        return 1;
    }

    ag_summary_row coords[MACHINES], rates[MACHINES];
    ag_draws_info_t info;
    if (ag_draws_info(draws, &info) != AG_STATUS_OK ||
        ag_draws_summary(draws, coords, MACHINES) != AG_STATUS_OK ||
        ag_draws_summary_reported(draws, rates, MACHINES) != AG_STATUS_OK) {
        fprintf(stderr, "sampling: %s\n", ag_sampler_last_error());
        return 1;
    }
    size_t divergent = 0;
    for (size_t c = 0; c < info.chains; c++) {
        ag_chain_draws chain;
        if (ag_draws_chain(draws, c, &chain) != AG_STATUS_OK)
            return 1;
        for (size_t i = 0; i < chain.draws; i++)
            divergent += chain.divergent[i];
        printf("chain %zu: step size %.3f, %zu draws\n", c, chain.step_size, chain.draws);
    }
    printf("%zu chains x %zu draws, %zu divergent\n", info.chains, info.draws, divergent);
    printf("%-10s %9s %8s %8s %9s %9s %9s %8s %8s %6s\n", "", "mean", "sd", "mcse", "5%", "50%",
           "95%", "ess_bulk", "ess_tail", "rhat");
    print_rows(coords, MACHINES);
    print_rows(rates, MACHINES);

    int ok = 1;
    for (int m = 0; m < MACHINES; m++) {
        double mean_err = fabs(rates[m].mean - exact_mean[m]);
        double mean_bound = 4.0 * rates[m].mcse_mean + 0.05 * exact_sd[m];
        double sd_ratio = rates[m].sd / exact_sd[m];
        printf("%s: exact posterior mean %.4f sd %.4f; |mean error| %.4f (bound %.4f), sd ratio %.3f\n",
               reported_names[m], exact_mean[m], exact_sd[m], mean_err, mean_bound, sd_ratio);
        if (!(mean_err <= mean_bound) || !(fabs(sd_ratio - 1.0) <= 0.1) || !(rates[m].rhat < 1.01))
            ok = 0;
    }
    ag_draws_free(draws);
    ag_sampler_free(sampler);
    if (!ok) {
        fprintf(stderr, "sampling: the draws do not match the exact posterior\n");
        return 1;
    }
    printf("sampling ok\n");
    return 0;
}
