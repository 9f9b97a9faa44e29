use strict;
use warnings;

# Where the library comes from: LOCKFFI_LIBRARY, else liblockffi.so.0; a
# library that does not load is one clear error at `use LockFFI`.

use FindBin;
use Test::More;

my $lib = "$FindBin::Bin/../lib";

sub load_with {
    my ($library) = @_;
    local $ENV{LOCKFFI_LIBRARY} = $library;
    my $output = `"$^X" -I"$lib" -e "use LockFFI; print LockFFI::version(), qq(\\n)" 2>&1`;
    return ($? >> 8, $output);
}

my ($status, $output) = load_with($ENV{LOCKFFI_LIBRARY});
is($status, 0, 'the library named by LOCKFFI_LIBRARY loads') or diag $output;

($status, $output) = load_with('/nonexistent/liblockffi.so');
isnt($status, 0, 'a missing library fails the use');
like($output, qr{\ALockFFI: cannot load the lock library /nonexistent/liblockffi\.so: .*No such file}, 'naming the path and the cause');
like($output, qr/set LOCKFFI_LIBRARY/, 'and saying what to do');

done_testing;
