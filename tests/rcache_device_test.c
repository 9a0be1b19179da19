/* The registration cache on a real device (rxe in the test VM): buffers passed to rdmax_put/send/get
   without an rdmax_mem get their registration from the context's rcache, and every case below changes
   the memory under a cached registration in one of the ways a program does (free + malloc, munmap +
   mmap, MAP_FIXED, mremap, madvise, fork, explicit invalidate) and then checks, at the receiver, that
   the bytes that arrived are the bytes the program wrote last. A stale registration shows up as the
   old bytes arriving. Cache counters are checked too, so a case that passes by luck (e.g. a miss where
   a hit was expected, or the reverse) is reported.

   Usage: rcache_device_test [routes] ($RDMAX_TEST_DEV0; the receiver uses $RDMAX_TEST_DEV1 when set;
                                       `routes`: only the route table below)
   Builds: rcache_device_test (the default: the userfaultfd monitor), rcache_device_static_test (the
   same, linked -static), rcache_device_hooks_test (-DRDMAX_MEMHOOKS -DRDMAX_MALLOPT, run with
   RDMAX_RCACHE_MONITOR=off: the opt-in hooks alone); tests/guest.sh also runs the default build with
   RDMAX_RCACHE_MONITOR=off (no monitor: every raw buffer registered per operation, still correct).
   Build: cc -O2 -g -std=c11 -pedantic -Wall -Wextra -Werror -I. -o build-rc/rcache_device_test \
              tests/rcache_device_test.c -libverbs -lnuma -lm -lpthread

   route/NAME   the route table (see case_routes and the manual): free + malloc (16 KiB, 1 MiB, 64 MiB),
                munmap + mmap MAP_FIXED, MAP_FIXED over, mremap grow/shrink/move, madvise DONTNEED and FREE,
                shmdt + shmat, syscall(SYS_munmap/SYS_mmap), munmap by another thread, a file mapping
                replaced by another file's, a memfd truncated or punched; each with its control on a
                sender in mode RDMAX_RCACHE_MANUAL (the default build), where the stale bytes arrive.
                Then shmat(SHM_REMAP) over a cached range, with and without rdmax_rcache_invalidate
                first, followed by shmdt, munmap and a fresh mmap there (case_shm_remap).
   Cases (the numbers):
     rcache_disable     6. raw buffer above max_inline refused with RDMAX_ERR_NO_MEMH, nothing posted
     first_use          1b. a buffer malloc'd before the context's first raw buffer (so before the
                        malloc policy), freed, its range reused by a glibc-internal mapping
     free_malloc        1. free + malloc at the same address, under the malloc policy: a correct hit
     munmap_mmap_fixed, mmap_fixed_replace, mremap, madvise_dontneed
                        2. new pages under a cached registration: invalidated, a miss, new data
     invalidate         5. rdmax_rcache_invalidate, also with a put in flight
     get_raw            rdmax_get into a malloc'd buffer without an rdmax_mem
     put_readonly       a raw put from PROT_READ memory and from .rodata
     fork               4. child touches registered buffers; parent's new data arrives afterwards
     thread_arena       1c. a heap of a thread arena made before the policy, unmapped and remapped
                        inside glibc
     eviction           3. rcache_max_regions = 4 with 18 puts in flight
     batch_fail         the request that fills a batch, when the chain's post fails
   first_use, thread_arena, put_readonly and batch_fail fail on rdmax 0.1.0 as it is: they show
   library bugs (stale data sent; read-only sources refused; a reference dropped twice), not test
   problems.

   Order matters: the malloc policy (>>rcache) is process-wide and applied when the first cache is
   created, so the cases that need the process *before* the policy run first. */
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#include "../rdmax.h"
#include "testlib.h"

#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024u * 1024u)
#define BIG (8u * MIB)          /* the free/malloc, munmap, mremap and madvise buffers */
#define WAIT_S 60               /* rxe under TCG is slow: generous */

static int g_errlogs, g_nomon_logs;
static char g_lastlog[512];

static void count_log(rdmax_log_level lvl, rdmax_log_item item, const char *msg, void *user)
{
    (void)user;
    if (lvl <= RDMAX_LOG_WARN) {
        if (lvl == RDMAX_LOG_ERROR)
            g_errlogs++;
        if (item == RDMAX_LOG_ITEM_RCACHE_MONITOR)  /* at warn level: there is no monitor */
            g_nomon_logs++;
        snprintf(g_lastlog, sizeof g_lastlog, "%s", msg);
        printf("# log: %s\n", msg);
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- a sender context (the cache under test) and a receiver context, one connected pair ---- */
typedef struct rig {
    rdmax_ctx *cs, *cr;   /* sender: its rcache is what the cases exercise; receiver */
    rdmax_ep *a, *b;      /* a on cs sends to b on cr */
    rdmax_mem *dst;       /* the receiver's region: puts land here, gets read from here */
    unsigned char *d;     /* dst->addr */
    uint64_t raddr;
    uint32_t rkey;
} rig;

static rdmax_ctx *open_ctx(const char *dev, const rdmax_ctx_desc *base)
{
    rdmax_ctx_desc d;
    if (base)
        d = *base;
    else
        memset(&d, 0, sizeof d);
    d.device = dev;
    d.logger.func = count_log;
    d.log_level = RDMAX_LOG_WARN;
    d.log_level_set = true;
    rdmax_ctx *c = NULL;
    rdmax_status st = rdmax_ctx_create(&d, &c);
    if (st != RDMAX_OK) {
        printf("FAIL setup: cannot open device %s: %s (%s)\n", dev ? dev : "(default)", rdmax_status_str(st),
               g_lastlog);
        exit(1);
    }
    return c;
}

static void rig_close(rig *r)
{
    if (r->a)
        rdmax_ep_destroy(r->a);
    if (r->b)
        rdmax_ep_destroy(r->b);
    if (r->dst)
        rdmax_mem_free(r->dst);
    if (r->cs)
        rdmax_ctx_destroy(r->cs);
    if (r->cr)
        rdmax_ctx_destroy(r->cr);
    memset(r, 0, sizeof *r);
}

/* Opens both contexts, allocates the receiver's exposed region (remote write and read) and connects
   the pair by trading connection records directly (as tests/datapath_test.c's pair()). */
static uint32_t sq_free(const rdmax_ep *ep)
{
    rdmax_ep_resources info;
    rdmax_ep_query_resources(ep, &info);
    return info.sq_free;
}

static uint32_t reads_free(const rdmax_ep *ep)
{
    rdmax_ep_resources info;
    rdmax_ep_query_resources(ep, &info);
    return info.reads_free;
}

static struct ibv_qp *ep_qp(const rdmax_ep *ep)
{
    rdmax_ep_resources info;
    rdmax_ep_query_resources(ep, &info);
    return info.qp;
}

static int rig_open(rig *r, const rdmax_ctx_desc *sender, size_t dst_len)
{
    memset(r, 0, sizeof *r);
    const char *d0 = getenv("RDMAX_TEST_DEV0"), *d1 = getenv("RDMAX_TEST_DEV1");
    rdmax_ctx_desc rd;
    memset(&rd, 0, sizeof rd);
    rd.rcache_disable = true; /* the receiver never passes raw buffers: only the sender has a cache */
    r->cs = open_ctx(d0, sender);
    r->cr = open_ctx(d1 ? d1 : d0, &rd);
    if (rdmax_mem_alloc(r->cr, dst_len, RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_REMOTE_READ | RDMAX_ACCESS_ANY_ENDPOINT, &r->dst) != RDMAX_OK)
        return -1;
    rdmax_ep_desc da, db;
    memset(&da, 0, sizeof da);
    memset(&db, 0, sizeof db);
    db.expose = r->dst;
    /* The pair idles while the host part of a case runs (munmap storms, forks): under a loaded host that
       is long enough for keepalives and the default 0.47 s retry time to call the idle peer dead. */
    da.keepalive_ms = db.keepalive_ms = RDMAX_OFF;
    da.timeout = db.timeout = 18;
    da.sq_depth = RDMAX_BATCH_MAX;  /* batch_fail's batch on one endpoint (the default holds 31) */
    if (tl_pair(r->cs, r->cr, &da, &db, &r->a, &r->b) != RDMAX_OK)
        return -1;
    /* the receiver advertised dst in its record: the sender writes where that says */
    const rdmax_rbuf *rr = rdmax_ep_query_remote(r->a, 0);
    if (!rr || rr->addr != (uintptr_t)r->dst->addr || rr->rkey != r->dst->rkey)
        return -1;
    r->raddr = rr->addr;
    r->rkey = rr->rkey;
    r->d = (unsigned char *)r->dst->addr;
    return 0;
}

static void progress(rig *r)
{
    rdmax_progress(r->cs);
    rdmax_progress(r->cr);
}

/* 0 when c completed, -1 on timeout */
static int wait_comp(rig *r, rdmax_comp *c)
{
    double t0 = now_s();
    while (!c->done) {
        progress(r);
        if (now_s() - t0 > WAIT_S)
            return -1;
    }
    return 0;
}

/* rdmax_put with mem == NULL (the cache), waited for; returns the completion status, or the post's
   status if it was not RDMAX_INPROGRESS. */
static rdmax_status put_raw(rig *r, const void *buf, size_t len, uint64_t roff)
{
    rdmax_comp c;
    memset(&c, 0, sizeof c);
    rdmax_status st = rdmax_put(r->a, buf, len, NULL, r->raddr + roff, r->rkey, &c);
    if (st != RDMAX_INPROGRESS)
        return st == RDMAX_OK ? RDMAX_ERR_COMPLETION : st; /* > max_inline: must not be inline */
    if (wait_comp(r, &c) != 0)
        return RDMAX_ERR_TIMEOUT;
    return c.status;
}

static rdmax_status put_mem(rig *r, const void *buf, size_t len, const rdmax_mem *m, uint64_t roff)
{
    rdmax_comp c;
    memset(&c, 0, sizeof c);
    rdmax_status st = rdmax_put(r->a, buf, len, m, r->raddr + roff, r->rkey, &c);
    if (st != RDMAX_INPROGRESS)
        return st == RDMAX_OK ? RDMAX_ERR_COMPLETION : st;
    if (wait_comp(r, &c) != 0)
        return RDMAX_ERR_TIMEOUT;
    return c.status;
}

/* glibc's chunk header (the size word before the user pointer) has bit 1 set for an mmap'ed chunk */
static int chunk_is_mmapped(const void *p)
{
    const volatile size_t *h = (const volatile size_t *)((uintptr_t)p - sizeof(size_t));
    return (*h & 2u) != 0;
}

/* index of the first byte of p[0..n) that is not v, or -1 */
static long first_not(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return (long)i;
    return -1;
}

static rdmax_rcache_stats stats(rig *r)
{
    rdmax_rcache_stats s;
    memset(&s, 0, sizeof s);
    rdmax_rcache *rc = rdmax_ctx_query_rcache(r->cs);
    if (rc)
        rdmax_rcache_query_stats(rc, &s);
    return s;
}

static unsigned char *map_anon(void *at, size_t len, int fixed)
{
    void *p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (fixed ? MAP_FIXED : 0), -1, 0);
    return p == MAP_FAILED ? NULL : (unsigned char *)p;
}

#define D(field) ((long long)(s1.field - s0.field))

/* The context makes its cache on the first buffer passed without an rdmax_mem; the malloc policy comes
   with it. Buffers that must be covered by the policy are allocated after this. */
static unsigned char g_warm[64 * 1024] __attribute__((aligned(4096)));
static int warm_cache(rig *r)
{
    memset(g_warm, 0x5a, sizeof g_warm);
    return put_raw(r, g_warm, sizeof g_warm, 0) == RDMAX_OK && rdmax_ctx_query_rcache(r->cs) != NULL ? 0 : -1;
}

/* ---- 6. rcache_disable ------------------------------------------------------------------------- */
static void case_disabled(void)
{
    rig r;
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    d.rcache_disable = true;
    unsigned char *buf = (unsigned char *)malloc(64 * 1024);
    tl_begin("rcache_disable/raw buffer refused before posting");
    REQUIRE(rig_open(&r, &d, MIB) == 0, "rig: %s", g_lastlog);
    {
        uint32_t mi = rdmax_ep_query_desc(r.a).max_inline;
        REQUIRE(64 * 1024 > mi, "max_inline %u is not below the test size", mi);
        memset(buf, 0x11, 64 * 1024);
        rdmax_counters c0, c1;
        rdmax_ctx_query_counters(r.cs, &c0);
        uint32_t avail0 = sq_free(r.a);
        rdmax_comp c;
        memset(&c, 0, sizeof c);
        CHECK_ST(rdmax_put(r.a, buf, 64 * 1024, NULL, r.raddr, r.rkey, &c), RDMAX_ERR_NO_MEMH);
        CHECK_ST(rdmax_put(r.a, buf, mi + 1, NULL, r.raddr, r.rkey, NULL), RDMAX_ERR_NO_MEMH);
        CHECK_ST(rdmax_send(r.a, buf, mi + 1, NULL, NULL), RDMAX_ERR_NO_MEMH);
        CHECK_ST(rdmax_get(r.a, buf, 4096, NULL, r.raddr, r.rkey, &c), RDMAX_ERR_NO_MEMH);
        rdmax_ctx_query_counters(r.cs, &c1);
        CHECK(c1.posted[RDMAX_OP_PUT] == c0.posted[RDMAX_OP_PUT] && c1.posted[RDMAX_OP_SEND] == c0.posted[RDMAX_OP_SEND] &&
                  c1.posted[RDMAX_OP_GET] == c0.posted[RDMAX_OP_GET] && c1.post_calls == c0.post_calls,
              "something was posted: put %llu->%llu post_calls %llu->%llu",
              (unsigned long long)c0.posted[RDMAX_OP_PUT], (unsigned long long)c1.posted[RDMAX_OP_PUT],
              (unsigned long long)c0.post_calls, (unsigned long long)c1.post_calls);
        CHECK(sq_free(r.a) == avail0, "a send slot was consumed (%u -> %u)", avail0, sq_free(r.a));
        for (int i = 0; i < 1000; i++)
            progress(&r);
        CHECK(!c.done, "the refused operation's completion fired");
        CHECK(rdmax_ctx_query_rcache(r.cs) == NULL, "a cache was created although rcache_disable is set");
        printf("# rcache_disable: malloc policy %s\n",
               (rdmax_rcache_memhooks() & RDMAX_RCACHE_HOOKS_MALLOPT) ? "in force" : "not applied (no cache yet)");
        /* an inline-sized raw buffer needs no registration and still works */
        memset(r.d, 0, 64);
        CHECK_ST(rdmax_put(r.a, buf, mi < 64 ? mi : 64, NULL, r.raddr, r.rkey, NULL), RDMAX_OK);
        CHECK(rdmax_ep_flush(r.a, WAIT_S * 1000) == RDMAX_OK, "flush");
        CHECK(first_not(r.d, mi < 64 ? mi : 64, 0x11) < 0, "inline put did not arrive");
    }
out:
    tl_end();
    rig_close(&r);
    free(buf);
}

/* ---- 1b. a buffer malloc'd before the context's first cached operation ---------------------------
   The context makes its cache (and the malloc policy) lazily, at the first raw buffer; the natural
   program allocates that buffer first. glibc then serves an 8 MiB malloc with its own mmap, and the
   free() of it is glibc's internal munmap, which no hook sees: the region stays cached over an
   unmapped range. A later hooked mmap at that address is caught (fresh-mapping record), but a
   libc-internal one is not: a thread stack (glibc's allocate_stack mmaps internally) of the same size
   lands exactly in the hole, and a raw buffer on that stack then hits the stale registration, whose
   pinned pages still hold the freed buffer's bytes.
   This case checks what the receiver gets when a thread puts from its stack there. It only asserts
   when the stack really landed on the stale region (else it reports that the hazard was not reached). */
struct stack_put {
    rig *r;
    uintptr_t lo, hi;       /* the stale region's range */
    int in_region;
    rdmax_status st;
    long bad;               /* first byte the receiver got wrong, -1 if none */
    unsigned char got;
};

#define STK_LEN (32 * 1024)
static void *stack_put_thread(void *arg)
{
    struct stack_put *sp = (struct stack_put *)arg;
    unsigned char buf[STK_LEN];
    memset(buf, 0xBB, sizeof buf);
    sp->in_region = (uintptr_t)buf >= sp->lo && (uintptr_t)buf + sizeof buf <= sp->hi;
    memset(sp->r->d, 0, STK_LEN);
    sp->st = put_raw(sp->r, buf, sizeof buf, 0);
    sp->bad = first_not(sp->r->d, STK_LEN, 0xBB);
    sp->got = sp->bad >= 0 ? sp->r->d[sp->bad] : 0xBB;
    return NULL;
}

static void case_first_use(void)
{
    rig r;
    unsigned char *x = NULL;
    tl_begin("first_use/free of a buffer malloc'd before the cache existed");
    if (rdmax_rcache_memhooks() & RDMAX_RCACHE_HOOKS_MALLOPT) {
        printf("# first_use: the malloc policy is already active in this process: not reachable\n");
        tl_end();
        return;
    }
    REQUIRE(rig_open(&r, NULL, BIG) == 0, "rig: %s", g_lastlog);
    if (rdmax_ctx_query_rcache(r.cs) != NULL)
        printf("# first_use: the context made its cache (and the malloc policy) at creation\n");
    x = (unsigned char *)malloc(BIG);
    REQUIRE(x != NULL, "malloc");
    {
        int mmapped = chunk_is_mmapped(x);
        memset(x, 0xAA, BIG);
        CHECK_ST(put_raw(&r, x, BIG, 0), RDMAX_OK);
        CHECK(first_not(r.d, BIG, 0xAA) < 0, "receiver did not get A");
        REQUIRE(rdmax_ctx_query_rcache(r.cs) != NULL, "no cache after a raw put");
        rdmax_rcache_stats s0 = stats(&r);
        if (!mmapped)
            printf("# first_use: the buffer is not an mmap'ed chunk: free() cannot unmap it\n");
        long ps = sysconf(_SC_PAGESIZE);
        uintptr_t lo = (uintptr_t)x & ~(uintptr_t)(ps - 1);
        uintptr_t hi = ((uintptr_t)x + BIG + (uintptr_t)ps - 1) & ~(uintptr_t)(ps - 1);
        printf("# first_use: 8 MiB buffer at %p, %s; policy applied now: %s\n", (void *)x,
               mmapped ? "an mmap'ed chunk" : "from the heap",
               (rdmax_rcache_memhooks() & RDMAX_RCACHE_HOOKS_MALLOPT) ? "yes" : "no");
        free(x);
        x = NULL;
        /* a thread whose stack mapping has the freed chunk's size: 8 MiB + the header page, guard
           page included (glibc adds the guard to the stack size) */
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setstacksize(&at, BIG);
        pthread_attr_setguardsize(&at, (size_t)ps);
        struct stack_put sp;
        memset(&sp, 0, sizeof sp);
        sp.r = &r;
        sp.lo = lo;
        sp.hi = hi;
        pthread_t th;
        REQUIRE(pthread_create(&th, &at, stack_put_thread, &sp) == 0, "pthread_create");
        pthread_join(th, NULL);
        pthread_attr_destroy(&at);
        rdmax_rcache_stats s1 = stats(&r);
        printf("# first_use: thread stack buffer %s the stale region; put %s; hits %+lld misses %+lld "
               "invalidations %+lld\n",
               sp.in_region ? "inside" : "outside", rdmax_status_str(sp.st), D(hits), D(misses), D(invalidations));
        CHECK_ST(sp.st, RDMAX_OK);
        if (sp.in_region) {
            CHECK(sp.bad < 0,
                  "stale registration: the receiver got byte 0x%02x at %ld instead of the thread's 0xbb (the "
                  "freed buffer's pinned pages were sent: the cache hit a region whose memory glibc unmapped "
                  "before the malloc policy existed)",
                  sp.got, sp.bad);
        } else {
            CHECK(sp.bad < 0, "receiver got 0x%02x at %ld instead of 0xbb", sp.got, sp.bad);
            printf("# first_use: the thread stack did not land on the freed range: hazard not reached\n");
        }
    }
out:
    tl_end();
    free(x);
    rig_close(&r);
}

/* ---- 1c. a thread arena created before the cache ---------------------------------------------
   M_ARENA_MAX=1 stops glibc from making new arenas, but an arena made before the policy (a thread that
   malloc'ed before the context's first raw buffer) stays and is handed to later threads from glibc's
   free list. Such an arena grows with extra 64 MiB heaps, and heap_trim() unmaps a heap that becomes
   empty (delete_heap, glibc-internal munmap, whatever M_TRIM_THRESHOLD says) and new_heap() maps a new
   one, usually at the same 64 MiB-aligned address: fresh pages under a registration that is still
   cached, with no event recorded. This case does that from a thread that got the old arena, after the
   policy is in force, and checks what the receiver gets. */
#define ARENA_BIG (40u * MIB)
static void *arena_maker(void *arg)
{
    (void)arg;
    void *p = malloc(1000);  /* the thread's first malloc makes a new arena */
    *(volatile char *)p = 1;
    free(p);
    return NULL;              /* at exit the arena goes on glibc's free list */
}

static int page_mapped(uintptr_t a)
{
    long ps = sysconf(_SC_PAGESIZE);
    return msync((void *)(a & ~(uintptr_t)(ps - 1)), (size_t)ps, MS_ASYNC) == 0;
}

/* A worker thread allocates (from the old arena, handed to it from glibc's free list); the main
   thread, which owns the context, sends. The registration's own bookkeeping is then allocated in the
   main arena, so nothing else lives in the worker's second heap. */
static void *arena_alloc2(void *arg)
{
    void **out = (void **)arg;
    out[0] = malloc(ARENA_BIG); /* fills the arena's first heap */
    out[1] = malloc(ARENA_BIG); /* needs a second heap */
    return NULL;
}

static void *arena_alloc1(void *arg)
{
    void **out = (void **)arg;
    out[0] = malloc(ARENA_BIG);
    return NULL;
}

static int chunk_non_main(const void *p)
{
    const volatile size_t *h = (const volatile size_t *)((uintptr_t)p - sizeof(size_t));
    return (*h & 4u) != 0;
}

static void case_thread_arena(rig *r)
{
    void *ab[2] = {NULL, NULL}, *c[1] = {NULL};
    unsigned char *b = NULL;
    tl_begin("thread_arena/heap of an arena made before the cache, unmapped and remapped by glibc");
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, arena_alloc2, ab) == 0, "pthread_create");
    pthread_join(th, NULL);
    REQUIRE(ab[0] && ab[1], "malloc failed in the worker");
    b = (unsigned char *)ab[1];
    {
        int non_main = chunk_non_main(b);
        uintptr_t b_addr = (uintptr_t)b;
        memset(b, 0xA1, BIG);
        CHECK_ST(put_raw(r, b, BIG, 0), RDMAX_OK);
        CHECK(first_not(r->d, BIG, 0xA1) < 0, "first put: receiver did not get the data");
        free(b); /* into the worker's arena: its second heap is empty now, heap_trim unmaps it */
        b = NULL;
        int unmapped = !page_mapped(b_addr);
        REQUIRE(pthread_create(&th, NULL, arena_alloc1, c) == 0, "pthread_create");
        pthread_join(th, NULL);
        REQUIRE(c[0] != NULL, "malloc failed in the second worker");
        unsigned char *cc = (unsigned char *)c[0];
        int same = (uintptr_t)cc == b_addr;
        memset(cc, 0xB2, BIG);
        memset(r->d, 0, BIG);
        rdmax_rcache_stats s0 = stats(r);
        CHECK_ST(put_raw(r, cc, BIG, 0), RDMAX_OK);
        rdmax_rcache_stats s1 = stats(r);
        long bad = first_not(r->d, BIG, 0xB2);
        printf("# thread_arena: buffer %s the main arena; its heap %s after free; re-malloc at %s address; put: "
               "hits %+lld misses %+lld invalidations %+lld\n",
               non_main ? "outside" : "inside", unmapped ? "unmapped" : "still mapped", same ? "the same" : "another",
               D(hits), D(misses), D(invalidations));
        CHECK(bad < 0,
              "stale registration: receiver got 0x%02x at %ld instead of 0xb2 (glibc unmapped the old arena's heap "
              "and mapped a new one at %s address, no event was recorded, the cache %s)",
              bad >= 0 ? r->d[bad] : 0, bad, same ? "the same" : "another", D(hits) ? "hit the old region" : "missed");
        if (!(non_main && unmapped && same))
            printf("# thread_arena: hazard not reached (needs a non-main arena, an unmapped heap, the same address)\n");
    }
out:
    tl_end();
    free(b);
    free(c[0]);
    free(ab[0]);
}

/* ---- batching: a chain that fails to post ----------------------------------------------------------
   Between rdmax_batch_begin/end the RDMAX_BATCH_MAX-th request posts the chain from inside the call.
   When that post fails, rdmax__post_chain takes back every request, the current one included (its
   region put back, its comp completed with RDMAX_ERR_IO, a read's budget returned); the call then
   returns RDMAX_ERR_IO and its caller undoes the current request once more. The fault is injected by
   moving the sender's QP to RESET (rxe refuses posts on it with EINVAL). A reference the test holds
   on the same region shows whether the region lost a reference it should not have, or kept one.
   rxe queues the requests in its ring before the doorbell fails, so with sq_depth 32 (rig_open; a
   ring of 63) the second chain finds the ring full at its last request: `bad` points there and the
   31 before it look posted, though a QP in RESET never runs nor completes them. */
static void case_batch_fail(void)
{
    rig r;
    unsigned char *p = NULL;
    const size_t len = 64 * 1024;
    rdmax_comp comps[RDMAX_BATCH_MAX];
    rdmax_rcache_region *mine = NULL;
    rdmax_rcache *rc = NULL;
    rdmax_status st = RDMAX_OK;
    int i, setup_ok = 0;
    uint32_t rd0 = 0, sq0 = 0;
    rdmax_counters c0, c1;
    memset(&r, 0, sizeof r);
    tl_begin("batch_fail/setup: QP moved to RESET under a connected endpoint");
    REQUIRE(rig_open(&r, NULL, MIB) == 0, "rig: %s", g_lastlog);
    REQUIRE(warm_cache(&r) == 0, "warm-up");
    rc = rdmax_ctx_query_rcache(r.cs);
    p = map_anon(NULL, len, 0);
    REQUIRE(p != NULL, "mmap");
    memset(p, 1, len);
    REQUIRE(rdmax_rcache_get(rc, p, len, RDMAX_ACCESS_LOCAL, &mine) == RDMAX_OK, "rdmax_rcache_get");
    REQUIRE(mine->refcount == 1, "refcount %u", mine->refcount);
    {
        struct ibv_qp_attr qa;
        memset(&qa, 0, sizeof qa);
        qa.qp_state = IBV_QPS_RESET;
        REQUIRE(ibv_modify_qp(ep_qp(r.a), &qa, IBV_QP_STATE) == 0, "ibv_modify_qp(RESET)");
    }
    rdmax_ctx_query_counters(r.cs, &c0);
    rd0 = reads_free(r.a);
    sq0 = sq_free(r.a);
    REQUIRE(rd0 >= 1, "no read budget");
    /* 1. RDMAX_BATCH_MAX puts of the region: the last one posts the chain, which fails */
    rdmax_batch_begin(r.a);
    for (i = 0; i < RDMAX_BATCH_MAX; i++) {
        memset(&comps[i], 0, sizeof comps[i]);
        st = rdmax_put(r.a, p, len, NULL, r.raddr, r.rkey, &comps[i]);
        if (st != RDMAX_INPROGRESS)
            break;
    }
    REQUIRE(i == RDMAX_BATCH_MAX - 1 && st == RDMAX_ERR_IO,
            "expected the last put of the batch to fail with RDMAX_ERR_IO, got %s at put %d", rdmax_status_str(st), i);
    setup_ok = 1;
out:
    tl_end();
    if (setup_ok) {
        tl_begin("batch_fail/put: earlier chained requests complete with RDMAX_ERR_IO, slots given back");
        for (int k = 0; k < RDMAX_BATCH_MAX - 1; k++)
            CHECK(comps[k].done && comps[k].status == RDMAX_ERR_IO, "chained put %d: done %d status %s", k,
                  comps[k].done, rdmax_status_str(comps[k].status));
        rdmax_ctx_query_counters(r.cs, &c1);
        CHECK(c1.posted[RDMAX_OP_PUT] == c0.posted[RDMAX_OP_PUT] && sq_free(r.a) == sq0,
              "send slots or counters not given back");
        tl_end();

        tl_begin("batch_fail/put: the failing request is reported once");
        CHECK(!comps[RDMAX_BATCH_MAX - 1].done,
              "rdmax_put returned %s (nothing posted) and its comp also completed with %s",
              rdmax_status_str(st), rdmax_status_str(comps[RDMAX_BATCH_MAX - 1].status));
        tl_end();

        tl_begin("batch_fail/put: the failing request's region is put back once");
        CHECK(mine->refcount == 1,
              "region refcount %u while the test holds one reference: the failed request's reference was "
              "dropped twice (rdmax__post_chain and rdmax__ep_contig)",
              mine->refcount);
        tl_end();
        if (mine->refcount == 0)
            rdmax_rcache_hold(rc, mine); /* take back the reference that was stolen, go on */

        /* 2. the request that fills the batch is a get */
        rdmax_comp gc;
        memset(&gc, 0, sizeof gc);
        int n = 0;
        for (i = 0; i < RDMAX_BATCH_MAX - 1; i++) {
            memset(&comps[i], 0, sizeof comps[i]);
            if (rdmax_put(r.a, p, len, NULL, r.raddr, r.rkey, &comps[i]) == RDMAX_INPROGRESS)
                n++;
        }
        st = rdmax_get(r.a, p, 4096, NULL, r.raddr, r.rkey, &gc);
        tl_begin("batch_fail/get: fails with RDMAX_ERR_IO and is reported once");
        CHECK(n == RDMAX_BATCH_MAX - 1, "only %d chained puts", n);
        CHECK_ST(st, RDMAX_ERR_IO);
        CHECK(!gc.done, "rdmax_get returned %s and its comp also completed with %s", rdmax_status_str(st),
              rdmax_status_str(gc.status));
        tl_end();
        tl_begin("batch_fail/get: read budget unchanged");
        CHECK(reads_free(r.a) == rd0, "read budget %u after the failed chain, was %u before: a read slot was "
              "returned that was never taken", reads_free(r.a), rd0);
        tl_end();
        tl_begin("batch_fail/get: region put back once");
        CHECK(mine->refcount == 1, "region refcount %u after the failed get, expected 1 (ours)", mine->refcount);
        tl_end();
        tl_begin("batch_fail/get: the chained puts complete with RDMAX_ERR_IO, slots given back");
        for (int k = 0; k < RDMAX_BATCH_MAX - 1; k++)
            CHECK(comps[k].done && comps[k].status == RDMAX_ERR_IO, "chained put %d: done %d status %s", k,
                  comps[k].done, rdmax_status_str(comps[k].status));
        CHECK(sq_free(r.a) == sq0, "%u send slots free after the failed chain, %u before", sq_free(r.a), sq0);
        tl_end();
        rdmax_batch_end(r.a);
    }
    if (mine && rc && mine->refcount > 0)
        rdmax_rcache_release(rc, mine);
    rig_close(&r);
    if (p)
        munmap(p, len);
}

/* ---- 1. free + malloc at the same address -------------------------------------------------------- */
#ifdef RDMAX_MEMHOOKS
static void case_free_malloc(rig *r)
{
    unsigned char *x = NULL, *y = NULL, *spare[8];
    uintptr_t xa = 0;
    int nspare = 0;
    tl_begin("free_malloc/same address, new content");
    REQUIRE((rdmax_rcache_memhooks() & (RDMAX_RCACHE_HOOKS_INTERPOSED | RDMAX_RCACHE_HOOKS_MALLOPT)) ==
                (RDMAX_RCACHE_HOOKS_INTERPOSED | RDMAX_RCACHE_HOOKS_MALLOPT),
            "memhooks 0x%x: hooks or malloc policy missing", rdmax_rcache_memhooks());
    x = (unsigned char *)malloc(BIG);
    REQUIRE(x != NULL, "malloc");
    REQUIRE(!chunk_is_mmapped(x), "8 MiB came from mmap despite M_MMAP_MAX=0");
    memset(x, 'A', BIG);
    {
        rdmax_rcache_stats s0 = stats(r);
        CHECK_ST(put_raw(r, x, BIG, 0), RDMAX_OK);
        CHECK(first_not(r->d, BIG, 'A') < 0, "receiver did not get A everywhere (first bad byte %ld)",
              first_not(r->d, BIG, 'A'));
        rdmax_rcache_stats s1 = stats(r);
        CHECK(D(misses) == 1 && D(hits) == 0, "first put: misses %+lld hits %+lld, expected one miss", D(misses),
              D(hits));
    }
    xa = (uintptr_t)x;
    free(x);
    x = NULL;
    for (int tries = 0; tries < 8; tries++) {
        y = (unsigned char *)malloc(BIG);
        REQUIRE(y != NULL, "malloc");
        if ((uintptr_t)y == xa)
            break;
        spare[nspare++] = y; /* keep it: the next try gets another spot */
        y = NULL;
    }
    REQUIRE((uintptr_t)y == xa, "malloc(8 MiB) after free never returned the same address (%d tries)", nspare);
    memset(y, 'B', BIG);
    {
        rdmax_rcache_stats s0 = stats(r);
        CHECK_ST(put_raw(r, y, BIG, 0), RDMAX_OK);
        CHECK(first_not(r->d, BIG, 'B') < 0, "receiver saw byte 0x%02x at %ld, not B: stale pages sent",
              first_not(r->d, BIG, 'B') >= 0 ? r->d[first_not(r->d, BIG, 'B')] : 0, first_not(r->d, BIG, 'B'));
        rdmax_rcache_stats s1 = stats(r);
        /* A hit, and a correct one: under the malloc policy (M_MMAP_MAX=0, M_TRIM_THRESHOLD=-1,
           M_ARENA_MAX=1) the 8 MiB block lives in the main heap, free() only returns it to malloc's
           free lists (glibc never trims, never unmaps, never madvises it away), and the next malloc
           hands out the very same virtual pages, still mapped to the same physical frames that the
           registration pinned. So the cached lkey still describes the pages the program just wrote
           B into, nothing was unmapped (no event, no invalidation), and re-registering would be
           wasted work. Had free() unmapped the block, the hooks would have had to invalidate. */
        CHECK(D(hits) == 1 && D(misses) == 0, "second put: hits %+lld misses %+lld, expected one hit", D(hits),
              D(misses));
        CHECK(D(invalidations) == 0, "invalidations %+lld: free/malloc of heap memory invalidated a region",
              D(invalidations));
        CHECK(D(reg_calls) == 0 && D(dereg_calls) == 0, "reg %+lld dereg %+lld: the registration was redone",
              D(reg_calls), D(dereg_calls));
    }
out:
    tl_end();
    free(x);
    free(y);
    while (nspare > 0)
        free(spare[--nspare]);
}

#endif

/* ---- 2. munmap + mmap(MAP_FIXED), MAP_FIXED over a live mapping --------------------------------- */
static void case_munmap_mmap(rig *r, int with_munmap)
{
    unsigned char *p = NULL;
    tl_begin(with_munmap ? "munmap_mmap_fixed/new pages at the same address" : "mmap_fixed_replace/new pages at the same address");
    p = map_anon(NULL, BIG, 0);
    REQUIRE(p != NULL, "mmap");
    memset(p, 'A', BIG);
    CHECK_ST(put_raw(r, p, BIG, 0), RDMAX_OK);
    CHECK(first_not(r->d, BIG, 'A') < 0, "receiver did not get A");
    {
        rdmax_rcache_stats s0 = stats(r);
        if (with_munmap)
            REQUIRE(munmap(p, BIG) == 0, "munmap");
        unsigned char *q = map_anon(p, BIG, 1);
        REQUIRE(q == p, "mmap(MAP_FIXED) at %p returned %p", (void *)p, (void *)q);
        memset(q, 'B', BIG);
        CHECK_ST(put_raw(r, q, BIG, 0), RDMAX_OK);
        long bad = first_not(r->d, BIG, 'B');
        CHECK(bad < 0, "receiver saw 0x%02x at %ld, not B: the old registration's pages were sent",
              bad >= 0 ? r->d[bad] : 0, bad);
        rdmax_rcache_stats s1 = stats(r);
        CHECK(D(invalidations) >= 1, "invalidations %+lld: the %s went unnoticed", D(invalidations),
              with_munmap ? "munmap" : "MAP_FIXED replacement");
        CHECK(D(misses) == 1 && D(hits) == 0, "misses %+lld hits %+lld: expected a miss", D(misses), D(hits));
        CHECK(D(events) >= 1, "no memory events were applied (events %+lld)", D(events));
    }
out:
    tl_end();
    if (p)
        munmap(p, BIG);
}

/* ---- 2. mremap: move, then new memory where it was ----------------------------------------------- */
static void case_mremap(rig *r)
{
    unsigned char *x = NULL, *y = NULL;
    tl_begin("mremap/moved pages and new pages at the old address");
    {
        /* x and y with a hole between them: neighbours would be merged into one region */
        unsigned char *area = map_anon(NULL, 3 * (size_t)BIG, 0);
        REQUIRE(area != NULL, "mmap");
        x = area;
        y = area + 2 * (size_t)BIG;
        munmap(area + BIG, BIG);
    }
    memset(x, 'A', BIG);
    memset(y, 'Z', BIG);
    CHECK_ST(put_raw(r, x, BIG, 0), RDMAX_OK); /* region over x (pages holding A) */
    {
        rdmax_rcache_stats s0 = stats(r);
        CHECK_ST(put_raw(r, y, BIG, 0), RDMAX_OK); /* region over y (pages holding Z) */
        CHECK(first_not(r->d, BIG, 'Z') < 0, "receiver did not get Z");
        rdmax_rcache_stats s1 = stats(r);
        CHECK(D(misses) == 1 && D(merges) == 0 && D(cached_regions) == 1, "y: misses %+lld merges %+lld cached "
              "regions %+lld: x and y should be two regions", D(misses), D(merges), D(cached_regions));
        s0 = s1;
        /* move x's pages onto y: y's old pages go away, x becomes unmapped */
        void *m = mremap(x, BIG, BIG, MREMAP_MAYMOVE | MREMAP_FIXED, y);
        REQUIRE(m == (void *)y, "mremap returned %p, wanted %p", m, (void *)y);
        memset(y, 'C', BIG); /* into the moved pages */
        CHECK_ST(put_raw(r, y, BIG, 0), RDMAX_OK);
        long bad = first_not(r->d, BIG, 'C');
        CHECK(bad < 0, "moved-to address: receiver saw 0x%02x at %ld, not C (stale registration of y's old pages)",
              bad >= 0 ? r->d[bad] : 0, bad);
        s1 = stats(r);
        CHECK(D(invalidations) >= 2, "invalidations %+lld: expected both x's and y's regions dropped",
              D(invalidations));
        CHECK(D(misses) == 1 && D(hits) == 0, "moved-to put: misses %+lld hits %+lld, expected a miss", D(misses),
              D(hits));

        /* new memory where x was */
        s0 = stats(r);
        unsigned char *q = map_anon(x, BIG, 1);
        REQUIRE(q == x, "mmap(MAP_FIXED) at the old address returned %p", (void *)q);
        memset(q, 'B', BIG);
        CHECK_ST(put_raw(r, q, BIG, 0), RDMAX_OK);
        bad = first_not(r->d, BIG, 'B');
        CHECK(bad < 0, "old address: receiver saw 0x%02x at %ld, not B (stale registration of the moved pages)",
              bad >= 0 ? r->d[bad] : 0, bad);
        s1 = stats(r);
        CHECK(D(misses) == 1 && D(hits) == 0, "old-address put: misses %+lld hits %+lld, expected a miss", D(misses),
              D(hits));
    }
out:
    tl_end();
    if (x)
        munmap(x, BIG);
    if (y)
        munmap(y, BIG);
}

/* ---- 2. madvise(MADV_DONTNEED) --------------------------------------------------------------------- */
static void case_madvise(rig *r)
{
    unsigned char *p = NULL;
    tl_begin("madvise_dontneed/zero pages replace the registered frames");
    p = map_anon(NULL, BIG, 0);
    REQUIRE(p != NULL, "mmap");
    memset(p, 'A', BIG);
    CHECK_ST(put_raw(r, p, BIG, 0), RDMAX_OK);
    CHECK(first_not(r->d, BIG, 'A') < 0, "receiver did not get A");
    {
        rdmax_rcache_stats s0 = stats(r);
        /* Private anonymous memory: DONTNEED drops the page table entries; the registration keeps its
           pinned frames (still holding A) but the next touch faults in fresh zero pages. */
        REQUIRE(madvise(p, BIG, MADV_DONTNEED) == 0, "madvise");
        CHECK(first_not(p, BIG, 0) < 0, "the pages did not read back as zero after DONTNEED");
        memset(p, 'B', BIG);
        CHECK_ST(put_raw(r, p, BIG, 0), RDMAX_OK);
        long bad = first_not(r->d, BIG, 'B');
        CHECK(bad < 0, "receiver saw 0x%02x at %ld, not B: the registration's old frames were sent",
              bad >= 0 ? r->d[bad] : 0, bad);
        rdmax_rcache_stats s1 = stats(r);
        CHECK(D(invalidations) >= 1, "invalidations %+lld: the madvise went unnoticed", D(invalidations));
        CHECK(D(misses) == 1 && D(hits) == 0, "misses %+lld hits %+lld: expected a miss", D(misses), D(hits));
    }
out:
    tl_end();
    if (p)
        munmap(p, BIG);
}

/* ---- 5. explicit invalidate ---------------------------------------------------------------------- */
static void case_invalidate(rig *r)
{
    unsigned char *p = NULL;
    const size_t len = MIB;
    rdmax_rcache *rc = rdmax_ctx_query_rcache(r->cs);
    tl_begin("invalidate/explicit, then a miss with the right data");
    REQUIRE(rc != NULL, "no cache");
    p = map_anon(NULL, len, 0);
    REQUIRE(p != NULL, "mmap");
    memset(p, 'A', len);
    CHECK_ST(put_raw(r, p, len, 0), RDMAX_OK);
    {
        rdmax_rcache_stats s0 = stats(r);
        CHECK_ST(put_raw(r, p, len, 0), RDMAX_OK);
        rdmax_rcache_stats s1 = stats(r);
        CHECK(D(hits) == 1 && D(misses) == 0, "repeat put: hits %+lld misses %+lld, expected a hit", D(hits),
              D(misses));
        s0 = s1;
        int n = rdmax_rcache_invalidate(rc, p, len);
        CHECK(n == 1, "rdmax_rcache_invalidate dropped %d regions, expected 1", n);
        s1 = stats(r);
        CHECK(D(invalidations) == 1 && D(dereg_calls) == 1, "invalidations %+lld dereg %+lld, expected 1 and 1",
              D(invalidations), D(dereg_calls));
        s0 = s1;
        memset(p, 'B', len);
        memset(r->d, 0, len);
        CHECK_ST(put_raw(r, p, len, 0), RDMAX_OK);
        s1 = stats(r);
        CHECK(D(misses) == 1 && D(hits) == 0, "put after invalidate: misses %+lld hits %+lld, expected a miss",
              D(misses), D(hits));
        CHECK(first_not(r->d, len, 'B') < 0, "receiver did not get B (first bad %ld)", first_not(r->d, len, 'B'));

        /* invalidate while a put from the region is in flight: the region is dropped from the lookup
           at once but deregistered only when the put completes */
        s0 = stats(r);
        memset(p, 'C', len);
        rdmax_comp c;
        memset(&c, 0, sizeof c);
        CHECK_ST(rdmax_put(r->a, p, len, NULL, r->raddr, r->rkey, &c), RDMAX_INPROGRESS);
        n = rdmax_rcache_invalidate(rc, p, len);
        rdmax_rcache_stats sm = stats(r);
        CHECK(n == 1 && sm.dereg_calls == s0.dereg_calls && sm.regions == s0.regions &&
                  sm.cached_regions + 1 == s0.cached_regions,
              "in-flight invalidate: dropped %d, dereg %+lld, regions %llu -> %llu, cached %llu -> %llu", n,
              (long long)(sm.dereg_calls - s0.dereg_calls), (unsigned long long)s0.regions,
              (unsigned long long)sm.regions, (unsigned long long)s0.cached_regions,
              (unsigned long long)sm.cached_regions);
        CHECK(wait_comp(r, &c) == 0 && c.status == RDMAX_OK, "in-flight put: %s", rdmax_status_str(c.status));
        s1 = stats(r);
        CHECK(D(dereg_calls) == 1 && s1.regions + 1 == s0.regions,
              "after completion: dereg %+lld regions %llu (was %llu): not deregistered at the last put",
              D(dereg_calls), (unsigned long long)s1.regions, (unsigned long long)s0.regions);
        CHECK(first_not(r->d, len, 'C') < 0, "receiver did not get C");
    }
out:
    tl_end();
    if (p)
        munmap(p, len);
}

/* ---- a raw buffer the process may only read ------------------------------------------------------
   A put or send only reads its source. Programs send from read-only memory all the time: constant
   tables, string literals, files mapped PROT_READ. The registration the cache makes for it must not
   ask for local write access (the kernel refuses to pin read-only pages for writing: EFAULT). */
static const unsigned char g_rodata[16384] = {1, 2, 3}; /* in .rodata: the rest is zero */
static void case_readonly(rig *r)
{
    unsigned char *p = NULL;
    const size_t len = 64 * 1024;
    tl_begin("put_readonly/raw source in read-only memory");
    p = map_anon(NULL, len, 0);
    REQUIRE(p != NULL, "mmap");
    memset(p, 'R', len);
    REQUIRE(mprotect(p, len, PROT_READ) == 0, "mprotect");
    memset(r->d, 0, len);
    {
        rdmax_rcache_stats s0 = stats(r);
        rdmax_status st = put_raw(r, p, len, 0);
        rdmax_rcache_stats s1 = stats(r);
        printf("# put_readonly: PROT_READ put %s: reg failures %+lld, evictions %+lld (cached regions before: "
               "%llu)\n", rdmax_status_str(st), D(reg_failures), D(evictions), (unsigned long long)s0.cached_regions);
        CHECK(st == RDMAX_OK, "put from a PROT_READ mapping: %s (reg failures %+lld: the cache registered it "
              "for local write)", rdmax_status_str(st), D(reg_failures));
        CHECK(D(evictions) == 0, "a failed registration evicted %lld unused regions", D(evictions));
        if (st == RDMAX_OK)
            CHECK(first_not(r->d, len, 'R') < 0, "receiver did not get the read-only data");
        memset(r->d, 0xff, sizeof g_rodata);
        st = put_raw(r, g_rodata, sizeof g_rodata, 0);
        printf("# put_readonly: .rodata put %s\n", rdmax_status_str(st));
        CHECK(st == RDMAX_OK, "put from .rodata: %s", rdmax_status_str(st));
        if (st == RDMAX_OK)
            CHECK(memcmp(r->d, g_rodata, sizeof g_rodata) == 0, "receiver did not get the .rodata bytes");
    }
out:
    tl_end();
    if (p)
        munmap(p, len);
}

/* ---- raw-buffer get into malloc'd memory ------------------------------------------------------- */
static void case_get(rig *r)
{
    const size_t len = MIB;
    unsigned char *p = (unsigned char *)malloc(len + 64);
    tl_begin("get_raw/read into a malloc'd buffer");
    REQUIRE(p != NULL, "malloc");
    memset(p, 0, len + 64);
    for (size_t i = 0; i < len; i++)
        r->d[i] = (unsigned char)(i * 7 + (i >> 12));
    {
        rdmax_rcache_stats s0 = stats(r);
        rdmax_comp c;
        memset(&c, 0, sizeof c);
        CHECK_ST(rdmax_get(r->a, p + 16, len, NULL, r->raddr, r->rkey, &c), RDMAX_INPROGRESS);
        CHECK(wait_comp(r, &c) == 0 && c.status == RDMAX_OK, "get: %s", rdmax_status_str(c.status));
        size_t bad = (size_t)-1;
        for (size_t i = 0; i < len && bad == (size_t)-1; i++)
            if (p[16 + i] != (unsigned char)(i * 7 + (i >> 12)))
                bad = i;
        CHECK(bad == (size_t)-1, "data read differs at byte %zu", bad);
        CHECK(first_not(p, 16, 0) < 0 && first_not(p + 16 + len, 48, 0) < 0, "get wrote outside its buffer");
        rdmax_rcache_stats s1 = stats(r);
        /* a miss, or a hit on a heap region still registered from an earlier case (the heap keeps its
           pages under the malloc policy, so that is a correct hit) */
        CHECK(D(misses) + D(hits) == 1, "misses %+lld hits %+lld, expected one lookup", D(misses), D(hits));
        /* again, part of the same buffer: a hit, with the right data */
        s0 = s1;
        memset(p + 16, 0, len);
        memset(&c, 0, sizeof c);
        CHECK_ST(rdmax_get(r->a, p + 16 + 4096, len / 2, NULL, r->raddr + 4096, r->rkey, &c), RDMAX_INPROGRESS);
        CHECK(wait_comp(r, &c) == 0 && c.status == RDMAX_OK, "second get: %s", rdmax_status_str(c.status));
        bad = (size_t)-1;
        for (size_t i = 4096; i < 4096 + len / 2 && bad == (size_t)-1; i++)
            if (p[16 + i] != (unsigned char)(i * 7 + (i >> 12)))
                bad = i;
        CHECK(bad == (size_t)-1, "second get: data differs at byte %zu", bad);
        s1 = stats(r);
        CHECK(D(hits) == 1 && D(misses) == 0, "second get: hits %+lld misses %+lld, expected a hit", D(hits),
              D(misses));
    }
out:
    tl_end();
    free(p);
}

/* ---- 3. eviction under a region limit while regions are in use -------------------------------- */
#define NBUF 16 /* new buffers, each a miss */
#define NPRE 4  /* the limit, and the cached regions before the puts */
#define NHOT 2  /* of those, how many are put again (hits: in use, but still on the LRU list) */
#define NPUT (NBUF + NHOT)
static void case_eviction(void)
{
    rig r;
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    d.rcache_max_regions = NPRE;
    long ps = sysconf(_SC_PAGESIZE);
    const size_t len = MIB, stride = MIB + 2 * (size_t)ps; /* a gap page: no merging of neighbours */
    const size_t area = (NBUF + NPRE) * stride;
    unsigned char *base = NULL;
    rdmax_comp comps[NPUT];
    tl_begin("eviction/limit %d, %d puts in flight", NPRE, NPUT);
    REQUIRE(rig_open(&r, &d, NPUT * len) == 0, "rig: %s", g_lastlog);
    base = map_anon(NULL, area, 0);
    REQUIRE(base != NULL, "mmap");
    /* NPRE unused cached regions first (buffers NBUF..NBUF+NPRE-1): the cache is at its limit */
    for (int i = 0; i < NPRE; i++) {
        unsigned char *p = base + (size_t)(NBUF + i) * stride;
        memset(p, 0xE0 + i, len);
        CHECK_ST(put_raw(&r, p, len, (uint64_t)i * len), RDMAX_OK);
    }
    {
        rdmax_rcache_desc ad = rdmax_rcache_query_desc(rdmax_ctx_query_rcache(r.cs));
        REQUIRE(ad.max_regions == NPRE, "applied max_regions %zu, desc asked %d", ad.max_regions, NPRE);
        rdmax_rcache_stats s0 = stats(&r);
        REQUIRE(s0.regions == NPRE && s0.cached_regions == NPRE && s0.evictions == 0,
                "after the warm-up: regions %llu cached %llu evictions %llu", (unsigned long long)s0.regions,
                (unsigned long long)s0.cached_regions, (unsigned long long)s0.evictions);
        memset(r.d, 0, NPUT * len);
        unsigned char *src[NPUT];
        for (int i = 0; i < NHOT; i++) /* put first: the oldest LRU entries, in use while misses evict */
            src[i] = base + (size_t)(NBUF + i) * stride;
        for (int i = 0; i < NBUF; i++)
            src[NHOT + i] = base + (size_t)i * stride;
        for (int i = 0; i < NPUT; i++)
            memset(src[i], i + 1, len);
        /* every put posted before any completion is polled */
        int posted = 0;
        for (int i = 0; i < NPUT; i++) {
            memset(&comps[i], 0, sizeof comps[i]);
            rdmax_status st = rdmax_put(r.a, src[i], len, NULL, r.raddr + (uint64_t)i * len, r.rkey, &comps[i]);
            CHECK_ST(st, RDMAX_INPROGRESS);
            if (st == RDMAX_INPROGRESS)
                posted++;
        }
        rdmax_rcache_stats sm = stats(&r);
        /* The NHOT re-used regions are in use although they are the oldest on the LRU list: eviction
           must skip them. So the first NPRE - NHOT misses each evict one unused warm-up region, and the
           remaining misses find nothing evictable and go over the limit. No in-use region may be
           deregistered (regions == puts in flight); a put whose region was deregistered under it would
           also complete with a local protection error. */
        CHECK(sm.regions == (uint64_t)posted, "in flight: %llu live registrations for %d puts: %s",
              (unsigned long long)sm.regions, posted,
              sm.regions < (uint64_t)posted ? "a region in use was deregistered" : "leak");
        CHECK(sm.hits - s0.hits == NHOT && sm.misses - s0.misses == NBUF, "in flight: hits %+lld misses %+lld, "
              "expected %d and %d", (long long)(sm.hits - s0.hits), (long long)(sm.misses - s0.misses), NHOT, NBUF);
        CHECK(sm.evictions - s0.evictions == NPRE - NHOT && sm.dereg_calls - s0.dereg_calls == NPRE - NHOT,
              "in flight: evictions %+lld dereg %+lld, expected %d each (only the unused warm-up regions)",
              (long long)(sm.evictions - s0.evictions), (long long)(sm.dereg_calls - s0.dereg_calls), NPRE - NHOT);
        CHECK(sm.over_limit - s0.over_limit == NBUF - (NPRE - NHOT), "in flight: over_limit %+lld, expected %d",
              (long long)(sm.over_limit - s0.over_limit), NBUF - (NPRE - NHOT));
        CHECK(rdmax__rcache_validate(rdmax_ctx_query_rcache(r.cs)) == 0, "cache invariants broken in flight: %d",
              rdmax__rcache_validate(rdmax_ctx_query_rcache(r.cs)));
        int ok = 0;
        for (int i = 0; i < NPUT; i++) {
            if (wait_comp(&r, &comps[i]) == 0 && comps[i].status == RDMAX_OK)
                ok++;
            else
                CHECK(0, "put %d: %s", i, comps[i].done ? rdmax_status_str(comps[i].status) : "timed out");
        }
        CHECK(ok == NPUT, "%d of %d puts completed OK", ok, NPUT);
        for (int i = 0; i < NPUT; i++) {
            long bad = first_not(r.d + (size_t)i * len, len, (unsigned char)(i + 1));
            CHECK(bad < 0, "put %d: receiver byte %ld is 0x%02x, expected 0x%02x", i, bad,
                  bad >= 0 ? r.d[(size_t)i * len + (size_t)bad] : 0, i + 1);
        }
        rdmax_rcache_stats s1 = stats(&r);
        CHECK(s1.regions <= NPRE && s1.cached_regions <= NPRE && s1.regions == s1.cached_regions,
              "after completion: %llu registrations (%llu cached), limit %d", (unsigned long long)s1.regions,
              (unsigned long long)s1.cached_regions, NPRE);
        /* NPRE + NBUF registrations were ever made; all that are gone went by eviction */
        CHECK(D(evictions) == (long long)(NBUF + NPRE - s1.regions) && D(dereg_calls) == D(evictions) &&
                  D(invalidations) == 0,
              "evictions %+lld dereg %+lld invalidations %+lld with %llu left: a deregistration that was not "
              "an eviction of an unused region",
              D(evictions), D(dereg_calls), D(invalidations), (unsigned long long)s1.regions);
        CHECK(rdmax__rcache_validate(rdmax_ctx_query_rcache(r.cs)) == 0, "cache invariants broken after: %d",
              rdmax__rcache_validate(rdmax_ctx_query_rcache(r.cs)));
        /* the most recently released buffer is still cached: a hit */
        s0 = stats(&r);
        CHECK_ST(put_raw(&r, base + (size_t)(NBUF - 1) * stride, len, 0), RDMAX_OK);
        s1 = stats(&r);
        CHECK(D(hits) == 1 && D(misses) == 0, "last buffer again: hits %+lld misses %+lld, expected a hit", D(hits),
              D(misses));
    }
out:
    tl_end();
    rig_close(&r);
    if (base)
        munmap(base, area);
}

/* ---- 4. fork ------------------------------------------------------------------------------------ */
static void case_fork(rig *r)
{
    const size_t len = MIB;
    unsigned char *pc = (unsigned char *)malloc(len), *pm = (unsigned char *)malloc(len);
    rdmax_mem *m = NULL;
    tl_begin("fork/child touches registered buffers, parent's new data arrives");
    REQUIRE(pc && pm, "malloc");
    REQUIRE(rdmax_mem_reg(r->cs, pm, len, RDMAX_ACCESS_LOCAL, &m) == RDMAX_OK, "rdmax_mem_reg: %s", g_lastlog);
    memset(pc, 'A', len);
    memset(pm, 'a', len);
    CHECK_ST(put_raw(r, pc, len, 0), RDMAX_OK);
    CHECK_ST(put_mem(r, pm, len, m, len), RDMAX_OK);
    CHECK(first_not(r->d, len, 'A') < 0 && first_not(r->d + len, len, 'a') < 0, "before fork: data wrong");
    {
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        REQUIRE(pid >= 0, "fork");
        if (pid == 0) {
            /* child: no rdmax object is used; it reads what the parent wrote, then writes its own */
            int st = 0;
            if (first_not(pc, len, 'A') >= 0 || first_not(pm, len, 'a') >= 0)
                st = 3;
            memset(pc, 'X', len);
            memset(pm, 'x', len);
            if (first_not(pc, len, 'X') >= 0 || first_not(pm, len, 'x') >= 0)
                st = 4;
            _exit(st);
        }
        int ws = 0;
        REQUIRE(waitpid(pid, &ws, 0) == pid, "waitpid");
        CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "child %s %d (3: did not see the parent's data, 4: could "
              "not write its copy; a signal: the pages were not inherited)",
              WIFEXITED(ws) ? "exited with" : "killed by signal", WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws));
        CHECK(first_not(pc, len, 'A') < 0 && first_not(pm, len, 'a') < 0, "the child's writes reached the parent");
        rdmax_rcache_stats s0 = stats(r);
        memset(pc, 'B', len);
        memset(pm, 'b', len);
        memset(r->d, 0, 2 * len);
        CHECK_ST(put_raw(r, pc, len, 0), RDMAX_OK);
        CHECK_ST(put_mem(r, pm, len, m, len), RDMAX_OK);
        long b1 = first_not(r->d, len, 'B'), b2 = first_not(r->d + len, len, 'b');
        /* without copy-on-fork of pinned pages the parent's write after fork would have broken COW
           into a new page and the device would still read the old one ('A'/'a' arrives) */
        CHECK(b1 < 0, "cached buffer: receiver saw 0x%02x at %ld, not B", b1 >= 0 ? r->d[b1] : 0, b1);
        CHECK(b2 < 0, "rdmax_mem_reg buffer: receiver saw 0x%02x at %ld, not b", b2 >= 0 ? r->d[len + b2] : 0, b2);
        rdmax_rcache_stats s1 = stats(r);
        CHECK(D(hits) == 1 && D(misses) == 0, "after fork: hits %+lld misses %+lld, expected the cached region",
              D(hits), D(misses));
    }
out:
    tl_end();
    if (m)
        rdmax_mem_free(m);
    free(pc);
    free(pm);
}

/* ---- routes: every way a program changes the memory under a cached registration ---------------------
   Each route fills a buffer with OLD bytes and puts it twice (cached, then a hit where the memory can
   be cached), changes the memory at that address in its own way, fills it with NEW bytes and puts it
   again; the receiver must hold NEW everywhere. The same route then runs on a sender whose cache is in
   mode RDMAX_RCACHE_MANUAL (nothing invalidates): the control, where the old registration's pages
   arrive, so the check can fail. What each build expects (covered or not) is the route table of the
   manual (rdmax.h, "Registration cache"): this build's column is `exp`. */
enum { R_NEW = 0, R_STALE = 1, R_ANY = 2 }; /* what the receiver gets after the change */
#define OLD 0xA1
#define NEW 0xB2

typedef struct rstate {
    unsigned char *p;       /* the buffer, at the same address before and after */
    size_t len;             /* the buffer's size */
    size_t off, plen;       /* the part that is put: [p + off, p + off + plen) */
    size_t map_len;         /* the mapping around it (0: not ours to unmap) */
    int fd, fd2, shm1, shm2;
    unsigned char *extra;   /* a second mapping (mremap target, blocker) */
    size_t extra_len;
    char err[160];
} rstate;

typedef struct droute {
    const char *name;
    size_t len;                              /* the buffer */
    size_t put_len;                          /* 0: all of it; else this much from its middle (rxe takes
                                                at most 8 MiB per message) */
    int exp_monitor, exp_hooks, exp_control; /* R_NEW / R_STALE / R_ANY */
    int (*before)(rstate *s);                /* maps, fills OLD; 0 ok */
    int (*change)(rstate *s);                /* changes the memory at s->p, fills NEW there; 0 ok */
    void (*after)(rstate *s);
} droute;

#define RFAIL(...) do { snprintf(s->err, sizeof s->err, __VA_ARGS__); return -1; } while (0)

static void fill(rstate *s, unsigned char v) { memset(s->p + s->off, v, s->plen); }

static int b_anon(rstate *s)
{
    s->map_len = s->len;
    if (!(s->p = map_anon(NULL, s->map_len, 0)))
        RFAIL("mmap: %s", strerror(errno));
    fill(s, OLD);
    return 0;
}
static void a_unmap(rstate *s)
{
    if (s->p && s->map_len)
        munmap(s->p, s->map_len);
    if (s->extra)
        munmap(s->extra, s->extra_len);
}

/* free + malloc: the same address again (kept blocks make malloc look elsewhere) */
static int b_malloc(rstate *s)
{
    if (!(s->p = (unsigned char *)malloc(s->len)))
        RFAIL("malloc");
    fill(s, OLD);
    return 0;
}
static int realloc_same(rstate *s)
{
    unsigned char *was = s->p, *spare[8];
    int n = 0;
    s->p = NULL;
    for (int i = 0; i < 8 && !s->p; i++) {
        unsigned char *q = (unsigned char *)malloc(s->len);
        if (q == was)
            s->p = q;
        else if (q)
            spare[n++] = q;
    }
    int mm = n > 0 && chunk_is_mmapped(spare[0]);
    void *first = n > 0 ? spare[0] : NULL;
    while (n > 0)
        free(spare[--n]);
    if (!s->p)
        RFAIL("malloc(%zu) after free never returned %p again (first: %p, %s)", s->len, (void *)was, first,
              mm ? "an mmap'ed chunk" : "from the heap");
    fill(s, NEW);
    return 0;
}
static int c_free_malloc(rstate *s)
{
#ifndef RDMAX_MALLOPT
    if (s->len >= MIB && !chunk_is_mmapped(s->p))
        RFAIL("the %zu-byte block is not an mmap'ed chunk: free() would not unmap it", s->len);
#endif
    free(s->p);
    return realloc_same(s);
}
/* a small block: glibc keeps it in the heap; malloc_trim gives its whole pages back (MADV_DONTNEED or
   a brk shrink, inside glibc) */
static int c_free_trim_malloc(rstate *s)
{
    free(s->p);
    malloc_trim(0);
    return realloc_same(s);
}
static void a_free(rstate *s) { free(s->p); }

static int c_munmap_mmap_fixed(rstate *s)
{
    if (munmap(s->p, s->map_len) != 0 || map_anon(s->p, s->map_len, 1) != s->p)
        RFAIL("munmap + mmap(MAP_FIXED): %s", strerror(errno));
    fill(s, NEW);
    return 0;
}
static int c_mmap_fixed_over(rstate *s)
{
    if (map_anon(s->p, s->map_len, 1) != s->p)
        RFAIL("mmap(MAP_FIXED): %s", strerror(errno));
    fill(s, NEW);
    return 0;
}

/* mremap grow that must move: a mapping right behind the buffer blocks growth in place */
static int b_grow(rstate *s)
{
    s->map_len = s->len;
    if (!(s->p = map_anon(NULL, 2 * s->len, 0)))
        RFAIL("mmap");
    s->extra_len = s->len;
    s->extra = s->p + s->len;
    if (mprotect(s->extra, s->extra_len, PROT_NONE) != 0) /* a mapping of its own right behind */
        RFAIL("mprotect: %s", strerror(errno));
    fill(s, OLD);
    return 0;
}
static int c_mremap_grow(rstate *s)
{
    unsigned char *q = (unsigned char *)mremap(s->p, s->len, 2 * s->len, MREMAP_MAYMOVE);
    if (q == MAP_FAILED || q == s->p)
        RFAIL("mremap grow did not move (%p)", (void *)q);
    munmap(q, 2 * s->len);
    if (map_anon(s->p, s->len, 0) != s->p)
        RFAIL("mapping the old address again");
    fill(s, NEW);
    return 0;
}
/* mremap shrink: the cached tail goes away, new memory is mapped there */
static int b_shrink(rstate *s)
{
    s->map_len = 2 * s->len;
    if (!(s->p = map_anon(NULL, s->map_len, 0)))
        RFAIL("mmap");
    s->off = s->len;
    s->plen = s->len;
    fill(s, OLD);
    return 0;
}
static int c_mremap_shrink(rstate *s)
{
    if (mremap(s->p, s->map_len, s->len, 0) != s->p || map_anon(s->p + s->len, s->len, 0) != s->p + s->len)
        RFAIL("mremap shrink + mmap of the tail: %s", strerror(errno));
    fill(s, NEW);
    return 0;
}
static int c_mremap_move(rstate *s)
{
    s->extra_len = s->len;
    s->extra = (unsigned char *)mmap(NULL, s->extra_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (s->extra == MAP_FAILED || mremap(s->p, s->len, s->len, MREMAP_MAYMOVE | MREMAP_FIXED, s->extra) != s->extra)
        RFAIL("mremap move: %s", strerror(errno));
    if (map_anon(s->p, s->len, 0) != s->p)
        RFAIL("mapping the old address again");
    fill(s, NEW);
    return 0;
}
static int c_dontneed(rstate *s)
{
    if (madvise(s->p, s->len, MADV_DONTNEED) != 0)
        RFAIL("madvise: %s", strerror(errno));
    fill(s, NEW);
    return 0;
}
/* MADV_FREE, then MADV_PAGEOUT to make the kernel discard the clean pages now rather than under
   memory pressure, then refill */
static int c_madv_free(rstate *s)
{
    /* on one CPU: MADV_FREE queues the pages in a per-CPU batch that PAGEOUT drains only on its own CPU */
    cpu_set_t one, all;
    int cpu = sched_getcpu();
    sched_getaffinity(0, sizeof all, &all);
    CPU_ZERO(&one);
    CPU_SET(cpu < 0 ? 0 : cpu, &one);
    sched_setaffinity(0, sizeof one, &one);
    int rc = madvise(s->p, s->len, MADV_FREE);
    if (rc == 0)
        madvise(s->p, s->len, MADV_PAGEOUT);
    sched_setaffinity(0, sizeof all, &all);
    if (rc != 0)
        RFAIL("madvise FREE: %s", strerror(errno));
    fill(s, NEW);
    return 0;
}
static int b_shm(rstate *s)
{
    s->shm1 = shmget(IPC_PRIVATE, s->len, IPC_CREAT | 0600);
    s->shm2 = shmget(IPC_PRIVATE, s->len, IPC_CREAT | 0600);
    if (s->shm1 < 0 || s->shm2 < 0)
        RFAIL("shmget: %s", strerror(errno));
    s->p = (unsigned char *)shmat(s->shm1, NULL, 0);
    if (s->p == (unsigned char *)-1) {
        s->p = NULL;
        RFAIL("shmat: %s", strerror(errno));
    }
    fill(s, OLD);
    return 0;
}
static int c_shm(rstate *s)
{
    if (shmdt(s->p) != 0 || shmat(s->shm2, s->p, 0) != (void *)s->p)
        RFAIL("shmdt + shmat at %p: %s", (void *)s->p, strerror(errno));
    fill(s, NEW);
    return 0;
}
static void a_shm(rstate *s)
{
    if (s->p)
        shmdt(s->p);
    shmctl(s->shm1, IPC_RMID, NULL);
    shmctl(s->shm2, IPC_RMID, NULL);
}
static int c_syscalls(rstate *s)
{
    if (syscall(SYS_munmap, s->p, s->map_len) != 0 ||
        (unsigned char *)syscall(SYS_mmap, s->p, s->map_len, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != s->p)
        RFAIL("syscall(SYS_munmap / SYS_mmap): %s", strerror(errno));
    fill(s, NEW);
    return 0;
}
static void *thread_munmap(void *arg)
{
    rstate *s = (rstate *)arg;
    return (void *)(intptr_t)munmap(s->p, s->map_len);
}
static int c_other_thread(rstate *s)
{
    pthread_t t;
    void *ret = (void *)1;
    if (pthread_create(&t, NULL, thread_munmap, s) != 0)
        RFAIL("pthread_create");
    pthread_join(t, &ret);
    if (ret != NULL || map_anon(s->p, s->map_len, 0) != s->p)
        RFAIL("munmap in the thread, or mapping again");
    fill(s, NEW);
    return 0;
}
/* a file of len bytes of v, in /tmp */
static int tmpfile_of(size_t len, unsigned char v)
{
    char path[] = "/tmp/rdmax_route_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    unlink(path);
    unsigned char buf[4096];
    memset(buf, v, sizeof buf);
    for (size_t o = 0; o < len; o += sizeof buf)
        if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf) {
            close(fd);
            return -1;
        }
    return fd;
}
static int b_file(rstate *s)
{
    s->fd = tmpfile_of(s->len, OLD);
    s->fd2 = tmpfile_of(s->len, NEW);
    if (s->fd < 0 || s->fd2 < 0)
        RFAIL("files in /tmp: %s", strerror(errno));
    s->map_len = s->len;
    s->p = (unsigned char *)mmap(NULL, s->len, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
    if (s->p == MAP_FAILED) {
        s->p = NULL;
        RFAIL("mmap file: %s", strerror(errno));
    }
    return 0;
}
static int c_file(rstate *s)
{
    if (mmap(s->p, s->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, s->fd2, 0) != (void *)s->p)
        RFAIL("mmap(MAP_FIXED) of the second file: %s", strerror(errno));
    if (first_not(s->p, s->len, NEW) >= 0)
        RFAIL("the second file's mapping does not read NEW");
    return 0;
}
static void a_file(rstate *s)
{
    a_unmap(s);
    if (s->fd >= 0)
        close(s->fd);
    if (s->fd2 >= 0)
        close(s->fd2);
}
static int b_memfd(rstate *s)
{
    s->fd = memfd_create("rdmax_route", 0);
    if (s->fd < 0 || ftruncate(s->fd, (off_t)s->len) != 0)
        RFAIL("memfd: %s", strerror(errno));
    s->map_len = s->len;
    s->p = (unsigned char *)mmap(NULL, s->len, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
    if (s->p == MAP_FAILED) {
        s->p = NULL;
        RFAIL("mmap memfd: %s", strerror(errno));
    }
    fill(s, OLD);
    return 0;
}
static int c_truncate(rstate *s)
{
    if (ftruncate(s->fd, 0) != 0 || ftruncate(s->fd, (off_t)s->len) != 0)
        RFAIL("ftruncate: %s", strerror(errno));
    fill(s, NEW);
    return 0;
}
static int c_punch(rstate *s)
{
    if (fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)s->len) != 0)
        RFAIL("fallocate(PUNCH_HOLE): %s", strerror(errno));
    fill(s, NEW);
    return 0;
}

#define KIB 1024u
static const droute g_routes[] = {
    /* name                                   len       monitor hooks    control */
    {"free + malloc 16 KiB (malloc_trim)", 16 * KIB, 0, R_NEW, R_NEW, R_STALE, b_malloc, c_free_trim_malloc, a_free},
    {"free + malloc 1 MiB", MIB, 0, R_NEW, R_NEW, R_STALE, b_malloc, c_free_malloc, a_free},
    {"free + malloc 64 MiB", 64 * MIB, 4 * MIB, R_NEW, R_NEW, R_STALE, b_malloc, c_free_malloc, a_free},
    {"munmap + mmap MAP_FIXED", MIB, 0, R_NEW, R_NEW, R_STALE, b_anon, c_munmap_mmap_fixed, a_unmap},
    {"mmap MAP_FIXED over the buffer", MIB, 0, R_NEW, R_NEW, R_STALE, b_anon, c_mmap_fixed_over, a_unmap},
    {"mremap grow (moves)", MIB, 0, R_NEW, R_NEW, R_STALE, b_grow, c_mremap_grow, a_unmap},
    {"mremap shrink", MIB, 0, R_NEW, R_NEW, R_STALE, b_shrink, c_mremap_shrink, a_unmap},
    {"mremap move", MIB, 0, R_NEW, R_NEW, R_STALE, b_anon, c_mremap_move, a_unmap},
    {"madvise DONTNEED, refill", MIB, 0, R_NEW, R_NEW, R_STALE, b_anon, c_dontneed, a_unmap},
    /* the kernel (6.1) does not discard pages a registration pins, even on MADV_PAGEOUT: nothing goes
       stale, so no control can fail; the check is that the REMOVE event dropped the region */
    {"madvise FREE (+PAGEOUT), refill", MIB, 0, R_NEW, R_NEW, R_ANY, b_anon, c_madv_free, a_unmap},
    {"shmdt + shmat", MIB, 0, R_NEW, R_NEW, R_STALE, b_shm, c_shm, a_shm},
    {"syscall(SYS_munmap) + syscall(SYS_mmap)", MIB, 0, R_NEW, R_STALE, R_STALE, b_anon, c_syscalls, a_unmap},
    {"munmap by another thread", MIB, 0, R_NEW, R_NEW, R_STALE, b_anon, c_other_thread, a_unmap},
    {"file mapping replaced by another file's", MIB, 0, R_NEW, R_NEW, R_STALE, b_file, c_file, a_file},
    {"memfd MAP_SHARED ftruncate 0 and back", MIB, 0, R_NEW, R_STALE, R_STALE, b_memfd, c_truncate, a_file},
    {"memfd MAP_SHARED fallocate PUNCH_HOLE", MIB, 0, R_NEW, R_STALE, R_STALE, b_memfd, c_punch, a_file},
};

/* One route on one rig: R_NEW or R_STALE (what arrived after the change), -1 on a setup error. */
static int route_run(rig *r, const droute *rt, char *why, size_t wlen, rdmax_rcache_stats *d0, rdmax_rcache_stats *d1,
                     int *hit2)
{
    rstate s;
    int res = -1;
    memset(&s, 0, sizeof s);
    s.len = rt->len;
    s.plen = rt->put_len ? rt->put_len : rt->len;
    s.off = (s.len - s.plen) / 2;
    s.fd = s.fd2 = s.shm1 = s.shm2 = -1;
    if (rt->before(&s) != 0)
        goto out;
    memset(r->d, 0, s.plen);
    rdmax_status st = put_raw(r, s.p + s.off, s.plen, 0);
    if (st != RDMAX_OK || first_not(r->d, s.plen, OLD) >= 0) {
        snprintf(s.err, sizeof s.err, "first put: %s", st != RDMAX_OK ? rdmax_status_str(st) : "wrong data");
        goto out;
    }
    *d0 = stats(r);
    st = put_raw(r, s.p + s.off, s.plen, 0); /* cached memory: a hit */
    if (st != RDMAX_OK) {
        snprintf(s.err, sizeof s.err, "second put: %s", rdmax_status_str(st));
        goto out;
    }
    *hit2 = (int)(stats(r).hits - d0->hits);
    if (rt->change(&s) != 0)
        goto out;
    memset(r->d, 0, s.plen);
    *d0 = stats(r);
    st = put_raw(r, s.p + s.off, s.plen, 0);
    *d1 = stats(r);
    if (st != RDMAX_OK) {
        snprintf(s.err, sizeof s.err, "put after the change: %s", rdmax_status_str(st));
        goto out;
    }
    long bad = first_not(r->d, s.plen, NEW);
    res = bad < 0 ? R_NEW : R_STALE;
    if (bad >= 0)
        snprintf(s.err, sizeof s.err, "byte %ld is 0x%02x", bad, r->d[bad]);
out:
    snprintf(why, wlen, "%s", s.err);
    if (rt->after)
        rt->after(&s);
    return res;
}

static const char *rname(int v) { return v == R_NEW ? "new bytes" : v == R_STALE ? "stale bytes" : "either"; }

/* ---- shmat(SHM_REMAP) over a cached private range (issue 27, item 5) ----
   The kernel replaces the mapping with no userfaultfd UNMAP event (do_shmat maps with no list for
   one), and the registration goes with the old mapping. A region cached there serves the old pages on
   a hit until something drops it: the manual's route table says what a program must do. What must
   never happen is the address staying unwatched: after shmdt, munmap and a fresh mmap there, the new
   pages must arrive, and a later munmap must be seen (an event, an invalidation).
   remedy 1: the program calls rdmax_rcache_invalidate on the range before shmat(SHM_REMAP); steps:
     0 map 1 MiB, put it twice (cached)   1 invalidate, shmat(SHM_REMAP), NEW1, put
     2 shmdt, munmap, fresh mmap, NEW2, put   3 munmap + mmap(MAP_FIXED), NEW3, put (an event)
   remedy 0: no invalidate; the first quarter is what was cached:
     0 map 1 MiB, put its first quarter twice   1 shmat(SHM_REMAP), NEW1, put the first quarter (a hit
     on the old pages: stale where the monitor caches it, the documented gap)   2 shmdt, munmap, fresh
     mmap, NEW2, put the second half (a miss in the mapping, not touching the quarter, so not merged
     with it: the monitor finds the registration gone and drops the quarter's region)   3 put the first
     quarter (must be new)   4 munmap + mmap(MAP_FIXED), NEW3, put all (an event) */
#define SHM_STEPS 5
typedef struct shmrun {
    int got[SHM_STEPS];           /* R_NEW / R_STALE, -1 not run */
    long long hits[SHM_STEPS], misses[SHM_STEPS], inval[SHM_STEPS];
    int cached;                   /* step 0's second put was a hit */
    uint64_t unmap, lost;         /* the monitor's counters over the run */
    char err[160];
} shmrun;

static int shm_put(rig *r, shmrun *o, int step, const unsigned char *p, size_t len, unsigned char v)
{
    rdmax_rcache_stats s0 = stats(r), s1;
    memset(r->d, 0, len);
    rdmax_status st = put_raw(r, p, len, 0);
    s1 = stats(r);
    if (st != RDMAX_OK) {
        snprintf(o->err, sizeof o->err, "step %d: put: %s", step, rdmax_status_str(st));
        return -1;
    }
    o->got[step] = first_not(r->d, len, v) < 0 ? R_NEW : R_STALE;
    o->hits[step] = D(hits);
    o->misses[step] = D(misses);
    o->inval[step] = D(invalidations);
    return 0;
}

#define SFAIL(...) do { snprintf(o->err, sizeof o->err, __VA_ARGS__); goto done; } while (0)
static int shm_remap_run(rig *r, int remedy, shmrun *o)
{
    const size_t len = MIB, half = len / 2, quarter = len / 4;
    unsigned char *p = NULL;
    int id = -1, attached = 0, res = -1, last = 3;
    rdmax_rcache_monitor_info m0, m1;
    memset(o, 0, sizeof *o);
    for (int i = 0; i < SHM_STEPS; i++)
        o->got[i] = -1;
    size_t plen = remedy ? len : quarter;
    rdmax_rcache_query_monitor(&m0);
    if (!(p = map_anon(NULL, len, 0)))
        SFAIL("mmap: %s", strerror(errno));
    memset(p, OLD, len);
    if (shm_put(r, o, 0, p, plen, OLD) != 0)
        goto done;
    if (o->got[0] != R_NEW) /* what was cached at this address before: the poisoning this case is about */
        SFAIL("step 0: the first put of a fresh mapping got stale bytes");
    if (shm_put(r, o, 0, p, plen, OLD) != 0)
        goto done;
    o->cached = o->hits[0] == 1;
    /* 1 */
    if ((id = shmget(IPC_PRIVATE, len, IPC_CREAT | 0600)) < 0)
        SFAIL("shmget: %s", strerror(errno));
    if (remedy)
        rdmax_rcache_invalidate(rdmax_ctx_query_rcache(r->cs), p, len);
    if (shmat(id, p, SHM_REMAP) != (void *)p)
        SFAIL("shmat(SHM_REMAP) at %p: %s", (void *)p, strerror(errno));
    attached = 1;
    shmctl(id, IPC_RMID, NULL); /* gone with its last detach */
    memset(p, NEW, len);
    if (shm_put(r, o, 1, p, plen, NEW) != 0)
        goto done;
    /* 2 */
    attached = 0;
    if (shmdt(p) != 0 || munmap(p, len) != 0 || map_anon(p, len, 0) != p)
        SFAIL("shmdt, munmap, mmap at %p: %s", (void *)p, strerror(errno));
    memset(p, NEW + 1, len);
    if (remedy ? shm_put(r, o, 2, p, len, NEW + 1) : shm_put(r, o, 2, p + half, half, NEW + 1))
        goto done;
    if (!remedy) { /* 3: the first half, cached before the shmat */
        if (shm_put(r, o, 3, p, quarter, NEW + 1) != 0)
            goto done;
        last = 4;
    }
    /* the mapping is watched again: this munmap is an event */
    if (munmap(p, len) != 0 || map_anon(p, len, 1) != p)
        SFAIL("munmap + mmap(MAP_FIXED): %s", strerror(errno));
    memset(p, NEW + 2, len);
    if (shm_put(r, o, last, p, len, NEW + 2) != 0)
        goto done;
    res = 0;
done:
    rdmax_rcache_query_monitor(&m1);
    o->unmap = m1.unmap - m0.unmap;
    o->lost = m1.lost - m0.lost;
    if (attached)
        shmdt(p);
    else if (p)
        munmap(p, len);
    if (id >= 0)
        shmctl(id, IPC_RMID, NULL);
    return res;
}

static void shm_print(const char *who, const shmrun *o, int n)
{
    char line[400];
    int k = snprintf(line, sizeof line, "# route shmat(SHM_REMAP) %s: %s", who, o->cached ? "cached" : "not cached");
    for (int i = 1; i < n && k < (int)sizeof line; i++)
        k += snprintf(line + k, sizeof line - (size_t)k, "; step %d %s (hits %+lld misses %+lld invalidations %+lld)", i,
                      o->got[i] < 0 ? "not run" : rname(o->got[i]), o->hits[i], o->misses[i], o->inval[i]);
    printf("%s; monitor: unmap events +%llu, lost registrations +%llu\n", line, (unsigned long long)o->unmap,
           (unsigned long long)o->lost);
}

static void case_shm_remap(rig *r, rig *rm, const char *tag)
{
#ifdef RDMAX_MEMHOOKS
    const int hooks = 1; /* the shmat hook records the range it replaces */
#else
    const int hooks = 0;
#endif
    shmrun o, c;
    tl_begin("route/%sshmat(SHM_REMAP) over a cached range, rdmax_rcache_invalidate first", tag);
    REQUIRE(shm_remap_run(r, 1, &o) == 0, "%s", o.err);
    shm_print("invalidate first", &o, 4);
    CHECK(o.got[1] == R_NEW, "after invalidate + shmat(SHM_REMAP): %s", rname(o.got[1]));
    CHECK(o.got[2] == R_NEW, "after shmdt, munmap and a fresh mmap: %s (the address stayed unwatched)",
          rname(o.got[2]));
    CHECK(o.got[3] == R_NEW, "after munmap + mmap(MAP_FIXED) of the fresh mapping: %s", rname(o.got[3]));
    if (o.cached && !hooks) { /* the monitor caches: the fresh mapping was watched, its munmap an event */
        CHECK(o.misses[1] == 1 && o.hits[2] == 0, "shared memory was cached: step 1 misses %+lld, step 2 hits %+lld",
              o.misses[1], o.hits[2]);
        CHECK(o.inval[3] >= 1 && o.unmap >= 1, "munmap of the fresh mapping: invalidations %+lld, unmap events +%llu",
              o.inval[3], (unsigned long long)o.unmap);
    }
    if (rm) { /* the same on a MANUAL cache: the shared pages cached at step 1 arrive at step 2 */
        rdmax_rcache_invalidate(rdmax_ctx_query_rcache(rm->cs), NULL, SIZE_MAX);
        REQUIRE(shm_remap_run(rm, 1, &c) == 0, "control: %s", c.err);
        shm_print("invalidate first, control", &c, 4);
        CHECK(c.got[2] == R_STALE, "control: step 2 got %s, expected stale bytes: the check cannot fail",
              rname(c.got[2]));
    }
out:
    tl_end();
}

static void case_shm_remap_plain(rig *r, rig *rm, const char *tag)
{
#ifdef RDMAX_MEMHOOKS
    const int hooks = 1;
#else
    const int hooks = 0;
#endif
    shmrun o, c;
    int exp1;
    tl_begin("route/%sshmat(SHM_REMAP) over a cached range, no invalidate (stale until a miss there, as documented)",
             tag);
    REQUIRE(shm_remap_run(r, 0, &o) == 0, "%s", o.err);
    shm_print("no invalidate", &o, 5);
    /* step 1 is a hit on the old pages where the monitor caches: no event, nothing to drop it */
    exp1 = o.cached && !hooks ? R_STALE : R_NEW;
    CHECK(o.got[1] == exp1, "after shmat(SHM_REMAP): %s, expected %s (the manual's route table)", rname(o.got[1]),
          rname(exp1));
    CHECK(o.got[2] == R_NEW, "the other half after shmdt, munmap and a fresh mmap: %s", rname(o.got[2]));
    CHECK(o.got[3] == R_NEW, "the cached quarter after shmdt, munmap, a fresh mmap and a miss there: %s", rname(o.got[3]));
    CHECK(o.got[4] == R_NEW, "after munmap + mmap(MAP_FIXED) of the fresh mapping: %s", rname(o.got[4]));
    if (o.cached && !hooks) {
        CHECK(o.inval[2] >= 1 && o.lost >= 1, "the miss in the replaced mapping: invalidations %+lld, lost +%llu",
              o.inval[2], (unsigned long long)o.lost);
        CHECK(o.inval[4] >= 1 && o.unmap >= 1, "munmap of the fresh mapping: invalidations %+lld, unmap events +%llu",
              o.inval[4], (unsigned long long)o.unmap);
    }
    if (rm) {
        rdmax_rcache_invalidate(rdmax_ctx_query_rcache(rm->cs), NULL, SIZE_MAX);
        REQUIRE(shm_remap_run(rm, 0, &c) == 0, "control: %s", c.err);
        shm_print("no invalidate, control", &c, 5);
        CHECK(c.got[1] == R_STALE && c.got[3] == R_STALE,
              "control: steps 1 and 3 got %s and %s, expected stale bytes: the check cannot fail", rname(c.got[1]),
              rname(c.got[3]));
    }
out:
    tl_end();
}

static void case_routes(rig *r, rig *rm, const char *tag)
{
    for (size_t i = 0; i < sizeof g_routes / sizeof g_routes[0]; i++) {
        const droute *rt = &g_routes[i];
#ifdef RDMAX_MEMHOOKS
        int exp = rt->exp_hooks;
#else
        int exp = rt->exp_monitor;
#endif
        char why[200];
        int hit2 = 0;
        rdmax_rcache_stats s0, s1;
        memset(&s0, 0, sizeof s0);
        memset(&s1, 0, sizeof s1);
        tl_begin("route/%s%s", tag, rt->name);
        int got = route_run(r, rt, why, sizeof why, &s0, &s1, &hit2);
        REQUIRE(got >= 0, "%s", why);
        CHECK(exp == R_ANY || got == exp, "the receiver got %s, expected %s (%s)", rname(got), rname(exp), why);
#ifndef RDMAX_MEMHOOKS
        /* cached before the change: the monitor must have dropped it (a miss), whatever the bytes */
        CHECK(!hit2 || (D(misses) == 1 && D(hits) == 0 && D(invalidations) >= 1),
              "cached before the change, then hits %+lld misses %+lld invalidations %+lld", D(hits), D(misses),
              D(invalidations));
#endif
        printf("# route %s: %s; second put %s; after the change: hits %+lld misses %+lld invalidations %+lld "
               "uncached %+lld\n", rt->name, rname(got), hit2 ? "a hit" : "a miss", D(hits), D(misses),
               D(invalidations), D(uncached));
        if (rm) { /* the default build: a sender in mode RDMAX_RCACHE_MANUAL */
            /* what earlier routes left in the control's cache is stale by now: start clean */
            rdmax_rcache_invalidate(rdmax_ctx_query_rcache(rm->cs), NULL, SIZE_MAX);
            got = route_run(rm, rt, why, sizeof why, &s0, &s1, &hit2);
            REQUIRE(got >= 0, "control: %s", why);
            CHECK(rt->exp_control == R_ANY || got == rt->exp_control,
                  "control (no invalidation): the receiver got %s, expected %s: the check cannot fail", rname(got),
                  rname(rt->exp_control));
            printf("# route %s: control got %s\n", rt->name, rname(got));
        }
    out:
        tl_end();
    }
    case_shm_remap(r, rm, tag);
    case_shm_remap_plain(r, rm, tag);
}

int main(int argc, char **argv)
{
    int only_routes = argc > 1 && !strcmp(argv[1], "routes");
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    /* No cache anywhere in the process yet: this one needs that. */
    if (!only_routes)
        case_disabled();
    {
        rdmax_rcache_monitor_info mi;
        rdmax_rcache_query_monitor(&mi);
        printf("# memory monitor: %s; memory hooks 0x%x\n", mi.usable ? mi.why : "none", rdmax_rcache_memhooks());
    }

    /* glibc raises its mmap threshold to the size of each mmap'ed block it frees (page-rounded), so a
       second malloc of the same size would come from the heap: a fixed threshold keeps the 1 MiB
       route a real munmap + mmap (the test's own setting; rdmax changes none). */
    mallopt(M_MMAP_THRESHOLD, 512 * 1024);
    rig r, rm;
    memset(&rm, 0, sizeof rm);
    tl_begin("setup/rig and cache");
    int ok = rig_open(&r, NULL, 64 * MIB) == 0;
    CHECK(ok, "rig: %s", g_lastlog);
#ifndef RDMAX_MEMHOOKS
    if (ok) {
        rdmax_ctx_desc md;
        memset(&md, 0, sizeof md);
        md.rcache_mode = RDMAX_RCACHE_MANUAL; /* the controls: nothing invalidates */
        ok = rig_open(&rm, &md, 64 * MIB) == 0;
        CHECK(ok, "control rig: %s", g_lastlog);
    }
#endif
    if (ok)
        CHECK(warm_cache(&r) == 0, "warm-up put through the cache failed");
    ok = tl_end();
    {
        /* where the monitor cannot run, the first context said so, once; where it runs, nothing */
        rdmax_rcache_monitor_info mi;
        rdmax_rcache_query_monitor(&mi);
        tl_begin("monitor/%s", mi.usable ? "runs: no warning" : "unavailable: said once at context creation");
        int hooks = (rdmax_rcache_memhooks() & (RDMAX_RCACHE_HOOKS_INTERPOSED | RDMAX_RCACHE_HOOKS_MALLOPT)) ==
                    (RDMAX_RCACHE_HOOKS_INTERPOSED | RDMAX_RCACHE_HOOKS_MALLOPT);
        CHECK(g_nomon_logs == (mi.usable || hooks ? 0 : 1), "%d 'no memory monitor' warnings for %d contexts (%s)",
              g_nomon_logs, only_routes ? 4 : 6, mi.why);
        tl_end();
    }
#ifdef RDMAX_MEMHOOKS
    if (ok && !only_routes)
        case_free_malloc(&r); /* a hit under the malloc policy (before the routes fragment the heap) */
#endif
    if (ok)
        case_routes(&r, rm.cs ? &rm : NULL, "");
    rig_close(&rm);
    if (only_routes) {
        rig_close(&r);
        return tl_failed_total ? 1 : 0;
    }
    {
        /* a thread that malloc'ed before any cache: its arena outlives it (case_thread_arena) */
        /* a small stack: glibc caches it at exit, and case_first_use needs its 8 MiB thread stack
           to be a new mapping, not this one reused */
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setstacksize(&at, 256 * 1024);
        if (pthread_create(&th, &at, arena_maker, NULL) == 0)
            pthread_join(th, NULL);
        pthread_attr_destroy(&at);
    }
    case_first_use();
    if (ok) {
        case_munmap_mmap(&r, 1);
        case_munmap_mmap(&r, 0);
        case_mremap(&r);
        case_madvise(&r);
        case_invalidate(&r);
        case_get(&r);
        case_readonly(&r);
        case_fork(&r);
        case_thread_arena(&r);
        tl_begin("final/cache invariants and error logs");
        CHECK(rdmax__rcache_validate(rdmax_ctx_query_rcache(r.cs)) == 0, "rdmax__rcache_validate %d",
              rdmax__rcache_validate(rdmax_ctx_query_rcache(r.cs)));
        CHECK(rdmax_ep_query_error(r.a) == RDMAX_OK, "sender endpoint in error: %s", rdmax_status_str(rdmax_ep_query_error(r.a)));
        tl_end();
    }
    rig_close(&r);
    case_eviction();
    case_batch_fail();
    tl_begin("errors logged");
    CHECK(g_errlogs == 0, "%d error messages, last: %s", g_errlogs, g_lastlog);
    tl_end();
    return tl_failed_total ? 1 : 0;
}
