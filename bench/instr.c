/* bench/instr.c - rdmax's own instructions per operation, for callgrind (`make bench`, in the guest).

       valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file=OUT build-bench/instr [-d DEV]
       perl bench/cg_calls.pl --own OUT.N cg_CASE 'librxe|libibverbs'   (what bench/run.sh does per part)

   Two endpoints of one context connected to each other (rdmax_ep_create_pair) on the device. Each case
   calls its operation through an out-of-line function (cg_put, cg_send, ...) with callgrind collecting
   only around those calls (CALLGRIND_TOGGLE_COLLECT), then dumps the counts as a part of its own named
   after the case (CALLGRIND_DUMP_STATS_AT). Whatever the case needs between the measured calls
   (progress to get credits back, waiting for a completion) runs with collection off. In a part, the
   case's own instructions are the inclusive cost of its function minus what the calls into the verbs
   provider cost (librxe's post_send and poll_cq, whatever they call: the provider is not rdmax), divided
   by the operations the program reports. The cases:

     put        8-byte rdmax_put, inline, no comp (as rdmax_bw posts it): per put
     send       8-byte rdmax_send, inline, no comp: per send
     get        8-byte rdmax_get into registered memory, no comp: per get
     fadd       rdmax_fadd, no comp: per operation; cswap likewise
     put_list   rdmax_put_list of 32 puts as above: per put
     put_batch  rdmax_batch_begin, 32 rdmax_put calls as above, rdmax_batch_end: per put
     progress   rdmax_progress with nothing to do: per call
     tick       rdmax_progress with nothing to do but the health pass (device events, watchdog, keepalive),
                which runs at most once a millisecond (the clock moved 100 ms before each call): per pass
     retire     rdmax_progress that retires one completed get with a comp (the get's data has landed and
                the process slept 2 ms before the call): per call, i.e. per completion
     recv       rdmax_progress calls that deliver 16 8-byte messages (sent inline, landed while the process
                slept 2 ms) to the receive callback, reposts and grants included: per message
     recv_one   a ping-pong's receive: rdmax_progress calls of a second context that deliver one 8-byte
                message with a credit in its immediate data (the peer received one message before),
                its repost included (nothing amortised): per message

   The health pass is held (rdmax__test_tick_hold) outside the tick case: it runs by elapsed time, so
   how many measured calls it would fall into depends on how slowly the program runs under callgrind.

   Prints "instr case=NAME ops=N part=NAME" per case, then "instr done". Without valgrind the program
   runs the same loops (the client requests do nothing), so it doubles as a quick functional check.
*/
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#define RDMAX_TESTING /* rdmax__test_tick_hold, rdmax__test_clock_advance */
#include "../rdmax.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__has_include) && !__has_include(<valgrind/callgrind.h>)
/* no valgrind headers (Debian: the valgrind package): the same loops, measuring nothing */
#define CALLGRIND_TOGGLE_COLLECT
#define CALLGRIND_ZERO_STATS
#define CALLGRIND_DUMP_STATS_AT(x) ((void)(x))
#else
#include <valgrind/callgrind.h>
#endif

/* noipa: cg_progress and cg_retire are the same code, and must stay two functions */
#if defined(__GNUC__) && !defined(__clang__)
#define CG_FN __attribute__((noipa))
#else
#define CG_FN __attribute__((noinline))
#endif

#define BATCH 32        /* measured calls between two collection toggles */
#define ROUNDS 64       /* batches per case */

static rdmax_ctx *ctx;
static rdmax_ep *a, *b;
static rdmax_mem *lmem, *rmem;
static unsigned char sbuf[64];
static volatile unsigned long received;

CG_FN static rdmax_status cg_put(rdmax_ep *ep, const void *buf, uint64_t raddr, uint32_t rkey)
{
    return rdmax_put(ep, buf, 8, NULL, raddr, rkey, NULL);
}

CG_FN static rdmax_status cg_send(rdmax_ep *ep, const void *buf)
{
    return rdmax_send(ep, buf, 8, NULL, NULL);
}

CG_FN static rdmax_status cg_get(rdmax_ep *ep, void *buf, const rdmax_mem *mem, uint64_t raddr, uint32_t rkey)
{
    return rdmax_get(ep, buf, 8, mem, raddr, rkey, NULL);
}

CG_FN static rdmax_status cg_fadd(rdmax_ep *ep, uint64_t *res, const rdmax_mem *mem, uint64_t raddr, uint32_t rkey)
{
    return rdmax_fadd(ep, res, mem, raddr, rkey, 1, NULL);
}

CG_FN static rdmax_status cg_cswap(rdmax_ep *ep, uint64_t *res, const rdmax_mem *mem, uint64_t raddr, uint32_t rkey)
{
    return rdmax_cswap(ep, res, mem, raddr, rkey, 0, 1, NULL);
}

CG_FN static rdmax_status cg_put_list(rdmax_ep *ep, const rdmax_put_req *reqs)
{
    return rdmax_put_list(ep, reqs, 32, NULL);
}

CG_FN static rdmax_status cg_put_batch(rdmax_ep *ep, const void *buf, uint64_t raddr, uint32_t rkey)
{
    rdmax_status st = RDMAX_OK;
    rdmax_batch_begin(ep);
    for (int i = 0; i < 32 && st >= 0; i++)
        st = rdmax_put(ep, buf, 8, NULL, raddr, rkey, NULL);
    rdmax_status se = rdmax_batch_end(ep);
    return st < 0 ? st : se;
}

CG_FN static int cg_progress(rdmax_ctx *c)
{
    return rdmax_progress(c);
}

CG_FN static int cg_tick(rdmax_ctx *c)
{
    return rdmax_progress(c);
}

CG_FN static int cg_retire(rdmax_ctx *c)
{
    return rdmax_progress(c);
}

CG_FN static int cg_recv(rdmax_ctx *c)
{
    return rdmax_progress(c);
}

CG_FN static int cg_recv_one(rdmax_ctx *c)
{
    return rdmax_progress(c);
}

static void fail(const char *what, rdmax_status st)
{
    fprintf(stderr, "instr: %s: %s (%s)\n", what, rdmax_status_str(st), rdmax_ctx_query_last_error(ctx));
    exit(1);
}

static void on_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep, (void)data, (void)len, (void)user;
    received++;
}

/* Everything posted so far completes (collection off). */
static void drain(void)
{
    rdmax_status st = rdmax_ep_flush(a, 10000);
    if (st != RDMAX_OK)
        fail("flush", st);
    for (int i = 0; i < 64; i++)
        rdmax_progress(ctx);
}

static void report(const char *name, unsigned long ops)
{
    char part[64];
    snprintf(part, sizeof part, "%s", name);
    CALLGRIND_DUMP_STATS_AT(part);
    printf("instr case=%s ops=%lu part=%s\n", name, ops, part);
    fflush(stdout);
}

enum { C_PUT, C_SEND, C_GET, C_FADD, C_CSWAP };

static void case_post(int which, const char *name)
{
    uint64_t raddr = (uintptr_t)rmem->addr, res_addr;
    uint32_t rkey = rmem->rkey;
    unsigned char *lbuf = (unsigned char *)lmem->addr;
    res_addr = (uintptr_t)lbuf;
    unsigned long ops = 0;
    CALLGRIND_ZERO_STATS;
    for (int r = 0; r < ROUNDS; r++) {
        rdmax_status st[BATCH];
        CALLGRIND_TOGGLE_COLLECT;
        for (int k = 0; k < BATCH; k++) {
            switch (which) {
            case C_PUT: st[k] = cg_put(a, sbuf, raddr, rkey); break;
            case C_SEND: st[k] = cg_send(a, sbuf); break;
            case C_GET: st[k] = cg_get(a, lbuf, lmem, raddr, rkey); break;
            case C_FADD: st[k] = cg_fadd(a, (uint64_t *)(uintptr_t)res_addr, lmem, raddr, rkey); break;
            default: st[k] = cg_cswap(a, (uint64_t *)(uintptr_t)res_addr, lmem, raddr, rkey); break;
            }
        }
        CALLGRIND_TOGGLE_COLLECT;
        for (int k = 0; k < BATCH; k++)
            if (st[k] < 0)
                fail(name, st[k]);
        ops += BATCH;
        drain();  /* credits, read budget and send slots back before the next batch */
    }
    report(name, ops);
}

/* 4 lists of 32 puts per round: rdmax_put_list (list) or begin, 32 rdmax_put, end */
static void case_put_list(int list, const char *name)
{
    uint64_t raddr = (uintptr_t)rmem->addr;
    rdmax_put_req reqs[32];
    for (int i = 0; i < 32; i++)
        reqs[i] = (rdmax_put_req){.buf = sbuf, .len = 8, .raddr = raddr, .rkey = rmem->rkey};
    unsigned long ops = 0;
    CALLGRIND_ZERO_STATS;
    for (int r = 0; r < ROUNDS; r++) {
        rdmax_status st[4];
        CALLGRIND_TOGGLE_COLLECT;
        for (int k = 0; k < 4; k++)
            st[k] = list ? cg_put_list(a, reqs) : cg_put_batch(a, sbuf, raddr, rmem->rkey);
        CALLGRIND_TOGGLE_COLLECT;
        for (int k = 0; k < 4; k++)
            if (st[k] != RDMAX_OK)
                fail(name, st[k]);
        ops += 4 * 32;
        drain();
    }
    report(name, ops);
}

static void case_progress(void)
{
    drain();
    for (int i = 0; i < 10000; i++)  /* what the flushes left (their grants, the peer's reposts) */
        rdmax_progress(ctx);
    unsigned long ops = 0;
    int n = 0;
    CALLGRIND_ZERO_STATS;
    for (int r = 0; r < 64; r++) {
        CALLGRIND_TOGGLE_COLLECT;
        for (int k = 0; k < 1024; k++)
            n += cg_progress(ctx);
        CALLGRIND_TOGGLE_COLLECT;
        ops += 1024;
    }
    if (n != 0)
        fprintf(stderr, "instr: idle progress found %d completions\n", n);
    report("progress", ops);
}

/* The health pass alone: the clock moves a pass period before each measured call (collection off). */
static void case_tick(void)
{
    drain();
    unsigned long ops = 0;
    CALLGRIND_ZERO_STATS;
    for (int r = 0; r < 64; r++) {
        rdmax__test_clock_advance(ctx, 100);
        CALLGRIND_TOGGLE_COLLECT;
        cg_tick(ctx);
        CALLGRIND_TOGGLE_COLLECT;
        rdmax__test_tick_hold(ctx, 1);
        ops++;
    }
    report("tick", ops);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static void case_retire(void)
{
    uint64_t raddr = (uintptr_t)rmem->addr;
    unsigned char *lbuf = (unsigned char *)lmem->addr;
    unsigned long ops = 0, one = 0;
    CALLGRIND_ZERO_STATS;
    for (int r = 0; r < 256; r++) {
        rdmax_comp c;
        memset(&c, 0, sizeof c);
        volatile unsigned char *last = lbuf + 7;
        *last = 0;
        ((unsigned char *)rmem->addr)[7] = (unsigned char)(r % 255 + 1);
        rdmax_status st = rdmax_get(a, lbuf, 8, lmem, raddr, rmem->rkey, &c);
        if (st != RDMAX_INPROGRESS)
            fail("retire: get", st);
        for (long spin = 0; *last != (unsigned char)(r % 255 + 1); spin++)
            if (spin > 2000000000L)
                fail("retire: the get's data never landed", RDMAX_ERR_TIMEOUT);
        sleep_ms(2);  /* the completion follows the data */
        CALLGRIND_TOGGLE_COLLECT;
        int n = cg_retire(ctx);
        CALLGRIND_TOGGLE_COLLECT;
        ops++;
        one += n == 1 && c.done;
        while (!c.done)
            rdmax_progress(ctx);
    }
    if (one != ops)
        fprintf(stderr, "instr: retire: %lu of %lu calls retired exactly one completion\n", one, ops);
    report("retire", ops);
    printf("instr retire_exact=%lu of %lu\n", one, ops);
}

/* Measured calls of fn (cg_recv, cg_recv_one: a callgrind part each) on c until `received` reaches
   want; returns how many. */
static unsigned long recv_until(int (*fn)(rdmax_ctx *), rdmax_ctx *c, unsigned long want, const char *what)
{
    unsigned long calls = 0;
    for (long spin = 0; received < want; spin++) {
        if (spin > 100000000L)
            fail(what, RDMAX_ERR_TIMEOUT);
        CALLGRIND_TOGGLE_COLLECT;
        fn(c);
        CALLGRIND_TOGGLE_COLLECT;
        calls++;
    }
    return calls;
}

#define RECV_BURST 16

static void case_recv(void)
{
    unsigned long ops = 0, calls = 0;
    drain();
    CALLGRIND_ZERO_STATS;
    for (int r = 0; r < ROUNDS; r++) {
        unsigned long want = received + RECV_BURST;
        for (int k = 0; k < RECV_BURST; k++) {
            rdmax_status st = rdmax_send(a, sbuf, 8, NULL, NULL);
            if (st < 0)
                fail("recv: send", st);
        }
        sleep_ms(2);  /* the messages land in the receive CQ; nothing polls it meanwhile */
        calls += recv_until(cg_recv, ctx, want, "recv: the messages never arrived");
        ops += RECV_BURST;
        drain();  /* credits back to the sender (collection off) */
    }
    report("recv", ops);
    printf("instr recv_calls=%lu for %lu messages\n", calls, ops);
}

/* Two contexts, so that each sees one QP, as a ping-pong's two processes do: q sends p one message
   (collection off), p answers with the credit it now owes, and q's context receives it (measured). */
static void case_recv_one(const rdmax_ep_desc *d)
{
    rdmax_ctx *ctx2;
    rdmax_ep *p, *q;
    rdmax_ctx_desc cd;
    rdmax_conn_record ip, iq;
    memset(&cd, 0, sizeof cd);
    cd.device = rdmax_ctx_query_attr(ctx)->name;
    rdmax_status st = rdmax_ctx_create(&cd, &ctx2);
    if (st != RDMAX_OK)
        fail("recv_one: second context", st);
    rdmax__test_tick_hold(ctx2, 1);
    rdmax_ep_desc e = *d;
    e.expose = NULL;  /* (ctx's memory) */
    if ((st = rdmax_ep_create(ctx, &e, &p)) != RDMAX_OK || (st = rdmax_ep_create(ctx2, &e, &q)) != RDMAX_OK)
        fail("recv_one: ep_create", st);
    rdmax_ep_query_record(p, &ip);
    rdmax_ep_query_record(q, &iq);
    if ((st = rdmax_ep_connect_record(p, &iq)) != RDMAX_OK || (st = rdmax_ep_connect_record(q, &ip)) != RDMAX_OK)
        fail("recv_one: connect", st);
    unsigned long ops = 0, calls = 0;
    CALLGRIND_ZERO_STATS;
    for (int r = 0; r < ROUNDS * 4; r++) {
        unsigned long want = received + 1;
        if ((st = rdmax_send(q, sbuf, 8, NULL, NULL)) < 0)
            fail("recv_one: send", st);
        for (long spin = 0; received < want; spin++) {
            if (spin > 100000000L)
                fail("recv_one: the message never arrived", RDMAX_ERR_TIMEOUT);
            rdmax_progress(ctx);
            rdmax_progress(ctx2);
        }
        /* r % 4 calls more on ctx2 (nothing to receive yet): its send CQ is polled every 4th call, and
           the same number of calls in every round would put each measured call at one phase of that */
        for (int k = 0; k < r % 4; k++)
            rdmax_progress(ctx2);
        want = received + 1;
        if ((st = rdmax_send(p, sbuf, 8, NULL, NULL)) < 0)
            fail("recv_one: answer", st);
        sleep_ms(2);  /* the answer lands in ctx2's receive CQ; nothing polls it meanwhile */
        /* q's signaled send completions (one in signal_interval) are retired here, unmeasured: where they
           fall depends on when their acks come, and their cost is instr_retire's */
        while (rdmax__poll_send(ctx2) > 0)
            ;
        calls += recv_until(cg_recv_one, ctx2, want, "recv_one: the answer never arrived");
        ops++;
    }
    report("recv_one", ops);
    printf("instr recv_one_calls=%lu for %lu messages\n", calls, ops);
    rdmax_ep_destroy(p);
    rdmax_ep_destroy(q);
    rdmax_ctx_destroy(ctx2);
}

int main(int argc, char **argv)
{
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    if (argc == 3 && !strcmp(argv[1], "-d"))
        cd.device = argv[2];
    rdmax_status st = rdmax_ctx_create(&cd, &ctx);
    if (st != RDMAX_OK) {
        fprintf(stderr, "instr: no RDMA device: %s\n", rdmax_status_str(st));
        return 1;
    }
    rdmax__test_tick_hold(ctx, 1);
    if ((st = rdmax_mem_alloc(ctx, 4096, RDMAX_ACCESS_LOCAL, &lmem)) != RDMAX_OK ||
        (st = rdmax_mem_alloc(ctx, 4096, RDMAX_ACCESS_REMOTE_READ | RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_REMOTE_ATOMIC | RDMAX_ACCESS_ANY_ENDPOINT,
                              &rmem)) != RDMAX_OK)
        fail("mem_alloc", st);
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.recv_size = 64;
    d.rq_depth = 128;  /* credits for a batch of 32 sends (the default window is 16) */
    d.sq_depth = 256;  /* room for 4 post lists of 32 between drains (the default is 32) */
    d.recv_cb = on_recv;
    d.expose = rmem;
    if ((st = rdmax_ep_create_pair(ctx, &d, &a, &b)) != RDMAX_OK)
        fail("ep_create_pair", st);
    memset(sbuf, 0x5a, sizeof sbuf);
    case_post(C_PUT, "put");
    case_post(C_SEND, "send");
    case_post(C_GET, "get");
    case_post(C_FADD, "fadd");
    case_post(C_CSWAP, "cswap");
    case_put_list(1, "put_list");
    case_put_list(0, "put_batch");
    case_progress();
    case_tick();
    case_retire();
    /* the sends all arrived (the flushes waited for their acknowledgements, the receiver polled since) */
    for (int i = 0; i < 1000 && received < (unsigned long)ROUNDS * BATCH; i++)
        rdmax_progress(ctx);
    if (received != (unsigned long)ROUNDS * BATCH)
        fprintf(stderr, "instr: %lu of %d sends received\n", received, ROUNDS * BATCH);
    case_recv();
    d.rq_depth = 0;  /* the default window, as the examples use */
    d.sq_depth = 0;
    case_recv_one(&d);
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_mem_free(lmem);
    rdmax_mem_free(rmem);
    rdmax_ctx_destroy(ctx);
    printf("instr done\n");
    return 0;
}
