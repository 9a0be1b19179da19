/* The one test harness of rdmax's tests: each case prints "PASS name" or "FAIL name: why" on its own
   line, which tests/run_all.sh counts; the program exits non-zero if any case failed.
     tl_begin("fmt", ...) ... tl_end()     a case; CHECK records a failure and goes on, REQUIRE records it
                                           and jumps to the function's `out:` label (cleanup)
     tl_run("name", fn)                    a case in a function of its own; ASSERT records a failure and
                                           abandons the case at once (longjmp), for code that would crash
                                           or loop on corrupted state after a failed check
     tl_where                              extra context for failure messages (a seed and step to replay)
     tl_pair(...)                          the two-endpoint fixture (when rdmax.h is included first)
     tl_count_alloc, tl_count_free         a context allocator that counts the endpoints made (tl_ep_allocs)
     tl_hw_counter, tl_rnr_count           a device port's counters (hw_counters in sysfs, rxe's names)
     tl_count_fds                          this process's open file descriptors
     tl_rss_kb, tl_count_rdma              its resident set, its QPs or MRs (rdma resource show)
     tl_hello_client                       a client process's connect, hello and exit (listener tests)
   Return tl_failed_total ? 1 : 0 from main. */
#ifndef RDMAX_TESTLIB_H
#define RDMAX_TESTLIB_H
#include <dirent.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>
#include <unistd.h>

static int tl_failed_total, tl_case_failed;
static char tl_case[160];
static char tl_where[160];     /* appended to failure messages; cleared by tl_begin */
static jmp_buf *tl_jmp;        /* set while tl_run runs a case: where ASSERT jumps */

static void tl_begin(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_case, sizeof tl_case, fmt, ap);
    va_end(ap);
    tl_case_failed = 0;
    tl_where[0] = 0;
}

static void tl_fail(const char *file, int line, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!tl_case_failed)
        printf("FAIL %s: %s (%s:%d%s)\n", tl_case, msg, file, line, tl_where);
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

/* tl_run: run fn as the case `name`; an ASSERT in it ends the case there. */
static inline int tl_run(const char *name, void (*fn)(void))
{
    jmp_buf here;
    tl_begin("%s", name);
    tl_jmp = &here;
    if (setjmp(here) == 0)
        fn();
    tl_jmp = NULL;
    return tl_end();
}

/* ASSERT outside tl_run: nothing to jump to, so the program stops (its case reported as failed). */
static inline void tl_abandon(void)
{
    if (tl_jmp)
        longjmp(*tl_jmp, 1);
    tl_end();
    exit(1);
}

#define CHECK(c, ...) do { if (!(c)) { tl_fail(__FILE__, __LINE__, __VA_ARGS__); } } while (0)
#define ASSERT(c, ...) do { if (!(c)) { tl_fail(__FILE__, __LINE__, __VA_ARGS__); tl_abandon(); } } while (0)
#define REQUIRE(c, ...) do { if (!(c)) { tl_fail(__FILE__, __LINE__, __VA_ARGS__); goto out; } } while (0)
#define CHECK_ST(st, want) CHECK((st) == (want), "status %d (%s), expected %d (%s)", (int)(st), \
                                 rdmax_status_str((rdmax_status)(st)), (int)(want), rdmax_status_str(want))

/* tl_count_fds: the entries of /proc/self/fd (this process's fds, and the directory's own while it is
   read); -1 when it cannot be read. */
static inline int tl_count_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

/* tl_rss_kb: this process's resident set (VmRSS), in KiB; -1 when it cannot be read. */
static inline long tl_rss_kb(void)
{
    long kb = -1;
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        sscanf(line, "VmRSS: %ld", &kb);
    if (f)
        fclose(f);
    return kb;
}

/* tl_count_rdma: this process's verbs objects of one kind ("qp", "mr") on every device: the lines of
   `rdma resource show KIND` that name our pid; -1 when the tool cannot be run. */
static inline int tl_count_rdma(const char *kind)
{
    char cmd[64], line[512], me[32];
    snprintf(cmd, sizeof cmd, "rdma resource show %s 2>/dev/null", kind);
    snprintf(me, sizeof me, " pid %d ", (int)getpid());
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, me) != NULL;
    return pclose(f) == 0 ? n : -1;
}

#ifdef RDMAX_H_INCLUDED
/* tl_footprint: what a process holds that a flood or a dead peer must not leave behind: QPs, MRs and RSS
   apart from the receive pool of c (its chunks, one MR each, stay by design: >>srq). */
struct tl_footprint {
    int qps, mrs;
    long rss_kb;
};
static inline struct tl_footprint tl_footprint(rdmax_ctx *c)
{
    struct tl_footprint f = {tl_count_rdma("qp"), tl_count_rdma("mr"), tl_rss_kb()};
    rdmax_recv_pool_info pi;
    if (rdmax_ctx_query_recv_pool(c, 0, &pi)) {
        f.mrs -= (int)pi.chunks;
        f.rss_kb -= (long)((uint64_t)pi.buffers * pi.recv_size / 1024);
    }
    return f;
}
/* tl_footprint_back: CHECKs that f is back at f0 (RSS within slack_kb: the allocator keeps freed memory)
   and prints both. Built with ASan the RSS is printed, not checked: its quarantine keeps freed memory
   resident, more of it the more a loaded host makes clients retry (a flood once ended 12 MiB up), and
   LeakSanitizer reports what is not freed; the plain build checks it. */
#if defined(__SANITIZE_ADDRESS__)
#define TL_RSS_CHECKED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TL_RSS_CHECKED 0
#endif
#endif
#ifndef TL_RSS_CHECKED
#define TL_RSS_CHECKED 1
#endif
#define tl_footprint_back(f0, f, slack_kb)                                                                     \
    do {                                                                                                        \
        printf("    QPs %d, MRs %d, RSS %ld KiB (before: %d, %d, %ld KiB; receive pool apart%s)\n", (f).qps,   \
               (f).mrs, (f).rss_kb, (f0).qps, (f0).mrs, (f0).rss_kb, TL_RSS_CHECKED ? "" : "; ASan: not checked"); \
        CHECK((f).qps == (f0).qps && (f).qps >= 0, "QPs %d, %d before", (f).qps, (f0).qps);                     \
        CHECK((f).mrs == (f0).mrs && (f).mrs >= 0, "MRs %d, %d before", (f).mrs, (f0).mrs);                     \
        CHECK(!TL_RSS_CHECKED || (f).rss_kb - (f0).rss_kb <= (slack_kb), "RSS %ld KiB, %ld before", (f).rss_kb, \
              (f0).rss_kb);                                                                                     \
    } while (0)

/* tl_hello_client: the rest of a client process's life once its context c is made: connect to host:port
   (within timeout_ms), send a 16-byte "hello", flush it, and _exit: 0 when served, the negated status
   when the connect failed (RDMAX_ERR_OOB_AUTH: 52), 4 when the send or the flush did. */
static inline void tl_hello_client(rdmax_ctx *c, const char *host, uint16_t port, int timeout_ms)
{
    rdmax_ep *e;
    rdmax_status st = rdmax_connect(c, host, port, NULL, &e, timeout_ms);
    if (st != RDMAX_OK)
        _exit(-st);
    char msg[16] = "hello";
    if (rdmax_send(e, msg, sizeof msg, NULL, NULL) != RDMAX_OK || rdmax_ep_flush(e, 5000) != RDMAX_OK)
        _exit(4);
    rdmax_ctx_destroy(c);
    _exit(0);
}

/* tl_pair: two endpoints connected to each other, on one context or two (ca, cb: loopback or across
   devices). One context and one desc: rdmax_ep_create_pair. Two contexts or two descs (which
   rdmax_ep_create_pair does not take): each created, then their records traded through the public
   record exchange (rdmax_ep_query_record, rdmax_ep_connect_record; no TCP). da/db may be NULL. On
   failure nothing is left: both are destroyed and *a, *b are NULL. */
static inline rdmax_status tl_pair(rdmax_ctx *ca, rdmax_ctx *cb, const rdmax_ep_desc *da, const rdmax_ep_desc *db,
                                   rdmax_ep **a, rdmax_ep **b)
{
    if (ca == cb && da == db)
        return rdmax_ep_create_pair(ca, da, a, b);
    rdmax_conn_record ia, ib;
    *a = *b = NULL;
    rdmax_status st = rdmax_ep_create(ca, da, a);
    if (st == RDMAX_OK)
        st = rdmax_ep_create(cb, db, b);
    if (st == RDMAX_OK) {
        rdmax_ep_query_record(*a, &ia);
        rdmax_ep_query_record(*b, &ib);
        st = rdmax_ep_connect_record(*a, &ib);
        if (st == RDMAX_OK)
            st = rdmax_ep_connect_record(*b, &ia);
    }
    if (st != RDMAX_OK) {
        rdmax_ep_destroy(*a);
        rdmax_ep_destroy(*b);
        *a = *b = NULL;
    }
    return st;
}
/* tl_count_alloc, tl_count_free: a context's allocator (rdmax_ctx_desc.allocator) that counts the
   endpoints it makes: tl_ep_allocs grows by one for each rdmax_ep struct allocated (each QP made). */
static int tl_ep_allocs;
static inline void *tl_count_alloc(size_t size, void *user)
{
    (void)user;
    tl_ep_allocs += size == sizeof(rdmax_ep);
    return malloc(size);
}
static inline void tl_count_free(void *p, void *user)
{
    (void)user;
    free(p);
}

/* tl_prof: a profile variable of ctx now, read through a profile object of its own; UINT64_MAX if
   unreadable. (The object is allocated through the context's allocator: read after taking allocation
   deltas.) tl_pool: the shared receive pool of recv_size on ctx (0: the context's); all zero when ctx
   has none. */
static inline uint64_t tl_prof(rdmax_ctx *ctx, uint32_t id)
{
    rdmax_profile *p = NULL;
    uint64_t v = UINT64_MAX;
    if (rdmax_profile_create(ctx, &p) != RDMAX_OK)
        return UINT64_MAX;
    if (rdmax_profile_read_u64(p, id, &v) != RDMAX_OK)
        v = UINT64_MAX;
    rdmax_profile_destroy(p);
    return v;
}

static inline rdmax_recv_pool_info tl_pool(const rdmax_ctx *ctx, uint32_t recv_size)
{
    rdmax_recv_pool_info pi;
    rdmax_ctx_query_recv_pool(ctx, recv_size, &pi);
    return pi;
}

/* tl_hw_counter: the counter `name` of device dev's port 1 (/sys/class/infiniband/DEV/ports/1/hw_counters),
   0 if it has none. tl_rnr_count: RNR as the device counts it: any of these moving means a sender met an
   empty receive queue. */
static inline uint64_t tl_hw_counter(const char *dev, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/1/hw_counters/%s", dev, name);
    FILE *f = fopen(path, "r");
    unsigned long long v = 0;
    if (f) {
        if (fscanf(f, "%llu", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}
static inline uint64_t tl_rnr_count(const char *dev)
{
    return tl_hw_counter(dev, "rcvd_rnr_err") + tl_hw_counter(dev, "send_rnr_err") +
           tl_hw_counter(dev, "retry_rnr_exceeded_err");
}
#endif
#endif
