/*
 * dist.c: data-parallel training over MPI (built with -DAG_WITH_MPI by
 * mpicc, as build/train_full_mpi), or the same functions for one process.
 *
 * Every rank holds a full replica of the model and optimizer. Each step,
 * every rank draws the same global batch (same seed, same RNG), runs
 * forward and backward on its own B / world rows, then an in-place SUM
 * all-reduce over the library's flat gradient block (ag_grads_buffer, no
 * copy) and a scale by 1 / world give every rank the gradients of the mean
 * loss over the whole batch, before the clip and AdamW. By default the
 * all-reduce runs per bucket during backward (see "Overlapped all-reduce"
 * below); --allreduce blocking makes it one MPI_Allreduce after backward. The ranks therefore apply identical updates and stay bit-identical
 * replicas (a sum of the same values reaches every rank).
 *
 * Rank 0 evaluates, logs, samples and writes every file; the other ranks
 * write nothing and print only errors (their stdout is /dev/null). A
 * checkpoint is written by rank 0 (atomically), then all ranks meet at a
 * barrier. --resume, --data and --init-from are read on rank 0 only and
 * broadcast (the file's bytes, or the loaded parameters' values), so the
 * other machines need no copy of them and no shared filesystem. A failure on one rank ends
 * the whole job with MPI_Abort and the failure's exit status, so no rank
 * waits forever for a collective call.
 *
 * Watchdog: a rank that waits in a collective call for a rank or host that
 * stopped answering could wait forever (TCP notices a silent peer only
 * after many minutes). Each rank arms alarm() for TRAIN_FULL_MPI_TIMEOUT
 * seconds (default 600; 0: off) and re-arms it whenever a collective call
 * returns; if it fires, the rank says so on stderr and exits 124, and
 * mpirun, seeing a rank end without MPI_Finalize, ends the others. (A
 * host whose daemon mpirun cannot reach is Open MPI's to notice: see its
 * oob_tcp_keepalive_* parameters.)
 *
 * Bench aid: with TRAIN_FULL_MPI_SKIP_REDUCE=1 the gradients are not
 * reduced (each rank steps on its own rows' gradients, so the replicas
 * drift apart): the step time without communication, against which
 * `make bench-mpi` measures what the all-reduce costs.
 *
 * Test aid: with TRAIN_FULL_RANK_EXPORT=PREFIX in the environment, every
 * rank writes its parameters after training to PREFIX.rank<r>.safetensors
 * and its parameters with the optimizer state to PREFIX.rank<r>.ckpt (so a
 * test can check that the replicas are bit-identical, AdamW moments too).
 *
 * The library itself does not link MPI: MPI_Init and the reduction belong
 * to this program.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train_full.h"

#ifdef AG_WITH_MPI
#include <mpi.h>
#endif

static int g_rank = 0;
static int g_world = 1;
static bool g_overlap = false; /* --allreduce overlap in effect */
static bool g_zero = false;    /* --zero 1 in effect (ZeRO stage 1) */
/* Per step after the first WARMUP_STEPS (up to MAX_SAMPLES steps): the
   all-reduce of the gradients and the loss, and the wait for the other
   ranks before it. Medians are reported, like the step time's. */
#define MAX_SAMPLES 8192
static float g_reduce_ms[MAX_SAMPLES], g_wait_ms[MAX_SAMPLES];
static size_t g_samples = 0;
/* Steps whose all-reduce ran during backward (the overlapped path). */
static uint64_t g_overlapped_steps = 0;

int dist_rank(void) { return g_rank; }
int dist_world(void) { return g_world; }
bool dist_root(void) { return g_rank == 0; }

#ifdef AG_WITH_MPI

/* MPI counts are ints: larger buffers go in pieces. */
#define MPI_PIECE (1 << 30)

static uint64_t g_reduce_calls = 0;
static uint8_t *g_ckpt; /* --resume bytes, from rank 0 */
static size_t g_ckpt_len;

/* The watchdog's limit and its message, formatted before any alarm. */
static unsigned g_watch_s = 600;
static char g_watch_msg[192];
static size_t g_watch_len;

static void on_alarm(int sig)
{
    (void)sig;
    (void)!write(STDERR_FILENO, g_watch_msg, g_watch_len);
    _exit(EXIT_STALLED);
}

/* A collective call returned: the other ranks are alive. */
static void progress(void)
{
    if (g_watch_s > 0 && g_world > 1) alarm(g_watch_s);
}

void dist_watchdog_stop(void) { alarm(0); }

static void watchdog_start(void)
{
    const char *v = getenv("TRAIN_FULL_MPI_TIMEOUT");
    if (v != NULL && v[0] != '\0') {
        char *end = NULL;
        errno = 0;
        unsigned long s = strtoul(v, &end, 10);
        if (errno != 0 || *end != '\0' || v[0] == '-' || s > 86400) {
            if (g_rank == 0)
                fprintf(stderr,
                        "train_full: TRAIN_FULL_MPI_TIMEOUT=%s: not a number of seconds in "
                        "0..86400; using %u\n",
                        v, g_watch_s);
        } else {
            g_watch_s = (unsigned)s;
        }
    }
    int n = snprintf(g_watch_msg, sizeof g_watch_msg,
                     "train_full: rank %d: no collective call completed in %u s (another rank "
                     "or host stopped answering?): exiting %d\n",
                     g_rank, g_watch_s, EXIT_STALLED);
    g_watch_len = n > 0 && (size_t)n < sizeof g_watch_msg ? (size_t)n : 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    progress();
}

int dist_init(int *argc, char ***argv)
{
    /* Open MPI moves TCP data only inside MPI calls unless its TCP transport
       runs its own progress thread: with it, the overlapped all-reduce's
       buckets travel while backward computes (measured over the veth at 1
       Gbit/s: 11-12 of 13 buckets done when backward ends, against 5-7 with
       the ticks' MPI_Test alone). Set before MPI_Init; a value in the
       environment (or -x / --mca on mpirun's command line) wins. */
    setenv("OMPI_MCA_btl_tcp_progress_thread", "1", 0);
    if (MPI_Init(argc, argv) != MPI_SUCCESS) {
        fprintf(stderr, "train_full: MPI_Init failed\n");
        return EXIT_LIBRARY;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_world);
    if (g_rank != 0 && freopen("/dev/null", "w", stdout) == NULL) {
        fprintf(stderr, "train_full: rank %d: cannot silence stdout: %s\n", g_rank,
                strerror(errno));
        MPI_Abort(MPI_COMM_WORLD, EXIT_LIBRARY);
    }
    watchdog_start();
    return 0;
}

int dist_finish(int rc)
{
    dist_watchdog_stop(); /* rank 0 may still sample while the others wait here */
    fflush(stdout);
    fflush(stderr);
    /* Outcomes every rank reaches together (done, diverged, a stop agreed by
       all) end normally; anything else may have happened on this rank only,
       while the others wait in a collective call: end them all. */
    bool together = rc == 0 || rc == EXIT_DIVERGED || rc >= 128;
    if (g_world > 1 && !together) MPI_Abort(MPI_COMM_WORLD, rc);
    MPI_Finalize();
    return rc;
}

/*
 * Overlapped all-reduce (--allreduce overlap, the default): the library calls
 * on_grad_ready during ag_backward each time a bucket of the gradient block
 * is final (ag_set_grad_ready_callback), and this rank starts an
 * MPI_Iallreduce of it at once; its ticks (count 0) between ops call
 * MPI_Test, because Open MPI moves data only inside MPI calls (no progress
 * thread by default). dist_average then waits for every request. Each
 * float is still the sum of the same values, one per rank, so the results
 * are the blocking path's bits on 2 ranks (on more, Open MPI may pick
 * another summation order for another message size; the replicas stay
 * identical to each other either way).
 */
struct overlap {
    float *g;         /* the gradient block, taken before backward */
    MPI_Request *req; /* one per bucket (or MPI_PIECE of one), this backward */
    size_t cap, n, done;
    size_t started;   /* floats under way this backward */
    bool active;      /* the last micro-batch's backward is running */
};
static struct overlap g_ov;
static int g_skip = -1;

static bool skip_reduce(void)
{
    if (g_skip < 0) g_skip = getenv("TRAIN_FULL_MPI_SKIP_REDUCE") != NULL;
    return g_skip != 0;
}

static void on_grad_ready(void *user_data, size_t first, size_t count)
{
    struct overlap *o = user_data;
    if (!o->active) return;
    for (size_t off = 0; off < count; off += MPI_PIECE) {
        size_t k = count - off < MPI_PIECE ? count - off : MPI_PIECE;
        if (o->n == o->cap) { /* set-up sized it for every bucket: a bug */
            fprintf(stderr, "train_full: rank %d: more gradient buckets than parameters\n",
                    g_rank);
            MPI_Abort(MPI_COMM_WORLD, EXIT_LIBRARY);
        }
        MPI_Iallreduce(MPI_IN_PLACE, o->g + first + off, (int)k, MPI_FLOAT, MPI_SUM,
                       MPI_COMM_WORLD, &o->req[o->n++]);
        o->started += k;
    }
    while (o->done < o->n) { /* drive the transfers under way */
        int flag = 0;
        MPI_Test(&o->req[o->done], &flag, MPI_STATUS_IGNORE);
        if (!flag) break;
        o->done++;
    }
}

ag_status dist_after_optimizer(ag_context *ctx, const struct config *cfg)
{
    g_overlap = g_world > 1 && cfg->overlap && !skip_reduce();
    if (!g_overlap) return AG_STATUS_OK;
    size_t params = 0, n = 0;
    ag_status st = ag_param_count(ctx, &params);
    if (st == AG_STATUS_OK) st = ag_grads_len(ctx, &n);
    if (st != AG_STATUS_OK) return st;
    g_ov.cap = params + n / MPI_PIECE + 1;
    g_ov.req = malloc(g_ov.cap * sizeof *g_ov.req);
    if (g_ov.req == NULL) return AG_STATUS_OUT_OF_MEMORY;
    return ag_set_grad_ready_callback(ctx, on_grad_ready, &g_ov, (size_t)cfg->bucket_kb << 10);
}

/*
 * ZeRO stage 1 (--zero 1): rank r's optimizer keeps AdamW moments for, and
 * updates, only floats [n r / world, n (r + 1) / world) of the parameters
 * (ag_optimizer_shard); after each step MPI_Allgatherv brings every rank
 * the other slices. The gradients are still all-reduced whole, so the clip
 * norm is summed over the same values in the same order on every rank, and
 * AdamW updates each float from that float alone: the parameters are the
 * unsharded run's bits.
 *
 * Checkpoints: before rank 0 saves, every rank copies its slice of both
 * moments out (ag_optimizer_state_copy_out) and MPI_Gatherv brings them to
 * rank 0 in the unsharded layout; ag_checkpoint_save_gathered writes the
 * very file an unsharded run writes at that step, so any loader reads it.
 * The library takes the gathered moments instead of rank 0 building an
 * unsharded optimizer: that would need a second model and a way to set the
 * step count, only to copy the same floats once more. Loading needs
 * nothing new: every rank gets the bytes (dist_checkpoint_load) and the
 * library keeps the moments of the rank's shard.
 */
static float *g_pbuf;       /* every parameter float, for the all-gather */
static float *g_mbuf;       /* rank 0, when saving: both moments of every float */
static int *g_counts, *g_displs;
static size_t g_first, g_count, g_total;

/* Whether the run writes checkpoints (a --resume continues in its folder). */
static bool writes_checkpoints(const struct config *cfg)
{
    return cfg->out != NULL || cfg->save != NULL || cfg->resume != NULL;
}

ag_status dist_before_optimizer(ag_context *ctx, const struct config *cfg)
{
    g_zero = g_world > 1 && cfg->zero == 1;
    if (!g_zero) return AG_STATUS_OK;
    ag_status st = ag_grads_len(ctx, &g_total);
    if (st != AG_STATUS_OK) return st;
    if (g_total > (size_t)INT32_MAX) return AG_STATUS_TOO_LARGE; /* MPI counts are ints */
    g_pbuf = malloc(g_total * sizeof *g_pbuf);
    g_counts = malloc((size_t)g_world * sizeof *g_counts);
    g_displs = malloc((size_t)g_world * sizeof *g_displs);
    if (g_pbuf == NULL || g_counts == NULL || g_displs == NULL) return AG_STATUS_OUT_OF_MEMORY;
    for (int r = 0; r < g_world; r++) {
        size_t a = g_total * (size_t)r / (size_t)g_world;
        size_t b = g_total * (size_t)(r + 1) / (size_t)g_world;
        g_displs[r] = (int)a;
        g_counts[r] = (int)(b - a);
    }
    g_first = (size_t)g_displs[g_rank];
    g_count = (size_t)g_counts[g_rank];
    if (g_rank == 0 && writes_checkpoints(cfg)) {
        g_mbuf = malloc(2 * g_total * sizeof *g_mbuf); /* before the loop: it makes no malloc */
        if (g_mbuf == NULL) return AG_STATUS_OUT_OF_MEMORY;
    }
    return ag_optimizer_shard(ctx, g_first, g_count);
}

ag_status dist_zero_gather(ag_context *ctx, const struct config *cfg)
{
    if (!g_zero || !writes_checkpoints(cfg)) return AG_STATUS_OK;
    for (unsigned which = 0; which < 2; which++) {
        /* Rank 0 copies its slice in place; the others send theirs from g_pbuf. */
        float *mine = g_rank == 0 ? g_mbuf + which * g_total : g_pbuf;
        ag_status st = ag_optimizer_state_copy_out(ctx, which, g_first, mine + g_first, g_count);
        if (st != AG_STATUS_OK) return st;
        if (g_rank == 0)
            MPI_Gatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, mine, g_counts, g_displs, MPI_FLOAT,
                        0, MPI_COMM_WORLD);
        else
            MPI_Gatherv(mine + g_first, (int)g_count, MPI_FLOAT, NULL, NULL, NULL, MPI_FLOAT, 0,
                        MPI_COMM_WORLD);
    }
    return AG_STATUS_OK;
}

ag_status dist_checkpoint_save(ag_context *ctx, const char *path, const uint8_t *user,
                               size_t len)
{
    if (!g_zero) return ag_checkpoint_save(ctx, path, user, len);
    return ag_checkpoint_save_gathered(ctx, path, user, len, g_mbuf, 2 * g_total);
}

ag_status dist_after_step(ag_context *ctx)
{
    if (!g_zero) return AG_STATUS_OK;
    ag_status st = ag_params_copy_out(ctx, g_first, g_pbuf + g_first, g_count);
    if (st != AG_STATUS_OK) return st;
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, g_pbuf, g_counts, g_displs, MPI_FLOAT,
                   MPI_COMM_WORLD);
    progress();
    return ag_params_copy_in(ctx, 0, g_pbuf, g_total);
}

/* The largest AdamW state of any rank, against one unsharded replica's. */
void dist_zero_report(FILE *f, ag_context *ctx)
{
    ag_memory_stats_t m;
    if (ag_memory_stats(ctx, &m) != AG_STATUS_OK) return;
    unsigned long long mine = m.optimizer_bytes, most = mine;
    if (g_world > 1)
        MPI_Allreduce(&mine, &most, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    size_t n = 0;
    if (ag_grads_len(ctx, &n) != AG_STATUS_OK) return;
    fprintf(f, "zero stage=%d ranks=%d adamw_state_bytes_per_rank=%llu unsharded_bytes=%llu\n",
            g_zero ? 1 : 0, g_world, most, (unsigned long long)n * 8ull);
}

ag_status dist_before_backward(ag_context *ctx, bool last)
{
    g_ov.active = g_overlap && last;
    if (!g_ov.active) return AG_STATUS_OK;
    size_t n = 0;
    g_ov.n = g_ov.done = g_ov.started = 0;
    return ag_grads_buffer(ctx, &g_ov.g, &n);
}

ag_status dist_average(ag_context *ctx, float *loss)
{
    if (g_world == 1) return AG_STATUS_OK;
    float *g = NULL;
    size_t n = 0;
    ag_status st = ag_grads_buffer(ctx, &g, &n);
    if (st != AG_STATUS_OK) return st;
    double t0 = now_ms(), t1 = t0;
    if (g_ov.active) {
        /* What backward did not hide: the rest of the reductions. */
        g_ov.active = false;
        g_overlapped_steps++;
        if (g_ov.started != n) {
            fprintf(stderr, "train_full: rank %d: backward reported %zu of %zu gradients\n",
                    g_rank, g_ov.started, n);
            MPI_Abort(MPI_COMM_WORLD, EXIT_LIBRARY);
        }
        MPI_Waitall((int)(g_ov.n - g_ov.done), g_ov.req + g_ov.done, MPI_STATUSES_IGNORE);
    } else {
        /* The barrier separates waiting for the slowest rank's backward
           from the reduction itself, so the figures name each (it costs one
           message latency; the all-reduce would wait for that rank anyway). */
        MPI_Barrier(MPI_COMM_WORLD);
        t1 = now_ms();
        for (size_t off = 0; off < n && !skip_reduce(); off += MPI_PIECE) {
            size_t k = n - off < MPI_PIECE ? n - off : MPI_PIECE;
            MPI_Allreduce(MPI_IN_PLACE, g + off, (int)k, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }
    }
    double l = *loss;
    MPI_Allreduce(MPI_IN_PLACE, &l, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double t2 = now_ms();
    progress();
    const float inv = 1.0f / (float)g_world;
    for (size_t i = 0; i < n; i++) g[i] *= inv;
    *loss = (float)(l / g_world);
    if (++g_reduce_calls > WARMUP_STEPS && g_samples < MAX_SAMPLES) {
        g_wait_ms[g_samples] = (float)(t1 - t0);
        g_reduce_ms[g_samples++] = (float)(t2 - t1);
    }
    return AG_STATUS_OK;
}

int dist_stop_signal(void)
{
    int sig = (int)g_stop_signal;
    if (g_world > 1) MPI_Allreduce(MPI_IN_PLACE, &sig, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    progress();
    if (sig != 0) g_stop_signal = sig;
    return sig;
}

void dist_barrier(void)
{
    if (g_world > 1) MPI_Barrier(MPI_COMM_WORLD);
    progress();
}

void dist_bcast_double(double *v)
{
    if (g_world > 1) MPI_Bcast(v, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    progress();
}

static void bcast_bytes(uint8_t *p, size_t n)
{
    for (size_t off = 0; off < n; off += MPI_PIECE) {
        size_t k = n - off < MPI_PIECE ? n - off : MPI_PIECE;
        MPI_Bcast(p + off, (int)k, MPI_BYTE, 0, MPI_COMM_WORLD);
        progress();
    }
}

/* Rank 0 reads the checkpoint file; every rank receives its bytes. */
static void fetch_checkpoint(const char *path)
{
    uint64_t len = 0;
    if (g_rank == 0) {
        FILE *f = fopen(path, "rb");
        long size = -1;
        if (f != NULL && fseek(f, 0, SEEK_END) == 0) size = ftell(f);
        if (size >= 0 && fseek(f, 0, SEEK_SET) == 0) g_ckpt = malloc(size > 0 ? (size_t)size : 1);
        if (g_ckpt == NULL || fread(g_ckpt, 1, (size_t)size, f) != (size_t)size) {
            fprintf(stderr, "train_full: --resume %s: checkpoint refused: cannot read it: %s\n",
                    path, f == NULL ? strerror(errno) : "read error");
            fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, EXIT_CHECKPOINT);
        }
        fclose(f);
        len = (uint64_t)size;
    }
    MPI_Bcast(&len, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (g_rank != 0) {
        g_ckpt = malloc(len > 0 ? (size_t)len : 1);
        if (g_ckpt == NULL) {
            fprintf(stderr, "train_full: rank %d: out of memory for a %" PRIu64
                            "-byte checkpoint\n", g_rank, len);
            MPI_Abort(MPI_COMM_WORLD, EXIT_LIBRARY);
        }
    }
    g_ckpt_len = (size_t)len;
    bcast_bytes(g_ckpt, g_ckpt_len);
}

bool dist_load_data(const char *path, struct dataset *d, char *err, size_t errlen)
{
    if (g_world == 1) return load_data(path, d, err, errlen);
    uint64_t len = UINT64_MAX; /* rank 0 could not read the file */
    if (g_rank == 0 && read_data(path, d, err, errlen)) len = (uint64_t)d->n;
    MPI_Bcast(&len, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    if (len == UINT64_MAX) {
        if (g_rank != 0) snprintf(err, errlen, "%s: rank 0 could not read it", path);
        return false;
    }
    if (g_rank != 0) {
        d->tokens = malloc(len > 0 ? (size_t)len : 1);
        if (d->tokens == NULL) {
            fprintf(stderr, "train_full: rank %d: out of memory for %" PRIu64 " bytes of --data\n",
                    g_rank, len);
            MPI_Abort(MPI_COMM_WORLD, EXIT_LIBRARY);
        }
        d->n = (size_t)len;
    }
    bcast_bytes(d->tokens, d->n);
    index_data(d);
    return true;
}

ag_status dist_safetensors_load(ag_context *ctx, const char *path)
{
    if (g_world == 1) return init_weights_load(ctx, path);
    int32_t st = AG_STATUS_OK;
    if (g_rank == 0) st = init_weights_load(ctx, path);
    MPI_Bcast(&st, 1, MPI_INT32_T, 0, MPI_COMM_WORLD);
    if (st != AG_STATUS_OK) return st; /* rank 0's context holds the message */
    /* Every rank built the same parameters in the same order: send each. */
    size_t count = 0;
    TRY(ag_param_count(ctx, &count));
    for (size_t i = 0; i < count; i++) {
        ag_tensor p;
        size_t n = 0;
        TRY(ag_param_at(ctx, i, &p));
        TRY(ag_tensor_numel(ctx, p, &n));
        float *buf = malloc(n > 0 ? n * sizeof *buf : 1);
        if (buf == NULL) return AG_STATUS_OUT_OF_MEMORY;
        if (g_rank == 0) st = ag_tensor_read(ctx, p, buf, n);
        if (st == AG_STATUS_OK) bcast_bytes((uint8_t *)buf, n * sizeof *buf);
        if (st == AG_STATUS_OK && g_rank != 0) st = ag_param_write(ctx, p, buf, n);
        free(buf);
        if (st != AG_STATUS_OK) return st;
    }
    return AG_STATUS_OK;
}

ag_status dist_checkpoint_peek(ag_context *ctx, const char *path, uint8_t *user, size_t cap,
                               size_t *len)
{
    if (g_world == 1) return ag_checkpoint_peek(ctx, path, user, cap, len);
    if (g_ckpt == NULL) fetch_checkpoint(path);
    return ag_checkpoint_peek_bytes(ctx, g_ckpt, g_ckpt_len, user, cap, len);
}

ag_status dist_checkpoint_load(ag_context *ctx, const char *path, uint8_t *user, size_t cap,
                               size_t *len)
{
    if (g_world == 1) return ag_checkpoint_load(ctx, path, user, cap, len);
    if (g_ckpt == NULL) fetch_checkpoint(path);
    ag_status st = ag_checkpoint_load_bytes(ctx, g_ckpt, g_ckpt_len, user, cap, len);
    free(g_ckpt);
    g_ckpt = NULL;
    return st;
}

#else /* one process */

int dist_init(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

int dist_finish(int rc) { return rc; }

void dist_watchdog_stop(void) {}

ag_status dist_average(ag_context *ctx, float *loss)
{
    (void)ctx;
    (void)loss;
    return AG_STATUS_OK;
}

ag_status dist_after_optimizer(ag_context *ctx, const struct config *cfg)
{
    (void)ctx;
    (void)cfg;
    return AG_STATUS_OK;
}

ag_status dist_before_backward(ag_context *ctx, bool last)
{
    (void)ctx;
    (void)last;
    return AG_STATUS_OK;
}

ag_status dist_before_optimizer(ag_context *ctx, const struct config *cfg)
{
    (void)ctx;
    (void)cfg;
    return AG_STATUS_OK;
}

ag_status dist_after_step(ag_context *ctx)
{
    (void)ctx;
    return AG_STATUS_OK;
}

void dist_zero_report(FILE *f, ag_context *ctx)
{
    (void)f;
    (void)ctx;
}

ag_status dist_zero_gather(ag_context *ctx, const struct config *cfg)
{
    (void)ctx;
    (void)cfg;
    return AG_STATUS_OK;
}

ag_status dist_checkpoint_save(ag_context *ctx, const char *path, const uint8_t *user,
                               size_t len)
{
    return ag_checkpoint_save(ctx, path, user, len);
}

int dist_stop_signal(void) { return (int)g_stop_signal; }

void dist_barrier(void) {}

void dist_bcast_double(double *v) { (void)v; }

bool dist_load_data(const char *path, struct dataset *d, char *err, size_t errlen)
{
    return load_data(path, d, err, errlen);
}

ag_status dist_safetensors_load(ag_context *ctx, const char *path)
{
    return init_weights_load(ctx, path);
}

ag_status dist_checkpoint_peek(ag_context *ctx, const char *path, uint8_t *user, size_t cap,
                               size_t *len)
{
    return ag_checkpoint_peek(ctx, path, user, cap, len);
}

ag_status dist_checkpoint_load(ag_context *ctx, const char *path, uint8_t *user, size_t cap,
                               size_t *len)
{
    return ag_checkpoint_load(ctx, path, user, cap, len);
}

#endif

int dist_check_config(const struct config *cfg)
{
    if (g_world == 1) return 0;
    const char *why = NULL;
    if (cfg->batch % g_world != 0) why = "--batch must be a multiple of the number of ranks";
    else if (cfg->sample_only) why = "--sample-only runs on one process: run it without mpirun";
    if (why == NULL) return 0;
    if (g_rank == 0)
        fprintf(stderr, "train_full: %s (batch %d, %d ranks)\n", why, cfg->batch, g_world);
    return EXIT_USAGE;
}

static double median(float *a, size_t n)
{
    sort_floats(a, n);
    return n % 2 ? a[n / 2] : 0.5 * ((double)a[n / 2 - 1] + a[n / 2]);
}

void dist_report(FILE *f, double ms_per_step)
{
    if (g_world == 1 || g_samples == 0) return;
    double ms = median(g_reduce_ms, g_samples);
    double wait = median(g_wait_ms, g_samples);
    fprintf(f,
            "dist ranks=%d allreduce=%s allreduce_ms_per_step=%.4f allreduce_share=%.4f "
            "wait_ms_per_step=%.4f overlapped_steps=%llu\n",
            g_world, g_overlap ? "overlap" : "blocking", ms,
            ms_per_step > 0.0 ? ms / ms_per_step : 0.0, wait,
            (unsigned long long)g_overlapped_steps);
}

void dist_debug_export(ag_context *ctx)
{
    const char *prefix = getenv("TRAIN_FULL_RANK_EXPORT");
    if (prefix == NULL || prefix[0] == '\0') return;
    char path[PATH_CAP];
    snprintf(path, sizeof path, "%s.rank%d.safetensors", prefix, g_rank);
    ag_status st = ag_safetensors_save(ctx, path);
    if (st == AG_STATUS_OK && !g_zero) {
        snprintf(path, sizeof path, "%s.rank%d.ckpt", prefix, g_rank);
        st = ag_checkpoint_save(ctx, path, NULL, 0);
    }
    if (st != AG_STATUS_OK)
        fprintf(stderr, "train_full: rank %d: TRAIN_FULL_RANK_EXPORT %s: %s\n", g_rank, path,
                ag_context_last_error(ctx));
}
