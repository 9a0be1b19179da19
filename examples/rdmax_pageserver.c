/* rdmax_pageserver - a remote-memory page server: the disaggregated-memory pattern in one file.

   The server owns memory and does nothing with it: it registers N pages of 4 KiB for remote reading and
   writing, tells the client where they are, and sleeps. The client treats them as far memory: it fetches
   a page with rdmax_get (an RDMA read into a local frame) and writes one back with rdmax_put (an RDMA
   write from a local frame). The server's CPU never touches a request: that is the point of the
   pattern, and why it scales with the NIC rather than with the memory node's cores.

       rdmax_pageserver -N 4096                       (server: 16 MiB of pages)
       rdmax_pageserver -n 20000 -r 70 192.0.2.1      (client: 20,000 operations, 70% reads)
       rdmax_pageserver --loopback -O 8               (both ends in one process, 8 operations in flight)

   What the client checks. It keeps the version of every page it wrote. A write fills the frame with a
   pattern made of (page, version + 1) and, when the write completes (RC: the server's NIC has the data),
   counts the new version; a read compares the whole page against (page, current version). A page is never
   read and written at the same time (a page with an operation in flight is not picked again), so every
   read has exactly one right answer. After the run the client reads every page once more and checks it.
   Any mismatch stops the run with a non-zero exit.

   What it prints: operations per second, MB/s and latency (average, median, 99th percentile, maximum)
   for reads, writes and both. Latency is from posting to the completion callback, timed with
   CLOCK_MONOTONIC (in a TCG guest with the hpet clocksource a clock read costs about 1 us, which is in
   these numbers). With -O 1 an operation waits for the previous one: latency mode; with more in flight
   the same loop measures throughput.

   How it uses rdmax. One RC endpoint; the server's first message (the only one it sends) carries the
   address, rkey and size of its pages; every operation has its own rdmax_comp with a callback, so the
   frame it used is free again and the latency is taken the moment rdmax_progress sees the completion.
   When rdmax answers RDMAX_ERR_NO_RESOURCE (read budget or send queue full) the client progresses and
   tries again. At the end the client sends "bye" and the server exits.
*/
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#include "../rdmax.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PAGE 4096u
#define DEFAULT_PAGES 1024
#define DEFAULT_OPS 20000
#define DEFAULT_READ_PCT 50
#define DEFAULT_PORT 18516
#define TIMEOUT_MS 10000
#define MAX_OUTSTANDING 128
#define HELLO_MAGIC 0x5047535652444d58ull /* "PGSVRDMX" */

/* What failed, in one sentence: the logger has already printed the details (device, call, errno). */
static const char *last_item(const rdmax_ctx *ctx)
{
    return rdmax_log_item_str(rdmax_ctx_query_last_error_item(ctx));
}

static struct {
    unsigned pages, outstanding, read_pct;
    uint64_t ops, seed;
    unsigned port;
    const char *device, *host;
    int gid_index, loopback;
} o;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* Contents of page `p` at version `v`: 512 words that differ per page, per version and per word. */
static uint64_t word(uint32_t p, uint32_t v, unsigned k)
{
    uint64_t x = ((uint64_t)p << 32 | v) ^ ((uint64_t)k * 0x9e3779b97f4a7c15ull);
    x ^= x >> 29;
    return x * 0xbf58476d1ce4e5b9ull;
}

static void page_fill(uint64_t *w, uint32_t p, uint32_t v)
{
    for (unsigned k = 0; k < PAGE / 8; k++)
        w[k] = word(p, v, k);
}

static int page_check(const uint64_t *w, uint32_t p, uint32_t v)
{
    for (unsigned k = 0; k < PAGE / 8; k++)
        if (w[k] != word(p, v, k)) {
            fprintf(stderr, "page %u: word %u is 0x%016" PRIx64 ", expected 0x%016" PRIx64 " (version %u)\n", p, k,
                    w[k], word(p, v, k), v);
            return -1;
        }
    return 0;
}

/* ---- the server: expose pages, then stay out of the way ------------------------------------------ */
static void encode64(unsigned char *b, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        b[k] = (unsigned char)(v >> (56 - 8 * k));
}

static uint64_t decode64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int k = 0; k < 8; k++)
        v = v << 8 | b[k];
    return v;
}

struct inbox {
    unsigned char msg[32];
    size_t len;
    int have;
};

static void on_msg(rdmax_ep *ep, void *data, size_t len, void *user)
{
    struct inbox *in = (struct inbox *)user;
    (void)ep;
    in->len = len < sizeof in->msg ? len : sizeof in->msg;
    memcpy(in->msg, data, in->len);
    in->have = 1;
}

/* The pages the server exposes, initialised to version 0. */
static rdmax_mem *make_pages(rdmax_ctx *ctx)
{
    rdmax_mem *m;
    size_t bytes = (size_t)o.pages * PAGE;
    /* its rkey goes to each client in the hello message: open on any endpoint of the context (every
       client can reach every page until the region is freed) */
    if (rdmax_mem_alloc(ctx, bytes, RDMAX_ACCESS_REMOTE_READ | RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_ANY_ENDPOINT, &m) !=
        RDMAX_OK) {
        fprintf(stderr, "server: cannot register %zu bytes of pages (option -N): %s\n", bytes,
                last_item(ctx));
        return NULL;
    }
    for (uint32_t p = 0; p < o.pages; p++)
        page_fill((uint64_t *)(void *)((char *)m->addr + (size_t)p * PAGE), p, 0);
    return m;
}

/* Tell the client where the pages are: magic, address, rkey, number of pages. */
static int send_hello(rdmax_ctx *ctx, rdmax_ep *ep, const rdmax_mem *m)
{
    unsigned char b[32];
    encode64(b, HELLO_MAGIC);
    encode64(b + 8, (uintptr_t)m->addr);
    encode64(b + 16, m->rkey);
    encode64(b + 24, o.pages);
    double deadline = now_us() + TIMEOUT_MS * 1e3;
    rdmax_status st;
    while ((st = rdmax_send(ep, b, sizeof b, NULL, NULL)) == RDMAX_ERR_NO_RESOURCE && now_us() < deadline)
        rdmax_progress(ctx);
    if (st < 0) {
        fprintf(stderr, "server: cannot send the page table: %s\n", rdmax_status_str(st));
        return -1;
    }
    return 0;
}

static int server(rdmax_ctx *ctx)
{
    rdmax_mem *m = make_pages(ctx);
    if (!m)
        return 1;
    rdmax_listener *l;
    if (rdmax_listener_create(ctx, NULL, (uint16_t)o.port, &l) != RDMAX_OK) {
        fprintf(stderr, "server: cannot listen on port %u (option -p): %s\n", o.port, last_item(ctx));
        rdmax_mem_free(m);
        return 1;
    }
    printf("server: %u pages of %u B (%.1f MiB) on %s, listening on port %u\n", o.pages, PAGE,
           (double)o.pages * PAGE / 1048576.0, rdmax_ctx_query_attr(ctx)->name, o.port);
    struct inbox in;
    memset(&in, 0, sizeof in);
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.recv_size = 64;
    d.recv_cb = on_msg;
    d.user = &in;
    d.expose = m;
    rdmax_ep *ep = NULL;
    rdmax_status st = rdmax_accept(l, &d, &ep, 120000);
    int rc = 1;
    if (st != RDMAX_OK) {
        fprintf(stderr, "server: no client on port %u: %s\n", o.port, rdmax_status_str(st));
    } else if (send_hello(ctx, ep, m) == 0) {
        /* Nothing to do until "bye": the client's reads and writes never reach this process. */
        while (!in.have && rdmax_ep_query_error(ep) == RDMAX_OK)
            rdmax_wait(ctx, 1000);
        if (in.have && in.len == 3 && !memcmp(in.msg, "bye", 3)) {
            printf("server: client done\n");
            rc = 0;
        } else {
            fprintf(stderr, "server: client %s went away: %s\n", o.host ? o.host : "",
                    rdmax_status_str(rdmax_ep_query_error(ep)));
        }
    }
    rdmax_ep_destroy(ep);
    rdmax_listener_destroy(l);
    rdmax_mem_free(m);
    return rc;
}

/* ---- the client: a far-memory workload ---------------------------------------------------------- */
struct op {
    rdmax_comp comp;              /* first: the callback gets it back and finds the op */
    struct client *c;
    uint64_t *frame;              /* local 4 KiB frame inside the registered pool */
    uint32_t page;
    int is_read, busy;
    double t0;
};

struct stats {
    double *lat;
    uint64_t n;
    double sum, max;
};

struct client {
    rdmax_ctx *ctx;
    rdmax_ep *ep;
    uint64_t raddr;
    uint32_t rkey, pages;
    uint32_t *version;            /* last version written to each page */
    unsigned char *busy;          /* page has an operation in flight */
    rdmax_mem *pool;
    struct op ops[MAX_OUTSTANDING];
    struct stats st[2];           /* [0] writes, [1] reads */
    uint64_t issued, done, rng;
    int bad, measuring;
};

static uint64_t rnd(struct client *c)
{
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    return c->rng;
}

static void on_done(rdmax_comp *comp, rdmax_status status)
{
    struct op *op = (struct op *)(void *)comp;
    struct client *c = op->c;
    double dt = now_us() - op->t0;
    if (status != RDMAX_OK) {
        fprintf(stderr, "%s of page %u failed: %s\n", op->is_read ? "read" : "write", op->page,
                rdmax_status_str(status));
        c->bad = 1;
    } else if (op->is_read) {
        if (page_check(op->frame, op->page, c->version[op->page]))
            c->bad = 1;
    } else {
        c->version[op->page]++;  /* the server has it: later reads must see it */
    }
    if (c->measuring) {
        struct stats *s = &c->st[op->is_read];
        s->lat[s->n++] = dt;
        s->sum += dt;
        if (dt > s->max)
            s->max = dt;
    }
    c->busy[op->page] = 0;
    op->busy = 0;
    c->done++;
}

/* Start one operation in slot `op` on `page` (read or write). */
static int issue(struct client *c, struct op *op, uint32_t page, int is_read)
{
    op->page = page;
    op->is_read = is_read;
    op->busy = 1;
    c->busy[page] = 1;
    memset(&op->comp, 0, sizeof op->comp);
    op->comp.cb = on_done;
    uint64_t raddr = c->raddr + (uint64_t)page * PAGE;
    if (!is_read)
        page_fill(op->frame, page, c->version[page] + 1);
    double deadline = now_us() + TIMEOUT_MS * 1e3;
    rdmax_status st;
    for (;;) {
        op->t0 = now_us();
        st = is_read ? rdmax_get(c->ep, op->frame, PAGE, c->pool, raddr, c->rkey, &op->comp)
                     : rdmax_put(c->ep, op->frame, PAGE, c->pool, raddr, c->rkey, &op->comp);
        if (st != RDMAX_ERR_NO_RESOURCE || now_us() > deadline)
            break;
        rdmax_progress(c->ctx);
    }
    if (st != RDMAX_INPROGRESS) {
        fprintf(stderr, "%s of page %u: %s\n", is_read ? "read" : "write", page, rdmax_status_str(st));
        return -1;
    }
    c->issued++;
    return 0;
}

/* Run `count` operations (read_pct% reads on random idle pages), or with sweep set, one read of every
   page in order. */
static int workload(struct client *c, uint64_t count, int sweep)
{
    uint64_t target = c->issued + count, start_done = c->done;
    uint32_t next_page = 0;
    double last = now_us();
    while (c->done - start_done < count && !c->bad) {
        for (unsigned i = 0; i < o.outstanding && c->issued < target; i++) {
            struct op *op = &c->ops[i];
            if (op->busy)
                continue;
            uint32_t page;
            int is_read = 1;
            if (sweep) {
                page = next_page++;
            } else {
                do
                    page = (uint32_t)(rnd(c) % c->pages);
                while (c->busy[page]);
                is_read = rnd(c) % 100 < o.read_pct;
            }
            if (issue(c, op, page, is_read))
                return -1;
        }
        if (rdmax_progress(c->ctx) > 0) {
            last = now_us();
        } else if (now_us() - last > TIMEOUT_MS * 1e3) {
            fprintf(stderr, "no completion for %d ms (server %s gone?): %s\n", TIMEOUT_MS,
                    o.loopback ? "loopback" : o.host, rdmax_status_str(rdmax_ep_query_error(c->ep)));
            return -1;
        }
    }
    return c->bad ? -1 : 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void print_stats(const char *name, struct stats *s, double secs)
{
    if (!s->n) {
        printf(" %-6s %10d\n", name, 0);
        return;
    }
    qsort(s->lat, s->n, sizeof *s->lat, cmp_double);
    double ops = (double)s->n / secs;
    printf(" %-6s %10" PRIu64 " %12.0f %10.2f %14.2f %12.2f %12.2f %12.2f\n", name, s->n, ops,
           ops * PAGE / 1048576.0, s->sum / (double)s->n, s->lat[s->n / 2], s->lat[(s->n * 99 + 99) / 100 - 1], s->max);
}

static int client_run(rdmax_ctx *ctx, rdmax_ep *ep, uint64_t raddr, uint32_t rkey, uint32_t pages)
{
    static struct client c;
    memset(&c, 0, sizeof c);
    c.ctx = ctx;
    c.ep = ep;
    c.raddr = raddr;
    c.rkey = rkey;
    c.pages = pages;
    c.rng = o.seed ? o.seed : 0x2545f4914f6cdd1dull;
    if (o.outstanding > pages / 2) {
        fprintf(stderr, "option -O: %u in flight needs at least %u pages (-N); the server has %u\n", o.outstanding,
                2 * o.outstanding, pages);
        return 1;
    }
    c.version = (uint32_t *)calloc(pages, sizeof *c.version);
    c.busy = (unsigned char *)calloc(pages, 1);
    c.st[0].lat = (double *)malloc(sizeof(double) * (o.ops + 1));
    c.st[1].lat = (double *)malloc(sizeof(double) * (o.ops + 1));
    int rc = 1;
    if (!c.version || !c.busy || !c.st[0].lat || !c.st[1].lat) {
        fprintf(stderr, "out of memory for %u pages and %" PRIu64 " operations\n", pages, o.ops);
        goto out;
    }
    if (rdmax_mem_alloc(ctx, (size_t)o.outstanding * PAGE, RDMAX_ACCESS_LOCAL, &c.pool) != RDMAX_OK) {
        fprintf(stderr, "registering %u local frames: %s\n", o.outstanding, last_item(ctx));
        goto out;
    }
    for (unsigned i = 0; i < o.outstanding; i++) {
        c.ops[i].c = &c;
        c.ops[i].frame = (uint64_t *)(void *)((char *)c.pool->addr + (size_t)i * PAGE);
    }
    printf("client: %u pages of %u B at %s, %" PRIu64 " operations, %u%% reads, %u in flight\n", pages, PAGE,
           o.loopback ? "loopback" : o.host, o.ops, o.read_pct, o.outstanding);
    /* warm-up: a few operations that are checked but not timed */
    if (workload(&c, o.ops / 20 < 1000 ? o.ops / 20 : 1000, 0))
        goto out;
    c.measuring = 1;
    double t0 = now_us();
    if (workload(&c, o.ops, 0))
        goto out;
    double secs = (now_us() - t0) / 1e6;
    c.measuring = 0;
    printf(" %-6s %10s %12s %10s %14s %12s %12s %12s\n", "op", "count", "ops/s", "MB/s", "lat_avg[usec]",
           "lat_p50", "lat_p99", "lat_max");
    print_stats("read", &c.st[1], secs);
    print_stats("write", &c.st[0], secs);
    printf(" %-6s %10" PRIu64 " %12.0f %10.2f   (%.3f s)\n", "total", c.st[0].n + c.st[1].n,
           (double)(c.st[0].n + c.st[1].n) / secs, (double)(c.st[0].n + c.st[1].n) * PAGE / secs / 1048576.0, secs);
    /* final pass: every page must hold its last written version */
    if (workload(&c, pages, 1))
        goto out;
    printf("verified: every read matched its page's last write; final pass over %u pages OK\n", pages);
    rc = 0;
out:
    rdmax_mem_free(c.pool);
    free(c.version);
    free(c.busy);
    free(c.st[0].lat);
    free(c.st[1].lat);
    return rc;
}

static int client(rdmax_ctx *ctx)
{
    struct inbox in;
    memset(&in, 0, sizeof in);
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.recv_size = 64;
    d.recv_cb = on_msg;
    d.user = &in;
    rdmax_ep *ep;
    rdmax_status st = rdmax_connect(ctx, o.host, (uint16_t)o.port, &d, &ep, TIMEOUT_MS);
    if (st != RDMAX_OK) {
        fprintf(stderr, "client: cannot connect to %s port %u (options HOST, -p): %s\n", o.host, o.port,
                rdmax_status_str(st));
        return 1;
    }
    double deadline = now_us() + TIMEOUT_MS * 1e3;
    while (!in.have && now_us() < deadline && rdmax_ep_query_error(ep) == RDMAX_OK)
        rdmax_progress(ctx);
    int rc = 1;
    if (!in.have || in.len != 32 || decode64(in.msg) != HELLO_MAGIC) {
        fprintf(stderr, "client: server %s sent no page table (not an rdmax_pageserver?)\n", o.host);
    } else {
        uint64_t n = decode64(in.msg + 24);
        rc = client_run(ctx, ep, decode64(in.msg + 8), (uint32_t)decode64(in.msg + 16),
                        (uint32_t)(n > UINT32_MAX ? UINT32_MAX : n));
        /* "bye" from a registered buffer with a completion: signaled, so when it completes the server
           has it and may go. (An inline send cannot carry a completion, and a flush after it would add a
           zero-length write that can reach a QP the server has already destroyed.) */
        rdmax_mem *bm = NULL;
        rdmax_comp bc;
        memset(&bc, 0, sizeof bc);
        st = rdmax_mem_alloc(ctx, 64, RDMAX_ACCESS_LOCAL, &bm);
        if (st == RDMAX_OK) {
            memcpy(bm->addr, "bye", 3);
            while ((st = rdmax_send(ep, bm->addr, 3, bm, &bc)) == RDMAX_ERR_NO_RESOURCE)
                rdmax_progress(ctx);
            double until = now_us() + TIMEOUT_MS * 1e3;
            while (st == RDMAX_INPROGRESS && !bc.done && now_us() < until)
                rdmax_progress(ctx);
        }
        if (st != RDMAX_INPROGRESS || !bc.done || bc.status != RDMAX_OK) {
            fprintf(stderr, "client: could not say bye to %s\n", o.host);
            rc = 1;
        }
        rdmax_mem_free(bm);
    }
    rdmax_ep_destroy(ep);
    return rc;
}

static int loopback(rdmax_ctx *ctx)
{
    rdmax_mem *m = make_pages(ctx);
    if (!m)
        return 1;
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.recv_size = 64;
    d.expose = m;
    rdmax_ep *a, *b;
    if (rdmax_ep_create_pair(ctx, &d, &a, &b) != RDMAX_OK) {
        fprintf(stderr, "loopback endpoints: %s\n", last_item(ctx));
        rdmax_mem_free(m);
        return 1;
    }
    int rc = client_run(ctx, a, (uintptr_t)m->addr, m->rkey, o.pages);
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_mem_free(m);
    return rc;
}

/* ---- options ------------------------------------------------------------------------------------ */
static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [options] [HOST]        (no HOST: server; HOST: client; --loopback: both)\n"
            "  -N, --pages=N          pages the server exposes, 4 KiB each            [%d]\n"
            "  -n, --ops=N            operations the client times                     [%d]\n"
            "  -r, --read-pct=P       percentage of reads (the rest are writes)       [%d]\n"
            "  -O, --outstanding=N    operations in flight (1: latency mode; <= %d)   [1]\n"
            "  -S, --seed=N           seed of the page and read/write choice          [fixed]\n"
            "  -p, --port=PORT        TCP port of the connection exchange            [%d]\n"
            "  -d, --ib-dev=NAME      RDMA device                                    [$RDMAX_DEVICE or first active]\n"
            "  -x, --gid-index=N      GID index                                      [RoCE v2 IPv4-mapped]\n"
            "      --loopback         both ends in this process\n"
            "  -h, --help             this text\n"
            "The client learns the number of pages from the server; -N on the client applies to --loopback.\n",
            prog, DEFAULT_PAGES, DEFAULT_OPS, DEFAULT_READ_PCT, MAX_OUTSTANDING, DEFAULT_PORT);
}

static int num(const char *opt, const char *v, unsigned long long lo, unsigned long long hi, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 0);
    if (errno || end == v || *end || *v == '-' || x < lo || x > hi) {
        fprintf(stderr, "option %s: '%s' is not a number in %llu..%llu\n", opt, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {
        {"pages", required_argument, 0, 'N'},       {"ops", required_argument, 0, 'n'},
        {"read-pct", required_argument, 0, 'r'},    {"outstanding", required_argument, 0, 'O'},
        {"seed", required_argument, 0, 'S'},        {"port", required_argument, 0, 'p'},
        {"ib-dev", required_argument, 0, 'd'},      {"device", required_argument, 0, 'd'},
        {"gid-index", required_argument, 0, 'x'},   {"loopback", no_argument, 0, 'L'},
        {"help", no_argument, 0, 'h'},              {0, 0, 0, 0}};
    o.pages = DEFAULT_PAGES;
    o.ops = DEFAULT_OPS;
    o.read_pct = DEFAULT_READ_PCT;
    o.outstanding = 1;
    o.port = DEFAULT_PORT;
    o.gid_index = -1;
    int c;
    unsigned long long v;
    while ((c = getopt_long(argc, argv, "N:n:r:O:S:p:d:x:h", lo, NULL)) != -1) {
        switch (c) {
        case 'N': if (num("-N", optarg, 2, 1u << 22, &v)) return 2; o.pages = (unsigned)v; break;
        case 'n': if (num("-n", optarg, 1, 1ull << 32, &v)) return 2; o.ops = v; break;
        case 'r': if (num("-r", optarg, 0, 100, &v)) return 2; o.read_pct = (unsigned)v; break;
        case 'O': if (num("-O", optarg, 1, MAX_OUTSTANDING, &v)) return 2; o.outstanding = (unsigned)v; break;
        case 'S': if (num("-S", optarg, 1, UINT64_MAX, &v)) return 2; o.seed = v; break;
        case 'p': if (num("-p", optarg, 1, 65535, &v)) return 2; o.port = (unsigned)v; break;
        case 'd': o.device = optarg; break;
        case 'x': if (num("-x", optarg, 0, 255, &v)) return 2; o.gid_index = (int)v; break;
        case 'L': o.loopback = 1; break;
        case 'h': usage(stdout, argv[0]); return 0;
        default: usage(stderr, argv[0]); return 2;
        }
    }
    if (optind < argc)
        o.host = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, "unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (o.host && o.loopback) {
        fprintf(stderr, "--loopback and a HOST exclude each other\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.device = o.device;
    if (o.gid_index >= 0) {
        cd.gid_index_set = true;
        cd.gid_index = o.gid_index;
    }
    rdmax_ctx *ctx;
    if (rdmax_ctx_create(&cd, &ctx) != RDMAX_OK) {
        fprintf(stderr, "cannot open the RDMA device%s%s (options -d, -x)\n", o.device ? " " : "",
                o.device ? o.device : "");
        return 1;
    }
    int rc = o.loopback ? loopback(ctx) : o.host ? client(ctx) : server(ctx);
    rdmax_ctx_destroy(ctx);
    if (rc)
        fprintf(stderr, "%s: FAILED\n", argv[0]);
    return rc;
}
