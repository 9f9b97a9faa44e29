package LockFFI::Simple;

use strict;
use warnings;

our $VERSION = '0.1.0';

use Carp qw(croak carp);
use Exporter qw(import);
use Scalar::Util qw(weaken);
use LockFFI qw(:results);

our @EXPORT_OK = qw(lock trylock unlock);

# LockFile::Simple's options and defaults, and this module's own (scheme,
# mode). stale differs: see "OPTIONS" in the POD.
my %DEFAULTS = (
    autoclean => 0,
    delay     => 2,
    efunc     => \&core_warn,
    ext       => '.lock',
    format    => undef,
    hold      => 3600,
    max       => 30,
    mode      => undef,
    nfs       => 0,
    scheme    => 'lockfile',
    stale     => 1,
    wafter    => 20,
    warn      => 1,
    wfunc     => \&core_warn,
    wmin      => 15,
);

for my $option (keys %DEFAULTS) {
    no strict 'refs';
    *{__PACKAGE__ . "::$option"} = sub { $_[0]{$option} };
}

# Warnings and errors name the caller's line, not this module's.
our @CARP_NOT = qw(LockFFI LockFFI::Simple::Lock);
sub core_warn { carp(@_) }
sub no_warn   { return }

sub make {
    my ($class, @options) = @_;
    my $self = bless { %DEFAULTS, lock_by_file => {} }, $class;
    $self->configure(@options);
    @$self{qw(last_outcome last_fence last_error last_error_message)} = (undef) x 4;
    return $self;
}

sub configure {
    my ($self, %options) = @_;
    for my $key (sort keys %options) {
        my ($option) = $key =~ /\A-(\w+)\z/;
        croak "LockFFI::Simple: unknown option '$key'; the options are "
            . join(', ', map {"-$_"} sort keys %DEFAULTS)
            unless defined $option && exists $DEFAULTS{$option};
        $self->{$option} = $options{$key};
    }
    # As in LockFile::Simple: -wfunc => undef or -efunc => undef silences.
    for my $func (qw(wfunc efunc)) {
        $self->{$func} = \&no_warn unless defined $self->{$func};
    }
    return $self;
}

my $LOCKER;
sub locker { $LOCKER //= __PACKAGE__->make(-warn => 1) }

sub last_outcome       { $_[0]{last_outcome} }
sub last_fence         { $_[0]{last_fence} }
sub last_error         { $_[0]{last_error} }
sub last_error_message { $_[0]{last_error_message} }

# Called as a function (imported), the default manager does the work.
sub _self_and_args {
    return @_ if ref $_[0] && eval { $_[0]->isa(__PACKAGE__) };
    return (locker(), @_);
}

sub lock {
    my ($self, $file, $format) = _self_and_args(@_);
    return $self->_take($file, $format, 0);
}

sub trylock {
    my ($self, $file, $format) = _self_and_args(@_);
    return $self->_take($file, $format, 1);
}

sub unlock {
    my ($self, $file, $format) = _self_and_args(@_);
    carp 'LockFFI::Simple: 2nd argument (format) is not needed by unlock' if defined $format;
    $self->{last_outcome} = undef;
    my $held = $self->{lock_by_file}{$file};
    unless ($held) {
        $self->_failed(LOCK_ERR_NOT_HELD, "file $file not currently locked");
        return undef;
    }
    my $lock = $held->{lock};
    my $outcome = eval { $lock->release };
    unless (defined $outcome) {
        # Still held (the lock's files stayed busy, say): unlock may be retried.
        my $error = $@;
        $self->_failed(ref $error ? $error->code : LOCK_ERR_PANIC, "cannot unlock $file: $error");
        return undef;
    }
    my $why = $lock->last_error_message;
    delete $self->{lock_by_file}{$file};
    $lock->close;
    $self->{last_outcome} = $outcome;
    if ($outcome == LOCK_LOST) {
        $why = LockFFI::strerror(LOCK_LOST) unless length $why;
        $self->_failed(LOCK_LOST, "cannot unlock $file: $why");
        return undef;
    }
    @$self{qw(last_error last_error_message)} = (undef, undef);
    if ($outcome == LOCK_EXPIRED && $self->{warn}) {
        $self->{wfunc}->("lock on $file was held past its hold time of $self->{hold} s; nobody took it");
    }
    return 1;
}

# The spec of the lock on $file: the scheme's target, then the options
# LockFile::Simple's settings map to.
sub spec {
    my ($self, $file, $format) = @_;
    croak 'LockFFI::Simple: a file name is required' unless defined $file && length $file;
    $format //= $self->{format};
    my $scheme = $self->{scheme};
    my @keys = (
        ttl    => _duration($self->{hold}),
        stale  => $self->{stale} ? 'pid' : 'none',
        warn   => $self->{warn} ? 1 : 0,
        wmin   => _duration($self->{wmin}),
        wafter => _duration($self->{wafter}),
    );
    push @keys, mode => $self->{mode} if defined $self->{mode};
    push @keys, nfs => 1 if $self->{nfs};
    my $target = $file;
    if ($scheme eq 'lockfile') {
        # The library derives the lock file itself, as LockFile::Simple does.
        push @keys, defined $format ? (format => $format) : (ext => $self->{ext});
    } else {
        $target = _lock_path($file, $format, $self->{ext});
    }
    my @query;
    while (my ($key, $value) = splice @keys, 0, 2) {
        push @query, "$key=" . _encode($value);
    }
    return "$scheme:" . _encode($target) . '?' . join('&', @query);
}

sub lockfile {
    my ($self, $file, $format) = @_;
    return LockFFI->new($self->spec($file, $format))->path;
}

sub _take {
    my ($self, $file, $format, $try) = @_;
    $self->{last_fence} = undef;
    if (my $held = $self->{lock_by_file}{$file}) {
        my $message = "file $file already locked at $held->{where}";
        # LockFile::Simple: an error for lock, a plain failure for trylock.
        if ($try) {
            @$self{qw(last_error last_error_message)} = (LOCK_ERR_ALREADY_HELD, $message);
        } else {
            $self->_failed(LOCK_ERR_ALREADY_HELD, $message);
        }
        return undef;
    }
    my $lock = eval { LockFFI->new($self->spec($file, $format)) };
    unless ($lock) {
        $self->_failed(ref $@ ? $@->code : LOCK_ERR_INVALID_ARGUMENT, "cannot lock $file: $@");
        return undef;
    }
    if ($self->{warn} && !$try) {
        # The manager keeps the lock, the lock the callback: a weak
        # reference back, or neither would ever be freed.
        weaken(my $manager = $self);
        my $warned = 0;
        $lock->on_wait(sub {
            my ($waited) = @_;
            return unless $manager;
            # Whole seconds, as LockFile::Simple says it, unless -wmin is shorter.
            my $seconds = $waited >= 10 ? int($waited + 0.5) : 0 + sprintf('%.1f', $waited);
            my $s = $seconds == 1 ? '' : 's';
            $manager->{wfunc}->($warned++
                ? "still waiting for $file lock after $seconds second$s"
                : "waiting for $file lock since $seconds second$s");
        });
    }
    my $fence = eval { $try ? $lock->try_acquire : $lock->acquire($self->{max} * $self->{delay}) };
    unless (defined $fence) {
        if ($@) {
            $self->_failed(ref $@ ? $@->code : LOCK_ERR_PANIC, "cannot lock $file: $@");
        } else {
            # Busy or timed out: a normal outcome, reported only through the
            # result and last_error, as LockFile::Simple does.
            @$self{qw(last_error last_error_message)} = ($lock->last_error, $lock->last_error_message);
        }
        return undef;
    }
    my (undef, $filename, $line) = caller(1);
    $self->{lock_by_file}{$file} = { lock => $lock, where => "$filename line $line" };
    @$self{qw(last_fence last_error last_error_message)} = ($fence, undef, undef);
    return LockFFI::Simple::Lock->_new($self, $file, $lock, $fence);
}

sub _failed {
    my ($self, $code, $message) = @_;
    $message =~ s/\s+\z//;
    @$self{qw(last_error last_error_message)} = ($code, $message);
    $self->{efunc}->($message);
}

# LockFile::Simple's lock path for a scheme that takes it as its target:
# %f the file, %D its directory, %F its base name, %% a percent sign; no
# format: the file and the extension.
sub _lock_path {
    my ($file, $format, $ext) = @_;
    return $file . $ext unless defined $format;
    my ($dir, $base) = $file =~ m{\A(.*)/(.*)\z} ? ($1, $2) : ('.', $file);
    $dir = '.' if $dir eq '';
    my %macro = (f => $file, D => $dir, F => $base, '%' => '%');
    (my $path = $format) =~ s{%(.)}{
        croak "LockFFI::Simple: format '$format': %$1 is not one of %f, %D, %F, %%" unless exists $macro{$1};
        $macro{$1}
    }ge;
    return $path;
}

sub _duration {
    my ($seconds) = @_;
    croak "LockFFI::Simple: expected a number of seconds, not '" . ($seconds // 'undef') . "'"
        unless defined $seconds && $seconds =~ /\A(?:\d+(?:\.\d*)?|\.\d+)\z/;
    my $ms = int($seconds * 1000 + 0.5);
    return $ms % 1000 ? "${ms}ms" : ($ms / 1000) . 's';
}

# Percent-encodes all but the bytes no spec gives a meaning to.
sub _encode {
    my ($text) = @_;
    utf8::encode($text) if utf8::is_utf8($text);
    $text =~ s{([^A-Za-z0-9/._~-])}{sprintf '%%%02X', ord $1}ge;
    return $text;
}

package LockFFI::Simple::Lock;

# What lock and trylock return: true, and able to release its own lock.

sub _new {
    my ($class, $manager, $file, $lock, $fence) = @_;
    return bless { manager => $manager, file => $file, lock => $lock, fence => $fence }, $class;
}

sub file  { $_[0]{file} }
sub fence { $_[0]{fence} }

sub release {
    my ($self) = @_;
    my $manager = $self->{manager};
    my $held = $manager->{lock_by_file}{ $self->{file} };
    # Only the acquisition this handle stands for.
    unless ($held && $held->{lock} == $self->{lock}) {
        $manager->_failed(LockFFI::LOCK_ERR_NOT_HELD, "file $self->{file} not locked through this handle");
        return undef;
    }
    return $manager->unlock($self->{file});
}

1;

__END__

=head1 NAME

LockFFI::Simple - LockFile::Simple's interface on the lock library

=head1 SYNOPSIS

  use LockFFI::Simple qw(lock trylock unlock);
  use LockFFI qw(:results);

  # Simple locking using default settings
  lock("/some/file") || die "can't lock /some/file\n";
  warn "already locked\n" unless trylock("/some/file");
  unlock("/some/file");

  # A manager with its own settings
  my $lockmgr = LockFFI::Simple->make(-hold => 30, -max => 20, -delay => 1, -nfs => 1);
  $lockmgr->lock("/some/file") || die "can't lock /some/file: ", $lockmgr->last_error_message, "\n";
  my $fence = $lockmgr->last_fence;
  # ... read /some/file, change it, write it back ...
  unless ($lockmgr->unlock("/some/file")) {
      die "someone broke our lock: our write raced\n" if $lockmgr->last_outcome == LOCK_LOST;
  }

=head1 DESCRIPTION

The interface of L<LockFile::Simple> (C<make>, C<configure>, C<lock>,
C<trylock>, C<unlock>, C<lockfile>, the option accessors, lock handles with
C<release>) on the lock library. With the default scheme, C<lockfile>, the
lock is the same file LockFile::Simple makes, C<< <file>.lock >> (or
C<-ext>, C<-format>), holding the same C<PID> (C<PID:HOST> with C<-nfs>):
programs using LockFile::Simple and programs using this module exclude each
other on the same file. What this module adds:

=over 4

=item *

the lock file is made complete under an unguessable name and linked into
place, so two takers never both believe they won, and a stale lock is broken
by exactly one of many breakers;

=item *

a dead holder is recognised by pid I<and> start time (no pid-reuse
mistakes), and C<-hold> by the boot clock (no clock-step mistakes);

=item *

after C<unlock>, C<last_outcome> tells C<LOCK_OK> (released),
C<LOCK_EXPIRED> (held past C<-hold>, nobody took it) and C<LOCK_LOST>
(someone else holds it now);

=item *

every lock gets a fencing token, C<last_fence>, greater than every earlier
one for that file;

=item *

a failure gives a result code and the library's full message (C<last_error>,
C<last_error_message>), naming the holder of a busy lock.

=back

C<-scheme> chooses another of the library's schemes (C<mkdir>, C<flock>,
C<symlink>, C<lease>, C<shm>, C<toplock>); their lock is at the path LockFile::Simple
would use for its lock file (C<< <file>.lock >>, or C<-ext>, C<-format>),
and only programs using the same scheme exclude each other.

=head1 OPTIONS

Given to C<make> or C<configure> as C<< -name => value >>, read back with
C<< $mgr->name >>. An unknown option dies (LockFile::Simple ignores it
silently). Times are seconds, fractions allowed.

=over 4

=item -max, -delay (default 30, 2)

C<lock> waits at most C<max> E<times> C<delay> seconds (one minute by
default), as LockFile::Simple does; but the library does not poll every
C<delay> seconds: it waits for the lock's release where the scheme allows
it, with a jittered exponential backoff otherwise.

=item -hold (default 3600)

The spec's C<ttl>: after this long others may break the lock. 0 never.

=item -stale (default 1, LockFile::Simple: 0)

The spec's C<stale>: true is C<stale=pid> (a lock whose same-host holder is
provably dead, pid and start time, is broken at once), false C<stale=none>
(only by C<-hold>). LockFile::Simple leaves it off by default because its
check races with a new holder; the library's check cannot, so it is on.

=item -nfs (default 0)

The spec's C<nfs> (C<lockfile> only): C<PID:HOST> in the lock file.

=item -ext (default .lock), -format

The spec's C<ext> and C<format> (C<%f>, C<%D>, C<%F>, C<%%>). C<%p> is
refused: it gives every process a lock file of its own, which excludes
nobody. A C<format> given to C<lock> or C<trylock> overrides this one.

=item -warn, -wmin, -wafter (default 1, 15, 20)

The spec's C<warn>, C<wmin>, C<wafter>: while C<lock> waits, C<wfunc> is
called after C<wmin>, then every C<wafter> seconds.

=item -wfunc, -efunc (default: Perl's C<warn>)

Called with the text of a warning (waiting, an expired lock unlocked) or an
error (a file locked twice, a file unlocked that was not locked, a lock
lost, a spec or file system error); C<undef> silences. Log::Agent is not
used.

=item -autoclean

Accepted and not needed: the library releases every lock still held when
the process exits normally (see L</PERSISTENT WORKERS>).

=item -scheme (default lockfile)

Which of the library's schemes; see L</DESCRIPTION>.

=item -mode (default: the library's, 0600)

The spec's C<mode>: who may take the lock, C<0600> its owner, C<0660> the
owner's group, C<0666> everyone. A CGI running as C<www-data> and a cron job
of another user sharing a file need C<0660> and a group in common.

=back

=head1 METHODS

=over 4

=item make(-key => value, ...), configure(-key => value, ...)

=item lock($file [, $format]), trylock($file [, $format])

Take the lock on C<$file>, waiting (C<lock>) or not (C<trylock>). They
return a lock handle, which is true, on success, and C<undef> otherwise:
the lock is busy (C<last_error> C<LOCK_BUSY> or C<LOCK_TIMEOUT>; the
message names the holder), the file is already locked through this manager
(C<LOCK_ERR_ALREADY_HELD>), or an error (also reported through C<efunc>).
Called as plain functions they use a default manager, as LockFile::Simple
does. The handle's C<release> unlocks, C<fence> gives the fencing token,
C<file> the file.

=item unlock($file)

True if the lock was ours and is released now: C<last_outcome> is
C<LOCK_OK>, or C<LOCK_EXPIRED> when it was held past C<-hold> (nobody took
it, but what was done after the expiry was not protected; a warning goes
to C<wfunc>). False if someone else holds it now (C<last_outcome>
C<LOCK_LOST>, nothing removed), if the file was not locked through this
manager (C<LOCK_ERR_NOT_HELD>), or on an error; the lock is then still
held and C<unlock> may be tried again.

=item lockfile($file [, $format])

The path of the lock for C<$file>, as the library derives it.

=item spec($file [, $format])

The library's spec for the lock on C<$file>, to open it with L<LockFFI>
(to inspect it, say).

=item last_fence, last_outcome, last_error, last_error_message

The fencing token of the last successful C<lock> or C<trylock>; the outcome
of the last C<unlock> that released or lost a lock; the result code and the
message of the last call that did not succeed (C<undef> after one that did).

=back

=head1 PERSISTENT WORKERS

The library releases the locks a process still holds when it exits, as
LockFile::Simple's C<-autoclean> does. Persistent workers (mod_perl,
FastCGI, a job queue's worker) do not exit between requests, so nothing
does that for them: C<unlock> what you C<lock> in the same request, or use
a manager that lives in the request's scope. When a manager goes away, the
locks it still holds are released (the L<LockFFI> objects it keeps release
on C<DESTROY>); the default manager of the function interface lives until
the process ends.

=cut
