//! The wake source a waiter waits on between attempts, through `acquire`,
//! on every scheme: the inotify watch (`lockcore::wait::Inotify`), or, for
//! a scheme that wakes its own waiters (`Ability::OwnWake`), that scheme's
//! own source, which is what `acquire` waits on for it.
//!
//! The holder lets go while the waiter is between an attempt that found
//! the lock held and its wait: the window that arming the source before
//! each attempt is there for. The wait is woken, not timed out, and the
//! attempt right after it gets the lock. And a waiter's own attempts do
//! not wake it, or it would poll as fast as it can: only `toplock`'s first,
//! which joins the queue and so changes the queue file, wakes it, once.
//!
//! These are the waits between attempts at the lock itself, which a
//! waiter in the turnstile makes only once it is the head: the specs say
//! `fair=0`, so that every wait is one.
//!
//! The watched path is the lock's own, but for `flock`: letting go of its
//! kernel lock changes no file, so the waiter watches its state file,
//! which the holder rewrites just before. A `shm` lock is changed through
//! a shared mapping, which inotify never reports: its release moves a
//! futex word in its file on and wakes the sleepers on it, and its waiter
//! sleeps there (a source of its own, opened on the same lock as the
//! waiter's handle).

mod common;

use std::time::Duration;

use common::*;
use lockcore::wait::{Inotify, Wake, WakeSource};
use lockcore::{Ability, CPath, Sharing, Spec, Strategy};
use lockcore::{Error, Lock, ReleaseOutcome};

fn watched(scheme: Scheme, lock: &Lock) -> CPath {
    match scheme {
        Scheme::Flock => lock.guard_path().expect("flock keeps a state file").clone(),
        _ => lock.path().expect("a lock that keeps files").clone(),
    }
}

/// What a waiter for `lock` (of `spec`) waits on between attempts: the
/// scheme's own wake source where it has one, as `acquire` would, opened
/// on the same lock; an inotify watch otherwise.
fn wake_source(scheme: Scheme, spec: &str, lock: &Lock) -> Box<dyn WakeSource> {
    if !scheme.supports(Ability::OwnWake) {
        return Box::new(Inotify::new(&watched(scheme, lock)).unwrap());
    }
    let parsed = Spec::parse(spec.as_bytes()).unwrap();
    let sharing = Sharing::new(parsed.options.mode);
    match scheme {
        Scheme::Shm => Box::new(lockcore::strategy::shm::Shm::open(&parsed, sharing).unwrap()),
        other => panic!("{}: this test opens each scheme's own wake source; add this scheme's", other.name()),
    }
}

/// Waits on a waiter's wake source, keeping what each wait answered; at
/// the wait number `release_at` (from 1), lets `holder` go first.
struct Noting<'a> {
    inner: Box<dyn WakeSource>,
    holder: Option<&'a mut Lock>,
    release_at: usize,
    answers: Vec<Wake>,
}

impl WakeSource for Noting<'_> {
    fn arm(&mut self) -> Result<(), Error> {
        self.inner.arm()
    }

    fn wait(&mut self, timeout: Duration) -> Wake {
        if self.answers.len() + 1 == self.release_at {
            let holder = self.holder.take().expect("a holder to let go");
            assert_eq!(holder.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
        }
        let answer = self.inner.wait(timeout);
        self.answers.push(answer);
        answer
    }
}

#[test]
fn a_release_between_an_attempt_and_the_wait_wakes_the_waiter() {
    each_file_scheme("inotify-release", |scheme, dir| {
        let spec = scheme.spec(dir.path(), "ttl=1h&fair=0");
        let mut holder = open_lock(&spec);
        holder.try_acquire().unwrap();
        let mut waiter = open_lock(&spec);
        let inner = wake_source(scheme, &spec, &waiter);
        // At the second wait, past `toplock`'s own wake-up at the first.
        let mut wake = Noting { inner, holder: Some(&mut holder), release_at: 2, answers: Vec::new() };
        let acquired = waiter.acquire_with(Some(PATIENCE), &mut wake, None);
        assert!(acquired.is_ok(), "{spec}: {acquired:?}");
        assert_eq!(wake.answers.len(), 2, "{spec}: taken at the attempt right after the release: {:?}", wake.answers);
        assert_eq!(wake.answers[1], Wake::Woken, "{spec}: the release woke the waiter");
        assert_eq!(waiter.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    });
}

#[test]
fn a_waiters_own_attempts_do_not_wake_it() {
    each_file_scheme("inotify-quiet", |scheme, dir| {
        let spec = scheme.spec(dir.path(), "ttl=1h&fair=0");
        let mut holder = open_lock(&spec);
        holder.try_acquire().unwrap();
        let mut waiter = open_lock(&spec);
        let inner = wake_source(scheme, &spec, &waiter);
        let mut wake = Noting { inner, holder: None, release_at: 0, answers: Vec::new() };
        let result = waiter.acquire_with(Some(Duration::from_millis(100)), &mut wake, None);
        assert!(matches!(result, Err(Error::Timeout(_))), "{spec}: {result:?}");
        let woken: Vec<usize> =
            wake.answers.iter().enumerate().filter(|(_, &a)| a == Wake::Woken).map(|(i, _)| i).collect();
        let expected: &[usize] = if scheme == Scheme::Toplock { &[0] } else { &[] };
        assert_eq!(woken, expected, "{spec}: the waits that were woken, of {}", wake.answers.len());
        assert_eq!(holder.release(Duration::ZERO), Ok(ReleaseOutcome::Released));
    });
}
