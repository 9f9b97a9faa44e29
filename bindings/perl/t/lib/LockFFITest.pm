package LockFFITest;

# What the tests share: the list of schemes, a fresh directory per test,
# waiting for an observable condition, and processes that contend.

use strict;
use warnings;

use Exporter qw(import);
use Fcntl qw(O_CREAT O_EXCL O_WRONLY O_APPEND);
use File::Temp qw(tempdir);
use POSIX ();
use Test::More;
use Time::HiRes ();

our @EXPORT = qw(
    @SCHEMES @SERVER_SCHEMES fresh_dir target_of spec_of wait_until now_ms
    start_contenders finish_contenders counted_turns critical_section counter_value
);

# Every scheme of the library whose locks are files (lockcore::Scheme::ALL
# but those on a server, which the library's own suites test): the one
# place the tests name them. lock.t checks it against the list the library
# gives when it refuses a scheme it does not know.
our @SCHEMES = qw(lockfile mkdir flock symlink lease toplock shm);
# The schemes whose locks are on a server.
our @SERVER_SCHEMES = qw(redis);

sub fresh_dir { tempdir('lockffi-perl-XXXXXXXX', TMPDIR => 1, CLEANUP => 1) }

# lockfile's target is the file it protects; the others' is the lock itself.
sub target_of {
    my ($scheme, $dir) = @_;
    return $scheme eq 'lockfile' ? "$dir/data" : "$dir/lock";
}

sub spec_of {
    my ($scheme, $dir, $query) = @_;
    my $spec = "$scheme:" . target_of($scheme, $dir);
    return defined $query && length $query ? "$spec?$query" : $spec;
}

sub now_ms { int(Time::HiRes::time() * 1000) }

# Polls $condition until it holds; fails the test after $seconds (a bound
# on a hang, not a measurement).
sub wait_until {
    my ($what, $condition, $seconds) = @_;
    my $deadline = Time::HiRes::time() + ($seconds // 20);
    until ($condition->()) {
        if (Time::HiRes::time() > $deadline) {
            fail("waiting for $what");
            return 0;
        }
        Time::HiRes::sleep(0.005);
    }
    return 1;
}

# One turn inside the lock: an O_EXCL marker catches a second process
# inside at once, the counter catches a lost update, and the turn is logged
# as "$kind $$". Returns 1 if the marker was already there (an overlap).
sub critical_section {
    my ($dir, $kind) = @_;
    my $overlap = 0;
    if (sysopen(my $marker, "$dir/inside", O_CREAT | O_EXCL | O_WRONLY)) {
        close $marker;
    } else {
        $overlap = 1;
    }
    open(my $in, '<', "$dir/counter") or die "reading $dir/counter: $!";
    my $count = <$in>;
    close $in;
    open(my $out, '>', "$dir/counter") or die "writing $dir/counter: $!";
    print $out $count + 1, "\n";
    close $out or die "writing $dir/counter: $!";
    sysopen(my $log, "$dir/turns", O_WRONLY | O_APPEND | O_CREAT) or die "opening $dir/turns: $!";
    syswrite($log, "$kind $$\n") or die "logging to $dir/turns: $!";
    close $log;
    unlink "$dir/inside" or die "removing $dir/inside: $!" unless $overlap;
    return $overlap;
}

# Forks one process per entry of @bodies. Each waits for the file "go", then
# runs its body, whose return value (the number of overlaps it saw) is its
# exit status; a body that dies exits with 255 after printing why.
sub start_contenders {
    my ($dir, @bodies) = @_;
    open(my $counter, '>', "$dir/counter") or die "creating $dir/counter: $!";
    print $counter "0\n";
    close $counter;
    my @pids;
    for my $body (@bodies) {
        my $pid = fork // die "fork: $!";
        if ($pid == 0) {
            my $status = eval {
                Time::HiRes::sleep(0.001) until -e "$dir/go";
                $body->();
            };
            unless (defined $status) {
                print STDERR "contender $$: $@";
                $status = 255;
            }
            # No END blocks, no destructors of the parent's objects.
            POSIX::_exit($status > 254 ? 255 : $status);
        }
        push @pids, $pid;
    }
    open(my $go, '>', "$dir/go") or die "creating $dir/go: $!";
    close $go;
    return @pids;
}

# Waits for the contenders; returns the overlaps they saw, and fails for
# every one that did not finish normally.
sub finish_contenders {
    my (@pids) = @_;
    my $overlaps = 0;
    for my $pid (@pids) {
        waitpid($pid, 0) == $pid or die "waitpid $pid: $!";
        my $status = $?;
        if ($status & 127 || ($status >> 8) == 255) {
            fail("contender $pid ended with status $status");
        } else {
            $overlaps += $status >> 8;
        }
    }
    return $overlaps;
}

# The log of turns: counts by kind, by pid, and how often the kind changed
# from one turn to the next.
sub counted_turns {
    my ($dir) = @_;
    open(my $log, '<', "$dir/turns") or die "reading $dir/turns: $!";
    my (%by_kind, %by_pid, $switches, $previous);
    $switches = 0;
    while (my $line = <$log>) {
        my ($kind, $pid) = $line =~ /\A(\S+) (\d+)\n\z/ or die "a torn line in $dir/turns: $line";
        $by_kind{$kind}++;
        $by_pid{$pid}++;
        $switches++ if defined $previous && $previous ne $kind;
        $previous = $kind;
    }
    return (\%by_kind, \%by_pid, $switches);
}

sub counter_value {
    my ($dir) = @_;
    open(my $in, '<', "$dir/counter") or die "reading $dir/counter: $!";
    my $count = <$in>;
    chomp $count;
    return $count;
}

1;
