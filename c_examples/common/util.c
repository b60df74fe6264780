/*
 * util.c: random numbers, clock, resident memory, formatting, sorting.
 * Nothing here allocates, so all of it may run inside the training loop.
 */
#define _POSIX_C_SOURCE 200809L

#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "trainer.h"

#define TWO_PI 6.283185307179586

/* Random numbers: splitmix64 (one 64-bit word of state, easy to checkpoint). */
uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 53 random bits. */
double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

/* Standard normal (Box-Muller; the second value is dropped for simplicity). */
double rng_normal(uint64_t *s)
{
    double u1 = 1.0 - rng_uniform(s); /* (0, 1]: log is finite */
    double u2 = rng_uniform(s);
    return sqrt(-2.0 * log(u1)) * cos(TWO_PI * u2);
}


uint64_t derive_seed(uint64_t seed, uint64_t stream)
{
    uint64_t s = seed ^ (stream * 0xD1B54A32D192ED03ull);
    return rng_next(&s);
}

double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Resident pages from /proc/self/statm (open/read: no malloc): all of them,
 * or the anonymous ones (resident minus file-backed and shared). */
static long statm_kb(bool anonymous_only)
{
    int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0) return -1;
    char buf[128];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = '\0';
    unsigned long size = 0, resident = 0, shared = 0;
    if (sscanf(buf, "%lu %lu %lu", &size, &resident, &shared) != 3) return -1;
    unsigned long pages = anonymous_only ? resident - (shared < resident ? shared : resident) : resident;
    long page = sysconf(_SC_PAGESIZE);
    return (long)pages * (page > 0 ? page / 1024 : 4);
}

/* Resident set size in KiB. */
long rss_kb(void)
{
    return statm_kb(false);
}

/* Anonymous resident memory in KiB: the heap, the arena and the stacks,
 * without the pages of mapped libraries, which grow as new code first runs
 * (a large BLAS pages in its kernels as new shapes appear). */
long anon_kb(void)
{
    return statm_kb(true);
}

void format_duration(char *buf, size_t len, double ms)
{
    if (!(ms >= 0.0) || ms > 1e12) {
        snprintf(buf, len, "?");
        return;
    }
    long s = (long)(ms / 1000.0 + 0.5);
    if (s >= 3600)
        snprintf(buf, len, "%ldh%02ldm%02lds", s / 3600, (s / 60) % 60, s % 60);
    else
        snprintf(buf, len, "%ldm%02lds", s / 60, s % 60);
}

/* In-place heapsort (glibc's qsort may malloc a merge buffer; this never does). */
void sort_floats(float *a, size_t n)
{
    for (size_t end = n; end > 1; end--) {
        if (end == n) {
            for (size_t i = n / 2; i-- > 0;) {
                for (size_t r = i, c; (c = 2 * r + 1) < n; r = c) {
                    if (c + 1 < n && a[c + 1] > a[c]) c++;
                    if (!(a[c] > a[r])) break;
                    float t = a[r];
                    a[r] = a[c];
                    a[c] = t;
                }
            }
        }
        float t = a[0];
        a[0] = a[end - 1];
        a[end - 1] = t;
        for (size_t r = 0, c; (c = 2 * r + 1) < end - 1; r = c) {
            if (c + 1 < end - 1 && a[c + 1] > a[c]) c++;
            if (!(a[c] > a[r])) break;
            float u = a[r];
            a[r] = a[c];
            a[c] = u;
        }
    }
}
