#!/bin/sh
# make soak: the long forms of the fault tests, each in its own VM boot (README, "Faults, fuzzing and
# sanitizers"):
#   netem    every RC operation type and UD under every setting (clean, loss 1% and 5%, delay 1ms 200us,
#            delay with 25% reorder, duplicate 1%), 20,000 operations of 64 bytes each; then 16 KiB puts
#            and gets, 2,000 each, under every setting, and 1 KiB gets under delay (veth); on each kernel of
#            RDMAX_SOAK_KERNELS
#   twohost  the two-host test (checked streams, then a host crashed) under netem loss 1% and
#            duplicate 1% on both hosts' link, and with its connections set up through rdma_cm
#   kill     100 rounds of a peer SIGKILLed at a random point (dummy), on each kernel
#   san      the device tests built with ASan+UBSan, the slow ones too, and 20 killed-peer rounds
#   valgrind every example under memcheck, in one process and as server and client (dummy)
# Ends with "N passed, N failed"; logs in build/test-results/soak/. RDMAX_SOAK_NETEM_OPS,
# RDMAX_SOAK_NETEM_DELAY_OPS (the streams under delay and reorder, ~70x slower on rxe; default the same),
# RDMAX_SOAK_KILL_ROUNDS and RDMAX_SOAK_KERNELS (default "6.1 6.12") change the sizes.
cd "$(dirname "$0")/.." || exit 1
res=build/test-results/soak
mkdir -p "$res"
log=$res/all.log
: > "$log"
start=$(date +%s)

# vm NAME TOPO KERNEL CMD...: one VM boot; PASS/FAIL lines to the summary, netem rows and the kill tally
# to the output
vm() {
    name=$1; topo=$2; kernel=$3; shift 3
    t0=$(date +%s)
    tests/vm/run --topo "$topo" --kernel "$kernel" --timeout 14400 -- "$@" > "$res/$name.log" 2>&1
    rc=$?
    sed -n -E 's/^(h[01]: )?((PASS|FAIL) )/\2/p' "$res/$name.log" | sed "s#^\(PASS\|FAIL\) #\1 $name/#" | tee -a "$log"
    grep -E '^(row|# kill_test: [0-9]+ rounds:|vm: topo)' "$res/$name.log"
    if [ $rc -ne 0 ] && ! grep -q -E '^(h[01]: )?FAIL ' "$res/$name.log"; then
        echo "FAIL soak/$name: the run failed (status $rc)" | tee -a "$log"
        tail -20 "$res/$name.log"
    fi
    echo "soak $name: $(( $(date +%s) - t0 )) s"
}

ops=${RDMAX_SOAK_NETEM_OPS:-20000}
dops=${RDMAX_SOAK_NETEM_DELAY_OPS:-$ops}
for k in ${RDMAX_SOAK_KERNELS:-6.1 6.12}; do
    echo "== soak, kernel $k: netem, every operation under every setting, $ops each (veth)"
    vm netem-$k veth $k build/netem_test -n "$ops" -D "$dops"
    echo "== soak, kernel $k: netem, 16 KiB puts and gets under every setting"
    vm netem16k-$k veth $k build/netem_test -n 2000 -s 16384 -t put,get
    # 1 KiB gets under delay: where 6.1's rxe once reported a get successful with its data missing
    echo "== soak, kernel $k: netem, 1 KiB gets under delay, $ops"
    vm netem1k-get-$k veth $k build/netem_test -n "$ops" -D "$dops" -s 1024 -t get -S clean,delay
    echo "== soak, kernel $k: killed peers (dummy)"
    vm kill-$k dummy $k build/kill_test -n "${RDMAX_SOAK_KILL_ROUNDS:-100}"
done
for n in "loss 1%" "duplicate 1%"; do
    echo "== soak: two hosts under netem $n"
    RDMAX_NETEM=$n vm "twohost-$(echo "$n" | tr -d ' %')" twohost 6.1 tests/guest.sh twohost
done
echo "== soak: two hosts, connections set up through rdma_cm"
RDMAX_TWOHOST_SETUP=cm vm twohost-cm twohost 6.1 tests/guest.sh twohost
echo "== soak: the device tests built with ASan+UBSan, all of them, 20 killed-peer rounds (dummy)"
RDMAX_SAN_LONG=1 RDMAX_SAN_KILL_ROUNDS=20 RDMAX_VALGRIND=0 vm san dummy 6.1 tests/guest.sh san
echo "== soak: valgrind memcheck over every example (dummy)"
vm valgrind dummy 6.1 tests/valgrind_examples.sh long

passed=$(grep -c '^PASS ' "$log")
failed=$(grep -c '^FAIL ' "$log")
echo "make soak took $(( $(date +%s) - start )) s; logs in $res/"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
