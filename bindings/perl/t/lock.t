use strict;
use warnings;

# The object on one spec, on every scheme: fences, busy and timed-out
# attempts that name the holder, the three outcomes of release and prolong,
# cooldown, break, path, commit, autorenew, the waiting callback, and
# release when the object goes away.

use FindBin;
use lib "$FindBin::Bin/lib";
use LockFFITest;
use Test::More;

use LockFFI qw(:results :liveness);

sub dies_with {
    my ($code, $body, $name) = @_;
    my $ok = eval { $body->(); 1 };
    my $error = $@;
    ok(!$ok && ref $error && $error->isa('LockFFI::Error') && $error->code == $code,
        "$name: dies with " . LockFFI::result_name($code))
        or diag('got: ' . ($ok ? 'no error' : $error));
    return $error;
}

# Holds $lock until its TTL has run out, as the library judges it: a lock
# that can be broken shows as stale to another handle; flock, which never
# is, shows its expiry.
sub hold_past_ttl {
    my ($scheme, $lock, $observer) = @_;
    my $fence = $lock->try_acquire or BAIL_OUT('a free lock was busy: ' . $lock->last_error_message);
    wait_until("the TTL of $scheme to pass", sub {
        my $seen = $observer->inspect;
        $scheme eq 'flock' ? now_ms() > $seen->{expires_unix_ms} : $seen->{stale};
    });
    return $fence;
}

for my $scheme (@SCHEMES) {
    subtest $scheme => sub {
        subtest 'fences increase, over handles too' => sub {
            my $dir = fresh_dir();
            my ($first, $second) = map { LockFFI->new(spec_of($scheme, $dir)) } 1 .. 2;
            my $previous = 0;
            for my $lock ($first, $second, $first) {
                my $fence = $lock->acquire(5);
                ok($fence, 'acquired') or diag $lock->last_error_message;
                cmp_ok($fence, '>', $previous, 'the fence is greater than every earlier one');
                is($lock->fence, $fence, 'fence gives the last acquisition\'s');
                ok($lock->held, 'held');
                is($lock->inspect->{last_fence}, $fence, 'inspect shows it as the last fence');
                is($lock->release, LOCK_OK, 'released');
                ok(!$lock->held, 'no longer held');
                $previous = $fence;
            }
        };

        subtest 'a held lock is busy, and the message names the holder' => sub {
            my $dir = fresh_dir();
            my $holder = LockFFI->new(spec_of($scheme, $dir, 'ttl=1h'));
            my $other = LockFFI->new(spec_of($scheme, $dir));
            ok($holder->try_acquire, 'the holder takes it');
            is($other->try_acquire, undef, 'try_acquire fails');
            is($other->last_error, LOCK_BUSY, 'LOCK_BUSY');
            like($other->last_error_message, qr/\bpid $$\b/, 'the message names the holder\'s pid');
            is($other->acquire(0.2), undef, 'acquire with a budget times out');
            is($other->last_error, LOCK_TIMEOUT, 'LOCK_TIMEOUT');
            like($other->last_error_message, qr/\bpid $$\b/, 'and names the holder too');
            dies_with(LOCK_ERR_ALREADY_HELD, sub { $holder->acquire(1) }, 'acquire while holding');
            is($holder->release, LOCK_OK, 'released');
            ok($other->try_acquire, 'then the other takes it');
            is($other->last_error, undef, 'and its failure is forgotten');
            dies_with(LOCK_ERR_NOT_HELD, sub { $holder->release }, 'release of a lock not held');
        };

        subtest 'past its TTL, nobody took it: expired' => sub {
            my $dir = fresh_dir();
            my $lock = LockFFI->new(spec_of($scheme, $dir, 'ttl=100ms'));
            my $observer = LockFFI->new(spec_of($scheme, $dir));
            hold_past_ttl($scheme, $lock, $observer);
            is($lock->release, LOCK_EXPIRED, 'release says LOCK_EXPIRED');
            ok(!$observer->inspect->{held}, 'and the lock is free');

            hold_past_ttl($scheme, $lock, $observer);
            is($lock->prolong(3600), LOCK_EXPIRED, 'prolong says LOCK_EXPIRED');
            is($observer->try_acquire, undef, 'and holds it again');
            is($lock->prolong, LOCK_OK, 'a prolong in time: LOCK_OK');
            is($lock->release, LOCK_OK, 'a release in time: LOCK_OK');
        };

        subtest 'past its TTL, someone else took it: lost' => sub {
            my $dir = fresh_dir();
            my $lock = LockFFI->new(spec_of($scheme, $dir, 'ttl=100ms'));
            my $taker = LockFFI->new(spec_of($scheme, $dir, 'ttl=1h'));
            my $mine = hold_past_ttl($scheme, $lock, $taker);
            # A live flock holder is never broken: the kernel holds it. It
            # is lost only when its file is replaced and the new one locked.
            if ($scheme eq 'flock') {
                is($taker->try_acquire, undef, 'a live flock holder is not broken');
                unlink $lock->path or die "unlink: $!";
            }
            my $theirs = $taker->try_acquire;
            ok($theirs, 'the other handle takes the lock') or diag $taker->last_error_message;
            cmp_ok($theirs, '>', $mine, 'with a greater fence') unless $scheme eq 'flock';
            # (flock: the holder whose file was deleted under it.)
            my $previous = $taker->took_over;
            ok($previous && $previous->{stale}, 'the taker names the holder it took over from');
            is($previous && $previous->{owner_pid}, $$, 'this process');
            is($previous && $previous->{owner_liveness}, LOCK_OWNER_ALIVE,
                $scheme eq 'flock' ? 'alive: its file was deleted under it' : 'alive: it ran past its TTL');
            is($lock->release, LOCK_LOST, 'release says LOCK_LOST');
            ok(!$lock->held, 'the loser holds nothing');
            my $seen = LockFFI->new(spec_of($scheme, $dir))->inspect;
            ok($seen->{held}, 'the taker still holds it');
            is($seen->{fence}, $theirs, 'with its own fence');
            is($taker->release, LOCK_OK, 'and releases it normally');
            dies_with(LOCK_ERR_NOT_HELD, sub { $taker->took_over }, 'took_over holding nothing');

            hold_past_ttl($scheme, $lock, $taker);
            unlink $lock->path or die "unlink: $!" if $scheme eq 'flock';
            ok($taker->try_acquire, 'taken over again');
            is($lock->prolong, LOCK_LOST, 'prolong says LOCK_LOST');
            ok(!$lock->held, 'and the loser holds nothing');
        };

        subtest 'a cooldown keeps the lock closed' => sub {
            my $dir = fresh_dir();
            my $lock = LockFFI->new(spec_of($scheme, $dir));
            my $other = LockFFI->new(spec_of($scheme, $dir));
            $lock->try_acquire;
            my $released_at = now_ms();
            is($lock->release(30), LOCK_OK, 'released with a 30 s cooldown');
            is($other->try_acquire, undef, 'nobody may take it');
            like($other->last_error_message, qr/cool/i, 'the message says it is cooling down');
            cmp_ok($other->inspect->{cooldown_until_unix_ms}, '>=', $released_at + 29_000, 'inspect shows until when');
        };

        subtest 'break' => sub {
            my $dir = fresh_dir();
            my $holder = LockFFI->new(spec_of($scheme, $dir, 'ttl=1h'));
            my $operator = LockFFI->new(spec_of($scheme, $dir));
            $holder->try_acquire;
            if ($scheme eq 'flock') {
                dies_with(LOCK_ERR_UNSUPPORTED, sub { $operator->break }, 'a flock lock cannot be broken');
                return;
            }
            is($operator->break, 1, 'a held lock is broken');
            is($operator->break, 0, 'then there is none');
            ok($operator->try_acquire, 'and anyone may take it');
            is($holder->release, LOCK_LOST, 'the broken holder is told it lost the lock');
        };

        subtest 'path' => sub {
            my $dir = fresh_dir();
            my $lock = LockFFI->new(spec_of($scheme, $dir));
            my $expected = $scheme eq 'lockfile' ? "$dir/data.lock" : "$dir/lock";
            is($lock->path, $expected, 'the path that is the lock');
            $lock->try_acquire;
            ok(-e $lock->path || -l $lock->path, 'it exists while held');
        };

        subtest 'commit' => sub {
            my $dir = fresh_dir();
            my $lock = LockFFI->new(spec_of($scheme, $dir));
            for my $file ("$dir/out", "$dir/out.new") {
                open(my $fh, '>', $file) or die "$file: $!";
                print $fh $file =~ /new/ ? "new\n" : "old\n";
            }
            $lock->try_acquire;
            is($lock->commit("$dir/out.new", "$dir/out"), LOCK_OK, 'committed while held');
            open(my $fh, '<', "$dir/out") or die "$dir/out: $!";
            is(scalar <$fh>, "new\n", 'the target is the new file');
            ok(!-e "$dir/out.new", 'renamed, not copied');
        };

        subtest 'autorenew' => sub {
            my $dir = fresh_dir();
            my $lock = LockFFI->new(spec_of($scheme, $dir, 'ttl=300ms'));
            $lock->try_acquire;
            if ($scheme eq 'flock') {
                dies_with(LOCK_ERR_UNSUPPORTED, sub { $lock->autorenew }, 'the kernel holds a flock lock');
                return;
            }
            my $first_expiry = $lock->inspect->{expires_unix_ms};
            ok($lock->autorenew, 'the watchdog starts');
            wait_until('the first TTL to pass', sub { now_ms() > $first_expiry });
            my $seen = LockFFI->new(spec_of($scheme, $dir))->inspect;
            ok(!$seen->{stale}, 'the lock is not stale past its first TTL');
            cmp_ok($seen->{expires_unix_ms}, '>', $first_expiry, 'its expiry has moved');
            ok($lock->autorenew_stop, 'the watchdog stops');
            is($lock->release, LOCK_OK, 'renewed, never expired');
        };

        subtest 'the waiting callback' => sub {
            my $dir = fresh_dir();
            my $holder = LockFFI->new(spec_of($scheme, $dir));
            my $waiter = LockFFI->new(spec_of($scheme, $dir, 'wmin=50ms&wafter=50ms'));
            my @waited;
            $waiter->on_wait(sub { push @waited, $_[0] });
            $holder->try_acquire;
            is($waiter->acquire(0.25), undef, 'the waiter times out');
            ok(@waited >= 1, 'and was told it was waiting') or return;
            cmp_ok($waited[0], '>=', 0.05, 'first after wmin');
            cmp_ok($waited[$_], '>', $waited[$_ - 1], 'then later each time') for 1 .. $#waited;
        };

        subtest 'the object going away releases its lock' => sub {
            my $dir = fresh_dir();
            my $other = LockFFI->new(spec_of($scheme, $dir));
            {
                my $lock = LockFFI->new(spec_of($scheme, $dir));
                ok($lock->try_acquire, 'held inside a scope');
                is($other->try_acquire, undef, 'busy meanwhile');
            }
            ok($other->try_acquire, 'free once the object is gone') or diag $other->last_error_message;
        };

        subtest 'a child\'s copy going away leaves the parent\'s lock alone' => sub {
            my $dir = fresh_dir();
            my $lock = LockFFI->new(spec_of($scheme, $dir));
            $lock->try_acquire;
            my $pid = fork // die "fork: $!";
            if ($pid == 0) {
                # A normal exit: destructors and the library's exit handler run.
                my $refused = !eval { $lock->release; 1 } && $@->code == LOCK_ERR_FORKED;
                exit($refused ? 0 : 1);
            }
            waitpid($pid, 0);
            is($?, 0, 'the child may not release the parent\'s lock');
            is(LockFFI->new(spec_of($scheme, $dir))->try_acquire, undef, 'the parent still holds it');
            is($lock->release, LOCK_OK, 'and releases it');
        };
    };
}

subtest 'a bad spec names the key and the reason' => sub {
    my $error = dies_with(LOCK_ERR_SPEC_BAD_VALUE, sub { LockFFI->new('mkdir:/tmp/x?ttl=soon') }, 'a bad ttl');
    like("$error", qr/ttl/, 'the message names the key');
    $error = dies_with(LOCK_ERR_SPEC_UNKNOWN_KEY, sub { LockFFI->new('mkdir:/tmp/x?nfs=1') }, 'nfs on mkdir');
    like("$error", qr/nfs/, 'the message names the key');
    $error = dies_with(LOCK_ERR_SPEC_UNKNOWN_SCHEME, sub { LockFFI->new('nosuch:/tmp/x') }, 'an unknown scheme');
    # The schemes these tests run are every one the library has.
    my ($listed) = "$error" =~ /this build has ([a-z]+(?:, [a-z]+)*)/;
    is($listed, join(', ', @SCHEMES, @SERVER_SCHEMES), 'the message lists the schemes the tests run, and a server\'s');
    my $lock = LockFFI->new('mkdir:/tmp/x');
    eval { $lock->acquire(-1) };
    like($@, qr/timeout must be a number of seconds/, 'a negative timeout is refused');
};

done_testing;
