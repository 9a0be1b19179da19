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
    ctx->scq_poll = ctx->rcq_poll = fd_dev.poll_cq;
    ctx->modify_qp = fd_dev.modify_qp;
    ctx->create_ah = fd_dev.create_ah;
    ctx->rwc = ctx->rwc_top;
    static const enum ibv_wr_opcode opc[RDMAX__FWR__COUNT] = {
        IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP};
    for (int k = 0; k < RDMAX__FWR__COUNT; k++) {
        ctx->fast_wr[k].opcode = opc[k];
        ctx->fast_wr[k].send_flags = k <= RDMAX__FWR_SEND ? IBV_SEND_INLINE : 0;
        ctx->fast_wr[k].sg_list = k >= RDMAX__FWR_FADD ? &ctx->asge : &ctx->fsge;
        ctx->fast_wr[k].num_sge = 1;
    }
    ctx->asge.length = 8;
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
    if (ctx->ud)
        free(ctx->ud->ahs);
    free(ctx->ud);
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

#endif /* RDMAX_FAKEDEV_H */
