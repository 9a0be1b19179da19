#!/bin/sh
# make install into a temporary DESTDIR: the headers land in include/rdmax/ (nothing loose in include/),
# rdmax.pc carries rdmax.h's version; a program outside the source tree builds with nothing but
# `pkg-config --cflags --libs rdmax` and runs; make uninstall removes every file it installed and the
# folders install made that are empty then.
cd "$(dirname "$0")/.." || exit 1
src=$(pwd)
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
prefix=/opt/rdmax-install-test
root=$tmp/root
fail=0
pass() { echo "PASS install/$1"; }
flunk() { echo "FAIL install/$1: $2"; [ -f "$tmp/log" ] && sed 's/^/    /' "$tmp/log" | tail -8; fail=1; }

if make -s -C "$src" install DESTDIR="$root" PREFIX=$prefix >"$tmp/log" 2>&1; then pass "make install"
else flunk "make install" "failed"; exit 1; fi
inc=$root$prefix/include
pc=$root$prefix/lib/pkgconfig/rdmax.pc
if [ -f "$inc/rdmax/rdmax.h" ] && [ -f "$inc/rdmax/rdmax_impl.h" ] && [ -f "$pc" ] &&
   [ "$(ls "$inc")" = rdmax ]; then pass "headers in include/rdmax/, rdmax.pc in lib/pkgconfig/"
else ls -R "$root" >"$tmp/log"; flunk "layout" "unexpected files"; fi

want=$(sed -n 's/^#define RDMAX_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' rdmax.h | paste -sd.)
str=$(sed -n 's/^#define RDMAX_VERSION_STRING "\(.*\)"$/\1/p' rdmax.h)
export PKG_CONFIG_PATH=$root$prefix/lib/pkgconfig
got=$(pkg-config --modversion rdmax 2>"$tmp/log")
if [ -n "$want" ] && [ "$got" = "$want" ] && [ "$str" = "$want" ]; then pass "version $got from rdmax.h"
else flunk "version" "pc '$got', macros '$want', string '$str'"; fi
if grep -q '^Requires: libibverbs librdmacm numa$' "$pc" && ! grep -q '^Libs:.*-libverbs' "$pc"; then
    pass "dependencies through pkg-config names"
else cp "$pc" "$tmp/log"; flunk "dependencies" "rdmax.pc"; fi

mkdir -p "$tmp/app"
cat >"$tmp/app/app.c" <<'C'
#define RDMAX_TRANSPORT_RC
#define RDMAX_TRANSPORT_UD
#define RDMAX_IMPLEMENTATION
#include "rdmax.h"
#include <stdio.h>
int main(void)
{
    rdmax_ctx_desc d = {0};
    d.device = "no-such-device";  /* links and runs without a device: the error path */
    rdmax_ctx *ctx;
    rdmax_status st = rdmax_ctx_create(&d, &ctx);
    printf("rdmax %s: %s\n", RDMAX_VERSION_STRING, rdmax_status_str(st));
    return st == RDMAX_ERR_NO_DEVICE ? 0 : 1;
}
C
flags=$(pkg-config --define-variable=prefix="$root$prefix" --cflags --libs rdmax 2>"$tmp/log")
if (cd "$tmp/app" && ${CC:-cc} -std=c11 -Wall -Wextra -Werror app.c -o app $flags >"$tmp/log" 2>&1) &&
   "$tmp/app/app" >"$tmp/log" 2>&1 && grep -q "^rdmax $str: " "$tmp/log"; then
    pass "a program builds with pkg-config --cflags --libs rdmax alone, and runs"
else flunk "build against the installed .pc" "flags: $flags"; fi

# install made every folder of the fresh DESTDIR, so uninstall leaves it empty (not even the prefix)
if make -s -C "$src" uninstall DESTDIR="$root" PREFIX=$prefix >"$tmp/log" 2>&1 &&
   [ -z "$(find "$root" -mindepth 1)" ]; then pass "make uninstall leaves the fresh DESTDIR empty"
else find "$root" >"$tmp/log"; flunk "make uninstall" "files or folders left"; fi

# control: a folder that holds something else is kept (and what is in it), the empty ones still go
root2=$tmp/root2
mkdir -p "$root2$prefix/lib" && echo other >"$root2$prefix/lib/other.txt"
if make -s -C "$src" install DESTDIR="$root2" PREFIX=$prefix >"$tmp/log" 2>&1 &&
   make -s -C "$src" uninstall DESTDIR="$root2" PREFIX=$prefix >"$tmp/log" 2>&1 &&
   [ "$(cd "$root2" && find . -mindepth 1 | sort | paste -sd' ')" = \
     "./opt ./opt/rdmax-install-test ./opt/rdmax-install-test/lib ./opt/rdmax-install-test/lib/other.txt" ]; then
    pass "make uninstall keeps a folder with another file in it"
else find "$root2" >"$tmp/log"; flunk "make uninstall (control)" "wrong folders left"; fi

# without DESTDIR the prefix is the user's: its folders go when empty, the prefix itself stays
p3=$tmp/prefix3
if make -s -C "$src" install PREFIX="$p3" >"$tmp/log" 2>&1 && [ -f "$p3/include/rdmax/rdmax.h" ] &&
   make -s -C "$src" uninstall PREFIX="$p3" >"$tmp/log" 2>&1 && [ -d "$p3" ] &&
   [ -z "$(find "$p3" -mindepth 1)" ]; then pass "make uninstall without DESTDIR keeps the prefix, empties it"
else find "$p3" >"$tmp/log"; flunk "make uninstall (no DESTDIR)" "wrong folders left"; fi
exit $fail
