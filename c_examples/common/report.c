/*
 * report.c: a failed arenagrad call, told once on stderr, mapped to the
 * trainer's exit status (an arena that cannot grow and a failed write each
 * have their own, so scripts can tell them from a library failure).
 */
#include <stdio.h>

#include "trainer.h"

int report_failure(const struct reporter *r, const char *what, ag_status st)
{
    if (r->progress != NULL) progress_end_line(r->progress);
    fflush(stdout);
    const char *why = ag_context_last_error(r->ctx);
    if (st == AG_STATUS_OUT_OF_MEMORY && r->arena_limit_mb == 0) {
        fprintf(stderr, "%s: %s: the activation arena could not grow: %s\n", r->program, what,
                why);
        return EXIT_ARENA;
    }
    if (st == AG_STATUS_OUT_OF_MEMORY) {
        fprintf(stderr,
                "%s: %s: the activation arena cap (--arena-limit-mb %ld) is too small "
                "for %s: %s\n",
                r->program, what, r->arena_limit_mb, r->setting, why);
        return EXIT_ARENA;
    }
    /* The library's message names the failure kind itself ("I/O error: ..."). */
    if (why[0] != '\0') fprintf(stderr, "%s: %s failed: %s\n", r->program, what, why);
    else fprintf(stderr, "%s: %s failed: %s\n", r->program, what, ag_status_str(st));
    return st == AG_STATUS_IO ? EXIT_IO : EXIT_LIBRARY;
}
