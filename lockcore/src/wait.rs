//! Waiting for a busy lock: a deadline, backoff with jitter, warnings, and a
//! pluggable source of wake-ups.
//!
//! The wait budget is a deadline on the monotonic clock, not a retry count, so
//! slow attempts do not stretch it and clock steps do not shorten it. Between
//! attempts the waiter asks a [`WakeSource`] to block until the lock may have
//! changed or the backoff delay passes, whichever is first. [`Sleep`] only
//! sleeps; an event source (inotify on the lock's directory, a futex) plugs in
//! here without any change to the strategies, which only ever offer
//! `try_acquire`.

use core::time::Duration;

use crate::clock::MonoTime;
use crate::error::Error;

/// Blocks a waiter until the lock may have changed, or `timeout` passes.
pub trait WakeSource {
    fn wait(&mut self, timeout: Duration);
}

/// The wake source that knows of no events: it sleeps for the whole timeout.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sleep;

impl WakeSource for Sleep {
    fn wait(&mut self, timeout: Duration) {
        crate::sys::sleep(timeout);
    }
}

/// Exponential backoff with "equal jitter": each delay is drawn from
/// `[d/2, d)`, and `d` doubles from `FIRST` up to `LONGEST`. The jitter keeps
/// waiters that started together from retrying in lock step.
#[derive(Clone, Debug)]
pub struct Backoff {
    next: Duration,
    rng: u64,
}

impl Backoff {
    pub const FIRST: Duration = Duration::from_micros(100);
    pub const LONGEST: Duration = Duration::from_millis(10);

    /// `seed` should differ between waiters; any value but zero works.
    pub fn new(seed: u64) -> Backoff {
        Backoff { next: Self::FIRST, rng: seed | 1 }
    }

    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self.next;
        self.next = (self.next * 2).min(Self::LONGEST);
        let half = ceiling / 2;
        let span = ceiling.as_nanos() as u64 - half.as_nanos() as u64;
        half + Duration::from_nanos(self.random() % span.max(1))
    }

    /// xorshift64*: plenty for jitter, and no state beyond one word.
    fn random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// LockFile::Simple's warnings: the first after `first` of waiting, then one
/// every `every`, each told how long the caller has waited so far.
pub struct Warnings<'a> {
    pub first: Duration,
    pub every: Duration,
    pub notify: &'a mut dyn FnMut(Duration),
}

impl core::fmt::Debug for Warnings<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Warnings").field("first", &self.first).field("every", &self.every).finish()
    }
}

/// Retries `attempt` until it succeeds, fails with something other than
/// [`Error::Busy`], or `deadline` passes ([`Error::Timeout`], with what
/// stood in the way at the last attempt). `None` waits for as long as it
/// takes. Each attempt is itself given a deadline no later than this one,
/// so that the whole wait ends by it.
pub fn wait_for<T>(
    deadline: Option<MonoTime>,
    wake: &mut dyn WakeSource,
    mut warnings: Option<Warnings<'_>>,
    seed: u64,
    mut attempt: impl FnMut() -> Result<T, Error>,
) -> Result<T, Error> {
    let start = MonoTime::now();
    let mut next_warning = warnings.as_ref().map(|w| start.saturating_add(w.first));
    let mut backoff = Backoff::new(seed);
    loop {
        let contention = match attempt() {
            Err(Error::Busy(why)) => why,
            other => return other,
        };
        let now = MonoTime::now();
        if let (Some(w), Some(at)) = (warnings.as_mut(), next_warning) {
            if now >= at {
                (w.notify)(now.since(start));
                next_warning = Some(now.saturating_add(w.every));
            }
        }
        let mut delay = backoff.next_delay();
        if let Some(deadline) = deadline {
            if now >= deadline {
                return Err(Error::Timeout(contention));
            }
            delay = delay.min(deadline.remaining_from(now));
        }
        if let Some(at) = next_warning {
            // Wake for the warning too, so it is not late by a whole backoff.
            delay = delay.min(at.remaining_from(now).max(Duration::from_micros(1)));
        }
        wake.wait(delay);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Contention;

    struct Recorder {
        total: Duration,
        calls: u32,
    }

    impl WakeSource for Recorder {
        fn wait(&mut self, timeout: Duration) {
            self.total += timeout;
            self.calls += 1;
            crate::sys::sleep(timeout);
        }
    }

    #[test]
    fn backoff_grows_to_its_cap_and_stays_jittered() {
        let mut b = Backoff::new(42);
        let mut last_ceiling = Backoff::FIRST;
        for _ in 0..20 {
            let d = b.next_delay();
            assert!(d >= last_ceiling / 2 && d < last_ceiling.max(Duration::from_nanos(1)), "{d:?}");
            last_ceiling = (last_ceiling * 2).min(Backoff::LONGEST);
        }
        let a: [Duration; 8] = core::array::from_fn(|_| b.next_delay());
        assert!(a.windows(2).any(|w| w[0] != w[1]), "jitter must vary delays");
    }

    #[test]
    fn budget_is_a_deadline_not_a_retry_count() {
        let mut wake = Recorder { total: Duration::ZERO, calls: 0 };
        let start = MonoTime::now();
        let deadline = Some(start.saturating_add(Duration::from_millis(30)));
        let r: Result<(), Error> = wait_for(deadline, &mut wake, None, 7, || Err(Error::Busy(Contention::Raced)));
        assert_eq!(r, Err(Error::Timeout(Contention::Raced)), "the timeout says what stood in the way");
        assert!(MonoTime::now().since(start) >= Duration::from_millis(30));
        assert!(wake.total <= Duration::from_millis(30));
        assert!(wake.calls > 1);
    }

    #[test]
    fn success_and_hard_errors_end_the_wait() {
        let mut tries = 0;
        let r = wait_for(None, &mut Sleep, None, 1, || {
            tries += 1;
            if tries < 3 {
                Err(Error::Busy(Contention::GuardHeld))
            } else {
                Ok(tries)
            }
        });
        assert_eq!(r, Ok(3));
        let r: Result<(), Error> = wait_for(None, &mut Sleep, None, 1, || Err(Error::NotHeld));
        assert_eq!(r, Err(Error::NotHeld));
    }

    #[test]
    fn warnings_come_after_first_and_then_every() {
        let mut seen = [Duration::ZERO; 8];
        let mut count = 0;
        let mut notify = |waited: Duration| {
            if count < seen.len() {
                seen[count] = waited;
            }
            count += 1;
        };
        let warnings =
            Warnings { first: Duration::from_millis(20), every: Duration::from_millis(30), notify: &mut notify };
        let deadline = Some(MonoTime::now().saturating_add(Duration::from_millis(95)));
        let r: Result<(), Error> =
            wait_for(deadline, &mut Sleep, Some(warnings), 3, || Err(Error::Busy(Contention::GuardHeld)));
        assert_eq!(r.map_err(|e| e.kind()), Err(crate::error::ErrorKind::Timeout));
        // Due at 20, 50 and 80 ms; a loaded machine may run late, but never
        // early, and never more often than `every`.
        assert!((1..=3).contains(&count), "{count} warnings: {seen:?}");
        assert!(seen[0] >= Duration::from_millis(20));
        for pair in seen[..count].windows(2) {
            assert!(pair[1] >= pair[0] + Duration::from_millis(30), "{seen:?}");
        }
    }
}
