use strict;
use warnings;

# The result codes and liveness values LockFFI exports are the header's,
# name for name and number for number, and the library knows each code.

use FindBin;
use Test::More;

use LockFFI qw(:all);

my $header = "$FindBin::Bin/../../../include/lockffi_plain.h";
plan skip_all => "$header is not here (this distribution was copied out of the library's repository)"
    unless -r $header;

open(my $fh, '<', $header) or die "$header: $!";
my %in_header = map { /^\s+((?:LOCK_OK|LOCK_EXPIRED|LOCK_LOST|LOCK_BUSY|LOCK_TIMEOUT|LOCK_CANCELLED|LOCK_ERR_\w+|LOCK_OWNER_\w+)) = (\d+),?$/ ? ($1 => $2) : () } <$fh>;
cmp_ok(scalar keys %in_header, '>=', 30, 'the header\'s enums were read');

my $unknown_code = LockFFI::strerror(-1);
my @exported = @{ $LockFFI::EXPORT_TAGS{all} };
is_deeply([sort @exported], [sort keys %in_header], 'every constant of the header is exported, and no other');
for my $name (sort keys %in_header) {
    no strict 'refs';
    is(&{"LockFFI::$name"}(), $in_header{$name}, "$name is $in_header{$name}");
    next if $name =~ /^LOCK_OWNER_/;
    is(LockFFI::result_name($in_header{$name}), $name, "result_name($in_header{$name})");
    isnt(LockFFI::strerror($in_header{$name}), $unknown_code, "the library describes $name");
}
like(LockFFI::version(), qr/\A\d+\.\d+\.\d+\z/, 'the library\'s version');

done_testing;
