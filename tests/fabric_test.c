/* Real fabrics on a fake device (issue 29): soft-RoCE cannot be an InfiniBand port, an iWARP device or a
   device without atomics or shared receive queues, so here the verbs calls are checked on a fake device
   that rdmax drives through its hooks (the context's modify_qp and create_ah, the endpoint's post_send):
   tests/fakedev.h, the fuzz targets' too. Each port kind is what ibv_query_device / ibv_query_port / the GID table
   report, fed to the same code rdmax_ctx_create runs (rdmax__port_attr, rdmax__caps_report); the fake
   records every attribute rdmax passes.
   - InfiniBand (LID 7, subnet prefix fe80::, GID type IB): a pair's RTR carries the peer's LID, SL and
     the lower path MTU, without a GRH in one subnet, with one (GID, hop limit, SGID index) across two
     prefixes or when the desc asks; UD address handles likewise;
   - RoCE v1 and v2 (IPv4-mapped and IPv6 GIDs): a GRH always, field by field as rxe gets it; v1 and v2
     peers, and RoCE and InfiniBand peers, refuse each other with RDMAX_ERR_OOB_LINK;
   - multicast: an InfiniBand port joins through rdma_cm (the fake has none, so the join stops there with
     RDMAX_ERR_NO_DEVICE and a sentence, before anything is attached or an endpoint made), the direct
     attach is refused on it; RoCE v2 takes rdma_cm by default and the direct attach when asked;
   - iWARP: refused with a sentence naming what is missing; no atomics: rdmax_fadd / rdmax_cswap return
     RDMAX_ERR_UNSUPPORTED on the fast and the general path and post nothing, reads still post; no SRQ:
     RC endpoints get pools of their own, said once; max_inline 0 and max_sge 1 in the capability line
     and the endpoint's applied desc. */
#define RDMAX_TRANSPORT_RC
#define RDMAX_TRANSPORT_UD
#define RDMAX_IMPLEMENTATION
#include "../rdmax.h"
#include "testlib.h"
#include "fakedev.h"

/* ---- the fake device ------------------------------------------------------------------------------ */
typedef struct fqp {
    struct ibv_qp qp;
    struct ibv_qp_attr rtr;  /* the attributes of the last move to RTR */
    int rtr_mask, n_rtr;
} fqp;

static int g_posts;              /* requests that reached the provider's post_send */
static struct ibv_ah_attr g_ah[8];
static struct ibv_ah g_ahs[8];
static int g_n_ah;
static char g_log[8][600];       /* the last messages logged, newest at g_n_log - 1 */
static rdmax_log_item g_item[8];
static int g_n_log;

static int fake_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
    fqp *q = (fqp *)(void *)qp;
    if (a->qp_state == IBV_QPS_RTR) {
        q->rtr = *a;
        q->rtr_mask = mask;
        q->n_rtr++;
    }
    qp->state = a->qp_state;
    return 0;
}

static struct ibv_ah *fake_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *a)
{
    (void)pd;
    if (g_n_ah == 8)
        return NULL;
    g_ah[g_n_ah] = *a;
    return &g_ahs[g_n_ah++];
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    (void)qp, (void)bad;
    for (; wr; wr = wr->next)
        g_posts++;
    return 0;
}

static void capture(rdmax_log_level lvl, rdmax_log_item item, const char *msg, void *user)
{
    (void)lvl, (void)user;
    int k = g_n_log < 8 ? g_n_log++ : (memmove(g_log, g_log + 1, sizeof g_log[0] * 7),
                                       memmove(g_item, g_item + 1, sizeof g_item[0] * 7), 7);
    snprintf(g_log[k], sizeof g_log[k], "%s", msg);
    g_item[k] = item;
}

/* the newest message of item, or NULL; how many of item are kept */
static const char *logged(rdmax_log_item item, int *count)
{
    const char *m = NULL;
    int n = 0;
    for (int i = 0; i < g_n_log; i++)
        if (g_item[i] == item) {
            m = g_log[i];
            n++;
        }
    if (count)
        *count = n;
    return m;
}

/* ---- ports -------------------------------------------------------------------------------------------- */
typedef struct port {
    const char *name;
    int link_layer;            /* as ibv_query_port reports it */
    uint16_t lid;
    int gid_type;
    const char *gid;           /* text, inet_pton(AF_INET6) */
    enum ibv_mtu mtu;
    enum ibv_atomic_cap atomic;
    int max_srq, max_sge;
    uint32_t max_inline;       /* what the probe found */
} port;

static const port IB = {"ib0", IBV_LINK_LAYER_INFINIBAND, 7, IBV_GID_TYPE_IB, "fe80::2:c903:1:21", IBV_MTU_4096,
                        IBV_ATOMIC_HCA, 1024, 30, 220};
static const port IB_PEER = {"ib1", IBV_LINK_LAYER_INFINIBAND, 9, IBV_GID_TYPE_IB, "fe80::2:c903:1:35", IBV_MTU_2048,
                             IBV_ATOMIC_HCA, 1024, 30, 220};
/* the same fabric behind a router: another subnet prefix */
static const port IB_FAR = {"ib2", IBV_LINK_LAYER_INFINIBAND, 12, IBV_GID_TYPE_IB, "fec0:0:0:1:2:c903:1:77",
                            IBV_MTU_4096, IBV_ATOMIC_HCA, 1024, 30, 220};
/* an old provider's InfiniBand port: link layer UNSPECIFIED */
static const port IB_OLD = {"ib3", IBV_LINK_LAYER_UNSPECIFIED, 3, IBV_GID_TYPE_IB, "fe80::2:c903:1:99", IBV_MTU_4096,
                            IBV_ATOMIC_HCA, 1024, 30, 220};
static const port ROCE2 = {"rxe0", IBV_LINK_LAYER_ETHERNET, 0, IBV_GID_TYPE_ROCE_V2, "::ffff:10.0.0.1", IBV_MTU_1024,
                           IBV_ATOMIC_HCA, 262144, 32, 400};
static const port ROCE2_PEER = {"rxe1", IBV_LINK_LAYER_ETHERNET, 0, IBV_GID_TYPE_ROCE_V2, "::ffff:10.0.0.2",
                                IBV_MTU_4096, IBV_ATOMIC_HCA, 262144, 32, 400};
static const port ROCE2_V6 = {"rxe2", IBV_LINK_LAYER_ETHERNET, 0, IBV_GID_TYPE_ROCE_V2, "fd00::1", IBV_MTU_1024,
                              IBV_ATOMIC_HCA, 262144, 32, 400};
static const port ROCE2_V6_PEER = {"rxe3", IBV_LINK_LAYER_ETHERNET, 0, IBV_GID_TYPE_ROCE_V2, "fd00::2",
                                   IBV_MTU_1024, IBV_ATOMIC_HCA, 262144, 32, 400};
static const port ROCE1 = {"mlx0", IBV_LINK_LAYER_ETHERNET, 0, IBV_GID_TYPE_ROCE_V1, "fe80::a:1", IBV_MTU_1024,
                           IBV_ATOMIC_HCA, 1024, 30, 220};
static const port ROCE1_PEER = {"mlx1", IBV_LINK_LAYER_ETHERNET, 0, IBV_GID_TYPE_ROCE_V1, "fe80::a:2", IBV_MTU_1024,
                                IBV_ATOMIC_HCA, 1024, 30, 220};
/* what several NICs lack: atomics, shared receive queues, inline data, more than one SGE */
static const port BARE = {"bare0", IBV_LINK_LAYER_ETHERNET, 0, IBV_GID_TYPE_ROCE_V2, "::ffff:10.0.0.3", IBV_MTU_1024,
                          IBV_ATOMIC_NONE, 0, 1, 0};
static const port BARE_PEER = {"bare1", IBV_LINK_LAYER_ETHERNET, 0, IBV_GID_TYPE_ROCE_V2, "::ffff:10.0.0.4",
                               IBV_MTU_1024, IBV_ATOMIC_NONE, 0, 1, 0};

#define GID_INDEX 3

/* A context on port p, as rdmax_ctx_create leaves it (the parts the connection paths read). */
static rdmax_ctx *mkctx(const port *p, const rdmax_ctx_desc *desc)
{
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    memset(&da, 0, sizeof da);
    memset(&pa, 0, sizeof pa);
    da.max_qp_wr = 16384;
    da.max_sge = p->max_sge;
    da.max_cqe = 65536;
    da.max_qp = 1 << 16;
    da.max_qp_rd_atom = 16;
    da.max_srq = p->max_srq;
    da.max_srq_wr = p->max_srq ? 16384 : 0;
    da.atomic_cap = p->atomic;
    pa.state = IBV_PORT_ACTIVE;
    pa.active_mtu = p->mtu;
    pa.max_msg_sz = 1u << 31;
    pa.link_layer = (uint8_t)p->link_layer;
    pa.lid = p->lid;
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    if (desc)
        d = *desc;
    d.logger.func = capture;
    d.recv_size = 4096;
    rdmax_ctx *ctx = fd_ctx_alloc(&d, RDMAX_LOG_DEBUG, 8);
    uint8_t gid[16];
    inet_pton(AF_INET6, p->gid, gid);
    fd_ctx_port(ctx, p->name, &da, &pa, gid, p->gid_type, GID_INDEX, p->max_inline);
    fd_ctx_ud(ctx, 4096 + RDMAX_UD_GRH);  /* the UD QP's receive size, for UD records */
    fd_ctx_ready(ctx, NULL, NULL, 64);
    return ctx;
}

/* An endpoint of transport tr on QP q, as rdmax_ep_create leaves it before it connects. */
static rdmax_ep *mkep(rdmax_ctx *ctx, fqp *q, uint8_t tr, uint32_t qpn, uint32_t signal_interval)
{
    memset(q, 0, sizeof *q);
    q->qp.context = &fd_vctx.context;
    q->qp.qp_type = tr == RDMAX_TRANSPORT_ID_RC ? IBV_QPT_RC : IBV_QPT_UD;
    q->qp.qp_num = qpn;
    q->qp.state = IBV_QPS_INIT;
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.signal_interval = signal_interval;
    return fd_ep_create_desc(ctx, &q->qp, &d);
}

/* The record ep sends, through the wire format (encode, decode) as the TCP handshake carries it. */
static rdmax_status record_of(const rdmax_ep *ep, rdmax_conn_record *out)
{
    rdmax_conn_record mine;
    uint8_t wire[RDMAX_CONN_RECORD_SIZE];
    rdmax_ep_query_record(ep, &mine);
    size_t n = rdmax_conn_record_encode(&mine, wire);
    return rdmax_conn_record_decode(wire, n, out, NULL, 0);
}

/* An RC pair of ports pa and pb: both records through the wire format, then connect each side. The
   RTR attributes each side gave its QP are in qa->rtr, qb->rtr. */
typedef struct pair {
    rdmax_ctx *ca, *cb;
    rdmax_ep *a, *b;
    fqp qa, qb;
    rdmax_status sa, sb;       /* the two connect_info calls */
} pair;

static void mkpair(pair *p, const port *pa, const port *pb, const rdmax_ctx_desc *desc, uint32_t signal_interval)
{
    memset(p, 0, sizeof *p);
    p->ca = mkctx(pa, desc);
    p->cb = mkctx(pb, desc);
    p->a = mkep(p->ca, &p->qa, RDMAX_TRANSPORT_ID_RC, 0x101, signal_interval);
    p->b = mkep(p->cb, &p->qb, RDMAX_TRANSPORT_ID_RC, 0x202, signal_interval);
    rdmax_conn_record ia, ib;
    rdmax_status s1 = record_of(p->a, &ia), s2 = record_of(p->b, &ib);
    CHECK(s1 == RDMAX_OK && s2 == RDMAX_OK, "a record did not decode: %s / %s", rdmax_status_str(s1),
          rdmax_status_str(s2));
    p->sa = rdmax_ep_connect_record(p->a, &ib);
    p->sb = rdmax_ep_connect_record(p->b, &ia);
}

static void freepair(pair *p)
{
    fd_ep_destroy(p->a);
    fd_ep_destroy(p->b);
    fd_ctx_destroy(p->ca);
    fd_ctx_destroy(p->cb);
}

static int gid_eq(const union ibv_gid *g, const char *text)
{
    uint8_t b[16];
    inet_pton(AF_INET6, text, b);
    return !memcmp(g->raw, b, 16);
}

/* RTR of an RC QP towards peer: the fields every link layer sets alike */
static void check_rtr_common(const fqp *q, const port *me, const port *peer, uint32_t peer_qpn)
{
    enum ibv_mtu lower = me->mtu < peer->mtu ? me->mtu : peer->mtu;
    CHECK(q->n_rtr == 1, "%d moves to RTR", q->n_rtr);
    CHECK(q->rtr_mask & IBV_QP_AV, "RTR without IBV_QP_AV");
    CHECK(q->rtr.dest_qp_num == peer_qpn, "dest_qp_num 0x%x, the peer's QP is 0x%x", q->rtr.dest_qp_num, peer_qpn);
    CHECK(q->rtr.path_mtu == lower, "path MTU %d, the lower of the two ports' is %d", q->rtr.path_mtu, lower);
    CHECK(q->rtr.ah_attr.port_num == 1, "port_num %u", q->rtr.ah_attr.port_num);
}

static void check_grh(const struct ibv_ah_attr *a, const char *dgid)
{
    CHECK(a->is_global == 1, "is_global %u, a GRH is needed", a->is_global);
    CHECK(gid_eq(&a->grh.dgid, dgid), "dgid is not the peer's %s", dgid);
    CHECK(a->grh.sgid_index == GID_INDEX, "sgid_index %u, the context's GID is %d", a->grh.sgid_index, GID_INDEX);
    CHECK(a->grh.hop_limit == 64, "hop_limit %u", a->grh.hop_limit);
}

/* ---- InfiniBand --------------------------------------------------------------------------------------- */
static void test_ib_attr(void)
{
    rdmax_ctx *ctx = mkctx(&IB, NULL);
    CHECK(rdmax_ctx_query_attr(ctx)->link_layer == IBV_LINK_LAYER_INFINIBAND && rdmax_ctx_query_attr(ctx)->lid == 7 &&
          rdmax_ctx_query_attr(ctx)->gid_type == IBV_GID_TYPE_IB, "attr: link layer %d lid %u gid type %d", rdmax_ctx_query_attr(ctx)->link_layer,
          rdmax_ctx_query_attr(ctx)->lid, rdmax_ctx_query_attr(ctx)->gid_type);
    fd_ctx_destroy(ctx);
    ctx = mkctx(&IB_OLD, NULL);
    CHECK(rdmax_ctx_query_attr(ctx)->link_layer == IBV_LINK_LAYER_INFINIBAND && rdmax_ctx_query_attr(ctx)->lid == 3,
          "a port reporting link layer UNSPECIFIED reads as %d, lid %u (InfiniBand, 3 expected)",
          rdmax_ctx_query_attr(ctx)->link_layer, rdmax_ctx_query_attr(ctx)->lid);
    fd_ctx_destroy(ctx);
}

/* An RC pair of InfiniBand ports, IB and peer, with desc (NULL: none): both connect, each QP's RTR goes
   to the other's QP and LID with the lower MTU. */
static void ib_pair(pair *p, const port *peer, const rdmax_ctx_desc *desc)
{
    mkpair(p, &IB, peer, desc, 0);
    CHECK_ST(p->sa, RDMAX_OK);
    CHECK_ST(p->sb, RDMAX_OK);
    check_rtr_common(&p->qa, &IB, peer, 0x202);
    check_rtr_common(&p->qb, peer, &IB, 0x101);
    CHECK(p->qa.rtr.ah_attr.dlid == peer->lid && p->qb.rtr.ah_attr.dlid == IB.lid,
          "dlid %u and %u, the peers' LIDs are %u and %u", p->qa.rtr.ah_attr.dlid, p->qb.rtr.ah_attr.dlid, peer->lid,
          IB.lid);
}

static void test_ib_one_subnet(void)
{
    pair p;
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    d.sl = 5;
    ib_pair(&p, &IB_PEER, &d);
    CHECK(p.qa.rtr.ah_attr.is_global == 0 && p.qb.rtr.ah_attr.is_global == 0,
          "is_global %u / %u within one subnet prefix", p.qa.rtr.ah_attr.is_global, p.qb.rtr.ah_attr.is_global);
    CHECK(p.qa.rtr.ah_attr.sl == 5 && p.qb.rtr.ah_attr.sl == 5, "sl %u / %u, the desc asks 5", p.qa.rtr.ah_attr.sl,
          p.qb.rtr.ah_attr.sl);
    CHECK(rdmax_ep_query_state(p.a) == RDMAX_EP_CONNECTED, "not connected");
    freepair(&p);
}

static void test_ib_two_subnets(void)
{
    pair p;
    ib_pair(&p, &IB_FAR, NULL);
    check_grh(&p.qa.rtr.ah_attr, IB_FAR.gid);
    check_grh(&p.qb.rtr.ah_attr, IB.gid);
    CHECK(p.qa.rtr.ah_attr.sl == 0, "sl %u without a desc or RDMAX_SL", p.qa.rtr.ah_attr.sl);
    freepair(&p);
}

static void test_ib_force_grh(void)
{
    pair p;
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    d.force_grh = true;
    ib_pair(&p, &IB_PEER, &d);
    check_grh(&p.qa.rtr.ah_attr, IB_PEER.gid);
    freepair(&p);
}

/* UD: the address handle of a peer, and the one for the flush marker to our own QP */
static void test_ib_ud(void)
{
    rdmax_ctx *ca = mkctx(&IB, NULL), *cb = mkctx(&IB_PEER, NULL), *cf = mkctx(&IB_FAR, NULL);
    fqp qa, qb, qf;
    rdmax_ep *a = mkep(ca, &qa, RDMAX_TRANSPORT_ID_UD, 0x301, 0);
    rdmax_ep *b = mkep(cb, &qb, RDMAX_TRANSPORT_ID_UD, 0x302, 0);
    rdmax_ep *a2 = mkep(ca, &qa, RDMAX_TRANSPORT_ID_UD, 0x301, 0);
    rdmax_ep *f = mkep(cf, &qf, RDMAX_TRANSPORT_ID_UD, 0x303, 0);
    rdmax_conn_record ib, ifar;
    g_n_ah = 0;
    CHECK_ST(record_of(b, &ib), RDMAX_OK);
    CHECK_ST(record_of(f, &ifar), RDMAX_OK);
    CHECK_ST(rdmax_ep_connect_record(a, &ib), RDMAX_OK);
    CHECK(g_n_ah == 1, "%d address handles", g_n_ah);
    CHECK(g_ah[0].dlid == 9 && g_ah[0].is_global == 0 && g_ah[0].port_num == 1,
          "one subnet: dlid %u is_global %u port %u", g_ah[0].dlid, g_ah[0].is_global, g_ah[0].port_num);
    CHECK_ST(rdmax_ep_connect_record(a2, &ifar), RDMAX_OK);
    CHECK(g_n_ah == 2 && g_ah[1].dlid == 12, "two prefixes: %d handles, dlid %u", g_n_ah, g_ah[1].dlid);
    check_grh(&g_ah[1], IB_FAR.gid);
    CHECK(fd_ep_peer_lid(a) == 9, "the datagram check's peer LID %u", fd_ep_peer_lid(a));
    /* the receive path's sender check: without a GRH (one subnet) by the source LID */
    struct ibv_wc wc;
    uint8_t grh[40];
    memset(&wc, 0, sizeof wc);
    memset(grh, 0, sizeof grh);
    wc.slid = 9;
    CHECK(fd_ep_ud_sender(a, &wc, grh) == 1, "a datagram from LID 9 refused");
    wc.slid = 10;
    CHECK(fd_ep_ud_sender(a, &wc, grh) == 0, "a datagram from LID 10 taken for 9's");
    fd_ep_destroy(a);
    fd_ep_destroy(a2);
    fd_ep_destroy(b);
    fd_ep_destroy(f);
    fd_ctx_destroy(ca);
    fd_ctx_destroy(cb);
    fd_ctx_destroy(cf);
}

/* ---- RoCE ------------------------------------------------------------------------------------------------ */
static void roce_pair(const port *pa, const port *pb)
{
    pair p;
    g_n_ah = 0;
    mkpair(&p, pa, pb, NULL, 0);
    CHECK_ST(p.sa, RDMAX_OK);
    CHECK_ST(p.sb, RDMAX_OK);
    check_rtr_common(&p.qa, pa, pb, 0x202);
    check_rtr_common(&p.qb, pb, pa, 0x101);
    check_grh(&p.qa.rtr.ah_attr, pb->gid);
    check_grh(&p.qb.rtr.ah_attr, pa->gid);
    CHECK(p.qa.rtr.ah_attr.dlid == 0 && p.qa.rtr.ah_attr.sl == 0 && p.qa.rtr.ah_attr.static_rate == 0 &&
          p.qa.rtr.ah_attr.src_path_bits == 0 && p.qa.rtr.ah_attr.grh.flow_label == 0 &&
          p.qa.rtr.ah_attr.grh.traffic_class == 0,
          "RoCE RTR: dlid %u sl %u rate %u path bits %u flow %u class %u (all 0, as before version 4)",
          p.qa.rtr.ah_attr.dlid, p.qa.rtr.ah_attr.sl, p.qa.rtr.ah_attr.static_rate, p.qa.rtr.ah_attr.src_path_bits,
          p.qa.rtr.ah_attr.grh.flow_label, p.qa.rtr.ah_attr.grh.traffic_class);
    CHECK(rdmax_ctx_query_attr(p.ca)->lid == 0 && rdmax_ctx_query_attr(p.ca)->link_layer == IBV_LINK_LAYER_ETHERNET, "attr lid %u link layer %d",
          rdmax_ctx_query_attr(p.ca)->lid, rdmax_ctx_query_attr(p.ca)->link_layer);
    freepair(&p);
    /* UD: the same address handle */
    rdmax_ctx *ca = mkctx(pa, NULL), *cb = mkctx(pb, NULL);
    fqp qa, qb;
    rdmax_ep *a = mkep(ca, &qa, RDMAX_TRANSPORT_ID_UD, 0x301, 0), *b = mkep(cb, &qb, RDMAX_TRANSPORT_ID_UD, 0x302, 0);
    rdmax_conn_record ib;
    CHECK_ST(record_of(b, &ib), RDMAX_OK);
    CHECK_ST(rdmax_ep_connect_record(a, &ib), RDMAX_OK);
    CHECK(g_n_ah == 1 && g_ah[0].dlid == 0 && g_ah[0].port_num == 1, "UD: %d handles, dlid %u", g_n_ah, g_ah[0].dlid);
    check_grh(&g_ah[0], pb->gid);
    fd_ep_destroy(a);
    fd_ep_destroy(b);
    fd_ctx_destroy(ca);
    fd_ctx_destroy(cb);
}

static void test_roce_v2_ipv4(void) { roce_pair(&ROCE2, &ROCE2_PEER); }
static void test_roce_v2_ipv6(void) { roce_pair(&ROCE2_V6, &ROCE2_V6_PEER); }
static void test_roce_v1(void) { roce_pair(&ROCE1, &ROCE1_PEER); }

/* peers that cannot reach each other: refused before the QP moves, with a sentence */
static void refused_pair(const port *pa, const port *pb, const char *want_a, const char *want_b)
{
    pair p;
    g_n_log = 0;
    mkpair(&p, pa, pb, NULL, 0);
    CHECK_ST(p.sa, RDMAX_ERR_OOB_LINK);
    CHECK_ST(p.sb, RDMAX_ERR_OOB_LINK);
    CHECK(p.qa.n_rtr == 0 && p.qb.n_rtr == 0, "a QP moved to RTR");
    const char *m = logged(RDMAX_LOG_ITEM_PEER_TRANSPORT, NULL);
    CHECK(m && strstr(m, want_a) && strstr(m, want_b), "the log says: %s", m ? m : "(nothing)");
    freepair(&p);
}

static void test_roce_v1_v2(void) { refused_pair(&ROCE1, &ROCE2, "GID type RoCE v2", "RoCE v1"); }
static void test_ib_roce(void) { refused_pair(&IB, &ROCE2, "Ethernet with GID type RoCE v2", "InfiniBand"); }

/* ---- capabilities ------------------------------------------------------------------------------------ */
static void test_caps_line(void)
{
    g_n_log = 0;
    rdmax_ctx *ctx = mkctx(&ROCE2, NULL);
    const char *m = logged(RDMAX_LOG_ITEM_DEVICE_CAPS, NULL);
    CHECK(m && strstr(m, "atomics HCA") && strstr(m, "shared receive queues yes") && strstr(m, "inline 400 bytes") &&
          strstr(m, "32 SGEs"), "rxe's line: %s", m ? m : "(none)");
    fd_ctx_destroy(ctx);
    g_n_log = 0;
    ctx = mkctx(&BARE, NULL);
    int n;
    m = logged(RDMAX_LOG_ITEM_DEVICE_CAPS, &n);
    CHECK(n == 1, "%d capability lines", n);
    CHECK(m && strstr(m, "atomics none (rdmax_fadd and rdmax_cswap return RDMAX_ERR_UNSUPPORTED)") &&
          strstr(m, "shared receive queues none,") &&
          strstr(m, "inline none") && strstr(m, "1 SGE (rdmax_*_iov take one entry)"), "the bare device's line: %s",
          m ? m : "(none)");
    CHECK(rdmax_ctx_query_attr(ctx)->atomic_cap == IBV_ATOMIC_NONE && rdmax_ctx_query_attr(ctx)->max_srq == 0 && rdmax_ctx_query_attr(ctx)->max_srq_wr == 0,
          "attr: atomic_cap %d max_srq %u", rdmax_ctx_query_attr(ctx)->atomic_cap, rdmax_ctx_query_attr(ctx)->max_srq);
    fd_ctx_destroy(ctx);
}

/* a fadd and a cswap on a connected endpoint: each must be refused before anything is posted */
static void atomics_refused(pair *p, const char *gate)
{
    rdmax_mem m;
    memset(&m, 0, sizeof m);
    m.lkey = 0x77;
    uint64_t res = 0;
    rdmax_comp c;
    memset(&c, 0, sizeof c);
    fd_ep_view v = fd_ep_look(p->a);
    uint32_t head = v.head, rd = v.rd_avail;
    int32_t spare = fd_ctx_scq_spare(p->ca);
    rdmax_counters c0, c1;
    rdmax_ctx_query_counters(p->ca, &c0);
    g_posts = 0;
    CHECK(fd_ep_refuses_atomics(p->a), "%s: the endpoint posts through the provider's post_send", gate);
    CHECK_ST(rdmax_fadd(p->a, &res, &m, 0x1000, 0x99, 1, NULL), RDMAX_ERR_UNSUPPORTED);
    CHECK_ST(rdmax_cswap(p->a, &res, &m, 0x1000, 0x99, 0, 1, NULL), RDMAX_ERR_UNSUPPORTED);
    CHECK_ST(rdmax_fadd(p->a, &res, &m, 0x1000, 0x99, 1, &c), RDMAX_ERR_UNSUPPORTED);   /* the general path */
    CHECK_ST(rdmax_cswap(p->a, &res, &m, 0x1000, 0x99, 0, 1, &c), RDMAX_ERR_UNSUPPORTED);
    CHECK(g_posts == 0, "%s: %d atomics reached the device", gate, g_posts);
    v = fd_ep_look(p->a);
    CHECK(v.head == head && v.rd_avail == rd && fd_ctx_scq_spare(p->ca) == spare,
          "%s: a refused atomic kept a slot, read budget or CQ entry (head %u/%u rd %u/%u spare %d/%d)", gate,
          v.head, head, v.rd_avail, rd, fd_ctx_scq_spare(p->ca), spare);
    /* reads still go */
    uint64_t buf;
    CHECK_ST(rdmax_get(p->a, &buf, 8, &m, 0x1000, 0x99, NULL), RDMAX_INPROGRESS);
    CHECK(g_posts == 1, "%s: the get posted %d requests", gate, g_posts);
    /* the fast post counts before it posts: a refused one takes its counts back */
    rdmax_ctx_query_counters(p->ca, &c1);
    CHECK(c1.posted[RDMAX_OP_FADD] == c0.posted[RDMAX_OP_FADD] &&
          c1.posted[RDMAX_OP_CSWAP] == c0.posted[RDMAX_OP_CSWAP] &&
          c1.posted[RDMAX_OP_GET] == c0.posted[RDMAX_OP_GET] + 1 && c1.bytes[RDMAX_OP_GET] == c0.bytes[RDMAX_OP_GET] + 8,
          "%s: counted fadd %llu cswap %llu get %llu (%llu bytes) after 4 refused atomics and one get", gate,
          (unsigned long long)(c1.posted[RDMAX_OP_FADD] - c0.posted[RDMAX_OP_FADD]),
          (unsigned long long)(c1.posted[RDMAX_OP_CSWAP] - c0.posted[RDMAX_OP_CSWAP]),
          (unsigned long long)(c1.posted[RDMAX_OP_GET] - c0.posted[RDMAX_OP_GET]),
          (unsigned long long)(c1.bytes[RDMAX_OP_GET] - c0.bytes[RDMAX_OP_GET]));
}

static void test_no_atomics(void)
{
    pair p;
    mkpair(&p, &BARE, &BARE_PEER, NULL, 0);  /* signal every 16th: the unsignaled fast post */
    REQUIRE(p.sa == RDMAX_OK, "connect: %s", rdmax_status_str(p.sa));
    atomics_refused(&p, "unsignaled");
    freepair(&p);
    mkpair(&p, &BARE, &BARE_PEER, NULL, 1);  /* every request signaled: rdmax__fast_post_signaled */
    REQUIRE(p.sa == RDMAX_OK, "connect: %s", rdmax_status_str(p.sa));
    atomics_refused(&p, "signaled");
out:
    freepair(&p);
    /* the control: a device with atomics posts the same fadd */
    mkpair(&p, &ROCE2, &ROCE2_PEER, NULL, 0);
    rdmax_mem m;
    memset(&m, 0, sizeof m);
    uint64_t res;
    g_posts = 0;
    CHECK(!fd_ep_refuses_atomics(p.a), "an endpoint of a device with atomics posts through another function");
    CHECK_ST(rdmax_fadd(p.a, &res, &m, 0x1000, 0x99, 1, NULL), RDMAX_INPROGRESS);
    CHECK(g_posts == 1, "with atomics: %d posted", g_posts);
    freepair(&p);
}

static void test_no_srq(void)
{
    rdmax_ctx *ctx = mkctx(&BARE, NULL);
    fqp q1, q2;
    g_n_log = 0;
    rdmax_ep *a = mkep(ctx, &q1, RDMAX_TRANSPORT_ID_RC, 0x11, 0), *b = mkep(ctx, &q2, RDMAX_TRANSPORT_ID_RC, 0x12, 0);
    /* the shared pool needs no SRQ (each endpoint receives on its own queue): the default, adapting windows */
    CHECK(rdmax_ep_query_desc(a).recv_pool == RDMAX_RECV_POOL_SHARED && rdmax_ep_query_desc(b).recv_pool == RDMAX_RECV_POOL_SHARED &&
              rdmax_ep_query_desc(a).max_window == 64,
          "recv_pool %u / %u, max_window %u: the shared pool and adapting windows expected without an SRQ",
          rdmax_ep_query_desc(a).recv_pool, rdmax_ep_query_desc(b).recv_pool, rdmax_ep_query_desc(a).max_window);
    int n;
    const char *m = logged(RDMAX_LOG_ITEM_SRQ, &n);
    CHECK(n == 0, "said %d times: %s", n, m ? m : "(nothing)");
    CHECK(rdmax_ep_query_desc(a).max_inline == 0, "max_inline %u on a device without inline data", rdmax_ep_query_desc(a).max_inline);
    fd_ep_destroy(a);
    fd_ep_destroy(b);
    fd_ctx_destroy(ctx);
    /* the control: the same with shared receive queues */
    ctx = mkctx(&ROCE2, NULL);
    a = mkep(ctx, &q1, RDMAX_TRANSPORT_ID_RC, 0x11, 0);
    CHECK(rdmax_ep_query_desc(a).recv_pool == RDMAX_RECV_POOL_SHARED, "recv_pool %u with an SRQ", rdmax_ep_query_desc(a).recv_pool);
    fd_ep_destroy(a);
    fd_ctx_destroy(ctx);
}

static void test_iwarp(void)
{
    rdmax_ctx *ctx = mkctx(&ROCE2, NULL);
    g_n_log = 0;
    CHECK_ST(fd_dev_usable(ctx, "iwp0", IBV_NODE_RNIC, IBV_TRANSPORT_IWARP, 1), RDMAX_ERR_UNSUPPORTED);
    const char *m = logged(RDMAX_LOG_ITEM_DEVICE_CAPS, NULL);
    CHECK(m && strstr(m, "iwp0") && strstr(m, "iWARP") && strstr(m, "immediate data") && strstr(m, "UD"),
          "the sentence: %s", m ? m : "(nothing)");
    CHECK_ST(fd_dev_usable(ctx, "iwp0", IBV_NODE_RNIC, IBV_TRANSPORT_IWARP, 0), RDMAX_ERR_UNSUPPORTED);
    m = logged(RDMAX_LOG_ITEM_DEVICE_CAPS, NULL);
    CHECK(m && strstr(m, "passed over"), "unnamed: %s", m ? m : "(nothing)");
    CHECK_ST(fd_dev_usable(ctx, "mlx5_0", IBV_NODE_CA, IBV_TRANSPORT_IB, 1), RDMAX_OK);
    fd_ctx_destroy(ctx);
}

/* ---- multicast ----------------------------------------------------------------------------------- */
/* An InfiniBand port's groups are joined through rdma_cm, which asks the subnet manager: rdmax_mcast_join
   and rdmax_mcast_ep_create take that path. No rdma_cm device here is "ib0" (the host may have no
   rdma_cm at all), so each stops at rdma_cm with RDMAX_ERR_NO_DEVICE and a sentence, nothing attached
   (the fake QP has no attach: the direct path would not get that far) and no endpoint made. */
static void test_ib_mcast(void)
{
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    rdmax_ctx *ctx = mkctx(&IB, &d);
    fqp q;
    rdmax_ep *ep = mkep(ctx, &q, RDMAX_TRANSPORT_ID_UD, 0x301, 0), *tx = (rdmax_ep *)&q;
    int cm = -1;
    CHECK_ST(rdmax__mcast_path(ctx, "239.1.2.3", &cm), RDMAX_OK);
    CHECK(cm == 1, "InfiniBand, default desc: path %s", cm ? "rdma_cm" : "ibv_attach_mcast");
    g_n_log = 0;
    CHECK_ST(rdmax_mcast_join(ep, "239.1.2.3"), RDMAX_ERR_NO_DEVICE);
    const char *m = logged(RDMAX_LOG_ITEM_MCAST, NULL);
    CHECK(m && strstr(m, "239.1.2.3") && strstr(m, "ib0") && strstr(m, "rdma_cm"), "the sentence: %s",
          m ? m : "(nothing)");
    CHECK(ctx->ud->n_groups == 0 && (!ep->mcast || ep->mcast->n == 0), "a failed join left %u groups",
          ctx->ud->n_groups);
    g_n_log = 0;
    CHECK_ST(rdmax_mcast_ep_create(ctx, NULL, "239.1.2.4", &tx), RDMAX_ERR_NO_DEVICE);  /* (another sentence: not folded into a repeat) */
    CHECK(tx == NULL && ctx->n_eps == 1, "a failed sending endpoint: out %p, %u endpoints", (void *)tx, ctx->n_eps);
    m = logged(RDMAX_LOG_ITEM_MCAST, NULL);
    CHECK(m && strstr(m, "rdma_cm"), "the sentence: %s", m ? m : "(nothing)");
    rdmax__ud_ep_cleanup(ep);
    fd_ep_destroy(ep);
    fd_ctx_destroy(ctx);
    /* the direct attach asks no subnet manager: refused on InfiniBand, with what to use instead */
    d.mcast_join = RDMAX_MCAST_ATTACH;
    ctx = mkctx(&IB, &d);
    ep = mkep(ctx, &q, RDMAX_TRANSPORT_ID_UD, 0x301, 0);
    g_n_log = 0;
    CHECK_ST(rdmax_mcast_join(ep, "239.1.2.3"), RDMAX_ERR_UNSUPPORTED);
    m = logged(RDMAX_LOG_ITEM_MCAST, NULL);
    CHECK(m && strstr(m, "InfiniBand") && strstr(m, "RDMAX_MCAST_CM"), "the sentence: %s", m ? m : "(nothing)");
    CHECK_ST(rdmax_mcast_ep_create(ctx, NULL, "239.1.2.3", &tx), RDMAX_ERR_UNSUPPORTED);
    rdmax__ud_ep_cleanup(ep);
    fd_ep_destroy(ep);
    fd_ctx_destroy(ctx);
}

/* RoCE: rdma_cm by default too; the direct attach when the desc asks, with an IPv4-mapped GID only */
static void test_roce_mcast_path(void)
{
    static const struct { const port *p; uint8_t join; rdmax_status st; int cm; } c[] = {
        {&ROCE2, 0, RDMAX_OK, 1}, {&ROCE2, RDMAX_MCAST_CM, RDMAX_OK, 1}, {&ROCE2, RDMAX_MCAST_ATTACH, RDMAX_OK, 0},
        {&ROCE2_V6, 0, RDMAX_OK, 1}, {&ROCE2_V6, RDMAX_MCAST_ATTACH, RDMAX_ERR_UNSUPPORTED, 0}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        rdmax_ctx_desc d;
        memset(&d, 0, sizeof d);
        d.mcast_join = c[i].join;
        rdmax_ctx *ctx = mkctx(c[i].p, &d);
        int cm = -1;
        g_n_log = 0;
        CHECK_ST(rdmax__mcast_path(ctx, "239.1.2.3", &cm), c[i].st);
        CHECK(cm == c[i].cm, "%s, mcast_join %u: path %s", c[i].p->name, c[i].join, cm ? "rdma_cm" : "ibv_attach_mcast");
        if (c[i].st != RDMAX_OK) {
            const char *m = logged(RDMAX_LOG_ITEM_MCAST, NULL);
            CHECK(m && strstr(m, "not IPv4-mapped"), "the sentence: %s", m ? m : "(nothing)");
        }
        fd_ctx_destroy(ctx);
    }
}

/* RDMAX_SL and RDMAX_PKEY_INDEX are checked before a device is opened */
static void test_env(void)
{
    static const struct { const char *var, *val; } bad[] = {
        {"RDMAX_SL", "16"}, {"RDMAX_SL", "x"}, {"RDMAX_PKEY_INDEX", "-1"}, {"RDMAX_PKEY_INDEX", "70000"}};
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    d.logger.func = capture;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rdmax_ctx *ctx = NULL;
        setenv(bad[i].var, bad[i].val, 1);
        g_n_log = 0;
        CHECK_ST(rdmax_ctx_create(&d, &ctx), RDMAX_ERR_INVALID_PARAM);
        const char *m = logged(RDMAX_LOG_ITEM_CTX_DESC, NULL);
        CHECK(m && strstr(m, bad[i].var), "%s=%s: %s", bad[i].var, bad[i].val, m ? m : "(nothing)");
        unsetenv(bad[i].var);
    }
    d.sl = 16;
    rdmax_ctx *ctx = NULL;
    CHECK_ST(rdmax_ctx_create(&d, &ctx), RDMAX_ERR_INVALID_PARAM);
    /* the multicast settings likewise */
    d.sl = 0;
    setenv("RDMAX_MCAST_JOIN", "sm", 1);
    g_n_log = 0;
    CHECK_ST(rdmax_ctx_create(&d, &ctx), RDMAX_ERR_INVALID_PARAM);
    const char *m = logged(RDMAX_LOG_ITEM_CTX_DESC, NULL);
    CHECK(m && strstr(m, "RDMAX_MCAST_JOIN=sm"), "RDMAX_MCAST_JOIN=sm: %s", m ? m : "(nothing)");
    unsetenv("RDMAX_MCAST_JOIN");
    d.mcast_join = 3;
    g_n_log = 0;
    CHECK_ST(rdmax_ctx_create(&d, &ctx), RDMAX_ERR_INVALID_PARAM);
    m = logged(RDMAX_LOG_ITEM_CTX_DESC, NULL);
    CHECK(m && strstr(m, "mcast_join 3"), "mcast_join 3: %s", m ? m : "(nothing)");
    d.mcast_join = 0;
    d.mcast_addr = "239.1.2.300";
    g_n_log = 0;
    CHECK_ST(rdmax_ctx_create(&d, &ctx), RDMAX_ERR_INVALID_PARAM);
    m = logged(RDMAX_LOG_ITEM_CTX_DESC, NULL);
    CHECK(m && strstr(m, "mcast_addr '239.1.2.300'"), "mcast_addr: %s", m ? m : "(nothing)");
}

int main(void)
{
    fd_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.post_send = fake_post_send;
    ops.modify_qp = fake_modify_qp;
    ops.create_ah = fake_create_ah;
    fd_device_init(&ops);
    tl_run("fabric/InfiniBand port: link layer, LID and GID type in rdmax_ctx_query_attr", test_ib_attr);
    tl_run("fabric/InfiniBand, one subnet: RTR to the peer's LID, no GRH, SL from the desc, the lower MTU",
           test_ib_one_subnet);
    tl_run("fabric/InfiniBand, two subnet prefixes: RTR to the peer's LID with a GRH", test_ib_two_subnets);
    tl_run("fabric/InfiniBand, force_grh: a GRH within one subnet", test_ib_force_grh);
    tl_run("fabric/InfiniBand UD: address handles by LID, a GRH across prefixes, datagrams checked by LID",
           test_ib_ud);
    tl_run("fabric/RoCE v2, IPv4-mapped GIDs: a GRH, field by field as before", test_roce_v2_ipv4);
    tl_run("fabric/RoCE v2, IPv6 GIDs: a GRH, field by field as before", test_roce_v2_ipv6);
    tl_run("fabric/RoCE v1: a GRH, field by field", test_roce_v1);
    tl_run("fabric/RoCE v1 and v2 peers refuse each other (RDMAX_ERR_OOB_LINK)", test_roce_v1_v2);
    tl_run("fabric/InfiniBand and RoCE peers refuse each other (RDMAX_ERR_OOB_LINK)", test_ib_roce);
    tl_run("fabric/capabilities: one line, rxe's and a device without atomics, SRQ, inline or a second SGE",
           test_caps_line);
    tl_run("fabric/no atomics: rdmax_fadd and rdmax_cswap return RDMAX_ERR_UNSUPPORTED, nothing posted; gets post",
           test_no_atomics);
    tl_run("fabric/no SRQ: RC endpoints keep the shared pool (it needs none), nothing said", test_no_srq);
    tl_run("fabric/iWARP: refused with a sentence naming what is missing", test_iwarp);
    tl_run("fabric/InfiniBand multicast: joined through rdma_cm (the fake has none: RDMAX_ERR_NO_DEVICE and a "
           "sentence, nothing attached); the direct attach refused", test_ib_mcast);
    tl_run("fabric/RoCE multicast: rdma_cm by default, the direct attach when asked (IPv4-mapped GIDs only)",
           test_roce_mcast_path);
    tl_run("fabric/RDMAX_SL, RDMAX_PKEY_INDEX, desc.sl, RDMAX_MCAST_JOIN, desc.mcast_join and mcast_addr checked",
           test_env);
    return tl_failed_total ? 1 : 0;
}
