/* The out-of-band connection exchange against crafted peers over real TCP sockets (IPv4 and IPv6):
   every field wrong in turn, short, long, other version, silent. Each must give its own status, and
   nothing may overflow (run under ASan by `make asan`). With the argument `device`, also: a listener on a
   real RDMA device survives a bad client and then connects a good one. */
#define RDMAX_TRANSPORT_RC
#define RDMAX_IMPLEMENTATION
#define RDMAX_TESTING
#include "../rdmax.h"
#include "testlib.h"

#include <signal.h>
#include <sys/wait.h>
#include <poll.h>
#include <time.h>
#include <sys/resource.h>

static void good_record(rdmax_conn_record *r)
{
    memset(r, 0, sizeof *r);
    r->transport = RDMAX_TRANSPORT_ID_RC;
    r->mtu = IBV_MTU_1024;
    r->qpn = 0x123;
    r->psn = 0x456;
    r->recv_size = 4096;
    r->credits = 128;
    r->gid[10] = r->gid[11] = 0xff;
    r->gid[12] = 192;
    r->gid[15] = 1;
    r->n_regions = 1;
    r->regions[0].addr = 0x7f0000001000ull;
    r->regions[0].len = 4096;
    r->regions[0].rkey = 0x99;
    r->link_layer = IBV_LINK_LAYER_ETHERNET;  /* a RoCE v2 port, as rxe's */
    r->gid_type = IBV_GID_TYPE_ROCE_V2;
}

/* good_record from an InfiniBand port: LID 7, subnet prefix fe80::, GID type IB. */
static void good_record_ib(rdmax_conn_record *r)
{
    good_record(r);
    memset(r->gid, 0, 16);
    r->gid[0] = 0xfe;
    r->gid[1] = 0x80;
    r->gid[15] = 0x21;
    r->subnet_prefix = 0xfe80000000000000ull;
    r->lid = 7;
    r->link_layer = IBV_LINK_LAYER_INFINIBAND;
    r->gid_type = IBV_GID_TYPE_IB;
}

/* good_record with three regions: the first in the head, two packed after it. */
static void good_record3(rdmax_conn_record *r)
{
    good_record(r);
    r->n_regions = 3;
    r->regions[1].addr = 0x7f0000100000ull;
    r->regions[1].len = 1u << 20;
    r->regions[1].rkey = 0x1234;
    r->regions[2].addr = 0x7f0000900000ull;
    r->regions[2].len = 8;
    r->regions[2].rkey = 0x5678;
}

/* A TCP listener on the loopback address of the given family; returns fd and port. */
static int tcp_listener(int family, uint16_t *port)
{
    int fd = socket(family, SOCK_STREAM, 0);
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t sl;
    if (family == AF_INET) {
        struct sockaddr_in *s = (struct sockaddr_in *)&ss;
        s->sin_family = AF_INET;
        s->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sl = sizeof *s;
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
        s->sin6_family = AF_INET6;
        s->sin6_addr = in6addr_loopback;
        sl = sizeof *s;
    }
    if (fd < 0 || bind(fd, (struct sockaddr *)&ss, sl) || listen(fd, 4))
        return -1;
    sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    *port = family == AF_INET ? ntohs(((struct sockaddr_in *)&ss)->sin_port)
                              : ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    return fd;
}

static int tcp_connect(int family, uint16_t port)
{
    int fd = socket(family, SOCK_STREAM, 0);
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t sl;
    if (family == AF_INET) {
        struct sockaddr_in *s = (struct sockaddr_in *)&ss;
        s->sin_family = AF_INET;
        s->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        s->sin_port = htons(port);
        sl = sizeof *s;
    } else {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
        s->sin6_family = AF_INET6;
        s->sin6_addr = in6addr_loopback;
        s->sin6_port = htons(port);
        sl = sizeof *s;
    }
    if (fd < 0 || connect(fd, (struct sockaddr *)&ss, sl))
        return -1;
    return fd;
}

/* A crafted peer: a child process that connects, sends `n` bytes, then either closes or stays silent. */
static pid_t crafted_peer(int family, uint16_t port, const uint8_t *bytes, size_t n, int linger_ms)
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = tcp_connect(family, port);
        if (fd < 0)
            _exit(1);
        if (n && write(fd, bytes, n) != (ssize_t)n)
            _exit(1);
        usleep((useconds_t)linger_ms * 1000);
        close(fd);
        _exit(0);
    }
    return pid;
}

static rdmax_status exchange_with(int family, const uint8_t *bytes, size_t n, int linger_ms, int timeout_ms,
                                  rdmax_conn_record *got, char *why, size_t why_len)
{
    uint16_t port;
    int lfd = tcp_listener(family, &port);
    if (lfd < 0)
        return RDMAX_ERR_IO;
    pid_t pid = crafted_peer(family, port, bytes, n, linger_ms);
    int fd = accept(lfd, NULL, NULL);
    rdmax_conn_record me;
    good_record(&me);
    rdmax_status st = rdmax_oob_exchange(fd, &me, got, timeout_ms, why, why_len);
    close(fd);
    close(lfd);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    return st;
}

struct field_case {
    const char *name;
    size_t off, width;
    uint64_t value;
    rdmax_status want;
};

static void put_be(uint8_t *p, size_t w, uint64_t v)
{
    for (size_t i = 0; i < w; i++)
        p[i] = (uint8_t)(v >> (8 * (w - 1 - i)));
}

static void host_tests(int family)
{
    const char *fam = family == AF_INET ? "ipv4" : "ipv6";
    uint8_t rec[RDMAX_CONN_RECORD_SIZE];
    rdmax_conn_record good, got;
    char why[256];
    good_record(&good);
    size_t reclen = rdmax_conn_record_encode(&good, rec);

    tl_begin("oob/%s/good record round-trips", fam);
    CHECK(reclen == RDMAX_CONN_RECORD_HEAD, "one region: %zu bytes", reclen);
    rdmax_status st = exchange_with(family, rec, reclen, 500, 2000, &got, why, sizeof why);
    CHECK_ST(st, RDMAX_OK);
    CHECK(st != RDMAX_OK || !memcmp(&got, &good, sizeof got), "decoded record differs from the one sent");
    tl_end();

    {
        uint8_t rec3[RDMAX_CONN_RECORD_SIZE];
        rdmax_conn_record good3;
        good_record3(&good3);
        size_t len3 = rdmax_conn_record_encode(&good3, rec3);
        tl_begin("oob/%s/record with three regions round-trips", fam);
        CHECK(len3 == RDMAX_CONN_RECORD_HEAD + 2 * RDMAX_CONN_RECORD_REGION, "three regions: %zu bytes", len3);
        st = exchange_with(family, rec3, len3, 500, 2000, &got, why, sizeof why);
        CHECK_ST(st, RDMAX_OK);
        CHECK(st != RDMAX_OK || !memcmp(&got, &good3, sizeof got), "decoded record differs from the one sent");
        tl_end();
        tl_begin("wire/%s/most regions round-trip, more are not written", fam);
        rdmax_conn_record many;
        good_record(&many);
        many.n_regions = RDMAX_MAX_REGIONS + 3;
        for (uint32_t i = 0; i < RDMAX_MAX_REGIONS; i++) {
            many.regions[i].addr = 0x10000ull * (i + 1);
            many.regions[i].len = 4096;
            many.regions[i].rkey = i + 7;
        }
        uint8_t recm[RDMAX_CONN_RECORD_SIZE];
        size_t lenm = rdmax_conn_record_encode(&many, recm);
        CHECK(lenm == RDMAX_CONN_RECORD_SIZE, "%zu bytes", lenm);
        many.n_regions = RDMAX_MAX_REGIONS;
        CHECK_ST(rdmax_conn_record_decode(recm, lenm, &got, NULL, 0), RDMAX_OK);
        CHECK(!memcmp(&got, &many, sizeof got), "decoded record differs");
        tl_end();
        /* each packed region wrong in turn */
        static const struct field_case rcases[] = {
            {"region 1 length 0", RDMAX_CONN_RECORD_HEAD + 8, 8, 0, RDMAX_ERR_OOB_BUFFER},
            {"region 2 wraps", RDMAX_CONN_RECORD_HEAD + RDMAX_CONN_RECORD_REGION + 8, 8, ~0ull, RDMAX_ERR_OOB_BUFFER},
            {"regions after an empty region 0", 56, 8, 0, RDMAX_ERR_OOB_BUFFER},
            {"length cuts a region", 6, 2, RDMAX_CONN_RECORD_HEAD + 30, RDMAX_ERR_OOB_LENGTH},
        };
        for (size_t i = 0; i < sizeof rcases / sizeof rcases[0]; i++) {
            const struct field_case *c = &rcases[i];
            uint8_t bad[RDMAX_CONN_RECORD_SIZE];
            memcpy(bad, rec3, len3);
            put_be(bad + c->off, c->width, c->value);
            if (!strcmp(c->name, "regions after an empty region 0")) {
                memset(bad + 48, 0, 8);
                memset(bad + 24, 0, 4);
            }
            tl_begin("wire/%s/%s", fam, c->name);
            why[0] = 0;
            CHECK_ST(rdmax_conn_record_decode(bad, len3, &got, why, sizeof why), c->want);
            CHECK(why[0] != 0, "no explanation given");
            tl_end();
            tl_begin("oob/%s/%s", fam, c->name);
            st = exchange_with(family, bad, len3, 500, 2000, &got, why, sizeof why);
            CHECK_ST(st, c->want);
            tl_end();
        }
    }

    static const struct field_case cases[] = {
        {"magic", 0, 4, 0x12345678, RDMAX_ERR_OOB_MAGIC},
        {"version older", 4, 2, RDMAX_CONN_RECORD_VERSION - 1, RDMAX_ERR_OOB_VERSION},
        {"version newer", 4, 2, RDMAX_CONN_RECORD_VERSION + 1, RDMAX_ERR_OOB_VERSION},
        {"length too small", 6, 2, RDMAX_CONN_RECORD_HEAD - 1, RDMAX_ERR_OOB_LENGTH},
        {"length not whole regions", 6, 2, RDMAX_CONN_RECORD_HEAD + 1, RDMAX_ERR_OOB_LENGTH},
        {"length past the largest record", 6, 2, RDMAX_CONN_RECORD_SIZE + RDMAX_CONN_RECORD_REGION, RDMAX_ERR_OOB_LONG},
        {"transport", 8, 1, 3, RDMAX_ERR_OOB_TRANSPORT},
        {"mtu 0", 9, 1, 0, RDMAX_ERR_OOB_MTU},
        {"mtu 6", 9, 1, 6, RDMAX_ERR_OOB_MTU},
        {"credits 0", 10, 2, 0, RDMAX_ERR_OOB_CREDITS},
        {"credits 1", 10, 2, 1, RDMAX_ERR_OOB_CREDITS},
        {"qpn 0", 12, 4, 0, RDMAX_ERR_OOB_QPN},
        {"qpn 25 bits", 12, 4, 0x1000000, RDMAX_ERR_OOB_QPN},
        {"psn 25 bits", 16, 4, 0x1000000, RDMAX_ERR_OOB_PSN},
        {"recv_size 0", 28, 4, 0, RDMAX_ERR_OOB_RECV_SIZE},
        {"recv_size 2^31", 28, 4, 0x80000000u, RDMAX_ERR_OOB_RECV_SIZE},
        {"gid zero", 32, 8, 0, RDMAX_ERR_OOB_GID},  /* with the next 8 bytes zeroed below */
        {"buffer wraps", 56, 8, ~0ull, RDMAX_ERR_OOB_BUFFER},
        {"buffer len 0 with address", 56, 8, 0, RDMAX_ERR_OOB_BUFFER},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct field_case *c = &cases[i];
        uint8_t bad[RDMAX_CONN_RECORD_SIZE];
        memcpy(bad, rec, reclen);
        put_be(bad + c->off, c->width, c->value);
        if (!strcmp(c->name, "gid zero"))
            memset(bad + 32, 0, 16);
        tl_begin("oob/%s/%s", fam, c->name);
        why[0] = 0;
        st = exchange_with(family, bad, reclen, 500, 2000, &got, why, sizeof why);
        CHECK_ST(st, c->want);
        CHECK(why[0] != 0, "no explanation given");
        tl_end();
        /* the same bytes through the pure decoder */
        tl_begin("wire/%s/%s", fam, c->name);
        CHECK_ST(rdmax_conn_record_decode(bad, reclen, &got, NULL, 0), c->want);
        tl_end();
    }

    /* the port's address (version 4): InfiniBand needs a unicast LID and GID type IB, Ethernet LID 0 and
       RoCE v1 or v2 */
    {
        rdmax_conn_record ib;
        good_record_ib(&ib);
        uint8_t recib[RDMAX_CONN_RECORD_SIZE];
        size_t lenib = rdmax_conn_record_encode(&ib, recib);
        tl_begin("wire/%s/InfiniBand record round-trips", fam);
        CHECK_ST(rdmax_conn_record_decode(recib, lenib, &got, NULL, 0), RDMAX_OK);
        CHECK(!memcmp(&got, &ib, sizeof got), "decoded record differs");
        CHECK(recib[72] == 0 && recib[73] == 7 && recib[74] == 1 && recib[75] == 0 && recib[64] == 0xfe &&
              recib[65] == 0x80, "LID, link layer, GID type or subnet prefix not where the manual says");
        tl_end();
        static const struct { const char *name; int ib; size_t off, width; uint64_t value; } lcases[] = {
            {"InfiniBand LID 0", 1, 72, 2, 0},
            {"InfiniBand multicast LID", 1, 72, 2, 0xc000},
            {"InfiniBand with a RoCE v2 GID", 1, 75, 1, IBV_GID_TYPE_ROCE_V2},
            {"Ethernet with a LID", 0, 72, 2, 5},
            {"Ethernet with an IB GID", 0, 75, 1, IBV_GID_TYPE_IB},
            {"link layer 0", 0, 74, 1, 0},
            {"link layer 3", 0, 74, 1, 3},
        };
        for (size_t i = 0; i < sizeof lcases / sizeof lcases[0]; i++) {
            uint8_t bad[RDMAX_CONN_RECORD_SIZE];
            memcpy(bad, lcases[i].ib ? recib : rec, reclen);
            put_be(bad + lcases[i].off, lcases[i].width, lcases[i].value);
            tl_begin("wire/%s/%s", fam, lcases[i].name);
            why[0] = 0;
            CHECK_ST(rdmax_conn_record_decode(bad, reclen, &got, why, sizeof why), RDMAX_ERR_OOB_LINK);
            CHECK(why[0] != 0, "no explanation given");
            tl_end();
        }
    }

    tl_begin("oob/%s/short record then close", fam);
    st = exchange_with(family, rec, 20, 0, 2000, &got, why, sizeof why);
    CHECK_ST(st, RDMAX_ERR_OOB_SHORT);
    tl_end();

    tl_begin("oob/%s/4 bytes then close", fam);
    st = exchange_with(family, rec, 4, 0, 2000, &got, why, sizeof why);
    CHECK_ST(st, RDMAX_ERR_OOB_SHORT);
    tl_end();

    tl_begin("oob/%s/nothing then close", fam);
    st = exchange_with(family, rec, 0, 0, 2000, &got, why, sizeof why);
    CHECK_ST(st, RDMAX_ERR_OOB_SHORT);
    tl_end();

    /* A newer peer with a longer record: the version is checked before the length, and nothing beyond
       our record's size is read into our buffer. */
    {
        uint8_t big[4096];
        memset(big, 0xab, sizeof big);
        memcpy(big, rec, reclen);
        put_be(big + 4, 2, RDMAX_CONN_RECORD_VERSION + 1);
        put_be(big + 6, 2, 4096 & 0xffff);
        tl_begin("oob/%s/newer version, 4 KiB record", fam);
        st = exchange_with(family, big, sizeof big, 500, 2000, &got, why, sizeof why);
        CHECK_ST(st, RDMAX_ERR_OOB_VERSION);
        tl_end();
        put_be(big + 4, 2, RDMAX_CONN_RECORD_VERSION);
        tl_begin("oob/%s/same version, 4 KiB record", fam);
        st = exchange_with(family, big, sizeof big, 500, 2000, &got, why, sizeof why);
        CHECK_ST(st, RDMAX_ERR_OOB_LONG);
        tl_end();
        tl_begin("oob/%s/garbage bytes", fam);
        memset(big, 0x41, sizeof big);
        st = exchange_with(family, big, 100, 500, 2000, &got, why, sizeof why);
        CHECK_ST(st, RDMAX_ERR_OOB_MAGIC);
        tl_end();
    }

    tl_begin("oob/%s/silent peer times out", fam);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    st = exchange_with(family, rec, 0, 3000, 300, &got, why, sizeof why);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    CHECK_ST(st, RDMAX_ERR_TIMEOUT);
    /* not before the deadline; how long after it depends on the machine's load (a hang is the run's) */
    CHECK(ms >= 280, "timed out after %.0f ms, before the 300 ms deadline", ms);
    CHECK(strstr(why, "timed out") != NULL, "explanation '%s' does not say it timed out", why);
    tl_end();

    tl_begin("oob/%s/half a record then silence", fam);
    st = exchange_with(family, rec, 30, 3000, 300, &got, why, sizeof why);
    CHECK_ST(st, RDMAX_ERR_TIMEOUT);
    tl_end();
}

/* rdma_cm's compact record (RDMAX_SETUP_CM): each fault gives the status, and the sentence, that the same
   fault gives in the TCP record; the fields rdma_cm carries (QPN, PSN, MTU, GID) are checked as well. */
struct cm_case {
    const char *name;
    size_t tcp_off, cm_off, width;  /* cm_off SIZE_MAX: the field is rdma_cm's (set in the cm struct) */
    uint64_t value;
    rdmax_status want;
};

static void cm_record_tests(void)
{
    rdmax_conn_record good, got, cm;
    good_record(&good);
    uint8_t tcp[RDMAX_CONN_RECORD_SIZE], rec[56];  /* an RC REQ's private data is 56 bytes, zero padded */
    char why[256], why_tcp[256];
    size_t tcp_len = rdmax_conn_record_encode(&good, tcp);
    memset(rec, 0, sizeof rec);
    rdmax_cm_record_encode(&good, rec);

    tl_begin("cm-record/good record round-trips, padded to 56 bytes as rdma_cm delivers it");
    CHECK_ST(rdmax_cm_record_decode(rec, sizeof rec, &good, &got, why, sizeof why), RDMAX_OK);
    CHECK(!memcmp(&got, &good, sizeof got), "decoded record differs from the one sent");
    CHECK(RDMAX_CM_RECORD_SIZE <= 56, "the compact record (%d bytes) does not fit an RC REQ's private data",
          RDMAX_CM_RECORD_SIZE);
    tl_end();

    static const struct cm_case cases[] = {
        {"magic", 0, 0, 4, 0x12345678, RDMAX_ERR_OOB_MAGIC},
        {"version", 4, 4, 2, RDMAX_CONN_RECORD_VERSION + 1, RDMAX_ERR_OOB_VERSION},
        {"transport", 8, 8, 1, 3, RDMAX_ERR_OOB_TRANSPORT},
        {"mtu 0", 9, SIZE_MAX, 1, 0, RDMAX_ERR_OOB_MTU},
        {"mtu 6", 9, SIZE_MAX, 1, 6, RDMAX_ERR_OOB_MTU},
        {"credits 0", 10, 10, 2, 0, RDMAX_ERR_OOB_CREDITS},
        {"credits 1", 10, 10, 2, 1, RDMAX_ERR_OOB_CREDITS},
        {"qpn 0", 12, SIZE_MAX, 4, 0, RDMAX_ERR_OOB_QPN},
        {"qpn 25 bits", 12, SIZE_MAX, 4, 0x1000000, RDMAX_ERR_OOB_QPN},
        {"psn 25 bits", 16, SIZE_MAX, 4, 0x1000000, RDMAX_ERR_OOB_PSN},
        {"recv_size 0", 28, 16, 4, 0, RDMAX_ERR_OOB_RECV_SIZE},
        {"recv_size 2^31", 28, 16, 4, 0x80000000u, RDMAX_ERR_OOB_RECV_SIZE},
        {"gid zero", 32, SIZE_MAX, 16, 0, RDMAX_ERR_OOB_GID},
        {"buffer wraps", 56, 28, 8, ~0ull, RDMAX_ERR_OOB_BUFFER},
        {"buffer len 0 with address", 56, 28, 8, 0, RDMAX_ERR_OOB_BUFFER},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct cm_case *c = &cases[i];
        uint8_t bt[RDMAX_CONN_RECORD_SIZE], bc[56];
        memcpy(bt, tcp, sizeof bt);
        memcpy(bc, rec, sizeof bc);
        cm = good;
        if (c->width == 16)
            memset(bt + c->tcp_off, 0, 16);
        else
            put_be(bt + c->tcp_off, c->width, c->value);
        if (c->cm_off != SIZE_MAX)
            put_be(bc + c->cm_off, c->width, c->value);
        else if (!strcmp(c->name, "gid zero"))
            memset(cm.gid, 0, 16);
        else if (c->tcp_off == 9)
            cm.mtu = (uint8_t)c->value;
        else if (c->tcp_off == 12)
            cm.qpn = (uint32_t)c->value;
        else
            cm.psn = (uint32_t)c->value;
        tl_begin("cm-record/%s: same status and sentence as the TCP record", c->name);
        why[0] = why_tcp[0] = 0;
        rdmax_status st = rdmax_cm_record_decode(bc, sizeof bc, &cm, &got, why, sizeof why);
        CHECK_ST(st, c->want);
        CHECK_ST(rdmax_conn_record_decode(bt, tcp_len, &got, why_tcp, sizeof why_tcp), c->want);
        CHECK(why[0] && !strcmp(why, why_tcp), "sentence '%s', the TCP record says '%s'", why, why_tcp);
        tl_end();
    }
    static const struct { uint16_t len; rdmax_status want; } lens[] = {
        {RDMAX_CM_RECORD_SIZE - 1, RDMAX_ERR_OOB_LENGTH}, {RDMAX_CM_RECORD_SIZE + 1, RDMAX_ERR_OOB_LONG},
        {RDMAX_CONN_RECORD_SIZE, RDMAX_ERR_OOB_LONG}};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        uint8_t bc[56];
        memcpy(bc, rec, sizeof bc);
        put_be(bc + 6, 2, lens[i].len);
        tl_begin("cm-record/length field %u", lens[i].len);
        CHECK_ST(rdmax_cm_record_decode(bc, sizeof bc, &good, &got, why, sizeof why), lens[i].want);
        CHECK(strstr(why, "length field") != NULL, "sentence '%s' does not name the length field", why);
        tl_end();
    }
    tl_begin("cm-record/short private data (20, 4, 0 bytes, none)");
    CHECK_ST(rdmax_cm_record_decode(rec, 20, &good, &got, why, sizeof why), RDMAX_ERR_OOB_SHORT);
    CHECK_ST(rdmax_cm_record_decode(rec, 4, &good, &got, why, sizeof why), RDMAX_ERR_OOB_SHORT);
    CHECK_ST(rdmax_cm_record_decode(rec, 0, &good, &got, why, sizeof why), RDMAX_ERR_OOB_SHORT);
    CHECK_ST(rdmax_cm_record_decode(NULL, 56, &good, &got, why, sizeof why), RDMAX_ERR_OOB_SHORT);
    tl_end();
    tl_begin("cm-record/zero private data (a REQ without any) is not an rdmax peer");
    memset(rec, 0, sizeof rec);
    CHECK_ST(rdmax_cm_record_decode(rec, sizeof rec, &good, &got, why, sizeof why), RDMAX_ERR_OOB_MAGIC);
    tl_end();
}

/* On a device: a bad client makes rdmax_accept fail with the right status; the listener then connects a
   good client, over IPv4 and IPv6. */
static void device_tests(void)
{
    rdmax_ctx *ctx = NULL;
    rdmax_listener *l = NULL;
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    tl_begin("listener/survives bad clients");
    REQUIRE(rdmax_ctx_create(&cd, &ctx) == RDMAX_OK, "no device: %s", ctx ? rdmax_ctx_query_last_error(ctx) : "");
    REQUIRE(rdmax_listener_create(ctx, NULL, 0, &l) == RDMAX_OK, "listen failed");
    uint16_t port = rdmax_listener_query_port(l);
    uint8_t junk[64];
    memset(junk, 0x5a, sizeof junk);
    pid_t pid = crafted_peer(AF_INET, port, junk, sizeof junk, 1000);
    rdmax_ep *ep = NULL;
    rdmax_status st = rdmax_accept(l, NULL, &ep, 5000);
    CHECK_ST(st, RDMAX_ERR_OOB_MAGIC);
    CHECK(ep == NULL, "an endpoint was returned for a bad client");
    waitpid(pid, NULL, 0);
    uint8_t rec[RDMAX_CONN_RECORD_SIZE];
    rdmax_conn_record good;
    good_record(&good);
    rdmax_conn_record_encode(&good, rec);
    pid = crafted_peer(AF_INET6, port, rec, 10, 0);  /* a valid head, then the client leaves */
    st = rdmax_accept(l, NULL, &ep, 5000);
    CHECK_ST(st, RDMAX_ERR_OOB_SHORT);
    waitpid(pid, NULL, 0);
    for (int fam = 0; fam < 2; fam++) {
        const char *host = fam ? "::1" : "127.0.0.1";
        pid = fork();
        if (pid == 0) {
            rdmax_ctx *c2;
            rdmax_ep *e2;
            if (rdmax_ctx_create(&cd, &c2) != RDMAX_OK)
                _exit(2);
            if (rdmax_connect(c2, host, port, NULL, &e2, 5000) != RDMAX_OK)
                _exit(3);
            char msg[16] = "hello";
            if (rdmax_send(e2, msg, sizeof msg, NULL, NULL) != RDMAX_OK || rdmax_ep_flush(e2, 5000) != RDMAX_OK)
                _exit(4);
            rdmax_ctx_destroy(c2);
            _exit(0);
        }
        st = rdmax_accept(l, NULL, &ep, 5000);
        CHECK_ST(st, RDMAX_OK);
        int status = -1;
        waitpid(pid, &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "good client over %s failed (exit %d)", host,
              WEXITSTATUS(status));
        rdmax_counters c;
        for (int i = 0; i < 100000 && ep; i++) {
            rdmax_progress(ctx);
            rdmax_ctx_query_counters(ctx, &c);
            if (c.recv_msgs > (unsigned)fam)
                break;
        }
        rdmax_ctx_query_counters(ctx, &c);
        CHECK(c.recv_msgs == (unsigned)fam + 1, "message from the good client over %s not received", host);
        rdmax_ep_destroy(ep);
        ep = NULL;
    }
    rdmax_ep *dummy;
    tl_end();
    tl_begin("listener/accept times out with no client");
    st = rdmax_accept(l, NULL, &dummy, 200);
    CHECK_ST(st, RDMAX_ERR_TIMEOUT);
    tl_end();
    tl_begin("connect/unreachable peer is a clear error");
    st = rdmax_connect(ctx, "127.0.0.1", 1, NULL, &dummy, 2000);
    CHECK_ST(st, RDMAX_ERR_CONNECT);
    CHECK(rdmax_ctx_query_last_error_item(ctx) == RDMAX_LOG_ITEM_CONNECT, "last error item %s: '%s'",
          rdmax_log_item_str(rdmax_ctx_query_last_error_item(ctx)), rdmax_ctx_query_last_error(ctx));
    tl_end();
    tl_begin("connect/silent peer times out");
    {
        uint16_t p2;
        int lfd = tcp_listener(AF_INET, &p2);
        st = rdmax_connect(ctx, "127.0.0.1", p2, NULL, &dummy, 500);
        CHECK_ST(st, RDMAX_ERR_TIMEOUT);
        close(lfd);
    }
    tl_end();
    tl_begin("connect/the endpoint is made before the connection");
    {
        /* so that our record follows the connection at once (a listener drops a client that sends nothing
           for handshake_first_ms): an endpoint that cannot be made opens no connection */
        uint16_t p2;
        int lfd = tcp_listener(AF_INET, &p2);
        rdmax_ep_desc bad;
        memset(&bad, 0, sizeof bad);
        bad.recv_pool = 7;
        st = rdmax_connect(ctx, "127.0.0.1", p2, &bad, &dummy, 500);
        CHECK_ST(st, RDMAX_ERR_INVALID_PARAM);
        struct pollfd p = {lfd, POLLIN, 0};
        CHECK(poll(&p, 1, 200) == 0, "a connection was opened for an endpoint that could not be made");
        close(lfd);
    }
    tl_end();
out:
    rdmax_listener_destroy(l);
    rdmax_ctx_destroy(ctx);
    if (tl_case_failed)
        tl_end();
}

static int g_loud_logs;  /* messages at warn or error level */
static void count_loud(rdmax_log_level lvl, rdmax_log_item item, const char *msg, void *user)
{
    (void)item;
    (void)msg, (void)user;
    g_loud_logs += lvl <= RDMAX_LOG_WARN;
}

/* A real client in a child process: connect, send "hello", flush. Exit 0 on success. */
static pid_t real_client(const char *host, uint16_t port, int timeout_ms)
{
    pid_t pid = fork();
    if (pid == 0) {
        rdmax_ctx_desc cd;
        memset(&cd, 0, sizeof cd);
        rdmax_ctx *c2;
        if (rdmax_ctx_create(&cd, &c2) != RDMAX_OK)
            _exit(2);
        tl_hello_client(c2, host, port, timeout_ms);
    }
    return pid;
}

static int child_ok(pid_t pid)
{
    int status = -1;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Handshakes side by side: 50 silent clients held open do not keep real ones out; an accept used as a
   poll (timeout 0) serves a client and logs nothing; a stalled handshake ends with its own status. */
static void listener_tests(void)
{
    rdmax_ctx *ctx = NULL;
    rdmax_listener *l = NULL;
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.logger.func = count_loud;
    cd.handshake_ms = 600000;  /* the silent clients must not be timed out: the test is about concurrency */
    int silent[50];
    for (int i = 0; i < 50; i++)
        silent[i] = -1;
    enum { REAL = 3 };
    pid_t pids[REAL];
    rdmax_ep *eps[REAL] = {0};
    tl_begin("listener/50 silent clients held open do not stall %d real ones", REAL);
    REQUIRE(rdmax_ctx_create(&cd, &ctx) == RDMAX_OK, "no device");
    REQUIRE(rdmax_listener_create(ctx, NULL, 0, &l) == RDMAX_OK, "listen failed");
    uint16_t port = rdmax_listener_query_port(l);
    for (int i = 0; i < 50; i++)
        REQUIRE((silent[i] = tcp_connect(i & 1 ? AF_INET6 : AF_INET, port)) >= 0, "silent client %d", i);
    rdmax_ep *ep = NULL;
    CHECK_ST(rdmax_accept(l, NULL, &ep, 300), RDMAX_ERR_TIMEOUT);  /* all 50 are in handshake now */
    for (int i = 0; i < REAL; i++)
        pids[i] = real_client("127.0.0.1", port, 60000);
    int ok = 0;
    for (int i = 0; i < REAL; i++) {
        rdmax_status st = rdmax_accept(l, NULL, &eps[i], 60000);
        CHECK_ST(st, RDMAX_OK);
        ok += st == RDMAX_OK;
    }
    for (int i = 0; i < REAL; i++)
        CHECK(child_ok(pids[i]), "real client %d failed", i);
    rdmax_counters c;
    for (int i = 0; i < 1000000; i++) {
        rdmax_progress(ctx);
        rdmax_ctx_query_counters(ctx, &c);
        if (c.recv_msgs >= (unsigned)ok)
            break;
    }
    CHECK(c.recv_msgs == (unsigned)REAL, "%llu of %d messages received", (unsigned long long)c.recv_msgs, REAL);
    tl_end();

    tl_begin("listener/accept with timeout 0 as a poll serves a client and logs nothing when empty");
    {
        int loud = g_loud_logs, empties = 0;
        pid_t pid = real_client("::1", port, 60000);
        rdmax_status st = RDMAX_ERR_TIMEOUT;
        for (int i = 0; i < 100000 && st == RDMAX_ERR_TIMEOUT; i++) {
            struct pollfd p = {rdmax_listener_query_fd(l), POLLIN, 0};
            poll(&p, 1, 100);
            st = rdmax_accept(l, NULL, &ep, 0);
            empties += st == RDMAX_ERR_TIMEOUT;
        }
        CHECK_ST(st, RDMAX_OK);
        CHECK(child_ok(pid), "client failed");
        CHECK(g_loud_logs == loud, "%d warnings or errors logged by %d empty polls", g_loud_logs - loud, empties);
        rdmax_ep_destroy(ep);
        ep = NULL;
    }
    tl_end();
out:
    for (int i = 0; i < 50; i++)
        if (silent[i] >= 0)
            close(silent[i]);
    for (int i = 0; i < REAL; i++)
        rdmax_ep_destroy(eps[i]);
    rdmax_listener_destroy(l);
    rdmax_ctx_destroy(ctx);
    if (tl_case_failed)
        tl_end();

    ctx = NULL;
    l = NULL;
    tl_begin("listener/a stalled handshake ends with RDMAX_ERR_OOB_TIMEOUT, then a real client connects");
    /* The limit applies to the real client's handshake too: 5 s, not less, so a loaded machine does not
       fail it (200 ms once did); the stalled one costs those 5 s. */
    cd.handshake_ms = 5000;
    cd.logger.func = NULL;
    cd.log_level = RDMAX_LOG_ERROR;
    cd.log_level_set = true;
    REQUIRE(rdmax_ctx_create(&cd, &ctx) == RDMAX_OK, "no device");
    REQUIRE(rdmax_listener_create(ctx, "127.0.0.1", 0, &l) == RDMAX_OK, "listen failed");
    {
        int fd = tcp_connect(AF_INET, rdmax_listener_query_port(l));
        CHECK_ST(rdmax_accept(l, NULL, &ep, 600000), RDMAX_ERR_OOB_TIMEOUT);
        close(fd);
        pid_t pid = real_client("127.0.0.1", rdmax_listener_query_port(l), 60000);
        CHECK_ST(rdmax_accept(l, NULL, &ep, 60000), RDMAX_OK);
        CHECK(child_ok(pid), "client failed");
        rdmax_ep_destroy(ep);
        ep = NULL;
    }
    tl_end();

    tl_begin("listener/a context destroyed with its listener open, a handshake in flight, closes it once");
    {
        /* In a child, so a double destroy (abort, or a signal) is seen as its exit status. */
        pid_t pid = fork();
        if (pid == 0) {
            rdmax_ctx *c2 = NULL;
            rdmax_listener *l2 = NULL;
            rdmax_ep *cli = NULL, *got = NULL;
            rdmax_ctx_desc d2;
            memset(&d2, 0, sizeof d2);
            d2.handshake_ms = 600000;
            if (rdmax_ctx_create(&d2, &c2) != RDMAX_OK || rdmax_listener_create(c2, "127.0.0.1", 0, &l2) != RDMAX_OK ||
                rdmax_ep_create(c2, NULL, &cli) != RDMAX_OK)
                _exit(2);
            uint16_t p2 = rdmax_listener_query_port(l2);
            /* a client that sends a good record and never confirms: the listener's endpoint exists */
            uint8_t rec[RDMAX_CONN_RECORD_SIZE];
            rdmax_conn_record me;
            rdmax_ep_query_record(cli, &me);
            size_t len = rdmax_conn_record_encode(&me, rec);
            int fd = tcp_connect(AF_INET, p2);
            if (fd < 0 || write(fd, rec, len) != (ssize_t)len)
                _exit(3);
            uint8_t theirs[RDMAX_CONN_RECORD_SIZE + 1];
            size_t n = 0, want = RDMAX_CONN_RECORD_SIZE;  /* the listener's record (its length field) */
            for (int tries = 0; n < want; tries++) {
                if (tries == 6000)  /* 60 s */
                    _exit(5);  /* the listener's record: its endpoint was made */
                if (rdmax_accept(l2, NULL, &got, 10) == RDMAX_OK)
                    _exit(4);
                ssize_t k = recv(fd, theirs + n, sizeof theirs - n, MSG_DONTWAIT);
                if (k == 0 || (k < 0 && errno != EAGAIN))
                    _exit(5);
                n += k > 0 ? (size_t)k : 0;
                if (n >= 8)
                    want = (size_t)(theirs[6] << 8 | theirs[7]);
            }
            rdmax_ctx_destroy(c2);  /* listener still open */
            int again = tcp_connect(AF_INET, p2);
            _exit(again >= 0 ? 6 : 0);  /* its socket is closed: refused */
        }
        int status = -1;
        waitpid(pid, &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %s %d (2-5: setup, 6: listener still open)",
              WIFSIGNALED(status) ? "died of signal" : "exited with", WIFSIGNALED(status) ? WTERMSIG(status)
                                                                                         : WEXITSTATUS(status));
    }
    tl_end();

    tl_begin("connect/retries a refused peer until it listens");
    {
        /* a port that nobody listens on yet */
        uint16_t p2;
        int tmp = tcp_listener(AF_INET, &p2);
        close(tmp);
        pid_t pid = real_client("127.0.0.1", p2, 60000);
        struct timespec ts = {0, 300 * 1000000L};  /* the client's first tries are refused */
        nanosleep(&ts, NULL);
        rdmax_listener *l2 = NULL;
        REQUIRE(rdmax_listener_create(ctx, "127.0.0.1", p2, &l2) == RDMAX_OK, "listen on %u", p2);
        CHECK_ST(rdmax_accept(l2, NULL, &ep, 60000), RDMAX_OK);
        CHECK(child_ok(pid), "client gave up instead of retrying");
        rdmax_ep_destroy(ep);
        ep = NULL;
        rdmax_listener_destroy(l2);
    }
    tl_end();
    rdmax_listener_destroy(l);
    rdmax_ctx_destroy(ctx);
    return;
}

/* Two clients whose records the listener reads in one rdmax_accept call (desc A), then confirm one at a
   time to calls with desc B and C: each endpoint returned carries the returning call's user, callbacks and
   keepalive (the twohost test under netem loss once found two endpoints sharing one user: a client's
   ready byte was retransmitted while the next client's record was read). The clients are hand-made:
   their records are written and their ready bytes held back, so the interleaving is forced. */
static int g_user[3];
static void accept_desc_tests(void)
{
    rdmax_ctx *ctx = NULL;
    rdmax_listener *l = NULL;
    rdmax_ep *cli[2] = {0}, *got[2] = {0}, *ep = NULL;
    int fd[2] = {-1, -1};
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.handshake_ms = 600000;
    tl_begin("listener/the endpoint accept returns has that call's user, callbacks and keepalive, also when an "
             "earlier call with another desc read its client's record");
    REQUIRE(rdmax_ctx_create(&cd, &ctx) == RDMAX_OK, "no device");
    REQUIRE(rdmax_listener_create(ctx, "127.0.0.1", 0, &l) == RDMAX_OK, "listen failed");
    rdmax_ep_desc d[3];
    memset(d, 0, sizeof d);
    for (int i = 0; i < 3; i++)
        d[i].user = &g_user[i];
    d[0].keepalive_ms = 1111;
    d[1].keepalive_ms = RDMAX_OFF;  /* the others: the default */
    for (int c = 0; c < 2; c++) {
        REQUIRE(rdmax_ep_create(ctx, NULL, &cli[c]) == RDMAX_OK, "client endpoint %d", c);
        uint8_t rec[RDMAX_CONN_RECORD_SIZE];
        rdmax_conn_record me;
        rdmax_ep_query_record(cli[c], &me);
        size_t len = rdmax_conn_record_encode(&me, rec);
        REQUIRE((fd[c] = tcp_connect(AF_INET, rdmax_listener_query_port(l))) >= 0, "client %d connect", c);
        REQUIRE(write(fd[c], rec, len) == (ssize_t)len, "client %d record", c);
    }
    /* desc A: both records read, both endpoints made, nobody confirmed yet */
    size_t n[2] = {0, 0}, want[2] = {RDMAX_CONN_RECORD_SIZE, RDMAX_CONN_RECORD_SIZE};
    uint8_t theirs[2][RDMAX_CONN_RECORD_SIZE + 1];
    for (int tries = 0; n[0] < want[0] || n[1] < want[1]; tries++) {
        REQUIRE(tries < 6000, "the listener's records did not come (%zu, %zu bytes)", n[0], n[1]);
        CHECK_ST(rdmax_accept(l, &d[0], &ep, 10), RDMAX_ERR_TIMEOUT);
        for (int c = 0; c < 2; c++) {
            ssize_t k = recv(fd[c], theirs[c] + n[c], sizeof theirs[c] - n[c], MSG_DONTWAIT);
            REQUIRE(k > 0 || (k < 0 && errno == EAGAIN), "client %d: the listener closed", c);
            n[c] += k > 0 ? (size_t)k : 0;
            if (n[c] >= 8)
                want[c] = (size_t)(theirs[c][6] << 8 | theirs[c][7]);
        }
    }
    CHECK(n[0] == want[0] && n[1] == want[1], "the listener sent more than its records (%zu, %zu bytes): a ready "
          "byte before the call that returns the endpoint", n[0], n[1]);
    /* client 0 confirms, desc B returns it; then client 1, desc C */
    for (int c = 0; c < 2; c++) {
        REQUIRE(write(fd[c], "R", 1) == 1, "client %d ready byte", c);
        CHECK_ST(rdmax_accept(l, &d[1 + c], &got[c], 60000), RDMAX_OK);
        REQUIRE(got[c], "no endpoint");
        char rb = 0;
        CHECK(recv(fd[c], &rb, 1, 0) == 1 && rb == 'R', "client %d: no ready byte after the returning call", c);
        rdmax_ep_desc a = rdmax_ep_query_desc(got[c]);
        CHECK(a.user == &g_user[1 + c], "client %d: user of desc %c, the returning call's is %c", c,
              a.user == &g_user[0] ? 'A' : a.user == &g_user[1] ? 'B' : 'C', 'B' + c);
        uint32_t ka = c == 0 ? RDMAX_OFF : 4000;
        CHECK(a.keepalive_ms == ka, "client %d: keepalive %u ms, the returning call's is %u", c, a.keepalive_ms, ka);
    }
out:
    for (int c = 0; c < 2; c++) {
        if (fd[c] >= 0)
            close(fd[c]);
        rdmax_ep_destroy(cli[c]);
        rdmax_ep_destroy(got[c]);
    }
    rdmax_listener_destroy(l);
    rdmax_ctx_destroy(ctx);
    tl_end();
}

/* A client's messages reach only the callbacks and user of the accept call that returns its endpoint.
   The bad case forced: a hand-made client reads the listener's record (taken by a call with desc A),
   connects its QP and sends "early" before its ready byte, acknowledged by the server's device; the
   server progresses; then a call with desc B returns the endpoint and the client sends "late". Before,
   the listener's ready byte came with its record and "early" went to A's callback with A's user (in a
   service, one client's request under another's endpoint); now nothing goes to A: "early" is dropped and
   counted (a real client cannot send before the ready byte the returning call sends), "late" reaches B. */
struct early_rx {
    int a, b;
    char last[8];
};
static struct early_rx g_early;
static void early_recv(rdmax_ep *ep, void *data, size_t len, void *user)
{
    (void)ep;
    if (user == &g_early.a)
        g_early.a++;
    else if (user == &g_early.b)
        g_early.b++;
    memcpy(g_early.last, data, len < sizeof g_early.last ? len : sizeof g_early.last - 1);
}

static void early_message_tests(void)
{
    rdmax_ctx *ctx = NULL, *cctx = NULL;
    rdmax_listener *l = NULL;
    rdmax_ep *cli = NULL, *ep = NULL;
    rdmax_mem *m = NULL;
    int fd = -1;
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.handshake_ms = 600000;
    memset(&g_early, 0, sizeof g_early);
    tl_begin("listener/a message sent before the returning accept call never reaches another call's user");
    REQUIRE(rdmax_ctx_create(&cd, &ctx) == RDMAX_OK && rdmax_ctx_create(&cd, &cctx) == RDMAX_OK, "no device");
    REQUIRE(rdmax_listener_create(ctx, "127.0.0.1", 0, &l) == RDMAX_OK, "listen failed");
    REQUIRE(rdmax_mem_alloc(cctx, 64, RDMAX_ACCESS_LOCAL, &m) == RDMAX_OK, "mem_alloc");
    rdmax_ep_desc da, db;
    memset(&da, 0, sizeof da);
    da.recv_cb = early_recv;
    db = da;
    da.user = &g_early.a;
    db.user = &g_early.b;
    REQUIRE(rdmax_ep_create(cctx, NULL, &cli) == RDMAX_OK, "client endpoint");
    uint8_t rec[RDMAX_CONN_RECORD_SIZE + 1];
    rdmax_conn_record me, them;
    rdmax_ep_query_record(cli, &me);
    size_t len = rdmax_conn_record_encode(&me, rec);
    REQUIRE((fd = tcp_connect(AF_INET, rdmax_listener_query_port(l))) >= 0, "connect");
    REQUIRE(write(fd, rec, len) == (ssize_t)len, "record");
    size_t n = 0, want = 8;  /* the head, then what its length field says: never a byte past the record */
    for (int tries = 0; n < want; tries++) {
        REQUIRE(tries < 6000, "the listener's record did not come (%zu bytes)", n);
        CHECK_ST(rdmax_accept(l, &da, &ep, 10), RDMAX_ERR_TIMEOUT);
        ssize_t k = recv(fd, rec + n, want - n, MSG_DONTWAIT);
        REQUIRE(k > 0 || (k < 0 && errno == EAGAIN), "the listener closed");
        n += k > 0 ? (size_t)k : 0;
        if (n >= 8)
            want = (size_t)(rec[6] << 8 | rec[7]);
    }
    char why[160];
    REQUIRE(rdmax_conn_record_decode(rec, n, &them, why, sizeof why) == RDMAX_OK, "the listener's record: %s", why);
    REQUIRE(rdmax_ep_connect_record(cli, &them) == RDMAX_OK, "client connect_info");
    rdmax_counters k0, k1;
    rdmax_ctx_query_counters(ctx, &k0);
    memcpy(m->addr, "early", 6);
    rdmax_comp c;
    memset(&c, 0, sizeof c);
    REQUIRE(rdmax_send(cli, m->addr, 6, m, &c) == RDMAX_INPROGRESS, "early send");
    for (int i = 0; !c.done && i < 100000000; i++)
        rdmax_progress(cctx);
    REQUIRE(c.done && c.status == RDMAX_OK, "the early message was not acknowledged: %s", rdmax_status_str(c.status));
    for (int i = 0; i < 10000; i++)
        rdmax_progress(ctx);
    rdmax_ctx_query_counters(ctx, &k1);
    CHECK(g_early.a == 0, "the early message reached desc A's callback with A's user");
    CHECK(k1.recv_drops == k0.recv_drops + 1, "the early message: recv_drops %llu -> %llu (want one more)",
          (unsigned long long)k0.recv_drops, (unsigned long long)k1.recv_drops);
    REQUIRE(write(fd, "R", 1) == 1, "ready byte");
    CHECK_ST(rdmax_accept(l, &db, &ep, 60000), RDMAX_OK);
    REQUIRE(ep, "no endpoint");
    char rb = 0;
    CHECK(recv(fd, &rb, 1, 0) == 1 && rb == 'R', "no ready byte after the returning call");
    memcpy(m->addr, "late", 5);
    REQUIRE(rdmax_send(cli, m->addr, 5, m, NULL) >= 0, "late send");
    for (int i = 0; g_early.b == 0 && i < 100000000; i++) {
        rdmax_progress(cctx);
        rdmax_progress(ctx);
    }
    CHECK(g_early.b == 1 && g_early.a == 0 && !strcmp(g_early.last, "late"),
          "after the returning call: %d to B, %d to A, last \"%s\"", g_early.b, g_early.a, g_early.last);
out:
    if (fd >= 0)
        close(fd);
    rdmax_ep_destroy(cli);
    rdmax_ep_destroy(ep);
    rdmax_mem_free(m);
    rdmax_listener_destroy(l);
    rdmax_ctx_destroy(cctx);
    rdmax_ctx_destroy(ctx);
    tl_end();
}

/* A listener a flood cannot lock (issue 30, item 3). Deterministic cases first: every slot held by a
   slow client (one byte each, so none is silent), handshake_ms of 10 minutes: a new client takes the
   oldest one's slot and is served (before: no slot until a handshake deadline, so it timed out); every
   slot held by a silent socket: they go after handshake_first_ms. Then the flood as it was reported:
   2,000 hostile sockets in a burst (half silent, a quarter with a truncated record, a quarter closing at
   once) beside 20 real clients, defaults: all 20 served (their connect times reported; 60 s is a hang
   guard), and the listener's fds back to their level after. */
static int64_t tl_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int open_slow(uint16_t port, const char *bytes, size_t n)
{
    int fd = tcp_connect(AF_INET, port);
    if (fd >= 0 && n && write(fd, bytes, n) != (ssize_t)n) {
        close(fd);
        return -1;
    }
    return fd;
}

/* rdmax_accept until an endpoint comes or guard_ms passes; the failures of the others are ignored */
static rdmax_ep *accept_one(rdmax_listener *l, int64_t guard_ms)
{
    rdmax_ep *ep = NULL;
    for (int64_t end = tl_now_ms() + guard_ms; !ep && tl_now_ms() < end;)
        if (rdmax_accept(l, NULL, &ep, 100) != RDMAX_OK)
            ep = NULL;
    return ep;
}

static void flood_tests(void)
{
    enum { SLOTS = 8 };
    for (int silent = 0; silent < 2; silent++) {
        rdmax_ctx *ctx = NULL;
        rdmax_listener *l = NULL;
        rdmax_ep *ep = NULL;
        int slow[SLOTS];
        for (int i = 0; i < SLOTS; i++)
            slow[i] = -1;
        rdmax_ctx_desc cd;
        memset(&cd, 0, sizeof cd);
        cd.handshake_ms = 600000;
        cd.handshake_first_ms = silent ? 300 : 600000;
        cd.handshake_slots = SLOTS;
        cd.log_level = RDMAX_LOG_ERROR;
        cd.log_level_set = true;
        if (silent)
            tl_begin("listener/%d silent sockets in all %d slots go after handshake_first_ms: a real client is served",
                     SLOTS, SLOTS);
        else
            tl_begin("listener/%d slow clients in all %d slots: a new client takes the oldest slot and is served",
                     SLOTS, SLOTS);
        REQUIRE(rdmax_ctx_create(&cd, &ctx) == RDMAX_OK, "no device");
        REQUIRE(rdmax_listener_create(ctx, "127.0.0.1", 0, &l) == RDMAX_OK, "listen failed");
        uint16_t port = rdmax_listener_query_port(l);
        for (int i = 0; i < SLOTS; i++) {
            REQUIRE((slow[i] = open_slow(port, "\x52", silent ? 0 : 1)) >= 0, "slow client %d", i);
            CHECK_ST(rdmax_accept(l, NULL, &ep, 0), RDMAX_ERR_TIMEOUT);  /* into a slot, in order */
        }
        pid_t pid = real_client("127.0.0.1", port, 30000);
        ep = accept_one(l, 60000);
        CHECK(ep != NULL, "the real client was not served within 60 s");
        CHECK(child_ok(pid), "the real client failed");
        char b;
        CHECK(recv(slow[0], &b, 1, MSG_DONTWAIT) == 0, "the oldest %s client still holds its slot",
              silent ? "silent" : "slow");
    out:
        for (int i = 0; i < SLOTS; i++)
            if (slow[i] >= 0)
                close(slow[i]);
        rdmax_ep_destroy(ep);
        rdmax_listener_destroy(l);
        rdmax_ctx_destroy(ctx);
        tl_end();
    }
}

static void flood_burst_test(void)
{
    enum { HOSTILE = 2000, HONEST = 20 };
    rdmax_ctx *ctx = NULL;
    rdmax_listener *l = NULL;
    rdmax_ep *eps[HONEST] = {0};
    pid_t flood = -1, honest[HONEST];
    int times[2] = {-1, -1};
    for (int i = 0; i < HONEST; i++)
        honest[i] = -1;
    tl_begin("listener/%d hostile sockets in a burst beside %d real clients, defaults: all served; fds, QPs, MRs "
             "and RSS back", HOSTILE, HONEST);
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.log_level = RDMAX_LOG_ERROR;
    cd.log_level_set = true;
    REQUIRE(rdmax_ctx_create(&cd, &ctx) == RDMAX_OK, "no device");
    REQUIRE(rdmax_listener_create(ctx, "127.0.0.1", 0, &l) == RDMAX_OK, "listen failed");
    uint16_t port = rdmax_listener_query_port(l);
    int fds0 = tl_count_fds();
    struct tl_footprint fp0 = tl_footprint(ctx);
    REQUIRE(pipe(times) == 0, "pipe");
    flood = fork();
    if (flood == 0) {
        struct rlimit rl = {HOSTILE + 64, HOSTILE + 64};
        setrlimit(RLIMIT_NOFILE, &rl);
        static int held[HOSTILE];
        struct sockaddr_in a;
        memset(&a, 0, sizeof a);
        a.sin_family = AF_INET;
        a.sin_port = htons(port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        for (int i = 0; i < HOSTILE; i++) {
            held[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
            if (held[i] < 0)
                continue;
            connect(held[i], (struct sockaddr *)&a, sizeof a);
            if (i % 4 == 2) {  /* a truncated record: a head that promises more */
                struct pollfd p = {held[i], POLLOUT, 0};
                poll(&p, 1, 50);
                (void)!write(held[i], "RDMX\x00\x01\x00\x40", 8);
            } else if (i % 4 == 3) {
                close(held[i]);
                held[i] = -1;
            }
        }
        sleep(20);  /* then they all go */
        _exit(0);
    }
    for (int i = 0; i < HONEST; i++) {
        honest[i] = fork();
        if (honest[i] == 0) {
            int64_t t0 = tl_now_ms();
            rdmax_ctx_desc c2d;
            memset(&c2d, 0, sizeof c2d);
            rdmax_ctx *c2;
            rdmax_ep *e2;
            if (rdmax_ctx_create(&c2d, &c2) != RDMAX_OK)
                _exit(3);
            /* a handshake a loaded machine slowed past the idle bound may be pushed out: the client tries
               again, as a program would (60 s is the hang guard; the times are reported, not asserted) */
            while (rdmax_connect(c2, "127.0.0.1", port, NULL, &e2, 60000) != RDMAX_OK)
                if (tl_now_ms() - t0 > 60000)
                    _exit(3);
            int ms = (int)(tl_now_ms() - t0);
            (void)!write(times[1], &ms, sizeof ms);
            rdmax_ep_destroy(e2);
            rdmax_ctx_destroy(c2);
            _exit(0);
        }
    }
    int served = 0;
    for (int64_t end = tl_now_ms() + 120000; served < HONEST && tl_now_ms() < end;) {
        rdmax_ep *ep = NULL;
        if (rdmax_accept(l, NULL, &ep, 100) == RDMAX_OK)
            eps[served++] = ep;
    }
    int ok = 0, max_ms = 0, sum_ms = 0;
    for (int i = 0; i < HONEST; i++) {
        ok += child_ok(honest[i]);
        honest[i] = -1;
    }
    close(times[1]);
    times[1] = -1;
    int ms;
    while (read(times[0], &ms, sizeof ms) == sizeof ms) {
        max_ms = ms > max_ms ? ms : max_ms;
        sum_ms += ms;
    }
    close(times[0]);
    times[0] = -1;
    CHECK(served == HONEST && ok == HONEST, "%d of %d real clients served, %d connected", served, HONEST, ok);
    printf("    %d hostile sockets: %d of %d real clients connected, in %d ms on average, %d ms at most\n", HOSTILE,
           ok, HONEST, ok ? sum_ms / ok : 0, max_ms);
    kill(flood, SIGKILL);
    waitpid(flood, NULL, 0);
    flood = -1;
    for (int i = 0; i < HONEST; i++)
        rdmax_ep_destroy(eps[i]), eps[i] = NULL;
    /* the hostile sockets are gone: their handshakes end at the next steps */
    int fds = tl_count_fds();
    for (int64_t end = tl_now_ms() + 60000; fds > fds0 && tl_now_ms() < end; fds = tl_count_fds()) {
        rdmax_ep *ep = NULL;
        rdmax_accept(l, NULL, &ep, 100);
        rdmax_ep_destroy(ep);
    }
    CHECK(fds == fds0, "the listener's process holds %d fds, %d before the flood", fds, fds0);
    /* (RSS: 2,000 sockets that each left 4 KiB would pass 8 MiB over) */
    tl_footprint_back(fp0, tl_footprint(ctx), 8192);
    rdmax_ep *extra = NULL;  /* control: the counts see one endpoint and one registration more */
    rdmax_mem *extra_mem = NULL;
    REQUIRE(rdmax_ep_create(ctx, NULL, &extra) == RDMAX_OK, "control endpoint");
    REQUIRE(rdmax_mem_alloc(ctx, 4096, RDMAX_ACCESS_LOCAL, &extra_mem) == RDMAX_OK, "control registration");
    struct tl_footprint fx = tl_footprint(ctx);
    rdmax_ep_destroy(extra);
    rdmax_mem_free(extra_mem);
    CHECK(fx.qps == fp0.qps + 1 && fx.mrs == fp0.mrs + 1, "control: one endpoint and one registration more show "
          "as %d QPs, %d MRs (%d, %d before)", fx.qps, fx.mrs, fp0.qps, fp0.mrs);
out:
    if (flood > 0) {
        kill(flood, SIGKILL);
        waitpid(flood, NULL, 0);
    }
    for (int i = 0; i < HONEST; i++) {
        if (honest[i] > 0)
            child_ok(honest[i]);
        rdmax_ep_destroy(eps[i]);
    }
    for (int i = 0; i < 2; i++)
        if (times[i] >= 0)
            close(times[i]);
    rdmax_listener_destroy(l);
    rdmax_ctx_destroy(ctx);
    tl_end();
}

/* ---- admission: a shared secret (rdmax_impl.h >>admit), TCP record path ---- */
static const char g_secret[] = "correct horse battery staple";

/* A client in a child process with the given secret (NULL: none, from the desc; env: from RDMAX_SECRET):
   connect, send, flush. Exit 0 when served, else the negated status (RDMAX_ERR_OOB_AUTH: 52). */
static pid_t admit_client(uint16_t port, const char *secret, int env)
{
    pid_t pid = fork();
    if (pid == 0) {
        rdmax_ctx_desc cd;
        memset(&cd, 0, sizeof cd);
        cd.log_level = RDMAX_LOG_ERROR + 0;
        cd.log_level_set = true;
        if (env)
            setenv("RDMAX_SECRET", secret, 1);
        else if (secret) {
            cd.secret = secret;
            cd.secret_len = strlen(secret);
        }
        rdmax_ctx *c;
        if (rdmax_ctx_create(&cd, &c) != RDMAX_OK)
            _exit(2);
        tl_hello_client(c, "127.0.0.1", port, 20000);
    }
    return pid;
}

static int child_exit(pid_t pid)
{
    int status = -1;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* A relay in a child process between one client (on lfd) and the listener: it passes everything both
   ways and, when either side closes, writes what the client sent to `out` (the recorded handshake). */
static pid_t recording_relay(int lfd, uint16_t port, int out)
{
    pid_t pid = fork();
    if (pid == 0) {
        int c = accept(lfd, NULL, NULL), s = tcp_connect(AF_INET, port);
        if (c < 0 || s < 0)
            _exit(1);
        static uint8_t rec[65536];
        size_t n = 0;
        for (int open = 1; open;) {
            struct pollfd p[2] = {{c, POLLIN, 0}, {s, POLLIN, 0}};
            if (poll(p, 2, 20000) <= 0)
                break;
            for (int i = 0; i < 2; i++) {
                if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                    continue;
                uint8_t b[4096];
                ssize_t k = read(p[i].fd, b, sizeof b);
                if (k <= 0) {
                    open = 0;
                    break;
                }
                if (i == 0 && n + (size_t)k <= sizeof rec) {
                    memcpy(rec + n, b, (size_t)k);
                    n += (size_t)k;
                }
                if (write(i ? c : s, b, (size_t)k) != k)
                    open = 0;
            }
        }
        _exit(write(out, rec, n) == (ssize_t)n ? 0 : 1);
    }
    return pid;
}

static rdmax_status accept_st(rdmax_listener *l, rdmax_ep **ep)
{
    *ep = NULL;
    return rdmax_accept(l, NULL, ep, 30000);
}

/* Strangers get nothing, not even an endpoint: a client without the secret, with a wrong one, a recorded
   handshake replayed, a hello then garbage; each refused with RDMAX_ERR_OOB_AUTH on both sides and no
   endpoint made (the server's allocator sees no rdmax_ep), and the listener serves the next good client.
   Controls: a client with the secret is served, and that makes exactly one endpoint (so the count would
   see one made for a stranger); the relayed original of the replayed handshake is served. */
static void admit_tests(void)
{
    rdmax_ctx *ctx = NULL, *plain = NULL;
    rdmax_listener *l = NULL, *pl = NULL;
    rdmax_ep *ep = NULL;
    int rec_pipe[2] = {-1, -1}, rlfd = -1;
    unsetenv("RDMAX_SECRET");
    rdmax_ctx_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.log_level = RDMAX_LOG_ERROR;
    cd.log_level_set = true;
    cd.allocator.alloc = tl_count_alloc;
    cd.allocator.free = tl_count_free;
    cd.secret = g_secret;
    cd.secret_len = strlen(g_secret);
    tl_begin("admit/tcp: the secret's client is served, one endpoint made; query_desc shows no secret, its length");
    REQUIRE(rdmax_ctx_create(&cd, &ctx) == RDMAX_OK, "no device: %s", rdmax_ctx_query_last_error(NULL));
    REQUIRE(rdmax_listener_create(ctx, "127.0.0.1", 0, &l) == RDMAX_OK, "listen failed");
    uint16_t port = rdmax_listener_query_port(l);
    {
        rdmax_ctx_desc q = rdmax_ctx_query_desc(ctx);
        CHECK(q.secret == NULL && q.secret_len == strlen(g_secret), "query_desc: secret %p, length %zu", q.secret,
              q.secret_len);
        int allocs = tl_ep_allocs;
        pid_t pid = admit_client(port, g_secret, 0);
        CHECK_ST(accept_st(l, &ep), RDMAX_OK);
        CHECK(tl_ep_allocs == allocs + 1, "%d endpoints made for one client", tl_ep_allocs - allocs);
        int ex = child_exit(pid);
        CHECK(ex == 0, "client exit %d", ex);
        rdmax_ep_destroy(ep);
        ep = NULL;
    }
    tl_end();

    static const struct {
        const char *name, *secret;
        int env;
    } bad[] = {
        {"a client without a secret", NULL, 0},
        {"a client with a wrong secret", "correct horse battery stapler", 0},
        {"a client with a wrong secret from RDMAX_SECRET", "tr0ub4dor&3", 1},
        {"a client whose desc says no secret (secret_len 0) while RDMAX_SECRET is set", "", 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tl_begin("admit/tcp: %s is refused on both sides with RDMAX_ERR_OOB_AUTH, no endpoint made", bad[i].name);
        int allocs = tl_ep_allocs;
        rdmax_counters c0, c1;
        rdmax_ctx_query_counters(ctx, &c0);
        pid_t pid;
        if (i == 3) {  /* secret "" with length 0: none, the variable ignored */
            pid = fork();
            if (pid == 0) {
                setenv("RDMAX_SECRET", g_secret, 1);
                rdmax_ctx_desc d;
                memset(&d, 0, sizeof d);
                d.log_level = RDMAX_LOG_ERROR;
                d.log_level_set = true;
                d.secret = "";
                rdmax_ctx *c;
                rdmax_ep *e;
                if (rdmax_ctx_create(&d, &c) != RDMAX_OK)
                    _exit(2);
                if (rdmax_ctx_query_desc(c).secret_len != 0)
                    _exit(3);
                rdmax_status st = rdmax_connect(c, "127.0.0.1", port, NULL, &e, 20000);
                _exit(st == RDMAX_OK ? 0 : -st);
            }
        } else {
            pid = admit_client(port, bad[i].secret, bad[i].env);
        }
        CHECK_ST(accept_st(l, &ep), RDMAX_ERR_OOB_AUTH);
        CHECK(ep == NULL, "an endpoint was returned");
        int ex = child_exit(pid);
        CHECK(ex == -RDMAX_ERR_OOB_AUTH, "client exit %d, expected %d (RDMAX_ERR_OOB_AUTH)", ex, -RDMAX_ERR_OOB_AUTH);
        CHECK(tl_ep_allocs == allocs, "%d endpoints made for a refused client", tl_ep_allocs - allocs);
        CHECK(rdmax__test_ctx_eps(ctx) == 0, "%u endpoints in the server context", rdmax__test_ctx_eps(ctx));
        rdmax_ctx_query_counters(ctx, &c1);
        CHECK(c1.auth_refused == c0.auth_refused + 1, "auth_refused %llu -> %llu",
              (unsigned long long)c0.auth_refused, (unsigned long long)c1.auth_refused);
        tl_end();
    }

    tl_begin("admit/tcp: a recorded handshake (relayed and served) replayed on a new connection is refused");
    {
        uint16_t rport;
        REQUIRE((rlfd = tcp_listener(AF_INET, &rport)) >= 0, "relay listener");
        REQUIRE(pipe(rec_pipe) == 0, "pipe");
        pid_t relay = recording_relay(rlfd, port, rec_pipe[1]);
        pid_t pid = admit_client(rport, g_secret, 0);
        int allocs = tl_ep_allocs;
        CHECK_ST(accept_st(l, &ep), RDMAX_OK);  /* control: the original, through the relay, is served */
        CHECK(child_exit(pid) == 0, "the relayed client failed");
        rdmax_ep_destroy(ep);
        ep = NULL;
        CHECK(child_exit(relay) == 0, "relay failed");
        static uint8_t rec[65536];
        ssize_t n = read(rec_pipe[0], rec, sizeof rec);
        CHECK(n == RDMAX__HELLO_SIZE + RDMAX_CONN_RECORD_HEAD + RDMAX__MAC_SIZE + 1,
              "recorded %zd bytes: expected hello, record, MAC and the ready byte", n);
        allocs = tl_ep_allocs;
        int fd = tcp_connect(AF_INET, port);
        REQUIRE(fd >= 0 && n > 0 && write(fd, rec, (size_t)n) == n, "replay");
        CHECK_ST(accept_st(l, &ep), RDMAX_ERR_OOB_AUTH);
        CHECK(tl_ep_allocs == allocs && rdmax__test_ctx_eps(ctx) == 0, "%d endpoints made for the replay",
              tl_ep_allocs - allocs);
        /* what the replayer got: a fresh hello (another nonce than the recorded session's), then the refusal */
        uint8_t back[RDMAX__HELLO_SIZE + RDMAX__REFUSAL_SIZE];
        size_t got = 0;
        for (ssize_t k; got < sizeof back && (k = read(fd, back + got, sizeof back - got)) > 0;)
            got += (size_t)k;
        CHECK(got == sizeof back && rdmax__admit_kind(back) == 1 && rdmax__admit_kind(back + RDMAX__HELLO_SIZE) == 2 &&
              rdmax__refusal_status(back + RDMAX__HELLO_SIZE) == RDMAX_ERR_OOB_AUTH,
              "the replayer got %zu bytes, not a hello and a refusal with RDMAX_ERR_OOB_AUTH", got);
        close(fd);
    }
    tl_end();

    tl_begin("admit/tcp: a hello then a record with a garbage MAC, a hello then close: refused, no endpoint");
    {
        int allocs = tl_ep_allocs;
        uint8_t msg[RDMAX__HELLO_SIZE + RDMAX_CONN_RECORD_SIZE + RDMAX__MAC_SIZE];
        REQUIRE(rdmax__hello_make(msg) == RDMAX_OK, "hello");
        rdmax_conn_record good;
        good_record(&good);
        size_t len = rdmax_conn_record_encode(&good, msg + RDMAX__HELLO_SIZE);
        memset(msg + RDMAX__HELLO_SIZE + len, 0x5a, RDMAX__MAC_SIZE);
        pid_t pid = crafted_peer(AF_INET, port, msg, RDMAX__HELLO_SIZE + len + RDMAX__MAC_SIZE, 2000);
        CHECK_ST(accept_st(l, &ep), RDMAX_ERR_OOB_AUTH);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        pid = crafted_peer(AF_INET, port, msg, RDMAX__HELLO_SIZE, 0);
        CHECK_ST(accept_st(l, &ep), RDMAX_ERR_OOB_SHORT);
        waitpid(pid, NULL, 0);
        CHECK(tl_ep_allocs == allocs && rdmax__test_ctx_eps(ctx) == 0, "%d endpoints made", tl_ep_allocs - allocs);
    }
    tl_end();

    tl_begin("admit/tcp: after the refusals the listener serves the secret's client (from RDMAX_SECRET)");
    {
        int allocs = tl_ep_allocs;
        pid_t pid = admit_client(port, g_secret, 1);
        CHECK_ST(accept_st(l, &ep), RDMAX_OK);
        CHECK(child_exit(pid) == 0, "client failed");
        CHECK(tl_ep_allocs == allocs + 1, "%d endpoints made", tl_ep_allocs - allocs);
        rdmax_counters c;
        for (int i = 0; i < 100000 && ep; i++) {
            rdmax_progress(ctx);
            rdmax_ctx_query_counters(ctx, &c);
            if (c.recv_msgs)
                break;
        }
        CHECK(c.recv_msgs >= 1, "the client's message did not arrive");
        rdmax_ep_destroy(ep);
        ep = NULL;
    }
    tl_end();

    tl_begin("admit/tcp: a listener without a secret and a client with one: both fail with RDMAX_ERR_OOB_AUTH");
    {
        rdmax_ctx_desc pd;
        memset(&pd, 0, sizeof pd);
        pd.log_level = RDMAX_LOG_ERROR;
        pd.log_level_set = true;
        REQUIRE(rdmax_ctx_create(&pd, &plain) == RDMAX_OK, "ctx");
        REQUIRE(rdmax_listener_create(plain, "127.0.0.1", 0, &pl) == RDMAX_OK, "listen");
        pid_t pid = admit_client(rdmax_listener_query_port(pl), g_secret, 0);
        CHECK_ST(accept_st(pl, &ep), RDMAX_ERR_OOB_AUTH);
        CHECK(rdmax__test_ctx_eps(plain) == 0, "%u endpoints made", rdmax__test_ctx_eps(plain));
        int ex = child_exit(pid);
        CHECK(ex == -RDMAX_ERR_OOB_AUTH, "client exit %d", ex);
        pid = admit_client(rdmax_listener_query_port(pl), NULL, 0);  /* control: no secret on either side */
        CHECK_ST(accept_st(pl, &ep), RDMAX_OK);
        CHECK(child_exit(pid) == 0, "client without a secret failed");
        rdmax_ep_destroy(ep);
        ep = NULL;
    }
    tl_end();

    tl_begin("admit/tcp: a listener that cannot prove the secret (an impostor) is refused by the client");
    {
        /* The impostor speaks the protocol (its hello, a valid record) but its MAC is not the secret's. */
        uint16_t iport;
        int ifd = tcp_listener(AF_INET, &iport);
        REQUIRE(ifd >= 0, "impostor listener");
        pid_t pid = admit_client(iport, g_secret, 0);
        int fd = accept(ifd, NULL, NULL);
        uint8_t hello[RDMAX__HELLO_SIZE], in[RDMAX__HELLO_SIZE + RDMAX_CONN_RECORD_HEAD + RDMAX__MAC_SIZE];
        REQUIRE(fd >= 0 && rdmax__hello_make(hello) == RDMAX_OK && write(fd, hello, sizeof hello) == sizeof hello,
                "impostor hello");
        size_t got = 0;
        for (ssize_t k; got < sizeof in && (k = read(fd, in + got, sizeof in - got)) > 0;)
            got += (size_t)k;
        CHECK(got == sizeof in, "the client sent %zu bytes, expected its hello, record and MAC", got);
        uint8_t out[RDMAX_CONN_RECORD_SIZE + RDMAX__MAC_SIZE];
        rdmax_conn_record good;
        good_record(&good);
        rdmax_conn_record_encode(&good, out);
        memcpy(out + RDMAX_CONN_RECORD_HEAD, in + RDMAX__HELLO_SIZE + RDMAX_CONN_RECORD_HEAD, RDMAX__MAC_SIZE);
        CHECK(write(fd, out, RDMAX_CONN_RECORD_HEAD + RDMAX__MAC_SIZE) == RDMAX_CONN_RECORD_HEAD + RDMAX__MAC_SIZE,
              "impostor record");  /* the client's own MAC echoed */
        int ex = child_exit(pid);
        CHECK(ex == -RDMAX_ERR_OOB_AUTH, "client exit %d, expected %d", ex, -RDMAX_ERR_OOB_AUTH);
        close(fd);
        close(ifd);
    }
    tl_end();
out:
    rdmax_ep_destroy(ep);
    if (rlfd >= 0)
        close(rlfd);
    if (rec_pipe[0] >= 0) {
        close(rec_pipe[0]);
        close(rec_pipe[1]);
    }
    rdmax_listener_destroy(pl);
    rdmax_ctx_destroy(plain);
    rdmax_listener_destroy(l);
    rdmax_ctx_destroy(ctx);
    if (tl_case_failed)
        tl_end();
}

/* A REQ's private data with a proof (rdmax_impl.h >>cm, RDMAX__CM_PROOF_S), as rdmax__cm_try makes it. */
static void cm_proof(rdmax_ctx *ctx, uint8_t pd[64], uint64_t nonce, int64_t t, uint32_t qpn)
{
    rdmax_conn_record r;
    memset(&r, 0, sizeof r);
    r.transport = RDMAX_TRANSPORT_ID_RC;
    r.credits = 17;
    r.recv_size = 4096;
    memset(pd, 0, 64);
    rdmax_cm_record_encode(&r, pd);
    rdmax__put16(pd + 6, RDMAX__CM_REQ_AUTH);
    rdmax__put64(pd + 36, nonce);
    rdmax__put32(pd + 44, (uint32_t)t);
    uint8_t mac[RDMAX__MAC_SIZE];
    rdmax__cm_client_mac(ctx, pd, qpn, mac);
    memcpy(pd + 48, mac, 8);
}

/* The rdma_cm listener's check of a proof, on the host: a fresh one passes once, its replay (the same QP)
   does not, nor the same proof from another QP, nor one dated outside the window; the memory is bounded
   (RDMAX__CM_SEEN proofs) and a proof pushed out of it still cannot be replayed (the floor). */
static void admit_cm_cache_tests(void)
{
    rdmax_ctx *ctx = (rdmax_ctx *)calloc(1, sizeof *ctx), *other = (rdmax_ctx *)calloc(1, sizeof *other);
    rdmax_listener *l = (rdmax_listener *)calloc(1, sizeof *l);
    ctx->secret = (uint8_t *)g_secret;
    ctx->desc.secret_len = strlen(g_secret);
    other->secret = (uint8_t *)"tr0ub4dor&3";
    other->desc.secret_len = 11;
    l->ctx = ctx;
    l->cm_seen = (struct rdmax__cm_seen *)calloc(RDMAX__CM_SEEN, sizeof *l->cm_seen);
    char why[256];
    uint8_t pd[64];
    int64_t now = time(NULL);
    tl_begin("admit/cm: a fresh proof passes once; replayed from the same QP, or from another, it does not");
    cm_proof(ctx, pd, 1, now, 0x100);
    CHECK_ST(rdmax__cm_admit(l, pd, 56, 0x100, why, sizeof why), RDMAX_OK);
    CHECK_ST(rdmax__cm_admit(l, pd, 56, 0x100, why, sizeof why), RDMAX_ERR_OOB_AUTH);
    CHECK(strstr(why, "used before") != NULL, "why: %s", why);
    cm_proof(ctx, pd, 2, now, 0x100);
    CHECK_ST(rdmax__cm_admit(l, pd, 56, 0x101, why, sizeof why), RDMAX_ERR_OOB_AUTH);
    CHECK(strstr(why, "wrong") != NULL, "why: %s", why);
    CHECK_ST(rdmax__cm_admit(l, pd, 56, 0x100, why, sizeof why), RDMAX_OK);  /* control: its own QP */
    tl_end();
    tl_begin("admit/cm: dated %d s and more from the listener's clock: refused; within: admitted", RDMAX__CM_PROOF_S);
    cm_proof(ctx, pd, 3, now - RDMAX__CM_PROOF_S - 5, 0x100);
    CHECK_ST(rdmax__cm_admit(l, pd, 56, 0x100, why, sizeof why), RDMAX_ERR_OOB_AUTH);
    cm_proof(ctx, pd, 4, now + RDMAX__CM_PROOF_S + 5, 0x100);
    CHECK_ST(rdmax__cm_admit(l, pd, 56, 0x100, why, sizeof why), RDMAX_ERR_OOB_AUTH);
    cm_proof(ctx, pd, 5, now - RDMAX__CM_PROOF_S / 2, 0x100);
    CHECK_ST(rdmax__cm_admit(l, pd, 56, 0x100, why, sizeof why), RDMAX_OK);
    tl_end();
    tl_begin("admit/cm: a wrong secret, no proof to a listener with a secret, a proof to one without: refused");
    cm_proof(other, pd, 6, now, 0x100);
    CHECK_ST(rdmax__cm_admit(l, pd, 56, 0x100, why, sizeof why), RDMAX_ERR_OOB_AUTH);
    cm_proof(ctx, pd, 7, now, 0x100);
    rdmax__put16(pd + 6, RDMAX_CM_RECORD_SIZE);  /* the plain record: no proof */
    CHECK_ST(rdmax__cm_admit(l, pd, 56, 0x100, why, sizeof why), RDMAX_ERR_OOB_AUTH);
    CHECK_ST(rdmax__cm_admit(l, pd, RDMAX_CM_RECORD_SIZE, 0x100, why, sizeof why), RDMAX_ERR_OOB_AUTH);
    cm_proof(ctx, pd, 8, now, 0x100);
    l->ctx = other;
    other->secret = NULL;
    CHECK_ST(rdmax__cm_admit(l, pd, 56, 0x100, why, sizeof why), RDMAX_ERR_OOB_AUTH);
    rdmax__put16(pd + 6, RDMAX_CM_RECORD_SIZE);
    CHECK_ST(rdmax__cm_admit(l, pd, 56, 0x100, why, sizeof why), RDMAX_OK);  /* control: neither has one */
    l->ctx = ctx;
    tl_end();
    tl_begin("admit/cm: %d proofs fill the memory; the first, pushed out, cannot be replayed; a proof dated no "
             "later is refused, a newer one passes", RDMAX__CM_SEEN);
    {
        memset(l->cm_seen, 0, RDMAX__CM_SEEN * sizeof *l->cm_seen);
        l->cm_seen_at = 0;
        l->cm_seen_floor = 0;
        uint8_t first[64];
        cm_proof(ctx, first, 1000, now, 0x200);
        CHECK_ST(rdmax__cm_admit(l, first, 56, 0x200, why, sizeof why), RDMAX_OK);
        int ok = 0;
        for (uint32_t i = 1; i <= RDMAX__CM_SEEN; i++) {
            cm_proof(ctx, pd, 1000 + i, now, 0x200);
            ok += rdmax__cm_admit(l, pd, 56, 0x200, why, sizeof why) == RDMAX_OK;
        }
        CHECK(ok == RDMAX__CM_SEEN, "%d of %d fresh proofs admitted", ok, RDMAX__CM_SEEN);
        CHECK_ST(rdmax__cm_admit(l, first, 56, 0x200, why, sizeof why), RDMAX_ERR_OOB_AUTH);  /* no longer held */
        cm_proof(ctx, pd, 99998, now, 0x200);
        CHECK_ST(rdmax__cm_admit(l, pd, 56, 0x200, why, sizeof why), RDMAX_ERR_OOB_AUTH);  /* the bound's price */
        cm_proof(ctx, pd, 99999, now + 1, 0x200);
        CHECK_ST(rdmax__cm_admit(l, pd, 56, 0x200, why, sizeof why), RDMAX_OK);
    }
    tl_end();
    free(l->cm_seen);
    free(l);
    free(ctx);
    free(other);
}

static void hex(const uint8_t *b, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", b[i]);
}

/* SHA-256 and HMAC-SHA-256 of admission (rdmax_impl.h >>admit) against the published vectors: FIPS
   180-2's "abc" and two-block message, RFC 4231's test cases 1-7 (5 truncated to 128 bits; 6 and 7
   with a 131-byte key, hashed first). Each input is also fed in pieces of every size up to 65, so the
   block buffering is covered as well as the one-shot path. */
static void admit_vector_tests(void)
{
    static const struct {
        const char *msg, *want;
    } sha[] = {
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    char got[65];
    uint8_t d[32];
    for (size_t i = 0; i < sizeof sha / sizeof sha[0]; i++) {
        tl_begin("admit/sha256: FIPS 180-2 vector %zu (%zu bytes)", i + 1, strlen(sha[i].msg));
        for (size_t piece = 1; piece <= 65; piece++) {
            rdmax__sha256 s;
            rdmax__sha256_init(&s);
            size_t n = strlen(sha[i].msg);
            for (size_t at = 0; at < n; at += piece)
                rdmax__sha256_update(&s, sha[i].msg + at, n - at < piece ? n - at : piece);
            rdmax__sha256_final(&s, d);
            hex(d, 32, got);
            CHECK(!strcmp(got, sha[i].want), "pieces of %zu: %s, expected %s", piece, got, sha[i].want);
        }
        tl_end();
    }
    uint8_t k0b[20], kaa20[20], k0c[20], kaa131[131], k4[25], ddd[50], dcd[50];
    memset(k0b, 0x0b, sizeof k0b);
    memset(kaa20, 0xaa, sizeof kaa20);
    memset(k0c, 0x0c, sizeof k0c);
    memset(kaa131, 0xaa, sizeof kaa131);
    for (int i = 0; i < 25; i++)
        k4[i] = (uint8_t)(i + 1);
    memset(ddd, 0xdd, sizeof ddd);
    memset(dcd, 0xcd, sizeof dcd);
    static const char t6[] = "Test Using Larger Than Block-Size Key - Hash Key First";
    static const char t7[] = "This is a test using a larger than block-size key and a larger than block-size data. The key "
                             "needs to be hashed before being used by the HMAC algorithm.";
    const struct {
        const void *key;
        size_t key_len;
        const void *data;
        size_t data_len;
        size_t mac_len;
        const char *want;
    } rfc[] = {
        {k0b, 20, "Hi There", 8, 32, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
        {"Jefe", 4, "what do ya want for nothing?", 28, 32,
         "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
        {kaa20, 20, ddd, 50, 32, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
        {k4, 25, dcd, 50, 32, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
        {k0c, 20, "Test With Truncation", 20, 16, "a3b6167473100ee06e0c796c2955552b"},
        {kaa131, 131, t6, sizeof t6 - 1, 32, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
        {kaa131, 131, t7, sizeof t7 - 1, 32, "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
    };
    for (size_t i = 0; i < sizeof rfc / sizeof rfc[0]; i++) {
        tl_begin("admit/hmac-sha256: RFC 4231 test case %zu (key %zu bytes, data %zu, MAC %zu)", i + 1, rfc[i].key_len,
                 rfc[i].data_len, rfc[i].mac_len);
        for (size_t piece = 1; piece <= 65; piece++) {
            rdmax__hmac m;
            rdmax__hmac_init(&m, rfc[i].key, rfc[i].key_len);
            const uint8_t *data = (const uint8_t *)rfc[i].data;
            for (size_t at = 0; at < rfc[i].data_len; at += piece)
                rdmax__hmac_update(&m, data + at, rfc[i].data_len - at < piece ? rfc[i].data_len - at : piece);
            rdmax__hmac_final(&m, d);
            hex(d, rfc[i].mac_len, got);
            CHECK(!strcmp(got, rfc[i].want), "pieces of %zu: %s, expected %s", piece, got, rfc[i].want);
        }
        tl_end();
    }
    tl_begin("admit/MAC compare: equal, and a difference in the first, a middle or the last byte");
    {
        uint8_t a[32], b[32];
        memset(a, 7, sizeof a);
        memcpy(b, a, sizeof b);
        CHECK(rdmax__mac_equal(a, b, 32), "equal MACs compared unequal");
        for (int at = 0; at < 32; at += 15) {
            b[at] ^= 0x80;
            CHECK(!rdmax__mac_equal(a, b, 32), "MACs differing in byte %d compared equal", at);
            b[at] ^= 0x80;
        }
    }
    tl_end();
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && !strcmp(argv[1], "admit")) {
        admit_tests();
    } else if (argc > 1 && !strcmp(argv[1], "device")) {
        device_tests();
        admit_tests();
        listener_tests();
        accept_desc_tests();
        early_message_tests();
        flood_tests();
        flood_burst_test();
    }
    else {
        host_tests(AF_INET);
        host_tests(AF_INET6);
        cm_record_tests();
        admit_vector_tests();
        admit_cm_cache_tests();
    }
    return tl_failed_total ? 1 : 0;
}
