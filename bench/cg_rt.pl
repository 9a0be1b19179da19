#!/usr/bin/perl
# cg_rt.pl N1 N2 FILE... - instructions per round trip of a whole process, from callgrind runs of the same
# client at two iteration counts (bench/guest.sh's rt/ files), by object.
#
#   cg_rt.pl 200 600 rt/X__n200_1.out rt/X__n200_2.out rt/X__n600_1.out rt/X__n600_2.out
#
# The files come from `valgrind --tool=callgrind --dump-instr=yes --compress-pos=no --collect-systime=yes`;
# a file's iteration count is read from its name (__nN_K.out) and runs K of the two counts are paired.
# Per pair, an instruction's count per round trip is its count at N2 minus its count at N1, over N2 - N1
# (start-up, connection and teardown cancel). Prints one line per object
#     ob=OBJECT total=IR nowait=IR
# and one line "sys syscalls=N clock_reads=N"; all per round trip:
#   total   the smallest total of the runs at N2 minus the smallest at N1, over N2 - N1: everything, the
#           polls while waiting for the answer included. Those follow the time the answer took and the
#           waits of start-up (connecting, a calibration loop), so on a loaded host this is mostly noise
#           and can come out below zero.
#   nowait  an estimate without the waiting, from the pairs (run K at N1, run K at N2): an instruction with
#           the same count per round trip in every pair (to a hundredth) is the round trip's work and counts
#           in full; so does, at its smallest count in the pairs, one in a sort of the samples: libc's
#           qsort (qsort, qsort_r, msort_with_tmp and the comparators they call, from the call graph:
#           perftest's, the floor's) or rdmax_pingpong's sort_ticks. Its count follows the samples'
#           order, not the time (memcpy, which qsort shares with the rest, is left to the rules here).
#           One whose count differs (it ran as long as something took) counts once per round trip when
#           it ran at least once per round trip in every run and its function did round-trip work (it
#           holds an instruction of the first kind that ran at least once per round trip, or one that ran
#           between once and twice per round trip in every run): a poll loop, its one pass that finds the
#           answer; or when it ran between a half and two times more per added round trip in every pair,
#           alike (within half) in every pair (work batched over round trips, e.g. ucx_perftest's receive
#           reposts after its start-up's; not a timer, which follows the waiting).
#           Else not at all: a loop that runs for a set time at start-up (a clock calibration) also runs
#           more often than the round trips, but in a function that does nothing per round trip, and
#           whether its count (or a poll loop's) grew from one run to the next follows the host's load.
#           Needs two pairs; with one, every instruction counts in full.
#   sort    the part of nowait that is the sort of the samples (a line "sort nowait=IR")
#   sys     system calls per round trip (nowait's way, by the function that made them), and of them
#           clock_gettime / gettimeofday (under valgrind every one is a system call: it hides the vDSO).
use strict;
use warnings;

my ($n1, $n2, @files) = @ARGV;
die "usage: $0 N1 N2 FILE...\n" unless defined $n2 && @files && $n2 > $n1;

my (%cnt, %sys);         # {N}{K}{"ob\0addr"} -> Ir; {N}{K}{function} -> system calls
my %fns_of;              # "ob\0addr" -> {"ob\0function" -> 1} (a recursion's copies share addresses)
my %sort_fn;             # "ob\0function" of a sort of the samples (see nowait above) -> 1
my $sort_re = qr/^(?:qsort|qsort_r|__qsort_r|msort_with_tmp|sort_ticks)\b/;  # (sort_ticks: rdmax_pingpong's)
for my $f (@files) {
    my ($n, $k) = $f =~ /__n(\d+)_(\d+)\.out$/ or die "$f: no __nN_K.out in the name\n";
    next unless $n == $n1 || $n == $n2;
    open(my $fh, '<', $f) or die "$f: $!\n";
    my ($ob, $fn, $cob, $in_call, @ev) = ('', '', undef, 0);
    my $c = ($cnt{$n}{$k} //= {});
    my $sc = ($sys{$n}{$k} //= {});
    while (my $l = <$fh>) {
        if ($l =~ /^events:\s*(.*)$/) { @ev = split ' ', $1; next; }
        if ($l =~ /^ob=(.*)$/) { $ob = $1; next; }
        if ($l =~ /^fn=(.*)$/) { $fn = $1; $sort_fn{"$ob\0$fn"} = 1 if $fn =~ $sort_re; next; }
        if ($l =~ /^cob=(.*)$/) { $cob = $1; next; }
        if ($l =~ /^cfn=(.*)$/) {    # a callee of the sort (not memcpy and the like: shared with the rest)
            my $callee = $1;
            $sort_fn{($cob // $ob) . "\0$callee"} = 1 if $fn =~ $sort_re && $callee !~ /^_*mem/;
            $cob = undef;
            next;
        }
        if ($l =~ /^calls=/) { $in_call = 1; next; }
        next unless $l =~ /^0x/;
        if ($in_call) { $in_call = 0; next; }    # a call's inclusive cost: counted in the callee
        my ($addr, undef, @v) = split ' ', $l;   # positions: instr line
        $c->{"$ob\0$addr"} += $v[0] // 0;
        $fns_of{"$ob\0$addr"}{"$ob\0$fn"} = 1;
        for my $i (1 .. $#ev) {
            next unless $ev[$i] eq 'sysCount' && $v[$i];
            $sc->{$fn} += $v[$i];
        }
    }
    close $fh;
}

my @pairs = grep { $cnt{$n2}{$_} } sort { $a <=> $b } keys %{ $cnt{$n1} // {} };
die "no run at both -n $n1 and -n $n2\n" unless @pairs;
my $d = $n2 - $n1;
my %keys;
for my $k (@pairs) { $keys{$_} = 1 for keys %{ $cnt{$n1}{$k} }, keys %{ $cnt{$n2}{$k} }; }
# total: the smallest run at each count
my %sum;
for my $n ($n1, $n2) {
    for my $k (keys %{ $cnt{$n} }) { my $t = 0; $t += $_ for values %{ $cnt{$n}{$k} }; $sum{$n}{$k} = $t; }
}
my ($b1) = sort { $sum{$n1}{$a} <=> $sum{$n1}{$b} } keys %{ $sum{$n1} };
my ($b2) = sort { $sum{$n2}{$a} <=> $sum{$n2}{$b} } keys %{ $sum{$n2} };
# one key's count per round trip in each pair, and whether they agree (to a hundredth)
sub rates {
    my ($c, $key) = @_;
    my @r = map { (($c->{$n2}{$_}{$key} // 0) - ($c->{$n1}{$_}{$key} // 0)) / $d } @pairs;
    my ($lo, $hi) = (sort { $a <=> $b } @r)[0, -1];
    return ($r[0], $hi - $lo <= 0.01, $lo, $hi);
}
# the functions that did round-trip work: an instruction of theirs with the same count in every pair, at
# least one per round trip, or one that ran once or twice per round trip in every run (ucx_perftest's
# count of operations differs from run to run by its warm-up)
my %works;
for my $key (keys %keys) {
    my ($r, $same) = rates(\%cnt, $key);
    my $once = 1;
    for my $n ($n1, $n2) {
        for my $k (@pairs) { my $v = $cnt{$n}{$k}{$key} // 0; $once = 0 if $v < $n || $v > 2 * $n; }
    }
    next unless ($same && $r >= 0.99) || $once;
    $works{$_} = 1 for keys %{ $fns_of{$key} };
}
# per round trip without the waiting, of one key's counts (see nowait above); $works: its function did
# round-trip work; $sort: it sorts the samples
sub nowait_of {
    my ($c, $key, $works, $sort) = @_;
    my ($r, $same, $lo, $hi) = rates($c, $key);
    return $r if $same;
    return $lo > 0 ? $lo : 0 if $sort;
    for my $k (@pairs) { return 0 if ($c->{$n1}{$k}{$key} // 0) < $n1 || ($c->{$n2}{$k}{$key} // 0) < $n2; }
    return $works || ($lo >= 0.5 && $hi <= 2 && $hi <= 1.5 * $lo) ? 1 : 0;
}
my (%total, %nowait);
my $sorting = 0;
for my $key (keys %keys) {
    my ($ob) = split /\0/, $key;
    $total{$ob} += (($cnt{$n2}{$b2}{$key} // 0) - ($cnt{$n1}{$b1}{$key} // 0)) / $d;
    my @fns = keys %{ $fns_of{$key} };
    my $sort = grep { $sort_fn{$_} } @fns;
    my $v = nowait_of(\%cnt, $key, scalar(grep { $works{$_} } @fns), $sort);
    $nowait{$ob} += $v;
    $sorting += $v if $sort;
}
my %fns;
for my $n ($n1, $n2) { for my $k (@pairs) { $fns{$_} = 1 for keys %{ $sys{$n}{$k} // {} }; } }
my ($sc, $cr) = (0, 0);
for my $f (keys %fns) {
    my $v = nowait_of(\%sys, $f, scalar grep { /\0\Q$f\E$/ } keys %works);
    $sc += $v;
    $cr += $v if $f =~ /clock_gettime|gettimeofday/;
}
printf "ob=%s total=%.1f nowait=%.1f\n", $_, $total{$_}, $nowait{$_} for sort keys %total;
printf "sort nowait=%.1f\n", $sorting;
printf "sys syscalls=%.2f clock_reads=%.2f\n", $sc, $cr;
