#!/bin/sh
# The examples under valgrind memcheck, on a device (in the test VM): ping-pong (RC send, put, get, fadd,
# cswap; UD), bandwidth (put, send, get) and the page server, each in one process (--loopback) and
# (long form) as server and client processes, both under valgrind. Any memcheck error, or a definite
# leak, fails the run (--error-exitcode); tests/valgrind.supp holds suppressions for the verbs provider's
# own code only, each with its reason.
# Usage: tests/valgrind_examples.sh [short|long]   (short: one ping-pong in make test; long: make soak)
mode=${1:-long}
cd "$(dirname "$0")/.." || exit 1
B=${RDMAX_BUILD:-build}
out=build/test-results/valgrind; mkdir -p "$out"
dev0=${RDMAX_TEST_DEV0:-rxe0}
addr0=${RDMAX_TEST_ADDR0:-127.0.0.1}
port=19600
vg="valgrind --tool=memcheck --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite
    --show-leak-kinds=definite --track-origins=yes --suppressions=tests/valgrind.supp --gen-suppressions=all
    --num-callers=30"
command -v valgrind >/dev/null || { echo "FAIL valgrind/setup: valgrind is not installed (tests/deps.sh)"; exit 1; }

# one NAME CMD...: an example in one process under valgrind
one() {
    name=$1; shift
    log=$out/$name.log
    if timeout 900 $vg "$@" >"$log" 2>&1; then
        echo "PASS valgrind/$name: no memcheck errors ($(grep -c '' "$log") lines of output)"
    else
        rc=$?
        echo "FAIL valgrind/$name: exit $rc ($(grep -o 'ERROR SUMMARY: [0-9]* errors' "$log" | tail -1))"
        grep -E '^==[0-9]+== (Invalid|Conditional|Use of|Syscall|Source|Mismatched|[0-9,]+ bytes in)' "$log" |
            head -5 | sed 's/^/    /'
    fi
}

# pair NAME PROG SERVER-ARGS -- CLIENT-ARGS: server and client processes, both under valgrind
pair() {
    name=$1; prog=$2; shift 2
    sargs=""
    while [ "$1" != -- ]; do sargs="$sargs $1"; shift; done
    shift
    port=$((port + 1))
    slog=$out/$name-server.log; clog=$out/$name-client.log
    rm -f "$slog" "$clog"
    # shellcheck disable=SC2086
    timeout 900 $vg $prog $sargs -p $port -d "$dev0" >"$slog" 2>&1 &
    spid=$!
    i=0
    while [ $i -lt 600 ] && ! grep -q listening "$slog" 2>/dev/null; do sleep 0.2; i=$((i + 1)); done
    timeout 900 $vg $prog "$@" -p $port -d "$dev0" "$addr0" >"$clog" 2>&1
    crc=$?
    wait $spid; src=$?
    if [ $crc = 0 ] && [ $src = 0 ]; then
        echo "PASS valgrind/$name server+client: no memcheck errors"
    else
        echo "FAIL valgrind/$name server+client: client exit $crc, server exit $src"
        grep -hE '^==[0-9]+== (Invalid|Conditional|Use of|Syscall|[0-9,]+ bytes in)' "$slog" "$clog" | head -5 |
            sed 's/^/    /'
    fi
}

pp=$B/rdmax_pingpong_rc
one pingpong-rc-send $pp --loopback -t send -s 64 -n 100 -w 10 -d "$dev0"
[ "$mode" = short ] && exit 0
for t in put get; do one pingpong-rc-$t $pp --loopback -t $t -s 4096 -n 100 -w 10 -d "$dev0"; done
for t in fadd cswap; do one pingpong-rc-$t $pp --loopback -t $t -s 8 -n 100 -w 10 -d "$dev0"; done
one pingpong-ud $B/rdmax_pingpong_ud --loopback -s 64 -n 100 -w 10 -d "$dev0"
for t in put send get; do one bw-$t $B/rdmax_bw --loopback -t $t -s 4096 -n 500 -d "$dev0"; done
one pageserver $B/rdmax_pageserver --loopback -n 500 -d "$dev0"
pair pingpong-rc-send $pp -t send -s 64 -n 100 -w 10 -- -t send -s 64 -n 100 -w 10
pair pingpong-ud $B/rdmax_pingpong_ud -s 64 -n 100 -w 10 -- -s 64 -n 100 -w 10
pair bw-put $B/rdmax_bw -- -t put -s 4096 -n 500
pair pageserver $B/rdmax_pageserver -- -n 500
