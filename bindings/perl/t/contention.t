use strict;
use warnings;

# Processes of ours contending on one lock, on every scheme, through the
# object on a spec and through the LockFile::Simple-style manager: the
# counter comes out exact, no two are ever inside at once, and every
# process gets each of its turns.

use FindBin;
use lib "$FindBin::Bin/lib";
use LockFFITest;
use Test::More;

use LockFFI qw(:results);
use LockFFI::Simple;

my $PROCESSES = 3;
my $TURNS = 30;

sub through_object {
    my ($scheme, $dir) = @_;
    return sub {
        my $lock = LockFFI->new(spec_of($scheme, $dir));
        my $overlaps = 0;
        for (1 .. $TURNS) {
            $lock->acquire(60) or die 'acquire: ' . $lock->last_error_message;
            $overlaps += critical_section($dir, 'object');
            $lock->release == LOCK_OK or die 'release: ' . $lock->last_error_message;
        }
        return $overlaps;
    };
}

sub through_manager {
    my ($scheme, $dir) = @_;
    return sub {
        my $manager = LockFFI::Simple->make(-scheme => $scheme, -max => 60, -delay => 1, -warn => 0);
        my $overlaps = 0;
        for (1 .. $TURNS) {
            $manager->lock("$dir/data") or die 'lock: ' . $manager->last_error_message;
            $overlaps += critical_section($dir, 'manager');
            $manager->unlock("$dir/data") or die 'unlock: ' . $manager->last_error_message;
        }
        return $overlaps;
    };
}

for my $scheme (@SCHEMES) {
    for my $interface (\&through_object, \&through_manager) {
        my $dir = fresh_dir();
        my $name = $interface == \&through_object ? 'LockFFI objects' : 'LockFFI::Simple managers';
        subtest "$scheme, $name" => sub {
            my @pids = start_contenders($dir, map { $interface->($scheme, $dir) } 1 .. $PROCESSES);
            is(finish_contenders(@pids), 0, 'never two inside at once');
            is(counter_value($dir), $PROCESSES * $TURNS, 'the counter is exact');
            my (undef, $by_pid) = counted_turns($dir);
            is_deeply($by_pid, { map { $_ => $TURNS } @pids }, 'every process had each of its turns');
        };
    }
}

done_testing;
