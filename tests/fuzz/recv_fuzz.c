/* Fuzz target: everything rdmax reads from a completion, driven through the real rdmax__poll_recv,
   rdmax__poll_send and the pending queue, on a fake device (no RDMA hardware needed).

   The fake is a verbs context whose poll_cq, post_send, post_recv and query_port are the fuzzer's:
   ibv_poll_cq/ibv_post_send/ibv_post_recv are inline calls through the context's ops table, so rdmax's
   code runs unchanged. The fake keeps to the device's contract (it completes only what was posted, in
   order per queue, byte_len within the posted buffer, a QP in error flushes everything) while the input
   decides everything a peer or the device may choose:
   - a peer's message: byte_len, the immediate data (credits, the GRANT and CLOSE bits, any value), with or
     without immediate; UD: short datagrams (no GRH), zero-length ones, from our own QPN or another;
   - completions of our sends: success or an error status, how many the device returns per poll, a QP that
     goes to the error state (everything flushed, unsignaled requests too), stale completions of a
     destroyed endpoint (wrong generation, empty table slot);
   - the application: sends direct, chained (rdmax_batch_begin/end) and queued (rdmax_req_post), inline and
     zero-copy, with and without a completion object; posts the device refuses (from any point of a chain).
   Checked after every step and at the end, against a model:
   - a delivered message is the bytes the peer wrote, in its own receive buffer, in order, exactly once;
     grants, flush markers and short UD datagrams are not delivered;
   - receive buffers are never posted twice; the credits rdmax returns (the immediate data of its sends
     and grants) are exactly the buffers it reposted; its send credits are exactly the peer's grants minus
     its sends; grants are always signaled;
   - every send the application got accepted reaches the device once, in order, with its bytes (an inline
     source buffer is scribbled over as soon as the call returns), or is reported failed;
   - every completion object completes exactly once, OK exactly when its request succeeded; at the end
     nothing is outstanding and every send-queue slot and CQ credit is back;
   - an endpoint that failed or closed never comes back to CONNECTED. */
#define RDMAX_TRANSPORT_RC
#define RDMAX_TRANSPORT_UD
#define RDMAX_IMPLEMENTATION
#include "../../rdmax.h"
#define FUZZ_NAME "recv"
#include "fuzz.h"

enum { NEP = 2, MAXEP = 4, SQD = 16, RSZ = 256, MAXINL = 64, MAXOPS = 600, CQMAX = 4096, FIFO = 256 };
#define SCQ_CREDITS 64u

/* ---- fake device ------------------------------------------------------------------------------------ */
typedef struct fast_wr {        /* a posted send request, as the device holds it */
    uint64_t wr_id;
    int signaled;
    int op;                  /* index into g_ops, -1 for rdmax's own (grant, close, flush) */
} fast_wr;

typedef struct frecv {
    uint64_t wr_id;
    uintptr_t addr;
    uint32_t len;
} frecv;

typedef struct fq {          /* one endpoint's QP on the fake device */
    struct ibv_qp qp;
    struct ibv_mr mr;
    int err;                 /* in the error state: everything is flushed */
    unsigned cqes;           /* error and flush completions the device produced for this QP */
    frecv rq[FIFO];
    unsigned rq_head, rq_n;
    fast_wr sq[FIFO];
    unsigned sq_head, sq_n;
    unsigned char posted[64]; /* receive buffer index -> posted now */
} fq;

typedef struct fcq {
    struct ibv_cq cq;
    struct ibv_wc wc[CQMAX];
    unsigned head, n;
} fcq;

/* ---- the model -------------------------------------------------------------------------------------- */
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
    uint8_t buf[RSZ];
} mop;

typedef struct mexp {        /* a message rdmax must deliver */
    uint32_t idx, len;
    uint8_t seed;
} mexp;

typedef struct mep {
    uint32_t tx;             /* send credits: peer's grants minus sends */
    uint32_t owed;           /* buffers reposted and not yet returned to the peer (RC) */
    mexp exp[FIFO];
    unsigned exp_head, exp_n;
    int last_posted_op;
    int left_connected;
} mep;

static struct verbs_context g_vctx;
static fcq g_scq, g_rcq;
static fq g_q[NEP];
static mep g_m[NEP];
static mop g_ops[MAXOPS];
static int g_nops;
static rdmax_ctx *g_ctx;
static rdmax_ep *g_ep[NEP];
static rdmax_mem g_mem[NEP];
static fz_in *g_in;          /* the input, also for the fake's own choices */
static uint8_t g_port_state;

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

static void dev_recv_done(int e, const frecv *r)
{
    uint32_t idx = (uint32_t)(r->wr_id & RDMAX__WR_SLOT_MASK);
    if (idx < 64)
        g_q[e].posted[idx] = 0;
}

/* The QP enters the error state: every posted request, signaled or not, completes with FLUSH_ERR. */
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
    while (q->rq_n) {
        frecv *r = &q->rq[q->rq_head];
        q->rq_head = (q->rq_head + 1) % FIFO;
        q->rq_n--;
        dev_recv_done(e, r);
        cq_push(&g_rcq, r->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, q->qp.qp_num);
    }
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
        /* the model takes a peer's credits when rdmax sees them */
        for (int e = 0; e < NEP; e++)
            if (c == &g_rcq && wc[i].qp_num == g_q[e].qp.qp_num && g_q[e].qp.qp_type == IBV_QPT_RC &&
                wc[i].status == IBV_WC_SUCCESS && (wc[i].wc_flags & IBV_WC_WITH_IMM))
                g_m[e].tx += RDMAX__LE32(wc[i].imm_data) & RDMAX__IMM_CREDITS;
    }
    return n;
}

static uint8_t pat(uint8_t seed, uint32_t i) { return (uint8_t)(seed * 31u + i * 7u + (i >> 8)); }

/* An application payload: op id (2 bytes), seed, then the pattern. */
static void check_payload(int e, const uint8_t *p, uint32_t len)
{
    FZ_CHECK(len >= 3, "endpoint %d: a %u-byte send the application never made", e, len);
    int id = p[0] | p[1] << 8;
    FZ_CHECK(id < g_nops && g_ops[id].ep == e, "endpoint %d: send with unknown op id %d", e, id);
    mop *o = &g_ops[id];
    FZ_CHECK(o->accepted || o->queued || o->calling, "op %d reached the device but its call had failed", id);
    FZ_CHECK(len == o->len, "op %d: %u bytes posted, the application sent %u", id, len, o->len);
    FZ_CHECK(p[2] == o->seed, "op %d: its bytes changed before the post (seed %u, expected %u)", id, p[2], o->seed);
    for (uint32_t i = 3; i < len; i++)
        FZ_CHECK(p[i] == pat(o->seed, i), "op %d: byte %u differs before the post", id, i);
    FZ_CHECK(o->posted == 0, "op %d posted twice", id);
    FZ_CHECK(id > g_m[e].last_posted_op, "endpoint %d: op %d posted after op %d (order)", e, id, g_m[e].last_posted_op);
}

/* A QP moved to the error state (a failure or a close): the fake device only notes it. */
static int fake_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_ERR)
        qp->state = IBV_QPS_ERR;
    return 0;
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    int e = q_of(qp);
    fq *q = &g_q[e];
    mep *m = &g_m[e];
    /* the device may refuse a chain from any request on */
    int refuse_at = fz_below(g_in, 24) == 23 ? (int)fz_below(g_in, 4) : -1;
    int k = 0;
    for (struct ibv_send_wr *w = wr; w; w = w->next, k++) {
        int is_app = 0, op = -1;
        uint32_t len = 0;
        for (int s = 0; s < w->num_sge; s++)
            len += w->sg_list[s].length;
        if (w->opcode == IBV_WR_SEND_WITH_IMM || w->opcode == IBV_WR_SEND)
            is_app = !(RDMAX__LE32(w->imm_data) & RDMAX__IMM_GRANT) && len > 0;
        if (k == refuse_at) {
            *bad = w;
            for (struct ibv_send_wr *x = w; x; x = x->next) {
                if (x->num_sge == 1 && x->sg_list[0].length >= 3) {
                    const uint8_t *p = (const uint8_t *)(uintptr_t)x->sg_list[0].addr;
                    int id = p[0] | p[1] << 8;
                    if (id < g_nops)
                        g_ops[id].refused++;
                }
            }
            return ENOMEM;
        }
        if (is_app) {
            FZ_CHECK(w->num_sge == 1, "an application send with %d SGEs", w->num_sge);
            const uint8_t *p = (const uint8_t *)(uintptr_t)w->sg_list[0].addr;
            check_payload(e, p, len);
            op = p[0] | p[1] << 8;
            g_ops[op].posted++;
            m->last_posted_op = op;
            if (!(w->send_flags & IBV_SEND_INLINE))
                FZ_CHECK(w->sg_list[0].lkey == g_mem[e].lkey, "op %d: zero-copy send with lkey 0x%x", op,
                         w->sg_list[0].lkey);
        }
        if (qp->qp_type == IBV_QPT_RC) {
            FZ_CHECK(w->opcode == IBV_WR_SEND_WITH_IMM || w->opcode == IBV_WR_RDMA_WRITE,
                     "unexpected opcode %d on RC", (int)w->opcode);
            if (w->opcode == IBV_WR_SEND_WITH_IMM) {
                uint32_t imm = RDMAX__LE32(w->imm_data);
                FZ_CHECK((imm & RDMAX__IMM_CREDITS) == m->owed, "endpoint %d returns %u credits, it reposted %u "
                         "buffers since it last returned any", e, imm & RDMAX__IMM_CREDITS, m->owed);
                if (imm & RDMAX__IMM_GRANT)
                    FZ_CHECK(w->send_flags & IBV_SEND_SIGNALED, "an unsignaled grant");
                m->owed = 0;
                m->tx--;
            }
        }
        FZ_CHECK(q->sq_n < FIFO, "fake SQ overflow: rdmax posted more than its send-queue depth");
        fast_wr *f = &q->sq[(q->sq_head + q->sq_n++) % FIFO];
        f->wr_id = w->wr_id;
        f->signaled = (w->send_flags & IBV_SEND_SIGNALED) != 0;
        f->op = op;
        if (op >= 0)
            g_ops[op].dev_status = -1;
        if (q->err)
            dev_flush(e);  /* a QP in error flushes what is posted to it */
    }
    return 0;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    int e = q_of(qp);
    fq *q = &g_q[e];
    int refuse_at = fz_below(g_in, 32) == 31 ? (int)fz_below(g_in, 16) : -1;
    int k = 0;
    for (struct ibv_recv_wr *w = wr; w; w = w->next, k++) {
        if (k == refuse_at) {
            *bad = w;
            return ENOMEM;
        }
        uint32_t idx = (uint32_t)(w->wr_id & RDMAX__WR_SLOT_MASK);
        FZ_CHECK(w->wr_id & RDMAX__WR_RECV, "receive request without the receive bit");
        FZ_CHECK(idx < g_ep[e]->rq_depth, "receive buffer index %u out of %u", idx, g_ep[e]->rq_depth);
        FZ_CHECK(!q->posted[idx], "endpoint %d: receive buffer %u posted twice", e, idx);
        FZ_CHECK(w->num_sge == 1 && w->sg_list[0].addr == (uintptr_t)(g_ep[e]->rbufs + (size_t)idx * RSZ) &&
                 w->sg_list[0].length == RSZ && w->sg_list[0].lkey == q->mr.lkey,
                 "receive buffer %u posted with the wrong address, length or key", idx);
        q->posted[idx] = 1;
        FZ_CHECK(q->rq_n < FIFO, "fake RQ overflow");
        frecv *r = &q->rq[(q->rq_head + q->rq_n++) % FIFO];
        r->wr_id = w->wr_id;
        r->addr = (uintptr_t)w->sg_list[0].addr;
        r->len = w->sg_list[0].length;
        if (qp->qp_type == IBV_QPT_RC)
            g_m[e].owed++;
        if (q->err)
            dev_flush(e);
    }
    return 0;
}

static int fake_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *pa, size_t len)
{
    (void)c, (void)port;
    memset(pa, 0, len);
    pa->state = (enum ibv_port_state)g_port_state;
    return 0;
}

/* ---- the application's side --------------------------------------------------------------------------- */
static void on_comp(rdmax_comp *c, rdmax_status st)
{
    mop *o = (mop *)c->user;
    o->completions++;
    o->comp_status = st;
    FZ_CHECK(o->completions == 1, "op %d: its completion ran %d times", (int)(o - g_ops), o->completions);
}

static void on_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    int e = (int)(intptr_t)user;
    mep *m = &g_m[e];
    FZ_CHECK(ep == g_ep[e], "receive callback with another endpoint");
    FZ_CHECK(m->exp_n > 0, "endpoint %d: a message delivered that must not be (grant, marker, short)", e);
    mexp *x = &m->exp[m->exp_head];
    m->exp_head = (m->exp_head + 1) % FIFO;
    m->exp_n--;
    uint32_t off = ep->qp->qp_type == IBV_QPT_UD ? RDMAX_UD_GRH : 0;
    FZ_CHECK((char *)data == ep->rbufs + (size_t)x->idx * RSZ + off, "endpoint %d: message not in buffer %u", e, x->idx);
    FZ_CHECK(len == x->len, "endpoint %d: %zu bytes delivered, the peer sent %u", e, len, x->len);
    for (uint32_t i = 0; i < len; i++)
        FZ_CHECK(((uint8_t *)data)[i] == pat(x->seed, i + off), "endpoint %d: byte %u of a message differs", e, i);
}

static void quiet(rdmax_log_level lvl, rdmax_log_item item, const char *msg, void *user)
{
    (void)item;
    (void)lvl, (void)msg, (void)user;
}

/* ---- setup ------------------------------------------------------------------------------------------ */
static void setup(fz_in *in)
{
    memset(&g_vctx, 0, sizeof g_vctx);
    memset(&g_scq, 0, sizeof g_scq);
    memset(&g_rcq, 0, sizeof g_rcq);
    memset(g_q, 0, sizeof g_q);
    memset(g_m, 0, sizeof g_m);
    g_nops = 0;
    g_port_state = fz_below(in, 4) != 3 ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
    g_vctx.sz = sizeof g_vctx;
    g_vctx.query_port = fake_query_port;
    g_vctx.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
    g_vctx.context.ops.poll_cq = fake_poll_cq;
    g_vctx.context.ops.post_send = fake_post_send;
    g_vctx.context.ops.post_recv = fake_post_recv;
    g_vctx.context.async_fd = -1;
    g_scq.cq.context = g_rcq.cq.context = &g_vctx.context;

    rdmax_ctx *ctx = (rdmax_ctx *)calloc(1, sizeof *ctx);
    ctx->verbs = &g_vctx.context;
    ctx->scq = &g_scq.cq;
    ctx->rcq = &g_rcq.cq;
    ctx->scq_poll = ctx->rcq_poll = fake_poll_cq;  /* as rdmax_ctx_create: the provider's poll_cq */
    ctx->modify_qp = fake_modify_qp;    /* as rdmax_ctx_create: ibv_modify_qp */
    ctx->rwc = ctx->rwc_top;            /* as rdmax_ctx_create: where progress polls the receive CQ */
    ctx->scq_low = 8;
    ctx->scq_spare = SCQ_CREDITS - 8;  /* as rdmax_ctx_create: the free entries minus scq_low */
    rdmax__ctx_retire_step(ctx);             /* as rdmax_ctx_create: which ops give back read budget */
    ctx->desc.max_eps = MAXEP;
    ctx->eps_cap = MAXEP;  /* the endpoint table's size (it grows up to max_eps in rdmax) */
    ctx->eps_mask = MAXEP - 1;  /* MAXEP is a power of two */
    ctx->desc.logger.func = quiet;
    ctx->log_level = RDMAX_LOG_ERROR;
    ctx->eps = (rdmax__ep_ref *)calloc(MAXEP, sizeof *ctx->eps);
    snprintf(ctx->attr.name, sizeof ctx->attr.name, "fuzz0");
    ctx->attr.port = 1;
    ctx->attr.max_sge = RDMAX_MAX_SGE;
    ctx->attr.max_msg_sz = 1u << 20;
    ctx->attr.max_inline = MAXINL;
    ctx->inl_stage = (char *)calloc(RDMAX_BATCH_MAX, MAXINL);  /* the context's batch staging */
    rdmax__chain_clean(ctx, 0, RDMAX_BATCH_MAX);  /* the post list's entries, as rdmax_ctx_create sets them */
    ctx->port_up = 1;
    g_ctx = ctx;

    for (int e = 0; e < NEP; e++) {
        int ud = e == 1;
        rdmax_ep *ep = (rdmax_ep *)calloc(1, sizeof *ep);
        fq *q = &g_q[e];
        q->qp.context = &g_vctx.context;
        q->qp.qp_type = ud ? IBV_QPT_UD : IBV_QPT_RC;
        q->qp.qp_num = 0x100 + (uint32_t)e;
        q->qp.state = IBV_QPS_RTS;
        q->mr.lkey = 0x5000 + (uint32_t)e;
        ep->ctx = ctx;
        ep->qp = &q->qp;
        ep->post_send = fake_post_send;  /* as rdmax_ep_create: the provider's post_send */
        ep->rmr = &q->mr;
        ep->desc.timeout = 14;
        ep->desc.retry_cnt = 6;
        ep->sq_mask = SQD - 1;
        ep->signal_interval = 1 + fz_below(in, SQD / 2);
        ep->sig_at = ep->sq_head + ep->signal_interval - 1;
        ep->max_inline = MAXINL;
        ep->rd_avail = 4;
        ep->peer_recv_size = RSZ;
        ep->rq_depth = 32 + 16 * fz_below(in, 3);
        ep->recv_size = RSZ;
        ep->recv_cb = fz_below(in, 8) != 7 ? on_recv : rdmax__recv_drop;  /* as rdmax_ep_create */
        ep->user = (void *)(intptr_t)e;
        ep->slots = (rdmax__slot *)calloc(SQD, sizeof *ep->slots);
        ep->rq_free = (uint32_t *)calloc(ep->rq_depth, sizeof *ep->rq_free);
        ep->rbufs = (char *)calloc(ep->rq_depth, RSZ);
        ep->wr.sg_list = &ctx->fsge;  /* as rdmax_ep_create: the fast put's prebuilt request */
        ep->wr.num_sge = 1;
        ep->wr.opcode = IBV_WR_RDMA_WRITE;
        ep->wr.send_flags = IBV_SEND_INLINE;
        snprintf(ep->peer, sizeof ep->peer, "fuzz-peer-%d", e);
        ep->peer_qpn = 0x200 + (uint32_t)e;
        ep->peer_gid[15] = 1;
        if (ud) {
            ep->ah = (struct ibv_ah *)(uintptr_t)0x1000;  /* never dereferenced by rdmax */
            ep->ud_qpn = 0x300;
            ep->ud_qkey = RDMAX_UD_QKEY;
        }
        ctx->eps[e].ep = ep;
        uint16_t gen = (uint16_t)(1 + fz_below(in, 3));
        ctx->eps[e].key = RDMAX__EP_KEY(gen, e);
        ctx->n_eps++;
        ep->wr_id_base = (uint64_t)gen << 48 | (uint64_t)e << 32;
        ep->wr.wr_id = ep->wr_id_base;
        for (uint32_t i = 0; i < ep->rq_depth; i++)
            ep->rq_free[i] = i;
        ep->rq_unposted = ep->rq_depth;
        g_ep[e] = ep;
        g_m[e].last_posted_op = -1;
        g_m[e].left_connected = 0;
        g_mem[e].addr = NULL;
        g_mem[e].lkey = 0x7000 + (uint32_t)e;
        /* as rdmax_ep_create: post every receive buffer; as connect: credits from the peer's record */
        rdmax__post_recvs(ep, ep->rq_depth);
        ep->tx_credits = g_m[e].tx = ud ? UINT32_MAX : 2 + fz_below(in, 64);
        ep->rx_unreturned = 0;  /* the record told the peer about the first batch */
        g_m[e].owed = 0;
        ep->state = RDMAX_EP_CONNECTED;
        ep->blocked = 0;  /* as connect: the fast gate opens */
        rdmax__ep_regate(ep);
    }
}

static void teardown(void)
{
    for (int e = 0; e < NEP; e++) {
        rdmax_ep *ep = g_ep[e];
        rdmax_ep_pending_purge(ep);
        rdmax__arb_group_cleanup(&g_ctx->arb, &ep->group);
        free(ep->slots);
        free(ep->rq_free);
        free(ep->rbufs);
        free(ep);
    }
    rdmax__profile_ctx_fini(g_ctx);
    free(g_ctx->eps);
    free(g_ctx->inl_stage);
    free(g_ctx);
}

/* ---- steps ------------------------------------------------------------------------------------------- */
static void progress(void)
{
    rdmax__poll_recv(g_ctx);
    rdmax__poll_send(g_ctx);
    if (!rdmax__arb_is_empty(&g_ctx->arb))
        rdmax__dispatch(g_ctx);
}

/* A message from the peer lands in ep e's next posted buffer. */
static void peer_message(fz_in *in, int e)
{
    fq *q = &g_q[e];
    rdmax_ep *ep = g_ep[e];
    if (q->err || q->rq_n == 0)
        return;  /* a real peer would see RNR */
    frecv r = q->rq[q->rq_head];
    q->rq_head = (q->rq_head + 1) % FIFO;
    q->rq_n--;
    dev_recv_done(e, &r);
    uint32_t idx = (uint32_t)(r.wr_id & RDMAX__WR_SLOT_MASK);
    int ud = q->qp.qp_type == IBV_QPT_UD;
    unsigned kind = fz_below(in, 16);
    if (kind == 15) {
        /* an error completion on the receive side, then the QP flushes */
        enum ibv_wc_status st = (enum ibv_wc_status)(1 + fz_below(in, IBV_WC_GENERAL_ERR));
        if (st == IBV_WC_WR_FLUSH_ERR)
            st = IBV_WC_LOC_LEN_ERR;
        cq_push(&g_rcq, r.wr_id, st, IBV_WC_RECV, q->qp.qp_num);
        dev_flush(e);
        return;
    }
    uint32_t len = fz_below(in, RSZ + 1);
    if (fz_below(in, 4) == 0)
        len = ud ? fz_below(in, RDMAX_UD_GRH + 2) : 0;
    uint8_t seed = fz_u8(in);
    for (uint32_t i = 0; i < len; i++)
        ((uint8_t *)r.addr)[i] = pat(seed, i);
    cq_push(&g_rcq, r.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, q->qp.qp_num);
    struct ibv_wc *w = &g_rcq.wc[(g_rcq.head + g_rcq.n - 1) % CQMAX];
    w->byte_len = len;
    uint32_t imm = 0;
    int with_imm = fz_below(in, 8) != 0;
    if (with_imm) {
        switch (fz_below(in, 6)) {
        case 0: imm = fz_u32(in); break;                                       /* anything */
        case 1: imm = RDMAX__IMM_GRANT | fz_below(in, 64); break;              /* a grant */
        case 2: imm = RDMAX__IMM_GRANT | RDMAX__IMM_CLOSE | fz_below(in, 64); break; /* goodbye */
        default: imm = fz_below(in, 64); break;                                /* credits on a message */
        }
        w->wc_flags = IBV_WC_WITH_IMM;
        w->imm_data = RDMAX__LE32(imm);  /* rdmax's own immediates are little-endian */
    }
    w->src_qp = ud && fz_below(in, 2) ? ep->qp->qp_num : 0x300;
    /* what rdmax must make of it */
    mep *m = &g_m[e];
    int deliver;
    if (ud) {
        /* a flush marker: empty, from our own QPN, without immediate data (a user's datagram has it) */
        deliver = len >= RDMAX_UD_GRH && !(len == RDMAX_UD_GRH && w->src_qp == ep->qp->qp_num && !with_imm);
    } else {
        deliver = !(with_imm && (imm & RDMAX__IMM_GRANT));
    }
    if (deliver && ep->recv_cb != rdmax__recv_drop) {
        FZ_CHECK(m->exp_n < FIFO, "model FIFO overflow");
        mexp *x = &m->exp[(m->exp_head + m->exp_n++) % FIFO];
        x->idx = idx;
        x->len = ud ? len - RDMAX_UD_GRH : len;
        x->seed = seed;
    }
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

static void app_send(fz_in *in, int e, int how)
{
    if (g_nops >= MAXOPS)
        return;
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
    /* zero-copy when a completion is asked for or the message is too big to go inline */
    const rdmax_mem *mem = (o->has_comp || o->len > MAXINL) ? &g_mem[e] : NULL;
    if (!mem && o->len > MAXINL)
        return;
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
        if (st == RDMAX_INPROGRESS && g_ep[e]->group.count == 0)
            o->queued = 0, o->accepted = 1;
    } else {
        st = rdmax_send(g_ep[e], o->buf, o->len, mem, o->has_comp ? &o->comp : NULL);
        o->accepted = st == RDMAX_OK || st == RDMAX_INPROGRESS;
        if (st == RDMAX_OK && o->has_comp && mem)
            FZ_CHECK(0, "a zero-copy send returned OK (its completion would never run)");
        if (st != RDMAX_INPROGRESS)
            o->has_comp = 0;  /* the comp is not used */
    }
    o->calling = 0;
    FZ_CHECK(o->accepted || o->queued || o->posted == 0, "op %d reached the device but its call said %s", id,
             rdmax_status_str(st));
    FZ_CHECK(st == RDMAX_OK || st == RDMAX_INPROGRESS || st == RDMAX_ERR_NO_RESOURCE || st == RDMAX_ERR_IO ||
             st == RDMAX_ERR_ENDPOINT || st == RDMAX_ERR_CLOSED || st == RDMAX_ERR_NOT_CONNECTED,
             "send: unexpected %s", rdmax_status_str(st));
    if (st == RDMAX_OK && !mem)
        memset(o->buf, 0xee, sizeof o->buf);  /* inline: the buffer is the caller's again at once */
}

static void check_step(void)
{
    rdmax_ctx *ctx = g_ctx;
    uint32_t outstanding = 0, comps = 0;
    for (int e = 0; e < NEP; e++) {
        rdmax_ep *ep = g_ep[e];
        uint32_t out = ep->sq_head - ep->sq_tail;
        FZ_CHECK(out <= SQD && rdmax__ep_sq_avail(ep) + out == SQD, "endpoint %d: %u outstanding, %u slots free of %u",
                 e, out, rdmax__ep_sq_avail(ep), SQD);
        /* the fast gate: open only while nothing blocks the endpoint */
        /* the gate stops at the post that must be signaled (sig_at), never beyond the queue's end */
        FZ_CHECK(ep->fast_gate == (ep->blocked ? ep->sq_head : ep->sig_at), "endpoint %d: gate at %u, head %u tail %u "
                 "sig_at %u, blocked %u", e, ep->fast_gate, ep->sq_head, ep->sq_tail, ep->sig_at, ep->blocked);
        FZ_CHECK((ep->blocked & RDMAX__BLK_BATCH) || ep->sig_at - ep->sq_head <= ep->sq_tail + SQD - ep->sq_head,
                 "endpoint %d: sig_at %u outside head %u .. tail %u + %u", e, ep->sig_at, ep->sq_head, ep->sq_tail, SQD);
        /* sq_regions counts the outstanding slots that hold a region; free slots hold none */
        uint32_t regions = 0;
        for (uint32_t k = 0; k < SQD; k++)
            if (ep->slots[k].region) {
                FZ_CHECK(((k - ep->sq_tail) & (SQD - 1)) < out, "endpoint %d: free slot %u holds a region", e, k);
                regions++;
            }
        FZ_CHECK(ep->sq_regions == regions, "endpoint %d: sq_regions %u, %u slots hold a region", e,
                 ep->sq_regions, regions);
        outstanding += out;
        if (ep->qp->qp_type == IBV_QPT_RC && !(ep->blocked & RDMAX__BLK_BATCH))
            FZ_CHECK(ep->tx_credits == g_m[e].tx, "endpoint %d: %u send credits, the peer granted %u net", e,
                     ep->tx_credits, g_m[e].tx);
        if (ep->qp->qp_type == IBV_QPT_UD)
            FZ_CHECK(ep->tx_credits == UINT32_MAX, "UD endpoint %d: send credits %u (UD counts none)", e,
                     ep->tx_credits);
        if (ep->qp->qp_type == IBV_QPT_RC && !(ep->blocked & RDMAX__BLK_BATCH))
            FZ_CHECK(ep->rx_unreturned == g_m[e].owed, "endpoint %d owes %u credits, it reposted %u unreturned", e,
                     ep->rx_unreturned, g_m[e].owed);
        if (ep->state != RDMAX_EP_CONNECTED)
            g_m[e].left_connected = 1;
        else
            FZ_CHECK(!g_m[e].left_connected, "endpoint %d is CONNECTED again after failing or closing", e);
    }
    for (int i = 0; i < g_nops; i++)
        comps += g_ops[i].has_comp && (g_ops[i].accepted || g_ops[i].queued) && g_ops[i].completions == 0;
    FZ_CHECK(rdmax__scq_free(ctx) + outstanding == SCQ_CREDITS, "CQ credits %u + outstanding %u != %u",
             rdmax__scq_free(ctx), outstanding, SCQ_CREDITS);
    (void)comps;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    g_in = &in;
    setup(&in);
    check_step();
    int steps = 0;
    while (fz_left(&in) && steps++ < 4000) {
        int e = (int)fz_below(&in, NEP);
        switch (fz_below(&in, 12)) {
        case 0: case 1: case 2: peer_message(&in, e); break;
        case 3: case 4: app_send(&in, e, 0); break;
        case 5: {   /* a chain */
            unsigned n = 1 + fz_below(&in, 40);
            rdmax_batch_begin(g_ep[e]);
            while (n--)
                app_send(&in, e, 1);
            rdmax_status st = rdmax_batch_end(g_ep[e]);
            FZ_CHECK(st == RDMAX_OK || st == RDMAX_ERR_IO, "batch_end: %s", rdmax_status_str(st));
            break;
        }
        case 6: app_send(&in, e, 2); break;
        case 7: case 8: dev_execute(&in, e); break;
        case 9: case 10: progress(); break;
        default:
            switch (fz_below(&in, 4)) {
            case 0: dev_flush(e); break;  /* an asynchronous QP error */
            case 1: {                     /* a stale completion of a destroyed endpoint */
                uint64_t id = g_ep[e]->wr_id_base ^ ((uint64_t)(1 + fz_below(&in, 7)) << 48);
                if (fz_below(&in, 2))
                    id = (uint64_t)(2 + fz_below(&in, 2 * MAXEP)) << 32;  /* an empty or absent slot */
                id |= fz_below(&in, 64) | (fz_below(&in, 2) ? RDMAX__WR_RECV : 0);
                cq_push(fz_below(&in, 2) ? &g_scq : &g_rcq, id, (enum ibv_wc_status)fz_below(&in, 6), IBV_WC_SEND, 0);
                break;
            }
            case 2: g_port_state = fz_below(&in, 2) ? IBV_PORT_ACTIVE : IBV_PORT_DOWN; break;
            default: progress(); break;
            }
        }
        check_step();
    }
    /* the end: every QP flushes, progress until nothing moves */
    for (int e = 0; e < NEP; e++)
        dev_flush(e);
    for (int i = 0; i < 64 && (g_scq.n || g_rcq.n || !rdmax__arb_is_empty(&g_ctx->arb)); i++)
        progress();
    check_step();
    FZ_CHECK(g_scq.n == 0 && g_rcq.n == 0, "completions left after the drain");
    for (int e = 0; e < NEP; e++) {
        rdmax_ep *ep = g_ep[e];
        /* Unsignaled requests that ran before the QP failed have no completion of their own: a flush of
           the failed endpoint must retire them and say why it failed, at once (RC; UD's marker needs an
           address handle, which the fake device has not got). */
        if (ep->qp->qp_type == IBV_QPT_RC && ep->sq_head != ep->sq_tail && ep->state != RDMAX_EP_CONNECTED) {
            rdmax_status st = rdmax_ep_flush(ep, 2000);
            FZ_CHECK(st != RDMAX_OK && st != RDMAX_ERR_TIMEOUT, "endpoint %d: flush after the failure: %s", e,
                     rdmax_status_str(st));
            FZ_CHECK(ep->sq_head == ep->sq_tail, "endpoint %d: %u requests never completed", e,
                     ep->sq_head - ep->sq_tail);
        }
        /* a QP in error with nothing posted produces nothing: only an async event could tell */
        if (g_q[e].cqes)
            FZ_CHECK(ep->state == RDMAX_EP_ERROR || ep->state == RDMAX_EP_CLOSED, "endpoint %d: state %d after its "
                     "QP flushed everything", e, ep->state);
        FZ_CHECK(g_m[e].exp_n == 0 || ep->recv_cb == rdmax__recv_drop, "endpoint %d: %u messages never delivered", e,
                 g_m[e].exp_n);
    }
    FZ_CHECK(g_ctx->comps_out == 0, "%u completion objects outstanding at the end", g_ctx->comps_out);
    for (int i = 0; i < g_nops; i++) {
        mop *o = &g_ops[i];
        if (o->queued) {
            /* a queued send: posted once and completed with the device's word, or failed without a post */
            if (o->completions == 0 && g_ep[o->ep]->state == RDMAX_EP_CONNECTED)
                continue;  /* still waiting for credits from a peer that never sent any: legitimate */
            FZ_CHECK(o->completions == 1, "queued op %d completed %d times", i, o->completions);
            if (o->posted && !o->refused)
                FZ_CHECK((o->comp_status == RDMAX_OK) == (o->dev_status == IBV_WC_SUCCESS),
                         "queued op %d: completion %s, device status %d", i, rdmax_status_str(o->comp_status),
                         o->dev_status);
            else
                FZ_CHECK(o->comp_status != RDMAX_OK, "queued op %d was never posted but completed OK", i);
            continue;
        }
        if (!o->accepted)
            continue;
        FZ_CHECK(o->posted + o->refused == 1, "op %d accepted: posted %d times, refused %d", i, o->posted, o->refused);
        if (o->has_comp) {
            FZ_CHECK(o->completions == 1, "op %d: completed %d times", i, o->completions);
            if (o->posted)
                FZ_CHECK((o->comp_status == RDMAX_OK) == (o->dev_status == IBV_WC_SUCCESS),
                         "op %d: completion %s, device status %d", i, rdmax_status_str(o->comp_status), o->dev_status);
            else
                FZ_CHECK(o->comp_status == RDMAX_ERR_IO, "op %d refused by the device: completion %s", i,
                         rdmax_status_str(o->comp_status));
        }
    }
    teardown();
    return 0;
}
