/* Shared parts of rdmax's fuzz targets (tests/fuzz/NAME_fuzz.c).

   Each target defines LLVMFuzzerTestOneInput and is built two ways:
   - `make fuzz`: clang -fsanitize=fuzzer,address,undefined; libFuzzer runs it for FUZZ_SECONDS and grows the
     corpus under tests/fuzz/<target>/ (then merges it down to the inputs that add coverage);
   - `make test`: any C compiler with -DRDMAX_FUZZ_REPLAY under ASan and UBSan; main() below replays every
     file of the corpus directories named on the command line, so a committed corpus is a regression test.
   A failed check prints "FAIL fuzz/<target>: <input>: why" and aborts, so both libFuzzer (which keeps the
   input as a crash file) and the replay (which reports the file) see it. */
#ifndef RDMAX_FUZZ_H
#define RDMAX_FUZZ_H
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FUZZ_NAME
#error "define FUZZ_NAME (the target's name) before including fuzz.h"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *fz_input = "(libFuzzer input)"; /* the replayed file, for messages */

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3), noreturn))
#endif
static void fz_fail(int line, const char *fmt, ...)
{
    va_list ap;
    printf("FAIL fuzz/%s: %s: ", FUZZ_NAME, fz_input);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf(" (line %d)\n", line);
    fflush(stdout);
    abort();
}
#define FZ_CHECK(c, ...) do { if (!(c)) fz_fail(__LINE__, __VA_ARGS__); } while (0)

/* A reader of the input: each call takes the next bytes; past the end it returns zeros. */
typedef struct fz_in {
    const uint8_t *p;
    size_t n;
} fz_in;

static inline int fz_left(const fz_in *in) { return in->n != 0; }
static inline uint8_t fz_u8(fz_in *in)
{
    if (!in->n)
        return 0;
    in->n--;
    return *in->p++;
}
static inline uint16_t fz_u16(fz_in *in) { uint16_t a = fz_u8(in); return (uint16_t)(a | fz_u8(in) << 8); }
static inline uint32_t fz_u32(fz_in *in) { uint32_t a = fz_u16(in); return a | (uint32_t)fz_u16(in) << 16; }
static inline uint64_t fz_u64(fz_in *in) { uint64_t a = fz_u32(in); return a | (uint64_t)fz_u32(in) << 32; }
/* a value in [0, n) from one byte (n <= 256) or two */
static inline unsigned fz_below(fz_in *in, unsigned n)
{
    if (n <= 1)
        return 0;
    return n <= 256 ? fz_u8(in) % n : fz_u16(in) % n;
}

#ifdef RDMAX_FUZZ_REPLAY
#include <dirent.h>
#include <sys/stat.h>

static int fz_replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("FAIL fuzz/%s: cannot open %s\n", FUZZ_NAME, path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0, k;
    do {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            buf = (uint8_t *)realloc(buf, cap);
            if (!buf)
                abort();
        }
        k = fread(buf + n, 1, cap - n, f);
        n += k;
    } while (k > 0);
    fclose(f);
    /* an exact-size copy, so ASan sees any read past the input */
    uint8_t *exact = (uint8_t *)malloc(n ? n : 1);
    if (!exact)
        abort();
    memcpy(exact, buf, n);
    free(buf);
    fz_input = path;
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 1;
}

/* Usage: <target> DIR_OR_FILE...  Prints one PASS line with the number of inputs replayed. */
int main(int argc, char **argv)
{
    long inputs = 0;
    int bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            printf("FAIL fuzz/%s: %s does not exist\n", FUZZ_NAME, argv[i]);
            bad = 1;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            int r = fz_replay_file(argv[i]);
            inputs += r > 0;
            bad |= r < 0;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            char path[4096];
            if (e->d_name[0] == '.')
                continue;
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                int r = fz_replay_file(path);
                inputs += r > 0;
                bad |= r < 0;
            }
        }
        if (d)
            closedir(d);
    }
    if (!bad && inputs == 0) {
        printf("FAIL fuzz/%s: no inputs to replay (an empty corpus tests nothing)\n", FUZZ_NAME);
        return 1;
    }
    if (!bad)
        printf("PASS fuzz/%s: %ld corpus inputs replayed under ASan and UBSan\n", FUZZ_NAME, inputs);
    return bad;
}
#endif /* RDMAX_FUZZ_REPLAY */
#endif /* RDMAX_FUZZ_H */
