/* Two hosts (tests/vm/run --topo twohost: two guests, each with its own kernel and rxe device, on one
   link). The same program runs on both; RDMAX_HOST=0 or 1 says which side it is.
   - connect: host 0 listens, host 1 connects four endpoints with rdmax_connect;
   - checked streams across the hosts: sends both ways, puts from host 0 (checked on host 1, which reports
     back), gets by host 0 (checked as they land);
   - host 1 crashed mid-stream (tests/vm/crash-host 1: its qemu is SIGKILLed, so no FIN, no RST, no QP
     teardown): host 0's busy endpoint fails within the RC retry time (or its watchdog), its idle ones
     within keepalive + the RC retry time; every operation completes exactly once and no get reports
     success with wrong data; an idle endpoint without keepalive (the control) still believes it is
     connected, so it was keepalive that found the others; nothing hangs, and host 0's context still works
     (a fresh loopback pair on it moves checked data).
   Host 0 prints every verdict: host 1 reports its checks in messages, as it dies before it could print
   them. Host 1 fails on its own only when something keeps it from serving, or when it is never crashed.
   Usage: twohost_test (in both guests; RDMAX_HOST, RDMAX_PEER_ADDR, RDMAX_TEST_DEV0 from tests/vm/run;
   RDMAX_CRASH_HOST names the crash-host script, default tests/vm/crash-host) */
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#include "../rdmax.h"
#include "testlib.h"

#include <time.h>
#include <unistd.h>
#include <spawn.h>
#include <signal.h>
#include <sys/wait.h>

#define PORT 18611
#define GUARD_MS 60000     /* a hang guard, not a timing assertion */
#define MEM_SIZE (1u << 20)
/* Each host's registered memory: */
#define SRC_OFF 0          /* [0, 512K): host 1: what host 0 gets; host 0: what it puts */
#define SRC_LEN (512u << 10)
#define DST_OFF SRC_LEN    /* [512K, 768K): host 1: where host 0 puts; host 0: where its gets land */
#define DST_LEN (256u << 10)
#define STG_OFF (768u << 10) /* [768K, 1M): host 0 and 1: staging ring of the send stream */
#define CHUNK 4096u
#define RING 32            /* operations in flight in a stream */
#define NSEND 400          /* messages each way */
#define NPUT (DST_LEN / CHUNK)
#define NGET 256
#define CRASH_AFTER 64     /* gets that succeed in the last stream before host 1 is crashed */
#define NEPS 4
enum { EP_CTL, EP_DATA, EP_IDLE, EP_NOKA }; /* host 1's connections, in the order it makes them */
static const char *const ep_name[NEPS] = {"control", "data", "idle", "idle without keepalive"};

/* RC timing of every endpoint, set here so that the bounds printed are the ones in force. Not the
   defaults (ack timeout 67 ms, retry time 0.47 s): each guest's vCPU is a thread of a host shared with
   other work, and one guest can stand still while the other's timers run (pauses of 1.5 to 2.8 s were
   measured in a guest at a load of 18 on 2 cores). A pause longer than the ack timeout is a
   retransmission, and on the 6.1 guest kernel a send retransmitted under such pauses once failed with
   "remote invalid request" (rxe). A 2.1 s ack timeout makes retransmissions rare; 3 tries (6.4 s)
   still find a crashed host quickly. */
#define ACK_TIMEOUT 19     /* 4.096 us x 2^19 = 2.1 s */
#define RETRY_CNT 2
#define KEEPALIVE_MS 2000u

enum { S_SEND01 = 1, S_SEND10, S_PUT, S_GET }; /* one data pattern per stream */

static int g_host;
static rdmax_ctx *g_ctx;
static rdmax_mem *g_mem;
static rdmax_ep *g_ep[NEPS];

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void log_fn(rdmax_log_level lvl, rdmax_log_item item, const char *msg, void *user)
{
    (void)item;
    (void)user;
    if (lvl <= RDMAX_LOG_WARN)
        printf("    h%d log: %s\n", g_host, msg);
}

/* The RC retry time: 4.096 us x 2^timeout x (retry_cnt + 1). */
static int64_t retry_ms(void)
{
    return (int64_t)((4096ull << ACK_TIMEOUT) * (RETRY_CNT + 1u) / 1000000u);
}

static uint8_t pat(uint32_t s, uint64_t i)
{
    uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)s * 0xbf58476d1ce4e5b9ull;
    return (uint8_t)(x >> 29 ^ x >> 47);
}

static void fill(void *p, size_t len, uint32_t s, uint64_t off)
{
    for (size_t i = 0; i < len; i++)
        ((uint8_t *)p)[i] = pat(s, off + i);
}

/* Index of the first byte that differs from the pattern, or -1. */
static long check(const void *p, size_t len, uint32_t s, uint64_t off)
{
    for (size_t i = 0; i < len; i++)
        if (((const uint8_t *)p)[i] != pat(s, off + i))
            return (long)i;
    return -1;
}

static uint32_t send_len(uint32_t seq)
{
    return 8 + (seq * 997u) % (CHUNK - 8);
}

/* ---- receiving ------------------------------------------------------------------------------------ */

/* Every endpoint's first message is "ID k" (which connection of host 1 it is). Then the control
   endpoint carries short text messages, the data endpoint the send stream (sequence number, pattern). */
struct rx {
    int k;
    int id;             /* -1 until the id came */
    uint32_t count;     /* stream messages */
    uint32_t bad;
    char why[160];
};
static struct rx g_rx[NEPS];
static char g_ctl[16][96];
static unsigned g_ctl_in, g_ctl_out;

static void on_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep;
    struct rx *r = (struct rx *)user;
    if (r->id < 0) {
        char m[16] = "";
        memcpy(m, data, len < 15 ? len : 15);
        r->id = !strncmp(m, "ID ", 3) ? atoi(m + 3) : 99;
        return;
    }
    if (r->k == EP_CTL) {
        if (g_ctl_in - g_ctl_out == 16)
            return;
        char *m = g_ctl[g_ctl_in++ % 16];
        len = len < 95 ? len : 95;
        memcpy(m, data, len);
        m[len] = 0;
        return;
    }
    uint32_t seq = 0, want = r->count;
    if (len >= 4)
        memcpy(&seq, data, 4);
    long bad = len >= 4 ? check((uint8_t *)data + 4, len - 4, g_host == 0 ? S_SEND01 : S_SEND10, (uint64_t)seq << 16)
                        : 0;
    if (len < 4 || seq != want || len != send_len(want) || bad >= 0 || r->k != EP_DATA) {
        if (!r->bad++)
            snprintf(r->why, sizeof r->why, "%s endpoint, message %u: seq %u, %zu bytes (expected %u), first "
                     "wrong byte %ld", ep_name[r->k], want, seq, len, send_len(want), bad);
    }
    r->count++;
}

/* Progress until cond() holds; 0 after the guard, or when the control endpoint failed (the peer left). */
static int wait_for(int (*cond)(void), const char *what)
{
    int64_t t0 = now_ms();
    while (!cond()) {
        rdmax_progress(g_ctx);
        if (rdmax_ep_query_state(g_ep[EP_CTL]) != RDMAX_EP_CONNECTED) {
            printf("    h%d: the peer went away while waiting for %s (%s)\n", g_host, what,
                   rdmax_status_str(rdmax_ep_query_error(g_ep[EP_CTL])));
            return 0;
        }
        if (now_ms() - t0 > GUARD_MS) {
            printf("    h%d: nothing for %d ms while waiting for %s\n", g_host, GUARD_MS, what);
            return 0;
        }
    }
    return 1;
}

static int have_ctl(void)
{
    return g_ctl_in != g_ctl_out;
}

static int have_ids(void)
{
    for (int k = 0; k < NEPS; k++)
        if (g_rx[k].id < 0)
            return 0;
    return 1;
}

static int g_cur;  /* host 1: the endpoint whose id from host 0 it waits for */
static int have_cur_id(void)
{
    return g_rx[g_cur].id >= 0;
}

static int have_stream(void)
{
    return g_rx[EP_DATA].count >= NSEND;
}

/* The next control message into out; 0 if none came or it does not start with tag. */
static int ctl_recv(const char *tag, char *out, size_t out_len)
{
    if (!wait_for(have_ctl, tag))
        return 0;
    const char *m = g_ctl[g_ctl_out++ % 16];
    snprintf(out, out_len, "%s", m);
    if (strncmp(m, tag, strlen(tag))) {
        printf("    h%d: expected the control message %s, got '%s'\n", g_host, tag, m);
        return 0;
    }
    return 1;
}

/* Run the comp to its end; RDMAX_OK, its error, or RDMAX_ERR_TIMEOUT. */
static rdmax_status comp_wait(rdmax_comp *c)
{
    int64_t t0 = now_ms();
    while (!c->done && now_ms() - t0 < GUARD_MS)
        rdmax_progress(g_ctx);
    return c->done ? c->status : RDMAX_ERR_TIMEOUT;
}

/* A text message on endpoint k, retried while resources are short, waited for. */
static int msg_send(int k, const char *fmt, ...)
{
    char m[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    rdmax_comp c;
    memset(&c, 0, sizeof c);
    rdmax_status st;
    int64_t t0 = now_ms();
    while ((st = rdmax_send(g_ep[k], m, strlen(m) + 1, NULL, &c)) == RDMAX_ERR_NO_RESOURCE &&
           now_ms() - t0 < GUARD_MS)
        rdmax_progress(g_ctx);
    if (st != RDMAX_INPROGRESS || (st = comp_wait(&c)) != RDMAX_OK)
        printf("    h%d: message '%s' on the %s endpoint: %s\n", g_host, m, ep_name[k], rdmax_status_str(st));
    return st == RDMAX_OK;
}

/* ---- streams of checked data ---------------------------------------------------------------------- */

/* NSEND messages of 8 B to 4 KiB on the data endpoint, from a staging ring, each with its own comp. */
static int send_stream(uint32_t s, char *why, size_t why_len)
{
    static rdmax_comp comp[RING];
    memset(comp, 0, sizeof comp);
    for (uint32_t seq = 0; seq < NSEND + RING; seq++) {
        rdmax_comp *c = &comp[seq % RING];
        if (seq >= RING) {
            rdmax_status st = comp_wait(c);
            if (st != RDMAX_OK) {
                snprintf(why, why_len, "send %u: %s", seq - RING, rdmax_status_str(st));
                return 0;
            }
        }
        if (seq >= NSEND)
            continue;
        uint8_t *buf = (uint8_t *)g_mem->addr + STG_OFF + (seq % RING) * CHUNK;
        memset(c, 0, sizeof *c);
        memcpy(buf, &seq, 4);
        fill(buf + 4, send_len(seq) - 4, s, (uint64_t)seq << 16);
        rdmax_status st;
        int64_t t0 = now_ms();
        while ((st = rdmax_send(g_ep[EP_DATA], buf, send_len(seq), g_mem, c)) == RDMAX_ERR_NO_RESOURCE &&
               now_ms() - t0 < GUARD_MS)
            rdmax_progress(g_ctx);
        if (st != RDMAX_INPROGRESS) {
            snprintf(why, why_len, "send %u not posted: %s", seq, rdmax_status_str(st));
            return 0;
        }
    }
    return 1;
}

/* Operations of the put and get streams: one per ring slot; each must complete exactly once. */
struct op {
    rdmax_comp comp;
    int posted, calls;
    rdmax_status status;
    uint32_t off;         /* get: offset in host 1's source area */
};
static struct op g_ops[RING];
static int g_dup, g_wrong, g_ok, g_err;
static char g_wrong_why[120];

static void on_op(rdmax_comp *c, rdmax_status st)
{
    struct op *o = (struct op *)c->user;
    if (o->calls++) {
        g_dup++;
        return;
    }
    o->status = st;
    if (st != RDMAX_OK) {
        g_err++;
        return;
    }
    g_ok++;
    if (o->off == UINT32_MAX)
        return; /* a put */
    uint32_t slot = (uint32_t)(o - g_ops);
    long bad = check((uint8_t *)g_mem->addr + DST_OFF + slot * CHUNK, CHUNK, S_GET, o->off);
    if (bad >= 0 && !g_wrong++)
        snprintf(g_wrong_why, sizeof g_wrong_why, "the get of offset %u reported success with byte %ld wrong",
                 o->off, bad);
}

static uint64_t g_raddr;
static uint32_t g_rkey;
static void observe(void);

/* Post operation n of a stream into its ring slot: a put of chunk n (is_put) or a get of chunk n
   (cycling over host 1's source area). Retried while resources are short. */
static rdmax_status op_post(uint32_t n, int is_put)
{
    struct op *o = &g_ops[n % RING];
    memset(o, 0, sizeof *o);
    o->comp.cb = on_op;
    o->comp.user = o;
    uint8_t *mine = (uint8_t *)g_mem->addr;
    rdmax_status st;
    int64_t t0 = now_ms();
    if (is_put) {
        o->off = UINT32_MAX;
        while ((st = rdmax_put(g_ep[EP_DATA], mine + SRC_OFF + n * CHUNK, CHUNK, g_mem,
                               g_raddr + DST_OFF + n * CHUNK, g_rkey, &o->comp)) == RDMAX_ERR_NO_RESOURCE &&
               now_ms() - t0 < GUARD_MS) {
            rdmax_progress(g_ctx);
            observe();
        }
    } else {
        o->off = (n * CHUNK) % SRC_LEN;
        uint8_t *dst = mine + DST_OFF + (n % RING) * CHUNK;
        memset(dst, 0xee, CHUNK); /* a get that lands nothing cannot pass as one that did */
        while ((st = rdmax_get(g_ep[EP_DATA], dst, CHUNK, g_mem, g_raddr + SRC_OFF + o->off, g_rkey,
                               &o->comp)) == RDMAX_ERR_NO_RESOURCE && now_ms() - t0 < GUARD_MS) {
            rdmax_progress(g_ctx);
            observe();
        }
    }
    o->posted = st == RDMAX_INPROGRESS;
    return st;
}

/* Wait for the slot of operation n to be free (its previous operation completed); 0 on the guard. */
static int slot_wait(uint32_t n)
{
    struct op *o = &g_ops[n % RING];
    int64_t t0 = now_ms();
    while (o->posted && !o->calls && now_ms() - t0 < GUARD_MS)
        rdmax_progress(g_ctx);
    return !o->posted || o->calls;
}

/* n operations of one kind, RING in flight: 1 if every one succeeded. */
static int op_stream(uint32_t n, int is_put, char *why, size_t why_len)
{
    memset(g_ops, 0, sizeof g_ops);
    g_ok = g_err = g_dup = g_wrong = 0;
    for (uint32_t i = 0; i < n + RING; i++) {
        if (!slot_wait(i)) {
            snprintf(why, why_len, "operation %u never completed", i - RING);
            return 0;
        }
        rdmax_status st = i < n ? op_post(i, is_put) : RDMAX_INPROGRESS;
        if (st != RDMAX_INPROGRESS) {
            snprintf(why, why_len, "operation %u not posted: %s", i, rdmax_status_str(st));
            return 0;
        }
    }
    if (g_ok != (int)n || g_err || g_dup || g_wrong) {
        snprintf(why, why_len, "%d ok, %d failed, %d reported twice, %d with wrong data (%s)", g_ok, g_err, g_dup,
                 g_wrong, g_wrong_why);
        return 0;
    }
    return 1;
}

/* ---- host 1: connect, serve, report, then wait to be crashed -------------------------------------- */

static int host1(void)
{
    const char *peer = getenv("RDMAX_PEER_ADDR");
    char m[96], why[320] = "";
    tl_begin("twohost/h1: connect, serve the streams, wait to be crashed");
    REQUIRE(peer, "RDMAX_PEER_ADDR is not set");
    fill((uint8_t *)g_mem->addr + SRC_OFF, SRC_LEN, S_GET, 0);
    memset((uint8_t *)g_mem->addr + DST_OFF, 0, DST_LEN);
    for (int k = 0; k < NEPS; k++) {
        rdmax_ep_desc d;
        memset(&d, 0, sizeof d);
        d.expose = g_mem;
        d.timeout = ACK_TIMEOUT;
        d.retry_cnt = RETRY_CNT;
        d.keepalive_ms = KEEPALIVE_MS;
        d.recv_cb = on_recv;
        d.user = &g_rx[k];
        /* Host 0 may not be listening yet: rdmax_connect retries a refused peer until its deadline. */
        rdmax_status st = rdmax_connect(g_ctx, peer, PORT, &d, &g_ep[k], GUARD_MS);
        REQUIRE(st == RDMAX_OK, "connect %d to %s port %u: %s", k, peer, PORT, rdmax_status_str(st));
        /* Host 0 names each endpoint once its accept returned it; the next connect waits for that, so
           host 0's k-th accept is our k-th connect. Its handshakes run side by side: under netem loss a
           retransmitted ready byte let the next client finish first (and rdmax then gave it the desc of
           the call that read its record: two endpoints shared one user, "no id on some endpoint"). */
        g_cur = k;
        REQUIRE(wait_for(have_cur_id, "host 0's id of our endpoint"), "no id from host 0 on endpoint %d", k);
        REQUIRE(g_rx[k].id == k, "host 0 accepted our endpoint %d as its %d", k, g_rx[k].id);
    }
    for (int k = 0; k < NEPS; k++)
        REQUIRE(msg_send(k, "ID %d", k), "sending the id of endpoint %d", k);
    REQUIRE(msg_send(EP_CTL, "BUF %llu %u", (unsigned long long)(uintptr_t)g_mem->addr, g_mem->rkey), "BUF");
    /* sends: host 0's stream to us, then ours to it */
    REQUIRE(ctl_recv("SEND-GO", m, sizeof m), "SEND-GO");
    REQUIRE(wait_for(have_stream, "host 0's send stream"), "host 0's send stream: %u of %u messages",
            g_rx[EP_DATA].count, NSEND);
    if (g_rx[EP_DATA].bad)
        REQUIRE(msg_send(EP_CTL, "SEND-BAD %s", g_rx[EP_DATA].why), "SEND-BAD");
    else
        REQUIRE(msg_send(EP_CTL, "SEND-OK %u", g_rx[EP_DATA].count), "SEND-OK");
    REQUIRE(send_stream(S_SEND01, why, sizeof why), "our send stream: %s", why);
    /* puts: check what host 0 wrote */
    REQUIRE(ctl_recv("PUT-DONE", m, sizeof m), "PUT-DONE");
    long bad = check((uint8_t *)g_mem->addr + DST_OFF, DST_LEN, S_PUT, 0);
    if (bad >= 0)
        REQUIRE(msg_send(EP_CTL, "PUT-BAD byte %ld of %u is wrong", bad, DST_LEN), "PUT-BAD");
    else
        REQUIRE(msg_send(EP_CTL, "PUT-OK %u", DST_LEN), "PUT-OK");
    /* Gets and the crash need nothing from us but the device: serve until we are killed. */
    REQUIRE(ctl_recv("CRASH-NEXT", m, sizeof m), "CRASH-NEXT");
    printf("    h1: serving until host 0 crashes this host\n");
    int64_t t0 = now_ms();
    while (now_ms() - t0 < 3 * GUARD_MS && rdmax_ep_query_state(g_ep[EP_CTL]) == RDMAX_EP_CONNECTED)
        rdmax_progress(g_ctx);
    tl_fail(__FILE__, __LINE__, "still alive: host 0 %s",
            rdmax_ep_query_state(g_ep[EP_CTL]) == RDMAX_EP_CONNECTED ? "never crashed this host" : "went away first");
out:
    return tl_end();
}

/* ---- host 0 ------------------------------------------------------------------------------------- */

/* Start tests/vm/crash-host 1 without waiting for it (posix_spawn: no copy of our registered memory). */
static pid_t crash_host1(void)
{
    const char *script = getenv("RDMAX_CRASH_HOST");
    if (!script)
        script = "tests/vm/crash-host";
    char *argv[] = {(char *)script, (char *)"1", NULL};
    fflush(stdout);
    pid_t pid;
    int rc = posix_spawn(&pid, script, NULL, NULL, argv, environ);
    if (rc) {
        printf("    h0: cannot run %s: %s\n", script, strerror(rc));
        return -1;
    }
    return pid;
}

/* Host 1 crashed in the middle of a get stream on the data endpoint, while the other three sit idle.
   Each pass of progress notes when an endpoint left RDMAX_EP_CONNECTED and when crash-host returned. */
static struct {
    int on;
    pid_t pid;
    int rc;
    int64_t t_fail[NEPS], t_dead;
    int64_t last, max_gap; /* the longest this process went without looking (a stalled vCPU) */
} g_w;

static void observe(void)
{
    if (!g_w.on)
        return;
    int64_t now = now_ms();
    if (g_w.last && now - g_w.last > g_w.max_gap)
        g_w.max_gap = now - g_w.last;
    g_w.last = now;
    for (int k = 0; k < NEPS; k++)
        if (!g_w.t_fail[k] && rdmax_ep_query_state(g_ep[k]) != RDMAX_EP_CONNECTED)
            g_w.t_fail[k] = now;
    int status;
    if (g_w.pid > 0 && !g_w.t_dead && waitpid(g_w.pid, &status, WNOHANG) == g_w.pid) {
        g_w.t_dead = now;
        g_w.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
}

static void case_crash(void)
{
    tl_begin("twohost/crash: host 1 crashed mid-stream: the busy and the idle endpoints fail, every get "
             "completes once, no wrong data, no hang");
    memset(g_ops, 0, sizeof g_ops);
    g_ok = g_err = g_dup = g_wrong = 0;
    memset(&g_w, 0, sizeof g_w);
    g_w.pid = -1;
    g_w.rc = -1;
    int64_t *t_fail = g_w.t_fail, t_req = 0, t0 = now_ms();
    int posted = 0, not_once = 0;
    REQUIRE(msg_send(EP_CTL, "CRASH-NEXT"), "CRASH-NEXT");
    g_w.on = 1;
    for (uint32_t n = 0;; n++) {
        /* one more get when its slot is free, while the data endpoint takes them */
        struct op *o = &g_ops[n % RING];
        while (o->posted && !o->calls && now_ms() - t0 < 3 * GUARD_MS) {
            rdmax_progress(g_ctx);
            observe();
        }
        if (o->posted && o->calls != 1)
            not_once++;
        if (t_fail[EP_DATA] || now_ms() - t0 > 3 * GUARD_MS)
            break;
        if (g_w.pid < 0 && g_ok >= CRASH_AFTER) {
            t_req = now_ms();
            g_w.pid = crash_host1();
            REQUIRE(g_w.pid > 0, "could not start crash-host");
        }
        rdmax_status st = op_post(n, 0);
        observe();
        if (st != RDMAX_INPROGRESS) {
            /* refused without a post: only because the endpoint failed */
            CHECK(st == RDMAX_ERR_ENDPOINT, "get %u: %s", n, rdmax_status_str(st));
            break;
        }
        posted++;
    }
    REQUIRE(g_w.pid > 0, "the stream failed before host 1 was crashed: %s (%d gets ok)",
            rdmax_status_str(rdmax_ep_query_error(g_ep[EP_DATA])), g_ok);
    /* The rest of the ring, the idle endpoints and crash-host's answer. */
    int64_t t1 = now_ms();
    for (;;) {
        rdmax_progress(g_ctx);
        observe();
        int out = 0;
        for (int i = 0; i < RING; i++)
            out += g_ops[i].posted && !g_ops[i].calls;
        if ((!out && t_fail[EP_CTL] && t_fail[EP_IDLE] && g_w.t_dead) || now_ms() - t1 > GUARD_MS)
            break;
    }
    g_w.on = 0;
    int64_t t_dead = g_w.t_dead;
    int crash_rc = g_w.rc;
    if (!t_dead) {
        kill(g_w.pid, SIGKILL);
        waitpid(g_w.pid, NULL, 0);
    }
    REQUIRE(t_dead && crash_rc == 0, "tests/vm/crash-host 1 %s", t_dead ? "failed" : "did not return");
    for (int i = 0; i < RING; i++)
        if (g_ops[i].posted && g_ops[i].calls != 1)
            not_once++;
    CHECK(t_fail[EP_DATA], "the busy endpoint is still connected %d ms after host 1 was crashed", GUARD_MS);
    rdmax_status e = rdmax_ep_query_error(g_ep[EP_DATA]);
    CHECK(e == RDMAX_ERR_RETRY_EXCEEDED || e == RDMAX_ERR_STALLED, "the busy endpoint failed with %s",
          rdmax_status_str(e));
    static const int idle[] = {EP_CTL, EP_IDLE};
    for (int i = 0; i < 2; i++) {
        int k = idle[i];
        CHECK(t_fail[k], "the %s endpoint (keepalive %u ms) is still connected %d ms after host 1 was crashed",
              ep_name[k], KEEPALIVE_MS, GUARD_MS);
        e = rdmax_ep_query_error(g_ep[k]);
        CHECK(!t_fail[k] || e == RDMAX_ERR_RETRY_EXCEEDED || e == RDMAX_ERR_STALLED,
              "the %s endpoint failed with %s", ep_name[k], rdmax_status_str(e));
    }
    CHECK(!not_once && !g_dup, "%d gets did not complete exactly once (%d reported twice)", not_once, g_dup);
    CHECK(!g_wrong, "%s", g_wrong_why);
    CHECK(g_err > 0, "no get failed: the crash came after the stream, the case proves nothing");
    printf("    h0: %d gets posted: %d ok (data checked), %d failed; busy endpoint: %s\n", posted, g_ok, g_err,
           rdmax_status_str(rdmax_ep_query_error(g_ep[EP_DATA])));
    printf("    h0: host 1 confirmed dead %lld ms after the crash request; the longest pause between two looks "
           "was %lld ms (a stalled vCPU: times are only as good as that)\n", (long long)(t_dead - t_req),
           (long long)g_w.max_gap);
    int64_t wd = 2 * retry_ms() + 2000;
    for (int k = 0; k < EP_NOKA; k++)
        if (t_fail[k])
            printf("    h0: %s endpoint failed %lld ms after the crash request, %lld ms after host 1 was confirmed "
                   "dead (bound: %s)\n", ep_name[k], (long long)(t_fail[k] - t_req), (long long)(t_fail[k] - t_dead),
                   k == EP_DATA ? "RC retry time" : "keepalive + RC retry time");
    printf("    h0: bounds: RC retry time %lld ms (timeout %d, retry_cnt %d), watchdog %lld ms, keepalive %u ms "
           "+ RC retry time = %lld ms (checked every 100 ms)\n", (long long)retry_ms(), ACK_TIMEOUT, RETRY_CNT,
           (long long)wd, KEEPALIVE_MS, (long long)(KEEPALIVE_MS + retry_ms()));
out:
    tl_end();

    /* The control: nothing can tell an idle endpoint without keepalive that its peer is gone. */
    tl_begin("twohost/crash: an idle endpoint without keepalive still reads connected (keepalive found the others)");
    CHECK(rdmax_ep_query_state(g_ep[EP_NOKA]) == RDMAX_EP_CONNECTED, "state %d (%s): something else than keepalive "
          "finds a dead peer of an idle endpoint", rdmax_ep_query_state(g_ep[EP_NOKA]),
          rdmax_status_str(rdmax_ep_query_error(g_ep[EP_NOKA])));
    tl_end();
}

/* After the crash: every endpoint goes, and the same context connects a fresh loopback pair that moves
   checked data both ways (send, put, get). */
static void case_healthy(void)
{
    tl_begin("twohost/after the crash: host 0's context still works (fresh loopback pair, checked data)");
    int64_t t0 = now_ms();
    for (int k = 0; k < NEPS; k++) {
        rdmax_ep_destroy(g_ep[k]);
        g_ep[k] = NULL;
    }
    CHECK(now_ms() - t0 < GUARD_MS, "destroying the endpoints took %lld ms", (long long)(now_ms() - t0));
    rdmax_ep *a = NULL, *b = NULL;
    struct rx rb;
    memset(&rb, 0, sizeof rb);
    rb.k = EP_DATA;
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.expose = g_mem;
    d.recv_cb = on_recv;
    d.user = &rb;
    REQUIRE(rdmax_ep_create_pair(g_ctx, &d, &a, &b) == RDMAX_OK, "pair: %s", rdmax_ctx_query_last_error(g_ctx));
    uint8_t *base = (uint8_t *)g_mem->addr;
    fill(base + SRC_OFF, CHUNK, S_PUT, 7);
    memset(base + DST_OFF, 0, 2 * CHUNK);
    rdmax_conn_record ib;
    rdmax_ep_query_record(b, &ib);
    rdmax_comp c;
    memset(&c, 0, sizeof c);
    REQUIRE(rdmax_put(a, base + SRC_OFF, CHUNK, g_mem, ib.regions[0].addr + DST_OFF, ib.regions[0].rkey, &c) == RDMAX_INPROGRESS,
            "put not posted");
    CHECK_ST(comp_wait(&c), RDMAX_OK);
    CHECK(check(base + DST_OFF, CHUNK, S_PUT, 7) < 0, "the put's data is wrong");
    memset(&c, 0, sizeof c);
    REQUIRE(rdmax_get(a, base + DST_OFF + CHUNK, CHUNK, g_mem, ib.regions[0].addr + DST_OFF, ib.regions[0].rkey, &c) ==
            RDMAX_INPROGRESS, "get not posted");
    CHECK_ST(comp_wait(&c), RDMAX_OK);
    CHECK(check(base + DST_OFF + CHUNK, CHUNK, S_PUT, 7) < 0, "the get's data is wrong");
    /* one message of the send stream's format: what on_recv checks on host 0 */
    uint32_t seq = 0;
    memcpy(base + STG_OFF, &seq, 4);
    fill(base + STG_OFF + 4, send_len(0) - 4, S_SEND01, 0);
    memset(&c, 0, sizeof c);
    REQUIRE(rdmax_send(b, base + STG_OFF, send_len(0), g_mem, &c) == RDMAX_INPROGRESS, "send not posted");
    CHECK_ST(comp_wait(&c), RDMAX_OK);
    t0 = now_ms();
    while (rb.count == 0 && now_ms() - t0 < GUARD_MS)
        rdmax_progress(g_ctx);
    CHECK(rb.count == 1 && !rb.bad, "%u messages received: %s", rb.count, rb.bad ? rb.why : "");
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    tl_end();
}

static void host0(void)
{
    rdmax_listener *l = NULL;
    char m[96], why[320] = "";
    unsigned long long raddr = 0;
    unsigned rkey = 0;
    int ok = 0;

    tl_begin("twohost/connect: host 1 connects %d endpoints to host 0 (rdmax_listener_create, rdmax_accept, "
             "rdmax_connect)", NEPS);
    rdmax_status st = rdmax_listener_create(g_ctx, NULL, PORT, &l);
    REQUIRE(st == RDMAX_OK, "listen on port %u: %s", PORT, rdmax_status_str(st));
    int64_t t0 = now_ms();
    for (int k = 0; k < NEPS; k++) {
        rdmax_ep_desc d;
        memset(&d, 0, sizeof d);
        d.expose = g_mem;
        d.timeout = ACK_TIMEOUT;
        d.retry_cnt = RETRY_CNT;
        d.keepalive_ms = k == EP_NOKA ? RDMAX_OFF : KEEPALIVE_MS;
        d.recv_cb = on_recv;
        d.user = &g_rx[k];
        /* A failed handshake drops that client only: call again (host 1 would then fail its connect). */
        do
            st = rdmax_accept(l, &d, &g_ep[k], GUARD_MS);
        while (st != RDMAX_OK && st != RDMAX_ERR_TIMEOUT && now_ms() - t0 < 2 * GUARD_MS);
        REQUIRE(st == RDMAX_OK, "accept %d: %s", k, rdmax_status_str(st));
        REQUIRE(msg_send(k, "ID %d", k), "sending the id of accepted endpoint %d", k);  /* host 1 waits for it */
    }
    /* Host 1 connects the next only once it has our id of the last, so the k-th accepted is its k-th:
       each says which it is. */
    REQUIRE(wait_for(have_ids, "the endpoint ids"), "no id on some endpoint");
    for (int k = 0; k < NEPS; k++)
        REQUIRE(g_rx[k].id == k, "accepted endpoint %d says it is host 1's endpoint %d", k, g_rx[k].id);
    REQUIRE(ctl_recv("BUF ", m, sizeof m) && sscanf(m + 4, "%llu %u", &raddr, &rkey) == 2, "no BUF message");
    g_raddr = raddr;
    g_rkey = rkey;
    ok = tl_end();
    if (!ok)
        goto end;

    tl_begin("twohost/send h0 -> h1: %u messages of 8 B to 4 KiB, checked on host 1", NSEND);
    REQUIRE(msg_send(EP_CTL, "SEND-GO"), "SEND-GO");
    REQUIRE(send_stream(S_SEND10, why, sizeof why), "%s", why);
    REQUIRE(ctl_recv("SEND-", m, sizeof m), "no verdict from host 1");
    CHECK(!strncmp(m, "SEND-OK", 7), "host 1: %s", m);
    ok = tl_end();
    tl_begin("twohost/send h1 -> h0: %u messages of 8 B to 4 KiB, checked on host 0", NSEND);
    REQUIRE(wait_for(have_stream, "host 1's send stream"), "%u of %u messages came", g_rx[EP_DATA].count, NSEND);
    CHECK(!g_rx[EP_DATA].bad, "%s", g_rx[EP_DATA].why);
    ok = tl_end() && ok;

    tl_begin("twohost/put h0 -> h1: %u puts of 4 KiB, checked on host 1", NPUT);
    fill((uint8_t *)g_mem->addr + SRC_OFF, DST_LEN, S_PUT, 0);
    REQUIRE(op_stream(NPUT, 1, why, sizeof why), "%s", why);
    REQUIRE(msg_send(EP_CTL, "PUT-DONE"), "PUT-DONE");
    REQUIRE(ctl_recv("PUT-", m, sizeof m), "no verdict from host 1");
    CHECK(!strncmp(m, "PUT-OK", 6), "host 1: %s", m);
    ok = tl_end() && ok;

    tl_begin("twohost/get h0 <- h1: %u gets of 4 KiB, checked on host 0", NGET);
    REQUIRE(op_stream(NGET, 0, why, sizeof why), "%s", why);
    ok = tl_end() && ok;
    if (!ok)
        goto end;

    case_crash();
    case_healthy();
    goto end;
out:
    tl_end();
end:
    rdmax_listener_destroy(l);
    for (int k = 0; k < NEPS; k++)
        rdmax_ep_destroy(g_ep[k]);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *h = getenv("RDMAX_HOST"), *dev = getenv("RDMAX_TEST_DEV0");
    if (!h || (strcmp(h, "0") && strcmp(h, "1"))) {
        printf("FAIL twohost/setup: RDMAX_HOST is not 0 or 1 (run it with tests/vm/run --topo twohost)\n");
        return 1;
    }
    g_host = atoi(h);
    for (int k = 0; k < NEPS; k++) {
        g_rx[k].k = k;
        g_rx[k].id = -1;
    }
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.device = dev;
    cd.logger.func = log_fn;
    /* RDMAX_TWOHOST_SETUP=cm: the same over rdma_cm connection setup (make soak) */
    const char *setup = getenv("RDMAX_TWOHOST_SETUP");
    if (setup && !strcmp(setup, "cm"))
        cd.conn_setup = RDMAX_SETUP_CM;
    if (g_host == 0)
        printf("INFO twohost: connection setup through %s\n", cd.conn_setup == RDMAX_SETUP_CM ? "rdma_cm" : "the TCP record");
    if (rdmax_ctx_create(&cd, &g_ctx) != RDMAX_OK ||
        rdmax_mem_alloc(g_ctx, MEM_SIZE, RDMAX_ACCESS_REMOTE_READ | RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_ANY_ENDPOINT, &g_mem) != RDMAX_OK) {
        printf("FAIL twohost/h%d/setup: device %s: %s\n", g_host, dev ? dev : "(default)",
               g_ctx ? rdmax_ctx_query_last_error(g_ctx) : "no context");
        return 1;
    }
    if (g_host == 0)
        host0();
    else
        host1();
    rdmax_mem_free(g_mem);
    rdmax_ctx_destroy(g_ctx);
    return tl_failed_total != 0;
}
