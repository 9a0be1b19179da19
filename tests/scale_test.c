/* Thousands of RC endpoints on one context (rxe in the test VM), all fed by its shared receive queue:
     pairs N            N connected pairs (2N endpoints) in one context, made with rdmax_ep_create and
                        rdmax_ep_connect_record; each pair carries checked sends both ways, a put and a put
                        with immediate data; no RNR (device counters); all destroyed cleanly. Prints the
                        memory per endpoint: rdmax's own bytes, the provider's queue memory, the pool.
     listen C E         one server context accepts C x E endpoints from C client processes (E each)
                        through rdmax_listener_create/rdmax_accept; every message echoed and checked on both sides
     credits C M        C client processes stream M sends and puts with immediate data each to one server;
                        each refused post's wait is timed: the worst is printed beside the round-trip time
                        and bounded (a hang guard: the number is the result, not the bound)
     putrate N S        8-byte puts for S seconds over 1, then N, then 1 endpoint: the rates (a benchmark)
     memory P           P pairs with the default descriptors: rdmax's own bytes per endpoint (at most 2 KiB;
                        the batch staging is the context's), the provider's queue memory and the shared
                        pool per endpoint
     cqshare            8 endpoints x 6 unsignaled puts on a 64-entry send CQ: the posts past half the CQ
                        are signaled, so all complete without a flush
     adapt P            P idle pairs and one busy pair, default windows: the busy peer's window grows
                        from 2 to max_window 64 while it streams, shrinks back to 2 when it slows to
                        ping-pong (the pool's target with it), and a peer past what it was given fails
                        with RDMAX_ERR_PEER_WINDOW; no RNR
     tenk P             P pairs (2P endpoints, 5,000 for ten thousand) made by rdmax_ep_create_pair with
                        the default descriptors in one context, one checked message each way; no RNR
     rgroups P          the receive CQ capped at 128 entries (a test hook): P pairs (a multiple of 20) with
                        default windows fill one receive CQ after another (40 endpoints each), one checked
                        message each way; then a busy pair in a CQ of its own whose window grows to 64; no RNR
   Lines "ROW name value" are for bench/scale.sh.
   Windows and buffers are small here on purpose (rq_depth 4, recv_size 256 for pairs): the receive CQ
   holds every credit of the context, and rxe's max_cqe is 32767. Every endpoint here has keepalives off
   (1,000 idle endpoints would send 500 keepalive writes a second) and an ack timeout of 18 (7.5 s of
   retries): a loaded host can stall the test VM for longer than the default 0.47 s. */
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#define RDMAX_TESTING  /* rgroups: rdmax__test_ctx_max_cqe */
#include "../rdmax.h"
#include "testlib.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

static char g_lastlog[512];

static void keep_log(rdmax_log_level lvl, rdmax_log_item item, const char *msg, void *user)
{
    (void)user;
    (void)item;
    if (lvl <= RDMAX_LOG_WARN)
        snprintf(g_lastlog, sizeof g_lastlog, "%s", msg);
    if (lvl == RDMAX_LOG_ERROR)
        fprintf(stderr, "rdmax error: %s\n", msg);
}

/* rdmax's own allocations, counted through the context's allocator (a size header in front). */
static int64_t g_alloc_bytes;
static void *count_alloc(size_t n, void *user)
{
    (void)user;
    size_t *p = (size_t *)malloc(n + 16);
    if (!p)
        return NULL;
    p[0] = n;
    g_alloc_bytes += (int64_t)n;
    return (char *)p + 16;
}
static void count_free(void *q, void *user)
{
    (void)user;
    size_t *p = (size_t *)(void *)((char *)q - 16);
    g_alloc_bytes -= (int64_t)p[0];
    free(p);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static long proc_kb(const char *file, const char *key)
{
    FILE *f = fopen(file, "r");
    char line[256];
    long v = -1;
    size_t k = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, k))
            sscanf(line + k, "%ld", &v);
    if (f)
        fclose(f);
    return v;
}

/* The provider's queue memory mapped into this process (rxe maps each send queue, SRQ and CQ ring from
   the uverbs device): the sizes of those mappings. */
static long long uverbs_bytes(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    long long sum = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (strstr(line, "uverbs") && sscanf(line, "%lx-%lx", &a, &b) == 2)
            sum += (long long)(b - a);
    }
    if (f)
        fclose(f);
    return sum;
}

/* A 64-byte message: who (32 bits), seq (32 bits), then bytes derived from both. */
static void msg_fill(unsigned char *m, uint32_t who, uint32_t seq)
{
    memcpy(m, &who, 4);
    memcpy(m + 4, &seq, 4);
    for (int i = 8; i < 64; i++)
        m[i] = (unsigned char)(who * 31 + seq * 7 + i);
}

static int msg_check(const unsigned char *m, size_t len, uint32_t who, uint32_t seq)
{
    uint32_t w, s;
    if (len != 64)
        return 0;
    memcpy(&w, m, 4);
    memcpy(&s, m + 4, 4);
    if (w != who || s != seq)
        return 0;
    for (int i = 8; i < 64; i++)
        if (m[i] != (unsigned char)(who * 31 + seq * 7 + i))
            return 0;
    return 1;
}

/* ==== pairs ==== */
#define PAIR_MSGS 2
struct pep {
    uint32_t id;            /* 2 * pair + side */
    uint32_t got, bad, imms;
};

static void pair_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep;
    struct pep *p = (struct pep *)user;
    if (!msg_check((const unsigned char *)data, len, p->id ^ 1u, p->got))
        p->bad++;
    p->got++;
}

static void pair_imm(rdmax_ep *ep, uint32_t imm, size_t len, void *user)
{
    (void)ep;
    struct pep *p = (struct pep *)user;
    p->bad += imm != (p->id ^ 1u) || len != 8;
    p->imms++;
}

static int pairs_mode(int npairs)
{
    rdmax_ctx *ctx = NULL;
    rdmax_mem *region = NULL;
    int n = 2 * npairs;
    rdmax_ep **eps = (rdmax_ep **)calloc((size_t)n, sizeof *eps);
    struct pep *st = (struct pep *)calloc((size_t)n, sizeof *st);
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.recv_size = 256;
    cd.allocator.alloc = count_alloc;
    cd.allocator.free = count_free;
    cd.logger.func = keep_log;
    char name[96];
    tl_begin("scale/%d RC endpoints (%d pairs) in one context: created and connected", n, npairs);
    REQUIRE(eps && st, "calloc");
    REQUIRE(rdmax_ctx_create(&cd, &ctx) == RDMAX_OK, "context: %s", g_lastlog);
    char dev[64];
    snprintf(dev, sizeof dev, "%s", rdmax_ctx_query_attr(ctx)->name);
    REQUIRE(rdmax_mem_alloc(ctx, (size_t)npairs * 8, RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_ANY_ENDPOINT, &region) == RDMAX_OK, "region");
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.rq_depth = 4;
    d.sq_depth = 8;
    d.recv_size = 256;
    d.keepalive_ms = RDMAX_OFF;
    d.timeout = 18;
    d.recv_cb = pair_recv;
    d.imm_cb = pair_imm;
    long vm0 = proc_kb("/proc/self/status", "VmSize:"), rss0 = proc_kb("/proc/self/status", "VmRSS:");
    long avail0 = proc_kb("/proc/meminfo", "MemAvailable:");
    long long uv0 = uverbs_bytes();
    int64_t al0 = g_alloc_bytes;
    double t0 = now_s();
    for (int i = 0; i < n; i += 2) {
        rdmax_ep_desc d1 = d;
        st[i].id = (uint32_t)i;
        st[i + 1].id = (uint32_t)i + 1;
        d.user = &st[i];
        d1.user = &st[i + 1];
        rdmax_status s = tl_pair(ctx, ctx, &d, &d1, &eps[i], &eps[i + 1]);
        REQUIRE(s == RDMAX_OK, "pair %d: %s: %s", i / 2, rdmax_status_str(s), g_lastlog);
    }
    double t1 = now_s();
    long vm1 = proc_kb("/proc/self/status", "VmSize:"), rss1 = proc_kb("/proc/self/status", "VmRSS:");
    long avail1 = proc_kb("/proc/meminfo", "MemAvailable:");
    long long uv1 = uverbs_bytes();
    int64_t al1 = g_alloc_bytes;
    rdmax_recv_pool_info srq = tl_pool(ctx, 0);
    uint64_t own = tl_prof(ctx, RDMAX_PROFILE_VAR_EP_BYTES), n_eps = tl_prof(ctx, RDMAX_PROFILE_VAR_ENDPOINTS);
    double pool = (double)srq.buffers * srq.recv_size;
    printf("# %d endpoints created and connected in %.2f s (%.0f per second)\n", n, t1 - t0, n / (t1 - t0));
    printf("# memory per endpoint: rdmax's own %llu B (endpoint_bytes: sizeof(rdmax_ep) %zu, then its %u send slots "
           "and regions; allocator delta %lld B with table and map shares); provider %lld B (queue mappings; sq_depth %u, "
           "max_inline %u); shared pool %.0f B (%u buffers of %u B in %u chunks, SRQ of %u); whole process "
           "VmSize %ld B, RSS %ld B; MemAvailable %ld B\n",
           (unsigned long long)(own / (uint64_t)n), sizeof(rdmax_ep), d.sq_depth,
           (long long)((al1 - al0) / n), (uv1 - uv0) / n, d.sq_depth,
           rdmax_ep_query_desc(eps[0]).max_inline, pool / n, srq.buffers, srq.recv_size, srq.chunks, srq.srq_cap,
           (vm1 - vm0) * 1024 / n, (rss1 - rss0) * 1024 / n, (avail0 - avail1) * 1024 / n);
    printf("ROW rc_connect_info_eps_per_s %.0f\n", n / (t1 - t0));
    CHECK(n_eps == (uint64_t)n && srq.target == (uint32_t)n * (d.rq_depth + 1) &&
              srq.posted == srq.target + srq.reserve,
          "endpoints %llu, target %u, reserve %u, posted %u", (unsigned long long)n_eps, srq.target, srq.reserve,
          srq.posted);
    tl_end();

    snprintf(name, sizeof name, "scale/%d endpoints: %d checked sends each way, a put and a put with "
             "immediate per pair, no RNR", n, PAIR_MSGS);
    tl_begin("%s", name);
    uint64_t rnr0 = tl_rnr_count(dev);
    uint32_t *sent = (uint32_t *)calloc((size_t)n, sizeof *sent);
    int *put_done = (int *)calloc((size_t)n, sizeof *put_done);
    REQUIRE(sent && put_done, "calloc");
    double t2 = now_s();
    long spins = 0;
    for (int busy = 1; busy && spins < 2000000; spins++) {
        busy = 0;
        for (int i = 0; i < n; i++) {
            if (sent[i] < PAIR_MSGS) {
                unsigned char m[64];
                msg_fill(m, (uint32_t)i, sent[i]);
                if (rdmax_send(eps[i], m, 64, NULL, NULL) >= 0)
                    sent[i]++;
            }
            if ((i & 1) == 0 && put_done[i] == 0) {
                uint64_t v = 0x9000000000000000ull | (uint64_t)i;
                if (rdmax_put(eps[i], &v, 8, NULL, (uintptr_t)region->addr + 8 * (uint64_t)(i / 2), region->rkey,
                              NULL) >= 0)
                    put_done[i] = 1;
            }
            if ((i & 1) == 0 && put_done[i] == 1) {  /* after the put: the notice finds it in place */
                uint64_t v = 0;
                if (rdmax_put_imm(eps[i], &v, 8, NULL, (uintptr_t)region->addr + 8 * (uint64_t)(i / 2) + 0,
                                  region->rkey, (uint32_t)i, NULL) >= 0)
                    put_done[i] = 2;
            }
            busy |= sent[i] < PAIR_MSGS || st[i].got < PAIR_MSGS || ((i & 1) && st[i].imms < 1) ||
                    ((i & 1) == 0 && put_done[i] < 2);
            if ((i & 63) == 63)
                rdmax_progress(ctx);
        }
        rdmax_progress(ctx);
    }
    for (int i = 0; i < 1000; i++)
        rdmax_progress(ctx);
    double t3 = now_s();
    uint32_t got = 0, bad = 0, imms = 0;
    for (int i = 0; i < n; i++) {
        got += st[i].got;
        bad += st[i].bad;
        imms += st[i].imms;
    }
    /* the put wrote its word, then the put with immediate overwrote it with 0: each word must be 0 */
    uint32_t words_bad = 0;
    for (int i = 0; i < npairs; i++)
        words_bad += ((uint64_t *)region->addr)[i] != 0;
    rdmax_counters c;
    rdmax_ctx_query_counters(ctx, &c);
    printf("# traffic: %u messages, %u notices in %.2f s; grants %llu, refused posts %llu\n", got, imms, t3 - t2,
           (unsigned long long)c.posted[RDMAX_OP_GRANT], (unsigned long long)c.no_resource);
    CHECK(got == (uint32_t)n * PAIR_MSGS && imms == (uint32_t)npairs, "%u of %u messages, %u of %d notices", got,
          n * PAIR_MSGS, imms, npairs);
    CHECK(bad == 0 && words_bad == 0, "%u bad messages or notices, %u words not overwritten", bad, words_bad);
    CHECK(c.ep_errors == 0, "%llu endpoints failed", (unsigned long long)c.ep_errors);
    printf("# RNR counters of %s (rcvd_rnr_err + send_rnr_err + retry_rnr_exceeded_err): %llu before, %llu after\n",
           dev, (unsigned long long)rnr0, (unsigned long long)tl_rnr_count(dev));
    CHECK(tl_rnr_count(dev) == rnr0, "RNR counters moved by %llu", (unsigned long long)(tl_rnr_count(dev) - rnr0));
    tl_end();

    tl_begin("scale/%d endpoints destroyed cleanly", n);
    int unflushed = 0;
    for (int i = 0; i < n; i++)  /* everything acknowledged before either side of a pair goes */
        unflushed += rdmax_ep_flush(eps[i], 10000) != RDMAX_OK;
    CHECK(unflushed == 0, "%d endpoints did not flush: %s", unflushed, g_lastlog);
    for (int i = 0; i < n; i++) {
        rdmax_ep_destroy(eps[i]);
        eps[i] = NULL;
    }
    for (int i = 0; i < 1000; i++)
        rdmax_progress(ctx);
    {
        uint64_t left = tl_prof(ctx, RDMAX_PROFILE_VAR_ENDPOINTS), bytes = tl_prof(ctx, RDMAX_PROFILE_VAR_EP_BYTES);
        rdmax_recv_pool_info p = tl_pool(ctx, 0);
        CHECK(left == 0 && bytes == 0 && p.target == 0, "left: %llu endpoints, %llu bytes, target %u",
              (unsigned long long)left, (unsigned long long)bytes, p.target);
        CHECK(p.posted + p.free == p.buffers, "buffers: %u posted + %u free of %u", p.posted, p.free, p.buffers);
    }
    tl_end();
    free(sent);
    free(put_done);
out:
    for (int i = 0; eps && i < n; i++)
        rdmax_ep_destroy(eps[i]);
    rdmax_mem_free(region);
    rdmax_ctx_destroy(ctx);
    free(eps);
    free(st);
    if (tl_case_failed)
        tl_end();
    return tl_failed_total ? 1 : 0;
}

/* ==== server and client processes ==== */
enum { T_ECHO = 1, T_STREAM = 2 };
#define MAX_CLIENTS 64
struct shared {                 /* MAP_SHARED between the server and its clients */
    volatile int go;            /* credits: every client pinged, stream now */
    volatile int pinged;
    double worst_wait[MAX_CLIENTS], rtt[MAX_CLIENTS], rtt_loaded[MAX_CLIENTS];
    long refused[MAX_CLIENTS];
    char why[MAX_CLIENTS][160];
};
static struct shared *g_sh;

static rdmax_ctx *client_ctx(void)
{
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.recv_size = 256;
    cd.cq_depth = 256;
    cd.logger.func = keep_log;
    rdmax_ctx *ctx = NULL;
    return rdmax_ctx_create(&cd, &ctx) == RDMAX_OK ? ctx : NULL;
}

struct cep {
    uint32_t who, echoes, bad;
};

static void client_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep;
    struct cep *c = (struct cep *)user;
    if (!msg_check((const unsigned char *)data, len, c->who, c->echoes))
        c->bad++;
    c->echoes++;
}

/* listen mode client: e endpoints, k messages each, every one echoed */
static int listen_client(int id, uint16_t port, int e, int k)
{
    rdmax_ctx *ctx = client_ctx();
    if (!ctx)
        return 10;
    rdmax_ep **eps = (rdmax_ep **)calloc((size_t)e, sizeof *eps);
    struct cep *st = (struct cep *)calloc((size_t)e, sizeof *st);
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.rq_depth = 8;
    d.sq_depth = 8;
    d.keepalive_ms = RDMAX_OFF;
    d.timeout = 18;
    d.recv_cb = client_recv;
    int rc = 0;
    for (int i = 0; i < e && rc == 0; i++) {
        st[i].who = (uint32_t)(id * 1000 + i);
        d.user = &st[i];
        rdmax_status s = rdmax_connect(ctx, "127.0.0.1", port, &d, &eps[i], 120000);
        if (s != RDMAX_OK) {
            snprintf(g_sh->why[id], sizeof g_sh->why[id], "connect %d: %s: %.100s", i, rdmax_status_str(s), g_lastlog);
            rc = 11;
        }
    }
    /* every endpoint sends its k messages; the server echoes them */
    int *sent = (int *)calloc((size_t)e, sizeof *sent);
    double deadline = now_s() + 300;
    for (int all = 0; rc == 0 && !all;) {
        all = 1;
        for (int i = 0; i < e; i++) {
            if (sent[i] < k) {
                unsigned char m[64];
                msg_fill(m, st[i].who, (uint32_t)sent[i]);
                rdmax_status s = rdmax_send(eps[i], m, 64, NULL, NULL);
                if (s >= 0)
                    sent[i]++;
                else if (s != RDMAX_ERR_NO_RESOURCE) {
                    snprintf(g_sh->why[id], sizeof g_sh->why[id], "send on %d: %s", i, rdmax_status_str(s));
                    rc = 12;
                }
            }
            all &= sent[i] == k && st[i].echoes == (uint32_t)k;
        }
        if (!all && rdmax_progress(ctx) == 0)
            rdmax_wait(ctx, 50);
        if (now_s() > deadline) {
            snprintf(g_sh->why[id], sizeof g_sh->why[id], "echoes did not arrive within 300 s");
            rc = 13;
        }
    }
    for (int i = 0; rc == 0 && i < e; i++)
        if (st[i].bad) {
            snprintf(g_sh->why[id], sizeof g_sh->why[id], "endpoint %d: %u bad echoes", i, st[i].bad);
            rc = 14;
        }
    for (int i = 0; i < e; i++) {
        if (eps[i] && rc == 0)
            rdmax_ep_disconnect(eps[i], 5000);
        rdmax_ep_destroy(eps[i]);
    }
    rdmax_ctx_destroy(ctx);
    free(eps);
    free(st);
    free(sent);
    return rc;
}

/* The server's view of a client endpoint. Messages name it (who = client * 1000 + endpoint), so the
   receive callback finds it even before rdmax_accept has returned the endpoint (a client may send as
   soon as its own side is connected). */
struct sep {
    rdmax_ep *ep;           /* from its first message */
    uint32_t who;
    uint32_t got, echoed, bad, imms;
};
static struct sep *g_sv;
static int g_sv_n, g_per_client;
static uint32_t g_server_bad;

static struct sep *sep_of(rdmax_ep *ep, uint32_t who)
{
    int i = (int)(who / 1000) * g_per_client + (int)(who % 1000);
    if (who % 1000 >= (uint32_t)g_per_client || i >= g_sv_n)
        return NULL;
    struct sep *s = &g_sv[i];
    if (s->ep == NULL) {
        s->ep = ep;
        s->who = who;
    }
    return s->ep == ep ? s : NULL;
}

static void server_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)user;
    uint32_t who = UINT32_MAX;
    if (len >= 4)
        memcpy(&who, data, 4);
    struct sep *s = sep_of(ep, who);
    if (!s) {
        g_server_bad++;
        return;
    }
    if (!msg_check((const unsigned char *)data, len, s->who, s->got))
        s->bad++;
    s->got++;
}

static void server_imm(rdmax_ep *ep, uint32_t imm, size_t len, void *user)
{
    (void)user;
    struct sep *s = NULL;
    for (int i = 0; i < g_sv_n && !s; i++)
        if (g_sv[i].ep == ep)
            s = &g_sv[i];
    if (!s) {
        g_server_bad++;
        return;
    }
    s->bad += len != 8 || imm != s->imms;
    s->imms++;
}

static pid_t spawn(int (*fn)(int, uint16_t, int, int), int id, uint16_t port, int a, int b)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0)
        _exit(fn(id, port, a, b));
    return pid;
}

/* Wait for the clients; a failure names the client and why. */
static int reap(pid_t *pids, int nc, double deadline)
{
    int failed = 0, left = 0;
    for (int i = 0; i < nc; i++)
        left += pids[i] > 0;
    while (left > 0) {
        int ws;
        pid_t p = waitpid(-1, &ws, WNOHANG);
        if (p > 0) {
            left--;
            for (int i = 0; i < nc; i++)
                if (pids[i] == p) {
                    pids[i] = 0;
                    if (!WIFEXITED(ws) || WEXITSTATUS(ws)) {
                        printf("# client %d failed (%s %d): %s\n", i, WIFEXITED(ws) ? "exit" : "signal",
                               WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws), g_sh->why[i]);
                        failed++;
                    }
                }
            continue;
        }
        if (now_s() > deadline) {
            for (int i = 0; i < nc; i++)
                if (pids[i] > 0) {
                    kill(pids[i], SIGKILL);
                    waitpid(pids[i], NULL, 0);
                    printf("# client %d killed at the deadline: %s\n", i, g_sh->why[i]);
                    failed++;
                }
            return failed;
        }
        usleep(10000);
    }
    return failed;
}

static rdmax_ctx *server_ctx(void)
{
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.recv_size = 256;
    cd.logger.func = keep_log;
    rdmax_ctx *ctx = NULL;
    if (rdmax_ctx_create(&cd, &ctx) != RDMAX_OK) {
        printf("FAIL setup: server context: %s\n", g_lastlog);
        exit(1);
    }
    return ctx;
}

/* Sleep until a client or a completion needs us (the clients share our two CPUs). */
static void server_idle(rdmax_ctx *ctx, rdmax_listener *l, int ms)
{
    if (rdmax_ctx_arm(ctx) != RDMAX_OK)
        return;
    if (rdmax_progress(ctx))
        return;
    struct pollfd p[2] = {{rdmax_ctx_query_fd(ctx), POLLIN, 0}, {l ? rdmax_listener_query_fd(l) : -1, POLLIN, 0}};
    /* rdmax_wait takes the channel's notification (and progresses); if it found completions at once it
       leaves the notification, and the next idle call wakes at once and takes it then */
    if (poll(p, l ? 2 : 1, ms) > 0 && (p[0].revents & POLLIN))
        rdmax_wait(ctx, 0);
}

static int listen_mode(int nc, int e)
{
    enum { K = 4 };
    int total = nc * e;
    uint16_t port = (uint16_t)(20000 + getpid() % 20000);
    pid_t pids[MAX_CLIENTS];
    struct sep *sv = (struct sep *)calloc((size_t)total, sizeof *sv);
    g_sv = sv;
    g_sv_n = total;
    g_per_client = e;
    rdmax_ctx *ctx = NULL;
    rdmax_listener *l = NULL;
    tl_begin("scale/listener: one server context accepts %d endpoints from %d client processes", total, nc);
    REQUIRE(nc <= MAX_CLIENTS && sv, "at most %d clients", MAX_CLIENTS);
    for (int i = 0; i < nc; i++)
        pids[i] = spawn(listen_client, i, port, e, K);
    ctx = server_ctx();
    char dev[64];
    snprintf(dev, sizeof dev, "%s", rdmax_ctx_query_attr(ctx)->name);
    uint64_t rnr0 = tl_rnr_count(dev);
    REQUIRE(rdmax_listener_create(ctx, "127.0.0.1", port, &l) == RDMAX_OK, "listen: %s", g_lastlog);
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.rq_depth = 8;
    d.sq_depth = 8;
    d.keepalive_ms = RDMAX_OFF;
    d.timeout = 18;
    d.recv_cb = server_recv;
    d.imm_cb = server_imm;
    int accepted = 0, refusals = 0, failed = 0, left = nc;
    uint32_t done = 0;
    double t0 = now_s(), t_acc = 0, deadline = t0 + 400;
    while ((accepted < total || done < (uint32_t)total) && now_s() < deadline && left > 0) {
        int ws;
        pid_t p = waitpid(-1, &ws, WNOHANG);  /* a client that gave up ends the wait for its endpoints */
        for (int i = 0; p > 0 && i < nc; i++)
            if (pids[i] == p) {
                pids[i] = 0;
                left--;
                if (!WIFEXITED(ws) || WEXITSTATUS(ws)) {
                    printf("# client %d failed (%s %d): %s\n", i, WIFEXITED(ws) ? "exit" : "signal",
                           WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws), g_sh->why[i]);
                    failed++;
                }
            }
        int busy = 0;
        for (int k = 0; k < 64 && accepted < total; k++) {  /* whatever finished, up to 64 */
            rdmax_ep *ep = NULL;
            rdmax_status s = rdmax_accept(l, &d, &ep, 0);
            if (s == RDMAX_ERR_TIMEOUT)
                break;
            busy = 1;
            if (s == RDMAX_OK) {
                accepted++;
                if (accepted == total)
                    t_acc = now_s() - t0;
            } else {
                refusals++;
                printf("# a handshake failed: %s: %s\n", rdmax_status_str(s), g_lastlog);
            }
        }
        busy |= rdmax_progress(ctx) > 0;
        done = 0;
        for (int i = 0; i < total; i++) {
            struct sep *s = &sv[i];
            while (s->echoed < s->got) {
                unsigned char m[64];
                msg_fill(m, s->who, s->echoed);
                if (rdmax_send(s->ep, m, 64, NULL, NULL) < 0)
                    break;
                s->echoed++;
                busy = 1;
            }
            done += s->echoed == K;
        }
        if (!busy)
            server_idle(ctx, l, 5);
    }
    printf("# accepted %d endpoints in %.2f s (%.0f per second), all echoed after %.2f s; %d handshakes "
           "refused\n", accepted, t_acc, t_acc > 0 ? accepted / t_acc : 0.0, now_s() - t0, refusals);
    if (t_acc > 0)
        printf("ROW listener_eps_per_s %.0f\n", accepted / t_acc);
    /* keep serving until the clients have their last echoes and said goodbye */
    double reap_deadline = now_s() + 120;
    while (left > 0 && now_s() < reap_deadline) {
        rdmax_progress(ctx);
        int ws;
        pid_t p = waitpid(-1, &ws, WNOHANG);
        if (p <= 0) {
            server_idle(ctx, NULL, 2);
            continue;
        }
        left--;
        for (int i = 0; i < nc; i++)
            if (pids[i] == p) {
                pids[i] = 0;
                if (!WIFEXITED(ws) || WEXITSTATUS(ws)) {
                    printf("# client %d failed (%s %d): %s\n", i, WIFEXITED(ws) ? "exit" : "signal",
                           WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws), g_sh->why[i]);
                    failed++;
                }
            }
    }
    failed += reap(pids, nc, now_s());  /* whatever is left is killed */
    uint32_t bad = g_server_bad, got = 0;
    for (int i = 0; i < total; i++) {
        bad += sv[i].bad;
        got += sv[i].got;
    }
    CHECK(accepted == total, "%d of %d endpoints accepted", accepted, total);
    CHECK(got == (uint32_t)total * K && bad == 0, "%u of %d messages, %u bad", got, total * K, bad);
    CHECK(failed == 0, "%d clients failed", failed);
    printf("# RNR counters of %s (rcvd_rnr_err + send_rnr_err + retry_rnr_exceeded_err): %llu before, %llu after\n",
           dev, (unsigned long long)rnr0, (unsigned long long)tl_rnr_count(dev));
    CHECK(tl_rnr_count(dev) == rnr0, "RNR counters moved by %llu", (unsigned long long)(tl_rnr_count(dev) - rnr0));
    tl_end();
out:
    rdmax_listener_destroy(l);
    rdmax_ctx_destroy(ctx);  /* and every endpoint it accepted */
    free(sv);
    if (tl_case_failed)
        tl_end();
    return tl_failed_total ? 1 : 0;
}

/* ==== credits ==== */
static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* credits mode client: ping-pong for the RTT, then m posts alternating sends and puts with immediate
   data; every refused post is retried after rdmax_wait, and its wait timed. */
/* Which messages of a credits client the server echoes: the 20 pings, then every 25th of the stream,
   so the round trip is also measured under the stream's own load (queued behind the other clients). */
static int echoed_seq(uint32_t seq)
{
    return seq < 20 || seq % 25 == 0;
}

struct ccl {
    uint32_t who, next_echo, bad, echoes;
    double sent_at[1024];   /* by seq / 25 */
    double rtt_max;
};

static void credits_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep;
    struct ccl *c = (struct ccl *)user;
    if (!msg_check((const unsigned char *)data, len, c->who, c->next_echo))
        c->bad++;
    if (c->next_echo >= 20 && c->sent_at[c->next_echo / 25 % 1024] > 0) {
        double r = now_s() - c->sent_at[c->next_echo / 25 % 1024];
        c->rtt_max = r > c->rtt_max ? r : c->rtt_max;
    }
    c->echoes++;
    do
        c->next_echo++;
    while (!echoed_seq(c->next_echo));
}

/* credits mode client: ping-pong for the idle RTT, then m posts alternating sends and puts with
   immediate data; every refused post is retried after rdmax_wait, and its wait timed. */
static int credits_client(int id, uint16_t port, int m, int unused)
{
    (void)unused;
    rdmax_ctx *ctx = client_ctx();
    if (!ctx)
        return 10;
    static struct ccl st;
    memset(&st, 0, sizeof st);
    st.who = (uint32_t)id * 1000;
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.recv_cb = credits_recv;
    d.user = &st;
    d.sq_depth = 64;
    d.keepalive_ms = RDMAX_OFF;
    d.timeout = 18;
    rdmax_ep *ep = NULL;
    rdmax_status s = rdmax_connect(ctx, "127.0.0.1", port, &d, &ep, 120000);
    if (s != RDMAX_OK) {
        snprintf(g_sh->why[id], sizeof g_sh->why[id], "connect: %s: %.100s", rdmax_status_str(s), g_lastlog);
        return 11;
    }
    /* RTT: 20 pings, each echoed by the server */
    double rtts[20];
    for (uint32_t i = 0; i < 20; i++) {
        unsigned char msg[64];
        msg_fill(msg, st.who, i);
        double t = now_s();
        /* blocking, like the stream below: a refused post's wait and the round trip are timed alike */
        while (rdmax_send(ep, msg, 64, NULL, NULL) < 0)
            if (rdmax_progress(ctx) == 0)
                rdmax_wait(ctx, 10);
        while (st.echoes <= i && now_s() - t < 30)
            if (rdmax_progress(ctx) == 0)
                rdmax_wait(ctx, 10);
        rtts[i] = now_s() - t;
    }
    qsort(rtts, 20, sizeof rtts[0], cmp_d);
    g_sh->rtt[id] = rtts[10];
    __atomic_add_fetch(&g_sh->pinged, 1, __ATOMIC_SEQ_CST);
    while (!g_sh->go)
        usleep(1000);
    /* stream: sends carry (who, seq); puts with immediate data carry their count */
    rdmax_mem *src = NULL;
    if (rdmax_mem_alloc(ctx, 8, RDMAX_ACCESS_LOCAL, &src) != RDMAX_OK)
        return 12;
    uint32_t seq = 20, imms = 0;
    double worst = 0;
    long refused = 0;
    for (int i = 0; i < m;) {
        unsigned char msg[64];
        int is_put = i & 1;
        double t = 0;
        for (;;) {
            if (is_put) {
                s = rdmax_put_imm(ep, src->addr, 8, src, rdmax_ep_query_remote(ep, 0)->addr + 8 * (uint64_t)id, rdmax_ep_query_remote(ep, 0)->rkey, imms,
                                  NULL);
            } else {
                msg_fill(msg, st.who, seq);
                s = rdmax_send(ep, msg, 64, NULL, NULL);
            }
            if (s != RDMAX_ERR_NO_RESOURCE)
                break;
            if (t == 0) {
                t = now_s();
                refused++;
            }
            if (rdmax_progress(ctx) == 0)
                rdmax_wait(ctx, 10);  /* sleep until the grant (a receive completion) wakes us */
        }
        if (s < 0) {
            snprintf(g_sh->why[id], sizeof g_sh->why[id], "post %d: %s", i, rdmax_status_str(s));
            return 13;
        }
        if (t > 0 && now_s() - t > worst)
            worst = now_s() - t;
        if (is_put) {
            imms++;
        } else {
            if (echoed_seq(seq))
                st.sent_at[seq / 25 % 1024] = now_s();
            seq++;
        }
        i++;
    }
    uint32_t want = 20;
    for (uint32_t k = 20; k < seq; k++)
        want += echoed_seq(k);
    for (double t = now_s(); st.echoes < want && now_s() - t < 60;)
        if (rdmax_progress(ctx) == 0)
            rdmax_wait(ctx, 10);
    if (st.echoes != want || st.bad) {
        snprintf(g_sh->why[id], sizeof g_sh->why[id], "%u of %u echoes, %u bad", st.echoes, want, st.bad);
        return 15;
    }
    if (rdmax_ep_flush(ep, 60000) != RDMAX_OK) {
        snprintf(g_sh->why[id], sizeof g_sh->why[id], "flush: %.120s", g_lastlog);
        return 14;
    }
    g_sh->worst_wait[id] = worst;
    g_sh->refused[id] = refused;
    g_sh->rtt_loaded[id] = st.rtt_max;
    rdmax_ep_disconnect(ep, 5000);
    rdmax_ep_destroy(ep);
    rdmax_mem_free(src);
    rdmax_ctx_destroy(ctx);
    return 0;
}

/* The server's echoes of a credits client: messages it has and has not answered yet. */
static void credits_echo(struct sep *s)
{
    while (s->echoed < s->got) {
        if (echoed_seq(s->echoed)) {
            unsigned char msg[64];
            msg_fill(msg, s->who, s->echoed);
            if (rdmax_send(s->ep, msg, 64, NULL, NULL) < 0)
                return;
        }
        s->echoed++;
    }
}

static int credits_mode(int nc, int m)
{
    uint16_t port = (uint16_t)(20000 + getpid() % 20000);
    pid_t pids[MAX_CLIENTS];
    struct sep *sv = (struct sep *)calloc((size_t)nc, sizeof *sv);
    g_sv = sv;
    g_sv_n = nc;
    g_per_client = 1;
    rdmax_mem *region = NULL;
    rdmax_ctx *ctx = NULL;
    rdmax_listener *l = NULL;
    int accepted = 0;
    tl_begin("scale/credits: %d clients stream %d sends and puts with immediate data each to one server; worst "
             "refused-post wait bounded", nc, m);
    REQUIRE(nc <= MAX_CLIENTS && sv, "at most %d clients", MAX_CLIENTS);
    memset((void *)g_sh, 0, sizeof *g_sh);
    for (int i = 0; i < nc; i++)
        pids[i] = spawn(credits_client, i, port, m, 0);
    ctx = server_ctx();
    char dev[64];
    snprintf(dev, sizeof dev, "%s", rdmax_ctx_query_attr(ctx)->name);
    uint64_t rnr0 = tl_rnr_count(dev);
    REQUIRE(rdmax_mem_alloc(ctx, 8 * MAX_CLIENTS, RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_ANY_ENDPOINT, &region) == RDMAX_OK, "region");
    REQUIRE(rdmax_listener_create(ctx, "127.0.0.1", port, &l) == RDMAX_OK, "listen: %s", g_lastlog);
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.recv_cb = server_recv;
    d.imm_cb = server_imm;
    d.expose = region;
    d.sq_depth = 64;
    d.keepalive_ms = RDMAX_OFF;
    d.timeout = 18;
    double deadline = now_s() + 400;
    /* accept everyone, echo the 20 pings of each, then let them stream */
    while (now_s() < deadline) {
        int busy = 0;
        if (accepted < nc) {
            rdmax_ep *ep = NULL;
            if (rdmax_accept(l, &d, &ep, 0) == RDMAX_OK) {
                accepted++;
                busy = 1;
            }
        }
        busy |= rdmax_progress(ctx) > 0;
        for (int i = 0; i < nc; i++)
            if (sv[i].ep)
                credits_echo(&sv[i]);
        if (g_sh->pinged == nc)
            break;
        if (!busy)
            server_idle(ctx, l, 2);
    }
    g_sh->go = 1;
    double t0 = now_s();
    uint32_t total = 0;
    uint32_t want = (uint32_t)nc * (20 + (uint32_t)(m + 1) / 2);
    int gone = 0;
    for (long spin = 0; now_s() < deadline && !gone; spin++) {
        if ((spin & 4095) == 0) {  /* a client that failed ends the wait */
            int ws;
            for (int i = 0; i < nc; i++)
                if (pids[i] > 0 && waitpid(pids[i], &ws, WNOHANG) == pids[i]) {
                    pids[i] = 0;
                    if (!WIFEXITED(ws) || WEXITSTATUS(ws)) {
                        printf("# client %d failed (%s %d): %s\n", i, WIFEXITED(ws) ? "exit" : "signal",
                               WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws), g_sh->why[i]);
                        gone++;
                    }
                }
        }
        rdmax_progress(ctx);  /* a busy server: it polls, it does not sleep */
        if ((spin & 15) == 0)
            for (int i = 0; i < nc; i++)
                if (sv[i].ep)
                    credits_echo(&sv[i]);
        total = 0;
        uint32_t imms = 0;
        for (int i = 0; i < nc; i++) {
            total += sv[i].got;
            imms += sv[i].imms;
        }
        if (total >= want && imms >= (uint32_t)nc * (uint32_t)(m / 2))
            break;
    }
    double t1 = now_s();
    for (double t = now_s(); now_s() - t < 60;) {  /* the last echoes, then the clients' goodbyes */
        rdmax_progress(ctx);
        int pending = 0;
        for (int i = 0; i < nc; i++)
            if (sv[i].ep) {
                credits_echo(&sv[i]);
                pending += sv[i].echoed < sv[i].got;
            }
        if (!pending)
            break;
    }
    int failed = gone;
    for (double t = now_s(); now_s() - t < 120;) {
        int ws, left = 0;
        rdmax_progress(ctx);
        for (int i = 0; i < nc; i++)
            if (pids[i] > 0 && waitpid(pids[i], &ws, WNOHANG) == pids[i]) {
                pids[i] = 0;
                if (!WIFEXITED(ws) || WEXITSTATUS(ws)) {
                    printf("# client %d failed (%s %d): %s\n", i, WIFEXITED(ws) ? "exit" : "signal",
                           WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws), g_sh->why[i]);
                    failed++;
                }
            }
        for (int i = 0; i < nc; i++)
            left += pids[i] > 0;
        if (!left)
            break;
        usleep(1000);
    }
    failed += reap(pids, nc, now_s());
    uint32_t bad = g_server_bad;
    for (int i = 0; i < nc; i++)
        bad += sv[i].bad;
    double worst = 0, loaded = 0, rtt[MAX_CLIENTS];
    long refused = 0;
    for (int i = 0; i < nc; i++) {
        worst = g_sh->worst_wait[i] > worst ? g_sh->worst_wait[i] : worst;
        loaded = g_sh->rtt_loaded[i] > loaded ? g_sh->rtt_loaded[i] : loaded;
        rtt[i] = g_sh->rtt[i];
        refused += g_sh->refused[i];
    }
    qsort(rtt, (size_t)nc, sizeof rtt[0], cmp_d);
    rdmax_counters c;
    rdmax_ctx_query_counters(ctx, &c);
    double rate = (total + c.recv_imms) / (t1 - t0);
    printf("# credits, %d clients x %d posts: %u messages and %llu puts with immediate data in %.2f s (%.0f/s at "
           "the server: its queue of %u credits drains in %.0f ms); %ld refused posts; worst refused-post wait "
           "%.1f ms; round trip idle %.1f ms (median; max %.1f ms), under this load up to %.1f ms: worst wait = "
           "%.1f loaded round trips; server grants %llu\n", nc, m, total, (unsigned long long)c.recv_imms, t1 - t0,
           rate, tl_pool(ctx, 0).target, tl_pool(ctx, 0).target / rate * 1e3, refused, worst * 1e3, rtt[nc / 2] * 1e3,
           rtt[nc - 1] * 1e3, loaded * 1e3, loaded > 0 ? worst / loaded : 0.0,
           (unsigned long long)c.posted[RDMAX_OP_GRANT]);
    CHECK(accepted == nc && failed == 0, "%d of %d accepted, %d clients failed", accepted, nc, failed);
    CHECK(total == want && bad == 0, "%u of %u messages, %u bad", total, want, bad);
    CHECK(refused > 0, "no post was refused: the test did not exercise credits");
    CHECK(worst < 10.0, "a refused post waited %.2f s (hang guard: 10 s)", worst);
    printf("# RNR counters of %s (rcvd_rnr_err + send_rnr_err + retry_rnr_exceeded_err): %llu before, %llu after\n",
           dev, (unsigned long long)rnr0, (unsigned long long)tl_rnr_count(dev));
    CHECK(tl_rnr_count(dev) == rnr0, "RNR counters moved by %llu", (unsigned long long)(tl_rnr_count(dev) - rnr0));
    tl_end();
out:
    rdmax_listener_destroy(l);
    rdmax_mem_free(region);
    rdmax_ctx_destroy(ctx);
    free(sv);
    if (tl_case_failed)
        tl_end();
    return tl_failed_total ? 1 : 0;
}

/* ==== memory per endpoint with the default descriptors ==== */
static int memory_mode(int npairs)
{
    rdmax_ctx *ctx = NULL;
    int n = 2 * npairs, made = 0;
    rdmax_ep **eps = (rdmax_ep **)calloc((size_t)n, sizeof *eps);
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.allocator.alloc = count_alloc;
    cd.allocator.free = count_free;
    cd.logger.func = keep_log;
    tl_begin("scale/memory per RC endpoint with the default descriptors (%d endpoints)", n);
    REQUIRE(eps && rdmax_ctx_create(&cd, &ctx) == RDMAX_OK, "context");
    long rss0 = proc_kb("/proc/self/status", "VmRSS:");
    long long uv0 = uverbs_bytes();
    int64_t al0 = g_alloc_bytes;
    for (int i = 0; i < npairs; i++, made += 2)
        REQUIRE(rdmax_ep_create_pair(ctx, NULL, &eps[2 * i], &eps[2 * i + 1]) == RDMAX_OK, "pair %d: %s", i,
                g_lastlog);
    long rss1 = proc_kb("/proc/self/status", "VmRSS:");
    long long uv1 = uverbs_bytes();
    int64_t al1 = g_alloc_bytes;
    uint64_t pool = tl_prof(ctx, RDMAX_PROFILE_VAR_RECV_POOL_BYTES);  /* all pools' buffers */
    const rdmax_ep_desc ed0 = rdmax_ep_query_desc(eps[0]), *d = &ed0;
    uint64_t own = tl_prof(ctx, RDMAX_PROFILE_VAR_EP_BYTES) / (uint64_t)n;
    long long alloc = (long long)((al1 - al0) / n);  /* also the endpoint table, QP map, pool free lists */
    printf("# defaults: sq_depth %u, rq_depth %u, recv_size %u, max_inline %u; per endpoint: rdmax's own %llu B "
           "(sizeof(rdmax_ep) %zu B; the batch staging is the context's), allocator delta %lld B, provider queue "
           "mappings %lld B, shared pool %llu B, process RSS %ld B\n", d->sq_depth, d->rq_depth, d->recv_size,
           d->max_inline, (unsigned long long)own, sizeof(rdmax_ep), alloc, (uv1 - uv0) / n,
           (unsigned long long)(pool / (uint64_t)n), (rss1 - rss0) * 1024 / n);
    printf("ROW ep_own_bytes %llu\nROW ep_alloc_bytes %lld\nROW ep_provider_bytes %lld\nROW ep_pool_bytes %llu\n"
           "ROW ep_rss_bytes %ld\n", (unsigned long long)own, alloc, (uv1 - uv0) / n,
           (unsigned long long)(pool / (uint64_t)n), (rss1 - rss0) * 1024 / n);
    CHECK(own <= 2048, "rdmax's own bytes per endpoint: %llu > 2 KiB", (unsigned long long)own);
    CHECK(alloc <= 2048, "rdmax's allocations per endpoint (with its share of the tables): %lld > 2 KiB", alloc);
    tl_end();
out:
    rdmax_ctx_destroy(ctx);
    free(eps);
    (void)made;
    if (tl_case_failed)
        tl_end();
    return tl_failed_total ? 1 : 0;
}

/* ==== windows that adapt: one busy pair among idle ones ==== */
static struct {
    int mode;                   /* 0: a streams to b; 1: b answers each message; 2: b counts only */
    rdmax_ep *a, *b;
    uint32_t b_got, b_bad, a_got, a_bad;
} g_ad;

static void adapt_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)user;
    if (ep == g_ad.b) {
        if (g_ad.mode != 2 && !msg_check((const unsigned char *)data, len, 0xa, g_ad.b_got))
            g_ad.b_bad++;
        if (g_ad.mode == 1) {
            unsigned char m[64];
            msg_fill(m, 0xb, g_ad.b_got);
            g_ad.b_bad += rdmax_send(ep, m, 64, NULL, NULL) != RDMAX_OK;
        }
        g_ad.b_got++;
    } else if (ep == g_ad.a) {  /* b's answer to its latest message */
        g_ad.a_bad += !msg_check((const unsigned char *)data, len, 0xb, g_ad.b_got - 1);
        g_ad.a_got++;
    }
}

static uint64_t g_ad_waits, g_ad_waits_bound;
static void adapt_event(rdmax_profile *prof, rdmax_profile_event type, rdmax_ep *ep, uint64_t detail, void *user)
{
    (void)prof, (void)user;
    if (type == RDMAX_PROFILE_EVENT_GRANT_WAIT && ep == g_ad.b) {
        g_ad_waits++;
        g_ad_waits_bound += detail;
    }
}

static uint32_t window_of(rdmax_ep *ep)
{
    rdmax_ep_resources r;
    rdmax_ep_query_resources(ep, &r);
    return r.recv_window;
}

/* a streams to b: as many sends as its credits allow, then one progress; until b's window is full (64).
   The rounds taken; *seq counts the messages sent. */
static uint32_t adapt_stream(rdmax_ctx *ctx, uint32_t *seq)
{
    uint32_t rounds = 0;
    unsigned char m[64];
    for (; rounds < 200000 && window_of(g_ad.b) < 64; rounds++) {
        for (msg_fill(m, 0xa, *seq); rdmax_send(g_ad.a, m, 64, NULL, NULL) == RDMAX_OK;
             msg_fill(m, 0xa, *seq))
            (*seq)++;
        rdmax_progress(ctx);
    }
    for (long i = 0; i < 2000000L && g_ad.b_got < *seq; i++)
        rdmax_progress(ctx);
    return rounds;
}

/* the end of a case function (its `out:`): the endpoints eps[0..n), then the context and eps itself */
static int mode_end(rdmax_ctx *ctx, rdmax_ep **eps, int n)
{
    for (int i = 0; eps && i < n; i++)
        rdmax_ep_destroy(eps[i]);
    rdmax_ctx_destroy(ctx);
    free(eps);
    if (tl_case_failed)
        tl_end();
    return tl_failed_total ? 1 : 0;
}

static int adapt_mode(int npairs)
{
    rdmax_ctx *ctx = NULL;
    rdmax_mem *src = NULL;
    rdmax_profile *prof = NULL;
    int n = 2 * npairs;
    rdmax_ep **eps = (rdmax_ep **)calloc((size_t)n, sizeof *eps);
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.logger.func = keep_log;
    memset(&g_ad, 0, sizeof g_ad);
    tl_begin("scale/adapt: a busy peer among %d idle endpoints: its window grows from 2 to 64 while it streams, "
             "back to 2 once it slows to ping-pong; no RNR", n);
    REQUIRE(eps && rdmax_ctx_create(&cd, &ctx) == RDMAX_OK, "context: %s", g_lastlog);
    char dev[64];
    snprintf(dev, sizeof dev, "%s", rdmax_ctx_query_attr(ctx)->name);
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);  /* default windows; keepalives off: 2,000 idle endpoints would send 500 a second */
    d.keepalive_ms = RDMAX_OFF;
    d.recv_cb = adapt_recv;
    for (int i = 0; i < n; i += 2)
        REQUIRE(rdmax_ep_create_pair(ctx, &d, &eps[i], &eps[i + 1]) == RDMAX_OK, "idle pair %d: %s", i / 2, g_lastlog);
    REQUIRE(rdmax_ep_create_pair(ctx, &d, &g_ad.a, &g_ad.b) == RDMAX_OK, "busy pair: %s", g_lastlog);
    rdmax_ep_desc ad = rdmax_ep_query_desc(g_ad.a);
    CHECK(ad.rq_depth == 2 && ad.max_window == 64, "applied rq_depth %u, max_window %u", ad.rq_depth, ad.max_window);
    rdmax_recv_pool_info p0 = tl_pool(ctx, 0);
    CHECK(p0.target == (uint32_t)(n + 2) * 3 && window_of(g_ad.b) == 2,
          "before: pool target %u (want %d: 3 per endpoint), b's window %u", p0.target, (n + 2) * 3, window_of(g_ad.b));
    uint64_t rnr0 = tl_rnr_count(dev);
    rdmax_counters c0, c1, c2;
    rdmax_ctx_query_counters(ctx, &c0);
    REQUIRE(rdmax_profile_create(ctx, &prof) == RDMAX_OK &&
                rdmax_profile_reg_event(prof, RDMAX_PROFILE_EVENT_GRANT_WAIT, adapt_event, NULL) == RDMAX_OK,
            "profile");
    uint32_t seq = 0, most = 0, rounds = adapt_stream(ctx, &seq);
    unsigned char m[64];
    rdmax_ep_resources ra;
    rdmax_ep_query_resources(g_ad.a, &ra);
    rdmax_ctx_query_counters(ctx, &c1);
    rdmax_recv_pool_info p1 = tl_pool(ctx, 0);
    most = window_of(g_ad.b);
    printf("# streaming: b's window 2 -> %u after %u messages (%u progress rounds), a's send credits %u; grants %llu, "
           "grant_waits %llu; pool target %u -> %u, %u buffers\n", most, seq, rounds, ra.send_credits,
           (unsigned long long)(c1.posted[RDMAX_OP_GRANT] - c0.posted[RDMAX_OP_GRANT]),
           (unsigned long long)(c1.grant_waits - c0.grant_waits), p0.target, p1.target, p1.buffers);
    CHECK(most == 64, "b's window reached %u, not 64, in %u messages", most, seq);
    /* the pool was made for 2 + 1 per endpoint and a reserve, in chunks of 64: 10 buffers free, so the
       growth from 8 to 16 waits for the tick at least */
    uint64_t pw = 0;
    CHECK(c1.grant_waits - c0.grant_waits >= 1 && g_ad_waits == c1.grant_waits - c0.grant_waits &&
              g_ad_waits_bound == 0 && rdmax_profile_read_u64(prof, RDMAX_PROFILE_VAR_GRANT_WAITS, &pw) == RDMAX_OK &&
              pw == c1.grant_waits,
          "grant_waits %llu (profile %llu), %llu events (%llu at the bound)",
          (unsigned long long)(c1.grant_waits - c0.grant_waits), (unsigned long long)pw,
          (unsigned long long)g_ad_waits, (unsigned long long)g_ad_waits_bound);
    CHECK(p1.target == p0.target + 62, "pool target %u, want %u + 62 (b's growth)", p1.target, p0.target);
    CHECK(window_of(g_ad.a) == 2, "a's window %u: b's grants made it grow", window_of(g_ad.a));
    CHECK(g_ad.b_got == seq && g_ad.b_bad == 0, "b got %u of %u, %u bad", g_ad.b_got, seq, g_ad.b_bad);
    CHECK(ra.send_credits >= 33, "a's send credits %u once b caught up: want the window less what b still owes "
          "(under half of it)", ra.send_credits);
    /* a slows to one message at a time, b answers each: the replies carry b's credits, the window shrinks */
    g_ad.mode = 1;
    uint32_t trips = 0;
    for (; trips < 2000 && window_of(g_ad.b) > 2; trips++) {
        msg_fill(m, 0xa, seq);
        rdmax_status st = rdmax_send(g_ad.a, m, 64, NULL, NULL);
        for (long i = 0; i < 2000000L && st == RDMAX_ERR_NO_RESOURCE; i++) {  /* (a grant of a's may be queued) */
            rdmax_progress(ctx);
            st = rdmax_send(g_ad.a, m, 64, NULL, NULL);
        }
        REQUIRE(st == RDMAX_OK, "ping-pong: send %u: %s", trips, rdmax_status_str(st));
        seq++;
        for (long i = 0; i < 2000000L && g_ad.a_got <= trips; i++)
            rdmax_progress(ctx);
        REQUIRE(g_ad.a_got == trips + 1, "ping-pong %u: no reply", trips);
    }
    rdmax_ctx_query_counters(ctx, &c2);
    rdmax_recv_pool_info p2 = tl_pool(ctx, 0);
    printf("# ping-pong: b's window %u -> %u after %u round trips; pool target %u, %u posted, %u free\n", most,
           window_of(g_ad.b), trips, p2.target, p2.posted, p2.free);
    CHECK(window_of(g_ad.b) == 2 && window_of(g_ad.a) == 2, "windows b %u, a %u after %u round trips: not back to 2",
          window_of(g_ad.b), window_of(g_ad.a), trips);
    CHECK(p2.target == p0.target, "pool target %u, want %u again", p2.target, p0.target);
    CHECK(g_ad.b_bad == 0 && g_ad.a_bad == 0 && c2.ep_errors == 0, "bad: b %u, a %u; %llu endpoints failed",
          g_ad.b_bad, g_ad.a_bad, (unsigned long long)c2.ep_errors);
    printf("# RNR counters of %s: %llu before, %llu after\n", dev, (unsigned long long)rnr0,
           (unsigned long long)tl_rnr_count(dev));
    CHECK(tl_rnr_count(dev) == rnr0, "RNR counters moved by %llu", (unsigned long long)(tl_rnr_count(dev) - rnr0));
    tl_end();

    /* a (driven by raw verbs now) sends past what it was given: b fails, no one else */
    enum { PAST = 8 };
    tl_begin("scale/adapt: a peer that sends %d messages past a window that grew and shrank fails with "
             "RDMAX_ERR_PEER_WINDOW; the idle endpoints do not", PAST);
    REQUIRE(rdmax_mem_alloc(ctx, 4096, RDMAX_ACCESS_LOCAL, &src) == RDMAX_OK, "mem_alloc");
    msg_fill((unsigned char *)src->addr, 0xa, 0);
    g_ad.mode = 2;
    rdmax_ep_query_resources(g_ad.a, &ra);
    struct ibv_sge sge = {(uintptr_t)src->addr, 64, src->lkey};
    struct ibv_send_wr wr[PAST], *badwr = NULL;
    memset(wr, 0, sizeof wr);
    for (int i = 0; i < PAST; i++) {
        wr[i].opcode = IBV_WR_SEND_WITH_IMM;  /* imm 0: no credits back, as a peer that ignores them */
        wr[i].sg_list = &sge;
        wr[i].num_sge = 1;
        wr[i].next = i + 1 < PAST ? &wr[i + 1] : NULL;
    }
    wr[PAST - 1].send_flags = IBV_SEND_SIGNALED;  /* wr_id 0: a stale completion to rdmax */
    uint32_t got0 = g_ad.b_got;
    REQUIRE(ibv_post_send(ra.qp, wr, &badwr) == 0, "ibv_post_send");
    for (long i = 0; i < 2000000L && rdmax_ep_query_state(g_ad.b) == RDMAX_EP_CONNECTED; i++)
        rdmax_progress(ctx);
    rdmax_counters c3;
    rdmax_ctx_query_counters(ctx, &c3);
    int idle_bad = 0;
    for (int i = 0; i < n; i++)
        idle_bad += rdmax_ep_query_state(eps[i]) != RDMAX_EP_CONNECTED;
    printf("# b took %u of the %d before it failed (%s); window_breaks %llu\n", g_ad.b_got - got0, PAST,
           rdmax_status_str(rdmax_ep_query_error(g_ad.b)), (unsigned long long)c3.window_breaks);
    CHECK(rdmax_ep_query_state(g_ad.b) == RDMAX_EP_ERROR && rdmax_ep_query_error(g_ad.b) == RDMAX_ERR_PEER_WINDOW,
          "b: state %d, %s", rdmax_ep_query_state(g_ad.b), rdmax_status_str(rdmax_ep_query_error(g_ad.b)));
    CHECK(c3.window_breaks == 1 && idle_bad == 0, "window_breaks %llu, %d idle endpoints not connected",
          (unsigned long long)c3.window_breaks, idle_bad);
    /* (RNR may move now: what a sends past b's buffers meets RNR on b's own receive queue, which holds b's
       credits alone; srq_test breakers checks that an honest peer's device counts none) */
    printf("# RNR counters of %s: %llu before the breaker, %llu after\n", dev, (unsigned long long)rnr0,
           (unsigned long long)tl_rnr_count(dev));
    tl_end();
out:
    if (prof)
        rdmax_profile_destroy(prof);
    rdmax_ep_destroy(g_ad.a);
    rdmax_ep_destroy(g_ad.b);
    rdmax_mem_free(src);  /* only a's QP used it */
    return mode_end(ctx, eps, n);
}

/* ==== the shared pool gives memory back ==== */
/* A profile variable by name; UINT64_MAX when this build has none (the case runs on older code too, as
   its control). */
static uint64_t prof_named(rdmax_ctx *ctx, const char *name)
{
    rdmax_profile *p = NULL;
    const rdmax_profile_var *v = NULL;
    size_t n = 0;
    uint64_t r = UINT64_MAX;
    if (rdmax_profile_create(ctx, &p) != RDMAX_OK)
        return r;
    rdmax_profile_query_vars(p, &v, &n);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(v[i].name, name) && rdmax_profile_read_u64(p, v[i].id, &r) != RDMAX_OK)
            r = UINT64_MAX;
    rdmax_profile_destroy(p);
    return r;
}

struct gb_rx {
    uint32_t who, got, bad;
};

static void gb_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep;
    struct gb_rx *r = (struct gb_rx *)user;
    r->bad += !msg_check((const unsigned char *)data, len, r->who, r->got);
    r->got++;
}

/* a streams to b (the pair's gb_rx) until n messages went or stop() says so; then until b has them all */
static uint32_t gb_stream(rdmax_ctx *ctx, rdmax_ep *a, struct gb_rx *r, uint32_t *seq, uint32_t n,
                          int (*stop)(rdmax_ctx *, void *), void *arg)
{
    unsigned char m[64];
    uint32_t sent = 0;
    for (long spins = 0; sent < n && spins < 20000000L && !(stop && stop(ctx, arg)); spins++) {
        for (msg_fill(m, r->who, *seq); sent < n && rdmax_send(a, m, 64, NULL, NULL) == RDMAX_OK;
             msg_fill(m, r->who, *seq))
            (*seq)++, sent++;
        rdmax_progress(ctx);
    }
    for (long i = 0; i < 2000000L && r->got < *seq; i++)
        rdmax_progress(ctx);
    return sent;
}

static int gb_grown(rdmax_ctx *ctx, void *b)
{
    (void)ctx;
    return window_of((rdmax_ep *)b) >= 64;
}

static int gb_back(rdmax_ctx *ctx, void *limit)
{
    return tl_pool(ctx, 0).buffers <= *(uint32_t *)limit;
}

/* npairs idle pairs and a traffic pair (a fixed window of 8: its own growth stays out of the pool's count)
   are the baseline; nextra more pairs come, BUSY of them stream until their windows reach 64, and all of
   them go again. The pool is then far above its target: traffic on the traffic pair takes its buffers
   through the queue, and the pool gives back all but a chunk above the baseline, the receive CQ shrinks;
   no message lost or wrong, no RNR. The receive CQ starts small (cq_depth 256) so that the extra
   endpoints make it grow. */
static int giveback_mode(int npairs, int nextra)
{
    enum { BUSY = 4 };
    rdmax_ctx *ctx = NULL;
    int n = 2 * npairs, ne = 2 * nextra;
    rdmax_ep **eps = (rdmax_ep **)calloc((size_t)n, sizeof *eps), **ex = (rdmax_ep **)calloc((size_t)ne, sizeof *ex);
    struct gb_rx *rx = (struct gb_rx *)calloc((size_t)nextra + 1, sizeof *rx);
    rdmax_ep *ta = NULL, *tb = NULL;
    tl_begin("scale/giveback: %d extra pairs (%d streaming) grow the shared pool among %d idle pairs and go; "
             "traffic goes on and the pool gives its memory back to within a chunk of the baseline, the receive "
             "CQ shrinks; no RNR", nextra, BUSY, npairs);
    REQUIRE(eps && ex && rx && nextra >= BUSY, "calloc");
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.logger.func = keep_log;
    cd.cq_depth = 256;
    REQUIRE(rdmax_ctx_create(&cd, &ctx) == RDMAX_OK, "context: %s", g_lastlog);
    char dev[64];
    snprintf(dev, sizeof dev, "%s", rdmax_ctx_query_attr(ctx)->name);
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);  /* default windows; keepalives off (idle endpoints) */
    d.keepalive_ms = RDMAX_OFF;
    d.recv_cb = gb_recv;
    for (int i = 0; i < n; i += 2)
        REQUIRE(rdmax_ep_create_pair(ctx, &d, &eps[i], &eps[i + 1]) == RDMAX_OK, "idle pair %d: %s", i / 2, g_lastlog);
    rdmax_ep_desc td = d;
    td.rq_depth = 8;
    td.user = &rx[nextra];
    rx[nextra].who = 0x7a;
    REQUIRE(rdmax_ep_create_pair(ctx, &td, &ta, &tb) == RDMAX_OK, "traffic pair: %s", g_lastlog);
    for (int i = 0; i < 20000; i++)  /* (the tick's first passes: the low-water mark armed) */
        rdmax_progress(ctx);
    rdmax_recv_pool_info p0 = tl_pool(ctx, 0), p1, p2, p3;
    uint32_t chunk = p0.chunks ? p0.buffers / p0.chunks : 0, limit = p0.buffers + chunk, seq_t = 0;
    uint64_t cq0 = prof_named(ctx, "recv_cq.entries"), cq1, cq3, rnr0 = tl_rnr_count(dev);
    uint64_t freed0 = prof_named(ctx, "recv_pool.chunks_freed");
    printf("# baseline: %d endpoints, pool target %u + reserve %u, %u buffers in %u chunks of %u; receive CQ %lld\n",
           n + 2, p0.target, p0.reserve, p0.buffers, p0.chunks, chunk, (long long)cq0);
    /* busy: the extra pairs come, BUSY of them stream until their windows are 64 */
    for (int i = 0; i < ne; i += 2) {
        rdmax_ep_desc xd = d;
        xd.user = &rx[i / 2];
        rx[i / 2].who = (uint32_t)i / 2;
        REQUIRE(rdmax_ep_create_pair(ctx, &xd, &ex[i], &ex[i + 1]) == RDMAX_OK, "extra pair %d: %s", i / 2, g_lastlog);
    }
    uint32_t seq[BUSY] = {0};
    for (int k = 0; k < BUSY; k++) {
        gb_stream(ctx, ex[2 * k], &rx[k], &seq[k], 100000, gb_grown, ex[2 * k + 1]);
        CHECK(window_of(ex[2 * k + 1]) == 64 && rx[k].got == seq[k] && rx[k].bad == 0,
              "busy pair %d: window %u, got %u of %u, %u bad", k, window_of(ex[2 * k + 1]), rx[k].got, seq[k],
              rx[k].bad);
    }
    p1 = tl_pool(ctx, 0);
    cq1 = prof_named(ctx, "recv_cq.entries");
    printf("# busy: %d endpoints, pool target %u, %u buffers in %u chunks, %u posted; receive CQ %lld\n", n + 2 + ne,
           p1.target, p1.buffers, p1.chunks, p1.posted, (long long)cq1);
    CHECK(p1.buffers >= p0.buffers + 8 * chunk, "the pool did not grow: %u buffers, %u at the baseline", p1.buffers,
          p0.buffers);
    for (int i = 0; i < ne; i++) {
        rdmax_ep_destroy(ex[i]);
        ex[i] = NULL;
    }
    p2 = tl_pool(ctx, 0);
    printf("# the extra endpoints went: pool target %u, %u buffers, %u posted\n", p2.target, p2.buffers, p2.posted);
    CHECK(p2.target == p0.target, "pool target %u, %u at the baseline", p2.target, p0.target);
    /* traffic goes on: the traffic pair streams until the pool is back within a chunk of the baseline, at
       most 4 times what it held (rxe's shared queue takes buffers in the order they were posted) */
    uint32_t sent = gb_stream(ctx, ta, &rx[nextra], &seq_t, 4 * p1.buffers + 1000, gb_back, &limit);
    for (int i = 0; i < 200000 && tl_pool(ctx, 0).buffers > limit; i++)  /* (a tick to free what drained) */
        rdmax_progress(ctx);
    p3 = tl_pool(ctx, 0);
    cq3 = prof_named(ctx, "recv_cq.entries");
    uint64_t freed = prof_named(ctx, "recv_pool.chunks_freed");
    rdmax_counters c;
    rdmax_ctx_query_counters(ctx, &c);
    printf("# traffic: %u messages (%u checked, %u bad); pool %u -> %u buffers in %u chunks (baseline %u), %u posted "
           "for target %u + reserve %u, chunks freed %lld; receive CQ %lld -> %lld; RNR counters %llu -> %llu\n",
           sent, rx[nextra].got, rx[nextra].bad, p1.buffers, p3.buffers, p3.chunks, p0.buffers, p3.posted, p3.target,
           p3.reserve, freed == UINT64_MAX ? -1LL : (long long)(freed - freed0), (long long)cq1, (long long)cq3,
           (unsigned long long)rnr0, (unsigned long long)tl_rnr_count(dev));
    CHECK(p3.buffers <= limit, "the pool holds %u buffers, more than a chunk (%u) above the baseline %u", p3.buffers,
          chunk, p0.buffers);
    CHECK(p3.target == p0.target && p3.posted >= p3.target + p3.reserve,
          "pool target %u (baseline %u), %u posted for target %u + reserve %u", p3.target, p0.target, p3.posted,
          p3.target, p3.reserve);
    CHECK(freed == UINT64_MAX || freed - freed0 == p1.chunks - p3.chunks, "chunks_freed %lld, the pool has %u fewer",
          (long long)(freed - freed0), p1.chunks - p3.chunks);
    CHECK(cq1 == UINT64_MAX || (cq1 > cq0 && cq3 < cq1), "receive CQ %lld at the baseline, %lld busy, %lld after",
          (long long)cq0, (long long)cq1, (long long)cq3);
    CHECK(rx[nextra].got == seq_t && rx[nextra].bad == 0 && c.ep_errors == 0,
          "traffic: %u of %u, %u bad; %llu endpoints failed",
          rx[nextra].got, seq_t, rx[nextra].bad, (unsigned long long)c.ep_errors);
    CHECK(tl_rnr_count(dev) == rnr0, "RNR counters moved by %llu", (unsigned long long)(tl_rnr_count(dev) - rnr0));
    /* and the pool grows again when windows do */
    rdmax_ep_desc xd = d;
    xd.user = &rx[0];
    rx[0].got = 0;
    uint32_t seq_g = 0;
    REQUIRE(rdmax_ep_create_pair(ctx, &xd, &ex[0], &ex[1]) == RDMAX_OK, "a pair again: %s", g_lastlog);
    gb_stream(ctx, ex[0], &rx[0], &seq_g, 100000, gb_grown, ex[1]);
    CHECK(window_of(ex[1]) == 64 && rx[0].got == seq_g && rx[0].bad == 0 && tl_rnr_count(dev) == rnr0,
          "a window grows again: %u, got %u of %u, %u bad; RNR moved by %llu", window_of(ex[1]), rx[0].got, seq_g,
          rx[0].bad, (unsigned long long)(tl_rnr_count(dev) - rnr0));
    tl_end();
out:
    for (int i = 0; ex && i < ne; i++)
        rdmax_ep_destroy(ex[i]);
    rdmax_ep_destroy(ta);
    rdmax_ep_destroy(tb);
    for (int i = 0; eps && i < n; i++)
        rdmax_ep_destroy(eps[i]);
    rdmax_ctx_destroy(ctx);
    free(eps);
    free(ex);
    free(rx);
    if (tl_case_failed)
        tl_end();
    return tl_failed_total ? 1 : 0;
}

/* ==== ten thousand endpoints with the default descriptors ==== */
static uint32_t g_tk_good, g_tk_bad;

static void tenk_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)user;
    rdmax_ep_resources r;
    rdmax_ep_query_resources(ep, &r);  /* the message names its sender's QP: it must be our peer's */
    if (msg_check((const unsigned char *)data, len, r.peer_qp_num, 0))
        g_tk_good++;
    else
        g_tk_bad++;
}

/* each of eps[0..n) sends its peer one message that names its own QP (sent[i] set once it went); then
   progress until all n arrived (g_tk_good + g_tk_bad) */
static void tenk_exchange(rdmax_ctx *ctx, rdmax_ep **eps, char *sent, int n)
{
    long spins = 0;
    for (int left = n; left > 0 && spins < 200000; spins++) {
        for (int i = 0; i < n; i++) {
            if (sent[i])
                continue;
            rdmax_ep_resources r;
            rdmax_ep_query_resources(eps[i], &r);
            unsigned char m[64];
            msg_fill(m, r.qp_num, 0);
            if (rdmax_send(eps[i], m, 64, NULL, NULL) == RDMAX_OK) {
                sent[i] = 1;
                left--;
            }
            if ((i & 63) == 63)
                rdmax_progress(ctx);
        }
        rdmax_progress(ctx);
    }
    for (long i = 0; i < 2000000L && g_tk_good + g_tk_bad < (uint32_t)n; i++)
        rdmax_progress(ctx);
}

static int tenk_mode(int npairs)
{
    rdmax_ctx *ctx = NULL;
    int n = 2 * npairs;
    rdmax_ep **eps = (rdmax_ep **)calloc((size_t)n, sizeof *eps);
    char *sent = (char *)calloc((size_t)n, 1);
    tl_begin("scale/%d RC endpoints in one context with the default descriptors (%d pairs by "
             "rdmax_ep_create_pair), one checked message each way, no RNR", n, npairs);
    REQUIRE(eps && sent, "calloc");
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.logger.func = keep_log;
    REQUIRE(rdmax_ctx_create(&cd, &ctx) == RDMAX_OK, "context: %s", g_lastlog);
    char dev[64];
    snprintf(dev, sizeof dev, "%s", rdmax_ctx_query_attr(ctx)->name);
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);  /* defaults but the callback; keepalives off: 10,000 idle endpoints would send
                                 2,500 a second, more than the test VM's rxe moves beside the test */
    d.keepalive_ms = RDMAX_OFF;
    d.recv_cb = tenk_recv;
    long rss0 = proc_kb("/proc/self/status", "VmRSS:");
    double t0 = now_s();
    for (int i = 0; i < n; i += 2)
        REQUIRE(rdmax_ep_create_pair(ctx, &d, &eps[i], &eps[i + 1]) == RDMAX_OK, "pair %d of %d: %s", i / 2, npairs,
                g_lastlog);
    double t1 = now_s();
    long rss1 = proc_kb("/proc/self/status", "VmRSS:");
    rdmax_recv_pool_info p = tl_pool(ctx, 0);
    const rdmax_dev_attr *at = rdmax_ctx_query_attr(ctx);
    printf("# %d endpoints in %.1f s (%.0f per second); RSS %ld KiB per endpoint; pool: %u credits + %u reserve, "
           "%u buffers of %u B (%u KiB per endpoint); device max_cqe %u, max_qp %u\n", n, t1 - t0, n / (t1 - t0),
           (rss1 - rss0) / n, p.target, p.reserve, p.buffers, p.recv_size,
           (unsigned)((uint64_t)p.buffers * p.recv_size / 1024 / (uint64_t)n), at->max_cqe, at->max_qp);
    printf("ROW rc_eps_default_rss_kib_%d %ld\n", n, (rss1 - rss0) / n);
    CHECK(p.target == (uint32_t)n * 3, "pool target %u, want 3 per endpoint (window 2 + 1)", p.target);
    /* issue 31's goal: the provider's send queue (20 KiB on rxe at sq_depth 31), 12 KiB of pool, rdmax's 2 */
    CHECK((rss1 - rss0) / n <= 48, "RSS %ld KiB per endpoint, more than 48", (rss1 - rss0) / n);
    uint64_t rnr0 = tl_rnr_count(dev);
    tenk_exchange(ctx, eps, sent, n);
    double t2 = now_s();
    rdmax_counters c;
    rdmax_ctx_query_counters(ctx, &c);
    printf("# traffic: %u of %d messages checked (%u bad) in %.1f s; grants %llu, ep_errors %llu; RNR counters of "
           "%s %llu before, %llu after\n", g_tk_good, n, g_tk_bad, t2 - t1, (unsigned long long)c.posted[RDMAX_OP_GRANT],
           (unsigned long long)c.ep_errors, dev, (unsigned long long)rnr0, (unsigned long long)tl_rnr_count(dev));
    CHECK(g_tk_good == (uint32_t)n && g_tk_bad == 0, "%u of %d messages good, %u bad", g_tk_good, n, g_tk_bad);
    CHECK(c.ep_errors == 0, "%llu endpoints failed", (unsigned long long)c.ep_errors);
    CHECK(tl_rnr_count(dev) == rnr0, "RNR counters moved by %llu", (unsigned long long)(tl_rnr_count(dev) - rnr0));
    tl_end();
out:
    free(sent);
    return mode_end(ctx, eps, n);
}

/* ==== receive CQs beyond the first ==== */
static int rgroups_mode(int npairs)
{
    enum { CAP = 120, PER_GROUP = CAP / 3 };  /* window 2 + 1 entries each (a pool keeps no reserve) */
    rdmax_ctx *ctx = NULL;
    int n = 2 * npairs;
    rdmax_ep **eps = (rdmax_ep **)calloc((size_t)n, sizeof *eps);
    char *sent = (char *)calloc((size_t)n, 1);
    memset(&g_ad, 0, sizeof g_ad);
    g_tk_good = g_tk_bad = 0;
    tl_begin("scale/rgroups: %d RC endpoints with default windows on receive CQs capped at %d entries: %d per CQ, "
             "one checked message each way; a busy pair in a later CQ grows its window to 64; no RNR", n, CAP, PER_GROUP);
    REQUIRE(eps && sent && n % PER_GROUP == 0, "calloc, or P not a multiple of %d", PER_GROUP / 2);
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.logger.func = keep_log;
    cd.cq_depth = 64;  /* receive CQs start below the cap and grow to it (a send CQ of 64 is enough here) */
    REQUIRE(rdmax_ctx_create(&cd, &ctx) == RDMAX_OK, "context: %s", g_lastlog);
    char dev[64];
    snprintf(dev, sizeof dev, "%s", rdmax_ctx_query_attr(ctx)->name);
    uint32_t max_cqe = rdmax__test_ctx_max_cqe(ctx, CAP);
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.keepalive_ms = RDMAX_OFF;
    d.recv_cb = tenk_recv;
    for (int i = 0; i < n; i += 2) {
        rdmax_status st = rdmax_ep_create_pair(ctx, &d, &eps[i], &eps[i + 1]);
        REQUIRE(st == RDMAX_OK, "pair %d of %d: %s (%s)", i / 2, npairs, rdmax_status_str(st), g_lastlog);
    }
    d.recv_cb = adapt_recv;
    REQUIRE(rdmax_ep_create_pair(ctx, &d, &g_ad.a, &g_ad.b) == RDMAX_OK, "busy pair: %s", g_lastlog);
    uint32_t want_groups = (uint32_t)n / PER_GROUP + 1;  /* the idle ones fill theirs; the busy pair's is new */
    rdmax_recv_pool_info p0 = tl_pool(ctx, 0);
    printf("# %d endpoints over %u receive CQs (device max_cqe %u, capped at %d); the busy pair's in CQ %u; pool target "
           "%u in %u pools\n", n + 2, rdmax__test_ctx_rgroups(ctx), max_cqe, CAP, rdmax__test_ep_rgroup(g_ad.b),
           p0.target, p0.groups);
    CHECK(rdmax__test_ctx_rgroups(ctx) == want_groups && p0.groups == want_groups, "%u receive CQs, %u pools: want %u",
          rdmax__test_ctx_rgroups(ctx), p0.groups, want_groups);
    CHECK(rdmax__test_ep_rgroup(eps[0]) == 0 && rdmax__test_ep_rgroup(eps[n - 1]) == (uint32_t)(n - 1) / PER_GROUP &&
              rdmax__test_ep_rgroup(g_ad.b) == want_groups - 1 && want_groups > 1,
          "CQs: first %u, last %u, busy %u", rdmax__test_ep_rgroup(eps[0]), rdmax__test_ep_rgroup(eps[n - 1]),
          rdmax__test_ep_rgroup(g_ad.b));
    CHECK(p0.target == (uint32_t)(n + 2) * 3 && p0.reserve == 0, "pool target %u, reserve %u", p0.target, p0.reserve);
    uint64_t rnr0 = tl_rnr_count(dev);
    tenk_exchange(ctx, eps, sent, n);
    CHECK(g_tk_good == (uint32_t)n && g_tk_bad == 0, "%u of %d messages good, %u bad", g_tk_good, n, g_tk_bad);
    uint32_t seq = 0, rounds = adapt_stream(ctx, &seq);  /* the busy pair, until b's window is full */
    rdmax_counters c;
    rdmax_ctx_query_counters(ctx, &c);
    printf("# busy pair: b's window %u after %u messages (%u rounds); %u idle messages checked; ep_errors %llu; RNR "
           "counters of %s %llu before, %llu after\n", window_of(g_ad.b), seq, rounds, g_tk_good,
           (unsigned long long)c.ep_errors, dev, (unsigned long long)rnr0, (unsigned long long)tl_rnr_count(dev));
    CHECK(window_of(g_ad.b) == 64 && g_ad.b_got == seq && g_ad.b_bad == 0, "b's window %u; b got %u of %u, %u bad",
          window_of(g_ad.b), g_ad.b_got, seq, g_ad.b_bad);
    CHECK(c.ep_errors == 0, "%llu endpoints failed", (unsigned long long)c.ep_errors);
    CHECK(tl_rnr_count(dev) == rnr0, "RNR counters moved by %llu", (unsigned long long)(tl_rnr_count(dev) - rnr0));
    tl_end();
out:
    rdmax_ep_destroy(g_ad.a);
    rdmax_ep_destroy(g_ad.b);
    free(sent);
    return mode_end(ctx, eps, n);
}

/* ==== put rate over many endpoints ==== */
/* 8-byte puts, unsignaled and inline, posted round-robin over n endpoints of one context to their pairs
   (loopback on the device), with one rdmax_progress per round: puts completed per second in the steady
   state, counted from the end of a warm-up (a tenth of `seconds`) for `seconds`. Neither the ramp nor the
   drain is timed: the drain of 1,000 endpoints (a flush each, one after the other) took 0.5-0.9 s, which
   weighed on the many-endpoint side only. The clock is read every 64 puts or more, whatever n. */
static double put_rate(rdmax_ctx *ctx, rdmax_ep **eps, int n, const rdmax_mem *dst, double seconds)
{
    uint64_t done = 0, v = 1;
    double t0 = now_s(), t1 = 0, t = t0;
    int warm = 1;
    rdmax_counters c1, c2;
    memset(&c1, 0, sizeof c1);
    for (int k = 0;;) {
        for (int i = 0; i < n; i++)
            done += rdmax_put(eps[2 * i], &v, 8, NULL, (uintptr_t)dst->addr + 8 * (uint64_t)i, dst->rkey, NULL) >= 0;
        rdmax_progress(ctx);
        if ((k += n) < 64)
            continue;
        k = 0;
        t = now_s();
        if (warm && t - t0 > seconds / 10) {
            warm = 0;
            t1 = t;
            done = 0;
            rdmax_ctx_query_counters(ctx, &c1);
        } else if (!warm && t - t1 > seconds) {
            break;
        }
    }
    rdmax_ctx_query_counters(ctx, &c2);
    for (int i = 0; i < n; i++)
        rdmax_ep_flush(eps[2 * i], 10000);
    printf("# put_rate %d eps: calls accepted %llu, refused %llu (no_resource), post_calls %llu, cqes %llu, "
           "polls %llu (empty %llu), %.2f s\n", n, (unsigned long long)done,
           (unsigned long long)(c2.no_resource - c1.no_resource), (unsigned long long)(c2.post_calls - c1.post_calls),
           (unsigned long long)(c2.cqes - c1.cqes), (unsigned long long)(c2.polls - c1.polls),
           (unsigned long long)(c2.empty_polls - c1.empty_polls), t - t1);
    return (double)(c2.completed[RDMAX_OP_PUT] - c1.completed[RDMAX_OP_PUT]) / (t - t1);
}

static int putrate_mode(int n, double seconds)
{
    rdmax_ctx *ctx = NULL;
    rdmax_mem *dst = NULL;
    rdmax_ep **eps = (rdmax_ep **)calloc(2 * (size_t)n, sizeof *eps);
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.recv_size = 256;
    cd.logger.func = keep_log;
    tl_begin("scale/8-byte put rate over %d endpoints against one", n);
    REQUIRE(eps && rdmax_ctx_create(&cd, &ctx) == RDMAX_OK, "context");
    REQUIRE(rdmax_mem_alloc(ctx, 8 * (size_t)n, RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_ANY_ENDPOINT, &dst) == RDMAX_OK, "region");
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.rq_depth = 4;
    d.keepalive_ms = RDMAX_OFF;
    d.timeout = 18;
    for (int i = 0; i < n; i++) {
        REQUIRE(tl_pair(ctx, ctx, &d, &d, &eps[2 * i], &eps[2 * i + 1]) == RDMAX_OK, "pair %d: %s", i, g_lastlog);
    }
    double one = put_rate(ctx, eps, 1, dst, seconds);
    double many = put_rate(ctx, eps, n, dst, seconds);
    double one2 = put_rate(ctx, eps, 1, dst, seconds);
    printf("# 8-byte puts (sq_depth %u, inline): 1 endpoint %.0f/s, then %d endpoints %.0f/s, then 1 again "
           "%.0f/s: ratio %.2f\n", rdmax_ep_query_desc(eps[0]).sq_depth, one, n, many, one2, many / ((one + one2) / 2));
    printf("ROW put8_rate_1ep %.0f\nROW put8_rate_%deps %.0f\nROW put8_rate_ratio %.2f\n", (one + one2) / 2, n,
           many, many / ((one + one2) / 2));
    CHECK(one > 0 && many > 0 && one2 > 0, "a rate of zero");
    tl_end();
out:
    rdmax_mem_free(dst);
    rdmax_ctx_destroy(ctx);
    free(eps);
    if (tl_case_failed)
        tl_end();
    return tl_failed_total ? 1 : 0;
}

/* ==== send-CQ entries shared by many endpoints ==== */
/* 8 endpoints of a context with 64 send-CQ entries post 6 unsignaled puts each, round-robin, with no
   progress in between: 48 entries held, 6 per endpoint, never an endpoint's 16th post (its signal). The
   posts made while half the entries are held (the 33rd on) are signaled, so all 48 complete and give
   their entries back without a flush; before, none was signaled, nothing completed, and the context's
   other endpoints were refused for entries stranded there (the put rate over 1,000 endpoints). */
static int cqshare_mode(void)
{
    enum { NEP = 8, PER = 6, CQ = 64 };
    rdmax_ctx *ctx = NULL;
    rdmax_mem *dst = NULL;
    rdmax_ep *eps[2 * NEP];
    memset(eps, 0, sizeof eps);
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.recv_size = 256;
    cd.cq_depth = CQ;
    cd.logger.func = keep_log;
    tl_begin("cqshare/%d endpoints x %d unsignaled puts on %d send-CQ entries complete without a flush", NEP, PER,
             CQ);
    REQUIRE(rdmax_ctx_create(&cd, &ctx) == RDMAX_OK, "context: %s", g_lastlog);
    REQUIRE(rdmax_mem_alloc(ctx, 8 * NEP, RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_ANY_ENDPOINT, &dst) == RDMAX_OK, "region");
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.rq_depth = 4;
    d.keepalive_ms = RDMAX_OFF;
    d.timeout = 18;
    for (int i = 0; i < NEP; i++) {
        REQUIRE(tl_pair(ctx, ctx, &d, &d, &eps[2 * i], &eps[2 * i + 1]) == RDMAX_OK, "pair %d: %s", i, g_lastlog);
    }
    REQUIRE(rdmax_ep_query_desc(eps[0]).signal_interval > PER, "signal_interval %u: the case needs more than %d",
            rdmax_ep_query_desc(eps[0]).signal_interval, PER);
    rdmax_counters c0, c1;
    rdmax_ctx_query_counters(ctx, &c0);
    uint64_t v = 7;
    for (int k = 0; k < PER; k++)
        for (int i = 0; i < NEP; i++) {
            rdmax_status st = rdmax_put(eps[2 * i], &v, 8, NULL, (uintptr_t)dst->addr + 8 * (uint64_t)i, dst->rkey,
                                        NULL);
            REQUIRE(st == RDMAX_OK, "put %d on endpoint %d: %s", k, i, rdmax_status_str(st));
        }
    /* a hang guard, not a timing condition: without signaled posts nothing ever completes */
    double t0 = now_s();
    do {
        rdmax_progress(ctx);
        rdmax_ctx_query_counters(ctx, &c1);
    } while (c1.completed[RDMAX_OP_PUT] - c0.completed[RDMAX_OP_PUT] < NEP * PER && now_s() - t0 < 20);
    CHECK(c1.completed[RDMAX_OP_PUT] - c0.completed[RDMAX_OP_PUT] == NEP * PER,
          "%llu of %d puts completed (no flush): the entries they hold are stranded",
          (unsigned long long)(c1.completed[RDMAX_OP_PUT] - c0.completed[RDMAX_OP_PUT]), NEP * PER);
    CHECK(c1.cqes - c0.cqes == NEP * PER - CQ / 2, "%llu completions, expected %d (the posts past half the CQ)",
          (unsigned long long)(c1.cqes - c0.cqes), NEP * PER - CQ / 2);
    for (int i = 0; i < NEP; i++) {
        rdmax_ep_resources info;
        rdmax_ep_query_resources(eps[2 * i], &info);
        CHECK(info.outstanding == 0, "endpoint %d: %u outstanding", i, info.outstanding);
    }
    tl_end();
out:
    for (int i = 0; i < 2 * NEP; i++)
        rdmax_ep_destroy(eps[i]);
    rdmax_mem_free(dst);
    rdmax_ctx_destroy(ctx);
    if (tl_case_failed)
        tl_end();
    return tl_failed_total ? 1 : 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_sh = (struct shared *)mmap(NULL, sizeof *g_sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_sh == MAP_FAILED)
        return 1;
    if (argc >= 3 && !strcmp(argv[1], "pairs"))
        return pairs_mode(atoi(argv[2]));
    if (argc >= 4 && !strcmp(argv[1], "listen"))
        return listen_mode(atoi(argv[2]), atoi(argv[3]));
    if (argc >= 4 && !strcmp(argv[1], "credits"))
        return credits_mode(atoi(argv[2]), atoi(argv[3]));
    if (argc >= 4 && !strcmp(argv[1], "putrate"))
        return putrate_mode(atoi(argv[2]), atof(argv[3]));
    if (argc >= 3 && !strcmp(argv[1], "memory"))
        return memory_mode(atoi(argv[2]));
    if (argc >= 2 && !strcmp(argv[1], "cqshare"))
        return cqshare_mode();
    if (argc >= 3 && !strcmp(argv[1], "adapt"))
        return adapt_mode(atoi(argv[2]));
    if (argc >= 3 && !strcmp(argv[1], "tenk"))
        return tenk_mode(atoi(argv[2]));
    if (argc >= 4 && !strcmp(argv[1], "giveback"))
        return giveback_mode(atoi(argv[2]), atoi(argv[3]));
    if (argc >= 3 && !strcmp(argv[1], "rgroups"))
        return rgroups_mode(atoi(argv[2]));
    fprintf(stderr, "usage: scale_test pairs N | listen CLIENTS EPS | credits CLIENTS POSTS | putrate N SECONDS | "
            "memory PAIRS | cqshare | adapt PAIRS | tenk PAIRS | giveback PAIRS EXTRA | rgroups PAIRS\n");
    return 2;
}
