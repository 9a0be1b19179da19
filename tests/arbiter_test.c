/* arbiter_test.c - host unit test of the arbiter (rdmax's pending queue): directed cases plus a long
   random run checked against a simple reference model (arrays per group).

   Build and run (from the repository root):
       cc -std=c11 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -DRDMAX_IMPLEMENTATION \
          -I. tests/arbiter_test.c -o arbiter_test && ./arbiter_test [seed [steps]]
   The seed may also come from $RDMAX_ARB_SEED. Output: one "PASS name" or "FAIL name: why" per test;
   exit status 1 if anything failed. A failure of the random test prints the seed and step to replay.

   Elements and endpoints are malloc'ed one by one and freed where a real transport would free them
   (inside callbacks, in purge callbacks, on endpoint destroy), so under ASan any access by the arbiter to
   something it was told to forget is a use-after-free report, not a silent pass.
*/
#define RDMAX_TRANSPORT_RC
#ifndef RDMAX_IMPLEMENTATION
#define RDMAX_IMPLEMENTATION
#endif
#include "rdmax.h"

#include "testlib.h"

#include <stddef.h>
#include <stdint.h>

#define CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* Failures: ASSERT (tests/testlib.h) prints "FAIL name: why" and abandons the current test, since the
   arbiter's state after a failed check is not worth walking; tl_where carries the random test's seed. */
#ifdef ARB_FUZZ
/* tests/fuzz/arbiter_fuzz.c: a failed check aborts, so libFuzzer keeps the input */
#undef ASSERT
#define ASSERT(c, ...) do { if (!(c)) { tl_fail(__FILE__, __LINE__, __VA_ARGS__); abort(); } } while (0)
#endif

/* ---- objects: an "endpoint" embeds a group, a "request" embeds an element ------------------------ */
typedef struct t_ep {
    rdmax__arb_group grp;
    int slot;                   /* index in the test's tables */
} t_ep;

typedef struct t_elem {
    rdmax__arb_elem link;
    long id;                    /* unique per push */
    int slot;                   /* group it was pushed to */
} t_elem;

static t_ep *ep_of(rdmax__arb_group *g) { return CONTAINER_OF(g, t_ep, grp); }
static t_elem *el_of(rdmax__arb_elem *e) { return CONTAINER_OF(e, t_elem, link); }

static t_ep *ep_new(int slot)
{
    t_ep *ep = (t_ep *)malloc(sizeof *ep);
    if (ep == NULL) abort();
    memset(ep, 0xa5, sizeof *ep);   /* garbage first: rdmax__arb_group_init must set every field */
    rdmax__arb_group_init(&ep->grp);
    ep->slot = slot;
    return ep;
}

static t_elem *el_new(long id, int slot)
{
    t_elem *el = (t_elem *)malloc(sizeof *el);
    if (el == NULL) abort();
    rdmax__arb_elem_init(&el->link);
    el->id = id;
    el->slot = slot;
    return el;
}

/* ======================================================================================================
   Directed tests. A scripted callback records (group slot, element id) per call and returns results
   from a script (REMOVE when the script runs out), optionally doing something first via a hook.
   ==================================================================================================== */
#define MAXLOG 64
typedef struct script {
    int ncalls;
    int slot[MAXLOG];
    long id[MAXLOG];
    int nres;
    rdmax__arb_result res[MAXLOG];
    void (*hook)(struct script *s, rdmax__arb *arb, rdmax__arb_group *g, rdmax__arb_elem *e);
    int free_removed;           /* free the element on REMOVE */
    void *user;
} script;

static rdmax__arb_result script_cb(rdmax__arb *arb, rdmax__arb_group *g, rdmax__arb_elem *e, void *arg)
{
    script *s = (script *)arg;
    int i = s->ncalls++;
    rdmax__arb_result r;
    ASSERT(i < MAXLOG, "callback called more than %d times (dispatch does not stop)", MAXLOG);
    s->slot[i] = ep_of(g)->slot;
    s->id[i] = el_of(e)->id;
    r = i < s->nres ? s->res[i] : RDMAX__ARB_CB_REMOVE;
    if (s->hook != NULL) {
        s->hook(s, arb, g, e);
    }
    if (r == RDMAX__ARB_CB_REMOVE && s->free_removed) {
        free(el_of(e));
    }
    return r;
}

/* "A1 B1 ..." as text, to compare a call log with one readable string */
static const char *log_str(const script *s)
{
    static char buf[MAXLOG * 8];
    size_t o = 0;
    int i;
    buf[0] = '\0';
    for (i = 0; i < s->ncalls && o + 8 < sizeof buf; i++) {
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%c%ld", i ? " " : "", 'A' + s->slot[i],
                              s->id[i] % 100);
    }
    return buf;
}

/* group contents as "id id id" */
static const char *queue_str(const rdmax__arb_group *g)
{
    static char buf[512];
    size_t o = 0;
    rdmax__arb_elem *e;
    buf[0] = '\0';
    for (e = rdmax__arb_group_first(g); e != NULL && o + 12 < sizeof buf; e = rdmax__arb_elem_next(e)) {
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%ld", o ? " " : "", el_of(e)->id);
    }
    return buf;
}

/* n endpoints (slots 0..n-1); group i gets k[i] elements with ids i*100+1.. ; all scheduled */
static void setup(rdmax__arb *arb, t_ep **eps, int n, const int *k, int schedule)
{
    int i, j;
    rdmax__arb_init(arb);
    for (i = 0; i < n; i++) {
        eps[i] = ep_new(i);
        for (j = 0; j < k[i]; j++) {
            rdmax__arb_group_push(arb, &eps[i]->grp, &el_new(i * 100 + j + 1, i)->link);
        }
        if (schedule) {
            rdmax__arb_group_schedule(arb, &eps[i]->grp);
        }
    }
}

static void purge_free_cb(rdmax__arb *arb, rdmax__arb_group *g, rdmax__arb_elem *e, void *arg)
{
    (void)arb;
    (void)g;
    if (arg != NULL) {
        (*(int *)arg)++;
    }
    free(el_of(e));
}

static void teardown(rdmax__arb *arb, t_ep **eps, int n)
{
    int i;
    for (i = 0; i < n; i++) {
        if (eps[i] != NULL) {
            rdmax__arb_group_purge(arb, &eps[i]->grp, purge_free_cb, NULL);
            free(eps[i]);
            eps[i] = NULL;
        }
    }
    ASSERT(rdmax__arb_pending(arb) == 0, "pending %zu after purging everything", rdmax__arb_pending(arb));
    ASSERT(rdmax__arb_is_empty(arb), "arbiter not empty after purging everything");
}

static void test_empty_dispatch(void)
{
    rdmax__arb arb;
    rdmax__arb zeroed;
    script s;
    t_ep *eps[1];
    int k[1] = {2};

    memset(&s, 0, sizeof s);
    memset(&zeroed, 0, sizeof zeroed);
    ASSERT(rdmax__arb_is_empty(&zeroed), "zeroed arbiter not empty");
    ASSERT(rdmax__arb_dispatch(&zeroed, 1, script_cb, &s) == 0, "dispatch of a zeroed arbiter removed something");
    rdmax__arb_init(&arb);
    ASSERT(rdmax__arb_dispatch(&arb, 1, script_cb, &s) == 0, "dispatch of an empty arbiter returned non-zero");
    ASSERT(s.ncalls == 0, "empty arbiter called back %d times", s.ncalls);

    /* pushing does not schedule: still nothing to dispatch */
    setup(&arb, eps, 1, k, 0);
    ASSERT(rdmax__arb_pending(&arb) == 2, "pending %zu, want 2", rdmax__arb_pending(&arb));
    ASSERT(rdmax__arb_is_empty(&arb), "push scheduled the group");
    ASSERT(!rdmax__arb_group_is_scheduled(&eps[0]->grp), "push scheduled the group (state)");
    ASSERT(rdmax__arb_dispatch(&arb, 1, script_cb, &s) == 0 && s.ncalls == 0, "unscheduled group dispatched");
    rdmax__arb_group_schedule(&arb, &eps[0]->grp);
    ASSERT(!rdmax__arb_is_empty(&arb), "schedule did not schedule");
    s.free_removed = 1;
    ASSERT(rdmax__arb_dispatch(&arb, 1, script_cb, &s) == 2, "dispatch did not drain one group");
    ASSERT(strcmp(log_str(&s), "A1 A2") == 0, "order %s, want A1 A2", log_str(&s));
    ASSERT(rdmax__arb_is_empty(&arb) && !rdmax__arb_group_is_scheduled(&eps[0]->grp), "drained group stays");
    /* scheduling an empty group does nothing */
    rdmax__arb_group_schedule(&arb, &eps[0]->grp);
    ASSERT(rdmax__arb_is_empty(&arb), "empty group got scheduled");
    teardown(&arb, eps, 1);
}

static void test_stop_leaves_group_at_head(void)
{
    rdmax__arb arb;
    t_ep *eps[3];
    int k[3] = {2, 2, 2};
    script s;
    size_t n;

    setup(&arb, eps, 3, k, 1);
    memset(&s, 0, sizeof s);
    s.free_removed = 1;
    s.nres = 2;
    s.res[0] = RDMAX__ARB_CB_REMOVE;
    s.res[1] = RDMAX__ARB_CB_STOP;
    n = rdmax__arb_dispatch(&arb, 1, script_cb, &s);
    ASSERT(n == 1, "dispatch returned %zu, want 1", n);
    ASSERT(strcmp(log_str(&s), "A1 B1") == 0, "calls %s, want A1 B1 (STOP must return)", log_str(&s));
    ASSERT(rdmax__arb_group_count(&eps[1]->grp) == 2 && strcmp(queue_str(&eps[1]->grp), "101 102") == 0,
          "STOP element not kept at the head: B = %s", queue_str(&eps[1]->grp));
    ASSERT(rdmax__arb_pending(&arb) == 5, "pending %zu, want 5", rdmax__arb_pending(&arb));

    memset(&s, 0, sizeof s);
    s.free_removed = 1;
    n = rdmax__arb_dispatch(&arb, 1, script_cb, &s);
    ASSERT(n == 5, "second dispatch returned %zu, want 5", n);
    ASSERT(strcmp(log_str(&s), "B1 C1 A2 B2 C2") == 0, "calls %s, want B1 C1 A2 B2 C2", log_str(&s));
    teardown(&arb, eps, 3);
}

static void test_resched_not_revisited(void)
{
    rdmax__arb arb;
    t_ep *eps[2];
    int k[2] = {3, 3};
    script s;
    size_t n;

    /* RESCHED: not again in this dispatch, first thing in the next */
    setup(&arb, eps, 2, k, 1);
    memset(&s, 0, sizeof s);
    s.free_removed = 1;
    s.nres = 1;
    s.res[0] = RDMAX__ARB_CB_RESCHED;
    n = rdmax__arb_dispatch(&arb, 1, script_cb, &s);
    ASSERT(n == 3 && strcmp(log_str(&s), "A1 B1 B2 B3") == 0, "calls %s (n=%zu), want A1 B1 B2 B3",
          log_str(&s), n);
    ASSERT(rdmax__arb_group_is_scheduled(&eps[0]->grp) && !rdmax__arb_is_empty(&arb),
          "RESCHED group not scheduled after dispatch");
    memset(&s, 0, sizeof s);
    s.free_removed = 1;
    n = rdmax__arb_dispatch(&arb, 1, script_cb, &s);
    ASSERT(n == 3 && strcmp(log_str(&s), "A1 A2 A3") == 0, "calls %s, want A1 A2 A3", log_str(&s));
    teardown(&arb, eps, 2);

    /* NEXT_GROUP, for contrast: the group comes back in the next lap of the same dispatch */
    setup(&arb, eps, 2, k, 1);
    memset(&s, 0, sizeof s);
    s.free_removed = 1;
    s.nres = 1;
    s.res[0] = RDMAX__ARB_CB_NEXT_GROUP;
    n = rdmax__arb_dispatch(&arb, 1, script_cb, &s);
    ASSERT(n == 6 && strcmp(log_str(&s), "A1 B1 A1 B2 A2 B3 A3") == 0, "calls %s, want A1 B1 A1 B2 A2 B3 A3",
          log_str(&s));
    teardown(&arb, eps, 2);
}

/* Hook: on the first call, destroy the group being dispatched (purge with a counting cancel callback,
   free the endpoint and the element in flight) and, for variant 2, also the next group. */
typedef struct destroy_ctx {
    t_ep **eps;
    int variant;                /* 0: cleanup own; 1: purge own; 2: destroy own and next; 3: reinit own */
    int cancelled;
} destroy_ctx;

static void destroy_hook(script *s, rdmax__arb *arb, rdmax__arb_group *g, rdmax__arb_elem *e)
{
    destroy_ctx *d = (destroy_ctx *)s->user;
    t_ep *ep = ep_of(g);
    rdmax__arb_elem *x, *keep[8];
    int nkeep = 0;
    if (s->ncalls != 1) {
        return;
    }
    if (d->variant == 0 || d->variant == 2) {
        /* cleanup drops queued elements unseen: their owner notes them before and frees them after */
        for (x = rdmax__arb_group_first(g); x != NULL && nkeep < 8; x = rdmax__arb_elem_next(x)) {
            keep[nkeep++] = x;
        }
        rdmax__arb_group_cleanup(arb, g);
        while (nkeep > 0) {
            x = keep[--nkeep];
            ASSERT(!rdmax__arb_elem_is_queued(x), "element still queued after cleanup");
            free(el_of(x));
            d->cancelled++;
        }
    } else {
        rdmax__arb_group_purge(arb, g, purge_free_cb, &d->cancelled);
    }
    if (d->variant == 3) {
        /* same memory, new life: a fresh group with one element, scheduled from inside the callback */
        rdmax__arb_group_init(g);
        rdmax__arb_group_push(arb, g, &el_new(999, ep->slot)->link);
        rdmax__arb_group_schedule(arb, g);
    } else {
        d->eps[ep->slot] = NULL;
        free(ep);
    }
    if (d->variant == 2) {
        t_ep *next = d->eps[1];
        rdmax__arb_group_purge(arb, &next->grp, purge_free_cb, &d->cancelled);
        d->eps[1] = NULL;
        free(next);
    }
    if (s->res[0] != RDMAX__ARB_CB_REMOVE) {
        free(el_of(e)); /* the element in flight belongs to us now, whatever we return (script_cb frees
                           it on REMOVE) */
    }
}

static void test_destroy_own_group_in_callback(void)
{
    int variant;
    for (variant = 0; variant < 4; variant++) {
        rdmax__arb arb;
        t_ep *eps[3];
        int k[3] = {3, 2, 2};
        script s;
        destroy_ctx d;
        size_t n;

        setup(&arb, eps, 3, k, 1);
        memset(&s, 0, sizeof s);
        memset(&d, 0, sizeof d);
        d.eps = eps;
        d.variant = variant;
        s.user = &d;
        s.hook = destroy_hook;
        s.free_removed = 1;
        s.nres = 1;
        /* a "keep" result on an element we just freed: the arbiter must not touch it */
        s.res[0] = variant == 1 ? RDMAX__ARB_CB_REMOVE : RDMAX__ARB_CB_NEXT_GROUP;
        n = rdmax__arb_dispatch(&arb, 1, script_cb, &s);
        if (variant == 2) {
            ASSERT(d.cancelled == 4, "variant %d: %d dropped/cancelled, want 4", variant, d.cancelled);
            ASSERT(n == 2 && strcmp(log_str(&s), "A1 C1 C2") == 0, "variant 2: calls %s (n=%zu), want A1 C1 C2",
                  log_str(&s), n);
        } else if (variant == 3) {
            ASSERT(d.cancelled == 2, "variant 3: %d cancelled, want 2", d.cancelled);
            ASSERT(n == 5 && strcmp(log_str(&s), "A1 B1 C1 A99 B2 C2") == 0,
                  "variant 3: calls %s (n=%zu), want A1 B1 C1 A99 B2 C2", log_str(&s), n);
        } else {
            ASSERT(d.cancelled == 2, "variant %d: %d dropped/cancelled, want 2", variant, d.cancelled);
            ASSERT(n == (variant == 1 ? 5u : 4u) && strcmp(log_str(&s), "A1 B1 C1 B2 C2") == 0,
                  "variant %d: calls %s (n=%zu), want A1 B1 C1 B2 C2", variant, log_str(&s), n);
        }
        ASSERT(rdmax__arb_pending(&arb) == 0, "variant %d: pending %zu, want 0", variant, rdmax__arb_pending(&arb));
        ASSERT(rdmax__arb_is_empty(&arb), "variant %d: arbiter not empty", variant);
        teardown(&arb, eps, 3);
    }
}

/* Hook: push-head grants into the group being dispatched */
static void push_head_hook(script *s, rdmax__arb *arb, rdmax__arb_group *g, rdmax__arb_elem *e)
{
    int n = *(int *)s->user;
    (void)e;
    if (s->ncalls == 1) {
        int i;
        for (i = 0; i < n; i++) {
            rdmax__arb_group_push_head(arb, g, &el_new(50 + i, ep_of(g)->slot)->link);
        }
    }
}

static void test_push_head(void)
{
    struct { int nheads; rdmax__arb_result r; const char *want; } cases[] = {
        {1, RDMAX__ARB_CB_NEXT_GROUP, "50 1 2"},
        {2, RDMAX__ARB_CB_NEXT_GROUP, "51 50 1 2"},
        {1, RDMAX__ARB_CB_REMOVE, "50 2"},
        {1, RDMAX__ARB_CB_DESCHED, "50 1 2"},
    };
    size_t c;
    for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        rdmax__arb arb;
        t_ep *eps[1];
        int k[1] = {2};
        script s;

        setup(&arb, eps, 1, k, 1);
        memset(&s, 0, sizeof s);
        s.user = &cases[c].nheads;
        s.hook = push_head_hook;
        s.free_removed = 1;
        s.nres = 2;
        s.res[0] = cases[c].r;
        s.res[1] = RDMAX__ARB_CB_STOP;
        rdmax__arb_dispatch(&arb, 1, script_cb, &s);
        if (cases[c].r == RDMAX__ARB_CB_DESCHED) {
            ASSERT(s.ncalls == 1, "case %zu: %d calls after DESCHED, want 1", c, s.ncalls);
        }
        ASSERT(strcmp(queue_str(&eps[0]->grp), cases[c].want) == 0, "case %zu: queue '%s', want '%s'", c,
              queue_str(&eps[0]->grp), cases[c].want);
        ASSERT(rdmax__arb_group_count(&eps[0]->grp) == (size_t)(cases[c].r == RDMAX__ARB_CB_REMOVE ? 1 : 2) +
                                                         (size_t)cases[c].nheads,
              "case %zu: count %zu", c, rdmax__arb_group_count(&eps[0]->grp));
        teardown(&arb, eps, 1);
    }
    {
        /* outside dispatch: push_head goes in front of everything, also into an empty group */
        rdmax__arb arb;
        t_ep *eps[1];
        int k[1] = {0};
        setup(&arb, eps, 1, k, 0);
        rdmax__arb_group_push_head(&arb, &eps[0]->grp, &el_new(7, 0)->link);
        rdmax__arb_group_push(&arb, &eps[0]->grp, &el_new(8, 0)->link);
        rdmax__arb_group_push_head(&arb, &eps[0]->grp, &el_new(6, 0)->link);
        ASSERT(strcmp(queue_str(&eps[0]->grp), "6 7 8") == 0, "queue '%s', want '6 7 8'", queue_str(&eps[0]->grp));
        teardown(&arb, eps, 1);
    }
}

static void test_per_group(void)
{
    static const struct { unsigned pg; const char *want; } cases[] = {
        {2, "A1 A2 B1 B2 A3 A4 B3 B4 A5"},
        {0, "A1 B1 A2 B2 A3 B3 A4 B4 A5"},
        {9, "A1 A2 A3 A4 A5 B1 B2 B3 B4"},
    };
    size_t c;
    for (c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        rdmax__arb arb;
        t_ep *eps[2];
        int k[2] = {5, 4};
        script s;
        size_t n;
        setup(&arb, eps, 2, k, 1);
        memset(&s, 0, sizeof s);
        s.free_removed = 1;
        n = rdmax__arb_dispatch(&arb, cases[c].pg, script_cb, &s);
        ASSERT(n == 9 && strcmp(log_str(&s), cases[c].want) == 0, "per_group %u: calls %s, want %s",
              cases[c].pg, log_str(&s), cases[c].want);
        teardown(&arb, eps, 2);
    }
}

static void test_desched_and_push(void)
{
    rdmax__arb arb;
    t_ep *eps[2];
    int k[2] = {1, 1};
    script s;

    setup(&arb, eps, 2, k, 1);
    memset(&s, 0, sizeof s);
    s.free_removed = 1;
    s.nres = 2;
    s.res[0] = RDMAX__ARB_CB_DESCHED;
    s.res[1] = RDMAX__ARB_CB_DESCHED;
    ASSERT(rdmax__arb_dispatch(&arb, 1, script_cb, &s) == 0 && s.ncalls == 2, "DESCHED: %d calls", s.ncalls);
    ASSERT(rdmax__arb_is_empty(&arb), "arbiter not empty after both groups DESCHED");
    ASSERT(rdmax__arb_group_is_desched(&eps[0]->grp) && !rdmax__arb_group_is_scheduled(&eps[0]->grp),
          "group state after DESCHED");
    rdmax__arb_group_push(&arb, &eps[0]->grp, &el_new(2, 0)->link);
    ASSERT(rdmax__arb_group_is_desched(&eps[0]->grp) && rdmax__arb_is_empty(&arb),
          "push rescheduled a desched group");
    memset(&s, 0, sizeof s);
    s.free_removed = 1;
    ASSERT(rdmax__arb_dispatch(&arb, 1, script_cb, &s) == 0 && s.ncalls == 0, "desched group dispatched");
    rdmax__arb_group_schedule(&arb, &eps[1]->grp);
    rdmax__arb_group_schedule(&arb, &eps[0]->grp);
    ASSERT(!rdmax__arb_group_is_desched(&eps[0]->grp) && rdmax__arb_group_is_scheduled(&eps[0]->grp),
          "schedule did not clear desched");
    ASSERT(rdmax__arb_dispatch(&arb, 1, script_cb, &s) == 3 && strcmp(log_str(&s), "B1 A1 A2") == 0,
          "calls %s, want B1 A1 A2 (schedule order)", log_str(&s));
    /* rdmax__arb_group_desched on a scheduled group, and on an idle one (no effect) */
    rdmax__arb_group_push(&arb, &eps[0]->grp, &el_new(3, 0)->link);
    rdmax__arb_group_desched(&arb, &eps[0]->grp);
    ASSERT(!rdmax__arb_group_is_desched(&eps[0]->grp), "desched of an idle group changed its state");
    rdmax__arb_group_schedule(&arb, &eps[0]->grp);
    rdmax__arb_group_desched(&arb, &eps[0]->grp);
    ASSERT(rdmax__arb_group_is_desched(&eps[0]->grp) && rdmax__arb_is_empty(&arb), "desched did not deschedule");
    teardown(&arb, eps, 2);
}

static void test_lap_without_progress(void)
{
    rdmax__arb arb;
    t_ep *eps[2];
    int k[2] = {1, 1};
    script s;
    int i;

    setup(&arb, eps, 2, k, 1);
    memset(&s, 0, sizeof s);
    s.nres = MAXLOG;
    for (i = 0; i < MAXLOG; i++) {
        s.res[i] = RDMAX__ARB_CB_NEXT_GROUP;
    }
    ASSERT(rdmax__arb_dispatch(&arb, 1, script_cb, &s) == 0, "NEXT_GROUP removed something");
    ASSERT(strcmp(log_str(&s), "A1 B1") == 0, "calls %s, want A1 B1 (a lap without removal ends dispatch)",
          log_str(&s));
    ASSERT(rdmax__arb_group_is_scheduled(&eps[0]->grp) && rdmax__arb_group_is_scheduled(&eps[1]->grp),
          "NEXT_GROUP descheduled a group");
    teardown(&arb, eps, 2);
}

static void nested_hook(script *s, rdmax__arb *arb, rdmax__arb_group *g, rdmax__arb_elem *e)
{
    (void)g;
    (void)e;
    *(size_t *)s->user += rdmax__arb_dispatch(arb, 1, script_cb, s) + 1000;
}

static void schedule_hook(script *s, rdmax__arb *arb, rdmax__arb_group *g, rdmax__arb_elem *e)
{
    t_ep **eps = (t_ep **)s->user;
    (void)g;
    (void)e;
    if (s->ncalls == 1) {
        rdmax__arb_group_schedule(arb, &eps[2]->grp);
    }
}

static void test_callback_reentry(void)
{
    rdmax__arb arb;
    t_ep *eps[3];
    int k[3] = {2, 1, 1};
    script s;
    size_t nested = 0;

    /* a nested dispatch does nothing and returns 0 */
    setup(&arb, eps, 1, k, 1);
    memset(&s, 0, sizeof s);
    s.free_removed = 1;
    s.user = &nested;
    s.hook = nested_hook;
    ASSERT(rdmax__arb_dispatch(&arb, 1, script_cb, &s) == 2 && s.ncalls == 2, "nested dispatch: %d calls",
          s.ncalls);
    ASSERT(nested == 2000, "nested dispatch returned %zu, want 0", nested - 2000);
    teardown(&arb, eps, 1);

    /* a group scheduled from a callback joins the tail of the running lap */
    setup(&arb, eps, 3, k, 0);
    rdmax__arb_group_schedule(&arb, &eps[0]->grp);
    rdmax__arb_group_schedule(&arb, &eps[1]->grp);
    memset(&s, 0, sizeof s);
    s.free_removed = 1;
    s.user = eps;
    s.hook = schedule_hook;
    ASSERT(rdmax__arb_dispatch(&arb, 1, script_cb, &s) == 4, "dispatch returned wrong count");
    ASSERT(strcmp(log_str(&s), "A1 B1 C1 A2") == 0, "calls %s, want A1 B1 C1 A2", log_str(&s));
    teardown(&arb, eps, 3);

    /* an unknown result is a STOP */
    setup(&arb, eps, 2, k, 1);
    memset(&s, 0, sizeof s);
    s.free_removed = 1;
    s.nres = 1;
    s.res[0] = (rdmax__arb_result)42;
    ASSERT(rdmax__arb_dispatch(&arb, 1, script_cb, &s) == 0 && s.ncalls == 1, "unknown result: %d calls", s.ncalls);
    ASSERT(rdmax__arb_group_count(&eps[0]->grp) == 2, "unknown result lost the element");
    teardown(&arb, eps, 2);
}

/* Near prefetch hints (rdmax.h, RDMAX__ARB_NEAR_MAX): with a few hundred groups and a stable ring the
   dispatcher reaches exact hints and then reads them (the group named by a hint). Here the ring runs
   until the hints are exact, then callbacks destroy scheduled groups (cleanup + free: ASan reports any
   later read of one), desched others and schedule new ones, and the order must stay strict
   round-robin: between two changes, every lap visits the same groups in the same order. Every served
   element is freed and replaced by a new one (so the heads the hints read change all the time). */
#define NH_GROUPS 300
#define NH_NEW 40               /* groups created during the run */
static struct {
    t_ep *eps[NH_GROUPS + NH_NEW];
    int nslots;
    int seq[4 * (NH_GROUPS + NH_NEW)]; /* slots served since the ring last changed (first laps) */
    int nseq;
    long served, next_id;
    int budget;
    int change;                 /* what the next hooked callback does: 0 nothing, 1 destroy, ... */
    int changed;                /* the ring changed in this dispatch: order check starts over */
    int exact_seen;
} NH;

static rdmax__arb_result nh_cb(rdmax__arb *arb, rdmax__arb_group *g, rdmax__arb_elem *e, void *arg)
{
    int slot = ep_of(g)->slot;
    (void)arg;
    if (NH.budget == 0) {
        return RDMAX__ARB_CB_STOP; /* the element goes back to the head */
    }
    NH.budget--;
    NH.served++;
    /* strict round-robin while the ring is unchanged: lap k repeats lap k-1 */
    if (!NH.changed && NH.nseq < (int)(sizeof NH.seq / sizeof NH.seq[0])) {
        int n = (int)arb->ngroups;
        ASSERT(NH.nseq < n || NH.seq[NH.nseq - n] == slot, "visit %d: slot %d, the lap before served %d there",
               NH.nseq, slot, NH.seq[NH.nseq - n]);
        NH.seq[NH.nseq++] = slot;
    }
    free(el_of(e));
    rdmax__arb_group_push(arb, g, &el_new(NH.next_id++, slot)->link);
    if (NH.change != 0) {
        int victim = (slot + 1 + (int)(NH.served % 97)) % NH.nslots;
        while (NH.eps[victim] == NULL || victim == slot) {
            victim = (victim + 1) % NH.nslots;
        }
        if (NH.change == 1) {           /* destroy another scheduled group */
            rdmax__arb_group_purge(arb, &NH.eps[victim]->grp, purge_free_cb, NULL);
            free(NH.eps[victim]);
            NH.eps[victim] = NULL;
        } else if (NH.change == 2) {    /* desched another one, then destroy it (not in the ring) */
            rdmax__arb_group_desched(arb, &NH.eps[victim]->grp);
            rdmax__arb_group_purge(arb, &NH.eps[victim]->grp, purge_free_cb, NULL);
            free(NH.eps[victim]);
            NH.eps[victim] = NULL;
        } else if (NH.change == 3 && NH.nslots < NH_GROUPS + NH_NEW) { /* a new endpoint joins */
            int ns = NH.nslots++;
            NH.eps[ns] = ep_new(ns);
            rdmax__arb_group_push(arb, &NH.eps[ns]->grp, &el_new(NH.next_id++, ns)->link);
            rdmax__arb_group_push(arb, &NH.eps[ns]->grp, &el_new(NH.next_id++, ns)->link);
            rdmax__arb_group_schedule(arb, &NH.eps[ns]->grp);
        } else if (NH.change == 4) {    /* destroy its own group */
            rdmax__arb_group_purge(arb, g, purge_free_cb, NULL);
            free(NH.eps[slot]);
            NH.eps[slot] = NULL;
        }
        NH.change = 0;
        NH.changed = 1;
        NH.nseq = 0;
    }
    return RDMAX__ARB_CB_REMOVE;
}

static void test_near_hints(void)
{
    rdmax__arb arb;
    int i, round;
    memset(&NH, 0, sizeof NH);
    rdmax__arb_init(&arb);
    NH.nslots = NH_GROUPS;
    NH.next_id = 1;
    for (i = 0; i < NH_GROUPS; i++) {
        NH.eps[i] = ep_new(i);
        rdmax__arb_group_push(&arb, &NH.eps[i]->grp, &el_new(NH.next_id++, i)->link);
        rdmax__arb_group_push(&arb, &NH.eps[i]->grp, &el_new(NH.next_id++, i)->link);
        rdmax__arb_group_schedule(&arb, &NH.eps[i]->grp);
    }
    for (round = 0; round < 400; round++) {
        int stable = round % 20 < 12; /* a dozen quiet dispatches (exact hints), then changes */
        NH.budget = 64;
        NH.changed = 0;
        if (!stable) {
            NH.change = 1 + round % 4;
        }
        rdmax__arb_dispatch(&arb, 1, nh_cb, NULL);
        if (arb.ngroups > RDMAX__ARB_HINT_MIN && arb.ngroups <= RDMAX__ARB_NEAR_MAX &&
            arb.hints_set == RDMAX__ARB_EXACT) {
            NH.exact_seen++;
        }
        if (NH.changed || !stable) {
            NH.nseq = 0; /* the next dispatch starts a new stretch of the order check */
        }
    }
    ASSERT(NH.exact_seen > 20 || RDMAX__ARB_NEAR_MAX < NH_GROUPS, /* (far hints only: the rest still holds) */
           "the hints were exact after only %d of 400 dispatches", NH.exact_seen);
    ASSERT(rdmax__arb_pending(&arb) == (size_t)(2 * (int)arb.ngroups), "pending %zu, want %d",
           rdmax__arb_pending(&arb), 2 * (int)arb.ngroups);
    teardown(&arb, NH.eps, NH.nslots);
}

/* ======================================================================================================
   Random test against a reference model.
   Model per group slot: the queue as an array of element ids, the schedule state, and for fairness the
   turn number at which the group last entered the ring, was last visited and was last served.
   ==================================================================================================== */
enum { NG = 12, MAXQ = 40, CAP_TOTAL = 150, CB_BUDGET = 300 };
enum { M_IDLE, M_DESCHED, M_SCHED, M_RESCHED };
enum { ES_NONE, ES_QUEUED, ES_INFLIGHT, ES_DONE, ES_CANCELLED, ES_RELEASED, ES_DROPPED, ES_REQUEUED };

typedef struct m_group {
    t_ep *ep;                   /* NULL: slot has no endpoint */
    long q[MAXQ];
    int n;
    int inflight;               /* its element is in a callback right now */
    int state;
    long elig_since;            /* turn number from which it has been in the ring without a break */
    long last_visit;            /* last turn (any result) */
    long last_serv;             /* last turn that did not return STOP */
    long elig_cb, visit_cb;     /* callback number when it joined the ring, and of its last callback */
} m_group;

static struct {
    rdmax__arb arb;
    m_group m[NG];
    unsigned char *est;         /* element id -> ES_* */
    long nid, cap;
    uint64_t rng;
    int total;                  /* model: elements queued + in flight */
    long seq;                   /* turns started so far */
    /* running dispatch */
    int pg, expect_slot, run, stopped, stop_slot, first_slot, cb_calls, in_dispatch;
    size_t removes;
    /* running callback */
    int own, own_gone, self_moved, nheads;
    long turn_prev_serv;        /* last_serv of the group before its running turn */
    long cbseq, last_rm_cb;     /* callbacks so far; number of the last REMOVE (or dispatch start) */
    /* purge check */
    long pq[MAXQ];
    int pn, pi, pslot;
    /* coverage counters */
    long st_cb, st_remove, st_next, st_desched, st_resched, st_stop, st_fair, st_cont, st_purge_own,
        st_destroy_own, st_purge_other, st_destroy_other, st_head_cb, st_repush, st_self_moved,
        st_push_other, st_dispatch, st_purge, st_destroy, st_cancelled, st_max_total, st_early;
} R;

static int g_trace; /* $RDMAX_ARB_TRACE=1: print every operation of the random test */
#define TRACE(...) do { if (g_trace) printf("# " __VA_ARGS__); } while (0)

#ifdef ARB_FUZZ
/* tests/fuzz/arbiter_fuzz.c: every choice of the random test comes from the fuzzer's input (one byte, or
   two for n > 256); past its end the choices are 0 and the run stops at the next step. */
static const unsigned char *g_fz_p;
static size_t g_fz_n;
static unsigned rnd(unsigned n)
{
    unsigned v = 0;
    for (unsigned k = n > 256 ? 2 : 1; k > 0 && g_fz_n > 0; k--, g_fz_n--)
        v = v << 8 | *g_fz_p++;
    return v % n;
}
#else
static uint64_t rnd64(void)
{
    uint64_t x = R.rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    R.rng = x;
    return x * 2685821657736338717ULL;
}
static unsigned rnd(unsigned n) { return (unsigned)((rnd64() >> 11) % n); }
#endif

static long new_id(void)
{
    if (R.nid == R.cap) {
        R.cap = R.cap ? R.cap * 2 : 4096;
        R.est = (unsigned char *)realloc(R.est, (size_t)R.cap);
        if (R.est == NULL) abort();
    }
    R.est[R.nid] = ES_NONE;
    return R.nid++;
}

static void m_reset(int s, t_ep *ep)
{
    R.m[s].ep = ep;
    R.m[s].n = 0;
    R.m[s].inflight = 0;
    R.m[s].state = M_IDLE;
    R.m[s].elig_since = R.m[s].last_visit = R.m[s].last_serv = -1;
    R.m[s].elig_cb = R.m[s].visit_cb = -1;
    if (R.stop_slot == s) {
        R.stop_slot = -1;
    }
}

static void check_all(void)
{
    int s, i, total = 0, any_sched = 0;
    for (s = 0; s < NG; s++) {
        m_group *m = &R.m[s];
        rdmax__arb_group *g;
        rdmax__arb_elem *e;
        size_t cnt;
        if (m->ep == NULL) {
            continue;
        }
        g = &m->ep->grp;
        cnt = (size_t)(m->n + m->inflight);
        ASSERT(rdmax__arb_group_count(g) == cnt, "group %d count %zu, model %zu", s, rdmax__arb_group_count(g), cnt);
        ASSERT(rdmax__arb_group_is_empty(g) == (cnt == 0), "group %d is_empty wrong", s);
        ASSERT(rdmax__arb_group_is_scheduled(g) == (m->state == M_SCHED || m->state == M_RESCHED),
              "group %d is_scheduled %d, model state %d", s, (int)rdmax__arb_group_is_scheduled(g), m->state);
        ASSERT(rdmax__arb_group_is_desched(g) == (m->state == M_DESCHED), "group %d is_desched %d, model state %d",
              s, (int)rdmax__arb_group_is_desched(g), m->state);
        for (i = 0, e = rdmax__arb_group_first(g); i < m->n; i++, e = rdmax__arb_elem_next(e)) {
            ASSERT(e != NULL, "group %d: element %d of %d missing (lost)", s, i, m->n);
            ASSERT(el_of(e)->id == m->q[i], "group %d position %d: id %ld, model %ld (order)", s, i, el_of(e)->id,
                  m->q[i]);
            ASSERT(rdmax__arb_elem_is_queued(e), "queued element %ld reports not queued", el_of(e)->id);
            ASSERT(R.est[m->q[i]] == ES_QUEUED, "element %ld in group %d but model state %d", m->q[i], s,
                  R.est[m->q[i]]);
        }
        ASSERT(e == NULL, "group %d has more elements than the model's %d", s, m->n);
        total += (int)cnt;
        any_sched |= m->state == M_SCHED;
    }
    ASSERT(total == R.total, "model total %d != sum %d (test bug)", R.total, total);
    ASSERT(rdmax__arb_pending(&R.arb) == (size_t)total, "pending %zu, model %d", rdmax__arb_pending(&R.arb), total);
    ASSERT(rdmax__arb_is_empty(&R.arb) == !any_sched, "is_empty %d but model has%s scheduled groups",
          (int)rdmax__arb_is_empty(&R.arb), any_sched ? "" : " no");
}

/* ---- operations, each on the arbiter and on the model (usable at top level and inside callbacks) --- */
static void op_push(int s, int head)
{
    m_group *m = &R.m[s];
    long id;
    t_elem *el;
    if (m->ep == NULL || m->n + m->inflight >= MAXQ || R.total >= CAP_TOTAL) {
        return;
    }
    id = new_id();
    el = el_new(id, s);
    TRACE("push%s %d id %ld\n", head ? "_head" : "", s, id);
    if (head) {
        rdmax__arb_group_push_head(&R.arb, &m->ep->grp, &el->link);
        memmove(m->q + 1, m->q, (size_t)m->n * sizeof m->q[0]);
        m->q[0] = id;
        if (R.in_dispatch && s == R.own && !R.own_gone) {
            R.nheads++;
        }
    } else {
        rdmax__arb_group_push(&R.arb, &m->ep->grp, &el->link);
        m->q[m->n] = id;
    }
    m->n++;
    R.total++;
    if (R.total > R.st_max_total) R.st_max_total = R.total;
    R.est[id] = ES_QUEUED;
}

static void m_join(m_group *m)
{
    m->state = M_SCHED;
    m->elig_since = R.seq;
    m->elig_cb = R.cbseq;
}

static void op_schedule(int s)
{
    m_group *m = &R.m[s];
    if (m->ep == NULL) {
        return;
    }
    TRACE("schedule %d (state %d)\n", s, m->state);
    rdmax__arb_group_schedule(&R.arb, &m->ep->grp);
    if ((m->state == M_IDLE || m->state == M_DESCHED) && m->n + m->inflight > 0) {
        m_join(m);
    }
}

static void op_desched(int s)
{
    m_group *m = &R.m[s];
    if (m->ep == NULL) {
        return;
    }
    TRACE("desched %d (state %d)\n", s, m->state);
    rdmax__arb_group_desched(&R.arb, &m->ep->grp);
    if (m->state == M_SCHED || m->state == M_RESCHED) {
        m->state = M_DESCHED;
        if (R.stop_slot == s) {
            R.stop_slot = -1;
        }
        if (R.in_dispatch && s == R.own && !R.own_gone) {
            R.self_moved = 1;
            R.st_self_moved++;
        }
    }
}

static void purge_check_cb(rdmax__arb *arb, rdmax__arb_group *g, rdmax__arb_elem *e, void *arg)
{
    t_elem *el = el_of(e);
    (void)arg;
    ASSERT(arb == &R.arb, "purge callback got another arbiter");
    ASSERT(g == &R.m[R.pslot].ep->grp, "purge callback got another group");
    ASSERT(!rdmax__arb_elem_is_queued(e), "cancelled element still marked queued");
    ASSERT(R.pi < R.pn, "purge cancelled more than the %d queued elements", R.pn);
    ASSERT(el->id == R.pq[R.pi], "purge cancelled %ld at position %d, model %ld", el->id, R.pi, R.pq[R.pi]);
    ASSERT(R.est[el->id] == ES_QUEUED, "purge cancelled element %ld in state %d", el->id, R.est[el->id]);
    R.est[el->id] = ES_CANCELLED;
    R.pi++;
    R.st_cancelled++;
    free(el);
}

/* the model side of a group losing everything (purge or destroy) */
static void m_drop_all(int s)
{
    m_group *m = &R.m[s];
    R.total -= m->n + m->inflight;
    if (R.in_dispatch && s == R.own && !R.own_gone) {
        R.own_gone = 1; /* the element in flight is ours now */
    }
    m->n = 0;
    m->inflight = 0;
    m->state = M_IDLE;
    m->elig_since = -1;
    if (R.stop_slot == s) {
        R.stop_slot = -1;
    }
}

static void op_purge(int s)
{
    m_group *m = &R.m[s];
    if (m->ep == NULL) {
        return;
    }
    memcpy(R.pq, m->q, (size_t)m->n * sizeof m->q[0]);
    R.pn = m->n;
    R.pi = 0;
    R.pslot = s;
    TRACE("purge %d\n", s);
    rdmax__arb_group_purge(&R.arb, &m->ep->grp, purge_check_cb, NULL);
    ASSERT(R.pi == R.pn, "purge of group %d cancelled %d of %d queued elements", s, R.pi, R.pn);
    m_drop_all(s);
}

/* Destroy the endpoint in slot s as a transport would: note its queued requests, clean the group up
   (which drops them unseen), free them and the endpoint. Maybe create a new endpoint in the slot,
   sometimes at the same address (re-initialised, not freed). */
static void op_destroy(int s, int recreate)
{
    m_group *m = &R.m[s];
    t_ep *ep = m->ep;
    t_elem *dropped[MAXQ];
    rdmax__arb_elem *e;
    int i, n = 0, reuse = (int)rnd(2);
    if (ep == NULL) {
        return;
    }
    TRACE("destroy %d recreate %d reuse %d\n", s, recreate, reuse);
    for (e = rdmax__arb_group_first(&ep->grp); e != NULL && n < MAXQ; e = rdmax__arb_elem_next(e)) {
        dropped[n++] = el_of(e);
    }
    ASSERT(n == m->n, "group %d: walked %d elements, model %d", s, n, m->n);
    rdmax__arb_group_cleanup(&R.arb, &ep->grp);
    ASSERT(rdmax__arb_group_first(&ep->grp) == NULL && rdmax__arb_group_count(&ep->grp) == 0,
          "group %d not empty after cleanup", s);
    for (i = 0; i < n; i++) {
        ASSERT(!rdmax__arb_elem_is_queued(&dropped[i]->link), "element %ld still queued after cleanup",
              dropped[i]->id);
        R.est[dropped[i]->id] = ES_DROPPED;
        free(dropped[i]);
    }
    m_drop_all(s);
    m->ep = NULL;
    if (recreate && reuse) {
        rdmax__arb_group_init(&ep->grp);
        m_reset(s, ep);
    } else {
        memset(ep, 0x5a, sizeof *ep);
        free(ep);
        m_reset(s, recreate ? ep_new(s) : NULL);
    }
}

/* ---- the random dispatch callback ------------------------------------------------------------------ */
static int other_slot(int s)
{
    int t = (int)rnd(NG - 1);
    return t >= s ? t + 1 : t;
}

static void op_random_other(int t)
{
    switch (rnd(12)) {
    case 0: case 1: case 2: case 3:
        op_push(t, (int)(rnd(4) == 0));
        if (rnd(2)) op_schedule(t);
        R.st_push_other++;
        break;
    case 4: case 5: op_schedule(t); break;
    case 6: case 7: op_desched(t); break;
    case 8: op_purge(t); R.st_purge_other++; break;
    case 9: op_destroy(t, (int)rnd(2)); R.st_destroy_other++; break;
    default:
        if (R.m[t].ep == NULL) m_reset(t, ep_new(t));
        break;
    }
}

static rdmax__arb_result rand_cb(rdmax__arb *arb, rdmax__arb_group *g, rdmax__arb_elem *e, void *arg)
{
    t_ep *ep = ep_of(g);
    t_elem *el = el_of(e);
    int s = ep->slot, turn, t, repushed = 0;
    long id = el->id, myturn = -1;
    m_group *m;
    rdmax__arb_result r;
    unsigned x;
    (void)arg;

    ASSERT(arb == &R.arb, "callback got another arbiter");
    ASSERT(!R.stopped, "callback after a STOP in the same dispatch");
    ASSERT(s >= 0 && s < NG && R.m[s].ep == ep, "callback on a destroyed group (slot %d)", s);
    m = &R.m[s];
    ASSERT(m->state == M_SCHED, "callback on group %d in model state %d (not scheduled, or RESCHED revisited)", s,
          m->state);
    ASSERT(el->slot == s, "element %ld of group %d dispatched on group %d", id, el->slot, s);
    ASSERT(id >= 0 && id < R.nid && R.est[id] == ES_QUEUED,
          "element %ld dispatched in model state %d (run twice or never queued)", id,
          id >= 0 && id < R.nid ? R.est[id] : -1);
    ASSERT(m->n > 0 && m->q[0] == id, "group %d: dispatched %ld, model head %ld (order)", s, id,
          m->n ? m->q[0] : -1);
    ASSERT(!rdmax__arb_elem_is_queued(e), "element in callback reports queued");
    if (R.cb_calls == 0 && R.first_slot >= 0) {
        ASSERT(s == R.first_slot, "dispatch after STOP started with group %d, not the stopped group %d", s,
              R.first_slot);
    }
    if (R.expect_slot >= 0) {
        ASSERT(s == R.expect_slot, "group %d served %d of per_group %d and non-empty, but next call is group %d",
              R.expect_slot, R.run, R.pg, s);
        R.st_cont++;
    }
    turn = R.expect_slot < 0;
    R.expect_slot = -1;
    R.cb_calls++;
    m->visit_cb = ++R.cbseq;
    R.st_cb++;

    if (turn) {
        /* fairness: since this group's last served turn p, no group that was in the ring all along may
           have been left without a visit (that would be passed over twice) */
        long p = m->last_serv;
        R.run = 0;
        if (p >= 0) {
            for (t = 0; t < NG; t++) {
                if (t != s && R.m[t].ep != NULL && R.m[t].state == M_SCHED && R.m[t].elig_since >= 0 &&
                    R.m[t].elig_since <= p && R.m[t].last_visit < p) {
                    ASSERT(0, "fairness: group %d (in ring since turn %ld, last visit %ld) passed over twice: "
                             "group %d served at turn %ld and again at %ld", t, R.m[t].elig_since,
                          R.m[t].last_visit, s, p, R.seq);
                }
            }
            R.st_fair++;
        }
        myturn = R.seq++;
        m->last_visit = myturn;
        R.turn_prev_serv = m->last_serv;
    }

    /* model: unlink the element */
    memmove(m->q, m->q + 1, (size_t)(m->n - 1) * sizeof m->q[0]);
    m->n--;
    m->inflight = 1;
    R.est[id] = ES_INFLIGHT;
    check_all();

    R.own = s;
    R.own_gone = 0;
    R.self_moved = 0;
    R.nheads = 0;

    /* random actions */
    if (rnd(4) == 0) op_push(s, 0);
    if (rnd(20) == 0) op_push(s, 0);
    if (rnd(12) == 0) { op_push(s, 1); R.st_head_cb++; }
    if (rnd(8) == 0) op_random_other(other_slot(s));
    if (rnd(30) == 0) {
        op_desched(s);
        if (rnd(2)) op_schedule(s);
    }
    x = rnd(100);
    if (x < 2) {
        op_purge(s);
        R.st_purge_own++;
    } else if (x < 4) {
        op_destroy(s, (int)rnd(2));
        R.st_destroy_own++;
        if (R.m[s].ep != NULL && rnd(2)) {
            op_push(s, 0);
            op_schedule(s);
        }
    }
    if (rnd(25) == 0 && R.m[s].ep != NULL && R.m[s].n + R.m[s].inflight < MAXQ) {
        /* push the element in flight again (to its group, or its group's successor after a destroy):
           it becomes a new logical element */
        m_group *mm = &R.m[s];
        long nid = new_id();
        R.est[id] = ES_REQUEUED;
        el->id = nid;
        rdmax__arb_group_push(&R.arb, &mm->ep->grp, &el->link);
        mm->q[mm->n++] = nid;
        R.est[nid] = ES_QUEUED;
        R.total++;
        repushed = 1;
        R.st_repush++;
    }

    x = rnd(100);
    if (R.cb_calls >= CB_BUDGET) r = RDMAX__ARB_CB_STOP;
    else if (x < 55) r = RDMAX__ARB_CB_REMOVE;
    else if (x < 72) r = RDMAX__ARB_CB_NEXT_GROUP;
    else if (x < 82) r = RDMAX__ARB_CB_DESCHED;
    else if (x < 92) r = RDMAX__ARB_CB_RESCHED;
    else r = RDMAX__ARB_CB_STOP;

    TRACE("cb group %d id %ld turn %ld -> %d%s%s\n", s, id, turn ? myturn : -1L, (int)r,
          R.own_gone ? " own_gone" : "", R.self_moved ? " self_moved" : "");
    switch (r) {
    case RDMAX__ARB_CB_REMOVE: R.st_remove++; R.removes++; R.last_rm_cb = R.cbseq; break;
    case RDMAX__ARB_CB_NEXT_GROUP: R.st_next++; break;
    case RDMAX__ARB_CB_DESCHED: R.st_desched++; break;
    case RDMAX__ARB_CB_RESCHED: R.st_resched++; break;
    default: R.st_stop++; R.stopped = 1; break;
    }

    /* model: what the arbiter does with the result */
    if (R.own_gone) {
        if (!repushed) {
            R.est[id] = ES_RELEASED;
            free(el);
        }
    } else {
        m->inflight = 0;
        R.total--;
        if (r == RDMAX__ARB_CB_REMOVE) {
            if (!repushed) {
                R.est[id] = ES_DONE;
                free(el);
            }
        } else if (!repushed) {
            /* kept: back in front, behind whatever was push_head'ed during the callback */
            ASSERT(m->n < MAXQ, "model queue overflow (test bug)");
            memmove(m->q + R.nheads + 1, m->q + R.nheads, (size_t)(m->n - R.nheads) * sizeof m->q[0]);
            m->q[R.nheads] = id;
            m->n++;
            R.total++;
            R.est[id] = ES_QUEUED;
        }
        if (m->n == 0) {
            m->state = M_IDLE;
            m->elig_since = -1;
        } else if (!R.self_moved) {
            switch (r) {
            case RDMAX__ARB_CB_REMOVE:
                if (++R.run < R.pg) R.expect_slot = s;
                break;
            case RDMAX__ARB_CB_DESCHED:
                m->state = M_DESCHED;
                break;
            case RDMAX__ARB_CB_RESCHED:
                m->state = M_RESCHED;
                m->elig_since = -1;
                break;
            case RDMAX__ARB_CB_STOP:
                R.stop_slot = s;
                break;
            default:
                break;
            }
        }
        if (turn && r != RDMAX__ARB_CB_STOP) {
            m->last_serv = myturn;
        } else if (!turn && r == RDMAX__ARB_CB_STOP) {
            /* a turn cut short by STOP is not a service: the next dispatch resumes it */
            m->last_serv = R.turn_prev_serv;
        }
    }
    return r;
}

static void step_dispatch(void)
{
    int s, any_sched = 0;
    size_t n;
    unsigned per_group = rnd(4);

    for (s = 0; s < NG; s++) any_sched |= R.m[s].ep != NULL && R.m[s].state == M_SCHED;
    R.pg = per_group ? (int)per_group : 1;
    R.expect_slot = -1;
    R.run = 0;
    R.stopped = 0;
    R.cb_calls = 0;
    R.removes = 0;
    R.first_slot = R.stop_slot; /* a STOP group must come first, if nothing moved it since */
    R.stop_slot = -1;
    R.last_rm_cb = R.cbseq;
    R.in_dispatch = 1;
    R.st_dispatch++;
    TRACE("dispatch per_group %u\n", per_group);
    n = rdmax__arb_dispatch(&R.arb, per_group, rand_cb, NULL);
    R.in_dispatch = 0;
    ASSERT(n == R.removes, "dispatch returned %zu, callbacks returned REMOVE %zu times", n, R.removes);
    ASSERT(R.expect_slot < 0, "dispatch returned although group %d had per_group budget and elements left",
          R.expect_slot);
    ASSERT((R.cb_calls > 0) == any_sched, "dispatch made %d calls with%s scheduled groups", R.cb_calls,
          any_sched ? "" : " no");
    if (!R.stopped) {
        /* Returning without STOP is allowed once a whole round removed nothing: every group that was
           in the ring since the last removal must have been tried after it. */
        for (s = 0; s < NG; s++) {
            m_group *m = &R.m[s];
            if (m->ep != NULL && m->state == M_SCHED && m->elig_cb <= R.last_rm_cb) {
                ASSERT(m->visit_cb > R.last_rm_cb, "dispatch returned early: group %d (in ring since callback "
                      "%ld) not tried after the last removal (callback %ld)", s, m->elig_cb, R.last_rm_cb);
                R.st_early++;
            }
        }
    }
    /* RESCHED groups are back, at the tail */
    for (s = 0; s < NG; s++) {
        if (R.m[s].ep != NULL && R.m[s].state == M_RESCHED) {
            m_join(&R.m[s]);
        }
    }
}

static unsigned long long g_seed;
static long g_steps = 1000000;

static void test_random(void)
{
    long step;
    int s;

    memset(&R, 0, sizeof R);
    R.rng = g_seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
    if (R.rng == 0) R.rng = 1;
    R.stop_slot = -1;
    R.own = -1;
    rdmax__arb_init(&R.arb);
    for (s = 0; s < NG; s++) {
        m_reset(s, ep_new(s));
    }
    for (step = 0; step < g_steps; step++) {
#ifdef ARB_FUZZ
        if (g_fz_n == 0)
            break;
#endif
        unsigned x = rnd(100);
        s = (int)rnd(NG);
        snprintf(tl_where, sizeof tl_where, ", seed %llu, step %ld; replay: ./arbiter_test %llu", g_seed, step,
                 g_seed);
        if (R.m[s].ep == NULL && x < 80) {
            m_reset(s, ep_new(s));
        }
        if (x < 30) op_push(s, 0);
        else if (x < 36) op_push(s, 1);
        else if (x < 50) op_schedule(s);
        else if (x < 54) op_desched(s);
        else if (x < 88) step_dispatch();
        else if (x < 93) { op_purge(s); R.st_purge++; }
        else if (x < 97) { op_destroy(s, (int)rnd(4) != 0); R.st_destroy++; }
        else if (x < 99) { int t; for (t = 0; t < NG; t++) op_schedule(t); }
        else { int t; for (t = 0; t < 4; t++) op_push(s, 0); op_schedule(s); }
        check_all();
    }

    /* the end: purge everything, then every element must have exactly one end */
    for (s = 0; s < NG; s++) {
        if (R.m[s].ep != NULL) {
            op_purge(s);
            free(R.m[s].ep);
            R.m[s].ep = NULL;
        }
    }
    ASSERT(rdmax__arb_pending(&R.arb) == 0 && rdmax__arb_is_empty(&R.arb), "arbiter not empty at the end");
    {
        long id, done = 0, canc = 0, other = 0;
        for (id = 0; id < R.nid; id++) {
            ASSERT(R.est[id] >= ES_DONE, "element %ld never finished (state %d): lost", id, R.est[id]);
            done += R.est[id] == ES_DONE;
            canc += R.est[id] == ES_CANCELLED;
            other += R.est[id] > ES_CANCELLED;
        }
#ifndef ARB_FUZZ
        printf("# random: seed %llu, %ld steps, %ld elements (%ld removed, %ld cancelled, %ld released/dropped/"
               "requeued), %ld dispatches, %ld purges, %ld destroys, %ld callbacks (%ld REMOVE %ld NEXT "
               "%ld DESCHED %ld RESCHED %ld STOP), %ld fairness checks, %ld per_group continuations, "
               "%ld no-early-return checks, in callbacks: %ld purge own, %ld destroy own, %ld purge other, "
               "%ld destroy other, %ld push_head, %ld re-push, %ld self-desched; max pending %ld\n",
               g_seed, g_steps, R.nid, done, canc, other, R.st_dispatch, R.st_purge, R.st_destroy, R.st_cb,
               R.st_remove, R.st_next, R.st_desched, R.st_resched, R.st_stop, R.st_fair, R.st_cont, R.st_early,
               R.st_purge_own, R.st_destroy_own, R.st_purge_other, R.st_destroy_other, R.st_head_cb, R.st_repush,
               R.st_self_moved, R.st_max_total);
#endif
        (void)done, (void)canc, (void)other;
    }
    /* the run must have exercised what it claims to check (each of these can fail with a weak run) */
    if (g_steps >= 100000 && step == g_steps) {
        ASSERT(R.st_fair > 1000 && R.st_cont > 100, "too few fairness checks (%ld) or continuations (%ld)",
              R.st_fair, R.st_cont);
        ASSERT(R.st_purge_own > 10 && R.st_destroy_own > 10 && R.st_purge_other > 10 && R.st_destroy_other > 10,
              "too few purge/destroy inside callbacks");
        ASSERT(R.st_head_cb > 10 && R.st_repush > 10 && R.st_self_moved > 10,
              "too few push_head/re-push/self-desched");
        ASSERT(R.st_resched > 100 && R.st_stop > 100 && R.st_desched > 100, "too few RESCHED/STOP/DESCHED");
    }
    free(R.est);
    R.est = NULL;
}

#ifndef ARB_FUZZ
int main(int argc, char **argv)
{
    const char *env = getenv("RDMAX_ARB_SEED");
    g_seed = 20240607;
    if (argc > 1) {
        g_seed = strtoull(argv[1], NULL, 0);
    } else if (env != NULL && *env != '\0') {
        g_seed = strtoull(env, NULL, 0);
    }
    if (argc > 2) {
        g_steps = strtol(argv[2], NULL, 0);
    }
    g_trace = getenv("RDMAX_ARB_TRACE") != NULL && atoi(getenv("RDMAX_ARB_TRACE")) != 0;
    tl_run("empty_dispatch", test_empty_dispatch);
    tl_run("stop_leaves_group_at_head", test_stop_leaves_group_at_head);
    tl_run("resched_not_revisited", test_resched_not_revisited);
    tl_run("destroy_own_group_in_callback", test_destroy_own_group_in_callback);
    tl_run("push_head", test_push_head);
    tl_run("per_group", test_per_group);
    tl_run("desched_and_push", test_desched_and_push);
    tl_run("lap_without_progress", test_lap_without_progress);
    tl_run("callback_reentry", test_callback_reentry);
    tl_run("near_hints", test_near_hints);
    tl_run("random_model", test_random);
    if (tl_failed_total) {
        printf("# arbiter_test: FAILED (seed %llu)\n", g_seed);
        return 1;
    }
    return 0;
}
#endif /* ARB_FUZZ */
