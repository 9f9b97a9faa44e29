//! Uncontended acquire + release of each strategy, beside its raw floor,
//! on the default temp directory and on tmpfs.
//!
//! cargo bench -p bench --bench uncontended

use std::time::Duration;

use bench::{bench_roots, floor, BenchDir};
use criterion::{criterion_group, criterion_main, Criterion};
use lockcore::Lock;

fn uncontended(c: &mut Criterion) {
    for (fs, root) in bench_roots() {
        let dir = BenchDir::new(&root, fs);

        let mut group = c.benchmark_group(format!("lockfile/{fs}"));
        let mut lock = Lock::open(dir.spec("lockfile", "data").as_bytes()).expect("spec");
        group.bench_function("lockcore", |b| {
            b.iter(|| {
                lock.try_acquire().expect("uncontended");
                lock.release(Duration::ZERO).expect("release");
            })
        });
        group.bench_function("floor: O_EXCL create+write+unlink", |b| {
            b.iter(floor::excl_create_write_unlink(&dir.path().join("floor.lock")))
        });
        group.finish();

        let mut group = c.benchmark_group(format!("mkdir/{fs}"));
        let mut lock = Lock::open(dir.spec("mkdir", "lockdir").as_bytes()).expect("spec");
        group.bench_function("lockcore", |b| {
            b.iter(|| {
                lock.try_acquire().expect("uncontended");
                lock.release(Duration::ZERO).expect("release");
            })
        });
        group.bench_function("floor: mkdir+rmdir", |b| b.iter(floor::mkdir_rmdir(&dir.path().join("floor.dir"))));
        group.finish();

        let mut group = c.benchmark_group(format!("flock/{fs}"));
        let mut lock = Lock::open(dir.spec("flock", "flockfile").as_bytes()).expect("spec");
        group.bench_function("lockcore", |b| {
            b.iter(|| {
                lock.try_acquire().expect("uncontended");
                lock.release(Duration::ZERO).expect("release");
            })
        });
        group.bench_function("floor: flock lock+unlock", |b| {
            b.iter(floor::flock_on_open_fd(&dir.path().join("floor.flock")))
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = uncontended
}
criterion_main!(benches);
