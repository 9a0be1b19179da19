#!/bin/sh
# make test: host tests, then the device tests on each topology (in the soft-RoCE VM, or directly on the
# host's RDMA device; tests/vm/run decides). Ends with "N passed, N failed".
cd "$(dirname "$0")/.." || exit 1
res=build/test-results
mkdir -p "$res"
log=$res/all.log
: > "$log"
start=$(date +%s)

# host NAME CMD...: a host test program; a crash without a FAIL line still counts as a failure.
host() {
    name=$1; shift
    "$@" > "$res/$name.log" 2>&1
    rc=$?
    grep -E '^(PASS|FAIL) ' "$res/$name.log" | tee -a "$log"
    if [ $rc -ne 0 ] && ! grep -q '^FAIL ' "$res/$name.log"; then
        echo "FAIL $name: exited with status $rc" | tee -a "$log"
        tail -5 "$res/$name.log"
    fi
}

echo "== host tests"
host compile tests/compile_matrix.sh
host oob build/host/oob_test
host arbiter build/host/arbiter_test
host rcache build/host/rcache_test
host memhook build/host/memhook_test
host fuzz_replay tests/fuzz/replay.sh
host rcache_monitor build/host/rcache_monitor_test
host embed build/host/embed_test build/host/embed_impl.o build/host/embed_impl_cxx.o
host profile_objcode tests/profile_objcode.sh
host errors build/host/errors_test
host fabric build/host/fabric_test
host errors_once tests/errors_once.sh
host install tests/install_test.sh

# san: the device tests built with ASan+UBSan (make san-tests) and valgrind, on the dummy topology
for sec in dummy veth twohost san; do
    case $sec in
    san) topo=dummy; echo "== device tests built with ASan+UBSan, and an example under valgrind, topology dummy";;
    *) topo=$sec; echo "== device tests, topology $topo";;
    esac
    tests/vm/run --topo $topo --timeout 1800 -- tests/guest.sh $sec > "$res/vm-$sec.log" 2>&1
    rc=$?
    grep -E '^(h[01]: )?INFO device ' "$res/vm-$sec.log" | tee -a "$log"
    # (twohost tags each line of a guest's output with h0: or h1:)
    sed -n -E 's/^(h[01]: )?((PASS|FAIL) )/\2/p' "$res/vm-$sec.log" | tee -a "$log"
    grep '^vm: ' "$res/vm-$sec.log"
    if [ $rc -ne 0 ] && ! grep -q -E '^(h[01]: )?FAIL ' "$res/vm-$sec.log"; then
        echo "FAIL vm/$sec: the run failed (status $rc)" | tee -a "$log"
        tail -40 "$res/vm-$sec.log"
    fi
done

passed=$(grep -c '^PASS ' "$log")
failed=$(grep -c '^FAIL ' "$log")
echo "make test took $(( $(date +%s) - start )) s; logs in $res/"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
