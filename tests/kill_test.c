/* Killed peers, soaked: N rounds in which a peer process is SIGKILLed at a random point of its life,
   against one surviving context that lives through all rounds.

   Each round the survivor (this process) forks and execs a peer (this program with --peer) that opens
   its own context, connects through the survivor's listener, streams numbered sends to the survivor,
   posts a backlog of 16 KiB puts into the survivor's buffer, flushes and destroys everything. The peer reports each phase on a pipe (connect, stream, flush,
   destroy); the survivor picks a phase and a delay at random (from the seed, printed), and SIGKILLs the
   peer that long after it entered that phase. Meanwhile the survivor accepts, then keeps a window of
   checked operations in flight to the peer: gets of the peer's pattern (data checked), fadds on the
   peer's counter (each fetched value one more than the last), puts, sends, and unsignaled puts between
   them; its receive callback checks the peer's sends (in order, pattern intact).
   Checked every round:
   - the survivor never hangs (every wait has a guard of GUARD_MS) and never crashes;
   - its accept returns (an endpoint, or the handshake's error, within the listener's handshake bound);
   - once the peer is dead its endpoint fails, and every operation completes exactly once (a second
     completion, or one never seen, is a failure), successes with the right data;
   - rdmax_ep_flush of the failed endpoint returns its error at once (not RDMAX_ERR_TIMEOUT), with
     nothing left outstanding (and, first, a directed case where its newest request ran unsignaled);
   - nothing leaks across rounds: from the second round on, after each round, the survivor's open file
     descriptors (/proc/self/fd), the devices' QPs, CQs, MRs and PDs as the kernel counts them (`rdma
     resource show`, after the peer was reaped) and its RSS equal those after the first round (RSS: within
     RSS_SLACK_KB, since malloc keeps some pages), the receive pool's chunks apart: it may keep one more.
   Usage: kill_test [-n ROUNDS=10] [-s SEED]   (needs $RDMAX_TEST_DEV0 and $RDMAX_TEST_ADDR0; the peer
   runs on $RDMAX_TEST_DEV1 if set) */
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#include "../rdmax.h"
#include "testlib.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* operations posted on ep and not yet completed */
static uint32_t ep_outstanding(const rdmax_ep *ep)
{
    rdmax_ep_resources i;
    rdmax_ep_query_resources(ep, &i);
    return i.outstanding;
}

#define GUARD_MS 60000
#define WINDOW 8
#define MSG 256
#define BUF 65536
#define RSS_SLACK_KB 2048

/* The verbs QP under ep (rdmax_ep_query_resources), for fault injection. */
static struct ibv_qp *ep_qp(const rdmax_ep *ep)
{
    rdmax_ep_resources i;
    rdmax_ep_query_resources(ep, &i);
    return i.qp;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t g_rng;
static uint64_t rnd(uint64_t n)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng % n;
}

static unsigned char pat(uint32_t seq, size_t i) { return (unsigned char)(seq * 29u + i * 13u + 5); }

static void quiet_log(rdmax_log_level lvl, rdmax_log_item item, const char *msg, void *user)
{
    (void)lvl, (void)item, (void)msg, (void)user;  /* the failures are expected; the checks say what matters */
}

static rdmax_ctx *open_ctx(const char *dev, uint32_t handshake_ms)
{
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    d.device = dev;
    d.logger.func = quiet_log;
    d.handshake_ms = handshake_ms;
    rdmax_ctx *c = NULL;
    return rdmax_ctx_create(&d, &c) == RDMAX_OK ? c : NULL;
}

/* ================================ the peer ============================================================ */
static int g_phase_fd = -1;
static void phase(char p)
{
    if (write(g_phase_fd, &p, 1) != 1)
        _exit(3);
}

static void peer_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep, (void)data, (void)len, (void)user;
}

static int peer_main(const char *addr, int port, int fd)
{
    g_phase_fd = fd;
    const char *dev = getenv("RDMAX_TEST_DEV1") ? getenv("RDMAX_TEST_DEV1") : getenv("RDMAX_TEST_DEV0");
    rdmax_ctx *c = open_ctx(dev, 0);
    if (!c)
        return 2;
    rdmax_mem *m = NULL;
    if (rdmax_mem_alloc(c, BUF, RDMAX_ACCESS_REMOTE_READ | RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_REMOTE_ATOMIC,
                        &m) != RDMAX_OK)
        return 2;
    for (size_t i = 0; i < BUF; i++)
        ((unsigned char *)m->addr)[i] = pat(0, i);
    memset(m->addr, 0, 8);  /* the fadd counter */
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.expose = m;
    d.recv_cb = peer_recv;
    rdmax_ep *ep = NULL;
    phase('C');
    if (rdmax_connect(c, addr, (uint16_t)port, &d, &ep, 20000) != RDMAX_OK)
        return 2;
    phase('S');
    unsigned char msg[MSG];
    for (uint32_t seq = 0; seq < 400;) {
        memcpy(msg, &seq, 4);
        for (size_t i = 4; i < MSG; i++)
            msg[i] = pat(seq, i);
        rdmax_status st = rdmax_send(ep, msg, MSG, NULL, NULL);
        if (st == RDMAX_OK || st == RDMAX_INPROGRESS)
            seq++;
        else if (st != RDMAX_ERR_NO_RESOURCE)
            break;
        rdmax_progress(c);
    }
    /* a backlog of 16 KiB puts into the survivor's buffer, so that the flush has something to wait for */
    const rdmax_rbuf *rr = rdmax_ep_query_remote(ep, 0);
    for (int i = 0; i < 64 && rr && rr->len >= BUF;) {
        rdmax_status st = rdmax_put(ep, m->addr, BUF / 4, m, rr->addr + (uint64_t)(i % 4) * (BUF / 4),
                                    rr->rkey, NULL);
        if (st == RDMAX_OK || st == RDMAX_INPROGRESS)
            i++;
        else if (st != RDMAX_ERR_NO_RESOURCE)
            break;
        rdmax_progress(c);
    }
    phase('F');
    rdmax_ep_flush(ep, 5000);
    phase('D');
    rdmax_ep_destroy(ep);
    rdmax_mem_free(m);
    rdmax_ctx_destroy(c);
    phase('E');
    pause();  /* the kill always finds a live process */
    return 0;
}

/* ================================ the survivor ======================================================== */
struct surv;
struct sop {
    rdmax_comp comp;
    struct surv *s;
    int kind, busy, slot;
    uint32_t seq;
};

struct surv {
    rdmax_ctx *c;
    rdmax_mem *lmem;
    rdmax_ep *ep;
    rdmax_rbuf rb;
    struct sop ops[WINDOW];
    uint32_t posted, completed, ok, errors, twice, bad_data, unsignaled;
    uint64_t last_fadd;
    int fadd_any;
    uint32_t rx_next, rx_count, rx_bad;
};

static void surv_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep;
    struct surv *s = (struct surv *)user;
    uint32_t seq;
    int good = len == MSG;
    if (good) {
        memcpy(&seq, data, 4);
        good = seq == s->rx_next;
        for (size_t i = 4; good && i < MSG; i++)
            good = ((unsigned char *)data)[i] == pat(seq, i);
        s->rx_next = seq + 1;
    }
    s->rx_count++;
    s->rx_bad += !good;
}

static void surv_done(rdmax_comp *c, rdmax_status st)
{
    struct sop *o = (struct sop *)c->user;
    struct surv *s = o->s;
    if (!o->busy) {
        s->twice++;
        return;
    }
    o->busy = 0;
    s->completed++;
    if (st != RDMAX_OK) {
        s->errors++;
        return;
    }
    s->ok++;
    unsigned char *l = (unsigned char *)s->lmem->addr + (size_t)o->slot * MSG;
    if (o->kind == 1) {  /* get: the peer's pattern */
        for (size_t i = 0; i < MSG; i++)
            if (l[i] != pat(0, (size_t)(MSG + o->slot * MSG) + i)) {
                s->bad_data++;
                break;
            }
    } else if (o->kind == 2) {  /* fadd: one more than the last (only we add, and RC keeps order) */
        uint64_t v;
        memcpy(&v, l, 8);
        if (s->fadd_any && v != s->last_fadd + 1)
            s->bad_data++;
        s->last_fadd = v;
        s->fadd_any = 1;
    }
}

static rdmax_status surv_post(struct surv *s, struct sop *o)
{
    unsigned char *l = (unsigned char *)s->lmem->addr + (size_t)o->slot * MSG;
    uint64_t r = s->rb.addr + MSG + (uint64_t)o->slot * MSG;  /* the first MSG bytes hold the counter */
    switch (o->kind) {
    case 0: memset(l, 0x5a, MSG); return rdmax_put(s->ep, l, MSG, s->lmem, r + BUF / 2, s->rb.rkey, &o->comp);
    case 1: memset(l, 0, MSG); return rdmax_get(s->ep, l, MSG, s->lmem, r, s->rb.rkey, &o->comp);
    case 2: return rdmax_fadd(s->ep, (uint64_t *)(void *)l, s->lmem, s->rb.addr, s->rb.rkey, 1, &o->comp);
    default: memset(l, 0x33, MSG); return rdmax_send(s->ep, l, MSG, s->lmem, &o->comp);
    }
}

/* resources as the kernel counts them on every device: pd, cq, qp, mr */
struct res {
    long fds, rss_kb, pd, cq, qp, mr;
    long chunks, chunk_kb;  /* the receive pool's, in mr and rss_kb too (see res_read) */
};

/* The survivor's resources. A receive pool keeps up to a chunk above its target (given back only once
   more than that, see RECEIVING), so a window grown in one round may leave one more chunk, one MR,
   for good: what is compared is mr and RSS without the pool's chunks, which are reported apart. */
static void res_read(rdmax_ctx *c, struct res *r)
{
    memset(r, 0, sizeof *r);
    rdmax_recv_pool_info pi;
    if (rdmax_ctx_query_recv_pool(c, 0, &pi) && pi.chunks > 0) {
        r->chunks = pi.chunks;
        r->chunk_kb = (long)((uint64_t)pi.buffers * pi.recv_size / 1024);
    }
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        r->fds += e->d_name[0] != '.';
    if (d)
        closedir(d);
    r->fds--;  /* the opendir itself */
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        sscanf(line, "VmRSS: %ld", &r->rss_kb);
    if (f)
        fclose(f);
    f = popen("rdma resource show 2>/dev/null", "r");
    while (f && fgets(line, sizeof line, f)) {
        const char *p;
        long v;
        if ((p = strstr(line, " pd ")) && sscanf(p, " pd %ld", &v) == 1) r->pd += v;
        if ((p = strstr(line, " cq ")) && sscanf(p, " cq %ld", &v) == 1) r->cq += v;
        if ((p = strstr(line, " qp ")) && sscanf(p, " qp %ld", &v) == 1) r->qp += v;
        if ((p = strstr(line, " mr ")) && sscanf(p, " mr %ld", &v) == 1) r->mr += v;
    }
    if (f)
        pclose(f);
    r->mr -= r->chunks;
    r->rss_kb -= r->chunk_kb;
}

static const char *const g_phase_names = "CSFDE";
static int phase_index(char p)
{
    const char *q = strchr(g_phase_names, p);
    return p && q ? (int)(q - g_phase_names) : -1;
}

static const char *phase_name(char p)
{
    switch (p) {
    case 'C': return "connect";
    case 'S': return "stream";
    case 'F': return "flush";
    case 'D': return "destroy";
    case 'E': return "after destroy";
    default: return "start";
    }
}

struct tally {
    int rounds, by_phase[6], accepted, errs_seen;
    uint32_t ops, ok, errors;
};

static void round_run(int round, rdmax_ctx *c, rdmax_listener *l, rdmax_mem *lmem, rdmax_mem *smem,
                      const char *self, const char *addr, int port, struct tally *t)
{
    char target = g_phase_names[rnd(4)];
    int delay = (int)rnd(target == 'S' ? 60 : target == 'C' ? 3 : 4);
    tl_begin("kill/round %d: peer SIGKILLed %d ms into its %s phase", round, delay, phase_name(target));
    struct surv *s = NULL;
    pid_t pid = -1;
    int pfd[2] = {-1, -1};
    REQUIRE(pipe(pfd) == 0, "pipe");
    fcntl(pfd[0], F_SETFL, O_NONBLOCK);
    pid = fork();
    if (pid == 0) {
        char a[16], b[16];
        close(pfd[0]);
        snprintf(a, sizeof a, "%d", port);
        snprintf(b, sizeof b, "%d", pfd[1]);
        execl(self, self, "--peer", addr, a, b, (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    REQUIRE(pid > 0, "fork");
    s = (struct surv *)calloc(1, sizeof *s);
    s->c = c;
    s->lmem = lmem;
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.recv_cb = surv_recv;
    d.user = s;
    d.signal_interval = 16;
    d.expose = smem;  /* the peer's puts land here */
    d.timeout = 15;   /* RC retry time 0.94 s, not 7.5 s: what follows a death is tested, not how long it takes */
    char cur = '-', killed_in = 0;
    int64_t t0 = now_ms(), kill_at = -1, dead_at = -1;
    int status = 0;
    uint32_t k = 0;
    for (;;) {
        char p;
        while (read(pfd[0], &p, 1) == 1)
            cur = p;
        if (kill_at < 0 && phase_index(cur) >= phase_index(target))
            kill_at = now_ms() + delay;
        if (kill_at >= 0 && dead_at < 0 && now_ms() >= kill_at) {
            killed_in = cur;
            kill(pid, SIGKILL);
            REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
            dead_at = now_ms();
            pid = -1;
        }
        if (!s->ep) {
            rdmax_status st = rdmax_accept(l, &d, &s->ep, 0);
            if (st == RDMAX_OK)
                t->accepted++;
            else if (dead_at >= 0 && now_ms() - dead_at > 3000) {
                break;  /* the peer died before a handshake finished: nothing more will come */
            }
            REQUIRE(now_ms() - t0 < GUARD_MS, "no endpoint and no failure after %d ms: accept hangs", GUARD_MS);
            if (!s->ep)
                continue;
            const rdmax_rbuf *r0 = rdmax_ep_query_remote(s->ep, 0);
            s->rb = r0 ? *r0 : (rdmax_rbuf){0, 0, 0};
            for (int i = 0; i < WINDOW; i++) {
                s->ops[i].s = s;
                s->ops[i].slot = i;
                s->ops[i].comp.cb = surv_done;
                s->ops[i].comp.user = &s->ops[i];
            }
        }
        /* keep the window full while connected; every 4th round of posts adds an unsignaled put */
        if (rdmax_ep_query_state(s->ep) == RDMAX_EP_CONNECTED) {
            struct sop *o = &s->ops[s->posted % WINDOW];
            if (!o->busy) {
                o->kind = (int)(k++ % 4);
                o->seq = s->posted;
                o->busy = 1;
                rdmax_status st = surv_post(s, o);
                if (st == RDMAX_INPROGRESS) {
                    s->posted++;
                    if ((k & 3) == 0 && rdmax_put(s->ep, "u", 1, NULL, s->rb.addr + BUF / 2, s->rb.rkey, NULL) ==
                                            RDMAX_OK)
                        s->unsignaled++;
                } else {
                    o->busy = 0;
                }
            }
        }
        rdmax_progress(c);
        if (rdmax_ep_query_state(s->ep) != RDMAX_EP_CONNECTED && s->completed == s->posted)
            break;
        REQUIRE(now_ms() - t0 < GUARD_MS, "endpoint still %s with %u of %u operations complete after %d ms "
                "(peer %s): a hang", rdmax_ep_query_state(s->ep) == RDMAX_EP_CONNECTED ? "connected" : "failed",
                s->completed, s->posted, GUARD_MS, dead_at >= 0 ? "killed" : "alive");
    }
    if (pid > 0) {
        /* the endpoint failed before the kill was due (the peer had destroyed its own): kill it now */
        char p;
        while (read(pfd[0], &p, 1) == 1)
            cur = p;
        killed_in = cur;
        kill(pid, SIGKILL);
        REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid");
        pid = -1;
    }
    if (s->ep) {
        /* the failed endpoint's flush: its error at once, nothing outstanding */
        int64_t f0 = now_ms();
        rdmax_status fs = rdmax_ep_flush(s->ep, 10000);
        CHECK(fs != RDMAX_OK && fs != RDMAX_ERR_TIMEOUT, "flush of the failed endpoint: %s after %lld ms",
              rdmax_status_str(fs), (long long)(now_ms() - f0));
        CHECK(ep_outstanding(s->ep) == 0, "%u requests outstanding after the flush", ep_outstanding(s->ep));
        t->errs_seen += rdmax_ep_query_error(s->ep) != RDMAX_OK;
        printf("    %s: survivor's endpoint failed with %s %lld ms after the kill; %u operations (%u ok, %u "
               "failed) + %u unsignaled; received %u messages\n", phase_name(killed_in),
               rdmax_status_str(rdmax_ep_query_error(s->ep)), (long long)(now_ms() - (dead_at >= 0 ? dead_at : now_ms())),
               s->posted, s->ok, s->errors, s->unsignaled, s->rx_count);
        rdmax_ep_destroy(s->ep);
        s->ep = NULL;
    } else {
        printf("    %s: the peer died before its handshake finished; accept stayed usable\n", phase_name(killed_in));
    }
    CHECK(s->twice == 0, "%u operations completed twice", s->twice);
    CHECK(s->completed == s->posted, "%u of %u operations never completed", s->posted - s->completed, s->posted);
    CHECK(s->bad_data == 0 && s->rx_bad == 0, "%u operations succeeded with wrong data, %u bad messages", s->bad_data,
          s->rx_bad);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the peer ended otherwise (status 0x%x): it failed "
          "before the kill", status);
    for (int i = 0; i < 6; i++)
        if (g_phase_names[i] == killed_in)
            t->by_phase[i]++;
    t->ops += s->posted;
    t->ok += s->ok;
    t->errors += s->errors;
out:
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    if (pfd[0] >= 0)
        close(pfd[0]);
    free(s);
    t->rounds++;
    tl_end();
}

/* The survivor's flush after a failure, in its hardest form: the newest request ran unsignaled (its ack
   came back, no completion is due) before the QP failed, so nothing would ever retire it but a marker
   behind it. The failure is forced (the QP moved to the error state, as an asynchronous error does). */
static void case_unsignaled_flush(rdmax_ctx *c)
{
    tl_begin("kill/flush of a failed endpoint whose newest request ran unsignaled: its error, not a timeout");
    rdmax_mem *m = NULL;
    rdmax_ep *a = NULL, *b = NULL;
    REQUIRE(rdmax_mem_alloc(c, 4096, RDMAX_ACCESS_REMOTE_WRITE, &m) == RDMAX_OK, "mem");
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.expose = m;
    d.signal_interval = 64;
    d.keepalive_ms = RDMAX_OFF;
    REQUIRE(rdmax_ep_create(c, &d, &a) == RDMAX_OK && rdmax_ep_create(c, &d, &b) == RDMAX_OK, "endpoints");
    rdmax_conn_record ia, ib;
    rdmax_ep_query_record(a, &ia);
    rdmax_ep_query_record(b, &ib);
    REQUIRE(rdmax_ep_connect_record(a, &ib) == RDMAX_OK && rdmax_ep_connect_record(b, &ia) == RDMAX_OK, "connect");
    memset(m->addr, 0, 16);
    REQUIRE(rdmax_put(a, "ran unsignaled", 14, NULL, ib.regions[0].addr, ib.regions[0].rkey, NULL) == RDMAX_OK, "put");
    int64_t t0 = now_ms();
    while (memcmp(m->addr, "ran unsignaled", 14) && now_ms() - t0 < GUARD_MS)
        rdmax_progress(c);
    REQUIRE(!memcmp(m->addr, "ran unsignaled", 14), "the put never arrived");
    for (int64_t t1 = now_ms(); now_ms() - t1 < 200;)  /* its ack is back long before */
        rdmax_progress(c);
    struct ibv_qp_attr qa;
    memset(&qa, 0, sizeof qa);
    qa.qp_state = IBV_QPS_ERR;
    REQUIRE(ibv_modify_qp(ep_qp(a), &qa, IBV_QP_STATE) == 0, "modify to error");
    while (rdmax_ep_query_state(a) == RDMAX_EP_CONNECTED && now_ms() - t0 < GUARD_MS)
        rdmax_progress(c);
    REQUIRE(rdmax_ep_query_state(a) == RDMAX_EP_ERROR, "the endpoint never saw its QP fail");
    uint32_t out = ep_outstanding(a);
    rdmax_status st = rdmax_ep_flush(a, 10000);
    CHECK(st == RDMAX_ERR_FLUSHED, "flush: %s, expected the endpoint's error (%s)", rdmax_status_str(st),
          rdmax_status_str(rdmax_ep_query_error(a)));
    CHECK(ep_outstanding(a) == 0, "%u requests still outstanding", ep_outstanding(a));
    printf("    %u request(s) outstanding when the endpoint failed; flush: %s\n", out, rdmax_status_str(st));
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_mem_free(m);
    tl_end();
}

int main(int argc, char **argv)
{
    if (argc == 5 && !strcmp(argv[1], "--peer"))
        return peer_main(argv[2], atoi(argv[3]), atoi(argv[4]));
    int rounds = 10;
    unsigned long long seed = (unsigned long long)time(NULL);
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-n"))
            rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-s"))
            seed = strtoull(argv[i + 1], NULL, 0);
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    g_rng = seed * 0x9E3779B97F4A7C15ULL + 1;
    const char *dev = getenv("RDMAX_TEST_DEV0"), *addr = getenv("RDMAX_TEST_ADDR0");
    if (!dev || !addr) {
        printf("FAIL kill/setup: RDMAX_TEST_DEV0 and RDMAX_TEST_ADDR0 must be set\n");
        return 1;
    }
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        printf("FAIL kill/setup: /proc/self/exe\n");
        return 1;
    }
    self[n] = 0;
    rdmax_ctx *c = open_ctx(dev, 2000);
    rdmax_listener *l = NULL;
    rdmax_mem *lmem = NULL, *smem = NULL;
    if (!c || rdmax_listener_create(c, addr, 0, &l) != RDMAX_OK || rdmax_mem_alloc(c, WINDOW * MSG, 0, &lmem) != RDMAX_OK ||
        rdmax_mem_alloc(c, BUF, RDMAX_ACCESS_REMOTE_WRITE, &smem) != RDMAX_OK) {
        printf("FAIL kill/setup: context, listener or memory on %s\n", dev);
        return 1;
    }
    case_unsignaled_flush(c);
    int port = rdmax_listener_query_port(l);
    printf("# kill_test: %d rounds, seed %llu (rerun: kill_test -n %d -s %llu), survivor on %s %s port %d\n",
           rounds, seed, rounds, seed, dev, addr, port);
    struct tally t;
    memset(&t, 0, sizeof t);
    struct res base, now;
    memset(&base, 0, sizeof base);
    long rss_max = 0;
    for (int r = 1; r <= rounds; r++) {
        round_run(r, c, l, lmem, smem, self, addr, port, &t);
        res_read(c, &now);
        if (r == 1) {
            base = now;
            continue;
        }
        if (now.rss_kb > rss_max)
            rss_max = now.rss_kb;
        tl_begin("kill/round %d: nothing leaked since round 1", r);
        CHECK(now.fds == base.fds, "%ld open file descriptors, %ld after round 1", now.fds, base.fds);
        CHECK(now.qp == base.qp && now.cq == base.cq && now.mr == base.mr && now.pd == base.pd,
              "kernel resources qp %ld cq %ld mr %ld pd %ld, after round 1 qp %ld cq %ld mr %ld pd %ld", now.qp,
              now.cq, now.mr, now.pd, base.qp, base.cq, base.mr, base.pd);
        CHECK(now.chunks <= base.chunks + 1, "the receive pool holds %ld chunks, %ld after round 1 (it keeps at most "
              "one above its target)", now.chunks, base.chunks);
#if !defined(__SANITIZE_ADDRESS__)  /* ASan's quarantine keeps freed memory resident on purpose */
        CHECK(now.rss_kb <= base.rss_kb + RSS_SLACK_KB, "RSS %ld KiB, %ld KiB after round 1", now.rss_kb, base.rss_kb);
#endif
        if (r == rounds || tl_case_failed)
            tl_end();
        else
            tl_case_failed = 0;  /* only the last round's line is printed, or a failing one */
    }
    printf("# kill_test: %d rounds: killed in connect %d, stream %d, flush %d, destroy %d, after destroy %d; "
           "%d endpoints accepted; %u operations (%u ok, %u failed, each exactly once); fds %ld, qp %ld cq %ld "
           "mr %ld pd %ld (and the receive pool's %ld chunks), RSS %ld KiB after round 1 (without the pool's), "
           "at most %ld KiB later\n", t.rounds, t.by_phase[0],
           t.by_phase[1], t.by_phase[2], t.by_phase[3], t.by_phase[4], t.accepted, t.ops, t.ok, t.errors, base.fds,
           base.qp, base.cq, base.mr, base.pd, base.chunks, base.rss_kb, rss_max);
    rdmax_mem_free(lmem);
    rdmax_mem_free(smem);
    rdmax_listener_destroy(l);
    rdmax_ctx_destroy(c);
    return tl_failed_total != 0;
}
