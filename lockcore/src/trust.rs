//! Who a lock trusts, and the modes of the files it creates: both follow
//! from the spec's `mode`, the one statement of who may take the lock.
//!
//! `mode` is permission bits: `0600` (the default) keeps the lock to its
//! owner, `0660` shares it with the owner's group, `0666` with everyone.
//! Every file the library creates gets exactly these bits, whatever the
//! umask, except where its kind needs otherwise:
//! * records that nobody may rewrite in place (a `lockfile` lock file, the
//!   record inside a `mkdir` lock) get only the read bits, because
//!   LockFile::Simple overwrites a lock file it can write;
//! * directories (a `mkdir` lock) get a search bit with each read bit.
//!
//! Each class of users reads and writes the lock's files, or neither: a
//! `mode` such as `0644` is refused by the spec parser, because a user who
//! may open a file only to read it can still hold a shared lock on it, and
//! a shared lock on a guard, a lease or a queue keeps every writer out.
//!
//! A file that is already there is used only if nobody outside those users
//! could have written it: refused when its permissions let a class write
//! it that `mode` does not let take the lock, when the group that may write
//! it is not one of the caller's (for a lock shared with a group), or, for
//! a private lock, when it belongs to another user. The directory that
//! holds the lock must keep untrusted users from replacing the lock's
//! files: it belongs to the caller or to root (or, for a lock shared with a
//! group, to that group), and no class outside the lock's users may write
//! it, unless the lock is private and the sticky bit lets each user remove
//! and rename only their own files (as in `/tmp`; a lock shared with a
//! group cannot live there, since anyone may create a file there first).
//! So a file planted by another local user, with a cooldown of centuries, a
//! forged fence or the pid of a process for a root holder to signal, is
//! never believed.

use crate::error::{Error, FileError, FileRole, Untrusted};
use crate::sys::{self, FileStat};

/// `mode` when the spec gives none: the lock is its owner's alone.
pub const DEFAULT_MODE: u32 = 0o600;

/// The trust and the modes that follow from a spec's `mode`, for the user
/// this process runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sharing {
    mode: u32,
    /// The effective uid, read when the lock is opened.
    me: u32,
    /// The groups of this process, read when the lock is opened: the
    /// groups a lock shared with "the group" is shared with.
    groups: [u32; sys::GROUPS_CAPACITY],
    group_count: usize,
}

impl Sharing {
    /// `mode` as the spec parser accepted it: permission bits only, owner
    /// read and write included.
    pub fn new(mode: u32) -> Sharing {
        let (groups, group_count) = sys::groups();
        Sharing { mode: mode & 0o777, me: sys::geteuid(), groups, group_count }
    }

    /// Whether the lock is shared with a group but not with everyone.
    fn with_group_only(self) -> bool {
        self.mode & 0o060 != 0 && self.mode & 0o006 == 0
    }

    /// Whether the lock is shared with everyone.
    fn with_everyone(self) -> bool {
        self.mode & 0o006 != 0
    }

    fn is_my_group(self, gid: u32) -> bool {
        self.groups[..self.group_count].contains(&gid)
    }

    /// The bits of the files every user of the lock reads and writes: the
    /// guard, the lease, the queue, the `flock` file the library creates.
    pub fn mode(self) -> u32 {
        self.mode
    }

    /// The bits of a record nobody may rewrite in place: the read bits only.
    pub fn record_mode(self) -> u32 {
        self.mode & 0o444
    }

    /// The bits of a lock directory: a search bit with each read bit.
    pub fn dir_mode(self) -> u32 {
        self.mode | (self.mode & 0o444) >> 2
    }

    /// Whether users other than the files' owner may write them (a group
    /// or everyone shares the lock).
    pub fn writable_by_others(self) -> bool {
        self.mode & 0o022 != 0
    }

    /// Whether the lock is kept to its owner (no bit for group or others).
    pub fn is_private(self) -> bool {
        self.mode & 0o077 == 0
    }

    /// Whether a record this lock finds (a lock file, a lock directory, a
    /// symlink, the file `flock` locks) may be believed: nobody outside the
    /// lock's users could have written it. Symbolic links have no
    /// permissions of their own; only their owner counts.
    pub fn check(self, file: FileRole, stat: &FileStat) -> Result<(), Error> {
        // The group and other write bits are the ones that matter: the
        // owner can always change the bits of its own file.
        self.check_bits(file, stat, if stat.is_symlink() { 0 } else { 0o022 })
    }

    /// Whether a file the lock's changes are ordered by (a guard, a lease,
    /// a queue) may be used: nobody outside the lock's users could have
    /// written it, nor even read it, since a reader can hold a shared lock
    /// on it that keeps every writer out.
    pub fn check_locked(self, file: FileRole, stat: &FileStat) -> Result<(), Error> {
        self.check_bits(file, stat, 0o066)
    }

    fn check_bits(self, file: FileRole, stat: &FileStat, guarded_bits: u32) -> Result<(), Error> {
        if let Some(why) = self.open_to_outsiders(stat, guarded_bits) {
            return Err(FileError::untrusted(file, why, stat));
        }
        if self.is_private() && stat.uid != self.me {
            return Err(FileError::untrusted(file, Untrusted::OwnedByOther, stat));
        }
        Ok(())
    }

    /// Whether the directory that holds the lock keeps untrusted users from
    /// replacing the lock's files (renaming one aside and another in its
    /// place breaks any lock): its owner is the caller, root, or, for a
    /// lock shared with a group, that group's; and the users who may write
    /// it are the lock's users, or, for a private lock, anyone the sticky
    /// bit keeps from touching files that are not theirs.
    pub fn check_dir(self, stat: &FileStat) -> Result<(), Error> {
        if !self.owner_trusted(stat) {
            return Err(FileError::untrusted(FileRole::Directory, Untrusted::OwnedByOther, stat));
        }
        match self.open_to_outsiders(stat, 0o022) {
            // For a private lock, the sticky bit keeps the others from
            // touching what is not theirs (a group cannot be the lock's).
            Some(Untrusted::WritableByOthers) if is_sticky(stat) && self.is_private() => Ok(()),
            Some(why) => Err(FileError::untrusted(FileRole::Directory, why, stat)),
            None => Ok(()),
        }
    }

    /// Whether `entry`, a name on the way to the lock's directory (one of
    /// its parents, or a symlink such as `/var/lock`), stays what it is in
    /// `dir`, the directory that holds it: whoever may replace it there
    /// sends every later open of the lock's files to another directory of
    /// their choosing, where a second holder takes the lock while the first
    /// holds it in the old one. `dir` is judged as the lock's own directory
    /// is, except that in a sticky one (`/tmp`) only the entry's owner and
    /// the directory's may replace the entry, so the entry must belong to
    /// someone the lock trusts too, whatever the lock's mode. Refused for
    /// `dir`'s sake, the error is about [`FileRole::Directory`]; for the
    /// entry's, about [`FileRole::Way`].
    pub fn check_way(self, dir: &FileStat, entry: &FileStat) -> Result<(), Error> {
        if !self.owner_trusted(dir) {
            return Err(FileError::untrusted(FileRole::Directory, Untrusted::OwnedByOther, dir));
        }
        match self.open_to_outsiders(dir, 0o022) {
            None => return Ok(()),
            Some(why) if !is_sticky(dir) => return Err(FileError::untrusted(FileRole::Directory, why, dir)),
            Some(_) => {}
        }
        if !self.owner_trusted(entry) {
            return Err(FileError::untrusted(FileRole::Way, Untrusted::OwnedByOther, entry));
        }
        Ok(())
    }

    /// Why someone outside the lock's users may use `stat` as its `bits`
    /// (write bits, or read and write) allow, if they may: a class of users
    /// the lock's mode leaves out, or, for a lock shared with a group, a
    /// group that is none of the caller's.
    fn open_to_outsiders(self, stat: &FileStat, bits: u32) -> Option<Untrusted> {
        let open_to = stat.permissions() & bits;
        if open_to & !self.mode != 0 {
            Some(Untrusted::WritableByOthers)
        } else if self.with_group_only() && open_to & 0o070 != 0 && !self.is_my_group(stat.gid) {
            Some(Untrusted::OtherGroup(stat.gid))
        } else {
            None
        }
    }

    /// Whether the owner of a directory (or of an entry on the way to the
    /// lock's) is one the lock trusts: the caller, root, anyone for a lock
    /// shared with everyone, the group's for a lock shared with a group.
    fn owner_trusted(self, stat: &FileStat) -> bool {
        stat.uid == self.me
            || stat.uid == 0
            || self.with_everyone()
            || (self.with_group_only() && self.is_my_group(stat.gid))
    }
}

fn is_sticky(stat: &FileStat) -> bool {
    stat.permissions() & 0o1000 != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{ErrorKind, Problem};

    fn stat(mode: u32, uid: u32) -> FileStat {
        FileStat { dev: 1, ino: 1, mode: libc::S_IFREG | mode, uid, gid: 0, nlink: 1, size: 0, mtime_ns: 0 }
    }

    fn why(result: Result<(), Error>) -> Option<Untrusted> {
        match result {
            Ok(()) => None,
            Err(Error::File(e)) => match e.problem {
                Problem::Untrusted(why) => Some(why),
                other => panic!("{other:?}"),
            },
            Err(other) => panic!("{other:?}"),
        }
    }

    #[test]
    fn modes_follow_from_who_may_take_the_lock() {
        let group = Sharing::new(0o660);
        assert_eq!((group.mode(), group.record_mode(), group.dir_mode()), (0o660, 0o440, 0o770));
        let private = Sharing::new(DEFAULT_MODE);
        assert_eq!((private.mode(), private.record_mode(), private.dir_mode()), (0o600, 0o400, 0o700));
        assert!(private.is_private() && !group.is_private());
        assert_eq!(Sharing::new(0o666).mode(), 0o666);
    }

    #[test]
    fn a_file_others_could_write_is_not_believed() {
        let me = sys::geteuid();
        let private = Sharing::new(0o600);
        assert_eq!(why(private.check(FileRole::Guard, &stat(0o600, me))), None);
        assert_eq!(why(private.check(FileRole::Lock, &stat(0o644, me))), None, "a readable record is not writable");
        assert_eq!(
            why(private.check_locked(FileRole::Guard, &stat(0o644, me))),
            Some(Untrusted::WritableByOthers),
            "a guard others can read, others can hold locked"
        );
        assert_eq!(why(private.check(FileRole::Guard, &stat(0o666, me))), Some(Untrusted::WritableByOthers));
        assert_eq!(why(private.check(FileRole::Guard, &stat(0o600, me + 1))), Some(Untrusted::OwnedByOther));
        let group = Sharing::new(0o660);
        let mine = sys::groups().0[0];
        assert_eq!(
            why(group.check(FileRole::Guard, &FileStat { gid: mine, ..stat(0o660, me + 1) })),
            None,
            "a group member's file"
        );
        let foreign = (1..).find(|gid| !group.is_my_group(*gid)).unwrap();
        assert_eq!(
            why(group.check(FileRole::Guard, &FileStat { gid: foreign, ..stat(0o660, me + 1) })),
            Some(Untrusted::OtherGroup(foreign)),
            "a file another group may write"
        );
        let message = group.check(FileRole::Guard, &FileStat { gid: foreign, ..stat(0o660, me + 1) });
        let message = std::format!("{}", message.unwrap_err());
        assert!(message.contains(&std::format!("group (gid {foreign}), which this process is not in")), "{message}");
        assert_eq!(why(group.check(FileRole::Guard, &stat(0o662, me + 1))), Some(Untrusted::WritableByOthers));
        let everyone = Sharing::new(0o666);
        assert_eq!(why(everyone.check(FileRole::Guard, &stat(0o666, me + 1))), None);
        let err = private.check(FileRole::Lock, &stat(0o666, me)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Untrusted);
        let Error::File(e) = err else { panic!() };
        assert_eq!((e.owner_uid, e.mode), (Some(me), Some(0o666)));
    }

    #[test]
    fn a_sticky_directory_protects_the_files_in_it() {
        let me = sys::geteuid();
        let dir = |mode| FileStat { mode: libc::S_IFDIR | mode, ..stat(0, me) };
        let private = Sharing::new(0o600);
        assert_eq!(why(private.check_dir(&dir(0o1777))), None, "like /tmp");
        assert_eq!(why(private.check_dir(&dir(0o755))), None);
        assert_eq!(why(private.check_dir(&dir(0o777))), Some(Untrusted::WritableByOthers));
        let group = Sharing::new(0o660);
        let mine = sys::groups().0[0];
        let shared = |mode, gid| FileStat { gid, ..dir(mode) };
        assert_eq!(why(group.check_dir(&shared(0o2770, mine))), None, "a group-shared directory");
        assert_eq!(
            why(group.check_dir(&shared(0o1777, mine))),
            Some(Untrusted::WritableByOthers),
            "anyone may plant a file in /tmp before a lock shared with a group makes it"
        );
        let foreign = (1..).find(|gid| !group.is_my_group(*gid)).unwrap();
        assert_eq!(why(group.check_dir(&shared(0o2770, foreign))), Some(Untrusted::OtherGroup(foreign)));
        let theirs = FileStat { uid: me + 1, ..dir(0o755) };
        assert_eq!(why(private.check_dir(&theirs)), Some(Untrusted::OwnedByOther), "its owner can rename our files");
        assert_eq!(why(Sharing::new(0o666).check_dir(&theirs)), None);
        if me != 0 {
            assert_eq!(why(private.check_dir(&FileStat { uid: 0, ..dir(0o755) })), None, "root's directory");
        }
    }

    #[test]
    fn a_name_on_the_way_to_the_lock_must_stay_put() {
        let me = sys::geteuid();
        let dir = |mode, uid| FileStat { mode: libc::S_IFDIR | mode, ..stat(0, uid) };
        let private = Sharing::new(0o600);
        let group = Sharing::new(0o660);
        // Of a group none of the lock's users is in: another user's own.
        let foreign = (1..).find(|gid| !group.is_my_group(*gid)).unwrap();
        let link = |uid| FileStat { mode: libc::S_IFLNK | 0o777, gid: foreign, ..stat(0, uid) };
        let tmp = dir(0o1777, 0);
        assert_eq!(why(private.check_way(&tmp, &link(me))), None, "my own link in /tmp");
        assert_eq!(why(group.check_way(&tmp, &dir(0o2770, 0))), None, "root's directory in /tmp");
        assert_eq!(
            why(private.check_way(&dir(0o755, 0), &link(me + 1))),
            None,
            "another's link where only root writes"
        );
        for sharing in [private, group] {
            assert_eq!(
                why(sharing.check_way(&tmp, &link(me + 1))),
                Some(Untrusted::OwnedByOther),
                "another user's link in /tmp, which they may point elsewhere at any time"
            );
            assert_eq!(why(sharing.check_way(&dir(0o777, 0), &link(me))), Some(Untrusted::WritableByOthers));
        }
        assert_eq!(why(Sharing::new(0o666).check_way(&tmp, &link(me + 1))), None, "everyone is the lock's user");
    }
}
