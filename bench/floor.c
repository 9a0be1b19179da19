/* bench/floor.c - the raw-verbs floor of `make bench`: what a ping-pong and a stream cost with nothing
   but libibverbs, in the loop shapes of the examples (rdmax_pingpong, rdmax_bw), so that every latency,
   bandwidth and rate row can say how far rdmax is from the least any program could do on this device.

       floor lat -t send|put|get|fadd|cswap -s BYTES -n ITERS              (server)
       floor lat -t put -s 8 -n 2000 192.0.2.1                            (client)
       floor bw  -t put|send|get -s BYTES -n OPS [-l LIST] [-c UD] ...     (server, then client + HOST)

   Server and client take the same options (the server needs -t, -s, -n too: it answers that many).

   lat, as rdmax_pingpong: send and put are ping-pongs (half the round trip is reported), get and the
   atomics one-sided (the full round trip). Same sizes, same signaling: sends and puts of at most the
   device's inline size go inline, one request in 64 is signaled and the send CQ is polled only while a
   signaled request is out; get and atomics are signaled (rdmax's example gives them a completion).
   Receive buffers (128, at least 64 bytes) are polled 16 at a time and reposted in chains of 16. A put
   arrives when the last byte of the target changes (each iteration writes a new tag there); the payload
   is not checked: this is the floor. 100 warm-up iterations, then t_typical etc. as rdmax_pingpong and
   perftest print them (cycle counter calibrated against CLOCK_MONOTONIC).

   bw, as rdmax_bw: the send queue (-O, 128) is kept full with chains of -l (32) requests, one in -Q (64)
   signaled (and the last one); completions are polled 16 at a time. Sends go to a receiver with up to 512
   message-sized buffers (64 MiB at most) reposted in chains of 16; RC relies on RNR retry where rdmax has
   credits, UD gets the receiver's count back every 64 messages and keeps at most 480 beyond it in flight,
   as rdmax_bw does. Columns are ib_write_bw's (the peak column repeats the average: no samples are kept).

   The out-of-band exchange is one text line each way over TCP (-p, 18515); a last byte each way ends the
   run. Exit status 0 when the run completed.

       floor putrate -e 1000 -T 3                                          (one process, no HOST)

   putrate, as tests/scale_test.c's putrate case (bench/scale.sh): 8-byte RDMA writes round-robin over
   1, then -e, then 1 RC QP, pairs connected to each other on the one device, with rdmax's queue depth,
   signaling and shared send-CQ budget (the putrate section below). Prints "ROW floor_put8_rate_1qp", "_Nqps"
   and "_ratio" lines for bench/scale.sh.
*/
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <math.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define UD_QKEY 0x11111111u
#define GRH 40
#define RECV_BATCH 16
#define SIG_EVERY 64
#define UD_CREDIT_EVERY 64

enum mode { M_LAT, M_BW, M_RATE };
enum test { T_SEND, T_PUT, T_GET, T_FADD, T_CSWAP };
static const char *const test_names[] = {"send", "put", "get", "fadd", "cswap"};

static struct {
    enum mode mode;
    enum test test;
    size_t size;
    unsigned long iters, warmup;
    unsigned post_list, outstanding, cq_mod, rx_depth;
    unsigned qps, cq_depth;   /* putrate */
    double seconds;
    int ud;
    const char *dev;
    int gid;
    unsigned port;
    const char *host;
} o;

static void die(const char *what)
{
    fprintf(stderr, "floor: %s%s%s\n", what, errno ? ": " : "", errno ? strerror(errno) : "");
    exit(1);
}

/* ---- verbs setup -------------------------------------------------------------------------------- */
static struct ibv_context *vctx;
static struct ibv_pd *pd;
static struct ibv_cq *scq, *rcq;
static struct ibv_qp *qp;
static struct ibv_ah *ah;          /* UD: the peer */
static union ibv_gid my_gid;
static enum ibv_mtu mtu;
static uint32_t max_inline;
static unsigned char *buf;         /* exposed: put target, get source, atomic target, receive pool */
static struct ibv_mr *mr;
static unsigned char *lbuf;        /* local: send/put source, get/atomic destination */
static struct ibv_mr *lmr;
static size_t rsize;               /* bytes per receive buffer */
static unsigned rdepth;            /* receive buffers */
static unsigned char *rbufs;
static struct ibv_mr *rmr;
static uint32_t peer_qpn, peer_rkey;
static uint64_t peer_addr;
static int sock = -1;
static unsigned rnext, rfree;      /* receive ring: next buffer to post, buffers consumed and not reposted */

static void open_device(void)
{
    int n;
    struct ibv_device **l = ibv_get_device_list(&n);
    if (!l || n == 0)
        die("no RDMA device");
    int i = 0;
    if (o.dev)
        for (i = 0; i < n && strcmp(ibv_get_device_name(l[i]), o.dev); i++)
            ;
    if (i == n) {
        errno = 0;
        die("device not found");
    }
    vctx = ibv_open_device(l[i]);
    ibv_free_device_list(l);
    if (!vctx || !(pd = ibv_alloc_pd(vctx)))
        die("ibv_open_device/ibv_alloc_pd");
    struct ibv_port_attr pa;
    if (ibv_query_port(vctx, 1, &pa) || ibv_query_gid(vctx, 1, o.gid, &my_gid))
        die("ibv_query_port/gid");
    mtu = pa.active_mtu;
}

static struct ibv_qp *make_qp(uint32_t sq, uint32_t rq, uint32_t inl)
{
    struct ibv_qp_init_attr a;
    memset(&a, 0, sizeof a);
    a.send_cq = scq;
    a.recv_cq = rcq;
    a.qp_type = o.ud ? IBV_QPT_UD : IBV_QPT_RC;
    a.cap.max_send_wr = sq;
    a.cap.max_recv_wr = rq;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = inl;
    return ibv_create_qp(pd, &a);
}

/* The largest inline size the device accepts (verbs cannot report it: rdmax probes the same way). */
static void probe_inline(void)
{
    uint32_t lo = 0, hi = 4096;
    while (lo < hi) {
        uint32_t mid = (lo + hi + 1) / 2;
        struct ibv_qp *q = make_qp(1, 1, mid);
        if (q) {
            ibv_destroy_qp(q);
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    max_inline = lo;
}

static struct ibv_qp *make_qp_probe(uint32_t sq, uint32_t rq)
{
    probe_inline();
    struct ibv_qp *q = make_qp(sq, rq, max_inline);
    if (!q)
        die("ibv_create_qp");
    return q;
}

static void post_recvs(unsigned *next, unsigned n)
{
    struct ibv_recv_wr wr[RECV_BATCH], *bad;
    struct ibv_sge sge[RECV_BATCH];
    while (n) {
        unsigned k = n < RECV_BATCH ? n : RECV_BATCH;
        for (unsigned i = 0; i < k; i++) {
            unsigned idx = (*next)++ % rdepth;
            sge[i].addr = (uintptr_t)(rbufs + (size_t)idx * rsize);
            sge[i].length = (uint32_t)rsize;
            sge[i].lkey = rmr->lkey;
            wr[i].wr_id = idx;
            wr[i].sg_list = &sge[i];
            wr[i].num_sge = 1;
            wr[i].next = i + 1 < k ? &wr[i + 1] : NULL;
        }
        int rc = ibv_post_recv(qp, wr, &bad);
        if (rc) {
            errno = rc;
            die("ibv_post_recv");
        }
        n -= k;
    }
}

/* ---- out of band: one line each way ------------------------------------------------------------ */
static void oob_connect(void)
{
    char port[16];
    snprintf(port, sizeof port, "%u", o.port);
    struct addrinfo hints, *res;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (!o.host) {
        hints.ai_flags = AI_PASSIVE;
        if (getaddrinfo(NULL, port, &hints, &res))
            die("getaddrinfo");
        int l = socket(res->ai_family, SOCK_STREAM, 0), one = 1;
        setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (l < 0 || bind(l, res->ai_addr, res->ai_addrlen) || listen(l, 1))
            die("listen");
        freeaddrinfo(res);
        sock = accept(l, NULL, NULL);
        close(l);
        if (sock < 0)
            die("accept");
        return;
    }
    if (getaddrinfo(o.host, port, &hints, &res))
        die("getaddrinfo");
    double deadline = mono_us() + 10e6;
    for (;;) {
        sock = socket(res->ai_family, SOCK_STREAM, 0);
        if (sock >= 0 && connect(sock, res->ai_addr, res->ai_addrlen) == 0)
            break;
        if (sock >= 0)
            close(sock);
        if (mono_us() > deadline)
            die("connect");
        usleep(50000);
    }
    freeaddrinfo(res);
}

/* Both QPs are ready (receives posted, RTR) before either side posts: a byte each way. */
static void oob_ready(void)
{
    char c = 'r';
    if (write(sock, &c, 1) != 1 || read(sock, &c, 1) != 1)
        die("oob ready");
}

/* An RC QP from RESET to INIT, then (once its receives are posted) to RTR and RTS towards dqpn at gid g. */
static void rc_init(struct ibv_qp *q)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
    if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        die("modify INIT");
}

static void rc_rtr_rts(struct ibv_qp *q, uint32_t dqpn, const union ibv_gid *g, uint8_t timeout, uint8_t rnr_retry)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = dqpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = *g;
    a.ah_attr.grh.sgid_index = (uint8_t)o.gid;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        die("modify RTR");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    a.timeout = timeout;
    a.retry_cnt = 6;
    a.rnr_retry = rnr_retry;
    a.max_rd_atomic = 16;
    if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_MAX_QP_RD_ATOMIC))
        die("modify RTS");
}

static void oob_exchange(void)
{
    char line[160], in[160];
    char gid[33];
    for (int i = 0; i < 16; i++)
        sprintf(gid + 2 * i, "%02x", my_gid.raw[i]);
    int n = snprintf(line, sizeof line, "%06x %016llx %08x %s %d\n", qp->qp_num, (unsigned long long)(uintptr_t)buf,
                     mr->rkey, gid, (int)mtu);
    if (write(sock, line, (size_t)n) != n)
        die("oob write");
    size_t got = 0;
    while (got < (size_t)n) {
        ssize_t r = read(sock, in + got, (size_t)n - got);
        if (r <= 0)
            die("oob read");
        got += (size_t)r;
    }
    in[got] = 0;
    unsigned long long addr;
    char pgid[33];
    int pmtu;
    if (sscanf(in, "%x %llx %x %32s %d", &peer_qpn, &addr, &peer_rkey, pgid, &pmtu) != 5)
        die("oob record");
    peer_addr = addr;
    union ibv_gid g;
    for (int i = 0; i < 16; i++) {
        unsigned v;
        sscanf(pgid + 2 * i, "%2x", &v);
        g.raw[i] = (uint8_t)v;
    }
    if (pmtu < (int)mtu)
        mtu = (enum ibv_mtu)pmtu;
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    if (o.ud) {
        a.qkey = UD_QKEY;
        if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
            die("modify INIT");
        post_recvs(&rnext, rdepth);
        a.qp_state = IBV_QPS_RTR;
        if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
            die("modify RTR");
        a.qp_state = IBV_QPS_RTS;
        a.sq_psn = 0;
        if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
            die("modify RTS");
        struct ibv_ah_attr aa;
        memset(&aa, 0, sizeof aa);
        aa.is_global = 1;
        aa.grh.dgid = g;
        aa.grh.sgid_index = (uint8_t)o.gid;
        aa.grh.hop_limit = 64;
        aa.port_num = 1;
        if (!(ah = ibv_create_ah(pd, &aa)))
            die("ibv_create_ah");
        oob_ready();
        return;
    }
    rc_init(qp);
    post_recvs(&rnext, rdepth);  /* a QP takes receives from INIT on */
    rc_rtr_rts(qp, peer_qpn, &g, 14, 7);  /* rnr_retry 7: the floor has no credits: a receiver that lags is waited for */
    oob_ready();
}

/* A byte each way: the client says it is done, the server says it may go. */
static void oob_finish(void)
{
    char c = 'x';
    if (o.host) {
        if (write(sock, &c, 1) != 1 || read(sock, &c, 1) != 1)
            die("oob finish");
    } else {
        if (read(sock, &c, 1) != 1 || write(sock, &c, 1) != 1)
            die("oob finish");
    }
    close(sock);
}

static void check_wc(const struct ibv_wc *wc)
{
    if (wc->status != IBV_WC_SUCCESS) {
        errno = 0;
        fprintf(stderr, "floor: completion with status %s (wr_id %llu)\n", ibv_wc_status_str(wc->status),
                (unsigned long long)wc->wr_id);
        exit(1);
    }
}

/* ---- latency ------------------------------------------------------------------------------------ */
static unsigned sig_count;    /* posts since the last signaled one */
static unsigned sig_out;      /* signaled requests not yet polled */

static void post_one(enum ibv_wr_opcode op, uint32_t len, int force_sig, uint64_t cmp, uint64_t swap)
{
    struct ibv_sge sge;
    struct ibv_send_wr wr, *bad;
    memset(&wr, 0, sizeof wr);
    sge.addr = (uintptr_t)lbuf;
    sge.length = len;
    sge.lkey = lmr->lkey;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op;
    if ((op == IBV_WR_SEND || op == IBV_WR_RDMA_WRITE) && len <= max_inline)
        wr.send_flags = IBV_SEND_INLINE;
    if (force_sig || ++sig_count >= SIG_EVERY) {
        wr.send_flags |= IBV_SEND_SIGNALED;
        sig_count = 0;
        sig_out++;
    }
    if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
        wr.wr.atomic.remote_addr = peer_addr;
        wr.wr.atomic.rkey = peer_rkey;
        wr.wr.atomic.compare_add = cmp;
        wr.wr.atomic.swap = swap;
    } else {
        wr.wr.rdma.remote_addr = peer_addr;
        wr.wr.rdma.rkey = peer_rkey;
    }
    int rc = ibv_post_send(qp, &wr, &bad);
    if (rc) {
        errno = rc;
        die("ibv_post_send");
    }
}

static void reap_send(void)
{
    struct ibv_wc wc;
    if (sig_out && ibv_poll_cq(scq, 1, &wc) > 0) {
        check_wc(&wc);
        sig_out--;
    }
}

/* The spin loops' hang guard: every 4096th spin reads the clock, and says 1 once 10 s have passed since
   its first read. The deadline is set at that first check, not on entry: get and the atomics wait inside
   the timed interval, and a clock_gettime there is a system call where the clock source is not the TSC. */
static inline int spun_out(unsigned spin, double *deadline)
{
    if ((spin & 4095) != 0)
        return 0;
    double t = mono_us();
    if (*deadline == 0)
        *deadline = t + 10e6;
    return t > *deadline;
}

/* Wait for one message; returns when it is seen (the caller timestamps). */
static void wait_recv(void)
{
    struct ibv_wc wc[RECV_BATCH];
    double deadline = 0;
    for (unsigned spin = 1;; spin++) {
        int n = ibv_poll_cq(rcq, RECV_BATCH, wc);
        if (n > 0) {
            for (int i = 0; i < n; i++)
                check_wc(&wc[i]);
            rfree += (unsigned)n;
            return;
        }
        reap_send();
        if (spun_out(spin, &deadline)) {
            errno = 0;
            die("nothing received within 10 s");
        }
    }
}

static void repost(void)
{
    if (rfree >= RECV_BATCH) {
        post_recvs(&rnext, rfree);
        rfree = 0;
    }
}

static int wait_byte(volatile unsigned char *p, unsigned char v)
{
    double deadline = 0;
    for (unsigned spin = 1; *p != v; spin++) {
        reap_send();
        if (spun_out(spin, &deadline))
            return -1;
    }
    return 0;
}

static void wait_send_cq(void)
{
    struct ibv_wc wc;
    double deadline = 0;
    for (unsigned spin = 1;; spin++) {
        int n = ibv_poll_cq(scq, 1, &wc);
        if (n > 0) {
            check_wc(&wc);
            if (--sig_out == 0)
                return;
        }
        if (spun_out(spin, &deadline)) {
            errno = 0;
            die("no completion within 10 s");
        }
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static unsigned char tag_byte(unsigned long i) { return (unsigned char)(i % 255 + 1); }

static int run_lat(void)
{
    unsigned long total = o.warmup + o.iters;
    uint32_t len = (uint32_t)o.size;
    volatile unsigned char *last = buf + o.size - 1;
    if (!o.host) {
        /* server */
        for (unsigned long i = 0; i < total && (o.test == T_SEND || o.test == T_PUT); i++) {
            if (o.test == T_SEND) {
                wait_recv();
                post_one(IBV_WR_SEND, len, 0, 0, 0);
                repost();
            } else {
                if (wait_byte(last, tag_byte(i))) {
                    errno = 0;
                    die("server: no put within 10 s");
                }
                lbuf[o.size - 1] = tag_byte(i);
                post_one(IBV_WR_RDMA_WRITE, len, 0, 0, 0);
            }
        }
        while (sig_out)
            wait_send_cq();
        oob_finish();
        return 0;
    }
    double *t = (double *)malloc(sizeof(double) * o.iters);
    if (!t)
        die("malloc");
    int half = o.test == T_SEND || o.test == T_PUT;
    for (unsigned long i = 0; i < total; i++) {
        double t0 = now_us(), t1;
        switch (o.test) {
        case T_SEND:
            post_one(IBV_WR_SEND, len, 0, 0, 0);
            wait_recv();
            t1 = now_us();
            repost();
            break;
        case T_PUT:
            lbuf[o.size - 1] = tag_byte(i);
            post_one(IBV_WR_RDMA_WRITE, len, 0, 0, 0);
            if (wait_byte(last, tag_byte(i))) {
                errno = 0;
                die("client: no answer within 10 s");
            }
            t1 = now_us();
            break;
        case T_GET:
            post_one(IBV_WR_RDMA_READ, len, 1, 0, 0);
            wait_send_cq();
            t1 = now_us();
            break;
        default:
            post_one(o.test == T_FADD ? IBV_WR_ATOMIC_FETCH_AND_ADD : IBV_WR_ATOMIC_CMP_AND_SWP, 8, 1,
                     o.test == T_FADD ? 1 : i, i + 1);
            wait_send_cq();
            t1 = now_us();
            break;
        }
        if (i >= o.warmup)
            t[i - o.warmup] = half ? (t1 - t0) / 2 : t1 - t0;
    }
    while (sig_out)
        wait_send_cq();
    oob_finish();
    unsigned long n = o.iters;
    qsort(t, n, sizeof *t, cmp_double);
    double sum = 0, sq = 0;
    for (unsigned long i = 0; i < n; i++)
        sum += t[i];
    double avg = sum / (double)n;
    for (unsigned long i = 0; i < n; i++)
        sq += (t[i] - avg) * (t[i] - avg);
    unsigned long p99 = (unsigned long)((double)n * 0.99 + 0.999999) - 1, p999 = (unsigned long)((double)n * 0.999 + 0.999999) - 1;
    printf(" raw verbs floor, lat %s: device %s, inline up to %u B, one signaled in %d\n", test_names[o.test],
           ibv_get_device_name(vctx->device), max_inline, SIG_EVERY);
    printf(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec]\n");
    printf(" %-7zu %-10lu %-14.2f %-14.2f %-16.2f %-14.2f %-16.2f %-22.2f %-.2f\n", o.size, n, t[0], t[n - 1],
           t[n / 2], avg, n > 1 ? sqrt(sq / (double)(n - 1)) : 0.0, t[p99], t[p999]);
    free(t);
    return 0;
}

/* ---- stream ------------------------------------------------------------------------------------- */
static int run_bw_sender(void)
{
    uint64_t n = o.iters, posted = 0, done = 0, credit = 0, window = o.ud ? rdepth - 32 : 0;
    unsigned out = o.outstanding, sig = o.cq_mod;
    struct ibv_send_wr wr[256], *bad;
    struct ibv_sge sge[256];
    struct ibv_wc wc[16];
    enum ibv_wr_opcode op = o.test == T_PUT ? IBV_WR_RDMA_WRITE : o.test == T_SEND ? IBV_WR_SEND : IBV_WR_RDMA_READ;
    int inl = o.test != T_GET && o.size <= max_inline;
    for (unsigned i = 0; i < o.post_list; i++) {
        memset(&wr[i], 0, sizeof wr[i]);
        sge[i].addr = (uintptr_t)lbuf;
        sge[i].length = (uint32_t)o.size;
        sge[i].lkey = lmr->lkey;
        wr[i].sg_list = &sge[i];
        wr[i].num_sge = 1;
        wr[i].opcode = op;
        if (o.ud) {
            wr[i].wr.ud.ah = ah;
            wr[i].wr.ud.remote_qpn = peer_qpn;
            wr[i].wr.ud.remote_qkey = UD_QKEY;
        } else {
            wr[i].wr.rdma.remote_addr = peer_addr;
            wr[i].wr.rdma.rkey = peer_rkey;
        }
    }
    unsigned since_sig = 0;
    double t0 = mono_us(), last = t0;
    unsigned spin = 0;
    while (done < n) {
        uint64_t room = n - posted;
        if (room > out - (posted - done))
            room = out - (posted - done);
        if (window) {
            uint64_t lim = credit + window;
            room = lim > posted ? (room < lim - posted ? room : lim - posted) : 0;
        }
        if (room > o.post_list)
            room = o.post_list;
        if (room) {
            for (unsigned k = 0; k < room; k++) {
                uint64_t id = posted + k + 1;  /* a signaled request's wr_id: operations it completes */
                wr[k].wr_id = id;
                wr[k].send_flags = inl ? IBV_SEND_INLINE : 0;
                if (++since_sig >= sig || id == n || posted + k + 1 - done >= out) {
                    wr[k].send_flags |= IBV_SEND_SIGNALED;
                    since_sig = 0;
                }
                wr[k].next = k + 1 < room ? &wr[k + 1] : NULL;
            }
            int rc = ibv_post_send(qp, wr, &bad);
            if (rc) {
                errno = rc;
                die("ibv_post_send");
            }
            posted += room;
        }
        int c = ibv_poll_cq(scq, 16, wc);
        for (int i = 0; i < c; i++) {
            check_wc(&wc[i]);
            done = wc[i].wr_id;
        }
        if (window) {
            struct ibv_wc rwc;
            if (ibv_poll_cq(rcq, 1, &rwc) > 0) {
                check_wc(&rwc);
                uint64_t v;
                memcpy(&v, rbufs + rwc.wr_id * rsize + GRH, 8);
                if (v > credit)
                    credit = v;
                post_recvs(&rnext, 1);
            }
        }
        if (c > 0)
            last = mono_us();
        else if ((++spin & 4095) == 0 && mono_us() - last > 10e6) {
            errno = 0;
            die("no completion within 10 s");
        }
    }
    double secs = (mono_us() - t0) / 1e6;
    oob_finish();
    double mib = (double)n * (double)o.size / 1048576.0 / secs;
    printf(" raw verbs floor, bw %s %s: device %s, post list %u, signal interval %u, %u outstanding, inline up to %u B\n",
           o.ud ? "UD" : "RC", test_names[o.test], ibv_get_device_name(vctx->device), o.post_list, sig, out,
           inl ? max_inline : 0);
    printf(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n");
    printf(" %-10zu %-14llu %-18.2f %-20.2f %.6f\n", o.size, (unsigned long long)n, mib, mib, (double)n / secs / 1e6);
    return 0;
}

static int run_bw_receiver(void)
{
    if (o.test != T_SEND) {
        oob_finish();
        return 0;
    }
    uint64_t got = 0, granted = 0;
    struct ibv_wc wc[RECV_BATCH];
    struct pollfd pf = {sock, POLLIN, 0};
    double idle_since = 0;
    int client_done = 0;
    unsigned spin = 0;
    while (got < o.iters) {
        int n = ibv_poll_cq(rcq, RECV_BATCH, wc);
        for (int i = 0; i < n; i++)
            check_wc(&wc[i]);
        if (n > 0) {
            got += (uint64_t)n;
            rfree += (unsigned)n;
            repost();
            if (o.ud && got - granted >= UD_CREDIT_EVERY) {
                uint64_t v = got;
                memcpy(lbuf, &v, 8);
                struct ibv_sge sge = {(uintptr_t)lbuf, 8, lmr->lkey};
                struct ibv_send_wr w, *bad;
                memset(&w, 0, sizeof w);
                w.sg_list = &sge;
                w.num_sge = 1;
                w.opcode = IBV_WR_SEND;
                w.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
                w.wr.ud.ah = ah;
                w.wr.ud.remote_qpn = peer_qpn;
                w.wr.ud.remote_qkey = UD_QKEY;
                if (ibv_post_send(qp, &w, &bad))
                    die("ibv_post_send (credit)");
                granted = got;
                struct ibv_wc swc;
                while (ibv_poll_cq(scq, 1, &swc) == 0)
                    ;
                check_wc(&swc);
            }
            idle_since = 0;
            continue;
        }
        if ((++spin & 1023) == 0) {
            /* UD may lose datagrams: once the client is done, a second without one ends the run */
            if (!client_done && poll(&pf, 1, 0) > 0)
                client_done = 1;
            double t = mono_us();
            if (idle_since == 0)
                idle_since = t;
            else if (t - idle_since > (client_done ? 1e6 : 10e6))
                break;
        }
    }
    if (got < o.iters)
        fprintf(stderr, "floor: %llu of %lu messages received\n", (unsigned long long)got, o.iters);
    oob_finish();
    return o.ud || got == o.iters ? 0 : 1;
}

/* ---- put rate over many QPs -------------------------------------------------------------------- */
/* The loop of tests/scale_test.c's putrate case (rdmax_put round-robin over n endpoints, one rdmax_progress
   per round) with nothing but verbs: -e pairs of RC QPs in this process, connected to each other on the
   device (loopback); the first QP of each pair writes -s (8) bytes inline to its own 8 bytes of one
   region, one post per request (no post list). Per QP at most -O (31, rdmax's sq_depth) requests in
   flight, one in -Q (15: 64 at most half the queue, as rdmax) signaled; all QPs share one send CQ of -C
   (4096, rdmax's cq_depth) entries, every post takes one until the completion that covers it, a post
   needs more than one free, and every post is signaled while at most half are free (rdmax's rule).
   A QP without room is skipped for the round. After each round the send CQ is polled for 16 every 4th
   round, or every round and until it gives fewer than 16 while at most half the entries are free (rdmax's
   rdmax_progress). Rate: requests completed per second from the end of a warm-up (a tenth of -T, or of
   -n completions) for -T seconds (3), or until -n requests completed; the clock is read every 64 posts or
   more, whatever -e. Neither the warm-up nor the drain is timed. Phases: 1 QP, then -e, then 1 again, as
   scale_test; the ratio is -e's rate over the mean of the two single-QP rates. -s is at most 8 (each QP
   owns 8 bytes of the target). */
struct rate_qp {
    struct ibv_qp *qp, *peer;
    uint32_t posted, done;    /* requests posted, completed (a signaled one's wr_id is its count) */
    uint32_t last_sig;        /* count of the last signaled request */
    uint32_t sig_left;        /* posts until the next signaled one */
};
static struct rate_qp *rq;
static uint32_t rate_credits, rate_low;  /* send-CQ entries free; every post signaled at or below rate_low */
static struct {
    uint64_t completed, posts, skipped, cqes, polls, empty;
    double post_us;           /* time inside ibv_post_send */
} rc_cnt;

static void rate_setup(unsigned n, unsigned cq_depth)
{
    scq = ibv_create_cq(vctx, (int)cq_depth, NULL, NULL, 0);
    rcq = ibv_create_cq(vctx, 16, NULL, NULL, 0);
    if (!scq || !rcq)
        die("ibv_create_cq");
    probe_inline();
    uint32_t inl = max_inline < 256 ? max_inline : 256;  /* rdmax's default cap */
    if (o.size > inl) {
        errno = 0;
        die("putrate: -s over the inline size");
    }
    if (!(rq = (struct rate_qp *)calloc(n, sizeof *rq)))
        die("calloc");
    for (unsigned i = 0; i < n; i++) {
        struct rate_qp *p = &rq[i];
        if (!(p->qp = make_qp(o.outstanding, 1, inl)) || !(p->peer = make_qp(o.outstanding, 1, inl)))
            die("ibv_create_qp (putrate: ulimit -l, or fewer -e)");
        rc_init(p->qp);
        rc_init(p->peer);
        rc_rtr_rts(p->qp, p->peer->qp_num, &my_gid, 18, 6);  /* scale_test's timeout 18, rdmax's rnr_retry 6 */
        rc_rtr_rts(p->peer, p->qp->qp_num, &my_gid, 18, 6);
        p->sig_left = o.cq_mod;
    }
    max_inline = inl;
    rate_credits = cq_depth;
    rate_low = cq_depth / 2;
}

static int rate_poll(void)
{
    struct ibv_wc wc[16];
    int c = ibv_poll_cq(scq, 16, wc);
    rc_cnt.polls++;
    if (c <= 0) {
        rc_cnt.empty++;
        return 0;
    }
    for (int i = 0; i < c; i++) {
        check_wc(&wc[i]);
        struct rate_qp *p = &rq[wc[i].wr_id >> 32];
        uint32_t upto = (uint32_t)wc[i].wr_id, k = upto - p->done;
        p->done = upto;
        rate_credits += k;
        rc_cnt.completed += k;
    }
    rc_cnt.cqes += (uint64_t)c;
    return c;
}

static int rate_post(struct ibv_send_wr *wr, unsigned i, int force_sig)
{
    struct rate_qp *p = &rq[i];
    if (p->posted - p->done >= o.outstanding || rate_credits <= 1) {
        rc_cnt.skipped++;
        return 0;
    }
    uint32_t id = p->posted + 1;
    int sig = force_sig || --p->sig_left == 0 || rate_credits <= rate_low;
    wr->wr_id = (uint64_t)i << 32 | id;
    wr->wr.rdma.remote_addr = (uintptr_t)buf + 8 * (uint64_t)i;
    wr->send_flags = IBV_SEND_INLINE | (sig ? IBV_SEND_SIGNALED : 0);
    struct ibv_send_wr *bad;
    double t = now_us();
    int rc = ibv_post_send(p->qp, wr, &bad);
    rc_cnt.post_us += now_us() - t;
    if (rc) {
        errno = rc;
        die("ibv_post_send");
    }
    if (sig) {
        p->sig_left = o.cq_mod;
        p->last_sig = id;
    }
    p->posted = id;
    rate_credits--;
    rc_cnt.posts++;
    return 1;
}

static double rate_phase(unsigned n, double seconds, unsigned long ops)
{
    struct ibv_sge sge = {(uintptr_t)lbuf, (uint32_t)o.size, lmr->lkey};
    struct ibv_send_wr wr;
    memset(&wr, 0, sizeof wr);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.wr.rdma.rkey = mr->rkey;
    memset(&rc_cnt, 0, sizeof rc_cnt);
    double t0 = mono_us(), t1 = 0, t = t0, last = t0;
    int warm = 1;
    uint32_t tick = 0;
    for (unsigned k = 0;;) {
        for (unsigned i = 0; i < n; i++)
            rate_post(&wr, i, 0);
        /* rdmax_progress: the send CQ every 4th call, every call while half its entries are held (then
           until a poll gives fewer than 16); never while nothing is outstanding */
        if (rate_credits != o.cq_depth && ((++tick & 3) == 0 || rate_credits < rate_low)) {
            int c = rate_poll();
            while (c == 16 && rate_credits < rate_low)
                c = rate_poll();
            if (c > 0)
                last = t;
        }
        if ((k += n) < 64)
            continue;
        k = 0;
        t = mono_us();
        if (warm && (ops ? rc_cnt.completed >= ops / 10 : t - t0 > seconds * 1e5)) {
            warm = 0;
            t1 = t;
            memset(&rc_cnt, 0, sizeof rc_cnt);
        } else if (!warm && (ops ? rc_cnt.completed >= ops : t - t1 > seconds * 1e6)) {
            break;
        }
        if (t - last > 10e6) {
            errno = 0;
            die("putrate: no completion within 10 s");
        }
    }
    double secs = (t - t1) / 1e6;
    uint64_t completed = rc_cnt.completed;
    printf("# floor put_rate %u qps: completed %llu, posts %llu, skipped %llu (queue or CQ full), cqes %llu, "
           "polls %llu (empty %llu), in ibv_post_send %.0f%% of %.2f s\n", n, (unsigned long long)completed,
           (unsigned long long)rc_cnt.posts, (unsigned long long)rc_cnt.skipped, (unsigned long long)rc_cnt.cqes,
           (unsigned long long)rc_cnt.polls, (unsigned long long)rc_cnt.empty, 100 * rc_cnt.post_us / (t - t1), secs);
    /* drain (not timed): a QP whose last request is unsignaled gets a signaled one after it */
    double deadline = mono_us() + 10e6;
    for (;;) {
        int busy = 0;
        for (unsigned i = 0; i < n; i++)
            if (rq[i].posted != rq[i].done) {
                busy = 1;
                if (rq[i].last_sig != rq[i].posted)
                    rate_post(&wr, i, 1);
            }
        if (!busy)
            break;
        double now = mono_us();
        if (rate_poll() > 0)
            deadline = now + 10e6;
        else if (now > deadline) {
            errno = 0;
            die("putrate: drain: no completion within 10 s");
        }
    }
    return (double)completed / secs;
}

static int run_rate(void)
{
    unsigned n = o.qps;
    double seconds = o.seconds;
    printf(" raw verbs floor, putrate: device %s, %zu-byte RDMA writes (inline) round-robin over 1, then %u, then 1 "
           "RC QP (loopback pairs), %u in flight per QP, one signaled in %u and every one while half the %u "
           "send-CQ entries are held\n", ibv_get_device_name(vctx->device), o.size, n, o.outstanding, o.cq_mod,
           o.cq_depth);
    double one = rate_phase(1, seconds, o.iters);
    double many = rate_phase(n, seconds, o.iters);
    double one2 = rate_phase(1, seconds, o.iters);
    double ratio = many / ((one + one2) / 2);
    printf("# floor 8-byte puts: 1 QP %.0f/s, then %u QPs %.0f/s, then 1 again %.0f/s: ratio %.2f\n", one, n, many,
           one2, ratio);
    printf("ROW floor_put8_rate_1qp %.0f\nROW floor_put8_rate_%uqps %.0f\nROW floor_put8_rate_ratio %.2f\n",
           (one + one2) / 2, n, many, ratio);
    return one > 0 && many > 0 && one2 > 0 ? 0 : 1;
}

/* ---- main --------------------------------------------------------------------------------------- */
static void usage(void)
{
    fprintf(stderr,
            "usage: floor lat|bw [options] [HOST]   (no HOST: server)\n"
            "       floor putrate [options]          (one process, loopback QP pairs)\n"
            "  -t OP      lat: send|put|get|fadd|cswap; bw: put|send|get   [send; bw: put]\n"
            "  -s BYTES   message size                                    [8; bw: 65536]\n"
            "  -n N       iterations (lat) or operations (bw); putrate:   [1000; bw: 5000]\n"
            "             completions per phase instead of -T             [putrate: 0, timed]\n"
            "  -w N       warm-up iterations (lat)                        [100]\n"
            "  -l N       bw: requests chained into one post              [32]\n"
            "  -O N       bw: send-queue depth; putrate: per QP           [128; putrate: 31]\n"
            "  -Q N       bw, putrate: one signaled request every N       [64, at most -O/2]\n"
            "  -e N       putrate: QPs the middle phase spreads over      [1000]\n"
            "  -T SECS    putrate: seconds per phase (after a tenth more) [3]\n"
            "  -C N       putrate: send-CQ entries (shared by all QPs)    [4096]\n"
            "  -c RC|UD   bw: transport                                   [RC]\n"
            "  -R N       bw: receive buffers (send test)                 [512, at most 64 MiB]\n"
            "  -d DEV     device                                          [first]\n"
            "  -x N       GID index                                       [1]\n"
            "  -p PORT    TCP port of the exchange                        [18515]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        usage();
    o.mode = !strcmp(argv[1], "lat") ? M_LAT : !strcmp(argv[1], "bw") ? M_BW : !strcmp(argv[1], "putrate") ? M_RATE
                                                                                                      : (usage(), M_LAT);
    o.test = o.mode == M_LAT ? T_SEND : T_PUT;
    o.size = o.mode == M_BW ? 65536 : 8;
    o.iters = o.mode == M_BW ? 5000 : o.mode == M_RATE ? 0 : 1000;
    o.warmup = 100;
    o.post_list = 32;
    o.outstanding = o.mode == M_RATE ? 31 : 128;
    o.cq_mod = SIG_EVERY;
    o.qps = 1000;
    o.seconds = 3;
    o.cq_depth = 4096;
    o.gid = 1;
    o.port = 18515;
    int c;
    optind = 2;
    while ((c = getopt(argc, argv, "t:s:n:w:l:O:Q:c:d:x:p:R:e:T:C:")) != -1) {
        switch (c) {
        case 't': {
            int k;
            for (k = 0; k < 5 && strcmp(optarg, test_names[k]); k++)
                ;
            if (k == 5 || (o.mode == M_BW && k > T_GET))
                usage();
            o.test = (enum test)k;
            break;
        }
        case 's': o.size = strtoul(optarg, NULL, 0); break;
        case 'n': o.iters = strtoul(optarg, NULL, 0); break;
        case 'w': o.warmup = strtoul(optarg, NULL, 0); break;
        case 'l': o.post_list = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'O': o.outstanding = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'Q': o.cq_mod = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'c': o.ud = !strcmp(optarg, "UD"); break;
        case 'd': o.dev = optarg; break;
        case 'x': o.gid = atoi(optarg); break;
        case 'p': o.port = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'R': o.rx_depth = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'e': o.qps = (unsigned)strtoul(optarg, NULL, 0); break;
        case 'T': o.seconds = atof(optarg); break;
        case 'C': o.cq_depth = (unsigned)strtoul(optarg, NULL, 0); break;
        default: usage();
        }
    }
    if (optind < argc)
        o.host = argv[optind];
    if (o.test == T_FADD || o.test == T_CSWAP)
        o.size = 8;
    if (o.mode == M_RATE) {
        if (o.size == 0 || o.size > 8 || o.qps == 0 || o.qps > 65536 || !(o.seconds > 0 && o.seconds < 1e5) ||
            o.outstanding < 2 || o.cq_mod == 0 || o.cq_depth < 2 || o.host)
            usage();
        if (o.cq_mod > o.outstanding / 2)
            o.cq_mod = o.outstanding / 2;
        clock_init();
        open_device();
        if (posix_memalign((void **)&buf, 4096, 8 * (size_t)o.qps) || posix_memalign((void **)&lbuf, 4096, o.size))
            die("posix_memalign");
        memset(buf, 0, 8 * (size_t)o.qps);
        memset(lbuf, 1, o.size);
        if (!(mr = ibv_reg_mr(pd, buf, 8 * (size_t)o.qps, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)) ||
            !(lmr = ibv_reg_mr(pd, lbuf, o.size, IBV_ACCESS_LOCAL_WRITE)))
            die("ibv_reg_mr");
        rate_setup(o.qps, o.cq_depth);
        return run_rate();
    }
    if (o.size == 0 || o.iters == 0 || o.post_list == 0 || o.post_list > 256 || o.outstanding < 2 || o.cq_mod == 0 ||
        (o.rx_depth && (o.rx_depth < 16 || o.rx_depth > 4096)) ||
        (o.ud && (o.mode != M_BW || o.test != T_SEND)))
        usage();
    if (o.cq_mod > o.outstanding / 2)
        o.cq_mod = o.outstanding / 2;
    clock_init();
    open_device();

    /* receive pool: lat 128 buffers of max(64, size); bw send up to 512 message-sized ones (64 MiB) */
    rsize = o.size < 64 ? 64 : o.size;
    rdepth = 128;
    if (o.mode == M_BW) {
        size_t k = (64u << 20) / o.size;
        rdepth = o.test == T_SEND ? (unsigned)(k > 512 ? 512 : k < 32 ? 32 : k) : 32;
        if (o.rx_depth)
            rdepth = o.rx_depth;
        if (o.test != T_SEND)
            rsize = 64;
    }
    if (o.ud)
        rsize += GRH;
    uint32_t sq = o.mode == M_BW ? o.outstanding : 256;
    scq = ibv_create_cq(vctx, (int)sq + 16, NULL, NULL, 0);
    rcq = ibv_create_cq(vctx, (int)rdepth + 16, NULL, NULL, 0);
    if (!scq || !rcq)
        die("ibv_create_cq");
    qp = make_qp_probe(sq, rdepth);
    size_t blen = o.size < 8 ? 8 : o.size;
    int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
    if (posix_memalign((void **)&buf, 4096, blen) || posix_memalign((void **)&lbuf, 4096, blen) ||
        posix_memalign((void **)&rbufs, 4096, rsize * rdepth))
        die("posix_memalign");
    memset(buf, 0, blen);
    memset(lbuf, 0, blen);
    if (!(mr = ibv_reg_mr(pd, buf, blen, acc)) || !(lmr = ibv_reg_mr(pd, lbuf, blen, acc)) ||
        !(rmr = ibv_reg_mr(pd, rbufs, rsize * rdepth, IBV_ACCESS_LOCAL_WRITE)))
        die("ibv_reg_mr");
    oob_connect();
    oob_exchange();
    if (o.mode == M_LAT)
        return run_lat();
    return o.host ? run_bw_sender() : run_bw_receiver();
}
