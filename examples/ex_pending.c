/* ex_pending - more operations than the send queue holds: the rest wait in the pending queue.

   Shows: rdmax_req_post, which posts an operation now if the send queue has room and otherwise queues
   it on the endpoint (the pending queue), so a program never has to retry RDMAX_ERR_NO_RESOURCE itself;
   rdmax_ep_query_resources(...).pending, the number waiting; and that every request completes, in the order
   it was posted (per-endpoint order always holds: a direct post is refused while requests wait).
   Run: build/ex_pending [DEVICE]     (no DEVICE: $RDMAX_DEVICE, else the first active device)
   Exits 0 only if all requests completed in order and the target holds every one's data. */
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#include "../rdmax.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 64      /* requests */
#define SLOT 64   /* bytes each */
#define SQ 8      /* a small send queue, so most requests must wait */

static int g_order[N], g_done, g_failed;

static void die(const char *what, rdmax_status st)
{
    fprintf(stderr, "ex_pending: %s: %s\n", what, rdmax_status_str(st));
    exit(1);
}

/* Called from rdmax_progress as each request completes: record the order. */
static void on_comp(rdmax_comp *c, rdmax_status st)
{
    if (st != RDMAX_OK)
        g_failed++;
    g_order[g_done++] = (int)(intptr_t)c->user;
}

int main(int argc, char **argv)
{
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.device = argc > 1 ? argv[1] : NULL;
    rdmax_ctx *ctx;
    rdmax_status st = rdmax_ctx_create(&cd, &ctx);
    if (st != RDMAX_OK)
        die("rdmax_ctx_create", st);
    rdmax_mem *target, *source;
    if ((st = rdmax_mem_alloc(ctx, N * SLOT, RDMAX_ACCESS_REMOTE_WRITE, &target)) != RDMAX_OK ||
        (st = rdmax_mem_alloc(ctx, N * SLOT, RDMAX_ACCESS_LOCAL, &source)) != RDMAX_OK)
        die("rdmax_mem_alloc", st);
    memset(target->addr, 0, N * SLOT);

    rdmax_ep_desc d;
    memset(&d, 0, sizeof d);
    d.sq_depth = SQ;
    d.expose = target;
    rdmax_ep *a, *b;
    if ((st = rdmax_ep_create_pair(ctx, &d, &a, &b)) != RDMAX_OK)
        die("rdmax_ep_create_pair", st);
    /* The applied depth: rounded to a power of two and capped by the device. */
    printf("send queue: %u slots\n", rdmax_ep_query_desc(a).sq_depth);
    const rdmax_rbuf *r = rdmax_ep_query_remote(a, 0);  /* the peer's `target` */
    if (!r) {
        fprintf(stderr, "ex_pending: the peer advertised no buffer\n");
        return 1;
    }

    /* Requests and their comps must stay valid until they complete: static arrays here. */
    static rdmax_req req[N];
    static rdmax_comp comp[N];
    unsigned char *src = (unsigned char *)source->addr;
    rdmax_ep_resources info;
    for (int i = 0; i < N; i++) {
        memset(src + i * SLOT, i + 1, SLOT);
        comp[i].cb = on_comp;
        comp[i].user = (void *)(intptr_t)i;
        req[i].comp = comp + i;  /* required: it reports whether the request was posted or queued */
        req[i].op = RDMAX_OP_PUT;
        req[i].buf = src + i * SLOT;
        req[i].len = SLOT;
        req[i].mem = source;
        req[i].raddr = r->addr + (uint64_t)i * SLOT;
        req[i].rkey = r->rkey;
        /* No progress in between: the send queue fills and the rest queue up. */
        if ((st = rdmax_req_post(a, &req[i])) != RDMAX_INPROGRESS)
            die("rdmax_req_post", st);
    }
    rdmax_ep_query_resources(a, &info);
    size_t waiting = info.pending;
    printf("posted %d requests: %zu wait in the pending queue, %u are on the send queue\n", N, waiting,
           info.outstanding);

    /* rdmax_progress reaps completions, and as slots free up it posts the waiting requests, oldest first. */
    while (g_done < N)
        rdmax_progress(ctx);
    rdmax_ep_query_resources(a, &info);
    printf("all %d completed (%d failed); pending now %zu\n", g_done, g_failed, info.pending);

    int ok = waiting > 0 && g_failed == 0 && info.pending == 0;
    for (int i = 0; i < N; i++)
        if (g_order[i] != i) {
            fprintf(stderr, "ex_pending: completion %d was request %d\n", i, g_order[i]);
            ok = 0;
            break;
        }
    if (memcmp(target->addr, src, N * SLOT) != 0) {
        fprintf(stderr, "ex_pending: the target does not hold every request's data\n");
        ok = 0;
    }
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_mem_free(source);
    rdmax_mem_free(target);
    rdmax_ctx_destroy(ctx);
    if (!ok) {
        fprintf(stderr, "ex_pending: failed (%zu waited)\n", waiting);
        return 1;
    }
    printf("ok\n");
    return 0;
}
