#!/bin/sh
# tests/profile_objcode.sh [INCDIR] - the profile points cost nothing unless RDMAX_PROFILE is defined.
#
# Compiles a small unit whose functions call rdmax_put (which takes the registration cache's path for a
# buffer without an rdmax_mem) and rdmax_progress, disassembles those functions and compares:
#   as is            RDMAX_PROFILE undefined: the macros expand to what the header says
#   forced empty     -DRDMAX__PROF_BEGIN(c,p)= -DRDMAX__PROF_END(c,p)=
#   stripped         a copy of rdmax.h without the lines holding RDMAX__PROF_BEGIN/END calls
# which must be identical (PASS), and
#   RDMAX_PROFILE    -DRDMAX_PROFILE, which must differ: proof that the comparison can fail.
# INCDIR holds rdmax.h (default: the repository).
# Prints PASS/FAIL/SKIP lines; exits non-zero on FAIL. CC, and OPTS (default "-O2 -O3"), may be set.
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
inc=${1:-.}
inc=$(cd "$inc" && pwd) || exit 1
CC=${CC:-cc}
OPTS=${OPTS:-"-O2 -O3"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
say() { echo "$*"; }
fail() { echo "FAIL profile_objcode/$1"; fails=$((fails + 1)); }

cat > "$tmp/unit.c" <<'EOF'
#define RDMAX_TRANSPORT_RC
#include "rdmax.h"
rdmax_status t_put(rdmax_ep *ep, const void *buf, size_t len, const rdmax_mem *mem, uint64_t raddr, uint32_t rkey,
                   rdmax_comp *comp);
int t_progress(rdmax_ctx *ctx);
rdmax_status t_put(rdmax_ep *ep, const void *buf, size_t len, const rdmax_mem *mem, uint64_t raddr, uint32_t rkey,
                   rdmax_comp *comp)
{
    return rdmax_put(ep, buf, len, mem, raddr, rkey, comp);
}
int t_progress(rdmax_ctx *ctx)
{
    return rdmax_progress(ctx);
}
EOF

# The stripped copy: every line that is only a BEGIN or END call goes.
mkdir -p "$tmp/stripped"
pat='^[[:space:]]*RDMAX__PROF_(BEGIN|END)\([^;]*\);[[:space:]]*$'
grep -Ev "$pat" "$inc/rdmax.h" > "$tmp/stripped/rdmax.h"
[ -f "$inc/rdmax_impl.h" ] && grep -Ev "$pat" "$inc/rdmax_impl.h" > "$tmp/stripped/rdmax_impl.h"
uses=$(grep -Ec "$pat" "$inc/rdmax.h")

# dis NAME INCDIR FLAGS...: disassembly of t_put and t_progress, addresses removed
dis() {
    name=$1 dir=$2
    shift 2
    if ! $CC -std=c11 -c -o "$tmp/$name.o" -I"$dir" -I"$root" "$@" "$tmp/unit.c" 2> "$tmp/$name.err"; then
        sed 's/^/    /' "$tmp/$name.err" | head -20
        return 1
    fi
    for fn in t_put t_progress; do
        objdump -dr --no-show-raw-insn --disassemble=$fn "$tmp/$name.o" |
            sed -n "/<$fn>:/,\$p" |
            sed -E 's/^[[:space:]]*[0-9a-f]+:[[:space:]]*//; s/\b[0-9a-f]+ <(t_put|t_progress)\+/<\1+/'
    done > "$tmp/$name.s"
    [ -s "$tmp/$name.s" ]
}

for o in $OPTS; do
    dis "asis$o" "$inc" "$o" || { fail "$o: compile (as is)"; continue; }
    dis "empty$o" "$inc" "$o" '-DRDMAX__PROF_BEGIN(c,p)=' '-DRDMAX__PROF_END(c,p)=' || { fail "$o: compile (forced empty)"; continue; }
    dis "strip$o" "$tmp/stripped" "$o" || { fail "$o: compile (stripped)"; continue; }
    dis "prof$o" "$inc" "$o" -DRDMAX_PROFILE || { fail "$o: compile (RDMAX_PROFILE)"; continue; }
    n=$(grep -c . "$tmp/asis$o.s")
    if [ "$uses" -eq 0 ]; then
        say "SKIP profile_objcode/$o: $inc/rdmax.h has no RDMAX__PROF_BEGIN/END lines yet: nothing to compare"
        continue
    fi
    if cmp -s "$tmp/asis$o.s" "$tmp/empty$o.s" && cmp -s "$tmp/asis$o.s" "$tmp/strip$o.s"; then
        say "PASS profile_objcode/$o: rdmax_put and rdmax_progress identical without RDMAX_PROFILE ($n lines; $uses point lines in rdmax.h)"
    else
        fail "$o: the points change the code without RDMAX_PROFILE"
        diff "$tmp/asis$o.s" "$tmp/strip$o.s" | head -30 | sed 's/^/    /'
    fi
    if cmp -s "$tmp/asis$o.s" "$tmp/prof$o.s"; then
        fail "$o: RDMAX_PROFILE does not change the code either: this check cannot fail"
    else
        d=$(diff "$tmp/asis$o.s" "$tmp/prof$o.s" | grep -c '^[<>]')
        say "PASS profile_objcode/$o: RDMAX_PROFILE changes it ($(grep -c . "$tmp/prof$o.s") lines, $d differ): the check can fail"
    fi
done
[ "$fails" -eq 0 ]
