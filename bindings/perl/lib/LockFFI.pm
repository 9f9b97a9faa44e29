package LockFFI;

use strict;
use warnings;

our $VERSION = '0.1.0';

use Carp qw(croak);
use Exporter qw(import);
use FFI::Platypus 2.00;
use FFI::Platypus::Buffer qw(scalar_to_buffer);
use FFI::Platypus::DL qw(dlopen dlerror dlclose RTLD_NOW);

# The result codes of lockffi.h. Their numbers are part of the library's ABI:
# a code keeps its number forever and a retired number is never reused, so
# they are written out here; t/constants.t checks them against the header.
my (@RESULTS, @LIVENESS);
BEGIN {
    @RESULTS = (
        LOCK_OK                      => 0,
        LOCK_EXPIRED                 => 1,
        LOCK_LOST                    => 2,
        LOCK_BUSY                    => 3,
        LOCK_TIMEOUT                 => 4,
        LOCK_CANCELLED               => 5,
        LOCK_ERR_NULL_ARGUMENT       => 100,
        LOCK_ERR_NOT_HELD            => 101,
        LOCK_ERR_ALREADY_HELD        => 102,
        LOCK_ERR_FORKED              => 103,
        LOCK_ERR_HANDLE_IN_USE       => 104,
        LOCK_ERR_UNSUPPORTED         => 105,
        LOCK_ERR_BUFFER_TOO_SMALL    => 106,
        LOCK_ERR_INVALID_ARGUMENT    => 107,
        LOCK_ERR_SPEC_SYNTAX         => 200,
        LOCK_ERR_SPEC_UNKNOWN_SCHEME => 201,
        LOCK_ERR_SPEC_UNKNOWN_KEY    => 202,
        LOCK_ERR_SPEC_BAD_VALUE      => 203,
        LOCK_ERR_SPEC_DUPLICATE_KEY  => 204,
        LOCK_ERR_PATH_TOO_LONG       => 205,
        LOCK_ERR_SPEC_BAD_URL        => 206,
        LOCK_ERR_NOT_FOUND           => 300,
        LOCK_ERR_PERMISSION          => 301,
        LOCK_ERR_SYMLINK             => 302,
        LOCK_ERR_NOT_A_LOCK          => 303,
        LOCK_ERR_CORRUPT_RECORD      => 304,
        LOCK_ERR_RECORD_TOO_LONG     => 305,
        LOCK_ERR_CORRUPT_GUARD       => 306,
        LOCK_ERR_SYSTEM              => 307,
        LOCK_ERR_COMMIT              => 308,
        LOCK_ERR_NOT_A_DIRECTORY     => 309,
        LOCK_ERR_UNTRUSTED           => 310,
        LOCK_ERR_SERVER_UNKNOWN_HOST => 400,
        LOCK_ERR_SERVER_UNREACHABLE  => 401,
        LOCK_ERR_SERVER_NO_ANSWER    => 402,
        LOCK_ERR_SERVER_DISCONNECTED => 403,
        LOCK_ERR_SERVER_AUTH         => 404,
        LOCK_ERR_SERVER_NOT_READY    => 405,
        LOCK_ERR_SERVER_READ_ONLY    => 406,
        LOCK_ERR_SERVER_NO_WRITES    => 407,
        LOCK_ERR_SERVER_REFUSED      => 408,
        LOCK_ERR_SERVER_FOREIGN_KEYS => 409,
        LOCK_ERR_SERVER_PROTOCOL     => 410,
        LOCK_ERR_SERVER_NOT_REPLICATED => 411,
        LOCK_ERR_PANIC               => 900,
    );
    @LIVENESS = (
        LOCK_OWNER_UNKNOWN => 0,
        LOCK_OWNER_ALIVE   => 1,
        LOCK_OWNER_DEAD    => 2,
    );
}
use constant { @RESULTS, @LIVENESS };
my %RESULT_NAME = reverse @RESULTS;

our %EXPORT_TAGS = (
    results  => [ grep { !/^\d+$/ } @RESULTS ],
    liveness => [ grep { !/^\d+$/ } @LIVENESS ],
);
our @EXPORT_OK = (map { @$_ } values %EXPORT_TAGS);
$EXPORT_TAGS{all} = [@EXPORT_OK];

# LOCK_WAIT_FOREVER, UINT64_MAX.
my $WAIT_FOREVER = ~0;

# Which library: LOCKFFI_LIBRARY if set, else the SONAME `make install`
# puts on the loader's path. Loaded once here so that a missing library is
# one clear error at `use LockFFI`, not an unresolved symbol later.
our $LIBRARY = (defined $ENV{LOCKFFI_LIBRARY} && length $ENV{LOCKFFI_LIBRARY})
    ? $ENV{LOCKFFI_LIBRARY}
    : 'liblockffi.so.0';
{
    my $probe = dlopen($LIBRARY, RTLD_NOW);
    die "LockFFI: cannot load the lock library $LIBRARY: " . (dlerror() // 'unknown dlopen failure')
        . " (install it, or set LOCKFFI_LIBRARY to the path of liblockffi.so)\n"
        unless $probe;
    dlclose($probe);
}

my $ffi = FFI::Platypus->new(api => 2, lib => [$LIBRARY]);

{
    # lock_info, field for field as in lockffi_plain.h; the record class
    # lays it out with the platform's C alignment (t/inspect.t checks it
    # against the bytes lock_inspect writes).
    package LockFFI::Info;
    use FFI::Platypus::Record qw(record_layout_1);
    record_layout_1(
        'bool'       => 'held',
        'bool'       => 'held_by_this_handle',
        'bool'       => 'stale',
        'sint32'     => 'owner_liveness',    # lock_liveness, a C enum
        'sint32'     => 'owner_pid',
        'string(65)' => 'owner_host',        # LOCK_HOST_CAPACITY
        'uint64'     => 'fence',
        'uint64'     => 'last_fence',
        'sint64'     => 'expires_unix_ms',
        'sint64'     => 'cooldown_until_unix_ms',
        'uint32'     => 'queue_length',
        'sint64'     => 'since_unix_ms',
    );
}

# The inspect fields, in the order of the C struct.
our @INFO_FIELDS = qw(
    held held_by_this_handle stale owner_liveness owner_pid owner_host
    fence last_fence expires_unix_ms cooldown_until_unix_ms queue_length since_unix_ms
);

$ffi->type('sint32' => 'lock_result');
$ffi->type('(opaque, uint64)->void' => 'lock_warning_fn');
$ffi->type('record(LockFFI::Info)*' => 'lock_info_ptr');

$ffi->attach([lock_version => 'version'], [] => 'string');
$ffi->attach([lock_strerror => 'strerror'], ['sint32'] => 'string');
$ffi->attach([lock_last_error_message => '_last_error_message'], ['opaque', 'size_t'] => 'size_t');
$ffi->attach([lock_open => '_open'], ['string', 'opaque*'] => 'lock_result');
$ffi->attach([lock_close => '_close'], ['opaque'] => 'lock_result');
$ffi->attach([lock_try_acquire => '_try_acquire'], ['opaque', 'uint64*'] => 'lock_result');
$ffi->attach([lock_acquire => '_acquire'], ['opaque', 'uint64', 'uint64*'] => 'lock_result');
$ffi->attach([lock_release => '_release'], ['opaque', 'uint64'] => 'lock_result');
$ffi->attach([lock_prolong => '_prolong'], ['opaque', 'uint64'] => 'lock_result');
$ffi->attach([lock_commit => '_commit'], ['opaque', 'string', 'string'] => 'lock_result');
# The lost callback would run on the watchdog's own thread, where no Perl
# interpreter may run: it is always NULL here.
$ffi->attach([lock_autorenew => '_autorenew'], ['opaque', 'opaque', 'opaque'] => 'lock_result');
$ffi->attach([lock_autorenew_stop => '_autorenew_stop'], ['opaque'] => 'lock_result');
$ffi->attach([lock_inspect => '_inspect'], ['opaque', 'lock_info_ptr'] => 'lock_result');
$ffi->attach([lock_took_over => '_took_over'], ['opaque', 'lock_info_ptr'] => 'lock_result');
$ffi->attach([lock_break => '_break'], ['opaque', 'bool*'] => 'lock_result');
$ffi->attach([lock_set_warning => '_set_warning'], ['opaque', 'lock_warning_fn', 'opaque'] => 'lock_result');
$ffi->attach([lock_path => '_path'], ['opaque', 'opaque', 'size_t', 'size_t*'] => 'lock_result');

# This thread's message about the library's last failing call, in full.
sub _thread_error_message {
    my $length = _last_error_message(undef, 0);
    return '' unless $length;
    my $buffer = "\0" x ($length + 1);
    my ($pointer, $size) = scalar_to_buffer($buffer);
    _last_error_message($pointer, $size);
    return substr($buffer, 0, $length);
}

# The constant's name of a result code ('LOCK_BUSY'), or undef.
sub result_name { $RESULT_NAME{ $_[-1] } }

sub _milliseconds {
    my ($what, $seconds) = @_;
    croak "LockFFI: $what must be a number of seconds, not "
        . (defined $seconds ? "'$seconds'" : 'undef')
        unless defined $seconds && $seconds =~ /\A\s*(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?\s*\z/;
    return int($seconds * 1000 + 0.5);
}

sub new {
    my ($class, $spec) = @_;
    croak 'LockFFI->new: a lock spec is required, as scheme:target?key=value&...' unless defined $spec;
    croak "LockFFI->new: the spec '$spec' contains a NUL byte" if $spec =~ /\0/;
    my $handle;
    my $rc = _open($spec, \$handle);
    LockFFI::Error->throw($rc, "opening $spec") unless $rc == LOCK_OK;
    return bless {
        handle  => $handle,
        spec    => $spec,
        pid     => $$,
        fence   => undef,
        held    => 0,
        warning => undef,
        last_error         => undef,
        last_error_message => undef,
    }, $class;
}

sub spec  { $_[0]{spec} }
sub fence { $_[0]{fence} }
sub held  { $_[0]{held} }
sub last_error         { $_[0]{last_error} }
sub last_error_message { $_[0]{last_error_message} }

# Records the outcome of a call: clears the failure fields on LOCK_OK,
# keeps the library's message otherwise.
sub _note {
    my ($self, $rc) = @_;
    if ($rc == LOCK_OK) {
        @$self{qw(last_error last_error_message)} = (undef, undef);
    } else {
        @$self{qw(last_error last_error_message)} = ($rc, _thread_error_message());
    }
    return $rc;
}

sub _fail {
    my ($self, $rc, $doing) = @_;
    LockFFI::Error->throw($rc, "$doing $self->{spec}", $self->{last_error_message});
}

sub try_acquire {
    my ($self) = @_;
    my $fence = 0;
    my $rc = $self->_note(_try_acquire($self->{handle}, \$fence));
    return $self->_took($fence) if $rc == LOCK_OK;
    return undef if $rc == LOCK_BUSY;
    $self->_fail($rc, 'try_acquire');
}

sub acquire {
    my ($self, $timeout) = @_;
    my $ms = defined $timeout ? _milliseconds('the timeout', $timeout) : $WAIT_FOREVER;
    my $fence = 0;
    my $rc = $self->_note(_acquire($self->{handle}, $ms, \$fence));
    return $self->_took($fence) if $rc == LOCK_OK;
    return undef if $rc == LOCK_TIMEOUT;
    $self->_fail($rc, 'acquire');
}

sub _took {
    my ($self, $fence) = @_;
    @$self{qw(fence held)} = ($fence, 1);
    return $fence;
}

sub release {
    my ($self, $cooldown) = @_;
    my $ms = _milliseconds('the cooldown', $cooldown // 0);
    my $rc = $self->_note(_release($self->{handle}, $ms));
    $self->_fail($rc, 'release') unless $rc == LOCK_OK || $rc == LOCK_EXPIRED || $rc == LOCK_LOST;
    $self->{held} = 0;
    return $rc;
}

sub prolong {
    my ($self, $ttl) = @_;
    my $ms = _milliseconds('the TTL', $ttl // 0);
    my $rc = $self->_note(_prolong($self->{handle}, $ms));
    $self->_fail($rc, 'prolong') unless $rc == LOCK_OK || $rc == LOCK_EXPIRED || $rc == LOCK_LOST;
    $self->{held} = 0 if $rc == LOCK_LOST;
    return $rc;
}

sub commit {
    my ($self, $temp, $target) = @_;
    croak 'LockFFI->commit: the temp file and the target are required' unless defined $temp && defined $target;
    my $rc = $self->_note(_commit($self->{handle}, $temp, $target));
    $self->_fail($rc, "commit of $temp over $target under") unless $rc == LOCK_OK || $rc == LOCK_EXPIRED || $rc == LOCK_LOST;
    $self->{held} = 0 if $rc == LOCK_LOST;
    return $rc;
}

sub autorenew {
    my ($self) = @_;
    my $rc = $self->_note(_autorenew($self->{handle}, undef, undef));
    $self->_fail($rc, 'autorenew') unless $rc == LOCK_OK;
    return 1;
}

sub autorenew_stop {
    my ($self) = @_;
    my $rc = $self->_note(_autorenew_stop($self->{handle}));
    $self->_fail($rc, 'autorenew_stop') unless $rc == LOCK_OK;
    return 1;
}

sub inspect {
    my ($self) = @_;
    my $info = LockFFI::Info->new;
    my $rc = $self->_note(_inspect($self->{handle}, $info));
    $self->_fail($rc, 'inspect') unless $rc == LOCK_OK;
    return _fields($info);
}

sub took_over {
    my ($self) = @_;
    my $info = LockFFI::Info->new;
    my $rc = $self->_note(_took_over($self->{handle}, $info));
    $self->_fail($rc, 'took_over') unless $rc == LOCK_OK;
    return $info->held ? _fields($info) : undef;
}

# A lock_info as a hash of its fields.
sub _fields {
    my ($info) = @_;
    my %fields = map { $_ => $info->$_ } @INFO_FIELDS;
    $fields{$_} = $fields{$_} ? 1 : 0 for qw(held held_by_this_handle stale);
    $fields{owner_host} =~ s/\0.*\z//s;
    return \%fields;
}

sub break {
    my ($self) = @_;
    my $was_held = 0;
    my $rc = $self->_note(_break($self->{handle}, \$was_held));
    $self->_fail($rc, 'break') unless $rc == LOCK_OK;
    return $was_held ? 1 : 0;
}

sub path {
    my ($self) = @_;
    my $length = 255;
    while (1) {
        my $buffer = "\0" x ($length + 1);
        my ($pointer, $size) = scalar_to_buffer($buffer);
        my $rc = _path($self->{handle}, $pointer, $size, \$length);
        # Too small: $length is now the length needed.
        next if $rc == LOCK_ERR_BUFFER_TOO_SMALL;
        $self->_fail($self->_note($rc), 'path of') unless $rc == LOCK_OK;
        $self->_note($rc);
        return substr($buffer, 0, $length);
    }
}

sub on_wait {
    my ($self, $callback) = @_;
    my $closure;
    if ($callback) {
        # lock_acquire calls it on this thread, from C: a die must not
        # unwind through the library, so it becomes a warning.
        $closure = $ffi->closure(sub {
            my (undef, $waited_ms) = @_;
            eval { $callback->($waited_ms / 1000); 1 } or warn "LockFFI: the on_wait callback died: $@";
        });
    }
    my $rc = $self->_note(_set_warning($self->{handle}, $closure, undef));
    $self->_fail($rc, 'on_wait for') unless $rc == LOCK_OK;
    # The library keeps the pointer; the closure must live as long as it may be called.
    $self->{warning} = $closure;
    return 1;
}

sub close {
    my ($self) = @_;
    my $handle = delete $self->{handle} or return LOCK_OK;
    my $rc = $self->_note(_close($handle));
    $self->{held} = 0;
    return $rc;
}

# A thread gets no copy of a lock: two Perl objects owning one handle
# would close it twice.
sub CLONE_SKIP { 1 }

sub DESTROY {
    my ($self) = @_;
    return unless $self->{handle};
    my $held = $self->{held} && $self->{pid} == $$;
    my $rc = $self->close;
    return unless $held && $rc != LOCK_OK;
    my $why = length $self->{last_error_message} ? $self->{last_error_message} : strerror($rc);
    warn "LockFFI: releasing $self->{spec} as its object went away: $why (" . result_name($rc) . ")\n";
}

package LockFFI::Error;

use overload '""' => sub { $_[0]->message }, fallback => 1;

sub throw {
    my ($class, $code, $doing, $message) = @_;
    $message //= LockFFI::_thread_error_message();
    $message = LockFFI::strerror($code) unless length $message;
    my $name = LockFFI::result_name($code) // "result $code";
    die bless {
        code    => $code,
        name    => $name,
        message => "LockFFI: $doing: $message ($name)",
    }, $class;
}

sub code    { $_[0]{code} }
sub name    { $_[0]{name} }
sub message { $_[0]{message} }

1;

__END__

=head1 NAME

LockFFI - one lock of the lock library, by its spec

=head1 SYNOPSIS

  use LockFFI qw(:results);

  my $lock = LockFFI->new('lockfile:/srv/board/data.txt?ttl=30s');
  my $fence = $lock->acquire(5)              # wait at most 5 seconds
      or die "busy: ", $lock->last_error_message, "\n";
  # ... read data.txt, change it, write it to a temp file ...
  my $outcome = $lock->commit('/srv/board/data.txt.new', '/srv/board/data.txt');
  warn "not committed: we ran past our TTL\n" if $outcome != LOCK_OK;
  $outcome = $lock->release;
  warn "we ran past our 30 s; nobody noticed\n"   if $outcome == LOCK_EXPIRED;
  warn "someone broke our lock: our write raced\n" if $outcome == LOCK_LOST;

=head1 DESCRIPTION

A Perl object for one lock of C<liblockffi>, named by a spec,
C<scheme:target?key=value&...>, exactly as the C library takes it (the
schemes C<lockfile>, C<mkdir>, C<flock>, C<symlink>, C<lease>, C<shm>, C<toplock>, C<redis>;
the keys C<ttl>, C<stale>, C<mode>, C<nfs>, C<format>, C<ext>, C<signal>,
C<wmin>, C<wafter>, C<warn>; see the library's README). For
L<LockFile::Simple>'s interface, see L<LockFFI::Simple>.

The library is loaded when the module is: the path in the environment
variable C<LOCKFFI_LIBRARY> if it is set, otherwise C<liblockffi.so.0> from
the loader's path. C<use LockFFI> dies with the loader's reason when
neither loads.

Durations are seconds, fractions allowed (C<0.25> is 250 ms).

=head1 RELEASE BY OBJECT LIFETIME

When the object goes away (C<DESTROY>: the last reference dropped, or the
program's end) a lock it still holds is released, and a warning says so if
that release found the lock expired or lost. The library also releases held
locks when the process exits; but persistent workers, such as mod_perl,
FastCGI or a job queue's worker, do not exit between requests, so there the
object's lifetime is the only thing that releases a forgotten lock: keep the
object in a lexical of the request's scope, never in a global, or release it
explicitly.

A child of C<fork()> cannot use a lock its parent held (every call but
C<close> fails with C<LOCK_ERR_FORKED>), and its copy of the object going
away leaves the parent's lock alone. A new Perl thread gets no copy of any
lock object (C<CLONE_SKIP>).

=head1 METHODS

=over 4

=item LockFFI->new($spec)

Parses the spec; no file is touched yet. Dies with a L</LockFFI::Error>
that names the key and the reason for a bad spec.

=item $lock->acquire($timeout)

Takes the lock, waiting at most C<$timeout> seconds (C<undef>: as long as
it takes; C<0>: one attempt). The wait is event- and backoff-driven inside
the library, not a polling loop. Returns the fencing token (a positive
integer, greater than that of every earlier acquisition of this lock), or
C<undef> when the time ran out; C<last_error_message> then names the holder
(pid, host, since, expiry), a cooldown or the queue ahead.

=item $lock->try_acquire

One attempt, returning within a tenth of a second: the fence, or C<undef>
when someone else holds the lock or it is cooling down (C<last_error> is
C<LOCK_BUSY>, and C<last_error_message> says why, naming the holder).

=item $lock->release($cooldown)

Releases the lock, keeping it closed to everyone for C<$cooldown> seconds
(default 0). Returns C<LOCK_OK> (released), C<LOCK_EXPIRED> (held past its
TTL, nobody took it; released now: what was done after the expiry was not
protected) or C<LOCK_LOST> (someone else holds it now; nothing removed).
After any of the three the object holds nothing.

=item $lock->prolong($ttl)

Moves the expiry to now + C<$ttl> seconds (0 or no argument: the spec's
C<ttl>). Returns C<LOCK_OK>, C<LOCK_EXPIRED> (it had run out, nobody took
it; held again now) or C<LOCK_LOST> (someone else holds it; the object
holds nothing).

=item $lock->commit($temp, $target)

Renames the finished file C<$temp> over C<$target> only if the lock is
still held at that moment. Returns C<LOCK_OK> (committed), C<LOCK_EXPIRED>
or C<LOCK_LOST> (not committed; C<$temp> is left to the caller).

=item $lock->autorenew, $lock->autorenew_stop

Starts (stops) the library's watchdog thread, which prolongs the held lock
every third of its spec's C<ttl> until it is released. The watchdog's
"lost" callback is not offered: it runs on the watchdog's own thread, where
Perl code cannot run. A lock taken over meanwhile shows in the outcome of
the next C<release>, C<prolong> or C<commit>.

=item $lock->inspect

A hash reference with the fields of the C struct C<lock_info>: C<held>,
C<held_by_this_handle>, C<stale> (0 or 1), C<owner_liveness>
(C<LOCK_OWNER_UNKNOWN>, C<LOCK_OWNER_ALIVE>, C<LOCK_OWNER_DEAD>),
C<owner_pid>, C<owner_host>, C<fence>, C<last_fence>, C<expires_unix_ms>,
C<cooldown_until_unix_ms>, C<queue_length>, C<since_unix_ms> (times in Unix
milliseconds, 0 for none or unknown). Takes nothing.

=item $lock->took_over

After an acquisition: the holder whose stale lock it broke, in the fields
of C<inspect>, as judged then (C<owner_liveness> C<LOCK_OWNER_DEAD> for one that died
holding it, so that what it protected may be half-done), or C<undef> if the
lock was free. Dies with C<LOCK_ERR_NOT_HELD> when nothing is held.

=item $lock->break

Removes the lock whoever holds it (an operator's tool for a holder known to
be gone). Returns whether there was a lock. Dies with
C<LOCK_ERR_UNSUPPORTED> for C<flock>, whose lock only its holder's exit ends.

=item $lock->path

The path that is the lock: lock file, lock directory, symlink, flock'd
file, lease or queue file.

=item $lock->fence

The fencing token of this object's last acquisition (C<undef> before the
first). Hand it to the storage you write to, so that it can refuse a holder
whose lease ran out.

=item $lock->held

Whether this object holds the lock, as far as its own calls have told it.

=item $lock->on_wait(sub { my ($waited_seconds) = @_; ... })

Called while C<acquire> waits: after the spec's C<wmin>, then every
C<wafter>. C<undef> removes it. A callback that dies is turned into a
warning; it must not call this object.

=item $lock->close

Releases a lock still held (no cooldown) and frees the handle; returns how
that release went (C<LOCK_OK> also when nothing was held). The object is
unusable afterwards. C<DESTROY> does this.

=item $lock->last_error, $lock->last_error_message

The result code and the library's full message of this object's last call
that did not succeed (C<undef> after one that did): the call, the path, the
cause, the holder of a busy lock.

=back

=head1 FUNCTIONS

C<LockFFI::version()> gives the library's version, C<LockFFI::strerror($code)>
static text for a code, and C<LockFFI::result_name($code)> the constant's
name.

=head1 CONSTANTS

C<use LockFFI qw(:results)> exports the result codes of C<lockffi.h>
(C<LOCK_OK>, C<LOCK_EXPIRED>, C<LOCK_LOST>, C<LOCK_BUSY>, C<LOCK_TIMEOUT>,
then the errors, from C<LOCK_ERR_NULL_ARGUMENT> = 100 up); C<:liveness> the
C<LOCK_OWNER_*> values; C<:all> both.

=head1 LockFFI::Error

Errors (result codes of 100 and up, and C<LOCK_BUSY> from C<release>,
C<prolong>, C<inspect> and the other calls that do not try to take the
lock) die with an object of this class. It stringifies to the library's
message, prefixed with the operation and the spec; C<code> gives the
result code and C<name> its constant's name:

  my $lock = eval { LockFFI->new('lockfile:/srv/x?ttl=soon') }
      or warn $@->name, ": $@";   # LOCK_ERR_SPEC_BAD_VALUE: ... ttl ...

=cut
