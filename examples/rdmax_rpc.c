/* rdmax_rpc - a request/response service: many clients, many endpoints each, a server that answers every
   request with a put into the client's memory, and both sides surviving the other's death.

       rdmax_rpc --server [-p PORT] [-d DEV] [--cm] [--slow-ms 1 --slow-every 10]       (server)
       rdmax_rpc --client 192.0.2.1 -e 16 -n 10000 -c 3 [--cm]                         (client 3)

   Written only against the public API of rdmax.h, with its defaults (every rdmax_ctx_desc and
   rdmax_ep_desc field zero but the callbacks, user and expose), so it is what a user of the library
   would write, and the test suite (tests/rpc_test.sh) runs it as a user would: a server, eight client
   processes of sixteen endpoints each, two of them SIGKILLed mid-run, then the server SIGKILLed under the
   others.

   The protocol. A request is a send of 64 bytes: client id, endpoint index, sequence number and a
   payload derived from the three. The client exposes one region per endpoint (ep desc expose) with a
   slot of 64 bytes per request it keeps outstanding (-w, the window): the answer to request seq is a put
   with immediate data (rdmax_put_imm) into slot seq % window, imm = seq, its payload a function of
   (client id, endpoint index, seq). So the client can check that every answer belongs to its own
   request: the immediate names a request now outstanding on that endpoint and the slot holds that
   request's answer (else "wrong").

   Flow control: a send or put with immediate data spends a credit of the peer's window (ep desc rq_depth;
   by default it starts at 2 and grows to 64 while the peer streams). The client keeps more requests
   outstanding than fit at first (window 32): what does not fit
   goes through rdmax_req_post and waits in the endpoint's pending queue. The server answers from its
   receive callback with rdmax_put_imm and queues with rdmax_req_post what finds no credit.

   The server. rdmax_listener_create, then the loop the manual gives: rdmax_progress, rdmax_accept(l, &d, &ep, 0)
   until it returns RDMAX_ERR_TIMEOUT, rdmax_wait(ctx, 100). Every accept gets a new per-endpoint struct as
   d.user, and the server trusts it to say which client the endpoint belongs to: the first request binds
   it to (client id, endpoint index), and a later request whose ids differ, or that arrives with the
   struct of another endpoint, counts as "misrouted" (it is still answered, on the endpoint it arrived
   on). ep desc state_cb reports an endpoint that failed or closed; the server destroys it there and
   records when each client's last endpoint went. --slow-ms makes every --slow-every-th receive callback
   spin for that long (a callback that does real work), which must not starve the health checks.

   The client. -e endpoints to the server, each with -w requests outstanding, until -n requests per
   endpoint are done (0: until SIGTERM or until the endpoints fail). Each request completes exactly once:
   with its answer (ok), or with an error after its endpoint failed (failed: its send completed with an
   error, or it completed but the answer never came). A request completed twice, or never, is counted.
   state_cb reports a failed endpoint; the client waits (up to 5 s) for rdmax to complete what was in
   flight with errors, then destroys the endpoint (which cancels whatever is left) and counts. SIGTERM:
   no new requests; each endpoint is disconnected (rdmax_ep_disconnect) once its requests are done.
   At the end one line, for scripts:
       rpc client=3 eps=16 sent=N ok=N failed=N failed_op=N failed_noanswer=N canceled=N wrong=0 twice=0
           never=0 late=0 dead_eps=16 dead_first_ms=T dead_last_ms=T end=dead|done|stopped
   (times are CLOCK_REALTIME in ms; failed_op: the send reported an error, canceled: of those, by our
   rdmax_ep_destroy; late: an answer that came after its request had failed). Exit status 0 when wrong,
   twice and never are 0 and ok + failed == sent.

   Status for scripts: --status FILE is rewritten (atomically) every 200 ms and on every endpoint change:
   server "live= accepted= gone= requests= answered= answer_failed= misrouted= bad= slow= rss_kb=",
   client "connected= sent= ok= failed= dead=". The server prints "rpc server: live=N rss_kb=R pool_kb=P
   t_ms=T" (P: the shared receive pool's buffers, which grow with the windows and stay) whenever the count of live endpoints reaches --mark N or drops to 0, and "rpc server: client=C gone
   eps=K first_ms=T last_ms=T state=... reason=..." when the last endpoint of client C went.
*/
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#include "../rdmax.h"

#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_PORT 18600
#define DEFAULT_EPS 16
#define DEFAULT_WINDOW 32
#define DEFAULT_SLOW_EVERY 1
#define MSG_SIZE 64
#define CONNECT_MS 60000
#define MAX_CLIENTS 4096
#define DEAD_GRACE_MS 5000      /* a failed endpoint's operations get this long to complete on their own */
#define REQ_MAGIC 0x52504351u   /* "RPCQ" */
#define ANS_MAGIC 0x52504341u   /* "RPCA" */

struct opts {
    int server;
    const char *host;
    unsigned port;
    const char *device;
    int cm;
    unsigned eps, window, client_id;
    uint64_t reqs;
    unsigned slow_ms, slow_every, mark;
    const char *status;
};

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

/* Rewrites path atomically (a temporary file, then rename), so a script never reads half a line. */
static void write_status(const char *path, const char *text)
{
    char tmp[4096];
    if (!path || snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return;
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    fputs(text, f);
    if (fclose(f) == 0)
        rename(tmp, path);
}

/* ---- the messages ---- */
/* Both are 64 bytes: magic, client, endpoint, seq (little-endian u32 each as this host stores them: both
   ends run the same program) and 48 bytes derived from the three and the magic. */
struct msg {
    uint32_t magic, client, ep, seq;
    uint8_t payload[MSG_SIZE - 16];
};

static void fill_payload(struct msg *m)
{
    uint64_t x = ((uint64_t)m->magic << 32) ^ ((uint64_t)m->client << 40) ^ ((uint64_t)m->ep << 20) ^ m->seq;
    for (size_t i = 0; i < sizeof m->payload; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        m->payload[i] = (uint8_t)(x >> 56);
    }
}

static void make_msg(struct msg *m, uint32_t magic, uint32_t client, uint32_t ep, uint32_t seq)
{
    m->magic = magic;
    m->client = client;
    m->ep = ep;
    m->seq = seq;
    fill_payload(m);
}

/* 1: m is a well-formed message of this magic (its payload matches its ids). */
static int check_msg(const struct msg *m, uint32_t magic)
{
    struct msg want;
    if (m->magic != magic)
        return 0;
    make_msg(&want, magic, m->client, m->ep, m->seq);
    return memcmp(want.payload, m->payload, sizeof want.payload) == 0;
}

static const char *state_str(rdmax_ep_state s)
{
    return s == RDMAX_EP_ERROR ? "error" : s == RDMAX_EP_CLOSED ? "closed" : s == RDMAX_EP_CONNECTED ? "connected" : "init";
}

/* ---- server ---- */
/* One per accepted endpoint (d.user of the accept that returned it). */
struct sep {
    rdmax_ep *ep;            /* set when rdmax_accept returns it */
    int client, epi;         /* -1: no request yet */
    struct sep *prev, *next; /* the live list */
};

/* An answer in flight: its bytes must stay until its comp completes. */
struct sans {
    rdmax_req req;
    rdmax_comp comp;
    struct msg m;
};

static struct {
    const struct opts *o;
    rdmax_ctx *ctx;
    struct sep live;                 /* list head */
    uint64_t live_n, accepted, gone, requests, answered, answer_failed, answer_refused, misrouted, bad, slow;
    uint64_t unbound_gone;
    int status_dirty;
    struct {
        int live, gone;
        int64_t first_ms, last_ms;
        rdmax_ep_state state;
        rdmax_status reason;
    } cl[MAX_CLIENTS];
} S;

static void server_status(void)
{
    char buf[512];
    snprintf(buf, sizeof buf,
             "live=%" PRIu64 " accepted=%" PRIu64 " gone=%" PRIu64 " requests=%" PRIu64 " answered=%" PRIu64
             " answer_failed=%" PRIu64 " misrouted=%" PRIu64 " bad=%" PRIu64 " slow=%" PRIu64 " rss_kb=%ld\n",
             S.live_n, S.accepted, S.gone, S.requests, S.answered, S.answer_failed + S.answer_refused,
             S.misrouted, S.bad, S.slow, rss_kb());
    write_status(S.o->status, buf);
    S.status_dirty = 0;
}

static void server_mark(void)
{
    if ((S.o->mark && S.live_n == S.o->mark) || S.live_n == 0) {
        rdmax_recv_pool_info p;
        long pool_kb = rdmax_ctx_query_recv_pool(S.ctx, 0, &p) ? (long)((uint64_t)p.buffers * p.recv_size / 1024) : 0;
        printf("rpc server: live=%" PRIu64 " rss_kb=%ld pool_kb=%ld t_ms=%" PRId64 "\n", S.live_n, rss_kb(), pool_kb,
               now_ms());
        fflush(stdout);
    }
}

static void on_answered(rdmax_comp *c, rdmax_status st)
{
    struct sans *a = c->user;
    if (st == RDMAX_OK)
        S.answered++;
    else
        S.answer_failed++;
    free(a);
}

static void server_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    struct sep *u = user;
    struct msg q;
    S.requests++;
    if (len != sizeof q) {
        S.bad++;
        return;
    }
    memcpy(&q, data, sizeof q);
    if (!check_msg(&q, REQ_MAGIC) || q.client >= MAX_CLIENTS) {
        S.bad++;
        return;
    }
    /* Is this the endpoint (and client) the accept's user struct says? */
    if (u->ep && u->ep != ep) {
        S.misrouted++;
    } else if (u->client < 0) {
        u->client = (int)q.client;
        u->epi = (int)q.ep;
        S.cl[q.client].live++;
    } else if ((uint32_t)u->client != q.client || (uint32_t)u->epi != q.ep) {
        S.misrouted++;
    }
    if (S.o->slow_ms && S.requests % S.o->slow_every == 0) {
        /* a callback that does real work: spins, as computation would */
        int64_t end = mono_ns() + (int64_t)S.o->slow_ms * 1000000;
        while (mono_ns() < end)
            ;
        S.slow++;
    }
    const rdmax_rbuf *r = rdmax_ep_query_remote(ep, 0);
    struct sans *a = malloc(sizeof *a);
    if (!r || r->len < MSG_SIZE || !a) {
        free(a);
        S.answer_refused++;
        return;
    }
    memset(a, 0, sizeof *a);
    make_msg(&a->m, ANS_MAGIC, q.client, q.ep, q.seq);
    a->comp.cb = on_answered;
    a->comp.user = a;
    uint64_t raddr = r->addr + (uint64_t)(q.seq % (r->len / MSG_SIZE)) * MSG_SIZE;
    rdmax_status st = rdmax_put_imm(ep, &a->m, sizeof a->m, NULL, raddr, r->rkey, q.seq, &a->comp);
    if (st == RDMAX_ERR_NO_RESOURCE) {
        /* no credit (or answers already wait): the endpoint's pending queue posts it in order */
        a->req.comp = &a->comp;
        a->req.op = RDMAX_OP_PUT_IMM;
        a->req.buf = &a->m;
        a->req.len = sizeof a->m;
        a->req.raddr = raddr;
        a->req.rkey = r->rkey;
        a->req.arg0 = q.seq;
        st = rdmax_req_post(ep, &a->req);
    }
    if (st != RDMAX_INPROGRESS) {  /* the endpoint failed: its state_cb comes */
        free(a);
        S.answer_refused++;
    }
}

static void server_state(rdmax_ep *ep, rdmax_ep_state state, rdmax_status reason, void *user)
{
    struct sep *u = user;
    int64_t t = now_ms();
    int mine = u->ep == ep, c = u->client;
    rdmax_ep_destroy(ep);  /* answers in flight complete now (RDMAX_ERR_CANCELED) */
    S.gone++;
    if (!mine) {           /* not the endpoint this struct was accepted with: leave the struct alone */
        S.misrouted++;
        return;
    }
    u->prev->next = u->next;
    u->next->prev = u->prev;
    S.live_n--;
    free(u);
    if (c < 0) {
        S.unbound_gone++;
    } else {
        if (S.cl[c].gone++ == 0)
            S.cl[c].first_ms = t, S.cl[c].state = state, S.cl[c].reason = reason;
        S.cl[c].last_ms = t;
        if (--S.cl[c].live == 0) {
            printf("rpc server: client=%d gone eps=%d first_ms=%" PRId64 " last_ms=%" PRId64
                   " state=%s reason=%d (%s)\n", c, S.cl[c].gone, S.cl[c].first_ms, S.cl[c].last_ms,
                   state_str(S.cl[c].state), (int)S.cl[c].reason, rdmax_status_str(S.cl[c].reason));
            S.cl[c].gone = 0;
        }
    }
    server_mark();
    S.status_dirty = 1;
}

/* The context both roles run on: the device and connection setup from the options. */
static rdmax_ctx *open_ctx(const struct opts *o)
{
    rdmax_ctx_desc cd = {0};
    cd.device = o->device;
    cd.conn_setup = o->cm ? RDMAX_SETUP_CM : RDMAX_SETUP_TCP;
    rdmax_ctx *ctx;
    rdmax_status st = rdmax_ctx_create(&cd, &ctx);
    if (st != RDMAX_OK) {
        fprintf(stderr, "rdmax_ctx_create: %s\n", rdmax_status_str(st));
        return NULL;
    }
    return ctx;
}

static int run_server(const struct opts *o)
{
    rdmax_ctx *ctx = open_ctx(o);
    if (!ctx)
        return 1;
    rdmax_status st;
    S.o = o;
    S.ctx = ctx;
    S.live.next = S.live.prev = &S.live;
    rdmax_listener *l;
    st = rdmax_listener_create(ctx, NULL, (uint16_t)o->port, &l);
    if (st != RDMAX_OK) {
        fprintf(stderr, "rdmax_listener_create: %s\n", rdmax_status_str(st));
        rdmax_ctx_destroy(ctx);
        return 1;
    }
    printf("rpc server: listening on port %u (%s) rss_kb=%ld t_ms=%" PRId64 "\n", rdmax_listener_query_port(l),
           o->cm ? "rdma_cm" : "TCP", rss_kb(), now_ms());
    fflush(stdout);
    server_status();

    rdmax_ep_desc d = {0};
    d.recv_cb = server_recv;
    d.state_cb = server_state;
    struct sep *next = calloc(1, sizeof *next);  /* the user struct of the next accept */
    int64_t last_status = 0;
    while (!stop_flag && next) {
        rdmax_progress(ctx);
        for (;;) {
            rdmax_ep *ep;
            next->client = next->epi = -1;
            d.user = next;
            st = rdmax_accept(l, &d, &ep, 0);
            if (st == RDMAX_ERR_TIMEOUT)
                break;
            if (st != RDMAX_OK) {  /* that client's handshake failed; the listener goes on */
                fprintf(stderr, "rpc server: rdmax_accept: %s\n", rdmax_status_str(st));
                continue;
            }
            if (next->ep && next->ep != ep)
                S.misrouted++;
            next->ep = ep;
            next->next = &S.live;
            next->prev = S.live.prev;
            S.live.prev->next = next;
            S.live.prev = next;
            S.live_n++;
            S.accepted++;
            server_mark();
            S.status_dirty = 1;
            if (!(next = calloc(1, sizeof *next)))
                break;
        }
        rdmax_wait(ctx, 100);
        int64_t t = now_ms();
        if (S.status_dirty || t - last_status >= 200) {
            server_status();
            last_status = t;
        }
    }
    server_status();
    printf("rpc server: live=%" PRIu64 " accepted=%" PRIu64 " gone=%" PRIu64 " requests=%" PRIu64
           " answered=%" PRIu64 " answer_failed=%" PRIu64 " misrouted=%" PRIu64 " bad=%" PRIu64 " slow=%" PRIu64
           "\n", S.live_n, S.accepted, S.gone, S.requests, S.answered, S.answer_failed + S.answer_refused,
           S.misrouted, S.bad, S.slow);
    while (S.live.next != &S.live) {
        struct sep *u = S.live.next;
        u->prev->next = u->next;
        u->next->prev = u->prev;
        rdmax_ep_destroy(u->ep);
        free(u);
    }
    free(next);
    rdmax_ctx_destroy(ctx);
    return S.misrouted || S.bad ? 1 : 0;
}

/* ---- client ---- */
enum { SLOT_FREE, SLOT_WAIT, SLOT_OK, SLOT_FAILED };

struct creq {
    rdmax_req req;
    rdmax_comp comp;
    struct cep *e;
    uint32_t seq;
    uint8_t state;         /* SLOT_* */
    uint8_t comp_seen, answer_seen;
    rdmax_status comp_status;
    struct msg m;
};

struct cep {
    rdmax_ep *ep;
    unsigned idx;
    rdmax_mem *mem;        /* the answers land here: window slots of MSG_SIZE */
    struct creq *slots;
    uint32_t next_seq, inflight;
    uint32_t owed;         /* requests whose comp has not reported yet */
    int dead;              /* state_cb said it failed */
    int64_t dead_ms;
    int gone;              /* destroyed */
};

static struct {
    const struct opts *o;
    struct cep *eps;
    uint64_t sent, ok, failed, failed_op, failed_noanswer, canceled, wrong, twice, never, late;
    unsigned connected, dead_eps;
    int64_t dead_first_ms, dead_last_ms;
} C;

static void finish(struct creq *q, int ok)
{
    q->state = ok ? SLOT_OK : SLOT_FAILED;
    q->e->inflight--;
    if (ok)
        C.ok++;
    else
        C.failed++;
}

static void on_sent(rdmax_comp *c, rdmax_status st)
{
    struct creq *q = c->user;
    if (q->comp_seen++) {
        C.twice++;
        return;
    }
    q->e->owed--;
    q->comp_status = st;
    if (q->state != SLOT_WAIT)
        return;
    if (q->answer_seen)
        finish(q, 1);  /* (an error here after the answer came: delivered, its ack lost) */
    else if (st != RDMAX_OK) {
        C.failed_op++;
        if (st == RDMAX_ERR_CANCELED)
            C.canceled++;
        finish(q, 0);
    }
}

static void client_imm(rdmax_ep *ep, uint32_t imm, size_t len, void *user)
{
    struct cep *e = user;
    (void)ep;
    struct creq *q = &e->slots[imm % C.o->window];
    const struct msg *a = (const struct msg *)((const char *)e->mem->addr + (size_t)(imm % C.o->window) * MSG_SIZE);
    if (q->seq != imm || q->state == SLOT_FREE) {
        C.wrong++;
        return;
    }
    if (q->state == SLOT_FAILED) {
        C.late++;
        return;
    }
    if (q->answer_seen++) {
        C.twice++;
        return;
    }
    if (len != MSG_SIZE || !check_msg(a, ANS_MAGIC) || a->client != C.o->client_id || a->ep != e->idx ||
        a->seq != imm) {
        C.wrong++;
        if (q->state == SLOT_WAIT)
            finish(q, 0);
        return;
    }
    if (q->state == SLOT_WAIT && q->comp_seen)
        finish(q, 1);
}

static void client_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep, (void)data, (void)len, (void)user;
    C.wrong++;  /* the server never sends */
}

static void client_state(rdmax_ep *ep, rdmax_ep_state state, rdmax_status reason, void *user)
{
    struct cep *e = user;
    (void)ep;
    if (e->dead || (state == RDMAX_EP_CLOSED && reason == RDMAX_OK))
        return;  /* (RDMAX_OK: our own rdmax_ep_disconnect, told once it returned) */
    e->dead = 1;
    e->dead_ms = now_ms();
    C.dead_eps++;
    if (!C.dead_first_ms)
        C.dead_first_ms = e->dead_ms;
    C.dead_last_ms = e->dead_ms;
}

/* Destroys a failed endpoint (cancelling what rdmax has not completed yet) and completes every request
   the answer of which never came. */
static void client_reap(struct cep *e)
{
    rdmax_ep_destroy(e->ep);
    e->ep = NULL;
    e->gone = 1;
    for (unsigned i = 0; i < C.o->window; i++) {
        struct creq *q = &e->slots[i];
        if (q->state != SLOT_WAIT)
            continue;
        if (!q->comp_seen) {
            C.never++;  /* rdmax_ep_destroy completes every comp: this is a broken contract */
            q->state = SLOT_FAILED;
            e->inflight--;
        } else {
            C.failed_noanswer++;
            finish(q, 0);
        }
    }
}

/* Starts the next request on e: rdmax_send, or rdmax_req_post when there is no room (the pending queue).
   0: started; -1: the endpoint refused (it failed: its state_cb comes). */
static int client_start(struct cep *e)
{
    uint32_t seq = e->next_seq;
    struct creq *q = &e->slots[seq % C.o->window];
    if (q->state == SLOT_WAIT)
        return 1;
    memset(q, 0, sizeof *q);
    q->e = e;
    q->seq = seq;
    make_msg(&q->m, REQ_MAGIC, C.o->client_id, e->idx, seq);
    q->comp.cb = on_sent;
    q->comp.user = q;
    rdmax_status st = rdmax_send(e->ep, &q->m, sizeof q->m, NULL, &q->comp);
    if (st == RDMAX_ERR_NO_RESOURCE) {
        q->req.comp = &q->comp;
        q->req.op = RDMAX_OP_SEND;
        q->req.buf = &q->m;
        q->req.len = sizeof q->m;
        st = rdmax_req_post(e->ep, &q->req);
    }
    if (st != RDMAX_INPROGRESS)
        return -1;
    q->state = SLOT_WAIT;
    e->next_seq++;
    e->inflight++;
    e->owed++;
    C.sent++;
    return 0;
}

static void client_status(void)
{
    char buf[256];
    snprintf(buf, sizeof buf,
             "connected=%u sent=%" PRIu64 " ok=%" PRIu64 " failed=%" PRIu64 " dead=%u wrong=%" PRIu64 "\n",
             C.connected, C.sent, C.ok, C.failed, C.dead_eps, C.wrong);
    write_status(C.o->status, buf);
}

static int run_client(const struct opts *o)
{
    rdmax_ctx *ctx = open_ctx(o);
    if (!ctx)
        return 1;
    rdmax_status st;
    C.o = o;
    C.eps = calloc(o->eps, sizeof *C.eps);
    if (!C.eps)
        return 1;
    client_status();
    int rc = 0;
    for (unsigned i = 0; i < o->eps; i++) {
        struct cep *e = &C.eps[i];
        e->idx = i;
        e->slots = calloc(o->window, sizeof *e->slots);
        st = e->slots ? rdmax_mem_alloc(ctx, (size_t)o->window * MSG_SIZE, RDMAX_ACCESS_REMOTE_WRITE, &e->mem)
                      : RDMAX_ERR_NO_MEMORY;
        if (st != RDMAX_OK) {
            fprintf(stderr, "rpc client=%u: memory for endpoint %u: %s\n", o->client_id, i, rdmax_status_str(st));
            return 1;
        }
        memset(e->mem->addr, 0, e->mem->len);
        rdmax_ep_desc d = {0};
        d.imm_cb = client_imm;
        d.recv_cb = client_recv;
        d.state_cb = client_state;
        d.user = e;
        d.expose = e->mem;
        st = rdmax_connect(ctx, o->host, (uint16_t)o->port, &d, &e->ep, CONNECT_MS);
        if (st != RDMAX_OK) {
            fprintf(stderr, "rpc client=%u: rdmax_connect %s:%u (endpoint %u): %s\n", o->client_id, o->host,
                    o->port, i, rdmax_status_str(st));
            return 1;
        }
        C.connected++;
    }
    printf("rpc client=%u: %u endpoints connected t_ms=%" PRId64 "\n", o->client_id, o->eps, now_ms());
    fflush(stdout);
    client_status();

    int64_t last_status = 0;
    const char *end = "done";
    for (;;) {
        int active = 0, posted = 0;
        for (unsigned i = 0; i < o->eps; i++) {
            struct cep *e = &C.eps[i];
            if (e->gone)
                continue;
            active = 1;
            if (e->dead) {
                /* give rdmax a moment to complete what was in flight with errors on its own (the
                   requests that were answered, or whose answer will never come, owe nothing) */
                if (e->owed == 0 || now_ms() - e->dead_ms > DEAD_GRACE_MS)
                    client_reap(e);
                continue;
            }
            if (stop_flag || (o->reqs && e->next_seq >= o->reqs)) {
                if (e->inflight == 0) {  /* all answered: say goodbye */
                    rdmax_ep_disconnect(e->ep, 2000);
                    rdmax_ep_destroy(e->ep);
                    e->ep = NULL;
                    e->gone = 1;
                }
                continue;
            }
            while (e->inflight < o->window && (!o->reqs || e->next_seq < o->reqs) && client_start(e) == 0)
                posted = 1;
        }
        if (!active)
            break;
        if (rdmax_progress(ctx) == 0 && !posted)
            rdmax_wait(ctx, 50);
        int64_t t = now_ms();
        if (t - last_status >= 200) {
            client_status();
            last_status = t;
        }
    }
    if (C.dead_eps)
        end = "dead";
    else if (stop_flag)
        end = "stopped";
    client_status();
    printf("rpc client=%u eps=%u sent=%" PRIu64 " ok=%" PRIu64 " failed=%" PRIu64 " failed_op=%" PRIu64
           " failed_noanswer=%" PRIu64 " canceled=%" PRIu64 " wrong=%" PRIu64 " twice=%" PRIu64 " never=%" PRIu64
           " late=%" PRIu64 " dead_eps=%u dead_first_ms=%" PRId64 " dead_last_ms=%" PRId64 " end=%s\n",
           o->client_id, o->eps, C.sent, C.ok, C.failed, C.failed_op, C.failed_noanswer, C.canceled, C.wrong,
           C.twice, C.never, C.late, C.dead_eps, C.dead_first_ms, C.dead_last_ms, end);
    fflush(stdout);
    if (C.wrong || C.twice || C.never || C.ok + C.failed != C.sent)
        rc = 1;
    for (unsigned i = 0; i < o->eps; i++) {
        rdmax_mem_free(C.eps[i].mem);
        free(C.eps[i].slots);
    }
    free(C.eps);
    rdmax_ctx_destroy(ctx);
    return rc;
}

/* ---- options ---- */
static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s --server [options]            (serve)\n"
            "       %s --client HOST [options]       (connect to HOST, send requests, check every answer)\n"
            "  -p, --port=PORT         port (TCP; rdma_cm's with --cm)                        [%d]\n"
            "  -d, --device=NAME       RDMA device                       [$RDMAX_DEVICE or first active]\n"
            "      --cm                set connections up through rdma_cm, not rdmax's TCP record\n"
            "      --status=FILE       rewrite FILE with the counters every 200 ms            [none]\n"
            "  server:\n"
            "      --slow-ms=MS        the receive callback spins MS ms ...                   [0: never]\n"
            "      --slow-every=K      ... on every K-th request                              [%d]\n"
            "      --mark=N            print a line whenever N endpoints are live             [none]\n"
            "  client:\n"
            "  -e, --endpoints=N       endpoints to the server                                [%d]\n"
            "  -w, --window=N          requests outstanding per endpoint (beyond the credits: queued) [%d]\n"
            "  -n, --requests=N        requests per endpoint, then disconnect (0: until SIGTERM, or until\n"
            "                          the endpoints fail)                                    [0]\n"
            "  -c, --client-id=ID      this client's id, 0..%d (in every request and answer) [0]\n"
            "  -h, --help              this text\n",
            prog, prog, DEFAULT_PORT, DEFAULT_SLOW_EVERY, DEFAULT_EPS, DEFAULT_WINDOW, MAX_CLIENTS - 1);
}

static int parse_num(const char *opt, const char *v, unsigned long long min, unsigned long long max,
                     unsigned long long *out)
{
    char *end;
    unsigned long long x = strtoull(v, &end, 10);
    if (end == v || *end || *v == '-' || x < min || x > max) {
        fprintf(stderr, "option %s: '%s' is not a number in %llu..%llu\n", opt, v, min, max);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
    static const struct option lo[] = {
        {"server", no_argument, 0, 'S'},         {"client", required_argument, 0, 'C'},
        {"port", required_argument, 0, 'p'},     {"device", required_argument, 0, 'd'},
        {"cm", no_argument, 0, 'M'},             {"status", required_argument, 0, 's'},
        {"slow-ms", required_argument, 0, 'W'},  {"slow-every", required_argument, 0, 'K'},
        {"mark", required_argument, 0, 'm'},     {"endpoints", required_argument, 0, 'e'},
        {"window", required_argument, 0, 'w'},   {"requests", required_argument, 0, 'n'},
        {"client-id", required_argument, 0, 'c'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->port = DEFAULT_PORT;
    o->eps = DEFAULT_EPS;
    o->window = DEFAULT_WINDOW;
    o->slow_every = DEFAULT_SLOW_EVERY;
    int c;
    unsigned long long v;
    while ((c = getopt_long(argc, argv, "p:d:e:w:n:c:h", lo, NULL)) != -1) {
        switch (c) {
        case 'S': o->server = 1; break;
        case 'C': o->host = optarg; break;
        case 'p': if (parse_num("-p", optarg, 0, 65535, &v)) return -1; o->port = (unsigned)v; break;
        case 'd': o->device = optarg; break;
        case 'M': o->cm = 1; break;
        case 's': o->status = optarg; break;
        case 'W': if (parse_num("--slow-ms", optarg, 0, 10000, &v)) return -1; o->slow_ms = (unsigned)v; break;
        case 'K': if (parse_num("--slow-every", optarg, 1, 1u << 30, &v)) return -1; o->slow_every = (unsigned)v; break;
        case 'm': if (parse_num("--mark", optarg, 1, 1u << 30, &v)) return -1; o->mark = (unsigned)v; break;
        case 'e': if (parse_num("-e", optarg, 1, 4096, &v)) return -1; o->eps = (unsigned)v; break;
        case 'w': if (parse_num("-w", optarg, 1, 65536, &v)) return -1; o->window = (unsigned)v; break;
        case 'n': if (parse_num("-n", optarg, 0, 1ull << 32, &v)) return -1; o->reqs = v; break;
        case 'c': if (parse_num("-c", optarg, 0, MAX_CLIENTS - 1, &v)) return -1; o->client_id = (unsigned)v; break;
        case 'h': usage(stdout, argv[0]); exit(0);
        default: usage(stderr, argv[0]); return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (o->server == !!o->host) {
        fprintf(stderr, "say --server or --client HOST (one of them)\n");
        usage(stderr, argv[0]);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (parse(argc, argv, &o))
        return 2;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;  /* no SA_RESTART: rdmax_wait's poll returns at once */
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    setvbuf(stdout, NULL, _IOLBF, 0);
    return o.server ? run_server(&o) : run_client(&o);
}
