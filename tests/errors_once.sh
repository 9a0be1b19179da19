#!/bin/sh
# Every program prints a setup error once: each example and the README's program, pointed at a device that
# does not exist, must exit non-zero with exactly one "rdmax error:" line on stderr (the logger's), and the
# program's own line must not repeat the library's text.
cd "$(dirname "$0")/.." || exit 1
B=${RDMAX_BUILD:-build}
out=build/test-results/errors; mkdir -p "$out"
fail=0
check() {
    name=$1; shift
    log=$out/$name.log
    RDMAX_DEVICE=nosuchdev timeout 30 "$@" >"$log" 2>&1
    rc=$?
    n=$(grep -c 'rdmax error: ' "$log")
    text=$(grep 'rdmax error: ' "$log" | head -1 | sed 's/.*rdmax error: //')
    again=0
    [ -n "$text" ] && again=$(grep -cF -- "$text" "$log")
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$n" = 1 ] && [ "$again" = 1 ]; then
        echo "PASS errors/$name: a setup error printed once"
    else
        echo "FAIL errors/$name: exit $rc, $n library error lines, its text $again times"
        sed 's/^/    /' "$log" | head -6
        fail=1
    fi
}
check pingpong_rc $B/rdmax_pingpong_rc --loopback -d nosuchdev
check pingpong_ud $B/rdmax_pingpong_ud --loopback -d nosuchdev
check bw $B/rdmax_bw --loopback -d nosuchdev
check pageserver $B/rdmax_pageserver --loopback -d nosuchdev
check readme_example $B/readme_example 127.0.0.1
exit $fail
