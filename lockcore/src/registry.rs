//! The schemes this build knows, each declared once, here.
//!
//! An entry names the scheme's strategy type, what its spec's target is,
//! the options it takes beyond those every scheme takes, and the optional
//! abilities it has. From this one list come [`Scheme`] and
//! [`Scheme::ALL`], the parser's names, accepted keys and error texts, the
//! handle's dispatch to the strategy, and the answer to "can this lock do
//! that?" ([`Scheme::supports`]), which the handle gives before it calls
//! into a strategy. Everything that iterates over schemes (the tests, the C
//! tests, the benchmarks, the demo) iterates over [`Scheme::ALL`].
//!
//! An ability listed here must be implemented by the strategy type (the
//! build fails otherwise); one the type implements but the entry does not
//! list is never used.

use core::mem::MaybeUninit;

use crate::error::Error;
use crate::spec::{Key, Spec};
#[cfg(feature = "example-scheme")]
use crate::strategy::example::Example;
use crate::strategy::flock::Flock;
use crate::strategy::guarded::Guarded;
use crate::strategy::lease::Lease;
use crate::strategy::lockfile::LockFile;
use crate::strategy::mkdir::Mkdir;
use crate::strategy::redis::Redis;
use crate::strategy::shm::Shm;
use crate::strategy::symlink::Symlink;
use crate::strategy::toplock::Toplock;
use crate::strategy::{Abilities, Strategy};
use crate::trust::Sharing;

/// Opens a strategy of type `S` into `slot`, as `variant` of
/// [`AnyStrategy`]: a frame of its own for each type, so that opening one
/// scheme's lock takes the stack of that scheme's strategy, not of all of
/// them at once.
#[inline(never)]
fn open_one<S: Strategy>(
    spec: &Spec,
    sharing: Sharing,
    slot: &mut MaybeUninit<AnyStrategy>,
    variant: fn(S) -> AnyStrategy,
) -> Result<(), Error> {
    slot.write(variant(S::open(spec, sharing)?));
    Ok(())
}

/// Declares the schemes: [`Scheme`], its tables, the handle's dispatch
/// and each strategy type's [`Abilities`], from one entry per scheme.
macro_rules! schemes {
    ($(
        $(#[doc = $doc:literal])*
        $(#[cfg($cfg:meta)])?
        $variant:ident = $name:literal {
            strategy: $strategy:ty,
            target: $target:ident,
            keys: [$($key:ident),*],
            abilities: [$($ability:ident),*],
        }
    )*) => {
        /// The strategies a spec can name. More may come: a `match` outside
        /// this crate needs an arm for the others.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[non_exhaustive]
        pub enum Scheme {
            $($(#[doc = $doc])* $(#[cfg($cfg)])? $variant,)*
        }

        impl Scheme {
            /// Every scheme this build implements, in the order they are
            /// declared: what tools iterate over (tests, benchmarks, demos).
            pub const ALL: &'static [Scheme] = &[$($(#[cfg($cfg)])? Scheme::$variant,)*];

            /// The name a spec gives it (`lockfile` in `lockfile:/path`).
            pub const fn name(self) -> &'static str {
                match self {
                    $($(#[cfg($cfg)])? Scheme::$variant => $name,)*
                }
            }

            /// The scheme a spec names, if this build has it.
            pub fn from_name(name: &[u8]) -> Option<Scheme> {
                Scheme::ALL.iter().copied().find(|scheme| scheme.name().as_bytes() == name)
            }

            /// What its spec's target is.
            pub const fn target_kind(self) -> TargetKind {
                match self {
                    $($(#[cfg($cfg)])? Scheme::$variant => TargetKind::$target,)*
                }
            }

            /// The optional abilities of its locks.
            pub const fn abilities(self) -> AbilitySet {
                match self {
                    $($(#[cfg($cfg)])? Scheme::$variant => AbilitySet::of(&[$(Ability::$ability),*]),)*
                }
            }

            /// Whether its specs take the option `key`.
            pub(crate) fn accepts(self, key: Key) -> bool {
                let own: &[Key] = match self {
                    $($(#[cfg($cfg)])? Scheme::$variant => &[$(key_named!($key)),*],)*
                };
                key.is_common() || own.contains(&key)
            }

            /// The refusal of a key its specs do not take, with those they do.
            pub(crate) const fn unknown_key_reason(self) -> &'static str {
                match self {
                    $($(#[cfg($cfg)])? Scheme::$variant => concat!(
                        "unknown option; ", $name, " takes ", common_keys!() $(, ", ", stringify!($key))*
                    ),)*
                }
            }
        }

        // The variants differ in size because nothing is allocated: paths
        // and the toplock replay buffer live inline. A `Lock` is a few tens
        // of KiB; keep it on the heap, made in place (`Lock::open_in`, as
        // lockffi does), rather than on a small stack.
        /// The strategy of an open lock, whichever scheme it is.
        #[allow(clippy::large_enum_variant)]
        #[derive(Debug)]
        pub(crate) enum AnyStrategy {
            $($(#[cfg($cfg)])? $variant($strategy),)*
        }

        impl AnyStrategy {
            /// The strategy `spec` names, ready to make its first attempt,
            /// written into `slot`, from a frame that holds only that
            /// scheme's strategy: the `Result` its `open` returns and the
            /// variant made of it, two copies (`toplock`'s, at 47 KiB each,
            /// make the deepest frame of `lock_open`, about 96 KiB).
            pub(crate) fn open_into(spec: &Spec, sharing: Sharing, slot: &mut MaybeUninit<AnyStrategy>) -> Result<(), Error> {
                match spec.scheme {
                    $($(#[cfg($cfg)])? Scheme::$variant => open_one::<$strategy>(spec, sharing, slot, AnyStrategy::$variant),)*
                }
            }

            /// What every strategy does.
            pub(crate) fn core(&mut self) -> &mut dyn Strategy {
                match self {
                    $($(#[cfg($cfg)])? AnyStrategy::$variant(strategy) => strategy,)*
                }
            }

            /// Its optional abilities, as its entry lists them.
            pub(crate) fn abilities(&mut self) -> &mut dyn Abilities {
                match self {
                    $($(#[cfg($cfg)])? AnyStrategy::$variant(strategy) => strategy,)*
                }
            }

            /// [`abilities`](Self::abilities), for the ones that only look.
            pub(crate) fn abilities_ref(&self) -> &dyn Abilities {
                match self {
                    $($(#[cfg($cfg)])? AnyStrategy::$variant(strategy) => strategy,)*
                }
            }
        }

        $($(#[cfg($cfg)])? impl Abilities for $strategy {
            $(ability_accessor!($ability);)*
        })*
    };
}

/// The option a registry entry names, by its name in a spec: a name that
/// is no option does not compile.
macro_rules! key_named {
    (format) => {
        Key::Format
    };
    (ext) => {
        Key::Ext
    };
    (nfs) => {
        Key::Nfs
    };
    (signal) => {
        Key::Signal
    };
    (replicas) => {
        Key::Replicas
    };
}

/// The options every scheme takes, as the refusal of another one lists them.
macro_rules! common_keys {
    () => {
        "ttl, hold, stale, mode, fair, window, warn, wmin, wafter"
    };
}

/// The accessor of [`Abilities`] that hands out one ability.
macro_rules! ability_accessor {
    (Prolong) => {
        fn as_prolong(&mut self) -> Option<&mut dyn crate::strategy::Prolong> {
            Some(self)
        }
    };
    (Cooldown) => {
        fn as_cooldown(&mut self) -> Option<&mut dyn crate::strategy::Cooldown> {
            Some(self)
        }
    };
    (Break) => {
        fn as_break(&mut self) -> Option<&mut dyn crate::strategy::Break> {
            Some(self)
        }
    };
    (Queue) => {
        fn as_queue(&mut self) -> Option<&mut dyn crate::strategy::Queue> {
            Some(self)
        }
    };
    (Commit) => {
        fn as_commit(&mut self) -> Option<&mut dyn crate::strategy::Commit> {
            Some(self)
        }
    };
    (Files) => {
        fn as_files(&self) -> Option<&dyn crate::strategy::Files> {
            Some(self)
        }
    };
    (OwnWake) => {
        fn as_own_wake(&mut self) -> Option<&mut dyn crate::strategy::OwnWake> {
            Some(self)
        }
    };
    (TimedAcquire) => {
        fn as_timed_acquire(&mut self) -> Option<&mut dyn crate::strategy::TimedAcquire> {
            Some(self)
        }
    };
}

schemes! {
    /// An `O_EXCL`-style lock file beside the protected file, compatible
    /// with Perl's LockFile::Simple and liblockfile.
    Lockfile = "lockfile" {
        strategy: Guarded<LockFile>,
        target: Path,
        keys: [format, ext, nfs],
        abilities: [Prolong, Cooldown, Break, Commit, Files],
    }
    /// A directory created with `mkdir(2)`, as shell scripts do.
    Mkdir = "mkdir" {
        strategy: Guarded<Mkdir>,
        target: Path,
        keys: [],
        abilities: [Prolong, Cooldown, Break, Commit, Files],
    }
    /// The kernel's `flock(2)` on the target itself, as `flock(1)` takes it.
    /// It cannot go stale: the kernel ends it with its holder.
    Flock = "flock" {
        strategy: Flock,
        target: Path,
        keys: [],
        abilities: [Prolong, Cooldown, Commit, Files],
    }
    /// A symbolic link whose target names the owner and whose mtime is the
    /// expiry.
    Symlink = "symlink" {
        strategy: Guarded<Symlink>,
        target: Path,
        keys: [],
        abilities: [Prolong, Cooldown, Break, Commit, Files],
    }
    /// A lease file: owner, expiry and fence rewritten in place under an
    /// open-file-description lock.
    Lease = "lease" {
        strategy: Lease,
        target: Path,
        keys: [signal],
        abilities: [Prolong, Cooldown, Break, Commit, Files],
    }
    /// An append-only queue file: first come, first served.
    Toplock = "toplock" {
        strategy: Toplock,
        target: Path,
        keys: [],
        abilities: [Prolong, Cooldown, Break, Queue, Commit, Files],
    }
    /// A lease in a shared mapping of a small file, changed under a word of
    /// that page and woken by a futex: for the processes of one
    /// user on one host that want the cheapest lock.
    Shm = "shm" {
        strategy: Shm,
        target: Path,
        keys: [signal],
        abilities: [Prolong, Cooldown, Break, Commit, Files, OwnWake],
    }
    /// A lease on a Redis server, for processes on several hosts: one Lua
    /// script per operation, waiters queued and woken by the server.
    Redis = "redis" {
        strategy: Redis,
        target: Url,
        keys: [replicas],
        abilities: [Prolong, Cooldown, Break, Queue, TimedAcquire],
    }
    /// A lock on a server that keeps no file of this host and waits for
    /// it inside one call, for the handle's own unit tests; it reaches no
    /// server.
    #[cfg(test)]
    NoServer = "test-net" {
        strategy: no_server::NoServer,
        target: Url,
        keys: [],
        abilities: [TimedAcquire],
    }
    /// The template for a new strategy; built only with the
    /// `example-scheme` feature, to prove that an entry here is all the
    /// test suites and the benchmarks need.
    #[cfg(feature = "example-scheme")]
    Example = "example" {
        strategy: Guarded<Example>,
        target: Path,
        keys: [],
        abilities: [Prolong, Cooldown, Break, Commit, Files, OwnWake],
    }
}

/// The strategy of the `test-net` scheme: what the handle does with a lock
/// that names a server and keeps no file, without a server.
#[cfg(test)]
mod no_server {
    use core::time::Duration;

    use crate::error::{Contention, Error};
    use crate::owner::Nonce;
    use crate::record::Record;
    use crate::spec::{Spec, Target};
    use crate::strategy::{Context, Inspection, ReleaseOutcome, Strategy, Taken};
    use crate::trust::Sharing;

    /// Always busy: no server answers. Counts how it was asked.
    #[derive(Debug)]
    pub struct NoServer {
        /// Calls of `try_acquire`.
        pub tries: u32,
        /// Calls of `acquire_until`, each of which waited out its deadline.
        pub waits: u32,
    }

    impl crate::strategy::TimedAcquire for NoServer {
        fn acquire_until(&mut self, cx: &Context<'_>, _: Nonce, _: Option<Duration>) -> Result<Taken, Error> {
            self.waits += 1;
            crate::sys::sleep(cx.deadline.remaining_from(crate::clock::MonoTime::now()));
            Err(Error::Busy(Contention::Raced))
        }
    }

    impl Strategy for NoServer {
        fn open(spec: &Spec, _: Sharing) -> Result<NoServer, Error> {
            match spec.target() {
                Target::Url(_) => Ok(NoServer { tries: 0, waits: 0 }),
                Target::Path(_) => Err(Error::NotHeld),
            }
        }

        fn try_acquire(&mut self, _: &Context<'_>, _: Nonce, _: Option<Duration>) -> Result<Taken, Error> {
            self.tries += 1;
            Err(Error::Busy(Contention::Raced))
        }

        fn release(&mut self, _: &Context<'_>, _: &Record) -> Result<ReleaseOutcome, Error> {
            Err(Error::NotHeld)
        }

        fn inspect(&mut self, _: &Context<'_>) -> Result<Inspection, Error> {
            Ok(Inspection { holder: None, last_fence: 0, cooldown_until: None, queue_length: None })
        }
    }
}

/// What a scheme's target is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// A file system path (percent-decoded).
    Path,
    /// A network address and a key:
    /// `//[user[:password]@]host[:port][/db]/key`.
    Url,
}

/// What a lock may be able to do beyond taking, releasing and inspecting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ability {
    /// Move a held lock's expiry ([`crate::strategy::Prolong`]).
    Prolong,
    /// Keep a released lock closed for a while ([`crate::strategy::Cooldown`]).
    Cooldown,
    /// Take a lock from a holder judged stale, or from any holder on an
    /// operator's order ([`crate::strategy::Break`]). A lock without it
    /// never goes stale: its holder keeps it for as long as it lives.
    Break,
    /// Keep a place in a queue between attempts, given up when the caller
    /// stops waiting ([`crate::strategy::Queue`]).
    Queue,
    /// Run an action at a moment when nobody can take the lock over
    /// ([`crate::strategy::Commit`]).
    Commit,
    /// Keep the lock in files on this host's file systems, which can be
    /// named ([`crate::strategy::Files`]).
    Files,
    /// Wake its waiters itself when the lock changes hands
    /// ([`crate::strategy::OwnWake`]).
    OwnWake,
    /// Wait for the lock inside one call, until a deadline
    /// ([`crate::strategy::TimedAcquire`]).
    TimedAcquire,
}

impl Ability {
    /// Every ability, for tables and tests.
    pub const ALL: &'static [Ability] = &[
        Ability::Prolong,
        Ability::Cooldown,
        Ability::Break,
        Ability::Queue,
        Ability::Commit,
        Ability::Files,
        Ability::OwnWake,
        Ability::TimedAcquire,
    ];

    /// What the ability lets a caller do, for a message: "this lock cannot
    /// {what}".
    pub fn what(self) -> &'static str {
        match self {
            Ability::Prolong => "be prolonged",
            Ability::Cooldown => "stay closed after a release (cooldown)",
            Ability::Break => "be broken: it ends only with its holder",
            Ability::Queue => "keep a place in a queue",
            Ability::Commit => "run a commit while it is held",
            Ability::Files => "name a file: it keeps none",
            Ability::OwnWake => "wake its waiters",
            Ability::TimedAcquire => "wait inside one call",
        }
    }

    const fn bit(self) -> u16 {
        1 << self as u16
    }
}

/// A set of abilities, as a scheme's registry entry lists them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbilitySet(u16);

impl AbilitySet {
    const fn of(abilities: &[Ability]) -> AbilitySet {
        let mut bits = 0;
        let mut i = 0;
        while i < abilities.len() {
            bits |= abilities[i].bit();
            i += 1;
        }
        AbilitySet(bits)
    }

    /// Whether `ability` is in the set.
    pub const fn contains(self, ability: Ability) -> bool {
        self.0 & ability.bit() != 0
    }
}

impl Scheme {
    /// Whether this scheme's locks can do `ability`.
    pub const fn supports(self, ability: Ability) -> bool {
        self.abilities().contains(ability)
    }

    /// `Ok` if this scheme's locks can do `ability`, otherwise the error
    /// every caller gets for it.
    pub fn require(self, ability: Ability) -> Result<(), Error> {
        if self.supports(ability) {
            Ok(())
        } else {
            Err(Error::Unsupported(crate::error::Unsupported::Ability { scheme: self, ability }))
        }
    }

    /// Whether a lock of this scheme can go stale and be broken by others:
    /// every scheme that can [`Break`](Ability::Break). A `flock` lock lasts
    /// exactly as long as its holder's descriptor, and nobody can take it
    /// from a live holder.
    pub const fn breaks_stale_locks(self) -> bool {
        self.supports(Ability::Break)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{SpecErrorKind, Unsupported};
    use crate::Lock;

    #[test]
    fn every_scheme_is_found_by_its_name_and_no_two_share_one() {
        for (i, &scheme) in Scheme::ALL.iter().enumerate() {
            assert_eq!(Scheme::from_name(scheme.name().as_bytes()), Some(scheme));
            assert!(Scheme::ALL[..i].iter().all(|other| other.name() != scheme.name()), "{scheme:?}");
        }
        assert_eq!(Scheme::from_name(b"Lockfile"), None, "names are exact");
    }

    #[test]
    fn a_missing_ability_is_refused_before_any_file_is_touched() {
        // The directory does not exist: an answer that came from the
        // strategy would be about the file; this one is the registry's.
        let mut lock = Lock::open("flock:/nonexistent-lockcore-registry-test/x").unwrap();
        let refused = Error::Unsupported(Unsupported::Ability { scheme: Scheme::Flock, ability: Ability::Break });
        assert_eq!(lock.break_lock(), Err(refused));
        assert!(!Scheme::Flock.breaks_stale_locks());
        for &scheme in Scheme::ALL {
            let keeps_files = scheme.target_kind() == TargetKind::Path;
            assert_eq!(scheme.supports(Ability::Files), keeps_files, "{scheme:?}");
            assert_eq!(scheme.breaks_stale_locks(), scheme.supports(Ability::Break));
        }
    }

    #[test]
    fn refusals_list_what_the_registry_declares() {
        use core::fmt::Write;
        let mut text = crate::text::FixedText::<512>::default();
        let e = crate::Spec::parse(b"mkdir:/x?signal=TERM").unwrap_err();
        assert_eq!(e.kind, SpecErrorKind::UnknownKey);
        assert_eq!(e.reason, "unknown option; mkdir takes ttl, hold, stale, mode, fair, window, warn, wmin, wafter");
        let e = crate::Spec::parse(b"lease:/x?format=%25f").unwrap_err();
        assert_eq!(
            e.reason,
            "unknown option; lease takes ttl, hold, stale, mode, fair, window, warn, wmin, wafter, signal"
        );
        assert!(crate::Spec::parse(b"lease:/x?signal=TERM").is_ok());
        let e = crate::Spec::parse(b"nosuch:/x").unwrap_err();
        write!(text, "{e}").unwrap();
        let mut expected = crate::text::FixedText::<512>::default();
        write!(expected, "lock spec scheme 'nosuch': unknown scheme; this build has").unwrap();
        for (i, scheme) in Scheme::ALL.iter().enumerate() {
            write!(expected, "{}{}", if i == 0 { " " } else { ", " }, scheme.name()).unwrap();
        }
        assert_eq!(text.as_bytes(), expected.as_bytes());
    }

    /// A lock that keeps no file (a network lock) has no path, cannot
    /// commit or be broken, and says so before anything is tried; its
    /// messages name the server and the key, never the password.
    #[test]
    fn a_lock_without_files_answers_for_what_it_lacks() {
        use core::fmt::Write;
        let mut lock = Lock::open("test-net://cron:hunter2@cache.internal:6379/2/report").unwrap();
        let no_files = Error::Unsupported(Unsupported::Ability { scheme: Scheme::NoServer, ability: Ability::Files });
        assert_eq!(lock.path().err(), Some(no_files));
        assert_eq!(lock.guard_path(), None);
        let refused = lock.break_lock().unwrap_err();
        assert_eq!(
            refused,
            Error::Unsupported(Unsupported::Ability { scheme: Scheme::NoServer, ability: Ability::Break })
        );
        let mut text = crate::text::FixedText::<512>::default();
        write!(text, "{}", lock.describe(&refused)).unwrap();
        let shown = core::str::from_utf8(text.as_bytes()).unwrap();
        assert_eq!(
            shown,
            "test-net://cache.internal:6379/2/report: a test-net lock cannot be broken: it ends only with its holder"
        );
        let temp = crate::sys::CPath::from_parts(&[b"/tmp/x.new"]).unwrap();
        let target = crate::sys::CPath::from_parts(&[b"/tmp/x"]).unwrap();
        // Refused for what the scheme lacks, before the handle is asked
        // whether it holds anything.
        assert_eq!(lock.commit_file(&temp, &target), Err(no_files));
        let no_prolong = Unsupported::Ability { scheme: Scheme::NoServer, ability: Ability::Prolong };
        assert_eq!(lock.prolong(None), Err(Error::Unsupported(no_prolong)));
        let no_cooldown = Unsupported::Ability { scheme: Scheme::NoServer, ability: Ability::Cooldown };
        assert_eq!(lock.release(core::time::Duration::from_secs(1)), Err(Error::Unsupported(no_cooldown)));
        assert_eq!(lock.release(core::time::Duration::ZERO), Err(Error::NotHeld));
        assert_eq!(lock.try_acquire().map(|_| ()), Err(Error::Busy(crate::error::Contention::Raced)));
        assert!(matches!(crate::Spec::parse(b"test-net:/a/path").unwrap_err().kind, SpecErrorKind::BadUrl));
    }

    /// A scheme that waits inside one call is waited on there: `acquire`
    /// calls its timed acquire, in slices of at most `ATTEMPT_PATIENCE`,
    /// until the budget is spent, and never its `try_acquire`;
    /// `try_acquire` never waits.
    #[test]
    fn a_strategy_that_waits_inside_one_call_is_waited_on_there() {
        use crate::registry::AnyStrategy;
        use core::time::Duration;
        let mut lock = Lock::open("test-net://h/k").unwrap();
        let budget = Duration::from_millis(600);
        let started = crate::clock::MonoTime::now();
        let waited = lock.acquire(Some(budget));
        assert!(matches!(waited, Err(Error::Timeout(_))), "{waited:?}");
        assert!(crate::clock::MonoTime::now().since(started) >= budget);
        let AnyStrategy::NoServer(strategy) = lock.strategy_for_tests() else { panic!("not test-net") };
        let (tries, waits) = (strategy.tries, strategy.waits);
        assert_eq!(tries, 0, "acquire polled try_acquire");
        // 600 ms in slices of 250 ms at most: three slices at least.
        assert!(waits >= 3, "{waits} timed attempts");
        assert!(lock.try_acquire().is_err());
        let AnyStrategy::NoServer(strategy) = lock.strategy_for_tests() else { panic!("not test-net") };
        assert_eq!((strategy.tries, strategy.waits), (1, waits), "try_acquire made one untimed attempt");
    }
}
