/* The fake verbs device of rdmax's host tests (tests/fabric_test.c, tests/fuzz/recv_fuzz.c,
   tests/fuzz/srq_fuzz.c): rdmax's real code runs on it without RDMA hardware.

   ibv_post_send, ibv_poll_cq, ibv_post_recv and ibv_post_srq_recv are inline calls through the verbs
   context's ops table, and rdmax reaches modify_qp and create_ah through the context's hooks, so a
   verbs context whose ops are the test's functions (fd_device_init) is a device to rdmax. What
   rdmax_ctx_create and rdmax_ep_create would build on it is built here by hand, as they leave it for
   the parts the tested paths read: this header is the test double, and the one place in tests/ that
   writes rdmax's private structs (the tests read them through it or through the public API).

     fd_device_init(&ops)                   the device: the test's verbs
     fd_ctx_alloc, then fd_ctx_port (a port  a context, as rdmax_ctx_create leaves it
     as ibv_query_device/port report it) or
     fd_ctx_attr (fd_ctx_ud), then fd_ctx_ready
     fd_ep_create, fd_ep_create_desc        an endpoint, as rdmax_ep_create leaves it
     fd_ep_destroy, fd_ctx_destroy          what the fake made, freed
     fd_ep_own_pool, fd_ctx_pool and        the receive side: buffers of its own, or a shared pool
     fd_ep_shared_pool, fd_ep_connected     (as rdmax_ep_create), connected (as connect)
     fd_ep_look, fd_ep_gate_check,          what the fuzz targets check: the send queue, credits,
     fd_pool_look, fd_progress              the fast gate, a pool; progress without the health pass
   Include after rdmax.h with its implementation. */
#ifndef RDMAX_FAKEDEV_H
#define RDMAX_FAKEDEV_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fake's verbs; NULL: not offered (rdmax must not call it). */
typedef struct fd_ops {
    int (*poll_cq)(struct ibv_cq *cq, int num, struct ibv_wc *wc);
    int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
    int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
    int (*post_srq_recv)(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
    int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
    struct ibv_ah *(*create_ah)(struct ibv_pd *pd, struct ibv_ah_attr *attr);
    int (*query_port)(struct ibv_context *c, uint8_t port, struct ibv_port_attr *pa, size_t len);
} fd_ops;

static struct verbs_context fd_vctx;  /* the device */
static fd_ops fd_dev;

static inline void fd_device_init(const fd_ops *ops)
{
    memset(&fd_vctx, 0, sizeof fd_vctx);
    fd_dev = *ops;
    fd_vctx.sz = sizeof fd_vctx;
    fd_vctx.query_port = ops->query_port;
    fd_vctx.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
    fd_vctx.context.ops.poll_cq = ops->poll_cq;
    fd_vctx.context.ops.post_send = ops->post_send;
    fd_vctx.context.ops.post_recv = ops->post_recv;
    fd_vctx.context.ops.post_srq_recv = ops->post_srq_recv;
    fd_vctx.context.async_fd = -1;
}

/* A context on the device: desc (NULL: zeros; its logger is used), its log level, room for max_eps
   endpoints (a power of two), port 1 with RDMAX_MAX_SGE SGEs and 1 MiB messages until fd_ctx_port or
   fd_ctx_attr say otherwise. */
static inline rdmax_ctx *fd_ctx_alloc(const rdmax_ctx_desc *desc, rdmax_log_level lvl, uint32_t max_eps)
{
    rdmax_ctx *ctx = (rdmax_ctx *)calloc(1, sizeof *ctx);
    if (desc)
        ctx->desc = *desc;
    ctx->log_level = lvl;
    ctx->desc.max_eps = max_eps;
    ctx->verbs = &fd_vctx.context;
    ctx->attr.port = 1;
    ctx->attr.max_sge = RDMAX_MAX_SGE;
    ctx->attr.max_msg_sz = 1u << 20;
    return ctx;
}

/* The applied desc and the device's attributes, for the test to set before fd_ctx_ready. */
static inline rdmax_ctx_desc *fd_ctx_desc(rdmax_ctx *ctx) { return &ctx->desc; }
static inline rdmax_dev_attr *fd_ctx_attr(rdmax_ctx *ctx) { return &ctx->attr; }

/* ctx's port as ibv_query_device and ibv_query_port report it, through the code rdmax_ctx_create runs
   (rdmax__port_attr); then the GID table's entry and what the inline probe found. */
static inline void fd_ctx_port(rdmax_ctx *ctx, const char *name, const struct ibv_device_attr *da,
                               const struct ibv_port_attr *pa, const uint8_t gid[16], int gid_type, int gid_index,
                               uint32_t max_inline)
{
    rdmax__port_attr(ctx, name, 1, da, pa);
    memcpy(ctx->attr.gid.raw, gid, 16);
    ctx->attr.gid_type = gid_type;
    ctx->attr.gid_index = gid_index;
    ctx->attr.max_inline = max_inline;
}

#if RDMAX__HAS_UD
/* ctx's UD state, its QP receiving recv_size bytes (what a UD endpoint's record tells its peer). */
static inline void fd_ctx_ud(rdmax_ctx *ctx, uint32_t recv_size)
{
    rdmax__ud_state(ctx)->recv_size = recv_size;
}
#endif

/* The rest of rdmax_ctx_create: the CQs (NULL: none; polled with the device's poll_cq), scq_credits
   send-CQ entries, the fast paths' prebuilt requests, the endpoint table, the batch staging; then the
   capability line it logs. */
static inline void fd_ctx_ready(rdmax_ctx *ctx, struct ibv_cq *scq, struct ibv_cq *rcq, uint32_t scq_credits)
{
    ctx->scq = scq;
    ctx->rcq = rcq;
    ctx->rcq_size = rcq ? (uint32_t)rcq->cqe : 0;
    ctx->scq_poll = ctx->rcq_poll = fd_dev.poll_cq;
    ctx->modify_qp = fd_dev.modify_qp;
    ctx->create_ah = fd_dev.create_ah;
    ctx->rwc = ctx->rwc_top;
    rdmax__ctx_prebuild(ctx);
    ctx->scq_low = 8;
    ctx->scq_spare = (int32_t)scq_credits - 8;  /* the free entries minus scq_low */
    rdmax__ctx_retire_step(ctx);
    ctx->eps_cap = ctx->desc.max_eps;
    ctx->eps_mask = ctx->desc.max_eps - 1;
    ctx->eps = (rdmax__ep_ref *)calloc(ctx->eps_cap, sizeof *ctx->eps);
    ctx->inl_stage = (char *)calloc(RDMAX_BATCH_MAX, ctx->attr.max_inline ? ctx->attr.max_inline : 1);
    rdmax__chain_clean(ctx, 0, RDMAX_BATCH_MAX);
    ctx->port_up = 1;
    rdmax__caps_report(ctx);
}

static inline void fd_ctx_destroy(rdmax_ctx *ctx)
{
    for (uint32_t p = 0; ctx->rx && p < RDMAX__POOLS; p++) {
        struct rdmax__srq *s = ctx->rx->pool[p];
        for (uint32_t c = 0; s && c < s->n_chunks; c++)
            free(s->chunks[c].base);
        if (s)
            free(s->chunks), free(s->free), free(s->owner), free(s);
    }
    if (ctx->rx)
        free(ctx->rx->map);
    free(ctx->rx);
#if RDMAX__HAS_UD
    if (ctx->ud)
        free(ctx->ud->ahs);
    free(ctx->ud);
#endif
    rdmax__profile_ctx_fini(ctx);
    free(ctx->eps);
    free(ctx->inl_stage);
    free(ctx);
}

/* An endpoint of ctx on qp (the test's, on fd_vctx), as rdmax_ep_create leaves it before it connects:
   its send queue of sq_depth slots (a power of two), signaled every signal_interval posts, the fast
   put's request, the next slot of ctx's endpoint table with generation gen, its post_send. The rest
   (receive side, limits) is the caller's: fd_ep_create_desc, or a fuzz target's own choices. */
static inline rdmax_ep *fd_ep_create(rdmax_ctx *ctx, struct ibv_qp *qp, uint32_t sq_depth, uint32_t signal_interval,
                                     uint16_t gen)
{
    rdmax_ep *ep = (rdmax_ep *)calloc(1, sizeof *ep);
    ep->ctx = ctx;
    ep->qp = qp;
    ep->sq_mask = sq_depth - 1;
    ep->sq_last = sq_depth - 1;
    ep->signal_interval = signal_interval;
    ep->sig_at = signal_interval - 1;
    ep->blocked = RDMAX__BLK_STATE;
    ep->recv_cb = rdmax__recv_drop;
    ep->slots = (rdmax__slot *)calloc(sq_depth, sizeof *ep->slots);
    ep->wr.num_sge = 1;
    ep->wr.sg_list = &ctx->fsge;
    ep->wr.opcode = IBV_WR_RDMA_WRITE;
    ep->wr.send_flags = IBV_SEND_INLINE;
    uint32_t idx = ctx->n_eps++;
    ctx->eps[idx].ep = ep;
    ctx->eps[idx].key = RDMAX__EP_KEY(gen, idx);
    ep->wr_id_base = (uint64_t)gen << 48 | (uint64_t)idx << 32;
    ep->wr.wr_id = ep->wr_id_base;
    rdmax__ep_post_fn(ep);
    snprintf(ep->peer, sizeof ep->peer, "fake peer %u", idx);
    return ep;
}

/* The same with desc (NULL: all defaults) through rdmax's defaults for ctx, its transport qp's: what
   the connection paths read of it (an RC endpoint's window; UD: the context's QP, shared). */
static inline rdmax_ep *fd_ep_create_desc(rdmax_ctx *ctx, struct ibv_qp *qp, const rdmax_ep_desc *desc)
{
    rdmax_ep_desc in, d;
    memset(&in, 0, sizeof in);
    if (desc)
        in = *desc;
    in.transport = qp->qp_type == IBV_QPT_RC ? RDMAX_TRANSPORT_ID_RC : RDMAX_TRANSPORT_ID_UD;
    rdmax__ep_desc_defaults(ctx, &in, &d);
    rdmax_ep *ep = fd_ep_create(ctx, qp, d.sq_depth, d.signal_interval, 1);
    ep->desc = d;
    ep->shared_qp = qp->qp_type == IBV_QPT_UD;
    ep->max_inline = d.max_inline;
    ep->rd_avail = d.max_rd_atomic;
    ep->recv_size = d.recv_size;
    ep->rq_depth = qp->qp_type == IBV_QPT_RC ? d.rq_depth + 1 : 0;
    return ep;
}

static inline void fd_ep_destroy(rdmax_ep *ep)
{
    rdmax_ep_pending_purge(ep);
    rdmax__arb_group_cleanup(&ep->ctx->arb, &ep->group);
    free(ep->slots);
    free(ep->rq_free);
    free(ep->rbufs);
    free(ep->remote);
    free(ep->local);
    free(ep);
}

/* ---- the receive side, a connection, and what the fuzz targets check ---------------------------- */
/* ep's limits as rdmax_ep_create applies them from a desc, set as given (a fuzz target's choice may be
   one the desc defaults would refuse, such as a window below rdmax's least). */
static inline void fd_ep_limits(rdmax_ep *ep, uint32_t max_inline, uint32_t rd_avail, uint32_t recv_size,
                                uint32_t peer_recv_size)
{
    ep->desc.timeout = 14;
    ep->desc.retry_cnt = 6;
    ep->max_inline = max_inline;
    ep->rd_avail = rd_avail;
    ep->recv_size = recv_size;
    ep->peer_recv_size = peer_recv_size;
}

/* ep's callbacks (recv_cb NULL: rdmax's own, which drops messages) and their user pointer. */
static inline void fd_ep_callbacks(rdmax_ep *ep, rdmax_recv_cb recv_cb, rdmax_imm_cb imm_cb, void *user)
{
    ep->recv_cb = recv_cb ? recv_cb : rdmax__recv_drop;
    ep->imm_cb = imm_cb;
    ep->user = user;
}

/* A receive pool of ep's own (RDMAX_RECV_POOL_OWN): depth buffers of its recv_size in one region with
   key mr, every one posted (rdmax__post_recvs) as rdmax_ep_create does. */
static inline void fd_ep_own_pool(rdmax_ep *ep, uint32_t depth, struct ibv_mr *mr)
{
    ep->rmr = mr;
    ep->rq_depth = depth;
    ep->rq_free = (uint32_t *)calloc(depth, sizeof *ep->rq_free);
    ep->rbufs = (char *)calloc(depth, ep->recv_size);
    for (uint32_t i = 0; i < depth; i++)
        ep->rq_free[i] = i;
    ep->rq_unposted = depth;
    rdmax__post_recvs(ep, depth);
}

/* Buffer idx of ep's own pool. */
static inline char *fd_ep_rbuf(const rdmax_ep *ep, uint32_t idx) { return ep->rbufs + (size_t)idx * ep->recv_size; }
static inline uint32_t fd_ep_rq_depth(const rdmax_ep *ep) { return ep->rq_depth; }

#if RDMAX__HAS_UD
/* A UD endpoint's peer: its address handle (never dereferenced by rdmax on the fake) and QP. */
static inline void fd_ep_ud_peer(rdmax_ep *ep, struct ibv_ah *ah, uint32_t qpn)
{
    ep->ah = ah;
    ep->ud_qpn = qpn;
    ep->ud_qkey = RDMAX_UD_QKEY;
}
#endif

/* ep connected to peer_qpn (GID ::1) as rdmax_ep_connect_record leaves it: tx_credits from the peer's record, no
   credits owed (the record told the peer about the first batch), CONNECTED, the fast gate open. */
static inline void fd_ep_connected(rdmax_ep *ep, uint32_t peer_qpn, uint32_t tx_credits)
{
    ep->peer_qpn = peer_qpn;
    ep->peer_gid[15] = 1;
    ep->tx_credits = tx_credits;
    ep->rx_unreturned = 0;
    ep->state = RDMAX_EP_CONNECTED;
    ep->blocked = 0;
    rdmax__ep_regate(ep);
}

/* Shared receive pool p of ctx (RDMAX_RECV_POOL_SHARED) as rdmax__pool_get and rdmax__srq_chunk leave
   it: n_chunks chunks of per_chunk buffers of size bytes, chunk c registered as mrs[c], handed out low
   indexes first. */
static inline void fd_ctx_pool(rdmax_ctx *ctx, uint32_t p, uint32_t size, uint32_t per_chunk, uint32_t n_chunks,
                               struct ibv_mr *mrs)
{
    struct rdmax__rx *x = ctx->rx;
    if (!x) {
        x = ctx->rx = (struct rdmax__rx *)calloc(1, sizeof *x);
        x->map_cap = 64;
        x->n_groups = 1;
        x->epoch = &ctx->rcq_drains;
        x->map = (__typeof__(x->map))calloc(x->map_cap, sizeof *x->map);
    }
    struct rdmax__srq *s = (struct rdmax__srq *)calloc(1, sizeof *s);
    uint32_t n = per_chunk * n_chunks;
    s->recv_size = size;
    s->per_chunk = per_chunk;
    for (int i = 0; i < RDMAX__RECV_BATCH; i++) {  /* the prebuilt chain */
        s->rq[i].sge.length = size;
        s->rq[i].wr.sg_list = &s->rq[i].sge;
        s->rq[i].wr.num_sge = 1;
        s->rq[i].wr.next = i + 1 < RDMAX__RECV_BATCH ? &s->rq[i + 1].wr : NULL;
    }
    s->chunks = (__typeof__(s->chunks))calloc(n_chunks, sizeof *s->chunks);
    s->chunks_cap = n_chunks;
    s->free = (uint32_t *)calloc(n, sizeof *s->free);
    s->owner = (uint32_t *)malloc(n * sizeof *s->owner);
    memset(s->owner, 0xff, n * sizeof *s->owner);  /* RDMAX__OWNER_NONE: all free */
    for (uint32_t c = 0; c < n_chunks; c++) {
        s->chunks[c].base = (char *)calloc(per_chunk, size);
        s->chunks[c].mr = &mrs[c];
        s->chunks[c].lkey = mrs[c].lkey;
        for (uint32_t i = per_chunk; i-- > 0;)
            s->free[s->n_free++] = c << RDMAX__SRQ_SLOT_BITS | i;
    }
    s->n_chunks = n_chunks;
    s->n_live = n_chunks;  /* none drains */
    s->n_bufs = n;
    x->bytes += (uint64_t)n * size;
    x->pool[p] = s;
}

/* ep joins pool p with a window of `window` credits as rdmax_ep_create does: the pool's target grows by
   the window and one buffer for grants (rdmax__srq_reserve), ep enters the QP number map, and the
   buffers are posted on its queue (rdmax__ep_rq_fill). */
static inline rdmax_status fd_ep_shared_pool(rdmax_ep *ep, uint32_t p, uint32_t window)
{
    rdmax_ctx *ctx = ep->ctx;
    ep->pool = p;
    ep->rq_depth = window + 1;
    ep->grant_at = window / 2 ? window / 2 : 1;
    rdmax_status st = rdmax__srq_reserve(ctx, ep->pool, ep->rq_depth);
    if (st == RDMAX_OK)
        st = rdmax__map_put(ctx, ep->qp->qp_num, (uint32_t)(ep->wr_id_base >> 32 & 0xffff));
    if (st == RDMAX_OK)
        st = rdmax__ep_rq_fill(ctx, ep);
    return st;
}

/* What a fuzz target checks of a pool: buffers posted (until their completion is polled), free, all;
   staged in a poll batch; the target its endpoints' windows add up to. */
typedef struct fd_pool_view {
    uint32_t posted, n_free, n_bufs, n_stage, target;
} fd_pool_view;

static inline fd_pool_view fd_pool_look(const rdmax_ctx *ctx, uint32_t p)
{
    const struct rdmax__srq *s = ctx->rx->pool[p];
    fd_pool_view v = {s->posted, s->n_free, s->n_bufs, s->n_stage, s->target};
    return v;
}
/* Buffer b (chunk << RDMAX__SRQ_SLOT_BITS | slot) of pool p; all pools' buffers posted. */
static inline char *fd_pool_buf(const rdmax_ctx *ctx, uint32_t p, uint32_t b) { return rdmax__srq_buf(ctx->rx->pool[p], b); }
static inline uint64_t fd_ctx_rx_posted(const rdmax_ctx *ctx) { return ctx->rx->posted; }

/* What a fuzz target checks of an endpoint and its context. */
typedef struct fd_ep_view {
    uint32_t head, tail;         /* send queue: next slot, oldest outstanding */
    uint32_t avail;              /* slots free, as the post paths count them */
    uint32_t tx_credits;         /* sends the peer has buffers for */
    uint32_t owed;               /* credits owed to the peer (rx_unreturned) */
    int batching;                /* between rdmax_batch_begin and _end: credits settle at the end */
    rdmax_ep_state state;
    uint32_t queued;             /* requests in its pending queue */
    uint32_t rd_avail;           /* reads and atomics it may still have outstanding */
    uint64_t wr_id_base;
} fd_ep_view;

static inline fd_ep_view fd_ep_look(const rdmax_ep *ep)
{
    fd_ep_view v;
    v.head = ep->sq_head;
    v.tail = ep->sq_tail;
    v.avail = rdmax__ep_sq_avail(ep);
    v.tx_credits = ep->tx_credits;
    v.owed = ep->rx_unreturned;
    v.batching = (ep->blocked & RDMAX__BLK_BATCH) != 0;
    v.state = ep->state;
    v.queued = ep->group.count;
    v.rd_avail = ep->rd_avail;
    v.wr_id_base = ep->wr_id_base;
    return v;
}

/* The fast gate: open only while nothing blocks ep, and then up to the post that must be signaled
   (sig_at), never beyond the queue's end; the slots that hold a cached region are outstanding ones,
   sq_regions of them. Returns NULL or what is wrong, in why. */
static inline const char *fd_ep_gate_check(const rdmax_ep *ep, char *why, size_t why_len)
{
    uint32_t depth = ep->sq_mask + 1, out = ep->sq_head - ep->sq_tail, regions = 0;
    if (ep->fast_gate != (ep->blocked ? ep->sq_head : ep->sig_at)) {
        snprintf(why, why_len, "gate at %u, head %u tail %u sig_at %u, blocked %u", ep->fast_gate, ep->sq_head,
                 ep->sq_tail, ep->sig_at, ep->blocked);
        return why;
    }
    if (!(ep->blocked & RDMAX__BLK_BATCH) && ep->sig_at - ep->sq_head > ep->sq_tail + depth - ep->sq_head) {
        snprintf(why, why_len, "sig_at %u outside head %u .. tail %u + %u", ep->sig_at, ep->sq_head, ep->sq_tail,
                 depth);
        return why;
    }
    for (uint32_t k = 0; k < depth; k++)
        if (ep->slots[k].region) {
            if (((k - ep->sq_tail) & (depth - 1)) >= out) {
                snprintf(why, why_len, "free slot %u holds a region", k);
                return why;
            }
            regions++;
        }
    if (ep->sq_regions != regions) {
        snprintf(why, why_len, "sq_regions %u, %u slots hold a region", ep->sq_regions, regions);
        return why;
    }
    return NULL;
}

/* The send-CQ entries ctx may still spend beyond its low mark. */
static inline int32_t fd_ctx_scq_spare(const rdmax_ctx *ctx) { return ctx->scq_spare; }

/* ep refuses atomics before the provider sees them (its device has none): rdmax's own post_send. */
static inline int fd_ep_refuses_atomics(const rdmax_ep *ep) { return ep->post_send == rdmax__post_send_noatomic; }

/* Whether rdmax_ctx_create would open a device of this node and transport type (name: asked for by
   name; 0: the first usable one), through its own check. */
static inline rdmax_status fd_dev_usable(rdmax_ctx *ctx, const char *name, enum ibv_node_type node,
                                         enum ibv_transport_type tr, int want)
{
    return rdmax__dev_usable(ctx, name, node, tr, want);
}

#if RDMAX__HAS_UD
/* A UD endpoint's peer LID (InfiniBand; 0 on RoCE), and the receive path's check that a datagram (its
   completion and GRH) came from ep's peer. */
static inline uint16_t fd_ep_peer_lid(const rdmax_ep *ep) { return ep->peer_lid; }
static inline int fd_ep_ud_sender(const rdmax_ep *ep, const struct ibv_wc *wc, const uint8_t *grh)
{
    return rdmax__ud_sender(wc, grh, ep->peer_gid, ep->peer_lid);
}
#endif

/* The context's send-CQ entries free, and its completion objects outstanding. */
static inline uint32_t fd_ctx_scq_free(const rdmax_ctx *ctx) { return rdmax__scq_free(ctx); }
static inline uint32_t fd_ctx_comps_out(const rdmax_ctx *ctx) { return ctx->comps_out; }

/* rdmax_progress's work without the health pass (whose clock the fuzzer does not drive): poll the
   receive CQ, then the send CQ, then serve the pending queue. */
static inline void fd_progress(rdmax_ctx *ctx)
{
    rdmax__poll_recv(ctx);
    rdmax__poll_send(ctx);
    if (!rdmax__arb_is_empty(&ctx->arb))
        rdmax__dispatch(ctx);
}
static inline int fd_ctx_pending(const rdmax_ctx *ctx) { return !rdmax__arb_is_empty(&ctx->arb); }

#endif /* RDMAX_FAKEDEV_H */
