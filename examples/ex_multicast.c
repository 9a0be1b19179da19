/* ex_multicast - one UD datagram sent to a multicast group reaches every member.

   Shows: UD endpoints (compile with RDMAX_TRANSPORT_UD), joining a group (rdmax_mcast_join), a send-only
   endpoint addressed to the group (rdmax_mcast_ep_create), and receiving in a recv_cb. Two receivers in
   their own contexts (as two processes would be) and a sender, all in this process.
   Run: build/ex_multicast [DEVICE]     (no DEVICE: $RDMAX_DEVICE, else the first active device)
   Exits 0 only if both receivers got the message intact. UD may drop a datagram: the sender repeats it
   (a real program numbers its datagrams; see rdmax_pingpong_ud -g). */
#define RDMAX_TRANSPORT_UD
#define RDMAX_IMPLEMENTATION
#include "../rdmax.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define GROUP "239.1.2.4"
#define LEN 256 /* a UD message must fit in the path MTU */

struct rx {
    int got, bad;
};

static void die(const char *what, rdmax_status st)
{
    fprintf(stderr, "ex_multicast: %s: %s\n", what, rdmax_status_str(st));
    exit(1);
}

static unsigned char expected(size_t i)
{
    return (unsigned char)(i * 13 + 5);
}

/* data is valid only during the call: check it here, keep only the verdict. */
static void on_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    struct rx *r = (struct rx *)user;
    const unsigned char *p = (const unsigned char *)data;
    (void)ep;
    int ok = len == LEN;
    for (size_t i = 0; ok && i < LEN; i++)
        ok = p[i] == expected(i);
    if (ok)
        r->got++;
    else
        r->bad++;
}

static rdmax_ctx *open_ctx(const char *dev)
{
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.device = dev;
    rdmax_ctx *ctx;
    rdmax_status st = rdmax_ctx_create(&cd, &ctx);
    if (st != RDMAX_OK)
        die("rdmax_ctx_create", st);
    return ctx;
}

int main(int argc, char **argv)
{
    const char *dev = argc > 1 ? argv[1] : NULL;
    rdmax_ctx *rctx[2], *sctx = open_ctx(dev);
    rdmax_ep *rep[2];
    struct rx rx[2] = {{0, 0}, {0, 0}};
    rdmax_status st;
    for (int k = 0; k < 2; k++) {
        rctx[k] = open_ctx(dev);
        rdmax_ep_desc d;
        memset(&d, 0, sizeof d);
        d.recv_cb = on_recv;
        d.user = &rx[k];
        /* A receiver needs no peer: joining (through rdma_cm) attaches its QP to the group. */
        if ((st = rdmax_ep_create(rctx[k], &d, &rep[k])) != RDMAX_OK)
            die("rdmax_ep_create", st);
        if ((st = rdmax_mcast_join(rep[k], GROUP)) != RDMAX_OK)
            die("rdmax_mcast_join", st);
    }
    /* The sender's endpoint is bound to the group's address; anything sent on it goes to every member. */
    rdmax_ep *tx;
    if ((st = rdmax_mcast_ep_create(sctx, NULL, GROUP, &tx)) != RDMAX_OK)
        die("rdmax_mcast_ep_create", st);
    rdmax_mem *m;
    if ((st = rdmax_mem_alloc(sctx, LEN, RDMAX_ACCESS_LOCAL, &m)) != RDMAX_OK)
        die("rdmax_mem_alloc", st);
    for (size_t i = 0; i < LEN; i++)
        ((unsigned char *)m->addr)[i] = expected(i);

    int tries = 0;
    while ((rx[0].got == 0 || rx[1].got == 0) && tries < 50) {
        rdmax_comp c = {0};
        if ((st = rdmax_send(tx, m->addr, LEN, m, &c)) != RDMAX_INPROGRESS)
            die("rdmax_send", st);
        tries++;
        while (!c.done)
            rdmax_progress(sctx);
        if (c.status != RDMAX_OK)
            die("send completion", c.status);
        /* A completed UD send has left, not arrived: each receiver's context must progress to see it. */
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do {
            rdmax_progress(rctx[0]);
            rdmax_progress(rctx[1]);
            clock_gettime(CLOCK_MONOTONIC, &t);
        } while ((rx[0].got == 0 || rx[1].got == 0) &&
                 (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 200);
    }
    printf("sent %d time(s); receiver 0 got %d, receiver 1 got %d (%d corrupted)\n", tries, rx[0].got, rx[1].got,
           rx[0].bad + rx[1].bad);
    int ok = rx[0].got > 0 && rx[1].got > 0 && rx[0].bad + rx[1].bad == 0;

    for (int k = 0; k < 2; k++) {
        if ((st = rdmax_mcast_leave(rep[k], GROUP)) != RDMAX_OK)
            die("rdmax_mcast_leave", st);
        rdmax_ep_destroy(rep[k]);
        rdmax_ctx_destroy(rctx[k]);
    }
    rdmax_ep_destroy(tx);
    rdmax_mem_free(m);
    rdmax_ctx_destroy(sctx);
    if (!ok) {
        fprintf(stderr, "ex_multicast: not every receiver got the message intact\n");
        return 1;
    }
    printf("ok\n");
    return 0;
}
