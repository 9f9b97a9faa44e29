use strict;
use warnings;

# The LockFile::Simple-style manager: true and false as LockFile::Simple
# returns them, on every scheme; then what it adds: the outcome of unlock,
# the fence, the error code and message; and its options.

use FindBin;
use lib "$FindBin::Bin/lib";
use LockFFITest;
use Test::More;

use POSIX ();
use LockFFI qw(:results);
use LockFFI::Simple qw(lock trylock unlock);

# A manager whose warnings and errors are collected, not printed.
sub manager {
    my (@options) = @_;
    my (@warnings, @errors);
    my $manager = LockFFI::Simple->make(
        -wfunc => sub { push @warnings, "@_" },
        -efunc => sub { push @errors, "@_" },
        @options,
    );
    return ($manager, \@warnings, \@errors);
}

# Holds $file past the manager's -hold, as another handle sees it.
sub hold_past_hold {
    my ($manager, $file) = @_;
    $manager->trylock($file) or die 'a free file was busy: ' . $manager->last_error_message;
    my $observer = LockFFI->new($manager->spec($file));
    wait_until('the hold time to pass', sub {
        my $seen = $observer->inspect;
        $manager->scheme eq 'flock' ? now_ms() > $seen->{expires_unix_ms} : $seen->{stale};
    });
    return $manager->last_fence;
}

for my $scheme (@SCHEMES) {
    subtest $scheme => sub {
        my $dir = fresh_dir();
        my $file = "$dir/data";
        my ($manager, $warnings, $errors) = manager(-scheme => $scheme, -max => 2, -delay => 0.1);
        my ($other) = manager(-scheme => $scheme, -max => 2, -delay => 0.1);
        is($manager->scheme, $scheme, 'the scheme');

        my $handle = $manager->lock($file);
        ok($handle, 'lock gives a true handle');
        my $fence = $manager->last_fence;
        ok($fence, 'and a fence');
        is($handle->fence, $fence, 'the handle knows it too');
        is($handle->file, $file, 'and its file');
        ok(-e $manager->lockfile($file) || -l $manager->lockfile($file), 'the lock is at lockfile($file)');

        ok(!$other->trylock($file), 'another manager cannot trylock it');
        is($other->last_error, LOCK_BUSY, 'LOCK_BUSY');
        like($other->last_error_message, qr/\bpid $$\b/, 'the message names the holder');
        ok(!$other->lock($file), 'nor lock it, once its -max x -delay is over');
        is($other->last_error, LOCK_TIMEOUT, 'LOCK_TIMEOUT');
        like($other->last_error_message, qr/\bpid $$\b/, 'the message names the holder');

        ok(!$manager->lock($file), 'locking twice through one manager fails');
        is($manager->last_error, LOCK_ERR_ALREADY_HELD, 'LOCK_ERR_ALREADY_HELD');
        like($errors->[-1], qr/\Qfile $file already locked at \E.*simple\.t line \d+/, 'efunc says where it was locked');
        ok(!$manager->trylock($file), 'trylock too');

        ok($handle->release, 'the handle releases its lock');
        is($manager->last_outcome, LOCK_OK, 'LOCK_OK');
        ok(!$manager->unlock($file), 'unlocking a file not locked fails');
        is($manager->last_error, LOCK_ERR_NOT_HELD, 'LOCK_ERR_NOT_HELD');
        like($errors->[-1], qr/\Qfile $file not currently locked\E/, 'efunc says so');

        ok($other->trylock($file), 'free for the other manager');
        cmp_ok($other->last_fence, '>', $fence, 'with a greater fence');
        ok($other->unlock($file), 'unlocked');
        is($other->last_error, undef, 'no error');
    };
}

for my $scheme (@SCHEMES) {
    subtest "$scheme: expired and lost" => sub {
        my $dir = fresh_dir();
        my $file = "$dir/data";
        my ($manager, $warnings, $errors) = manager(-scheme => $scheme, -hold => 0.1);
        hold_past_hold($manager, $file);
        ok($manager->unlock($file), 'held past -hold, nobody took it: unlock is true');
        is($manager->last_outcome, LOCK_EXPIRED, 'LOCK_EXPIRED');
        like($warnings->[-1], qr/held past its hold time/, 'wfunc says the lock expired');

        my $mine = hold_past_hold($manager, $file);
        my $taker = LockFFI->new($manager->spec($file));
        unlink $manager->lockfile($file) or die "unlink: $!" if $scheme eq 'flock';
        my $theirs = $taker->try_acquire;
        ok($theirs, 'someone else takes it') or diag $taker->last_error_message;
        ok(!$manager->unlock($file), 'then unlock is false');
        is($manager->last_outcome, LOCK_LOST, 'LOCK_LOST');
        is($manager->last_error, LOCK_LOST, 'and the error says so');
        like($errors->[-1], qr/\Qcannot unlock $file: \E.*\blost\b/, 'efunc says the lock was lost');
        is($taker->inspect->{fence}, $theirs, 'the taker still holds it');
        ok(!$manager->unlock($file), 'the lost lock is forgotten');
        is($manager->last_error, LOCK_ERR_NOT_HELD, 'LOCK_ERR_NOT_HELD');
    };
}

subtest 'the lock file is LockFile::Simple\'s' => sub {
    my $dir = fresh_dir();
    my $file = "$dir/data";
    my $host = (POSIX::uname())[1];
    for my $case ([[], "$file.lock", qr/\A$$\n/], [[-nfs => 1], "$file.lock", qr/\A$$:\Q$host\E\n/],
                  [[-ext => '.lck'], "$file.lck", qr/\A$$\n/], [[-format => '%D/lock-%F'], "$dir/lock-data", qr/\A$$\n/])
    {
        my ($options, $path, $first_line) = @$case;
        my ($manager) = manager(@$options);
        is($manager->lockfile($file), $path, "lockfile(@$options)");
        $manager->lock($file);
        open(my $fh, '<', $path) or die "$path: $!";
        like(scalar <$fh>, $first_line, "the first line, as LockFile::Simple writes it (@$options)");
        $manager->unlock($file);
        ok(!-e $path, 'removed by unlock');
    }
    my ($manager) = manager(-format => '%D/lock-%F');
    ok($manager->lock($file, '%f.other'), 'a format given to lock overrides the manager\'s');
    ok(-e "$file.other", 'and names the lock file');
    ok($manager->unlock($file), 'unlock needs no format');
};

subtest 'options' => sub {
    my $dir = fresh_dir();
    my ($manager, $warnings, $errors) = manager(-format => '/tmp/%F.%p');
    ok(!$manager->lock("$dir/data"), 'a format with %p is refused');
    is($manager->last_error, LOCK_ERR_SPEC_BAD_VALUE, 'as a bad value');
    like($errors->[-1], qr/%p/, 'efunc says why');

    ($manager) = manager(-scheme => 'mkdir', -nfs => 1);
    ok(!$manager->lock("$dir/data"), '-nfs with a scheme that has no nfs is refused');
    is($manager->last_error, LOCK_ERR_SPEC_UNKNOWN_KEY, 'as an unknown key');

    ok(!eval { LockFFI::Simple->make(-nosuch => 1) }, 'an unknown option dies');
    like($@, qr/unknown option '-nosuch'/, 'naming it');

    ($manager) = manager(-hold => 30, -stale => 0, -mode => '0660', -wmin => 1.5);
    is($manager->hold, 30, 'options are read back without the minus');
    like($manager->spec("$dir/a b"), qr{\Alockfile:\Q$dir\E/a%20b\?ttl=30s&stale=none&warn=1&wmin=1500ms&wafter=20s&mode=0660&ext=.lock\z},
        'and become the spec\'s keys');
    $manager->configure(-hold => 0);
    like($manager->spec("$dir/a"), qr/\bttl=0s\b/, 'configure changes them; -hold 0 is never');

    my $holder = LockFFI->new("lockfile:$dir/waited");
    $holder->try_acquire;
    ($manager, $warnings) = manager(-wmin => 0.05, -wafter => 0.05, -max => 1, -delay => 0.3);
    ok(!$manager->lock("$dir/waited"), 'lock waits for a held file, then gives up');
    like($warnings->[0], qr/\Awaiting for \Q$dir\E\/waited lock since [\d.]+ seconds?\z/, 'the first warning');
    like($warnings->[-1], qr/\Astill waiting for/, 'then more') if @$warnings > 1;
};

subtest 'the function interface uses a default manager' => sub {
    my $dir = fresh_dir();
    ok(lock("$dir/data"), 'lock');
    ok(!trylock("$dir/data"), 'trylock on the file it holds');
    is(LockFFI::Simple::locker()->last_error, LOCK_ERR_ALREADY_HELD, 'the default manager says why');
    ok(unlock("$dir/data"), 'unlock');
    is(LockFFI::Simple::locker()->last_outcome, LOCK_OK, 'released');
};

subtest 'a manager going away releases what it holds' => sub {
    my $dir = fresh_dir();
    {
        my ($manager) = manager();
        ok($manager->lock("$dir/data"), 'held by a manager in a scope');
    }
    ok(LockFFI->new("lockfile:$dir/data")->try_acquire, 'free once the manager is gone');
};

done_testing;
