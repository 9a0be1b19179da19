/* What the two receive fuzz targets (recv_fuzz.c: endpoints with receive buffers of their own, RC and
   UD; srq_fuzz.c: RC endpoints on shared receive queues) share, on the fake device of tests/fakedev.h:
   the device's completion queues and send queues, the application's sends and their completions, and
   the checks of every endpoint's send queue after each step and at the end.

   The includer defines, before including: NEP (endpoints), MAXEP (the endpoint table, a power of two),
   SQD (send-queue depth), MAXINL, MAXOPS, CQMAX, FIFO and SCQ_CREDITS; its model of an endpoint,
   struct mep, with at least tx (send credits: the peer's grants minus sends), owed (credits owed to the
   peer), exp_n (deliveries still due) and left_connected; and after including, rx_flush (what a QP in
   error does to its receives) and rx_polled (what the model takes from a receive completion rdmax
   polled). The fake keeps to the device's contract (it completes only what was posted, in order per
   queue; a QP in error flushes everything) while the input decides what the device may choose. */
#ifndef RDMAX_RXFUZZ_H
#define RDMAX_RXFUZZ_H
#include "../fakedev.h"

typedef struct fast_wr {     /* a posted send request, as the device holds it */
    uint64_t wr_id;
    int signaled;
    int op;                  /* index into g_ops, -1 for rdmax's own (grant, close, flush, keepalive) */
} fast_wr;

typedef struct frecv {       /* a posted receive request of a QP's own receive queue */
    uint64_t wr_id;
    uintptr_t addr;
    uint32_t len;
} frecv;

typedef struct fq {          /* one endpoint's QP on the fake device */
    struct ibv_qp qp;
    struct ibv_mr mr;        /* its own receive buffers' registration (recv_fuzz) */
    int err;                 /* in the error state: everything is flushed */
    unsigned cqes;           /* error and flush completions the device produced for this QP */
    frecv rq[FIFO];          /* its own receive queue (recv_fuzz) */
    unsigned rq_head, rq_n;
    fast_wr sq[FIFO];
    unsigned sq_head, sq_n;
    unsigned char posted[64]; /* receive buffer index -> posted now (recv_fuzz) */
} fq;

typedef struct fcq {
    struct ibv_cq cq;
    struct ibv_wc wc[CQMAX];
    unsigned head, n;
} fcq;

typedef struct mop {         /* an application send */
    int ep;
    uint32_t len;
    uint8_t seed;
    int calling;             /* its call is running */
    int accepted;            /* the call returned OK or INPROGRESS */
    int queued;              /* went through rdmax_req_post and was queued */
    int has_comp;
    int posted;              /* times the device accepted it */
    int refused;             /* the device refused its post */
    int dev_status;          /* the status the device completed it with, -1 if not yet */
    int completions;         /* times its comp completed */
    rdmax_status comp_status;
    rdmax_comp comp;
    rdmax_req req;
    uint8_t buf[256];
} mop;

static fcq g_scq, g_rcq;
static fq g_q[NEP];
static struct mep g_m[NEP];
static mop g_ops[MAXOPS];
static int g_nops;
static rdmax_ctx *g_ctx;
static rdmax_ep *g_ep[NEP];
static rdmax_mem g_mem[NEP];
static fz_in *g_in;          /* the input, also for the fake's own choices */
static uint8_t g_port_state;

static void rx_flush(int e);
static void rx_polled(const struct ibv_wc *wc);

static int q_of(struct ibv_qp *qp)
{
    for (int i = 0; i < NEP; i++)
        if (qp == &g_q[i].qp)
            return i;
    fz_fail(__LINE__, "post on a QP that is not the fake's");
}

static void cq_push(fcq *c, uint64_t wr_id, enum ibv_wc_status st, enum ibv_wc_opcode opc, uint32_t qpn)
{
    for (int i = 0; i < NEP; i++)
        g_q[i].cqes += g_q[i].qp.qp_num == qpn && st != IBV_WC_SUCCESS;
    FZ_CHECK(c->n < CQMAX, "fake CQ overflow (test limit)");
    struct ibv_wc *w = &c->wc[(c->head + c->n++) % CQMAX];
    memset(w, 0, sizeof *w);
    w->wr_id = wr_id;
    w->status = st;
    w->opcode = opc;
    w->qp_num = qpn;
    w->vendor_err = st == IBV_WC_SUCCESS ? 0 : 0x77;
}

/* The QP enters the error state: every posted send request, signaled or not, completes with FLUSH_ERR;
   then its receives (rx_flush). */
static void dev_flush(int e)
{
    fq *q = &g_q[e];
    q->err = 1;
    while (q->sq_n) {
        fast_wr *w = &q->sq[q->sq_head];
        q->sq_head = (q->sq_head + 1) % FIFO;
        q->sq_n--;
        if (w->op >= 0 && g_ops[w->op].dev_status < 0)
            g_ops[w->op].dev_status = IBV_WC_WR_FLUSH_ERR;
        cq_push(&g_scq, w->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, q->qp.qp_num);
    }
    rx_flush(e);
}

static int fake_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
    fcq *c = cq == &g_scq.cq ? &g_scq : &g_rcq;
    /* the device returns what it has, or fewer (batching differs per poll) */
    int n = (int)c->n < num ? (int)c->n : num;
    if (n > 1 && fz_below(g_in, 4) == 3)
        n = 1 + (int)fz_below(g_in, (unsigned)n);
    for (int i = 0; i < n; i++) {
        wc[i] = c->wc[c->head];
        c->head = (c->head + 1) % CQMAX;
        c->n--;
        if (c == &g_rcq)
            rx_polled(&wc[i]);
    }
    return n;
}

/* A QP moved to the error state (a failure or a close): the fake device only notes it. */
static int fake_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_ERR)
        qp->state = IBV_QPS_ERR;
    return 0;
}

static int fake_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *pa, size_t len)
{
    (void)c, (void)port;
    memset(pa, 0, len);
    pa->state = (enum ibv_port_state)g_port_state;
    return 0;
}

/* The device executes the oldest requests of ep e's send queue. */
static void dev_execute(fz_in *in, int e)
{
    fq *q = &g_q[e];
    unsigned k = 1 + fz_below(in, 8);
    while (k-- && q->sq_n && !q->err) {
        fast_wr *w = &q->sq[q->sq_head];
        q->sq_head = (q->sq_head + 1) % FIFO;
        q->sq_n--;
        enum ibv_wc_status st = IBV_WC_SUCCESS;
        if (fz_below(in, 40) == 39) {
            st = (enum ibv_wc_status)(1 + fz_below(in, IBV_WC_GENERAL_ERR));
            if (st == IBV_WC_WR_FLUSH_ERR)
                st = IBV_WC_RETRY_EXC_ERR;
        }
        if (w->op >= 0)
            g_ops[w->op].dev_status = st;
        if (w->signaled || st != IBV_WC_SUCCESS)
            cq_push(&g_scq, w->wr_id, st, IBV_WC_SEND, q->qp.qp_num);
        if (st != IBV_WC_SUCCESS)
            dev_flush(e);
    }
}

/* A request the device accepted on QP q, op the application's send it carries (-1: rdmax's own). */
static void sq_take(fq *q, const struct ibv_send_wr *w, int op)
{
    FZ_CHECK(q->sq_n < FIFO, "fake SQ overflow: rdmax posted more than its send-queue depth");
    fast_wr *f = &q->sq[(q->sq_head + q->sq_n++) % FIFO];
    f->wr_id = w->wr_id;
    f->signaled = (w->send_flags & IBV_SEND_SIGNALED) != 0;
    f->op = op;
    if (op >= 0)
        g_ops[op].dev_status = -1;
    if (q->err)
        dev_flush(q_of(&q->qp));  /* a QP in error flushes what is posted to it */
}

/* The immediate data of a peer's message, completed in w: none (one in eight), any value, a grant, a
   goodbye (GRANT | CLOSE) or credits. Returns whether it has one; *imm is 0 if not. */
static int peer_imm(fz_in *in, struct ibv_wc *w, uint32_t *imm)
{
    *imm = 0;
    if (fz_below(in, 8) == 0)
        return 0;
    switch (fz_below(in, 6)) {
    case 0: *imm = fz_u32(in); break;                                        /* anything */
    case 1: *imm = RDMAX__IMM_GRANT | fz_below(in, 64); break;               /* a grant */
    case 2: *imm = RDMAX__IMM_GRANT | RDMAX__IMM_CLOSE | fz_below(in, 64); break; /* goodbye */
    default: *imm = fz_below(in, 64); break;                                 /* credits on a message */
    }
    w->wc_flags = IBV_WC_WITH_IMM;
    w->imm_data = RDMAX__LE32(*imm);  /* rdmax's own immediates are little-endian */
    return 1;
}

static uint8_t pat(uint8_t seed, uint32_t i) { return (uint8_t)(seed * 31u + i * 7u + (i >> 8)); }

static void quiet(rdmax_log_level lvl, rdmax_log_item item, const char *msg, void *user)
{
    (void)lvl, (void)item, (void)msg, (void)user;
}

/* The context, on the fake device with the target's receive verbs: MAXEP endpoints, SCQ_CREDITS send-CQ
   entries, MAXINL bytes inline, atomics (rdmax's own post_send), logging nothing. The caller may set
   more of its attributes before fd_ctx_ready(g_ctx, &g_scq.cq, &g_rcq.cq, SCQ_CREDITS). */
static void rx_setup_ctx(int (*post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **),
                         int (*post_srq_recv)(struct ibv_srq *, struct ibv_recv_wr *, struct ibv_recv_wr **),
                         int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **))
{
    memset(&g_scq, 0, sizeof g_scq);
    memset(&g_rcq, 0, sizeof g_rcq);
    memset(g_q, 0, sizeof g_q);
    memset(g_m, 0, sizeof g_m);
    g_nops = 0;
    fd_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.poll_cq = fake_poll_cq;
    ops.post_send = post_send;
    ops.post_recv = post_recv;
    ops.post_srq_recv = post_srq_recv;
    ops.modify_qp = fake_modify_qp;
    ops.query_port = fake_query_port;
    fd_device_init(&ops);
    g_scq.cq.context = g_rcq.cq.context = &fd_vctx.context;
    g_scq.cq.cqe = g_rcq.cq.cqe = CQMAX;
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    d.logger.func = quiet;
    g_ctx = fd_ctx_alloc(&d, RDMAX_LOG_ERROR, MAXEP);
    rdmax_dev_attr *a = fd_ctx_attr(g_ctx);
    snprintf(a->name, sizeof a->name, "fuzz0");
    a->max_inline = MAXINL;
    a->atomic_cap = IBV_ATOMIC_HCA;
}

/* Endpoint e's QP: RC or UD, QP number 0x100 + e, ready to send. */
static struct ibv_qp *rx_qp(int e, enum ibv_qp_type type)
{
    fq *q = &g_q[e];
    q->qp.context = &fd_vctx.context;
    q->qp.qp_type = type;
    q->qp.qp_num = 0x100 + (uint32_t)e;
    q->qp.state = IBV_QPS_RTS;
    g_mem[e].addr = NULL;
    g_mem[e].lkey = 0x7000 + (uint32_t)e;
    return &q->qp;
}

static void rx_teardown(void)
{
    for (int e = 0; e < NEP; e++)
        fd_ep_destroy(g_ep[e]);
    fd_ctx_destroy(g_ctx);
}

static void progress(void) { fd_progress(g_ctx); }

/* ---- the application's side --------------------------------------------------------------------------- */
static void on_comp(rdmax_comp *c, rdmax_status st)
{
    mop *o = (mop *)c->user;
    o->completions++;
    o->comp_status = st;
    FZ_CHECK(o->completions == 1, "op %d: its completion ran %d times", (int)(o - g_ops), o->completions);
}

/* An application send on ep e: op id (2 bytes), seed, then the pattern; inline, or zero-copy when a
   completion is asked for or it is too big to go inline. how 2: through rdmax_req_post (with a
   completion), else rdmax_send. Returns the op (NULL: MAXOPS reached) and the call's status. */
static mop *app_send(fz_in *in, int e, int how, rdmax_status *status)
{
    if (g_nops >= MAXOPS)
        return NULL;
    int id = g_nops++;
    mop *o = &g_ops[id];
    memset(o, 0, sizeof *o);
    o->ep = e;
    o->len = 3 + fz_below(in, 2 * MAXINL);
    o->seed = fz_u8(in);
    o->dev_status = -1;
    o->buf[0] = (uint8_t)id;
    o->buf[1] = (uint8_t)(id >> 8);
    o->buf[2] = o->seed;
    for (uint32_t i = 3; i < o->len; i++)
        o->buf[i] = pat(o->seed, i);
    o->has_comp = fz_below(in, 2);
    o->comp.cb = on_comp;
    o->comp.user = o;
    const rdmax_mem *mem = (o->has_comp || o->len > MAXINL) ? &g_mem[e] : NULL;
    rdmax_status st;
    o->calling = 1;
    if (how == 2 && o->has_comp) {
        o->req.op = RDMAX_OP_SEND;
        o->req.buf = o->buf;
        o->req.len = o->len;
        o->req.mem = mem;
        o->req.comp = &o->comp;
        st = rdmax_req_post(g_ep[e], &o->req);
        /* queued, or posted now: INPROGRESS either way when zero-copy; a completed inline post is OK */
        o->queued = st == RDMAX_INPROGRESS;
        o->accepted = st == RDMAX_OK;
        if (st == RDMAX_INPROGRESS && fd_ep_look(g_ep[e]).queued == 0)
            o->queued = 0, o->accepted = 1;
    } else {
        st = rdmax_send(g_ep[e], o->buf, o->len, mem, o->has_comp ? &o->comp : NULL);
        o->accepted = st == RDMAX_OK || st == RDMAX_INPROGRESS;
        FZ_CHECK(!(st == RDMAX_OK && o->has_comp), "a zero-copy send returned OK (its completion would never run)");
        if (st != RDMAX_INPROGRESS)
            o->has_comp = 0;  /* the comp is not used */
    }
    o->calling = 0;
    FZ_CHECK(o->accepted || o->queued || o->posted == 0, "op %d reached the device but its call said %s", id,
             rdmax_status_str(st));
    if (st == RDMAX_OK && !mem)
        memset(o->buf, 0xee, sizeof o->buf);  /* inline: the buffer is the caller's again at once */
    *status = st;
    return o;
}

/* After every step, each endpoint's send queue: outstanding and free slots add up to its depth, the
   fast gate (fd_ep_gate_check), CONNECTED never again after it left; and the context's send-CQ entries
   are back but for the outstanding requests. */
static void check_send_queues(void)
{
    uint32_t outstanding = 0;
    char why[160];
    for (int e = 0; e < NEP; e++) {
        fd_ep_view v = fd_ep_look(g_ep[e]);
        uint32_t out = v.head - v.tail;
        FZ_CHECK(out <= SQD && v.avail + out == SQD, "endpoint %d: %u outstanding, %u slots free of %u", e, out,
                 v.avail, SQD);
        const char *bad = fd_ep_gate_check(g_ep[e], why, sizeof why);
        FZ_CHECK(!bad, "endpoint %d: %s", e, bad);
        outstanding += out;
        if (v.state != RDMAX_EP_CONNECTED)
            g_m[e].left_connected = 1;
        else
            FZ_CHECK(!g_m[e].left_connected, "endpoint %d is CONNECTED again after failing or closing", e);
    }
    FZ_CHECK(fd_ctx_scq_free(g_ctx) + outstanding == SCQ_CREDITS, "CQ credits %u + outstanding %u != %u",
             fd_ctx_scq_free(g_ctx), outstanding, SCQ_CREDITS);
}

/* The end: every QP fails, progress until nothing moves. */
static void drain(void)
{
    for (int e = 0; e < NEP; e++)
        dev_flush(e);
    for (int i = 0; i < 64 && (g_scq.n || g_rcq.n || fd_ctx_pending(g_ctx)); i++)
        progress();
}

static void check_drained(void) { FZ_CHECK(g_scq.n == 0 && g_rcq.n == 0, "completions left after the drain"); }

/* At the end: a QP that produced error or flush completions left its endpoint in ERROR or CLOSED; no
   completion object is outstanding. */
static void check_end(void)
{
    for (int e = 0; e < NEP; e++) {
        rdmax_ep_state s = fd_ep_look(g_ep[e]).state;
        /* a QP in error with nothing posted produces nothing: only an async event could tell */
        if (g_q[e].cqes)
            FZ_CHECK(s == RDMAX_EP_ERROR || s == RDMAX_EP_CLOSED, "endpoint %d: state %d after its QP flushed "
                     "everything", e, s);
    }
    FZ_CHECK(fd_ctx_comps_out(g_ctx) == 0, "%u completion objects outstanding at the end", fd_ctx_comps_out(g_ctx));
}
#endif /* RDMAX_RXFUZZ_H */
