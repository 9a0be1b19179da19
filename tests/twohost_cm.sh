#!/bin/sh
# rdma_cm between the two hosts of tests/vm/run --topo twohost: rdmax_pingpong_rc --cm, over IPv4 and then
# IPv6 (2001:db8::1 and ::2 on each host's eth0, static neighbours like the IPv4 ones). Host 0 serves, host 1
# connects (rdma_cm's connect retries until host 0 listens); each side checks its own end.
# Usage: tests/twohost_cm.sh (in both guests; RDMAX_HOST, RDMAX_TEST_DEV0 from tests/vm/run)
cd "$(dirname "$0")/.." || exit 1
B=${RDMAX_BUILD:-build}
h=${RDMAX_HOST:-0} p=$((1 - ${RDMAX_HOST:-0}))
dev=${RDMAX_TEST_DEV0:-rxe$h}
pp=$B/rdmax_pingpong_rc
out=build/test-results/twohost/h$h
mkdir -p "$out"
ip -6 addr replace 2001:db8::$((h + 1))/64 dev eth0 nodad &&
    ip -6 neigh replace 2001:db8::$((p + 1)) lladdr 02:00:00:00:00:0$((p + 1)) dev eth0 nud permanent ||
    { echo "FAIL twohost-cm/h$h: IPv6 setup failed"; exit 1; }
i=0  # rxe adds the IPv6 GID from a netdev notifier
while ! grep -qs '^2001:0db8:' /sys/class/infiniband/"$dev"/ports/1/gids/* && [ $i -lt 100 ]; do
    sleep 0.1; i=$((i + 1))
done
fail=0
port=18700
for addr in 192.0.2.1 2001:db8::1; do
    log=$out/$port.log
    if [ "$h" = 0 ]; then
        timeout 120 $pp --cm -t send -s 64 -n 200 -w 20 -p $port -d "$dev" >"$log" 2>&1; rc=$?
        what="server"
    else
        timeout 120 $pp --cm -t send -s 64 -n 200 -w 20 -p $port -d "$dev" "$addr" >"$log" 2>&1; rc=$?
        what="client to $addr"
        [ $rc = 0 ] && ! grep -q '^ *64 *200 ' "$log" && rc=99  # the client prints the latency row
    fi
    if [ $rc = 0 ]; then echo "PASS twohost-cm/h$h/rdmax_pingpong_rc --cm $what (port $port)"
    else echo "FAIL twohost-cm/h$h/rdmax_pingpong_rc --cm $what (port $port): exit $rc"; tail -4 "$log" | sed 's/^/    /'; fail=1; fi
    port=$((port + 1))
done
exit $fail
