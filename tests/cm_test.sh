#!/bin/sh
# rdma_cm connection setup on a device (build/cm_test), over IPv4 and IPv6. The IPv6 addresses are added
# here (2001:db8::/64, the documentation prefix; rxe adds a GID for each): dummy: 2001:db8::1 on sr0;
# veth: 2001:db8::1 on veth0 and 2001:db8::2 on veth1, with the per-pair routes the harness sets up for
# IPv4 (rules on the outgoing device, since rdma_cm checks the route back to a client bound to its
# netdev), so traffic from one end to the other crosses the veth link.
# Usage: tests/cm_test.sh dummy|veth
topo=${1:-dummy}
cd "$(dirname "$0")/.." || exit 1
B=${RDMAX_BUILD:-build}
addr4=${RDMAX_TEST_ADDR0:-192.0.2.1}
addr6=2001:db8::1
if [ "$topo" = veth ]; then
    ip -6 addr replace 2001:db8::1/64 dev veth0 nodad &&
    ip -6 addr replace 2001:db8::2/64 dev veth1 nodad &&
    { ip -6 rule show | grep -q 'pref 1000\|^1000:' || ip -6 rule add pref 1000 lookup local; } &&
    { ip -6 rule del pref 0 lookup local 2>/dev/null; true; } &&
    ip -6 route replace 2001:db8::2 dev veth0 src 2001:db8::1 table 100 &&
    ip -6 route replace 2001:db8::1 dev veth1 src 2001:db8::2 table 101 &&
    { ip -6 rule show | grep -q 'lookup 100' || ip -6 rule add pref 100 from 2001:db8::1 to 2001:db8::2 oif veth0 lookup 100; } &&
    { ip -6 rule show | grep -q 'lookup 101' || ip -6 rule add pref 101 from 2001:db8::2 to 2001:db8::1 oif veth1 lookup 101; } &&
    ip -6 neigh replace 2001:db8::2 lladdr 02:00:00:00:00:02 dev veth0 nud permanent &&
    ip -6 neigh replace 2001:db8::1 lladdr 02:00:00:00:00:01 dev veth1 nud permanent ||
    { echo "FAIL cm/$topo: IPv6 setup failed"; exit 1; }
    devs="${RDMAX_TEST_DEV0:-rxe0} ${RDMAX_TEST_DEV1:-rxe1}"
else
    ip -6 addr replace 2001:db8::1/64 dev sr0 nodad || { echo "FAIL cm/$topo: IPv6 setup failed"; exit 1; }
    devs=${RDMAX_TEST_DEV0:-rxe0}
fi
# rxe adds the GIDs from a netdev notifier: wait until each device has its IPv6 one (up to 10 s)
for d in $devs; do
    i=0
    while ! grep -qs '^2001:0db8:' /sys/class/infiniband/"$d"/ports/1/gids/* && [ $i -lt 100 ]; do
        sleep 0.1; i=$((i + 1))
    done
done
exec "$B/cm_test" "$addr4" "$addr6"
