/* Safe to embed: a program that links rdmax's implementation (tests/embed_impl.c, no option defined)
   and never opens a context must behave as if rdmax were not there.

   Usage: embed_test IMPL.o...   (the implementation objects linked into this program, to inspect)

   Cases:
     symbols/OBJ      the implementation object defines no global symbol outside rdmax_ / rdmax__
     no_ctor/OBJ      ... and has no constructor (.init_array, .ctors): nothing runs at program start
     libc_names       this executable defines none of mmap, mmap64, munmap, mremap, madvise, brk, sbrk,
                      shmat, shmdt, malloc_trim (so every call goes to glibc's)
     malloc_64m       a 64 MiB malloc is a fresh mapping of its own, and free() unmaps it
     thread_arena     a second thread mallocs from an arena of its own (glibc's default arena policy)
     heap_trim        freeing the top of the main heap shrinks it (glibc's default trim threshold)
   The last three are what glibc does without rdmax; rdmax's old default (a malloc policy set by a
   constructor) failed each of them. Built by the Makefile, run by tests/run_all.sh. */
#define _GNU_SOURCE
#define RDMAX_TRANSPORT_RC
#define RDMAX_TRANSPORT_UD
#include "../rdmax.h"
#include "testlib.h"

#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

/* Something of rdmax's must be referenced, or the linker could drop the implementation object. */
static const char *(*volatile g_keep)(rdmax_status) = rdmax_status_str;

/* The mapping of /proc/self/maps that contains address a: 1 if found (start, end, name filled). */
static int find_map(uintptr_t a, uintptr_t *start, uintptr_t *end, char *name, size_t name_len)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int found = 0;
    if (!f)
        return 0;
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long s, e;
        int off = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s%n", &s, &e, &off) < 2)
            continue;
        if (a >= s && a < e) {
            const char *n = line + off;
            while (*n == ' ')
                n++;
            snprintf(name, name_len, "%s", n);
            name[strcspn(name, "\n")] = 0;
            *start = s;
            *end = e;
            found = 1;
        }
    }
    fclose(f);
    return found;
}

/* 1 if any byte of [s, e) is mapped */
static int any_mapped(uintptr_t s, uintptr_t e)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int hit = 0;
    if (!f)
        return 1;
    while (!hit && fgets(line, sizeof line, f)) {
        unsigned long ms, me;
        if (sscanf(line, "%lx-%lx", &ms, &me) == 2 && ms < e && me > s)
            hit = 1;
    }
    fclose(f);
    return hit;
}

/* Runs cmd, returns its output (up to cap bytes) in out; -1 if it could not run or failed. */
static int run(const char *cmd, char *out, size_t cap)
{
    FILE *p = popen(cmd, "r");
    size_t n = 0, r;
    if (!p)
        return -1;
    while (n + 1 < cap && (r = fread(out + n, 1, cap - 1 - n, p)) > 0)
        n += r;
    out[n] = 0;
    return pclose(p) == 0 ? 0 : -1;
}

static void case_symbols(const char *obj)
{
    static char out[1 << 20];
    char cmd[600];
    tl_begin("embed/symbols/%s", obj);
    snprintf(cmd, sizeof cmd, "nm -g --defined-only '%s'", obj);
    REQUIRE(run(cmd, out, sizeof out) == 0, "'%s' failed", cmd);
    {
        int n = 0;
        char *save = NULL;
        for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
            const char *sym = strrchr(l, ' ');
            sym = sym ? sym + 1 : l;
            n++;
            CHECK(strncmp(sym, "rdmax_", 6) == 0, "defines the global symbol '%s'", sym);
        }
        CHECK(n > 10, "only %d global symbols: is this the implementation?", n);
    }
out:
    tl_end();
}

static void case_no_ctor(const char *obj)
{
    static char out[1 << 16];
    char cmd[600];
    tl_begin("embed/no_ctor/%s", obj);
    snprintf(cmd, sizeof cmd, "readelf -S -W '%s'", obj);
    REQUIRE(run(cmd, out, sizeof out) == 0, "'%s' failed", cmd);
    CHECK(strstr(out, " .text") != NULL, "no .text section in the readelf output");
    CHECK(strstr(out, "init_array") == NULL && strstr(out, ".ctors") == NULL && strstr(out, ".preinit_array") == NULL,
          "the object has a constructor section");
out:
    tl_end();
}

static void case_libc_names(void)
{
    static const char *const names[] = {"mmap", "mmap64", "munmap", "mremap", "madvise", "brk", "sbrk",
                                        "shmat", "shmdt", "malloc_trim", "mallopt"};
    static char out[1 << 20];
    char exe[512], cmd[600];
    tl_begin("embed/libc_names");
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    REQUIRE(n > 0, "readlink /proc/self/exe");
    exe[n] = 0;
    snprintf(cmd, sizeof cmd, "nm --defined-only '%s'", exe);
    REQUIRE(run(cmd, out, sizeof out) == 0, "'%s' failed", cmd);
    CHECK(strstr(out, " main\n") != NULL, "nm output has no main: wrong file?");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char pat[64];
        snprintf(pat, sizeof pat, " %s\n", names[i]);
        CHECK(strstr(out, pat) == NULL, "the program defines %s", names[i]);
    }
out:
    tl_end();
}

static void case_malloc_64m(void)
{
    const size_t len = (size_t)64 << 20;
    uintptr_t s = 0, e = 0;
    char name[256];
    tl_begin("embed/malloc_64m");
    char *p = (char *)malloc(len);
    REQUIRE(p != NULL, "malloc(64 MiB) failed");
    memset(p, 1, len);
    REQUIRE(find_map((uintptr_t)p, &s, &e, name, sizeof name), "%p is in no mapping", (void *)p);
    /* glibc's mmap'ed chunk: its own mapping, the pointer right after the chunk header */
    CHECK(strcmp(name, "[heap]") != 0, "64 MiB came from the main heap (M_MMAP_MAX=0?)");
    /* the chunk: its header right before p, page-aligned, rounded up to pages (neighbouring
       anonymous mappings may merge with it in /proc/self/maps, so the test uses the chunk's range) */
    uintptr_t cs = (uintptr_t)p & ~(uintptr_t)4095, ce = ((uintptr_t)p + len + 4095) & ~(uintptr_t)4095;
    CHECK(name[0] == 0 && s <= cs && e >= ce, "mapping %#lx-%#lx (%s) does not hold the chunk %#lx-%#lx",
          (unsigned long)s, (unsigned long)e, name, (unsigned long)cs, (unsigned long)ce);
    CHECK((uintptr_t)p - cs == 16, "%p is not 16 bytes into a page: not an mmap'ed chunk", (void *)p);
    free(p);
    CHECK(!any_mapped(cs, ce), "%#lx-%#lx is still mapped after free", (unsigned long)cs, (unsigned long)ce);
out:
    tl_end();
}

static void *thread_malloc(void *arg)
{
    (void)arg;
    return malloc(100);
}

static void case_thread_arena(void)
{
    uintptr_t hs = 0, he = 0, s = 0, e = 0;
    char name[256];
    void *mine = malloc(100), *theirs = NULL;
    pthread_t t;
    tl_begin("embed/thread_arena");
    REQUIRE(mine && find_map((uintptr_t)mine, &hs, &he, name, sizeof name) && !strcmp(name, "[heap]"),
            "the main thread's small block %p is not in [heap] (%s)", mine, mine ? name : "NULL");
    REQUIRE(pthread_create(&t, NULL, thread_malloc, NULL) == 0, "pthread_create");
    pthread_join(t, &theirs);
    REQUIRE(theirs != NULL, "malloc in a thread failed");
    REQUIRE(find_map((uintptr_t)theirs, &s, &e, name, sizeof name), "%p is in no mapping", theirs);
    CHECK(strcmp(name, "[heap]") != 0, "the thread's block %p is in the main heap: one malloc arena (M_ARENA_MAX=1?)",
          theirs);
    free(theirs);
out:
    free(mine);
    tl_end();
}

static void case_heap_trim(void)
{
    enum { N = 64, SZ = 64 * 1024 }; /* below the mmap threshold: from the main heap */
    void *b[N];
    tl_begin("embed/heap_trim");
    char *before = (char *)sbrk(0);
    for (int i = 0; i < N; i++) {
        b[i] = malloc(SZ);
        if (b[i])
            memset(b[i], 1, SZ);
    }
    char *grown = (char *)sbrk(0);
    for (int i = N - 1; i >= 0; i--)
        free(b[i]);
    char *after = (char *)sbrk(0);
    CHECK(grown - before >= (long)N * SZ / 2, "the heap grew by %ld bytes for %d KiB", (long)(grown - before),
          N * SZ / 1024);
    CHECK(after < grown - (long)N * SZ / 2, "the heap did not shrink after free (%ld -> %ld bytes past the start)",
          (long)(grown - before), (long)(after - before));
    tl_end();
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s IMPL.o...\n", argv[0]);
        return 2;
    }
    if (!g_keep(RDMAX_OK)) /* uses the implementation, opens nothing */
        return 2;
    for (int i = 1; i < argc; i++) {
        case_symbols(argv[i]);
        case_no_ctor(argv[i]);
    }
    case_libc_names();
    case_malloc_64m();
    case_thread_arena();
    case_heap_trim();
    return tl_failed_total ? 1 : 0;
}
