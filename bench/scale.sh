#!/usr/bin/env bash
# bench/scale.sh - the scale rows of the benchmark: memory per RC endpoint (rdmax's own, the provider's
# queue memory, the shared receive pool), endpoints connected per second (rdmax_ep_connect_record in one
# process; the listener with 50 client processes), and the 8-byte put rate over 1,000 endpoints against
# one, beside the raw-verbs floor of that rate (bench/floor.c putrate: the same loop over 1,000 RC QPs
# with nothing but libibverbs). Builds tests/scale_test.c and bench/floor.c into build-bench/, runs them
# in the soft-RoCE VM (tests/vm/run), and writes bench/results/scale.md (raw output in
# bench/results/raw/scale.txt), then appends bench/results/scale_notes.md (what was measured by hand).
# bench/run.sh calls it.
#
# The put rate runs RDMAX_SCALE_RATE_ROUNDS (3) rounds in the one VM boot, each rdmax's case then the
# floor's; the rate rows are medians over the rounds, "rdmax's ratio / the floor's" the median of each
# round's quotient (rates are only comparable within a round: the VM shares the host's cores).
#
#   bench/scale.sh               from anywhere
#   bench/scale.sh guest         (inside the VM: what the host part runs there)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
B=build-bench
ROUNDS=${RDMAX_SCALE_RATE_ROUNDS:-3}
if [ "${1:-}" = guest ]; then
	ulimit -l unlimited 2>/dev/null
	export RDMAX_LOG_LEVEL=${RDMAX_LOG_LEVEL:-error}
	for args in "memory 100" "pairs 2000" "listen 50 20" "tenk 500" "tenk 5000"; do
		echo "== scale_test $args"
		timeout 600 $B/scale_test $args
		echo "== status $?"
	done
	for r in $(seq 1 "$ROUNDS"); do
		echo "== round $r/$ROUNDS: scale_test putrate 1000 3"
		timeout 600 $B/scale_test putrate 1000 3
		echo "== status $?"
		echo "== round $r/$ROUNDS: floor putrate -e 1000 -T 3"
		timeout 600 $B/floor putrate -e 1000 -T 3 -d "${RDMAX_TEST_DEV0:-rxe0}" -x "${RDMAX_TEST_GID_INDEX0:-1}"
		echo "== status $?"
	done
	exit 0
fi
case $ROUNDS in '' | *[!0-9]* | 0) echo "bench/scale.sh: RDMAX_SCALE_RATE_ROUNDS must be a positive number"; exit 2 ;; esac
RES=bench/results
mkdir -p "$B" "$RES/raw"
${CC:-cc} -O2 -g -std=c11 -pedantic -Wall -Wextra -Werror -I. -o $B/scale_test tests/scale_test.c \
	-libverbs -lrdmacm -lnuma -lm -lpthread || { echo "bench/scale.sh: build failed"; exit 1; }
${CC:-cc} -O2 -g -std=c11 -pedantic -Wall -Wextra -Werror -o $B/floor bench/floor.c -libverbs -lm ||
	{ echo "bench/scale.sh: build of the floor failed"; exit 1; }
echo "[scale] running scale_test in the VM (memory, 4,000 endpoints, listener, 1,000 and 10,000 default endpoints; put rate beside the floor, $ROUNDS rounds)"
tests/vm/run --topo dummy --timeout $((1500 + 120 * ROUNDS)) -- bench/scale.sh guest >"$RES/raw/scale.txt" 2>&1
st=$?
row() { awk -v k="$1" '$1 == "ROW" && $2 == k { print $3; exit }' "$RES/raw/scale.txt"; }
# median: of the numbers on stdin, one a line (as bench/run.sh); empty when there is none
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit; if (NR % 2) print v[(NR + 1) / 2]; else printf "%.6g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# med KEY: the median of every ROW KEY line (the rounds)
med() { awk -v k="$1" '$1 == "ROW" && $2 == k { print $3 }' "$RES/raw/scale.txt" | median; }
# quot list|median: rdmax's ratio over the floor's, round by round (the n-th of each)
quot() {
	awk -v how="$1" '$1 == "ROW" && $2 == "put8_rate_ratio" { a[na++] = $3 }
		$1 == "ROW" && $2 == "floor_put8_rate_ratio" { f[nf++] = $3 }
		END { n = na < nf ? na : nf
			for (i = 0; i < n; i++) {
				q = f[i] > 0 ? a[i] / f[i] : 0
				if (how == "list") printf "%s%s / %s = %.2f", i ? "; " : "", a[i], f[i], q
				else printf "%.4f\n", q
			} }' "$RES/raw/scale.txt" | if [ "$1" = list ]; then cat; else median | xargs -r printf '%.2f\n'; fi
}
{
	echo "# Scale rows (rxe in the test VM, $(date -u '+%Y-%m-%d'))"
	echo
	echo "| row | value |"
	echo "|---|---|"
	echo "| rdmax's own bytes per RC endpoint (default descriptors) | $(row ep_own_bytes) |"
	echo "| rdmax's allocations per RC endpoint (with its share of the endpoint table and QP map) | $(row ep_alloc_bytes) |"
	echo "| provider's queue memory per RC endpoint (rxe, sq_depth 31, max_inline 256) | $(row ep_provider_bytes) |"
	echo "| shared receive pool per RC endpoint at rest (3 credits x 4 KiB: window 2, adapting) | $(row ep_pool_bytes) |"
	echo "| process RSS per RC endpoint | $(row ep_rss_bytes) |"
	echo "| process RSS per RC endpoint, 1,000 in one context, default descriptors (KiB) | $(row rc_eps_default_rss_kib_1000) |"
	echo "| process RSS per RC endpoint, 10,000 in one context, default descriptors (KiB) | $(row rc_eps_default_rss_kib_10000) |"
	echo "| endpoints created and connected per second (rdmax_ep_connect_record, one process) | $(row rc_connect_info_eps_per_s) |"
	echo "| endpoints accepted per second through the listener (50 client processes x 20) | $(row listener_eps_per_s) |"
	echo "| 8-byte put rate, 1 endpoint (ops/s) | $(med put8_rate_1ep) |"
	echo "| 8-byte put rate spread over 1,000 endpoints (ops/s) | $(med put8_rate_1000eps) |"
	echo "| ratio 1,000 endpoints / 1 (goal >= 0.9) | $(med put8_rate_ratio) |"
	echo "| raw-verbs floor: 8-byte RDMA-write rate, 1 QP (ops/s) | $(med floor_put8_rate_1qp) |"
	echo "| raw-verbs floor: 8-byte RDMA-write rate spread over 1,000 QPs (ops/s) | $(med floor_put8_rate_1000qps) |"
	echo "| raw-verbs floor: ratio 1,000 QPs / 1 | $(med floor_put8_rate_ratio) |"
	echo "| rdmax's ratio / the floor's ratio | $(quot median) |"
	echo
	echo "Raw output: raw/scale.txt. The VM shares two host cores with whatever else runs there: rates are"
	echo "only comparable within one run."
	echo
	echo "The put-rate rows are medians of $ROUNDS rounds in one VM boot, each scale_test putrate 1000 3 (rdmax),"
	echo "then bench/floor.c putrate -e 1000 -T 3 (the same loop with nothing but libibverbs: one post per"
	echo "8-byte inline write, 32 in flight per QP, one signaled in 16 and every one while half the 4,096"
	echo "shared send-CQ entries are held). Ratios per round, rdmax / floor: $(quot list)."
	# what was measured by hand (the own-pool latency, the put-rate history) lives beside it, not in here
	[ -f "$RES/scale_notes.md" ] && { echo; sed 1d "$RES/scale_notes.md"; }
} >"$RES/scale.md"
echo "[scale] wrote $RES/scale.md (VM status $st)"
cat "$RES/scale.md"
exit $st
