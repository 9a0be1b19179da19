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

/* ---- the model -------------------------------------------------------------------------------------- */
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
    int drops;               /* no receive callback: rdmax drops its messages */
} mep;

#include "rxfuzz.h"

/* ---- the fake device's receive side ---------------------------------------------------------------- */
static void dev_recv_done(int e, const frecv *r)
{
    uint32_t idx = (uint32_t)(r->wr_id & RDMAX__WR_SLOT_MASK);
    if (idx < 64)
        g_q[e].posted[idx] = 0;
}

/* A QP in error flushes its receive queue too. */
static void rx_flush(int e)
{
    fq *q = &g_q[e];
    while (q->rq_n) {
        frecv *r = &q->rq[q->rq_head];
        q->rq_head = (q->rq_head + 1) % FIFO;
        q->rq_n--;
        dev_recv_done(e, r);
        cq_push(&g_rcq, r->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, q->qp.qp_num);
    }
}

/* the model takes a peer's credits when rdmax sees them */
static void rx_polled(const struct ibv_wc *wc)
{
    for (int e = 0; e < NEP; e++)
        if (wc->qp_num == g_q[e].qp.qp_num && g_q[e].qp.qp_type == IBV_QPT_RC && wc->status == IBV_WC_SUCCESS &&
            (wc->wc_flags & IBV_WC_WITH_IMM))
            g_m[e].tx += RDMAX__LE32(wc->imm_data) & RDMAX__IMM_CREDITS;
}

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
        sq_take(q, w, op);
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
        FZ_CHECK(idx < fd_ep_rq_depth(g_ep[e]), "receive buffer index %u out of %u", idx, fd_ep_rq_depth(g_ep[e]));
        FZ_CHECK(!q->posted[idx], "endpoint %d: receive buffer %u posted twice", e, idx);
        FZ_CHECK(w->num_sge == 1 && w->sg_list[0].addr == (uintptr_t)fd_ep_rbuf(g_ep[e], idx) &&
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


/* ---- the application's side --------------------------------------------------------------------------- */
static void on_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    int e = (int)(intptr_t)user;
    mep *m = &g_m[e];
    FZ_CHECK(ep == g_ep[e], "receive callback with another endpoint");
    FZ_CHECK(m->exp_n > 0, "endpoint %d: a message delivered that must not be (grant, marker, short)", e);
    mexp *x = &m->exp[m->exp_head];
    m->exp_head = (m->exp_head + 1) % FIFO;
    m->exp_n--;
    uint32_t off = g_q[e].qp.qp_type == IBV_QPT_UD ? RDMAX_UD_GRH : 0;
    FZ_CHECK((char *)data == fd_ep_rbuf(ep, x->idx) + off, "endpoint %d: message not in buffer %u", e, x->idx);
    FZ_CHECK(len == x->len, "endpoint %d: %zu bytes delivered, the peer sent %u", e, len, x->len);
    for (uint32_t i = 0; i < len; i++)
        FZ_CHECK(((uint8_t *)data)[i] == pat(x->seed, i + off), "endpoint %d: byte %u of a message differs", e, i);
}

/* ---- setup ------------------------------------------------------------------------------------------ */
static void setup(fz_in *in)
{
    rx_setup_ctx(fake_post_recv, NULL, fake_post_send);
    g_port_state = fz_below(in, 4) != 3 ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
    fd_ctx_ready(g_ctx, &g_scq.cq, &g_rcq.cq, SCQ_CREDITS);

    for (int e = 0; e < NEP; e++) {
        int ud = e == 1;
        fq *q = &g_q[e];
        q->mr.lkey = 0x5000 + (uint32_t)e;
        uint32_t signal_interval = 1 + fz_below(in, SQD / 2);
        uint32_t rq_depth = 32 + 16 * fz_below(in, 3);
        g_m[e].drops = fz_below(in, 8) == 7;
        uint16_t gen = (uint16_t)(1 + fz_below(in, 3));
        rdmax_ep *ep = fd_ep_create(g_ctx, rx_qp(e, ud ? IBV_QPT_UD : IBV_QPT_RC), SQD, signal_interval, gen);
        fd_ep_limits(ep, MAXINL, 4, RSZ, RSZ);
        fd_ep_callbacks(ep, g_m[e].drops ? NULL : on_recv, NULL, (void *)(intptr_t)e);
        if (ud)
            fd_ep_ud_peer(ep, (struct ibv_ah *)(uintptr_t)0x1000, 0x300);
        g_ep[e] = ep;
        g_m[e].last_posted_op = -1;
        g_m[e].left_connected = 0;
        /* as rdmax_ep_create: post every receive buffer; as connect: credits from the peer's record */
        fd_ep_own_pool(ep, rq_depth, &q->mr);
        g_m[e].tx = ud ? UINT32_MAX : 2 + fz_below(in, 64);
        g_m[e].owed = 0;
        fd_ep_connected(ep, 0x200 + (uint32_t)e, g_m[e].tx);
    }
}

/* ---- steps ------------------------------------------------------------------------------------------- */
/* A message from the peer lands in ep e's next posted buffer. */
static void peer_message(fz_in *in, int e)
{
    fq *q = &g_q[e];
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
    uint32_t imm;
    int with_imm = peer_imm(in, w, &imm);
    w->src_qp = ud && fz_below(in, 2) ? q->qp.qp_num : 0x300;
    /* what rdmax must make of it */
    mep *m = &g_m[e];
    int deliver;
    if (ud) {
        /* a flush marker: empty, from our own QPN, without immediate data (a user's datagram has it) */
        deliver = len >= RDMAX_UD_GRH && !(len == RDMAX_UD_GRH && w->src_qp == q->qp.qp_num && !with_imm);
    } else {
        deliver = !(with_imm && (imm & RDMAX__IMM_GRANT));
    }
    if (deliver && !m->drops) {
        FZ_CHECK(m->exp_n < FIFO, "model FIFO overflow");
        mexp *x = &m->exp[(m->exp_head + m->exp_n++) % FIFO];
        x->idx = idx;
        x->len = ud ? len - RDMAX_UD_GRH : len;
        x->seed = seed;
    }
}

/* An application send (how: 0 direct, 1 in a chain, 2 queued with rdmax_req_post). */
static void send_step(fz_in *in, int e, int how)
{
    rdmax_status st;
    if (!app_send(in, e, how, &st))
        return;
    FZ_CHECK(st == RDMAX_OK || st == RDMAX_INPROGRESS || st == RDMAX_ERR_NO_RESOURCE || st == RDMAX_ERR_IO ||
             st == RDMAX_ERR_ENDPOINT || st == RDMAX_ERR_CLOSED || st == RDMAX_ERR_NOT_CONNECTED,
             "send: unexpected %s", rdmax_status_str(st));
}

static void check_step(void)
{
    check_send_queues();
    for (int e = 0; e < NEP; e++) {
        fd_ep_view v = fd_ep_look(g_ep[e]);
        int rc = g_q[e].qp.qp_type == IBV_QPT_RC;
        if (rc && !v.batching)
            FZ_CHECK(v.tx_credits == g_m[e].tx, "endpoint %d: %u send credits, the peer granted %u net", e,
                     v.tx_credits, g_m[e].tx);
        if (!rc)
            FZ_CHECK(v.tx_credits == UINT32_MAX, "UD endpoint %d: send credits %u (UD counts none)", e, v.tx_credits);
        if (rc && !v.batching)
            FZ_CHECK(v.owed == g_m[e].owed, "endpoint %d owes %u credits, it reposted %u unreturned", e, v.owed,
                     g_m[e].owed);
    }
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
        case 3: case 4: send_step(&in, e, 0); break;
        case 5: {   /* a chain */
            unsigned n = 1 + fz_below(&in, 40);
            rdmax_batch_begin(g_ep[e]);
            while (n--)
                send_step(&in, e, 1);
            rdmax_status st = rdmax_batch_end(g_ep[e]);
            FZ_CHECK(st == RDMAX_OK || st == RDMAX_ERR_IO, "batch_end: %s", rdmax_status_str(st));
            break;
        }
        case 6: send_step(&in, e, 2); break;
        case 7: case 8: dev_execute(&in, e); break;
        case 9: case 10: progress(); break;
        default:
            switch (fz_below(&in, 4)) {
            case 0: dev_flush(e); break;  /* an asynchronous QP error */
            case 1: {                     /* a stale completion of a destroyed endpoint */
                uint64_t id = fd_ep_look(g_ep[e]).wr_id_base ^ ((uint64_t)(1 + fz_below(&in, 7)) << 48);
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
    drain();
    check_step();
    check_drained();
    for (int e = 0; e < NEP; e++) {
        rdmax_ep *ep = g_ep[e];
        fd_ep_view v = fd_ep_look(ep);
        /* Unsignaled requests that ran before the QP failed have no completion of their own: a flush of
           the failed endpoint must retire them and say why it failed, at once (RC; UD's marker needs an
           address handle, which the fake device has not got). */
        if (g_q[e].qp.qp_type == IBV_QPT_RC && v.head != v.tail && v.state != RDMAX_EP_CONNECTED) {
            rdmax_status st = rdmax_ep_flush(ep, 2000);
            FZ_CHECK(st != RDMAX_OK && st != RDMAX_ERR_TIMEOUT, "endpoint %d: flush after the failure: %s", e,
                     rdmax_status_str(st));
            v = fd_ep_look(ep);
            FZ_CHECK(v.head == v.tail, "endpoint %d: %u requests never completed", e, v.head - v.tail);
        }
        FZ_CHECK(g_m[e].exp_n == 0 || g_m[e].drops, "endpoint %d: %u messages never delivered", e, g_m[e].exp_n);
    }
    check_end();
    for (int i = 0; i < g_nops; i++) {
        mop *o = &g_ops[i];
        if (o->queued) {
            /* a queued send: posted once and completed with the device's word, or failed without a post */
            if (o->completions == 0 && fd_ep_look(g_ep[o->ep]).state == RDMAX_EP_CONNECTED)
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
    rx_teardown();
    return 0;
}
