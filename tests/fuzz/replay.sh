#!/bin/sh
# make test: replays every fuzz corpus (tests/fuzz/TARGET/ and tests/fuzz/regress/TARGET/) with the targets
# built under ASan and UBSan by the ordinary compiler (build/host/fuzz_TARGET); no clang needed.
cd "$(dirname "$0")/../.." || exit 1
B=${RDMAX_BUILD:-build}
status=0
for t in conn recv srq arbiter rcache; do
    set -- tests/fuzz/$t
    [ -d tests/fuzz/regress/$t ] && set -- "$@" tests/fuzz/regress/$t
    "$B/host/fuzz_$t" "$@" || status=1
done
exit $status
