/* Host tests of the registration cache with a fake-but-honest ops table and a reference model.

   Build and run (from the repository root):
     cc -std=c11 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -D_GNU_SOURCE \
        -DRDMAX_IMPLEMENTATION -I. tests/rcache_test.c -lpthread -o rcache_test
     ./rcache_test [seed [steps]]

   The fake ops keep every registration in a table, check that each dereg matches a live reg
   exactly once, hand out distinct lkeys (index + 1), and fail a registration that covers a
   "hole" page (memory unmapped behind the cache's back). The random test replays one million
   get/put/hold/invalidate/hole steps against a naive model of the documented policy (merge,
   touching merge, union of access, exact LRU, soft limits, registration fallbacks) and compares
   results, deregistrations and every counter after every step. Prints PASS/FAIL lines; exits
   non-zero on failure. */
#define RDMAX_TRANSPORT_RC
#ifndef RDMAX_IMPLEMENTATION
#define RDMAX_IMPLEMENTATION
#endif
#include "rdmax.h"

#include "testlib.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Failures: ASSERT (tests/testlib.h) prints "FAIL name: why (file:line)" and abandons the test, whose
   cache state is not worth walking after a failed check; the random test's REQUIRE goes to its cleanup,
   with the seed and step to replay in tl_where. */
static size_t P; /* page size */
static uint64_t g_seed;
static long g_steps;

/* ------------------------------------------------------------------------------------------ */
/* fake ops                                                                                    */

typedef struct fake_rec {
    uintptr_t start, end;
    unsigned access;
    int live;
    rdmax_rcache_region *r;
} fake_rec;

typedef struct fake {
    fake_rec *v;
    size_t n, cap;
    uint64_t live;
    uintptr_t hole_base; /* pages [hole_base, hole_base + nholes*P) may have holes */
    unsigned char *holes;
    size_t nholes;
    uint32_t *log; /* lkeys deregistered since the last fake_log_reset */
    size_t nlog, caplog;
    uint64_t nreg, nfail, ndereg;
    char err[512];
} fake;

static void fake_error(fake *f, const char *fmt, ...)
{
    va_list ap;
    if (f->err[0]) return;
    va_start(ap, fmt);
    vsnprintf(f->err, sizeof f->err, fmt, ap);
    va_end(ap);
}

static int fake_has_hole(const fake *f, uintptr_t s, uintptr_t e)
{
    uintptr_t a;
    if (!f->holes) return 0;
    for (a = s; a < e; a += P)
        if (a >= f->hole_base && (a - f->hole_base) / P < f->nholes && f->holes[(a - f->hole_base) / P]) return 1;
    return 0;
}

static int fake_reg(void *arg, void *addr, size_t len, unsigned access, rdmax_rcache_region *r)
{
    fake *f = (fake *)arg;
    uintptr_t a = (uintptr_t)addr;
    if (a != r->start || a + len != r->end || access != r->access)
        fake_error(f, "reg args disagree with region: %#lx+%zu vs [%#lx,%#lx)", (unsigned long)a, len,
                   (unsigned long)r->start, (unsigned long)r->end);
    if ((a % P) || (len % P) || len == 0) fake_error(f, "reg of unaligned range %#lx+%zu", (unsigned long)a, len);
    if (fake_has_hole(f, a, a + len)) {
        f->nfail++;
        return -EFAULT;
    }
    if (f->n == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 1024;
        f->v = (fake_rec *)realloc(f->v, f->cap * sizeof(*f->v));
        if (!f->v) abort();
    }
    f->v[f->n].start = a;
    f->v[f->n].end = a + len;
    f->v[f->n].access = access;
    f->v[f->n].live = 1;
    f->v[f->n].r = r;
    f->n++;
    r->lkey = (uint32_t)f->n;
    r->rkey = (uint32_t)f->n ^ 0x5a5a0000u;
    r->mr = (void *)(uintptr_t)(0x1000 + f->n);
    f->live++;
    f->nreg++;
    return 0;
}

static void fake_dereg(void *arg, rdmax_rcache_region *r)
{
    fake *f = (fake *)arg;
    size_t i = (size_t)r->lkey - 1;
    if (r->lkey == 0 || i >= f->n) {
        fake_error(f, "dereg of unknown lkey %u", r->lkey);
        return;
    }
    if (!f->v[i].live) {
        fake_error(f, "double dereg of lkey %u", r->lkey);
        return;
    }
    if (f->v[i].r != r || f->v[i].start != r->start || f->v[i].end != r->end || f->v[i].access != r->access ||
        r->mr != (void *)(uintptr_t)(0x1000 + r->lkey) || r->rkey != (r->lkey ^ 0x5a5a0000u))
        fake_error(f, "dereg of lkey %u does not match its registration", r->lkey);
    f->v[i].live = 0;
    f->live--;
    f->ndereg++;
    if (f->nlog == f->caplog) {
        f->caplog = f->caplog ? f->caplog * 2 : 256;
        f->log = (uint32_t *)realloc(f->log, f->caplog * sizeof(*f->log));
        if (!f->log) abort();
    }
    f->log[f->nlog++] = r->lkey;
}

static void fake_free(fake *f)
{
    free(f->v);
    free(f->log);
    free(f->holes);
    memset(f, 0, sizeof(*f));
}

static rdmax_rcache *mk(fake *f, size_t max_regions, size_t max_bytes, int ts)
{
    rdmax_rcache_desc d;
    rdmax_rcache *rc = NULL;
    memset(&d, 0, sizeof d);
    d.ops.reg = fake_reg;
    d.ops.dereg = fake_dereg;
    d.ops.arg = f;
    d.max_regions = max_regions;
    d.max_bytes = max_bytes;
    d.thread_safe = ts;
    d.mode = RDMAX_RCACHE_MANUAL; /* fake addresses: the bookkeeping under the program's promise */
    ASSERT(rdmax_rcache_create(&d, &rc) == 0, "setup: rdmax_rcache_create");
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* reference model                                                                             */

typedef struct mreg {
    uint64_t s, e; /* pages */
    unsigned acc;
    uint32_t ref;
    uint64_t last_use;
    int in_lookup, live;
} mreg;

typedef struct model {
    mreg *v; /* indexed by lkey-1 */
    size_t n, cap;
    uint64_t clock;
    uint64_t max_r, max_b;
    int over;
    rdmax_rcache_stats st;
    uint32_t *deregs;
    size_t ndereg, capd;
    uint32_t live[4096]; /* lkeys of live registrations, unordered */
    size_t nlive;
} model;

static void m_dereg(model *m, uint32_t lkey)
{
    mreg *x = &m->v[lkey - 1];
    size_t k;
    x->live = 0;
    for (k = 0; k < m->nlive; k++)
        if (m->live[k] == lkey) {
            m->live[k] = m->live[--m->nlive];
            break;
        }
    m->st.regions--;
    m->st.bytes -= (x->e - x->s) * P;
    m->st.dereg_calls++;
    if (m->ndereg == m->capd) {
        m->capd = m->capd ? m->capd * 2 : 256;
        m->deregs = (uint32_t *)realloc(m->deregs, m->capd * sizeof(uint32_t));
        if (!m->deregs) abort();
    }
    m->deregs[m->ndereg++] = lkey;
}

static void m_detach(model *m, uint32_t lkey)
{
    mreg *x = &m->v[lkey - 1];
    x->in_lookup = 0;
    m->st.cached_regions--;
    m->st.cached_bytes -= (x->e - x->s) * P;
}

static int m_is_over(const model *m, uint64_t more_r, uint64_t more_b)
{
    return m->st.regions + more_r > m->max_r || m->st.bytes + more_b > m->max_b;
}

static int m_evict_one(model *m)
{
    size_t j, i, best = (size_t)-1;
    for (j = 0; j < m->nlive; j++) {
        i = m->live[j] - 1;
        if (m->v[i].in_lookup && m->v[i].ref == 0 && (best == (size_t)-1 || m->v[i].last_use < m->v[best].last_use))
            best = i;
    }
    if (best == (size_t)-1) return 0;
    m->st.evictions++;
    m_detach(m, (uint32_t)best + 1);
    m_dereg(m, (uint32_t)best + 1);
    return 1;
}

static int m_make_room(model *m, uint64_t more_r, uint64_t more_b)
{
    while (m_is_over(m, more_r, more_b))
        if (!m_evict_one(m)) return 1;
    return 0;
}

static void m_update_over(model *m)
{
    if (m->over) m_make_room(m, 0, 0);
    m->over = m_is_over(m, 0, 0);
}

static int m_has_evictable(const model *m)
{
    size_t j;
    for (j = 0; j < m->nlive; j++)
        if (m->v[m->live[j] - 1].in_lookup && m->v[m->live[j] - 1].ref == 0) return 1;
    return 0;
}

static long m_find_page(const model *m, uint64_t pn)
{
    size_t j;
    for (j = 0; j < m->nlive; j++) {
        const mreg *x = &m->v[m->live[j] - 1];
        if (x->in_lookup && x->s <= pn && pn < x->e) return (long)m->live[j] - 1;
    }
    return -1;
}

/* returns lkey of the region (>0), or a negative status; sets *hit */
static long m_get(model *m, const fake *f, uint64_t ps, uint64_t pe, unsigned acc, int *hit)
{
    long i = m_find_page(m, ps);
    uint64_t ns = ps, ne = pe;
    unsigned a = acc;
    size_t k, j;
    int ok = 0;
    uint64_t rs = 0, re = 0;
    unsigned ra = 0;
    *hit = 0;
    if (i >= 0 && pe <= m->v[i].e && (m->v[i].acc & acc) == acc) {
        m->v[i].ref++;
        m->st.hits++;
        *hit = 1;
        return i + 1;
    }
    m->st.misses++;
    {
        /* overlapping: collect first (to use the values before detaching) */
        uint32_t merged[4096];
        size_t nm = 0;
        for (j = 0; j < m->nlive; j++) {
            k = m->live[j] - 1;
            mreg *x = &m->v[k];
            if (x->in_lookup && x->s < pe && x->e > ps) {
                if (x->s < ns) ns = x->s;
                if (x->e > ne) ne = x->e;
                a |= x->acc;
                merged[nm++] = (uint32_t)k + 1;
            }
        }
        for (k = 0; k < nm; k++) m_detach(m, merged[k]);
        m->st.merges += nm;
        for (j = 0; j < m->nlive; j++) {
            k = m->live[j] - 1;
            mreg *x = &m->v[k];
            if (x->in_lookup && x->e == ns && x->acc == a) {
                ns = x->s;
                m_detach(m, (uint32_t)k + 1);
                m->st.merges++;
                merged[nm++] = (uint32_t)k + 1;
                break;
            }
        }
        for (j = 0; j < m->nlive; j++) {
            k = m->live[j] - 1;
            mreg *x = &m->v[k];
            if (x->in_lookup && x->s == ne && x->acc == a) {
                ne = x->e;
                m_detach(m, (uint32_t)k + 1);
                m->st.merges++;
                merged[nm++] = (uint32_t)k + 1;
                break;
            }
        }
        for (k = 0; k < nm; k++)
            if (m->v[merged[k] - 1].ref == 0) m_dereg(m, merged[k]);
    }
    if (m_make_room(m, 1, (ne - ns) * P)) m->st.over_limit++;
    /* attempts */
    if (!fake_has_hole(f, (uintptr_t)(ns * P), (uintptr_t)(ne * P))) {
        ok = 1, rs = ns, re = ne, ra = a;
    } else {
        m->st.reg_failures++;
        if (ns != ps || ne != pe || a != acc) {
            if (!fake_has_hole(f, (uintptr_t)(ps * P), (uintptr_t)(pe * P)))
                ok = 1, rs = ps, re = pe, ra = acc;
            else
                m->st.reg_failures++;
        }
        if (!ok) {
            int ev = 0;
            while (m_evict_one(m)) ev++;
            if (ev) {
                if (!fake_has_hole(f, (uintptr_t)(ps * P), (uintptr_t)(pe * P)))
                    ok = 1, rs = ps, re = pe, ra = acc;
                else
                    m->st.reg_failures++;
            }
        }
    }
    if (!ok) {
        m_update_over(m);
        return RDMAX_ERR_INVALID_PARAM; /* the fake op's -EFAULT, as the cache reports it */
    }
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 1024;
        m->v = (mreg *)realloc(m->v, m->cap * sizeof(mreg));
        if (!m->v) abort();
    }
    {
        mreg *x = &m->v[m->n++];
        memset(x, 0, sizeof(*x));
        x->s = rs;
        x->e = re;
        x->acc = ra;
        x->ref = 1;
        x->in_lookup = 1;
        x->live = 1;
        m->live[m->nlive++] = (uint32_t)m->n;
        m->st.reg_calls++;
        m->st.regions++;
        m->st.bytes += (re - rs) * P;
        m->st.cached_regions++;
        m->st.cached_bytes += (re - rs) * P;
    }
    m->over = m_is_over(m, 0, 0);
    return (long)m->n;
}

static void m_put(model *m, uint32_t lkey)
{
    mreg *x = &m->v[lkey - 1];
    if (--x->ref) return;
    if (x->in_lookup)
        x->last_use = ++m->clock;
    else
        m_dereg(m, lkey);
    m_update_over(m);
}

static int m_invalidate(model *m, uint64_t ps, uint64_t pe)
{
    size_t k, j;
    uint32_t hit[4096];
    int n = 0, i;
    for (j = 0; j < m->nlive; j++) {
        k = m->live[j] - 1;
        if (m->v[k].in_lookup && m->v[k].s < pe && m->v[k].e > ps) hit[n++] = (uint32_t)k + 1;
    }
    for (i = 0; i < n; i++) {
        m_detach(m, hit[i]);
        m->st.invalidations++;
        if (m->v[hit[i] - 1].ref == 0) m_dereg(m, hit[i]);
    }
    m_update_over(m);
    return n;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static const char *stats_diff(const rdmax_rcache_stats *a, const rdmax_rcache_stats *b)
{
#define D(f)                                                                                       \
    if (a->f != b->f) return #f;
    D(hits) D(misses) D(merges) D(evictions) D(invalidations) D(regions) D(bytes) D(cached_regions)
    D(cached_bytes) D(reg_calls) D(reg_failures) D(dereg_calls) D(over_limit)
#undef D
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* random test                                                                                 */

static uint64_t rng_state;
static uint64_t rnd(void)
{ /* splitmix64 */
    uint64_t z = (rng_state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}
static uint64_t rndn(uint64_t n) { return rnd() % n; }

#define NWIN 2
#define WINPAGES 256
#define MAXHELD 24

/* where a failure happened, with the command that replays it */
static void random_where(long step)
{
    snprintf(tl_where, sizeof tl_where, ", step %ld, seed %llu; rerun: ./rcache_test %llu %ld", step,
             (unsigned long long)g_seed, (unsigned long long)g_seed, g_steps);
}

static void test_random(void)
{
    const uint64_t seed = g_seed;
    const long steps = g_steps;
    fake f;
    model m;
    rdmax_rcache *rc;
    rdmax_rcache_stats st;
    uintptr_t win[NWIN];
    struct {
        rdmax_rcache_region *r;
        uint32_t lkey;
    } held[MAXHELD + 1];
    int nheld = 0, nrecent = 0, recent_pos = 0, nholes = 0;
    size_t holes[4];
    struct {
        uintptr_t a, len;
        unsigned acc;
    } recent[32];
    long step = 0;
    uint64_t max_r, max_b;
    rng_state = seed;
    memset(&f, 0, sizeof f);
    memset(&m, 0, sizeof m);
    random_where(step);
    /* window 0 straddles an L1 boundary (2^15 pages), window 1 a root boundary (2^24 pages) */
    win[0] = (uintptr_t)((UINT64_C(5) << 15) - 100) * P;
    win[1] = (uintptr_t)((UINT64_C(3) << 24) - 100) * P;
    f.hole_base = win[0];
    f.nholes = (size_t)((win[1] - win[0]) / P + WINPAGES);
    f.holes = (unsigned char *)calloc(f.nholes, 1);
    max_r = 2 + rndn(20);
    max_b = rndn(4) == 0 ? 0 : (8 + rndn(200)) * P;
    rc = mk(&f, (size_t)max_r, (size_t)max_b, 0);
    {
        rdmax_rcache_desc d = rdmax_rcache_query_desc(rc);
        m.max_r = d.max_regions;
        m.max_b = d.max_bytes;
        REQUIRE(d.max_regions == max_r && d.max_bytes == (max_b ? max_b : SIZE_MAX), "applied limits not read back");
    }
    for (step = 0; step < steps; step++) {
        uint64_t op = rndn(100);
        random_where(step);
        m.ndereg = 0;
        f.nlog = 0;
        if (op < 48 || nheld == 0) {
            /* get: half of them repeat a recent request (maybe with less access) to make hits */
            int w = (int)rndn(NWIN), hit, st2;
            uint64_t pg = rndn(WINPAGES), np = rndn(8) == 0 ? 1 + rndn(140) : 1 + rndn(6);
            uintptr_t a, len;
            unsigned acc = (unsigned)rndn(8);
            rdmax_rcache_region *r = NULL;
            long lk;
            int reuse = nrecent > 0 && rndn(2) == 0;
            if (pg + np > WINPAGES) np = WINPAGES - pg;
            a = win[w] + (uintptr_t)pg * P + (uintptr_t)rndn(P);
            len = (uintptr_t)(np - 1) * P + 1 + (uintptr_t)rndn(P);
            if (a + len > win[w] + (uintptr_t)(pg + np) * P) len = win[w] + (uintptr_t)(pg + np) * P - a;
            if (reuse) {
                int k = (int)rndn((uint64_t)nrecent);
                a = recent[k].a;
                len = recent[k].len;
                acc = recent[k].acc & (unsigned)rndn(8);
            } else {
                recent[recent_pos].a = a;
                recent[recent_pos].len = len;
                recent[recent_pos].acc = acc;
                recent_pos = (recent_pos + 1) % 32;
                if (nrecent < 32) nrecent++;
            }
            lk = m_get(&m, &f, a / P, (a + len + P - 1) / P, acc, &hit);
            st2 = rdmax_rcache_get(rc, (void *)a, len, acc, &r);
            if (lk < 0) {
                REQUIRE(st2 == (int)lk, "get %#lx+%lu acc %u: status %d, model %ld", (unsigned long)a,
                        (unsigned long)len, acc, st2, lk);
            } else {
                REQUIRE(st2 == 0 && r, "get %#lx+%lu: status %d, model ok", (unsigned long)a, (unsigned long)len, st2);
                REQUIRE(!(r->start > a || r->end < a + len || (r->access & acc) != acc || !rdmax_rcache_region_valid(r) ||
                          r->refcount == 0),
                        "get %#lx+%lu acc %u returned [%#lx,%#lx) acc %u", (unsigned long)a, (unsigned long)len, acc,
                        (unsigned long)r->start, (unsigned long)r->end, r->access);
                REQUIRE(!(r->lkey != (uint32_t)lk || r->start != m.v[lk - 1].s * P || r->end != m.v[lk - 1].e * P ||
                          r->access != m.v[lk - 1].acc),
                        "get %#lx+%lu acc %u (%s): region lkey %u [%#lx,%#lx) acc %u, model lkey %ld [%#lx,%#lx) acc %u",
                        (unsigned long)a, (unsigned long)len, acc, hit ? "hit" : "miss", r->lkey,
                        (unsigned long)r->start, (unsigned long)r->end, r->access, lk,
                        (unsigned long)(m.v[lk - 1].s * P), (unsigned long)(m.v[lk - 1].e * P), m.v[lk - 1].acc);
                held[nheld].r = r;
                held[nheld].lkey = r->lkey;
                nheld++;
            }
        } else if (op < 88) {
            /* put */
            int k = (int)rndn((uint64_t)nheld);
            m_put(&m, held[k].lkey);
            rdmax_rcache_release(rc, held[k].r);
            held[k] = held[--nheld];
        } else if (op < 91) {
            /* hold */
            int k = (int)rndn((uint64_t)nheld);
            if (nheld < MAXHELD) {
                rdmax_rcache_hold(rc, held[k].r);
                m.v[held[k].lkey - 1].ref++;
                held[nheld++] = held[k];
            }
        } else if (op < 97) {
            /* explicit invalidate */
            int w = (int)rndn(NWIN), n1, n2;
            uint64_t pg = rndn(WINPAGES), np = 1 + rndn(12);
            uintptr_t a = win[w] + (uintptr_t)pg * P + (uintptr_t)rndn(P), len = (uintptr_t)np * P - rndn(P);
            n1 = m_invalidate(&m, a / P, (a + len + P - 1) / P);
            n2 = rdmax_rcache_invalidate(rc, (void *)a, len);
            REQUIRE(n1 == n2, "invalidate %#lx+%lu dropped %d, model %d", (unsigned long)a, (unsigned long)len, n2, n1);
        } else {
            /* holes: memory changes behind the cache's back (no invalidation); at most 4 */
            if (nholes < 4 && rndn(2)) {
                int w = (int)rndn(NWIN);
                size_t idx = (size_t)((win[w] - f.hole_base) / P + rndn(WINPAGES));
                if (!f.holes[idx]) {
                    f.holes[idx] = 1;
                    holes[nholes++] = idx;
                }
            } else if (nholes) {
                int k = (int)rndn((uint64_t)nholes);
                f.holes[holes[k]] = 0;
                holes[k] = holes[--nholes];
            }
        }
        if (nheld > MAXHELD - 2) {
            int k = (int)rndn((uint64_t)nheld);
            m_put(&m, held[k].lkey);
            rdmax_rcache_release(rc, held[k].r);
            held[k] = held[--nheld];
        }
        /* compare */
        REQUIRE(!f.err[0], "fake ops: %s", f.err);
        rdmax_rcache_query_stats(rc, &st);
        {
            const char *d = stats_diff(&st, &m.st);
            REQUIRE(!d, "counter %s differs from the model", d);
        }
        REQUIRE(st.regions == f.live && st.reg_calls == f.nreg && st.dereg_calls == f.ndereg && st.reg_failures == f.nfail,
                "counters disagree with the fake ops");
        if (f.nlog) qsort(f.log, f.nlog, sizeof(uint32_t), cmp_u32);
        if (m.ndereg) qsort(m.deregs, m.ndereg, sizeof(uint32_t), cmp_u32);
        REQUIRE(!(f.nlog != m.ndereg || (f.nlog && memcmp(f.log, m.deregs, f.nlog * sizeof(uint32_t)))),
                "deregistered %zu regions (first lkey %u), model %zu (first %u)", f.nlog, f.nlog ? f.log[0] : 0,
                m.ndereg, m.ndereg ? m.deregs[0] : 0);
        REQUIRE(!((st.regions > m.max_r || st.bytes > m.max_b) && m_has_evictable(&m)),
                "over a limit (%lu regions, %lu bytes) with evictable regions", (unsigned long)st.regions,
                (unsigned long)st.bytes);
        if ((step & 15) == 0 || step == steps - 1) {
            size_t k, j;
            int v = rdmax__rcache_validate(rc);
            REQUIRE(v == 0, "rdmax__rcache_validate failed with %d", v);
            /* the lookup-visible set is exactly the model's */
            REQUIRE(f.live == m.nlive, "%lu live registrations, model %zu", (unsigned long)f.live, m.nlive);
            for (j = 0; j < m.nlive; j++) {
                const mreg *x = &m.v[m.live[j] - 1];
                rdmax_rcache_region *r;
                int vis = x->live && x->in_lookup;
                k = m.live[j] - 1;
                r = f.v[k].r;
                REQUIRE(x->live == f.v[k].live, "lkey %zu live %d, model %d", k + 1, f.v[k].live, x->live);
                REQUIRE(!(x->live && (((r->rdmax__flags & RDMAX__RCACHE_IN_LOOKUP) != 0) != vis || r->refcount != x->ref)),
                        "lkey %zu lookup %d ref %u, model %d ref %u", k + 1,
                        (r->rdmax__flags & RDMAX__RCACHE_IN_LOOKUP) != 0, r->refcount, vis, x->ref);
            }
        }
    }
    random_where(step);
    while (nheld) {
        m_put(&m, held[nheld - 1].lkey);
        rdmax_rcache_release(rc, held[--nheld].r);
    }
    {
        int v = rdmax__rcache_validate(rc), held_at_destroy;
        size_t k;
        REQUIRE(v == 0, "final validate %d", v);
        held_at_destroy = rdmax_rcache_destroy(rc);
        rc = NULL;
        REQUIRE(held_at_destroy == 0, "destroy found %d held regions", held_at_destroy);
        REQUIRE(!f.err[0], "fake ops at destroy: %s", f.err);
        for (k = 0; k < f.n; k++)
            REQUIRE(!f.v[k].live, "lkey %zu never deregistered", k + 1);
        REQUIRE(f.nreg == f.ndereg, "%lu regs, %lu deregs", (unsigned long)f.nreg, (unsigned long)f.ndereg);
    }
    printf("# random_model: seed %llu, %ld steps, %lu regs, %lu hits, %lu merges, %lu evictions, %lu reg failures, "
           "max_regions %lu max_bytes %lu\n",
           (unsigned long long)seed, steps, (unsigned long)f.nreg, (unsigned long)m.st.hits,
           (unsigned long)m.st.merges, (unsigned long)m.st.evictions, (unsigned long)m.st.reg_failures,
           (unsigned long)max_r, (unsigned long)max_b);
out:
    if (rc) { /* after a failure: the cache is still there */
        while (nheld) rdmax_rcache_release(rc, held[--nheld].r);
        rdmax_rcache_destroy(rc);
    }
    fake_free(&f);
    free(m.v);
    free(m.deregs);
}

/* ------------------------------------------------------------------------------------------ */
/* directed tests                                                                              */

#define BASE ((uintptr_t)0x40000000)
#define PG(n) ((void *)(BASE + (uintptr_t)(n) * P))

static int live_count(const fake *f) { return (int)f->live; }

static void test_hit(void)
{
    fake f;
    rdmax_rcache *rc;
    rdmax_rcache_region *r1, *r2;
    rdmax_rcache_stats st;
    memset(&f, 0, sizeof f);
    rc = mk(&f, 0, 0, 0);
    ASSERT(rdmax_rcache_get(rc, (char *)PG(0) + 100, 5000, 3, &r1) == 0, "first get");
    ASSERT(r1->start == (uintptr_t)PG(0) && r1->end == (uintptr_t)PG(2) && r1->access == 3 && r1->refcount == 1,
          "region [%#lx,%#lx) acc %u", (unsigned long)r1->start, (unsigned long)r1->end, r1->access);
    ASSERT(rdmax_rcache_get(rc, (char *)PG(1) + 7, 10, 1, &r2) == 0 && r2 == r1 && r1->refcount == 2, "second get is a hit");
    rdmax_rcache_release(rc, r2);
    rdmax_rcache_release(rc, r1);
    rdmax_rcache_query_stats(rc, &st);
    ASSERT(st.hits == 1 && st.misses == 1 && st.regions == 1 && st.bytes == 2 * P && st.reg_calls == 1 &&
               st.cached_regions == 1,
          "counters hits %lu misses %lu", (unsigned long)st.hits, (unsigned long)st.misses);
    /* zero length counts as one byte; a wrapping range is refused */
    ASSERT(rdmax_rcache_get(rc, PG(1), 0, 0, &r2) == 0 && r2 == r1, "len 0 hit");
    rdmax_rcache_release(rc, r2);
    ASSERT(rdmax_rcache_get(rc, (void *)(UINTPTR_MAX - 10), 100, 0, &r2) == RDMAX_ERR_INVALID_PARAM,
          "wrap is RDMAX_ERR_INVALID_PARAM");
    ASSERT(rdmax_ctx_query_last_error_item(NULL) == RDMAX_LOG_ITEM_RCACHE_PARAM && rdmax_ctx_query_last_error(NULL)[0],
          "the wrap is the thread's last error (item %d)", (int)rdmax_ctx_query_last_error_item(NULL));
    ASSERT(rdmax_rcache_invalidate(rc, (void *)(UINTPTR_MAX - 10), 100) == RDMAX_ERR_INVALID_PARAM,
          "invalidate of a wrapping range is RDMAX_ERR_INVALID_PARAM");
    ASSERT(rdmax_rcache_drain(NULL) == RDMAX_ERR_INVALID_PARAM, "drain(NULL) is RDMAX_ERR_INVALID_PARAM");
    {
        rdmax_rcache_desc d = rdmax_rcache_query_desc(rc);
        ASSERT(d.max_regions == RDMAX_RCACHE_DEFAULT_MAX_REGIONS && d.max_bytes == RDMAX_RCACHE_DEFAULT_MAX_BYTES &&
                   d.thread_safe == 0,
              "defaults read back: %zu %zu", d.max_regions, d.max_bytes);
    }
    ASSERT(rdmax__rcache_validate(rc) == 0, "validate");
    ASSERT(rdmax_rcache_destroy(rc) == 0 && live_count(&f) == 0 && !f.err[0], "destroy: %s", f.err);
    fake_free(&f);
}

static void test_merge(void)
{
    fake f;
    rdmax_rcache *rc;
    rdmax_rcache_region *a, *b, *c;
    rdmax_rcache_stats st;
    memset(&f, 0, sizeof f);
    rc = mk(&f, 0, 0, 0);
    /* unused old region: deregistered when merged */
    ASSERT(rdmax_rcache_get(rc, PG(0), 2 * P, 1, &a) == 0, "get a");
    rdmax_rcache_release(rc, a);
    ASSERT(rdmax_rcache_get(rc, PG(1), 2 * P, 1, &b) == 0, "get b");
    ASSERT(b->start == (uintptr_t)PG(0) && b->end == (uintptr_t)PG(3), "merged to [0,3)");
    ASSERT(f.ndereg == 1 && f.log[0] == 1, "old region deregistered");
    /* in-use old region: stays registered until its last put, lookups see the new one */
    ASSERT(rdmax_rcache_get(rc, PG(2), 3 * P, 1, &c) == 0, "get c");
    ASSERT(c != b && c->start == (uintptr_t)PG(0) && c->end == (uintptr_t)PG(5), "merged to [0,5)");
    ASSERT(f.ndereg == 1 && b->refcount == 1, "in-use b not deregistered");
    rdmax_rcache_query_stats(rc, &st);
    ASSERT(st.regions == 2 && st.cached_regions == 1 && st.merges == 2, "regions %lu cached %lu merges %lu",
          (unsigned long)st.regions, (unsigned long)st.cached_regions, (unsigned long)st.merges);
    rdmax_rcache_release(rc, b);
    ASSERT(f.ndereg == 2 && f.log[1] == b->lkey, "b deregistered at its last put");
    /* access union: a writer merges with a reader's region, then both hit */
    ASSERT(rdmax_rcache_get(rc, PG(1), P, 2, &a) == 0 && a != c && a->access == 3 && a->start == (uintptr_t)PG(0) &&
               a->end == (uintptr_t)PG(5),
          "union of access");
    ASSERT(rdmax_rcache_get(rc, PG(4), P, 1, &b) == 0 && b == a, "reader hits the union region");
    rdmax_rcache_release(rc, a);
    rdmax_rcache_release(rc, b);
    rdmax_rcache_release(rc, c);
    ASSERT(rdmax__rcache_validate(rc) == 0, "validate");
    ASSERT(rdmax_rcache_destroy(rc) == 0 && live_count(&f) == 0 && !f.err[0], "destroy: %s", f.err);
    fake_free(&f);
}

static void test_touch(void)
{
    fake f;
    rdmax_rcache *rc;
    rdmax_rcache_region *a, *b, *c, *d;
    rdmax_rcache_stats st;
    memset(&f, 0, sizeof f);
    rc = mk(&f, 0, 0, 0);
    ASSERT(rdmax_rcache_get(rc, PG(0), 2 * P, 5, &a) == 0, "get a");
    ASSERT(rdmax_rcache_get(rc, PG(4), 2 * P, 5, &b) == 0, "get b");
    /* fills the gap [2,4) touching both with equal access: one region [0,6) */
    ASSERT(rdmax_rcache_get(rc, PG(2), 2 * P, 5, &c) == 0, "get c");
    ASSERT(c->start == (uintptr_t)PG(0) && c->end == (uintptr_t)PG(6), "touching merge to [0,6): [%#lx,%#lx)",
          (unsigned long)c->start, (unsigned long)c->end);
    rdmax_rcache_query_stats(rc, &st);
    ASSERT(st.merges == 2 && st.cached_regions == 1, "merges %lu", (unsigned long)st.merges);
    /* touching with different access: no merge */
    ASSERT(rdmax_rcache_get(rc, PG(6), P, 1, &d) == 0, "get d");
    ASSERT(d->start == (uintptr_t)PG(6) && d->end == (uintptr_t)PG(7), "no merge across different access");
    rdmax_rcache_release(rc, a);
    rdmax_rcache_release(rc, b);
    rdmax_rcache_release(rc, c);
    rdmax_rcache_release(rc, d);
    ASSERT(rdmax__rcache_validate(rc) == 0, "validate");
    ASSERT(rdmax_rcache_destroy(rc) == 0 && live_count(&f) == 0 && !f.err[0], "destroy: %s", f.err);
    fake_free(&f);
}

static void test_lru(void)
{
    fake f;
    rdmax_rcache *rc;
    rdmax_rcache_region *r[8];
    int i;
    memset(&f, 0, sizeof f);
    rc = mk(&f, 3, 0, 0);
    /* A=0, B=2, C=4 (pages apart: no touching) */
    for (i = 0; i < 3; i++) {
        ASSERT(rdmax_rcache_get(rc, PG(2 * i), P, 1, &r[i]) == 0, "get %d", i);
    }
    for (i = 0; i < 3; i++) rdmax_rcache_release(rc, r[i]);
    /* use A again: B is now least recently used */
    ASSERT(rdmax_rcache_get(rc, PG(0), P, 1, &r[0]) == 0 && r[0]->lkey == 1, "hit A");
    rdmax_rcache_release(rc, r[0]);
    ASSERT(rdmax_rcache_get(rc, PG(6), P, 1, &r[3]) == 0, "get D");
    ASSERT(f.ndereg == 1 && f.log[0] == 2, "B evicted first (got lkey %u)", f.nlog ? f.log[0] : 0);
    rdmax_rcache_release(rc, r[3]);
    ASSERT(rdmax_rcache_get(rc, PG(8), P, 1, &r[4]) == 0, "get E");
    ASSERT(f.ndereg == 2 && f.log[1] == 3, "then C");
    rdmax_rcache_release(rc, r[4]);
    ASSERT(rdmax_rcache_get(rc, PG(10), P, 1, &r[5]) == 0, "get F");
    ASSERT(f.ndereg == 3 && f.log[2] == 1, "then A");
    rdmax_rcache_release(rc, r[5]);
    ASSERT(rdmax__rcache_validate(rc) == 0, "validate");
    ASSERT(rdmax_rcache_destroy(rc) == 0 && live_count(&f) == 0 && !f.err[0], "destroy: %s", f.err);
    fake_free(&f);
}

static void test_inuse_never_evicted(void)
{
    fake f;
    rdmax_rcache *rc;
    rdmax_rcache_region *a, *b, *c, *d;
    rdmax_rcache_stats st;
    memset(&f, 0, sizeof f);
    rc = mk(&f, 2, 0, 0);
    ASSERT(rdmax_rcache_get(rc, PG(0), P, 1, &a) == 0, "a");
    ASSERT(rdmax_rcache_get(rc, PG(2), P, 1, &b) == 0, "b");
    ASSERT(rdmax_rcache_get(rc, PG(4), P, 1, &c) == 0, "c succeeds over the limit");
    rdmax_rcache_query_stats(rc, &st);
    ASSERT(st.regions == 3 && st.over_limit == 1 && f.ndereg == 0, "regions %lu over_limit %lu",
          (unsigned long)st.regions, (unsigned long)st.over_limit);
    /* the first put to zero makes a region evictable: it goes at once */
    rdmax_rcache_release(rc, b);
    ASSERT(f.ndereg == 1 && f.log[0] == 2, "b evicted at its put");
    ASSERT(a->refcount == 1 && c->refcount == 1, "a and c untouched");
    rdmax_rcache_release(rc, a);
    ASSERT(f.ndereg == 1, "now within the limit: a stays cached");
    ASSERT(rdmax_rcache_get(rc, PG(6), P, 1, &d) == 0, "d");
    ASSERT(f.ndereg == 2 && f.log[1] == 1, "a (unused) evicted for d, c (in use) kept");
    rdmax_rcache_release(rc, c);
    rdmax_rcache_release(rc, d);
    ASSERT(rdmax__rcache_validate(rc) == 0, "validate");
    ASSERT(rdmax_rcache_destroy(rc) == 0 && live_count(&f) == 0 && !f.err[0], "destroy: %s", f.err);
    fake_free(&f);
    /* byte limit */
    memset(&f, 0, sizeof f);
    rc = mk(&f, 0, 4 * P, 0);
    ASSERT(rdmax_rcache_get(rc, PG(0), 2 * P, 1, &a) == 0, "a");
    rdmax_rcache_release(rc, a);
    ASSERT(rdmax_rcache_get(rc, PG(4), 2 * P, 1, &b) == 0, "b");
    rdmax_rcache_release(rc, b);
    ASSERT(f.ndereg == 0, "4 pages fit");
    ASSERT(rdmax_rcache_get(rc, PG(8), 3 * P, 1, &c) == 0, "c");
    rdmax_rcache_query_stats(rc, &st);
    ASSERT(f.ndereg == 2 && st.bytes == 3 * P && st.evictions == 2, "both evicted for 3 pages");
    rdmax_rcache_release(rc, c);
    ASSERT(rdmax_rcache_destroy(rc) == 0 && live_count(&f) == 0 && !f.err[0], "destroy: %s", f.err);
    fake_free(&f);
}

static void test_invalidate_inuse(void)
{
    fake f;
    rdmax_rcache *rc;
    rdmax_rcache_region *a, *b, *c;
    rdmax_rcache_stats st;
    memset(&f, 0, sizeof f);
    rc = mk(&f, 0, 0, 0);
    ASSERT(rdmax_rcache_get(rc, PG(0), 4 * P, 3, &a) == 0, "a");
    ASSERT(rdmax_rcache_get(rc, PG(10), P, 3, &c) == 0, "c");
    rdmax_rcache_release(rc, c);
    ASSERT(rdmax_rcache_invalidate(rc, (char *)PG(3) + 10, 1) == 1, "one region dropped");
    ASSERT(!rdmax_rcache_region_valid(a) && a->refcount == 1 && f.ndereg == 0, "a invalid, still registered");
    ASSERT(rdmax_rcache_get(rc, PG(0), P, 3, &b) == 0 && b != a && b->lkey == 3, "get never returns the invalid region");
    rdmax_rcache_release(rc, a);
    ASSERT(f.ndereg == 1 && f.log[0] == 1, "a deregistered at its last put");
    rdmax_rcache_release(rc, b);
    ASSERT(rdmax_rcache_invalidate(rc, PG(0), 100 * P) == 2 && f.ndereg == 3, "unused regions deregistered at once");
    rdmax_rcache_query_stats(rc, &st);
    ASSERT(st.invalidations == 3 && st.regions == 0 && st.cached_regions == 0, "counters");
    ASSERT(rdmax__rcache_validate(rc) == 0, "validate");
    ASSERT(rdmax_rcache_destroy(rc) == 0 && live_count(&f) == 0 && !f.err[0], "destroy: %s", f.err);
    fake_free(&f);
}

static void test_reg_fallback(void)
{
    fake f;
    rdmax_rcache *rc;
    rdmax_rcache_region *a, *b;
    rdmax_rcache_stats st;
    memset(&f, 0, sizeof f);
    f.hole_base = BASE;
    f.nholes = 64;
    f.holes = (unsigned char *)calloc(64, 1);
    rc = mk(&f, 0, 0, 0);
    ASSERT(rdmax_rcache_get(rc, PG(0), 2 * P, 1, &a) == 0, "a");
    rdmax_rcache_release(rc, a);
    f.holes[1] = 1; /* page 1 unmapped behind our back */
    /* touching request: merged [0,4) fails, the request alone [2,4) succeeds */
    ASSERT(rdmax_rcache_get(rc, PG(2), 2 * P, 1, &b) == 0, "b");
    ASSERT(b->start == (uintptr_t)PG(2) && b->end == (uintptr_t)PG(4), "request alone registered");
    rdmax_rcache_query_stats(rc, &st);
    ASSERT(st.reg_failures == 1 && f.ndereg == 1 && st.cached_regions == 1, "stale a dropped, one failure");
    rdmax_rcache_release(rc, b);
    /* a request over the hole (access 2: b does not merge) fails with the op's status, after
       evicting the unused b and trying once more */
    ASSERT(rdmax_rcache_get(rc, PG(1), P, 2, &a) == RDMAX_ERR_INVALID_PARAM, "hole: the op's -EFAULT is RDMAX_ERR_INVALID_PARAM");
    ASSERT(rdmax_ctx_query_last_error_item(NULL) == RDMAX_LOG_ITEM_RCACHE_REG && strstr(rdmax_ctx_query_last_error(NULL), strerror(EFAULT)),
          "the errno is kept in the last error: %s", rdmax_ctx_query_last_error(NULL));
    rdmax_rcache_query_stats(rc, &st);
    ASSERT(st.evictions == 1 && st.reg_failures == 3 && st.regions == 0, "evicted for the retry: evictions %lu failures %lu",
          (unsigned long)st.evictions, (unsigned long)st.reg_failures);
    /* the uncached path for addresses beyond the table */
    ASSERT(rdmax_rcache_get(rc, (void *)(UINT64_C(1) << 50), 10, 1, &a) == 0 && a->refcount == 1, "high address");
    rdmax_rcache_query_stats(rc, &st);
    ASSERT(st.regions == 1 && st.cached_regions == 0, "uncached");
    rdmax_rcache_release(rc, a);
    ASSERT(live_count(&f) == 0, "uncached region deregistered at put");
    ASSERT(rdmax__rcache_validate(rc) == 0, "validate");
    ASSERT(rdmax_rcache_destroy(rc) == 0 && !f.err[0], "destroy: %s", f.err);
    fake_free(&f);
}

static void test_large_and_destroy(void)
{
    fake f;
    rdmax_rcache *rc;
    rdmax_rcache_region *a, *b, *c;
    uintptr_t base = (uintptr_t)1 << 40; /* aligned: whole upper-level entries get used */
    memset(&f, 0, sizeof f);
    rc = mk(&f, 0, 0, 0);
    /* 1 GiB + 3 pages, starting 5 pages below a 2^15-page boundary */
    ASSERT(rdmax_rcache_get(rc, (void *)(base - 5 * P), ((size_t)1 << 30) + 3 * P, 1, &a) == 0, "big");
    ASSERT(rdmax__rcache_validate(rc) == 0, "validate big");
    ASSERT(rdmax_rcache_get(rc, (void *)(base + ((size_t)512 << 20)), 100, 1, &b) == 0 && b == a, "hit in the middle");
    ASSERT(rdmax_rcache_get(rc, (void *)(base + ((size_t)1 << 30) - 4 * P), 2 * P, 1, &c) == 0 && c == a, "hit at the end");
    rdmax_rcache_release(rc, b);
    rdmax_rcache_release(rc, c);
    ASSERT(rdmax_rcache_invalidate(rc, (void *)(base + 12345 * P), 1) == 1, "invalidate in the middle");
    ASSERT(rdmax__rcache_validate(rc) == 0, "validate after");
    ASSERT(rdmax_rcache_get(rc, (void *)(base + 12345 * P), P, 1, &b) == 0 && b != a, "new region");
    /* destroy with references still held: reported, and everything is deregistered */
    ASSERT(rdmax_rcache_destroy(rc) == 2, "destroy reports two held regions");
    ASSERT(live_count(&f) == 0 && !f.err[0], "all deregistered: %s", f.err);
    fake_free(&f);
}

/* The desc's allocator serves every allocation of the cache (struct, page table, region slabs), and
   destroy gives back exactly what was taken. A size header in front of each block checks that each
   free gets a block of this allocator. */
typedef struct count_alloc {
    long allocs, frees, fail_after; /* fail_after >= 0: that many more allocations succeed */
    long long live_bytes;
    int foreign;                    /* frees of blocks this allocator did not hand out */
} count_alloc;

static void *ca_alloc(size_t n, void *user)
{
    count_alloc *c = (count_alloc *)user;
    uint64_t *h;
    if (c->fail_after == 0) return NULL;
    if (c->fail_after > 0) c->fail_after--;
    h = (uint64_t *)malloc(n + 16);
    if (!h) return NULL;
    h[0] = 0xa110cull;
    h[1] = n;
    c->allocs++;
    c->live_bytes += (long long)n;
    return h + 2;
}

static void ca_free(void *p, void *user)
{
    count_alloc *c = (count_alloc *)user;
    uint64_t *h;
    if (!p) return;
    h = (uint64_t *)p - 2;
    if (h[0] != 0xa110cull) {
        c->foreign++;
        return;
    }
    h[0] = 0;
    c->frees++;
    c->live_bytes -= (long long)h[1];
    free(h);
}

static void test_allocator(void)
{
    fake f;
    count_alloc ca;
    long calls;
    rdmax_rcache_desc d;
    rdmax_rcache *rc = NULL;
    rdmax_rcache_region *r[70];
    int i;
    memset(&f, 0, sizeof f);
    memset(&ca, 0, sizeof ca);
    ca.fail_after = -1;
    memset(&d, 0, sizeof d);
    d.ops.reg = fake_reg;
    d.ops.dereg = fake_dereg;
    d.ops.arg = &f;
    d.mode = RDMAX_RCACHE_MANUAL;
    d.allocator.alloc = ca_alloc;
    d.allocator.user = &ca;
    /* half an allocator is refused */
    ASSERT(rdmax_rcache_create(&d, &rc) == RDMAX_ERR_INVALID_PARAM && rc == NULL && ca.allocs == 0,
          "alloc without free: refused before allocating");
    d.allocator.free = ca_free;
    ASSERT(rdmax_rcache_create(&d, &rc) == RDMAX_OK, "create");
    ASSERT(ca.allocs == 2, "create allocated %ld blocks through the allocator, expected 2 (cache, root)", ca.allocs);
    /* 70 regions, one page apart with a gap (no merge): two slabs of 64, and table nodes */
    for (i = 0; i < 70; i++)
        ASSERT(rdmax_rcache_get(rc, PG(2 * i), P, 1, &r[i]) == RDMAX_OK, "get %d", i);
    ASSERT(ca.allocs >= 2 + 2 + 3, "%ld allocations after 70 regions: the slabs and nodes are missing", ca.allocs);
    for (i = 0; i < 70; i++) rdmax_rcache_release(rc, r[i]);
    ASSERT(rdmax__rcache_validate(rc) == 0, "validate");
    ASSERT(rdmax_rcache_destroy(rc) >= 0, "destroy");
    ASSERT(ca.frees == ca.allocs && ca.live_bytes == 0 && ca.foreign == 0,
          "destroy freed %ld of %ld blocks (%lld bytes left, %d foreign frees)", ca.frees, ca.allocs, ca.live_bytes,
          ca.foreign);
    /* an allocator that runs dry after create: the first get needs a slab and fails cleanly */
    ca.fail_after = 2;
    ASSERT(rdmax_rcache_create(&d, &rc) == RDMAX_OK, "create (dry allocator)");
    ASSERT(rdmax_rcache_get(rc, PG(0), P, 1, &r[0]) == RDMAX_ERR_NO_MEMORY &&
           rdmax_ctx_query_last_error_item(NULL) == RDMAX_LOG_ITEM_NO_MEMORY,
          "get with the allocator dry: RDMAX_ERR_NO_MEMORY, item NO_MEMORY");
    ASSERT(rdmax_rcache_destroy(rc) == 0 && ca.frees == ca.allocs && ca.live_bytes == 0, "destroy (dry allocator)");
    /* control: a cache without the allocator never calls it (so the counts above are the cache's) */
    ca.fail_after = -1;
    calls = ca.allocs + ca.frees;
    d.allocator.alloc = NULL;
    d.allocator.free = NULL;
    ASSERT(rdmax_rcache_create(&d, &rc) == RDMAX_OK, "create without allocator");
    for (i = 0; i < 70; i++)
        ASSERT(rdmax_rcache_get(rc, PG(2 * i), P, 1, &r[i]) == RDMAX_OK, "get %d (no allocator)", i);
    for (i = 0; i < 70; i++) rdmax_rcache_release(rc, r[i]);
    rdmax_rcache_destroy(rc);
    ASSERT(ca.allocs + ca.frees == calls, "a cache without the allocator called it");
    fake_free(&f);
}

/* thread-safe mode: several threads get/put on one cache */
typedef struct ts_arg {
    rdmax_rcache *rc;
    uint64_t seed;
    int bad;
} ts_arg;

static void *ts_thread(void *p)
{
    ts_arg *t = (ts_arg *)p;
    uint64_t s = t->seed;
    rdmax_rcache_region *held[8];
    int nh = 0, i;
    for (i = 0; i < 100000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        if (nh < 8 && ((s >> 33) & 1)) {
            uintptr_t a = BASE + (uintptr_t)((s >> 40) % 200) * P + (uintptr_t)((s >> 20) % P);
            size_t len = 1 + (size_t)((s >> 8) % (3 * P));
            unsigned acc = (unsigned)((s >> 50) & 3);
            rdmax_rcache_region *r;
            if (rdmax_rcache_get(t->rc, (void *)a, len, acc, &r) != 0 || r->start > a || r->end < a + len ||
                (r->access & acc) != acc)
                t->bad++;
            else
                held[nh++] = r;
        } else if (nh) {
            rdmax_rcache_release(t->rc, held[--nh]);
        }
        if ((i % 5000) == 0) rdmax_rcache_invalidate(t->rc, (void *)(BASE + (uintptr_t)((s >> 40) % 200) * P), 3 * P);
    }
    while (nh) rdmax_rcache_release(t->rc, held[--nh]);
    return NULL;
}

static void test_thread_safe(void)
{
    fake f;
    rdmax_rcache *rc;
    pthread_t th[4];
    ts_arg ta[4];
    rdmax_rcache_stats st;
    int i, bad = 0;
    memset(&f, 0, sizeof f);
    rc = mk(&f, 16, 0, 1);
    ASSERT(rdmax_rcache_query_desc(rc).thread_safe == 1, "applied thread_safe");
    for (i = 0; i < 4; i++) {
        ta[i].rc = rc;
        ta[i].seed = 1000 + (uint64_t)i;
        ta[i].bad = 0;
        pthread_create(&th[i], NULL, ts_thread, &ta[i]);
    }
    for (i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        bad += ta[i].bad;
    }
    rdmax_rcache_query_stats(rc, &st);
    ASSERT(bad == 0, "%d bad gets", bad);
    ASSERT(rdmax__rcache_validate(rc) == 0, "validate");
    ASSERT(st.regions == f.live && st.reg_calls == f.nreg && st.dereg_calls == f.ndereg, "counters vs fake");
    ASSERT(st.regions <= 16, "limit honoured once everything is put: %lu", (unsigned long)st.regions);
    ASSERT(rdmax_rcache_destroy(rc) == 0 && live_count(&f) == 0 && !f.err[0], "destroy: %s", f.err);
    fake_free(&f);
    printf("# thread_safe: %lu hits, %lu misses\n", (unsigned long)st.hits, (unsigned long)st.misses);
}

static void test_bad_args(void)
{
    rdmax_rcache_desc d;
    rdmax_rcache *rc = NULL;
    memset(&d, 0, sizeof d);
    ASSERT(rdmax_rcache_create(&d, &rc) == RDMAX_ERR_INVALID_PARAM && rc == NULL, "create without ops");
    ASSERT(rdmax_ctx_query_last_error_item(NULL) == RDMAX_LOG_ITEM_RCACHE_PARAM, "the last error is item RCACHE_PARAM (%d)",
          (int)rdmax_ctx_query_last_error_item(NULL));
    ASSERT(rdmax_rcache_create(NULL, &rc) == RDMAX_ERR_INVALID_PARAM, "create without desc");
    d.ops.reg = fake_reg;
    d.ops.dereg = fake_dereg;
    d.mode = 3;
    ASSERT(rdmax_rcache_create(&d, &rc) == RDMAX_ERR_INVALID_PARAM && rc == NULL, "create with mode 3");
}

/* RDMAX_RCACHE_UNCACHED: every get registers its own range, the last put deregisters it. */
static void test_uncached(void)
{
    fake f;
    rdmax_rcache_desc d;
    rdmax_rcache *rc = NULL;
    rdmax_rcache_region *r1 = NULL, *r2 = NULL;
    rdmax_rcache_stats st;
    memset(&f, 0, sizeof f);
    memset(&d, 0, sizeof d);
    d.ops.reg = fake_reg;
    d.ops.dereg = fake_dereg;
    d.ops.arg = &f;
    d.mode = RDMAX_RCACHE_UNCACHED;
    ASSERT(rdmax_rcache_create(&d, &rc) == 0, "create");
    ASSERT(rdmax_rcache_get(rc, (void *)(64 * P), P, 1, &r1) == 0, "get 1");
    ASSERT(rdmax_rcache_get(rc, (void *)(64 * P), P, 1, &r2) == 0, "get 2");
    ASSERT(r1 != r2 && f.live == 2, "two gets of one range: %s, %d live registrations",
          r1 == r2 ? "one region" : "two regions", (int)f.live);
    rdmax_rcache_release(rc, r1);
    rdmax_rcache_release(rc, r2);
    rdmax_rcache_query_stats(rc, &st);
    ASSERT(f.live == 0 && st.uncached == 2 && st.misses == 2 && st.hits == 0 && st.cached_regions == 0,
          "after the puts: %d live, %lu uncached, %lu misses, %lu hits", (int)f.live, (unsigned long)st.uncached,
          (unsigned long)st.misses, (unsigned long)st.hits);
    ASSERT(rdmax__rcache_validate(rc) == 0, "invariants");
    ASSERT(!f.err[0], "%s", f.err);
    rdmax_rcache_destroy(rc);
    fake_free(&f);
}

int main(int argc, char **argv)
{
    g_seed = argc > 1 ? strtoull(argv[1], NULL, 0) : (uint64_t)getpid() * 2654435761u ^ (uint64_t)time(NULL);
    g_steps = argc > 2 ? strtol(argv[2], NULL, 0) : 1000000;
    P = (size_t)sysconf(_SC_PAGESIZE);
    setvbuf(stdout, NULL, _IONBF, 0);
    tl_run("bad_arguments", test_bad_args);
    tl_run("mode_uncached", test_uncached);
    tl_run("hit_and_counters", test_hit);
    tl_run("merge_overlap", test_merge);
    tl_run("merge_touching", test_touch);
    tl_run("lru_order", test_lru);
    tl_run("inuse_never_evicted", test_inuse_never_evicted);
    tl_run("invalidate_inuse", test_invalidate_inuse);
    tl_run("reg_failure_fallback", test_reg_fallback);
    tl_run("large_regions_and_destroy", test_large_and_destroy);
    tl_run("allocator", test_allocator);
    tl_run("thread_safe", test_thread_safe);
    tl_run("random_model", test_random);
    if (tl_failed_total) printf("rcache_test: FAILED (seed %llu)\n", (unsigned long long)g_seed);
    else printf("rcache_test: all passed\n");
    return tl_failed_total ? 1 : 0;
}
