/* A small test helper: each case prints "PASS name" or "FAIL name: why" on its own line, which
   tests/run_all.sh counts; the program exits non-zero if any case failed. */
#ifndef RDMAX_TESTLIB_H
#define RDMAX_TESTLIB_H
#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>

static int tl_failed_total, tl_case_failed;
static char tl_case[160];

static void tl_begin(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_case, sizeof tl_case, fmt, ap);
    va_end(ap);
    tl_case_failed = 0;
}

static void tl_fail(const char *file, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!tl_case_failed)
        printf("FAIL %s: %s (%s:%d)\n", tl_case, msg, file, line);
    fflush(stdout);
    tl_case_failed = 1;
}

static int tl_end(void)
{
    if (!tl_case_failed)
        printf("PASS %s\n", tl_case);
    else
        tl_failed_total++;
    fflush(stdout);
    return !tl_case_failed;
}

#define CHECK(c, ...) do { if (!(c)) { tl_fail(__FILE__, __LINE__, __VA_ARGS__); } } while (0)
#define REQUIRE(c, ...) do { if (!(c)) { tl_fail(__FILE__, __LINE__, __VA_ARGS__); goto out; } } while (0)
#define CHECK_ST(st, want) CHECK((st) == (want), "status %d (%s), expected %d (%s)", (int)(st), \
                                 rdmax_status_str((rdmax_status)(st)), (int)(want), rdmax_status_str(want))
#endif
