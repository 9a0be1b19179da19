/* bench/scope.c - what scoping exposed memory to its endpoint costs (issue 30), side by side in one run
   on one device: regions exposed the default way (a type-2 memory window per region, bound to the
   endpoint's QP at connect, freed at destroy: EXPOSED MEMORY in rdmax.h) beside the same regions
   registered with RDMAX_ACCESS_ANY_ENDPOINT (a plain registration, no window).

       build-bench/scope [-d DEV] [-n PAIRS] [-r ROUNDS] [-p PUTS] [-k K] [-g GETS]

   Per connect: PAIRS RC pairs per case, in ROUNDS rounds. A pair is two endpoints of one context: one
   exposing R regions of 4 KiB (R = 1 and 4), the other nothing, as a server's and a client's. A round
   makes PAIRS / ROUNDS pairs of every case (rdmax_ep_create x 2: a window is allocated per scoped
   region), connects them (rdmax_ep_query_record, rdmax_ep_connect_record x 2: the windows are bound and
   waited for), destroys them (rdmax_ep_destroy x 2: the windows are freed); each pair is timed alone,
   and the cases take turns pair by pair, so a stretch of a slow host falls on all of them. Connecting
   is also split into the time spent in ibv_modify_qp (timed through ctx->modify_qp, rdmax's seam for
   it) and the rest, rdmax's part. A value is the median over every pair.

   Per operation: two pairs, one whose far endpoint exposes a 4 KiB region through a window, one whose
   far endpoint exposes the same size registered RDMAX_ACCESS_ANY_ENDPOINT; the near endpoint writes and
   reads it with the key rdmax_ep_query_remote gives (the responder checks the window, or the plain
   registration, on every access). A round: PUTS 8-byte puts per case (inline, unsignaled, an
   rdmax_ep_flush after every K, the last put's tag checked in the region), the cases taking turns K
   puts at a time; then GETS 8-byte gets per case with a comp, each timed alone, the cases taking turns
   get by get (median round trip). A value is the median over the rounds.

   Output: one line per value, as bench/arbiter_bench.c's ("bench scope case=NAME value=V unit=U", then
   the rounds' values), a "bench scope env ..." line with the device, its driver, the kernel and whether
   the device has memory windows, and checks: every window case bound R windows per pair
   (counters posted[RDMAX_OP_BIND]) and gave the peer a key that is not the region's own (mem->rkey 0),
   every ANY_ENDPOINT case bound none and advertised mem->rkey. Exit status 0 when every check passed.
   bench/guest.sh runs it (raw output scope.txt), bench/run.sh makes the scope_* rows of it.
*/
#define _GNU_SOURCE /* uname's struct, readlink */
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#include "../rdmax.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"

#define MAX_ROUNDS 64
#define MAX_REGIONS 4

static struct {
    const char *dev;
    int pairs, rounds;
    long puts, gets;
    int k;
} o = {.pairs = 200, .rounds = 5, .puts = 20000, .k = 64, .gets = 1000};

static rdmax_ctx *ctx;
static int failed;
static int have_mw;             /* the device has memory windows: else both cases are plain registrations */

static void die(const char *what, rdmax_status st)
{
    fprintf(stderr, "scope: %s: %s (%s)\n", what, rdmax_status_str(st), ctx ? rdmax_ctx_query_last_error(ctx) : "");
    exit(1);
}

static void check(int ok, const char *what)
{
    if (!ok) {
        printf("bench scope check FAILED: %s\n", what);
        failed = 1;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* the median of v[0..n), which it sorts */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* "bench scope case=NAME value=MEDIAN unit=UNIT rounds=V1,V2,..." (vals in round order) */
static void report(const char *name, const char *unit, const double *vals, int n)
{
    double s[MAX_ROUNDS];
    memcpy(s, vals, (size_t)n * sizeof *s);
    printf("bench scope case=%s value=%.6g unit=%s rounds=", name, median(s, n), unit);
    for (int i = 0; i < n; i++)
        printf("%s%.6g", i ? "," : "", vals[i]);
    printf("\n");
    fflush(stdout);
}

static uint64_t binds(void)
{
    rdmax_counters c;
    rdmax_ctx_query_counters(ctx, &c);
    return c.posted[RDMAX_OP_BIND];
}

/* ---- per connect ---------------------------------------------------------------------------------- */
/* connected = qp (the QP's RTR and RTS transitions in ibv_modify_qp: the kernel's part, the same in both
   cases, and the noisy one: 0.1 ms a pair in most runs on rxe in the VM, 15-25 ms in others on a loaded
   host) + own (the rest: rdmax's part, with windows the binds posted and waited for) */
enum { PH_MADE, PH_CONNECTED, PH_CONNECTED_QP, PH_CONNECTED_OWN, PH_DESTROYED, PH_SETUP, PH__COUNT };
static const char *const phase_name[PH__COUNT] = {"made", "connected", "connected_qp", "connected_own", "destroyed",
                                                  "setup"};

struct conn_case {
    const char *name;
    int window;                 /* 0: RDMAX_ACCESS_ANY_ENDPOINT */
    uint32_t regions;
    rdmax_ep **a, **b;          /* the endpoint that exposes (a server's) and the one that does not */
    double *t[PH__COUNT];       /* per pair, round after round */
    uint64_t binds, pairs;      /* windows bound, counted, over the pairs */
};

static rdmax_mem *scoped[MAX_REGIONS], *open_any[MAX_REGIONS];

/* ibv_modify_qp, timed (rdmax calls it through ctx->modify_qp) */
static double modify_us;
static int timed_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    double t0 = now_us();
    int rc = ibv_modify_qp(qp, attr, mask);
    modify_us += now_us() - t0;
    return rc;
}

static void case_desc(const struct conn_case *c, rdmax_ep_desc *ds)
{
    const rdmax_mem *const *mems = (const rdmax_mem *const *)(c->window ? scoped : open_any);
    memset(ds, 0, sizeof *ds);
    ds->expose = mems[0];
    ds->expose_list = mems + 1;
    ds->expose_count = c->regions - 1;
}

/* One round: n pairs of every case, made, connected, destroyed, each pair timed alone; the cases take
   turns pair by pair (the first case one later each pair), so a stretch of a slow host falls on all of
   them. Times go to t[ph][at + i]. */
static void conn_round(struct conn_case *cs, int nc, int at, int n)
{
    rdmax_ep_desc dc;
    memset(&dc, 0, sizeof dc);
    rdmax_status st;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < nc; j++) {
            struct conn_case *c = &cs[(i + j) % nc];
            rdmax_ep_desc ds;
            case_desc(c, &ds);
            double t0 = now_us();
            if ((st = rdmax_ep_create(ctx, &ds, &c->a[i])) != RDMAX_OK ||
                (st = rdmax_ep_create(ctx, &dc, &c->b[i])) != RDMAX_OK)
                die("rdmax_ep_create", st);
            c->t[PH_MADE][at + i] = now_us() - t0;
        }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < nc; j++) {
            struct conn_case *c = &cs[(i + j) % nc];
            rdmax_conn_record ra, rb;
            uint64_t b0 = binds();
            modify_us = 0;
            double t0 = now_us();
            rdmax_ep_query_record(c->a[i], &ra);
            rdmax_ep_query_record(c->b[i], &rb);
            if ((st = rdmax_ep_connect_record(c->a[i], &rb)) != RDMAX_OK ||
                (st = rdmax_ep_connect_record(c->b[i], &ra)) != RDMAX_OK)
                die("rdmax_ep_connect_record", st);
            double t = now_us() - t0;
            c->binds += binds() - b0;
            c->pairs++;
            c->t[PH_CONNECTED][at + i] = t;
            c->t[PH_CONNECTED_QP][at + i] = modify_us;
            c->t[PH_CONNECTED_OWN][at + i] = t - modify_us;
            c->t[PH_SETUP][at + i] = c->t[PH_MADE][at + i] + t;
        }
    /* what the peer was given: a window's key of its own, or the registration's */
    for (int j = 0; j < nc; j++) {
        const struct conn_case *c = &cs[j];
        const rdmax_mem *const *mems = (const rdmax_mem *const *)(c->window ? scoped : open_any);
        for (uint32_t k = 0; k < c->regions; k++) {
            const rdmax_rbuf *rb = rdmax_ep_query_remote(c->b[0], k);
            check(rb && rb->addr == (uintptr_t)mems[k]->addr, "the peer got the exposed region's address");
            if (rb && c->window && have_mw)
                check(rb->rkey != 0 && mems[k]->rkey == 0, "a window's key, the region has none of its own");
            else if (rb)
                check(rb->rkey == mems[k]->rkey && rb->rkey != 0, "an ANY_ENDPOINT region's own key");
        }
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < nc; j++) {
            struct conn_case *c = &cs[(i + j) % nc];
            double t0 = now_us();
            rdmax_ep_destroy(c->a[i]);
            rdmax_ep_destroy(c->b[i]);
            c->t[PH_DESTROYED][at + i] = now_us() - t0;
        }
}

static void per_connect(void)
{
    struct conn_case cs[] = {
        {"window_r1", 1, 1, NULL, NULL, {NULL}, 0, 0},
        {"any_r1", 0, 1, NULL, NULL, {NULL}, 0, 0},
        {"window_r4", 1, 4, NULL, NULL, {NULL}, 0, 0},
        {"any_r4", 0, 4, NULL, NULL, {NULL}, 0, 0},
    };
    int nc = (int)(sizeof cs / sizeof cs[0]);
    int per = o.pairs / o.rounds, n = per * o.rounds;
    double *tmp = (double *)calloc((size_t)n, sizeof *tmp);
    if (!tmp)
        die("calloc", RDMAX_ERR_NO_MEMORY);
    for (int k = 0; k < nc; k++) {
        cs[k].a = (rdmax_ep **)calloc((size_t)per, sizeof(rdmax_ep *));
        cs[k].b = (rdmax_ep **)calloc((size_t)per, sizeof(rdmax_ep *));
        if (!cs[k].a || !cs[k].b)
            die("calloc", RDMAX_ERR_NO_MEMORY);
        for (int p = 0; p < PH__COUNT; p++)
            if (!(cs[k].t[p] = (double *)calloc((size_t)n, sizeof(double))))
                die("calloc", RDMAX_ERR_NO_MEMORY);
    }
    ctx->modify_qp = timed_modify_qp;
    /* warm-up, not counted: the first endpoints grow the shared receive queue and the endpoint table */
    conn_round(cs, nc, 0, per < 8 ? per : 8);
    for (int k = 0; k < nc; k++)
        cs[k].binds = cs[k].pairs = 0;
    for (int r = 0; r < o.rounds; r++)
        conn_round(cs, nc, r * per, per);
    ctx->modify_qp = ibv_modify_qp;
    for (int k = 0; k < nc; k++) {
        char want[96];
        double got = cs[k].pairs ? (double)cs[k].binds / (double)cs[k].pairs : 0;
        snprintf(want, sizeof want, "%s: %u windows bound per pair, %.2f counted", cs[k].name,
                 cs[k].window && have_mw ? cs[k].regions : 0, got);
        check(got == (cs[k].window && have_mw ? cs[k].regions : 0), want);
        printf("bench scope check %s\n", want);
    }
    /* value: the median over every pair; then the mean, and each round's median */
    for (int k = 0; k < nc; k++)
        for (int p = 0; p < PH__COUNT; p++) {
            double rounds[MAX_ROUNDS], mean = 0;
            for (int i = 0; i < n; i++)
                mean += cs[k].t[p][i] / n;
            for (int r = 0; r < o.rounds; r++) {
                memcpy(tmp, cs[k].t[p] + r * per, (size_t)per * sizeof *tmp);
                rounds[r] = median(tmp, per);
            }
            memcpy(tmp, cs[k].t[p], (size_t)n * sizeof *tmp);
            printf("bench scope case=%s_%s value=%.6g unit=us_per_pair pairs=%d mean=%.6g rounds=", phase_name[p],
                   cs[k].name, median(tmp, n), n, mean);
            for (int r = 0; r < o.rounds; r++)
                printf("%s%.6g", r ? "," : "", rounds[r]);
            printf("\n");
        }
    fflush(stdout);
    for (int k = 0; k < nc; k++) {
        for (int p = 0; p < PH__COUNT; p++)
            free(cs[k].t[p]);
        free(cs[k].a);
        free(cs[k].b);
    }
    free(tmp);
}

/* ---- per operation -------------------------------------------------------------------------------- */
struct op_case {
    const char *name;
    rdmax_mem *region;          /* exposed by the far endpoint */
    rdmax_ep *near, *far;
    uint64_t raddr;
    uint32_t rkey;
    double rate[MAX_ROUNDS], get[MAX_ROUNDS];
};

/* k 8-byte puts on c then a flush; returns the time taken in us. The last put's tag lands last. */
static double put_chunk(struct op_case *c, long k, unsigned char tag)
{
    unsigned char buf[8];
    memset(buf, 0, sizeof buf);
    double t0 = now_us();
    for (long i = 0; i < k; i++) {
        buf[7] = i + 1 == k ? tag : 0;
        rdmax_status st;
        while ((st = rdmax_put(c->near, buf, 8, NULL, c->raddr, c->rkey, NULL)) == RDMAX_ERR_NO_RESOURCE)
            rdmax_progress(ctx);
        if (st < 0)
            die("rdmax_put", st);
    }
    rdmax_status st = rdmax_ep_flush(c->near, 10000);
    if (st != RDMAX_OK)
        die("rdmax_ep_flush", st);
    double t = now_us() - t0;
    check(((volatile unsigned char *)c->region->addr)[7] == tag, "the last put landed in the exposed region");
    return t;
}

/* one 8-byte get on c, waited for; returns its round trip in us */
static double get_one(struct op_case *c, rdmax_mem *lmem, unsigned char tag)
{
    ((unsigned char *)c->region->addr)[0] = tag;
    rdmax_comp comp;
    memset(&comp, 0, sizeof comp);
    double t0 = now_us();
    rdmax_status st = rdmax_get(c->near, lmem->addr, 8, lmem, c->raddr, c->rkey, &comp);
    if (st != RDMAX_INPROGRESS)
        die("rdmax_get", st);
    while (!comp.done)
        rdmax_progress(ctx);
    double t = now_us() - t0;
    if (comp.status != RDMAX_OK)
        die("get completion", comp.status);
    check(((unsigned char *)lmem->addr)[0] == tag, "a get read the exposed region");
    return t;
}

/* One round of both cases, taking turns flush interval by flush interval (puts) and get by get (the
   first case one later each turn), so that a stretch of a slow host falls on both. */
static void op_round(struct op_case *cs, int r, rdmax_mem *lmem, long puts, long gets, double **t)
{
    double put_us[2] = {0, 0};
    for (long i = 0, turn = 0; i < puts; i += o.k, turn++)
        for (int j = 0; j < 2; j++) {
            int k = (int)((j + turn) % 2);
            put_us[k] += put_chunk(&cs[k], puts - i < o.k ? puts - i : o.k, (unsigned char)(turn % 250 + 1));
        }
    for (long i = 0; i < gets; i++)
        for (int j = 0; j < 2; j++) {
            int k = (int)((j + i) % 2);
            t[k][i] = get_one(&cs[k], lmem, (unsigned char)i);
        }
    if (r < 0)  /* warm-up */
        return;
    for (int k = 0; k < 2; k++) {
        cs[k].rate[r] = puts / put_us[k];
        cs[k].get[r] = median(t[k], (int)gets);
    }
}

static void per_operation(void)
{
    unsigned rw = RDMAX_ACCESS_REMOTE_READ | RDMAX_ACCESS_REMOTE_WRITE;
    struct op_case cases[2];
    memset(cases, 0, sizeof cases);
    cases[0].name = "window";
    cases[1].name = "any";
    rdmax_mem *lmem;
    rdmax_status st;
    if ((st = rdmax_mem_alloc(ctx, 4096, RDMAX_ACCESS_LOCAL, &lmem)) != RDMAX_OK ||
        (st = rdmax_mem_alloc(ctx, 4096, rw, &cases[0].region)) != RDMAX_OK ||
        (st = rdmax_mem_alloc(ctx, 4096, rw | RDMAX_ACCESS_ANY_ENDPOINT, &cases[1].region)) != RDMAX_OK)
        die("rdmax_mem_alloc", st);
    for (int k = 0; k < 2; k++) {
        rdmax_ep_desc dn, df;
        memset(&dn, 0, sizeof dn);
        memset(&df, 0, sizeof df);
        dn.sq_depth = 128;  /* room for a flush interval of 64 puts (the default is 32) */
        df.expose = cases[k].region;
        rdmax_conn_record rn, rf;
        if ((st = rdmax_ep_create(ctx, &dn, &cases[k].near)) != RDMAX_OK ||
            (st = rdmax_ep_create(ctx, &df, &cases[k].far)) != RDMAX_OK)
            die("rdmax_ep_create", st);
        rdmax_ep_query_record(cases[k].near, &rn);
        rdmax_ep_query_record(cases[k].far, &rf);
        if ((st = rdmax_ep_connect_record(cases[k].near, &rf)) != RDMAX_OK ||
            (st = rdmax_ep_connect_record(cases[k].far, &rn)) != RDMAX_OK)
            die("rdmax_ep_connect_record", st);
        const rdmax_rbuf *r = rdmax_ep_query_remote(cases[k].near, 0);
        if (!r)
            die("the far endpoint exposed nothing", RDMAX_ERR_INVALID_PARAM);
        cases[k].raddr = r->addr;
        cases[k].rkey = r->rkey;
    }
    check(!have_mw || cases[0].rkey != cases[0].region->rkey, "the window case's key is a window's, not the region's");
    check(cases[1].rkey == cases[1].region->rkey, "the ANY_ENDPOINT case's key is the region's own");
    double *t[2] = {(double *)malloc((size_t)o.gets * sizeof(double)),
                    (double *)malloc((size_t)o.gets * sizeof(double))};
    if (!t[0] || !t[1])
        die("malloc", RDMAX_ERR_NO_MEMORY);
    op_round(cases, -1, lmem, o.puts < 1000 ? o.puts : 1000, o.gets < 100 ? o.gets : 100, t);  /* warm-up */
    for (int r = 0; r < o.rounds; r++)
        op_round(cases, r, lmem, o.puts, o.gets, t);
    for (int k = 0; k < 2; k++) {
        char name[64];
        snprintf(name, sizeof name, "put_rate_%s", cases[k].name);
        report(name, "Mops", cases[k].rate, o.rounds);
        snprintf(name, sizeof name, "get_lat_%s", cases[k].name);
        report(name, "us_p50", cases[k].get, o.rounds);
    }
    free(t[0]);
    free(t[1]);
    for (int k = 0; k < 2; k++) {
        rdmax_ep_destroy(cases[k].near);
        rdmax_ep_destroy(cases[k].far);
        rdmax_mem_free(cases[k].region);
    }
    rdmax_mem_free(lmem);
}

/* ---- the device, its driver, the kernel ------------------------------------------------------------ */
static void sysfs(const char *path, char *out, size_t n)
{
    out[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    if (fgets(out, (int)n, f))
        out[strcspn(out, "\n")] = 0;
    fclose(f);
}

static void print_env(void)
{
    const rdmax_dev_attr *a = rdmax_ctx_query_attr(ctx);
    char path[256], link[256], parent[64], fw[64], driver[256] = "unknown";
    struct utsname u;
    uname(&u);
    snprintf(path, sizeof path, "/sys/class/infiniband/%s/device/driver", a->name);
    ssize_t n = readlink(path, link, sizeof link - 1);
    if (n > 0) {  /* a hardware device: its PCI driver */
        link[n] = 0;
        snprintf(driver, sizeof driver, "%s", strrchr(link, '/') ? strrchr(link, '/') + 1 : link);
    }
    snprintf(path, sizeof path, "/sys/class/infiniband/%s/parent", a->name);
    sysfs(path, parent, sizeof parent);  /* a software device (rxe, siw): its netdev */
    if (n <= 0 && access("/sys/module/rdma_rxe", F_OK) == 0 && !strncmp(a->name, "rxe", 3))
        snprintf(driver, sizeof driver, "rdma_rxe");
    snprintf(path, sizeof path, "/sys/class/infiniband/%s/fw_ver", a->name);
    sysfs(path, fw, sizeof fw);
    printf("bench scope env device=%s driver=%s netdev=%s fw=%s kernel=%s mem_windows=%u port=%u gid_index=%d "
           "pairs=%d rounds=%d puts=%ld flush_every=%d gets=%ld\n",
           a->name, driver, parent[0] ? parent : "-", fw[0] ? fw : "-", u.release, a->mem_windows, a->port,
           a->gid_index, o.pairs, o.rounds, o.puts, o.k, o.gets);
    fflush(stdout);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: scope [options]\n"
               "  -d, --device DEV     RDMA device (default: $RDMAX_DEVICE, else the first with an active port)\n"
               "  -n, --pairs N        RC pairs per connect case, over all rounds (default 200)\n"
               "  -r, --rounds N       rounds, each running every case in turn (default 5, at most %d)\n"
               "  -p, --puts N         8-byte puts per round and case (default 20000)\n"
               "  -k, --flush-every K  puts between two rdmax_ep_flush calls (default 64, at most 128)\n"
               "  -g, --gets N         8-byte gets per round and case, each timed (default 1000)\n"
               "  -h, --help\n", MAX_ROUNDS);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"device", required_argument, NULL, 'd'}, {"pairs", required_argument, NULL, 'n'},
        {"rounds", required_argument, NULL, 'r'}, {"puts", required_argument, NULL, 'p'},
        {"flush-every", required_argument, NULL, 'k'}, {"gets", required_argument, NULL, 'g'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "d:n:r:p:k:g:h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': o.dev = optarg; break;
        case 'n': o.pairs = atoi(optarg); break;
        case 'r': o.rounds = atoi(optarg); break;
        case 'p': o.puts = atol(optarg); break;
        case 'k': o.k = atoi(optarg); break;
        case 'g': o.gets = atol(optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc || o.rounds < 1 || o.rounds > MAX_ROUNDS || o.pairs < o.rounds || o.puts < 1 || o.k < 1 ||
        o.k > 128 || o.gets < 1) {
        usage(stderr);
        return 2;
    }
    clock_init();
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.device = o.dev;
    rdmax_status st = rdmax_ctx_create(&cd, &ctx);
    if (st != RDMAX_OK)
        die("rdmax_ctx_create", st);
    print_env();
    have_mw = rdmax_ctx_query_attr(ctx)->mem_windows;
    if (!have_mw)
        printf("bench scope note: the device has no memory windows: both cases are plain registrations\n");
    unsigned rw = RDMAX_ACCESS_REMOTE_READ | RDMAX_ACCESS_REMOTE_WRITE;
    for (int k = 0; k < MAX_REGIONS; k++)
        if ((st = rdmax_mem_alloc(ctx, 4096, rw, &scoped[k])) != RDMAX_OK ||
            (st = rdmax_mem_alloc(ctx, 4096, rw | RDMAX_ACCESS_ANY_ENDPOINT, &open_any[k])) != RDMAX_OK)
            die("rdmax_mem_alloc", st);
    double t0 = mono_us();
    per_connect();
    double t1 = mono_us();
    per_operation();
    double t2 = mono_us();
    for (int k = 0; k < MAX_REGIONS; k++) {
        rdmax_mem_free(scoped[k]);
        rdmax_mem_free(open_any[k]);
    }
    rdmax_ctx_destroy(ctx);
    printf("bench scope done connect_s=%.1f operation_s=%.1f checks=%s\n", (t1 - t0) / 1e6, (t2 - t1) / 1e6,
           failed ? "FAILED" : "passed");
    return failed;
}
