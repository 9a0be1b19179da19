/* Failures an endpoint must not outlive in silence, on a real device (rxe in the test VM):
   - a QP moved to the error state behind rdmax's back (what an asynchronous QP-fatal looks like);
   - the responder side of a protection error the peer caused: a flush over its operations never succeeds;
   - a requester that never hears back (ack timeout of hours): the watchdog fails it;
   - an idle endpoint whose peer vanished: keepalive finds it, and only with keepalive on;
   - graceful disconnect: the peer sees RDMAX_EP_CLOSED and says so;
   - (veth) a link cut during a put stream: every operation completes once, no hang; reconnect works.
   Usage: failure_test loopback | linkcut (linkcut needs the veth topology: two devices, veth0/veth1). */
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#include "../rdmax.h"
#include "testlib.h"

#include <time.h>

#define GUARD_MS 60000 /* a hang guard, not a timing assertion: the expected times are a few seconds */

static int g_events[RDMAX_PROFILE_EVENT__COUNT];
static uint64_t g_detail_sum[RDMAX_PROFILE_EVENT__COUNT];

static void on_event(rdmax_profile *p, rdmax_profile_event type, rdmax_ep *ep, uint64_t detail, void *user)
{
    (void)p, (void)ep, (void)user;
    g_events[type]++;
    g_detail_sum[type] += detail;
}

static void quiet_log(rdmax_log_level lvl, const char *msg, void *user)
{
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
    if (rdmax_profile_open(c, &p) == RDMAX_OK)
        for (int t = 0; t < RDMAX_PROFILE_EVENT__COUNT; t++)
            rdmax_profile_reg_event(p, (rdmax_profile_event)t, on_event, NULL);
    return c;
}

static rdmax_status pair2(rdmax_ctx *ca, rdmax_ctx *cb, const rdmax_ep_desc *da, const rdmax_ep_desc *db,
                          rdmax_ep **a, rdmax_ep **b)
{
    rdmax_status st = rdmax_ep_create(ca, da, a);
    if (st == RDMAX_OK)
        st = rdmax_ep_create(cb, db, b);
    if (st != RDMAX_OK)
        return st;
    rdmax_conn_info ia, ib;
    rdmax_ep_local_info(*a, &ia);
    rdmax_ep_local_info(*b, &ib);
    if ((st = rdmax_ep_connect_info(*a, &ib)) != RDMAX_OK)
        return st;
    return rdmax_ep_connect_info(*b, &ia);
}

static rdmax_status pair(rdmax_ctx *ca, rdmax_ctx *cb, const rdmax_ep_desc *d, rdmax_ep **a, rdmax_ep **b)
{
    return pair2(ca, cb, d, d, a, b);
}

/* Progress until ep leaves RDMAX_EP_CONNECTED or the guard passes; returns the ms it took, -1 on guard. */
static int64_t wait_state(rdmax_ctx *c, rdmax_ctx *c2, rdmax_ep *ep)
{
    int64_t t0 = now_ms();
    while (rdmax_ep_get_state(ep) == RDMAX_EP_CONNECTED) {
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
    ibv_modify_qp(rdmax_ep_qp(ep), &a, IBV_QP_STATE);
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
    CHECK(rdmax_ep_get_state(a) == RDMAX_EP_ERROR, "state %d", rdmax_ep_get_state(a));
    CHECK_ST(rdmax_ep_error(a), RDMAX_ERR_FLUSHED);
    CHECK_ST(rdmax_put(a, "x", 1, NULL, 0, 0, NULL), RDMAX_ERR_ENDPOINT);
    CHECK(g_events[RDMAX_PROFILE_EVENT_EP_ERROR] == before + 1, "%d EP_ERROR events, expected 1",
          g_events[RDMAX_PROFILE_EVENT_EP_ERROR] - before);
    CHECK(rdmax_ep_get_state(b) == RDMAX_EP_CONNECTED, "the peer failed too");
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
    rdmax_conn_info ib;
    rdmax_ep_local_info(b, &ib);
    rb = ib.buf;
    memset(mem->addr, 0, 64);
    force_qp_error(a);
    /* rdmax has not polled yet: the put is accepted, unsignaled, and the device flushes it */
    rdmax_status st = rdmax_put(a, "payload", 7, NULL, rb.addr, rb.rkey, NULL);
    CHECK(st == RDMAX_OK || st == RDMAX_ERR_IO, "put: %s", rdmax_status_str(st));
    st = rdmax_ep_flush(a, 10000);
    CHECK(st != RDMAX_OK, "flush reported success over a flushed put");
    CHECK(rdmax_ep_error(a) != RDMAX_OK, "rdmax_ep_error is OK");
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
    rdmax_conn_info i1, i2;
    rdmax_ep_local_info(a1, &i1);
    rdmax_ep_local_info(a2, &i2);
    rdmax_comp comp;
    memset(&comp, 0, sizeof comp);
    static char src[4096];
    REQUIRE(rdmax_put(a1, src, sizeof src, NULL, i2.buf.addr, i2.buf.rkey ^ 0x5a5a00u, &comp) == RDMAX_INPROGRESS,
            "bad-key put not posted");
    int64_t t0 = now_ms();
    while (!comp.done && now_ms() - t0 < GUARD_MS)
        rdmax_progress(c);
    REQUIRE(comp.done, "bad-key put never completed");
    CHECK(comp.status != RDMAX_OK, "bad-key put succeeded");
    memset((char *)mem->addr + 128, 0, 64);
    rdmax_status st = rdmax_put(a2, "payload", 7, NULL, i1.buf.addr + 128, i1.buf.rkey, NULL);
    if (st == RDMAX_OK)
        st = rdmax_ep_flush(a2, 10000);
    if (memcmp((char *)mem->addr + 128, "payload", 7) == 0) {
        CHECK(st == RDMAX_OK, "the data arrived but the flush reported %s", rdmax_status_str(st));
        printf("    note: this kernel's rxe left the responder QP working\n");
    } else {
        CHECK(st != RDMAX_OK, "flush reported success although the data was never written");
        CHECK(rdmax_ep_error(a2) != RDMAX_OK, "rdmax_ep_error(a2) is OK");
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
    rdmax_conn_info ib;
    rdmax_ep_local_info(b, &ib);
    rdmax_ep_destroy(b);
    b = NULL;
    for (int i = 0; i < N; i++)
        REQUIRE(rdmax_put(a, mem->addr, 64, mem, ib.buf.addr, ib.buf.rkey, &comp[i]) == RDMAX_INPROGRESS, "put %d", i);
    int64_t ms = wait_state(c, NULL, a);
    REQUIRE(ms >= 0, "no failure after %d ms: the watchdog did not fire", GUARD_MS);
    CHECK_ST(rdmax_ep_error(a), RDMAX_ERR_STALLED);
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
    CHECK(rdmax_ep_error(a) == RDMAX_ERR_RETRY_EXCEEDED || rdmax_ep_error(a) == RDMAX_ERR_STALLED,
          "error %s", rdmax_status_str(rdmax_ep_error(a)));
    int64_t t0 = now_ms();
    while (now_ms() - t0 < 2 * ms + 1000)
        rdmax_progress(c);
    CHECK(rdmax_ep_get_state(x) == RDMAX_EP_CONNECTED, "the endpoint without keepalive failed too: the check "
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
    REQUIRE(pair2(c, c, &da, &db, &a, &b) == RDMAX_OK, "pair");
    REQUIRE(rdmax_send(a, "goodbye", 8, NULL, NULL) == RDMAX_OK, "send");
    CHECK_ST(rdmax_ep_disconnect(a, 10000), RDMAX_OK);
    CHECK(rdmax_ep_get_state(a) == RDMAX_EP_CLOSED, "closer's state %d", rdmax_ep_get_state(a));
    CHECK_ST(rdmax_put(a, "x", 1, NULL, 0, 0, NULL), RDMAX_ERR_CLOSED);
    REQUIRE(wait_state(c, NULL, b) >= 0, "peer never saw the close");
    CHECK(rdmax_ep_get_state(b) == RDMAX_EP_CLOSED, "peer's state %d", rdmax_ep_get_state(b));
    CHECK(rxb.count == 1 && !strcmp(rxb.last, "goodbye"), "the message before the close: %d received",
          rxb.count);
    CHECK_ST(rdmax_ep_error(b), RDMAX_ERR_CLOSED);
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
    rdmax_conn_info ib;
    rdmax_ep_local_info(b, &ib);
    snprintf(cmd, sizeof cmd, "ip link set %s down", netdev);
    REQUIRE(system(cmd) == 0, "%s failed", cmd);
    int64_t t0 = now_ms();
    int posted = 0;
    for (int i = 0; i < N; i++) {
        rdmax_status st = rdmax_put(a, m0->addr, 1024, m0, ib.buf.addr, ib.buf.rkey, &comp[i]);
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
    CHECK(rdmax_ep_error(a) != RDMAX_OK, "the endpoint did not fail");
    printf("    link cut: %d puts failed after %lld ms with %s\n", posted, (long long)ms,
           rdmax_status_str(rdmax_ep_error(a)));
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
    rdmax_ep_local_info(b, &ib);
    memset(m1->addr, 0, 4096);
    memset(m0->addr, 0xab, 4096);
    rdmax_comp cc;
    memset(&cc, 0, sizeof cc);
    REQUIRE(rdmax_put(a, m0->addr, 4096, m0, ib.buf.addr, ib.buf.rkey, &cc) == RDMAX_INPROGRESS, "put");
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

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "loopback";
    setvbuf(stdout, NULL, _IOLBF, 0);
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
        case_linkcut(c, c1, mem, m1, "veth1");
        rdmax_mem_free(m1);
        rdmax_ctx_destroy(c1);
    } else {
        case_forced_error(c, mem);
        case_flush_after_forced_error(c, mem);
        case_responder_side(c, mem);
        case_watchdog(c, mem);
        case_keepalive(c, mem);
        case_disconnect(c, mem);
    }
    rdmax_mem_free(mem);
    rdmax_ctx_destroy(c);
    return tl_failed_total != 0;
}
