//! Uncontended acquire + release of each strategy, beside its raw floor and
//! its peers, on the default temp directory and on tmpfs (/dev/shm).
//!
//! cargo bench -p bench --bench uncontended
//!
//! One group per strategy and file system (`<scheme>/<fs>`), each with:
//! * `lockcore`: `try_acquire` + `release` on one handle;
//! * `floor: ...`: the system calls the scheme cannot avoid (bench::floor);
//! * `peer: ...`: liblockfile beside `lockfile` (when installed; otherwise
//!   the bench says it is skipped), and beside `flock` the one-host locks
//!   that need no file-system call: a process-shared robust pthread mutex in
//!   a mapped file, and `std::sync::Mutex`.
//!
//! Strategies come from `Scheme::ALL`: a new one is measured with no change
//! here, and gets its floor once one is added to `bench::floor::for_scheme`.

use std::time::Duration;

use bench::{bench_roots, floor, peer, BenchDir};
use criterion::{criterion_group, criterion_main, Criterion};
use lockcore::{Lock, Scheme};

fn uncontended(c: &mut Criterion) {
    if !peer::LIBLOCKFILE {
        eprintln!("{}", peer::LIBLOCKFILE_MISSING);
    }
    for (fs, root) in bench_roots() {
        let dir = BenchDir::new(&root, fs);
        for &scheme in Scheme::ALL {
            let name = scheme.name();
            let mut group = c.benchmark_group(format!("{name}/{fs}"));
            let mut lock = Lock::open(dir.spec(name, &format!("{name}-lock")).as_bytes()).expect("spec");
            // A strategy that fails even alone is reported, not benchmarked,
            // so that it does not stop the others.
            match lock.try_acquire().map(|_| lock.release(Duration::ZERO)) {
                Ok(Ok(_)) => group.bench_function("lockcore", |b| {
                    b.iter(|| {
                        lock.try_acquire().expect("uncontended");
                        lock.release(Duration::ZERO).expect("release");
                    })
                }),
                failed => {
                    eprintln!("WARNING: {name}/{fs}: lockcore skipped: an uncontended cycle failed: {failed:?}");
                    &mut group
                }
            };
            for (label, make) in floor::for_scheme(name) {
                let mut body = make(&dir.path().join(format!("{name}-floor")));
                group.bench_function(label, |b| b.iter(&mut body));
            }
            match name {
                "lockfile" => match peer::liblockfile_cycle(&dir.path().join("liblockfile.lock")) {
                    Some(mut body) => {
                        group.bench_function("peer: liblockfile create+remove", |b| b.iter(&mut body));
                    }
                    None => eprintln!("{name}/{fs}: {}", peer::LIBLOCKFILE_MISSING),
                },
                "flock" => {
                    let robust = peer::RobustMutex::new(&dir.path().join("pthread.shm"));
                    group.bench_function("peer: pthread robust mutex (shared map)", |b| {
                        b.iter(|| {
                            robust.lock();
                            robust.unlock();
                        })
                    });
                    let mutex = std::sync::Mutex::new(0u64);
                    group.bench_function("peer: std::sync::Mutex", |b| {
                        b.iter(|| *mutex.lock().expect("not poisoned") += 1)
                    });
                }
                _ => {}
            }
            group.finish();
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = uncontended
}
criterion_main!(benches);
