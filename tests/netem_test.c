/* Loss, delay, reorder and duplicates on the veth link (tc netem), with checked data.

   Two contexts in one process, on the two devices of the veth topology (rxe0 on veth0, rxe1 on veth1),
   so every operation crosses the link; netem impairs both directions (the qdisc of veth0 and of veth1).
   For each setting and operation type a stream of N operations runs with up to W in flight, each with a
   completion object, and every operation is checked:
     send   the receiver's callback gets sequence number i with its pattern, in order, exactly once
     put    after its completion the target slot (memory of the other context, readable here) holds it
     get    the source slot is written here first; the data read back must be it
     fadd   +1 on one remote counter: every fetched value distinct and below N; the final counter is the
            number of successes (when no operation failed)
   Counted per row: completed (exactly once each: a second completion is a failure), errors (the endpoint
   failed: its error is printed, a new pair is made and the stream goes on), data mismatches, hangs (no
   completion for HANG_MS: the row stops). Throughput (operations and MB per second, from the first post
   to the last completion; reconnections after failures included) is printed beside the clean link's, and the deltas of both devices' rxe port counters (retransmits, sequence errors,
   duplicates, ...) from /sys/class/infiniband/DEV/ports/1/hw_counters.
   UD: numbered datagrams in bursts; the receiver counts missing, duplicated and reordered ones, so loss
   is visible (rdmax itself does not number UD datagrams).
   PASS needs: no mismatch, no hang, every operation completed exactly once; errors are reported, not
   hidden (an RC stream that fails under a fault prints its row with the error). UD under loss must show
   the loss (missing > 0, out of thousands: the chance of none is below 1e-8).

   Usage: netem_test [-n OPS] [-D DELAY_OPS] [-L LOSS5_OPS] [-s SIZE] [-w WINDOW] [-S settings] [-t types]
                     [--rotate]
     -D: the operations per stream under 'delay' (default OPS): rxe's go-back-N makes it ~70x slower
     -L: the operations per stream under 'loss5' (default OPS): a window's lost last packet, or its ack,
         waits for the RC retry timeout (20,000 puts took 128 s in the VM)
     settings: clean,loss1,loss5,delay,reorder,dup (default all); types: send,put,get,fadd,ud (default all)
     --rotate: each fault once, with one operation type each (make test); without it every type under
     every setting (make soak). Needs root (tc) and the veth topology ($RDMAX_TEST_DEV0/1). */
#define RDMAX_TRANSPORT_RC
#define RDMAX_TRANSPORT_UD
#define RDMAX_IMPLEMENTATION
#include "../rdmax.h"
#include "testlib.h"

#include <dirent.h>
#include <getopt.h>
#include <time.h>

#define HANG_MS 60000
#define MAX_WINDOW 64
#define MAX_RECONNECTS 20

static int64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- settings ---------------------------------------------------------------------------------------- */
struct setting {
    const char *name, *netem;
};
static const struct setting g_settings[] = {
    {"clean", NULL},
    {"loss1", "loss 1%"},
    {"loss5", "loss 5%"},
    {"delay", "delay 1ms 200us"},
    {"reorder", "delay 1ms reorder 25% 50%"},
    {"dup", "duplicate 1%"},
};
#define NSET ((int)(sizeof g_settings / sizeof g_settings[0]))
enum { T_SEND, T_PUT, T_GET, T_FADD, T_UD, NTYPE };
static const char *const g_type_names[NTYPE] = {"send", "put", "get", "fadd", "ud"};

static const char *g_nd[2] = {"veth0", "veth1"};

static int netem_set(const struct setting *s)
{
    char cmd[256];
    for (int i = 0; i < 2; i++) {
        if (s->netem)
            snprintf(cmd, sizeof cmd, "tc qdisc replace dev %s root netem %s", g_nd[i], s->netem);
        else
            snprintf(cmd, sizeof cmd, "tc qdisc del dev %s root 2>/dev/null; true", g_nd[i]);
        if (system(cmd) != 0) {
            printf("FAIL netem/setup: '%s' failed (is sch_netem loaded? root?)\n", cmd);
            return -1;
        }
    }
    return 0;
}

/* ---- rxe port counters ------------------------------------------------------------------------------- */
#define NCNT 24
struct hwc {
    int n;
    char name[NCNT][40];
    uint64_t v[NCNT];
};

static void hwc_read(const char *dev, struct hwc *h)
{
    char dir[256], path[512];
    snprintf(dir, sizeof dir, "/sys/class/infiniband/%s/ports/1/hw_counters", dev);
    h->n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL && h->n < NCNT) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "lifespan"))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        unsigned long long v;
        if (f && fscanf(f, "%llu", &v) == 1 && strlen(e->d_name) < sizeof h->name[0]) {
            memcpy(h->name[h->n], e->d_name, strlen(e->d_name) + 1);
            h->v[h->n++] = v;
        }
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
}

/* "name=delta" for every counter that moved, except the packet counts (printed apart) */
static void hwc_delta(const struct hwc *a, const struct hwc *b, char *out, size_t n, uint64_t *sent,
                      uint64_t *rcvd)
{
    size_t k = 0;
    out[0] = 0;
    *sent = *rcvd = 0;
    for (int i = 0; i < b->n; i++)
        for (int j = 0; j < a->n; j++)
            if (!strcmp(a->name[j], b->name[i])) {
                uint64_t d = b->v[i] - a->v[j];
                if (!strcmp(b->name[i], "sent_pkts"))
                    *sent = d;
                else if (!strcmp(b->name[i], "rcvd_pkts"))
                    *rcvd = d;
                else if (d && !strstr(b->name[i], "rdma_") && k + 48 < n)
                    k += (size_t)snprintf(out + k, n - k, " %s=%llu", b->name[i], (unsigned long long)d);
            }
}

/* ---- the RC stream ----------------------------------------------------------------------------------- */
struct stream;
struct op {
    rdmax_comp comp;
    struct stream *s;
    uint32_t seq;
    int slot;
    int busy;
};

struct stream {
    rdmax_ctx *c0, *c1;
    rdmax_mem *lmem, *rmem;        /* local (c0) and remote (c1) buffers: W slots each, + the counter */
    rdmax_ep *a, *b;
    int type;
    size_t size;
    uint32_t n, window;
    struct op ops[MAX_WINDOW];
    uint32_t posted, completed, ok, errors, mismatches, hangs, reconnects, not_run;
    uint32_t rx_next;              /* send: next sequence number the receiver expects */
    uint32_t rx_count, rx_bad;
    unsigned char *fadd_seen;
    uint64_t bytes;
    int64_t t_first, t_last;       /* first post, last completion (pair creation not counted) */
    char first_error[200];
    rdmax_status last_err;
};

static unsigned char pat(uint32_t seq, size_t i)
{
    return (unsigned char)(seq * 131u + i * 7u + (i >> 8) + 1);
}

static unsigned char *lslot(struct stream *s, int k) { return (unsigned char *)s->lmem->addr + (size_t)k * s->size; }
static unsigned char *rslot(struct stream *s, int k) { return (unsigned char *)s->rmem->addr + (size_t)k * s->size; }
static uint64_t *counter(struct stream *s) { return (uint64_t *)((char *)s->rmem->addr + (size_t)MAX_WINDOW * s->size); }

static void fill(unsigned char *p, size_t len, uint32_t seq)
{
    if (len >= 4)
        memcpy(p, &seq, 4);
    for (size_t i = len >= 4 ? 4 : 0; i < len; i++)
        p[i] = pat(seq, i);
}

static int check(const unsigned char *p, size_t len, uint32_t seq)
{
    uint32_t got;
    if (len >= 4) {
        memcpy(&got, p, 4);
        if (got != seq)
            return 0;
    }
    for (size_t i = len >= 4 ? 4 : 0; i < len; i++)
        if (p[i] != pat(seq, i))
            return 0;
    return 1;
}

static void on_msg(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep;
    struct stream *s = (struct stream *)user;
    uint32_t seq = 0;
    if (len >= 4)
        memcpy(&seq, data, 4);
    s->rx_count++;
    if (len != s->size || !check((const unsigned char *)data, len, seq) || seq != s->rx_next) {
        s->rx_bad++;
        if (!s->first_error[0])
            snprintf(s->first_error, sizeof s->first_error, "send: receiver got sequence %u (%zu bytes), expected %u",
                     seq, len, s->rx_next);
    }
    s->rx_next = seq + 1;
}

static void on_done(rdmax_comp *c, rdmax_status st)
{
    struct op *o = (struct op *)c->user;
    struct stream *s = o->s;
    if (!o->busy) {
        s->mismatches++;  /* completed twice: exactly once is broken */
        snprintf(s->first_error, sizeof s->first_error, "operation %u completed twice", o->seq);
        return;
    }
    o->busy = 0;
    s->completed++;
    if (st != RDMAX_OK) {
        s->errors++;
        s->last_err = st;
        return;
    }
    s->ok++;
    s->bytes += s->type == T_FADD ? 8 : s->size;
    int good = 1;
    switch (s->type) {
    case T_PUT: good = check(rslot(s, o->slot), s->size, o->seq); break;
    case T_GET: good = check(lslot(s, o->slot), s->size, o->seq); break;
    case T_FADD: {
        uint64_t v;
        memcpy(&v, lslot(s, o->slot), 8);
        good = v < s->n && !s->fadd_seen[v];
        if (v < s->n)
            s->fadd_seen[v] = 1;
        break;
    }
    default: break;
    }
    if (!good) {
        s->mismatches++;
        if (!s->first_error[0])
            snprintf(s->first_error, sizeof s->first_error, "%s %u completed OK with wrong data",
                     g_type_names[s->type], o->seq);
    }
}

static rdmax_status make_pair(struct stream *s)
{
    rdmax_ep_desc da, db;
    memset(&da, 0, sizeof da);
    memset(&db, 0, sizeof db);
    db.expose = s->rmem;
    db.recv_cb = on_msg;
    db.user = s;
    db.recv_size = (uint32_t)(s->size < 64 ? 64 : s->size);
    rdmax_status st = rdmax_ep_create(s->c0, &da, &s->a);
    if (st == RDMAX_OK)
        st = rdmax_ep_create(s->c1, &db, &s->b);
    if (st != RDMAX_OK)
        return st;
    rdmax_conn_record ia, ib;
    rdmax_ep_query_record(s->a, &ia);
    rdmax_ep_query_record(s->b, &ib);
    st = rdmax_ep_connect_record(s->a, &ib);
    if (st == RDMAX_OK)
        st = rdmax_ep_connect_record(s->b, &ia);
    return st;
}

static void drop_pair(struct stream *s)
{
    rdmax_ep_destroy(s->a);
    rdmax_ep_destroy(s->b);
    s->a = s->b = NULL;
}

static rdmax_status post(struct stream *s, struct op *o)
{
    rdmax_rbuf rb = {(uintptr_t)s->rmem->addr, s->rmem->len, s->rmem->rkey};
    unsigned char *l = lslot(s, o->slot);
    switch (s->type) {
    case T_SEND:
        fill(l, s->size, o->seq);
        return rdmax_send(s->a, l, s->size, s->lmem, &o->comp);
    case T_PUT:
        fill(l, s->size, o->seq);
        memset(rslot(s, o->slot), 0, s->size);
        return rdmax_put(s->a, l, s->size, s->lmem, rb.addr + (uint64_t)o->slot * s->size, rb.rkey, &o->comp);
    case T_GET:
        memset(l, 0, s->size);
        fill(rslot(s, o->slot), s->size, o->seq);
        return rdmax_get(s->a, l, s->size, s->lmem, rb.addr + (uint64_t)o->slot * s->size, rb.rkey, &o->comp);
    default:
        memset(l, 0xff, 8);
        return rdmax_fadd(s->a, (uint64_t *)(void *)l, s->lmem, (uintptr_t)counter(s), rb.rkey, 1, &o->comp);
    }
}

/* Runs the stream; returns 0, or -1 if it could not even start. */
static int run_stream(struct stream *s)
{
    if (make_pair(s) != RDMAX_OK)
        return -1;
    for (uint32_t k = 0; k < s->window; k++) {
        s->ops[k].s = s;
        s->ops[k].slot = (int)k;
        s->ops[k].comp.cb = on_done;
        s->ops[k].comp.user = &s->ops[k];
    }
    int64_t last = now_us();
    uint32_t last_done = 0;
    while (s->completed < s->n) {
        /* post into every free slot; in order, so the receiver's sequence check holds */
        for (uint32_t k = 0; k < s->window && s->posted < s->n; k++) {
            struct op *o = &s->ops[(s->posted) % s->window];
            if (o->busy)
                break;
            o->seq = s->posted;
            o->busy = 1;
            rdmax_status st = post(s, o);
            if (st == RDMAX_INPROGRESS) {
                if (!s->posted)
                    s->t_first = now_us();
                s->posted++;
                continue;
            }
            o->busy = 0;
            if (st == RDMAX_ERR_NO_RESOURCE)
                break;
            if (st == RDMAX_ERR_ENDPOINT || st == RDMAX_ERR_CLOSED)
                break;  /* the failure is being reported: reconnect below */
            snprintf(s->first_error, sizeof s->first_error, "post of %u: %s", o->seq, rdmax_status_str(st));
            s->mismatches++;
            return 0;
        }
        rdmax_progress(s->c0);
        rdmax_progress(s->c1);
        if (s->completed != last_done) {
            last_done = s->completed;
            last = s->t_last = now_us();
        }
        int inflight = (int)(s->posted - s->completed);
        if (rdmax_ep_query_state(s->a) != RDMAX_EP_CONNECTED && inflight == 0) {
            /* every operation of the failed pair has completed (with its error): a new pair goes on */
            rdmax_status why = rdmax_ep_query_error(s->a);
            if (!s->reconnects && !s->first_error[0])
                snprintf(s->first_error, sizeof s->first_error, "endpoint failed after %u operations: %s",
                         s->completed, rdmax_status_str(why));
            drop_pair(s);
            if (++s->reconnects > MAX_RECONNECTS || make_pair(s) != RDMAX_OK) {
                s->not_run = s->n - s->posted;
                return 0;
            }
            s->rx_next = s->posted;  /* what was lost with the old pair is counted as errors */
            continue;
        }
        if (now_us() - last > (int64_t)HANG_MS * 1000) {
            s->hangs = (uint32_t)inflight;
            s->not_run = s->n - s->posted;
            snprintf(s->first_error, sizeof s->first_error, "no completion for %d ms with %d in flight: a hang",
                     HANG_MS, inflight);
            return 0;
        }
    }
    /* the receiver may still be taking the last messages */
    int64_t t0 = now_us();
    while (s->type == T_SEND && s->rx_count < s->ok && now_us() - t0 < 5000000) {
        rdmax_progress(s->c0);
        rdmax_progress(s->c1);
    }
    return 0;
}

/* ---- the UD stream ------------------------------------------------------------------------------------ */
struct udrx {
    unsigned char *seen;
    uint32_t n, unique, dups, reordered, bad, max_seq;
    int any;
};

static void on_dgram(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep;
    struct udrx *r = (struct udrx *)user;
    uint32_t seq;
    if (len < 4) {
        r->bad++;
        return;
    }
    memcpy(&seq, data, 4);
    if (seq >= r->n || !check((const unsigned char *)data, len, seq)) {
        r->bad++;
        return;
    }
    if (r->seen[seq]++)
        r->dups++;
    else
        r->unique++;
    if (r->any && seq < r->max_seq)
        r->reordered++;
    if (!r->any || seq > r->max_seq)
        r->max_seq = seq;
    r->any = 1;
}

struct result {
    const char *setting;
    int type;
    size_t size;
    uint32_t n, completed, errors, mismatches, hangs, not_run, reconnects;
    double secs, ops_s, mb_s;
    uint32_t ud_missing, ud_dups, ud_reordered, ud_inner_missing;
    uint64_t rdmax_skipped, rdmax_late, rdmax_dups;  /* what rdmax saw: its ud.* counters on the receiver */
    char err[200];
    char hw[2][400];
    uint64_t sent[2], rcvd[2];
};

/* quiet_us: how long no datagram arrives before the rest of a burst counts as lost; on the clean link
   nothing is lost, so it is long there (a busy host is not a lossy link). */
static int run_ud(rdmax_ctx *c0, rdmax_ctx *c1, uint32_t n, size_t size, int64_t quiet_us, struct result *res)
{
    struct udrx r;
    memset(&r, 0, sizeof r);
    r.n = n;
    r.seen = (unsigned char *)calloc(n, 1);
    rdmax_ep_desc da, db;
    memset(&da, 0, sizeof da);
    memset(&db, 0, sizeof db);
    da.transport = db.transport = RDMAX_TRANSPORT_ID_UD;
    db.recv_cb = on_dgram;
    db.user = &r;
    db.rq_depth = 256;
    rdmax_ep *a = NULL, *b = NULL;
    rdmax_mem *m = NULL;
    if (rdmax_ep_create(c0, &da, &a) != RDMAX_OK || rdmax_ep_create(c1, &db, &b) != RDMAX_OK ||
        rdmax_mem_alloc(c0, 64 * size, 0, &m) != RDMAX_OK) {
        free(r.seen);
        rdmax_ep_destroy(a);
        rdmax_ep_destroy(b);
        return -1;
    }
    rdmax_conn_record ia, ib;
    rdmax_ep_query_record(a, &ia);
    rdmax_ep_query_record(b, &ib);
    rdmax_ep_connect_record(a, &ib);
    rdmax_ep_connect_record(b, &ia);
    rdmax_counters k0, k1;
    rdmax_ctx_query_counters(c1, &k0);
    int64_t t0 = now_us();
    uint32_t sent = 0;
    enum { BURST = 32 };
    while (sent < n) {
        uint32_t first = sent;
        for (uint32_t k = 0; k < BURST && sent < n;) {
            unsigned char *p = (unsigned char *)m->addr + (size_t)(k % 64) * size;
            fill(p, size, sent);
            rdmax_comp c;
            memset(&c, 0, sizeof c);
            rdmax_status st = rdmax_send(a, p, size, m, &c);
            if (st == RDMAX_INPROGRESS || st == RDMAX_OK) {
                while (st == RDMAX_INPROGRESS && !c.done) {
                    rdmax_progress(c0);
                    rdmax_progress(c1);
                }
                sent++;
                k++;
            } else if (st != RDMAX_ERR_NO_RESOURCE) {
                res->mismatches++;
                snprintf(res->err, sizeof res->err, "UD send %u: %s", sent, rdmax_status_str(st));
                goto out;
            }
            rdmax_progress(c0);
            rdmax_progress(c1);
        }
        /* until this burst has arrived, or quiet_us passed without a datagram (the rest is lost) */
        int64_t quiet = now_us();
        uint32_t seen = r.unique + r.dups;
        for (;;) {
            uint32_t have = 0;
            for (uint32_t q = first; q < sent; q++)
                have += r.seen[q] != 0;
            if (have == sent - first)
                break;
            rdmax_progress(c0);
            rdmax_progress(c1);
            if (r.unique + r.dups != seen) {
                seen = r.unique + r.dups;
                quiet = now_us();
            }
            if (now_us() - quiet > quiet_us)
                break;
        }
    }
    /* late duplicates and stragglers: what has not come yet gets quiet_us more, and everything 50 ms */
    for (int64_t t1 = now_us(), quiet = t1, seen = r.unique + r.dups;
         now_us() - t1 < 50000 || (r.unique < n && now_us() - quiet <= quiet_us);) {
        rdmax_progress(c0);
        rdmax_progress(c1);
        if (r.unique + r.dups != seen) {
            seen = r.unique + r.dups;
            quiet = now_us();
        }
    }
out:
    res->secs = (double)(now_us() - t0) / 1e6;
    rdmax_ctx_query_counters(c1, &k1);
    res->rdmax_skipped = k1.ud_skipped - k0.ud_skipped;
    res->rdmax_late = k1.ud_late - k0.ud_late;
    res->rdmax_dups = k1.ud_duplicates - k0.ud_duplicates;
    res->completed = sent;
    res->mismatches += r.bad;
    res->ud_missing = n - r.unique;
    for (uint32_t q = 0; r.any && q < r.max_seq; q++)
        res->ud_inner_missing += !r.seen[q];
    res->ud_dups = r.dups;
    res->ud_reordered = r.reordered;
    res->ops_s = r.unique / res->secs;
    res->mb_s = res->ops_s * (double)size / 1e6;
    free(r.seen);
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_mem_free(m);
    return 0;
}

/* ---- one row ------------------------------------------------------------------------------------------ */
static double g_clean_ops[NTYPE];

static void row(rdmax_ctx *c0, rdmax_ctx *c1, rdmax_mem *lmem, rdmax_mem *rmem, const struct setting *set,
                int type, uint32_t n, size_t size, uint32_t window)
{
    struct result res;
    memset(&res, 0, sizeof res);
    res.setting = set->name;
    res.type = type;
    res.size = type == T_FADD ? 8 : size;
    res.n = n;
    tl_begin("netem/%s/%s: %u %s of %zu bytes", set->name, g_type_names[type], n, type == T_UD ? "datagrams" :
             "operations", res.size);
    if (netem_set(set) != 0) {
        tl_fail(__FILE__, __LINE__, "netem setting failed");
        tl_end();
        return;
    }
    struct hwc h0[2], h1[2];
    const char *dev[2] = {rdmax_ctx_query_attr(c0)->name, rdmax_ctx_query_attr(c1)->name};
    for (int i = 0; i < 2; i++)
        hwc_read(dev[i], &h0[i]);
    if (type == T_UD) {
        if (run_ud(c0, c1, n, size, set->netem ? 20000 : 2000000, &res) != 0)
            tl_fail(__FILE__, __LINE__, "UD endpoints could not be made");
    } else {
        struct stream *s = (struct stream *)calloc(1, sizeof *s);
        s->c0 = c0;
        s->c1 = c1;
        s->lmem = lmem;
        s->rmem = rmem;
        s->type = type;
        s->size = res.size;
        s->n = n;
        s->window = window;
        s->fadd_seen = (unsigned char *)calloc(n, 1);
        *counter(s) = 0;
        if (run_stream(s) != 0)
            tl_fail(__FILE__, __LINE__, "endpoints could not be made");
        res.secs = s->t_last > s->t_first ? (double)(s->t_last - s->t_first) / 1e6 : 1e-6;
        if (type == T_SEND && s->rx_count != s->ok && s->errors == 0) {
            s->mismatches++;
            snprintf(s->first_error, sizeof s->first_error, "%u sends completed OK, the receiver got %u", s->ok,
                     s->rx_count);
        }
        if (type == T_FADD && s->errors == 0 && s->hangs == 0 && *counter(s) != s->ok) {
            s->mismatches++;
            snprintf(s->first_error, sizeof s->first_error, "counter %llu after %u successful fadds",
                     (unsigned long long)*counter(s), s->ok);
        }
        res.completed = s->completed;
        res.errors = s->errors;
        res.mismatches = s->mismatches + s->rx_bad;
        res.hangs = s->hangs;
        res.not_run = s->not_run;
        res.reconnects = s->reconnects;
        res.ops_s = s->ok / res.secs;
        res.mb_s = (double)s->bytes / res.secs / 1e6;
        snprintf(res.err, sizeof res.err, "%s", s->first_error);
        drop_pair(s);
        free(s->fadd_seen);
        free(s);
    }
    for (int i = 0; i < 2; i++) {
        hwc_read(dev[i], &h1[i]);
        hwc_delta(&h0[i], &h1[i], res.hw[i], sizeof res.hw[i], &res.sent[i], &res.rcvd[i]);
    }
    if (!set->netem)
        g_clean_ops[type] = res.ops_s;
    /* the row: parseable, one line, then the port counters */
    printf("row setting=%s op=%s size=%zu ops=%u completed=%u errors=%u mismatches=%u hangs=%u not_run=%u "
           "reconnects=%u secs=%.2f ops_s=%.0f MB_s=%.2f clean_ops_s=%.0f", res.setting, g_type_names[type],
           res.size, n, res.completed, res.errors, res.mismatches, res.hangs, res.not_run, res.reconnects, res.secs,
           res.ops_s, res.mb_s, g_clean_ops[type]);
    if (type == T_UD)
        printf(" missing=%u duplicated=%u reordered=%u rdmax_skipped=%llu rdmax_late=%llu rdmax_duplicates=%llu",
               res.ud_missing, res.ud_dups, res.ud_reordered, (unsigned long long)res.rdmax_skipped,
               (unsigned long long)res.rdmax_late, (unsigned long long)res.rdmax_dups);
    printf("\n");
    for (int i = 0; i < 2; i++)
        printf("    %s: sent_pkts=%llu rcvd_pkts=%llu%s\n", dev[i], (unsigned long long)res.sent[i],
               (unsigned long long)res.rcvd[i], res.hw[i]);
    if (res.err[0])
        printf("    first: %s\n", res.err);
    CHECK(res.mismatches == 0, "%u data mismatches or double completions: %s", res.mismatches, res.err);
    CHECK(res.hangs == 0, "%u operations hung: %s", res.hangs, res.err);
    if (type != T_UD)
        CHECK(res.completed + res.not_run + res.hangs == n, "%u posted operations never completed",
              n - res.hangs - res.not_run - res.completed);
    if (type == T_UD && set->netem && strstr(set->netem, "loss"))
        CHECK(res.ud_missing > 0, "no datagram missing under '%s': the loss is not visible", set->netem);
    if (type == T_UD && set->netem && strstr(set->netem, "duplicate"))
        CHECK(res.ud_dups > 0, "no duplicated datagram under '%s'", set->netem);
    if (type == T_UD && !set->netem)
        CHECK(res.ud_missing == 0 && res.ud_dups == 0, "the clean link lost %u and duplicated %u datagrams",
              res.ud_missing, res.ud_dups);
    /* rdmax's own view (profile ud.skipped, ud.late, ud.duplicates, on the receiving context): every
       datagram that came twice is a duplicate or (more than 64 back) late; and where nothing duplicates,
       what it skipped is exactly what never came before the last one that did, plus what came after a
       later one (ud.late, at most what the receiver saw out of order). Late ones happen without netem's
       reorder too (rxe sends from the caller and from its tasklet, on either core; a busy host delivers a
       straggler after the next burst); the reorder setting makes thousands. A loss at the very end has
       nothing after it to show it. */
    if (type == T_UD) {
        CHECK(res.rdmax_dups <= res.ud_dups && res.rdmax_dups + res.rdmax_late >= res.ud_dups,
              "rdmax counted %llu duplicates and %llu late, the receiver %u duplicates",
              (unsigned long long)res.rdmax_dups, (unsigned long long)res.rdmax_late, res.ud_dups);
        if (!set->netem || !strstr(set->netem, "duplicate"))
            CHECK(res.rdmax_skipped == res.ud_inner_missing + res.rdmax_late &&
                      res.rdmax_late <= res.ud_reordered && res.rdmax_dups == 0,
                  "rdmax: %llu skipped, %llu late, %llu duplicates; the receiver: %u missing before its last, "
                  "%u out of order", (unsigned long long)res.rdmax_skipped, (unsigned long long)res.rdmax_late,
                  (unsigned long long)res.rdmax_dups, res.ud_inner_missing, res.ud_reordered);
    }
    tl_end();
}

static int in_list(const char *list, const char *name)
{
    if (!list)
        return 1;
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == 0 || p[n] == ','))
            return 1;
    return 0;
}

static void quiet_log(rdmax_log_level lvl, rdmax_log_item item, const char *msg, void *user)
{
    (void)user, (void)item;
    if (lvl <= RDMAX_LOG_ERROR)
        printf("    log: %s\n", msg);
}

static rdmax_ctx *open_ctx(const char *dev)
{
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    d.device = dev;
    d.logger.func = quiet_log;
    rdmax_ctx *c = NULL;
    if (rdmax_ctx_create(&d, &c) != RDMAX_OK) {
        printf("FAIL netem/setup: cannot open device %s\n", dev ? dev : "(default)");
        exit(1);
    }
    return c;
}

int main(int argc, char **argv)
{
    uint32_t n = 2000, window = 16, n_delay = 0, n_loss5 = 0;
    size_t size = 64;
    const char *settings = NULL, *types = NULL;
    int rotate = 0;
    static const struct option lo[] = {{"rotate", no_argument, NULL, 'r'}, {NULL, 0, NULL, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "n:D:L:s:w:S:t:", lo, NULL)) != -1) {
        switch (c) {
        case 'n': n = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'D': n_delay = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'L': n_loss5 = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 's': size = strtoul(optarg, NULL, 0); break;
        case 'w': window = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'S': settings = optarg; break;
        case 't': types = optarg; break;
        case 'r': rotate = 1; break;
        default:
            fprintf(stderr, "usage: %s [-n OPS=2000] [-D DELAY_OPS=OPS] [-L LOSS5_OPS=OPS] [-s SIZE=64] [-w WINDOW=16] "
                    "[-S clean,loss1,loss5,delay,reorder,dup] [-t send,put,get,fadd,ud] [--rotate]\n", argv[0]);
            return 2;
        }
    }
    if (window < 1 || window > MAX_WINDOW || size < 8 || n < 1) {
        fprintf(stderr, "netem_test: window 1..%d, size >= 8, ops >= 1\n", MAX_WINDOW);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *d0 = getenv("RDMAX_TEST_DEV0"), *d1 = getenv("RDMAX_TEST_DEV1");
    if (!d0 || !d1) {
        printf("FAIL netem/setup: RDMAX_TEST_DEV0/1 are not set (needs the veth topology)\n");
        return 1;
    }
    if (system("modprobe sch_netem 2>/dev/null; tc qdisc del dev veth0 root 2>/dev/null; "
               "tc qdisc del dev veth1 root 2>/dev/null; true") != 0)
        return 1;
    rdmax_ctx *c0 = open_ctx(d0), *c1 = open_ctx(d1);
    rdmax_mem *lmem = NULL, *rmem = NULL;
    size_t bytes = (size_t)MAX_WINDOW * size + 64;
    unsigned acc = RDMAX_ACCESS_REMOTE_READ | RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_REMOTE_ATOMIC | RDMAX_ACCESS_ANY_ENDPOINT;
    if (rdmax_mem_alloc(c0, bytes, acc, &lmem) != RDMAX_OK || rdmax_mem_alloc(c1, bytes, acc, &rmem) != RDMAX_OK) {
        printf("FAIL netem/setup: rdmax_mem_alloc\n");
        return 1;
    }
    printf("# netem on %s and %s (both directions); devices %s, %s; %u operations of %zu bytes, window %u\n",
           g_nd[0], g_nd[1], d0, d1, n, size, window);
    /* a warm-up stream, not reported: the first operations of a process pay for page faults and caches */
    {
        struct stream *w = (struct stream *)calloc(1, sizeof *w);
        w->c0 = c0, w->c1 = c1, w->lmem = lmem, w->rmem = rmem, w->type = T_PUT, w->size = size;
        w->n = 1000, w->window = window;
        w->fadd_seen = (unsigned char *)calloc(w->n, 1);
        run_stream(w);
        drop_pair(w);
        free(w->fadd_seen);
        free(w);
    }
    /* clean first: its rates are the reference of every later row */
    for (int t = 0; t < NTYPE; t++)
        if (in_list(types, g_type_names[t]) && in_list(settings, "clean"))
            row(c0, c1, lmem, rmem, &g_settings[0], t, n, size, window);
    int turn = 0;
    for (int si = 1; si < NSET; si++) {
        if (!in_list(settings, g_settings[si].name))
            continue;
        for (int t = 0; t < NTYPE; t++) {
            if (!in_list(types, g_type_names[t]))
                continue;
            /* --rotate: one RC type per fault, in turn; UD only where it shows something (loss, dup) */
            if (rotate && t != T_UD && t != turn % T_UD)
                continue;
            if (rotate && t == T_UD && !strstr(g_settings[si].netem, "loss") && !strstr(g_settings[si].netem, "dup"))
                continue;
            /* -D: fewer under 'delay' (its jitter reorders: rxe's go-back-N resends ~10x) */
            uint32_t k = n_delay && !strcmp(g_settings[si].name, "delay") ? n_delay : n;
            /* -L: fewer under 'loss5' (a lost last packet of a window, or its ack, waits for the retry timeout) */
            if (n_loss5 && !strcmp(g_settings[si].name, "loss5"))
                k = n_loss5;
            row(c0, c1, lmem, rmem, &g_settings[si], t, k, size, window);
        }
        turn++;
    }
    netem_set(&g_settings[0]);
    rdmax_mem_free(lmem);
    rdmax_mem_free(rmem);
    rdmax_ctx_destroy(c0);
    rdmax_ctx_destroy(c1);
    return tl_failed_total != 0;
}
