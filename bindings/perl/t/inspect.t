use strict;
use warnings;

# inspect on every scheme: each field of lock_info against what is known
# independently (the holder's pid, host, fence and the time it acquired),
# and the record's layout against the bytes lock_inspect writes, decoded
# with Perl's own C alignment rules (unpack's x![...]).

use FindBin;
use lib "$FindBin::Bin/lib";
use LockFFITest;
use Test::More;

use FFI::Platypus 2.00;
use FFI::Platypus::Buffer qw(scalar_to_buffer);
use POSIX ();
use LockFFI qw(:results :liveness);

my $HOST = (POSIX::uname())[1];

# lock_info as the C compiler lays it out: three bools, the enum aligned to
# int, int32, char[65], then 64-bit fields aligned to 8.
my $LAYOUT = 'C C C x![l] l l Z65 x![q] Q Q q q L x![q] q';
my $FILL = "\xAA";

my $raw_ffi = FFI::Platypus->new(api => 2, lib => [$LockFFI::LIBRARY]);
my $raw_inspect = $raw_ffi->function(lock_inspect => ['opaque', 'opaque'] => 'sint32');

# lock_inspect into a plain buffer: the fields unpacked, and how many bytes
# the library wrote.
sub inspect_raw {
    my ($lock) = @_;
    my $buffer = $FILL x 512;
    my ($pointer) = scalar_to_buffer($buffer);
    is($raw_inspect->call($lock->{handle}, $pointer), LOCK_OK, 'lock_inspect into a plain buffer');
    my $written = length($buffer);
    $written-- while $written && substr($buffer, $written - 1, 1) eq $FILL;
    my %fields;
    @fields{@LockFFI::INFO_FIELDS} = unpack($LAYOUT, $buffer);
    return (\%fields, $written);
}

# inspect through the module, checked against the raw route field by field.
sub inspected {
    my ($lock, $state) = @_;
    my $info = $lock->inspect;
    my ($raw, $written) = inspect_raw($lock);
    is($written, LockFFI::Info->_ffi_record_size, "$state: the record is as long as what lock_inspect writes");
    is_deeply($info, $raw, "$state: every field as the C layout has it");
    return $info;
}

sub within {
    my ($value, $low, $high, $name) = @_;
    ok($value >= $low && $value <= $high, $name) or diag("$value not in [$low, $high]");
}

for my $scheme (@SCHEMES) {
    subtest $scheme => sub {
        my $dir = fresh_dir();
        my $observer = LockFFI->new(spec_of($scheme, $dir));

        # A holder of its own process, so that its pid is not ours.
        pipe(my $from_child, my $to_parent) or die "pipe: $!";
        pipe(my $from_parent, my $to_child) or die "pipe: $!";
        my $child = fork // die "fork: $!";
        if ($child == 0) {
            close $from_child;
            close $to_child;
            my $lock = LockFFI->new(spec_of($scheme, $dir, 'ttl=1h'));
            my $before = now_ms();
            my $fence = $lock->try_acquire or die 'the child could not lock: ' . $lock->last_error_message;
            my $after = now_ms();
            syswrite($to_parent, "$fence $before $after\n");
            sysread($from_parent, my $ignored, 1);    # until the parent closes it
            POSIX::_exit(0);
        }
        close $to_parent;
        close $from_parent;
        my ($fence, $before, $after) = split ' ', scalar <$from_child>;

        my $info = inspected($observer, 'held by another process');
        is($info->{held}, 1, 'held');
        is($info->{held_by_this_handle}, 0, 'not by this handle');
        is($info->{stale}, 0, 'not stale');
        is($info->{owner_liveness}, LOCK_OWNER_ALIVE, 'the owner is alive');
        is($info->{owner_pid}, $child, 'the owner is the child');
        is($info->{owner_host}, $HOST, 'on this host');
        is($info->{fence}, $fence, 'its fence');
        is($info->{last_fence}, $fence, 'the last fence is its fence');
        within($info->{since_unix_ms}, $before, $after, 'since: when it acquired');
        within($info->{expires_unix_ms} - $info->{since_unix_ms}, 3_599_999, 3_600_001, 'expires: an hour later');
        is($info->{cooldown_until_unix_ms}, 0, 'no cooldown');
        is($info->{queue_length}, 1, 'the queue counts the holder');

        kill 'KILL', $child;
        waitpid($child, 0);
        $info = inspected($observer, 'its holder killed');
        if ($scheme eq 'flock') {
            is($info->{held}, 0, 'the kernel let go of the dead holder\'s flock');
        } else {
            is($info->{held}, 1, 'the dead holder\'s lock is still there');
            is($info->{owner_liveness}, LOCK_OWNER_DEAD, 'its owner is dead');
            is($info->{stale}, 1, 'so it is stale');
        }

        my $lock = LockFFI->new(spec_of($scheme, $dir, 'ttl=1h'));
        my $mine = $lock->try_acquire;
        cmp_ok($mine, '>', $fence, 'a stale lock is taken over with a greater fence') unless $scheme eq 'flock';
        $info = inspected($lock, 'held by this handle');
        is($info->{held_by_this_handle}, 1, 'by this handle');
        is($info->{owner_pid}, $$, 'this process');
        is($info->{fence}, $mine, 'with its fence');

        if ($scheme eq 'toplock') {
            # A waiter queues behind the holder.
            my $waiter = fork // die "fork: $!";
            if ($waiter == 0) {
                my $queued = LockFFI->new(spec_of($scheme, $dir));
                $queued->acquire(20);
                POSIX::_exit(0);
            }
            wait_until('the waiter to queue', sub { $observer->inspect->{queue_length} == 2 });
            $info = inspected($observer, 'with a waiter queued');
            is($info->{queue_length}, 2, 'the holder and the waiter');
            kill 'KILL', $waiter;
            waitpid($waiter, 0);
        }

        my $released = now_ms();
        is($lock->release(60), LOCK_OK, 'released with a cooldown of a minute');
        my $done = now_ms();
        $info = inspected($observer, 'cooling down');
        is($info->{held}, 0, 'nobody holds it');
        is($info->{owner_pid}, 0, 'no owner pid');
        is($info->{owner_host}, '', 'no owner host');
        is($info->{fence}, 0, 'no holder\'s fence');
        is($info->{last_fence}, $mine, 'the last fence is still ours');
        within($info->{cooldown_until_unix_ms}, $released + 60_000, $done + 60_000, 'cooling down for a minute');
    };
}

done_testing;
