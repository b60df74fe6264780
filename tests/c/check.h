/*
 * check.h: a tiny test harness for the arenagrad C tests.
 *
 *   CHECK(cond)                      condition holds
 *   CHECK_STATUS(call, expected)     call returns `expected` (an ag_status)
 *   CHECK_OK(call)                   call returns AG_STATUS_OK
 *   CHECK_ERR(ctx, call, expected, "needle", ...)
 *                                    call returns `expected`, the last error
 *                                    of ctx is non-empty and contains every
 *                                    needle (at least one)
 *   REQUIRE_OK(call)                 like CHECK_OK, but `return`s from the
 *                                    enclosing void function on failure
 *   REQUIRE(cond)                    like CHECK, with the same `return`
 *   check_summary()                  prints "N passed, N failed" and returns
 *                                    the process exit code (0 iff none failed)
 *
 * A failure prints file:line, the expression, the statuses by name and the
 * last error of the current context (set with check_set_ctx; CHECK_ERR uses
 * its own ctx). Tests call only the public header. Not thread-safe: make
 * every check from one thread (worker threads return their results).
 */
#ifndef AG_TESTS_CHECK_H
#define AG_TESTS_CHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "arenagrad.h"
#include "ag_test_hooks.h"

typedef struct check_state {
    int passed;
    int failed;
    /* Context whose last error is printed when a check fails (may be NULL). */
    ag_context *ctx;
    /* Name of the running test case, printed with failures. */
    const char *test;
} check_state;

static check_state check_g;

static inline void check_set_ctx(ag_context *ctx) { check_g.ctx = ctx; }

static inline void check_begin(const char *name) { check_g.test = name; }

static inline void check_print_last_error(const ag_context *ctx) {
    if (ctx != NULL) {
        fprintf(stderr, "    last error: \"%s\"\n", ag_context_last_error(ctx));
    }
}

/* Records one check; prints a diagnostic on failure. Returns ok. */
static inline bool check_record(bool ok, const char *file, int line, const char *expr) {
    if (ok) {
        check_g.passed++;
    } else {
        check_g.failed++;
        fprintf(stderr, "FAIL %s:%d [%s]: %s\n", file, line,
                check_g.test != NULL ? check_g.test : "-", expr);
    }
    return ok;
}

static inline bool check_status_impl(ag_status got, ag_status want, const char *file, int line,
                                     const char *expr) {
    bool ok = got == want;
    if (!check_record(ok, file, line, expr)) {
        fprintf(stderr, "    got %d (%s), expected %d (%s)\n", (int)got, ag_status_str(got),
                (int)want, ag_status_str(want));
        check_print_last_error(check_g.ctx);
    }
    return ok;
}

/* Status, then a non-empty last error containing every needle. */
static inline bool check_err_impl(const ag_context *ctx, ag_status got, ag_status want,
                                  const char *const *needles, const char *file, int line,
                                  const char *expr) {
    /* Copy the message at once: it is valid only until the next call. */
    char msg[1024];
    const char *m = ag_context_last_error(ctx);
    snprintf(msg, sizeof msg, "%s", m != NULL ? m : "(NULL)");
    bool ok = got == want && m != NULL && msg[0] != '\0';
    const char *missing = NULL;
    for (const char *const *n = needles; ok && *n != NULL; n++) {
        if (strstr(msg, *n) == NULL) {
            ok = false;
            missing = *n;
        }
    }
    if (!check_record(ok, file, line, expr)) {
        fprintf(stderr, "    got %d (%s), expected %d (%s)\n", (int)got, ag_status_str(got),
                (int)want, ag_status_str(want));
        fprintf(stderr, "    last error: \"%s\"\n", msg);
        if (missing != NULL) {
            fprintf(stderr, "    message lacks \"%s\"\n", missing);
        }
    }
    return ok;
}

#define CHECK(cond) ((void)check_record((cond) ? true : false, __FILE__, __LINE__, #cond))

#define CHECK_STATUS(call, expected) \
    ((void)check_status_impl((call), (expected), __FILE__, __LINE__, #call))

#define CHECK_OK(call) CHECK_STATUS(call, AG_STATUS_OK)

#define CHECK_ERR(ctx, call, expected, ...)                                                    \
    ((void)check_err_impl((ctx), (call), (expected), (const char *const[]){__VA_ARGS__, NULL}, \
                          __FILE__, __LINE__, #call))

#define REQUIRE(cond)                                                                     \
    do {                                                                                  \
        if (!check_record((cond) ? true : false, __FILE__, __LINE__, "REQUIRE " #cond)) { \
            return;                                                                       \
        }                                                                                 \
    } while (0)

#define REQUIRE_OK(call)                                                                   \
    do {                                                                                   \
        if (!check_status_impl((call), AG_STATUS_OK, __FILE__, __LINE__, "REQUIRE " #call)) { \
            return;                                                                        \
        }                                                                                  \
    } while (0)

/* Ends a test program: prints the summary line and returns the exit code. */
static inline int check_summary(void) {
    printf("%d passed, %d failed\n", check_g.passed, check_g.failed);
    fflush(stdout);
    return check_g.failed == 0 ? 0 : 1;
}

#endif /* AG_TESTS_CHECK_H */
