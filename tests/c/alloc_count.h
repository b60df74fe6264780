/*
 * alloc_count.h: the side of tests/c/malloc_count.c that a zero-allocation
 * test links: finding the preloaded counter, re-executing the program with
 * it when it is absent, and counting the calls a step makes after warm-up.
 * Static functions: each test program includes it once.
 */
#ifndef ALLOC_COUNT_H
#define ALLOC_COUNT_H

#include <dlfcn.h>
#include <errno.h>
#include <execinfo.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arenagrad.h"

typedef void (*agmc_enable_fn)(int);
typedef unsigned long (*agmc_calls_fn)(void);
typedef int (*agmc_first_fn)(void **, int);

static agmc_enable_fn agmc_enable;
static agmc_calls_fn agmc_calls;
static agmc_first_fn agmc_first;

/* Looks up the counter's functions; false if it is not preloaded. */
static bool find_counter(void)
{
    void *e = dlsym(RTLD_DEFAULT, "agmc_enable");
    void *c = dlsym(RTLD_DEFAULT, "agmc_calls");
    void *f = dlsym(RTLD_DEFAULT, "agmc_first");
    if (e == NULL || c == NULL || f == NULL) return false;
    /* memcpy: ISO C has no cast from an object pointer to a function one. */
    memcpy(&agmc_enable, &e, sizeof e);
    memcpy(&agmc_calls, &c, sizeof c);
    memcpy(&agmc_first, &f, sizeof f);
    return true;
}

/* Re-executes this program with the libmalloc_count.so beside it preloaded;
   returns 1 (after saying why) only if that cannot be done. */
static int reexec_with_counter(const char *program, char **argv)
{
    char self[PATH_MAX], lib[PATH_MAX + 32];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0 || getenv("AGMC_REEXEC") != NULL) {
        fprintf(stderr, "%s: the malloc counter is not loaded; run it with "
                        "LD_PRELOAD=.../libmalloc_count.so (make test-alloc)\n",
                program);
        return 1;
    }
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    *slash = '\0';
    snprintf(lib, sizeof lib, "%s/libmalloc_count.so", self);
    *slash = '/';
    setenv("LD_PRELOAD", lib, 1);
    setenv("AGMC_REEXEC", "1", 1);
    execv(self, argv);
    fprintf(stderr, "%s: execv: %s\n", program, strerror(errno));
    return 1;
}

/* Counts the allocator calls made by `iters` calls of `step`, after `warm`
   uncounted ones; prints the first call's stack if any. ULONG_MAX if a step
   failed. */
static unsigned long counted(const char *name, ag_status (*step)(void *, int), void *arg, int warm,
                             int iters)
{
    for (int i = 0; i < warm; i++) {
        if (step(arg, i) != AG_STATUS_OK) return ULONG_MAX;
    }
    agmc_enable(1);
    ag_status st = AG_STATUS_OK;
    for (int i = 0; i < iters && st == AG_STATUS_OK; i++) st = step(arg, warm + i);
    agmc_enable(0);
    unsigned long n = agmc_calls();
    printf("%-44s %d iterations after %d of warm-up: %lu allocator calls\n", name, iters, warm,
           n);
    if (st != AG_STATUS_OK) return ULONG_MAX;
    if (n != 0) {
        void *frames[48];
        int d = agmc_first(frames, 48);
        fprintf(stderr, "  first call from:\n");
        backtrace_symbols_fd(frames, d, 2);
    }
    return n;
}

#endif
