/* ex_put - write into a peer's registered buffer with rdmax_put, then read it back with rdmax_get.

   Shows: registering memory (rdmax_mem_alloc), exposing a buffer to the peer (rdmax_ep_desc.expose),
   connecting two endpoints by hand (rdmax_ep_query_record / rdmax_ep_connect_record: the records a real
   program would swap over TCP), reading the peer's buffer address and key (rdmax_ep_query_remote), and
   waiting for an operation through its rdmax_comp.
   Run: build/ex_put [DEVICE]     (no DEVICE: $RDMAX_DEVICE, else the first active device)
   Both endpoints live in one process and one context; exits 0 only if the data arrived intact. */
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#include "../rdmax.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEN 4096

static void die(const char *what, rdmax_status st)
{
    fprintf(stderr, "ex_put: %s: %s\n", what, rdmax_status_str(st));
    exit(1);
}

/* Post has been accepted (RDMAX_INPROGRESS): drive progress until the comp reports. With a comp an
   operation always reports through it, so this loop ends. */
static void wait_comp(rdmax_ctx *ctx, rdmax_comp *c, const char *what)
{
    while (!c->done)
        rdmax_progress(ctx);
    if (c->status != RDMAX_OK)
        die(what, c->status);
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

    /* The target may be written and read by the peer: ask for both remote rights (none by default).
       The source only needs local access. */
    rdmax_mem *target, *source;
    if ((st = rdmax_mem_alloc(ctx, LEN, RDMAX_ACCESS_REMOTE_WRITE | RDMAX_ACCESS_REMOTE_READ, &target)) != RDMAX_OK)
        die("rdmax_mem_alloc(target)", st);
    if ((st = rdmax_mem_alloc(ctx, LEN, RDMAX_ACCESS_LOCAL, &source)) != RDMAX_OK)
        die("rdmax_mem_alloc(source)", st);
    memset(target->addr, 0, LEN);

    /* Endpoint b advertises `target` in its connection record; a will learn it when it connects. */
    rdmax_ep_desc da, db;
    memset(&da, 0, sizeof da);
    memset(&db, 0, sizeof db);
    db.expose = target;
    rdmax_ep *a, *b;
    if ((st = rdmax_ep_create(ctx, &da, &a)) != RDMAX_OK || (st = rdmax_ep_create(ctx, &db, &b)) != RDMAX_OK)
        die("rdmax_ep_create", st);
    /* Each side connects with the other's record (in two processes these would cross the network). */
    rdmax_conn_record ia, ib;
    rdmax_ep_query_record(a, &ia);
    rdmax_ep_query_record(b, &ib);
    if ((st = rdmax_ep_connect_record(a, &ib)) != RDMAX_OK || (st = rdmax_ep_connect_record(b, &ia)) != RDMAX_OK)
        die("rdmax_ep_connect_record", st);

    /* The peer's buffer as a sees it: address, length and key, through the public accessor. */
    const rdmax_rbuf *r = rdmax_ep_query_remote(a, 0);
    if (!r || r->len < LEN) {
        fprintf(stderr, "ex_put: the peer advertised no buffer of %d bytes\n", LEN);
        return 1;
    }

    unsigned char *src = (unsigned char *)source->addr;
    for (size_t i = 0; i < LEN; i++)
        src[i] = (unsigned char)(i * 7 + 3);

    /* Put: a comp makes the post signaled, and it reports even if the data went inline. Passing
       `source` (its registration) avoids the registration cache entirely. */
    rdmax_comp c = {0};
    if ((st = rdmax_put(a, src, LEN, source, r->addr, r->rkey, &c)) != RDMAX_INPROGRESS)
        die("rdmax_put", st);
    wait_comp(ctx, &c, "put completion");
    /* The put's completion means the data is in the target's memory (RC acknowledges it). */
    if (memcmp(target->addr, src, LEN) != 0) {
        fprintf(stderr, "ex_put: the target does not hold what was put\n");
        return 1;
    }
    printf("put %d bytes: the target holds them\n", LEN);

    /* Get it back into the (cleared) source. rdmax never resets `done`: reset the comp before reuse. */
    memset(src, 0, LEN);
    memset(&c, 0, sizeof c);
    if ((st = rdmax_get(a, src, LEN, source, r->addr, r->rkey, &c)) != RDMAX_INPROGRESS)
        die("rdmax_get", st);
    wait_comp(ctx, &c, "get completion");
    if (memcmp(target->addr, src, LEN) != 0) {
        fprintf(stderr, "ex_put: the get did not bring the data back\n");
        return 1;
    }
    printf("get %d bytes: they match\n", LEN);

    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_mem_free(source);
    rdmax_mem_free(target);
    rdmax_ctx_destroy(ctx);
    printf("ok\n");
    return 0;
}
