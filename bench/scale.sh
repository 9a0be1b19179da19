#!/usr/bin/env bash
# bench/scale.sh - the scale rows of the benchmark: memory per RC endpoint (rdmax's own, the provider's
# queue memory, the shared receive pool), endpoints connected per second (rdmax_ep_connect_info in one
# process; the listener with 50 client processes), and the 8-byte put rate over 1,000 endpoints against
# one. Builds tests/scale_test.c into build-bench/, runs it in the soft-RoCE VM (tests/vm/run), and
# writes bench/results/scale.md (raw output in bench/results/raw/scale.txt). bench/run.sh calls it.
#
#   bench/scale.sh               from anywhere
#   bench/scale.sh guest         (inside the VM: what the host part runs there)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
B=build-bench
if [ "${1:-}" = guest ]; then
	ulimit -l unlimited 2>/dev/null
	export RDMAX_LOG_LEVEL=${RDMAX_LOG_LEVEL:-error}
	for args in "memory 100" "pairs 2000" "listen 50 20" "putrate 1000 3"; do
		echo "== scale_test $args"
		timeout 600 $B/scale_test $args
		echo "== status $?"
	done
	exit 0
fi
RES=bench/results
mkdir -p "$B" "$RES/raw"
${CC:-cc} -O2 -g -std=c11 -pedantic -Wall -Wextra -Werror -I. -o $B/scale_test tests/scale_test.c \
	-libverbs -lrdmacm -lnuma -lm -lpthread || { echo "bench/scale.sh: build failed"; exit 1; }
echo "[scale] running scale_test in the VM (memory, 4,000 endpoints, listener, put rate)"
tests/vm/run --topo dummy --timeout 1500 -- bench/scale.sh guest >"$RES/raw/scale.txt" 2>&1
st=$?
row() { awk -v k="$1" '$1 == "ROW" && $2 == k { print $3; exit }' "$RES/raw/scale.txt"; }
{
	echo "# Scale rows (rxe in the test VM, $(date -u '+%Y-%m-%d'))"
	echo
	echo "| row | value |"
	echo "|---|---|"
	echo "| rdmax's own bytes per RC endpoint (default descriptors) | $(row ep_own_bytes) |"
	echo "| rdmax's allocations per RC endpoint (with its share of the endpoint table and QP map) | $(row ep_alloc_bytes) |"
	echo "| provider's queue memory per RC endpoint (rxe, sq_depth 32, max_inline 256) | $(row ep_provider_bytes) |"
	echo "| shared receive pool per RC endpoint (16 credits x 4 KiB) | $(row ep_pool_bytes) |"
	echo "| process RSS per RC endpoint | $(row ep_rss_bytes) |"
	echo "| endpoints created and connected per second (rdmax_ep_connect_info, one process) | $(row rc_connect_info_eps_per_s) |"
	echo "| endpoints accepted per second through the listener (50 client processes x 20) | $(row listener_eps_per_s) |"
	echo "| 8-byte put rate, 1 endpoint (ops/s) | $(row put8_rate_1ep) |"
	echo "| 8-byte put rate spread over 1,000 endpoints (ops/s) | $(row put8_rate_1000eps) |"
	echo "| ratio 1,000 endpoints / 1 (goal >= 0.9) | $(row put8_rate_ratio) |"
	echo
	echo "Raw output: raw/scale.txt. The VM shares two host cores with whatever else runs there: rates are"
	echo "only comparable within one run."
} >"$RES/scale.md"
echo "[scale] wrote $RES/scale.md (VM status $st)"
cat "$RES/scale.md"
exit $st
