/* API misuse on a real device (rxe in the test VM): every case runs in a child process of its own and
   must return the exact status in the table. A signal (a crash in rdmax or in the provider), a case
   still running after CHILD_BOUND_S seconds (a hang: it is killed), or a crash while tearing down after
   the call is a failure. The bound only catches hangs; no case depends on how long anything takes.
   Built twice: RC only (misuse_test) and RC+UD (misuse_rcud_test, -DMISUSE_RC_UD), where UD endpoints
   exist and the operations only RC has must be refused on them.
   Usage: misuse_test [substring of case names to run] */
#ifdef MISUSE_RC_UD
#define RDMAX_TRANSPORT_UD
#define VARIANT "misuse_rcud"
#else
#define VARIANT "misuse_rc"
#endif
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#define RDMAX_TESTING   /* rdmax__test_* hooks: force a provider refusal (rdmax_impl.h >>testing) */
#include "../rdmax.h"
#include "testlib.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHILD_BOUND_S 120
#define BAD_CHECK 1000  /* a check inside the case failed; why says which */
#define BAD_SETUP 1001

struct env {
    rdmax_ctx *ctx;
    rdmax_ep *a, *b;        /* connected RC pair */
    rdmax_ep *ua, *ub;      /* connected UD pair (RC+UD build) */
    rdmax_ep *x, *y;        /* a case's own endpoints, destroyed at teardown */
    rdmax_listener *l;
    rdmax_mem *src, *dst;   /* 64 KiB each, every remote right; dst is the remote side */
    void *big;              /* a case's own buffer, freed at teardown */
    uint64_t raddr;
    uint32_t rkey;
    rdmax_comp c;
    char why[240];
};

static char g_lastlog[200];
static void keep_log(rdmax_log_level lvl, rdmax_log_item item, const char *msg, void *user)
{
    (void)item;
    (void)lvl;
    (void)user;
    snprintf(g_lastlog, sizeof g_lastlog, "%s", msg);
}

#define EXPECT(cond, ...)                                          \
    do {                                                           \
        if (!(cond)) {                                             \
            snprintf(e->why, sizeof e->why, __VA_ARGS__);          \
            return BAD_CHECK;                                      \
        }                                                          \
    } while (0)

static void wait_comp(rdmax_ctx *ctx, rdmax_comp *c)
{
    while (!c->done)
        rdmax_progress(ctx);  /* a completion that never comes is a hang: the parent's bound catches it */
}

static uint64_t max_msg(struct env *e)
{
    return rdmax_ctx_query_attr(e->ctx)->max_msg_sz;
}

/* ---- NULL where data is read or written ---- */
static int send_null(struct env *e) { return rdmax_send(e->a, NULL, 64, NULL, NULL); }
static int send_null_mem(struct env *e) { return rdmax_send(e->a, NULL, 64, e->src, &e->c); }
static int send_null_len0(struct env *e) { return rdmax_send(e->a, NULL, 0, NULL, NULL); }
static int put_null(struct env *e) { return rdmax_put(e->a, NULL, 64, NULL, e->raddr, e->rkey, NULL); }
static int put_null_big(struct env *e) { return rdmax_put(e->a, NULL, 65536, e->src, e->raddr, e->rkey, &e->c); }
static int put_null_batched(struct env *e)
{
    rdmax_batch_begin(e->a);
    int st = rdmax_put(e->a, NULL, 64, NULL, e->raddr, e->rkey, NULL);
    rdmax_status end = rdmax_batch_end(e->a);
    EXPECT(end == RDMAX_OK, "batch_end after the refused put: %s", rdmax_status_str(end));
    return st;
}
static int get_null(struct env *e) { return rdmax_get(e->a, NULL, 64, NULL, e->raddr, e->rkey, NULL); }
static int get_null_mem(struct env *e) { return rdmax_get(e->a, NULL, 64, e->src, e->raddr, e->rkey, &e->c); }
static int get_null_len0(struct env *e) { return rdmax_get(e->a, NULL, 0, NULL, e->raddr, e->rkey, NULL); }
static int fadd_null_result(struct env *e) { return rdmax_fadd(e->a, NULL, e->src, e->raddr, e->rkey, 1, NULL); }
static int cswap_null_result(struct env *e)
{
    return rdmax_cswap(e->a, NULL, e->src, e->raddr, e->rkey, 0, 1, NULL);
}
static int put_iov_null(struct env *e) { return rdmax_put_iov(e->a, NULL, 1, e->raddr, e->rkey, NULL); }
static int put_iov_null_addr(struct env *e)
{
    rdmax_iov v[2] = {{e->src->addr, 64, e->src->lkey}, {NULL, 64, e->src->lkey}};
    return rdmax_put_iov(e->a, v, 2, e->raddr, e->rkey, NULL);
}
static int get_iov_null_addr(struct env *e)
{
    rdmax_iov v[2] = {{NULL, 64, e->src->lkey}, {e->src->addr, 64, e->src->lkey}};
    return rdmax_get_iov(e->a, v, 2, e->raddr, e->rkey, &e->c);
}

/* ---- sizes ---- */
/* Checked before the buffer is registered: the range (from a page no process maps) cannot be. */
#define UNMAPPED ((void *)(uintptr_t)0x1000)
static int get_over_max_nomem(struct env *e)
{
    return rdmax_get(e->a, UNMAPPED, (size_t)max_msg(e) + 1, NULL, e->raddr, e->rkey, NULL);
}
static int get_over_max_mem(struct env *e)
{
    return rdmax_get(e->a, e->src->addr, (size_t)max_msg(e) + 1, e->src, e->raddr, e->rkey, &e->c);
}
static int put_over_max(struct env *e)
{
    return rdmax_put(e->a, e->src->addr, (size_t)max_msg(e) + 1, e->src, e->raddr, e->rkey, &e->c);
}
static int put_over_u32(struct env *e)
{
    return rdmax_put(e->a, e->src->addr, (size_t)UINT32_MAX + 1, e->src, e->raddr, e->rkey, &e->c);
}
static int get_over_u32(struct env *e)
{
    return rdmax_get(e->a, e->src->addr, (size_t)UINT32_MAX + 1, e->src, e->raddr, e->rkey, &e->c);
}
static int send_over_u32(struct env *e) { return rdmax_send(e->a, e->src->addr, (size_t)UINT32_MAX + 1, e->src, &e->c); }
static int send_over_peer_recv(struct env *e) { return rdmax_send(e->a, e->src->addr, 4097, e->src, &e->c); }
static int put_iov_over_max(struct env *e)
{
    uint32_t part = (uint32_t)(max_msg(e) / 2 + 1);
    rdmax_iov v[2] = {{e->src->addr, part, e->src->lkey}, {e->src->addr, part, e->src->lkey}};
    return rdmax_put_iov(e->a, v, 2, e->raddr, e->rkey, &e->c);
}
static int get_iov_zero(struct env *e)
{
    rdmax_iov v[1] = {{e->src->addr, 0, e->src->lkey}};
    return rdmax_get_iov(e->a, v, 1, e->raddr, e->rkey, &e->c);
}
static int put_iov_cnt0(struct env *e)
{
    rdmax_iov v[1] = {{e->src->addr, 64, e->src->lkey}};
    return rdmax_put_iov(e->a, v, 0, e->raddr, e->rkey, NULL);
}
static int get_iov_cnt_over(struct env *e)
{
    rdmax_iov v[RDMAX_MAX_SGE + 1];
    for (int i = 0; i <= RDMAX_MAX_SGE; i++) {
        v[i].addr = (char *)e->src->addr + i * 64;
        v[i].len = 64;
        v[i].lkey = e->src->lkey;
    }
    return rdmax_get_iov(e->a, v, RDMAX_MAX_SGE + 1, e->raddr, e->rkey, &e->c);
}

/* ---- atomics ---- */
static int fadd_unaligned(struct env *e)
{
    return rdmax_fadd(e->a, (uint64_t *)e->src->addr, e->src, e->raddr + 4, e->rkey, 1, &e->c);
}
static int cswap_no_mem(struct env *e)
{
    return rdmax_cswap(e->a, (uint64_t *)e->src->addr, NULL, e->raddr, e->rkey, 0, 1, &e->c);
}

/* ---- endpoint state ---- */
static int put_not_connected(struct env *e)
{
    EXPECT(rdmax_ep_create(e->ctx, NULL, &e->x) == RDMAX_OK, "ep_create: %s", g_lastlog);
    return rdmax_put(e->x, e->src->addr, 64, NULL, e->raddr, e->rkey, NULL);
}
static int send_not_connected(struct env *e)
{
    EXPECT(rdmax_ep_create(e->ctx, NULL, &e->x) == RDMAX_OK, "ep_create: %s", g_lastlog);
    return rdmax_send(e->x, e->src->addr, 64, NULL, NULL);
}
static int get_not_connected(struct env *e)
{
    EXPECT(rdmax_ep_create(e->ctx, NULL, &e->x) == RDMAX_OK, "ep_create: %s", g_lastlog);
    return rdmax_get(e->x, e->src->addr, 64, NULL, e->raddr, e->rkey, &e->c);
}
static int fadd_not_connected(struct env *e)
{
    EXPECT(rdmax_ep_create(e->ctx, NULL, &e->x) == RDMAX_OK, "ep_create: %s", g_lastlog);
    return rdmax_fadd(e->x, (uint64_t *)e->src->addr, e->src, e->raddr, e->rkey, 1, &e->c);
}
/* The peer endpoint is destroyed: the put in flight fails with retry exceeded, the next is refused. */
static int put_peer_destroyed(struct env *e)
{
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.timeout = 8;  /* ~1 ms ack timeout, 2 retries: the loss is found soon */
    d.retry_cnt = 2;
    EXPECT(rdmax_ep_create_pair(e->ctx, &d, &e->x, &e->y) == RDMAX_OK, "pair: %s", g_lastlog);
    rdmax_ep_destroy(e->y);
    e->y = NULL;
    rdmax_status st = rdmax_put(e->x, e->src->addr, 4096, e->src, e->raddr, e->rkey, &e->c);
    EXPECT(st == RDMAX_INPROGRESS, "first put: %s", rdmax_status_str(st));
    wait_comp(e->ctx, &e->c);
    EXPECT(e->c.status == RDMAX_ERR_RETRY_EXCEEDED, "first put completed with %s", rdmax_status_str(e->c.status));
    return rdmax_put(e->x, e->src->addr, 64, NULL, e->raddr, e->rkey, NULL);
}
/* An endpoint that failed (bad rkey) refuses a get, the same as a put. */
static int get_after_error(struct env *e)
{
    rdmax_status st = rdmax_put(e->a, e->src->addr, 4096, e->src, e->raddr, e->rkey ^ 0x5a5a00, &e->c);
    EXPECT(st == RDMAX_INPROGRESS, "put with a bad rkey: %s", rdmax_status_str(st));
    wait_comp(e->ctx, &e->c);
    EXPECT(e->c.status == RDMAX_ERR_REMOTE_ACCESS, "put with a bad rkey completed with %s",
           rdmax_status_str(e->c.status));
    return rdmax_get(e->a, e->src->addr, 64, e->src, e->raddr, e->rkey, NULL);
}
/* A source outside the rdmax_mem given: the device finds it (local protection), nothing crashes. */
static int put_outside_mem(struct env *e)
{
    EXPECT((e->big = malloc(65536)) != NULL, "malloc");
    memset(e->big, 1, 65536);
    rdmax_status st = rdmax_put(e->a, e->big, 65536, e->src, e->raddr, e->rkey, &e->c);
    EXPECT(st == RDMAX_INPROGRESS, "put: %s", rdmax_status_str(st));
    wait_comp(e->ctx, &e->c);
    return e->c.status;
}
/* Memory that cannot be registered, passed without an rdmax_mem: the registration fails (ibv_reg_mr's
   EFAULT: RDMAX_ERR_INVALID_PARAM, the caller's buffer is bad), nothing is posted. */
static int put_unmapped_nomem(struct env *e)
{
    return rdmax_put(e->a, UNMAPPED, 65536, NULL, e->raddr, e->rkey, &e->c);
}
static int get_unmapped_nomem(struct env *e)
{
    return rdmax_get(e->a, UNMAPPED, 65536, NULL, e->raddr, e->rkey, &e->c);
}

/* ---- timeouts ---- */
static int accept_negative(struct env *e)
{
    EXPECT(rdmax_listener_create(e->ctx, "127.0.0.1", 0, &e->l) == RDMAX_OK, "listen: %s", g_lastlog);
    return rdmax_accept(e->l, NULL, &e->x, -1);
}
static int accept_zero(struct env *e)
{
    EXPECT(rdmax_listener_create(e->ctx, "127.0.0.1", 0, &e->l) == RDMAX_OK, "listen: %s", g_lastlog);
    return rdmax_accept(e->l, NULL, &e->x, 0);
}
static int connect_negative(struct env *e)
{
    EXPECT(rdmax_listener_create(e->ctx, "127.0.0.1", 0, &e->l) == RDMAX_OK, "listen: %s", g_lastlog);
    return rdmax_connect(e->ctx, "127.0.0.1", rdmax_listener_query_port(e->l), NULL, &e->x, -5);
}
static int connect_zero(struct env *e)
{
    EXPECT(rdmax_listener_create(e->ctx, "127.0.0.1", 0, &e->l) == RDMAX_OK, "listen: %s", g_lastlog);
    return rdmax_connect(e->ctx, "127.0.0.1", rdmax_listener_query_port(e->l), NULL, &e->x, 0);
}
/* A negative flush timeout with an unsignaled put outstanding: the deadline has passed before the
   first look, so it reports the timeout rather than waiting. */
static int flush_negative(struct env *e)
{
    rdmax_status st = rdmax_put(e->a, e->src->addr, 8, NULL, e->raddr, e->rkey, NULL);
    EXPECT(st == RDMAX_OK, "put: %s", rdmax_status_str(st));
    return rdmax_ep_flush(e->a, -1);
}
static int flush_zero_idle(struct env *e) { return rdmax_ep_flush(e->a, 0); }

/* ---- batching ---- */
static int batch_end_without_begin(struct env *e) { return rdmax_batch_end(e->a); }
static int batch_end_twice(struct env *e)
{
    rdmax_batch_begin(e->a);
    rdmax_status st = rdmax_put(e->a, e->src->addr, 8, NULL, e->raddr, e->rkey, NULL);
    EXPECT(st == RDMAX_OK, "put: %s", rdmax_status_str(st));
    EXPECT((st = rdmax_batch_end(e->a)) == RDMAX_OK, "first batch_end: %s", rdmax_status_str(st));
    return rdmax_batch_end(e->a);
}

/* ---- requests ---- */
static rdmax_status req_cb(rdmax_req *r) { (void)r; return RDMAX_OK; }
static int req_post_with_cb(struct env *e)
{
    rdmax_req r;
    memset(&r, 0, sizeof r);
    r.cb = req_cb;
    r.comp = &e->c;
    return rdmax_req_post(e->a, &r);
}
static int req_post_no_comp(struct env *e)
{
    rdmax_req r;
    memset(&r, 0, sizeof r);
    r.op = RDMAX_OP_PUT;
    r.buf = e->src->addr;
    r.len = 8;
    r.raddr = e->raddr;
    r.rkey = e->rkey;
    return rdmax_req_post(e->a, &r);
}
static int req_post_bad_op(struct env *e)
{
    rdmax_req r;
    memset(&r, 0, sizeof r);
    r.op = 99;
    r.comp = &e->c;
    return rdmax_req_post(e->a, &r);
}
static int pending_add_no_cb(struct env *e)
{
    rdmax_req r;
    memset(&r, 0, sizeof r);
    return rdmax_ep_pending_add(e->a, &r);
}

/* ---- creation ---- */
static int ep_create_bad_transport(struct env *e)
{
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.transport = 9;
    return rdmax_ep_create(e->ctx, &d, &e->x);
}
static int ctx_create_no_device(struct env *e)
{
    (void)e;
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    d.device = "rdmax_no_such_device";
    d.logger.func = keep_log;
    rdmax_ctx *c = NULL;
    rdmax_status st = rdmax_ctx_create(&d, &c);
    rdmax_ctx_destroy(c);
    return st;
}
static int mem_reg_null(struct env *e)
{
    rdmax_mem *m = NULL;
    rdmax_status st = rdmax_mem_reg(e->ctx, NULL, 4096, RDMAX_ACCESS_LOCAL, &m);
    rdmax_mem_free(m);
    return st;
}
static int mem_reg_len0(struct env *e)
{
    rdmax_mem *m = NULL;
    rdmax_status st = rdmax_mem_reg(e->ctx, e->src->addr, 0, RDMAX_ACCESS_LOCAL, &m);
    rdmax_mem_free(m);
    return st;
}
static int mem_alloc_len0(struct env *e)
{
    rdmax_mem *m = NULL;
    rdmax_status st = rdmax_mem_alloc(e->ctx, 0, RDMAX_ACCESS_LOCAL, &m);
    rdmax_mem_free(m);
    return st;
}

/* ---- a post the provider refuses: nothing of it may stay behind ----
   The provider refuses inline data longer than the QP's limit; the endpoint is told a larger limit
   (the test hook rdmax__test_ep_set_max_inline) so that rdmax posts such a request. */
static int refused_post_rolls_back(struct env *e)
{
    rdmax_ep *a = e->a;
    for (int i = 0; i < 3; i++) {
        rdmax_status st = rdmax_put(a, e->src->addr, 8, NULL, e->raddr, e->rkey, NULL);
        EXPECT(st == RDMAX_OK, "put %d: %s", i, rdmax_status_str(st));
    }
    EXPECT(rdmax__test_ep_unsignaled(a) == 3, "%u unsignaled posts after 3 (interval %u)",
           rdmax__test_ep_unsignaled(a), rdmax_ep_query_desc(a).signal_interval);
    rdmax_counters c0, c1;
    rdmax_ctx_query_counters(e->ctx, &c0);
    rdmax_ep_resources i0, i1;
    rdmax_ep_query_resources(a, &i0);
    uint32_t real = rdmax__test_ep_set_max_inline(a, 0);
    rdmax__test_ep_set_max_inline(a, real + 64);
    rdmax_status st = rdmax_put(a, e->src->addr, real + 32, NULL, e->raddr, e->rkey, NULL);
    rdmax__test_ep_set_max_inline(a, real);
    rdmax_ctx_query_counters(e->ctx, &c1);
    if (st == RDMAX_ERR_IO) {
        EXPECT(rdmax__test_ep_unsignaled(a) == 3, "unsignaled count %u after the refused post, 3 before",
               rdmax__test_ep_unsignaled(a));
        rdmax_ep_query_resources(a, &i1);
        EXPECT(i1.sq_free == i0.sq_free, "send slots %u after the refused post, %u before", i1.sq_free, i0.sq_free);
        EXPECT(c1.posted[RDMAX_OP_PUT] == c0.posted[RDMAX_OP_PUT], "put.posted moved");
        EXPECT(c1.bytes[RDMAX_OP_PUT] == c0.bytes[RDMAX_OP_PUT], "put.bytes moved");
        /* the endpoint still works and its flush covers the three */
        EXPECT((st = rdmax_ep_flush(a, 60000)) == RDMAX_OK, "flush after: %s", rdmax_status_str(st));
        return RDMAX_ERR_IO;
    }
    return st;
}

/* A chain the provider refuses at its first request (inline data over the QP's limit, as above): the
   8-byte puts chained behind it keep no length in their slots (only signaled ones do), and still give
   back exactly the bytes they counted. The free slots' lengths are poisoned first, so a rollback that
   read them would show. */
static int refused_chain_rolls_back(struct env *e)
{
    rdmax_ep *a = e->a;
    rdmax_status st;
    EXPECT((st = rdmax_ep_flush(a, 60000)) == RDMAX_OK, "flush before: %s", rdmax_status_str(st));
    rdmax__test_ep_poison_slots(a, 0xdead);
    rdmax_counters c0, c1;
    rdmax_ctx_query_counters(e->ctx, &c0);
    rdmax_ep_resources i0, i1;
    rdmax_ep_query_resources(a, &i0);
    uint32_t real = rdmax__test_ep_set_max_inline(a, 0);
    rdmax__test_ep_set_max_inline(a, real);
    rdmax_batch_begin(a);
    rdmax__test_ep_set_max_inline(a, real + 64);
    st = rdmax_put(a, e->src->addr, real + 32, NULL, e->raddr, e->rkey, NULL);
    rdmax__test_ep_set_max_inline(a, real);
    EXPECT(st == RDMAX_OK, "first chained put: %s", rdmax_status_str(st));
    for (int i = 0; i < 4; i++) {
        st = rdmax_put(a, e->src->addr, 8, NULL, e->raddr, e->rkey, NULL);
        EXPECT(st == RDMAX_OK, "chained put %d: %s", i, rdmax_status_str(st));
    }
    st = rdmax_batch_end(a);
    rdmax_ctx_query_counters(e->ctx, &c1);
    if (st == RDMAX_ERR_IO) {
        rdmax_ep_query_resources(a, &i1);
        EXPECT(i1.sq_free == i0.sq_free, "send slots %u after the refused chain, %u before", i1.sq_free,
               i0.sq_free);
        EXPECT(c1.posted[RDMAX_OP_PUT] == c0.posted[RDMAX_OP_PUT], "put.posted moved");
        EXPECT(c1.bytes[RDMAX_OP_PUT] == c0.bytes[RDMAX_OP_PUT], "put.bytes moved by %lld",
               (long long)(c1.bytes[RDMAX_OP_PUT] - c0.bytes[RDMAX_OP_PUT]));
        EXPECT((st = rdmax_ep_flush(a, 60000)) == RDMAX_OK, "flush after: %s", rdmax_status_str(st));
        return RDMAX_ERR_IO;
    }
    return st;
}

#if RDMAX__HAS_UD
/* ---- operations only RC has, on a UD endpoint (they used to crash in the provider) ---- */
static int ud_put(struct env *e) { return rdmax_put(e->ua, e->src->addr, 64, NULL, e->raddr, e->rkey, NULL); }
static int ud_put_big(struct env *e)
{
    return rdmax_put(e->ua, e->src->addr, 65536, e->src, e->raddr, e->rkey, &e->c);
}
static int ud_get(struct env *e) { return rdmax_get(e->ua, e->src->addr, 64, e->src, e->raddr, e->rkey, &e->c); }
static int ud_get_len0(struct env *e) { return rdmax_get(e->ua, e->src->addr, 0, e->src, e->raddr, e->rkey, NULL); }
static int ud_fadd(struct env *e)
{
    return rdmax_fadd(e->ua, (uint64_t *)e->src->addr, e->src, e->raddr, e->rkey, 1, &e->c);
}
static int ud_cswap(struct env *e)
{
    return rdmax_cswap(e->ua, (uint64_t *)e->src->addr, e->src, e->raddr, e->rkey, 0, 1, &e->c);
}
static int ud_put_iov(struct env *e)
{
    rdmax_iov v[1] = {{e->src->addr, 64, e->src->lkey}};
    return rdmax_put_iov(e->ua, v, 1, e->raddr, e->rkey, NULL);
}
static int ud_get_iov(struct env *e)
{
    rdmax_iov v[1] = {{e->src->addr, 64, e->src->lkey}};
    return rdmax_get_iov(e->ua, v, 1, e->raddr, e->rkey, &e->c);
}
static int ud_req_post_put(struct env *e)
{
    rdmax_req r;
    memset(&r, 0, sizeof r);
    r.op = RDMAX_OP_PUT;
    r.buf = e->src->addr;
    r.len = 64;
    r.raddr = e->raddr;
    r.rkey = e->rkey;
    r.comp = &e->c;
    return rdmax_req_post(e->ua, &r);
}
static int ud_send_null(struct env *e) { return rdmax_send(e->ua, NULL, 64, NULL, NULL); }
static int ud_send_over_mtu(struct env *e)
{
    return rdmax_send(e->ua, e->src->addr, rdmax_ctx_query_attr(e->ctx)->mtu_bytes + 1, e->src, &e->c);
}
static int rc_ep_with_ud_record(struct env *e)
{
    rdmax_conn_record ui;
    rdmax_ep_query_record(e->ub, &ui);
    EXPECT(rdmax_ep_create(e->ctx, NULL, &e->x) == RDMAX_OK, "ep_create: %s", g_lastlog);
    return rdmax_ep_connect_record(e->x, &ui);
}
static int mcast_join_rc(struct env *e) { return rdmax_mcast_join(e->a, "239.1.2.3"); }
#else
static int ep_create_ud_in_rc_build(struct env *e)
{
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.transport = RDMAX_TRANSPORT_ID_UD;
    return rdmax_ep_create(e->ctx, &d, &e->x);
}
#endif

struct mcase {
    const char *name;
    int (*fn)(struct env *e);
    rdmax_status want;
};

#define C(fn, want) {#fn, fn, want}
static const struct mcase cases[] = {
    C(send_null, RDMAX_ERR_INVALID_PARAM),
    C(send_null_mem, RDMAX_ERR_INVALID_PARAM),
    C(send_null_len0, RDMAX_OK),
    C(put_null, RDMAX_ERR_INVALID_PARAM),
    C(put_null_big, RDMAX_ERR_INVALID_PARAM),
    C(put_null_batched, RDMAX_ERR_INVALID_PARAM),
    C(get_null, RDMAX_ERR_INVALID_PARAM),
    C(get_null_mem, RDMAX_ERR_INVALID_PARAM),
    C(get_null_len0, RDMAX_OK),
    C(fadd_null_result, RDMAX_ERR_INVALID_PARAM),
    C(cswap_null_result, RDMAX_ERR_INVALID_PARAM),
    C(put_iov_null, RDMAX_ERR_INVALID_PARAM),
    C(put_iov_null_addr, RDMAX_ERR_INVALID_PARAM),
    C(get_iov_null_addr, RDMAX_ERR_INVALID_PARAM),
    C(get_over_max_nomem, RDMAX_ERR_SIZE),
    C(get_over_max_mem, RDMAX_ERR_SIZE),
    C(put_over_max, RDMAX_ERR_SIZE),
    C(put_over_u32, RDMAX_ERR_SIZE),
    C(get_over_u32, RDMAX_ERR_SIZE),
    C(send_over_u32, RDMAX_ERR_SIZE),
    C(send_over_peer_recv, RDMAX_ERR_SIZE),
    C(put_iov_over_max, RDMAX_ERR_SIZE),
    C(get_iov_zero, RDMAX_ERR_SIZE),
    C(put_iov_cnt0, RDMAX_ERR_INVALID_PARAM),
    C(get_iov_cnt_over, RDMAX_ERR_INVALID_PARAM),
    C(fadd_unaligned, RDMAX_ERR_UNALIGNED),
    C(cswap_no_mem, RDMAX_ERR_NO_MEMH),
    C(put_not_connected, RDMAX_ERR_NOT_CONNECTED),
    C(send_not_connected, RDMAX_ERR_NOT_CONNECTED),
    C(get_not_connected, RDMAX_ERR_NOT_CONNECTED),
    C(fadd_not_connected, RDMAX_ERR_NOT_CONNECTED),
    C(put_peer_destroyed, RDMAX_ERR_ENDPOINT),
    C(get_after_error, RDMAX_ERR_ENDPOINT),
    C(put_outside_mem, RDMAX_ERR_LOCAL),
    C(put_unmapped_nomem, RDMAX_ERR_INVALID_PARAM),
    C(get_unmapped_nomem, RDMAX_ERR_INVALID_PARAM),
    C(accept_negative, RDMAX_ERR_INVALID_PARAM),
    C(accept_zero, RDMAX_ERR_TIMEOUT),
    C(connect_negative, RDMAX_ERR_INVALID_PARAM),
    C(connect_zero, RDMAX_ERR_TIMEOUT),
    C(flush_negative, RDMAX_ERR_INVALID_PARAM),
    C(flush_zero_idle, RDMAX_OK),
    C(batch_end_without_begin, RDMAX_OK),
    C(batch_end_twice, RDMAX_OK),
    C(req_post_with_cb, RDMAX_ERR_INVALID_PARAM),
    C(req_post_no_comp, RDMAX_ERR_INVALID_PARAM),
    C(req_post_bad_op, RDMAX_ERR_INVALID_PARAM),
    C(pending_add_no_cb, RDMAX_ERR_INVALID_PARAM),
    C(ep_create_bad_transport, RDMAX_ERR_UNSUPPORTED),
    C(ctx_create_no_device, RDMAX_ERR_NO_DEVICE),
    C(mem_reg_null, RDMAX_ERR_INVALID_PARAM),
    C(mem_reg_len0, RDMAX_ERR_INVALID_PARAM),
    C(mem_alloc_len0, RDMAX_ERR_INVALID_PARAM),
    C(refused_post_rolls_back, RDMAX_ERR_IO),
    C(refused_chain_rolls_back, RDMAX_ERR_IO),
#if RDMAX__HAS_UD
    C(ud_put, RDMAX_ERR_UNSUPPORTED),
    C(ud_put_big, RDMAX_ERR_UNSUPPORTED),
    C(ud_get, RDMAX_ERR_UNSUPPORTED),
    C(ud_get_len0, RDMAX_ERR_UNSUPPORTED),
    C(ud_fadd, RDMAX_ERR_UNSUPPORTED),
    C(ud_cswap, RDMAX_ERR_UNSUPPORTED),
    C(ud_put_iov, RDMAX_ERR_UNSUPPORTED),
    C(ud_get_iov, RDMAX_ERR_UNSUPPORTED),
    C(ud_req_post_put, RDMAX_ERR_UNSUPPORTED),
    C(ud_send_null, RDMAX_ERR_INVALID_PARAM),
    C(ud_send_over_mtu, RDMAX_ERR_SIZE),
    C(rc_ep_with_ud_record, RDMAX_ERR_OOB_TRANSPORT),
    C(mcast_join_rc, RDMAX_ERR_UNSUPPORTED),
#else
    C(ep_create_ud_in_rc_build, RDMAX_ERR_UNSUPPORTED),
#endif
};
#define NCASES (sizeof cases / sizeof cases[0])

struct result {
    int st;
    char why[240];
};

static int setup(struct env *e)
{
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.device = getenv("RDMAX_TEST_DEV0");
    cd.logger.func = keep_log;
    cd.log_level = RDMAX_LOG_ERROR;
    cd.log_level_set = true;
    if (rdmax_ctx_create(&cd, &e->ctx) != RDMAX_OK)
        return snprintf(e->why, sizeof e->why, "ctx_create: %s", g_lastlog), -1;
    unsigned all = RDMAX_ACCESS_REMOTE_READ | RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_REMOTE_ATOMIC | RDMAX_ACCESS_ANY_ENDPOINT;
    if (rdmax_mem_alloc(e->ctx, 65536, all, &e->src) != RDMAX_OK ||
        rdmax_mem_alloc(e->ctx, 65536, all, &e->dst) != RDMAX_OK)
        return snprintf(e->why, sizeof e->why, "mem_alloc: %s", g_lastlog), -1;
    e->raddr = (uintptr_t)e->dst->addr;
    e->rkey = e->dst->rkey;
    if (rdmax_ep_create_pair(e->ctx, NULL, &e->a, &e->b) != RDMAX_OK)
        return snprintf(e->why, sizeof e->why, "RC pair: %s", g_lastlog), -1;
#if RDMAX__HAS_UD
    rdmax_ep_desc ud;
    memset(&ud, 0, sizeof ud);
    ud.transport = RDMAX_TRANSPORT_ID_UD;
    if (rdmax_ep_create_pair(e->ctx, &ud, &e->ua, &e->ub) != RDMAX_OK)
        return snprintf(e->why, sizeof e->why, "UD pair: %s", g_lastlog), -1;
#endif
    return 0;
}

static void teardown(struct env *e)
{
    rdmax_listener_destroy(e->l);
    rdmax_ep_destroy(e->x);
    rdmax_ep_destroy(e->y);
    rdmax_ep_destroy(e->ua);
    rdmax_ep_destroy(e->ub);
    rdmax_ep_destroy(e->a);
    rdmax_ep_destroy(e->b);
    rdmax_mem_free(e->src);
    rdmax_mem_free(e->dst);
    rdmax_ctx_destroy(e->ctx);
    free(e->big);
}

static void child(const struct mcase *mc, int fd)
{
    static struct env e;
    struct result r;
    memset(&r, 0, sizeof r);
    r.st = setup(&e) == 0 ? mc->fn(&e) : BAD_SETUP;
    snprintf(r.why, sizeof r.why, "%s", e.why);
    if (write(fd, &r, sizeof r) != (ssize_t)sizeof r)
        _exit(3);
    teardown(&e);  /* a crash here is a failure too */
    _exit(0);
}

static void run_case(const struct mcase *mc)
{
    tl_begin("%s/%s", VARIANT, mc->name);
    int p[2];
    if (pipe(p) != 0) {
        tl_fail(__FILE__, __LINE__, "pipe");
        tl_end();
        return;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        child(mc, p[1]);
    }
    close(p[1]);
    int status = 0, hung = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (waitpid(pid, &status, WNOHANG) == 0) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > CHILD_BOUND_S) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            hung = 1;
            break;
        }
        poll(NULL, 0, 5);
    }
    struct result r;
    int got = read(p[0], &r, sizeof r) == (ssize_t)sizeof r;
    close(p[0]);
    if (hung)
        CHECK(0, "still running after %d s (a hang): killed; %s", CHILD_BOUND_S,
              got ? "after the call returned" : "in the call");
    else if (WIFSIGNALED(status))
        CHECK(0, "killed by signal %d (%s) %s", WTERMSIG(status), strsignal(WTERMSIG(status)),
              got ? "after the call returned, in teardown" : "in the call");
    else if (!got)
        CHECK(0, "child exited with status %d without a result", WEXITSTATUS(status));
    else if (r.st == BAD_SETUP)
        CHECK(0, "setup: %s", r.why);
    else if (r.st == BAD_CHECK)
        CHECK(0, "%s", r.why);
    else {
        CHECK_ST(r.st, mc->want);
        CHECK(WEXITSTATUS(status) == 0, "child exited with status %d after the call", WEXITSTATUS(status));
    }
    tl_end();
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    const char *only = argc > 1 ? argv[1] : NULL;
    size_t ran = 0;
    for (size_t i = 0; i < NCASES; i++) {
        if (only && !strstr(cases[i].name, only))
            continue;
        run_case(&cases[i]);
        ran++;
    }
    if (ran == 0) {
        printf("FAIL %s: no case matches '%s'\n", VARIANT, only ? only : "");
        return 1;
    }
    return tl_failed_total ? 1 : 0;
}
