#!/bin/sh
# make fuzz-cov: line coverage of rdmax's code by each fuzz target's committed corpus. Each target is built
# with clang's source-based coverage (the replay main of fuzz.h, no sanitizers), replays tests/fuzz/TARGET/
# and tests/fuzz/regress/TARGET/, and prints the lines it ran of the functions it is meant to drive (below)
# and of all of rdmax_impl.h. Per-line detail: llvm-cov show build/cov/TARGET -instr-profile=build/cov/TARGET.profdata
# Usage: tests/fuzz/cov.sh [TARGET...]   (needs clang, llvm-profdata, llvm-cov)
cd "$(dirname "$0")/../.." || exit 1
B=${RDMAX_BUILD:-build}
CC=${FUZZ_CC:-clang}
mkdir -p "$B/cov"
# the functions each target drives (llvm-cov names; static ones carry the file's name in front)
funcs() {
    case $1 in
    conn) echo 'rdmax_conn_info_(en|de)code|conn_head_check|conn_fields_check|record_head_check' ;;
    recv) echo 'rdmax__poll_recv|rdmax__send_cqes|:rdmax__post_recvs|rdmax__ep_retire|rdmax__grant_post|rdmax__flush_check|rdmax__post_chain|rdmax__ep_fail' ;;
    srq) echo 'rdmax__srq_recv|rdmax__srq_settle|rdmax__srq_fill|rdmax__srq_reserve|rdmax__map_ep|rdmax__map_put|rdmax__poll_recv|rdmax__grant_post' ;;
    arbiter) echo 'rdmax__arb_|rdmax__arb_' ;;
    rcache) echo 'rdmax_rcache_(create|get|put|invalidate|drain|destroy)$|rdmax__rc(ache)?_(get_slow|put_slow|miss|lookup|tree_|lru_|evict|drop|detach|invalidate|drain|make_room|region|reg$|over|node)' ;;
    esac
}
status=0
for t in ${*:-conn recv srq arbiter rcache}; do
    bin=$B/cov/$t
    if ! $CC -O0 -g -fprofile-instr-generate -fcoverage-mapping -std=c11 -I. -DRDMAX_FUZZ_REPLAY -o "$bin" \
        tests/fuzz/${t}_fuzz.c -libverbs -lrdmacm -lnuma -lm -lpthread; then
        echo "FAIL fuzz-cov/$t: build failed"
        status=1
        continue
    fi
    set -- tests/fuzz/$t
    [ -d tests/fuzz/regress/$t ] && set -- "$@" tests/fuzz/regress/$t
    rm -f "$bin.profraw"
    LLVM_PROFILE_FILE=$bin.profraw "$bin" "$@" > "$bin.log" 2>&1 || { echo "FAIL fuzz-cov/$t: replay failed ($bin.log)"; status=1; continue; }
    llvm-profdata merge -o "$bin.profdata" "$bin.profraw" || { status=1; continue; }
    llvm-cov report "$bin" -instr-profile="$bin.profdata" -show-functions rdmax_impl.h rdmax.h > "$bin.funcs" 2>/dev/null
    # columns: name, regions, missed, cover, lines, missed lines, cover, branches, ...
    awk -v re="$(funcs "$t")" -v t="$t" -v n="$(grep -c . "$bin.log")" '
        $1 ~ re && $5 ~ /^[0-9]+$/ { fl += $5; fm += $6; nf++; if ($6 > 0) part = part sprintf(" %s %d/%d", $1, $5 - $6, $5) }
        END {
            printf "fuzz-cov %-8s its %d functions: %d of %d lines (%.1f%%)", t, nf, fl - fm, fl, fl ? 100 * (fl - fm) / fl : 0
            print ""
            if (part != "") print "    partly:" part
        }' "$bin.funcs"
    llvm-cov report "$bin" -instr-profile="$bin.profdata" rdmax_impl.h 2>/dev/null |
        awk -v t="$t" '$1 ~ /rdmax_impl\.h$/ { printf "    all of rdmax_impl.h: %d of %d lines (%s), %d of %d functions\n", $8 - $9, $8, $10, $5 - $6, $5 }'
done
exit $status
