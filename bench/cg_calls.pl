#!/usr/bin/perl
# cg_calls.pl FILE FUNC... - calls into FUNC and what FUNC calls, from a callgrind output file.
#
# For each FUNC (a function name as callgrind writes it, e.g. bw_put or 0x0000000000002ca0 for a
# symbol-less function of a stripped library) prints one line
#     fn=FUNC calls=N incl=IR per_call=IR/N self=IR obj=OBJECT
# where calls and incl are summed over every call site of FUNC (incl: inclusive instructions of those
# calls, so IR/N is the inclusive cost of one call), then one line per callee of FUNC:
#     callee=NAME obj=OBJECT calls=N incl=IR per_call=IR/N
# Reads the name-compressed format callgrind writes by default ("fn=(12) name", later "fn=(12)").
# Used by bench/run.sh to count instructions per operation; needs only perl (callgrind_annotate's own
# dependency).
#
# cg_calls.pl --own FILE FUNC REGEX: one line "own=IR incl=IR provider=IR calls=N" where incl is the
# inclusive cost of the calls to FUNC, provider the inclusive cost of every call from an object that
# does not match REGEX into one that does (the verbs provider, e.g. 'librxe|libibverbs'), and own the
# difference. Meant for a part that collected only calls to FUNC (bench/instr.c): every provider call
# in it was made under FUNC.
use strict;
use warnings;

my $own = @ARGV && $ARGV[0] eq '--own' ? shift @ARGV : undef;
my $file = shift @ARGV or die "usage: $0 [--own] callgrind.out FUNC...\n";
open(my $fh, '<', $file) or die "$file: $!\n";

my (%fn_name, %ob_name);      # compressed id -> name
my ($ob, $fn) = ('', '');     # current object and function
my %fn_obj;                   # function -> object it lives in
my ($cob, $cfn, $pending);    # callee of the next calls= line
my (%calls_to, %incl_to);     # callee -> calls, inclusive (summed over call sites)
my (%edge_calls, %edge_incl, %edge_obj); # "caller\0callee" -> ...
my %self;                     # function -> self cost
my $in_call = 0;              # the next cost line is a call's inclusive cost

sub name_of {
    my ($map, $spec) = @_;
    if ($spec =~ /^\((\d+)\)\s*(.*)$/) {
        my ($id, $nm) = ($1, $2);
        $map->{$id} = $nm if length $nm;
        return defined $map->{$id} ? $map->{$id} : "($id)";
    }
    return $spec;
}

sub cost_of {
    my ($line) = @_;
    my @f = split ' ', $line;
    return $f[1] // 0;          # positions: line (one column), then the first event (Ir)
}

while (my $l = <$fh>) {
    chomp $l;
    if ($l =~ /^ob=(.*)$/) { $ob = name_of(\%ob_name, $1); next; }
    if ($l =~ /^fn=(.*)$/) {
        $fn = name_of(\%fn_name, $1);
        $fn_obj{$fn} //= $ob;
        $cob = undef;
        next;
    }
    if ($l =~ /^cob=(.*)$/) { $cob = name_of(\%ob_name, $1); next; }
    if ($l =~ /^cfn=(.*)$/) { $cfn = name_of(\%fn_name, $1); next; }
    if ($l =~ /^calls=(\d+)/) { $pending = $1; $in_call = 1; next; }
    if ($l =~ /^[0-9+\-*]/) {
        my $c = cost_of($l);
        if ($in_call) {
            my $obj = defined $cob ? $cob : $ob;
            $fn_obj{$cfn} //= $obj;
            $calls_to{$cfn} += $pending;
            $incl_to{$cfn} += $c;
            my $k = "$fn\0$cfn";
            $edge_calls{$k} += $pending;
            $edge_incl{$k} += $c;
            $edge_obj{$k} = $obj;
            $in_call = 0;
            $cob = undef;
        } else {
            $self{$fn} += $c;
        }
        next;
    }
    # other lines (fl=, fi=, fe=, cfi=, cfl=, headers) do not change the function
}
close $fh;

if ($own) {
    my ($want, $re) = @ARGV;
    die "usage: $0 --own callgrind.out FUNC REGEX\n" unless defined $re;
    my $prov = 0;
    for my $k (keys %edge_calls) {
        my ($caller, $callee) = split /\0/, $k, 2;
        my $cobj = $fn_obj{$caller} // '';
        next if $cobj =~ /$re/ || $edge_obj{$k} !~ /$re/;
        $prov += $edge_incl{$k};
    }
    my $i = $incl_to{$want} // 0;
    printf "own=%d incl=%d provider=%d calls=%d\n", $i - $prov, $i, $prov, $calls_to{$want} // 0;
    exit 0;
}

for my $want (@ARGV) {
    my $n = $calls_to{$want} // 0;
    my $i = $incl_to{$want} // 0;
    printf "fn=%s calls=%d incl=%d per_call=%.1f self=%d obj=%s\n", $want, $n, $i, $n ? $i / $n : 0,
        $self{$want} // 0, $fn_obj{$want} // '?';
    for my $k (sort keys %edge_calls) {
        my ($caller, $callee) = split /\0/, $k, 2;
        next unless $caller eq $want;
        my $c = $edge_calls{$k};
        printf "callee=%s obj=%s calls=%d incl=%d per_call=%.1f\n", $callee, $edge_obj{$k}, $c, $edge_incl{$k},
            $c ? $edge_incl{$k} / $c : 0;
    }
}
