/* bench/clock.h - the benchmarks' clock (bench/floor.c, bench/scope.c): mono_us reads CLOCK_MONOTONIC;
   now_us the cycle counter, calibrated against it once by clock_init (a clock_gettime costs about 1 us in
   the TCG guest, a get round trip about 35 us), or CLOCK_MONOTONIC where there is no cycle counter. */
#ifndef RDMAX_BENCH_CLOCK_H
#define RDMAX_BENCH_CLOCK_H
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

static double mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}
#if defined(__x86_64__) || defined(__i386__)
static double ticks_per_us;
static void clock_init(void)
{
    double m0 = mono_us();
    unsigned long long t0 = __rdtsc();
    while (mono_us() - m0 < 20000)
        ;
    ticks_per_us = (double)(__rdtsc() - t0) / (mono_us() - m0);
}
static double now_us(void) { return (double)__rdtsc() / ticks_per_us; }
#else
static void clock_init(void) {}
static double now_us(void) { return mono_us(); }
#endif
#endif
