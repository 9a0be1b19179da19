/* rdmax_impl.h - the part of rdmax that is compiled once. Do not include this file: define
   RDMAX_IMPLEMENTATION in one .c file and include rdmax.h, which pulls this in. */
#ifndef RDMAX_IMPL_INCLUDED
#error "rdmax: do not include rdmax_impl.h directly: #define RDMAX_IMPLEMENTATION and #include \"rdmax.h\" in one source file"
#endif

#if !defined(__USE_GNU)
#error "rdmax: the implementation unit needs _GNU_SOURCE: include rdmax.h before any system header there, or #define _GNU_SOURCE first"
#endif
#include <stdio.h>
#include <stdlib.h>
#include <stdarg.h>
#include <unistd.h>
#include <fcntl.h>
#include <poll.h>
#include <time.h>
#include <netdb.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/mman.h>
#include <numa.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The link-time check of the transport selection (see the manual). */
extern const char RDMAX__SELECTION;
const char RDMAX__SELECTION = 1;

#if RDMAX__HAS_UD
static void rdmax__ud_ctx_cleanup(rdmax_ctx *ctx);
static void rdmax__ud_ep_cleanup(rdmax_ep *ep);
static rdmax_status rdmax__ud_connect(rdmax_ep *ep, const rdmax_conn_info *r);
#endif

/* >>strings ========================================================================================== */
const char *rdmax_status_str(rdmax_status s)
{
    switch (s) {
#define RDMAX__X(name, val, text) case name: return text;
        RDMAX__STATUS_LIST(RDMAX__X)
#undef RDMAX__X
    }
    return "unknown status";
}

const char *rdmax_op_str(rdmax_op op)
{
    static const char *const names[RDMAX_OP__COUNT] = {"send", "put", "get", "fadd", "cswap", "flush"};
    return (unsigned)op < RDMAX_OP__COUNT ? names[op] : "unknown";
}

/* >>alloc ============================================================================================ */
#ifndef RDMAX_MALLOC
#define RDMAX_MALLOC(sz) malloc(sz)
#define RDMAX_FREE(p) free(p)
#endif

static void *rdmax__alloc(rdmax_ctx *ctx, size_t size)
{
    void *p = (ctx && ctx->desc.allocator.alloc) ? ctx->desc.allocator.alloc(size, ctx->desc.allocator.user)
                                                 : RDMAX_MALLOC(size);
    if (p)
        memset(p, 0, size);
    return p;
}

static void rdmax__free(rdmax_ctx *ctx, void *p)
{
    if (!p)
        return;
    if (ctx && ctx->desc.allocator.free)
        ctx->desc.allocator.free(p, ctx->desc.allocator.user);
    else
        RDMAX_FREE(p);
}

/* >>log ============================================================================================== */
static const char *const rdmax__level_names[] = {"error", "warn", "info", "debug", "trace"};

static void rdmax__vlog(rdmax_ctx *ctx, const rdmax_logger *lg, rdmax_log_level lvl, rdmax_log_level max,
                        const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (ctx && lvl == RDMAX_LOG_ERROR)
        memcpy(ctx->last_error, msg, sizeof ctx->last_error);
    if (lvl > max)
        return;
    if (lg && lg->func)
        lg->func(lvl, msg, lg->user);
    else
        fprintf(stderr, "rdmax %s: %s\n", rdmax__level_names[lvl], msg);
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void rdmax__log(rdmax_ctx *ctx, rdmax_log_level lvl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rdmax__vlog(ctx, ctx ? &ctx->desc.logger : NULL, lvl, ctx ? ctx->log_level : RDMAX_LOG_WARN, fmt, ap);
    va_end(ap);
}

static int rdmax__env_int(const char *name, int *out)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < -1 || x > 65535)
        return -1;
    *out = (int)x;
    return 1;
}

static rdmax_log_level rdmax__env_log_level(void)
{
    const char *v = getenv("RDMAX_LOG_LEVEL");
    if (v)
        for (int i = 0; i <= RDMAX_LOG_TRACE; i++)
            if (!strcmp(v, rdmax__level_names[i]))
                return (rdmax_log_level)i;
    return RDMAX_LOG_WARN;
}

const char *rdmax_ctx_last_error(const rdmax_ctx *ctx)
{
    return ctx->last_error;
}

/* >>numa ============================================================================================= */
static int rdmax__dev_numa_node(const char *dev)
{
    char path[256];
    snprintf(path, sizeof path, "/sys/class/infiniband/%s/device/numa_node", dev);
    FILE *f = fopen(path, "r");
    int node = -1;
    if (f) {  /* rxe has no such file: node unknown */
        if (fscanf(f, "%d", &node) != 1)
            node = -1;
        fclose(f);
    }
    return node;
}

void *rdmax_numa_alloc(rdmax_ctx *ctx, size_t len)
{
    int node = ctx->attr.numa_node;
    if (node >= 0 && numa_available() >= 0 && node <= numa_max_node())
        return numa_alloc_onnode(len, node);
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

void rdmax_numa_free(rdmax_ctx *ctx, void *p, size_t len)
{
    (void)ctx;
    if (p)
        munmap(p, len);  /* numa_free is munmap too */
}

/* >>context ========================================================================================== */
static uint32_t rdmax__mtu_bytes(enum ibv_mtu m)
{
    return (m >= IBV_MTU_256 && m <= IBV_MTU_4096) ? 128u << m : 0;
}

/* The RoCE v2 GID whose address is IPv4-mapped (::ffff:a.b.c.d) is the one that routes like the
   netdev's IPv4 address; on InfiniBand ports index 0 is right. */
static int rdmax__pick_gid(struct ibv_context *v, uint8_t port, int link_layer)
{
    if (link_layer != IBV_LINK_LAYER_ETHERNET)
        return 0;
    int v2_any = -1;
    for (uint32_t i = 0; i < 256; i++) {
        struct ibv_gid_entry e;
        if (ibv_query_gid_ex(v, port, i, &e, 0) != 0)
            continue;
        if (e.gid_type != IBV_GID_TYPE_ROCE_V2)
            continue;
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(e.gid.raw, mapped, 12))
            return (int)i;
        if (v2_any < 0)
            v2_any = (int)i;
    }
    return v2_any >= 0 ? v2_any : 0;
}

/* verbs cannot report the inline cap; only a QP creation that asks for too much fails. */
static uint32_t rdmax__probe_inline(rdmax_ctx *ctx)
{
    uint32_t lo = 0, hi = 4096;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        struct ibv_qp_init_attr a;
        memset(&a, 0, sizeof a);
        a.send_cq = ctx->scq;
        a.recv_cq = ctx->rcq;
        a.qp_type = IBV_QPT_RC;
        a.cap.max_send_wr = 1;
        a.cap.max_recv_wr = 1;
        a.cap.max_send_sge = 1;
        a.cap.max_recv_sge = 1;
        a.cap.max_inline_data = mid;
        struct ibv_qp *qp = ibv_create_qp(ctx->pd, &a);
        if (qp) {
            ibv_destroy_qp(qp);
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

static rdmax_status rdmax__open_device(rdmax_ctx *ctx, const char *want)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "no RDMA device found (ibv_get_device_list: %s)",
                   list ? "empty list" : strerror(errno));
        if (list)
            ibv_free_device_list(list);
        return RDMAX_ERR_NO_DEVICE;
    }
    rdmax_status st = RDMAX_ERR_NO_DEVICE;
    for (int i = 0; i < n && st != RDMAX_OK; i++) {
        const char *name = ibv_get_device_name(list[i]);
        if (want && strcmp(want, name))
            continue;
        struct ibv_context *v = ibv_open_device(list[i]);
        if (!v) {
            rdmax__log(ctx, RDMAX_LOG_ERROR, "device %s: ibv_open_device failed: %s", name, strerror(errno));
            continue;
        }
        struct ibv_device_attr da;
        if (ibv_query_device(v, &da)) {
            rdmax__log(ctx, RDMAX_LOG_ERROR, "device %s: ibv_query_device failed: %s", name, strerror(errno));
            ibv_close_device(v);
            continue;
        }
        for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
            if (ctx->desc.port && p != ctx->desc.port)
                continue;
            struct ibv_port_attr pa;
            if (ibv_query_port(v, p, &pa)) {
                rdmax__log(ctx, RDMAX_LOG_ERROR, "device %s port %u: ibv_query_port failed: %s", name, p,
                           strerror(errno));
                continue;
            }
            if (pa.state != IBV_PORT_ACTIVE) {
                rdmax__log(ctx, RDMAX_LOG_INFO, "device %s port %u: not active (%s)", name, p,
                           ibv_port_state_str(pa.state));
                continue;
            }
            rdmax_dev_attr *a = &ctx->attr;
            snprintf(a->name, sizeof a->name, "%s", name);
            a->port = p;
            a->active_mtu = pa.active_mtu;
            a->mtu_bytes = rdmax__mtu_bytes(pa.active_mtu);
            a->max_qp_rd_atom = (uint32_t)da.max_qp_rd_atom;
            a->max_sge = (uint32_t)da.max_sge;
            a->max_cqe = (uint32_t)da.max_cqe;
            a->max_qp_wr = (uint32_t)da.max_qp_wr;
            a->max_msg_sz = pa.max_msg_sz;
            a->link_layer = pa.link_layer;
            ctx->verbs = v;
            st = RDMAX_OK;
            break;
        }
        if (st != RDMAX_OK)
            ibv_close_device(v);
    }
    ibv_free_device_list(list);
    if (st != RDMAX_OK)
        rdmax__log(ctx, RDMAX_LOG_ERROR, "no active port on %s%s (port %s)", want ? "device " : "any device",
                   want ? want : "", ctx->desc.port ? "as requested" : "any");
    return st;
}

rdmax_status rdmax_ctx_create(const rdmax_ctx_desc *desc_in, rdmax_ctx **out)
{
    rdmax_ctx_desc d;
    if (desc_in)
        d = *desc_in;
    else
        memset(&d, 0, sizeof d);
    *out = NULL;
    rdmax_ctx *ctx = (rdmax_ctx *)(d.allocator.alloc ? d.allocator.alloc(sizeof *ctx, d.allocator.user)
                                                     : RDMAX_MALLOC(sizeof *ctx));
    if (!ctx)
        return RDMAX_ERR_NO_MEMORY;
    memset(ctx, 0, sizeof *ctx);
    ctx->log_level = d.log_level_set ? d.log_level : rdmax__env_log_level();
    d.log_level = ctx->log_level;
    d.log_level_set = true;
    if (!d.device)
        d.device = getenv("RDMAX_DEVICE");
    if (!d.cq_depth)
        d.cq_depth = 4096;
    if (!d.max_eps)
        d.max_eps = 1024;
    if (d.max_eps > 65535)
        d.max_eps = 65535;  /* the wr_id has 16 bits for the endpoint index */
    ctx->desc = d;
    rdmax_status st = rdmax__open_device(ctx, d.device);
    if (st != RDMAX_OK)
        goto fail;
    rdmax_dev_attr *a = &ctx->attr;

    /* GID: desc, then environment, then the RoCE v2 IPv4-mapped one. */
    int gi = -2, r;
    if (d.gid_index_set)
        gi = d.gid_index;
    else if ((r = rdmax__env_int("RDMAX_GID_INDEX", &gi)) < 0) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "RDMAX_GID_INDEX=%s is not a GID index", getenv("RDMAX_GID_INDEX"));
        st = RDMAX_ERR_INVALID_PARAM;
        goto fail;
    }
    if (gi == -2)
        gi = rdmax__pick_gid(ctx->verbs, a->port, a->link_layer);
    if (gi < 0 || ibv_query_gid(ctx->verbs, a->port, gi, &a->gid)) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "device %s port %u: ibv_query_gid(index %d) failed: %s", a->name, a->port,
                   gi, strerror(errno));
        st = RDMAX_ERR_NO_DEVICE;
        goto fail;
    }
    a->gid_index = gi;
    ctx->desc.gid_index = gi;
    ctx->desc.gid_index_set = true;

    /* NUMA: desc, environment, the device's node from sysfs; -1 means local allocation. */
    int node = -1;
    a->numa_node = rdmax__dev_numa_node(a->name);
    if (d.numa_node_set)
        node = d.numa_node;
    else if ((r = rdmax__env_int("RDMAX_NUMA_NODE", &node)) < 0) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "RDMAX_NUMA_NODE=%s is not a node number", getenv("RDMAX_NUMA_NODE"));
        st = RDMAX_ERR_INVALID_PARAM;
        goto fail;
    } else if (r == 0)
        node = a->numa_node;
    if (node >= 0 && (numa_available() < 0 || node > numa_max_node())) {
        rdmax__log(ctx, RDMAX_LOG_WARN, "device %s: NUMA node %d not available; allocating locally", a->name, node);
        node = -1;
    }
    a->numa_node = node;
    ctx->desc.numa_node = node;
    ctx->desc.numa_node_set = true;

    if (!(ctx->pd = ibv_alloc_pd(ctx->verbs))) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "device %s: ibv_alloc_pd failed: %s", a->name, strerror(errno));
        st = RDMAX_ERR_IO;
        goto fail;
    }
    if (!(ctx->channel = ibv_create_comp_channel(ctx->verbs))) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "device %s: ibv_create_comp_channel failed: %s", a->name, strerror(errno));
        st = RDMAX_ERR_IO;
        goto fail;
    }
    if (d.cq_depth > a->max_cqe)
        ctx->desc.cq_depth = d.cq_depth = a->max_cqe;
    ctx->scq = ibv_create_cq(ctx->verbs, (int)d.cq_depth, NULL, ctx->channel, 0);
    ctx->rcq = ibv_create_cq(ctx->verbs, (int)d.cq_depth, NULL, ctx->channel, 0);
    if (!ctx->scq || !ctx->rcq) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "device %s: ibv_create_cq(%u) failed: %s", a->name, d.cq_depth,
                   strerror(errno));
        st = RDMAX_ERR_IO;
        goto fail;
    }
    fcntl(ctx->channel->fd, F_SETFL, fcntl(ctx->channel->fd, F_GETFL) | O_NONBLOCK);
    ctx->scq_credits = d.cq_depth;
    ctx->eps = (rdmax__ep_ref *)rdmax__alloc(ctx, d.max_eps * sizeof *ctx->eps);
    if (!ctx->eps) {
        st = RDMAX_ERR_NO_MEMORY;
        goto fail;
    }
    a->max_inline = rdmax__probe_inline(ctx);
    char gid[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, a->gid.raw, gid, sizeof gid);
    rdmax__log(ctx, RDMAX_LOG_INFO, "device %s port %u: gid[%d] %s, mtu %u, max_inline %u, max_qp_rd_atom %u, "
               "max_sge %u, numa node %d", a->name, a->port, gi, gid, a->mtu_bytes, a->max_inline,
               a->max_qp_rd_atom, a->max_sge, node);
    *out = ctx;
    return RDMAX_OK;
fail:
    if (desc_in && desc_in->logger.func == NULL && st != RDMAX_OK && ctx->log_level < RDMAX_LOG_ERROR)
        fprintf(stderr, "rdmax error: %s\n", ctx->last_error);
    rdmax_ctx_destroy(ctx);
    return st;
}

void rdmax_ctx_destroy(rdmax_ctx *ctx)
{
    if (!ctx)
        return;
    for (uint32_t i = 0; ctx->eps && i < ctx->desc.max_eps; i++)
        if (ctx->eps[i].ep)
            rdmax_ep_destroy(ctx->eps[i].ep);
#if RDMAX__HAS_UD
    rdmax__ud_ctx_cleanup(ctx);
#endif
    if (ctx->scq)
        ibv_destroy_cq(ctx->scq);
    if (ctx->rcq)
        ibv_destroy_cq(ctx->rcq);
    if (ctx->channel)
        ibv_destroy_comp_channel(ctx->channel);
    if (ctx->pd)
        ibv_dealloc_pd(ctx->pd);
    if (ctx->verbs)
        ibv_close_device(ctx->verbs);
    rdmax__free(ctx, ctx->eps);
    rdmax_allocator al = ctx->desc.allocator;
    if (al.free)
        al.free(ctx, al.user);
    else
        RDMAX_FREE(ctx);
}

const rdmax_dev_attr *rdmax_ctx_attr(const rdmax_ctx *ctx)
{
    return &ctx->attr;
}

int rdmax_ctx_fd(const rdmax_ctx *ctx)
{
    return ctx->channel->fd;
}

rdmax_status rdmax_ctx_arm(rdmax_ctx *ctx)
{
    if (ibv_req_notify_cq(ctx->scq, 0) || ibv_req_notify_cq(ctx->rcq, 0))
        return RDMAX_ERR_IO;
    return RDMAX_OK;
}

int rdmax_wait(rdmax_ctx *ctx, int timeout_ms)
{
    int n = rdmax_progress(ctx);
    if (n)
        return n;
    if (rdmax_ctx_arm(ctx) != RDMAX_OK)
        return -1;
    n = rdmax_progress(ctx);  /* a completion that raced with arming */
    if (n)
        return n;
    struct pollfd pfd = {ctx->channel->fd, POLLIN, 0};
    if (poll(&pfd, 1, timeout_ms) > 0) {
        struct ibv_cq *cq;
        void *cq_ctx;
        while (ibv_get_cq_event(ctx->channel, &cq, &cq_ctx) == 0)
            ibv_ack_cq_events(cq, 1);
    }
    return rdmax_progress(ctx);
}

void rdmax_counters_get(const rdmax_ctx *ctx, rdmax_counters *out)
{
    *out = ctx->cnt;
}

/* >>memory =========================================================================================== */
static int rdmax__ibv_access(unsigned access)
{
    int f = IBV_ACCESS_LOCAL_WRITE;
    if (access & RDMAX_ACCESS_REMOTE_READ)
        f |= IBV_ACCESS_REMOTE_READ;
    if (access & RDMAX_ACCESS_REMOTE_WRITE)
        f |= IBV_ACCESS_REMOTE_WRITE;
    if (access & RDMAX_ACCESS_REMOTE_ATOMIC)
        f |= IBV_ACCESS_REMOTE_ATOMIC;
    return f;
}

rdmax_status rdmax_mem_reg(rdmax_ctx *ctx, void *addr, size_t len, unsigned access, rdmax_mem **out)
{
    *out = NULL;
    rdmax_mem *m = (rdmax_mem *)rdmax__alloc(ctx, sizeof *m);
    if (!m)
        return RDMAX_ERR_NO_MEMORY;
    m->mr = ibv_reg_mr(ctx->pd, addr, len, rdmax__ibv_access(access));
    if (!m->mr) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "device %s: ibv_reg_mr(%p, %zu) failed: %s", ctx->attr.name, addr, len,
                   strerror(errno));
        rdmax__free(ctx, m);
        return errno == ENOMEM ? RDMAX_ERR_NO_MEMORY : RDMAX_ERR_IO;
    }
    m->addr = addr;
    m->len = len;
    m->lkey = m->mr->lkey;
    m->rkey = m->mr->rkey;
    m->ctx = ctx;
    m->numa_node = -1;
    *out = m;
    return RDMAX_OK;
}

rdmax_status rdmax_mem_alloc(rdmax_ctx *ctx, size_t len, unsigned access, rdmax_mem **out)
{
    *out = NULL;
    if (len == 0)
        return RDMAX_ERR_INVALID_PARAM;
    void *p = rdmax_numa_alloc(ctx, len);
    if (!p) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "device %s: allocating %zu bytes on NUMA node %d failed", ctx->attr.name,
                   len, ctx->attr.numa_node);
        return RDMAX_ERR_NO_MEMORY;
    }
    memset(p, 0, len);  /* touch: pages land on the node now */
    rdmax_status st = rdmax_mem_reg(ctx, p, len, access, out);
    if (st != RDMAX_OK) {
        rdmax_numa_free(ctx, p, len);
        return st;
    }
    (*out)->owned = 1;
    (*out)->numa_node = ctx->attr.numa_node;
    return RDMAX_OK;
}

void rdmax_mem_free(rdmax_mem *m)
{
    if (!m)
        return;
    rdmax_ctx *ctx = m->ctx;
    ibv_dereg_mr(m->mr);
    if (m->owned)
        rdmax_numa_free(ctx, m->addr, m->len);
    rdmax__free(ctx, m);
}

/* >>wire ============================================================================================= */
static void rdmax__put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void rdmax__put32(uint8_t *p, uint32_t v) { rdmax__put16(p, (uint16_t)(v >> 16)); rdmax__put16(p + 2, (uint16_t)v); }
static void rdmax__put64(uint8_t *p, uint64_t v) { rdmax__put32(p, (uint32_t)(v >> 32)); rdmax__put32(p + 4, (uint32_t)v); }
static uint16_t rdmax__get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t rdmax__get32(const uint8_t *p) { return (uint32_t)rdmax__get16(p) << 16 | rdmax__get16(p + 2); }
static uint64_t rdmax__get64(const uint8_t *p) { return (uint64_t)rdmax__get32(p) << 32 | rdmax__get32(p + 4); }

void rdmax_conn_info_encode(const rdmax_conn_info *in, uint8_t out[RDMAX_CONN_INFO_SIZE])
{
    memset(out, 0, RDMAX_CONN_INFO_SIZE);
    rdmax__put32(out + 0, RDMAX_CONN_INFO_MAGIC);
    rdmax__put16(out + 4, RDMAX_CONN_INFO_VERSION);
    rdmax__put16(out + 6, RDMAX_CONN_INFO_SIZE);
    out[8] = in->transport;
    out[9] = in->mtu;
    rdmax__put32(out + 12, in->qpn);
    rdmax__put32(out + 16, in->psn);
    rdmax__put32(out + 20, in->qkey);
    rdmax__put32(out + 24, in->buf.rkey);
    rdmax__put32(out + 28, in->recv_size);
    memcpy(out + 32, in->gid, 16);
    rdmax__put64(out + 48, in->buf.addr);
    rdmax__put64(out + 56, in->buf.len);
}

#define RDMAX__WHY(...) (why ? (void)snprintf(why, why_len, __VA_ARGS__) : (void)0)

/* Checks the 8-byte head: magic, version, then length (only after the version, whose record it is). */
static rdmax_status rdmax__conn_head_check(const uint8_t *b, char *why, size_t why_len)
{
    uint32_t magic = rdmax__get32(b);
    if (magic != RDMAX_CONN_INFO_MAGIC) {
        RDMAX__WHY("connection record: magic 0x%08x, expected 0x%08x (peer is not rdmax)", magic,
                   RDMAX_CONN_INFO_MAGIC);
        return RDMAX_ERR_OOB_MAGIC;
    }
    uint16_t ver = rdmax__get16(b + 4);
    if (ver != RDMAX_CONN_INFO_VERSION) {
        RDMAX__WHY("connection record: version %u, this rdmax speaks version %u", ver, RDMAX_CONN_INFO_VERSION);
        return RDMAX_ERR_OOB_VERSION;
    }
    uint16_t len = rdmax__get16(b + 6);
    if (len > RDMAX_CONN_INFO_SIZE) {
        RDMAX__WHY("connection record: length field %u, larger than the %u-byte record", len, RDMAX_CONN_INFO_SIZE);
        return RDMAX_ERR_OOB_LONG;
    }
    if (len < RDMAX_CONN_INFO_SIZE) {
        RDMAX__WHY("connection record: length field %u, smaller than the %u-byte record", len, RDMAX_CONN_INFO_SIZE);
        return RDMAX_ERR_OOB_LENGTH;
    }
    return RDMAX_OK;
}

rdmax_status rdmax_conn_info_decode(const uint8_t *b, size_t n, rdmax_conn_info *o, char *why, size_t why_len)
{
    if (n < 8) {
        RDMAX__WHY("connection record: %zu bytes, need %u", n, RDMAX_CONN_INFO_SIZE);
        return RDMAX_ERR_OOB_SHORT;
    }
    rdmax_status st = rdmax__conn_head_check(b, why, why_len);
    if (st != RDMAX_OK)
        return st;
    if (n < RDMAX_CONN_INFO_SIZE) {
        RDMAX__WHY("connection record: %zu bytes, need %u", n, RDMAX_CONN_INFO_SIZE);
        return RDMAX_ERR_OOB_SHORT;
    }
    if (n > RDMAX_CONN_INFO_SIZE) {
        RDMAX__WHY("connection record: %zu bytes, expected %u", n, RDMAX_CONN_INFO_SIZE);
        return RDMAX_ERR_OOB_LONG;
    }
    memset(o, 0, sizeof *o);
    o->transport = b[8];
    o->mtu = b[9];
    o->qpn = rdmax__get32(b + 12);
    o->psn = rdmax__get32(b + 16);
    o->qkey = rdmax__get32(b + 20);
    o->buf.rkey = rdmax__get32(b + 24);
    o->recv_size = rdmax__get32(b + 28);
    memcpy(o->gid, b + 32, 16);
    o->buf.addr = rdmax__get64(b + 48);
    o->buf.len = rdmax__get64(b + 56);
    if (o->transport != RDMAX_TRANSPORT_ID_RC && o->transport != RDMAX_TRANSPORT_ID_UD) {
        RDMAX__WHY("connection record: transport %u is neither RC (1) nor UD (2)", o->transport);
        return RDMAX_ERR_OOB_TRANSPORT;
    }
    if (o->mtu < IBV_MTU_256 || o->mtu > IBV_MTU_4096) {
        RDMAX__WHY("connection record: MTU code %u, expected 1..5 (256..4096 bytes)", o->mtu);
        return RDMAX_ERR_OOB_MTU;
    }
    if (rdmax__get16(b + 10) != 0) {
        RDMAX__WHY("connection record: reserved bytes 10-11 are 0x%04x, expected 0", rdmax__get16(b + 10));
        return RDMAX_ERR_OOB_RESERVED;
    }
    if (o->qpn == 0 || o->qpn > 0xffffff) {
        RDMAX__WHY("connection record: QP number 0x%x outside 1..0xffffff", o->qpn);
        return RDMAX_ERR_OOB_QPN;
    }
    if (o->psn > 0xffffff) {
        RDMAX__WHY("connection record: PSN 0x%x wider than 24 bits", o->psn);
        return RDMAX_ERR_OOB_PSN;
    }
    static const uint8_t zero[16] = {0};
    if (!memcmp(o->gid, zero, 16)) {
        RDMAX__WHY("connection record: GID is all zero");
        return RDMAX_ERR_OOB_GID;
    }
    if (o->recv_size == 0 || o->recv_size > (1u << 30)) {
        RDMAX__WHY("connection record: receive size %u outside 1..2^30", o->recv_size);
        return RDMAX_ERR_OOB_RECV_SIZE;
    }
    if (o->buf.len == 0 ? (o->buf.addr != 0 || o->buf.rkey != 0) : (o->buf.addr + o->buf.len < o->buf.addr)) {
        RDMAX__WHY("connection record: buffer 0x%llx+%llu (rkey 0x%x) is not a valid region",
                   (unsigned long long)o->buf.addr, (unsigned long long)o->buf.len, o->buf.rkey);
        return RDMAX_ERR_OOB_BUFFER;
    }
    return RDMAX_OK;
}

static int64_t rdmax__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Read exactly n bytes before the deadline. Returns n, 0..n-1 when the peer closed early, -1 on
   timeout (errno ETIMEDOUT) or error. */
static ssize_t rdmax__read_full(int fd, void *buf, size_t n, int64_t deadline)
{
    size_t got = 0;
    while (got < n) {
        int64_t left = deadline - rdmax__now_ms();
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd p = {fd, POLLIN, 0};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            continue;
        ssize_t k = read(fd, (char *)buf + got, n - got);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k < 0 && errno == ECONNRESET)
            return (ssize_t)got;  /* the peer is gone: same as closing early */
        if (k < 0)
            return -1;
        if (k == 0)
            return (ssize_t)got;
        got += (size_t)k;
    }
    return (ssize_t)got;
}

static int rdmax__write_full(int fd, const void *buf, size_t n, int64_t deadline)
{
    size_t put = 0;
    while (put < n) {
        int64_t left = deadline - rdmax__now_ms();
        if (left <= 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        struct pollfd p = {fd, POLLOUT, 0};
        if (poll(&p, 1, (int)left) <= 0)
            continue;
        ssize_t k = send(fd, (const char *)buf + put, n - put, MSG_NOSIGNAL);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k < 0)
            return -1;
        put += (size_t)k;
    }
    return 0;
}

rdmax_status rdmax_oob_exchange(int fd, const rdmax_conn_info *local, rdmax_conn_info *remote, int timeout_ms,
                                char *why, size_t why_len)
{
    int64_t deadline = rdmax__now_ms() + (timeout_ms < 0 ? 3600000 : timeout_ms);
    uint8_t mine[RDMAX_CONN_INFO_SIZE], theirs[RDMAX_CONN_INFO_SIZE];
    rdmax_conn_info_encode(local, mine);
    /* A failed send is reported only after reading what the peer sent: a peer that closed after a bad
       record is better described by its record than by our EPIPE. */
    int send_err = rdmax__write_full(fd, mine, sizeof mine, deadline) ? errno : 0;
    if (send_err == ETIMEDOUT) {
        RDMAX__WHY("connection record: sending ours timed out after %d ms", timeout_ms);
        return RDMAX_ERR_TIMEOUT;
    }
    /* The head first: a peer of another version may send a record of another size; we never read more
       than our own record's size into our buffer. */
    ssize_t k = rdmax__read_full(fd, theirs, 8, deadline);
    if (k < 0) {
        RDMAX__WHY("connection record: waiting for the peer's record: %s after %d ms",
                   errno == ETIMEDOUT ? "timed out" : strerror(errno), timeout_ms);
        return errno == ETIMEDOUT ? RDMAX_ERR_TIMEOUT : RDMAX_ERR_IO;
    }
    if (k < 8) {
        RDMAX__WHY("connection record: peer closed after %zd of %u bytes", k, RDMAX_CONN_INFO_SIZE);
        return RDMAX_ERR_OOB_SHORT;
    }
    rdmax_status st = rdmax__conn_head_check(theirs, why, why_len);
    if (st != RDMAX_OK)
        return st;
    k = rdmax__read_full(fd, theirs + 8, RDMAX_CONN_INFO_SIZE - 8, deadline);
    if (k < 0) {
        RDMAX__WHY("connection record: reading the peer's record: %s",
                   errno == ETIMEDOUT ? "timed out" : strerror(errno));
        return errno == ETIMEDOUT ? RDMAX_ERR_TIMEOUT : RDMAX_ERR_IO;
    }
    if (k < RDMAX_CONN_INFO_SIZE - 8) {
        RDMAX__WHY("connection record: peer closed after %zd of %u bytes", k + 8, RDMAX_CONN_INFO_SIZE);
        return RDMAX_ERR_OOB_SHORT;
    }
    st = rdmax_conn_info_decode(theirs, sizeof theirs, remote, why, why_len);
    if (st == RDMAX_OK && send_err) {
        RDMAX__WHY("connection record: sending ours failed: %s", strerror(send_err));
        return RDMAX_ERR_IO;
    }
    return st;
}

/* After both QPs are ready to receive, each side says so with one byte; anything else (or extra bytes
   after the record) is a protocol error. */
static rdmax_status rdmax__oob_sync(int fd, int timeout_ms, char *why, size_t why_len)
{
    int64_t deadline = rdmax__now_ms() + timeout_ms;
    uint8_t c = 'R';
    if (rdmax__write_full(fd, &c, 1, deadline)) {
        RDMAX__WHY("connection: sending the ready byte failed: %s", strerror(errno));
        return RDMAX_ERR_IO;
    }
    ssize_t k = rdmax__read_full(fd, &c, 1, deadline);
    if (k < 0 && errno == ETIMEDOUT) {
        RDMAX__WHY("connection: peer did not confirm it is ready within %d ms", timeout_ms);
        return RDMAX_ERR_TIMEOUT;
    }
    if (k != 1 || c != 'R') {
        RDMAX__WHY("connection: expected the ready byte from the peer, got %s",
                   k == 1 ? "another byte (a longer record?)" : "end of stream");
        return RDMAX_ERR_OOB_SYNC;
    }
    return RDMAX_OK;
}

/* >>ud =============================================================================================== */
#if RDMAX__HAS_UD
/* Address handles are created once per destination GID and kept until the context goes: creating one
   is a system call, and a UD endpoint without one cannot be made, so a post never carries a NULL AH. */
struct rdmax__ud {
    struct { uint8_t gid[16]; struct ibv_ah *ah; } *ahs;
    uint32_t n, cap;
};

#define RDMAX__MCAST_MAX 8
struct rdmax__mcast {
    struct { struct in_addr group; int fd; union ibv_gid mgid; } g[RDMAX__MCAST_MAX];
    uint32_t n;
};

static struct ibv_ah *rdmax__ah_get(rdmax_ctx *ctx, const uint8_t gid[16])
{
    if (!ctx->ud && !(ctx->ud = (struct rdmax__ud *)rdmax__alloc(ctx, sizeof *ctx->ud)))
        return NULL;
    struct rdmax__ud *u = ctx->ud;
    for (uint32_t i = 0; i < u->n; i++)
        if (!memcmp(u->ahs[i].gid, gid, 16))
            return u->ahs[i].ah;
    if (u->n == u->cap) {
        uint32_t cap = u->cap ? u->cap * 2 : 16;
        void *p = rdmax__alloc(ctx, cap * sizeof *u->ahs);
        if (!p)
            return NULL;
        if (u->n)
            memcpy(p, u->ahs, u->n * sizeof *u->ahs);
        rdmax__free(ctx, u->ahs);
        u->ahs = (__typeof__(u->ahs))p;
        u->cap = cap;
    }
    struct ibv_ah_attr a;
    memset(&a, 0, sizeof a);
    a.port_num = ctx->attr.port;
    a.is_global = 1;
    memcpy(a.grh.dgid.raw, gid, 16);
    a.grh.sgid_index = (uint8_t)ctx->attr.gid_index;
    a.grh.hop_limit = 64;
    struct ibv_ah *ah = ibv_create_ah(ctx->pd, &a);
    if (!ah) {
        char g[INET6_ADDRSTRLEN];
        inet_ntop(AF_INET6, gid, g, sizeof g);
        rdmax__log(ctx, RDMAX_LOG_ERROR, "device %s port %u: ibv_create_ah(gid %s) failed: %s", ctx->attr.name,
                   ctx->attr.port, g, strerror(errno));
        return NULL;
    }
    memcpy(u->ahs[u->n].gid, gid, 16);
    u->ahs[u->n++].ah = ah;
    return ah;
}

static rdmax_status rdmax__ud_connect(rdmax_ep *ep, const rdmax_conn_info *r)
{
    rdmax_ctx *ctx = ep->ctx;
    ep->ah = rdmax__ah_get(ctx, r->gid);
    if (!ep->ah)
        return RDMAX_ERR_IO;
    ep->ud_qpn = r->qpn;
    ep->ud_qkey = r->qkey;
    ep->peer_qpn = r->qpn;
    ep->remote = r->buf;
    /* one datagram: the path MTU, and no more than the peer can take after its GRH */
    uint32_t mtu = rdmax__mtu_bytes((enum ibv_mtu)(r->mtu < ctx->attr.active_mtu ? r->mtu : ctx->attr.active_mtu));
    ep->peer_recv_size = r->recv_size > RDMAX_UD_GRH && r->recv_size - RDMAX_UD_GRH < mtu ? r->recv_size - RDMAX_UD_GRH : mtu;
    ep->state = RDMAX_EP_CONNECTED;
    return RDMAX_OK;
}

static void rdmax__ud_ctx_cleanup(rdmax_ctx *ctx)
{
    if (!ctx->ud)
        return;
    for (uint32_t i = 0; i < ctx->ud->n; i++)
        ibv_destroy_ah(ctx->ud->ahs[i].ah);
    rdmax__free(ctx, ctx->ud->ahs);
    rdmax__free(ctx, ctx->ud);
    ctx->ud = NULL;
}

/* The IPv4 address of the device's netdev, from our IPv4-mapped GID. */
static int rdmax__gid_ipv4(const rdmax_ctx *ctx, struct in_addr *out)
{
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(ctx->attr.gid.raw, mapped, 12))
        return -1;
    memcpy(&out->s_addr, ctx->attr.gid.raw + 12, 4);
    return 0;
}

static rdmax_status rdmax__mcast_gid(rdmax_ctx *ctx, const char *group, struct in_addr *ga, union ibv_gid *mgid)
{
    if (inet_pton(AF_INET, group, ga) != 1 || !IN_MULTICAST(ntohl(ga->s_addr))) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "multicast: '%s' is not an IPv4 multicast address (224.0.0.0/4)", group);
        return RDMAX_ERR_INVALID_PARAM;
    }
    memset(mgid, 0, sizeof *mgid);  /* RoCE v2 carries IPv4 groups as IPv4-mapped GIDs */
    mgid->raw[10] = mgid->raw[11] = 0xff;
    memcpy(mgid->raw + 12, &ga->s_addr, 4);
    return RDMAX_OK;
}

rdmax_status rdmax_mcast_join(rdmax_ep *ep, const char *group)
{
    rdmax_ctx *ctx = ep->ctx;
    struct in_addr ga, ifa;
    union ibv_gid mgid;
    rdmax_status st = rdmax__mcast_gid(ctx, group, &ga, &mgid);
    if (st != RDMAX_OK)
        return st;
    if (ep->qp->qp_type != IBV_QPT_UD) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "multicast: endpoint qpn 0x%x is not UD", ep->qp->qp_num);
        return RDMAX_ERR_UNSUPPORTED;
    }
    if (rdmax__gid_ipv4(ctx, &ifa)) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "multicast: device %s GID %d is not IPv4-mapped", ctx->attr.name,
                   ctx->attr.gid_index);
        return RDMAX_ERR_UNSUPPORTED;
    }
    if (!ep->mcast && !(ep->mcast = (struct rdmax__mcast *)rdmax__alloc(ctx, sizeof *ep->mcast)))
        return RDMAX_ERR_NO_MEMORY;
    if (ep->mcast->n == RDMAX__MCAST_MAX)
        return RDMAX_ERR_NO_RESOURCE;
    /* The netdev must be a member at the IP level too, or the kernel drops the group's packets before
       they reach rxe; a socket holds that membership for as long as it is open. */
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ip_mreq mr;
    mr.imr_multiaddr = ga;
    mr.imr_interface = ifa;
    if (fd < 0 || setsockopt(fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mr, sizeof mr)) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "multicast: joining %s on device %s: IP_ADD_MEMBERSHIP failed: %s", group,
                   ctx->attr.name, strerror(errno));
        if (fd >= 0)
            close(fd);
        return RDMAX_ERR_IO;
    }
    int rc = ibv_attach_mcast(ep->qp, &mgid, 0);
    if (rc) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "multicast: ibv_attach_mcast(%s) on device %s qpn 0x%x failed: %s", group,
                   ctx->attr.name, ep->qp->qp_num, strerror(rc));
        close(fd);
        return RDMAX_ERR_IO;
    }
    struct rdmax__mcast *m = ep->mcast;
    m->g[m->n].group = ga;
    m->g[m->n].fd = fd;
    m->g[m->n].mgid = mgid;
    m->n++;
    return RDMAX_OK;
}

rdmax_status rdmax_mcast_leave(rdmax_ep *ep, const char *group)
{
    struct in_addr ga;
    union ibv_gid mgid;
    rdmax_status st = rdmax__mcast_gid(ep->ctx, group, &ga, &mgid);
    if (st != RDMAX_OK)
        return st;
    struct rdmax__mcast *m = ep->mcast;
    for (uint32_t i = 0; m && i < m->n; i++) {
        if (m->g[i].group.s_addr != ga.s_addr)
            continue;
        int rc = ibv_detach_mcast(ep->qp, &m->g[i].mgid, 0);
        close(m->g[i].fd);  /* closing the socket leaves the IP group */
        m->g[i] = m->g[--m->n];
        if (rc) {
            rdmax__log(ep->ctx, RDMAX_LOG_ERROR, "multicast: ibv_detach_mcast(%s) failed: %s", group, strerror(rc));
            return RDMAX_ERR_IO;
        }
        return RDMAX_OK;
    }
    rdmax__log(ep->ctx, RDMAX_LOG_ERROR, "multicast: endpoint has not joined %s", group);
    return RDMAX_ERR_INVALID_PARAM;
}

static void rdmax__ud_ep_cleanup(rdmax_ep *ep)
{
    struct rdmax__mcast *m = ep->mcast;
    for (uint32_t i = 0; m && i < m->n; i++)
        close(m->g[i].fd);  /* the QP is gone: its attachments went with it */
    rdmax__free(ep->ctx, m);
    ep->mcast = NULL;
}

rdmax_status rdmax_mcast_ep_create(rdmax_ctx *ctx, const rdmax_ep_desc *desc, const char *group, rdmax_ep **out)
{
    struct in_addr ga;
    union ibv_gid mgid;
    rdmax_status st = rdmax__mcast_gid(ctx, group, &ga, &mgid);
    if (st != RDMAX_OK)
        return st;
    rdmax_ep_desc d;
    if (desc)
        d = *desc;
    else
        memset(&d, 0, sizeof d);
    d.transport = RDMAX_TRANSPORT_ID_UD;
    if ((st = rdmax_ep_create(ctx, &d, out)) != RDMAX_OK)
        return st;
    rdmax_conn_info r;
    memset(&r, 0, sizeof r);
    r.transport = RDMAX_TRANSPORT_ID_UD;
    r.mtu = (uint8_t)ctx->attr.active_mtu;
    r.qpn = 0xffffff;  /* the multicast QPN */
    r.qkey = RDMAX_UD_QKEY;
    r.recv_size = ctx->attr.mtu_bytes + RDMAX_UD_GRH;
    memcpy(r.gid, mgid.raw, 16);
    snprintf((*out)->peer, sizeof (*out)->peer, "%s", group);
    if ((st = rdmax__ud_connect(*out, &r)) != RDMAX_OK) {
        rdmax_ep_destroy(*out);
        *out = NULL;
    }
    return st;
}
#endif /* RDMAX__HAS_UD */

/* >>rc =============================================================================================== */
static uint32_t rdmax__pow2(uint32_t v)
{
    uint32_t p = 1;
    while (p < v)
        p <<= 1;
    return p;
}

static void rdmax__ep_desc_defaults(rdmax_ctx *ctx, const rdmax_ep_desc *in, rdmax_ep_desc *d)
{
    if (in)
        *d = *in;
    else
        memset(d, 0, sizeof *d);
    if (!d->sq_depth)
        d->sq_depth = 256;
    d->sq_depth = rdmax__pow2(d->sq_depth);
    if (d->sq_depth > ctx->attr.max_qp_wr)
        d->sq_depth = ctx->attr.max_qp_wr;
    if (!d->rq_depth)
        d->rq_depth = 128;
    if (d->rq_depth < 32)
        d->rq_depth = 32;  /* reposts go in batches of 16: keep at least two batches */
    if (d->rq_depth > ctx->attr.max_qp_wr)
        d->rq_depth = ctx->attr.max_qp_wr;
    if (!d->recv_size)
        d->recv_size = 4096;
    if (!d->signal_interval)
        d->signal_interval = 64;
    if (d->signal_interval > d->sq_depth / 2)
        d->signal_interval = d->sq_depth / 2 ? d->sq_depth / 2 : 1;
    if (!d->max_inline || d->max_inline > ctx->attr.max_inline)
        d->max_inline = ctx->attr.max_inline;
    if (!d->timeout)
        d->timeout = 14;
    if (!d->retry_cnt)
        d->retry_cnt = 6;  /* rxe treats 7 as "retry forever": a vanished peer would never be reported */
    if (d->retry_cnt > 7)
        d->retry_cnt = 7;
    if (!d->rnr_retry)
        d->rnr_retry = 6;
    if (d->rnr_retry > 7)
        d->rnr_retry = 7;
    if (!d->min_rnr_timer)
        d->min_rnr_timer = 12;
    if (!d->max_rd_atomic || d->max_rd_atomic > ctx->attr.max_qp_rd_atom)
        d->max_rd_atomic = (uint8_t)(ctx->attr.max_qp_rd_atom > 255 ? 255 : ctx->attr.max_qp_rd_atom);
}

#define RDMAX__RECV_BATCH 16

static rdmax_status rdmax__post_recvs(rdmax_ep *ep, uint32_t n)
{
    struct ibv_recv_wr wr[RDMAX__RECV_BATCH], *bad;
    struct ibv_sge sge[RDMAX__RECV_BATCH];
    while (n > 0) {
        uint32_t k = n < RDMAX__RECV_BATCH ? n : RDMAX__RECV_BATCH;
        for (uint32_t i = 0; i < k; i++) {
            uint32_t idx = ep->rq_free[--ep->rq_unposted];
            sge[i].addr = (uintptr_t)(ep->rbufs + (size_t)idx * ep->recv_size);
            sge[i].length = ep->recv_size;
            sge[i].lkey = ep->rmr->lkey;
            wr[i].wr_id = ep->wr_id_base | RDMAX__WR_RECV | idx;
            wr[i].sg_list = &sge[i];
            wr[i].num_sge = 1;
            wr[i].next = i + 1 < k ? &wr[i + 1] : NULL;
        }
        ep->ctx->cnt.recv_post_calls++;
        int rc = ibv_post_recv(ep->qp, wr, &bad);
        if (rc) {
            /* return the ones that were not posted to the free list */
            for (struct ibv_recv_wr *w = bad; w; w = w->next)
                ep->rq_free[ep->rq_unposted++] = (uint32_t)(w->wr_id & RDMAX__WR_SLOT_MASK);
            ep->last_errno = rc;
            return RDMAX_ERR_IO;
        }
        n -= k;
    }
    return RDMAX_OK;
}

static rdmax_status rdmax__ep_alloc(rdmax_ctx *ctx, const rdmax_ep_desc *desc, enum ibv_qp_type type, rdmax_ep **out)
{
    *out = NULL;
    uint32_t idx;
    for (idx = 0; idx < ctx->desc.max_eps && ctx->eps[idx].ep; idx++)
        ;
    if (idx == ctx->desc.max_eps) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "device %s: all %u endpoint slots in use (rdmax_ctx_desc.max_eps)",
                   ctx->attr.name, ctx->desc.max_eps);
        return RDMAX_ERR_NO_RESOURCE;
    }
    rdmax_ep *ep = (rdmax_ep *)rdmax__alloc(ctx, sizeof *ep);
    if (!ep)
        return RDMAX_ERR_NO_MEMORY;
    ep->ctx = ctx;
    rdmax__ep_desc_defaults(ctx, desc, &ep->desc);
    rdmax_ep_desc *d = &ep->desc;
    rdmax_status st = RDMAX_ERR_NO_MEMORY;
    ep->sq_mask = d->sq_depth - 1;
    ep->sq_avail = d->sq_depth;
    ep->signal_interval = d->signal_interval;
    ep->max_inline = d->max_inline;
    ep->rd_avail = d->max_rd_atomic;
    ep->recv_cb = d->recv_cb;
    ep->user = d->user;
    ep->rq_depth = d->rq_depth;
    ep->recv_size = d->recv_size;
    ep->slots = (rdmax__slot *)rdmax__alloc(ctx, d->sq_depth * sizeof *ep->slots);
    ep->rq_free = (uint32_t *)rdmax__alloc(ctx, d->rq_depth * sizeof *ep->rq_free);
    size_t rbytes = (size_t)d->rq_depth * d->recv_size;
    ep->rbufs = (char *)rdmax_numa_alloc(ctx, rbytes);
    ep->inl_stage = (char *)rdmax__alloc(ctx, (size_t)RDMAX_BATCH_MAX * (d->max_inline ? d->max_inline : 1));
    if (!ep->slots || !ep->rq_free || !ep->rbufs || !ep->inl_stage)
        goto fail;
    ep->rmr = ibv_reg_mr(ctx->pd, ep->rbufs, rbytes, IBV_ACCESS_LOCAL_WRITE);
    if (!ep->rmr) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "device %s: ibv_reg_mr of %zu receive bytes failed: %s", ctx->attr.name,
                   rbytes, strerror(errno));
        st = RDMAX_ERR_IO;
        goto fail;
    }
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof qa);
    qa.send_cq = ctx->scq;
    qa.recv_cq = ctx->rcq;
    qa.qp_type = type;
    qa.cap.max_send_wr = d->sq_depth;
    qa.cap.max_recv_wr = d->rq_depth;
    qa.cap.max_send_sge = ctx->attr.max_sge < RDMAX_MAX_SGE ? ctx->attr.max_sge : RDMAX_MAX_SGE;
    qa.cap.max_recv_sge = 1;
    qa.cap.max_inline_data = d->max_inline;
    qa.sq_sig_all = 0;
    ep->qp = ibv_create_qp(ctx->pd, &qa);
    if (!ep->qp) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "device %s: ibv_create_qp(%s, sq %u, rq %u, inline %u) failed: %s",
                   ctx->attr.name, type == IBV_QPT_RC ? "RC" : "UD", d->sq_depth, d->rq_depth, d->max_inline,
                   strerror(errno));
        st = RDMAX_ERR_IO;
        goto fail;
    }
    ctx->eps[idx].ep = ep;
    ctx->eps[idx].gen++;
    ctx->n_eps++;
    ep->wr_id_base = (uint64_t)ctx->eps[idx].gen << 48 | (uint64_t)idx << 32;
    for (uint32_t i = 0; i < d->rq_depth; i++)
        ep->rq_free[i] = i;
    ep->rq_unposted = d->rq_depth;
    for (uint32_t i = 0; i < RDMAX_BATCH_MAX; i++)
        ep->wr[i].sg_list = ep->sge[i];
    snprintf(ep->peer, sizeof ep->peer, "(not connected)");
    *out = ep;
    return RDMAX_OK;
fail:
    if (ep->rmr)
        ibv_dereg_mr(ep->rmr);
    rdmax_numa_free(ctx, ep->rbufs, rbytes);
    rdmax__free(ctx, ep->slots);
    rdmax__free(ctx, ep->rq_free);
    rdmax__free(ctx, ep->inl_stage);
    rdmax__free(ctx, ep);
    return st;
}

static rdmax_status rdmax__modify(rdmax_ep *ep, struct ibv_qp_attr *a, int mask, const char *what)
{
    int rc = ibv_modify_qp(ep->qp, a, mask);
    if (rc) {
        rdmax__log(ep->ctx, RDMAX_LOG_ERROR, "device %s port %u, endpoint qpn 0x%x peer %s: ibv_modify_qp(%s) "
                   "failed: %s", ep->ctx->attr.name, ep->ctx->attr.port, ep->qp->qp_num, ep->peer, what,
                   strerror(rc));
        return RDMAX_ERR_IO;
    }
    return RDMAX_OK;
}

static uint8_t rdmax__ep_transport(const rdmax_ep_desc *d)
{
    if (d && d->transport)
        return d->transport;
    return RDMAX__HAS_RC ? RDMAX_TRANSPORT_ID_RC : RDMAX_TRANSPORT_ID_UD;
}

rdmax_status rdmax_ep_create(rdmax_ctx *ctx, const rdmax_ep_desc *desc, rdmax_ep **out)
{
    uint8_t t = rdmax__ep_transport(desc);
    if ((t == RDMAX_TRANSPORT_ID_RC && !RDMAX__HAS_RC) || (t == RDMAX_TRANSPORT_ID_UD && !RDMAX__HAS_UD) ||
        (t != RDMAX_TRANSPORT_ID_RC && t != RDMAX_TRANSPORT_ID_UD)) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "endpoint transport %u was not selected at compile time", t);
        return RDMAX_ERR_UNSUPPORTED;
    }
    rdmax_ep_desc d;
    if (desc)
        d = *desc;
    else
        memset(&d, 0, sizeof d);
    d.transport = t;
    if (t == RDMAX_TRANSPORT_ID_UD)  /* a UD receive is at most one MTU, behind a 40-byte GRH */
        d.recv_size = ctx->attr.mtu_bytes + RDMAX_UD_GRH;
    rdmax_status st = rdmax__ep_alloc(ctx, &d, t == RDMAX_TRANSPORT_ID_RC ? IBV_QPT_RC : IBV_QPT_UD, out);
    if (st != RDMAX_OK)
        return st;
    rdmax_ep *ep = *out;
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = ctx->attr.port;
    if (t == RDMAX_TRANSPORT_ID_RC) {
        a.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
        st = rdmax__modify(ep, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT");
    } else {
        a.qkey = RDMAX_UD_QKEY;
        st = rdmax__modify(ep, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, "INIT");
        if (st == RDMAX_OK) {
            memset(&a, 0, sizeof a);
            a.qp_state = IBV_QPS_RTR;
            st = rdmax__modify(ep, &a, IBV_QP_STATE, "RTR");
        }
        if (st == RDMAX_OK) {
            a.qp_state = IBV_QPS_RTS;
            a.sq_psn = (ep->qp->qp_num * 2654435761u) & 0xffffff;
            st = rdmax__modify(ep, &a, IBV_QP_STATE | IBV_QP_SQ_PSN, "RTS");
        }
    }
    if (st == RDMAX_OK)
        st = rdmax__post_recvs(ep, ep->rq_unposted);
    if (st != RDMAX_OK) {
        rdmax_ep_destroy(ep);
        *out = NULL;
    }
    return st;
}

void rdmax_ep_local_info(const rdmax_ep *ep, rdmax_conn_info *info)
{
    memset(info, 0, sizeof *info);
    info->transport = ep->qp->qp_type == IBV_QPT_UD ? RDMAX_TRANSPORT_ID_UD : RDMAX_TRANSPORT_ID_RC;
    info->mtu = (uint8_t)ep->ctx->attr.active_mtu;
    info->qpn = ep->qp->qp_num;
    /* The PSN is derived from the QPN so both sides can be checked in a log; any 24-bit value works. */
    info->psn = (ep->qp->qp_num * 2654435761u) & 0xffffff;
    memcpy(info->gid, ep->ctx->attr.gid.raw, 16);
    info->recv_size = ep->recv_size;
#if RDMAX__HAS_UD
    if (info->transport == RDMAX_TRANSPORT_ID_UD)
        info->qkey = RDMAX_UD_QKEY;
#endif
    if (ep->desc.expose) {
        info->buf.addr = (uintptr_t)ep->desc.expose->addr;
        info->buf.len = ep->desc.expose->len;
        info->buf.rkey = ep->desc.expose->rkey;
    }
}

rdmax_status rdmax_ep_connect_info(rdmax_ep *ep, const rdmax_conn_info *r)
{
    rdmax_ctx *ctx = ep->ctx;
    rdmax_conn_info me;
    rdmax_ep_local_info(ep, &me);
    if (r->transport != me.transport) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "endpoint qpn 0x%x peer %s: peer's transport %u differs from ours %u",
                   ep->qp->qp_num, ep->peer, r->transport, me.transport);
        return RDMAX_ERR_OOB_TRANSPORT;
    }
#if RDMAX__HAS_UD
    if (me.transport == RDMAX_TRANSPORT_ID_UD)
        return rdmax__ud_connect(ep, r);
#endif
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    /* Both sides use the smaller MTU, so a port with a smaller MTU never sees oversized packets. */
    a.path_mtu = (enum ibv_mtu)(r->mtu < me.mtu ? r->mtu : me.mtu);
    a.dest_qp_num = r->qpn;
    a.rq_psn = r->psn;
    a.max_dest_rd_atomic = ep->desc.max_rd_atomic;
    a.min_rnr_timer = ep->desc.min_rnr_timer;
    a.ah_attr.port_num = ctx->attr.port;
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, r->gid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)ctx->attr.gid_index;
    a.ah_attr.grh.hop_limit = 64;
    rdmax_status st = rdmax__modify(ep, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER, "RTR");
    if (st != RDMAX_OK)
        return st;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = me.psn;
    a.timeout = ep->desc.timeout;
    a.retry_cnt = ep->desc.retry_cnt;
    a.rnr_retry = ep->desc.rnr_retry;
    a.max_rd_atomic = ep->desc.max_rd_atomic;
    st = rdmax__modify(ep, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                       IBV_QP_MAX_QP_RD_ATOMIC, "RTS");
    if (st != RDMAX_OK)
        return st;
    ep->remote = r->buf;
    ep->peer_recv_size = r->recv_size;
    ep->peer_qpn = r->qpn;
    ep->state = RDMAX_EP_CONNECTED;
    rdmax__log(ctx, RDMAX_LOG_DEBUG, "device %s: endpoint qpn 0x%x connected to peer %s qpn 0x%x, mtu %u",
               ctx->attr.name, ep->qp->qp_num, ep->peer, r->qpn,
               rdmax__mtu_bytes((enum ibv_mtu)(r->mtu < me.mtu ? r->mtu : me.mtu)));
    return RDMAX_OK;
}

rdmax_status rdmax_ep_create_pair(rdmax_ctx *ctx, const rdmax_ep_desc *desc, rdmax_ep **a, rdmax_ep **b)
{
    *a = *b = NULL;
    rdmax_status st = rdmax_ep_create(ctx, desc, a);
    if (st == RDMAX_OK)
        st = rdmax_ep_create(ctx, desc, b);
    if (st == RDMAX_OK) {
        rdmax_conn_info ia, ib;
        rdmax_ep_local_info(*a, &ia);
        rdmax_ep_local_info(*b, &ib);
        snprintf((*a)->peer, sizeof (*a)->peer, "loopback");
        snprintf((*b)->peer, sizeof (*b)->peer, "loopback");
        st = rdmax_ep_connect_info(*a, &ib);
        if (st == RDMAX_OK)
            st = rdmax_ep_connect_info(*b, &ia);
    }
    if (st != RDMAX_OK) {
        rdmax_ep_destroy(*a);
        rdmax_ep_destroy(*b);
        *a = *b = NULL;
    }
    return st;
}

static void rdmax__complete(rdmax_comp *c, rdmax_status st)
{
    c->status = st;
    if (c->cb)
        c->cb(c, st);
    else
        c->done = 1;
}

/* Complete slots from the tail up to and including `upto` (an unsignaled request is covered by the next
   signaled one: RC completes in order). */
static void rdmax__ep_retire(rdmax_ep *ep, uint32_t upto, rdmax_status st)
{
    rdmax_ctx *ctx = ep->ctx;
    for (;;) {
        uint32_t slot = ep->sq_tail & ep->sq_mask;
        rdmax__slot *s = &ep->slots[slot];
        ep->sq_tail++;
        ep->sq_avail++;
        ctx->scq_credits++;
        ctx->cnt.completed[s->op]++;
        if (s->op == RDMAX_OP_GET || s->op == RDMAX_OP_FADD || s->op == RDMAX_OP_CSWAP)
            ep->rd_avail++;
        rdmax_comp *c = s->comp;
        s->comp = NULL;
        if (c)
            rdmax__complete(c, st);
        if (slot == upto)
            break;
    }
}

static rdmax_status rdmax__wc_status(enum ibv_wc_status s)
{
    switch (s) {
    case IBV_WC_SUCCESS: return RDMAX_OK;
    case IBV_WC_WR_FLUSH_ERR: return RDMAX_ERR_FLUSHED;
    case IBV_WC_REM_ACCESS_ERR: return RDMAX_ERR_REMOTE_ACCESS;
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR: return RDMAX_ERR_REMOTE_OP;
    case IBV_WC_RETRY_EXC_ERR: return RDMAX_ERR_RETRY_EXCEEDED;
    case IBV_WC_RNR_RETRY_EXC_ERR: return RDMAX_ERR_RNR_RETRY_EXCEEDED;
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_LOC_QP_OP_ERR:
    case IBV_WC_LOC_PROT_ERR: return RDMAX_ERR_LOCAL;
    default: return RDMAX_ERR_COMPLETION;
    }
}

/* The first error of an endpoint is logged once, with everything needed to find it; later ones (the
   flush that follows) are only counted. */
static void rdmax__ep_fail(rdmax_ep *ep, const struct ibv_wc *wc, const rdmax__slot *s)
{
    rdmax_ctx *ctx = ep->ctx;
    if (ep->state == RDMAX_EP_ERROR)
        return;
    ep->state = RDMAX_EP_ERROR;
    ep->last_wc_status = wc->status;
    ctx->cnt.ep_errors++;
    rdmax__log(ctx, RDMAX_LOG_ERROR, "device %s port %u, endpoint qpn 0x%x peer %s qpn 0x%x: %s of %u bytes to "
               "remote address 0x%llx failed: %s (wc status %d, vendor error 0x%x)", ctx->attr.name, ctx->attr.port,
               ep->qp->qp_num, ep->peer, ep->peer_qpn, s ? rdmax_op_str((rdmax_op)s->op) : "receive",
               s ? s->len : 0, s ? (unsigned long long)s->raddr : 0ull, ibv_wc_status_str(wc->status), wc->status,
               wc->vendor_err);
}

/* wr_id = generation << 48 | endpoint index << 32 | receive bit | slot. A completion whose endpoint
   slot is empty or reused (a stale or flushed completion of a destroyed endpoint) is counted and dropped,
   never dereferenced. */
static rdmax_ep *rdmax__wr_ep(rdmax_ctx *ctx, uint64_t wr_id)
{
    uint32_t idx = (uint32_t)(wr_id >> 32) & 0xffff;
    uint16_t gen = (uint16_t)(wr_id >> 48);
    if (rdmax_unlikely(idx >= ctx->desc.max_eps || ctx->eps[idx].ep == NULL || ctx->eps[idx].gen != gen)) {
        ctx->cnt.stale_wr_ids++;
        return NULL;
    }
    return ctx->eps[idx].ep;
}

int rdmax__poll_send(rdmax_ctx *ctx)
{
    int n = ibv_poll_cq(ctx->scq, 16, ctx->wc);
    ctx->cnt.polls++;
    if (n <= 0) {
        ctx->cnt.empty_polls++;
        return 0;
    }
    ctx->cnt.cqes += (uint64_t)n;
    for (int i = 0; i < n; i++) {
        const struct ibv_wc *wc = &ctx->wc[i];
        rdmax_ep *ep = rdmax__wr_ep(ctx, wc->wr_id);
        if (!ep)
            continue;
        uint32_t slot = (uint32_t)(wc->wr_id & RDMAX__WR_SLOT_MASK);
        uint32_t outstanding = ep->sq_head - ep->sq_tail;
        if (rdmax_unlikely(slot > ep->sq_mask || ((slot - ep->sq_tail) & ep->sq_mask) >= outstanding)) {
            ctx->cnt.stale_wr_ids++;
            continue;
        }
        if (rdmax_likely(wc->status == IBV_WC_SUCCESS)) {
            rdmax__ep_retire(ep, slot, RDMAX_OK);
            continue;
        }
        if (wc->status == IBV_WC_WR_FLUSH_ERR) {
            ctx->cnt.flushed_cqes++;
        } else {
            ctx->cnt.err_cqes++;
            rdmax__ep_fail(ep, wc, &ep->slots[slot]);
        }
        /* Requests before this one were covered by nothing else; with an error they may have failed too,
           so they complete with this status. */
        rdmax__ep_retire(ep, slot, wc->status == IBV_WC_WR_FLUSH_ERR ? RDMAX_ERR_FLUSHED : rdmax__wc_status(wc->status));
    }
    return n;
}

int rdmax__poll_recv(rdmax_ctx *ctx)
{
    struct ibv_wc wc[16];
    int n = ibv_poll_cq(ctx->rcq, 16, wc);
    if (n <= 0)
        return 0;
    ctx->cnt.cqes += (uint64_t)n;
    for (int i = 0; i < n; i++) {
        rdmax_ep *ep = rdmax__wr_ep(ctx, wc[i].wr_id);
        if (!ep)
            continue;
        uint32_t idx = (uint32_t)(wc[i].wr_id & RDMAX__WR_SLOT_MASK);
        if (rdmax_unlikely(!(wc[i].wr_id & RDMAX__WR_RECV) || idx >= ep->rq_depth)) {
            ctx->cnt.stale_wr_ids++;
            continue;
        }
        if (rdmax_unlikely(wc[i].status != IBV_WC_SUCCESS)) {
            if (wc[i].status == IBV_WC_WR_FLUSH_ERR) {
                ctx->cnt.recv_flushed++;
            } else {
                ctx->cnt.err_cqes++;
                rdmax__ep_fail(ep, &wc[i], NULL);
            }
            continue;  /* the buffer is not reposted: the QP is in error */
        }
        char *data = ep->rbufs + (size_t)idx * ep->recv_size;
        size_t len = wc[i].byte_len;
#if RDMAX__HAS_UD
        if (ep->qp->qp_type == IBV_QPT_UD) {
            if (rdmax_unlikely(len < RDMAX_UD_GRH)) {
                ctx->cnt.recv_drops++;
                goto recycle;
            }
            data += RDMAX_UD_GRH;  /* UD receives carry a 40-byte GRH in front */
            len -= RDMAX_UD_GRH;
            if (len == 0 && wc[i].src_qp == ep->qp->qp_num)  /* our own flush marker */
                goto recycle;
        }
#endif
        ctx->cnt.recv_msgs++;
        ctx->cnt.recv_bytes += len;
        if (ep->recv_cb)
            ep->recv_cb(ep, data, len, ep->user);
        else
            ctx->cnt.recv_drops++;
        /* The callback may have destroyed the endpoint. */
        if (rdmax__wr_ep(ctx, wc[i].wr_id) != ep) {
            ctx->cnt.stale_wr_ids--;
            continue;
        }
#if RDMAX__HAS_UD
    recycle:
#endif
        ep->rq_free[ep->rq_unposted++] = idx;
        if (ep->rq_unposted >= RDMAX__RECV_BATCH && ep->state != RDMAX_EP_ERROR)
            rdmax__post_recvs(ep, ep->rq_unposted);
    }
    return n;
}

rdmax_status rdmax__post_chain(rdmax_ep *ep)
{
    struct ibv_send_wr *bad = NULL;
    uint32_t n = ep->batch_n;
    ep->wr[n - 1].next = NULL;
    ep->batch_n = 0;
    ep->ctx->cnt.post_calls++;
    int rc = ibv_post_send(ep->qp, ep->wr, &bad);
    if (rdmax_unlikely(rc != 0)) {
        /* Take back the requests that were not posted (from `bad` on), newest first. */
        uint32_t first_bad = (uint32_t)(bad ? bad - ep->wr : 0);
        for (uint32_t i = n; i > first_bad; i--) {
            rdmax__slot *s = &ep->slots[(ep->sq_head - 1) & ep->sq_mask];
            ep->sq_head--;
            ep->sq_avail++;
            ep->ctx->scq_credits++;
            ep->ctx->cnt.posted[s->op]--;
            ep->ctx->cnt.bytes[s->op] -= s->len;
            if (s->op == RDMAX_OP_GET || s->op == RDMAX_OP_FADD || s->op == RDMAX_OP_CSWAP)
                ep->rd_avail++;
            if (s->comp)
                rdmax__complete(s->comp, RDMAX_ERR_IO);
            s->comp = NULL;
        }
        ep->last_errno = rc;
        return RDMAX_ERR_IO;
    }
    return RDMAX_OK;
}

rdmax_status rdmax_ep_error(const rdmax_ep *ep)
{
    return ep->state == RDMAX_EP_ERROR ? rdmax__wc_status((enum ibv_wc_status)ep->last_wc_status) : RDMAX_OK;
}

rdmax_status rdmax_ep_flush(rdmax_ep *ep, int timeout_ms)
{
    rdmax_ctx *ctx = ep->ctx;
    if (ep->batch_n && rdmax_batch_end(ep) != RDMAX_OK)
        return RDMAX_ERR_IO;
    if (ep->sq_head == ep->sq_tail)
        return rdmax_ep_error(ep);
    /* If the newest request is unsignaled, nothing would ever report it: add a signaled zero-length
       write behind it (never a zero-length read: that has crashed rxe). */
    rdmax__slot *last = &ep->slots[(ep->sq_head - 1) & ep->sq_mask];
    if (!last->signaled && ep->state == RDMAX_EP_CONNECTED) {
        int64_t deadline = rdmax__now_ms() + timeout_ms;
        rdmax_status st;
        while ((st = rdmax__ep_check(ep)) == RDMAX_ERR_NO_RESOURCE && rdmax__now_ms() < deadline)
            rdmax_progress(ctx);
        if (st == RDMAX_OK) {
            struct ibv_send_wr *wr;
#if RDMAX__HAS_UD
            if (ep->qp->qp_type == IBV_QPT_UD) {
                /* UD has no RDMA write: send an empty datagram to our own QP; the receive path knows it
                   (zero bytes from our own QPN) and drops it without counting a drop. */
                wr = rdmax__ep_wr(ep, IBV_WR_SEND);
                wr->wr.ud.ah = rdmax__ah_get(ctx, ctx->attr.gid.raw);
                wr->wr.ud.remote_qpn = ep->qp->qp_num;
                wr->wr.ud.remote_qkey = RDMAX_UD_QKEY;
                if (!wr->wr.ud.ah)
                    return RDMAX_ERR_IO;
            } else
#endif
            {
                wr = rdmax__ep_wr(ep, IBV_WR_RDMA_WRITE);
                wr->wr.rdma.remote_addr = ep->remote.addr;
                wr->wr.rdma.rkey = ep->remote.rkey;
            }
            wr->num_sge = 0;
            uint32_t saved = ep->signal_interval;
            ep->signal_interval = 1;  /* force this one signaled */
            st = rdmax__ep_post(ep, wr, NULL, RDMAX_OP_FLUSH, 0, ep->remote.addr);
            ep->signal_interval = saved;
        }
    }
    int64_t deadline = rdmax__now_ms() + timeout_ms;
    while (ep->sq_head != ep->sq_tail) {
        if (rdmax__now_ms() > deadline) {
            rdmax__log(ctx, RDMAX_LOG_ERROR, "device %s, endpoint qpn 0x%x peer %s: flush timed out after %d ms "
                       "with %u operations outstanding", ctx->attr.name, ep->qp->qp_num, ep->peer, timeout_ms,
                       ep->sq_head - ep->sq_tail);
            return RDMAX_ERR_TIMEOUT;
        }
        rdmax_progress(ctx);
    }
    return rdmax_ep_error(ep);
}

void rdmax_ep_destroy(rdmax_ep *ep)
{
    if (!ep)
        return;
    rdmax_ctx *ctx = ep->ctx;
    /* Operations in flight complete with CANCELED now; their completions, if any arrive, find the
       endpoint's table slot empty or of another generation and are dropped. */
    while (ep->sq_head != ep->sq_tail)
        rdmax__ep_retire(ep, (ep->sq_head - 1) & ep->sq_mask, RDMAX_ERR_CANCELED);
    uint32_t idx = (uint32_t)(ep->wr_id_base >> 32) & 0xffff;
    if (ep->qp && ctx->eps[idx].ep == ep) {
        ctx->eps[idx].ep = NULL;
        ctx->n_eps--;
    }
    if (ep->qp)
        ibv_destroy_qp(ep->qp);
#if RDMAX__HAS_UD
    rdmax__ud_ep_cleanup(ep);
#endif
    if (ep->rmr)
        ibv_dereg_mr(ep->rmr);
    rdmax_numa_free(ctx, ep->rbufs, (size_t)ep->rq_depth * ep->recv_size);
    rdmax__free(ctx, ep->slots);
    rdmax__free(ctx, ep->rq_free);
    rdmax__free(ctx, ep->inl_stage);
    rdmax__free(ctx, ep);
}

/* >>oob ============================================================================================== */
struct rdmax_listener {
    rdmax_ctx *ctx;
    int fd;
    uint16_t port;
};

static void rdmax__sockaddr_str(const struct sockaddr *sa, char *out, size_t n)
{
    char host[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *s4 = (const struct sockaddr_in *)(const void *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
        port = ntohs(s4->sin_port);
        snprintf(out, n, "%s:%u", host, port);
    } else {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)(const void *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
        port = ntohs(s6->sin6_port);
        snprintf(out, n, "[%s]:%u", host, port);
    }
}

rdmax_status rdmax_listen(rdmax_ctx *ctx, const char *host, uint16_t port, rdmax_listener **out)
{
    *out = NULL;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = host ? AF_UNSPEC : AF_INET6;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "listen: cannot resolve %s: %s", host ? host : "(any)", gai_strerror(rc));
        return RDMAX_ERR_INVALID_PARAM;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1, zero = 0;
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (res->ai_family == AF_INET6)  /* one socket serves IPv4 and IPv6 */
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    }
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 16)) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "listen: %s port %u: %s", host ? host : "(any)", port, strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(res);
        return RDMAX_ERR_IO;
    }
    freeaddrinfo(res);
    rdmax_listener *l = (rdmax_listener *)rdmax__alloc(ctx, sizeof *l);
    if (!l) {
        close(fd);
        return RDMAX_ERR_NO_MEMORY;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    l->port = ss.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&ss)->sin_port)
                                      : ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    l->ctx = ctx;
    l->fd = fd;
    *out = l;
    return RDMAX_OK;
}

uint16_t rdmax_listener_port(const rdmax_listener *l)
{
    return l->port;
}

void rdmax_listener_close(rdmax_listener *l)
{
    if (!l)
        return;
    close(l->fd);
    rdmax__free(l->ctx, l);
}

/* Create an endpoint, trade records over fd, connect, confirm. Used by accept and connect. */
static rdmax_status rdmax__ep_handshake(rdmax_ctx *ctx, int fd, const char *peer, const rdmax_ep_desc *desc,
                                        rdmax_ep **out, int timeout_ms)
{
    rdmax_ep *ep;
    rdmax_status st = rdmax_ep_create(ctx, desc, &ep);
    if (st != RDMAX_OK)
        return st;
    snprintf(ep->peer, sizeof ep->peer, "%s", peer);
    rdmax_conn_info me, them;
    char why[200];
    rdmax_ep_local_info(ep, &me);
    st = rdmax_oob_exchange(fd, &me, &them, timeout_ms, why, sizeof why);
    if (st == RDMAX_OK)
        st = rdmax_ep_connect_info(ep, &them);
    else
        rdmax__log(ctx, RDMAX_LOG_ERROR, "device %s, peer %s: %s", ctx->attr.name, peer, why);
    if (st == RDMAX_OK && (st = rdmax__oob_sync(fd, timeout_ms, why, sizeof why)) != RDMAX_OK)
        rdmax__log(ctx, RDMAX_LOG_ERROR, "device %s, peer %s: %s", ctx->attr.name, peer, why);
    if (st != RDMAX_OK) {
        rdmax_ep_destroy(ep);
        return st;
    }
    *out = ep;
    return RDMAX_OK;
}

rdmax_status rdmax_accept(rdmax_listener *l, const rdmax_ep_desc *desc, rdmax_ep **out, int timeout_ms)
{
    rdmax_ctx *ctx = l->ctx;
    *out = NULL;
    struct pollfd p = {l->fd, POLLIN, 0};
    int r = poll(&p, 1, timeout_ms);
    if (r == 0) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "accept: no client on port %u within %d ms", l->port, timeout_ms);
        return RDMAX_ERR_TIMEOUT;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    int fd = r < 0 ? -1 : accept4(l->fd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
    if (fd < 0) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "accept on port %u: %s", l->port, strerror(errno));
        return RDMAX_ERR_IO;
    }
    char peer[64];
    rdmax__sockaddr_str((struct sockaddr *)&ss, peer, sizeof peer);
    rdmax_status st = rdmax__ep_handshake(ctx, fd, peer, desc, out, timeout_ms);
    close(fd);
    return st;
}

rdmax_status rdmax_connect(rdmax_ctx *ctx, const char *host, uint16_t port, const rdmax_ep_desc *desc,
                           rdmax_ep **out, int timeout_ms)
{
    *out = NULL;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "connect: cannot resolve %s: %s", host, gai_strerror(rc));
        return RDMAX_ERR_CONNECT;
    }
    int64_t deadline = rdmax__now_ms() + timeout_ms;
    int fd = -1, err = 0;
    char peer[64] = "?";
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            err = errno;
            continue;
        }
        rdmax__sockaddr_str(ai->ai_addr, peer, sizeof peer);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) && errno != EINPROGRESS) {
            err = errno;
            close(fd);
            fd = -1;
            continue;
        }
        struct pollfd p = {fd, POLLOUT, 0};
        int64_t left = deadline - rdmax__now_ms();
        socklen_t el = sizeof err;
        if (left <= 0 || poll(&p, 1, (int)left) <= 0) {
            err = ETIMEDOUT;
        } else {
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
        }
        if (err) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, "connect: %s port %u (%s): %s", host, port, peer, strerror(err));
        return err == ETIMEDOUT ? RDMAX_ERR_TIMEOUT : RDMAX_ERR_CONNECT;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int left = (int)(deadline - rdmax__now_ms());
    rdmax_status st = rdmax__ep_handshake(ctx, fd, peer, desc, out, left > 0 ? left : 1);
    close(fd);
    return st;
}

#ifdef __cplusplus
}
#endif
