/* Fuzz target: the receive pool path of RC, which every RC endpoint receives through (the pool's
   buffers posted on each endpoint's own receive queue, >>srq):
   rdmax__poll_recv -> rdmax__srq_recv (one completion: pool and buffer from the wr_id, endpoint from the
   QP number, then credits, CLOSE, GRANT and the delivery of a message or of put_imm's immediate data) ->
   rdmax__srq_settle (repost the buffers, then owe the credits, grant at half a window), on a fake device.

   The fake is a verbs context whose poll_cq, post_send and post_recv are the fuzzer's (they are inline
   calls through the context's ops table, so rdmax's code runs unchanged). The pools (pool 0 of the
   context's recv_size, pool 1 of another) are made by hand with their buffers; each endpoint then joins
   its pool through the real rdmax__srq_reserve, rdmax__map_put and rdmax__ep_rq_fill. The fake keeps to
   the device's contract (a receive queue hands out its posted buffers in order, a QP in error flushes
   them, a completion only for what was posted, byte_len within
   the buffer, a peer never sends more than the credits it was given) while the input decides what a peer
   and the device may choose:
   - a peer's message: length, with or without immediate data, the immediate being any value, credits,
     a grant, a goodbye (GRANT | CLOSE); put with immediate data (RECV_RDMA_WITH_IMM: any immediate, any
     length, the buffer consumed but not written); an error or flushed receive completion;
   - a completion of a QP that is not (or no longer) ours, naming any buffer of a pool (rdmax must leave
     that buffer alone);
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
   - buffers are never posted twice, always with the pool's address, length and key, on the queue of the
     endpoint whose pool it is; after a poll that drained the CQ every connected endpoint has its credits
     posted on its queue again, and the credits a peer holds never exceed the buffers posted on its
     endpoint's queue (else it would meet RNR);
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
typedef struct fsrq {        /* a pool */
    struct ibv_mr mr[NCHUNK];
    unsigned char posted[NBUF];
    unsigned pending;        /* consumed: completions in the CQ not yet polled */
} fsrq;

typedef struct frq {         /* an endpoint's receive queue */
    uint64_t q[NBUF];        /* posted wr_ids, in order */
    unsigned head, n;
} frq;

/* ---- the model -------------------------------------------------------------------------------------- */
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
    int drops, imms;         /* no receive callback (rdmax drops messages); an imm callback */
} mep;

#include "rxfuzz.h"

static fsrq g_s[NPOOL];
static frq g_r[NEP];
static int g_nested;  /* a receive callback progressed in this step */

static int pool_of_wr(uint64_t wr_id) { return (int)(((uint32_t)wr_id & RDMAX__WR_SLOT_MASK) >> RDMAX__WR_POOL_SHIFT); }

/* A pool buffer's index (chunk << RDMAX__SRQ_SLOT_BITS | slot in the wr_id) as the fake counts them,
   chunk * PER_CHUNK + slot; NBUF when it names no buffer. */
static uint32_t buf_of_wr(uint64_t wr_id)
{
    uint32_t b = (uint32_t)wr_id & RDMAX__WR_BUF_MASK;
    uint32_t c = b >> RDMAX__SRQ_SLOT_BITS, slot = b & ((1u << RDMAX__SRQ_SLOT_BITS) - 1);
    return c < NCHUNK && slot < PER_CHUNK ? c * PER_CHUNK + slot : NBUF;
}

static int ep_of_qpn(uint32_t qpn)
{
    for (int e = 0; e < NEP; e++)
        if (g_q[e].qp.qp_num == qpn)
            return e;
    return -1;
}

/* rdmax takes the receive now: the buffer is its again, and a successful one of our endpoint (message,
   grant or put_imm alike) is a credit it owes the peer once the buffer is reposted */
static void rx_polled(const struct ibv_wc *wc)
{
    int e = ep_of_qpn(wc->qp_num);
    if (e < 0)
        return;  /* not ours (stale_recv): it took no buffer */
    g_s[pool_of_wr(wc->wr_id)].pending--;
    if (e >= 0 && wc->status == IBV_WC_SUCCESS) {
        g_m[e].owed++;
        if (wc->opcode == IBV_WC_RECV && (wc->wc_flags & IBV_WC_WITH_IMM))
            g_m[e].tx += RDMAX__LE32(wc->imm_data) & RDMAX__IMM_CREDITS;
    }
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
            }
        }
        sq_take(q, w, op);
    }
    return 0;
}

/* The next buffer posted on e's queue, taken by the device (a message, or a flush). */
static uint64_t rq_take(int e)
{
    frq *r = &g_r[e];
    uint64_t id = r->q[r->head];
    r->head = (r->head + 1) % NBUF;
    r->n--;
    g_s[g_m[e].pool].posted[buf_of_wr(id)] = 0;
    g_s[g_m[e].pool].pending++;
    return id;
}

/* A QP in error flushes its receives; its peer sends no more. */
static void rx_flush(int e)
{
    g_m[e].gone = 1;
    while (g_r[e].n > 0)
        cq_push(&g_rcq, rq_take(e), IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, g_q[e].qp.qp_num);
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    (void)bad;
    int e = q_of(qp), p = g_m[e].pool;
    fsrq *f = &g_s[p];
    for (struct ibv_recv_wr *w = wr; w; w = w->next) {
        uint32_t b = buf_of_wr(w->wr_id);
        FZ_CHECK((w->wr_id & RDMAX__WR_SRQ) == RDMAX__WR_SRQ && (w->wr_id & RDMAX__WR_RECV) && pool_of_wr(w->wr_id) == p,
                 "endpoint %d: receive wr_id 0x%llx does not name its pool %d", e, (unsigned long long)w->wr_id, p);
        FZ_CHECK(!g_ep[e] || (w->wr_id >> RDMAX__WR_OWNER_SHIFT) == ((g_ep[e]->wr_id_base >> 32) & 0xffff),
                 "endpoint %d: receive wr_id 0x%llx does not carry its table index", e, (unsigned long long)w->wr_id);
        FZ_CHECK(b < NBUF, "pool %d: buffer %u of %u", p, b, NBUF);
        FZ_CHECK(!f->posted[b], "pool %d: buffer %u posted twice", p, b);
        FZ_CHECK(w->num_sge == 1 &&
                 w->sg_list[0].addr == (uintptr_t)fd_pool_buf(g_ctx, (uint32_t)p, (uint32_t)w->wr_id & RDMAX__WR_BUF_MASK) &&
                 w->sg_list[0].length == g_size[p] && w->sg_list[0].lkey == f->mr[b / PER_CHUNK].lkey,
                 "pool %d: buffer %u posted with the wrong address, length or key", p, b);
        FZ_CHECK(g_r[e].n < NBUF, "endpoint %d: more posted than buffers", e);
        f->posted[b] = 1;
        g_r[e].q[(g_r[e].head + g_r[e].n++) % NBUF] = w->wr_id;
        if (g_q[e].err)  /* a QP in error completes what is posted to it at once, flushed */
            cq_push(&g_rcq, rq_take(e), IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, qp->qp_num);
    }
    return 0;
}

/* ---- the application's side --------------------------------------------------------------------------- */
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
                                  : (const char *)data == fd_pool_buf(g_ctx, c->pool, c->buf)))
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

static void on_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    int e = (int)(intptr_t)user;
    FZ_CHECK(ep == g_ep[e], "receive callback with another endpoint");
    mexp *x = next_exp(e, 0, data, 0, len);
    FZ_CHECK(!x->imm, "endpoint %d: a message where put_imm's immediate was due", e);
    FZ_CHECK((char *)data == fd_pool_buf(g_ctx, x->pool, x->buf), "endpoint %d: message not in pool %u "
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

/* ---- setup ------------------------------------------------------------------------------------------ */
static void setup(fz_in *in)
{
    memset(g_s, 0, sizeof g_s);
    memset(g_r, 0, sizeof g_r);
    rx_setup_ctx(fake_post_recv, NULL, fake_post_send);
    g_port_state = IBV_PORT_ACTIVE;
    fd_ctx_desc(g_ctx)->recv_size = g_size[0];
    fd_ctx_attr(g_ctx)->max_srq_wr = NBUF;
    fd_ctx_attr(g_ctx)->max_cqe = CQMAX;  /* big enough: joining a pool resizes nothing */
    fd_ctx_ready(g_ctx, &g_scq.cq, &g_rcq.cq, SCQ_CREDITS);
    for (int p = 0; p < NPOOL; p++) {
        for (uint32_t c = 0; c < NCHUNK; c++)
            g_s[p].mr[c].lkey = 0x6000 + 16 * (uint32_t)p + c;
        fd_ctx_pool(g_ctx, (uint32_t)p, g_size[p], PER_CHUNK, NCHUNK, g_s[p].mr);
    }

    for (int e = 0; e < NEP; e++) {
        mep *m = &g_m[e];
        uint32_t signal_interval = 1 + fz_below(in, SQD / 2);
        m->pool = e == NEP - 1 ? (int)fz_below(in, NPOOL) : 0;
        uint32_t window = 1 + fz_below(in, 16);  /* ep desc rq_depth (below rdmax's least, 4, on purpose) */
        rdmax_recv_cb recv_cb = fz_below(in, 8) != 7 ? on_recv : NULL;
        rdmax_imm_cb imm_cb = fz_below(in, 8) != 7 ? on_imm : NULL;
        uint16_t gen = (uint16_t)(1 + fz_below(in, 3));
        rdmax_ep *ep = fd_ep_create(g_ctx, rx_qp(e, IBV_QPT_RC), SQD, signal_interval, gen);
        fd_ep_limits(ep, MAXINL, 4, g_size[m->pool], 256);
        fd_ep_callbacks(ep, recv_cb, imm_cb, (void *)(intptr_t)e);
        m->drops = recv_cb == NULL;
        m->imms = imm_cb != NULL;
        g_ep[e] = ep;
        /* as rdmax_ep_create: join the pool (its target grows by the window and one buffer for grants,
           buffers are posted on its queue) and the QP number map; as connect: the peer's window from its
           record, ours in our record */
        FZ_CHECK(fd_ep_shared_pool(ep, (uint32_t)m->pool, window) == RDMAX_OK, "joining the pool failed");
        m->tx = 1 + fz_below(in, 32);
        m->peer = window + 1;
        fd_ep_connected(ep, 0x200 + (uint32_t)e, m->tx);
    }
}

/* ---- steps ------------------------------------------------------------------------------------------- */
/* A message from ep e's peer: it lands in the next buffer posted on e's queue. */
static void peer_message(fz_in *in, int e)
{
    mep *m = &g_m[e];
    if (m->gone || g_q[e].err || m->peer == 0)
        return;  /* a peer without credits does not send; a failed QP receives nothing */
    FZ_CHECK(g_r[e].n > 0, "endpoint %d: its peer holds %u credits and its queue has no buffer posted (RNR)", e,
             m->peer);
    uint64_t id = rq_take(e);
    m->peer--;
    uint32_t b = (uint32_t)id & RDMAX__WR_BUF_MASK;
    char *buf = fd_pool_buf(g_ctx, (uint32_t)m->pool, b);
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
        if (m->imms) {
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
    uint32_t imm;
    peer_imm(in, w, &imm);
    if (imm & RDMAX__IMM_CLOSE)
        m->gone = 1;  /* a peer that said goodbye sends nothing more */
    if (!(imm & RDMAX__IMM_GRANT) && !m->drops) {
        FZ_CHECK(m->exp_n < FIFO, "model FIFO overflow");
        mexp *x = &m->exp[(m->exp_head + m->exp_n++) % FIFO];
        x->imm = 0, x->len = len, x->seed = seed, x->pool = (uint32_t)m->pool, x->buf = b, x->done = 0;
    }
}

/* A receive of a QP that is not ours (an endpoint destroyed since, its QP number unknown), naming any
   buffer of a pool: the destroyed endpoint's buffers went back with its queue, so rdmax must drop it and
   leave the buffer alone (posted or free, someone else's now). */
static void stale_recv(fz_in *in)
{
    int p = (int)fz_below(in, NPOOL);
    uint32_t b = fz_below(in, NBUF);
    uint64_t id = RDMAX__WR_SRQ | RDMAX__WR_RECV | (uint64_t)p << RDMAX__WR_POOL_SHIFT |
                  (b / PER_CHUNK) << RDMAX__SRQ_SLOT_BITS | (b % PER_CHUNK);
    cq_push(&g_rcq, id, fz_below(in, 2) ? IBV_WC_SUCCESS : IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0x999);
    g_rcq.wc[(g_rcq.head + g_rcq.n - 1) % CQMAX].byte_len = fz_below(in, 2) ? 0 : g_size[p];
}

static void send_step(fz_in *in, int e)
{
    rdmax_status st;
    mop *o = app_send(in, e, 0, &st);
    if (!o)
        return;
    FZ_CHECK(st == RDMAX_OK || st == RDMAX_INPROGRESS || st == RDMAX_ERR_NO_RESOURCE || st == RDMAX_ERR_ENDPOINT ||
             st == RDMAX_ERR_CLOSED, "send: unexpected %s", rdmax_status_str(st));
    FZ_CHECK(!o->accepted || o->posted == 1, "op %d accepted but posted %d times", (int)(o - g_ops), o->posted);
}

static void check_step(int settled)
{
    uint32_t target[NPOOL] = {0, 0}, queued[NPOOL] = {0, 0};
    check_send_queues();
    for (int e = 0; e < NEP; e++) {
        fd_ep_view v = fd_ep_look(g_ep[e]);
        mep *m = &g_m[e];
        FZ_CHECK(v.tx_credits == m->tx, "endpoint %d: %u send credits, the peer granted %u net", e, v.tx_credits,
                 m->tx);
        FZ_CHECK(v.owed == m->owed, "endpoint %d owes %u credits, its peer consumed %u unreturned", e, v.owed,
                 m->owed);
        target[m->pool] += fd_ep_rq_depth(g_ep[e]);
        queued[m->pool] += g_r[e].n;
        if (!m->gone && !g_q[e].err)
            FZ_CHECK(m->peer <= g_r[e].n, "endpoint %d: its peer holds %u credits, %u buffers are posted on its "
                     "queue (the peer would meet RNR)", e, m->peer, g_r[e].n);
        if (settled && v.state == RDMAX_EP_CONNECTED && !g_q[e].err)
            FZ_CHECK(g_r[e].n == fd_ep_rq_depth(g_ep[e]), "endpoint %d: %u posted on its queue after the poll, "
                     "its credits %u (a consumed buffer not reposted)", e, g_r[e].n, fd_ep_rq_depth(g_ep[e]));
    }
    uint64_t posted = 0;
    for (int p = 0; p < NPOOL; p++) {
        fd_pool_view s = fd_pool_look(g_ctx, (uint32_t)p);
        fsrq *f = &g_s[p];
        /* rdmax counts a buffer posted until it polls its completion */
        FZ_CHECK(s.posted == queued[p] + f->pending, "pool %d: rdmax counts %u posted, the queues hold %u and the "
                 "CQ %u", p, s.posted, queued[p], f->pending);
        FZ_CHECK(s.posted + s.n_free == s.n_bufs && s.n_stage == 0, "pool %d: %u posted + %u free != %u buffers "
                 "(%u staged after a poll)", p, s.posted, s.n_free, s.n_bufs, s.n_stage);
        FZ_CHECK(s.target == target[p], "pool %d: target %u, the windows of its endpoints add up to %u", p, s.target,
                 target[p]);
        posted += s.posted;
    }
    FZ_CHECK(fd_ctx_rx_posted(g_ctx) == posted, "context: %llu posted, the pools %llu",
             (unsigned long long)fd_ctx_rx_posted(g_ctx), (unsigned long long)posted);
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
        case 4: case 5: send_step(&in, e); break;
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
    drain();
    check_step(1);
    check_drained();
    for (int e = 0; e < NEP; e++)
        FZ_CHECK(g_m[e].exp_n == 0, "endpoint %d: %u callbacks never came", e, g_m[e].exp_n);
    /* unsignaled requests that ran before the QP failed get no completion: the tick's query of the QP
       finds that (not driven here) */
    check_end();
    for (int i = 0; i < g_nops; i++) {
        mop *o = &g_ops[i];
        if (!o->accepted || !o->has_comp)
            continue;
        FZ_CHECK(o->completions == 1, "op %d: completed %d times", i, o->completions);
        FZ_CHECK((o->comp_status == RDMAX_OK) == (o->dev_status == IBV_WC_SUCCESS), "op %d: completion %s, device "
                 "status %d", i, rdmax_status_str(o->comp_status), o->dev_status);
    }
    rx_teardown();
    return 0;
}
