/* UD on a real device: datagrams of 1, 64 and MTU bytes arrive whole and without the GRH, MTU + 1 is
   refused before posting, an endpoint with no address cannot send, and multicast (joined through rdma_cm,
   and again by the direct attach) reaches two receiving processes, each getting every message, until one
   leaves; a join rdma_cm cannot bind fails with a status; 10,000 endpoints share one context's UD QP;
   cross: a datagram reaches an endpoint only from its peer (source GID and QPN), not from a QP with the
   peer's number on another device, nor from a real peer naming another endpoint; loopback: a 0-byte
   datagram between two endpoints of one context arrives, the flush marker still does not.
   twohost: multicast through rdma_cm between the two guests of tests/vm/run --topo twohost.
   Usage: ud_test [loopback|cross|twohost] (cross: sender on $RDMAX_TEST_DEV1, receivers on
   $RDMAX_TEST_DEV0; twohost: in both guests, RDMAX_HOST and RDMAX_PEER_ADDR from tests/vm/run).
   Multicast needs a route for 224.0.0.0/4 on the device's netdev (tests/guest.sh adds it). */
#define RDMAX_TRANSPORT_UD
#define RDMAX_IMPLEMENTATION
#define RDMAX_TESTING   /* rdmax__test_ud_*: act out lost, late and duplicated datagrams */
#include "../rdmax.h"
#include "testlib.h"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#define GROUP "239.1.2.3"
#define NMSG 300

struct rx {
    unsigned char last[4096];
    size_t len;
    int count, empty;
    unsigned char seen[NMSG * 2];
    int bad;
};

/* The verbs QP under ep (rdmax_ep_query_resources), for fault injection. */
static struct ibv_qp *ep_qp(const rdmax_ep *ep)
{
    rdmax_ep_resources i;
    rdmax_ep_query_resources(ep, &i);
    return i.qp;
}

/* The context's post calls so far (rdmax_ctx_query_counters). */
static uint64_t post_calls(const rdmax_ctx *ctx)
{
    rdmax_counters c;
    rdmax_ctx_query_counters(ctx, &c);
    return c.post_calls;
}

static void on_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep;
    struct rx *r = (struct rx *)user;
    if (len <= sizeof r->last)
        memcpy(r->last, data, len);
    r->len = len;
    r->count++;
    r->empty += len == 0;
    if (len >= 4) {
        uint32_t seq;
        memcpy(&seq, data, 4);
        for (size_t i = 4; i < len; i++)
            if (((unsigned char *)data)[i] != (unsigned char)(seq + i))
                r->bad++;
        if (seq < sizeof r->seen)
            r->seen[seq]++;
    }
}

/* The last multicast message logged (item MCAST): which way a join went, or why it failed. */
static char g_mcast_log[512];
static void mcast_logger(rdmax_log_level lvl, rdmax_log_item item, const char *msg, void *user)
{
    (void)user;
    if (item == RDMAX_LOG_ITEM_MCAST)
        snprintf(g_mcast_log, sizeof g_mcast_log, "%s", msg);
    if (lvl <= RDMAX_LOG_WARN)
        fprintf(stderr, "rdmax: %s\n", msg);
}

/* A context on dev whose multicast joins go the way mcast_join says (0: the default, rdma_cm). */
static rdmax_ctx *open_ctx_mcast(const char *dev, uint8_t mcast_join)
{
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    d.device = dev;
    d.mcast_join = mcast_join;
    d.logger.func = mcast_logger;
    d.log_level = RDMAX_LOG_INFO;
    d.log_level_set = true;
    rdmax_ctx *c = NULL;
    if (rdmax_ctx_create(&d, &c) != RDMAX_OK) {
        printf("FAIL ud/setup: cannot open device %s\n", dev ? dev : "(default)");
        exit(1);
    }
    return c;
}

static rdmax_ctx *open_ctx(const char *dev)
{
    return open_ctx_mcast(dev, 0);
}

static void progress_until(rdmax_ctx *a, rdmax_ctx *b, const int *count, int want)
{
    for (long i = 0; *count < want && i < 20000000L; i++) {
        rdmax_progress(a);
        if (b != a)
            rdmax_progress(b);
    }
}

/* The loss counters (ud.skipped, ud.late, ud.duplicates): a clean stream moves none; then a loss, a late
   and a duplicate datagram are forced by moving the sender's datagram number (the top 16 bits of its
   immediate data, rx_unreturned on a UD endpoint) as the wire would: deterministic, nothing lost. */
static void numbering(const char *topo, rdmax_ep *a, rdmax_ep *b, rdmax_ctx *ca, rdmax_ctx *cb, struct rx *r,
                      int sent_before)
{
    (void)b;
    rdmax_profile *p = NULL;
    uint64_t v0[3], v[3];
    static const uint32_t ids[3] = {RDMAX_PROFILE_VAR_UD_SKIPPED, RDMAX_PROFILE_VAR_UD_LATE,
                                    RDMAX_PROFILE_VAR_UD_DUPLICATES};
    tl_begin("ud/%s/numbering: a clean stream counts no loss; a forced gap, late and duplicate datagram "
             "count once each", topo);
    progress_until(ca, cb, &r->count, sent_before);  /* the earlier cases' datagrams are all in */
    REQUIRE(rdmax_profile_create(cb, &p) == RDMAX_OK, "profile");
    for (int k = 0; k < 3; k++)
        REQUIRE(rdmax_profile_read_u64(p, ids[k], &v0[k]) == RDMAX_OK, "read");
#define UD_SEND_ONE()                                                                                    \
    do {                                                                                                 \
        int before_ = r->count;                                                                          \
        REQUIRE(rdmax_send(a, "num.", 4, NULL, NULL) == RDMAX_OK, "send");                                \
        progress_until(ca, cb, &r->count, before_ + 1);                                                  \
        REQUIRE(r->count == before_ + 1, "datagram not received");                                       \
    } while (0)
#define UD_DELTAS()                                                                                      \
    for (int k = 0; k < 3; k++) {                                                                        \
        rdmax_profile_read_u64(p, ids[k], &v[k]);                                                        \
        v[k] -= v0[k];                                                                                   \
    }
    for (int i = 0; i < 50; i++)
        UD_SEND_ONE();
    UD_DELTAS();
    CHECK(v[0] == 0 && v[1] == 0 && v[2] == 0, "clean: skipped %llu late %llu duplicates %llu",
          (unsigned long long)v[0], (unsigned long long)v[1], (unsigned long long)v[2]);
    uint16_t at = rdmax__test_ud_tx_seq(a);  /* the next datagram's number */
    rdmax__test_ud_set_tx_seq(a, (uint16_t)(at + 5));  /* 5 datagrams lost on the wire */
    UD_SEND_ONE();
    UD_DELTAS();
    CHECK(v[0] == 5 && v[1] == 0 && v[2] == 0, "gap of 5: skipped %llu late %llu duplicates %llu",
          (unsigned long long)v[0], (unsigned long long)v[1], (unsigned long long)v[2]);
    rdmax__test_ud_set_tx_seq(a, (uint16_t)(at + 2));  /* one of the five comes late */
    UD_SEND_ONE();
    rdmax__test_ud_set_tx_seq(a, (uint16_t)(at + 2));  /* and again: a duplicate */
    UD_SEND_ONE();
    rdmax__test_ud_set_tx_seq(a, (uint16_t)(at + 6));  /* back in sequence */
    for (int i = 0; i < 10; i++)
        UD_SEND_ONE();
    UD_DELTAS();
    CHECK(v[0] == 5 && v[1] == 1 && v[2] == 1, "after a late one and its duplicate: skipped %llu late %llu "
          "duplicates %llu (want 5, 1, 1)", (unsigned long long)v[0], (unsigned long long)v[1],
          (unsigned long long)v[2]);
#undef UD_SEND_ONE
#undef UD_DELTAS
out:
    rdmax_profile_destroy(p);
    tl_end();
}

static void unicast(const char *topo, rdmax_ctx *ca, rdmax_ctx *cb)
{
    rdmax_ep *a = NULL, *b = NULL;
    rdmax_mem *m = NULL;
    struct rx r;
    memset(&r, 0, sizeof r);
    rdmax_ep_desc da, db;
    memset(&da, 0, sizeof da);
    memset(&db, 0, sizeof db);
    db.recv_cb = on_recv;
    db.user = &r;
    tl_begin("ud/%s/setup", topo);
    REQUIRE(rdmax_ep_create(ca, &da, &a) == RDMAX_OK && rdmax_ep_create(cb, &db, &b) == RDMAX_OK, "endpoints");
    CHECK_ST(rdmax_send(a, "x", 1, NULL, NULL), RDMAX_ERR_NOT_CONNECTED);
    rdmax_conn_record ia, ib;
    rdmax_ep_query_record(a, &ia);
    rdmax_ep_query_record(b, &ib);
    CHECK(ia.transport == RDMAX_TRANSPORT_ID_UD && ia.qkey == RDMAX_UD_QKEY, "record is not UD");
    REQUIRE(rdmax_ep_connect_record(a, &ib) == RDMAX_OK && rdmax_ep_connect_record(b, &ia) == RDMAX_OK, "connect");
    CHECK(rdmax_ep_query_state(a) == RDMAX_EP_CONNECTED, "UD endpoint not connected");
    REQUIRE(rdmax_mem_alloc(ca, 8192, RDMAX_ACCESS_LOCAL, &m) == RDMAX_OK, "alloc");
    tl_end();
    uint32_t mtu = rdmax_ctx_query_attr(ca)->mtu_bytes < rdmax_ctx_query_attr(cb)->mtu_bytes ? rdmax_ctx_query_attr(ca)->mtu_bytes : rdmax_ctx_query_attr(cb)->mtu_bytes;
    size_t sizes[] = {1, 64, mtu};
    for (int k = 0; k < 3; k++) {
        size_t n = sizes[k];
        unsigned char *p = (unsigned char *)m->addr;
        for (size_t i = 0; i < n; i++)
            p[i] = (unsigned char)(i * 7 + k + 1);
        tl_begin("ud/%s/send %zu", topo, n);
        int before = r.count;
        rdmax_comp c;
        memset(&c, 0, sizeof c);
        rdmax_status st = rdmax_send(a, p, n, m, &c);
        CHECK(st == RDMAX_OK || st == RDMAX_INPROGRESS, "send: %s", rdmax_status_str(st));
        progress_until(ca, cb, &r.count, before + 1);
        CHECK(r.count == before + 1, "datagram not received");
        CHECK(r.len == n, "received %zu bytes, sent %zu (a GRH left in?)", r.len, n);
        int same = r.len == n && !memcmp(r.last, p, n);
        CHECK(same, "payload differs");
        tl_end();
    }
    tl_begin("ud/%s/MTU + 1 refused before posting", topo);
    {
        uint64_t calls = post_calls(ca);
        CHECK_ST(rdmax_send(a, m->addr, mtu + 1, m, NULL), RDMAX_ERR_SIZE);
        CHECK(post_calls(ca) == calls, "something was posted");
    }
    tl_end();
    tl_begin("ud/%s/flush", topo);
    for (int i = 0; i < 100; i++)
        rdmax_send(a, "abcd", 4, NULL, NULL);
    CHECK_ST(rdmax_ep_flush(a, 5000), RDMAX_OK);
    rdmax_ep_resources info;
    rdmax_ep_query_resources(a, &info);
    CHECK(info.outstanding == 0, "operations outstanding after flush");
    tl_end();
    numbering(topo, a, b, ca, cb, &r, 3 + 100);
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_mem_free(m);
    if (tl_case_failed)
        tl_end();
}

/* The context's one UD QP forced to the error state (what an asynchronous QP error leaves): every UD
   endpoint fails, also one that never sends, which would otherwise wait for datagrams forever. */
static void shared_qp_failure(const char *dev)
{
    rdmax_ctx *c = open_ctx(dev);
    rdmax_ep *a = NULL, *b = NULL, *idle = NULL;
    struct rx r;
    memset(&r, 0, sizeof r);
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.recv_cb = on_recv;
    d.user = &r;
    tl_begin("ud/loopback/the shared UD QP in error fails every UD endpoint, idle receivers too");
    REQUIRE(rdmax_ep_create(c, &d, &a) == RDMAX_OK && rdmax_ep_create(c, &d, &b) == RDMAX_OK &&
            rdmax_ep_create(c, &d, &idle) == RDMAX_OK, "endpoints");
    rdmax_conn_record ia, ib;
    rdmax_ep_query_record(a, &ia);
    rdmax_ep_query_record(b, &ib);
    REQUIRE(rdmax_ep_connect_record(a, &ib) == RDMAX_OK && rdmax_ep_connect_record(b, &ia) == RDMAX_OK &&
            rdmax_ep_connect_record(idle, &ia) == RDMAX_OK, "connect");
    REQUIRE(ep_qp(a) == ep_qp(idle), "the endpoints do not share one UD QP");
    struct ibv_qp_attr qa;
    memset(&qa, 0, sizeof qa);
    qa.qp_state = IBV_QPS_ERR;
    REQUIRE(ibv_modify_qp(ep_qp(a), &qa, IBV_QP_STATE) == 0, "ibv_modify_qp(ERR)");
    for (long i = 0; i < 1000000 && rdmax_ep_query_state(idle) == RDMAX_EP_CONNECTED; i++)
        rdmax_progress(c);  /* the posted receives come back flushed */
    rdmax_ep *eps[3] = {a, b, idle};
    for (int i = 0; i < 3; i++) {
        CHECK(rdmax_ep_query_state(eps[i]) == RDMAX_EP_ERROR, "endpoint %d is in state %d, not failed", i,
              (int)rdmax_ep_query_state(eps[i]));
        CHECK_ST(rdmax_ep_query_error(eps[i]), RDMAX_ERR_DEVICE);
    }
    CHECK_ST(rdmax_send(a, "x", 1, NULL, NULL), RDMAX_ERR_ENDPOINT);
    tl_end();
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_ep_destroy(idle);
    rdmax_ctx_destroy(c);
    if (tl_case_failed)
        tl_end();
}

/* Issue 30 item 5: a 0-byte datagram between two endpoints of one context is the user's, not rdmax's
   flush marker (an empty datagram to its own QP too): it arrives with len 0. The marker, behind empty
   and non-empty datagrams, is still neither delivered nor counted as a drop. */
static void zero_byte(const char *dev)
{
    rdmax_ctx *c = open_ctx(dev);
    rdmax_ep *a = NULL, *b = NULL;
    struct rx r;
    memset(&r, 0, sizeof r);
    rdmax_ep_desc da, db;
    memset(&da, 0, sizeof da);
    memset(&db, 0, sizeof db);
    db.recv_cb = on_recv;
    db.user = &r;
    rdmax_counters c0, c1;
    tl_begin("ud/loopback/a 0-byte datagram between two endpoints of one context arrives with len 0");
    REQUIRE(rdmax_ep_create(c, &da, &a) == RDMAX_OK && rdmax_ep_create(c, &db, &b) == RDMAX_OK, "endpoints");
    rdmax_conn_record ia, ib;
    rdmax_ep_query_record(a, &ia);
    rdmax_ep_query_record(b, &ib);
    REQUIRE(rdmax_ep_connect_record(a, &ib) == RDMAX_OK && rdmax_ep_connect_record(b, &ia) == RDMAX_OK, "connect");
    rdmax_ctx_query_counters(c, &c0);
    r.len = 99;
    CHECK_ST(rdmax_send(a, NULL, 0, NULL, NULL), RDMAX_OK);
    for (time_t t0 = time(NULL); r.count < 1 && time(NULL) - t0 < 5;)
        rdmax_progress(c);
    rdmax_ctx_query_counters(c, &c1);
    printf("    0-byte datagram: %d delivered (len %zu), recv_drops +%llu\n", r.count, r.count ? r.len : 0,
           (unsigned long long)(c1.recv_drops - c0.recv_drops));
    CHECK(r.count == 1 && r.len == 0, "%d delivered, len %zu", r.count, r.len);
    CHECK(c1.recv_drops == c0.recv_drops, "recv_drops +%llu", (unsigned long long)(c1.recv_drops - c0.recv_drops));
    tl_end();
    tl_begin("ud/loopback/the flush marker behind 0-byte and 4-byte datagrams: flush OK, marker neither "
             "delivered nor dropped");
    {
        rdmax_ctx_query_counters(c, &c0);
        int before = r.count, empty = r.empty;
        for (int i = 0; i < 5; i++) {
            CHECK_ST(rdmax_send(a, NULL, 0, NULL, NULL), RDMAX_OK);
            CHECK_ST(rdmax_send(a, "abcd", 4, NULL, NULL), RDMAX_OK);
        }
        CHECK_ST(rdmax_ep_flush(a, 5000), RDMAX_OK);
        rdmax_ctx_query_counters(c, &c1);
        CHECK(c1.posted[RDMAX_OP_FLUSH] == c0.posted[RDMAX_OP_FLUSH] + 1, "no marker was sent (%llu)",
              (unsigned long long)(c1.posted[RDMAX_OP_FLUSH] - c0.posted[RDMAX_OP_FLUSH]));
        /* the marker is the last to arrive: every receive completion taken, 11 of them, then a while more */
        for (time_t t0 = time(NULL); time(NULL) - t0 < 5;) {
            rdmax_progress(c);
            rdmax_ctx_query_counters(c, &c1);
            if (r.count >= before + 10 && c1.cqes - c0.cqes >= 12)  /* 11 receives + the marker's send */
                break;
        }
        for (int i = 0; i < 100000; i++)
            rdmax_progress(c);
        rdmax_ctx_query_counters(c, &c1);
        CHECK(r.count == before + 10 && r.empty == empty + 5, "%d delivered, %d of them empty (want 10, 5 empty; "
              "6 empty: the marker delivered)", r.count - before, r.empty - empty);
        CHECK(c1.recv_msgs - c0.recv_msgs == 10, "recv_msgs +%llu", (unsigned long long)(c1.recv_msgs - c0.recv_msgs));
        CHECK(c1.recv_drops == c0.recv_drops, "recv_drops +%llu (the marker counted as a drop?)",
              (unsigned long long)(c1.recv_drops - c0.recv_drops));
    }
    tl_end();
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_ctx_destroy(c);
    if (tl_case_failed)
        tl_end();
}

/* ---- the sender's identity (cross): raw verbs on a device, a forger's tools ---- */
struct tagged {
    int n[4];  /* datagrams received by payload tag: H(onest), F(orged), P (the forger to its own peer), X */
};

static void on_tagged(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep;
    struct tagged *t = (struct tagged *)user;
    const char *tags = "HFPX", *k = len ? strchr(tags, ((char *)data)[0]) : NULL;
    if (k && *k)
        t->n[k - tags]++;
}

struct raw {
    struct ibv_context *vctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_qp *qps[8192];
    int n;
};

static int raw_open(struct raw *r, const char *dev)
{
    memset(r, 0, sizeof *r);
    int n = 0;
    struct ibv_device **l = ibv_get_device_list(&n);
    for (int i = 0; l && i < n && !r->vctx; i++)
        if (!strcmp(ibv_get_device_name(l[i]), dev))
            r->vctx = ibv_open_device(l[i]);
    if (l)
        ibv_free_device_list(l);
    if (!r->vctx || !(r->pd = ibv_alloc_pd(r->vctx)) || !(r->cq = ibv_create_cq(r->vctx, 64, NULL, NULL, 0)))
        return -1;
    return 0;
}

/* One more UD QP (kept until raw_close: no number is given back meanwhile), or NULL. */
static struct ibv_qp *raw_qp(struct raw *r)
{
    if (r->n == (int)(sizeof r->qps / sizeof r->qps[0]))
        return NULL;
    struct ibv_qp_init_attr a;
    memset(&a, 0, sizeof a);
    a.send_cq = a.recv_cq = r->cq;
    a.qp_type = IBV_QPT_UD;
    a.cap.max_send_wr = 32;
    a.cap.max_recv_wr = 1;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = 64;
    struct ibv_qp *qp = ibv_create_qp(r->pd, &a);
    if (qp)
        r->qps[r->n++] = qp;
    return qp;
}

static int raw_rts(struct ibv_qp *qp, uint8_t port)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.port_num = port;
    a.qkey = RDMAX_UD_QKEY;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
        return -1;
    a.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
        return -1;
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 1;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

static void raw_close(struct raw *r)
{
    for (int i = 0; i < r->n; i++)
        ibv_destroy_qp(r->qps[i]);
    if (r->cq)
        ibv_destroy_cq(r->cq);
    if (r->pd)
        ibv_dealloc_pd(r->pd);
    if (r->vctx)
        ibv_close_device(r->vctx);
    memset(r, 0, sizeof *r);
}

/* A datagram formatted as rdmax's: immediate data = the receiving endpoint's index | number << 16
   (little-endian, as rdmax_send writes it), to the receiver's UD QP; waits for its send completion. */
static int raw_send(struct raw *r, struct ibv_qp *qp, struct ibv_ah *ah, uint32_t qpn, uint32_t imm,
                    const char *payload)
{
    struct ibv_sge sge = {(uintptr_t)payload, (uint32_t)strlen(payload), 0};
    struct ibv_send_wr wr, *bad;
    memset(&wr, 0, sizeof wr);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    wr.imm_data = RDMAX__LE32(imm);
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = qpn;
    wr.wr.ud.remote_qkey = RDMAX_UD_QKEY;
    if (ibv_post_send(qp, &wr, &bad))
        return -1;
    struct ibv_wc wc;
    int n = 0;
    for (long i = 0; i < 100000000L && (n = ibv_poll_cq(r->cq, 1, &wc)) == 0; i++)
        ;
    return n == 1 && wc.status == IBV_WC_SUCCESS ? 0 : -1;
}

/* Issue 30 item 4: QP numbers are per device, so the receiver must tell a peer by its source GID too.
   R (receiver) and H (the honest peer) are contexts on dev0; a forger F on dev1 makes UD QPs until one has
   H's QPN. R's endpoint r1 is H's peer; r2 is F's (F is a real peer too, with its own GID). F sends
   datagrams formatted as H's to r1; H's second endpoint h2 sends to r2 (a real peer naming another
   endpoint, whose peer has the same QPN). Control: H's own datagrams to r1 and F's to r2 arrive - the
   forged datagrams differ from those only by where they come from. */
static void sender_identity(const char *dev0, const char *dev1, const rdmax_dev_attr *a1)
{
    const int N = 10;
    rdmax_ctx *R = NULL, *H = NULL;
    rdmax_ep *r1 = NULL, *r2 = NULL, *h1 = NULL, *h2 = NULL;
    struct raw *f = (struct raw *)calloc(1, sizeof *f), *bump = (struct raw *)calloc(1, sizeof *bump);
    struct ibv_ah *ah = NULL;
    struct tagged t1, t2;
    memset(&t1, 0, sizeof t1);
    memset(&t2, 0, sizeof t2);
    rdmax_profile *p = NULL;
    tl_begin("ud/cross/a sender on another device with the peer's QPN: %d forged datagrams dropped and counted "
             "(ud.wrong_source), none delivered", N);
    REQUIRE(f && bump && raw_open(f, dev1) == 0 && raw_open(bump, dev0) == 0, "raw verbs on %s and %s", dev1, dev0);
    /* QPNs rise on each device as QPs are made: H's must lie ahead of dev1's next one for F to reach it */
    struct ibv_qp *q = raw_qp(f);
    REQUIRE(q, "ibv_create_qp on %s", dev1);
    uint32_t next1 = q->qp_num;
    while ((q = raw_qp(bump)) != NULL && q->qp_num < next1 + 16)
        ;
    REQUIRE(q, "ibv_create_qp on %s", dev0);
    R = open_ctx(dev0);
    H = open_ctx(dev0);
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.recv_cb = on_tagged;
    d.user = &t1;
    REQUIRE(rdmax_ep_create(R, &d, &r1) == RDMAX_OK, "r1");
    d.user = &t2;
    REQUIRE(rdmax_ep_create(R, &d, &r2) == RDMAX_OK, "r2");
    REQUIRE(rdmax_ep_create(H, NULL, &h1) == RDMAX_OK && rdmax_ep_create(H, NULL, &h2) == RDMAX_OK, "h1, h2");
    raw_close(bump);
    rdmax_conn_record ir1, ir2, ih;
    rdmax_ep_query_record(r1, &ir1);
    rdmax_ep_query_record(r2, &ir2);
    rdmax_ep_query_record(h1, &ih);
    uint32_t hqpn = ih.qpn;
    struct ibv_qp *fq = NULL;
    while ((q = raw_qp(f)) != NULL && q->qp_num <= hqpn)
        if (q->qp_num == hqpn)
            fq = q;
    REQUIRE(fq, "%s: no UD QP numbered 0x%x (dev1 went from 0x%x to 0x%x in %d QPs)", dev1, hqpn, next1,
            q ? q->qp_num : 0, f->n);
    REQUIRE(raw_rts(fq, a1->port) == 0, "forger's QP to RTS");
    printf("    forger: QP 0x%x on %s after %d QPs, as H's on %s\n", fq->qp_num, dev1, f->n - 1, dev0);
    /* r1 <-> h1; r2's peer is F (h1's record with F's GID: the same QPN); h2 -> r2 */
    rdmax_conn_record iF = ih;
    memcpy(iF.gid, a1->gid.raw, 16);
    REQUIRE(rdmax_ep_connect_record(r1, &ih) == RDMAX_OK && rdmax_ep_connect_record(h1, &ir1) == RDMAX_OK &&
            rdmax_ep_connect_record(r2, &iF) == RDMAX_OK && rdmax_ep_connect_record(h2, &ir2) == RDMAX_OK, "connect");
    struct ibv_ah_attr aa;
    memset(&aa, 0, sizeof aa);
    aa.port_num = a1->port;
    aa.is_global = 1;
    memcpy(aa.grh.dgid.raw, ir1.gid, 16);
    aa.grh.sgid_index = (uint8_t)a1->gid_index;
    aa.grh.hop_limit = 64;
    REQUIRE((ah = ibv_create_ah(f->pd, &aa)) != NULL, "ibv_create_ah on %s", dev1);
    rdmax_counters c0, c1;
    rdmax_ctx_query_counters(R, &c0);
    uint16_t seq = rdmax__test_ud_tx_seq(h1);  /* the numbers H would give its next datagrams */
    for (int i = 0; i < N; i++) {
        REQUIRE(raw_send(f, fq, ah, ir1.qpn, ir1.credits | (uint32_t)(uint16_t)(seq + i) << 16, "F forged") == 0,
                "forger's send %d", i);
        REQUIRE(raw_send(f, fq, ah, ir2.qpn, ir2.credits | (uint32_t)i << 16, "P to its own peer") == 0,
                "forger's send %d to r2", i);
        REQUIRE(rdmax_send(h1, "H honest", 8, NULL, NULL) == RDMAX_OK, "h1 send");
        REQUIRE(rdmax_send(h2, "X wrong endpoint", 16, NULL, NULL) == RDMAX_OK, "h2 send");
    }
    CHECK_ST(rdmax_ep_flush(h1, 5000), RDMAX_OK);
    CHECK_ST(rdmax_ep_flush(h2, 5000), RDMAX_OK);
    /* until the controls are in and every other datagram is accounted for, delivered or dropped */
    for (time_t t0 = time(NULL); time(NULL) - t0 < 10;) {
        rdmax_progress(R);
        rdmax_ctx_query_counters(R, &c1);
        if (t1.n[0] >= N && t2.n[2] >= N &&
            (int)(c1.recv_drops - c0.recv_drops) + t1.n[1] + t2.n[1] + t1.n[3] + t2.n[3] >= 2 * N)
            break;
    }
    for (int i = 0; i < 100000; i++)
        rdmax_progress(R);
    rdmax_ctx_query_counters(R, &c1);
    uint64_t wrong = c1.ud_wrong_source - c0.ud_wrong_source, drops = c1.recv_drops - c0.recv_drops, pv = 0;
    printf("    forged (F to r1): %d of %d delivered; h2 naming r2: %d of %d delivered; ud_wrong_source +%llu, "
           "recv_drops +%llu\n", t1.n[1] + t2.n[1], N, t1.n[3] + t2.n[3], N, (unsigned long long)wrong,
           (unsigned long long)drops);
    CHECK(t1.n[1] == 0 && t2.n[1] == 0, "%d of %d forged datagrams delivered", t1.n[1] + t2.n[1], N);
    CHECK(wrong == 2 * (uint64_t)N && drops == 2 * (uint64_t)N, "ud_wrong_source +%llu, recv_drops +%llu (want %d each)",
          (unsigned long long)wrong, (unsigned long long)drops, 2 * N);
    REQUIRE(rdmax_profile_create(R, &p) == RDMAX_OK, "profile");
    CHECK(rdmax_profile_read_u64(p, RDMAX_PROFILE_VAR_UD_WRONG_SOURCE, &pv) == RDMAX_OK && pv == c1.ud_wrong_source,
          "profile ud.wrong_source %llu, counters %llu", (unsigned long long)pv, (unsigned long long)c1.ud_wrong_source);
    tl_end();
    tl_begin("ud/cross/a real peer naming another endpoint (whose peer has its QPN on another device): dropped "
             "and counted");
    CHECK(t1.n[3] == 0 && t2.n[3] == 0, "%d of %d delivered", t1.n[3] + t2.n[3], N);
    tl_end();
    tl_begin("ud/cross/control: the peer's own datagrams, and the forger's to the endpoint it is the peer of, "
             "arrive");
    CHECK(t1.n[0] == N, "h1 to r1: %d of %d", t1.n[0], N);
    CHECK(t2.n[2] == N, "forger to r2 (its peer): %d of %d", t2.n[2], N);
    CHECK(t1.n[2] == 0 && t2.n[0] == 0, "misdelivered: r1 got %d of the forger's to r2, r2 %d of h1's", t1.n[2],
          t2.n[0]);
    tl_end();
out:
    rdmax_profile_destroy(p);
    rdmax_ep_destroy(r1);
    rdmax_ep_destroy(r2);
    rdmax_ep_destroy(h1);
    rdmax_ep_destroy(h2);
    rdmax_ctx_destroy(R);
    rdmax_ctx_destroy(H);
    if (ah)
        ibv_destroy_ah(ah);
    if (f)
        raw_close(f);
    if (bump)
        raw_close(bump);
    free(f);
    free(bump);
    if (tl_case_failed)
        tl_end();
}

#define ST_WRONG_PATH 1000  /* a receiver's report: it joined, but not the way its desc asked */

/* A receiving process: join (the way mcast_join says), say ready, count phase-1 messages, maybe leave,
   count phase 2, report. */
static void receiver(const char *dev, uint8_t mcast_join, int leave_after_phase1, int ready_fd, int go_fd,
                     int report_fd)
{
    rdmax_ctx *c = open_ctx_mcast(dev, mcast_join);
    struct rx *r = (struct rx *)calloc(1, sizeof *r);
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.recv_cb = on_recv;
    d.user = r;
    d.rq_depth = 512;
    rdmax_ep *ep;
    int st = rdmax_ep_create(c, &d, &ep);
    if (st == RDMAX_OK)
        st = rdmax_mcast_join(ep, GROUP);
    if (st == RDMAX_OK && !strstr(g_mcast_log, mcast_join == RDMAX_MCAST_ATTACH ? "by ibv_attach_mcast" : "through rdma_cm"))
        st = ST_WRONG_PATH;
    if (write(ready_fd, &st, sizeof st) != sizeof st || st != RDMAX_OK)
        _exit(1);
    int phase1 = 0;
    for (int phase = 1; phase <= 2; phase++) {
        char g;
        /* receive until the sender says the phase is over and every message this receiver should get
           has arrived (datagrams may still be in the kernel when the sender's sends completed; how long
           they take depends on the load), then a little longer to catch extra ones */
        struct pollfd p = {go_fd, POLLIN, 0};
        while (poll(&p, 1, 0) == 0)
            rdmax_progress(c);
        if (read(go_fd, &g, 1) != 1)
            _exit(2);
        int want = phase == 1 ? NMSG : phase1 + (leave_after_phase1 ? 0 : NMSG);
        time_t t0 = time(NULL);  /* a generous bound: a lost datagram shows as a short count, not a hang */
        while (r->count < want && time(NULL) - t0 < 120)
            rdmax_progress(c);
        for (int i = 0; i < 200000; i++)
            rdmax_progress(c);
        if (phase == 1) {
            phase1 = r->count;
            if (leave_after_phase1)
                st = rdmax_mcast_leave(ep, GROUP);
            if (write(ready_fd, &st, sizeof st) != sizeof st)
                _exit(3);
        }
    }
    int rep[4] = {phase1, r->count - phase1, r->bad, 0};
    for (int i = 0; i < NMSG; i++)
        rep[3] += r->seen[i] == 1;
    if (write(report_fd, rep, sizeof rep) != sizeof rep)
        _exit(4);
    rdmax_ep_destroy(ep);
    rdmax_ctx_destroy(c);
    _exit(0);
}

/* The multicast messages numbered from .. to - 1, sent on tx from m one at a time (each flushed, a pause
   every 32: the receivers keep up): 256 bytes, the number in the first 4, (number + i) at byte i. */
static void send_numbered(rdmax_ctx *c, rdmax_ep *tx, rdmax_mem *m, uint32_t from, uint32_t to)
{
    unsigned char *p = (unsigned char *)m->addr;
    for (uint32_t seq = from; seq < to; seq++) {
        memcpy(p, &seq, 4);
        for (size_t i = 4; i < 256; i++)
            p[i] = (unsigned char)(seq + i);
        rdmax_status st;
        while ((st = rdmax_send(tx, p, 256, m, NULL)) == RDMAX_ERR_NO_RESOURCE)
            rdmax_progress(c);
        CHECK(st == RDMAX_OK || st == RDMAX_INPROGRESS, "send %u: %s", seq, rdmax_status_str(st));
        CHECK_ST(rdmax_ep_flush(tx, 5000), RDMAX_OK);
        if (seq % 32 == 31)
            usleep(2000);
    }
}

/* Two receiving processes on rdev and a sender on sdev, all joining the way mcast_join says (0: rdma_cm,
   the default; RDMAX_MCAST_ATTACH: the direct attach). */
static void multicast(const char *topo, const char *sdev, const char *rdev, uint8_t mcast_join)
{
    int ready[2][2], go[2][2], report[2][2];
    pid_t pid[2] = {-1, -1};
    rdmax_ep *tx = NULL;
    rdmax_mem *m = NULL;
    const char *how = mcast_join == RDMAX_MCAST_ATTACH ? "ibv_attach_mcast" : "rdma_cm";
    rdmax_ctx *cs = NULL;
    tl_begin("ud/%s/multicast (%s): two receivers get every message", topo, how);
    for (int k = 0; k < 2; k++) {
        REQUIRE(pipe(ready[k]) == 0 && pipe(go[k]) == 0 && pipe(report[k]) == 0, "pipe");
        pid[k] = fork();
        if (pid[k] == 0)
            receiver(rdev, mcast_join, k == 0, ready[k][1], go[k][0], report[k][1]);
    }
    for (int k = 0; k < 2; k++) {
        int st = -1;
        REQUIRE(read(ready[k][0], &st, sizeof st) == sizeof st, "receiver %d died", k);
        REQUIRE(st != ST_WRONG_PATH, "receiver %d did not join through %s", k, how);
        REQUIRE(st == RDMAX_OK, "receiver %d could not join: %s", k, rdmax_status_str((rdmax_status)st));
    }
    cs = open_ctx_mcast(sdev, mcast_join);
    CHECK(rdmax_ctx_query_desc(cs).mcast_join == (mcast_join ? mcast_join : RDMAX_MCAST_CM),
          "the applied mcast_join is %u", rdmax_ctx_query_desc(cs).mcast_join);
    {
        /* a desc is applied, its transport UD whatever it says (RC is not compiled here) */
        rdmax_ep_desc d;
        memset(&d, 0, sizeof d);
        d.transport = RDMAX_TRANSPORT_ID_RC;
        d.sq_depth = 64;
        REQUIRE(rdmax_mcast_ep_create(cs, &d, GROUP, &tx) == RDMAX_OK, "multicast endpoint with a desc: %s",
                rdmax_ctx_query_last_error(cs));
        d = rdmax_ep_query_desc(tx);
        CHECK(d.transport == RDMAX_TRANSPORT_ID_UD && d.sq_depth == 64, "applied transport %u, sq_depth %u",
              d.transport, d.sq_depth);
        rdmax_ep_destroy(tx);
        tx = NULL;
    }
    REQUIRE(rdmax_mcast_ep_create(cs, NULL, GROUP, &tx) == RDMAX_OK, "multicast endpoint: %s", rdmax_ctx_query_last_error(cs));
    REQUIRE(rdmax_mem_alloc(cs, 4096, RDMAX_ACCESS_LOCAL, &m) == RDMAX_OK, "alloc");
    for (int phase = 1; phase <= 2; phase++) {
        send_numbered(cs, tx, m, (phase - 1) * NMSG, phase * NMSG);
        for (int k = 0; k < 2; k++)
            CHECK(write(go[k][1], "g", 1) == 1, "receiver %d gone", k);
        if (phase == 1)
            for (int k = 0; k < 2; k++) {
                int st = -1;
                CHECK(read(ready[k][0], &st, sizeof st) == sizeof st && st == RDMAX_OK, "receiver %d: leave failed", k);
            }
    }
    int rep[2][4];
    for (int k = 0; k < 2; k++) {
        REQUIRE(read(report[k][0], rep[k], sizeof rep[k]) == sizeof rep[k], "receiver %d sent no report", k);
        CHECK(rep[k][0] == NMSG && rep[k][3] == NMSG, "receiver %d got %d of %d messages in phase 1 (%d distinct)", k,
              rep[k][0], NMSG, rep[k][3]);
        CHECK(rep[k][2] == 0, "receiver %d saw %d corrupted bytes", k, rep[k][2]);
    }
    tl_end();
    tl_begin("ud/%s/multicast (%s): after leaving, nothing arrives", topo, how);
    CHECK(rep[0][1] == 0, "receiver that left got %d messages", rep[0][1]);
    CHECK(rep[1][1] == NMSG, "receiver that stayed got %d of %d", rep[1][1], NMSG);
    tl_end();
out:
    for (int k = 0; k < 2; k++)
        if (pid[k] > 0) {
            int status;
            kill(pid[k], SIGTERM);
            waitpid(pid[k], &status, 0);
        }
    rdmax_ep_destroy(tx);
    rdmax_mem_free(m);
    rdmax_ctx_destroy(cs);
    if (tl_case_failed)
        tl_end();
}

/* A join rdma_cm cannot make: the context's mcast_addr (192.0.2.99) is no address of this host, so
   rdma_cm binds nothing to the device. The join and a sending endpoint fail with RDMAX_ERR_NO_DEVICE
   and a sentence naming the address, nothing is joined; the control, the same join from the derived
   address, succeeds. */
static void mcast_failed_join(const char *dev)
{
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    d.device = dev;
    d.mcast_addr = "192.0.2.99";
    d.logger.func = mcast_logger;
    rdmax_ctx *bad = NULL, *good = NULL;
    rdmax_ep *ep = NULL, *ok = NULL, *tx = (rdmax_ep *)&d;
    tl_begin("ud/loopback/multicast (rdma_cm): a join from an address the device cannot bind fails with "
             "RDMAX_ERR_NO_DEVICE and a sentence");
    REQUIRE(rdmax_ctx_create(&d, &bad) == RDMAX_OK, "context");
    REQUIRE(rdmax_ep_create(bad, NULL, &ep) == RDMAX_OK, "endpoint");
    g_mcast_log[0] = 0;
    CHECK_ST(rdmax_mcast_join(ep, GROUP), RDMAX_ERR_NO_DEVICE);
    CHECK(strstr(g_mcast_log, "192.0.2.99") && strstr(g_mcast_log, "rdma_bind_addr") && strstr(g_mcast_log, GROUP),
          "the sentence: %s", g_mcast_log);
    CHECK_ST(rdmax_mcast_leave(ep, GROUP), RDMAX_ERR_INVALID_PARAM);  /* nothing was joined */
    CHECK_ST(rdmax_mcast_ep_create(bad, NULL, "239.1.2.4", &tx), RDMAX_ERR_NO_DEVICE);
    CHECK(tx == NULL, "a failed sending endpoint was returned");
    /* the control: the address derived from the device's GID binds, the same join succeeds */
    good = open_ctx(dev);
    REQUIRE(rdmax_ep_create(good, NULL, &ok) == RDMAX_OK, "endpoint");
    CHECK_ST(rdmax_mcast_join(ok, GROUP), RDMAX_OK);
    tl_end();
out:
    rdmax_ep_destroy(ep);
    rdmax_ep_destroy(ok);  /* leaves */
    rdmax_ctx_destroy(bad);
    rdmax_ctx_destroy(good);
    if (tl_case_failed)
        tl_end();
}

/* UD QPs of this process as the kernel counts them (`rdma resource show qp`); -1 if unreadable. */
static int kernel_ud_qps(void)
{
    char cmd[96], line[512];
    snprintf(cmd, sizeof cmd, "rdma resource show qp 2>/dev/null");
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    int n = 0, any = 0;
    char pid[32];
    snprintf(pid, sizeof pid, " pid %d ", (int)getpid());
    while (fgets(line, sizeof line, f)) {
        any = 1;
        strcat(line, " ");
        n += strstr(line, "type UD") && strstr(line, pid);
    }
    pclose(f);
    return any ? n : -1;
}

struct scale_rx {
    uint8_t *got;
    int bad, count;
};

static void on_scale(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep;
    struct scale_rx *r = (struct scale_rx *)((void **)user)[0];
    uint32_t want = (uint32_t)(uintptr_t)((void **)user)[1], seq;
    if (len != 16) {
        r->bad++;
        return;
    }
    memcpy(&seq, data, 4);
    for (size_t i = 4; i < 16; i++)
        r->bad += ((uint8_t *)data)[i] != (uint8_t)(seq * 3 + i);
    if (seq != want)
        r->bad++;
    else
        r->got[seq]++;
    r->count++;
}

/* Thousands of peers on one context: endpoints are addresses on the context's one UD QP. */
static void scale(const char *dev, int n)
{
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.device = dev;
    cd.max_eps = (uint32_t)n + 1;
    rdmax_ctx *ca = NULL, *cb = NULL;
    rdmax_ep **a = (rdmax_ep **)calloc((size_t)n, sizeof *a), **b = (rdmax_ep **)calloc((size_t)n, sizeof *b);
    void **users = (void **)calloc((size_t)n * 2, sizeof *users);
    struct scale_rx r;
    memset(&r, 0, sizeof r);
    r.got = (uint8_t *)calloc((size_t)n, 1);
    tl_begin("ud/scale/%d endpoints in one context on at most 2 UD QPs, one checked datagram each", n);
    REQUIRE(a && b && users && r.got, "calloc");
    REQUIRE(rdmax_ctx_create(&cd, &ca) == RDMAX_OK && rdmax_ctx_create(&cd, &cb) == RDMAX_OK, "contexts");
    int before = kernel_ud_qps();
    for (int i = 0; i < n; i++)
        REQUIRE(rdmax_ep_create(ca, NULL, &a[i]) == RDMAX_OK, "endpoint %d of %d", i, n);
    int qps = kernel_ud_qps();
    REQUIRE(qps >= 0 && before >= 0, "cannot read the kernel's QP list (rdma resource show qp)");
    CHECK(qps - before <= 2, "%d UD QPs for %d endpoints", qps - before, n);
    printf("    %d UD endpoints: %d UD QPs in the kernel's count\n", n, qps - before);
    rdmax_ep_desc db;
    memset(&db, 0, sizeof db);
    db.recv_cb = on_scale;
    for (int i = 0; i < n; i++) {
        users[2 * i] = &r;
        users[2 * i + 1] = (void *)(uintptr_t)i;
        db.user = &users[2 * i];
        REQUIRE(rdmax_ep_create(cb, &db, &b[i]) == RDMAX_OK, "receiver %d", i);
        rdmax_conn_record ia, ib;
        rdmax_ep_query_record(a[i], &ia);
        rdmax_ep_query_record(b[i], &ib);
        REQUIRE(rdmax_ep_connect_record(a[i], &ib) == RDMAX_OK && rdmax_ep_connect_record(b[i], &ia) == RDMAX_OK,
                "connect %d", i);
    }
    /* windows well inside the receiver's 512 buffers; a datagram lost anyway is sent again (UD may
       lose): each must arrive exactly once with its own payload at its own endpoint */
    for (int round = 0; round < 3; round++) {
        for (int w = 0; w < n; w += 256) {
            int end = w + 256 < n ? w + 256 : n, sent = 0;
            for (int i = w; i < end; i++) {
                if (r.got[i])
                    continue;
                uint8_t msg[16];
                uint32_t seq = (uint32_t)i;
                memcpy(msg, &seq, 4);
                for (int k = 4; k < 16; k++)
                    msg[k] = (uint8_t)(seq * 3 + k);
                rdmax_status st;
                while ((st = rdmax_send(a[i], msg, sizeof msg, NULL, NULL)) == RDMAX_ERR_NO_RESOURCE)
                    rdmax_progress(ca);
                REQUIRE(st == RDMAX_OK, "send %d: %s", i, rdmax_status_str(st));
                sent++;
            }
            int want = r.count + sent;
            for (long spin = 0; r.count < want && spin < 2000000; spin++) {
                rdmax_progress(ca);
                rdmax_progress(cb);
            }
        }
    }
    int missing = 0, dup = 0;
    for (int i = 0; i < n; i++) {
        missing += r.got[i] == 0;
        dup += r.got[i] > 1;
    }
    CHECK(missing == 0 && dup == 0 && r.bad == 0, "%d missing, %d duplicated, %d wrong", missing, dup, r.bad);
    tl_end();
out:
    for (int i = 0; a && i < n; i++)
        rdmax_ep_destroy(a[i]);
    for (int i = 0; b && i < n; i++)
        rdmax_ep_destroy(b[i]);
    rdmax_ctx_destroy(ca);
    rdmax_ctx_destroy(cb);
    free(a);
    free(b);
    free(users);
    free(r.got);
    if (tl_case_failed)
        tl_end();
}

/* The multicast limits the manual states: one endpoint per context per group (a second one is refused
   until the first leaves), 8 groups per endpoint, 64 per context; each refusal a status, nothing joined. */
static void mcast_limits(const char *dev)
{
    enum { EPS = 9 };
    rdmax_ctx *c = open_ctx(dev);
    rdmax_ep *ep[EPS] = {0};
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    char g[32];
    tl_begin("ud/loopback/multicast limits: one endpoint per context per group, 8 groups per endpoint, 64 per "
             "context");
    for (int i = 0; i < EPS; i++)
        REQUIRE(rdmax_ep_create(c, &d, &ep[i]) == RDMAX_OK, "endpoint %d", i);
    CHECK_ST(rdmax_mcast_join(ep[0], "239.9.0.0"), RDMAX_OK);
    CHECK_ST(rdmax_mcast_join(ep[1], "239.9.0.0"), RDMAX_ERR_INVALID_PARAM);
    CHECK_ST(rdmax_mcast_leave(ep[0], "239.9.0.0"), RDMAX_OK);
    CHECK_ST(rdmax_mcast_join(ep[1], "239.9.0.0"), RDMAX_OK);  /* free again once the first left */
    CHECK_ST(rdmax_mcast_leave(ep[1], "239.9.0.0"), RDMAX_OK);
    /* 8 endpoints x 8 groups: the context's 64; each endpoint's ninth and the context's 65th refused */
    int joined = 0;
    for (int i = 0; i < 8; i++)
        for (int k = 0; k < 8; k++) {
            snprintf(g, sizeof g, "239.9.%d.%d", i, k + 1);
            joined += rdmax_mcast_join(ep[i], g) == RDMAX_OK;
        }
    CHECK(joined == 64, "%d of 64 joins succeeded", joined);
    snprintf(g, sizeof g, "239.9.0.100");
    CHECK_ST(rdmax_mcast_join(ep[0], g), RDMAX_ERR_NO_RESOURCE);  /* its ninth */
    CHECK_ST(rdmax_mcast_join(ep[8], g), RDMAX_ERR_NO_RESOURCE);  /* the context's 65th */
    CHECK(strstr(rdmax_ctx_query_last_error(c), "64 groups") != NULL, "the refusal's log line: %s", rdmax_ctx_query_last_error(c));
    CHECK_ST(rdmax_mcast_leave(ep[3], "239.9.3.1"), RDMAX_OK);
    CHECK_ST(rdmax_mcast_join(ep[8], g), RDMAX_OK);  /* room again */
    tl_end();
out:
    for (int i = 0; i < EPS; i++)
        rdmax_ep_destroy(ep[i]);
    rdmax_ctx_destroy(c);
    if (tl_case_failed)
        tl_end();
}

/* ---- twohost: multicast through rdma_cm across two hosts (tests/vm/run --topo twohost) ---------------- */
#define TH_PORT 18621
#define TH_GUARD_S 120  /* a hang guard: a lost datagram shows as a short count, not a hang */

/* Host 0 listens, host 1 connects (again until host 0 is there): the connection that orders the steps. */
static int th_connect(int host, const char *peer)
{
    int fd = -1;
    time_t t0 = time(NULL);
    if (host == 0) {
        int l = socket(AF_INET, SOCK_STREAM, 0), one = 1;
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_port = htons(TH_PORT);
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (l >= 0 && bind(l, (struct sockaddr *)&a, sizeof a) == 0 && listen(l, 1) == 0) {
            struct pollfd p = {l, POLLIN, 0};
            if (poll(&p, 1, TH_GUARD_S * 1000) == 1)
                fd = accept(l, NULL, NULL);
        }
        if (l >= 0)
            close(l);
        return fd;
    }
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons(TH_PORT);
    if (!peer || inet_pton(AF_INET, peer, &a.sin_addr) != 1)
        return -1;
    while (time(NULL) - t0 < TH_GUARD_S) {
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
            return fd;
        close(fd);
        fd = -1;
        usleep(100000);
    }
    return -1;
}

/* Both hosts at the same step: send c, then progress the contexts until the peer's c arrives. */
static int th_sync(int fd, char c, rdmax_ctx *const *cs, int n)
{
    char got = 0;
    if (write(fd, &c, 1) != 1)
        return -1;
    time_t t0 = time(NULL);
    struct pollfd p = {fd, POLLIN, 0};
    while (poll(&p, 1, 0) == 0 && time(NULL) - t0 < TH_GUARD_S)
        for (int i = 0; i < n; i++)
            rdmax_progress(cs[i]);
    return read(fd, &got, 1) == 1 && got == c ? 0 : -1;
}

/* Progress cs until *count reaches want (bounded by the guard). */
static void th_until(rdmax_ctx *const *cs, int n, const int *count, int want)
{
    time_t t0 = time(NULL);
    while (*count < want && time(NULL) - t0 < TH_GUARD_S)
        for (int i = 0; i < n; i++)
            rdmax_progress(cs[i]);
}

/* Every member on both hosts gets host 1's checked datagrams to a group joined through rdma_cm: host 0's
   two (one context each) and host 1's own. Then one of host 0's leaves: the other and host 1's get the
   next ones, it gets none (it would have them by the time its neighbour on the same device has them
   all: rxe hands one packet to every attached QP). Each host prints its own verdicts. */
static void twohost(void)
{
    const char *hs = getenv("RDMAX_HOST"), *dev = getenv("RDMAX_TEST_DEV0"), *peer = getenv("RDMAX_PEER_ADDR");
    int host = hs && !strcmp(hs, "1");
    rdmax_ctx *c[2] = {NULL, NULL};
    rdmax_ep *ep[2] = {NULL, NULL}, *tx = NULL;
    rdmax_mem *m = NULL;
    struct rx *r = (struct rx *)calloc(2, sizeof *r);
    int nc = host == 0 ? 2 : 1, fd = -1;
    tl_begin("ud/twohost/h%d/multicast (rdma_cm): joined, every member gets every message", host);
    REQUIRE(r, "calloc");
    for (int k = 0; k < nc; k++) {
        c[k] = open_ctx_mcast(dev, 0);
        rdmax_ep_desc d;
        memset(&d, 0, sizeof d);
        d.recv_cb = on_recv;
        d.user = &r[k];
        REQUIRE(rdmax_ep_create(c[k], &d, &ep[k]) == RDMAX_OK, "endpoint %d", k);
        g_mcast_log[0] = 0;
        rdmax_status st = rdmax_mcast_join(ep[k], GROUP);
        REQUIRE(st == RDMAX_OK, "member %d: join: %s (%s)", k, rdmax_status_str(st), g_mcast_log);
        CHECK(strstr(g_mcast_log, "through rdma_cm") != NULL, "member %d: %s", k, g_mcast_log);
    }
    if (host == 1) {
        REQUIRE(rdmax_mcast_ep_create(c[0], NULL, GROUP, &tx) == RDMAX_OK, "sender: %s", g_mcast_log);
        REQUIRE(rdmax_mem_alloc(c[0], 4096, RDMAX_ACCESS_LOCAL, &m) == RDMAX_OK, "alloc");
    }
    REQUIRE((fd = th_connect(host, peer)) >= 0, "no connection to the other host (%s)", peer ? peer : "?");
    REQUIRE(th_sync(fd, 'J', c, nc) == 0, "the other host did not join");
    for (int phase = 1; phase <= 2; phase++) {
        if (host == 1) {
            send_numbered(c[0], tx, m, (phase - 1) * NMSG, phase * NMSG);
            th_until(c, nc, &r[0].count, phase * NMSG);
        }
        REQUIRE(th_sync(fd, (char)('0' + phase), c, nc) == 0, "the other host is gone (phase %d)", phase);
        if (host == 0 && phase == 1) {
            th_until(c, nc, &r[0].count, NMSG);
            th_until(c, nc, &r[1].count, NMSG);
            for (int k = 0; k < 2; k++)
                CHECK(r[k].count == NMSG, "member %d got %d of %d", k, r[k].count, NMSG);
            CHECK_ST(rdmax_mcast_leave(ep[0], GROUP), RDMAX_OK);
        }
        if (host == 0 && phase == 2) {
            th_until(c, nc, &r[1].count, 2 * NMSG);
            for (int i = 0; i < 1000; i++)
                rdmax_progress(c[0]);
        }
        if (host == 1)
            CHECK(r[0].count == phase * NMSG, "host 1's member got %d of %d", r[0].count, phase * NMSG);
        /* after phase 1: host 0's member has left before host 1 sends again */
        REQUIRE(th_sync(fd, phase == 1 ? 'L' : 'E', c, nc) == 0, "the other host is gone");
        if (phase == 1) {
            tl_end();
            tl_begin("ud/twohost/h%d/multicast (rdma_cm): %s", host,
                     host == 0 ? "after one member leaves, it gets nothing, the other every message"
                               : "its member gets every message after a host-0 member left");
        }
    }
    for (int k = 0; k < nc; k++) {
        int distinct = 0;
        for (int i = 0; i < 2 * NMSG; i++)
            distinct += r[k].seen[i] == 1;
        int want = host == 0 && k == 0 ? NMSG : 2 * NMSG;
        CHECK(r[k].count == want && distinct == want && r[k].bad == 0, "member %d: %d messages (%d distinct, %d "
              "wrong bytes), %d expected", k, r[k].count, distinct, r[k].bad, want);
    }
    tl_end();
out:
    if (fd >= 0)
        close(fd);
    rdmax_ep_destroy(tx);
    rdmax_mem_free(m);
    for (int k = 0; k < 2; k++) {
        rdmax_ep_destroy(ep[k]);
        rdmax_ctx_destroy(c[k]);
    }
    free(r);
    if (tl_case_failed)
        tl_end();
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (argc > 1 && !strcmp(argv[1], "twohost")) {
        twohost();
        return tl_failed_total ? 1 : 0;
    }
    int cross = argc > 1 && !strcmp(argv[1], "cross");
    const char *d0 = getenv("RDMAX_TEST_DEV0"), *d1 = getenv("RDMAX_TEST_DEV1");
    if (cross && !d1) {
        printf("FAIL ud/cross/setup: RDMAX_TEST_DEV1 is not set\n");
        return 1;
    }
    rdmax_ctx *cs = open_ctx(cross ? d1 : d0), *cr = cross ? open_ctx(d0) : cs;
    const char *topo = cross ? "cross" : "loopback";
    unicast(topo, cs, cr);
    multicast(topo, cross ? d1 : d0, d0, 0);
    multicast(topo, cross ? d1 : d0, d0, RDMAX_MCAST_ATTACH);
    if (!cross) {
        mcast_failed_join(d0);
        scale(d0, 10000);
        shared_qp_failure(d0);
        zero_byte(d0);
        mcast_limits(d0);
    } else {
        sender_identity(d0, d1, rdmax_ctx_query_attr(cs));
    }
    if (cr != cs)
        rdmax_ctx_destroy(cr);
    rdmax_ctx_destroy(cs);
    return tl_failed_total ? 1 : 0;
}
