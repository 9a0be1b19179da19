/* The pending queue and resource accounting on a real device: 64 endpoints x 10,000 mixed sends, puts
   and gets with send-queue depth 16 and CQ depth 64, queued automatically when resources run out. Every
   operation completes exactly once, each endpoint's sends arrive in order, the receiver never sends an
   RNR NAK (port counters), and reads in flight never exceed the negotiated budget. Plus the explicit
   mode: BUSY when there is room, order kept, purge cancels, a callback may destroy its endpoint.
   Usage: pending_test [OPS=10000]   (operations per endpoint; make test runs 2,500) */
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#include "../rdmax.h"
#include "testlib.h"

#include <time.h>

#define NEP 64
#define WINDOW 64   /* requests in flight per endpoint */

struct epstate {
    rdmax_ep *a, *b;
    rdmax_req req[WINDOW];
    rdmax_comp comp[WINDOW];
    int free_slots[WINDOW], nfree;
    uint32_t next_op;           /* operations issued */
    uint32_t next_send_seq;     /* sequence number of the next send */
    uint32_t recv_seq;          /* next sequence number the receiver expects */
    uint32_t done;
    int out_of_order, bad_get;
    uint64_t src[WINDOW], dst[WINDOW];
};

static struct epstate E[NEP];
static uint32_t g_nops = 10000;     /* operations per endpoint */
static unsigned char *completed;  /* [NEP * g_nops]: times each operation completed */
static rdmax_mem *g_mem;
static uint64_t *g_remote;        /* b side's exposed words: [NEP][WINDOW] */
static int g_max_reads_seen, g_budget_exceeded;

static void on_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep;
    struct epstate *e = (struct epstate *)user;
    uint32_t seq;
    if (len != 16) {
        e->out_of_order++;
        return;
    }
    memcpy(&seq, (char *)data + 4, 4);
    if (seq != e->recv_seq)
        e->out_of_order++;
    e->recv_seq = seq + 1;
}

static void on_comp(rdmax_comp *c, rdmax_status st)
{
    uintptr_t tag = (uintptr_t)c->user;  /* ep << 32 | op index << 8 | slot */
    struct epstate *e = &E[tag >> 40];
    uint32_t op = (uint32_t)(tag >> 8) & 0xffffffff;
    int slot = (int)(tag & 0xff);
    if (st != RDMAX_OK)
        e->bad_get += 1000;  /* counted as a failure below */
    completed[(size_t)(tag >> 40) * g_nops + op]++;
    e->free_slots[e->nfree++] = slot;
    e->done++;
}

static int issue(struct epstate *e, int idx, rdmax_ctx *ctx)
{
    if (e->nfree == 0 || e->next_op == g_nops)
        return 0;
    int slot = e->free_slots[--e->nfree];
    uint32_t op = e->next_op++;
    rdmax_req *r = &e->req[slot];
    rdmax_comp *c = &e->comp[slot];
    memset(r, 0, sizeof *r);
    memset(c, 0, sizeof *c);
    c->cb = on_comp;
    c->user = (void *)(((uintptr_t)idx << 40) | ((uintptr_t)op << 8) | (uintptr_t)slot);
    r->comp = c;
    r->mem = g_mem;
    uint64_t *mine = (uint64_t *)g_mem->addr + (size_t)idx * WINDOW * 4;  /* per slot: send[2], put, get */
    switch (op % 3) {
    case 0: {  /* send: ep index and sequence number, 16 bytes */
        uint32_t *m = (uint32_t *)(void *)&mine[slot * 4];
        m[0] = (uint32_t)idx;
        m[1] = e->next_send_seq++;
        m[2] = m[3] = 0xabababab;
        r->op = RDMAX_OP_SEND;
        r->buf = m;
        r->len = 16;
        break;
    }
    case 1:    /* put 8 bytes into this endpoint's word for the slot */
        mine[slot * 4 + 2] = ((uint64_t)idx << 32) | op;
        r->op = RDMAX_OP_PUT;
        r->buf = &mine[slot * 4 + 2];
        r->len = 8;
        r->raddr = (uintptr_t)&g_remote[idx * WINDOW + slot];
        r->rkey = g_mem->rkey;
        break;
    default:   /* get the constant word of this endpoint */
        mine[slot * 4 + 3] = 0;
        r->op = RDMAX_OP_GET;
        r->buf = &mine[slot * 4 + 3];
        r->len = 8;
        r->raddr = (uintptr_t)&g_remote[NEP * WINDOW + idx];
        r->rkey = g_mem->rkey;
        break;
    }
    rdmax_status st = rdmax_req_post(e->a, r);
    if (st != RDMAX_INPROGRESS) {  /* given a comp, a request always reports through it */
        printf("FAIL pending/mixed: rdmax_req_post: %s\n", rdmax_status_str(st));
        exit(1);
    }
    rdmax_ep_resources info;
    rdmax_ep_query_resources(e->a, &info);
    uint32_t max_rd = rdmax_ep_query_desc(e->a).max_rd_atomic;
    uint32_t in_flight = max_rd - info.reads_free;
    if ((int)in_flight > g_max_reads_seen)
        g_max_reads_seen = (int)in_flight;
    if (in_flight > max_rd)
        g_budget_exceeded = 1;
    (void)ctx;
    return 1;
}

static void mixed(const char *dev)
{
    rdmax_ctx *ctx = NULL;
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.device = dev;
    cd.cq_depth = 64;
    tl_begin("pending/64 endpoints x %u mixed ops, SQ 16, CQ 64", g_nops);
    REQUIRE(rdmax_ctx_create(&cd, &ctx) == RDMAX_OK, "context");
    completed = (unsigned char *)calloc((size_t)NEP * g_nops, 1);
    size_t bytes = (size_t)NEP * WINDOW * 4 * 8 + ((size_t)NEP * WINDOW + NEP) * 8;
    REQUIRE(rdmax_mem_alloc(ctx, bytes, RDMAX_ACCESS_REMOTE_READ | RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_ANY_ENDPOINT, &g_mem) == RDMAX_OK,
            "alloc");
    g_remote = (uint64_t *)g_mem->addr + (size_t)NEP * WINDOW * 4;
    rdmax_ep_desc da, db;
    memset(&da, 0, sizeof da);
    da.sq_depth = 16;
    da.max_rd_atomic = 4;  /* a small read budget, so it is the limit that binds */
    da.rq_depth = 32;
    da.recv_size = 64;
    for (int i = 0; i < NEP; i++) {
        g_remote[NEP * WINDOW + i] = 0x5151000000000000ull | (uint64_t)i;
        db = da;
        db.recv_cb = on_recv;
        db.user = &E[i];
        REQUIRE(tl_pair(ctx, ctx, &da, &db, &E[i].a, &E[i].b) == RDMAX_OK, "endpoint pair %d: %s", i,
                rdmax_ctx_query_last_error(ctx));
        for (int k = 0; k < WINDOW; k++)
            E[i].free_slots[E[i].nfree++] = k;
    }
    uint64_t rnr0 = tl_hw_counter(dev, "rcvd_rnr_err") + tl_hw_counter(dev, "send_rnr_err");
    uint64_t total = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long spin = 0; total < (uint64_t)NEP * g_nops && spin < 2000000000L; spin++) {
        for (int i = 0; i < NEP; i++)
            while (issue(&E[i], i, ctx))
                ;
        rdmax_progress(ctx);
        total = 0;
        for (int i = 0; i < NEP; i++)
            total += E[i].done;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (t1.tv_sec - t0.tv_sec > 240)
            break;
    }
    /* let the last receives land: until every send arrived (how many progress calls that takes depends
       on the machine's load); the generous bound only turns a lost send into a failure, not a hang */
    time_t land0 = time(NULL);
    for (int i = 0; i < NEP; i++)
        while (E[i].recv_seq < E[i].next_send_seq && time(NULL) - land0 < 120)
            rdmax_progress(ctx);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    uint64_t rnr1 = tl_hw_counter(dev, "rcvd_rnr_err") + tl_hw_counter(dev, "send_rnr_err");
    long once = 0, twice = 0, never = 0;
    for (size_t k = 0; k < (size_t)NEP * g_nops; k++) {
        once += completed[k] == 1;
        twice += completed[k] > 1;
        never += completed[k] == 0;
    }
    int ooo = 0, bad = 0, lost = 0;
    for (int i = 0; i < NEP; i++) {
        ooo += E[i].out_of_order;
        bad += E[i].bad_get;
        lost += E[i].recv_seq != E[i].next_send_seq;
    }
    rdmax_counters c;
    rdmax_ctx_query_counters(ctx, &c);
    printf("# %llu ops in %.1f s; no_resource %llu, grants %llu, max reads in flight %d\n",
           (unsigned long long)total, (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
           (unsigned long long)c.no_resource, (unsigned long long)c.posted[RDMAX_OP_GRANT], g_max_reads_seen);
    CHECK(once == (long)NEP * g_nops, "%ld completed once, %ld more than once, %ld never", once, twice, never);
    CHECK(ooo == 0 && lost == 0, "%d sends out of order, %d endpoints lost sends", ooo, lost);
    CHECK(bad == 0, "%d operations failed", bad / 1000);
    CHECK(rnr1 == rnr0, "RNR counters moved by %llu", (unsigned long long)(rnr1 - rnr0));
    CHECK(!g_budget_exceeded && g_max_reads_seen <= 4, "reads in flight reached %d of 4", g_max_reads_seen);
    CHECK(c.no_resource > 0, "resources never ran out: the test did not exercise the pending queue");
    for (int i = 0; i < NEP; i++)
        for (int k = 0; k < WINDOW; k++) {
            uint64_t w = g_remote[i * WINDOW + k];
            if (w && (w >> 32) != (uint64_t)i) {
                CHECK(0, "endpoint %d slot %d holds another endpoint's put", i, k);
                i = NEP;
                break;
            }
        }
    for (int i = 0; i < NEP; i++) {
        uint64_t *mine = (uint64_t *)g_mem->addr + (size_t)i * WINDOW * 4;
        for (int k = 0; k < WINDOW; k++)
            if (mine[k * 4 + 3] && mine[k * 4 + 3] != (0x5151000000000000ull | (uint64_t)i)) {
                CHECK(0, "get of endpoint %d returned 0x%llx", i, (unsigned long long)mine[k * 4 + 3]);
                i = NEP;
                break;
            }
    }
    tl_end();
out:
    for (int i = 0; i < NEP; i++) {
        rdmax_ep_destroy(E[i].a);
        rdmax_ep_destroy(E[i].b);
    }
    rdmax_mem_free(g_mem);
    rdmax_ctx_destroy(ctx);
    free(completed);
    if (tl_case_failed)
        tl_end();
}

/* ---- explicit mode ---- */
struct xreq {
    rdmax_req req;
    int id;
    int *log, *nlog;
    rdmax_mem *m;
    rdmax_ep **destroy_me;
};

static rdmax_status x_cb(rdmax_req *r)
{
    struct xreq *x = (struct xreq *)(void *)r;
    if (x->destroy_me) {  /* the endpoint goes away from inside its own callback */
        rdmax_ep_destroy(*x->destroy_me);
        *x->destroy_me = NULL;
        x->log[(*x->nlog)++] = -x->id;
        return RDMAX_OK;
    }
    uint64_t v = (uint64_t)x->id;
    rdmax_status st = rdmax_put(rdmax_req_query_ep(r), &v, 8, NULL, (uintptr_t)x->m->addr + 8 * (uint64_t)x->id, x->m->rkey, NULL);
    if (st == RDMAX_OK)
        x->log[(*x->nlog)++] = x->id;
    return st;
}

static void explicit_mode(const char *dev)
{
    rdmax_ctx *ctx = NULL;
    rdmax_ep *a = NULL, *b = NULL;
    rdmax_mem *m = NULL;
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.device = dev;
    int log[64], nlog = 0;
    struct xreq x[40];
    rdmax_comp cc[40];
    memset(x, 0, sizeof x);
    memset(cc, 0, sizeof cc);
    tl_begin("pending/explicit: BUSY with room, order kept, direct post refused while waiting");
    REQUIRE(rdmax_ctx_create(&cd, &ctx) == RDMAX_OK, "context");
    REQUIRE(rdmax_mem_alloc(ctx, 4096, RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_ANY_ENDPOINT, &m) == RDMAX_OK, "alloc");
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.sq_depth = 4;
    REQUIRE(rdmax_ep_create_pair(ctx, &d, &a, &b) == RDMAX_OK, "pair");
    for (int i = 0; i < 40; i++) {
        x[i].req.cb = x_cb;
        x[i].req.op = RDMAX_OP_PUT;
        x[i].req.comp = &cc[i];
        x[i].id = i;
        x[i].log = log;
        x[i].nlog = &nlog;
        x[i].m = m;
    }
    CHECK_ST(rdmax_ep_pending_add(a, &x[0].req), RDMAX_BUSY);
    uint64_t v = 1;
    int posted = 0;
    while (rdmax_put(a, &v, 8, NULL, (uintptr_t)m->addr + 512, m->rkey, NULL) == RDMAX_OK)
        posted++;
    CHECK(posted == 4, "%d direct puts fit a 4-deep send queue", posted);
    for (int i = 0; i < 20; i++)
        CHECK_ST(rdmax_ep_pending_add(a, &x[i].req), RDMAX_OK);
    CHECK_ST(rdmax_put(a, &v, 8, NULL, (uintptr_t)m->addr + 512, m->rkey, NULL), RDMAX_ERR_NO_RESOURCE);
    for (int i = 0; i < 100000 && nlog < 20; i++)
        rdmax_progress(ctx);
    CHECK(nlog == 20, "%d of 20 pending requests ran", nlog);
    int inorder = 1;
    for (int i = 0; i < nlog; i++)
        inorder &= log[i] == i;
    CHECK(inorder, "pending requests ran out of order");
    CHECK(rdmax_ep_flush(a, 5000) == RDMAX_OK, "flush");
    for (int i = 0; i < 20; i++)
        CHECK(((uint64_t *)m->addr)[i] == (uint64_t)i, "word %d not written", i);
    tl_end();

    tl_begin("pending/purge cancels waiting requests");
    while (rdmax_put(a, &v, 8, NULL, (uintptr_t)m->addr + 512, m->rkey, NULL) == RDMAX_OK)
        ;
    for (int i = 20; i < 30; i++)
        CHECK_ST(rdmax_ep_pending_add(a, &x[i].req), RDMAX_OK);
    rdmax_ep_pending_purge(a);
    int canceled = 0;
    for (int i = 20; i < 30; i++)
        canceled += cc[i].done && cc[i].status == RDMAX_ERR_CANCELED;
    CHECK(canceled == 10, "%d of 10 canceled", canceled);
    for (int i = 0; i < 1000; i++)
        rdmax_progress(ctx);
    CHECK(nlog == 20, "a purged request ran");
    tl_end();

    tl_begin("pending/a callback destroys its own endpoint");
    CHECK(rdmax_ep_flush(a, 5000) == RDMAX_OK, "flush");
    while (rdmax_put(a, &v, 8, NULL, (uintptr_t)m->addr + 512, m->rkey, NULL) == RDMAX_OK)
        ;
    x[30].destroy_me = &a;
    CHECK_ST(rdmax_ep_pending_add(a, &x[30].req), RDMAX_OK);
    for (int i = 31; i < 35; i++)
        CHECK_ST(rdmax_ep_pending_add(a, &x[i].req), RDMAX_OK);
    for (int i = 0; i < 100000 && a; i++)
        rdmax_progress(ctx);
    CHECK(a == NULL, "callback did not run");
    int c2 = 0;
    for (int i = 31; i < 35; i++)
        c2 += cc[i].done && cc[i].status == RDMAX_ERR_CANCELED;
    CHECK(c2 == 4, "%d of the 4 requests behind it were canceled", c2);
    for (int i = 0; i < 10000; i++)
        rdmax_progress(ctx);  /* no crash on the destroyed endpoint's late completions */
    tl_end();
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_mem_free(m);
    rdmax_ctx_destroy(ctx);
    if (tl_case_failed)
        tl_end();
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && (g_nops = (uint32_t)strtoul(argv[1], NULL, 10)) == 0) {
        fprintf(stderr, "usage: pending_test [OPS=10000]\n");
        return 2;
    }
    const char *dev = getenv("RDMAX_TEST_DEV0");
    explicit_mode(dev);
    mixed(dev ? dev : "rxe0");
    return tl_failed_total ? 1 : 0;
}
