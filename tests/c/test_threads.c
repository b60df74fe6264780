/*
 * test_threads.c: one context, two threads; two contexts, two threads.
 *
 * 1. Deterministic BUSY. The main thread saves a checkpoint of ctx to a
 *    regular file (in a mkdtemp folder), changes the parameters, and makes a
 *    FIFO. Thread A calls ag_checkpoint_load(ctx, fifo): the library reads
 *    the whole file (std::fs::read), so it blocks inside the call in open()
 *    until a writer appears, then in read() until the writer closes. While A
 *    is parked there, every call on ctx from the main thread must return
 *    AG_STATUS_BUSY (including ag_context_free, which must not free it), and
 *    other contexts stay usable. Then the main thread writes the saved
 *    checkpoint's bytes into the FIFO and closes it: the load returns OK, the
 *    parameters and user bytes are the saved ones, and the context works.
 * 2. Stress. Thread A runs ag_matmul iterations while thread B hammers
 *    ag_memory_stats on the same context: every status must be OK or BUSY
 *    (BUSY is counted, not required: it depends on timing), and every result
 *    of A must be correct.
 * 3. Two contexts on two threads train the same MLP; their loss curves are
 *    bit-identical to a serial run's at one library thread: a tiny MLP at
 *    the default thread count, and one wide enough that its kernels are
 *    cut into tasks, at 8 threads (`make tsan` runs this file too).
 *
 * Checks run on the main thread only (check.h is not thread-safe).
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------------------ */
/* 1. Deterministic BUSY through a FIFO                                     */
/* ------------------------------------------------------------------------ */

typedef struct load_job {
    ag_context *ctx;
    const char *path;
    uint8_t user[16];
    size_t user_len;
    ag_status status;
} load_job;

static void *load_thread(void *arg) {
    load_job *j = arg;
    /* The main thread polls ctx until this call holds it; should a poll hold
     * ctx at the very moment this call starts, it gets BUSY: just retry. */
    do {
        j->status = ag_checkpoint_load(j->ctx, j->path, j->user, sizeof j->user, &j->user_len);
    } while (j->status == AG_STATUS_BUSY);
    return NULL;
}

/* The whole content of a regular file, or NULL. */
static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) return NULL;
    uint8_t *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n > 0 && fseek(f, 0, SEEK_SET) == 0) buf = malloc((size_t)n);
    if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = buf != NULL ? (size_t)n : 0;
    return buf;
}

/* Opens the FIFO for writing once a reader has it open (the blocked load);
 * polls with O_NONBLOCK (ENXIO while there is no reader) so a library that
 * never opens the FIFO makes this fail after `ms` milliseconds, not hang.
 * The returned descriptor is blocking. */
static int open_fifo_writer(const char *fifo, long ms) {
    for (long waited = 0; waited <= ms; waited++) {
        int fd = open(fifo, O_WRONLY | O_NONBLOCK);
        if (fd >= 0) {
            int fl = fcntl(fd, F_GETFL);
            if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
                close(fd);
                return -1;
            }
            return fd;
        }
        if (errno != ENXIO && errno != EINTR) return -1;
        sleep_ms(1);
    }
    return -1;
}

static bool write_all(int fd, const uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static void test_busy_deterministic(void) {
    check_begin("deterministic BUSY");
    char dir[64] = "/tmp/ag_test_threads.XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    char path[128], fifo[128];
    snprintf(path, sizeof path, "%s/saved.ckpt", dir);
    snprintf(fifo, sizeof fifo, "%s/pipe.ckpt", dir);

    ag_context *ctx = NULL;
    REQUIRE_OK(ag_context_new(&ctx));
    check_set_ctx(ctx);
    ag_tensor p = {0, 0, 0};
    const float init[4] = {1, 2, 3, 4}, other_w[4] = {-5, -6, -7, -8};
    CHECK_OK(ag_param_new(ctx, (const size_t[]){2, 2}, 2, init, &p));
    CHECK_OK(ag_optimizer_sgd(ctx, 0.1f, 0.0f, 0.0f));
    /* The checkpoint to load: saved now, then the parameters change. */
    static const uint8_t user[5] = {'b', 'u', 's', 'y', 0};
    CHECK_OK(ag_checkpoint_save(ctx, path, user, sizeof user));
    size_t len = 0;
    uint8_t *bytes = slurp(path, &len);
    CHECK(bytes != NULL && len > 0);
    CHECK_OK(ag_param_write(ctx, p, other_w, 4));
    CHECK(mkfifo(fifo, 0600) == 0);

    /* A watchdog: if anything below blocks for good the test must fail,
     * not hang (the default action of SIGALRM ends the process). */
    alarm(120);
    load_job job;
    memset(&job, 0xEE, sizeof job);
    job.ctx = ctx;
    job.path = fifo;
    job.status = 12345;
    pthread_t th;
    bool started = pthread_create(&th, NULL, load_thread, &job) == 0;
    CHECK(started);

    /* Wait until thread A is inside the call. Before that, OK is fine. */
    ag_memory_stats_t mf;
    ag_status st = AG_STATUS_OK;
    int others = 0, tries = 0;
    while (started && tries++ < 20000) {
        st = ag_memory_stats(ctx, &mf);
        if (st == AG_STATUS_BUSY) break;
        if (st != AG_STATUS_OK) others++;
        sleep_ms(1);
    }
    CHECK(others == 0);
    CHECK_STATUS(st, AG_STATUS_BUSY);
    if (st == AG_STATUS_BUSY) {
        /* Thread A cannot leave the call until we write to and close the
         * FIFO: every call below is deterministically BUSY. */
        ag_tensor out = {7, 7, 7};
        float v[4] = {0};
        size_t dims[AG_MAX_DIMS] = {0}, nd = 0, ulen = 77;
        uint8_t ub[8] = {0};
        float norm = 42.0f;
        memset(&mf, 0x33, sizeof mf);
        CHECK_STATUS(ag_memory_stats(ctx, &mf), AG_STATUS_BUSY);
        CHECK_STATUS(ag_reset(ctx), AG_STATUS_BUSY);
        CHECK_STATUS(ag_set_grad_enabled(ctx, false), AG_STATUS_BUSY);
        CHECK_STATUS(ag_set_arena_limit(ctx, 1024), AG_STATUS_BUSY);
        CHECK_STATUS(ag_tensor_new(ctx, (const size_t[]){2}, 1, v, &out), AG_STATUS_BUSY);
        CHECK_STATUS(ag_tensor_read(ctx, p, v, 4), AG_STATUS_BUSY);
        CHECK_STATUS(ag_tensor_shape(ctx, p, dims, &nd), AG_STATUS_BUSY);
        CHECK_STATUS(ag_param_write(ctx, p, init, 4), AG_STATUS_BUSY);
        CHECK_STATUS(ag_add(ctx, p, p, &out), AG_STATUS_BUSY);
        CHECK_STATUS(ag_backward(ctx, p), AG_STATUS_BUSY);
        CHECK_STATUS(ag_zero_grad(ctx), AG_STATUS_BUSY);
        CHECK_STATUS(ag_clip_grad_norm(ctx, 1.0f, &norm), AG_STATUS_BUSY);
        CHECK_STATUS(ag_optimizer_set_lr(ctx, 0.5f), AG_STATUS_BUSY);
        CHECK_STATUS(ag_optimizer_step(ctx), AG_STATUS_BUSY);
        CHECK_STATUS(ag_checkpoint_save(ctx, path, NULL, 0), AG_STATUS_BUSY);
        CHECK_STATUS(ag_checkpoint_load(ctx, path, ub, sizeof ub, &ulen), AG_STATUS_BUSY);
        CHECK_STATUS(ag_checkpoint_load_bytes(ctx, bytes, len, ub, sizeof ub, &ulen), AG_STATUS_BUSY);
        CHECK_STATUS(ag_test_panic(ctx), AG_STATUS_BUSY); /* never ran: no poisoning */
        CHECK(out.index == 7 && out.context == 7 && out.generation == 7);
        CHECK(v[0] == 0.0f && nd == 0 && ulen == 77 && ub[0] == 0 && norm == 42.0f);
        CHECK(mf.resets == 0x3333333333333333ull);
        const char *msg = ag_context_last_error(ctx);
        CHECK(msg != NULL && strstr(msg, "in use by another thread") != NULL);
        ag_context *copy = ctx;
        CHECK_STATUS(ag_context_free(&copy), AG_STATUS_BUSY);
        CHECK(copy == ctx); /* not freed, not cleared */
        /* Other contexts are not held up by the parked call. */
        ag_context *bystander = NULL;
        CHECK_OK(ag_context_new(&bystander));
        ag_tensor q = {0, 0, 0};
        CHECK_OK(ag_param_new(bystander, (const size_t[]){2}, 1, NULL, &q));
        CHECK_OK(ag_memory_stats(bystander, &mf));
        CHECK_OK(ag_context_free(&bystander));
    }

    /* Release thread A: the saved checkpoint's bytes through the FIFO. */
    int fd = started ? open_fifo_writer(fifo, 60000) : -1;
    CHECK(fd >= 0);
    if (fd >= 0) {
        CHECK(bytes != NULL && write_all(fd, bytes, len));
        CHECK(close(fd) == 0);
    }
    if (started) CHECK(pthread_join(th, NULL) == 0);
    alarm(0);

    CHECK_OK(job.status);
    if (job.status != AG_STATUS_OK) {
        fprintf(stderr, "    blocked load: \"%s\"\n", ag_context_last_error(ctx));
    }
    CHECK(job.user_len == sizeof user && memcmp(job.user, user, sizeof user) == 0);
    CHECK(job.user[sizeof user] == 0xEE); /* nothing past the user bytes */
    printf("busy: the load parked on a FIFO returned %s after %zu checkpoint bytes\n",
           ag_status_str(job.status), len);

    /* The context works again, nothing was poisoned, and the load restored
     * the saved parameters (nothing the BUSY calls asked for happened). */
    CHECK_OK(ag_memory_stats(ctx, &mf));
    CHECK(mf.resets == 0 && mf.arena_limit_bytes == 0);
    CHECK_OK(ag_reset(ctx));
    float v[4] = {0};
    CHECK_OK(ag_tensor_read(ctx, p, v, 4));
    CHECK(memcmp(v, init, sizeof v) == 0);
    ag_tensor x = {0, 0, 0}, y = {0, 0, 0}, l = {0, 0, 0};
    CHECK_OK(ag_tensor_new(ctx, (const size_t[]){2, 2}, 2, init, &x));
    CHECK_OK(ag_mul(ctx, x, p, &y));
    CHECK_OK(ag_sum(ctx, y, &l));
    CHECK_OK(ag_backward(ctx, l));
    CHECK_OK(ag_optimizer_step(ctx)); /* lr 0.1 (set_lr never ran): p - 0.1 * x */
    CHECK_OK(ag_tensor_read(ctx, p, v, 4));
    for (int i = 0; i < 4; i++) CHECK(fabsf(v[i] - 0.9f * init[i]) < 1e-6f);
    free(bytes);
    CHECK_OK(ag_context_free(&ctx));
    check_set_ctx(NULL);
    CHECK(unlink(fifo) == 0);
    CHECK(unlink(path) == 0);
    CHECK(rmdir(dir) == 0); /* nothing else was left behind */
}

/* ------------------------------------------------------------------------ */
/* 2. Stress: matmul loop against a memory_stats hammer                     */
/* ------------------------------------------------------------------------ */

#define N 64
#define ITERS 100

typedef struct stress {
    ag_context *ctx;
    const float *a;       /* [N, N] */
    const float *want;    /* a @ a, computed naively */
    atomic_int started; /* thread B is calling: A starts only then, so they overlap */
    atomic_int done;
    /* Thread A */
    int a_busy, a_other, a_wrong, a_iters;
    ag_status a_first_other;
    /* Thread B */
    long b_calls, b_ok, b_busy, b_other;
    ag_status b_first_other;
} stress;

/* Retries a call while it is BUSY; records any other failure. */
#define RETRY(s, call, st)                                          \
    do {                                                            \
        while (((st) = (call)) == AG_STATUS_BUSY) (s)->a_busy++;    \
        if ((st) != AG_STATUS_OK) {                                 \
            if ((s)->a_other++ == 0) (s)->a_first_other = (st);     \
        }                                                           \
    } while (0)

static void *matmul_thread(void *arg) {
    stress *s = arg;
    static float out[N * N];
    while (!atomic_load(&s->started)) sched_yield();
    for (int it = 0; it < ITERS; it++) {
        ag_status st;
        ag_tensor x = {0, 0, 0}, y = {0, 0, 0};
        RETRY(s, ag_reset(s->ctx), st);
        RETRY(s, ag_tensor_new(s->ctx, (const size_t[]){N, N}, 2, s->a, &x), st);
        if (st != AG_STATUS_OK) continue;
        RETRY(s, ag_matmul(s->ctx, x, x, false, false, &y), st);
        if (st != AG_STATUS_OK) continue;
        memset(out, 0, sizeof out);
        RETRY(s, ag_tensor_read(s->ctx, y, out, N * N), st);
        if (st != AG_STATUS_OK) continue;
        for (int i = 0; i < N * N; i++) {
            if (fabsf(out[i] - s->want[i]) > 1e-4f * (1.0f + fabsf(s->want[i]))) {
                s->a_wrong++;
                break;
            }
        }
        s->a_iters++;
    }
    atomic_store(&s->done, 1);
    return NULL;
}

static void *hammer_thread(void *arg) {
    stress *s = arg;
    ag_memory_stats_t mf;
    while (!atomic_load(&s->done)) {
        ag_status st = ag_memory_stats(s->ctx, &mf);
        s->b_calls++;
        atomic_store(&s->started, 1);
        if (st == AG_STATUS_OK) {
            s->b_ok++;
        } else if (st == AG_STATUS_BUSY) {
            s->b_busy++;
            sched_yield(); /* let the owner finish its call */
        } else if (s->b_other++ == 0) {
            s->b_first_other = st;
        }
    }
    return NULL;
}

static void test_stress(void) {
    check_begin("stress");
    static float a[N * N], want[N * N];
    for (int i = 0; i < N * N; i++) a[i] = (float)((i * 7919) % 17) / 17.0f - 0.5f;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < N; k++) acc += (double)a[i * N + k] * a[k * N + j];
            want[i * N + j] = (float)acc;
        }
    stress s;
    memset(&s, 0, sizeof s);
    atomic_init(&s.started, 0);
    atomic_init(&s.done, 0);
    s.a = a;
    s.want = want;
    REQUIRE_OK(ag_context_new(&s.ctx));
    check_set_ctx(s.ctx);
    pthread_t ta, tb;
    REQUIRE(pthread_create(&tb, NULL, hammer_thread, &s) == 0);
    if (pthread_create(&ta, NULL, matmul_thread, &s) != 0) {
        atomic_store(&s.done, 1);
        CHECK(false);
    } else {
        CHECK(pthread_join(ta, NULL) == 0);
    }
    CHECK(pthread_join(tb, NULL) == 0);
    if (!check_record(s.a_other == 0 && s.b_other == 0, __FILE__, __LINE__,
                      "only OK or BUSY from concurrent calls")) {
        fprintf(stderr, "    matmul thread: %d failures (first %s); stats thread: %ld (first %s)\n",
                s.a_other, ag_status_str(s.a_first_other), s.b_other,
                ag_status_str(s.b_first_other));
    }
    CHECK(s.a_iters == ITERS);
    CHECK(s.a_wrong == 0);
    CHECK(s.b_ok > 0);
    printf("stress: %d matmul iterations (%d BUSY retries), %ld memory_stats calls "
           "(%ld OK, %ld BUSY)\n",
           s.a_iters, s.a_busy, s.b_calls, s.b_ok, s.b_busy);
    /* Afterwards the context is fine. */
    ag_memory_stats_t mf;
    CHECK_OK(ag_memory_stats(s.ctx, &mf));
    CHECK(mf.resets == ITERS);
    CHECK_OK(ag_context_free(&s.ctx));
    check_set_ctx(NULL);
}

/* ------------------------------------------------------------------------ */
/* 3. Two contexts, two threads, same results as serial                     */
/* ------------------------------------------------------------------------ */

#define STEPS 40

/* An MLP's shape: the tiny one runs every kernel whole; the wide one is
 * large enough that products and row kernels are cut into tasks across the
 * pool (at 8 threads, more than this machine's cores). */
typedef struct mlp_shape {
    int rows, din, hid, dout, steps;
} mlp_shape;

static const mlp_shape TINY = {16, 4, 16, 3, STEPS};
static const mlp_shape WIDE = {256, 256, 256, 10, 3};

typedef struct run {
    const mlp_shape *shape;
    float losses[STEPS];
    ag_status status;
    char error[256];
} run;

/* Trains the MLP of r->shape from a fixed seed; records the loss curve. */
static void train_mlp(run *r) {
    const mlp_shape m = *r->shape;
    float *x = malloc(sizeof(float) * (size_t)(m.rows * m.din));
    float *w1 = malloc(sizeof(float) * (size_t)(m.din * m.hid));
    float *w2 = malloc(sizeof(float) * (size_t)(m.hid * m.dout));
    int32_t *y = malloc(sizeof(int32_t) * (size_t)m.rows);
    if (!x || !w1 || !w2 || !y) {
        r->status = AG_STATUS_OUT_OF_MEMORY;
        free(x), free(w1), free(w2), free(y);
        return;
    }
    uint32_t s = 777u;
#define NEXT() (s = s * 1103515245u + 12345u, (float)((s >> 9) & 0xFFFF) / 65536.0f - 0.5f)
    for (int i = 0; i < m.rows * m.din; i++) x[i] = 2.0f * NEXT();
    for (int i = 0; i < m.din * m.hid; i++) w1[i] = NEXT() * 4.0f / sqrtf((float)m.din);
    for (int i = 0; i < m.hid * m.dout; i++) w2[i] = NEXT() * 4.0f / sqrtf((float)m.hid);
#undef NEXT
    for (int i = 0; i < m.rows; i++) y[i] = ((x[i * m.din] > 0) + (x[i * m.din + 1] > 0.3f)) % m.dout;
    ag_context *c = NULL;
    r->status = ag_context_new(&c);
    if (r->status != AG_STATUS_OK) goto out;
    ag_tensor pw1, pb1, pw2, pb2;
    ag_status st = ag_param_new(c, (const size_t[]){(size_t)m.din, (size_t)m.hid}, 2, w1, &pw1);
    if (!st) st = ag_param_new(c, (const size_t[]){(size_t)m.hid}, 1, NULL, &pb1);
    if (!st) st = ag_param_new(c, (const size_t[]){(size_t)m.hid, (size_t)m.dout}, 2, w2, &pw2);
    if (!st) st = ag_param_new(c, (const size_t[]){(size_t)m.dout}, 1, NULL, &pb2);
    if (!st) st = ag_optimizer_adamw(c, 0.02f, 0.9f, 0.999f, 1e-8f, 0.01f);
    for (int step = 0; step < m.steps && !st; step++) {
        ag_tensor tx, h, a, lg, l;
        st = ag_reset(c);
        if (!st) st = ag_tensor_new(c, (const size_t[]){(size_t)m.rows, (size_t)m.din}, 2, x, &tx);
        if (!st) st = ag_linear(c, tx, pw1, &pb1, &h);
        if (!st) st = ag_relu(c, h, &a);
        if (!st) st = ag_linear(c, a, pw2, &pb2, &lg);
        if (!st) st = ag_cross_entropy(c, lg, y, (size_t)m.rows, &l);
        if (!st) st = ag_tensor_item(c, l, &r->losses[step]);
        if (!st) st = ag_backward(c, l);
        if (!st) st = ag_clip_grad_norm(c, 5.0f, NULL);
        if (!st) st = ag_optimizer_step(c);
        if (!st) st = ag_zero_grad(c);
    }
    r->status = st;
    if (st != AG_STATUS_OK) snprintf(r->error, sizeof r->error, "%s", ag_context_last_error(c));
    ag_status fst = ag_context_free(&c);
    if (r->status == AG_STATUS_OK) r->status = fst;
out:
    free(x), free(w1), free(w2), free(y);
}

static void *train_thread(void *arg) {
    train_mlp(arg);
    return NULL;
}

/* Two contexts of `shape` train on two host threads at `threads` library
 * threads (0: the default), three rounds; each loss curve must equal a
 * serial run's at one thread, bit for bit. */
static void two_contexts(const char *name, const mlp_shape *shape, size_t threads) {
    check_begin(name);
    static run serial, t1, t2;
    memset(&serial, 0, sizeof serial);
    memset(&t1, 0xff, sizeof t1);
    memset(&t2, 0xff, sizeof t2);
    serial.shape = t1.shape = t2.shape = shape;
    CHECK_OK(ag_set_num_threads(1));
    train_mlp(&serial);
    CHECK_OK(serial.status);
    CHECK_OK(ag_set_num_threads(threads));
    for (int round = 0; round < 3; round++) {
        pthread_t a, b;
        REQUIRE(pthread_create(&a, NULL, train_thread, &t1) == 0);
        if (pthread_create(&b, NULL, train_thread, &t2) != 0) {
            CHECK(false);
            pthread_join(a, NULL);
            return;
        }
        CHECK(pthread_join(a, NULL) == 0);
        CHECK(pthread_join(b, NULL) == 0);
        if (!check_record(t1.status == AG_STATUS_OK && t2.status == AG_STATUS_OK, __FILE__,
                          __LINE__, "both threads trained")) {
            fprintf(stderr, "    thread 1: %s %s; thread 2: %s %s\n", ag_status_str(t1.status),
                    t1.error, ag_status_str(t2.status), t2.error);
        }
        size_t bytes = sizeof(float) * (size_t)shape->steps;
        CHECK(memcmp(t1.losses, serial.losses, bytes) == 0);
        CHECK(memcmp(t2.losses, serial.losses, bytes) == 0);
    }
    CHECK_OK(ag_set_num_threads(0));
    CHECK(serial.losses[shape->steps - 1] < serial.losses[0]);
    printf("%s: loss %.4f -> %.4f, bit-identical in both threads and serially at one thread\n",
           name, (double)serial.losses[0], (double)serial.losses[shape->steps - 1]);
}

/* Once the first context has settled its GEMM, the only threads left
 * besides this one are arenagrad's own workers: OpenBLAS's idle workers
 * (which busy-wait for about 0.1 s after load) are ended. Under another
 * GEMM (MKL's threads are its own) there is nothing to check. */
static void no_idle_blas_workers(void) {
    check_begin("no idle BLAS workers");
    ag_context *ctx = NULL;
    REQUIRE_OK(ag_context_new(&ctx));
    check_set_ctx(ctx);
    ag_runtime rt;
    REQUIRE_OK(ag_runtime_info(ctx, &rt));
    if (!strcmp(rt.gemm_library, "OpenBLAS")) {
        char path[300], comm[64];
        int foreign = 0;
        DIR *dir = opendir("/proc/self/task");
        REQUIRE(dir != NULL);
        for (struct dirent *e; (e = readdir(dir));) {
            if (e->d_name[0] == '.' || atoi(e->d_name) == (int)getpid()) continue;
            snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
            FILE *f = fopen(path, "r");
            if (!f) continue; /* ended meanwhile */
            if (fgets(comm, sizeof comm, f) && strncmp(comm, "arenagrad-work", 14) != 0) {
                fprintf(stderr, "  thread %s is %s", e->d_name, comm);
                foreign++;
            }
            fclose(f);
        }
        closedir(dir);
        CHECK(foreign == 0);
    }
    ag_context_free(&ctx);
    check_set_ctx(NULL);
}

int main(void) {
    no_idle_blas_workers(); /* first: before this file's own threads */
    test_busy_deterministic();
    test_stress();
    two_contexts("two contexts", &TINY, 0);
    /* 8 library threads, more than this machine's cores; TEST_THREADS_WIDE
     * sets another count (the valgrind run takes 1: see the Makefile). */
    const char *wide = getenv("TEST_THREADS_WIDE");
    const size_t wide_threads = wide ? (size_t)strtoul(wide, NULL, 10) : 8;
    char name[64];
    snprintf(name, sizeof name, "two wide contexts at %zu thread%s", wide_threads,
             wide_threads == 1 ? "" : "s");
    two_contexts(name, &WIDE, wide_threads);
    return check_summary();
}
