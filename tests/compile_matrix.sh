#!/bin/sh
# Compile matrix: every transport selection builds as two C11 units + the implementation + a C++ unit
# with -Wall -Wextra -Werror -pedantic, with the implementation compiled as C and as C++ (C++11, C++17);
# no selection, a lone rdmax_impl.h, mismatched selections and contradictory options must fail, and
# fail for the documented reason.
cd "$(dirname "$0")/.." || exit 1
CC=${CC:-cc}; CXX=${CXX:-c++}
out=build/compile; mkdir -p $out
W="-Wall -Wextra -Werror -pedantic -I."
LIBS="-libverbs -lrdmacm -lnuma"
fail=0
pass() { echo "PASS compile/$1"; }
flunk() { echo "FAIL compile/$1: $2"; sed 's/^/    /' "$out/log" | head -5; fail=1; }
for sel in RC UD RC_UD; do
    case $sel in RC) defs=-DRDMAX_TRANSPORT_RC;; UD) defs=-DRDMAX_TRANSPORT_UD;;
                 *) defs="-DRDMAX_TRANSPORT_RC -DRDMAX_TRANSPORT_UD";; esac
    if $CC -std=c11 $W $defs -c tests/compile/tu1.c -o $out/tu1.o >$out/log 2>&1 &&
       $CC -std=c11 $W $defs -c tests/compile/tu2.c -o $out/tu2.o >>$out/log 2>&1 &&
       $CC -std=c11 $W $defs -c tests/compile/impl.c -o $out/impl.o >>$out/log 2>&1 &&
       $CXX -std=c++11 $W $defs -c tests/compile/cxx.cc -o $out/cxx.o >>$out/log 2>&1 &&
       $CXX $out/tu1.o $out/tu2.o $out/impl.o $out/cxx.o -o $out/prog $LIBS >>$out/log 2>&1 &&
       $out/prog; then pass "$sel builds (2 C units + impl + C++)"; else flunk "$sel builds" "see log"; fi
    # the implementation unit as C++ (C++11 and C++17) with the C units, and the C implementation
    # with C++ units only
    for std in c++11 c++17; do
        if $CXX -std=$std $W $defs -c tests/compile/impl.cc -o $out/implx.o >$out/log 2>&1 &&
           $CXX $out/tu1.o $out/tu2.o $out/implx.o $out/cxx.o -o $out/prog $LIBS >>$out/log 2>&1 &&
           $out/prog; then pass "$sel C++ ($std) implementation + 2 C units + C++ unit"
        else flunk "$sel C++ ($std) implementation + 2 C units + C++ unit" "see log"; fi
    done
    if $CXX -std=c++17 $W $defs -c tests/compile/cxx_tu.cc -o $out/cxx_tu.o >$out/log 2>&1 &&
       $CXX $out/impl.o $out/cxx_tu.o $out/cxx.o -o $out/prog $LIBS >>$out/log 2>&1 &&
       $out/prog; then pass "$sel C implementation + C++ units only"
    else flunk "$sel C implementation + C++ units only" "see log"; fi
    # a unit compiled in C17 and gnu11 as well: the header does not depend on the dialect
    if $CC -std=gnu17 $W $defs -c tests/compile/tu1.c -o $out/tu1g.o >$out/log 2>&1; then
        pass "$sel gnu17"; else flunk "$sel gnu17" "see log"; fi
done
# Code of an unselected transport is not compiled: an RC-only unit has no rdmax_put when only UD is chosen.
if $CC -std=c11 $W -DRDMAX_TRANSPORT_UD -DRDMAX_TRANSPORT_RC_CHECK -x c - -c -o $out/x.o >$out/log 2>&1 <<'C'
#define RDMAX_TRANSPORT_UD
#include "rdmax.h"
int f(rdmax_ep *e) { return rdmax_put(e, 0, 0, 0, 0, 0, 0); }
C
then flunk "UD-only has no put" "rdmax_put compiled without RDMAX_TRANSPORT_RC"
elif grep -q "implicit declaration of function .rdmax_put" $out/log; then pass "UD-only has no put"
else flunk "UD-only has no put" "failed for another reason"; fi
if $CC -std=c11 $W -c tests/compile/none.c -o $out/x.o >$out/log 2>&1; then
    flunk "no selection fails" "compiled"
elif grep -q "select a transport" $out/log; then pass "no selection fails with a sentence"
else flunk "no selection fails with a sentence" "wrong message"; fi
if $CC -std=c11 $W -c tests/compile/impl_alone.c -o $out/x.o >$out/log 2>&1; then
    flunk "lone rdmax_impl.h fails" "compiled"
elif grep -q "do not include rdmax_impl.h directly" $out/log; then pass "lone rdmax_impl.h fails with a sentence"
else flunk "lone rdmax_impl.h fails with a sentence" "wrong message"; fi
# Mismatch: user units select RC+UD, the implementation only RC: link must fail naming the selection.
$CC -std=c11 $W -DRDMAX_TRANSPORT_RC -DRDMAX_TRANSPORT_UD -c tests/compile/tu1.c -o $out/m1.o >$out/log 2>&1
$CC -std=c11 $W -DRDMAX_TRANSPORT_RC -DRDMAX_TRANSPORT_UD -c tests/compile/tu2.c -o $out/m2.o >>$out/log 2>&1
$CXX -std=c++11 $W -DRDMAX_TRANSPORT_RC -c tests/compile/cxx.cc -o $out/m4.o >>$out/log 2>&1
$CC -std=c11 $W -DRDMAX_TRANSPORT_RC -c tests/compile/impl.c -o $out/m3.o >>$out/log 2>&1 || cat $out/log
if $CXX $out/m1.o $out/m2.o $out/m3.o $out/m4.o -o $out/prog $LIBS >$out/log 2>&1; then
    flunk "mismatched selection fails to link" "linked"
elif grep -q "rdmax__selection_rc1_ud1" $out/log; then pass "mismatched selection fails to link, naming it"
else flunk "mismatched selection fails to link, naming it" "wrong message"; fi
# The opt-in memory hooks compile in both languages; contradictory or incomplete opt-ins stop with a sentence.
if $CXX -std=c++17 $W -DRDMAX_TRANSPORT_RC -DRDMAX_MEMHOOKS -DRDMAX_MALLOPT -c tests/compile/impl.cc -o $out/x.o \
       >$out/log 2>&1 &&
   $CC -std=c11 $W -DRDMAX_TRANSPORT_RC -DRDMAX_MEMHOOKS -DRDMAX_MALLOPT -c tests/compile/impl.c -o $out/x.o \
       >>$out/log 2>&1; then pass "memory hooks build in C and C++"
else flunk "memory hooks build in C and C++" "see log"; fi
for bad in "-DRDMAX_NO_MEMHOOKS:removed in 0.2.0" "-DRDMAX_NO_MALLOPT:removed in 0.2.0" \
           "-DRDMAX_MALLOPT:define RDMAX_MEMHOOKS too"; do
    flags=${bad%%:*}; want=${bad#*:}
    if $CC -std=c11 $W -DRDMAX_TRANSPORT_RC $flags -c tests/compile/impl.c -o $out/x.o >$out/log 2>&1; then
        flunk "$flags fails" "compiled"
    elif grep -q "$want" $out/log; then pass "$flags fails with a sentence"
    else flunk "$flags fails with a sentence" "wrong message"; fi
done
# The documented limits of RDMAX_BATCH_MAX build clean: a chain of one, and a long one.
for bm in 1 64; do
    if $CC -std=c11 $W -O2 -DRDMAX_TRANSPORT_RC -DRDMAX_TRANSPORT_UD -DRDMAX_BATCH_MAX=$bm -c tests/compile/impl.c \
           -o $out/x.o >$out/log 2>&1; then pass "RDMAX_BATCH_MAX=$bm"
    else flunk "RDMAX_BATCH_MAX=$bm" "see log"; cat $out/log; fi
done
# The header defines no object or function outside the implementation: a unit without it has no
# defined global symbols of rdmax.
$CC -std=c11 $W -DRDMAX_TRANSPORT_RC -DRDMAX_TRANSPORT_UD -O0 -c tests/compile/tu1.c -o $out/tu1.o >$out/log 2>&1
if nm -g --defined-only $out/tu1.o | grep -v ' tu1_send$' | grep -q .; then
    nm -g --defined-only $out/tu1.o > $out/log; flunk "header defines no globals" "see symbols"
else pass "header defines no globals"; fi
exit $fail
