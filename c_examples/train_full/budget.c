/*
 * budget.c: training under an arena cap (--arena-limit-mb, --recompute).
 *
 * Each transformer block is a recomputation segment (model.c). With a cap,
 * one measuring step runs before training: every block recomputed and the
 * cap lifted, on a batch drawn from a copy of the training RNG, with no
 * update (its gradients are cleared), so the run's numbers are those of a
 * run without it. The library then knows what a step needs with no block
 * recomputed and with every block recomputed: a cap below the latter can
 * never work, and the run stops at once naming the smallest cap that would
 * (exit 4); otherwise AG_RECOMPUTE_AUTO starts from those measurements and
 * recomputes only as many blocks as the cap requires.
 */
#include <stdio.h>

#include "train_full.h"

static const char *policy_name(int p)
{
    switch (p) {
    case AG_RECOMPUTE_NONE: return "none";
    case AG_RECOMPUTE_ALL: return "all";
    default: return "auto";
    }
}

/* Sets the policy and the cap; with a cap, measures and checks the budget.
 * Returns 0 or an exit status. */
int arena_budget(struct trainer *tr, uint64_t rng)
{
    const struct config *cfg = tr->cfg;
    ag_context *ctx = tr->ctx;
    int policy = cfg->recompute;
    if (policy < 0) policy = cfg->arena_limit_mb > 0 ? (int)AG_RECOMPUTE_AUTO : (int)AG_RECOMPUTE_NONE;
    ag_status st;
    if (cfg->arena_limit_mb > 0) {
        st = ag_set_arena_limit(ctx, 0);
        if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "ag_set_arena_limit", st);
        st = ag_set_recompute(ctx, AG_RECOMPUTE_ALL);
        if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "ag_set_recompute", st);
        dataset_batch(tr->data, false, tr->B, tr->T, &rng, tr->ids, tr->targets);
        ag_tensor loss;
        const char *what = "ag_reset";
        st = ag_reset(ctx);
        if (st == AG_STATUS_OK) {
            what = "forward";
            st = model_forward(ctx, &tr->model, tr->ids, tr->targets, tr->B, tr->T, NULL, &loss);
        }
        if (st == AG_STATUS_OK) {
            what = "ag_backward";
            st = ag_backward(ctx, loss);
        }
        if (st == AG_STATUS_OK) {
            what = "ag_zero_grad";
            st = ag_zero_grad(ctx);
        }
        if (st == AG_STATUS_OK) {
            what = "ag_reset";
            st = ag_reset(ctx);
        }
        if (st != AG_STATUS_OK) return report_failure(&tr->reporter, what, st);
        ag_memory_stats_t mem;
        st = ag_memory_stats(ctx, &mem);
        if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "ag_memory_stats", st);
        const uint64_t cap = (uint64_t)cfg->arena_limit_mb << 20;
        const uint64_t need = policy == (int)AG_RECOMPUTE_NONE ? mem.arena_need_none_bytes
                                                                : mem.arena_need_all_bytes;
        if (cap < need) {
            progress_end_line(&tr->progress);
            fflush(stdout);
            fprintf(stderr,
                    "train_full: --arena-limit-mb %ld is too small for preset %s (L=%d C=%d "
                    "T=%d) with batch %d and --recompute %s: a step needs %.1f MiB; the "
                    "smallest cap that works is --arena-limit-mb %llu\n",
                    cfg->arena_limit_mb, cfg->preset, cfg->n_layer, cfg->n_embd, cfg->seq_len,
                    cfg->batch, policy_name(policy),
                    (double)need / 1048576.0,
                    (unsigned long long)((need + (1u << 20) - 1) >> 20));
            return EXIT_ARENA;
        }
        fprintf(tr->info,
                "arena: a step needs %.1f MiB keeping every activation, %.1f MiB recomputing "
                "every block; cap %ld MiB, --recompute %s\n",
                (double)mem.arena_need_none_bytes / 1048576.0,
                (double)mem.arena_need_all_bytes / 1048576.0, cfg->arena_limit_mb,
                policy_name(policy));
        st = ag_set_arena_limit(ctx, (size_t)cap);
        if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "ag_set_arena_limit", st);
    }
    st = ag_set_recompute(ctx, (uint32_t)policy);
    if (st != AG_STATUS_OK) return report_failure(&tr->reporter, "ag_set_recompute", st);
    return 0;
}
