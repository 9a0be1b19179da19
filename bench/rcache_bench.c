/* Registration cache benchmark: rdmax's rcache against UCX's ucs_rcache, same process, same
   layout, same order of requests, register/deregister operations that do nothing.

   hit:  get + put of a cached region; N regions of SIZE bytes, STRIDE apart (a gap, so neither
         cache merges them), requested in a random order (one fixed permutation, repeated).
   miss: get + put of N regions in a fresh cache (registration with a no-op op, table insert,
         region allocation); the lead adds ibv_reg_mr on the device.
   Each case runs --reps times, alternating rdmax and UCX; the median per operation is printed.

   Device cases (--device, or $RDMAX_TEST_DEV0 set; --device-only skips the cases above): the miss
   cost on a real device, for 4 KiB, 64 KiB and 1 MiB buffers, beside plain verbs:
   dev_miss_inval_rdmax_SIZE  rdmax_rcache_get of a new buffer (ibv_reg_mr inside) + rdmax_rcache_release +
                              rdmax_rcache_invalidate (ibv_dereg_mr inside), on the context's own cache
   dev_miss_evict_rdmax_SIZE  get + put on a cache limited to one region: each miss evicts (deregisters)
                              the previous buffer's region, then registers
   dev_regdereg_ibv_SIZE      ibv_reg_mr + ibv_dereg_mr of the same buffers, same access flags
   dev_miss_overhead_SIZE     dev_miss_inval_rdmax - dev_regdereg_ibv (ns the cache adds to a miss)
   dev_miss_ratio_SIZE        dev_miss_inval_rdmax / dev_regdereg_ibv
   dev_miss_inval_noop_SIZE   the dev_miss_inval loop on a cache whose reg/dereg ops do nothing: the
                              cache's own share of a miss on this machine (table nodes freed by the
                              invalidate and made again by the next miss, region slot, LRU)
   --dev-bufs distinct page-aligned buffers (a gap page apart, so nothing merges) are cycled through,
   --dev-reps repetitions alternate the three, the median per operation is printed. The device is
   $RDMAX_TEST_DEV0, else $RDMAX_DEVICE, else the first active one.

   Build (from the repository root):
     cc -O2 -g -I. bench/rcache_bench.c -lucs -libverbs -lnuma -lpthread -o rcache_bench
   Output: one line per case, `bench rcache case=NAME value=N unit=ns` (--format=csv|json too). */
#define _GNU_SOURCE
#define RDMAX_IMPLEMENTATION
#define RDMAX_TRANSPORT_RC
#ifndef RDMAX_IMPLEMENTATION
#define RDMAX_IMPLEMENTATION
#endif
#include "rdmax.h"

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucs/memory/rcache.h>

static size_t opt_regions = 10000, opt_size = 8192, opt_stride = 16384;
static long opt_ops = 2000000;
static int opt_reps = 11;
static int opt_device, opt_host = 1, opt_dev_reps = 9;
static size_t opt_dev_bufs = 64;
static const char *opt_format = "text";
static volatile uint64_t sink;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* ---- rdmax ---- */
static int rd_reg(void *arg, void *addr, size_t len, unsigned access, rdmax_rcache_region *r)
{
    (void)arg, (void)addr, (void)len, (void)access;
    r->lkey = r->rkey = 1;
    return 0;
}
static void rd_dereg(void *arg, rdmax_rcache_region *r) { (void)arg, (void)r; }

static rdmax_rcache *rd_create_mode(int ts, int mode)
{
    rdmax_rcache_desc d;
    rdmax_rcache *rc;
    memset(&d, 0, sizeof d);
    d.ops.reg = rd_reg;
    d.ops.dereg = rd_dereg;
    d.max_regions = opt_regions * 2;
    d.thread_safe = ts;
    d.mode = mode;
    if (rdmax_rcache_create(&d, &rc) != RDMAX_OK) {
        fprintf(stderr, "rdmax_rcache_create failed\n");
        exit(1);
    }
    return rc;
}

/* like ucs_rcache with ucm_events = 0: no invalidation */
static rdmax_rcache *rd_create(int ts) { return rd_create_mode(ts, RDMAX_RCACHE_MANUAL); }

static double rd_hits(rdmax_rcache *rc, char *const *addrs, long ops)
{
    double t0 = now_ns();
    uint64_t s = 0;
    long i;
    size_t k = 0;
    for (i = 0; i < ops; i++) {
        rdmax_rcache_region *r;
        if (rdmax_unlikely(rdmax_rcache_get(rc, addrs[k], opt_size, 3, &r) != RDMAX_OK)) abort();
        s += r->lkey;
        rdmax_rcache_release(rc, r);
        if (++k == opt_regions) k = 0;
    }
    sink += s;
    return (now_ns() - t0) / (double)ops;
}

static double rd_misses_mode(char *const *addrs, int mode)
{
    rdmax_rcache *rc = rd_create_mode(0, mode);
    rdmax_rcache_stats st;
    double t0 = now_ns(), t;
    size_t k;
    for (k = 0; k < opt_regions; k++) {
        rdmax_rcache_region *r;
        if (rdmax_rcache_get(rc, addrs[k], opt_size, 3, &r) != RDMAX_OK) abort();
        rdmax_rcache_release(rc, r);
    }
    t = (now_ns() - t0) / (double)opt_regions;
    rdmax_rcache_query_stats(rc, &st);
    if (st.misses != opt_regions || st.cached_regions != opt_regions) {
        fprintf(stderr, "rdmax miss run: %lu misses %lu regions\n", (unsigned long)st.misses, (unsigned long)st.cached_regions);
        exit(1);
    }
    rdmax_rcache_destroy(rc);
    return t;
}
static double rd_misses(char *const *addrs) { return rd_misses_mode(addrs, RDMAX_RCACHE_MANUAL); }

/* ---- the memory monitor (mode RDMAX_RCACHE_AUTO) ----
   mon_miss_newmap: a miss whose buffer lies in a mapping the monitor has not registered yet (it reads
   /proc/self/maps and registers the mapping with its userfaultfd) beside the same miss in MANUAL mode;
   munmap_*: what an munmap of a 64 KiB mapping costs the thread that calls it, timed around munmap
   alone: without rdmax (no registration: the same kernel path as a program that never linked rdmax),
   and after a region in it was cached (the kernel holds the caller until the monitor thread has read
   the event). */
#define MON_N 256
#define MON_LEN 65536
static char *mon_maps[MON_N];

static void mon_map_all(void)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < MON_N; i++) {
        /* a guard page after each: separate mappings, never merged with a neighbour */
        char *p = (char *)mmap(NULL, MON_LEN + ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            exit(1);
        }
        memset(p, 1, MON_LEN);
        mprotect(p + MON_LEN, ps, PROT_NONE);
        mon_maps[i] = p;
    }
}

static void mon_unmap_all(void)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    for (int i = 0; i < MON_N; i++) munmap(mon_maps[i], MON_LEN + ps);
}

static double mon_miss_newmap(int mode)
{
    rdmax_rcache *rc = rd_create_mode(0, mode);
    rdmax_rcache_stats st;
    double t0, t;
    mon_map_all();
    t0 = now_ns();
    for (int i = 0; i < MON_N; i++) {
        rdmax_rcache_region *r;
        if (rdmax_rcache_get(rc, mon_maps[i], 8192, 3, &r) != RDMAX_OK) abort();
        rdmax_rcache_release(rc, r);
    }
    t = (now_ns() - t0) / MON_N;
    rdmax_rcache_query_stats(rc, &st);
    if (st.uncached != 0 || st.cached_regions != MON_N) {
        fprintf(stderr, "monitor miss run: %lu uncached, %lu cached\n", (unsigned long)st.uncached,
                (unsigned long)st.cached_regions);
        exit(1);
    }
    rdmax_rcache_destroy(rc);
    mon_unmap_all();
    return t;
}

/* cached: 1 to cache a region in each mapping (AUTO) first */
static double mon_munmap(int cached)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    rdmax_rcache *rc = cached ? rd_create_mode(0, RDMAX_RCACHE_AUTO) : NULL;
    double t = 0;
    mon_map_all();
    for (int i = 0; i < MON_N && rc; i++) {
        rdmax_rcache_region *r;
        if (rdmax_rcache_get(rc, mon_maps[i], 8192, 3, &r) != RDMAX_OK) abort();
        rdmax_rcache_release(rc, r);
    }
    for (int i = 0; i < MON_N; i++) {
        double t0 = now_ns();
        munmap(mon_maps[i], MON_LEN + ps);
        t += now_ns() - t0;
    }
    if (rc) {
        rdmax_rcache_stats st;
        rdmax_rcache_drain(rc);
        rdmax_rcache_query_stats(rc, &st);
        if (st.invalidations != MON_N) {
            fprintf(stderr, "munmap run: %lu invalidations for %d unmaps\n", (unsigned long)st.invalidations, MON_N);
            exit(1);
        }
        rdmax_rcache_destroy(rc);
    }
    return t / MON_N;
}

static void out(const char *cas, double v, const char *unit);

static void monitor_cases(void)
{
    rdmax_rcache_monitor_info mi;
    double *a = (double *)calloc((size_t)opt_reps, sizeof(double)), *b = (double *)calloc((size_t)opt_reps, sizeof(double));
    double *c = (double *)calloc((size_t)opt_reps, sizeof(double)), *d = (double *)calloc((size_t)opt_reps, sizeof(double));
    rdmax_rcache_query_monitor(&mi);
    if (!mi.usable) {
        fprintf(stderr, "no memory monitor here (%s): monitor cases skipped\n", mi.why);
        return;
    }
    /* the plain munmaps first, before the monitor thread exists */
    for (int i = 0; i < opt_reps; i++) a[i] = mon_munmap(0);
    for (int i = 0; i < opt_reps; i++) {
        b[i] = mon_munmap(1);
        c[i] = mon_miss_newmap(RDMAX_RCACHE_AUTO);
        d[i] = mon_miss_newmap(RDMAX_RCACHE_MANUAL);
    }
    out("munmap_plain", median(a, opt_reps), "ns");
    out("munmap_cached_monitor", median(b, opt_reps), "ns");
    out("miss_newmap_monitor", median(c, opt_reps), "ns");
    out("miss_newmap_manual", median(d, opt_reps), "ns");
    free(a), free(b), free(c), free(d);
}

/* ---- UCX ---- */
static ucs_status_t ucx_reg(void *ctx, ucs_rcache_t *rc, void *arg, ucs_rcache_region_t *r, uint16_t flags)
{
    (void)ctx, (void)rc, (void)arg, (void)r, (void)flags;
    return UCS_OK;
}
static void ucx_dereg(void *ctx, ucs_rcache_t *rc, ucs_rcache_region_t *r) { (void)ctx, (void)rc, (void)r; }
static void ucx_dump(void *ctx, ucs_rcache_t *rc, ucs_rcache_region_t *r, char *buf, size_t max)
{
    (void)ctx, (void)rc, (void)r;
    if (max) buf[0] = 0;
}
static ucs_rcache_ops_t ucx_ops = {ucx_reg, ucx_dereg, ucx_dump};

static ucs_rcache_t *ucx_create(void)
{
    ucs_rcache_params_t p;
    ucs_rcache_t *rc;
    memset(&p, 0, sizeof p);
    p.region_struct_size = sizeof(ucs_rcache_region_t);
    p.alignment = UCS_RCACHE_MIN_ALIGNMENT;
    p.max_alignment = (size_t)sysconf(_SC_PAGESIZE);
    p.ucm_events = 0; /* no memory hooks */
    p.ucm_event_priority = 1000;
    p.ops = &ucx_ops;
    p.context = NULL;
    p.flags = 0;
    p.max_regions = ULONG_MAX;
    p.max_size = SIZE_MAX;
    p.max_unreleased = SIZE_MAX;
    if (ucs_rcache_create(&p, "bench", NULL, &rc) != UCS_OK) {
        fprintf(stderr, "ucs_rcache_create failed\n");
        exit(1);
    }
    return rc;
}

static double ucx_hits(ucs_rcache_t *rc, char *const *addrs, long ops)
{
    double t0 = now_ns();
    uint64_t s = 0;
    long i;
    size_t k = 0;
    for (i = 0; i < ops; i++) {
        ucs_rcache_region_t *r;
        if (ucs_unlikely(ucs_rcache_get(rc, addrs[k], opt_size, PROT_READ | PROT_WRITE, NULL, &r) != UCS_OK)) abort();
        s += r->prot;
        ucs_rcache_region_put(rc, r);
        if (++k == opt_regions) k = 0;
    }
    sink += s;
    return (now_ns() - t0) / (double)ops;
}

static double ucx_misses(char *const *addrs)
{
    ucs_rcache_t *rc = ucx_create();
    double t0 = now_ns(), t;
    size_t k;
    for (k = 0; k < opt_regions; k++) {
        ucs_rcache_region_t *r;
        if (ucs_rcache_get(rc, addrs[k], opt_size, PROT_READ | PROT_WRITE, NULL, &r) != UCS_OK) abort();
        ucs_rcache_region_put(rc, r);
    }
    t = (now_ns() - t0) / (double)opt_regions;
    ucs_rcache_destroy(rc);
    return t;
}

/* ---- output ---- */
static int nout;
static void out(const char *cas, double v, const char *unit)
{
    if (!strcmp(opt_format, "csv")) {
        if (nout++ == 0) printf("bench,case,value,unit\n");
        printf("rcache,%s,%.2f,%s\n", cas, v, unit);
    } else if (!strcmp(opt_format, "json")) {
        printf("%s{\"bench\":\"rcache\",\"case\":\"%s\",\"value\":%.2f,\"unit\":\"%s\"}", nout++ ? ",\n " : "[", cas, v, unit);
    } else {
        printf("bench rcache case=%s value=%.2f unit=%s\n", cas, v, unit);
    }
}

/* ---- device: the miss cost with real registrations ---- */
static rdmax_ctx *dev_open(uint32_t max_regions)
{
    rdmax_ctx_desc d;
    rdmax_ctx *ctx;
    rdmax_status st;
    memset(&d, 0, sizeof d);
    d.device = getenv("RDMAX_TEST_DEV0"); /* NULL: $RDMAX_DEVICE, else the first active device */
    if (d.device && !*d.device) d.device = NULL;
    d.rcache_max_regions = max_regions;
    if ((st = rdmax_ctx_create(&d, &ctx)) != RDMAX_OK) {
        fprintf(stderr, "rdmax_ctx_create: %s\n", rdmax_status_str(st));
        exit(1);
    }
    /* the cache a context makes at its first raw buffer, made now */
    if ((st = rdmax__rcache_open(ctx)) != RDMAX_OK || !rdmax_ctx_query_rcache(ctx)) {
        fprintf(stderr, "rdmax__rcache_open: %s\n", rdmax_status_str(st));
        exit(1);
    }
    return ctx;
}

static void dev_check(const char *what, int cond, const rdmax_rcache_stats *a, const rdmax_rcache_stats *b)
{
    if (cond) return;
    fprintf(stderr, "%s: unexpected cache counters: misses %+lld hits %+lld reg %+lld dereg %+lld evictions %+lld "
            "failures %+lld\n", what, (long long)(b->misses - a->misses), (long long)(b->hits - a->hits),
            (long long)(b->reg_calls - a->reg_calls), (long long)(b->dereg_calls - a->dereg_calls),
            (long long)(b->evictions - a->evictions), (long long)(b->reg_failures - a->reg_failures));
    exit(1);
}

/* get (a miss: registers) + put + invalidate (deregisters), per buffer */
static double dev_miss_inval(rdmax_rcache *rc, char *const *bufs, size_t n, size_t size)
{
    rdmax_rcache_stats a, b;
    double t0, t;
    size_t k;
    rdmax_rcache_query_stats(rc, &a);
    t0 = now_ns();
    for (k = 0; k < n; k++) {
        rdmax_rcache_region *r;
        if (rdmax_rcache_get(rc, bufs[k], size, RDMAX_ACCESS_LOCAL, &r) != RDMAX_OK) abort();
        sink += r->lkey;
        rdmax_rcache_release(rc, r);
        if (rdmax_rcache_invalidate(rc, bufs[k], size) != 1) abort();
    }
    t = (now_ns() - t0) / (double)n;
    rdmax_rcache_query_stats(rc, &b);
    dev_check("miss+invalidate", b.misses - a.misses == n && b.hits == a.hits && b.reg_calls - a.reg_calls == n &&
              b.dereg_calls - a.dereg_calls == n && b.regions == 0, &a, &b);
    return t;
}

/* get (a miss: evicts the previous region, registers) + put, on a cache limited to one region */
static double dev_miss_evict(rdmax_rcache *rc, char *const *bufs, size_t n, size_t size)
{
    rdmax_rcache_stats a, b;
    double t0, t;
    size_t k;
    rdmax_rcache_query_stats(rc, &a);
    t0 = now_ns();
    for (k = 0; k < n; k++) {
        rdmax_rcache_region *r;
        if (rdmax_rcache_get(rc, bufs[k], size, RDMAX_ACCESS_LOCAL, &r) != RDMAX_OK) abort();
        sink += r->lkey;
        rdmax_rcache_release(rc, r);
    }
    t = (now_ns() - t0) / (double)n;
    rdmax_rcache_query_stats(rc, &b);
    /* every get a miss; every one evicted the region before it (the first only if one was left) */
    dev_check("miss+evict", b.misses - a.misses == n && b.hits == a.hits && b.evictions - a.evictions >= n - 1 &&
              b.dereg_calls - a.dereg_calls == b.evictions - a.evictions && b.regions == 1, &a, &b);
    return t;
}

static double dev_ibv(struct ibv_pd *pd, char *const *bufs, size_t n, size_t size)
{
    double t0 = now_ns();
    size_t k;
    for (k = 0; k < n; k++) {
        struct ibv_mr *mr = ibv_reg_mr(pd, bufs[k], size, IBV_ACCESS_LOCAL_WRITE); /* what the cache asks */
        if (!mr) {
            perror("ibv_reg_mr");
            exit(1);
        }
        sink += mr->lkey;
        if (ibv_dereg_mr(mr)) {
            perror("ibv_dereg_mr");
            exit(1);
        }
    }
    return (now_ns() - t0) / (double)n;
}

static void out(const char *cas, double v, const char *unit);

static void device_cases(void)
{
    static const size_t sizes[] = {4096, 65536, 1u << 20};
    rdmax_ctx *ci = dev_open(0), *ce = dev_open(1);
    rdmax_rcache *rci = rdmax_ctx_query_rcache(ci), *rce = rdmax_ctx_query_rcache(ce), *rcn = rd_create(0);
    size_t ps = (size_t)sysconf(_SC_PAGESIZE), si, k, n = opt_dev_bufs;
    double *ti = (double *)calloc((size_t)opt_dev_reps, sizeof(double));
    double *te = (double *)calloc((size_t)opt_dev_reps, sizeof(double));
    double *tv = (double *)calloc((size_t)opt_dev_reps, sizeof(double));
    double *tn = (double *)calloc((size_t)opt_dev_reps, sizeof(double));
    char **bufs = (char **)calloc(n, sizeof(char *));
    fprintf(stderr, "device %s: %zu buffers per size, %d repetitions\n", rdmax_ctx_query_attr(ci)->name, n, opt_dev_reps);
    for (si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t size = sizes[si], stride = size + ps, span = n * stride;
        char name[64], *area;
        int i;
        double mi, me, mv;
        area = (char *)mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (area == MAP_FAILED) {
            perror("mmap");
            exit(1);
        }
        memset(area, 1, span); /* faulted in: registration pins, it does not fault */
        for (k = 0; k < n; k++) bufs[k] = area + k * stride;
        /* warm-up: one untimed round of each */
        dev_miss_inval(rci, bufs, n, size);
        dev_miss_evict(rce, bufs, n, size);
        dev_ibv(ci->pd, bufs, n, size);
        dev_miss_inval(rcn, bufs, n, size);
        for (i = 0; i < opt_dev_reps; i++) {
            ti[i] = dev_miss_inval(rci, bufs, n, size);
            te[i] = dev_miss_evict(rce, bufs, n, size);
            tv[i] = dev_ibv(ci->pd, bufs, n, size);
            tn[i] = dev_miss_inval(rcn, bufs, n, size);
        }
        mi = median(ti, opt_dev_reps);
        me = median(te, opt_dev_reps);
        mv = median(tv, opt_dev_reps);
        snprintf(name, sizeof name, "dev_miss_inval_rdmax_%zu", size);
        out(name, mi, "ns");
        snprintf(name, sizeof name, "dev_miss_evict_rdmax_%zu", size);
        out(name, me, "ns");
        snprintf(name, sizeof name, "dev_regdereg_ibv_%zu", size);
        out(name, mv, "ns");
        snprintf(name, sizeof name, "dev_miss_overhead_%zu", size);
        out(name, mi - mv, "ns");
        snprintf(name, sizeof name, "dev_miss_ratio_%zu", size);
        out(name, mi / mv, "x");
        snprintf(name, sizeof name, "dev_miss_inval_noop_%zu", size);
        out(name, median(tn, opt_dev_reps), "ns");
        rdmax_rcache_invalidate(rce, area, span); /* drop the last region before its memory goes */
        munmap(area, span);
    }
    free(bufs);
    free(ti), free(te), free(tv), free(tn);
    rdmax_rcache_destroy(rcn);
    rdmax_ctx_destroy(ce);
    rdmax_ctx_destroy(ci);
}

static void usage(const char *argv0)
{
    printf("usage: %s [options]\n"
           "  --regions=N   cached regions (default 10000)\n"
           "  --size=B      bytes per region (default 8192)\n"
           "  --stride=B    distance between regions (default 16384; > size keeps them apart)\n"
           "  --ops=N       get+put pairs per hit repetition (default 2000000)\n"
           "  --reps=N      repetitions, median reported (default 11)\n"
           "  --format=F    text, csv or json (default text)\n"
           "  --device      also the device cases (default when $RDMAX_TEST_DEV0 is set)\n"
           "  --device-only only the device cases\n"
           "  --dev-bufs=N  distinct buffers per size in the device cases (default 64)\n"
           "  --dev-reps=N  repetitions of the device cases, median reported (default 9)\n",
           argv0);
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"regions", 1, 0, 'n'}, {"size", 1, 0, 's'}, {"stride", 1, 0, 't'},
                                       {"ops", 1, 0, 'o'},     {"reps", 1, 0, 'r'}, {"format", 1, 0, 'f'},
                                       {"help", 0, 0, 'h'},    {"device", 0, 0, 'D'},
                                       {"device-only", 0, 0, 'O'}, {"dev-bufs", 1, 0, 'B'},
                                       {"dev-reps", 1, 0, 'R'}, {0, 0, 0, 0}};
    int c, i;
    char *base, **addrs;
    size_t k, span;
    double *h_rd, *h_ucx, *h_ts, *m_rd, *m_ucx, *h_mon, *m_mon, hr, hu, mr, mu;
    rdmax_rcache *rd, *rdts, *rdmon = NULL;
    ucs_rcache_t *ux;
    uint64_t seed = 12345;
    const char *dev_env = getenv("RDMAX_TEST_DEV0");
    if (dev_env && *dev_env) opt_device = 1;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'n': opt_regions = strtoul(optarg, NULL, 0); break;
        case 's': opt_size = strtoul(optarg, NULL, 0); break;
        case 't': opt_stride = strtoul(optarg, NULL, 0); break;
        case 'o': opt_ops = strtol(optarg, NULL, 0); break;
        case 'r': opt_reps = atoi(optarg); break;
        case 'f': opt_format = optarg; break;
        case 'D': opt_device = 1; break;
        case 'O': opt_device = 1, opt_host = 0; break;
        case 'B': opt_dev_bufs = strtoul(optarg, NULL, 0); break;
        case 'R': opt_dev_reps = atoi(optarg); break;
        case 'h': usage(argv[0]); return 0;
        default: usage(argv[0]); return 2;
        }
    }
    if (opt_regions == 0 || opt_size == 0 || opt_stride < opt_size || opt_ops <= 0 || opt_reps <= 0 ||
        opt_dev_bufs == 0 || opt_dev_reps <= 0 ||
        (strcmp(opt_format, "text") && strcmp(opt_format, "csv") && strcmp(opt_format, "json"))) {
        fprintf(stderr, "bad options (stride must be >= size; format text|csv|json)\n");
        usage(argv[0]);
        return 2;
    }
    if (!opt_host) {
        device_cases();
        if (!strcmp(opt_format, "json")) printf("]\n");
        return 0;
    }
    span = opt_regions * opt_stride;
    /* address space only: the no-op ops never touch the pages */
    base = (char *)mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    addrs = (char **)malloc(opt_regions * sizeof(char *));
    for (k = 0; k < opt_regions; k++) addrs[k] = base + k * opt_stride;
    for (k = opt_regions - 1; k > 0; k--) { /* Fisher-Yates with an LCG: same order for both */
        size_t j;
        char *t;
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        j = (size_t)((seed >> 33) % (k + 1));
        t = addrs[k], addrs[k] = addrs[j], addrs[j] = t;
    }
    h_rd = (double *)calloc((size_t)opt_reps, sizeof(double));
    h_ucx = (double *)calloc((size_t)opt_reps, sizeof(double));
    h_ts = (double *)calloc((size_t)opt_reps, sizeof(double));
    m_rd = (double *)calloc((size_t)opt_reps, sizeof(double));
    m_ucx = (double *)calloc((size_t)opt_reps, sizeof(double));
    h_mon = (double *)calloc((size_t)opt_reps, sizeof(double));
    m_mon = (double *)calloc((size_t)opt_reps, sizeof(double));

    monitor_cases(); /* first: its plain munmaps run before the monitor thread exists */
    rd = rd_create(0);
    rdts = rd_create(1);
    ux = ucx_create();
    /* populate (one miss each), then one warm-up pass */
    rd_hits(rd, addrs, (long)opt_regions);
    rd_hits(rdts, addrs, (long)opt_regions);
    ucx_hits(ux, addrs, (long)opt_regions);
    rd_hits(rd, addrs, (long)opt_regions);
    ucx_hits(ux, addrs, (long)opt_regions);
    {
        /* the same regions in a cache with the monitor on: they lie in one private mapping, which the
           monitor registers at the first miss */
        rdmax_rcache_monitor_info mi;
        rdmax_rcache_query_monitor(&mi);
        if (mi.usable) {
            rdmax_rcache_stats st;
            rdmon = rd_create_mode(0, RDMAX_RCACHE_AUTO);
            rd_hits(rdmon, addrs, (long)opt_regions);
            rdmax_rcache_query_stats(rdmon, &st);
            if (st.cached_regions != opt_regions) {
                fprintf(stderr, "monitor cache holds %lu regions (%lu uncached)\n", (unsigned long)st.cached_regions,
                        (unsigned long)st.uncached);
                return 1;
            }
        }
    }
    {
        rdmax_rcache_stats st;
        rdmax_rcache_query_stats(rd, &st);
        if (st.cached_regions != opt_regions) {
            fprintf(stderr, "rdmax holds %lu regions, expected %zu\n", (unsigned long)st.cached_regions, opt_regions);
            return 1;
        }
    }
    for (i = 0; i < opt_reps; i++) {
        h_rd[i] = rd_hits(rd, addrs, opt_ops);
        h_ucx[i] = ucx_hits(ux, addrs, opt_ops);
        h_ts[i] = rd_hits(rdts, addrs, opt_ops);
        m_rd[i] = rd_misses(addrs);
        m_ucx[i] = ucx_misses(addrs);
        if (rdmon) {
            h_mon[i] = rd_hits(rdmon, addrs, opt_ops);
            m_mon[i] = rd_misses_mode(addrs, RDMAX_RCACHE_AUTO);
        }
    }
    hr = median(h_rd, opt_reps);
    hu = median(h_ucx, opt_reps);
    mr = median(m_rd, opt_reps);
    mu = median(m_ucx, opt_reps);
    out("hit_rdmax", hr, "ns");
    out("hit_ucx", hu, "ns");
    out("hit_ratio", hr / hu, "x");
    out("hit_rdmax_thread_safe", median(h_ts, opt_reps), "ns");
    out("miss_rdmax", mr, "ns");
    out("miss_ucx", mu, "ns");
    out("miss_ratio", mr / mu, "x");
    if (rdmon) {
        out("hit_rdmax_monitor", median(h_mon, opt_reps), "ns");
        out("miss_rdmax_monitor", median(m_mon, opt_reps), "ns");
        rdmax_rcache_destroy(rdmon);
    }
    if (opt_device) device_cases();
    if (!strcmp(opt_format, "json")) printf("]\n");
    rdmax_rcache_destroy(rd);
    rdmax_rcache_destroy(rdts);
    ucs_rcache_destroy(ux);
    munmap(base, span);
    free(addrs);
    free(h_rd), free(h_ucx), free(h_ts), free(m_rd), free(m_ucx), free(h_mon), free(m_mon);
    return 0;
}
