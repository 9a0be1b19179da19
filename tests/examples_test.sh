#!/bin/sh
# The example programs on a device: each ping-pong test in one process (--loopback, dummy) and as server
# and client processes, sizes 1, 64 and 4096 (UD: 1024; as server and client on dummy: 64 only); output
# parsed (perftest's columns, CSV, JSON) and the numbers checked to be positive; the small ex_* examples
# check their own data (dummy); bad options and an unreachable peer fail with a clear error (after the
# connect deadline: refusals are retried).
# Usage: tests/examples_test.sh dummy|veth
topo=${1:-dummy}
cd "$(dirname "$0")/.." || exit 1
out=build/test-results/$topo/examples; mkdir -p "$out"
dev0=${RDMAX_TEST_DEV0:-rxe0}
dev1=${RDMAX_TEST_DEV1:-$dev0}
addr0=${RDMAX_TEST_ADDR0:-127.0.0.1}
port=19000

# wait_listen LOG PID: until the server says it listens or has exited (creating a context takes a while
# under emulation, longer on a busy machine: no fixed wait; the server's own `timeout` bounds it).
wait_listen() {
    while ! grep -q listening "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 0.1; done
}

# check_table FILE NROWS: the header line of perftest's columns, then NROWS rows of 9 positive numbers.
check_table() {
    awk -v want="$2" '
        /^ #bytes #iterations +t_min/ { hdr = 1; next }
        hdr && NF == 9 && $1 ~ /^[0-9]+$/ {
            for (i = 2; i <= 9; i++) if (!($i + 0 > 0)) bad = 1
            if ($3 + 0 > $4 + 0 || $5 + 0 < $3 + 0) bad = 1   # min <= max, typical >= min
            rows++
        }
        END { exit !(hdr && rows == want && !bad) }' "$1"
}

ok() { echo "PASS examples/$topo/$1"; }
no() { echo "FAIL examples/$topo/$1: $2"; [ -n "$3" ] && tail -4 "$3" | sed 's/^/    /'; }

pp=${RDMAX_BUILD:-build}/rdmax_pingpong_rc
for t in send put get fadd cswap; do
    for s in 1 64 4096; do
        case $t in fadd|cswap) [ $s = 64 ] || continue; s=8;; esac
        name=rc-$t-$s
        if [ "$topo" = dummy ]; then
            log=$out/$name-loop.log
            if $pp --loopback -t $t -s $s -n 200 -w 20 -d "$dev0" --csv "$out/$name.csv" --json "$out/$name.json" >"$log" 2>&1 &&
               check_table "$log" 1; then
                if python3 -c "import csv,json,sys; r=list(csv.DictReader(open(sys.argv[1]))); j=json.load(open(sys.argv[2]));
assert len(r)==1 and int(r[0]['bytes'])==$s and float(r[0]['t_typical'])>0
assert j['results'][0]['bytes']==$s and j['results'][0]['t_typical']>0" "$out/$name.csv" "$out/$name.json" 2>>"$log"
                then ok "$name loopback (table, CSV, JSON)"; else no "$name loopback" "CSV/JSON do not parse" "$log"; fi
            else no "$name loopback" "run failed or table malformed" "$log"; fi
            # as server and client: every size on veth (across the link); here one size per type, the
            # loopback run above has the others
            [ $s = 1 ] || [ $s = 4096 ] && continue
        fi
        port=$((port + 1))
        slog=$out/$name-server.log; clog=$out/$name-client.log
        rm -f "$slog" "$clog"
    rm -f "$slog" "$clog"  # wait_listen must not find an old run's line
        timeout 60 $pp -t $t -s $s -n 200 -w 20 -p $port -d "$dev0" >"$slog" 2>&1 &
        spid=$!
        wait_listen "$slog" $spid
        timeout 60 $pp -t $t -s $s -n 200 -w 20 -p $port -d "$dev1" "$addr0" >"$clog" 2>&1
        crc=$?
        wait $spid; src=$?
        if [ $crc = 0 ] && [ $src = 0 ] && check_table "$clog" 1; then ok "$name server+client"
        else no "$name server+client" "client exit $crc, server exit $src" "$clog"; tail -3 "$slog" | sed 's/^/    server: /'; fi
    done
done

# --no-check (the bench's whole-process instruction rows): payloads neither filled nor checked; the
# ping-pongs still complete, a put's poller waiting for its last byte, UD's numbering intact
if [ "$topo" = dummy ]; then
    for ts in send:64 put:1 put:64 get:64; do
        t=${ts%%:*}; s=${ts#*:}
        name=rc-$t-$s-nocheck; log=$out/$name.log
        if $pp --loopback --no-check -t $t -s $s -n 200 -w 20 -d "$dev0" >"$log" 2>&1 && check_table "$log" 1
        then ok "$name loopback --no-check"; else no "$name loopback --no-check" "run failed or table malformed" "$log"; fi
    done
    for s in 1 64; do
        name=ud-send-$s-nocheck; log=$out/$name.log
        if ${RDMAX_BUILD:-build}/rdmax_pingpong_ud --loopback --no-check -s $s -n 200 -w 20 -d "$dev0" >"$log" 2>&1 &&
            check_table "$log" 1 && grep -q "^client: datagrams missing 0, duplicated 0, out of order 0;" "$log"
        then ok "$name loopback --no-check"; else no "$name loopback --no-check" "run failed or datagrams miscounted" "$log"; fi
    done
fi

# --cm: the same ping-pongs with the connection set up through rdma_cm
for ts in send:64 put:4096 get:64 fadd:8; do
    t=${ts%%:*}; s=${ts#*:}
    name=rc-cm-$t-$s
    port=$((port + 1))
    slog=$out/$name-server.log; clog=$out/$name-client.log
    rm -f "$slog" "$clog"
    timeout 60 $pp --cm -t $t -s $s -n 200 -w 20 -p $port -d "$dev0" >"$slog" 2>&1 &
    spid=$!
    wait_listen "$slog"
    timeout 60 $pp --cm -t $t -s $s -n 200 -w 20 -p $port -d "$dev1" "$addr0" >"$clog" 2>&1
    crc=$?
    wait $spid; src=$?
    if [ $crc = 0 ] && [ $src = 0 ] && check_table "$clog" 1 && grep -q "listening on port $port (rdma_cm)" "$slog"
    then ok "$name server+client --cm"
    else no "$name server+client --cm" "client exit $crc, server exit $src" "$clog"; tail -3 "$slog" | sed 's/^/    server: /'; fi
done

ud=${RDMAX_BUILD:-build}/rdmax_pingpong_ud
# check_seq FILE WHO: the UD summary line, every count 0 (a clean link loses, repeats and reorders nothing)
zero_seq="datagrams missing 0, duplicated 0, out of order 0; rdmax ud.skipped 0, ud.late 0, ud.duplicates 0"
check_seq() { grep -q "^$2: $zero_seq\$" "$1"; }
for s in 1 64 1024; do
    name=ud-send-$s
    if [ "$topo" = dummy ]; then
        log=$out/$name-loop.log
        if $ud --loopback -s $s -n 200 -w 20 -d "$dev0" >"$log" 2>&1 && check_table "$log" 1; then ok "$name loopback"
        else no "$name loopback" "run failed or table malformed" "$log"; fi
        if check_seq "$log" client; then ok "$name loopback: datagram counts printed, all 0"
        else no "$name loopback: datagram counts" "no line '$zero_seq'" "$log"; fi
        # as server and client: every size on veth, here 64 B (as the RC ones above)
        [ $s = 64 ] || continue
    fi
    port=$((port + 1))
    slog=$out/$name-server.log; clog=$out/$name-client.log
    rm -f "$slog" "$clog"  # wait_listen must not find an old run's line
    timeout 60 $ud -s $s -n 200 -w 20 -p $port -d "$dev0" >"$slog" 2>&1 &
    spid=$!
    wait_listen "$slog" $spid
    timeout 60 $ud -s $s -n 200 -w 20 -p $port -d "$dev1" "$addr0" >"$clog" 2>&1
    crc=$?
    wait $spid; src=$?
    if [ $crc = 0 ] && [ $src = 0 ] && check_table "$clog" 1; then ok "$name server+client"
    else no "$name server+client" "client exit $crc, server exit $src" "$clog"; fi
    if check_seq "$clog" client && check_seq "$slog" server; then ok "$name server+client: datagram counts printed, all 0"
    else no "$name server+client: datagram counts" "no line '$zero_seq' from both" "$slog"; tail -2 "$clog"; fi
done

# control: the client sends its first ping twice (RDMAX_PINGPONG_TEST_DUPLICATE=1): the server counts one
# duplicate and answers once; rdmax sees two datagrams of its own numbering, so its counts stay 0
port=$((port + 1))
slog=$out/ud-dup-server.log; clog=$out/ud-dup-client.log
rm -f "$slog" "$clog"
timeout 60 $ud -s 64 -n 200 -w 20 -p $port -d "$dev0" >"$slog" 2>&1 &
spid=$!
wait_listen "$slog" $spid
RDMAX_PINGPONG_TEST_DUPLICATE=1 timeout 60 $ud -s 64 -n 200 -w 20 -p $port -d "$dev1" "$addr0" >"$clog" 2>&1
crc=$?
wait $spid; src=$?
if [ $crc = 0 ] && [ $src = 0 ] && check_seq "$clog" client &&
    grep -q "^server: datagrams missing 0, duplicated 1, out of order 0; rdmax ud.skipped 0, ud.late 0, ud.duplicates 0\$" "$slog"
then ok "ud control: a ping sent twice counts 1 duplicate at the server"
else no "ud control: a ping sent twice" "client exit $crc, server exit $src" "$slog"; fi

# UD multicast (-g): pings to a group, answers by unicast
port=$((port + 1))
slog=$out/ud-mcast-server.log; clog=$out/ud-mcast-client.log
rm -f "$slog" "$clog"
timeout 60 $ud -g 239.7.7.7 -s 64 -n 200 -w 20 -p $port -d "$dev0" >"$slog" 2>&1 &
spid=$!
wait_listen "$slog" $spid
timeout 60 $ud -g 239.7.7.7 -s 64 -n 200 -w 20 -p $port -d "$dev1" "$addr0" >"$clog" 2>&1
crc=$?
wait $spid; src=$?
if [ $crc = 0 ] && [ $src = 0 ] && check_table "$clog" 1; then ok "ud multicast -g server+client"
else no "ud multicast -g server+client" "client exit $crc, server exit $src" "$clog"; fi

# rdmax_bw: put, send, get; columns as ib_write_bw, numbers positive
bw=${RDMAX_BUILD:-build}/rdmax_bw
for t in put send get; do
    port=$((port + 1))
    slog=$out/bw-$t-server.log; clog=$out/bw-$t-client.log
    rm -f "$slog" "$clog"
    timeout 60 $bw -p $port -d "$dev0" >"$slog" 2>&1 &
    spid=$!
    wait_listen "$slog" $spid
    timeout 60 $bw -t $t -s 4096 -n 2000 -p $port -d "$dev1" "$addr0" >"$clog" 2>&1
    crc=$?
    wait $spid; src=$?
    if [ $crc = 0 ] && [ $src = 0 ] && awk '/BW average/ { h = 1; next } h && $1 == 4096 && $3 > 0 && $4 > 0 && $5 > 0 { ok = 1 } END { exit !ok }' "$clog"
    then ok "rdmax_bw -t $t server+client"; else no "rdmax_bw -t $t" "client exit $crc, server exit $src" "$clog"; fi
done
# rdmax_bw -c UD: numbered datagrams; a clean link loses, repeats and reorders none. The control: the client
# skips number 5 (RDMAX_BW_TEST_SKIP=1), so the server must count 1 missing while every datagram came.
for skip in 0 1; do
    port=$((port + 1))
    slog=$out/bw-ud-$skip-server.log; clog=$out/bw-ud-$skip-client.log
    rm -f "$slog" "$clog"
    timeout 60 $bw -p $port -d "$dev0" >"$slog" 2>&1 &
    spid=$!
    wait_listen "$slog" $spid
    RDMAX_BW_TEST_SKIP=$skip timeout 60 $bw -c UD -t send -s 1024 -n 2000 -p $port -d "$dev1" "$addr0" >"$clog" 2>&1
    crc=$?
    wait $spid; src=$?
    want="server: 1024 bytes: datagrams missing $skip (0 of 2000 sent never came), duplicated 0, out of order 0; rdmax ud.skipped 0, ud.late 0, ud.duplicates 0"
    what="rdmax_bw -c UD server+client: datagram counts printed, missing $skip"
    [ $skip = 1 ] && what="rdmax_bw -c UD control: a number skipped counts 1 missing at the server"
    if [ $crc = 0 ] && [ $src = 0 ] && grep -qxF "$want" "$slog"; then ok "$what"
    else no "$what" "client exit $crc, server exit $src, no line '$want'" "$slog"; fi
done
port=$((port + 1))
slog=$out/bw-cm-server.log; clog=$out/bw-cm-client.log
rm -f "$slog" "$clog"
timeout 60 $bw --cm -p $port -d "$dev0" >"$slog" 2>&1 &
spid=$!
wait_listen "$slog"
timeout 60 $bw --cm -t put -s 4096 -n 2000 -q 2 -p $port -d "$dev1" "$addr0" >"$clog" 2>&1
crc=$?
wait $spid; src=$?
if [ $crc = 0 ] && [ $src = 0 ] && awk '/BW average/ { h = 1; next } h && $1 == 4096 && $3 > 0 && $4 > 0 && $5 > 0 { ok = 1 } END { exit !ok }' "$clog"
then ok "rdmax_bw --cm -t put -q 2 server+client"; else no "rdmax_bw --cm" "client exit $crc, server exit $src" "$clog"; fi
port=$((port + 1))
slog=$out/ps-server.log; clog=$out/ps-client.log
rm -f "$slog" "$clog"
ps=${RDMAX_BUILD:-build}/rdmax_pageserver
timeout 60 $ps -p $port -d "$dev0" >"$slog" 2>&1 &
spid=$!
wait_listen "$slog" $spid
timeout 60 $ps -n 2000 -p $port -d "$dev1" "$addr0" >"$clog" 2>&1
crc=$?
wait $spid; src=$?
if [ $crc = 0 ] && [ $src = 0 ]; then ok "rdmax_pageserver server+client (pages checked)"
else no "rdmax_pageserver" "client exit $crc, server exit $src" "$clog"; fi

[ "$topo" = dummy ] || exit 0

# The small one-topic examples (examples/ex_*.c): each checks its own data and exits 0 only if it is right
# (and says "ok" last); with an unknown device each fails with the status named.
for x in ex_put ex_multicast ex_pending ex_rcache; do
    log=$out/$x.log
    timeout 120 ${RDMAX_BUILD:-build}/$x "$dev0" >"$log" 2>&1; rc=$?
    if [ $rc = 0 ] && [ "$(tail -1 "$log")" = ok ]; then ok "$x"; else no "$x" "exit $rc" "$log"; fi
    log=$out/$x-nodevice.log
    timeout 60 ${RDMAX_BUILD:-build}/$x nosuchdev >"$log" 2>&1; rc=$?
    if [ $rc = 1 ] && grep -q "^$x: rdmax_ctx_create: " "$log"; then ok "$x: unknown device, a clear error"
    else no "$x unknown device" "exit $rc" "$log"; fi
done
log=$out/ud-mcast-loop.log
if $ud --loopback -g 239.7.7.8 -s 64 -n 200 -w 20 >"$log" 2>&1 && check_table "$log" 1; then ok "ud multicast -g loopback"
else no "ud multicast -g loopback" "run failed or table malformed" "$log"; fi
# -a: every size, one row each (the rows are what is checked, so few iterations: the 8 MiB payloads,
# filled and checked each time, cost most)
log=$out/all.log
if $pp --loopback -t put -a -n 4 -w 1 >"$log" 2>&1 && check_table "$log" 23; then ok "put -a has 23 rows (2 B .. 8 MiB)"
else no "put -a" "expected 23 rows" "$log"; fi
# bad input: clear error, non-zero exit, no hang
for args in "-t nosuch" "-s 0" "-s 99999999999" "-n abc" "-p 70000" "--bogus" "-t fadd -s 16" "a b" "--cm --loopback"; do
    log=$out/bad.log
    timeout 10 $pp $args >"$log" 2>&1; rc=$?
    if [ $rc = 2 ] && [ -s "$log" ]; then ok "bad option '$args' rejected"
    else no "bad option '$args'" "exit $rc" "$log"; fi
done
log=$out/bad.log
timeout 10 $ud --cm >"$log" 2>&1; rc=$?
if [ $rc = 2 ] && grep -q "RC only" "$log"; then ok "rdmax_pingpong_ud --cm rejected (rdma_cm setup is RC only)"
else no "rdmax_pingpong_ud --cm" "exit $rc" "$log"; fi
timeout 10 $ud --own-pool >"$log" 2>&1; rc=$?
if [ $rc = 2 ] && grep -q "RC only" "$log"; then ok "rdmax_pingpong_ud --own-pool rejected (RC only)"
else no "rdmax_pingpong_ud --own-pool" "exit $rc" "$log"; fi
# --own-pool: the send ping-pong on endpoints with receive buffers of their own (ep desc recv_pool)
log=$out/own-pool.log
if [ "$topo" = dummy ]; then
    if timeout 60 $pp --loopback --own-pool -t send -s 8 -n 200 -w 20 -d "$dev0" >"$log" 2>&1 && check_table "$log" 1
    then ok "send --own-pool loopback"; else no "send --own-pool loopback" "run failed or table malformed" "$log"; fi
fi
log=$out/help.log
if $pp -h >"$log" 2>&1 && grep -q -- "--loopback" "$log" && grep -q -- "--cm" "$log" && grep -q "\[1000\]" "$log"; then ok "-h lists options with defaults"
else no "-h" "help text incomplete" "$log"; fi
log=$out/unreachable.log
start=$(date +%s)
timeout 30 $pp -p 1 127.0.0.1 >"$log" 2>&1; rc=$?
el=$(( $(date +%s) - start ))
# no time limit asserted: `timeout 30` turns a hang into exit 124
if [ $rc = 1 ] && grep -q "cannot connect to 127.0.0.1" "$log"; then ok "unreachable peer: retried until the connect deadline, then a clear error"
else no "unreachable peer" "exit $rc after ${el}s" "$log"; fi
log=$out/nodevice.log
if ! $pp --loopback -d nosuchdev >"$log" 2>&1 && grep -q "nosuchdev" "$log"; then ok "unknown device named in the error"
else no "unknown device" "no clear error" "$log"; fi
# a setup error after the device opened (listen on a port in use) is printed once: by the logger, and
# the program's own line names the option, not the library's text again
# (a port of its own: the earlier cases' servers may still hold theirs)
port=$((port + 100))
slog=$out/busy-first.log; log=$out/busy-second.log
rm -f "$slog" "$log"
timeout 30 $pp -p $port -d "$dev0" >"$slog" 2>&1 &
spid=$!
wait_listen "$slog" $spid
rc=none; grep -q listening "$slog" || echo "the first server did not listen on port $port" >"$log"
grep -q listening "$slog" && { timeout 30 $pp -p $port -d "$dev0" >"$log" 2>&1; rc=$?; }
kill $spid 2>/dev/null; wait $spid 2>/dev/null
n=$(grep -c 'rdmax error: ' "$log")
text=$(grep 'rdmax error: ' "$log" | head -1 | sed 's/.*rdmax error: //')
again=0; [ -n "$text" ] && again=$(grep -cF -- "$text" "$log")
if [ $rc = 1 ] && [ "$n" = 1 ] && [ "$again" = 1 ] && grep -q "cannot listen on port $port" "$log"; then
    ok "listen on a busy port: the error printed once"
else no "listen on a busy port" "exit $rc, $n library error lines, its text $again times" "$log"; fi
