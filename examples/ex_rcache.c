/* ex_rcache - raw buffers (malloc'd, no rdmax_mem) through the registration cache.

   Shows: passing mem NULL to rdmax_put: rdmax registers the buffer on first use (a miss) and reuses the
   registration afterwards (hits), so a program need not register what it sends; the cache's counters
   (rdmax_rcache_query_stats); and that freeing the buffer and allocating again is safe: the memory
   monitor drops the stale registration, and the new contents are what arrives.
   Run: build/ex_rcache [DEVICE]     (no DEVICE: $RDMAX_DEVICE, else the first active device)
   Exits 0 only if every put delivered the buffer's current contents and, where the memory monitor runs,
   repeated puts of one buffer hit the cache. */
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#include "../rdmax.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEN (1u << 20) /* over the inline limit, so the cache is used; large enough for malloc to mmap it */
#define ROUNDS 10

static rdmax_ctx *g_ctx;
static rdmax_ep *g_a;
static rdmax_mem *g_target;

static void die(const char *what, rdmax_status st)
{
    fprintf(stderr, "ex_rcache: %s: %s\n", what, rdmax_status_str(st));
    exit(1);
}

/* Fill buf with a pattern of `seed`, put it raw (mem NULL), wait, and check the target. */
static int put_and_check(unsigned char *buf, unsigned seed)
{
    for (size_t i = 0; i < LEN; i++)
        buf[i] = (unsigned char)(i * 31 + seed);
    const rdmax_rbuf *r = rdmax_ep_query_remote(g_a, 0);
    rdmax_comp c = {0};
    rdmax_status st = rdmax_put(g_a, buf, LEN, NULL, r->addr, r->rkey, &c);
    if (st != RDMAX_INPROGRESS)
        die("rdmax_put", st);
    while (!c.done)
        rdmax_progress(g_ctx);
    if (c.status != RDMAX_OK)
        die("put completion", c.status);
    return memcmp(g_target->addr, buf, LEN) == 0;
}

static void print_stats(const char *when, rdmax_rcache_stats *s)
{
    /* The cache is made on the first raw buffer: before that there is none, and nothing to count. */
    rdmax_rcache *rc = rdmax_ctx_query_rcache(g_ctx);
    memset(s, 0, sizeof *s);
    if (rc)
        rdmax_rcache_query_stats(rc, s);
    printf("%-28s hits %3llu  misses %3llu  invalidations %llu  uncached %llu\n", when,
           (unsigned long long)s->hits, (unsigned long long)s->misses, (unsigned long long)s->invalidations,
           (unsigned long long)s->uncached);
}

int main(int argc, char **argv)
{
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.device = argc > 1 ? argv[1] : NULL;
    rdmax_status st = rdmax_ctx_create(&cd, &g_ctx);
    if (st != RDMAX_OK)
        die("rdmax_ctx_create", st);
    /* The target is registered as usual: the cache serves local buffers, the peer needs an rkey. */
    if ((st = rdmax_mem_alloc(g_ctx, LEN, RDMAX_ACCESS_REMOTE_WRITE, &g_target)) != RDMAX_OK)
        die("rdmax_mem_alloc", st);
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.expose = g_target;
    rdmax_ep *b;
    if ((st = rdmax_ep_create_pair(g_ctx, &d, &g_a, &b)) != RDMAX_OK)
        die("rdmax_ep_create_pair", st);
    if (!rdmax_ep_query_remote(g_a, 0)) {
        fprintf(stderr, "ex_rcache: the peer advertised no buffer\n");
        return 1;
    }

    /* In the default mode (RDMAX_RCACHE_AUTO) a range is cached only while the memory monitor can see
       it change; without the monitor every put registers for itself (correct, but no hits). */
    rdmax_rcache_monitor_info mon;
    rdmax_rcache_query_monitor(&mon);
    printf("memory monitor: %s\n", mon.usable ? "usable" : mon.why);

    rdmax_rcache_stats s0, s1, s2;
    print_stats("start", &s0);
    int ok = 1;
    unsigned char *buf = (unsigned char *)malloc(LEN);
    if (!buf) {
        fprintf(stderr, "ex_rcache: out of memory\n");
        return 1;
    }
    for (unsigned i = 0; i < ROUNDS; i++)
        ok &= put_and_check(buf, i);
    print_stats("after 10 puts of one buffer", &s1);
    uint64_t hits = s1.hits - s0.hits, misses = s1.misses - s0.misses;
    if (mon.usable && (misses != 1 || hits != ROUNDS - 1)) {
        fprintf(stderr, "ex_rcache: expected 1 miss then %d hits, got %llu and %llu\n", ROUNDS - 1,
                (unsigned long long)misses, (unsigned long long)hits);
        ok = 0;
    }

    /* Free and allocate again: the new buffer may sit at the same address over new pages. A stale
       registration would still point at the old pages and put their contents; the monitor saw the
       munmap and dropped it, so the next put registers the new pages (a miss) and sends what is there. */
    uintptr_t old = (uintptr_t)buf;
    free(buf);
    buf = (unsigned char *)malloc(LEN);
    if (!buf) {
        fprintf(stderr, "ex_rcache: out of memory\n");
        return 1;
    }
    printf("new buffer at %s address\n", (uintptr_t)buf == old ? "the same" : "another");
    for (unsigned i = 0; i < ROUNDS; i++)
        ok &= put_and_check(buf, 100 + i);
    print_stats("after free, malloc, 10 puts", &s2);
    if (mon.usable && s2.hits - s1.hits != ROUNDS - 1) {
        fprintf(stderr, "ex_rcache: the new buffer did not hit the cache after its first put\n");
        ok = 0;
    }
    free(buf);

    rdmax_ep_destroy(g_a);
    rdmax_ep_destroy(b);
    rdmax_mem_free(g_target);
    rdmax_ctx_destroy(g_ctx);
    if (!ok) {
        fprintf(stderr, "ex_rcache: failed\n");
        return 1;
    }
    printf("ok\n");
    return 0;
}
