/* Failures an endpoint must not outlive in silence, on a real device (rxe in the test VM):
   - a QP moved to the error state behind rdmax's back (what an asynchronous QP-fatal looks like);
   - the responder side of a protection error the peer caused: a flush over its operations never succeeds;
   - a requester that never hears back (ack timeout of hours): the watchdog fails it;
   - an idle endpoint whose peer vanished: keepalive finds it, and only with keepalive on;
   - graceful disconnect: the peer sees RDMAX_EP_CLOSED and says so;
   - a peer process killed and restarted ten times: the same context reconnects and leaks nothing;
   - (veth) a link cut during a put stream: every operation completes once, no hang; reconnect works.
   - (veth, mode devices) the netdev taken down and up, and rxe1's link deleted, under running endpoints.
   Usage: failure_test loopback | linkcut | devices (linkcut and devices need the veth topology: rxe0 on
   veth0, rxe1 on veth1; devices deletes rxe1 and adds it back). */
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#define RDMAX_TESTING /* rdmax__test_clock_advance */
#include "../rdmax.h"
#include "testlib.h"

#include <time.h>
#include <signal.h>
#include <spawn.h>
#include <unistd.h>
#include <sys/wait.h>
#include <fcntl.h>

#define GUARD_MS 60000 /* a hang guard, not a timing assertion: the expected times are a few seconds */

/* The verbs QP under ep (rdmax_ep_query_resources), for fault injection and QP queries. */
static struct ibv_qp *ep_qp(const rdmax_ep *ep)
{
    rdmax_ep_resources i;
    rdmax_ep_query_resources(ep, &i);
    return i.qp;
}

static int g_events[RDMAX_PROFILE_EVENT__COUNT];
static uint64_t g_detail_sum[RDMAX_PROFILE_EVENT__COUNT];

static void on_event(rdmax_profile *p, rdmax_profile_event type, rdmax_ep *ep, uint64_t detail, void *user)
{
    (void)p, (void)ep, (void)user;
    g_events[type]++;
    g_detail_sum[type] += detail;
}

static void quiet_log(rdmax_log_level lvl, rdmax_log_item item, const char *msg, void *user)
{
    (void)item;
    (void)user;
    if (lvl <= RDMAX_LOG_WARN)
        printf("    log: %s\n", msg);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static rdmax_ctx *open_ctx(const char *dev)
{
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    d.device = dev;
    d.logger.func = quiet_log;
    rdmax_ctx *c = NULL;
    if (rdmax_ctx_create(&d, &c) != RDMAX_OK) {
        printf("FAIL setup: cannot open device %s\n", dev ? dev : "(default)");
        exit(1);
    }
    rdmax_profile *p;
    if (rdmax_profile_create(c, &p) == RDMAX_OK)
        for (int t = 0; t < RDMAX_PROFILE_EVENT__COUNT; t++)
            rdmax_profile_reg_event(p, (rdmax_profile_event)t, on_event, NULL);
    return c;
}

static rdmax_status pair(rdmax_ctx *ca, rdmax_ctx *cb, const rdmax_ep_desc *d, rdmax_ep **a, rdmax_ep **b)
{
    return tl_pair(ca, cb, d, d, a, b);
}

/* Progress until ep leaves RDMAX_EP_CONNECTED or the guard passes; returns the ms it took, -1 on guard. */
static int64_t wait_state(rdmax_ctx *c, rdmax_ctx *c2, rdmax_ep *ep)
{
    int64_t t0 = now_ms();
    while (rdmax_ep_query_state(ep) == RDMAX_EP_CONNECTED) {
        rdmax_progress(c);
        if (c2 && c2 != c)
            rdmax_progress(c2);
        if (now_ms() - t0 > GUARD_MS)
            return -1;
    }
    return now_ms() - t0;
}

static void force_qp_error(rdmax_ep *ep)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(ep_qp(ep), &a, IBV_QP_STATE);
}

/* A QP forced to the error state with nothing in flight: the flushed receive buffers tell rdmax. */
static void case_forced_error(rdmax_ctx *c, rdmax_mem *mem)
{
    tl_begin("failure/qp forced to error: endpoint reports it on its next progress");
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.expose = mem;
    rdmax_ep *a = NULL, *b = NULL;
    int before = g_events[RDMAX_PROFILE_EVENT_EP_ERROR];
    REQUIRE(pair(c, c, &d, &a, &b) == RDMAX_OK, "pair");
    force_qp_error(a);
    REQUIRE(wait_state(c, NULL, a) >= 0, "endpoint still connected after %d ms", GUARD_MS);
    CHECK(rdmax_ep_query_state(a) == RDMAX_EP_ERROR, "state %d", rdmax_ep_query_state(a));
    CHECK_ST(rdmax_ep_query_error(a), RDMAX_ERR_FLUSHED);
    CHECK_ST(rdmax_put(a, "x", 1, NULL, 0, 0, NULL), RDMAX_ERR_ENDPOINT);
    CHECK(g_events[RDMAX_PROFILE_EVENT_EP_ERROR] == before + 1, "%d EP_ERROR events, expected 1",
          g_events[RDMAX_PROFILE_EVENT_EP_ERROR] - before);
    CHECK(rdmax_ep_query_state(b) == RDMAX_EP_CONNECTED, "the peer failed too");
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    tl_end();
}

/* The silent success of the old flush: an unsignaled put accepted before rdmax saw the QP fail. */
static void case_flush_after_forced_error(rdmax_ctx *c, rdmax_mem *mem)
{
    tl_begin("failure/flush over an operation flushed by a failed QP is not a success");
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.expose = mem;
    rdmax_ep *a = NULL, *b = NULL;
    REQUIRE(pair(c, c, &d, &a, &b) == RDMAX_OK, "pair");
    rdmax_rbuf rb;
    rdmax_conn_record ib;
    rdmax_ep_query_record(b, &ib);
    rb = ib.regions[0];
    memset(mem->addr, 0, 64);
    force_qp_error(a);
    /* rdmax has not polled yet: the put is accepted, unsignaled, and the device flushes it */
    rdmax_status st = rdmax_put(a, "payload", 7, NULL, rb.addr, rb.rkey, NULL);
    CHECK(st == RDMAX_OK || st == RDMAX_ERR_IO, "put: %s", rdmax_status_str(st));
    st = rdmax_ep_flush(a, 10000);
    CHECK(st != RDMAX_OK, "flush reported success over a flushed put");
    CHECK(rdmax_ep_query_error(a) != RDMAX_OK, "rdmax_ep_query_error is OK");
    CHECK(memcmp(mem->addr, "payload", 7) != 0, "the data arrived after all: the case proves nothing");
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    tl_end();
}

/* a1 puts with a bad rkey: rxe moves the responder a2's QP to the error state as well. a2 then sees only
   flushed completions; an unsignaled put on a2 and a flush must not report success. */
static void case_responder_side(rdmax_ctx *c, rdmax_mem *mem)
{
    tl_begin("failure/responder side of a protection error: flush on the peer is not a success");
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.expose = mem;
    rdmax_ep *a1 = NULL, *a2 = NULL;
    REQUIRE(pair(c, c, &d, &a1, &a2) == RDMAX_OK, "pair");
    rdmax_conn_record i1, i2;
    rdmax_ep_query_record(a1, &i1);
    rdmax_ep_query_record(a2, &i2);
    rdmax_comp comp;
    memset(&comp, 0, sizeof comp);
    static char src[4096];
    REQUIRE(rdmax_put(a1, src, sizeof src, NULL, i2.regions[0].addr, i2.regions[0].rkey ^ 0x5a5a00u, &comp) == RDMAX_INPROGRESS,
            "bad-key put not posted");
    int64_t t0 = now_ms();
    while (!comp.done && now_ms() - t0 < GUARD_MS)
        rdmax_progress(c);
    REQUIRE(comp.done, "bad-key put never completed");
    CHECK(comp.status != RDMAX_OK, "bad-key put succeeded");
    memset((char *)mem->addr + 128, 0, 64);
    rdmax_status st = rdmax_put(a2, "payload", 7, NULL, i1.regions[0].addr + 128, i1.regions[0].rkey, NULL);
    if (st == RDMAX_OK)
        st = rdmax_ep_flush(a2, 10000);
    if (memcmp((char *)mem->addr + 128, "payload", 7) == 0) {
        CHECK(st == RDMAX_OK, "the data arrived but the flush reported %s", rdmax_status_str(st));
        printf("    note: this kernel's rxe left the responder QP working\n");
    } else {
        CHECK(st != RDMAX_OK, "flush reported success although the data was never written");
        CHECK(rdmax_ep_query_error(a2) != RDMAX_OK, "rdmax_ep_query_error(a2) is OK");
    }
out:
    rdmax_ep_destroy(a1);
    rdmax_ep_destroy(a2);
    tl_end();
}

/* An ack timeout of 2.4 hours and a peer that is gone: the device would wait for hours; the watchdog
   fails the endpoint after its bound, and the QP's flush completes every operation once. */
static void case_watchdog(rdmax_ctx *c, rdmax_mem *mem)
{
    tl_begin("failure/watchdog fails a requester that never hears back");
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.expose = mem;
    d.timeout = 31;
    d.watchdog_ms = 1500;
    d.keepalive_ms = RDMAX_OFF;
    rdmax_ep *a = NULL, *b = NULL;
    enum { N = 8 };
    rdmax_comp comp[N];
    memset(comp, 0, sizeof comp);
    REQUIRE(pair(c, c, &d, &a, &b) == RDMAX_OK, "pair");
    rdmax_conn_record ib;
    rdmax_ep_query_record(b, &ib);
    rdmax_ep_destroy(b);
    b = NULL;
    for (int i = 0; i < N; i++)
        REQUIRE(rdmax_put(a, mem->addr, 64, mem, ib.regions[0].addr, ib.regions[0].rkey, &comp[i]) == RDMAX_INPROGRESS, "put %d", i);
    int64_t ms = wait_state(c, NULL, a);
    REQUIRE(ms >= 0, "no failure after %d ms: the watchdog did not fire", GUARD_MS);
    CHECK_ST(rdmax_ep_query_error(a), RDMAX_ERR_STALLED);
    int64_t t0 = now_ms();
    int done = 0;
    while (done < N && now_ms() - t0 < GUARD_MS) {
        rdmax_progress(c);
        done = 0;
        for (int i = 0; i < N; i++)
            done += comp[i].done;
    }
    CHECK(done == N, "%d of %d operations completed after the failure", done, N);
    for (int i = 0; i < N; i++)
        CHECK(!comp[i].done || comp[i].status != RDMAX_OK, "operation %d reported success", i);
    printf("    watchdog: failed after %lld ms (bound %u ms)\n", (long long)ms, d.watchdog_ms);
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    tl_end();
}

/* Two idle endpoints whose peers vanished: with keepalive the one finds out within keepalive + the RC
   retry time; without it the other (the control) stays connected for twice as long, because nothing
   else can tell it. */
static void case_keepalive(rdmax_ctx *c, rdmax_mem *mem)
{
    tl_begin("failure/keepalive finds a vanished peer of an idle endpoint (and only with keepalive on)");
    rdmax_ep_desc on, off;
    memset(&on, 0, sizeof on);
    on.expose = mem;
    on.keepalive_ms = 1000;
    on.timeout = 14;  /* RC retry time 0.47 s (the default 7.5 s only makes the test longer) */
    off = on;
    off.keepalive_ms = RDMAX_OFF;
    rdmax_ep *a = NULL, *b = NULL, *x = NULL, *y = NULL;
    REQUIRE(pair(c, c, &on, &a, &b) == RDMAX_OK, "pair (keepalive on)");
    REQUIRE(pair(c, c, &off, &x, &y) == RDMAX_OK, "pair (keepalive off)");
    /* the peers go without a word: their QPs vanish, as in a killed process */
    rdmax_ep_destroy(b);
    rdmax_ep_destroy(y);
    b = y = NULL;
    int64_t ms = wait_state(c, NULL, a);
    REQUIRE(ms >= 0, "keepalive endpoint still connected after %d ms", GUARD_MS);
    CHECK(rdmax_ep_query_error(a) == RDMAX_ERR_RETRY_EXCEEDED || rdmax_ep_query_error(a) == RDMAX_ERR_STALLED,
          "error %s", rdmax_status_str(rdmax_ep_query_error(a)));
    int64_t t0 = now_ms();
    while (now_ms() - t0 < 2 * ms + 1000)
        rdmax_progress(c);
    CHECK(rdmax_ep_query_state(x) == RDMAX_EP_CONNECTED, "the endpoint without keepalive failed too: the check "
          "does not show keepalive at work");
    printf("    keepalive: idle endpoint failed after %lld ms (keepalive %u ms + retry time)\n", (long long)ms,
           on.keepalive_ms);
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_ep_destroy(x);
    rdmax_ep_destroy(y);
    tl_end();
}

/* Requests that wait for credits a dead peer will never return: nothing is outstanding, so only the
   keepalive can find the peer, and it must go although requests wait (it did not: the endpoint stayed
   connected with its requests queued for good). Each queued request then completes exactly once, with
   an error. The peer is on a context of its own that is never progressed, so no credit comes back. The
   control, keepalive off, stays connected with its requests waiting. */
enum { KP_N = 20 };
static int kp_calls[2][KP_N];
static rdmax_status kp_status[2][KP_N];
static int kp_order[2][KP_N], kp_seen[2];  /* request numbers in the order they completed */

static void kp_done(rdmax_comp *c, rdmax_status st)
{
    int *k = (int *)c->user;
    kp_calls[k[0]][k[1]]++;
    kp_status[k[0]][k[1]] = st;
    if (kp_seen[k[0]] < KP_N)
        kp_order[k[0]][kp_seen[k[0]]++] = k[1];
}

static void case_keepalive_pending(rdmax_ctx *c, rdmax_mem *mem)
{
    tl_begin("failure/keepalive finds a dead peer while sends wait for its credits; each queued request fails once");
    rdmax_ctx *c2 = open_ctx(getenv("RDMAX_TEST_DEV0"));
    rdmax_ep_desc on, off;
    memset(&on, 0, sizeof on);
    on.expose = mem;
    on.rq_depth = 4;
    on.keepalive_ms = 1000;
    on.timeout = 14;  /* RC retry time 0.47 s */
    off = on;
    off.keepalive_ms = RDMAX_OFF;
    rdmax_ep *ep[2] = {NULL, NULL}, *peer[2] = {NULL, NULL};
    static rdmax_req req[2][KP_N];
    static rdmax_comp comp[2][KP_N];
    static int key[2][KP_N][2];
    memset(kp_calls, 0, sizeof kp_calls);
    memset(kp_seen, 0, sizeof kp_seen);
    REQUIRE(tl_pair(c, c2, &on, &on, &ep[0], &peer[0]) == RDMAX_OK, "pair (keepalive on)");
    REQUIRE(tl_pair(c, c2, &off, &off, &ep[1], &peer[1]) == RDMAX_OK, "pair (keepalive off)");
    for (int e = 0; e < 2; e++)
        for (int i = 0; i < KP_N; i++) {
            memset(&req[e][i], 0, sizeof req[e][i]);
            memset(&comp[e][i], 0, sizeof comp[e][i]);
            key[e][i][0] = e;
            key[e][i][1] = i;
            comp[e][i].cb = kp_done;
            comp[e][i].user = key[e][i];
            req[e][i].op = RDMAX_OP_SEND;
            req[e][i].buf = mem->addr;
            req[e][i].len = 8;
            req[e][i].mem = mem;
            req[e][i].comp = &comp[e][i];
            rdmax_status st = rdmax_req_post(ep[e], &req[e][i]);
            REQUIRE(st == RDMAX_INPROGRESS || st == RDMAX_OK, "rdmax_req_post %d: %s", i, rdmax_status_str(st));
        }
    /* what went out completes (the peer's device acknowledges it); the rest waits for credits */
    int64_t t0 = now_ms();
    rdmax_ep_resources i0, i1;
    do {
        rdmax_progress(c);
        rdmax_ep_query_resources(ep[0], &i0);
        rdmax_ep_query_resources(ep[1], &i1);
    } while ((i0.outstanding || i1.outstanding) && now_ms() - t0 < GUARD_MS);
    REQUIRE(i0.outstanding == 0 && i1.outstanding == 0, "sends still outstanding after %d ms", GUARD_MS);
    REQUIRE(i0.pending > 0 && i1.pending > 0, "no request waits for credits (pending %zu, %zu)", i0.pending,
            i1.pending);
    size_t waiting = i0.pending;
    /* the peers go without a word, as in a killed process */
    rdmax_ep_destroy(peer[0]);
    rdmax_ep_destroy(peer[1]);
    peer[0] = peer[1] = NULL;
    int64_t ms = wait_state(c, NULL, ep[0]);
    REQUIRE(ms >= 0, "endpoint still connected %d ms after its peer went, %zu requests waiting", GUARD_MS, waiting);
    CHECK(rdmax_ep_query_error(ep[0]) == RDMAX_ERR_RETRY_EXCEEDED || rdmax_ep_query_error(ep[0]) == RDMAX_ERR_STALLED,
          "error %s", rdmax_status_str(rdmax_ep_query_error(ep[0])));
    t0 = now_ms();
    int done = 0;
    while (done < KP_N && now_ms() - t0 < GUARD_MS) {
        rdmax_progress(c);
        done = 0;
        for (int i = 0; i < KP_N; i++)
            done += kp_calls[0][i] != 0;
    }
    int twice = 0, ok_after = 0, not_endpoint = 0, out_of_order = 0;
    for (int i = 0; i < KP_N; i++) {
        twice += kp_calls[0][i] > 1;
        ok_after += i >= KP_N - (int)waiting && kp_status[0][i] == RDMAX_OK;
        not_endpoint += i >= KP_N - (int)waiting && kp_status[0][i] != RDMAX_ERR_ENDPOINT;
    }
    for (int i = KP_N - (int)waiting + 1; i < KP_N && i < kp_seen[0]; i++)
        out_of_order += kp_order[0][i] < kp_order[0][i - 1];
    CHECK(done == KP_N, "%d of %d requests completed after the failure", done, KP_N);
    CHECK(twice == 0, "%d requests completed more than once", twice);
    CHECK(ok_after == 0, "%d of the %zu waiting requests reported success", ok_after, waiting);
    CHECK(not_endpoint == 0 && out_of_order == 0, "of the %zu waiting requests %d completed with another status "
          "than RDMAX_ERR_ENDPOINT, %d out of order (the manual, FAILURES)", waiting, not_endpoint, out_of_order);
    rdmax_ep_query_resources(ep[0], &i0);
    CHECK(i0.pending == 0, "%zu requests still queued", i0.pending);
    /* control: without keepalive nothing tells the other endpoint, for twice as long */
    t0 = now_ms();
    while (now_ms() - t0 < 2 * ms + 1000)
        rdmax_progress(c);
    rdmax_ep_query_resources(ep[1], &i1);
    CHECK(rdmax_ep_query_state(ep[1]) == RDMAX_EP_CONNECTED && i1.pending == waiting,
          "the endpoint without keepalive failed too (or its requests moved): the check does not show the "
          "keepalive at work");
    rdmax_ep_desc ad = rdmax_ep_query_desc(ep[0]);
    printf("    keepalive with %zu requests waiting for credits: failed after %lld ms (keepalive %u ms + retry "
           "time %llu ms)\n", waiting, (long long)ms, on.keepalive_ms,
           (unsigned long long)((4096ull << ad.timeout) * (ad.retry_cnt + 1u) / 1000000u));
out:
    rdmax_ep_destroy(ep[0]);
    rdmax_ep_destroy(ep[1]);
    rdmax_ep_destroy(peer[0]);
    rdmax_ep_destroy(peer[1]);
    rdmax_ctx_destroy(c2);
    tl_end();
}

static uint64_t keepalives(rdmax_ctx *c)
{
    rdmax_counters k;
    rdmax_ctx_query_counters(c, &k);
    return k.posted[RDMAX_OP_KEEPALIVE];
}

/* The health pass runs by elapsed time, not by calls: a caller whose callbacks take 2 s each (the clock
   the test controls moves 2 s before each progress call) gets its keepalive on the first call past
   keepalive_ms, after a handful of calls (it needed 1,024 calls, and a gap of more than 1 s between
   passes restarted every clock, so it never came). Control: as many calls without the clock moving post
   none (keepalive_ms is 60 s of real time). Then the same in real time: a caller that sleeps 20 ms per
   call finds its dead peer (the guard is a hang guard, not a bound). */
static void case_health_clock(rdmax_ctx *c, rdmax_mem *mem)
{
    tl_begin("failure/the health pass runs by elapsed time: a keepalive after keepalive_ms whatever the call rate");
    rdmax_ctx *c2 = open_ctx(getenv("RDMAX_TEST_DEV0"));
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.expose = mem;
    d.keepalive_ms = 60000;
    rdmax_ep *a = NULL, *b = NULL;
    REQUIRE(tl_pair(c, c2, &d, &d, &a, &b) == RDMAX_OK, "pair");
    rdmax_progress(c);
    uint64_t k0 = keepalives(c);
    enum { CALLS = 32, STEP_MS = 2000 };
    for (int i = 0; i < CALLS; i++)
        rdmax_progress(c);
    CHECK(keepalives(c) == k0, "control: %llu keepalives in %d calls without the clock moving",
          (unsigned long long)(keepalives(c) - k0), CALLS);
    int calls = 0;
    while (keepalives(c) == k0 && calls < CALLS) {
        rdmax__test_clock_advance(c, STEP_MS);
        rdmax_progress(c);
        calls++;
    }
    CHECK(keepalives(c) == k0 + 1, "%llu keepalives after %d calls %d ms apart (keepalive_ms %u)",
          (unsigned long long)(keepalives(c) - k0), calls, STEP_MS, d.keepalive_ms);
    CHECK(calls <= (int)(d.keepalive_ms / STEP_MS) + 2, "the keepalive took %d calls %d ms apart (keepalive_ms %u)",
          calls, STEP_MS, d.keepalive_ms);
    printf("    test clock: keepalive posted at call %d, %d ms apart (keepalive_ms %u)\n", calls, STEP_MS,
           d.keepalive_ms);
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    a = b = NULL;
    /* real time: 20 ms between calls, the peer gone without a word */
    d.keepalive_ms = 1000;
    d.timeout = 14;  /* RC retry time 0.47 s */
    REQUIRE(tl_pair(c, c2, &d, &d, &a, &b) == RDMAX_OK, "pair");
    rdmax_ep_destroy(b);
    b = NULL;
    int64_t t0 = now_ms();
    calls = 0;
    while (rdmax_ep_query_state(a) == RDMAX_EP_CONNECTED && now_ms() - t0 < GUARD_MS) {
        rdmax_progress(c);
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
        calls++;
    }
    int64_t ms = now_ms() - t0;
    CHECK(rdmax_ep_query_state(a) == RDMAX_EP_ERROR, "a caller sleeping 20 ms per call: still connected after "
          "%lld ms (%d calls)", (long long)ms, calls);
    rdmax_ep_desc ad = rdmax_ep_query_desc(a);
    printf("    20 ms between calls: the dead peer found after %lld ms, %d calls (keepalive %u ms + retry time "
           "%llu ms)\n", (long long)ms, calls, d.keepalive_ms,
           (unsigned long long)((4096ull << ad.timeout) * (ad.retry_cnt + 1u) / 1000000u));
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_ctx_destroy(c2);
    tl_end();
}

struct rx {
    int count;
    char last[16];
};

static void on_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep;
    struct rx *r = (struct rx *)user;
    memcpy(r->last, data, len < sizeof r->last ? len : sizeof r->last);
    r->count++;
}

static void case_disconnect(rdmax_ctx *c, rdmax_mem *mem)
{
    tl_begin("failure/graceful disconnect: the peer sees RDMAX_EP_CLOSED, flush says the peer closed");
    struct rx rxb;
    memset(&rxb, 0, sizeof rxb);
    rdmax_ep_desc da, db;
    memset(&da, 0, sizeof da);
    da.expose = mem;
    db = da;
    db.recv_cb = on_recv;
    db.user = &rxb;
    rdmax_ep *a = NULL, *b = NULL;
    int closed_before = g_events[RDMAX_PROFILE_EVENT_EP_CLOSED];
    uint64_t by_peer_before = g_detail_sum[RDMAX_PROFILE_EVENT_EP_CLOSED];
    REQUIRE(tl_pair(c, c, &da, &db, &a, &b) == RDMAX_OK, "pair");
    REQUIRE(rdmax_send(a, "goodbye", 8, NULL, NULL) == RDMAX_OK, "send");
    CHECK_ST(rdmax_ep_disconnect(a, 10000), RDMAX_OK);
    CHECK(rdmax_ep_query_state(a) == RDMAX_EP_CLOSED, "closer's state %d", rdmax_ep_query_state(a));
    CHECK_ST(rdmax_put(a, "x", 1, NULL, 0, 0, NULL), RDMAX_ERR_CLOSED);
    REQUIRE(wait_state(c, NULL, b) >= 0, "peer never saw the close");
    CHECK(rdmax_ep_query_state(b) == RDMAX_EP_CLOSED, "peer's state %d", rdmax_ep_query_state(b));
    CHECK(rxb.count == 1 && !strcmp(rxb.last, "goodbye"), "the message before the close: %d received",
          rxb.count);
    CHECK_ST(rdmax_ep_query_error(b), RDMAX_ERR_CLOSED);
    CHECK_ST(rdmax_send(b, "late", 4, NULL, NULL), RDMAX_ERR_CLOSED);
    CHECK_ST(rdmax_ep_flush(b, 1000), RDMAX_ERR_CLOSED);
    CHECK(g_events[RDMAX_PROFILE_EVENT_EP_CLOSED] == closed_before + 2, "%d EP_CLOSED events, expected 2",
          g_events[RDMAX_PROFILE_EVENT_EP_CLOSED] - closed_before);
    CHECK(g_detail_sum[RDMAX_PROFILE_EVENT_EP_CLOSED] - by_peer_before == 1,
          "of the two EP_CLOSED events exactly one (the peer's) should say 'by peer'");
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    tl_end();
}

/* The state callback: once per endpoint, from progress outside every other callback, with the reason:
   failed (the peer vanished: keepalive), closed by the peer, closed here. The failed endpoint's callback
   destroys its own endpoint (allowed; ASan sees a use after free in the san build). */
struct st_seen {
    int calls;
    rdmax_ep_state state;
    rdmax_status reason;
    int destroy;
};
static void st_cb(rdmax_ep *ep, rdmax_ep_state state, rdmax_status reason, void *user)
{
    struct st_seen *s = (struct st_seen *)user;
    s->calls++;
    s->state = state;
    s->reason = reason;
    if (s->destroy)
        rdmax_ep_destroy(ep);
}

static void st_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep, (void)data, (void)len, (void)user;
}

/* progress c (and c2) until s has been called or the guard passes */
static int st_wait(rdmax_ctx *c, rdmax_ctx *c2, const struct st_seen *s)
{
    int64_t t0 = now_ms();
    while (s->calls == 0 && now_ms() - t0 < GUARD_MS) {
        rdmax_progress(c);
        if (c2)
            rdmax_progress(c2);
    }
    /* a little more: a second call would show now */
    for (int i = 0; i < 2000; i++) {
        rdmax_progress(c);
        if (c2)
            rdmax_progress(c2);
    }
    return s->calls;
}

static void case_state_cb(rdmax_ctx *c, rdmax_mem *mem)
{
    tl_begin("state/state_cb: failed, closed by the peer, closed here; once each, from progress, may destroy");
    rdmax_ctx *c2 = open_ctx(getenv("RDMAX_TEST_DEV0"));
    struct st_seen sf, sp, sh, sx;
    memset(&sf, 0, sizeof sf);
    memset(&sp, 0, sizeof sp);
    memset(&sh, 0, sizeof sh);
    memset(&sx, 0, sizeof sx);
    sf.destroy = 1;
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.expose = mem;
    d.timeout = 14;  /* the peer's loss is found in 0.47 s */
    d.keepalive_ms = 500;
    d.state_cb = st_cb;
    d.recv_cb = st_recv;
    rdmax_ep *a = NULL, *b = NULL, *x = NULL, *y = NULL;
    /* failed: the peer (on c2, never progressed) goes without a word */
    d.user = &sf;
    REQUIRE(tl_pair(c, c2, &d, NULL, &a, &b) == RDMAX_OK, "pair");
    rdmax_ep_destroy(b);
    b = NULL;
    REQUIRE(st_wait(c, NULL, &sf) == 1, "failed endpoint: %d calls", sf.calls);
    a = NULL;  /* its callback destroyed it */
    CHECK(sf.state == RDMAX_EP_ERROR && (sf.reason == RDMAX_ERR_RETRY_EXCEEDED || sf.reason == RDMAX_ERR_STALLED),
          "failed endpoint: state %d reason %s", sf.state, rdmax_status_str(sf.reason));
    /* closed by the peer, and closed here: x disconnects, y hears it */
    d.user = &sh;
    rdmax_ep_desc dy = d;
    dy.user = &sp;
    REQUIRE(tl_pair(c, c2, &d, &dy, &x, &y) == RDMAX_OK, "pair");
    CHECK_ST(rdmax_ep_disconnect(x, 10000), RDMAX_OK);
    CHECK(sh.calls == 0, "closed here: called %d times inside rdmax_ep_disconnect (progress should)", sh.calls);
    CHECK(st_wait(c, c2, &sh) == 1 && sh.state == RDMAX_EP_CLOSED && sh.reason == RDMAX_OK,
          "closed here: %d calls, state %d, reason %s", sh.calls, sh.state, rdmax_status_str(sh.reason));
    CHECK(st_wait(c2, c, &sp) == 1 && sp.state == RDMAX_EP_CLOSED && sp.reason == RDMAX_ERR_CLOSED,
          "closed by the peer: %d calls, state %d, reason %s", sp.calls, sp.state, rdmax_status_str(sp.reason));
    /* control: a connected endpoint's callback is never called */
    d.user = &sx;
    rdmax_ep *p = NULL, *q = NULL;
    REQUIRE(tl_pair(c, c2, &d, &d, &p, &q) == RDMAX_OK, "pair");
    for (int i = 0; i < 20000; i++) {
        rdmax_progress(c);
        rdmax_progress(c2);
    }
    CHECK(sx.calls == 0, "a connected pair's callback was called %d times", sx.calls);
    rdmax_ep_destroy(p);
    rdmax_ep_destroy(q);
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_ep_destroy(x);
    rdmax_ep_destroy(y);
    rdmax_ctx_destroy(c2);
    tl_end();
}

/* A state callback that destroys its endpoint (the common shutdown) is not called inside rdmax_ep_flush or
   rdmax_ep_disconnect of that endpoint, which use it after each progress: the endpoint fails inside the call
   (an asynchronous QP error, queued as the device reports it, read at the call's first tick, forced) and is
   told once, at the first pass after the call returns. Before, it was told inside (only a disconnect's
   goodbye flush was exempt), and a destroy there freed the endpoint under the call. Cases: a flush over
   unsignaled puts; a disconnect failing in its first flush; one failing in its goodbye's flush. */
struct tell_seen {
    int calls, inside;
    rdmax_ep_state state;
    rdmax_status reason;
};
static int g_in_call;
static void tell_cb(rdmax_ep *ep, rdmax_ep_state state, rdmax_status reason, void *user)
{
    struct tell_seen *s = (struct tell_seen *)user;
    s->calls++;
    s->state = state;
    s->reason = reason;
    if (g_in_call)
        s->inside++;  /* (destroying ep here is the use after free) */
    else
        rdmax_ep_destroy(ep);
}

/* The next rdmax_progress on c runs its tick (rdmax__tick_due: due, and the coarse clock differs). */
static void force_tick(rdmax_ctx *c)
{
    rdmax__test_tick_hold(c, 0);
    c->tick_coarse_ms = INT64_MIN;
}

/* An asynchronous QP-fatal event for ep, as the device reports one, read at c's next progress (its tick
   forced). Nonzero: the event queue is full. */
static int queue_qp_fatal(rdmax_ctx *c, rdmax_ep *ep)
{
    struct rdmax__dev *dv = c->dev;
    pthread_mutex_lock(&dv->lock);
    int full = dv->n_ev >= RDMAX__DEV_EVQ;
    if (!full) {
        dv->ev[dv->n_ev].to = c;
        dv->ev[dv->n_ev].type = IBV_EVENT_QP_FATAL;
        dv->ev[dv->n_ev].obj = NULL;
        dv->ev[dv->n_ev++].arg = ep_qp(ep)->qp_num;
    }
    pthread_mutex_unlock(&dv->lock);
    force_tick(c);
    return full;
}

static void case_state_cb_in_call(rdmax_ctx *c, rdmax_mem *mem)
{
    tl_begin("state/state_cb is not called inside rdmax_ep_flush or rdmax_ep_disconnect of its endpoint");
    const char *name[3] = {"flush", "disconnect", "disconnect's goodbye"};
    rdmax_ep *a = NULL, *b = NULL;
    for (int k = 0; k < 3; k++) {
        struct tell_seen s;
        memset(&s, 0, sizeof s);
        rdmax_ep_desc d, db;
        memset(&d, 0, sizeof d);
        d.expose = mem;
        d.keepalive_ms = RDMAX_OFF;
        db = d;
        d.state_cb = tell_cb;
        d.user = &s;
        REQUIRE(tl_pair(c, c, &d, &db, &a, &b) == RDMAX_OK, "pair");
        rdmax_conn_record ib;
        rdmax_ep_query_record(b, &ib);
        for (int i = 0; k < 2 && i < 4; i++)  /* (none: the disconnect's first flush returns at once) */
            CHECK_ST(rdmax_put(a, mem->addr, 64, mem, ib.regions[0].addr + 4096, ib.regions[0].rkey, NULL), RDMAX_OK);
        REQUIRE(queue_qp_fatal(c, a) == 0, "device event queue full");
        g_in_call = 1;
        rdmax_status st = k == 0 ? rdmax_ep_flush(a, 10000) : rdmax_ep_disconnect(a, 10000);
        g_in_call = 0;
        CHECK(s.inside == 0, "%s: state_cb called %d times inside the call (%d in all)", name[k], s.inside, s.calls);
        if (s.calls == 0) {
            CHECK(st == RDMAX_ERR_DEVICE && rdmax_ep_query_state(a) == RDMAX_EP_ERROR,
                  "%s: %s, state %d (the QP error was not read inside the call)", name[k], rdmax_status_str(st),
                  (int)rdmax_ep_query_state(a));
            force_tick(c);
            rdmax_progress(c);
            CHECK(s.calls == 1 && s.state == RDMAX_EP_ERROR && s.reason == RDMAX_ERR_DEVICE,
                  "%s: the next progress after the call called state_cb %d times, state %d reason %s", name[k],
                  s.calls, (int)s.state, rdmax_status_str(s.reason));
            force_tick(c);
            rdmax_progress(c);
            CHECK(s.calls == 1, "%s: state_cb called %d times", name[k], s.calls);
        }
        printf("    %s: state_cb called %d times inside the call, %d after it\n", name[k], s.inside,
               s.calls - s.inside);
        if (s.calls > s.inside)
            a = NULL;  /* its callback destroyed it */
        rdmax_ep_destroy(a);
        rdmax_ep_destroy(b);
        a = b = NULL;
    }
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    tl_end();
}

/* A callback that destroys an endpoint inside that endpoint's rdmax_ep_flush or rdmax_ep_disconnect (its
   own receive callback, which the manual has always allowed, another endpoint's receive callback, or
   another endpoint's state callback): the call returns RDMAX_ERR_CANCELED and frees the endpoint as it
   returns. Before, the destroy freed it under the call, which read it after the progress that ran the
   callback (ASan: heap-use-after-free in rdmax__ep_flush). The message that destroys it is in the
   receive CQ before the call (its sender's completion came back: rxe completes a receive before it
   acknowledges it), and the failure is a queued QP-fatal event with the tick forced: the call's first
   progress finds either. */
struct doom {
    rdmax_ep **victim;  /* the test's own pointer, cleared with the destroy */
    int calls, inside;
};
static void doom_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep, (void)data, (void)len;
    struct doom *g = (struct doom *)user;
    g->calls++;
    g->inside += g_in_call;
    rdmax_ep_destroy(*g->victim);
    *g->victim = NULL;
}
static void doom_state(rdmax_ep *ep, rdmax_ep_state state, rdmax_status reason, void *user)
{
    (void)state, (void)reason;
    doom_recv(ep, NULL, 0, user);
}

static void case_destroy_in_call(rdmax_ctx *c)
{
    tl_begin("state/a callback inside rdmax_ep_flush or rdmax_ep_disconnect destroys that endpoint: "
             "RDMAX_ERR_CANCELED, freed as the call returns");
    rdmax_ctx *c2 = open_ctx(getenv("RDMAX_TEST_DEV0"));
    const char *name[6] = {"flush, its own receive callback", "disconnect, its own receive callback",
                           "flush, another's receive callback", "disconnect, another's receive callback",
                           "flush, another's state callback", "disconnect, another's state callback"};
    rdmax_ep *a = NULL, *b = NULL, *x = NULL, *y = NULL;
    for (int k = 0; k < 6; k++) {
        struct doom g;
        memset(&g, 0, sizeof g);
        rdmax_ep_desc d;
        memset(&d, 0, sizeof d);
        d.keepalive_ms = RDMAX_OFF;
        d.recv_cb = doom_recv;
        d.user = &g;
        REQUIRE(tl_pair(c, c2, &d, NULL, &a, &b) == RDMAX_OK, "pair");
        rdmax_ep *from = b;  /* the trigger's sender, to the endpoint whose callback destroys a */
        if (k >= 2) {
            rdmax_ep_desc dx = d;
            if (k >= 4) {  /* x fails: its state callback destroys a */
                dx.recv_cb = NULL;
                dx.state_cb = doom_state;
            }
            REQUIRE(tl_pair(c, c2, &dx, NULL, &x, &y) == RDMAX_OK, "second pair");
            from = y;
        }
        g.victim = &a;
        char msg[8] = "doom";
        CHECK_ST(rdmax_send(a, msg, sizeof msg, NULL, NULL), RDMAX_OK);  /* so that the call progresses */
        if (k >= 4) {
            REQUIRE(queue_qp_fatal(c, x) == 0, "device event queue full");  /* read at the call's first progress */
        } else {
            rdmax_comp sent;
            memset(&sent, 0, sizeof sent);
            CHECK_ST(rdmax_send(from, msg, sizeof msg, NULL, &sent), RDMAX_INPROGRESS);
            for (int i = 0; i < 1000000 && !sent.done; i++)  /* (a hang guard) */
                rdmax_progress(c2);
            REQUIRE(sent.done && sent.status == RDMAX_OK, "%s: the trigger's send did not complete", name[k]);
        }
        g_in_call = 1;
        rdmax_status st = k % 2 == 0 ? rdmax_ep_flush(a, 10000) : rdmax_ep_disconnect(a, 10000);
        g_in_call = 0;
        REQUIRE(g.inside == 1 && a == NULL, "%s: the callback ran %d times inside the call (%d in all)", name[k],
                g.inside, g.calls);
        CHECK(st == RDMAX_ERR_CANCELED, "%s: the call returned %s", name[k], rdmax_status_str(st));
        printf("    %s: %s\n", name[k], rdmax_status_str(st));
        rdmax_ep_destroy(b);
        rdmax_ep_destroy(x);
        rdmax_ep_destroy(y);
        b = x = y = NULL;
    }
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_ep_destroy(x);
    rdmax_ep_destroy(y);
    rdmax_ctx_destroy(c2);
    tl_end();
}

/* One wait for everything: rdmax_wait returns when a listener has a client, with no completion to wake
   it (before: it slept the whole timeout, so a server loop of progress, accept, wait stalled). The
   client is a child process; control: with no client, rdmax_wait times out. */
static void case_wait_listener(void)
{
    tl_begin("wait/rdmax_wait returns when a listener has a client to accept");
    rdmax_ctx *c = open_ctx(getenv("RDMAX_TEST_DEV0"));
    rdmax_listener *l = NULL;
    rdmax_ep *ep = NULL;
    pid_t pid = -1;
    REQUIRE(rdmax_listener_create(c, "127.0.0.1", 0, &l) == RDMAX_OK, "listen");
    CHECK_ST(rdmax_wait(c, 300), RDMAX_ERR_TIMEOUT);
    uint16_t port = rdmax_listener_query_port(l);
    pid = fork();
    if (pid == 0) {
        rdmax_ctx *cc = open_ctx(getenv("RDMAX_TEST_DEV0"));
        rdmax_ep *e = NULL;
        rdmax_status st = rdmax_connect(cc, "127.0.0.1", port, NULL, &e, 30000);
        for (int i = 0; i < 1000; i++)
            rdmax_progress(cc);
        rdmax_ep_destroy(e);
        rdmax_ctx_destroy(cc);
        _exit(st == RDMAX_OK ? 0 : 1);
    }
    int waits = 0, timeouts = 0;
    int64_t t0 = now_ms();
    while (!ep && now_ms() - t0 < GUARD_MS) {
        rdmax_status st = rdmax_accept(l, NULL, &ep, 0);
        if (st == RDMAX_OK)
            break;
        REQUIRE(st == RDMAX_ERR_TIMEOUT, "accept: %s", rdmax_status_str(st));
        st = rdmax_wait(c, GUARD_MS);
        waits++;
        timeouts += st == RDMAX_ERR_TIMEOUT;
    }
    CHECK(ep != NULL, "no endpoint after %d waits", waits);
    CHECK(timeouts == 0, "%d of %d waits of %d ms timed out with a client at the listener", timeouts, waits,
          GUARD_MS);
    int status = -1;
    waitpid(pid, &status, 0);
    pid = -1;
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the client's connect failed (status %d)", status);
    printf("    %d waits until the client's endpoint was accepted\n", waits);
out:
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    rdmax_ep_destroy(ep);
    rdmax_listener_destroy(l);
    rdmax_ctx_destroy(c);
    tl_end();
}

/* A peer playing raw verbs on its own QP (a's, behind its rdmax endpoint): one signaled request, its
   completion polled straight from the QP's send CQ. Returns the completion's status, -1 on the guard. */
static int raw_post(rdmax_ep *a, enum ibv_wr_opcode op, const rdmax_mem *src, uint32_t len, uint64_t raddr,
                    uint32_t rkey, uint32_t imm)
{
    struct ibv_qp *qp = ep_qp(a);
    struct ibv_sge sge = {(uintptr_t)src->addr, len, src->lkey};
    struct ibv_send_wr wr, *bad;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = 0x7777;
    wr.opcode = op;
    wr.sg_list = &sge;
    wr.num_sge = len ? 1 : 0;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = imm;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    if (ibv_post_send(qp, &wr, &bad))
        return -2;
    int64_t t0 = now_ms();
    struct ibv_wc wc;
    while (now_ms() - t0 < GUARD_MS)
        if (ibv_poll_cq(qp->send_cq, 1, &wc) == 1 && wc.wr_id == 0x7777)
            return wc.status;
    return -1;
}

/* An exposed region is out of the peer's reach once the endpoint is closed, whoever closed it: a raw
   write through the peer's QP lands while connected (control), and is refused after the server's
   rdmax_ep_disconnect and after the peer's own goodbye (both landed: the closed QP stayed ready). The
   peer's context is never progressed, so its rdmax never reacts. */
static void case_closed_access(rdmax_ctx *c, rdmax_mem *mem)
{
    tl_begin("failure/a closed endpoint's exposed region: raw writes after either side's close are refused");
    rdmax_ctx *c2 = open_ctx(getenv("RDMAX_TEST_DEV0"));
    rdmax_mem *src = NULL;
    rdmax_ep *a = NULL, *b = NULL;
    REQUIRE(rdmax_mem_alloc(c2, 4096, RDMAX_ACCESS_LOCAL, &src) == RDMAX_OK, "mem_alloc");
    rdmax_ep_desc da, db;
    memset(&da, 0, sizeof da);
    memset(&db, 0, sizeof db);
    da.timeout = db.timeout = 14;  /* a refused write fails within 0.47 s */
    da.keepalive_ms = db.keepalive_ms = RDMAX_OFF;
    db.expose = mem;
    volatile unsigned char *r = (volatile unsigned char *)mem->addr;
    for (int round = 0; round < 2; round++) {
        const char *who = round == 0 ? "the server's disconnect" : "the peer's goodbye";
        REQUIRE(tl_pair(c2, c, &da, &db, &a, &b) == RDMAX_OK, "pair");
        const rdmax_rbuf *rb = rdmax_ep_query_remote(a, 0);
        REQUIRE(rb != NULL, "no region");
        memset(src->addr, 0x11 + round, 64);
        r[0] = 0;
        int st = raw_post(a, IBV_WR_RDMA_WRITE, src, 64, rb->addr, rb->rkey, 0);
        CHECK(st == IBV_WC_SUCCESS && r[0] == 0x11 + round, "control (%s): a write while connected: status %d, "
              "byte 0x%x", who, st, r[0]);
        if (round == 0) {
            CHECK_ST(rdmax_ep_disconnect(b, 5000), RDMAX_OK);
        } else {
            st = raw_post(a, IBV_WR_SEND_WITH_IMM, src, 0, 0, 0, RDMAX__LE32(RDMAX__IMM_GRANT | RDMAX__IMM_CLOSE));
            CHECK(st == IBV_WC_SUCCESS, "the goodbye: status %d", st);
            REQUIRE(wait_state(c, NULL, b) >= 0, "the goodbye never closed the server's endpoint");
        }
        CHECK(rdmax_ep_query_state(b) == RDMAX_EP_CLOSED, "server endpoint state %d", rdmax_ep_query_state(b));
        memset(src->addr, 0x99, 64);
        st = raw_post(a, IBV_WR_RDMA_WRITE, src, 64, rb->addr, rb->rkey, 0);
        CHECK(st != IBV_WC_SUCCESS && r[0] == 0x11 + round, "after %s: a raw write completed with status %d, "
              "byte 0x%x (0x99: it landed)", who, st, r[0]);
        rdmax_ep_destroy(a);
        rdmax_ep_destroy(b);
        a = b = NULL;
    }
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_mem_free(src);
    rdmax_ctx_destroy(c2);
    tl_end();
}

/* One raw write (read: a read into src) of 64 bytes at raddr/rkey through a's QP, as raw_post. */
static int raw_rw(rdmax_ep *a, int read, const rdmax_mem *src, uint64_t raddr, uint32_t rkey)
{
    return raw_post(a, read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE, src, 64, raddr, rkey, 0);
}

/* The region reg (64 bytes of `fill`) is untouched by a raw write or read through a's QP at rb: the
   request completes with an error, the region keeps its bytes, a read brings none of them. */
static void refused(rdmax_ep *a, const rdmax_mem *src, const rdmax_rbuf *rb, const rdmax_mem *reg, unsigned char fill,
                    int read, const char *when)
{
    memset(src->addr, read ? 0x00 : 0x99, 64);
    int st = raw_rw(a, read, src, rb->addr, rb->rkey);
    const unsigned char *r = (const unsigned char *)reg->addr, *l = (const unsigned char *)src->addr;
    CHECK(st != IBV_WC_SUCCESS, "%s: a raw %s completed with status %d (%s)", when, read ? "read" : "write", st,
          st >= 0 ? ibv_wc_status_str((enum ibv_wc_status)st) : "guard");
    CHECK(r[0] == fill && r[63] == fill, "%s: the region holds 0x%x 0x%x, not 0x%x (0x99: a write landed)", when,
          r[0], r[63], fill);
    CHECK(!read || (l[0] == 0 && l[63] == 0), "%s: a read brought 0x%x", when, l[0]);
}

/* Remote access scoped to the endpoint (issue 30): a peer written against raw verbs (its rdmax endpoint's
   QP, its context never progressed) writes and reads the region a server endpoint exposed. While
   exposed both land (control); after its own goodbye, after the server's disconnect, after the server's
   endpoint failed (the peer sent past its window) and after the server destroyed it, both are refused
   and the region is unchanged; and a second connection that was never exposed the region is refused
   with the first one's rkey, while the first still works. Each refused request costs the attacker its
   QP, so every attempt has a pair of its own. */
static void case_scoped_access(rdmax_ctx *c)
{
    tl_begin("failure/exposed memory is reachable only through its endpoint, and only until it closes, fails or goes");
    rdmax_ctx *c2 = open_ctx(getenv("RDMAX_TEST_DEV0"));
    rdmax_mem *src = NULL, *reg = NULL;
    rdmax_ep *a = NULL, *b = NULL, *a2 = NULL, *b2 = NULL;
    REQUIRE(rdmax_mem_alloc(c2, 4096, RDMAX_ACCESS_LOCAL, &src) == RDMAX_OK, "mem_alloc");
    REQUIRE(rdmax_mem_alloc(c, 4096, RDMAX_ACCESS_REMOTE_READ | RDMAX_ACCESS_REMOTE_WRITE, &reg) == RDMAX_OK, "mem_alloc");
    unsigned char *r = (unsigned char *)reg->addr;
    rdmax_ep_desc da, db;
    memset(&da, 0, sizeof da);
    memset(&db, 0, sizeof db);
    da.timeout = db.timeout = 14;  /* a write into a QP that left RTS fails within 0.47 s */
    da.keepalive_ms = db.keepalive_ms = RDMAX_OFF;
    db.rq_depth = 4;
    db.expose = reg;
    static const char *const what[] = {"the peer's goodbye", "the server's disconnect", "the server endpoint's failure",
                                       "the server's destroy"};
    for (int ev = 0; ev < 4; ev++)
        for (int read = 0; read < 2; read++) {
            unsigned char fill = (unsigned char)(0x20 + ev * 2 + read);
            REQUIRE(tl_pair(c2, c, &da, &db, &a, &b) == RDMAX_OK, "pair");
            const rdmax_rbuf *rb = rdmax_ep_query_remote(a, 0);
            REQUIRE(rb != NULL, "no region");
            rdmax_rbuf keep = *rb;
            /* control: while exposed, a write lands and a read brings it back */
            memset(src->addr, fill, 64);
            int st = raw_rw(a, 0, src, keep.addr, keep.rkey);
            CHECK(st == IBV_WC_SUCCESS && r[0] == fill && r[63] == fill,
                  "control (%s): a write while exposed: status %d, byte 0x%x", what[ev], st, r[0]);
            memset(src->addr, 0, 64);
            st = raw_rw(a, 1, src, keep.addr, keep.rkey);
            CHECK(st == IBV_WC_SUCCESS && ((unsigned char *)src->addr)[0] == fill,
                  "control (%s): a read while exposed: status %d, byte 0x%x", what[ev], st, ((unsigned char *)src->addr)[0]);
            if (ev == 0) {
                st = raw_post(a, IBV_WR_SEND_WITH_IMM, src, 0, 0, 0, RDMAX__LE32(RDMAX__IMM_GRANT | RDMAX__IMM_CLOSE));
                CHECK(st == IBV_WC_SUCCESS, "the goodbye: status %d", st);
                REQUIRE(wait_state(c, NULL, b) >= 0, "the goodbye never closed the server's endpoint");
            } else if (ev == 1) {
                CHECK_ST(rdmax_ep_disconnect(b, 5000), RDMAX_OK);
            } else if (ev == 2) {
                /* zero-length sends, never a credit back: found past its window within a few dozen */
                int n = 0;
                for (; n < 4000 && rdmax_ep_query_state(b) == RDMAX_EP_CONNECTED; n++) {
                    st = raw_post(a, IBV_WR_SEND_WITH_IMM, src, 0, 0, 0, 0);
                    REQUIRE(st == IBV_WC_SUCCESS, "send %d: status %d before the endpoint failed", n, st);
                    for (int k = 0; k < 8; k++)
                        rdmax_progress(c);
                }
                REQUIRE(rdmax_ep_query_state(b) == RDMAX_EP_ERROR, "the server endpoint did not fail after %d sends "
                        "(state %d)", n, rdmax_ep_query_state(b));
                if (read == 0)
                    printf("    failed with %s after %d sends\n", rdmax_status_str(rdmax_ep_query_error(b)), n);
            } else {
                rdmax_ep_destroy(b);
                b = NULL;
            }
            CHECK(!b || rdmax_ep_query_state(b) != RDMAX_EP_CONNECTED, "server endpoint still connected");
            refused(a, src, &keep, reg, fill, read, what[ev]);
            rdmax_ep_destroy(a);
            rdmax_ep_destroy(b);
            a = b = NULL;
        }
    /* (d): a second connection, never exposed the region, with the first one's rkey (a leaked key) */
    for (int read = 0; read < 2; read++) {
        unsigned char fill = (unsigned char)(0x40 + read);
        rdmax_ep_desc dn = db;
        dn.expose = NULL;
        REQUIRE(tl_pair(c2, c, &da, &db, &a, &b) == RDMAX_OK && tl_pair(c2, c, &da, &dn, &a2, &b2) == RDMAX_OK, "pairs");
        rdmax_rbuf keep = *rdmax_ep_query_remote(a, 0);
        memset(r, fill, 64);
        refused(a2, src, &keep, reg, fill, read, "a second connection with the first one's rkey");
        memset(src->addr, 0x55, 64);
        int st = raw_rw(a, 0, src, keep.addr, keep.rkey);
        CHECK(st == IBV_WC_SUCCESS && r[0] == 0x55, "control: the first connection's write: status %d, byte 0x%x",
              st, r[0]);
        rdmax_ep_destroy(a);
        rdmax_ep_destroy(b);
        rdmax_ep_destroy(a2);
        rdmax_ep_destroy(b2);
        a = b = a2 = b2 = NULL;
    }
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_ep_destroy(a2);
    rdmax_ep_destroy(b2);
    rdmax_mem_free(reg);
    rdmax_mem_free(src);
    rdmax_ctx_destroy(c2);
    tl_end();
}

/* What exposing costs a connection: endpoint pairs made and destroyed (tl_pair: create, records,
   connect), the server side exposing 0, 1 or 4 regions, the three counts taking turns, the best of 3
   rounds of 40 each; a pair held open keeps the receive pool alive between them. Printed only: a report
   (5 rounds of 100 took 8-12 s of make test). */
static void case_expose_cost(rdmax_ctx *c)
{
    tl_begin("failure/connect cost with 0, 1 and 4 exposed regions (reported)");
    rdmax_mem *regs[4] = {NULL, NULL, NULL, NULL};
    rdmax_ep *ha = NULL, *hb = NULL;
    for (int i = 0; i < 4; i++)
        REQUIRE(rdmax_mem_alloc(c, 65536, RDMAX_ACCESS_REMOTE_READ | RDMAX_ACCESS_REMOTE_WRITE, &regs[i]) == RDMAX_OK,
                "mem_alloc");
    REQUIRE(tl_pair(c, c, NULL, NULL, &ha, &hb) == RDMAX_OK, "pair");
    enum { N = 40, ROUNDS = 3 };
    static const uint32_t counts[] = {0, 1, 4};
    double best[3] = {1e30, 1e30, 1e30};
    for (int round = 0; round < ROUNDS; round++)
        for (int k = 0; k < 3; k++) {
            rdmax_ep_desc da, db;
            memset(&da, 0, sizeof da);
            memset(&db, 0, sizeof db);
            if (counts[k]) {
                db.expose = regs[0];
                db.expose_list = (const rdmax_mem *const *)&regs[1];
                db.expose_count = counts[k] - 1;
            }
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (int i = 0; i < N; i++) {
                rdmax_ep *a, *b;
                REQUIRE(tl_pair(c, c, &da, &db, &a, &b) == RDMAX_OK, "pair");
                rdmax_ep_destroy(a);
                rdmax_ep_destroy(b);
            }
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3) / N;
            best[k] = us < best[k] ? us : best[k];
        }
    for (int k = 0; k < 3; k++)
        printf("    expose_cost regions=%u pair_us=%.1f (both sides made, connected and destroyed; best of %d x %d)\n",
               counts[k], best[k], ROUNDS, N);
out:
    rdmax_ep_destroy(ha);
    rdmax_ep_destroy(hb);
    for (int i = 0; i < 4; i++)
        rdmax_mem_free(regs[i]);
    tl_end();
}

/* veth: cut the link under a stream of signaled puts for longer than the watchdog bound. */
static void case_linkcut(rdmax_ctx *c0, rdmax_ctx *c1, rdmax_mem *m0, rdmax_mem *m1, const char *netdev)
{
    tl_begin("failure/link cut %s under a put stream: every put completes once, no hang; reconnect", netdev);
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    rdmax_ep *a = NULL, *b = NULL;
    enum { N = 64 };
    rdmax_comp comp[N];
    memset(comp, 0, sizeof comp);
    char cmd[128];
    d.expose = m0;
    REQUIRE(pair(c0, c1, &d, &a, &b) == RDMAX_OK, "pair");
    rdmax_conn_record ib;
    rdmax_ep_query_record(b, &ib);
    snprintf(cmd, sizeof cmd, "ip link set %s down", netdev);
    REQUIRE(system(cmd) == 0, "%s failed", cmd);
    int64_t t0 = now_ms();
    int posted = 0;
    for (int i = 0; i < N; i++) {
        rdmax_status st = rdmax_put(a, m0->addr, 1024, m0, ib.regions[0].addr, ib.regions[0].rkey, &comp[i]);
        if (st != RDMAX_INPROGRESS)
            break;
        posted++;
    }
    int done = 0;
    while (done < posted && now_ms() - t0 < GUARD_MS) {
        rdmax_progress(c0);
        rdmax_progress(c1);
        done = 0;
        for (int i = 0; i < posted; i++)
            done += comp[i].done;
    }
    int64_t ms = now_ms() - t0;
    snprintf(cmd, sizeof cmd, "ip link set %s up", netdev);
    CHECK(system(cmd) == 0, "%s failed", cmd);
    REQUIRE(done == posted, "%d of %d puts completed within %d ms: a hang", done, posted, GUARD_MS);
    CHECK(rdmax_ep_query_error(a) != RDMAX_OK, "the endpoint did not fail");
    printf("    link cut: %d puts failed after %lld ms with %s\n", posted, (long long)ms,
           rdmax_status_str(rdmax_ep_query_error(a)));
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    a = b = NULL;
    /* The port events came in through the device's async fd; the same contexts connect again once the
       port is active. */
    CHECK(g_events[RDMAX_PROFILE_EVENT_PORT_DOWN] > 0, "no PORT_DOWN event was read");
    t0 = now_ms();
    while (g_events[RDMAX_PROFILE_EVENT_PORT_ACTIVE] == 0 && now_ms() - t0 < GUARD_MS) {
        rdmax_progress(c0);
        rdmax_progress(c1);
    }
    CHECK(g_events[RDMAX_PROFILE_EVENT_PORT_ACTIVE] > 0, "no PORT_ACTIVE event after the link came back");
    d.expose = m1;
    REQUIRE(pair(c0, c1, &d, &a, &b) == RDMAX_OK, "pair after the link is back");
    rdmax_ep_query_record(b, &ib);
    memset(m1->addr, 0, 4096);
    memset(m0->addr, 0xab, 4096);
    rdmax_comp cc;
    memset(&cc, 0, sizeof cc);
    REQUIRE(rdmax_put(a, m0->addr, 4096, m0, ib.regions[0].addr, ib.regions[0].rkey, &cc) == RDMAX_INPROGRESS, "put");
    t0 = now_ms();
    while (!cc.done && now_ms() - t0 < GUARD_MS) {
        rdmax_progress(c0);
        rdmax_progress(c1);
    }
    CHECK(cc.done && cc.status == RDMAX_OK, "put after reconnect: %s",
          cc.done ? rdmax_status_str(cc.status) : "never completed");
    CHECK(memcmp(m0->addr, m1->addr, 4096) == 0, "data after reconnect differs");
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    tl_end();
}

/* veth: a cut shorter than the RC retry time under a stream of checked puts: survived, nothing lost. The
   endpoints' retry time is 4.096 us x 2^18 x 7 = 7.5 s; the cut lasts CUT_MS. Holds on make test's 6.1
   kernel; 6.12's rxe moves the QPs of a port that goes down (here rxe0, whose veth peer went down) to the
   error state, so there a cut of any length fails the endpoints at once ("flushed ... the link is down"). */
static void case_short_cut(rdmax_ctx *c0, rdmax_ctx *c1, rdmax_mem *m0, rdmax_mem *m1, const char *netdev)
{
    enum { CUT_MS = 500, N = 64, LEN = 4096 };
    tl_begin("failure/link cut %s for %d ms (retry time 7.5 s) under a put stream: survived, every put lands",
             netdev, CUT_MS);
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.timeout = 18;
    d.retry_cnt = 6;
    d.keepalive_ms = RDMAX_OFF;
    rdmax_ep_desc db = d;
    db.expose = m1;
    rdmax_ep *a = NULL, *b = NULL;
    rdmax_comp comp[N];
    memset(comp, 0, sizeof comp);
    char cmd[128];
    REQUIRE(tl_pair(c0, c1, &d, &db, &a, &b) == RDMAX_OK, "pair");
    rdmax_conn_record ib;
    rdmax_ep_query_record(b, &ib);
    memset(m1->addr, 0, (size_t)N * LEN);
    for (size_t i = 0; i < (size_t)N * LEN; i++)
        ((uint8_t *)m0->addr)[i] = (uint8_t)(i * 13 + 7);
    snprintf(cmd, sizeof cmd, "ip link set %s down", netdev);
    REQUIRE(system(cmd) == 0, "%s failed", cmd);
    int posted = 0;
    for (int i = 0; i < N; i++) {
        rdmax_status st = rdmax_put(a, (char *)m0->addr + (size_t)i * LEN, LEN, m0,
                                    ib.regions[0].addr + (size_t)i * LEN, ib.regions[0].rkey, &comp[i]);
        if (st != RDMAX_INPROGRESS)
            break;
        posted++;
    }
    int64_t t0 = now_ms();
    while (now_ms() - t0 < CUT_MS) {
        rdmax_progress(c0);
        rdmax_progress(c1);
    }
    snprintf(cmd, sizeof cmd, "ip link set %s up", netdev);
    CHECK(system(cmd) == 0, "%s failed", cmd);
    int done = 0, ok = 0;
    while (done < posted && now_ms() - t0 < GUARD_MS) {
        rdmax_progress(c0);
        rdmax_progress(c1);
        done = ok = 0;
        for (int i = 0; i < posted; i++) {
            done += comp[i].done;
            ok += comp[i].done && comp[i].status == RDMAX_OK;
        }
    }
    REQUIRE(done == posted, "%d of %d puts completed within %d ms: a hang", done, posted, GUARD_MS);
    printf("    short cut: %d of %d puts succeeded, endpoint %s, %lld ms after the cut began\n", ok, posted,
           rdmax_status_str(rdmax_ep_query_error(a)), (long long)(now_ms() - t0));
    CHECK(ok == posted && rdmax_ep_query_error(a) == RDMAX_OK, "%d of %d puts failed: %s", posted - ok, posted,
          rdmax_status_str(rdmax_ep_query_error(a)));
    CHECK(!memcmp(m0->addr, m1->addr, (size_t)posted * LEN), "the data that landed differs");
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    tl_end();
}

/* >>devices (veth): the netdev taken down and up, and an rxe link deleted, under running endpoints.
   Two contexts (rxe0, rxe1), three pairs across them: a put stream rxe0 -> rxe1, a get stream of checked
   data by rxe1 from rxe0, an idle pair with keepalive. Each operation must complete exactly once, no get
   may succeed with wrong data, nothing may hang; what the contexts see (events, statuses) is printed. */

#define DV_RING 16
#define DV_CHUNK 4096u
#define DV_ALARM_S (4 * GUARD_MS / 1000) /* per case */
enum { DV_PUT, DV_GET, DV_IDLE0, DV_IDLE1, DV_NEPS }; /* the endpoints whose fate is reported */

struct dv_side {
    const char *dev;
    rdmax_ctx *c;
    rdmax_profile *p;
    rdmax_mem *m;
    int ev[RDMAX_PROFILE_EVENT__COUNT];
    uint64_t dev_detail;    /* ibv_event_type of the last DEVICE event */
};

struct dv_stream;
struct dv_op {
    rdmax_comp comp;
    struct dv_stream *s;
    int calls;
    uint32_t slot, off;     /* get: destination slot, source offset */
};

/* A stream never reuses an operation record, so a second completion of any of them would show. */
#define DV_MAXOPS 65536
struct dv_stream {
    rdmax_ep *ep;
    rdmax_mem *mem;         /* local memory: put source / get destination */
    uint64_t raddr;
    uint32_t rkey;
    int is_get, stop;
    uint32_t n, outstanding;
    struct dv_op *ops;      /* [DV_MAXOPS] */
    int ok, err, wrong, not_once;
    int by_status[64];      /* errors by -rdmax_status */
};

static struct dv_side g_dv[2];
static rdmax_ep *g_dv_ep[DV_NEPS];       /* put source, get requester, idle on rxe0, idle on rxe1 */
static rdmax_ep *g_dv_peer[DV_NEPS];     /* their peers */
static int64_t g_dv_fail[DV_NEPS], g_dv_peer_fail[DV_NEPS], g_dv_t0;
static struct dv_stream g_dv_st[2];
static const char *const dv_name[DV_NEPS] = {"put stream (rxe0)", "get stream (rxe1)", "idle (rxe0)", "idle (rxe1)"};
static const char *volatile g_dv_step = "";

static uint8_t dv_pat(uint64_t i)
{
    uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull;
    return (uint8_t)(x >> 29 ^ x >> 47);
}

static void dv_fill(void *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        ((uint8_t *)p)[i] = dv_pat(i);
}

/* Index of the first byte that differs from the pattern at offset off, or -1. */
static long dv_check(const void *p, size_t len, uint64_t off)
{
    for (size_t i = 0; i < len; i++)
        if (((const uint8_t *)p)[i] != dv_pat(off + i))
            return (long)i;
    return -1;
}

static void dv_on_event(rdmax_profile *p, rdmax_profile_event type, rdmax_ep *ep, uint64_t detail, void *user)
{
    (void)p, (void)ep;
    struct dv_side *s = (struct dv_side *)user;
    s->ev[type]++;
    if (type == RDMAX_PROFILE_EVENT_DEVICE)
        s->dev_detail = detail;
}

/* A hang guard that says where it hung (a verbs call can block in the kernel, out of reach of a loop). */
static void dv_alarm(int sig)
{
    (void)sig;
    char m[300];
    int n = snprintf(m, sizeof m, "FAIL %s: hung for %d s in: %s\n", tl_case, DV_ALARM_S, g_dv_step);
    if (write(1, m, (size_t)n) < 0)
        _exit(2);
    _exit(1);
}

static int dv_open(struct dv_side *s, const char *dev)
{
    memset(s, 0, sizeof *s);
    s->dev = dev;
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    d.device = dev;
    d.logger.func = quiet_log;
    if (rdmax_ctx_create(&d, &s->c) != RDMAX_OK)
        return 0;
    if (rdmax_profile_create(s->c, &s->p) == RDMAX_OK)
        for (int t = 0; t < RDMAX_PROFILE_EVENT__COUNT; t++)
            rdmax_profile_reg_event(s->p, (rdmax_profile_event)t, dv_on_event, s);
    if (rdmax_mem_alloc(s->c, 1 << 20, RDMAX_ACCESS_REMOTE_READ | RDMAX_ACCESS_REMOTE_WRITE, &s->m) != RDMAX_OK)
        return 0;
    dv_fill(s->m->addr, 64 << 10);
    return 1;
}

static void dv_close(struct dv_side *s)
{
    if (!s->c)
        return;
    rdmax_mem_free(s->m);
    if (s->p)
        rdmax_profile_destroy(s->p);
    rdmax_ctx_destroy(s->c);
    s->c = NULL;
}

static void dv_on_op(rdmax_comp *c, rdmax_status st)
{
    struct dv_op *o = (struct dv_op *)c->user;
    struct dv_stream *s = o->s;
    if (o->calls++)
        return;             /* a second completion: counted when the stream is checked */
    s->outstanding--;
    if (st != RDMAX_OK) {
        s->err++;
        s->by_status[-st & 63]++;
        return;
    }
    s->ok++;
    /* the destination slot is reused only after this (completions come in order) */
    if (s->is_get && dv_check((char *)s->mem->addr + (512u << 10) + o->slot * DV_CHUNK, DV_CHUNK, o->off) >= 0)
        s->wrong++;
}

static void dv_post(struct dv_stream *s)
{
    if (s->n == DV_MAXOPS) {
        s->stop = 1;
        return;
    }
    struct dv_op *o = &s->ops[s->n];
    memset(o, 0, sizeof *o);
    o->comp.cb = dv_on_op;
    o->comp.user = o;
    o->s = s;
    o->slot = s->n % DV_RING;
    char *base = (char *)s->mem->addr;
    rdmax_status st;
    if (s->is_get) {
        o->off = (s->n * DV_CHUNK) % (64u << 10);
        char *dst = base + (512u << 10) + o->slot * DV_CHUNK;
        memset(dst, 0xee, DV_CHUNK); /* a get that lands nothing cannot pass as one that did */
        st = rdmax_get(s->ep, dst, DV_CHUNK, s->mem, s->raddr + o->off, s->rkey, &o->comp);
    } else {
        st = rdmax_put(s->ep, base + (s->n * DV_CHUNK) % (64u << 10), DV_CHUNK, s->mem,
                       s->raddr + (256u << 10) + (s->n % 64) * DV_CHUNK, s->rkey, &o->comp);
    }
    if (st == RDMAX_INPROGRESS) {
        s->n++;
        s->outstanding++;
    } else if (st != RDMAX_ERR_NO_RESOURCE) {
        s->stop = 1;        /* refused: the endpoint failed (or closed) */
    }
}

/* Progress both contexts, keep the streams full, note when endpoints leave RDMAX_EP_CONNECTED; until
   ms passed or done() holds. */
static void dv_drive(int64_t ms, int (*done)(void))
{
    int64_t t0 = now_ms();
    while (now_ms() - t0 < ms && !(done && done())) {
        for (int k = 0; k < 2; k++)
            if (g_dv[k].c)
                rdmax_progress(g_dv[k].c);
        for (int k = 0; k < 2; k++) {
            struct dv_stream *s = &g_dv_st[k];
            while (s->ep && !s->stop && s->outstanding < DV_RING) {
                uint32_t n = s->n;
                dv_post(s);
                if (s->n == n)
                    break;  /* no resources now */
            }
        }
        int64_t now = now_ms() - g_dv_t0;
        for (int e = 0; e < DV_NEPS; e++) {
            if (g_dv_ep[e] && !g_dv_fail[e] && rdmax_ep_query_state(g_dv_ep[e]) != RDMAX_EP_CONNECTED)
                g_dv_fail[e] = now > 0 ? now : 1;
            if (g_dv_peer[e] && !g_dv_peer_fail[e] && rdmax_ep_query_state(g_dv_peer[e]) != RDMAX_EP_CONNECTED)
                g_dv_peer_fail[e] = now > 0 ? now : 1;
        }
    }
}

static int dv_all_failed(void)
{
    for (int e = 0; e < DV_NEPS; e++)
        if ((g_dv_ep[e] && !g_dv_fail[e]) || (g_dv_peer[e] && !g_dv_peer_fail[e]))
            return 0;
    return 1;
}

static int dv_side0_failed(void)
{
    return g_dv_fail[DV_PUT] && g_dv_peer_fail[DV_GET] && g_dv_fail[DV_IDLE0];
}

static int dv_settled(void)
{
    return !g_dv_st[0].outstanding && !g_dv_st[1].outstanding;
}

/* The three pairs (rxe0 side listed first), the streams started. */
static int dv_setup(void)
{
    memset(g_dv_ep, 0, sizeof g_dv_ep);
    memset(g_dv_peer, 0, sizeof g_dv_peer);
    memset(g_dv_fail, 0, sizeof g_dv_fail);
    memset(g_dv_peer_fail, 0, sizeof g_dv_peer_fail);
    for (int k = 0; k < 2; k++) {
        struct dv_op *ops = g_dv_st[k].ops;
        memset(&g_dv_st[k], 0, sizeof g_dv_st[k]);
        g_dv_st[k].ops = ops ? ops : (struct dv_op *)calloc(DV_MAXOPS, sizeof *ops);
        if (!g_dv_st[k].ops)
            return 0;
    }
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.keepalive_ms = 1000;
    rdmax_ctx *c0 = g_dv[0].c, *c1 = g_dv[1].c;
    rdmax_ep_desc d0 = d, d1 = d;
    d0.expose = g_dv[0].m;
    d1.expose = g_dv[1].m;
    if (tl_pair(c0, c1, &d0, &d1, &g_dv_ep[DV_PUT], &g_dv_peer[DV_PUT]) != RDMAX_OK ||
        tl_pair(c1, c0, &d1, &d0, &g_dv_ep[DV_GET], &g_dv_peer[DV_GET]) != RDMAX_OK ||
        tl_pair(c0, c1, &d0, &d1, &g_dv_ep[DV_IDLE0], &g_dv_peer[DV_IDLE0]) != RDMAX_OK)
        return 0;
    g_dv_ep[DV_IDLE1] = g_dv_peer[DV_IDLE0]; /* the idle pair: each end is reported on its own */
    g_dv_peer[DV_IDLE0] = NULL;
    rdmax_conn_record i;
    struct dv_stream *s = &g_dv_st[0];
    rdmax_ep_query_record(g_dv_peer[DV_PUT], &i);
    s->ep = g_dv_ep[DV_PUT], s->mem = g_dv[0].m, s->raddr = i.regions[0].addr, s->rkey = i.regions[0].rkey;
    s = &g_dv_st[1];
    rdmax_ep_query_record(g_dv_peer[DV_GET], &i);
    s->ep = g_dv_ep[DV_GET], s->mem = g_dv[1].m, s->raddr = i.regions[0].addr, s->rkey = i.regions[0].rkey, s->is_get = 1;
    g_dv_t0 = now_ms();
    return 1;
}

static void dv_teardown(void)
{
    for (int e = 0; e < DV_NEPS; e++) {
        rdmax_ep_destroy(g_dv_peer[e]);
        rdmax_ep_destroy(g_dv_ep[e]);
        g_dv_ep[e] = g_dv_peer[e] = NULL;
    }
    g_dv_st[0].ep = g_dv_st[1].ep = NULL;
}

/* What happened, for the closing note: events per context and each endpoint's fate. */
static void dv_report(const char *what)
{
    for (int k = 0; k < 2; k++) {
        struct dv_side *s = &g_dv[k];
        printf("    %s: %s events: port_down %d, port_active %d, device %d%s%s, ep_error %d\n", what, s->dev,
               s->ev[RDMAX_PROFILE_EVENT_PORT_DOWN], s->ev[RDMAX_PROFILE_EVENT_PORT_ACTIVE],
               s->ev[RDMAX_PROFILE_EVENT_DEVICE], s->ev[RDMAX_PROFILE_EVENT_DEVICE] ? " (last: " : "",
               s->ev[RDMAX_PROFILE_EVENT_DEVICE] ? ibv_event_type_str((enum ibv_event_type)s->dev_detail) : "",
               s->ev[RDMAX_PROFILE_EVENT_EP_ERROR]);
    }
    for (int e = 0; e < DV_NEPS; e++) {
        rdmax_ep *x = g_dv_ep[e];
        if (!x)
            continue;
        printf("    %s: endpoint %s: %s after %lld ms (%s)", what, dv_name[e],
               rdmax_ep_query_state(x) == RDMAX_EP_CONNECTED ? "still connected" : "failed",
               (long long)g_dv_fail[e], rdmax_status_str(rdmax_ep_query_error(x)));
        if (g_dv_peer[e])
            printf("; its peer: %s after %lld ms (%s)", rdmax_ep_query_state(g_dv_peer[e]) == RDMAX_EP_CONNECTED ?
                   "still connected" : "failed", (long long)g_dv_peer_fail[e],
                   rdmax_status_str(rdmax_ep_query_error(g_dv_peer[e])));
        printf("\n");
    }
    for (int k = 0; k < 2; k++) {
        struct dv_stream *s = &g_dv_st[k];
        printf("    %s: %s: %u posted, %d ok, %d failed", what, k ? "get stream" : "put stream", s->n, s->ok, s->err);
        for (int i = 1; i < 64; i++)
            if (s->by_status[i])
                printf(" (%d %s)", s->by_status[i], rdmax_status_str((rdmax_status)-i));
        printf(", %d not completed exactly once, %d with wrong data\n", s->not_once, s->wrong);
    }
}

/* Count the operations of stream s that did not complete exactly once. */
static void dv_count_once(struct dv_stream *s)
{
    s->not_once = 0;
    for (uint32_t i = 0; i < s->n; i++)
        s->not_once += s->ops[i].calls != 1;
}

/* Every stream operation completed exactly once, and no get succeeded with wrong data. */
static void dv_check_streams(void)
{
    dv_drive(GUARD_MS, dv_settled);
    CHECK(dv_settled(), "operations outstanding %d ms after the endpoints failed", GUARD_MS);
    for (int k = 0; k < 2; k++) {
        struct dv_stream *s = &g_dv_st[k];
        dv_count_once(s);
        CHECK(!s->not_once, "%s: %d operations did not complete exactly once", k ? "gets" : "puts", s->not_once);
        CHECK(!s->wrong, "%s: %d reported success with wrong data", k ? "gets" : "puts", s->wrong);
        CHECK(s->ok > 0, "%s: nothing succeeded before the fault: the case proves nothing", k ? "gets" : "puts");
        CHECK(s->err > 0, "%s: nothing failed: the fault came after the stream", k ? "gets" : "puts");
    }
}

/* A fresh pair between the two contexts (or a loopback pair on c0 alone) moves a checked 4 KiB put. */
static int dv_fresh_pair(rdmax_ctx *c0, rdmax_ctx *c1, rdmax_mem *m0, rdmax_mem *m1)
{
    rdmax_ep_desc d0, d1;
    memset(&d0, 0, sizeof d0);
    d0.expose = m0;
    d1 = d0;
    d1.expose = m1;
    rdmax_ep *a = NULL, *b = NULL;
    rdmax_comp cc;
    memset(&cc, 0, sizeof cc);
    int ok = 0;
    if (tl_pair(c0, c1, &d0, &d1, &a, &b) == RDMAX_OK) {
        rdmax_conn_record ib;
        rdmax_ep_query_record(b, &ib);
        char *dst = (char *)m1->addr + (768u << 10);
        memset(dst, 0, DV_CHUNK);
        if (rdmax_put(a, m0->addr, DV_CHUNK, m0, ib.regions[0].addr + (768u << 10), ib.regions[0].rkey, &cc) == RDMAX_INPROGRESS) {
            int64_t t0 = now_ms();
            while (!cc.done && now_ms() - t0 < GUARD_MS) {
                rdmax_progress(c0);
                if (c1 != c0)
                    rdmax_progress(c1);
            }
            ok = cc.done && cc.status == RDMAX_OK && dv_check(dst, DV_CHUNK, 0) < 0;
        }
    }
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    return ok;
}

static int dv_port_active(void)
{
    return g_dv[1].ev[RDMAX_PROFILE_EVENT_PORT_ACTIVE] > 0;
}

/* The netdev under rxe1 goes down (veth1: rxe0's veth0 loses its carrier too) and comes back. */
static void case_dev_portdown(void)
{
    tl_begin("failure/devices: veth1 down and up under running endpoints: all fail, each operation completes once, "
             "port events, a new pair works");
    g_dv_step = "setup";
    REQUIRE(dv_setup(), "pairs");
    dv_drive(300, NULL);
    g_dv_step = "ip link set veth1 down";
    REQUIRE(system("ip link set veth1 down") == 0, "ip link set veth1 down failed");
    g_dv_t0 = now_ms();
    g_dv_step = "endpoints on a down link";
    dv_drive(GUARD_MS, dv_all_failed);
    CHECK(dv_all_failed(), "endpoints still connected %d ms after the link went down", GUARD_MS);
    dv_check_streams();
    CHECK(g_dv[1].ev[RDMAX_PROFILE_EVENT_PORT_DOWN] > 0, "no PORT_DOWN event on rxe1");
    g_dv_step = "ip link set veth1 up";
    CHECK(system("ip link set veth1 up") == 0, "ip link set veth1 up failed");
    dv_drive(GUARD_MS, dv_port_active);
    CHECK(dv_port_active(), "no PORT_ACTIVE event on rxe1 after the link came back");
    dv_report("port down");
    dv_teardown();
    g_dv_step = "a fresh pair after the port came back";
    CHECK(dv_fresh_pair(g_dv[0].c, g_dv[1].c, g_dv[0].m, g_dv[1].m), "a fresh pair across the link failed");
out:
    dv_teardown();
    g_dv_step = "";
    tl_end();
}

/* rdma link delete rxe1 while endpoints run on it. rxe cannot take a device away from a process that has
   it open (no disassociate): the deletion waits in the kernel until the process closes the device, and
   the process is told nothing. So: run the command in the background, watch for a while, then destroy
   rxe1's context (operations still in flight there complete with RDMAX_ERR_CANCELED), after which the
   deletion must finish; rxe0's endpoints then lose their peers and fail; rxe0's context still works.
   Whatever the kernel does (a DEVICE event, failed endpoints, a deletion that does not wait), the
   invariants are the same and the report says what happened. */
static void case_dev_linkdel(void)
{
    tl_begin("failure/devices: rdma link delete rxe1 under running endpoints: no crash or hang, each operation "
             "completes once, rxe0 works");
    pid_t pid = -1;
    int st = -1, waited = 0;
    int64_t t_gone = 0;
    g_dv_step = "setup";
    REQUIRE(dv_setup(), "pairs");
    dv_drive(300, NULL);
    char *argv[] = {(char *)"rdma", (char *)"link", (char *)"delete", (char *)"rxe1", NULL};
    fflush(stdout);
    REQUIRE(posix_spawnp(&pid, "rdma", NULL, NULL, argv, environ) == 0, "cannot run rdma link delete rxe1");
    g_dv_t0 = now_ms();
    g_dv_step = "watching while rdma link delete rxe1 runs";
    int64_t t0 = now_ms();
    while (now_ms() - t0 < 3000 && !dv_all_failed()) {
        dv_drive(100, NULL);
        if (!t_gone && waitpid(pid, &st, WNOHANG) == pid)
            t_gone = now_ms() - g_dv_t0, waited = 1;
    }
    printf("    link delete: after %lld ms the deletion %s\n", (long long)(now_ms() - g_dv_t0),
           waited ? "had finished" : "still waits (for this process to close rxe1)");
    dv_report("link delete, rxe1 still open");
    /* rxe1's side goes: its endpoints (with operations in flight), then the context */
    g_dv_step = "destroying rxe1's endpoints";
    rdmax_ep **on1[] = {&g_dv_peer[DV_PUT], &g_dv_ep[DV_GET], &g_dv_ep[DV_IDLE1]};
    for (int i = 0; i < 3; i++) {
        rdmax_ep_destroy(*on1[i]);
        *on1[i] = NULL;
    }
    g_dv_st[1].ep = NULL;
    dv_count_once(&g_dv_st[1]);
    CHECK(!g_dv_st[1].not_once && !g_dv_st[1].wrong, "gets on rxe1: %d not completed exactly once, %d wrong data",
          g_dv_st[1].not_once, g_dv_st[1].wrong);
    g_dv_step = "rdmax_ctx_destroy of rxe1";
    dv_close(&g_dv[1]);
    g_dv_step = "waiting for rdma link delete rxe1 after the context was destroyed";
    t0 = now_ms();
    while (!waited && now_ms() - t0 < GUARD_MS) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            t_gone = now_ms() - g_dv_t0, waited = 1;
        else
            dv_drive(20, NULL);
    }
    REQUIRE(waited, "rdma link delete rxe1 still runs %d ms after rxe1's context was destroyed", GUARD_MS);
    pid = -1;
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rdma link delete rxe1 failed (status 0x%x)", st);
    printf("    link delete: the deletion finished %lld ms after it started\n", (long long)t_gone);
    /* rxe0's endpoints have lost their peers */
    g_dv_step = "rxe0's endpoints after their peers' device went";
    dv_drive(GUARD_MS, dv_side0_failed);
    CHECK(dv_side0_failed(), "rxe0 endpoints still connected %d ms after rxe1 was deleted", GUARD_MS);
    dv_drive(GUARD_MS, dv_settled);
    dv_count_once(&g_dv_st[0]);
    CHECK(dv_settled(), "puts on rxe0 outstanding %d ms after rxe1 was deleted", GUARD_MS);
    CHECK(!g_dv_st[0].not_once, "puts: %d did not complete exactly once", g_dv_st[0].not_once);
    CHECK(g_dv_st[0].ok > 0 && g_dv_st[1].ok > 0, "a stream moved nothing before the deletion: the case proves "
          "nothing");
    dv_report("link delete, after");
    g_dv_step = "a loopback pair on rxe0";
    CHECK(dv_fresh_pair(g_dv[0].c, g_dv[0].c, g_dv[0].m, g_dv[0].m), "a loopback pair on rxe0 failed");
out:
    dv_teardown();
    if (pid > 0) {
        dv_close(&g_dv[1]);
        waitpid(pid, NULL, 0);
    }
    g_dv_step = "";
    tl_end();
}

/* Put rxe1 back as tests/vm/run made it, for the tests that run after this one. */
static int dv_readd_rxe1(void)
{
    if (system("rdma link show rxe1/1 >/dev/null 2>&1") == 0)
        return 1;
    if (system("rdma link add rxe1 type rxe netdev veth1") != 0)
        return 0;
    int64_t t0 = now_ms();
    while (now_ms() - t0 < GUARD_MS) {
        char st[32] = "";
        FILE *f = fopen("/sys/class/infiniband/rxe1/ports/1/state", "r");
        if (f) {
            if (!fgets(st, sizeof st, f))
                st[0] = 0;
            fclose(f);
        }
        if (strstr(st, "ACTIVE"))
            return 1;
        usleep(50000);
    }
    return 0;
}

static int devices_mode(void)
{
    signal(SIGALRM, dv_alarm);
    alarm(DV_ALARM_S);
    if (!dv_open(&g_dv[0], "rxe0") || !dv_open(&g_dv[1], "rxe1")) {
        printf("FAIL failure/devices/setup: cannot open rxe0 and rxe1 (needs the veth topology)\n");
        return 1;
    }
    case_dev_portdown();
    alarm(DV_ALARM_S);
    /* fresh contexts: what the first case's events left behind does not count in the second */
    dv_close(&g_dv[1]);
    dv_close(&g_dv[0]);
    if (!dv_open(&g_dv[0], "rxe0") || !dv_open(&g_dv[1], "rxe1")) {
        printf("FAIL failure/devices/setup: cannot open rxe0 and rxe1 again\n");
        return 1;
    }
    case_dev_linkdel();
    alarm(DV_ALARM_S);
    g_dv_step = "closing the contexts";
    dv_close(&g_dv[1]);
    dv_close(&g_dv[0]);
    alarm(0);
    tl_begin("failure/devices: rxe1 added back for the tests that follow");
    CHECK(dv_readd_rxe1(), "rdma link add rxe1 type rxe netdev veth1: port not active");
    tl_end();
    return tl_failed_total != 0;
}

/* A server process: listens, writes its port to `out`, accepts one client and serves it until killed. */
static pid_t reconnect_server(int out)
{
    pid_t pid = fork();
    if (pid)
        return pid;
    rdmax_ctx *c = open_ctx(getenv("RDMAX_TEST_DEV0"));
    rdmax_listener *l = NULL;
    rdmax_ep *ep = NULL;
    if (rdmax_listener_create(c, "127.0.0.1", 0, &l) != RDMAX_OK)
        _exit(2);
    uint16_t port = rdmax_listener_query_port(l);
    if (write(out, &port, sizeof port) != (ssize_t)sizeof port || rdmax_accept(l, NULL, &ep, GUARD_MS) != RDMAX_OK)
        _exit(3);
    for (;;)
        rdmax_progress(c);
}

/* Reconnect: a peer process killed under a stream of sends (some waiting in the pending queue, buffers
   registered through the cache), restarted, and the same context connects to it again, ten times. Each
   round every operation completes once; what the dead endpoints held (the kernel's QPs and MRs of this
   process, file descriptors, cached registrations in use) is the same after the last round as after the
   first. */
static void case_reconnect(rdmax_ctx *c)
{
    enum { ROUNDS = 10, N = 256, LEN = 8192 };
    tl_begin("failure/reconnect to a restarted peer %d times: every operation completes once, nothing leaks",
             ROUNDS);
    static rdmax_comp comp[N];
    char *buf = (char *)malloc((size_t)N * LEN);
    int first[4] = {0}, last[4] = {0}, fail_ms_max = 0;
    REQUIRE(buf != NULL, "malloc");
    memset(buf, 0x5c, (size_t)N * LEN);
    for (int round = 0; round < ROUNDS; round++) {
        int pfd[2];
        REQUIRE(pipe(pfd) == 0, "pipe");
        pid_t pid = reconnect_server(pfd[1]);
        close(pfd[1]);
        uint16_t port = 0;
        REQUIRE(read(pfd[0], &port, sizeof port) == (ssize_t)sizeof port, "round %d: the server did not start",
                round);
        close(pfd[0]);
        rdmax_ep *ep = NULL;
        rdmax_ep_desc d;
        memset(&d, 0, sizeof d);
        d.keepalive_ms = 500;  /* the kill may find nothing in flight: keepalive finds the dead peer then */
        d.timeout = 14;        /* within 0.47 s of the RC retry time */
        REQUIRE(rdmax_connect(c, "127.0.0.1", port, &d, &ep, GUARD_MS) == RDMAX_OK, "round %d: connect", round);
        memset(comp, 0, sizeof comp);
        int posted = 0;
        for (int i = 0; i < N; i++) {  /* more than the send queue and the credits hold: some wait */
            rdmax_status st = rdmax_send(ep, buf + (size_t)i * LEN, LEN, NULL, &comp[i]);
            if (st != RDMAX_INPROGRESS && st != RDMAX_OK)
                break;
            posted++;
        }
        for (int i = 0; i < 100; i++)
            rdmax_progress(c);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        int64_t t0 = now_ms();
        int done = 0;
        while (now_ms() - t0 < GUARD_MS) {
            rdmax_progress(c);
            done = 0;
            for (int i = 0; i < posted; i++)
                done += comp[i].done;
            if (done == posted && rdmax_ep_query_state(ep) != RDMAX_EP_CONNECTED)
                break;
        }
        int ms = (int)(now_ms() - t0);
        fail_ms_max = ms > fail_ms_max ? ms : fail_ms_max;
        CHECK(done == posted, "round %d: %d of %d sends completed within %d ms", round, done, posted, GUARD_MS);
        CHECK(rdmax_ep_query_state(ep) == RDMAX_EP_ERROR, "round %d: the endpoint did not fail", round);
        rdmax_ep_destroy(ep);
        for (int i = 0; i < 100; i++)
            rdmax_progress(c);  /* late completions of the dead endpoint are dropped, not kept */
        rdmax_rcache_stats rs;
        memset(&rs, 0, sizeof rs);
        if (rdmax_ctx_query_rcache(c))
            rdmax_rcache_query_stats(rdmax_ctx_query_rcache(c), &rs);
        int *now = round == 0 ? first : last;
        now[0] = tl_count_rdma("qp");
        now[1] = tl_count_rdma("mr");
        now[2] = tl_count_fds();
        now[3] = (int)rs.regions;
        if (tl_case_failed)
            break;
    }
    REQUIRE(first[0] >= 0 && first[1] >= 0, "cannot read the kernel's resource lists (rdma resource show)");
    const char *name[4] = {"QPs", "MRs", "file descriptors", "registrations"};
    for (int k = 0; k < 4; k++)
        CHECK(last[k] == first[k], "%s: %d after round 1, %d after round %d", name[k], first[k], last[k], ROUNDS);
    printf("    reconnect: %d rounds, QPs %d, MRs %d, fds %d, registrations %d after the first and the last; a "
           "killed peer failed the endpoint within %d ms\n", ROUNDS, last[0], last[1], last[2], last[3],
           fail_ms_max);
out:
    free(buf);
    tl_end();
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "loopback";
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(mode, "devices"))
        return devices_mode();
    const char *d0 = getenv("RDMAX_TEST_DEV0"), *d1 = getenv("RDMAX_TEST_DEV1");
    rdmax_ctx *c = open_ctx(d0);
    rdmax_mem *mem = NULL;
    if (rdmax_mem_alloc(c, 1 << 20, RDMAX_ACCESS_REMOTE_READ | RDMAX_ACCESS_REMOTE_WRITE, &mem) != RDMAX_OK) {
        printf("FAIL setup: rdmax_mem_alloc\n");
        return 1;
    }
    if (!strcmp(mode, "linkcut")) {
        if (!d1) {
            printf("FAIL linkcut/setup: RDMAX_TEST_DEV1 is not set (needs the veth topology)\n");
            return 1;
        }
        rdmax_ctx *c1 = open_ctx(d1);
        rdmax_mem *m1 = NULL;
        if (rdmax_mem_alloc(c1, 1 << 20, RDMAX_ACCESS_REMOTE_READ | RDMAX_ACCESS_REMOTE_WRITE, &m1) != RDMAX_OK) {
            printf("FAIL setup: rdmax_mem_alloc\n");
            return 1;
        }
        case_short_cut(c, c1, mem, m1, "veth1");
        case_linkcut(c, c1, mem, m1, "veth1");
        rdmax_mem_free(m1);
        rdmax_ctx_destroy(c1);
    } else {
        case_forced_error(c, mem);
        case_flush_after_forced_error(c, mem);
        case_responder_side(c, mem);
        case_watchdog(c, mem);
        case_keepalive(c, mem);
        case_keepalive_pending(c, mem);
        case_health_clock(c, mem);
        case_disconnect(c, mem);
        case_state_cb(c, mem);
        case_state_cb_in_call(c, mem);
        case_destroy_in_call(c);
        case_closed_access(c, mem);
        case_scoped_access(c);
        case_expose_cost(c);
        case_wait_listener();
        case_reconnect(c);
    }
    rdmax_mem_free(mem);
    rdmax_ctx_destroy(c);
    return tl_failed_total != 0;
}
