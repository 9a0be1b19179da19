#!/bin/sh
# The device tests of one topology; runs where an RDMA device is (inside the test VM, or on a host with
# its own device). Prints PASS/FAIL lines and each test's seconds ("# NAME: N s"); logs go to
# build/test-results/TOPO/.
# Usage: tests/guest.sh dummy|veth|twohost|san (twohost: in both guests at once, RDMAX_HOST 0 or 1;
# san: on dummy, the device tests built with ASan+UBSan and an example under valgrind)
topo=${1:-dummy}
cd "$(dirname "$0")/.." || exit 1
out=build/test-results/$topo
[ "$topo" = twohost ] && out=$out/h${RDMAX_HOST:-0}
mkdir -p "$out"
ulimit -l unlimited 2>/dev/null
export RDMAX_LOG_LEVEL=${RDMAX_LOG_LEVEL:-warn}
status=0
B=${RDMAX_BUILD:-build}
export RDMAX_BUILD=$B

# What this run tests on, once per topology: device, its kernel driver, netdev and the kernel.
# Hardware has a driver link in sysfs; soft-RoCE has none (a virtual device) but names itself "rxe".
devices=$(printf '%s\n' ${RDMAX_TEST_DEV0:-} ${RDMAX_TEST_DEV1:-} | awk 'NF && !seen[$0]++')
[ -n "$devices" ] || devices=$(ls /sys/class/infiniband 2>/dev/null)
for dev in $devices; do
    sys=/sys/class/infiniband/$dev
    if [ -e "$sys/device/driver/module" ]; then drv=$(basename "$(readlink -f "$sys/device/driver/module")")
    else case $(cat "$sys/node_desc" 2>/dev/null) in rxe) drv=rdma_rxe;; *) drv=unknown;; esac; fi
    nd=$(rdma link show "$dev/1" 2>/dev/null | sed -n 's/.*netdev \([^ ]*\).*/\1/p')
    [ -n "$nd" ] || nd=$(cat "$sys/parent" 2>/dev/null)
    echo "INFO device $dev driver $drv netdev ${nd:-none} kernel $(uname -r)"
done

# UD multicast needs a route for the multicast range on each device's netdev.
for dev in ${RDMAX_TEST_DEV0:-} ${RDMAX_TEST_DEV1:-}; do
    nd=$(rdma link show "$dev/1" 2>/dev/null | sed -n 's/.*netdev \([^ ]*\).*/\1/p')
    [ -n "$nd" ] && [ "$dev" = "${RDMAX_TEST_DEV0:-}" ] && ip route replace 224.0.0.0/4 dev "$nd" 2>/dev/null
done

# run NAME CMD...: a test program that prints its own PASS/FAIL lines; a crash or a non-zero exit
# without a FAIL line is a failure too.
run() {
    name=$1; shift
    t0=$(date +%s)
    timeout 600 "$@" > "$out/$name.log" 2>&1
    rc=$?
    echo "# $name: $(( $(date +%s) - t0 )) s"
    grep -E '^(PASS|FAIL) ' "$out/$name.log"
    if [ $rc -ne 0 ]; then
        status=1
        grep -q '^FAIL ' "$out/$name.log" || { echo "FAIL $name: exited with status $rc"; tail -5 "$out/$name.log" | sed 's/^/    /'; }
    fi
}

# run_san NAME CMD...: the same for a program built with ASan+UBSan (make san-tests); its lines read
# "PASS asan+ubsan/...". A sanitizer report fails it even where the exit status does not show it (a
# report from a child process such as kill_test's peer).
run_san() {
    name=$1; shift
    log=$out/$name.log
    t0=$(date +%s)
    timeout 900 env ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
        "$@" > "$log" 2>&1
    rc=$?
    echo "# asan+ubsan/$name: $(( $(date +%s) - t0 )) s"
    grep -E '^(PASS|FAIL) ' "$log" | sed -E 's#^(PASS|FAIL) #\1 asan+ubsan/#'
    if grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:' "$log"; then
        status=1
        echo "FAIL asan+ubsan/$name: sanitizer report (log $log)"
        grep -m3 -E 'ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|SUMMARY:' "$log" | sed 's/^/    /'
    elif [ $rc -ne 0 ]; then
        status=1
        grep -q '^FAIL ' "$log" || { echo "FAIL asan+ubsan/$name: exited with status $rc"; tail -5 "$log" | sed 's/^/    /'; }
    fi
}

if [ "$topo" = san ]; then
    S=$B/san
    run_san datapath_loopback $S/datapath_test loopback
    run_san failure $S/failure_test loopback
    run_san oob_device $S/oob_test device
    run_san ud_loopback $S/ud_test loopback
    run_san numa $S/numa_test
    run_san profile $S/profile_test
    run_san misuse_rc $S/misuse_test
    run_san srq $S/srq_test
    run_san kill $S/kill_test -n ${RDMAX_SAN_KILL_ROUNDS:-3}
    # make soak (RDMAX_SAN_LONG=1) adds the slow ones: the RC+UD misuse table (46 s under ASan in the
    # VM) and the pending-queue stress (72 s)
    if [ "${RDMAX_SAN_LONG:-0}" = 1 ]; then
        run_san misuse_rcud $S/misuse_rcud_test
        run_san pending $S/pending_test
    fi
    # one example under valgrind memcheck (make soak: every example, in one process and as two)
    [ "${RDMAX_VALGRIND:-1}" = 0 ] || run valgrind tests/valgrind_examples.sh short
elif [ "$topo" = twohost ]; then
    run twohost_cm tests/twohost_cm.sh
    # UD multicast through rdma_cm across the hosts: members on both, one leaves (before twohost: it
    # crashes host 1)
    run ud_twohost $B/ud_test twohost
    # a request/response service (examples/rdmax_rpc): server on h0, 8 clients on h1, clients and then
    # the server SIGKILLed (TCP record setup; 52 s on a quiet host; in the VM its only run: dummy runs the
    # same script on a host's own device only). Back in make test: the link's deaths were a virtio
    # transmit stall, gone without the event index (tests/vm/run)
    run rpc_twohost tests/rpc_test.sh twohost tcp
    # make soak: the same under netem on the two-host link (RDMAX_NETEM, e.g. "loss 1%", on each side)
    if [ -n "${RDMAX_NETEM:-}" ]; then
        tc qdisc replace dev "${RDMAX_TEST_NETDEV0:-eth0}" root netem $RDMAX_NETEM ||
            { echo "FAIL twohost/netem: tc qdisc replace dev ${RDMAX_TEST_NETDEV0:-eth0} root netem $RDMAX_NETEM"; exit 1; }
        echo "# netem $RDMAX_NETEM on ${RDMAX_TEST_NETDEV0:-eth0}"
    fi
    # host 0 prints the verdicts; host 1 serves until host 0 crashes it
    run twohost $B/twohost_test
elif [ "$topo" = veth ]; then
    run datapath_cross $B/datapath_test cross
    run failure_linkcut $B/failure_test linkcut
    run ud_cross $B/ud_test cross
    run srq_breakers $B/srq_test breakers
    run rcache_device_cross $B/rcache_device_test
    run examples_veth tests/examples_test.sh veth
    run cm_veth tests/cm_test.sh veth
    # each netem fault once, one RC operation type each, and UD under loss and duplicates: 20,000
    # operations per stream, 500 under 'delay' (go-back-N: 2,000 took 29-35 s) and 2,000 under 'loss5' (a
    # retry timeout per lost window tail: 20,000 took 128 s); make soak: every type under every setting
    run netem $B/netem_test -n ${RDMAX_NETEM_OPS:-20000} -D ${RDMAX_NETEM_DELAY_OPS:-500} \
        -L ${RDMAX_NETEM_LOSS5_OPS:-2000} --rotate
    # last: it deletes rxe1 (and adds it back)
    run failure_devices $B/failure_test devices
else
    run datapath_loopback $B/datapath_test loopback
    run failure $B/failure_test loopback
    run oob_device $B/oob_test device
    run ud_loopback $B/ud_test loopback
    run numa $B/numa_test
    # the pending-queue stress: 64 endpoints x 2,500 operations (10,000 under ASan in make soak)
    run pending $B/pending_test ${RDMAX_PENDING_OPS:-2500}
    run rcache_monitor $B/host/rcache_monitor_test
    run rcache_device $B/rcache_device_test
    run rcache_device_static $B/rcache_device_static_test routes
    RDMAX_RCACHE_MONITOR=off run rcache_device_nomonitor $B/rcache_device_test routes
    RDMAX_RCACHE_MONITOR=off run rcache_device_hooks $B/rcache_device_hooks_test
    run profile $B/profile_test
    run profile_points $B/profile_points_test
    run misuse_rc $B/misuse_test
    run misuse_rcud $B/misuse_rcud_test
    run srq $B/srq_test
    run scale_memory $B/scale_test memory 100
    run scale_pairs $B/scale_test pairs 2000
    run scale_listen $B/scale_test listen 50 20
    run scale_credits4 $B/scale_test credits 4 2000
    run scale_credits50 $B/scale_test credits 50 200
    run scale_cqshare $B/scale_test cqshare
    # default windows: a busy peer among 2,000 idle endpoints grows to max_window and back (12 s in the VM)
    run scale_adapt $B/scale_test adapt 1000
    # 400 extra pairs grow the shared pool among 50 idle ones and go: traffic gives it back (2 s in the VM)
    run scale_giveback $B/scale_test giveback 50 400
    # receive CQs capped at 128 entries (a test hook): 200 endpoints over 5 CQs, a busy pair's window grows in a 6th
    run scale_rgroups $B/scale_test rgroups 100
    # 10,000 endpoints in one context with the default descriptors (5,000 pairs; 55 s in the VM, 500 MiB
    # of the guest's 1 GiB)
    run scale_tenk $B/scale_test tenk 5000
    run examples_dummy tests/examples_test.sh dummy
    run readme tests/readme_test.sh
    run cm_dummy tests/cm_test.sh dummy
    # a request/response service (examples/rdmax_rpc): 8 clients x 16 endpoints, clients and then the
    # server SIGKILLed, TCP record setup. In the VM twohost's rpc_twohost runs the same script and asserts
    # the same, across two hosts (here: 111 s of make test); so only on a host's own device (no twohost)
    [ "${RDMAX_VM:-0}" = 1 ] || run rpc tests/rpc_test.sh dummy tcp
    # peers SIGKILLed at random points of their life (make soak: 100 rounds)
    run kill $B/kill_test -n ${RDMAX_KILL_ROUNDS:-10}
fi
exit $status
