/* arbiter_bench.c - cost of the arbiter (rdmax's pending queue) on the host, no device needed.

   Cases (one parseable line each: "bench arbiter case=<name> value=<num> unit=<ns|ratio>"):
     dispatch_10, dispatch_10k   ns per dispatched element in steady state, 10 and 10,000 groups with one
                                 pending element each; the callback REMOVEs the element and pushes it back
                                 (a request that is immediately replaced), and returns STOP after a budget
                                 of 64 per dispatch (a send queue's worth), like a transport would
     ratio_10k_10                dispatch_10k / dispatch_10 (goal: <= 1.2)
     dispatch_1000               the same with 1,000 groups
     ucs_dispatch_10, ucs_dispatch_1000, ucs_dispatch_10k, ucs_ratio_10k_10
                                 the same workload on UCX's ucs_arbiter (libucs), when built with
                                 -DRDMAX_BENCH_UCS and linked with -lucs (Debian: libucx-dev)
     dispatch_10_deep            10 groups with 1,000 elements each: the same 10,000 pending elements as
                                 dispatch_10k, so only the number of groups differs
     ratio_10k_10_deep           dispatch_10k / dispatch_10_deep
     add_dispatch                ns for one pending-add (push + schedule) plus the dispatch that runs it,
                                 one endpoint
     add_dispatch_10k            the same, cycling over 10,000 endpoints (each add finds a cold group)
     empty_check                 ns per inline rdmax__arb_dispatch() on an empty arbiter (the progress
                                 path's cost when nothing is pending), loop overhead included
     empty_loop                  the same loop without the check, for reference
   Endpoints are 256-byte structs with the group in their first cache line, requests 64-byte structs;
   the ring order is shuffled so that consecutive groups are not neighbours in memory (as with endpoints
   allocated over time). The callbacks touch only the request, so the numbers are the arbiter's own cost:
   a real send also touches the endpoint's QP fields, another line the arbiter does not prefetch.
   Each value is the median of --reps repetitions (default 7) of --n operations, timed with
   CLOCK_MONOTONIC in chunks of 100,000; a chunk during which the process was preempted (getrusage
   ru_nivcsw) is run again, since on a shared machine it would time the other process.

   Build:  cc -std=c11 -O2 -g -DNDEBUG -I. bench/arbiter_bench.c -o arbiter_bench
           (add -DRDMAX_BENCH_UCS ... -lucs for the ucs_arbiter cases)
   Run:    ./arbiter_bench [--case NAME] [--reps N] [--n ELEMENTS] [--seq] [--once]
           --n is the operations per repetition (1,000,000; the empty checks run 10 times as many).
           --case runs one case alone; with --once (one repetition, no warm-up, no re-runs) it suits
           valgrind, e.g. instructions per pending-add + dispatch:
               valgrind --tool=callgrind --toggle-collect=bench_add_dispatch_loop \
                   ./arbiter_bench --case add_dispatch --once --n 100000
               callgrind_annotate callgrind.out.* | head     (total Ir / 100000)
           --seq keeps the ring in memory order (the hardware prefetcher's best case).
*/
#define _DEFAULT_SOURCE /* getrusage's ru_nivcsw */
#ifndef RDMAX_IMPLEMENTATION
#define RDMAX_IMPLEMENTATION
#endif
#define RDMAX_TRANSPORT_RC
#ifndef RDMAX_IMPLEMENTATION
#define RDMAX_IMPLEMENTATION
#endif
#include "rdmax.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>

#define EP_SIZE 256
#define REQ_SIZE 64
#define BUDGET 64
#define CHUNK 100000            /* operations timed at once (see measure) */

/* the timed loops keep their names, so that callgrind's --toggle-collect finds them */
#if defined(__GNUC__) && !defined(__clang__)
#define BENCH_LOOP __attribute__((noinline, noclone))
#else
#define BENCH_LOOP __attribute__((noinline))
#endif

typedef struct b_ep {
    rdmax__arb_group grp;        /* a cache line of its own (64 bytes on LP64) */
    char rest[EP_SIZE - sizeof(rdmax__arb_group)];
} b_ep;

typedef struct b_req {
    rdmax__arb_elem link;
    uint64_t runs;
    char rest[REQ_SIZE - sizeof(rdmax__arb_elem) - sizeof(uint64_t)];
} b_req;

typedef struct b_world {
    rdmax__arb arb;
    b_ep *eps;
    b_req *reqs;
    size_t ngroups, depth;
    size_t *order;              /* endpoints in the order they were scheduled (shuffled) */
    unsigned budget;
} b_world;

static unsigned g_reps = 7;
static size_t g_n = 1000000;
static int g_seq;
static int g_once;              /* --once: one repetition, no warm-up, no retries (valgrind) */
static volatile size_t g_sink;

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, unsigned n)
{
    qsort(v, n, sizeof v[0], cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static long preemptions(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_nivcsw;
}

/* Median of g_reps repetitions of fn, in ns per operation; one repetition runs n operations in chunks of
   `chunk` (fn(ctx, k) runs k operations and returns the ns they took). On a shared machine a chunk during
   which the process was preempted measures the other process and the cache it trashed, so such a chunk
   is run again (up to 20 times); how many were kept anyway is reported. */
static double measure(double (*fn)(void *, size_t), void *ctx, size_t n, size_t chunk)
{
    double t[64];
    unsigned r, dirty = 0, chunks = 0;
    for (r = 0; r < g_reps; r++) {
        double total = 0;
        size_t left = n;
        while (left > 0) {
            size_t k = left < chunk ? left : chunk;
            unsigned tries = 0;
            double ns;
            int preempted;
            do {
                long before = preemptions();
                ns = fn(ctx, k);
                preempted = preemptions() != before;
            } while (preempted && !g_once && ++tries < 20);
            dirty += (unsigned)preempted;
            chunks++;
            total += ns;
            left -= k;
        }
        t[r] = total / (double)n;
    }
    if (dirty != 0 && !g_once) {
        printf("# %u of %u chunks were preempted by other processes: expect noise\n", dirty, chunks);
    }
    return median(t, g_reps);
}

static void *xaligned(size_t size)
{
    void *p = aligned_alloc(64, size < 64 ? 64 : (size + 63) / 64 * 64);
    if (p == NULL) {
        fprintf(stderr, "arbiter_bench: out of memory\n");
        exit(2);
    }
    memset(p, 0, size);
    return p;
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ULL;
static uint64_t rnd64(void)
{
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return g_rng * 2685821657736338717ULL;
}

/* ngroups endpoints with depth requests each, all pushed and scheduled in shuffled order */
static void world_init(b_world *w, size_t ngroups, size_t depth)
{
    size_t i, j, *order;
    rdmax__arb_init(&w->arb);
    w->ngroups = ngroups;
    w->depth = depth;
    w->eps = (b_ep *)xaligned(ngroups * sizeof(b_ep));
    w->reqs = (b_req *)xaligned(ngroups * depth * sizeof(b_req));
    order = (size_t *)malloc(ngroups * sizeof *order);
    if (order == NULL) exit(2);
    for (i = 0; i < ngroups; i++) {
        order[i] = i;
    }
    for (i = ngroups; i > 1 && !g_seq; i--) {
        size_t k = (size_t)(rnd64() % i), t = order[i - 1];
        order[i - 1] = order[k];
        order[k] = t;
    }
    for (i = 0; i < ngroups; i++) {
        b_ep *ep = &w->eps[order[i]];
        rdmax__arb_group_init(&ep->grp);
        for (j = 0; j < depth; j++) {
            b_req *r = &w->reqs[order[i] * depth + j];
            rdmax__arb_elem_init(&r->link);
            rdmax__arb_group_push(&w->arb, &ep->grp, &r->link);
        }
        rdmax__arb_group_schedule(&w->arb, &ep->grp);
    }
    w->order = order;
}

static void world_free(b_world *w)
{
    size_t i;
    for (i = 0; i < w->ngroups; i++) {
        rdmax__arb_group_cleanup(&w->arb, &w->eps[i].grp);
    }
    free(w->eps);
    free(w->reqs);
    free(w->order);
}

/* the "send": count it on the request, put the request back (a new request replacing it) */
static rdmax__arb_result steady_cb(rdmax__arb *arb, rdmax__arb_group *g, rdmax__arb_elem *e, void *arg)
{
    b_world *w = (b_world *)arg;
    if (w->budget == 0) {
        return RDMAX__ARB_CB_STOP;
    }
    w->budget--;
    ((b_req *)(void *)e)->runs++;
    rdmax__arb_group_push(arb, g, e);
    return RDMAX__ARB_CB_REMOVE;
}

BENCH_LOOP static size_t bench_steady_loop(b_world *w, size_t n)
{
    size_t done = 0;
    while (done < n) {
        w->budget = BUDGET;
        done += rdmax__arb_dispatch(&w->arb, 1, steady_cb, w);
    }
    return done;
}

static double rep_steady(void *ctx, size_t n)
{
    double t0 = now_ns();
    bench_steady_loop((b_world *)ctx, n);
    return now_ns() - t0;
}

static double case_steady(size_t ngroups, size_t depth)
{
    b_world w;
    double v;
    world_init(&w, ngroups, depth);
    if (!g_once) {
        bench_steady_loop(&w, g_n / 4 + ngroups * depth); /* warm up: every element dispatched once */
    }
    v = measure(rep_steady, &w, g_n, CHUNK);
    if (rdmax__arb_pending(&w.arb) != ngroups * depth) {
        fprintf(stderr, "arbiter_bench: pending %zu, want %zu\n", rdmax__arb_pending(&w.arb), ngroups * depth);
        exit(3);
    }
    world_free(&w);
    return v;
}

static rdmax__arb_result remove_cb(rdmax__arb *arb, rdmax__arb_group *g, rdmax__arb_elem *e, void *arg)
{
    (void)arb;
    (void)g;
    (void)arg;
    ((b_req *)(void *)e)->runs++;
    return RDMAX__ARB_CB_REMOVE;
}

/* one pending-add (push + schedule, as pending_add does) and the dispatch that runs it */
BENCH_LOOP static size_t bench_add_dispatch_loop(b_world *w, size_t n)
{
    size_t i, k = 0, done = 0;
    for (i = 0; i < n; i++) {
        b_ep *ep = &w->eps[w->order[k]];
        b_req *r = &w->reqs[w->order[k]];
        if (++k == w->ngroups) {
            k = 0;
        }
        rdmax__arb_group_push(&w->arb, &ep->grp, &r->link);
        rdmax__arb_group_schedule(&w->arb, &ep->grp);
        done += rdmax__arb_dispatch(&w->arb, 1, remove_cb, NULL);
    }
    return done;
}

static double rep_add_dispatch(void *ctx, size_t n)
{
    b_world *w = (b_world *)ctx;
    double t0 = now_ns(), t;
    size_t done = bench_add_dispatch_loop(w, n);
    t = now_ns() - t0;
    if (done != n || !rdmax__arb_is_empty(&w->arb)) {
        fprintf(stderr, "arbiter_bench: add_dispatch ran %zu of %zu\n", done, n);
        exit(3);
    }
    return t;
}

static double case_add_dispatch(size_t ngroups)
{
    b_world w;
    double v;
    world_init(&w, ngroups, 0);
    free(w.reqs);
    w.reqs = (b_req *)xaligned(ngroups * sizeof(b_req)); /* zeroed: not queued */
    if (!g_once) {
        bench_add_dispatch_loop(&w, ngroups + g_n / 10);
    }
    v = measure(rep_add_dispatch, &w, g_n, CHUNK);
    world_free(&w);
    return v;
}

static rdmax__arb_result never_cb(rdmax__arb *arb, rdmax__arb_group *g, rdmax__arb_elem *e, void *arg)
{
    (void)arb;
    (void)g;
    (void)e;
    (void)arg;
    abort();
}

/* The asm makes the compiler forget what arb points to, so every iteration loads arb->current and
   branches, as the progress loop does when the arbiter lives in a context it cannot see through. */
BENCH_LOOP static size_t bench_empty_loop(rdmax__arb *arb, size_t n, int check)
{
    size_t i, sum = 0;
    for (i = 0; i < n; i++) {
        __asm__ __volatile__("" : "+r"(arb));
        if (check) {
            sum += rdmax__arb_dispatch(arb, 1, never_cb, NULL);
        }
    }
    return sum;
}

typedef struct b_empty {
    rdmax__arb arb;
    int check;
} b_empty;

static double rep_empty(void *ctx, size_t n)
{
    b_empty *e = (b_empty *)ctx;
    double t0 = now_ns();
    g_sink += bench_empty_loop(&e->arb, n, e->check);
    return now_ns() - t0;
}

static double case_empty(int check)
{
    b_empty e;
    rdmax__arb_init(&e.arb);
    e.check = check;
    if (!g_once) {
        g_sink += bench_empty_loop(&e.arb, g_n, check);
    }
    return measure(rep_empty, &e, g_n * 10, CHUNK * 10);
}

#ifdef RDMAX_BENCH_UCS
/* ---- UCX's ucs_arbiter, the same workload ---------------------------------------------------------
   Debian 12's libucx-dev (1.13.1) ships libucs with the arbiter's functions exported but not
   ucs/datastruct/arbiter.h, so the types and the two inline wrappers used here are declared below as
   UCX 1.13's header has them (src/ucs/datastruct/arbiter.h, list.h). Debian builds libucs with
   assertions (UCS_ENABLE_ASSERT): a group then carries a guard and its arbiter after the tail, and
   dispatch checks them; that is the ucs_arbiter measured here, as Debian ships it.
   ucs_check() proves at run time that the layout matches the library: it pushes, schedules and
   dispatches a known pattern and compares the order, and the bench stops if it differs. */
typedef struct ucs_list_link {
    struct ucs_list_link *prev, *next;
} ucs_list_link_t;
typedef struct ucs_arbiter {
    ucs_list_link_t list;
} ucs_arbiter_t;
typedef struct ucs_arbiter_elem ucs_arbiter_elem_t;
typedef struct ucs_arbiter_group {
    ucs_arbiter_elem_t *tail;
    int guard;                  /* the assertion build's fields */
    struct ucs_arbiter *arbiter;
} ucs_arbiter_group_t;
struct ucs_arbiter_elem {
    ucs_list_link_t list;
    ucs_arbiter_elem_t *next;
    ucs_arbiter_group_t *group;
};
typedef enum {
    UCS_ARBITER_CB_RESULT_REMOVE_ELEM,
    UCS_ARBITER_CB_RESULT_NEXT_GROUP,
    UCS_ARBITER_CB_RESULT_DESCHED_GROUP,
    UCS_ARBITER_CB_RESULT_RESCHED_GROUP,
    UCS_ARBITER_CB_RESULT_STOP
} ucs_arbiter_cb_result_t;
typedef ucs_arbiter_cb_result_t (*ucs_arbiter_callback_t)(ucs_arbiter_t *, ucs_arbiter_group_t *,
                                                          ucs_arbiter_elem_t *, void *);
void ucs_arbiter_init(ucs_arbiter_t *arbiter);
void ucs_arbiter_group_init(ucs_arbiter_group_t *group);
void ucs_arbiter_group_push_elem_always(ucs_arbiter_group_t *group, ucs_arbiter_elem_t *elem);
void ucs_arbiter_group_schedule_nonempty(ucs_arbiter_t *arbiter, ucs_arbiter_group_t *group);
void ucs_arbiter_dispatch_nonempty(ucs_arbiter_t *arbiter, unsigned per_group, ucs_arbiter_callback_t cb,
                                   void *cb_arg);
size_t ucs_arbiter_group_num_elems(ucs_arbiter_group_t *group);

/* the header's inline wrappers, as UCX 1.13 has them */
static inline void ucs_arbiter_group_push_elem(ucs_arbiter_group_t *g, ucs_arbiter_elem_t *e)
{
    if (e->group == NULL)
        ucs_arbiter_group_push_elem_always(g, e);
}
static inline void ucs_arbiter_group_schedule(ucs_arbiter_t *a, ucs_arbiter_group_t *g)
{
    if (rdmax_unlikely(g->tail != NULL))
        ucs_arbiter_group_schedule_nonempty(a, g);
}
static inline void ucs_arbiter_dispatch(ucs_arbiter_t *a, unsigned per_group, ucs_arbiter_callback_t cb, void *arg)
{
    if (rdmax_unlikely(a->list.next != &a->list))
        ucs_arbiter_dispatch_nonempty(a, per_group, cb, arg);
}

typedef struct u_ep {
    ucs_arbiter_group_t grp;
    char rest[EP_SIZE - sizeof(ucs_arbiter_group_t)];
} u_ep;

typedef struct u_req {
    ucs_arbiter_elem_t link;
    uint64_t runs;
    char rest[REQ_SIZE - sizeof(ucs_arbiter_elem_t) - sizeof(uint64_t)];
} u_req;

typedef struct u_world {
    ucs_arbiter_t arb;
    u_ep *eps;
    u_req *reqs;
    size_t ngroups, depth, done;
    unsigned budget;
} u_world;

static void u_world_init(u_world *w, size_t ngroups, size_t depth)
{
    size_t i, j, *order = (size_t *)malloc(ngroups * sizeof *order);
    if (order == NULL)
        exit(2);
    ucs_arbiter_init(&w->arb);
    w->ngroups = ngroups;
    w->depth = depth;
    w->done = 0;
    w->eps = (u_ep *)xaligned(ngroups * sizeof(u_ep));
    w->reqs = (u_req *)xaligned(ngroups * depth * sizeof(u_req));
    for (i = 0; i < ngroups; i++)
        order[i] = i;
    for (i = ngroups; i > 1 && !g_seq; i--) {  /* the same shuffle as rdmax's world */
        size_t k = (size_t)(rnd64() % i), t = order[i - 1];
        order[i - 1] = order[k];
        order[k] = t;
    }
    for (i = 0; i < ngroups; i++) {
        u_ep *ep = &w->eps[order[i]];
        ucs_arbiter_group_init(&ep->grp);
        for (j = 0; j < depth; j++) {
            u_req *r = &w->reqs[order[i] * depth + j];
            r->link.group = NULL;
            ucs_arbiter_group_push_elem(&ep->grp, &r->link);
        }
        ucs_arbiter_group_schedule(&w->arb, &ep->grp);
    }
    free(order);
}

static void u_world_free(u_world *w)
{
    /* no ucs_arbiter_group_cleanup: it asserts an empty group, and these still hold their element */
    free(w->eps);
    free(w->reqs);
}

static ucs_arbiter_cb_result_t u_steady_cb(ucs_arbiter_t *arb, ucs_arbiter_group_t *g, ucs_arbiter_elem_t *e,
                                           void *arg)
{
    u_world *w = (u_world *)arg;
    (void)arb;
    if (w->budget == 0)
        return UCS_ARBITER_CB_RESULT_STOP;
    w->budget--;
    w->done++;
    ((u_req *)(void *)e)->runs++;
    ucs_arbiter_group_push_elem(g, e);
    return UCS_ARBITER_CB_RESULT_REMOVE_ELEM;
}

BENCH_LOOP static size_t bench_ucs_steady_loop(u_world *w, size_t n)
{
    size_t start = w->done;
    while (w->done - start < n) {
        w->budget = BUDGET;
        ucs_arbiter_dispatch(&w->arb, 1, u_steady_cb, w);
    }
    return w->done - start;
}

static double rep_ucs_steady(void *ctx, size_t n)
{
    double t0 = now_ns();
    bench_ucs_steady_loop((u_world *)ctx, n);
    return now_ns() - t0;
}

static double case_ucs_steady(size_t ngroups, size_t depth)
{
    u_world w;
    u_world_init(&w, ngroups, depth);
    if (!g_once)
        bench_ucs_steady_loop(&w, g_n / 4 + ngroups * depth);
    double v = measure(rep_ucs_steady, &w, g_n, CHUNK);
    size_t pending = 0;
    for (size_t i = 0; i < ngroups; i++)
        pending += ucs_arbiter_group_num_elems(&w.eps[i].grp);
    if (pending != ngroups * depth) {
        fprintf(stderr, "arbiter_bench: ucs_arbiter has %zu pending, want %zu\n", pending, ngroups * depth);
        exit(3);
    }
    u_world_free(&w);
    return v;
}

/* The declarations above against the library: three groups of two elements, per_group 1, must come out
   round-robin (a0 b0 c0 a1 b1 c1); a wrong layout gives another order or crashes here, never a number. */
static int u_check_seen[6], u_check_n;
static ucs_arbiter_cb_result_t u_check_cb(ucs_arbiter_t *arb, ucs_arbiter_group_t *g, ucs_arbiter_elem_t *e,
                                          void *arg)
{
    (void)arb;
    (void)g;
    if (u_check_n < 6)
        u_check_seen[u_check_n++] = (int)((u_req *)(void *)e - (u_req *)arg);
    return UCS_ARBITER_CB_RESULT_REMOVE_ELEM;
}

static int ucs_check(void)
{
    static const int want[6] = {0, 2, 4, 1, 3, 5};
    u_ep eps[3];
    u_req *reqs = (u_req *)xaligned(6 * sizeof(u_req));
    for (int g = 0; g < 3; g++) {
        ucs_arbiter_group_init(&eps[g].grp);
        for (int j = 0; j < 2; j++)
            ucs_arbiter_group_push_elem(&eps[g].grp, &reqs[g * 2 + j].link);
    }
    ucs_arbiter_t arb;
    ucs_arbiter_init(&arb);
    for (int g = 0; g < 3; g++)
        ucs_arbiter_group_schedule(&arb, &eps[g].grp);
    ucs_arbiter_dispatch(&arb, 1, u_check_cb, reqs);
    if (u_check_n != 6 || memcmp(u_check_seen, want, sizeof want) || arb.list.next != &arb.list) {
        fprintf(stderr, "arbiter_bench: libucs's arbiter does not behave as the declared UCX 1.13 layout "
                        "expects (%d elements dispatched): no ucs_arbiter numbers\n", u_check_n);
        return -1;  /* rdmax's cases still run */
    }
    free(reqs);
    return 0;
}
#endif /* RDMAX_BENCH_UCS */

static void line(const char *name, double value, const char *unit)
{
    printf("bench arbiter case=%s value=%.3f unit=%s\n", name, value, unit);
    fflush(stdout);
}

static int want(const char *only, const char *name)
{
    return only == NULL || strcmp(only, name) == 0;
}

static void usage(void)
{
    printf("usage: arbiter_bench [--case NAME] [--reps N (7)] [--n ELEMENTS (1000000)] [--seq] [--once]\n"
           "cases: dispatch_10 dispatch_10k ratio_10k_10 dispatch_1000 dispatch_10_deep ratio_10k_10_deep\n"
           "       add_dispatch add_dispatch_10k empty_check empty_loop\n"
           "       ucs_dispatch_10 ucs_dispatch_1000 ucs_dispatch_10k ucs_ratio_10k_10 (built with\n"
           "       -DRDMAX_BENCH_UCS -lucs: UCX's ucs_arbiter, the same workload as dispatch_N)\n");
}

int main(int argc, char **argv)
{
    const char *only = NULL;
    double d10 = 0, d10k = 0, d10deep = 0;
    int i;
    for (i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--case") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            g_reps = (unsigned)strtoul(argv[++i], NULL, 0);
        } else if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) {
            g_n = (size_t)strtoull(argv[++i], NULL, 0);
        } else if (strcmp(argv[i], "--seq") == 0) {
            g_seq = 1;
        } else if (strcmp(argv[i], "--once") == 0) {
            g_once = 1;
            g_reps = 1;
        } else {
            usage();
            return strcmp(argv[i], "--help") == 0 ? 0 : 1;
        }
    }
    if (g_reps < 1 || g_reps > 64 || g_n < 1000) {
        fprintf(stderr, "arbiter_bench: --reps must be 1..64 and --n at least 1000\n");
        return 1;
    }
#ifndef NDEBUG
    printf("# arbiter_bench: built without -DNDEBUG, RDMAX_ASSERT checks are on\n");
#endif
    if (want(only, "dispatch_10") || want(only, "ratio_10k_10")) {
        d10 = case_steady(10, 1);
        line("dispatch_10", d10, "ns");
    }
    if (want(only, "dispatch_10k") || want(only, "ratio_10k_10") || want(only, "ratio_10k_10_deep")) {
        d10k = case_steady(10000, 1);
        line("dispatch_10k", d10k, "ns");
    }
    if (want(only, "ratio_10k_10")) {
        line("ratio_10k_10", d10k / d10, "ratio");
    }
    if (want(only, "dispatch_1000")) {
        line("dispatch_1000", case_steady(1000, 1), "ns");
    }
#ifdef RDMAX_BENCH_UCS
    if (want(only, "ucs_dispatch_10") || want(only, "ucs_dispatch_1000") || want(only, "ucs_dispatch_10k") ||
        want(only, "ucs_ratio_10k_10")) {
        double u10 = 0, u10k = 0;
        int ucs_ok = ucs_check() == 0;
        if (ucs_ok && (want(only, "ucs_dispatch_10") || want(only, "ucs_ratio_10k_10"))) {
            u10 = case_ucs_steady(10, 1);
            line("ucs_dispatch_10", u10, "ns");
        }
        if (ucs_ok && want(only, "ucs_dispatch_1000")) {
            line("ucs_dispatch_1000", case_ucs_steady(1000, 1), "ns");
        }
        if (ucs_ok && (want(only, "ucs_dispatch_10k") || want(only, "ucs_ratio_10k_10"))) {
            u10k = case_ucs_steady(10000, 1);
            line("ucs_dispatch_10k", u10k, "ns");
        }
        if (ucs_ok && want(only, "ucs_ratio_10k_10")) {
            line("ucs_ratio_10k_10", u10k / u10, "ratio");
        }
    }
#endif
    if (want(only, "dispatch_10_deep") || want(only, "ratio_10k_10_deep")) {
        d10deep = case_steady(10, 1000);
        line("dispatch_10_deep", d10deep, "ns");
    }
    if (want(only, "ratio_10k_10_deep")) {
        line("ratio_10k_10_deep", d10k / d10deep, "ratio");
    }
    if (want(only, "add_dispatch")) {
        line("add_dispatch", case_add_dispatch(1), "ns");
    }
    if (want(only, "add_dispatch_10k")) {
        line("add_dispatch_10k", case_add_dispatch(10000), "ns");
    }
    if (want(only, "empty_check")) {
        line("empty_check", case_empty(1), "ns");
    }
    if (want(only, "empty_loop")) {
        line("empty_loop", case_empty(0), "ns");
    }
    return 0;
}
