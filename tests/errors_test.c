/* The error model on the host (no device needed): a failed rdmax_ctx_create reports once, through the
   logger, with a log item id, and its error stays readable after the context is gone (thread-local, ctx
   NULL); the default logger prints it once; every log item has its own sentence. */
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#include "../rdmax.h"
#include "testlib.h"

#include <pthread.h>
#include <sys/wait.h>

static int g_errors, g_calls;
static rdmax_log_item g_item;
static char g_msg[512];

static void count_log(rdmax_log_level lvl, rdmax_log_item item, const char *msg, void *user)
{
    (void)user;
    g_calls++;
    if (lvl == RDMAX_LOG_ERROR) {
        g_errors++;
        g_item = item;
        snprintf(g_msg, sizeof g_msg, "%s", msg);
    }
}

static void *other_thread(void *arg)
{
    int *same = (int *)arg;
    *same = rdmax_ctx_query_last_error(NULL)[0] != 0 || rdmax_ctx_query_last_error_item(NULL) != RDMAX_LOG_ITEM_NONE;
    return NULL;
}

static void failed_create(void)
{
    tl_begin("errors/failed rdmax_ctx_create: one error, with an item, kept after the context is gone");
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    d.device = "nosuchdev";
    d.logger.func = count_log;
    rdmax_ctx *ctx = (rdmax_ctx *)(uintptr_t)1;
    CHECK_ST(rdmax_ctx_create(&d, &ctx), RDMAX_ERR_NO_DEVICE);
    CHECK(ctx == NULL, "ctx not NULL after a failed create");
    CHECK(g_errors == 1, "%d error messages, expected one", g_errors);
    /* no device at all (a host), or devices but not this one */
    CHECK(g_item == RDMAX_LOG_ITEM_NO_DEVICE || g_item == RDMAX_LOG_ITEM_NO_ACTIVE_PORT, "item %d (%s): '%s'",
          (int)g_item, rdmax_log_item_str(g_item), g_msg);
    CHECK(rdmax_ctx_query_last_error_item(NULL) == g_item, "thread's last item %s, the logger got %s",
          rdmax_log_item_str(rdmax_ctx_query_last_error_item(NULL)), rdmax_log_item_str(g_item));
    CHECK(!strcmp(rdmax_ctx_query_last_error(NULL), g_msg), "thread's last error '%s', the logger got '%s'",
          rdmax_ctx_query_last_error(NULL), g_msg);
    int seen = -1;
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, other_thread, &seen) == 0, "pthread_create");
    pthread_join(t, NULL);
    CHECK(seen == 0, "another thread sees this thread's last error");
out:
    tl_end();
}

/* Half an allocator is refused before anything is allocated (today's alternative: the context comes from
   alloc and goes back through free(), or the cache fails later); the control, a whole allocator, gets as
   far as opening the device, with its calls counted. */
static int g_allocs;
static void *count_alloc(size_t n, void *user)
{
    (void)user;
    g_allocs++;
    return malloc(n);
}
static void count_free(void *p, void *user)
{
    (void)user;
    free(p);
}

static void half_allocator(void)
{
    tl_begin("errors/rdmax_ctx_create refuses half an allocator up front, with an item");
    for (int half = 0; half < 2; half++) {
        rdmax_ctx_desc d;
        memset(&d, 0, sizeof d);
        d.device = "nosuchdev";
        d.logger.func = count_log;
        d.allocator.alloc = half == 0 ? count_alloc : NULL;
        d.allocator.free = half == 0 ? NULL : count_free;
        g_errors = 0;
        g_allocs = 0;
        g_item = RDMAX_LOG_ITEM_NONE;
        rdmax_ctx *ctx = (rdmax_ctx *)(uintptr_t)1;
        CHECK_ST(rdmax_ctx_create(&d, &ctx), RDMAX_ERR_INVALID_PARAM);
        CHECK(ctx == NULL, "ctx not NULL after a refused create");
        CHECK(g_allocs == 0, "%s only: the allocator was called %d times", half ? "free" : "alloc", g_allocs);
        CHECK(g_errors == 1 && g_item == RDMAX_LOG_ITEM_CTX_DESC, "%d errors, item %s: '%s'", g_errors,
              rdmax_log_item_str(g_item), g_msg);
        CHECK(strstr(g_msg, "allocator") != NULL, "the message does not name the allocator: '%s'", g_msg);
        CHECK(rdmax_ctx_query_last_error_item(NULL) == RDMAX_LOG_ITEM_CTX_DESC, "thread's last item %s",
              rdmax_log_item_str(rdmax_ctx_query_last_error_item(NULL)));
    }
    /* control: both halves pass the check and the allocator is used (the missing device fails later) */
    rdmax_ctx_desc d;
    memset(&d, 0, sizeof d);
    d.device = "nosuchdev";
    d.logger.func = count_log;
    d.allocator.alloc = count_alloc;
    d.allocator.free = count_free;
    g_allocs = 0;
    rdmax_ctx *ctx = NULL;
    CHECK_ST(rdmax_ctx_create(&d, &ctx), RDMAX_ERR_NO_DEVICE);
    CHECK(g_allocs > 0, "a whole allocator was not used");
    tl_end();
}

/* The default logger (stderr) prints a setup error once: a child's stderr, counted. */
static void printed_once(void)
{
    tl_begin("errors/default logger prints a failed create once");
    int fds[2];
    REQUIRE(pipe(fds) == 0, "pipe");
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        rdmax_ctx_desc d;
        memset(&d, 0, sizeof d);
        d.device = "nosuchdev";
        rdmax_ctx *ctx;
        _exit(rdmax_ctx_create(&d, &ctx) == RDMAX_ERR_NO_DEVICE ? 0 : 1);
    }
    close(fds[1]);
    char buf[4096];
    size_t n = 0;
    ssize_t k;
    while (n < sizeof buf - 1 && (k = read(fds[0], buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)k;
    buf[n] = 0;
    close(fds[0]);
    int status = -1;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: create did not fail with RDMAX_ERR_NO_DEVICE");
    int lines = 0;
    for (char *p = buf; (p = strstr(p, "rdmax error: ")) != NULL; p++)
        lines++;
    CHECK(lines == 1, "%d error lines on stderr:\n%s", lines, buf);
out:
    tl_end();
}

static void items(void)
{
    tl_begin("errors/every log item has its own sentence");
    for (int i = 0; i < RDMAX_LOG_ITEM__COUNT; i++) {
        const char *a = rdmax_log_item_str((rdmax_log_item)i);
        CHECK(a && *a && strcmp(a, "unknown log item"), "item %d has no sentence", i);
        for (int j = 0; j < i; j++)
            CHECK(strcmp(a, rdmax_log_item_str((rdmax_log_item)j)), "items %d and %d share '%s'", j, i, a);
    }
    CHECK(!strcmp(rdmax_log_item_str(RDMAX_LOG_ITEM__COUNT), "unknown log item"), "out of range");
    tl_end();
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    failed_create();
    printed_once();
    half_allocator();
    items();
    return tl_failed_total ? 1 : 0;
}
