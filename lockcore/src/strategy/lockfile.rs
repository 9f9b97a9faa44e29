//! `lockfile`: a lock file holding the owner record, shared with Perl's
//! LockFile::Simple.
//!
//! The lock file is `%f.lock` by default (options `ext` and `format` as in
//! LockFile::Simple). It is created read-only and complete: the record is
//! written to `<lock>.tmp` first and then `link(2)`ed into place, so a reader
//! never sees a file without its record, and `link` fails with `EEXIST` on
//! anything already there, a planted symlink included. On NFS, where a
//! `link` reply can be lost, success is confirmed by the temp file's link
//! count of 2 (liblockfile's check). Every change happens under the guard
//! (see [`crate::guard`]); release is one `unlink`, prolong one `rename` of a
//! new record over the old.
//!
//! A LockFile::Simple process does not take the guard. It sees our lock file
//! and waits, and we see its stamp (`PID` or `PID:HOST`) and wait, so the two
//! exclude each other; but Perl's own stale-breaking keeps its documented race.

use core::time::Duration;

use crate::error::Error;
use crate::guard::{GuardFile, Patience};
use crate::owner::Nonce;
use crate::record::{Record, Stamp};
use crate::spec::{ShortText, Spec};
use crate::strategy::{
    commit_if_current, ignore_missing, read_record, with_suffix, write_new_file, CommitOutcome, Context, Inspection,
    ProlongOutcome, ReleaseOutcome, Strategy, CREATE_NEW_FLAGS, READ_RECORD_FLAGS,
};
use crate::sys::{self, CPath, Errno};

/// Lock file permissions: read-only, as LockFile::Simple's umask 0333 makes them.
const DEFAULT_MODE: u32 = 0o444;

#[derive(Debug)]
pub struct LockFile {
    files: Files,
    guard: GuardFile,
}

/// The lock's paths and how its files are made; apart from the guard so that
/// both can be used while the guard is held.
#[derive(Debug)]
struct Files {
    lock: CPath,
    temp: CPath,
    stamp: Stamp,
    mode: libc::mode_t,
}

impl LockFile {
    pub fn new(spec: &Spec, pid: i32) -> Result<LockFile, Error> {
        let options = &spec.options;
        let lock = match (&options.format, &options.ext) {
            (Some(format), _) => expand_format(format, spec.target(), pid)?,
            (None, Some(ext)) => with_suffix(spec.target(), ext.as_bytes())?,
            (None, None) => with_suffix(spec.target(), b".lock")?,
        };
        Ok(LockFile {
            guard: GuardFile::new(crate::guard::guard_path(&lock)?, crate::guard::mode_for(options.mode)),
            files: Files {
                temp: with_suffix(&lock, b".tmp")?,
                lock,
                stamp: if options.nfs { Stamp::PidHost } else { Stamp::Pid },
                mode: options.mode.unwrap_or(DEFAULT_MODE),
            },
        })
    }

    /// The lock file's path.
    pub fn path(&self) -> &CPath {
        &self.files.lock
    }

    pub fn guard_path(&self) -> &CPath {
        self.guard.path()
    }
}

impl Files {
    fn read(&self) -> Result<Option<crate::strategy::Found>, Error> {
        read_record(|| sys::open(&self.lock, READ_RECORD_FLAGS, 0), Some(&self.lock))
    }

    /// Writes `record` complete into the temp file. The guard is held, so no
    /// other process of ours uses the temp name; a leftover is a crashed
    /// writer's and is removed first.
    fn write_temp(&self, record: &Record) -> Result<(), Error> {
        ignore_missing(sys::unlink(&self.temp))?;
        write_new_file(
            || sys::open(&self.temp, CREATE_NEW_FLAGS, self.mode),
            record.encode(self.stamp).as_bytes(),
            || sys::unlink(&self.temp),
        )
    }

    /// Links the finished temp file into place. `Ok(false)` if something
    /// else appeared there (a LockFile::Simple process does not take our guard).
    fn link_temp_into_place(&self) -> Result<bool, Error> {
        let linked = match sys::link(&self.temp, &self.lock) {
            Ok(()) => Ok(true),
            // Over NFS the reply to a link that succeeded can be lost and the
            // retransmission answer EEXIST; whether the lock path now names
            // our temp file's inode tells the truth either way (liblockfile
            // checks the link count, which another link could also raise).
            Err(e) => match (sys::lstat(&self.temp), sys::lstat(&self.lock)) {
                (Ok(temp), Ok(lock)) if temp.same_file(&lock) => Ok(true),
                _ if e == Errno::EEXIST => Ok(false),
                _ => Err(Error::from_path_errno(e)),
            },
        };
        let _ = sys::unlink(&self.temp);
        linked
    }
}

impl Strategy for LockFile {
    fn try_acquire(
        &mut self,
        cx: &Context<'_>,
        nonce: Nonce,
        expires: Option<crate::WallTime>,
    ) -> Result<Record, Error> {
        let mut guard = self.guard.lock(Patience::Attempt)?;
        let (renewed, expires) = cx.renewed_with(expires);
        let cx = &renewed;
        if guard.state.cooling_down(cx.now) {
            return Err(Error::Busy);
        }
        let stale = match self.files.read()? {
            Some(found) => {
                guard.state.raise_fence_to(&found);
                if !found.judge(cx)?.stale {
                    return Err(Error::Busy);
                }
                true
            }
            None => false,
        };
        // Drawn before a stale record goes: one forged with the largest
        // fence is refused while it is still there, not forgotten.
        let fence = guard.state.next_fence(cx.now)?;
        if stale {
            // Judged and removed inside one guard section: this is the exact
            // record that was judged stale, and no fresh one can replace it
            // in between.
            ignore_missing(sys::unlink(&self.files.lock))?;
        }
        // The fence is stored before the lock is created: a crash in between
        // skips a number, which is allowed, but never hands one out twice.
        guard.state.cooldown_until = None;
        guard.store()?;
        let record = Record { owner: *cx.me, nonce, fence, expires };
        self.files.write_temp(&record)?;
        if self.files.link_temp_into_place()? {
            Ok(record)
        } else {
            Err(Error::Busy)
        }
    }

    fn release(&mut self, cx: &Context<'_>, held: &Record, cooldown: Duration) -> Result<ReleaseOutcome, Error> {
        let mut guard = self.guard.lock(Patience::Change)?;
        let cx = &cx.renewed();
        let Some(on_disk) = self.files.read()?.and_then(|found| found.ours(held.nonce)) else {
            return Ok(ReleaseOutcome::Lost);
        };
        ignore_missing(sys::unlink(&self.files.lock))?;
        guard.start_cooldown(cx.now, cooldown)?;
        Ok(ReleaseOutcome::of_own(on_disk.expires, cx.now))
    }

    fn prolong(
        &mut self,
        cx: &Context<'_>,
        held: &Record,
        expires: Option<crate::WallTime>,
    ) -> Result<ProlongOutcome, Error> {
        let _guard = self.guard.lock(Patience::Change)?;
        let (renewed, expires) = cx.renewed_with(expires);
        let cx = &renewed;
        let Some(on_disk) = self.files.read()?.and_then(|found| found.ours(held.nonce)) else {
            return Ok(ProlongOutcome::Lost);
        };
        self.files.write_temp(&Record { expires, ..on_disk })?;
        // rename replaces the record in one step: readers see old or new.
        if let Err(e) = sys::rename(&self.files.temp, &self.files.lock) {
            let _ = sys::unlink(&self.files.temp);
            return Err(Error::from_path_errno(e));
        }
        Ok(ProlongOutcome::of_own(on_disk.expires, cx.now))
    }

    fn run_while_held(
        &mut self,
        cx: &Context<'_>,
        held: &Record,
        action: &mut dyn FnMut() -> Result<(), Error>,
    ) -> Result<CommitOutcome, Error> {
        let _guard = self.guard.lock(Patience::Change)?;
        let cx = &cx.renewed();
        commit_if_current(self.files.read()?.and_then(|found| found.ours(held.nonce)), cx.now, action)
    }

    fn inspect(&mut self, cx: &Context<'_>) -> Result<Inspection, Error> {
        let guard = self.guard.lock(Patience::Change)?;
        let cx = &cx.renewed();
        let holder = match self.files.read()? {
            Some(found) => Some(found.judge(cx)?),
            None => None,
        };
        Ok(guard.state.inspection(holder, cx.now))
    }

    fn break_lock(&mut self, _cx: &Context<'_>) -> Result<bool, Error> {
        let _guard = self.guard.lock(Patience::Change)?;
        match sys::unlink(&self.files.lock) {
            Ok(()) => Ok(true),
            Err(Errno::ENOENT) => Ok(false),
            Err(Errno::EISDIR) | Err(Errno::EPERM) if sys::lstat(&self.files.lock).is_ok_and(|st| st.is_dir()) => {
                Err(Error::NotALock)
            }
            Err(e) => Err(Error::from_path_errno(e)),
        }
    }
}

/// Expands LockFile::Simple's macros: `%f` the target, `%D` its directory,
/// `%F` its base name, `%p` the pid, `%%` a percent sign. The spec parser
/// has already refused any other macro.
fn expand_format(format: &ShortText, target: &CPath, pid: i32) -> Result<CPath, Error> {
    let mut out = CPath::empty();
    let mut pid_text = crate::text::FixedText::<12>::new();
    let _ = core::fmt::Write::write_fmt(&mut pid_text, format_args!("{pid}"));
    let bytes = format.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let piece: &[u8] = if bytes[i] == b'%' && i + 1 < bytes.len() {
            i += 1;
            match bytes[i] {
                b'f' => target.as_bytes(),
                b'D' => target.parent(),
                b'F' => target.file_name(),
                b'p' => pid_text.as_bytes(),
                _ => b"%",
            }
        } else {
            &bytes[i..=i]
        };
        out.push(piece).map_err(|_| crate::strategy::path_too_long())?;
        i += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock_path(spec: &str) -> CPath {
        let spec = Spec::parse(spec.as_bytes()).unwrap();
        LockFile::new(&spec, 4242).unwrap().files.lock
    }

    #[test]
    fn lock_paths_follow_lockfile_simple() {
        assert_eq!(lock_path("lockfile:/srv/data.txt").as_bytes(), b"/srv/data.txt.lock");
        assert_eq!(lock_path("lockfile:/srv/data.txt?ext=.lck").as_bytes(), b"/srv/data.txt.lck");
        assert_eq!(
            lock_path("lockfile:/srv/data.txt?format=%25D/.%25F.%25p%25%25").as_bytes(),
            b"/srv/.data.txt.4242%"
        );
        assert_eq!(lock_path("lockfile:data.txt?format=%25D/%25F.l").as_bytes(), b"./data.txt.l");
        assert_eq!(lock_path("lockfile:/data?format=%25D%25F.l").as_bytes(), b"/data.l");
    }
}
