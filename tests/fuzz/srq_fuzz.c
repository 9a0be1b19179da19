/* Fuzz target: the shared receive queue (SRQ) path of RC, which every RC endpoint receives through:
   rdmax__poll_recv -> rdmax__srq_recv (one completion: pool and buffer from the wr_id, endpoint from the
   QP number, then credits, CLOSE, GRANT and the delivery of a message or of put_imm's immediate data) ->
   rdmax__srq_settle (repost the buffers, then owe the credits, grant at half a window), on a fake device.

   The fake is a verbs context whose poll_cq, post_send and post_srq_recv are the fuzzer's (they are inline
   calls through the context's ops table, so rdmax's code runs unchanged). The pools (pool 0 of the
   context's recv_size, pool 1 of another) are made by hand with their buffers; each endpoint then joins
   its pool through the real rdmax__srq_reserve and rdmax__map_put. The fake keeps to the device's contract
   (an SRQ hands out its posted buffers in order, a completion only for what was posted, byte_len within
   the buffer, a peer never sends more than the credits it was given) while the input decides what a peer
   and the device may choose:
   - a peer's message: length, with or without immediate data, the immediate being any value, credits,
     a grant, a goodbye (GRANT | CLOSE); put with immediate data (RECV_RDMA_WITH_IMM: any immediate, any
     length, the buffer consumed but not written); an error or flushed receive completion;
   - a completion of a QP that is not (or no longer) ours, on a buffer of the SRQ;
   - completions of our sends, success or an error (the QP then flushes its send queue), how many the
     device returns per poll;
   - the application's sends (inline and zero-copy, with and without a completion object);
   - receive callbacks that progress (one message in four by its pattern's seed, up to three deep).
   Checked after every step, against a model:
   - a delivered message is the bytes the peer wrote, in the buffer it landed in, in order, exactly once,
     to the endpoint whose QP it came to, its buffer not posted again before its callback returned;
     grants are not delivered; put_imm's immediate and length go to
     imm_cb unchanged and carry no credits;
   - send credits are exactly the peer's grants minus our sends; the credits rdmax owes are exactly the
     buffers its peer consumed, and every send returns all of them (grants signaled; one from a nested
     poll batch those reposted so far);
   - buffers are never posted twice, always with the pool's address, length and key; after a poll that
     drained the CQ a pool has all of its target posted again, and the
     credits the peers of a pool hold never exceed the buffers posted in it (else a peer would meet RNR);
   - every completion object completes exactly once; an endpoint that failed or closed never comes back. */
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#include "../../rdmax.h"
#define FUZZ_NAME "srq"
#include "fuzz.h"

enum { NEP = 3, MAXEP = 4, SQD = 16, NPOOL = 2, PER_CHUNK = 16, NCHUNK = 4, MAXOPS = 400, CQMAX = 4096,
       FIFO = 512, MAXINL = 64 };
#define NBUF (PER_CHUNK * NCHUNK)
#define SCQ_CREDITS 64u
static const uint32_t g_size[NPOOL] = {256, 64};

/* ---- fake device ------------------------------------------------------------------------------------ */
typedef struct fast_wr {
    uint64_t wr_id;
    int signaled;
    int op;                  /* index into g_ops, -1 for rdmax's own (grant, keepalive) */
} fast_wr;

typedef struct fq {          /* one endpoint's QP */
    struct ibv_qp qp;
    int err;
    unsigned cqes;           /* error and flush completions of this QP */
    fast_wr sq[FIFO];
    unsigned sq_head, sq_n;
} fq;

typedef struct fsrq {
    struct ibv_srq srq;
    struct ibv_mr mr[NCHUNK];
    uint64_t q[NBUF];        /* posted wr_ids, in order */
    unsigned head, n;
    unsigned char posted[NBUF];
    unsigned pending;        /* consumed: completions in the CQ not yet polled */
} fsrq;

typedef struct fcq {
    struct ibv_cq cq;
    struct ibv_wc wc[CQMAX];
    unsigned head, n;
} fcq;

/* ---- the model -------------------------------------------------------------------------------------- */
typedef struct mop {
    int ep;
    uint32_t len;
    uint8_t seed;
    int accepted, has_comp, posted, completions;
    int dev_status;
    rdmax_status comp_status;
    rdmax_comp comp;
    uint8_t buf[256];
} mop;

typedef struct mexp {        /* what the endpoint's callbacks must get next */
    int imm;                 /* 1: imm_cb(imm, len); 0: recv_cb(buffer, len) with the pattern */
    uint32_t val, len, pool, buf;
    uint8_t seed;
    int done;                /* came out of order (after a nested poll batch), ahead of those before it */
} mexp;

typedef struct mep {
    uint32_t tx;             /* our send credits: the peer's grants minus our sends */
    uint32_t owed;           /* buffers the peer consumed and rdmax has not returned yet */
    uint32_t peer;           /* the peer's send credits: what it may still consume of our pool */
    int pool;
    int gone;                /* the peer sent its goodbye, or the QP failed: it sends no more */
    mexp exp[FIFO];
    unsigned exp_head, exp_n;
    int left_connected;
} mep;

static struct verbs_context g_vctx;
static fcq g_scq, g_rcq;
static fq g_q[NEP];
static fsrq g_s[NPOOL];
static mep g_m[NEP];
static mop g_ops[MAXOPS];
static int g_nops;
static rdmax_ctx *g_ctx;
static rdmax_ep *g_ep[NEP];
static rdmax_mem g_mem[NEP];
static fz_in *g_in;

static int q_of(struct ibv_qp *qp)
{
    for (int i = 0; i < NEP; i++)
        if (qp == &g_q[i].qp)
            return i;
    fz_fail(__LINE__, "post on a QP that is not the fake's");
}

static int pool_of_wr(uint64_t wr_id) { return (int)(((uint32_t)wr_id & RDMAX__WR_SLOT_MASK) >> RDMAX__WR_POOL_SHIFT); }

/* A pool buffer's index (chunk << RDMAX__SRQ_SLOT_BITS | slot in the wr_id) as the fake counts them,
   chunk * PER_CHUNK + slot; NBUF when it names no buffer. */
static uint32_t buf_of_wr(uint64_t wr_id)
{
    uint32_t b = (uint32_t)wr_id & RDMAX__WR_BUF_MASK;
    uint32_t c = b >> RDMAX__SRQ_SLOT_BITS, slot = b & ((1u << RDMAX__SRQ_SLOT_BITS) - 1);
    return c < NCHUNK && slot < PER_CHUNK ? c * PER_CHUNK + slot : NBUF;
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

/* The QP enters the error state: its send queue flushes (an SRQ's receives stay posted). */
static void dev_flush(int e)
{
    fq *q = &g_q[e];
    q->err = 1;
    g_m[e].gone = 1;
    while (q->sq_n) {
        fast_wr *w = &q->sq[q->sq_head];
        q->sq_head = (q->sq_head + 1) % FIFO;
        q->sq_n--;
        if (w->op >= 0 && g_ops[w->op].dev_status < 0)
            g_ops[w->op].dev_status = IBV_WC_WR_FLUSH_ERR;
        cq_push(&g_scq, w->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, q->qp.qp_num);
    }
}

static int ep_of_qpn(uint32_t qpn)
{
    for (int e = 0; e < NEP; e++)
        if (g_q[e].qp.qp_num == qpn)
            return e;
    return -1;
}

static int fake_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
    fcq *c = cq == &g_scq.cq ? &g_scq : &g_rcq;
    int n = (int)c->n < num ? (int)c->n : num;
    if (n > 1 && fz_below(g_in, 4) == 3)
        n = 1 + (int)fz_below(g_in, (unsigned)n);
    for (int i = 0; i < n; i++) {
        wc[i] = c->wc[c->head];
        c->head = (c->head + 1) % CQMAX;
        c->n--;
        if (c != &g_rcq)
            continue;
        /* rdmax takes the receive now: the buffer is its again, and a successful one of our endpoint
           (message, grant or put_imm alike) is a credit it owes the peer once the buffer is reposted */
        g_s[pool_of_wr(wc[i].wr_id)].pending--;
        int e = ep_of_qpn(wc[i].qp_num);
        if (e >= 0 && wc[i].status == IBV_WC_SUCCESS) {
            g_m[e].owed++;
            if (wc[i].opcode == IBV_WC_RECV && (wc[i].wc_flags & IBV_WC_WITH_IMM))
                g_m[e].tx += RDMAX__LE32(wc[i].imm_data) & RDMAX__IMM_CREDITS;
        }
    }
    return n;
}

static uint8_t pat(uint8_t seed, uint32_t i) { return (uint8_t)(seed * 31u + i * 7u + (i >> 8)); }

static int g_nested;  /* a receive callback progressed in this step */

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
    (void)bad;
    for (struct ibv_send_wr *w = wr; w; w = w->next) {
        int op = -1;
        uint32_t len = 0;
        for (int s = 0; s < w->num_sge; s++)
            len += w->sg_list[s].length;
        FZ_CHECK(w->opcode == IBV_WR_SEND_WITH_IMM || w->opcode == IBV_WR_RDMA_WRITE, "unexpected opcode %d",
                 (int)w->opcode);
        if (w->opcode == IBV_WR_SEND_WITH_IMM) {
            uint32_t imm = RDMAX__LE32(w->imm_data), c = imm & RDMAX__IMM_CREDITS;
            /* all of them; from a nested poll batch (a callback progressed) those of the buffers reposted
               so far: not those of the batch around it still being delivered */
            FZ_CHECK(g_nested ? c <= m->owed : c == m->owed, "endpoint %d returns %u credits, its peer consumed "
                     "%u buffers since it last returned any", e, c, m->owed);
            if (imm & RDMAX__IMM_GRANT)
                FZ_CHECK(w->send_flags & IBV_SEND_SIGNALED, "an unsignaled grant");
            FZ_CHECK(m->tx > 0, "endpoint %d sends without a credit", e);
            m->peer += c;  /* the buffers were reposted before: the peer may use them */
            m->owed -= c;
            m->tx--;
            if (!(imm & RDMAX__IMM_GRANT)) {
                FZ_CHECK(w->num_sge == 1 && len >= 3, "an application send of %u bytes in %d SGEs", len, w->num_sge);
                const uint8_t *p = (const uint8_t *)(uintptr_t)w->sg_list[0].addr;
                op = p[0] | p[1] << 8;
                FZ_CHECK(op < g_nops && g_ops[op].ep == e && g_ops[op].len == len && p[2] == g_ops[op].seed,
                         "endpoint %d: a send the application did not make (op %d, %u bytes)", e, op, len);
                FZ_CHECK(g_ops[op].posted++ == 0, "op %d posted twice", op);
                g_ops[op].dev_status = -1;
            }
        }
        FZ_CHECK(q->sq_n < FIFO, "fake SQ overflow");
        fast_wr *f = &q->sq[(q->sq_head + q->sq_n++) % FIFO];
        f->wr_id = w->wr_id;
        f->signaled = (w->send_flags & IBV_SEND_SIGNALED) != 0;
        f->op = op;
        if (q->err)
            dev_flush(e);
    }
    return 0;
}

static int fake_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    (void)bad;
    int p = srq == &g_s[0].srq ? 0 : srq == &g_s[1].srq ? 1 : -1;
    FZ_CHECK(p >= 0, "post to an SRQ that is not the fake's");
    fsrq *f = &g_s[p];
    const struct rdmax__srq *s = g_ctx->rx->pool[p];
    for (struct ibv_recv_wr *w = wr; w; w = w->next) {
        uint32_t b = buf_of_wr(w->wr_id);
        FZ_CHECK((w->wr_id & RDMAX__WR_SRQ) == RDMAX__WR_SRQ && (w->wr_id & RDMAX__WR_RECV) && pool_of_wr(w->wr_id) == p,
                 "pool %d: receive wr_id 0x%llx does not name its SRQ and pool", p, (unsigned long long)w->wr_id);
        FZ_CHECK(b < NBUF, "pool %d: buffer %u of %u", p, b, NBUF);
        FZ_CHECK(!f->posted[b], "pool %d: buffer %u posted twice", p, b);
        FZ_CHECK(w->num_sge == 1 &&
                 w->sg_list[0].addr == (uintptr_t)rdmax__srq_buf(s, (uint32_t)w->wr_id & RDMAX__WR_BUF_MASK) &&
                 w->sg_list[0].length == g_size[p] && w->sg_list[0].lkey == f->mr[b / PER_CHUNK].lkey,
                 "pool %d: buffer %u posted with the wrong address, length or key", p, b);
        FZ_CHECK(f->n < NBUF, "pool %d: more posted than buffers", p);
        f->posted[b] = 1;
        f->q[(f->head + f->n++) % NBUF] = w->wr_id;
    }
    return 0;
}

static int fake_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *pa, size_t len)
{
    (void)c, (void)port;
    memset(pa, 0, len);
    pa->state = IBV_PORT_ACTIVE;
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

/* The callback's expectation: the oldest one; after a callback progressed in this step (the nested poll
   batch delivers later messages before the rest of the batch around it) the oldest one of the same
   buffer (imm: of the same immediate and length). */
static mexp *next_exp(int e, int imm, const void *data, uint32_t val, size_t len)
{
    mep *m = &g_m[e];
    mexp *x = NULL, *first = NULL;
    for (unsigned i = 0; i < m->exp_n && !x; i++) {
        mexp *c = &m->exp[(m->exp_head + i) % FIFO];
        if (c->done)
            continue;
        if (!first)
            first = c;
        if (c->imm == imm && (imm ? c->val == val && c->len == len
                                  : (const char *)data == rdmax__srq_buf(g_ctx->rx->pool[c->pool], c->buf)))
            x = c;
    }
    FZ_CHECK(first != NULL, "endpoint %d: a callback that must not come (a grant, or another endpoint's)", e);
    if (!g_nested)
        x = first;
    FZ_CHECK(x != NULL, "endpoint %d: a callback for nothing the peer sent", e);
    x->done = 1;
    while (m->exp_n > 0 && m->exp[m->exp_head].done) {
        m->exp_head = (m->exp_head + 1) % FIFO;
        m->exp_n--;
    }
    return x;
}

static int g_depth;  /* callbacks that progress, nested */
static void progress(void);

static void on_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    int e = (int)(intptr_t)user;
    FZ_CHECK(ep == g_ep[e], "receive callback with another endpoint");
    mexp *x = next_exp(e, 0, data, 0, len);
    FZ_CHECK(!x->imm, "endpoint %d: a message where put_imm's immediate was due", e);
    FZ_CHECK((char *)data == rdmax__srq_buf(g_ctx->rx->pool[x->pool], x->buf), "endpoint %d: message not in pool %u "
             "buffer %u", e, x->pool, x->buf);
    FZ_CHECK(len == x->len, "endpoint %d: %zu bytes delivered, the peer sent %u", e, len, x->len);
    for (uint32_t i = 0; i < len; i++)
        FZ_CHECK(((uint8_t *)data)[i] == pat(x->seed, i), "endpoint %d: byte %u of a message differs", e, i);
    /* one message in four (by its seed, which the input chose) progresses from its callback, up to three
       deep: a nested poll batch; the buffer being delivered is not posted again before its callback returns */
    if (x->seed % 4 == 1 && g_depth < 3) {
        uint32_t p = x->pool, b = x->buf;
        fsrq *f = &g_s[p];
        uint32_t fb = (b >> RDMAX__SRQ_SLOT_BITS) * PER_CHUNK + (b & ((1u << RDMAX__SRQ_SLOT_BITS) - 1));
        g_depth++;
        g_nested = 1;
        progress();
        g_depth--;
        FZ_CHECK(!f->posted[fb], "endpoint %d: pool %u buffer %u posted again while its callback ran", e, p, b);
    }
}

static void on_imm(rdmax_ep *ep, uint32_t imm, size_t len, void *user)
{
    int e = (int)(intptr_t)user;
    FZ_CHECK(ep == g_ep[e], "imm callback with another endpoint");
    mexp *x = next_exp(e, 1, NULL, imm, len);
    FZ_CHECK(x->imm, "endpoint %d: put_imm's immediate where a message was due", e);
    FZ_CHECK(imm == x->val && len == x->len, "endpoint %d: imm 0x%x len %zu, the peer put 0x%x len %u", e, imm, len,
             x->val, x->len);
}

static void quiet(rdmax_log_level lvl, rdmax_log_item item, const char *msg, void *user)
{
    (void)lvl, (void)item, (void)msg, (void)user;
}

/* ---- setup ------------------------------------------------------------------------------------------ */
static void setup(fz_in *in)
{
    memset(&g_vctx, 0, sizeof g_vctx);
    memset(&g_scq, 0, sizeof g_scq);
    memset(&g_rcq, 0, sizeof g_rcq);
    memset(g_q, 0, sizeof g_q);
    memset(g_s, 0, sizeof g_s);
    memset(g_m, 0, sizeof g_m);
    g_nops = 0;
    g_vctx.sz = sizeof g_vctx;
    g_vctx.query_port = fake_query_port;
    g_vctx.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
    g_vctx.context.ops.poll_cq = fake_poll_cq;
    g_vctx.context.ops.post_send = fake_post_send;
    g_vctx.context.ops.post_srq_recv = fake_post_srq_recv;
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
    ctx->rcq_size = CQMAX;  /* big enough: rdmax__srq_reserve resizes nothing */
    ctx->desc.max_eps = MAXEP;
    ctx->desc.recv_size = g_size[0];
    ctx->eps_cap = MAXEP;
    ctx->eps_mask = MAXEP - 1;  /* MAXEP is a power of two */
    ctx->desc.logger.func = quiet;
    ctx->log_level = RDMAX_LOG_ERROR;
    ctx->eps = (rdmax__ep_ref *)calloc(MAXEP, sizeof *ctx->eps);
    snprintf(ctx->attr.name, sizeof ctx->attr.name, "fuzz0");
    ctx->attr.port = 1;
    ctx->attr.max_sge = RDMAX_MAX_SGE;
    ctx->attr.max_msg_sz = 1u << 20;
    ctx->attr.max_inline = MAXINL;
    ctx->attr.max_srq_wr = NBUF;
    ctx->attr.max_cqe = CQMAX;
    ctx->inl_stage = (char *)calloc(RDMAX_BATCH_MAX, MAXINL);
    rdmax__chain_clean(ctx, 0, RDMAX_BATCH_MAX);  /* the post list's entries, as rdmax_ctx_create sets them */
    ctx->port_up = 1;
    g_ctx = ctx;

    /* the pools, as rdmax__pool_get and rdmax__srq_chunk leave them (buffers low indexes first) */
    struct rdmax__rx *x = (struct rdmax__rx *)calloc(1, sizeof *x);
    x->map_cap = 64;
    x->map = (__typeof__(x->map))calloc(x->map_cap, sizeof *x->map);
    ctx->rx = x;
    for (int p = 0; p < NPOOL; p++) {
        struct rdmax__srq *s = (struct rdmax__srq *)calloc(1, sizeof *s);
        g_s[p].srq.context = &g_vctx.context;
        s->srq = &g_s[p].srq;
        s->recv_size = g_size[p];
        s->per_chunk = PER_CHUNK;
        for (int i = 0; i < RDMAX__RECV_BATCH; i++) {  /* as rdmax__pool_get: the prebuilt chain */
            s->rq[i].sge.length = g_size[p];
            s->rq[i].wr.sg_list = &s->rq[i].sge;
            s->rq[i].wr.num_sge = 1;
            s->rq[i].wr.next = i + 1 < RDMAX__RECV_BATCH ? &s->rq[i + 1].wr : NULL;
        }
        s->cap = NBUF;
        s->chunks = (__typeof__(s->chunks))calloc(NCHUNK, sizeof *s->chunks);
        s->chunks_cap = NCHUNK;
        s->free = (uint32_t *)calloc(NBUF, sizeof *s->free);
        for (uint32_t c = 0; c < NCHUNK; c++) {
            g_s[p].mr[c].lkey = 0x6000 + 16 * (uint32_t)p + c;
            s->chunks[c].base = (char *)calloc(PER_CHUNK, g_size[p]);
            s->chunks[c].mr = &g_s[p].mr[c];
            s->chunks[c].lkey = g_s[p].mr[c].lkey;
            for (uint32_t i = PER_CHUNK; i-- > 0;)
                s->free[s->n_free++] = c << RDMAX__SRQ_SLOT_BITS | i;
        }
        s->n_chunks = NCHUNK;
        s->n_bufs = NBUF;
        x->bytes += (uint64_t)NBUF * g_size[p];
        x->pool[p] = s;
    }

    for (int e = 0; e < NEP; e++) {
        rdmax_ep *ep = (rdmax_ep *)calloc(1, sizeof *ep);
        fq *q = &g_q[e];
        mep *m = &g_m[e];
        q->qp.context = &g_vctx.context;
        q->qp.qp_type = IBV_QPT_RC;
        q->qp.qp_num = 0x100 + (uint32_t)e;
        q->qp.state = IBV_QPS_RTS;
        ep->ctx = ctx;
        ep->qp = &q->qp;
        ep->post_send = fake_post_send;  /* as rdmax_ep_create: the provider's post_send */
        ep->desc.timeout = 14;
        ep->desc.retry_cnt = 6;
        ep->sq_mask = SQD - 1;
        ep->signal_interval = 1 + fz_below(in, SQD / 2);
        ep->sig_at = ep->sq_head + ep->signal_interval - 1;
        ep->max_inline = MAXINL;
        ep->rd_avail = 4;
        m->pool = e == NEP - 1 ? (int)fz_below(in, NPOOL) : 0;
        ep->pool = (uint32_t)m->pool;
        ep->recv_size = g_size[m->pool];
        ep->peer_recv_size = 256;
        uint32_t window = 1 + fz_below(in, 16);  /* ep desc rq_depth (below rdmax's least, 4, on purpose) */
        ep->rq_depth = window + 1;  /* as rdmax_ep_create: the buffers (credits) that back it, + 1 for grants */
        ep->grant_at = window / 2 ? window / 2 : 1;
        ep->recv_cb = fz_below(in, 8) != 7 ? on_recv : rdmax__recv_drop;  /* as rdmax_ep_create */
        ep->imm_cb = fz_below(in, 8) != 7 ? on_imm : NULL;
        ep->user = (void *)(intptr_t)e;
        ep->slots = (rdmax__slot *)calloc(SQD, sizeof *ep->slots);
        ep->wr.sg_list = &ctx->fsge;  /* as rdmax_ep_create: the fast put's prebuilt request */
        ep->wr.num_sge = 1;
        ep->wr.opcode = IBV_WR_RDMA_WRITE;
        ep->wr.send_flags = IBV_SEND_INLINE;
        snprintf(ep->peer, sizeof ep->peer, "fuzz-peer-%d", e);
        ep->peer_qpn = 0x200 + (uint32_t)e;
        ctx->eps[e].ep = ep;
        uint16_t gen = (uint16_t)(1 + fz_below(in, 3));
        ctx->eps[e].key = RDMAX__EP_KEY(gen, e);
        ctx->n_eps++;
        ep->wr_id_base = (uint64_t)gen << 48 | (uint64_t)e << 32;
        ep->wr.wr_id = ep->wr_id_base;
        g_ep[e] = ep;
        g_mem[e].lkey = 0x7000 + (uint32_t)e;
        /* as rdmax_ep_create: join the pool (its target grows by the window, buffers are posted) and
           the QP number map; as connect: the peer's window from its record, ours in our record */
        FZ_CHECK(rdmax__srq_reserve(ctx, ep->pool, ep->rq_depth) == RDMAX_OK, "srq_reserve failed");
        FZ_CHECK(rdmax__map_put(ctx, q->qp.qp_num, (uint32_t)e) == RDMAX_OK, "map_put failed");
        ep->tx_credits = m->tx = 1 + fz_below(in, 32);
        m->peer = ep->rq_depth;
        ep->state = RDMAX_EP_CONNECTED;
        ep->blocked = 0;
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
        free(ep);
    }
    for (int p = 0; p < NPOOL; p++) {
        struct rdmax__srq *s = g_ctx->rx->pool[p];
        for (uint32_t c = 0; c < s->n_chunks; c++)
            free(s->chunks[c].base);
        free(s->chunks);
        free(s->free);
        free(s);
    }
    free(g_ctx->rx->map);
    free(g_ctx->rx);
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

/* The next posted buffer of pool p, taken by the device for an arriving message. */
static uint64_t srq_take(int p)
{
    fsrq *f = &g_s[p];
    uint64_t id = f->q[f->head];
    f->head = (f->head + 1) % NBUF;
    f->n--;
    f->posted[buf_of_wr(id)] = 0;
    f->pending++;
    return id;
}

/* A message from ep e's peer: it lands in the next buffer of e's pool. */
static void peer_message(fz_in *in, int e)
{
    mep *m = &g_m[e];
    fsrq *f = &g_s[m->pool];
    if (m->gone || g_q[e].err || m->peer == 0)
        return;  /* a peer without credits does not send; a failed QP receives nothing */
    FZ_CHECK(f->n > 0, "endpoint %d: its peer holds %u credits and pool %d has no buffer posted (RNR)", e, m->peer,
             m->pool);
    uint64_t id = srq_take(m->pool);
    m->peer--;
    uint32_t b = (uint32_t)id & RDMAX__WR_BUF_MASK;
    char *buf = rdmax__srq_buf(g_ctx->rx->pool[m->pool], b);
    uint32_t qpn = g_q[e].qp.qp_num;
    unsigned kind = fz_below(in, 16);
    if (kind == 15) {
        /* an error receive completion (the QP fails), or a flushed one */
        enum ibv_wc_status st = (enum ibv_wc_status)(1 + fz_below(in, IBV_WC_GENERAL_ERR));
        cq_push(&g_rcq, id, st, IBV_WC_RECV, qpn);
        dev_flush(e);
        return;
    }
    struct ibv_wc *w;
    if (kind >= 12) {
        /* rdmax_put_imm of the peer: a buffer consumed, nothing written into it */
        uint32_t imm = kind == 12 ? fz_u32(in) : fz_below(in, 1u << 16);
        uint32_t len = kind == 14 ? fz_u32(in) % (1u << 20) : fz_below(in, 4096);
        cq_push(&g_rcq, id, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, qpn);
        w = &g_rcq.wc[(g_rcq.head + g_rcq.n - 1) % CQMAX];
        w->byte_len = len;
        w->wc_flags = IBV_WC_WITH_IMM;
        w->imm_data = htonl(imm);
        if (g_ep[e]->imm_cb) {
            FZ_CHECK(m->exp_n < FIFO, "model FIFO overflow");
            mexp *x = &m->exp[(m->exp_head + m->exp_n++) % FIFO];
            x->imm = 1, x->val = imm, x->len = len, x->done = 0;
        }
        return;
    }
    uint32_t len = fz_below(in, g_size[m->pool] + 1);
    if (fz_below(in, 4) == 0)
        len = 0;
    uint8_t seed = fz_u8(in);
    for (uint32_t i = 0; i < len; i++)
        buf[i] = (char)pat(seed, i);
    cq_push(&g_rcq, id, IBV_WC_SUCCESS, IBV_WC_RECV, qpn);
    w = &g_rcq.wc[(g_rcq.head + g_rcq.n - 1) % CQMAX];
    w->byte_len = len;
    uint32_t imm = 0;
    if (fz_below(in, 8) != 0) {
        switch (fz_below(in, 6)) {
        case 0: imm = fz_u32(in); break;                                        /* anything */
        case 1: imm = RDMAX__IMM_GRANT | fz_below(in, 64); break;               /* a grant */
        case 2: imm = RDMAX__IMM_GRANT | RDMAX__IMM_CLOSE | fz_below(in, 64); break; /* goodbye */
        default: imm = fz_below(in, 64); break;                                 /* credits on a message */
        }
        w->wc_flags = IBV_WC_WITH_IMM;
        w->imm_data = RDMAX__LE32(imm);  /* rdmax's own immediates are little-endian */
    }
    if (imm & RDMAX__IMM_CLOSE)
        m->gone = 1;  /* a peer that said goodbye sends nothing more */
    if (!(imm & RDMAX__IMM_GRANT) && g_ep[e]->recv_cb != rdmax__recv_drop) {
        FZ_CHECK(m->exp_n < FIFO, "model FIFO overflow");
        mexp *x = &m->exp[(m->exp_head + m->exp_n++) % FIFO];
        x->imm = 0, x->len = len, x->seed = seed, x->pool = (uint32_t)m->pool, x->buf = b, x->done = 0;
    }
}

/* A receive of a QP that is not ours (an endpoint destroyed since, its QP number unknown). */
static void stale_recv(fz_in *in)
{
    int p = (int)fz_below(in, NPOOL);
    uint32_t held = 0;
    for (int e = 0; e < NEP; e++)
        held += g_m[e].pool == p && !g_m[e].gone && !g_q[e].err ? g_m[e].peer + g_m[e].owed : 0;
    if (g_s[p].n <= held)
        return;  /* its peer's credits were counted out of the pool's target when it went: a buffer no
                    live peer holds or is owed */
    uint64_t id = srq_take(p);
    cq_push(&g_rcq, id, fz_below(in, 2) ? IBV_WC_SUCCESS : IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0x999);
    g_rcq.wc[(g_rcq.head + g_rcq.n - 1) % CQMAX].byte_len = fz_below(in, 2) ? 0 : g_size[p];
}

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

static void app_send(fz_in *in, int e)
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
    o->has_comp = fz_below(in, 2);
    o->comp.cb = on_comp;
    o->comp.user = o;
    const rdmax_mem *mem = (o->has_comp || o->len > MAXINL) ? &g_mem[e] : NULL;
    rdmax_status st = rdmax_send(g_ep[e], o->buf, o->len, mem, o->has_comp ? &o->comp : NULL);
    o->accepted = st == RDMAX_OK || st == RDMAX_INPROGRESS;
    FZ_CHECK(!(st == RDMAX_OK && o->has_comp), "a zero-copy send returned OK (its completion would never run)");
    if (st != RDMAX_INPROGRESS)
        o->has_comp = 0;
    FZ_CHECK(o->accepted || o->posted == 0, "op %d reached the device but its call said %s", id, rdmax_status_str(st));
    FZ_CHECK(st == RDMAX_OK || st == RDMAX_INPROGRESS || st == RDMAX_ERR_NO_RESOURCE || st == RDMAX_ERR_ENDPOINT ||
             st == RDMAX_ERR_CLOSED, "send: unexpected %s", rdmax_status_str(st));
    FZ_CHECK(!o->accepted || o->posted == 1, "op %d accepted but posted %d times", id, o->posted);
}

static void check_step(int settled)
{
    rdmax_ctx *ctx = g_ctx;
    uint32_t outstanding = 0, peers[NPOOL] = {0, 0}, target[NPOOL] = {0, 0};
    for (int e = 0; e < NEP; e++) {
        rdmax_ep *ep = g_ep[e];
        mep *m = &g_m[e];
        uint32_t out = ep->sq_head - ep->sq_tail;
        FZ_CHECK(out <= SQD && rdmax__ep_sq_avail(ep) + out == SQD, "endpoint %d: %u outstanding, %u slots free", e,
                 out, rdmax__ep_sq_avail(ep));
        /* the gate stops at the post that must be signaled (sig_at), never beyond the queue's end */
        FZ_CHECK(ep->fast_gate == (ep->blocked ? ep->sq_head : ep->sig_at), "endpoint %d: gate at %u, head %u tail %u "
                 "sig_at %u, blocked %u", e, ep->fast_gate, ep->sq_head, ep->sq_tail, ep->sig_at, ep->blocked);
        FZ_CHECK((ep->blocked & RDMAX__BLK_BATCH) || ep->sig_at - ep->sq_head <= ep->sq_tail + SQD - ep->sq_head,
                 "endpoint %d: sig_at %u outside head %u .. tail %u + %u", e, ep->sig_at, ep->sq_head, ep->sq_tail, SQD);
        outstanding += out;
        FZ_CHECK(ep->tx_credits == m->tx, "endpoint %d: %u send credits, the peer granted %u net", e, ep->tx_credits,
                 m->tx);
        FZ_CHECK(ep->rx_unreturned == m->owed, "endpoint %d owes %u credits, its peer consumed %u unreturned", e,
                 ep->rx_unreturned, m->owed);
        if (ep->state != RDMAX_EP_CONNECTED)
            m->left_connected = 1;
        else
            FZ_CHECK(!m->left_connected, "endpoint %d is CONNECTED again after failing or closing", e);
        target[m->pool] += ep->rq_depth;
        if (!m->gone && !g_q[e].err)
            peers[m->pool] += m->peer;
    }
    FZ_CHECK(rdmax__scq_free(ctx) + outstanding == SCQ_CREDITS, "CQ credits %u + outstanding %u != %u", rdmax__scq_free(ctx),
             outstanding, SCQ_CREDITS);
    uint64_t posted = 0;
    for (int p = 0; p < NPOOL; p++) {
        const struct rdmax__srq *s = ctx->rx->pool[p];
        fsrq *f = &g_s[p];
        /* rdmax counts a buffer posted until it polls its completion */
        FZ_CHECK(s->posted == f->n + f->pending, "pool %d: rdmax counts %u posted, the SRQ holds %u and the CQ %u", p,
                 s->posted, f->n, f->pending);
        FZ_CHECK(s->posted + s->n_free == s->n_bufs && s->n_stage == 0, "pool %d: %u posted + %u free != %u buffers "
                 "(%u staged after a poll)", p, s->posted, s->n_free, s->n_bufs, s->n_stage);
        FZ_CHECK(s->target == target[p], "pool %d: target %u, the windows of its endpoints add up to %u", p, s->target,
                 target[p]);
        if (settled)
            FZ_CHECK(s->posted == s->target, "pool %d: %u posted after the poll, target %u (a consumed buffer not "
                     "reposted)", p, s->posted, s->target);
        FZ_CHECK(peers[p] <= f->n, "pool %d: its peers hold %u credits, %u buffers are posted (a peer would meet RNR)",
                 p, peers[p], f->n);
        posted += s->posted;
    }
    FZ_CHECK(ctx->rx->posted == posted, "context: %llu posted, the pools %llu", (unsigned long long)ctx->rx->posted,
             (unsigned long long)posted);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_in in = {data, size};
    g_in = &in;
    setup(&in);
    check_step(1);
    int steps = 0;
    while (fz_left(&in) && steps++ < 4000) {
        int e = (int)fz_below(&in, NEP), settled = 0;
        g_nested = 0;
        switch (fz_below(&in, 12)) {
        case 0: case 1: case 2: case 3: peer_message(&in, e); break;
        case 4: case 5: app_send(&in, e); break;
        case 6: case 7: dev_execute(&in, e); break;
        case 8: case 9: progress(); settled = g_rcq.n == 0; break;
        case 10: stale_recv(&in); break;
        default:
            if (fz_below(&in, 2))
                dev_flush(e);  /* an asynchronous QP error */
            else
                progress(), settled = g_rcq.n == 0;
        }
        check_step(settled);
    }
    /* the end: every QP fails, progress until nothing moves */
    for (int e = 0; e < NEP; e++)
        dev_flush(e);
    for (int i = 0; i < 64 && (g_scq.n || g_rcq.n || !rdmax__arb_is_empty(&g_ctx->arb)); i++)
        progress();
    check_step(1);
    FZ_CHECK(g_scq.n == 0 && g_rcq.n == 0, "completions left after the drain");
    for (int e = 0; e < NEP; e++) {
        rdmax_ep *ep = g_ep[e];
        if (g_q[e].cqes)
            FZ_CHECK(ep->state == RDMAX_EP_ERROR || ep->state == RDMAX_EP_CLOSED, "endpoint %d: state %d after its QP "
                     "failed", e, ep->state);
        FZ_CHECK(g_m[e].exp_n == 0, "endpoint %d: %u callbacks never came", e, g_m[e].exp_n);
        /* unsignaled requests that ran before the QP failed get no completion: the tick's query of the QP
           finds that (not driven here) */
    }
    for (int i = 0; i < g_nops; i++) {
        mop *o = &g_ops[i];
        if (!o->accepted || !o->has_comp)
            continue;
        FZ_CHECK(o->completions == 1, "op %d: completed %d times", i, o->completions);
        FZ_CHECK((o->comp_status == RDMAX_OK) == (o->dev_status == IBV_WC_SUCCESS), "op %d: completion %s, device "
                 "status %d", i, rdmax_status_str(o->comp_status), o->dev_status);
    }
    FZ_CHECK(g_ctx->comps_out == 0, "%u completion objects outstanding at the end", g_ctx->comps_out);
    teardown();
    return 0;
}
