//! `example`: the smallest whole strategy, and the template for a new one.
//!
//! Built only with the `example-scheme` feature. Its lock is a file at the
//! target holding this library's record and nothing else, made complete
//! under a helper name and `link(2)`ed into place; [`Guarded`] supplies the
//! guard, the fences, the cooldown and the judging of stale locks. It
//! wakes its own waiters ([`OwnWake`]): an [`Inotify`] watch on the lock's
//! name, made when it is first needed, or [`Sleep`] where none can be. Its
//! registry entry ([`crate::registry`]) is all the rest of the workspace
//! needs: the test suites, the C tests, the contention report and the demo
//! pick it up from [`crate::Scheme::ALL`], which a test checks.
//!
//! [`Guarded`]: crate::strategy::guarded::Guarded

use crate::clock::WallTime;
use crate::error::{Error, FileRole};
use crate::files::{self, create_helper_file};
use crate::record::{parse_lock_file, LockFileContent, Record, Stamp, Unrecognised, RECORD_CAPACITY};
use crate::spec::Spec;
use crate::strategy::guarded::Guarded;
use crate::strategy::guarded::LockStore;
use crate::strategy::{Context, Found, Holding, OwnWake};
use crate::sys::CPath;
use crate::wait::{Inotify, Sleep, WakeSource};

/// The lock file of an `example` lock: the target itself.
#[derive(Debug)]
pub struct Example {
    lock: CPath,
    /// Made at the first wait, when the lock's directory surely exists.
    wake: Option<Waking>,
}

/// The wake source of an `example` lock's waiters.
// Inline, like every buffer here: nothing is allocated.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Waking {
    Inotify(Inotify),
    /// No inotify instance is left, or the directory cannot be watched.
    Sleep(Sleep),
}

impl OwnWake for Guarded<Example> {
    fn wake_source(&mut self) -> &mut dyn WakeSource {
        let store = self.store_mut();
        let lock = &store.lock;
        match store.wake.get_or_insert_with(|| Inotify::new(lock).map_or(Waking::Sleep(Sleep), Waking::Inotify)) {
            Waking::Inotify(inotify) => inotify,
            Waking::Sleep(sleep) => sleep,
        }
    }
}

impl LockStore for Example {
    fn open(spec: &Spec) -> Result<Example, Error> {
        Ok(Example { lock: spec.file_target()?.clone(), wake: None })
    }

    fn read(&self, cx: &Context<'_>) -> Result<Option<Found>, Error> {
        let mut bytes = [0u8; RECORD_CAPACITY + 1];
        let Some((stat, n)) = files::read_lock_file(&self.lock, cx.sharing, &mut bytes)? else { return Ok(None) };
        // No peer writes this format: anything but our record is no lock.
        let holding = match parse_lock_file(&bytes[..n]) {
            Ok(LockFileContent::Ours(record)) => Holding::Ours(record),
            Err(Unrecognised::Corrupt(kind)) => Holding::Corrupt(kind),
            Ok(_) | Err(Unrecognised::NotALock) => return Err(Error::not_a_lock(FileRole::Lock)),
        };
        Ok(Some(Found { holding, written_at: WallTime::from_unix_nanos(stat.mtime_ns), stat }))
    }

    fn create(&self, cx: &Context<'_>, record: &Record) -> Result<Option<Record>, Error> {
        let content = record.encode_lock_file(Stamp::Pid);
        let linked = files::link_lock_file(&self.lock, cx.sharing.record_mode(), content.as_bytes())?;
        Ok(linked.then_some(*record))
    }

    fn replace(&self, cx: &Context<'_>, found: &Found, record: &Record) -> Result<bool, Error> {
        let content = record.encode_lock_file(Stamp::Pid);
        let helper = create_helper_file(&self.lock, cx.sharing.record_mode(), content.as_bytes())?;
        files::replace_judged(&self.lock, &found.stat, &helper)
    }

    fn remove(&self, _cx: &Context<'_>, found: &Found) -> Result<bool, Error> {
        files::unlink_judged(&self.lock, &found.stat)
    }

    fn path(&self) -> &CPath {
        &self.lock
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::AnyStrategy;
    use crate::Lock;
    use core::time::Duration;
    use std::format;

    #[test]
    fn acquire_waits_on_the_strategys_own_wake_source() {
        let dir = std::env::temp_dir().join(format!("lockcore-example-wake-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let spec = format!("example:{}/lock", dir.display());
        let mut holder = Lock::open(&spec).unwrap();
        holder.try_acquire().unwrap();
        let waiter = std::thread::spawn(move || {
            let mut lock = Lock::open(&spec).unwrap();
            let got = lock.acquire(Some(Duration::from_secs(20))).map(|_| ());
            let AnyStrategy::Example(strategy) = lock.strategy_for_tests() else { panic!("not an example lock") };
            (got, matches!(strategy.store_mut().wake, Some(Waking::Inotify(_))))
        });
        // The waiter's watch exists once it has found the lock busy and
        // waits: released only then, the release is what must wake it.
        while inotify_instances() == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        holder.release(Duration::ZERO).unwrap();
        let (got, watched) = waiter.join().unwrap();
        assert_eq!(got, Ok(()), "the waiter gets the lock once it is released");
        assert!(watched, "the waiter waited on the strategy's inotify watch, not on Sleep");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The inotify instances this process has open.
    fn inotify_instances() -> usize {
        let fds = std::fs::read_dir("/proc/self/fd").unwrap();
        fds.flatten()
            .filter(|fd| std::fs::read_link(fd.path()).is_ok_and(|to| to.ends_with("anon_inode:inotify")))
            .count()
    }
}
