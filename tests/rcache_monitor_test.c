/* Host tests of the registration cache's memory monitor (userfaultfd, mode RDMAX_RCACHE_AUTO) with
   fake registration ops: which changes of memory invalidate a cached region, which memory is never
   cached, the monitor's rules (no deadlock, no allocation, fork), and what happens where it cannot
   run. The device test (tests/rcache_device_test.c) checks the same routes with data on rxe.

   Build and run (from the repository root; no sanitizers: the test replaces malloc; a small event
   ring so that it overflows):
     cc -std=c11 -O1 -g -I. -DRDMAX_RCACHE_EVENT_RING_SIZE=64 tests/rcache_monitor_test.c \
        -libverbs -lnuma -lpthread -o rcache_monitor_test
     ./rcache_monitor_test

   route/NAME     a region is cached (a second get hits), the memory under it changes by NAME, the memory
                  is mapped again at the same address, and the next get must miss. Each route runs again
                  on a cache in mode RDMAX_RCACHE_MANUAL (no invalidation) as its control: there the old
                  registration is handed out again, so the check can fail.
   kept/NAME      a change that keeps the pages (mremap grow in place): the region stays cached.
   never/NAME     memory the monitor cannot watch whole (shared: memfd, MAP_SHARED|MAP_ANONYMOUS, SysV
                  shm; file mappings): every get registers for itself; the control (MANUAL) caches it.
   rule/NAME      munmap from a signal handler that interrupted a get, from another thread while a get
                  holds the cache, of the range being registered from inside the reg op; no malloc on
                  the monitor thread; more events than the ring holds; each in a child with a deadline.
   fork/NAME      a child that does not use rdmax is unaffected (no registration in its mappings, its
                  munmaps return); the parent keeps working; a child that does gets its own monitor.
   off/NAME       the monitor refused (seccomp denies userfaultfd), turned off (RDMAX_RCACHE_MONITOR=off),
                  or user-mode only (uid nobody): refused or off means every get registers for itself.
   Prints PASS/FAIL lines; exits non-zero on failure. */
#define _GNU_SOURCE
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#include "../rdmax.h"
#include "testlib.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- malloc wrappers: count calls made on the monitor thread ---------------------------------- */
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
static volatile long g_mon_tid;
static unsigned long g_mon_allocs;
static void count_mon(void)
{
    if (g_mon_tid && syscall(SYS_gettid) == g_mon_tid)
        __atomic_add_fetch(&g_mon_allocs, 1, __ATOMIC_RELAXED);
}
void *malloc(size_t n) { count_mon(); return __libc_malloc(n); }
void free(void *p) { if (p) count_mon(); __libc_free(p); }
void *calloc(size_t a, size_t b) { count_mon(); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { count_mon(); return __libc_realloc(p, n); }

static size_t P;
#define MIB ((size_t)1 << 20)

/* ---- fake ops ------------------------------------------------------------------------------------ */
static uint32_t g_next_lkey;
static long g_live;
static void (*g_in_reg)(void); /* called from inside the reg op (with the cache's lock held) */

static int fake_reg(void *arg, void *addr, size_t len, unsigned access, rdmax_rcache_region *r)
{
    (void)arg, (void)addr, (void)len, (void)access;
    r->lkey = r->rkey = __atomic_add_fetch(&g_next_lkey, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&g_live, 1, __ATOMIC_RELAXED);
    if (g_in_reg) {
        void (*f)(void) = g_in_reg;
        g_in_reg = NULL;
        f();
    }
    return 0;
}

static void fake_dereg(void *arg, rdmax_rcache_region *r)
{
    (void)arg, (void)r;
    __atomic_sub_fetch(&g_live, 1, __ATOMIC_RELAXED);
}

static rdmax_rcache *mk(int mode, int ts)
{
    rdmax_rcache_desc d;
    rdmax_rcache *rc = NULL;
    memset(&d, 0, sizeof d);
    d.ops.reg = fake_reg;
    d.ops.dereg = fake_dereg;
    d.mode = mode;
    d.thread_safe = ts;
    if (rdmax_rcache_create(&d, &rc) != RDMAX_OK) {
        printf("FAIL setup: rdmax_rcache_create\n");
        exit(1);
    }
    return rc;
}

/* get + put: the lkey of the region that served [p, p+len) (0 on error) */
static uint32_t cache(rdmax_rcache *rc, const void *p, size_t len)
{
    rdmax_rcache_region *r = NULL;
    uint32_t k;
    if (rdmax_rcache_get(rc, p, len, 1, &r) != RDMAX_OK)
        return 0;
    k = r->lkey;
    rdmax_rcache_release(rc, r);
    return k;
}

static rdmax_rcache_stats stats(rdmax_rcache *rc)
{
    rdmax_rcache_stats s;
    rdmax_rcache_query_stats(rc, &s);
    return s;
}

static char *map_at(void *at, size_t len, int fixed)
{
    char *p = (char *)mmap(at, len, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | (fixed ? MAP_FIXED : (at ? MAP_FIXED_NOREPLACE : 0)), -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    memset(p, 0x5a, len);
    return p;
}

/* ---- routes --------------------------------------------------------------------------------------
   A route gets a fresh mapping `p` of `len` bytes whose [off, off+n) is cached, changes the memory
   under it and returns the address of that range afterwards (mapped, written), or NULL. */
typedef struct route {
    const char *name;
    size_t len, off, n;
    char *(*run)(char *p, size_t len, size_t off, size_t n);
} route;

static char *r_munmap(char *p, size_t len, size_t off, size_t n)
{
    (void)off, (void)n;
    munmap(p, len);
    return map_at(p, len, 0) ? p + off : NULL;
}
static char *r_map_fixed(char *p, size_t len, size_t off, size_t n)
{
    (void)off, (void)n;
    return map_at(p, len, 1) ? p + off : NULL;
}
static char *r_mremap_shrink(char *p, size_t len, size_t off, size_t n)
{
    (void)n;
    if (mremap(p, len, off, 0) != p)
        return NULL;
    return map_at(p + off, len - off, 0) ? p + off : NULL;
}
static char *r_mremap_move(char *p, size_t len, size_t off, size_t n)
{
    (void)n;
    char *to = (char *)mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (to == MAP_FAILED || mremap(p, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, to) != to)
        return NULL;
    munmap(to, len);
    return map_at(p, len, 0) ? p + off : NULL;
}
static char *r_dontneed(char *p, size_t len, size_t off, size_t n)
{
    (void)len;
    if (madvise(p + off, n, MADV_DONTNEED) != 0)
        return NULL;
    memset(p + off, 0x77, n);
    return p + off;
}
static char *r_free(char *p, size_t len, size_t off, size_t n)
{
    (void)len;
    if (madvise(p + off, n, MADV_FREE) != 0)
        return NULL;
    memset(p + off, 0x77, n);
    return p + off;
}
static char *r_syscalls(char *p, size_t len, size_t off, size_t n)
{
    (void)n;
    if (syscall(SYS_munmap, p, len) != 0)
        return NULL;
    char *q = (char *)syscall(SYS_mmap, p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (q != p)
        return NULL;
    memset(q, 1, len);
    return p + off;
}
static void *unmapper(void *arg)
{
    char **pl = (char **)arg;
    return (void *)(intptr_t)munmap(pl[0], (size_t)(uintptr_t)pl[1]);
}
static char *r_other_thread(char *p, size_t len, size_t off, size_t n)
{
    (void)n;
    pthread_t t;
    void *ret = (void *)1;
    char *pl[2] = {p, (char *)(uintptr_t)len};
    if (pthread_create(&t, NULL, unmapper, pl) != 0)
        return NULL;
    pthread_join(t, &ret);
    if (ret != NULL)
        return NULL;
    return map_at(p, len, 0) ? p + off : NULL;
}
static char *r_brk(char *p, size_t len, size_t off, size_t n)
{
    (void)p, (void)n;
    /* p was ignored: this route uses the program break (see brk_setup) */
    char *top = (char *)sbrk(0);
    if (sbrk(-(intptr_t)len) == (void *)-1 || sbrk((intptr_t)len) == (void *)-1)
        return NULL;
    memset(top - len, 3, len);
    return top - len + off;
}

/* Runs one route on a cache of `mode`; returns 1 if the old registration was handed out again
   (stale), 0 if the get missed, -1 on a setup error (why in msg). */
static int route_once(const route *rt, int mode, char *msg, size_t msz)
{
    rdmax_rcache *rc = mk(mode, 0);
    char *p, *q;
    uint32_t k, k2;
    int stale = -1;
    if (rt->run == r_brk) {
        p = (char *)sbrk((intptr_t)rt->len);
        if (p == (char *)-1) {
            snprintf(msg, msz, "sbrk");
            goto out;
        }
        memset(p, 2, rt->len);
    } else if (!(p = map_at(NULL, rt->len, 0))) {
        snprintf(msg, msz, "mmap");
        goto out;
    }
    k = cache(rc, p + rt->off, rt->n);
    if (!k || cache(rc, p + rt->off, rt->n) != k) {
        snprintf(msg, msz, "not cached before the change (uncached %lu)", (unsigned long)stats(rc).uncached);
        goto out;
    }
    q = rt->run(p, rt->len, rt->off, rt->n);
    if (q != p + rt->off && !(rt->run == r_brk && q)) {
        snprintf(msg, msz, "the route's own calls failed (%s)", strerror(errno));
        goto out;
    }
    k2 = cache(rc, q, rt->n);
    stale = k2 == k;
    if (rt->run == r_brk)
        sbrk(-(intptr_t)rt->len);
    else
        munmap(p, rt->len);
out:
    rdmax_rcache_destroy(rc);
    return stale;
}

static void case_route(const route *rt)
{
    char msg[200] = "";
    tl_begin("route/%s", rt->name);
    int s = route_once(rt, RDMAX_RCACHE_AUTO, msg, sizeof msg);
    CHECK(s == 0, "%s", s < 0 ? msg : "the old registration was handed out after the change");
    s = route_once(rt, RDMAX_RCACHE_MANUAL, msg, sizeof msg);
    CHECK(s == 1, "control (no invalidation): %s", s < 0 ? msg : "the get missed: the check cannot fail");
    tl_end();
}

static void case_kept_grow(void)
{
    rdmax_rcache *rc = mk(RDMAX_RCACHE_AUTO, 0);
    tl_begin("kept/mremap grow in place");
    char *p = map_at(NULL, 4 * MIB, 0), *q;
    REQUIRE(p != NULL, "mmap");
    munmap(p + 2 * MIB, 2 * MIB); /* room to grow into */
    uint32_t k = cache(rc, p, 64 * 1024);
    q = (char *)mremap(p, 2 * MIB, 4 * MIB, 0);
    REQUIRE(q == p, "mremap grow in place failed");
    CHECK(cache(rc, p, 64 * 1024) == k, "a region whose pages stayed was dropped");
    munmap(p, 4 * MIB);
out:
    rdmax_rcache_destroy(rc);
    tl_end();
}

/* ---- never cached ---- */
static char *shared_anon(size_t len)
{
    char *p = (char *)mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}
static char *shared_memfd(size_t len)
{
    int fd = memfd_create("rdmax_test", 0);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0)
        return NULL;
    char *p = (char *)mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}
static char *sysv_shm(size_t len)
{
    int id = shmget(IPC_PRIVATE, len, IPC_CREAT | 0600);
    if (id < 0)
        return NULL;
    char *p = (char *)shmat(id, NULL, 0);
    shmctl(id, IPC_RMID, NULL);
    return p == (char *)-1 ? NULL : p;
}
static char *file_map(size_t len)
{
    char path[] = "/tmp/rdmax_monitor_test_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return NULL;
    unlink(path);
    if (ftruncate(fd, (off_t)len) != 0)
        return NULL;
    char *p = (char *)mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : p;
}

static void case_never(const char *name, char *(*make)(size_t), int is_shm)
{
    const size_t len = MIB;
    tl_begin("never/%s", name);
    for (int mode = RDMAX_RCACHE_AUTO; mode <= RDMAX_RCACHE_MANUAL; mode++) {
        rdmax_rcache *rc = mk(mode, 0);
        char *p = make(len);
        uint32_t k1, k2;
        long live0 = g_live;
        REQUIRE(p != NULL, "making the mapping: %s", strerror(errno));
        memset(p, 1, len);
        k1 = cache(rc, p, 64 * 1024);
        k2 = cache(rc, p, 64 * 1024);
        if (mode == RDMAX_RCACHE_AUTO) {
            CHECK(k1 && k2 && k1 != k2, "cached (a second get hit the first registration)");
            CHECK(stats(rc).uncached == 2 && g_live == live0, "uncached %lu, %ld registrations left",
                  (unsigned long)stats(rc).uncached, g_live - live0);
        } else {
            CHECK(k1 && k1 == k2, "control (MANUAL): not cached");
        }
        rdmax_rcache_destroy(rc);
        if (is_shm)
            shmdt(p);
        else
            munmap(p, len);
    }
out:
    tl_end();
}

/* ---- rules: each in a child process with a deadline ---- */
typedef int (*child_fn)(char *msg, size_t msz);

/* Runs fn in a child; a child that does not finish in `secs` is a deadlock. */
static void in_child(const char *name, child_fn fn, int secs)
{
    int pfd[2];
    char msg[300] = "";
    tl_begin("%s", name);
    REQUIRE(pipe(pfd) == 0, "pipe");
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        char m[300] = "";
        close(pfd[0]);
        alarm((unsigned)secs);
        int rc = fn(m, sizeof m);
        if (write(pfd[1], m, strlen(m) + 1) < 0)
            _exit(3);
        _exit(rc ? 1 : 0);
    }
    close(pfd[1]);
    ssize_t n = read(pfd[0], msg, sizeof msg - 1);
    msg[n > 0 ? n : 0] = 0;
    close(pfd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
        CHECK(0, "no progress in %d s: deadlock", secs);
    else
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s (status %#x)", msg[0] ? msg : "child failed", st);
out:
    tl_end();
}

#define CFAIL(...) do { snprintf(msg, msz, __VA_ARGS__); return 1; } while (0)

static char *g_victim;
static size_t g_victim_len;
static void unmap_victim(void) { munmap(g_victim, g_victim_len); }
static void on_usr1(int sig) { (void)sig; unmap_victim(); }
static void raise_usr1(void) { raise(SIGUSR1); }

/* A signal handler that unmaps a cached range interrupts a get that holds the cache's lock. */
static int rule_signal(char *msg, size_t msz)
{
    rdmax_rcache *rc = mk(RDMAX_RCACHE_AUTO, 1);
    char *a = map_at(NULL, MIB, 0), *b = map_at(NULL, MIB, 0);
    if (!a || !b)
        CFAIL("mmap");
    uint32_t ka = cache(rc, a, 64 * 1024);
    g_victim = a;
    g_victim_len = MIB;
    signal(SIGUSR1, on_usr1);
    g_in_reg = raise_usr1;
    if (!cache(rc, b, 64 * 1024)) /* the handler runs inside this get's reg op */
        CFAIL("get during which the handler ran failed");
    if (!map_at(a, MIB, 0))
        CFAIL("remap");
    if (cache(rc, a, 64 * 1024) == ka)
        CFAIL("the range unmapped by the handler was served by its old registration");
    rdmax_rcache_destroy(rc);
    return 0;
}

static volatile int g_other_done;
static void *unmap_then_flag(void *arg)
{
    (void)arg;
    unmap_victim();
    __atomic_store_n(&g_other_done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}
static void wait_for_other(void)
{
    pthread_t t;
    pthread_create(&t, NULL, unmap_then_flag, NULL);
    for (int i = 0; i < 5000 && !__atomic_load_n(&g_other_done, __ATOMIC_SEQ_CST); i++)
        usleep(1000);
    pthread_join(t, NULL);
}

/* Another thread unmaps a cached range while a get holds the cache's lock (inside its reg op). */
static int rule_other_thread(char *msg, size_t msz)
{
    rdmax_rcache *rc = mk(RDMAX_RCACHE_AUTO, 1);
    char *a = map_at(NULL, MIB, 0), *b = map_at(NULL, MIB, 0);
    if (!a || !b)
        CFAIL("mmap");
    uint32_t ka = cache(rc, a, 64 * 1024);
    g_victim = a;
    g_victim_len = MIB;
    g_in_reg = wait_for_other;
    if (!cache(rc, b, 64 * 1024))
        CFAIL("get failed");
    if (!g_other_done)
        CFAIL("the unmapping thread did not finish while the get held the cache");
    if (!map_at(a, MIB, 0) || cache(rc, a, 64 * 1024) == ka)
        CFAIL("stale region after the other thread's munmap");
    rdmax_rcache_destroy(rc);
    return 0;
}

/* The range being registered is unmapped from inside the reg op (after the monitor registration). */
static int rule_inside(char *msg, size_t msz)
{
    rdmax_rcache *rc = mk(RDMAX_RCACHE_AUTO, 0);
    char *a = map_at(NULL, MIB, 0);
    if (!a)
        CFAIL("mmap");
    g_victim = a;
    g_victim_len = MIB;
    g_in_reg = unmap_victim;
    uint32_t k = cache(rc, a, 64 * 1024);
    if (!k)
        CFAIL("get failed");
    if (!map_at(a, MIB, 0) || cache(rc, a, 64 * 1024) == k)
        CFAIL("the region registered over an unmapped range was cached");
    rdmax_rcache_destroy(rc);
    return 0;
}

static long find_monitor_tid(void)
{
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    long tid = 0;
    while (d && (e = readdir(d)) != NULL && !tid) {
        char path[300], comm[32] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f) {
            if (fgets(comm, sizeof comm, f) && !strncmp(comm, "rdmax-monitor", 13))
                tid = atol(e->d_name);
            fclose(f);
        }
    }
    if (d)
        closedir(d);
    return tid;
}

/* 300 cached ranges unmapped with no get in between: more events than the ring holds (the test is
   built with RDMAX_RCACHE_EVENT_RING_SIZE=64), so the next get must drop every cached region; no
   malloc or free on the monitor thread meanwhile. */
static int rule_many(char *msg, size_t msz)
{
    enum { N = 300 };
    static char *bufs[N];
    rdmax_rcache *rc = mk(RDMAX_RCACHE_AUTO, 0);
    char *keep = map_at(NULL, 2 * P, 0);
    uint32_t kk;
    rdmax_rcache_monitor_info m0, m1;
    if (RDMAX_RCACHE_EVENT_RING_SIZE >= N)
        CFAIL("built with a ring of %u slots: no overflow with %d events", RDMAX_RCACHE_EVENT_RING_SIZE, N);
    g_mon_tid = find_monitor_tid();
    if (!g_mon_tid)
        CFAIL("no thread named rdmax-monitor");
    if (!keep || !(kk = cache(rc, keep, P)))
        CFAIL("setup");
    for (int i = 0; i < N; i++)
        if (!(bufs[i] = map_at(NULL, 2 * P, 0)) || !cache(rc, bufs[i], P))
            CFAIL("map or get %d", i);
    rdmax_rcache_query_monitor(&m0);
    for (int i = 0; i < N; i++)
        munmap(bufs[i], 2 * P);
    rdmax_rcache_query_monitor(&m1);
    if (cache(rc, keep, P) == kk)
        CFAIL("after lost events a cached region was handed out again");
    rdmax_rcache_stats s = stats(rc);
    /* the monitor counts an event after the read that let its munmap return: the last may trail */
    if (m1.unmap - m0.unmap < N - 1 || s.overflows != 1 || s.cached_regions != 1)
        CFAIL("%lu unmap events for %d unmaps, %lu overflows, %lu cached regions",
              (unsigned long)(m1.unmap - m0.unmap), N, (unsigned long)s.overflows, (unsigned long)s.cached_regions);
    if (g_mon_allocs)
        CFAIL("%lu malloc/free calls on the monitor thread", g_mon_allocs);
    rdmax_rcache_destroy(rc);
    return 0;
}

/* ---- fork ---- */
static int vmas_registered(void)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmFlags:", 8) && (strstr(line, " uw") || strstr(line, " um")))
            n++;
    if (f)
        fclose(f);
    return n;
}

static int fork_child_unaffected(char *msg, size_t msz)
{
    rdmax_rcache *rc = mk(RDMAX_RCACHE_AUTO, 0);
    char *a = map_at(NULL, 4 * MIB, 0);
    if (!a || !cache(rc, a, MIB))
        CFAIL("setup");
    uint32_t k = cache(rc, a, MIB);
    if (vmas_registered() == 0)
        CFAIL("no registered mapping in smaps before fork: the check cannot fail");
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10);
        int reg = vmas_registered();
        munmap(a, 4 * MIB); /* would wait for a reader forever if the registration had come along */
        char *b = map_at(a, 4 * MIB, 0);
        _exit(reg != 0 ? 2 : !b ? 3 : 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        CFAIL("child: %s (status %#x)", WIFEXITED(st) && WEXITSTATUS(st) == 2 ? "its mappings are registered" :
              WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ? "munmap blocked" : "failed", st);
    if (cache(rc, a, MIB) != k)
        CFAIL("parent: region lost by the fork");
    munmap(a, 4 * MIB);
    if (!map_at(a, 4 * MIB, 0) || cache(rc, a, MIB) == k)
        CFAIL("parent: munmap after fork not seen");
    rdmax_rcache_destroy(rc);
    return 0;
}

static int fork_child_uses(char *msg, size_t msz)
{
    rdmax_rcache *rc = mk(RDMAX_RCACHE_AUTO, 0);
    char *a = map_at(NULL, MIB, 0);
    if (!a || !cache(rc, a, 64 * 1024))
        CFAIL("setup");
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10);
        static const route rt = {"munmap", MIB, 0, 64 * 1024, r_munmap};
        char m[200];
        rdmax_rcache_monitor_info mi;
        rdmax_rcache *c2 = mk(RDMAX_RCACHE_AUTO, 0);
        rdmax_rcache_query_monitor(&mi);
        int ok = mi.running && route_once(&rt, RDMAX_RCACHE_AUTO, m, sizeof m) == 0;
        rdmax_rcache_destroy(c2);
        _exit(ok ? 0 : 2);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        CFAIL("child's own cache: %s (status %#x)", WIFSIGNALED(st) ? "killed" : "no monitor or stale region", st);
    rdmax_rcache_destroy(rc);
    return 0;
}

/* A child forked while another thread of the parent holds the monitor's lock still gets a monitor. */
static volatile int g_lock_held, g_lock_release;
static void *hold_monitor_lock(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&rdmax__mon_lock);
    __atomic_store_n(&g_lock_held, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(&g_lock_release, __ATOMIC_SEQ_CST))
        usleep(1000);
    pthread_mutex_unlock(&rdmax__mon_lock);
    return NULL;
}
static int fork_lock_held(char *msg, size_t msz)
{
    rdmax_rcache *rc = mk(RDMAX_RCACHE_AUTO, 0); /* the monitor runs in the parent */
    pthread_t t;
    pthread_create(&t, NULL, hold_monitor_lock, NULL);
    while (!__atomic_load_n(&g_lock_held, __ATOMIC_SEQ_CST))
        usleep(1000);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(10);
        static const route rt = {"munmap", MIB, 0, 64 * 1024, r_munmap};
        char m[200];
        _exit(route_once(&rt, RDMAX_RCACHE_AUTO, m, sizeof m) == 0 ? 0 : 2);
    }
    __atomic_store_n(&g_lock_release, 1, __ATOMIC_SEQ_CST);
    pthread_join(t, NULL);
    int st = 0;
    waitpid(pid, &st, 0);
    rdmax_rcache_destroy(rc);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
        CFAIL("child: %s (status %#x)", WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ? "blocked on the lock" : "stale", st);
    return 0;
}

/* ---- where the monitor cannot run ---- */
static int deny_userfaultfd(void)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_userfaultfd, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_ioctl, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, USERFAULTFD_IOC_NEW, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

/* every get registers for itself, the last put deregisters; said why */
static int expect_uncached(char *msg, size_t msz)
{
    rdmax_rcache_monitor_info mi;
    rdmax_rcache_query_monitor(&mi);
    if (mi.usable || mi.running || !mi.why[0])
        CFAIL("monitor usable %d running %d why '%s'", mi.usable, mi.running, mi.why);
    rdmax_rcache *rc = mk(RDMAX_RCACHE_AUTO, 0);
    char *a = map_at(NULL, MIB, 0);
    long live0 = g_live;
    uint32_t k1 = cache(rc, a, 64 * 1024), k2 = cache(rc, a, 64 * 1024);
    rdmax_rcache_stats s = stats(rc);
    if (!k1 || k1 == k2 || s.uncached != 2 || s.hits != 0 || g_live != live0)
        CFAIL("k1 %u k2 %u uncached %lu hits %lu live %ld", k1, k2, (unsigned long)s.uncached, (unsigned long)s.hits,
              g_live - live0);
    rdmax_rcache_destroy(rc);
    snprintf(msg, msz, "%s", mi.why);
    return 0;
}

static int off_seccomp(char *msg, size_t msz)
{
    if (deny_userfaultfd())
        CFAIL("seccomp: %s", strerror(errno));
    return expect_uncached(msg, msz);
}

static int off_env(char *msg, size_t msz)
{
    setenv("RDMAX_RCACHE_MONITOR", "off", 1);
    int r = expect_uncached(msg, msz);
    if (!r && !strstr(msg, "RDMAX_RCACHE_MONITOR")) {
        char why[200];
        snprintf(why, sizeof why, "%s", msg);
        CFAIL("the reason does not name the variable: %s", why);
    }
    return r;
}

static int off_unprivileged(char *msg, size_t msz)
{
    char v[8] = "";
    FILE *f = fopen("/proc/sys/vm/unprivileged_userfaultfd", "r");
    if (f) {
        if (!fgets(v, sizeof v, f))
            v[0] = 0;
        fclose(f);
    }
    if (setgid(65534) || setuid(65534))
        CFAIL("setuid nobody: %s", strerror(errno));
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0); /* as if started unprivileged: /proc/self readable */
    rdmax_rcache_monitor_info mi;
    rdmax_rcache_query_monitor(&mi);
    if (!mi.usable)
        CFAIL("not usable as nobody: %s", mi.why);
    if (v[0] == '0' && !mi.user_mode_only)
        CFAIL("vm.unprivileged_userfaultfd=0 but not opened user-mode only");
    static const route rt = {"munmap", MIB, 0, 64 * 1024, r_munmap};
    if (route_once(&rt, RDMAX_RCACHE_AUTO, msg, msz) != 0)
        CFAIL("munmap not seen as nobody (%s)", mi.why);
    return 0;
}

int main(void)
{
    static const route routes[] = {
        {"munmap + mmap", MIB, 64 * 1024, 64 * 1024, r_munmap},
        {"mmap MAP_FIXED over", MIB, 64 * 1024, 64 * 1024, r_map_fixed},
        {"mremap shrink", 2 * MIB, MIB, 64 * 1024, r_mremap_shrink},
        {"mremap move", MIB, 64 * 1024, 64 * 1024, r_mremap_move},
        {"madvise DONTNEED", MIB, 64 * 1024, 64 * 1024, r_dontneed},
        {"madvise FREE", MIB, 64 * 1024, 64 * 1024, r_free},
        {"syscall munmap + mmap", MIB, 64 * 1024, 64 * 1024, r_syscalls},
        {"munmap by another thread", MIB, 64 * 1024, 64 * 1024, r_other_thread},
        {"brk shrink", MIB, 64 * 1024, 64 * 1024, r_brk},
    };
    P = (size_t)sysconf(_SC_PAGESIZE);
    setvbuf(stdout, NULL, _IONBF, 0);
    rdmax_rcache_monitor_info mi;
    rdmax_rcache_query_monitor(&mi);
    printf("# monitor: usable %d, %s\n", mi.usable, mi.why);
    tl_begin("monitor/usable here");
    CHECK(mi.usable, "%s", mi.why);
    tl_end();
    if (!mi.usable)
        return 1;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        case_route(&routes[i]);
    case_kept_grow();
    case_never("memfd MAP_SHARED", shared_memfd, 0);
    case_never("MAP_SHARED|MAP_ANONYMOUS", shared_anon, 0);
    case_never("SysV shm", sysv_shm, 1);
    case_never("file MAP_SHARED", file_map, 0);
    in_child("rule/munmap in a signal handler during a get", rule_signal, 10);
    in_child("rule/munmap by another thread while a get holds the cache", rule_other_thread, 10);
    in_child("rule/munmap of the range being registered, inside the reg op", rule_inside, 10);
    in_child("rule/300 unmap events, ring overflow, no malloc on the monitor thread", rule_many, 120);
    in_child("fork/child without rdmax unaffected, parent keeps working", fork_child_unaffected, 20);
    in_child("fork/child with its own cache gets its own monitor", fork_child_uses, 20);
    in_child("fork/while another thread holds the monitor's lock", fork_lock_held, 20);
    in_child("off/seccomp denies userfaultfd: every get registers", off_seccomp, 10);
    in_child("off/RDMAX_RCACHE_MONITOR=off: every get registers", off_env, 10);
    if (getuid() == 0)
        in_child("off/unprivileged (uid nobody)", off_unprivileged, 10);
    return tl_failed_total ? 1 : 0;
}
