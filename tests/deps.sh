#!/bin/sh
# Installs what building and testing rdmax needs, from Debian's packages (`deps.sh fuzz`: what make fuzz
# needs). Root runs apt-get; anyone else is told the exact line.
pkgs="gcc g++ make libibverbs-dev librdmacm-dev libnuma-dev rdma-core ibverbs-providers ibverbs-utils
rdmacm-utils perftest ucx-utils libucx-dev qemu-system-x86 busybox-static kmod xz-utils iproute2 python3 pkgconf
valgrind gnuplot-nox"
# make fuzz: clang and its libFuzzer runtime, llvm for make fuzz-cov (make test replays the corpora with the
# compiler above)
[ "${1:-}" = fuzz ] && pkgs="clang libclang-rt-dev llvm"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "rdmax: missing packages; run as root: apt-get install -y$missing" >&2
    exit 1
fi
echo "rdmax: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends $missing >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q --no-install-recommends $missing >/dev/null; }
