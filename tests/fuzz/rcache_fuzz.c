/* Fuzz target: the registration cache's range operations, through its public API only
   (rdmax_rcache_create, get, put, invalidate, drain, destroy), with fake register/deregister operations,
   against a model of what the API promises rather than of how the cache is built (so a rework of the
   cache's insides keeps this target valid):
   - a get returns a region that covers the request, with at least the access asked for, registered by
     the fake (start, end, access and keys as registered), holding exactly the references handed out;
   - never a region whose memory was invalidated after it was registered (any page of it);
   - a get fails only with what the register operation said (memory that is not there: a "hole" page),
     or INVAL for a range that wraps; a request whose own pages have no hole always succeeds (a larger
     merged registration that fails falls back to the request alone);
   - deregistration happens exactly once per registration, never while a user holds a reference;
   - over max_regions or max_bytes only while every registration is in use;
   - at destroy, with everything put back, every registration is deregistered and none is reported held.
   Addresses are numbers, never touched: two windows straddling radix-table boundaries, and one above the
   range the page table covers. The input chooses the limits, the locking mode, the caching mode (mostly
   MANUAL, which caches) and every operation. */
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#include "../../rdmax.h"
#define FUZZ_NAME "rcache"
#include "fuzz.h"

#include <unistd.h>

enum { NWIN = 3, WINPAGES = 192, MAXREG = 4096, MAXHELD = 32, MAXHOLES = 6 };

typedef struct freg {
    uintptr_t start, end;
    unsigned access;
    int live;
    uint64_t seq;             /* when it was registered */
    rdmax_rcache_region *r;
} freg;

static struct {
    size_t P;
    uintptr_t win[NWIN];
    uint64_t inval[NWIN][WINPAGES]; /* when each page was last invalidated */
    unsigned char hole[NWIN][WINPAGES];
    freg reg[MAXREG];
    int nreg, live;
    uint64_t live_bytes;
    uint64_t seq;
    rdmax_rcache_region *held[MAXHELD];
    int nheld;
    size_t max_regions, max_bytes;
} F;

/* page -> (window, index), or -1 */
static int win_of(uintptr_t a, int *idx)
{
    for (int w = 0; w < NWIN; w++)
        if (a >= F.win[w] && a < F.win[w] + WINPAGES * F.P) {
            *idx = (int)((a - F.win[w]) / F.P);
            return w;
        }
    return -1;
}

static int has_hole(uintptr_t s, uintptr_t e)
{
    for (uintptr_t a = s; a < e; a += F.P) {
        int i, w = win_of(a, &i);
        if (w >= 0 && F.hole[w][i])
            return 1;
    }
    return 0;
}

static int holds(uint32_t lkey)
{
    int n = 0;
    for (int i = 0; i < F.nheld; i++)
        n += F.held[i]->lkey == lkey;
    return n;
}

static int fake_reg(void *arg, void *addr, size_t len, unsigned access, rdmax_rcache_region *r)
{
    (void)arg;
    uintptr_t a = (uintptr_t)addr;
    FZ_CHECK(a % F.P == 0 && len % F.P == 0 && len > 0, "reg of an unaligned range %#lx+%zu", (unsigned long)a, len);
    FZ_CHECK(a == r->start && a + len == r->end && access == r->access, "reg arguments disagree with the region");
    if (has_hole(a, a + len))
        return -EFAULT;
    FZ_CHECK(F.nreg < MAXREG, "too many registrations for the test");
    freg *g = &F.reg[F.nreg++];
    g->start = a;
    g->end = a + len;
    g->access = access;
    g->live = 1;
    g->seq = ++F.seq;
    g->r = r;
    r->lkey = (uint32_t)F.nreg;
    r->rkey = (uint32_t)F.nreg ^ 0x5a5a0000u;
    r->mr = (void *)(uintptr_t)(0x1000 + F.nreg);
    F.live++;
    F.live_bytes += len;
    return 0;
}

static void fake_dereg(void *arg, rdmax_rcache_region *r)
{
    (void)arg;
    FZ_CHECK(r->lkey >= 1 && (int)r->lkey <= F.nreg, "dereg of unknown lkey %u", r->lkey);
    freg *g = &F.reg[r->lkey - 1];
    FZ_CHECK(g->live, "lkey %u deregistered twice", r->lkey);
    FZ_CHECK(g->r == r && g->start == r->start && g->end == r->end && g->access == r->access &&
             r->mr == (void *)(uintptr_t)(0x1000 + r->lkey), "dereg of lkey %u does not match its registration", r->lkey);
    FZ_CHECK(holds(r->lkey) == 0, "lkey %u deregistered while a user holds %d references", r->lkey, holds(r->lkey));
    g->live = 0;
    F.live--;
    F.live_bytes -= g->end - g->start;
}

static void check_limits(void)
{
    if ((size_t)F.live <= F.max_regions && F.live_bytes <= F.max_bytes)
        return;
    for (int i = 0; i < F.nreg; i++)
        FZ_CHECK(!F.reg[i].live || holds((uint32_t)i + 1) > 0, "%d registrations, %llu bytes (limits %zu, %zu), "
                 "yet lkey %d is unused and still registered", F.live, (unsigned long long)F.live_bytes,
                 F.max_regions, F.max_bytes, i + 1);
}

static void do_get(fz_in *in, rdmax_rcache *rc)
{
    uintptr_t a;
    size_t len;
    unsigned acc = fz_below(in, 8);
    int wild = fz_below(in, 32) == 31;
    if (wild) {
        /* ranges that wrap, or sit at the very top of the address space */
        a = UINTPTR_MAX - fz_below(in, 3 * 4096);
        len = (size_t)fz_u16(in) * (fz_below(in, 2) ? 4096 : 1);
    } else {
        int w = (int)fz_below(in, NWIN);
        unsigned pg = fz_below(in, WINPAGES), np = fz_below(in, 8) == 7 ? 1 + fz_below(in, 100) : 1 + fz_below(in, 4);
        if (pg + np > WINPAGES)
            np = WINPAGES - pg;
        a = F.win[w] + (uintptr_t)pg * F.P + fz_below(in, (unsigned)F.P);
        len = (np - 1) * F.P + fz_below(in, (unsigned)F.P) + (fz_below(in, 8) == 7 ? 0 : 1);
        if (a + len > F.win[w] + (uintptr_t)(pg + np) * F.P)
            len = F.win[w] + (uintptr_t)(pg + np) * F.P - a;
    }
    rdmax_rcache_region *r = NULL;
    rdmax_status st = rdmax_rcache_get(rc, (void *)a, len, acc, &r);
    size_t l1 = len ? len : 1;
    if (a + l1 < a || a + l1 - 1 >= UINTPTR_MAX - F.P + 1) {
        /* wraps, or its page-rounded end would */
        FZ_CHECK(st == RDMAX_ERR_INVALID_PARAM, "get of a wrapping range %#lx+%zu: %d", (unsigned long)a, len, st);
        return;
    }
    uintptr_t ps = a / F.P * F.P, pe = (a + l1 + F.P - 1) / F.P * F.P;
    if (st != 0) {
        /* the op's -EFAULT is RDMAX_ERR_INVALID_PARAM */
        FZ_CHECK(st == RDMAX_ERR_INVALID_PARAM || st == RDMAX_ERR_NO_MEMORY,
                 "get %#lx+%zu: status %d is nothing the register operation said", (unsigned long)a, len, st);
        if (!wild)
            FZ_CHECK(st != RDMAX_ERR_INVALID_PARAM || has_hole(ps, pe), "get %#lx+%zu failed (%d) although its own pages have no "
                     "hole", (unsigned long)a, len, st);
        return;
    }
    FZ_CHECK(r != NULL, "get succeeded without a region");
    FZ_CHECK(r->start <= a && a + l1 <= r->end, "region [%#lx,%#lx) does not cover %#lx+%zu", (unsigned long)r->start,
             (unsigned long)r->end, (unsigned long)a, len);
    FZ_CHECK((r->access & acc) == acc, "region access %u lacks %u", r->access, acc);
    FZ_CHECK(r->lkey >= 1 && (int)r->lkey <= F.nreg, "region with unknown lkey %u", r->lkey);
    freg *g = &F.reg[r->lkey - 1];
    FZ_CHECK(g->live && g->r == r && g->start == r->start && g->end == r->end && g->access == r->access &&
             r->rkey == (r->lkey ^ 0x5a5a0000u), "region lkey %u is not what was registered", r->lkey);
    FZ_CHECK(rdmax_rcache_region_valid(r), "get returned a region marked invalid");
    for (uintptr_t p = r->start; p < r->end; p += F.P) {
        int i, w = win_of(p, &i);
        FZ_CHECK(w < 0 || F.inval[w][i] < g->seq, "get returned lkey %u, registered before page %#lx was invalidated",
                 r->lkey, (unsigned long)p);
    }
    if (F.nheld == MAXHELD) {
        rdmax_rcache_release(rc, r);
        return;
    }
    F.held[F.nheld++] = r;
    FZ_CHECK(r->refcount == (uint32_t)holds(r->lkey), "lkey %u: refcount %u, the user holds %d", r->lkey, r->refcount,
             holds(r->lkey));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    memset(&F, 0, sizeof F);
    F.P = (size_t)sysconf(_SC_PAGESIZE);
    /* window 0 straddles a level-1 boundary (2^15 pages), window 1 a root boundary (2^24 pages), window 2
       lies above the 2^36 pages the table covers */
    F.win[0] = (uintptr_t)((UINT64_C(5) << 15) - 100) * F.P;
    F.win[1] = (uintptr_t)((UINT64_C(3) << 24) - 100) * F.P;
    F.win[2] = (uintptr_t)(UINT64_C(1) << 37) * F.P;
    rdmax_rcache_desc d;
    memset(&d, 0, sizeof d);
    d.ops.reg = fake_reg;
    d.ops.dereg = fake_dereg;
    d.max_regions = fz_below(&in, 4) == 3 ? 0 : 1 + fz_below(&in, 24);
    d.max_bytes = fz_below(&in, 4) == 3 ? (1 + fz_below(&in, 200)) * F.P : 0;
    d.thread_safe = fz_below(&in, 4) == 3;
    /* MANUAL caches every range (the program invalidates, as this one does): the range operations run. In
       AUTO a range is cached only where a memory monitor sees it, and these addresses are numbers no
       monitor watches, so everything would go uncached past the cache's tree and LRU (as it did). */
    d.mode = fz_below(&in, 8) == 7 ? RDMAX_RCACHE_AUTO : RDMAX_RCACHE_MANUAL;
    F.max_regions = d.max_regions ? d.max_regions : RDMAX_RCACHE_DEFAULT_MAX_REGIONS;
    F.max_bytes = d.max_bytes ? d.max_bytes : SIZE_MAX;
    rdmax_rcache *rc = NULL;
    FZ_CHECK(rdmax_rcache_create(&d, &rc) == 0 && rc, "create");
    int steps = 0;
    while (fz_left(&in) && steps++ < 3000) {
        unsigned op = fz_below(&in, 16);
        if (op < 7 || F.nheld == 0) {
            do_get(&in, rc);
        } else if (op < 12) {
            int k = (int)fz_below(&in, (unsigned)F.nheld);
            rdmax_rcache_region *r = F.held[k];
            F.held[k] = F.held[--F.nheld];
            rdmax_rcache_release(rc, r);
        } else if (op < 14) {
            int w = (int)fz_below(&in, NWIN);
            unsigned pg = fz_below(&in, WINPAGES), np = 1 + fz_below(&in, 16);
            uintptr_t a = F.win[w] + (uintptr_t)pg * F.P + fz_below(&in, (unsigned)F.P);
            size_t len = np * F.P - fz_below(&in, (unsigned)F.P);
            /* the model first: a region registered from now on is newer than this invalidation */
            uint64_t t = ++F.seq;
            for (uintptr_t p = a / F.P * F.P; len && p < a + len; p += F.P) {
                int i, ww = win_of(p, &i);
                if (ww >= 0)
                    F.inval[ww][i] = t;
            }
            int n = rdmax_rcache_invalidate(rc, (void *)a, len);
            FZ_CHECK(n >= 0, "invalidate %#lx+%zu: %d", (unsigned long)a, len, n);
        } else if (op == 14) {
            /* memory changes behind the cache's back: registrations of it fail from now on */
            int w = (int)fz_below(&in, NWIN), i = (int)fz_below(&in, WINPAGES), nh = 0;
            for (int x = 0; x < NWIN; x++)
                for (int y = 0; y < WINPAGES; y++)
                    nh += F.hole[x][y];
            if (F.hole[w][i] || nh < MAXHOLES)
                F.hole[w][i] ^= 1;
        } else {
            if (fz_below(&in, 2)) {
                FZ_CHECK(rdmax_rcache_drain(rc) >= 0, "drain failed");
            } else {
                FZ_CHECK(rdmax_rcache_invalidate(rc, (void *)(UINTPTR_MAX - 10), 100) == RDMAX_ERR_INVALID_PARAM,
                         "invalidate of a wrapping range not refused");
            }
        }
        check_limits();
    }
    while (F.nheld)
        rdmax_rcache_release(rc, F.held[--F.nheld]);
    check_limits();
    int still = rdmax_rcache_destroy(rc);
    FZ_CHECK(still == 0, "destroy found %d regions held after everything was put back", still);
    FZ_CHECK(F.live == 0, "%d registrations never deregistered", F.live);
    return 0;
}
