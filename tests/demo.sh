#!/bin/sh
# make demo: the RC send ping-pong on soft-RoCE (or the host's own device) beside ib_send_lat, run the way
# `make bench` runs them: same boot, same device, same size, server pinned to CPU 1 and client to CPU 0
# (taskset, as bench/guest.sh does: unpinned, the guest may leave both busy-polling processes on one
# CPU), interleaved three times each (rdmax first in rounds 1 and 3, ib_send_lat first in round 2).
# Prints every run's t_typical and the median of the three per-round ratios rdmax / ib_send_lat with
# their spread (lowest, highest).
# DEMO_ITERS (5000) iterations of 8 bytes per run.
cd "$(dirname "$0")/.." || exit 1
mkdir -p build
cat > build/demo-guest.sh <<'G'
#!/bin/sh
dev=${RDMAX_TEST_DEV0:-rxe0}; addr=${RDMAX_TEST_ADDR0:-127.0.0.1}; gid=${RDMAX_TEST_GID_INDEX0:-1}
n=${DEMO_ITERS:-5000}
srv="taskset -c 1" cli="taskset -c 0"
[ "$(nproc)" -ge 2 ] || srv= cli=
# wait_port PORT: until a TCP socket listens on PORT (state 0A in /proc/net/tcp*), at most 10 s
wait_port() {
    h=$(printf '%04X' "$1") i=0
    while [ $i -lt 200 ]; do
        grep -q ":$h [0-9A-F:]* 0A" /proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
        sleep 0.05
        i=$((i + 1))
    done
    return 1
}
# t_typical of a perftest-style latency table (rdmax_pingpong prints the same columns)
typical() { awk '/t_typical/ { h = 1; next } h && $1 ~ /^[0-9]+$/ && NF >= 5 { print $5; exit }' "$1"; }
run_rdmax() {
    timeout 120 $srv build/rdmax_pingpong_rc -s 8 -n $n -d $dev -p 18600 > build/demo-server.log 2>&1 &
    wait_port 18600
    timeout 120 $cli build/rdmax_pingpong_rc -s 8 -n $n -d $dev -p 18600 $addr > "$1" 2>&1
    st=$?
    wait
    return $st
}
run_perftest() {
    # perftest estimates the CPU clock from /proc/cpuinfo and timing loops; under emulation that
    # estimate is sometimes rejected ("inf" columns), so it gets three tries.
    for try in 1 2 3; do
        timeout 120 $srv ib_send_lat -d $dev -x $gid -F -s 8 -n $n -p 18601 > build/demo-perftest-server.log 2>&1 &
        wait_port 18601
        timeout 120 $cli ib_send_lat -d $dev -x $gid -F -s 8 -n $n -p 18601 $addr > "$1" 2>&1
        st=$?
        wait
        grep -q inf "$1" || break
    done
    return $st
}
echo "device $dev, kernel $(uname -r), $n iterations of 8 bytes per run; server on CPU 1, client on CPU 0"
echo
printf '%-6s %-28s %-28s %s\n' round "rdmax_pingpong_rc -t send" "ib_send_lat (perftest)" "ratio"
rc=0 ratios=
for r in 1 2 3; do
    # the even round runs ib_send_lat first: neither tool always follows the other's exit
    [ $((r % 2)) = 0 ] && { run_perftest build/demo-perftest-$r.log || { rc=1; echo "ib_send_lat failed:"; tail -5 build/demo-perftest-$r.log; }; }
    run_rdmax build/demo-rdmax-$r.log || { rc=1; echo "rdmax_pingpong_rc failed:"; tail -5 build/demo-rdmax-$r.log; }
    [ $((r % 2)) = 1 ] && { run_perftest build/demo-perftest-$r.log || { rc=1; echo "ib_send_lat failed:"; tail -5 build/demo-perftest-$r.log; }; }
    a=$(typical build/demo-rdmax-$r.log) b=$(typical build/demo-perftest-$r.log)
    q=$(awk -v a="$a" -v b="$b" 'BEGIN { if (a != "" && b > 0) printf "%.3f", a / b }')
    printf '%-6s %-28s %-28s %s\n' $r "${a:-failed} us" "${b:-failed} us" "${q:--}"
    [ -n "$q" ] && ratios="$ratios $q"
done
echo
echo "t_typical is the median of a run's iterations (half the round trip). Each tool's full table:"
echo "build/demo-rdmax-N.log and build/demo-perftest-N.log."
set -- $ratios
if [ $# -gt 0 ]; then
    echo "$ratios" | tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{ v[NR] = $1 } END {
        m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "rdmax / ib_send_lat: median ratio %.3f over %d rounds (spread %.3f .. %.3f)\n", m, NR, v[1], v[NR] }'
else
    echo "rdmax / ib_send_lat: no ratio (runs failed)"
    rc=1
fi
exit $rc
G
chmod +x build/demo-guest.sh
exec tests/vm/run --timeout 900 -- build/demo-guest.sh
