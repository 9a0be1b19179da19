#!/usr/bin/env bash
# bench/run.sh - the side-by-side benchmark behind `make bench`: rdmax against perftest, ucx_perftest
# and UCX's own data structures, on the same device, interleaved, three rounds paired by round.
#
#   bench/run.sh                 (from anywhere; works in the repository root)
#
# Steps:
#   1. builds what it measures into build-bench/ through the Makefile (`make bench-progs`: rdmax_bw,
#      rdmax_pageserver, a copy of rdmax_pingpong_rc so a stale build/ never gets measured, the _prof
#      copies, instr, floor, clockcheck, arbiter_bench; then rcache_bench when libucx-dev is there)
#   2. host cases (no device needed): bench/arbiter_bench.c and bench/rcache_bench.c
#   3. boots the soft-RoCE VM once (tests/vm/run) and runs bench/guest.sh there: per round, every
#      device case runs rdmax, the raw-verbs floor (bench/floor.c), then the reference tools (three
#      rounds); then callgrind (instructions per 8 B put; whole client processes per ping-pong round trip
#      beside perftest and ucx_perftest, bench/cg_rt.pl), the clock check (bench/clockcheck.c) and a
#      size sweep for the plots
#   4. parses the raw outputs and writes bench/results/summary.csv, summary.md and PNG plots
#      (gnuplot), keeping the raw outputs in bench/results/raw/ (not meant for git: see .gitignore
#      there)
# Progress goes to stdout. Environment: CC (cc), RDMAX_BENCH_* knobs of bench/guest.sh,
# RDMAX_BENCH_VM_TIMEOUT (1750 s for the whole guest part). Exit status: 0 when every number was
# measured (goals met or not), 1 when a build or the VM failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
T0=$SECONDS
RES=bench/results
RAW=$RES/raw
B=build-bench
CC=${CC:-cc}
say() { printf '[bench %4ds] %s\n' $((SECONDS - T0)) "$*"; }
die() { say "ERROR: $*"; exit 1; }

# ---- 1. build -------------------------------------------------------------------------------------
mkdir -p "$B" "$RES"
rm -rf "$RAW"
mkdir -p "$RAW"
printf '*\n!.gitignore\n' >"$RAW/.gitignore"
say "building into $B/ (make bench-progs; log: $RAW/build.log)"
make --no-print-directory -C . CC="$CC" BB="$B" bench-progs >>"$RAW/build.log" 2>&1 ||
	die "make bench-progs failed (see $RAW/build.log)"
# the arbiter beside UCX's ucs_arbiter (libucs, Debian's libucx-dev); without libucs rdmax's cases alone
ucs_arb=ucs_arbiter
if [ ! -e "$B/arbiter_bench.ucs" ]; then
	ucs_arb="ucs_arbiter (not installed: libucx-dev)"
	say "arbiter_bench was built without libucs (libucx-dev missing?): its ucs_arbiter rows say not installed"
fi
have_rcache=1
make --no-print-directory -C . CC="$CC" $B/rcache_bench >>"$RAW/build.log" 2>&1 || {
	say "rcache_bench does not build (libucx-dev missing?): its rows stay empty"
	have_rcache=0
}

# ---- 2. host cases ---------------------------------------------------------------------------------
say "host: arbiter_bench"
$B/arbiter_bench >"$RAW/host_arbiter.txt" 2>&1 || say "arbiter_bench failed (see $RAW/host_arbiter.txt)"
if ((have_rcache)); then
	say "host: rcache_bench (rdmax rcache vs UCX ucs_rcache)"
	$B/rcache_bench >"$RAW/host_rcache.txt" 2>&1 || say "rcache_bench failed (see $RAW/host_rcache.txt)"
fi

# ---- 3. the device part, in one VM boot ------------------------------------------------------------
say "device: booting the soft-RoCE VM once for every device case (takes most of the time)"
vm_status=0
tests/vm/run --timeout "${RDMAX_BENCH_VM_TIMEOUT:-1750}" -- bench/guest.sh "$RAW" 2>&1 |
	grep --line-buffered -v 'speed is unknown' | tee "$RAW/vm.log"
vm_status=${PIPESTATUS[0]}
((vm_status == 0)) || say "the VM run ended with status $vm_status (124: timeout); summarising what was measured"

# ---- 4. parse --------------------------------------------------------------------------------------
say "summarising"
# value FILE KIND: the number a tool printed. KIND: lat (t_typical of perftest's and rdmax_pingpong's
# latency table), ucx (percentile latency of ucx_perftest's Final line), bw (BW average, MB/s), rate
# (MsgRate, Mpps). Nothing when the run failed.
value() {
	local f=$1 k=$2
	[ -f "$f" ] || return 0
	grep -q '^# status: 0$' "$f" || return 0
	case $k in
	ucx) awk '$1 == "Final:" { print $3; exit }' "$f" ;;
	lat) awk '/t_typical/ { h = 1; next } h && $1 ~ /^[0-9]+$/ && NF >= 5 { print $5; exit }' "$f" ;;
	bw) awk '/BW average/ { h = 1; next } h && $1 ~ /^[0-9]+$/ && NF >= 5 { print $4; exit }' "$f" ;;
	rate) awk '/BW average/ { h = 1; next } h && $1 ~ /^[0-9]+$/ && NF >= 5 { print $5; exit }' "$f" ;;
	esac
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit; if (NR % 2) print v[(NR + 1) / 2]; else printf "%.6g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# rounds CASE TOOL KIND: the per-round values, one per line
rounds() { local f; for f in "$RAW"/r*/"$1__$2.txt"; do value "$f" "$3"; done; }
med() { rounds "$1" "$2" "$3" | median; }
# paired CASE TOOL REF KIND [REFKIND]: "tool reference" of one round, the one whose tool / reference
# ratio is the median of the rounds where both ran (of two, the lower). Within a round the tools of a
# case run back to back; between rounds the guest drifts (a round where every tool is 20% slower is
# common), so the ratio of separate medians can pair a slow round of one tool with a fast one of another.
paired() {
	local d a b
	for d in "$RAW"/r*; do
		a=$(value "$d/$1__$2.txt" "$4")
		b=$(value "$d/$1__$3.txt" "${5:-$4}")
		[ -n "$a" ] && [ -n "$b" ] && echo "$a $b"
	done | median_pair
}
# median_pair: lines "a b" -> the one whose a / b is the median (of an even count, the lower middle)
median_pair() {
	awk '$2 != 0 { print $1 / $2, $1, $2 }' | sort -g | awk '{ v[NR] = $2 " " $3 } END { if (NR) print v[int((NR + 1) / 2)] }'
}
# prow CASE SIZE METRIC RAWCASE TOOL REF KIND REFKIND LABEL GOAL: a row of paired values
prow() {
	local a b
	read -r a b <<<"$(paired "$4" "$5" "$6" "$7" "$8")"
	row "$1" "$2" "$3" "${a:-}" "$9" "${b:-}" "${10}"
}
# best_l ROUNDDIR: "rate l" of ib_write_bw's best post list in that round (of equal rates, the shortest list)
best_l() {
	local l
	for l in 4 8 16 32; do echo "$(value "$1/rate_put_8__ib_write_bw_l$l.txt" rate) $l"; done |
		awk 'NF == 2' | sort -k1,1g -k2,2nr | tail -1
}

CSV=$RES/summary.csv
ROWS=$RAW/rows.txt    # case size metric rdmax tool reference ratio goal, separated by US (0x1f): empty
                      # fields survive `read` (tabs would collapse as IFS whitespace)
US=$'\x1f'
: >"$ROWS"
# row CASE SIZE METRIC RDMAX TOOL REF GOAL: ratio = rdmax / reference; GOAL is "le X" or "ge X" (ratio),
# or "-" for none
row() {
	local ratio=""
	[ -n "$4" ] && [ -n "$6" ] && ratio=$(awk -v a="$4" -v b="$6" 'BEGIN { if (b != 0) printf "%.3f", a / b }')
	printf '%s\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s\x1f%s\n' "$1" "$2" "$3" "$4" "$5" "$6" "$ratio" "$7" >>"$ROWS"
}

FLOOR="raw verbs floor"
for op in put send get; do
	case $op in put) pt=ib_write_lat ucx=ucx_put_lat ;; send) pt=ib_send_lat ucx=ucx_am_lat ;; get) pt=ib_read_lat ucx= ;; esac
	for s in 8 4096; do
		prow "lat_$op" $s t_typical_us "lat_${op}_$s" rdmax floor lat lat "$FLOOR" "le 1.02"
		prow "lat_$op" $s t_typical_us "lat_${op}_$s" rdmax $pt lat lat "$pt" "le 1.0"
		[ -n "$ucx" ] && prow "lat_$op" $s t_typical_us "lat_${op}_$s" rdmax $ucx lat ucx "ucx_perftest ${ucx#ucx_} rc_verbs p50" "le 1.0"
	done
done
for a in fadd:FETCH_AND_ADD cswap:CMP_AND_SWAP; do
	prow "lat_${a%%:*}" 8 t_typical_us "lat_${a%%:*}_8" rdmax floor lat lat "$FLOOR" "le 1.02"
	prow "lat_${a%%:*}" 8 t_typical_us "lat_${a%%:*}_8" rdmax ib_atomic_lat lat lat "ib_atomic_lat -A ${a#*:}" "le 1.0"
done
# profiling (issue 7): the default build has the variables and events compiled in; --profile reads them
# once, after the run ("compiled in, not read" during it). RDMAX_PROFILE adds the timed points.
prow profile_lat_put 8 t_typical_us prof_lat_put_8 notread default lat lat "default build, profile not opened" "le 1.02"
prow profile_lat_put 8 t_typical_us prof_lat_put_8 points default lat lat "default build, profile not opened" "-"
prow profile_rate_put 8 msg_rate_Mpps prof_rate_put_8 notread default rate rate "default build, profile not opened" "ge 0.98"
prow profile_rate_put 8 msg_rate_Mpps prof_rate_put_8 points default rate rate "default build, profile not opened" "-"
for op in put:ib_write_bw send:ib_send_bw get:ib_read_bw; do
	prow "bw_${op%%:*}" 65536 bw_avg_MBps "bw_${op%%:*}_65536" rdmax floor bw bw "$FLOOR" "ge 0.98"
	prow "bw_${op%%:*}" 65536 bw_avg_MBps "bw_${op%%:*}_65536" rdmax "${op#*:}" bw bw "${op#*:}" "ge 1.0"
done
prow bw_ud_send 1024 bw_avg_MBps bw_udsend_1024 rdmax floor bw bw "$FLOOR" "ge 0.98"
prow bw_ud_send 1024 bw_avg_MBps bw_udsend_1024 rdmax ib_send_bw_ud bw bw "ib_send_bw -c UD" "ge 1.0"
prow rate_put 8 msg_rate_Mpps rate_put_8 rdmax floor rate rate "$FLOOR" "ge 0.98"
prow rate_put 8 msg_rate_Mpps rate_put_8 rdmax ib_write_bw rate rate "ib_write_bw (default post list)" "ge 1.3"
# ib_write_bw's best post list of each round, paired with rdmax's rate of that round; which -l won most often
bestl=$(for d in "$RAW"/r*; do best_l "$d"; done | awk '{ print $2 }' | sort | uniq -c | sort -rn | awk 'NR == 1 { print $2 }')
read -r rr best <<<"$(for d in "$RAW"/r*; do
	a=$(value "$d/rate_put_8__rdmax.txt" rate)
	read -r b _ <<<"$(best_l "$d")"
	[ -n "$a" ] && [ -n "$b" ] && echo "$a $b"
done | median_pair)"
row rate_put 8 msg_rate_Mpps "${rr:-}" "ib_write_bw best post list (-l ${bestl:-?} most often)" "${best:-}" "ge 1.0"

# Instructions per 8 B put (user space, callgrind). rdmax: the inclusive cost of bw_put (rdmax_put plus
# the provider's post_send it calls), of bw_put_list (rdmax_put_list, the post list of -l > 1) and of
# rdmax__post_chain called from elsewhere (a chain posted by rdmax_batch_end), over the puts posted; the provider's share is its inclusive cost per call times the
# calls, over the puts. perftest: the provider's post_send entry (the same function of librxe, found as
# bw_put's callee) per call in ib_write_lat.
cgv() { perl bench/cg_calls.pl "$@" 2>/dev/null; }
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" | head -1; }
posted_puts() { sed -n 's/^ *put *posted \([0-9]*\).*/\1/p' "$1" | head -1; }
instr_rdmax() { # FILE.out FILE.txt -> "total provider_per_put provider_fn"
	local out=$1 txt=$2 n p incl chain chain_in prov_fn prov_incl
	[ -s "$out" ] || return 0
	n=$(posted_puts "$txt")
	[ -n "$n" ] && [ "$n" -gt 0 ] || return 0
	p=$(cgv "$out" bw_put bw_put_list rdmax__post_chain rdmax__put_chained)
	incl=$(echo "$p" | awk '/^fn=(bw_put|bw_put_list) / { sub(/.* incl=/, ""); s += $1 } END { print s + 0 }')
	chain=$(echo "$p" | grep '^fn=rdmax__post_chain ' | field incl)
	# chains posted from inside bw_put (its batch_end, or a chained put that filled the staging through
	# rdmax__put_chained, which only rdmax_put calls) are in bw_put's count already
	chain_in=$(echo "$p" | awk '/^fn=(bw_put|bw_put_list|rdmax__put_chained) /{ f = 1; next } /^fn=/{ f = 0 }
		f && /^callee=rdmax__post_chain / { sub(/.* incl=/, ""); s += $1 } END { print s + 0 }')
	prov_fn=$(echo "$p" | awk '/^fn=/{ f = ($1 == "fn=bw_put" || $1 == "fn=bw_put_list") } f && /^callee=/ && /librxe/ { sub("callee=", "", $1); print $1; exit }')
	[ -n "$prov_fn" ] || prov_fn=$(echo "$p" | awk '/^fn=rdmax__post_chain /{ f = 1; next } /^fn=/{ f = 0 } f && /librxe/ { sub("callee=", "", $1); print $1; exit }')
	prov_incl=$(cgv "$out" "$prov_fn" | grep "^fn=" | field incl)
	awk -v i="${incl:-0}" -v c="${chain:-0}" -v ci="${chain_in:-0}" -v n="$n" -v pi="${prov_incl:-0}" -v f="$prov_fn" \
		'BEGIN { printf "%.1f %.1f %s\n", (i + c - ci) / n, pi / n, f }'
}
read -r l1_total l1_prov prov_fn <<<"$(instr_rdmax "$RAW/cg_rdmax_l1.out" "$RAW/cg_rdmax_l1.txt")"
read -r l32_total l32_prov _ <<<"$(instr_rdmax "$RAW/cg_rdmax_l32.out" "$RAW/cg_rdmax_l32.txt")"
pt_post=""
[ -n "${prov_fn:-}" ] && [ -s "$RAW/cg_ib_write_lat.out" ] && pt_post=$(cgv "$RAW/cg_ib_write_lat.out" "$prov_fn" | grep '^fn=' | field per_call)
ref_tool="ib_write_lat: rxe post_send entry per call"
l1_own=$([ -n "${l1_total:-}" ] && awk -v a="$l1_total" -v b="$l1_prov" 'BEGIN { printf "%.1f", a - b }')
l32_own=$([ -n "${l32_total:-}" ] && awk -v a="$l32_total" -v b="$l32_prov" 'BEGIN { printf "%.1f", a - b }')
row instr_put 8 "instructions_per_put (post list 1, provider included)" "${l1_total:-}" "$ref_tool" "$pt_post" "le 1.0"
row instr_put 8 "instructions_per_put (post list 1, minus provider post_send)" "$l1_own" "$ref_tool" "$pt_post" "-"
row instr_put 8 "instructions_per_put (post list 32, provider included)" "${l32_total:-}" "$ref_tool" "$pt_post" "le 1.0"
row instr_put 8 "instructions_per_put (post list 32, minus provider post_send)" "$l32_own" "$ref_tool" "$pt_post" "-"

# rdmax's own instructions per operation (bench/instr.c under callgrind, one part per case): the
# inclusive cost of the case's function minus its calls into the provider (librxe, libibverbs), per
# operation. Reference: the budget of issue 15.
instr_own() { # CASE -> own instructions per operation
	local f ops
	ops=$(sed -n "s/^instr case=$1 ops=\([0-9]*\).*/\1/p" "$RAW/cg_instr.txt" 2>/dev/null)
	[ -n "$ops" ] || return 0
	f=$(grep -l "^desc: Trigger: Client Request: $1\$" "$RAW"/cg_instr.out.* 2>/dev/null | head -1)
	[ -n "$f" ] || return 0
	perl bench/cg_calls.pl --own "$f" "cg_$1" 'librxe|libibverbs' |
		awk -v n="$ops" '{ split($1, o, "="); printf "%.1f\n", o[2] / n }'
}
for c in put:40 send:40 get:45 fadd:45 cswap:45 put_list:40 put_batch:40 progress:25 retire:60 recv:80; do
	row "instr_${c%%:*}" 8 own_instructions "$(instr_own "${c%%:*}")" "budget (issue 15)" "${c#*:}" "le 1.0"
done
# a ping-pong's receive (one message with a credit, its repost not amortised) beside recv's batch of 16
row instr_recv_one 8 own_instructions "$(instr_own recv_one)" "rdmax, recv (a batch of 16)" "$(instr_own recv)" "-"
# the health pass (device events, watchdog, keepalive): at most once a millisecond, by elapsed time
row instr_tick 8 own_instructions_per_pass "$(instr_own tick)" "-" "" "-"

# Whole-process instructions per round trip (bench/guest.sh, rt/; bench/cg_rt.pl): each tool's 8 B
# ping-pong client under callgrind at two iteration counts; per round trip = the difference of the two
# counts over the difference of the iteration counts, the pair of runs with the smallest total, and an
# estimate without the waiting (nowait). By object: own (the program: the executable, and UCX's libraries
# for ucx_perftest), provider (librxe, libibverbs), rest (libc, the loader, other libraries).
RT_N=$(ls "$RAW"/rt/*__n*_*.out 2>/dev/null | sed 's/.*__n\([0-9]*\)_[0-9]*\.out$/\1/' | sort -nu | tr '\n' ' ')
read -r rt_n1 rt_n2 _ <<<"$RT_N"
# rt_per CASE__TOOL -> "total own provider rest nowait nowait_own nowait_provider nowait_rest syscalls
# clockreads sort" per round trip (runs that ended well only; sort: the part of nowait that sorts the samples)
rt_per() {
	[ -n "${rt_n2:-}" ] || return 0
	local f ok=()
	for f in "$RAW"/rt/"$1"__n*_*.out; do
		[ -s "$f" ] && grep -q '^# status: 0$' "${f%.out}.txt" 2>/dev/null && ok+=("$f")
	done
	((${#ok[@]})) || return 0
	perl bench/cg_rt.pl "$rt_n1" "$rt_n2" "${ok[@]}" 2>/dev/null | awk '
		/^ob=/ { ob = $1; sub(/^ob=/, "", ob); t = $2; sub(/^total=/, "", t); w = $3; sub(/^nowait=/, "", w)
			g = ob ~ /librxe|libibverbs/ ? 2 : (ob !~ /\.so/ && ob != "???") || ob ~ /\/libuc[mpst][.-]|\/libuct_/ ? 1 : 3
			T[0] += t; T[g] += t; W[0] += w; W[g] += w; n++ }
		/^sort / { so = $2; sub(/^nowait=/, "", so) }
		/^sys / { sc = $2; sub(/^syscalls=/, "", sc); cr = $3; sub(/^clock_reads=/, "", cr) }
		END { if (n) printf "%.0f %.0f %.0f %.0f %.0f %.0f %.0f %.0f %.2f %.2f %.0f\n", T[0], T[1], T[2], T[3], W[0], W[1], W[2], W[3], sc, cr, so }'
}
ucx_missing=""
command -v ucx_perftest >/dev/null || ucx_missing=" (not installed: ucx-utils)"
RT_TABLE=$RAW/rt_table.txt   # case tool, then rt_per's fields, for summary.md
: >"$RT_TABLE"
for c in put:ib_write_lat:ucx_put_lat send:ib_send_lat:ucx_am_lat get:floor:ib_read_lat fadd:floor:ib_atomic_lat; do
	IFS=: read -r op t1 t2 <<<"$c"
	v=$(rt_per "rt_${op}_8__rdmax")
	read -r ra ro rp _ rwa rwo rwp _ _ _ rws <<<"$v"
	echo "rt_${op}_8 rdmax $v" >>"$RT_TABLE"
	for t in $t1 $t2; do
		v=$(rt_per "rt_${op}_8__$t")
		read -r ta to tp _ twa two twp _ _ _ tws <<<"$v"
		echo "rt_${op}_8 $t $v" >>"$RT_TABLE"
		case $t in
		ib_*) lbl=$t g="le 1.0" ;;
		ucx_*) lbl="ucx_perftest ${t#ucx_} rc_verbs$ucx_missing" g="le 0.5" ;;
		*) lbl="raw verbs floor" g="-" ;;
		esac
		# the goals (issue 31) are for put and send; get and fadd are here for the timing check
		case $op in get | fadd) g="-" ;; esac
		row "rt_$op" 8 "instructions_per_round_trip (whole client process)" "${ra:-}" "$lbl" "${ta:-}" "-"
		row "rt_$op" 8 "instructions_per_round_trip (own code)" "${ro:-}" "$lbl" "${to:-}" "-"
		row "rt_$op" 8 "instructions_per_round_trip (provider: librxe, libibverbs)" "${rp:-}" "$lbl" "${tp:-}" "-"
		row "rt_$op" 8 "instructions_per_round_trip without waiting (estimate)" "${rwa:-}" "$lbl" "${twa:-}" "$g"
		row "rt_$op" 8 "instructions_per_round_trip without waiting (own code)" "${rwo:-}" "$lbl" "${two:-}" "-"
		row "rt_$op" 8 "instructions_per_round_trip without waiting (provider)" "${rwp:-}" "$lbl" "${twp:-}" "-"
		row "rt_$op" 8 "instructions_per_round_trip without waiting (the sort of the samples)" "${rws:-}" "$lbl" "${tws:-}" "-"
	done
done

# The timing method (bench/clockcheck.c in the guest): what a CLOCK_MONOTONIC read costs there, and
# the cycle counter's rate as the examples and the floor calibrate it (against CLOCK_MONOTONIC) beside
# the rate perftest divides by. perftest_scale = a perftest time / the same interval on the examples'
# clock; the atomics and get rows again with perftest's times put on the examples' clock.
ck() { sed -n "s/^clock.* $1=\([^ ]*\).*/\1/p" "$RAW/clock.txt" 2>/dev/null | head -1; }
row clock - "ns per clock_gettime(CLOCK_MONOTONIC) (clocksource $(ck clocksource))" "$(ck monotonic)" "rdtsc" "$(ck rdtsc)" "-"
row clock - "cycle counter ticks per us (examples, floor: against CLOCK_MONOTONIC)" "$(ck cal100ms)" \
	"perftest's MHz ($(ck perftest_source))" "$(ck perftest_mhz)" "-"
scale=$(ck perftest_scale)
for a in get:ib_read_lat fadd:ib_atomic_lat cswap:ib_atomic_lat; do
	read -r x y <<<"$(paired "lat_${a%%:*}_8" rdmax "${a#*:}" lat lat)"
	[ -n "${y:-}" ] && [ -n "$scale" ] && y=$(awk -v y="$y" -v k="$scale" 'BEGIN { if (k > 0) printf "%.2f", y / k }')
	row "lat_${a%%:*}" 8 "t_typical_us, perftest's on the examples' clock" "${x:-}" "${a#*:}" "${y:-}" "-"
done

# Access scoping (issue 30; bench/scope.c in the guest, raw/scope.txt): regions exposed through a memory
# window bound to the endpoint's QP beside the same regions registered RDMAX_ACCESS_ANY_ENDPOINT (a plain
# registration), in one process, the cases taking turns. Ratio = windows / plain.
sv() { # CASE -> the value of "bench scope case=CASE value=V ..." (nothing when the run failed)
	grep -q '^# status: 0$' "$RAW/scope.txt" 2>/dev/null || return 0
	sed -n "s/^bench scope case=$1 value=\([^ ]*\) .*/\1/p" "$RAW/scope.txt" | head -1
}
ANY="RDMAX_ACCESS_ANY_ENDPOINT (no window)"
for r in 1:1_region 4:4_regions; do
	n=${r%%:*} sz=${r#*:}
	row scope_connect "$sz" "us_per_pair made and connected (median)" "$(sv setup_window_r$n)" "$ANY" "$(sv setup_any_r$n)" "-"
	row scope_connect "$sz" "us_per_pair connecting, rdmax's part (binds; no ibv_modify_qp)" "$(sv connected_own_window_r$n)" \
		"$ANY" "$(sv connected_own_any_r$n)" "-"
	row scope_connect "$sz" "us_per_pair connecting, ibv_modify_qp (RTR, RTS)" "$(sv connected_qp_window_r$n)" "$ANY" \
		"$(sv connected_qp_any_r$n)" "-"
	row scope_connect "$sz" "us_per_pair made (rdmax_ep_create x 2)" "$(sv made_window_r$n)" "$ANY" "$(sv made_any_r$n)" "-"
	row scope_connect "$sz" "us_per_pair destroyed (rdmax_ep_destroy x 2)" "$(sv destroyed_window_r$n)" "$ANY" \
		"$(sv destroyed_any_r$n)" "-"
done
row scope_put 8 "msg_rate_Mpps (inline, unsignaled, flush every 64)" "$(sv put_rate_window)" "$ANY" "$(sv put_rate_any)" "-"
row scope_get 8 "round_trip_us (median)" "$(sv get_lat_window)" "$ANY" "$(sv get_lat_any)" "-"

# host cases
hv() { sed -n "s/^bench $1 case=$2 value=\([^ ]*\) .*/\1/p" "$RAW/host_$1.txt" 2>/dev/null | head -1; }
row arbiter 10000_groups dispatch_ns_per_element "$(hv arbiter dispatch_10k)" "rdmax arbiter, 10 groups" "$(hv arbiter dispatch_10)" "le 1.2"
for g in 10 1000 10k; do
	row arbiter "${g/10k/10000}_groups" dispatch_ns_per_element "$(hv arbiter dispatch_$g)" "$ucs_arb" "$(hv arbiter ucs_dispatch_$g)" "le 0.5"
done
row arbiter 10000_vs_10_groups dispatch_cost_ratio "$(hv arbiter ratio_10k_10)" "$ucs_arb, its 10,000 / 10 groups" "$(hv arbiter ucs_ratio_10k_10)" "le 1.0"
row arbiter 1_endpoint pending_add_plus_dispatch_ns "$(hv arbiter add_dispatch)" "-" "" "-"
row arbiter 10000_endpoints pending_add_plus_dispatch_ns "$(hv arbiter add_dispatch_10k)" "-" "" "-"
row arbiter empty empty_check_ns "$(hv arbiter empty_check)" "the same loop without the check" "$(hv arbiter empty_loop)" "-"
row rcache 8192 hit_ns "$(hv rcache hit_rdmax)" "UCX ucs_rcache (1.13)" "$(hv rcache hit_ucx)" "le 1.0"
row rcache 8192 miss_ns "$(hv rcache miss_rdmax)" "UCX ucs_rcache (1.13)" "$(hv rcache miss_ucx)" "-"
row rcache 8192 hit_ns_monitor_on "$(hv rcache hit_rdmax_monitor)" "UCX ucs_rcache (1.13)" "$(hv rcache hit_ucx)" "le 1.0"
row rcache 8192 miss_ns_monitor_on "$(hv rcache miss_rdmax_monitor)" "UCX ucs_rcache (1.13)" "$(hv rcache miss_ucx)" "-"
row rcache 8192 miss_ns_new_mapping_monitor_on "$(hv rcache miss_newmap_monitor)" "the same miss, monitor off" "$(hv rcache miss_newmap_manual)" "-"
row rcache 65536 munmap_ns_of_cached_region "$(hv rcache munmap_cached_monitor)" "the same munmap without rdmax" "$(hv rcache munmap_plain)" "-"

# summary.csv: goal ("ratio <= X" / "ratio >= X" / "-") and whether it was met, as in summary.md
met() { # ratio goal -> yes/no/-
	local r=$1 g=$2
	[ "$g" = - ] && { echo "-"; return; }
	[ -n "$r" ] || { echo "not measured"; return; }
	awk -v r="$r" -v op="${g% *}" -v x="${g#* }" 'BEGIN { ok = op == "le" ? r <= x : r >= x; print ok ? "yes" : "**no**" }'
}
goal_text() { case $1 in "le "*) echo "ratio <= ${1#le }" ;; "ge "*) echo "ratio >= ${1#ge }" ;; *) echo "-" ;; esac; }
{
	echo "case,size,metric,rdmax,reference_tool,reference,ratio,goal,met"
	while IFS=$US read -r c sz m r t ref ratio g; do
		mt=$(met "$ratio" "$g")
		printf '%s,%s,"%s",%s,"%s",%s,%s,"%s",%s\n' "$c" "$sz" "$m" "$r" "${t//\"/\"\"}" "$ref" "$ratio" "$(goal_text "$g")" "${mt//\*/}"
	done <"$ROWS"
} >"$CSV"

# ---- plots: the sweep ------------------------------------------------------------------------------
SW=$RAW/sweep
SIZES="8 32 128 512 2048 8192 32768 65536"
{
	echo "# size rdmax_put ib_write_lat rdmax_send ib_send_lat rdmax_get ib_read_lat   (t_typical, usec)"
	for s in $SIZES; do
		printf '%s' "$s"
		for c in put:rdmax put:ib_write_lat send:rdmax send:ib_send_lat get:rdmax get:ib_read_lat; do
			v=$(value "$SW/lat_${c%%:*}_${s}__${c#*:}.txt" lat)
			printf ' %s' "${v:-NaN}"
		done
		echo
	done
} >"$RES/sweep_latency.dat"
{
	echo "# size rdmax_put ib_write_bw rdmax_send ib_send_bw rdmax_get ib_read_bw   (BW average, MB/s)"
	for s in $SIZES; do
		printf '%s' "$s"
		for c in put:rdmax put:ib_write_bw send:rdmax send:ib_send_bw get:rdmax get:ib_read_bw; do
			v=$(value "$SW/bw_${c%%:*}_${s}__${c#*:}.txt" bw)
			printf ' %s' "${v:-NaN}"
		done
		echo
	done
} >"$RES/sweep_bandwidth.dat"
if command -v gnuplot >/dev/null; then
	gnuplot <<EOF || say "gnuplot failed"
set terminal pngcairo size 1000,620 noenhanced font ",11"
set datafile missing "NaN"
set logscale x 2
set format x "%.0f"
set xtics (8, 32, 128, 512, 2048, 8192, 32768, 65536)
set grid
set key top left
set xlabel "message size [bytes]"
set style line 1 lc rgb "#1f77b4" lw 2 pt 7
set style line 2 lc rgb "#1f77b4" lw 2 pt 6 dt 2
set style line 3 lc rgb "#d62728" lw 2 pt 5
set style line 4 lc rgb "#d62728" lw 2 pt 4 dt 2
set style line 5 lc rgb "#2ca02c" lw 2 pt 9
set style line 6 lc rgb "#2ca02c" lw 2 pt 8 dt 2
set output "$RES/latency_vs_size.png"
set title "Latency vs size on soft-RoCE (rxe0 in the qemu VM): rdmax (solid) beside perftest (dashed), t_typical"
set ylabel "t_typical [usec] (send/put: half round trip; get: round trip)"
set logscale y
plot "$RES/sweep_latency.dat" u 1:2 w lp ls 1 t "rdmax put", "" u 1:3 w lp ls 2 t "ib_write_lat", \
     "" u 1:4 w lp ls 3 t "rdmax send", "" u 1:5 w lp ls 4 t "ib_send_lat", \
     "" u 1:6 w lp ls 5 t "rdmax get", "" u 1:7 w lp ls 6 t "ib_read_lat"
unset logscale y
set output "$RES/bandwidth_vs_size.png"
set title "Bandwidth vs size on soft-RoCE (rxe0 in the qemu VM): rdmax_bw (solid) beside perftest (dashed)"
set ylabel "BW average [MB/s]"
plot "$RES/sweep_bandwidth.dat" u 1:2 w lp ls 1 t "rdmax put", "" u 1:3 w lp ls 2 t "ib_write_bw", \
     "" u 1:4 w lp ls 3 t "rdmax send", "" u 1:5 w lp ls 4 t "ib_send_bw", \
     "" u 1:6 w lp ls 5 t "rdmax get", "" u 1:7 w lp ls 6 t "ib_read_bw"
EOF
	# ratios of the side-by-side cases (log scale: 1 is parity; what counts as better depends on the metric)
	awk -F"$US" '$7 != "" && $1 !~ /^instr|^arbiter|^rcache|^scope/ { n++; lbl = $1 " " $2 " vs " $5; gsub(/ rc_verbs p50| \(default post list\)|best post list \(-l [^)]*\)/, "", lbl);
		if ($5 ~ /best post list/) lbl = lbl " (best -l)"; print n, $7, "\"" lbl "\"" }' "$ROWS" >"$RES/ratios.dat"
	gnuplot <<EOF || say "gnuplot (ratios) failed"
set terminal pngcairo size 1100,640 noenhanced font ",10"
set output "$RES/ratios.png"
set title "rdmax / reference (the round with the median ratio of 3). Latency: below 1 is better; bandwidth and rate: above 1 is better"
set style fill solid 0.6
set boxwidth 0.7
set yrange [0:*]
set grid y
set xtics rotate by 60 right
set arrow from graph 0, first 1 to graph 1, first 1 nohead lc rgb "black" lw 2
plot "$RES/ratios.dat" u 1:2:xtic(3) w boxes lc rgb "#1f77b4" notitle
EOF
else
	say "gnuplot not found: no plots"
fi

# ---- summary.md ------------------------------------------------------------------------------------
ENV=$RAW/env.txt
envv() { sed -n "s/^$1: //p" "$ENV" 2>/dev/null | head -1; }
retries=$(cat "$RAW"/r*/*.txt 2>/dev/null | grep -o 'completer_retry_err+[0-9]*' | awk -F+ '{ s += $2; n++ } END { print s + 0 " in " n + 0 " runs" }')
elapsed=$((SECONDS - T0))
{
	echo "# rdmax side-by-side benchmark"
	echo
	echo "- date: $(envv date)"
	echo "- guest kernel: $(envv kernel); host kernel: $(uname -r)"
	echo "- device: $(envv device)"
	echo "- guest: $(envv cpus), clocksource $(envv clocksource); $(envv perftest)"
	echo "- host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "- run time of bench/run.sh: $((elapsed / 60)) min $((elapsed % 60)) s; VM exit status $vm_status"
	echo "- method: one VM boot; per round each case runs rdmax, the raw-verbs floor, then the reference tools,"
	echo "  three rounds; each row is the round whose rdmax / reference ratio is the median of the three;"
	echo "  server pinned to CPU 1 and client to CPU 0"
	echo "- rxe retransmissions after an ack timeout (completer_retry_err) during the rounds: $retries"
	echo
	echo "| case | size | metric | rdmax | reference tool | reference | ratio | goal | met |"
	echo "|---|---|---|---|---|---|---|---|---|"
	while IFS=$US read -r c s m r t ref ratio g; do
		echo "| $c | $s | $m | ${r:--} | $t | ${ref:--} | ${ratio:--} | $(goal_text "$g") | $(met "$ratio" "$g") |"
	done <"$ROWS"
	echo
	echo "Ratio = rdmax / reference within one round, the round whose ratio is the median of the three; the"
	echo "row shows both values of that round. Within a round the tools of a case run one after another, and"
	echo "each round starts the turn one tool later (each runs first once); between rounds the guest drifts"
	echo "(every tool 20% slower in one round is common), so ratios are taken within a round, not between"
	echo "medians taken apart. Every round's values are listed below."
	echo "Latency (t_typical, the median; ucx_perftest: its 50th percentile) is"
	echo "lower-is-better: goal <= 1.02x the raw-verbs floor and <= 1.0x perftest and ucx_perftest."
	echo "Bandwidth (BW average, MiB/s) and message rate (Mpps) are higher-is-better: >= 0.98x the floor,"
	echo "64 KiB >= 1.0x perftest; 8 B rate >= 1.3x ib_write_bw's default and >= 1.0x its best post list"
	echo "(-l 4/8/16/32, best per round). The floor (\`raw verbs floor\`, bench/floor.c) is the examples' loop"
	echo "shape with nothing but libibverbs: same sizes, inline sizes, signaling (one in 64), receive batches"
	echo "of 16, post lists of 32 and 128 outstanding in the streams; no payload checks. The arbiter"
	echo "goals: 10,000 groups at most 1.2x the cost of 10 (bench/arbiter_bench.c's own); at most half of UCX's"
	echo "ucs_arbiter (libucs 1.13 as Debian ships it, assertions on) per element at 10, 1,000 and 10,000 groups,"
	echo "and a 10,000/10 cost ratio no worse than ucs_arbiter's (the same workload: one element per group,"
	echo "REMOVE and push back, STOP after 64 per dispatch, shuffled groups). The rcache goal is"
	echo "to be no slower than UCX's."
	echo
	echo "Own instructions (instr_* own_instructions): bench/instr.c under callgrind in the guest, two endpoints"
	echo "of one context connected to each other; each case's operation runs through an out-of-line function"
	echo "with collection on only around those calls (one dump per case); own = the function's inclusive"
	echo "count minus its calls into the verbs provider (librxe, libibverbs), per operation, the call itself"
	echo "included. put/send 8 B inline and get/fadd/cswap into registered memory, all without a comp;"
	echo "put_list: per put of one rdmax_put_list call of 32; put_batch: per put of rdmax_batch_begin, 32 rdmax_put calls,"
	echo "rdmax_batch_end; progress: an idle rdmax_progress; retire: the rdmax_progress"
	echo "call that retires one completed get with a comp; recv: the rdmax_progress calls that deliver 16 landed"
	echo "8 B messages to the callback, reposts and grants included, per message; recv_one: a ping-pong's receive"
	echo "(a second context's rdmax_progress delivers one message with a credit in its immediate data, its"
	echo "repost included). The reference is the issue's budget (recv_one's: recv's count)."
	echo
	echo "How the instructions were counted: callgrind in the guest, user space only. rdmax: rdmax_bw -t put"
	echo "-s 8 -n 2000 (8 B puts go inline) with post list 1 and 32; the put is the out-of-line function"
	echo "bw_put (rdmax_put and the verbs provider's post_send it calls, plus the call itself); with a post"
	echo "list, bw_put_list (rdmax_put_list of -l puts, its post included); the sum is divided by the puts"
	echo "posted. \"Minus provider\" subtracts rxe's post_send (librxe ${prov_fn:-?}, the function bw_put calls)"
	echo "per put. Reference: the same librxe function per call in ib_write_lat -s 8 -n 1000 (perftest posts"
	echo "with ibv_post_send directly, so its own code around the call is a handful of instructions). The"
	echo "system call inside post_send is not counted by callgrind."
	echo
	echo "Whole-process instructions per round trip (rt_* rows): each tool's 8 B ping-pong client under"
	echo "callgrind in the guest, its server un-instrumented on the other CPU, at -n $rt_n1 and -n $rt_n2"
	echo "(${RDMAX_BENCH_RT_REPS:-3} runs each, paired by run; bench/cg_rt.pl); per round trip = the difference of the two"
	echo "counts over $((${rt_n2:-0} - ${rt_n1:-0})), so start-up, connection and teardown cancel; total: the smallest"
	echo "run at each count. Everything the client runs in user space counts, the polls while it waits for the"
	echo "answer included, and those grow with how long the answer takes (on a loaded host, milliseconds); the"
	echo "kernel's instructions do not count (rxe does its work there). \"Without waiting\" (nowait) is an"
	echo "estimate: an instruction with the same count per round trip in every pair counts in full, and so"
	echo "does, at its smallest count, one in the tool's sort of its samples (libc's qsort and its comparators"
	echo "for perftest and the floor, sort_ticks for rdmax_pingpong: work that follows the samples' order, not"
	echo "the time; the sort column); one whose"
	echo "count differs (a poll loop, a timer, a calibration loop) counts once per round trip if it ran at least"
	echo "once per round trip in every run and its function did round-trip work (the poll's pass that finds the"
	echo "answer) or it ran a half to two times more per added round trip in every pair (batched work), else"
	echo "not (a calibration loop runs for a set time); system calls likewise, by the function that made them."
	echo "own: the program (the executable, which holds rdmax's"
	echo "inline code; for ucx_perftest also UCX's libraries); provider: librxe and libibverbs; rest: libc, the"
	echo "loader and other libraries. syscalls per round trip (--collect-systime), and of them clock reads"
	echo "(clock_gettime, gettimeofday: under valgrind every one is a system call, it hides the vDSO). put is"
	echo "rdmax_pingpong_rc -t put --no-check (payloads neither filled nor checked, as perftest's; by default"
	echo "the example checks every one) beside ib_write_lat and ucx_perftest put_lat, send beside ib_send_lat and"
	echo "am_lat (rc_verbs); get and fadd beside the floor and ib_read_lat / ib_atomic_lat, for the timing check"
	echo "below. Goals (issue 31): put and send at most perftest's count, at most half of ucx_perftest's, taken"
	echo "on the nowait rows (the totals follow the host's load)."
	echo
	echo '```'
	printf '%-9s %-13s %8s %8s %8s %7s | %8s %8s %8s %7s | %8s %6s | %5s\n' case tool total own provider rest \
		nowait own provider rest syscalls clock sort
	while read -r c t v; do
		# shellcheck disable=SC2086
		printf '%-9s %-13s %8s %8s %8s %7s | %8s %8s %8s %7s | %8s %6s | %5s\n' "$c" "$t" ${v:-- - - - - - - - - - -}
	done <"$RT_TABLE"
	echo '```'
	echo
	echo "Access scoping (scope_* rows; bench/scope.c in the guest, raw/scope.txt: $(sed -n 's/^bench scope env //p' "$RAW/scope.txt" 2>/dev/null | head -1)):"
	echo "a region exposed on an endpoint through a memory window bound to its QP (the default) beside the"
	echo "same region registered RDMAX_ACCESS_ANY_ENDPOINT (a plain registration), one process, the cases"
	echo "taking turns pair by pair (connects) and round by round (operations). A pair is two endpoints of one"
	echo "context, one exposing 1 or 4 regions of 4 KiB, the other nothing, made (rdmax_ep_create), connected"
	echo "(rdmax_ep_query_record, rdmax_ep_connect_record) and destroyed, each pair timed alone; the rows are"
	echo "medians over the pairs. Connecting is split into ibv_modify_qp (RTR and RTS: the kernel's part, the"
	echo "same in both cases, and the one that follows the host's load) and the rest (rdmax's part: with"
	echo "windows, the binds posted and waited for). Operations: 8-byte puts (inline,"
	echo "unsignaled, rdmax_ep_flush every 64) and 8-byte gets (one at a time, median round trip) with the"
	echo "key rdmax_ep_query_remote gives, medians of the rounds. Ratio = windows / plain registration."
	echo
	echo "Timing (clock rows; bench/clockcheck.c in the guest): $(grep '^clock' "$RAW/clock.txt" 2>/dev/null | sed 's/^clock //' | paste -sd ';' | sed 's/;/; /g')."
	echo "rdmax_pingpong and the floor time each iteration with the cycle counter (rdtsc), calibrated once"
	echo "against CLOCK_MONOTONIC over 20 ms, as perftest times with get_cycles; clock_gettime stays for"
	echo "deadlines and whole-run durations. perftest divides by /proc/cpuinfo's MHz unless its own sample"
	echo "is more than 2% away; perftest_scale is a perftest time over the same interval on the examples'"
	echo "clock, and the \"perftest's on the examples' clock\" rows divide perftest's t_typical by it."
	echo
	echo "Per-round values (rdmax | reference):"
	echo
	echo '```'
	for f in "$RAW"/r1/*__*.txt; do
		case $f in *.srv.txt) continue ;; esac
		n=${f##*/}
		n=${n%.txt}
		cs=${n%%__*}
		tl=${n#*__}
		k=lat
		case $cs in bw_*) k=bw ;; rate_* | prof_rate_*) k=rate ;; esac
		case $tl in ucx_*) k=ucx ;; esac
		m=$(rounds "$cs" "$tl" $k | median)
		printf '%-28s %-22s %s\n' "$cs" "$tl" "$(rounds "$cs" "$tl" $k | awk -v m="${m:-0}" \
			'{ printf "%s%s ", $1, (m > 0 && ($1 > 3 * m || $1 < m / 3)) ? "*" : "" }')"
	done
	echo '```'
	echo
	echo "\\* more than 3x (or less than a third of) the median of its rounds: a disturbed run. The usual cause"
	echo "here is the host: other VMs on its two cores deschedule the guest's vCPUs, and a ping-pong then"
	echo "advances once per host scheduler tick (t_typical near 2000-4000 us). The median ratio keeps such a"
	echo "round out of the result when the other two are clean."
	echo
	if [ -f "$RAW/pageserver.txt" ]; then
		echo "rdmax_pageserver (not compared, for the record):"
		echo
		echo '```'
		cat "$RAW/pageserver.txt"
		echo '```'
		echo
	fi
	echo "Plots: latency_vs_size.png, bandwidth_vs_size.png (size sweep, one pass, fewer iterations),"
	echo "ratios.png. Raw outputs: raw/ (rN/CASE__TOOL.txt per round, sweep/, cg_*.out callgrind profiles,"
	echo "host_*.txt, env.txt, vm.log); raw/ is ignored by git (raw/.gitignore)."
} >"$RES/summary.md"

say "wrote $CSV, $RES/summary.md and the plots in $RES/ (raw outputs in $RAW/)"
[ "${RDMAX_BENCH_SCALE:-1}" = 1 ] && { bench/scale.sh >/dev/null 2>&1 || say "bench/scale.sh failed (see $RAW/scale.txt)"; }
column -t -s "$US" "$ROWS" 2>/dev/null | cut -c1-200 || tr "$US" '\t' <"$ROWS"
((vm_status == 0)) || exit 1
exit 0
