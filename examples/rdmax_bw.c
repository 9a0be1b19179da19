/* rdmax_bw - bandwidth and message rate of put, send and get, printed as ib_write_bw prints them.

   Start a server, then a client that names the server's host; the client decides the test and tells the
   server what to prepare (options other than -p, -d and -x are the client's business):

       rdmax_bw                                   (server)
       rdmax_bw -t put -s 65536 192.0.2.1         (client: 64 KiB RDMA writes)
       rdmax_bw -t send -s 8 -D 2 192.0.2.1       (client: 8-byte sends for two seconds)
       rdmax_bw -t get -a --loopback              (both ends in one process, every size)

   How it runs. The client opens a control endpoint (RC) to the server and sends a HELLO naming the test,
   transport, message size and number of endpoints. The server allocates and registers the buffer the
   client will write to or read from (one message-sized region per endpoint), answers READY with its
   address and key, and accepts the data endpoints. The client then keeps every data endpoint's send queue
   full: it posts up to -l operations chained into one ibv_post_send (inline RC puts: rdmax_put_list;
   the rest: rdmax_batch_begin, the operations, rdmax_batch_end),
   unsignaled except for one in -Q (the endpoint's signal_interval), and when rdmax answers
   RDMAX_ERR_NO_RESOURCE (send queue, CQ, read budget or the peer's receive credits are used up) it drives
   rdmax_progress and tries again. -O sets the send-queue depth, so it bounds the operations in flight per
   endpoint. At the end each endpoint is flushed, the client sends DONE with the number of operations, and
   the server answers RESULT after checking what it got: the last put's data in each region, or for sends
   the number of messages its receive callback counted and their lengths. A get run is checked by the
   client against the pattern the server wrote.

   Puts and sends of at most the device's inline size (about 400 bytes on rxe; -I lowers it) are posted
   inline from an unregistered buffer (mem NULL); larger ones come from a buffer registered with
   rdmax_mem_alloc. A send goes to the receiver's callback; the receiver's buffers (ep desc recv_size) are
   exactly the message size, and it keeps 512 of them posted (fewer for messages above 128 KiB). RC sends
   are flow controlled by rdmax itself (receive credits); UD has none in rdmax, so for UD the receiver
   returns its count of processed messages every 64 messages and the client never has more than the
   receiver's posted buffers in flight, so no datagram is dropped for lack of a buffer. UD datagrams of 8
   bytes or more carry their number in the first 8 bytes (each from its own slot of a ring as deep as the
   send queue, so a number is never overwritten before its send completed); the receiver counts the
   missing, duplicated and out-of-order ones and prints them beside rdmax's own ud.skipped, ud.late and
   ud.duplicates, so loss on the link is visible rather than only a shortfall.

   Columns are ib_write_bw's: #bytes, #iterations (operations completed over all endpoints), BW peak
   (the best rate over any stretch of at least a tenth of the run), BW average (all bytes over the whole
   run, first post to last completion), MsgRate in millions of operations per second. MB/sec is MiB/s as
   in perftest; --report_gbits gives Gbit/s (10^9). Timing reads CLOCK_MONOTONIC only when completions
   arrive (or every 64 idle polls): in a TCG guest with the hpet clocksource one read costs about 1 us.

   The post functions bw_put, bw_send and bw_get are kept out of line (noinline, noclone) so that
   callgrind can count the instructions of one rdmax operation: their inclusive cost per call is rdmax's
   fast path plus the verbs provider's post_send, and the harness adds only the call itself.
*/
#define RDMAX_TRANSPORT_RC
#define RDMAX_TRANSPORT_UD
#define RDMAX_IMPLEMENTATION
#include "../rdmax.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_PORT 18515
#define DEFAULT_SIZE 65536
#define DEFAULT_ITERS 5000
#define DEFAULT_OUTSTANDING 128
#define DEFAULT_POST_LIST RDMAX_BATCH_MAX
#define MAX_QPS 256
#define TIMEOUT_MS 10000
#define ACCEPT_TIMEOUT_MS 60000
#define RX_DEPTH 512            /* receive buffers per endpoint of the send test */
#define RX_BYTES (64u << 20)    /* ... but no more than this many bytes of them */
#define UD_CREDIT_EVERY 64      /* UD: the receiver returns its count every this many messages */

#if defined(__GNUC__) && !defined(__clang__)
#define BW_NOINLINE __attribute__((noinline, noclone))
#else
#define BW_NOINLINE __attribute__((noinline))
#endif

enum test { T_PUT, T_SEND, T_GET };
/* What failed, in one sentence: the logger has already printed the details (device, call, errno). */
static const char *last_item(const rdmax_ctx *ctx)
{
    return rdmax_log_item_str(rdmax_ctx_query_last_error_item(ctx));
}

static const char *const test_names[] = {"put", "send", "get"};

struct opts {
    enum test test;
    int ud;                       /* -c UD */
    size_t size;
    int all;
    unsigned qps, post_list, cq_mod, outstanding;
    uint64_t iters;
    double duration;              /* -D: seconds; 0: -n */
    int inline_size;              /* -1: device maximum */
    int gbits;
    unsigned port;
    const char *device;
    int gid_index;
    const char *host;
    int loopback;
    const char *csv, *json;
    int profile;
    int cm;                       /* --cm: connections through rdma_cm */
};

struct row {
    size_t bytes;
    uint64_t ops;
    double peak, avg, mpps;       /* BW in the reported unit */
    double seconds;
    uint64_t post_calls;
};

static struct opts o;
static int quiet_log;             /* hide rdmax's error lines while retrying (connect, flush steps) */
static int test_skip;             /* RDMAX_BW_TEST_SKIP=1 (the suite's control): UD numbers skip 5 */

static void on_log(rdmax_log_level lvl, rdmax_log_item item, const char *msg, void *user)
{
    (void)user;
    (void)item;
    if (!quiet_log || lvl > RDMAX_LOG_ERROR)
        fprintf(stderr, "rdmax %s: %s\n", lvl == RDMAX_LOG_ERROR ? "error" : lvl == RDMAX_LOG_WARN ? "warning" : "info",
                msg);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Payload: byte j of endpoint k's data is (k * 131 + j) mod 251 + 1. */
static unsigned char pattern(unsigned k, size_t j)
{
    return (unsigned char)(((size_t)k * 131 + j) % 251 + 1);
}

static void fill(unsigned char *b, size_t n, unsigned k)
{
    for (size_t j = 0; j < n; j++)
        b[j] = pattern(k, j);
}

static long check(const unsigned char *b, size_t n, unsigned k)
{
    for (size_t j = 0; j < n; j++)
        if (b[j] != pattern(k, j))
            return (long)j;
    return -1;
}

/* ---- control messages: eight 64-bit words in network order on the control endpoint ---------------- */
enum { C_HELLO = 1, C_READY, C_DONE, C_RESULT, C_BYE };
#define CTL_MAGIC 0x52444d5842570001ull /* "RDMXBW" version 1 */
#define CTL_WORDS 8
#define CTL_BYTES (CTL_WORDS * 8)

struct ctl {
    uint64_t w[CTL_WORDS];        /* [0] magic, [1] type, [2..7] arguments */
};

/* HELLO: test, ud, size, qps.  READY: addr, rkey, len, ud_window.  DONE: ops.  RESULT: msgs, bad. */

struct mailbox {
    struct ctl msg;
    int have;
    int bad;
    const char *peer;
};

static void on_ctl(rdmax_ep *ep, void *data, size_t len, void *user)
{
    struct mailbox *mb = (struct mailbox *)user;
    const unsigned char *p = (const unsigned char *)data;
    (void)ep;
    if (len != CTL_BYTES || mb->have) {
        fprintf(stderr, "%s: unexpected control message of %zu bytes\n", mb->peer, len);
        mb->bad = 1;
        return;
    }
    for (int i = 0; i < CTL_WORDS; i++) {
        uint64_t v = 0;
        for (int b = 0; b < 8; b++)
            v = v << 8 | p[i * 8 + b];
        mb->msg.w[i] = v;
    }
    if (mb->msg.w[0] != CTL_MAGIC) {
        fprintf(stderr, "%s: control message with a wrong magic (not an rdmax_bw peer, or another version)\n",
                mb->peer);
        mb->bad = 1;
        return;
    }
    mb->have = 1;
}

/* Control messages go from a registered buffer with a completion, so they are signaled and acknowledged
   when ctl_send returns: a peer may tear down right after the last one without losing it (an unsignaled
   last message would need a flush, whose extra zero-length write can meet a QP the peer destroyed). */
static rdmax_mem *ctl_mem;

static int ctl_send(rdmax_ctx *ctx, rdmax_ep *ep, uint64_t type, uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    if (!ctl_mem && rdmax_mem_alloc(ctx, CTL_BYTES, RDMAX_ACCESS_LOCAL, &ctl_mem) != RDMAX_OK) {
        fprintf(stderr, "registering the control buffer: %s\n", last_item(ctx));
        return -1;
    }
    uint64_t w[CTL_WORDS] = {CTL_MAGIC, type, a, b, c, d, 0, 0};
    unsigned char *buf = (unsigned char *)ctl_mem->addr;
    for (int i = 0; i < CTL_WORDS; i++)
        for (int k = 0; k < 8; k++)
            buf[i * 8 + k] = (unsigned char)(w[i] >> (56 - 8 * k));
    double deadline = now_s() + TIMEOUT_MS / 1000.0;
    rdmax_comp comp;
    memset(&comp, 0, sizeof comp);
    rdmax_status st;
    while ((st = rdmax_send(ep, buf, CTL_BYTES, ctl_mem, &comp)) == RDMAX_ERR_NO_RESOURCE && now_s() < deadline)
        rdmax_progress(ctx);
    if (st == RDMAX_INPROGRESS) {
        unsigned spin = 0;
        while (!comp.done && ((++spin & 1023) || now_s() < deadline))
            rdmax_progress(ctx);
        st = comp.done ? comp.status : RDMAX_ERR_TIMEOUT;
    }
    if (st != RDMAX_OK) {
        fprintf(stderr, "control message to the %s: %s\n", o.host || o.loopback ? "server" : "client",
                rdmax_status_str(st));
        return -1;
    }
    return 0;
}

/* Wait for the next control message of `type` (0: any); passive (blocks in rdmax_wait) unless a busy callback
   is given, which runs between polls (the send test's receiver). */
static int ctl_wait(rdmax_ctx *ctx, rdmax_ep *ctl, struct mailbox *mb, uint64_t type, int timeout_ms, int busy,
                    void (*between)(void *), void *arg)
{
    double deadline = now_s() + timeout_ms / 1000.0;
    unsigned spin = 0;
    while (!mb->have && !mb->bad) {
        if (busy) {
            rdmax_progress(ctx);
            if (between)
                between(arg);
            if (++spin & 1023)
                continue;
        } else {
            rdmax_wait(ctx, 100);
        }
        if (!mb->have && rdmax_ep_query_error(ctl) != RDMAX_OK) {  /* a message that came before the close counts */
            fprintf(stderr, "%s: control endpoint failed: %s (peer gone?)\n", mb->peer,
                    rdmax_status_str(rdmax_ep_query_error(ctl)));
            return -1;
        }
        if (now_s() > deadline) {
            fprintf(stderr, "%s: no control message within %d ms\n", mb->peer, timeout_ms);
            return -1;
        }
    }
    if (mb->bad)
        return -1;
    mb->have = 0;
    if (type && mb->msg.w[1] != type) {
        fprintf(stderr, "%s: control message type %llu, expected %llu\n", mb->peer,
                (unsigned long long)mb->msg.w[1], (unsigned long long)type);
        return -1;
    }
    return 0;
}

/* ---- receiver side (the server, or the second half of --loopback) -------------------------------- */
struct rx {
    rdmax_ep *ep;
    unsigned index;
    size_t size;
    uint64_t got;                 /* messages received */
    uint64_t granted;             /* UD: the count last returned */
    int ud, grant_pending;
    long bad_at;                  /* first payload mismatch (byte), -1 none */
    size_t bad_len;               /* a message of the wrong length, 0 none */
    /* UD: datagram numbers (sizes of 8 bytes or more) */
    uint64_t next, seen;          /* the number expected next; the 64 before it that came (bit k: next-1-k) */
    uint64_t missing, dups, late;
};

/* UD: a datagram that is not the next one. Later than expected: the ones between are missing; earlier:
   a duplicate if it came already, else late (it was counted missing, and is not). */
static void rx_seq(struct rx *r, uint64_t seq)
{
    if (seq >= r->next) {
        uint64_t gap = seq - r->next;
        r->missing += gap;
        r->seen = gap + 1 >= 64 ? 0 : r->seen << (gap + 1);
        r->seen |= 1;
        r->next = seq + 1;
        return;
    }
    uint64_t k = r->next - 1 - seq;
    if (k < 64 && (r->seen >> k & 1)) {
        r->dups++;
    } else {
        r->late++;
        if (r->missing)
            r->missing--;
        if (k < 64)
            r->seen |= 1ull << k;
    }
}

static void rx_grant(struct rx *r)
{
    unsigned char b[8];
    for (int k = 0; k < 8; k++)
        b[k] = (unsigned char)(r->got >> (56 - 8 * k));
    rdmax_status st = rdmax_send(r->ep, b, sizeof b, NULL, NULL);
    if (st >= 0) {
        r->granted = r->got;
        r->grant_pending = 0;
    } else {
        r->grant_pending = 1;  /* NO_RESOURCE: retried between polls */
    }
}

static void on_data(rdmax_ep *ep, void *data, size_t len, void *user)
{
    struct rx *r = (struct rx *)user;
    const unsigned char *p = (const unsigned char *)data;
    (void)ep;
    r->got++;
    /* UD: the first 8 bytes are the datagram's number, the pattern is checked after them */
    size_t from = r->ud && r->size >= 8 ? 8 : 0;
    if (len != r->size) {
        if (!r->bad_len)
            r->bad_len = len ? len : (size_t)-1;
    } else if (r->bad_at < 0 && ((from < len && p[from] != pattern(r->index, from)) ||
                                 p[len - 1] != pattern(r->index, len - 1))) {
        r->bad_at = from < len && p[from] != pattern(r->index, from) ? (long)from : (long)len - 1;
    }
    if (from && len == r->size) {
        uint64_t seq;
        memcpy(&seq, p, 8);
        if (seq == r->next) {
            r->seen = r->seen << 1 | 1;
            r->next++;
        } else {
            rx_seq(r, seq);
        }
    }
    if (r->ud && r->got - r->granted >= UD_CREDIT_EVERY)
        rx_grant(r);
}

struct rx_set {
    struct rx rx[MAX_QPS];
    unsigned n;
    rdmax_counters c0;            /* UD: rdmax's counters when the size began */
};

static void rx_between(void *arg)
{
    struct rx_set *s = (struct rx_set *)arg;
    for (unsigned i = 0; i < s->n; i++)
        if (s->rx[i].grant_pending)
            rx_grant(&s->rx[i]);
}

/* ---- sender side ---------------------------------------------------------------------------------- */
struct tx {
    rdmax_ep *ep;
    unsigned char *lbuf;          /* this endpoint's local data: put/send source, get destination */
    uint64_t raddr;
    uint32_t rkey;
    uint64_t posted, target;
    uint64_t credit;              /* UD: messages the receiver has processed */
    unsigned char *ring;          /* UD sends: ring_n slots of the message size, each datagram numbered */
    uint32_t ring_n;
    rdmax_put_req *reqs;          /* inline RC puts with -l > 1: a post list of -l of them, built once */
};

static void on_credit(rdmax_ep *ep, void *data, size_t len, void *user)
{
    struct tx *t = (struct tx *)user;
    const unsigned char *p = (const unsigned char *)data;
    (void)ep;
    if (len != 8)
        return;
    uint64_t v = 0;
    for (int k = 0; k < 8; k++)
        v = v << 8 | p[k];
    if (v > t->credit)
        t->credit = v;
}

struct run {
    rdmax_ctx *ctx;
    struct tx tx[MAX_QPS];
    unsigned n;
    size_t size;
    const rdmax_mem *lmem;        /* registered local buffer; NULL for inline puts and sends */
    uint64_t ud_window;           /* UD: most messages beyond the receiver's count */
    struct rx_set *peer_rx;       /* --loopback: the receiving side, served between polls */
};

/* One operation each; out of line so that callgrind can attribute it (see the header comment). */
static BW_NOINLINE rdmax_status bw_put(struct tx *t, size_t size, const rdmax_mem *mem)
{
    return rdmax_put(t->ep, t->lbuf, size, mem, t->raddr, t->rkey, NULL);
}

static BW_NOINLINE rdmax_status bw_put_list(struct tx *t, size_t n, size_t *took)
{
    return rdmax_put_list(t->ep, t->reqs, n, took);
}

static BW_NOINLINE rdmax_status bw_send(struct tx *t, size_t size, const rdmax_mem *mem)
{
    return rdmax_send(t->ep, t->lbuf, size, mem, NULL);
}

static BW_NOINLINE rdmax_status bw_get(struct tx *t, size_t size, const rdmax_mem *mem)
{
    return rdmax_get(t->ep, t->lbuf, size, mem, t->raddr, t->rkey, NULL);
}

/* Peak: the best rate over any stretch of samples that covers at least `span` operations. */
struct samples {
    double *t;
    uint64_t *n;
    size_t len, cap;
};

static void sample(struct samples *s, double t, uint64_t n)
{
    if (s->len == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 4096;
        double *nt = (double *)realloc(s->t, cap * sizeof *nt);
        uint64_t *nn = nt ? (uint64_t *)realloc(s->n, cap * sizeof *nn) : NULL;
        if (!nt || !nn) {
            if (nt)
                s->t = nt;
            return;  /* out of memory: the peak is computed from fewer samples */
        }
        s->t = nt;
        s->n = nn;
        s->cap = cap;
    }
    s->t[s->len] = t;
    s->n[s->len++] = n;
}

static double peak_rate(const struct samples *s, uint64_t span)
{
    double best = 0;
    size_t j = 0;
    for (size_t i = 0; i < s->len; i++) {
        if (j < i)
            j = i;
        while (j < s->len && s->n[j] - s->n[i] < span)
            j++;
        if (j == s->len)
            break;
        double dt = s->t[j] - s->t[i];
        if (dt > 0 && (double)(s->n[j] - s->n[i]) / dt > best)
            best = (double)(s->n[j] - s->n[i]) / dt;
    }
    return best;
}

static int ep_failed(rdmax_ep *ep, unsigned i)
{
    rdmax_status st = rdmax_ep_query_error(ep);
    if (st == RDMAX_OK)
        return 0;
    fprintf(stderr, "data endpoint %u failed: %s (peer %s)\n", i, rdmax_status_str(st),
            o.loopback ? "loopback" : o.host);
    return 1;
}

/* rdmax_ep_flush in 20 ms steps up to timeout_ms: a flush looks at the newest request only when it
   starts, and a credit grant that rdmax_progress posts (unsignaled) while the flush waits would never
   complete; the next step sees it and puts a signaled marker behind it. */
static rdmax_status flush_ep(rdmax_ep *ep, int timeout_ms)
{
    double until = now_s() + timeout_ms / 1000.0;
    rdmax_status st;
    quiet_log = 1;
    while ((st = rdmax_ep_flush(ep, 20)) == RDMAX_ERR_TIMEOUT && now_s() < until)
        ;
    quiet_log = 0;
    return st;
}

/* The measurement of one size: keep every endpoint's queue full until the target or the time is
   reached, then flush. */
static int run_size(struct run *r, struct row *row)
{
    struct samples smp = {0};
    uint64_t total = 0;
    int rc = 0;
    for (unsigned i = 0; i < r->n; i++) {
        struct tx *x = &r->tx[i];
        x->posted = 0;
        x->target = o.duration > 0 ? UINT64_MAX : o.iters;
        x->reqs = NULL;
        if (o.test == T_PUT && !o.ud && r->lmem == NULL && o.post_list > 1) {
            x->reqs = (rdmax_put_req *)malloc(o.post_list * sizeof *x->reqs);
            if (!x->reqs) {
                fprintf(stderr, "out of memory\n");
                rc = -1;
                goto out;
            }
            for (unsigned k = 0; k < o.post_list; k++) {
                x->reqs[k].buf = x->lbuf;
                x->reqs[k].len = r->size;
                x->reqs[k].raddr = x->raddr;
                x->reqs[k].rkey = x->rkey;
            }
        }
    }
    rdmax_counters c0, c1;
    rdmax_ctx_query_counters(r->ctx, &c0);
    double t0 = now_s(), t = t0, last_progress = t0;
    int timed = o.duration > 0;
    unsigned spin = 0;
    sample(&smp, t0, 0);
    for (;;) {
        int active = 0;
        for (unsigned i = 0; i < r->n; i++) {
            struct tx *x = &r->tx[i];
            if (x->posted >= x->target)
                continue;
            active = 1;
            uint64_t room = x->target - x->posted;
            if (r->ud_window) {
                uint64_t lim = x->credit + r->ud_window;
                room = lim > x->posted ? (room < lim - x->posted ? room : lim - x->posted) : 0;
            }
            if (room > o.post_list)
                room = o.post_list;
            if (room == 0)
                continue;
            int chain = room > 1, list = chain && x->reqs != NULL;
            if (chain && !list)
                rdmax_batch_begin(x->ep);
            rdmax_status st = RDMAX_OK;
            uint64_t k = 0;
            if (list) {
                size_t took = 0;
                st = bw_put_list(x, (size_t)room, &took);
                k = took;
            }
            for (; !list && k < room; k++) {
                if (x->ring) {  /* UD: the datagram's number, in a slot no request in flight still uses */
                    uint64_t seq = x->posted + k;
                    seq += test_skip && seq >= 5;  /* the control: the receiver must count 1 missing */
                    x->lbuf = x->ring + (size_t)(seq % x->ring_n) * r->size;
                    memcpy(x->lbuf, &seq, 8);
                }
                st = o.test == T_PUT    ? bw_put(x, r->size, r->lmem)
                     : o.test == T_SEND ? bw_send(x, r->size, r->lmem)
                                        : bw_get(x, r->size, r->lmem);
                if (st < 0)
                    break;
            }
            x->posted += k;
            total += k;
            rdmax_status se = chain && !list ? rdmax_batch_end(x->ep) : RDMAX_OK;
            if ((st < 0 && st != RDMAX_ERR_NO_RESOURCE) || se < 0) {
                rdmax_status e = st < 0 && st != RDMAX_ERR_NO_RESOURCE ? st : se;
                fprintf(stderr, "%s of %zu bytes on endpoint %u: %s\n", test_names[o.test], r->size, i,
                        rdmax_status_str(e));
                if (e == RDMAX_ERR_SIZE)
                    fprintf(stderr, "option -s: %zu bytes is more than the peer accepts%s\n", r->size,
                            o.ud ? " (UD: one path MTU)" : "");
                rc = -1;
                goto out;
            }
        }
        int n = rdmax_progress(r->ctx);
        if (r->peer_rx)
            rx_between(r->peer_rx);
        if (n > 0 || (++spin & 63) == 0) {
            t = now_s();
            if (n > 0) {
                sample(&smp, t, total);
                last_progress = t;
            }
            if (timed && t - t0 >= o.duration) {
                for (unsigned i = 0; i < r->n; i++)
                    r->tx[i].target = r->tx[i].posted;
                timed = 0;
            }
            for (unsigned i = 0; i < r->n; i++)
                if (ep_failed(r->tx[i].ep, i)) {
                    rc = -1;
                    goto out;
                }
            if (t - last_progress > TIMEOUT_MS / 1000.0) {
                fprintf(stderr, "no completion for %d ms (peer %s stalled?)\n", TIMEOUT_MS,
                        o.loopback ? "loopback" : o.host);
                rc = -1;
                goto out;
            }
        }
        if (!active)
            break;
    }
    /* what is in flight may take a while at large sizes: allow 1 MB/s on top of the usual timeout */
    int flush_ms = TIMEOUT_MS + (int)((double)o.outstanding * (double)r->size / 1e3);
    for (unsigned i = 0; i < r->n; i++) {
        rdmax_status st = flush_ep(r->tx[i].ep, flush_ms);
        if (st != RDMAX_OK) {
            fprintf(stderr, "flush of data endpoint %u: %s\n", i, rdmax_status_str(st));
            rc = -1;
            goto out;
        }
    }
    t = now_s();
    sample(&smp, t, total);
    rdmax_ctx_query_counters(r->ctx, &c1);
    double unit = o.gbits ? 125e6 : 1048576.0;
    double secs = t - t0;
    uint64_t span = total / 10 > 2ull * o.outstanding * r->n ? total / 10 : 2ull * o.outstanding * r->n;
    double pk = peak_rate(&smp, span);
    double avg = secs > 0 ? (double)total / secs : 0;
    row->bytes = r->size;
    row->ops = total;
    row->seconds = secs;
    row->avg = avg * (double)r->size / unit;
    row->peak = (pk > avg ? pk : avg) * (double)r->size / unit;
    row->mpps = avg / 1e6;
    row->post_calls = c1.post_calls - c0.post_calls;
out:
    for (unsigned i = 0; i < r->n; i++) {
        free(r->tx[i].reqs);
        r->tx[i].reqs = NULL;
    }
    free(smp.t);
    free(smp.n);
    return rc;
}

/* ---- output ------------------------------------------------------------------------------------- */
static void print_head(void)
{
    printf("---------------------------------------------------------------------------------------\n");
    printf(" #bytes     #iterations    BW peak[%s]    BW average[%s]   MsgRate[Mpps]\n", o.gbits ? "Gb/sec" : "MB/sec",
           o.gbits ? "Gb/sec" : "MB/sec");
}

static void print_row(const struct row *r)
{
    printf(" %-10zu %-14" PRIu64 " %-18.2f %-20.2f %.6f\n", r->bytes, r->ops, r->peak, r->avg, r->mpps);
}

static int write_files(const struct row *r, int n)
{
    const char *unit = o.gbits ? "Gb/sec" : "MB/sec";
    if (o.csv) {
        FILE *f = fopen(o.csv, "w");
        if (!f) {
            fprintf(stderr, "--csv %s: %s\n", o.csv, strerror(errno));
            return -1;
        }
        fprintf(f, "test,transport,bytes,iterations,bw_peak,bw_average,bw_unit,msg_rate_mpps,seconds,qps,post_list,"
                   "cq_mod,outstanding,post_calls\n");
        for (int i = 0; i < n; i++)
            fprintf(f, "%s,%s,%zu,%" PRIu64 ",%.4f,%.4f,%s,%.6f,%.6f,%u,%u,%u,%u,%" PRIu64 "\n", test_names[o.test],
                    o.ud ? "UD" : "RC", r[i].bytes, r[i].ops, r[i].peak, r[i].avg, unit, r[i].mpps, r[i].seconds,
                    o.qps, o.post_list, o.cq_mod, o.outstanding, r[i].post_calls);
        fclose(f);
    }
    if (o.json) {
        FILE *f = fopen(o.json, "w");
        if (!f) {
            fprintf(stderr, "--json %s: %s\n", o.json, strerror(errno));
            return -1;
        }
        fprintf(f, "{\"test\": \"%s\", \"transport\": \"%s\", \"bw_unit\": \"%s\", \"qps\": %u, \"post_list\": %u, "
                   "\"cq_mod\": %u, \"outstanding\": %u, \"results\": [",
                test_names[o.test], o.ud ? "UD" : "RC", unit, o.qps, o.post_list, o.cq_mod, o.outstanding);
        for (int i = 0; i < n; i++)
            fprintf(f, "%s\n  {\"bytes\": %zu, \"iterations\": %" PRIu64 ", \"bw_peak\": %.4f, \"bw_average\": %.4f, "
                       "\"msg_rate_mpps\": %.6f, \"seconds\": %.6f, \"post_calls\": %" PRIu64 "}",
                    i ? "," : "", r[i].bytes, r[i].ops, r[i].peak, r[i].avg, r[i].mpps, r[i].seconds, r[i].post_calls);
        fprintf(f, "\n]}\n");
        fclose(f);
    }
    return 0;
}

static void print_profile(rdmax_ctx *ctx)
{
    rdmax_counters c;
    rdmax_ctx_query_counters(ctx, &c);
    uint64_t ops = 0;
    printf("rdmax counters:\n");
    for (int op = 0; op < RDMAX_OP__COUNT; op++)
        if (c.posted[op]) {
            printf("  %-6s posted %" PRIu64 " completed %" PRIu64 " bytes %" PRIu64 "\n", rdmax_op_str((rdmax_op)op),
                   c.posted[op], c.completed[op], c.bytes[op]);
            ops += c.posted[op];
        }
    printf("  post calls %" PRIu64 " (%.2f operations per call), receive post calls %" PRIu64 "\n", c.post_calls,
           c.post_calls ? (double)ops / (double)c.post_calls : 0.0, c.recv_post_calls);
    printf("  polls %" PRIu64 " (empty %" PRIu64 "), completions %" PRIu64 ", no-resource refusals %" PRIu64 "\n",
           c.polls, c.empty_polls, c.cqes, c.no_resource);
    printf("  messages received %" PRIu64 ", error completions %" PRIu64 ", flushed %" PRIu64 ", drops %" PRIu64 "\n",
           c.recv_msgs, c.err_cqes, c.flushed_cqes, c.recv_drops);
}

/* ---- setup -------------------------------------------------------------------------------------- */
static uint32_t rx_depth(size_t size)
{
    size_t n = RX_BYTES / (size ? size : 1);
    return (uint32_t)(n > RX_DEPTH ? RX_DEPTH : n < 32 ? 32 : n);
}

/* Data endpoint descriptions: the sender's (small receive buffers: grants and UD credits only) and the
   receiver's (message-sized buffers for the send test). */
static void tx_desc(rdmax_ep_desc *d, struct tx *t)
{
    memset(d, 0, sizeof *d);
    d->transport = o.ud ? RDMAX_TRANSPORT_ID_UD : RDMAX_TRANSPORT_ID_RC;
    d->sq_depth = o.outstanding;
    d->signal_interval = o.cq_mod;
    d->recv_size = 64;
    d->rq_depth = 32;
    d->max_inline = o.inline_size > 0 ? (uint32_t)o.inline_size : 0;
    d->recv_cb = on_credit;
    d->user = t;
}

static void rx_desc(rdmax_ep_desc *d, struct rx *r, int test, size_t size, const rdmax_mem *expose)
{
    memset(d, 0, sizeof *d);
    d->transport = o.ud ? RDMAX_TRANSPORT_ID_UD : RDMAX_TRANSPORT_ID_RC;
    d->recv_size = test == T_SEND ? (uint32_t)size : 64;
    d->rq_depth = test == T_SEND ? rx_depth(size) : 32;
    d->recv_cb = on_data;
    d->user = r;
    d->expose = expose;
}

static uint32_t cq_depth_for(unsigned qps)
{
    uint64_t d = (uint64_t)qps * (RX_DEPTH + DEFAULT_OUTSTANDING) + 256;
    if (d < (uint64_t)o.outstanding * qps + 256)
        d = (uint64_t)o.outstanding * qps + 256;
    return d < 4096 ? 4096 : d > 65536 ? 65536 : (uint32_t)d;
}

/* Local buffers of the sender for one size: registered unless every operation goes inline. */
static int tx_buffers(rdmax_ctx *ctx, struct run *r, size_t size, rdmax_mem **mem, unsigned char **plain)
{
    /* UD sends: a ring per endpoint as deep as its send queue (rdmax rounds it up to a power of two):
       a slot is written again only after the send that used it completed */
    uint32_t ring_n = 1;
    if (o.ud && o.test == T_SEND && size >= 8)
        while (ring_n < o.outstanding)
            ring_n *= 2;
    size_t bytes = size * r->n * ring_n;
    unsigned inl = o.inline_size >= 0 ? (unsigned)o.inline_size : rdmax_ctx_query_attr(ctx)->max_inline;
    if (inl > rdmax_ctx_query_attr(ctx)->max_inline)
        inl = rdmax_ctx_query_attr(ctx)->max_inline;
    *mem = NULL;
    *plain = NULL;
    unsigned char *base;
    if (o.test != T_GET && size <= inl) {
        base = *plain = (unsigned char *)malloc(bytes);
        if (!base) {
            fprintf(stderr, "out of memory for %zu bytes\n", bytes);
            return -1;
        }
    } else {
        if (rdmax_mem_alloc(ctx, bytes, RDMAX_ACCESS_LOCAL, mem) != RDMAX_OK) {
            fprintf(stderr, "registering %zu local bytes: %s\n", bytes, last_item(ctx));
            return -1;
        }
        base = (unsigned char *)(*mem)->addr;
    }
    for (unsigned i = 0; i < r->n; i++) {
        r->tx[i].lbuf = base + (size_t)i * ring_n * size;
        if (o.test == T_GET)
            memset(r->tx[i].lbuf, 0, size);
        for (uint32_t j = 0; o.test != T_GET && j < ring_n; j++)
            fill(r->tx[i].lbuf + (size_t)j * size, size, i);
        r->tx[i].ring = ring_n > 1 || (o.ud && o.test == T_SEND && size >= 8) ? r->tx[i].lbuf : NULL;
        r->tx[i].ring_n = ring_n;
    }
    r->lmem = *mem;
    return 0;
}

/* Server's buffer for one size: one region per endpoint; the get test reads the pattern of its index. */
static int rx_buffer(rdmax_ctx *ctx, int test, size_t size, unsigned qps, rdmax_mem **mem)
{
    size_t bytes = size * qps;
    /* its rkey goes to the client in READY, for every data endpoint: open on any endpoint */
    if (rdmax_mem_alloc(ctx, bytes, RDMAX_ACCESS_REMOTE_READ | RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_ANY_ENDPOINT, mem) !=
        RDMAX_OK) {
        fprintf(stderr, "registering %zu bytes to expose: %s\n", bytes, last_item(ctx));
        return -1;
    }
    for (unsigned i = 0; i < qps; i++) {
        unsigned char *b = (unsigned char *)(*mem)->addr + (size_t)i * size;
        if (test == T_GET)
            fill(b, size, 1000 + i);
        else
            memset(b, 0, size);
    }
    return 0;
}

/* Messages counted by the receive callbacks so far. */
static uint64_t rx_count(const struct rx_set *s)
{
    uint64_t n = 0;
    for (unsigned i = 0; i < s->n; i++)
        n += s->rx[i].got;
    return n;
}

/* The sender's last completion does not mean the receiver has polled every message: an RC send completes
   when it is acknowledged, which is before the receiver's rdmax_progress sees it, and a UD send completes
   when it leaves. Progress until the count is reached or a second passes. */
static void rx_settle(rdmax_ctx *ctx, struct rx_set *s, uint64_t ops)
{
    double deadline = now_s() + 1.0;
    unsigned spin = 0;
    while (rx_count(s) < ops && ((++spin & 255) || now_s() < deadline)) {
        rdmax_progress(ctx);
        rx_between(s);
    }
}

/* What the receiver checks after a run; returns the number of problems found (0: all good). */
static int rx_verify(rdmax_ctx *ctx, int test, size_t size, const rdmax_mem *mem, struct rx_set *s, uint64_t ops,
                     uint64_t *msgs)
{
    int bad = 0;
    if (test == T_SEND)
        rx_settle(ctx, s, ops);
    *msgs = 0;
    for (unsigned i = 0; i < s->n; i++) {
        struct rx *r = &s->rx[i];
        *msgs += r->got;
        if (test == T_PUT) {
            long at = check((const unsigned char *)mem->addr + (size_t)i * size, size, i);
            if (at >= 0) {
                fprintf(stderr, "put data of endpoint %u differs at byte %ld of %zu\n", i, at, size);
                bad++;
            }
        } else if (test == T_SEND) {
            if (r->bad_len) {
                fprintf(stderr, "endpoint %u received a message of %zu bytes, expected %zu\n", i, r->bad_len, size);
                bad++;
            }
            if (r->bad_at >= 0) {
                fprintf(stderr, "endpoint %u received a message that differs at byte %ld\n", i, r->bad_at);
                bad++;
            }
        }
    }
    if (test == T_SEND && o.ud && size >= 8) {
        uint64_t missing = 0, dups = 0, late = 0;
        for (unsigned i = 0; i < s->n; i++)
            missing += s->rx[i].missing, dups += s->rx[i].dups, late += s->rx[i].late;
        rdmax_counters c1;
        rdmax_ctx_query_counters(ctx, &c1);
        uint64_t unique = *msgs - dups;
        printf("%s: %zu bytes: datagrams missing %" PRIu64 " (%" PRIu64 " of %" PRIu64 " sent never came), duplicated %"
               PRIu64 ", out of order %" PRIu64 "; rdmax ud.skipped %" PRIu64 ", ud.late %" PRIu64 ", ud.duplicates %"
               PRIu64 "\n", o.loopback ? "loopback" : "server", size, missing, ops > unique ? ops - unique : 0, ops, dups,
               late, c1.ud_skipped - s->c0.ud_skipped, c1.ud_late - s->c0.ud_late,
               c1.ud_duplicates - s->c0.ud_duplicates);
    }
    if (test == T_SEND && *msgs != ops) {
        fprintf(stderr, "%" PRIu64 " messages received, %" PRIu64 " sent%s\n", *msgs, ops,
                o.ud ? " (UD: datagrams lost or duplicated)" : "");
        bad++;
    }
    return bad;
}

static int tx_verify(struct run *r)
{
    if (o.test != T_GET)
        return 0;
    for (unsigned i = 0; i < r->n; i++) {
        long at = check(r->tx[i].lbuf, r->size, 1000 + i);
        if (at >= 0) {
            fprintf(stderr, "get data of endpoint %u differs at byte %ld of %zu\n", i, at, r->size);
            return -1;
        }
    }
    return 0;
}

/* ---- the three modes ---------------------------------------------------------------------------- */
static int server(rdmax_ctx *ctx)
{
    rdmax_listener *l = NULL;
    if (rdmax_listener_create(ctx, NULL, (uint16_t)o.port, &l) != RDMAX_OK) {
        fprintf(stderr, "server: cannot listen on port %u (option -p): %s\n", o.port, last_item(ctx));
        return 1;
    }
    printf("server: device %s, listening on port %u%s\n", rdmax_ctx_query_attr(ctx)->name, o.port, o.cm ? " (rdma_cm)" : "");
    struct mailbox mb;
    memset(&mb, 0, sizeof mb);
    mb.peer = "client";
    rdmax_ep_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.recv_size = CTL_BYTES;
    cd.recv_cb = on_ctl;
    cd.user = &mb;
    rdmax_ep *ctl = NULL;
    rdmax_status st;
    double give_up = now_s() + ACCEPT_TIMEOUT_MS / 1000.0;
    do
        st = rdmax_accept(l, &cd, &ctl, ACCEPT_TIMEOUT_MS);
    while (st != RDMAX_OK && st != RDMAX_ERR_TIMEOUT && now_s() < give_up);
    if (st != RDMAX_OK) {
        fprintf(stderr, "server: no client on port %u: %s\n", o.port, rdmax_status_str(st));
        rdmax_listener_destroy(l);
        return 1;
    }
    int rc = 0;
    static struct rx_set rs;
    for (;;) {
        if (ctl_wait(ctx, ctl, &mb, 0, ACCEPT_TIMEOUT_MS, 0, NULL, NULL)) {
            rc = 1;
            break;
        }
        if (mb.msg.w[1] != C_HELLO && mb.msg.w[1] != C_BYE) {
            fprintf(stderr, "server: control message type %llu where HELLO or BYE belongs\n",
                    (unsigned long long)mb.msg.w[1]);
            rc = 1;
            break;
        }
        if (mb.msg.w[1] == C_BYE)
            break;
        int test = (int)mb.msg.w[2];
        o.ud = (int)mb.msg.w[3];
        size_t size = (size_t)mb.msg.w[4];
        unsigned qps = (unsigned)mb.msg.w[5];
        if (test < T_PUT || test > T_GET || !size || size > rdmax_ctx_query_attr(ctx)->max_msg_sz || !qps || qps > MAX_QPS) {
            fprintf(stderr, "server: client asked for test %d, size %zu, %u endpoints: not supported\n", test, size,
                    qps);
            rc = 1;
            break;
        }
        rdmax_mem *mem = NULL;
        if (rx_buffer(ctx, test, size, qps, &mem)) {
            rc = 1;
            break;
        }
        memset(&rs, 0, sizeof rs);
        rdmax_ctx_query_counters(ctx, &rs.c0);
        uint32_t depth = rx_depth(size);
        uint64_t window = o.ud ? depth - 32 : 0;
        if (ctl_send(ctx, ctl, C_READY, (uintptr_t)mem->addr, mem->rkey, mem->len, window)) {
            rc = 1;
            rdmax_mem_free(mem);
            break;
        }
        for (unsigned i = 0; i < qps && rc == 0; i++) {
            struct rx *r = &rs.rx[i];
            r->index = i;
            r->size = size;
            r->ud = o.ud;
            r->bad_at = -1;
            rdmax_ep_desc d;
            rx_desc(&d, r, test, size, mem);
            if ((st = rdmax_accept(l, &d, &r->ep, TIMEOUT_MS)) != RDMAX_OK) {
                fprintf(stderr, "server: data endpoint %u: %s\n", i, rdmax_status_str(st));
                rc = 1;
            }
            rs.n = i + 1;
        }
        /* The send test's receiver polls (and returns UD credits); put and get leave the CPU to the
           device (rxe runs in the kernel) and sleep until DONE. */
        if (rc == 0 && ctl_wait(ctx, ctl, &mb, C_DONE, 600000, test == T_SEND, rx_between, &rs))
            rc = 1;
        uint64_t msgs = 0;
        int bad = 0;
        if (rc == 0) {
            uint64_t ops = mb.msg.w[2];
            bad = rx_verify(ctx, test, size, mem, &rs, ops, &msgs);
            for (unsigned i = 0; i < rs.n; i++)
                if (flush_ep(rs.rx[i].ep, TIMEOUT_MS) != RDMAX_OK)
                    bad++;
            if (ctl_send(ctx, ctl, C_RESULT, msgs, (uint64_t)bad, 0, 0))
                rc = 1;
            if (test == T_SEND)
                printf("server: %zu bytes: %" PRIu64 " messages received%s\n", size, msgs, bad ? ", CHECK FAILED" : "");
        }
        /* The client destroys its endpoints after RESULT; ours may go now (a flushed RESULT is not
           needed: the client waits for it on the control endpoint, which stays). */
        for (unsigned i = 0; i < rs.n; i++)
            rdmax_ep_destroy(rs.rx[i].ep);
        rs.n = 0;
        rdmax_mem_free(mem);
        if (rc)
            break;
    }
    if (o.profile)
        print_profile(ctx);
    /* No flush: the client has our last message (RESULT) and may be gone after its BYE. */
    rdmax_ep_destroy(ctl);
    rdmax_listener_destroy(l);
    return rc;
}

static rdmax_status connect_retry(rdmax_ctx *ctx, const rdmax_ep_desc *d, rdmax_ep **ep)
{
    double give_up = now_s() + TIMEOUT_MS / 1000.0;
    rdmax_status st;
    quiet_log = 1;
    while ((st = rdmax_connect(ctx, o.host, (uint16_t)o.port, d, ep, TIMEOUT_MS)) == RDMAX_ERR_CONNECT &&
           now_s() < give_up) {
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    quiet_log = 0;
    if (st != RDMAX_OK)
        fprintf(stderr, "client: cannot connect to %s port %u: %s (%s)\n", o.host, o.port, rdmax_status_str(st),
                rdmax_ctx_query_last_error(ctx));  /* hidden while retrying: printed once, here */
    return st;
}

/* Client and loopback: one size. */
static int one_size(rdmax_ctx *ctx, rdmax_ep *ctl, struct mailbox *mb, size_t size, struct row *row)
{
    static struct run r;
    static struct rx_set rs;
    memset(&r, 0, sizeof r);
    memset(&rs, 0, sizeof rs);
    rdmax_ctx_query_counters(ctx, &rs.c0);
    r.ctx = ctx;
    r.n = o.qps;
    r.size = size;
    rdmax_mem *lmem = NULL, *smem = NULL;
    unsigned char *plain = NULL;
    int rc = 0;
    uint64_t raddr = 0, window = 0;
    uint32_t rkey = 0;
    if (tx_buffers(ctx, &r, size, &lmem, &plain))
        return -1;
    if (o.loopback) {
        if (rx_buffer(ctx, o.test, size, o.qps, &smem)) {
            rc = -1;
            goto out;
        }
        raddr = (uintptr_t)smem->addr;
        rkey = smem->rkey;
        window = o.ud ? rx_depth(size) - 32 : 0;
        for (unsigned i = 0; i < o.qps; i++) {
            struct rx *x = &rs.rx[i];
            x->index = i;
            x->size = size;
            x->ud = o.ud;
            x->bad_at = -1;
            rdmax_ep_desc dt, dr;
            tx_desc(&dt, &r.tx[i]);
            rx_desc(&dr, x, o.test, size, smem);
            rdmax_conn_record it, ir;
            if (rdmax_ep_create(ctx, &dt, &r.tx[i].ep) || rdmax_ep_create(ctx, &dr, &x->ep)) {
                fprintf(stderr, "loopback endpoints: %s\n", last_item(ctx));
                rc = -1;
                goto out;
            }
            rs.n = i + 1;
            rdmax_ep_query_record(r.tx[i].ep, &it);
            rdmax_ep_query_record(x->ep, &ir);
            if (rdmax_ep_connect_record(r.tx[i].ep, &ir) || rdmax_ep_connect_record(x->ep, &it)) {
                fprintf(stderr, "loopback connect: %s\n", last_item(ctx));
                rc = -1;
                goto out;
            }
        }
        r.peer_rx = &rs;
    } else {
        if (ctl_send(ctx, ctl, C_HELLO, (uint64_t)o.test, (uint64_t)o.ud, size, o.qps) ||
            ctl_wait(ctx, ctl, mb, C_READY, TIMEOUT_MS, 1, NULL, NULL)) {
            rc = -1;
            goto out;
        }
        raddr = mb->msg.w[2];
        rkey = (uint32_t)mb->msg.w[3];
        window = mb->msg.w[5];
        for (unsigned i = 0; i < o.qps; i++) {
            rdmax_ep_desc dt;
            tx_desc(&dt, &r.tx[i]);
            if (connect_retry(ctx, &dt, &r.tx[i].ep) != RDMAX_OK) {
                rc = -1;
                goto out;
            }
        }
    }
    for (unsigned i = 0; i < o.qps; i++) {
        r.tx[i].raddr = raddr + (uint64_t)i * size;
        r.tx[i].rkey = rkey;
        r.tx[i].credit = 0;
    }
    r.ud_window = window;
    rc = run_size(&r, row);
    if (rc == 0 && tx_verify(&r))
        rc = -1;
    if (rc == 0) {
        uint64_t msgs = 0;
        int bad;
        if (o.loopback) {
            bad = rx_verify(ctx, o.test, size, smem, &rs, row->ops, &msgs);
        } else {
            if (ctl_send(ctx, ctl, C_DONE, row->ops, 0, 0, 0) || ctl_wait(ctx, ctl, mb, C_RESULT, TIMEOUT_MS, 1, NULL, NULL)) {
                rc = -1;
                goto out;
            }
            msgs = mb->msg.w[2];
            bad = (int)mb->msg.w[3];
            if (bad)
                fprintf(stderr, "server reports %d problem(s) with the data it received (see its output)\n", bad);
        }
        if (bad)
            rc = -1;
        (void)msgs;
    }
out:
    for (unsigned i = 0; i < o.qps; i++)
        rdmax_ep_destroy(r.tx[i].ep);
    for (unsigned i = 0; i < rs.n; i++)
        rdmax_ep_destroy(rs.rx[i].ep);
    rdmax_mem_free(lmem);
    rdmax_mem_free(smem);
    free(plain);
    return rc;
}

static int client(rdmax_ctx *ctx)
{
    const rdmax_dev_attr *a = rdmax_ctx_query_attr(ctx);
    size_t sizes[32];
    int n = 0;
    size_t top = o.ud ? a->mtu_bytes : (a->max_msg_sz < (8u << 20) ? (size_t)a->max_msg_sz : (size_t)8 << 20);
    if (o.all)
        for (size_t s = 2; s <= top; s *= 2)
            sizes[n++] = s;
    else
        sizes[n++] = o.size;
    if (!o.all && o.size > top) {
        fprintf(stderr, "option -s: %zu bytes is more than %s (%zu)\n", o.size,
                o.ud ? "one UD datagram (the path MTU)" : "the device's largest message", top);
        return 1;
    }
    struct mailbox mb;
    memset(&mb, 0, sizeof mb);
    mb.peer = "server";
    rdmax_ep *ctl = NULL;
    if (!o.loopback) {
        rdmax_ep_desc cd;
        memset(&cd, 0, sizeof cd);
        cd.recv_size = CTL_BYTES;
        cd.recv_cb = on_ctl;
        cd.user = &mb;
        if (connect_retry(ctx, &cd, &ctl) != RDMAX_OK)
            return 1;
    }
    unsigned inl = o.inline_size >= 0 ? (unsigned)o.inline_size : a->max_inline;
    printf("---------------------------------------------------------------------------------------\n");
    unsigned sig = o.cq_mod ? o.cq_mod : 64;
    if (sig > o.outstanding / 2)
        sig = o.outstanding / 2;
    printf(" rdmax_bw %s %s: device %s, %u endpoint(s), post list %u, signal interval %u, %u outstanding, "
           "inline up to %u B\n",
           o.ud ? "UD" : "RC", test_names[o.test], a->name, o.qps, o.post_list, sig, o.outstanding,
           o.test == T_GET ? 0 : inl);
    print_head();
    struct row rows[32];
    int rc = 0, k;
    for (k = 0; k < n; k++) {
        if (one_size(ctx, ctl, &mb, sizes[k], &rows[k])) {
            rc = 1;
            break;
        }
        print_row(&rows[k]);
    }
    printf("---------------------------------------------------------------------------------------\n");
    if (ctl) {
        if (ctl_send(ctx, ctl, C_BYE, 0, 0, 0, 0))
            rc = 1;
        rdmax_ep_destroy(ctl);
    }
    if (write_files(rows, k))
        rc = 1;
    if (o.profile)
        print_profile(ctx);
    return rc;
}

/* ---- options ------------------------------------------------------------------------------------ */
static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [options] [HOST]        (no HOST: server; HOST: client; --loopback: both)\n"
            "The client chooses the test; a server needs only -p, -d and -x.\n"
            "  -t, --test=OP          put|send|get                                   [put]\n"
            "  -c, --connection=TYPE  RC|UD (UD: send only, sizes up to the path MTU) [RC]\n"
            "  -s, --size=BYTES       message size (K and M suffixes)                [%d]\n"
            "  -a, --all              all sizes 2 B .. 8 MiB (UD: .. MTU), powers of two\n"
            "  -q, --qps=N            data endpoints, served round-robin             [1]\n"
            "  -l, --post_list=N      operations chained into one post (inline puts: rdmax_put_list; else rdmax_batch) [%d]\n"
            "  -Q, --cq-mod=N         one signaled operation every N (signal_interval) [64, at most -O/2]\n"
            "  -O, --outstanding=N    send-queue depth: operations in flight per endpoint [%d]\n"
            "  -n, --iters=N          operations per endpoint                        [%d]\n"
            "  -D, --duration=SECONDS run for this long instead of -n\n"
            "  -I, --inline=BYTES     largest inline put/send (0: never)            [device maximum]\n"
            "      --report_gbits     bandwidth in Gbit/s (10^9) instead of MiB/s\n"
            "  -p, --port=PORT        connection port (TCP; rdma_cm's with --cm)     [%d]\n"
            "  -d, --ib-dev=NAME      RDMA device                                    [$RDMAX_DEVICE or first active]\n"
            "  -x, --gid-index=N      GID index                                      [RoCE v2 IPv4-mapped]\n"
            "      --cm               RC: connections through rdma_cm (librdmacm), on server and client\n"
            "      --loopback         both ends in this process\n"
            "      --csv=FILE         also write the rows as CSV\n"
            "      --json=FILE        also write the rows as JSON\n"
            "      --profile          print rdmax's counters (post calls, completions...) after the run\n"
            "  -h, --help             this text\n",
            prog, DEFAULT_SIZE, DEFAULT_POST_LIST, DEFAULT_OUTSTANDING, DEFAULT_ITERS, DEFAULT_PORT);
}

static int parse_num(const char *opt, const char *v, unsigned long long min, unsigned long long max,
                     unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 0);
    if (errno || end == v || *v == '-') {
        fprintf(stderr, "option %s: '%s' is not a number\n", opt, v);
        return -1;
    }
    if (*end == 'K' || *end == 'k')
        x <<= 10, end++;
    else if (*end == 'M' || *end == 'm')
        x <<= 20, end++;
    if (*end) {
        fprintf(stderr, "option %s: '%s' is not a number\n", opt, v);
        return -1;
    }
    if (x < min || x > max) {
        fprintf(stderr, "option %s: %llu is outside %llu..%llu\n", opt, x, min, max);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse(int argc, char **argv)
{
    static const struct option lo[] = {
        {"test", required_argument, 0, 't'},        {"connection", required_argument, 0, 'c'},
        {"size", required_argument, 0, 's'},        {"all", no_argument, 0, 'a'},
        {"qps", required_argument, 0, 'q'},         {"qp", required_argument, 0, 'q'},
        {"post_list", required_argument, 0, 'l'},   {"cq-mod", required_argument, 0, 'Q'},
        {"outstanding", required_argument, 0, 'O'}, {"iters", required_argument, 0, 'n'},
        {"duration", required_argument, 0, 'D'},    {"inline", required_argument, 0, 'I'},
        {"report_gbits", no_argument, 0, 'G'},      {"port", required_argument, 0, 'p'},
        {"ib-dev", required_argument, 0, 'd'},      {"device", required_argument, 0, 'd'},
        {"gid-index", required_argument, 0, 'x'},   {"loopback", no_argument, 0, 'L'},
        {"csv", required_argument, 0, 'C'},         {"json", required_argument, 0, 'J'},
        {"profile", no_argument, 0, 'P'},           {"help", no_argument, 0, 'h'},
        {"cm", no_argument, 0, 'M'},                {0, 0, 0, 0}};
    memset(&o, 0, sizeof o);
    o.size = DEFAULT_SIZE;
    o.qps = 1;
    o.post_list = DEFAULT_POST_LIST;
    o.outstanding = DEFAULT_OUTSTANDING;
    o.iters = DEFAULT_ITERS;
    o.inline_size = -1;
    o.port = DEFAULT_PORT;
    o.gid_index = -1;
    int c, iters_set = 0;
    unsigned long long v;
    while ((c = getopt_long(argc, argv, "t:c:s:aq:l:Q:O:n:D:I:p:d:x:h", lo, NULL)) != -1) {
        switch (c) {
        case 't': {
            int k;
            for (k = 0; k < 3 && strcmp(optarg, test_names[k]); k++)
                ;
            if (k == 3) {
                fprintf(stderr, "option -t: unknown test '%s' (put|send|get)\n", optarg);
                return -1;
            }
            o.test = (enum test)k;
            break;
        }
        case 'c':
            if (!strcmp(optarg, "RC") || !strcmp(optarg, "rc"))
                o.ud = 0;
            else if (!strcmp(optarg, "UD") || !strcmp(optarg, "ud"))
                o.ud = 1;
            else {
                fprintf(stderr, "option -c: unknown connection type '%s' (RC|UD)\n", optarg);
                return -1;
            }
            break;
        case 's': if (parse_num("-s", optarg, 1, 8u << 20, &v)) return -1; o.size = v; break;
        case 'a': o.all = 1; break;
        case 'q': if (parse_num("-q", optarg, 1, MAX_QPS, &v)) return -1; o.qps = (unsigned)v; break;
        case 'l': if (parse_num("-l", optarg, 1, 4096, &v)) return -1; o.post_list = (unsigned)v; break;
        case 'Q': if (parse_num("-Q", optarg, 1, 4096, &v)) return -1; o.cq_mod = (unsigned)v; break;
        case 'O': if (parse_num("-O", optarg, 2, 16384, &v)) return -1; o.outstanding = (unsigned)v; break;
        case 'n': if (parse_num("-n", optarg, 1, 1ull << 40, &v)) return -1; o.iters = v; iters_set = 1; break;
        case 'D': {
            char *end;
            o.duration = strtod(optarg, &end);
            if (*end || !(o.duration > 0) || o.duration > 86400) {
                fprintf(stderr, "option -D: '%s' is not a number of seconds in (0, 86400]\n", optarg);
                return -1;
            }
            break;
        }
        case 'I': if (parse_num("-I", optarg, 0, 4096, &v)) return -1; o.inline_size = (int)v; break;
        case 'G': o.gbits = 1; break;
        case 'p': if (parse_num("-p", optarg, 1, 65535, &v)) return -1; o.port = (unsigned)v; break;
        case 'd': o.device = optarg; break;
        case 'x': if (parse_num("-x", optarg, 0, 255, &v)) return -1; o.gid_index = (int)v; break;
        case 'L': o.loopback = 1; break;
        case 'C': o.csv = optarg; break;
        case 'J': o.json = optarg; break;
        case 'P': o.profile = 1; break;
        case 'M': o.cm = 1; break;
        case 'h': usage(stdout, argv[0]); exit(0);
        default: usage(stderr, argv[0]); return -1;
        }
    }
    if (optind < argc)
        o.host = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, "unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (o.host && o.loopback) {
        fprintf(stderr, "--loopback and a HOST exclude each other\n");
        return -1;
    }
    if (o.cm && (o.ud || o.loopback)) {
        fprintf(stderr, "option --cm: rdma_cm connects RC endpoints of a server and a client (not -c UD, not "
                "--loopback)\n");
        return -1;
    }
    if (o.ud && o.test != T_SEND) {
        fprintf(stderr, "option -c UD: UD has no RDMA; only -t send\n");
        return -1;
    }
    if (o.duration > 0 && iters_set) {
        fprintf(stderr, "options -D and -n exclude each other\n");
        return -1;
    }
    if (o.cq_mod && o.cq_mod > o.outstanding / 2)
        fprintf(stderr, "option -Q: %u is more than half of -O %u; rdmax uses %u\n", o.cq_mod, o.outstanding,
                o.outstanding / 2);
    return 0;
}

int main(int argc, char **argv)
{
    if (parse(argc, argv))
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_skip = getenv("RDMAX_BW_TEST_SKIP") && !strcmp(getenv("RDMAX_BW_TEST_SKIP"), "1");
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.device = o.device;
    if (o.gid_index >= 0) {
        cd.gid_index_set = true;
        cd.gid_index = o.gid_index;
    }
    cd.cq_depth = cq_depth_for(o.loopback ? 2 * o.qps : o.host ? o.qps : MAX_QPS);
    cd.logger.func = on_log;
    cd.conn_setup = o.cm ? RDMAX_SETUP_CM : RDMAX_SETUP_TCP;
    rdmax_ctx *ctx;
    if (rdmax_ctx_create(&cd, &ctx) != RDMAX_OK) {
        fprintf(stderr, "cannot open the RDMA device%s%s (options -d, -x)\n", o.device ? " " : "",
                o.device ? o.device : "");
        return 1;
    }
    int rc = o.host || o.loopback ? client(ctx) : server(ctx);
    rdmax_mem_free(ctl_mem);
    rdmax_ctx_destroy(ctx);
    if (rc)
        fprintf(stderr, "%s: FAILED\n", argv[0]);
    return rc;
}
