use strict;
use warnings;

# LockFile::Simple itself and this module on the same file: each sees the
# other's lock, and processes of both kinds take turns on one counter
# without overlap. Needs LockFile::Simple (Debian: liblockfile-simple-perl).

use FindBin;
use lib "$FindBin::Bin/lib";
use LockFFITest;
use Test::More;

# LockFile::Simple sleeps -delay seconds between attempts with the core
# sleep, whole seconds; made sub-second before it is compiled, so that its
# processes retry every few milliseconds.
BEGIN {
    require Time::HiRes;
    no warnings 'once';
    *CORE::GLOBAL::sleep = \&Time::HiRes::sleep;
}

BEGIN {
    unless (eval { require LockFile::Simple; 1 }) {
        # CI installs it: there a missing module is a failure.
        if ($ENV{CI}) {
            plan tests => 1;
            fail('LockFile::Simple is installed (Debian: liblockfile-simple-perl)');
            exit;
        }
        plan skip_all => 'LockFile::Simple is not installed (Debian: liblockfile-simple-perl)';
    }
}

use POSIX ();
use LockFFI qw(:results);
use LockFFI::Simple;

my $NOBODY = 65534;

# A LockFile::Simple manager as a careful user would make it.
sub their_manager {
    return LockFile::Simple->make(-delay => 0.002, -max => 1_000_000, -hold => 0, -stale => 0, -warn => 0, @_);
}

subtest 'a LockFile::Simple holder excludes us, and the message names it' => sub {
    my $dir = fresh_dir();
    my $file = "$dir/data";
    pipe(my $from_child, my $to_parent) or die "pipe: $!";
    pipe(my $from_parent, my $to_child) or die "pipe: $!";
    my $child = fork // die "fork: $!";
    if ($child == 0) {
        close $from_child;
        close $to_child;
        my $theirs = their_manager();
        $theirs->lock($file) or POSIX::_exit(1);
        syswrite($to_parent, "locked\n");
        sysread($from_parent, my $ignored, 1);
        POSIX::_exit($theirs->unlock($file) ? 0 : 2);
    }
    close $to_parent;
    close $from_parent;
    is(scalar <$from_child>, "locked\n", 'LockFile::Simple locked the file');
    my $ours = LockFFI::Simple->make(-warn => 0, -efunc => undef);
    ok(!$ours->trylock($file), 'our trylock fails');
    is($ours->last_error, LOCK_BUSY, 'LOCK_BUSY');
    like($ours->last_error_message, qr/\bpid $child\b/, 'the message names LockFile::Simple\'s pid');
    my $seen = LockFFI->new($ours->spec($file))->inspect;
    is($seen->{owner_pid}, $child, 'inspect reads its PID');
    close $from_child;
    close $to_child;
    waitpid($child, 0);
    is($?, 0, 'LockFile::Simple unlocked its own lock');
    ok($ours->trylock($file), 'then ours succeeds');
    ok($ours->unlock($file), 'and unlocks');
};

subtest 'our lock excludes LockFile::Simple' => sub {
    my $dir = fresh_dir();
    my $file = "$dir/data";
    for my $nfs (0, 1) {
        my $ours = LockFFI::Simple->make(-nfs => $nfs, -warn => 0);
        ok($ours->lock($file), "we lock (-nfs => $nfs)");
        my $theirs = their_manager(-nfs => $nfs, -stale => 1, -efunc => undef, -wfunc => undef);
        ok(!$theirs->trylock($file), 'LockFile::Simple\'s trylock fails, and its -stale finds us alive');
        ok($ours->unlock($file), 'we unlock');
        ok($theirs->trylock($file), 'then LockFile::Simple\'s trylock succeeds');
        ok($theirs->unlock($file), 'and its unlock too');
    }
};

# Work outside the lock between two turns. Without it our waiters, woken
# as the lock is released, would take every turn while LockFile::Simple's
# polled, until ours were done.
sub pause_between_turns { Time::HiRes::sleep(0.001 + rand(0.004)) }

subtest 'LockFile::Simple and LockFFI::Simple processes share a counter' => sub {
    my $PER_KIND = 3;
    my $TURNS = 40;
    my $dir = fresh_dir();
    my $file = "$dir/data";
    # As root, LockFile::Simple's open(">lockfile") would truncate a lock
    # file it may not write; its design relies on that permission check. So
    # its processes run as nobody there, and the lock is shared with every
    # user (mode=0666) in a directory every user may write.
    my $as_nobody = $> == 0;
    my @mode;
    if ($as_nobody) {
        @mode = (-mode => '0666');
        chmod 0777, $dir or die "chmod $dir: $!";
        for my $shared (qw(counter turns)) {
            open(my $fh, '>', "$dir/$shared") or die "$dir/$shared: $!";
            close $fh;
            chmod 0666, "$dir/$shared" or die "chmod $dir/$shared: $!";
        }
    }
    my $theirs = sub {
        if ($as_nobody) {
            $) = "$NOBODY $NOBODY";    # the supplementary groups too
            die "setgroups: $!" unless $) eq "$NOBODY $NOBODY";
            POSIX::setgid($NOBODY) or die "setgid: $!";
            POSIX::setuid($NOBODY) or die "setuid: $!";
        }
        my $manager = their_manager();
        my $overlaps = 0;
        for (1 .. $TURNS) {
            $manager->lock($file) or die "LockFile::Simple lock failed\n";
            $overlaps += critical_section($dir, 'LockFile::Simple');
            $manager->unlock($file) or die "LockFile::Simple unlock failed\n";
            pause_between_turns();
        }
        return $overlaps;
    };
    my $ours = sub {
        my $manager = LockFFI::Simple->make(-warn => 0, -max => 60, -delay => 1, @mode);
        my $overlaps = 0;
        for (1 .. $TURNS) {
            $manager->lock($file) or die 'lock: ' . $manager->last_error_message . "\n";
            $overlaps += critical_section($dir, 'LockFFI::Simple');
            $manager->unlock($file) or die 'unlock: ' . $manager->last_error_message . "\n";
            pause_between_turns();
        }
        return $overlaps;
    };
    my @pids = start_contenders($dir, ($theirs, $ours) x $PER_KIND);
    is(finish_contenders(@pids), 0, 'never two inside at once');
    is(counter_value($dir), 2 * $PER_KIND * $TURNS, 'the counter is exact');
    my ($by_kind, $by_pid, $switches) = counted_turns($dir);
    is_deeply($by_kind, { 'LockFile::Simple' => $PER_KIND * $TURNS, 'LockFFI::Simple' => $PER_KIND * $TURNS },
        'both kinds had all their turns');
    is_deeply($by_pid, { map { $_ => $TURNS } @pids }, 'every process had each of its turns');
    cmp_ok($switches, '>', 2, 'the kinds took turns with each other, not one kind all first')
        or diag("the kind changed $switches times in " . 2 * $PER_KIND * $TURNS . ' turns');
};

done_testing;
