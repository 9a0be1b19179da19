/* Profile variables, snapshots, events, profile points and log dedupe, on a real RDMA device (rxe in the
   test VM). Built twice by make: as is, and with -DRDMAX_PROFILE for the profile points. */
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
/* Runs inside rdmax_profile_start_reads, between the loads of `completed` and of `posted` (see the
   snapshot cases): it forces the interleaving a reader thread could only hope to hit. */
static void (*g_between_halves)(void);
#define RDMAX__PROF_COLLECT_BETWEEN() do { if (g_between_halves) g_between_halves(); } while (0)
#include "rdmax.h"
#include "testlib.h"

#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#define T_MS 10000

/* ---- helpers ----------------------------------------------------------------------------------- */
static int g_errlogs;
static char g_lastlog[512];
#define LOGKEEP 64
static char g_logs[LOGKEEP][256];  /* every message, when capturing */
static rdmax_log_item g_items[LOGKEEP];
static int g_nlogs;

static void count_log(rdmax_log_level lvl, rdmax_log_item item, const char *msg, void *user)
{
    (void)user;
    if (lvl == RDMAX_LOG_ERROR) {
        g_errlogs++;
        snprintf(g_lastlog, sizeof g_lastlog, "%s", msg);
    }
    if (g_nlogs < LOGKEEP) {
        snprintf(g_logs[g_nlogs], sizeof g_logs[0], "%s", msg);
        g_items[g_nlogs] = item;
    }
    g_nlogs++;
}

static rdmax_ctx *open_ctx2(const rdmax_ctx_desc *base)
{
    rdmax_ctx_desc d;
    if (base)
        d = *base;
    else
        memset(&d, 0, sizeof d);
    if (!d.device)
        d.device = getenv("RDMAX_TEST_DEV0");
    d.logger.func = count_log;
    d.log_level = RDMAX_LOG_ERROR;
    d.log_level_set = true;
    rdmax_ctx *c = NULL;
    if (rdmax_ctx_create(&d, &c) != RDMAX_OK) {
        printf("FAIL setup: cannot open device %s: %s\n", d.device ? d.device : "(default)", g_lastlog);
        exit(1);
    }
    return c;
}

static rdmax_ctx *open_ctx(void)
{
    return open_ctx2(NULL);
}

/* Before the paste the library does not call rdmax__profile_ctx_fini: do it here. */
static void destroy_ctx(rdmax_ctx *c)
{
    rdmax_ctx_destroy(c);
}

static int wait_comp(rdmax_ctx *c, rdmax_comp *comp)
{
    for (long i = 0; !comp->done; i++) {
        rdmax_progress(c);
        if (i > 200000000L)
            return -1;
    }
    return 0;
}

static uint64_t rd(rdmax_profile *p, uint32_t id)
{
    uint64_t v = ~0ull;
    if (rdmax_profile_read_u64(p, id, &v) != RDMAX_OK)
        return ~1ull;
    return v;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* put until it is accepted, progressing when the send queue is full */
static rdmax_status put_retry(rdmax_ctx *c, rdmax_ep *ep, const void *buf, size_t len, const rdmax_mem *m,
                              uint64_t raddr, uint32_t rkey, rdmax_comp *comp)
{
    rdmax_status st;
    while ((st = rdmax_put(ep, buf, len, m, raddr, rkey, comp)) == RDMAX_ERR_NO_RESOURCE)
        rdmax_progress(c);
    return st;
}

/* ---- variables --------------------------------------------------------------------------------- */
static void vars_list_case(void)
{
    rdmax_ctx *c = open_ctx();
    rdmax_profile *p = NULL;
    tl_begin("vars/list");
    REQUIRE(rdmax_profile_create(c, &p) == RDMAX_OK, "open");
    const rdmax_profile_var *v = NULL;
    size_t n = 0;
    CHECK_ST(rdmax_profile_query_vars(p, &v, &n), RDMAX_OK);
    REQUIRE(v && n == RDMAX_PROFILE_VAR__COUNT, "count %zu, expected %d", n, (int)RDMAX_PROFILE_VAR__COUNT);
    for (size_t i = 0; i < n; i++) {
        CHECK(v[i].id == i, "vars[%zu].id = %u", i, v[i].id);
        CHECK(v[i].name && v[i].name[0] && v[i].desc && v[i].desc[0], "vars[%zu] has no name or description", i);
        CHECK(v[i].type == RDMAX_PROFILE_COUNTER || v[i].type == RDMAX_PROFILE_LEVEL, "vars[%zu].type %d", i,
              (int)v[i].type);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(v[i].name, v[j].name) != 0, "name %s twice", v[i].name);
    }
    CHECK(!strcmp(v[RDMAX_PROFILE_VAR_POSTED(RDMAX_OP_PUT)].name, "put.posted"), "posted(put) is %s",
          v[RDMAX_PROFILE_VAR_POSTED(RDMAX_OP_PUT)].name);
    CHECK(!strcmp(v[RDMAX_PROFILE_VAR_COMPLETED(RDMAX_OP_GET)].name, "get.completed"), "completed(get) is %s",
          v[RDMAX_PROFILE_VAR_COMPLETED(RDMAX_OP_GET)].name);
    CHECK(!strcmp(v[RDMAX_PROFILE_VAR_RCACHE_HITS].name, "rcache.hits"), "rcache hits is %s",
          v[RDMAX_PROFILE_VAR_RCACHE_HITS].name);
    CHECK(v[RDMAX_PROFILE_VAR_RCACHE_BYTES].type == RDMAX_PROFILE_LEVEL, "rcache.bytes is not a level");
    uint64_t x;
    CHECK_ST(rdmax_profile_read_u64(p, RDMAX_PROFILE_VAR__COUNT, &x), RDMAX_ERR_INVALID_PARAM);
    CHECK(rd(p, RDMAX_PROFILE_VAR_ENDPOINTS) == 0, "endpoints of a new context");
    tl_end();
out:
    rdmax_profile_destroy(p);
    destroy_ctx(c);
    if (tl_case_failed)
        tl_end();
}

/* N puts: exactly N posted, N completed, N x size bytes, N post calls; the registration cache's
   variables read 0 before it exists and count the gets after. */
static void vars_puts_case(void)
{
    enum { N = 1000, SIZE = 4096, M = 50 };
    rdmax_ctx *c = open_ctx();
    rdmax_profile *p = NULL;
    rdmax_ep *a = NULL, *b = NULL;
    rdmax_mem *src = NULL, *dst = NULL;
    char *plain = NULL;
    tl_begin("vars/%d puts of %d bytes", N, SIZE);
    REQUIRE(rdmax_profile_create(c, &p) == RDMAX_OK, "open");
    REQUIRE(rdmax_ep_create_pair(c, NULL, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
    REQUIRE(rdmax_mem_alloc(c, SIZE, RDMAX_ACCESS_LOCAL, &src) == RDMAX_OK, "alloc");
    REQUIRE(rdmax_mem_alloc(c, 1 << 20, RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_ANY_ENDPOINT, &dst) == RDMAX_OK, "alloc");
    uint64_t calls0 = rd(p, RDMAX_PROFILE_VAR_POST_CALLS);
    CHECK(rd(p, RDMAX_PROFILE_VAR_ENDPOINTS) == 2, "endpoints %llu", (unsigned long long)rd(p, RDMAX_PROFILE_VAR_ENDPOINTS));
    CHECK(rd(p, RDMAX_PROFILE_VAR_RCACHE_MISSES) == 0 && rd(p, RDMAX_PROFILE_VAR_RCACHE_BYTES) == 0,
          "rcache variables of a cache that does not exist yet are not 0");
    rdmax_comp comp;
    memset(&comp, 0, sizeof comp);
    for (int i = 0; i < N; i++) {
        rdmax_status st = put_retry(c, a, src->addr, SIZE, src, (uintptr_t)dst->addr + (uint64_t)(i % 256) * SIZE,
                                    dst->rkey, i == N - 1 ? &comp : NULL);
        REQUIRE(st == RDMAX_INPROGRESS, "put %d: %s", i, rdmax_status_str(st));
    }
    REQUIRE(wait_comp(c, &comp) == 0 && comp.status == RDMAX_OK, "last put: %s", rdmax_status_str(comp.status));
    CHECK(rd(p, RDMAX_PROFILE_VAR_POSTED(RDMAX_OP_PUT)) == N, "posted %llu",
          (unsigned long long)rd(p, RDMAX_PROFILE_VAR_POSTED(RDMAX_OP_PUT)));
    CHECK(rd(p, RDMAX_PROFILE_VAR_COMPLETED(RDMAX_OP_PUT)) == N, "completed %llu",
          (unsigned long long)rd(p, RDMAX_PROFILE_VAR_COMPLETED(RDMAX_OP_PUT)));
    CHECK(rd(p, RDMAX_PROFILE_VAR_BYTES(RDMAX_OP_PUT)) == (uint64_t)N * SIZE, "bytes %llu",
          (unsigned long long)rd(p, RDMAX_PROFILE_VAR_BYTES(RDMAX_OP_PUT)));
    CHECK(rd(p, RDMAX_PROFILE_VAR_POST_CALLS) - calls0 == N, "post calls %llu",
          (unsigned long long)(rd(p, RDMAX_PROFILE_VAR_POST_CALLS) - calls0));
    for (unsigned op = 0; op < RDMAX_OP__COUNT; op++)
        if (op != RDMAX_OP_PUT)
            CHECK(rd(p, RDMAX_PROFILE_VAR_POSTED(op)) == 0 && rd(p, RDMAX_PROFILE_VAR_COMPLETED(op)) == 0,
                  "%s posted or completed", rdmax_op_str((rdmax_op)op));
    CHECK(rd(p, RDMAX_PROFILE_VAR_POLLS) > 0 && rd(p, RDMAX_PROFILE_VAR_CQES) > 0, "no polls or CQEs counted");
    CHECK(rd(p, RDMAX_PROFILE_VAR_ERR_CQES) == 0 && rd(p, RDMAX_PROFILE_VAR_EP_ERRORS) == 0, "errors counted");

    /* a snapshot does not move while operations run; the live value does */
    rdmax_profile_start_reads(p);
    uint64_t s0 = rd(p, RDMAX_PROFILE_VAR_POSTED(RDMAX_OP_PUT));
    memset(&comp, 0, sizeof comp);
    CHECK_ST(put_retry(c, a, src->addr, SIZE, src, (uintptr_t)dst->addr, dst->rkey, &comp), RDMAX_INPROGRESS);
    CHECK(wait_comp(c, &comp) == 0, "no completion");
    CHECK(rd(p, RDMAX_PROFILE_VAR_POSTED(RDMAX_OP_PUT)) == s0, "a snapshot changed");
    rdmax_profile_end_reads(p);
    CHECK(rd(p, RDMAX_PROFILE_VAR_POSTED(RDMAX_OP_PUT)) == s0 + 1, "live value %llu after the snapshot",
          (unsigned long long)rd(p, RDMAX_PROFILE_VAR_POSTED(RDMAX_OP_PUT)));

    /* M puts from one unregistered buffer: one miss, then hits */
    plain = (char *)aligned_alloc(4096, 2 * SIZE);
    REQUIRE(plain, "malloc");
    memset(plain, 7, 2 * SIZE);
    for (int i = 0; i < M; i++) {
        memset(&comp, 0, sizeof comp);
        CHECK_ST(put_retry(c, a, plain, SIZE, NULL, (uintptr_t)dst->addr, dst->rkey, &comp), RDMAX_INPROGRESS);
        CHECK(wait_comp(c, &comp) == 0 && comp.status == RDMAX_OK, "put from the cache: %s", rdmax_status_str(comp.status));
    }
    CHECK(rd(p, RDMAX_PROFILE_VAR_RCACHE_MISSES) == 1, "rcache misses %llu",
          (unsigned long long)rd(p, RDMAX_PROFILE_VAR_RCACHE_MISSES));
    CHECK(rd(p, RDMAX_PROFILE_VAR_RCACHE_HITS) == M - 1, "rcache hits %llu",
          (unsigned long long)rd(p, RDMAX_PROFILE_VAR_RCACHE_HITS));
    CHECK(rd(p, RDMAX_PROFILE_VAR_RCACHE_REGIONS) == 1 && rd(p, RDMAX_PROFILE_VAR_RCACHE_BYTES) >= SIZE,
          "rcache regions %llu bytes %llu", (unsigned long long)rd(p, RDMAX_PROFILE_VAR_RCACHE_REGIONS),
          (unsigned long long)rd(p, RDMAX_PROFILE_VAR_RCACHE_BYTES));
    rdmax_rcache_stats rs;
    rdmax_rcache_query_stats(rdmax_ctx_query_rcache(c), &rs);
    CHECK(rs.hits == rd(p, RDMAX_PROFILE_VAR_RCACHE_HITS) && rs.bytes == rd(p, RDMAX_PROFILE_VAR_RCACHE_BYTES),
          "variables disagree with rdmax_rcache_query_stats");
    tl_end();
out:
    rdmax_profile_destroy(p);
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_mem_free(src);
    rdmax_mem_free(dst);
    destroy_ctx(c);
    free(plain);
    if (tl_case_failed)
        tl_end();
}

/* ---- snapshots: completed <= posted ---------------------------------------------------------------
   A snapshot reads every `completed` before any `posted`: an operation that is posted and completes
   between the two halves then shows as in flight, never as completed before posted. The deterministic
   case forces that interleaving through the hook above; its control reads in the other order with the
   same interleaving and must see the invariant broken. A reader thread then checks real snapshots
   while the context runs operations (no assertion there depends on what the race produced). */
static int snapshot_broken(uint64_t posted, uint64_t completed)
{
    return completed > posted;
}

static rdmax_ctx *g_hook_ctx;
static rdmax_ep *g_hook_ep;
static rdmax_mem *g_hook_src, *g_hook_dst;
static int g_hook_runs, g_hook_failed;

/* One put, posted and completed: both counters move by one. */
static void one_put_completes(void)
{
    rdmax_comp comp;
    memset(&comp, 0, sizeof comp);
    g_hook_runs++;
    if (put_retry(g_hook_ctx, g_hook_ep, g_hook_src->addr, 4096, g_hook_src, (uintptr_t)g_hook_dst->addr,
                  g_hook_dst->rkey, &comp) != RDMAX_INPROGRESS ||
        wait_comp(g_hook_ctx, &comp) != 0 || comp.status != RDMAX_OK)
        g_hook_failed++;
}

static void snapshot_order_case(void)
{
    rdmax_ctx *c = open_ctx();
    rdmax_profile *p = NULL;
    rdmax_ep *a = NULL, *b = NULL;
    rdmax_mem *src = NULL, *dst = NULL;
    tl_begin("snapshot/an operation completing between the two halves shows as in flight");
    REQUIRE(rdmax_profile_create(c, &p) == RDMAX_OK, "open");
    REQUIRE(rdmax_ep_create_pair(c, NULL, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
    REQUIRE(rdmax_mem_alloc(c, 1 << 16, RDMAX_ACCESS_LOCAL, &src) == RDMAX_OK, "alloc");
    REQUIRE(rdmax_mem_alloc(c, 1 << 16, RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_ANY_ENDPOINT, &dst) == RDMAX_OK, "alloc");
    g_hook_ctx = c;
    g_hook_ep = a;
    g_hook_src = src;
    g_hook_dst = dst;
    g_hook_runs = g_hook_failed = 0;
    one_put_completes();  /* from here on every put has completed: posted == completed */
    uint32_t P = RDMAX_PROFILE_VAR_POSTED(RDMAX_OP_PUT), C = RDMAX_PROFILE_VAR_COMPLETED(RDMAX_OP_PUT);
    REQUIRE(rd(p, P) == rd(p, C), "posted %llu != completed %llu with nothing in flight",
            (unsigned long long)rd(p, P), (unsigned long long)rd(p, C));
    g_between_halves = one_put_completes;
    rdmax_profile_start_reads(p);
    g_between_halves = NULL;
    uint64_t po = rd(p, P), co = rd(p, C);
    rdmax_profile_end_reads(p);
    REQUIRE(g_hook_runs == 2 && g_hook_failed == 0, "the put between the halves did not run and complete");
    /* the put ran between the halves: the snapshot has it posted but not completed */
    CHECK(po == co + 1, "snapshot posted %llu completed %llu: the put was not between the halves",
          (unsigned long long)po, (unsigned long long)co);
    CHECK(!snapshot_broken(po, co), "snapshot broke completed <= posted: completed %llu > posted %llu",
          (unsigned long long)co, (unsigned long long)po);
    tl_end();

    /* Control: the same interleaving, the halves read in the wrong order: the check must fire. */
    tl_begin("snapshot/control: posted read before completed breaks the invariant");
    rdmax_counters k;
    rdmax_ctx_query_counters(c, &k);
    uint64_t wpo = k.posted[RDMAX_OP_PUT];
    one_put_completes();
    rdmax_ctx_query_counters(c, &k);
    uint64_t wco = k.completed[RDMAX_OP_PUT];
    REQUIRE(g_hook_failed == 0, "the put did not complete");
    CHECK(snapshot_broken(wpo, wco), "posted %llu then completed %llu: the check did not fire",
          (unsigned long long)wpo, (unsigned long long)wco);
    tl_end();
out:
    g_between_halves = NULL;
    rdmax_profile_destroy(p);
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_mem_free(src);
    rdmax_mem_free(dst);
    destroy_ctx(c);
    if (tl_case_failed)
        tl_end();
}

struct reader {
    rdmax_ctx *ctx;
    rdmax_profile *prof;
    volatile int stop;
    long snaps, bad, inflight;             /* API snapshots, violations, snapshots with posted > completed */
    char why[200];
};

static void pause_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static void *reader_main(void *arg)
{
    struct reader *r = (struct reader *)arg;
    for (long k = 1; !r->stop; k++) {
        if (k % 200 == 0)
            pause_us(1000);  /* leave the context's thread a core on a small machine */
        rdmax_profile_start_reads(r->prof);
        int inflight = 0;
        for (unsigned op = 0; op < RDMAX_OP__COUNT; op++) {
            uint64_t po = 0, co = 0;
            rdmax_profile_read_u64(r->prof, RDMAX_PROFILE_VAR_POSTED(op), &po);
            rdmax_profile_read_u64(r->prof, RDMAX_PROFILE_VAR_COMPLETED(op), &co);
            if (snapshot_broken(po, co) && r->bad++ == 0)
                snprintf(r->why, sizeof r->why, "%s: completed %llu > posted %llu", rdmax_op_str((rdmax_op)op),
                         (unsigned long long)co, (unsigned long long)po);
            inflight |= po > co;
        }
        rdmax_profile_end_reads(r->prof);
        __atomic_store_n(&r->snaps, r->snaps + 1, __ATOMIC_RELAXED);
        __atomic_store_n(&r->inflight, r->inflight + inflight, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void snapshot_case(void)
{
    rdmax_ctx *c = open_ctx();
    rdmax_profile *p = NULL;
    rdmax_ep *a = NULL, *b = NULL;
    rdmax_mem *src = NULL, *dst = NULL;
    struct reader r;
    pthread_t th;
    int started = 0;
    memset(&r, 0, sizeof r);
    tl_begin("snapshot/completed <= posted while another thread runs operations");
    REQUIRE(rdmax_profile_create(c, &p) == RDMAX_OK, "open");
    REQUIRE(rdmax_mem_alloc(c, 1 << 16, RDMAX_ACCESS_LOCAL, &src) == RDMAX_OK, "alloc");
    /* dst's own rkey on the pair, which is made after it so that its QPs take the reads and atomics */
    REQUIRE(rdmax_mem_alloc(c, 1 << 16, RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_REMOTE_READ |
                                            RDMAX_ACCESS_REMOTE_ATOMIC | RDMAX_ACCESS_ANY_ENDPOINT, &dst) == RDMAX_OK, "alloc");
    REQUIRE(rdmax_ep_create_pair(c, NULL, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
    r.ctx = c;
    r.prof = p;
    REQUIRE(pthread_create(&th, NULL, reader_main, &r) == 0, "pthread_create");
    started = 1;
    /* The context's thread: puts (inline and not, with and without completions), chained puts, gets
       and fetch-adds, progressing whenever something is refused. It runs for 3 s and then on until the
       reader has taken 1000 snapshots, some with operations in flight: how much the race covers is
       then fixed, however loaded the machine (a reader that never gets there is a hang, not a result). */
    rdmax_comp comps[64];
    memset(comps, 0, sizeof comps);
    long ops = 0;
    double t_end = now_s() + 3.0;
    uint64_t *res = (uint64_t *)((char *)src->addr + 60000);
    while (now_s() < t_end || __atomic_load_n(&r.snaps, __ATOMIC_RELAXED) < 1000 ||
           __atomic_load_n(&r.inflight, __ATOMIC_RELAXED) == 0) {
        for (int i = 0; i < 64; i++) {
            rdmax_comp *cp = &comps[i];
            if (cp->user && !cp->done)
                continue;  /* still in flight */
            memset(cp, 0, sizeof *cp);
            cp->user = cp;
            rdmax_status st;
            switch (i % 4) {
            case 0:
                st = rdmax_put(a, src->addr, 32, NULL, (uintptr_t)dst->addr, dst->rkey, NULL);
                cp->user = NULL;
                break;
            case 1:
                st = rdmax_put(a, src->addr, 4096, src, (uintptr_t)dst->addr + 4096, dst->rkey, cp);
                break;
            case 2:
                st = rdmax_get(a, (char *)src->addr + 8192, 512, src, (uintptr_t)dst->addr + 8192, dst->rkey, cp);
                break;
            default:
                st = rdmax_fadd(a, res, src, (uintptr_t)dst->addr + 16384, dst->rkey, 1, cp);
                break;
            }
            if (st == RDMAX_OK || st == RDMAX_INPROGRESS)
                ops++;
            else
                cp->user = NULL;
            if (st != RDMAX_OK && st != RDMAX_INPROGRESS && st != RDMAX_ERR_NO_RESOURCE)
                tl_fail(__FILE__, __LINE__, "operation: %s", rdmax_status_str(st));
        }
        rdmax_batch_begin(a);
        for (int i = 0; i < 8; i++)
            if (rdmax_put(a, src->addr, 16, NULL, (uintptr_t)dst->addr + 32768, dst->rkey, NULL) == RDMAX_OK)
                ops++;
        rdmax_batch_end(a);
        rdmax_progress(c);
    }
    rdmax_ep_flush(a, T_MS);
    r.stop = 1;
    pthread_join(th, NULL);
    started = 0;
    printf("INFO snapshot: %ld operations, %ld snapshots (%ld with operations in flight)\n", ops, r.snaps,
           r.inflight);
    CHECK(r.bad == 0, "%ld of %ld snapshots broke completed <= posted, first: %s", r.bad, r.snaps, r.why);
    CHECK(rd(p, RDMAX_PROFILE_VAR_COMPLETED(RDMAX_OP_PUT)) == rd(p, RDMAX_PROFILE_VAR_POSTED(RDMAX_OP_PUT)),
          "after the flush, completed != posted");
    tl_end();
out:
    if (started) {
        r.stop = 1;
        pthread_join(th, NULL);
    }
    rdmax_profile_destroy(p);
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_mem_free(src);
    rdmax_mem_free(dst);
    destroy_ctx(c);
    if (tl_case_failed)
        tl_end();
}

/* ---- events ------------------------------------------------------------------------------------- */
#define EVKEEP 64
struct evlog {
    int n[RDMAX_PROFILE_EVENT__COUNT];
    rdmax_ep *ep[EVKEEP];
    uint64_t detail[EVKEEP];
    int type[EVKEEP];
    int total;
    rdmax_profile *prof;   /* the profile the callback was registered on */
    int wrong_prof;
    int reg_from_cb;       /* status of a registration tried from inside the callback */
    int try_reg;
};

static void on_event(rdmax_profile *prof, rdmax_profile_event type, rdmax_ep *ep, uint64_t detail, void *user)
{
    struct evlog *e = (struct evlog *)user;
    if (prof != e->prof)
        e->wrong_prof++;
    if ((unsigned)type < RDMAX_PROFILE_EVENT__COUNT)
        e->n[type]++;
    if (e->total < EVKEEP) {
        e->ep[e->total] = ep;
        e->detail[e->total] = detail;
        e->type[e->total] = (int)type;
    }
    e->total++;
    if (e->try_reg)
        e->reg_from_cb = rdmax_profile_reg_event(prof, RDMAX_PROFILE_EVENT_EP_ERROR, on_event, user);
}

/* The dispatcher alone: what the library's calls will reach. */
static void events_dispatch_case(void)
{
    rdmax_ctx *c = open_ctx();
    rdmax_profile *p1 = NULL, *p2 = NULL;
    struct evlog e1, e2;
    memset(&e1, 0, sizeof e1);
    memset(&e2, 0, sizeof e2);
    tl_begin("events/dispatch: once per event and registered profile");
    REQUIRE(rdmax_profile_create(c, &p1) == RDMAX_OK && rdmax_profile_create(c, &p2) == RDMAX_OK, "open");
    e1.prof = p1;
    e2.prof = p2;
    CHECK(!rdmax__profile_wants(c, RDMAX_PROFILE_EVENT_SQ_FULL), "wants an event nobody registered");
    CHECK_ST(rdmax_profile_reg_event(p1, RDMAX_PROFILE_EVENT_SQ_FULL, on_event, &e1), RDMAX_OK);
    CHECK_ST(rdmax_profile_reg_event(p2, RDMAX_PROFILE_EVENT_SQ_FULL, on_event, &e2), RDMAX_OK);
    CHECK_ST(rdmax_profile_reg_event(p2, RDMAX_PROFILE_EVENT_RCACHE_EVICT, on_event, &e2), RDMAX_OK);
    CHECK_ST(rdmax_profile_reg_event(p1, (rdmax_profile_event)RDMAX_PROFILE_EVENT__COUNT, on_event, &e1),
             RDMAX_ERR_INVALID_PARAM);
    CHECK(rdmax__profile_wants(c, RDMAX_PROFILE_EVENT_SQ_FULL), "mask misses a registered event");
#ifdef RDMAX__PROF_CTX_FIELDS
    CHECK(!rdmax__profile_wants(c, RDMAX_PROFILE_EVENT_EP_ERROR), "mask has an event nobody registered");
#endif
    rdmax_ep *fake = (rdmax_ep *)(uintptr_t)0x1000;
    for (int i = 0; i < 3; i++)
        RDMAX__PROFILE_EVENT(c, RDMAX_PROFILE_EVENT_SQ_FULL, fake, (uint64_t)i);
    RDMAX__PROFILE_EVENT(c, RDMAX_PROFILE_EVENT_RCACHE_EVICT, NULL, 4096);
    RDMAX__PROFILE_EVENT(c, RDMAX_PROFILE_EVENT_EP_ERROR, fake, 12);
    CHECK(e1.n[RDMAX_PROFILE_EVENT_SQ_FULL] == 3 && e1.total == 3, "profile 1: %d events, %d sq_full", e1.total,
          e1.n[RDMAX_PROFILE_EVENT_SQ_FULL]);
    CHECK(e2.n[RDMAX_PROFILE_EVENT_SQ_FULL] == 3 && e2.n[RDMAX_PROFILE_EVENT_RCACHE_EVICT] == 1 && e2.total == 4,
          "profile 2: %d events", e2.total);
    CHECK(e1.ep[0] == fake && e1.detail[2] == 2 && e2.ep[3] == NULL && e2.detail[3] == 4096, "ep or detail wrong");
    CHECK(e1.wrong_prof == 0 && e2.wrong_prof == 0, "callback got another profile");
    /* registering from a callback is refused; unregistering and closing stop the calls */
    e1.try_reg = 1;
    RDMAX__PROFILE_EVENT(c, RDMAX_PROFILE_EVENT_SQ_FULL, fake, 0);
    CHECK_ST(e1.reg_from_cb, RDMAX_ERR_INVALID_PARAM);
    e1.try_reg = 0;
    CHECK_ST(rdmax_profile_reg_event(p1, RDMAX_PROFILE_EVENT_SQ_FULL, NULL, NULL), RDMAX_OK);
    rdmax_profile_destroy(p2);
    p2 = NULL;
    int before = e1.total + e2.total;
    RDMAX__PROFILE_EVENT(c, RDMAX_PROFILE_EVENT_SQ_FULL, fake, 0);
    RDMAX__PROFILE_EVENT(c, RDMAX_PROFILE_EVENT_RCACHE_EVICT, NULL, 0);
    CHECK(e1.total + e2.total == before, "events after unregister/close");
    CHECK(!rdmax__profile_wants(c, RDMAX_PROFILE_EVENT_SQ_FULL), "mask still set after unregister");
    CHECK(!strcmp(rdmax_profile_event_str(RDMAX_PROFILE_EVENT_EP_ERROR), "ep_error"), "event name");
    tl_end();
out:
    rdmax_profile_destroy(p1);
    rdmax_profile_destroy(p2);
    destroy_ctx(c);
    if (tl_case_failed)
        tl_end();
}

/* Connected: once per connect, with the endpoint and the peer's QP number. */
static void events_connected_case(void)
{
    rdmax_ctx *c = open_ctx();
    rdmax_profile *p = NULL;
    rdmax_ep *a = NULL, *b = NULL;
    struct evlog e;
    memset(&e, 0, sizeof e);
    tl_begin("events/ep_connected once per connect");
    REQUIRE(rdmax_profile_create(c, &p) == RDMAX_OK, "open");
    e.prof = p;
    CHECK_ST(rdmax_profile_reg_event(p, RDMAX_PROFILE_EVENT_EP_CONNECTED, on_event, &e), RDMAX_OK);
    REQUIRE(rdmax_ep_create_pair(c, NULL, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
    CHECK(e.total == 2 && e.n[RDMAX_PROFILE_EVENT_EP_CONNECTED] == 2, "%d events for one pair", e.total);
    CHECK(e.ep[0] == a && e.ep[1] == b, "events name the wrong endpoints");
    rdmax_ep_resources ia, ib;
    rdmax_ep_query_resources(a, &ia);
    rdmax_ep_query_resources(b, &ib);
    CHECK(e.detail[0] == ib.qp_num && e.detail[1] == ia.qp_num, "detail is not the peer's QP number");
    tl_end();
out:
    rdmax_profile_destroy(p);
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    destroy_ctx(c);
    if (tl_case_failed)
        tl_end();
}

/* A peer process for the killed-peer cases: connects to port exposing 64 KiB, writes one byte to wfd once
   connected, then progresses until it is killed. */
static pid_t killable_peer(uint16_t port, int wfd)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    rdmax_ctx *cc = open_ctx();
    rdmax_ep *ce;
    rdmax_mem *pm;
    if (rdmax_mem_alloc(cc, 65536, RDMAX_ACCESS_REMOTE_WRITE, &pm) != RDMAX_OK)
        _exit(2);
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.expose = pm;
    if (rdmax_connect(cc, "127.0.0.1", port, &d, &ce, 5000) != RDMAX_OK)
        _exit(3);
    if (write(wfd, "c", 1) != 1)
        _exit(4);
    for (;;)
        rdmax_progress(cc);
}

/* The surviving side's endpoint in the killed-peer cases: RC retry time 0.94 s, not the default 7.5 s (the
   same retransmits and retry_exceeded, sooner). */
static const rdmax_ep_desc g_short_retry = {.timeout = 15};

/* A peer process killed: exactly one endpoint-error event, however many operations fail after it. */
static void events_killed_peer_case(void)
{
    rdmax_ctx *c = open_ctx();
    rdmax_profile *p = NULL;
    rdmax_listener *l = NULL;
    rdmax_ep *ep = NULL;
    rdmax_mem *m = NULL;
    pid_t pid = -1;
    struct evlog e;
    memset(&e, 0, sizeof e);
    tl_begin("events/peer process killed: one ep_error");
    REQUIRE(rdmax_profile_create(c, &p) == RDMAX_OK, "open");
    e.prof = p;
    CHECK_ST(rdmax_profile_reg_event(p, RDMAX_PROFILE_EVENT_EP_ERROR, on_event, &e), RDMAX_OK);
    CHECK_ST(rdmax_profile_reg_event(p, RDMAX_PROFILE_EVENT_EP_CONNECTED, on_event, &e), RDMAX_OK);
    REQUIRE(rdmax_listener_create(c, "127.0.0.1", 0, &l) == RDMAX_OK, "listen");
    uint16_t port = rdmax_listener_query_port(l);
    int pipefd[2];
    REQUIRE(pipe(pipefd) == 0, "pipe");
    pid = killable_peer(port, pipefd[1]);
    REQUIRE(rdmax_accept(l, &g_short_retry, &ep, 5000) == RDMAX_OK, "accept: %s", g_lastlog);
    char ch;
    REQUIRE(read(pipefd[0], &ch, 1) == 1, "child did not connect");
    CHECK(e.n[RDMAX_PROFILE_EVENT_EP_CONNECTED] == 1 && e.ep[0] == ep, "%d connected events for one accept",
          e.n[RDMAX_PROFILE_EVENT_EP_CONNECTED]);
    REQUIRE(rdmax_mem_alloc(c, 65536, RDMAX_ACCESS_LOCAL, &m) == RDMAX_OK, "alloc");
    rdmax_comp comp;
    memset(&comp, 0, sizeof comp);
    CHECK_ST(rdmax_put(ep, m->addr, 4096, m, rdmax_ep_query_remote(ep, 0)->addr, rdmax_ep_query_remote(ep, 0)->rkey, &comp), RDMAX_INPROGRESS);
    CHECK(wait_comp(c, &comp) == 0 && comp.status == RDMAX_OK, "put to the live peer: %s", rdmax_status_str(comp.status));
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    pid = -1;
    /* several operations in flight when the peer is gone: one fails, the rest are flushed */
    rdmax_comp cs[8];
    memset(cs, 0, sizeof cs);
    for (int i = 0; i < 8; i++)
        CHECK_ST(rdmax_put(ep, m->addr, 4096, m, rdmax_ep_query_remote(ep, 0)->addr, rdmax_ep_query_remote(ep, 0)->rkey, &cs[i]), RDMAX_INPROGRESS);
    for (int i = 0; i < 8; i++)
        CHECK(wait_comp(c, &cs[i]) == 0, "no completion %d", i);
    CHECK_ST(cs[0].status, RDMAX_ERR_RETRY_EXCEEDED);
    CHECK_ST(rdmax_put(ep, m->addr, 4096, m, rdmax_ep_query_remote(ep, 0)->addr, rdmax_ep_query_remote(ep, 0)->rkey, NULL), RDMAX_ERR_ENDPOINT);
    rdmax_ep_flush(ep, 2000);
    for (int i = 0; i < 100; i++)
        rdmax_progress(c);
    uint64_t errs = rd(p, RDMAX_PROFILE_VAR_EP_ERRORS), errcqes = rd(p, RDMAX_PROFILE_VAR_ERR_CQES);
    CHECK(errs == 1, "ep_errors %llu", (unsigned long long)errs);
    CHECK(errcqes >= 1, "err_cqes %llu", (unsigned long long)errcqes);
    CHECK(e.n[RDMAX_PROFILE_EVENT_EP_ERROR] == 1, "%d ep_error events for one dead peer",
          e.n[RDMAX_PROFILE_EVENT_EP_ERROR]);
    CHECK(e.total >= 2 && e.ep[1] == ep && e.detail[1] == IBV_WC_RETRY_EXC_ERR, "event names ep %p detail %llu",
          (void *)e.ep[1], (unsigned long long)e.detail[1]);
    tl_end();
out:
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    rdmax_profile_destroy(p);
    rdmax_ep_destroy(ep);
    rdmax_mem_free(m);
    rdmax_listener_destroy(l);
    destroy_ctx(c);
    if (tl_case_failed)
        tl_end();
}

/* The device's own counter, read here without the library: -1 when the file is missing. */
static long long sysfs_counter(rdmax_ctx *c, const char *file)
{
    char path[256], buf[32];
    snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/%u/hw_counters/%s", rdmax_ctx_query_attr(c)->name,
             (unsigned)rdmax_ctx_query_attr(c)->port, file);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long long v = -1;
    if (fgets(buf, sizeof buf, f))
        v = strtoll(buf, NULL, 10);
    fclose(f);
    return v;
}

/* port.*: a peer killed mid-stream makes the requester retransmit until it gives up, which moves the
   device's completer_retry_err and retry_exceeded_err (rxe): the profile's snapshot shows the sysfs values. */
static void port_counters_case(void)
{
    rdmax_ctx *c = open_ctx();
    rdmax_profile *p = NULL;
    rdmax_listener *l = NULL;
    rdmax_ep *ep = NULL;
    rdmax_mem *m = NULL;
    pid_t pid = -1;
    tl_begin("vars/port counters: retransmits and retry_exceeded move with a killed peer, equal to sysfs");
    REQUIRE(rdmax_profile_create(c, &p) == RDMAX_OK, "open");
    static const struct {
        uint32_t id;
        const char *rxe;
    } pv[] = {{RDMAX_PROFILE_VAR_PORT_RETRANSMITS, "completer_retry_err"},
              {RDMAX_PROFILE_VAR_PORT_RETRY_EXCEEDED, "retry_exceeded_err"},
              {RDMAX_PROFILE_VAR_PORT_RNR_NAKS_RECEIVED, "rcvd_rnr_err"},
              {RDMAX_PROFILE_VAR_PORT_RNR_NAKS_SENT, "send_rnr_err"},
              {RDMAX_PROFILE_VAR_PORT_SEQ_NAKS_RECEIVED, "rcvd_seq_err"},
              {RDMAX_PROFILE_VAR_PORT_OUT_OF_SEQ, "out_of_seq_request"},
              {RDMAX_PROFILE_VAR_PORT_DUPLICATE_REQUESTS, "duplicate_request"}};
    enum { NPV = sizeof pv / sizeof pv[0] };
    uint64_t before[NPV], after[NPV];
    const rdmax_profile_var *vars;
    size_t nvars;
    REQUIRE(rdmax_profile_query_vars(p, &vars, &nvars) == RDMAX_OK, "query");
    rdmax_profile_start_reads(p);
    for (int i = 0; i < NPV; i++) {
        rdmax_status st = rdmax_profile_read_u64(p, pv[i].id, &before[i]);
        long long s = sysfs_counter(c, pv[i].rxe);
        /* a missing file reads as unsupported, never as a silent 0 */
        CHECK(st == (s < 0 ? RDMAX_ERR_UNSUPPORTED : RDMAX_OK), "%s: %s with sysfs %lld", pv[i].rxe,
              rdmax_status_str(st), s);
        if (s >= 0)
            CHECK(before[i] == (uint64_t)s, "%s: profile %llu, sysfs %lld", pv[i].rxe,
                  (unsigned long long)before[i], s);
    }
    rdmax_profile_end_reads(p);
    REQUIRE(sysfs_counter(c, "retry_exceeded_err") >= 0, "device %s has no rxe hw_counters", rdmax_ctx_query_attr(c)->name);
    REQUIRE(rdmax_listener_create(c, "127.0.0.1", 0, &l) == RDMAX_OK, "listen");
    uint16_t port = rdmax_listener_query_port(l);
    int pipefd[2];
    REQUIRE(pipe(pipefd) == 0, "pipe");
    pid = killable_peer(port, pipefd[1]);
    REQUIRE(rdmax_accept(l, &g_short_retry, &ep, 5000) == RDMAX_OK, "accept: %s", g_lastlog);
    char ch;
    REQUIRE(read(pipefd[0], &ch, 1) == 1, "child did not connect");
    REQUIRE(rdmax_mem_alloc(c, 65536, RDMAX_ACCESS_LOCAL, &m) == RDMAX_OK, "alloc");
    rdmax_comp comp;
    memset(&comp, 0, sizeof comp);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    pid = -1;
    const rdmax_rbuf *rr = rdmax_ep_query_remote(ep, 0);
    REQUIRE(rr != NULL, "the peer advertised no region");
    CHECK_ST(rdmax_put(ep, m->addr, 4096, m, rr->addr, rr->rkey, &comp), RDMAX_INPROGRESS);
    CHECK(wait_comp(c, &comp) == 0, "no completion");
    CHECK_ST(comp.status, RDMAX_ERR_RETRY_EXCEEDED);
    rdmax_profile_start_reads(p);
    for (int i = 0; i < NPV; i++) {
        CHECK_ST(rdmax_profile_read_u64(p, pv[i].id, &after[i]), RDMAX_OK);
        long long s = sysfs_counter(c, pv[i].rxe);
        CHECK(after[i] == (uint64_t)s, "%s after: profile %llu, sysfs %lld", pv[i].rxe,
              (unsigned long long)after[i], s);
        printf("INFO port counter %s (%s): %llu -> %llu\n", pv[i].rxe, vars[pv[i].id].name,
               (unsigned long long)before[i], (unsigned long long)after[i]);
    }
    rdmax_profile_end_reads(p);
    CHECK(after[0] > before[0], "port.retransmits did not move: %llu", (unsigned long long)after[0]);
    CHECK(after[1] > before[1], "port.retry_exceeded did not move: %llu", (unsigned long long)after[1]);
    uint64_t x;
    CHECK_ST(rdmax_profile_read_u64(p, RDMAX_PROFILE_VAR_PORT_RETRY_EXCEEDED, &x), RDMAX_OK);
    CHECK(x == after[1], "a read outside the snapshot: %llu, snapshot %llu", (unsigned long long)x,
          (unsigned long long)after[1]);
    tl_end();
out:
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    rdmax_profile_destroy(p);
    rdmax_ep_destroy(ep);
    rdmax_mem_free(m);
    rdmax_listener_destroy(l);
    destroy_ctx(c);
    if (tl_case_failed)
        tl_end();
}

/* Send queue full: one event per refused post, naming the resource. */
static void events_sq_full_case(void)
{
    rdmax_ctx *c = open_ctx();
    rdmax_profile *p = NULL;
    rdmax_ep *a = NULL, *b = NULL;
    rdmax_mem *src = NULL, *dst = NULL;
    struct evlog e;
    memset(&e, 0, sizeof e);
    tl_begin("events/sq_full once per refused post");
    REQUIRE(rdmax_profile_create(c, &p) == RDMAX_OK, "open");
    e.prof = p;
    CHECK_ST(rdmax_profile_reg_event(p, RDMAX_PROFILE_EVENT_SQ_FULL, on_event, &e), RDMAX_OK);
    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.sq_depth = 16;
    REQUIRE(rdmax_ep_create_pair(c, &d, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
    REQUIRE(rdmax_mem_alloc(c, 4096, RDMAX_ACCESS_LOCAL, &src) == RDMAX_OK, "alloc");
    REQUIRE(rdmax_mem_alloc(c, 4096, RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_ANY_ENDPOINT, &dst) == RDMAX_OK, "alloc");
    uint64_t nr0 = rd(p, RDMAX_PROFILE_VAR_NO_RESOURCE);
    int ok = 0, refused = 0;
    for (int i = 0; i < 40; i++) {
        rdmax_status st = rdmax_put(a, src->addr, 1024, src, (uintptr_t)dst->addr, dst->rkey, NULL);
        if (st == RDMAX_INPROGRESS)
            ok++;
        else if (st == RDMAX_ERR_NO_RESOURCE)
            refused++;
        else
            CHECK_ST(st, RDMAX_INPROGRESS);
    }
    uint64_t nr = rd(p, RDMAX_PROFILE_VAR_NO_RESOURCE) - nr0;
    CHECK(ok == 16 && refused == 24, "%d posted, %d refused with a 16-slot send queue", ok, refused);
    CHECK(nr == (uint64_t)refused, "no_resource counted %llu of %d refusals", (unsigned long long)nr, refused);
    CHECK(e.n[RDMAX_PROFILE_EVENT_SQ_FULL] == refused, "%d sq_full events for %d refusals",
          e.n[RDMAX_PROFILE_EVENT_SQ_FULL], refused);
    CHECK(e.ep[0] == a && e.detail[0] == RDMAX_PROFILE_NORES_SQ, "event ep %p detail %llu", (void *)e.ep[0],
          (unsigned long long)e.detail[0]);
    CHECK(rdmax_ep_flush(a, T_MS) == RDMAX_OK, "flush");
    tl_end();
out:
    rdmax_profile_destroy(p);
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_mem_free(src);
    rdmax_mem_free(dst);
    destroy_ctx(c);
    if (tl_case_failed)
        tl_end();
}

/* Registration cache: one event per eviction and per invalidation (explicit and from munmap). */
static void events_rcache_case(void)
{
    enum { BUF = 8192, STRIDE = 65536, NB = 4 };
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.rcache_max_regions = 2;
    cd.rcache_mode = RDMAX_RCACHE_MANUAL; /* cache every buffer; only explicit invalidation */
    rdmax_ctx *c = open_ctx2(&cd);
    rdmax_profile *p = NULL;
    rdmax_ep *a = NULL, *b = NULL;
    rdmax_mem *dst = NULL;
    char *base = NULL;
    struct evlog e;
    memset(&e, 0, sizeof e);
    tl_begin("events/rcache: one per eviction and invalidation");
    REQUIRE(rdmax_profile_create(c, &p) == RDMAX_OK, "open");
    e.prof = p;
    CHECK_ST(rdmax_profile_reg_event(p, RDMAX_PROFILE_EVENT_RCACHE_EVICT, on_event, &e), RDMAX_OK);
    CHECK_ST(rdmax_profile_reg_event(p, RDMAX_PROFILE_EVENT_RCACHE_INVALIDATE, on_event, &e), RDMAX_OK);
    REQUIRE(rdmax_ep_create_pair(c, NULL, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
    REQUIRE(rdmax_mem_alloc(c, BUF, RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_ANY_ENDPOINT, &dst) == RDMAX_OK, "alloc");
    /* buffers STRIDE apart: never touching, so the cache cannot merge them */
    base = (char *)mmap(NULL, (size_t)NB * 2 * STRIDE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(base != MAP_FAILED, "mmap");
    memset(base, 1, (size_t)NB * 2 * STRIDE);
    for (int i = 0; i < NB; i++) {
        rdmax_comp comp;
        memset(&comp, 0, sizeof comp);
        CHECK_ST(put_retry(c, a, base + (size_t)i * 2 * STRIDE, BUF, NULL, (uintptr_t)dst->addr, dst->rkey, &comp),
                 RDMAX_INPROGRESS);
        CHECK(wait_comp(c, &comp) == 0 && comp.status == RDMAX_OK, "put %d: %s", i, rdmax_status_str(comp.status));
    }
    uint64_t ev = rd(p, RDMAX_PROFILE_VAR_RCACHE_EVICTIONS);
    CHECK(ev == NB - 2, "%llu evictions with room for 2 regions and %d buffers", (unsigned long long)ev, NB);
    /* explicit invalidation of the newest buffer */
    int dropped = rdmax_rcache_invalidate(rdmax_ctx_query_rcache(c), base + (size_t)(NB - 1) * 2 * STRIDE, BUF);
    CHECK(dropped == 1, "invalidate dropped %d regions", dropped);
    /* munmap of the other cached one; the next get applies it */
    CHECK(munmap(base + (size_t)(NB - 2) * 2 * STRIDE, 2 * STRIDE) == 0, "munmap");
    rdmax_comp comp;
    memset(&comp, 0, sizeof comp);
    CHECK_ST(put_retry(c, a, base, BUF, NULL, (uintptr_t)dst->addr, dst->rkey, &comp), RDMAX_INPROGRESS);
    CHECK(wait_comp(c, &comp) == 0 && comp.status == RDMAX_OK, "put after munmap: %s", rdmax_status_str(comp.status));
    uint64_t inv = rd(p, RDMAX_PROFILE_VAR_RCACHE_INVALIDATIONS);
    CHECK(inv == 1, "%llu invalidations (manual mode: the munmap is not applied)", (unsigned long long)inv);
    CHECK(e.n[RDMAX_PROFILE_EVENT_RCACHE_EVICT] == (int)ev, "%d evict events for %llu evictions",
          e.n[RDMAX_PROFILE_EVENT_RCACHE_EVICT], (unsigned long long)ev);
    CHECK(e.n[RDMAX_PROFILE_EVENT_RCACHE_INVALIDATE] == (int)inv, "%d invalidate events for %llu invalidations",
          e.n[RDMAX_PROFILE_EVENT_RCACHE_INVALIDATE], (unsigned long long)inv);
    for (int i = 0; i < e.total && i < EVKEEP; i++)
        CHECK(e.ep[i] == NULL && e.detail[i] == BUF, "event %d: ep %p, %llu bytes", i, (void *)e.ep[i],
              (unsigned long long)e.detail[i]);
    tl_end();
out:
    rdmax_profile_destroy(p);
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_mem_free(dst);
    destroy_ctx(c);
    if (base && base != MAP_FAILED) {
        munmap(base, (size_t)(NB - 2) * 2 * STRIDE);
        munmap(base + (size_t)(NB - 1) * 2 * STRIDE, 2 * STRIDE);
    }
    if (tl_case_failed)
        tl_end();
}

/* ---- log dedupe -------------------------------------------------------------------------------- */
static void dedupe_logic_case(void)
{
    struct rdmax__log_dd dd;
    memset(&dd, 0, sizeof dd);
    dd.lvl = -1;
    char s[160];
    int sl, f, printed = 0, summaries = 0;
    const uint64_t ms = 1000000;
    tl_begin("dedupe/logic");
    f = rdmax__log_dd_step(&dd, "rxe0", RDMAX_LOG_ERROR, "A failed", 0, s, sizeof s, &sl);
    CHECK(f == RDMAX__LOG_DD_PRINT, "first message: flags %d", f);
    for (int i = 1; i <= 999; i++) {
        f = rdmax__log_dd_step(&dd, "rxe0", RDMAX_LOG_ERROR, "A failed", (uint64_t)i * ms, s, sizeof s, &sl);
        printed += (f & RDMAX__LOG_DD_PRINT) != 0;
        summaries += (f & RDMAX__LOG_DD_SUMMARY) != 0;
    }
    CHECK(printed == 0 && summaries == 0, "repeats within a second: %d printed, %d summaries", printed, summaries);
    f = rdmax__log_dd_step(&dd, "rxe0", RDMAX_LOG_WARN, "A failed", 1000 * ms, s, sizeof s, &sl);
    CHECK(f == (RDMAX__LOG_DD_PRINT | RDMAX__LOG_DD_SUMMARY), "same text at another level: flags %d", f);
    CHECK(!strcmp(s, "device rxe0: last message repeated 999 times") && sl == RDMAX_LOG_ERROR, "summary '%s' level %d",
          s, sl);
    f = rdmax__log_dd_step(&dd, "rxe0", RDMAX_LOG_WARN, "B", 1001 * ms, s, sizeof s, &sl);
    CHECK(f == RDMAX__LOG_DD_PRINT, "a new message after no repeats: flags %d", f);
    /* a run of 25 s: a summary every RDMAX_LOG_REPEAT_MS, nothing else */
    printed = summaries = 0;
    uint64_t counted = 0;
    for (uint64_t t = 1002; t < 1002 + 25000; t++) {
        f = rdmax__log_dd_step(&dd, "", RDMAX_LOG_WARN, "B", t * ms, s, sizeof s, &sl);
        printed += (f & RDMAX__LOG_DD_PRINT) != 0;
        if (f & RDMAX__LOG_DD_SUMMARY) {
            unsigned long long k = 0;
            CHECK(sscanf(s, "last message repeated %llu times", &k) == 1, "summary '%s'", s);
            counted += k;
            summaries++;
        }
    }
    CHECK(printed == 0 && summaries == 25000 / RDMAX_LOG_REPEAT_MS, "25 s run: %d printed, %d summaries", printed,
          summaries);
    CHECK(counted + dd.repeats == 25000, "summaries count %llu + %llu pending, expected 25000",
          (unsigned long long)counted, (unsigned long long)dd.repeats);
    tl_end();
}

/* Through the context: 1000 identical errors reach the logger once, then "repeated 999 times". */
static void vlog_like(rdmax_ctx *c, const char *msg)
{
    rdmax__log(c, RDMAX_LOG_ERROR, RDMAX_LOG_ITEM_NONE, "%s", msg);
}

static void dedupe_ctx_case(void)
{
    rdmax_ctx *c = open_ctx();
    tl_begin("dedupe/1000 identical errors through a context");
    g_nlogs = 0;
    for (int i = 0; i < 1000; i++) {
        /* a real library error: registering memory that is not mapped */
        rdmax_mem *m = NULL;
        CHECK(rdmax_mem_reg(c, (void *)(uintptr_t)0x1000, 4096, RDMAX_ACCESS_LOCAL, &m) != RDMAX_OK, "reg of page 1");
    }
    int n1 = g_nlogs;
    char first[256];
    snprintf(first, sizeof first, "%s", g_logs[0]);
    vlog_like(c, "another error");
    for (int i = 0; i < 5; i++)
        vlog_like(c, "another error");
    int n2 = g_nlogs;
    destroy_ctx(c);
    c = NULL;
    CHECK(n1 == 1, "the logger got %d lines for 1000 identical errors", n1);
    CHECK(g_items[0] == RDMAX_LOG_ITEM_MEM_REG, "first line: item %s, '%s'", rdmax_log_item_str(g_items[0]), first);
    /* the count is only in the text: the item says it is a summary, the text how many it stands for */
    CHECK(n2 == 3 && g_items[1] == RDMAX_LOG_ITEM_LOG_REPEATED && strstr(g_logs[1], " 999 times") &&
              g_items[2] == RDMAX_LOG_ITEM_NONE,
          "after a new error: %d lines, '%s', '%s'", n2, g_logs[1], g_logs[2]);
    CHECK(g_nlogs == 4 && g_items[3] == RDMAX_LOG_ITEM_LOG_REPEATED && strstr(g_logs[3], " 5 times"),
          "at destroy: %d lines, last '%s'", g_nlogs, g_nlogs > 3 ? g_logs[3] : "");
    tl_end();
}

/* ---- profile points ---------------------------------------------------------------------------- */
struct row {
    char status[8], name[32];
    double total;
    unsigned long long nr, avg;
};

static int parse_table(const char *text, struct row *rows, int max)
{
    int n = 0;
    const char *l = text;
    while (l && *l && n < max) {
        struct row r;
        if (sscanf(l, "%7s %31s %lf %llu %llu", r.status, r.name, &r.total, &r.nr, &r.avg) == 5 &&
            (!strcmp(r.status, "on") || !strcmp(r.status, "off")))
            rows[n++] = r;
        l = strchr(l, '\n');
        if (l)
            l++;
    }
    return n;
}

static const struct row *find_row(const struct row *rows, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(rows[i].name, name))
            return &rows[i];
    return NULL;
}

static void points_case(void)
{
    enum { N = 200 };
    rdmax_ctx *c = open_ctx();
    rdmax_ep *a = NULL, *b = NULL;
    rdmax_mem *dst = NULL;
    char *plain = NULL, *text = NULL;
    size_t tlen = 0;
    tl_begin("points/print (%s)",
#ifdef RDMAX_PROFILE
             "RDMAX_PROFILE"
#else
             "compiled out"
#endif
    );
    REQUIRE(rdmax_ep_create_pair(c, NULL, &a, &b) == RDMAX_OK, "pair: %s", g_lastlog);
    REQUIRE(rdmax_mem_alloc(c, 8192, RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_ANY_ENDPOINT, &dst) == RDMAX_OK, "alloc");
    plain = (char *)aligned_alloc(4096, 8192);
    REQUIRE(plain, "malloc");
    memset(plain, 3, 8192);
    for (int i = 0; i < N; i++) {
        rdmax_comp comp;
        memset(&comp, 0, sizeof comp);
        /* before the paste the library has no points: time the test's own calls instead */
        RDMAX__PROF_BEGIN(c, RCACHE_GET);
        rdmax_status st = put_retry(c, a, plain, 8192, NULL, (uintptr_t)dst->addr, dst->rkey, &comp);
        RDMAX__PROF_END(c, RCACHE_GET);
        CHECK_ST(st, RDMAX_INPROGRESS);
        CHECK(wait_comp(c, &comp) == 0 && comp.status == RDMAX_OK, "put: %s", rdmax_status_str(comp.status));
    }
    FILE *f = open_memstream(&text, &tlen);
    REQUIRE(f, "open_memstream");
    rdmax_profile_print(c, f);
    fclose(f);
    fputs(text, stdout);
    struct row rows[16];
    int n = parse_table(text, rows, 16);
    CHECK(n == RDMAX__PROF_POINT__COUNT, "%d table rows", n);
    CHECK(strstr(text, "put.posted: ") && strstr(text, "rcache.hits: "), "variables missing from the print");
    const struct row *rget = find_row(rows, n, "rcache_get"), *rpost = find_row(rows, n, "post"),
                     *rpoll = find_row(rows, n, "poll"), *rprog = find_row(rows, n, "progress");
    REQUIRE(rget && rpost && rpoll && rprog && find_row(rows, n, "arb_dispatch"), "a point is missing");
#ifdef RDMAX_PROFILE
    for (int i = 0; i < n; i++)
        CHECK(!strcmp(rows[i].status, "on"), "%s is %s", rows[i].name, rows[i].status);
    CHECK(rget->nr == 2 * N, "rcache_get counted %llu (expected %d: the library's %d and the test's %d)",
          rget->nr, 2 * N, N, N);
    CHECK(rpost->nr >= N && rpoll->nr > 0 && rprog->nr > 0, "post %llu poll %llu progress %llu", rpost->nr,
          rpoll->nr, rprog->nr);
    CHECK(rget->avg > 0 && rget->total > 0, "no time measured");
    CHECK(rget->total * 1e9 >= (double)rget->avg * (double)rget->nr * 0.99 &&
          rget->total * 1e9 <= (double)rget->avg * (double)rget->nr * 1.01 + 1, "total %.9f != avg %llu x nr %llu",
          rget->total, rget->avg, rget->nr);
#else
    for (int i = 0; i < n; i++)
        CHECK(!strcmp(rows[i].status, "off") && rows[i].nr == 0, "%s: %s, %llu", rows[i].name, rows[i].status,
              rows[i].nr);
#endif
    tl_end();
out:
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_mem_free(dst);
    destroy_ctx(c);
    free(plain);
    free(text);
    if (tl_case_failed)
        tl_end();
}

/* ---- overhead, for the record (INFO lines, no verdict) ------------------------------------------- */
static void overhead_info(void)
{
    rdmax_ctx *c = open_ctx();
    rdmax_ep *a = NULL, *b = NULL;
    rdmax_mem *src = NULL, *dst = NULL;
    rdmax_profile *p = NULL;
    if (rdmax_ep_create_pair(c, NULL, &a, &b) != RDMAX_OK || rdmax_mem_alloc(c, 4096, 0, &src) != RDMAX_OK ||
        rdmax_mem_alloc(c, 4096, RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_ANY_ENDPOINT, &dst) != RDMAX_OK || rdmax_profile_create(c, &p) != RDMAX_OK) {
        printf("INFO overhead: setup failed\n");
        goto out;
    }
    /* inline puts + progress: the fast path with (or without) the points */
    for (int rep = 0; rep < 3; rep++) {
        long n = 0;
        double t0 = now_s();
        while (n < 50000) {
            if (rdmax_put(a, src->addr, 8, NULL, (uintptr_t)dst->addr, dst->rkey, NULL) == RDMAX_OK)
                n++;
            rdmax_progress(c);
        }
        double t1 = now_s();
        printf("INFO overhead: put(8 B inline)+progress: %.0f ns per iteration%s\n", (t1 - t0) * 1e9 / (double)n,
#ifdef RDMAX_PROFILE
               " [RDMAX_PROFILE]"
#else
               ""
#endif
        );
    }
    rdmax_ep_flush(a, T_MS);
    {
        enum { K = 200000 };
        double t0 = now_s();
        for (int i = 0; i < K; i++) {
            rdmax_profile_start_reads(p);
            rdmax_profile_end_reads(p);
        }
        double t1 = now_s();
        printf("INFO overhead: snapshot of %d variables: %.0f ns\n", (int)RDMAX_PROFILE_VAR__COUNT,
               (t1 - t0) * 1e9 / K);
    }
#ifdef RDMAX_PROFILE
    {
        enum { K = 1000000 };
        double t0 = now_s();
        for (int i = 0; i < K; i++) {
            RDMAX__PROF_BEGIN(c, DISPATCH);
            __asm__ volatile("" ::: "memory");
            RDMAX__PROF_END(c, DISPATCH);
        }
        double t1 = now_s();
        printf("INFO overhead: one BEGIN/END pair: %.1f ns (%s)\n", (t1 - t0) * 1e9 / K,
               RDMAX__TICKS_TSC ? "rdtsc" : "clock_gettime");
    }
#endif
out:
    rdmax_profile_destroy(p);
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_mem_free(src);
    rdmax_mem_free(dst);
    destroy_ctx(c);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    printf("INFO profile_test: %s\n",
#ifdef RDMAX_PROFILE
           "RDMAX_PROFILE"
#else
           "no RDMAX_PROFILE"
#endif
    );
    int only_overhead = argc > 1 && !strcmp(argv[1], "overhead");
    if (!only_overhead) {
        vars_list_case();
        vars_puts_case();
        snapshot_order_case();
        snapshot_case();
        events_dispatch_case();
        events_connected_case();
        events_killed_peer_case();
        port_counters_case();
        events_sq_full_case();
        events_rcache_case();
        dedupe_logic_case();
        dedupe_ctx_case();
        points_case();
    }
    overhead_info();
    return tl_failed_total ? 1 : 0;
}
