/* The shared receive queue of RC endpoints on a real device (rxe in the test VM): puts with immediate
   data, replies by put_imm and by put + send, a window of N that allows N outstanding, credits that
   flow with tiny windows and never meet RNR and come back exactly in a ping-pong, the context's
   recv_size, receives of a destroyed endpoint dropped and their buffers recycled, the SRQ's low-water
   event, limits that fail with a status and a message naming them (nothing half-made left), and two
   threads whose contexts share one protection domain and serve one registered region.
   Usage: srq_test [window or breakers]   (window: only the window cases; breakers: peers past their
   window, on the veth topology) */
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#define RDMAX_TESTING
#include "../rdmax.h"
#include "testlib.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/capability.h>

/* ---- white-box: rdmax's private state, read in this one place (through the rdmax__test_* hooks) ----
   Everything else in this test goes through the public API (rdmax_ctx_query_recv_pool, the profile
   variables, rdmax_ctx_query_counters, rdmax_ctx_query_attr, rdmax_ep_query_*). What is read here has no public call
   on purpose, because it is bookkeeping a program has no use for; the cases check it directly because
   from outside its effect is invisible, or visible only by winning a race:
     WB_TICK          runs rdmax's tick (device events, arming the low-water mark) now: rdmax_progress runs
                      it once a millisecond and rdmax_wait every 100 ms, and a case that must read an event
                      or arm the mark at a known point cannot wait for either
     WB_DEV_REFS      contexts holding ctx's device (a parent and its children): the device must stay open
                      while a child holds it, whoever goes first
     WB_DEV_EVENTS    device events another context read and queued for ctx: the only way to know that the
                      child read the parent's event (and queued it) rather than the parent reading it later
     WB_POOL_SLOT     the slot of the context's pool table that ep's shared pool occupies (the wr_ids of its
                      buffers carry it)
     WB_SLOT_COOLING  1 if `slot` is empty and cooling: a pool freed there may still have completions
                      queued, so no new pool may take the slot before the receive CQ was seen drained */
enum wb_item { WB_TICK, WB_DEV_REFS, WB_DEV_EVENTS, WB_POOL_SLOT, WB_SLOT_COOLING };

static uint32_t whitebox(rdmax_ctx *ctx, const rdmax_ep *ep, enum wb_item what, uint32_t slot)
{
    switch (what) {
    case WB_TICK:
        rdmax__test_tick(ctx);
        return 0;
    case WB_DEV_REFS:
        return rdmax__test_dev_refs(ctx);
    case WB_DEV_EVENTS:
        return rdmax__test_dev_events(ctx);
    case WB_POOL_SLOT:
        return rdmax__test_ep_pool(ep);
    case WB_SLOT_COOLING:
        return (uint32_t)rdmax__test_pool_cooling(ctx, slot);
    }
    return 0;
}

static char g_lastlog[512];

static void keep_log(rdmax_log_level lvl, rdmax_log_item item, const char *msg, void *user)
{
    (void)user;
    (void)item;
    if (lvl == RDMAX_LOG_ERROR)
        snprintf(g_lastlog, sizeof g_lastlog, "%s", msg);
}

/* A context on dev (NULL: the default device) with recv_size, parent and recv_reserve as given (0:
   their defaults). */
static rdmax_ctx *open_ctx_ex(const char *dev, uint32_t recv_size, rdmax_ctx *parent, uint32_t reserve)
{
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    d.device = dev;
    d.recv_size = recv_size;
    d.parent = parent;
    d.recv_reserve = reserve;
    d.logger.func = keep_log;
    d.log_level = RDMAX_LOG_ERROR;
    d.log_level_set = true;
    rdmax_ctx *c = NULL;
    if (rdmax_ctx_create(&d, &c) != RDMAX_OK) {
        printf("FAIL setup: cannot open the device: %s\n", g_lastlog);
        exit(1);
    }
    return c;
}

static rdmax_ctx *open_ctx(uint32_t recv_size, rdmax_ctx *parent)
{
    return open_ctx_ex(NULL, recv_size, parent, 0);
}

/* ---- puts with immediate data, sends both ways, windows of 2 ---- */
struct side {
    uint32_t next_seq;      /* expected in the next message */
    uint32_t imms, imm_bad, msgs, bad;
    uint32_t big, big_bad;  /* messages of another length than 64: 13 * i in byte i */
    uint32_t last_imm;
    size_t last_len;
    const uint64_t *watch;  /* the put target of the notices: checked when each notice arrives */
    int data_bad;
};

/* A receive callback that destroys its endpoint (user: where the test keeps it, cleared). */
static int g_destroyed_in_cb;
static void on_msg_destroy(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)data, (void)len;
    *(rdmax_ep **)user = NULL;
    g_destroyed_in_cb++;
    rdmax_ep_destroy(ep);
}

static void on_msg(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep;
    struct side *s = (struct side *)user;
    uint32_t seq;
    if (len != 64) {
        for (size_t i = 0; i < len; i++)
            s->big_bad += ((unsigned char *)data)[i] != (unsigned char)(i * 13);
        s->big++;
        return;
    }
    memcpy(&seq, data, 4);
    for (size_t i = 4; i < len; i++)
        if (((unsigned char *)data)[i] != (unsigned char)(seq + i))
            s->bad++;
    s->bad += seq != s->next_seq;
    s->next_seq = seq + 1;
    s->msgs++;
}

static void on_imm(rdmax_ep *ep, uint32_t imm, size_t len, void *user)
{
    (void)ep;
    struct side *s = (struct side *)user;
    s->imm_bad += imm != (0xabc00000u | s->imms);
    /* the put's data is in place when its notice arrives */
    if (s->watch && len == 8 && s->watch[s->imms % 64] != (0x5eed000000000000ull | s->imms))
        s->data_bad++;
    s->imms++;
    s->last_imm = imm;
    s->last_len = len;
}

static int spin_until(rdmax_ctx *a, rdmax_ctx *b, const volatile uint32_t *v, uint32_t want)
{
    for (long i = 0; *v < want; i++) {
        rdmax_progress(a);
        if (b && b != a)
            rdmax_progress(b);
        if (i > 50000000L)
            return -1;
    }
    return 0;
}

/* A case's `out:`: two endpoints, a region, two contexts, in that order (any may be NULL); then the case
   ends if a REQUIRE jumped here before its tl_end. */
static void case_end(rdmax_ep *a, rdmax_ep *b, rdmax_mem *m, rdmax_ctx *ca, rdmax_ctx *cb)
{
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_mem_free(m);
    rdmax_ctx_destroy(ca);
    rdmax_ctx_destroy(cb);
    if (tl_case_failed)
        tl_end();
}

static void imm_case(rdmax_ctx *ctx)
{
    rdmax_ep *a = NULL, *b = NULL;
    rdmax_mem *dst = NULL;
    struct side sa, sb;
    memset(&sa, 0, sizeof sa);
    memset(&sb, 0, sizeof sb);
    tl_begin("srq/put_imm: data in place, the user's 32 bits reach imm_cb, zero length works");
    REQUIRE(rdmax_mem_alloc(ctx, 64 * 8, RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_ANY_ENDPOINT, &dst) ==
                RDMAX_OK, "alloc");
    sb.watch = (const uint64_t *)dst->addr;
    rdmax_ep_desc da, db;
    memset(&da, 0, sizeof da);
    da.recv_cb = on_msg;
    da.imm_cb = on_imm;
    da.user = &sa;
    db = da;
    db.user = &sb;
    REQUIRE(tl_pair(ctx, ctx, &da, &db, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
    uint64_t v = 0x5eed000000000000ull;
    CHECK_ST(rdmax_put_imm(a, &v, 8, NULL, (uintptr_t)dst->addr, dst->rkey, 0xabc00000u, NULL), RDMAX_OK);
    REQUIRE(spin_until(ctx, NULL, &sb.imms, 1) == 0, "notice never arrived");
    CHECK(sb.last_imm == 0xabc00000u && sb.last_len == 8 && sb.imm_bad == 0 && sb.data_bad == 0,
          "imm 0x%x len %zu (data %s)", sb.last_imm, sb.last_len, sb.data_bad ? "not in place" : "in place");
    rdmax_comp c;
    memset(&c, 0, sizeof c);
    CHECK_ST(rdmax_put_imm(a, NULL, 0, NULL, (uintptr_t)dst->addr, dst->rkey, 0xabc00001u, &c), RDMAX_INPROGRESS);
    REQUIRE(spin_until(ctx, NULL, &sb.imms, 2) == 0, "zero-length notice never arrived");
    for (long i = 0; !c.done && i < 10000000L; i++)
        rdmax_progress(ctx);
    CHECK(c.done && c.status == RDMAX_OK, "comp of the zero-length put_imm: done %d %s", c.done,
          rdmax_status_str(c.status));
    CHECK(sb.last_len == 0 && sb.last_imm == 0xabc00001u, "len %zu imm 0x%x", sb.last_len, sb.last_imm);
    rdmax_counters cnt;
    rdmax_ctx_query_counters(ctx, &cnt);
    CHECK(cnt.recv_imms == 2 && cnt.posted[RDMAX_OP_PUT_IMM] == 2, "recv_imms %llu, put_imm posted %llu",
          (unsigned long long)cnt.recv_imms, (unsigned long long)cnt.posted[RDMAX_OP_PUT_IMM]);
    tl_end();
out:
    case_end(a, b, dst, NULL, NULL);
}

/* The 64-byte message number `seq` of on_msg's pattern. */
static void msg_fill(unsigned char *m, uint32_t seq)
{
    memcpy(m, &seq, 4);
    for (size_t i = 4; i < 64; i++)
        m[i] = (unsigned char)(seq + i);
}

/* The nested variant's receiver: on each first message of a round it has a (same thread, the other
   context) send the second, and progresses its own context until that arrives, so the second is
   received in a poll batch inside this callback. */
static struct {
    rdmax_ep *a;
    rdmax_ctx *cb;
    uint32_t sent, bad;
} g_nest;
static void on_msg_nest(rdmax_ep *ep, void *data, size_t len, void *user)
{
    struct side *s = (struct side *)user;
    on_msg(ep, data, len, user);
    if (s->msgs % 2 == 0)
        return;
    unsigned char m[64];
    msg_fill(m, g_nest.sent);
    if (rdmax_send(g_nest.a, m, 64, NULL, NULL) != RDMAX_OK) {
        g_nest.bad++;
        return;
    }
    g_nest.sent++;
    uint32_t want = s->msgs + 1;
    for (long i = 0; s->msgs < want && i < 50000000L; i++)
        rdmax_progress(g_nest.cb);
    g_nest.bad += s->msgs < want;
}

/* A ping-pong between two contexts (each sees one QP: its messages take the inline receive path,
   credits in their immediate data): after every round trip a has its window back, and b all of it but
   the credits of its own replies since a's last message. A credit lost or counted twice shows at once.
   nested: a sends two messages per round, the second from inside b's receive callback, which receives
   it in a nested poll batch (the inline path's staging and settle under nesting); b answers both. */
static void pingpong_credits_case(int nested)
{
    enum { ROUNDS = 40 };
    const uint32_t per = nested ? 2 : 1;  /* messages each way per round */
    rdmax_ctx *ca = open_ctx(0, NULL), *cb = open_ctx(0, NULL);
    rdmax_ep *a = NULL, *b = NULL;
    struct side sa, sb;
    memset(&sa, 0, sizeof sa);
    memset(&sb, 0, sizeof sb);
    tl_begin("srq/ping-pong credits%s: %d round trips between two contexts, each side's credits exact after each",
             nested ? " (the second message of each round received in a nested batch)" : "", ROUNDS);
    rdmax_ep_desc da, db;
    memset(&da, 0, sizeof da);
    da.rq_depth = 8;
    da.recv_cb = on_msg;
    da.user = &sa;
    db = da;
    db.user = &sb;
    db.recv_cb = nested ? on_msg_nest : on_msg;
    REQUIRE(tl_pair(ca, cb, &da, &db, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
    memset(&g_nest, 0, sizeof g_nest);
    g_nest.a = a;
    g_nest.cb = cb;
    rdmax_ep_resources ia, ib;
    rdmax_ep_query_resources(a, &ia);
    rdmax_ep_query_resources(b, &ib);
    uint32_t ca0 = ia.send_credits, cb0 = ib.send_credits;
    REQUIRE(ca0 == 8 && cb0 == 8, "fresh windows of 8: a has %u send credits, b %u", ca0, cb0);
    for (uint32_t k = 0; k < ROUNDS; k++) {
        unsigned char m[64];
        msg_fill(m, g_nest.sent);
        CHECK_ST(rdmax_send(a, m, 64, NULL, NULL), RDMAX_OK);
        g_nest.sent++;
        REQUIRE(spin_until(ca, cb, &sb.msgs, per * (k + 1)) == 0 && g_nest.bad == 0,
                "round %u: b got %u of %u messages (%u failures in its callback)", k, sb.msgs, per * (k + 1),
                g_nest.bad);
        for (uint32_t j = 0; j < per; j++) {
            msg_fill(m, per * k + j);
            CHECK_ST(rdmax_send(b, m, 64, NULL, NULL), RDMAX_OK);
        }
        REQUIRE(spin_until(ca, cb, &sa.msgs, per * (k + 1)) == 0, "round %u: a never got the answers", k);
        rdmax_ep_query_resources(a, &ia);
        rdmax_ep_query_resources(b, &ib);
        REQUIRE(ia.send_credits == ca0 && ib.send_credits == cb0 - per,
                "round %u: a has %u credits (want %u), b %u (want %u)", k, ia.send_credits, ca0,
                ib.send_credits, cb0 - per);
    }
    CHECK(sa.bad == 0 && sb.bad == 0, "%u/%u bad messages", sa.bad, sb.bad);
    tl_end();
out:
    case_end(a, b, NULL, ca, cb);
}

/* ---- a window of N allows N outstanding ----
   With ep desc rq_depth N (window 4, the least, and the default 16) and a receiver that does not
   progress (no credit can come back), exactly N sends or puts with immediate data post at once and the
   next is refused with RDMAX_ERR_NO_RESOURCE (or waits, as an rdmax_req): plain sends, sends with a comp,
   sends and puts with immediate data mixed, and rdmax_req_post (N posted, the next queued). After each
   round the receiver progresses: every message and notice arrives in order, the sender has its N back,
   and no RNR. (Until issue 27 a window of N allowed N - 1: one credit was kept back for grants.) */
static void window_case(const char *dev, uint32_t rq_depth)
{
    rdmax_ctx *ca = open_ctx(0, NULL), *cb = open_ctx(0, NULL);
    rdmax_ep *a = NULL, *b = NULL;
    rdmax_mem *dst = NULL;
    struct side sa, sb;
    memset(&sa, 0, sizeof sa);
    memset(&sb, 0, sizeof sb);
    rdmax_ep_desc da;
    memset(&da, 0, sizeof da);
    da.rq_depth = rq_depth;
    da.sq_depth = 64;  /* the window is the limit: a round's posts may find the last round's still outstanding
                          (their signaled completion not yet taken when the credits came back) */
    da.recv_cb = on_msg;
    da.imm_cb = on_imm;
    da.user = &sa;
    rdmax_ep_desc db = da;
    db.user = &sb;
    enum { ROUNDS = 4 };
    static const char *const kind[ROUNDS] = {"sends", "sends with a comp", "sends and puts with immediate data",
                                             "rdmax_req_post sends"};
    tl_begin("srq/window: rq_depth %u: %u sends and puts with immediate data post to a receiver that does "
             "not progress, the next is refused or queued; no RNR", rq_depth, rq_depth ? rq_depth : 16);
    REQUIRE(tl_pair(ca, cb, &da, &db, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
    REQUIRE(rdmax_mem_alloc(cb, 64 * 8, RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_ANY_ENDPOINT, &dst) == RDMAX_OK, "alloc");
    uint64_t *words = (uint64_t *)dst->addr;
    const uint32_t n = rdmax_ep_query_desc(a).rq_depth;
    REQUIRE(n == (rq_depth ? rq_depth : 16), "window %u", n);
    uint64_t rnr0 = tl_rnr_count(dev);
    uint32_t seq = 0, imms = 0;
    for (int r = 0; r < ROUNDS; r++) {
        rdmax_ep_resources ia;
        rdmax_ep_query_resources(a, &ia);
        REQUIRE(ia.send_credits == n, "round %d (%s): %u send credits before, want the window %u", r, kind[r],
                ia.send_credits, n);
        rdmax_comp comp[65];
        rdmax_req req[65];
        memset(comp, 0, sizeof comp);
        memset(req, 0, sizeof req);
        unsigned char m[65][64];
        rdmax_status st = RDMAX_OK;
        /* n + 1 posts; the receiver's context is not progressed (nor the sender's) */
        for (uint32_t i = 0; i <= n; i++) {
            int imm = r == 2 && (i & 1);
            msg_fill(m[i], seq);  /* the next message's number (puts do not count) */
            if (imm) {
                words[imms % 64] = 0;
                uint64_t v = 0x5eed000000000000ull | imms;
                st = rdmax_put_imm(a, &v, 8, NULL, (uintptr_t)&words[imms % 64], dst->rkey, 0xabc00000u | imms, NULL);
            } else if (r == 0 || r == 2) {
                st = rdmax_send(a, m[i], 64, NULL, NULL);
            } else if (r == 1) {
                st = rdmax_send(a, m[i], 64, NULL, &comp[i]);
            } else {
                req[i].op = RDMAX_OP_SEND;
                req[i].buf = m[i];
                req[i].len = 64;
                req[i].comp = &comp[i];
                st = rdmax_req_post(a, &req[i]);
                rdmax_ep_query_resources(a, &ia);
                if (st == RDMAX_INPROGRESS && ia.pending != 0)
                    st = RDMAX_ERR_NO_RESOURCE;  /* queued, not posted */
            }
            if (i < n) {
                REQUIRE(st == RDMAX_OK || st == RDMAX_INPROGRESS, "round %d (%s): post %u of a window of %u: %s",
                        r, kind[r], i + 1, n, rdmax_status_str(st));
            } else {
                REQUIRE(st == RDMAX_ERR_NO_RESOURCE, "round %d (%s): post %u past a window of %u: %s, not refused",
                        r, kind[r], i + 1, n, rdmax_status_str(st));
                if (r == 2) {  /* the other kind too: they share the window */
                    uint64_t v = 0;
                    CHECK_ST(rdmax_put_imm(a, &v, 8, NULL, (uintptr_t)&words[0], dst->rkey, 0, NULL),
                             RDMAX_ERR_NO_RESOURCE);
                }
                break;
            }
            if (imm)
                imms++;
            else
                seq++;
        }
        rdmax_ep_query_resources(a, &ia);
        CHECK(ia.send_credits == 0 && ia.pending == (size_t)(r == 3), "round %d (%s): %u send credits, %zu pending after "
              "the window", r, kind[r], ia.send_credits, ia.pending);
        if (r == 3)  /* the queued one goes once credits come back */
            seq++;
        /* now the receiver progresses */
        sb.watch = words;
        REQUIRE(spin_until(ca, cb, &sb.msgs, seq) == 0 && spin_until(ca, cb, &sb.imms, imms) == 0,
                "round %d (%s): b got %u of %u messages, %u of %u notices", r, kind[r], sb.msgs, seq, sb.imms, imms);
        /* all back but, after rdmax_req_post, the queued send's: owed 1, below half a window, it waits
           for b's next send (there is none) */
        const uint32_t back = n - (r == 3);
        for (long i = 0; i < 50000000L; i++) {
            rdmax_ep_query_resources(a, &ia);
            int done = ia.send_credits == back && ia.pending == 0;
            for (uint32_t k = 0; done && (r == 1 || r == 3) && k <= n; k++)
                done = comp[k].done || (r == 1 && k == n);
            if (done)
                break;
            rdmax_progress(ca);
            rdmax_progress(cb);
        }
        CHECK(ia.send_credits == back && ia.pending == 0, "round %d (%s): %u send credits back, want %u; %zu pending",
              r, kind[r], ia.send_credits, back, ia.pending);
        for (uint32_t k = 0; (r == 1 || r == 3) && k < n + (r == 3); k++)
            CHECK(comp[k].done && comp[k].status == RDMAX_OK, "round %d: comp %u: done %d %s", r, k, comp[k].done,
                  rdmax_status_str(comp[k].status));
    }
    CHECK(sb.msgs == seq && sb.imms == imms && sb.bad == 0 && sb.imm_bad == 0 && sb.data_bad == 0,
          "b got %u of %u messages (%u bad), %u of %u notices (%u bad, %u before their data)", sb.msgs, seq, sb.bad,
          sb.imms, imms, sb.imm_bad, sb.data_bad);
    CHECK(tl_rnr_count(dev) == rnr0, "RNR counters moved by %llu", (unsigned long long)(tl_rnr_count(dev) - rnr0));
    printf("# window %u: %u posts outstanding at once in each of %d rounds, the next refused; %u messages, %u "
           "notices\n", n, n, ROUNDS, seq, imms);
    tl_end();
out:
    case_end(a, b, dst, ca, cb);
}

/* ---- replying to a request (the manual's REPLYING TO A REQUEST) ----
   a sends K requests, one at a time; b replies to each with 64 bytes into a's exposed region, by
   rdmax_put_imm (imm = the request's number) or by rdmax_put then rdmax_send (a 256-byte header naming
   it). Checked: a's callback (imm_cb, recv_cb) finds the reply's data in place and the request named;
   each reply costs b one credit either way; b posted K put_imm, or K puts and K sends; with put_imm
   replies b returned the requests' credits in grants, with sends in their immediate data (no grant). */
static struct {
    const unsigned char *region;  /* a's exposed region: reply k in slot k % 64 */
    uint32_t req_seen, req_bad;   /* b: requests received */
    uint32_t replies, bad, not_in_place;
} g_rep;

static void rep_fill(unsigned char *p, uint32_t k)
{
    for (int i = 0; i < 64; i++)
        p[i] = (unsigned char)(k * 7 + (uint32_t)i);
}

static void rep_check(uint32_t k)
{
    unsigned char want[64];
    rep_fill(want, k);
    g_rep.not_in_place += memcmp(g_rep.region + (k % 64) * 64, want, 64) != 0;
    g_rep.bad += k != g_rep.replies;
    g_rep.replies++;
}

static void rep_on_request(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep, (void)user;
    uint32_t k;
    memcpy(&k, data, 4);
    g_rep.req_bad += len != 64 || k != g_rep.req_seen;
    g_rep.req_seen++;
}

static void rep_on_imm(rdmax_ep *ep, uint32_t imm, size_t len, void *user)
{
    (void)ep, (void)user;
    g_rep.bad += len != 64;
    rep_check(imm);
}

static void rep_on_header(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep, (void)user;
    const unsigned char *h = (const unsigned char *)data;
    uint32_t k;
    memcpy(&k, h, 4);
    for (size_t i = 4; i < len; i++)
        g_rep.bad += h[i] != (unsigned char)(k + i);
    g_rep.bad += len != 256;
    rep_check(k);
}

static void reply_case(void)
{
    enum { K = 40 };
    rdmax_ctx *ca = open_ctx(0, NULL), *cb = open_ctx(0, NULL);
    rdmax_mem *region = NULL;
    tl_begin("srq/replies by put_imm (one operation, one credit, imm names the request) and by put + send (two "
             "operations, one credit, 256-byte header): data in place at the callback");
    REQUIRE(rdmax_mem_alloc(ca, 64 * 64, RDMAX_ACCESS_REMOTE_WRITE, &region) == RDMAX_OK, "alloc");
    for (int how = 0; how < 2; how++) {
        rdmax_ep *a = NULL, *b = NULL;
        memset(&g_rep, 0, sizeof g_rep);
        g_rep.region = (const unsigned char *)region->addr;
        rdmax_ep_desc da, db;
        memset(&da, 0, sizeof da);
        da.rq_depth = 8;
        db = da;
        da.expose = region;
        da.imm_cb = rep_on_imm;
        da.recv_cb = rep_on_header;
        db.recv_cb = rep_on_request;
        REQUIRE(tl_pair(ca, cb, &da, &db, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
        const rdmax_rbuf *r = rdmax_ep_query_remote(b, 0);
        rdmax_counters c0, c1;
        rdmax_ctx_query_counters(cb, &c0);
        uint32_t extra_credit = 0;
        for (uint32_t k = 0; k < K; k++) {
            unsigned char req[64], reply[64], hdr[256];
            memset(req, 0, sizeof req);
            memcpy(req, &k, 4);
            CHECK_ST(rdmax_send(a, req, 64, NULL, NULL), RDMAX_OK);
            if (spin_until(ca, cb, &g_rep.req_seen, k + 1) != 0)
                break;
            rep_fill(reply, k);
            rdmax_ep_resources i0, i1;
            rdmax_ep_query_resources(b, &i0);
            rdmax_status st;
            if (how == 0) {
                st = rdmax_put_imm(b, reply, 64, NULL, r->addr + (k % 64) * 64, r->rkey, k, NULL);
            } else {
                memcpy(hdr, &k, 4);
                for (size_t i = 4; i < sizeof hdr; i++)
                    hdr[i] = (unsigned char)(k + i);
                st = rdmax_put(b, reply, 64, NULL, r->addr + (k % 64) * 64, r->rkey, NULL);
                if (st >= 0)
                    st = rdmax_send(b, hdr, sizeof hdr, NULL, NULL);
            }
            rdmax_ep_query_resources(b, &i1);
            CHECK(st >= 0, "reply %u: %s", k, rdmax_status_str(st));
            extra_credit += i0.send_credits - i1.send_credits != 1;
            if (spin_until(ca, cb, &g_rep.replies, k + 1) != 0)
                break;
        }
        rdmax_ep_flush(b, 10000);
        rdmax_ctx_query_counters(cb, &c1);
        uint64_t imms = c1.posted[RDMAX_OP_PUT_IMM] - c0.posted[RDMAX_OP_PUT_IMM];
        uint64_t puts = c1.posted[RDMAX_OP_PUT] - c0.posted[RDMAX_OP_PUT];
        uint64_t sends = c1.posted[RDMAX_OP_SEND] - c0.posted[RDMAX_OP_SEND];
        uint64_t grants = c1.posted[RDMAX_OP_GRANT] - c0.posted[RDMAX_OP_GRANT];
        const char *name = how == 0 ? "put_imm" : "put + send";
        CHECK(g_rep.req_seen == K && g_rep.replies == K && g_rep.req_bad == 0 && g_rep.bad == 0 &&
                  g_rep.not_in_place == 0,
              "%s: %u of %d requests (%u bad), %u replies (%u bad, %u not in place at the callback)", name,
              g_rep.req_seen, K, g_rep.req_bad, g_rep.replies, g_rep.bad, g_rep.not_in_place);
        CHECK(extra_credit == 0, "%s: %u replies did not cost exactly one credit", name, extra_credit);
        CHECK(how == 0 ? imms == K && puts == 0 && sends == 0 && grants > 0
                       : imms == 0 && puts == K && sends == K && grants == 0,
              "%s: b posted %llu put_imm, %llu puts, %llu sends, %llu grants", name, (unsigned long long)imms,
              (unsigned long long)puts, (unsigned long long)sends, (unsigned long long)grants);
        printf("# replies by %s: %d requests, b posted %llu put_imm, %llu puts, %llu sends, %llu grants\n", name, K,
               (unsigned long long)imms, (unsigned long long)puts, (unsigned long long)sends,
               (unsigned long long)grants);
        rdmax_ep_destroy(a);
        rdmax_ep_destroy(b);
    }
    tl_end();
out:
    rdmax_mem_free(region);
    rdmax_ctx_destroy(ca);
    rdmax_ctx_destroy(cb);
    if (tl_case_failed)
        tl_end();
}

/* The smallest window (4, a request for 2 is raised to it): 2,000 sends each way and 2,000 puts with
   immediate data must all arrive, in order, with no RNR and no grant storm. pool_a, pool_b: where each
   side receives (ep desc recv_pool): the shared queue, or buffers of the endpoint's own. */
static void tiny_window_case(rdmax_ctx *ctx, const char *dev, uint8_t pool_a, uint8_t pool_b)
{
    enum { N = 2000 };
    static const char *const where[2] = {"srq", "own"};
    rdmax_ep *a = NULL, *b = NULL;
    rdmax_mem *dst = NULL;
    struct side sa, sb;
    memset(&sa, 0, sizeof sa);
    memset(&sb, 0, sizeof sb);
    tl_begin("%s/windows of 4%s%s%s: %d sends each way and %d puts with immediate data, in order, no RNR",
             pool_a || pool_b ? "own_pool" : "srq", pool_a || pool_b ? " (a: " : "",
             pool_a || pool_b ? where[pool_a] : "", pool_a || pool_b ? (pool_b ? ", b: own)" : ", b: srq)") : "", N,
             N);
    REQUIRE(rdmax_mem_alloc(ctx, 64 * 8, RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_ANY_ENDPOINT, &dst) ==
                RDMAX_OK, "alloc");
    uint64_t *words = (uint64_t *)dst->addr;
    rdmax_ep_desc da, db;
    memset(&da, 0, sizeof da);
    da.rq_depth = 2;
    da.recv_size = 64;
    da.recv_cb = on_msg;
    da.imm_cb = on_imm;
    da.user = &sa;
    db = da;
    db.user = &sb;
    da.recv_pool = pool_a;
    db.recv_pool = pool_b;
    REQUIRE(tl_pair(ctx, ctx, &da, &db, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
    rdmax_ep_resources ia, ib;
    rdmax_ep_query_resources(a, &ia);
    rdmax_ep_query_resources(b, &ib);
    CHECK(rdmax_ep_query_desc(a).rq_depth == 4 && ia.send_credits == 4, "window %u, credits %u",
          rdmax_ep_query_desc(a).rq_depth, ia.send_credits);
    {
        /* an own pool is the endpoint's: its buffers ((rq_depth + 1) x recv_size), on its own receive
           queue; the shared pool of 64-byte buffers backs the windows (+ 1 each) of the others only */
        rdmax_recv_pool_info sp;
        bool shared = rdmax_ctx_query_recv_pool(ctx, 64, &sp);
        uint32_t n_shared = (pool_a == RDMAX_RECV_POOL_SHARED) + (pool_b == RDMAX_RECV_POOL_SHARED);
        CHECK(rdmax_ep_query_desc(a).recv_pool == pool_a && rdmax_ep_query_desc(b).recv_pool == pool_b,
              "recv_pool reads back %u and %u", rdmax_ep_query_desc(a).recv_pool, rdmax_ep_query_desc(b).recv_pool);
        CHECK(shared == (n_shared > 0) && sp.endpoints == n_shared && sp.target == 5 * n_shared,
              "shared pool of 64-byte buffers: %s, %u endpoints, target %u; want %u endpoints", shared ? "yes" : "no",
              sp.endpoints, sp.target, n_shared);
        CHECK(pool_a != RDMAX_RECV_POOL_OWN || (ia.recv_pool && ia.recv_pool != ib.recv_pool && ia.recv_pool_bytes == 5 * 64),
              "a's pool %p (%zu bytes), b's %p: not buffers of its own", ia.recv_pool, ia.recv_pool_bytes, ib.recv_pool);
        CHECK(pool_b != RDMAX_RECV_POOL_OWN || (ib.recv_pool && ib.recv_pool != ia.recv_pool && ib.recv_pool_bytes == 5 * 64),
              "b's pool %p (%zu bytes), a's %p: not buffers of its own", ib.recv_pool, ib.recv_pool_bytes, ia.recv_pool);
    }
    uint64_t rnr0 = tl_rnr_count(dev);
    rdmax_counters cnt0;  /* the context's counters: the cases before ran on it too */
    rdmax_ctx_query_counters(ctx, &cnt0);
    uint32_t sent_a = 0, sent_b = 0, imm_a = 0;
    long refused = 0;
    time_t t_end = time(NULL) + 120;
    for (long spin = 0; (sent_a < N || sent_b < N || imm_a < N || sa.msgs < N || sb.msgs < N || sb.imms < N) &&
                        ((spin & 1023) || time(NULL) < t_end); spin++) {
        unsigned char m[64];
        for (int burst = 0; burst < 8 && sent_a < N; burst++) {  /* more than the window: some are refused */
            memcpy(m, &sent_a, 4);
            for (size_t i = 4; i < 64; i++)
                m[i] = (unsigned char)(sent_a + i);
            rdmax_status st = rdmax_send(a, m, 64, NULL, NULL);
            refused += st == RDMAX_ERR_NO_RESOURCE;
            if (st != RDMAX_OK)
                break;
            sent_a++;
        }
        for (int burst = 0; burst < 8 && sent_b < N; burst++) {
            memcpy(m, &sent_b, 4);
            for (size_t i = 4; i < 64; i++)
                m[i] = (unsigned char)(sent_b + i);
            if (rdmax_send(b, m, 64, NULL, NULL) != RDMAX_OK)
                break;
            sent_b++;
        }
        if (imm_a < N && imm_a == sb.imms) {  /* one notice at a time, so each finds its word in place */
            uint64_t v = 0x5eed000000000000ull | imm_a;
            rdmax_status st = rdmax_put_imm(a, &v, 8, NULL, (uintptr_t)&words[imm_a % 64], dst->rkey,
                                            0xabc00000u | imm_a, NULL);
            if (st == RDMAX_OK)
                imm_a++;
        }
        sb.watch = words;
        rdmax_progress(ctx);
    }
    rdmax_ep_query_resources(a, &ia);
    rdmax_ep_query_resources(b, &ib);
    CHECK(sa.msgs == N && sb.msgs == N && sb.imms == N, "received %u and %u messages, %u notices (a: credits %u "
          "pending %zu; b: credits %u pending %zu)", sa.msgs, sb.msgs, sb.imms, ia.send_credits, ia.pending,
          ib.send_credits, ib.pending);
    CHECK(sa.bad == 0 && sb.bad == 0 && sb.imm_bad == 0 && sb.data_bad == 0,
          "%u/%u bad messages, %u bad notices, %u notices before their data", sa.bad, sb.bad, sb.imm_bad,
          sb.data_bad);
    CHECK(refused > 0, "a window of 4 never refused a send: credits were not enforced");
    CHECK(tl_rnr_count(dev) == rnr0, "RNR counters moved by %llu", (unsigned long long)(tl_rnr_count(dev) - rnr0));
    rdmax_counters cnt;
    rdmax_ctx_query_counters(ctx, &cnt);
    /* grants answering grants would make thousands per message */
    uint64_t grants = cnt.posted[RDMAX_OP_GRANT] - cnt0.posted[RDMAX_OP_GRANT];
    CHECK(grants < 4 * N, "%llu grants for %d messages", (unsigned long long)grants, 3 * N);
    printf("# windows of 4: %ld refused posts, %llu grants\n", refused, (unsigned long long)grants);
    tl_end();
out:
    case_end(a, b, dst, NULL, NULL);
}

/* ---- ep desc recv_pool: an unknown value refused with a message, the own pool in rdmax's bytes ---- */
static void own_pool_desc_case(rdmax_ctx *ctx)
{
    rdmax_ep *a = NULL, *b = NULL;
    tl_begin("own_pool/desc: recv_pool 7 refused with RDMAX_ERR_INVALID_PARAM and a message; the default is the "
             "shared queue; an own pool's buffers count in endpoint_bytes");
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.recv_pool = 7;
    g_lastlog[0] = 0;
    CHECK_ST(rdmax_ep_create(ctx, &d, &a), RDMAX_ERR_INVALID_PARAM);
    CHECK(a == NULL && strstr(g_lastlog, "recv_pool 7") != NULL, "endpoint %p, message \"%s\"", (void *)a, g_lastlog);
    d.recv_pool = RDMAX_RECV_POOL_SHARED;
    /* the default receives from the context's shared pool and has no buffers of its own (they would be
       16 x 4 KiB of endpoint_bytes) */
    uint64_t bytes_pre = tl_prof(ctx, RDMAX_PROFILE_VAR_EP_BYTES);
    uint32_t users0 = tl_pool(ctx, 0).endpoints;
    REQUIRE(rdmax_ep_create(ctx, &d, &a) == RDMAX_OK, "create: %s", g_lastlog);
    uint64_t bytes0 = tl_prof(ctx, RDMAX_PROFILE_VAR_EP_BYTES);
    CHECK(rdmax_ep_query_desc(a).recv_pool == RDMAX_RECV_POOL_SHARED && tl_pool(ctx, 0).endpoints == users0 + 1 &&
          bytes0 - bytes_pre < 16 * 4096, "default: the shared pool has %u endpoints, %u before; the endpoint added "
          "%llu bytes to endpoint_bytes", tl_pool(ctx, 0).endpoints, users0, (unsigned long long)(bytes0 - bytes_pre));
    d.recv_pool = RDMAX_RECV_POOL_OWN;
    d.rq_depth = 32;
    d.recv_size = 1024;
    REQUIRE(rdmax_ep_create(ctx, &d, &b) == RDMAX_OK, "create with an own pool: %s", g_lastlog);
    uint64_t bytes1 = tl_prof(ctx, RDMAX_PROFILE_VAR_EP_BYTES);
    CHECK(bytes1 - bytes0 >= 33 * 1024 && bytes1 - bytes0 < 33 * 1024 + 4096,
          "an own pool of a window of 32 (33 x 1 KiB) added %llu bytes to endpoint_bytes",
          (unsigned long long)(bytes1 - bytes0));
    CHECK(tl_pool(ctx, 1024).endpoints == 0, "the own pool's endpoint joined a shared pool of 1024-byte buffers");
    rdmax_ep_destroy(b);
    b = NULL;
    bytes1 = tl_prof(ctx, RDMAX_PROFILE_VAR_EP_BYTES);
    CHECK(bytes1 == bytes0, "endpoint_bytes %llu after the destroy, %llu before", (unsigned long long)bytes1,
          (unsigned long long)bytes0);
    tl_end();
out:
    case_end(a, b, NULL, NULL, NULL);
}

/* ---- a callback on the short receive path that destroys its endpoint ----
   A poll that finds one message of the last endpoint delivers it on a short path of its own (a
   ping-pong's every receive). Here b's second message takes it (the first made b the last endpoint,
   each context sees one QP), and its callback destroys b, the last endpoint of a pool of its own size:
   the buffer goes back the batch's way, not into the pool's request after the callback, and the pool goes
   at the end of that very call (never inside the callback, which runs amid the receive path). */
static int g_short_msgs;

/* The short-path cases' traffic: a sends two messages of len, each received (g_short_msgs) before the
   next goes, so that each poll finds one; both contexts progress. */
static rdmax_status short_path_two(rdmax_ep *a, rdmax_ctx *ca, rdmax_ctx *cb, const void *m, size_t len)
{
    for (int k = 1; k <= 2; k++) {
        rdmax_status st = rdmax_send(a, m, len, NULL, NULL);
        if (st != RDMAX_OK)
            return st;
        for (long i = 0; g_short_msgs < k && i < 50000000L; i++) {
            rdmax_progress(ca);
            rdmax_progress(cb);
        }
    }
    return RDMAX_OK;
}
static void on_msg_destroy_second(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)data, (void)len;
    if (++g_short_msgs == 2) {
        *(rdmax_ep **)user = NULL;
        rdmax_ep_destroy(ep);
    }
}

static void short_path_destroy_case(void)
{
    rdmax_ctx *ca = open_ctx(0, NULL), *cb = open_ctx(0, NULL);
    rdmax_ep *a = NULL, *b = NULL;
    tl_begin("srq/short receive path: a callback that destroys its endpoint, the last of its pool, on the "
             "second message; the pool goes at the end of that call");
    rdmax_ep_desc da, db;
    memset(&da, 0, sizeof da);
    da.recv_size = 96;
    db = da;
    db.recv_cb = on_msg_destroy_second;
    db.user = &b;
    g_short_msgs = 0;
    REQUIRE(tl_pair(ca, cb, &da, &db, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
    unsigned char m[96];
    memset(m, 0x5a, sizeof m);
    CHECK_ST(short_path_two(a, ca, cb, m, sizeof m), RDMAX_OK);
    rdmax_recv_pool_info pi;
    bool kept = rdmax_ctx_query_recv_pool(cb, 96, &pi);
    CHECK(g_short_msgs == 2 && b == NULL && !kept, "callbacks %d, b %s, the pool of 96 bytes %s after the call",
          g_short_msgs, b ? "kept" : "destroyed", kept ? "kept" : "freed");
    tl_end();
out:
    case_end(a, b, NULL, ca, cb);
}

/* ---- a callback on the short receive path that destroys another pool's last endpoint ----
   As above, but b's callback destroys c, an endpoint of b's context alone in a pool of its own size (not
   the last endpoint, whose loss disturbs the path by itself): that pool too goes at the end of the very
   call that delivered b's message. */
static rdmax_ep *g_victim;
static void on_msg_destroy_other(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep, (void)data, (void)len, (void)user;
    if (++g_short_msgs == 2) {
        rdmax_ep_destroy(g_victim);
        g_victim = NULL;
    }
}

static void short_path_destroy_other_case(void)
{
    rdmax_ctx *ca = open_ctx(0, NULL), *cb = open_ctx(0, NULL);
    rdmax_ep *a = NULL, *b = NULL;
    tl_begin("srq/short receive path: a callback that destroys another endpoint, the last of its pool, on the "
             "second message; the pool goes at the end of that call");
    rdmax_ep_desc da, db, dc;
    memset(&da, 0, sizeof da);
    db = da;
    db.recv_cb = on_msg_destroy_other;
    dc = da;
    dc.recv_size = 96;
    g_short_msgs = 0;
    g_victim = NULL;
    REQUIRE(tl_pair(ca, cb, &da, &db, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
    REQUIRE(rdmax_ep_create(cb, &dc, &g_victim) == RDMAX_OK, "endpoint of 96 bytes: %s", g_lastlog);
    rdmax_recv_pool_info pi;
    REQUIRE(rdmax_ctx_query_recv_pool(cb, 96, &pi), "no pool of 96 bytes beside the endpoint of that size");
    unsigned char m[8];
    memset(m, 0x5a, sizeof m);
    CHECK_ST(short_path_two(a, ca, cb, m, sizeof m), RDMAX_OK);
    bool kept = rdmax_ctx_query_recv_pool(cb, 96, &pi);
    CHECK(g_short_msgs == 2 && g_victim == NULL && !kept, "callbacks %d, c %s, the pool of 96 bytes %s after the call",
          g_short_msgs, g_victim ? "kept" : "destroyed", kept ? "kept" : "freed");
    tl_end();
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_ep_destroy(g_victim);
    g_victim = NULL;
    rdmax_ctx_destroy(ca);
    rdmax_ctx_destroy(cb);
    if (tl_case_failed)
        tl_end();
}

/* ---- the buffer in hand while a callback destroys its endpoint ----
   b's callback, on a's first message, destroys b, then makes d (its queue filled from the pool's free
   list, last in first out: b's buffers, the one in hand among them, would be on top) paired with e on
   a's side, and progresses both contexts until d has received 3 messages of 0xdd (each of d's first 3
   buffers written). The data it was given must still be a's message after that, and once the endpoints
   are gone every buffer of b's pool is free (none kept by the dead b). batch: a's two messages are both
   in the receive CQ before it is polled (rxe completes a receive before it acknowledges it, and a waits
   for its acknowledgements): the batch path; else one (the single-message path). own: b receives into
   buffers of its own (RDMAX_RECV_POOL_OWN), which must outlive the callback too. */
static struct {
    rdmax_ctx *ca, *cb;
    rdmax_ep *d, *e;
    uint32_t calls, d_msgs, d_bad, sent, spins_out;
    int intact;
} g_hand;

static void on_hand_d(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep, (void)user;
    for (size_t i = 0; i < len; i++)
        g_hand.d_bad += ((unsigned char *)data)[i] != 0xdd;
    g_hand.d_msgs++;
}

static void on_hand_b(rdmax_ep *ep, void *data, size_t len, void *user)
{
    if (g_hand.calls++ > 0)
        return;
    *(rdmax_ep **)user = NULL;
    rdmax_ep_destroy(ep);
    rdmax_ep_desc dd, de;
    memset(&dd, 0, sizeof dd);
    memset(&de, 0, sizeof de);
    dd.recv_cb = on_hand_d;
    if (tl_pair(g_hand.cb, g_hand.ca, &dd, &de, &g_hand.d, &g_hand.e) != RDMAX_OK)
        return;
    unsigned char m[64];
    memset(m, 0xdd, sizeof m);
    for (long i = 0; g_hand.d_msgs < 3; i++) {
        if (i > 50000000L) {
            g_hand.spins_out = 1;
            break;
        }
        if (g_hand.sent == g_hand.d_msgs && rdmax_send(g_hand.e, m, sizeof m, NULL, NULL) >= 0)
            g_hand.sent++;
        rdmax_progress(g_hand.ca);
        rdmax_progress(g_hand.cb);  /* (nested: this callback runs inside cb's poll) */
    }
    g_hand.intact = len == 64;
    for (size_t i = 0; i < len; i++)
        g_hand.intact &= ((unsigned char *)data)[i] == 0xbb;
}

static void in_hand_case(int batch, int own)
{
    rdmax_ctx *ca = open_ctx(0, NULL), *cb = open_ctx(0, NULL);
    rdmax_ep *a = NULL, *b = NULL;
    tl_begin("srq/buffer in hand (%s path%s): a callback destroys its endpoint, makes one that takes the pool's "
             "free buffers and receives 3 messages; its own message stays intact and no buffer is kept",
             batch ? "batch" : "single-message", own ? ", the endpoint's own buffers" : "");
    memset(&g_hand, 0, sizeof g_hand);
    g_hand.ca = ca;
    g_hand.cb = cb;
    rdmax_ep_desc da, db;
    memset(&da, 0, sizeof da);
    db = da;
    db.recv_cb = on_hand_b;
    db.user = &b;
    db.recv_pool = own ? RDMAX_RECV_POOL_OWN : RDMAX_RECV_POOL_SHARED;
    REQUIRE(tl_pair(ca, cb, &da, &db, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
    unsigned char m[64];
    memset(m, 0xbb, sizeof m);
    rdmax_comp comp[2];
    memset(comp, 0, sizeof comp);
    for (int k = 0; k < 1 + batch; k++)
        REQUIRE(rdmax_send(a, m, sizeof m, NULL, &comp[k]) == RDMAX_INPROGRESS, "send %d", k);
    for (long i = 0; !comp[0].done || (batch && !comp[1].done); i++) {
        REQUIRE(i < 50000000L, "a's sends never completed");
        rdmax_progress(ca);
    }
    for (long i = 0; g_hand.calls == 0; i++) {
        REQUIRE(i < 50000000L, "b's message never arrived");
        rdmax_progress(cb);
    }
    REQUIRE(g_hand.d && !g_hand.spins_out, "the callback's endpoint d: %s, its 3 messages: %u",
            g_hand.d ? "made" : "not made", g_hand.d_msgs);
    CHECK(b == NULL && g_hand.calls == 1 && g_hand.d_msgs == 3 && g_hand.d_bad == 0,
          "b %s, b's callbacks %u, d's messages %u (%u bad bytes)", b ? "kept" : "destroyed", g_hand.calls,
          g_hand.d_msgs, g_hand.d_bad);
    CHECK(g_hand.intact, "the data b's callback was given changed while it ran (a buffer of the destroyed "
          "endpoint posted again on another queue, or freed)");
    rdmax_ep_destroy(g_hand.d);
    g_hand.d = NULL;
    rdmax_recv_pool_info pi = tl_pool(cb, 0);
    CHECK(pi.endpoints == 0 && pi.posted == 0 && pi.free == pi.buffers,
          "b's pool with no endpoint: %u posted, %u free of %u buffers", pi.posted, pi.free, pi.buffers);
    tl_end();
out:
    rdmax_ep_destroy(g_hand.d);
    rdmax_ep_destroy(g_hand.e);
    g_hand.d = g_hand.e = NULL;
    case_end(a, b, NULL, ca, cb);
}

/* ---- recv_size of the context and of an endpoint ---- */
static void recv_size_case(void)
{
    rdmax_ctx *ctx = open_ctx(1024, NULL);
    rdmax_ep *a = NULL, *b = NULL, *c = NULL, *e = NULL;
    struct side sb;
    memset(&sb, 0, sizeof sb);
    tl_begin("srq/recv_size: one pool per size; the peer may send up to it; another size's pool goes with its "
             "last endpoint (after the batch, from a callback)");
    rdmax_ep_desc d, db;
    memset(&d, 0, sizeof d);
    d.recv_size = 64;  /* a's peer may send 64 bytes: a's buffers are 64 bytes */
    memset(&db, 0, sizeof db);
    db.recv_size = 2048;  /* b's buffers are 2048 bytes, more than the context's 1024 */
    db.recv_cb = on_msg;
    db.user = &sb;
    REQUIRE(tl_pair(ctx, ctx, &d, &db, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
    REQUIRE(rdmax_ep_create(ctx, NULL, &c) == RDMAX_OK, "endpoint of the context's size: %s", g_lastlog);
    {
        /* three pools, one endpoint each: c in the context's (1024), a in one of 64, b in one of 2048 */
        rdmax_recv_pool_info p0, p64, p2048;
        bool h0 = rdmax_ctx_query_recv_pool(ctx, 0, &p0), h64 = rdmax_ctx_query_recv_pool(ctx, 64, &p64),
             h2048 = rdmax_ctx_query_recv_pool(ctx, 2048, &p2048);
        rdmax_ep_resources ia, ib, ic;
        rdmax_ep_query_resources(a, &ia);
        rdmax_ep_query_resources(b, &ib);
        rdmax_ep_query_resources(c, &ic);
        CHECK(h0 && p0.recv_size == 1024 && p0.endpoints == 1 && rdmax_ep_query_desc(c).recv_size == 1024,
              "the context's pool: %s, %u-byte buffers, %u endpoints", h0 ? "there" : "none", p0.recv_size,
              p0.endpoints);
        CHECK(h64 && h2048 && p64.recv_size == 64 && p64.endpoints == 1 && p2048.recv_size == 2048 &&
              p2048.endpoints == 1 && ia.recv_pool != ib.recv_pool && ia.recv_pool != ic.recv_pool &&
              ib.recv_pool != ic.recv_pool, "pools of 64 (%s, %u endpoints) and 2048 bytes (%s, %u endpoints); a, "
              "b, c receive into %p, %p, %p", h64 ? "there" : "none", p64.endpoints, h2048 ? "there" : "none",
              p2048.endpoints, ia.recv_pool, ib.recv_pool, ic.recv_pool);
    }
    /* what each may send is the other's recv_size: b up to 64, a up to 2048 (sent below) */
    static unsigned char m[4096];
    CHECK_ST(rdmax_send(b, m, 64, NULL, NULL), RDMAX_OK);
    CHECK_ST(rdmax_send(b, m, 65, NULL, NULL), RDMAX_ERR_SIZE);
    CHECK_ST(rdmax_send(a, m, 2049, NULL, NULL), RDMAX_ERR_SIZE);
    for (uint32_t i = 0; i < 2048; i++)
        m[i] = (unsigned char)(i * 13);
    rdmax_comp k;
    memset(&k, 0, sizeof k);
    CHECK_ST(rdmax_send(a, m, 2048, NULL, &k), RDMAX_INPROGRESS);
    for (long i = 0; (!k.done || sb.big == 0) && i < 10000000L; i++)
        rdmax_progress(ctx);
    CHECK(k.done && k.status == RDMAX_OK && sb.big == 1 && sb.big_bad == 0, "2048 bytes: %s, %u arrived, %u "
          "bytes differ", rdmax_status_str(k.status), sb.big, sb.big_bad);
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    a = b = NULL;
    for (int i = 0; i < 10; i++)
        rdmax_progress(ctx);  /* the receive CQ seen empty */
    whitebox(ctx, NULL, WB_TICK, 0);
    {
        rdmax_recv_pool_info pi;
        bool k64 = rdmax_ctx_query_recv_pool(ctx, 64, &pi), k2048 = rdmax_ctx_query_recv_pool(ctx, 2048, &pi),
             k0 = rdmax_ctx_query_recv_pool(ctx, 0, &pi);
        CHECK(!k64 && !k2048 && k0, "pools after their endpoints went: 64 %s, 2048 %s, context's %s",
              k64 ? "kept" : "freed", k2048 ? "kept" : "freed", k0 ? "kept" : "freed");
    }
    rdmax_ep_destroy(c);
    c = NULL;
    for (int i = 0; i < 10; i++)
        rdmax_progress(ctx);
    whitebox(ctx, NULL, WB_TICK, 0);
    CHECK(tl_pool(ctx, 0).recv_size == 1024, "the context's pool was freed");
    /* 31 sizes at once: the 32nd is refused by name */
    rdmax_ep *many[32];
    memset(many, 0, sizeof many);
    rdmax_status st = RDMAX_OK;
    int made = 0;
    for (int i = 0; i < 32 && st == RDMAX_OK; i++) {
        rdmax_ep_desc dm;
        memset(&dm, 0, sizeof dm);
        dm.recv_size = 128 + (uint32_t)i;
        g_lastlog[0] = 0;
        st = rdmax_ep_create(ctx, &dm, &many[i]);
        made += st == RDMAX_OK;
    }
    CHECK(made == 31 && st == RDMAX_ERR_LIMIT && strstr(g_lastlog, "receive sizes"),
          "%d sizes, then %s: %s", made, rdmax_status_str(st), g_lastlog);
    for (int i = 0; i < 32; i++)
        rdmax_ep_destroy(many[i]);
    for (int i = 0; i < 10; i++)
        rdmax_progress(ctx);  /* the receive CQ seen empty: the freed pools' slots may be used again */
    {
        /* a receive callback that destroys the last endpoint of a pool: the pool goes at the end of that
           poll batch (never while the batch may still name it), and is gone when the call returns */
        rdmax_ep_desc dx, dy;
        memset(&dx, 0, sizeof dx);
        memset(&dy, 0, sizeof dy);
        dy.recv_size = 96;
        dy.recv_cb = on_msg_destroy;
        dy.user = &c;
        g_destroyed_in_cb = 0;
        REQUIRE(tl_pair(ctx, ctx, &dx, &dy, &e, &c) == RDMAX_OK, "pair: %s", g_lastlog);
        rdmax_recv_pool_info pi;
        CHECK(rdmax_ctx_query_recv_pool(ctx, 96, &pi) && pi.endpoints == 1, "no pool of 96 bytes with one endpoint");
        CHECK_ST(rdmax_send(e, m, 96, NULL, NULL), RDMAX_OK);
        for (long i = 0; g_destroyed_in_cb == 0 && i < 10000000L; i++)
            rdmax_progress(ctx);
        bool k96 = rdmax_ctx_query_recv_pool(ctx, 96, &pi);
        CHECK(g_destroyed_in_cb == 1 && c == NULL && !k96, "callbacks %d, the pool of 96 bytes %s after the call "
              "that destroyed its last endpoint", g_destroyed_in_cb, k96 ? "kept" : "freed");
        rdmax_ep_destroy(e);
        e = NULL;
        for (int i = 0; i < 10; i++)
            rdmax_progress(ctx);
        CHECK(tl_pool(ctx, 0).recv_size == 1024, "the context's pool was freed");
    }
    tl_end();
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_ep_destroy(c);
    rdmax_ep_destroy(e);
    rdmax_ctx_destroy(ctx);
    if (tl_case_failed)
        tl_end();
}

/* ---- receives of a destroyed endpoint ---- */
static void stale_case(const char *dev)
{
    rdmax_ctx *ca = open_ctx(0, NULL), *cb = open_ctx(0, NULL);
    rdmax_ep *a = NULL, *b = NULL, *a2 = NULL, *b2 = NULL;
    struct side sb, sb2;
    memset(&sb, 0, sizeof sb);
    memset(&sb2, 0, sizeof sb2);
    tl_begin("srq/receives of a destroyed endpoint are counted and dropped; its buffers go back to the pool once");
    rdmax_ep_desc d, db;
    memset(&d, 0, sizeof d);
    d.rq_depth = 8;
    db = d;
    db.recv_cb = on_msg;
    db.user = &sb;
    REQUIRE(tl_pair(ca, cb, &d, &db, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
    rdmax_recv_pool_info p = tl_pool(cb, 0);
    uint32_t target0 = p.target, posted0 = p.posted;
    CHECK(target0 == 9 && posted0 == 9 + p.reserve, "target %u posted %u (want the window + 1 and the reserve %u)",
          target0, posted0, p.reserve);
    /* 8 sends (the window) land in b's context, which does not poll yet */
    unsigned char m[64];
    for (uint32_t i = 0; i < 8; i++) {
        memcpy(m, &i, 4);
        for (size_t k = 4; k < 64; k++)
            m[k] = (unsigned char)(i + k);
        CHECK_ST(rdmax_send(a, m, 64, NULL, NULL), RDMAX_OK);
    }
    CHECK_ST(rdmax_send(a, m, 64, NULL, NULL), RDMAX_ERR_NO_RESOURCE);
    REQUIRE(rdmax_ep_flush(a, 10000) == RDMAX_OK, "flush: %s", g_lastlog);  /* acked: all 8 consumed buffers */
    rdmax_counters c0, c1;
    rdmax_ctx_query_counters(cb, &c0);
    rdmax_ep_destroy(b);
    b = NULL;
    p = tl_pool(cb, 0);
    CHECK(p.target == 0, "target %u after the destroy", p.target);
    for (int i = 0; i < 1000; i++)
        rdmax_progress(cb);
    rdmax_ctx_query_counters(cb, &c1);
    CHECK(c1.stale_wr_ids - c0.stale_wr_ids == 8 && c1.recv_msgs == c0.recv_msgs && sb.msgs == 0,
          "stale %llu (want 8), messages %llu", (unsigned long long)(c1.stale_wr_ids - c0.stale_wr_ids),
          (unsigned long long)(c1.recv_msgs - c0.recv_msgs));
    p = tl_pool(cb, 0);
    CHECK(p.posted == 0 && p.free == p.buffers, "posted %u, free %u of %u buffers (want all free, each once)", p.posted,
          p.free, p.buffers);
    /* a new endpoint reuses the pool: no new chunk, its window posted again */
    uint32_t bufs = p.buffers;
    db.user = &sb2;
    REQUIRE(tl_pair(ca, cb, &d, &db, &a2, &b2) == RDMAX_OK, "second pair: %s", g_lastlog);
    p = tl_pool(cb, 0);
    CHECK(p.buffers == bufs && p.posted >= 8, "buffers %u -> %u, posted %u", bufs, p.buffers, p.posted);
    uint64_t rnr0 = tl_rnr_count(dev);
    for (uint32_t i = 0; i < 100;) {
        memcpy(m, &i, 4);
        for (size_t k = 4; k < 64; k++)
            m[k] = (unsigned char)(i + k);
        if (rdmax_send(a2, m, 64, NULL, NULL) == RDMAX_OK)
            i++;
        rdmax_progress(ca);
        rdmax_progress(cb);
    }
    REQUIRE(spin_until(ca, cb, &sb2.msgs, 100) == 0, "%u of 100 arrived", sb2.msgs);
    CHECK(sb2.bad == 0, "%u bad messages", sb2.bad);
    CHECK(tl_rnr_count(dev) == rnr0, "RNR counters moved");
    /* the same with a pool of another size, which goes with its endpoint: the queued receives find no
       pool and are dropped, and its slot is not reused before the CQ was drained */
    {
        rdmax_ep *a3 = NULL, *b3 = NULL;
        rdmax_ep_desc d3 = db;
        d3.recv_size = 512;
        REQUIRE(tl_pair(ca, cb, &d, &d3, &a3, &b3) == RDMAX_OK, "third pair: %s", g_lastlog);
        uint32_t slot = whitebox(cb, b3, WB_POOL_SLOT, 0);
        for (uint32_t i = 0; i < 5; i++) {
            memcpy(m, &i, 4);
            CHECK_ST(rdmax_send(a3, m, 64, NULL, NULL), RDMAX_OK);
        }
        CHECK(rdmax_ep_flush(a3, 10000) == RDMAX_OK, "flush");
        rdmax_ctx_query_counters(cb, &c0);
        rdmax_ep_destroy(b3);
        bool kept = rdmax_ctx_query_recv_pool(cb, 512, &p);
        uint32_t cooling = whitebox(cb, NULL, WB_SLOT_COOLING, slot);
        CHECK(slot > 0 && !kept && cooling, "pool %u of 512-byte buffers: %s, its slot %s", slot,
              kept ? "kept" : "freed", cooling ? "cooling" : "not cooling");
        rdmax_ep *x = NULL;
        rdmax_ep_desc dx = d;
        dx.recv_size = 1024;
        CHECK(rdmax_ep_create(cb, &dx, &x) == RDMAX_OK && whitebox(cb, x, WB_POOL_SLOT, 0) != slot,
              "a new size took the cooling slot");
        rdmax_ep_destroy(x);
        for (int i = 0; i < 100; i++)
            rdmax_progress(cb);
        rdmax_ctx_query_counters(cb, &c1);
        CHECK(c1.stale_wr_ids - c0.stale_wr_ids == 5, "stale %llu of 5",
              (unsigned long long)(c1.stale_wr_ids - c0.stale_wr_ids));
        rdmax_ep_destroy(a3);
    }
    tl_end();
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_ep_destroy(a2);
    rdmax_ep_destroy(b2);
    rdmax_ctx_destroy(ca);
    rdmax_ctx_destroy(cb);
    if (tl_case_failed)
        tl_end();
}

/* ---- no shared receive queue: no reserve, no low-water mark ---- */
static void limit_case(void)
{
    /* cb asks for a reserve: it is ignored (each endpoint's queue holds its credits alone, >>srq) */
    rdmax_ctx *ca = open_ctx(0, NULL), *cb = open_ctx_ex(NULL, 0, NULL, 64);
    rdmax_ep *a = NULL, *b = NULL;
    struct side sb;
    memset(&sb, 0, sizeof sb);
    tl_begin("srq/no shared receive queue: recv_reserve ignored, a window's buffers posted on its endpoint's "
             "queue alone; a burst of a whole window raises no SRQ event");
    rdmax_ep_desc d, db;
    memset(&d, 0, sizeof d);
    d.rq_depth = 64;
    d.sq_depth = 64;  /* the burst goes out without progress */
    db = d;
    db.recv_cb = on_msg;
    db.user = &sb;
    REQUIRE(tl_pair(ca, cb, &d, &db, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
    whitebox(cb, NULL, WB_TICK, 0);
    rdmax_recv_pool_info p = tl_pool(cb, 0);
    CHECK(p.reserve == 0 && p.target == 65 && p.posted == 65 && p.srq_cap == 0 && p.low_water == 0,
          "reserve %u, target %u, posted %u, srq_cap %u, low_water %u", p.reserve, p.target, p.posted, p.srq_cap,
          p.low_water);
    unsigned char m[64];
    for (uint32_t seq = 0; seq < 64; seq++) {
        memcpy(m, &seq, 4);
        for (size_t k = 4; k < 64; k++)
            m[k] = (unsigned char)(seq + k);
        CHECK_ST(rdmax_send(a, m, 64, NULL, NULL), RDMAX_OK);
    }
    REQUIRE(rdmax_ep_flush(a, 10000) == RDMAX_OK, "flush");
    usleep(100000);
    whitebox(cb, NULL, WB_TICK, 0);
    rdmax_counters cnt;
    rdmax_ctx_query_counters(cb, &cnt);
    CHECK(cnt.srq_limit_events == 0, "%llu SRQ events", (unsigned long long)cnt.srq_limit_events);
    REQUIRE(spin_until(ca, cb, &sb.msgs, 64) == 0, "%u of 64 arrived", sb.msgs);
    CHECK(sb.bad == 0, "%u bad messages", sb.bad);
    tl_end();
out:
    case_end(a, b, NULL, ca, cb);
}

/* ---- limits ---- */
static void limits_case(void)
{
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.max_eps = 3;
    cd.logger.func = keep_log;
    cd.log_level = RDMAX_LOG_ERROR;
    cd.log_level_set = true;
    rdmax_ctx *ctx = NULL;
    rdmax_ep *e[4] = {NULL, NULL, NULL, NULL};
    tl_begin("srq/limits: max_eps and max_cqe refused with RDMAX_ERR_LIMIT, named with their values, "
             "nothing half-made");
    REQUIRE(rdmax_ctx_create(&cd, &ctx) == RDMAX_OK, "context");
    for (int i = 0; i < 3; i++)
        REQUIRE(rdmax_ep_create(ctx, NULL, &e[i]) == RDMAX_OK, "endpoint %d: %s", i, g_lastlog);
    g_lastlog[0] = 0;
    CHECK_ST(rdmax_ep_create(ctx, NULL, &e[3]), RDMAX_ERR_LIMIT);
    CHECK(e[3] == NULL && strstr(g_lastlog, "max_eps 3"), "message: %s", g_lastlog);
    rdmax_ep_destroy(e[2]);
    e[2] = NULL;
    /* a window the receive CQ cannot hold */
    rdmax_recv_pool_info p = tl_pool(ctx, 0);
    uint32_t target = p.target, posted = p.posted, max_cqe = rdmax_ctx_query_attr(ctx)->max_cqe;
    uint64_t n = tl_prof(ctx, RDMAX_PROFILE_VAR_ENDPOINTS), bytes = tl_prof(ctx, RDMAX_PROFILE_VAR_EP_BYTES);
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.rq_depth = 65534;  /* the largest window: its 65535 buffers fill the record's credits field */
    d.recv_size = 64;
    char want[32];
    snprintf(want, sizeof want, "max_cqe %u", max_cqe);
    g_lastlog[0] = 0;
    rdmax_status st = rdmax_ep_create(ctx, &d, &e[2]);
    if (max_cqe >= 65535 + target) {
        printf("# device max_cqe %u holds a window of 65534: the max_cqe case does not apply\n", max_cqe);
    } else {
        CHECK_ST(st, RDMAX_ERR_LIMIT);
        CHECK(e[2] == NULL && strstr(g_lastlog, want), "message: %s", g_lastlog);
    }
    rdmax_recv_pool_info p1 = tl_pool(ctx, 0);
    uint64_t n1 = tl_prof(ctx, RDMAX_PROFILE_VAR_ENDPOINTS), bytes1 = tl_prof(ctx, RDMAX_PROFILE_VAR_EP_BYTES);
    CHECK(n1 == n && p1.target == target && p1.posted == posted && bytes1 == bytes,
          "left behind: endpoints %llu -> %llu, target %u -> %u, posted %u -> %u, bytes %llu -> %llu",
          (unsigned long long)n, (unsigned long long)n1, target, p1.target, posted, p1.posted,
          (unsigned long long)bytes, (unsigned long long)bytes1);
    d.rq_depth = 16;  /* and the context still works */
    CHECK(rdmax_ep_create(ctx, &d, &e[2]) == RDMAX_OK, "endpoint after the refusal: %s", g_lastlog);
    tl_end();
out:
    for (int i = 0; i < 4; i++)
        rdmax_ep_destroy(e[i]);
    rdmax_ctx_destroy(ctx);
    if (tl_case_failed)
        tl_end();
}

/* Locked memory: in a child without CAP_IPC_LOCK (root ignores RLIMIT_MEMLOCK otherwise) and a 1 MiB
   limit, a pool that needs more fails with RDMAX_ERR_LIMIT naming RLIMIT_MEMLOCK and its value. */
static int memlock_child(void)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct cd[2];
    if (syscall(SYS_capget, &h, cd))
        return 10;
    cd[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
    cd[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
    if (syscall(SYS_capset, &h, cd))
        return 11;
    struct rlimit rl = {1 << 20, 1 << 20};
    if (setrlimit(RLIMIT_MEMLOCK, &rl))
        return 12;
    rdmax_ctx *ctx = open_ctx(64 << 10, NULL);
    rdmax_ep *e = NULL;
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.rq_depth = 64;  /* 64 x 64 KiB = 4 MiB of buffers */
    g_lastlog[0] = 0;
    rdmax_status st = rdmax_ep_create(ctx, &d, &e);
    printf("# memlock child: %s; %s\n", rdmax_status_str(st), g_lastlog);
    int rc = st != RDMAX_ERR_LIMIT ? 20 : !strstr(g_lastlog, "RLIMIT_MEMLOCK") ? 21
             : !strstr(g_lastlog, "1048576 bytes") ? 22
             : e != NULL || tl_prof(ctx, RDMAX_PROFILE_VAR_ENDPOINTS) != 0 ? 23 : 0;
    if (rc == 0) {  /* a window that fits the limit still works */
        d.rq_depth = 4;
        rc = rdmax_ep_create(ctx, &d, &e) == RDMAX_OK ? 0 : 24;
    }
    rdmax_ep_destroy(e);
    rdmax_ctx_destroy(ctx);
    return rc;
}

static void memlock_case(void)
{
    tl_begin("srq/locked memory: RDMAX_ERR_LIMIT naming RLIMIT_MEMLOCK and its value");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0)
        _exit(memlock_child());
    int ws = 0;
    waitpid(pid, &ws, 0);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "child: %s %d (10-12 setup, 20 status, 21-22 message, 23 "
          "half-made, 24 small window)", WIFEXITED(ws) ? "exit" : "signal", WIFEXITED(ws) ? WEXITSTATUS(ws)
          : WTERMSIG(ws));
    tl_end();
}

/* ---- two threads, two contexts, one protection domain ---- */
struct worker {
    rdmax_ctx *ctx;
    rdmax_ep *ep;           /* exposes the shared region to the client */
    const rdmax_mem *region;/* registered in the parent context */
    uint64_t dst_addr;
    uint32_t dst_rkey;
    size_t off;             /* its part of the region, put to the client's buffer */
    volatile int stop;
    rdmax_status put_st;
    volatile int put_done;
};

static void *worker_main(void *arg)
{
    struct worker *w = (struct worker *)arg;
    rdmax_comp c;
    memset(&c, 0, sizeof c);
    /* a put whose source is the parent's registration, posted on this context's QP */
    w->put_st = rdmax_put(w->ep, (char *)w->region->addr + w->off, 4096, w->region, w->dst_addr + w->off,
                          w->dst_rkey, &c);
    while (!w->stop) {
        rdmax_progress(w->ctx);
        if (c.done && !w->put_done) {
            w->put_st = c.status;
            w->put_done = 1;
        }
    }
    return NULL;
}

static void threads_case(void)
{
    rdmax_ctx *pa = open_ctx(0, NULL);
    rdmax_ctx *ch = open_ctx(0, pa);
    rdmax_ctx *cl = open_ctx(0, NULL);
    rdmax_ctx *other = open_ctx(0, NULL);
    rdmax_mem *region = NULL, *dst = NULL, *got = NULL;
    rdmax_ep *ca = NULL, *ea = NULL, *cc = NULL, *ec = NULL, *co = NULL, *eo = NULL;
    pthread_t ta, tc;
    int started = 0;
    struct worker wa, wc;
    memset(&wa, 0, sizeof wa);
    memset(&wc, 0, sizeof wc);
    tl_begin("srq/threads: two contexts sharing one PD serve one region from two threads");
    CHECK(whitebox(pa, NULL, WB_DEV_REFS, 0) == 2, "device refs %u with a child", whitebox(pa, NULL, WB_DEV_REFS, 0));
    {
        rdmax_recv_pool_info pi;
        CHECK(!rdmax_ctx_query_recv_pool(ch, 0, &pi) && tl_prof(ch, RDMAX_PROFILE_VAR_RECV_POOL_BYTES) == 0 &&
              strcmp(rdmax_ctx_query_attr(ch)->name, rdmax_ctx_query_attr(pa)->name) == 0, "child attributes");
    }
    REQUIRE(rdmax_mem_alloc(pa, 2 * 4096, RDMAX_ACCESS_REMOTE_READ, &region) == RDMAX_OK, "region");
    for (size_t i = 0; i < 2 * 4096; i++)
        ((unsigned char *)region->addr)[i] = (unsigned char)(i * 7 + 3);
    REQUIRE(rdmax_mem_alloc(cl, 2 * 4096, RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_ANY_ENDPOINT, &dst) == RDMAX_OK, "dst");
    REQUIRE(rdmax_mem_alloc(cl, 3 * 4096, RDMAX_ACCESS_LOCAL, &got) == RDMAX_OK, "got");
    rdmax_ep_desc es, ec_d;
    memset(&es, 0, sizeof es);
    memset(&ec_d, 0, sizeof ec_d);
    es.expose = region;  /* registered in pa: its rkey must work on the child's QPs too */
    REQUIRE(tl_pair(cl, pa, &ec_d, &es, &ca, &ea) == RDMAX_OK, "pair with the parent: %s", g_lastlog);
    REQUIRE(tl_pair(cl, ch, &ec_d, &es, &cc, &ec) == RDMAX_OK, "pair with the child: %s", g_lastlog);
    REQUIRE(tl_pair(cl, other, &ec_d, &es, &co, &eo) == RDMAX_OK, "pair with an unrelated context: %s", g_lastlog);
    {
        /* the child's QPs are on the parent's device context and PD; the unrelated context's are not */
        rdmax_ep_resources ip, ic, io;
        rdmax_ep_query_resources(ea, &ip);
        rdmax_ep_query_resources(ec, &ic);
        rdmax_ep_query_resources(eo, &io);
        CHECK(ic.qp->context == ip.qp->context && ic.qp->pd == ip.qp->pd, "the child has its own device or PD");
        CHECK(io.qp->context != ip.qp->context && io.qp->pd != ip.qp->pd, "control: an unrelated context shares "
              "the parent's device or PD");
    }
    wa.ctx = pa;
    wa.ep = ea;
    wc.ctx = ch;
    wc.ep = ec;
    wa.region = wc.region = region;
    wa.dst_addr = wc.dst_addr = (uintptr_t)dst->addr;
    wa.dst_rkey = wc.dst_rkey = dst->rkey;
    wa.off = 0;
    wc.off = 4096;
    REQUIRE(pthread_create(&ta, NULL, worker_main, &wa) == 0 && pthread_create(&tc, NULL, worker_main, &wc) == 0,
            "threads");
    started = 1;
    /* the client reads the region through both servers, and (the control) through an unrelated context */
    rdmax_comp g[3];
    memset(g, 0, sizeof g);
    CHECK_ST(rdmax_get(ca, got->addr, 4096, got, rdmax_ep_query_remote(ca, 0)->addr, rdmax_ep_query_remote(ca, 0)->rkey, &g[0]), RDMAX_INPROGRESS);
    CHECK_ST(rdmax_get(cc, (char *)got->addr + 4096, 4096, got, rdmax_ep_query_remote(cc, 0)->addr + 4096, rdmax_ep_query_remote(cc, 0)->rkey, &g[1]),
             RDMAX_INPROGRESS);
    CHECK_ST(rdmax_get(co, (char *)got->addr + 8192, 4096, got, rdmax_ep_query_remote(co, 0)->addr, rdmax_ep_query_remote(co, 0)->rkey, &g[2]),
             RDMAX_INPROGRESS);
    for (long i = 0; (!g[0].done || !g[1].done || !g[2].done || !wa.put_done || !wc.put_done) && i < 100000000L;
         i++) {
        rdmax_progress(cl);
        rdmax_progress(other);
    }
    CHECK(g[0].done && g[0].status == RDMAX_OK && g[1].done && g[1].status == RDMAX_OK, "gets: %s, %s",
          rdmax_status_str(g[0].status), rdmax_status_str(g[1].status));
    CHECK(memcmp(got->addr, region->addr, 2 * 4096) == 0, "the gets read other bytes");
    CHECK(g[2].done && g[2].status == RDMAX_ERR_REMOTE_ACCESS,
          "control: a context with its own PD served the region: %s", rdmax_status_str(g[2].status));
    CHECK(wa.put_done && wa.put_st == RDMAX_OK && wc.put_done && wc.put_st == RDMAX_OK, "puts: %s, %s",
          rdmax_status_str(wa.put_st), rdmax_status_str(wc.put_st));
    CHECK(memcmp(dst->addr, region->addr, 2 * 4096) == 0, "the puts wrote other bytes");
    tl_end();
out:
    if (started) {
        wa.stop = wc.stop = 1;
        pthread_join(ta, NULL);
        pthread_join(tc, NULL);
    }
    rdmax_ep_destroy(ca);
    rdmax_ep_destroy(ea);
    rdmax_ep_destroy(cc);
    rdmax_ep_destroy(ec);
    rdmax_ep_destroy(co);
    rdmax_ep_destroy(eo);
    rdmax_mem_free(dst);
    rdmax_mem_free(got);
    rdmax_mem_free(region);
    rdmax_ctx_destroy(other);
    rdmax_ctx_destroy(cl);
    rdmax_ctx_destroy(pa);  /* the parent first: the child keeps the device open */
    if (tl_case_failed)
        tl_end();
    tl_begin("srq/threads: the parent destroyed first, the child keeps the device");
    rdmax_ctx *x = open_ctx(0, NULL);
    rdmax_ep *p1 = NULL, *p2 = NULL;
    CHECK(whitebox(ch, NULL, WB_DEV_REFS, 0) == 1, "refs %u", whitebox(ch, NULL, WB_DEV_REFS, 0));
    CHECK(tl_pair(ch, x, NULL, NULL, &p1, &p2) == RDMAX_OK, "endpoints on the child: %s", g_lastlog);
    rdmax_comp c;
    memset(&c, 0, sizeof c);
    uint32_t v = 7;
    if (p1 && p2 && rdmax_send(p1, &v, 4, NULL, &c) == RDMAX_INPROGRESS)
        for (long i = 0; !c.done && i < 10000000L; i++) {
            rdmax_progress(ch);
            rdmax_progress(x);
        }
    CHECK(c.done && c.status == RDMAX_OK, "send on the child: %s", rdmax_status_str(c.status));
    rdmax_ep_destroy(p1);
    rdmax_ep_destroy(p2);
    rdmax_ctx_destroy(x);
    rdmax_ctx_destroy(ch);
    tl_end();
}

/* Events of contexts sharing a device: whichever context reads one that belongs to another queues it.
   The event: the parent's send CQ overflows (IBV_EVENT_CQ_ERR, whose owner rdmax knows by cq_context):
   signaled zero-length writes posted behind rdmax's back on the parent's endpoint, which nobody polls. */
static void shared_events_case(void)
{
    rdmax_ctx *pa = open_ctx(0, NULL), *ch = open_ctx(0, pa), *cl = open_ctx(0, NULL);
    rdmax_ep *a = NULL, *b = NULL;
    tl_begin("srq/shared device: an event read by the other context reaches its owner");
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.sq_depth = 64;
    d.keepalive_ms = RDMAX_OFF;
    REQUIRE(tl_pair(cl, pa, &d, &d, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
    rdmax_ep_resources rb;
    rdmax_ep_query_resources(b, &rb);  /* its qp is there for fault injection like this */
    int cqe = rb.qp->send_cq->cqe, posted = 0;
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof wr);
    wr.opcode = IBV_WR_RDMA_WRITE;  /* zero-length: touches no memory */
    wr.send_flags = IBV_SEND_SIGNALED;
    for (int i = 0; i < 100000 && posted <= cqe; i++) {  /* (the bound is a hang guard only) */
        if (ibv_post_send(rb.qp, &wr, &bad) == 0)
            posted++;
        else
            usleep(1000);  /* the send queue is full until the device completes some */
    }
    REQUIRE(posted > cqe, "%d writes posted, the send CQ holds %d", posted, cqe);
    g_lastlog[0] = 0;
    /* the child reads the shared fd: the parent's event must be queued for the parent, not taken */
    for (int i = 0; i < 100 && whitebox(pa, NULL, WB_DEV_EVENTS, 0) == 0; i++) {
        usleep(10000);
        whitebox(ch, NULL, WB_TICK, 0);
    }
    uint32_t queued = whitebox(pa, NULL, WB_DEV_EVENTS, 0);
    CHECK(queued >= 1 && !strstr(g_lastlog, "CQ error"), "queued %u, logged \"%s\"", queued, g_lastlog);
    whitebox(pa, NULL, WB_TICK, 0);  /* (completions that overflow after this may queue more: not counted) */
    CHECK(strstr(g_lastlog, "CQ error"), "the parent logged \"%s\"", g_lastlog);
    tl_end();
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_ctx_destroy(ch);
    rdmax_ctx_destroy(pa);
    rdmax_ctx_destroy(cl);
    if (tl_case_failed)
        tl_end();
}

/* Control for the "no RNR" checks: sends posted behind rdmax's back, past the credits, while the receiver
   does not progress, must empty the shared queue and move the RNR counters; else those checks are blind. */
static void rnr_control_case(const char *dev)
{
    enum { RAW = 24 };
    rdmax_ctx *ctx = open_ctx_ex(NULL, 0, NULL, RDMAX_OFF);  /* a pool of the two windows alone */
    rdmax_ep *a = NULL, *b = NULL;
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.rq_depth = 4;
    d.rnr_retry = 1;
    d.keepalive_ms = RDMAX_OFF;
    tl_begin("srq/control: %d sends past a window of 4 to a receiver that does not progress move the RNR counters",
             RAW);
    REQUIRE(tl_pair(ctx, ctx, &d, &d, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
    REQUIRE(tl_pool(ctx, 0).posted == 10, "%u buffers posted, expected the two windows + 1 each",
            tl_pool(ctx, 0).posted);
    uint64_t rnr0 = tl_rnr_count(dev);
    struct ibv_send_wr wr[RAW], *bad = NULL;
    memset(wr, 0, sizeof wr);
    for (int i = 0; i < RAW; i++) {
        wr[i].opcode = IBV_WR_SEND;
        wr[i].wr_id = 0;  /* a completion of it is a stale wr_id to rdmax */
        wr[i].next = i + 1 < RAW ? &wr[i + 1] : NULL;
    }
    wr[RAW - 1].send_flags = IBV_SEND_SIGNALED;
    rdmax_ep_resources ia;
    rdmax_ep_query_resources(a, &ia);  /* its qp is there for fault injection like this */
    REQUIRE(ibv_post_send(ia.qp, wr, &bad) == 0, "ibv_post_send");
    /* nothing polls or reposts meanwhile; the wait is only a hang guard */
    for (int i = 0; i < 500 && tl_rnr_count(dev) == rnr0; i++)
        usleep(10000);
    CHECK(tl_rnr_count(dev) > rnr0, "the RNR counters of %s did not move (%llu): the no-RNR checks cannot see RNR",
          dev, (unsigned long long)rnr0);
    printf("# control: RNR counters %llu before, %llu after\n", (unsigned long long)rnr0,
           (unsigned long long)tl_rnr_count(dev));
    tl_end();
out:
    case_end(a, b, NULL, ctx, NULL);
}

/* ---- peers that send past their window ---- */
static void on_echo(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)user;
    if (rdmax_send(ep, data, len, NULL, NULL) != RDMAX_OK)
        printf("# echo refused\n");
}

static struct {
    uint32_t fails;
    rdmax_status reason[4];
} g_viol;

static void on_viol_state(rdmax_ep *ep, rdmax_ep_state st, rdmax_status why, void *user)
{
    (void)ep;
    if (st == RDMAX_EP_ERROR) {
        g_viol.reason[(uintptr_t)user] = why;
        g_viol.fails++;
    }
}

/* Violator v's QP (an rdmax endpoint of a context nobody progresses, driven by raw verbs): one send of
   64 bytes with immediate data 0 (it gives no credits back), signaled, wr_id v. */
static int viol_post(struct ibv_qp *qp, const rdmax_mem *src, uint32_t v)
{
    struct ibv_sge sge = {(uintptr_t)src->addr, 64, src->lkey};
    struct ibv_send_wr wr, *bad;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = v;
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = 0;
    return ibv_post_send(qp, &wr, &bad);
}

/* Four peers keep 256 sends in flight each, past their window of 16, into a server on device d0 that
   also serves an honest client's checked echo round trips from device d1 (so d1's RNR counters are the
   honest traffic's alone); the honest client keeps the default rnr_retry (6: bounded), as a user would.
   Modes:
     BREAK_SHARED   the violators' server endpoints on the shared pool (the default): each violator meets
                    RNR on its own receive queue or is failed with RDMAX_ERR_PEER_WINDOW, the honest client
                    finishes every round trip and its device counts no RNR (on a shared receive queue the
                    violators drained the buffers behind the honest client's credits: issue 30)
     BREAK_OWN      the same with the violators' server endpoints on receive pools of their own
     BREAK_CONTROL  the shared pool, nobody polls the server: the RNR counters move (the checks above can
                    see RNR) */
enum breaker_mode { BREAK_SHARED, BREAK_OWN, BREAK_CONTROL };

static void violators_case(const char *d0, const char *d1, enum breaker_mode mode)
{
    enum { V = 4, INFLIGHT = 256, TRIPS = 200 };
    rdmax_ctx *srv = open_ctx_ex(d0, 0, NULL, 0),
              *hc = open_ctx_ex(d1, 0, NULL, 0), *vc = open_ctx_ex(d0, 0, NULL, 0);
    rdmax_ep *h = NULL, *hs = NULL, *v[V] = {0}, *vs[V] = {0};
    rdmax_mem *src = NULL;
    struct side hside;
    memset(&hside, 0, sizeof hside);
    memset(&g_viol, 0, sizeof g_viol);
    if (mode == BREAK_CONTROL)
        tl_begin("srq/control: %d peers keeping %d sends in flight past a window of 16 into a pool with no "
                 "reserve that nobody polls move the RNR counters", V, INFLIGHT);
    else if (mode == BREAK_SHARED)
        tl_begin("srq/window breakers on the shared pool: %d peers keep %d sends in flight past a window of 16: "
                 "they meet RNR alone (or fail for their window); an honest client's %d checked round trips "
                 "with the default rnr_retry, no RNR on its device",
                 V, INFLIGHT, TRIPS);
    else
        tl_begin("own_pool/window breakers on pools of their own: %d peers keep %d sends in flight past a window "
                 "of 16: they meet RNR alone (or fail for their window); an honest client's %d checked round "
                 "trips, no RNR on its device",
                 V, INFLIGHT, TRIPS);
    REQUIRE(rdmax_mem_alloc(vc, 4096, RDMAX_ACCESS_LOCAL, &src) == RDMAX_OK, "mem_alloc");
    memset(src->addr, 0x5a, 64);
    rdmax_ep_desc dh, ds, dv, dvs;
    memset(&dh, 0, sizeof dh);
    memset(&ds, 0, sizeof ds);
    memset(&dv, 0, sizeof dv);
    memset(&dvs, 0, sizeof dvs);
    dh.recv_cb = on_msg;
    dh.user = &hside;
    /* dh.rnr_retry: the default, bounded (an RNR that lasts fails the honest client) */
    ds.recv_cb = on_echo;
    dv.sq_depth = INFLIGHT;
    dv.rnr_retry = 7;  /* a violator on its own pool keeps retrying: it never fails, the test stops it */
    dh.keepalive_ms = ds.keepalive_ms = dv.keepalive_ms = dvs.keepalive_ms = RDMAX_OFF;
    dvs.state_cb = on_viol_state;
    /* fixed windows of 16 both ways, as these measurements were made (the server's grants to a violator
       spend its window, which decides how long an own-pool server can grant); adapting ones: scale_test adapt */
    dv.rq_depth = dvs.rq_depth = 16;
    if (mode == BREAK_OWN)
        dvs.recv_pool = RDMAX_RECV_POOL_OWN;
    REQUIRE(tl_pair(hc, srv, &dh, &ds, &h, &hs) == RDMAX_OK, "honest pair: %s", g_lastlog);
    for (uintptr_t i = 0; i < V; i++) {
        dvs.user = (void *)i;
        REQUIRE(tl_pair(vc, srv, &dv, &dvs, &v[i], &vs[i]) == RDMAX_OK, "violator pair %u: %s", (unsigned)i,
                g_lastlog);
    }
    rdmax_recv_pool_info p0 = tl_pool(srv, 0);
    printf("# server pool: %u credits, reserve %u, %u posted\n", p0.target, p0.reserve, p0.posted);
    CHECK(p0.posted == p0.target + p0.reserve, "reserve %u, %u posted for %u credits", p0.reserve, p0.posted,
          p0.target);
    uint64_t rnr_srv0 = tl_rnr_count(d0), rnr_h0 = tl_rnr_count(d1);
    struct ibv_qp *vqp[V];
    for (uint32_t i = 0; i < V; i++) {
        rdmax_ep_resources vi;
        rdmax_ep_query_resources(v[i], &vi);
        vqp[i] = vi.qp;
        for (int k = 0; k < INFLIGHT; k++)
            REQUIRE(viol_post(vqp[i], src, i) == 0, "violator %u: post %d", i, k);
    }
    if (mode == BREAK_CONTROL) {
        /* nothing polls the server: the violators meet an empty queue (the wait is only a hang guard) */
        for (int i = 0; i < 1000 && tl_rnr_count(d0) == rnr_srv0; i++)
            usleep(10000);
        CHECK(tl_rnr_count(d0) > rnr_srv0, "the RNR counters of %s did not move (%llu)", d0,
              (unsigned long long)rnr_srv0);
        printf("# control: RNR counters of %s %llu before, %llu after\n", d0, (unsigned long long)rnr_srv0,
               (unsigned long long)tl_rnr_count(d0));
        tl_end();
        goto out;
    }
    uint32_t sent = 0, reposts = 0;
    unsigned char msg[64];
    struct ibv_cq *vcq = vqp[0]->send_cq;
    time_t t0 = time(NULL);  /* a hang guard only */
    /* nothing need fail the violators (RNR on their own queues stops them): they flood until the honest
       client is done */
    while (hside.msgs < TRIPS && rdmax_ep_query_state(h) == RDMAX_EP_CONNECTED && time(NULL) - t0 < 120) {
        /* each violator keeps INFLIGHT in flight while its server endpoint is up */
        struct ibv_wc wc[32];
        int n = ibv_poll_cq(vcq, 32, wc);
        for (int k = 0; k < n; k++) {
            uint32_t i = (uint32_t)wc[k].wr_id;
            if (i < V && wc[k].status == IBV_WC_SUCCESS && rdmax_ep_query_state(vs[i]) == RDMAX_EP_CONNECTED)
                reposts += viol_post(vqp[i], src, i) == 0;
        }
        rdmax_progress(srv);
        rdmax_progress(hc);
        if (sent == hside.msgs && sent < TRIPS) {  /* one round trip at a time, each checked by on_msg */
            msg_fill(msg, sent);
            if (rdmax_send(h, msg, sizeof msg, NULL, NULL) == RDMAX_OK)
                sent++;
        }
    }
    uint64_t rnr_srv1 = tl_rnr_count(d0), rnr_h1 = tl_rnr_count(d1);
    rdmax_counters c;
    rdmax_ctx_query_counters(srv, &c);
    /* a violator failed in the server's last progress is told at its next tick (state_cb, at most once a
       millisecond): told before the two counts are compared (the wait is only a hang guard) */
    for (int i = 0; i < 1000 && g_viol.fails < c.window_breaks; i++) {
        usleep(1000);
        rdmax_progress(srv);
        rdmax_ctx_query_counters(srv, &c);
    }
    printf("# server: %llu messages received, %llu grants posted, window_breaks %llu; %u violator sends reposted\n",
           (unsigned long long)c.recv_msgs, (unsigned long long)c.posted[RDMAX_OP_GRANT],
           (unsigned long long)c.window_breaks, reposts);
    printf("# honest: %u of %d round trips, %u bad; RNR counters: server's device %s +%llu, the honest client's "
           "device %s +%llu\n", hside.msgs, TRIPS, hside.bad, d0, (unsigned long long)(rnr_srv1 - rnr_srv0), d1,
           (unsigned long long)(rnr_h1 - rnr_h0));
    CHECK(hside.msgs == TRIPS && hside.bad == 0, "honest client: %u of %d round trips, %u bad", hside.msgs, TRIPS,
          hside.bad);
    CHECK(rdmax_ep_query_state(h) == RDMAX_EP_CONNECTED && rdmax_ep_query_state(hs) == RDMAX_EP_CONNECTED,
          "honest endpoints in state %d / %d", rdmax_ep_query_state(h), rdmax_ep_query_state(hs));
    CHECK(rnr_h1 == rnr_h0, "the honest client's device %s counted %llu RNR", d1,
          (unsigned long long)(rnr_h1 - rnr_h0));
    /* Contained either way, and which way depends on timing: a violator meets RNR on its own queue, or,
       once a grant to it falls due while it is owed more than its buffers, fails for its window. */
    CHECK(rnr_srv1 > rnr_srv0 || g_viol.fails > 0, "the violators met neither RNR on their own queues nor a "
          "failure");
    CHECK(c.window_breaks == g_viol.fails, "%u violators failed, window_breaks %llu", g_viol.fails,
          (unsigned long long)c.window_breaks);
    for (int i = 0; i < V; i++)
        CHECK(g_viol.reason[i] == RDMAX_OK || g_viol.reason[i] == RDMAX_ERR_PEER_WINDOW, "violator %d failed "
              "with %s", i, rdmax_status_str(g_viol.reason[i]));
    tl_end();
out:
    for (int i = 0; i < V; i++) {
        rdmax_ep_destroy(v[i]);
        rdmax_ep_destroy(vs[i]);
    }
    rdmax_ep_destroy(h);
    rdmax_ep_destroy(hs);
    rdmax_mem_free(src);
    rdmax_ctx_destroy(vc);
    rdmax_ctx_destroy(hc);
    rdmax_ctx_destroy(srv);
    if (tl_case_failed)
        tl_end();
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    rdmax_ctx *ctx = open_ctx(0, NULL);
    char dev[64];
    snprintf(dev, sizeof dev, "%s", rdmax_ctx_query_attr(ctx)->name);
    if (argc > 1 && !strcmp(argv[1], "breakers")) {  /* veth: the server on DEV0, the honest client on DEV1 */
        const char *d0 = getenv("RDMAX_TEST_DEV0"), *d1 = getenv("RDMAX_TEST_DEV1");
        rdmax_ctx_destroy(ctx);
        if (!d0 || !d1) {
            printf("FAIL breakers: RDMAX_TEST_DEV0 and RDMAX_TEST_DEV1 must name two devices\n");
            return 1;
        }
        violators_case(d0, d1, BREAK_SHARED);
        violators_case(d0, d1, BREAK_OWN);
        violators_case(d0, d1, BREAK_CONTROL);
        return tl_failed_total ? 1 : 0;
    }
    window_case(dev, 4);
    window_case(dev, 16);
    if (argc > 1 && !strcmp(argv[1], "window")) {  /* those alone (a control build against older headers) */
        rdmax_ctx_destroy(ctx);
        return tl_failed_total ? 1 : 0;
    }
    imm_case(ctx);
    reply_case();
    tiny_window_case(ctx, dev, RDMAX_RECV_POOL_SHARED, RDMAX_RECV_POOL_SHARED);
    tiny_window_case(ctx, dev, RDMAX_RECV_POOL_OWN, RDMAX_RECV_POOL_OWN);
    tiny_window_case(ctx, dev, RDMAX_RECV_POOL_OWN, RDMAX_RECV_POOL_SHARED);
    own_pool_desc_case(ctx);
    rdmax_ctx_destroy(ctx);
    pingpong_credits_case(0);
    pingpong_credits_case(1);
    short_path_destroy_case();
    short_path_destroy_other_case();
    in_hand_case(0, 0);
    in_hand_case(1, 0);
    in_hand_case(1, 1);
    recv_size_case();
    stale_case(dev);
    limit_case();
    limits_case();
    memlock_case();
    threads_case();
    shared_events_case();
    rnr_control_case(dev);
    return tl_failed_total ? 1 : 0;
}
