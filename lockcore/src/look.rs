//! How long a look at a path is believed.
//!
//! A handle that keeps a file open or mapped between calls must notice when
//! its path comes to name another file, or the file is cut short or its
//! bits change: each is a system call on the path, and on a lock taken and
//! let go in a loop that call is most of what an uncontended cycle costs.
//! So a look is believed for [`LOOK_BELIEVED_FOR`], and the next call
//! after that looks again.
//!
//! Nothing that trust lets through is in anyone else's power: the lock's
//! directory is judged to let no one but the lock's users remove or rename
//! its files ([`crate::trust`]), and its files to let no one else write
//! them. What it lets through is the lock's own users removing, replacing
//! or cutting short a file in use, which a look at every call cannot stop
//! either (the change can always come just after the look); it only makes
//! the next call notice a little later.

use core::time::Duration;

use crate::clock::MonoTime;

/// How long a handle believes its last look at the path of a file it keeps
/// open or mapped (the `shm` lock's file, the turnstile beside a lock):
/// a change to that file is noticed by the first call after this long.
pub const LOOK_BELIEVED_FOR: Duration = Duration::from_millis(1);

/// When a path was last seen to name what a handle holds open; none until
/// it has been.
#[derive(Clone, Copy, Debug, Default)]
pub struct RecentLook(Option<MonoTime>);

impl RecentLook {
    /// A look made `now`.
    pub fn made(now: MonoTime) -> RecentLook {
        RecentLook(Some(now))
    }

    /// Whether the look, if there was one, is still believed at `now`.
    pub fn is_believed(self, now: MonoTime) -> bool {
        // A look "made" after `now` is one no clock of this process can
        // have read: not believed.
        self.0.is_some_and(|at| at <= now && now.since(at) < LOOK_BELIEVED_FOR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_look_is_believed_for_its_time_and_no_longer() {
        let at = MonoTime::EPOCH.saturating_add(Duration::from_secs(5));
        let look = RecentLook::made(at);
        assert!(look.is_believed(at));
        assert!(look.is_believed(at.saturating_add(LOOK_BELIEVED_FOR - Duration::from_nanos(1))));
        assert!(!look.is_believed(at.saturating_add(LOOK_BELIEVED_FOR)));
        assert!(!look.is_believed(MonoTime::EPOCH), "a look from the future");
        assert!(!RecentLook::default().is_believed(at), "no look yet");
    }
}
