//! A program that closes descriptors it did not open (a double close, a
//! loop that closes every descriptor above 2) frees the numbers a handle
//! keeps between its calls, and its next open takes them. The handle must
//! notice: never lock, read or write the program's file through such a
//! number, never close it, and still exclude every other holder.
//!
//! One test in its own binary: it closes descriptors by number, which
//! would pull them from under the other tests of a shared process.

mod common;

use std::fs;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::path::{Path, PathBuf};

use common::*;
use lockcore::ErrorKind;

/// The descriptors of this process open on a file under `dir`.
fn descriptors_under(dir: &Path) -> Vec<(i32, PathBuf)> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(number) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        if let Ok(target) = fs::read_link(entry.path()) {
            if target.starts_with(dir) {
                found.push((number, target));
            }
        }
    }
    found
}

/// Whether descriptor `fd` is open.
fn is_open(fd: i32) -> bool {
    // SAFETY: F_GETFD only asks about the number.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

#[test]
fn a_kept_descriptor_the_program_closed_and_reused_is_left_to_it() {
    each_file_scheme("closed-kept-fd", |scheme, dir| {
        let spec = scheme.spec(dir.path(), "");
        let mut ours = open_lock(&spec);
        ours.try_acquire().expect("a free lock");
        ours.release(std::time::Duration::ZERO).expect("released");
        let kept = descriptors_under(dir.path());
        if kept.is_empty() {
            // This scheme keeps no descriptor between calls (`shm` maps its
            // file): nothing to take from it.
            return;
        }
        // The program closes them and opens data files of its own under the
        // same numbers.
        let data_dir = dir.join("data");
        fs::create_dir(&data_dir).unwrap();
        let mut data = Vec::new();
        for (i, (number, was)) in kept.iter().enumerate() {
            // SAFETY: closes a number this test owns no `File` for; the
            // handle that kept it must cope.
            unsafe { libc::close(*number) };
            let path = data_dir.join(format!("data-{i}"));
            let content = format!("the program's data {i}, where {} was\n", was.display());
            fs::write(&path, &content).unwrap();
            let file = fs::OpenOptions::new().read(true).write(true).open(&path).unwrap().into_raw_fd();
            if file != *number {
                // SAFETY: both numbers are open and the test's; dup2 puts the
                // file under `number`, and the first goes.
                unsafe {
                    assert_eq!(libc::dup2(file, *number), *number);
                    libc::close(file);
                }
            }
            data.push((*number, path, content));
        }

        ours.try_acquire().expect("the lock, through files opened anew");
        let mut other = open_lock(&spec);
        assert_eq!(kind(other.try_acquire()), Err(ErrorKind::Busy), "{scheme:?}: another handle is kept out");
        assert_eq!(ours.release(std::time::Duration::ZERO).map(|_| ()), Ok(()));
        other.try_acquire().expect("free again once released");
        other.release(std::time::Duration::ZERO).unwrap();
        drop(ours);

        for (number, path, content) in &data {
            assert_eq!(&fs::read_to_string(path).unwrap(), content, "{scheme:?}: the program's file was written");
            assert!(is_open(*number), "{scheme:?}: the program's descriptor {number} was closed");
            // No lock of ours is left on it: another description takes one.
            let probe = fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
            // SAFETY: a whole-file write lock asked of an open descriptor.
            let mut range: libc::flock = unsafe { std::mem::zeroed() };
            range.l_type = libc::F_WRLCK as libc::c_short;
            range.l_whence = libc::SEEK_SET as libc::c_short;
            // SAFETY: a plain fcntl with a valid flock.
            let ofd = unsafe { libc::fcntl(probe.as_raw_fd(), libc::F_OFD_SETLK, &range) };
            assert_eq!(ofd, 0, "{scheme:?}: an OFD lock was left on the program's file");
            // SAFETY: flock on an open descriptor.
            let flock = unsafe { libc::flock(probe.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            assert_eq!(flock, 0, "{scheme:?}: a flock was left on the program's file");
            // SAFETY: the number is the test's own now.
            unsafe { libc::close(*number) };
        }
    });
}

fn kind<T>(result: Result<T, lockcore::Error>) -> Result<(), ErrorKind> {
    result.map(|_| ()).map_err(|e| e.kind())
}
