#!/bin/sh
# make fuzz: runs each libFuzzer target for FUZZ_SECONDS (default 120) on its corpus under
# tests/fuzz/TARGET/, with tests/fuzz/regress/TARGET/ (inputs that once found a bug) read too, then merges
# the corpus down to the inputs that add edges, so it stays small enough to commit.
# Prints one line per target: executions, executions per second, coverage (libFuzzer's cov: edges and
# ft: features) and corpus size. A crash stops with the input under build/fuzz/.
# Usage: tests/fuzz/run.sh [TARGET...]    (FUZZ_SECONDS, FUZZ_JOBS=1 from the environment)
cd "$(dirname "$0")/../.." || exit 1
B=${RDMAX_BUILD:-build}
secs=${FUZZ_SECONDS:-120}
targets=${*:-conn recv srq arbiter rcache}
status=0
for t in $targets; do
    bin=$B/fuzz/$t
    corp=tests/fuzz/$t
    reg=tests/fuzz/regress/$t
    log=$B/fuzz/$t.log
    mkdir -p "$corp"
    [ -d "$reg" ] || reg=
    "$bin" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$B/fuzz/$t-" "$corp" $reg > "$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -E '^#[0-9]+' "$log" | tail -1 | sed -n 's/.*\(cov: [0-9]* ft: [0-9]*\).*/\1/p')
    if [ $rc -ne 0 ]; then
        echo "FAIL fuzz/$t: the target failed after ${execs:-?} runs (log $log):"
        grep -E '^FAIL |ERROR: |SUMMARY|Test unit written' "$log" | head -5 | sed 's/^/    /'
        status=1
        continue
    fi
    # merge: keep only inputs that add edges (-use_counters=0: hit counts do not count), so the committed
    # corpus stays small; the next run finds the counts again in seconds
    new=$B/fuzz/$t.merged
    rm -rf "$new"
    mkdir -p "$new"
    if "$bin" -merge=1 -use_counters=0 "$new" "$corp" > "$B/fuzz/$t.merge.log" 2>&1 && [ -n "$(ls "$new")" ]; then
        rm -f "$corp"/*
        cp "$new"/* "$corp"/
    fi
    n=$(ls "$corp" | wc -l)
    bytes=$(cat "$corp"/* | wc -c)
    printf 'fuzz %-8s %6s s  %10s execs  %7s exec/s  %s  corpus %d inputs, %d bytes\n' "$t" "$secs" "$execs" "$rate" \
        "$cov" "$n" "$bytes"
done
exit $status
