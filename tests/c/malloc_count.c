/*
 * malloc_count.c: an LD_PRELOAD shared object that counts calls to the C
 * allocator on every thread, for tests/c/alloc_steady.c.
 *
 * A counting #[global_allocator] sees only what Rust allocates; OpenBLAS,
 * libc (stdio, pthread) and anything else in C call malloc directly. Loaded
 * first (LD_PRELOAD), this file's malloc, calloc, realloc, reallocarray,
 * free, posix_memalign, aligned_alloc, memalign, valloc and pvalloc replace
 * glibc's for the whole process, count each call while counting is on, and
 * forward to glibc's own implementation (the __libc_* entry points, so no
 * dlsym is needed inside malloc). free(NULL) is not counted: it does
 * nothing.
 *
 * The test finds the three functions below with dlsym(RTLD_DEFAULT, ...):
 *   void agmc_enable(int on)              start (1) or stop (0) counting
 *   unsigned long agmc_calls(void)        calls counted so far
 *   int agmc_first(void **frames, int n)  the call stack of the first
 *                                         counted call (frame count), for
 *                                         backtrace_symbols_fd
 * Linux with glibc only.
 */
#define _GNU_SOURCE

#include <errno.h>
#include <execinfo.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);
extern void __libc_free(void *p);
extern void *__libc_memalign(size_t align, size_t size);
extern void *__libc_valloc(size_t size);
extern void *__libc_pvalloc(size_t size);

#define EXPORT __attribute__((visibility("default")))
#define MAX_FRAMES 48

static atomic_int counting;
static atomic_ulong calls;
/* The first counted call's stack: claimed by one thread, then written. */
static atomic_int first_claimed;
static atomic_int first_ready;
static void *first_frames[MAX_FRAMES];
static int first_depth;
/* Set while this thread records a stack, so that anything backtrace()
 * allocates is neither counted nor recorded again. */
static __thread int in_hook;

static void count(void) {
    if (!atomic_load_explicit(&counting, memory_order_relaxed) || in_hook) return;
    atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
    int expected = 0;
    if (atomic_compare_exchange_strong(&first_claimed, &expected, 1)) {
        in_hook = 1;
        first_depth = backtrace(first_frames, MAX_FRAMES);
        in_hook = 0;
        atomic_store(&first_ready, 1);
    }
}

EXPORT void agmc_enable(int on) {
    if (on) {
        /* backtrace() loads libgcc_s's unwinder (allocating) on first use:
         * do that now, while nothing is counted. */
        void *warm[4];
        (void)backtrace(warm, 4);
        atomic_store(&first_claimed, 0);
        atomic_store(&first_ready, 0);
        atomic_store(&calls, 0);
    }
    atomic_store(&counting, on != 0);
}

EXPORT unsigned long agmc_calls(void) { return atomic_load(&calls); }

EXPORT int agmc_first(void **frames, int n) {
    if (!atomic_load(&first_ready)) return 0;
    int d = first_depth < n ? first_depth : n;
    memcpy(frames, first_frames, (size_t)d * sizeof(void *));
    return d;
}

EXPORT void *malloc(size_t size) {
    count();
    return __libc_malloc(size);
}

EXPORT void *calloc(size_t n, size_t size) {
    count();
    return __libc_calloc(n, size);
}

EXPORT void *realloc(void *p, size_t size) {
    count();
    return __libc_realloc(p, size);
}

EXPORT void *reallocarray(void *p, size_t n, size_t size) {
    count();
    if (size != 0 && n > SIZE_MAX / size) {
        errno = ENOMEM;
        return NULL;
    }
    return __libc_realloc(p, n * size);
}

EXPORT void free(void *p) {
    if (p == NULL) return;
    count();
    __libc_free(p);
}

EXPORT int posix_memalign(void **out, size_t align, size_t size) {
    count();
    if (align < sizeof(void *) || (align & (align - 1)) != 0) return EINVAL;
    void *p = __libc_memalign(align, size);
    if (p == NULL) return ENOMEM;
    *out = p;
    return 0;
}

EXPORT void *aligned_alloc(size_t align, size_t size) {
    count();
    return __libc_memalign(align, size);
}

EXPORT void *memalign(size_t align, size_t size) {
    count();
    return __libc_memalign(align, size);
}

EXPORT void *valloc(size_t size) {
    count();
    return __libc_valloc(size);
}

EXPORT void *pvalloc(size_t size) {
    count();
    return __libc_pvalloc(size);
}
