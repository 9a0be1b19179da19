/* Fuzz target: the connection record, the bytes a peer (or anyone who reaches the listener) sends first.
   - rdmax_conn_record_decode on the input, against a reference validator of every documented field rule:
     decode succeeds exactly when no rule is broken, and a failure names a rule that is broken;
   - the 8-byte head check (magic, version, length) alone, against its own rules, and decode agrees with it;
   - a record that decodes re-encodes to the same bytes, and encode then decode of any valid record gives
     it back (the encode side fuzzed from the input too);
   - `why` is written within why_len (an exact-size heap buffer: ASan sees one byte too many) and says
     something on every error;
   - rdmax_oob_exchange and the ready byte over a socketpair whose far end sends the input and closes:
     the status is what the record decides (short, head, decode), never a hang or a read past the length
     its head gives (a version-4 record: 76 bytes, then 20 per region after the first).
   Input: byte 0 picks why_len (0: why NULL); the rest is the record as sent. */
#define RDMAX_TRANSPORT_RC
#define RDMAX_TRANSPORT_UD
#define RDMAX_IMPLEMENTATION
#include "../../rdmax.h"
#define FUZZ_NAME "conn"
#include "fuzz.h"

#include <sys/socket.h>
#include <unistd.h>

#define BIT(x) (1u << (x))
enum { R_TRANSPORT, R_MTU, R_CREDITS, R_QPN, R_PSN, R_GID, R_RECV_SIZE, R_BUFFER, R_LINK };

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }
static uint64_t be64(const uint8_t *p) { return (uint64_t)be32(p) << 32 | be32(p + 4); }

/* The head's rules, as documented in rdmax.h: magic, then version, then the length field. */
static rdmax_status ref_head(const uint8_t *b)
{
    if (be32(b) != RDMAX_CONN_RECORD_MAGIC)
        return RDMAX_ERR_OOB_MAGIC;
    if ((b[4] << 8 | b[5]) != RDMAX_CONN_RECORD_VERSION)
        return RDMAX_ERR_OOB_VERSION;
    unsigned len = (unsigned)(b[6] << 8 | b[7]);
    if (len > RDMAX_CONN_RECORD_SIZE)
        return RDMAX_ERR_OOB_LONG;
    if (len < RDMAX_CONN_RECORD_HEAD || (len - RDMAX_CONN_RECORD_HEAD) % RDMAX_CONN_RECORD_REGION)
        return RDMAX_ERR_OOB_LENGTH;
    return RDMAX_OK;
}

/* The record length a good head gives. */
static size_t ref_len(const uint8_t *b) { return (size_t)(b[6] << 8 | b[7]); }

/* Which field rules a whole record breaks (bits R_*), written from the wire layout in rdmax.h. */
static unsigned ref_broken(const uint8_t *b)
{
    size_t extra = (ref_len(b) - RDMAX_CONN_RECORD_HEAD) / RDMAX_CONN_RECORD_REGION;
    unsigned bad = 0;
    uint8_t tr = b[8], mtu = b[9];
    unsigned credits = (unsigned)(b[10] << 8 | b[11]);
    uint32_t qpn = be32(b + 12), psn = be32(b + 16), rkey = be32(b + 24), rs = be32(b + 28);
    uint64_t addr = be64(b + 48), len = be64(b + 56);
    int gid_zero = 1;
    for (int i = 32; i < 48; i++)
        gid_zero &= b[i] == 0;
    if (tr != RDMAX_TRANSPORT_ID_RC && tr != RDMAX_TRANSPORT_ID_UD)
        bad |= BIT(R_TRANSPORT);
    if (mtu < 1 || mtu > 5)
        bad |= BIT(R_MTU);
    if (tr == RDMAX_TRANSPORT_ID_RC && credits < 2)
        bad |= BIT(R_CREDITS);
    if (qpn == 0 || qpn > 0xffffff)
        bad |= BIT(R_QPN);
    if (psn > 0xffffff)
        bad |= BIT(R_PSN);
    if (gid_zero)
        bad |= BIT(R_GID);
    if (rs == 0 || rs > (1u << 30))
        bad |= BIT(R_RECV_SIZE);
    if (len == 0 ? (addr != 0 || rkey != 0 || extra != 0) : addr + len < addr)
        bad |= BIT(R_BUFFER);
    for (size_t i = 0; i < extra; i++) {
        const uint8_t *r = b + RDMAX_CONN_RECORD_HEAD + i * RDMAX_CONN_RECORD_REGION;
        uint64_t ra = be64(r), rl = be64(r + 8);
        if (rl == 0 || ra + rl < ra)
            bad |= BIT(R_BUFFER);
    }
    unsigned lid = (unsigned)(b[72] << 8 | b[73]), ll = b[74], gt = b[75];
    if (ll == 1 ? lid == 0 || lid >= 0xc000 || gt != 0 : ll != 2 || lid != 0 || (gt != 1 && gt != 2))
        bad |= BIT(R_LINK);
    return bad;
}

static int rule_of(rdmax_status st)
{
    switch (st) {
    case RDMAX_ERR_OOB_TRANSPORT: return R_TRANSPORT;
    case RDMAX_ERR_OOB_MTU: return R_MTU;
    case RDMAX_ERR_OOB_CREDITS: return R_CREDITS;
    case RDMAX_ERR_OOB_QPN: return R_QPN;
    case RDMAX_ERR_OOB_PSN: return R_PSN;
    case RDMAX_ERR_OOB_GID: return R_GID;
    case RDMAX_ERR_OOB_RECV_SIZE: return R_RECV_SIZE;
    case RDMAX_ERR_OOB_BUFFER: return R_BUFFER;
    case RDMAX_ERR_OOB_LINK: return R_LINK;
    default: return -1;
    }
}

/* The status decode must give for n bytes: size and head first, then the field rules. */
static void check_decode_status(const uint8_t *b, size_t n, rdmax_status st)
{
    if (n < 8) {
        FZ_CHECK(st == RDMAX_ERR_OOB_SHORT, "%zu bytes: %s, expected OOB_SHORT", n, rdmax_status_str(st));
        return;
    }
    rdmax_status h = ref_head(b);
    if (h != RDMAX_OK) {
        FZ_CHECK(st == h, "bad head: decode says %s, the head rules %s", rdmax_status_str(st), rdmax_status_str(h));
        return;
    }
    if (n != ref_len(b)) {
        FZ_CHECK(st == (n < ref_len(b) ? RDMAX_ERR_OOB_SHORT : RDMAX_ERR_OOB_LONG), "%zu bytes: %s", n,
                 rdmax_status_str(st));
        return;
    }
    unsigned bad = ref_broken(b);
    if (!bad) {
        FZ_CHECK(st == RDMAX_OK, "a record that breaks no rule was refused: %s", rdmax_status_str(st));
    } else {
        int r = rule_of(st);
        FZ_CHECK(r >= 0 && (bad & BIT(r)), "record breaks rules 0x%x, decode said %s", bad, rdmax_status_str(st));
    }
}

static void check_why(const char *why, size_t why_len, rdmax_status st)
{
    if (!why || !why_len || st == RDMAX_OK)
        return;
    FZ_CHECK(memchr(why, 0, why_len) != NULL, "why is not terminated within its %zu bytes", why_len);
    if (why_len > 1)
        FZ_CHECK(why[0] != 0 && why[0] != '#', "error %s left why empty", rdmax_status_str(st));
}

/* rdmax_oob_exchange against a far end that sends `b` and closes; then the ready byte. */
static void check_exchange(const uint8_t *b, size_t n)
{
    int sv[2];
    if (n > 65536 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return;
    if (n && write(sv[1], b, n) != (ssize_t)n) {
        close(sv[0]);
        close(sv[1]);
        return;
    }
    shutdown(sv[1], SHUT_WR);
    rdmax_conn_record mine, theirs;
    memset(&mine, 0, sizeof mine);
    mine.transport = RDMAX_TRANSPORT_ID_RC;
    mine.mtu = 3;
    mine.credits = 128;
    mine.qpn = 0x11;
    mine.gid[15] = 1;
    mine.recv_size = 4096;
    char why[200];
    rdmax_status st = rdmax_oob_exchange(sv[0], &mine, &theirs, 5000, why, sizeof why);
    rdmax_status want;
    if (n < 8)
        want = RDMAX_ERR_OOB_SHORT;
    else if ((want = ref_head(b)) == RDMAX_OK && n < ref_len(b))
        want = RDMAX_ERR_OOB_SHORT;
    size_t len = n >= 8 && want == RDMAX_OK ? ref_len(b) : 0;
    if (want == RDMAX_OK) {
        /* the exchange reads exactly one record; what follows is the ready byte's business */
        check_decode_status(b, len, st);
    } else {
        FZ_CHECK(st == want, "exchange of %zu bytes: %s, expected %s", n, rdmax_status_str(st), rdmax_status_str(want));
    }
    check_why(why, sizeof why, st);
    if (st == RDMAX_OK) {
        rdmax_status s2 = rdmax__oob_sync(sv[0], 5000, why, sizeof why);
        int ready = n == len + 1 && b[len] == 'R';
        /* more than the ready byte is not seen by the sync itself (it reads one byte) */
        int ready_first = n > len && b[len] == 'R';
        if (ready)
            FZ_CHECK(s2 == RDMAX_OK, "ready byte refused: %s", rdmax_status_str(s2));
        else if (!ready_first)
            FZ_CHECK(s2 == RDMAX_ERR_OOB_SYNC, "%zu bytes after the record: sync says %s", n - len,
                     rdmax_status_str(s2));
    }
    close(sv[0]);
    close(sv[1]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    size_t why_len = data[0] % 160;
    const uint8_t *b = data + 1;
    size_t n = size - 1;
    char *why = why_len ? (char *)malloc(why_len) : NULL;
    if (why)
        memset(why, '#', why_len);

    /* the head check on its own */
    if (n >= 8) {
        rdmax_status h = rdmax__conn_head_check(b, why, why_len);
        FZ_CHECK(h == ref_head(b), "head check %s, rules say %s", rdmax_status_str(h), rdmax_status_str(ref_head(b)));
        check_why(why, why_len, h);
        if (why)
            memset(why, '#', why_len);
    }

    rdmax_conn_record o;
    memset(&o, 0xa5, sizeof o);
    rdmax_status st = rdmax_conn_record_decode(b, n, &o, why, why_len);
    check_decode_status(b, n, st);
    check_why(why, why_len, st);
    if (st == RDMAX_OK) {
        uint8_t again[RDMAX_CONN_RECORD_SIZE];
        size_t len = rdmax_conn_record_encode(&o, again);
        FZ_CHECK(len == n && !memcmp(again, b, n), "a decoded record does not re-encode to its bytes");
    }

    /* the encode side: a record built from the input bytes read as fields */
    if (n >= 48) {
        fz_in in = {b, n};
        rdmax_conn_record e, d;
        memset(&e, 0, sizeof e);
        e.transport = (uint8_t)(1 + fz_below(&in, 2));
        e.mtu = fz_u8(&in);
        e.credits = fz_u16(&in);
        e.qpn = fz_u32(&in);
        e.psn = fz_u32(&in);
        e.qkey = fz_u32(&in);
        e.recv_size = fz_u32(&in);
        for (int i = 0; i < 16; i++)
            e.gid[i] = fz_u8(&in);
        e.subnet_prefix = fz_u64(&in);
        e.lid = fz_u16(&in);
        e.link_layer = (uint8_t)fz_below(&in, 4);
        e.gid_type = (uint8_t)fz_below(&in, 4);
        /* 0..RDMAX_MAX_REGIONS + 2 regions: encode writes at most RDMAX_MAX_REGIONS */
        e.n_regions = fz_below(&in, 4) == 0 ? 0 : 1 + fz_below(&in, RDMAX_MAX_REGIONS + 2);
        for (uint32_t i = 0; i < e.n_regions && i < RDMAX_MAX_REGIONS; i++) {
            e.regions[i].addr = fz_u64(&in);
            e.regions[i].len = fz_below(&in, 8) == 0 ? 0 : fz_u64(&in);
            e.regions[i].rkey = fz_u32(&in);
        }
        uint8_t wire[RDMAX_CONN_RECORD_SIZE];
        size_t len = rdmax_conn_record_encode(&e, wire);
        uint32_t nw = e.n_regions < RDMAX_MAX_REGIONS ? e.n_regions : RDMAX_MAX_REGIONS;
        FZ_CHECK(ref_head(wire) == RDMAX_OK && len == ref_len(wire) &&
                 len == RDMAX_CONN_RECORD_HEAD + (nw > 1 ? nw - 1 : 0) * RDMAX_CONN_RECORD_REGION,
                 "encode wrote a bad head or length (%zu bytes for %u regions)", len, e.n_regions);
        rdmax_status s = rdmax_conn_record_decode(wire, len, &d, NULL, 0);
        check_decode_status(wire, len, s);
        e.n_regions = nw == 1 && e.regions[0].len == 0 ? 0 : nw;  /* one empty region reads back as none */
        if (s == RDMAX_OK)
            FZ_CHECK(!memcmp(&e, &d, sizeof e), "encode then decode changed a valid record");
    }

    check_exchange(b, n);
    free(why);
    return 0;
}
