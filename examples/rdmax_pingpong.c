/* rdmax_pingpong - latency of one operation between two endpoints, printed as perftest prints it.

   Built once per transport: rdmax_pingpong_rc (-t send|put|get|fadd|cswap) and rdmax_pingpong_ud
   (-t send, or multicast with -g GROUP). Start a server, then a client that names the server's host:

       rdmax_pingpong_rc -t put -s 64              (server)
       rdmax_pingpong_rc -t put -s 64 192.0.2.1    (client)
       rdmax_pingpong_rc -t put -s 64 --loopback   (both ends in one process)
       rdmax_pingpong_rc --own-pool ...            (RC: receive buffers of the endpoint's own, not the
                                                    shared receive queue: compare the latency of both)
       rdmax_pingpong_rc --cm [-p PORT] [HOST]     (RC set up through rdma_cm instead of rdmax's TCP record;
                                                    HOST may be IPv4 or IPv6)
       rdmax_pingpong_rc --no-check ...            (payloads neither filled nor checked: perftest's loop)

   send and put are ping-pongs: the client sends (writes) a message, the server answers with one of the same
   size, and half the round trip is reported, as ib_send_lat and ib_write_lat do. get, fadd and cswap are
   one-sided: the server only exposes memory and the full round trip is reported, as ib_read_lat and
   ib_atomic_lat do. Every iteration's payload is checked by whoever receives it; a mismatch stops the run
   with a non-zero exit. Payloads are filled before their turn and checked after the answer (alternating
   halves of each buffer), so the round trip holds only what perftest's does; --no-check leaves them out
   (only the byte a put's poller waits for, and UD's number, change), so that the whole loop does what
   perftest's does, for instruction counts beside it. Multicast (-g, UD only): the
   client sends each message to the group, every server joined to it checks it, and one server (the one
   the client connected to) answers by unicast.
   UD datagrams are numbered (the first 8 bytes, or below 8 bytes the pattern's tag byte): each end prints
   how many were missing, duplicated or out of order, beside rdmax's own ud.skipped, ud.late, ud.duplicates.
*/
#ifndef RDMAX_PINGPONG_TRANSPORT_UD
#define RDMAX_TRANSPORT_RC
#else
#define RDMAX_TRANSPORT_UD
#endif
#define RDMAX_IMPLEMENTATION
#include "../rdmax.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_PORT 18515
#define DEFAULT_ITERS 1000
#define DEFAULT_WARMUP 100
#define TIMEOUT_MS 10000

enum test { T_SEND, T_PUT, T_GET, T_FADD, T_CSWAP };
/* What failed, in one sentence: the logger has already printed the details (device, call, errno). */
static const char *last_item(const rdmax_ctx *ctx)
{
    return rdmax_log_item_str(rdmax_ctx_query_last_error_item(ctx));
}

static const char *const test_names[] = {"send", "put", "get", "fadd", "cswap"};

struct opts {
    enum test test;
    size_t size;
    int all;
    unsigned iters, warmup;
    int inline_size;  /* -1: default */
    unsigned port;
    const char *device;
    int gid_index;
    const char *host;
    int loopback;
    const char *csv, *json, *group;
    int profile;
    int cm;
    int own_pool;
    int no_check;     /* --no-check: payloads neither filled nor checked per iteration */
};

struct row {
    size_t bytes;
    unsigned iters;
    double min, max, typical, avg, stdev, p99, p999;
};

/* One end of the conversation: its endpoint, its exposed buffer and what it last received. */
struct side {
    rdmax_ep *ep;
    rdmax_ep *tx;            /* the client's pings go here: ep, or a multicast endpoint (-g) */
    rdmax_mem *mem;          /* exposed buffer: put target, get source, atomic target */
    unsigned char *buf;
    rdmax_mem *smem;         /* send / local staging buffer */
    unsigned char *sbuf;
    size_t size;
    size_t half;             /* buf and sbuf are two halves of this many bytes each: iteration `tag` uses
                                half tag & 1, so a payload is filled before its turn and checked after
                                the answer, off the round trip, without overwriting one in flight */
    uint64_t ready;          /* sbuf's half ready & 1 holds the payload of this tag (UINT64_MAX: none) */
    uint64_t got;            /* messages received */
    uint64_t expect_tag;     /* the tag the next message must carry */
    int bad;                 /* a payload check failed */
    int is_server;
    int reply;               /* server: answer each message */
    uint64_t t_arrive;       /* when the last answer was seen, before its payload check (ticks()) */
    uint64_t reply_limit;    /* ... up to this many; the client's final message is not answered */
    uint64_t seen;           /* UD: bit k set: datagram expect_tag - 1 - k arrived (tells late from twice) */
};

/* UD: datagrams are numbered (the iteration's tag; in the first 8 bytes from 8 bytes on, else its low byte
   in the pattern) and each end counts, over the whole run, what did not arrive in order. */
#ifdef RDMAX_TRANSPORT_UD
static uint64_t g_ud_missing, g_ud_dups, g_ud_late;
static int g_dup_first;  /* env RDMAX_PINGPONG_TEST_DUPLICATE=1: send the first ping twice (a test control) */
#endif

static const struct opts *g_opt;

static double mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Timestamps come from the cycle counter, calibrated once against CLOCK_MONOTONIC, as perftest does:
   where the kernel's clock source is not the TSC (the soft-RoCE VM uses HPET) a clock_gettime is a system
   call of about a microsecond, which would be measured as latency. */
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static double g_ticks_per_us;
static void clock_init(void)
{
    double m0 = mono_us();
    unsigned long long t0 = __rdtsc();
    while (mono_us() - m0 < 20000)
        ;
    g_ticks_per_us = (double)(__rdtsc() - t0) / (mono_us() - m0);
}
static uint64_t ticks(void)
{
    return __rdtsc();
}
#else
static double g_ticks_per_us = 1000;
static void clock_init(void) {}
static uint64_t ticks(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
#endif
/* Samples are kept in ticks and converted once, in stats(): no division per iteration. */
static double now_us(void)
{
    return (double)ticks() / g_ticks_per_us;
}

/* Payload of iteration `tag`: a fixed base pattern XOR the tag's low byte in every byte, so consecutive
   iterations differ in every byte (the poller waits for the last one) and filling and checking run a
   word at a time: the check is part of every iteration, and a byte loop with a division in it made 4 KiB
   ping-pongs measure the check (~20 us under emulation) rather than the transport. */
#define PP_MAX (8u << 20)
static unsigned char *g_base;  /* PP_MAX + 8 bytes of the base pattern */

static void pattern_init(void)
{
    g_base = (unsigned char *)malloc(PP_MAX + 8);
    if (!g_base) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t j = 0; j < PP_MAX + 8; j++)
        g_base[j] = (unsigned char)((j * 131 + (j >> 8) * 7 + 1) & 0xff);
}

static unsigned char pattern(uint64_t tag, size_t j)
{
    return (unsigned char)(g_base[j] ^ (unsigned char)tag);
}

static void fill(unsigned char *b, size_t n, uint64_t tag)
{
    uint64_t t = (uint64_t)(unsigned char)tag * 0x0101010101010101ull, w;
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        memcpy(&w, g_base + j, 8);
        w ^= t;
        memcpy(b + j, &w, 8);
    }
    for (; j < n; j++)
        b[j] = pattern(tag, j);
}

/* b: n bytes of the payload from its byte `off` on. */
static int check(const unsigned char *b, size_t n, uint64_t tag, size_t off)
{
    const unsigned char *base = g_base + off;
    uint64_t t = (uint64_t)(unsigned char)tag * 0x0101010101010101ull, w, x, diff = 0;
    size_t j = 0;
    for (; j + 8 <= n; j += 8) {
        memcpy(&w, b + j, 8);
        memcpy(&x, base + j, 8);
        diff |= w ^ x ^ t;
    }
    for (; j < n; j++)
        diff |= (uint64_t)(b[j] ^ pattern(tag, off + j));
    if (rdmax_likely(diff == 0))
        return 0;
    for (j = 0; j < n && b[j] == pattern(tag, off + j); j++)
        ;
    fprintf(stderr, "payload mismatch at byte %zu of %zu (iteration %llu): got 0x%02x, expected 0x%02x\n",
            off + j, off + n, (unsigned long long)tag, b[j], pattern(tag, off + j));
    return -1;
}

/* The sender's number in the datagram: a store over the pattern's first word. */
static void stamp(unsigned char *b, size_t n, uint64_t tag)
{
#ifdef RDMAX_TRANSPORT_UD
    if (n >= 8)
        memcpy(b, &tag, 8);
#else
    (void)b, (void)n, (void)tag;
#endif
}

#ifdef RDMAX_TRANSPORT_UD
/* The datagram's number; below 8 bytes only its low byte came, taken nearest to `expect`. */
static uint64_t datagram_seq(const unsigned char *b, size_t n, uint64_t expect)
{
    uint64_t seq;
    if (n >= 8) {
        memcpy(&seq, b, 8);
        return seq;
    }
    if (n == 0)
        return expect;
    unsigned char low = (unsigned char)(b[0] ^ g_base[0]);
    return expect + (uint64_t)(int64_t)(signed char)(unsigned char)(low - (unsigned char)expect);
}

/* Out of the fast path: a datagram that is not the next one. Returns 1 if it is new (later than
   expected: the ones between are missing), 0 if it came late or twice. */
static int seq_slow(struct side *s, uint64_t seq)
{
    uint64_t next = s->expect_tag;
    if (seq > next) {
        uint64_t gap = seq - next;
        g_ud_missing += gap;
        s->seen = gap + 1 >= 64 ? 0 : s->seen << (gap + 1);
        s->seen |= 1;
        s->expect_tag = seq + 1;
        return 1;
    }
    uint64_t k = next - 1 - seq;
    if (k < 64 && (s->seen >> k & 1)) {
        g_ud_dups++;
    } else {  /* counted missing when a later one came; older than the window counts as late too */
        g_ud_late++;
        if (g_ud_missing)
            g_ud_missing--;
        if (k < 64)
            s->seen |= 1ull << k;
    }
    return 0;
}
#endif

/* The clock is read only after a refusal: a post that goes through (the usual case) costs no clock
   read on the critical path (under emulation one costs about a microsecond). The round trip's helpers
   (post_retry, do_put, put_arrived, wait_reply) are RDMAX_INLINE: the client's iteration is one loop
   with no call frames of the example's own, as perftest's is. */
RDMAX_INLINE int post_retry(struct side *s, int (*post)(struct side *, uint64_t), uint64_t tag)
{
    int st = post(s, tag);
    if (rdmax_likely(st != RDMAX_ERR_NO_RESOURCE))
        return st;
    double deadline = now_us() + TIMEOUT_MS * 1000.0;
    for (;;) {
        rdmax_progress(rdmax_ep_query_ctx(s->ep));
        if ((st = post(s, tag)) != RDMAX_ERR_NO_RESOURCE)
            return st;
        if (now_us() > deadline)
            return RDMAX_ERR_TIMEOUT;
    }
}

/* The payload of iteration `tag` into its half of sbuf, ahead of its turn (perftest sends whatever its
   buffer holds; filling 4 KiB on the round trip costs microseconds under emulation). The half is free:
   the message that used it last, two iterations ago, has been answered. RDMAX_INLINE: the client fills
   every iteration's payload (with --no-check one byte, as perftest's loop writes one), no call for it. */
RDMAX_INLINE void prefill(struct side *s, uint64_t tag)
{
    unsigned char *b = s->sbuf + (tag & 1) * s->half;
    if (g_opt->no_check) {  /* the byte put_arrived waits for; UD's number below 8 bytes */
        b[s->size - 1] = pattern(tag, s->size - 1);
#ifdef RDMAX_TRANSPORT_UD
        b[0] = pattern(tag, 0);
#endif
    } else
        fill(b, s->size, tag);
    stamp(b, s->size, tag);
    s->ready = tag;
}

static int do_send(struct side *s, uint64_t tag)
{
    if (rdmax_unlikely(s->ready != tag))  /* UD: a lost ping moved the tag on */
        prefill(s, tag);
    int st = rdmax_send(s->tx ? s->tx : s->ep, s->sbuf + (tag & 1) * s->half, s->size, s->smem, NULL);
    return st == RDMAX_INPROGRESS ? RDMAX_OK : st;
}

static void on_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    struct side *s = (struct side *)user;
    (void)ep;
    if (!s->is_server)  /* the client's timestamp; the server answers without a clock read */
        s->t_arrive = ticks();
    uint64_t tag = s->expect_tag;
#ifdef RDMAX_TRANSPORT_UD
    uint64_t seq = datagram_seq((const unsigned char *)data, len, tag);
    if (rdmax_unlikely(seq != tag)) {
        if (!seq_slow(s, seq)) {  /* late or twice: checked, not answered, not counted as an answer */
            if (len >= 8 && len == s->size && !g_opt->no_check && check((const unsigned char *)data + 8, len - 8, seq, 8))
                s->bad = 1;
            return;
        }
        tag = seq;
    } else {
        s->expect_tag++;
        s->seen = s->seen << 1 | 1;
    }
#else
    s->expect_tag++;
#endif
    s->got++;
    /* The server answers first (its payload filled ahead), then fills the next answer and checks: the
       check is done on every message, but not while the client waits; the client's check comes after
       its timestamp. */
    if (s->is_server && s->reply && s->got <= s->reply_limit) {
        if (post_retry(s, do_send, tag) != RDMAX_OK)
            s->bad = 1;
        prefill(s, tag + 1);
    }
#ifdef RDMAX_TRANSPORT_UD
    size_t from = len >= 8 ? 8 : 0;  /* the number is checked above */
#else
    size_t from = 0;
#endif
    if (len != s->size || (!g_opt->no_check && check((const unsigned char *)data + from, len - from, tag, from))) {
        if (len != s->size)
            fprintf(stderr, "message of %zu bytes, expected %zu\n", len, s->size);
        s->bad = 1;
    }
}

#ifdef RDMAX_TRANSPORT_RC
/* Into the peer's half tag & 1: the peer checks a put after answering it, while our next put goes to
   the other half. */
RDMAX_INLINE int do_put(struct side *s, uint64_t tag)
{
    if (rdmax_unlikely(s->ready != tag))
        prefill(s, tag);
    const rdmax_rbuf *r = rdmax_ep_query_remote(s->ep, 0);  /* every side exposes s->mem (ep_desc_for) */
    size_t off = (tag & 1) * s->half;
    int st = rdmax_put(s->ep, s->sbuf + off, s->size, s->smem, r->addr + off, r->rkey, NULL);
    return st == RDMAX_INPROGRESS ? RDMAX_OK : st;
}

/* A put has landed when the last byte of our exposed half carries the tag's pattern. */
RDMAX_INLINE int put_arrived(struct side *s, uint64_t tag)
{
    volatile unsigned char *last = s->buf + (tag & 1) * s->half + s->size - 1;
    if (*last != pattern(tag, s->size - 1))
        return 0;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (!s->is_server)
        s->t_arrive = ticks();
    return 1;
}

static void put_check(struct side *s, uint64_t tag)
{
    if (!g_opt->no_check && check(s->buf + (tag & 1) * s->half, s->size, tag, 0))
        s->bad = 1;
}
#endif

/* The client's last message, with a completion: when it completes the server has it and may leave, so
   nothing may be posted after it (a flush would race with the server's exit). */
static int send_final(struct side *s, uint64_t tag)
{
    rdmax_comp c;
    memset(&c, 0, sizeof c);
    prefill(s, tag);
    unsigned char *b = s->sbuf + (tag & 1) * s->half;
    rdmax_status st;
    double deadline = now_us() + TIMEOUT_MS * 1000.0;
    while ((st = rdmax_send(s->ep, b, s->size, s->smem, &c)) == RDMAX_ERR_NO_RESOURCE && now_us() < deadline)
        rdmax_progress(rdmax_ep_query_ctx(s->ep));
    if (st == RDMAX_OK)
        return 0;
    while (st == RDMAX_INPROGRESS && !c.done && now_us() < deadline)
        rdmax_progress(rdmax_ep_query_ctx(s->ep));
    if (st != RDMAX_INPROGRESS || !c.done || c.status != RDMAX_OK) {
        fprintf(stderr, "final message to the server failed: %s\n",
                rdmax_status_str(st != RDMAX_INPROGRESS ? st : c.done ? c.status : RDMAX_ERR_TIMEOUT));
        return -1;
    }
    return 0;
}

/* The server's part of one iteration when both ends share this thread (--loopback). */
static void serve_step(struct side *srv)
{
#ifdef RDMAX_TRANSPORT_RC
    if (g_opt->test == T_PUT && put_arrived(srv, srv->expect_tag)) {
        /* answer first: the client's next put goes to the other half, and the one after it comes only
           once this answer arrived, after the check */
        if (post_retry(srv, do_put, srv->expect_tag) != RDMAX_OK)
            srv->bad = 1;
        prefill(srv, srv->expect_tag + 1);
        put_check(srv, srv->expect_tag);
        srv->expect_tag++;
    }
#else
    (void)srv;
#endif
}

/* Errors and the deadline are looked at every 4096 spins only: a clock read per spin would add to the
   latency being measured (under emulation a clock read costs about a microsecond). */
static int spin_check(rdmax_ep *ep, unsigned spin, double *deadline, const char *what)
{
    if (spin & 4095)
        return 0;
    if (rdmax_ep_query_error(ep) != RDMAX_OK) {
        fprintf(stderr, "%s: endpoint failed: %s\n", what, rdmax_status_str(rdmax_ep_query_error(ep)));
        return -1;
    }
    double now = now_us();
    if (*deadline == 0)
        *deadline = now + TIMEOUT_MS * 1000.0;
    else if (now > *deadline) {
        fprintf(stderr, "%s: nothing within %d ms (peer gone or message lost)\n", what, TIMEOUT_MS);
        return -1;
    }
    return 0;
}

/* Wait for the answer to iteration `tag`; on loopback also play the server. */
RDMAX_INLINE int wait_reply(struct side *cli, struct side *srv, uint64_t tag)
{
    double deadline = 0;
    for (unsigned spin = 1;; spin++) {
        rdmax_progress(rdmax_ep_query_ctx(cli->ep));
        if (srv)
            serve_step(srv);
        if (cli->bad || (srv && srv->bad))
            return -1;
#ifdef RDMAX_TRANSPORT_RC
        if (g_opt->test == T_PUT) {
            if (put_arrived(cli, tag)) {
                put_check(cli, tag);
                return cli->bad ? -1 : 0;
            }
        } else
#endif
        if (cli->got > tag)
            return 0;
        if (!(spin & 4095) && spin_check(cli->ep, spin, &deadline, "waiting for the answer"))
            return -1;
    }
}

#ifdef RDMAX_TRANSPORT_RC
/* One-sided operations: post and wait for the completion; check what came back. */
static int one_sided(struct side *cli, uint64_t i)
{
    rdmax_comp c;
    memset(&c, 0, sizeof c);
    rdmax_status st;
    uint64_t *res = (uint64_t *)(void *)cli->sbuf;
    const rdmax_rbuf *r = rdmax_ep_query_remote(cli->ep, 0);  /* every side exposes s->mem (ep_desc_for) */
    uint64_t raddr = r->addr;
    uint32_t rkey = r->rkey;
    double deadline = now_us() + TIMEOUT_MS * 1000.0;
    do {
        switch (g_opt->test) {
        case T_GET:
            cli->sbuf[cli->size - 1] = 0;
            st = rdmax_get(cli->ep, cli->sbuf, cli->size, cli->smem, raddr, rkey, &c);
            break;
        case T_FADD:
            st = rdmax_fadd(cli->ep, res, cli->smem, raddr, rkey, 1, &c);
            break;
        default:
            st = rdmax_cswap(cli->ep, res, cli->smem, raddr, rkey, i, i + 1, &c);
            break;
        }
        if (st == RDMAX_ERR_NO_RESOURCE)
            rdmax_progress(rdmax_ep_query_ctx(cli->ep));
    } while (st == RDMAX_ERR_NO_RESOURCE && now_us() < deadline);
    if (st != RDMAX_INPROGRESS) {
        fprintf(stderr, "%s failed: %s\n", test_names[g_opt->test], rdmax_status_str(st));
        return -1;
    }
    while (!c.done) {
        rdmax_progress(rdmax_ep_query_ctx(cli->ep));
        if (now_us() > deadline) {
            fprintf(stderr, "%s: no completion within %d ms\n", test_names[g_opt->test], TIMEOUT_MS);
            return -1;
        }
    }
    cli->t_arrive = ticks();
    if (c.status != RDMAX_OK) {
        fprintf(stderr, "%s completed with: %s\n", test_names[g_opt->test], rdmax_status_str(c.status));
        return -1;
    }
    if (g_opt->test == T_GET)
        return g_opt->no_check ? 0 : check(cli->sbuf, cli->size, 0, 0);
    if (*res != i) {  /* the server's counter starts at 0 and only we change it */
        fprintf(stderr, "%s returned %llu, expected %llu\n", test_names[g_opt->test], (unsigned long long)*res,
                (unsigned long long)i);
        return -1;
    }
    return 0;
}
#endif

/* Sorts n samples (ticks) 16 bits at a time, low to high, as many as the largest sample has (two
   passes up to 1.6 s at 2.6 GHz): a few instructions per sample and pass, where qsort's comparator
   calls cost ten times that. tmp: room for n more. Not inlined: bench/cg_rt.pl finds it by its name
   (the whole-process rows show each tool's sort of its samples). */
static __attribute__((noinline)) void sort_ticks(uint64_t *t, uint64_t *tmp, unsigned n)
{
    static unsigned pos[65537];
    uint64_t all = 0, *from = t, *to = tmp, *x;
    for (unsigned i = 0; i < n; i++)
        all |= t[i];
    for (unsigned shift = 0; shift < 64 && all >> shift; shift += 16) {
        memset(pos, 0, sizeof pos);
        for (unsigned i = 0; i < n; i++)
            pos[(from[i] >> shift & 0xffff) + 1]++;
        for (unsigned d = 1; d < 65536; d++)
            pos[d] += pos[d - 1];
        for (unsigned i = 0; i < n; i++)
            to[pos[from[i] >> shift & 0xffff]++] = from[i];
        x = from, from = to, to = x;
    }
    if (from != t)
        memcpy(t, from, n * sizeof *t);
}

/* t: n samples in ticks, each `us` microseconds; tmp: room for n more. */
static void stats(uint64_t *t, uint64_t *tmp, unsigned n, double us, size_t bytes, struct row *r)
{
    sort_ticks(t, tmp, n);
    uint64_t sum = 0;
    for (unsigned i = 0; i < n; i++)
        sum += t[i];
    double avg = (double)sum / n, sq = 0;
    for (unsigned i = 0; i < n; i++) {
        double dev = (double)(int64_t)t[i] - avg;
        sq += dev * dev;
    }
    r->bytes = bytes;
    r->iters = n;
    r->avg = avg * us;
    r->min = (double)t[0] * us;
    r->max = (double)t[n - 1] * us;
    r->typical = (double)t[n / 2] * us;
    r->stdev = n > 1 ? sqrt(sq / (n - 1)) * us : 0;
    r->p99 = (double)t[(unsigned)ceil(n * 0.99) - 1] * us;
    r->p999 = (double)t[(unsigned)ceil(n * 0.999) - 1] * us;
}

/* The client's measurement of one size. Returns 0 and fills r. */
static int client_run(struct side *cli, struct side *srv, size_t size, struct row *r)
{
    unsigned total = g_opt->warmup + g_opt->iters;
    uint64_t *t = (uint64_t *)malloc(sizeof(uint64_t) * 2 * g_opt->iters);  /* samples, and stats()'s tmp */
    if (!t)
        return -1;
    int half = g_opt->test == T_SEND || g_opt->test == T_PUT;
    int rc = 0;
    for (unsigned i = 0; i < total && rc == 0; i++) {
        uint64_t tag = cli->expect_tag;
        if (half)
            prefill(cli, tag);  /* before the clock starts, as perftest's buffer is ready before it */
        uint64_t t0 = ticks();
#ifdef RDMAX_TRANSPORT_RC
        if (g_opt->test == T_PUT) {
            rc = post_retry(cli, do_put, tag) == RDMAX_OK ? wait_reply(cli, srv, tag) : -1;
            cli->expect_tag++;
        } else if (g_opt->test != T_SEND) {
            rc = one_sided(cli, i);
        } else
#endif
        {
            rc = post_retry(cli, do_send, tag);
#ifdef RDMAX_TRANSPORT_UD
            /* the suite's control: the first ping twice, so the receiver's duplicate count must show 1 */
            if (rc == RDMAX_OK && i == 0 && g_dup_first)
                rc = post_retry(cli, do_send, tag);
#endif
            rc = rc == RDMAX_OK ? wait_reply(cli, srv, tag) : -1;
        }
        if (i >= g_opt->warmup)  /* t_arrive: taken when the answer was seen, before its check */
            t[i - g_opt->warmup] = cli->t_arrive - t0;
    }
    if (rc == 0)  /* send and put: half the round trip */
        stats(t, t + g_opt->iters, g_opt->iters, (half ? 0.5 : 1.0) / g_ticks_per_us, size, r);
    free(t);
    return rc;
}

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [options] [HOST]        (no HOST: server; HOST: client; --loopback: both)\n"
            "  -t, --test=OP        send|put|get|fadd|cswap (UD: send)        [send]\n"
            "  -s, --size=BYTES     message size                                [8; atomics 8]\n"
            "  -a, --all            all sizes 2 B .. 8 MiB, powers of two (UD: up to the MTU)\n"
            "  -n, --iters=N        measured iterations                         [%d]\n"
            "  -w, --warmup=N       iterations before measuring                 [%d]\n"
            "  -I, --inline=BYTES   largest inline message                      [device maximum]\n"
            "  -p, --port=PORT      connection port (TCP; rdma_cm's with --cm)  [%d]\n"
            "  -d, --device=NAME    RDMA device                                 [$RDMAX_DEVICE or first active]\n"
            "  -x, --gid-index=N    GID index                                   [RoCE v2 IPv4-mapped]\n"
            "  -g, --group=ADDR     UD multicast: the client pings IPv4 group ADDR, a server started with the\n"
            "                       same -g joins it and answers by unicast (needs a route for 224.0.0.0/4\n"
            "                       on the device's netdev, e.g. ip route add 224.0.0.0/4 dev sr0)\n"
            "      --cm             RC: set the connection up through rdma_cm (librdmacm), not rdmax's TCP record\n"
            "      --own-pool       RC: receive into buffers of the endpoint's own (ep desc recv_pool), not the\n"
            "                       context's shared receive queue                [shared]\n"
            "      --no-check       payloads neither filled nor checked per iteration (perftest's loop: for\n"
            "                       instruction counts beside it); a put's poller still waits for its last byte\n"
            "      --loopback       both ends in this process\n"
            "      --csv=FILE       also write the rows as CSV\n"
            "      --json=FILE      also write the rows as JSON\n"
            "      --profile        print rdmax's counters after the run\n"
            "  -h, --help           this text\n",
            prog, DEFAULT_ITERS, DEFAULT_WARMUP, DEFAULT_PORT);
}

static int parse_num(const char *opt, const char *v, unsigned long long max, unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 0);
    if (errno || end == v || *v == '-' || x > max) {
        fprintf(stderr, "option %s: '%s' is not a number in 0..%llu\n", opt, v, max);
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
    *out = x;
    return 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"test", required_argument, 0, 't'},   {"size", required_argument, 0, 's'},
        {"all", no_argument, 0, 'a'},          {"iters", required_argument, 0, 'n'},
        {"warmup", required_argument, 0, 'w'}, {"inline", required_argument, 0, 'I'},
        {"port", required_argument, 0, 'p'},   {"device", required_argument, 0, 'd'},
        {"gid-index", required_argument, 0, 'x'}, {"group", required_argument, 0, 'g'},
        {"loopback", no_argument, 0, 'L'},     {"csv", required_argument, 0, 'C'},
        {"json", required_argument, 0, 'J'},   {"profile", no_argument, 0, 'P'},
        {"cm", no_argument, 0, 'M'},           {"own-pool", no_argument, 0, 'O'},
        {"no-check", no_argument, 0, 'K'},     {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->size = 8;
    o->iters = DEFAULT_ITERS;
    o->warmup = DEFAULT_WARMUP;
    o->inline_size = -1;
    o->port = DEFAULT_PORT;
    o->gid_index = -1;
    int c, size_set = 0;
    unsigned long long v;
    while ((c = getopt_long(argc, argv, "t:s:an:w:I:p:d:x:g:h", lo, NULL)) != -1) {
        switch (c) {
        case 't': {
            int k;
            for (k = 0; k < 5 && strcmp(optarg, test_names[k]); k++)
                ;
            if (k == 5) {
                fprintf(stderr, "option -t: unknown test '%s' (send|put|get|fadd|cswap)\n", optarg);
                return -1;
            }
            o->test = (enum test)k;
            break;
        }
        case 's': if (parse_num("-s", optarg, 8u << 20, &v) || v == 0) { if (!v) fprintf(stderr, "option -s: size must be at least 1\n"); return -1; } o->size = v; size_set = 1; break;
        case 'a': o->all = 1; break;
        case 'n': if (parse_num("-n", optarg, 100000000, &v) || v == 0) { if (!v) fprintf(stderr, "option -n: need at least 1 iteration\n"); return -1; } o->iters = (unsigned)v; break;
        case 'w': if (parse_num("-w", optarg, 100000000, &v)) return -1; o->warmup = (unsigned)v; break;
        case 'I': if (parse_num("-I", optarg, 4096, &v)) return -1; o->inline_size = (int)v; break;
        case 'p': if (parse_num("-p", optarg, 65535, &v)) return -1; o->port = (unsigned)v; break;
        case 'd': o->device = optarg; break;
        case 'x': if (parse_num("-x", optarg, 255, &v)) return -1; o->gid_index = (int)v; break;
        case 'g': o->group = optarg; break;
        case 'L': o->loopback = 1; break;
        case 'C': o->csv = optarg; break;
        case 'J': o->json = optarg; break;
        case 'P': o->profile = 1; break;
        case 'M': o->cm = 1; break;
        case 'O': o->own_pool = 1; break;
        case 'K': o->no_check = 1; break;
        case 'h': usage(stdout, argv[0]); exit(0);
        default: usage(stderr, argv[0]); return -1;
        }
    }
    if (optind < argc)
        o->host = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, "unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (o->host && o->loopback) {
        fprintf(stderr, "--loopback and a HOST exclude each other\n");
        return -1;
    }
    if (o->cm && o->loopback) {
        fprintf(stderr, "option --cm: rdma_cm connects a server and a client; --loopback has no connection\n");
        return -1;
    }
#ifdef RDMAX_TRANSPORT_UD
    if (o->cm) {
        fprintf(stderr, "option --cm: rdma_cm setup is RC only (rdmax_pingpong_rc)\n");
        return -1;
    }
    if (o->own_pool) {
        fprintf(stderr, "option --own-pool: RC only (UD endpoints receive on the context's UD QP)\n");
        return -1;
    }
    if (o->test != T_SEND) {
        fprintf(stderr, "option -t: UD supports only send\n");
        return -1;
    }
#else
    if (o->group) {
        fprintf(stderr, "option -g: multicast needs UD (rdmax_pingpong_ud)\n");
        return -1;
    }
#endif
    if (o->test == T_FADD || o->test == T_CSWAP) {
        if (size_set && o->size != 8) {
            fprintf(stderr, "option -s: atomics are 8 bytes\n");
            return -1;
        }
        o->size = 8;
        o->all = 0;
    }
    return 0;
}

static void print_rows(FILE *f, const struct row *r, int n)
{
    fprintf(f, " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec]\n");
    for (int i = 0; i < n; i++)
        fprintf(f, " %-7zu %-10u %-14.2f %-14.2f %-16.2f %-14.2f %-16.2f %-22.2f %-.2f\n", r[i].bytes, r[i].iters,
                r[i].min, r[i].max, r[i].typical, r[i].avg, r[i].stdev, r[i].p99, r[i].p999);
}

static int write_files(const struct opts *o, const struct row *r, int n)
{
    if (o->csv) {
        FILE *f = fopen(o->csv, "w");
        if (!f) {
            fprintf(stderr, "--csv %s: %s\n", o->csv, strerror(errno));
            return -1;
        }
        fprintf(f, "test,bytes,iterations,t_min,t_max,t_typical,t_avg,t_stdev,p99,p99_9\n");
        for (int i = 0; i < n; i++)
            fprintf(f, "%s,%zu,%u,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f\n", test_names[o->test], r[i].bytes, r[i].iters,
                    r[i].min, r[i].max, r[i].typical, r[i].avg, r[i].stdev, r[i].p99, r[i].p999);
        fclose(f);
    }
    if (o->json) {
        FILE *f = fopen(o->json, "w");
        if (!f) {
            fprintf(stderr, "--json %s: %s\n", o->json, strerror(errno));
            return -1;
        }
        fprintf(f, "{\"test\": \"%s\", \"unit\": \"usec\", \"results\": [", test_names[o->test]);
        for (int i = 0; i < n; i++)
            fprintf(f, "%s\n  {\"bytes\": %zu, \"iterations\": %u, \"t_min\": %.3f, \"t_max\": %.3f, "
                    "\"t_typical\": %.3f, \"t_avg\": %.3f, \"t_stdev\": %.3f, \"p99\": %.3f, \"p99_9\": %.3f}",
                    i ? "," : "", r[i].bytes, r[i].iters, r[i].min, r[i].max, r[i].typical, r[i].avg, r[i].stdev,
                    r[i].p99, r[i].p999);
        fprintf(f, "\n]}\n");
        fclose(f);
    }
    return 0;
}


/* Buffers of one side for one size: the exposed region (remote rights) and a local staging one, each
   two halves (struct side). */
static int side_setup(rdmax_ctx *ctx, struct side *s, size_t size)
{
    size_t n = size < 8 ? 8 : (size + 7) & ~(size_t)7;  /* halves 8-aligned (atomics) */
    if (rdmax_mem_alloc(ctx, 2 * n, RDMAX_ACCESS_REMOTE_READ | RDMAX_ACCESS_REMOTE_WRITE |
                        RDMAX_ACCESS_REMOTE_ATOMIC, &s->mem) != RDMAX_OK ||
        rdmax_mem_alloc(ctx, 2 * n, RDMAX_ACCESS_LOCAL, &s->smem) != RDMAX_OK) {
        fprintf(stderr, "registering %zu bytes: %s\n", 2 * n, last_item(ctx));
        return -1;
    }
    s->buf = (unsigned char *)s->mem->addr;
    s->sbuf = (unsigned char *)s->smem->addr;
    s->size = size;
    s->half = n;
    s->ready = UINT64_MAX;
    if (g_opt->test == T_GET)
        fill(s->buf, size, 0);  /* what the client's reads must find */
    if (g_opt->test == T_PUT) {  /* as if tags -2 and -1 had landed: no half looks arrived too early */
        fill(s->buf, size, (uint64_t)-2);
        fill(s->buf + n, size, (uint64_t)-1);
    }
    return 0;
}

static void side_free(struct side *s)
{
    if (s->tx != s->ep)
        rdmax_ep_destroy(s->tx);
    rdmax_ep_destroy(s->ep);
    rdmax_mem_free(s->mem);
    rdmax_mem_free(s->smem);
    memset(s, 0, sizeof *s);
}

/* -g: the client (cli) sends its pings to the group through a multicast endpoint; the server (srv) joins
   the group with its endpoint and answers by unicast. Either may be NULL. */
static int mcast_setup(rdmax_ctx *ctx, const struct opts *o, struct side *cli, struct side *srv)
{
    if (!o->group)
        return 0;
#ifdef RDMAX_TRANSPORT_UD
    if (srv && rdmax_mcast_join(srv->ep, o->group) != RDMAX_OK) {
        fprintf(stderr, "option -g: cannot join %s: %s\n", o->group, last_item(ctx));
        return -1;
    }
    if (cli && rdmax_mcast_ep_create(ctx, NULL, o->group, &cli->tx) != RDMAX_OK) {
        fprintf(stderr, "option -g: cannot send to %s: %s\n", o->group, last_item(ctx));
        return -1;
    }
    /* Two processes: a ping sent before the server joined would be lost, so the server says "joined"
       by unicast and the client waits for that before its first ping. */
    if (srv && !cli && post_retry(srv, do_send, 0) != RDMAX_OK)
        return -1;
    if (cli && !srv) {
        double deadline = 0;
        for (unsigned spin = 1; cli->got == 0; spin++) {
            rdmax_progress(ctx);
            if (spin_check(cli->ep, spin, &deadline, "option -g: waiting for the server to join"))
                return -1;
        }
        cli->got = 0;
        cli->expect_tag = 0;
        cli->seen = 0;
    }
    return 0;
#else
    (void)ctx, (void)cli, (void)srv;
    return -1;
#endif
}

static void ep_desc_for(const struct opts *o, struct side *s, size_t size, rdmax_ep_desc *d)
{
    memset(d, 0, sizeof *d);
    d->recv_size = (uint32_t)(size < 64 ? 64 : size);
    d->rq_depth = size > (1u << 20) ? 32 : 0;
    d->max_inline = o->inline_size >= 0 ? (uint32_t)o->inline_size : 0;
    if (o->inline_size == 0)
        d->max_inline = 0;
    d->recv_cb = on_recv;
    d->user = s;
    d->expose = s->mem;
    d->recv_pool = o->own_pool ? RDMAX_RECV_POOL_OWN : RDMAX_RECV_POOL_SHARED;
}

/* The server side of one size with a remote client: answer (send, put) until the client's final
   message arrives. That message comes after the client flushed, so everything we sent has landed and the
   endpoint can go without a flush of ours (which would race with the client's exit). */
static int server_run(struct side *s)
{
    unsigned total = g_opt->warmup + g_opt->iters;
    s->reply = g_opt->test == T_SEND;
    s->reply_limit = total;
    uint64_t final_msg = g_opt->test == T_SEND ? total + 1 : 1;
    double deadline = 0;
    uint64_t seen = 0;
    if (g_opt->test != T_SEND && g_opt->test != T_PUT) {
        /* One-sided: nothing arrives before the client's final message, however long its run is: block
           on the completion channel, and give up only after ten idle minutes. */
        double give_up = now_us() + 600e6;
        while (!s->bad && s->got < final_msg && now_us() < give_up)
            rdmax_wait(rdmax_ep_query_ctx(s->ep), 100);
        if (s->got < final_msg)
            fprintf(stderr, "server: no final message from the client\n");
        return s->bad || s->got < final_msg ? -1 : 0;
    }
    for (unsigned spin = 1; !s->bad && s->got < final_msg; spin++) {
        rdmax_progress(rdmax_ep_query_ctx(s->ep));
#ifdef RDMAX_TRANSPORT_RC
        if (g_opt->test == T_PUT && s->expect_tag < total)
            serve_step(s);
        if (g_opt->test == T_PUT && s->expect_tag == total && s->got == 0)
            s->expect_tag = 0;  /* the final message carries tag 0 */
#endif
        if (s->got >= final_msg)
            break;  /* the client may be gone already (rdma_cm: its close came right behind its last message) */
        if ((spin & 4095) == 0 && s->got + s->expect_tag != seen) {
            seen = s->got + s->expect_tag;  /* the client is alive: restart the clock */
            deadline = 0;
        }
        if (spin_check(s->ep, spin, &deadline, "server: waiting for the client"))
            return -1;
    }
    return s->bad ? -1 : 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (parse(argc, argv, &o))
        return 2;
    g_opt = &o;
    setvbuf(stdout, NULL, _IOLBF, 0);
    clock_init();
    pattern_init();
#ifdef RDMAX_TRANSPORT_UD
    g_dup_first = getenv("RDMAX_PINGPONG_TEST_DUPLICATE") && !strcmp(getenv("RDMAX_PINGPONG_TEST_DUPLICATE"), "1");
#endif
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.device = o.device;
    cd.conn_setup = o.cm ? RDMAX_SETUP_CM : RDMAX_SETUP_TCP;
    if (o.gid_index >= 0) {
        cd.gid_index_set = true;
        cd.gid_index = o.gid_index;
    }
    rdmax_ctx *ctx;
    if (rdmax_ctx_create(&cd, &ctx) != RDMAX_OK) {
        fprintf(stderr, "cannot open the RDMA device%s%s: %s\n", o.device ? " " : "", o.device ? o.device : "",
                "see the error above");
        return 1;
    }
    size_t sizes[32];
    int nsizes = 0;
    if (o.all) {
        size_t top = 8u << 20;
#ifdef RDMAX_TRANSPORT_UD
        top = rdmax_ctx_query_attr(ctx)->mtu_bytes;
#endif
        for (size_t s = 2; s <= top; s *= 2)
            sizes[nsizes++] = s;
    } else {
        sizes[nsizes++] = o.size;
    }
    struct row rows[32];
    int rc = 0;
    rdmax_listener *l = NULL;
    if (!o.host && !o.loopback) {
        if (rdmax_listener_create(ctx, NULL, (uint16_t)o.port, &l) != RDMAX_OK) {
            fprintf(stderr, "server: cannot listen on port %u: %s\n", o.port, last_item(ctx));
            return 1;
        }
        printf("server: device %s, listening on port %u%s\n", rdmax_ctx_query_attr(ctx)->name, o.port, o.cm ? " (rdma_cm)" : "");
    }
    for (int k = 0; k < nsizes && rc == 0; k++) {
        size_t size = sizes[k];
        struct side a, b;
        memset(&a, 0, sizeof a);
        memset(&b, 0, sizeof b);
        rdmax_ep_desc da, db;
        if (side_setup(ctx, &a, size) || (o.loopback && side_setup(ctx, &b, size))) {
            rc = 1;
            break;
        }
        ep_desc_for(&o, &a, size, &da);
        if (o.loopback) {
            ep_desc_for(&o, &b, size, &db);
            rdmax_ep *ea, *eb;
            /* both ends get their own desc (callback user pointers) */
            if (rdmax_ep_create(ctx, &da, &ea) || rdmax_ep_create(ctx, &db, &eb)) {
                fprintf(stderr, "loopback endpoints: %s\n", last_item(ctx));
                rc = 1;
                break;
            }
            rdmax_conn_record ia, ib;
            rdmax_ep_query_record(ea, &ia);
            rdmax_ep_query_record(eb, &ib);
            if (rdmax_ep_connect_record(ea, &ib) || rdmax_ep_connect_record(eb, &ia)) {
                fprintf(stderr, "loopback connect: %s\n", last_item(ctx));
                rc = 1;
                break;
            }
            a.ep = ea;
            b.ep = eb;
            if (mcast_setup(ctx, &o, &a, &b)) {
                rc = 1;
                break;
            }
            b.is_server = 1;
            b.reply = o.test == T_SEND;
            b.reply_limit = UINT64_MAX;
            rc = client_run(&a, &b, size, &rows[k]) ? 1 : 0;
        } else if (o.host) {
            rdmax_status st = rdmax_connect(ctx, o.host, (uint16_t)o.port, &da, &a.ep, TIMEOUT_MS);
            if (st != RDMAX_OK) {
                fprintf(stderr, "client: cannot connect to %s port %u: %s\n", o.host, o.port,
                        rdmax_status_str(st));  /* the logger has printed the details */
                rc = 1;
                break;
            }
            if (mcast_setup(ctx, &o, &a, NULL)) {
                rc = 1;
                break;
            }
            rc = client_run(&a, NULL, size, &rows[k]) ? 1 : 0;
            /* Flush, then a final message (tag: the next one the server expects), flushed too: when it is
               acknowledged the server has everything and may go. */
            uint64_t final_tag = o.test == T_SEND ? a.expect_tag : 0;
            if (rc == 0 && (rdmax_ep_flush(a.ep, TIMEOUT_MS) != RDMAX_OK || send_final(&a, final_tag) != 0))
                rc = 1;
        } else {
            a.is_server = 1;
            /* one-sided tests: the only message is the client's final one, carrying tag 0 */
            rdmax_status st;
            do
                st = rdmax_accept(l, &da, &a.ep, 60000);
            while (st != RDMAX_OK && st != RDMAX_ERR_TIMEOUT && st != RDMAX_ERR_NO_DEVICE);
            if (st != RDMAX_OK) {
                fprintf(stderr, "server: no client: %s\n", rdmax_status_str(st));
                rc = 1;
                break;
            }
            rc = mcast_setup(ctx, &o, NULL, &a) ? 1 : server_run(&a) ? 1 : 0;
        }
        if (o.loopback)
            side_free(&b);
        side_free(&a);
    }
    if (rc == 0 && (o.host || o.loopback)) {
        print_rows(stdout, rows, nsizes);
        if (write_files(&o, rows, nsizes))
            rc = 1;
    }
#ifdef RDMAX_TRANSPORT_UD
    {
        rdmax_counters cnt;
        rdmax_ctx_query_counters(ctx, &cnt);
        printf("%s: datagrams missing %llu, duplicated %llu, out of order %llu; rdmax ud.skipped %llu, "
               "ud.late %llu, ud.duplicates %llu\n",
               o.host || o.loopback ? "client" : "server", (unsigned long long)g_ud_missing,
               (unsigned long long)g_ud_dups, (unsigned long long)g_ud_late, (unsigned long long)cnt.ud_skipped,
               (unsigned long long)cnt.ud_late, (unsigned long long)cnt.ud_duplicates);
    }
#endif
    if (o.profile)  /* the variables; with -DRDMAX_PROFILE also the timed points */
        rdmax_profile_print(ctx, stdout);
    rdmax_listener_destroy(l);
    rdmax_ctx_destroy(ctx);
    if (rc)
        fprintf(stderr, "%s: FAILED\n", argv[0]);
    return rc;
}
