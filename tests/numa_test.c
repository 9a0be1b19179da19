/* NUMA placement on a real device: buffers rdmax allocates (rdmax_mem_alloc, the shared receive pool)
   land on the node the context was told to use, by desc or by $RDMAX_NUMA_NODE; a device without a
   sysfs node (rxe) means local allocation. Needs two nodes (the test VM boots with two). */
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#include "../rdmax.h"
#include "testlib.h"

#include <numaif.h>

/* The node each page of [p, p+len) sits on; -1 if they differ or the query fails. */
static int node_of(void *p, size_t len)
{
    int node = -2;
    for (size_t off = 0; off < len; off += 4096) {
        int n = -1;
        if (get_mempolicy(&n, NULL, 0, (char *)p + off, MPOL_F_NODE | MPOL_F_ADDR))
            return -1;
        if (node == -2)
            node = n;
        else if (n != node)
            return -1;
    }
    return node;
}

static void placed(int node, int by_env)
{
    rdmax_ctx *ctx = NULL;
    rdmax_mem *m = NULL;
    rdmax_ep *a = NULL, *b = NULL;
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    tl_begin("numa/node %d by %s", node, by_env ? "RDMAX_NUMA_NODE" : "desc");
    if (by_env) {
        char v[8];
        snprintf(v, sizeof v, "%d", node);
        setenv("RDMAX_NUMA_NODE", v, 1);
    } else {
        d.numa_node_set = true;
        d.numa_node = node;
    }
    REQUIRE(rdmax_ctx_create(&d, &ctx) == RDMAX_OK, "context");
    CHECK(rdmax_ctx_query_attr(ctx)->numa_node == node, "context uses node %d", rdmax_ctx_query_attr(ctx)->numa_node);
    CHECK(rdmax_ctx_query_desc(ctx).numa_node == node && rdmax_ctx_query_desc(ctx).numa_node_set, "applied desc does not show node %d", node);
    REQUIRE(rdmax_mem_alloc(ctx, 1 << 20, RDMAX_ACCESS_REMOTE_WRITE, &m) == RDMAX_OK, "alloc");
    CHECK(node_of(m->addr, 1 << 20) == node, "buffer pages on node %d", node_of(m->addr, 1 << 20));
    REQUIRE(rdmax_ep_create_pair(ctx, NULL, &a, &b) == RDMAX_OK, "endpoints");
    rdmax_ep_resources info;
    rdmax_ep_query_resources(a, &info);
    CHECK(node_of(info.recv_pool, info.recv_pool_bytes) == node, "receive pool on node %d",
          node_of(info.recv_pool, info.recv_pool_bytes));
    tl_end();
out:
    unsetenv("RDMAX_NUMA_NODE");
    rdmax_ep_destroy(a);
    rdmax_ep_destroy(b);
    rdmax_mem_free(m);
    rdmax_ctx_destroy(ctx);
    if (tl_case_failed)
        tl_end();
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (numa_available() < 0 || numa_max_node() < 1) {
        printf("SKIP numa: this machine has %d NUMA node(s); the test needs two\n", numa_max_node() + 1);
        return 0;
    }
    placed(1, 0);
    placed(0, 0);
    placed(1, 1);

    rdmax_ctx *ctx = NULL;
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    tl_begin("numa/device without a sysfs node allocates locally");
    REQUIRE(rdmax_ctx_create(&d, &ctx) == RDMAX_OK, "context");
    char path[128];
    snprintf(path, sizeof path, "/sys/class/infiniband/%s/device/numa_node", rdmax_ctx_query_attr(ctx)->name);
    if (access(path, F_OK) == 0)
        printf("SKIP numa/no sysfs node: %s exists on this device\n", path);
    else
        CHECK(rdmax_ctx_query_attr(ctx)->numa_node == -1, "node %d chosen for a device with no node", rdmax_ctx_query_attr(ctx)->numa_node);
    tl_end();
    rdmax_ctx_destroy(ctx);
    ctx = NULL;
    tl_begin("numa/node that does not exist falls back to local");
    d.numa_node_set = true;
    d.numa_node = 7;
    REQUIRE(rdmax_ctx_create(&d, &ctx) == RDMAX_OK, "context");
    CHECK(rdmax_ctx_query_attr(ctx)->numa_node == -1, "node %d", rdmax_ctx_query_attr(ctx)->numa_node);
    tl_end();
    tl_begin("numa/bad RDMAX_NUMA_NODE is a clear error");
    setenv("RDMAX_NUMA_NODE", "one", 1);
    rdmax_ctx *c2 = NULL;
    memset(&d, 0, sizeof d);
    d.log_level_set = true;
    d.log_level = RDMAX_LOG_ERROR;
    CHECK_ST(rdmax_ctx_create(&d, &c2), RDMAX_ERR_INVALID_PARAM);
    unsetenv("RDMAX_NUMA_NODE");
    tl_end();
out:
    rdmax_ctx_destroy(ctx);
    if (tl_case_failed)
        tl_end();
    return tl_failed_total ? 1 : 0;
}
