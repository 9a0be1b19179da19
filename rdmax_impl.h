/* rdmax_impl.h - the part of rdmax that is compiled once. Do not include this file: define
   RDMAX_IMPLEMENTATION in one .c file and include rdmax.h, which pulls this in.
   Layout: the includes, forward declarations, then one section per part, each opened by a
   "---- >>tag ----" banner (the list is in rdmax.h's CONTENTS); search for the tag. */
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
#include <sys/epoll.h>
#include <sys/resource.h>
#include <pthread.h>
#include <numa.h>
#include <rdma/rdma_cma.h>
#include <malloc.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <ifaddrs.h>
#include <net/if.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The link-time check of the transport selection (see the manual). */
extern const char RDMAX__SELECTION;
const char RDMAX__SELECTION = 1;

/* Immediate data of RC sends: credits returned, and whether the message is only a grant. */
#define RDMAX__IMM_GRANT 0x80000000u
#define RDMAX__IMM_CLOSE 0x40000000u  /* the peer called rdmax_ep_disconnect (a grant too) */
#define RDMAX__IMM_CREDITS 0x3fffffffu
static void rdmax__grant(rdmax_ep *ep);
static int64_t rdmax__now_ms(void);
#define RDMAX__WAIT_STACK 18
static struct pollfd *rdmax__wait_fds(rdmax_ctx *ctx, struct pollfd *stack, nfds_t *n);
static int64_t rdmax__health_ms(const rdmax_ctx *ctx);
static double rdmax__ns_per_tick(void);
static void rdmax__ep_peer_closed(rdmax_ep *ep);
static void rdmax__ep_fail_why(rdmax_ep *ep, rdmax_status err, int wc_status, int kill_qp, const char *fmt, ...);
static void rdmax__dev_release(rdmax_ctx *ctx);
static void rdmax__srq_close(rdmax_ctx *ctx);
static void rdmax__ep_reap(rdmax_ctx *ctx);
#define RDMAX__TICK_MS 100  /* period of the watchdog and keepalive pass */
#define RDMAX__HS_MAX 256   /* rdmax_ctx_desc.handshake_slots' default, for both setup paths */
/* rdma_cm connection setup (>>cm) */
static rdmax_status rdmax__cm_ctx_open(rdmax_ctx *ctx);
static void rdmax__cm_ctx_cleanup(rdmax_ctx *ctx);
static void rdmax__cm_ep_cleanup(rdmax_ep *ep);
static void rdmax__cm_events(rdmax_ctx *ctx);
static void rdmax__cm_hold_tell(rdmax_ctx *ctx);
static rdmax_status rdmax__cm_listen(rdmax_ctx *ctx, const char *host, uint16_t port, rdmax_listener **out);
static rdmax_status rdmax__cm_accept(rdmax_listener *l, const rdmax_ep_desc *desc, rdmax_ep **out, int timeout_ms);
static void rdmax__cm_listener_close(rdmax_listener *l);
static rdmax_status rdmax__cm_connect(rdmax_ctx *ctx, const char *host, uint16_t port, const rdmax_ep_desc *desc,
                                      rdmax_ep **out, int timeout_ms);
static rdmax_status rdmax__ep_set_remote(rdmax_ep *ep, const rdmax_conn_record *r);
static rdmax_status rdmax__ep_set_local(rdmax_ep *ep, const rdmax_rbuf *r, uint32_t n);
#if RDMAX__HAS_UD
static void rdmax__ud_ctx_cleanup(rdmax_ctx *ctx);
static void rdmax__ud_ep_cleanup(rdmax_ep *ep);
static rdmax_status rdmax__ud_connect(rdmax_ep *ep, const rdmax_conn_record *r);
static rdmax_status rdmax__ud_ep_create(rdmax_ctx *ctx, rdmax_ep_desc *d, rdmax_ep **out);
static rdmax_status rdmax__ep_create(rdmax_ctx *ctx, const rdmax_ep_desc *desc, uint8_t t, rdmax_ep **out);
static rdmax_status rdmax__ep_alloc(rdmax_ctx *ctx, const rdmax_ep_desc *desc, enum ibv_qp_type type,
                                    rdmax_ep **out);
static int rdmax__ud_poll_recv(rdmax_ctx *ctx);
static void rdmax__ud_fail_all(rdmax_ctx *ctx, const char *why);
#endif
/* Static functions used above their definitions (in the order of the sections below): */
static void rdmax__rcache_drop(rdmax_rcache *rc, rdmax_rcache_region *r, int invalid);
static void rdmax__rcache_update_over(rdmax_rcache *rc);
static void rdmax__rcache_lock(rdmax_rcache *rc);
static void rdmax__rcache_unlock(rdmax_rcache *rc);
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static rdmax_status rdmax__rcache_fail(rdmax_status st, rdmax_log_item item, const char *fmt, ...);
static void rdmax__recv_drop(rdmax_ep *ep, void *data, size_t len, void *user);
static rdmax_status rdmax__ep_check(rdmax_ep *ep);
static rdmax_status rdmax__ep_post(rdmax_ep *ep, struct ibv_send_wr *wr, rdmax_comp *comp, rdmax_op op, uint32_t len,
                                   uint64_t raddr, struct rdmax_rcache_region *region);
static struct ibv_send_wr *rdmax__ep_wr(rdmax_ep *ep, enum ibv_wr_opcode opcode);
static void rdmax__ep_post_fn(rdmax_ep *ep);
static void rdmax__chain_clean(rdmax_ctx *ctx, uint32_t from, uint32_t to);
static void rdmax__chain_close(rdmax_ctx *ctx, rdmax_ep *ep);
static void rdmax__chain_reset(rdmax_ctx *ctx);
static void rdmax__complete(rdmax_comp *c, rdmax_status st);
static void rdmax__ep_retire(rdmax_ep *ep, uint32_t upto, rdmax_status st);

/* ---- >>strings: status and operation names ------------------------------------------------------- */

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
    static const char *const names[RDMAX_OP__COUNT] = {"send", "put", "get", "fadd", "cswap", "flush", "grant",
                                                               "keepalive", "close", "put_imm", "bind"};
    return (unsigned)op < RDMAX_OP__COUNT ? names[op] : "unknown";
}

/* A port's link layer and a GID's type, for messages. */
static const char *rdmax__link_layer_str(int ll)
{
    return ll == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand" : ll == IBV_LINK_LAYER_ETHERNET ? "Ethernet" : "unknown";
}
static const char *rdmax__gid_type_str(int t)
{
    return t == IBV_GID_TYPE_IB ? "IB" : t == IBV_GID_TYPE_ROCE_V1 ? "RoCE v1" : t == IBV_GID_TYPE_ROCE_V2 ? "RoCE v2"
                                                                                                        : "unknown";
}

/* The index mask of the smallest power of two at least n (n: 1 to 65536): 2^k - 1. */
static uint32_t rdmax__pow2_mask(uint32_t n)
{
    uint32_t m = 0;
    while (m + 1 < n)
        m = m << 1 | 1;
    return m;
}

/* ---- >>alloc: rdmax's own allocations (RDMAX_MALLOC/RDMAX_FREE, the context's allocator) --------- */

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

/* What is wiped must stay wiped (the admission secret, >>admit): a store the compiler cannot drop as dead. */
static void rdmax__wipe(void *p, size_t n)
{
    volatile uint8_t *v = (volatile uint8_t *)p;
    while (n--)
        *v++ = 0;
}

/* ---- >>log: logging: levels, the thread's last error, log items, repeats summarised -------------- */

static const char *const rdmax__level_names[] = {"error", "warn", "info", "debug", "trace"};

/* The calling thread's last error, whatever context logged it: it outlives a failed rdmax_ctx_create. */
static __thread rdmax_log_item rdmax__tls_error_item;
static __thread char rdmax__tls_error[512];

static void rdmax__log_emit(const rdmax_logger *lg, rdmax_log_level lvl, rdmax_log_item item, const char *msg);

static void rdmax__vlog(rdmax_ctx *ctx, const rdmax_logger *lg, rdmax_log_level lvl, rdmax_log_level max,
                        rdmax_log_item item, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (lvl == RDMAX_LOG_ERROR) {
        memcpy(rdmax__tls_error, msg, sizeof rdmax__tls_error);
        rdmax__tls_error_item = item;
        if (ctx) {
            memcpy(ctx->last_error, msg, sizeof ctx->last_error);
            ctx->last_error_item = item;
        }
    }
    if (lvl > max)
        return;
    if (ctx && !rdmax__log_dedupe(ctx, lg, lvl, msg))
        return;  /* repeats the previous message: counted, summarised later */
    rdmax__log_emit(lg, lvl, item, msg);
}

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static void rdmax__log(rdmax_ctx *ctx, rdmax_log_level lvl, rdmax_log_item item, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rdmax__vlog(ctx, ctx ? &ctx->desc.logger : NULL, lvl, ctx ? ctx->log_level : RDMAX_LOG_WARN, item, fmt, ap);
    va_end(ap);
}

const char *rdmax_log_item_str(rdmax_log_item item)
{
    switch (item) {
#define RDMAX__X(id, text) case RDMAX_LOG_ITEM_##id: return text;
        RDMAX__LOG_ITEMS(RDMAX__X)
#undef RDMAX__X
    case RDMAX_LOG_ITEM__COUNT:
        break;
    }
    return "unknown log item";
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

const char *rdmax_ctx_query_last_error(const rdmax_ctx *ctx)
{
    return ctx ? ctx->last_error : rdmax__tls_error;
}

rdmax_log_item rdmax_ctx_query_last_error_item(const rdmax_ctx *ctx)
{
    return ctx ? ctx->last_error_item : rdmax__tls_error_item;
}

/* ---- log dedupe ---- */
static void rdmax__log_emit(const rdmax_logger *lg, rdmax_log_level lvl, rdmax_log_item item, const char *msg)
{
    if (lg && lg->func)
        lg->func(lvl, item, msg, lg->user);
    else
        fprintf(stderr, "rdmax %s: %s\n", rdmax__level_names[lvl], msg);
}

static void rdmax__log_dd_summary(char *out, size_t n, const char *device, uint64_t repeats)
{
    int dev = device && *device;
    snprintf(out, n, "%s%s%slast message repeated %llu time%s", dev ? "device " : "", dev ? device : "",
             dev ? ": " : "", (unsigned long long)repeats, repeats == 1 ? "" : "s");
}

/* The decision, without a clock or a logger (tests drive it with made-up times). Returns bit 1: print
   msg; bit 2: print `summary` (at level *summary_lvl) first. */
#define RDMAX__LOG_DD_PRINT 1
#define RDMAX__LOG_DD_SUMMARY 2
static int rdmax__log_dd_step(struct rdmax__log_dd *dd, const char *device, int lvl, const char *msg,
                              uint64_t now_ns, char *summary, size_t n, int *summary_lvl)
{
    int flags = 0;
    *summary_lvl = dd->lvl;
    if (dd->lvl == lvl && !strncmp(dd->last, msg, sizeof dd->last - 1)) {
        dd->repeats++;
        dd->suppressed++;
        if (now_ns - dd->since_ns < (uint64_t)RDMAX_LOG_REPEAT_MS * 1000000u)
            return 0;
        flags = RDMAX__LOG_DD_SUMMARY;  /* a long run: say so now, go on suppressing */
    } else {
        if (dd->repeats > 0)
            flags = RDMAX__LOG_DD_SUMMARY;
        flags |= RDMAX__LOG_DD_PRINT;
    }
    if (flags & RDMAX__LOG_DD_SUMMARY)
        rdmax__log_dd_summary(summary, n, device, dd->repeats);
    if (flags & RDMAX__LOG_DD_PRINT) {
        snprintf(dd->last, sizeof dd->last, "%s", msg);
        dd->lvl = lvl;
    }
    dd->repeats = 0;
    dd->since_ns = now_ns;
    return flags;
}

int rdmax__log_dedupe(rdmax_ctx *ctx, const rdmax_logger *lg, rdmax_log_level lvl, const char *msg)
{
    struct rdmax__prof *st = ctx ? rdmax__prof_state_make(ctx) : NULL;
    if (!st)
        return 1;
    char summary[160];
    int slvl;
    int f = rdmax__log_dd_step(&st->log, ctx->attr.name, (int)lvl, msg, rdmax__prof_now_ns(), summary,
                               sizeof summary, &slvl);
    if (f & RDMAX__LOG_DD_SUMMARY)
        rdmax__log_emit(lg, (rdmax_log_level)slvl, RDMAX_LOG_ITEM_LOG_REPEATED, summary);
    return f & RDMAX__LOG_DD_PRINT;
}

/* ---- >>numa: NUMA placement of rdmax's buffers --------------------------------------------------- */

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

/* ---- >>context: the context: device and GID, the shared device, queues, create and destroy, wait ---- */

/* In a receive callback: ctx->rwc points away from the batch being walked (a nested poll writes there),
   and the completions still to be walked may name what the callback destroys. */
static int rdmax__in_recv_poll(const rdmax_ctx *ctx)
{
    return ctx->rwc != ctx->rwc_top;
}

/* In a send completion's callback or a receive callback: rdmax_progress is further up the stack. */
static int rdmax__in_callback(const rdmax_ctx *ctx)
{
    return RDMAX__SCQ_NESTED(ctx) || rdmax__in_recv_poll(ctx);
}

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

/* Whether rdmax can run on a device of this kind: RC sends carry rdmax's receive credits in their
   immediate data and UD is a datagram QP, and an iWARP device has neither. Unnamed (want 0), such a
   device is passed over for the next one. */
static rdmax_status rdmax__dev_usable(rdmax_ctx *ctx, const char *name, enum ibv_node_type node,
                                      enum ibv_transport_type tr, int want)
{
    if (tr == IBV_TRANSPORT_IB && node != IBV_NODE_RNIC)
        return RDMAX_OK;
    rdmax__log(ctx, want ? RDMAX_LOG_ERROR : RDMAX_LOG_INFO, RDMAX_LOG_ITEM_DEVICE_CAPS,
               "device %s: %s: rdmax needs immediate data on sends (its RC receive credits ride in it) and UD "
               "QPs, which it has not; use an InfiniBand or RoCE device%s", name,
               node == IBV_NODE_RNIC || tr == IBV_TRANSPORT_IWARP ? "an iWARP device (node type RNIC)"
                                                                 : "not an InfiniBand-transport device",
               want ? "" : " (passed over)");
    return RDMAX_ERR_UNSUPPORTED;
}

/* The limits of a device's port in ctx->attr, from what ibv_query_device and ibv_query_port reported
   (a test gives a fake device's). */
static void rdmax__port_attr(rdmax_ctx *ctx, const char *name, uint8_t port, const struct ibv_device_attr *da,
                             const struct ibv_port_attr *pa)
{
    rdmax_dev_attr *a = &ctx->attr;
    snprintf(a->name, sizeof a->name, "%s", name);
    a->port = port;
    a->active_mtu = pa->active_mtu;
    a->mtu_bytes = rdmax__mtu_bytes(pa->active_mtu);
    a->max_qp_rd_atom = (uint32_t)da->max_qp_rd_atom;
    a->max_sge = (uint32_t)da->max_sge;
    a->max_cqe = (uint32_t)da->max_cqe;
    a->max_qp_wr = (uint32_t)da->max_qp_wr;
    a->max_qp = (uint32_t)da->max_qp;
    a->max_srq = da->max_srq > 0 ? (uint32_t)da->max_srq : 0;
    a->max_srq_wr = da->max_srq > 0 ? (uint32_t)da->max_srq_wr : 0;
    a->atomic_cap = da->atomic_cap;
    /* at most 2^32 - 1: the fast paths compare lengths with it and then use 32-bit SGE
       lengths (0, which no device should report, wraps to that limit too) */
    a->max_msg_sz = pa->max_msg_sz - 1 < UINT32_MAX ? pa->max_msg_sz : UINT32_MAX;
    /* old providers report UNSPECIFIED for InfiniBand ports (rdma-core reads it so too) */
    a->link_layer = pa->link_layer == IBV_LINK_LAYER_ETHERNET ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
    a->lid = a->link_layer == IBV_LINK_LAYER_INFINIBAND ? pa->lid : 0;
}

/* One line at context creation: what rdmax uses of the device, and for what it lacks, what it does
   instead. */
static void rdmax__caps_report(rdmax_ctx *ctx)
{
    const rdmax_dev_attr *a = &ctx->attr;
    char inl[64];
    if (a->max_inline)
        snprintf(inl, sizeof inl, "%u bytes", a->max_inline);
    else
        snprintf(inl, sizeof inl, "none (sends and puts read registered memory)");
    rdmax__log(ctx, RDMAX_LOG_INFO, RDMAX_LOG_ITEM_DEVICE_CAPS,
               "device %s port %u: atomics %s, shared receive queues %s, inline %s, %u SGE%s per request",
               a->name, a->port,
               a->atomic_cap == IBV_ATOMIC_NONE ? "none (rdmax_fadd and rdmax_cswap return RDMAX_ERR_UNSUPPORTED)"
               : a->atomic_cap == IBV_ATOMIC_HCA ? "HCA (atomic among RDMA atomics only, not with CPU accesses)"
                                                 : "GLOB",
               a->max_srq_wr ? "yes (unused: RC endpoints have receive queues of their own)" : "none", inl, a->max_sge,
               a->max_sge == 1 ? " (rdmax_*_iov take one entry)" : "s");
}

static rdmax_status rdmax__open_device(rdmax_ctx *ctx, const char *want)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_NO_DEVICE, "no RDMA device found (ibv_get_device_list: %s)",
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
        if (rdmax__dev_usable(ctx, name, list[i]->node_type, list[i]->transport_type, want != NULL) != RDMAX_OK) {
            if (want) {
                ibv_free_device_list(list);
                return RDMAX_ERR_UNSUPPORTED;
            }
            continue;
        }
        struct ibv_context *v = ibv_open_device(list[i]);
        if (!v) {
            rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_DEVICE_OPEN,
                       "device %s: ibv_open_device failed: %s", name, strerror(errno));
            continue;
        }
        struct ibv_device_attr da;
        if (ibv_query_device(v, &da)) {
            rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_DEVICE_QUERY,
                       "device %s: ibv_query_device failed: %s", name, strerror(errno));
            ibv_close_device(v);
            continue;
        }
        for (uint8_t p = 1; p <= da.phys_port_cnt; p++) {
            if (ctx->desc.port && p != ctx->desc.port)
                continue;
            struct ibv_port_attr pa;
            if (ibv_query_port(v, p, &pa)) {
                rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_DEVICE_QUERY,
                           "device %s port %u: ibv_query_port failed: %s", name, p,
                           strerror(errno));
                continue;
            }
            if (pa.state != IBV_PORT_ACTIVE) {
                rdmax__log(ctx, RDMAX_LOG_INFO, RDMAX_LOG_ITEM_PORT_INACTIVE,
                           "device %s port %u: not active (%s)", name, p,
                           ibv_port_state_str(pa.state));
                continue;
            }
            rdmax__port_attr(ctx, name, p, &da, &pa);
            ctx->attr.mem_windows = (da.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)) &&
                                     da.max_mw > 0;
            ctx->verbs = v;
            st = RDMAX_OK;
            break;
        }
        if (st != RDMAX_OK)
            ibv_close_device(v);
    }
    ibv_free_device_list(list);
    if (st != RDMAX_OK)
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_NO_ACTIVE_PORT,
                   "no active port on %s%s (port %s)", want ? "device " : "any device",
                   want ? want : "", ctx->desc.port ? "as requested" : "any");
    return st;
}

/* The device and protection domain of a context, shared with the contexts made with desc.parent (one PD,
   so every registration works on all of their endpoints). The last context to go closes it. The lock
   guards the list of contexts, the async fd (one reader at a time) and the events read for other
   contexts; it is taken only on slow paths (create, destroy, the tick's device events). */
#define RDMAX__DEV_EVQ 64
struct rdmax__dev {
    struct ibv_context *verbs;
    struct ibv_pd *pd;
    rdmax_allocator allocator;  /* of the context that opened it */
    pthread_mutex_t lock;
    uint32_t refs;
    rdmax_ctx *ctxs;            /* contexts sharing it, linked by ctx->dev_next */
    uint32_t n_ev;              /* events read by one context for another: */
    struct { rdmax_ctx *to; int type; uint32_t arg; void *obj; } ev[RDMAX__DEV_EVQ];
    uint64_t ev_lost;           /* events that found the queue full */
    uint32_t remote_any;        /* RDMAX_ACCESS_REMOTE_* of the regions open on every endpoint (atomic OR):
                                   the QPs made after them take those rights (rdmax__qp_rights) */
};

static rdmax_status rdmax__dev_make(rdmax_ctx *ctx)
{
    const rdmax_allocator *al = &ctx->desc.allocator;
    struct rdmax__dev *d = (struct rdmax__dev *)(al->alloc ? al->alloc(sizeof *d, al->user) : RDMAX_MALLOC(sizeof *d));
    if (!d)
        return RDMAX_ERR_NO_MEMORY;
    memset(d, 0, sizeof *d);
    if (pthread_mutex_init(&d->lock, NULL)) {
        if (al->free)
            al->free(d, al->user);
        else
            RDMAX_FREE(d);
        return RDMAX_ERR_NO_MEMORY;
    }
    d->verbs = ctx->verbs;
    d->pd = ctx->pd;
    d->allocator = *al;
    d->refs = 1;
    d->ctxs = ctx;
    ctx->dev = d;
    return RDMAX_OK;
}

static void rdmax__dev_join(rdmax_ctx *ctx, rdmax_ctx *parent)
{
    struct rdmax__dev *d = parent->dev;
    pthread_mutex_lock(&d->lock);
    d->refs++;
    ctx->dev_next = d->ctxs;
    d->ctxs = ctx;
    pthread_mutex_unlock(&d->lock);
    ctx->dev = d;
    ctx->verbs = d->verbs;
    ctx->pd = d->pd;
}

/* Leave the shared device; the last context closes it. Events queued for ctx are dropped. */
static void rdmax__dev_release(rdmax_ctx *ctx)
{
    struct rdmax__dev *d = ctx->dev;
    if (!d) {
        if (ctx->pd)
            ibv_dealloc_pd(ctx->pd);
        if (ctx->verbs)
            ibv_close_device(ctx->verbs);
        return;
    }
    pthread_mutex_lock(&d->lock);
    for (rdmax_ctx **pp = &d->ctxs; *pp; pp = &(*pp)->dev_next)
        if (*pp == ctx) {
            *pp = ctx->dev_next;
            break;
        }
    uint32_t k = 0;
    for (uint32_t i = 0; i < d->n_ev; i++)
        if (d->ev[i].to != ctx)
            d->ev[k++] = d->ev[i];
    d->n_ev = k;
    int last = --d->refs == 0;
    pthread_mutex_unlock(&d->lock);
    ctx->dev = NULL;
    if (!last)
        return;
    ibv_dealloc_pd(d->pd);
    ibv_close_device(d->verbs);
    pthread_mutex_destroy(&d->lock);
    rdmax_allocator al = d->allocator;
    if (al.free)
        al.free(d, al.user);
    else
        RDMAX_FREE(d);
}

/* An error of a desc found before there is a context to log on: through the desc's logger and level, kept
   as the thread's last error. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static void rdmax__log_desc(const rdmax_ctx_desc *d, rdmax_log_item item, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rdmax__vlog(NULL, &d->logger, RDMAX_LOG_ERROR, d->log_level_set ? d->log_level : rdmax__env_log_level(),
                item, fmt, ap);
    va_end(ap);
}

static void rdmax__ctx_retire_step(rdmax_ctx *ctx);  /* which ops give back read budget (with the send completions) */

/* Step 1 of rdmax_ctx_create: the desc's defaults and the environment's settings (RDMAX_LOG_LEVEL,
   RDMAX_DEVICE, RDMAX_SL, RDMAX_PKEY_INDEX, RDMAX_SECRET) into ctx->desc; d is the caller's desc, copied.
   ctx->desc is set first: a failure then frees ctx with the desc's allocator. */
static rdmax_status rdmax__ctx_desc_defaults(rdmax_ctx *ctx, rdmax_ctx_desc d)
{
    int r, v;
    ctx->desc = d;
    ctx->log_level = d.log_level_set ? d.log_level : rdmax__env_log_level();
    d.log_level = ctx->log_level;
    d.log_level_set = true;
    if (!d.device)
        d.device = getenv("RDMAX_DEVICE");
    if (!d.cq_depth)
        d.cq_depth = 4096;
    if (!d.handshake_ms)
        d.handshake_ms = 10000;
    if (!d.handshake_first_ms)
        d.handshake_first_ms = 1000;
    if (!d.handshake_slots)
        d.handshake_slots = RDMAX__HS_MAX;
    if (!d.ud_rq_depth)
        d.ud_rq_depth = 512;
    if (!d.max_eps || d.max_eps > 65535)
        d.max_eps = 65535;  /* the wr_id has 16 bits for the endpoint index (0xffff names the shared pool) */
    if (!d.recv_size)
        d.recv_size = 4096;
    ctx->desc = d;  /* (its logger, for the messages below) */
    if (d.conn_setup != RDMAX_SETUP_TCP && d.conn_setup != RDMAX_SETUP_CM) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_CTX_DESC,
                   "rdmax_ctx_desc.conn_setup %u is neither RDMAX_SETUP_TCP (0) nor RDMAX_SETUP_CM (1)", d.conn_setup);
        return RDMAX_ERR_INVALID_PARAM;
    }
    /* service level and P_Key index: desc, then environment, then 0 */
    if (!d.sl && (r = rdmax__env_int("RDMAX_SL", &v)) != 0) {
        if (r < 0 || v < 0 || v > 15) {
            rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_CTX_DESC, "RDMAX_SL=%s is not a service level (0..15)",
                       getenv("RDMAX_SL"));
            return RDMAX_ERR_INVALID_PARAM;
        }
        d.sl = (uint8_t)v;
    }
    if (d.sl > 15) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_CTX_DESC, "rdmax_ctx_desc.sl %u is not a service level (0..15)",
                   d.sl);
        return RDMAX_ERR_INVALID_PARAM;
    }
    if (!d.pkey_index && (r = rdmax__env_int("RDMAX_PKEY_INDEX", &v)) != 0) {
        if (r < 0 || v < 0) {
            rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_CTX_DESC,
                       "RDMAX_PKEY_INDEX=%s is not a P_Key table index", getenv("RDMAX_PKEY_INDEX"));
            return RDMAX_ERR_INVALID_PARAM;
        }
        d.pkey_index = (uint16_t)v;
    }
    /* how multicast groups are joined: desc, then RDMAX_MCAST_JOIN, then rdma_cm */
    const char *mj = d.mcast_join ? NULL : getenv("RDMAX_MCAST_JOIN");
    if (mj && *mj)
        d.mcast_join = !strcmp(mj, "cm") ? RDMAX_MCAST_CM : !strcmp(mj, "attach") ? RDMAX_MCAST_ATTACH : 0xff;
    if (!d.mcast_join)
        d.mcast_join = RDMAX_MCAST_CM;
    if (d.mcast_join != RDMAX_MCAST_CM && d.mcast_join != RDMAX_MCAST_ATTACH) {
        if (mj && *mj)
            rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_CTX_DESC, "RDMAX_MCAST_JOIN=%s is neither cm nor attach", mj);
        else
            rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_CTX_DESC,
                       "rdmax_ctx_desc.mcast_join %u is neither RDMAX_MCAST_CM (1) nor RDMAX_MCAST_ATTACH (2)",
                       d.mcast_join);
        return RDMAX_ERR_INVALID_PARAM;
    }
    if (d.mcast_addr && inet_pton(AF_INET, d.mcast_addr, &ctx->mcast_addr) != 1) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_CTX_DESC,
                   "rdmax_ctx_desc.mcast_addr '%s' is not an IPv4 address", d.mcast_addr);
        return RDMAX_ERR_INVALID_PARAM;
    }
    ctx->desc = d;
    /* The admission secret: the desc's, else the environment's; our own copy (the caller's may go). */
    const char *env = d.secret ? NULL : getenv("RDMAX_SECRET");
    size_t n = d.secret ? d.secret_len : env ? strlen(env) : 0;
    ctx->desc.secret = NULL;
    ctx->desc.secret_len = n;
    if (n && !(ctx->secret = (uint8_t *)rdmax__alloc(ctx, n)))
        return RDMAX_ERR_NO_MEMORY;
    if (ctx->secret)
        memcpy(ctx->secret, d.secret ? d.secret : env, n);
    return RDMAX_OK;
}

/* Step 2, a child context (desc.parent): the parent's device and PD; what it probed holds here too. */
static void rdmax__ctx_share_device(rdmax_ctx *ctx, rdmax_ctx *p)
{
    rdmax_dev_attr *a = &ctx->attr;
    rdmax__dev_join(ctx, p);
    *a = p->attr;
    ctx->desc.device = p->desc.device;
    ctx->desc.port = p->desc.port;
    ctx->desc.gid_index = p->desc.gid_index;
    ctx->desc.gid_index_set = true;
    ctx->desc.numa_node = p->desc.numa_node;
    ctx->desc.numa_node_set = true;
    if (ctx->desc.max_qp_wr && ctx->desc.max_qp_wr < a->max_qp_wr)
        a->max_qp_wr = ctx->desc.max_qp_wr;
    ctx->desc.max_qp_wr = a->max_qp_wr;
}

/* Step 2, a context of its own: open the device, pick its GID (desc, RDMAX_GID_INDEX, then the RoCE v2
   IPv4-mapped one) and NUMA node (desc, RDMAX_NUMA_NODE, then the device's from sysfs; -1: local
   allocation), allocate the PD and the shared device. */
static rdmax_status rdmax__ctx_open_device(rdmax_ctx *ctx)
{
    const rdmax_ctx_desc *d = &ctx->desc;
    rdmax_dev_attr *a = &ctx->attr;
    int gi = -2, node = -1, r;
    rdmax_status st = rdmax__open_device(ctx, d->device);
    if (st != RDMAX_OK)
        return st;
    if (d->max_qp_wr && d->max_qp_wr < a->max_qp_wr)
        a->max_qp_wr = d->max_qp_wr;
    ctx->desc.max_qp_wr = a->max_qp_wr;

    if (d->gid_index_set)
        gi = d->gid_index;
    else if ((r = rdmax__env_int("RDMAX_GID_INDEX", &gi)) < 0) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_ENV_GID_INDEX,
                   "RDMAX_GID_INDEX=%s is not a GID index", getenv("RDMAX_GID_INDEX"));
        return RDMAX_ERR_INVALID_PARAM;
    }
    if (gi == -2)
        gi = rdmax__pick_gid(ctx->verbs, a->port, a->link_layer);
    struct ibv_gid_entry ge;  /* the GID and its type (IB, RoCE v1, RoCE v2) */
    r = gi < 0 ? EINVAL : ibv_query_gid_ex(ctx->verbs, a->port, (uint32_t)gi, &ge, 0);
    if (r) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_GID_QUERY,
                   "device %s port %u: ibv_query_gid_ex(index %d) failed: %s", a->name, a->port, gi, strerror(r));
        return RDMAX_ERR_NO_DEVICE;
    }
    a->gid = ge.gid;
    a->gid_type = (int)ge.gid_type;
    a->gid_index = gi;
    ctx->desc.gid_index = gi;
    ctx->desc.gid_index_set = true;

    a->numa_node = rdmax__dev_numa_node(a->name);
    if (d->numa_node_set)
        node = d->numa_node;
    else if ((r = rdmax__env_int("RDMAX_NUMA_NODE", &node)) < 0) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_ENV_NUMA_NODE,
                   "RDMAX_NUMA_NODE=%s is not a node number", getenv("RDMAX_NUMA_NODE"));
        return RDMAX_ERR_INVALID_PARAM;
    } else if (r == 0)
        node = a->numa_node;
    if (node >= 0 && (numa_available() < 0 || node > numa_max_node())) {
        rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_NUMA_UNAVAILABLE,
                   "device %s: NUMA node %d not available; allocating locally", a->name, node);
        node = -1;
    }
    a->numa_node = node;
    ctx->desc.numa_node = node;
    ctx->desc.numa_node_set = true;

    if (!(ctx->pd = ibv_alloc_pd(ctx->verbs))) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_DEVICE_SETUP,
                   "device %s: ibv_alloc_pd failed: %s", a->name, strerror(errno));
        return RDMAX_ERR_IO;
    }
    if ((st = rdmax__dev_make(ctx)) != RDMAX_OK)
        return st;
    /* Device events are read by rdmax__tick without blocking. The fd belongs to rdmax's own ibv_context,
       so the flag changes nothing outside rdmax. */
    fcntl(ctx->verbs->async_fd, F_SETFL, fcntl(ctx->verbs->async_fd, F_GETFL) | O_NONBLOCK);
    return RDMAX_OK;
}

/* The fast paths' prebuilt requests (rdmax_ctx.fast_wr): opcode, flags and one SGE set once, so a post
   fills only what changes. */
static void rdmax__ctx_prebuild(rdmax_ctx *ctx)
{
    static const enum ibv_wr_opcode opc[RDMAX__FWR__COUNT] = {
        IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP};
    for (int k = 0; k < RDMAX__FWR__COUNT; k++) {
        ctx->fast_wr[k].opcode = opc[k];
        ctx->fast_wr[k].send_flags = k <= RDMAX__FWR_SEND ? IBV_SEND_INLINE : 0;
        ctx->fast_wr[k].sg_list = k >= RDMAX__FWR_FADD ? &ctx->asge : &ctx->fsge;
        ctx->fast_wr[k].num_sge = 1;
    }
    ctx->asge.length = 8;
}

/* Step 3: the completion channel and the two CQs (cq_depth, clamped to the device's), the provider's
   poll functions, the send CQ's accounting, the fast paths' prebuilt requests, the endpoint table. */
static rdmax_status rdmax__ctx_make_queues(rdmax_ctx *ctx)
{
    rdmax_dev_attr *a = &ctx->attr;
    if (!(ctx->channel = ibv_create_comp_channel(ctx->verbs))) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_DEVICE_SETUP,
                   "device %s: ibv_create_comp_channel failed: %s", a->name, strerror(errno));
        return RDMAX_ERR_IO;
    }
    if (ctx->desc.cq_depth > a->max_cqe) {
        rdmax__log(ctx, RDMAX_LOG_INFO, RDMAX_LOG_ITEM_DEVICE_CAPS,
                   "device %s: CQs of %u entries clamped to the device's max_cqe %u", a->name, ctx->desc.cq_depth,
                   a->max_cqe);
        ctx->desc.cq_depth = a->max_cqe;
    }
    uint32_t depth = ctx->desc.cq_depth;
    /* cq_context names the context: a CQ error event finds its owner among contexts sharing the device */
    ctx->scq = ibv_create_cq(ctx->verbs, (int)depth, ctx, ctx->channel, 0);
    ctx->rcq = ibv_create_cq(ctx->verbs, (int)depth, ctx, ctx->channel, 0);
    if (!ctx->scq || !ctx->rcq) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_DEVICE_SETUP,
                   "device %s: ibv_create_cq(%u) failed: %s", a->name, depth, strerror(errno));
        return RDMAX_ERR_IO;
    }
    fcntl(ctx->channel->fd, F_SETFL, fcntl(ctx->channel->fd, F_GETFL) | O_NONBLOCK);
    ctx->modify_qp = ibv_modify_qp;
    ctx->create_ah = ibv_create_ah;
    ctx->scq_poll = ctx->scq->context->ops.poll_cq;
    ctx->rcq_poll = ctx->rcq->context->ops.poll_cq;
    ctx->port_up = 1;
    ctx->tick_clock_ms = (uint32_t)(1e6 / rdmax__ns_per_tick() / 65536.0) + 1;  /* measured once (20 ms) */
    ctx->rwc = ctx->rwc_top;
    rdmax__ctx_prebuild(ctx);
    ctx->scq_low = depth > 1 ? depth / 2 : 1;  /* at least 1 (rdmax__fast_post) */
    ctx->scq_spare = (int32_t)(depth - ctx->scq_low);
    ctx->scq_idle = ctx->scq_spare;
    ctx->lazy_polls = 3 * RDMAX__LAZY_STEP;  /* the first call's add wraps it: that call polls */
    rdmax__ctx_retire_step(ctx);
    ctx->rcq_size = (uint32_t)ctx->rcq->cqe;
    ctx->eps_cap = ctx->desc.max_eps < 64 ? ctx->desc.max_eps : 64;  /* grows with the endpoints */
    ctx->eps_mask = rdmax__pow2_mask(ctx->eps_cap);
    ctx->eps = (rdmax__ep_ref *)rdmax__alloc(ctx, (ctx->eps_mask + 1ull) * sizeof *ctx->eps);
    return ctx->eps ? RDMAX_OK : RDMAX_ERR_NO_MEMORY;
}

/* Step 4: batching's staging: the inline limit (probed once; a child has its parent's), room for the
   inline data of chained requests, and the staging requests chained and set for a short put (a chained
   put then fills only what changes). */
static rdmax_status rdmax__ctx_make_staging(rdmax_ctx *ctx, int child)
{
    rdmax_dev_attr *a = &ctx->attr;
    if (!child)
        a->max_inline = rdmax__probe_inline(ctx);
    ctx->inl_stage = (char *)rdmax__alloc(ctx, (size_t)RDMAX_BATCH_MAX * (a->max_inline ? a->max_inline : 1));
    if (!ctx->inl_stage)
        return RDMAX_ERR_NO_MEMORY;
    rdmax__chain_clean(ctx, 0, RDMAX_BATCH_MAX);
    return RDMAX_OK;
}

/* Last step: the device line (and the capability and memory-window lines) in the log. */
static void rdmax__ctx_report(rdmax_ctx *ctx, int child)
{
    const rdmax_dev_attr *a = &ctx->attr;
    char gid[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, a->gid.raw, gid, sizeof gid);
    rdmax__log(ctx, RDMAX_LOG_INFO, RDMAX_LOG_ITEM_DEVICE_OPENED,
               "device %s port %u%s: %s, gid[%d] %s (%s), lid 0x%x, mtu %u, max_inline %u, max_qp_rd_atom %u, "
               "max_sge %u, max_qp %u, max_cqe %u, max_srq_wr %u, numa node %d", a->name, a->port,
               child ? " (shared with the parent context)" : "", rdmax__link_layer_str(a->link_layer),
               a->gid_index, gid, rdmax__gid_type_str(a->gid_type), a->lid, a->mtu_bytes, a->max_inline,
               a->max_qp_rd_atom, a->max_sge, a->max_qp, a->max_cqe, a->max_srq_wr, a->numa_node);
    rdmax__caps_report(ctx);
    if (!a->mem_windows && !child)
        rdmax__log(ctx, RDMAX_LOG_INFO, RDMAX_LOG_ITEM_MEM_WINDOW,
                   "device %s: no type-2 memory windows: an exposed region is open to every endpoint of the "
                   "context, for as long as it is registered", a->name);
}

/* rdmax_ctx_create: the steps above in order, then the registration cache's check and, with
   RDMAX_SETUP_CM, rdma_cm's channel. A failed step leaves what the others made to rdmax_ctx_destroy. */
rdmax_status rdmax_ctx_create(const rdmax_ctx_desc *desc_in, rdmax_ctx **out)
{
    rdmax_ctx_desc d;
    if (desc_in)
        d = *desc_in;
    else
        memset(&d, 0, sizeof d);
    *out = NULL;
    if (!d.allocator.alloc != !d.allocator.free) {
        /* Refused before the context itself is allocated: half an allocator would free with another
           allocator than the one that allocated. No context yet: logged through the desc's logger. */
        rdmax__log_desc(&d, RDMAX_LOG_ITEM_CTX_DESC,
                        "rdmax_ctx_create: rdmax_ctx_desc.allocator has %s but not %s: give both or neither",
                        d.allocator.alloc ? "alloc" : "free", d.allocator.alloc ? "free" : "alloc");
        return RDMAX_ERR_INVALID_PARAM;
    }
    rdmax_ctx *ctx = (rdmax_ctx *)(d.allocator.alloc ? d.allocator.alloc(sizeof *ctx, d.allocator.user)
                                                     : RDMAX_MALLOC(sizeof *ctx));
    if (!ctx)
        return RDMAX_ERR_NO_MEMORY;
    memset(ctx, 0, sizeof *ctx);
    rdmax_status st = rdmax__ctx_desc_defaults(ctx, d);
    if (st != RDMAX_OK)
        goto fail;
    if (d.parent)
        rdmax__ctx_share_device(ctx, d.parent);
    else if ((st = rdmax__ctx_open_device(ctx)) != RDMAX_OK)
        goto fail;
    if ((st = rdmax__ctx_make_queues(ctx)) != RDMAX_OK)
        goto fail;
    if (ctx->desc.recv_size > ctx->attr.max_msg_sz)
        ctx->desc.recv_size = (uint32_t)ctx->attr.max_msg_sz;
    if ((st = rdmax__ctx_make_staging(ctx, d.parent != NULL)) != RDMAX_OK)
        goto fail;
    if ((st = rdmax__rcache_check(ctx)) != RDMAX_OK)
        goto fail;
    if (d.conn_setup == RDMAX_SETUP_CM && (st = rdmax__cm_ctx_open(ctx)) != RDMAX_OK)
        goto fail;
    rdmax__ctx_report(ctx, d.parent != NULL);
    *out = ctx;
    return RDMAX_OK;
fail:
    rdmax_ctx_destroy(ctx);  /* its error stays readable: rdmax_ctx_query_last_error(NULL) */
    return st;
}

void rdmax_ctx_destroy(rdmax_ctx *ctx)
{
    if (!ctx)
        return;
    while (ctx->listeners)  /* first: their handshakes' endpoints are in ctx->eps */
        rdmax_listener_destroy(ctx->listeners);
    for (uint32_t i = 0; ctx->eps && i < ctx->eps_cap; i++)
        if (ctx->eps[i].ep)
            rdmax_ep_destroy(ctx->eps[i].ep);
    rdmax__ep_reap(ctx);  /* (none: a context is not destroyed inside its own poll) */
    rdmax__cm_ctx_cleanup(ctx);  /* after the endpoints: their rdma_cm ids are on its channel */
    rdmax__srq_close(ctx);
#if RDMAX__HAS_UD
    rdmax__ud_ctx_cleanup(ctx);
#endif
    if (ctx->rcache) {
        int busy = rdmax_rcache_destroy(ctx->rcache);
        if (busy > 0)
            rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_RCACHE_BUSY,
                       "device %s: %d cached registrations were still in use at destroy",
                       ctx->attr.name, busy);
    }
    if (ctx->scq)
        ibv_destroy_cq(ctx->scq);
    if (ctx->rcq)
        ibv_destroy_cq(ctx->rcq);
    if (ctx->channel)
        ibv_destroy_comp_channel(ctx->channel);
    rdmax__dev_release(ctx);
    rdmax__free(ctx, ctx->eps);
    rdmax__free(ctx, ctx->inl_stage);
    if (ctx->secret)
        rdmax__wipe(ctx->secret, ctx->desc.secret_len);
    rdmax__free(ctx, ctx->secret);
    rdmax__profile_ctx_fini(ctx);
    rdmax_allocator al = ctx->desc.allocator;
    if (al.free)
        al.free(ctx, al.user);
    else
        RDMAX_FREE(ctx);
}

const rdmax_dev_attr *rdmax_ctx_query_attr(const rdmax_ctx *ctx)
{
    return &ctx->attr;
}

rdmax_ctx_desc rdmax_ctx_query_desc(const rdmax_ctx *ctx)
{
    return ctx->desc;
}

int rdmax_ctx_query_fd(const rdmax_ctx *ctx)
{
    return ctx->channel->fd;
}

static rdmax_status rdmax__rgroups_arm(rdmax_ctx *ctx);

rdmax_status rdmax_ctx_arm(rdmax_ctx *ctx)
{
    if (ibv_req_notify_cq(ctx->scq, 0) || ibv_req_notify_cq(ctx->rcq, 0))
        return RDMAX_ERR_IO;
    return rdmax__rgroups_arm(ctx);  /* the other receive CQs (>>srq) */
}

rdmax_status rdmax_wait(rdmax_ctx *ctx, int timeout_ms)
{
    /* the count, not progress's result, says whether completions were handled: the health pass inside
       progress may handle one itself (it drains the send CQ), which progress does not return */
    uint64_t cqes0 = ctx->cnt.cqes;
    if (rdmax_progress(ctx) || ctx->cnt.cqes != cqes0)
        return RDMAX_OK;
    if (rdmax_ctx_arm(ctx) != RDMAX_OK)
        return RDMAX_ERR_IO;
    if (rdmax_progress(ctx) || ctx->cnt.cqes != cqes0)  /* a completion that raced with arming */
        return RDMAX_OK;
    /* Sleep in slices of the tick period, so the watchdog and keepalives run while the caller blocks;
       a device event wakes us too, and a listener with work (a client to accept). */
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : rdmax__now_ms() + timeout_ms;
    int accept_ready = 0;
    for (;;) {
        int64_t left = deadline - rdmax__now_ms();
        int slice = left < RDMAX__TICK_MS ? (int)(left < 0 ? 0 : left) : RDMAX__TICK_MS;
        struct pollfd stack[RDMAX__WAIT_STACK], *pfd;
        nfds_t n = 0;
        if (!(pfd = rdmax__wait_fds(ctx, stack, &n)))
            return RDMAX_ERR_NO_MEMORY;
        int r = poll(pfd, n, slice);
        int cq_ready = r > 0 && (pfd[0].revents & POLLIN);
        for (nfds_t i = 2; r > 0 && i < n; i++)
            accept_ready |= pfd[i].revents != 0;
        if (pfd != stack)
            rdmax__free(ctx, pfd);
        rdmax__tick(ctx);
        if (cq_ready) {
            struct ibv_cq *cq;
            void *cq_ctx;
            while (ibv_get_cq_event(ctx->channel, &cq, &cq_ctx) == 0)
                ibv_ack_cq_events(cq, 1);
            break;
        }
        if (accept_ready || slice == (int)left || left <= 0)
            break;
    }
    return rdmax_progress(ctx) || accept_ready || ctx->cnt.cqes != cqes0 ? RDMAX_OK : RDMAX_ERR_TIMEOUT;
}

/* ibv_post_send calls: the requests in posted[] plus ctx->cnt.post_calls (see rdmax_ctx.cnt). */
static uint64_t rdmax__post_calls(const rdmax_counters *c)
{
    uint64_t n = c->post_calls;
    for (unsigned op = 0; op < RDMAX_OP__COUNT; op++)
        n += c->posted[op];
    return n;
}

/* An atomic moves 8 bytes: its bytes follow from its posted count (cnt.bytes[] of FADD and CSWAP is not
   kept: the fast path counts no bytes for them). */
#define RDMAX__ATOMIC_BYTES(posted) (8 * (posted))

void rdmax_ctx_query_counters(const rdmax_ctx *ctx, rdmax_counters *out)
{
    *out = ctx->cnt;
    out->post_calls = rdmax__post_calls(&ctx->cnt);
    out->bytes[RDMAX_OP_FADD] = RDMAX__ATOMIC_BYTES(out->posted[RDMAX_OP_FADD]);
    out->bytes[RDMAX_OP_CSWAP] = RDMAX__ATOMIC_BYTES(out->posted[RDMAX_OP_CSWAP]);
}

struct rdmax_rcache *rdmax_ctx_query_rcache(const rdmax_ctx *ctx)
{
    return ctx->rcache;
}

/* ---- >>memory: memory registration, and the context's registration cache ------------------------- */

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

/* The registration cache's operations: verbs registration with the least rights asked for. */
static int rdmax__mr_reg(void *arg, void *addr, size_t len, unsigned access, rdmax_rcache_region *r)
{
    rdmax_ctx *ctx = (rdmax_ctx *)arg;
    /* Local write only where the device writes: a send or put source may be read-only memory, which
       the kernel refuses to pin for writing. */
    int f = rdmax__ibv_access(access & ~RDMAX__ACCESS_LOCAL_WRITE);
    if (!(access & (RDMAX__ACCESS_LOCAL_WRITE | RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_REMOTE_ATOMIC)))
        f &= ~IBV_ACCESS_LOCAL_WRITE;
    struct ibv_mr *mr = ibv_reg_mr(ctx->pd, addr, len, f);
    if (!mr) {
        int e = errno ? errno : EIO;
        rdmax__log(ctx, RDMAX_LOG_DEBUG, RDMAX_LOG_ITEM_RCACHE_REG,
                   "device %s: rcache ibv_reg_mr(%p, %zu) failed: %s", ctx->attr.name, addr,
                   len, strerror(e));
        return -e;
    }
    r->mr = mr;
    r->lkey = mr->lkey;
    r->rkey = mr->rkey;
    return 0;
}

static void rdmax__mr_dereg(void *arg, rdmax_rcache_region *r)
{
    (void)arg;
    ibv_dereg_mr((struct ibv_mr *)r->mr);
}

/* The cache is made on the first buffer passed without an rdmax_mem (the malloc policy it relies on is
   in force from program start, see >>rcache). */
rdmax_status rdmax__rcache_open(rdmax_ctx *ctx)
{
    if (ctx->desc.rcache_disable)
        return RDMAX_ERR_NO_MEMH;
    rdmax_rcache_desc rd;
    memset(&rd, 0, sizeof rd);
    rd.ops.reg = rdmax__mr_reg;
    rd.ops.dereg = rdmax__mr_dereg;
    rd.ops.arg = ctx;
    rd.ops.notify = rdmax__profile_rcache_notify;
    rd.max_regions = ctx->desc.rcache_max_regions;
    rd.max_bytes = (size_t)ctx->desc.rcache_max_bytes;
    rd.mode = ctx->desc.rcache_mode;
    rd.allocator = ctx->desc.allocator;
    rdmax_status st = rdmax_rcache_create(&rd, &ctx->rcache);
    if (st != RDMAX_OK) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_RCACHE_CREATE,
                   "device %s: creating the registration cache failed: %s", ctx->attr.name,
                   rdmax__tls_error);
        ctx->rcache = NULL;
        return st;
    }
    rdmax_rcache_desc ad = rdmax_rcache_query_desc(ctx->rcache);
    ctx->desc.rcache_max_regions = (uint32_t)ad.max_regions;
    ctx->desc.rcache_max_bytes = ad.max_bytes;
    return RDMAX_OK;
}

/* At context creation: a bad rcache_mode is refused, and a process where no memory monitor can run
   is told once that raw buffers will be registered per operation (correct, but a registration each). */
rdmax_status rdmax__rcache_check(rdmax_ctx *ctx)
{
    static int told;
    if (ctx->desc.rcache_mode > RDMAX_RCACHE_UNCACHED) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_CTX_DESC,
                   "rcache_mode %u is not RDMAX_RCACHE_AUTO, _MANUAL or _UNCACHED",
                   (unsigned)ctx->desc.rcache_mode);
        return RDMAX_ERR_INVALID_PARAM;
    }
    if (ctx->desc.rcache_disable || ctx->desc.rcache_mode != RDMAX_RCACHE_AUTO)
        return RDMAX_OK;
    rdmax_rcache_monitor_info mi;
    rdmax_rcache_query_monitor(&mi);
    unsigned m = rdmax_rcache_memhooks();
    int hooks = (m & (RDMAX_RCACHE_HOOKS_INTERPOSED | RDMAX_RCACHE_HOOKS_MALLOPT)) ==
                (RDMAX_RCACHE_HOOKS_INTERPOSED | RDMAX_RCACHE_HOOKS_MALLOPT);
    if (!mi.usable && !hooks && !__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
        rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_RCACHE_MONITOR,
                   "registration cache: no memory monitor (%s): buffers passed without an "
                   "rdmax_mem are registered per operation", mi.why);
    else
        rdmax__log(ctx, RDMAX_LOG_DEBUG, RDMAX_LOG_ITEM_RCACHE_MONITOR,
                   "registration cache: memory monitor %s%s", mi.usable ? mi.why : "none",
                   hooks ? ", memory hooks and malloc policy" : "");
    return RDMAX_OK;
}

#define RDMAX__ACCESS_REMOTE (RDMAX_ACCESS_REMOTE_READ | RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_REMOTE_ATOMIC)

/* A region whose remote rights go to peers only through memory windows bound to the endpoints it is
   exposed on (rdmax__ep_bind): its registration has none, so no other QP of the PD reaches it. */
static int rdmax__mem_scoped(const rdmax_ctx *ctx, unsigned access)
{
    return ctx->attr.mem_windows && (access & RDMAX__ACCESS_REMOTE) && !(access & RDMAX_ACCESS_ANY_ENDPOINT);
}

rdmax_status rdmax_mem_reg(rdmax_ctx *ctx, void *addr, size_t len, unsigned access, rdmax_mem **out)
{
    *out = NULL;
    if (addr == NULL || len == 0)
        return RDMAX_ERR_INVALID_PARAM;
    rdmax_mem *m = (rdmax_mem *)rdmax__alloc(ctx, sizeof *m);
    if (!m)
        return RDMAX_ERR_NO_MEMORY;
    int scoped = rdmax__mem_scoped(ctx, access);
    m->mr = ibv_reg_mr(ctx->pd, addr, len, scoped ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND : rdmax__ibv_access(access));
    if (!m->mr) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MEM_REG,
                   "device %s: ibv_reg_mr(%p, %zu) failed: %s", ctx->attr.name, addr, len,
                   strerror(errno));
        rdmax__free(ctx, m);
        return errno == ENOMEM ? RDMAX_ERR_NO_MEMORY : RDMAX_ERR_IO;
    }
    m->addr = addr;
    m->len = len;
    m->lkey = m->mr->lkey;
    m->rkey = scoped ? 0 : m->mr->rkey;  /* a scoped region has no key of its own: see EXPOSED MEMORY */
    m->access = access;
    if (!scoped && (access & RDMAX__ACCESS_REMOTE) && ctx->dev)
        __atomic_fetch_or(&ctx->dev->remote_any, access & RDMAX__ACCESS_REMOTE, __ATOMIC_RELAXED);
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
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MEM_ALLOC,
                   "device %s: allocating %zu bytes on NUMA node %d failed", ctx->attr.name,
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

/* ---- >>wire: the connection record: its format, and its exchange over a socket ------------------- */

static void rdmax__put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)(v >> 8); p[1] = (uint8_t)v; }
static void rdmax__put32(uint8_t *p, uint32_t v) { rdmax__put16(p, (uint16_t)(v >> 16)); rdmax__put16(p + 2, (uint16_t)v); }
static void rdmax__put64(uint8_t *p, uint64_t v) { rdmax__put32(p, (uint32_t)(v >> 32)); rdmax__put32(p + 4, (uint32_t)v); }
static uint16_t rdmax__get16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static uint32_t rdmax__get32(const uint8_t *p) { return (uint32_t)rdmax__get16(p) << 16 | rdmax__get16(p + 2); }
static uint64_t rdmax__get64(const uint8_t *p) { return (uint64_t)rdmax__get32(p) << 32 | rdmax__get32(p + 4); }

size_t rdmax_conn_record_encode(const rdmax_conn_record *in, uint8_t out[RDMAX_CONN_RECORD_SIZE])
{
    uint32_t n = in->n_regions < RDMAX_MAX_REGIONS ? in->n_regions : RDMAX_MAX_REGIONS;
    size_t len = RDMAX_CONN_RECORD_HEAD + (n > 1 ? (size_t)(n - 1) * RDMAX_CONN_RECORD_REGION : 0);
    memset(out, 0, len);
    rdmax__put32(out + 0, RDMAX_CONN_RECORD_MAGIC);
    rdmax__put16(out + 4, RDMAX_CONN_RECORD_VERSION);
    rdmax__put16(out + 6, (uint16_t)len);
    out[8] = in->transport;
    out[9] = in->mtu;
    rdmax__put16(out + 10, in->credits);
    rdmax__put32(out + 12, in->qpn);
    rdmax__put32(out + 16, in->psn);
    rdmax__put32(out + 20, in->qkey);
    rdmax__put32(out + 28, in->recv_size);
    memcpy(out + 32, in->gid, 16);
    rdmax__put64(out + 64, in->subnet_prefix);
    rdmax__put16(out + 72, in->lid);
    out[74] = in->link_layer;
    out[75] = in->gid_type;
    if (n > 0) {
        rdmax__put32(out + 24, in->regions[0].rkey);
        rdmax__put64(out + 48, in->regions[0].addr);
        rdmax__put64(out + 56, in->regions[0].len);
    }
    for (uint32_t i = 1; i < n; i++) {
        uint8_t *r = out + RDMAX_CONN_RECORD_HEAD + (size_t)(i - 1) * RDMAX_CONN_RECORD_REGION;
        rdmax__put64(r, in->regions[i].addr);
        rdmax__put64(r + 8, in->regions[i].len);
        rdmax__put32(r + 16, in->regions[i].rkey);
    }
    return len;
}

#define RDMAX__WHY(...) (why ? (void)snprintf(why, why_len, __VA_ARGS__) : (void)0)

/* Checks the 8-byte head: magic, version, then length (only after the version, whose record it is).
   head..max: the record's sizes (the TCP record: head plus whole regions; rdma_cm's compact one: one size). */
static rdmax_status rdmax__record_head_check(const uint8_t *b, unsigned head, unsigned max, char *why,
                                             size_t why_len)
{
    uint32_t magic = rdmax__get32(b);
    if (magic != RDMAX_CONN_RECORD_MAGIC) {
        RDMAX__WHY("connection record: magic 0x%08x, expected 0x%08x (peer is not rdmax)", magic,
                   RDMAX_CONN_RECORD_MAGIC);
        return RDMAX_ERR_OOB_MAGIC;
    }
    uint16_t ver = rdmax__get16(b + 4);
    if (ver != RDMAX_CONN_RECORD_VERSION) {
        RDMAX__WHY("connection record: version %u, this rdmax speaks version %u", ver, RDMAX_CONN_RECORD_VERSION);
        return RDMAX_ERR_OOB_VERSION;
    }
    uint16_t len = rdmax__get16(b + 6);
    if (len > max) {
        if (max == head)
            RDMAX__WHY("connection record: length field %u, larger than the %u-byte record", len, max);
        else
            RDMAX__WHY("connection record: length field %u, larger than the largest record (%u bytes, %u regions)",
                       len, max, RDMAX_MAX_REGIONS);
        return RDMAX_ERR_OOB_LONG;
    }
    if (len < head || (len - head) % RDMAX_CONN_RECORD_REGION) {
        if (max == head)
            RDMAX__WHY("connection record: length field %u, smaller than the %u-byte record", len, head);
        else
            RDMAX__WHY("connection record: length field %u is not %u bytes plus whole %u-byte regions", len, head,
                       RDMAX_CONN_RECORD_REGION);
        return RDMAX_ERR_OOB_LENGTH;
    }
    return RDMAX_OK;
}

static rdmax_status rdmax__conn_head_check(const uint8_t *b, char *why, size_t why_len)
{
    return rdmax__record_head_check(b, RDMAX_CONN_RECORD_HEAD, RDMAX_CONN_RECORD_SIZE, why, why_len);
}

static rdmax_status rdmax__conn_fields_check(const rdmax_conn_record *o, char *why, size_t why_len);

rdmax_status rdmax_conn_record_decode(const uint8_t *b, size_t n, rdmax_conn_record *o, char *why, size_t why_len)
{
    if (n < 8) {
        RDMAX__WHY("connection record: %zu bytes, need at least %u", n, RDMAX_CONN_RECORD_HEAD);
        return RDMAX_ERR_OOB_SHORT;
    }
    rdmax_status st = rdmax__conn_head_check(b, why, why_len);
    if (st != RDMAX_OK)
        return st;
    size_t want = rdmax__get16(b + 6);
    if (n < want) {
        RDMAX__WHY("connection record: %zu bytes, need %zu", n, want);
        return RDMAX_ERR_OOB_SHORT;
    }
    if (n > want) {
        RDMAX__WHY("connection record: %zu bytes, its length field says %zu", n, want);
        return RDMAX_ERR_OOB_LONG;
    }
    memset(o, 0, sizeof *o);
    o->transport = b[8];
    o->mtu = b[9];
    o->credits = rdmax__get16(b + 10);
    o->qpn = rdmax__get32(b + 12);
    o->psn = rdmax__get32(b + 16);
    o->qkey = rdmax__get32(b + 20);
    o->recv_size = rdmax__get32(b + 28);
    memcpy(o->gid, b + 32, 16);
    rdmax_rbuf *r0 = &o->regions[0];
    r0->rkey = rdmax__get32(b + 24);
    r0->addr = rdmax__get64(b + 48);
    r0->len = rdmax__get64(b + 56);
    uint32_t extra = (uint32_t)((want - RDMAX_CONN_RECORD_HEAD) / RDMAX_CONN_RECORD_REGION);
    for (uint32_t i = 1; i <= extra; i++) {
        const uint8_t *p = b + RDMAX_CONN_RECORD_HEAD + (size_t)(i - 1) * RDMAX_CONN_RECORD_REGION;
        o->regions[i].addr = rdmax__get64(p);
        o->regions[i].len = rdmax__get64(p + 8);
        o->regions[i].rkey = rdmax__get32(p + 16);
    }
    o->n_regions = r0->len || extra ? 1 + extra : 0;  /* an empty region 0 before others is refused below */
    o->subnet_prefix = rdmax__get64(b + 64);
    o->lid = rdmax__get16(b + 72);
    o->link_layer = b[74];
    o->gid_type = b[75];
    st = rdmax__conn_fields_check(o, why, why_len);
    if (st != RDMAX_OK)
        return st;
    /* the port's address (not in rdma_cm's compact record, whose route rdma_cm makes) */
    int ib = o->link_layer == IBV_LINK_LAYER_INFINIBAND;
    if (ib ? o->lid == 0 || o->lid > 0xbfff || o->gid_type != IBV_GID_TYPE_IB
           : o->link_layer != IBV_LINK_LAYER_ETHERNET || o->lid != 0 ||
                 (o->gid_type != IBV_GID_TYPE_ROCE_V1 && o->gid_type != IBV_GID_TYPE_ROCE_V2)) {
        RDMAX__WHY("connection record: link layer %u, LID 0x%x, GID type %u: expected InfiniBand (1) with a "
                   "unicast LID (1..0xbfff) and GID type IB (0), or Ethernet (2) with LID 0 and GID type "
                   "RoCE v1 (1) or v2 (2)", o->link_layer, o->lid, o->gid_type);
        return RDMAX_ERR_OOB_LINK;
    }
    return RDMAX_OK;
}

/* The checks of a decoded record's fields, in wire order: shared by the TCP record and rdma_cm's compact
   one (whose QP number, PSN, MTU and GID come from rdma_cm), so a fault reads the same in both. */
static rdmax_status rdmax__conn_fields_check(const rdmax_conn_record *o, char *why, size_t why_len)
{
    if (o->transport != RDMAX_TRANSPORT_ID_RC && o->transport != RDMAX_TRANSPORT_ID_UD) {
        RDMAX__WHY("connection record: transport %u is neither RC (1) nor UD (2)", o->transport);
        return RDMAX_ERR_OOB_TRANSPORT;
    }
    if (o->mtu < IBV_MTU_256 || o->mtu > IBV_MTU_4096) {
        RDMAX__WHY("connection record: MTU code %u, expected 1..5 (256..4096 bytes)", o->mtu);
        return RDMAX_ERR_OOB_MTU;
    }
    if (o->transport == RDMAX_TRANSPORT_ID_RC && o->credits < 2) {
        RDMAX__WHY("connection record: %u receive credits; RC needs at least 2", o->credits);
        return RDMAX_ERR_OOB_CREDITS;
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
    const rdmax_rbuf *r0 = &o->regions[0];
    uint32_t extra = o->n_regions > 1 ? o->n_regions - 1 : 0;
    if (r0->len == 0 ? (r0->addr != 0 || r0->rkey != 0 || extra != 0) : (r0->addr + r0->len < r0->addr)) {
        RDMAX__WHY("connection record: region 0 0x%llx+%llu (rkey 0x%x)%s is not a valid region",
                   (unsigned long long)r0->addr, (unsigned long long)r0->len, r0->rkey,
                   extra ? ", with more regions after it," : "");
        return RDMAX_ERR_OOB_BUFFER;
    }
    for (uint32_t i = 1; i <= extra; i++) {
        const rdmax_rbuf *r = &o->regions[i];
        if (r->len == 0 || r->addr + r->len < r->addr) {
            RDMAX__WHY("connection record: region %u 0x%llx+%llu (rkey 0x%x) is not a valid region", i,
                       (unsigned long long)r->addr, (unsigned long long)r->len, r->rkey);
            return RDMAX_ERR_OOB_BUFFER;
        }
    }
    return RDMAX_OK;
}

void rdmax_cm_record_encode(const rdmax_conn_record *in, uint8_t out[RDMAX_CM_RECORD_SIZE])
{
    memset(out, 0, RDMAX_CM_RECORD_SIZE);
    rdmax__put32(out + 0, RDMAX_CONN_RECORD_MAGIC);
    rdmax__put16(out + 4, RDMAX_CONN_RECORD_VERSION);
    rdmax__put16(out + 6, RDMAX_CM_RECORD_SIZE);
    out[8] = in->transport;
    rdmax__put16(out + 10, in->credits);
    rdmax__put32(out + 16, in->recv_size);
    if (in->n_regions > 0) {  /* one region: rdmax__cm_connect and _accept refuse an endpoint with more */
        rdmax__put32(out + 12, in->regions[0].rkey);
        rdmax__put64(out + 20, in->regions[0].addr);
        rdmax__put64(out + 28, in->regions[0].len);
    }
}

rdmax_status rdmax_cm_record_decode(const uint8_t *b, size_t n, const rdmax_conn_record *cm, rdmax_conn_record *o,
                                  char *why, size_t why_len)
{
    if (!b || n < 8) {
        RDMAX__WHY("connection record: %zu bytes, need %u", b ? n : 0, RDMAX_CM_RECORD_SIZE);
        return RDMAX_ERR_OOB_SHORT;
    }
    rdmax_status st = rdmax__record_head_check(b, RDMAX_CM_RECORD_SIZE, RDMAX_CM_RECORD_SIZE, why, why_len);
    if (st != RDMAX_OK)
        return st;
    if (n < RDMAX_CM_RECORD_SIZE) {
        RDMAX__WHY("connection record: %zu bytes, need %u", n, RDMAX_CM_RECORD_SIZE);
        return RDMAX_ERR_OOB_SHORT;
    }
    /* bytes after the record are rdma_cm's zero padding of the private data */
    memset(o, 0, sizeof *o);
    o->transport = b[8];
    o->mtu = cm->mtu;
    o->credits = rdmax__get16(b + 10);
    o->qpn = cm->qpn;
    o->psn = cm->psn;
    o->qkey = cm->qkey;
    o->regions[0].rkey = rdmax__get32(b + 12);
    o->recv_size = rdmax__get32(b + 16);
    memcpy(o->gid, cm->gid, 16);
    o->regions[0].addr = rdmax__get64(b + 20);
    o->regions[0].len = rdmax__get64(b + 28);
    o->n_regions = o->regions[0].len ? 1 : 0;
    o->subnet_prefix = cm->subnet_prefix;  /* the port's address: rdma_cm's route, not the record's */
    o->lid = cm->lid;
    o->link_layer = cm->link_layer;
    o->gid_type = cm->gid_type;
    return rdmax__conn_fields_check(o, why, why_len);
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

/* The record exchange with admission (>>admit): ctx NULL or without a secret, the plain one. */
static rdmax_status rdmax__oob_trade(int fd, const rdmax_conn_record *local, rdmax_conn_record *remote, int timeout_ms,
                                     rdmax_ctx *ctx, char *why, size_t why_len);

rdmax_status rdmax_oob_exchange(int fd, const rdmax_conn_record *local, rdmax_conn_record *remote, int timeout_ms,
                                char *why, size_t why_len)
{
    return rdmax__oob_trade(fd, local, remote, timeout_ms, NULL, why, why_len);
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

/* The subnet prefix of a GID (its first 8 bytes), as the record carries it. */
static uint64_t rdmax__gid_prefix(const uint8_t gid[16]) { return rdmax__get64(gid); }

/* The address of a peer, for an RC QP's move to RTR and a UD address handle (a zeroed attr): on
   InfiniBand its LID, and a GRH only towards another subnet (its subnet prefix differs from ours) or when
   the desc asks for one (force_grh), as UCX and perftest decide; RoCE routes by the GID, so always a GRH. */
static void rdmax__peer_av(const rdmax_ctx *ctx, struct ibv_ah_attr *a, const uint8_t gid[16], uint16_t lid,
                           uint64_t subnet_prefix)
{
    a->port_num = ctx->attr.port;
    a->sl = ctx->desc.sl;
    if (ctx->attr.link_layer == IBV_LINK_LAYER_INFINIBAND) {
        a->dlid = lid;
        if (!ctx->desc.force_grh && subnet_prefix == rdmax__gid_prefix(ctx->attr.gid.raw))
            return;
    }
    a->is_global = 1;
    memcpy(a->grh.dgid.raw, gid, 16);
    a->grh.sgid_index = (uint8_t)ctx->attr.gid_index;
    a->grh.hop_limit = 64;
}

/* ---- >>ud: UD endpoints: the shared QP, address handles, datagram order -------------------------- */

#if RDMAX__HAS_UD
/* UD endpoints share the context's one UD QP: an endpoint is the peer's address (an AH from the cache,
   the peer's QPN and Q_Key), its send slots and its counters. The QP's receive pool is the context's.
   A datagram finds its endpoint by its immediate data, which carries our endpoint's index (the peer read
   it from the credits field of our record), checked against the sender's QPN and source GID; a datagram
   to a multicast group finds the endpoint that joined the group by the destination address in its GRH.
   Address handles are created once per destination GID and kept until the context goes: creating one is
   a system call, and a UD endpoint without one cannot be made, so a post never carries a NULL AH. */
#define RDMAX__MCAST_MAX 8      /* groups per endpoint */
#define RDMAX__UD_GROUPS 64     /* groups per context */
struct rdmax__ud {
    struct { uint8_t gid[16]; uint16_t lid; struct ibv_ah *ah; } *ahs;
    uint32_t n, cap;
    struct ibv_qp *qp;          /* NULL until the first UD endpoint */
    struct ibv_cq *rcq;
    char *rbufs;
    struct ibv_mr *rmr;
    uint32_t rq_depth, recv_size, rq_unposted, *rq_free;
    struct { uint8_t gid[16]; struct in_addr group; uint32_t ep_idx; uint16_t gen; } groups[RDMAX__UD_GROUPS];
    uint32_t n_groups;
};

#define RDMAX__MCAST_JOIN_MS 10000  /* how long a join waits for rdma_cm's event */
/* A group an endpoint joined (or, for rdmax_mcast_ep_create, the one it sends to). The QP is attached to
   mgid / mlid: rdma_cm's event gives them, the direct path derives the MGID. */
struct rdmax__mcast_group {
    struct in_addr group;
    int fd;                          /* RDMAX_MCAST_ATTACH: the socket holding the IP-level membership */
    struct rdma_event_channel *ch;   /* rdma_cm: the join's own channel and id (the id has no QP) */
    struct rdma_cm_id *id;
    union ibv_gid mgid;
    uint16_t mlid;
};
struct rdmax__mcast {
    struct rdmax__mcast_group g[RDMAX__MCAST_MAX];
    uint32_t n;
};

static struct rdmax__ud *rdmax__ud_state(rdmax_ctx *ctx)
{
    if (!ctx->ud)
        ctx->ud = (struct rdmax__ud *)rdmax__alloc(ctx, sizeof *ctx->ud);
    return ctx->ud;
}

/* The cached address handle to gid / lid, made from a when there is none yet. */
static struct ibv_ah *rdmax__ah_cached(rdmax_ctx *ctx, const uint8_t gid[16], uint16_t lid, struct ibv_ah_attr *a)
{
    struct rdmax__ud *u = rdmax__ud_state(ctx);
    if (!u)
        return NULL;
    for (uint32_t i = 0; i < u->n; i++)
        if (!memcmp(u->ahs[i].gid, gid, 16) && u->ahs[i].lid == lid)
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
    struct ibv_ah *ah = ctx->create_ah(ctx->pd, a);
    if (!ah) {
        char g[INET6_ADDRSTRLEN];
        inet_ntop(AF_INET6, gid, g, sizeof g);
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_AH_CREATE,
                   "device %s port %u: ibv_create_ah(gid %s, lid 0x%x%s) failed: %s", ctx->attr.name,
                   ctx->attr.port, g, lid, a->is_global ? ", GRH" : "", strerror(errno));
        return NULL;
    }
    memcpy(u->ahs[u->n].gid, gid, 16);
    u->ahs[u->n].lid = lid;
    u->ahs[u->n++].ah = ah;
    return ah;
}

/* The address handle to gid / lid (InfiniBand; 0 on RoCE) in the subnet of subnet_prefix (rdmax__peer_av). */
static struct ibv_ah *rdmax__ah_get(rdmax_ctx *ctx, const uint8_t gid[16], uint16_t lid, uint64_t subnet_prefix)
{
    if (ctx->attr.link_layer != IBV_LINK_LAYER_INFINIBAND)
        lid = 0;  /* RoCE: the GID alone */
    struct ibv_ah_attr a;
    memset(&a, 0, sizeof a);
    rdmax__peer_av(ctx, &a, gid, lid, subnet_prefix);
    return rdmax__ah_cached(ctx, gid, lid, &a);
}

static rdmax_status rdmax__ud_connect(rdmax_ep *ep, const rdmax_conn_record *r)
{
    rdmax_ctx *ctx = ep->ctx;
    ep->ah = rdmax__ah_get(ctx, r->gid, r->lid, r->subnet_prefix);
    if (!ep->ah)
        return RDMAX_ERR_IO;
    ep->ud_qpn = r->qpn;
    ep->ud_qkey = r->qkey;
    ep->peer_qpn = r->qpn;
    memcpy(ep->peer_gid, r->gid, 16);
    ep->peer_lid = r->lid;
    ep->rx_unreturned = r->credits;  /* UD: the peer endpoint's index; the top 16 bits number datagrams */
    rdmax_status st = rdmax__ep_set_remote(ep, r);
    if (st != RDMAX_OK)
        return st;
    /* one datagram: the path MTU, and no more than the peer can take after its GRH */
    uint32_t mtu = rdmax__mtu_bytes((enum ibv_mtu)(r->mtu < ctx->attr.active_mtu ? r->mtu : (unsigned)ctx->attr.active_mtu));
    ep->peer_recv_size = r->recv_size > RDMAX_UD_GRH && r->recv_size - RDMAX_UD_GRH < mtu ? r->recv_size - RDMAX_UD_GRH : mtu;
    ep->tx_credits = UINT32_MAX;
    ep->state = RDMAX_EP_CONNECTED;
    ep->blocked &= (uint8_t)~RDMAX__BLK_STATE;
    rdmax__ep_regate(ep);
    RDMAX__PROFILE_EVENT(ctx, RDMAX_PROFILE_EVENT_EP_CONNECTED, ep, r->qpn);
    return RDMAX_OK;
}

static void rdmax__ud_ctx_cleanup(rdmax_ctx *ctx)
{
    struct rdmax__ud *u = ctx->ud;
    if (!u)
        return;
    if (u->qp)
        ibv_destroy_qp(u->qp);
    if (u->rcq)
        ibv_destroy_cq(u->rcq);
    if (u->rmr)
        ibv_dereg_mr(u->rmr);
    rdmax_numa_free(ctx, u->rbufs, (size_t)u->rq_depth * u->recv_size);
    rdmax__free(ctx, u->rq_free);
    for (uint32_t i = 0; i < u->n; i++)
        ibv_destroy_ah(u->ahs[i].ah);
    rdmax__free(ctx, u->ahs);
    rdmax__free(ctx, u);
    ctx->ud = NULL;
}

static rdmax_status rdmax__ud_post_recvs(rdmax_ctx *ctx)
{
    struct rdmax__ud *u = ctx->ud;
    struct ibv_recv_wr wr[16], *bad;
    struct ibv_sge sge[16];
    while (u->rq_unposted > 0) {
        uint32_t k = u->rq_unposted < 16 ? u->rq_unposted : 16;
        for (uint32_t i = 0; i < k; i++) {
            uint32_t idx = u->rq_free[--u->rq_unposted];
            sge[i].addr = (uintptr_t)(u->rbufs + (size_t)idx * u->recv_size);
            sge[i].length = u->recv_size;
            sge[i].lkey = u->rmr->lkey;
            wr[i].wr_id = idx;
            wr[i].sg_list = &sge[i];
            wr[i].num_sge = 1;
            wr[i].next = i + 1 < k ? &wr[i + 1] : NULL;
        }
        ctx->cnt.recv_post_calls++;
        int rc = ibv_post_recv(u->qp, wr, &bad);
        if (rc) {
            for (struct ibv_recv_wr *w = bad; w; w = w->next)
                u->rq_free[u->rq_unposted++] = (uint32_t)w->wr_id;
            return RDMAX_ERR_IO;
        }
    }
    return RDMAX_OK;
}

/* The context's UD QP, made with its first UD endpoint: its send side shares the context's send CQ, and
   since every post holds one send-CQ credit, cq_depth work requests in flight can never overflow a send
   queue of that depth. */
static rdmax_status rdmax__ud_open(rdmax_ctx *ctx)
{
    struct rdmax__ud *u = rdmax__ud_state(ctx);
    if (!u)
        return RDMAX_ERR_NO_MEMORY;
    if (u->qp)
        return RDMAX_OK;
    const char *what = "ibv_create_cq";
    u->rq_depth = ctx->desc.ud_rq_depth;
    u->recv_size = ctx->attr.mtu_bytes + RDMAX_UD_GRH;
    size_t rbytes = (size_t)u->rq_depth * u->recv_size;
    u->rq_free = (uint32_t *)rdmax__alloc(ctx, u->rq_depth * sizeof *u->rq_free);
    u->rbufs = (char *)rdmax_numa_alloc(ctx, rbytes);
    if (!u->rq_free || !u->rbufs)
        return RDMAX_ERR_NO_MEMORY;
    u->rcq = ibv_create_cq(ctx->verbs, (int)u->rq_depth, NULL, ctx->channel, 0);
    if (u->rcq && (what = "ibv_reg_mr", u->rmr = ibv_reg_mr(ctx->pd, u->rbufs, rbytes, IBV_ACCESS_LOCAL_WRITE))) {
        struct ibv_qp_init_attr qa;
        memset(&qa, 0, sizeof qa);
        qa.send_cq = ctx->scq;
        qa.recv_cq = u->rcq;
        qa.qp_type = IBV_QPT_UD;
        qa.cap.max_send_wr = ctx->desc.cq_depth < ctx->attr.max_qp_wr ? ctx->desc.cq_depth : ctx->attr.max_qp_wr;
        qa.cap.max_recv_wr = u->rq_depth;
        qa.cap.max_send_sge = ctx->attr.max_sge < RDMAX_MAX_SGE ? ctx->attr.max_sge : RDMAX_MAX_SGE;
        qa.cap.max_recv_sge = 1;
        qa.cap.max_inline_data = ctx->attr.max_inline;
        what = "ibv_create_qp(UD)";
        u->qp = ibv_create_qp(ctx->pd, &qa);
    }
    struct ibv_qp_attr a;
    int rc = u->qp ? 0 : errno;
    if (!rc) {
        what = "ibv_modify_qp(UD, INIT)";
        memset(&a, 0, sizeof a);
        a.qp_state = IBV_QPS_INIT;
        a.pkey_index = ctx->desc.pkey_index;
        a.port_num = ctx->attr.port;
        a.qkey = RDMAX_UD_QKEY;
        rc = ibv_modify_qp(u->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
    }
    if (!rc) {
        what = "ibv_modify_qp(UD, RTR)";
        memset(&a, 0, sizeof a);
        a.qp_state = IBV_QPS_RTR;
        rc = ibv_modify_qp(u->qp, &a, IBV_QP_STATE);
    }
    if (!rc) {
        what = "ibv_modify_qp(UD, RTS)";
        a.qp_state = IBV_QPS_RTS;
        a.sq_psn = (u->qp->qp_num * 2654435761u) & 0xffffff;
        rc = ibv_modify_qp(u->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
    }
    if (!rc) {
        for (uint32_t i = 0; i < u->rq_depth; i++)
            u->rq_free[i] = i;
        u->rq_unposted = u->rq_depth;
        what = "ibv_post_recv(UD)";
        rc = rdmax__ud_post_recvs(ctx) == RDMAX_OK ? 0 : EIO;
    }
    if (rc || !u->rcq || !u->rmr) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_UD_QP,
                   "device %s: the context's UD QP: %s failed: %s", ctx->attr.name, what,
                   strerror(rc ? rc : errno));
        if (u->qp)
            ibv_destroy_qp(u->qp);
        u->qp = NULL;
        return RDMAX_ERR_IO;
    }
    return RDMAX_OK;
}

/* A UD endpoint: no QP of its own, only send slots; its index goes into our record for the peer. */
static rdmax_status rdmax__ud_ep_create(rdmax_ctx *ctx, rdmax_ep_desc *d, rdmax_ep **out)
{
    *out = NULL;
    rdmax_status st = rdmax__ud_open(ctx);
    if (st != RDMAX_OK)
        return st;
    if (!d->sq_depth)
        d->sq_depth = 32;  /* per peer: the QP's send queue is the context's */
    d->rq_depth = 0;
    return rdmax__ep_alloc(ctx, d, IBV_QPT_UD, out);
}

/* The context's one UD QP failed (an error receive completion or an asynchronous QP error): nothing
   will arrive or leave through it again, so every UD endpoint fails, idle receivers too. */
static void rdmax__ud_fail_all(rdmax_ctx *ctx, const char *why)
{
    struct ibv_qp *qp = ctx->ud->qp;
    for (uint32_t i = 0; i < ctx->eps_cap; i++) {
        rdmax_ep *ep = ctx->eps[i].ep;
        if (ep && ep->qp == qp)
            rdmax__ep_fail_why(ep, RDMAX_ERR_DEVICE, IBV_WC_FATAL_ERR, 0, "the context's UD QP failed: %s", why);
    }
}

/* The multicast group a datagram was sent to, from the GRH rxe puts in front of it (RoCE v2 over IPv4:
   an IPv4 header in the last 20 of its 40 bytes), as a GID; 0 if it was unicast. */
static int rdmax__ud_group(const uint8_t *grh, uint8_t gid[16])
{
    memset(gid, 0, 16);
    if ((grh[20] >> 4) == 4) {
        if ((grh[36] & 0xf0) != 0xe0)
            return 0;
        gid[10] = gid[11] = 0xff;
        memcpy(gid + 12, grh + 36, 4);
        return 1;
    }
    if (grh[24] != 0xff)
        return 0;
    memcpy(gid, grh + 24, 16);
    return 1;
}

/* Whether the datagram behind grh (the 40 bytes the device writes in front of it) came from gid: a QPN
   is only unique per device, the source address tells devices apart. An IPv6 header has the source GID
   at 8. RoCE v2 sends an IPv4-mapped GID's (::ffff:a.b.c.d) datagrams over IPv4: the device puts the
   IPv4 header (20 bytes, no options: 0x45) in the last 20 of the 40 (rxe zeroes the first 20; rdma-core's
   ibv_init_ah_from_wc reads it so), source address at 32. Either form may match; a datagram of the other
   form cannot pass for gid's: an IPv4 one has zeros where a mapped GID has 0xffff, an IPv6 one would need
   the receiver's own address to hold the peer's IPv4 address. */
static int rdmax__ud_from(const uint8_t *grh, const uint8_t gid[16])
{
    static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (grh[20] == 0x45 && !memcmp(grh + 32, gid + 12, 4) && !memcmp(gid, v4mapped, 12))
        return 1;
    return !memcmp(grh + 8, gid, 16);
}

/* Whether a datagram came from gid / lid: by the source GID of its GRH when it has one (RoCE always),
   else (InfiniBand within one subnet) by its source LID. */
static int rdmax__ud_sender(const struct ibv_wc *wc, const uint8_t *grh, const uint8_t gid[16], uint16_t lid)
{
    if (wc->wc_flags & IBV_WC_GRH)
        return rdmax__ud_from(grh, gid);
    return lid != 0 && wc->slid == lid;
}

/* A datagram out of its sender's numbering (rdmax__ud_poll_recv counts the in-order case). Ahead: the
   ones in between are skipped (lost, or late). Behind, within the last 64: late if not seen yet, else a
   duplicate; further back it cannot be told apart and counts as late. */
static void rdmax__ud_seq(rdmax_ctx *ctx, rdmax_ep *ep, uint16_t seq)
{
    uint16_t ahead = (uint16_t)(seq - ep->ud_rx_next);
    if (ahead < 0x8000) {
        ctx->cnt.ud_skipped += ahead;
        ep->ud_rx_seen = ahead >= 63 ? 1 : (ep->ud_rx_seen << (ahead + 1)) | 1;
        ep->ud_rx_next = (uint16_t)(seq + 1);
        return;
    }
    uint16_t back = (uint16_t)(ep->ud_rx_next - 1 - seq);
    if (back < 64 && (ep->ud_rx_seen >> back & 1)) {
        ctx->cnt.ud_duplicates++;
    } else {
        ctx->cnt.ud_late++;
        if (back < 64)
            ep->ud_rx_seen |= 1ull << back;
    }
}

static int rdmax__ud_poll_recv(rdmax_ctx *ctx)
{
    struct rdmax__ud *u = ctx->ud;
    struct ibv_wc wc[16];
    int n = ibv_poll_cq(u->rcq, 16, wc);
    if (n <= 0)
        return 0;
    ctx->cnt.cqes += (uint64_t)n;
    for (int i = 0; i < n; i++) {
        uint32_t idx = (uint32_t)wc[i].wr_id;
        if (rdmax_unlikely(idx >= u->rq_depth)) {
            ctx->cnt.stale_wr_ids++;
            continue;
        }
        u->rq_free[u->rq_unposted++] = idx;
        if (rdmax_unlikely(wc[i].status != IBV_WC_SUCCESS)) {
            if (wc[i].status == IBV_WC_WR_FLUSH_ERR)
                ctx->cnt.recv_flushed++;
            else
                ctx->cnt.err_cqes++;
            u->rq_unposted--;  /* not reposted: the QP is in error */
            rdmax__ud_fail_all(ctx, ibv_wc_status_str(wc[i].status));
            continue;
        }
        uint8_t *data = (uint8_t *)u->rbufs + (size_t)idx * u->recv_size;
        size_t len = wc[i].byte_len;
        if (rdmax_unlikely(len < RDMAX_UD_GRH)) {
            ctx->cnt.recv_drops++;
            continue;
        }
        len -= RDMAX_UD_GRH;
        rdmax_ep *ep = NULL;
        uint8_t g[16];
        if ((wc[i].wc_flags & IBV_WC_GRH) && rdmax__ud_group(data, g)) {  /* no GRH: a stale buffer */
            for (uint32_t k = 0; k < u->n_groups; k++)
                if (!memcmp(u->groups[k].gid, g, 16) && RDMAX__REF_GEN(&ctx->eps[u->groups[k].ep_idx]) == u->groups[k].gen)
                    ep = ctx->eps[u->groups[k].ep_idx].ep;
        } else if (rdmax_likely(wc[i].wc_flags & IBV_WC_WITH_IMM)) {
            /* our index, the datagram's number */
            uint32_t imm = RDMAX__LE32(wc[i].imm_data), e = imm & 0xffff;
            if (e < ctx->eps_cap && (ep = ctx->eps[e].ep) != NULL) {
                /* The sender must be the endpoint's peer: its QPN, and its GID (a QPN is only unique per
                   device; at most a 16-byte compare, the GRH just written and the endpoint just read). */
                if (rdmax_unlikely(ep->ud_qpn != wc[i].src_qp ||
                                   !rdmax__ud_sender(&wc[i], data, ep->peer_gid, ep->peer_lid))) {
                    ctx->cnt.ud_wrong_source++;  /* and a drop, below */
                    ep = NULL;
                } else if (rdmax_likely((uint16_t)(imm >> 16) == ep->ud_rx_next)) {
                    ep->ud_rx_next++;
                    ep->ud_rx_seen = ep->ud_rx_seen << 1 | 1;
                } else {
                    rdmax__ud_seq(ctx, ep, (uint16_t)(imm >> 16));
                }
            }
        } else if (len == 0 && wc[i].src_qp == u->qp->qp_num &&
                   rdmax__ud_sender(&wc[i], data, ctx->attr.gid.raw, ctx->attr.lid)) {
            /* Our flush marker (rdmax_ep_flush): the one datagram rdmax sends without immediate data, so a
               user's empty datagram (rdmax_send always carries it) is never taken for one. */
            continue;
        }
        if (!ep || ep->recv_cb == rdmax__recv_drop) {  /* a group member need not be connected to anyone */
            ctx->cnt.recv_drops++;  /* no endpoint of ours for this sender */
            continue;
        }
        ctx->cnt.recv_msgs++;
        ctx->cnt.recv_bytes += len;
        ep->recv_cb(ep, data + RDMAX_UD_GRH, len, ep->user);
    }
    if (u->rq_unposted >= 16)
        rdmax__ud_post_recvs(ctx);
    return n;
}

/* ---- >>mcast: UD multicast: joins through rdma_cm or the direct attach, leaving ------------------ */

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
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MCAST,
                   "multicast: '%s' is not an IPv4 multicast address (224.0.0.0/4)", group);
        return RDMAX_ERR_INVALID_PARAM;
    }
    memset(mgid, 0, sizeof *mgid);  /* RoCE v2 carries IPv4 groups as IPv4-mapped GIDs */
    mgid->raw[10] = mgid->raw[11] = 0xff;
    memcpy(mgid->raw + 12, &ga->s_addr, 4);
    return RDMAX_OK;
}

/* Whether this context joins through rdma_cm (1) or attaches directly (0); the direct attach asks no
   subnet manager, so InfiniBand cannot use it, and it derives the MGID from an IPv4-mapped GID. */
static rdmax_status rdmax__mcast_path(rdmax_ctx *ctx, const char *group, int *cm)
{
    struct in_addr ifa;
    *cm = ctx->desc.mcast_join != RDMAX_MCAST_ATTACH;
    if (*cm)
        return RDMAX_OK;
    if (ctx->attr.link_layer == IBV_LINK_LAYER_INFINIBAND) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MCAST,
                   "multicast: joining %s on device %s: mcast_join RDMAX_MCAST_ATTACH cannot join on an InfiniBand "
                   "port (the subnet manager must be asked): use RDMAX_MCAST_CM", group, ctx->attr.name);
        return RDMAX_ERR_UNSUPPORTED;
    }
    if (rdmax__gid_ipv4(ctx, &ifa)) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MCAST,
                   "multicast: joining %s with RDMAX_MCAST_ATTACH: device %s GID %d is not IPv4-mapped", group,
                   ctx->attr.name, ctx->attr.gid_index);
        return RDMAX_ERR_UNSUPPORTED;
    }
    return RDMAX_OK;
}

/* g->id bound to a local IPv4 address of this context's device and port: desc.mcast_addr, else the one
   in our IPv4-mapped GID, else the first interface address rdma_cm binds to the device (IPoIB). */
static rdmax_status rdmax__mcast_bind(rdmax_ctx *ctx, struct rdmax__mcast_group *g, const char *group)
{
    struct in_addr cand[16];
    int n = 0;
    if (ctx->mcast_addr.s_addr)
        cand[n++] = ctx->mcast_addr;
    else if (!rdmax__gid_ipv4(ctx, &cand[0]))
        n = 1;
    else {
        struct ifaddrs *ifs = NULL;
        if (getifaddrs(&ifs) == 0)
            for (struct ifaddrs *i = ifs; i && n < 16; i = i->ifa_next)
                if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && !(i->ifa_flags & IFF_LOOPBACK))
                    cand[n++] = ((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr;
        freeifaddrs(ifs);
    }
    char why[160] = "no local IPv4 address to try";
    for (int i = 0; i < n; i++) {
        char a[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &cand[i], a, sizeof a);
        if (rdma_create_id(g->ch, &g->id, NULL, RDMA_PS_UDP)) {
            snprintf(why, sizeof why, "rdma_create_id failed: %s", strerror(errno));
            g->id = NULL;
            break;
        }
        struct sockaddr_in sa;
        memset(&sa, 0, sizeof sa);
        sa.sin_family = AF_INET;
        sa.sin_addr = cand[i];
        if (rdma_bind_addr(g->id, (struct sockaddr *)&sa))
            snprintf(why, sizeof why, "rdma_bind_addr(%s) failed: %s", a, strerror(errno));
        else if (!g->id->verbs || strcmp(ibv_get_device_name(g->id->verbs->device), ctx->attr.name) ||
                 g->id->port_num != ctx->attr.port)
            snprintf(why, sizeof why, "%s is on device %s port %u", a,
                     g->id->verbs ? ibv_get_device_name(g->id->verbs->device) : "(none)", g->id->port_num);
        else
            return RDMAX_OK;
        rdma_destroy_id(g->id);
        g->id = NULL;
    }
    rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MCAST,
               "multicast: joining %s on device %s port %u: rdma_cm binds no local IPv4 address to this port (%s); "
               "give its netdev an IPv4 address or name one in rdmax_ctx_desc.mcast_addr", group, ctx->attr.name,
               ctx->attr.port, why);
    return RDMAX_ERR_NO_DEVICE;
}

/* Leave g's group through rdma_cm (joined: it was) and free its id and channel. The id has no QP, so
   librdmacm detaches nothing: rdmax__mcast_drop detaches ours. */
static void rdmax__mcast_cm_close(struct rdmax__mcast_group *g, int joined)
{
    if (g->id) {
        struct sockaddr_in ma;
        memset(&ma, 0, sizeof ma);
        ma.sin_family = AF_INET;
        ma.sin_addr = g->group;
        if (joined)
            rdma_leave_multicast(g->id, (struct sockaddr *)&ma);
        rdma_destroy_id(g->id);  /* every event read was acked: this does not wait */
    }
    if (g->ch)
        rdma_destroy_event_channel(g->ch);
    g->id = NULL;
    g->ch = NULL;
}

/* Join g->group through rdma_cm on a channel of its own, and wait (bounded) for the event: its UD
   parameters (address handle attributes with the MGID and MLID, QPN, Q_Key) go to *ud. */
static rdmax_status rdmax__mcast_cm_join(rdmax_ctx *ctx, struct rdmax__mcast_group *g, const char *group,
                                         struct rdma_ud_param *ud)
{
    if (!(g->ch = rdma_create_event_channel())) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MCAST,
                   "multicast: joining %s on device %s: rdma_create_event_channel failed: %s (rdma_cm is needed; "
                   "is the rdma_ucm module loaded?)", group, ctx->attr.name, strerror(errno));
        return RDMAX_ERR_NO_DEVICE;
    }
    fcntl(g->ch->fd, F_SETFL, fcntl(g->ch->fd, F_GETFL) | O_NONBLOCK);  /* our own channel */
    rdmax_status st = rdmax__mcast_bind(ctx, g, group);
    struct sockaddr_in ma;
    memset(&ma, 0, sizeof ma);
    ma.sin_family = AF_INET;
    ma.sin_addr = g->group;
    if (st == RDMAX_OK && rdma_join_multicast(g->id, (struct sockaddr *)&ma, NULL)) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MCAST, "multicast: rdma_join_multicast(%s) on device %s failed: %s",
                   group, ctx->attr.name, strerror(errno));
        st = RDMAX_ERR_IO;
    }
    int64_t deadline = rdmax__now_ms() + RDMAX__MCAST_JOIN_MS;
    while (st == RDMAX_OK) {
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(g->ch, &ev) == 0) {
            enum rdma_cm_event_type t = ev->event;
            int status = ev->status;
            if (t == RDMA_CM_EVENT_MULTICAST_JOIN && status == 0)
                *ud = ev->param.ud;
            rdma_ack_cm_event(ev);
            if (t == RDMA_CM_EVENT_MULTICAST_JOIN && status == 0)
                return RDMAX_OK;
            rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MCAST,
                       "multicast: joining %s on device %s: rdma_cm answered %s (status %d: %s)", group,
                       ctx->attr.name, rdma_event_str(t), status, strerror(status < 0 ? -status : status));
            st = RDMAX_ERR_IO;
            break;
        }
        int64_t left = deadline - rdmax__now_ms();
        if ((errno != EAGAIN && errno != EWOULDBLOCK) || left <= 0) {
            rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MCAST, left <= 0
                       ? "multicast: joining %s on device %s: no answer from rdma_cm within %d ms%s (on InfiniBand: "
                         "is a subnet manager running?)"
                       : "multicast: joining %s on device %s: rdma_get_cm_event failed after %d ms: %s", group,
                       ctx->attr.name, RDMAX__MCAST_JOIN_MS, left <= 0 ? "" : strerror(errno));
            st = left <= 0 ? RDMAX_ERR_TIMEOUT : RDMAX_ERR_IO;
            break;
        }
        struct pollfd p = {g->ch->fd, POLLIN, 0};
        poll(&p, 1, (int)left);
    }
    rdmax__mcast_cm_close(g, 0);  /* destroying the id cancels a join still under way */
    return st;
}

/* Undo one group of ep: detach the QP, then leave (rdma_cm, or close the IP-level socket). */
static int rdmax__mcast_drop(rdmax_ep *ep, struct rdmax__mcast_group *g)
{
    int rc = 0;
    struct rdmax__ud *u = ep->ctx->ud;
    if (g->fd != -2) {  /* -2: a sending endpoint's group, nothing attached */
        for (uint32_t k = 0; k < u->n_groups; k++)
            if (!memcmp(u->groups[k].gid, g->mgid.raw, 16)) {
                u->groups[k] = u->groups[--u->n_groups];
                break;
            }
        rc = ibv_detach_mcast(ep->qp, &g->mgid, g->mlid);
    }
    if (g->fd >= 0)
        close(g->fd);  /* closing the socket leaves the IP group */
    rdmax__mcast_cm_close(g, 1);
    return rc;
}

rdmax_status rdmax_mcast_join(rdmax_ep *ep, const char *group)
{
    rdmax_ctx *ctx = ep->ctx;
    struct rdmax__mcast_group g;
    memset(&g, 0, sizeof g);
    g.fd = -1;
    int cm;
    rdmax_status st = rdmax__mcast_gid(ctx, group, &g.group, &g.mgid);
    if (st != RDMAX_OK)
        return st;
    if (ep->qp->qp_type != IBV_QPT_UD) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MCAST,
                   "multicast: endpoint qpn 0x%x is not UD", ep->qp->qp_num);
        return RDMAX_ERR_UNSUPPORTED;
    }
    if ((st = rdmax__mcast_path(ctx, group, &cm)) != RDMAX_OK)
        return st;
    if (!ep->mcast && !(ep->mcast = (struct rdmax__mcast *)rdmax__alloc(ctx, sizeof *ep->mcast)))
        return RDMAX_ERR_NO_MEMORY;
    if (ep->mcast->n == RDMAX__MCAST_MAX) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MCAST, "multicast: joining %s: this endpoint already joined %d groups, "
                   "the most one endpoint may", group, RDMAX__MCAST_MAX);
        return RDMAX_ERR_NO_RESOURCE;
    }
    struct rdmax__ud *u = ctx->ud;
    for (uint32_t k = 0; k < u->n_groups; k++)
        if (u->groups[k].group.s_addr == g.group.s_addr) {
            rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MCAST,
                       "multicast: %s is already joined by another endpoint of this context "
                       "(datagrams to a group go to one endpoint)", group);
            return RDMAX_ERR_INVALID_PARAM;
        }
    if (u->n_groups == RDMAX__UD_GROUPS) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MCAST, "multicast: joining %s: the endpoints of this context already "
                   "joined %d groups, the most one context may", group, RDMAX__UD_GROUPS);
        return RDMAX_ERR_NO_RESOURCE;
    }
    if (cm) {
        struct rdma_ud_param ud;
        if ((st = rdmax__mcast_cm_join(ctx, &g, group, &ud)) != RDMAX_OK)
            return st;
        g.mgid = ud.ah_attr.grh.dgid;  /* what the group is on the wire (the GRH's destination) */
        g.mlid = ud.ah_attr.dlid;
        if (ud.qkey != RDMAX_UD_QKEY) {  /* the QP would drop the group's datagrams */
            rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MCAST,
                       "multicast: %s has Q_Key 0x%x, the context's UD QP 0x%x: it can be sent to "
                       "(rdmax_mcast_ep_create), not received", group, ud.qkey, RDMAX_UD_QKEY);
            g.fd = -2;
            rdmax__mcast_drop(ep, &g);
            return RDMAX_ERR_UNSUPPORTED;
        }
    } else {
        /* The netdev must be a member at the IP level too, or the kernel drops the group's packets before
           they reach rxe; a socket holds that membership for as long as it is open (rdma_cm does this
           itself). */
        struct ip_mreq mr;
        mr.imr_multiaddr = g.group;
        rdmax__gid_ipv4(ctx, &mr.imr_interface);
        g.fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (g.fd < 0 || setsockopt(g.fd, IPPROTO_IP, IP_ADD_MEMBERSHIP, &mr, sizeof mr)) {
            rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MCAST,
                       "multicast: joining %s on device %s: IP_ADD_MEMBERSHIP failed: %s", group,
                       ctx->attr.name, strerror(errno));
            if (g.fd >= 0)
                close(g.fd);
            return RDMAX_ERR_IO;
        }
    }
    int rc = ibv_attach_mcast(ep->qp, &g.mgid, g.mlid);
    if (rc) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MCAST,
                   "multicast: ibv_attach_mcast(%s) on device %s qpn 0x%x failed: %s", group,
                   ctx->attr.name, ep->qp->qp_num, strerror(rc));
        if (g.fd >= 0)
            close(g.fd);
        rdmax__mcast_cm_close(&g, 1);
        return RDMAX_ERR_IO;
    }
    char mg[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, g.mgid.raw, mg, sizeof mg);
    rdmax__log(ctx, RDMAX_LOG_INFO, RDMAX_LOG_ITEM_MCAST, "multicast: joined %s %s on device %s: MGID %s, MLID 0x%x",
               group, cm ? "through rdma_cm" : "by ibv_attach_mcast", ctx->attr.name, mg, g.mlid);
    ep->mcast->g[ep->mcast->n++] = g;
    uint32_t idx = (uint32_t)(ep->wr_id_base >> 32) & 0xffff;
    memcpy(u->groups[u->n_groups].gid, g.mgid.raw, 16);
    u->groups[u->n_groups].group = g.group;
    u->groups[u->n_groups].ep_idx = idx;
    u->groups[u->n_groups].gen = RDMAX__REF_GEN(&ctx->eps[idx]);
    u->n_groups++;
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
        if (m->g[i].group.s_addr != ga.s_addr || m->g[i].fd == -2)
            continue;
        int rc = rdmax__mcast_drop(ep, &m->g[i]);
        m->g[i] = m->g[--m->n];
        if (rc) {
            rdmax__log(ep->ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MCAST,
                       "multicast: ibv_detach_mcast(%s) failed: %s", group, strerror(rc));
            return RDMAX_ERR_IO;
        }
        return RDMAX_OK;
    }
    rdmax__log(ep->ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MCAST, "multicast: endpoint has not joined %s", group);
    return RDMAX_ERR_INVALID_PARAM;
}

static void rdmax__ud_ep_cleanup(rdmax_ep *ep)
{
    struct rdmax__mcast *m = ep->mcast;
    for (uint32_t i = 0; m && i < m->n; i++)
        rdmax__mcast_drop(ep, &m->g[i]);  /* the shared QP stays: detach and leave what this endpoint joined */
    rdmax__free(ep->ctx, m);
    ep->mcast = NULL;
}

rdmax_status rdmax_mcast_ep_create(rdmax_ctx *ctx, const rdmax_ep_desc *desc, const char *group, rdmax_ep **out)
{
    struct rdmax__mcast_group g;
    memset(&g, 0, sizeof g);
    g.fd = -2;  /* nothing attached: a sender */
    int cm;
    *out = NULL;
    rdmax_status st = rdmax__mcast_gid(ctx, group, &g.group, &g.mgid);
    if (st == RDMAX_OK)
        st = rdmax__mcast_path(ctx, group, &cm);
    if (st != RDMAX_OK)
        return st;
    rdmax_conn_record r;
    memset(&r, 0, sizeof r);
    r.transport = RDMAX_TRANSPORT_ID_UD;
    r.mtu = (uint8_t)ctx->attr.active_mtu;
    r.qpn = 0xffffff;  /* the multicast QPN */
    r.qkey = RDMAX_UD_QKEY;
    r.recv_size = ctx->attr.mtu_bytes + RDMAX_UD_GRH;
    memcpy(r.gid, g.mgid.raw, 16);  /* the direct path: RoCE, routed by the GID */
    if (cm) {
        /* the group's address, QPN and Q_Key as rdma_cm gives them; its address handle made from the
           event's attributes, in the cache under the MGID (and MLID) that rdmax__ud_connect looks up */
        struct rdma_ud_param ud;
        if ((st = rdmax__mcast_cm_join(ctx, &g, group, &ud)) != RDMAX_OK)
            return st;
        g.mgid = ud.ah_attr.grh.dgid;
        g.mlid = ud.ah_attr.dlid;
        memcpy(r.gid, g.mgid.raw, 16);
        r.lid = ctx->attr.link_layer == IBV_LINK_LAYER_INFINIBAND ? g.mlid : 0;
        r.qpn = ud.qp_num;
        r.qkey = ud.qkey;
        if (!rdmax__ah_cached(ctx, r.gid, r.lid, &ud.ah_attr)) {
            rdmax__mcast_cm_close(&g, 1);
            return RDMAX_ERR_IO;
        }
    }
    if ((st = rdmax__ep_create(ctx, desc, RDMAX_TRANSPORT_ID_UD, out)) != RDMAX_OK ||
        (!(*out)->mcast && !((*out)->mcast = (struct rdmax__mcast *)rdmax__alloc(ctx, sizeof *(*out)->mcast)))) {
        rdmax__mcast_cm_close(&g, 1);
        if (*out)
            rdmax_ep_destroy(*out);
        *out = NULL;
        return st != RDMAX_OK ? st : RDMAX_ERR_NO_MEMORY;
    }
    (*out)->mcast->g[(*out)->mcast->n++] = g;  /* rdmax_ep_destroy leaves the group */
    snprintf((*out)->peer, sizeof (*out)->peer, "%s", group);
    if ((st = rdmax__ud_connect(*out, &r)) != RDMAX_OK) {
        rdmax_ep_destroy(*out);
        *out = NULL;
    }
    return st;
}
#endif /* RDMAX__HAS_UD */

/* ---- >>arbiter: the arbiter's out-of-line paths (the pending queue's scheduler) ------------------ */

/* Is group the one whose element is in a callback right now? Until the callback does something to its
   own group that group is arb->current (disp 0); from then on disp names it (GONE: none). No user code
   runs in a dispatch outside its callbacks. */
RDMAX_INLINE bool rdmax__arb_in_cb(const rdmax__arb *arb, const rdmax__arb_group *group)
{
    if (arb->disp == 0) {
        return arb->in_dispatch && arb->current == group;
    }
    return (arb->disp & ~RDMAX__ARB_DISP_FLAGS) == (uintptr_t)group;
}

/* Take g out of whichever ring holds it (its state says which). */
RDMAX_INLINE void rdmax__arb_leave(rdmax__arb *arb, rdmax__arb_group *g)
{
    if (g->state == RDMAX__ARB_SCHED) {
        rdmax__arb_ring_remove(arb, &arb->current, g);
    } else if (g->state == RDMAX__ARB_RESCHED) {
        rdmax__arb_ring_remove(arb, &arb->resched, g);
    }
}

RDMAX_API void rdmax__arb_group_push_head(rdmax__arb *arb, rdmax__arb_group *group, rdmax__arb_elem *elem)
{
    RDMAX_ASSERT(elem->next == NULL);
    if (group->head == NULL) {
        elem->next = RDMAX__ARB_END;
        group->tail = elem;
    } else {
        elem->next = group->head;
    }
    group->head = elem;
    /* The element in the callback is unlinked; if it is kept it must land behind this one. Later
       push_heads go in front of this one, so the first one pushed marks the spot. */
    if (!(arb->disp & RDMAX__ARB_HEADS) && rdmax__arb_in_cb(arb, group)) {
        arb->disp_after = elem;
        arb->disp = (uintptr_t)group | (arb->disp & RDMAX__ARB_MOVED) | RDMAX__ARB_HEADS;
    }
    group->count++;
    arb->pending++;
}

RDMAX_API void rdmax__arb_group_desched(rdmax__arb *arb, rdmax__arb_group *group)
{
    if (!(group->state & RDMAX__ARB_SCHED)) {
        return;
    }
    if (rdmax__arb_in_cb(arb, group)) { /* before leaving: that moves arb->current */
        arb->disp = (uintptr_t)group | (arb->disp & RDMAX__ARB_HEADS) | RDMAX__ARB_MOVED;
    }
    rdmax__arb_leave(arb, group);
    group->state = RDMAX__ARB_DESCHED;
}

RDMAX_API void rdmax__arb_group_purge(rdmax__arb *arb, rdmax__arb_group *group, rdmax__arb_purge_cb cb,
                                     void *arg)
{
    rdmax__arb_elem *elem = group->head;
    rdmax__arb_elem *next;

    /* The dispatcher must forget this group and its element in flight: that is the whole
       destroy-inside-callback protection. group->count includes that element, so pending drops by it.
       (Tested before leaving: that moves arb->current.) */
    if (rdmax__arb_in_cb(arb, group)) {
        arb->disp = RDMAX__ARB_GONE;
    }
    for (int i = 0; i < RDMAX__ARB_AHEAD; i++) {
        if (arb->hist[i] == group) {
            arb->hist[i] = NULL; /* it may be freed next: the dispatcher must not write to it */
        }
    }
    rdmax__arb_leave(arb, group);
    group->state = RDMAX__ARB_IDLE;
    arb->pending -= group->count;
    group->count = 0;
    group->head = NULL;
    group->tail = NULL;

    /* The queue is detached first, so cb sees a consistent, empty group (and may push to it). */
    while (elem != NULL) {
        next = elem->next == RDMAX__ARB_END ? NULL : elem->next;
        elem->next = NULL;
        if (cb != NULL) {
            cb(arb, group, elem, arg);
        }
        elem = next;
    }
}

RDMAX_API void rdmax__arb_group_cleanup(rdmax__arb *arb, rdmax__arb_group *group)
{
    rdmax__arb_group_purge(arb, group, NULL, NULL);
}

/* Leave the hint for the next round: in the group visited RDMAX__ARB_AHEAD visits before g (mode
   RDMAX__ARB_NEAR: half as many), a pointer to g and to its head element (see the prefetch in
   rdmax__arb_run). In mode RDMAX__ARB_NEAR nothing is written once the hints are exact: every hint
   set since the rings last changed points to a group scheduled then and still, and once that has
   been a whole round (arb->ngroups hints after the first RDMAX__ARB_AHEAD, which only refill hist),
   every scheduled group carries one. Any change of the rings starts the count again. */
RDMAX_INLINE void rdmax__arb_hint(rdmax__arb *arb, rdmax__arb_group *g, size_t *pos, const int mode)
{
    if (mode == RDMAX__ARB_NEAR) {
        if (rdmax_likely(arb->hints_set == RDMAX__ARB_EXACT)) {
            return;
        }
        if (++arb->hints_set >= arb->ngroups + RDMAX__ARB_AHEAD) {
            arb->hints_set = RDMAX__ARB_EXACT;
        }
    }
    size_t i = (*pos + 1) & (RDMAX__ARB_AHEAD - 1);
    *pos = i;
    rdmax__arb_group *back =
        arb->hist[mode == RDMAX__ARB_NEAR ? (i + RDMAX__ARB_AHEAD / 2) & (RDMAX__ARB_AHEAD - 1) : i];
    if (back != NULL) {
        back->ahead = g;
        back->ahead_head = g->head;
    }
    arb->hist[i] = g;
}

/* The dispatch loop. Compiled four times, each a function of its own (so that each gets the registers
   to itself): per_group 1 (what RC and UD use) without hints, with far hints and with near ones
   (constants, so that no loop tests them), and a general one. Returns the removals and leaves
   arb->mark at the last mark used. hints: 0, RDMAX__ARB_FAR or RDMAX__ARB_NEAR (see rdmax.h). */
RDMAX_INLINE size_t rdmax__arb_run(rdmax__arb *arb, unsigned per_group, rdmax__arb_cb cb, void *arg,
                                   const int hints, const int one)
{
    rdmax__arb_group *g = arb->current;
    rdmax__arb_elem *elem, *next, *after;
    rdmax__arb_result r = RDMAX__ARB_CB_REMOVE;
    uintptr_t did;
    size_t removed = 0;
    unsigned left;
    uint32_t mark = 0;
    size_t pos = hints ? arb->hist_pos : 0; /* in a register while the loop runs (no callback
                                                touches it) */
    /* The end of a lap without a removal: a callback that removes nothing marks its group with
       first + removed (the removals so far), and before the next group is served after such a callback,
       a group carrying that very mark means the dispatcher went round the whole ring since the last
       removal (groups join at the tail, and current only moves on), every group tried once and none
       removed anything: stop. A removal changes the mark, so a callback that returns REMOVE costs
       nothing here. The marks of one dispatch are first ... first + removed, above those of every
       earlier dispatch and above 0, the mark of a new group. (Only a group left unmarked for 2^32
       removals can match by chance: one dispatch then returns early, which the next one makes good.) */
    const uint32_t first = arb->mark + 1;

    if (g == NULL) {
        goto out;
    }
    for (;;) {
    visit:
        /* A visit: g is arb->current. With many endpoints every group and head element is a cache miss,
           and walking a ring is a chain of dependent loads: no prefetch of "the next group" can run
           ahead of it. So each visit leaves a hint in the group visited RDMAX__ARB_AHEAD visits earlier
           (rdmax__arb_hint), and the next round prefetches that far ahead through the hints, several
           misses in flight at once. (No prefetch of g->rnext besides: it could start at most one
           callback before the load that follows that callback, and it measured slower.) */
        if (hints == RDMAX__ARB_NEAR && rdmax_likely(arb->hints_set == RDMAX__ARB_EXACT)) {
            /* Exact hints: g->ahead, the group RDMAX__ARB_AHEAD / 2 visits on, is scheduled (so it
               may be read), and its line was prefetched that many visits ago: its own hint gives
               the group RDMAX__ARB_AHEAD visits on, and its head the element it will serve. No
               hint is written, so a visit stores nothing for them. */
            rdmax__arb_group *ahead = g->ahead;
            __builtin_prefetch(ahead->ahead);
            __builtin_prefetch(ahead->head);
        } else if (hints) {
            __builtin_prefetch(g->ahead);
            __builtin_prefetch(g->ahead_head);
        }
        left = per_group;
        for (;;) {
            elem = g->head;
            RDMAX_ASSERT(elem != NULL && g->count > 0);
            next = elem->next;
            /* next, or NULL for END (1: element addresses are even); an empty group's tail is stale */
            g->head = (rdmax__arb_elem *)((uintptr_t)next & ~(uintptr_t)RDMAX__ARB_END);
            elem->next = NULL; /* unlinked: the callback may free it or push it again */

            r = cb(arb, g, elem, arg); /* g is arb->current, and arb->disp 0 */

            if (rdmax_likely(((uintptr_t)r | arb->disp) == 0)) {
                /* the common case: the callback returned REMOVE (0) and did nothing to its own group
                   (disp 0): one test for both */
                removed++;
                arb->pending--;
                if (one && hints) {
                    rdmax__arb_hint(arb, g, &pos, hints); /* with per_group 1 the visit ends here */
                }
                if (--g->count == 0) {
                    rdmax__arb_leave(arb, g); /* an empty group never stays in the arbiter */
                    g->state = RDMAX__ARB_IDLE;
                    if (one) {
                        g = NULL; /* hinted above */
                    }
                    break;
                }
                if (!one && --left != 0) {
                    continue;
                }
                /* g is still current (only its own desched or purge, flagged in arb->disp, or a
                   result other than REMOVE moves it), so the next group is its successor */
                if (!one && hints) {
                    rdmax__arb_hint(arb, g, &pos, hints);
                }
                g = g->rnext;
                arb->current = g;
                goto visit; /* never NULL: g is in the ring */
            }

            did = arb->disp; /* what the callback did to its own group (0 again for the next one) */
            arb->disp = 0;
            if (did == RDMAX__ARB_GONE) {
                /* The callback purged or destroyed g: neither g nor elem may be touched. */
                g = NULL;
                removed += (r == RDMAX__ARB_CB_REMOVE);
                if ((unsigned)r >= RDMAX__ARB_CB_STOP) {
                    goto out;
                }
                break;
            }
            if (r == RDMAX__ARB_CB_REMOVE) {
                removed++;
                g->count--;
                arb->pending--;
            } else if (rdmax_unlikely(elem->next != NULL)) {
                /* Kept, but the callback queued it again: the new position wins, the old one goes. */
                g->count--;
                arb->pending--;
            } else {
                /* Kept: back to the head, behind anything push_head'ed during the callback. */
                after = (did & RDMAX__ARB_HEADS) ? arb->disp_after : NULL;
                if (after == NULL) {
                    if (g->head == NULL) {
                        elem->next = RDMAX__ARB_END;
                        g->tail = elem;
                    } else {
                        elem->next = g->head;
                    }
                    g->head = elem;
                } else {
                    elem->next = after->next;
                    after->next = elem;
                    if (g->tail == after) {
                        g->tail = elem;
                    }
                }
            }

            if (g->count == 0) {
                rdmax__arb_leave(arb, g);
                g->state = RDMAX__ARB_IDLE;
                break;
            }
            if (did & RDMAX__ARB_MOVED) {
                /* The callback descheduled (and maybe rescheduled) its own group: keep that. */
                if ((unsigned)r >= RDMAX__ARB_CB_STOP) {
                    goto out;
                }
                break;
            }

            if (r == RDMAX__ARB_CB_REMOVE) {
                if (!one && --left != 0) {
                    continue;
                }
                arb->current = g->rnext;
            } else if (r == RDMAX__ARB_CB_NEXT_GROUP) {
                arb->current = g->rnext;
            } else if (r == RDMAX__ARB_CB_DESCHED) {
                rdmax__arb_ring_remove(arb, &arb->current, g);
                g->state = RDMAX__ARB_DESCHED;
            } else if (r == RDMAX__ARB_CB_RESCHED) {
                rdmax__arb_ring_remove(arb, &arb->current, g);
                rdmax__arb_ring_insert(arb, &arb->resched, g);
                g->state = RDMAX__ARB_RESCHED;
            } else {
                goto out; /* STOP (or an unknown value): g stays first for the next dispatch */
            }
            break;
        }

        /* The visit is over, and g (if not purged) may have left the ring: the next group is whatever
           is current now. */
        if (r != RDMAX__ARB_CB_REMOVE) {
            mark = first + (uint32_t)removed;
            if (g != NULL) {
                g->mark = mark;
            }
        }
        if (hints && g != NULL) {
            rdmax__arb_hint(arb, g, &pos, hints);
        }
        g = arb->current;
        if (g == NULL || (r != RDMAX__ARB_CB_REMOVE && g->mark == mark)) {
            break; /* nothing scheduled, or the end of a lap without a removal (see above) */
        }
    }

out:
    if (hints) {
        arb->hist_pos = (uint32_t)pos;
    }
    arb->mark = first + (uint32_t)removed;
    return removed;
}

static __attribute__((noinline)) size_t rdmax__arb_run_one(rdmax__arb *arb, rdmax__arb_cb cb, void *arg)
{
    return rdmax__arb_run(arb, 1, cb, arg, 0, 1);
}

static __attribute__((noinline)) size_t rdmax__arb_run_one_far(rdmax__arb *arb, rdmax__arb_cb cb, void *arg)
{
    return rdmax__arb_run(arb, 1, cb, arg, RDMAX__ARB_FAR, 1);
}

static __attribute__((noinline)) size_t rdmax__arb_run_one_near(rdmax__arb *arb, rdmax__arb_cb cb, void *arg)
{
    return rdmax__arb_run(arb, 1, cb, arg, RDMAX__ARB_NEAR, 1);
}

static __attribute__((noinline)) size_t rdmax__arb_run_any(rdmax__arb *arb, unsigned per_group,
                                                           rdmax__arb_cb cb, void *arg, int hints)
{
    return rdmax__arb_run(arb, per_group, cb, arg, hints, 0);
}

RDMAX_API size_t rdmax__arb_dispatch_nonempty(rdmax__arb *arb, unsigned per_group, rdmax__arb_cb cb,
                                              void *arg)
{
    rdmax__arb_group *g;
    size_t removed;

    if (rdmax_unlikely(arb->in_dispatch)) {
        return 0; /* called from a callback: the running dispatch will get to everything */
    }
    arb->in_dispatch = 1;
    if (per_group == 0) {
        per_group = 1;
    }
    /* Hints pay only when the rings outgrow the first-level cache; below that they are instructions
       for nothing. Near ones (see rdmax.h) while the rings are small enough to stay in the caches
       close by, far ones beyond. */
    const int hints = arb->ngroups > RDMAX__ARB_HINT_MIN;
    if (per_group != 1) {
        removed = rdmax__arb_run_any(arb, per_group, cb, arg, hints ? RDMAX__ARB_FAR : 0);
    } else if (!hints) {
        removed = rdmax__arb_run_one(arb, cb, arg);
    } else if (arb->ngroups <= RDMAX__ARB_NEAR_MAX) {
        removed = rdmax__arb_run_one_near(arb, cb, arg);
    } else {
        removed = rdmax__arb_run_one_far(arb, cb, arg);
    }

    RDMAX_ASSERT(arb->disp == 0); /* every callback's record was consumed */
    /* Parked groups rejoin at the tail, in the order they left. */
    while ((g = arb->resched) != NULL) {
        rdmax__arb_ring_remove(arb, &arb->resched, g);
        rdmax__arb_ring_insert(arb, &arb->current, g);
        g->state = RDMAX__ARB_SCHED;
    }
    arb->in_dispatch = 0;
    return removed;
}

/* ---- >>rcache_index: registration cache: the radix page table, region slots, the LRU ------------- */

RDMAX_STATIC_ASSERT(sizeof(rdmax_rcache_region) <= 128, "rdmax: region must fit its 128-byte slot");

static const unsigned rdmax__rcache_shift[4] = {RDMAX__RCACHE_SHIFT0, RDMAX__RCACHE_SHIFT1, RDMAX__RCACHE_SHIFT2, 0};
static const unsigned rdmax__rcache_fan[4] = {RDMAX__RCACHE_FAN0, RDMAX__RCACHE_FAN1, RDMAX__RCACHE_FAN2, RDMAX__RCACHE_FAN3};

/* The cache's own memory comes from its desc's allocator (a context's cache: the context's). The
   monitor's memo of watched extents is the process's, not a cache's: RDMAX_MALLOC. */
static void *rdmax__rcache_malloc(const rdmax_rcache_desc *d, size_t n)
{
    return d->allocator.alloc ? d->allocator.alloc(n, d->allocator.user) : RDMAX_MALLOC(n);
}

static void rdmax__rcache_free(const rdmax_rcache_desc *d, void *p)
{
    if (d->allocator.free)
        d->allocator.free(p, d->allocator.user);
    else
        RDMAX_FREE(p);
}

static uintptr_t *rdmax__rcache_node_new(const rdmax_rcache_desc *d, unsigned level)
{
    size_t n = (size_t)rdmax__rcache_fan[level] + 1;
    uintptr_t *p = (uintptr_t *)rdmax__rcache_malloc(d, n * sizeof(uintptr_t));
    if (!p) return NULL;
    memset(p, 0, n * sizeof(uintptr_t));
    return p + 1; /* p[0], i.e. node[-1], counts used entries */
}

static void rdmax__rcache_node_free(const rdmax_rcache_desc *d, uintptr_t *node)
{
    rdmax__rcache_free(d, node - 1);
}

static void rdmax__rcache_node_free_tree(const rdmax_rcache_desc *d, uintptr_t *node, unsigned level)
{
    unsigned i;
    if (level < 3) {
        for (i = 0; i < rdmax__rcache_fan[level]; i++) {
            uintptr_t e = node[i];
            if (e && !(e & 1u)) rdmax__rcache_node_free_tree(d, (uintptr_t *)e, level + 1);
        }
    }
    rdmax__rcache_node_free(d, node);
}

/* Inserts val for page numbers [ps, pe) into the subtree at `node` (covering pages from base).
   On failure (ENOMEM) the caller removes val again. */
static int rdmax__rcache_tree_insert(const rdmax_rcache_desc *d, uintptr_t *node, unsigned level, uint64_t base,
                                     uint64_t ps, uint64_t pe, uintptr_t val)
{
    unsigned sh = rdmax__rcache_shift[level];
    uint64_t span = UINT64_C(1) << sh, node_end = base + (uint64_t)rdmax__rcache_fan[level] * span;
    uint64_t lo = ps > base ? ps : base, hi = pe < node_end ? pe : node_end, i;
    for (i = (lo - base) >> sh; i <= (hi - 1 - base) >> sh; i++) {
        uint64_t cs = base + (i << sh), ce = cs + span;
        if (ps <= cs && ce <= pe) {
            if (node[i] != 0) return -EFAULT; /* overlap: a bug */
            node[i] = val;
            node[-1]++;
        } else {
            uintptr_t *child;
            int rc;
            if (node[i] & 1u) return -EFAULT;
            if (!node[i]) {
                child = rdmax__rcache_node_new(d, level + 1);
                if (!child) return -ENOMEM;
                node[i] = (uintptr_t)child;
                node[-1]++;
            } else {
                child = (uintptr_t *)node[i];
            }
            rc = rdmax__rcache_tree_insert(d, child, level + 1, cs, ps, pe, val);
            if (rc) return rc;
        }
    }
    return 0;
}

/* Clears every entry equal to val in [ps, pe) and frees nodes that become empty (the root stays). */
static void rdmax__rcache_tree_remove(const rdmax_rcache_desc *d, uintptr_t *node, unsigned level, uint64_t base,
                                      uint64_t ps, uint64_t pe, uintptr_t val)
{
    unsigned sh = rdmax__rcache_shift[level];
    uint64_t span = UINT64_C(1) << sh, node_end = base + (uint64_t)rdmax__rcache_fan[level] * span;
    uint64_t lo = ps > base ? ps : base, hi = pe < node_end ? pe : node_end, i;
    for (i = (lo - base) >> sh; i <= (hi - 1 - base) >> sh; i++) {
        uintptr_t e = node[i];
        if (!e) continue;
        if (e == val) {
            node[i] = 0;
            node[-1]--;
        } else if (!(e & 1u)) {
            uintptr_t *child = (uintptr_t *)e;
            rdmax__rcache_tree_remove(d, child, level + 1, base + (i << sh), ps, pe, val);
            if (child[-1] == 0) {
                rdmax__rcache_node_free(d, child);
                node[i] = 0;
                node[-1]--;
            }
        }
    }
}

/* The region holding the lowest page in [ps, pe), or NULL. */
static rdmax_rcache_region *rdmax__rcache_tree_first(const uintptr_t *node, unsigned level, uint64_t base,
                                                 uint64_t ps, uint64_t pe)
{
    unsigned sh = rdmax__rcache_shift[level];
    uint64_t span = UINT64_C(1) << sh, node_end = base + (uint64_t)rdmax__rcache_fan[level] * span;
    uint64_t lo = ps > base ? ps : base, hi = pe < node_end ? pe : node_end, i;
    if (lo >= hi) return NULL;
    for (i = (lo - base) >> sh; i <= (hi - 1 - base) >> sh; i++) {
        uintptr_t e = node[i];
        if (!e) continue;
        if (e & 1u) return (rdmax_rcache_region *)(e - 1u);
        {
            rdmax_rcache_region *r =
                rdmax__rcache_tree_first((const uintptr_t *)e, level + 1, base + (i << sh), ps, pe);
            if (r) return r;
        }
    }
    return NULL;
}

#define RDMAX__RCACHE_PN_LIMIT (UINT64_C(1) << RDMAX__RCACHE_PN_BITS)

static uint64_t rdmax__rcache_spn(const rdmax_rcache *rc, const rdmax_rcache_region *r)
{
    return (uint64_t)r->start >> rc->rdmax__page_shift;
}

static uint64_t rdmax__rcache_epn(const rdmax_rcache *rc, const rdmax_rcache_region *r)
{
    return (uint64_t)r->end >> rc->rdmax__page_shift;
}

/* ---- region pool: 64-byte aligned 128-byte slots, 64 per slab ---- */

#define RDMAX__RCACHE_SLAB_REGIONS 64
#define RDMAX__RCACHE_SLOT 128

static rdmax_rcache_region *rdmax__rcache_region_alloc(rdmax_rcache *rc)
{
    rdmax_rcache_region *r = rc->rdmax__free;
    if (!r) {
        char *raw = (char *)rdmax__rcache_malloc(&rc->rdmax__desc, RDMAX__RCACHE_SLAB_REGIONS * RDMAX__RCACHE_SLOT + 128);
        uintptr_t base;
        int i;
        if (!raw) return NULL;
        *(void **)raw = rc->rdmax__slabs;
        rc->rdmax__slabs = raw;
        base = ((uintptr_t)raw + sizeof(void *) + 63u) & ~(uintptr_t)63u;
        for (i = RDMAX__RCACHE_SLAB_REGIONS - 1; i >= 0; i--) {
            rdmax_rcache_region *s = (rdmax_rcache_region *)(base + (uintptr_t)i * RDMAX__RCACHE_SLOT);
            s->rdmax__lru_next = rc->rdmax__free;
            rc->rdmax__free = s;
        }
        r = rc->rdmax__free;
    }
    rc->rdmax__free = r->rdmax__lru_next;
    memset(r, 0, sizeof(*r));
    return r;
}

static void rdmax__rcache_region_free(rdmax_rcache *rc, rdmax_rcache_region *r)
{
    r->rdmax__flags = 0;
    r->rdmax__lru_next = rc->rdmax__free;
    rc->rdmax__free = r;
}

/* ---- LRU, lazy but exact ----
   The list holds every unused cached region (and, lazily, some in-use ones), ordered by
   rdmax__lru_stamp. A put to zero stamps rdmax__last_use with the clock and appends the region
   only if it is not on the list yet; a hit touches nothing but the refcount. So for listed
   regions lru_stamp <= last_use, and the head is the true least recently used region when its
   stamps agree and it is unused. Eviction pops the head: in-use -> unlink (its last put
   re-appends it); stale -> re-insert by last_use walking back from the tail (usually O(1));
   else evict. This keeps the hit path free of list surgery on other regions' cache lines. */

static void rdmax__rcache_lru_unlink(rdmax_rcache *rc, rdmax_rcache_region *r)
{
    if (r->rdmax__lru_prev) r->rdmax__lru_prev->rdmax__lru_next = r->rdmax__lru_next;
    else rc->rdmax__lru_head = r->rdmax__lru_next;
    if (r->rdmax__lru_next) r->rdmax__lru_next->rdmax__lru_prev = r->rdmax__lru_prev;
    else rc->rdmax__lru_tail = r->rdmax__lru_prev;
    r->rdmax__lru_prev = r->rdmax__lru_next = NULL;
    r->rdmax__flags &= ~RDMAX__RCACHE_IN_LRU;
}

/* inserts r after p (p NULL: at the head) */
static void rdmax__rcache_lru_insert_after(rdmax_rcache *rc, rdmax_rcache_region *p, rdmax_rcache_region *r)
{
    r->rdmax__lru_stamp = r->rdmax__last_use;
    r->rdmax__lru_prev = p;
    r->rdmax__lru_next = p ? p->rdmax__lru_next : rc->rdmax__lru_head;
    if (r->rdmax__lru_next) r->rdmax__lru_next->rdmax__lru_prev = r;
    else rc->rdmax__lru_tail = r;
    if (p) p->rdmax__lru_next = r;
    else rc->rdmax__lru_head = r;
    r->rdmax__flags |= RDMAX__RCACHE_IN_LRU;
}

static void rdmax__rcache_lru_insert_sorted(rdmax_rcache *rc, rdmax_rcache_region *r)
{
    rdmax_rcache_region *p = rc->rdmax__lru_tail;
    while (p && p->rdmax__lru_stamp > r->rdmax__last_use) p = p->rdmax__lru_prev;
    rdmax__rcache_lru_insert_after(rc, p, r);
}

/* ---- >>memhooks: registration cache: the event ring, the opt-in memory hooks, the malloc policy ---- */
/* Opt-in mechanism (RDMAX_MEMHOOKS, RDMAX_MALLOPT): symbol interposition + a lock-free event ring +
   a malloc policy. Without those defines the implementation defines no libc name and changes no
   process-wide setting; the cache then relies on rdmax_rcache_invalidate().

   1. With RDMAX_MEMHOOKS this TU defines mmap, mmap64, munmap, mremap, madvise, shmat, shmdt, brk
      and sbrk. Defined in the executable (or in a library loaded before libc), they win symbol lookup for
      every call made through the PLT/GOT by the program and its libraries. Each hook:
        - records the range that is about to change into the ring, then a full fence,
        - performs the real operation with syscall(2) (no dlsym(RTLD_NEXT): it can allocate and
          takes the loader lock); brk/sbrk go through glibc's exported __sbrk so glibc's own idea
          of the break (__curbrk) stays right,
        - on success records the changed range again, plus any freshly created mapping.
      Recording before the operation means a get that runs after the memory is gone always sees
      the event. Recording again after it closes the window where another thread's get drained
      the first record and re-registered the old pages just before they went away. Recording
      fresh mappings (every successful mmap/mremap/shmat/brk growth) catches an unmap we never
      saw when its address is reused: a fresh mapping can never hold previously registered pages.
      madvise is recorded unless the advice is known to keep pages (NORMAL, RANDOM, SEQUENTIAL,
      WILLNEED, DONTFORK, DOFORK, (UN)MERGEABLE, (NO)HUGEPAGE, DONTDUMP, DODUMP, WIPEONFORK,
      KEEPONFORK, COLD, POPULATE_READ/WRITE); unknown advice counts as destructive (libibverbs
      calls madvise(DONTFORK/DOFORK) around every registration when fork support is on: those
      must not invalidate, or each registration would drop itself). mmap with
      MAP_FIXED (without MAP_FIXED_NOREPLACE) records the range it replaces. shmdt needs the
      segment size: shmat remembers it in a fixed lock-free table; an unknown segment is recorded
      as "invalidate everything".
   2. The ring is one process-wide array of RDMAX_RCACHE_EVENT_RING_SIZE slots and a 64-bit
      write counter. A hook claims a slot with one atomic fetch-add and publishes it seqlock-
      style; it never waits, allocates, locks or deregisters, so it is safe in signal handlers and
      while another thread is inside the cache. Each cache keeps its own read cursor (so no list
      of caches is needed and a hook's cost does not grow with their number); the inline get
      compares that cursor with the write counter (one relaxed load) and drains on a difference.
      Draining drops overlapping regions from the lookup, counts them, deregisters unused ones
      and marks in-use ones invalid (deregistered at the last put). A slot that is claimed but
      not yet published is retried at the next get (a writer that never publishes, e.g. a
      handler that longjmp'ed out of a hook, only costs slow gets until the ring laps it and the
      overflow rule below applies). If a writer laps a reader (more than
      RING_SIZE events between two gets of a cache), the events are lost: the cache drops every
      cached region (stats.overflows). The ring and the counter have external linkage so that two
      copies of the implementation in one process bind to one ring.
   3. glibc's own calls (free() unmapping a large chunk, malloc trimming the heap, a thread
      arena deleting a heap) use internal aliases that no interposition can see. So RDMAX_MALLOPT
      applies, at program start, a malloc policy that makes glibc never give memory back:
          mallopt(M_MMAP_MAX, 0)         large blocks come from the heap, never from mmap
          mallopt(M_TRIM_THRESHOLD, -1)  the main heap is never trimmed (brk shrink)
          mallopt(M_ARENA_MAX, 1)        no thread arenas: their heaps are munmap'ed by
                                          heap_trim() when they become empty, whatever the
                                          trim threshold, and re-mmap'ed at the same address
      and malloc_trim() is defined here as a no-op. free() followed by a malloc() returning the
      same address then returns the very same pages, still mapped and still registered, so a hit
      is correct. The cost: the process keeps its peak heap, and threads share one arena (tcache
      still serves small sizes without the lock). RDMAX_MEMHOOKS without RDMAX_MALLOPT keeps glibc's
      behaviour and leaves that hole open.

   Beside the monitor, UCX (UCM) patches the GOT of every loaded object (and dlopen'ed ones
   later), or rewrites function entry points, and may replace malloc with its own ptmalloc to see
   free(): powerful, but a lot of fragile machinery, and its reported deadlocks and crashes come
   from there. MPI libraries' mallopt + interposition is what the opt-in hooks are.

   Not covered by the hooks alone (the monitor covers the first three; see the route table):
   - statically linked programs: libc.a's own objects call its internal names, and defining
     munmap next to libc.a's munmap.o clashes; build those without RDMAX_MEMHOOKS;
   - calls made inside libc or ld.so: dlclose() unmapping a library, thread stacks unmapped by
     glibc's stack cache, memory glibc allocated before the first cache was created (a large
     block malloc'ed earlier is still an mmap'ed chunk that free() unmaps unseen; a later hooked
     mmap at that address is caught by the fresh-mapping record, a libc-internal one is not);
   - direct syscalls (syscall(SYS_munmap, ...), Go, some allocators, sanitizer runtimes);
   - another process changing shared memory, file truncation under a MAP_SHARED mapping,
     process_madvise() from outside;
   - libraries that bind symbols with -Bsymbolic or call through a private copy of libc;
   - an implementation TU inside a library loaded with dlopen(): objects loaded before it keep
     binding to libc, so only that library's own calls are seen;
   - other hook users that rewrite GOT entries or function entry points (UCX's UCM, some
     profilers) decide where calls go; turn theirs off (UCX: UCX_MEM_EVENTS=no) or run
     tests/memhook_test.c's checks in that configuration;
   - the hooks are Linux/glibc/LP64 only (RDMAX_MEMHOOKS elsewhere is an #error).
   ------------------------------------------------------------------------------------------- */

/* Interposition and the malloc policy change the whole program, so they are opt-in (see the manual's
   define table). The old opt-out names are gone (0.2.0): a build that still sets one is told. */
#if defined(RDMAX_NO_MEMHOOKS)
#error "rdmax: RDMAX_NO_MEMHOOKS was removed in 0.2.0: the hooks are off unless RDMAX_MEMHOOKS is defined; drop it"
#endif
#if defined(RDMAX_NO_MALLOPT)
#error "rdmax: RDMAX_NO_MALLOPT was removed in 0.2.0: the malloc policy is off unless RDMAX_MALLOPT is defined; drop it"
#endif
#if defined(RDMAX_MALLOPT) && !defined(RDMAX_MEMHOOKS)
#error "rdmax: RDMAX_MALLOPT only serves the interposed hooks (it keeps glibc from unmapping memory where no hook sees it): define RDMAX_MEMHOOKS too, or neither"
#endif
#if defined(RDMAX_MEMHOOKS)
#if defined(__linux__) && defined(__GLIBC__) && UINTPTR_MAX == 0xffffffffffffffffu
#define RDMAX__RCACHE_HOOKS 1
#else
#error "rdmax: RDMAX_MEMHOOKS needs Linux, glibc and a 64-bit target"
#endif
#else
#define RDMAX__RCACHE_HOOKS 0
#endif

#if (RDMAX_RCACHE_EVENT_RING_SIZE & (RDMAX_RCACHE_EVENT_RING_SIZE - 1)) != 0 || RDMAX_RCACHE_EVENT_RING_SIZE < 2
#error "rdmax: RDMAX_RCACHE_EVENT_RING_SIZE must be a power of two"
#endif

typedef struct rdmax__rcache_event {
    uint64_t seq; /* index+1 when published; with the top bit while being written */
    uint64_t start;
    uint64_t end;
    uint64_t kind; /* RDMAX__RCACHE_EV_UNMAP...: set by the monitor; 0 (unknown) from the hooks */
} rdmax__rcache_event;
#define RDMAX__RCACHE_EV_UNMAP 1u
#define RDMAX__RCACHE_EV_REMOVE 2u /* pages discarded, mapping (and its monitor registration) kept */
#define RDMAX__RCACHE_EV_REMAP 3u

#define RDMAX__RCACHE_EV_BUSY (UINT64_C(1) << 63)

uint64_t rdmax__rcache_event_head __attribute__((aligned(64)));
rdmax__rcache_event rdmax__rcache_events[RDMAX_RCACHE_EVENT_RING_SIZE] __attribute__((aligned(64)));
int rdmax__rcache_live_caches __attribute__((aligned(64)));
int rdmax__rcache_malloc_policy;

#if RDMAX__RCACHE_HOOKS

/* ---- the hooks (>>memhooks) ---- */

/* Records [start, end) as changed. Lock-free, allocation-free, async-signal-safe. */
static void rdmax__rcache_record(uintptr_t start, uintptr_t end)
{
    uint64_t q;
    rdmax__rcache_event *ev;
    if (__atomic_load_n(&rdmax__rcache_live_caches, __ATOMIC_RELAXED) == 0) return;
    q = __atomic_fetch_add(&rdmax__rcache_event_head, 1, __ATOMIC_ACQ_REL);
    ev = &rdmax__rcache_events[q & (RDMAX_RCACHE_EVENT_RING_SIZE - 1u)];
    __atomic_store_n(&ev->seq, (q + 1) | RDMAX__RCACHE_EV_BUSY, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&ev->start, (uint64_t)start, __ATOMIC_RELAXED);
    __atomic_store_n(&ev->end, (uint64_t)end, __ATOMIC_RELAXED);
    __atomic_store_n(&ev->seq, q + 1, __ATOMIC_RELEASE);
}

static void rdmax__rcache_record_len(const void *addr, size_t len)
{
    uintptr_t s = (uintptr_t)addr, e = s + len;
    if (len == 0) return;
    if (e < s) e = UINTPTR_MAX;
    rdmax__rcache_record(s, e);
}

/* the record made before the memory changes, with a full fence before the real call */
static void rdmax__rcache_record_before(const void *addr, size_t len)
{
    rdmax__rcache_record_len(addr, len);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}


extern void *__sbrk(intptr_t increment); /* glibc, exported since GLIBC_2.2.5 */

#define RDMAX__RCACHE_SHM_SLOTS 64
typedef struct rdmax__rcache_shm {
    uintptr_t addr; /* 0 free, 1 being filled */
    size_t size;
} rdmax__rcache_shm;
rdmax__rcache_shm rdmax__rcache_shm_table[RDMAX__RCACHE_SHM_SLOTS];

static size_t rdmax__rcache_page_round(size_t n)
{
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    return (n + ps - 1) & ~(ps - 1);
}

static void rdmax__rcache_shm_add(uintptr_t addr, size_t size)
{
    int i;
    for (i = 0; i < RDMAX__RCACHE_SHM_SLOTS; i++) {
        uintptr_t expect = 0;
        if (__atomic_compare_exchange_n(&rdmax__rcache_shm_table[i].addr, &expect, (uintptr_t)1, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
            __atomic_store_n(&rdmax__rcache_shm_table[i].size, size, __ATOMIC_RELAXED);
            __atomic_store_n(&rdmax__rcache_shm_table[i].addr, addr, __ATOMIC_RELEASE);
            return;
        }
    }
    /* table full: shmdt will invalidate everything for this segment */
}

/* size of the segment attached at addr (0 if unknown); remove != 0 frees the slot */
static size_t rdmax__rcache_shm_find(uintptr_t addr, int remove)
{
    int i;
    for (i = 0; i < RDMAX__RCACHE_SHM_SLOTS; i++) {
        if (__atomic_load_n(&rdmax__rcache_shm_table[i].addr, __ATOMIC_ACQUIRE) == addr) {
            size_t size = __atomic_load_n(&rdmax__rcache_shm_table[i].size, __ATOMIC_RELAXED);
            if (remove) {
                uintptr_t expect = addr;
                __atomic_compare_exchange_n(&rdmax__rcache_shm_table[i].addr, &expect, (uintptr_t)0, 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
            }
            return size;
        }
    }
    return 0;
}

static int rdmax__rcache_madvise_destroys(int advice)
{
    switch (advice) {
    case 0:  /* NORMAL */
    case 1:  /* RANDOM */
    case 2:  /* SEQUENTIAL */
    case 3:  /* WILLNEED */
    case 10: /* DONTFORK */
    case 11: /* DOFORK */
    case 12: /* MERGEABLE: KSM skips pinned pages */
    case 13: /* UNMERGEABLE */
    case 14: /* HUGEPAGE: khugepaged skips pinned pages */
    case 15: /* NOHUGEPAGE */
    case 16: /* DONTDUMP */
    case 17: /* DODUMP */
    case 18: /* WIPEONFORK: affects the child only */
    case 19: /* KEEPONFORK */
    case 20: /* COLD */
    case 22: /* POPULATE_READ */
    case 23: /* POPULATE_WRITE */
        return 0;
    default: /* DONTNEED, FREE, REMOVE, PAGEOUT, DONTNEED_LOCKED, HWPOISON, unknown */
        return 1;
    }
}

static void *rdmax__rcache_mmap(void *addr, size_t len, int prot, int flags, int fd, long off)
{
    void *p;
    if ((flags & MAP_FIXED) && !(flags & MAP_FIXED_NOREPLACE)) rdmax__rcache_record_before(addr, len);
    p = (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
    if (p != MAP_FAILED) rdmax__rcache_record_len(p, len);
    return p;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return rdmax__rcache_mmap(addr, len, prot, flags, fd, (long)off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
    return rdmax__rcache_mmap(addr, len, prot, flags, fd, (long)off);
}

int munmap(void *addr, size_t len)
{
    int ret;
    rdmax__rcache_record_before(addr, len);
    ret = (int)syscall(SYS_munmap, addr, len);
    if (ret == 0) rdmax__rcache_record_len(addr, len);
    return ret;
}

void *mremap(void *old_addr, size_t old_size, size_t new_size, int flags, ...)
{
    void *new_addr = NULL, *p;
    char *o = (char *)old_addr;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        new_addr = va_arg(ap, void *);
        va_end(ap);
    }
    if (old_size != 0) {
        if (flags & (MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP))
            rdmax__rcache_record_before(o, old_size);
        else if (new_size < old_size)
            rdmax__rcache_record_before(o + new_size, old_size - new_size);
    }
    if (flags & MREMAP_FIXED) rdmax__rcache_record_before(new_addr, new_size);
    p = (void *)syscall(SYS_mremap, old_addr, old_size, new_size, flags, new_addr);
    if (p != MAP_FAILED) {
        if (old_size != 0 && p != old_addr)
            rdmax__rcache_record_len(o, old_size); /* moved away (DONTUNMAP: emptied) */
        else if (new_size < old_size)
            rdmax__rcache_record_len(o + new_size, old_size - new_size);
        if (p != old_addr)
            rdmax__rcache_record_len(p, new_size); /* fresh at this address */
        else if (new_size > old_size)
            rdmax__rcache_record_len(o + old_size, new_size - old_size);
    }
    return p;
}

int madvise(void *addr, size_t len, int advice)
{
    int ret, destroys = rdmax__rcache_madvise_destroys(advice);
    if (destroys) rdmax__rcache_record_before(addr, len);
    ret = (int)syscall(SYS_madvise, addr, len, advice);
    if (destroys && ret == 0) rdmax__rcache_record_len(addr, len);
    return ret;
}

void *shmat(int shmid, const void *shmaddr, int shmflg)
{
    struct shmid_ds ds;
    size_t size = 0;
    void *p;
    if (shmctl(shmid, IPC_STAT, &ds) == 0) size = rdmax__rcache_page_round(ds.shm_segsz);
    if ((shmflg & SHM_REMAP) && shmaddr) {
        if (size) {
            uintptr_t a = (uintptr_t)shmaddr & ~(uintptr_t)(SHMLBA - 1);
            rdmax__rcache_record_before((const void *)a, size + ((uintptr_t)shmaddr - a));
        } else {
            rdmax__rcache_record(0, UINTPTR_MAX);
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
        }
    }
    p = (void *)syscall(SYS_shmat, shmid, shmaddr, shmflg);
    if (p != (void *)-1 && size) {
        rdmax__rcache_record_len(p, size);
        rdmax__rcache_shm_add((uintptr_t)p, size);
    }
    return p;
}

int shmdt(const void *shmaddr)
{
    int ret;
    size_t size = rdmax__rcache_shm_find((uintptr_t)shmaddr, 0);
    if (size) {
        rdmax__rcache_record_before(shmaddr, size);
    } else {
        rdmax__rcache_record(0, UINTPTR_MAX); /* unknown size: everything */
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
    }
    ret = (int)syscall(SYS_shmdt, shmaddr);
    if (ret == 0) {
        if (size) {
            rdmax__rcache_record_len(shmaddr, size);
            rdmax__rcache_shm_find((uintptr_t)shmaddr, 1);
        } else {
            rdmax__rcache_record(0, UINTPTR_MAX);
        }
    }
    return ret;
}

void *sbrk(intptr_t increment)
{
    char *cur = (char *)__sbrk(0), *p;
    if (increment < 0 && cur != (char *)-1) rdmax__rcache_record_before(cur + increment, (size_t)-increment);
    p = (char *)__sbrk(increment);
    if (p != (char *)-1) {
        if (increment < 0) rdmax__rcache_record_len(p + increment, (size_t)-increment);
        if (increment > 0) rdmax__rcache_record_len(p, (size_t)increment);
    }
    return p;
}

int brk(void *addr)
{
    char *cur = (char *)__sbrk(0), *want = (char *)addr;
    if (cur == (char *)-1) return -1;
    if (want < cur) rdmax__rcache_record_before(want, (size_t)(cur - want));
    if (__sbrk(want - cur) == (void *)-1) return -1;
    if (want < cur) rdmax__rcache_record_len(want, (size_t)(cur - want));
    if (want > cur) rdmax__rcache_record_len(cur, (size_t)(want - cur));
    return 0;
}

#ifdef RDMAX_MALLOPT
/* Part of the malloc policy: glibc's malloc_trim() gives free heap pages back with
   madvise(MADV_DONTNEED) from inside libc, where no hook sees it. Returning memory is only a hint,
   so not doing it is correct. */
int malloc_trim(size_t pad)
{
    (void)pad;
    return 0;
}
#endif

#endif /* RDMAX__RCACHE_HOOKS */

static void rdmax__rcache_apply_malloc_policy(void)
{
#if RDMAX__RCACHE_HOOKS && defined(RDMAX_MALLOPT)
    if (__atomic_exchange_n(&rdmax__rcache_malloc_policy, 1, __ATOMIC_ACQ_REL)) return;
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, -1);
    mallopt(M_ARENA_MAX, 1);
#endif
}

#if RDMAX__RCACHE_HOOKS && defined(RDMAX_MALLOPT)
/* The policy must hold before the program's first malloc: a block or thread arena that glibc mapped
   earlier is unmapped later from inside libc, where no hook sees it, and its address reused. So a
   program that asked for it (RDMAX_MALLOPT) gets it at start. */
__attribute__((constructor)) static void rdmax__rcache_policy_at_start(void)
{
    rdmax__rcache_apply_malloc_policy();
}
#endif

/* ---- >>monitor: registration cache: the userfaultfd monitor -------------------------------------- */
/* One per process, started by the first cache in mode RDMAX_RCACHE_AUTO (see "Automatic
   invalidation" for why this mechanism). A cache registers each range it caches with the monitor's
   userfaultfd in write-protect mode, without ever write-protecting a page: nothing faults, the
   registration only asks the kernel to report UNMAP (munmap, mmap MAP_FIXED, mremap shrink, brk
   shrink), REMOVE (madvise DONTNEED/FREE/REMOVE) and REMAP (mremap move) of those pages, whoever
   makes the call: the program, glibc inside itself, a direct syscall. The kernel holds the thread
   that changed the mapping until the monitor thread has read the event; the monitor claims a ring
   slot before each read and publishes the range after it, and a get that finds a claimed slot waits
   for it, so a get that runs after the munmap returned always sees the event. The monitor thread
   takes no lock and allocates nothing: the unmapping thread may hold any lock (rdmax's, malloc's),
   be in a signal handler or be a thread inside a cache lookup. */

#if defined(__linux__) && defined(__has_include)
#if __has_include(<linux/userfaultfd.h>)
#include <linux/userfaultfd.h>
#if defined(UFFDIO_REGISTER_MODE_WP) && defined(UFFD_FEATURE_EVENT_UNMAP) && defined(SYS_userfaultfd)
#define RDMAX__MON 1
#endif
#endif
#endif
#ifndef RDMAX__MON
#define RDMAX__MON 0
#endif
#if RDMAX__MON
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC_NEW _IO(0xAA, 0x00)
#endif
/* UFFDIO_CONTINUE's argument (5.13+), copied so that older headers build: used only as a probe */
typedef struct rdmax__uffd_continue {
    uint64_t start, len, mode;
    int64_t mapped;
} rdmax__uffd_continue;
#define RDMAX__UFFDIO_CONTINUE _IOWR(0xAA, 0x07, rdmax__uffd_continue)
#endif

#define RDMAX__RCACHE_EV_MON (UINT64_C(1) << 62) /* slot claimed by the monitor: a reader waits for it */

/* Process-wide, external linkage like the ring: two copies of the implementation share one. */
typedef struct rdmax__mon_ext {
    uintptr_t s, e;
} rdmax__mon_ext;
typedef struct rdmax__mon_state {
    int fd;             /* the userfaultfd, -1 if none */
    int maps;           /* /proc/self/maps for PROCMAP_QUERY (Linux 6.11+); -1 none, -2 not supported */
    int pid;            /* process these belong to: a forked child opens its own */
    int tried;          /* open attempted in this process */
    volatile int *forked; /* a MADV_WIPEONFORK page holding 1: reads 0 in a forked child (no getpid per
                             miss); NULL if the kernel has no WIPEONFORK */
    int started;        /* monitor thread running */
    int user_mode_only; /* opened with UFFD_USER_MODE_ONLY */
    int error;          /* errno of the step that failed */
    char why[200];
    uint64_t n[4];      /* events read: unmap, remove, remap, other */
    /* mappings registered whole (see rdmax__mon_watch), forgotten when an event unmaps or moves
       any of them; under rdmax__mon_lock */
    rdmax__mon_ext *ext;
    size_t n_ext, cap_ext;
    uint64_t ext_seen;  /* ring position up to which ext is up to date */
    int probe;          /* how rdmax__mon_registered asks: 1 UFFDIO_CONTINUE, 0 UFFDIO_WRITEPROTECT */
    uint64_t lost;      /* memo entries whose registration was found gone without an event */
} rdmax__mon_state;
rdmax__mon_state rdmax__mon = {-1, -1, 0, 0, NULL, 0, 0, 0, {0}, {0, 0, 0, 0}, NULL, 0, 0, 0, 0, 0};
pthread_mutex_t rdmax__mon_lock = PTHREAD_MUTEX_INITIALIZER;

/* Takes the monitor lock. A child forked while a thread of its parent held the lock would wait for
   it forever: the first caller in the child (whose WIPEONFORK page reads 0) makes the lock anew. */
static void rdmax__mon_lock_take(void)
{
    int *f = (int *)(uintptr_t)__atomic_load_n(&rdmax__mon.forked, __ATOMIC_ACQUIRE), zero = 0;
    if (f && __atomic_load_n(f, __ATOMIC_ACQUIRE) == 0 &&
        __atomic_compare_exchange_n(f, &zero, 2, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        pthread_mutex_init(&rdmax__mon_lock, NULL);
    pthread_mutex_lock(&rdmax__mon_lock);
}

#if RDMAX__MON
static void rdmax__mon_fail(int err, const char *what)
{
    char v[16] = "?";
    int f = open("/proc/sys/vm/unprivileged_userfaultfd", O_RDONLY | O_CLOEXEC);
    if (f >= 0) {
        ssize_t n = read(f, v, sizeof v - 1);
        v[n > 0 ? n : 0] = 0;
        v[strcspn(v, "\n")] = 0;
        close(f);
    }
    rdmax__mon.error = err;
    snprintf(rdmax__mon.why, sizeof rdmax__mon.why, "%s: %s (vm.unprivileged_userfaultfd=%s)", what, strerror(err), v);
}

/* 1 if the page at a is still registered with a userfaultfd, 0 if not (or unknown: the caller then
   treats it as gone, which costs a registration, never correctness). The kernel drops a registration
   with its mapping, and some calls replace a mapping without an UNMAP event: shmat(SHM_REMAP) (do_shmat
   maps with no userfaultfd list; 6.1, 6.12, 6.18 alike). UFFDIO_CONTINUE only looks the mapping up:
   ENOENT when it carries no registration, EINVAL when it does (CONTINUE is for shmem/hugetlb minor
   faults, never anonymous memory), with no side effect. UFFDIO_WRITEPROTECT (unprotect) is the
   fallback where that does not hold: it can split a huge page's mapping and flushes the TLB. */
static int rdmax__mon_registered(uintptr_t a)
{
    rdmax__mon_state *m = &rdmax__mon;
    uint64_t ps = (uint64_t)sysconf(_SC_PAGESIZE);
    int i, r;
    for (i = 0; i < 1000; i++) {
        if (m->probe) {
            rdmax__uffd_continue c;
            memset(&c, 0, sizeof c);
            c.start = (uint64_t)a;
            c.len = ps;
            r = ioctl(m->fd, RDMAX__UFFDIO_CONTINUE, &c);
            if (r != 0 && errno == EINVAL) return 1;
        } else {
            struct uffdio_writeprotect w;
            memset(&w, 0, sizeof w);
            w.range.start = (uint64_t)a;
            w.range.len = ps;
            r = ioctl(m->fd, UFFDIO_WRITEPROTECT, &w);
            if (r == 0) return 1;
        }
        if (r == 0 || errno != EAGAIN) return 0;
        sched_yield(); /* an event is on its way to the monitor thread, which never waits for us */
    }
    return 0;
}

/* Picks the probe: UFFDIO_CONTINUE if it tells a page without a registration (ENOENT) from one with it
   (EINVAL) on a page of our own, else UFFDIO_WRITEPROTECT (a kernel before 5.13 has no CONTINUE and
   answers EINVAL to both). Monitor lock held, fd open. */
static void rdmax__mon_probe_choose(void)
{
    rdmax__mon_state *m = &rdmax__mon;
    size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    struct uffdio_register reg;
    /* read-only: a mapping of its own, never merged into a neighbour that registering would split */
    void *pg = mmap(NULL, ps, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int none, some = 0;
    m->probe = 1;
    if (pg == MAP_FAILED) {
        m->probe = 0;
        return;
    }
    none = rdmax__mon_registered((uintptr_t)pg);
    memset(&reg, 0, sizeof reg);
    reg.mode = UFFDIO_REGISTER_MODE_WP;
    reg.range.start = (uint64_t)(uintptr_t)pg;
    reg.range.len = ps;
    if (ioctl(m->fd, UFFDIO_REGISTER, &reg) == 0) {
        some = rdmax__mon_registered((uintptr_t)pg);
        ioctl(m->fd, UFFDIO_UNREGISTER, &reg.range); /* else its munmap would wait for a monitor thread */
    }
    m->probe = !none && some;
    munmap(pg, ps);
}

/* Publishes [s, e) as unmapped, as the monitor thread does for a kernel event. */
static void rdmax__mon_publish(uintptr_t s, uintptr_t e)
{
    uint64_t q = __atomic_fetch_add(&rdmax__rcache_event_head, 1, __ATOMIC_SEQ_CST);
    rdmax__rcache_event *ev = &rdmax__rcache_events[q & (RDMAX_RCACHE_EVENT_RING_SIZE - 1u)];
    __atomic_store_n(&ev->seq, (q + 1) | RDMAX__RCACHE_EV_BUSY, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&ev->start, (uint64_t)s, __ATOMIC_RELAXED);
    __atomic_store_n(&ev->end, (uint64_t)e, __ATOMIC_RELAXED);
    __atomic_store_n(&ev->kind, (uint64_t)RDMAX__RCACHE_EV_UNMAP, __ATOMIC_RELAXED);
    __atomic_store_n(&ev->seq, q + 1, __ATOMIC_RELEASE);
}

/* Opens the userfaultfd (not the thread) once per process; 1 if it is usable. Monitor lock held. */
static int rdmax__mon_open_locked(void)
{
    rdmax__mon_state *m = &rdmax__mon;
    int pid = (int)getpid(), fd, e;
    struct uffdio_api api;
    const char *env;
    if (m->pid != pid) {
        /* first use, or a child forked from a process that used it: the uffd is the parent's, its
           thread did not come along, and the child's mappings carry no registration */
        if (m->pid != 0 && m->fd >= 0) close(m->fd);
        if (m->pid != 0 && m->maps >= 0) close(m->maps);
        m->fd = m->maps = -1;
        m->n_ext = 0;
        m->tried = m->started = m->user_mode_only = m->error = 0;
        m->why[0] = 0;
        m->pid = pid;
    }
    if (m->tried) return m->fd >= 0;
    m->tried = 1;
    env = getenv("RDMAX_RCACHE_MONITOR");
    if (env && (!strcmp(env, "off") || !strcmp(env, "0"))) {
        m->error = EPERM;
        snprintf(m->why, sizeof m->why, "disabled by RDMAX_RCACHE_MONITOR=%s", env);
        return 0;
    }
    fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && errno == EPERM) {
        /* vm.unprivileged_userfaultfd=0 without CAP_SYS_PTRACE: user-mode-only faults are still
           allowed (5.11+), and this monitor handles no fault at all, only events */
        fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
        m->user_mode_only = fd >= 0;
    }
    if (fd < 0) {
        int d = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC); /* 6.1+: access by file permission */
        e = errno;
        if (d >= 0) {
            fd = ioctl(d, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
            e = errno;
            close(d);
        }
        if (fd < 0) {
            rdmax__mon_fail(e == ENOENT ? EPERM : e, "userfaultfd");
            return 0;
        }
    }
    memset(&api, 0, sizeof api);
    api.api = UFFD_API;
    api.features = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;
    if (ioctl(fd, UFFDIO_API, &api) != 0) {
        rdmax__mon_fail(errno, "userfaultfd: UFFDIO_API with the UNMAP, REMOVE and REMAP events");
        close(fd);
        return 0;
    }
    if (!(api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP)) {
        rdmax__mon_fail(ENOTSUP, "userfaultfd: no write-protect registration of anonymous memory (Linux 5.7+)");
        close(fd);
        return 0;
    }
    m->fd = fd;
    if (!m->forked) {
        void *pg = mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                        -1, 0);
        if (pg != MAP_FAILED && madvise(pg, (size_t)sysconf(_SC_PAGESIZE), MADV_WIPEONFORK) == 0) {
            *(volatile int *)pg = 1;
            __atomic_store_n(&m->forked, (volatile int *)pg, __ATOMIC_RELEASE);
        } else if (pg != MAP_FAILED) {
            munmap(pg, (size_t)sysconf(_SC_PAGESIZE));
        }
    } else {
        *m->forked = 1; /* this process's page (a child's copy reads 0 until here) */
    }
    rdmax__mon_probe_choose();
    snprintf(m->why, sizeof m->why, "userfaultfd%s: unmap, remove and remap events",
             m->user_mode_only ? " (user-mode only)" : "");
    return 1;
}

/* Reads one event and publishes it in the slot claimed before the read (see above). */
static void rdmax__mon_read_one(int fd)
{
    struct uffd_msg msg;
    uint64_t q = __atomic_fetch_add(&rdmax__rcache_event_head, 1, __ATOMIC_SEQ_CST), s = 0, e = 0;
    rdmax__rcache_event *ev = &rdmax__rcache_events[q & (RDMAX_RCACHE_EVENT_RING_SIZE - 1u)];
    ssize_t n;
    int k = 3;
    uint64_t kind = 0;
    __atomic_store_n(&ev->seq, (q + 1) | RDMAX__RCACHE_EV_BUSY | RDMAX__RCACHE_EV_MON, __ATOMIC_SEQ_CST);
    n = read(fd, &msg, sizeof msg);
    if (n == (ssize_t)sizeof msg) {
        switch (msg.event) {
        case UFFD_EVENT_UNMAP:
        case UFFD_EVENT_REMOVE:
            s = msg.arg.remove.start;
            e = msg.arg.remove.end;
            k = msg.event == UFFD_EVENT_UNMAP ? 0 : 1;
            kind = msg.event == UFFD_EVENT_UNMAP ? RDMAX__RCACHE_EV_UNMAP : RDMAX__RCACHE_EV_REMOVE;
            break;
        case UFFD_EVENT_REMAP: /* the pages left `from`; `to` held nothing cached (its old mapping,
                                  if registered, sent an UNMAP) */
            s = msg.arg.remap.from;
            e = msg.arg.remap.from + msg.arg.remap.len;
            k = 2;
            kind = RDMAX__RCACHE_EV_REMAP;
            break;
        case UFFD_EVENT_PAGEFAULT: { /* nothing is write-protected, so this is not ours to solve:
                                        let the thread retry */
            struct uffdio_range r;
            r.len = (uint64_t)sysconf(_SC_PAGESIZE);
            r.start = msg.arg.pagefault.address & ~(r.len - 1);
            ioctl(fd, UFFDIO_WAKE, &r);
            break;
        }
        default:
            break;
        }
        __atomic_add_fetch(&rdmax__mon.n[k], 1, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&ev->start, s, __ATOMIC_RELAXED);
    __atomic_store_n(&ev->end, e, __ATOMIC_RELAXED);
    __atomic_store_n(&ev->kind, kind, __ATOMIC_RELAXED);
    __atomic_store_n(&ev->seq, q + 1, __ATOMIC_RELEASE);
}

static void *rdmax__mon_main(void *arg)
{
    int fd = (int)(intptr_t)arg;
    for (;;) {
        struct pollfd p;
        p.fd = fd;
        p.events = POLLIN;
        p.revents = 0;
        /* never exits: a registered range's munmap would wait for a reader forever */
        if (poll(&p, 1, -1) > 0 && (p.revents & POLLIN))
            rdmax__mon_read_one(fd);
        else if (p.revents & (POLLERR | POLLNVAL))
            usleep(10000);
    }
    return NULL;
}

/* Starts the monitor thread once per process (all signals blocked in it). Monitor lock held. */
static int rdmax__mon_start_locked(void)
{
    pthread_attr_t at;
    pthread_t t;
    sigset_t all, old;
    int st;
    if (!rdmax__mon_open_locked()) return 0;
    if (rdmax__mon.started) return 1;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 64 * 1024);
    st = pthread_create(&t, &at, rdmax__mon_main, (void *)(intptr_t)rdmax__mon.fd);
    pthread_attr_destroy(&at);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (st != 0) {
        rdmax__mon_fail(st, "creating the monitor thread");
        close(rdmax__mon.fd);
        rdmax__mon.fd = -1;
        return 0;
    }
    pthread_setname_np(t, "rdmax-monitor");
    __atomic_store_n(&rdmax__mon.started, 1, __ATOMIC_RELEASE);
    return 1;
}

/* Forgets the registered mappings that events since ext_seen unmapped or moved (the kernel drops
   a registration with its mapping). Monitor lock held. */
static void rdmax__mon_prune_locked(void)
{
    rdmax__mon_state *m = &rdmax__mon;
    uint64_t h = __atomic_load_n(&rdmax__rcache_event_head, __ATOMIC_ACQUIRE), c = m->ext_seen;
    if (h - c > RDMAX_RCACHE_EVENT_RING_SIZE) goto lost;
    for (; c < h; c++) {
        rdmax__rcache_event *ev = &rdmax__rcache_events[c & (RDMAX_RCACHE_EVENT_RING_SIZE - 1u)];
        uint64_t v, s, e, kind;
        size_t i, j;
        while ((v = __atomic_load_n(&ev->seq, __ATOMIC_ACQUIRE)) == ((c + 1) | RDMAX__RCACHE_EV_BUSY | RDMAX__RCACHE_EV_MON))
            sched_yield(); /* being read by the monitor thread, which never waits for us */
        if (v != c + 1) goto lost; /* lapped, or a hook's record not yet published */
        s = __atomic_load_n(&ev->start, __ATOMIC_RELAXED);
        e = __atomic_load_n(&ev->end, __ATOMIC_RELAXED);
        kind = __atomic_load_n(&ev->kind, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&ev->seq, __ATOMIC_RELAXED) != c + 1) goto lost;
        if (kind == RDMAX__RCACHE_EV_REMOVE || e <= s) continue;
        for (i = j = 0; i < m->n_ext; i++)
            if (m->ext[i].e <= s || m->ext[i].s >= e) m->ext[j++] = m->ext[i];
        m->n_ext = j;
    }
    m->ext_seen = h;
    return;
lost:
    m->n_ext = 0;
    m->ext_seen = h;
}

/* PROCMAP_QUERY (Linux 6.11+, <linux/fs.h>): one mapping by address, without reading the whole
   maps file. The layout is the kernel's ABI; copied so that older headers build. */
typedef struct rdmax__procmap_query {
    uint64_t size, query_flags, query_addr, vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
    uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
    uint64_t vma_name_addr, build_id_addr;
} rdmax__procmap_query;
#define RDMAX__PROCMAP_QUERY _IOWR('f', 17, rdmax__procmap_query)
#define RDMAX__PROCMAP_SHARED 0x08u

/* 1: extent found (or refused: *ok tells), 0: PROCMAP_QUERY unavailable. Monitor lock held. */
static int rdmax__mon_vma_query(uintptr_t s, uintptr_t e, uintptr_t *lo, uintptr_t *hi, int *ok)
{
    rdmax__mon_state *m = &rdmax__mon;
    uintptr_t cur = s;
    if (m->maps == -2) return 0;
    if (m->maps < 0 && (m->maps = open("/proc/self/maps", O_RDONLY | O_CLOEXEC)) < 0) {
        m->maps = -2;
        return 0;
    }
    *ok = 0;
    *lo = *hi = 0;
    while (cur < e) {
        rdmax__procmap_query q;
        memset(&q, 0, sizeof q);
        q.size = sizeof q;
        q.query_addr = cur;
        if (ioctl(m->maps, RDMAX__PROCMAP_QUERY, &q) != 0) {
            if (errno == ENOTTY || errno == EINVAL) { /* an older kernel: read the file instead */
                close(m->maps);
                m->maps = -2;
                return 0;
            }
            return 1; /* ENOENT: nothing mapped at cur */
        }
        if (q.vma_start > cur || (q.vma_flags & RDMAX__PROCMAP_SHARED) || q.inode || q.dev_major || q.dev_minor)
            return 1; /* a hole, or shared or file-backed memory */
        if (!*lo) *lo = (uintptr_t)q.vma_start;
        *hi = cur = (uintptr_t)q.vma_end;
    }
    *ok = 1;
    return 1;
}

/* The private anonymous mappings that hold [s, e) without a hole: 1 and their extent in lo/hi, or 0
   (a hole, shared or file-backed memory, or /proc/self/maps unreadable). Reads the file with
   read(2) into a stack buffer: no allocation. */
static int rdmax__mon_vma_extent(uintptr_t s, uintptr_t e, uintptr_t *lo, uintptr_t *hi)
{
    int qok;
    if (rdmax__mon_vma_query(s, e, lo, hi, &qok)) return qok;
    char buf[4096];
    size_t have = 0;
    uintptr_t cur = s;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC), done = 0, ok = 0;
    if (fd < 0) return 0;
    *lo = *hi = 0;
    while (!done) {
        ssize_t n = read(fd, buf + have, sizeof buf - 1 - have);
        char *line = buf, *nl;
        if (n <= 0) break;
        have += (size_t)n;
        buf[have] = 0;
        while (!done && (nl = (char *)memchr(line, '\n', (size_t)(buf + have - line))) != NULL) {
            unsigned long vs, ve, ino;
            unsigned maj, min;
            char perms[8];
            *nl = 0;
            if (sscanf(line, "%lx-%lx %7s %*x %x:%x %lu", &vs, &ve, perms, &maj, &min, &ino) == 6 && ve > s) {
                if (vs >= e || vs > cur) {
                    done = 1; /* past the range, or a hole before it ends */
                } else if (perms[3] != 'p' || ino != 0 || maj != 0 || min != 0) {
                    done = 1; /* shared or file-backed: truncation would send no event */
                } else {
                    if (!*lo) *lo = vs;
                    *hi = cur = ve;
                    if (cur >= e) ok = done = 1;
                }
            }
            line = nl + 1;
        }
        have = (size_t)(buf + have - line);
        memmove(buf, line, have);
        if (have == sizeof buf - 1) break; /* a line longer than the buffer: give up */
    }
    close(fd);
    return ok;
}

/* 1 if [s, e) (page-aligned) lies in mappings registered with the monitor. Only private anonymous
   memory qualifies: shared memory (memfd, tmpfs, MAP_SHARED|MAP_ANONYMOUS, SysV shm) and files can
   be truncated or punched, which sends no event. Whole mappings are registered, never a part: a
   part would split the program's mapping (an mremap of the whole would then fail with EFAULT, and
   vm.max_map_count would fill up). Registrations are never undone; one without a cached region
   costs only an event when its memory is unmapped. */
static int rdmax__mon_watch(uintptr_t s, uintptr_t e)
{
    rdmax__mon_state *m = &rdmax__mon;
    struct uffdio_register reg;
    uintptr_t lo, hi;
    size_t i;
    int ok = 0;
    if (!__atomic_load_n(&m->started, __ATOMIC_ACQUIRE)) return 0;
    rdmax__mon_lock_take();
    /* a cache copied into a forked child: its mappings carry no registration and there is no thread */
    if (!m->started || (m->forked ? *m->forked != 1 : m->pid != (int)getpid())) goto out;
    rdmax__mon_prune_locked();
    for (i = 0; i < m->n_ext; i++)
        if (m->ext[i].s <= s && e <= m->ext[i].e) {
            /* the memo is trusted only while the kernel still holds the registration (see
               rdmax__mon_registered): a mapping replaced without an event must not leave its address
               unwatched for good. Both ends of the range: a replacement that covers neither lies
               inside it and is missed (documented with the shmat route in the manual). */
            uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE);
            if (rdmax__mon_registered(s) && (e - s <= ps || rdmax__mon_registered(e - ps))) {
                ok = 1;
                goto out;
            }
            /* gone: every cache drops its regions there (the old pages), the memo forgets it, and the
               mapping found there now is looked up and registered like a new one */
            __atomic_add_fetch(&m->lost, 1, __ATOMIC_RELAXED);
            rdmax__mon_publish(m->ext[i].s, m->ext[i].e);
            rdmax__mon_prune_locked();
            break;
        }
    if (!rdmax__mon_vma_extent(s, e, &lo, &hi)) goto out;
    memset(&reg, 0, sizeof reg);
    reg.mode = UFFDIO_REGISTER_MODE_WP;
    reg.range.start = lo;
    reg.range.len = hi - lo;
    if (ioctl(m->fd, UFFDIO_REGISTER, &reg) != 0) goto out;
    ok = 1;
    if (m->n_ext == m->cap_ext) { /* only a memo: when it cannot grow, start over */
        size_t cap = m->cap_ext ? m->cap_ext * 2 : 64;
        rdmax__mon_ext *x = cap <= 4096 ? (rdmax__mon_ext *)RDMAX_MALLOC(cap * sizeof *x) : NULL;
        if (x) {
            if (m->n_ext) memcpy(x, m->ext, m->n_ext * sizeof *x);
            RDMAX_FREE(m->ext);
            m->ext = x;
            m->cap_ext = cap;
        } else {
            m->n_ext = 0;
        }
    }
    if (m->n_ext < m->cap_ext) {
        m->ext[m->n_ext].s = lo;
        m->ext[m->n_ext].e = hi;
        m->n_ext++;
    }
out:
    pthread_mutex_unlock(&rdmax__mon_lock);
    return ok;
}
#else
static int rdmax__mon_open_locked(void)
{
    rdmax__mon.error = ENOSYS;
    snprintf(rdmax__mon.why, sizeof rdmax__mon.why, "no userfaultfd on this platform");
    return 0;
}
static int rdmax__mon_start_locked(void) { return rdmax__mon_open_locked(); }
static int rdmax__mon_watch(uintptr_t s, uintptr_t e) { (void)s, (void)e; return 0; }
#endif

RDMAX_API void rdmax_rcache_query_monitor(rdmax_rcache_monitor_info *out)
{
    rdmax__mon_lock_take();
    memset(out, 0, sizeof *out);
    out->running = rdmax__mon.started && rdmax__mon.pid == (int)getpid();
    out->usable = rdmax__mon_open_locked();
    out->user_mode_only = rdmax__mon.user_mode_only;
    out->error = rdmax__mon.error;
    snprintf(out->why, sizeof out->why, "%s", rdmax__mon.why);
    out->unmap = __atomic_load_n(&rdmax__mon.n[0], __ATOMIC_RELAXED);
    out->remove = __atomic_load_n(&rdmax__mon.n[1], __ATOMIC_RELAXED);
    out->remap = __atomic_load_n(&rdmax__mon.n[2], __ATOMIC_RELAXED);
    out->other = __atomic_load_n(&rdmax__mon.n[3], __ATOMIC_RELAXED);
    out->lost = __atomic_load_n(&rdmax__mon.lost, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&rdmax__mon_lock);
}

/* ---- >>invalidation: registration cache: invalidation, and draining the event ring --------------- */
/* Goal: once the memory under a cached region is unmapped or replaced, that registration is
   never handed out again (else a put silently sends the old pages).

   Default mechanism (mode RDMAX_RCACHE_AUTO): the userfaultfd monitor (>>monitor above), chosen by
   the route table and the measurements in the manual (rdmax.h, REGISTRATION CACHE). It feeds the
   same ring as the hooks above; a range it cannot watch is registered per get. The opt-in hooks
   remain for programs that want a cheaper munmap and accept what they change and miss. */

RDMAX_API unsigned rdmax_rcache_memhooks(void)
{
    unsigned bits = 0;
#if RDMAX__RCACHE_HOOKS
    bits |= RDMAX_RCACHE_HOOKS_INTERPOSED;
#endif
    if (__atomic_load_n(&rdmax__mon.started, __ATOMIC_ACQUIRE) && rdmax__mon.pid == (int)getpid())
        bits |= RDMAX_RCACHE_HOOKS_UFFD;
    if (__atomic_load_n(&rdmax__rcache_malloc_policy, __ATOMIC_ACQUIRE)) bits |= RDMAX_RCACHE_HOOKS_MALLOPT;
    return bits;
}

static int rdmax__rcache_invalidate_pages(rdmax_rcache *rc, uint64_t ps, uint64_t pe)
{
    int n = 0;
    rdmax_rcache_region *r;
    if (pe > RDMAX__RCACHE_PN_LIMIT) pe = RDMAX__RCACHE_PN_LIMIT;
    while (ps < pe && (r = rdmax__rcache_tree_first(rc->rdmax__root, 0, 0, ps, pe)) != NULL) {
        ps = rdmax__rcache_epn(rc, r);
        rdmax__rcache_drop(rc, r, 1);
        n++;
    }
    return n;
}

static int rdmax__rcache_invalidate_all(rdmax_rcache *rc)
{
    int n = 0;
    rdmax_rcache_region *r = rc->rdmax__all_head, *next;
    for (; r; r = next) {
        next = r->rdmax__all_next;
        if (r->rdmax__flags & RDMAX__RCACHE_IN_LOOKUP) {
            rdmax__rcache_drop(rc, r, 1);
            n++;
        }
    }
    return n;
}

static int rdmax__rcache_invalidate_bytes(rdmax_rcache *rc, uint64_t s, uint64_t e)
{
    unsigned sh = rc->rdmax__page_shift;
    uint64_t mask = (UINT64_C(1) << sh) - 1;
    if (s == 0 && e == UINT64_MAX) return rdmax__rcache_invalidate_all(rc);
    if (e <= s) return 0;
    return rdmax__rcache_invalidate_pages(rc, s >> sh, (e >> sh) + ((e & mask) != 0));
}

/* Applies the events recorded since this cache's cursor (see "Automatic invalidation"). */
static int rdmax__rcache_drain_locked(rdmax_rcache *rc)
{
    const uint64_t size = RDMAX_RCACHE_EVENT_RING_SIZE;
    uint64_t h = __atomic_load_n(&rdmax__rcache_event_head, __ATOMIC_ACQUIRE);
    uint64_t c = rc->rdmax__seen, resume = h;
    int n = 0;
    if (h == c) return 0;
    if (rc->rdmax__mode == RDMAX_RCACHE_MANUAL) { /* the program invalidates; events are not ours */
        rc->rdmax__seen = h;
        return 0;
    }
    if (h - c > size) goto lost;
    for (; c < h; c++) {
        rdmax__rcache_event *ev = &rdmax__rcache_events[c & (size - 1)];
        uint64_t v = __atomic_load_n(&ev->seq, __ATOMIC_ACQUIRE);
        if (v == c + 1) {
            uint64_t s = __atomic_load_n(&ev->start, __ATOMIC_RELAXED);
            uint64_t e = __atomic_load_n(&ev->end, __ATOMIC_RELAXED);
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            if (__atomic_load_n(&ev->seq, __ATOMIC_RELAXED) != c + 1) goto lost; /* overwritten */
            rc->rdmax__stats.events += e > s;
            n += rdmax__rcache_invalidate_bytes(rc, s, e);
        } else if ((v & ~(RDMAX__RCACHE_EV_BUSY | RDMAX__RCACHE_EV_MON)) > c + 1) {
            goto lost; /* a writer lapped us */
        } else if (v & RDMAX__RCACHE_EV_MON) {
            /* the monitor is reading an event that may already have let an munmap return: wait
               (it takes no lock and does not block) */
            if (rdmax__mon.pid != (int)getpid()) goto lost; /* a forked child: no monitor here */
            sched_yield();
            c--;
            continue;
        } else if (resume == h) {
            resume = c; /* claimed, not yet published: look again next time */
        }
    }
    rc->rdmax__seen = resume;
    return n;
lost:
    rc->rdmax__stats.overflows++;
    rc->rdmax__seen = h;
    return n + rdmax__rcache_invalidate_all(rc);
}

RDMAX_API int rdmax_rcache_invalidate(rdmax_rcache *rc, const void *addr, size_t len)
{
    uintptr_t a = (uintptr_t)addr;
    int n;
    if (!rc || a + len < a)
        return rdmax__rcache_fail(RDMAX_ERR_INVALID_PARAM, RDMAX_LOG_ITEM_RCACHE_PARAM,
                                  "rdmax_rcache_invalidate: %s", !rc ? "the cache is NULL" : "the range wraps");
    if (len == 0) return 0;
    rdmax__rcache_lock(rc);
    n = rdmax__rcache_invalidate_bytes(rc, a, a + len);
    rdmax__rcache_update_over(rc);
    rdmax__rcache_unlock(rc);
    return n;
}

RDMAX_API int rdmax_rcache_drain(rdmax_rcache *rc)
{
    int n;
    if (!rc)
        return rdmax__rcache_fail(RDMAX_ERR_INVALID_PARAM, RDMAX_LOG_ITEM_RCACHE_PARAM,
                                  "rdmax_rcache_drain: the cache is NULL");
    rdmax__rcache_lock(rc);
    n = rdmax__rcache_drain_locked(rc);
    rdmax__rcache_update_over(rc);
    rdmax__rcache_unlock(rc);
    return n;
}

/* ---- >>rcache: registration cache: a region's life cycle, get and put, create and destroy -------- */

static void rdmax__rcache_all_link(rdmax_rcache *rc, rdmax_rcache_region *r)
{
    r->rdmax__all_prev = NULL;
    r->rdmax__all_next = rc->rdmax__all_head;
    if (rc->rdmax__all_head) rc->rdmax__all_head->rdmax__all_prev = r;
    rc->rdmax__all_head = r;
}

static void rdmax__rcache_all_unlink(rdmax_rcache *rc, rdmax_rcache_region *r)
{
    if (r->rdmax__all_prev) r->rdmax__all_prev->rdmax__all_next = r->rdmax__all_next;
    else rc->rdmax__all_head = r->rdmax__all_next;
    if (r->rdmax__all_next) r->rdmax__all_next->rdmax__all_prev = r->rdmax__all_prev;
}

/* deregisters a live registration and returns its slot */
static void rdmax__rcache_dereg_free(rdmax_rcache *rc, rdmax_rcache_region *r)
{
    rc->rdmax__desc.ops.dereg(rc->rdmax__desc.ops.arg, r);
    rc->rdmax__stats.dereg_calls++;
    rc->rdmax__stats.regions--;
    rc->rdmax__stats.bytes -= r->end - r->start;
    rdmax__rcache_all_unlink(rc, r);
    rdmax__rcache_region_free(rc, r);
}

/* takes r out of the lookup (and the LRU); the caller decides what happens to it next */
static void rdmax__rcache_detach(rdmax_rcache *rc, rdmax_rcache_region *r)
{
    rdmax__rcache_tree_remove(&rc->rdmax__desc, rc->rdmax__root, 0, 0, rdmax__rcache_spn(rc, r), rdmax__rcache_epn(rc, r),
                          (uintptr_t)r | 1u);
    if (r->rdmax__flags & RDMAX__RCACHE_IN_LRU) rdmax__rcache_lru_unlink(rc, r);
    r->rdmax__flags &= ~RDMAX__RCACHE_IN_LOOKUP;
    rc->rdmax__stats.cached_regions--;
    rc->rdmax__stats.cached_bytes -= r->end - r->start;
}

/* detaches r and deregisters it now if unused, else when its last reference is put */
static void rdmax__rcache_drop(rdmax_rcache *rc, rdmax_rcache_region *r, int invalid)
{
    rdmax__rcache_detach(rc, r);
    if (invalid) {
        __atomic_or_fetch(&r->rdmax__flags, RDMAX__RCACHE_INVALID, __ATOMIC_RELAXED);
        rc->rdmax__stats.invalidations++;
        if (rc->rdmax__desc.ops.notify) rc->rdmax__desc.ops.notify(rc->rdmax__desc.ops.arg, RDMAX_RCACHE_NOTIFY_INVALIDATE, r);
    }
    if (r->refcount == 0) rdmax__rcache_dereg_free(rc, r);
}

static int rdmax__rcache_evict_one(rdmax_rcache *rc)
{
    rdmax_rcache_region *h;
    while ((h = rc->rdmax__lru_head) != NULL) {
        rdmax__rcache_lru_unlink(rc, h);
        if (h->refcount) continue; /* in use: its last put re-appends it */
        if (h->rdmax__last_use != h->rdmax__lru_stamp) {
            rdmax__rcache_lru_insert_sorted(rc, h); /* used again since it was queued */
            continue;
        }
        rc->rdmax__stats.evictions++;
        if (rc->rdmax__desc.ops.notify) rc->rdmax__desc.ops.notify(rc->rdmax__desc.ops.arg, RDMAX_RCACHE_NOTIFY_EVICT, h);
        rdmax__rcache_drop(rc, h, 0);
        return 1;
    }
    return 0;
}

static int rdmax__rcache_over(const rdmax_rcache *rc, uint64_t more_regions, uint64_t more_bytes)
{
    return rc->rdmax__stats.regions + more_regions > rc->rdmax__desc.max_regions ||
           rc->rdmax__stats.bytes + more_bytes > rc->rdmax__desc.max_bytes;
}

/* evicts until `more` fits; returns 0 if it does, 1 if nothing evictable is left */
static int rdmax__rcache_make_room(rdmax_rcache *rc, uint64_t more_regions, uint64_t more_bytes)
{
    while (rdmax__rcache_over(rc, more_regions, more_bytes))
        if (!rdmax__rcache_evict_one(rc)) return 1;
    return 0;
}

static void rdmax__rcache_update_over(rdmax_rcache *rc)
{
    if (rc->rdmax__over) rdmax__rcache_make_room(rc, 0, 0);
    rc->rdmax__over = (uint32_t)rdmax__rcache_over(rc, 0, 0);
}

static void rdmax__rcache_lock(rdmax_rcache *rc)
{
    if (rc->rdmax__thread_safe) pthread_mutex_lock(&rc->rdmax__lock);
}

static void rdmax__rcache_unlock(rdmax_rcache *rc)
{
    if (rc->rdmax__thread_safe) pthread_mutex_unlock(&rc->rdmax__lock);
}

/* The cache's errors are rdmax_status values. It has no logger (it may have no context): its sentence
   goes to the calling thread's last error (rdmax_ctx_query_last_error(NULL)) only. Failure paths only. */
#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static rdmax_status rdmax__rcache_fail(rdmax_status st, rdmax_log_item item, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rdmax__tls_error, sizeof rdmax__tls_error, fmt, ap);
    va_end(ap);
    rdmax__tls_error_item = item;
    return st;
}

/* The status for a reg op's -errno (ibv_reg_mr's errno): memory it cannot pin is the caller's error. */
static rdmax_status rdmax__rcache_reg_status(int neg_errno)
{
    switch (-neg_errno) {
    case EFAULT:
    case EINVAL: return RDMAX_ERR_INVALID_PARAM;
    case ENOMEM: return RDMAX_ERR_NO_MEMORY;
    default: return RDMAX_ERR_IO;
    }
}

static int rdmax__rcache_reg(rdmax_rcache *rc, rdmax_rcache_region *r, uint64_t ps, uint64_t pe, unsigned access)
{
    unsigned sh = rc->rdmax__page_shift;
    int st;
    r->start = (uintptr_t)(ps << sh);
    r->end = (uintptr_t)(pe << sh);
    r->access = access;
    r->mr = NULL;
    r->lkey = r->rkey = 0;
    st = rc->rdmax__desc.ops.reg(rc->rdmax__desc.ops.arg, (void *)r->start, r->end - r->start, access, r);
    if (st != 0) {
        rc->rdmax__stats.reg_failures++;
        return st < 0 ? st : -EIO;
    }
    rc->rdmax__stats.reg_calls++;
    rc->rdmax__stats.regions++;
    rc->rdmax__stats.bytes += r->end - r->start;
    rdmax__rcache_all_link(rc, r);
    return 0;
}

/* 1 if pages [ps, pe) may be cached: every change to them will reach this cache as an event. */
static int rdmax__rcache_hooks_cover(void)
{
    return (rdmax_rcache_memhooks() & (RDMAX_RCACHE_HOOKS_INTERPOSED | RDMAX_RCACHE_HOOKS_MALLOPT)) ==
           (RDMAX_RCACHE_HOOKS_INTERPOSED | RDMAX_RCACHE_HOOKS_MALLOPT);
}

/* 1 if pages [ps, pe) may be cached: every change to them will reach this cache as an event. In
   AUTO mode the range is registered with the monitor here, before the reg op, so that an unmap
   racing with the registration is seen too. */
static int rdmax__rcache_watched(rdmax_rcache *rc, uint64_t ps, uint64_t pe)
{
    unsigned sh = rc->rdmax__page_shift;
    int w;
    switch (rc->rdmax__mode) {
    case RDMAX_RCACHE_MANUAL: return 1;
    case RDMAX_RCACHE_UNCACHED: return 0;
    default:
        w = rdmax__mon_watch((uintptr_t)(ps << sh), (uintptr_t)(pe << sh));
        /* the watch publishes an event when it finds a registration gone: drop the old regions there
           now, before the miss merges them into its new one */
        if (__atomic_load_n(&rdmax__rcache_event_head, __ATOMIC_RELAXED) != rc->rdmax__seen)
            rdmax__rcache_drain_locked(rc);
        return w || rdmax__rcache_hooks_cover();
    }
}

static rdmax_status rdmax__rcache_miss(rdmax_rcache *rc, uint64_t ps, uint64_t pe, unsigned access,
                                      rdmax_rcache_region **out)
{
    uint64_t ns = ps, ne = pe, cur = ps;
    unsigned a = access;
    rdmax_rcache_region *r, *released = NULL;
    int st, cached = pe <= RDMAX__RCACHE_PN_LIMIT && rdmax__rcache_watched(rc, ps, pe);

    rc->rdmax__stats.misses++;
    if (!cached) rc->rdmax__stats.uncached++;
    if (cached) {
        /* 1. every overlapping region: union of range and access */
        while (cur < pe && (r = rdmax__rcache_tree_first(rc->rdmax__root, 0, 0, cur, pe)) != NULL) {
            cur = rdmax__rcache_epn(rc, r);
            if (rdmax__rcache_spn(rc, r) < ns) ns = rdmax__rcache_spn(rc, r);
            if (cur > ne) ne = cur;
            a |= r->access;
            rdmax__rcache_detach(rc, r);
            rc->rdmax__stats.merges++;
            r->rdmax__lru_next = released; /* reuse the link: r is off the LRU now */
            released = r;
        }
        /* 2. touching regions with exactly that access */
        if (ns > 0 && (r = rdmax__rcache_lookup(rc, ns - 1)) != NULL && r->access == a) {
            ns = rdmax__rcache_spn(rc, r);
            rdmax__rcache_detach(rc, r);
            rc->rdmax__stats.merges++;
            r->rdmax__lru_next = released;
            released = r;
        }
        if (ne < RDMAX__RCACHE_PN_LIMIT && (r = rdmax__rcache_lookup(rc, ne)) != NULL && r->access == a) {
            ne = rdmax__rcache_epn(rc, r);
            rdmax__rcache_detach(rc, r);
            rc->rdmax__stats.merges++;
            r->rdmax__lru_next = released;
            released = r;
        }
        /* 3. unused merged regions go now; in-use ones live on until their last put */
        while (released) {
            r = released;
            released = r->rdmax__lru_next;
            r->rdmax__lru_next = NULL;
            if (r->refcount == 0) rdmax__rcache_dereg_free(rc, r);
        }
    }
    /* 4. room for the new registration (soft: in-use regions are never evicted) */
    if (rdmax__rcache_make_room(rc, 1, (ne - ns) << rc->rdmax__page_shift)) rc->rdmax__stats.over_limit++;

    r = rdmax__rcache_region_alloc(rc);
    if (!r) {
        rdmax__rcache_update_over(rc);
        return rdmax__rcache_fail(RDMAX_ERR_NO_MEMORY, RDMAX_LOG_ITEM_NO_MEMORY,
                                  "rdmax_rcache_get: no memory for the cache's region bookkeeping");
    }
    /* 5. register: merged range, else the request alone, else after evicting everything unused */
    st = rdmax__rcache_reg(rc, r, ns, ne, a);
    if (st != 0 && (ns != ps || ne != pe || a != access)) st = rdmax__rcache_reg(rc, r, ps, pe, access);
    if (st != 0) {
        int evicted = 0;
        while (rdmax__rcache_evict_one(rc)) evicted++;
        if (evicted) st = rdmax__rcache_reg(rc, r, ps, pe, access);
    }
    if (st != 0) {
        rdmax__rcache_region_free(rc, r);
        rdmax__rcache_update_over(rc);
        return rdmax__rcache_fail(rdmax__rcache_reg_status(st), RDMAX_LOG_ITEM_RCACHE_REG,
                                  "rdmax_rcache_get: registering %#lx+%lu failed: %s",
                                  (unsigned long)(ps << rc->rdmax__page_shift),
                                  (unsigned long)((pe - ps) << rc->rdmax__page_shift), strerror(-st));
    }
    r->refcount = 1;
    if (cached) {
        uintptr_t v = (uintptr_t)r | 1u;
        int ist = rdmax__rcache_tree_insert(&rc->rdmax__desc, rc->rdmax__root, 0, 0, rdmax__rcache_spn(rc, r), rdmax__rcache_epn(rc, r), v);
        if (ist != 0) {
            /* no memory for table nodes: hand the region out uncached */
            rdmax__rcache_tree_remove(&rc->rdmax__desc, rc->rdmax__root, 0, 0, rdmax__rcache_spn(rc, r), rdmax__rcache_epn(rc, r), v);
        } else {
            r->rdmax__flags = RDMAX__RCACHE_IN_LOOKUP;
            rc->rdmax__stats.cached_regions++;
            rc->rdmax__stats.cached_bytes += r->end - r->start;
        }
    }
    rc->rdmax__over = (uint32_t)rdmax__rcache_over(rc, 0, 0);
    *out = r;
    return RDMAX_OK;
}

RDMAX_API rdmax_status rdmax__rcache_get_slow(rdmax_rcache *rc, const void *addr, size_t len, unsigned access,
                                              rdmax_rcache_region **out)
{
    uintptr_t a = (uintptr_t)addr;
    uint64_t ps, pe;
    unsigned sh;
    rdmax_rcache_region *r;
    rdmax_status st;
    if (!rc || !out)
        return rdmax__rcache_fail(RDMAX_ERR_INVALID_PARAM, RDMAX_LOG_ITEM_RCACHE_PARAM,
                                  "rdmax_rcache_get: %s is NULL", !rc ? "the cache" : "out");
    if (len == 0) len = 1;
    sh = rc->rdmax__page_shift;
    /* a range that wraps, or ends in the address space's last page (its region's end would wrap to 0) */
    if (a + len < a || a + len - 1 > UINTPTR_MAX - ((uintptr_t)1 << sh))
        return rdmax__rcache_fail(RDMAX_ERR_INVALID_PARAM, RDMAX_LOG_ITEM_RCACHE_PARAM,
                                  "rdmax_rcache_get: %p+%zu wraps around the address space", addr, len);
    ps = (uint64_t)a >> sh;
    pe = (((uint64_t)(a + len) - 1) >> sh) + 1;

    rdmax__rcache_lock(rc);
    if (__atomic_load_n(&rdmax__rcache_event_head, __ATOMIC_RELAXED) != rc->rdmax__seen) {
        rdmax__rcache_drain_locked(rc);
        rdmax__rcache_update_over(rc);
    }
    if (pe <= RDMAX__RCACHE_PN_LIMIT) {
        r = rdmax__rcache_lookup(rc, ps);
        if (r && len <= r->end - a && (r->access & access) == access) {
            r->refcount++;
            rc->rdmax__stats.hits++;
            *out = r;
            rdmax__rcache_unlock(rc);
            return RDMAX_OK;
        }
    }
    st = rdmax__rcache_miss(rc, ps, pe, access, out);
    rdmax__rcache_unlock(rc);
    return st;
}

RDMAX_API void rdmax__rcache_release_slow(rdmax_rcache *rc, rdmax_rcache_region *r)
{
    rdmax__rcache_lock(rc);
    if (r->refcount == 0) { /* put without a reference: ignore rather than corrupt */
        rdmax__rcache_unlock(rc);
        return;
    }
    if (--r->refcount == 0) {
        if (r->rdmax__flags & RDMAX__RCACHE_IN_LOOKUP) {
            r->rdmax__last_use = ++rc->rdmax__clock;
            if (!(r->rdmax__flags & RDMAX__RCACHE_IN_LRU))
                rdmax__rcache_lru_insert_after(rc, rc->rdmax__lru_tail, r);
        } else {
            rdmax__rcache_dereg_free(rc, r); /* merged away, invalidated, or uncached */
        }
        rdmax__rcache_update_over(rc);
    }
    rdmax__rcache_unlock(rc);
}

RDMAX_API void rdmax__rcache_hold_slow(rdmax_rcache *rc, rdmax_rcache_region *r)
{
    rdmax__rcache_lock(rc);
    r->refcount++;
    rdmax__rcache_unlock(rc);
}

RDMAX_API rdmax_status rdmax_rcache_create(const rdmax_rcache_desc *desc, rdmax_rcache **out)
{
    rdmax_rcache *rc;
    long ps;
    unsigned sh = 0;
    if (!desc || !out || !desc->ops.reg || !desc->ops.dereg)
        return rdmax__rcache_fail(RDMAX_ERR_INVALID_PARAM, RDMAX_LOG_ITEM_RCACHE_PARAM,
                                  "rdmax_rcache_create: %s is NULL", !desc ? "desc" : !out ? "out"
                                  : !desc->ops.reg ? "desc->ops.reg" : "desc->ops.dereg");
    if (desc->mode != RDMAX_RCACHE_AUTO && desc->mode != RDMAX_RCACHE_MANUAL && desc->mode != RDMAX_RCACHE_UNCACHED)
        return rdmax__rcache_fail(RDMAX_ERR_INVALID_PARAM, RDMAX_LOG_ITEM_RCACHE_PARAM,
                                  "rdmax_rcache_create: unknown mode %d (RDMAX_RCACHE_AUTO, _MANUAL or _UNCACHED)",
                                  desc->mode);
    if (!desc->allocator.alloc != !desc->allocator.free)
        return rdmax__rcache_fail(RDMAX_ERR_INVALID_PARAM, RDMAX_LOG_ITEM_RCACHE_PARAM,
                                  "rdmax_rcache_create: desc->allocator has %s but not %s: give both or neither",
                                  desc->allocator.alloc ? "alloc" : "free", desc->allocator.alloc ? "free" : "alloc");
    ps = sysconf(_SC_PAGESIZE);
    if (ps <= 0 || (ps & (ps - 1)))
        return rdmax__rcache_fail(RDMAX_ERR_IO, RDMAX_LOG_ITEM_RCACHE_CREATE,
                                  "rdmax_rcache_create: the page size %ld is not a power of two", ps);
    while ((1L << sh) < ps) sh++;
    rc = (rdmax_rcache *)rdmax__rcache_malloc(desc, sizeof(*rc));
    if (!rc)
        return rdmax__rcache_fail(RDMAX_ERR_NO_MEMORY, RDMAX_LOG_ITEM_NO_MEMORY,
                                  "rdmax_rcache_create: no memory for the cache");
    memset(rc, 0, sizeof(*rc));
    rc->rdmax__desc = *desc;
    if (!rc->rdmax__desc.max_regions) rc->rdmax__desc.max_regions = RDMAX_RCACHE_DEFAULT_MAX_REGIONS;
    if (!rc->rdmax__desc.max_bytes) rc->rdmax__desc.max_bytes = RDMAX_RCACHE_DEFAULT_MAX_BYTES;
    rc->rdmax__desc.thread_safe = desc->thread_safe ? 1 : 0;
    rc->rdmax__page_shift = sh;
    rc->rdmax__mode = (uint32_t)desc->mode;
    rc->rdmax__root = rdmax__rcache_node_new(desc, 0);
    if (!rc->rdmax__root) {
        rdmax__rcache_free(desc, rc);
        return rdmax__rcache_fail(RDMAX_ERR_NO_MEMORY, RDMAX_LOG_ITEM_NO_MEMORY,
                                  "rdmax_rcache_create: no memory for the page table's root");
    }
    if (rc->rdmax__desc.thread_safe) {
        if (pthread_mutex_init(&rc->rdmax__lock, NULL) != 0) {
            rdmax__rcache_node_free(desc, rc->rdmax__root);
            rdmax__rcache_free(desc, rc);
            return rdmax__rcache_fail(RDMAX_ERR_NO_MEMORY, RDMAX_LOG_ITEM_NO_MEMORY,
                                      "rdmax_rcache_create: pthread_mutex_init failed");
        }
        rc->rdmax__thread_safe = 1;
    }
    rdmax__rcache_apply_malloc_policy();
    if (rc->rdmax__mode == RDMAX_RCACHE_AUTO) {
        rdmax__mon_lock_take();
        rdmax__mon_start_locked(); /* if it cannot run, AUTO registers every get for itself */
        pthread_mutex_unlock(&rdmax__mon_lock);
    }
    /* count ourselves before reading the cursor: from here on every hook records */
    __atomic_add_fetch(&rdmax__rcache_live_caches, 1, __ATOMIC_SEQ_CST);
    rc->rdmax__seen = __atomic_load_n(&rdmax__rcache_event_head, __ATOMIC_SEQ_CST);
    *out = rc;
    return RDMAX_OK;
}

RDMAX_API int rdmax_rcache_destroy(rdmax_rcache *rc)
{
    int held = 0;
    rdmax_rcache_region *r, *next;
    void *slab;
    if (!rc) return 0;
    for (r = rc->rdmax__all_head; r; r = next) {
        next = r->rdmax__all_next;
        if (r->refcount) held++;
        rc->rdmax__desc.ops.dereg(rc->rdmax__desc.ops.arg, r);
    }
    rdmax__rcache_node_free_tree(&rc->rdmax__desc, rc->rdmax__root, 0);
    for (slab = rc->rdmax__slabs; slab;) {
        void *n = *(void **)slab;
        rdmax__rcache_free(&rc->rdmax__desc, slab);
        slab = n;
    }
    if (rc->rdmax__thread_safe) pthread_mutex_destroy(&rc->rdmax__lock);
    __atomic_sub_fetch(&rdmax__rcache_live_caches, 1, __ATOMIC_SEQ_CST);
    {
        rdmax_rcache_desc d = rc->rdmax__desc; /* the allocator outlives the struct it frees */
        rdmax__rcache_free(&d, rc);
    }
    return held;
}

RDMAX_API void rdmax_rcache_query_stats(rdmax_rcache *rc, rdmax_rcache_stats *out)
{
    rdmax__rcache_lock(rc);
    *out = rc->rdmax__stats;
    rdmax__rcache_unlock(rc);
}

RDMAX_API rdmax_rcache_desc rdmax_rcache_query_desc(const rdmax_rcache *rc)
{
    return rc->rdmax__desc;
}

/* ---- consistency check for tests ---- */

static int rdmax__rcache_check_node(const rdmax_rcache *rc, const uintptr_t *node, unsigned level, uint64_t base,
                                uint64_t *pages)
{
    unsigned i, used = 0, sh = rdmax__rcache_shift[level];
    for (i = 0; i < rdmax__rcache_fan[level]; i++) {
        uintptr_t e = node[i];
        uint64_t cs = base + ((uint64_t)i << sh), ce = cs + (UINT64_C(1) << sh);
        if (!e) continue;
        used++;
        if (e & 1u) {
            const rdmax_rcache_region *r = (const rdmax_rcache_region *)(e - 1u);
            if (!(r->rdmax__flags & RDMAX__RCACHE_IN_LOOKUP)) return -1;
            if (cs < rdmax__rcache_spn(rc, r) || ce > rdmax__rcache_epn(rc, r)) return -2;
            *pages += ce - cs;
        } else {
            int st;
            if (level == 3) return -3;
            st = rdmax__rcache_check_node(rc, (const uintptr_t *)e, level + 1, cs, pages);
            if (st) return st;
        }
    }
    if (level > 0 && used == 0) return -4;
    if (node[-1] != used) return -5;
    return 0;
}

RDMAX_API int rdmax__rcache_validate(rdmax_rcache *rc)
{
    uint64_t pages = 0, cached_pages = 0, n = 0, nb = 0, nc = 0, ncb = 0, prev_end = 0, cur = 0;
    const rdmax_rcache_region *r, *p;
    unsigned sh = rc->rdmax__page_shift;
    int st;
    rdmax__rcache_lock(rc);
    st = rdmax__rcache_check_node(rc, rc->rdmax__root, 0, 0, &pages);
    if (st) goto out;
    for (r = rc->rdmax__all_head; r; r = r->rdmax__all_next) {
        n++;
        nb += r->end - r->start;
        if (r->start >= r->end || (r->start & ((1u << sh) - 1)) || (r->end & ((1u << sh) - 1))) { st = -6; goto out; }
        if (r->rdmax__flags & RDMAX__RCACHE_IN_LOOKUP) {
            nc++;
            ncb += r->end - r->start;
            cached_pages += (r->end - r->start) >> sh;
            if (rdmax__rcache_lookup(rc, rdmax__rcache_spn(rc, r)) != r || rdmax__rcache_lookup(rc, rdmax__rcache_epn(rc, r) - 1) != r) { st = -7; goto out; }
            if (r->refcount == 0 && !(r->rdmax__flags & RDMAX__RCACHE_IN_LRU)) { st = -8; goto out; }
            if (r->rdmax__flags & RDMAX__RCACHE_INVALID) { st = -9; goto out; }
        } else {
            if (r->refcount == 0) { st = -10; goto out; } /* zombie without users must be gone */
            if (r->rdmax__flags & RDMAX__RCACHE_IN_LRU) { st = -11; goto out; }
        }
    }
    if (n != rc->rdmax__stats.regions || nb != rc->rdmax__stats.bytes) { st = -12; goto out; }
    if (nc != rc->rdmax__stats.cached_regions || ncb != rc->rdmax__stats.cached_bytes) { st = -13; goto out; }
    if (pages != cached_pages) { st = -14; goto out; }
    /* regions in the table, in address order, never overlap */
    while ((r = rdmax__rcache_tree_first(rc->rdmax__root, 0, 0, cur, RDMAX__RCACHE_PN_LIMIT)) != NULL) {
        if (rdmax__rcache_spn(rc, r) < prev_end) { st = -15; goto out; }
        prev_end = cur = rdmax__rcache_epn(rc, r);
    }
    /* the LRU is sorted by stamp, stamps never run ahead of last use */
    for (p = NULL, r = rc->rdmax__lru_head; r; p = r, r = r->rdmax__lru_next) {
        if (!(r->rdmax__flags & RDMAX__RCACHE_IN_LRU) || !(r->rdmax__flags & RDMAX__RCACHE_IN_LOOKUP)) { st = -16; goto out; }
        if (r->rdmax__lru_prev != p) { st = -17; goto out; }
        if (p && p->rdmax__lru_stamp > r->rdmax__lru_stamp) { st = -18; goto out; }
        if (r->rdmax__lru_stamp > r->rdmax__last_use) { st = -19; goto out; }
    }
    if (rc->rdmax__lru_tail != p) { st = -20; goto out; }
    if (rc->rdmax__over != (uint32_t)rdmax__rcache_over(rc, 0, 0)) { st = -21; goto out; }
out:
    rdmax__rcache_unlock(rc);
    return st;
}

/* ---- >>srq: receive pools: buffers, chunks, each endpoint's receive queue, the QP-number map; life: >>pools */
/* RC endpoints receive from receive pools, one per buffer size in use (endpoints with the same recv_size
   share one pool; the context's recv_size is the default, and its pool stays for the context's life; a
   pool of another size goes with its last endpoint - at the end of the poll batch when a callback
   destroyed it, so a pool never goes while a batch may name it - and its slot is not reused until the
   receive CQ was drained: a completion still queued for it then finds no pool and is dropped). A pool
   has no shared receive queue: each endpoint has a receive queue of its own (its QP made with srq NULL,
   max_recv_wr = max_window + 1) that holds exactly its credits C (ep->rq_depth, the window + 1) of the
   pool's buffers. So a peer can consume only what was posted for it: past its window it meets RNR on
   its own QP, or is failed for it (rdmax__grant_or_fail), and never takes a buffer, a credit or a
   receive CQ entry another endpoint was given (issue 30). Memory stays sized by what is granted (>>recv).

     pool     chunks of per_chunk buffers of recv_size bytes (about 256 KiB, at most 256 buffers, at
              least one); each chunk is one NUMA-placed allocation and one MR. A buffer is named by its
              pool and index (chunk << 8 | slot: a fixed field for the slot, so decoding one needs no
              shift by a pool's count), the low bits of its wr_id, whose endpoint field is 0xffff (never
              a real endpoint index): receive bit | pool << 25 | index, bit 30 clear. Bits 48..63 hold
              the table index of the endpoint whose queue it is posted on, so the inline paths' one
              compare of wr_id >> 25 with the last endpoint's (last_tag) checks the pool and the owner.
     owner    owner[li] (4 bytes per buffer, nothing per endpoint that grows with its window): the
              endpoint (table index | generation << 16) whose queue the buffer is posted on, or came
              from and goes back to; RDMAX__OWNER_NONE on the free list or home. Set when a free buffer
              is posted for an endpoint, cleared when one goes to the free list (rdmax__srq_unpost):
              a buffer that comes back and is posted again on the same queue, the common case, stores
              nothing. A completion of the QP names a buffer its endpoint owns (checked, by the wr_id's
              owner bits inline and by owner[] elsewhere: anything else is counted and dropped);
              ep->rx_n counts the ones it owns (on its queue, in hand until their repost, staged): it
              changes only where owner[] does. A failed or flushed
              completion's buffer goes to the free list at once (its QP is in error: a repost would
              come back flushed).
     posted   the buffers endpoints own: on their queues, and in hand (a poll batch took them, the post
              of their run has not counted them out yet); free[0, n_free): the others
     staged   rq[0, n_stage): buffers the receive path gave back in this poll batch, with the wr_id,
              address and key it had them by; their owner is the queue they go back to. rdmax__srq_fill
              posts them in runs of one owner (a burst comes from one QP: all of them in one
              ibv_post_recv unless s->mixed says a second endpoint staged some), each run made to fit
              its endpoint: topped up from the free list to C (a draining chunk's buffer went home, the
              window grew), or cut to C (the window shrank: the rest go to the free list); a run whose
              endpoint is gone or failed (its QP in error would flush them back at once) goes to the
              free list.
     target   the sum of the credits C of the pool's endpoints; posted + n_free >= target always, and
              between poll batches every connected endpoint holds its C posted
     live     chunks [0, n_live) are reposted; above target by more than a chunk (windows shrank,
              endpoints went), the tick lets the newest drain (rdmax__srq_giveback): their buffers are
              kept home as they come back (rdmax__srq_withhold: never below target, the run's top-up
              posts a free one in its place), at the free array's top end free[n_bufs - n_home,
              n_bufs), and once all are home the chunks are deregistered and freed. A receive queue
              consumes in post order, so a draining chunk empties once traffic went through what is
              posted.

   A new endpoint's C buffers are counted in target at creation (registered if need be) and posted once
   its QP is in INIT (rdmax__ep_rq_fill: a QP in RESET takes no receives). Window growth
   (rdmax__window_grow) posts the new buffers on the QP before it grants them; a shrink lowers C and the
   next run gives the rest back. Destroy: the QP first, then the buffers it owns go back to the free list
   (a destroyed QP's posted receives never complete on most devices, and the device writes none of them
   after the destroy), found by a scan of owner[] (a slow path, like the destroy of the QP): all but the
   staged ones, which the fill frees with their dead endpoint's run. A destroy inside a poll batch (a
   callback) leaves that scan to the end of the outermost batch (rdmax__pool_reap): the buffer in hand
   is the callback's until it returns, and on the free list a nested poll or a new endpoint could post it
   on another queue at once. A completion polled and not handled yet is dropped by its QP number
   (below). And target falls by C.

   A receive completion names its QP (wc->qp_num); a small open-addressing map gives the endpoint. A
   destroyed endpoint leaves a tombstone stamped with the receive CQ's drain epoch (how many polls found
   the CQ empty): its completions still queued are counted (stale_wr_ids) and dropped without touching
   their buffers, which went back to the free list at the destroy (recycling them again would post one
   buffer twice). The tombstone dies once the CQ was seen empty after the destroy (nothing of a
   destroyed QP can arrive later); until then a new QP that happens to get the same number is not used.

   Receive groups: a receive CQ holds at most max_cqe entries, and every credit of the endpoints on it.
   An endpoint that would pass that goes to the next group with room, or a new one (rdmax__srq_join): a
   receive CQ of its own and a pool of its own per size (another pool slot, so the wr_id names it as
   before); the QP number map stays the context's. Once there are two, ctx->rcq_poll polls them all
   (rdmax__rgroups_poll) and the epoch is rg_epoch, which moves only once every group was seen drained
   after the last tombstone or freed pool.

   What no longer applies with the queues per endpoint: rdmax_ctx_desc.recv_reserve (buffers posted
   beyond the credits for what a window breaker takes from a shared queue before it is found) is
   accepted and ignored, a pool's reserve is 0; rdmax_recv_pool_info.srq_cap and low_water are 0, and
   the counter srq_limit_events stays 0 (there is no low-water mark to arm); max_srq_wr bounds nothing
   (a pool's target is bounded by memory and the receive CQs, a window by max_qp_wr - 1), and a device
   without SRQs (max_srq 0) gets pools and adapting windows like any other. RDMAX_RECV_POOL_OWN stays as
   it is: rq_depth + 1 buffers of the endpoint's own memory, one registration, on its own receive queue,
   counted in rq_total on group 0. Cost on rxe: a receive queue per QP, +4.8 KiB per endpoint at depth
   <= 31, +12.4 KiB at 65 (max_window 64, the default). */

#define RDMAX__RECV_BATCH 16
#define RDMAX__WINDOW_START 2  /* an adapting window's first (and least) size, see >>recv */

/* Owed credits that make a grant due for window w: half of it, and never below 2 (a grant received is
   owed back as one credit, which must not be a grant's worth, see >>recv). */
static uint32_t rdmax__grant_at(uint32_t w)
{
    return w / 2 > 2 ? w / 2 : 2;
}

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
            /* return the ones that were not posted to the free list; those before `bad` were posted,
               and the peer must hear of them, or its credits shrink for good */
            uint32_t back = 0;
            for (struct ibv_recv_wr *w = bad; w; w = w->next, back++)
                ep->rq_free[ep->rq_unposted++] = (uint32_t)(w->wr_id & RDMAX__WR_SLOT_MASK);
            ep->rx_unreturned += k - back;
            ep->last_errno = rc;
            return RDMAX_ERR_IO;
        }
        ep->rx_unreturned += k;  /* each reposted buffer is a credit we owe the peer */
        n -= k;
    }
    return RDMAX_OK;
}

#define RDMAX__SRQ_CHUNK_BYTES (256u << 10)  /* small enough for a context of one endpoint */
#define RDMAX__POOLS 32                       /* buffer sizes in use at once per context */
#define RDMAX__WR_SRQ (0xffffull << 32)
#define RDMAX__WR_POOL_SHIFT 25
#define RDMAX__WR_OWNER_SHIFT 48              /* the owning endpoint's table index (>>srq: pool) */
#define RDMAX__WR_BUF_MASK ((1u << RDMAX__WR_POOL_SHIFT) - 1)
#define RDMAX__SRQ_SLOT_BITS 8                /* a buffer index: chunk << 8 | slot (per_chunk <= 256) */
/* bits 30..47 of the wr_id of every buffer of a pool: the whole tag at once (bit 30 clear), so that a
   completion that passes it, names a pool and a buffer below n_bufs carries exactly the wr_id its buffer
   is posted with (rdmax__wr_is_pool) */
#define RDMAX__WR_SRQ_TAG ((RDMAX__WR_SRQ | RDMAX__WR_RECV) >> 30)
RDMAX_STATIC_ASSERT(RDMAX__POOLS == 1u << (30 - RDMAX__WR_POOL_SHIFT), "a pool field of 5 bits, bits 25..29");
#define RDMAX__MAP_LIVE 0x80000000u  /* map value: endpoint index in the low 16 bits */
#define RDMAX__MAP_TOMB 0x40000000u  /* map value: drain epoch in the low 30 bits */
#define RDMAX__OWNER_NONE 0xffffffffu  /* a free buffer's owner: endpoint index 0xffff is never a real one */

static int rdmax__wr_is_pool(uint64_t wr_id)
{
    return ((wr_id >> 30) & 0x3ffff) == RDMAX__WR_SRQ_TAG;
}

struct rdmax__srq_rq {
    struct ibv_recv_wr wr;
    struct ibv_sge sge;
};

struct rdmax__srq {
    uint32_t recv_size;
    uint32_t per_chunk;         /* buffers per chunk, a power of two, at most 1 << RDMAX__SRQ_SLOT_BITS */
    uint32_t target, posted;    /* target: credits of its endpoints; posted: on their queues or in hand */
    uint32_t n_bufs, n_free;
    uint32_t n_live, n_home;    /* chunks reposted; buffers of the draining ones home (see >>srq: live) */
    uint32_t n_stage;           /* rq[0, n_stage): given back in this poll batch, ready to post */
    uint32_t *free;             /* [n_bufs] */
    uint32_t *owner;            /* [chunks_cap * per_chunk] (rdmax__srq_li): the endpoint (index |
                                   generation << 16) whose queue a buffer is posted on, or was taken from
                                   and goes back to; RDMAX__OWNER_NONE: free or home (>>srq: owner) */
    struct { char *base; struct ibv_mr *mr; uint32_t lkey; } *chunks;
    uint32_t n_chunks, chunks_cap;
    uint32_t users;             /* endpoints attached */
    uint32_t room_failed;       /* the tick could not register more buffers for windows to grow into
                                   (rdmax__srq_room); cleared when credits leave the target */
    uint32_t group;             /* its receive group: the receive CQ of the QPs it feeds (>>srq) */
    /* the receive requests of rdmax__srq_fill, chained and pointing at their SGEs from the start (the
       last one posted is cut off the chain for its post, then joined again); the receive path stages
       the buffers it gives back in them (wr_id, address and key: nothing to compute again), a request
       beside its SGE (one index for both) */
    struct rdmax__srq_rq rq[RDMAX__RECV_BATCH];
    uint32_t mixed;             /* rq[0, n_stage) may hold buffers of more than one endpoint's queue */
    struct rdmax__srq_rq one;   /* the request of rdmax__recv_one's single buffer: no nested batch stages in it */
    struct ibv_recv_wr *one_bad; /* where its post names a refused request (rdmax__progress_recv_one has no frame) */
};

/* A receive group: a receive CQ and the pools whose QPs complete on it (group 0: ctx->rcq, its size in
   ctx->rcq_size, and the endpoints' own receive queues, rq_total). */
struct rdmax__rgroup {
    struct ibv_cq *cq;
    int (*poll)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);  /* the provider's */
    uint32_t size;              /* entries of cq (groups after the first) */
    uint32_t target;            /* its pools' targets */
};

struct rdmax__rx {
    struct rdmax__srq *pool[RDMAX__POOLS];  /* [0]: the context's recv_size, group 0 */
    const uint32_t *epoch;      /* the context's rcq_drains: receive-CQ polls that found it drained; with
                                   more than one group rg_epoch */
    struct rdmax__rgroup grp[RDMAX__POOLS];
    uint32_t n_groups;          /* at least 1 */
    uint32_t rg_next;           /* the group rdmax__rgroups_poll polls first (round robin) */
    uint32_t rg_drained;        /* groups found drained since the epoch last moved or a tombstone was made */
    uint32_t rg_epoch;          /* moves when every group was found drained since the last tombstone */
    uint32_t cooling;           /* slots of freed pools whose completions may still be queued */
    uint32_t cool_epoch[RDMAX__POOLS];
    uint64_t bytes, posted;     /* all pools' buffer bytes and buffers posted (for profile readers) */
    struct { uint32_t qpn, v; } *map;
    uint32_t map_cap, map_used; /* slots (a power of two); live entries and tombstones */
    /* the endpoint of the last completion (rdmax__srq_ep_of_qpn); last_qpn UINT32_MAX: none. Forgotten when
       its QP leaves the map (rdmax__map_kill), so it never outlives the endpoint. */
    uint32_t last_qpn, last_who;
    rdmax_ep *last_ep;
    uint64_t last_key;          /* rdmax__srq_key(0, last_qpn): a completion's immediate and QP number
                                   at once, for the inline receive path */
    uint64_t last_tag;          /* wr_id >> RDMAX__WR_POOL_SHIFT of the buffers on last_ep's queue: its
                                   pool and its table index (>>srq: pool); UINT64_MAX: none */
    struct rdmax__srq *last_s;  /* last_ep's pool, whose buffers the inline path stages without marking
                                   it in staged: last_bit (1 << its index; 0: none) marks it instead */
    uint32_t last_bit;
    uint32_t run;               /* credits last_who is owed for buffers given back in this batch (>>srq) */
    uint32_t staged;            /* pools with buffers staged for their repost (rdmax__srq_fill) besides
                                   last_bit's */
    uint32_t pools_left;        /* pools an endpoint left during a poll batch (a callback destroyed it):
                                   at the end of the outermost one (rdmax__pool_reap) the buffers it
                                   owned go back to the free list, and a pool it was the last of goes */
    uint32_t room;              /* pools where a window waits to grow: the tick makes room (rdmax__srq_room) */
    uint32_t rcq_kept;          /* the provider would not shrink the receive CQ (rdmax__rcq_trim) */
    uint32_t recv_disturbed;           /* set by whatever a receive callback may do that changes the last
                                   endpoint or a pool's staging, or leaves a pool to free (a poll batch,
                                   rdmax__map_kill, rdmax__srq_fill, rdmax__srq_release); cleared at the
                                   start of a poll batch and by
                                   rdmax__srq_restage (see rdmax__srq_recv_fast) */
};

/* A completion's immediate data (as it holds it, network order) and QP number side by side, as one
   8-byte load of the completion reads them. */
RDMAX_STATIC_ASSERT(offsetof(struct ibv_wc, qp_num) == offsetof(struct ibv_wc, imm_data) + 4,
                    "ibv_wc: qp_num right after imm_data");
static uint64_t rdmax__srq_key(uint32_t imm_raw, uint32_t qpn)
{
    uint32_t v[2] = {imm_raw, qpn};
    uint64_t k;
    memcpy(&k, v, sizeof k);
    return k;
}

static uint32_t rdmax__map_hash(const struct rdmax__rx *x, uint32_t qpn)
{
    return (qpn * 2654435761u) & (x->map_cap - 1);
}

static int rdmax__tomb_live(const struct rdmax__rx *x, uint32_t v)
{
    return (v & RDMAX__MAP_TOMB) && (v & 0x3fffffffu) == (*x->epoch & 0x3fffffffu);
}

/* The live endpoint of qpn, or NULL (destroyed, or not one of ours). */
static rdmax_ep *rdmax__map_ep(rdmax_ctx *ctx, uint32_t qpn)
{
    const struct rdmax__rx *x = ctx->rx;
    for (uint32_t i = rdmax__map_hash(x, qpn);; i = (i + 1) & (x->map_cap - 1)) {
        uint32_t v = x->map[i].v;
        if (v == 0)
            return NULL;
        if (x->map[i].qpn == qpn && (v & RDMAX__MAP_LIVE)) {
            rdmax_ep *ep = ctx->eps[v & 0xffff].ep;
            return ep && ep->qp->qp_num == qpn ? ep : NULL;
        }
    }
}

/* A tombstone of qpn whose completions may still be queued. */
static int rdmax__map_tomb_live(const struct rdmax__rx *x, uint32_t qpn)
{
    for (uint32_t i = rdmax__map_hash(x, qpn); x->map[i].v; i = (i + 1) & (x->map_cap - 1))
        if (x->map[i].qpn == qpn && (x->map[i].v & RDMAX__MAP_TOMB))
            return rdmax__tomb_live(x, x->map[i].v);
    return 0;
}

/* Rebuild with room for twice the live entries, dropping dead tombstones. */
static rdmax_status rdmax__map_rebuild(rdmax_ctx *ctx)
{
    struct rdmax__rx *x = ctx->rx;
    uint32_t keep = 0;
    for (uint32_t i = 0; i < x->map_cap; i++)
        keep += (x->map[i].v & RDMAX__MAP_LIVE) || rdmax__tomb_live(x, x->map[i].v);
    uint32_t cap = 64;
    while (cap < 4 * (keep + 1))
        cap *= 2;
    __typeof__(x->map) m = (__typeof__(x->map))rdmax__alloc(ctx, cap * sizeof *m);
    if (!m)
        return RDMAX_ERR_NO_MEMORY;
    __typeof__(x->map) old = x->map;
    uint32_t old_cap = x->map_cap;
    x->map = m;
    x->map_cap = cap;
    x->map_used = 0;
    for (uint32_t i = 0; i < old_cap; i++) {
        if (!(old[i].v & RDMAX__MAP_LIVE) && !rdmax__tomb_live(x, old[i].v))
            continue;
        uint32_t j = rdmax__map_hash(x, old[i].qpn);
        while (m[j].v)
            j = (j + 1) & (cap - 1);
        m[j] = old[i];
        x->map_used++;
    }
    rdmax__free(ctx, old);
    return RDMAX_OK;
}

/* qpn -> endpoint index; an entry of the same qpn (a dead tombstone) is reused. */
static rdmax_status rdmax__map_put(rdmax_ctx *ctx, uint32_t qpn, uint32_t idx)
{
    struct rdmax__rx *x = ctx->rx;
    if (2 * (x->map_used + 1) > x->map_cap && rdmax__map_rebuild(ctx) != RDMAX_OK)
        return RDMAX_ERR_NO_MEMORY;
    uint32_t i = rdmax__map_hash(x, qpn);
    while (x->map[i].v && x->map[i].qpn != qpn)
        i = (i + 1) & (x->map_cap - 1);
    x->map_used += x->map[i].v == 0;
    x->map[i].qpn = qpn;
    x->map[i].v = RDMAX__MAP_LIVE | idx;
    return RDMAX_OK;
}

static void rdmax__map_kill(rdmax_ctx *ctx, uint32_t qpn)
{
    struct rdmax__rx *x = ctx->rx;
    if (x->last_qpn == qpn) {
        x->last_qpn = UINT32_MAX;
        x->last_key = rdmax__srq_key(0, UINT32_MAX);
        x->last_tag = UINT64_MAX;
        x->last_s = NULL;
        x->staged |= x->last_bit;  /* its pool may have buffers staged */
        x->last_bit = 0;
        x->recv_disturbed = 1;
    }
    for (uint32_t i = rdmax__map_hash(x, qpn); x->map[i].v; i = (i + 1) & (x->map_cap - 1))
        if (x->map[i].qpn == qpn && (x->map[i].v & RDMAX__MAP_LIVE)) {
            x->map[i].v = RDMAX__MAP_TOMB | (*x->epoch & 0x3fffffffu);
            x->rg_drained = 0;  /* every group must be seen drained after this (rdmax__rgroups_poll) */
            return;
        }
}

/* Buffer b's entry in owner[]: chunk * per_chunk + slot (dense, unlike b). */
static uint32_t rdmax__srq_li(const struct rdmax__srq *s, uint32_t b)
{
    return (b >> RDMAX__SRQ_SLOT_BITS) * s->per_chunk + (b & ((1u << RDMAX__SRQ_SLOT_BITS) - 1));
}

static char *rdmax__srq_buf(const struct rdmax__srq *s, uint32_t b)
{
    return s->chunks[b >> RDMAX__SRQ_SLOT_BITS].base + (size_t)(b & ((1u << RDMAX__SRQ_SLOT_BITS) - 1)) * s->recv_size;
}

/* The owner of the buffer in request r of pool s (>>srq: owner). */
static uint32_t rdmax__srq_rq_owner(const struct rdmax__srq *s, const struct rdmax__srq_rq *r)
{
    return s->owner[rdmax__srq_li(s, (uint32_t)r->wr.wr_id & RDMAX__WR_BUF_MASK)];
}

/* Endpoint ep as an owner of buffers: table index | generation << 16 (as rdmax__rx.last_who). */
static uint32_t rdmax__ep_who(const rdmax_ctx *ctx, const rdmax_ep *ep)
{
    uint32_t idx = (uint32_t)(ep->wr_id_base >> 32) & 0xffff;
    return idx | (uint32_t)RDMAX__REF_GEN(&ctx->eps[idx]) << 16;
}

/* A buffer of pool s that is not posted again: to the free list, or home with its draining chunk; no
   endpoint owns it from now. */
static void rdmax__srq_unpost(struct rdmax__srq *s, uint32_t b)
{
    s->owner[rdmax__srq_li(s, b)] = RDMAX__OWNER_NONE;
    if (rdmax_unlikely((b >> RDMAX__SRQ_SLOT_BITS) >= s->n_live))
        s->free[s->n_bufs - ++s->n_home] = b;
    else
        s->free[s->n_free++] = b;
}

/* The repost decision for buffer b that came back from a receive (posted still counts it): kept home
   when its chunk drains, a free buffer takes its place on the same queue, and the pool backs its target
   without it (posted + n_free >= target stays true, so every credit keeps a posted buffer). Every path
   that reposts a buffer without asking this reposts only those of chunks below n_live. */
static int rdmax__srq_withhold(const struct rdmax__srq *s, uint32_t b)
{
    return (b >> RDMAX__SRQ_SLOT_BITS) >= s->n_live && s->n_free > 0 && s->posted + s->n_free > s->target;
}

/* The endpoint that owns a buffer (who), or NULL: destroyed. */
static rdmax_ep *rdmax__rq_ep(rdmax_ctx *ctx, uint32_t who)
{
    rdmax__ep_ref *r = &ctx->eps[who & 0xffff];
    return r->ep != NULL && RDMAX__REF_GEN(r) == (uint16_t)(who >> 16) ? r->ep : NULL;
}

/* Buffer b, posted for ep (NULL: its owner was destroyed), goes to the free list instead of back on a
   queue: a poll took it off, or its owner's QP is gone. */
static void rdmax__srq_disown(rdmax_ctx *ctx, struct rdmax__srq *s, rdmax_ep *ep, uint32_t b)
{
    rdmax__srq_unpost(s, b);
    s->posted--;
    ctx->rx->posted--;
    if (ep)
        ep->rx_n--;
}

/* ibv_post_recv of r[0, k) on ep's queue refused bad and what follows it: those go to the free list, the
   ones before it are on ep's queue (posted counts them all already). */
static __attribute__((noinline)) rdmax_status rdmax__rq_post_failed(rdmax_ctx *ctx, struct rdmax__srq *s, rdmax_ep *ep,
                                                                   struct rdmax__srq_rq *r, uint32_t k,
                                                                   struct ibv_recv_wr *bad, int rc)
{
    uint32_t ok = k;
    for (uint32_t i = 0; i < k; i++)
        if (&r[i].wr == bad)
            ok = i;
    for (uint32_t i = ok; i < k; i++)
        rdmax__srq_unpost(s, (uint32_t)r[i].wr.wr_id & RDMAX__WR_BUF_MASK);
    ep->rx_n -= k - ok;
    s->posted -= k - ok;
    ctx->rx->posted -= k - ok;
    ep->last_errno = rc;
    rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_SRQ,
               "device %s: ibv_post_recv of %u pool buffers to QP %u failed: %s (it owns %u buffers for %u credits)",
               ctx->attr.name, k - ok, ep->qp->qp_num, strerror(rc), ep->rx_n, ep->rq_depth);
    return RDMAX_ERR_IO;
}

/* r[0, k) (chained from r[0]; r[k - 1]'s next is kept), buffers ep owns, posted on its own receive queue;
   posted and ep->rx_n count them already. */
static rdmax_status rdmax__rq_post(rdmax_ctx *ctx, struct rdmax__srq *s, rdmax_ep *ep, struct rdmax__srq_rq *r,
                                   uint32_t k)
{
    struct ibv_recv_wr *bad = NULL, *after = r[k - 1].wr.next;
    r[k - 1].wr.next = NULL;
    ctx->cnt.recv_post_calls++;
    int rc = ibv_post_recv(ep->qp, &r[0].wr, &bad);
    r[k - 1].wr.next = after;
    if (rdmax_unlikely(rc != 0))
        return rdmax__rq_post_failed(ctx, s, ep, r, k, bad, rc);
    return RDMAX_OK;
}

/* ep's own receive queue filled from the free list up to its credits C (rq_depth): a new endpoint once
   its QP is in INIT, a window that grew, a run of buffers that came back short (>>srq). Not a system
   call but the post; RDMAX_ERR_NO_RESOURCE when the free list ran out (posted + n_free >= target makes
   that a transient of buffers in hand). */
static rdmax_status rdmax__ep_rq_fill(rdmax_ctx *ctx, rdmax_ep *ep)
{
    struct rdmax__srq *s = ctx->rx->pool[ep->pool];
    struct rdmax__srq_rq r[RDMAX__RECV_BATCH];
    uint32_t who = rdmax__ep_who(ctx, ep);
    uint64_t id = (uint64_t)(who & 0xffff) << RDMAX__WR_OWNER_SHIFT | RDMAX__WR_SRQ | RDMAX__WR_RECV |
                  (uint64_t)ep->pool << RDMAX__WR_POOL_SHIFT;
    while (ep->rx_n < ep->rq_depth && s->n_free > 0) {
        uint32_t k = 0, want = ep->rq_depth - ep->rx_n;
        for (; k < want && k < RDMAX__RECV_BATCH && s->n_free > 0; k++) {
            uint32_t b = s->free[--s->n_free];
            s->owner[rdmax__srq_li(s, b)] = who;
            r[k].sge.addr = (uintptr_t)rdmax__srq_buf(s, b);
            r[k].sge.length = s->recv_size;
            r[k].sge.lkey = s->chunks[b >> RDMAX__SRQ_SLOT_BITS].lkey;
            r[k].wr.wr_id = id | b;
            r[k].wr.sg_list = &r[k].sge;
            r[k].wr.num_sge = 1;
            r[k].wr.next = NULL;
            if (k > 0)
                r[k - 1].wr.next = &r[k].wr;
        }
        s->posted += k;
        ctx->rx->posted += k;
        ep->rx_n += k;
        rdmax_status st = rdmax__rq_post(ctx, s, ep, r, k);
        if (st != RDMAX_OK)
            return st;
    }
    return ep->rx_n < ep->rq_depth ? RDMAX_ERR_NO_RESOURCE : RDMAX_OK;
}

/* The buffers of pool s whose owner was destroyed back to the free list (its QP is gone: its receives
   never complete, the completions of it still queued are dropped untouched). Only between poll batches,
   when nothing is staged or in hand. A scan of the pool's owner[]: a slow path, as a QP's destroy. */
static void rdmax__srq_return_dead(rdmax_ctx *ctx, struct rdmax__srq *s)
{
    RDMAX_ASSERT(s->n_stage == 0);
    for (uint32_t c = 0; c < s->n_chunks; c++)
        for (uint32_t i = 0; i < s->per_chunk; i++) {
            uint32_t who = s->owner[c * s->per_chunk + i];
            if (who != RDMAX__OWNER_NONE && rdmax__rq_ep(ctx, who) == NULL)
                rdmax__srq_disown(ctx, s, NULL, c << RDMAX__SRQ_SLOT_BITS | i);
        }
}

/* The buffers ep owns back to the free list once its QP is destroyed and its table slot emptied (>>srq).
   Inside a poll batch (a callback destroyed it) they wait for its end (rdmax__pool_reap): one is in hand,
   its data the callback's until it returns, and a free buffer may be posted again at once on another
   queue (a nested poll, an endpoint made in the callback). */
static void rdmax__ep_rq_return(rdmax_ctx *ctx, rdmax_ep *ep)
{
    ep->rx_n = 0;
    if (rdmax__in_recv_poll(ctx)) {
        ctx->rx->pools_left |= 1u << ep->pool;
        ctx->rx->recv_disturbed = 1;  /* a single message's path settles the batch's way, which reaps */
        return;
    }
    rdmax__srq_return_dead(ctx, ctx->rx->pool[ep->pool]);
}

/* Post the staged buffers of pool p (rq[0, n_stage), see rdmax__srq_recv) in runs of one owner, each
   on that endpoint's queue, made to fit its credits (ep->rx_n, the buffers it owns, against rq_depth):
   the ones beyond them (its window shrank) and those of an endpoint that is gone or failed go to the
   free list, a run short of them is topped up from it (>>srq: staged). Called from the poll path (no
   allocation), for a pool with some staged. */
static rdmax_status rdmax__srq_fill(rdmax_ctx *ctx, uint32_t p)
{
    struct rdmax__rx *x = ctx->rx;
    struct rdmax__srq *s = x->pool[p];
    uint32_t k = s->n_stage, mixed = s->mixed;
    rdmax_status st = RDMAX_OK;
    s->n_stage = 0;
    s->mixed = 0;
    x->recv_disturbed = 1;  /* the staging changed (see rdmax__srq_recv_fast) */
    if (rdmax_likely(!mixed && s == x->last_s && x->last_ep->rx_n == x->last_ep->rq_depth &&
                     x->last_ep->state <= RDMAX_EP_CONNECTED))
        return rdmax__rq_post(ctx, s, x->last_ep, s->rq, k);  /* a burst of the last endpoint, as it is */
    for (uint32_t i = 0, j = k; i < k; i = j) {
        uint32_t who = rdmax__srq_rq_owner(s, &s->rq[i]);
        if (mixed)  /* (else one endpoint staged them all: one run) */
            for (j = i + 1; j < k && rdmax__srq_rq_owner(s, &s->rq[j]) == who; j++)
                ;
        rdmax_ep *ep = rdmax__rq_ep(ctx, who);
        uint32_t n = j - i, m = n;  /* m of the run's n go back on its queue */
        if (ep == NULL || ep->state > RDMAX_EP_CONNECTED)
            m = 0;  /* (a QP in error would flush them back at once) */
        else if (ep->rx_n > ep->rq_depth)
            m = ep->rx_n - ep->rq_depth < n ? n - (ep->rx_n - ep->rq_depth) : 0;
        if (rdmax_unlikely(m < n)) {
            for (uint32_t t = i + m; t < j; t++)
                rdmax__srq_unpost(s, (uint32_t)s->rq[t].wr.wr_id & RDMAX__WR_BUF_MASK);
            s->posted -= n - m;
            x->posted -= n - m;
            if (ep)
                ep->rx_n -= n - m;
        }
        if (m > 0 && rdmax__rq_post(ctx, s, ep, &s->rq[i], m) != RDMAX_OK)
            st = RDMAX_ERR_IO;
        if (rdmax_unlikely(ep && ep->state <= RDMAX_EP_CONNECTED && ep->rx_n < ep->rq_depth) &&
            rdmax__ep_rq_fill(ctx, ep) == RDMAX_ERR_IO)
            st = RDMAX_ERR_IO;
    }
    return st;
}

/* Chunks [live, n_chunks) of pool s drain from now: their free buffers go home (the home ones go back to
   the free list first, so any live may be set). From the tick, or before a chunk is added. */
static void rdmax__srq_set_live(struct rdmax__srq *s, uint32_t live)
{
    if (s->n_home > 0)
        memmove(&s->free[s->n_free], &s->free[s->n_bufs - s->n_home], s->n_home * sizeof *s->free);
    s->n_free += s->n_home;
    s->n_home = 0;
    s->n_live = live;
    for (uint32_t i = 0; live < s->n_chunks && i < s->n_free;) {
        uint32_t b = s->free[i];
        if ((b >> RDMAX__SRQ_SLOT_BITS) < live) {
            i++;
            continue;
        }
        s->free[i] = s->free[--s->n_free];
        s->free[s->n_bufs - ++s->n_home] = b;
    }
}

/* One more chunk of buffers, registered (or the draining ones taken back). Registration is where the
   locked-memory limit bites. */
static rdmax_status rdmax__srq_chunk(rdmax_ctx *ctx, struct rdmax__srq *s)
{
    size_t bytes = (size_t)s->per_chunk * s->recv_size;
    if (s->n_live < s->n_chunks) {  /* the draining chunks are taken back first */
        uint32_t home = s->n_home;
        rdmax__srq_set_live(s, s->n_chunks);
        if (home > 0)
            return RDMAX_OK;
    }
    if (s->n_chunks >= (RDMAX__WR_BUF_MASK >> RDMAX__SRQ_SLOT_BITS) + 1)
        return RDMAX_ERR_LIMIT;  /* 2^17 chunks: the receive CQs' max_cqe bound target first */
    if (s->n_chunks == s->chunks_cap) {
        uint32_t cap = s->chunks_cap ? 2 * s->chunks_cap : 16;
        __typeof__(s->chunks) c = (__typeof__(s->chunks))rdmax__alloc(ctx, cap * sizeof *c);
        uint32_t *f = (uint32_t *)rdmax__alloc(ctx, (size_t)cap * s->per_chunk * sizeof *f);
        uint32_t *l = (uint32_t *)rdmax__alloc(ctx, (size_t)cap * s->per_chunk * sizeof *l);
        if (!c || !f || !l) {
            rdmax__free(ctx, c);
            rdmax__free(ctx, f);
            rdmax__free(ctx, l);
            return RDMAX_ERR_NO_MEMORY;
        }
        if (s->n_chunks) {
            memcpy(c, s->chunks, s->n_chunks * sizeof *c);
            memcpy(f, s->free, s->n_free * sizeof *f);
            memcpy(l, s->owner, (size_t)s->n_chunks * s->per_chunk * sizeof *l);
        }
        rdmax__free(ctx, s->chunks);
        rdmax__free(ctx, s->free);
        rdmax__free(ctx, s->owner);
        s->chunks = c;
        s->free = f;
        s->owner = l;
        s->chunks_cap = cap;
    }
    char *p = (char *)rdmax_numa_alloc(ctx, bytes);
    if (!p) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_NO_MEMORY, "device %s: allocating %zu bytes of receive buffers on NUMA node %d failed",
                   ctx->attr.name, bytes, ctx->attr.numa_node);
        return RDMAX_ERR_NO_MEMORY;
    }
    struct ibv_mr *mr = ibv_reg_mr(ctx->pd, p, bytes, IBV_ACCESS_LOCAL_WRITE);
    if (!mr) {
        int e = errno;
        rdmax_numa_free(ctx, p, bytes);
        struct rlimit rl;
        char lim[32] = "unlimited";
        if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
            snprintf(lim, sizeof lim, "%llu bytes", (unsigned long long)rl.rlim_cur);
        if (e == ENOMEM || e == EPERM || e == EAGAIN) {
            rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_LIMIT, "device %s: registering %zu more bytes of receive buffers failed: %s; "
                       "the locked memory limit (RLIMIT_MEMLOCK, ulimit -l) is %s, and this pool has %zu bytes "
                       "registered for %u credits ((rq_depth + 1) x recv_size %u decides it)", ctx->attr.name, bytes,
                       strerror(e), lim, (size_t)s->n_bufs * s->recv_size, s->target, s->recv_size);
            return RDMAX_ERR_LIMIT;
        }
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_EP_SETUP, "device %s: ibv_reg_mr of %zu receive bytes failed: %s", ctx->attr.name,
                   bytes, strerror(e));
        return RDMAX_ERR_IO;
    }
    s->chunks[s->n_chunks].base = p;
    s->chunks[s->n_chunks].mr = mr;
    s->chunks[s->n_chunks].lkey = mr->lkey;
    for (uint32_t i = s->per_chunk; i-- > 0;) {  /* low indexes are posted first */
        s->free[s->n_free++] = s->n_chunks << RDMAX__SRQ_SLOT_BITS | i;
        s->owner[s->n_chunks * s->per_chunk + i] = RDMAX__OWNER_NONE;  /* (free) */
    }
    s->n_chunks++;
    s->n_live = s->n_chunks;
    s->n_bufs += s->per_chunk;
    ctx->rx->bytes += bytes;
    return RDMAX_OK;
}

/* ---- >>pools: a pool's life: sizing, receive CQs (groups), join and release, give-back, the tick ----- */

/* Receive CQ entries group g has promised: its pools' targets, and in group 0 the endpoints' own
   receive queues. */
static uint64_t rdmax__rg_used(const rdmax_ctx *ctx, uint32_t g)
{
    return (g ? 0 : (uint64_t)ctx->rq_total) + (ctx->rx ? ctx->rx->grp[g].target : 0);
}

/* Group g's receive CQ must hold every receive that may complete on it before the next poll. */
static rdmax_status rdmax__rcq_fit(rdmax_ctx *ctx, uint32_t g, uint64_t need, const char *why)
{
    struct ibv_cq *cq = g ? ctx->rx->grp[g].cq : ctx->rcq;
    uint32_t *size = g ? &ctx->rx->grp[g].size : &ctx->rcq_size;
    if (need <= *size)
        return RDMAX_OK;
    uint64_t want = *size;
    while (want < need)
        want *= 2;
    if (want > ctx->attr.max_cqe && need <= ctx->attr.max_cqe)
        want = ctx->attr.max_cqe;
    if (want > ctx->attr.max_cqe) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_LIMIT, "device %s: the receive CQ would need %llu entries for %s, more than the "
                   "device's max_cqe %u (each RC endpoint needs its window + 1, rq_depth + 1 entries: lower it, "
                   "or spread the endpoints over more contexts)", ctx->attr.name,
                   (unsigned long long)need, why, ctx->attr.max_cqe);
        return RDMAX_ERR_LIMIT;
    }
    int rc = ibv_resize_cq(cq, (int)want);
    if (rc) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_EP_SETUP, "device %s: ibv_resize_cq(receive CQ, %llu entries) failed: %s (max_cqe %u)",
                   ctx->attr.name, (unsigned long long)want, strerror(rc), ctx->attr.max_cqe);
        return rc == ENOMEM ? RDMAX_ERR_NO_MEMORY : RDMAX_ERR_IO;
    }
    *size = (uint32_t)cq->cqe;
    if (ctx->rx)
        ctx->rx->rcq_kept = 0;  /* (rdmax__rcq_trim may try again) */
    return RDMAX_OK;
}

static void rdmax__pool_free(rdmax_ctx *ctx, uint32_t p)
{
    struct rdmax__srq *s = ctx->rx->pool[p];
    ctx->rx->bytes -= (uint64_t)s->n_bufs * s->recv_size;
    ctx->rx->posted -= s->posted;
    ctx->rx->grp[s->group].target -= s->target;  /* (0: no endpoint is left) */
    ctx->rx->cooling |= 1u << p;
    ctx->rx->staged &= ~(1u << p);
    ctx->rx->cool_epoch[p] = *ctx->rx->epoch;
    ctx->rx->rg_drained = 0;  /* (as a tombstone's) */
    for (uint32_t i = 0; i < s->n_chunks; i++) {
        ibv_dereg_mr(s->chunks[i].mr);
        rdmax_numa_free(ctx, s->chunks[i].base, (size_t)s->per_chunk * s->recv_size);
    }
    rdmax__free(ctx, s->chunks);
    rdmax__free(ctx, s->free);
    rdmax__free(ctx, s->owner);
    rdmax__free(ctx, s);
    ctx->rx->pool[p] = NULL;
}

static uint32_t rdmax__pool_per_chunk(uint32_t recv_size)
{
    uint32_t n = 1;
    while (n < 1u << RDMAX__SRQ_SLOT_BITS && (size_t)2 * n * recv_size <= RDMAX__SRQ_CHUNK_BYTES)
        n *= 2;
    return n;
}

/* The slot of group g's pool of recv_size, or RDMAX__POOLS. */
static uint32_t rdmax__pool_find(const rdmax_ctx *ctx, uint32_t recv_size, uint32_t g)
{
    const struct rdmax__rx *x = ctx->rx;
    if (g == 0 && recv_size == ctx->desc.recv_size)
        return x && x->pool[0] ? 0 : RDMAX__POOLS;
    for (uint32_t i = 1; x && i < RDMAX__POOLS; i++)
        if (x->pool[i] && x->pool[i]->recv_size == recv_size && x->pool[i]->group == g)
            return i;
    return RDMAX__POOLS;
}

/* The pool of buffers of recv_size bytes in receive group g: found, or made (pool 0 is the context's
   recv_size in group 0). */
static rdmax_status rdmax__pool_get(rdmax_ctx *ctx, uint32_t recv_size, uint32_t g, uint32_t *out)
{
    struct rdmax__rx *x = ctx->rx;
    if (!x) {
        if (!(x = (struct rdmax__rx *)rdmax__alloc(ctx, sizeof *x)))
            return RDMAX_ERR_NO_MEMORY;
        x->map_cap = 64;
        x->n_groups = 1;
        x->epoch = &ctx->rcq_drains;
        x->last_qpn = UINT32_MAX;
        x->last_key = rdmax__srq_key(0, UINT32_MAX);
        x->last_tag = UINT64_MAX;
        if (!(x->map = (__typeof__(x->map))rdmax__alloc(ctx, x->map_cap * sizeof *x->map))) {
            rdmax__free(ctx, x);
            return RDMAX_ERR_NO_MEMORY;
        }
        ctx->rx = x;
    }
    uint32_t p = g == 0 && recv_size == ctx->desc.recv_size ? 0 : rdmax__pool_find(ctx, recv_size, g);
    uint32_t hole = RDMAX__POOLS;
    for (uint32_t i = 1; p == RDMAX__POOLS && hole == RDMAX__POOLS && i < RDMAX__POOLS; i++)
        if (!x->pool[i] && (!(x->cooling & (1u << i)) || x->cool_epoch[i] != *x->epoch))
            hole = i;  /* free, and no completion of a pool freed there can still be queued */
    if (p == RDMAX__POOLS && hole == RDMAX__POOLS) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_LIMIT, "device %s: RC endpoints of this context already use %u receive sizes "
                   "(a pool per size and receive CQ), the most it keeps receive pools for (endpoint recv_size "
                   "%u)", ctx->attr.name, RDMAX__POOLS - 1, recv_size);
        return RDMAX_ERR_LIMIT;
    }
    if (p == RDMAX__POOLS)
        p = hole;
    if (x->pool[p]) {
        *out = p;
        return RDMAX_OK;
    }
    struct rdmax__srq *s = (struct rdmax__srq *)rdmax__alloc(ctx, sizeof *s);
    if (!s)
        return RDMAX_ERR_NO_MEMORY;
    s->recv_size = recv_size;
    s->group = g;
    s->per_chunk = rdmax__pool_per_chunk(recv_size);
    for (uint32_t i = 0; i < RDMAX__RECV_BATCH; i++) {
        s->rq[i].sge.length = recv_size;
        s->rq[i].wr.sg_list = &s->rq[i].sge;
        s->rq[i].wr.num_sge = 1;
        s->rq[i].wr.next = i + 1 < RDMAX__RECV_BATCH ? &s->rq[i + 1].wr : NULL;
    }
    s->one.sge.length = recv_size;
    s->one.wr.sg_list = &s->one.sge;
    s->one.wr.num_sge = 1;
    s->one.wr.next = NULL;
    x->cooling &= ~(1u << p);
    x->pool[p] = s;
    *out = p;
    return RDMAX_OK;
}

/* Room for one more RC endpoint with credits w in pool p: the receive CQ, then buffers; target grows by
   w, and the buffers wait in the free list until the endpoint's QP is in INIT (rdmax__ep_rq_fill). */
static rdmax_status rdmax__srq_reserve(rdmax_ctx *ctx, uint32_t p, uint32_t w)
{
    struct rdmax__rx *x = ctx->rx;
    struct rdmax__srq *s = x->pool[p];
    rdmax_status st;
    uint64_t need = (uint64_t)s->target + w;
    char why[96];
    snprintf(why, sizeof why, "%llu RC receive credits", (unsigned long long)x->grp[s->group].target + w);
    if ((st = rdmax__rcq_fit(ctx, s->group, rdmax__rg_used(ctx, s->group) + w, why)) != RDMAX_OK)
        return st;
    /* free ones for all w (posted once its QP is in INIT), beyond what the others are short of: posted +
       n_free >= target is not enough when a window that shrank keeps more than its credits posted */
    while (s->n_free < w + (s->target > s->posted ? s->target - s->posted : 0))
        if ((st = rdmax__srq_chunk(ctx, s)) != RDMAX_OK)
            return st;
    s->target = (uint32_t)need;
    x->grp[s->group].target += w;
    s->users++;
    return RDMAX_OK;
}

/* ctx->rcq_poll once a context has more than one receive group: polls the groups' CQs into wc, a
   different one first each call (none waits behind a busy one), so every poll path (inline or not) takes
   completions of every group and handles them alike (a completion names its QP and pool). A group that
   gave fewer than asked was drained; once all were since the last tombstone, the epoch moves (>>srq). */
static int rdmax__rgroups_poll(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
    struct rdmax__rx *x = ((rdmax_ctx *)cq->cq_context)->rx;
    uint32_t ng = x->n_groups, g = x->rg_next;
    int got = 0;
    x->rg_next = g + 1 < ng ? g + 1 : 0;
    for (uint32_t i = 0; i < ng && got < num_entries; i++, g = g + 1 < ng ? g + 1 : 0) {
        int m = x->grp[g].poll(x->grp[g].cq, num_entries - got, wc + got);
        if (m < 0)
            return got ? got : m;
        if (m < num_entries - got)
            x->rg_drained |= 1u << g;
        got += m;
    }
    if (x->rg_drained == (ng < 32 ? (1u << ng) - 1 : UINT32_MAX)) {
        x->rg_epoch++;
        x->rg_drained = 0;
    }
    return got;
}

/* One more receive group: a receive CQ on the context's channel. The first one beyond group 0 makes every
   receive poll go through rdmax__rgroups_poll and the drain epoch count all groups' drains. */
static rdmax_status rdmax__rgroup_open(rdmax_ctx *ctx)
{
    struct rdmax__rx *x = ctx->rx;
    uint32_t depth = ctx->desc.cq_depth < ctx->attr.max_cqe ? ctx->desc.cq_depth : ctx->attr.max_cqe;
    struct ibv_cq *cq = x->n_groups < RDMAX__POOLS ? ibv_create_cq(ctx->verbs, (int)depth, ctx, ctx->channel, 0) : NULL;
    if (!cq) {
        int e = errno;
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_LIMIT, "device %s: a receive CQ more for RC endpoints (%u so far, the "
                   "device's max_cqe %u each) failed: %s", ctx->attr.name, x->n_groups, ctx->attr.max_cqe,
                   x->n_groups < RDMAX__POOLS ? strerror(e) : "no pool slot left for it");
        return x->n_groups < RDMAX__POOLS && e != ENOMEM ? RDMAX_ERR_IO : RDMAX_ERR_LIMIT;
    }
    if (x->n_groups == 1) {
        x->grp[0].cq = ctx->rcq;
        x->grp[0].poll = ctx->rcq_poll;
        x->rg_epoch = ctx->rcq_drains;  /* tombstones and cooling slots of now stay live */
        x->rg_drained = 0;
        x->epoch = &x->rg_epoch;
        ctx->rcq_poll = rdmax__rgroups_poll;
    }
    struct rdmax__rgroup *r = &x->grp[x->n_groups++];
    r->cq = cq;
    r->poll = cq->context->ops.poll_cq;
    r->size = (uint32_t)cq->cqe;
    rdmax__log(ctx, RDMAX_LOG_INFO, RDMAX_LOG_ITEM_EP_SETUP, "device %s: receive CQ %u opened for RC endpoints (the others hold "
               "max_cqe %u credits)", ctx->attr.name, x->n_groups - 1, ctx->attr.max_cqe);
    return RDMAX_OK;
}

static rdmax_status rdmax__rgroups_arm(rdmax_ctx *ctx)
{
    for (uint32_t g = 1; ctx->rx && g < ctx->rx->n_groups; g++)
        if (ibv_req_notify_cq(ctx->rx->grp[g].cq, 0))
            return RDMAX_ERR_IO;
    return RDMAX_OK;
}

/* Room for one more RC endpoint with credits w among the pools of recv_size: in the first receive group
   whose CQ can hold w more within max_cqe, else in a new group. */
static rdmax_status rdmax__srq_join(rdmax_ctx *ctx, uint32_t recv_size, uint32_t w, uint32_t *out)
{
    rdmax_status st;
    uint32_t g = 0;
    if (w <= ctx->attr.max_cqe)  /* else no group can hold it: group 0 says why */
        for (; ctx->rx && g < ctx->rx->n_groups; g++)
            if (rdmax__rg_used(ctx, g) + w <= ctx->attr.max_cqe)
                break;
    if (ctx->rx && g == ctx->rx->n_groups && (st = rdmax__rgroup_open(ctx)) != RDMAX_OK)
        return st;
    if ((st = rdmax__pool_get(ctx, recv_size, g, out)) != RDMAX_OK)
        return st;
    return rdmax__srq_reserve(ctx, *out, w);
}

/* An endpoint leaves pool p: its credits leave the target, its buffers stay (rdmax__ep_rq_return gave
   them back); a pool of another size than the context's goes with its last endpoint. */
static void rdmax__srq_release(rdmax_ctx *ctx, uint32_t p, uint32_t w)
{
    struct rdmax__srq *s = ctx->rx->pool[p];
    s->target -= w;
    ctx->rx->grp[s->group].target -= w;
    s->room_failed = 0;
    if (--s->users == 0 && p > 0) {
        if (rdmax__in_recv_poll(ctx)) {  /* its completions may name it */
            ctx->rx->pools_left |= 1u << p;
            ctx->rx->recv_disturbed = 1;  /* so that a single message's path settles the batch's way, which reaps */
        } else
            rdmax__pool_free(ctx, p);
    }
}

/* The end of the outermost poll batch, for the pools endpoints left meanwhile: a pool whose last
   endpoint went goes now (unless one joined again); in the others, the buffers destroyed endpoints
   still own go back to the free list (rdmax__srq_return_dead). Every staging is posted by now. */
static void rdmax__pool_reap(rdmax_ctx *ctx)
{
    struct rdmax__rx *x = ctx->rx;
    for (uint32_t p = 0; p < RDMAX__POOLS; p++) {
        struct rdmax__srq *s = x->pool[p];
        if (!(x->pools_left & (1u << p)) || s == NULL)
            continue;
        if (s->users == 0 && p > 0)
            rdmax__pool_free(ctx, p);
        else
            rdmax__srq_return_dead(ctx, s);
    }
    x->pools_left = 0;
}

static void rdmax__srq_close(rdmax_ctx *ctx)
{
    struct rdmax__rx *x = ctx->rx;
    if (!x)
        return;
    for (uint32_t p = 0; p < RDMAX__POOLS; p++)
        if (x->pool[p])
            rdmax__pool_free(ctx, p);
    for (uint32_t g = 1; g < x->n_groups; g++)  /* their QPs are gone */
        ibv_destroy_cq(x->grp[g].cq);
    if (x->n_groups > 1)
        ctx->rcq_poll = x->grp[0].poll;
    rdmax__free(ctx, x->map);
    rdmax__free(ctx, x);
    ctx->rx = NULL;
}

/* From the tick, for a window that waited to grow in pool p (rdmax__window_grow, which never makes a
   system call): a chunk's worth of credits more than the target, as far as the device's bound allows
   (the receive CQ's max_cqe): free buffers (registered) and a receive CQ that holds them. What cannot be
   had is the pool's bound; a registration that fails stops further tries (room_failed) until credits
   leave the pool. */
static void rdmax__srq_room(rdmax_ctx *ctx, uint32_t p)
{
    struct rdmax__rx *x = ctx->rx;
    struct rdmax__srq *s = x->pool[p];
    if (!s)
        return;
    uint64_t more = s->per_chunk, cq_used = rdmax__rg_used(ctx, s->group);
    if (cq_used + more > ctx->attr.max_cqe)
        more = cq_used < ctx->attr.max_cqe ? ctx->attr.max_cqe - cq_used : 0;
    uint64_t need = more + (s->target > s->posted ? s->target - s->posted : 0);  /* free (as rdmax__srq_reserve) */
    while (s->n_free < need)
        if (rdmax__srq_chunk(ctx, s) != RDMAX_OK) {
            s->room_failed = 1;
            return;
        }
    if (rdmax__rcq_fit(ctx, s->group, cq_used + more, "RC receive credits and room for windows to grow") != RDMAX_OK)
        s->room_failed = 1;
}

/* From the tick: pool s keeps the chunks that hold its target and one chunk more (the room
   rdmax__srq_room adds, so what it adds is not given back at once); the newer ones drain (see >>srq:
   live), and once every buffer of them is home they are deregistered and freed. */
static void rdmax__srq_giveback(rdmax_ctx *ctx, struct rdmax__srq *s)
{
    uint32_t keep = (s->target + s->per_chunk - 1) / s->per_chunk + 1;
    if (keep > s->n_chunks)
        keep = s->n_chunks;
    if (keep != s->n_live)
        rdmax__srq_set_live(s, keep);
    uint32_t n = s->n_chunks - s->n_live;
    if (n == 0 || s->n_home < n * s->per_chunk)
        return;
    size_t bytes = (size_t)s->per_chunk * s->recv_size;
    for (uint32_t i = s->n_live; i < s->n_chunks; i++) {
        ibv_dereg_mr(s->chunks[i].mr);
        rdmax_numa_free(ctx, s->chunks[i].base, bytes);
    }
    s->n_chunks = s->n_live;
    s->n_bufs = s->n_chunks * s->per_chunk;
    s->n_home = 0;
    ctx->rx->bytes -= n * bytes;
    ctx->cnt.recv_chunks_freed += n;
}

/* From the tick: the receive CQ halved while it has room for four times what may complete (the credits,
   or the buffers posted beyond them until they come back; rdmax__rcq_fit doubles it), never below the
   size it was created with. ibv_resize_cq may shrink a CQ to no fewer entries than it holds (rxe does;
   it holds at most what may complete, under half the new size); a provider that refuses or keeps the
   size is not asked again until the CQ grew. */
static void rdmax__rcq_trim(rdmax_ctx *ctx)
{
    struct rdmax__rx *x = ctx->rx;
    /* the first group's CQ (the others are not trimmed); x->posted counts every group's: never too few */
    uint64_t need = (uint64_t)ctx->rq_total + (x->posted > x->grp[0].target ? x->posted : x->grp[0].target);
    uint64_t want = ctx->rcq_size;
    while (want / 2 >= ctx->desc.cq_depth && want / 2 >= 2 * need)
        want /= 2;
    if (want == ctx->rcq_size || x->rcq_kept)
        return;
    if (ibv_resize_cq(ctx->rcq, (int)want) == 0 && (uint32_t)ctx->rcq->cqe < ctx->rcq_size)
        ctx->rcq_size = (uint32_t)ctx->rcq->cqe;
    else
        x->rcq_kept = 1;
}

/* From the tick (a system call, not on the poll path): room for windows that wait to grow; memory given
   back by pools above their target, and the receive CQ's. */
static void rdmax__srq_tick(rdmax_ctx *ctx)
{
    struct rdmax__rx *x = ctx->rx;
    for (uint32_t m = x ? x->room : 0, p = 0; m; p++, m >>= 1)
        if (m & 1)
            rdmax__srq_room(ctx, p);
    if (x) {
        x->room = 0;
        rdmax__rcq_trim(ctx);
    }
    for (uint32_t p = 0; x && p < RDMAX__POOLS; p++)
        if (x->pool[p])
            rdmax__srq_giveback(ctx, x->pool[p]);
}

bool rdmax_ctx_query_recv_pool(const rdmax_ctx *ctx, uint32_t recv_size, rdmax_recv_pool_info *out)
{
    const struct rdmax__rx *x = ctx->rx;
    memset(out, 0, sizeof *out);
    if (recv_size == 0)
        recv_size = ctx->desc.recv_size;
    for (uint32_t p = 0; x && p < RDMAX__POOLS; p++) {  /* one pool per size and receive group: summed */
        const struct rdmax__srq *s = x->pool[p];
        if (!s || s->recv_size != recv_size)
            continue;
        out->recv_size = s->recv_size;
        out->endpoints += s->users;
        out->target += s->target;  /* (no reserve, no SRQ, no low-water mark: >>srq) */
        out->posted += s->posted - s->n_stage;
        out->free += s->n_free + s->n_home + s->n_stage;
        out->buffers += s->n_bufs;
        out->chunks += s->n_chunks;
        out->groups++;
    }
    return out->recv_size != 0;
}

/* ---- >>windows: exposed memory: an endpoint's QP rights and its memory windows ------------------- */

struct rdmax__win {
    struct ibv_mw *mw;
    struct ibv_mr *mr;          /* the region's registration, which the window is bound over */
    uint32_t rkey;              /* chosen at creation (ibv_inc_rkey), advertised in our record, bound at connect */
    uint32_t region;            /* its region in ep->local */
    int access;                 /* IBV_ACCESS_REMOTE_* */
};

/* The remote rights of an RC QP: writes always (rdmax's own zero-length writes, keepalive and flush
   marker, need them, as does a peer's put_imm), reads and atomics only if a region exposed on it, or one
   open on every endpoint (RDMAX_ACCESS_ANY_ENDPOINT, or any region on a device without memory windows)
   registered before it, grants them. */
static int rdmax__qp_rights(const rdmax_ctx *ctx, const rdmax_mem *const *mems, uint32_t n)
{
    unsigned r = RDMAX_ACCESS_REMOTE_WRITE |
                 (ctx->dev ? __atomic_load_n(&ctx->dev->remote_any, __ATOMIC_RELAXED) : RDMAX__ACCESS_REMOTE);
    for (uint32_t i = 0; i < n; i++)
        r |= mems[i]->access & RDMAX__ACCESS_REMOTE;
    return rdmax__ibv_access(r) & ~IBV_ACCESS_LOCAL_WRITE;
}

/* Whether exposing m on ep takes a window: a scoped region of ep's protection domain (one of another
   PD keeps its key 0 and stays out of reach: rxe would bind a window over it). */
static int rdmax__ep_win_needed(const rdmax_ep *ep, const rdmax_mem *m)
{
    return rdmax__mem_scoped(ep->ctx, m->access) && m->ctx && m->ctx->pd == ep->ctx->pd;
}

/* A window per scoped region (rdmax__mem_scoped), its rkey chosen now so that it goes in our record;
   local[i].rkey becomes the window's. A window exists only on ep and is bound to ep's QP at connect. */
static rdmax_status rdmax__ep_windows(rdmax_ep *ep, const rdmax_mem *const *mems, rdmax_rbuf *local, uint32_t n)
{
    rdmax_ctx *ctx = ep->ctx;
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++)
        k += (uint32_t)rdmax__ep_win_needed(ep, mems[i]);
    if (!k)
        return RDMAX_OK;
    ep->wins = (struct rdmax__win *)rdmax__alloc(ctx, k * sizeof *ep->wins);
    if (!ep->wins)
        return RDMAX_ERR_NO_MEMORY;
    for (uint32_t i = 0; i < n; i++) {
        if (!rdmax__ep_win_needed(ep, mems[i]))
            continue;
        struct rdmax__win *w = &ep->wins[ep->n_wins];
        if (!(w->mw = ibv_alloc_mw(ctx->pd, IBV_MW_TYPE_2))) {
            int e = errno;
            rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MEM_WINDOW,
                       "device %s, endpoint qpn 0x%x: ibv_alloc_mw for exposed region %u failed: %s",
                       ctx->attr.name, ep->qp->qp_num, i, strerror(e));
            return e == ENOMEM ? RDMAX_ERR_NO_MEMORY : RDMAX_ERR_IO;
        }
        ep->n_wins++;
        w->mr = mems[i]->mr;
        w->region = i;
        w->access = rdmax__ibv_access(mems[i]->access) & ~IBV_ACCESS_LOCAL_WRITE;
        w->rkey = ibv_inc_rkey(w->mw->rkey);
        local[i].rkey = w->rkey;
    }
    return RDMAX_OK;
}

/* Binds ep's windows on its own QP, now in RTS, and waits for them: the peer learns that we are
   connected (our ready byte, rdma_accept, the RTU) only after this, so it never meets an unbound window.
   Only send completions are polled (other endpoints' comps may complete here, never a receive). */
static rdmax_status rdmax__ep_bind(rdmax_ep *ep)
{
    rdmax_ctx *ctx = ep->ctx;
    if (!ep->n_wins)
        return RDMAX_OK;
    if (RDMAX__SCQ_NESTED(ctx)) {  /* its completion could not be seen */
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MEM_WINDOW,
                   "device %s, endpoint qpn 0x%x: an endpoint that exposes regions cannot connect inside a "
                   "comp callback (its memory windows are bound on connect)", ctx->attr.name, ep->qp->qp_num);
        return RDMAX_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 0; i < ep->n_wins; i++) {
        const struct rdmax__win *w = &ep->wins[i];
        struct ibv_send_wr wr;
        memset(&wr, 0, sizeof wr);
        wr.opcode = IBV_WR_BIND_MW;
        wr.bind_mw.mw = w->mw;
        wr.bind_mw.rkey = w->rkey;
        wr.bind_mw.bind_info.mr = w->mr;
        wr.bind_mw.bind_info.addr = ep->local[w->region].addr;
        wr.bind_mw.bind_info.length = ep->local[w->region].len;
        wr.bind_mw.bind_info.mw_access_flags = (unsigned)w->access;
        int64_t deadline = rdmax__now_ms() + 2000;
        while ((!rdmax__ep_sq_avail(ep) || !rdmax__scq_free(ctx)) && rdmax__now_ms() < deadline)
            rdmax__poll_send(ctx);
        if (i + 1 == ep->n_wins)
            ep->sig_at = ep->sq_head;  /* the last one signaled: its completion covers the others */
        if (rdmax__ep_post(ep, &wr, NULL, RDMAX_OP_BIND, 0, 0, NULL) != RDMAX_OK) {
            rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MEM_WINDOW,
                       "device %s, endpoint qpn 0x%x: posting the bind of exposed region %u failed: %s",
                       ctx->attr.name, ep->qp->qp_num, w->region, strerror(ep->last_errno ? ep->last_errno : EAGAIN));
            return RDMAX_ERR_IO;
        }
    }
    /* A local operation: it completes at once unless the device is broken. */
    int64_t deadline = rdmax__now_ms() + 2000;
    while (ep->sq_head != ep->sq_tail && ep->state != RDMAX_EP_ERROR) {
        if (rdmax__now_ms() > deadline) {
            rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_MEM_WINDOW,
                       "device %s, endpoint qpn 0x%x: binding %u memory windows did not complete in 2 s",
                       ctx->attr.name, ep->qp->qp_num, ep->n_wins);
            return RDMAX_ERR_TIMEOUT;
        }
        rdmax__poll_send(ctx);
    }
    return ep->state == RDMAX_EP_ERROR ? (rdmax_status)ep->err : RDMAX_OK;  /* a failed bind was logged */
}

/* ---- >>ep: endpoint life cycle: desc defaults, create, connect, flush, destroy ------------------- */

/* An endpoint's recv_cb when its desc has none (rdmax_ep.recv_cb is never NULL, so the receive paths
   call it without a test): the message is dropped, and counted. */
static void rdmax__recv_drop(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)data, (void)len, (void)user;
    ep->ctx->cnt.recv_drops++;
}

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
    /* 31 requests keep an endpoint small: rxe gives a queue of n requests the power of two above n
       slots, so 31 cost it 32 slots (20 KiB) and 32 would cost 64 (36 KiB); rdmax's slot array is 1 KiB.
       A flow that needs more in flight asks for it. */
    if (!d->sq_depth)
        d->sq_depth = 31;
    uint32_t asked = d->sq_depth;
    /* At most max_qp_wr and 32768 (rdmax_ep.sq_regions counts slots in 16 bits); the slots are the power
       of two at or above it (indexed with sq_mask). */
    if (d->sq_depth > ctx->attr.max_qp_wr && ctx->attr.max_qp_wr > 0)
        d->sq_depth = ctx->attr.max_qp_wr;
    if (d->sq_depth > 32768)
        d->sq_depth = 32768;
    if (d->sq_depth < asked && !ctx->said_sq_clamp) {
        rdmax__log(ctx, RDMAX_LOG_INFO, RDMAX_LOG_ITEM_DEVICE_CAPS,
                   "device %s: a send queue of %u requests clamped to %u (max_qp_wr %u, at most 32768); said "
                   "once", ctx->attr.name, asked, d->sq_depth, ctx->attr.max_qp_wr);
        ctx->said_sq_clamp = 1;
    }
    if (d->transport == RDMAX_TRANSPORT_ID_RC) {
        /* RC: rq_depth is the window of this peer: the sends and puts with immediate it may have in
           flight to us, backed by rq_depth + 1 buffers (the one more for its grants, see >>srq). Four is
           the least of a fixed window: a grant goes at half the window, and a grant also uses a buffer at
           the peer, so with a threshold of one each grant would answer the other's forever. A window
           that adapts (rq_depth 0 on the shared pool, see >>recv) starts at 2 with a threshold of 2. */
        int adapt = !d->rq_depth && d->recv_pool != RDMAX_RECV_POOL_OWN;
        if (!d->rq_depth)
            d->rq_depth = adapt ? RDMAX__WINDOW_START : 16;
        if (d->rq_depth < 4 && !adapt)
            d->rq_depth = 4;
        if (d->rq_depth > 65534)
            d->rq_depth = 65534;  /* + 1: the connection record's credits field */
        if (!d->max_window)
            d->max_window = adapt ? 64 : (uint16_t)d->rq_depth;
        if (d->max_window < d->rq_depth || d->recv_pool == RDMAX_RECV_POOL_OWN)
            d->max_window = (uint16_t)d->rq_depth;  /* grows on the shared pool only */
        if (d->max_window > 65534)
            d->max_window = 65534;
        if (d->rq_depth >= ctx->attr.max_qp_wr)
            d->rq_depth = ctx->attr.max_qp_wr - 1;  /* + 1 buffers on its own receive queue (>>srq) */
        if (d->max_window >= ctx->attr.max_qp_wr)
            d->max_window = (uint16_t)(ctx->attr.max_qp_wr - 1);
        if (!d->recv_size)
            d->recv_size = ctx->desc.recv_size;
        if (d->recv_size > ctx->attr.max_msg_sz)
            d->recv_size = (uint32_t)ctx->attr.max_msg_sz;
    } else {  /* UD: the context's QP and pool (>>ud) */
        d->recv_pool = RDMAX_RECV_POOL_SHARED;
        d->max_window = 0;
        if (!d->rq_depth)
            d->rq_depth = 128;
        if (d->rq_depth < 32)
            d->rq_depth = 32;  /* reposts go in batches of 16: keep at least two batches */
        if (d->rq_depth > ctx->attr.max_qp_wr)
            d->rq_depth = ctx->attr.max_qp_wr;
        if (!d->recv_size)
            d->recv_size = 4096;
    }
    if (!d->signal_interval)
        d->signal_interval = 64;
    if (d->signal_interval > d->sq_depth / 2)
        d->signal_interval = d->sq_depth / 2 ? d->sq_depth / 2 : 1;
    /* rxe sizes every send-queue entry for the inline cap (256 fits the entry that 8 SGEs need anyway; its
       probed 400 doubles the entry), so the default stays at 256 unless asked. */
    if (d->max_inline == RDMAX_OFF)
        d->max_inline = 0;  /* nothing inline, as on a device without inline data */
    else if (!d->max_inline)
        d->max_inline = ctx->attr.max_inline < 256 ? ctx->attr.max_inline : 256;
    if (d->max_inline > ctx->attr.max_inline)
        d->max_inline = ctx->attr.max_inline;
    /* 1.07 s per try, as UCX's rc transports: with 67 ms (14), 94-101 of 128 endpoints of 8 clients on a
       loaded two-host link failed with RETRY_EXCEEDED within a second */
    if (!d->timeout)
        d->timeout = 18;
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
    if (!d->watchdog_ms) {
        /* Twice what the device itself may take to give up, plus 2 s for a loaded host. */
        uint64_t retry_ms = (4096ull << d->timeout) * (d->retry_cnt + 1u) / 1000000u + 1;
        d->watchdog_ms = (uint32_t)(2 * retry_ms + 2000);
    }
    if (!d->keepalive_ms)
        d->keepalive_ms = 4000;  /* found within 4 s + the RC retry time (7.5 s): under 12 s */
}

/* rdmax's own bytes for one endpoint: its struct and slot array (the batch staging is the context's),
   and a receive pool of its own if it has one. */
static size_t rdmax__ep_own_bytes(const rdmax_ep *ep)
{
    size_t b = sizeof *ep + (size_t)(ep->sq_mask + 1) * sizeof *ep->slots;
    if (ep->rbufs)
        b += (size_t)ep->rq_depth * (sizeof *ep->rq_free + ep->recv_size);
    return b;
}

/* A free slot in the endpoint table, which grows (doubling) up to max_eps. */
static rdmax_status rdmax__ep_slot(rdmax_ctx *ctx, uint32_t *out)
{
    for (uint32_t k = 0; k < ctx->eps_cap; k++) {
        uint32_t i = ctx->eps_hint + k < ctx->eps_cap ? ctx->eps_hint + k : ctx->eps_hint + k - ctx->eps_cap;
        if (!ctx->eps[i].ep) {
            *out = i;
            ctx->eps_hint = i + 1 < ctx->eps_cap ? i + 1 : 0;
            return RDMAX_OK;
        }
    }
    if (ctx->eps_cap >= ctx->desc.max_eps) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_EP_SLOTS, "device %s: all %u endpoint slots in use (rdmax_ctx_desc.max_eps %u)",
                   ctx->attr.name, ctx->eps_cap, ctx->desc.max_eps);
        return RDMAX_ERR_LIMIT;
    }
    uint32_t cap = 2 * ctx->eps_cap < ctx->desc.max_eps ? 2 * ctx->eps_cap : ctx->desc.max_eps;
    uint32_t mask = rdmax__pow2_mask(cap);
    rdmax__ep_ref *t = (rdmax__ep_ref *)rdmax__alloc(ctx, (mask + 1ull) * sizeof *t);
    if (!t)
        return RDMAX_ERR_NO_MEMORY;
    memcpy(t, ctx->eps, ctx->eps_cap * sizeof *t);
    rdmax__free(ctx, ctx->eps);
    ctx->eps = t;
    ctx->eps_mask = mask;
    *out = ctx->eps_cap;
    ctx->eps_hint = ctx->eps_cap + 1;
    ctx->eps_cap = cap;
    return RDMAX_OK;
}

static rdmax_status rdmax__ep_alloc(rdmax_ctx *ctx, const rdmax_ep_desc *desc, enum ibv_qp_type type, rdmax_ep **out)
{
    *out = NULL;
    uint32_t idx;
    uint16_t gen;  /* the slot's next generation */
    rdmax_status st = rdmax__ep_slot(ctx, &idx);
    if (st != RDMAX_OK)
        return st;
    if (type == IBV_QPT_RC && ctx->attr.max_qp && ctx->n_eps >= ctx->attr.max_qp) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_LIMIT, "device %s: this context has %u endpoints, the device's max_qp", ctx->attr.name,
                   ctx->n_eps);
        return RDMAX_ERR_LIMIT;
    }
    rdmax_ep *ep = (rdmax_ep *)rdmax__alloc(ctx, sizeof *ep);
    if (!ep)
        return RDMAX_ERR_NO_MEMORY;
    ep->ctx = ctx;
    rdmax__ep_desc_defaults(ctx, desc, &ep->desc);
    rdmax_ep_desc *d = &ep->desc;
    /* RC endpoints receive buffers of the context's pool on a queue of their own (>>srq), unless they
       asked for buffers of their own; UD ones from the context's UD QP. */
    int shared = type == IBV_QPT_RC && d->recv_pool != RDMAX_RECV_POOL_OWN;
    int reserved = 0;
    struct ibv_qp *parked[4];
    int n_parked = 0;
    /* RC: the window's buffers and one for the peer's grants (>>srq); UD: set to 0 below */
    ep->rq_depth = d->rq_depth + (type == IBV_QPT_RC);
    size_t rbytes = shared ? 0 : (size_t)ep->rq_depth * d->recv_size;
    st = RDMAX_ERR_NO_MEMORY;
    ep->sq_mask = rdmax__pow2(d->sq_depth) - 1;
    ep->sq_last = d->sq_depth - 1;
    ep->sig_at = d->signal_interval - 1;  /* sq_head is 0 */
    ep->blocked = RDMAX__BLK_STATE;  /* until connected; fast_gate == sq_head == 0 */
    ep->wr.num_sge = 1;              /* the fast put's request (see rdmax_ep.wr); wr_id below */
    ep->wr.sg_list = &ctx->fsge;
    ep->wr.opcode = IBV_WR_RDMA_WRITE;
    ep->wr.send_flags = IBV_SEND_INLINE;
    ep->signal_interval = d->signal_interval;
    ep->max_inline = d->max_inline;
    ep->rd_avail = d->max_rd_atomic;
    ep->recv_cb = d->recv_cb ? d->recv_cb : rdmax__recv_drop;
    ep->imm_cb = d->imm_cb;
    ep->user = d->user;
    ep->recv_size = d->recv_size;
    ep->grant_at = rdmax__grant_at(d->rq_depth);
    ep->slots = (rdmax__slot *)rdmax__alloc(ctx, (ep->sq_mask + 1) * sizeof *ep->slots);
    if (!ep->slots)
        goto fail;
#if RDMAX__HAS_UD
    if (type == IBV_QPT_UD) {  /* the context's QP */
        ep->qp = ctx->ud->qp;
        ep->shared_qp = 1;
        d->rq_depth = ep->rq_depth = 0;
        d->recv_size = ep->recv_size = ctx->ud->recv_size;
        goto registered;
    }
#endif
    if (shared) {
        if ((st = rdmax__srq_join(ctx, d->recv_size, ep->rq_depth, &ep->pool)) != RDMAX_OK)
            goto fail;
        reserved = 1;
    } else {
        ep->rq_free = (uint32_t *)rdmax__alloc(ctx, ep->rq_depth * sizeof *ep->rq_free);
        ep->rbufs = (char *)rdmax_numa_alloc(ctx, rbytes);
        if (!ep->rq_free || !ep->rbufs)
            goto fail;
        ep->rmr = ibv_reg_mr(ctx->pd, ep->rbufs, rbytes, IBV_ACCESS_LOCAL_WRITE);
        if (!ep->rmr) {
            rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_EP_SETUP, "device %s: ibv_reg_mr of %zu receive bytes failed: %s", ctx->attr.name,
                       rbytes, strerror(errno));
            st = RDMAX_ERR_IO;
            goto fail;
        }
        /* Every posted receive may complete before we poll: the receive CQ must hold them all. */
        if ((st = rdmax__rcq_fit(ctx, 0, rdmax__rg_used(ctx, 0) + ep->rq_depth,
                                 "receive buffers of its own and RC receive credits")) != RDMAX_OK)
            goto fail;
    }
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof qa);
    qa.send_cq = ctx->scq;
    qa.recv_cq = shared && ctx->rx->pool[ep->pool]->group ? ctx->rx->grp[ctx->rx->pool[ep->pool]->group].cq : ctx->rcq;
    qa.qp_type = type;
    qa.cap.max_send_wr = d->sq_depth;
    qa.cap.max_recv_wr = shared ? (uint32_t)d->max_window + 1 : ep->rq_depth;  /* a window grows up to max_window */
    qa.cap.max_send_sge = ctx->attr.max_sge < RDMAX_MAX_SGE ? ctx->attr.max_sge : RDMAX_MAX_SGE;
    qa.cap.max_recv_sge = 1;
    qa.cap.max_inline_data = d->max_inline;
    qa.sq_sig_all = 0;
    qa.qp_context = ep;  /* async QP events name their endpoint */
    for (;;) {
        ep->qp = ibv_create_qp(ctx->pd, &qa);
        /* A QP number whose previous owner's receives may still be queued is set aside (>>srq). */
        if (!ep->qp || !shared || !rdmax__map_tomb_live(ctx->rx, ep->qp->qp_num) || n_parked == 4)
            break;
        parked[n_parked++] = ep->qp;
    }
    if (!ep->qp || (shared && rdmax__map_tomb_live(ctx->rx, ep->qp->qp_num))) {
        int e = errno;
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_EP_SETUP, "device %s: ibv_create_qp(%s, sq %u, rq %u%s, inline %u) failed: %s (this "
                   "context has %u endpoints; the device's max_qp is %u)", ctx->attr.name,
                   type == IBV_QPT_RC ? "RC" : "UD", d->sq_depth, shared ? d->max_window + 1u : ep->rq_depth,
                   shared ? " of the pool's buffers" : "",
                   d->max_inline, ep->qp ? "only reused QP numbers" : strerror(e), ctx->n_eps, ctx->attr.max_qp);
        if (ep->qp)
            ibv_destroy_qp(ep->qp);
        ep->qp = NULL;
        st = e == ENOMEM && ctx->n_eps > 0 ? RDMAX_ERR_LIMIT : RDMAX_ERR_IO;
        goto fail;
    }
    if (shared && (st = rdmax__map_put(ctx, ep->qp->qp_num, idx)) != RDMAX_OK) {
        ibv_destroy_qp(ep->qp);
        ep->qp = NULL;
        goto fail;
    }
    while (n_parked)
        ibv_destroy_qp(parked[--n_parked]);
#if RDMAX__HAS_UD
registered:
#endif
    rdmax__ep_post_fn(ep);
    ctx->eps[idx].ep = ep;
    gen = (uint16_t)(RDMAX__REF_GEN(&ctx->eps[idx]) + 1);
    if (gen == 0)  /* never 0: a zeroed slot must match no wr_id */
        gen = 1;
    ctx->eps[idx].key = RDMAX__EP_KEY(gen, idx);
    ctx->n_eps++;
    if (!shared)
        ctx->rq_total += ep->rq_depth;
    ctx->ep_bytes += rdmax__ep_own_bytes(ep);
    ep->wr_id_base = (uint64_t)gen << 48 | (uint64_t)idx << 32;
    ep->wr.wr_id = ep->wr_id_base;  /* the fast put stores only the low half (the slot) */
    for (uint32_t i = 0; !shared && i < ep->rq_depth; i++)
        ep->rq_free[i] = i;
    ep->rq_unposted = shared ? 0 : ep->rq_depth;
    snprintf(ep->peer, sizeof ep->peer, "(not connected)");
    *out = ep;
    return RDMAX_OK;
fail:
    while (n_parked)
        ibv_destroy_qp(parked[--n_parked]);
    if (reserved)
        rdmax__srq_release(ctx, ep->pool, ep->rq_depth);  /* its buffers stay in the pool (for a while) */
    if (ep->rmr)
        ibv_dereg_mr(ep->rmr);
    rdmax_numa_free(ctx, ep->rbufs, rbytes);
    rdmax__free(ctx, ep->slots);
    rdmax__free(ctx, ep->rq_free);
    rdmax__free(ctx, ep);
    return st;
}

static rdmax_status rdmax__modify(rdmax_ep *ep, struct ibv_qp_attr *a, int mask, const char *what)
{
    int rc = ep->ctx->modify_qp(ep->qp, a, mask);  /* ibv_modify_qp (a test's fake records the attributes) */
    if (rc) {
        rdmax__log(ep->ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_QP_MODIFY,
                   "device %s port %u, endpoint qpn 0x%x peer %s: ibv_modify_qp(%s) "
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

/* rdmax_ep_create with transport t, whatever desc says (rdmax_mcast_ep_create's: UD); desc may be NULL. */
static rdmax_status rdmax__ep_create(rdmax_ctx *ctx, const rdmax_ep_desc *desc, uint8_t t, rdmax_ep **out)
{
    *out = NULL;
    if ((t == RDMAX_TRANSPORT_ID_RC && !RDMAX__HAS_RC) || (t == RDMAX_TRANSPORT_ID_UD && !RDMAX__HAS_UD) ||
        (t != RDMAX_TRANSPORT_ID_RC && t != RDMAX_TRANSPORT_ID_UD)) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_EP_DESC,
                   "endpoint transport %u was not selected at compile time", t);
        return RDMAX_ERR_UNSUPPORTED;
    }
    rdmax_ep_desc d;
    if (desc)
        d = *desc;
    else
        memset(&d, 0, sizeof d);
    d.transport = t;
    if (d.recv_pool != RDMAX_RECV_POOL_SHARED && d.recv_pool != RDMAX_RECV_POOL_OWN) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_EP_DESC,
                   "endpoint desc: recv_pool %u is neither RDMAX_RECV_POOL_SHARED (0) nor RDMAX_RECV_POOL_OWN (1)",
                   d.recv_pool);
        return RDMAX_ERR_INVALID_PARAM;
    }
    /* The regions to advertise: expose, then expose_list; each must be a real region. */
    rdmax_rbuf local[RDMAX_MAX_REGIONS];
    const rdmax_mem *mems[RDMAX_MAX_REGIONS];
    uint32_t n_local = 0;
    if (d.expose_count > RDMAX_MAX_REGIONS - (d.expose != NULL) || (d.expose_count && !d.expose_list)) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_EP_DESC,
                   "endpoint desc: %u regions in expose_list%s, at most %u in all",
                   d.expose_count, d.expose ? " plus expose" : "", RDMAX_MAX_REGIONS);
        return RDMAX_ERR_INVALID_PARAM;
    }
    for (uint32_t i = 0; i <= d.expose_count; i++) {
        const rdmax_mem *m = i == 0 ? d.expose : d.expose_list[i - 1];
        if (i == 0 && !m)
            continue;
        if (!m || !m->len) {
            rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_EP_DESC, "endpoint desc: expose_list[%u] is %s", i - 1,
                       m ? "an empty region" : "NULL");
            return RDMAX_ERR_INVALID_PARAM;
        }
        local[n_local].addr = (uintptr_t)m->addr;
        local[n_local].len = m->len;
        local[n_local].rkey = m->rkey;
        mems[n_local++] = m;
    }
    rdmax_status st;
#if RDMAX__HAS_UD
    if (t == RDMAX_TRANSPORT_ID_UD) {
        if ((st = rdmax__ud_ep_create(ctx, &d, out)) == RDMAX_OK &&
            (st = rdmax__ep_set_local(*out, local, n_local)) != RDMAX_OK) {
            rdmax_ep_destroy(*out);
            *out = NULL;
        }
        return st;
    }
#endif
    st = rdmax__ep_alloc(ctx, &d, IBV_QPT_RC, out);
    if (st != RDMAX_OK)
        return st;
    rdmax_ep *ep = *out;
    if ((st = rdmax__ep_windows(ep, mems, local, n_local)) != RDMAX_OK ||
        (st = rdmax__ep_set_local(ep, local, n_local)) != RDMAX_OK) {
        rdmax_ep_destroy(ep);
        *out = NULL;
        return st;
    }
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = ctx->desc.pkey_index;
    a.port_num = ctx->attr.port;
    if (t == RDMAX_TRANSPORT_ID_RC) {
        a.qp_access_flags = (unsigned)rdmax__qp_rights(ctx, mems, n_local);
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
    if (st == RDMAX_OK && ep->rq_unposted)  /* a pool of its own */
        st = rdmax__post_recvs(ep, ep->rq_unposted);
    else if (st == RDMAX_OK && t == RDMAX_TRANSPORT_ID_RC)  /* its credits' buffers: its QP takes receives now */
        st = rdmax__ep_rq_fill(ctx, ep);
    ep->rx_unreturned = 0;  /* the first buffers are the peer's initial credits, in our record */
    if (st != RDMAX_OK) {
        rdmax_ep_destroy(ep);
        *out = NULL;
    }
    return st;
}

rdmax_status rdmax_ep_create(rdmax_ctx *ctx, const rdmax_ep_desc *desc, rdmax_ep **out)
{
    return rdmax__ep_create(ctx, desc, rdmax__ep_transport(desc), out);
}

void rdmax_ep_query_record(const rdmax_ep *ep, rdmax_conn_record *info)
{
    memset(info, 0, sizeof *info);
    info->transport = ep->qp->qp_type == IBV_QPT_UD ? RDMAX_TRANSPORT_ID_UD : RDMAX_TRANSPORT_ID_RC;
    info->mtu = (uint8_t)ep->ctx->attr.active_mtu;
    info->qpn = ep->qp->qp_num;
    /* The PSN is derived from the QPN so both sides can be checked in a log; any 24-bit value works. */
    info->psn = (ep->qp->qp_num * 2654435761u) & 0xffffff;
    memcpy(info->gid, ep->ctx->attr.gid.raw, 16);
    info->subnet_prefix = rdmax__gid_prefix(ep->ctx->attr.gid.raw);
    info->lid = ep->ctx->attr.lid;
    info->link_layer = (uint8_t)ep->ctx->attr.link_layer;
    info->gid_type = (uint8_t)ep->ctx->attr.gid_type;
    info->recv_size = ep->recv_size;
    /* RC: every buffer that backs the peer (the window + 1): its sender keeps the last one for grants */
    info->credits = (uint16_t)(ep->rq_depth > 65535 ? 65535 : ep->rq_depth);
#if RDMAX__HAS_UD
    if (info->transport == RDMAX_TRANSPORT_ID_UD) {
        info->qkey = RDMAX_UD_QKEY;
        info->recv_size = ep->ctx->ud->recv_size;
        info->credits = (uint16_t)(ep->wr_id_base >> 32);  /* our index: the immediate data the peer sends */
    }
#endif
    info->n_regions = ep->n_local;
    if (ep->n_local)
        memcpy(info->regions, ep->local, (size_t)ep->n_local * sizeof ep->local[0]);
}

static rdmax_status rdmax__ep_transport_check(rdmax_ep *ep, const rdmax_conn_record *r, uint8_t mine)
{
    if (r->transport != mine) {
        rdmax__log(ep->ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_PEER_TRANSPORT,
                   "endpoint qpn 0x%x peer %s: peer's transport %u differs from ours %u",
                   ep->qp->qp_num, ep->peer, r->transport, mine);
        return RDMAX_ERR_OOB_TRANSPORT;
    }
    return RDMAX_OK;
}

/* Our port and the peer's must speak the same link layer, and on Ethernet the same RoCE version (a RoCE v1
   frame is no IP packet: a v2 port drops it), or no packet of the QP would arrive. */
static rdmax_status rdmax__ep_link_check(rdmax_ep *ep, const rdmax_conn_record *r)
{
    const rdmax_dev_attr *a = &ep->ctx->attr;
    if (r->link_layer == a->link_layer && r->gid_type == a->gid_type)
        return RDMAX_OK;
    rdmax__log(ep->ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_PEER_TRANSPORT,
               "endpoint qpn 0x%x peer %s: the peer's port is %s with GID type %s, ours (device %s port %u) %s "
               "with GID type %s: the two cannot reach each other", ep->qp->qp_num, ep->peer,
               rdmax__link_layer_str(r->link_layer), rdmax__gid_type_str(r->gid_type), a->name, a->port,
               rdmax__link_layer_str(a->link_layer), rdmax__gid_type_str(a->gid_type));
    return RDMAX_ERR_OOB_LINK;
}

/* The QP is in RTS: take the peer's record and go. Shared by the TCP record and rdma_cm setup. */
static rdmax_status rdmax__ep_connected(rdmax_ep *ep, const rdmax_conn_record *r, enum ibv_mtu mtu)
{
    rdmax_ctx *ctx = ep->ctx;
    rdmax_status st = rdmax__ep_set_remote(ep, r);
    if (st == RDMAX_OK)
        st = rdmax__ep_bind(ep);
    if (st != RDMAX_OK)
        return st;
    ep->peer_recv_size = r->recv_size;
    ep->send_inline = ep->max_inline < r->recv_size ? ep->max_inline : r->recv_size;
    ep->peer_qpn = r->qpn;
    memcpy(ep->peer_gid, r->gid, 16);
    ep->tx_credits = r->credits;
    ep->wd_ms = ep->ka_ms = rdmax__health_ms(ctx);
    ep->state = RDMAX_EP_CONNECTED;
    ep->blocked &= (uint8_t)~RDMAX__BLK_STATE;
    rdmax__ep_regate(ep);
    RDMAX__PROFILE_EVENT(ctx, RDMAX_PROFILE_EVENT_EP_CONNECTED, ep, r->qpn);
    rdmax__log(ctx, RDMAX_LOG_DEBUG, RDMAX_LOG_ITEM_EP_CONNECTED,
               "device %s: endpoint qpn 0x%x connected to peer %s qpn 0x%x, mtu %u",
               ctx->attr.name, ep->qp->qp_num, ep->peer, r->qpn, rdmax__mtu_bytes(mtu));
    return RDMAX_OK;
}

rdmax_status rdmax_ep_connect_record(rdmax_ep *ep, const rdmax_conn_record *r)
{
    rdmax_ctx *ctx = ep->ctx;
    rdmax_conn_record me;
    rdmax_ep_query_record(ep, &me);
    if (rdmax__ep_transport_check(ep, r, me.transport) != RDMAX_OK)
        return RDMAX_ERR_OOB_TRANSPORT;
    if (rdmax__ep_link_check(ep, r) != RDMAX_OK)
        return RDMAX_ERR_OOB_LINK;
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
    rdmax__peer_av(ctx, &a.ah_attr, r->gid, r->lid, r->subnet_prefix);
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
    return rdmax__ep_connected(ep, r, (enum ibv_mtu)(r->mtu < me.mtu ? r->mtu : me.mtu));
}

rdmax_status rdmax_ep_create_pair(rdmax_ctx *ctx, const rdmax_ep_desc *desc, rdmax_ep **a, rdmax_ep **b)
{
    *a = *b = NULL;
    rdmax_status st = rdmax_ep_create(ctx, desc, a);
    if (st == RDMAX_OK)
        st = rdmax_ep_create(ctx, desc, b);
    if (st == RDMAX_OK) {
        rdmax_conn_record ia, ib;
        rdmax_ep_query_record(*a, &ia);
        rdmax_ep_query_record(*b, &ib);
        snprintf((*a)->peer, sizeof (*a)->peer, "loopback");
        snprintf((*b)->peer, sizeof (*b)->peer, "loopback");
        st = rdmax_ep_connect_record(*a, &ib);
        if (st == RDMAX_OK)
            st = rdmax_ep_connect_record(*b, &ia);
    }
    if (st != RDMAX_OK) {
        rdmax_ep_destroy(*a);
        rdmax_ep_destroy(*b);
        *a = *b = NULL;
    }
    return st;
}

/* Region 0 of the peer, or zeros: the target of zero-length writes (flush marker, keepalive), which
   access no memory, so a peer that advertised nothing is fine. */
static rdmax_rbuf rdmax__ep_remote0(const rdmax_ep *ep)
{
    rdmax_rbuf z = {0, 0, 0};
    return ep->n_remote ? ep->remote[0] : z;
}

static rdmax_status rdmax__ep_flush(rdmax_ep *ep, int timeout_ms);

static void rdmax__ep_free(rdmax_ep *ep);

/* The end of rdmax_ep_flush or rdmax_ep_disconnect: a callback inside may have destroyed ep (only its
   memory is left, see rdmax_ep_destroy), which goes with the outermost call. */
static void rdmax__ep_call_end(rdmax_ep *ep)
{
    if (--ep->in_call == 0 && ep->destroyed)
        rdmax__ep_free(ep);
}

/* (rdmax_ep.in_call: a state_cb that destroys ep is not called while this still uses it, and a destroy
   from another callback leaves it the memory it reads) */
rdmax_status rdmax_ep_flush(rdmax_ep *ep, int timeout_ms)
{
    ep->in_call++;
    rdmax_status st = rdmax__ep_flush(ep, timeout_ms);
    rdmax__ep_call_end(ep);
    return st;
}

static rdmax_status rdmax__ep_flush(rdmax_ep *ep, int timeout_ms)
{
    rdmax_ctx *ctx = ep->ctx;
    if (timeout_ms < 0) {  /* as accept and connect: a wait has a bound */
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_NEGATIVE_TIMEOUT,
                   "device %s: flush with a negative timeout %d ms", ctx->attr.name,
                   timeout_ms);
        return RDMAX_ERR_INVALID_PARAM;
    }
    if (RDMAX__SCQ_NESTED(ctx)) {  /* it would wait for completions only the caller's caller can report */
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_FLUSH_IN_CALLBACK,
                   "device %s: rdmax_ep_flush called from a comp callback: send completions are not "
                   "reported inside one (flush after it returns)", ctx->attr.name);
        return RDMAX_ERR_INVALID_PARAM;
    }
    if ((ep->blocked & RDMAX__BLK_BATCH) && rdmax_batch_end(ep) != RDMAX_OK)
        return RDMAX_ERR_IO;
    if (ep->state == RDMAX_EP_CLOSED && ep->sq_head == ep->sq_tail) {
        rdmax__log(ctx, RDMAX_LOG_INFO, RDMAX_LOG_ITEM_EP_CLOSED,
                   "device %s, endpoint qpn 0x%x peer %s: flush of a closed endpoint: %s",
                   ctx->attr.name, ep->qp->qp_num, ep->peer,
                   ep->err == RDMAX_ERR_CLOSED ? "the peer disconnected" : "this side disconnected");
        return RDMAX_ERR_CLOSED;
    }
    if (ep->sq_head == ep->sq_tail)
        return rdmax_ep_query_error(ep);
    /* If the newest request is unsignaled, nothing would ever report it: add a signaled zero-length
       write behind it (never a zero-length read: that has crashed rxe). */
    rdmax__slot *last = &ep->slots[(ep->sq_head - 1) & ep->sq_mask];
    if (!last->signaled && ep->state != RDMAX_EP_INIT) {
        int64_t deadline = rdmax__now_ms() + timeout_ms;
        rdmax_status st;
        if (ep->state != RDMAX_EP_CONNECTED)
            /* Failed or closed: an unsignaled request that ran has no completion coming and nothing
               behind it to bring one. The marker is flushed (a failed QP is in the error state) or
               completes, and either way its completion retires everything before it. */
            st = rdmax__ep_sq_avail(ep) && rdmax__scq_free(ctx) ? RDMAX_OK : RDMAX_ERR_NO_RESOURCE;
        else
            while ((st = rdmax__ep_check(ep)) == RDMAX_ERR_NO_RESOURCE && rdmax__now_ms() < deadline)
                rdmax_progress(ctx);
        if (st == RDMAX_OK) {
            struct ibv_send_wr *wr;
            rdmax_rbuf r0 = rdmax__ep_remote0(ep);  /* zero length: never accessed */
#if RDMAX__HAS_UD
            if (ep->qp->qp_type == IBV_QPT_UD) {
                /* UD has no RDMA write: send an empty datagram to our own QP, without immediate data (a
                   user's datagram always has it); the receive path knows it (zero bytes, no immediate,
                   from our own QPN and GID) and drops it without counting a drop. */
                wr = rdmax__ep_wr(ep, IBV_WR_SEND);
                wr->wr.ud.ah = rdmax__ah_get(ctx, ctx->attr.gid.raw, ctx->attr.lid,
                                             rdmax__gid_prefix(ctx->attr.gid.raw));
                wr->wr.ud.remote_qpn = ep->qp->qp_num;
                wr->wr.ud.remote_qkey = RDMAX_UD_QKEY;
                if (!wr->wr.ud.ah)
                    return RDMAX_ERR_IO;
            } else
#endif
            {
                wr = rdmax__ep_wr(ep, IBV_WR_RDMA_WRITE);
                wr->wr.rdma.remote_addr = r0.addr;
                wr->wr.rdma.rkey = r0.rkey;
            }
            wr->num_sge = 0;
            ep->sig_at = ep->sq_head;  /* force this one signaled */
            st = rdmax__ep_post(ep, wr, NULL, RDMAX_OP_FLUSH, 0, r0.addr, NULL);
        }
    }
    int64_t deadline = rdmax__now_ms() + timeout_ms;
    while (ep->sq_head != ep->sq_tail) {
        if (rdmax__now_ms() > deadline) {
            rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_FLUSH_TIMEOUT,
                       "device %s, endpoint qpn 0x%x peer %s: flush timed out after %d ms "
                       "with %u operations outstanding", ctx->attr.name, ep->qp->qp_num, ep->peer, timeout_ms,
                       ep->sq_head - ep->sq_tail);
            return RDMAX_ERR_TIMEOUT;
        }
        rdmax_progress(ctx);
    }
    return rdmax_ep_query_error(ep);
}

void rdmax_ep_destroy(rdmax_ep *ep)
{
    if (!ep)
        return;
    rdmax_ctx *ctx = ep->ctx;
    rdmax_ep_pending_purge(ep);  /* safe from inside a dispatch callback of this endpoint */
    if (ctx->batch_ep == ep) {  /* what it chained is never posted: its slots are canceled below */
        rdmax__chain_close(ctx, ep);
        ctx->batch_ep = NULL;
        ctx->cnt.post_calls -= ctx->batch_n;  /* in posted[], and in no call */
        ctx->batch_n = 0;
        rdmax__chain_reset(ctx);
    }
    rdmax__arb_group_cleanup(&ctx->arb, &ep->group);
    /* Operations in flight complete with CANCELED now; their completions, if any arrive, find the
       endpoint's table slot empty or of another generation and are dropped. */
    if (ep->sq_head != ep->sq_tail)
        ctx->scq_idle = INT32_MIN;  /* their completions may come: progress polls until a tick drained them */
    while (ep->sq_head != ep->sq_tail)
        rdmax__ep_retire(ep, (ep->sq_head - 1) & ep->sq_mask, RDMAX_ERR_CANCELED);
    uint32_t idx = (uint32_t)(ep->wr_id_base >> 32) & 0xffff;
    int shared = 0;
    if (ep->qp && ctx->eps[idx].ep == ep) {
        ctx->eps[idx].ep = NULL;  /* (from here the buffers it owns have a dead owner: >>srq) */
        ctx->eps[idx].key |= RDMAX__EP_KEY_FREE;
        ctx->n_eps--;
        ctx->ep_bytes -= rdmax__ep_own_bytes(ep);
        if (ep->rbufs) {
            ctx->rq_total -= ep->rq_depth;
        } else if (ep->qp->qp_type == IBV_QPT_RC) {
            /* its receives still queued are dropped by number */
            rdmax__map_kill(ctx, ep->qp->qp_num);
            shared = 1;
        }
    }
#if RDMAX__HAS_UD
    rdmax__ud_ep_cleanup(ep);
#endif
    /* The windows before the QP: a bound type-2 window holds its QP (rxe waits for it at destroy). */
    for (uint32_t i = 0; i < ep->n_wins; i++)
        ibv_dealloc_mw(ep->wins[i].mw);
    rdmax__free(ctx, ep->wins);
    if (ep->qp && !ep->shared_qp)
        ibv_destroy_qp(ep->qp);
    if (shared) {  /* after the QP: its posted buffers back to the pool (>>srq), its credits leave the target,
                      and the pool may go with it */
        rdmax__ep_rq_return(ctx, ep);
        rdmax__srq_release(ctx, ep->pool, ep->rq_depth);
    }
    rdmax__cm_ep_cleanup(ep);
    if (ep->rmr)
        ibv_dereg_mr(ep->rmr);
    /* Freed later, its queue empty and its state an error meanwhile: inside its own flush or disconnect,
       which read ep as the callback returns (freed when that call returns); inside a receive poll with
       buffers of its own, one of which may be the data of the callback that destroys it, valid until that
       returns (freed at the end of the outermost poll, rdmax__ep_reap). */
    if (ep->in_call || (ep->rbufs && rdmax__in_recv_poll(ctx))) {
        ep->state = RDMAX_EP_ERROR;
        ep->err = RDMAX_ERR_CANCELED;
        ep->destroyed = 1;
        if (!ep->in_call) {
            ep->dead_next = ctx->dead_eps;
            ctx->dead_eps = ep;
            if (ctx->rx)
                ctx->rx->recv_disturbed = 1;  /* a single message's path settles the batch's way, which reaps */
        }
        return;
    }
    rdmax__ep_free(ep);
}

/* The end of the outermost receive poll: the endpoints destroyed inside it that kept their buffers. */
static void rdmax__ep_reap(rdmax_ctx *ctx)
{
    while (ctx->dead_eps) {
        rdmax_ep *ep = ctx->dead_eps;
        ctx->dead_eps = ep->dead_next;
        rdmax__ep_free(ep);
    }
}

/* rdmax_ep_destroy's last step: the endpoint's memory. */
static void rdmax__ep_free(rdmax_ep *ep)
{
    rdmax_ctx *ctx = ep->ctx;
    rdmax_numa_free(ctx, ep->rbufs, (size_t)ep->rq_depth * ep->recv_size);
    rdmax__free(ctx, ep->slots);
    rdmax__free(ctx, ep->rq_free);
    rdmax__free(ctx, ep->local);
    rdmax__free(ctx, ep->remote);
    rdmax__free(ctx, ep);
}

/* ---- >>ep_query: an endpoint's regions and queries ----------------------------------------------- */

rdmax_status rdmax_ep_query_error(const rdmax_ep *ep)
{
    return (rdmax_status)ep->err;
}

/* The regions in ep's own arrays, exactly as many as there are (an endpoint stays small: 10,000 UD
   endpoints on one context advertise nothing and hold no region array). */
static rdmax_status rdmax__ep_regions(rdmax_ep *ep, rdmax_rbuf **to, uint32_t *n_to, const rdmax_rbuf *from,
                                      uint32_t n)
{
    n = n < RDMAX_MAX_REGIONS ? n : RDMAX_MAX_REGIONS;
    rdmax_rbuf *a = n ? (rdmax_rbuf *)rdmax__alloc(ep->ctx, (size_t)n * sizeof *a) : NULL;
    if (n && !a)
        return RDMAX_ERR_NO_MEMORY;
    if (n)
        memcpy(a, from, (size_t)n * sizeof *a);
    rdmax__free(ep->ctx, *to);
    *to = a;
    *n_to = n;
    return RDMAX_OK;
}

static rdmax_status rdmax__ep_set_local(rdmax_ep *ep, const rdmax_rbuf *r, uint32_t n)
{
    return rdmax__ep_regions(ep, &ep->local, &ep->n_local, r, n);
}

static rdmax_status rdmax__ep_set_remote(rdmax_ep *ep, const rdmax_conn_record *r)
{
    return rdmax__ep_regions(ep, &ep->remote, &ep->n_remote, r->regions, r->n_regions);
}

const rdmax_rbuf *rdmax_ep_query_remote(const rdmax_ep *ep, uint32_t index)
{
    return index < ep->n_remote ? &ep->remote[index] : NULL;
}

uint32_t rdmax_ep_query_remote_count(const rdmax_ep *ep)
{
    return ep->n_remote;
}

rdmax_ep_desc rdmax_ep_query_desc(const rdmax_ep *ep)
{
    return ep->desc;
}

rdmax_ep_state rdmax_ep_query_state(const rdmax_ep *ep)
{
    return (rdmax_ep_state)ep->state;
}

void rdmax_ep_query_resources(const rdmax_ep *ep, rdmax_ep_resources *out)
{
    memset(out, 0, sizeof *out);
    out->state = (rdmax_ep_state)ep->state;
    out->sq_free = rdmax__ep_sq_avail(ep);
    out->outstanding = ep->sq_head - ep->sq_tail;
    const rdmax_ctx *ctx = ep->ctx;
    if (ctx->batch_ep == ep && ctx->chain_end != NULL) {
        /* the short puts chained in the open room take their slots at its close (rdmax__room_settle) */
        uint32_t k = (uint32_t)(ctx->chain_next - &ctx->chain_entries[ctx->chain_base]);
        out->sq_free -= k;
        out->outstanding += k;
    }
    out->reads_free = ep->rd_avail;
    /* the sends that may go now: not the credit kept back for grants (UD: UINT32_MAX, none counted) */
    out->send_credits = ep->tx_credits == UINT32_MAX ? UINT32_MAX : ep->tx_credits ? ep->tx_credits - 1 : 0;
    out->recv_window = ep->qp->qp_type == IBV_QPT_RC && ep->rq_depth ? ep->rq_depth - 1 : 0;
    out->pending = rdmax__arb_group_count(&ep->group);
    out->qp_num = ep->qp->qp_num;
    out->peer_qp_num = ep->peer_qpn;
    out->n_remote = ep->n_remote;
    out->recv_pool = ep->rbufs;
    out->recv_pool_bytes = (size_t)ep->rq_depth * ep->recv_size;
#if RDMAX__HAS_RC
    if (!ep->rbufs && !ep->shared_qp && ep->ctx->rx && ep->ctx->rx->pool[ep->pool] &&
        ep->ctx->rx->pool[ep->pool]->n_chunks) {  /* RC: the first chunk of the shared pool it receives into */
        const struct rdmax__srq *s = ep->ctx->rx->pool[ep->pool];
        out->recv_pool = s->chunks[0].base;
        out->recv_pool_bytes = (size_t)s->per_chunk * s->recv_size;
    }
#endif
    out->qp = ep->qp;
}

rdmax_ctx *rdmax_ep_query_ctx(const rdmax_ep *ep)
{
    return ep->ctx;
}

/* ---- >>post: the operations' slow and general paths, the fast paths' out-of-line ends ------------ */

/* ep is blocked for `why` too (RDMAX__BLK_STATE, RDMAX__BLK_PENDING): a room it chains into closes, as
   rdmax_put sends its puts to the room on batch_ep alone (rdmax__put_chain). */
static void rdmax__ep_block(rdmax_ep *ep, uint8_t why)
{
    ep->blocked |= why;
    if (ep->ctx->batch_ep == ep)
        rdmax__chain_close(ep->ctx, ep);
    rdmax__ep_regate(ep);
}

/* A post refused for want of a resource, `why` (RDMAX_PROFILE_NORES_*): counted, with the SQ_FULL event. */
static rdmax_status rdmax__ep_no_resource(rdmax_ep *ep, unsigned why)
{
    ep->ctx->cnt.no_resource++;
    RDMAX__PROFILE_EVENT(ep->ctx, RDMAX_PROFILE_EVENT_SQ_FULL, ep, why);
    return RDMAX_ERR_NO_RESOURCE;
}

/* Reserve one send slot and post (or chain) the request the caller filled in (rdmax__ep_wr). */
static rdmax_status rdmax__ep_check(rdmax_ep *ep)
{
    if (rdmax_unlikely(ep->state != RDMAX_EP_CONNECTED))
        return ep->state == RDMAX_EP_ERROR ? RDMAX_ERR_ENDPOINT
               : ep->state == RDMAX_EP_CLOSED ? RDMAX_ERR_CLOSED : RDMAX_ERR_NOT_CONNECTED;
    /* Out of send-queue or CQ entries, or requests are waiting: a direct post would overtake them. */
    if (rdmax_unlikely(rdmax__ep_sq_avail(ep) == 0 || rdmax__scq_free(ep->ctx) == 0 ||
                       (ep->group.count != 0 && ep->ctx->disp_ep != ep)))
        return rdmax__ep_no_resource(ep, rdmax__ep_sq_avail(ep) == 0 ? RDMAX_PROFILE_NORES_SQ
                                         : rdmax__scq_free(ep->ctx) == 0 ? RDMAX_PROFILE_NORES_CQ
                                                                         : RDMAX_PROFILE_NORES_PENDING);
    return RDMAX_OK;
}

/* A comp whose request was accepted gets its success status now (nothing is set on a refusal): the
   common completion then only sets done (rdmax__send_cqe_fast); a failure sets the status again
   (rdmax__complete). */
static void rdmax__comp_taken(rdmax_comp *comp)
{
    if (comp)
        comp->status = RDMAX_OK;
}

/* The general path's post (or chain) of a request the caller filled in (rdmax__ep_wr). */
static rdmax_status rdmax__ep_post(rdmax_ep *ep, struct ibv_send_wr *wr, rdmax_comp *comp, rdmax_op op, uint32_t len,
                                   uint64_t raddr, struct rdmax_rcache_region *region)
{
    rdmax_ctx *ctx = ep->ctx;
    uint32_t slot = ep->sq_head & ep->sq_mask;
    rdmax__slot *s = &ep->slots[slot];
    uint32_t sig_at = ep->sig_at;  /* restored if the post is refused */
    /* Signal when asked for a completion, every signal_interval posts, and on the last free slot or CQ
       entries so that a completion always comes back to free them. */
    int sig = comp != NULL || ep->sq_head == sig_at || rdmax__ep_sq_avail(ep) <= 1 || ctx->scq_spare <= 0;
    s->comp = comp;
    ctx->comps_out += comp != NULL;
    s->region = region;
    ep->sq_regions += region != NULL;
    s->len = len;
    s->op = (uint8_t)op;
    s->signaled = (uint8_t)sig;
    s->raddr = raddr;
    wr->wr_id = ep->wr_id_base | slot | (comp != NULL && comp->cb != NULL ? RDMAX__WR_CB : 0);
    if (sig) {
        wr->send_flags |= IBV_SEND_SIGNALED;
        ep->sig_at = rdmax__sig_next(ep, ep->sq_head);
    }
    ep->sq_head++;
    ctx->scq_spare--;
    ctx->cnt.posted[op]++;
    ctx->cnt.bytes[op] += len;
    if (ep->blocked & RDMAX__BLK_BATCH) {
        ep->fast_gate = ep->sq_head;
        rdmax_status st;
        if (++ctx->batch_n == RDMAX_BATCH_MAX && (st = rdmax__post_chain(ep, 1)) != RDMAX_OK)
            return st;  /* the caller undoes its own request */
        rdmax__comp_taken(comp);
        return RDMAX_OK;
    }
    struct ibv_send_wr *bad;
    wr->next = NULL;
    RDMAX__PROF_BEGIN(ctx, POST);
    int rc = ibv_post_send(ep->qp, wr, &bad);
    RDMAX__PROF_END(ctx, POST);
    if (rdmax_unlikely(rc != 0)) {
        /* nothing was posted: give the slot back */
        ep->sq_head--;
        ctx->scq_spare++;
        ctx->comps_out -= comp != NULL;
        s->comp = NULL;
        ep->sq_regions -= s->region != NULL;
        s->region = NULL;
        s->signaled = 0;
        ctx->cnt.posted[op]--;
        ctx->cnt.bytes[op] -= len;
        ep->sig_at = sig_at;
        ep->last_errno = rc;
        rdmax__ep_regate(ep);
        return RDMAX_ERR_IO;
    }
    rdmax__ep_regate(ep);
    rdmax__comp_taken(comp);
    return RDMAX_OK;
}

static struct ibv_send_wr *rdmax__ep_wr(rdmax_ep *ep, enum ibv_wr_opcode opcode)
{
    rdmax_ctx *ctx = ep->ctx;
    struct ibv_send_wr *wr = &ctx->general_wr;  /* the SGEs the endpoint's (rdmax_ep.wr is the fast put's) */
    wr->sg_list = ep->sge;
    if (rdmax_unlikely(ep->blocked & RDMAX__BLK_BATCH)) {
        /* the entry's request (already chained, its sg_list set) gets this request's fields, after the
           short puts before it were counted and a full chain of them was posted (a refusal completes
           their comps with RDMAX_ERR_IO; this request goes into the next chain) */
        rdmax__chain_close(ctx, ep);
        if (rdmax_unlikely(ctx->batch_n == RDMAX_BATCH_MAX))
            (void)rdmax__post_chain(ep, 0);
        wr = &ctx->chain_entries[ctx->batch_n].wr;
        if (ctx->chain_dirty <= ctx->batch_n)
            ctx->chain_dirty = ctx->batch_n + 1;
    }
    wr->opcode = opcode;
    wr->send_flags = 0;
    return wr;
}

/* Contiguous send, put: inline when len <= max_inline and (mem NULL or comp NULL): the data is copied
   at the call, so the buffer is free when it returns; zero-copy from mem (or the rcache) otherwise.
   Returns RDMAX_INPROGRESS whenever comp is given, RDMAX_OK for inline data without a comp. The caller
   checked resources and set the remote fields. */
static rdmax_status rdmax__ep_contig(rdmax_ep *ep, struct ibv_send_wr *wr, rdmax_op op, const void *buf,
                                           size_t len, const rdmax_mem *mem, uint64_t raddr, rdmax_comp *comp)
{
    struct ibv_sge *sge = wr->sg_list;
    sge->addr = (uintptr_t)buf;
    sge->length = (uint32_t)len;
    wr->num_sge = len ? 1 : 0;
    if (len <= ep->max_inline && (mem == NULL || comp == NULL)) {
        wr->send_flags = IBV_SEND_INLINE;
        sge->lkey = 0;
        /* A chained request is posted later, but the buffer is promised free now: copy it. */
        if (ep->blocked & RDMAX__BLK_BATCH) {
            char *stage = ep->ctx->inl_stage + (size_t)ep->ctx->batch_n * ep->ctx->attr.max_inline;
            memcpy(stage, buf, len);
            sge->addr = (uintptr_t)stage;
        }
        /* The completion contract: given a comp, the operation reports through it, inline or not (the
           post is then signaled); without one, inline data is done at once. */
        rdmax_status ist = rdmax__ep_post(ep, wr, comp, op, (uint32_t)len, raddr, NULL);
        return ist == RDMAX_OK && comp != NULL ? RDMAX_INPROGRESS : ist;
    }
    struct rdmax_rcache_region *region = NULL;
    if (mem != NULL) {
        sge->lkey = mem->lkey;
    } else {
        rdmax_status rs = rdmax__rcache_lkey(ep->ctx, buf, len, RDMAX_ACCESS_LOCAL, &region);
        if (rdmax_unlikely(rs != RDMAX_OK))
            return rs;
        sge->lkey = region->lkey;
    }
    rdmax_status st = rdmax__ep_post(ep, wr, comp, op, (uint32_t)len, raddr, region);
    if (rdmax_unlikely(st != RDMAX_OK) && region)
        rdmax_rcache_release(ep->ctx->rcache, region);
    return st == RDMAX_OK ? RDMAX_INPROGRESS : st;
}

/* rdmax_send's general path. */
static __attribute__((noinline)) rdmax_status rdmax__g_send(rdmax_ep *ep, const void *buf, size_t len,
                                                             const rdmax_mem *mem, rdmax_comp *comp)
{
    rdmax_status st = rdmax__ep_check(ep);
    if (rdmax_unlikely(st != RDMAX_OK))
        return st;
    /* NULL data: the inline path would copy from it (one test covers both; peer_recv_size < 2^32). */
    if (rdmax_unlikely(len > ep->peer_recv_size || (buf == NULL && len != 0)))
        return buf == NULL && len != 0 ? RDMAX_ERR_INVALID_PARAM : RDMAX_ERR_SIZE;
    /* RC: never more sends in flight than the peer has receive buffers (no RNR in steady state); the
       last credit is kept for a grant. Credits we owe the peer ride along in the immediate data. */
    if (rdmax_unlikely(ep->tx_credits <= 1))
        return rdmax__ep_no_resource(ep, RDMAX_PROFILE_NORES_CREDITS);
    struct ibv_send_wr *wr = rdmax__ep_wr(ep, IBV_WR_SEND_WITH_IMM);
    wr->imm_data = RDMAX__LE32(ep->rx_unreturned);
#if RDMAX__HAS_UD
    wr->wr.ud.ah = ep->ah;  /* never NULL on a UD endpoint: creation fails without one */
    wr->wr.ud.remote_qpn = ep->ud_qpn;
    wr->wr.ud.remote_qkey = ep->ud_qkey;
#endif
    st = rdmax__ep_contig(ep, wr, RDMAX_OP_SEND, buf, len, mem, 0, comp);
#if RDMAX__HAS_UD
    if (ep->ah != NULL) {  /* UD has no credits: the device drops what finds no buffer */
        /* The immediate data is the peer endpoint's index (low 16 bits) and this datagram's number (high
           16, wrapping), so that the receiver sees loss: ud.skipped, ud.late, ud.duplicates. */
        ep->rx_unreturned += (uint32_t)(st >= 0) << 16;
        return st;
    }
#endif
    if (rdmax_likely(st >= 0)) {
        ep->tx_credits--;
        ep->rx_unreturned = 0;
    }
    return st;
}

#if RDMAX__HAS_RC
/* The checks of an operation only RC has (put, get, atomics): a UD endpoint is refused (its work request
   has no remote address: the provider would take the address handle from where it lies). That test is
   compiled only when both transports are; `read` (get, atomics) also needs the read budget. */
static rdmax_status rdmax__ep_check_rc(rdmax_ep *ep, int read)
{
#if RDMAX__HAS_UD
    if (rdmax_unlikely(ep->qp->qp_type != IBV_QPT_RC))
        return RDMAX_ERR_UNSUPPORTED;
#endif
    rdmax_status st = rdmax__ep_check(ep);
    if (rdmax_unlikely(st != RDMAX_OK))
        return st;
    if (read && rdmax_unlikely(ep->rd_avail == 0))
        return rdmax__ep_no_resource(ep, RDMAX_PROFILE_NORES_READS);
    return RDMAX_OK;
}

/* rdmax_put_imm's path (always out of line): the notice takes a receive buffer at the peer, so a send
   credit, as rdmax_send; the last one is kept for a grant. */
static rdmax_status rdmax__g_put_imm(rdmax_ep *ep, const void *buf, size_t len, const rdmax_mem *mem,
                                     uint64_t raddr, uint32_t rkey, uint32_t imm, rdmax_comp *comp)
{
    if (rdmax_unlikely(len > ep->ctx->attr.max_msg_sz || (buf == NULL && len != 0)))
        return buf == NULL && len != 0 ? RDMAX_ERR_INVALID_PARAM : RDMAX_ERR_SIZE;
    rdmax_status st = rdmax__ep_check_rc(ep, 0);
    if (rdmax_unlikely(st != RDMAX_OK))
        return st;
    if (rdmax_unlikely(ep->tx_credits <= 1))
        return rdmax__ep_no_resource(ep, RDMAX_PROFILE_NORES_CREDITS);
    struct ibv_send_wr *wr = rdmax__ep_wr(ep, IBV_WR_RDMA_WRITE_WITH_IMM);
    wr->imm_data = htonl(imm);
    wr->wr.rdma.remote_addr = raddr;
    wr->wr.rdma.rkey = rkey;
    st = rdmax__ep_contig(ep, wr, RDMAX_OP_PUT_IMM, buf, len, mem, raddr, comp);
    if (rdmax_likely(st >= 0))
        ep->tx_credits--;
    return st;
}

/* rdmax_put's general path. */
static __attribute__((noinline)) rdmax_status rdmax__g_put(rdmax_ep *ep, const void *buf, size_t len,
                                                            const rdmax_mem *mem, uint64_t raddr, uint32_t rkey,
                                                            rdmax_comp *comp)
{
    /* max_msg_sz <= UINT32_MAX (the context clamps it): the length fits the 32-bit SGE */
    if (rdmax_unlikely(len > ep->ctx->attr.max_msg_sz || (buf == NULL && len != 0)))
        return buf == NULL && len != 0 ? RDMAX_ERR_INVALID_PARAM : RDMAX_ERR_SIZE;
    rdmax_status st = rdmax__ep_check_rc(ep, 0);
    if (rdmax_unlikely(st != RDMAX_OK))
        return st;
    struct ibv_send_wr *wr = rdmax__ep_wr(ep, IBV_WR_RDMA_WRITE);
    wr->wr.rdma.remote_addr = raddr;
    wr->wr.rdma.rkey = rkey;
    return rdmax__ep_contig(ep, wr, RDMAX_OP_PUT, buf, len, mem, raddr, comp);
}

static rdmax_status rdmax__ep_iov(rdmax_ep *ep, enum ibv_wr_opcode opcode, rdmax_op op, const rdmax_iov *iov,
                                        size_t iovcnt, uint64_t raddr, uint32_t rkey, rdmax_comp *comp)
{
    if (rdmax_unlikely(iov == NULL || iovcnt == 0 || iovcnt > ep->ctx->attr.max_sge || iovcnt > RDMAX_MAX_SGE))
        return RDMAX_ERR_INVALID_PARAM;
    struct ibv_send_wr *wr = rdmax__ep_wr(ep, opcode);  /* filled, but posted only after the checks */
    uint64_t total = 0;
    int null_addr = 0;
    for (size_t i = 0; i < iovcnt; i++) {
        wr->sg_list[i].addr = (uintptr_t)iov[i].addr;
        wr->sg_list[i].length = iov[i].len;
        wr->sg_list[i].lkey = iov[i].lkey;
        total += iov[i].len;
        null_addr |= iov[i].addr == NULL && iov[i].len != 0;
    }
    if (rdmax_unlikely(null_addr || total > ep->ctx->attr.max_msg_sz || (opcode == IBV_WR_RDMA_READ && total == 0)))
        return null_addr ? RDMAX_ERR_INVALID_PARAM : RDMAX_ERR_SIZE;
    rdmax_status st = rdmax__ep_check_rc(ep, op == RDMAX_OP_GET);
    if (rdmax_unlikely(st != RDMAX_OK))
        return st;
    wr->num_sge = (int)iovcnt;
    wr->wr.rdma.remote_addr = raddr;
    wr->wr.rdma.rkey = rkey;
    st = rdmax__ep_post(ep, wr, comp, op, (uint32_t)total, raddr, NULL);
    if (st == RDMAX_OK && op == RDMAX_OP_GET)
        ep->rd_avail--;
    return st == RDMAX_OK ? RDMAX_INPROGRESS : st;
}

/* rdmax_get's general path. */
static __attribute__((noinline)) rdmax_status rdmax__g_get(rdmax_ep *ep, void *buf, size_t len, const rdmax_mem *mem,
                                                            uint64_t raddr, uint32_t rkey, rdmax_comp *comp)
{
    /* one test for len 0, len too long and a NULL buffer (len - 1 wraps for 0) */
    if (rdmax_unlikely(len - 1 >= ep->ctx->attr.max_msg_sz || buf == NULL)) {
#if RDMAX__HAS_UD
        if (ep->qp->qp_type != IBV_QPT_RC)
            return RDMAX_ERR_UNSUPPORTED;
#endif
        if (len == 0) {
            if (comp == NULL)
                return RDMAX_OK;
            rdmax_iov none;
            none.addr = buf;
            none.len = 0;
            none.lkey = 0;
            return rdmax__ep_iov(ep, IBV_WR_RDMA_WRITE, RDMAX_OP_GET, &none, 1, raddr, rkey, comp);
        }
        return buf == NULL ? RDMAX_ERR_INVALID_PARAM : RDMAX_ERR_SIZE;
    }
    rdmax_status st = rdmax__ep_check_rc(ep, 1);
    if (rdmax_unlikely(st != RDMAX_OK))
        return st;
    struct ibv_send_wr *wr = rdmax__ep_wr(ep, IBV_WR_RDMA_READ);
    struct ibv_sge *sge = wr->sg_list;
    struct rdmax_rcache_region *region = NULL;
    if (mem != NULL) {
        sge->lkey = mem->lkey;
    } else {
        st = rdmax__rcache_lkey(ep->ctx, buf, len, RDMAX__ACCESS_LOCAL_WRITE, &region);
        if (rdmax_unlikely(st != RDMAX_OK))
            return st;
        sge->lkey = region->lkey;
    }
    sge->addr = (uintptr_t)buf;
    sge->length = (uint32_t)len;
    wr->num_sge = 1;
    wr->wr.rdma.remote_addr = raddr;
    wr->wr.rdma.rkey = rkey;
    st = rdmax__ep_post(ep, wr, comp, RDMAX_OP_GET, (uint32_t)len, raddr, region);
    if (rdmax_likely(st == RDMAX_OK)) {
        ep->rd_avail--;
        return RDMAX_INPROGRESS;
    }
    if (region)
        rdmax_rcache_release(ep->ctx->rcache, region);
    return st;
}

static __attribute__((noinline)) rdmax_status rdmax__g_atomic(rdmax_ep *ep, enum ibv_wr_opcode opcode, rdmax_op op,
                                                               uint64_t *result, const rdmax_mem *mem, uint64_t raddr,
                                                               uint32_t rkey, uint64_t a, uint64_t b, rdmax_comp *comp)
{
    if (rdmax_unlikely(ep->ctx->attr.atomic_cap == IBV_ATOMIC_NONE))
        return RDMAX_ERR_UNSUPPORTED;  /* the device has none (the context's capability line said so) */
    if (rdmax_unlikely((raddr & 7) || mem == NULL || result == NULL))
        return result == NULL ? RDMAX_ERR_INVALID_PARAM : (raddr & 7) ? RDMAX_ERR_UNALIGNED : RDMAX_ERR_NO_MEMH;
    rdmax_status st = rdmax__ep_check_rc(ep, 1);
    if (rdmax_unlikely(st != RDMAX_OK))
        return st;
    struct ibv_send_wr *wr = rdmax__ep_wr(ep, opcode);
    wr->sg_list[0].addr = (uintptr_t)result;
    wr->sg_list[0].length = 8;
    wr->sg_list[0].lkey = mem->lkey;
    wr->num_sge = 1;
    wr->wr.atomic.remote_addr = raddr;
    wr->wr.atomic.rkey = rkey;
    wr->wr.atomic.compare_add = a;
    wr->wr.atomic.swap = b;
    st = rdmax__ep_post(ep, wr, comp, op, 8, raddr, NULL);
    if (st == RDMAX_OK)
        ep->rd_avail--;
    return st == RDMAX_OK ? RDMAX_INPROGRESS : st;
}

#endif /* RDMAX__HAS_RC */

/* The start of every slow path: the pending bit goes lazily (the first post after the queue drained
   comes here and opens the gate). */
static void rdmax__ep_unpend(rdmax_ep *ep)
{
    if (rdmax_unlikely((ep->blocked & RDMAX__BLK_PENDING) && ep->group.count == 0)) {
        ep->blocked &= (uint8_t)~RDMAX__BLK_PENDING;
        rdmax__ep_regate(ep);
    }
}

/* The fast gate stopped at the post that must be signaled (sig_at), with a free slot and nothing
   blocking: the slow path makes that post as the fast path would, signaled (rdmax__fast_post's sig).
   The general paths (rdmax__g_send, _put, _get, _atomic) are noinline: inlined, their stack frame was
   set up on every slow path, this post's too. */
static int rdmax__ep_at_sig(const rdmax_ep *ep)
{
    return ep->sq_head == ep->sig_at && !ep->blocked && ep->sq_head - ep->sq_tail <= ep->sq_last &&
           rdmax__ep_is_rc(ep);
}

/* rdmax_send's slow path: the post at sig_at (rdmax__send_fill, as rdmax_send's), else the general path. */
rdmax_status rdmax__send_slow(rdmax_ep *ep, const void *buf, size_t len, const rdmax_mem *mem, rdmax_comp *comp)
{
    rdmax__ep_unpend(ep);
    if (len - 1 < ep->send_inline && comp == NULL && buf != NULL && ep->tx_credits > 1 && rdmax__ep_at_sig(ep))
        return rdmax__send_fill(ep, buf, len, 1);
    return rdmax__g_send(ep, buf, len, mem, comp);
}

#if RDMAX__HAS_RC
/* rdmax_put's slow path: the post at sig_at (rdmax__put_fill, as rdmax_put's), else the general path. */
rdmax_status rdmax__put_slow(rdmax_ep *ep, const void *buf, size_t len, const rdmax_mem *mem, uint64_t raddr,
                             uint32_t rkey, rdmax_comp *comp)
{
    rdmax__ep_unpend(ep);
    if (len - 1 < ep->max_inline && comp == NULL && buf != NULL && rdmax__ep_at_sig(ep))
        return rdmax__put_fill(ep, buf, len, raddr, rkey, 1);
    return rdmax__g_put(ep, buf, len, mem, raddr, rkey, comp);
}

rdmax_status rdmax__put_imm_slow(rdmax_ep *ep, const void *buf, size_t len, const rdmax_mem *mem, uint64_t raddr,
                                 uint32_t rkey, uint32_t imm, rdmax_comp *comp)
{
    rdmax__ep_unpend(ep);
    return rdmax__g_put_imm(ep, buf, len, mem, raddr, rkey, imm, comp);
}

/* rdmax_get's slow path: the post at sig_at (rdmax__get_fill, as rdmax_get's), else the general path. */
rdmax_status rdmax__get_slow(rdmax_ep *ep, void *buf, size_t len, const rdmax_mem *mem, uint64_t raddr,
                             uint32_t rkey, rdmax_comp *comp)
{
    rdmax__ep_unpend(ep);
    if ((len - 1 < 4096u || len - 1 < ep->ctx->attr.max_msg_sz) && mem != NULL && comp == NULL && buf != NULL &&
        ep->rd_avail != 0 && rdmax__ep_at_sig(ep))
        return rdmax__get_fill(ep, buf, len, mem, raddr, rkey, 1);
    return rdmax__g_get(ep, buf, len, mem, raddr, rkey, comp);
}

/* rdmax_put_iov's and rdmax_get_iov's path (always out of line). */
rdmax_status rdmax__iov_slow(rdmax_ep *ep, rdmax_op op, const rdmax_iov *iov, size_t iovcnt, uint64_t raddr,
                             uint32_t rkey, rdmax_comp *comp)
{
    rdmax__ep_unpend(ep);
    enum ibv_wr_opcode opcode = op == RDMAX_OP_GET ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
    return rdmax__ep_iov(ep, opcode, op, iov, iovcnt, raddr, rkey, comp);
}

/* rdmax_fadd's and rdmax_cswap's slow path: the post at sig_at (rdmax__atomic_fill, as theirs), else
   the general path. */
rdmax_status rdmax__atomic_slow(rdmax_ep *ep, rdmax_op op, uint64_t *result, const rdmax_mem *mem, uint64_t raddr,
                                uint32_t rkey, uint64_t a, uint64_t b, rdmax_comp *comp)
{
    enum ibv_wr_opcode opcode = op == RDMAX_OP_FADD ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP;
    rdmax__ep_unpend(ep);
    if (!(raddr & 7) && mem != NULL && result != NULL && comp == NULL && ep->rd_avail != 0 && rdmax__ep_at_sig(ep))
        return rdmax__atomic_fill(ep, op, result, mem, raddr, rkey, a, b, 1);
    return rdmax__g_atomic(ep, opcode, op, result, mem, raddr, rkey, a, b, comp);
}
#endif /* RDMAX__HAS_RC */

/* The provider refused a fast-path post of len bytes: nothing moved but the CQ entry it took and its
   counts, both taken back here (sig_at moves only when a signaled post is accepted). An atomic on a
   device without atomics was refused before the provider saw it (rdmax__post_send_noatomic). */
__attribute__((noinline)) rdmax_status rdmax__post_refused(rdmax_ep *ep, int rc, uint32_t len)
{
    rdmax__slot *s = &ep->slots[ep->sq_head & ep->sq_mask];
    ep->ctx->scq_spare++;
    ep->ctx->cnt.posted[s->op]--;
    if (s->op != RDMAX_OP_FADD && s->op != RDMAX_OP_CSWAP)
        ep->ctx->cnt.bytes[s->op] -= len;
    s->signaled = 0;
    ep->last_errno = rc;
    return rc == EOPNOTSUPP && (s->op == RDMAX_OP_FADD || s->op == RDMAX_OP_CSWAP) ? RDMAX_ERR_UNSUPPORTED
                                                                                 : RDMAX_ERR_IO;
}

/* The post_send of an RC endpoint on a device without atomics (atomic_cap NONE), in place of the
   provider's: the fast atomic posts through it and is refused here, so the fast paths keep their
   instructions on every other device; the general path refuses atomics before (rdmax__g_atomic). */
static int rdmax__post_send_noatomic(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    for (struct ibv_send_wr *w = wr; w; w = w->next)
        if (w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD || w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
            *bad = w;
            return EOPNOTSUPP;
        }
    return qp->context->ops.post_send(qp, wr, bad);
}

/* ep's post_send: the provider's (what ibv_post_send calls, read once: one load less per post), or on
   an RC endpoint of a device without atomics the one that refuses them. */
static void rdmax__ep_post_fn(rdmax_ep *ep)
{
    ep->post_send = ep->qp->context->ops.post_send;
    if (ep->qp->qp_type == IBV_QPT_RC && ep->ctx->attr.atomic_cap == IBV_ATOMIC_NONE)
        ep->post_send = rdmax__post_send_noatomic;
}

/* The one fast post in signal_interval that is signaled, and every one while the send-CQ entries run
   low (rdmax__fast_post with the rest of it): it keeps its length and remote address for an error
   report. The fast gate does not ask for CQ entries: with none left the post is refused here as the
   general path refuses it (rdmax__ep_check: RDMAX_ERR_NO_RESOURCE, counted, the SQ_FULL event). */
rdmax_status rdmax__fast_post_signaled(rdmax_ep *ep, struct ibv_send_wr *wr, uint32_t len, uint64_t raddr)
{
    rdmax_ctx *ctx = ep->ctx;
    rdmax__slot *s = &ep->slots[ep->sq_head & ep->sq_mask];
    if (rdmax_unlikely(rdmax__scq_free(ctx) == UINT32_MAX)) {
        ctx->scq_spare++;  /* not posted: its CQ entry is taken back */
        return rdmax__ep_check(ep);
    }
    s->signaled = 1;
    s->len = len;
    s->raddr = raddr;
    ctx->cnt.posted[s->op]++;  /* as rdmax__fast_post: before the post */
    if (s->op != RDMAX_OP_FADD && s->op != RDMAX_OP_CSWAP)
        ctx->cnt.bytes[s->op] += len;
    unsigned flags = wr->send_flags;
    wr->send_flags = flags | IBV_SEND_SIGNALED;
    RDMAX__PROF_BEGIN(ctx, POST);
    int rc = ep->post_send(ep->qp, wr, &ep->post_bad);  /* ibv_post_send, as the fast post's */
    RDMAX__PROF_END(ctx, POST);
    wr->send_flags = flags;
    if (rdmax_unlikely(rc != 0))
        return rdmax__post_refused(ep, rc, len);
    ep->sig_at = rdmax__sig_next(ep, ep->sq_head);
    ep->sq_head++;
    rdmax__ep_regate(ep);
    if (s->op == RDMAX_OP_SEND) {  /* as rdmax__fast_post */
        ep->tx_credits--;
        ep->rx_unreturned = 0;
    }
    if (s->op == RDMAX_OP_GET || s->op == RDMAX_OP_FADD || s->op == RDMAX_OP_CSWAP) {
        ep->rd_avail--;
        return RDMAX_INPROGRESS;
    }
    return RDMAX_OK;
}

/* ---- >>batch: batching: the chain, the post list's room, rdmax_batch_begin/end ------------------- */

/* The post list's entries [from, to) set as rdmax__chain_entry says (chained, one SGE at inl, RDMA write, inline,
   unsignaled, chain_hi in the wr_id); chain_dirty (entries below it may have been changed by the general
   path) comes down to from. */
static void rdmax__chain_clean(rdmax_ctx *ctx, uint32_t from, uint32_t to)
{
    for (uint32_t i = from; i < to; i++) {
        rdmax__chain_entry *e = &ctx->chain_entries[i];
        e->wr.next = i + 1 < RDMAX_BATCH_MAX ? &ctx->chain_entries[i + 1].wr : NULL;
        e->wr.sg_list = e->sge;
        e->wr.num_sge = 1;
        e->wr.opcode = IBV_WR_RDMA_WRITE;
        e->wr.send_flags = IBV_SEND_INLINE;
        e->sge[0].addr = (uintptr_t)e->inl;
        e->sge[0].lkey = 0;
        memcpy((char *)&e->wr.wr_id + RDMAX__WR_ID_HI, &ctx->chain_hi, 4);
    }
    if (ctx->chain_dirty > from)
        ctx->chain_dirty = from;
}

/* Request e (a short put of ep's chain) is signaled: its flag, and its slot keeps what an error report
   needs (as rdmax__fast_post_signaled). Its flags are set back after the post (chain_sig, or by the
   caller: rdmax__batch_end). */
RDMAX_INLINE void rdmax__chain_sig_put(rdmax_ep *ep, rdmax__chain_entry *e)
{
    rdmax__slot *s = &ep->slots[(uint32_t)e->wr.wr_id & ep->sq_mask];
    e->wr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
    s->signaled = 1;
    s->len = e->sge[0].length;
    s->raddr = e->wr.wr.rdma.remote_addr;
}

/* rdmax__chain_sig_put, and chain_entries[i] noted in chain_sig. */
static void rdmax__chain_signal(rdmax_ctx *ctx, rdmax_ep *ep, uint32_t i)
{
    ctx->chain_sig[ctx->chain_nsig++] = i;
    rdmax__chain_sig_put(ep, &ctx->chain_entries[i]);
}

/* The short puts chained in the open room, chain_entries[chain_base .. next) (rdmax__put_chain_at writes only
   their data, length and remote fields): they take their send slots now, from sq_head on; each entry's
   wr_id gets its slot, each slot its op (rdmax__slot_op), eight at a time up to the queue's end, then
   from its start. Returns how many. */
RDMAX_INLINE uint32_t rdmax__room_settle(rdmax_ctx *ctx, rdmax_ep *ep, rdmax__chain_entry *next)
{
    rdmax__chain_entry *e = &ctx->chain_entries[ctx->chain_base];
    uint32_t k = (uint32_t)(next - e), head = ep->sq_head, slot = head & ep->sq_mask;
    uint32_t run = ep->sq_mask + 1 - slot;  /* the slots before the queue's end */
    rdmax__slot *sp = &ep->slots[slot];
    run = run < k ? run : k;
    for (uint32_t m = run;; m = k - run, slot = 0, sp = ep->slots) {
        rdmax__chain_entry *stop = e + (m & ~7u);
        for (; e != stop; e += 8, sp += 8, slot += 8) {  /* unrolled by hand: -O2 keeps a loop of 8 */
#define RDMAX__SETTLE_J(j)                                                                             \
    do {                                                                                               \
        uint32_t sj_ = slot + (j);                                                                     \
        memcpy((char *)&e[j].wr.wr_id + RDMAX__WR_ID_LO, &sj_, 4);                                     \
        rdmax__slot_op(&sp[j], RDMAX_OP_PUT);                                                          \
    } while (0)
            RDMAX__SETTLE_J(0); RDMAX__SETTLE_J(1); RDMAX__SETTLE_J(2); RDMAX__SETTLE_J(3);
            RDMAX__SETTLE_J(4); RDMAX__SETTLE_J(5); RDMAX__SETTLE_J(6); RDMAX__SETTLE_J(7);
#undef RDMAX__SETTLE_J
        }
        for (m &= 7; m > 0; m--, e++, sp++, slot++) {
            memcpy((char *)&e->wr.wr_id + RDMAX__WR_ID_LO, &slot, 4);
            rdmax__slot_op(sp, RDMAX_OP_PUT);
        }
        if (e == next)
            break;
    }
    ep->sq_head = head + k;
    return k;
}

/* Closes the room (if open): the short puts chained in it are counted in posted[] once, the CQ entries
   they did not use go back, and the ones that must be signaled are: one in signal_interval (from sig_at,
   which the chained puts left behind, as if each had been posted alone) and, as on the direct path,
   every one that found no more than scq_low CQ entries free (taken as the free entries when the room
   opened, minus the puts before it). Before anything else touches ep's chain, sq_head or sig_at: its
   post, the general path, destroy. The room is open (rdmax__chain_close tests that). */
RDMAX_INLINE void rdmax__chain_close_open(rdmax_ctx *ctx, rdmax_ep *ep)
{
    uint32_t base = ctx->chain_base, k = rdmax__room_settle(ctx, ep, ctx->chain_next), n = base + k;
    ctx->scq_spare += (int32_t)(ctx->chain_end - ctx->chain_next);
    ctx->chain_next = ctx->chain_end = NULL;
    ctx->batch_n = n;
    ctx->cnt.posted[RDMAX_OP_PUT] += k;
    uint32_t c0 = ctx->chain_cq_free_at_open, low = ctx->scq_low;
    uint32_t m = c0 > low ? c0 - low : 0;  /* the puts from m on found scq_low entries or fewer */
    m = m < k ? m : k;
    uint32_t head0 = ep->sq_head - k;  /* sq_head before the chain's puts, which left sig_at as it was */
    uint32_t i = ep->sig_at - head0;
    if (i < m) {
        do
            rdmax__chain_signal(ctx, ep, base + i);
        while ((i += ep->signal_interval) < m);
        uint32_t full = ep->sq_tail + ep->sq_last + 1;
        ep->sig_at = full - head0 < i ? full : head0 + i;  /* as rdmax__sig_next */
    }  /* else sig_at stays: never beyond the queue's end (sq_tail + sq_depth), which only grows */
    for (uint32_t j = m; j < k; j++) {
        rdmax__chain_signal(ctx, ep, base + j);
        ep->sig_at = rdmax__sig_next(ep, head0 + j);
    }
    rdmax__ep_regate(ep);
}

static void rdmax__chain_close(rdmax_ctx *ctx, rdmax_ep *ep)
{
    if (ctx->chain_end != NULL)
        rdmax__chain_close_open(ctx, ep);
}

/* After the chain was posted (or dropped): the entries' set fields back (rdmax__chain_entry). */
static void rdmax__chain_reset(rdmax_ctx *ctx)
{
    for (uint32_t k = 0; k < ctx->chain_nsig; k++)
        ctx->chain_entries[ctx->chain_sig[k]].wr.send_flags = IBV_SEND_INLINE;
    ctx->chain_nsig = 0;
    if (ctx->chain_dirty)
        rdmax__chain_clean(ctx, 0, ctx->chain_dirty);
}

#if RDMAX__HAS_RC
/* The room of a post list for short puts (rdmax__put_chain): entries chain_entries[chain_base .. chain_end)
   of ep's chain, within RDMAX_BATCH_MAX, the send slots short of the last one (the general path posts
   that one, signaled) and the CQ entries short of the last one. Those CQ entries are taken from
   the free ones now, so a post elsewhere meanwhile cannot spend them, and what is not used goes back when
   the room closes (rdmax__chain_close). Also sets the entries of the room that the general path changed.
   Returns 0 when there is no room. */
/* The room's opening once its size is known: entries chain_entries[n .. n + room), the CQ entries taken (free:
   the free ones now, chain_cq_free_at_open). Returns its first entry, where the caller puts chain_next. */
RDMAX_INLINE rdmax__chain_entry *rdmax__room_take(rdmax_ctx *ctx, uint32_t n, uint32_t room, uint32_t free)
{
    rdmax__chain_entry *e = &ctx->chain_entries[n];
    ctx->chain_cq_free_at_open = free;
    ctx->scq_spare -= (int32_t)room;
    ctx->chain_base = n;
    ctx->chain_end = e + room;
    return e;
}

static uint32_t rdmax__chain_open(rdmax_ctx *ctx, rdmax_ep *ep)
{
    uint32_t n = ctx->batch_n, used = ep->sq_head - ep->sq_tail;
    uint32_t room = RDMAX_BATCH_MAX - n;
    uint32_t sq = used < ep->sq_last ? ep->sq_last - used : 0;
    uint32_t free = rdmax__scq_free(ctx), cq = free > 1 ? free - 1 : 0;
    room = room < sq ? room : sq;
    room = room < cq ? room : cq;
    if (room == 0)
        return 0;
    uint32_t hi = (uint32_t)(ep->wr_id_base >> 32);
    if (ctx->chain_hi != hi) {  /* another endpoint chains: its name in every entry's wr_id */
        ctx->chain_hi = hi;
        for (uint32_t i = 0; i < RDMAX_BATCH_MAX; i++)
            memcpy((char *)&ctx->chain_entries[i].wr.wr_id + RDMAX__WR_ID_HI, &hi, 4);
    }
    if (n < ctx->chain_dirty)
        rdmax__chain_clean(ctx, n, ctx->chain_dirty);
    ctx->chain_next = rdmax__room_take(ctx, n, room, free);
    return room;
}

/* rdmax__put_chained's general case: close the room if open, post a full chain, then open the room
   again (rdmax__chain_open) and chain the put; without room (send queue or CQ entries short) or for
   other lengths the general path takes it, and chains it too. */
static __attribute__((noinline)) rdmax_status rdmax__put_chained_slow(rdmax_ep *ep, const void *buf, uint64_t raddr,
                                                                      uint32_t rkey, size_t len)
{
    rdmax_ctx *ctx = ep->ctx;
    /* the room opens only with max_inline >= 16: rdmax_put then chains a short put without testing
       its length against max_inline */
    if (rdmax_likely(len - 8 <= 8 && ep->blocked == RDMAX__BLK_BATCH && ep->max_inline >= 16 &&
                     rdmax__ep_is_rc(ep))) {
        rdmax__chain_close(ctx, ep);
        if (ctx->batch_n == RDMAX_BATCH_MAX) {
            /* a refusal completes the chain's comps with RDMAX_ERR_IO; this put is not posted */
            rdmax_status st = rdmax__post_chain(ep, 0);
            if (rdmax_unlikely(st != RDMAX_OK))
                return st;
        }
        if (rdmax__chain_open(ctx, ep))
            return rdmax__put_chain(ep, ctx, buf, len, raddr, rkey);
    }
    return rdmax__put_slow(ep, buf, len, NULL, raddr, rkey, NULL);
}

/* rdmax_put's chained put (rdmax__put_chain) found no room for a short put (never opened, used up, or
   full) or a put that is not 8 to 16 bytes. Here the first put of a batch: no room open and nothing to
   post, to clean or to rename (rdmax__chain_open's work, its opening rdmax__room_take, in a function
   that calls nothing, so it saves no registers), the put chained (rdmax__put_chain_at); anything else
   rdmax__put_chained_slow. */
__attribute__((noinline)) rdmax_status rdmax__put_chained(rdmax_ep *ep, const void *buf, uint64_t raddr,
                                                          uint32_t rkey, size_t len)
{
    rdmax_ctx *ctx = ep->ctx;
    uint32_t n = ctx->batch_n, head = ep->sq_head, used = head - ep->sq_tail;
    uint32_t free = rdmax__scq_free(ctx);
    uint32_t room = RDMAX_BATCH_MAX - n, sq = ep->sq_last - used, cq = free - 1;
    room = room < sq ? room : sq;
    room = room < cq ? room : cq;
    /* used < sq_last and free > 1 (so neither wraps), and room > 0: a room of at least one entry */
    if (rdmax_likely(ctx->chain_end == NULL && len - 8 <= 8 && ep->blocked == RDMAX__BLK_BATCH &&
                     ep->max_inline >= 16 && rdmax__ep_is_rc(ep) &&
                     used < ep->sq_last && free > 1 && n < RDMAX_BATCH_MAX && n >= ctx->chain_dirty &&
                     ctx->chain_hi == (uint32_t)(ep->wr_id_base >> 32))) {
        rdmax__chain_entry *e = rdmax__room_take(ctx, n, room, free);
        return rdmax__put_chain_at(ctx, e, buf, len, raddr, rkey);
    }
    return rdmax__put_chained_slow(ep, buf, raddr, rkey, len);
}

/* The puts of a list go straight into the chain's room (rdmax__chain_entry_put) while it has room and they are
   short: the bytes counted once per run (sq_head and the slots at the room's close, rdmax__room_settle).
   The rest, and a room to open, go through rdmax_put as it would take them. */
rdmax_status rdmax_put_list(rdmax_ep *ep, const rdmax_put_req *reqs, size_t n, size_t *done)
{
    rdmax_ctx *ctx = ep->ctx;
    size_t i = 0;
    if (rdmax_unlikely(reqs == NULL && n != 0)) {
        if (done)
            *done = 0;
        return RDMAX_ERR_INVALID_PARAM;
    }
    int own = !(ep->blocked & RDMAX__BLK_BATCH);
    if (own)
        rdmax_batch_begin(ep);
    rdmax_status st = RDMAX_OK, any = RDMAX_OK;
    while (i < n) {
        rdmax__chain_entry *e = ctx->chain_next;
        /* an open room is ep's (the chain is closed before anything else touches ep, and it opens only
           with max_inline >= 16, so every short put goes inline, as rdmax_put's would) */
        if (e != ctx->chain_end && ep->blocked == RDMAX__BLK_BATCH) {
            uint32_t room = (uint32_t)(ctx->chain_end - e);
            uint32_t m = n - i < room ? (uint32_t)(n - i) : room, j = 0;
            uint64_t bytes = 0;
            const rdmax_put_req *r = reqs + i;
            for (; j < m; j++, r++, e++) {  /* as rdmax__put_chain_at: slots at the close */
                size_t len = r->len;
                const void *buf = r->buf;
                if (rdmax_unlikely(len - 8 > 8 || buf == NULL))
                    break;
                rdmax__chain_entry_put(e, buf, len, r->raddr, r->rkey);
                bytes += len;
            }
            ctx->chain_next = e;
            ctx->cnt.bytes[RDMAX_OP_PUT] += bytes;
            i += j;
            if (j == m)
                continue;
        }
        const rdmax_put_req *r = &reqs[i];
        st = rdmax_put(ep, r->buf, r->len, NULL, r->raddr, r->rkey, NULL);
        if (st < 0)
            break;
        if (st == RDMAX_INPROGRESS)  /* not inline */
            any = st;
        i++;
    }
    if (own) {
        rdmax_status se = rdmax_batch_end(ep);
        if (st >= 0 && se < 0)
            st = se;
    }
    if (done)
        *done = i;
    return st < 0 ? st : any;
}
#endif

/* The chain's post was refused (rc): the requests from bad on are taken back (rdmax__chain_post). */
static __attribute__((noinline)) rdmax_status rdmax__chain_refused(rdmax_ep *ep, int rc, struct ibv_send_wr *bad,
                                                                   uint32_t n, int last_is_callers)
{
    rdmax_ctx *ctx = ep->ctx;
    {
        /* Take back the requests that were not posted (from `bad` on), newest first. */
        uint32_t first_bad = (uint32_t)(bad ? (const rdmax__chain_entry *)(const void *)bad - ctx->chain_entries : 0);
        /* The ones before `bad` count as posted only if the QP can run or flush them. rxe queues requests
           in its ring before the doorbell that finds the QP in RESET, INIT or RTR: those neither run nor
           complete, so kept they would hold their slots, comps and region references until the endpoint
           is destroyed (and on a later failure the ring, full of them, puts `bad` mid-chain). Only this
           process moves a QP to those states, and libibverbs keeps qp->state as the last modify left it:
           a QP it calls RTS is in RTS or an error state, where the requests run or are flushed, so no
           query (a system call) is made for it. */
        if (first_bad > 0 && ep->qp->state != IBV_QPS_RTS) {  /* state: as our last modify left it */
            struct ibv_qp_attr qa;
            struct ibv_qp_init_attr qi;
            if (ibv_query_qp(ep->qp, &qa, IBV_QP_STATE, &qi) == 0 &&
                (qa.qp_state == IBV_QPS_RESET || qa.qp_state == IBV_QPS_INIT || qa.qp_state == IBV_QPS_RTR))
                first_bad = 0;
        }
        for (uint32_t i = n; i > first_bad; i--) {
            rdmax__slot *s = &ep->slots[(ep->sq_head - 1) & ep->sq_mask];
            /* The request whose post filled the chain is undone by its caller, which returns the error;
               the others were accepted earlier, so their completions report it. */
            int callers = last_is_callers && i == n;
            ep->sq_head--;
            ep->ctx->scq_spare++;
            ep->ctx->cnt.posted[s->op]--;
            ep->ctx->cnt.post_calls++;  /* not posted after all (see above) */
            /* its length from its SGEs: a chained put keeps s->len only when signaled */
            const struct ibv_send_wr *w = &ctx->chain_entries[i - 1].wr;
            for (int k = 0; k < w->num_sge; k++)
                ep->ctx->cnt.bytes[s->op] -= w->sg_list[k].length;
            if (!callers && (s->op == RDMAX_OP_GET || s->op == RDMAX_OP_FADD || s->op == RDMAX_OP_CSWAP))
                ep->rd_avail++;
            /* An RC send gets its send credit back, and the receive credits its immediate data carried
               to the peer are owed again (else the peer's credits shrink for good). A put with immediate
               data gets its credit back; its immediate is the user's. UD counts none. */
            if (!callers && (s->op == RDMAX_OP_SEND || s->op == RDMAX_OP_GRANT) && ep->qp->qp_type == IBV_QPT_RC) {
                ep->tx_credits++;
                ep->rx_unreturned += RDMAX__LE32(ctx->chain_entries[i - 1].wr.imm_data) & RDMAX__IMM_CREDITS;
            }
            if (!callers && s->op == RDMAX_OP_PUT_IMM)
                ep->tx_credits++;
            if (s->region && !callers)
                rdmax_rcache_release(ep->ctx->rcache, s->region);
            ep->sq_regions -= s->region != NULL;
            s->region = NULL;
            s->signaled = 0;
            ep->ctx->comps_out -= s->comp != NULL;
            if (s->comp && !callers)
                rdmax__complete(s->comp, RDMAX_ERR_IO);
            s->comp = NULL;
        }
        ep->last_errno = rc;
        rdmax__ep_regate(ep);
        rdmax__chain_reset(ctx);
        return RDMAX_ERR_IO;
    }
}

/* The post of chain_entries[0 .. n), at least one (end: &chain_entries[n]): the last request ends the list for the
   provider, and the staging is chained again after it (rdmax__chain_entry). Returns ibv_post_send's result. */
RDMAX_INLINE int rdmax__chain_send(rdmax_ep *ep, rdmax_ctx *ctx, rdmax__chain_entry *end, uint32_t n,
                                   struct ibv_send_wr **bad)
{
    end[-1].wr.next = NULL;
    RDMAX__PROF_BEGIN(ctx, POST);
    int rc = ep->post_send(ep->qp, &ctx->chain_entries[0].wr, bad);  /* ibv_post_send */
    RDMAX__PROF_END(ep->ctx, POST);
#if RDMAX_BATCH_MAX > 1  /* (a chain of one has nothing to join) */
    if (n < RDMAX_BATCH_MAX)
        end[-1].wr.next = &end->wr;  /* the staging stays chained */
#else
    (void)n;
#endif
    return rc;
}

/* Posts the chain, its room closed: chain_entries[0 .. batch_n), at least one. */
RDMAX_INLINE rdmax_status rdmax__chain_post(rdmax_ep *ep, rdmax_ctx *ctx, int last_is_callers)
{
    struct ibv_send_wr *bad = NULL;
    uint32_t n = ctx->batch_n;
    ctx->batch_n = 0;
    ctx->cnt.post_calls += 1 - (uint64_t)n;  /* one call for n requests in posted[] */
    int rc = rdmax__chain_send(ep, ctx, &ctx->chain_entries[n], n, &bad);
    if (rdmax_unlikely(rc != 0))
        return rdmax__chain_refused(ep, rc, bad, n, last_is_callers);
    if (ctx->chain_nsig | ctx->chain_dirty)
        rdmax__chain_reset(ctx);
    return RDMAX_OK;
}

rdmax_status rdmax__post_chain(rdmax_ep *ep, int last_is_callers)
{
    rdmax_ctx *ctx = ep->ctx;
    rdmax__chain_close(ctx, ep);
    return rdmax__chain_post(ep, ctx, last_is_callers);
}

/* rdmax_batch_begin's work: ep chains (the previous endpoint's chain posted first), and when ep may
   chain short puts (rdmax__put_chained_slow's test, but for the length) their room opens now
   (rdmax__chain_open), so the batch's first put goes inline as the others do. */
void rdmax__batch_begin(rdmax_ep *ep)
{
    rdmax_ctx *ctx = ep->ctx;
    if (rdmax_unlikely(ctx->batch_ep != NULL && ctx->batch_ep != ep))
        rdmax_batch_end(ctx->batch_ep);
    ctx->batch_ep = ep;
    ep->blocked |= RDMAX__BLK_BATCH;
    ep->fast_gate = ep->sq_head;
#if RDMAX__HAS_RC
    if (rdmax_likely(ep->blocked == RDMAX__BLK_BATCH && ep->max_inline >= 16 && rdmax__ep_is_rc(ep) &&
                     ctx->chain_end == NULL))
        (void)rdmax__chain_open(ctx, ep);
#endif
}

/* rdmax_batch_end's work (it saw RDMAX__BLK_BATCH): the room's close and the post in one function. */
rdmax_status rdmax__batch_end(rdmax_ep *ep)
{
    rdmax_ctx *ctx = ep->ctx;
    ep->blocked &= (uint8_t)~RDMAX__BLK_BATCH;
    ctx->batch_ep = NULL;
    rdmax__chain_entry *e = ctx->chain_next;
    if (rdmax_likely(e != NULL && ctx->chain_base == 0)) {
        /* The chain is one room of short puts, at least one (n - 1 < ...; so no entry is dirty and none
           signaled yet), and its close signals at most the one put at sig_at (none found scq_low CQ
           entries or fewer): as rdmax__chain_close_open and rdmax__chain_post do, with that put's flag
           set back right after the post. */
        uint32_t n = (uint32_t)(e - ctx->chain_entries), head0 = ep->sq_head, i = ep->sig_at - head0;
        uint32_t c0 = ctx->chain_cq_free_at_open, low = ctx->scq_low;
        if (rdmax_likely(c0 > low && n - 1 < c0 - low && (i >= n || i + ep->signal_interval >= n))) {
            rdmax__room_settle(ctx, ep, e);  /* sq_head: head0 + n */
            ctx->scq_spare += (int32_t)(ctx->chain_end - e);
            ctx->chain_next = ctx->chain_end = NULL;
            ctx->cnt.posted[RDMAX_OP_PUT] += n;
            ctx->cnt.post_calls += 1 - (uint64_t)n;  /* one call for n requests in posted[] */
            rdmax__chain_entry *sig = NULL;
            if (i < n) {
                sig = &ctx->chain_entries[i];
                rdmax__chain_sig_put(ep, sig);
                ep->sig_at = rdmax__sig_from(ep, head0, i + ep->signal_interval);
            }
            rdmax__ep_regate(ep);
            struct ibv_send_wr *bad = NULL;
            int rc = rdmax__chain_send(ep, ctx, e, n, &bad);
            if (sig)
                sig->wr.send_flags = IBV_SEND_INLINE;
            if (rdmax_unlikely(rc != 0))
                return rdmax__chain_refused(ep, rc, bad, n, 0);  /* batch_n is 0 */
            return RDMAX_OK;
        }
    }
    if (rdmax_likely(ctx->chain_end != NULL))
        rdmax__chain_close_open(ctx, ep);  /* regates */
    else
        rdmax__ep_regate(ep);
    if (ctx->batch_n == 0)  /* nothing chained (the room opened at rdmax_batch_begin may be empty) */
        return RDMAX_OK;
    return rdmax__chain_post(ep, ctx, 0);
}

/* ---- >>sendcq: send completions: retirement, error completions, an endpoint's failure ------------ */

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
        ctx->scq_spare++;
        ctx->cnt.completed[s->op]++;
        if (s->op == RDMAX_OP_GET || s->op == RDMAX_OP_FADD || s->op == RDMAX_OP_CSWAP)
            ep->rd_avail++;
        rdmax_comp *c = s->comp;
        s->comp = NULL;
        ctx->comps_out -= c != NULL;
        if (s->region) {
            rdmax_rcache_release(ctx->rcache, s->region);
            s->region = NULL;
            ep->sq_regions--;
        }
        if (c)
            rdmax__complete(c, st);
        if (slot == upto)
            break;
    }
    /* Room again: requests waiting on this endpoint get their turn in the next dispatch. */
    if (ep->group.count)
        rdmax__arb_group_schedule(&ctx->arb, &ep->group);
    rdmax__ep_regate(ep);
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

/* How long an RC request may go unanswered before the device itself gives up: ack timeout
   (4.096 us << timeout) times (retry_cnt + 1). */
static int64_t rdmax__retry_ms(const rdmax_ep *ep)
{
    return (int64_t)((4096ull << ep->desc.timeout) * (ep->desc.retry_cnt + 1u) / 1000000u) + 1;
}

/* ep's QP to the error state: the device flushes what is in flight and the peer reaches nothing more. */
static void rdmax__qp_to_error(rdmax_ep *ep)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_ERR;
    ep->ctx->modify_qp(ep->qp, &a, IBV_QP_STATE);
}

/* Moves ep to RDMAX_EP_ERROR (once) with `err` and a reason, logs it once with the endpoint, the peer
   (out-of-band address and RoCE GID/QPN) and, when the port is down, says that the link is. With
   `kill_qp` the QP goes to the error state too, so the device flushes what is still in flight and every
   outstanding operation completes once, with an error. */
static void rdmax__ep_fail_why(rdmax_ep *ep, rdmax_status err, int wc_status, int kill_qp, const char *fmt, ...)
{
    rdmax_ctx *ctx = ep->ctx;
    if (ep->state == RDMAX_EP_ERROR || ep->state == RDMAX_EP_CLOSED)
        return;
    ep->state = RDMAX_EP_ERROR;
    ctx->state_news |= ep->desc.state_cb != NULL;
    rdmax__ep_block(ep, RDMAX__BLK_STATE);
    ep->err = (int16_t)err;
    ep->last_wc_status = wc_status;
    if (kill_qp && ep->qp)
        rdmax__qp_to_error(ep);
    if (ep->group.count)  /* waiting requests now fail with RDMAX_ERR_ENDPOINT, in order */
        rdmax__arb_group_schedule(&ctx->arb, &ep->group);
    ctx->cnt.ep_errors++;
    RDMAX__PROFILE_EVENT(ctx, RDMAX_PROFILE_EVENT_EP_ERROR, ep, (uint64_t)wc_status);
    char why[256], link[96] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    struct ibv_port_attr pa;
    if (ep->qp && ep->qp->qp_type == IBV_QPT_RC && ibv_query_port(ctx->verbs, ctx->attr.port, &pa) == 0 &&
        pa.state != IBV_PORT_ACTIVE)
        snprintf(link, sizeof link, "; the link is down (port %u is %s)", ctx->attr.port,
                 ibv_port_state_str(pa.state));
    char gid[INET6_ADDRSTRLEN] = "?";
    inet_ntop(AF_INET6, ep->peer_gid, gid, sizeof gid);
    rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_EP_FAILED,
               "device %s port %u, endpoint qpn 0x%x, peer %s (gid %s qpn 0x%x): %s%s",
               ctx->attr.name, ctx->attr.port, ep->qp ? ep->qp->qp_num : 0, ep->peer, gid, ep->peer_qpn, why,
               link);
}

/* The first error completion of an endpoint fails it; the flushed ones after it are only counted. */
static void rdmax__ep_fail(rdmax_ep *ep, const struct ibv_wc *wc, const rdmax__slot *s)
{
    /* The fast path keeps the length and the remote address of signaled requests only. */
    if (s && !s->signaled)
        rdmax__ep_fail_why(ep, rdmax__wc_status(wc->status), wc->status, 0,
                           "%s (unsignaled: its length and remote address are not kept) failed: %s (wc status %d, "
                           "vendor error 0x%x)", rdmax_op_str((rdmax_op)s->op), ibv_wc_status_str(wc->status),
                           wc->status, wc->vendor_err);
    else
        rdmax__ep_fail_why(ep, rdmax__wc_status(wc->status), wc->status, 0,
                           "%s of %u bytes to remote address 0x%llx failed: %s (wc status %d, vendor error 0x%x)",
                           s ? rdmax_op_str((rdmax_op)s->op) : "receive", s ? s->len : 0,
                           s ? (unsigned long long)s->raddr : 0ull, ibv_wc_status_str(wc->status), wc->status,
                           wc->vendor_err);
}

/* A flushed completion on an endpoint that has not failed: its QP went to the error state without an
   error completion of its own (an asynchronous QP error, the responder side of an error the peer caused,
   or a state change behind rdmax's back). The endpoint fails after both CQs are drained, so that a real
   error completion queued behind the flushed one names the cause instead. */
static void rdmax__ep_flush_seen(rdmax_ep *ep)
{
    if (ep->state == RDMAX_EP_CONNECTED) {
        ep->flush_seen = 1;
        ep->ctx->flush_check = 1;
    }
}

static void rdmax__flush_check(rdmax_ctx *ctx)
{
    if (ctx->in_flush_check || RDMAX__SCQ_NESTED(ctx))  /* in a comp callback: when the send batch ends */
        return;
    ctx->in_flush_check = 1;
    for (int i = 0; i < 64; i++)
        if (rdmax__poll_send(ctx) + rdmax__poll_recv(ctx) == 0)
            break;
    ctx->flush_check = 0;
    for (uint32_t i = 0; i < ctx->eps_cap; i++) {
        rdmax_ep *ep = ctx->eps[i].ep;
        if (ep && ep->flush_seen) {
            ep->flush_seen = 0;
            rdmax__ep_fail_why(ep, RDMAX_ERR_FLUSHED, IBV_WC_WR_FLUSH_ERR, 0,
                               "operations were flushed: the QP went to the error state without an error "
                               "completion of its own (an asynchronous QP error, the responder side of an "
                               "error the peer caused, or a state change outside rdmax)");
        }
    }
    ctx->in_flush_check = 0;
}

/* wr_id = generation << 48 | endpoint index << 32 | receive bit | slot. A completion whose endpoint
   slot is empty or reused (a stale or flushed completion of a destroyed endpoint) is counted and dropped,
   never dereferenced. */
static rdmax_ep *rdmax__wr_ep(rdmax_ctx *ctx, uint64_t wr_id)
{
    uint32_t idx = (uint32_t)(wr_id >> 32) & 0xffff;
    uint16_t gen = (uint16_t)(wr_id >> 48);
    if (rdmax_unlikely(idx >= ctx->eps_cap || ctx->eps[idx].ep == NULL || RDMAX__REF_GEN(&ctx->eps[idx]) != gen)) {
        ctx->cnt.stale_wr_ids++;
        return NULL;
    }
    return ctx->eps[idx].ep;
}

int rdmax__poll_send(rdmax_ctx *ctx)
{
    if (RDMAX__SCQ_NESTED(ctx))  /* called from a comp callback: see rdmax_ctx.comps_out */
        return 0;
    return rdmax__poll_send_fast(ctx);
}

/* A send completion that is not a plain success of a live endpoint's outstanding request. */
static void rdmax__send_cqe_other(rdmax_ctx *ctx, const struct ibv_wc *wc)
{
    rdmax_ep *ep = rdmax__wr_ep(ctx, wc->wr_id);
    if (!ep)
        return;
    uint32_t slot = (uint32_t)(wc->wr_id & RDMAX__WR_SEND_SLOT_MASK);
    uint32_t outstanding = ep->sq_head - ep->sq_tail;
    if (rdmax_unlikely(slot > ep->sq_mask || ((slot - ep->sq_tail) & ep->sq_mask) >= outstanding)) {
        ctx->cnt.stale_wr_ids++;
        return;
    }
    if (wc->status == IBV_WC_SUCCESS) {
        rdmax__ep_retire(ep, slot, RDMAX_OK);
        return;
    }
    if (wc->status == IBV_WC_WR_FLUSH_ERR) {
        ctx->cnt.flushed_cqes++;
        rdmax__ep_flush_seen(ep);
    } else {
        ctx->cnt.err_cqes++;
        rdmax__ep_fail(ep, wc, &ep->slots[slot]);
    }
    /* Requests before this one were covered by nothing else; with an error they may have failed too,
       so they complete with this status. */
    rdmax__ep_retire(ep, slot, wc->status == IBV_WC_WR_FLUSH_ERR ? RDMAX_ERR_FLUSHED : rdmax__wc_status(wc->status));
}

/* Reads and atomics: their retirement gives back read budget. rdmax_ctx.retire_step, by op, filled at
   creation: the fast retire's one add to rd_avail and sq_tail (rdmax__ep_retire_step). */
#define RDMAX__RD_OPS (1u << RDMAX_OP_GET | 1u << RDMAX_OP_FADD | 1u << RDMAX_OP_CSWAP)
static void rdmax__ctx_retire_step(rdmax_ctx *ctx)
{
    for (unsigned op = 0; op < RDMAX_OP__COUNT; op++)
        ctx->retire_step[op] = 1ull << 32 | ((RDMAX__RD_OPS >> op) & 1);
}

/* The unsignaled requests from tail up to (not including) last are done: their counters and regions.
   Returns how many of them were reads or atomics. Out of line: the single completion stays short. */
static __attribute__((noinline)) uint32_t rdmax__retire_unsignaled(rdmax_ctx *ctx, rdmax_ep *ep, uint32_t tail,
                                                                    uint32_t last)
{
    rdmax__slot *slots = ep->slots;
    uint32_t rd = 0, mask = ep->sq_mask;
    for (uint32_t t = tail; t != last; t++) {  /* unsignaled: no comp */
        rdmax__slot *s = &slots[t & mask];
        ctx->cnt.completed[s->op]++;
        rd += (RDMAX__RD_OPS >> s->op) & 1;
        if (rdmax_unlikely(s->region != NULL)) {
            rdmax_rcache_release(ctx->rcache, s->region);
            s->region = NULL;
            ep->sq_regions--;
        }
    }
    return rd;
}

/* The send completions wc[i .. n) of the batch in ctx->wc, and what follows a batch: another poll when a
   full batch came while fewer than half the send-CQ entries are free (with many endpoints posting
   between progress calls, 16 completions a call give entries back slower than the posts take them, and
   posts are refused for want of entries that sit completed in the CQ), then the flush check. A success
   of a live endpoint retires its slots from the tail up to the one it names in one pass, the endpoint
   looked up once. Only that slot is signaled (RC completes in order: the signaled ones before it had
   their own completions), so only it can hold a comp, which completes after queue, CQ entries and read
   budget have moved (its callback may post on the endpoint, or progress). Anything else goes to
   rdmax__send_cqe_other. A comp with a callback completes only here (RDMAX__WR_CB). dispatch: serve the
   pending queue at the end (rdmax__progress_cqes). Returns the completions of this and later batches,
   counted from wc[0]. */
static __attribute__((noinline)) int rdmax__send_cqes_slow(rdmax_ctx *ctx, int i, int n, int dispatch)
{
    int done = 0;
    ctx->comps_out += RDMAX__SCQ_NEST;
    for (;;) {
        for (; i < n; i++) {
            const struct ibv_wc *wc = &ctx->wc[i];
            uint64_t id = wc->wr_id;
            uint32_t idx = (uint32_t)(id >> 32) & 0xffff;
            rdmax__ep_ref *ref = &ctx->eps[idx];
            rdmax_ep *ep = idx < ctx->eps_cap ? ref->ep : NULL;
            if (rdmax_unlikely(wc->status != IBV_WC_SUCCESS || !ep || RDMAX__REF_GEN(ref) != (uint16_t)(id >> 48))) {
                rdmax__send_cqe_other(ctx, wc);
                continue;
            }
            uint32_t tail = ep->sq_tail, mask = ep->sq_mask, slot = (uint32_t)id & mask;
            uint32_t last = tail + ((slot - tail) & mask);
            if (rdmax_unlikely(last - tail >= ep->sq_head - tail)) {  /* not outstanding */
                rdmax__send_cqe_other(ctx, wc);
                continue;
            }
            uint32_t rd = last != tail ? rdmax__retire_unsignaled(ctx, ep, tail, last) : 0;
            rdmax__slot *s = &ep->slots[slot];
            ctx->cnt.completed[s->op]++;
            rd += (RDMAX__RD_OPS >> s->op) & 1;
            if (rdmax_unlikely(s->region != NULL)) {
                rdmax_rcache_release(ctx->rcache, s->region);
                s->region = NULL;
                ep->sq_regions--;
            }
            ep->sq_tail = last + 1;
            ep->rd_avail += rd;
            ctx->scq_spare += (int32_t)(last + 1 - tail);
            /* Room again: requests waiting on this endpoint get their turn in the next dispatch. */
            if (ep->group.count)
                rdmax__arb_group_schedule(&ctx->arb, &ep->group);
            rdmax__ep_regate(ep);
            rdmax_comp *c = s->comp;
            if (c) {
                s->comp = NULL;
                ctx->comps_out--;
                rdmax__complete(c, RDMAX_OK);
            }
        }
        done += n;
        if (rdmax_likely(n < 16 || ctx->scq_spare >= 0))
            break;
        RDMAX__PROF_BEGIN(ctx, POLL);
        n = ibv_poll_cq(ctx->scq, 16, ctx->wc);
        RDMAX__PROF_END(ctx, POLL);
        ctx->cnt.polls++;
        if (n <= 0) {
            ctx->cnt.empty_polls++;
            break;
        }
        ctx->cnt.cqes += (uint64_t)n;
        /* profile snapshots from another thread: posted[] stores before completed[] stores (nothing on
           x86, dmb ish on arm64) */
        __atomic_thread_fence(__ATOMIC_RELEASE);
        i = 0;
    }
    ctx->comps_out -= RDMAX__SCQ_NEST;
    if (rdmax_unlikely(ctx->flush_check))
        rdmax__flush_check(ctx);
    if (dispatch && !rdmax__arb_is_empty(&ctx->arb))
        rdmax__dispatch(ctx);
    return done;
}

/* The common send completion - a success of a live endpoint that names the endpoint's oldest
   outstanding slot (no unsignaled requests before it), with no cached registration to release and no
   pending requests to schedule - retires here, calling nothing, so its callers need no stack frame; a
   comp without a callback completes here too (one with a callback was posted with RDMAX__WR_CB in its
   wr_id, which the slot compare sends to the slow path). Returns nonzero (RDMAX__CQE_SLOW) when wc is
   anything else: nothing changed, rdmax__send_cqes_first or rdmax__send_cqes_slow handles it. No user
   code runs here, so the nesting flag (RDMAX__SCQ_NEST) stays clear: the slow path sets it before it can.
   Nor is a flushed completion handled here, so no flush check is owed: flush_check is set
   (rdmax__ep_flush_seen) only where one follows - at the end of the slow path, of rdmax__recv_cqes, of
   the tick - or, when that one is skipped for the nesting flag or in_flush_check, at the end of the
   slow path or inside rdmax__flush_check's own pass. */
/* A send completion's wr_id's high half (generation << 16 | endpoint index), and its status above it: an
   rdmax__ep_ref's key where the completion succeeded. Little-endian: the 8 bytes after the wr_id's low
   half, one load. */
RDMAX_STATIC_ASSERT(offsetof(struct ibv_wc, status) == 8 && sizeof(((struct ibv_wc *)0)->status) == 4,
                    "rdmax: rdmax__wc_key reads struct ibv_wc's status after wr_id");
RDMAX_INLINE uint64_t rdmax__wc_key(const struct ibv_wc *wc)
{
#if RDMAX__WR_ID_HI == 4
    uint64_t k;
    memcpy(&k, (const char *)wc + 4, 8);
    return k;
#else
    return wc->wr_id >> 32 | (uint64_t)(uint32_t)wc->status << 32;
#endif
}
/* An endpoint's state, blocked and sq_regions as one word: RDMAX__EP_RETIRE_OK when it is connected, not
   blocked and no slot holds a region. */
RDMAX_STATIC_ASSERT(offsetof(rdmax_ep, blocked) == offsetof(rdmax_ep, state) + 1 &&
                    offsetof(rdmax_ep, sq_regions) == offsetof(rdmax_ep, state) + 2 &&
                    offsetof(rdmax_ep, state) % 4 == 0 && sizeof(((rdmax_ep *)0)->sq_regions) == 2,
                    "rdmax: rdmax__ep_retire_word reads state, blocked and sq_regions as one word");
#if RDMAX__WR_ID_HI == 4 /* little-endian */
#define RDMAX__EP_RETIRE_OK ((uint32_t)RDMAX_EP_CONNECTED)
#else
#define RDMAX__EP_RETIRE_OK ((uint32_t)RDMAX_EP_CONNECTED << 24)
#endif
RDMAX_INLINE uint32_t rdmax__ep_retire_word(const rdmax_ep *ep)
{
    uint32_t w;
    memcpy(&w, &ep->state, 4);
    return w;
}
/* The compiler forgets what it knows of x, at no instruction: two tables in the context indexed by the
   same x are then each addressed with x scaled (GCC would otherwise form their shared base with an lea,
   one instruction more). */
#if defined(__GNUC__) || defined(__clang__)
#define RDMAX__OPAQUE(x) __asm__("" : "+r"(x))
#else
#define RDMAX__OPAQUE(x) ((void)0)
#endif
/* sq_tail one on and rd_avail the op's read budget back (step: rdmax_ctx.retire_step) in one add: little-
   endian, rd_avail is the low half of the word it makes with sq_tail, and never carries into it (it is
   at most max_rd_atomic); sq_tail's carry leaves the word. */
RDMAX_STATIC_ASSERT(offsetof(rdmax_ep, sq_tail) == offsetof(rdmax_ep, rd_avail) + 4 &&
                    offsetof(rdmax_ep, rd_avail) % 8 == 0,
                    "rdmax: rdmax__ep_retire_step adds to rd_avail and sq_tail as one word");
RDMAX_INLINE void rdmax__ep_retire_step(rdmax_ep *ep, uint64_t step)
{
#if RDMAX__WR_ID_HI == 4 /* little-endian */
    uint64_t w;
    memcpy(&w, &ep->rd_avail, 8);
    w += step;
    memcpy(&ep->rd_avail, &w, 8);
#else
    ep->sq_tail++;
    ep->rd_avail += (uint32_t)step;
#endif
}
#define RDMAX__CQE_DONE 0
#define RDMAX__CQE_SLOW 1
RDMAX_INLINE int rdmax__send_cqe_fast(rdmax_ctx *ctx, const struct ibv_wc *wc)
{
    uint64_t key = rdmax__wc_key(wc);
    rdmax__ep_ref *ref = &ctx->eps[(uint32_t)key & ctx->eps_mask];
    if (rdmax_unlikely(key != ref->key))  /* failed, free, or another generation */
        return RDMAX__CQE_SLOW;
    rdmax_ep *ep = ref->ep;
    uint32_t tail = ep->sq_tail;
    /* outstanding; the oldest slot (the low half of a wr_id is its slot; RDMAX__WR_CB set: no); the
       endpoint connected, not blocked, so no requests pending to schedule (they set RDMAX__BLK_PENDING,
       which stays while any wait), and with no region to release in any slot. Outstanding first: tail
       is then dead once masked (no copy) */
    if (rdmax_unlikely(tail == ep->sq_head))
        return RDMAX__CQE_SLOW;
    uint32_t slot = tail & ep->sq_mask;
    if (rdmax_unlikely((uint32_t)wc->wr_id != slot || rdmax__ep_retire_word(ep) != RDMAX__EP_RETIRE_OK))
        return RDMAX__CQE_SLOW;
    rdmax__slot *s = &ep->slots[slot];
    size_t op = s->op;
    ctx->cnt.completed[op]++;
    RDMAX__OPAQUE(op);
    rdmax__ep_retire_step(ep, ctx->retire_step[op]);  /* sq_tail = tail + 1, the read budget back */
    ctx->scq_spare++;  /* not blocked: the gate stays at sig_at (rdmax__ep_regate) */
    rdmax_comp *c = s->comp;
    if (c) {
        s->comp = NULL;
        ctx->comps_out--;  /* c->status is RDMAX_OK since the post (rdmax__comp_taken); no callback */
        c->done = 1;
    }
    return RDMAX__CQE_DONE;
}

/* wc[i .. n) of a batch whose first i completions rdmax__send_cqes_run retired; then what follows a
   batch (a full one may be followed by another poll: rdmax__send_cqes_slow). Frameless too. */
static __attribute__((noinline)) int rdmax__send_cqes_loop(rdmax_ctx *ctx, int i, int n, int dispatch)
{
    for (; i < n; i++)
        if (rdmax_unlikely(rdmax__send_cqe_fast(ctx, &ctx->wc[i]) != RDMAX__CQE_DONE))
            return rdmax__send_cqes_slow(ctx, i, n, dispatch);
    if (rdmax_unlikely(n == 16))
        return rdmax__send_cqes_slow(ctx, n, n, dispatch);
    if (dispatch && rdmax_unlikely(!rdmax__arb_is_empty(&ctx->arb)))
        return rdmax__dispatch_then(ctx, n);
    return n;
}

/* A batch whose first completion rdmax__send_cqe_fast did not take. The usual one ends a run of
   unsignaled fast posts: a success that names a later slot than the oldest, the requests before it done
   too. That one, on an endpoint the fast retire would take (connected, not blocked, no region held),
   retires the whole run here in one pass, calling nothing; the rest of the batch goes on in
   rdmax__send_cqes_loop, anything else to rdmax__send_cqes_slow. */
static __attribute__((noinline)) int rdmax__send_cqes_first(rdmax_ctx *ctx, uint64_t n, int dispatch)
{
    const struct ibv_wc *wc = &ctx->wc[0];
    uint64_t key = rdmax__wc_key(wc);
    rdmax__ep_ref *ref = &ctx->eps[(uint32_t)key & ctx->eps_mask];
    if (rdmax_unlikely(key != ref->key))  /* failed, free, or another generation */
        return rdmax__send_cqes_slow(ctx, 0, (int)n, dispatch);
    rdmax_ep *ep = ref->ep;
    uint32_t tail = ep->sq_tail, mask = ep->sq_mask, id = (uint32_t)wc->wr_id;
    uint32_t last = tail + ((id - tail) & mask);
    /* id a slot (RDMAX__WR_CB set: above every slot), outstanding */
    if (rdmax_unlikely(id > mask || last - tail >= ep->sq_head - tail ||
                       rdmax__ep_retire_word(ep) != RDMAX__EP_RETIRE_OK))
        return rdmax__send_cqes_slow(ctx, 0, (int)n, dispatch);
    uint64_t step = 0;  /* rdmax__ep_retire_step's, summed over the run */
    for (uint32_t t = tail;; t++) {
        size_t op = ep->slots[t & mask].op;
        ctx->cnt.completed[op]++;
        RDMAX__OPAQUE(op);
        step += ctx->retire_step[op];
        if (t == last)
            break;
    }
    rdmax__ep_retire_step(ep, step);
    ctx->scq_spare += (int32_t)(last + 1 - tail);
    rdmax__slot *s = &ep->slots[id];  /* only the signaled one can hold a comp, without a callback */
    rdmax_comp *c = s->comp;
    if (c) {
        s->comp = NULL;
        ctx->comps_out--;
        c->done = 1;
    }
    if (rdmax_unlikely(n > 1))
        return rdmax__send_cqes_loop(ctx, 1, (int)n, dispatch);
    if (dispatch && rdmax_unlikely(!rdmax__arb_is_empty(&ctx->arb)))
        return rdmax__dispatch_then(ctx, 1);
    return 1;
}

/* The n send completions in ctx->wc (rdmax__poll_send_fast polled them): the first here (a progress
   call that retires one completion goes no further), the rest in rdmax__send_cqes_loop, anything but
   the common completion in rdmax__send_cqes_first (the end of a run of unsignaled posts) or
   rdmax__send_cqes_slow (a comp's callback among the rest). dispatch: serve the pending queue after
   them. n (1 to 16) comes 64 bits wide: the count takes it as it is. */
RDMAX_INLINE int rdmax__send_cqes_run(rdmax_ctx *ctx, uint64_t n, int dispatch)
{
    ctx->cnt.cqes += n;
    /* profile snapshots from another thread: posted[] stores before completed[] stores (nothing on x86,
       dmb ish on arm64) */
    __atomic_thread_fence(__ATOMIC_RELEASE);
    if (rdmax_unlikely(rdmax__send_cqe_fast(ctx, &ctx->wc[0]) != RDMAX__CQE_DONE))
        return rdmax__send_cqes_first(ctx, n, dispatch);
    if (rdmax_unlikely(n > 1))
        return rdmax__send_cqes_loop(ctx, 1, (int)n, dispatch);
    if (dispatch && rdmax_unlikely(!rdmax__arb_is_empty(&ctx->arb)))
        return rdmax__dispatch_then(ctx, 1);
    return 1;
}

int rdmax__send_cqes(rdmax_ctx *ctx, uint64_t n)
{
    return rdmax__send_cqes_run(ctx, n, 0);
}

/* rdmax__progress_send's completions, which it tail-calls: rdmax__send_cqes, then the pending queue. */
int rdmax__progress_cqes(rdmax_ctx *ctx, uint64_t n)
{
    return rdmax__send_cqes_run(ctx, n, 1);
}

/* rdmax__progress_cqes of a batch of one (the count is a constant, no test for the rest of a batch). */
int rdmax__progress_one(rdmax_ctx *ctx)
{
    return rdmax__send_cqes_run(ctx, 1, 1);
}

/* ---- >>recv: the receive path and credits: receive completions, repost, grants ------------------- */
/* Flow control without RNR, by construction. An endpoint with window W (ep desc rq_depth) backs its peer
   with C = W + 1 buffers and gives it C credits (the connection record's credits field); the peer
   spends one per send or put with immediate data (each consumes a buffer of the pool) and gets it back
   in the immediate data of our next send, or in a grant. A consumed buffer is reposted (at the end of
   the poll batch that saw it) before its credit can go back, so for every endpoint
       peer's credits + its messages in flight + consumed and not yet reposted + owed = C,
   and each endpoint's queue holds its C (>>srq): its receive queue never runs dry, no sender meets
   RNR, and a receive CQ of the targets' sum (plus UD's own receives) cannot overflow. A peer past its
   window finds its own queue empty, never another's. Grants go from the receive
   path as soon as owed >= W/2 (ep->grant_at); a sender keeps its last credit for a grant (or its
   goodbye), so W of the C are the application's: a window of W allows W outstanding, and two peers out
   of credits can always hand each other credits back (a grant carries at least grant_at credits, so two
   grants that cross leave both sides with credits). The extra buffer is why the grant needs no credit
   of the window: a grant is a send too and consumes a buffer at the peer, so it must be backed like any
   other. A grant's buffer is owed back like any other: with W >= 4 one grant received (owed 1 < grant_at
   2) never triggers a grant in return, which is why 4 is the smallest window (with 2, grants would
   answer grants forever). A sender out of credits has C - 1 = W of them owed by a peer that drained its
   queue, and W >= W/2: it is granted without asking. Destroying an endpoint lowers target by C; its
   buffers stay in the pool, but for what is more than a chunk above the target (>>srq: live).
   The credits field keeps its meaning on the wire (buffers the peer may consume, its last kept for
   grants), so versions agree without a new record version: an older peer sends at most C - 1 = W into
   our C buffers; an older receiver advertises its window W' as W' buffers, and we send W' - 1, as it
   expects.
   Windows that adapt (ep desc rq_depth 0, or max_window above rq_depth; shared pool only) change C on
   the receiving side alone: a sender adds whatever credits come back, so the wire is the same. Start:
   W = 2, grant_at 2 (a grant received, owed 1, still answers nothing). Growth: when a grant falls due
   from the receive path (the peer sent half its window, not counting its grants, and nothing of ours
   took the credits back: it streams), W doubles up to max_window, if the pool can back it at once: free buffers and a
   receive CQ with room (no system call here); the new credits are posted on its queue (target += them) before they
   are added to what the grant carries, so C grows by what the peer is given and the equation above
   holds. Otherwise the growth waits (grant_waits, event GRANT_WAIT) and the tick makes room for the
   next one (rdmax__srq_room) up to the device's bounds. Shrink: a window above its start is looked at
   by rdmax__window_adapt every 8th settle (grant_at 1, sampled by rdmax__grant_due); when we posted
   something since the last look (the peer gets replies, which carry credits) and it is owed at most a
   quarter of its window, the owed credits are kept back instead of returned, down to the start: C and
   target fall by them, the peer's credits never come back, and the equation holds again. A peer that
   goes idle keeps what it holds (at most max_window + 1 buffers); one that streams one way keeps a
   grown window while it does. Enforcement is unchanged: C (rq_depth) is always what the peer was
   given. */

/* rdmax's own immediate data of an RC receive (host order): the credits it returns (the endpoint's
   waiting requests get their turn) and the peer's goodbye. Returns nonzero for a grant, which carries
   nothing else. */
static int rdmax__imm_take(rdmax_ctx *ctx, rdmax_ep *ep, uint32_t imm)
{
    if (imm & RDMAX__IMM_CREDITS) {
        ep->tx_credits += imm & RDMAX__IMM_CREDITS;
        if (ep->group.count)
            rdmax__arb_group_schedule(&ctx->arb, &ep->group);
    }
    if (rdmax_unlikely(imm & RDMAX__IMM_CLOSE))
        rdmax__ep_peer_closed(ep);
    if (!(imm & RDMAX__IMM_GRANT))
        return 0;
    ep->rx_grants++;  /* (rdmax__window_adapt) */
    return 1;
}

/* The credits a poll batch owes, for rdmax__srq_settle to add once the batch's buffers are posted
   again: who[i] (table index | generation << 16) consumed cnt[i] buffers. The endpoint of the last
   completion (rdmax__rx.last_who) counts in rdmax__rx.run instead (a burst comes mostly from one), which
   goes here when another endpoint's completion comes, and at the end of the batch. At most two entries
   a completion (its own, and the run it ends), and the batch's last run. */
struct rdmax__owed {
    uint32_t n;
    uint32_t who[2 * 16 + 1], cnt[2 * 16 + 1];
};

static void rdmax__owe_credits(struct rdmax__owed *o, uint32_t who, uint32_t cnt)
{
    if (o->n && o->who[o->n - 1] == who) {
        o->cnt[o->n - 1] += cnt;
    } else {
        o->who[o->n] = who;
        o->cnt[o->n++] = cnt;
    }
}

/* The endpoint of a receive completion whose QP is not the last one's (rdmax__rx.last_qpn): looked up,
   and made the last one (the run of the one before goes to o); NULL when qpn is not a live endpoint's. */
static rdmax_ep *rdmax__srq_ep_of_qpn(rdmax_ctx *ctx, uint32_t qpn, struct rdmax__owed *o)
{
    struct rdmax__rx *x = ctx->rx;
    rdmax_ep *ep = rdmax__map_ep(ctx, qpn);
    if (ep == NULL)
        return NULL;
    if (x->run) {
        rdmax__owe_credits(o, x->last_who, x->run);
        x->run = 0;
    }
    uint32_t idx = (uint32_t)(ep->wr_id_base >> 32) & 0xffff;
    x->last_qpn = qpn;
    x->last_key = rdmax__srq_key(0, qpn);
    x->last_who = idx | (uint32_t)RDMAX__REF_GEN(&ctx->eps[idx]) << 16;
    x->last_ep = ep;
    x->staged |= x->last_bit;  /* the pool of the one before may have buffers staged */
    x->last_bit = 1u << ep->pool;
    x->last_s = x->pool[ep->pool];
    x->last_tag = ((uint64_t)idx << RDMAX__WR_OWNER_SHIFT | RDMAX__WR_SRQ | RDMAX__WR_RECV) >> RDMAX__WR_POOL_SHIFT |
                  ep->pool;
    if (x->last_s->n_stage)
        x->last_s->mixed = 1;  /* the inline path stages this one's buffers after another's */
    return ep;
}

/* A completion's credit after its callback, when the last endpoint is no longer its QP's: a callback
   destroyed it (the credit goes with it), or progressed and met another endpoint. */
static void rdmax__srq_owe_other(rdmax_ctx *ctx, uint32_t qpn, struct rdmax__owed *o)
{
    rdmax_ep *ep = rdmax__map_ep(ctx, qpn);
    if (ep) {
        uint32_t idx = (uint32_t)(ep->wr_id_base >> 32) & 0xffff;
        rdmax__owe_credits(o, idx | (uint32_t)RDMAX__REF_GEN(&ctx->eps[idx]) << 16, 1);
    }
}

/* A polled buffer (wr_id) of pool s (a pool never goes during a poll batch, see >>srq) that came from
   the queue of endpoint who back to it: staged for the repost at the end of the batch (its pool marked
   for rdmax__srq_settle), or (never, as a poll batch stages at most its own completions: a nested one
   posts what the batch around it staged first) to the free list when the staging is full; kept home
   when its chunk drains (rdmax__srq_withhold), a free one staged in its place. Left alone when who does
   not own it (never expected). A who its callback destroyed still owns it (>>srq: owner): staged, it goes
   to the free list with its dead owner's run (rdmax__srq_fill). */
static void rdmax__srq_give(rdmax_ctx *ctx, struct rdmax__srq *s, uint32_t who, uint64_t wr_id, char *buf,
                            uint32_t lkey)
{
    struct rdmax__rx *x = ctx->rx;
    uint32_t k = s->n_stage, b = (uint32_t)wr_id & RDMAX__WR_BUF_MASK;
    if (s->owner[rdmax__srq_li(s, b)] != who)
        return;
    x->staged |= 1u << ((uint32_t)(wr_id >> RDMAX__WR_POOL_SHIFT) & (RDMAX__POOLS - 1));
    if (rdmax_unlikely(k == RDMAX__RECV_BATCH)) {
        rdmax__srq_disown(ctx, s, rdmax__rq_ep(ctx, who), b);
        return;
    }
    if (rdmax_unlikely(rdmax__srq_withhold(s, b))) {
        rdmax__srq_unpost(s, b);
        b = s->free[--s->n_free];
        s->owner[rdmax__srq_li(s, b)] = who;
        wr_id = (wr_id & ~(uint64_t)RDMAX__WR_BUF_MASK) | b;
        buf = rdmax__srq_buf(s, b);
        lkey = s->chunks[b >> RDMAX__SRQ_SLOT_BITS].lkey;
    }
    if (who != x->last_who)
        s->mixed = 1;  /* (the inline path stages the last endpoint's only, see rdmax__srq_fill) */
    s->rq[k].wr.wr_id = wr_id;
    s->rq[k].sge.addr = (uintptr_t)buf;
    s->rq[k].sge.lkey = lkey;
    s->n_stage = k + 1;
}

/* The credit of a successful completion of QP qpn, owed once its buffer is posted again: to the last
   endpoint's run, or (a callback destroyed it, or progressed and met another endpoint) looked up. */
static inline void rdmax__srq_credit(rdmax_ctx *ctx, struct rdmax__rx *x, uint32_t qpn, struct rdmax__owed *o)
{
    if (rdmax_likely(qpn == x->last_qpn))
        x->run++;
    else
        rdmax__srq_owe_other(ctx, qpn, o);
}

/* One receive completion of an endpoint on a pool (>>srq), any but rdmax__srq_recv_fast's: another
   endpoint's; a destroyed one's (counted and dropped, its buffer untouched: it went back with the
   endpoint's queue); a failed or flushed one (owes no credit; its buffer to the free list, as its QP is
   in error); put_imm's, one with a grant or a goodbye in its immediate data. The buffer, which its
   endpoint must own, is staged for its repost there after the callback (rdmax__srq_fill, from
   rdmax__srq_settle at the end of the batch); a successful completion of a live endpoint is a credit it
   is owed once the buffer is posted again (x->run, or o). */
static __attribute__((noinline)) void rdmax__srq_recv(rdmax_ctx *ctx, struct rdmax__rx *x, const struct ibv_wc *wc,
                                                      struct rdmax__owed *o)
{
    rdmax_ep *ep = x->last_ep;
    if (wc->qp_num != x->last_qpn && (ep = rdmax__srq_ep_of_qpn(ctx, wc->qp_num, o)) == NULL) {
        ctx->cnt.stale_wr_ids++;  /* its endpoint was destroyed: dropped (>>srq) */
        return;
    }
    uint32_t p = (uint32_t)(wc->wr_id >> RDMAX__WR_POOL_SHIFT) & (RDMAX__POOLS - 1);
    uint32_t b = (uint32_t)wc->wr_id & RDMAX__WR_BUF_MASK, ci = b >> RDMAX__SRQ_SLOT_BITS;
    uint32_t slot = b & ((1u << RDMAX__SRQ_SLOT_BITS) - 1), who = x->last_who;
    struct rdmax__srq *s = x->pool[p];
    if (p != ep->pool || !rdmax__wr_is_pool(wc->wr_id) || ci >= s->n_chunks || slot >= s->per_chunk ||
        s->owner[ci * s->per_chunk + slot] != who) {
        ctx->cnt.stale_wr_ids++;  /* not on its queue: never (a QP completes what was posted on it) */
        return;
    }
    /* the buffer's address and key, for the callback and for its repost (chunks may move while a
       callback runs, their base and key do not) */
    char *buf = s->chunks[ci].base + (size_t)slot * s->recv_size;
    uint32_t lkey = s->chunks[ci].lkey;
    if (wc->status != IBV_WC_SUCCESS) {
        if (wc->status == IBV_WC_WR_FLUSH_ERR) {
            ctx->cnt.recv_flushed++;
            rdmax__ep_flush_seen(ep);
        } else {
            ctx->cnt.err_cqes++;
            rdmax__ep_fail(ep, wc, NULL);
        }
        rdmax__srq_disown(ctx, s, ep, b);
        return;
    }
    if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        /* rdmax_put_imm: the data is in place; the immediate is the user's, no credits in it. */
        ctx->cnt.recv_imms++;
        if (ep->imm_cb)
            ep->imm_cb(ep, ntohl(wc->imm_data), wc->byte_len, ep->user);
        else
            ctx->cnt.recv_drops++;
    } else {
        uint32_t imm = (wc->wc_flags & IBV_WC_WITH_IMM) ? RDMAX__LE32(wc->imm_data) : 0;
        if (!rdmax__imm_take(ctx, ep, imm)) {  /* a grant only carries credits */
            ctx->cnt.recv_msgs++;
            ctx->cnt.recv_bytes += wc->byte_len;
            /* may destroy ep, or free the pool with its last endpoint */
            ep->recv_cb(ep, buf, wc->byte_len, ep->user);
        }
    }
    rdmax__srq_give(ctx, s, who, wc->wr_id, buf, lkey);
    rdmax__srq_credit(ctx, x, wc->qp_num, o);
}

/* rdmax__srq_recv_fast's completion after a callback that recv_disturbed (see rdmax__rx.recv_disturbed):
   staged again (the staging may have been posted meanwhile, the request it was staged in reused) for the
   queue of its QP's endpoint, unless the callback destroyed it (the buffer waits for the end of the
   batch, >>srq); its credit to the last endpoint's run or looked up (the callback may have destroyed it,
   or progressed and met another). */
static __attribute__((noinline)) void rdmax__srq_restage(rdmax_ctx *ctx, struct rdmax__rx *x, const struct ibv_wc *wc,
                                                         struct rdmax__owed *o, struct rdmax__srq *s)
{
    uint32_t b = (uint32_t)wc->wr_id & RDMAX__WR_BUF_MASK;
    rdmax_ep *ep = rdmax__map_ep(ctx, wc->qp_num);  /* (a destroyed QP's number maps to no endpoint) */
    x->recv_disturbed = 0;
    if (ep != NULL)
        rdmax__srq_give(ctx, s, rdmax__ep_who(ctx, ep), wc->wr_id, rdmax__srq_buf(s, b),
                        s->chunks[b >> RDMAX__SRQ_SLOT_BITS].lkey);
    rdmax__srq_credit(ctx, x, wc->qp_num, o);
}

/* The common completion of an endpoint on a pool, inline: a message (credits in its immediate data
   or none) of the last endpoint (a burst comes mostly from one QP: the endpoint of the last one,
   until rdmax__map_kill forgets it, saves the map lookup), whose wr_id the caller found to name a buffer
   of the last endpoint's pool posted on its queue (x->last_tag) in a chunk that does not drain (below
   n_live: reposted as it is); everything else in rdmax__srq_recv. The buffer is staged
   (in the request at n_stage) before the callback, so that nothing is kept across it, and counted as
   staged after it: a nested poll batch posts only rq[0, n_stage), and anything that may change the
   staging or the last endpoint meanwhile sets x->recv_disturbed, which sends the completion to
   rdmax__srq_restage. The pool needs no mark: every batch posts last_bit's pool (rdmax__srq_settle, _last),
   and rdmax__srq_ep_of_qpn and rdmax__map_kill mark it when it stops being the last one's. Its staging holds
   at most this batch's completions (a batch starts with every staging posted), so there is room. */
static inline void rdmax__srq_recv_fast(rdmax_ctx *ctx, struct rdmax__rx *x, const struct ibv_wc *wc,
                                        struct rdmax__owed *o)
{
    struct rdmax__srq *s = x->last_s;
    uint32_t ci = ((uint32_t)wc->wr_id & RDMAX__WR_BUF_MASK) >> RDMAX__SRQ_SLOT_BITS;
    uint32_t slot = (uint32_t)wc->wr_id & ((1u << RDMAX__SRQ_SLOT_BITS) - 1);
    uint64_t key;  /* the QP's number and the immediate (0: no credits; without WITH_IMM whatever it is) */
    memcpy(&key, (const char *)wc + offsetof(struct ibv_wc, imm_data), sizeof key);
    rdmax_ep *ep = x->last_ep;
    if (rdmax_unlikely(key != x->last_key || wc->status != IBV_WC_SUCCESS || wc->opcode != IBV_WC_RECV ||
                       ci >= s->n_live || slot >= s->per_chunk)) {
        /* A ping-pong's every message returns credits in its immediate data: taken here too (beside
           the test of the common case, which stays as it is), a grant or a goodbye goes the slow way. */
        const uint64_t credits = rdmax__srq_key(RDMAX__LE32(RDMAX__IMM_CREDITS), 0);
        if ((key & ~credits) != x->last_key || !(wc->wc_flags & IBV_WC_WITH_IMM) || wc->status != IBV_WC_SUCCESS ||
            wc->opcode != IBV_WC_RECV || ci >= s->n_live || slot >= s->per_chunk) {
            rdmax__srq_recv(ctx, x, wc, o);
            return;
        }
        ep->tx_credits += RDMAX__LE32(wc->imm_data) & RDMAX__IMM_CREDITS;
        if (ep->group.count)
            rdmax__arb_group_schedule(&ctx->arb, &ep->group);
    }
    const __typeof__(*s->chunks) *c = &s->chunks[ci];
    char *buf = c->base + (size_t)slot * s->recv_size;
    struct rdmax__srq_rq *r = &s->rq[s->n_stage];  /* (room: see above) */
    r->wr.wr_id = wc->wr_id;
    r->sge.addr = (uintptr_t)buf;
    r->sge.lkey = c->lkey;
    /* (the two counters apart: side by side gcc makes them one vector add of five instructions; the
       message is counted once its callback returned, one add to memory) */
    ctx->cnt.recv_bytes += wc->byte_len;
    ep->recv_cb(ep, buf, wc->byte_len, ep->user);  /* may destroy ep */
    ctx->cnt.recv_msgs++;
    if (rdmax_unlikely(x->recv_disturbed)) {
        rdmax__srq_restage(ctx, x, wc, o, s);
        return;
    }
    s->n_stage++;
    x->run++;
}

/* The staged buffers of every pool posted: the ones marked, and the last endpoint's pool. */
static void rdmax__srq_post_staged(rdmax_ctx *ctx, struct rdmax__rx *x)
{
    uint32_t m = x->staged | x->last_bit;
    x->staged = 0;  /* (rdmax__srq_fill does not clear a pool's bit: it runs for one with none staged too) */
    for (uint32_t p = 0; m; p++, m >>= 1)
        if ((m & 1) && x->pool[p]->n_stage)
            rdmax__srq_fill(ctx, p);
}

/* A window that waits to grow: counted, an event, and the tick asked for room unless the pool is at
   its bound. */
static void rdmax__window_wait(rdmax_ctx *ctx, rdmax_ep *ep, struct rdmax__srq *s, uint32_t add)
{
    struct rdmax__rx *x = ctx->rx;
    int bound = s->room_failed || rdmax__rg_used(ctx, s->group) + add > ctx->attr.max_cqe;
    if (!bound)
        x->room |= 1u << ep->pool;
    ctx->cnt.grant_waits++;
    RDMAX__PROFILE_EVENT(ctx, RDMAX_PROFILE_EVENT_GRANT_WAIT, ep, (uint64_t)bound);
}

/* A grant is due to a window that adapts: it doubles (up to max_window) if the pool backs the new
   credits now, which are posted before they join what the grant carries (see above). Not while a grant
   waits in the queue: it carries what is owed when it goes, and one growth is enough for it. */
static void rdmax__window_grow(rdmax_ctx *ctx, rdmax_ep *ep, uint32_t w)
{
    struct rdmax__rx *x = ctx->rx;
    struct rdmax__srq *s = x->pool[ep->pool];
    if (w >= ep->desc.max_window || rdmax__arb_elem_is_queued(&ep->grant_req.rdmax__elem))
        return;
    uint32_t add = (2 * w < ep->desc.max_window ? 2 * w : ep->desc.max_window) - w;
    uint32_t *cq_size = s->group ? &x->grp[s->group].size : &ctx->rcq_size;
    if (rdmax__rg_used(ctx, s->group) + add > *cq_size || s->n_free < add ||
        (uint64_t)s->posted + s->n_free < (uint64_t)s->target + add) {
        rdmax__window_wait(ctx, ep, s, add);
        return;
    }
    uint32_t n0 = ep->rx_n;
    s->target += add;
    x->grp[s->group].target += add;
    ep->rq_depth += add;
    rdmax__ep_rq_fill(ctx, ep);  /* on its own queue before they are granted */
    uint32_t got = ep->rx_n > n0 ? ep->rx_n - n0 : 0;
    if (rdmax_unlikely(got < add)) {  /* not backed: not given */
        s->target -= add - got;
        x->grp[s->group].target -= add - got;
        ep->rq_depth -= add - got;
        add = got;
        if (add == 0)
            return;
    }
    ep->rx_unreturned += add;
    ep->grant_at = 1;  /* above its start: its shrink is looked at too (rdmax__grant_due) */
}

/* What the peer is owed now is kept back, down to the window's start (see above). */
static void rdmax__window_shrink(rdmax_ctx *ctx, rdmax_ep *ep, uint32_t w)
{
    uint32_t k = w - ep->desc.rq_depth;
    if (k > ep->rx_unreturned)
        k = ep->rx_unreturned;
    struct rdmax__srq *s = ctx->rx->pool[ep->pool];
    ep->rx_unreturned -= k;
    ep->rq_depth -= k;
    s->target -= k;  /* the buffers beyond it go to the free list as they come back (rdmax__srq_fill) */
    ctx->rx->grp[s->group].target -= k;
    s->room_failed = 0;
    if (w - k == ep->desc.rq_depth)
        ep->grant_at = rdmax__grant_at(ep->desc.rq_depth);
}

/* A window that adapts, where credits are owed (an honest count): grows when a grant is due (returns 1),
   shrinks when the peer gets replies and uses little of it (see above). Not inlined: a fixed window's
   grant pays a test, not this. */
static __attribute__((noinline)) int rdmax__window_adapt(rdmax_ep *ep)
{
    rdmax_ctx *ctx = ep->ctx;
    uint32_t w = ep->rq_depth - 1;
    int replied = (uint16_t)ep->sq_head != ep->rx_sq_seen;
    ep->rx_sq_seen = (uint16_t)ep->sq_head;
    if (ep->rx_unreturned >= rdmax__grant_at(w)) {
        /* grants alone make no stream (two peers' grants would grow each other's windows) */
        if (ep->rx_unreturned - (ep->rx_grants < ep->rx_unreturned ? ep->rx_grants : ep->rx_unreturned) >=
            rdmax__grant_at(w))
            rdmax__window_grow(ctx, ep, w);
        ep->rx_grants = 0;
        return 1;
    }
    if (replied && w > ep->desc.rq_depth && ep->rx_unreturned <= (w / 4 > 1 ? w / 4 : 1))
        rdmax__window_shrink(ctx, ep, w);
    return 0;
}

/* Credits owed back are due (half a window): grant them, unless the peer is owed more than the buffers
   that back it, rq_depth. An honest peer never is: what it has sent and not had back is at most its
   credits (see >>srq), and what we owe is part of that. So it sent past its window: it fails, its QP
   leaves RTS and consumes no more buffers of the pool. Checked only here, where a grant is due (never
   on the way of a message), because a grant would hide the excess: it would return the credits the peer
   took without having them. */
static void rdmax__grant_or_fail(rdmax_ep *ep)
{
    if (rdmax_likely(ep->rx_unreturned <= ep->rq_depth)) {
        if (rdmax_unlikely(ep->desc.max_window > ep->desc.rq_depth) && !rdmax__window_adapt(ep))
            return;  /* a window that grew hears of more than its grants (rdmax__grant_due): none due yet */
        rdmax__grant(ep);
        return;
    }
    ep->ctx->cnt.window_breaks++;
    rdmax__ep_fail_why(ep, RDMAX_ERR_PEER_WINDOW, IBV_WC_GENERAL_ERR, 1,
                       "the peer sent past its credit window: %u of its messages are not returned yet, and "
                       "it was given %u receive buffers", ep->rx_unreturned, ep->rq_depth);
}

/* Whether a settle that left ep owing credits calls rdmax__grant_or_fail: a grant is due. A window that
   grew (grant_at 1) has its shrink looked at (rdmax__window_adapt) at every 8th settle only, not a call
   per message, and at every one where a grant of its size is due or the peer broke its window. */
static inline int rdmax__grant_due(rdmax_ep *ep)
{
    if (ep->rx_unreturned < ep->grant_at || ep->state != RDMAX_EP_CONNECTED)
        return 0;
    if (ep->rq_depth - 1 <= ep->desc.rq_depth)  /* not grown (grant_at is half the window) */
        return 1;
    return (++ep->rx_looks & 7) == 0 || ep->rx_unreturned >= rdmax__grant_at(ep->rq_depth - 1);
}

/* End of a poll batch: post the buffers given back again (every pool with some staged: a nested batch
   posts what the outer one gave back so far, before it owes its credits), then owe their endpoints the
   credits (never before: see >>srq), and grant as soon as half a window is owed, busy or not. All are
   owed before any grant, so a grant returns every buffer of the batch its endpoint is owed. */
static void rdmax__srq_settle(rdmax_ctx *ctx, struct rdmax__owed *o, int outermost)
{
    struct rdmax__rx *x = ctx->rx;
    if (x->run) {
        rdmax__owe_credits(o, x->last_who, x->run);
        x->run = 0;
    }
    rdmax__srq_post_staged(ctx, x);
    for (uint32_t i = 0; i < o->n; i++) {
        rdmax__ep_ref *r = &ctx->eps[o->who[i] & 0xffff];
        if (r->ep && RDMAX__REF_GEN(r) == (uint16_t)(o->who[i] >> 16))
            r->ep->rx_unreturned += o->cnt[i];
    }
    for (uint32_t i = 0; i < o->n; i++) {
        rdmax__ep_ref *r = &ctx->eps[o->who[i] & 0xffff];
        if (r->ep && RDMAX__REF_GEN(r) == (uint16_t)(o->who[i] >> 16) && rdmax__grant_due(r->ep))
            rdmax__grant_or_fail(r->ep);
    }
    if (rdmax_unlikely(x->pools_left != 0) && outermost)
        rdmax__pool_reap(ctx);
}

/* rdmax__srq_settle when the batch gave back buffers of the last endpoint only (a ping-pong's every
   batch): its pool posted again, then the credits owed (the endpoint is alive: rdmax__map_kill clears
   last_s), the grant as there. */
static void rdmax__srq_settle_last(rdmax_ctx *ctx, struct rdmax__rx *x)
{
    rdmax_ep *ep = x->last_ep;
    uint32_t run = x->run;
    x->run = 0;
    if (x->last_s->n_stage)
        rdmax__srq_fill(ctx, ep->pool);
    ep->rx_unreturned += run;
    if (rdmax__grant_due(ep))
        rdmax__grant_or_fail(ep);
}

int rdmax__poll_ud(rdmax_ctx *ctx)
{
#if RDMAX__HAS_UD
    if (ctx->ud && ctx->ud->qp)
        return rdmax__ud_poll_recv(ctx);
#else
    (void)ctx;
#endif
    return 0;
}

int rdmax__poll_recv(rdmax_ctx *ctx)
{
    return rdmax__poll_recv_fast(ctx);
}

/* The n receive completions in wc (n not 0: a poll error is negative). */
static int rdmax__recv_batch(rdmax_ctx *ctx, struct ibv_wc *wc, int n)
{
    if (n < 16)
        ctx->rcq_drains++;  /* the CQ was drained: tombstones made before now are dead (>>srq) */
    if (n < 0)
        return 0;
    ctx->cnt.cqes += (uint64_t)n;
    struct rdmax__owed owed;
    uint32_t own[16];
    int n_own = 0;
    owed.n = 0;
    /* Without a pool no completion names one: one that seems to goes the endpoints' way
       (endpoint 0xffff: counted, dropped). rx never goes before the context; a callback may make it, but
       no completion of this batch then names a pool of it. */
    struct rdmax__rx *x = ctx->rx;
    if (x != NULL) {
        if (wc != ctx->rwc_top)  /* nested: the staging of the batch around it posted first (room) */
            rdmax__srq_post_staged(ctx, x);
        x->recv_disturbed = 0;
    }
    for (int i = 0; i < n; i++) {
        if (rdmax_likely(x != NULL)) {
            if (rdmax_likely((wc[i].wr_id >> RDMAX__WR_POOL_SHIFT) == x->last_tag)) {
                rdmax__srq_recv_fast(ctx, x, &wc[i], &owed);
                continue;
            }
            if (rdmax__wr_is_pool(wc[i].wr_id)) {
                rdmax__srq_recv(ctx, x, &wc[i], &owed);
                continue;
            }
        }
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
                rdmax__ep_flush_seen(ep);
            } else {
                ctx->cnt.err_cqes++;
                rdmax__ep_fail(ep, &wc[i], NULL);
            }
            continue;  /* the buffer is not reposted: the QP is in error */
        }
        char *data = ep->rbufs + (size_t)idx * ep->recv_size;
        size_t len = wc[i].byte_len;
        if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
            /* rdmax_put_imm: as on the shared queue, the data is in place and the immediate the user's */
            ctx->cnt.recv_imms++;
            if (ep->imm_cb)
                ep->imm_cb(ep, ntohl(wc[i].imm_data), wc[i].byte_len, ep->user);
            else
                ctx->cnt.recv_drops++;
            if (rdmax__wr_ep(ctx, wc[i].wr_id) != ep) {
                ctx->cnt.stale_wr_ids--;
                continue;
            }
            goto recycle;
        }
        if ((wc[i].wc_flags & IBV_WC_WITH_IMM) && ep->qp->qp_type == IBV_QPT_RC) {
            if (rdmax__imm_take(ctx, ep, RDMAX__LE32(wc[i].imm_data)))
                goto recycle;  /* a grant only carries credits */
        }
#if RDMAX__HAS_UD
        if (ep->qp->qp_type == IBV_QPT_UD) {
            if (rdmax_unlikely(len < RDMAX_UD_GRH)) {
                ctx->cnt.recv_drops++;
                goto recycle;
            }
            data += RDMAX_UD_GRH;  /* UD receives carry a 40-byte GRH in front */
            len -= RDMAX_UD_GRH;
            if (len == 0 && !(wc[i].wc_flags & IBV_WC_WITH_IMM) && wc[i].src_qp == ep->qp->qp_num)
                goto recycle;  /* our own flush marker: a user's datagram has immediate data */
        }
#endif
        ctx->cnt.recv_msgs++;
        ctx->cnt.recv_bytes += len;
        ep->recv_cb(ep, data, len, ep->user);
        /* The callback may have destroyed the endpoint. */
        if (rdmax__wr_ep(ctx, wc[i].wr_id) != ep) {
            ctx->cnt.stale_wr_ids--;
            continue;
        }
    recycle:
        ep->rq_free[ep->rq_unposted++] = idx;
        /* reposted at the end of the batch, as the shared queue's buffers: one grant for the batch */
        uint32_t me = (uint32_t)(wc[i].wr_id >> 32) & 0xffff;
        me |= (uint32_t)RDMAX__REF_GEN(&ctx->eps[me]) << 16;
        if (n_own == 0 || own[n_own - 1] != me)
            own[n_own++] = me;
    }
    for (int k = 0; k < n_own; k++) {
        rdmax__ep_ref *r = &ctx->eps[own[k] & 0xffff];
        rdmax_ep *ep = r->ep;
        if (!ep || RDMAX__REF_GEN(r) != (uint16_t)(own[k] >> 16) || ep->state == RDMAX_EP_ERROR)
            continue;  /* destroyed by a callback, or failed: its QP is in error */
        /* a batch, or half the window (a peer keeps one credit back: it may never send a whole batch) */
        if (ep->rq_unposted >= RDMAX__RECV_BATCH || ep->rq_unposted >= ep->grant_at)
            rdmax__post_recvs(ep, ep->rq_unposted);
        /* Half the peer's credits are back with us and no send took them along: grant them. */
        if (ep->rx_unreturned >= ep->grant_at && ep->state == RDMAX_EP_CONNECTED && ep->qp->qp_type == IBV_QPT_RC)
            rdmax__grant_or_fail(ep);
    }
    if ((x = ctx->rx) != NULL) {  /* (a callback may have made rx) */
        if (rdmax_likely((x->staged | owed.n | x->pools_left) == 0 && x->run != 0 && x->last_s != NULL))
            rdmax__srq_settle_last(ctx, x);
        else if (x->staged | x->run | owed.n | x->pools_left)
            rdmax__srq_settle(ctx, &owed, wc == ctx->rwc_top);
        x->recv_disturbed = 1;  /* for the batch around this one, if any */
    }
    if (rdmax_unlikely(ctx->flush_check))
        rdmax__flush_check(ctx);
    if (rdmax_unlikely(ctx->dead_eps != NULL) && wc == ctx->rwc_top)
        rdmax__ep_reap(ctx);
    return n;
}

/* The n receive completions polled into ctx->rwc, as a batch. A callback that progresses polls again:
   into this frame's array (rwc points there until the batch is done), not over the rest of the batch. */
int rdmax__recv_cqes(rdmax_ctx *ctx, int n)
{
    struct ibv_wc *wc = ctx->rwc, nested[16];
    ctx->rwc = nested;
    n = rdmax__recv_batch(ctx, wc, n);
    ctx->rwc = wc;
    return n;
}

/* rdmax__progress_recv_one when the callback did something that may have moved the last endpoint or a
   pool's staging, or left a pool to free (x->recv_disturbed: it progressed, destroyed or made an
   endpoint, ...): the buffer goes back and its credit is owed the batch's way, and the pool goes. wc is
   intact (a nested poll wrote elsewhere). */
static __attribute__((noinline)) int rdmax__recv_one_stirred(rdmax_ctx *ctx, const struct ibv_wc *wc)
{
    struct rdmax__rx *x = ctx->rx;
    struct rdmax__owed o;
    o.n = 0;
    uint32_t p = (uint32_t)(wc->wr_id >> RDMAX__WR_POOL_SHIFT) & (RDMAX__POOLS - 1);
    rdmax__srq_restage(ctx, x, wc, &o, x->pool[p]);
    rdmax__srq_settle(ctx, &o, 1);
    rdmax__ep_reap(ctx);
    return 1;  /* (no flush check, as rdmax__progress_recv_one) */
}

/* One message in an outermost poll, as a ping-pong's every receive: it needs none of the batch's
   bookkeeping, so it goes straight through, then the rest of rdmax_progress. A message of the last
   endpoint on a pool (credits in its immediate or none) in a buffer it owns, which owns exactly its
   credits: the credits taken, the buffer put in the pool's own request for one (s->one, which no nested
   batch touches) before the callback, posted again on the endpoint's queue after it, and its credit
   owed at once, the grant as the batch's. Anything else (a draining chunk's buffer too: >>srq, live)
   goes the batch's way before anything is touched. */
static int rdmax__progress_recv_one(rdmax_ctx *ctx)
{
    struct ibv_wc *wc = ctx->rwc_top;
    struct rdmax__rx *x = ctx->rx;
    if (x == NULL || (wc->wr_id >> RDMAX__WR_POOL_SHIFT) != x->last_tag)
        return rdmax__progress_more(ctx, rdmax__recv_cqes(ctx, 1));
    struct rdmax__srq *s = x->last_s;
    uint32_t ci = ((uint32_t)wc->wr_id & RDMAX__WR_BUF_MASK) >> RDMAX__SRQ_SLOT_BITS;
    uint32_t slot = (uint32_t)wc->wr_id & ((1u << RDMAX__SRQ_SLOT_BITS) - 1);
    uint64_t key;  /* the immediate and the QP's number, as rdmax__srq_recv_fast reads them */
    memcpy(&key, (const char *)wc + offsetof(struct ibv_wc, imm_data), sizeof key);
    rdmax_ep *ep = x->last_ep;
    if (wc->status != IBV_WC_SUCCESS || wc->opcode != IBV_WC_RECV || ci >= s->n_live || slot >= s->per_chunk ||
        ep->rx_n != ep->rq_depth)  /* (fewer than its credits, or more: the batch's repost fits them) */
        return rdmax__progress_more(ctx, rdmax__recv_cqes(ctx, 1));
    if (key != x->last_key) {  /* the last test: credits in the immediate, and nothing else may differ */
        if (((key ^ x->last_key) & ~rdmax__srq_key(RDMAX__LE32(RDMAX__IMM_CREDITS), 0)) != 0 ||
            !(wc->wc_flags & IBV_WC_WITH_IMM))
            return rdmax__progress_more(ctx, rdmax__recv_cqes(ctx, 1));
        ep->tx_credits += RDMAX__LE32(wc->imm_data);  /* (credit bits only: tested above) */
        if (ep->group.count)
            rdmax__arb_group_schedule(&ctx->arb, &ep->group);
    }
    ctx->rcq_drains++;  /* fewer than a batch: the CQ was drained (as rdmax__recv_batch) */
    ctx->cnt.cqes++;
    char *buf = s->chunks[ci].base + (size_t)slot * s->recv_size;
    s->one.wr.wr_id = wc->wr_id;
    s->one.sge.addr = (uintptr_t)buf;
    s->one.sge.lkey = s->chunks[ci].lkey;
    ctx->cnt.recv_bytes += wc->byte_len;
    x->recv_disturbed = 0;
    /* Only ctx is live across the callback and the post, so this function needs no stack frame: the
       callback polls past wc (rwc_top has a 17th entry for that), and x, s and ep are read again from
       ctx after it (one load each, where a kept register costs a push and a pop). */
    ctx->rwc = wc + 1;
    ep->recv_cb(ep, buf, wc->byte_len, ep->user);  /* may destroy ep */
    ctx->rwc = ctx->rwc_top;
    ctx->cnt.recv_msgs++;
    x = ctx->rx;
    if (rdmax_unlikely(x->recv_disturbed))
        return rdmax__progress_more(ctx, rdmax__recv_one_stirred(ctx, ctx->rwc_top));
    s = x->last_s;  /* (as before the callback, which would have disturbed) */
    ep = x->last_ep;
    ctx->cnt.recv_post_calls++;
    int rc = ibv_post_recv(ep->qp, &s->one.wr, &s->one_bad);  /* on its own queue, still its owner's */
    if (rdmax_unlikely(rc != 0)) {
        x = ctx->rx;
        rdmax__rq_post_failed(ctx, x->last_s, x->last_ep, &x->last_s->one, 1, x->last_s->one_bad, rc);
    }
    ep = ctx->rx->last_ep;
    ep->rx_unreturned++;  /* its buffer is posted again: the credit is owed */
    if (rdmax__grant_due(ep))
        rdmax__grant_or_fail(ep);
    /* (no flush check: this path handles no flushed completion, and flush_check is set only where a
       check follows, so a nested poll in the callback that sets it has checked already) */
    return 1 + rdmax__progress_send(ctx, 1);
}

/* rdmax_progress after its poll found n receive completions: one in the outermost poll takes the short
   path, anything else the batch's; then the send side. */
int rdmax__progress_recv(rdmax_ctx *ctx, int n)
{
    if (n == 1 && !rdmax__in_recv_poll(ctx))
        return rdmax__progress_recv_one(ctx);
    return rdmax__progress_more(ctx, rdmax__recv_cqes(ctx, n));
}

/* A zero-length send whose immediate data returns credits; it may use the credit kept for it. */
static rdmax_status rdmax__grant_post(rdmax_ep *ep)
{
    rdmax_ctx *ctx = ep->ctx;
    if (ep->state != RDMAX_EP_CONNECTED)
        return RDMAX_ERR_ENDPOINT;
    if (rdmax__ep_sq_avail(ep) == 0 || rdmax__scq_free(ctx) == 0 || ep->tx_credits == 0)
        return RDMAX_ERR_NO_RESOURCE;
    if (ep->rx_unreturned == 0)
        return RDMAX_OK;  /* a send took them along meanwhile */
    struct ibv_send_wr *wr = rdmax__ep_wr(ep, IBV_WR_SEND_WITH_IMM);
    wr->num_sge = 0;
    wr->imm_data = RDMAX__LE32(RDMAX__IMM_GRANT | ep->rx_unreturned);
    /* Always signaled: a grant posted from inside progress may be the newest request with nothing
       behind it, and a flush waiting on it would otherwise never see it complete. */
    ep->sig_at = ep->sq_head;  /* force this one signaled */
    rdmax_status st = rdmax__ep_post(ep, wr, NULL, RDMAX_OP_GRANT, 0, 0, NULL);
    if (st == RDMAX_OK) {
        ep->tx_credits--;
        ep->rx_unreturned = 0;
        ep->rx_sq_seen = (uint16_t)ep->sq_head;  /* a grant is no reply (rdmax__window_adapt) */
    }
    return st;
}

static rdmax_status rdmax__grant_cb(rdmax_req *req)
{
    rdmax_status st = rdmax__grant_post(req->rdmax__ep);
    return st == RDMAX_ERR_ENDPOINT ? RDMAX_OK : st;
}

/* A grant that cannot go now waits at the head of the queue: behind anything else, a send waiting for
   credits from a peer that is itself waiting for ours would deadlock both (a known UCX bug). */
static void rdmax__grant(rdmax_ep *ep)
{
    rdmax_ctx *ctx = ep->ctx;
    if (rdmax__arb_elem_is_queued(&ep->grant_req.rdmax__elem) || ctx->disp_ep == ep)
        return;
    if (rdmax__grant_post(ep) != RDMAX_ERR_NO_RESOURCE)
        return;
    memset(&ep->grant_req, 0, sizeof ep->grant_req);
    ep->grant_req.cb = rdmax__grant_cb;
    ep->grant_req.rdmax__ep = ep;
    rdmax__arb_group_push_head(&ctx->arb, &ep->group, &ep->grant_req.rdmax__elem);
    rdmax__arb_group_schedule(&ctx->arb, &ep->group);
    rdmax__ep_block(ep, RDMAX__BLK_PENDING);  /* direct posts go behind it */
}

/* ---- >>health: device events, watchdog, keepalive, disconnect ------------------------------------ */

static int64_t rdmax__now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The clock of the health pass (watchdog and keepalive): rdmax__now_ms, which a test may move forward
   (rdmax__test_clock_advance) to show the pass runs by elapsed time, not by calls. */
static int64_t rdmax__health_ms(const rdmax_ctx *ctx)
{
    return rdmax__now_ms() + ctx->clock_skew_ms;
}

static void rdmax__ep_closed(rdmax_ep *ep, int by_peer)
{
    rdmax_ctx *ctx = ep->ctx;
    if (ep->state != RDMAX_EP_CONNECTED)
        return;
    ep->state = RDMAX_EP_CLOSED;
    ctx->state_news |= ep->desc.state_cb != NULL;
    rdmax__ep_block(ep, RDMAX__BLK_STATE);
    ep->err = by_peer ? RDMAX_ERR_CLOSED : RDMAX_OK;
    /* The QP leaves RTS, so that the peer reaches nothing of ours through it after the close, whoever
       closed (a raw peer wrote into an exposed region after its own goodbye, and after our disconnect). */
    if (ep->qp->qp_type == IBV_QPT_RC)
        rdmax__qp_to_error(ep);
    if (ep->group.count)  /* waiting requests now fail, in order */
        rdmax__arb_group_schedule(&ctx->arb, &ep->group);
    RDMAX__PROFILE_EVENT(ctx, RDMAX_PROFILE_EVENT_EP_CLOSED, ep, (uint64_t)by_peer);
    rdmax__log(ctx, RDMAX_LOG_INFO, RDMAX_LOG_ITEM_EP_CLOSED,
               "device %s, endpoint qpn 0x%x peer %s: %s", ctx->attr.name, ep->qp->qp_num,
               ep->peer, by_peer ? "the peer disconnected" : "disconnected");
}

static void rdmax__ep_peer_closed(rdmax_ep *ep)
{
    rdmax__ep_closed(ep, 1);
}

rdmax_status rdmax_ep_disconnect(rdmax_ep *ep, int timeout_ms)
{
    rdmax_ctx *ctx = ep->ctx;
    if (timeout_ms < 0)
        return rdmax_ep_flush(ep, timeout_ms);  /* RDMAX_ERR_INVALID_PARAM, logged */
    if (ep->state != RDMAX_EP_CONNECTED)
        return ep->state == RDMAX_EP_CLOSED ? RDMAX_OK : rdmax_ep_query_error(ep);
    ep->in_call++;  /* ep is told after this returns (rdmax__state_tell) */
    rdmax_status st = rdmax_ep_flush(ep, timeout_ms);
    if (st == RDMAX_OK && ep->state == RDMAX_EP_CONNECTED && ep->qp->qp_type == IBV_QPT_RC) {
        /* The goodbye: a signaled zero-length send that returns our credits, flagged CLOSE. It may use
           the credit kept for grants, so it never waits for one. */
        int64_t deadline = rdmax__now_ms() + timeout_ms;
        while ((st = rdmax__ep_check(ep)) == RDMAX_ERR_NO_RESOURCE && rdmax__now_ms() < deadline)
            rdmax_progress(ctx);
        if (st == RDMAX_OK && ep->tx_credits == 0)
            st = RDMAX_ERR_NO_RESOURCE;
        if (st == RDMAX_OK) {
            struct ibv_send_wr *wr = rdmax__ep_wr(ep, IBV_WR_SEND_WITH_IMM);
            wr->num_sge = 0;
            wr->imm_data = RDMAX__LE32(RDMAX__IMM_GRANT | RDMAX__IMM_CLOSE | ep->rx_unreturned);
            ep->sig_at = ep->sq_head;  /* force this one signaled */
            st = rdmax__ep_post(ep, wr, NULL, RDMAX_OP_CLOSE, 0, 0, NULL);
            if (st == RDMAX_OK) {
                ep->tx_credits--;
                ep->rx_unreturned = 0;
                ep->bye = 1;  /* (rdma_cm: the peer's DISCONNECTED may come before the completion, see >>cm) */
                st = rdmax_ep_flush(ep, timeout_ms);
            }
        }
    }
    if (ep->state == RDMAX_EP_CONNECTED)
        rdmax__ep_closed(ep, 0);
    if (ep->cm_id)  /* rdma_cm: the peer sees DISCONNECTED, also when the goodbye could not go */
        rdma_disconnect(ep->cm_id);
    ep->bye = 0;
    rdmax__ep_call_end(ep);
    return st;
}

/* One device event for ctx. ep: the endpoint of a QP event (NULL: find it by the QP number in arg, for an
   event another context read); arg: the port of a port event; srq: the SRQ of an SRQ event (compared,
   never dereferenced: its pool may be gone). */
static void rdmax__dev_event(rdmax_ctx *ctx, enum ibv_event_type type, rdmax_ep *ep, uint32_t arg, void *srq)
{
    switch (type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR:
#if RDMAX__HAS_UD
        if (!ep && ctx->ud && ctx->ud->qp && ctx->ud->qp->qp_num == arg) {
            rdmax__ud_fail_all(ctx, ibv_event_type_str(type));
            break;
        }
#endif
        for (uint32_t i = 0; !ep && i < ctx->eps_cap; i++)
            if (ctx->eps[i].ep && ctx->eps[i].ep->qp && ctx->eps[i].ep->qp->qp_num == arg)
                ep = ctx->eps[i].ep;
        if (ep)
            rdmax__ep_fail_why(ep, RDMAX_ERR_DEVICE, IBV_WC_FATAL_ERR, 1, "asynchronous QP error: %s",
                               ibv_event_type_str(type));
        break;
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_PORT_ACTIVE:
        if ((uint8_t)arg != ctx->attr.port)
            break;
        ctx->port_up = type == IBV_EVENT_PORT_ACTIVE;
        if (!ctx->port_up)
            ctx->port_down_ms = rdmax__now_ms();
        RDMAX__PROFILE_EVENT(ctx, ctx->port_up ? RDMAX_PROFILE_EVENT_PORT_ACTIVE : RDMAX_PROFILE_EVENT_PORT_DOWN,
                             NULL, ctx->attr.port);
        rdmax__log(ctx, ctx->port_up ? RDMAX_LOG_INFO : RDMAX_LOG_WARN, RDMAX_LOG_ITEM_DEVICE_EVENT, "device %s port %u: %s", ctx->attr.name,
                   ctx->attr.port, ctx->port_up ? "port active again" : "port down (link cut?)");
        break;
    case IBV_EVENT_DEVICE_FATAL:
        ctx->dev_dead = 1;
        RDMAX__PROFILE_EVENT(ctx, RDMAX_PROFILE_EVENT_DEVICE, NULL, (uint64_t)type);
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_DEVICE_FATAL, "device %s: device fatal error: every endpoint fails", ctx->attr.name);
        for (uint32_t i = 0; i < ctx->eps_cap; i++)
            if (ctx->eps[i].ep)
                rdmax__ep_fail_why(ctx->eps[i].ep, RDMAX_ERR_DEVICE, IBV_WC_FATAL_ERR, 1, "device fatal error");
        break;
    case IBV_EVENT_SRQ_LIMIT_REACHED:
        ctx->cnt.srq_limit_events++;  /* (rdmax makes no SRQ since each endpoint has its own queue: >>srq) */
        (void)srq;
        break;
    case IBV_EVENT_CQ_ERR:
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_GID_CHANGE:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
        RDMAX__PROFILE_EVENT(ctx, RDMAX_PROFILE_EVENT_DEVICE, NULL, (uint64_t)type);
        rdmax__log(ctx, type == IBV_EVENT_CQ_ERR || type == IBV_EVENT_SRQ_ERR ? RDMAX_LOG_ERROR : RDMAX_LOG_INFO, RDMAX_LOG_ITEM_DEVICE_EVENT,
                   "device %s port %u: %s", ctx->attr.name, ctx->attr.port, ibv_event_type_str(type));
        break;
    default:  /* COMM_EST, SQ_DRAINED, LAST_WQE_REACHED: nothing to do */
        break;
    }
}

/* Asynchronous events of the device, read without blocking. A QP event names its endpoint through
   qp_context, an SRQ or CQ event its context through srq_context / cq_context; ibv_destroy_qp waits for
   the events of its QP to be acknowledged, so the endpoint is alive while we look at it. Contexts that
   share the device (desc.parent) share its async fd: whichever reads an event handles its own and queues
   the others' (by QP number, never by pointer: the owner may destroy the endpoint before it looks), and
   each context takes its queued events here. Port and device events go to every context. */
static void rdmax__async_events(rdmax_ctx *ctx)
{
    struct rdmax__dev *dv = ctx->dev;
    struct { int type; rdmax_ep *ep; uint32_t arg; void *obj; } mine[16];
    int more = dv != NULL;  /* NULL: a context that failed before it had a device */
    while (more) {
        int n = 0;
        more = 0;
        pthread_mutex_lock(&dv->lock);
        for (uint32_t i = 0; i < dv->n_ev && n < 16;) {  /* events another context read for us */
            if (dv->ev[i].to != ctx) {
                i++;
                continue;
            }
            mine[n].type = dv->ev[i].type;
            mine[n].ep = NULL;
            mine[n].obj = dv->ev[i].obj;
            mine[n++].arg = dv->ev[i].arg;
            dv->ev[i] = dv->ev[--dv->n_ev];
        }
        struct ibv_async_event ev;
        while (n < 16 && ibv_get_async_event(ctx->verbs, &ev) == 0) {
            rdmax_ctx *owner = NULL;  /* NULL: every context */
            rdmax_ep *ep = NULL;
            void *obj = NULL;
            uint32_t arg = ev.element.port_num;
            switch (ev.event_type) {
            case IBV_EVENT_COMM_EST:
            case IBV_EVENT_SQ_DRAINED:
            case IBV_EVENT_QP_LAST_WQE_REACHED:
                ibv_ack_async_event(&ev);  /* nothing to do for anyone */
                continue;
            case IBV_EVENT_QP_FATAL:
            case IBV_EVENT_QP_REQ_ERR:
            case IBV_EVENT_QP_ACCESS_ERR:
            case IBV_EVENT_PATH_MIG_ERR:
                ep = (rdmax_ep *)ev.element.qp->qp_context;
                arg = ev.element.qp->qp_num;
                owner = ep ? ep->ctx : NULL;  /* a UD QP (no endpoint of its own): its context knows the number */
                break;
            case IBV_EVENT_SRQ_ERR:
            case IBV_EVENT_SRQ_LIMIT_REACHED:
                owner = (rdmax_ctx *)ev.element.srq->srq_context;
                obj = ev.element.srq;
                break;
            case IBV_EVENT_CQ_ERR:
                owner = (rdmax_ctx *)ev.element.cq->cq_context;
                break;
            default:
                break;
            }
            for (rdmax_ctx *c = dv->ctxs; c; c = c->dev_next) {
                if (owner && c != owner)
                    continue;
                if (c == ctx) {
                    mine[n].type = ev.event_type;
                    mine[n].ep = ep;
                    mine[n].obj = obj;
                    mine[n++].arg = arg;
                } else if (dv->n_ev < RDMAX__DEV_EVQ) {
                    dv->ev[dv->n_ev].to = c;
                    dv->ev[dv->n_ev].type = ev.event_type;
                    dv->ev[dv->n_ev].obj = obj;
                    dv->ev[dv->n_ev++].arg = arg;
                } else {
                    dv->ev_lost++;
                }
            }
            ibv_ack_async_event(&ev);
            more = n == 16;
        }
        pthread_mutex_unlock(&dv->lock);
        /* Handled outside the lock (logging and profile callbacks). An endpoint named by pointer is ours:
           only this thread could destroy it. */
        for (int i = 0; i < n; i++)
            rdmax__dev_event(ctx, (enum ibv_event_type)mine[i].type, mine[i].ep, mine[i].arg, mine[i].obj);
    }
}

/* First slot from the tail that asked for a completion: without one nothing outstanding will ever
   report (unsignaled requests wait for a later signaled one or a flush), so the watchdog waits. */
static int rdmax__ep_expects_completion(const rdmax_ep *ep)
{
    for (uint32_t i = ep->sq_tail; i != ep->sq_head; i++)
        if (ep->slots[i & ep->sq_mask].signaled)
            return 1;
    return 0;
}

/* Zero-length RDMA write: no buffer and no receive on the peer, but it needs an answer from the peer's
   device, so a vanished peer shows as retry exceeded within the RC retry time. It goes while requests
   wait too (rdmax__ep_check would refuse it then): requests waiting for credits from a dead peer are
   exactly the case it must find, and a write that delivers nothing cannot overtake them. */
static void rdmax__keepalive(rdmax_ep *ep)
{
    if (rdmax__ep_sq_avail(ep) == 0 || rdmax__scq_free(ep->ctx) == 0)
        return;
    rdmax_rbuf r0 = rdmax__ep_remote0(ep);
    struct ibv_send_wr *wr = rdmax__ep_wr(ep, IBV_WR_RDMA_WRITE);
    wr->wr.rdma.remote_addr = r0.addr;
    wr->wr.rdma.rkey = r0.rkey;
    wr->num_sge = 0;
    ep->sig_at = ep->sq_head;  /* force this one signaled */
    rdmax__ep_post(ep, wr, NULL, RDMAX_OP_KEEPALIVE, 0, r0.addr, NULL);
}

/* rdmax_progress calls this once a millisecond of rdmax__tick_clock() has passed since its last call, whatever
   the caller did in between. The tick reads the event fds (two system calls) and the fine clock (a system
   call too where the clock source has no vDSO reader, as in a TCG guest), which a spinning caller should
   not pay every millisecond: the coarse clock is read from the vDSO's data page, never a system call, and
   the tick runs once per step of it (a jiffy, 1-4 ms). Not inlined: its timespec would give
   rdmax_progress's idle path a stack frame. */
__attribute__((noinline)) void rdmax__tick_due(rdmax_ctx *ctx)
{
    ctx->tick_at = rdmax__tick_clock() + ctx->tick_clock_ms;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + ctx->clock_skew_ms;
    if (now == ctx->tick_coarse_ms)
        return;
    ctx->tick_coarse_ms = now;
    rdmax__tick(ctx);
}

/* Each endpoint with a state_cb that failed or closed since, once, with its state and reason. Only from a
   health pass outside every callback (no completion or receive loop is walking an endpoint then), so the
   callback may destroy its endpoint or any other: the table is read again after each call. */
static void rdmax__state_tell(rdmax_ctx *ctx)
{
    if (rdmax__in_callback(ctx))
        return;  /* (at a later pass) */
    ctx->state_news = 0;
    for (uint32_t i = 0; i < ctx->eps_cap; i++) {
        rdmax_ep *ep = ctx->eps[i].ep;
        if (!ep || !ep->desc.state_cb || ep->state == ep->state_told ||
            (ep->state != RDMAX_EP_ERROR && ep->state != RDMAX_EP_CLOSED))
            continue;
        if (ep->in_call) {  /* inside its own flush or disconnect, which use ep after this: told once they return */
            ctx->state_news = 1;
            continue;
        }
        ep->state_told = ep->state;
        ep->desc.state_cb(ep, (rdmax_ep_state)ep->state, (rdmax_status)ep->err, ep->desc.user);
    }
}

void rdmax__tick(rdmax_ctx *ctx)
{
    if (ctx->held_news)  /* first: what came before a failure is delivered before it is told */
        rdmax__cm_hold_tell(ctx);
    rdmax__async_events(ctx);
    rdmax__cm_events(ctx);
    rdmax__srq_tick(ctx);
    if (ctx->state_news)
        rdmax__state_tell(ctx);
    int64_t now = rdmax__health_ms(ctx);
    if (now < ctx->next_tick_ms)
        return;
    ctx->next_tick_ms = now + RDMAX__TICK_MS;
    int64_t gap = now - ctx->last_pass_ms;
    ctx->last_pass_ms = now;
    while (rdmax__poll_send(ctx) > 0)  /* what already completed is not stalled */
        ;
    /* completions a destroy left in the send CQ are gone now: an idle progress skips it again */
    ctx->scq_idle = (int32_t)(ctx->desc.cq_depth - ctx->scq_low);
    for (uint32_t i = 0; i < ctx->eps_cap; i++) {
        rdmax_ep *ep = ctx->eps[i].ep;
        if (!ep || ep->state != RDMAX_EP_CONNECTED || ep->qp->qp_type != IBV_QPT_RC)
            continue;
        /* A gap between passes longer than the endpoint's watchdog bound (the program stopped in a
           debugger, or suspended) says nothing about its operations: their clock starts anew. Any shorter
           gap counts, so the bounds hold for a caller that drives progress at least once per bound. */
        int paused = gap > (int64_t)ep->desc.watchdog_ms;
        /* A QP moved to the error state may flush nothing that says so (no receive posted, or a device
           that drops them): an endpoint whose outstanding requests expect no completion (they ran
           unsignaled) would never learn of it. Asked of the QP only while such requests stand still, once
           a tick. */
        if (!paused && ep->sq_head != ep->sq_tail && ep->sq_tail == ep->wd_tail &&
            !rdmax__ep_expects_completion(ep)) {
            struct ibv_qp_attr qa;
            struct ibv_qp_init_attr qi;
            if (ibv_query_qp(ep->qp, &qa, IBV_QP_STATE, &qi) == 0 && qa.qp_state == IBV_QPS_ERR) {
                rdmax__ep_flush_seen(ep);  /* the flush check polls first: an error completion comes first */
                continue;
            }
        }
        if (paused || ep->sq_tail != ep->wd_tail || !rdmax__ep_expects_completion(ep)) {
            ep->wd_tail = ep->sq_tail;
            ep->wd_ms = now;
        } else if (ep->desc.watchdog_ms != RDMAX_OFF && now - ep->wd_ms > (int64_t)ep->desc.watchdog_ms) {
            rdmax__ep_fail_why(ep, RDMAX_ERR_STALLED, IBV_WC_RETRY_EXC_ERR, 1,
                               "watchdog: %u operations outstanding and none completed for %lld ms (bound %u ms; "
                               "the RC retry time is %lld ms)", ep->sq_head - ep->sq_tail,
                               (long long)(now - ep->wd_ms), ep->desc.watchdog_ms, (long long)rdmax__retry_ms(ep));
            continue;
        }
        if (ep->sq_head != ep->ka_head) {  /* (a keepalive after a pause does no harm) */
            ep->ka_head = ep->sq_head;
            ep->ka_ms = now;
        } else if (ep->desc.keepalive_ms != RDMAX_OFF && ep->sq_head == ep->sq_tail &&
                   now - ep->ka_ms >= (int64_t)ep->desc.keepalive_ms) {
            rdmax__keepalive(ep);
            ep->ka_head = ep->sq_head;
            ep->ka_ms = now;
        }
    }
    if (ctx->flush_check)  /* an endpoint found its QP in the error state above */
        rdmax__flush_check(ctx);
}

/* ---- >>pending: the pending queue: requests that wait for room ----------------------------------- */

/* The operation a request describes, posted directly. */
static rdmax_status rdmax__req_exec(rdmax_req *req)
{
    rdmax_ep *ep = req->rdmax__ep;
    switch (req->op) {
    case RDMAX_OP_SEND:
        return rdmax_send(ep, req->buf, req->len, req->mem, req->comp);
#if RDMAX__HAS_RC
    case RDMAX_OP_PUT:
        return rdmax_put(ep, req->buf, req->len, req->mem, req->raddr, req->rkey, req->comp);
    case RDMAX_OP_PUT_IMM:
        return rdmax_put_imm(ep, req->buf, req->len, req->mem, req->raddr, req->rkey, (uint32_t)req->arg0, req->comp);
    case RDMAX_OP_GET:
        return rdmax_get(ep, (void *)(uintptr_t)req->buf, req->len, req->mem, req->raddr, req->rkey, req->comp);
    case RDMAX_OP_FADD:
        return rdmax_fadd(ep, (uint64_t *)(uintptr_t)req->buf, req->mem, req->raddr, req->rkey, req->arg0, req->comp);
    case RDMAX_OP_CSWAP:
        return rdmax_cswap(ep, (uint64_t *)(uintptr_t)req->buf, req->mem, req->raddr, req->rkey, req->arg0,
                           req->arg1, req->comp);
#endif
    default:
        return RDMAX_ERR_INVALID_PARAM;
    }
}

static rdmax__arb_result rdmax__dispatch_cb(rdmax__arb *arb, rdmax__arb_group *g, rdmax__arb_elem *e, void *arg)
{
    (void)arb;
    (void)g;
    rdmax_ctx *ctx = (rdmax_ctx *)arg;
    rdmax_req *req = (rdmax_req *)(void *)((char *)e - offsetof(rdmax_req, rdmax__elem));
    int explicit_cb = req->cb != NULL;
    rdmax_comp *comp = req->comp;
    ctx->disp_ep = req->rdmax__ep;
    rdmax_status st = explicit_cb ? req->cb(req) : rdmax__req_exec(req);
    ctx->disp_ep = NULL;
    /* From here on neither the endpoint (the callback may have destroyed it) nor, for explicit requests,
       the request (its owner may have freed it) is touched. */
    if (st == RDMAX_ERR_NO_RESOURCE)
        return rdmax__scq_free(ctx) == 0 ? RDMAX__ARB_CB_STOP : RDMAX__ARB_CB_DESCHED;
    if (!explicit_cb && comp && st != RDMAX_INPROGRESS)
        rdmax__complete(comp, st);  /* done at once (inline), or failed */
    return RDMAX__ARB_CB_REMOVE;
}

size_t rdmax__dispatch(rdmax_ctx *ctx)
{
    RDMAX__PROF_BEGIN(ctx, DISPATCH);
    size_t n = rdmax__arb_dispatch(&ctx->arb, 1, rdmax__dispatch_cb, ctx);
    RDMAX__PROF_END(ctx, DISPATCH);
    ctx->cnt.dispatched += n;
    return n;
}

/* Out of line even beside the inline progress (a TU with the implementation): n must not be live
   across a call of the idle path. */
__attribute__((noinline)) int rdmax__dispatch_then(rdmax_ctx *ctx, int n)
{
    rdmax__dispatch(ctx);
    return n;
}

__attribute__((noinline)) int rdmax__progress_more(rdmax_ctx *ctx, int n)
{
    return n + rdmax__progress_send(ctx, 0);
}

static int rdmax__req_has_room(const rdmax_ep *ep, const rdmax_req *req)
{
    if (rdmax__ep_sq_avail(ep) == 0 || rdmax__scq_free(ep->ctx) == 0)
        return 0;
    if (req->op == RDMAX_OP_SEND || req->op == RDMAX_OP_PUT_IMM)
        return ep->tx_credits > 1;
    if (req->op == RDMAX_OP_GET || req->op == RDMAX_OP_FADD || req->op == RDMAX_OP_CSWAP)
        return ep->rd_avail > 0;
    return 1;
}

static void rdmax__req_queue(rdmax_ep *ep, rdmax_req *req)
{
    req->rdmax__ep = ep;
    rdmax__arb_elem_init(&req->rdmax__elem);
    rdmax__arb_group_push(&ep->ctx->arb, &ep->group, &req->rdmax__elem);
    rdmax__arb_group_schedule(&ep->ctx->arb, &ep->group);
    rdmax__ep_block(ep, RDMAX__BLK_PENDING);  /* direct posts go behind it */
}

rdmax_status rdmax_ep_pending_add(rdmax_ep *ep, rdmax_req *req)
{
    if (!req->cb)
        return RDMAX_ERR_INVALID_PARAM;
    if (ep->state != RDMAX_EP_CONNECTED)
        return ep->state == RDMAX_EP_ERROR ? RDMAX_ERR_ENDPOINT : RDMAX_ERR_NOT_CONNECTED;
    if (ep->group.count == 0 && rdmax__req_has_room(ep, req))
        return RDMAX_BUSY;  /* nothing to wait for: post now */
    rdmax__req_queue(ep, req);
    return RDMAX_OK;
}

rdmax_status rdmax_req_post(rdmax_ep *ep, rdmax_req *req)
{
    if (req->cb || !req->comp)
        return RDMAX_ERR_INVALID_PARAM;
    req->rdmax__ep = ep;
    if (ep->group.count == 0) {
        rdmax_status st = rdmax__req_exec(req);
        if (st != RDMAX_ERR_NO_RESOURCE)
            return st;
    }
    if (ep->state != RDMAX_EP_CONNECTED)
        return ep->state == RDMAX_EP_ERROR ? RDMAX_ERR_ENDPOINT : RDMAX_ERR_NOT_CONNECTED;
    rdmax__req_queue(ep, req);
    return RDMAX_INPROGRESS;
}

static void rdmax__purge_cb(rdmax__arb *arb, rdmax__arb_group *g, rdmax__arb_elem *e, void *arg)
{
    (void)arb;
    (void)g;
    (void)arg;
    rdmax_req *req = (rdmax_req *)(void *)((char *)e - offsetof(rdmax_req, rdmax__elem));
    if (req->comp)
        rdmax__complete(req->comp, RDMAX_ERR_CANCELED);
}

void rdmax_ep_pending_purge(rdmax_ep *ep)
{
    rdmax__arb_group_purge(&ep->ctx->arb, &ep->group, rdmax__purge_cb, ep->ctx);
}

/* ---- >>admit: admission by a shared secret: SHA-256, HMAC, the proofs ---------------------------- */
/* A listener with a secret serves only clients that prove they know it, and proves it back to them; the
   secret itself never goes on the wire. Over TCP (>>oob), when the client or the listener has a secret:
       listener -> client   hello_s                        (on accept, before it reads anything)
       client -> listener   hello_c, then record_c | HMAC(k, "rdmax client" | hello_s | hello_c | record_c)
       listener -> client   record_s | HMAC(k, "rdmax server" | hello_c | hello_s | record_c | record_s)
   then the ready bytes as before. A hello is magic | version | length 32 | 8 zero bytes | a 16-byte nonce
   from getrandom. The listener checks the client's MAC before it makes the endpoint (no QP for a client
   that cannot prove the secret); the client checks the listener's before its QP is connected. Each side's
   fresh nonce makes a recorded handshake useless (replayed, it meets another hello_s); the MACs cover
   both records (QP numbers, GIDs, rkeys), so a man in the middle cannot swap them. A listener that
   refuses says so (magic | version | length 10 | status s16) and closes, so the client reports the
   listener's RDMAX_ERR_OOB_AUTH rather than a closed socket. Without a secret on either side nothing of
   this is sent: two rdmax without secrets exchange their records as before. Hello and refusal carry
   RDMAX__ADMIT_VERSION, one past the record's: an rdmax from before admission refuses them as a newer
   version instead of waiting. rdma_cm (>>cm) carries its proof in the REQ's private data instead.
   SHA-256 is FIPS 180-4's, HMAC RFC 2104's, written here to need no crypto library; tests/oob_test
   checks them against FIPS 180-2's and RFC 4231's vectors. */

#define RDMAX__ADMIT_VERSION (RDMAX_CONN_RECORD_VERSION + 1)
#define RDMAX__HELLO_SIZE 32
#define RDMAX__REFUSAL_SIZE 10
#define RDMAX__MAC_SIZE 32

typedef struct rdmax__sha256 {
    uint32_t h[8];
    uint64_t n;                 /* bytes hashed so far */
    uint8_t buf[64];
} rdmax__sha256;

static uint32_t rdmax__ror32(uint32_t x, int r) { return x >> r | x << (32 - r); }

static void rdmax__sha256_block(uint32_t h[8], const uint8_t *p)
{
    static const uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
    uint32_t w[64], v[8];
    for (int i = 0; i < 16; i++)
        w[i] = rdmax__get32(p + 4 * i);
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = rdmax__ror32(w[i - 15], 7) ^ rdmax__ror32(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = rdmax__ror32(w[i - 2], 17) ^ rdmax__ror32(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    memcpy(v, h, sizeof v);
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = v[7] + (rdmax__ror32(v[4], 6) ^ rdmax__ror32(v[4], 11) ^ rdmax__ror32(v[4], 25)) +
                      ((v[4] & v[5]) ^ (~v[4] & v[6])) + k[i] + w[i];
        uint32_t t2 = (rdmax__ror32(v[0], 2) ^ rdmax__ror32(v[0], 13) ^ rdmax__ror32(v[0], 22)) +
                      ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
        memmove(v + 1, v, 7 * sizeof v[0]);
        v[4] += t1;
        v[0] = t1 + t2;
    }
    for (int i = 0; i < 8; i++)
        h[i] += v[i];
}

static void rdmax__sha256_init(rdmax__sha256 *s)
{
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, h0, sizeof h0);
    s->n = 0;
}

static void rdmax__sha256_update(rdmax__sha256 *s, const void *data, size_t n)
{
    const uint8_t *p = (const uint8_t *)data;
    while (n) {
        size_t at = (size_t)(s->n % 64), take = 64 - at < n ? 64 - at : n;
        memcpy(s->buf + at, p, take);
        s->n += take;
        p += take;
        n -= take;
        if (at + take == 64)
            rdmax__sha256_block(s->h, s->buf);
    }
}

static void rdmax__sha256_final(rdmax__sha256 *s, uint8_t out[32])
{
    uint64_t bits = s->n * 8;
    uint8_t pad[72] = {0x80};
    size_t at = (size_t)(s->n % 64), padn = (at < 56 ? 56 : 120) - at;
    rdmax__put64(pad + padn, bits);
    rdmax__sha256_update(s, pad, padn + 8);
    for (int i = 0; i < 8; i++)
        rdmax__put32(out + 4 * i, s->h[i]);
}

/* HMAC-SHA-256: inner and outer hash, keyed once. */
typedef struct rdmax__hmac {
    rdmax__sha256 in, out;
} rdmax__hmac;

static void rdmax__hmac_init(rdmax__hmac *m, const void *key, size_t n)
{
    uint8_t k[64], pad[64];
    memset(k, 0, sizeof k);
    if (n > 64) {  /* a key longer than a block is hashed first */
        rdmax__sha256_init(&m->in);
        rdmax__sha256_update(&m->in, key, n);
        rdmax__sha256_final(&m->in, k);
    } else if (n) {
        memcpy(k, key, n);
    }
    for (int i = 0; i < 64; i++)
        pad[i] = k[i] ^ 0x36;
    rdmax__sha256_init(&m->in);
    rdmax__sha256_update(&m->in, pad, 64);
    for (int i = 0; i < 64; i++)
        pad[i] = k[i] ^ 0x5c;
    rdmax__sha256_init(&m->out);
    rdmax__sha256_update(&m->out, pad, 64);
    rdmax__wipe(k, sizeof k);
    rdmax__wipe(pad, sizeof pad);
}

static void rdmax__hmac_update(rdmax__hmac *m, const void *data, size_t n)
{
    rdmax__sha256_update(&m->in, data, n);
}

static void rdmax__hmac_final(rdmax__hmac *m, uint8_t mac[RDMAX__MAC_SIZE])
{
    uint8_t d[32];
    rdmax__sha256_final(&m->in, d);
    rdmax__sha256_update(&m->out, d, sizeof d);
    rdmax__sha256_final(&m->out, mac);
    rdmax__wipe(m, sizeof *m);
}

/* Compares in time that does not depend on where the MACs differ. */
static int rdmax__mac_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint8_t d = 0;
    for (size_t i = 0; i < n; i++)
        d |= (uint8_t)(a[i] ^ b[i]);
    return d == 0;
}

/* HMAC(ctx's secret, label | p[0] | p[1] | ...): n parts, each a pointer and a length. */
static void rdmax__admit_mac(const rdmax_ctx *ctx, const char *label, const void *const *p, const size_t *len, int n,
                             uint8_t mac[RDMAX__MAC_SIZE])
{
    rdmax__hmac m;
    rdmax__hmac_init(&m, ctx->secret, ctx->desc.secret_len);
    rdmax__hmac_update(&m, label, strlen(label));
    for (int i = 0; i < n; i++)
        rdmax__hmac_update(&m, p[i], len[i]);
    rdmax__hmac_final(&m, mac);
}

/* n (at most 256) random bytes for a nonce; RDMAX_ERR_IO when the kernel gives none. */
static rdmax_status rdmax__random(void *p, size_t n)
{
    ssize_t k;
    while ((k = getrandom(p, n, 0)) < 0 && errno == EINTR)
        ;
    return k == (ssize_t)n ? RDMAX_OK : RDMAX_ERR_IO;
}

/* Our hello, with a fresh nonce. */
static rdmax_status rdmax__hello_make(uint8_t out[RDMAX__HELLO_SIZE])
{
    memset(out, 0, RDMAX__HELLO_SIZE);
    rdmax__put32(out, RDMAX_CONN_RECORD_MAGIC);
    rdmax__put16(out + 4, RDMAX__ADMIT_VERSION);
    rdmax__put16(out + 6, RDMAX__HELLO_SIZE);
    return rdmax__random(out + 16, 16);
}

/* What an 8-byte head announces: 1 a hello, 2 a refusal, 0 anything else (a record, checked as one). */
static int rdmax__admit_kind(const uint8_t *h)
{
    if (rdmax__get32(h) != RDMAX_CONN_RECORD_MAGIC || rdmax__get16(h + 4) != RDMAX__ADMIT_VERSION)
        return 0;
    return rdmax__get16(h + 6) == RDMAX__HELLO_SIZE ? 1 : rdmax__get16(h + 6) == RDMAX__REFUSAL_SIZE ? 2 : 0;
}

/* The listener's refusal: its status, and it closes. Sent without waiting (a few bytes on a socket that
   has room); a client that is gone loses nothing. */
static void rdmax__admit_refuse(int fd, rdmax_status st)
{
    uint8_t b[RDMAX__REFUSAL_SIZE];
    rdmax__put32(b, RDMAX_CONN_RECORD_MAGIC);
    rdmax__put16(b + 4, RDMAX__ADMIT_VERSION);
    rdmax__put16(b + 6, RDMAX__REFUSAL_SIZE);
    rdmax__put16(b + 8, (uint16_t)(int16_t)st);
    if (send(fd, b, sizeof b, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        return;  /* the client left: nobody to tell */
}

/* The status in a refusal: one of ours, else RDMAX_ERR_CONNECT. */
static rdmax_status rdmax__refusal_status(const uint8_t *b)
{
    int16_t s = (int16_t)rdmax__get16(b + 8);
    return s <= RDMAX_ERR_NO_RESOURCE && s >= RDMAX_ERR_OOB_AUTH ? (rdmax_status)s : RDMAX_ERR_CONNECT;
}

/* The client's half (and rdmax_oob_exchange's, ctx NULL): with a secret, our hello, the listener's hello,
   then our record and MAC; the listener's record and MAC, checked before anything uses it. Without one, our
   record first; a hello in reply means the listener wants a secret we do not have. A refusal in place of
   the listener's hello or record gives its status. */
static rdmax_status rdmax__oob_trade(int fd, const rdmax_conn_record *local, rdmax_conn_record *remote, int timeout_ms,
                                     rdmax_ctx *ctx, char *why, size_t why_len)
{
    int64_t deadline = rdmax__now_ms() + (timeout_ms < 0 ? 3600000 : timeout_ms);
    uint8_t mine[RDMAX_CONN_RECORD_SIZE + RDMAX__MAC_SIZE], theirs[RDMAX_CONN_RECORD_SIZE + RDMAX__MAC_SIZE];
    uint8_t hello_c[RDMAX__HELLO_SIZE], hello_s[RDMAX__HELLO_SIZE];
    int admit = ctx && ctx->secret;
    size_t mine_len = rdmax_conn_record_encode(local, mine);
    ssize_t k;
    if (admit) {
        if (rdmax__hello_make(hello_c) != RDMAX_OK) {
            RDMAX__WHY("admission: no random bytes for our nonce: %s", strerror(errno));
            return RDMAX_ERR_IO;
        }
        if (rdmax__write_full(fd, hello_c, sizeof hello_c, deadline)) {
            RDMAX__WHY("admission: sending our hello failed: %s", strerror(errno));
            return errno == ETIMEDOUT ? RDMAX_ERR_TIMEOUT : RDMAX_ERR_IO;
        }
        k = rdmax__read_full(fd, hello_s, 8, deadline);
        int kind = k == 8 ? rdmax__admit_kind(hello_s) : -1;
        if (kind == 2 && rdmax__read_full(fd, hello_s + 8, 2, deadline) == 2) {
            rdmax_status st = rdmax__refusal_status(hello_s);
            RDMAX__WHY("admission: the listener has no shared secret: it refused our hello (%s)", rdmax_status_str(st));
            return st;
        }
        if (k < 0) {
            RDMAX__WHY("admission: waiting for the listener's hello: %s after %d ms",
                       errno == ETIMEDOUT ? "timed out" : strerror(errno), timeout_ms);
            return errno == ETIMEDOUT ? RDMAX_ERR_TIMEOUT : RDMAX_ERR_IO;
        }
        if (kind != 1) {
            RDMAX__WHY("admission: %s", k < 8 ? "the listener closed the connection after our hello (an rdmax "
                                                "from before admission refuses it as a newer version)"
                                              : "the listener answered our hello without its own: it does not "
                                                "prove the shared secret");
            return k < 8 ? RDMAX_ERR_OOB_SHORT : RDMAX_ERR_OOB_AUTH;
        }
        if ((k = rdmax__read_full(fd, hello_s + 8, RDMAX__HELLO_SIZE - 8, deadline)) != RDMAX__HELLO_SIZE - 8) {
            RDMAX__WHY("admission: the listener's hello: %s", k < 0 && errno == ETIMEDOUT ? "timed out" : "cut short");
            return k < 0 && errno == ETIMEDOUT ? RDMAX_ERR_TIMEOUT : RDMAX_ERR_OOB_SHORT;
        }
        const void *p[3] = {hello_s, hello_c, mine};
        size_t n[3] = {RDMAX__HELLO_SIZE, RDMAX__HELLO_SIZE, mine_len};
        rdmax__admit_mac(ctx, "rdmax client", p, n, 3, mine + mine_len);
    }
    /* A failed send is reported only after reading what the peer sent: a peer that closed after a bad
       record is better described by its record than by our EPIPE. */
    int send_err = rdmax__write_full(fd, mine, mine_len + (admit ? RDMAX__MAC_SIZE : 0), deadline) ? errno : 0;
    if (send_err == ETIMEDOUT) {
        RDMAX__WHY("connection record: sending ours timed out after %d ms", timeout_ms);
        return RDMAX_ERR_TIMEOUT;
    }
    /* The head first: a peer of another version may send a record of another size; we never read more
       than our own record's size into our buffer. */
    k = rdmax__read_full(fd, theirs, 8, deadline);
    if (k < 0) {
        RDMAX__WHY("connection record: waiting for the peer's record: %s after %d ms",
                   errno == ETIMEDOUT ? "timed out" : strerror(errno), timeout_ms);
        return errno == ETIMEDOUT ? RDMAX_ERR_TIMEOUT : RDMAX_ERR_IO;
    }
    if (k < 8) {
        RDMAX__WHY("connection record: peer closed after %zd of at least %u bytes", k, RDMAX_CONN_RECORD_HEAD);
        return RDMAX_ERR_OOB_SHORT;
    }
    int kind = rdmax__admit_kind(theirs);
    if (kind == 2 && rdmax__read_full(fd, theirs + 8, 2, deadline) == 2) {
        rdmax_status st = rdmax__refusal_status(theirs);
        if (admit)
            RDMAX__WHY("admission: the listener refused our proof of the shared secret (another secret?)");
        else
            RDMAX__WHY("admission: the listener refused us: %s", rdmax_status_str(st));
        return st;
    }
    if (kind == 1 && !admit) {
        RDMAX__WHY("admission: the listener requires a shared secret; we have none (rdmax_ctx_desc.secret, "
                   "RDMAX_SECRET)");
        return RDMAX_ERR_OOB_AUTH;
    }
    rdmax_status st = rdmax__conn_head_check(theirs, why, why_len);
    if (st != RDMAX_OK)
        return st;
    size_t theirs_len = rdmax__get16(theirs + 6);  /* checked: HEAD .. SIZE */
    size_t want = theirs_len + (admit ? RDMAX__MAC_SIZE : 0);
    k = rdmax__read_full(fd, theirs + 8, want - 8, deadline);
    if (k < 0) {
        RDMAX__WHY("connection record: reading the peer's record: %s",
                   errno == ETIMEDOUT ? "timed out" : strerror(errno));
        return errno == ETIMEDOUT ? RDMAX_ERR_TIMEOUT : RDMAX_ERR_IO;
    }
    if ((size_t)k < want - 8) {
        RDMAX__WHY("connection record: peer closed after %zd of %zu bytes", k + 8, want);
        return RDMAX_ERR_OOB_SHORT;
    }
    if (admit) {  /* the listener's proof, before anything of its record is used */
        uint8_t mac[RDMAX__MAC_SIZE];
        const void *p[4] = {hello_c, hello_s, mine, theirs};
        size_t n[4] = {RDMAX__HELLO_SIZE, RDMAX__HELLO_SIZE, mine_len, theirs_len};
        rdmax__admit_mac(ctx, "rdmax server", p, n, 4, mac);
        if (!rdmax__mac_equal(mac, theirs + theirs_len, RDMAX__MAC_SIZE)) {
            RDMAX__WHY("admission: the listener's proof of the shared secret is wrong (another secret, or not "
                       "the listener it claims to be)");
            return RDMAX_ERR_OOB_AUTH;
        }
    }
    st = rdmax_conn_record_decode(theirs, theirs_len, remote, why, why_len);
    if (st == RDMAX_OK && send_err) {
        RDMAX__WHY("connection record: sending ours failed: %s", strerror(send_err));
        return RDMAX_ERR_IO;
    }
    return st;
}

/* ---- >>oob: connection setup over TCP: listener, handshakes, accept, connect --------------------- */

/* A listener runs up to handshake_slots handshakes side by side, each non-blocking with its own
   deadline, so a silent, slow or malformed client delays nobody else. The endpoint (QP and receive pool)
   is made only once the client's record has checked out. A flood cannot lock it: a client silent for
   handshake_first_ms goes, and when every slot is taken a new client takes the slot of the handshake
   idle the longest, if it has been idle RDMAX__HS_BUSY_MS at least (a client that is sending is never
   pushed out by a flood of new ones; an honest handshake idles a few ms between its steps). */
#define RDMAX__HS_BUSY_MS 500
struct rdmax__hs {
    int fd;                     /* -1: slot free */
    uint8_t phase;              /* 0: reading the client's hello or record; 1: waiting for its ready byte */
    uint8_t hello;              /* the client's hello came (>>admit): its record is followed by its MAC */
    uint32_t got;
    int64_t start;              /* when it was taken off the backlog */
    int64_t last;               /* when its client last sent bytes (the idlest goes first) */
    int64_t deadline;
    rdmax_ep *ep;
    uint8_t rec[RDMAX_CONN_RECORD_SIZE + RDMAX__MAC_SIZE];
    uint8_t hello_s[RDMAX__HELLO_SIZE]; /* ours, sent on accept when the context has a secret */
    uint8_t hello_c[RDMAX__HELLO_SIZE];
    char peer[64];
};

struct rdmax_listener {
    rdmax_ctx *ctx;
    int fd;
    int epfd;                   /* epoll over fd and the handshakes: rdmax_listener_query_fd() */
    uint16_t port;
    uint32_t n_hs;
    uint32_t next_hs;           /* where the next rdmax_accept starts stepping (round-robin) */
    uint32_t slots;             /* rdmax_ctx_desc.handshake_slots: hs[] (or cm_hs[]) holds that many */
    uint64_t evicted;           /* handshakes pushed out by a new client while all slots were taken */
    struct rdmax__hs *hs;
    /* RDMAX_SETUP_CM (>>cm): the listening id, its event channel and the handshakes; NULL otherwise */
    struct rdma_event_channel *cm_ch;
    struct rdma_cm_id *cm_id;
    struct rdmax__cm_hs *cm_hs;
    struct rdmax__cm_seen *cm_seen; /* with a secret: the proofs of the last RDMAX__CM_SEEN clients (>>cm) */
    uint32_t cm_seen_at;
    int64_t cm_seen_floor;      /* a proof not newer than this (s) may repeat one no longer held: refused */
    int64_t cm_drained;         /* when the channel was last found empty: every RTU that came before is read */
    rdmax_listener *next;       /* ctx->listeners */
};

static void rdmax__listener_link(rdmax_listener *l)
{
    l->next = l->ctx->listeners;
    l->ctx->listeners = l;
}

static void rdmax__listener_unlink(rdmax_listener *l)
{
    for (rdmax_listener **p = &l->ctx->listeners; *p; p = &(*p)->next)
        if (*p == l) {
            *p = l->next;
            return;
        }
}

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

/* The address a listener binds: host NULL is IPv6 any, which serves IPv4 too. */
static rdmax_status rdmax__passive_addr(rdmax_ctx *ctx, const char *host, uint16_t port, struct addrinfo **res)
{
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = host ? AF_UNSPEC : AF_INET6;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    int rc = getaddrinfo(host, ps, &hints, res);
    if (rc) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_LISTEN,
                   "listen: cannot resolve %s: %s", host ? host : "(any)", gai_strerror(rc));
        return RDMAX_ERR_INVALID_PARAM;
    }
    return RDMAX_OK;
}

/* The addresses connect tries, in getaddrinfo's order (TCP record exchange and rdma_cm alike). */
static rdmax_status rdmax__active_addr(rdmax_ctx *ctx, const char *host, uint16_t port, struct addrinfo **res)
{
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    char ps[8];
    snprintf(ps, sizeof ps, "%u", port);
    int rc = getaddrinfo(host, ps, &hints, res);
    if (rc) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_CONNECT,
                   "connect: cannot resolve %s: %s", host, gai_strerror(rc));
        return RDMAX_ERR_CONNECT;
    }
    return RDMAX_OK;
}

rdmax_status rdmax_listener_create(rdmax_ctx *ctx, const char *host, uint16_t port, rdmax_listener **out)
{
    *out = NULL;
    if (ctx->desc.conn_setup == RDMAX_SETUP_CM)
        return rdmax__cm_listen(ctx, host, port, out);
    struct addrinfo *res = NULL;
    if (rdmax__passive_addr(ctx, host, port, &res) != RDMAX_OK)
        return RDMAX_ERR_INVALID_PARAM;
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1, zero = 0;
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (res->ai_family == AF_INET6)  /* one socket serves IPv4 and IPv6 */
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    }
    uint32_t slots = ctx->desc.handshake_slots;
    if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, (int)(slots > 65535 ? 65535 : slots))) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_LISTEN,
                   "listen: %s port %u: %s", host ? host : "(any)", port, strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(res);
        return RDMAX_ERR_IO;
    }
    freeaddrinfo(res);
    rdmax_listener *l = (rdmax_listener *)rdmax__alloc(ctx, sizeof *l);
    struct rdmax__hs *hs = (struct rdmax__hs *)rdmax__alloc(ctx, slots * sizeof *hs);
    int epfd = epoll_create1(EPOLL_CLOEXEC);
    if (!l || !hs || epfd < 0) {
        close(fd);
        if (epfd >= 0)
            close(epfd);
        rdmax__free(ctx, hs);
        rdmax__free(ctx, l);
        return l && hs ? RDMAX_ERR_IO : RDMAX_ERR_NO_MEMORY;
    }
    l->hs = hs;
    l->slots = slots;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.u32 = UINT32_MAX;
    epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev);
    for (uint32_t i = 0; i < slots; i++)
        l->hs[i].fd = -1;
    l->epfd = epfd;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    l->port = ss.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&ss)->sin_port)
                                      : ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    l->ctx = ctx;
    l->fd = fd;
    rdmax__listener_link(l);
    *out = l;
    return RDMAX_OK;
}

uint16_t rdmax_listener_query_port(const rdmax_listener *l)
{
    return l->port;
}

int rdmax_listener_query_fd(const rdmax_listener *l)
{
    if (l->cm_ch)
        return l->cm_ch->fd;
    return l->epfd;
}

/* rdmax_wait's poll set: the completion channel, the async fd, then each listener's fd. Beyond the
   stack's room (RDMAX__WAIT_STACK) the set is allocated (rdmax_wait is no fast path); NULL only when
   that fails. */
static struct pollfd *rdmax__wait_fds(rdmax_ctx *ctx, struct pollfd *stack, nfds_t *n)
{
    nfds_t k = 2;
    for (rdmax_listener *l = ctx->listeners; l; l = l->next)
        k++;
    struct pollfd *p = k <= RDMAX__WAIT_STACK ? stack : (struct pollfd *)rdmax__alloc(ctx, k * sizeof *p);
    if (!p)
        return NULL;
    memset(p, 0, k * sizeof *p);
    p[0].fd = ctx->channel->fd;
    p[1].fd = ctx->verbs->async_fd;
    k = 2;
    for (rdmax_listener *l = ctx->listeners; l; l = l->next)
        p[k++].fd = rdmax_listener_query_fd(l);
    for (nfds_t i = 0; i < k; i++)
        p[i].events = POLLIN;
    *n = k;
    return p;
}

static void rdmax__hs_end(rdmax_listener *l, struct rdmax__hs *h)
{
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, h->fd, NULL);
    close(h->fd);
    h->fd = -1;
    if (h->ep)
        rdmax_ep_destroy(h->ep);
    h->ep = NULL;
    l->n_hs--;
}

void rdmax_listener_destroy(rdmax_listener *l)
{
    if (!l)
        return;
    rdmax__listener_unlink(l);
    if (l->cm_ch) {
        rdmax__cm_listener_close(l);
        return;
    }
    for (uint32_t i = 0; i < l->slots; i++)
        if (l->hs[i].fd >= 0)
            rdmax__hs_end(l, &l->hs[i]);
    close(l->epfd);
    close(l->fd);
    rdmax__free(l->ctx, l->hs);
    rdmax__free(l->ctx, l);
}

/* Trade ep's record over fd, connect, confirm; ep is destroyed on failure. Used by connect. */
static rdmax_status rdmax__ep_handshake(rdmax_ctx *ctx, int fd, const char *peer, rdmax_ep *ep, rdmax_ep **out,
                                        int timeout_ms)
{
    rdmax_status st;
    snprintf(ep->peer, sizeof ep->peer, "%s", peer);
    rdmax_conn_record me, them;
    char why[200];
    rdmax_ep_query_record(ep, &me);
    st = rdmax__oob_trade(fd, &me, &them, timeout_ms, ctx, why, sizeof why);
    ctx->cnt.auth_refused += st == RDMAX_ERR_OOB_AUTH;
    if (st == RDMAX_OK)
        st = rdmax_ep_connect_record(ep, &them);
    else
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_HANDSHAKE, "device %s, peer %s: %s", ctx->attr.name, peer, why);
    if (st == RDMAX_OK && (st = rdmax__oob_sync(fd, timeout_ms, why, sizeof why)) != RDMAX_OK)
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_HANDSHAKE, "device %s, peer %s: %s", ctx->attr.name, peer, why);
    if (st != RDMAX_OK) {
        rdmax_ep_destroy(ep);
        return st;
    }
    *out = ep;
    return RDMAX_OK;
}

/* Take waiting clients off the backlog into handshake slots; with every slot taken, a new client takes
   the slot of the handshake idle the longest, once idle RDMAX__HS_BUSY_MS; else it waits in the backlog. */
static void rdmax__hs_accept(rdmax_listener *l)
{
    rdmax_ctx *ctx = l->ctx;
    for (;;) {
        int64_t now = rdmax__now_ms();
        uint32_t i = 0;
        if (l->n_hs == l->slots) {
            for (uint32_t k = 1; k < l->slots; k++)
                if (l->hs[k].last < l->hs[i].last)
                    i = k;
            if (now - l->hs[i].last < RDMAX__HS_BUSY_MS)
                return;
        } else {
            while (l->hs[i].fd >= 0)
                i++;
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(l->fd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
                rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_ACCEPT,
                           "accept on port %u: %s", l->port, strerror(errno));
            return;
        }
        if (l->hs[i].fd >= 0) {
            rdmax__log(ctx, RDMAX_LOG_INFO, RDMAX_LOG_ITEM_HANDSHAKE_TIMEOUT,
                       "device %s, client %s: handshake dropped, idle for %lld ms: all %u slots taken and a new "
                       "client came", ctx->attr.name, l->hs[i].peer, (long long)(now - l->hs[i].last), l->slots);
            rdmax__hs_end(l, &l->hs[i]);
            l->evicted++;
        }
        /* With a secret our hello goes first, fresh per client (>>admit); a fresh socket has room for it. */
        uint8_t hello[RDMAX__HELLO_SIZE] = {0};
        if (ctx->secret && (rdmax__hello_make(hello) != RDMAX_OK ||
                            send(fd, hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello)) {
            rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_HANDSHAKE, "device %s: sending our hello to a new "
                       "client failed: %s", ctx->attr.name, strerror(errno));
            close(fd);
            continue;
        }
        struct rdmax__hs *h = &l->hs[i];
        memset(h, 0, sizeof *h);
        memcpy(h->hello_s, hello, sizeof hello);
        h->fd = fd;
        h->start = h->last = now;
        h->deadline = now + ctx->desc.handshake_ms;
        rdmax__sockaddr_str((struct sockaddr *)&ss, h->peer, sizeof h->peer);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct epoll_event ev;
        memset(&ev, 0, sizeof ev);
        ev.events = EPOLLIN;
        ev.data.u32 = i;
        epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev);
        l->n_hs++;
    }
}

/* A client that did not prove the shared secret (>>admit): told with a refusal, logged and counted. */
static rdmax_status rdmax__hs_refuse(rdmax_listener *l, struct rdmax__hs *h, const char *why)
{
    rdmax_ctx *ctx = l->ctx;
    rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_HANDSHAKE, "device %s, client %s: admission refused: %s",
               ctx->attr.name, h->peer, why);
    ctx->cnt.auth_refused++;
    rdmax__admit_refuse(h->fd, RDMAX_ERR_OOB_AUTH);
    return RDMAX_ERR_OOB_AUTH;
}

/* One step of handshake h without blocking: RDMAX_INPROGRESS (more to come), RDMAX_OK (connected: the
   endpoint is in h->ep), or the failure. */
static rdmax_status rdmax__hs_step(rdmax_listener *l, struct rdmax__hs *h, const rdmax_ep_desc *desc)
{
    rdmax_ctx *ctx = l->ctx;
    char why[200];
    size_t why_len = sizeof why;
    if (h->phase == 0) {
        /* the head first, then the rest its length field (checked: at most the largest record) names, and
           after a record the client's MAC if it sent a hello (>>admit) */
        uint32_t want = h->got < 8 ? 8 : rdmax__get16(h->rec + 6);
        if (h->got >= 8 && h->hello)
            want += RDMAX__MAC_SIZE;
        ssize_t k = read(h->fd, h->rec + h->got, want - h->got);
        if (k < 0)
            return errno == EAGAIN || errno == EINTR ? RDMAX_INPROGRESS
                   : errno == ECONNRESET ? RDMAX_ERR_OOB_SHORT : RDMAX_ERR_IO;
        if (k == 0) {
            rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_HANDSHAKE,
                       "device %s, client %s: connection record: peer closed after %u of %u "
                       "bytes", ctx->attr.name, h->peer, h->got,
                       h->got < 8 ? RDMAX_CONN_RECORD_HEAD : rdmax__get16(h->rec + 6));
            return RDMAX_ERR_OOB_SHORT;
        }
        h->got += (uint32_t)k;
        h->last = rdmax__now_ms();
        rdmax_status st = RDMAX_OK;
        int hello = !h->hello && h->got >= 8 && rdmax__admit_kind(h->rec) == 1;
        if (h->got == 8 && hello && !ctx->secret)
            return rdmax__hs_refuse(l, h, "the client has a shared secret and asks this listener to prove one; it "
                                          "has none (rdmax_ctx_desc.secret, RDMAX_SECRET)");
        if (h->got == 8 && !hello && ctx->secret && !h->hello)
            return rdmax__hs_refuse(l, h, "the client sent its record without proving the shared secret (it has "
                                          "none: no hello came first)");
        if (h->got == 8 && !hello)
            st = rdmax__conn_head_check(h->rec, why, why_len);
        if (st == RDMAX_OK && (h->got < 8 || h->got < rdmax__get16(h->rec + 6) + (h->hello ? RDMAX__MAC_SIZE : 0u)))
            return RDMAX_INPROGRESS;
        if (hello) {  /* the record comes next, then its MAC */
            memcpy(h->hello_c, h->rec, RDMAX__HELLO_SIZE);
            h->hello = 1;
            h->got = 0;
            return RDMAX_INPROGRESS;
        }
        size_t rec_len = rdmax__get16(h->rec + 6);
        if (st == RDMAX_OK && h->hello) {
            /* the proof, checked before anything of the record is used: no endpoint for a stranger */
            uint8_t mac[RDMAX__MAC_SIZE];
            const void *p[3] = {h->hello_s, h->hello_c, h->rec};
            size_t n[3] = {RDMAX__HELLO_SIZE, RDMAX__HELLO_SIZE, rec_len};
            rdmax__admit_mac(ctx, "rdmax client", p, n, 3, mac);
            if (!rdmax__mac_equal(mac, h->rec + rec_len, RDMAX__MAC_SIZE))
                return rdmax__hs_refuse(l, h, "the client's proof of the shared secret is wrong (another secret, "
                                              "or a recorded handshake replayed)");
        }
        rdmax_conn_record them, me;
        if (st == RDMAX_OK)
            st = rdmax_conn_record_decode(h->rec, rec_len, &them, why, why_len);
        if (st != RDMAX_OK) {
            rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_HANDSHAKE,
                       "device %s, client %s: %s", ctx->attr.name, h->peer, why);
            return st;
        }
        /* The record checked out: now the endpoint is worth making. Its callbacks and user come from the
           call that returns it (rdmax__ep_adopt); until then it has none, so a message the client sends
           before our ready byte (which that call sends) is dropped and counted, never delivered to
           another call's callback with another call's user. */
        rdmax_ep_desc made;
        memset(&made, 0, sizeof made);
        if (desc)
            made = *desc;
        made.recv_cb = NULL;
        made.imm_cb = NULL;
        made.user = NULL;
        made.state_cb = NULL;
        if ((st = rdmax_ep_create(ctx, &made, &h->ep)) != RDMAX_OK)
            return st;
        snprintf(h->ep->peer, sizeof h->ep->peer, "%s", h->peer);
        if ((st = rdmax_ep_connect_record(h->ep, &them)) != RDMAX_OK)
            return st;
        /* Our record in one write (a fresh socket's buffer takes the largest record); our ready byte only
           from the call that returns the endpoint: the client sends nothing before it. */
        uint8_t msg[RDMAX_CONN_RECORD_SIZE + RDMAX__MAC_SIZE];
        rdmax_ep_query_record(h->ep, &me);
        size_t len = rdmax_conn_record_encode(&me, msg);
        if (h->hello) {  /* our proof: over both hellos and both records */
            const void *p[4] = {h->hello_c, h->hello_s, h->rec, msg};
            size_t n[4] = {RDMAX__HELLO_SIZE, RDMAX__HELLO_SIZE, rec_len, len};
            rdmax__admit_mac(ctx, "rdmax server", p, n, 4, msg + len);
            len += RDMAX__MAC_SIZE;
        }
        if (send(h->fd, msg, len, MSG_NOSIGNAL) != (ssize_t)len) {
            rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_HANDSHAKE,
                       "device %s, client %s: sending our record failed: %s", ctx->attr.name,
                       h->peer, strerror(errno));
            return RDMAX_ERR_IO;
        }
        h->phase = 1;
        return RDMAX_INPROGRESS;
    }
    uint8_t c[2];
    ssize_t k = read(h->fd, c, sizeof c);
    if (k < 0 && (errno == EAGAIN || errno == EINTR))
        return RDMAX_INPROGRESS;
    if (k != 1 || c[0] != 'R') {
        rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_HANDSHAKE,
                   "device %s, client %s: connection: expected the ready byte from the peer, "
                   "got %s", ctx->attr.name, h->peer, k >= 1 ? "other bytes" : "end of stream");
        return RDMAX_ERR_OOB_SYNC;
    }
    return RDMAX_OK;
}

/* The endpoint was made by the call that read its client's record, which may be an earlier call with
   another desc (handshakes run side by side): the application's fields are the returning call's. */
static void rdmax__ep_adopt(rdmax_ep *ep, const rdmax_ep_desc *desc)
{
    rdmax_ep_desc z;
    if (!desc) {
        memset(&z, 0, sizeof z);
        desc = &z;
    }
    ep->desc.recv_cb = desc->recv_cb;
    ep->recv_cb = desc->recv_cb ? desc->recv_cb : rdmax__recv_drop;
    ep->imm_cb = ep->desc.imm_cb = desc->imm_cb;
    ep->user = ep->desc.user = desc->user;
    ep->desc.state_cb = desc->state_cb;
    /* the defaults of rdmax__ep_desc_defaults */
    ep->desc.keepalive_ms = desc->keepalive_ms ? desc->keepalive_ms : 4000;
    ep->desc.watchdog_ms = desc->watchdog_ms ? desc->watchdog_ms : (uint32_t)(2 * rdmax__retry_ms(ep) + 2000);
}

rdmax_status rdmax_accept(rdmax_listener *l, const rdmax_ep_desc *desc, rdmax_ep **out, int timeout_ms)
{
    rdmax_ctx *ctx = l->ctx;
    *out = NULL;
    if (timeout_ms < 0) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_NEGATIVE_TIMEOUT,
                   "accept on port %u: negative timeout %d ms", l->port, timeout_ms);
        return RDMAX_ERR_INVALID_PARAM;
    }
    if (l->cm_ch)
        return rdmax__cm_accept(l, desc, out, timeout_ms);
    int64_t deadline = rdmax__now_ms() + timeout_ms;
    for (;;) {
        rdmax__hs_accept(l);
        int64_t now = rdmax__now_ms(), next = deadline;
        /* Each call returns at the first finished handshake, so it starts where the last one stopped:
           from slot 0 every time, clients in the first slots would keep the others from being stepped
           until their deadline passed (seen with 50 clients connecting 1,000 endpoints). */
        for (uint32_t k = 0; k < l->slots; k++) {
            uint32_t i = (l->next_hs + k) % l->slots;
            struct rdmax__hs *h = &l->hs[i];
            if (h->fd < 0)
                continue;
            rdmax_status st = rdmax__hs_step(l, h, desc);
            int64_t first = h->start + ctx->desc.handshake_first_ms;
            int silent = h->phase == 0 && h->got == 0 && !h->hello;
            if (st == RDMAX_INPROGRESS && (now >= h->deadline || (silent && now >= first))) {
                rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_HANDSHAKE_TIMEOUT,
                           "device %s, client %s: handshake did not finish within %u ms (%s)",
                           ctx->attr.name, h->peer, silent ? ctx->desc.handshake_first_ms : ctx->desc.handshake_ms,
                           silent ? "not one byte" : h->phase ? "no ready byte" : "no whole connection record");
                st = RDMAX_ERR_OOB_TIMEOUT;
            }
            if (st == RDMAX_INPROGRESS) {
                int64_t due = silent && first < h->deadline ? first : h->deadline;
                next = due < next ? due : next;
                continue;
            }
            if (st == RDMAX_OK) {
                rdmax__ep_adopt(h->ep, desc);
                if (send(h->fd, "R", 1, MSG_NOSIGNAL) != 1) {
                    rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_HANDSHAKE,
                               "device %s, client %s: sending our ready byte failed: %s", ctx->attr.name,
                               h->peer, strerror(errno));
                    st = RDMAX_ERR_OOB_SYNC;
                } else {
                    *out = h->ep;
                    h->ep = NULL;
                }
            }
            rdmax__hs_end(l, h);
            l->next_hs = (i + 1) % l->slots;
            return st;
        }
        if (now >= deadline) {
            rdmax__log(ctx, RDMAX_LOG_DEBUG, RDMAX_LOG_ITEM_ACCEPT,
                       "accept: no client connected on port %u within %d ms", l->port,
                       timeout_ms);
            return RDMAX_ERR_TIMEOUT;
        }
        struct epoll_event evs[8];
        int64_t wait = next - now;
        epoll_wait(l->epfd, evs, 8, wait > INT32_MAX ? INT32_MAX : (int)wait);
    }
}

rdmax_status rdmax_connect(rdmax_ctx *ctx, const char *host, uint16_t port, const rdmax_ep_desc *desc,
                           rdmax_ep **out, int timeout_ms)
{
    *out = NULL;
    if (timeout_ms < 0) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_NEGATIVE_TIMEOUT,
                   "connect to %s port %u: negative timeout %d ms", host, port, timeout_ms);
        return RDMAX_ERR_INVALID_PARAM;
    }
    if (ctx->desc.conn_setup == RDMAX_SETUP_CM)
        return rdmax__cm_connect(ctx, host, port, desc, out, timeout_ms);
    struct addrinfo *res = NULL;
    if (rdmax__active_addr(ctx, host, port, &res) != RDMAX_OK)
        return RDMAX_ERR_CONNECT;
    int64_t deadline = rdmax__now_ms() + timeout_ms;
    /* The endpoint first, so our record follows the connection at once: a listener drops a client that
       sends nothing for handshake_first_ms, and making a QP took longer on a loaded host. */
    rdmax_ep *ep;
    rdmax_status st = rdmax_ep_create(ctx, desc, &ep);
    if (st != RDMAX_OK) {
        freeaddrinfo(res);
        return st;
    }
    int fd = -1, err = 0;
    char peer[64] = "?";
    /* A peer that refuses or cannot be reached yet (server not listening, route not up) is tried again
       with backoff until the deadline. */
    int refused = 0;
    for (int backoff = 10;; backoff = backoff < 640 ? backoff * 2 : 1000) {
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
    int64_t left = deadline - rdmax__now_ms();
    int retry = err == ECONNREFUSED || err == ENETUNREACH || err == EHOSTUNREACH || err == ECONNRESET;
    if (retry)
        refused = err;
    else if (err == ETIMEDOUT && refused)
        err = refused;  /* the deadline ran out between refusals: report the refusal */
    if (fd >= 0 || !retry || left <= 0)
        break;
    rdmax__log(ctx, RDMAX_LOG_DEBUG, RDMAX_LOG_ITEM_CONNECT_RETRY,
               "connect: %s port %u: %s; again in %d ms", host, port, strerror(err), backoff);
    usleep((useconds_t)(left < backoff ? left : backoff) * 1000);
    }
    freeaddrinfo(res);
    if (fd < 0) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_CONNECT,
                   "connect: %s port %u (%s): %s", host, port, peer, strerror(err));
        rdmax_ep_destroy(ep);
        return err == ETIMEDOUT ? RDMAX_ERR_TIMEOUT : RDMAX_ERR_CONNECT;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int left = (int)(deadline - rdmax__now_ms());
    st = rdmax__ep_handshake(ctx, fd, peer, ep, out, left > 0 ? left : 1);
    close(fd);
    return st;
}

/* ---- >>cm: connection setup through rdma_cm: channel and events, route checks, the QP to RTS ----- */
/* The cm ids have no QP (librdmacm's user-managed QP mode): the endpoint is made by rdmax_ep_create as in
   the TCP mode, on the context's PD and CQs, and its QP is moved to RTR and RTS with the attributes
   rdma_init_qp_attr returns (address vector with the GIDs from the route, path MTU, peer QPN, PSNs, RDMA
   read depths). The ack timeout and retry counts stay the endpoint desc's, so the RC retry time, the
   watchdog bound and the keepalive work as documented in both modes.

   Which ibv_context: the QP lives on the context's own one (ibv_open_device in >>context), not on the
   one librdmacm opened for the cm id (rdma_get_devices). With a user-managed QP the kernel's connection
   manager never touches the QP: the REQ and REP carry its number, and rdma_init_qp_attr only returns
   attributes. What must match is the device and port, and rdmax checks that on every id (the client binds
   its source address to a GID of the context's port, so the route leaves through it). Sharing librdmacm's
   ibv_context instead would give every rdmax context on that device, and any other librdmacm user in the
   process, one async event fd: a port or QP event would go to whichever context read it first, and
   rdmax would set O_NONBLOCK on an fd that is not its own.

   Events: a listener has its own event channel (rdmax_listener_query_fd); a client uses a private one while it
   connects. A connected id moves (rdma_migrate_id) to the context's channel, which rdmax__tick reads
   without blocking: DISCONNECTED (the peer's rdma_disconnect, rdma_destroy_id or exit: the kernel sends
   the DREQ for a process that dies) closes the endpoint, DEVICE_REMOVAL fails it. */

#define RDMAX__CM_REJ_SIZE 10  /* reject private data: magic u32 | version u16 | length u16 | status s16 */
#define RDMAX__CM_REJ_NO_LISTENER 8  /* IB CM reject reason "invalid service ID": nobody listens there */

/* Admission over rdma_cm (>>admit for the TCP path). There is no round trip before the REQ, whose private
   data holds 56 bytes, so the client's proof rides in it beside the compact record (length field 56):
       36 nonce u64 (getrandom) | 44 time u32 (s, CLOCK_REALTIME) |
       48 the first 8 bytes of HMAC(k, "rdmax cm client" | bytes 0..48 | the client's QP number u32)
   The listener checks it before it makes the endpoint: the time within RDMAX__CM_PROOF_S of its own clock
   (the hosts' clocks must agree that well), the MAC, and a nonce it has not seen: it keeps the proofs of
   the last RDMAX__CM_SEEN clients; one pushed out while still in the window raises a floor, and a proof
   not newer than the floor is refused (it could repeat one no longer held), so memory is bounded and a
   replay never gets in, at the price of refusing honest clients when more than RDMAX__CM_SEEN connect
   within a window. The QP number in the MAC keeps a stolen proof from connecting another QP. The REP
   proves the listener: the compact record (length field 68), then
       36 HMAC(k, "rdmax cm server" | the REQ's 56 bytes | REP bytes 0..36 | the listener's QP number u32)
   checked by the client before its QP goes to RTR. A 64-bit MAC: a forger's chance is 2^-64 a try. */
#define RDMAX__CM_PROOF_S 60
#define RDMAX__CM_SEEN 4096
#define RDMAX__CM_REQ_AUTH 56
#define RDMAX__CM_REP_AUTH (RDMAX_CM_RECORD_SIZE + RDMAX__MAC_SIZE)
struct rdmax__cm_seen {
    uint64_t nonce;
    int64_t t;
};

static void rdmax__cm_client_mac(const rdmax_ctx *ctx, const uint8_t *pd, uint32_t qpn, uint8_t mac[RDMAX__MAC_SIZE])
{
    uint8_t q[4];
    rdmax__put32(q, qpn);
    const void *p[2] = {pd, q};
    size_t n[2] = {48, 4};
    rdmax__admit_mac(ctx, "rdmax cm client", p, n, 2, mac);
}

static void rdmax__cm_server_mac(const rdmax_ctx *ctx, const uint8_t *req, const uint8_t *rep, uint32_t qpn,
                                 uint8_t mac[RDMAX__MAC_SIZE])
{
    uint8_t q[4];
    rdmax__put32(q, qpn);
    const void *p[3] = {req, rep, q};
    size_t n[3] = {RDMAX__CM_REQ_AUTH, RDMAX_CM_RECORD_SIZE, 4};
    rdmax__admit_mac(ctx, "rdmax cm server", p, n, 3, mac);
}

/* The listener's check of a REQ's private data pd (n bytes) from the client with QP number qpn, before
   anything else of it is used. RDMAX_OK: admitted (or no secret on either side). */
static rdmax_status rdmax__cm_admit(rdmax_listener *l, const uint8_t *pd, size_t n, uint32_t qpn, char *why,
                                    size_t why_len)
{
    rdmax_ctx *ctx = l->ctx;
    int proof = n >= RDMAX__CM_REQ_AUTH && rdmax__get32(pd) == RDMAX_CONN_RECORD_MAGIC &&
                rdmax__get16(pd + 4) == RDMAX_CONN_RECORD_VERSION && rdmax__get16(pd + 6) == RDMAX__CM_REQ_AUTH;
    if (!ctx->secret && !proof)
        return RDMAX_OK;
    if (!ctx->secret || !proof) {
        RDMAX__WHY("admission refused: %s", ctx->secret ? "the client did not prove the shared secret (it has none)"
                   : "the client has a shared secret and asks this listener to prove one; it has none");
        return RDMAX_ERR_OOB_AUTH;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t now = ts.tv_sec, t = (int64_t)rdmax__get32(pd + 44);
    t += (now - t + 0x80000000ll) / 0x100000000ll * 0x100000000ll;  /* the u32 seconds nearest to now */
    uint64_t nonce = rdmax__get64(pd + 36);
    uint8_t mac[RDMAX__MAC_SIZE];
    rdmax__cm_client_mac(ctx, pd, qpn, mac);
    if (!rdmax__mac_equal(mac, pd + 48, 8)) {
        RDMAX__WHY("admission refused: the client's proof of the shared secret is wrong (another secret, or a "
                   "proof taken from another QP)");
        return RDMAX_ERR_OOB_AUTH;
    }
    if (t < now - RDMAX__CM_PROOF_S || t > now + RDMAX__CM_PROOF_S) {
        RDMAX__WHY("admission refused: the client's proof is dated %lld s from our clock, more than %d s (a replay, "
                   "or clocks apart)", (long long)(t - now), RDMAX__CM_PROOF_S);
        return RDMAX_ERR_OOB_AUTH;
    }
    int replay = t <= l->cm_seen_floor;
    for (uint32_t i = 0; i < RDMAX__CM_SEEN && !replay; i++)
        replay = l->cm_seen[i].t == t && l->cm_seen[i].nonce == nonce;
    if (replay) {
        RDMAX__WHY("admission refused: the client's proof was used before (a recorded connect request replayed)");
        return RDMAX_ERR_OOB_AUTH;
    }
    struct rdmax__cm_seen *e = &l->cm_seen[l->cm_seen_at];
    if (e->t >= now - RDMAX__CM_PROOF_S && e->t > l->cm_seen_floor)
        l->cm_seen_floor = e->t;  /* pushed out while it could still be replayed */
    e->nonce = nonce;
    e->t = t;
    l->cm_seen_at = (l->cm_seen_at + 1) % RDMAX__CM_SEEN;
    return RDMAX_OK;
}

struct rdmax__cm_hs {
    struct rdma_cm_id *id;      /* NULL: slot free */
    rdmax_ep *ep;               /* made after the client's record checked out; QP in RTS, accept sent */
    uint32_t keepalive_ms;      /* ep's, held back until the client confirms */
    int64_t start;              /* when we accepted its request (the oldest goes first when all are taken) */
    int64_t deadline;
    char peer[64];
};

static void rdmax__cm_nonblock(struct rdma_event_channel *ch)
{
    fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK);  /* our own channel's fd */
}

static rdmax_status rdmax__cm_ctx_open(rdmax_ctx *ctx)
{
    if (!(ctx->cm_ch = rdma_create_event_channel())) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_CM_SETUP,
                   "device %s: rdma_create_event_channel failed: %s (rdma_cm needs the "
                   "rdma_ucm kernel module and /dev/infiniband/rdma_cm)", ctx->attr.name, strerror(errno));
        return RDMAX_ERR_NO_DEVICE;
    }
    rdmax__cm_nonblock(ctx->cm_ch);
    return RDMAX_OK;
}

static void rdmax__cm_ctx_cleanup(rdmax_ctx *ctx)
{
    if (ctx->cm_ch)
        rdma_destroy_event_channel(ctx->cm_ch);
    ctx->cm_ch = NULL;
}

static void rdmax__cm_hold_free(rdmax_ep *ep);

static void rdmax__cm_ep_cleanup(rdmax_ep *ep)
{
    rdmax__cm_hold_free(ep);
    if (ep->cm_id)  /* connected: the kernel sends the peer a DREQ */
        rdma_destroy_id(ep->cm_id);
    ep->cm_id = NULL;
}

/* The receive CQs' drain epoch (>>srq): it moves when a poll finds every receive CQ drained. */
static uint32_t rdmax__recv_epoch(const rdmax_ctx *ctx)
{
    return ctx->rx ? *ctx->rx->epoch : ctx->rcq_drains;
}

/* The verdicts on DISCONNECTED events that wait (rdmax__cm_events): the DREQ travels apart from the
   data, after the acks of what the peer sent, its goodbye too, which is then in our receive CQs, possibly
   behind more than one drain takes, or polled already into the batch of a receive callback we run in. So
   the verdict waits until the epoch moved twice since the event (with several receive groups it moves
   once each was seen drained, and some may have been before the event) and no receive batch runs: what
   the peer sent before it was delivered, its goodbye closed the endpoint, and one still connected had
   none. After our own goodbye the DISCONNECTED is the peer's answer to it, which may come before the
   goodbye's completion is seen (or its ack, lost as the peer's QP leaves RTS): our close, told to
   state_cb once rdmax_ep_disconnect returns, as when the completion comes first. */
static void rdmax__cm_verdicts(rdmax_ctx *ctx)
{
    int in_batch = rdmax__in_callback(ctx);
    uint32_t epoch = rdmax__recv_epoch(ctx);
    int waiting = 0;
    for (uint32_t i = 0; i < ctx->eps_cap; i++) {
        rdmax_ep *ep = ctx->eps[i].ep;
        if (!ep || !ep->cm_gone)
            continue;
        if (!ep->bye && ep->state == RDMAX_EP_CONNECTED && (in_batch || epoch - ep->cm_gone_epoch < 2)) {
            waiting = 1;
            continue;
        }
        ep->cm_gone = 0;
        if (ep->bye)
            rdmax__ep_closed(ep, 0);
        else
            rdmax__ep_fail_why(ep, RDMAX_ERR_PEER_GONE, IBV_WC_GENERAL_ERR, 1,
                               "rdma_cm: the peer disconnected without its goodbye (its process was killed or "
                               "exited, or it destroyed its endpoint without rdmax_ep_disconnect)");
    }
    ctx->cm_gone = (uint8_t)waiting;
}

/* Events of connected endpoints, without blocking (from rdmax__tick). */
static void rdmax__cm_events(rdmax_ctx *ctx)
{
    struct rdma_cm_event *ev;
    while (ctx->cm_ch && rdma_get_cm_event(ctx->cm_ch, &ev) == 0) {
        struct rdma_cm_id *id = ev->id;
        enum rdma_cm_event_type type = ev->event;
        rdmax_ep *ep = (rdmax_ep *)id->context;
        rdma_ack_cm_event(ev);
        if (!ep)
            continue;
        switch (type) {
        case RDMA_CM_EVENT_DISCONNECTED: {
            rdma_disconnect(id);  /* answers the peer's DREQ (fails harmlessly if we sent ours) */
            /* Closed by the peer's goodbye, or failed without one: decided by rdmax__cm_verdicts, after
               what came before the event was delivered. Most often these polls get there at once (a
               callback may destroy the endpoint meanwhile: not touched after them). */
            uint32_t e0 = rdmax__recv_epoch(ctx);
            ep->cm_gone = 1;
            ep->cm_gone_epoch = e0;
            ctx->cm_gone = 1;
            for (int i = 0; i < 64 && (rdmax__poll_recv(ctx) + rdmax__poll_send(ctx) > 0 ||
                                       rdmax__recv_epoch(ctx) - e0 < 2); i++)
                ;
            break;
        }
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
            rdmax__ep_fail_why(ep, RDMAX_ERR_DEVICE, IBV_WC_FATAL_ERR, 1, "rdma_cm: the device was removed");
            break;
        default:  /* TIMEWAIT_EXIT, ADDR_CHANGE: nothing to do */
            break;
        }
    }
    if (ctx->cm_gone)
        rdmax__cm_verdicts(ctx);
}

/* The cm id must be on this context's device and port: our QP is used with its attributes. */
static int rdmax__cm_same_device(rdmax_ctx *ctx, const struct rdma_cm_id *id, char *why, size_t why_len)
{
    const char *name = id->verbs ? ibv_get_device_name(id->verbs->device) : "(none)";
    if (id->verbs && !strcmp(name, ctx->attr.name) && id->port_num == ctx->attr.port)
        return 1;
    RDMAX__WHY("rdma_cm reaches it through device %s port %u, but this context uses device %s port %u", name,
               id->port_num, ctx->attr.name, ctx->attr.port);
    return 0;
}

/* The client's source address: a GID of the context's port of dst's family (on RoCE a GID is an address of
   the port's netdev), the context's own GID first. Binding to it makes the route, and the GID rdma_cm
   takes from it, leave through this context's device, also when another device could reach the peer (two
   rxe devices in one host). Returns 1 (src filled), 0 (no binding: InfiniBand, where IP addresses are
   IPoIB's and not GIDs), or -1 (the port has no address of that family). */
static int rdmax__cm_source(rdmax_ctx *ctx, const struct sockaddr *dst, struct sockaddr_storage *src)
{
    if (ctx->attr.link_layer != IBV_LINK_LAYER_ETHERNET)
        return 0;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    int want4 = dst->sa_family == AF_INET;
    int dst_ll = !want4 && IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)(const void *)dst)->sin6_addr);
    struct ibv_gid_entry tab[256], best;
    ssize_t n = ibv_query_gid_table(ctx->verbs, tab, 256, 0);
    if (n < 0)
        return 0;  /* no table to choose from: let the route choose, the device check still holds */
    int best_score = -1;
    for (ssize_t i = 0; i < n; i++) {
        const struct ibv_gid_entry *e = &tab[i];
        if (e->port_num != ctx->attr.port)
            continue;
        int is4 = !memcmp(e->gid.raw, mapped, 12);
        int ll = e->gid.raw[0] == 0xfe && (e->gid.raw[1] & 0xc0) == 0x80;
        if (is4 != want4 || (!want4 && ll != dst_ll))
            continue;
        int score = ((int)e->gid_index == ctx->attr.gid_index) * 4 + (e->gid_type == IBV_GID_TYPE_ROCE_V2) * 2;
        if (score > best_score) {
            best = *e;
            best_score = score;
        }
    }
    if (best_score < 0)
        return -1;
    memset(src, 0, sizeof *src);
    if (want4) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)src;
        s4->sin_family = AF_INET;
        memcpy(&s4->sin_addr, best.gid.raw + 12, 4);
    } else {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)src;
        s6->sin6_family = AF_INET6;
        memcpy(&s6->sin6_addr, best.gid.raw, 16);
        if (dst_ll)
            s6->sin6_scope_id = best.ndev_ifindex;
    }
    return 1;
}

/* What rdma_cm says about the peer (QP number, PSN, path MTU, GID from the route), as record fields for
   rdmax_cm_record_decode. */
static int rdmax__cm_peer(struct rdma_cm_id *id, rdmax_conn_record *cm)
{
    struct ibv_qp_attr a;
    int mask;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    if (rdma_init_qp_attr(id, &a, &mask))
        return -1;
    memset(cm, 0, sizeof *cm);
    cm->transport = RDMAX_TRANSPORT_ID_RC;
    cm->mtu = (uint8_t)a.path_mtu;
    cm->qpn = a.dest_qp_num;
    cm->psn = a.rq_psn;
    /* InfiniBand within one subnet: no GRH in the route; the peer's GID is the address's */
    memcpy(cm->gid, a.ah_attr.is_global ? a.ah_attr.grh.dgid.raw : id->route.addr.addr.ibaddr.dgid.raw, 16);
    return 0;
}

/* Moves ep's QP to RTR and RTS with rdma_cm's attributes (resp_res / init_depth >= 0: the RDMA read
   depths the passive side accepts with) and the desc's timeout and retry counts; then connected. */
static rdmax_status rdmax__cm_ep_ready(rdmax_ep *ep, struct rdma_cm_id *id, const rdmax_conn_record *r, int resp_res,
                                       int init_depth)
{
    rdmax_ctx *ctx = ep->ctx;
    if (rdmax__ep_transport_check(ep, r, RDMAX_TRANSPORT_ID_RC) != RDMAX_OK)
        return RDMAX_ERR_OOB_TRANSPORT;
    struct ibv_qp_attr a;
    int mask;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    if (rdma_init_qp_attr(id, &a, &mask)) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_CM_SETUP,
                   "device %s, endpoint qpn 0x%x peer %s: rdma_init_qp_attr(RTR) failed: %s",
                   ctx->attr.name, ep->qp->qp_num, ep->peer, strerror(errno));
        return RDMAX_ERR_IO;
    }
    if (a.path_mtu > ctx->attr.active_mtu)
        a.path_mtu = ctx->attr.active_mtu;
    enum ibv_mtu mtu = a.path_mtu;
    a.min_rnr_timer = ep->desc.min_rnr_timer;  /* rdma_cm's 0 would mean 655 ms */
    if (resp_res >= 0)
        a.max_dest_rd_atomic = (uint8_t)resp_res;
    rdmax_status st = rdmax__modify(ep, &a, mask | IBV_QP_MIN_RNR_TIMER, "RTR");
    if (st != RDMAX_OK)
        return st;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    if (rdma_init_qp_attr(id, &a, &mask)) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_CM_SETUP,
                   "device %s, endpoint qpn 0x%x peer %s: rdma_init_qp_attr(RTS) failed: %s",
                   ctx->attr.name, ep->qp->qp_num, ep->peer, strerror(errno));
        return RDMAX_ERR_IO;
    }
    a.timeout = ep->desc.timeout;
    a.retry_cnt = ep->desc.retry_cnt;
    a.rnr_retry = ep->desc.rnr_retry;
    if (init_depth >= 0)
        a.max_rd_atomic = (uint8_t)init_depth;
    if (a.max_rd_atomic && a.max_rd_atomic < ep->rd_avail)
        ep->rd_avail = a.max_rd_atomic;  /* never more reads in flight than the peer takes */
    st = rdmax__modify(ep, &a, mask | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY, "RTS");
    if (st != RDMAX_OK)
        return st;
    return rdmax__ep_connected(ep, r, mtu);
}

/* A record that did not check out is rejected with its status, so the client can say what was wrong. */
static void rdmax__cm_reject(struct rdma_cm_id *id, rdmax_status st)
{
    uint8_t pd[RDMAX__CM_REJ_SIZE];
    rdmax__put32(pd, RDMAX_CONN_RECORD_MAGIC);
    rdmax__put16(pd + 4, RDMAX_CONN_RECORD_VERSION);
    rdmax__put16(pd + 6, RDMAX__CM_REJ_SIZE);
    rdmax__put16(pd + 8, (uint16_t)(int16_t)st);
    rdma_reject(id, pd, sizeof pd);
}

/* ---- >>cm_listen: rdma_cm: the listener and rdmax_accept ----------------------------------------- */

/* ---- messages before the returning accept call ----
   The client's connect returns on rdma_cm's ESTABLISHED, and it may send at once; the accept call that
   returns its endpoint is the one that reads our ESTABLISHED event, which may come later than the call
   that answered the request (another desc). Answering only from the returning call would not help: no
   call knows it returns an endpoint before the client confirms, and a call that waited for that past its
   own timeout would let one silent client stall the server. So until a call returns it, the endpoint has
   no callbacks of the application: what arrives is copied and held, in order, and delivered to the
   returning call's callbacks (from the next rdmax_progress, or before the next message). It grants no
   credits meanwhile, so an rdmax client stops at its window and the hold stays within rq_depth messages;
   past that (a peer that is not rdmax) a message is dropped and counted, as is whatever was held when
   the handshake ends without an endpoint. */
struct rdmax__held {
    struct rdmax__held *next;
    uint32_t len;               /* bytes after the struct (a message), or put_imm's length */
    uint32_t imm;
    uint8_t is_imm;             /* rdmax_put_imm's notice, for imm_cb */
};
struct rdmax__hold {
    struct rdmax__held *head, **tail;
    uint32_t n;
    uint32_t grant_at;          /* the endpoint's, given back when a call returns it */
    uint8_t adopted;            /* a call returned the endpoint: deliver, then hand over its callbacks */
    uint8_t delivering;         /* rdmax__cm_hold_deliver is running (a callback may progress) */
};

static void rdmax__cm_hold_deliver(rdmax_ep *ep)
{
    rdmax_ctx *ctx = ep->ctx;
    struct rdmax__hold *h = ep->hold;
    uint32_t idx = (uint32_t)(ep->wr_id_base >> 32) & 0xffff;
    uint16_t gen = (uint16_t)(ep->wr_id_base >> 48);
    h->delivering = 1;
    struct rdmax__held *m;
    while ((m = h->head) != NULL) {
        if (!(h->head = m->next))
            h->tail = &h->head;
        h->n--;
        if (m->is_imm && ep->desc.imm_cb)
            ep->desc.imm_cb(ep, m->imm, m->len, ep->user);
        else if (!m->is_imm && ep->desc.recv_cb)
            ep->desc.recv_cb(ep, m + 1, m->len, ep->user);
        else
            ctx->cnt.recv_drops++;
        rdmax__free(ctx, m);
        if (ctx->eps[idx].ep != ep || RDMAX__REF_GEN(&ctx->eps[idx]) != gen)
            return;  /* a callback destroyed it, and what was left with it */
    }
    ep->recv_cb = ep->desc.recv_cb ? ep->desc.recv_cb : rdmax__recv_drop;
    ep->imm_cb = ep->desc.imm_cb;
    ep->hold = NULL;
    rdmax__free(ctx, h);
}

static void rdmax__cm_hold_msg(rdmax_ep *ep, int is_imm, uint32_t imm, const void *data, size_t len)
{
    struct rdmax__hold *h = ep->hold;
    struct rdmax__held *m = NULL;
    if (h->adopted || h->n < ep->rq_depth)
        m = (struct rdmax__held *)rdmax__alloc(ep->ctx, sizeof *m + (is_imm ? 0 : len));
    if (!m) {
        ep->ctx->cnt.recv_drops++;  /* past its window: not an rdmax peer (or no memory) */
        return;
    }
    m->next = NULL;
    m->len = (uint32_t)len;
    m->imm = imm;
    m->is_imm = (uint8_t)is_imm;
    if (!is_imm)
        memcpy(m + 1, data, len);
    *h->tail = m;
    h->tail = &m->next;
    h->n++;
    if (h->adopted && !h->delivering)  /* the held ones first, in order */
        rdmax__cm_hold_deliver(ep);
}

static void rdmax__cm_recv_hold(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)user;
    rdmax__cm_hold_msg(ep, 0, 0, data, len);
}

static void rdmax__cm_imm_hold(rdmax_ep *ep, uint32_t imm, size_t len, void *user)
{
    (void)user;
    rdmax__cm_hold_msg(ep, 1, imm, NULL, len);
}

/* The endpoint of a request that checked out holds until a call returns it. */
static rdmax_status rdmax__cm_hold_start(rdmax_ep *ep)
{
    struct rdmax__hold *h = (struct rdmax__hold *)rdmax__alloc(ep->ctx, sizeof *h);
    if (!h)
        return RDMAX_ERR_NO_MEMORY;
    memset(h, 0, sizeof *h);
    h->tail = &h->head;
    h->grant_at = ep->grant_at;
    ep->grant_at = UINT32_MAX;  /* no grant until then */
    ep->recv_cb = rdmax__cm_recv_hold;
    ep->imm_cb = rdmax__cm_imm_hold;
    ep->hold = h;
    return RDMAX_OK;
}

/* The returning call took ep (rdmax__ep_adopt gave it the call's callbacks): what is held goes to them
   from the next rdmax_progress, and the credits it owes its peer go back. */
static void rdmax__cm_hold_end(rdmax_ep *ep)
{
    rdmax_ctx *ctx = ep->ctx;
    struct rdmax__hold *h = ep->hold;
    ep->grant_at = h->grant_at;
    if (h->head) {
        h->adopted = 1;
        ep->recv_cb = rdmax__cm_recv_hold;  /* until the held ones are delivered: order */
        ep->imm_cb = rdmax__cm_imm_hold;
        ctx->held_news = 1;
        ctx->tick_at = rdmax__tick_clock();  /* the tick at the next progress */
        ctx->tick_coarse_ms = INT64_MIN;
    } else {
        ep->hold = NULL;
        rdmax__free(ctx, h);
    }
    if (ep->rbufs && ep->rq_unposted)  /* a pool of its own: its buffers, before their credits */
        rdmax__post_recvs(ep, ep->rq_unposted);
    if (ep->rx_unreturned >= ep->grant_at && ep->state == RDMAX_EP_CONNECTED)
        rdmax__grant_or_fail(ep);
}

/* From the tick, outside every callback (as rdmax__state_tell): each returned endpoint's held messages. */
static void rdmax__cm_hold_tell(rdmax_ctx *ctx)
{
    if (rdmax__in_callback(ctx))
        return;  /* (at a later tick) */
    ctx->held_news = 0;
    for (uint32_t i = 0; i < ctx->eps_cap; i++) {
        rdmax_ep *ep = ctx->eps[i].ep;
        if (ep && ep->hold && ep->hold->adopted && !ep->hold->delivering)
            rdmax__cm_hold_deliver(ep);
    }
}

static void rdmax__cm_hold_free(rdmax_ep *ep)
{
    struct rdmax__hold *h = ep->hold;
    if (!h)
        return;
    for (struct rdmax__held *m = h->head, *next; m; m = next) {
        next = m->next;
        ep->ctx->cnt.recv_drops++;  /* the handshake ended without an endpoint, or it was destroyed first */
        rdmax__free(ep->ctx, m);
    }
    ep->hold = NULL;
    rdmax__free(ep->ctx, h);
}

static rdmax_status rdmax__cm_listen(rdmax_ctx *ctx, const char *host, uint16_t port, rdmax_listener **out)
{
    struct addrinfo *res = NULL;
    if (rdmax__passive_addr(ctx, host, port, &res) != RDMAX_OK)
        return RDMAX_ERR_INVALID_PARAM;
    uint32_t slots = ctx->desc.handshake_slots;
    rdmax_listener *l = (rdmax_listener *)rdmax__alloc(ctx, sizeof *l);
    struct rdmax__cm_hs *hs = (struct rdmax__cm_hs *)rdmax__alloc(ctx, slots * sizeof *hs);
    if (!l || !hs) {
        freeaddrinfo(res);
        rdmax__free(ctx, l);
        rdmax__free(ctx, hs);
        return RDMAX_ERR_NO_MEMORY;
    }
    memset(l, 0, sizeof *l);
    memset(hs, 0, slots * sizeof *hs);
    l->ctx = ctx;
    l->fd = l->epfd = -1;
    l->cm_hs = hs;
    l->slots = slots;
    rdmax_status st = RDMAX_ERR_IO;
    if (ctx->secret && !(l->cm_seen = (struct rdmax__cm_seen *)rdmax__alloc(ctx, RDMAX__CM_SEEN * sizeof *l->cm_seen))) {
        rdmax__cm_listener_close(l);
        freeaddrinfo(res);
        return RDMAX_ERR_NO_MEMORY;
    }
    const char *step = "rdma_create_event_channel";
    char why[200] = "";
    int zero = 0;
    if (!(l->cm_ch = rdma_create_event_channel()))
        goto fail;
    rdmax__cm_nonblock(l->cm_ch);
    step = "rdma_create_id";
    if (rdma_create_id(l->cm_ch, &l->cm_id, l, RDMA_PS_TCP))
        goto fail;
    /* host NULL: one id serves IPv6 and IPv4, as the TCP listener's socket does */
    if (res->ai_family == AF_INET6 && !host)
        rdma_set_option(l->cm_id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &zero, sizeof zero);
    step = "rdma_bind_addr";
    if (rdma_bind_addr(l->cm_id, res->ai_addr))
        goto fail;
    if (l->cm_id->verbs && !rdmax__cm_same_device(ctx, l->cm_id, why, sizeof why)) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_LISTEN, "listen: %s port %u: %s", host, port, why);
        st = RDMAX_ERR_INVALID_PARAM;
        goto out;
    }
    step = "rdma_listen";
    /* requests the kernel queues unread (the kernel caps it, net.rdma_ucm.max_backlog): one it cannot
       queue is dropped, and the client's CM sends it again only after about 4 s; a flood's requests with
       a valid record cost us a QP each, so a burst comes faster than we read (measured: a backlog of
       slots, 4.7 s for a real client beside 2,000; of 4 x slots, 3.5 s) */
    if (rdma_listen(l->cm_id, (int)(slots > 16383 ? 65535 : 4 * slots)))
        goto fail;
    freeaddrinfo(res);
    l->port = ntohs(rdma_get_src_port(l->cm_id));
    rdmax__listener_link(l);
    *out = l;
    return RDMAX_OK;
fail:
    rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_LISTEN,
               "listen: %s port %u: %s failed: %s", host ? host : "(any)", port, step,
               strerror(errno));
out:
    freeaddrinfo(res);
    rdmax__cm_listener_close(l);
    return st;
}

static void rdmax__cm_hs_end(rdmax_listener *l, struct rdmax__cm_hs *h)
{
    rdmax_ep_destroy(h->ep);
    rdma_destroy_id(h->id);  /* sends a REJ or DREQ if the client is still there */
    h->id = NULL;
    h->ep = NULL;
    l->n_hs--;
}

static void rdmax__cm_listener_close(rdmax_listener *l)
{
    for (uint32_t i = 0; l->cm_hs && i < l->slots; i++)
        if (l->cm_hs[i].id)
            rdmax__cm_hs_end(l, &l->cm_hs[i]);
    if (l->cm_id)
        rdma_destroy_id(l->cm_id);
    if (l->cm_ch)
        rdma_destroy_event_channel(l->cm_ch);
    rdmax__free(l->ctx, l->cm_hs);
    rdmax__free(l->ctx, l->cm_seen);
    rdmax__free(l->ctx, l);
}

/* A slot for a request that checked out (so garbage pushes nobody out): a free one, else, as the TCP
   listener does (rdmax__hs_accept), the one of the handshake waiting longest for its client's RTU, once
   it has waited RDMAX__HS_BUSY_MS (an rdmax client sends it right after our reply), so a flood of
   requests that never confirm cannot keep a real client out. Waited until the channel was last found
   empty, not until now: a flood queues events faster than we read them, and an RTU that came may wait
   in the queue behind requests (pushing that one out would drop a client whose connect returned).
   NULL: no slot waited that long; the request is rejected with RDMAX_ERR_NO_RESOURCE, which an rdmax
   client tries again, and cheap rejects let the listener catch up with the queue. */
/* The held handshake accepted longest ago (ties: the lowest slot), or UINT32_MAX: none held. */
static uint32_t rdmax__cm_hs_oldest(const rdmax_listener *l)
{
    uint32_t old = UINT32_MAX;
    for (uint32_t i = 0; l->cm_hs && i < l->slots; i++)
        if (l->cm_hs[i].id && (old == UINT32_MAX || l->cm_hs[i].start < l->cm_hs[old].start))
            old = i;
    return old;
}

static struct rdmax__cm_hs *rdmax__cm_hs_slot(rdmax_listener *l, const char *peer)
{
    rdmax_ctx *ctx = l->ctx;
    for (uint32_t i = 0; i < l->slots; i++)
        if (!l->cm_hs[i].id)
            return &l->cm_hs[i];
    struct rdmax__cm_hs *h = &l->cm_hs[rdmax__cm_hs_oldest(l)];  /* (all held) */
    int64_t waited = l->cm_drained - h->start;
    if (waited < RDMAX__HS_BUSY_MS) {
        rdmax__log(ctx, RDMAX_LOG_INFO, RDMAX_LOG_ITEM_HANDSHAKE, "device %s, client %s: all %u handshake slots "
                   "taken, none waited %d ms for its RTU; rejected (it may try again)", ctx->attr.name, peer,
                   l->slots, RDMAX__HS_BUSY_MS);
        return NULL;
    }
    rdmax__log(ctx, RDMAX_LOG_INFO, RDMAX_LOG_ITEM_HANDSHAKE_TIMEOUT, "device %s, client %s: handshake dropped, no "
               "RTU for %lld ms: all %u slots taken and a new client came", ctx->attr.name, h->peer,
               (long long)waited, l->slots);
    rdmax__cm_hs_end(l, h);
    l->evicted++;
    return h;
}

/* A connect request: check the device and the client's record, then (only then) make the endpoint, bring
   its QP to RTS and accept. RDMAX_INPROGRESS: accepted, waiting for the client's RTU (ESTABLISHED). */
static rdmax_status rdmax__cm_request(rdmax_listener *l, struct rdma_cm_event *ev, const rdmax_ep_desc *desc)
{
    rdmax_ctx *ctx = l->ctx;
    struct rdma_cm_id *id = ev->id;
    uint8_t pd[64];
    size_t n = ev->param.conn.private_data ? ev->param.conn.private_data_len : 0;
    if (n > sizeof pd)
        n = sizeof pd;
    memcpy(pd, ev->param.conn.private_data ? ev->param.conn.private_data : pd, n);
    struct rdma_conn_param req = ev->param.conn;
    rdma_ack_cm_event(ev);
    char peer[64], why[200];
    rdmax__sockaddr_str(rdma_get_peer_addr(id), peer, sizeof peer);
    struct rdmax__cm_hs *h = NULL;
    rdmax_status st;
    rdmax_conn_record cm, them, me;
    rdmax_ep *ep = NULL;
    if (!rdmax__cm_same_device(ctx, id, why, sizeof why)) {
        rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_HANDSHAKE,
                   "device %s, client %s: %s", ctx->attr.name, peer, why);
        st = RDMAX_ERR_NO_DEVICE;
        goto reject;
    }
    if (rdmax__cm_peer(id, &cm)) {
        rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_HANDSHAKE,
                   "device %s, client %s: rdma_init_qp_attr(RTR) failed: %s", ctx->attr.name,
                   peer, strerror(errno));
        st = RDMAX_ERR_IO;
        goto reject;
    }
    if ((st = rdmax__cm_admit(l, pd, n, cm.qpn, why, sizeof why)) != RDMAX_OK) {
        rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_HANDSHAKE,
                   "device %s, client %s: %s", ctx->attr.name, peer, why);
        ctx->cnt.auth_refused++;
        goto reject;
    }
    uint8_t rec[sizeof pd];  /* admitted: the record is what comes before the proof */
    memcpy(rec, pd, sizeof rec);
    if (ctx->secret)
        rdmax__put16(rec + 6, RDMAX_CM_RECORD_SIZE);
    if ((st = rdmax_cm_record_decode(rec, n, &cm, &them, why, sizeof why)) != RDMAX_OK) {
        rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_HANDSHAKE,
                   "device %s, client %s: %s", ctx->attr.name, peer, why);
        goto reject;
    }
    if (!(h = rdmax__cm_hs_slot(l, peer))) {  /* the client tries again (rdmax__cm_step) */
        st = RDMAX_ERR_NO_RESOURCE;
        goto reject;
    }
    /* The record checked out: now the endpoint is worth making, without the application's callbacks and
       user, which are the returning call's (rdmax__cm_hold_end); until then it holds what comes. */
    rdmax_ep_desc made;
    memset(&made, 0, sizeof made);
    if (desc)
        made = *desc;
    made.recv_cb = NULL;
    made.imm_cb = NULL;
    made.user = NULL;
    made.state_cb = NULL;
    if ((st = rdmax_ep_create(ctx, &made, &ep)) != RDMAX_OK || (st = rdmax__cm_hold_start(ep)) != RDMAX_OK)
        goto reject;
    snprintf(ep->peer, sizeof ep->peer, "%s", peer);
    struct rdma_conn_param p;
    memset(&p, 0, sizeof p);
    p.responder_resources = ep->desc.max_rd_atomic < req.initiator_depth ? ep->desc.max_rd_atomic : req.initiator_depth;
    p.initiator_depth = ep->desc.max_rd_atomic < req.responder_resources ? ep->desc.max_rd_atomic
                                                                         : req.responder_resources;
    p.rnr_retry_count = ep->desc.rnr_retry;
    p.qp_num = ep->qp->qp_num;
    if ((st = rdmax__cm_ep_ready(ep, id, &them, p.responder_resources, p.initiator_depth)) != RDMAX_OK)
        goto reject;
    uint8_t mine[RDMAX__CM_REP_AUTH];
    rdmax_ep_query_record(ep, &me);
    rdmax_cm_record_encode(&me, mine);
    p.private_data = mine;
    p.private_data_len = RDMAX_CM_RECORD_SIZE;
    if (ctx->secret) {  /* our proof, for the client that proved itself */
        rdmax__put16(mine + 6, RDMAX__CM_REP_AUTH);
        rdmax__cm_server_mac(ctx, pd, mine, ep->qp->qp_num, mine + RDMAX_CM_RECORD_SIZE);
        p.private_data_len = RDMAX__CM_REP_AUTH;
    }
    if (rdma_accept(id, &p)) {
        rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_HANDSHAKE,
                   "device %s, client %s: rdma_accept failed: %s", ctx->attr.name, peer,
                   strerror(errno));
        st = RDMAX_ERR_IO;
        goto destroy;
    }
    h->id = id;
    h->ep = ep;
    /* No keepalive into a QP the client may not have made (a crafted request): not before its RTU. */
    h->keepalive_ms = ep->desc.keepalive_ms;
    ep->desc.keepalive_ms = RDMAX_OFF;
    h->start = rdmax__now_ms();
    h->deadline = h->start + ctx->desc.handshake_ms;
    snprintf(h->peer, sizeof h->peer, "%s", peer);
    l->n_hs++;
    return RDMAX_INPROGRESS;
reject:
    rdmax__cm_reject(id, st);
destroy:
    rdmax_ep_destroy(ep);
    rdma_destroy_id(id);
    return st;
}

/* One event of the listener's channel (acknowledged here). RDMAX_INPROGRESS: nothing to report yet. */
static rdmax_status rdmax__cm_listener_event(rdmax_listener *l, struct rdma_cm_event *ev, const rdmax_ep_desc *desc,
                                             rdmax_ep **out)
{
    rdmax_ctx *ctx = l->ctx;
    if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
        return rdmax__cm_request(l, ev, desc);
    struct rdma_cm_id *id = ev->id;
    enum rdma_cm_event_type type = ev->event;
    int status = ev->status;
    rdma_ack_cm_event(ev);
    struct rdmax__cm_hs *h = NULL;
    for (uint32_t i = 0; i < l->slots && !h; i++)
        if (l->cm_hs[i].id == id)
            h = &l->cm_hs[i];
    if (!h) {  /* the listening id's own: the device went away, the address changed */
        if (type == RDMA_CM_EVENT_DEVICE_REMOVAL || type == RDMA_CM_EVENT_ADDR_CHANGE)
            rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_LISTEN,
                       "device %s: listener on port %u: %s", ctx->attr.name, l->port,
                       rdma_event_str(type));
        return RDMAX_INPROGRESS;
    }
    if (type == RDMA_CM_EVENT_ESTABLISHED) {
        rdmax_ep *ep = h->ep;
        h->ep = NULL;
        if (rdma_migrate_id(id, ctx->cm_ch)) {
            rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_HANDSHAKE,
                       "device %s, client %s: rdma_migrate_id failed: %s", ctx->attr.name,
                       h->peer, strerror(errno));
            rdmax_ep_destroy(ep);
            rdmax__cm_hs_end(l, h);
            return RDMAX_ERR_IO;
        }
        id->context = ep;
        ep->cm_id = id;
        rdmax__ep_adopt(ep, desc);  /* its keepalive too, held off until the client confirmed */
        rdmax__cm_hold_end(ep);
        ep->ka_ms = rdmax__health_ms(ep->ctx);
        h->id = NULL;
        l->n_hs--;
        *out = ep;
        return RDMAX_OK;
    }
    rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_HANDSHAKE_TIMEOUT,
               "device %s, client %s: connection: the client did not confirm it is ready "
               "(%s, status %d)", ctx->attr.name, h->peer, rdma_event_str(type), status);
    rdmax__cm_hs_end(l, h);
    return RDMAX_ERR_OOB_SYNC;
}

/* The compact record carries one region (an RC REQ's private data is 56 bytes): more is refused before
   anything goes on the wire, rather than dropped. */
static rdmax_status rdmax__cm_regions_check(rdmax_ctx *ctx, const rdmax_ep_desc *desc, const char *what)
{
    uint32_t n = desc ? (desc->expose != NULL) + desc->expose_count : 0;
    if (n <= 1)
        return RDMAX_OK;
    rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_EP_DESC,
               "%s: rdma_cm setup (RDMAX_SETUP_CM) advertises one region; the endpoint desc "
               "has %u (expose_list needs RDMAX_SETUP_TCP)", what, n);
    return RDMAX_ERR_INVALID_PARAM;
}

static rdmax_status rdmax__cm_accept(rdmax_listener *l, const rdmax_ep_desc *desc, rdmax_ep **out, int timeout_ms)
{
    rdmax_ctx *ctx = l->ctx;
    if (rdmax__ep_transport(desc) != RDMAX_TRANSPORT_ID_RC) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_EP_DESC,
                   "accept: rdma_cm setup (RDMAX_SETUP_CM) makes RC endpoints only");
        return RDMAX_ERR_UNSUPPORTED;
    }
    if (rdmax__cm_regions_check(ctx, desc, "accept") != RDMAX_OK)
        return RDMAX_ERR_INVALID_PARAM;
    int64_t deadline = timeout_ms < 0 ? INT64_MAX : rdmax__now_ms() + timeout_ms;
    for (;;) {
        struct rdma_cm_event *ev;
        while (rdma_get_cm_event(l->cm_ch, &ev) == 0) {
            rdmax_status st = rdmax__cm_listener_event(l, ev, desc, out);
            if (st != RDMAX_INPROGRESS)
                return st;
        }
        int64_t now = rdmax__now_ms(), next = deadline;
        l->cm_drained = now;
        for (uint32_t i = 0; i < l->slots; i++) {
            struct rdmax__cm_hs *h = &l->cm_hs[i];
            if (!h->id)
                continue;
            if (now >= h->deadline) {
                rdmax__log(ctx, RDMAX_LOG_WARN, RDMAX_LOG_ITEM_HANDSHAKE_TIMEOUT,
                           "device %s, client %s: handshake did not finish within %u ms (no "
                           "RTU: the client did not confirm the connection)", ctx->attr.name, h->peer,
                           ctx->desc.handshake_ms);
                rdmax__cm_hs_end(l, h);
                return RDMAX_ERR_OOB_TIMEOUT;
            }
            next = h->deadline < next ? h->deadline : next;
        }
        if (now >= deadline) {
            rdmax__log(ctx, RDMAX_LOG_DEBUG, RDMAX_LOG_ITEM_ACCEPT,
                       "accept: no client connected on port %u within %d ms", l->port,
                       timeout_ms);
            return RDMAX_ERR_TIMEOUT;
        }
        int64_t wait = next - now;
        struct pollfd p = {l->cm_ch->fd, POLLIN, 0};
        poll(&p, 1, wait > INT32_MAX ? INT32_MAX : (int)wait);
    }
}

/* ---- >>cm_connect: rdma_cm: the client's rdmax_connect ------------------------------------------- */

/* Waits on the client's private channel for the event that ends `step`; any other event is the step's
   failure, described in why. RDMAX_OK: *evp holds the event, not yet acknowledged. *retry: the peer
   refused or could not be reached, try again later. */
static rdmax_status rdmax__cm_step(struct rdma_event_channel *ch, enum rdma_cm_event_type want, const char *step,
                                   int64_t deadline, struct rdma_cm_event **evp, int *retry, char *why,
                                   size_t why_len)
{
    int64_t t0 = rdmax__now_ms();
    struct rdma_cm_event *ev;
    for (;;) {
        if (rdma_get_cm_event(ch, &ev) == 0)
            break;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            RDMAX__WHY("%s: rdma_get_cm_event failed: %s", step, strerror(errno));
            return RDMAX_ERR_IO;
        }
        int64_t left = deadline - rdmax__now_ms();
        if (left <= 0) {
            RDMAX__WHY("%s timed out after %lld ms", step, (long long)(rdmax__now_ms() - t0));
            return RDMAX_ERR_TIMEOUT;
        }
        struct pollfd p = {ch->fd, POLLIN, 0};
        poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left);
    }
    if (ev->event == want) {
        *evp = ev;
        return RDMAX_OK;
    }
    enum rdma_cm_event_type type = ev->event;
    int status = ev->status;
    uint8_t rej[RDMAX__CM_REJ_SIZE];
    int ours = 0;
    if (type == RDMA_CM_EVENT_REJECTED && ev->param.conn.private_data &&
        ev->param.conn.private_data_len >= RDMAX__CM_REJ_SIZE) {
        memcpy(rej, ev->param.conn.private_data, sizeof rej);
        ours = rdmax__get32(rej) == RDMAX_CONN_RECORD_MAGIC && rdmax__get16(rej + 6) == RDMAX__CM_REJ_SIZE;
    }
    rdma_ack_cm_event(ev);
    if (ours) {
        /* an rdmax listener that did not take our record (or had no room): its status, in its words */
        int16_t s = (int16_t)rdmax__get16(rej + 8);
        rdmax_status rs = s <= RDMAX_ERR_NO_RESOURCE && s >= RDMAX_ERR_OOB_AUTH ? (rdmax_status)s : RDMAX_ERR_CONNECT;
        *retry = rs == RDMAX_ERR_NO_RESOURCE;  /* its handshake slots were all taken just now */
        RDMAX__WHY("%s: the peer rejected our connection record: %s", step, rdmax_status_str(rs));
        return rs;
    }
    if (type == RDMA_CM_EVENT_REJECTED && status == RDMAX__CM_REJ_NO_LISTENER) {
        *retry = 1;
        RDMAX__WHY("%s: rejected: nobody listens on that port", step);
        return RDMAX_ERR_CONNECT;
    }
    if (status == -ETIMEDOUT) {
        RDMAX__WHY("%s timed out after %lld ms (%s)", step, (long long)(rdmax__now_ms() - t0), rdma_event_str(type));
        return RDMAX_ERR_TIMEOUT;
    }
    if ((type == RDMA_CM_EVENT_ADDR_ERROR || type == RDMA_CM_EVENT_ROUTE_ERROR) &&
        (status == -ENETUNREACH || status == -EHOSTUNREACH || status == -ENODEV || status == -EADDRNOTAVAIL))
        *retry = 1;  /* the route or the address may come up */
    if (status < 0)
        RDMAX__WHY("%s failed: %s (%s)", step, rdma_event_str(type), strerror(-status));
    else
        RDMAX__WHY("%s failed: %s (status %d)", step, rdma_event_str(type), status);
    return RDMAX_ERR_CONNECT;
}

static int rdmax__cm_left(int64_t deadline)
{
    int64_t left = deadline - rdmax__now_ms();
    return left < 1 ? 1 : left > INT32_MAX ? INT32_MAX : (int)left;
}

/* One attempt to connect to dst: resolve the address and the route, make the endpoint, send the connect
   request, check the reply's record, bring the QP up and confirm (RTU). */
static rdmax_status rdmax__cm_try(rdmax_ctx *ctx, const struct sockaddr *dst, const rdmax_ep_desc *desc,
                                  rdmax_ep **out, int64_t deadline, int *retry, char *why, size_t why_len)
{
    *retry = 0;
    rdmax_ep *ep = NULL;
    struct rdma_cm_id *id = NULL;
    struct rdma_cm_event *ev = NULL;
    rdmax_status st = RDMAX_ERR_IO;
    char peer[64];
    int bind_src;  /* declared before the first goto: C++ does not jump over an initialisation */
    size_t n;
    rdmax__sockaddr_str(dst, peer, sizeof peer);
    struct rdma_event_channel *ch = rdma_create_event_channel();
    if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
        RDMAX__WHY("%s failed: %s", ch ? "rdma_create_id" : "rdma_create_event_channel", strerror(errno));
        goto out;
    }
    rdmax__cm_nonblock(ch);
    struct sockaddr_storage src;
    bind_src = rdmax__cm_source(ctx, dst, &src);
    if (bind_src < 0) {
        RDMAX__WHY("device %s port %u has no %s address (no GID of that family) to reach %s from",
                   ctx->attr.name, ctx->attr.port, dst->sa_family == AF_INET ? "IPv4" : "IPv6", peer);
        st = RDMAX_ERR_NO_DEVICE;
        goto out;
    }
    if (rdma_resolve_addr(id, bind_src ? (struct sockaddr *)&src : NULL, (struct sockaddr *)(uintptr_t)dst,
                          rdmax__cm_left(deadline))) {
        RDMAX__WHY("rdma_resolve_addr failed: %s", strerror(errno));
        st = RDMAX_ERR_CONNECT;
        *retry = errno == ENETUNREACH || errno == EHOSTUNREACH || errno == EADDRNOTAVAIL;
        goto out;
    }
    if ((st = rdmax__cm_step(ch, RDMA_CM_EVENT_ADDR_RESOLVED, "rdma_resolve_addr", deadline, &ev, retry, why,
                             why_len)) != RDMAX_OK)
        goto out;
    rdma_ack_cm_event(ev);
    if (!rdmax__cm_same_device(ctx, id, why, why_len)) {
        st = RDMAX_ERR_NO_DEVICE;
        goto out;
    }
    if (rdma_resolve_route(id, rdmax__cm_left(deadline))) {
        RDMAX__WHY("rdma_resolve_route failed: %s", strerror(errno));
        st = RDMAX_ERR_CONNECT;
        goto out;
    }
    if ((st = rdmax__cm_step(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, "rdma_resolve_route", deadline, &ev, retry, why,
                             why_len)) != RDMAX_OK)
        goto out;
    rdma_ack_cm_event(ev);
    if ((st = rdmax_ep_create(ctx, desc, &ep)) != RDMAX_OK) {
        RDMAX__WHY("making the endpoint failed (logged before this)");
        goto out;
    }
    snprintf(ep->peer, sizeof ep->peer, "%s", peer);
    rdmax_conn_record me, cm, them;
    uint8_t mine[RDMAX__CM_REQ_AUTH];
    rdmax_ep_query_record(ep, &me);
    rdmax_cm_record_encode(&me, mine);
    struct rdma_conn_param p;
    memset(&p, 0, sizeof p);
    p.private_data = mine;
    p.private_data_len = RDMAX_CM_RECORD_SIZE;
    if (ctx->secret) {  /* our proof beside the record (see RDMAX__CM_PROOF_S) */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint8_t mac[RDMAX__MAC_SIZE];
        rdmax__put16(mine + 6, RDMAX__CM_REQ_AUTH);
        if (rdmax__random(mine + 36, 8) != RDMAX_OK) {
            RDMAX__WHY("admission: no random bytes for our nonce: %s", strerror(errno));
            st = RDMAX_ERR_IO;
            goto out;
        }
        rdmax__put32(mine + 44, (uint32_t)ts.tv_sec);
        rdmax__cm_client_mac(ctx, mine, ep->qp->qp_num, mac);
        memcpy(mine + 48, mac, 8);
        p.private_data_len = RDMAX__CM_REQ_AUTH;
    }
    p.responder_resources = ep->desc.max_rd_atomic;
    p.initiator_depth = ep->desc.max_rd_atomic;
    p.retry_count = ep->desc.retry_cnt;
    p.rnr_retry_count = ep->desc.rnr_retry;
    p.qp_num = ep->qp->qp_num;
    if (rdma_connect(id, &p)) {
        RDMAX__WHY("rdma_connect failed: %s", strerror(errno));
        st = RDMAX_ERR_CONNECT;
        goto out;
    }
    if ((st = rdmax__cm_step(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, "rdma_connect", deadline, &ev, retry, why,
                             why_len)) != RDMAX_OK)
        goto out;
    uint8_t pd[RDMAX__CM_REP_AUTH];
    n = ev->param.conn.private_data ? ev->param.conn.private_data_len : 0;
    if (n > sizeof pd)
        n = sizeof pd;  /* the rest is rdma_cm's zero padding */
    memcpy(pd, ev->param.conn.private_data ? ev->param.conn.private_data : pd, n);
    rdma_ack_cm_event(ev);
    if (rdmax__cm_peer(id, &cm)) {
        RDMAX__WHY("rdma_init_qp_attr(RTR) failed: %s", strerror(errno));
        st = RDMAX_ERR_IO;
        goto out;
    }
    if (ctx->secret) {  /* the listener's proof, before anything of its record is used */
        uint8_t mac[RDMAX__MAC_SIZE];
        int proof = n >= RDMAX__CM_REP_AUTH && rdmax__get16(pd + 6) == RDMAX__CM_REP_AUTH;
        if (proof)
            rdmax__cm_server_mac(ctx, mine, pd, cm.qpn, mac);
        if (!proof || !rdmax__mac_equal(mac, pd + RDMAX_CM_RECORD_SIZE, RDMAX__MAC_SIZE)) {
            RDMAX__WHY("admission: the listener's proof of the shared secret is %s", proof ? "wrong (another secret, "
                       "or not the listener it claims to be)" : "missing");
            st = RDMAX_ERR_OOB_AUTH;
            goto out;
        }
        rdmax__put16(pd + 6, RDMAX_CM_RECORD_SIZE);
    }
    if ((st = rdmax_cm_record_decode(pd, n, &cm, &them, why, why_len)) != RDMAX_OK)
        goto out;  /* destroying the id rejects the server's reply */
    if ((st = rdmax__cm_ep_ready(ep, id, &them, -1, -1)) != RDMAX_OK) {
        RDMAX__WHY("bringing the QP to RTS failed (logged before this)");
        goto out;
    }
    if (rdma_establish(id) || rdma_migrate_id(id, ctx->cm_ch)) {
        RDMAX__WHY("rdma_establish failed: %s", strerror(errno));
        st = RDMAX_ERR_IO;
        goto out;
    }
    id->context = ep;
    ep->cm_id = id;
    rdma_destroy_event_channel(ch);
    *out = ep;
    return RDMAX_OK;
out:
    rdmax_ep_destroy(ep);
    if (id)
        rdma_destroy_id(id);
    if (ch)
        rdma_destroy_event_channel(ch);
    return st;
}

static rdmax_status rdmax__cm_connect(rdmax_ctx *ctx, const char *host, uint16_t port, const rdmax_ep_desc *desc,
                                      rdmax_ep **out, int timeout_ms)
{
    if (rdmax__ep_transport(desc) != RDMAX_TRANSPORT_ID_RC) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_EP_DESC,
                   "connect: rdma_cm setup (RDMAX_SETUP_CM) makes RC endpoints only");
        return RDMAX_ERR_UNSUPPORTED;
    }
    if (rdmax__cm_regions_check(ctx, desc, "connect") != RDMAX_OK)
        return RDMAX_ERR_INVALID_PARAM;
    struct addrinfo *res = NULL;
    if (rdmax__active_addr(ctx, host, port, &res) != RDMAX_OK)
        return RDMAX_ERR_CONNECT;
    int64_t deadline = rdmax__now_ms() + (timeout_ms < 0 ? 3600000 : timeout_ms);
    char why[256] = "", refused[256] = "", peer[64] = "?";
    rdmax_status st = RDMAX_ERR_CONNECT;
    /* A peer where nobody listens yet, or that cannot be reached yet, is tried again with backoff until the
       deadline, as in the TCP mode. */
    for (int backoff = 10;; backoff = backoff < 640 ? backoff * 2 : 1000) {
        int retry = 0;
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            int r = 0;
            rdmax__sockaddr_str(ai->ai_addr, peer, sizeof peer);
            st = rdmax__cm_try(ctx, ai->ai_addr, desc, out, deadline, &r, why, sizeof why);
            retry |= r;
            if (r)
                snprintf(refused, sizeof refused, "%s", why);
            if (st == RDMAX_OK || st == RDMAX_ERR_TIMEOUT)
                break;
        }
        if (st == RDMAX_ERR_TIMEOUT && refused[0]) {
            /* the deadline ran out between refusals: report the refusal */
            st = RDMAX_ERR_CONNECT;
            snprintf(why, sizeof why, "%s", refused);
            break;
        }
        int64_t left = deadline - rdmax__now_ms();
        if (st == RDMAX_OK || !retry || left <= 0)
            break;
        rdmax__log(ctx, RDMAX_LOG_DEBUG, RDMAX_LOG_ITEM_CONNECT_RETRY,
                   "connect: %s port %u: %s; again in %d ms", host, port, why, backoff);
        usleep((useconds_t)(left < backoff ? left : backoff) * 1000);
    }
    freeaddrinfo(res);
    ctx->cnt.auth_refused += st == RDMAX_ERR_OOB_AUTH;
    if (st != RDMAX_OK)
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_CONNECT,
                   "connect: %s port %u (%s, rdma_cm): %s", host, port, peer, why);
    return st;
}

/* ---- >>profile: profiling: variables, port counters, profile objects, events, points ------------- */

/* The device's port counters behind the port.* variables: the sysfs name on rxe, then on mlx5 (real
   hardware names them differently; NULL: none). Slow path only: files opened with the profile. */
#define RDMAX__PROF_PORT_N 7
static const struct {
    uint32_t var;
    const char *file[2];
} rdmax__prof_port[RDMAX__PROF_PORT_N] = {
    {RDMAX_PROFILE_VAR_PORT_RETRANSMITS, {"completer_retry_err", "local_ack_timeout_err"}},
    {RDMAX_PROFILE_VAR_PORT_RETRY_EXCEEDED, {"retry_exceeded_err", NULL}},
    {RDMAX_PROFILE_VAR_PORT_RNR_NAKS_RECEIVED, {"rcvd_rnr_err", "rnr_nak_retry_err"}},
    {RDMAX_PROFILE_VAR_PORT_RNR_NAKS_SENT, {"send_rnr_err", NULL}},
    {RDMAX_PROFILE_VAR_PORT_SEQ_NAKS_RECEIVED, {"rcvd_seq_err", "packet_seq_err"}},
    {RDMAX_PROFILE_VAR_PORT_OUT_OF_SEQ, {"out_of_seq_request", "out_of_sequence"}},
    {RDMAX_PROFILE_VAR_PORT_DUPLICATE_REQUESTS, {"duplicate_request", NULL}},
};

struct rdmax_profile {
    rdmax_ctx *ctx;
    rdmax_profile *next;        /* the context's open profiles */
    rdmax_profile_event_cb cb[RDMAX_PROFILE_EVENT__COUNT];
    void *cb_user[RDMAX_PROFILE_EVENT__COUNT];
    int in_snapshot;
    uint64_t snap[RDMAX_PROFILE_VAR__COUNT];
    int port_fd[RDMAX__PROF_PORT_N];  /* sysfs counter files, -1: the device has none */
    uint32_t snap_port_read;          /* bit i: port_fd[i] was read in this snapshot */
    uint32_t snap_port_ok;            /* bit i: and that read worked */
};

/* ---- per-context state ---- */
static void rdmax__prof_set_mask(rdmax_ctx *ctx, struct rdmax__prof *st, uint32_t mask)
{
    st->event_mask = mask;
    __atomic_store_n(&ctx->prof_event_mask, mask, __ATOMIC_RELAXED);
}

struct rdmax__prof *rdmax__prof_state_make(rdmax_ctx *ctx)
{
    if (ctx->prof)
        return ctx->prof;
    struct rdmax__prof *st = (struct rdmax__prof *)rdmax__alloc(ctx, sizeof *st);
    if (!st)
        return NULL;
    st->ctx = ctx;
    st->log.lvl = -1;
    __atomic_store_n(&ctx->prof, st, __ATOMIC_RELEASE);
    return st;
}

static void rdmax__prof_state_free(rdmax_ctx *ctx, struct rdmax__prof *st)
{
    ctx->prof = NULL;
    ctx->prof_event_mask = 0;
    rdmax__free(ctx, st);
}

/* ---- variables ---- */
static rdmax_profile_var rdmax__prof_vars[RDMAX_PROFILE_VAR__COUNT];
static char rdmax__prof_op_names[3 * RDMAX_OP__COUNT][32];
static char rdmax__prof_op_descs[3 * RDMAX_OP__COUNT][96];
static pthread_once_t rdmax__prof_vars_once = PTHREAD_ONCE_INIT;

static void rdmax__prof_vars_init(void)
{
    static const char *const what[3] = {"posted", "completed", "bytes"};
    static const char *const pre[3] = {"", "", "bytes of the "};
    static const char *const post[3] = {" operations posted (accepted by ibv_post_send or chained in a batch)",
                                        " operations completed (successfully, with an error, flushed or canceled)",
                                        " operations posted"};
    for (unsigned k = 0; k < 3; k++) {
        for (unsigned op = 0; op < RDMAX_OP__COUNT; op++) {
            unsigned id = k * RDMAX_OP__COUNT + op;
            const char *on = rdmax_op_str((rdmax_op)op);
            char tmp[16];
            if (!strcmp(on, "unknown")) {
                snprintf(tmp, sizeof tmp, "op%u", op);
                on = tmp;
            }
            snprintf(rdmax__prof_op_names[id], sizeof rdmax__prof_op_names[id], "%s.%s", on, what[k]);
            snprintf(rdmax__prof_op_descs[id], sizeof rdmax__prof_op_descs[id], "%s%s%s", pre[k], on, post[k]);
            rdmax__prof_vars[id].id = id;
            rdmax__prof_vars[id].type = RDMAX_PROFILE_COUNTER;
            rdmax__prof_vars[id].name = rdmax__prof_op_names[id];
            rdmax__prof_vars[id].desc = rdmax__prof_op_descs[id];
        }
    }
#define RDMAX__X(id_, name_, type_, desc_)                                                                 \
    rdmax__prof_vars[RDMAX_PROFILE_VAR_##id_].id = RDMAX_PROFILE_VAR_##id_;                                \
    rdmax__prof_vars[RDMAX_PROFILE_VAR_##id_].type = RDMAX_PROFILE_##type_;                                \
    rdmax__prof_vars[RDMAX_PROFILE_VAR_##id_].name = name_;                                                \
    rdmax__prof_vars[RDMAX_PROFILE_VAR_##id_].desc = desc_;
    RDMAX__PROF_VARS(RDMAX__X)
#undef RDMAX__X
}

#define RDMAX__PROF_LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
/* A test's hook between the two halves of a snapshot: an operation run there completes after
   `completed` was read and before `posted` is, the interleaving the order must survive. */
#ifndef RDMAX__PROF_COLLECT_BETWEEN
#define RDMAX__PROF_COLLECT_BETWEEN() ((void)0)
#endif

/* Every variable into v[]. May run on another thread than the context's.

   Why completed <= posted holds in every snapshot: the owner increments posted[op] before the
   ibv_post_send that hands the request to the device (or, for a chained request, before the
   rdmax__post_chain that posts it; the inline fast path right after its ibv_post_send returned, still
   before any poll of this thread could see the completion), and increments completed[op] only after an
   ibv_poll_cq returned the completion (or when rdmax_ep_destroy cancels a request posted earlier). Both increments are plain
   read-modify-writes of 8-byte aligned fields, i.e. one 8-byte store each on a 64-bit CPU: a reader
   sees the old or the new value, never a torn one. Between the two stores the owner calls opaque
   functions (ibv_post_send, ibv_poll_cq: calls through the provider's function table) that could read
   the counters, so the compiler cannot sink the posted store below them nor hoist the completed store
   above them: the stores leave the CPU in program order. On x86 (TSO) stores become visible to other
   CPUs in program order and loads are not reordered with older loads, so a reader that loads
   completed[op] first and posted[op] second (the acquire fence keeps the compiler from swapping the
   loads; on x86 it emits no instruction) finds posted[op] at least as new as the store that preceded
   the completed[op] value it saw: posted >= completed. A post that ibv_post_send refuses is taken back
   (posted[op]--) but never completes, so it cannot break the inequality.
   Other architectures (arm64, POWER) may make two stores visible out of order. The reader half stays as
   it is (the fence becomes dmb ishld on arm64); the owner needs a release between the posted stores
   and the completed stores: a __atomic_thread_fence(__ATOMIC_RELEASE) in rdmax__poll_send after
   ibv_poll_cq returned n > 0, once per batch of up to 16 completions, before the retire loop (dmb ish
   on arm64, lwsync on POWER; on x86 it compiles to nothing, so it can go in unconditionally), and one
   in rdmax_ep_destroy before it cancels. The rcache pointer would need a release store where the cache
   is created. With those, the argument is the C11 fence-fence synchronisation, not a hardware one.
   Formally the owner's plain increments race with these loads (a data race in C11 terms, and TSan
   will say so); making them __atomic_store_n(.., __ATOMIC_RELAXED) of the incremented value would
   fix that and compiles to the same instructions on x86 and arm64. 32-bit CPUs may tear 8-byte
   counters: there a snapshot is only approximately consistent. */
static void rdmax__prof_collect(rdmax_ctx *ctx, uint64_t *v)
{
    const rdmax_counters *c = &ctx->cnt;
    for (unsigned op = 0; op < RDMAX_OP__COUNT; op++)
        v[RDMAX_PROFILE_VAR_COMPLETED(op)] = RDMAX__PROF_LOAD(c->completed[op]);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    RDMAX__PROF_COLLECT_BETWEEN();
    for (unsigned op = 0; op < RDMAX_OP__COUNT; op++) {
        v[RDMAX_PROFILE_VAR_POSTED(op)] = RDMAX__PROF_LOAD(c->posted[op]);
        v[RDMAX_PROFILE_VAR_BYTES(op)] = op == RDMAX_OP_FADD || op == RDMAX_OP_CSWAP
                                         ? RDMAX__ATOMIC_BYTES(v[RDMAX_PROFILE_VAR_POSTED(op)])
                                         : RDMAX__PROF_LOAD(c->bytes[op]);
    }
    {
        uint64_t calls = RDMAX__PROF_LOAD(c->post_calls);  /* plus the requests in posted[] (rdmax_ctx.cnt) */
        for (unsigned op = 0; op < RDMAX_OP__COUNT; op++)
            calls += v[RDMAX_PROFILE_VAR_POSTED(op)];
        v[RDMAX_PROFILE_VAR_POST_CALLS] = calls;
    }
    v[RDMAX_PROFILE_VAR_RECV_POST_CALLS] = RDMAX__PROF_LOAD(c->recv_post_calls);
    v[RDMAX_PROFILE_VAR_POLLS] = RDMAX__PROF_LOAD(c->polls);
    v[RDMAX_PROFILE_VAR_EMPTY_POLLS] = RDMAX__PROF_LOAD(c->empty_polls);
    v[RDMAX_PROFILE_VAR_CQES] = RDMAX__PROF_LOAD(c->cqes);
    v[RDMAX_PROFILE_VAR_RECV_MSGS] = RDMAX__PROF_LOAD(c->recv_msgs);
    v[RDMAX_PROFILE_VAR_RECV_BYTES] = RDMAX__PROF_LOAD(c->recv_bytes);
    v[RDMAX_PROFILE_VAR_ERR_CQES] = RDMAX__PROF_LOAD(c->err_cqes);
    v[RDMAX_PROFILE_VAR_FLUSHED_CQES] = RDMAX__PROF_LOAD(c->flushed_cqes);
    v[RDMAX_PROFILE_VAR_RECV_FLUSHED] = RDMAX__PROF_LOAD(c->recv_flushed);
    v[RDMAX_PROFILE_VAR_STALE_WR_IDS] = RDMAX__PROF_LOAD(c->stale_wr_ids);
    v[RDMAX_PROFILE_VAR_RECV_DROPS] = RDMAX__PROF_LOAD(c->recv_drops);
    v[RDMAX_PROFILE_VAR_NO_RESOURCE] = RDMAX__PROF_LOAD(c->no_resource);
    v[RDMAX_PROFILE_VAR_EP_ERRORS] = RDMAX__PROF_LOAD(c->ep_errors);
    v[RDMAX_PROFILE_VAR_ENDPOINTS] = RDMAX__PROF_LOAD(ctx->n_eps);
    /* The cache is made on the first buffer passed without an rdmax_mem: 0 until then. The context's
       cache is not thread-safe, so query_stats takes no lock: a plain copy of its counters. */
    rdmax_rcache *rc = __atomic_load_n(&ctx->rcache, __ATOMIC_ACQUIRE);
    rdmax_rcache_stats rs;
    memset(&rs, 0, sizeof rs);
    if (rc)
        rdmax_rcache_query_stats(rc, &rs);
    v[RDMAX_PROFILE_VAR_RCACHE_HITS] = rs.hits;
    v[RDMAX_PROFILE_VAR_RCACHE_MISSES] = rs.misses;
    v[RDMAX_PROFILE_VAR_RCACHE_EVICTIONS] = rs.evictions;
    v[RDMAX_PROFILE_VAR_RCACHE_INVALIDATIONS] = rs.invalidations;
    v[RDMAX_PROFILE_VAR_RCACHE_REGIONS] = rs.regions;
    v[RDMAX_PROFILE_VAR_RCACHE_BYTES] = rs.bytes;
    v[RDMAX_PROFILE_VAR_PENDING_LENGTH] = RDMAX__PROF_LOAD(ctx->arb.pending);
    v[RDMAX_PROFILE_VAR_PENDING_DISPATCHES] = RDMAX__PROF_LOAD(ctx->cnt.dispatched);
    v[RDMAX_PROFILE_VAR_UD_SKIPPED] = RDMAX__PROF_LOAD(c->ud_skipped);
    v[RDMAX_PROFILE_VAR_UD_LATE] = RDMAX__PROF_LOAD(c->ud_late);
    v[RDMAX_PROFILE_VAR_UD_DUPLICATES] = RDMAX__PROF_LOAD(c->ud_duplicates);
    v[RDMAX_PROFILE_VAR_RECV_IMMS] = RDMAX__PROF_LOAD(c->recv_imms);
    v[RDMAX_PROFILE_VAR_SRQ_LIMIT_EVENTS] = RDMAX__PROF_LOAD(c->srq_limit_events);
    v[RDMAX_PROFILE_VAR_UD_WRONG_SOURCE] = RDMAX__PROF_LOAD(c->ud_wrong_source);
    v[RDMAX_PROFILE_VAR_WINDOW_BREAKS] = RDMAX__PROF_LOAD(c->window_breaks);
    v[RDMAX_PROFILE_VAR_GRANT_WAITS] = RDMAX__PROF_LOAD(c->grant_waits);
    v[RDMAX_PROFILE_VAR_RECV_CHUNKS_FREED] = RDMAX__PROF_LOAD(c->recv_chunks_freed);
    v[RDMAX_PROFILE_VAR_RECV_CQ_ENTRIES] = RDMAX__PROF_LOAD(ctx->rcq_size);
    v[RDMAX_PROFILE_VAR_EP_BYTES] = RDMAX__PROF_LOAD(ctx->ep_bytes);
    /* The pools' totals live in rx, which lasts as long as the context (a pool may be freed meanwhile). */
    struct rdmax__rx *rx = __atomic_load_n(&ctx->rx, __ATOMIC_ACQUIRE);
    v[RDMAX_PROFILE_VAR_RECV_POOL_BYTES] = rx ? RDMAX__PROF_LOAD(rx->bytes) : 0;
    v[RDMAX_PROFILE_VAR_RECV_POOL_POSTED] = rx ? RDMAX__PROF_LOAD(rx->posted) : 0;
    for (int i = 0; i < RDMAX__PROF_PORT_N; i++)  /* sysfs: read by the callers that want them */
        v[rdmax__prof_port[i].var] = 0;
}

/* ---- device port counters (sysfs) ---- */
static int rdmax__prof_port_index(uint32_t id)
{
    for (int i = 0; i < RDMAX__PROF_PORT_N; i++)
        if (rdmax__prof_port[i].var == id)
            return i;
    return -1;
}

static void rdmax__prof_port_open(rdmax_ctx *ctx, int *fd)
{
    for (int i = 0; i < RDMAX__PROF_PORT_N; i++) {
        fd[i] = -1;
        for (int k = 0; k < 2 && fd[i] < 0 && rdmax__prof_port[i].file[k]; k++) {
            char path[256];
            snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/%u/hw_counters/%s", ctx->attr.name,
                     (unsigned)ctx->attr.port, rdmax__prof_port[i].file[k]);
            fd[i] = open(path, O_RDONLY | O_CLOEXEC);
        }
    }
}

static void rdmax__prof_port_close(int *fd)
{
    for (int i = 0; i < RDMAX__PROF_PORT_N; i++)
        if (fd[i] >= 0) {
            close(fd[i]);
            fd[i] = -1;
        }
}

/* One counter: 0 and its value, or -1 (no file, or sysfs refused the read). pread from 0: sysfs
   formats the value afresh on each read from the start. */
static int rdmax__prof_port_read(int fd, uint64_t *v)
{
    char buf[32];
    *v = 0;
    if (fd < 0)
        return -1;
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    char *end;
    unsigned long long x = strtoull(buf, &end, 10);
    if (end == buf)
        return -1;
    *v = x;
    return 0;
}

/* ---- profile objects ---- */
rdmax_status rdmax_profile_create(rdmax_ctx *ctx, rdmax_profile **out)
{
    *out = NULL;
    pthread_once(&rdmax__prof_vars_once, rdmax__prof_vars_init);
    struct rdmax__prof *st = rdmax__prof_state_make(ctx);
    if (!st) {
        return RDMAX_ERR_NO_MEMORY;
    }
    if (st->in_event) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_PROFILE_MISUSE,
                   "device %s: rdmax_profile_create called from an event callback",
                   ctx->attr.name);
        return RDMAX_ERR_INVALID_PARAM;
    }
    rdmax_profile *p = (rdmax_profile *)rdmax__alloc(ctx, sizeof *p);
    if (!p)
        return RDMAX_ERR_NO_MEMORY;
    p->ctx = ctx;
    rdmax__prof_port_open(ctx, p->port_fd);
    p->next = st->profs;
    st->profs = p;
    *out = p;
    return RDMAX_OK;
}

static uint32_t rdmax__prof_union(const struct rdmax__prof *st)
{
    uint32_t m = 0;
    for (const rdmax_profile *p = st->profs; p; p = p->next)
        for (unsigned t = 0; t < RDMAX_PROFILE_EVENT__COUNT; t++)
            if (p->cb[t])
                m |= 1u << t;
    return m;
}

void rdmax_profile_destroy(rdmax_profile *prof)
{
    if (!prof)
        return;
    rdmax_ctx *ctx = prof->ctx;
    struct rdmax__prof *st = rdmax__prof_state(ctx);
    if (st && st->in_event) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_PROFILE_MISUSE,
                   "device %s: rdmax_profile_destroy called from an event callback: "
                   "not closed", ctx->attr.name);
        return;
    }
    if (st) {
        for (rdmax_profile **pp = &st->profs; *pp; pp = &(*pp)->next)
            if (*pp == prof) {
                *pp = prof->next;
                break;
            }
        rdmax__prof_set_mask(ctx, st, rdmax__prof_union(st));
    }
    rdmax__prof_port_close(prof->port_fd);
    rdmax__free(ctx, prof);
}

rdmax_status rdmax_profile_query_vars(rdmax_profile *prof, const rdmax_profile_var **vars, size_t *count)
{
    (void)prof;
    pthread_once(&rdmax__prof_vars_once, rdmax__prof_vars_init);
    *vars = rdmax__prof_vars;
    *count = RDMAX_PROFILE_VAR__COUNT;
    return RDMAX_OK;
}

rdmax_status rdmax_profile_read_u64(rdmax_profile *prof, uint32_t id, uint64_t *out)
{
    if (id >= RDMAX_PROFILE_VAR__COUNT)
        return RDMAX_ERR_INVALID_PARAM;
    int pi = rdmax__prof_port_index(id);
    if (prof->in_snapshot) {
        if (pi >= 0 && !(prof->snap_port_read >> pi & 1u)) {  /* sysfs costs microseconds: only if asked */
            prof->snap_port_read |= 1u << pi;
            if (!rdmax__prof_port_read(prof->port_fd[pi], &prof->snap[id]))
                prof->snap_port_ok |= 1u << pi;
        }
        *out = prof->snap[id];
        return pi < 0 || (prof->snap_port_ok >> pi & 1u) ? RDMAX_OK : RDMAX_ERR_UNSUPPORTED;
    }
    if (pi >= 0)
        return rdmax__prof_port_read(prof->port_fd[pi], out) ? RDMAX_ERR_UNSUPPORTED : RDMAX_OK;
    uint64_t v[RDMAX_PROFILE_VAR__COUNT];
    rdmax__prof_collect(prof->ctx, v);
    *out = v[id];
    return RDMAX_OK;
}

void rdmax_profile_start_reads(rdmax_profile *prof)
{
    rdmax__prof_collect(prof->ctx, prof->snap);
    prof->snap_port_read = prof->snap_port_ok = 0;
    prof->in_snapshot = 1;
}

void rdmax_profile_end_reads(rdmax_profile *prof)
{
    prof->in_snapshot = 0;
}

/* ---- events ---- */
const char *rdmax_profile_event_str(rdmax_profile_event type)
{
    switch (type) {
#define RDMAX__X(id, name) case RDMAX_PROFILE_EVENT_##id: return name;
        RDMAX__PROF_EVENTS(RDMAX__X)
#undef RDMAX__X
    default: break;
    }
    return "unknown";
}

rdmax_status rdmax_profile_reg_event(rdmax_profile *prof, rdmax_profile_event type, rdmax_profile_event_cb cb,
                                     void *user)
{
    rdmax_ctx *ctx = prof->ctx;
    struct rdmax__prof *st = rdmax__prof_state(ctx);
    if ((unsigned)type >= RDMAX_PROFILE_EVENT__COUNT || !st) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_PROFILE_MISUSE,
                   "device %s: rdmax_profile_reg_event: unknown event type %d",
                   ctx->attr.name, (int)type);
        return RDMAX_ERR_INVALID_PARAM;
    }
    if (st->in_event) {
        rdmax__log(ctx, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_PROFILE_MISUSE,
                   "device %s: rdmax_profile_reg_event called from an event callback",
                   ctx->attr.name);
        return RDMAX_ERR_INVALID_PARAM;
    }
    prof->cb[type] = cb;
    prof->cb_user[type] = user;
    rdmax__prof_set_mask(ctx, st, rdmax__prof_union(st));
    return RDMAX_OK;
}

void rdmax__profile_event(rdmax_ctx *ctx, int type, rdmax_ep *ep, uint64_t detail)
{
    struct rdmax__prof *st = rdmax__prof_state(ctx);
    if (!st || (unsigned)type >= RDMAX_PROFILE_EVENT__COUNT || !(st->event_mask & (1u << type)))
        return;
    st->in_event++;
    for (rdmax_profile *p = st->profs; p; p = p->next)
        if (p->cb[type])
            p->cb[type](p, (rdmax_profile_event)type, ep, detail, p->cb_user[type]);
    st->in_event--;
}

void rdmax__profile_rcache_notify(void *arg, int what, const rdmax_rcache_region *r)
{
    rdmax_ctx *ctx = (rdmax_ctx *)arg;
    int type = what == RDMAX_RCACHE_NOTIFY_EVICT ? RDMAX_PROFILE_EVENT_RCACHE_EVICT
                                                 : RDMAX_PROFILE_EVENT_RCACHE_INVALIDATE;
    RDMAX__PROFILE_EVENT(ctx, type, NULL, (uint64_t)(r->end - r->start));
}

/* ---- points and print ---- */
uint64_t rdmax__prof_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ns per tick, measured once against CLOCK_MONOTONIC over 20 ms (the first print waits that long). */
#if RDMAX__TICKS_TSC
static uint64_t rdmax__npt_bits;  /* the double's bits; 0 until measured (a race measures twice) */
#endif
static double rdmax__ns_per_tick(void)
{
#if RDMAX__TICKS_TSC
    double v;
    uint64_t b = __atomic_load_n(&rdmax__npt_bits, __ATOMIC_RELAXED);
    if (b) {
        memcpy(&v, &b, sizeof v);
        return v;
    }
    uint64_t n0 = rdmax__prof_now_ns(), t0 = rdmax__ticks(), n1, t1;
    do {
        n1 = rdmax__prof_now_ns();
        t1 = rdmax__ticks();
    } while (n1 - n0 < 20000000u);
    v = t1 > t0 ? (double)(n1 - n0) / (double)(t1 - t0) : 1.0;
    memcpy(&b, &v, sizeof b);
    __atomic_store_n(&rdmax__npt_bits, b, __ATOMIC_RELAXED);
    return v;
#else
    return 1.0;
#endif
}

void rdmax_profile_print(rdmax_ctx *ctx, FILE *f)
{
    static const char *const names[RDMAX__PROF_POINT__COUNT] = {
#define RDMAX__X(id, name) name,
        RDMAX__PROF_POINTS(RDMAX__X)
#undef RDMAX__X
    };
#ifdef RDMAX_PROFILE
    const char *status = "on";
#else
    const char *status = "off";
#endif
    static const char rule[] = "-------  --------------------  ----------------  ----------------  ----------------";
    struct rdmax__prof *st = rdmax__prof_state(ctx);
    double npt = rdmax__ns_per_tick();
    fprintf(f, "rdmax profile points (device %s)\n", ctx->attr.name);
    fprintf(f, " status                  name             total                nr            avg.ns\n%s\n", rule);
    for (unsigned i = 0; i < RDMAX__PROF_POINT__COUNT; i++) {
        uint64_t t = st ? RDMAX__PROF_LOAD(st->point_ticks[i]) : 0;
        uint64_t n = st ? RDMAX__PROF_LOAD(st->point_count[i]) : 0;
        double ns = (double)t * npt;
        fprintf(f, "%7s  %20s  %16.9f  %16llu  %16llu\n", status, names[i], ns / 1e9, (unsigned long long)n,
                (unsigned long long)(n ? ns / (double)n + 0.5 : 0));
    }
    fprintf(f, "%s\n", rule);
    pthread_once(&rdmax__prof_vars_once, rdmax__prof_vars_init);
    uint64_t v[RDMAX_PROFILE_VAR__COUNT];
    rdmax__prof_collect(ctx, v);
    int fd[RDMAX__PROF_PORT_N];
    uint32_t port_ok = 0;
    rdmax__prof_port_open(ctx, fd);
    for (int i = 0; i < RDMAX__PROF_PORT_N; i++)
        if (!rdmax__prof_port_read(fd[i], &v[rdmax__prof_port[i].var]))
            port_ok |= 1u << i;
    rdmax__prof_port_close(fd);
    for (unsigned i = 0; i < RDMAX_PROFILE_VAR__COUNT; i++) {
        int pi = rdmax__prof_port_index(i);
        if (pi >= 0 && !(port_ok >> pi & 1u))
            fprintf(f, "%s: unavailable\n", rdmax__prof_vars[i].name);
        else
            fprintf(f, "%s: %llu\n", rdmax__prof_vars[i].name, (unsigned long long)v[i]);
    }
}

void rdmax__profile_ctx_fini(rdmax_ctx *ctx)
{
    struct rdmax__prof *st = rdmax__prof_state(ctx);
    if (!st)
        return;
    if (st->log.repeats > 0 && st->log.lvl >= 0) {
        char summary[160];
        rdmax__log_dd_summary(summary, sizeof summary, ctx->attr.name, st->log.repeats);
        rdmax__log_emit(&ctx->desc.logger, (rdmax_log_level)st->log.lvl, RDMAX_LOG_ITEM_LOG_REPEATED, summary);
    }
    while (st->profs) {  /* left open: the handles die with the context */
        rdmax_profile *p = st->profs;
        st->profs = p->next;
        rdmax__prof_port_close(p->port_fd);
        rdmax__free(ctx, p);
    }
    rdmax__prof_set_mask(ctx, st, 0);
    rdmax__prof_state_free(ctx, st);
}

#undef RDMAX__PROF_LOAD

/* ---- >>testing: hooks for rdmax's own tests ------------------------------------------------------ */
/* Compiled only when the implementation unit defines RDMAX_TESTING. Each forces one internal state that
   no public call can reach (a provider that refuses a post, datagrams lost on the wire) or reads one
   that no accessor shows, so a test does not write rdmax's private fields itself. Not API: for
   tests/ only; names and behaviour may change. */

#ifdef RDMAX_TESTING
/* Posts since ep's last signaled one (what a refused post must give back), while the queue is far from
   full (rdmax__sig_next). */
static inline uint32_t rdmax__test_ep_unsignaled(const rdmax_ep *ep)
{
    return ep->signal_interval - (ep->sig_at - ep->sq_head + 1);
}
/* Tell ep its QP takes `max_inline` bytes inline (a lie above the QP's limit makes the provider refuse
   the post); returns the value before. */
static inline uint32_t rdmax__test_ep_set_max_inline(rdmax_ep *ep, uint32_t max_inline)
{
    uint32_t was = ep->max_inline;
    ep->max_inline = max_inline;
    return was;
}
/* Move the health pass's clock (watchdog, keepalive) forward by ms, as if that much time had passed
   since the last progress call: the tick is due at the next one. */
static inline void rdmax__test_clock_advance(rdmax_ctx *ctx, int64_t ms)
{
    ctx->clock_skew_ms += ms;
    ctx->tick_at = rdmax__tick_clock();
}
/* Hold the health pass (its due time never comes) or let it run again at the next progress call:
   bench/instr.c counts the fast paths apart from the pass, whose cost depends on the time between calls,
   and counts the pass in a case of its own. */
static inline void rdmax__test_tick_hold(rdmax_ctx *ctx, int hold)
{
    ctx->tick_at = rdmax__tick_clock() + (hold ? INT32_MAX : 0u);  /* (held for hours) */
}
/* Set the length every send-queue slot of ep keeps (poison: a rollback that read a free slot shows). */
static inline void rdmax__test_ep_poison_slots(rdmax_ep *ep, uint32_t len)
{
    for (uint32_t i = 0; i <= ep->sq_mask; i++)
        ep->slots[i].len = len;
}
/* The peer's QP number of the rdma_cm handshake a full listener pushes out first (rdmax__cm_hs_oldest, as
   rdmax__cm_hs_slot chooses); 0: none held. */
static inline uint32_t rdmax__test_cm_oldest_qpn(const rdmax_listener *l)
{
    uint32_t old = rdmax__cm_hs_oldest(l);
    return old == UINT32_MAX ? 0 : l->cm_hs[old].ep->peer_qpn;
}
/* Endpoints ctx holds now (a refused handshake must leave none behind). */
static inline uint32_t rdmax__test_ctx_eps(const rdmax_ctx *ctx)
{
    return ctx->n_eps;
}
/* Run the health pass now (device events, watchdog, keepalive, the receive queues' low-water mark),
   not at its next due time. */
static inline void rdmax__test_tick(rdmax_ctx *ctx)
{
    rdmax__tick(ctx);
}
/* Contexts holding ctx's device (a parent and its children), and device events another context read
   and queued for ctx. */
static inline uint32_t rdmax__test_dev_refs(const rdmax_ctx *ctx)
{
    return ctx->dev->refs;
}
static inline uint32_t rdmax__test_dev_events(const rdmax_ctx *ctx)
{
    return ctx->dev->n_ev;
}
#if RDMAX__HAS_RC
/* The slot of ctx's pool table that ep's shared receive pool takes (its buffers' wr_ids carry it). */
static inline uint32_t rdmax__test_ep_pool(const rdmax_ep *ep)
{
    return ep->pool;
}
/* Act as a device whose CQs hold at most max_cqe entries from now on (ctx's receive CQs then fill, and
   more open, after a few endpoints); returns the value before. */
static inline uint32_t rdmax__test_ctx_max_cqe(rdmax_ctx *ctx, uint32_t max_cqe)
{
    uint32_t was = ctx->attr.max_cqe;
    ctx->attr.max_cqe = max_cqe;
    return was;
}
/* Receive CQs ctx has (receive groups), and the one ep's QP completes on. */
static inline uint32_t rdmax__test_ctx_rgroups(const rdmax_ctx *ctx)
{
    return ctx->rx ? ctx->rx->n_groups : 1;
}
static inline uint32_t rdmax__test_ep_rgroup(const rdmax_ep *ep)
{
    return ep->ctx->rx && !ep->rbufs && !ep->shared_qp ? ep->ctx->rx->pool[ep->pool]->group : 0;
}
/* 1 if pool slot `slot` of ctx is empty and cooling: a pool freed there may still have completions
   queued, so no new pool takes the slot before the receive CQ was seen drained. */
static inline int rdmax__test_pool_cooling(const rdmax_ctx *ctx, uint32_t slot)
{
    return ctx->rx && !ctx->rx->pool[slot] && (ctx->rx->cooling >> slot & 1u);
}
#endif
#if RDMAX__HAS_UD
/* UD: the number ep gives its next datagram (the high half of rx_unreturned, see rdmax_send); setting it
   acts out datagrams lost (a jump ahead), late or duplicated (a step back) on the wire. */
static inline uint16_t rdmax__test_ud_tx_seq(const rdmax_ep *ep)
{
    return (uint16_t)(ep->rx_unreturned >> 16);
}
static inline void rdmax__test_ud_set_tx_seq(rdmax_ep *ep, uint16_t seq)
{
    ep->rx_unreturned = ((uint32_t)seq << 16) | (ep->rx_unreturned & 0xffffu);
}
#endif
#endif /* RDMAX_TESTING */

#ifdef __cplusplus
}
#endif
