/* bench/clockcheck.c - how the benchmark's programs read time, checked where they run (`make bench`
   runs it in the soft-RoCE guest, bench/guest.sh). One line per finding, "clock KEY=VALUE ...":

       clock clocksource=hpet tsc_flags=constant_tsc,nonstop_tsc
       clock cost_ns monotonic=... monotonic_coarse=... gettimeofday=... rdtsc=...
       clock tsc_per_us cal20ms=... cal100ms=... spread100ms=... cpuinfo_mhz=... perftest_sample=...
       clock perftest_mhz=... perftest_source=cpuinfo|sample perftest_scale=...

   cost_ns: one call, the median of 7 loops of 20,000 calls timed with CLOCK_MONOTONIC (whole-loop
   durations). Where the clock source has no vDSO reader (hpet in a guest) a CLOCK_MONOTONIC read is a
   system call.
   tsc_per_us: cycle-counter ticks per microsecond against CLOCK_MONOTONIC, over 20 ms (what
   rdmax_pingpong and bench/floor.c do once at start) and over 100 ms (three times; spread = (max - min) /
   median); cpuinfo_mhz is /proc/cpuinfo's first "cpu MHz"; perftest_sample is perftest's own sample,
   redone: a least-squares slope of ticks over gettimeofday microseconds, 200 intervals from 100 us in
   steps of 10 us.
   perftest_mhz: what perftest divides its cycle counts by (get_clock.c: /proc/cpuinfo's value unless it
   is more than 2% away from its sample, then the sample); perftest_scale = cal100ms / perftest_mhz, the
   factor between one interval as perftest prints it and as the examples print it (below 1: perftest
   prints shorter times for the same interval).

       clockcheck            (no options; exit status 0, or 1 where there is no cycle counter)
*/
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#define LOOPS 7
#define CALLS 20000

static double mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return v[n / 2];
}

static volatile unsigned long long g_sink;  /* keeps the reads in the loops */

/* ns per call of one way to read the time */
enum reader { R_MONO, R_COARSE, R_TOD, R_TSC };
static double cost_ns(enum reader r)
{
    double v[LOOPS];
    for (int l = 0; l < LOOPS; l++) {
        double t0 = mono_us();
        unsigned long long s = 0;
        for (int i = 0; i < CALLS; i++) {
            struct timespec ts;
            struct timeval tv;
            switch (r) {
            case R_MONO: clock_gettime(CLOCK_MONOTONIC, &ts); s += (unsigned long long)ts.tv_nsec; break;
            case R_COARSE: clock_gettime(CLOCK_MONOTONIC_COARSE, &ts); s += (unsigned long long)ts.tv_nsec; break;
            case R_TOD: gettimeofday(&tv, NULL); s += (unsigned long long)tv.tv_usec; break;
            case R_TSC:
#if defined(__x86_64__) || defined(__i386__)
                s += __rdtsc();
#endif
                break;
            }
        }
        g_sink += s;
        v[l] = (mono_us() - t0) * 1e3 / CALLS;
    }
    return median(v, LOOPS);
}

#if defined(__x86_64__) || defined(__i386__)
/* ticks per microsecond against CLOCK_MONOTONIC over `us` */
static double calibrate(double us)
{
    double m0 = mono_us();
    unsigned long long t0 = __rdtsc();
    double m;
    while ((m = mono_us()) - m0 < us)
        ;
    return (double)(__rdtsc() - t0) / (m - m0);
}

/* perftest's sample (get_clock.c, sample_get_cpu_mhz), redone: intervals of 100, 110, ... us measured with
   gettimeofday, each with the ticks it took; the slope of ticks over microseconds. 0 when the fit is poor
   (perftest's r^2 < 0.9). */
static double perftest_sample(void)
{
    enum { N = 200 };
    double x[N], y[N], sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
    for (int i = 0; i < N; i++) {
        struct timeval a, b;
        unsigned long long c0 = __rdtsc();
        gettimeofday(&a, NULL);
        do
            gettimeofday(&b, NULL);
        while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_usec - a.tv_usec) < 100 + i * 10);
        x[i] = (double)((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_usec - a.tv_usec));
        y[i] = (double)(__rdtsc() - c0);
    }
    for (int i = 0; i < N; i++) {
        sx += x[i];
        sy += y[i];
        sxx += x[i] * x[i];
        syy += y[i] * y[i];
        sxy += x[i] * y[i];
    }
    double slope = (N * sxy - sx * sy) / (N * sxx - sx * sx);
    double r2 = (N * sxy - sx * sy) * (N * sxy - sx * sy) / (N * sxx - sx * sx) / (N * syy - sy * sy);
    return r2 < 0.9 ? 0 : slope;
}
#endif

/* the first "cpu MHz" of /proc/cpuinfo (what perftest reads), 0 when there is none */
static double cpuinfo_mhz(char *flags, size_t flags_len)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[4096];
    double mhz = 0;
    flags[0] = 0;
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f)) {
        double m;
        if (mhz == 0 && sscanf(line, "cpu MHz : %lf", &m) == 1)
            mhz = m;
        if (!flags[0] && strncmp(line, "flags", 5) == 0) {
            const char *want[] = {"constant_tsc", "nonstop_tsc", "tsc_known_freq"};
            for (unsigned i = 0; i < sizeof want / sizeof want[0]; i++) {
                const char *p = strstr(line, want[i]);
                size_t n = strlen(want[i]);
                if (p && (p[n] == ' ' || p[n] == '\n'))
                    snprintf(flags + strlen(flags), flags_len - strlen(flags), "%s%s", flags[0] ? "," : "", want[i]);
            }
            if (!flags[0])
                snprintf(flags, flags_len, "none");
        }
    }
    fclose(f);
    return mhz;
}

int main(void)
{
    char src[64] = "?", flags[128];
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (f) {
        if (fscanf(f, "%63s", src) != 1)
            snprintf(src, sizeof src, "?");
        fclose(f);
    }
    double mhz = cpuinfo_mhz(flags, sizeof flags);
    printf("clock clocksource=%s tsc_flags=%s\n", src, flags);
    printf("clock cost_ns monotonic=%.1f monotonic_coarse=%.1f gettimeofday=%.1f rdtsc=%.1f\n", cost_ns(R_MONO),
           cost_ns(R_COARSE), cost_ns(R_TOD), cost_ns(R_TSC));
#if defined(__x86_64__) || defined(__i386__)
    double c20 = calibrate(20000), c[3];
    for (int i = 0; i < 3; i++)
        c[i] = calibrate(100000);
    double lo = c[0], hi = c[0];
    for (int i = 1; i < 3; i++) {
        lo = c[i] < lo ? c[i] : lo;
        hi = c[i] > hi ? c[i] : hi;
    }
    double c100 = median(c, 3), sample = perftest_sample();
    printf("clock tsc_per_us cal20ms=%.3f cal100ms=%.3f spread100ms=%.5f cpuinfo_mhz=%.3f perftest_sample=%.3f\n", c20,
           c100, (hi - lo) / c100, mhz, sample);
    /* get_clock.c's choice: the nominal value unless it is more than 2% from the sample */
    int use_sample = mhz == 0 || (sample > 0 && (mhz > sample ? mhz - sample : sample - mhz) / mhz > 0.02);
    double pt = use_sample ? sample : mhz;
    printf("clock perftest_mhz=%.3f perftest_source=%s perftest_scale=%.4f\n", pt, use_sample ? "sample" : "cpuinfo",
           pt > 0 ? c100 / pt : 0);
    return 0;
#else
    printf("clock tsc_per_us none (no cycle counter on this architecture)\n");
    return 1;
#endif
}
