#!/bin/bash
# bench/guest.sh RAW_DIR - the device half of `make bench`: runs where the RDMA device is (inside the
# soft-RoCE VM that bench/run.sh boots once, or on a host with its own device), writes every tool's raw
# output under RAW_DIR, prints progress. Parsing, medians, tables and plots happen on the host
# (bench/run.sh), so this script only needs bash, coreutils and the tools it measures.
#
# Layout of RAW_DIR:
#   env.txt                       date, kernel, device attributes
#   rN/CASE__TOOL.txt             round N (1..3) of a side-by-side case; CASE is KIND_OP_SIZE
#                                 (lat_put_8, bw_get_65536, rate_put_8, ...), TOOL rdmax or the
#                                 reference (ib_write_lat, ucx_put_lat, ib_write_bw_l16, ...)
#   rN/CASE__TOOL.srv.txt         the server's output of that run
#   sweep/KIND_OP_SIZE__TOOL.txt  the size sweep for the plots (one round, fewer iterations)
#   cg_*.out, cg_*.txt            callgrind profiles and the client's output (cg_instr.out.N: one part
#                                 per case of bench/instr.c)
#   clock.txt                     bench/clockcheck.c: clock source, clock_gettime's cost, the cycle
#                                 counter's rate as the examples and as perftest take it
#   scope.txt                     bench/scope.c: exposed memory through memory windows beside plain
#                                 registrations (RDMAX_ACCESS_ANY_ENDPOINT), per connect and per operation
#   rt/CASE__TOOL__nN_K.out       whole-process callgrind of a ping-pong client at -n N, run K
# Each output ends with a line "# rxe: COUNTER+DELTA ..." (hw_counters that moved during the run, e.g.
# completer_retry_err: retransmissions after an ack timeout, the usual sign of a disturbed run) and
# "# status: N" (the client's exit status; 124 = timeout).
#
# Every pair runs pinned: server on CPU 1, client on CPU 0 (taskset). Unpinned, the guest (two NUMA
# nodes of one CPU each) sometimes leaves both busy-polling processes on one CPU, and a ping-pong then
# advances once per scheduler tick: t_typical near 4000 us, for rdmax and perftest alike.
#
# Environment (set by tests/vm/run): RDMAX_TEST_DEV0, RDMAX_TEST_ADDR0, RDMAX_TEST_GID_INDEX0.
# Knobs (RDMAX_* so that tests/vm/run passes them into the guest): RDMAX_BENCH_ROUNDS (3),
# RDMAX_BENCH_LAT_ITERS (2000), RDMAX_BENCH_BW_ITERS (2000 at 64 KiB), RDMAX_BENCH_RATE_ITERS (100000),
# RDMAX_BENCH_UD_ITERS (40000), RDMAX_BENCH_SWEEP (1: run the size sweep), RDMAX_BENCH_CALLGRIND (1),
# RDMAX_BENCH_RT (1: the whole-process callgrind runs), RDMAX_BENCH_RT_ITERS ("200 600": their two
# iteration counts), RDMAX_BENCH_RT_REPS (2: runs per count), RDMAX_BENCH_RT_MATCH (an extended regular
# expression: only the whole-process cases whose name matches, e.g. '^rt_(put|send)_'), RDMAX_BENCH_ONLY
# (rt: only the whole-process callgrind runs, besides env.txt and clock.txt).
set -u
RAW=${1:?usage: bench/guest.sh RAW_DIR}
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$RAW"
ulimit -l unlimited 2>/dev/null

DEV=${RDMAX_TEST_DEV0:-rxe0}
ADDR=${RDMAX_TEST_ADDR0:-192.0.2.1}
GID=${RDMAX_TEST_GID_INDEX0:-1}
ROUNDS=${RDMAX_BENCH_ROUNDS:-3}
LAT_N=${RDMAX_BENCH_LAT_ITERS:-2000}
BW_N=${RDMAX_BENCH_BW_ITERS:-2000}
RATE_N=${RDMAX_BENCH_RATE_ITERS:-100000}
UD_N=${RDMAX_BENCH_UD_ITERS:-40000}
OTHERS=1  # the page server and scope runs
if [ "${RDMAX_BENCH_ONLY:-}" = rt ]; then
	ROUNDS=0 OTHERS=0 RDMAX_BENCH_CALLGRIND=0 RDMAX_BENCH_SWEEP=0 RDMAX_BENCH_RT=1
fi
B=build-bench
PP=$B/rdmax_pingpong_rc
BW=$B/rdmax_bw
FL=$B/floor
export RDMAX_LOG_LEVEL=${RDMAX_LOG_LEVEL:-warn}
export UCX_IB_GID_INDEX=$GID UCX_NET_DEVICES=$DEV:1 UCX_TLS=rc_verbs UCX_WARN_UNUSED_ENV_VARS=n
HWC=/sys/class/infiniband/$DEV/ports/1/hw_counters
T0=$(date +%s)

say() { printf '[%4ds] %s\n' $(($(date +%s) - T0)) "$*"; }

hw_snap() { for f in "$HWC"/*; do [ -r "$f" ] && printf '%s=%s ' "${f##*/}" "$(cat "$f")"; done 2>/dev/null; }
hw_delta() { # "before" "after" -> "name+delta ..." for counters that moved (packet counts left out)
	echo "$1 @ $2" | awk '{ for (i = 1; i <= NF; i++) { if ($i == "@") { after = 1; continue }
		split($i, kv, "="); if (!after) a[kv[1]] = kv[2]; else if ((kv[1] in a) && kv[2] != a[kv[1]] && kv[1] !~ /pkts$/)
		printf "%s+%d ", kv[1], kv[2] - a[kv[1]] } }'
}
SRV="taskset -c 1"  # server CPU
CLI="taskset -c 0"  # client CPU
[ "$(nproc)" -ge 2 ] || SRV= CLI=

# wait_port PORT: until a TCP socket listens on PORT (state 0A in /proc/net/tcp*), at most 10 s.
wait_port() {
	local h i=0
	h=$(printf '%04X' "$1")
	while ((i < 200)); do
		grep -q ":$h [0-9A-F:]* 0A" /proc/net/tcp /proc/net/tcp6 2>/dev/null && return 0
		sleep 0.05
		i=$((i + 1))
	done
	return 1
}

# pair OUT PORT CMD...: server `CMD...` in the background, client `CMD... ADDR`; client output to OUT,
# server output to OUT.srv.txt. Both under a timeout; a stuck server is killed by its own timeout.
pair() {
	local out=$1 port=$2 st=0 before after
	shift 2
	before=$(hw_snap)
	timeout -k 5 90 $SRV "$@" >"${out%.txt}.srv.txt" 2>&1 &
	local spid=$!
	if ! wait_port "$port"; then
		echo "server did not listen on port $port" >>"$out"
	fi
	timeout -k 5 90 $CLI "$@" "$ADDR" >"$out" 2>&1 || st=$?
	wait "$spid" 2>/dev/null
	after=$(hw_snap)
	{
		echo "# rxe: $(hw_delta "$before" "$after")"
		echo "# status: $st"
	} >>"$out"
	((st == 0)) || say "  FAILED ($st): $* $ADDR (see $out)"
	return 0
}

# The commands of each case: rdmax's and the reference's, sharing size and iteration count.
pt() { echo "-d $DEV -x $GID -F"; }  # perftest: device, GID, no CPU-frequency warning
lat_rdmax() { pair "$1" 18515 $PP -t "$2" -s "$3" -n "$4"; }
lat_perftest() { pair "$1" 18515 "$2" $(pt) -s "$3" -n "$4"; }
ucx() { pair "$1" 13337 ucx_perftest -d "$DEV:1" -x rc_verbs -t "$2" -s "$3" -n "$4" ${5:+-D $5}; }
bw_rdmax() { pair "$1" 18515 $BW -t "$2" -s "$3" -n "$4" ${5:+$5}; }
bw_perftest() { pair "$1" 18515 "$2" $(pt) -s "$3" -n "$4" ${5:+$5}; }
# the raw-verbs floor (bench/floor.c): the examples' loops with nothing but libibverbs
lat_floor() { pair "$1" 18515 $FL lat -t "$2" -s "$3" -n "$4" -d "$DEV" -x "$GID"; }
bw_floor() { pair "$1" 18515 $FL bw -t "$2" -s "$3" -n "$4" -d "$DEV" -x "$GID" ${5:+$5}; }

{
	echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
	echo "kernel: $(uname -r)"
	echo "device: $DEV ($(cat /sys/class/infiniband/$DEV/node_type 2>/dev/null)) on $(rdma link show "$DEV/1" 2>/dev/null | sed -n 's/.*netdev \([^ ]*\).*/\1/p'), address $ADDR, gid index $GID"
	echo "cpus: $(nproc) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
	echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
	ibv_devinfo -d "$DEV" -v 2>/dev/null | grep -E 'fw_ver|active_mtu|max_qp_wr|max_cqe|max_qp_rd_atom|max_sge:' | sed 's/^[ \t]*/  /'
	echo "perftest: $(dpkg-query -W -f '${Version}' perftest 2>/dev/null)  ucx: $(ucx_info -v 2>/dev/null | sed -n 's/.*[Vv]ersion[:= ] *\([0-9][^ ]*\).*/\1/p' | head -1)"
} >"$RAW/env.txt"
# how the programs read time here (bench/clockcheck.c): clock_gettime's cost, the cycle counter's rate
# as the examples and the floor calibrate it and as perftest picks it
$CLI $B/clockcheck >"$RAW/clock.txt" 2>&1
say "device $DEV ($ADDR, gid $GID), $ROUNDS rounds; raw output in $RAW"

# ---- side-by-side cases: rounds of rdmax, the raw-verbs floor and the reference tools, ratios taken on
# the host, within each round. Within a case the tools run in turn, and the turn starts one later each
# round (in_turn): over three rounds each tool runs first, second and third once, so none always runs
# just after another tool's exit (rxe tears a process's QPs down after it) -------------------------------
# in_turn CMD...: eval each CMD (single-quoted at the call: expanded here), starting with the r-th and
# wrapping around
in_turn() {
	local n=$# i k
	for ((i = 0; i < n; i++)); do
		k=$(((i + r - 1) % n + 1))
		eval "${!k}"
	done
}
for r in $(seq 1 "$ROUNDS"); do
	d=$RAW/r$r
	mkdir -p "$d"
	say "round $r/$ROUNDS: latency (put, send, get at 8 B and 4 KiB; fadd, cswap; floor, perftest, ucx_perftest)"
	for s in 8 4096; do
		in_turn 'lat_rdmax "$d/lat_put_${s}__rdmax.txt" put $s $LAT_N' \
			'lat_floor "$d/lat_put_${s}__floor.txt" put $s $LAT_N' \
			'lat_perftest "$d/lat_put_${s}__ib_write_lat.txt" ib_write_lat $s $LAT_N' \
			'ucx "$d/lat_put_${s}__ucx_put_lat.txt" put_lat $s $LAT_N $([ $s -gt 8 ] && echo zcopy)'
		in_turn 'lat_rdmax "$d/lat_send_${s}__rdmax.txt" send $s $LAT_N' \
			'lat_floor "$d/lat_send_${s}__floor.txt" send $s $LAT_N' \
			'lat_perftest "$d/lat_send_${s}__ib_send_lat.txt" ib_send_lat $s $LAT_N' \
			'ucx "$d/lat_send_${s}__ucx_am_lat.txt" am_lat $s $LAT_N $([ $s -gt 8 ] && echo bcopy)'
		in_turn 'lat_rdmax "$d/lat_get_${s}__rdmax.txt" get $s $LAT_N' \
			'lat_floor "$d/lat_get_${s}__floor.txt" get $s $LAT_N' \
			'lat_perftest "$d/lat_get_${s}__ib_read_lat.txt" ib_read_lat $s $LAT_N'
	done
	in_turn 'lat_rdmax "$d/lat_fadd_8__rdmax.txt" fadd 8 $LAT_N' \
		'lat_floor "$d/lat_fadd_8__floor.txt" fadd 8 $LAT_N' \
		'pair "$d/lat_fadd_8__ib_atomic_lat.txt" 18515 ib_atomic_lat $(pt) -A FETCH_AND_ADD -n $LAT_N'
	in_turn 'lat_rdmax "$d/lat_cswap_8__rdmax.txt" cswap 8 $LAT_N' \
		'lat_floor "$d/lat_cswap_8__floor.txt" cswap 8 $LAT_N' \
		'pair "$d/lat_cswap_8__ib_atomic_lat.txt" 18515 ib_atomic_lat $(pt) -A CMP_AND_SWAP -n $LAT_N'

	say "round $r/$ROUNDS: bandwidth (64 KiB put, send, get; UD send 1 KiB)"
	in_turn 'bw_rdmax "$d/bw_put_65536__rdmax.txt" put 65536 $BW_N' \
		'bw_floor "$d/bw_put_65536__floor.txt" put 65536 $BW_N' \
		'bw_perftest "$d/bw_put_65536__ib_write_bw.txt" ib_write_bw 65536 $BW_N'
	in_turn 'bw_rdmax "$d/bw_send_65536__rdmax.txt" send 65536 $BW_N' \
		'bw_floor "$d/bw_send_65536__floor.txt" send 65536 $BW_N' \
		'bw_perftest "$d/bw_send_65536__ib_send_bw.txt" ib_send_bw 65536 $BW_N'
	in_turn 'bw_rdmax "$d/bw_get_65536__rdmax.txt" get 65536 $BW_N' \
		'bw_floor "$d/bw_get_65536__floor.txt" get 65536 $BW_N' \
		'bw_perftest "$d/bw_get_65536__ib_read_bw.txt" ib_read_bw 65536 $BW_N'
	in_turn 'bw_rdmax "$d/bw_udsend_1024__rdmax.txt" send 1024 $UD_N "-c UD"' \
		'bw_floor "$d/bw_udsend_1024__floor.txt" send 1024 $UD_N "-c UD"' \
		'bw_perftest "$d/bw_udsend_1024__ib_send_bw_ud.txt" ib_send_bw 1024 $UD_N "-c UD"'

	say "round $r/$ROUNDS: profiling (8 B put latency and rate: default, --profile, RDMAX_PROFILE)"
	pair "$d/prof_lat_put_8__default.txt" 18515 $PP -t put -s 8 -n $LAT_N
	pair "$d/prof_lat_put_8__notread.txt" 18515 $PP -t put -s 8 -n $LAT_N --profile
	pair "$d/prof_lat_put_8__points.txt" 18515 $B/rdmax_pingpong_rc_prof -t put -s 8 -n $LAT_N --profile
	pair "$d/prof_rate_put_8__default.txt" 18515 $BW -t put -s 8 -n $RATE_N
	pair "$d/prof_rate_put_8__notread.txt" 18515 $BW -t put -s 8 -n $RATE_N --profile
	pair "$d/prof_rate_put_8__points.txt" 18515 $B/rdmax_bw_prof -t put -s 8 -n $RATE_N --profile

	say "round $r/$ROUNDS: message rate (8 B puts; ib_write_bw default and -l 4/8/16/32)"
	in_turn 'bw_rdmax "$d/rate_put_8__rdmax.txt" put 8 $RATE_N' \
		'bw_floor "$d/rate_put_8__floor.txt" put 8 $RATE_N' \
		'bw_perftest "$d/rate_put_8__ib_write_bw.txt" ib_write_bw 8 $RATE_N
		for l in 4 8 16 32; do
			bw_perftest "$d/rate_put_8__ib_write_bw_l$l.txt" ib_write_bw 8 $RATE_N "-l $l"
		done'
done

if ((OTHERS)); then
	# ---- the page server example, for the record (not compared) ---------------------------------------
	say "pageserver: 4 KiB pages, 50% reads, 1 and 8 operations in flight"
	pair "$RAW/ps_o1.txt" 18516 $B/rdmax_pageserver -n 5000 -O 1
	pair "$RAW/ps_o8.txt" 18516 $B/rdmax_pageserver -n 20000 -O 8
	cat "$RAW/ps_o1.txt" "$RAW/ps_o8.txt" | grep -v '^# rxe' >"$RAW/pageserver.txt"

	# ---- access scoping (issue 30): one process, both cases in turn each round (bench/scope.c) ----------
	say "scope: exposed memory through memory windows beside RDMAX_ACCESS_ANY_ENDPOINT (connect, 8 B put rate, get latency)"
	before=$(hw_snap)
	st=0
	timeout -k 5 120 $CLI $B/scope -d "$DEV" >"$RAW/scope.txt" 2>&1 || st=$?
	{
		echo "# rxe: $(hw_delta "$before" "$(hw_snap)")"
		echo "# status: $st"
	} >>"$RAW/scope.txt"
	((st == 0)) || say "  FAILED ($st): $B/scope (see $RAW/scope.txt)"
fi

# ---- instructions per 8 B put (callgrind, user space only) -----------------------------------------
if [ "${RDMAX_BENCH_CALLGRIND:-1}" = 1 ] && command -v valgrind >/dev/null; then
	say "callgrind: rdmax_bw 8 B puts (post list 1 and 32), ib_write_lat 8 B"
	cg() { # NAME PORT SERVER... -- CLIENT...
		local name=$1 port=$2 st=0
		shift 2
		local srv=() cli=()
		while [ "$1" != -- ]; do srv+=("$1"); shift; done
		shift
		cli=("$@")
		timeout -k 5 240 $SRV "${srv[@]}" >"$RAW/$name.srv.txt" 2>&1 &
		local spid=$!
		wait_port "$port"
		timeout -k 5 240 $CLI valgrind --tool=callgrind --callgrind-out-file="$RAW/$name.out" "${cli[@]}" "$ADDR" \
			>"$RAW/$name.txt" 2>&1 || st=$?
		wait "$spid" 2>/dev/null
		echo "# status: $st" >>"$RAW/$name.txt"
		((st == 0)) || say "  FAILED ($st): callgrind $name"
	}
	cg cg_rdmax_l1 18515 $BW -- $BW -t put -s 8 -n 2000 -l 1 --profile
	cg cg_rdmax_l32 18515 $BW -- $BW -t put -s 8 -n 2000 -l 32 --profile
	cg cg_ib_write_lat 18515 ib_write_lat $(pt) -s 8 -n 1000 -- ib_write_lat $(pt) -s 8 -n 1000
	# rdmax's own instructions per operation: bench/instr.c, one callgrind part per case
	say "callgrind: own instructions per operation (bench/instr.c: put, send, get, fadd, cswap, put_list, put_batch, progress, tick, retire, recv, recv_one)"
	rm -f "$RAW"/cg_instr.out*
	timeout -k 5 600 $CLI valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$RAW/cg_instr.out" \
		$B/instr -d "$DEV" >"$RAW/cg_instr.txt" 2>&1
	echo "# status: $?" >>"$RAW/cg_instr.txt"
fi

# ---- whole-process instructions per round trip (callgrind over the client, the server plain) --------
# Each tool's 8 B ping-pong client under callgrind at two iteration counts, RT_REPS runs each;
# bench/cg_rt.pl (on the host) takes the difference over the difference of the counts, so start-up,
# connection and teardown cancel, per instruction (--dump-instr), so that what the waiting added can be
# told from the work (it differs between runs). Everything the client process runs in user space counts;
# system calls are counted (--collect-systime), the kernel's instructions are not. A run that fails (a
# slow client can miss rdmax's 1 s first-byte deadline) is tried again, twice at most. rdmax_pingpong runs
# with --no-check: perftest neither fills nor checks its payloads, so rdmax's rows leave that out too.
# Files: rt/CASE__TOOL__nN_K.out (callgrind), .txt (client output), .srv.txt (server output).
RT_ITERS=${RDMAX_BENCH_RT_ITERS:-200 600}
RT_REPS=${RDMAX_BENCH_RT_REPS:-3}
if [ "${RDMAX_BENCH_RT:-1}" = 1 ] && command -v valgrind >/dev/null; then
	mkdir -p "$RAW/rt"
	# rt NAME PORT CMD... : server `CMD -n N`, client `CMD -n N ADDR` under callgrind, for each N and rep
	rt() {
		local name=$1 port=$2 n k st f
		shift 2
		[[ $name =~ ${RDMAX_BENCH_RT_MATCH:-.} ]] || return 0
		local try spid
		for n in $RT_ITERS; do
			for ((k = 1; k <= RT_REPS; k++)); do
				f=$RAW/rt/${name}__n${n}_$k
				for try in 1 2 3; do
					st=0
					timeout -k 5 300 $SRV "$@" -n "$n" >"$f.srv.txt" 2>&1 &
					spid=$!
					wait_port "$port"
					timeout -k 5 300 $CLI valgrind --tool=callgrind --collect-systime=yes --dump-instr=yes \
						--compress-pos=no --compress-strings=no --callgrind-out-file="$f.out" \
						"$@" -n "$n" "$ADDR" >"$f.txt" 2>&1 || st=$?
					((st == 0)) || kill "$spid" 2>/dev/null  # a server whose client is gone may wait on
					wait "$spid" 2>/dev/null
					echo "# status: $st" >>"$f.txt"
					((st == 0)) && break
					say "  FAILED ($st): callgrind $name -n $n (try $try of 3)"
				done
			done
		done
	}
	say "callgrind: whole client process per round trip at -n ${RT_ITERS// / and -n }, $RT_REPS each (8 B put, send: rdmax, ib_*_lat, ucx_perftest; get, fadd: rdmax, floor, perftest)"
	rt rt_put_8__rdmax 18515 $PP -t put -s 8 --no-check
	rt rt_put_8__ib_write_lat 18515 ib_write_lat $(pt) -s 8
	rt rt_send_8__rdmax 18515 $PP -t send -s 8 --no-check
	rt rt_send_8__ib_send_lat 18515 ib_send_lat $(pt) -s 8
	if command -v ucx_perftest >/dev/null; then
		rt rt_put_8__ucx_put_lat 13337 ucx_perftest -d "$DEV:1" -x rc_verbs -t put_lat -s 8 -w 100
		rt rt_send_8__ucx_am_lat 13337 ucx_perftest -d "$DEV:1" -x rc_verbs -t am_lat -s 8 -w 100
	fi
	rt rt_get_8__rdmax 18515 $PP -t get -s 8 --no-check
	rt rt_get_8__floor 18515 $FL lat -t get -s 8 -d "$DEV" -x "$GID"
	rt rt_get_8__ib_read_lat 18515 ib_read_lat $(pt) -s 8
	rt rt_fadd_8__rdmax 18515 $PP -t fadd -s 8 --no-check
	rt rt_fadd_8__floor 18515 $FL lat -t fadd -s 8 -d "$DEV" -x "$GID"
	rt rt_fadd_8__ib_atomic_lat 18515 ib_atomic_lat $(pt) -A FETCH_AND_ADD
fi

# ---- size sweep for the plots: one pass, fewer iterations ------------------------------------------
if [ "${RDMAX_BENCH_SWEEP:-1}" = 1 ]; then
	d=$RAW/sweep
	mkdir -p "$d"
	SIZES="8 32 128 512 2048 8192 32768 65536"
	say "sweep: latency vs size ($SIZES), 300 iterations"
	for s in $SIZES; do
		lat_rdmax "$d/lat_put_${s}__rdmax.txt" put $s 300
		lat_perftest "$d/lat_put_${s}__ib_write_lat.txt" ib_write_lat $s 300
		lat_rdmax "$d/lat_send_${s}__rdmax.txt" send $s 300
		lat_perftest "$d/lat_send_${s}__ib_send_lat.txt" ib_send_lat $s 300
		lat_rdmax "$d/lat_get_${s}__rdmax.txt" get $s 300
		lat_perftest "$d/lat_get_${s}__ib_read_lat.txt" ib_read_lat $s 300
	done
	say "sweep: bandwidth vs size ($SIZES), 8 MiB or 10000 messages per point"
	for s in $SIZES; do
		n=$((8388608 / s))
		((n > 10000)) && n=10000
		((n < 200)) && n=200
		bw_rdmax "$d/bw_put_${s}__rdmax.txt" put $s $n
		bw_perftest "$d/bw_put_${s}__ib_write_bw.txt" ib_write_bw $s $n
		bw_rdmax "$d/bw_send_${s}__rdmax.txt" send $s $n
		bw_perftest "$d/bw_send_${s}__ib_send_bw.txt" ib_send_bw $s $n
		bw_rdmax "$d/bw_get_${s}__rdmax.txt" get $s $n
		bw_perftest "$d/bw_get_${s}__ib_read_bw.txt" ib_read_bw $s $n
	done
fi
say "done"
